/* test_sampler_device: the LLaDA sampler's one loop (dllm/sampler.h, dllm_sample_model) on a
 * device backend against dllm_sample (the same loop on the CPU backend over a host model) on
 * the same logits, bit for bit, and the bound on what it sends to the host.
 *
 * The model is a fake that runs through the backend table, so one code runs on the CUDA
 * backend (behind dllm_device_logits) and on the CPU backend (behind a dllm_logits_fn):
 *   h[b,t]      = E[x_t] + Pos[t] + (1/8) sum_{s: keymask} E[x_s]     (the row's context)
 *   logits[b,t] = h[b,t] Head^T + bias
 * through embedding, gemm, add, bias and linear ops. Every weight is a multiple of 1/8 in
 * [-1, 1], so every sum is exact in fp32 in any order: the two backends give the same
 * logits bit for bit (checked), and any difference in the rollouts is the sampler's.
 * bias puts mass on the mask id (mask_token allow leaves masks) and on EOS (the EOS
 * switches have something to act on); Pos = 0 makes every masked position of a sequence
 * identical (exact confidence ties, broken by position).
 *
 * The same loop runs on the CPU backend through the table's denoising entries and must
 * be dllm_sample bit for bit (everywhere); the device cases run in the CUDA emulation
 * build (and on a GPU). */
#include "config.h"

#include "dllm/device_logits.h"
#include "dllm/dream_sampler.h"
#include "dllm/sampler.h"
#include "kernels/backend.h"
#include "kernels/rng.h"
#include "tests/harness/counting_backend.h"
#include "tests/harness/harness.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_ops.h"
#endif

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FV = 37, FC = 16, F_MASK = 36, F_EOS = 1, F_EOT = 2, MAX_BB = 8, MAX_T = 48 };

/* ---- the fake model ------------------------------------------------------------------ */

typedef struct {
    dllm_backend *be;               /* where its weights and activations live */
    float *emb, *pos, *head, *bias; /* (V,C) (MAX_T,C) (V,C) (V) */
    int32_t *pos_ids;               /* (MAX_BB*MAX_T) t of each flat row, for the current T */
    float *kw;                      /* (MAX_BB, MAX_BB*MAX_T) keymask / 8, block-diagonal */
    float *e, *pe, *ctx, *g;        /* (MAX_BB*MAX_T,C) x2, (MAX_BB,C), (MAX_BB*MAX_T,C) */
    int B, T, ids_T, max_rows;
    float *ctx_fill;                /* (MAX_BB,C) the context of the last fill */
    int layers_calls, head_calls, max_head_n, fail_at; /* fail_at: layers() call to fail */
    int step_calls;
} fake;

/* multiples of 1/8 in [-1, 1] (amp 0: zeros) */
static float *eighths(size_t n, uint64_t key, int amp)
{
    float *x = malloc(sizeof *x * n);
    dllm_rng r = dllm_rng_make(key, 99, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = amp ? (float)((int)(dllm_rng_u64(&r) % 17) - 8) / 8.0f : 0.0f;
    return x;
}

static float *up_f32(dllm_backend *be, const float *h, size_t n)
{
    float *d = be->ops->alloc(be, sizeof *d * n);
    be->ops->upload(be, d, h, sizeof *d * n);
    return d;
}

static void fake_init(fake *f, dllm_backend *be, uint64_t wkey, int with_pos, float mask_bias,
                      float eos_bias, int max_rows)
{
    memset(f, 0, sizeof *f);
    f->be = be;
    f->max_rows = max_rows;
    f->fail_at = -1;
    float *e = eighths((size_t)FV * FC, wkey, 1), *p = eighths((size_t)MAX_T * FC, wkey + 1, with_pos);
    float *h = eighths((size_t)FV * FC, wkey + 2, 1), *bias = eighths(FV, wkey + 3, 0);
    bias[F_MASK] = mask_bias;
    bias[F_EOS] = eos_bias;
    f->emb = up_f32(be, e, (size_t)FV * FC);
    f->pos = up_f32(be, p, (size_t)MAX_T * FC);
    f->head = up_f32(be, h, (size_t)FV * FC);
    f->bias = up_f32(be, bias, FV);
    free(e), free(p), free(h), free(bias);
    const size_t rows = (size_t)MAX_BB * MAX_T;
    f->pos_ids = be->ops->alloc(be, sizeof(int32_t) * rows);
    f->kw = be->ops->alloc(be, sizeof(float) * MAX_BB * rows);
    f->e = be->ops->alloc(be, sizeof(float) * rows * FC);
    f->pe = be->ops->alloc(be, sizeof(float) * rows * FC);
    f->ctx = be->ops->alloc(be, sizeof(float) * MAX_BB * FC);
    f->g = be->ops->alloc(be, sizeof(float) * rows * FC);
    f->ctx_fill = be->ops->alloc(be, sizeof(float) * MAX_BB * FC);
}

static void fake_free(fake *f)
{
    void *all[] = {f->emb, f->pos, f->head, f->bias, f->pos_ids, f->kw, f->e, f->pe, f->ctx, f->g,
                   f->ctx_fill};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        f->be->ops->free(f->be, all[i]);
}

static int fake_layers(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T)
{
    fake *f = ctx;
    dllm_backend *be = f->be;
    if (f->layers_calls++ == f->fail_at)
        return 1;
    ck_assert_msg(B <= MAX_BB && T <= MAX_T && keymask, "fake: B=%d T=%d", B, T);
    const int N = B * T;
    if (f->ids_T != T) {
        int32_t ids[MAX_BB * MAX_T];
        for (int i = 0; i < MAX_BB * MAX_T; i++)
            ids[i] = i % T;
        be->ops->upload(be, f->pos_ids, ids, sizeof ids);
        f->ids_T = T;
    }
    /* the key mask comes to the host through the fake's own backend (not the sampler's
     * counted one): it only shapes the context weights */
    uint8_t km[MAX_BB * MAX_T];
    be->ops->download(be, km, keymask, (size_t)N);
    float *kw = calloc((size_t)B * N, sizeof *kw);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            kw[(size_t)b * N + b * T + t] = km[b * T + t] ? 0.125f : 0.0f;
    be->ops->upload(be, f->kw, kw, sizeof *kw * (size_t)B * N);
    free(kw);
    be->ops->embedding_fwd(be, f->e, tokens, f->emb, N, FC);
    be->ops->gemm(be, false, false, B, FC, N, 1.0f, f->kw, f->e, 0.0f, f->ctx);
    be->ops->embedding_fwd(be, f->pe, f->pos_ids, f->pos, N, FC);
    be->ops->add(be, f->e, f->pe, (size_t)N * FC);
    for (int b = 0; b < B; b++)
        be->ops->bias_fwd(be, f->e + (size_t)b * T * FC, f->ctx + (size_t)b * FC, T, FC);
    f->B = B;
    f->T = T;
    return 0;
}

static int fake_head(void *ctx, const int32_t *rows, int n, float *logits)
{
    fake *f = ctx;
    dllm_backend *be = f->be;
    ck_assert_msg(n > 0 && n <= f->max_rows, "head: %d rows, max_rows %d", n, f->max_rows);
    f->head_calls++;
    if (n > f->max_head_n)
        f->max_head_n = n;
    be->ops->embedding_fwd(be, f->g, rows, f->e, n, FC); /* gather the rows' h */
    be->ops->linear_fwd(be, logits, f->g, f->head, n, FC, FV);
    be->ops->bias_fwd(be, logits, f->bias, n, FV);
    return 0;
}

/* The fake's block cache: fill is layers() keeping the context; a step recomputes the
 * hidden rows of positions [lo, hi) from their current tokens over the fill's context
 * (the stale keys a cached step attends to), the other rows keeping the fill's. */
static int fake_fill(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T)
{
    fake *f = ctx;
    if (fake_layers(f, tokens, keymask, B, T))
        return 1;
    f->be->ops->copy(f->be, f->ctx_fill, f->ctx, sizeof(float) * (size_t)B * FC);
    return 0;
}

static int fake_step(void *ctx, const int32_t *tokens, int B, int T, int lo, int hi)
{
    fake *f = ctx;
    dllm_backend *be = f->be;
    ck_assert_msg(B == f->B && T == f->T && 0 <= lo && lo < hi && hi <= T,
                  "fake step [%d, %d) of %d x %d after a fill of %d x %d", lo, hi, B, T, f->B, f->T);
    f->step_calls++;
    const int N = B * T;
    be->ops->embedding_fwd(be, f->g, tokens, f->emb, N, FC);
    be->ops->embedding_fwd(be, f->pe, f->pos_ids, f->pos, N, FC);
    be->ops->add(be, f->g, f->pe, (size_t)N * FC);
    for (int b = 0; b < B; b++) {
        float *gb = f->g + (size_t)b * T * FC;
        be->ops->bias_fwd(be, gb, f->ctx_fill + (size_t)b * FC, T, FC);
        be->ops->copy(be, f->e + ((size_t)b * T + lo) * FC, gb + (size_t)lo * FC,
                      sizeof(float) * (size_t)(hi - lo) * FC);
    }
    return 0;
}

static void fake_heads(fake *f, const int32_t *rows, int n_rows, float *logits)
{
    for (int i0 = 0; i0 < n_rows; i0 += f->max_rows) {
        int m = n_rows - i0 < f->max_rows ? n_rows - i0 : f->max_rows;
        fake_head(f, rows + i0, m, logits + (size_t)i0 * FV);
    }
}

/* The cache on the CPU backend as a dllm_sampler_cache. */
static int fake_fill_fn(void *model, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                        const int32_t *rows, int n_rows, float *logits)
{
    if (fake_fill(model, tokens, keymask, B, T))
        return 1;
    fake_heads(model, rows, n_rows, logits);
    return 0;
}

static int fake_step_fn(void *model, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                        int lo, int hi, const int32_t *rows, int n_rows, float *logits)
{
    (void)keymask;
    for (int i = 0; i < n_rows; i++)
        ck_assert_msg(rows[i] % T >= lo && rows[i] % T < hi, "cached row %d outside [%d, %d)",
                      rows[i], lo, hi);
    if (fake_step(model, tokens, B, T, lo, hi))
        return 1;
    fake_heads(model, rows, n_rows, logits);
    return 0;
}

/* The same fake on the CPU backend as a dllm_logits_fn (host memory is its memory). */
static int fake_logits_fn(void *model, const int32_t *tokens, const uint8_t *keymask, int B,
                          int T, const int32_t *rows, int n_rows, float *logits)
{
    fake *f = model;
    if (fake_layers(f, tokens, keymask, B, T))
        return 1;
    for (int i0 = 0; i0 < n_rows; i0 += f->max_rows) {
        int m = n_rows - i0 < f->max_rows ? n_rows - i0 : f->max_rows;
        fake_head(f, rows + i0, m, logits + (size_t)i0 * FV);
    }
    return 0;
}

/* ---- cases ------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int B, P, G, block, steps;
    double temp;
    dllm_remasking remask;
    double cfg;
    bool eos_inf, conf_eos_inf;
    dllm_mask_token mt;
    float mask_bias, eos_bias;
    int with_pos, max_rows;
    uint64_t seq_offset;
    int expect; /* 1: some position left masked; 2: head() chunked within a step */
    double threshold;
    dllm_cache cache;
} sd_case;

enum { LEFT_MASKS = 1, CHUNKED = 2 };

static const sd_case CASES[] = {
    {"greedy low_conf", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"sampled low_conf", 3, 6, 16, 8, 8, 0.9, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"sampled random", 3, 6, 16, 4, 8, 1.3, REMASK_RANDOM, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"greedy random", 2, 5, 12, 12, 6, 0.0, REMASK_RANDOM, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"cfg greedy", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0.3, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"cfg sampled random", 2, 6, 16, 4, 8, 0.8, REMASK_RANDOM, 0.45, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"logits_eos_inf", 3, 6, 16, 8, 8, 0.7, REMASK_LOW_CONFIDENCE, 0, 1, 0, 0, 0.0f, 3.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"confidence_eos_eot_inf", 3, 6, 16, 8, 8, 0.7, REMASK_LOW_CONFIDENCE, 0, 0, 1, 0, 0.0f, 3.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"both eos switches greedy", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 1, 1, 0, 0.0f, 3.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"mask allow greedy", 3, 6, 16, 4, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, DLLM_MASK_TOKEN_ALLOW, 3.0f, 0.0f, 1, 64, 0, LEFT_MASKS, 0, DLLM_CACHE_NONE},
    {"mask allow sampled", 3, 6, 16, 4, 8, 1.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, DLLM_MASK_TOKEN_ALLOW, 3.0f, 0.0f, 1, 64, 0, LEFT_MASKS, 0, DLLM_CACHE_NONE},
    {"mask forbid greedy", 3, 6, 16, 4, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, DLLM_MASK_TOKEN_FORBID, 3.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"mask forbid sampled cfg", 3, 6, 16, 4, 8, 1.0, REMASK_RANDOM, 0.7, 0, 0, DLLM_MASK_TOKEN_FORBID, 3.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"ties (no positions)", 3, 6, 16, 8, 4, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 0, 64, 0, 0, 0, DLLM_CACHE_NONE},
    {"seq_offset past 2^32", 3, 6, 16, 8, 8, 1.0, REMASK_RANDOM, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 5000000007ULL, 0, 0, DLLM_CACHE_NONE},
    {"chunked head", 4, 6, 24, 12, 6, 0.8, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 5, 3, CHUNKED, 0, DLLM_CACHE_NONE},
    {"chunked cfg allow", 4, 6, 24, 8, 6, 0.0, REMASK_LOW_CONFIDENCE, 1.1, 1, 1, DLLM_MASK_TOKEN_ALLOW, 5.0f, 1.0f, 1, 7, 11, CHUNKED | LEFT_MASKS, 0, DLLM_CACHE_NONE},
    {"one block of all", 2, 4, 10, 10, 10, 0.5, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_NONE},
    /* confidence-threshold parallel commits and the block cache (dllm/sampler.h) */
    {"threshold greedy", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0.2, DLLM_CACHE_NONE},
    {"threshold sampled random", 3, 6, 16, 8, 8, 0.9, REMASK_RANDOM, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 7, 0, 0.7, DLLM_CACHE_NONE},
    {"threshold allow cfg", 3, 6, 16, 4, 8, 0.0, REMASK_LOW_CONFIDENCE, 0.5, 0, 1, DLLM_MASK_TOKEN_ALLOW, 3.0f, 3.0f, 1, 64, 0, LEFT_MASKS, 0.3, DLLM_CACHE_NONE},
    {"prefix cache", 3, 6, 16, 8, 8, 0.7, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_PREFIX},
    {"dual cache random", 3, 6, 16, 4, 8, 1.1, REMASK_RANDOM, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0, DLLM_CACHE_DUAL},
    /* below 1/FV: every position passes, a block per forward */
    {"dual cache threshold", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 0, 0, 0, 0.0f, 0.0f, 1, 64, 0, 0, 0.02, DLLM_CACHE_DUAL},
    {"dual cache threshold allow", 3, 6, 16, 8, 8, 0.0, REMASK_LOW_CONFIDENCE, 0, 1, 0, DLLM_MASK_TOKEN_ALLOW, 3.0f, 1.0f, 1, 64, 0, LEFT_MASKS, 0.25, DLLM_CACHE_DUAL},
    {"prefix cache threshold chunked", 4, 6, 24, 12, 6, 0.8, REMASK_LOW_CONFIDENCE, 0, 0, 0, DLLM_MASK_TOKEN_FORBID, 3.0f, 0.0f, 1, 5, 3, CHUNKED, 0.4, DLLM_CACHE_PREFIX},
};

/* Left-padded prompts of uneven length (sequence b has (b*2) % (P-1) pad positions,
 * whose ids are junk the key mask hides). */
static void make_prompts(const sd_case *c, int32_t *prompts, uint8_t *pm)
{
    dllm_rng r = dllm_rng_make(42, 7, (uint64_t)c->B, (uint64_t)c->P);
    for (int b = 0; b < c->B; b++) {
        int pad = (b * 2) % (c->P - 1);
        for (int t = 0; t < c->P; t++) {
            prompts[b * c->P + t] = 3 + (int32_t)(dllm_rng_u64(&r) % (FV - 4));
            pm[b * c->P + t] = t >= pad;
        }
    }
}

static dllm_sampler_cfg case_cfg(const sd_case *c)
{
    dllm_sampler_cfg s = {.gen_length = c->G, .block_length = c->block, .steps = c->steps,
                          .temperature = c->temp, .remasking = c->remask, .cfg_scale = c->cfg,
                          .logits_eos_inf = c->eos_inf, .confidence_eos_eot_inf = c->conf_eos_inf,
                          .mask_id = F_MASK, .eos_id = F_EOS, .eot_id = F_EOT, .vocab = FV,
                          .mask_token = c->mt, .seq_offset = c->seq_offset,
                          .cache = c->cache, .threshold = c->threshold};
    return s;
}

static dllm_device_logits device_view(fake *f, dllm_backend *be_seen)
{
    dllm_device_logits m = {.ctx = f, .be = be_seen, .V = FV, .max_rows = f->max_rows,
                            .layers = fake_layers, .head = fake_head, .fill = fake_fill,
                            .step = fake_step};
    return m;
}

/* dllm_sample (dllm_sample_cached under a cache) of the fake on the CPU backend. */
static int host_sample(fake *f, const int32_t *prompts, const uint8_t *pm, const sd_case *c,
                       const dllm_sampler_cfg *sc, uint64_t seed, dllm_rollout *out,
                       dllm_err *err)
{
    dllm_sampler_cache cache = {fake_fill_fn, fake_step_fn, f};
    return dllm_sample_cached(fake_logits_fn, f, &cache, prompts, pm, c->B, c->P, sc, seed, out,
                              err);
}

START_TEST(test_device_matches_cpu)
{
    const sd_case *c = &CASES[_i];
    dllm_backend *cuda = dllm_backend_cuda(), *cpu = dllm_backend_cpu();
    ck_assert(cuda != NULL);
    ck_assert(c->B * (c->cfg > 0 ? 2 : 1) <= MAX_BB && c->P + c->G <= MAX_T);
    const uint64_t seed = 77 + (uint64_t)_i;
    /* the weights follow the shape and the mask bias, so each forbid case has the
     * weights of the allow case beside it, which leaves masks */
    const uint64_t wkey = 1000 + (uint64_t)(c->B * 131 + c->G * 7 + c->block + c->steps * 3) +
                          (uint64_t)(c->mask_bias * 10);
    fake fd, fh;
    fake_init(&fd, cuda, wkey, c->with_pos, c->mask_bias, c->eos_bias, c->max_rows);
    fake_init(&fh, cpu, wkey, c->with_pos, c->mask_bias, c->eos_bias, c->max_rows);
    int32_t prompts[MAX_BB * MAX_T];
    uint8_t pm[MAX_BB * MAX_T];
    make_prompts(c, prompts, pm);
    dllm_sampler_cfg sc = case_cfg(c);

    dllm_rollout want, got;
    dllm_err err = {0};
    ck_assert_msg(host_sample(&fh, prompts, pm, c, &sc, seed, &want, &err) == 0,
                  "%s: CPU: %s", c->name, err.msg);
    dllm_device_logits m = device_view(&fd, tu_counting_backend(cuda));
    tu_count_reset();
    ck_assert_msg(dllm_sample_model(&m, prompts, pm, c->B, c->P, &sc, seed, &got, &err) == 0,
                  "%s: device: %s", c->name, err.msg);

    const int B = c->B, T = c->P + c->G, G = c->G;
    for (int i = 0; i < B * T; i++)
        ck_assert_msg(got.tokens[i] == want.tokens[i], "%s: token [%d,%d] %d vs CPU %d", c->name,
                      i / T, i % T, got.tokens[i], want.tokens[i]);
    int left = 0;
    for (int b = 0; b < B; b++) {
        ck_assert_int_eq(got.n_masked_left[b], want.n_masked_left[b]);
        left += got.n_masked_left[b];
    }
    for (int i = 0; i < B * G; i++) {
        ck_assert_msg(got.commit_step[i] == want.commit_step[i], "%s: commit_step [%d,%d] %d vs %d",
                      c->name, i / G, i % G, got.commit_step[i], want.commit_step[i]);
        float a = got.commit_prob[i], e = want.commit_prob[i];
        ck_assert_msg((isnan(a) && isnan(e)) || fabsf(a - e) <= 1e-6f * fabsf(e),
                      "%s: commit_prob [%d,%d] %.9g vs %.9g", c->name, i / G, i % G, a, e);
    }
    /* the case exercises what it is named for */
    if (c->expect & LEFT_MASKS)
        ck_assert_msg(left > 0, "%s: no position left masked", c->name);
    if (c->mt == DLLM_MASK_TOKEN_FORBID)
        ck_assert_int_eq(left, 0);
    /* under CFG a chunk's cond and uncond rows share one head() call */
    if (c->expect & CHUNKED)
        ck_assert_msg(fd.head_calls > fd.layers_calls &&
                          fd.max_head_n == (c->cfg > 0 ? c->max_rows / 2 * 2 : c->max_rows),
                      "%s: head() was not chunked (%d calls, %d layers)", c->name, fd.head_calls,
                      fd.layers_calls);
    ck_assert_int_eq(fd.layers_calls, fh.layers_calls); /* a step with no rows runs no forward */
    ck_assert_int_eq(fd.step_calls, fh.step_calls);
    ck_assert_int_eq(got.nfe, want.nfe);
    if (c->cache != DLLM_CACHE_NONE)
        ck_assert_msg(fd.step_calls > 0, "%s: no cached step", c->name);
    /* some step committed more than one position; where the mask token may be drawn a
     * block can keep drawing it until its last step, so only the equalities hold there */
    if (c->threshold > 0 && !(c->expect & LEFT_MASKS))
        ck_assert_msg(got.nfe < G / c->block * c->block, "%s: the threshold saved no forward (%d)",
                      c->name, got.nfe);

    /* host traffic: per step at most one 4-byte count; at the end the canvas and the
     * records; at the start the canvas, key mask and records once (a threshold's block
     * takes up to block_length steps) */
    const int BB = c->cfg > 0 ? 2 * B : B;
    const int max_steps = c->threshold > 0 ? G : c->steps;
    ck_assert_msg(tu_counted.n_down <= (size_t)max_steps + 3, "%s: %zu downloads for %d steps", c->name,
                  tu_counted.n_down, max_steps);
    ck_assert_msg(tu_counted.bytes_down <= (size_t)max_steps * 4 + (size_t)B * T * 4 + (size_t)B * G * 6,
                  "%s: %zu bytes downloaded", c->name, tu_counted.bytes_down);
    ck_assert_msg(tu_counted.n_up <= 4 && tu_counted.bytes_up <= (size_t)BB * T * 5 + (size_t)B * G * 6,
                  "%s: %zu uploads, %zu bytes", c->name, tu_counted.n_up, tu_counted.bytes_up);
    dllm_rollout_free(&want);
    dllm_rollout_free(&got);
    fake_free(&fd);
    fake_free(&fh);
}
END_TEST

/* The same loop on the CPU backend (the table's denoising entries of kernels/cpu/) is
 * dllm_sample bit for bit, commit_prob included; the forward count is the same. */
START_TEST(test_table_loop_on_cpu)
{
    const sd_case *c = &CASES[_i];
    dllm_backend *cpu = dllm_backend_cpu();
    const uint64_t seed = 77 + (uint64_t)_i;
    const uint64_t wkey = 1000 + (uint64_t)(c->B * 131 + c->G * 7 + c->block + c->steps * 3) +
                          (uint64_t)(c->mask_bias * 10);
    fake fl, fh;
    fake_init(&fl, cpu, wkey, c->with_pos, c->mask_bias, c->eos_bias, c->max_rows);
    fake_init(&fh, cpu, wkey, c->with_pos, c->mask_bias, c->eos_bias, c->max_rows);
    int32_t prompts[MAX_BB * MAX_T];
    uint8_t pm[MAX_BB * MAX_T];
    make_prompts(c, prompts, pm);
    dllm_sampler_cfg sc = case_cfg(c);
    dllm_rollout want, got;
    dllm_err err = {0};
    ck_assert_msg(host_sample(&fh, prompts, pm, c, &sc, seed, &want, &err) == 0,
                  "%s: dllm_sample: %s", c->name, err.msg);
    dllm_device_logits m = device_view(&fl, cpu);
    ck_assert_msg(dllm_sample_model(&m, prompts, pm, c->B, c->P, &sc, seed, &got, &err) == 0,
                  "%s: table loop: %s", c->name, err.msg);
    const int B = c->B, T = c->P + c->G, G = c->G;
    ck_assert_msg(memcmp(got.tokens, want.tokens, sizeof *got.tokens * (size_t)B * T) == 0,
                  "%s: tokens differ", c->name);
    ck_assert_msg(memcmp(got.commit_step, want.commit_step, sizeof *got.commit_step * (size_t)B * G) == 0,
                  "%s: commit steps differ", c->name);
    ck_assert_msg(memcmp(got.commit_prob, want.commit_prob, sizeof *got.commit_prob * (size_t)B * G) == 0,
                  "%s: commit probabilities differ", c->name);
    ck_assert_msg(memcmp(got.n_masked_left, want.n_masked_left, sizeof *got.n_masked_left * (size_t)B) == 0,
                  "%s: masks left differ", c->name);
    ck_assert_int_eq(fl.layers_calls, fh.layers_calls);
    ck_assert_int_eq(fl.step_calls, fh.step_calls);
    dllm_rollout_free(&want);
    dllm_rollout_free(&got);
    fake_free(&fl);
    fake_free(&fh);
}
END_TEST

/* The fake is exact: the CUDA and CPU backends give the same logits bit for bit, so the
 * comparisons above test the sampler alone. */
START_TEST(test_fake_is_exact)
{
    dllm_backend *cuda = dllm_backend_cuda(), *cpu = dllm_backend_cpu();
    fake fd, fh;
    fake_init(&fd, cuda, 5, 1, 1.0f, 1.0f, 64);
    fake_init(&fh, cpu, 5, 1, 1.0f, 1.0f, 64);
    enum { B = 3, T = 20 };
    int32_t tok[B * T], rows[B * T];
    uint8_t km[B * T];
    dllm_rng r = dllm_rng_make(3, 3, 3, 3);
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(dllm_rng_u64(&r) % FV);
        km[i] = (i % T) >= (i / T);
        rows[i] = B * T - 1 - i;
    }
    float *want = malloc(sizeof *want * B * T * FV), *got = malloc(sizeof *got * B * T * FV);
    ck_assert_int_eq(fake_logits_fn(&fh, tok, km, B, T, rows, B * T, want), 0);
    int32_t *d_tok = cuda->ops->alloc(cuda, sizeof tok), *d_rows = cuda->ops->alloc(cuda, sizeof rows);
    uint8_t *d_km = cuda->ops->alloc(cuda, sizeof km);
    float *d_lg = cuda->ops->alloc(cuda, sizeof *got * 60 * FV);
    cuda->ops->upload(cuda, d_tok, tok, sizeof tok);
    cuda->ops->upload(cuda, d_rows, rows, sizeof rows);
    cuda->ops->upload(cuda, d_km, km, sizeof km);
    ck_assert_int_eq(fake_layers(&fd, d_tok, d_km, B, T), 0);
    ck_assert_int_eq(fake_head(&fd, d_rows, B * T, d_lg), 0);
    cuda->ops->download(cuda, got, d_lg, sizeof *got * B * T * FV);
    ck_assert_msg(memcmp(got, want, sizeof *got * B * T * FV) == 0, "device logits differ");
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < B * T * FV; i++)
        lo = fminf(lo, want[i]), hi = fmaxf(hi, want[i]);
    ck_assert_msg(hi - lo > 4.0f, "logits too flat to test anything: [%g, %g]", lo, hi);
    cuda->ops->free(cuda, d_tok), cuda->ops->free(cuda, d_rows), cuda->ops->free(cuda, d_km);
    cuda->ops->free(cuda, d_lg);
    free(want), free(got);
    fake_free(&fd);
    fake_free(&fh);
}
END_TEST

/* Refusals: a vocabulary that is not the model's, a bad config
 * (the CPU sampler's check, naming the flag), and a forward that fails. */
START_TEST(test_device_refusals)
{
    dllm_backend *cuda = dllm_backend_cuda(), *cpu = dllm_backend_cpu();
    fake fd, fh;
    fake_init(&fd, cuda, 9, 1, 0.0f, 0.0f, 64);
    fake_init(&fh, cpu, 9, 1, 0.0f, 0.0f, 64);
    const sd_case *c = &CASES[0];
    int32_t prompts[MAX_BB * MAX_T];
    uint8_t pm[MAX_BB * MAX_T];
    make_prompts(c, prompts, pm);
    dllm_sampler_cfg sc = case_cfg(c);
    dllm_rollout r;
    dllm_err err = {0};

    dllm_device_logits m = device_view(&fd, cuda);
    sc.vocab = FV + 1;
    ck_assert_int_eq(dllm_sample_model(&m, prompts, pm, c->B, c->P, &sc, 1, &r, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "vocab") != NULL, "message: %s", err.msg);

    sc = case_cfg(c);
    sc.block_length = 5; /* does not divide 16 */
    ck_assert_int_eq(dllm_sample_model(&m, prompts, pm, c->B, c->P, &sc, 1, &r, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "block_length") != NULL, "message: %s", err.msg);

    sc = case_cfg(c);
    fd.fail_at = 2;
    ck_assert_int_eq(dllm_sample_model(&m, prompts, pm, c->B, c->P, &sc, 1, &r, &err), DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "step 2") != NULL, "message: %s", err.msg);
    ck_assert(r.tokens == NULL);
    fake_free(&fd);
    fake_free(&fh);
}
END_TEST

/* ---- Dream (dllm/dream_sampler.h): the same loop on both backends ---------------------- */

typedef struct {
    const char *name;
    dllm_dream_alg alg;
    double temp, top_p, alg_temp;
    int top_k;
    dllm_mask_token mt;
    float mask_bias;
} dream_case;

static const dream_case DREAM_CASES[] = {
    {"origin greedy", DLLM_DREAM_ORIGIN, 0.0, 1, 0, 0, 0, 0.0f},
    {"origin sampled top_p", DLLM_DREAM_ORIGIN, 0.9, 0.8, 0, 0, 0, 0.0f},
    {"maskgit_plus greedy allow", DLLM_DREAM_MASKGIT_PLUS, 0.0, 1, 0, 0, DLLM_MASK_TOKEN_ALLOW, 3.0f},
    {"maskgit_plus sampled top_k", DLLM_DREAM_MASKGIT_PLUS, 1.1, 1, 0, 5, 0, 0.0f},
    {"topk_margin alg_temp forbid", DLLM_DREAM_TOPK_MARGIN, 0.7, 0.9, 0.5, 7, DLLM_MASK_TOKEN_FORBID, 3.0f},
    {"entropy sampled", DLLM_DREAM_ENTROPY, 0.8, 1, 0, 0, 0, 0.0f},
    {"entropy alg_temp top_p top_k", DLLM_DREAM_ENTROPY, 1.0, 0.7, 0.3, 4, 0, 1.0f},
};

/* Dream's rollout of the fake on the backend be (behind the counting wrapper when
 * counted) against dllm_dream_sample on the CPU backend: tokens, steps, probabilities and
 * masks left bit for bit, and the host traffic of the loop. */
static void dream_check(const dream_case *dc, dllm_backend *be, bool counted)
{
    enum { B = 3, P = 6, G = 16 };
    const sd_case *c = &CASES[0];
    fake fd, fh;
    fake_init(&fd, be, 4242, 1, dc->mask_bias, 0.0f, 64);
    fake_init(&fh, dllm_backend_cpu(), 4242, 1, dc->mask_bias, 0.0f, 64);
    int32_t prompts[MAX_BB * MAX_T];
    uint8_t pm[MAX_BB * MAX_T];
    make_prompts(c, prompts, pm);
    dllm_sampler_cfg sc = case_cfg(c);
    sc.gen_length = G;
    sc.steps = 8;
    sc.temperature = dc->temp;
    sc.mask_token = dc->mt;
    sc.seq_offset = 5;
    dllm_dream_cfg d = dllm_dream_cfg_default();
    d.alg = dc->alg, d.top_p = dc->top_p, d.alg_temp = dc->alg_temp, d.top_k = dc->top_k;
    dllm_rollout want, got;
    dllm_err err = {0};
    ck_assert_msg(dllm_dream_sample(fake_logits_fn, &fh, prompts, pm, B, P, &sc, &d, 9, &want,
                                    &err) == 0, "%s: CPU: %s", dc->name, err.msg);
    dllm_device_logits m = device_view(&fd, counted ? tu_counting_backend(be) : be);
    tu_count_reset();
    ck_assert_msg(dllm_dream_sample_model(&m, prompts, pm, B, P, &sc, &d, 9, &got, &err) == 0,
                  "%s: %s: %s", dc->name, be->name, err.msg);
    const int T = P + G;
    ck_assert_msg(memcmp(got.tokens, want.tokens, sizeof *got.tokens * B * T) == 0,
                  "%s: tokens differ", dc->name);
    ck_assert_msg(memcmp(got.commit_step, want.commit_step, sizeof *got.commit_step * B * G) == 0,
                  "%s: commit steps differ", dc->name);
    ck_assert_msg(memcmp(got.commit_prob, want.commit_prob, sizeof *got.commit_prob * B * G) == 0,
                  "%s: commit probabilities differ", dc->name);
    ck_assert_msg(memcmp(got.n_masked_left, want.n_masked_left, sizeof(int32_t) * B) == 0,
                  "%s: masks left differ", dc->name);
    ck_assert_int_eq(got.nfe, want.nfe);
    ck_assert_int_eq(fd.layers_calls, fh.layers_calls);
    int committed = 0;
    for (int i = 0; i < B * G; i++)
        committed += got.commit_step[i] >= 0;
    ck_assert_msg(committed > B, "%s: only %d commits", dc->name, committed);
    if (counted) { /* per step one 4-byte count; the canvas and records once each way */
        ck_assert_msg(tu_counted.n_down <= (size_t)sc.steps + 3, "%s: %zu downloads", dc->name,
                      tu_counted.n_down);
        ck_assert_msg(tu_counted.n_up <= 4 && tu_counted.bytes_up <= (size_t)B * T * 5 + (size_t)B * G * 6,
                      "%s: %zu uploads, %zu bytes", dc->name, tu_counted.n_up, tu_counted.bytes_up);
    }
    dllm_rollout_free(&want);
    dllm_rollout_free(&got);
    fake_free(&fd);
    fake_free(&fh);
}

START_TEST(test_dream_table_loop_on_cpu)
{
    dream_check(&DREAM_CASES[_i], dllm_backend_cpu(), false);
}
END_TEST

START_TEST(test_dream_device_matches_cpu)
{
    dream_check(&DREAM_CASES[_i], dllm_backend_cuda(), true);
}
END_TEST

#ifdef HAVE_CUDA
/* The kernels' own contracts, where a rollout cannot see them: CFG and the EOS logit bit
 * for bit against the CPU's fp32 expression (a fused multiply-add would change the last
 * bit of a logit, which moves a probability by less than the rollout tolerance), and the
 * x0 draw with an excluded id against dllm_sampler_draw_x0_excl, id 0 excluded included
 * (the scan then starts at 1). */
START_TEST(test_step_kernels_bits)
{
    dllm_backend *be = dllm_backend_cuda();
    enum { N = 9, V = 53 };
    float *c = malloc(sizeof *c * N * V), *u = malloc(sizeof *u * N * V);
    float *got = malloc(sizeof *got * N * V);
    dllm_rng r = dllm_rng_make(11, 1, 2, 3);
    for (int i = 0; i < N * V; i++) {
        c[i] = (float)(dllm_rng_uniform(&r) * 8.0 - 4.0);
        u[i] = (float)(dllm_rng_uniform(&r) * 8.0 - 4.0);
    }
    float *d_c = be->ops->alloc(be, sizeof *c * N * V), *d_u = be->ops->alloc(be, sizeof *u * N * V);
    const double scales[] = {0.3, 1.0, 2.7};
    for (int k = 0; k < 3; k++) {
        const float w = (float)(scales[k] + 1.0);
        be->ops->upload(be, d_c, c, sizeof *c * N * V);
        be->ops->upload(be, d_u, u, sizeof *u * N * V);
        dllm_cuda_sampler_logits_fix(d_c, d_u, N, V, w, k == 1 ? 5 : -1, NULL);
        be->ops->download(be, got, d_c, sizeof *got * N * V);
        for (int i = 0; i < N * V; i++) {
            float want = u[i] + w * (c[i] - u[i]);
            if (k == 1 && i % V == 5)
                want = -INFINITY;
            ck_assert_msg(memcmp(&want, &got[i], sizeof want) == 0, "cfg %g [%d]: %.9g vs %.9g",
                          scales[k], i, got[i], want);
        }
    }

    /* x0 with exclusions: row 0 random, 1 all -inf, 2 NaN at ids 0 and 1, 3 a tie of 0 and
     * 7, 4 id 0 the clear maximum */
    for (int i = 0; i < N * V; i++)
        c[i] = (float)(dllm_rng_uniform(&r) * 6.0 - 3.0);
    for (int v = 0; v < V; v++)
        c[V + v] = -INFINITY;
    c[2 * V] = c[2 * V + 1] = NAN;
    c[3 * V] = c[3 * V + 7] = 9.0f;
    c[4 * V] = 12.0f;
    int64_t seq[N];
    int32_t pos[N];
    for (int i = 0; i < N; i++)
        seq[i] = 3 + i % 2, pos[i] = 4 + i;
    int64_t *d_seq = be->ops->alloc(be, sizeof seq);
    int32_t *d_pos = be->ops->alloc(be, sizeof pos), *d_x0 = be->ops->alloc(be, sizeof(int32_t) * N);
    float *d_p = be->ops->alloc(be, sizeof(float) * N);
    be->ops->upload(be, d_seq, seq, sizeof seq);
    be->ops->upload(be, d_pos, pos, sizeof pos);
    be->ops->upload(be, d_c, c, sizeof *c * N * V);
    const int excls[] = {-1, 0, 1, 7, V - 1};
    const double temps[] = {0.0, 1.0, 0.6};
    for (size_t e = 0; e < sizeof excls / sizeof *excls; e++)
        for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
            int32_t x0[N];
            float pr[N];
            dllm_cuda_sampler_x0_excl(d_x0, d_p, NULL, d_c, d_seq, d_pos, N, V, temps[t], 5, 2,
                                      excls[e], NULL);
            be->ops->download(be, x0, d_x0, sizeof x0);
            be->ops->download(be, pr, d_p, sizeof pr);
            for (int i = 0; i < N; i++) {
                dllm_rng noise = dllm_rng_make(5, DLLM_RNG_SAMPLER, 2, 2 * (uint64_t)seq[i]);
                int32_t want = dllm_sampler_draw_x0_excl(c + (size_t)i * V, V, temps[t], &noise,
                                                         pos[i], excls[e]);
                ck_assert_msg(x0[i] == want, "exclude %d T=%g row %d: x0 %d vs CPU %d", excls[e],
                              temps[t], i, x0[i], want);
                float wp = (float)dllm_sampler_prob(c + (size_t)i * V, V, want);
                ck_assert_msg((isnan(wp) && isnan(pr[i])) || fabsf(pr[i] - wp) <= 1e-6f * wp,
                              "exclude %d row %d: prob %g vs %g", excls[e], i, pr[i], wp);
            }
        }
    be->ops->free(be, d_c), be->ops->free(be, d_u), be->ops->free(be, d_seq);
    be->ops->free(be, d_pos), be->ops->free(be, d_x0), be->ops->free(be, d_p);
    free(c), free(u), free(got);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
    dllm_backend *cuda = dllm_backend_cuda();
    Suite *s = suite_create("sampler_device");
    TCase *th = tcase_create("cpu");
    tcase_add_loop_test(th, test_table_loop_on_cpu, 0, (int)(sizeof CASES / sizeof *CASES));
    tcase_add_loop_test(th, test_dream_table_loop_on_cpu, 0,
                        (int)(sizeof DREAM_CASES / sizeof *DREAM_CASES));
    suite_add_tcase(s, th);
    if (!cuda)
        printf("no CUDA device (%s): the CPU backend's cases only\n", dllm_backend_cuda_why());
    if (cuda) {
        TCase *tc = tcase_create("device");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_fake_is_exact);
        tcase_add_loop_test(tc, test_device_matches_cpu, 0, (int)(sizeof CASES / sizeof *CASES));
        tcase_add_test(tc, test_device_refusals);
        tcase_add_loop_test(tc, test_dream_device_matches_cpu, 0,
                            (int)(sizeof DREAM_CASES / sizeof *DREAM_CASES));
#ifdef HAVE_CUDA
        tcase_add_test(tc, test_step_kernels_bits);
#endif
        suite_add_tcase(s, tc);
    }
    ctx->nofork = true; /* a CUDA context does not survive into a forked child */
    return s;
}
