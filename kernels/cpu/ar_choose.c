/* ar_choose.c: the autoregressive sampler's choice from one row of logits (contract in
 * kernels/sample.h). The CPU backend's ar_choose entry runs it per row; the CUDA kernel
 * (kernels/cuda/ar_sample.cu) is checked against it.
 *
 * Nucleus: with p sorted in decreasing order (ties by increasing id), token
 * k of that order is kept iff the mass before it is < top_p -- i.e. the
 * smallest prefix whose mass reaches top_p, the most probable token always
 * kept. This is transformers' rule (remove the ascending-cumulative mass
 * <= 1 - top_p) computed in double. */
#include "kernels/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double p;
    int32_t id;
} ranked;

static int by_prob_desc(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

size_t dllm_ar_work_bytes(int V) { return (size_t)V * sizeof(ranked); }

/* probs = softmax(z / temperature), max subtracted, in double. */
static void softmax_t(const float *z, int V, double temperature, double *probs)
{
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
        mx = (double)z[j] / temperature > mx ? (double)z[j] / temperature : mx;
    for (int j = 0; j < V; j++) {
        probs[j] = exp((double)z[j] / temperature - mx);
        sum += probs[j];
    }
    for (int j = 0; j < V; j++)
        probs[j] /= sum;
}

void dllm_ar_dist(const float *logits, int V, double temperature, double top_p, double *probs,
                  void *work)
{
    softmax_t(logits, V, temperature, probs);
    if (!(top_p < 1.0))
        return;
    ranked *r = work ? work : dllm_malloc(dllm_ar_work_bytes(V));
    for (int j = 0; j < V; j++)
        r[j] = (ranked){probs[j], j};
    qsort(r, (size_t)V, sizeof *r, by_prob_desc);
    double before = 0, kept = 0;
    int k = 0;
    for (; k < V && before < top_p; k++) {
        before += r[k].p;
        kept += r[k].p;
    }
    for (; k < V; k++)
        probs[r[k].id] = 0.0;
    for (int j = 0; j < V; j++)
        probs[j] /= kept;
    if (!work)
        free(r);
}

static double log_softmax_at(const float *z, int V, int id)
{
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
        mx = z[j] > mx ? z[j] : mx;
    for (int j = 0; j < V; j++)
        sum += exp((double)z[j] - mx);
    return (double)z[id] - mx - log(sum);
}

int32_t dllm_ar_choose(const float *logits, int V, double temperature, double top_p, double u,
                       double *logp, double *logp_t1, void *work)
{
    int32_t tok = 0;
    double lp = 0.0;
    if (temperature == 0.0) {
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[tok])
                tok = j;
    } else {
        double *probs = dllm_malloc((size_t)V * sizeof(double));
        dllm_ar_dist(logits, V, temperature, top_p, probs, work);
        /* inverse CDF over the kept ids, increasing id */
        double target = u, cum = 0;
        tok = -1;
        for (int j = 0; j < V; j++) {
            if (probs[j] == 0.0)
                continue;
            cum += probs[j];
            tok = j;
            if (cum > target)
                break;
        }
        lp = log(probs[tok]);
        free(probs);
    }
    if (logp)
        *logp = lp;
    if (logp_t1)
        *logp_t1 = log_softmax_at(logits, V, tok);
    return tok;
}
