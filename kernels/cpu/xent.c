/* xent.c: log-probability of the target token under softmax(logits).
 *
 * Forward, per row n:  lse = log sum_j exp(logits[n, j])  (double),
 *                      logp[n] = logits[n, target[n]] - lse.
 * Backward (accumulated): dlogits[n, j] += dlogp[n] * (onehot[j] - softmax[j]),
 * softmax[j] = exp(logits[n, j] - lse). Rows with dlogp[n] == 0 are skipped,
 * which is how only the masked positions of a sequence get scored.
 * A target outside [0, V) gives logp = NaN (loud) rather than a wild read. */
#include "kernels/ops.h"

#include <math.h>

#define PAR_MIN 65536

static double row_logsumexp(const float *x, int V)
{
    float maxv = -INFINITY;
    for (int j = 0; j < V; j++)
        if (x[j] > maxv)
            maxv = x[j];
    if (maxv == -INFINITY)
        return -INFINITY;
    double sum = 0.0;
    for (int j = 0; j < V; j++)
        sum += exp((double)x[j] - maxv);
    return maxv + log(sum);
}

void op_xent_fwd(float *logp, float *logsumexp, const float *logits, const int32_t *target,
                 int N, int V)
{
    // logp (N), logsumexp (N) or NULL, logits (N, V), target (N)
#pragma omp parallel for if ((size_t)N * V > PAR_MIN)
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
        for (int j = 0; j < V; j++)
            d[j] -= g * (float)exp((double)x[j] - lse);
        int tg = target[n];
        if (tg >= 0 && tg < V)
            d[tg] += g;
    }
}
