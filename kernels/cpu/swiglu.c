/* swiglu.c: the SwiGLU gate of the MLP.
 *
 * out = silu(gate) * up,  silu(x) = x * sigmoid(x).
 * Backward (accumulated):  dup += dout * silu(gate),
 *   dgate += dout * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))). */
#include "kernels/ops.h"

#include <math.h>

#define PAR_MIN 65536

void op_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    // out, gate, up (n)
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void op_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, size_t n)
{
    // dgate, dup, dout, gate, up (n)
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        if (dup)
            dup[i] += dout[i] * g * sig;
        if (dgate)
            dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    }
}
