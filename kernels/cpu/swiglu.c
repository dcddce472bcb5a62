/* swiglu.c: the SwiGLU gate of the MLP.
 *
 * out = silu(gate) * up,  silu(x) = x * sigmoid(x).
 * Backward (accumulated):  dup += dout * silu(gate),
 *   dgate += dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))). */
#include "kernels/ops.h"
#include "kernels/cpu/vec_kernel.h"
#include "kernels/cpu/vexpf.h"

#include <math.h>

#define PAR_MIN 65536

/* The forward in chunks: expf(-g) into a small buffer (vexpf: sixteen at a time with
 * the library's bits where AVX-512 allows, else the library call), then the division
 * and product over the chunk, which the compiler vectorises (AVX-512, AVX2 or the
 * baseline, chosen at load time). Every element is still g / (1 + expf(-g)) * up, in
 * that order, so the bits are those of the plain loop. */
enum { SWIGLU_CHUNK = 256 };

VEC_KERNEL_WIDE(void, swiglu_chunk, (float *restrict out, const float *restrict gate, const float *restrict up, float *restrict e, size_t n),
                (out, gate, up, e, n))
{
    for (size_t i = 0; i < n; i++)
        e[i] = -gate[i];
    vexpf(e, e, n);
    for (size_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + e[i]) * up[i];
}

void op_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    // out, gate, up (n)
    size_t nchunk = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t c = 0; c < nchunk; c++) {
        float e[SWIGLU_CHUNK];
        size_t i0 = c * SWIGLU_CHUNK, len = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        swiglu_chunk(out + i0, gate + i0, up + i0, e, len);
    }
}

void op_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, size_t n)
{
    // dgate, dup, dout, gate, up (n)
    size_t nchunk = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t c = 0; c < nchunk; c++) {
        float e[SWIGLU_CHUNK];
        size_t i0 = c * SWIGLU_CHUNK, len = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        for (size_t j = 0; j < len; j++)
            e[j] = -gate[i0 + j];
        vexpf(e, e, len); /* the library's expf bits, as in the forward */
        for (size_t j = 0; j < len; j++) {
            size_t i = i0 + j;
            float g = gate[i];
            float sig = 1.0f / (1.0f + e[j]);
            if (dup)
                dup[i] = dout[i] * g * sig;
            if (dgate)
                dgate[i] = dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        }
    }
}
