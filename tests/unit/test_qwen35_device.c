/* test_qwen35_device: Qwen3.5 with the model on the device (qwen35_to_backend: its weights,
 * gradients, moments, adapters, caches and activations in device memory, every op through
 * the CUDA backend's table) against the same model on the host, both built from one seed:
 *   - logits of a chunked forward over 70 tokens (more than one 64-token chunk), cached
 *     decoding one token at a time after a 5-token prefill, greedy ids;
 *   - the next-token loss and every gradient, then one optimizer step with clipping
 *     (weights and both moments), a left-padded batch's forward and backward;
 *   - LoRA at run time (forward, adapter gradients, the adapters saved from the device
 *     and read on the host: equal bit for bit);
 *   - the bf16 trainer's masters (kept, stepped, written back), the bf16, FP8 and INT8
 *     rollout copies; an NVFP4 copy and a second move refused;
 *   - through the policy: rollouts (greedy and sampled, the trainer and an FP8 copy, a
 *     left-padded prompt) with the choice on the device, tokens equal to the host's;
 *   - through the commands: an SFT run on the device, its checkpoint scored on both sides,
 *     `train --set device=cuda` of configs/quickstart-qwen35.yaml.
 * The device's attention runs on tensor cores (bf16 operands; backend_cases.h's
 * ATT_TC_NMSE), so outputs are compared by normalised squared error, sum (dev - host)^2 /
 * sum host^2, with bounds stated where they are used. Runs in the CUDA emulation build (and
 * on a GPU); SKIP (77) without CUDA. */
#include "config.h"

#include "dllm/policy.h"
#include "dllm/precision.h"
#include "dllm/qwen35.h"
#include "kernels/backend.h"
#include "kernels/backend_cases.h"
#include "kernels/rng.h"

#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bounds (normalised squared error). The logits and losses go through attention on
 * tensor cores and fp32 GEMMs in another summation order: ATT_TC_NMSE, carried through a
 * few layers. */
#define TOL_LOGITS 1e-4
/* Gradients and AdamW's moments: the backward's attention on tensor cores too, then
 * carried back through every layer to the embedding. */
#define TOL_GRAD 1e-4
/* The parameters after one step: Adam's first step moves every entry by about lr whatever
 * its gradient's size, so entries whose gradients are rounding noise differ by up to 2 lr. */
#define TOL_STEP 1e-3

static qwen35_model *tiny(uint64_t seed)
{
    qwen35_config c;
    dllm_err err = {0};
    ck_assert_int_eq(qwen35_preset("tiny", &c, &err), 0);
    qwen35_model *m = qwen35_create(&c, seed);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* The same model twice: on the host and moved to the device. */
static void pair(qwen35_model **h, qwen35_model **d, uint64_t seed)
{
    *h = tiny(seed);
    *d = tiny(seed);
    dllm_err err = {0};
    ck_assert_msg(qwen35_to_backend(*d, dllm_backend_cuda(), &err) == 0, "%s", err.msg);
    ck_assert(qwen35_backend(*d) == dllm_backend_cuda());
}

static int32_t *random_ids(int T, int V, uint64_t seed)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 9, 0);
    for (int t = 0; t < T; t++)
        ids[t] = (int32_t)dllm_rng_below(&r, (uint64_t)V);
    return ids;
}

static void expect_nmse(const char *what, const float *dev, const float *host, size_t n,
                        double tol)
{
    double e = dllm_nmse(dev, host, n);
    if (getenv("DLLM_TEST_VERBOSE"))
        printf("%-40s nmse %.3g (tol %.0e)\n", what, e, tol);
    ck_assert_msg(e <= tol, "%s: normalised squared error %.3g > %.0e", what, e, tol);
}

/* A vector of the optimizer state on the host. */
static float *state(qwen35_model *m, qwen35_vec v, size_t *n)
{
    qwen35_params(m, n);
    float *h = malloc(sizeof(float) * (*n + 1));
    qwen35_vec_move(m, v, 0, *n, h, false);
    return h;
}

/* logits of all T rows of ids through one chunked extend */
static float *extend_all(qwen35_model *m, const int32_t *ids, int T)
{
    int V = qwen35_config_of(m)->V;
    float *lg = malloc(sizeof(float) * (size_t)T * V);
    dllm_err err = {0};
    qwen35_cache *kc = qwen35_cache_new(m, T);
    ck_assert_msg(qwen35_extend(m, kc, ids, T, lg, true, &err) == 0, "%s", err.msg);
    qwen35_cache_free(kc);
    return lg;
}

START_TEST(test_forward_and_decode)
{
    qwen35_model *h, *d;
    pair(&h, &d, 3);
    int V = qwen35_config_of(h)->V, T = 70;
    int32_t *ids = random_ids(T, V, 4);
    float *lh = extend_all(h, ids, T), *ld = extend_all(d, ids, T);
    expect_nmse("chunked forward logits", ld, lh, (size_t)T * V, TOL_LOGITS);
    /* cached decoding: 5 tokens, then one at a time */
    dllm_err err = {0};
    qwen35_cache *kh = qwen35_cache_new(h, T), *kd = qwen35_cache_new(d, T);
    float *sh = malloc(sizeof(float) * V), *sd = malloc(sizeof(float) * V);
    ck_assert(qwen35_extend(h, kh, ids, 5, NULL, false, &err) == 0);
    ck_assert(qwen35_extend(d, kd, ids, 5, NULL, false, &err) == 0);
    for (int t = 5; t < T; t++) {
        ck_assert(qwen35_extend(h, kh, ids + t, 1, sh, false, &err) == 0);
        ck_assert(qwen35_extend(d, kd, ids + t, 1, sd, false, &err) == 0);
        expect_nmse("decode step logits", sd, sh, (size_t)V, TOL_LOGITS);
        /* the recurrent step against the chunked forward over the same history */
        expect_nmse("decode step = chunked row", sd, lh + (size_t)t * V, (size_t)V, TOL_LOGITS);
    }
    ck_assert_int_eq(qwen35_cache_len(kd), T);
    qwen35_cache_free(kh), qwen35_cache_free(kd);
    /* greedy ids */
    int32_t gh[24], gd[24];
    int nh = 0, nd = 0;
    ck_assert(qwen35_greedy(h, ids, 6, 24, -1, gh, &nh, &err) == 0);
    ck_assert(qwen35_greedy(d, ids, 6, 24, -1, gd, &nd, &err) == 0);
    ck_assert_int_eq(nh, nd);
    for (int i = 0; i < nh; i++)
        ck_assert_msg(gh[i] == gd[i], "greedy token %d: device %d, host %d", i, gd[i], gh[i]);
    free(ids), free(lh), free(ld), free(sh), free(sd);
    qwen35_free(h), qwen35_free(d);
}
END_TEST

/* The gradients of both models and their norm after one step; every state vector close. */
static void step_and_compare(qwen35_model *h, qwen35_model *d, const char *what)
{
    size_t n, n2;
    float *gh = state(h, QWEN35_VEC_GRADS, &n), *gd = state(d, QWEN35_VEC_GRADS, &n2);
    ck_assert_uint_eq(n, n2);
    char msg[96];
    snprintf(msg, sizeof msg, "%s: gradients", what);
    expect_nmse(msg, gd, gh, n, TOL_GRAD);
    dllm_adamw_args a = {.t = 1, .lr = 1e-2f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f,
                         .wd = 0.1f, .max_norm = 0.5};
    double nh = qwen35_optim_step(h, &a), nd = qwen35_optim_step(d, &a);
    ck_assert_msg(fabs(nh - nd) <= 1e-2 * nh, "%s: gradient norm %g, host %g", what, nd, nh);
    static const qwen35_vec v[] = {QWEN35_VEC_PARAMS, QWEN35_VEC_ADAM_M, QWEN35_VEC_ADAM_V};
    static const char *const names[] = {"parameters", "m", "v"};
    for (int i = 0; i < 3; i++) {
        float *sh = state(h, v[i], &n), *sd = state(d, v[i], &n2);
        snprintf(msg, sizeof msg, "%s: %s after a step", what, names[i]);
        expect_nmse(msg, sd, sh, n, i ? TOL_GRAD : TOL_STEP);
        free(sh), free(sd);
    }
    free(gh), free(gd);
}

START_TEST(test_train)
{
    qwen35_model *h, *d;
    pair(&h, &d, 5);
    int V = qwen35_config_of(h)->V, T = 67;
    int32_t *ids = random_ids(T, V, 6);
    double lh, ld;
    dllm_err err = {0};
    qwen35_zero_grad(h), qwen35_zero_grad(d);
    ck_assert(qwen35_loss_grad(h, ids, T, &lh, &err) == 0);
    ck_assert(qwen35_loss_grad(d, ids, T, &ld, &err) == 0);
    ck_assert_msg(fabs(lh - ld) <= 1e-4 * fabs(lh), "loss %.9g, host %.9g", ld, lh);
    step_and_compare(h, d, "next-token loss");
    /* a left-padded batch through the policy's forward and backward, some rows, on a fresh
     * pair (Adam's first step moves entries whose gradients are noise by up to lr: the
     * stepped pair differs more than one forward does) */
    qwen35_free(h), qwen35_free(d);
    pair(&h, &d, 5);
    const int B = 2, TT = 9;
    int32_t tok[18];
    uint8_t km[18];
    for (int i = 0; i < B * TT; i++)
        tok[i] = ids[i], km[i] = !(i < 3); /* row 0: 3 padding positions */
    int32_t rows[] = {4, 5, 8, 9, 13, 17, 1};
    int R = 7;
    float *fh = malloc(sizeof(float) * (size_t)R * V), *fd = malloc(sizeof(float) * (size_t)R * V);
    ck_assert(qwen35_forward(h, tok, km, B, TT, rows, R, fh, true, &err) == 0);
    ck_assert(qwen35_forward(d, tok, km, B, TT, rows, R, fd, true, &err) == 0);
    expect_nmse("batch logits", fd, fh, (size_t)R * V, TOL_LOGITS);
    for (int i = 0; i < V; i++) /* the padding position's row is zeros on both */
        ck_assert(fd[(size_t)6 * V + i] == 0.0f);
    float *dl = malloc(sizeof(float) * (size_t)R * V);
    dllm_rng r = dllm_rng_make(7, DLLM_RNG_INIT, 1, 0);
    for (size_t i = 0; i < (size_t)R * V; i++)
        dl[i] = (float)(0.1 * dllm_rng_normal(&r));
    qwen35_zero_grad(h), qwen35_zero_grad(d);
    qwen35_backward(h, dl);
    qwen35_backward(d, dl);
    step_and_compare(h, d, "batch backward");
    free(ids), free(fh), free(fd), free(dl);
    qwen35_free(h), qwen35_free(d);
}
END_TEST

START_TEST(test_lora)
{
    qwen35_model *h, *d;
    pair(&h, &d, 8);
    qwen35_lora_enable(h, 4, 8.0f, 0x3FF, 11);
    qwen35_lora_enable(d, 4, 8.0f, 0x3FF, 11);
    size_t n, n2;
    float *ph = state(h, QWEN35_VEC_PARAMS, &n), *pd = state(d, QWEN35_VEC_PARAMS, &n2);
    ck_assert_uint_eq(n, n2);
    ck_assert_msg(memcmp(ph, pd, n * sizeof(float)) == 0, "the adapters' draws differ");
    dllm_rng r = dllm_rng_make(12, DLLM_RNG_INIT, 2, 0);
    for (size_t i = 0; i < n; i++) /* B nonzero too: the adapters change the logits */
        ph[i] = (float)(0.05 * dllm_rng_normal(&r));
    qwen35_vec_move(h, QWEN35_VEC_PARAMS, 0, n, ph, true);
    qwen35_vec_move(d, QWEN35_VEC_PARAMS, 0, n, ph, true);
    int V = qwen35_config_of(h)->V, T = 40;
    int32_t *ids = random_ids(T, V, 13);
    float *lh = extend_all(h, ids, T), *ld = extend_all(d, ids, T);
    expect_nmse("LoRA logits", ld, lh, (size_t)T * V, TOL_LOGITS);
    double a, b;
    dllm_err err = {0};
    qwen35_zero_grad(h), qwen35_zero_grad(d);
    ck_assert(qwen35_loss_grad(h, ids, T, &a, &err) == 0);
    ck_assert(qwen35_loss_grad(d, ids, T, &b, &err) == 0);
    step_and_compare(h, d, "LoRA");
    /* the adapters saved from the device are the device's, bit for bit */
    char path[4200];
    snprintf(path, sizeof path, "%s/q35dev_adapter.safetensors", tu_dir);
    ck_assert_msg(qwen35_lora_save(d, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(qwen35_lora_load(h, path, &err) == 0, "%s", err.msg);
    free(pd);
    pd = state(d, QWEN35_VEC_PARAMS, &n2);
    free(ph);
    ph = state(h, QWEN35_VEC_PARAMS, &n);
    ck_assert(memcmp(ph, pd, n * sizeof(float)) == 0);
    /* and read back onto the device */
    qwen35_zero_grad(d);
    ck_assert_msg(qwen35_lora_load(d, path, &err) == 0, "%s", err.msg);
    free(pd);
    pd = state(d, QWEN35_VEC_PARAMS, &n2);
    ck_assert(memcmp(ph, pd, n * sizeof(float)) == 0);
    free(ph), free(pd), free(ids), free(lh), free(ld);
    qwen35_free(h), qwen35_free(d);
}
END_TEST

START_TEST(test_master_and_copies)
{
    qwen35_model *h, *d;
    pair(&h, &d, 14);
    int V = qwen35_config_of(h)->V, T = 33;
    int32_t *ids = random_ids(T, V, 15);
    /* the bf16 trainer: masters kept, weights rounded, a step on the masters */
    qwen35_keep_master(h), qwen35_keep_master(d);
    ck_assert(qwen35_has_master(d));
    qwen35_round_bf16(h), qwen35_round_bf16(d);
    float *lh = extend_all(h, ids, T), *ld = extend_all(d, ids, T);
    expect_nmse("bf16 trainer logits", ld, lh, (size_t)T * V, TOL_LOGITS);
    double a, b;
    dllm_err err = {0};
    qwen35_zero_grad(h), qwen35_zero_grad(d);
    ck_assert(qwen35_loss_grad(h, ids, T, &a, &err) == 0);
    ck_assert(qwen35_loss_grad(d, ids, T, &b, &err) == 0);
    step_and_compare(h, d, "bf16 trainer");
    /* the weights from the masters: what the parameters say, bit for bit */
    qwen35_weights_from_master(d);
    size_t n;
    float *p = state(d, QWEN35_VEC_PARAMS, &n), *w = state(d, QWEN35_VEC_WEIGHTS, &n);
    ck_assert(memcmp(p, w, n * sizeof(float)) == 0);
    free(p), free(w);
    free(lh), free(ld);
    /* the rollout copies on each side, from a fresh pair (see test_train) */
    qwen35_free(h), qwen35_free(d);
    pair(&h, &d, 14);
    static const char *const kinds[] = {"bf16", "fp8", "int8"};
    for (int k = 0; k < 3; k++) {
        qwen35_model *ch = qwen35_clone(h), *cd = qwen35_clone(d);
        ck_assert(qwen35_backend(cd) == dllm_backend_cuda());
        dllm_precision pr;
        ck_assert_int_eq(dllm_precision_parse(&pr, "fp32", kinds[k], NULL, NULL, false, &err), 0);
        if (k == 0) {
            qwen35_round_bf16(ch), qwen35_round_bf16(cd);
        } else {
            ck_assert_msg(qwen35_quantise(ch, &pr, &err) == 0, "%s", err.msg);
            ck_assert_msg(qwen35_quantise(cd, &pr, &err) == 0, "%s", err.msg);
        }
        float *qh = extend_all(ch, ids, T), *qd = extend_all(cd, ids, T);
        char msg[64];
        snprintf(msg, sizeof msg, "%s rollout copy logits", kinds[k]);
        /* FP8 GEMMs: the emulated accumulator (FP8_GEMM_NMSE), carried through the layers */
        expect_nmse(msg, qd, qh, (size_t)T * V, k == 1 ? 1e-3 : TOL_LOGITS);
        free(qh), free(qd);
        qwen35_free(ch), qwen35_free(cd);
    }
    /* refused: NVFP4 (no NVFP4 linear on the device), a second move */
    dllm_precision pr;
    ck_assert_int_eq(dllm_precision_parse(&pr, "fp32", "nvfp4", NULL, NULL, false, &err), 0);
    qwen35_model *cd = qwen35_clone(d);
    ck_assert_int_eq(qwen35_quantise(cd, &pr, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "nvfp4") != NULL, "%s", err.msg);
    qwen35_free(cd);
    ck_assert_int_eq(qwen35_to_backend(d, dllm_backend_cuda(), &err), 0); /* already there */
    ck_assert_int_eq(qwen35_to_backend(d, dllm_backend_cpu(), &err), DLLM_EXIT_INPUT);
    free(ids);
    qwen35_free(h), qwen35_free(d);
}
END_TEST

/* Rollouts through the policy (the AR sampler's loop over one cache per row, the choice
 * on the device's backend, only the step's tokens down) against the same policy on the
 * host: greedy and sampled tokens equal, their probabilities within 1e-4; a left-padded
 * prompt; the FP8 rollout copy runs there too. */
START_TEST(test_policy_rollouts)
{
    static const char *const prec[] = {"trainer", "fp8"};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < 2; s++) {
            dllm_policy *ph = NULL, *pd = NULL;
            dllm_err err = {0};
            dllm_policy_cfg c = {.preset = "tiny", .arch = "qwen3.5", .seed = 21,
                                 .trainer = "fp32", .rollout = prec[k]};
            ck_assert_msg(dllm_policy_open(&ph, &c, &err) == 0, "%s", err.msg);
            c.device = "cuda";
            ck_assert_msg(dllm_policy_open(&pd, &c, &err) == 0, "%s", err.msg);
            const int B = 3, P = 5;
            int32_t prompts[15];
            uint8_t pm[15];
            for (int i = 0; i < B * P; i++)
                prompts[i] = 3 + (i * 7) % 50, pm[i] = !(i < 2); /* row 0: 2 padding */
            dllm_sampler_cfg sc = {.gen_length = 24, .block_length = 24, .steps = 24,
                                   .temperature = s ? 0.9 : 0.0};
            dllm_rollout rh, rd;
            ck_assert_msg(dllm_policy_rollout(ph, prompts, pm, B, P, &sc, 1.0, 7, &rh, &err) == 0,
                          "%s", err.msg);
            ck_assert_msg(dllm_policy_rollout(pd, prompts, pm, B, P, &sc, 1.0, 7, &rd, &err) == 0,
                          "%s", err.msg);
            for (int i = 0; i < B * 24; i++) /* a probability of each chosen token */
                ck_assert(rd.commit_prob[i] > 0 && rd.commit_prob[i] <= 1);
            /* the FP8 copy: the device's FP8 GEMMs sum in another order than the CPU's
             * exact products (FP8_GEMM_NMSE), enough to flip a near-tied choice: checked
             * above for what it produced, not token for token */
            for (int i = 0; k == 0 && i < B * (P + 24); i++)
                ck_assert_msg(rh.tokens[i] == rd.tokens[i], "%s %s: token %d: device %d, host %d",
                              prec[k], s ? "sampled" : "greedy", i, rd.tokens[i], rh.tokens[i]);
            for (int i = 0; k == 0 && i < B * 24; i++)
                ck_assert_msg(fabs(rh.commit_prob[i] - rd.commit_prob[i]) <= 1e-4,
                              "%s: probability %d: device %g, host %g", prec[k], i,
                              rd.commit_prob[i], rh.commit_prob[i]);
            dllm_rollout_free(&rh), dllm_rollout_free(&rd);
            dllm_policy_free(ph), dllm_policy_free(pd);
        }
}
END_TEST

/* The commands with --device cuda / device=cuda: sft's checkpoint scored on both sides, RL
 * (configs/quickstart-qwen35.yaml, 2 steps) on the device. */
START_TEST(test_commands)
{
    const char *data = getenv("DLLM_TEST_DATA");
    ck_assert_int_eq(tu_sh("%s tasks sft-data sudoku --n 32 --seed 101 --max-blanks 4 > "
                           "%s/q35sft.jsonl", tu_bin(), tu_dir), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/q35sft.yaml", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "experiment: q35sft\nseed: 1\nmodel: {arch: qwen3.5, preset: tiny}\n"
               "data: {train: %s/q35sft.jsonl, max_len: 64}\nsft: {steps: 4, batch_size: 4}\n"
               "optim: {lr: 3e-3}\nlog: {dir: %s/q35runs, every: 2}\ncheckpoint: {every: 0}\n"
               "device: cuda\n",
            tu_dir, tu_dir);
    fclose(f);
    ck_assert_msg(tu_dllm("sft q35sft.yaml --quiet") == 0, "%s", tu_err);
    const char *ck = "q35runs/q35sft/ckpt/latest";
    double lp[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tu_dllm("score --model %s --prompt-ids 1,5,6 --completion-ids 7,0,9 %s",
                                 ck, i ? "--device cuda" : ""), 0);
        const char *v = strstr(tu_out, "\"seq_logp\":");
        ck_assert_msg(v != NULL, "%s", tu_out);
        lp[i] = strtod(v + strlen("\"seq_logp\":"), NULL);
    }
    ck_assert_msg(fabs(lp[1] - lp[0]) <= 1e-3 * fabs(lp[0]), "score: device %g, host %g", lp[1],
                  lp[0]);
    ck_assert_msg(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet --set "
                          "grpo.steps=2 --set grpo.prompts_per_step=2 --set rollout.group_size=2 "
                          "--set eval.every=2 --set eval.n=2 --set checkpoint.every=2 --set "
                          "task.train.n=16 --set log.dir=q35runs --set model.path=%s --set "
                          "device=cuda", data, ck) == 0, "%s", tu_err);
    ck_assert_int_eq(tu_dllm("inspect q35runs/quickstart-qwen35-rl --csv"), 0);
    const char *body = strchr(tu_out, '\n'); /* the values, past the header */
    ck_assert_msg(body && strchr(body + 1, '\n') && !strstr(body, "nan") && !strstr(body, "inf"),
                  "%s", tu_out);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!dllm_backend_cuda())
        return tu_skip(ctx, "no usable CUDA backend (%s)", dllm_backend_cuda_why());
    if (!tu_scratch(ctx))
        return NULL;
    Suite *s = suite_create("qwen35_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 900); /* the commands run whole SFT and RL runs emulated */
    tcase_add_test(tc, test_forward_and_decode);
    tcase_add_test(tc, test_train);
    tcase_add_test(tc, test_lora);
    tcase_add_test(tc, test_master_and_copies);
    tcase_add_test(tc, test_policy_rollouts);
    tcase_add_test(tc, test_commands);
    suite_add_tcase(s, tc);
    return s;
}
