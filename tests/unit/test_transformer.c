/* test_transformer.c: the transformer core (dllm/transformer.h) over every
 * architecture it is given, table-driven: the committed LLaDA models (MHA and
 * GQA), the committed Qwen3 models (tied and untied head), and a Dream-style
 * descriptor built here (bidirectional, q/k/v biases, shifted logits,
 * real-token RoPE positions; tied and untied), which no shipped model uses
 * yet. Per architecture: finite differences of every tensor and of every
 * LoRA matrix, logits rows subset == full head, nograd and rollout "trainer"
 * == train forward bit for bit, bad input refused, checkpoint round trips
 * (f32, bf16 sharded), merged LoRA save == LoRA forward, LoRA gradients ==
 * the chain rule through the merged weight, adapter round trips, LoRA
 * initialisation, deterministic creation. Then what only the Dream-style
 * paths have: shifted logits == the unshifted model's one position earlier,
 * zero biases == no biases, left-padding invariance of a bidirectional model
 * with real-token positions, and the precision copies with biases.
 * The comparisons against the published-model goldens are in test_llada.c and
 * test_qwen3.c. */
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dllm/transformer.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"

/* ---- the architectures --------------------------------------------------------------------- */


typedef struct {
    const char *name;
    const char *dir;              /* committed model (DLLM_TEST_DATA), or NULL: built */
    const dllm_arch_desc *build;  /* the descriptor of a built model */
    bool tied;                    /* built: weight_tying */
    const char *lora0, *lora9;    /* PEFT names of LoRA parameters 0 and 9 (all targets) */
    const char *head;             /* the head tensor's name (absent when tied) */
} arch_case;

static const arch_case cases[] = {
    {"llada", "llada/tiny", NULL, false,
     "base_model.model.model.transformer.blocks.0.q_proj.lora_A.weight",
     "base_model.model.model.transformer.blocks.0.ff_proj.lora_B.weight",
     "model.transformer.ff_out.weight"},
    {"llada-gqa", "llada/tiny_gqa", NULL, false,
     "base_model.model.model.transformer.blocks.0.q_proj.lora_A.weight",
     "base_model.model.model.transformer.blocks.0.ff_proj.lora_B.weight",
     "model.transformer.ff_out.weight"},
    {"qwen3-tied", "qwen3/tied", NULL, true,
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
     "base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", "lm_head.weight"},
    {"qwen3-untied", "qwen3/untied", NULL, false,
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
     "base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", "lm_head.weight"},
    {"dream-tied", NULL, &dllm_arch_dream, true,
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
     "base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", "lm_head.weight"},
    {"dream-untied", NULL, &dllm_arch_dream, false,
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
     "base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", "lm_head.weight"},
};
enum { NCASE = sizeof cases / sizeof cases[0] };

/* The sizes of the committed Qwen3 models, for the built ones. */
static dllm_model_config small_config(bool tied)
{
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_QWEN3, "tiny", &err), 0);
    c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8;
    c.mlp_hidden = 48, c.vocab_size = c.embedding_size = 50, c.max_seq_len = 64;
    c.weight_tying = tied;
    return c;
}

/* Built models: matrices scaled up so attention is far from uniform, biases
 * and norms away from their initial 0 and 1 (so every path carries signal). */
static dllm_tf *build_model(const dllm_arch_desc *a, bool tied, uint64_t seed)
{
    dllm_model_config c = small_config(tied);
    dllm_tf *m = dllm_tf_create_arch(a, &c, seed);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    dllm_rng r = dllm_rng_make(seed, 0, 1, 0);
    for (int i = 0; i < np; i++)
        for (size_t e = 0; e < P[i].numel; e++)
            P[i].data[e] = P[i].ndim == 2 ? 5.0f * P[i].data[e]
                                          : P[i].data[e] + (float)(0.2 * dllm_rng_normal(&r));
    return m;
}

static dllm_tf *open_case(const arch_case *k)
{
    if (!k->dir)
        return build_model(k->build, k->tied, 3);
    char *dir = tu_data_path(k->dir);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "load %s: %s", dir, err.msg);
    free(dir);
    return m;
}

/* ---- a batch and a loss any architecture takes ---------------------------------------------- */

enum { B = 3, T = 9 };

/* Tokens with padding where the architecture expects it (left for real-token
 * positions, right for canvas positions), and next-position-style targets on
 * a subset of the real rows. */
typedef struct {
    int32_t tokens[B * T], rows[B * T], targets[B * T];
    uint8_t keymask[B * T];
    int R;
} batch;

static void make_batch(const dllm_tf *m, batch *b)
{
    const dllm_model_config *c = dllm_tf_config(m);
    bool left = dllm_tf_arch(m)->rope_pos == DLLM_ROPE_REAL_COUNT;
    dllm_rng r = dllm_rng_make(9, 0, 0, 0);
    b->R = 0;
    for (int i = 0; i < B; i++) {
        int pad = i; /* row 0 unpadded */
        for (int t = 0; t < T; t++) {
            int n = i * T + t;
            bool real = left ? t >= pad : t < T - pad;
            b->keymask[n] = real;
            b->tokens[n] = (int32_t)dllm_rng_below(&r, (uint64_t)c->vocab_size);
            if (real && (t + i) % 2 == 0) {
                b->rows[b->R] = n;
                b->targets[b->R++] = (int32_t)dllm_rng_below(&r, (uint64_t)c->vocab_size);
            }
        }
    }
}

/* Mean cross-entropy of the targets at the batch rows (log-softmax in double,
 * so finite differences see little rounding); with backward, its gradient is
 * accumulated into the model. */
static double loss_of(dllm_tf *m, const batch *b, bool backward)
{
    return tu_rows_xent(m, b->tokens, b->keymask, B, T, b->rows, b->targets, b->R, backward);
}

static float *all_logits(dllm_tf *m, const batch *b)
{
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *lg = dllm_malloc(n * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward_nograd(m, b->tokens, b->keymask, B, T, NULL, 0, lg), 0);
    return lg;
}

/* Loads a checkpoint written from a case's model (built ones keep their descriptor). */
static int reload(const dllm_tf *like, const char *dir, dllm_tf **out, dllm_err *err)
{
    return dllm_tf_load_arch(out, dllm_tf_arch(like), dir, err);
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

/* ---- finite differences -------------------------------------------------------------------- */

/* Central differences on a few elements of every tensor in list (the largest
 * gradient and two random ones), against the analytic gradient. */
static void fd_check(dllm_tf *m, const batch *b, const dllm_param *list, int n, double h,
                     double tol)
{
    dllm_optim_zero_grad(dllm_tf_optim(m));
    loss_of(m, b, true);
    dllm_rng r = dllm_rng_make(11, 0, 0, 0);
    for (int i = 0; i < n; i++) {
        const dllm_param *p = &list[i];
        size_t big = 0;
        for (size_t e = 0; e < p->numel; e++)
            if (fabsf(p->grad[e]) > fabsf(p->grad[big]))
                big = e;
        size_t pick[3] = {big, (size_t)dllm_rng_below(&r, p->numel),
                          (size_t)dllm_rng_below(&r, p->numel)};
        for (int k = 0; k < 3; k++) {
            size_t e = pick[k];
            float w0 = p->data[e];
            p->data[e] = w0 + (float)h;
            double lp = loss_of(m, b, false);
            p->data[e] = w0 - (float)h;
            double lm = loss_of(m, b, false);
            p->data[e] = w0;
            double hh = ((double)(w0 + (float)h) - (double)(w0 - (float)h)) / 2;
            double fd = (lp - lm) / (2 * hh), an = p->grad[e];
            ck_assert_msg(fabs(fd - an) <= tol + 2e-2 * fabs(an),
                          "%s[%zu]: finite difference %.6g, backward %.6g", p->name, e, fd, an);
        }
        ck_assert_msg(p->grad[big] != 0.0f, "%s: zero gradient everywhere", p->name);
    }
}

START_TEST(test_fd_model)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    fd_check(m, &b, P, np, 2e-3, 2e-4);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_fd_lora)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    enable_lora(m, LORA_ALL);
    const dllm_param *LP;
    int nl = dllm_tf_lora_params(m, &LP);
    ck_assert_int_eq(nl, 2 * DLLM_NLIN * dllm_tf_config(m)->n_layers);
    fd_check(m, &b, LP, nl, 2e-3, 2e-4);
    dllm_tf_free(m);
}
END_TEST

/* ---- forward variants ----------------------------------------------------------------------- */

START_TEST(test_rows_and_variants)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    int V = dllm_tf_config(m)->embedding_size;
    size_t n = (size_t)B * T * V;
    float *full = dllm_malloc(n * sizeof(float)), *other = dllm_malloc(n * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, NULL, 0, full), 0);
    /* a rows subset (any order, repeats allowed) gives the full head's rows */
    int32_t rows[] = {T * B - 1, 0, 5, T + 3, 12, 11, 5};
    int R = 7;
    float *sub = dllm_malloc((size_t)R * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, rows, R, sub), 0);
    for (int r = 0; r < R; r++) {
        double d = tu_max_abs_diff(sub + (size_t)r * V, full + (size_t)rows[r] * V, (size_t)V);
        ck_assert_msg(d < 1e-6, "row %d: subset differs from full by %g", rows[r], d);
    }
    /* nograd and rollout "trainer" are the train forward, bit for bit */
    ck_assert_int_eq(dllm_tf_forward_nograd(m, b.tokens, b.keymask, B, T, NULL, 0, other), 0);
    ck_assert(memcmp(other, full, n * sizeof(float)) == 0);
    ck_assert_int_eq(dllm_tf_forward_rollout(m, b.tokens, b.keymask, B, T, NULL, 0, other), 0);
    ck_assert(memcmp(other, full, n * sizeof(float)) == 0);
    /* bad input is refused */
    int32_t bad_row = B * T;
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, &bad_row, 1, sub),
                     DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, 0, T, NULL, 0, sub),
                     DLLM_EXIT_INPUT);
    b.tokens[3] = V;
    ck_assert_int_eq(dllm_tf_forward(m, b.tokens, b.keymask, B, T, NULL, 0, full),
                     DLLM_EXIT_INPUT);
    free(sub);
    free(other);
    free(full);
    dllm_tf_free(m);
}
END_TEST

/* A rollout forward that reads a subset of rows runs its last layer past the attention over
 * those rows alone: each row's logits are the whole forward's, bit for bit, for every
 * quantised or packed rollout copy, with LoRA on too, and at fp32 up to the last bits (as
 * the trainer's forwards, which keep the whole layer). */
START_TEST(test_head_rows_exact)
{
    /* rollout copies, with the FP8 scalings (tensor: one activation scale per call) */
    static const char *const formats[][2] = {{"trainer", NULL}, {"bf16", NULL},
                                             {"fp8", "block"},  {"fp8", "channel"},
                                             {"fp8", "tensor"}, {"fp8-exact", "block"},
                                             {"int8", NULL},    {"nvfp4", NULL}};
    enum { NF = sizeof formats / sizeof formats[0] };
    const arch_case *k = &cases[_i / 2];
    dllm_tf *m = open_case(k);
    if (_i % 2)
        enable_lora(m, LORA_ALL);
    batch b;
    make_batch(m, &b);
    int V = dllm_tf_config(m)->embedding_size;
    size_t n = (size_t)B * T * V;
    int32_t rows[] = {T * B - 1, 0, 5, T + 3, 12, 11, 5};
    int R = 7;
    float *full = dllm_malloc(n * sizeof(float)), *sub = dllm_malloc((size_t)R * V * sizeof(float));
    dllm_err err = {0};
    for (int f = 0; f < NF; f++) {
        dllm_precision p;
        ck_assert_int_eq(dllm_precision_parse(&p, "fp32", formats[f][0], NULL, formats[f][1],
                                              false, &err), 0);
        ck_assert_msg(dllm_tf_rollout_sync(m, &p, NULL, &err) == 0, "%s", err.msg);
        for (int roll = 0; roll < 2; roll++) {
            int (*fwd)(dllm_tf *, const int32_t *, const uint8_t *, int, int, const int32_t *,
                       int, float *) = roll ? dllm_tf_forward_rollout : dllm_tf_forward_nograd;
            ck_assert_int_eq(fwd(m, b.tokens, b.keymask, B, T, NULL, 0, full), 0);
            ck_assert_int_eq(fwd(m, b.tokens, b.keymask, B, T, rows, 0, sub), 0); /* none */
            ck_assert_int_eq(fwd(m, b.tokens, b.keymask, B, T, rows, R, sub), 0);
            /* a quantised or packed copy's products are row by row; fp32 GEMMs (the
             * trainer's, the exact FP8 simulation's) pick kernels by the row count
             * (kernels/cpu/gemm.c): the last bits */
            bool fp32 = !roll || !strcmp(formats[f][0], "trainer") ||
                        !strcmp(formats[f][0], "fp8-exact");
            double tol = fp32 ? 1e-5 : 0;
            for (int r = 0; r < R; r++) {
                double d = tu_max_abs_diff(sub + (size_t)r * V, full + (size_t)rows[r] * V,
                                           (size_t)V);
                ck_assert_msg(d <= tol, "%s%s, %s %s %s: row %d differs from the whole "
                              "forward's by %g", k->name, _i % 2 ? " + LoRA" : "",
                              formats[f][0], formats[f][1] ? formats[f][1] : "",
                              roll ? "rollout" : "nograd", rows[r], d);
            }
        }
    }
    free(sub);
    free(full);
    dllm_tf_free(m);
}
END_TEST

/* ---- checkpoints ------------------------------------------------------------------------------ */

static void assert_same_params(dllm_tf *x, dllm_tf *y, bool bf16_of_x)
{
    const dllm_param *P, *Q;
    int np = dllm_tf_params(x, &P), nq = dllm_tf_params(y, &Q);
    ck_assert_int_eq(np, nq);
    for (int i = 0; i < np; i++) {
        ck_assert_str_eq(P[i].name, Q[i].name);
        ck_assert_uint_eq(P[i].numel, Q[i].numel);
        for (size_t e = 0; e < P[i].numel; e++) {
            float want = bf16_of_x ? op_bf16_to_f32(op_f32_to_bf16(P[i].data[e])) : P[i].data[e];
            ck_assert_msg(memcmp(&want, &Q[i].data[e], sizeof(float)) == 0,
                          "%s[%zu]: %.9g vs %.9g", P[i].name, e, (double)want,
                          (double)Q[i].data[e]);
        }
    }
}

START_TEST(test_save_load_roundtrip)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    char *tmp = tu_make_tmpdir();
    char dir[600];
    dllm_err err = {0};

    snprintf(dir, sizeof dir, "%s/f32", tmp);
    ck_assert_msg(dllm_tf_save(m, dir, ST_F32, 0, &err) == 0, "%s", err.msg);
    dllm_tf *m2 = NULL;
    ck_assert_msg(reload(m, dir, &m2, &err) == 0, "%s", err.msg);
    assert_same_params(m, m2, false);
    ck_assert_int_eq(dllm_tf_config(m2)->weight_tying, dllm_tf_config(m)->weight_tying);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *l1 = all_logits(m, &b), *l2 = all_logits(m2, &b);
    ck_assert(memcmp(l1, l2, n * sizeof(float)) == 0);
    dllm_tf_free(m2);
    /* one tensor per parameter; no head tensor when tied */
    const dllm_param *P;
    int np = dllm_tf_params(m, &P);
    st_archive *ar;
    ck_assert_int_eq(st_open(&ar, dir, &err), 0);
    ck_assert_int_eq(st_count(ar), np);
    ck_assert_int_eq(st_find(ar, k->head) != NULL, !dllm_tf_config(m)->weight_tying);
    st_close(ar);

    /* bf16, sharded: a shard limit below the model size forces an index */
    snprintf(dir, sizeof dir, "%s/bf16", tmp);
    ck_assert_msg(dllm_tf_save(m, dir, ST_BF16, 16 << 10, &err) == 0, "%s", err.msg);
    char idx[700];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    ck_assert_msg(access(idx, F_OK) == 0, "no shard index written");
    ck_assert_msg(reload(m, dir, &m2, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(dllm_tf_config(m2)->torch_dtype, "bfloat16");
    assert_same_params(m, m2, true);
    dllm_tf_free(m2);

    ck_assert_int_ne(dllm_tf_load(&m2, tmp, &err), 0); /* no config.json there */
    ck_assert_msg(strstr(err.msg, tmp) != NULL, "%s", err.msg);
    free(l1);
    free(l2);
    tu_rm_rf(tmp);
    free(tmp);
    dllm_tf_free(m);
}
END_TEST

/* ---- LoRA ------------------------------------------------------------------------------------- */

/* LoRA forward == forward of the merged checkpoint; LoRA gradients == the
 * chain rule through W' = W + s B A: dB = s dW' A^T, dA = s B^T dW'; base
 * frozen; adapter file round trip, and refusal of another target set. */
START_TEST(test_lora_merged)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    enable_lora(m, LORA_ALL);
    float alpha;
    int gotmask;
    ck_assert_int_eq(dllm_tf_lora_info(m, &alpha, &gotmask), 4);
    ck_assert(alpha == 8.0f && gotmask == LORA_ALL);
    size_t nt;
    const float *tr = dllm_optim_trainable(dllm_tf_optim(m), &nt);
    const dllm_param *LP;
    int nl = dllm_tf_lora_params(m, &LP);
    ck_assert_ptr_eq(tr, LP[0].data);
    ck_assert_str_eq(LP[0].name, k->lora0);
    ck_assert_str_eq(LP[9].name, k->lora9);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    double l_lora = loss_of(m, &b, true);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *want = all_logits(m, &b);

    char *tmp = tu_make_tmpdir();
    char dir[600], adapter[600];
    dllm_err err = {0};
    snprintf(dir, sizeof dir, "%s/merged", tmp);
    ck_assert_msg(dllm_tf_save(m, dir, ST_F32, 0, &err) == 0, "%s", err.msg);
    dllm_tf *mm = NULL;
    ck_assert_msg(reload(m, dir, &mm, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dllm_tf_lora_info(mm, NULL, NULL), 0);
    float *got = all_logits(mm, &b);
    double d = tu_max_abs_diff(got, want, n);
    ck_assert_msg(d < 1e-5 * (1 + tu_max_abs(want, n)), "merged checkpoint vs LoRA forward: %g", d);
    free(got);
    dllm_optim_zero_grad(dllm_tf_optim(mm));
    double l_m = loss_of(mm, &b, true);
    ck_assert_msg(fabs(l_m - l_lora) < 1e-5 * (1 + fabs(l_lora)), "loss %g vs %g", l_m, l_lora);

    /* chain rule, per adapter */
    const dllm_param *P;
    int np = dllm_tf_params(mm, &P);
    float s = alpha / 4.0f;
    for (int i = 0; i < nl; i += 2) {
        const dllm_param *A = &LP[i], *Bm = &LP[i + 1];
        char base[96];
        snprintf(base, sizeof base, "%s", A->name + strlen("base_model.model."));
        *strstr(base, ".lora_A") = '\0';
        strcat(base, ".weight");
        const dllm_param *W = NULL;
        for (int j = 0; j < np; j++)
            if (!strcmp(P[j].name, base))
                W = &P[j];
        ck_assert_msg(W != NULL, "no base weight %s", base);
        int r = (int)A->shape[0], in = (int)A->shape[1], out = (int)Bm->shape[0];
        float *dB = dllm_calloc((size_t)out * r, sizeof(float));
        float *dA = dllm_calloc((size_t)r * in, sizeof(float));
        op_gemm(false, true, out, r, in, s, W->grad, A->data, 0.0f, dB);
        op_gemm(true, false, r, in, out, s, Bm->data, W->grad, 0.0f, dA);
        double eb = tu_max_abs_diff(dB, Bm->grad, Bm->numel), mb = tu_max_abs(dB, Bm->numel);
        double ea = tu_max_abs_diff(dA, A->grad, A->numel), ma = tu_max_abs(dA, A->numel);
        ck_assert_msg(eb <= 1e-4 * mb + 1e-8 && mb > 0, "%s: %g (max %g)", Bm->name, eb, mb);
        ck_assert_msg(ea <= 1e-4 * ma + 1e-8 && ma > 0, "%s: %g (max %g)", A->name, ea, ma);
        free(dA);
        free(dB);
    }
    /* base weights are frozen under LoRA */
    const dllm_param *PB;
    dllm_tf_params(m, &PB);
    ck_assert_ptr_null(PB[0].grad);

    /* the adapter file round-trips through dllm_tf_lora_save / dllm_tf_lora_load */
    snprintf(adapter, sizeof adapter, "%s/adapter_model.safetensors", tmp);
    ck_assert_msg(dllm_tf_lora_save(m, adapter, &err) == 0, "%s", err.msg);
    dllm_tf *m3 = open_case(k);
    dllm_tf_lora_enable(m3, 4, 8.0f, LORA_ALL, 99);
    ck_assert_msg(dllm_tf_lora_load(m3, adapter, &err) == 0, "%s", err.msg);
    got = all_logits(m3, &b);
    ck_assert(memcmp(got, want, n * sizeof(float)) == 0);
    free(got);
    /* an adapter for other targets is refused, naming the missing tensor */
    dllm_tf_lora_enable(m3, 4, 8.0f, LORA_ALL & ~LORA_K_PROJ, 99);
    ck_assert_msg(dllm_tf_lora_save(m3, adapter, &err) == 0, "%s", err.msg);
    dllm_tf_lora_enable(m3, 4, 8.0f, LORA_ALL, 99);
    ck_assert_int_ne(dllm_tf_lora_load(m3, adapter, &err), 0);
    ck_assert_msg(strstr(err.msg, "k_proj.lora_A.weight") != NULL, "message: %s", err.msg);
    /* and without LoRA there is nothing to load into */
    dllm_tf_lora_enable(m3, 0, 0.0f, 0, 0);
    ck_assert_int_eq(dllm_tf_lora_load(m3, adapter, &err), DLLM_EXIT_INPUT);

    dllm_tf_free(m3);
    dllm_tf_free(mm);
    free(want);
    tu_rm_rf(tmp);
    free(tmp);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_lora_init)
{
    const arch_case *k = &cases[_i];
    dllm_tf *m = open_case(k);
    batch b;
    make_batch(m, &b);
    float *base = all_logits(m, &b);
    dllm_tf_lora_enable(m, 8, 16.0f, LORA_ALL, 5);
    const dllm_param *LP;
    int nl = dllm_tf_lora_params(m, &LP);
    ck_assert_int_eq(nl, 2 * DLLM_NLIN * dllm_tf_config(m)->n_layers);
    for (int i = 0; i < nl; i++) {
        bool isA = strstr(LP[i].name, "lora_A") != NULL;
        double bound = 1.0 / sqrt((double)LP[i].shape[1]), mx = tu_max_abs(LP[i].data, LP[i].numel);
        if (isA)
            ck_assert_msg(mx <= bound && mx > 0.5 * bound, "%s: max %g, bound %g", LP[i].name,
                          mx, bound);
        else
            ck_assert_msg(mx == 0.0, "%s: B must start at zero", LP[i].name);
    }
    /* B = 0: the adapted model computes exactly the base model */
    float *got = all_logits(m, &b);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    ck_assert(memcmp(got, base, n * sizeof(float)) == 0);
    /* turning LoRA off makes the base trainable again */
    dllm_tf_lora_enable(m, 0, 0.0f, 0, 0);
    size_t nt;
    const dllm_param *P;
    dllm_tf_params(m, &P);
    ck_assert_ptr_null(P[0].grad); /* not allocated until needed */
    dllm_optim_zero_grad(dllm_tf_optim(m));
    ck_assert_ptr_eq(dllm_optim_trainable(dllm_tf_optim(m), &nt), P[0].data);
    ck_assert_ptr_nonnull(P[0].grad);
    free(got);
    free(base);
    dllm_tf_free(m);
}
END_TEST

/* The same seed gives the same weights, another seed others; matrices
 * N(0, 0.02), norms 1, biases 0; the parameter count is the config's. */
START_TEST(test_create_deterministic)
{
    const arch_case *k = &cases[_i];
    dllm_tf *ref = open_case(k);
    dllm_model_config cfg = *dllm_tf_config(ref);
    const dllm_arch_desc *a = dllm_tf_arch(ref);
    dllm_tf_free(ref);
    dllm_tf *x = dllm_tf_create_arch(a, &cfg, 42), *y = dllm_tf_create_arch(a, &cfg, 42);
    dllm_tf *z = dllm_tf_create_arch(a, &cfg, 43);
    assert_same_params(x, y, false);
    const dllm_param *P, *Q;
    int np = dllm_tf_params(x, &P);
    dllm_tf_params(z, &Q);
    double s2 = 0;
    size_t cnt = 0, total = 0;
    for (int i = 0; i < np; i++) {
        total += P[i].numel;
        if (P[i].ndim == 1) {
            float want = strstr(P[i].name, ".bias") ? 0.0f : 1.0f;
            for (size_t e = 0; e < P[i].numel; e++)
                ck_assert_msg(P[i].data[e] == want, "%s[%zu]", P[i].name, e);
            continue;
        }
        ck_assert(memcmp(P[i].data, Q[i].data, P[i].numel * sizeof(float)) != 0);
        for (size_t e = 0; e < P[i].numel; e++, cnt++)
            s2 += (double)P[i].data[e] * P[i].data[e];
    }
    double sd = sqrt(s2 / cnt);
    ck_assert_msg(fabs(sd - 0.02) < 0.001, "init std %g, expected 0.02", sd);
    size_t nt;
    dllm_optim_trainable(dllm_tf_optim(x), &nt);
    ck_assert_uint_eq(nt, total);
    if (!a->qkv_bias) /* model_config counts the shipped architectures */
        ck_assert_int_eq((long long)nt, (long long)dllm_config_num_params(&cfg));
    dllm_tf_free(x);
    dllm_tf_free(y);
    dllm_tf_free(z);
}
END_TEST

/* ---- the Dream-style paths ------------------------------------------------------------------- */

/* A descriptor like dllm_arch_dream with one switch changed. */
static dllm_arch_desc variant(bool shift, bool bias)
{
    dllm_arch_desc d = dllm_arch_dream;
    d.shift_logits = shift;
    if (!bias) {
        d.qkv_bias = false;
        int n = 0;
        for (int i = 0; i < d.n_order; i++)
            if (d.order[i] < DLLM_T_Q_BIAS)
                d.order[n++] = d.order[i];
        d.n_order = n;
    }
    return d;
}

/* Copies every tensor of src into the same-named tensor of dst (dst's extra
 * tensors keep their values). */
static void copy_by_name(dllm_tf *dst, dllm_tf *src)
{
    const dllm_param *P, *Q;
    int np = dllm_tf_params(dst, &P), nq = dllm_tf_params(src, &Q);
    for (int i = 0; i < np; i++)
        for (int j = 0; j < nq; j++)
            if (!strcmp(P[i].name, Q[j].name)) {
                ck_assert_uint_eq(P[i].numel, Q[j].numel);
                memcpy(P[i].data, Q[j].data, P[i].numel * sizeof(float));
            }
}

/* Shifted logits: row t reads the hidden state at t-1, row 0 its own. */
START_TEST(test_shifted_logits)
{
    dllm_arch_desc plain = variant(false, true);
    dllm_tf *m = build_model(&dllm_arch_dream, _i == 0, 3), *u = build_model(&plain, _i == 0, 3);
    copy_by_name(u, m);
    batch b;
    make_batch(m, &b);
    int V = dllm_tf_config(m)->embedding_size;
    float *ls = all_logits(m, &b), *lu = all_logits(u, &b);
    for (int i = 0; i < B; i++)
        for (int t = 0; t < T; t++) {
            int src = t > 0 ? t - 1 : 0;
            double d = tu_max_abs_diff(ls + ((size_t)i * T + t) * V, lu + ((size_t)i * T + src) * V,
                                    (size_t)V);
            ck_assert_msg(d < 1e-6, "row (%d, %d): shifted vs unshifted at %d differ by %g", i,
                          t, src, d);
        }
    /* the rows the loss reads, through the subset path and its backward */
    ck_assert(tu_max_abs_diff(ls, lu, (size_t)B * T * V) > 1e-3);
    free(ls);
    free(lu);
    dllm_tf_free(m);
    dllm_tf_free(u);
}
END_TEST

/* q/k/v biases: zero biases compute the model without them; non-zero ones
 * change the logits; the parameter names are the HF ones. */
START_TEST(test_qkv_bias)
{
    dllm_arch_desc nobias = variant(true, false);
    dllm_tf *m = build_model(&dllm_arch_dream, false, 3), *u = build_model(&nobias, false, 3);
    copy_by_name(m, u);
    const dllm_param *P;
    int np = dllm_tf_params(m, &P), nb = 0;
    for (int i = 0; i < np; i++)
        if (strstr(P[i].name, ".bias")) {
            nb++;
            memset(P[i].data, 0, P[i].numel * sizeof(float));
        }
    ck_assert_int_eq(nb, 3 * dllm_tf_config(m)->n_layers);
    ck_assert_str_eq(P[2].name, "model.layers.0.self_attn.q_proj.bias");
    ck_assert_int_eq((int)P[2].shape[0], 32);
    ck_assert_str_eq(P[4].name, "model.layers.0.self_attn.k_proj.bias");
    ck_assert_int_eq((int)P[4].shape[0], 16);
    batch b;
    make_batch(m, &b);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *lm = all_logits(m, &b), *lu = all_logits(u, &b);
    ck_assert_msg(tu_max_abs_diff(lm, lu, n) < 1e-6, "zero biases: %g", tu_max_abs_diff(lm, lu, n));
    for (int j = 2; j <= 6; j += 2) { /* q, k, v bias of layer 0 each move the logits */
        P[j].data[1] = 0.5f;
        float *lb = all_logits(m, &b);
        ck_assert_msg(tu_max_abs_diff(lb, lu, n) > 1e-4, "%s has no effect", P[j].name);
        P[j].data[1] = 0.0f;
        free(lb);
    }
    free(lm);
    free(lu);
    dllm_tf_free(m);
    dllm_tf_free(u);
}
END_TEST

/* Real-token positions in a bidirectional model: a left-padded row computes
 * the logits of the unpadded sequence. */
START_TEST(test_padding_invariance)
{
    dllm_tf *m = build_model(&dllm_arch_dream, _i == 0, 3);
    batch b;
    make_batch(m, &b);
    int V = dllm_tf_config(m)->embedding_size;
    float *pad = all_logits(m, &b);
    for (int r = 1; r < B; r++) {
        int start = 0;
        while (!b.keymask[r * T + start])
            start++;
        ck_assert_int_gt(start, 0);
        int n = T - start;
        float *one = dllm_malloc((size_t)n * V * sizeof(float));
        ck_assert_int_eq(dllm_tf_forward_nograd(m, b.tokens + r * T + start, NULL, 1, n, NULL, 0,
                                                one), 0);
        /* shifted logits: the first real row of a padded sequence reads the
         * padding before it (as the published model does), the others match */
        double d = tu_max_abs_diff(one + V, pad + ((size_t)r * T + start + 1) * V,
                                (size_t)(n - 1) * V);
        ck_assert_msg(d < 1e-5, "row %d: padded vs unpadded logits differ by %g", r, d);
        free(one);
    }
    free(pad);
    dllm_tf_free(m);
}
END_TEST

/* The precision copies carry the biases: bf16 and FP8 rollouts stay close
 * to the fp32 trainer; a bf16 trainer's backward is straight-through
 * (finite differences of its own rounded forward are not smooth, so the
 * check is that its gradients are those of fp32 up to rounding). */
START_TEST(test_precision_copies)
{
    dllm_tf *m = build_model(&dllm_arch_dream, false, 3);
    batch b;
    make_batch(m, &b);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = all_logits(m, &b), *got = dllm_malloc(n * sizeof(float));
    double scale = tu_max_abs(ref, n);
    const char *kinds[2] = {"bf16", "fp8"};
    double tol[2] = {0.03, 0.25};
    dllm_err err = {0};
    for (int k = 0; k < 2; k++) {
        dllm_precision p;
        ck_assert_int_eq(dllm_precision_parse(&p, "fp32", kinds[k], NULL, NULL, false, &err), 0);
        ck_assert_msg(dllm_tf_rollout_sync(m, &p, NULL, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(dllm_tf_forward_rollout(m, b.tokens, b.keymask, B, T, NULL, 0, got), 0);
        double d = tu_max_abs_diff(got, ref, n);
        ck_assert_msg(d > 0 && d < tol[k] * scale, "%s rollout: %g (logits up to %g)", kinds[k],
                      d, scale);
        /* the trainer is untouched by the copy */
        float *again = all_logits(m, &b);
        ck_assert(memcmp(again, ref, n * sizeof(float)) == 0);
        free(again);
    }
    /* bf16 trainer: gradients close to fp32's */
    size_t ng;
    dllm_optim_zero_grad(dllm_tf_optim(m));
    loss_of(m, &b, true);
    float *g32 = dllm_optim_grads(dllm_tf_optim(m));
    dllm_optim_trainable(dllm_tf_optim(m), &ng);
    float *keep = dllm_malloc(ng * sizeof(float));
    memcpy(keep, g32, ng * sizeof(float));
    dllm_precision p;
    ck_assert_int_eq(dllm_precision_parse(&p, "bf16", "trainer", NULL, NULL, false, &err), 0);
    ck_assert_int_eq(dllm_tf_rollout_sync(m, &p, NULL, &err), 0);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    loss_of(m, &b, true);
    double d = tu_max_abs_diff(dllm_optim_grads(dllm_tf_optim(m)), keep, ng), mg = tu_max_abs(keep, ng);
    ck_assert_msg(d > 0 && d < 0.1 * mg, "bf16 trainer gradients: %g (max %g)", d, mg);
    free(keep);
    free(got);
    free(ref);
    dllm_tf_free(m);
}
END_TEST

/* The descriptors' names: LoRA targets (with aliases), their list for
 * messages, and config validation. */
START_TEST(test_descriptors)
{
    ck_assert_ptr_eq(dllm_arch_get(DLLM_ARCH_LLADA), &dllm_arch_llada);
    ck_assert_ptr_eq(dllm_arch_get(DLLM_ARCH_QWEN3), &dllm_arch_qwen3);
    ck_assert_ptr_eq(dllm_arch_by_name("qwen3"), &dllm_arch_qwen3);
    ck_assert_ptr_null(dllm_arch_by_name("gpt2"));
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_llada, "ff_out"), LORA_FF_OUT);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_llada, "o_proj"), 0);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_qwen3, "o_proj"), LORA_ATTN_OUT);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_qwen3, "attn_out"), LORA_ATTN_OUT);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_qwen3, "gate_proj"), LORA_FF_PROJ);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_qwen3, "down_proj"), LORA_FF_OUT);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_qwen3, "lm_head"), 0);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_dream, "attn_out"), LORA_ATTN_OUT);
    ck_assert_int_eq(dllm_arch_lora_bit(&dllm_arch_dream, "lm_head"), 0);
    char buf[160];
    ck_assert_str_eq(dllm_arch_lora_list(&dllm_arch_qwen3, buf, sizeof buf),
                     "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj");
    ck_assert(dllm_arch_has(&dllm_arch_dream, DLLM_T_V_BIAS));
    ck_assert(!dllm_arch_has(&dllm_arch_qwen3, DLLM_T_V_BIAS));
    ck_assert(dllm_arch_has(&dllm_arch_qwen3, DLLM_T_K_NORM));
    dllm_model_config c = small_config(true);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_tf_check_config(&dllm_arch_llada, &c, "cfg", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "weight_tying") != NULL, "%s", err.msg);
    ck_assert_int_eq(dllm_tf_check_config(&dllm_arch_dream, &c, "cfg", &err), 0);
    c.n_kv_heads = 3;
    ck_assert_int_eq(dllm_tf_check_config(&dllm_arch_dream, &c, "cfg", &err), DLLM_EXIT_INPUT);
}
END_TEST

static Suite *transformer_suite(void)
{
    Suite *s = suite_create("transformer");
    TCase *f = tcase_create("finite_differences");
    tcase_set_timeout(f, 300);
    tcase_add_loop_test(f, test_fd_model, 0, NCASE);
    tcase_add_loop_test(f, test_fd_lora, 0, NCASE);
    suite_add_tcase(s, f);
    TCase *c = tcase_create("consistency");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_rows_and_variants, 0, NCASE);
    tcase_add_loop_test(c, test_head_rows_exact, 0, 2 * NCASE);
    tcase_add_loop_test(c, test_save_load_roundtrip, 0, NCASE);
    tcase_add_loop_test(c, test_lora_merged, 0, NCASE);
    tcase_add_loop_test(c, test_lora_init, 0, NCASE);
    tcase_add_loop_test(c, test_create_deterministic, 0, NCASE);
    suite_add_tcase(s, c);
    TCase *d = tcase_create("dream_paths");
    tcase_add_loop_test(d, test_shifted_logits, 0, 2);
    tcase_add_test(d, test_qkv_bias);
    tcase_add_loop_test(d, test_padding_invariance, 0, 2);
    tcase_add_test(d, test_precision_copies);
    tcase_add_test(d, test_descriptors);
    suite_add_tcase(s, d);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return transformer_suite();
}
