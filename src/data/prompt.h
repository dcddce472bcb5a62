/* prompt.h: text prompt -> token ids, the same way everywhere (generate, the
 * RL loop, evaluation): the chat format wraps the text (plain: BOS + text),
 * then the tokenizer encodes it. */
#ifndef DLLM_PROMPT_H
#define DLLM_PROMPT_H

#include "dllm/chat.h"
#include "dllm/model_config.h"
#include "dllm/tokenizer.h"

int prompt_encode(dllm_tokenizer *tok, dllm_chat_format fmt, const dllm_model_config *mc,
                  const char *text, int32_t **ids, int *n, dllm_err *err);
/* The same; with d1, d1's reasoning format instruction (DLLM_D1_SYSTEM_PROMPT)
 * and a blank line go before the text, as d1 builds its prompts. */
int prompt_encode_d1(dllm_tokenizer *tok, dllm_chat_format fmt, const dllm_model_config *mc,
                     const char *text, bool d1, int32_t **ids, int *n, dllm_err *err);

/* How many characters of text became the unknown token "<|unk|>" in ids (what the
 * char tokenizer makes of every non-ASCII character); 0 for a tokenizer without
 * it, or text that spells the token itself. */
size_t prompt_unknown_chars(const dllm_tokenizer *tok, const char *text, const int32_t *ids,
                            size_t n);

/* Text of a generated completion: its first L tokens without a final EOS, with
 * special tokens skipped. Ids beyond the tokenizer (a model's embedding may
 * have more rows than the tokenizer has tokens, as in padded vocabularies)
 * decode to nothing, as in HF decoding. *text malloc'd, NUL-terminated. */
int completion_decode(dllm_tokenizer *tok, const int32_t *gen, int L, int eos_id, char **text,
                      size_t *len, dllm_err *err);

#endif
