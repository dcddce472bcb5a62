/* tokenizer.c: HF tokenizer.json (byte-level BPE, WordLevel, char-level); see tokenizer.h.
 *
 * Data layout: one id -> string table (id_tok) for the model vocab and the added tokens;
 * open-addressing hash maps for string -> id (vocab, added tokens) and for the merges,
 * keyed by the id pair (left << 32 | right) -> (rank, merged id). BPE per pre-token is
 * the rank-min merge loop (a binary heap of candidate pairs for long pre-tokens, a linear
 * scan for short ones: both merge the lowest rank first, leftmost on ties, as HF does).
 * Finished pre-tokens go to a direct-mapped cache (a slot per hash; a collision evicts).
 * One file on purpose: loading, pre-tokenisation, BPE and decoding share these private
 * tables and their invariants, which a split would have to expose in a header. */
#include "dllm/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ small vectors */

typedef struct { int32_t *p; size_t n, cap; } ivec;
typedef struct { dllm_tok_offset *p; size_t n, cap; } ovec;
typedef struct { char *p; size_t n, cap; } bbuf;

static void iv_push(ivec *v, int32_t x)
{
    if (v->n == v->cap) { v->cap = v->cap ? 2 * v->cap : 64; v->p = dllm_realloc(v->p, v->cap * sizeof *v->p); }
    v->p[v->n++] = x;
}
static void ov_push(ovec *v, uint32_t s, uint32_t e)
{
    if (v->n == v->cap) { v->cap = v->cap ? 2 * v->cap : 64; v->p = dllm_realloc(v->p, v->cap * sizeof *v->p); }
    v->p[v->n].start = s; v->p[v->n].end = e; v->n++;
}
static void bb_put(bbuf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = b->n + n + 1 > 2 * b->cap ? b->n + n + 1 : 2 * b->cap;
        b->p = dllm_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* ------------------------------------------------------------------ hashing */

static uint64_t hash_bytes(const void *data, size_t n)
{
    /* FNV-1a with a final avalanche: keys are short token strings. */
    const uint8_t *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return h;
}
static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

/* string -> int32, keys borrowed (they live in id_tok or the added-token list). */
typedef struct { const char *k; uint32_t klen; int32_t v; } sm_slot;
typedef struct { sm_slot *s; size_t cap, n; } strmap;

static void sm_init(strmap *m, size_t expect)
{
    size_t cap = 16;
    while (cap < 2 * expect + 16) cap *= 2;
    m->s = dllm_calloc(cap, sizeof *m->s);
    m->cap = cap; m->n = 0;
}
static sm_slot *sm_find(const strmap *m, const char *k, size_t klen)
{
    size_t mask = m->cap - 1, i = hash_bytes(k, klen) & mask;
    for (;;) {
        sm_slot *s = &m->s[i];
        if (!s->k || (s->klen == klen && !memcmp(s->k, k, klen))) return s;
        i = (i + 1) & mask;
    }
}
static void sm_put(strmap *m, const char *k, size_t klen, int32_t v)
{
    if (2 * (m->n + 1) > m->cap) {
        strmap big;
        sm_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].k) *sm_find(&big, m->s[i].k, m->s[i].klen) = m->s[i], big.n++;
        free(m->s);
        *m = big;
    }
    sm_slot *s = sm_find(m, k, klen);
    if (!s->k) m->n++;
    s->k = k; s->klen = (uint32_t)klen; s->v = v;
}
static int32_t sm_get(const strmap *m, const char *k, size_t klen)
{
    if (!m->s) return -1;
    sm_slot *s = sm_find(m, k, klen);
    return s->k ? s->v : -1;
}

/* (left id, right id) -> (rank, merged id) */
typedef struct { uint64_t key; uint32_t rank; int32_t id; } mm_slot;
typedef struct { mm_slot *s; size_t cap; } mergemap;
#define MM_EMPTY UINT64_MAX

static mm_slot *mm_find(const mergemap *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = hash_u64(key) & mask;
    while (m->s[i].key != MM_EMPTY && m->s[i].key != key) i = (i + 1) & mask;
    return &m->s[i];
}
static inline const mm_slot *mm_get(const mergemap *m, int32_t a, int32_t b)
{
    if (!m->cap || a < 0 || b < 0) return NULL;
    const mm_slot *s = mm_find(m, (uint64_t)(uint32_t)a << 32 | (uint32_t)b);
    return s->key == MM_EMPTY ? NULL : s;
}

/* ------------------------------------------------------------------ the tokenizer */

typedef struct {
    char *s; uint32_t len; // content (normalized content for normalized tokens)
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} added_tok;

/* One matcher per added-token set (raw or normalized): tokens bucketed by first byte,
 * longest first, so the first hit at a position is the longest. */
typedef struct {
    added_tok **by_len; // (n) sorted by first byte, then length descending
    size_t n;
    uint32_t first[257]; // by_len[first[c] .. first[c+1]) start with byte c
} added_set;

enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWER };
enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_DIGITS };
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { DEC_BYTELEVEL, DEC_FUSE, DEC_BYTEFALLBACK };

typedef struct {
    int kind;
    pcre2_code *re; // Split pattern, ByteLevel's GPT-2 regex, Digits
    int behavior;
    bool invert, add_prefix_space;
} pre_step;

typedef struct { char *key; uint32_t klen, n; int32_t *ids; uint32_t *lens; } cache_ent;
#define CACHE_SLOTS 8192
#define CACHE_MAX_KEY 256

struct dllm_tokenizer {
    char *name;           // file name for messages
    bool is_bpe;          // else WordLevel
    char **id_tok;        // (V) token string by id, NULL for holes
    uint32_t *id_len;     // (V)
    uint8_t *id_flags;    // (V) bit 0 added, bit 1 special
    size_t V;
    strmap vocab;         // model vocab
    strmap added_map;     // added token content -> id
    mergemap merges;
    int32_t unk_id;
    bool fuse_unk, byte_fallback, ignore_merges;
    bool bytelevel;       // a ByteLevel pre-tokenizer: the model sees byte symbols
    int32_t byte_id[256]; // vocab id of each byte's byte-level symbol (-1 if none)
    int32_t bf_id[256];   // vocab id of "<0xXX>" (byte_fallback)
    added_tok *added; size_t n_added;
    added_set raw_set, norm_set;
    int norm[8]; size_t n_norm;
    pre_step pre[8]; size_t n_pre;
    int dec[8]; size_t n_dec; bool has_decoder;
    ivec post_prefix, post_suffix;
    pcre2_match_data *md;
    cache_ent *cache;     // (CACHE_SLOTS)
    char **retired; size_t n_retired; // replaced id strings (see add_id_string)
    /* per-encode scratch */
    bbuf scratch;
};

#define FLAG_ADDED 1
#define FLAG_SPECIAL 2

/* GPT-2 byte <-> unicode map: printable bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order, so every byte has a visible, non-space code point. */
static uint32_t byte_cp[256];
static int16_t cp_byte[324];
static void bytelevel_init(void)
{
    if (byte_cp['!']) return;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
    for (int c = 0; c < 324; c++) cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) cp_byte[byte_cp[b]] = (int16_t)b;
}
static size_t utf8_put(uint32_t cp, char *out)
{
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

/* Length of the valid UTF-8 character at p (n bytes available), 0 if invalid. */
static size_t utf8_valid_len(const uint8_t *p, size_t n, uint32_t *cp)
{
    uint8_t c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len; uint32_t v, min;
    if ((c & 0xe0) == 0xc0) { len = 2; v = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; v = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

static bool cp_is_space(uint32_t c)
{
    /* Unicode White_Space */
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}
static bool cp_is_word(uint32_t c)
{
    if (c == '_') return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}
/* The code point ending just before position i (i > 0) of valid text. */
static uint32_t cp_before(const uint8_t *s, size_t i, size_t *start)
{
    size_t j = i - 1;
    while (j > 0 && (s[j] & 0xc0) == 0x80 && i - j < 4) j--;
    uint32_t cp = s[i - 1];
    if (!utf8_valid_len(s + j, i - j, &cp)) j = i - 1, cp = s[i - 1];
    if (start) *start = j;
    return cp;
}

/* ------------------------------------------------------------------ errors */

static int bad(const dllm_tokenizer *t, dllm_err *err, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const dllm_tokenizer *t, dllm_err *err, const char *where, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s: %s", t->name, where, msg);
}

static const char *jtype(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Optional boolean field: absent or null keeps *out. */
static int get_bool(const dllm_tokenizer *t, const json_t *o, const char *key, const char *where,
                    bool *out, dllm_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(t, err, where, "'%s' must be a boolean, found %s", key, jtype(v));
    *out = json_is_true(v);
    return 0;
}
/* Optional string field: absent or null gives NULL. */
static int get_str(const dllm_tokenizer *t, const json_t *o, const char *key, const char *where,
                   const char **out, dllm_err *err)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return bad(t, err, where, "'%s' must be a string, found %s", key, jtype(v));
    *out = json_string_value(v);
    return 0;
}
static int get_type(const dllm_tokenizer *t, const json_t *o, const char *where, const char **type,
                    dllm_err *err)
{
    if (!json_is_object(o)) return bad(t, err, where, "must be an object, found %s", jtype(o));
    if (get_str(t, o, "type", where, type, err)) return err->code;
    if (!*type) return bad(t, err, where, "missing 'type'");
    return 0;
}

/* ------------------------------------------------------------------ regex */

#define WS_CLASS "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* HF compiles patterns with Oniguruma, where \s is Unicode White_Space; PCRE2's \s (UCP)
 * leaves out U+0085. Rewrite \s and \S into explicit classes so both agree. */
static char *regex_translate(const char *pat, size_t len)
{
    bbuf b = {0};
    bool in_class = false;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char n = pat[++i];
            if (n == 's') bb_put(&b, in_class ? WS_CLASS : "[" WS_CLASS "]", in_class ? strlen(WS_CLASS) : strlen(WS_CLASS) + 2);
            else if (n == 'S' && !in_class) bb_put(&b, "[^" WS_CLASS "]", strlen(WS_CLASS) + 3);
            else { bb_put(&b, &c, 1); bb_put(&b, &n, 1); }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            bb_put(&b, &c, 1);
            if (i + 1 < len && pat[i + 1] == '^') bb_put(&b, &pat[++i], 1);
            if (i + 1 < len && pat[i + 1] == ']') bb_put(&b, &pat[++i], 1);
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') {
            const char *end = NULL;
            for (size_t j = i + 2; j + 1 < len; j++)
                if (pat[j] == ':' && pat[j + 1] == ']') { end = pat + j + 2; break; }
            if (end) { bb_put(&b, pat + i, (size_t)(end - (pat + i))); i = (size_t)(end - pat) - 1; continue; }
        }
        if (in_class && c == ']') in_class = false;
        bb_put(&b, &c, 1);
    }
    if (!b.p) bb_put(&b, "", 0);
    return b.p;
}

static int regex_compile(dllm_tokenizer *t, const char *pat, size_t len, bool literal, const char *where,
                         pcre2_code **out, dllm_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    char *tr = literal ? NULL : regex_translate(pat, len);
    *out = pcre2_compile((PCRE2_SPTR)(literal ? pat : tr), literal ? len : strlen(tr),
                         PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &ec, &eo, NULL);
    free(tr);
    if (!*out) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(ec, buf, sizeof buf);
        return bad(t, err, where, "bad regex at offset %zu: %s", (size_t)eo, (const char *)buf);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); // optional: falls back to the interpreter
    return 0;
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------ loading */

/* Replaced strings are kept until free: hash maps borrow them as keys. */
static void add_id_string(dllm_tokenizer *t, int32_t id, const char *s, size_t len)
{
    if (t->id_tok[id]) {
        t->retired = dllm_realloc(t->retired, (t->n_retired + 1) * sizeof *t->retired);
        t->retired[t->n_retired++] = t->id_tok[id];
    }
    t->id_tok[id] = dllm_malloc(len + 1);
    memcpy(t->id_tok[id], s, len);
    t->id_tok[id][len] = 0;
    t->id_len[id] = (uint32_t)len;
}

static int load_normalizer(dllm_tokenizer *t, json_t *n, const char *where, dllm_err *err)
{
    const char *type;
    if (get_type(t, n, where, &type, err)) return err->code;
    int k;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr)) return bad(t, err, where, "'normalizers' must be an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
            if (load_normalizer(t, json_array_get(arr, i), w, err)) return err->code;
        }
        return 0;
    }
    if (!strcmp(type, "NFC")) k = NORM_NFC;
    else if (!strcmp(type, "NFD")) k = NORM_NFD;
    else if (!strcmp(type, "NFKC")) k = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) k = NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) k = NORM_LOWER;
    else return bad(t, err, where, "normalizer type '%s' is not supported (NFC, NFD, NFKC, NFKD, Lowercase, Sequence)", type);
    if (t->n_norm == sizeof t->norm / sizeof t->norm[0]) return bad(t, err, where, "too many normalizers");
    t->norm[t->n_norm++] = k;
    return 0;
}

static int load_pre(dllm_tokenizer *t, json_t *p, const char *where, dllm_err *err)
{
    const char *type;
    if (get_type(t, p, where, &type, err)) return err->code;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr)) return bad(t, err, where, "'pretokenizers' must be an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            if (load_pre(t, json_array_get(arr, i), w, err)) return err->code;
        }
        return 0;
    }
    if (t->n_pre == sizeof t->pre / sizeof t->pre[0]) return bad(t, err, where, "too many pre-tokenizers");
    pre_step *st = &t->pre[t->n_pre];
    memset(st, 0, sizeof *st);
    if (!strcmp(type, "Split")) {
        st->kind = PRE_SPLIT;
        json_t *pat = json_object_get(p, "pattern");
        if (!json_is_object(pat)) return bad(t, err, where, "'pattern' must be an object {\"Regex\": ..} or {\"String\": ..}");
        json_t *rx = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        json_t *src = rx ? rx : lit;
        if (!json_is_string(src)) return bad(t, err, where, "'pattern' needs a string 'Regex' or 'String'");
        const char *beh;
        if (get_str(t, p, "behavior", where, &beh, err)) return err->code;
        if (!beh) return bad(t, err, where, "missing 'behavior'");
        if (!strcmp(beh, "Removed")) st->behavior = SPLIT_REMOVED;
        else if (!strcmp(beh, "Isolated")) st->behavior = SPLIT_ISOLATED;
        else if (!strcmp(beh, "MergedWithPrevious")) st->behavior = SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) st->behavior = SPLIT_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) st->behavior = SPLIT_CONTIGUOUS;
        else return bad(t, err, where, "unknown behavior '%s'", beh);
        if (get_bool(t, p, "invert", where, &st->invert, err)) return err->code;
        if (regex_compile(t, json_string_value(src), json_string_length(src), !rx, where, &st->re, err))
            return err->code;
    } else if (!strcmp(type, "ByteLevel")) {
        bool use_regex = true;
        st->kind = PRE_BYTELEVEL;
        st->add_prefix_space = true; // HF default
        if (get_bool(t, p, "add_prefix_space", where, &st->add_prefix_space, err) ||
            get_bool(t, p, "use_regex", where, &use_regex, err))
            return err->code;
        st->behavior = SPLIT_ISOLATED;
        if (use_regex && regex_compile(t, GPT2_PATTERN, strlen(GPT2_PATTERN), false, where, &st->re, err))
            return err->code;
        t->bytelevel = true;
    } else if (!strcmp(type, "Digits")) {
        bool individual = false;
        st->kind = PRE_DIGITS;
        if (get_bool(t, p, "individual_digits", where, &individual, err)) return err->code;
        st->behavior = SPLIT_ISOLATED;
        const char *pat = individual ? "\\p{N}" : "\\p{N}+";
        if (regex_compile(t, pat, strlen(pat), false, where, &st->re, err)) return err->code;
    } else {
        return bad(t, err, where, "pre_tokenizer type '%s' is not supported (Split, ByteLevel, Digits, Sequence)", type);
    }
    t->n_pre++;
    return 0;
}

static int load_decoder(dllm_tokenizer *t, json_t *d, const char *where, dllm_err *err)
{
    const char *type;
    if (get_type(t, d, where, &type, err)) return err->code;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(d, "decoders");
        if (!json_is_array(arr)) return bad(t, err, where, "'decoders' must be an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
            if (load_decoder(t, json_array_get(arr, i), w, err)) return err->code;
        }
        return 0;
    }
    int k;
    if (!strcmp(type, "ByteLevel")) k = DEC_BYTELEVEL;
    else if (!strcmp(type, "Fuse")) k = DEC_FUSE;
    else if (!strcmp(type, "ByteFallback")) k = DEC_BYTEFALLBACK;
    else return bad(t, err, where, "decoder type '%s' is not supported (ByteLevel, Fuse, ByteFallback, Sequence)", type);
    if (t->n_dec == sizeof t->dec / sizeof t->dec[0]) return bad(t, err, where, "too many decoders");
    t->dec[t->n_dec++] = k;
    return 0;
}

/* id of a named special token in a processor; it must exist. */
static int post_token_id(dllm_tokenizer *t, const char *name, const char *where, int32_t *id, dllm_err *err)
{
    *id = sm_get(&t->added_map, name, strlen(name));
    if (*id < 0) *id = sm_get(&t->vocab, name, strlen(name));
    if (*id < 0) return bad(t, err, where, "token '%s' is not in the vocab", name);
    return 0;
}

static int load_post(dllm_tokenizer *t, json_t *p, const char *where, dllm_err *err)
{
    const char *type;
    if (get_type(t, p, where, &type, err)) return err->code;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(p, "processors");
        if (!json_is_array(arr)) return bad(t, err, where, "'processors' must be an array");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
            if (load_post(t, json_array_get(arr, i), w, err)) return err->code;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0; // only trims offsets; ids unchanged
    ivec pre = {0}, suf = {0};
    if (!strcmp(type, "TemplateProcessing")) {
        json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single)) return bad(t, err, where, "'single' must be an array");
        if (specials && !json_is_object(specials) && !json_is_null(specials))
            return bad(t, err, where, "'special_tokens' must be an object");
        int seen = 0;
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i), *sp, *sq;
            char w[160];
            snprintf(w, sizeof w, "%s.single[%zu]", where, i);
            if (!json_is_object(it)) { free(pre.p); free(suf.p); return bad(t, err, w, "must be an object"); }
            if ((sq = json_object_get(it, "Sequence"))) { seen++; continue; }
            sp = json_object_get(it, "SpecialToken");
            json_t *name = json_is_object(sp) ? json_object_get(sp, "id") : NULL;
            if (!json_is_string(name)) { free(pre.p); free(suf.p); return bad(t, err, w, "needs 'Sequence' or 'SpecialToken' with a string 'id'"); }
            json_t *def = specials ? json_object_get(specials, json_string_value(name)) : NULL;
            json_t *ids = json_is_object(def) ? json_object_get(def, "ids") : NULL;
            if (!json_is_array(ids)) { free(pre.p); free(suf.p); return bad(t, err, w, "special token '%s' has no 'ids' in special_tokens", json_string_value(name)); }
            for (size_t j = 0; j < json_array_size(ids); j++) {
                json_t *v = json_array_get(ids, j);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= t->V) {
                    free(pre.p); free(suf.p);
                    return bad(t, err, w, "special token '%s': ids must be integers in the vocab", json_string_value(name));
                }
                iv_push(seen ? &suf : &pre, (int32_t)json_integer_value(v));
            }
        }
        if (seen != 1) { free(pre.p); free(suf.p); return bad(t, err, where, "'single' must hold exactly one Sequence"); }
    } else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if (!json_is_array(cls) || !json_is_array(sep) || !json_is_string(json_array_get(cls, 0)) ||
            !json_is_string(json_array_get(sep, 0)))
            return bad(t, err, where, "'cls' and 'sep' must be [token, id] pairs");
        int32_t a, b;
        if (post_token_id(t, json_string_value(json_array_get(cls, 0)), where, &a, err) ||
            post_token_id(t, json_string_value(json_array_get(sep, 0)), where, &b, err))
            return err->code;
        iv_push(&pre, a);
        iv_push(&suf, b);
    } else {
        return bad(t, err, where, "post_processor type '%s' is not supported (TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)", type);
    }
    /* Later processors wrap the earlier result. */
    ivec np = {0};
    for (size_t i = 0; i < pre.n; i++) iv_push(&np, pre.p[i]);
    for (size_t i = 0; i < t->post_prefix.n; i++) iv_push(&np, t->post_prefix.p[i]);
    free(t->post_prefix.p);
    t->post_prefix = np;
    for (size_t i = 0; i < suf.n; i++) iv_push(&t->post_suffix, suf.p[i]);
    free(pre.p); free(suf.p);
    return 0;
}

static int cmp_added(const void *a, const void *b)
{
    const added_tok *x = *(added_tok *const *)a, *y = *(added_tok *const *)b;
    if ((uint8_t)x->s[0] != (uint8_t)y->s[0]) return (uint8_t)x->s[0] - (uint8_t)y->s[0];
    return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}
static void added_set_build(added_set *set, added_tok *toks, size_t n, bool normalized)
{
    set->by_len = dllm_malloc((n + 1) * sizeof *set->by_len);
    set->n = 0;
    for (size_t i = 0; i < n; i++)
        if (toks[i].normalized == normalized && toks[i].len) set->by_len[set->n++] = &toks[i];
    qsort(set->by_len, set->n, sizeof *set->by_len, cmp_added);
    size_t j = 0;
    for (int c = 0; c <= 256; c++) {
        while (j < set->n && (uint8_t)set->by_len[j]->s[0] < c) j++;
        set->first[c] = (uint32_t)j;
    }
}

static int norm_string(const dllm_tokenizer *t, const char *s, size_t len, char **out, size_t *outlen);

static int load_model(dllm_tokenizer *t, json_t *root, dllm_err *err)
{
    json_t *model = json_object_get(root, "model");
    if (!model) return bad(t, err, "model", "missing");
    if (!json_is_object(model)) return bad(t, err, "model", "must be an object, found %s", jtype(model));
    const char *type;
    if (get_str(t, model, "type", "model", &type, err)) return err->code;
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!type) type = merges ? "BPE" : "WordLevel"; // HF infers the untagged model
    if (!strcmp(type, "BPE")) t->is_bpe = true;
    else if (strcmp(type, "WordLevel")) return bad(t, err, "model.type", "model type '%s' is not supported (BPE, WordLevel)", type);
    if (!vocab) return bad(t, err, "model.vocab", "missing");
    if (!json_is_object(vocab)) return bad(t, err, "model.vocab", "must be an object, found %s", jtype(vocab));

    /* ids: bounded so that a hostile file cannot make us allocate a huge table */
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        return bad(t, err, "added_tokens", "must be an array, found %s", jtype(added));
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    size_t id_cap = 2 * n_entries + 65536;
    if (id_cap > ((size_t)1 << 24)) id_cap = (size_t)1 << 24;
    size_t V = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val)) return bad(t, err, "model.vocab", "value of '%s' must be an integer, found %s", key, jtype(val));
        json_int_t id = json_integer_value(val);
        if (id < 0 || (size_t)id >= id_cap) return bad(t, err, "model.vocab", "id %lld of '%s' is out of range [0, %zu)", (long long)id, key, id_cap);
        if ((size_t)id + 1 > V) V = (size_t)id + 1;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_object(a)) return bad(t, err, w, "must be an object, found %s", jtype(a));
        if (!json_is_integer(id)) return bad(t, err, w, "'id' must be an integer");
        if (json_integer_value(id) < 0 || (size_t)json_integer_value(id) >= id_cap)
            return bad(t, err, w, "id %lld is out of range [0, %zu)", (long long)json_integer_value(id), id_cap);
        if ((size_t)json_integer_value(id) + 1 > V) V = (size_t)json_integer_value(id) + 1;
    }
    t->V = V;
    t->id_tok = dllm_calloc(V + 1, sizeof *t->id_tok);
    t->id_len = dllm_calloc(V + 1, sizeof *t->id_len);
    t->id_flags = dllm_calloc(V + 1, 1);
    sm_init(&t->vocab, json_object_size(vocab));
    json_object_foreach(vocab, key, val) // two strings on one id: the later one keeps it
        add_id_string(t, (int32_t)json_integer_value(val), key, strlen(key));
    for (size_t id = 0; id < V; id++)
        if (t->id_tok[id]) sm_put(&t->vocab, t->id_tok[id], t->id_len[id], (int32_t)id);

    const char *unk;
    t->unk_id = -1;
    if (get_str(t, model, "unk_token", "model", &unk, err)) return err->code;
    if (unk) {
        t->unk_id = sm_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0) return bad(t, err, "model.unk_token", "'%s' is not in the vocab", unk);
    }
    if (t->is_bpe) {
        const char *pfx, *sfx;
        if (get_bool(t, model, "fuse_unk", "model", &t->fuse_unk, err) ||
            get_bool(t, model, "byte_fallback", "model", &t->byte_fallback, err) ||
            get_bool(t, model, "ignore_merges", "model", &t->ignore_merges, err) ||
            get_str(t, model, "continuing_subword_prefix", "model", &pfx, err) ||
            get_str(t, model, "end_of_word_suffix", "model", &sfx, err))
            return err->code;
        if ((pfx && *pfx) || (sfx && *sfx))
            return bad(t, err, "model", "continuing_subword_prefix/end_of_word_suffix are not supported");
        json_t *dropout = json_object_get(model, "dropout");
        if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
            return bad(t, err, "model.dropout", "BPE dropout is not supported");
        if (!merges) return bad(t, err, "model.merges", "missing");
        if (!json_is_array(merges)) return bad(t, err, "model.merges", "must be an array, found %s", jtype(merges));
        size_t nm = json_array_size(merges), cap = 16;
        while (cap < 2 * nm + 16) cap *= 2;
        t->merges.cap = cap;
        t->merges.s = dllm_malloc(cap * sizeof *t->merges.s);
        for (size_t i = 0; i < cap; i++) t->merges.s[i].key = MM_EMPTY;
        bbuf cat = {0};
        for (size_t i = 0; i < nm; i++) {
            json_t *m = json_array_get(merges, i);
            const char *a, *b;
            size_t la, lb;
            char w[64];
            snprintf(w, sizeof w, "model.merges[%zu]", i);
            if (json_is_string(m)) {
                a = json_string_value(m);
                const char *sp = strchr(a, ' ');
                if (!sp || strchr(sp + 1, ' ') || (size_t)(sp - a) + 1 + strlen(sp + 1) != json_string_length(m)) {
                    free(cat.p);
                    return bad(t, err, w, "'%s' must be two tokens separated by one space", a);
                }
                la = (size_t)(sp - a); b = sp + 1; lb = strlen(b);
            } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                       json_is_string(json_array_get(m, 1))) {
                a = json_string_value(json_array_get(m, 0)); la = json_string_length(json_array_get(m, 0));
                b = json_string_value(json_array_get(m, 1)); lb = json_string_length(json_array_get(m, 1));
            } else {
                free(cat.p);
                return bad(t, err, w, "must be a string \"a b\" or a pair [\"a\", \"b\"], found %s", jtype(m));
            }
            int32_t ia = sm_get(&t->vocab, a, la), ib = sm_get(&t->vocab, b, lb);
            if (ia < 0 || ib < 0) {
                char tokbuf[128];
                snprintf(tokbuf, sizeof tokbuf, "%.*s", (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
                free(cat.p);
                return bad(t, err, w, "token '%s' is not in the vocab", tokbuf);
            }
            cat.n = 0;
            bb_put(&cat, a, la);
            bb_put(&cat, b, lb);
            int32_t ic = sm_get(&t->vocab, cat.p, cat.n);
            if (ic < 0) {
                char tokbuf[160];
                snprintf(tokbuf, sizeof tokbuf, "%.*s", (int)cat.n, cat.p);
                free(cat.p);
                return bad(t, err, w, "merged token '%s' is not in the vocab", tokbuf);
            }
            mm_slot *s = mm_find(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib);
            s->key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib; // a repeated pair: the later rank wins, as in HF
            s->rank = (uint32_t)i;
            s->id = ic;
        }
        free(cat.p);
    }

    /* added tokens */
    t->n_added = json_array_size(added);
    t->added = dllm_calloc(t->n_added + 1, sizeof *t->added);
    sm_init(&t->added_map, t->n_added);
    for (size_t i = 0; i < t->n_added; i++) {
        json_t *a = json_array_get(added, i), *c = json_object_get(a, "content");
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_string(c) || !json_string_length(c)) return bad(t, err, w, "'content' must be a non-empty string");
        added_tok *at = &t->added[i];
        at->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        if (get_bool(t, a, "special", w, &at->special, err) || get_bool(t, a, "lstrip", w, &at->lstrip, err) ||
            get_bool(t, a, "rstrip", w, &at->rstrip, err) || get_bool(t, a, "single_word", w, &at->single_word, err) ||
            get_bool(t, a, "normalized", w, &at->normalized, err))
            return err->code;
        add_id_string(t, at->id, json_string_value(c), json_string_length(c));
        t->id_flags[at->id] = FLAG_ADDED | (at->special ? FLAG_SPECIAL : 0);
        at->s = dllm_malloc(json_string_length(c) + 1);
        memcpy(at->s, json_string_value(c), json_string_length(c) + 1);
        at->len = (uint32_t)json_string_length(c);
    }
    for (size_t i = 0; i < t->n_added; i++) // after all strings are final
        sm_put(&t->added_map, t->id_tok[t->added[i].id], t->id_len[t->added[i].id], t->added[i].id);
    return 0;
}

static void tok_finish(dllm_tokenizer *t)
{
    bytelevel_init();
    char sym[8];
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = sm_get(&t->vocab, sym, utf8_put(byte_cp[b], sym));
        snprintf(sym, sizeof sym, "<0x%02X>", b);
        t->bf_id[b] = sm_get(&t->vocab, sym, strlen(sym));
    }
    /* normalized added tokens are matched on normalized text: normalize their content */
    for (size_t i = 0; i < t->n_added; i++) {
        added_tok *a = &t->added[i];
        char *ns;
        size_t nl;
        if (a->normalized && t->n_norm && !norm_string(t, a->s, a->len, &ns, &nl)) {
            free(a->s);
            a->s = ns; a->len = (uint32_t)nl;
        }
    }
    added_set_build(&t->raw_set, t->added, t->n_added, false);
    added_set_build(&t->norm_set, t->added, t->n_added, true);
    t->md = pcre2_match_data_create(1, NULL);
    t->cache = dllm_calloc(CACHE_SLOTS, sizeof *t->cache);
}

int dllm_tokenizer_load_buffer(dllm_tokenizer **out, const char *name, const char *data, size_t len,
                               dllm_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(data, len, 0, &je);
    if (!root)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", name, je.line, je.column, je.text);
    dllm_tokenizer *t = dllm_calloc(1, sizeof *t);
    t->name = dllm_strdup(name);
    int rc = 0;
    json_t *j;
    if (!json_is_object(root)) { rc = bad(t, err, "top level", "must be an object, found %s", jtype(root)); goto done; }
    if ((rc = load_model(t, root, err))) goto done;
    if ((j = json_object_get(root, "normalizer")) && !json_is_null(j) && (rc = load_normalizer(t, j, "normalizer", err))) goto done;
    if ((j = json_object_get(root, "pre_tokenizer")) && !json_is_null(j) && (rc = load_pre(t, j, "pre_tokenizer", err))) goto done;
    if ((j = json_object_get(root, "decoder")) && !json_is_null(j)) {
        t->has_decoder = true;
        if ((rc = load_decoder(t, j, "decoder", err))) goto done;
    }
    if ((j = json_object_get(root, "post_processor")) && !json_is_null(j) && (rc = load_post(t, j, "post_processor", err))) goto done;
    tok_finish(t);
done:
    json_decref(root);
    if (rc) { dllm_tokenizer_free(t); return rc; }
    *out = t;
    return 0;
}

int dllm_tokenizer_load(dllm_tokenizer **out, const char *path, dllm_err *err)
{
    char *data;
    size_t len;
    *out = NULL;
    if (dllm_read_file(path, &data, &len, err)) return err->code;
    int rc = dllm_tokenizer_load_buffer(out, path, data, len, err);
    free(data);
    return rc;
}

void dllm_tokenizer_free(dllm_tokenizer *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->V; i++) free(t->id_tok[i]);
    for (size_t i = 0; i < t->n_retired; i++) free(t->retired[i]);
    free(t->retired);
    free(t->id_tok); free(t->id_len); free(t->id_flags);
    free(t->vocab.s); free(t->added_map.s); free(t->merges.s);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    free(t->raw_set.by_len); free(t->norm_set.by_len);
    for (size_t i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    free(t->post_prefix.p); free(t->post_suffix.p);
    pcre2_match_data_free(t->md);
    if (t->cache)
        for (size_t i = 0; i < CACHE_SLOTS; i++) free(t->cache[i].key), free(t->cache[i].ids), free(t->cache[i].lens);
    free(t->cache);
    free(t->scratch.p);
    free(t->name);
    free(t);
}

/* ------------------------------------------------------------------ normalization */

static int norm_string(const dllm_tokenizer *t, const char *s, size_t len, char **out, size_t *outlen)
{
    char *cur = dllm_malloc(len + 1);
    memcpy(cur, s, len);
    cur[len] = 0;
    size_t n = len;
    for (size_t k = 0; k < t->n_norm; k++) {
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r;
        if (t->norm[k] == NORM_LOWER) {
            bbuf b = {0};
            size_t i = 0;
            while (i < n) {
                uint32_t cp;
                size_t l = utf8_valid_len((const uint8_t *)cur + i, n - i, &cp);
                if (!l) { free(b.p); free(cur); return -1; }
                char e[4];
                bb_put(&b, e, utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), e));
                i += l;
            }
            if (!b.p) bb_put(&b, "", 0);
            free(cur);
            cur = b.p; n = b.n;
            continue;
        }
        int opt = UTF8PROC_STABLE;
        switch (t->norm[k]) {
        case NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
        case NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
        case NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opt);
        free(cur);
        if (r < 0) return -1;
        cur = (char *)dst; n = (size_t)r;
    }
    *out = cur; *outlen = n;
    return 0;
}

/* Normalized text with a map back to the original bytes. as/ae NULL: identity + base. */
typedef struct {
    const char *s; size_t len;
    char *own;
    uint32_t *as, *ae; // (len) original [start, end) of each normalized byte
    uint32_t base;
} normtext;

static void nt_free(normtext *nt) { free(nt->own); free(nt->as); free(nt->ae); }

static void nt_range(const normtext *nt, size_t s, size_t e, uint32_t *os, uint32_t *oe)
{
    if (!nt->as) { *os = nt->base + (uint32_t)s; *oe = nt->base + (uint32_t)e; return; }
    if (s >= e) {
        uint32_t p = s < nt->len ? nt->as[s] : nt->len ? nt->ae[nt->len - 1] : nt->base;
        *os = *oe = p;
        return;
    }
    *os = nt->as[s]; *oe = nt->ae[e - 1];
}

/* s is valid UTF-8. Normalizes in chunks that start at a starter (combining class 0)
 * which does not interact with the previous chunk, so each normalized byte can be
 * mapped to its chunk's original range (identity where a chunk is unchanged). */
static int normalize_aligned(const dllm_tokenizer *t, const char *s, size_t len, uint32_t base, normtext *nt)
{
    memset(nt, 0, sizeof *nt);
    nt->s = s; nt->len = len; nt->base = base;
    if (!t->n_norm) return 0;
    bool only_nfc = true, lower = false;
    for (size_t k = 0; k < t->n_norm; k++) only_nfc &= t->norm[k] == NORM_NFC, lower |= t->norm[k] == NORM_LOWER;
    /* fast path: NFC never touches text below U+0300; nothing but Lowercase touches ASCII */
    uint8_t limit = only_nfc ? 0xcc : 0x80; // first byte of U+0300 is 0xcc
    if (!lower) {
        size_t i = 0;
        while (i < len && (uint8_t)s[i] < limit) i++;
        if (i == len) return 0;
    }
    char *full;
    size_t flen;
    if (norm_string(t, s, len, &full, &flen)) return DLLM_EXIT_INPUT;
    if (flen == len && !memcmp(full, s, len)) { free(full); return 0; }
    free(full);
    bbuf out = {0};
    uint32_t *as = NULL, *ae = NULL;
    size_t cap = 0;
    size_t cs = 0, i = 0;
    while (cs < len) {
        /* grow the chunk [cs, i) until the next starter starts a fresh chunk */
        uint32_t cp;
        i = cs + utf8_valid_len((const uint8_t *)s + cs, len - cs, &cp);
        while (i < len) {
            size_t l = utf8_valid_len((const uint8_t *)s + i, len - i, &cp);
            if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class == 0) {
                char *a, *b, *ab;
                size_t la, lb, lab;
                norm_string(t, s + cs, i - cs, &a, &la);
                norm_string(t, s + i, l, &b, &lb);
                norm_string(t, s + cs, i + l - cs, &ab, &lab);
                bool split = lab == la + lb && !memcmp(ab, a, la) && !memcmp(ab + la, b, lb);
                free(a); free(b); free(ab);
                if (split) break;
            }
            i += l;
        }
        char *nc;
        size_t nl;
        norm_string(t, s + cs, i - cs, &nc, &nl);
        bool same = nl == i - cs && !memcmp(nc, s + cs, nl);
        if (out.n + nl > cap) {
            cap = 2 * (out.n + nl) + 64;
            as = dllm_realloc(as, cap * sizeof *as);
            ae = dllm_realloc(ae, cap * sizeof *ae);
        }
        for (size_t k = 0; k < nl; k++) {
            as[out.n + k] = base + (uint32_t)(same ? cs + k : cs);
            ae[out.n + k] = base + (uint32_t)(same ? cs + k + 1 : i);
        }
        bb_put(&out, nc, nl);
        free(nc);
        cs = i;
    }
    if (!out.p) bb_put(&out, "", 0);
    nt->s = nt->own = out.p; nt->len = out.n; nt->as = as; nt->ae = ae;
    return 0;
}

/* ------------------------------------------------------------------ pre-tokenization */

typedef struct { uint32_t start, end; uint8_t prefix; } piece; // text = (prefix ? " " : "") + N[start, end)
typedef struct { piece *p; size_t n, cap; } pvec;
static void pv_push(pvec *v, uint32_t s, uint32_t e, uint8_t prefix)
{
    if (e <= s && !prefix) return; // empty pieces vanish, as in HF
    if (v->n == v->cap) { v->cap = v->cap ? 2 * v->cap : 64; v->p = dllm_realloc(v->p, v->cap * sizeof *v->p); }
    v->p[v->n].start = s; v->p[v->n].end = e; v->p[v->n].prefix = prefix; v->n++;
}

typedef struct { uint32_t a, b; uint8_t m; } span;
typedef struct { span *p; size_t n, cap; } svec;
static void sv_push(svec *v, uint32_t a, uint32_t b, uint8_t m)
{
    if (v->n == v->cap) { v->cap = v->cap ? 2 * v->cap : 64; v->p = dllm_realloc(v->p, v->cap * sizeof *v->p); }
    v->p[v->n].a = a; v->p[v->n].b = b; v->p[v->n].m = m; v->n++;
}

/* Splits each piece by the step's regex with its behaviour (HF's NormalizedString::split). */
static int pre_split(dllm_tokenizer *t, const pre_step *st, const normtext *nt, pvec *in, pvec *out,
                     svec *sp, dllm_err *err)
{
    out->n = 0;
    for (size_t pi = 0; pi < in->n; pi++) {
        piece pc = in->p[pi];
        const char *subj = nt->s + pc.start;
        size_t L = pc.end - pc.start;
        if (pc.prefix) { // materialise " " + text
            t->scratch.n = 0;
            bb_put(&t->scratch, " ", 1);
            bb_put(&t->scratch, subj, L);
            subj = t->scratch.p; L++;
        }
        sp->n = 0;
        size_t pos = 0, prev = 0;
        while (pos <= L) {
            int rc = pcre2_match(st->re, (PCRE2_SPTR)subj, L, pos, PCRE2_NO_UTF_CHECK, t->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR buf[256];
                pcre2_get_error_message(rc, buf, sizeof buf);
                return bad(t, err, "pre_tokenizer", "regex match failed: %s", (const char *)buf);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            size_t a = ov[0], b = ov[1];
            if (a > prev) sv_push(sp, (uint32_t)prev, (uint32_t)a, st->invert);
            sv_push(sp, (uint32_t)a, (uint32_t)b, !st->invert);
            prev = b;
            if (b > a) pos = b;
            else { // empty match: step one character
                if (b >= L) break;
                uint32_t cp;
                size_t l = utf8_valid_len((const uint8_t *)subj + b, L - b, &cp);
                pos = b + (l ? l : 1);
            }
        }
        if (prev < L) sv_push(sp, (uint32_t)prev, (uint32_t)L, st->invert);
        /* drop empty spans, then apply the behaviour */
        size_t k = 0;
        for (size_t i = 0; i < sp->n; i++) if (sp->p[i].b > sp->p[i].a) sp->p[k++] = sp->p[i];
        sp->n = k;
        size_t n0 = 0; // merged spans written in place
        switch (st->behavior) {
        case SPLIT_ISOLATED: n0 = sp->n; break;
        case SPLIT_REMOVED:
            for (size_t i = 0; i < sp->n; i++) if (!sp->p[i].m) sp->p[n0++] = sp->p[i];
            break;
        case SPLIT_MERGED_PREV: {
            bool prev_m = false;
            for (size_t i = 0; i < sp->n; i++) {
                span s = sp->p[i];
                if (s.m && !prev_m && n0) sp->p[n0 - 1].b = s.b;
                else sp->p[n0++] = s;
                prev_m = s.m;
            }
            break;
        }
        case SPLIT_CONTIGUOUS: {
            bool prev_m = false;
            for (size_t i = 0; i < sp->n; i++) {
                span s = sp->p[i];
                if (s.m == prev_m && n0) sp->p[n0 - 1].b = s.b;
                else sp->p[n0++] = s;
                prev_m = s.m;
            }
            break;
        }
        case SPLIT_MERGED_NEXT: { // right to left, then reverse
            bool prev_m = false;
            size_t m = sp->n;
            span *tmp = dllm_malloc((m + 1) * sizeof *tmp);
            for (size_t i = m; i-- > 0;) {
                span s = sp->p[i];
                if (s.m && !prev_m && n0) tmp[n0 - 1].a = s.a;
                else tmp[n0++] = s;
                prev_m = s.m;
            }
            for (size_t i = 0; i < n0; i++) sp->p[i] = tmp[n0 - 1 - i];
            free(tmp);
            break;
        }
        }
        for (size_t i = 0; i < n0; i++) {
            uint32_t a = sp->p[i].a, b = sp->p[i].b;
            if (pc.prefix)
                pv_push(out, a ? pc.start + a - 1 : pc.start, pc.start + b - 1, a == 0);
            else
                pv_push(out, pc.start + a, pc.start + b, 0);
        }
    }
    return 0;
}

static int pre_tokenize(dllm_tokenizer *t, const normtext *nt, pvec *a, pvec *b, svec *sp, pvec **res,
                        dllm_err *err)
{
    a->n = 0;
    pv_push(a, 0, (uint32_t)nt->len, 0);
    for (size_t k = 0; k < t->n_pre; k++) {
        const pre_step *st = &t->pre[k];
        if (st->kind == PRE_BYTELEVEL && st->add_prefix_space)
            for (size_t i = 0; i < a->n; i++)
                if (!a->p[i].prefix && a->p[i].end > a->p[i].start && nt->s[a->p[i].start] != ' ') a->p[i].prefix = 1;
        if (!st->re) continue;
        if (pre_split(t, st, nt, a, b, sp, err)) return err->code;
        pvec tmp = *a; *a = *b; *b = tmp;
    }
    *res = a;
    return 0;
}

/* ------------------------------------------------------------------ BPE */

typedef struct { int32_t id; uint32_t len; int32_t prev, next; } sym;
typedef struct { uint32_t rank, pos; int32_t id; } cand;

static bool cand_less(cand x, cand y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }
static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i && cand_less(c, h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = c;
}
static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c]; i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Merges symbols in place (lowest rank first, leftmost on ties). */
static void bpe_merge(const dllm_tokenizer *t, sym *s, size_t n)
{
    if (n < 2 || !t->merges.cap) return;
    if (n <= 24) { // short words: a linear scan beats heap bookkeeping
        for (;;) {
            uint32_t best = UINT32_MAX;
            int32_t bi = -1, bid = -1;
            for (int32_t i = 0; i >= 0 && s[i].next >= 0; i = s[i].next) {
                const mm_slot *m = mm_get(&t->merges, s[i].id, s[s[i].next].id);
                if (m && m->rank < best) best = m->rank, bi = i, bid = m->id;
            }
            if (bi < 0) return;
            int32_t j = s[bi].next;
            s[bi].id = bid; s[bi].len += s[j].len; s[bi].next = s[j].next;
            if (s[j].next >= 0) s[s[j].next].prev = bi;
            s[j].len = 0;
        }
    }
    cand *h = dllm_malloc(2 * n * sizeof *h);
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const mm_slot *m = mm_get(&t->merges, s[i].id, s[i + 1].id);
        if (m) heap_push(h, &hn, (cand){m->rank, (uint32_t)i, m->id});
    }
    while (hn) {
        cand c = heap_pop(h, &hn);
        sym *l = &s[c.pos];
        if (!l->len || l->next < 0) continue;
        const mm_slot *m = mm_get(&t->merges, l->id, s[l->next].id);
        if (!m || m->id != c.id || m->rank != c.rank) continue; // stale
        int32_t j = l->next;
        l->id = c.id; l->len += s[j].len; l->next = s[j].next;
        if (s[j].next >= 0) s[s[j].next].prev = (int32_t)c.pos;
        s[j].len = 0;
        if (l->prev >= 0 && (m = mm_get(&t->merges, s[l->prev].id, l->id)))
            heap_push(h, &hn, (cand){m->rank, (uint32_t)l->prev, m->id});
        if (l->next >= 0 && (m = mm_get(&t->merges, l->id, s[l->next].id)))
            heap_push(h, &hn, (cand){m->rank, c.pos, m->id});
    }
    free(h);
}

/* Byte-level symbol string of raw bytes (for vocab lookups of whole pieces). */
static void bytelevel_str(const char *p, size_t n, bbuf *out)
{
    out->n = 0;
    for (size_t i = 0; i < n; i++) {
        char e[4];
        bb_put(out, e, utf8_put(byte_cp[(uint8_t)p[i]], e));
    }
}

/* Model on one pre-token: appends ids and each token's byte length. */
static int model_piece(dllm_tokenizer *t, const char *p, size_t n, ivec *ids, ivec *lens, dllm_err *err)
{
    if (!t->is_bpe || t->ignore_merges) {
        const char *key = p;
        size_t klen = n;
        if (t->bytelevel) { bytelevel_str(p, n, &t->scratch); key = t->scratch.p; klen = t->scratch.n; }
        int32_t id = sm_get(&t->vocab, key, klen);
        if (id >= 0 || !t->is_bpe) {
            if (id < 0) id = t->unk_id;
            if (id < 0) return bad(t, err, "model", "WordLevel: a word is not in the vocab and there is no unk_token");
            iv_push(ids, id); iv_push(lens, (int32_t)n);
            return 0;
        }
    }
    sym stack[64], *s = n <= 64 ? stack : dllm_malloc(n * sizeof *s);
    size_t ns = 0;
    size_t i = 0;
    while (i < n) {
        int32_t id;
        size_t l;
        if (t->bytelevel) { l = 1; id = t->byte_id[(uint8_t)p[i]]; }
        else {
            uint32_t cp;
            l = utf8_valid_len((const uint8_t *)p + i, n - i, &cp);
            if (!l) l = 1;
            id = sm_get(&t->vocab, p + i, l);
            if (id < 0 && t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < l; k++) all &= t->bf_id[(uint8_t)p[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < l; k++) s[ns] = (sym){t->bf_id[(uint8_t)p[i + k]], 1, (int32_t)ns - 1, (int32_t)ns + 1}, ns++;
                    i += l;
                    continue;
                }
            }
        }
        if (id < 0) {
            if (t->unk_id < 0) { i += l; continue; } // HF drops characters it cannot represent
            if (t->fuse_unk && ns && s[ns - 1].id == t->unk_id) { s[ns - 1].len += (uint32_t)l; i += l; continue; }
            id = t->unk_id;
        }
        s[ns] = (sym){id, (uint32_t)l, (int32_t)ns - 1, (int32_t)ns + 1};
        ns++;
        i += l;
    }
    if (ns) s[ns - 1].next = -1;
    bpe_merge(t, s, ns);
    for (int32_t k = ns ? 0 : -1; k >= 0; k = s[k].next) { iv_push(ids, s[k].id); iv_push(lens, (int32_t)s[k].len); }
    if (s != stack) free(s);
    return 0;
}

/* Cached model_piece. */
static int model_piece_cached(dllm_tokenizer *t, const char *p, size_t n, ivec *ids, ivec *lens, dllm_err *err)
{
    cache_ent *e = NULL;
    if (n <= CACHE_MAX_KEY) {
        e = &t->cache[hash_bytes(p, n) & (CACHE_SLOTS - 1)];
        if (e->key && e->klen == n && !memcmp(e->key, p, n)) {
            for (uint32_t k = 0; k < e->n; k++) { iv_push(ids, e->ids[k]); iv_push(lens, (int32_t)e->lens[k]); }
            return 0;
        }
    }
    size_t i0 = ids->n, l0 = lens->n;
    if (model_piece(t, p, n, ids, lens, err)) return err->code;
    if (e) {
        uint32_t m = (uint32_t)(ids->n - i0);
        e->key = dllm_realloc(e->key, n ? n : 1);
        memcpy(e->key, p, n);
        e->klen = (uint32_t)n;
        e->ids = dllm_realloc(e->ids, (m ? m : 1) * sizeof *e->ids);
        e->lens = dllm_realloc(e->lens, (m ? m : 1) * sizeof *e->lens);
        if (m) /* an empty piece leaves ids->p possibly NULL: no offset into it */
            memcpy(e->ids, ids->p + i0, m * sizeof *e->ids);
        for (uint32_t k = 0; k < m; k++) e->lens[k] = (uint32_t)lens->p[l0 + k];
        e->n = m;
    }
    return 0;
}

/* ------------------------------------------------------------------ encode */

typedef struct {
    ivec ids; ovec offs; bool want_offs;
    ivec lens;
    pvec pa, pb; svec sp;
    bbuf piecebuf;
} enc_state;

/* Finds the next added-token match in s[from, len): leftmost, longest there, filtered by
 * single_word; the match is widened by lstrip/rstrip (never below floor). */
static const added_tok *added_next(const added_set *set, const uint8_t *s, size_t len, size_t from, size_t floor,
                                   size_t *ms, size_t *me)
{
    if (!set->n) return NULL;
    for (size_t i = from; i < len; i++) {
        uint32_t lo = set->first[s[i]], hi = set->first[s[i] + 1];
        if (lo == hi) continue;
        for (uint32_t k = lo; k < hi; k++) {
            const added_tok *a = set->by_len[k];
            if (a->len > len - i || memcmp(s + i, a->s, a->len)) continue;
            size_t st = i, en = i + a->len;
            if (a->single_word) {
                uint32_t cp;
                bool left = st == 0 || !cp_is_word(cp_before(s, st, NULL));
                bool right = en == len || !(utf8_valid_len(s + en, len - en, &cp) && cp_is_word(cp));
                if (!left || !right) { i = en - 1; break; } // consumed like a rejected match in HF
            }
            if (a->lstrip)
                while (st > floor) {
                    size_t ps;
                    uint32_t cp = cp_before(s, st, &ps);
                    if (!cp_is_space(cp) || ps < floor) break;
                    st = ps;
                }
            if (a->rstrip)
                while (en < len) {
                    uint32_t cp;
                    size_t l = utf8_valid_len(s + en, len - en, &cp);
                    if (!l || !cp_is_space(cp)) break;
                    en += l;
                }
            *ms = st; *me = en;
            return a;
        }
    }
    return NULL;
}

static void emit(enc_state *es, int32_t id, uint32_t s, uint32_t e)
{
    iv_push(&es->ids, id);
    if (es->want_offs) ov_push(&es->offs, s, e);
}

/* Pre-tokenizes and models normalized text nt (one segment between added tokens). */
static int encode_normalized(dllm_tokenizer *t, enc_state *es, const normtext *nt, dllm_err *err)
{
    pvec *pieces = NULL;
    if (pre_tokenize(t, nt, &es->pa, &es->pb, &es->sp, &pieces, err)) return err->code;
    for (size_t i = 0; i < pieces->n; i++) {
        piece pc = pieces->p[i];
        es->piecebuf.n = 0;
        if (pc.prefix) bb_put(&es->piecebuf, " ", 1);
        bb_put(&es->piecebuf, nt->s + pc.start, pc.end - pc.start);
        size_t i0 = es->ids.n;
        es->lens.n = 0;
        ivec *ids = &es->ids;
        if (model_piece_cached(t, es->piecebuf.p, es->piecebuf.n, ids, &es->lens, err)) return err->code;
        if (es->want_offs) {
            size_t k0 = 0; // byte position within the piece, prefix space included
            for (size_t k = i0; k < ids->n; k++) {
                size_t k1 = k0 + (size_t)es->lens.p[k - i0];
                size_t ns = pc.start + (k0 > pc.prefix ? k0 - pc.prefix : 0);
                size_t ne = pc.start + (k1 > pc.prefix ? k1 - pc.prefix : 0);
                uint32_t os, oe;
                nt_range(nt, ns, ne, &os, &oe);
                ov_push(&es->offs, os, oe);
                k0 = k1;
            }
        }
    }
    return 0;
}

/* Valid UTF-8 text[s, e) between raw added tokens. */
static int encode_valid(dllm_tokenizer *t, enc_state *es, const char *text, size_t s, size_t e, dllm_err *err)
{
    normtext nt;
    if (normalize_aligned(t, text + s, e - s, (uint32_t)s, &nt))
        return bad(t, err, "normalizer", "normalization failed");
    int rc = 0;
    if (!t->norm_set.n) {
        rc = encode_normalized(t, es, &nt, err);
    } else { // normalized added tokens are cut out of the normalized text
        size_t pos = 0, ms, me;
        const added_tok *a;
        while (pos < nt.len) {
            a = added_next(&t->norm_set, (const uint8_t *)nt.s, nt.len, pos, pos, &ms, &me);
            size_t stop = a ? ms : nt.len;
            if (stop > pos) {
                normtext sub = nt;
                sub.s = nt.s + pos; sub.len = stop - pos;
                if (nt.as) { sub.as = nt.as + pos; sub.ae = nt.ae + pos; } else sub.base = nt.base + (uint32_t)pos;
                if ((rc = encode_normalized(t, es, &sub, err))) break;
            }
            if (!a) break;
            uint32_t os, oe;
            nt_range(&nt, ms, me, &os, &oe);
            emit(es, a->id, os, oe);
            pos = me;
        }
    }
    nt_free(&nt);
    return rc;
}

/* Raw text[s, e) between raw added tokens: valid UTF-8 runs go through the pipeline,
 * each invalid byte becomes its own token (byte-level symbol, <0xXX>, or unk). */
static int encode_segment(dllm_tokenizer *t, enc_state *es, const char *text, size_t s, size_t e, dllm_err *err)
{
    size_t i = s;
    while (i < e) {
        size_t j = i;
        uint32_t cp;
        size_t l;
        while (j < e && (l = utf8_valid_len((const uint8_t *)text + j, e - j, &cp))) j += l;
        if (j > i && encode_valid(t, es, text, i, j, err)) return err->code;
        if (j < e) {
            uint8_t b = (uint8_t)text[j];
            int32_t id = t->bytelevel ? t->byte_id[b] : t->byte_fallback ? t->bf_id[b] : -1;
            if (id < 0) id = t->unk_id;
            if (id < 0) return dllm_err_set(err, DLLM_EXIT_INPUT, "input is not valid UTF-8 at byte %zu (and %s has no unk token)", j, t->name);
            emit(es, id, (uint32_t)j, (uint32_t)j + 1);
            j++;
        }
        i = j;
    }
    return 0;
}

int dllm_tokenizer_encode_offsets(dllm_tokenizer *t, const char *text, size_t len, bool add_special,
                                  int32_t **ids, dllm_tok_offset **offsets, size_t *n, dllm_err *err)
{
    *ids = NULL; *n = 0;
    if (offsets) *offsets = NULL;
    if (len >= UINT32_MAX) return dllm_err_set(err, DLLM_EXIT_INPUT, "input of %zu bytes is too long (max 4 GiB)", len);
    enc_state es = {0};
    es.want_offs = offsets != NULL;
    int rc = 0;
    if (add_special)
        for (size_t k = 0; k < t->post_prefix.n; k++) emit(&es, t->post_prefix.p[k], 0, 0);
    size_t pos = 0, ms, me;
    while (pos < len) {
        const added_tok *a = added_next(&t->raw_set, (const uint8_t *)text, len, pos, pos, &ms, &me);
        size_t stop = a ? ms : len;
        if (stop > pos && (rc = encode_segment(t, &es, text, pos, stop, err))) break;
        if (!a) break;
        emit(&es, a->id, (uint32_t)ms, (uint32_t)me);
        pos = me;
    }
    if (!rc && add_special)
        for (size_t k = 0; k < t->post_suffix.n; k++) emit(&es, t->post_suffix.p[k], 0, 0);
    free(es.lens.p); free(es.pa.p); free(es.pb.p); free(es.sp.p); free(es.piecebuf.p);
    if (rc) { free(es.ids.p); free(es.offs.p); return rc; }
    *ids = es.ids.p ? es.ids.p : dllm_malloc(sizeof(int32_t));
    *n = es.ids.n;
    if (offsets) *offsets = es.offs.p ? es.offs.p : dllm_malloc(sizeof(dllm_tok_offset));
    return 0;
}

int dllm_tokenizer_encode(dllm_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                          size_t *n, dllm_err *err)
{
    return dllm_tokenizer_encode_offsets(t, text, len, add_special, ids, NULL, n, err);
}

/* ------------------------------------------------------------------ decode */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int dllm_tokenizer_decode(const dllm_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                          size_t *len, dllm_err *err)
{
    *out = NULL; *len = 0;
    /* token list as (offset, length) into a byte buffer; each decoder rewrites it */
    bbuf buf = {0};
    size_t *ts = dllm_malloc((n + 1) * sizeof *ts), *tl = dllm_malloc((n + 1) * sizeof *tl), nt = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->V || !t->id_tok[id]) {
            free(buf.p); free(ts); free(tl);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "id %d (position %zu) is not in the vocab of %s (size %zu)", id, i, t->name, t->V);
        }
        if (skip_special && (t->id_flags[id] & FLAG_SPECIAL)) continue;
        ts[nt] = buf.n; tl[nt] = t->id_len[id]; nt++;
        bb_put(&buf, t->id_tok[id], t->id_len[id]);
    }
    bytelevel_init();
    for (size_t d = 0; d < t->n_dec; d++) {
        bbuf nb = {0};
        size_t k = 0;
        for (size_t i = 0; i < nt; i++) {
            const char *p = buf.p + ts[i];
            size_t L = tl[i], s0 = nb.n;
            if (t->dec[d] == DEC_BYTELEVEL) {
                /* every char must be a byte-level symbol, else the token's raw bytes */
                bool ok = true;
                for (size_t j = 0; j < L && ok;) {
                    uint32_t cp;
                    size_t l = utf8_valid_len((const uint8_t *)p + j, L - j, &cp);
                    if (!l || cp >= 324 || cp_byte[cp] < 0) { ok = false; break; }
                    char c = (char)cp_byte[cp];
                    bb_put(&nb, &c, 1);
                    j += l;
                }
                if (!ok) { nb.n = s0; bb_put(&nb, p, L); }
            } else if (t->dec[d] == DEC_BYTEFALLBACK && L == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' &&
                       hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
                char c = (char)(hexval(p[3]) * 16 + hexval(p[4]));
                bb_put(&nb, &c, 1);
            } else {
                bb_put(&nb, p, L);
            }
            if (t->dec[d] == DEC_FUSE || t->dec[d] == DEC_BYTELEVEL) { // these fuse into one string
                if (k == 0) { ts[0] = 0; k = 1; }
                tl[0] = nb.n;
            } else {
                ts[k] = s0; tl[k] = nb.n - s0; k++;
            }
        }
        free(buf.p);
        buf = nb; nt = k;
    }
    bbuf res = {0};
    for (size_t i = 0; i < nt; i++) {
        if (i && !t->has_decoder) bb_put(&res, " ", 1); // HF joins with spaces when there is no decoder
        bb_put(&res, buf.p + ts[i], tl[i]);
    }
    if (!res.p) bb_put(&res, "", 0);
    free(buf.p); free(ts); free(tl);
    *out = res.p; *len = res.n;
    return 0;
}

/* ------------------------------------------------------------------ lookups */

int32_t dllm_tokenizer_token_to_id(const dllm_tokenizer *t, const char *token)
{
    int32_t id = sm_get(&t->added_map, token, strlen(token));
    return id >= 0 ? id : sm_get(&t->vocab, token, strlen(token));
}
const char *dllm_tokenizer_id_to_token(const dllm_tokenizer *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->V ? t->id_tok[id] : NULL;
}
size_t dllm_tokenizer_vocab_size(const dllm_tokenizer *t) { return t->V; }
bool dllm_tokenizer_is_special(const dllm_tokenizer *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->V && (t->id_flags[id] & FLAG_SPECIAL);
}

/* ------------------------------------------------------------------ char-level tokenizer */

static const char *const CHAR_SPECIALS[] = {"<|endoftext|>", "<|startoftext|>", "<|mdm_mask|>",
                                            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};

size_t dllm_tokenizer_char_vocab_size(void) { return DLLM_CHAR_UNK + 1; }

static json_t *added_json(int id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0,
                     "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
}

int dllm_tokenizer_write_char(const char *path, dllm_err *err)
{
    json_t *vocab = json_object(), *added = json_array();
    for (int i = 0; i < 6; i++) {
        json_object_set_new(vocab, CHAR_SPECIALS[i], json_integer(i));
        json_array_append_new(added, added_json(i, CHAR_SPECIALS[i]));
    }
    json_object_set_new(vocab, "\n", json_integer(DLLM_CHAR_NEWLINE));
    for (int c = 32; c <= 126; c++) {
        char s[2] = {(char)c, 0};
        json_object_set_new(vocab, s, json_integer(DLLM_CHAR_FIRST_PRINTABLE + c - 32));
    }
    json_object_set_new(vocab, "<|unk|>", json_integer(DLLM_CHAR_UNK));
    json_array_append_new(added, added_json(DLLM_CHAR_UNK, "<|unk|>"));
    json_t *model = json_pack("{s:s, s:n, s:s, s:n, s:n, s:b, s:b, s:b, s:o, s:[]}", "type", "BPE", "dropout",
                              "unk_token", "<|unk|>", "continuing_subword_prefix", "end_of_word_suffix",
                              "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges");
    json_t *bos = json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", "<|startoftext|>", "type_id", 0);
    json_t *post = json_pack(
        "{s:s, s:[o, {s:{s:s, s:i}}], s:[O, {s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}",
        "type", "TemplateProcessing", "single", bos, "Sequence", "id", "A", "type_id", 0, "pair", bos, "Sequence",
        "id", "A", "type_id", 0, "Sequence", "id", "B", "type_id", 1, "special_tokens", "<|startoftext|>", "id",
        "<|startoftext|>", "ids", DLLM_CHAR_BOS, "tokens", "<|startoftext|>");
    json_t *root = json_pack("{s:s, s:n, s:n, s:o, s:n, s:n, s:o, s:{s:s}, s:o}", "version", "1.0", "truncation",
                             "padding", "added_tokens", added, "normalizer", "pre_tokenizer", "post_processor", post,
                             "decoder", "type", "Fuse", "model", model);
    if (!root) return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: building the char tokenizer JSON failed", path);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    json_decref(root);
    if (rc) return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write the tokenizer", path);
    return 0;
}
