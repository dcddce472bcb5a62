/* xent.c: log-probability of the target token under softmax(logits).
 *
 * Forward, per row n:  lse = log sum_j exp(logits[n, j])  (double),
 *                      logp[n] = logits[n, target[n]] - lse.
 * Backward (accumulated): dlogits[n, j] += dlogp[n] * (onehot[j] - softmax[j]),
 * softmax[j] = exp(logits[n, j] - lse). Rows with dlogp[n] == 0 are skipped,
 * which is how only the masked positions of a sequence get scored.
 * A target outside [0, V) gives logp = NaN (loud) rather than a wild read.
 *
 * exp is taken in double by a polynomial the compiler vectorises (below), so
 * a row of the vocabulary costs a few vector instructions per logit. */
#include "kernels/cpu/vec_kernel.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PAR_MIN 65536

/* The row loops are compiled for AVX2+FMA and the baseline (vec_kernel.h), with
 * float compares allowed to become selects: GCC keeps them as branches unless told
 * they do not trap. */

/* exp(x) in double for x <= 709: 2^n * e^r with n = round(x / ln 2) and
 * r = x - n ln 2 (two-part ln 2, |r| <= 0.347), e^r by its Taylor series to
 * r^13 (truncation below 1e-17 relative). 2^n is built in the exponent bits;
 * n is read from the mantissa of x / ln 2 + 1.5 * 2^52, which needs no
 * double-to-int64 conversion (AVX2 has none). Below -708 it returns 0. */
VEC_INLINE_NO_TRAP double exp_d(double x)
{
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double xc = x < -708.0 ? -708.0 : x;
    double t = xc * 1.4426950408889634 + magic;
    double n = t - magic;
    double r = xc - n * 6.93147180369123816490e-01; /* ln 2, high part (exact n * hi) */
    r = r - n * 1.90821492927058770002e-10;         /* ln 2, low part */
    double p = 1.0 / 6227020800.0;                  /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t ti, magic_bits;
    memcpy(&ti, &t, sizeof ti);
    memcpy(&magic_bits, &magic, sizeof magic_bits);
    int64_t bits = (int64_t)((uint64_t)(ti - magic_bits + 1023) << 52);
    double two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x < -708.0 ? 0.0 : p * two_n;
}

/* log sum_j exp(x[j]) in double; -inf for an all -inf row. */
VEC_KERNEL_NO_TRAP(double, row_logsumexp, (const float *restrict x, int V),
                   (x, V))
{
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int j = 0; j < V; j++)
        maxv = x[j] > maxv ? x[j] : maxv;
    if (maxv == -INFINITY)
        return -INFINITY;
    double sum = 0.0, m = maxv;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++)
        sum += exp_d((double)x[j] - m);
    return m + log(sum);
}

/* d[j] -= g * exp(x[j] - lse) over one row. */
VEC_KERNEL_NO_TRAP(void, row_softmax_sub, (float *restrict d, const float *restrict x, double lse, float g, int V),
                   (d, x, lse, g, V))
{
#pragma omp simd
    for (int j = 0; j < V; j++)
        d[j] -= g * (float)exp_d((double)x[j] - lse);
}

void op_xent_fwd(float *logp, float *logsumexp, const float *logits, const int32_t *target,
                 int N, int V)
{
    // logp (N), logsumexp (N) or NULL, logits (N, V), target (N)
#pragma omp parallel for if ((size_t)N * V > PAR_MIN) schedule(dynamic, 4)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        double lse = row_logsumexp(x, V);
        int tg = target[n];
        logp[n] = (tg >= 0 && tg < V) ? (float)((double)x[tg] - lse) : NAN;
        if (logsumexp)
            logsumexp[n] = (float)lse;
    }
}

void op_xent_bwd(float *dlogits, const float *dlogp, const float *logits,
                 const float *logsumexp, const int32_t *target, int N, int V)
{
    // dlogits (N, V), dlogp (N), logits (N, V), logsumexp (N) or NULL, target (N)
    if (!dlogits)
        return;
#pragma omp parallel for if ((size_t)N * V > PAR_MIN) schedule(dynamic, 1)
    for (int n = 0; n < N; n++) {
        float g = dlogp[n];
        if (g == 0.0f)
            continue;
        const float *x = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        double lse = logsumexp ? (double)logsumexp[n] : row_logsumexp(x, V);
        row_softmax_sub(d, x, lse, g, V);
        int tg = target[n];
        if (tg >= 0 && tg < V)
            d[tg] += g;
    }
}
