/* test_qwen35_lora.c: LoRA and the bf16 trainer on Qwen3.5 (dllm/qwen35.h,
 * dllm/qwen35_policy.c), library and commands.
 *
 *  - the adapters' gradients against central finite differences of the next-token loss;
 *    the base frozen; B = 0 leaves the model's loss unchanged bit for bit; the targets;
 *  - the rollout copies (bf16, FP8, INT8, NVFP4) are the merged weights' copies bit for bit,
 *    the trainer the adapters at run time;
 *  - the adapter in PEFT's layout (target names, tensor names and shapes as PEFT writes
 *    them for Qwen3_5ForCausalLM) read back into a policy; the merged weights score as
 *    the adapted model;
 *  - the bf16 trainer: its loss within a stated bound of fp32's, its gradient along
 *    fp32's, its steps on fp32 master weights lower the loss;
 *  - sft and train with LoRA and with the bf16 trainer on the tiny preset, export of both
 *    kinds; the device still refused. */
#include "dllm/policy.h"
#include "dllm/qwen35.h"
#include "dllm/safetensors.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *zeros(size_t n) { return calloc(n + 1, sizeof(float)); }

static qwen35_model *load_model(const char *rel)
{
    char *dir = tu_data_path(rel);
    qwen35_model *m;
    dllm_err err = {0};
    ck_assert_msg(qwen35_load(&m, dir, &err) == 0, "%s", err.msg);
    free(dir);
    return m;
}

/* n values U(-scale, scale) from seed into x. */
static void fill(float *x, size_t n, uint64_t seed, double scale)
{
    dllm_rng r = dllm_rng_make(seed, 1, 2, 3);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((2 * dllm_rng_uniform(&r) - 1) * scale);
}

/* The policy's trainable vector set to fill's values (written where it lives). */
static void fill_trainable(dllm_policy *p, uint64_t seed, double scale)
{
    size_t n;
    dllm_optim o = dllm_policy_optim(p);
    dllm_optim_trainable(o, &n);
    float *v = malloc(n * sizeof(float));
    fill(v, n, seed, scale);
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, v);
    free(v);
}

static const int32_t seq[20] = {3,  17, 5,  60, 2, 9,  41, 7, 7,  30,
                                11, 4,  50, 8,  13, 1, 36, 5, 20, 6};

/* ---- the library ---------------------------------------------------------------------- */

/* Every adapter tensor's gradient (two entries each) against central differences of the
 * loss; B = 0 at first changes no bit of the loss; the base weights get no gradient. */
START_TEST(adapter_gradient)
{
    qwen35_model *m = load_model("qwen35/hybrid");
    dllm_err err = {0};
    double base, loss;
    ck_assert(qwen35_loss_grad(m, seq, 20, &base, &err) == 0);
    qwen35_lora_enable(m, 2, 6.0f, (1 << QWEN35_NLORA) - 1, 5);
    ck_assert_int_eq(qwen35_lora_info(m, NULL, NULL), 2);
    qwen35_zero_grad(m);
    ck_assert(qwen35_loss_grad(m, seq, 20, &loss, &err) == 0);
    ck_assert_msg(loss == base, "B = 0: loss %.17g, without LoRA %.17g", loss, base);
    ck_assert_ptr_null(qwen35_grad(m, "model.layers.0.mlp.gate_proj.weight", NULL));
    const dllm_param *pl;
    int np = qwen35_lora_params(m, &pl);
    /* hybrid: 4 layers, 3 Gated DeltaNet (3 targets) and 1 full (4), each with the MLP's 3 */
    ck_assert_int_eq(np, 2 * (3 * 3 + 1 * 4 + 4 * 3));
    size_t n;
    float *p = qwen35_params(m, &n);
    fill(p, n, 11, 0.2); /* B non-zero, so that A has a gradient */
    qwen35_zero_grad(m);
    ck_assert(qwen35_loss_grad(m, seq, 20, &loss, &err) == 0);
    float *g = malloc(n * sizeof(float));
    memcpy(g, qwen35_grads(m), n * sizeof(float));
    double gmax = tu_max_abs(g, n), worst = 0;
    ck_assert(gmax > 0);
    const double h = 1e-3;
    for (int i = 0; i < np; i++) {
        size_t at[2] = {0, pl[i].numel / 2 + 1};
        for (int e = 0; e < 2; e++) {
            size_t k = (size_t)(pl[i].data - p) + at[e];
            float keep = p[k];
            double lp, lm;
            p[k] = keep + (float)h;
            ck_assert(qwen35_loss_grad(m, seq, 20, &lp, &err) == 0);
            p[k] = keep - (float)h;
            ck_assert(qwen35_loss_grad(m, seq, 20, &lm, &err) == 0);
            p[k] = keep;
            double fd = (lp - lm) / (2 * h), d = fabs(fd - g[k]);
            worst = fmax(worst, d / gmax);
            ck_assert_msg(d <= 2e-3 * gmax + 2e-2 * fabs(g[k]), "%s[%zu]: analytic %g, fd %g",
                          pl[i].name, at[e], g[k], fd);
        }
    }
    fprintf(stderr, "adapter gradients: worst |fd - analytic| %.2g of the largest\n", worst);
    free(g);
    qwen35_free(m);
}
END_TEST

/* Targets: in_proj_qkv alone puts adapters on the Gated DeltaNet layers only, in PEFT's
 * names and shapes. */
START_TEST(adapter_targets)
{
    qwen35_model *m = load_model("qwen35/hybrid");
    const qwen35_config *c = qwen35_config_of(m);
    ck_assert_int_eq(qwen35_lora_bit("in_proj_qkv"), 1);
    ck_assert_int_eq(qwen35_lora_bit("in_proj_a"), 0);
    ck_assert_int_eq(qwen35_lora_bit("attn_out"), 0);
    qwen35_lora_enable(m, 3, 3.0f, qwen35_lora_bit("in_proj_qkv") | qwen35_lora_bit("q_proj"), 1);
    const dllm_param *pl;
    int np = qwen35_lora_params(m, &pl), nlin = 0, nfull = 0;
    for (int l = 0; l < c->L; l++)
        nlin += c->kind[l] == QWEN35_LINEAR, nfull += c->kind[l] == QWEN35_FULL;
    ck_assert_int_eq(np, 2 * (nlin + nfull));
    size_t n;
    qwen35_params(m, &n);
    int mask = qwen35_lora_bit("in_proj_qkv") | qwen35_lora_bit("q_proj");
    ck_assert_int_eq(qwen35_lora_numel(c, 3, mask), (int64_t)n);
    /* the key's default (LLaDA's seven names) is every target; an explicit list is itself */
    static const char *const dflt[] = {"q_proj", "k_proj", "v_proj", "attn_out", "ff_proj",
                                       "up_proj", "ff_out"};
    dllm_err err = {0};
    ck_assert(qwen35_lora_mask(dflt, 7, "model.lora.targets", &mask, &err) == 0);
    ck_assert_int_eq(mask, (1 << QWEN35_NLORA) - 1);
    ck_assert(qwen35_lora_mask(dflt + 3, 1, "model.lora.targets", &mask, &err) == 0);
    ck_assert_int_eq(mask, qwen35_lora_bit("o_proj"));
    static const char *const bad[] = {"in_proj_b"};
    ck_assert_int_eq(qwen35_lora_mask(bad, 1, "model.lora.targets", &mask, &err),
                     DLLM_EXIT_INPUT);
    ck_assert(strstr(err.msg, "model.lora.targets") && strstr(err.msg, "in_proj_b"));
    ck_assert_str_eq(pl[0].name,
                     "base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_A.weight");
    ck_assert_int_eq(pl[0].shape[0], 3);
    ck_assert_int_eq(pl[0].shape[1], c->C);
    ck_assert_int_eq(pl[1].shape[0], 2 * c->Hk * c->Dk + c->Hv * c->Dv);
    ck_assert_int_eq(pl[1].shape[1], 3);
    bool q = false;
    for (int i = 0; i < np; i++)
        if (strstr(pl[i].name, "self_attn.q_proj.lora_B")) {
            q = true;
            ck_assert_int_eq(pl[i].shape[0], 2 * c->NH * c->HD); /* the query and its gate */
        }
    ck_assert(q);
    qwen35_free(m);
}
END_TEST

static dllm_policy *open_tiny(int rank, const char *trainer, const char *rollout)
{
    dllm_policy_cfg pc = {.arch = "qwen3.5", .preset = "tiny", .seed = 3, .lora_rank = rank,
                          .lora_alpha = 8, .trainer = trainer, .rollout = rollout};
    dllm_policy *p;
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    return p;
}

enum { B = 2, T = 12 };
static void batch(int32_t *tok)
{
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)((i * 37 + 5) % 128);
}

static void policy_logits(dllm_policy *p, dllm_prec prec, const int32_t *tok, float *lg)
{
    void *ctx;
    dllm_logits_fn f = dllm_policy_logits(p, prec, &ctx);
    ck_assert(f(ctx, tok, NULL, B, T, NULL, 0, lg) == 0);
}

/* The rollout copies are made from the merged weights: the policy's bf16, FP8, INT8 and
 * NVFP4 copies give the logits of the same copy of a model with the adapters merged, bit
 * for bit; the trainer's logits are the adapters' at run time. */
static const char *const copies[] = {"bf16", "fp8", "fp8-exact", "int8", "nvfp4"};
START_TEST(rollout_copy_merged)
{
    const char *kind = copies[_i];
    dllm_policy *p = open_tiny(4, "fp32", kind);
    size_t n;
    fill_trainable(p, 9, 0.1);
    const float *v = dllm_optim_trainable(dllm_policy_optim(p), &n);
    dllm_err err = {0};
    ck_assert(dllm_policy_sync_rollout(p, NULL, &err) == 0);
    int32_t tok[B * T];
    batch(tok);
    int V = dllm_policy_config(p)->vocab_size;
    float *tr = zeros((size_t)B * T * V), *ro = zeros((size_t)B * T * V);
    float *want = zeros((size_t)B * T * V), *wtr = zeros((size_t)B * T * V);
    policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, tok, tr);
    policy_logits(p, DLLM_PREC_ROLLOUT, tok, ro);
    /* the same by hand */
    qwen35_config c;
    ck_assert(qwen35_preset("tiny", &c, &err) == 0);
    qwen35_model *m = qwen35_create(&c, 3);
    qwen35_lora_enable(m, 4, 8.0f, (1 << QWEN35_NLORA) - 1, 3);
    size_t n2;
    memcpy(qwen35_params(m, &n2), v, n * sizeof(float));
    ck_assert_uint_eq(n2, n);
    ck_assert(qwen35_forward(m, tok, NULL, B, T, NULL, 0, wtr, false, &err) == 0);
    ck_assert(memcmp(tr, wtr, (size_t)B * T * V * sizeof(float)) == 0);
    qwen35_model *r = qwen35_clone(m);
    qwen35_lora_merge(m, r);
    dllm_precision prec;
    ck_assert(dllm_precision_parse(&prec, "fp32", kind, NULL, NULL, false, &err) == 0);
    if (!strcmp(kind, "bf16"))
        qwen35_round_bf16(r);
    else
        ck_assert(qwen35_quantise(r, &prec, &err) == 0);
    ck_assert(qwen35_forward(r, tok, NULL, B, T, NULL, 0, want, false, &err) == 0);
    ck_assert_msg(memcmp(ro, want, (size_t)B * T * V * sizeof(float)) == 0,
                  "%s: the rollout copy is not the merged weights' (%g)", kind,
                  tu_max_abs_diff(ro, want, (size_t)B * T * V));
    /* the adapters matter: the base model's trainer logits differ */
    qwen35_model *base = qwen35_create(&c, 3);
    ck_assert(qwen35_forward(base, tok, NULL, B, T, NULL, 0, want, false, &err) == 0);
    ck_assert(tu_max_abs_diff(tr, want, (size_t)B * T * V) > 1e-3);
    free(tr), free(ro), free(want), free(wtr);
    qwen35_free(m), qwen35_free(r), qwen35_free(base);
    dllm_policy_free(p);
}
END_TEST

/* save_adapter writes PEFT's layout; load_adapter reads it back into a policy without LoRA
 * (the same logits bit for bit) and refuses one whose LoRA differs; the merged
 * checkpoint scores as the adapted model. */
START_TEST(adapter_peft_layout)
{
    dllm_policy *p = open_tiny(4, "fp32", "trainer");
    size_t n;
    fill_trainable(p, 21, 0.1);
    dllm_optim_trainable(dllm_policy_optim(p), &n);
    dllm_err err = {0};
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/q35adapter", tu_dir);
    ck_assert_msg(dllm_policy_save_adapter(p, dir, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_str_eq(json_string_value(json_object_get(cfg, "peft_type")), "LORA");
    ck_assert_int_eq(json_integer_value(json_object_get(cfg, "r")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(cfg, "lora_alpha")), 8);
    const json_t *tm = json_object_get(cfg, "target_modules");
    ck_assert_int_eq(json_array_size(tm), QWEN35_NLORA);
    for (int j = 0; j < QWEN35_NLORA; j++) {
        bool in = false;
        for (size_t i = 0; i < json_array_size(tm); i++)
            in |= !strcmp(json_string_value(json_array_get(tm, i)), qwen35_lora_names[j]);
        ck_assert_msg(in, "target_modules lacks %s", qwen35_lora_names[j]);
    }
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_archive *a;
    ck_assert(st_open(&a, path, &err) == 0);
    /* tiny: layers 0-2 Gated DeltaNet, 3 full attention; hidden 64, rank 4 */
    static const struct {
        const char *name;
        int64_t d0, d1;
    } want[] = {
        {"base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_A.weight", 4, 64},
        {"base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_B.weight", 128, 4},
        {"base_model.model.model.layers.1.linear_attn.in_proj_z.lora_B.weight", 64, 4},
        {"base_model.model.model.layers.2.linear_attn.out_proj.lora_A.weight", 4, 64},
        {"base_model.model.model.layers.3.self_attn.q_proj.lora_B.weight", 128, 4},
        {"base_model.model.model.layers.3.self_attn.k_proj.lora_B.weight", 32, 4},
        {"base_model.model.model.layers.3.self_attn.v_proj.lora_A.weight", 4, 64},
        {"base_model.model.model.layers.3.self_attn.o_proj.lora_A.weight", 4, 64},
        {"base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight", 176, 4},
        {"base_model.model.model.layers.3.mlp.up_proj.lora_A.weight", 4, 64},
        {"base_model.model.model.layers.2.mlp.down_proj.lora_A.weight", 4, 176},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_tensor *t = st_find(a, want[i].name);
        ck_assert_msg(t != NULL, "no %s", want[i].name);
        ck_assert_int_eq(t->dtype, ST_F32);
        ck_assert_int_eq(t->ndim, 2);
        ck_assert_int_eq(t->shape[0], want[i].d0);
        ck_assert_int_eq(t->shape[1], want[i].d1);
    }
    ck_assert_int_eq(st_count(a), 2 * (3 * 3 + 4 + 4 * 3));
    for (int i = 0; i < st_count(a); i++)
        ck_assert_msg(!strstr(st_at(a, i)->name, "in_proj_a") &&
                          !strstr(st_at(a, i)->name, "in_proj_b"), "%s", st_at(a, i)->name);
    st_close(a);
    /* read back */
    int32_t tok[B * T];
    batch(tok);
    int V = dllm_policy_config(p)->vocab_size;
    float *l1 = zeros((size_t)B * T * V), *l2 = zeros((size_t)B * T * V);
    policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, tok, l1);
    dllm_policy *q = open_tiny(0, "fp32", "trainer");
    ck_assert_msg(dllm_policy_load_adapter(q, dir, &err) == 0, "%s", err.msg);
    ck_assert(dllm_policy_has_lora(q));
    policy_logits(q, DLLM_PREC_TRAIN_NOGRAD, tok, l2);
    ck_assert(memcmp(l1, l2, (size_t)B * T * V * sizeof(float)) == 0);
    dllm_policy *d = open_tiny(2, "fp32", "trainer");
    ck_assert_int_eq(dllm_policy_load_adapter(d, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "adapter_config.json"));
    /* merged weights */
    snprintf(path, sizeof path, "%s/q35merged_lib", tu_dir);
    ck_assert_int_eq(tu_sh("mkdir -p %s", path), 0);
    ck_assert_msg(dllm_policy_save(p, path, ST_F32, &err) == 0, "%s", err.msg);
    dllm_policy *mg;
    dllm_policy_cfg pc = {.path = path};
    ck_assert_msg(dllm_policy_open(&mg, &pc, &err) == 0, "%s", err.msg);
    ck_assert(!dllm_policy_has_lora(mg));
    policy_logits(mg, DLLM_PREC_TRAIN_NOGRAD, tok, l2);
    double dm = tu_max_abs_diff(l1, l2, (size_t)B * T * V);
    ck_assert_msg(dm < 1e-5 && tu_max_abs(l1, (size_t)B * T * V) > 0.1,
                  "merged weights: logits %g from the adapted model's", dm);
    free(l1), free(l2);
    dllm_policy_free(p), dllm_policy_free(q), dllm_policy_free(d), dllm_policy_free(mg);
}
END_TEST

/* The mean next-token cross-entropy of each row from logits lg (B, T, V), its dlogits
 * into dl (may be NULL). */
static double row_xent(const float *lg, const int32_t *tok, int V, float *dl)
{
    double tot = 0;
    int R = B * (T - 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) {
            const float *z = lg + ((size_t)b * T + t) * V;
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++)
                mx = fmax(mx, z[v]);
            for (int v = 0; v < V; v++)
                s += exp(z[v] - mx);
            int y = tok[b * T + t + 1];
            tot -= z[y] - mx - log(s);
            for (int v = 0; dl && v < V; v++)
                dl[((size_t)b * T + t) * V + v] =
                    (float)((exp(z[v] - mx) / s - (v == y)) / R);
        }
    return tot / R;
}

/* The bf16 trainer: its loss within 1e-3 (relative) of fp32's on the same weights but not
 * equal, its gradient along fp32's (cosine > 0.99), deterministic; its optimizer steps the
 * fp32 masters (values bf16 cannot hold) and 20 steps lower the loss; a trainable vector
 * swapped in for scoring is what it computes with; with LoRA too. */
static const int bf16_ranks[] = {0, 4};
START_TEST(bf16_trainer)
{
    int rank = bf16_ranks[_i];
    dllm_policy *f = open_tiny(rank, "fp32", "trainer"), *h = open_tiny(rank, "bf16", "bf16");
    int V = dllm_policy_config(f)->vocab_size;
    size_t n, nh;
    dllm_optim_trainable(dllm_policy_optim(f), &n);
    const float *vh = dllm_optim_trainable(dllm_policy_optim(h), &nh);
    ck_assert_uint_eq(n, nh);
    if (rank) { /* the same non-zero adapters in both */
        fill_trainable(f, 4, 0.1);
        fill_trainable(h, 4, 0.1);
        vh = dllm_optim_trainable(dllm_policy_optim(h), &nh);
    }
    dllm_err err = {0};
    ck_assert(dllm_policy_sync_rollout(f, NULL, &err) == 0);
    ck_assert(dllm_policy_sync_rollout(h, NULL, &err) == 0);
    int32_t tok[B * T];
    batch(tok);
    size_t nl = (size_t)B * T * V;
    float *lf = zeros(nl), *lh = zeros(nl), *dl = zeros(nl), *again = zeros(nl);
    policy_logits(f, DLLM_PREC_TRAIN, tok, lf);
    double Lf = row_xent(lf, tok, V, dl);
    dllm_optim_zero_grad(dllm_policy_optim(f));
    dllm_policy_backward(f, dl);
    policy_logits(h, DLLM_PREC_TRAIN, tok, lh);
    double Lh = row_xent(lh, tok, V, dl);
    dllm_optim_zero_grad(dllm_policy_optim(h));
    dllm_policy_backward(h, dl);
    policy_logits(h, DLLM_PREC_TRAIN_NOGRAD, tok, again);
    ck_assert(memcmp(lh, again, nl * sizeof(float)) == 0);
    float *init = malloc(n * sizeof(float)), *lh0 = zeros(nl);
    memcpy(init, vh, n * sizeof(float));
    memcpy(lh0, lh, nl * sizeof(float));
    fprintf(stderr, "bf16 trainer (rank %d): loss %.6f, fp32 %.6f, logits differ by %.3g\n",
            rank, Lh, Lf, tu_max_abs_diff(lh, lf, nl));
    ck_assert_msg(Lh != Lf && fabs(Lh - Lf) < 1e-3 * Lf, "bf16 loss %g, fp32 %g", Lh, Lf);
    const float *gf = dllm_optim_grads(dllm_policy_optim(f)), *gh = dllm_optim_grads(dllm_policy_optim(h));
    double dot = 0, nf = 0, nh2 = 0;
    for (size_t i = 0; i < n; i++)
        dot += (double)gf[i] * gh[i], nf += (double)gf[i] * gf[i], nh2 += (double)gh[i] * gh[i];
    double cosine = dot / sqrt(nf * nh2);
    fprintf(stderr, "bf16 trainer (rank %d): gradient cosine to fp32's %.6f\n", rank, cosine);
    ck_assert_msg(cosine > 0.99, "gradient cosine %g", cosine);
    /* training: the masters stay fp32 */
    double first = Lh, last = 0;
    for (int step = 1; step <= 20; step++) {
        policy_logits(h, DLLM_PREC_TRAIN, tok, lh);
        last = row_xent(lh, tok, V, dl);
        dllm_optim_zero_grad(dllm_policy_optim(h));
        dllm_policy_backward(h, dl);
        dllm_adamw_args a = {.t = step, .lr = 1e-2f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f,
                             .wd = 0.0f, .max_norm = 1.0};
        ck_assert(isfinite(dllm_optim_step(dllm_policy_optim(h), &a)));
        ck_assert(dllm_policy_sync_rollout(h, NULL, &err) == 0);
    }
    ck_assert_msg(last < 0.9 * first, "20 bf16-trainer steps: loss %g from %g", last, first);
    vh = dllm_optim_trainable(dllm_policy_optim(h), &nh);
    size_t off_bf16 = 0;
    for (size_t i = 0; i < nh; i++) {
        float r = vh[i];
        op_round_bf16(&r, 1);
        off_bf16 += r != vh[i];
    }
    ck_assert_msg(off_bf16 > nh / 2, "%zu of %zu trainable values are not bf16 values",
                  off_bf16, nh);
    /* a swap for scoring (the reference policy): the trainer computes with what it is told */
    dllm_optim o = dllm_policy_optim(h);
    float *save = malloc(n * sizeof(float));
    dllm_optim_state_read(o, DLLM_STATE_PARAMS, 0, n, save);
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, init);
    dllm_policy_trainer_changed(h);
    policy_logits(h, DLLM_PREC_TRAIN_NOGRAD, tok, again);
    ck_assert_msg(memcmp(again, lh0, nl * sizeof(float)) == 0, "swapped-in weights: %g",
                  tu_max_abs_diff(again, lh0, nl));
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, save);
    dllm_policy_trainer_changed(h);
    free(save), free(init), free(lh0);
    free(lf), free(lh), free(dl), free(again);
    dllm_policy_free(f), dllm_policy_free(h);
}
END_TEST

/* ---- the commands ------------------------------------------------------------------------ */

/* sft and train with LoRA on the tiny preset, exported as a PEFT adapter and as merged
 * weights that score as the run; train with the bf16 trainer; the device still refused. */
START_TEST(commands_lora_bf16)
{
    const char *data = getenv("DLLM_TEST_DATA");
    ck_assert_int_eq(tu_sh("%s tasks sft-data sudoku --n 16 --seed 7 --max-blanks 4 > "
                           "%s/q35l.jsonl", tu_bin(), tu_dir), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/q35l.yaml", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "experiment: q35lsft\nseed: 1\nmodel: {arch: qwen3.5, preset: tiny, "
               "lora: {rank: 4, alpha: 8}}\n"
               "data: {train: %s/q35l.jsonl, max_len: 64}\nsft: {steps: 3, batch_size: 2}\n"
               "optim: {lr: 1e-2}\nlog: {dir: %s/q35l, every: 1}\ncheckpoint: {every: 0}\n",
            tu_dir, tu_dir);
    fclose(f);
    ck_assert_msg(tu_dllm("sft q35l.yaml --quiet") == 0, "%s", tu_err);
    const char *ck = "q35l/q35lsft/ckpt/latest";
    const char *small = "--set grpo.steps=2 --set grpo.prompts_per_step=2 --set "
                        "rollout.group_size=2 --set eval.every=0 --set checkpoint.every=2 "
                        "--set task.train.n=8 --set log.dir=q35l";
    ck_assert_msg(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet %s --set "
                          "model.path=%s --set experiment=q35lora --set model.lora.rank=4 "
                          "--set model.lora.alpha=8 --set model.lora.targets=[in_proj_qkv,"
                          "out_proj,q_proj,down_proj]", data, small, ck) == 0, "%s", tu_err);
    ck_assert_int_eq(tu_dllm("export q35l/q35lora --adapter --out q35l_ad"), 0);
    ck_assert_int_eq(tu_sh("grep -q '\"in_proj_qkv\"' %s/q35l_ad/adapter_config.json && "
                           "! grep -q '\"in_proj_z\"' %s/q35l_ad/adapter_config.json",
                           tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm("export q35l/q35lora --merged --out q35l_merged"), 0);
    ck_assert_int_eq(tu_dllm("score --model q35l_merged --prompt-ids 1,5,6 --completion-ids 7,0"),
                     0);
    ck_assert_ptr_nonnull(strstr(tu_out, "seq_logp"));
    /* an unknown target names the key and the target */
    ck_assert_int_eq(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet %s --set "
                             "model.path=%s --set experiment=q35bad --set model.lora.rank=4 "
                             "--set model.lora.targets=[in_proj_a]", data, small, ck), 2);
    ck_assert_msg(strstr(tu_err, "model.lora.targets") && strstr(tu_err, "in_proj_a"), "%s",
                  tu_err);
    /* plan: the adapters' state instead of the base's gradients and moments */
    ck_assert_int_eq(tu_dllm("plan %s/../../configs/quickstart-qwen35.yaml --set model.path=%s "
                             "--set model.lora.rank=4 --set model.lora.targets=[in_proj_qkv] "
                             "--set model.trainer_precision=bf16", data, ck), 0);
    ck_assert_msg(strstr(tu_out, "LoRA gradients") && strstr(tu_out, "Nl 2304") &&
                      !strstr(tu_out, "resident    gradients") &&
                      strstr(tu_out, "bf16 trainer: fp32 masters"), "%s", tu_out);
    /* the bf16 trainer */
    ck_assert_msg(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet %s --set "
                          "model.path=%s --set experiment=q35bf16 --set "
                          "model.trainer_precision=bf16 --set rollout.precision=bf16", data,
                          small, ck) == 0, "%s", tu_err);
    ck_assert_int_eq(tu_dllm("inspect q35l/q35bf16 --csv"), 0);
    const char *body = strchr(tu_out, '\n');
    ck_assert_msg(body && !strstr(body, "nan") && !strstr(body, "inf"), "%s", tu_out);
    /* on the device (LoRA there too; test_qwen35_device compares it with the host), or
     * without a CUDA backend refused naming it */
    int want = dllm_backend_cuda() ? 0 : 2;
    ck_assert_msg(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet %s --set "
                          "model.path=%s --set experiment=q35dev --set device=cuda", data,
                          small, ck) == want, "%s", tu_err);
    if (want)
        ck_assert_msg(strstr(tu_err, "cuda") != NULL, "%s", tu_err);
    else
        ck_assert_int_eq(tu_dllm("inspect q35l/q35dev --csv"), 0);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_scratch(ctx))
        return NULL;
    Suite *s = suite_create("qwen35_lora");
    TCase *lib = tcase_create("library");
    tcase_set_timeout(lib, 600);
    tcase_add_test(lib, adapter_gradient);
    tcase_add_test(lib, adapter_targets);
    tcase_add_loop_test(lib, rollout_copy_merged, 0, sizeof copies / sizeof copies[0]);
    tcase_add_test(lib, adapter_peft_layout);
    tcase_add_loop_test(lib, bf16_trainer, 0, 2);
    suite_add_tcase(s, lib);
    TCase *cli = tcase_create("commands");
    tcase_set_timeout(cli, 600);
    tcase_add_test(cli, commands_lora_bf16);
    suite_add_tcase(s, cli);
    return s;
}
