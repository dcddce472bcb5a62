/* fuzz_task_countdown.c: the Countdown expression parser/evaluator and scorer on
 * arbitrary bytes. Checks: no crash, no stack exhaustion, no UB (overflow is
 * detected, never wrapped); the score is one of 0, 0.1, 1; a well-formed
 * expression's value is a reduced rational with a positive denominator. */
#include "tasks/countdown.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dllm_countdown_expr e;
    int st = dllm_countdown_eval((const char *)data, size, &e);
    if (st == DLLM_CD_OK && e.value.den <= 0)
        abort();
    static const int64_t nums[4] = {3, 7, 2, 25};
    double s = dllm_countdown_score(nums, 3, 23, (const char *)data, size);
    if (s != 0.0 && s != 0.1 && s != 1.0)
        abort();
    s = dllm_countdown_score(nums, 4, 48, (const char *)data, size);
    if (s != 0.0 && s != 0.1 && s != 1.0)
        abort();
    return 0;
}
