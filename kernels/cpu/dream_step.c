/* dream_step.c: Dream's per-row math (dllm/dream_sampler.h: the published sample_tokens)
 * and the CPU backend's Dream step entries (contracts in kernels/sample.h and
 * kernels/backend.h); the CUDA kernels (kernels/cuda/dream_step.cu) are this code per row. */
#include "kernels/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double v;
    int i;
} ranked_id;

/* value descending, then the lower id first: a total order, so any sort gives one order */
static int by_value_desc(const void *a, const void *b)
{
    const ranked_id *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int cmp_double_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

size_t dllm_dream_work_bytes(int V)
{
    return (size_t)(V > 0 ? V : 1) * (sizeof(ranked_id) + sizeof(double));
}

void dllm_dream_probs(const float *logit, int V, const dllm_dream_step *a, double *p,
                      void *work)
{
    ranked_id *rk = work;
    double *tmp = (double *)((char *)work + (size_t)V * sizeof(ranked_id));
    for (int v = 0; v < V; v++)
        p[v] = logit[v];
    if (a->exclude >= 0)
        p[a->exclude] = -INFINITY;
    if (a->temperature > 0)
        for (int v = 0; v < V; v++)
            p[v] /= a->temperature;
    if (a->top_p < 1) {
        /* remove tokens whose sorted cumulative probability exceeds top_p, shifted by one
         * so that the first one over it is kept */
        for (int v = 0; v < V; v++)
            rk[v] = (ranked_id){p[v], v};
        qsort(rk, (size_t)V, sizeof *rk, by_value_desc);
        double mx = rk[0].v, z = 0;
        for (int v = 0; v < V; v++)
            z += exp(p[v] - mx);
        double cum = 0;
        bool prev_over = false;
        for (int j = 0; j < V; j++) {
            int v = rk[j].i;
            cum += exp(p[v] - mx) / z;
            bool over = cum > a->top_p;
            if (j > 0 && prev_over)
                p[v] = -INFINITY;
            prev_over = over;
        }
    }
    if (a->top_k > 0 && a->top_k < V) {
        memcpy(tmp, p, sizeof *tmp * (size_t)V);
        qsort(tmp, (size_t)V, sizeof *tmp, cmp_double_desc);
        double kth = tmp[a->top_k - 1];
        for (int v = 0; v < V; v++)
            if (p[v] < kth)
                p[v] = -INFINITY;
    }
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        mx = p[v] > mx ? p[v] : mx;
    for (int v = 0; v < V; v++)
        z += (p[v] = exp(p[v] - mx));
    for (int v = 0; v < V; v++)
        p[v] /= z;
}

int32_t dllm_dream_pick(const double *p, int V, const dllm_dream_step *a, double u, double *conf)
{
    int32_t x0 = 0;
    if (a->temperature > 0) {
        double cum = 0;
        x0 = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > 0) {
                cum += p[v];
                x0 = v;
                if (u < cum)
                    break;
            }
    } else {
        for (int v = 1; v < V; v++)
            if (p[v] > p[x0])
                x0 = v;
    }
    *conf = p[x0];
    if (a->alg == DLLM_DREAM_STEP_TOPK_MARGIN) {
        double t1 = -1, t2 = -1;
        for (int v = 0; v < V; v++)
            if (p[v] > t1) {
                t2 = t1;
                t1 = p[v];
            } else if (p[v] > t2) {
                t2 = p[v];
            }
        *conf = t1 - t2;
    } else if (a->alg == DLLM_DREAM_STEP_ENTROPY) {
        double h = 0;
        for (int v = 0; v < V; v++)
            h += p[v] * log(p[v] + 1e-10);
        *conf = h;
    }
    return x0;
}

/* ---- the CPU backend's Dream step entries --------------------------------------------- */

void op_dream_draw(int32_t *x0, double *key, float *prob, uint8_t *take, const float *logits,
                   const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                   const dllm_dream_step *a)
{
    double *p = dllm_malloc(sizeof *p * (size_t)V);
    void *work = dllm_malloc(dllm_dream_work_bytes(V));
    for (int i = 0; i < n; i++) {
        const uint64_t gb = (uint64_t)row_seq[i], pos = (uint64_t)row_pos[i];
        const float *lg = logits + (size_t)i * V;
        dllm_rng tok = dllm_rng_make(a->seed, DLLM_RNG_SAMPLER, a->step, 4 * gb);
        tok.ctr = pos;
        take[i] = 1;
        if (a->alg == DLLM_DREAM_STEP_ORIGIN && !a->last) {
            dllm_rng tr = dllm_rng_make(a->seed, DLLM_RNG_SAMPLER, a->step, 4 * gb + 1);
            tr.ctr = pos;
            take[i] = dllm_rng_uniform(&tr) < (double)a->ratio;
        }
        if (!take[i]) { /* origin leaves it masked: no draw */
            x0[i] = -1, key[i] = 0, prob[i] = 0;
            continue;
        }
        double conf;
        dllm_dream_probs(lg, V, a, p, work);
        x0[i] = dllm_dream_pick(p, V, a, dllm_rng_uniform(&tok), &conf);
        key[i] = conf;
        if (a->alg != DLLM_DREAM_STEP_ORIGIN && a->alg_temp > 0) { /* Gumbel-top-k */
            dllm_rng gum = dllm_rng_make(a->seed, DLLM_RNG_SAMPLER, a->step, 4 * gb + 2);
            gum.ctr = pos;
            key[i] = conf / a->alg_temp - log(-log(dllm_rng_uniform(&gum)));
        }
        prob[i] = (float)dllm_sampler_prob(lg, V, x0[i]);
    }
    free(p);
    free(work);
}

typedef struct {
    int row, pos;
    double key;
} ranked_row;

static int by_key_desc(const void *a, const void *b)
{
    const ranked_row *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void op_dream_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                     const int32_t *x0, const double *key, const float *prob,
                     const uint8_t *take, const int32_t *row_pos, const int32_t *seq_start,
                     int B, int T, int P, int G, int mask_id, const dllm_dream_step *a)
{
    ranked_row *r = dllm_malloc(sizeof *r * (size_t)(seq_start[B] > 0 ? seq_start[B] : 1));
    for (int b = 0; b < B; b++) {
        const int i0 = seq_start[b], nm = seq_start[b + 1] - i0;
        int k = 0;
        for (int j = 0; j < nm; j++)
            if (take[i0 + j])
                r[k++] = (ranked_row){i0 + j, row_pos[i0 + j], key[i0 + j]};
        if (a->alg != DLLM_DREAM_STEP_ORIGIN) {
            qsort(r, (size_t)k, sizeof *r, by_key_desc);
            const int kk = a->last ? nm : (int)((float)nm * a->ratio); /* float32, as published */
            k = kk < k ? kk : k;
        }
        for (int j = 0; j < k; j++) {
            const int i = r[j].row, pos = r[j].pos;
            canvas[(size_t)b * T + pos] = x0[i];
            if (x0[i] == mask_id)
                continue; /* a committed mask id leaves the position masked */
            commit_step[(size_t)b * G + (size_t)(pos - P)] = (int16_t)a->step;
            commit_prob[(size_t)b * G + (size_t)(pos - P)] = prob[i];
        }
    }
    free(r);
}
