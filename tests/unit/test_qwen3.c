/* test_qwen3.c: the Qwen3 architecture of the transformer core (descriptor
 * dllm_arch_qwen3), its KV-cache decoding (dllm/qwen3.c) and the autoregressive
 * sampler (dllm/ar_sampler.c) against Hugging Face transformers'
 * Qwen3ForCausalLM, through the fixtures of tests/ref/make_qwen3_goldens.py in
 * DLLM_TEST_DATA/qwen3/ (tied and untied embeddings): logits of a left-padded
 * batch (fp32, and bf16 weights from a sharded checkpoint), the next-token loss
 * and every parameter gradient, exact completion log-probs at a temperature,
 * greedy generate() ids, and the temperature/top-p sampling distribution.
 * Plus self-checks: KV-cache decoding == full forward (also with LoRA),
 * padding invariance, sampler bookkeeping. The checks every architecture
 * shares (finite differences of every tensor and of LoRA, LoRA gradients ==
 * the chain rule through the merged weight, merged save == LoRA forward,
 * adapter and checkpoint round trips, deterministic creation) run over the
 * committed Qwen3 models in test_transformer.c. */
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dllm/ar_sampler.h"
#include "dllm/qwen3.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"

enum { B = 3, T = 10, GB = 3, GP = 6, GN = 8 };

/* ---- fixtures ------------------------------------------------------------------------------ */

static char *data_path(const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "qwen3/%s", name);
    return tu_data_path(rel);
}

static dllm_tf *load_model(const char *name)
{
    char *dir = data_path(name);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    int rc = dllm_tf_load(&m, dir, &err);
    ck_assert_msg(rc == 0, "load %s: %s", dir, err.msg);
    free(dir);
    return m;
}

static st_archive *open_golden(void)
{
    return tu_open_archive("qwen3/golden.safetensors");
}

static const st_tensor *gold(const st_archive *a, const char *name, st_dtype dt, size_t n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t != NULL, "golden tensor '%s' missing", name);
    ck_assert_msg(t->dtype == dt && (size_t)t->numel == n,
                  "golden tensor '%s': dtype %s numel %lld, expected %s numel %zu", name,
                  st_dtype_name(t->dtype), (long long)t->numel, st_dtype_name(dt), n);
    return t;
}

static float *gold_f32(const st_archive *a, const char *name, size_t n)
{
    float *out = dllm_malloc(n * sizeof(float) + 1);
    memcpy(out, gold(a, name, ST_F32, n)->data, n * sizeof(float));
    return out;
}

static double *gold_f64(const st_archive *a, const char *name, size_t n)
{
    double *out = dllm_malloc(n * sizeof(double) + 1);
    memcpy(out, gold(a, name, ST_F64, n)->data, n * sizeof(double));
    return out;
}

static int32_t *gold_i32(const st_archive *a, const char *name, size_t n)
{
    int32_t *out = dllm_malloc(n * sizeof(int32_t) + 1);
    memcpy(out, gold(a, name, ST_I32, n)->data, n * sizeof(int32_t));
    return out;
}

static uint8_t *gold_mask(const st_archive *a, const char *name, size_t n)
{
    int32_t *m = gold_i32(a, name, n);
    uint8_t *out = dllm_malloc(n);
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)m[i];
    free(m);
    return out;
}

/* The golden batch and its next-token rows. */
typedef struct {
    int32_t *tokens, *rows, *targets;
    uint8_t *keymask;
    int R;
} batch;

static void load_batch(const st_archive *a, batch *b)
{
    b->tokens = gold_i32(a, "tokens", B * T);
    b->keymask = gold_mask(a, "keymask", B * T);
    const st_tensor *r = st_find(a, "rows");
    ck_assert_ptr_nonnull(r);
    b->R = (int)r->numel;
    b->rows = gold_i32(a, "rows", (size_t)b->R);
    b->targets = gold_i32(a, "targets", (size_t)b->R);
}

static void free_batch(batch *b)
{
    free(b->tokens);
    free(b->rows);
    free(b->targets);
    free(b->keymask);
}

/* Mean next-token cross-entropy over the batch rows (the golden loss); with
 * backward, its gradient is accumulated into the model. */
static double loss_of(dllm_tf *m, const batch *b, bool backward)
{
    return tu_rows_xent(m, b->tokens, b->keymask, B, T, b->rows, b->targets, b->R, backward);
}

/* Random LoRA B (PEFT starts it at zero, which would hide the adapter). */
static void enable_lora(dllm_tf *m, int mask)
{
    dllm_tf_lora_enable(m, 4, 8.0f, mask, 5);
    const dllm_param *LP;
    int nl = dllm_tf_lora_params(m, &LP);
    ck_assert_int_gt(nl, 0);
    dllm_rng r = dllm_rng_make(77, 0, 0, 0);
    for (int i = 1; i < nl; i += 2) /* the B matrices */
        for (size_t e = 0; e < LP[i].numel; e++)
            LP[i].data[e] = (float)(0.1 * dllm_rng_normal(&r));
}

static const char *const variants[2] = {"tied", "untied"};

/* ---- against transformers ------------------------------------------------------------------ */

static void check_logits(const char *model_dir, const char *golden_name)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model(model_dir);
    int V = dllm_tf_config(m)->vocab_size;
    size_t n = (size_t)B * T * V;
    float *want = gold_f32(a, golden_name, n), *got = dllm_malloc(n * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, NULL, 0, got), 0);
    double d = 0, big = 0;
    for (int r = 0; r < B * T; r++) {
        if (!b.keymask[r]) /* padding rows are not defined */
            continue;
        double e = tu_max_abs_diff(got + (size_t)r * V, want + (size_t)r * V, (size_t)V);
        d = e > d ? e : d;
        double mx = tu_max_abs(want + (size_t)r * V, (size_t)V);
        big = mx > big ? mx : big;
    }
    ck_assert_msg(d < 1e-4, "%s: logits max abs err %g", golden_name, d);
    ck_assert_msg(big > 1.0, "%s: golden logits are flat", golden_name);
    free(want);
    free(got);
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}

START_TEST(test_logits)
{
    char name[64];
    snprintf(name, sizeof name, "%s.logits", variants[_i]);
    check_logits(variants[_i], name);
}
END_TEST

START_TEST(test_logits_bf16_sharded)
{
    check_logits("untied_bf16", "untied.logits_bf16");
}
END_TEST

START_TEST(test_config_read)
{
    dllm_tf *m = load_model(variants[_i]);
    const dllm_model_config *c = dllm_tf_config(m);
    /* tied/ has transformers 5's rope_parameters; untied/ the published top-level key */
    ck_assert(c->arch == DLLM_ARCH_QWEN3);
    ck_assert_float_eq(c->rope_theta, 1000.0f);
    ck_assert_float_eq(c->rms_norm_eps, 1e-5f);
    ck_assert_int_eq(c->weight_tying, _i == 0);
    ck_assert_int_eq(c->head_dim, 8);
    ck_assert_int_eq(c->n_kv_heads, 2);
    ck_assert_int_eq(c->eos_token_id, 7);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    ck_assert_int_eq(np, 1 + 2 * 11 + 1 + (_i == 0 ? 0 : 1));
    ck_assert_str_eq(P[5].name, "model.layers.0.self_attn.q_norm.weight");
    ck_assert_int_eq((int)P[5].shape[0], 8);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_loss_and_grads)
{
    const char *v = variants[_i];
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model(v);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    double loss = loss_of(m, &b, true);
    char name[160];
    snprintf(name, sizeof name, "%s.loss", v);
    float *want = gold_f32(a, name, 1);
    ck_assert_msg(fabs(loss - want[0]) < 1e-5, "%s: loss %.7f, transformers %.7f", v, loss,
                  want[0]);
    free(want);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    for (int i = 0; i < np; i++) {
        snprintf(name, sizeof name, "%s.grad.%s", v, P[i].name);
        float *g = gold_f32(a, name, P[i].numel);
        double d = tu_max_abs_diff(P[i].grad, g, P[i].numel), mx = tu_max_abs(g, P[i].numel);
        ck_assert_msg(mx > 0, "%s: zero golden gradient", name);
        ck_assert_msg(d <= 1e-3 * mx + 1e-7, "%s: max abs err %g (max |grad| %g)", name, d, mx);
        free(g);
    }
    /* every golden gradient has a model tensor: nothing left out (lm_head when tied) */
    int ngold = 0;
    for (int i = 0; i < st_count(a); i++) {
        snprintf(name, sizeof name, "%s.grad.", v);
        ngold += strncmp(st_at(a, i)->name, name, strlen(name)) == 0;
    }
    ck_assert_int_eq(ngold, np);
    /* gradients accumulate across backward calls */
    float g0 = P[1].grad[3];
    loss_of(m, &b, true);
    ck_assert_float_eq_tol(P[1].grad[3], 2 * g0, 1e-6 + 1e-5 * fabs(g0));
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}
END_TEST

START_TEST(test_seq_logprob)
{
    const char *v = variants[_i];
    st_archive *a = open_golden();
    dllm_tf *m = load_model(v);
    const st_tensor *tp = st_find(a, "lp_prompt"), *tc = st_find(a, "lp_completion");
    ck_assert(tp && tc);
    int P = (int)tp->numel, L = (int)tc->numel;
    int32_t *prompt = gold_i32(a, "lp_prompt", (size_t)P);
    int32_t *comp = gold_i32(a, "lp_completion", (size_t)L);
    float *temp = gold_f32(a, "lp_temperature", 1);
    char name[64];
    snprintf(name, sizeof name, "%s.token_logp", v);
    double *want = gold_f64(a, name, (size_t)L);
    double seq, *tok = dllm_malloc((size_t)L * sizeof(double)), sum = 0;
    dllm_err err = {0};
    ck_assert_int_eq(qwen3_seq_logprob(m, prompt, P, comp, L, temp[0], &seq, tok, &err), 0);
    for (int i = 0; i < L; i++) {
        ck_assert_msg(fabs(tok[i] - want[i]) < 1e-4, "%s token %d: %.7f vs %.7f", v, i, tok[i],
                      want[i]);
        sum += want[i];
    }
    ck_assert_msg(fabs(seq - sum) < 3e-4, "%s: sequence %.7f vs %.7f", v, seq, sum);
    /* a higher temperature flattens: the log-prob of the sequence changes */
    double seq1;
    ck_assert_int_eq(qwen3_seq_logprob(m, prompt, P, comp, L, 1.0, &seq1, NULL, &err), 0);
    ck_assert(fabs(seq1 - seq) > 1e-3);
    ck_assert_int_ne(qwen3_seq_logprob(m, prompt, 0, comp, L, 1.0, &seq1, NULL, &err), 0);
    ck_assert_int_ne(qwen3_seq_logprob(m, prompt, P, comp, L, 0.0, &seq1, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "temperature") != NULL, "%s", err.msg);
    free(prompt);
    free(comp);
    free(temp);
    free(want);
    free(tok);
    dllm_tf_free(m);
    st_close(a);
}
END_TEST

START_TEST(test_greedy_generate)
{
    const char *v = variants[_i];
    st_archive *a = open_golden();
    dllm_tf *m = load_model(v);
    int32_t *prompts = gold_i32(a, "gen_prompts", GB * GP);
    uint8_t *pmask = gold_mask(a, "gen_mask", GB * GP);
    char name[64];
    snprintf(name, sizeof name, "%s.gen_ids", v);
    int32_t *want = gold_i32(a, name, GB * GN);
    dllm_ar_cfg c = {.max_new_tokens = GN, .temperature = 0.0, .top_p = 1.0,
                     .eos_id = dllm_tf_config(m)->eos_token_id};
    dllm_ar_rollout r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pmask, GB, GP, &c, 1, &r, &err), 0);
    for (int b = 0; b < GB; b++) {
        int len = GN;
        for (int g = 0; g < GN; g++) {
            int32_t got = r.tokens[b * (GP + GN) + GP + g];
            ck_assert_msg(got == want[b * GN + g], "%s row %d token %d: %d, generate() %d", v, b,
                          g, got, want[b * GN + g]);
            if (want[b * GN + g] == c.eos_id && len == GN)
                len = g + 1;
        }
        ck_assert_int_eq(r.length[b], len);
        for (int t = 0; t < GP; t++)
            ck_assert_int_eq(r.tokens[b * (GP + GN) + t], prompts[b * GP + t]);
        /* greedy: a point mass; temperature 1 log-probs = the exact estimator's */
        int P = 0;
        int32_t pr[GP];
        for (int t = 0; t < GP; t++)
            if (pmask[b * GP + t])
                pr[P++] = prompts[b * GP + t];
        double tok[GN];
        double seq;
        ck_assert_int_eq(qwen3_seq_logprob(m, pr, P, r.tokens + b * (GP + GN) + GP, len, 1.0,
                                           &seq, tok, &err), 0);
        for (int g = 0; g < GN; g++) {
            ck_assert_float_eq(r.logp[b * GN + g], 0.0f);
            double w = g < len ? tok[g] : 0.0;
            ck_assert_msg(fabs(r.logp_t1[b * GN + g] - w) < 1e-4, "row %d token %d: %g vs %g", b,
                          g, r.logp_t1[b * GN + g], w);
            ck_assert(g >= len || r.logp_t1[b * GN + g] < 0);
        }
    }
    dllm_ar_rollout_free(&r);
    free(prompts);
    free(pmask);
    free(want);
    dllm_tf_free(m);
    st_close(a);
}
END_TEST

START_TEST(test_sampling_distribution)
{
    st_archive *a = open_golden();
    const st_tensor *t = st_find(a, "dist_temp");
    ck_assert_ptr_nonnull(t);
    int K = (int)t->numel, V = 50;
    float *lg = gold_f32(a, "dist_logits", (size_t)K * V);
    float *temp = gold_f32(a, "dist_temp", (size_t)K), *top = gold_f32(a, "dist_top_p", (size_t)K);
    double *want = gold_f64(a, "dist_probs", (size_t)K * V);
    double probs[50];
    int truncated = 0;
    for (int k = 0; k < K; k++) {
        dllm_ar_dist(lg + k * V, V, temp[k], top[k], probs, NULL);
        int kept = 0;
        for (int j = 0; j < V; j++) {
            ck_assert_msg(fabs(probs[j] - want[k * V + j]) < 1e-6,
                          "case %d (T %g, top_p %g) id %d: %g vs transformers %g", k, temp[k],
                          top[k], j, probs[j], want[k * V + j]);
            ck_assert_int_eq(probs[j] == 0.0, want[k * V + j] == 0.0);
            kept += probs[j] > 0;
        }
        truncated += kept < V;
        /* inverse CDF: empirical frequencies follow the distribution */
        int count[50] = {0}, n = 20000;
        dllm_rng r = dllm_rng_make(9, DLLM_RNG_SAMPLER, (uint64_t)k, 0);
        for (int s = 0; s < n; s++) {
            double lp;
            int32_t id = dllm_ar_choose(lg + k * V, V, temp[k], top[k], dllm_rng_uniform(&r), &lp,
                                        NULL, NULL);
            ck_assert(probs[id] > 0);
            ck_assert(fabs(lp - log(probs[id])) < 1e-9);
            count[id]++;
        }
        for (int j = 0; j < V; j++) {
            double sd = sqrt(n * probs[j] * (1 - probs[j]));
            ck_assert_msg(fabs(count[j] - n * probs[j]) <= 5 * sd + 1, "case %d id %d: %d of %d, p %g",
                          k, j, count[j], n, probs[j]);
        }
    }
    ck_assert_int_ge(truncated, 3); /* the top-p cases do cut the tail */
    /* greedy ties go to the lowest id */
    float z[4] = {0.5f, 2.0f, -1.0f, 2.0f};
    double lp, lp1;
    ck_assert_int_eq(dllm_ar_choose(z, 4, 0.0, 1.0, 0.5, &lp, &lp1, NULL), 1);
    ck_assert(lp == 0.0 && lp1 < 0);
    free(lg);
    free(temp);
    free(top);
    free(want);
    st_close(a);
}
END_TEST

/* ---- KV cache ------------------------------------------------------------------------------ */

/* Prefill the golden prompts, then decode the fixed continuation `cont` one
 * step at a time; each step's logits must equal the full forward's at the
 * same row of the concatenated (left-padded) sequence. */
static void check_cache(dllm_tf *m)
{
    st_archive *a = open_golden();
    int32_t *prompts = gold_i32(a, "gen_prompts", GB * GP);
    uint8_t *pmask = gold_mask(a, "gen_mask", GB * GP);
    int V = dllm_tf_config(m)->vocab_size, TT = GP + GN;
    int32_t *seq = dllm_malloc((size_t)GB * TT * sizeof(int32_t));
    uint8_t *km = dllm_malloc((size_t)GB * TT);
    dllm_rng r = dllm_rng_make(3, 0, 0, 0);
    for (int b = 0; b < GB; b++)
        for (int t = 0; t < TT; t++) {
            seq[b * TT + t] = t < GP ? prompts[b * GP + t] : (int32_t)dllm_rng_below(&r, V);
            km[b * TT + t] = t < GP ? pmask[b * GP + t] : 1;
        }
    float *full = dllm_malloc((size_t)GB * TT * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward_nograd(m, seq, km, GB, TT, NULL, 0, full), 0);

    qwen3_kv_cache *c = qwen3_cache_new(m, GB, TT);
    float *lg = dllm_malloc((size_t)GB * V * sizeof(float));
    dllm_err err = {0};
    ck_assert_int_eq(qwen3_prefill(m, c, prompts, pmask, GP, lg, &err), 0);
    double worst = 0;
    for (int step = 0; step <= GN - 1; step++) {
        int t = GP - 1 + step; /* row whose logits lg holds */
        for (int b = 0; b < GB; b++) {
            double d = tu_max_abs_diff(lg + (size_t)b * V, full + ((size_t)b * TT + t) * V, (size_t)V);
            worst = d > worst ? d : worst;
        }
        if (step == GN - 1)
            break;
        int32_t next[GB];
        for (int b = 0; b < GB; b++)
            next[b] = seq[b * TT + GP + step];
        ck_assert_int_eq(qwen3_decode_step(m, c, next, lg, &err), 0);
    }
    ck_assert_int_eq(qwen3_cache_len(c), TT - 1);
    ck_assert_msg(worst < 2e-5, "KV-cache logits differ from the full forward by %g", worst);
    /* the cache is full after one more slot */
    int32_t next[GB] = {1, 2, 3};
    ck_assert_int_eq(qwen3_decode_step(m, c, next, lg, &err), 0);
    ck_assert_int_ne(qwen3_decode_step(m, c, next, lg, &err), 0);
    ck_assert_msg(strstr(err.msg, "do not fit") != NULL, "%s", err.msg);
    qwen3_cache_free(c);
    free(lg);
    free(full);
    free(seq);
    free(km);
    free(prompts);
    free(pmask);
    st_close(a);
}

START_TEST(test_kv_cache)
{
    dllm_tf *m = load_model(variants[_i]);
    check_cache(m);
    enable_lora(m, LORA_ALL);
    check_cache(m);
    dllm_tf_free(m);
}
END_TEST

/* A left-padded row computes the logits of the unpadded sequence. */
START_TEST(test_padding_invariance)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model("untied");
    int V = dllm_tf_config(m)->vocab_size;
    float *pad = dllm_malloc((size_t)B * T * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, NULL, 0, pad), 0);
    for (int r = 0; r < B; r++) {
        int start = 0;
        while (!b.keymask[r * T + start])
            start++;
        ck_assert(r == 0 || start > 0);
        int n = T - start;
        float *one = dllm_malloc((size_t)n * V * sizeof(float));
        ck_assert_int_eq(dllm_tf_forward_nograd(m, b.tokens + r * T + start, NULL, 1, n, NULL, 0,
                                              one), 0);
        double d = tu_max_abs_diff(one, pad + ((size_t)r * T + start) * V, (size_t)n * V);
        ck_assert_msg(d < 1e-5, "row %d: padded vs unpadded logits differ by %g", r, d);
        free(one);
    }
    /* a rows subset gives the same logits as the full head */
    float *sub = dllm_malloc((size_t)b.R * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, b.rows, b.R, sub), 0);
    for (int r = 0; r < b.R; r++)
        ck_assert(tu_max_abs_diff(sub + (size_t)r * V, pad + (size_t)b.rows[r] * V, (size_t)V) < 1e-6);
    free(sub);
    free(pad);
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}
END_TEST

/* ---- the AR sampler ------------------------------------------------------------------------ */

/* Temperature sampling: keyed (same seed, same tokens, independent of the
 * other rows), log-probs consistent with the distribution and the model. */
START_TEST(test_sample_keyed)
{
    st_archive *a = open_golden();
    dllm_tf *m = load_model("untied");
    int32_t *prompts = gold_i32(a, "gen_prompts", GB * GP);
    uint8_t *pmask = gold_mask(a, "gen_mask", GB * GP);
    dllm_ar_cfg c = {.max_new_tokens = GN, .temperature = 0.8, .top_p = 0.9, .eos_id = 7};
    dllm_ar_rollout r1, r2, r3, r4;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pmask, GB, GP, &c, 42, &r1, &err), 0);
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pmask, GB, GP, &c, 42, &r2, &err), 0);
    ck_assert_int_eq(dllm_ar_sample(m, prompts, pmask, GB, GP, &c, 43, &r3, &err), 0);
    size_t n = (size_t)GB * (GP + GN);
    ck_assert(memcmp(r1.tokens, r2.tokens, n * sizeof(int32_t)) == 0);
    ck_assert(memcmp(r1.logp, r2.logp, (size_t)GB * GN * sizeof(float)) == 0);
    ck_assert(memcmp(r1.tokens, r3.tokens, n * sizeof(int32_t)) != 0);
    /* row 0 alone, without left padding: the same tokens */
    ck_assert_int_eq(dllm_ar_sample(m, prompts, NULL, 1, GP, &c, 42, &r4, &err), 0);
    ck_assert(memcmp(r4.tokens, r1.tokens, (GP + GN) * sizeof(int32_t)) == 0);
    dllm_ar_rollout_free(&r4);
    /* the last row alone with its global index (another rank's share): the same */
    dllm_ar_cfg c_last = c;
    c_last.seq_offset = GB - 1;
    ck_assert_int_eq(dllm_ar_sample(m, prompts + (size_t)(GB - 1) * GP, pmask + (size_t)(GB - 1) * GP,
                                    1, GP, &c_last, 42, &r4, &err), 0);
    ck_assert(memcmp(r4.tokens, r1.tokens + (size_t)(GB - 1) * (GP + GN),
                     (GP + GN) * sizeof(int32_t)) == 0);
    dllm_ar_rollout_free(&r4);
    int V = dllm_tf_config(m)->vocab_size;
    double *probs = dllm_malloc((size_t)V * sizeof(double));
    float *lg = dllm_malloc((size_t)V * sizeof(float));
    for (int b = 0; b < GB; b++) {
        int P = 0, L = r1.length[b];
        int32_t seq[GP + GN];
        for (int t = 0; t < GP; t++)
            if (pmask[b * GP + t])
                seq[P++] = prompts[b * GP + t];
        const int32_t *gen = r1.tokens + b * (GP + GN) + GP;
        double t1[GN], tt[GN], s1, st;
        ck_assert_int_eq(qwen3_seq_logprob(m, seq, P, gen, L, 1.0, &s1, t1, &err), 0);
        ck_assert_int_eq(qwen3_seq_logprob(m, seq, P, gen, L, c.temperature, &st, tt, &err), 0);
        for (int g = 0; g < L; g++) {
            ck_assert(fabs(r1.logp_t1[b * GN + g] - t1[g]) < 1e-4);
            /* the sampling log-prob: the nucleus-renormalised tempered probability */
            memcpy(seq + P + g, gen + g, sizeof(int32_t));
            ck_assert_int_eq(dllm_tf_forward_nograd(m, seq, NULL, 1, P + g, (int32_t[]){P + g - 1},
                                                  1, lg), 0);
            dllm_ar_dist(lg, V, c.temperature, c.top_p, probs, NULL);
            ck_assert(probs[gen[g]] > 0);
            ck_assert(fabs(r1.logp[b * GN + g] - log(probs[gen[g]])) < 1e-4);
            ck_assert(r1.logp[b * GN + g] >= tt[g] - 1e-4); /* truncation only raises it */
        }
        for (int g = L; g < GN; g++) {
            ck_assert_int_eq(gen[g], c.eos_id);
            ck_assert(r1.logp[b * GN + g] == 0 && r1.logp_t1[b * GN + g] == 0);
        }
        ck_assert(L == GN || gen[L - 1] == c.eos_id);
    }
    dllm_ar_cfg bad = c;
    bad.top_p = 0;
    ck_assert_int_ne(dllm_ar_sample(m, prompts, pmask, GB, GP, &bad, 1, &r4, &err), 0);
    ck_assert_msg(strstr(err.msg, "top_p") != NULL, "%s", err.msg);
    uint8_t empty[GP] = {0};
    ck_assert_int_ne(dllm_ar_sample(m, prompts, empty, 1, GP, &c, 1, &r4, &err), 0);
    free(probs);
    free(lg);
    dllm_ar_rollout_free(&r1);
    dllm_ar_rollout_free(&r2);
    dllm_ar_rollout_free(&r3);
    free(prompts);
    free(pmask);
    dllm_tf_free(m);
    st_close(a);
}
END_TEST

static Suite *qwen3_suite(void)
{
    Suite *s = suite_create("qwen3");
    TCase *g = tcase_create("transformers");
    tcase_add_loop_test(g, test_logits, 0, 2);
    tcase_add_test(g, test_logits_bf16_sharded);
    tcase_add_loop_test(g, test_config_read, 0, 2);
    tcase_add_loop_test(g, test_loss_and_grads, 0, 2);
    tcase_add_loop_test(g, test_seq_logprob, 0, 2);
    tcase_add_loop_test(g, test_greedy_generate, 0, 2);
    tcase_add_test(g, test_sampling_distribution);
    suite_add_tcase(s, g);
    TCase *c = tcase_create("consistency");
    tcase_add_loop_test(c, test_kv_cache, 0, 2);
    tcase_add_test(c, test_padding_invariance);
    tcase_add_test(c, test_sample_keyed);
    suite_add_tcase(s, c);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return qwen3_suite();
}
