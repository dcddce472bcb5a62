/* convert.c: fp32 <-> bf16 and fp32 <-> IEEE half.
 *
 * fp32 -> bf16 keeps the top 16 bits after rounding to nearest, ties to even:
 * add 0x7FFF plus the lowest kept bit, then truncate. Values past the largest
 * bf16 carry into the exponent and become inf, as IEEE rounding requires.
 * NaN is kept NaN by forcing the quiet bit (truncation alone could turn a NaN
 * whose payload lives in the low bits into inf).
 * fp32 -> f16 rounds the same way, with subnormal halves (|x| < 2^-14) rounded
 * through an exact scale by 2^24 and rintf (ties to even). */
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t op_f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float op_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

void op_f32_to_bf16_array(uint16_t *out, const float *inp, size_t n)
{
#pragma omp parallel for if (n > 262144)
    for (size_t i = 0; i < n; i++)
        out[i] = op_f32_to_bf16(inp[i]);
}

void op_bf16_to_f32_array(float *out, const uint16_t *inp, size_t n)
{
#pragma omp parallel for if (n > 262144)
    for (size_t i = 0; i < n; i++)
        out[i] = op_bf16_to_f32(inp[i]);
}

void op_round_bf16(float *x, size_t n)
{
#pragma omp parallel for if (n > 262144)
    for (size_t i = 0; i < n; i++)
        x[i] = op_bf16_to_f32(op_f32_to_bf16(x[i]));
}

uint16_t op_f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
    if (a >= 0x477FF000u) /* >= 65520 (half-way past 65504): inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal half or zero */
        float s = rintf(fabsf(x) * 16777216.0f); /* units of 2^-24, exact scale */
        return (uint16_t)(sign | (uint16_t)s);   /* 1024 lands on the smallest normal */
    }
    a += 0x0FFFu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    a -= 0x38000000u;                /* exponent bias 127 -> 15 */
    return (uint16_t)(sign | (a >> 13));
}

float op_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, mant = h & 0x03FFu;
    if (e == 0) { /* zero or subnormal: mant * 2^-24 */
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    if (e == 31)
        return bits_f32(sign | 0x7F800000u | (mant << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (mant << 13));
}
