#include "src/data/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t prompt_unknown_chars(const dllm_tokenizer *tok, const char *text, const int32_t *ids,
                            size_t n)
{
    int32_t unk = dllm_tokenizer_token_to_id(tok, "<|unk|>");
    if (unk < 0 || strstr(text, "<|unk|>"))
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ids[i] == unk;
    return k;
}

int prompt_encode(dllm_tokenizer *tok, dllm_chat_format fmt, const dllm_model_config *mc,
                  const char *text, int32_t **out, int *nout, dllm_err *err)
{
    return prompt_encode_d1(tok, fmt, mc, text, false, out, nout, err);
}

int prompt_encode_d1(dllm_tokenizer *tok, dllm_chat_format fmt, const dllm_model_config *mc,
                     const char *text, bool d1, int32_t **out, int *nout, dllm_err *err)
{
    char *rendered = NULL;
    if (fmt != DLLM_CHAT_PLAIN && dllm_chat_prompt(fmt, NULL, text, false, d1, &rendered, err))
        return err->code;
    if (fmt == DLLM_CHAT_PLAIN && d1) {
        size_t n = strlen(DLLM_D1_SYSTEM_PROMPT) + strlen(text) + 3;
        rendered = dllm_malloc(n);
        snprintf(rendered, n, "%s\n\n%s", DLLM_D1_SYSTEM_PROMPT, text);
    }
    const char *s = rendered ? rendered : text;
    int32_t *ids;
    size_t n;
    int rc = dllm_tokenizer_encode(tok, s, strlen(s), false, &ids, &n, err);
    free(rendered);
    if (rc)
        return rc;
    int bos = fmt == DLLM_CHAT_PLAIN && mc->bos_token_id >= 0;
    int32_t *r = dllm_malloc(sizeof *r * (n + 1));
    if (bos)
        r[0] = mc->bos_token_id;
    memcpy(r + bos, ids, sizeof *ids * n);
    free(ids);
    *out = r;
    *nout = (int)n + bos;
    return 0;
}

int completion_decode(dllm_tokenizer *tok, const int32_t *gen, int L, int eos_id, char **text,
                      size_t *len, dllm_err *err)
{
    int n = L - (L > 0 && gen[L - 1] == eos_id);
    int32_t *ids = dllm_malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    int k = 0;
    const int32_t nv = (int32_t)dllm_tokenizer_vocab_size(tok);
    for (int i = 0; i < n; i++)
        if (gen[i] >= 0 && gen[i] < nv)
            ids[k++] = gen[i];
    size_t tl = 0;
    int rc = dllm_tokenizer_decode(tok, ids, (size_t)k, true, text, &tl, err);
    free(ids);
    if (!rc && len)
        *len = tl;
    return rc;
}
