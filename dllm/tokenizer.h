/* tokenizer.h: HF `tokenizers` tokenizer.json files (byte-level BPE as used by Qwen3
 * and LLaDA, plus the project's char-level tokenizer for tiny models).
 *
 * encode(text) follows the HF pipeline exactly:
 *   1. added tokens are cut out of the raw text first (leftmost match, longest at that
 *      position; lstrip/rstrip/single_word honoured); tokens flagged "normalized" are
 *      matched again on the normalized remainder;
 *   2. normalizer (NFC/NFD/NFKC/NFKD/Lowercase, or a Sequence of them);
 *   3. pre-tokenizer: Split (PCRE2 regex or literal; behaviours Removed, Isolated,
 *      MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
 *      (add_prefix_space, use_regex), Digits, or a Sequence of them;
 *   4. model: BPE (merges applied lowest rank first, leftmost on ties; unk, fuse_unk,
 *      byte_fallback, ignore_merges) or WordLevel;
 *   5. with add_special: the post_processor's single-sequence template
 *      (TemplateProcessing, Bert/Roberta, ByteLevel = nothing, or a Sequence).
 * decode(ids) maps ids to token strings, drops special tokens if asked, then runs the
 * decoder (ByteLevel, Fuse, ByteFallback or a Sequence; no decoder = join with " ").
 * Invalid UTF-8 never gets replaced: decode returns the raw bytes, so for byte-level
 * tokenizers decode(encode(s)) == s for every byte string s (invalid UTF-8 in the input
 * is encoded byte by byte, each invalid byte its own pre-token).
 *
 * A loaded tokenizer is read-only except for a pre-token cache and regex scratch:
 * use one handle per thread when encoding from several threads.
 *
 * Char-level tokenizer (tiny models): a tokenizer.json that HF loads and encodes the
 * same way: BPE with a single-character vocab, no merges, no normalizer/pre-tokenizer,
 * Fuse decoder, a template adding BOS. Fixed ids:
 *   0 <|endoftext|> (EOS, pad)  1 <|startoftext|> (BOS)  2 <|mdm_mask|>
 *   3 <|start_header_id|>  4 <|end_header_id|>  5 <|eot_id|>
 *   6 "\n", 7..101 the printable ASCII characters 32..126 in order,
 *   102 <|unk|>: every other character (each one) maps to it. */
#ifndef DLLM_TOKENIZER_H
#define DLLM_TOKENIZER_H

#include "kernels/base.h"

typedef struct dllm_tokenizer dllm_tokenizer;

/* Byte range [start, end) of the original text that produced a token. */
typedef struct {
    uint32_t start, end;
} dllm_tok_offset;

/* Loads a tokenizer.json. On failure *tok is NULL and err says
 * "FILE:line:col: message" (JSON syntax) or "FILE: model.vocab: message". */
int dllm_tokenizer_load(dllm_tokenizer **tok, const char *path, dllm_err *err);
/* Same from memory; name is used in messages. */
int dllm_tokenizer_load_buffer(dllm_tokenizer **tok, const char *name, const char *data,
                               size_t len, dllm_err *err);
void dllm_tokenizer_free(dllm_tokenizer *tok);

/* text: len bytes (any bytes; NUL allowed). *ids is malloc'd (caller frees). */
int dllm_tokenizer_encode(dllm_tokenizer *tok, const char *text, size_t len, bool add_special,
                          int32_t **ids, size_t *n, dllm_err *err);
/* As encode, plus *offsets (malloc'd, n entries) into text; template tokens get (0,0). */
int dllm_tokenizer_encode_offsets(dllm_tokenizer *tok, const char *text, size_t len,
                                  bool add_special, int32_t **ids, dllm_tok_offset **offsets,
                                  size_t *n, dllm_err *err);
/* *out is malloc'd, NUL-terminated (len excludes the NUL). An id outside the vocab is
 * bad input (DLLM_EXIT_INPUT). */
int dllm_tokenizer_decode(const dllm_tokenizer *tok, const int32_t *ids, size_t n,
                          bool skip_special, char **out, size_t *len, dllm_err *err);

/* Id of a token string (added tokens first, then the model vocab); -1 if none. */
int32_t dllm_tokenizer_token_to_id(const dllm_tokenizer *tok, const char *token);
/* Token string of an id (as stored in the file: byte-level symbols for BPE), or NULL. */
const char *dllm_tokenizer_id_to_token(const dllm_tokenizer *tok, int32_t id);
/* 1 + the largest id of the vocab and the added tokens. */
size_t dllm_tokenizer_vocab_size(const dllm_tokenizer *tok);
/* Whether id is an added token flagged special. */
bool dllm_tokenizer_is_special(const dllm_tokenizer *tok, int32_t id);

/* Writes the char-level tokenizer.json described above. */
int dllm_tokenizer_write_char(const char *path, dllm_err *err);
size_t dllm_tokenizer_char_vocab_size(void);

enum {
    DLLM_CHAR_EOS = 0, DLLM_CHAR_BOS = 1, DLLM_CHAR_MASK = 2, DLLM_CHAR_START_HEADER = 3,
    DLLM_CHAR_END_HEADER = 4, DLLM_CHAR_EOT = 5, DLLM_CHAR_NEWLINE = 6,
    DLLM_CHAR_FIRST_PRINTABLE = 7, DLLM_CHAR_UNK = 102
};

#endif
