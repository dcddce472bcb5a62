/* ar_sampler.c: autoregressive decoding with a KV cache, temperature and
 * nucleus (top-p) sampling, keyed randomness (contract in ar_sampler.h). A model on
 * a CUDA device runs the loop there (ar_sampler_device.c) unless it samples a nucleus.
 *
 * Nucleus: with p sorted in decreasing order (ties by increasing id), token
 * k of that order is kept iff the mass before it is < top_p -- i.e. the
 * smallest prefix whose mass reaches top_p, the most probable token always
 * kept. This is transformers' rule (remove the ascending-cumulative mass
 * <= 1 - top_p) computed in double. */
#include "dllm/ar_sampler.h"
#include "dllm/ar_sampler_device.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int dllm_ar_check(const dllm_ar_cfg *c, int vocab, dllm_err *err)
{
    if (c->max_new_tokens < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "max_new_tokens %d: must be at least 1",
                            c->max_new_tokens);
    if (!(c->temperature >= 0) || !isfinite(c->temperature))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "temperature %g: must be >= 0", c->temperature);
    if (!(c->top_p > 0 && c->top_p <= 1))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "top_p %g: must be in (0, 1]", c->top_p);
    if (c->eos_id < -1 || c->eos_id >= vocab)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "eos_id %d: outside the vocabulary [0, %d)",
                            c->eos_id, vocab);
    return 0;
}

void dllm_ar_rollout_free(dllm_ar_rollout *r)
{
    free(r->tokens);
    free(r->logp);
    free(r->logp_t1);
    free(r->length);
    memset(r, 0, sizeof *r);
}

int dllm_ar_sample(dllm_tf *m, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                   int P, const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out,
                   dllm_err *err)
{
    memset(out, 0, sizeof *out);
    int V = dllm_tf_config(m)->vocab_size, G = c->max_new_tokens;
    int rc = dllm_ar_check(c, V, err);
    if (rc)
        return rc;
    if (B < 1 || P < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: empty batch (B=%d, P=%d)", B, P);
    for (int b = 0; b < B && prompt_mask; b++) {
        int real = 0;
        for (int t = 0; t < P; t++)
            real += prompt_mask[(size_t)b * P + t] != 0;
        if (!real)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "ar sampler: prompt %d has no real token", b);
    }
    qwen3_kv_cache *kv = qwen3_cache_new(m, B, P + G);
    dllm_backend *dev = dllm_tf_device(m);
    if (dev && dev->kind == DLLM_BACKEND_CUDA && !(c->temperature > 0 && c->top_p < 1)) {
        /* the whole loop on the device; a nucleus is chosen on the host below */
        dllm_ar_device_model dm;
        rc = qwen3_device_decoder(m, kv, &dm, err);
        if (!rc)
            rc = dllm_ar_sample_device(&dm, prompts, prompt_mask, B, P, c, seed, out, err);
        qwen3_cache_free(kv);
        return rc;
    }
    float *logits = dllm_malloc((size_t)B * V * sizeof(float));
    int32_t *next = dllm_malloc((size_t)B * sizeof(int32_t));
    out->B = B, out->P = P, out->G = G;
    out->tokens = dllm_malloc((size_t)B * (P + G) * sizeof(int32_t));
    out->logp = dllm_calloc((size_t)B * G, sizeof(float));
    out->logp_t1 = dllm_calloc((size_t)B * G, sizeof(float));
    out->length = dllm_calloc((size_t)B, sizeof(int32_t));
    bool *done = dllm_calloc((size_t)B, sizeof(bool));
    for (int b = 0; b < B; b++)
        memcpy(out->tokens + (size_t)b * (P + G), prompts + (size_t)b * P,
               (size_t)P * sizeof(int32_t));
    rc = qwen3_prefill(m, kv, prompts, prompt_mask, P, logits, err);
    int g = 0;
    for (; g < G && !rc; g++) {
        int ndone = 0;
#pragma omp parallel
        {
            void *work = c->temperature > 0 && c->top_p < 1 ? dllm_malloc(dllm_ar_work_bytes(V))
                                                            : NULL;
#pragma omp for schedule(dynamic, 1) reduction(+ : ndone)
            for (int b = 0; b < B; b++) {
                int32_t *row = out->tokens + (size_t)b * (P + G) + P;
                if (done[b]) {
                    next[b] = row[g] = c->eos_id;
                    ndone++;
                    continue;
                }
                dllm_rng r = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)g,
                                           c->seq_offset + (uint64_t)b);
                double lp, lp1;
                int32_t tok = dllm_ar_choose(logits + (size_t)b * V, V, c->temperature, c->top_p,
                                             dllm_rng_uniform(&r), &lp, &lp1, work);
                next[b] = row[g] = tok;
                out->logp[(size_t)b * G + g] = (float)lp;
                out->logp_t1[(size_t)b * G + g] = (float)lp1;
                out->length[b] = g + 1;
                if (tok == c->eos_id) {
                    done[b] = true;
                    ndone++;
                }
            }
            free(work);
        }
        if (ndone == B || g == G - 1)
            break;
        rc = qwen3_decode_step(m, kv, next, logits, err);
    }
    /* rows that all stopped early: the rest is EOS */
    for (int b = 0; b < B && !rc; b++)
        for (int k = out->length[b]; k < G; k++)
            out->tokens[(size_t)b * (P + G) + P + k] = c->eos_id >= 0 ? c->eos_id : 0;
    free(done);
    free(next);
    free(logits);
    qwen3_cache_free(kv);
    if (rc)
        dllm_ar_rollout_free(out);
    return rc;
}
