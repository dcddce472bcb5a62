#include "src/data/sft_data.h"
#include "src/data/prompt.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int encode_field(dllm_tokenizer *tok, const char *path, int line, const char *what,
                        const char *text, int32_t **ids, size_t *n, dllm_err *err)
{
    if (dllm_tokenizer_encode(tok, text, strlen(text), false, ids, n, err))
        return dllm_err_prefix(err, "%s:%d: %s", path, line, what);
    /* training on <|unk|> for every character the tokenizer lacks teaches nothing */
    size_t unk = prompt_unknown_chars(tok, text, *ids, *n);
    if (unk) {
        free(*ids);
        *ids = NULL;
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s:%d: %s: %zu character(s) the tokenizer cannot represent "
                            "(non-ASCII under the char tokenizer) would become <|unk|>",
                            path, line, what, unk);
    }
    return 0;
}

int sft_data_load(sft_dataset *ds, const char *path, dllm_tokenizer *tok,
                  const dllm_model_config *cfg, int max_len, int answer_len, bool chat,
                  dllm_err *err)
{
    (void)chat; /* chat formats arrive with the chat module */
    memset(ds, 0, sizeof *ds);
    FILE *f = fopen(path, "r");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    int line = 0, cap_ex = 0, rc = 0;
    for (ssize_t got; (got = getline(&buf, &cap, f)) != -1;) {
        line++;
        size_t k = strspn(buf, " \t\r\n");
        if (buf[k] == '\0')
            continue;
        json_error_t je;
        json_t *o = json_loads(buf, JSON_REJECT_DUPLICATES, &je);
        if (!o) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: invalid JSON: %s", path, line,
                              je.column, je.text);
            break;
        }
        const char *prompt = json_string_value(json_object_get(o, "prompt"));
        const char *answer = json_string_value(json_object_get(o, "answer"));
        if (!json_is_object(o) || !prompt || !answer) {
            json_decref(o);
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s:%d: expected an object with string fields \"prompt\" and \"answer\"",
                              path, line);
            break;
        }
        int32_t *p = NULL, *a = NULL;
        size_t np = 0, na = 0;
        rc = encode_field(tok, path, line, "prompt", prompt, &p, &np, err);
        if (!rc)
            rc = encode_field(tok, path, line, "answer", answer, &a, &na, err);
        json_decref(o);
        if (rc) {
            free(p);
            free(a);
            break;
        }
        int len = (int)(np + na) + 2;
        if (answer_len > 0 && (int)na + 1 > answer_len) {
            free(p);
            free(a);
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s:%d: the answer is %d tokens with its EOS, more than "
                              "data.answer_length %d",
                              path, line, (int)na + 1, answer_len);
            break;
        }
        if (answer_len > 0)
            len = (int)np + 1 + answer_len;
        if (len > max_len) {
            free(p);
            free(a);
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s:%d: %d tokens (BOS, prompt, answer, EOS%s) exceed data.max_len %d",
                              path, line, len, answer_len > 0 ? " and padding" : "", max_len);
            break;
        }
        if (ds->n == cap_ex)
            ds->ex = dllm_realloc(ds->ex, sizeof *ds->ex * (size_t)(cap_ex = cap_ex ? 2 * cap_ex : 64));
        sft_example *e = &ds->ex[ds->n++];
        e->ids = dllm_malloc(sizeof *e->ids * (size_t)len);
        e->ids[0] = cfg->bos_token_id >= 0 ? cfg->bos_token_id : cfg->eos_token_id;
        memcpy(e->ids + 1, p, sizeof *p * np);
        memcpy(e->ids + 1 + np, a, sizeof *a * na);
        for (int i = 1 + (int)(np + na); i < len; i++)
            e->ids[i] = cfg->eos_token_id; /* EOS, then EOS padding up to answer_len */
        e->prompt_len = (int)np + 1;
        e->len = len;
        if (len > ds->max_len)
            ds->max_len = len;
        for (int i = 0; i < len; i++)
            if (e->ids[i] < 0 || e->ids[i] >= cfg->vocab_size) {
                rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                  "%s:%d: token id %d is outside the model's vocabulary (%d)", path,
                                  line, e->ids[i], cfg->vocab_size);
                break;
            }
        free(p);
        free(a);
        if (rc)
            break;
    }
    free(buf);
    fclose(f);
    if (!rc && ds->n == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no examples", path);
    if (rc)
        sft_data_free(ds);
    return rc;
}

void sft_data_free(sft_dataset *ds)
{
    for (int i = 0; i < ds->n; i++)
        free(ds->ex[i].ids);
    free(ds->ex);
    memset(ds, 0, sizeof *ds);
}
