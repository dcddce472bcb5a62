/* chat.c: chat prompt formats; see chat.h. Each renderer mirrors its published
 * Jinja template step by step (the golden test renders those templates with jinja2). */
#include "dllm/chat.h"
#include "dllm/arch.h"
#include "dllm/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char DLLM_D1_SYSTEM_PROMPT[] =
    "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>";

typedef struct { char *p; size_t n, cap; } sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = dllm_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_put(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

/* Python's str.isspace() for the code point starting at s (len bytes), 0 if not space. */
static size_t space_len(const unsigned char *s, size_t len)
{
    if (!len) return 0;
    if ((s[0] >= 9 && s[0] <= 13) || (s[0] >= 28 && s[0] <= 32)) return 1;
    if (len >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (len >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; // U+1680
    if (len >= 3 && s[0] == 0xe2 && s[1] == 0x80 && ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3; // U+2000..200A, 2028, 2029, 202F
    if (len >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; // U+205F
    if (len >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; // U+3000
    return 0;
}

/* Jinja's |trim (Python str.strip()): [*s, *s + *n) shrunk. */
static void trim(const char **s, size_t *n)
{
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, b = *n, l;
    while (a < b && (l = space_len(p + a, b - a))) a += l;
    for (;;) { // strip from the right: find the last code point
        if (a == b) break;
        size_t k = b - 1;
        while (k > a && (p[k] & 0xc0) == 0x80 && b - k < 4) k--;
        if (space_len(p + k, b - k) == b - k) b = k; else break;
    }
    *s += a; *n = b - a;
}

static void strip_nl(const char **s, size_t *n, bool left, bool right)
{
    while (left && *n && **s == '\n') (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n') (*n)--;
}

static const char *rfind(const char *s, const char *pat)
{
    const char *r = NULL;
    for (const char *p = strstr(s, pat); p; p = strstr(p + 1, pat)) r = p;
    return r;
}

/* An assistant content's Qwen template split (c NUL-terminated): the body after the last
 * </think>, lstrip \n; the reasoning before the first </think>, rstrip \n, after the last
 * <think> there, lstrip \n. Without </think>: the whole content, no reasoning. */
static void split_think(const char *c, const char **body, size_t *nbody, const char **reason,
                        size_t *nreason)
{
    const char *close = strstr(c, "</think>");
    *body = c, *nbody = strlen(c), *reason = "", *nreason = 0;
    if (!close)
        return;
    *body = rfind(c, "</think>") + 8;
    *nbody = strlen(*body);
    strip_nl(body, nbody, true, false);
    const char *r = c;
    size_t nr = (size_t)(close - c);
    strip_nl(&r, &nr, false, true);
    const char *end = r + nr;
    for (const char *q = c; (q = strstr(q, "<think>")) && q + 7 <= end; q++)
        r = q + 7;
    nr = (size_t)(end - r);
    strip_nl(&r, &nr, true, false);
    *reason = r, *nreason = nr;
}

static void render_qwen25(const dllm_chat_msg *m, const char **content, size_t n, const dllm_chat_opts *o, sbuf *b)
{
    /* the template's default system turn when the first message is not one */
    if (!n || strcmp(m[0].role, "system"))
        sb_put(b, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
    for (size_t i = 0; i < n; i++) {
        sb_put(b, "<|im_start|>"); sb_put(b, m[i].role); sb_put(b, "\n");
        sb_put(b, content[i]); sb_put(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) sb_put(b, "<|im_start|>assistant\n");
}

static void render_qwen3(const dllm_chat_msg *m, const char **content, size_t n, const dllm_chat_opts *o, sbuf *b)
{
    if (n && !strcmp(m[0].role, "system")) {
        sb_put(b, "<|im_start|>system\n"); sb_put(b, content[0]); sb_put(b, "<|im_end|>\n");
    }
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        size_t L = strlen(content[i]);
        bool tool_resp = L >= 15 + 16 && !strncmp(content[i], "<tool_response>", 15) &&
                         !strcmp(content[i] + L - 16, "</tool_response>");
        if (!strcmp(m[i].role, "user") && !tool_resp) { last_query = i; break; }
    }
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *c = content[i];
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            sb_put(b, "<|im_start|>"); sb_put(b, role); sb_put(b, "\n"); sb_put(b, c); sb_put(b, "<|im_end|>\n");
            continue;
        }
        if (strcmp(role, "assistant")) continue;
        const char *body, *reason;
        size_t nbody, nreason;
        split_think(c, &body, &nbody, &reason, &nreason);
        sb_put(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || nreason)) {
            const char *r = reason;
            size_t nr = nreason;
            strip_nl(&r, &nr, true, true);
            sb_put(b, "<think>\n"); sb_putn(b, r, nr); sb_put(b, "\n</think>\n\n");
            strip_nl(&body, &nbody, true, false);
        }
        sb_putn(b, body, nbody);
        sb_put(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) {
        sb_put(b, "<|im_start|>assistant\n");
        if (!o->enable_thinking) sb_put(b, "<think>\n\n</think>\n\n");
    }
}

/* Qwen3.5's template (string contents, no tools): every content trimmed; a system
 * message only first; the last user turn is the query, assistant turns after it
 * carry their <think> block (empty when it has none), earlier ones lose it; the
 * generation prompt opens a <think> block, or closes an empty one when thinking is
 * off. Its raise_exception cases are input errors. */
static int render_qwen35(const dllm_chat_msg *m, const char **content, size_t n, const dllm_chat_opts *o, sbuf *b,
                         dllm_err *err)
{
    if (!n) return dllm_err_set(err, DLLM_EXIT_INPUT, "chat (qwen3.5): no messages");
    size_t last_query = n;
    for (size_t i = n; i-- > 0;) {
        const char *c = content[i];
        size_t L = strlen(c);
        trim(&c, &L);
        bool tool_resp = L >= 15 + 16 && !strncmp(c, "<tool_response>", 15) && !strncmp(c + L - 16, "</tool_response>", 16);
        if (!strcmp(m[i].role, "user") && !tool_resp) { last_query = i; break; }
    }
    if (last_query == n) return dllm_err_set(err, DLLM_EXIT_INPUT, "chat (qwen3.5): no user message");
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role, *c = content[i];
        size_t nc = strlen(c);
        trim(&c, &nc);
        if (!strcmp(role, "system")) {
            if (i > 0)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "chat message %zu (qwen3.5): a system message must be the first", i);
            sb_put(b, "<|im_start|>system\n"); sb_putn(b, c, nc); sb_put(b, "<|im_end|>\n");
        } else if (!strcmp(role, "user")) {
            sb_put(b, "<|im_start|>user\n"); sb_putn(b, c, nc); sb_put(b, "<|im_end|>\n");
        } else {
            /* the trimmed content split as Qwen3's, the reasoning trimmed too */
            char *dup = dllm_malloc(nc + 1);
            memcpy(dup, c, nc);
            dup[nc] = 0;
            const char *body, *reason;
            size_t nbody, nreason;
            split_think(dup, &body, &nbody, &reason, &nreason);
            trim(&reason, &nreason);
            sb_put(b, "<|im_start|>assistant\n");
            if (i > last_query) {
                sb_put(b, "<think>\n"); sb_putn(b, reason, nreason); sb_put(b, "\n</think>\n\n");
            }
            sb_putn(b, body, nbody);
            sb_put(b, "<|im_end|>\n");
            free(dup);
        }
    }
    if (o->add_generation_prompt)
        sb_put(b, o->enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return 0;
}

static void render_llada(const dllm_chat_msg *m, const char **content, size_t n, const dllm_chat_opts *o, sbuf *b)
{
    for (size_t i = 0; i < n; i++) {
        const char *c = content[i];
        size_t nc = strlen(c);
        trim(&c, &nc);
        if (i == 0) sb_put(b, "<|startoftext|>");
        sb_put(b, "<|start_header_id|>"); sb_put(b, m[i].role); sb_put(b, "<|end_header_id|>\n\n");
        sb_putn(b, c, nc);
        sb_put(b, "<|eot_id|>");
    }
    if (o->add_generation_prompt) sb_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

int dllm_chat_render(dllm_chat_format fmt, const dllm_chat_msg *msgs, size_t n, const dllm_chat_opts *opts,
                     char **out, dllm_err *err)
{
    *out = NULL;
    const char **content = dllm_calloc(n + 1, sizeof *content);
    char *d1 = NULL;
    size_t last_user = n;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))) {
            free(content);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "chat message %zu: role must be system, user or assistant%s%s",
                                i, r ? ", found " : "", r ? r : "");
        }
        content[i] = msgs[i].content;
        if (!strcmp(r, "user")) last_user = i;
    }
    if (opts->d1_reasoning && last_user < n) {
        size_t L = strlen(DLLM_D1_SYSTEM_PROMPT) + 2 + strlen(content[last_user]) + 1;
        d1 = dllm_malloc(L);
        snprintf(d1, L, "%s\n\n%s", DLLM_D1_SYSTEM_PROMPT, content[last_user]);
        content[last_user] = d1;
    }
    sbuf b = {0};
    sb_put(&b, "");
    int rc = 0;
    switch (fmt) {
    case DLLM_CHAT_QWEN35: rc = render_qwen35(msgs, content, n, opts, &b, err); break;
    case DLLM_CHAT_QWEN3: render_qwen3(msgs, content, n, opts, &b); break;
    case DLLM_CHAT_QWEN25: render_qwen25(msgs, content, n, opts, &b); break;
    case DLLM_CHAT_LLADA: render_llada(msgs, content, n, opts, &b); break;
    default:
        for (size_t i = 0; i < n; i++) {
            if (i) sb_put(&b, "\n");
            sb_put(&b, content[i]);
        }
        if (opts->add_generation_prompt && n) sb_put(&b, "\n");
    }
    free(d1);
    free(content);
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    return 0;
}

int dllm_chat_prompt(dllm_chat_format fmt, const char *system, const char *user, bool enable_thinking,
                     bool d1_reasoning, char **out, dllm_err *err)
{
    dllm_chat_msg m[2];
    size_t n = 0;
    if (system) m[n++] = (dllm_chat_msg){"system", system};
    m[n++] = (dllm_chat_msg){"user", user};
    dllm_chat_opts o = {.add_generation_prompt = true, .enable_thinking = enable_thinking, .d1_reasoning = d1_reasoning};
    return dllm_chat_render(fmt, m, n, &o, out, err);
}

int dllm_chat_format_parse(const char *name, dllm_chat_format *fmt, dllm_err *err)
{
    if (!strcmp(name, "plain")) *fmt = DLLM_CHAT_PLAIN;
    else if (!strcmp(name, "llada")) *fmt = DLLM_CHAT_LLADA;
    else if (!strcmp(name, "qwen3")) *fmt = DLLM_CHAT_QWEN3;
    else if (!strcmp(name, "qwen2.5")) *fmt = DLLM_CHAT_QWEN25;
    else if (!strcmp(name, "qwen3.5")) *fmt = DLLM_CHAT_QWEN35;
    else return dllm_err_set(err, DLLM_EXIT_INPUT, "unknown chat format '%s' (plain, llada, qwen3, qwen2.5, qwen3.5)", name);
    return 0;
}

const char *dllm_chat_format_name(dllm_chat_format fmt)
{
    return fmt == DLLM_CHAT_LLADA ? "llada" : fmt == DLLM_CHAT_QWEN3 ? "qwen3"
           : fmt == DLLM_CHAT_QWEN25 ? "qwen2.5" : fmt == DLLM_CHAT_QWEN35 ? "qwen3.5" : "plain";
}

static bool file_exists(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* The format a Jinja chat template renders: im_start with a generation prompt that
 * opens a <think> block (Qwen3.5's '<think>\n' literal) -> qwen3.5; other <think> blocks ->
 * qwen3; im_start alone -> qwen2.5; start_header_id -> llada. */
static bool template_format(const char *s, dllm_chat_format *fmt)
{
    if (strstr(s, "<|im_start|>"))
        *fmt = strstr(s, "'<think>\\n'") ? DLLM_CHAT_QWEN35 : strstr(s, "<think>") ? DLLM_CHAT_QWEN3 : DLLM_CHAT_QWEN25;
    else if (strstr(s, "<|start_header_id|>"))
        *fmt = DLLM_CHAT_LLADA;
    else
        return false;
    return true;
}

int dllm_chat_format_from_dir(const char *dir, dllm_chat_format *fmt, dllm_err *err)
{
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (file_exists(path)) {
        json_t *root = json_load_file(path, 0, &je);
        if (!root) return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        json_t *tpl = json_object_get(root, "chat_template");
        const char *s = json_is_string(tpl) ? json_string_value(tpl) : NULL;
        bool found = s && template_format(s, fmt);
        json_decref(root);
        if (found) return 0;
    }
    /* transformers 5 saves the template beside, as chat_template.jinja */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *fp = fopen(path, "rb");
    if (fp) {
        sbuf t = {0};
        char buf[4096];
        size_t k;
        sb_put(&t, "");
        while ((k = fread(buf, 1, sizeof buf, fp)) > 0) sb_putn(&t, buf, k);
        fclose(fp);
        bool found = template_format(t.p, fmt);
        free(t.p);
        if (found) return 0;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (file_exists(path)) {
        dllm_tokenizer *tok;
        if (dllm_tokenizer_load(&tok, path, err)) return err->code;
        bool is_char = dllm_tokenizer_vocab_size(tok) == dllm_tokenizer_char_vocab_size() &&
                       dllm_tokenizer_token_to_id(tok, "<|unk|>") == DLLM_CHAR_UNK;
        dllm_tokenizer_free(tok);
        if (is_char) { *fmt = DLLM_CHAT_PLAIN; return 0; }
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    json_t *mt = json_object_get(root, "model_type");
    const char *s = json_is_string(mt) ? json_string_value(mt) : "";
    int rc = 0;
    const dllm_arch_desc *a = dllm_arch_by_model_type(s);
    if (a) *fmt = a->chat;
    else if (!strcmp(s, "qwen2")) *fmt = DLLM_CHAT_QWEN3; /* a Qwen2 tokenizer's directory: the same template */
    else if (!strcmp(s, "qwen3_5") || !strcmp(s, "qwen3_5_text")) *fmt = DLLM_CHAT_QWEN35;
    else rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: model_type '%s' has no known chat format (llada, qwen3, Dream, qwen3_5)", path, s);
    json_decref(root);
    return rc;
}
