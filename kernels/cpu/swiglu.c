/* swiglu.c: the SwiGLU gate of the MLP.
 *
 * out = silu(gate) * up,  silu(x) = x * sigmoid(x).
 * Backward (accumulated):  dup += dout * silu(gate),
 *   dgate += dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))).
 * sigmoid(x) = 1 / (1 + exp(-x)) with exp evaluated by a polynomial the
 * compiler vectorises (about 1 ulp; exp overflows to inf above about 88.4, so
 * sigmoid goes to 0, and underflows to 0 below -87.3, so sigmoid goes to 1). */
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PAR_MIN 65536
/* Elements per OpenMP work item. */
#define BLOCK 16384

/* Loops are compiled twice, for AVX2+FMA and for the baseline, and the loader
 * picks one for this CPU. At -O2 GCC only vectorises loops that need no scalar
 * remainder, so these ask for the usual cost model; and it keeps branches on
 * float compares (which could raise FP exceptions nobody here reads) unless
 * told they do not trap. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define VEC_OPT optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#define VEC_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default"), VEC_OPT))
#define VEC_INLINE static inline __attribute__((always_inline, VEC_OPT))
#else
#define VEC_KERNEL
#define VEC_INLINE static inline
#endif

/* exp(x): 2^n * e^r, n = round(x / ln 2), |r| <= ln2 / 2, e^r by Cephes'
 * degree-6 polynomial. */
VEC_INLINE float exp_vec(float x)
{
    const float big = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    float n = (xc * 1.44269504f + big) - big;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    y *= two_n;
    y = x > 88.7f ? INFINITY : y;
    return x < -87.3f ? 0.0f : y;
}

VEC_INLINE float sigmoid(float x)
{
    return 1.0f / (1.0f + exp_vec(-x));
}

VEC_KERNEL
static void swiglu_fwd_block(float *restrict out, const float *restrict gate,
                             const float *restrict up, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

/* dgate and dup may be NULL (each block runs one of three loops; the
 * arithmetic of a gradient is the same in all of them). */
VEC_KERNEL
static void swiglu_bwd_block(float *restrict dgate, float *restrict dup,
                             const float *restrict dout, const float *restrict gate,
                             const float *restrict up, size_t n)
{
    if (dgate && dup) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], sig = sigmoid(g);
            dup[i] += dout[i] * (g * sig);
            dgate[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
        }
    } else if (dup) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], sig = sigmoid(g);
            dup[i] += dout[i] * (g * sig);
        }
    } else if (dgate) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], sig = sigmoid(g);
            dgate[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
        }
    }
}

void op_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    // out, gate, up (n)
    size_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (n > PAR_MIN) schedule(dynamic, 1)
    for (size_t b = 0; b < nb; b++) {
        size_t a = b * BLOCK, len = n - a < BLOCK ? n - a : BLOCK;
        swiglu_fwd_block(out + a, gate + a, up + a, len);
    }
}

void op_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, size_t n)
{
    // dgate, dup, dout, gate, up (n)
    if (!dgate && !dup)
        return;
    size_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (n > PAR_MIN) schedule(dynamic, 1)
    for (size_t b = 0; b < nb; b++) {
        size_t a = b * BLOCK, len = n - a < BLOCK ? n - a : BLOCK;
        swiglu_bwd_block(dgate ? dgate + a : NULL, dup ? dup + a : NULL, dout + a, gate + a,
                         up + a, len);
    }
}
