#include "src/prompt.h"

#include <stdlib.h>
#include <string.h>

int prompt_encode(dllm_tokenizer *tok, dllm_chat_format fmt, const dllm_model_config *mc,
                  const char *text, int32_t **out, int *nout, dllm_err *err)
{
    char *rendered = NULL;
    if (fmt != DLLM_CHAT_PLAIN && dllm_chat_prompt(fmt, NULL, text, false, false, &rendered, err))
        return err->code;
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
