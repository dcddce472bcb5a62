/* rmsnorm.c: RMSNorm as in LLaMA/LLaDA.
 *
 * Forward, per row of C:  rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd,
 *                         out = w * y.
 * Backward, with dy = dout * w:
 *   dx = rstd * (dy - y * mean(dy * y))      (accumulated into dinp)
 *   dw = sum over rows of dout * y           (accumulated into dw)
 * Sums of squares are taken in double so the result does not hinge on C. */
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>

/* Below this many elements, thread start-up costs more than it saves. */
#define PAR_MIN 32768

void op_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w,
                    int N, int C, float eps)
{
    // out (N, C), rstd (N) or NULL, inp (N, C), w (C)
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        float r = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int c = 0; c < C; c++)
            o[c] = w[c] * (x[c] * r);
        if (rstd)
            rstd[n] = r;
    }
}

void op_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const float *rstd, int N, int C)
{
    // dinp (N, C) or NULL, dw (C) or NULL, dout (N, C), inp (N, C), rstd (N)
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float r = rstd[n];
            double dot = 0.0; /* sum(dy * y) */
            for (int c = 0; c < C; c++)
                dot += (double)(g[c] * w[c]) * (x[c] * r);
            float mean = (float)(dot / C);
            for (int c = 0; c < C; c++)
                dx[c] += r * (g[c] * w[c] - x[c] * r * mean);
        }
    }
    if (dw) {
        /* Column blocks: each thread owns its columns and sums rows in order,
         * so there are no races and the result is thread-count independent. */
        enum { BLK = 64 };
        int nblk = (C + BLK - 1) / BLK;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN)
        for (int b = 0; b < nblk; b++) {
            int c0 = b * BLK, c1 = c0 + BLK < C ? c0 + BLK : C;
            double acc[BLK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C;
                const float *g = dout + (size_t)n * C;
                float r = rstd[n];
                for (int c = c0; c < c1; c++)
                    acc[c - c0] += (double)g[c] * (x[c] * r);
            }
            for (int c = c0; c < c1; c++)
                dw[c] += (float)acc[c - c0];
        }
    }
}
