/* test_tokenizer: tokenizer.json loading, encode/decode against HF `tokenizers` goldens
 * (tests/ref/make_tokenizer_goldens.py), the char-level tokenizer, hostile files, CLI. */
#include "tests/harness/harness.h"
#include "dllm/tokenizer.h"

#include <check.h>
#include <jansson.h>
#include <zlib.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char data_dir[4096], tmp_dir[4096];
static dllm_tokenizer *qwen;

static void path_of(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/tokenizer/%s", data_dir, rel); }

static json_t *load_json(const char *rel)
{
    char p[4096];
    json_error_t je;
    path_of(p, sizeof p, rel);
    json_t *j = json_load_file(p, JSON_ALLOW_NUL, &je);
    ck_assert_msg(j != NULL, "%s: %s", p, je.text);
    return j;
}

/* The committed Qwen3 tokenizer is gzip'd: inflate it in memory with zlib. */
static dllm_tokenizer *load_qwen(void)
{
    char p[4096];
    path_of(p, sizeof p, "qwen3-tokenizer.json.gz");
    gzFile gz = gzopen(p, "rb");
    ck_assert_msg(gz != NULL, "cannot open %s", p);
    size_t cap = 1 << 23, n = 0;
    char *buf = malloc(cap);
    int r;
    while ((r = gzread(gz, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    gzclose(gz);
    dllm_tokenizer *t;
    dllm_err err = {0};
    int rc = dllm_tokenizer_load_buffer(&t, p, buf, n, &err);
    free(buf);
    ck_assert_msg(rc == 0, "%s", err.msg);
    return t;
}

static void setup(void)
{
    const char *d = getenv("DLLM_TEST_DATA");
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "tests/data");
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/dllm_tok_XXXXXX");
    ck_assert(mkdtemp(tmp_dir) != NULL);
}
static void teardown(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void check_ids(dllm_tokenizer *t, const char *what, const char *text, size_t len, bool special,
                      json_t *want)
{
    int32_t *ids;
    size_t n;
    dllm_err err = {0};
    ck_assert_msg(dllm_tokenizer_encode(t, text, len, special, &ids, &n, &err) == 0, "%s: %s", what, err.msg);
    ck_assert_msg(n == json_array_size(want), "%s %.60s: %zu tokens, HF %zu", what, text, n, json_array_size(want));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] == json_integer_value(json_array_get(want, i)), "%s %.60s: token %zu is %d, HF %lld",
                      what, text, i, ids[i], (long long)json_integer_value(json_array_get(want, i)));
    free(ids);
}

static void check_decode(dllm_tokenizer *t, const char *what, json_t *ids, bool skip, json_t *want)
{
    size_t n = json_array_size(ids);
    int32_t *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    char *out;
    size_t len;
    dllm_err err = {0};
    ck_assert_msg(dllm_tokenizer_decode(t, v, n, skip, &out, &len, &err) == 0, "%s", err.msg);
    ck_assert_msg(len == json_string_length(want) && !memcmp(out, json_string_value(want), len),
                  "%s: decode%s gives '%s', HF '%s'", what, skip ? " (skip special)" : "", out, json_string_value(want));
    free(out);
    free(v);
}

/* Exact ids and decodes for every case of a golden file. */
static void check_golden_file(dllm_tokenizer *t, const char *rel)
{
    json_t *g = load_json(rel), *cases = json_object_get(g, "cases");
    ck_assert(json_array_size(cases) > 0);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *text = json_object_get(c, "text");
        check_ids(t, rel, json_string_value(text), json_string_length(text), false, json_object_get(c, "ids"));
        check_decode(t, rel, json_object_get(c, "ids"), false, json_object_get(c, "decoded"));
        check_decode(t, rel, json_object_get(c, "ids"), true, json_object_get(c, "decoded_skip"));
    }
    json_decref(g);
}

START_TEST(test_qwen3_goldens)
{
    json_t *g = load_json("qwen3_goldens.json");
    ck_assert_uint_ge(json_array_size(json_object_get(g, "cases")), 60);
    json_decref(g);
    check_golden_file(qwen, "qwen3_goldens.json");
}
END_TEST

START_TEST(test_qwen3_heldout)
{
    check_golden_file(qwen, "qwen3_heldout.json");
}
END_TEST

/* Qwen3.5's pipeline (transformers' Qwen3_5Tokenizer: NFC, a split that keeps marks with
 * letters, byte level) over a small trained vocabulary with the chat specials. */
START_TEST(test_qwen35_goldens)
{
    char p[4096];
    path_of(p, sizeof p, "qwen35-tokenizer.json");
    dllm_tokenizer *t = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tokenizer_load(&t, p, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dllm_tokenizer_token_to_id(t, "<|im_end|>"), 602);
    ck_assert(dllm_tokenizer_is_special(t, 602));
    json_t *g = load_json("qwen35_goldens.json");
    ck_assert_uint_ge(json_array_size(json_object_get(g, "cases")), 60);
    json_decref(g);
    check_golden_file(t, "qwen35_goldens.json");
    dllm_tokenizer_free(t);
}
END_TEST

/* decode(encode(s)) == s for the cases NFC leaves alone; offsets cover each token's bytes. */
START_TEST(test_qwen3_roundtrip_offsets)
{
    json_t *g = load_json("qwen3_goldens.json"), *cases = json_object_get(g, "cases");
    size_t checked = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *text = json_object_get(c, "text"), *dec = json_object_get(c, "decoded");
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        int32_t *ids;
        dllm_tok_offset *off;
        size_t n;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_tokenizer_encode_offsets(qwen, s, len, false, &ids, &off, &n, &err), 0);
        ck_assert_uint_eq(n, json_array_size(json_object_get(c, "ids")));
        bool nfc_stable = json_string_length(dec) == len && !memcmp(json_string_value(dec), s, len);
        uint32_t prev = 0;
        for (size_t k = 0; k < n; k++) {
            ck_assert_msg(off[k].start >= prev && off[k].end >= off[k].start && off[k].end <= len,
                          "case %zu token %zu: offsets [%u, %u) out of order", i, k, off[k].start, off[k].end);
            prev = off[k].start;
            if (!nfc_stable) continue;
            char *tokb;
            size_t tl;
            ck_assert_int_eq(dllm_tokenizer_decode(qwen, &ids[k], 1, false, &tokb, &tl, &err), 0);
            ck_assert_msg(tl == off[k].end - off[k].start && !memcmp(tokb, s + off[k].start, tl),
                          "case %zu token %zu: offsets [%u, %u) do not cover its bytes", i, k, off[k].start, off[k].end);
            free(tokb);
        }
        if (nfc_stable) {
            char *out;
            size_t ol;
            ck_assert_int_eq(dllm_tokenizer_decode(qwen, ids, n, false, &out, &ol, &err), 0);
            ck_assert_msg(ol == len && !memcmp(out, s, len), "case %zu: decode(encode(s)) != s", i);
            free(out);
            checked++;
        }
        free(ids);
        free(off);
    }
    ck_assert_uint_ge(checked, 50);
    json_decref(g);
}
END_TEST

/* Any bytes (invalid UTF-8, NUL, lone continuation bytes) survive encode/decode. The
 * generator never forms text that NFC changes (no combining marks): only lone
 * continuation bytes, never-valid bytes, and leads of Latin-1 / CJK characters. */
START_TEST(test_qwen3_binary_roundtrip)
{
    uint64_t x = 88172645463325252ull;
    for (int trial = 0; trial < 300; trial++) {
        size_t len = (size_t)(trial % 97);
        char buf[128];
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int kind = (int)(x % 4);
            unsigned r = (unsigned)(x >> 8);
            buf[i] = kind == 0 ? (char)(0x80 + r % 0x80) : kind == 1 ? (char)('a' + r % 26)
                   : kind == 2 ? " \n\t<|>'"[r % 7] : "\x00\xc0\xc1\xf5\xff\xc3\xe6"[r % 7];
        }
        int32_t *ids;
        size_t n;
        dllm_err err = {0};
        ck_assert_msg(dllm_tokenizer_encode(qwen, buf, len, false, &ids, &n, &err) == 0, "%s", err.msg);
        char *out;
        size_t ol;
        ck_assert_int_eq(dllm_tokenizer_decode(qwen, ids, n, false, &out, &ol, &err), 0);
        ck_assert_msg(ol == len && !memcmp(out, buf, len), "trial %d: binary round trip failed", trial);
        free(out);
        free(ids);
    }
}
END_TEST

/* Every added token of tokenizer_config.json (an independent listing) maps both ways. */
START_TEST(test_qwen3_lookups)
{
    json_t *cfg = load_json("qwen3-tokenizer_config.json"), *dec = json_object_get(cfg, "added_tokens_decoder");
    const char *key;
    json_t *v;
    size_t count = 0;
    json_object_foreach(dec, key, v) {
        int32_t id = atoi(key);
        const char *content = json_string_value(json_object_get(v, "content"));
        ck_assert_int_eq(dllm_tokenizer_token_to_id(qwen, content), id);
        ck_assert_str_eq(dllm_tokenizer_id_to_token(qwen, id), content);
        ck_assert_int_eq(dllm_tokenizer_is_special(qwen, id), json_is_true(json_object_get(v, "special")));
        count++;
    }
    ck_assert_uint_eq(count, 26);
    ck_assert_uint_eq(dllm_tokenizer_vocab_size(qwen), 151643 + 26);
    ck_assert_int_eq(dllm_tokenizer_token_to_id(qwen, "<|mdm_mask|>"), -1);
    ck_assert_ptr_null(dllm_tokenizer_id_to_token(qwen, 151669));
    ck_assert_ptr_null(dllm_tokenizer_id_to_token(qwen, -1));
    /* add_special adds nothing for Qwen3 (its post_processor is ByteLevel) */
    int32_t *a, *b;
    size_t na, nb;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_tokenizer_encode(qwen, "hi there", 8, true, &a, &na, &err), 0);
    ck_assert_int_eq(dllm_tokenizer_encode(qwen, "hi there", 8, false, &b, &nb, &err), 0);
    ck_assert_uint_eq(na, nb);
    ck_assert(!memcmp(a, b, na * sizeof *a));
    free(a); free(b);
    /* ids outside the vocab are bad input */
    int32_t bad[2] = {100, 151669};
    char *out;
    size_t ol;
    ck_assert_int_eq(dllm_tokenizer_decode(qwen, bad, 2, false, &out, &ol, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "151669"));
    json_decref(cfg);
}
END_TEST

START_TEST(test_variants)
{
    json_t *g = load_json("variant_goldens.json"), *cases = json_object_get(g, "cases");
    dllm_tokenizer *t = NULL;
    char cur[256] = "";
    size_t nvar = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *text = json_object_get(c, "text");
        const char *name = json_string_value(json_object_get(c, "variant"));
        if (strcmp(name, cur)) {
            dllm_tokenizer_free(t);
            char p[4096], rel[300];
            snprintf(rel, sizeof rel, "variants/%s.json", name);
            path_of(p, sizeof p, rel);
            dllm_err err = {0};
            ck_assert_msg(dllm_tokenizer_load(&t, p, &err) == 0, "%s", err.msg);
            snprintf(cur, sizeof cur, "%s", name);
            nvar++;
        }
        check_ids(t, name, json_string_value(text), json_string_length(text), false, json_object_get(c, "ids"));
        check_ids(t, name, json_string_value(text), json_string_length(text), true, json_object_get(c, "ids_special"));
        check_decode(t, name, json_object_get(c, "ids"), false, json_object_get(c, "decoded"));
        check_decode(t, name, json_object_get(c, "ids"), true, json_object_get(c, "decoded_skip"));
    }
    dllm_tokenizer_free(t);
    ck_assert_uint_ge(nvar, 10);
    json_decref(g);
}
END_TEST

static void check_char_cases(dllm_tokenizer *t, json_t *g)
{
    json_t *cases = json_object_get(g, "cases");
    ck_assert_uint_eq(dllm_tokenizer_vocab_size(t), (size_t)json_integer_value(json_object_get(g, "vocab_size")));
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *text = json_object_get(c, "text");
        check_ids(t, "char", json_string_value(text), json_string_length(text), false, json_object_get(c, "ids"));
        check_ids(t, "char", json_string_value(text), json_string_length(text), true, json_object_get(c, "ids_special"));
        check_decode(t, "char", json_object_get(c, "ids"), false, json_object_get(c, "decoded"));
        check_decode(t, "char", json_object_get(c, "ids"), true, json_object_get(c, "decoded_skip"));
    }
    /* the fixed layout, read from the spec's vocab */
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(json_object_get(g, "tokenizer"), "model"), "vocab"), key, v)
        ck_assert_int_eq(dllm_tokenizer_token_to_id(t, key), json_integer_value(v));
    ck_assert_int_eq(dllm_tokenizer_token_to_id(t, "<|mdm_mask|>"), DLLM_CHAR_MASK);
    ck_assert_int_eq(dllm_tokenizer_token_to_id(t, "<|startoftext|>"), DLLM_CHAR_BOS);
    ck_assert_int_eq(dllm_tokenizer_token_to_id(t, "<|unk|>"), DLLM_CHAR_UNK);
}

START_TEST(test_char_tokenizer)
{
    json_t *g = load_json("char_goldens.json");
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.json", tmp_dir);
    dllm_err err = {0};
    ck_assert_msg(dllm_tokenizer_write_char(p, &err) == 0, "%s", err.msg);
    dllm_tokenizer *t;
    ck_assert_msg(dllm_tokenizer_load(&t, p, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(dllm_tokenizer_vocab_size(t), dllm_tokenizer_char_vocab_size());
    check_char_cases(t, g);
    dllm_tokenizer_free(t);
    /* the spec as built by the reference script loads and behaves the same */
    char *spec = json_dumps(json_object_get(g, "tokenizer"), 0);
    ck_assert_int_eq(dllm_tokenizer_load_buffer(&t, "char_goldens.json:tokenizer", spec, strlen(spec), &err), 0);
    check_char_cases(t, g);
    dllm_tokenizer_free(t);
    free(spec);
    json_decref(g);
}
END_TEST

START_TEST(test_malformed)
{
    char dir[4096];
    path_of(dir, sizeof dir, "malformed");
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    size_t count = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        dllm_tokenizer *t = (dllm_tokenizer *)1;
        dllm_err err = {0};
        int rc = dllm_tokenizer_load(&t, p, &err);
        ck_assert_msg(rc == DLLM_EXIT_INPUT, "%s: expected a bad-input error, got %d", e->d_name, rc);
        ck_assert_ptr_null(t);
        ck_assert_msg(!strncmp(err.msg, p, strlen(p)) && err.msg[strlen(p)] == ':', "%s: message '%s' must start with the file name",
                      e->d_name, err.msg);
        const char *rest = err.msg + strlen(p);
        int line, col;
        if (!strncmp(e->d_name, "syntax_", 7))
            ck_assert_msg(sscanf(rest, ":%d:%d:", &line, &col) == 2, "%s: no line:col in '%s'", e->d_name, err.msg);
        if (!strncmp(e->d_name, "merge", 5)) ck_assert_msg(strstr(rest, "model.merges"), "%s: %s", e->d_name, err.msg);
        if (!strncmp(e->d_name, "vocab", 5)) ck_assert_msg(strstr(rest, "model.vocab"), "%s: %s", e->d_name, err.msg);
        if (!strncmp(e->d_name, "added", 5)) ck_assert_msg(strstr(rest, "added_tokens"), "%s: %s", e->d_name, err.msg);
        if (strstr(e->d_name, "model")) ck_assert_msg(strstr(rest, "model"), "%s: %s", e->d_name, err.msg);
        count++;
    }
    closedir(d);
    ck_assert_uint_ge(count, 25);
    dllm_tokenizer *t;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_tokenizer_load(&t, "no/such/tokenizer.json", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no/such/tokenizer.json"));
}
END_TEST

/* ---- CLI: runs the built binary with files under the temp dir */

static char *slurp(const char *p, size_t *len)
{
    char *s;
    dllm_err err = {0};
    ck_assert_msg(dllm_read_file(p, &s, len, &err) == 0, "%s", err.msg);
    return s;
}

START_TEST(test_cli)
{
    const char *bin = getenv("DLLM_BIN");
    if (!bin) { fprintf(stderr, "test_cli: DLLM_BIN not set, CLI not tested\n"); return; }
    char tok[4200], in[4200], out[4200], out2[4200];
    snprintf(tok, sizeof tok, "%s/char.json", tmp_dir);
    snprintf(in, sizeof in, "%s/in.txt", tmp_dir);
    snprintf(out, sizeof out, "%s/out.txt", tmp_dir);
    snprintf(out2, sizeof out2, "%s/out2.txt", tmp_dir);
    ck_assert_int_eq(tu_sh("'%s' tokenize --write-char '%s'", bin, tok), 0);
    /* stdin read exactly: no trailing newline added or stripped, NUL kept (-> unk) */
    const char text[] = "Hi!\nend\0x";
    FILE *f = fopen(in, "wb");
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' < '%s' > '%s'", bin, tok, in, out), 0);
    size_t len;
    char *s = slurp(out, &len);
    ck_assert_str_eq(s, "47,80,8,6,76,85,75,102,95\n");
    free(s);
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' --add-special < '%s' > '%s'", bin, tok, in, out), 0);
    s = slurp(out, &len);
    ck_assert_str_eq(s, "1,47,80,8,6,76,85,75,102,95\n");
    free(s);
    /* --decode writes the text exactly */
    f = fopen(in, "wb");
    fputs("47, 80,8,6\n", f);
    fclose(f);
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' --decode < '%s' > '%s'", bin, tok, in, out), 0);
    s = slurp(out, &len);
    ck_assert_uint_eq(len, 4);
    ck_assert(!memcmp(s, "Hi!\n", 4));
    free(s);
    /* Qwen3 round trip through the CLI on multilingual text */
    char qpath[4200];
    snprintf(qpath, sizeof qpath, "%s/qwen.json", tmp_dir);
    char gz[4096];
    path_of(gz, sizeof gz, "qwen3-tokenizer.json.gz");
    ck_assert_int_eq(tu_sh("gzip -dc '%s' > '%s'", gz, qpath), 0);
    f = fopen(in, "wb");
    fputs("日本語 text\r\n<|im_start|>x 🤗\n\n", f);
    fclose(f);
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' < '%s' > '%s' && '%s' tokenize --tokenizer '%s' --decode < '%s' > '%s'",
                        bin, qpath, in, out, bin, qpath, out, out2), 0);
    ck_assert_int_eq(tu_sh("cmp -s '%s' '%s'", in, out2), 0);
    /* --json: ids, tokens, byte offsets */
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' --json < '%s' > '%s'", bin, qpath, in, out), 0);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    ck_assert_ptr_nonnull(j);
    json_t *ids = json_object_get(j, "ids"), *offs = json_object_get(j, "offsets");
    ck_assert_uint_gt(json_array_size(ids), 5);
    ck_assert_uint_eq(json_array_size(ids), json_array_size(json_object_get(j, "tokens")));
    ck_assert_uint_eq(json_array_size(ids), json_array_size(offs));
    json_t *lastoff = json_array_get(offs, json_array_size(offs) - 1);
    ck_assert_int_eq(json_integer_value(json_array_get(lastoff, 1)), (json_int_t)strlen("日本語 text\r\n<|im_start|>x 🤗\n\n"));
    json_decref(j);
    /* bad input: exit 2, stderr naming the flag or the value */
    static const struct { const char *cmd, *says; } bad[] = {
        {"'%s' tokenize < /dev/null", "--tokenizer FILE is required"},
        {"'%s' tokenize --tokenizer '%s' --bogus < /dev/null", "'--bogus'"},
        {"'%s' tokenize --tokenizer '%s' --decode < '%s'", "stdin: byte 0: expected a token id"},
        {"echo 5,999 | '%s' tokenize --tokenizer '%s' --decode", "id 999 (position 1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, bad[i].cmd, bin, tok, tok);
        ck_assert_int_eq(tu_sh("%s > /dev/null 2> '%s'", cmd, out), 2);
        s = slurp(out, &len);
        ck_assert_msg(strstr(s, bad[i].says), "%s: stderr does not say '%s': %s", cmd, bad[i].says, s);
        free(s);
    }
    char mal[4096];
    path_of(mal, sizeof mal, "malformed/syntax_truncated.json");
    ck_assert_int_eq(tu_sh("'%s' tokenize --tokenizer '%s' < /dev/null 2> '%s'", bin, mal, out), 2);
    s = slurp(out, &len);
    ck_assert_ptr_nonnull(strstr(s, "syntax_truncated.json:"));
    free(s);
    ck_assert_int_eq(tu_sh("'%s' tokenize --help > /dev/null", bin), 0);
}
END_TEST

static void qwen_setup(void)
{
    setup();
    if (!qwen) qwen = load_qwen();
}

static int free_qwen(int status)
{
    dllm_tokenizer_free(qwen);
    return status;
}

Suite *tu_suite(tu_ctx *ctx)
{
    Suite *s = suite_create("tokenizer");
    TCase *tq = tcase_create("qwen3");
    tcase_add_checked_fixture(tq, qwen_setup, teardown);
    tcase_set_timeout(tq, 120);
    tcase_add_test(tq, test_qwen3_goldens);
    tcase_add_test(tq, test_qwen3_heldout);
    tcase_add_test(tq, test_qwen3_roundtrip_offsets);
    tcase_add_test(tq, test_qwen3_binary_roundtrip);
    tcase_add_test(tq, test_qwen3_lookups);
    suite_add_tcase(s, tq);
    TCase *to = tcase_create("other");
    tcase_add_checked_fixture(to, setup, teardown);
    tcase_set_timeout(to, 120);
    tcase_add_test(to, test_variants);
    tcase_add_test(to, test_qwen35_goldens);
    tcase_add_test(to, test_char_tokenizer);
    tcase_add_test(to, test_malformed);
    tcase_add_test(to, test_cli);
    suite_add_tcase(s, to);
    ctx->nofork = true; /* load the 7 MB Qwen3 file once */
    ctx->finish = free_qwen;
    return s;
}
