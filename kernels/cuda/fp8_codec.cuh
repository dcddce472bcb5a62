/* fp8_codec.cuh: FP8 E4M3 / E5M2 encode and decode and the block scale, as inline
 * functions for host and device, written to give the same bits as kernels/cpu/fp8.c
 * (contract in kernels/fp8.h):
 *  - encode works on the fp32 bit pattern: in the normal range drop the low 23-m
 *    mantissa bits with round-half-even on the exponent|mantissa integer and re-bias,
 *    saturating past max; in the subnormal range shift the 24-bit significand right with
 *    RNE; NaN -> 0x7F with the sign; +-inf saturates; -0 keeps its sign.
 *  - scale = amax / max in fp32 (1 if amax == 0; FLT_TRUE_MIN if that underflows);
 *    pow2 rounds it up to a power of two. Divisions use __fdiv_rn on the device so no
 *    compiler flag can turn them into approximations. */
#ifndef DLLM_CUDA_FP8_CODEC_CUH
#define DLLM_CUDA_FP8_CODEC_CUH

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DLLM_FP8_HD __host__ __device__ __forceinline__
#else
#define DLLM_FP8_HD static inline
#endif

DLLM_FP8_HD uint32_t fp8c_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

DLLM_FP8_HD float fp8c_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

DLLM_FP8_HD float fp8c_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* format 0 = E4M3 (3 mantissa bits, bias 7, max 448, max code 0x7E),
 *        1 = E5M2 (2 mantissa bits, bias 15, max 57344, max code 0x7B) */
DLLM_FP8_HD int fp8c_mbits(int f) { return f == 0 ? 3 : 2; }
DLLM_FP8_HD int fp8c_bias(int f) { return f == 0 ? 7 : 15; }
DLLM_FP8_HD uint32_t fp8c_max_code(int f) { return f == 0 ? 0x7Eu : 0x7Bu; }
DLLM_FP8_HD float fp8c_max(int f) { return f == 0 ? 448.0f : 57344.0f; }

DLLM_FP8_HD uint8_t fp8c_encode(float x, int f)
{
    const int mbits = fp8c_mbits(f), bias = fp8c_bias(f);
    const uint32_t max_code = fp8c_max_code(f);
    uint32_t u = fp8c_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return (uint8_t)(sign | 0x7Fu);
    if (a == 0x7F800000u)
        return (uint8_t)(sign | max_code);
    uint32_t code;
    const uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23;
    if (a >= min_normal) {
        int shift = 23 - mbits;
        uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
        code = (r >> shift) - ((uint32_t)(127 - bias) << mbits);
        if (code > max_code)
            code = max_code;
    } else {
        uint32_t E = a >> 23;
        if (E == 0) {
            code = 0;
        } else {
            uint32_t M = (a & 0x7FFFFFu) | 0x800000u;
            int s = 23 + 1 - bias - mbits - ((int)E - 127);
            if (s >= 25)
                code = 0;
            else
                code = (M + ((1u << (s - 1)) - 1u) + ((M >> s) & 1u)) >> s;
        }
    }
    return (uint8_t)(sign | (uint8_t)code);
}

DLLM_FP8_HD float fp8c_decode(uint8_t c, int f)
{
    const int mbits = fp8c_mbits(f), bias = fp8c_bias(f);
    int mmask = (1 << mbits) - 1, emask = (1 << (7 - mbits)) - 1;
    int e = (c >> mbits) & emask, m = c & mmask;
    bool neg = (c & 0x80) != 0;
    if (f == 0 && (c & 0x7F) == 0x7F)
        return neg ? -NAN : NAN;
    if (f == 1 && e == emask) {
        if (m)
            return neg ? -NAN : NAN;
        return neg ? -INFINITY : INFINITY;
    }
    /* exact: small integers times powers of two */
    float v = e == 0 ? ldexpf((float)m, 1 - bias - mbits)
                     : ldexpf((float)(mmask + 1 + m), e - bias - mbits);
    return neg ? -v : v;
}

/* Smallest power of two >= s, for finite s > 0 (as pow2_up in fp8.c). */
DLLM_FP8_HD float fp8c_pow2_up(float s)
{
    int e;
    float fr = frexpf(s, &e);
    return fr == 0.5f ? s : ldexpf(1.0f, e);
}

DLLM_FP8_HD float fp8c_scale_from_amax(float amax, int f, bool pow2)
{
    if (amax == 0.0f)
        return 1.0f;
    float s = fp8c_div(amax, fp8c_max(f));
    if (s == 0.0f)
        s = FLT_TRUE_MIN;
    return pow2 ? fp8c_pow2_up(s) : s;
}

/* |x| if finite, else 0: NaN and inf do not enter amax (fp8.c's block_amax). */
DLLM_FP8_HD float fp8c_finite_abs(float x)
{
    float a = fabsf(x);
    return a <= FLT_MAX ? a : 0.0f;
}

#endif
