/* embedding.c: token embedding lookup.
 *
 * Forward: out[n, :] = wte[ids[n], :].
 * Backward: dwte[ids[n], :] += dout[n, :]. Threads split the channels, not the
 * rows, because two rows may share a token id. */
#include "kernels/ops.h"

#include <string.h>

#define PAR_MIN 65536

void op_embedding_fwd(float *out, const int32_t *ids, const float *wte, int N, int C)
{
    // out (N, C), ids (N), wte (V, C)
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(float));
}

void op_embedding_bwd(float *dwte, const float *dout, const int32_t *ids, int N, int C)
{
    // dwte (V, C), dout (N, C), ids (N)
    if (!dwte)
        return;
    enum { BLK = 256 };
    int nblk = (C + BLK - 1) / BLK;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * BLK, c1 = c0 + BLK < C ? c0 + BLK : C;
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++)
                d[c] += g[c];
        }
    }
}
