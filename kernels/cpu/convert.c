/* convert.c: fp32 <-> bf16 and fp32 <-> IEEE half.
 *
 * fp32 -> bf16 keeps the top 16 bits after rounding to nearest, ties to even:
 * add 0x7FFF plus the lowest kept bit, then truncate. Values past the largest
 * bf16 carry into the exponent and become inf, as IEEE rounding requires.
 * NaN is kept NaN by forcing the quiet bit (truncation alone could turn a NaN
 * whose payload lives in the low bits into inf).
 * fp32 -> f16 rounds the same way, with subnormal halves (|x| < 2^-14) rounded
 * through an exact scale by 2^24 and rintf (ties to even). */
#include "kernels/cpu/vec_kernel.h"
#include "kernels/ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

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

/* The rounding as branch-free integer arithmetic, so that the array loops below
 * vectorise: the same bits as the branchy form, NaN included. */
static inline uint16_t bf16_bits(uint32_t u)
{
    uint32_t nan = (u >> 16) | 0x0040u; /* quiet NaN, sign kept */
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : r);
}

uint16_t op_f32_to_bf16(float x)
{
    return bf16_bits(f32_bits(x));
}

float op_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* The array passes run once per linear input of a low-precision rollout, where the
 * scalar loops cost as much as a small GEMM: they are compiled for AVX-512, AVX2 and
 * the baseline (vec_kernel.h). Integer arithmetic only: every clone gives the same
 * bits. */

/* Below this many values a pass stays on one thread. */
#define CONV_PAR_MIN 262144

VEC_KERNEL_WIDE(void, to_bf16_range, (uint16_t *restrict out, const float *restrict inp, size_t n),
                (out, inp, n))
{
    for (size_t i = 0; i < n; i++)
        out[i] = bf16_bits(f32_bits(inp[i]));
}

VEC_KERNEL_WIDE(void, round_bf16_range, (float *restrict x, size_t n),
                (x, n))
{
    for (size_t i = 0; i < n; i++)
        x[i] = bits_f32((uint32_t)bf16_bits(f32_bits(x[i])) << 16);
}

VEC_KERNEL_WIDE(void, round_bf16_copy_range, (float *restrict out, const float *restrict inp, size_t n),
                (out, inp, n))
{
    for (size_t i = 0; i < n; i++)
        out[i] = bits_f32((uint32_t)bf16_bits(f32_bits(inp[i])) << 16);
}

VEC_KERNEL_WIDE(void, from_bf16_range, (float *restrict out, const uint16_t *restrict inp, size_t n),
                (out, inp, n))
{
    for (size_t i = 0; i < n; i++)
        out[i] = bits_f32((uint32_t)inp[i] << 16);
}

/* [i0, i1): this thread's slice of n values (one slice per OpenMP thread). */
static void thread_slice(size_t n, size_t *i0, size_t *i1)
{
    size_t nt = 1, t = 0;
#ifdef _OPENMP
    nt = (size_t)omp_get_num_threads();
    t = (size_t)omp_get_thread_num();
#endif
    *i0 = n * t / nt;
    *i1 = n * (t + 1) / nt;
}

void op_f32_to_bf16_array(uint16_t *out, const float *inp, size_t n)
{
#pragma omp parallel if (n > CONV_PAR_MIN)
    {
        size_t i0, i1;
        thread_slice(n, &i0, &i1);
        to_bf16_range(out + i0, inp + i0, i1 - i0);
    }
}

void op_bf16_to_f32_array(float *out, const uint16_t *inp, size_t n)
{
#pragma omp parallel if (n > CONV_PAR_MIN)
    {
        size_t i0, i1;
        thread_slice(n, &i0, &i1);
        from_bf16_range(out + i0, inp + i0, i1 - i0);
    }
}

void op_round_bf16(float *x, size_t n)
{
#pragma omp parallel if (n > CONV_PAR_MIN)
    {
        size_t i0, i1;
        thread_slice(n, &i0, &i1);
        round_bf16_range(x + i0, i1 - i0);
    }
}

void op_round_bf16_copy(float *out, const float *inp, size_t n)
{
#pragma omp parallel if (n > CONV_PAR_MIN)
    {
        size_t i0, i1;
        thread_slice(n, &i0, &i1);
        round_bf16_copy_range(out + i0, inp + i0, i1 - i0);
    }
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
