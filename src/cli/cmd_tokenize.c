/* dllm-rl tokenize: stdin -> token ids (or ids -> text with --decode), using a
 * tokenizer.json. Input is read exactly (binary-safe, no newline added or stripped);
 * ids are printed comma-separated on one line. */
#include "src/cli/commands.h"
#include "dllm/tokenizer.h"

#include <jansson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dllm-rl tokenize --tokenizer FILE [--decode] [--json] [--add-special]\n"
            "                        [--skip-special] [--stats]\n"
            "       dllm-rl tokenize --write-char FILE\n\n"
            "Encodes stdin (all bytes, exactly) and prints the ids comma-separated on one line.\n\n"
            "  --tokenizer FILE  a HF tokenizer.json (byte-level BPE such as Qwen3/LLaDA, or char-level)\n"
            "  --decode          read comma-separated ids from stdin and write the text exactly\n"
            "  --skip-special    with --decode: drop special tokens\n"
            "  --json            print {\"ids\": [..], \"tokens\": [..], \"offsets\": [[start, end], ..]}\n"
            "                    (byte offsets into the input)\n"
            "  --add-special     add the tokens of the tokenizer's post_processor template\n"
            "                    (Qwen3: none; char tokenizer: BOS)\n"
            "  --stats           print bytes, tokens and encode throughput to stderr\n"
            "  --write-char FILE write the char-level tokenizer.json for tiny models and exit\n\n"
            "exit status: 0 success, 2 bad input, 1 internal failure\n");
}

static int read_stdin(char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = dllm_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = dllm_realloc(buf, cap *= 2);
        size_t r = fread(buf + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        fprintf(stderr, "dllm-rl tokenize: reading stdin: %s\n", strerror(errno));
        return 1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static int do_decode(const dllm_tokenizer *tok, const char *in, size_t len, bool skip_special)
{
    size_t cap = 256, n = 0;
    int32_t *ids = dllm_malloc(cap * sizeof *ids);
    size_t i = 0;
    for (;;) {
        while (i < len && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r')) i++;
        if (i == len) break;
        char *end;
        errno = 0;
        long v = strtol(in + i, &end, 10);
        if (end == in + i || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "dllm-rl tokenize: stdin: byte %zu: expected a token id\n", i);
            free(ids);
            return 2;
        }
        if (n == cap) ids = dllm_realloc(ids, (cap *= 2) * sizeof *ids);
        ids[n++] = (int32_t)v;
        i = (size_t)(end - in);
        while (i < len && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r')) i++;
        if (i < len) {
            if (in[i] != ',') {
                fprintf(stderr, "dllm-rl tokenize: stdin: byte %zu: expected ',' between ids\n", i);
                free(ids);
                return 2;
            }
            i++;
        }
    }
    dllm_err err = {0};
    char *text;
    size_t tlen;
    int rc = dllm_tokenizer_decode(tok, ids, n, skip_special, &text, &tlen, &err);
    free(ids);
    if (rc) {
        fprintf(stderr, "dllm-rl tokenize: %s\n", err.msg);
        return rc;
    }
    fwrite(text, 1, tlen, stdout);
    free(text);
    return 0;
}

static int print_json(const dllm_tokenizer *tok, const int32_t *ids, const dllm_tok_offset *offs, size_t n)
{
    json_t *jids = json_array(), *jtoks = json_array(), *joffs = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *s = dllm_tokenizer_id_to_token(tok, ids[i]);
        json_array_append_new(jids, json_integer(ids[i]));
        json_array_append_new(jtoks, s ? json_string(s) : json_null());
        json_array_append_new(joffs, json_pack("[i, i]", (int)offs[i].start, (int)offs[i].end));
    }
    json_t *root = json_pack("{s:o, s:o, s:o}", "ids", jids, "tokens", jtoks, "offsets", joffs);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) return 1;
    printf("%s\n", s);
    free(s);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL, *write_char = NULL;
    bool decode = false, json = false, add_special = false, skip_special = false, stats = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--tokenizer") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(a, "--write-char") && i + 1 < argc) write_char = argv[++i];
        else if (!strcmp(a, "--decode")) decode = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--add-special")) add_special = true;
        else if (!strcmp(a, "--skip-special")) skip_special = true;
        else if (!strcmp(a, "--stats")) stats = true;
        else {
            fprintf(stderr, "dllm-rl tokenize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    dllm_err err = {0};
    if (write_char) {
        if (dllm_tokenizer_write_char(write_char, &err)) {
            fprintf(stderr, "dllm-rl tokenize: %s\n", err.msg);
            return err.code;
        }
        return 0;
    }
    if (!path || (decode && (json || add_special)) || (!decode && skip_special)) {
        fprintf(stderr, "dllm-rl tokenize: %s\n\n",
                !path ? "--tokenizer FILE is required" : "--decode goes with --skip-special only");
        usage(stderr);
        return 2;
    }
    dllm_tokenizer *tok;
    if (dllm_tokenizer_load(&tok, path, &err)) {
        fprintf(stderr, "dllm-rl tokenize: %s\n", err.msg);
        return err.code;
    }
    char *in;
    size_t len;
    if (read_stdin(&in, &len)) { dllm_tokenizer_free(tok); return 1; }
    int rc = 0;
    if (decode) {
        rc = do_decode(tok, in, len, skip_special);
    } else {
        int32_t *ids;
        dllm_tok_offset *offs = NULL;
        size_t n;
        double t0 = dllm_now();
        rc = dllm_tokenizer_encode_offsets(tok, in, len, add_special, &ids, json ? &offs : NULL, &n, &err);
        double dt = dllm_now() - t0;
        if (rc) {
            fprintf(stderr, "dllm-rl tokenize: %s\n", err.msg);
        } else {
            if (stats)
                fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.4f s (%.2f MB/s)\n", len, n, dt,
                        dt > 0 ? (double)len / dt / 1e6 : 0.0);
            if (json) rc = print_json(tok, ids, offs, n);
            else {
                for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
                printf("\n");
            }
            free(ids);
            free(offs);
        }
    }
    free(in);
    dllm_tokenizer_free(tok);
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "dllm-rl tokenize: writing stdout failed\n");
        return 1;
    }
    return rc;
}
