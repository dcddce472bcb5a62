/* test_random_init: RL from a freshly initialised tiny LLaDA. Such a model
 * puts real mass on the mask id, so the published sampler (mask_token =
 * allow) leaves positions masked; every estimator must take those rollouts.
 *  - library: allow leaves holes, forbid none; one_step, elbo and trajectory
 *    plans over the holey rollouts build and evaluate to finite estimates;
 *  - end to end: `dllm-rl train` (the quickstart's settings on a shorter
 *    canvas: one block, two commits per step; one GRPO step) from
 *    `init-model --preset tiny --seed 1|2|3` with each estimator (and one_step
 *    at the token level) exits 0, its log has finite l_pi and log_w, and the
 *    rollouts did hold masked positions (else this test would prove nothing). */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "dllm/lik_plan.h"
#include "dllm/llada.h"
#include "dllm/sampler.h"
#include "src/log/h5log.h"

#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[64];

static void setup(void)
{
    strcpy(tmp, "/tmp/dllm-rinit-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    for (int s = 1; s <= 3; s++)
        ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed %d --out %s/m%d >/dev/null",
                            tu_bin(), s, tmp, s),
                         0);
}

static void teardown(void)
{
    tu_sh("rm -rf %s", tmp);
}

static int fwd(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
               const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward(m, tokens, keymask, B, T, rows, n_rows, logits);
}

enum { NB = 8, NP = 6, NG = 16 };

START_TEST(holey_rollouts_are_estimated)
{
    int holes_total = 0;
    for (int s = 1; s <= 3; s++) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/m%d", tmp, s);
        dllm_tf *m = NULL;
        dllm_err err = {0};
        ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s", err.msg);
        const dllm_model_config *mc = dllm_tf_config(m);
        int32_t prompts[NB * NP];
        for (int i = 0; i < NB * NP; i++)
            prompts[i] = 3 + (i * 7 + s) % 20;
        dllm_sampler_cfg sc = {.gen_length = NG, .block_length = NG, .steps = 8, .temperature = 1.0,
                               .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id,
                               .eot_id = -1, .vocab = mc->embedding_size};
        dllm_rollout ro, rf;
        ck_assert_int_eq(dllm_sample(fwd, m, prompts, NULL, NB, NP, &sc, 1, &ro, &err), 0);
        sc.mask_token = DLLM_MASK_TOKEN_FORBID;
        ck_assert_int_eq(dllm_sample(fwd, m, prompts, NULL, NB, NP, &sc, 1, &rf, &err), 0);
        int32_t gen[NB * NG];
        int L[NB];
        for (int b = 0; b < NB; b++) {
            ck_assert_int_eq(rf.n_masked_left[b], 0);
            holes_total += ro.n_masked_left[b];
            memcpy(gen + b * NG, ro.tokens + (size_t)b * (NP + NG) + NP, sizeof *gen * NG);
            L[b] = dllm_completion_length(gen + b * NG, NG, mc->eos_token_id);
        }
        dllm_estimator kinds[3] = {EST_ONE_STEP, EST_ELBO, EST_TRAJECTORY};
        for (int k = 0; k < 3; k++) {
            dllm_lik_cfg lc = {.kind = kinds[k], .mc = 2, .shrink = 2, .temperature = 1.0,
                               .mask_id = mc->mask_token_id, .vocab = mc->embedding_size};
            dllm_lik_plan p;
            ck_assert_msg(dllm_lik_plan_build(&p, &lc, prompts, NULL, gen, L, ro.commit_step, NB, NP, NG,
                                              1, 1, 0, &err) == 0,
                          "seed %d %s: %s", s, dllm_estimator_name(kinds[k]), err.msg);
            double seq[NB];
            ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, m, 8, seq, NULL, NULL, NULL, &err), 0);
            for (int b = 0; b < NB; b++)
                ck_assert_msg(isfinite(seq[b]) && seq[b] <= 0, "seed %d %s row %d: %g", s,
                              dllm_estimator_name(kinds[k]), b, seq[b]);
            dllm_lik_plan_free(&p);
        }
        dllm_rollout_free(&ro);
        dllm_rollout_free(&rf);
        dllm_tf_free(m);
    }
    ck_assert_msg(holes_total > 0, "no rollout left a position masked: the test exercises nothing");
}
END_TEST

static double *read_col(const char *run, const char *dset, int64_t *n)
{
    return tu_log_column(dset, n, "%s/runs/%s/log.h5", tmp, run);
}

/* Logged completion tokens equal to id (padding past a row's length is -1). */
static int count_token(const char *run, int id)
{
    int64_t rows, cols;
    int32_t *v = tu_log_matrix("trajectories/completion_tokens", H5T_NATIVE_INT32,
                               sizeof(int32_t), &rows, &cols, "%s/runs/%s/log.h5", tmp, run);
    int n = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        n += v[i] == id;
    free(v);
    return n;
}

START_TEST(train_from_fresh_models)
{
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/rl.yaml", tmp);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "experiment: fresh\n"
            "seed: 1\n"
            "model: {path: %s/m1}\n"
            "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 8,"
            " reward: correct}\n"
            "rollout: {precision: fp8, group_size: 4, gen_length: 16, block_length: 16, steps: 8,\n"
            "          temperature: 1.0, mask_token: allow}\n"
            "likelihood: {mc_samples: 2, shrink: 2}\n"
            "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1, ratio: sequence}\n"
            "correction: {method: ais, level: sequence, cap: 2.0}\n"
            "optim: {lr: 1e-4}\n"
            "eval: {every: 0, n: 1, gen_length: 16, block_length: 16, steps: 8, temperature: 0}\n"
            "log: {dir: %s/runs}\n"
            "checkpoint: {every: 0, keep: 1}\n",
            tmp, tmp);
    fclose(f);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/m1", tmp);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s", err.msg);
    const int mask_id = dllm_tf_config(m)->mask_token_id;
    dllm_tf_free(m);
    /* each estimator at the sequence level, and one_step's token-level ratio
     * and weights (holes are NaN tokens there) */
    const char *est[4] = {"trajectory", "elbo", "one_step", "one_step"};
    const char *extra[4] = {"", "", "", " --set grpo.ratio=token --set correction.level=token"};
    int masked = 0;
    for (int s = 1; s <= 3; s++)
        for (int e = 0; e < 4; e++) {
            char run[64];
            snprintf(run, sizeof run, "s%d-%s%s", s, est[e], e == 3 ? "-token" : "");
            /* one thread: a dozen short runs, on a machine that may be busy */
            ck_assert_msg(tu_sh("OMP_NUM_THREADS=1 %s train %s --quiet --set experiment=%s --set model.path=%s/m%d"
                             " --set grpo.logp_estimator=%s --set correction.estimator=%s%s",
                             tu_bin(), cfg, run, tmp, s, est[e], est[e], extra[e]) == 0,
                          "seed %d, estimator %s%s: train failed", s, est[e], extra[e]);
            int64_t n, n2;
            double *lpi = read_col(run, "trajectories/l_pi", &n);
            double *logw = read_col(run, "trajectories/log_w", &n2);
            ck_assert_int_eq(n, 8);
            ck_assert_int_eq(n2, 8);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(isfinite(lpi[i]) && isfinite(logw[i]), "%s row %d", run, (int)i);
            free(lpi);
            free(logw);
            masked += count_token(run, mask_id);
        }
    ck_assert_msg(masked > 0, "no logged completion held a masked position: the test exercises nothing");
    /* the RL default, forbid: the same model never leaves a position masked */
    ck_assert_msg(tu_sh("OMP_NUM_THREADS=1 %s train %s --quiet --set experiment=forbid --set model.path=%s/m2"
                     " --set grpo.logp_estimator=trajectory --set correction.estimator=trajectory"
                     " --set rollout.mask_token=forbid",
                     tu_bin(), cfg, tmp) == 0, "forbid: train failed");
    ck_assert_int_eq(count_token("forbid", mask_id), 0);
    int64_t n;
    double *left = read_col("forbid", "steps/frac_masked_left", &n);
    ck_assert_int_eq(n, 1);
    ck_assert(left[0] == 0.0);
    free(left);
}
END_TEST

/* init-model's size overrides: a LLaDA of d_model 96, 3 layers, 6 heads (head_dim 16)
 * and an MLP of 256 loads with those sizes and the parameter count they imply, and its
 * forward is finite; sizes that do not fit (a head count that does not divide d_model or
 * is not a multiple of the key/value heads, a zero, a resized qwen3.5) exit 2 and write
 * nothing. */
START_TEST(resized_models)
{
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --d-model 96 --layers 3 "
                           "--heads 6 --mlp-hidden 256 --seed 4 --out %s/r >/dev/null",
                           tu_bin(), tmp), 0);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/r", tmp);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s", err.msg);
    const dllm_model_config *c = dllm_tf_config(m);
    ck_assert_int_eq(c->d_model, 96);
    ck_assert_int_eq(c->n_layers, 3);
    ck_assert_int_eq(c->n_heads, 6);
    ck_assert_int_eq(c->n_kv_heads, 6);
    ck_assert_int_eq(c->head_dim, 16);
    ck_assert_int_eq(c->mlp_hidden, 256);
    /* embedding and head 128 x 96, final norm; per layer 4 x 96 x 96, 3 x 96 x 256, 2 norms */
    const dllm_param *ps;
    int np = dllm_tf_params(m, &ps);
    int64_t n = 0;
    for (int i = 0; i < np; i++) {
        int64_t k = 1;
        for (int d = 0; d < ps[i].ndim; d++)
            k *= ps[i].shape[d];
        n += k;
    }
    ck_assert_int_eq(n, 2 * 128 * 96 + 96 + 3 * (4 * 96 * 96 + 3 * 96 * 256 + 2 * 96));
    int32_t tok[2 * 10];
    for (int i = 0; i < 20; i++)
        tok[i] = 3 + i % 50;
    float *lg = malloc(sizeof(float) * 20 * 128);
    ck_assert_int_eq(dllm_tf_forward_nograd(m, tok, NULL, 2, 10, NULL, 20, lg), 0);
    for (int i = 0; i < 20 * 128; i++)
        ck_assert(isfinite(lg[i]));
    free(lg);
    dllm_tf_free(m);
    static const char *const bad[] = {"--arch llada --heads 5",           /* 64 % 5 */
                                      "--arch qwen3 --heads 8 --kv-heads 3", /* 8 % 3 */
                                      "--arch llada --layers 0",
                                      "--arch llada --mlp-hidden x",
                                      "--arch qwen3.5 --layers 3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(tu_sh("%s init-model --preset tiny %s --out %s/bad 2>/dev/null", tu_bin(),
                            bad[i], tmp) == 2, "%s: not refused with exit 2", bad[i]);
        ck_assert_msg(tu_sh("test -e %s/bad", tmp) != 0, "%s: wrote the output", bad[i]);
    }
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("random_init");
    TCase *tc = tcase_create("fresh");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, holey_rollouts_are_estimated);
    tcase_add_test(tc, train_from_fresh_models);
    tcase_add_test(tc, resized_models);
    suite_add_tcase(s, tc);
    return s;
}
