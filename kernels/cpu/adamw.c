/* adamw.c: the AdamW step and gradient-norm clipping, as torch.optim.AdamW
 * (single-tensor path) and torch.nn.utils.clip_grad_norm_ compute them.
 *
 * Step t (from 1):
 *   p *= 1 - lr*wd
 *   m  = lerp(m, g, 1-b1)           (= b1 m + (1-b1) g; torch uses lerp_)
 *   v  = b2 v + (1-b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Scalars (bias corrections, step size) are formed in double like torch's
 * Python-side arithmetic, then applied in fp32 in the same order (and with the
 * same fused multiply-adds) as its CPU kernels, so that with the same fp32
 * hyper-parameters the result is bit-identical to torch on the CPU. */
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>

#define PAR_MIN 65536
#define NORM_CHUNK 65536 /* fixed chunks: the norm does not depend on threads */

void op_adamw(float *p, const float *g, float *m, float *v, size_t n, int t,
              float lr, float b1, float b2, float eps, float wd)
{
    // p, g, m, v (n)
    double bc1 = 1.0 - pow((double)b1, t);
    double bc2 = 1.0 - pow((double)b2, t);
    float decay = (float)(1.0 - (double)lr * wd);
    float step = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float w1 = (float)(1.0 - (double)b1); /* lerp weight */
    float w2 = (float)(1.0 - (double)b2);
#pragma omp parallel for if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i] * decay;
        /* torch's vectorised lerp_ and addcmul_ use fused multiply-adds:
         * lerp = fma(w, end - start, start) for w < 0.5, else
         * fma(-(1 - w), end - start, end); v = fma(w2 * g, g, v * b2). */
        float mi = w1 < 0.5f ? fmaf(w1, gi - m[i], m[i]) : fmaf(-(1.0f - w1), gi - m[i], gi);
        float vi = fmaf(w2 * gi, gi, v[i] * b2);
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi + (-step) * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

double op_grad_norm(const float *g, size_t n)
{
    // g (n)
    size_t nchunk = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    if (nchunk <= 1) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++)
            s += (double)g[i] * g[i];
        return sqrt(s);
    }
    double *part = malloc(nchunk * sizeof(double));
    if (!part)
        abort();
#pragma omp parallel for
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++)
            s += (double)g[i] * g[i];
        part[c] = s;
    }
    double s = 0.0;
    for (size_t c = 0; c < nchunk; c++)
        s += part[c];
    free(part);
    return sqrt(s);
}

double op_clip_grad(float *g, size_t n, double total_norm, double max_norm)
{
    // g (n)
    double coef = max_norm / (total_norm + 1e-6);
    if (coef < 1.0) {
        float c = (float)coef;
#pragma omp parallel for if (n > PAR_MIN)
        for (size_t i = 0; i < n; i++)
            g[i] *= c;
    }
    return total_norm;
}
