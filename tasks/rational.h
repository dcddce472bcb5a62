/* rational.h: exact rational arithmetic for grading, with overflow detection.
 *
 * A value is num/den with den > 0, gcd(|num|, den) = 1 and |num|, den <= INT64_MAX
 * (INT64_MIN is never produced, so negation is always safe). Each operation
 * computes in 128-bit integers, reduces, and fails when the reduced result does
 * not fit: the caller treats that as "not this value", never as a crash. */
#ifndef DLLM_TASKS_RATIONAL_H
#define DLLM_TASKS_RATIONAL_H

#include <stdint.h>

typedef struct {
    int64_t num;
    int64_t den; /* > 0 */
} dllm_rat;

enum { DLLM_RAT_OK = 0, DLLM_RAT_DIV0 = 1, DLLM_RAT_OVERFLOW = 2 };

dllm_rat dllm_rat_int(int64_t v); /* v != INT64_MIN */
int dllm_rat_add(dllm_rat a, dllm_rat b, dllm_rat *out);
int dllm_rat_sub(dllm_rat a, dllm_rat b, dllm_rat *out);
int dllm_rat_mul(dllm_rat a, dllm_rat b, dllm_rat *out);
int dllm_rat_div(dllm_rat a, dllm_rat b, dllm_rat *out);
/* num/den from 128-bit parts: reduces, fails on den == 0 or overflow. */
int dllm_rat_from128(__int128 num, __int128 den, dllm_rat *out);
int dllm_rat_eq(dllm_rat a, dllm_rat b);

#endif
