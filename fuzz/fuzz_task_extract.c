/* fuzz_task_extract.c: GSM8K/MATH answer extraction and equivalence on arbitrary
 * bytes. The input is split at the first NUL into (completion, reference).
 * Checks: no crash or UB; equivalence is reflexive on normalised numbers and
 * symmetric; every reward is finite and within its task's range. */
#include "tasks/answer.h"
#include "tasks/registry.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *ref = malloc(size - tlen + 1);
    if (nul) {
        memcpy(ref, nul + 1, size - tlen - 1);
        ref[size - tlen - 1] = 0;
    } else {
        ref[0] = 0;
    }
    char *g = dllm_gsm8k_extract(text, tlen);
    if (g) {
        if (dllm_gsm8k_equal(g, ref) != dllm_gsm8k_equal(ref, g))
            abort();
        free(g);
    }
    char *b = dllm_answer_last_boxed(text, tlen);
    char *x = dllm_answer_xml(text, tlen, 1);
    char *num = dllm_answer_last_number(text, tlen);
    if (b) {
        if (dllm_math_equiv(b, ref) != dllm_math_equiv(ref, b))
            abort();
        char *n = dllm_math_normalize(b);
        free(n);
    }
    if (num) {
        dllm_rat r;
        (void)dllm_answer_parse_number(num, &r);
        if (!dllm_gsm8k_equal(num, num) && !dllm_answer_parse_number(num, &r))
            abort();
    }
    free(b);
    free(x);
    free(num);
    dllm_task_item it;
    memset(&it, 0, sizeof it);
    it.question = (char *)"";
    it.answer = ref[0] ? ref : (char *)"0";
    double r1 = dllm_task_gsm8k.reward(&it, text, tlen);
    double r2 = dllm_task_math500.reward(&it, text, tlen);
    if (!isfinite(r1) || r1 > 4.0 + 1e-9 || !(r2 == 0.0 || r2 == 1.0))
        abort();
    free(ref);
    return 0;
}
