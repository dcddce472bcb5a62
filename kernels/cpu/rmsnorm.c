/* rmsnorm.c: RMSNorm as in LLaMA/LLaDA.
 *
 * Forward, per row of C:  rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd,
 *                         out = w * y.
 * Backward, with dy = dout * w:
 *   dx = rstd * (dy - y * mean(dy * y))      (accumulated into dinp)
 *   dw = sum over rows of dout * y           (accumulated into dw)
 * Sums of squares are taken in double so the result does not hinge on C. */
#include "kernels/cpu/vec_kernel.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>

/* Below this many elements, thread start-up costs more than it saves. */
#define PAR_MIN 32768

/* The row loops are compiled for AVX2+FMA and the baseline (vec_kernel.h). */

/* out = w * (x * rstd) for one row; returns rstd. */
VEC_KERNEL_NO_TRAP(float, fwd_row, (float *restrict o, const float *restrict x, const float *restrict w, int C, float eps),
                   (o, x, w, C, eps))
{
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++)
        ss += (double)x[c] * x[c];
    float r = 1.0f / sqrtf((float)(ss / C) + eps);
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = w[c] * (x[c] * r);
    return r;
}

/* dx += rstd * (dy - y * mean(dy * y)), dy = g * w, y = x * rstd, for one row. */
VEC_KERNEL_NO_TRAP(void, bwd_row, (float *restrict dx, const float *restrict g, const float *restrict x, const float *restrict w, float r, int C),
                   (dx, g, x, w, r, C))
{
    double dot = 0.0; /* sum(dy * y) */
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++)
        dot += (double)(g[c] * w[c]) * (x[c] * r);
    float mean = (float)(dot / C);
#pragma omp simd
    for (int c = 0; c < C; c++)
        dx[c] += r * (g[c] * w[c] - x[c] * r * mean);
}

/* acc[c - c0] += g[c] * y[c] over the rows, for columns [c0, c1). */
VEC_KERNEL_NO_TRAP(void, dw_cols, (double *restrict acc, const float *restrict dout, const float *restrict inp, const float *restrict rstd, int N, int C, int c0, int c1),
                   (acc, dout, inp, rstd, N, C, c0, c1))
{
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        const float *restrict g = dout + (size_t)n * C;
        float r = rstd[n];
#pragma omp simd
        for (int c = c0; c < c1; c++)
            acc[c - c0] += (double)g[c] * (x[c] * r);
    }
}

void op_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w,
                    int N, int C, float eps)
{
    // out (N, C), rstd (N) or NULL, inp (N, C), w (C)
#pragma omp parallel for if ((size_t)N * C > PAR_MIN) schedule(dynamic, 16)
    for (int n = 0; n < N; n++) {
        float r = fwd_row(out + (size_t)n * C, inp + (size_t)n * C, w, C, eps);
        if (rstd)
            rstd[n] = r;
    }
}

void op_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const float *rstd, int N, int C)
{
    // dinp (N, C) or NULL, dw (C) or NULL, dout (N, C), inp (N, C), rstd (N)
    if (dinp) {
#pragma omp parallel for if ((size_t)N * C > PAR_MIN) schedule(dynamic, 16)
        for (int n = 0; n < N; n++)
            bwd_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, rstd[n],
                    C);
    }
    if (dw) {
        /* Column blocks: each thread owns its columns and sums rows in order,
         * so there are no races and the result is thread-count independent. */
        enum { BLK = 64 };
        int nblk = (C + BLK - 1) / BLK;
#pragma omp parallel for if ((size_t)N * C > PAR_MIN) schedule(dynamic, 1)
        for (int b = 0; b < nblk; b++) {
            int c0 = b * BLK, c1 = c0 + BLK < C ? c0 + BLK : C;
            double acc[BLK] = {0};
            dw_cols(acc, dout, inp, rstd, N, C, c0, c1);
            for (int c = c0; c < c1; c++)
                dw[c] += (float)acc[c - c0];
        }
    }
}
