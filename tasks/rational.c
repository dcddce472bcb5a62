/* rational.c: see rational.h. */
#include "tasks/rational.h"

static unsigned __int128 gcd128(unsigned __int128 a, unsigned __int128 b)
{
    while (b) {
        unsigned __int128 t = a % b;
        a = b;
        b = t;
    }
    return a;
}

dllm_rat dllm_rat_int(int64_t v)
{
    dllm_rat r = {v, 1};
    return r;
}

int dllm_rat_from128(__int128 num, __int128 den, dllm_rat *out)
{
    if (den == 0)
        return DLLM_RAT_DIV0;
    int neg = (num < 0) != (den < 0);
    /* magnitudes as unsigned: |x| of any __int128 fits */
    unsigned __int128 n = num < 0 ? -(unsigned __int128)num : (unsigned __int128)num;
    unsigned __int128 d = den < 0 ? -(unsigned __int128)den : (unsigned __int128)den;
    if (n == 0) {
        out->num = 0;
        out->den = 1;
        return DLLM_RAT_OK;
    }
    unsigned __int128 g = gcd128(n, d);
    n /= g;
    d /= g;
    if (n > (unsigned __int128)INT64_MAX || d > (unsigned __int128)INT64_MAX)
        return DLLM_RAT_OVERFLOW;
    out->num = neg ? -(int64_t)n : (int64_t)n;
    out->den = (int64_t)d;
    return DLLM_RAT_OK;
}

/* |a.num|, a.den < 2^63, so every product below is < 2^126 and every sum of two
 * such products < 2^127: no 128-bit overflow. */
int dllm_rat_add(dllm_rat a, dllm_rat b, dllm_rat *out)
{
    return dllm_rat_from128((__int128)a.num * b.den + (__int128)b.num * a.den, (__int128)a.den * b.den, out);
}

int dllm_rat_sub(dllm_rat a, dllm_rat b, dllm_rat *out)
{
    return dllm_rat_from128((__int128)a.num * b.den - (__int128)b.num * a.den, (__int128)a.den * b.den, out);
}

int dllm_rat_mul(dllm_rat a, dllm_rat b, dllm_rat *out)
{
    return dllm_rat_from128((__int128)a.num * b.num, (__int128)a.den * b.den, out);
}

int dllm_rat_div(dllm_rat a, dllm_rat b, dllm_rat *out)
{
    if (b.num == 0)
        return DLLM_RAT_DIV0;
    return dllm_rat_from128((__int128)a.num * b.den, (__int128)a.den * b.num, out);
}

int dllm_rat_eq(dllm_rat a, dllm_rat b)
{
    return a.num == b.num && a.den == b.den;
}
