/* fuzz_tokenizer_json: libFuzzer entry for dllm_tokenizer_load_buffer + encode + decode.
 * Input = tokenizer.json bytes, optionally followed by NUL and a text to encode.
 * Any input must either load or fail with a message; encode/decode must not crash. */
#include "dllm/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "Hello world, it's 123 <|endoftext|> caf\xc3\xa9 \xff";
    size_t tlen = nul ? size - jlen - 1 : strlen(text);
    dllm_tokenizer *t;
    dllm_err err = {0};
    if (dllm_tokenizer_load_buffer(&t, "fuzz.json", (const char *)data, jlen, &err)) {
        if (!err.msg[0] || err.code != DLLM_EXIT_INPUT) abort();
        return 0;
    }
    int32_t *ids;
    dllm_tok_offset *off;
    size_t n;
    if (!dllm_tokenizer_encode_offsets(t, text, tlen, true, &ids, &off, &n, &err)) {
        for (size_t i = 0; i < n; i++)
            if (off[i].end < off[i].start || off[i].end > tlen) abort();
        char *out;
        size_t len;
        if (!dllm_tokenizer_decode(t, ids, n, false, &out, &len, &err)) free(out);
        free(ids);
        free(off);
    }
    dllm_tokenizer_free(t);
    return 0;
}
