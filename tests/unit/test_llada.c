/* test_llada.c: the LLaDA architecture of the transformer core
 * (dllm/transformer.h, descriptor dllm_arch_llada) and the masked-diffusion SFT
 * loss that `sft` runs (dllm/policy_sft.h) against the independent PyTorch reference
 * tests/ref/llada_ref.py, through the fixtures of tests/ref/make_llada_goldens.py
 * in DLLM_TEST_DATA/llada/: logits (fp32 and a sharded bf16 copy), the SFT
 * loss, every parameter gradient, five AdamW steps, one-step log-probs, LoRA
 * logits and gradients, a grouped-query model. Plus load errors and mask
 * draws. The checks every architecture shares (finite differences of the
 * whole model and of LoRA, also with grouped-query heads; head rows subset;
 * checkpoint round trips; merged-LoRA save; LoRA init; deterministic
 * creation) run over the committed LLaDA models in test_transformer.c. */
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dllm/llada.h"
#include "dllm/policy_infer.h"
#include "dllm/policy_sft.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"

#define LORA_MASK (LORA_Q_PROJ | LORA_V_PROJ | LORA_FF_OUT)

/* ---- fixtures ------------------------------------------------------------------------------ */

static char *data_path(const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "llada/%s", name);
    return tu_data_path(rel);
}

static dllm_tf *load_model(const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "llada/%s", name);
    return tu_load_llada(rel);
}

static st_archive *open_golden(void)
{
    return tu_open_archive("llada/golden.safetensors");
}

/* Golden tensor `name` as fp32 (F32) with numel n. */
static float *gold_f32(const st_archive *a, const char *name, size_t n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t != NULL, "golden tensor '%s' missing", name);
    ck_assert_msg(t->dtype == ST_F32 && (size_t)t->numel == n,
                  "golden tensor '%s': dtype %s numel %lld, expected F32 numel %zu", name,
                  st_dtype_name(t->dtype), (long long)t->numel, n);
    float *out = dllm_malloc(n * sizeof(float) + 1);
    memcpy(out, t->data, n * sizeof(float));
    return out;
}

static int32_t *gold_i32(const st_archive *a, const char *name, size_t n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t != NULL, "golden tensor '%s' missing", name);
    ck_assert_msg(t->dtype == ST_I32 && (size_t)t->numel == n, "golden tensor '%s' malformed",
                  name);
    int32_t *out = dllm_malloc(n * sizeof(int32_t) + 1);
    memcpy(out, t->data, n * sizeof(int32_t));
    return out;
}

/* The golden batch. */
typedef struct {
    int B, T;
    int32_t *tokens, *ans_start, *ans_len;
    uint8_t *keymask, *masked;
    double p[2];
} batch;

static void load_batch(const st_archive *a, batch *b)
{
    b->B = 2;
    b->T = 12;
    size_t N = (size_t)b->B * b->T;
    b->tokens = gold_i32(a, "tokens", N);
    b->ans_start = gold_i32(a, "ans_start", 2);
    b->ans_len = gold_i32(a, "ans_len", 2);
    int32_t *km = gold_i32(a, "keymask", N), *mk = gold_i32(a, "masked", N);
    b->keymask = dllm_malloc(N);
    b->masked = dllm_malloc(N);
    for (size_t i = 0; i < N; i++) {
        b->keymask[i] = (uint8_t)km[i];
        b->masked[i] = (uint8_t)mk[i];
    }
    free(km);
    free(mk);
    float *p = gold_f32(a, "p", 2);
    b->p[0] = p[0];
    b->p[1] = p[1];
    free(p);
}

static void free_batch(batch *b)
{
    free(b->tokens);
    free(b->ans_start);
    free(b->ans_len);
    free(b->keymask);
    free(b->masked);
}

/* The noisy canvas: mask token where masked. */
static int32_t *noisy_tokens(const dllm_tf *m, const batch *b, const uint8_t *masked)
{
    size_t N = (size_t)b->B * b->T;
    int32_t *x = dllm_malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        x[i] = masked[i] ? dllm_tf_config(m)->mask_token_id : b->tokens[i];
    return x;
}

static float *all_logits(dllm_tf *m, const batch *b, const uint8_t *masked)
{
    int N = b->B * b->T, V = dllm_tf_config(m)->embedding_size;
    int32_t *x = noisy_tokens(m, b, masked);
    float *lg = dllm_malloc((size_t)N * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, x, b->keymask, b->B, b->T, NULL, 0, lg), 0);
    free(x);
    return lg;
}

/* A policy on the committed model `name` at the trainer's fp32 numerics; its
 * model (dllm_policy_model) is the one the golden tests inspect. */
static dllm_policy *open_policy(const char *name)
{
    char *dir = data_path(name);
    dllm_policy_cfg pc = {.path = dir};
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_infer_cfg(&pc, "fp32", "precision", &err) == 0, "%s", err.msg);
    dllm_policy *p;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "open %s: %s", dir, err.msg);
    free(dir);
    return p;
}

/* The golden batch's SFT loss through dllm_policy_sft_loss. That loss takes no key
 * mask (`sft` pads answers on the right with EOS, which counts as answer), so each
 * sequence goes alone without its left padding: a padding key with key mask 0 is
 * no key, and LLaDA's RoPE depends only on relative positions, so the sequence
 * scores as it does in the padded batch. The batch loss is the mean of the B
 * losses; each call adds its sequence's full gradient, so what the calls added is
 * divided by B, and gradients already there stay (they accumulate across calls). */
static double loss_of(dllm_policy *pol, const batch *b, bool backward)
{
    size_t n;
    dllm_optim_trainable(dllm_policy_optim(pol), &n);
    float *g = dllm_optim_grads(dllm_policy_optim(pol)), *before = NULL;
    if (backward) {
        before = dllm_malloc(n * sizeof(float));
        memcpy(before, g, n * sizeof(float));
    }
    double sum = 0;
    for (int s = 0; s < b->B; s++) {
        int k = 0; /* first real key */
        while (!b->keymask[s * b->T + k])
            k++;
        /* the policy's form: the answer runs to the end of the sequence */
        ck_assert_int_eq(b->ans_start[s] + b->ans_len[s], b->T);
        const size_t o = (size_t)s * b->T + k;
        const int32_t plen = b->ans_start[s] - k;
        dllm_err err = {0};
        double l;
        ck_assert_msg(dllm_policy_sft_loss(pol, b->tokens + o, b->masked + o, &b->p[s], &plen,
                                           NULL, 1, b->T - k, backward, &l, &err) == 0,
                      "sft loss, sequence %d: %s", s, err.msg);
        ck_assert(isfinite(l));
        sum += l;
    }
    if (backward) {
        for (size_t i = 0; i < n; i++)
            g[i] = before[i] + (g[i] - before[i]) / (float)b->B;
        free(before);
    }
    return sum / b->B;
}

/* ---- against the PyTorch goldens --------------------------------------------------------- */

START_TEST(test_logits_fp32)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model("tiny");
    size_t n = (size_t)b.B * b.T * dllm_tf_config(m)->embedding_size;
    float *want = gold_f32(a, "logits", n), *got = all_logits(m, &b, b.masked);
    double d = tu_max_abs_diff(got, want, n);
    ck_assert_msg(d < 1e-4, "logits: max abs err %g", d);
    ck_assert_msg(tu_max_abs(want, n) > 1.0, "golden logits are flat");
    free(want);
    free(got);
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}
END_TEST

START_TEST(test_logits_bf16_sharded)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model("tiny_bf16");
    ck_assert_str_eq(dllm_tf_config(m)->torch_dtype, "bfloat16");
    size_t n = (size_t)b.B * b.T * dllm_tf_config(m)->embedding_size;
    float *want = gold_f32(a, "logits_bf16", n), *got = all_logits(m, &b, b.masked);
    double d = tu_max_abs_diff(got, want, n);
    ck_assert_msg(d < 1e-4, "bf16 logits: max abs err %g", d);
    /* and the bf16 copy really differs from the fp32 model */
    float *f32 = gold_f32(a, "logits", n);
    ck_assert_msg(tu_max_abs_diff(f32, want, n) > 1e-3, "bf16 golden equals the fp32 one");
    free(f32);
    free(want);
    free(got);
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}
END_TEST

START_TEST(test_loss_and_grads)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_policy *pol = open_policy("tiny");
    dllm_tf *m = dllm_policy_model(pol);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    double loss = loss_of(pol, &b, true);
    float *want = gold_f32(a, "loss", 1);
    ck_assert_msg(fabs(loss - want[0]) < 1e-5 * fabs(want[0]), "loss %.8f, golden %.8f", loss,
                  (double)want[0]);
    free(want);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    ck_assert_int_eq(np, 9 * 2 + 3);
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%s", P[i].name);
        float *g = gold_f32(a, name, P[i].numel);
        double ref = tu_max_abs(g, P[i].numel), d = tu_max_abs_diff(P[i].grad, g, P[i].numel);
        ck_assert_msg(ref > 0, "%s: zero golden gradient", name);
        ck_assert_msg(d <= 1e-3 * ref, "%s: max abs err %g, max |g| %g", name, d, ref);
        free(g);
    }
    /* gradients accumulate across calls */
    float *g1 = dllm_malloc(P[1].numel * sizeof(float));
    memcpy(g1, P[1].grad, P[1].numel * sizeof(float));
    loss_of(pol, &b, true);
    for (size_t e = 0; e < P[1].numel; e++)
        ck_assert_float_eq_tol(P[1].grad[e], 2 * g1[e], 1e-6 + 1e-5 * fabsf(g1[e]));
    free(g1);
    dllm_policy_free(pol);
    free_batch(&b);
    st_close(a);
}
END_TEST

START_TEST(test_adamw_steps)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_policy *pol = open_policy("tiny");
    dllm_tf *m = dllm_policy_model(pol);
    size_t n;
    dllm_optim_trainable(dllm_tf_optim(m), &n);
    const dllm_param *P0;
    dllm_tf_params(m, &P0); /* the host's trainable vector, stepped in place below */
    float *params = P0[0].data, *grads = dllm_optim_grads(dllm_tf_optim(m));
    float *mm = dllm_calloc(n, sizeof(float)), *vv = dllm_calloc(n, sizeof(float));
    float *want_loss = gold_f32(a, "adamw_loss", 5);
    for (int step = 1; step <= 5; step++) {
        dllm_optim_zero_grad(dllm_tf_optim(m));
        double loss = loss_of(pol, &b, true);
        ck_assert_msg(fabs(loss - want_loss[step - 1]) < 1e-5,
                      "step %d: loss %.7f, golden %.7f", step, loss, (double)want_loss[step - 1]);
        double norm = op_grad_norm(grads, n);
        op_clip_grad(grads, n, norm, 1.0);
        op_adamw(params, grads, mm, vv, n, step, 1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f);
    }
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "adamw.%s", P[i].name);
        float *w = gold_f32(a, name, P[i].numel);
        double d = tu_max_abs_diff(P[i].data, w, P[i].numel);
        ck_assert_msg(d < 2e-5, "%s: max abs err %g after 5 steps", name, d);
        free(w);
    }
    free(want_loss);
    free(mm);
    free(vv);
    dllm_policy_free(pol);
    free_batch(&b);
    st_close(a);
}
END_TEST

START_TEST(test_one_step_score)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_tf *m = load_model("tiny");
    int N = b.B * b.T, V = dllm_tf_config(m)->embedding_size;
    uint8_t *full = dllm_calloc((size_t)N, 1);
    int32_t *rows = dllm_malloc((size_t)N * sizeof(int32_t)), *tgt = dllm_malloc((size_t)N * 4);
    int R = 0;
    for (int s = 0; s < b.B; s++)
        for (int t = b.ans_start[s]; t < b.ans_start[s] + b.ans_len[s]; t++) {
            full[s * b.T + t] = 1;
            rows[R] = s * b.T + t;
            tgt[R++] = b.tokens[s * b.T + t];
        }
    int32_t *x = noisy_tokens(m, &b, full);
    float *lg = dllm_malloc((size_t)R * V * sizeof(float)), *lp = dllm_malloc((size_t)R * 4);
    ck_assert_int_eq(dllm_tf_forward(m, x, b.keymask, b.B, b.T, rows, R, lg), 0);
    op_xent_fwd(lp, NULL, lg, tgt, R, V);
    float *want = gold_f32(a, "score_logp", (size_t)N);
    for (int r = 0; r < R; r++)
        ck_assert_msg(fabs(lp[r] - want[rows[r]]) < 1e-4, "row %d: logp %g, golden %g", rows[r],
                      (double)lp[r], (double)want[rows[r]]);
    free(want);
    free(lg);
    free(lp);
    free(x);
    free(full);
    free(rows);
    free(tgt);
    dllm_tf_free(m);
    free_batch(&b);
    st_close(a);
}
END_TEST

static void enable_golden_lora(dllm_tf *m)
{
    dllm_tf_lora_enable(m, 4, 8.0f, LORA_MASK, 7);
    char *path = data_path("lora_adapter.safetensors");
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_lora_load(m, path, &err) == 0, "%s", err.msg);
    free(path);
}

START_TEST(test_lora_golden)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_policy *pol = open_policy("tiny");
    dllm_tf *m = dllm_policy_model(pol);
    enable_golden_lora(m);
    const dllm_param *LP;
    int nl = dllm_tf_lora_params(m, &LP);
    ck_assert_int_eq(nl, 2 * 3 * 2); /* A and B, 3 targets, 2 layers */
    size_t n, tot = 0;
    for (int i = 0; i < nl; i++)
        tot += LP[i].numel;
    ck_assert_ptr_eq(dllm_optim_trainable(dllm_tf_optim(m), &n), LP[0].data);
    ck_assert_uint_eq(n, tot);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    for (int i = 0; i < np; i++)
        ck_assert_msg(P[i].grad == NULL, "%s not frozen under LoRA", P[i].name);

    size_t nlog = (size_t)b.B * b.T * dllm_tf_config(m)->embedding_size;
    float *want = gold_f32(a, "lora_logits", nlog), *got = all_logits(m, &b, b.masked);
    double d = tu_max_abs_diff(got, want, nlog);
    ck_assert_msg(d < 1e-4, "LoRA logits: max abs err %g", d);
    float *base = gold_f32(a, "logits", nlog);
    ck_assert_msg(tu_max_abs_diff(base, want, nlog) > 1e-2, "LoRA golden equals the base");
    free(base);
    free(want);
    free(got);

    dllm_optim_zero_grad(dllm_tf_optim(m));
    double loss = loss_of(pol, &b, true);
    float *wl = gold_f32(a, "lora_loss", 1);
    ck_assert_msg(fabs(loss - wl[0]) < 1e-5 * wl[0], "LoRA loss %.8f, golden %.8f", loss,
                  (double)wl[0]);
    free(wl);
    for (int i = 0; i < nl; i++) {
        char name[200];
        snprintf(name, sizeof name, "lora_grad.%s", LP[i].name);
        float *g = gold_f32(a, name, LP[i].numel);
        double ref = tu_max_abs(g, LP[i].numel), e = tu_max_abs_diff(LP[i].grad, g, LP[i].numel);
        ck_assert_msg(ref > 0 && e <= 1e-3 * ref, "%s: max abs err %g, max |g| %g", name, e,
                      ref);
        free(g);
    }
    dllm_policy_free(pol);
    free_batch(&b);
    st_close(a);
}
END_TEST

/* Grouped-query attention (n_kv_heads 2 < n_heads 4): logits, loss and the
 * block-0 attention gradients against the reference. */
START_TEST(test_gqa_golden)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_policy *pol = open_policy("tiny_gqa");
    dllm_tf *m = dllm_policy_model(pol);
    ck_assert_int_eq(dllm_tf_config(m)->n_kv_heads, 2);
    size_t n = (size_t)b.B * b.T * dllm_tf_config(m)->embedding_size;
    float *want = gold_f32(a, "gqa_logits", n), *got = all_logits(m, &b, b.masked);
    double d = tu_max_abs_diff(got, want, n);
    ck_assert_msg(d < 1e-4, "GQA logits: max abs err %g", d);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    double loss = loss_of(pol, &b, true);
    float *wl = gold_f32(a, "gqa_loss", 1);
    ck_assert_msg(fabs(loss - wl[0]) < 1e-5 * wl[0], "GQA loss %.8f, golden %.8f", loss,
                  (double)wl[0]);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P), seen = 0;
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "gqa_grad.%s", P[i].name);
        if (!st_find(a, name))
            continue;
        seen++;
        float *g = gold_f32(a, name, P[i].numel);
        double ref = tu_max_abs(g, P[i].numel), e = tu_max_abs_diff(P[i].grad, g, P[i].numel);
        ck_assert_msg(ref > 0 && e <= 1e-3 * ref, "%s: max abs err %g, max |g| %g", name, e, ref);
        free(g);
    }
    ck_assert_int_eq(seen, 4);
    free(wl);
    free(want);
    free(got);
    dllm_policy_free(pol);
    free_batch(&b);
    st_close(a);
}
END_TEST

/* ---- self-consistency ------------------------------------------------------------------- */

/* Copies the tiny model into dir with one tensor dropped or reshaped. */
static void write_broken(const char *dir, const char *victim, bool reshape)
{
    dllm_tf *m = load_model("tiny");
    dllm_err err = {0};
    ck_assert_msg(dllm_config_save(dllm_tf_config(m), dir, &err) == 0, "%s", err.msg);
    st_writer *w = st_writer_new();
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    for (int i = 0; i < np; i++) {
        int64_t shape[2] = {P[i].shape[0], P[i].shape[1]};
        if (strcmp(P[i].name, victim) == 0) {
            if (!reshape)
                continue;
            shape[0] -= 1; /* fewer rows: same data, wrong shape */
        }
        ck_assert_msg(st_writer_add_f32(w, P[i].name, ST_F32, P[i].ndim, shape, P[i].data,
                                        &err) == 0, "%s", err.msg);
    }
    ck_assert_msg(st_writer_save_dir(w, dir, 0, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    dllm_tf_free(m);
}

START_TEST(test_load_errors)
{
    char *tmp = tu_make_tmpdir();
    char dir[600];
    dllm_err err = {0};
    dllm_tf *m = NULL;
    const char *victim = "model.transformer.blocks.1.up_proj.weight";

    snprintf(dir, sizeof dir, "%s/missing", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    write_broken(dir, victim, false);
    ck_assert_int_eq(dllm_tf_load(&m, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, victim) && strstr(err.msg, dir), "message: %s", err.msg);

    snprintf(dir, sizeof dir, "%s/shape", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    write_broken(dir, victim, true);
    ck_assert_int_eq(dllm_tf_load(&m, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, victim) && strstr(err.msg, "[47, 32]"), "message: %s",
                  err.msg);

    snprintf(dir, sizeof dir, "%s/empty", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(dllm_tf_load(&m, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "config.json") != NULL, "message: %s", err.msg);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_sft_masks)
{
    enum { P = 100, T = 3100, SLACK = 64 }; /* answer [100, 3100): 3000 positions */
    uint8_t *m1 = dllm_malloc(T + SLACK), *m2 = dllm_malloc(T + SLACK);
    double p1, p2, psum = 0;
    for (int s = 0; s < 50; s++) {
        dllm_rng r1 = dllm_rng_make(9, 1, DLLM_RNG_SFT, (uint64_t)s);
        dllm_rng r2 = dllm_rng_make(9, 1, DLLM_RNG_SFT, (uint64_t)s);
        memset(m1, 0xAA, T + SLACK);
        sft_draw_mask(&r1, P, T, m1, &p1);
        sft_draw_mask(&r2, P, T, m2, &p2);
        ck_assert(p1 == p2 && memcmp(m1, m2, T) == 0); /* same stream, same draw */
        ck_assert(p1 >= 1e-3 && p1 <= 1.0);
        int cnt = 0;
        for (int t = 0; t < T; t++) {
            if (t < P)
                ck_assert_int_eq(m1[t], 0);
            ck_assert_int_le(m1[t], 1);
            cnt += m1[t];
        }
        for (int t = T; t < T + SLACK; t++) /* nothing written past the sequence */
            ck_assert_int_eq(m1[t], 0xAA);
        /* binomial(3000, p): 5 standard deviations */
        double sd = sqrt((T - P) * p1 * (1 - p1));
        ck_assert_msg(fabs(cnt - (T - P) * p1) <= 5 * sd + 1, "%d masked, p = %g", cnt, p1);
        psum += p1;
    }
    ck_assert_msg(fabs(psum / 50 - 0.5) < 0.15, "mean p %g", psum / 50);
    /* the stream's order: p from the first uniform, then one per answer position */
    dllm_rng r = dllm_rng_make(9, 1, DLLM_RNG_SFT, 3);
    sft_draw_mask(&r, P, T, m1, &p1);
    r = dllm_rng_make(9, 1, DLLM_RNG_SFT, 3);
    ck_assert(p1 == (1.0 - 1e-3) * dllm_rng_uniform(&r) + 1e-3);
    for (int t = P; t < T; t++)
        ck_assert_int_eq(m1[t], dllm_rng_uniform(&r) < p1);
    free(m1);
    free(m2);
}
END_TEST

/* The policy's batch loss is the mean of its sequences' losses (each weighted by its
 * own p and answer length), and bad masks are input errors with a NaN loss. Here
 * sequence 1's left padding is part of its prompt (no key mask). */
START_TEST(test_sft_loss_batch)
{
    st_archive *a = open_golden();
    batch b;
    load_batch(a, &b);
    dllm_policy *pol = open_policy("tiny");
    dllm_err err = {0};
    double lb, ls[2];
    ck_assert_msg(dllm_policy_sft_loss(pol, b.tokens, b.masked, b.p, b.ans_start, NULL, b.B, b.T,
                                       false, &lb, &err) == 0, "%s", err.msg);
    for (int s = 0; s < b.B; s++) {
        const size_t o = (size_t)s * b.T;
        ck_assert_msg(dllm_policy_sft_loss(pol, b.tokens + o, b.masked + o, &b.p[s],
                                           &b.ans_start[s], NULL, 1, b.T, false, &ls[s],
                                           &err) == 0, "%s", err.msg);
    }
    ck_assert(isfinite(lb) && ls[0] != ls[1]);
    ck_assert_msg(fabs(lb - (ls[0] + ls[1]) / 2) <= 1e-6 * fabs(lb),
                  "batch %.9g, sequences %.9g %.9g", lb, ls[0], ls[1]);
    /* a mask in the prompt is refused */
    uint8_t *bad = dllm_malloc((size_t)b.B * b.T);
    memcpy(bad, b.masked, (size_t)b.B * b.T);
    bad[b.ans_start[0] - 1] = 1; /* the last prompt position */
    ck_assert_int_eq(dllm_policy_sft_loss(pol, b.tokens, bad, b.p, b.ans_start, NULL, b.B, b.T,
                                          false, &lb, &err), DLLM_EXIT_INPUT);
    ck_assert(isnan(lb));
    ck_assert_msg(strstr(err.msg, "in the prompt") != NULL, "message: %s", err.msg);
    /* so is a mask probability outside (0, 1] */
    double p0[2] = {0.0, b.p[1]};
    ck_assert_int_eq(dllm_policy_sft_loss(pol, b.tokens, b.masked, p0, b.ans_start, NULL, b.B, b.T,
                                          false, &lb, &err), DLLM_EXIT_INPUT);
    ck_assert(isnan(lb));
    ck_assert_msg(strstr(err.msg, "mask probability") != NULL, "message: %s", err.msg);
    free(bad);
    dllm_policy_free(pol);
    free_batch(&b);
    st_close(a);
}
END_TEST

static Suite *llada_suite(void)
{
    Suite *s = suite_create("llada");
    TCase *g = tcase_create("golden");
    tcase_add_test(g, test_logits_fp32);
    tcase_add_test(g, test_logits_bf16_sharded);
    tcase_add_test(g, test_loss_and_grads);
    tcase_add_test(g, test_adamw_steps);
    tcase_add_test(g, test_one_step_score);
    tcase_add_test(g, test_lora_golden);
    tcase_add_test(g, test_gqa_golden);
    suite_add_tcase(s, g);
    TCase *c = tcase_create("consistency");
    tcase_add_test(c, test_load_errors);
    tcase_add_test(c, test_sft_masks);
    tcase_add_test(c, test_sft_loss_batch);
    suite_add_tcase(s, c);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return llada_suite();
}
