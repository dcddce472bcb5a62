/* test_train: the training command end to end on a tiny random model.
 *  - SIGKILL mid-run, then --resume: the log equals an uninterrupted run's,
 *    every step exactly once, bit for bit (timings aside);
 *  - from the logged log_w, advantages and token log-ratios, the diagnostics
 *    rho_ess, delta, nu, alpha and every c_i recompute (docs/METHOD.md §5) with an
 *    implementation written here, independent of src/rl/corrections.c; the per-completion
 *    log_w_se is logged (0 for exact estimators) and frac_var_mc recomputes from it;
 *  - malformed configs exit with status 2 and file:line:col;
 *  - SFT data: EOS padding of answers to data.answer_length;
 *  - per-item eval outcomes: files that agree with the logged accuracy, and paired
 *    differences on a hand-computed case;
 *  - INT8 rollouts (channel and block scaling) under every correction: the run ends,
 *    log w is finite and not all zero (the INT8 copy is not the trainer), and the
 *    trainer arm of the same config logs w = 1; a bad rollout.int8.scaling exits 2;
 *  - the reference policy re-syncs inside the step; frac_masked_left matches the
 *    logged completions; AR decoding on the trainer's logits (eval.precision
 *    trainer) chooses what the KV-cached rollout chooses when the two agree;
 *  - grpo.random_drop on the reference arm: each step's frac_dropped is its share of
 *    logged coefficients 0, the rest 1; at 0 nothing is dropped; out of [0, 1) exits 2. */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "dllm/model_config.h"
#include "dllm/policy.h"
#include "dllm/policy_infer.h"
#include "dllm/safetensors.h"
#include "kernels/rng.h"
#include "dllm/tokenizer.h"
#include "src/log/eval_outcomes.h"
#include "src/log/h5log.h"
#include "src/rl/rl_run.h"
#include "src/data/sft_data.h"

#include <check.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

static char tmp[64];
static char model[128];

static void write_config(const char *name, const char *experiment, const char *extra)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "experiment: %s\n"
            "seed: 7\n"
            "model: {path: %s}\n"
            "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
            "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6,\n"
            "          temperature: 1.0}\n"
            "likelihood: {mc_samples: 2}\n"
            "grpo: {steps: 4, prompts_per_step: 2, inner_steps: 2}\n"
            "correction: %s\n"
            "optim: {lr: 3e-3}\n"
            "eval: {every: 2, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
            "log: {dir: %s/runs}\n"
            "checkpoint: {every: 1, keep: 2}\n",
            experiment, model, extra ? extra : "{method: ais, estimator: elbo}", tmp);
    fclose(f);
}

static void setup(void)
{
    strcpy(tmp, "/tmp/dllm-train-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(model, sizeof model, "%s/model", tmp);
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed 3 --out %s >/dev/null", tu_bin(),
                        model), 0);
}

static void teardown(void)
{
    tu_sh("rm -rf %s", tmp);
}

/* ---- reading a log ---------------------------------------------------------------- */

static double *read_col(const char *run, const char *dset, int64_t *n)
{
    return tu_log_column(dset, n, "%s/runs/%s/log.h5", tmp, run);
}

static float *read_tokens(const char *run, const char *dset, int64_t *rows, int64_t *cols)
{
    return tu_log_matrix(dset, H5T_NATIVE_FLOAT, sizeof(float), rows, cols,
                         "%s/runs/%s/log.h5", tmp, run);
}

static const char *const compared[] = {
    "steps/step", "steps/reward_mean", "steps/loss", "steps/grad_norm", "steps/alpha",
    "steps/rho_ess", "steps/delta", "steps/nu", "trajectories/step", "trajectories/reward",
    "trajectories/advantage", "trajectories/l_mu", "trajectories/l_pi", "trajectories/log_w",
    "trajectories/coef", "eval/sudoku/step", "eval/sudoku/accuracy", "eval/sudoku/reward_mean"};

START_TEST(sigkill_then_resume_is_bit_exact)
{
    write_config("a.yaml", "straight", NULL);
    write_config("b.yaml", "killed", NULL);
    ck_assert_int_eq(tu_sh("%s train %s/a.yaml --quiet --set grpo.steps=8", tu_bin(), tmp), 0);
    /* start b, kill it once a checkpoint (and maybe more) exists, at a varying point */
    pid_t pid = fork();
    if (pid == 0) {
        char cfg[256];
        snprintf(cfg, sizeof cfg, "%s/b.yaml", tmp);
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1);
        execl(tu_bin(), tu_bin(), "train", cfg, "--quiet", "--set", "grpo.steps=8", (char *)NULL);
        _exit(127);
    }
    char ck[256];
    snprintf(ck, sizeof ck, "%s/runs/killed/ckpt/step-2/state.json", tmp);
    for (int i = 0; i < 600000 && access(ck, F_OK); i++)
        usleep(100);
    usleep(1000 * (unsigned)(getpid() % 40)); /* a varying point inside a later step */
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st), "the run finished before it could be killed");
    ck_assert_int_eq(tu_sh("%s train --resume %s/runs/killed --quiet", tu_bin(), tmp), 0);
    for (size_t k = 0; k < sizeof compared / sizeof compared[0]; k++) {
        int64_t na, nb;
        double *a = read_col("straight", compared[k], &na);
        double *b = read_col("killed", compared[k], &nb);
        ck_assert_msg(na == nb, "%s: %lld rows vs %lld", compared[k], (long long)na, (long long)nb);
        for (int64_t i = 0; i < na; i++)
            ck_assert_msg(memcmp(&a[i], &b[i], sizeof(double)) == 0 || (isnan(a[i]) && isnan(b[i])),
                          "%s[%lld]: %.17g vs %.17g", compared[k], (long long)i, a[i], b[i]);
        free(a);
        free(b);
    }
    int64_t n;
    double *steps = read_col("killed", "steps/step", &n);
    ck_assert_int_eq(n, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_double_eq(steps[i], i + 1);
    free(steps);
}
END_TEST

/* rollout.batch (sequences decoded in turn) and train.micro_batch (canvases per forward)
 * change what is held at once, not the run: each sequence draws its own random stream
 * (keyed by its global index) and the chunks' gradients add up to the batch's. The same
 * completions and rewards; the losses and log-probs to summation order. */
START_TEST(rollout_and_micro_batches_keep_the_run)
{
    write_config("a.yaml", "whole", NULL);
    write_config("b.yaml", "chunked", NULL);
    ck_assert_int_eq(tu_sh("%s train %s/a.yaml --quiet --set grpo.steps=2", tu_bin(), tmp), 0);
    ck_assert_int_eq(tu_sh("%s train %s/b.yaml --quiet --set grpo.steps=2 --set rollout.batch=3 "
                           "--set train.micro_batch=3", tu_bin(), tmp), 0);
    static const char *const exact[] = {"trajectories/reward", "trajectories/advantage",
                                        "steps/reward_mean"};
    static const char *const close[] = {"trajectories/l_mu", "trajectories/l_pi", "steps/loss",
                                        "steps/grad_norm"};
    for (int pass = 0; pass < 2; pass++) {
        const char *const *cols = pass ? close : exact;
        const size_t nc = pass ? sizeof close / sizeof close[0] : sizeof exact / sizeof exact[0];
        for (size_t k = 0; k < nc; k++) {
            int64_t na, nb;
            double *a = read_col("whole", cols[k], &na);
            double *b = read_col("chunked", cols[k], &nb);
            ck_assert_msg(na == nb && na > 0, "%s: %lld rows vs %lld", cols[k], (long long)na,
                          (long long)nb);
            for (int64_t i = 0; i < na; i++)
                ck_assert_msg(pass ? fabs(a[i] - b[i]) <= 1e-5 * (1 + fabs(a[i])) : a[i] == b[i],
                              "%s[%lld]: %.17g vs %.17g", cols[k], (long long)i, a[i], b[i]);
            free(a);
            free(b);
        }
    }
}
END_TEST

/* docs/METHOD.md §5, written out again here in plain double arithmetic. */
START_TEST(diagnostics_recompute_from_the_log)
{
    /* noise none: the ESS and nu below are recomputed on the raw log-weights (the
     * de-noising is tested in test_corrections; frac_var_mc from the logged log_w_se in
     * log_w_se_per_trajectory) */
    /* _i: 0 LLaDA, 1 Dream (the log of either architecture recomputes alike) */
    const char *run = _i ? "recompute-dream" : "recompute";
    if (_i) {
        ck_assert_int_eq(tu_sh("%s init-model --arch dream --preset tiny --seed 3 --out %s/dream"
                               " >/dev/null", tu_bin(), tmp), 0);
        snprintf(model, sizeof model, "%s/dream", tmp);
    }
    write_config("c.yaml", run, "{method: ais, estimator: elbo, cap: 1.5,\n"
                                        "  ais: {weights: {reliability: 1, divergence: 2, variance: 1},"
                                        " tau_delta: 0.02, eta: 0.5, noise: none,"
                                        " population: all, variance: excess}}");
    ck_assert_int_eq(tu_sh("%s train %s/c.yaml --quiet", tu_bin(), tmp), 0);
    int64_t n, ns, rows, cols;
    double *tstep = read_col(run, "trajectories/step", &n);
    double *logw = read_col(run, "trajectories/log_w", &n);
    double *adv = read_col(run, "trajectories/advantage", &n);
    double *coef = read_col(run, "trajectories/coef", &n);
    double *clen = read_col(run, "trajectories/completion_len", &n);
    double *rho = read_col(run, "steps/rho_ess", &ns);
    double *delta = read_col(run, "steps/delta", &ns);
    double *nu = read_col(run, "steps/nu", &ns);
    double *alpha = read_col(run, "steps/alpha", &ns);
    float *d = read_tokens(run, "trajectories/token_log_ratio", &rows, &cols);
    ck_assert_int_eq(rows, n);
    ck_assert_int_gt(ns, 0);
    ck_assert_int_gt(n, 0);
    double alpha_prev = 0;
    for (int64_t s = 0; s < ns; s++) {
        double sw = 0, sw2 = 0, cnt = 0, dsum = 0, dn = 0;
        for (int64_t i = 0; i < n; i++) {
            if (tstep[i] != s + 1)
                continue;
            double w = exp(logw[i]);
            sw += w;
            sw2 += w * w;
            cnt++;
            double m = 0;
            int k = 0;
            for (int t = 0; t < (int)clen[i]; t++)
                if (!isnan(d[i * cols + t])) {
                    m += fabs(d[i * cols + t]);
                    k++;
                }
            if (k) {
                dsum += m / k;
                dn++;
            }
        }
        double ess = sw * sw / sw2, mw = sw / cnt;
        double ex_wa = 0, ex_wa2 = 0, ex_w2 = 0, ea = 0, ea2 = 0;
        for (int64_t i = 0; i < n; i++) {
            if (tstep[i] != s + 1)
                continue;
            double wt = exp(logw[i]) / mw;
            ex_wa += wt * adv[i] / cnt;
            ex_wa2 += wt * wt * adv[i] * adv[i] / cnt;
            ex_w2 += wt * wt / cnt;
            ea += adv[i] / cnt;
            ea2 += adv[i] * adv[i] / cnt;
        }
        double var_a = ea2 - ea * ea;
        double nu_ = var_a > 1e-12 ? (ex_wa2 - ex_wa * ex_wa) / (ex_w2 * var_a) : 1;
        double dl = dn ? dsum / dn : 0;
        double s_rel = cnt > 1 ? (cnt - ess) / (cnt - 1) : 0, s_div = 1 - exp(-dl / 0.02);
        double s_var = 1 - 1 / fmax(nu_, 1);
        double raw = fmin(1, fmax(0, (s_rel + 2 * s_div + s_var) / 4));
        double a = 0.5 * alpha_prev + 0.5 * raw;
        ck_assert_msg(fabs(rho[s] - ess / cnt) < 1e-9, "step %lld rho %g vs %g", (long long)s + 1, rho[s], ess / cnt);
        ck_assert_msg(fabs(delta[s] - dl) < 1e-6, "step %lld delta %g vs %g", (long long)s + 1, delta[s], dl);
        ck_assert_msg(fabs(nu[s] - nu_) < 1e-6 * fmax(1, nu_), "step %lld nu %g vs %g", (long long)s + 1, nu[s], nu_);
        ck_assert_msg(fabs(alpha[s] - a) < 1e-6, "step %lld alpha %g vs %g", (long long)s + 1, alpha[s], a);
        for (int64_t i = 0; i < n; i++)
            if (tstep[i] == s + 1) {
                double c = (1 - a) + a * fmin(exp(logw[i]), 1.5);
                ck_assert_msg(fabs(coef[i] - c) < 1e-9, "c_%lld %.12g vs %.12g", (long long)i, coef[i], c);
            }
        alpha_prev = alpha[s];
    }
    free(tstep);
    free(logw);
    free(adv);
    free(coef);
    free(clen);
    free(rho);
    free(delta);
    free(nu);
    free(alpha);
    free(d);
}
END_TEST

START_TEST(reference_arm_has_unit_weights)
{
    write_config("r.yaml", "reference", "{method: is}");
    ck_assert_int_eq(tu_sh("%s train %s/r.yaml --quiet --set rollout.precision=trainer --set grpo.steps=1"
                        " --set task.reward=correct", tu_bin(), tmp), 0);
    int64_t n;
    double *logw = read_col("reference", "trajectories/log_w", &n);
    double *coef = read_col("reference", "trajectories/coef", &n);
    double *reward = read_col("reference", "trajectories/reward", &n);
    double *se = read_col("reference", "trajectories/log_w_se", &n);
    ck_assert_int_gt(n, 0);
    for (int64_t i = 0; i < n; i++) {
        ck_assert(logw[i] == 0.0);
        ck_assert(se[i] == 0.0); /* the same masks on the same weights: no noise either */
        ck_assert(coef[i] == 1.0);
        ck_assert(reward[i] == 0.0 || reward[i] == 1.0); /* task.reward: correct */
    }
    free(logw);
    free(coef);
    free(reward);
    free(se);
}
END_TEST

/* rollout.precision int8 is one more rollout copy: every correction runs on it, and its
 * log w, the INT8 copy against the fp32 trainer, is finite, small and not all zero. */
START_TEST(int8_rollouts_under_every_correction)
{
    static const char *const methods[] = {"none", "is", "tis", "mis", "fixed", "ais"};
    const char *m = methods[_i];
    char exp[32], corr[96];
    snprintf(exp, sizeof exp, "int8-%s", m);
    snprintf(corr, sizeof corr, "{method: %s, estimator: one_step}", m);
    write_config("i8.yaml", exp, corr);
    ck_assert_int_eq(tu_sh("%s train %s/i8.yaml --quiet --set rollout.precision=int8 --set "
                           "grpo.steps=2 --set rollout.int8.scaling=%s --set eval.every=0",
                           tu_bin(), tmp, _i % 2 ? "block" : "channel"),
                     0);
    int64_t n;
    double *logw = read_col(exp, "trajectories/log_w", &n);
    ck_assert_int_gt(n, 0);
    double big = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(logw[i]), "%s: log_w[%lld] = %g", m, (long long)i, logw[i]);
        big = fmax(big, fabs(logw[i]));
    }
    ck_assert_msg(big > 0 && big < 5, "%s: max |log w| %g", m, big);
    free(logw);
}
END_TEST

/* trajectories/log_w_se, the Monte Carlo standard error of each completion's log w:
 * one row per completion; > 0 for elbo with 2 samples (a completion of at least two
 * tokens is scored by two different mask subsets); the step's log_w_mc_se is its mean
 * and frac_var_mc = min(1, S/V) recomputes from it and log_w (docs/METHOD.md §5: V the
 * population variance of the step's log w, S the mean of se^2; sequence level; every
 * completion diagnosed: the random model's rewards are rarely informative). */
START_TEST(log_w_se_per_trajectory)
{
    write_config("se.yaml", "se", "{method: ais, estimator: elbo, level: sequence, ais: {population: all}}");
    ck_assert_int_eq(tu_sh("%s train %s/se.yaml --quiet --set eval.every=0", tu_bin(), tmp), 0);
    int64_t n, n2, n3, ns, nm;
    double *tstep = read_col("se", "trajectories/step", &n);
    double *logw = read_col("se", "trajectories/log_w", &n2);
    double *se = read_col("se", "trajectories/log_w_se", &n3);
    double *clen = read_col("se", "trajectories/completion_len", &n2);
    double *frac = read_col("se", "steps/frac_var_mc", &ns);
    double *mc_se = read_col("se", "steps/log_w_mc_se", &nm);
    ck_assert_int_eq(ns, 4);
    ck_assert_int_eq(n, 4 * 2 * 4); /* steps x prompts x group */
    ck_assert_int_eq(n3, n);
    ck_assert_int_eq(n2, n);
    int positive = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(se[i]) && se[i] >= 0, "row %lld: se %g", (long long)i, se[i]);
        ck_assert(isfinite(logw[i]));
        if (clen[i] >= 2) {
            ck_assert_msg(se[i] > 0, "row %lld (%g tokens): se 0", (long long)i, clen[i]);
            positive++;
        }
    }
    ck_assert_int_gt(positive, n / 2);
    for (int64_t s = 0; s < ns; s++) {
        double cnt = 0, m = 0, se_sum = 0, se2 = 0;
        for (int64_t i = 0; i < n; i++)
            if (tstep[i] == s + 1) {
                cnt++;
                m += logw[i];
                se_sum += se[i];
                se2 += se[i] * se[i];
            }
        ck_assert(cnt == 8);
        m /= cnt;
        double V = 0;
        for (int64_t i = 0; i < n; i++)
            if (tstep[i] == s + 1)
                V += (logw[i] - m) * (logw[i] - m) / cnt;
        double want = V > 0 ? fmin(1.0, (se2 / cnt) / V) : 0.0;
        ck_assert_msg(fabs(frac[s] - want) <= 1e-9 * fmax(1.0, want),
                      "step %lld frac_var_mc %.12g vs %.12g", (long long)s + 1, frac[s], want);
        ck_assert_msg(fabs(mc_se[s] - se_sum / cnt) <= 1e-12 * fmax(1.0, mc_se[s]),
                      "step %lld log_w_mc_se %.12g vs %.12g", (long long)s + 1, mc_se[s], se_sum / cnt);
    }
    /* a deterministic estimator: no Monte Carlo noise, se 0 and frac_var_mc 0 */
    write_config("se1.yaml", "se-one-step", "{method: ais, estimator: one_step, ais: {population: all}}");
    ck_assert_int_eq(tu_sh("%s train %s/se1.yaml --quiet --set eval.every=0 --set grpo.steps=1",
                           tu_bin(), tmp), 0);
    double *se1 = read_col("se-one-step", "trajectories/log_w_se", &n3);
    double *frac1 = read_col("se-one-step", "steps/frac_var_mc", &ns);
    ck_assert_int_eq(n3, 8);
    for (int64_t i = 0; i < n3; i++)
        ck_assert_msg(se1[i] == 0.0, "one_step row %lld: se %g", (long long)i, se1[i]);
    ck_assert(frac1[0] == 0.0);
    free(tstep);
    free(logw);
    free(se);
    free(clen);
    free(frac);
    free(mc_se);
    free(se1);
    free(frac1);
}
END_TEST

/* At level token the logged coef is the mean of the completion's token coefficients:
 * for tis each is min(w_t, cap) (w_t = exp(d_t)) over its scored tokens, so the column is
 * defined (before, it was left uninitialised) and recomputes from token_log_ratio. */
START_TEST(token_level_coef_is_the_token_mean)
{
    write_config("t.yaml", "toklevel", "{method: tis, level: token, cap: 1.5, estimator: one_step}");
    ck_assert_int_eq(tu_sh("%s train %s/t.yaml --quiet --set grpo.steps=1 --set grpo.ratio=token"
                           " --set grpo.logp_estimator=one_step", tu_bin(), tmp), 0);
    int64_t n, rows, cols;
    double *coef = read_col("toklevel", "trajectories/coef", &n);
    float *d = read_tokens("toklevel", "trajectories/token_log_ratio", &rows, &cols);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(rows, n);
    int checked = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        int k = 0;
        for (int64_t t = 0; t < cols; t++)
            if (isfinite(d[i * cols + t])) {
                double w = exp((double)d[i * cols + t]);
                s += w < 1.5 ? w : 1.5;
                k++;
            }
        if (!k) {
            ck_assert(isnan(coef[i]));
            continue;
        }
        ck_assert_msg(fabs(coef[i] - s / k) < 1e-5 * (1 + fabs(s / k)), "row %lld: %g vs %g",
                      (long long)i, coef[i], s / k);
        checked++;
    }
    ck_assert_int_gt(checked, 0);
    free(coef);
    free(d);
}
END_TEST

static void expect_config_error(const char *yaml, const char *needle)
{
    char path[256], out[256];
    snprintf(path, sizeof path, "%s/bad.yaml", tmp);
    snprintf(out, sizeof out, "%s/bad.err", tmp);
    FILE *f = fopen(path, "w");
    fputs(yaml, f);
    fclose(f);
    ck_assert_int_eq(tu_sh("%s train %s 2>%s >/dev/null", tu_bin(), path, out), 2);
    char *msg = NULL;
    size_t len = 0;
    FILE *e = fopen(out, "r");
    ck_assert_int_ge(getdelim(&msg, &len, '\0', e), 0);
    fclose(e);
    ck_assert_msg(strstr(msg, needle), "'%s' not in: %s", needle, msg);
    free(msg);
}

START_TEST(bad_configs_exit_2_with_position)
{
    expect_config_error("grpo:\n  stepz: 3\n", "bad.yaml:2:3: unknown key 'grpo.stepz'");
    expect_config_error("rollout: {precision: fp4}\n", "rollout.precision must be one of trainer|bf16|fp8");
    expect_config_error("grpo: {clip_eps: -1}\n", "grpo.clip_eps = -1 is out of range");
    expect_config_error("rollout: {precision: int8, int8: {scaling: tensor}}\n",
                        "rollout.int8.scaling must be one of channel|block");
    expect_config_error("rollout: {precision: nvfp4, nvfp4: {scaling: block}}\n",
                        "rollout.nvfp4.scaling must be one of block16|block32|channel|tensor");
    expect_config_error("correction: {level: token, estimator: one_step}\n",
                        "correction.level: token needs grpo.ratio token");
    expect_config_error("task: {train: {path: /nonexistent/train.jsonl}}\n", "task.train.path");
    expect_config_error("seed: [1\n", "bad.yaml:2:1: YAML syntax error");
    expect_config_error("model: {path: /nonexistent/model}\n", "model.path");
}
END_TEST

/* A random model samples ids past the char tokenizer's 103 (its embedding has
 * 128 rows): generated text skips them instead of failing. The printed text is the
 * decoding of the completion's ids inside the vocabulary (up to its EOS, special
 * tokens dropped), and some seed samples an id outside it. */
START_TEST(generate_text_with_a_padded_vocabulary)
{
    char tokp[256];
    snprintf(tokp, sizeof tokp, "%s/tokenizer.json", model);
    dllm_tokenizer *tok;
    dllm_err err = {0};
    dllm_model_config mc;
    ck_assert_msg(dllm_config_load(&mc, model, &err) == 0, "%s", err.msg);
    ck_assert_msg(dllm_tokenizer_load(&tok, tokp, &err) == 0, "%s", err.msg);
    const int32_t nv = (int32_t)dllm_tokenizer_vocab_size(tok);
    int outside = 0;
    for (int seed = 1; seed <= 4; seed++) {
        const char *args = "--prompt 12 --gen-length 16 --block-length 16 --steps 16 --temperature 1";
        ck_assert_int_eq(tu_sh("%s generate --model %s %s --seed %d >%s/gen.txt", tu_bin(), model, args,
                               seed, tmp), 0);
        ck_assert_int_eq(tu_sh("%s generate --model %s %s --seed %d --format json >%s/gen.json", tu_bin(),
                               model, args, seed, tmp), 0);
        char *text = tu_slurp("%s/gen.txt", tmp);
        json_error_t je;
        char jp[256];
        snprintf(jp, sizeof jp, "%s/gen.json", tmp);
        json_t *j = json_load_file(jp, 0, &je);
        ck_assert_msg(text && j, "seed %d: no output (%s)", seed, je.text);
        json_t *ids = json_object_get(j, "ids");
        int len = (int)json_integer_value(json_object_get(j, "completion_length"));
        ck_assert_int_eq(json_array_size(ids), 16);
        ck_assert(len >= 0 && len <= 16);
        int32_t kept[16];
        size_t nk = 0;
        for (int i = 0; i < 16; i++) {
            int32_t id = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
            ck_assert(id >= 0 && id < mc.embedding_size);
            outside += id >= nv;
            if (i < len && id < nv && !(i == len - 1 && id == mc.eos_token_id))
                kept[nk++] = id;
        }
        char *want;
        size_t wl;
        ck_assert_msg(dllm_tokenizer_decode(tok, kept, nk, true, &want, &wl, &err) == 0, "%s", err.msg);
        ck_assert_msg(strlen(text) == wl + 1 && !memcmp(text, want, wl) && text[wl] == '\n',
                      "seed %d: printed \"%s\", the ids decode to \"%s\"", seed, text, want);
        ck_assert_str_eq(json_string_value(json_object_get(j, "text")), want);
        free(want);
        free(text);
        json_decref(j);
    }
    ck_assert_msg(outside > 0, "no id past the tokenizer's %d was sampled: the case is not exercised",
                  nv);
    dllm_tokenizer_free(tok);
}
END_TEST

/* data.answer_length: [BOS] prompt answer EOS EOS... with exactly answer_len
 * answer tokens; an answer that does not fit (with its EOS) names file:line. */
START_TEST(sft_answers_pad_to_answer_length)
{
    char path[256], tokp[256];
    snprintf(path, sizeof path, "%s/pairs.jsonl", tmp);
    snprintf(tokp, sizeof tokp, "%s/tokenizer.json", model);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"prompt\": \"12\", \"answer\": \"345\"}\n\n{\"prompt\": \"1\", \"answer\": \"6\"}\n", f);
    fclose(f);
    dllm_err err = {0};
    dllm_model_config mc;
    dllm_tokenizer *tok;
    ck_assert_msg(dllm_config_load(&mc, model, &err) == 0, "%s", err.msg);
    ck_assert_msg(dllm_tokenizer_load(&tok, tokp, &err) == 0, "%s", err.msg);
    sft_dataset ds;
    for (int pad = 0; pad <= 6; pad += 6) {
        ck_assert_msg(sft_data_load(&ds, path, tok, &mc, 64, pad, false, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(ds.n, 2);
        const int plen[2] = {3, 2}, alen[2] = {3, 1};
        for (int i = 0; i < 2; i++) {
            const sft_example *e = &ds.ex[i];
            ck_assert_int_eq(e->prompt_len, plen[i]);
            ck_assert_int_eq(e->len, plen[i] + (pad ? pad : alen[i] + 1));
            ck_assert_int_eq(e->ids[0], mc.bos_token_id);
            for (int t = plen[i]; t < plen[i] + alen[i]; t++)
                ck_assert_int_ne(e->ids[t], mc.eos_token_id);
            for (int t = plen[i] + alen[i]; t < e->len; t++)
                ck_assert_int_eq(e->ids[t], mc.eos_token_id);
        }
        ck_assert_int_eq(ds.max_len, pad ? 3 + pad : 7);
        sft_data_free(&ds);
    }
    /* "345" + EOS is 4 tokens: 3 is too few, and the error names line 1 */
    ck_assert_int_eq(sft_data_load(&ds, path, tok, &mc, 64, 3, false, &err), 2);
    ck_assert_msg(strstr(err.msg, "pairs.jsonl:1:") && strstr(err.msg, "data.answer_length 3"), "%s",
                  err.msg);
    /* max_len counts the padding */
    ck_assert_int_eq(sft_data_load(&ds, path, tok, &mc, 8, 6, false, &err), 2);
    ck_assert_msg(strstr(err.msg, "exceed data.max_len 8"), "%s", err.msg);
    dllm_tokenizer_free(tok);
}
END_TEST

/* a = 1 1 0 0 1, b = 1 0 1 0 0: d = 0 1 -1 0 1, mean 0.2, sample var
 * (0.04 + 0.64 + 1.44 + 0.04 + 0.64) / 4 = 0.7, se = sqrt(0.7 / 5). */
START_TEST(paired_eval_outcomes)
{
    const uint8_t a[5] = {1, 1, 0, 0, 1}, b[5] = {1, 0, 1, 0, 0};
    dllm_err err = {0};
    char dir_a[256], dir_b[256], pa[512], pb[512];
    snprintf(dir_a, sizeof dir_a, "%s/ra", tmp);
    snprintf(dir_b, sizeof dir_b, "%s/rb", tmp);
    ck_assert_int_eq(mkdir(dir_a, 0777) | mkdir(dir_b, 0777), 0);
    ck_assert_int_eq(eval_outcomes_write(dir_a, "sudoku", 0, b, 5, 0xabc, &err), 0);
    ck_assert_int_eq(eval_outcomes_write(dir_a, "sudoku", 30, a, 5, 0xabc, &err), 0);
    ck_assert_int_eq(eval_outcomes_write(dir_a, "sudoku", 4, a, 5, 0xabc, &err), 0);
    ck_assert_int_eq(eval_outcomes_write(dir_b, "sudoku", 7, b, 5, 0xdef, &err), 0);
    ck_assert_int_eq(eval_outcomes_find(dir_a, "sudoku", true, pa, sizeof pa), 0);
    ck_assert_msg(strstr(pa, "sudoku-step-30.txt"), "%s", pa); /* 30 > 4 numerically */
    ck_assert_int_eq(eval_outcomes_find(dir_a, "sudoku", false, pb, sizeof pb), 0);
    ck_assert_msg(strstr(pb, "sudoku-step-0.txt"), "%s", pb);
    ck_assert_int_eq(eval_outcomes_find(dir_a, "gsm8k", true, pb, sizeof pb), 1);
    eval_outcomes oa, ob;
    ck_assert_int_eq(eval_outcomes_read(pa, &oa, &err), 0);
    eval_outcomes_find(dir_a, "sudoku", false, pb, sizeof pb);
    ck_assert_int_eq(eval_outcomes_read(pb, &ob, &err), 0);
    ck_assert_int_eq(oa.step, 30);
    ck_assert_int_eq(oa.items, 0xabc);
    eval_paired p;
    ck_assert_int_eq(eval_outcomes_pair(&oa, &ob, &p, &err), 0);
    ck_assert_double_eq_tol(p.a, 0.6, 1e-15);
    ck_assert_double_eq_tol(p.b, 0.4, 1e-15);
    ck_assert_double_eq_tol(p.diff, 0.2, 1e-15);
    ck_assert_double_eq_tol(p.se, sqrt(0.7 / 5), 1e-12);
    ck_assert_int_eq(p.only_a, 2);
    ck_assert_int_eq(p.only_b, 1);
    eval_outcomes_free(&ob);
    /* another eval set: refused */
    eval_outcomes_find(dir_b, "sudoku", true, pb, sizeof pb);
    ck_assert_int_eq(eval_outcomes_read(pb, &ob, &err), 0);
    ck_assert_int_eq(eval_outcomes_pair(&oa, &ob, &p, &err), 2);
    ck_assert_msg(strstr(err.msg, "different items"), "%s", err.msg);
    eval_outcomes_free(&oa);
    eval_outcomes_free(&ob);
    /* a truncated file names its line */
    FILE *f = fopen(pb, "w");
    fputs("# dllm-rl eval outcomes: task sudoku, step 7, n 3, items 0000000000000def\n1\n", f);
    fclose(f);
    ck_assert_int_eq(eval_outcomes_read(pb, &ob, &err), 2);
    ck_assert_msg(strstr(err.msg, "sudoku-step-7.txt:3: expected 0 or 1"), "%s", err.msg);
    /* inspect --against compares the latest evals: needs a log.h5 */
    ck_assert_int_eq(tu_sh("%s inspect %s --against %s >/dev/null 2>%s/err.txt", tu_bin(), dir_a, dir_b,
                           tmp), 2);
    char *msg = tu_slurp("%s/err.txt", tmp);
    ck_assert_msg(msg && strstr(msg, dir_a) && strstr(msg, "log.h5"), "%s", msg);
    free(msg);
}
END_TEST

/* every eval of a run leaves its per-item outcomes; they agree with the log */
START_TEST(eval_outcomes_match_the_log)
{
    write_config("c.yaml", "outcomes", NULL);
    ck_assert_int_eq(tu_sh("%s train %s/c.yaml --quiet", tu_bin(), tmp), 0);
    int64_t n;
    double *acc = read_col("outcomes", "eval/sudoku/accuracy", &n);
    double *step = read_col("outcomes", "eval/sudoku/step", &n);
    ck_assert_int_eq(n, 3); /* steps 0, 2, 4 */
    for (int64_t e = 0; e < n; e++) {
        char p[512];
        snprintf(p, sizeof p, "%s/runs/outcomes/eval/sudoku-step-%.0f.txt", tmp, step[e]);
        eval_outcomes o;
        dllm_err err = {0};
        ck_assert_msg(eval_outcomes_read(p, &o, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(o.n, 4);
        int ok = 0;
        for (size_t i = 0; i < o.n; i++)
            ok += o.ok[i];
        ck_assert_double_eq_tol(ok / 4.0, acc[e], 1e-12);
        eval_outcomes_free(&o);
    }
    free(acc);
    free(step);
    /* a run against itself: no difference, and inspect says so */
    char run[256];
    snprintf(run, sizeof run, "%s/runs/outcomes", tmp);
    ck_assert_int_eq(tu_sh("%s inspect %s --against %s | grep -q '^sudoku .* +0.0000 '", tu_bin(), run,
                        run), 0);
}
END_TEST

/* the log's git_revision is the build's, as `dllm-rl --version` prints it */
START_TEST(log_records_the_build_revision)
{
    write_config("c.yaml", "revision", "{method: none}");
    ck_assert_int_eq(tu_sh("env -u DLLM_GIT_REVISION %s train %s/c.yaml --quiet --set grpo.steps=1"
                        " --set eval.every=0", tu_bin(), tmp), 0);
    char cmd[512], line[256] = "";
    snprintf(cmd, sizeof cmd, "%s --version", tu_bin());
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    pclose(p);
    char *open = strchr(line, '('), *close = strrchr(line, ')');
    ck_assert_msg(open && close && close > open + 1, "--version: %s", line);
    *close = '\0';
    char path[256];
    snprintf(path, sizeof path, "%s/runs/revision/log.h5", tmp);
    h5log *log;
    dllm_err err = {0};
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(h5log_get_meta(log)->git_revision, open + 1);
    h5log_close(log);
}
END_TEST

/* grpo.ref_sync_every: the step re-syncs the reference, the checkpoint records when */
START_TEST(reference_resyncs_in_the_step)
{
    write_config("k.yaml", "refsync", "{method: none}");
    ck_assert_int_eq(tu_sh("%s train %s/k.yaml --quiet --set grpo.beta=0.01 --set grpo.ref_sync_every=3"
                        " --set eval.every=0", tu_bin(), tmp), 0);
    ck_assert_int_eq(tu_sh("grep -q '\"ref_synced_at\": 3' %s/runs/refsync/ckpt/step-4/state.json", tmp), 0);
    ck_assert_int_eq(tu_sh("grep -q '\"ref_synced_at\": 3' %s/runs/refsync/ckpt/step-3/state.json", tmp), 0);
    int64_t n;
    double *kl = read_col("refsync", "steps/policy_kl", &n);
    ck_assert_int_eq(n, 4);
    for (int64_t i = 0; i < n; i++)
        ck_assert(isfinite(kl[i]) && kl[i] >= 0);
    free(kl);
}
END_TEST

/* frac_masked_left = completion tokens equal to the mask id / all generated positions */
START_TEST(frac_masked_left_matches_the_completions)
{
    write_config("m.yaml", "masked", "{method: none}");
    ck_assert_int_eq(tu_sh("%s train %s/m.yaml --quiet --set eval.every=0 --set grpo.steps=3"
                        " --set rollout.temperature=3 --set rollout.mask_token=allow", tu_bin(), tmp), 0);
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_msg(dllm_config_load(&mc, model, &err) == 0, "%s", err.msg);
    int64_t n, rows, cols;
    double *frac = read_col("masked", "steps/frac_masked_left", &n);
    ck_assert_int_eq(n, 3);
    float *tok = read_tokens("masked", "/trajectories/completion_tokens", &rows, &cols);
    const int64_t per_step = 2 * 4; /* prompts_per_step x group_size */
    ck_assert_int_eq(rows, n * per_step);
    ck_assert_int_eq(cols, 12);
    for (int64_t s = 0; s < n; s++) {
        long masked = 0;
        for (int64_t k = s * per_step * cols; k < (s + 1) * per_step * cols; k++)
            masked += tok[k] == (float)mc.mask_token_id;
        ck_assert_msg(frac[s] == (double)masked / (double)(per_step * cols), "step %lld: %g vs %ld",
                      (long long)s + 1, frac[s], masked);
    }
    free(frac);
    free(tok);
}
END_TEST

/* Evaluation decodes at eval.precision: with the rollout copy equal to the
 * trainer, AR decoding on the trainer's logits chooses the tokens the policy's
 * KV-cached rollout chooses, greedy and sampled (same choice rule and stream). */
START_TEST(ar_decoding_on_trainer_logits)
{
    char qm[256];
    snprintf(qm, sizeof qm, "%s/qwen", tmp);
    ck_assert_int_eq(tu_sh("%s init-model --arch qwen3 --preset tiny --seed 5 --out %s >/dev/null", tu_bin(),
                        qm), 0);
    dllm_cfg cfg;
    dllm_err err = {0};
    dllm_cfg_defaults(&cfg);
    char set[400];
    snprintf(set, sizeof set, "model.path=%s", qm);
    const char *sets[] = {set, "task.name=sudoku", "task.format=plain", "task.chat=plain",
                          "task.train.n=16", "eval.n=4", "rollout.precision=trainer",
                          "rollout.gen_length=10", "rollout.block_length=10", "rollout.steps=10"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(dllm_cfg_set(&cfg, sets[i], &err) == 0, "%s", err.msg);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/arrun", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    rl_run run;
    ck_assert_msg(rl_run_open(&run, &cfg, dir, &err) == 0, "%s", err.msg);
    const int B = 3, P = 6;
    int32_t prompts[3 * 6];
    uint8_t pm[3 * 6];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++) {
            prompts[b * P + t] = t < b ? 0 : 10 + (7 * b + 3 * t) % 60; /* left padding */
            pm[b * P + t] = t >= b;
        }
    for (int k = 0; k < 2; k++) {
        dllm_sampler_cfg sc = run.sampler;
        sc.temperature = k ? 1.0 : 0.0;
        dllm_rollout a, c;
        ck_assert_msg(rl_generate(run.pol, DLLM_PREC_TRAIN_NOGRAD, prompts, pm, B, P, &sc, 1.0, 11, &a,
                                  &err) == 0, "%s", err.msg);
        ck_assert_msg(rl_generate(run.pol, DLLM_PREC_ROLLOUT, prompts, pm, B, P, &sc, 1.0, 11, &c,
                                  &err) == 0, "%s", err.msg);
        for (int i = 0; i < B * (P + sc.gen_length); i++)
            ck_assert_msg(a.tokens[i] == c.tokens[i], "temperature %g, position %d: %d vs %d",
                          sc.temperature, i, a.tokens[i], c.tokens[i]);
        for (int i = 0; i < B * sc.gen_length; i++) {
            ck_assert_int_eq(a.commit_step[i], c.commit_step[i]);
            ck_assert_float_eq_tol(a.commit_prob[i], c.commit_prob[i], 1e-4);
        }
        dllm_rollout_free(&a);
        dllm_rollout_free(&c);
    }
    rl_run_close(&run);
}
END_TEST

/* log softmax(z)[x] in double */
static double log_softmax_at(const float *z, int V, int x)
{
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, z[v]);
    for (int v = 0; v < V; v++)
        s += exp(z[v] - mx);
    return z[x] - mx - log(s);
}

/* The one-step log-probs (completion fully masked, prompt clean) of comp after prompt,
 * from one forward of the policy's trainer view. */
static void one_step_logp(dllm_policy *p, const int32_t *prompt, int P, const int32_t *comp, int L,
                          double *out)
{
    const dllm_model_config *mc = dllm_policy_config(p);
    const int V = mc->embedding_size, T = P + L;
    int32_t tok[64], rows[64];
    ck_assert_int_le(T, 64);
    for (int t = 0; t < T; t++)
        tok[t] = t < P ? prompt[t] : mc->mask_token_id;
    for (int i = 0; i < L; i++)
        rows[i] = P + i;
    float *z = malloc(sizeof *z * (size_t)L * V);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
    ck_assert_int_eq(fn(ctx, tok, NULL, 1, T, rows, L, z), 0);
    for (int i = 0; i < L; i++)
        out[i] = log_softmax_at(z + (size_t)i * V, V, comp[i]);
    free(z);
}

/* Moves every trainable value of a checkpoint (optimizer.safetensors' "trainable", from
 * which a run is restored: here the LoRA A and B) by random amounts: a GRPO step of a
 * random model has no reward, so its adapter stays at PEFT's B = 0 and merging would
 * change nothing. */
static void perturb_trainable(const char *path)
{
    st_archive *a;
    dllm_err err = {0};
    ck_assert_msg(st_open(&a, path, &err) == 0, "%s", err.msg);
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    dllm_rng r = dllm_rng_make(5, 0, 0, 0);
    int moved = 0;
    for (int i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        float *x = malloc(sizeof *x * (size_t)t->numel);
        ck_assert_msg(st_read_f32(a, t->name, t->shape, t->ndim, x, &err) == 0, "%s", err.msg);
        if (!strcmp(t->name, "trainable")) {
            for (int64_t k = 0; k < t->numel; k++)
                x[k] += (float)(0.05 * dllm_rng_normal(&r));
            moved++;
        }
        ck_assert_msg(st_writer_add_f32(w, t->name, t->dtype, t->ndim, t->shape, x, &err) == 0,
                      "%s", err.msg);
        free(x);
    }
    st_close(a);
    ck_assert_int_eq(moved, 1);
    ck_assert_msg(st_writer_save_file(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
}

/* dllm-rl export (its own command file): merged weights of the latest checkpoint;
 * an adapter of a full fine-tune and an unknown dtype are input errors naming the flag.
 * A LoRA run's merged export scores (one step, `score`) what the base model with the
 * exported adapter scores, and not what the base alone does. */
START_TEST(export_latest_checkpoint)
{
    write_config("e.yaml", "exported", "{method: none}");
    ck_assert_int_eq(tu_sh("%s train %s/e.yaml --quiet --set grpo.steps=1 --set eval.every=0", tu_bin(), tmp),
                     0);
    ck_assert_int_eq(tu_sh("%s export %s/runs/exported --merged --out %s/merged >/dev/null", tu_bin(), tmp,
                        tmp), 0);
    ck_assert_int_eq(tu_sh("test -s %s/merged/config.json && test -s %s/merged/model.safetensors && "
                        "cmp -s %s/merged/tokenizer.json %s/runs/exported/ckpt/step-1/tokenizer.json",
                        tmp, tmp, tmp, tmp), 0);
    ck_assert_int_eq(tu_sh("%s export %s/runs/exported --adapter --out %s/ad 2>%s/err.txt", tu_bin(), tmp,
                        tmp, tmp), 2);
    char *msg = tu_slurp("%s/err.txt", tmp);
    ck_assert_msg(msg && strstr(msg, "exported was trained without LoRA: use --merged"), "%s", msg);
    free(msg);
    ck_assert_int_eq(tu_sh("%s export %s/runs/exported --merged --dtype f16 --out %s/m16 2>%s/err.txt",
                        tu_bin(), tmp, tmp, tmp), 2);
    msg = tu_slurp("%s/err.txt", tmp);
    ck_assert_msg(msg && strstr(msg, "--dtype") && strstr(msg, "f16"), "%s", msg);
    free(msg);
    ck_assert_int_eq(tu_sh("test ! -e %s/ad && test ! -e %s/m16", tmp, tmp), 0);

    /* LoRA: merged = base + adapter */
    write_config("l.yaml", "lora", "{method: none}");
    ck_assert_int_eq(tu_sh("%s train %s/l.yaml --quiet --set grpo.steps=1 --set eval.every=0"
                           " --set model.lora.rank=4 --set model.lora.alpha=8", tu_bin(), tmp), 0);
    char ad[256];
    snprintf(ad, sizeof ad, "%s/runs/lora/ckpt/latest/optimizer.safetensors", tmp);
    perturb_trainable(ad);
    ck_assert_int_eq(tu_sh("%s export %s/runs/lora --merged --out %s/lmerged >/dev/null", tu_bin(), tmp,
                           tmp), 0);
    ck_assert_int_eq(tu_sh("%s export %s/runs/lora --adapter --out %s/ladapter >/dev/null", tu_bin(), tmp,
                           tmp), 0);
    const int32_t prompt[4] = {1, 23, 24, 25}, comp[5] = {30, 31, 32, 33, 0};
    ck_assert_int_eq(tu_sh("%s score --model %s/lmerged --prompt-ids 1,23,24,25 --completion-ids "
                           "30,31,32,33,0 --estimator one_step >%s/score.json", tu_bin(), tmp, tmp), 0);
    char sp[256];
    snprintf(sp, sizeof sp, "%s/score.json", tmp);
    json_error_t je;
    json_t *js = json_load_file(sp, 0, &je);
    ck_assert_msg(js, "score: %s", je.text);
    dllm_policy_cfg pc = {.path = model};
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_infer_cfg(&pc, "fp32", "precision", &err), 0);
    dllm_policy *p;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    double base_lp[5], lora_lp[5];
    one_step_logp(p, prompt, 4, comp, 5, base_lp);
    snprintf(ad, sizeof ad, "%s/ladapter", tmp);
    ck_assert_msg(dllm_policy_load_adapter(p, ad, &err) == 0, "%s", err.msg);
    one_step_logp(p, prompt, 4, comp, 5, lora_lp);
    double moved = 0;
    json_t *tl = json_object_get(js, "token_logp");
    ck_assert_int_eq(json_array_size(tl), 5);
    for (int i = 0; i < 5; i++) {
        double got = json_number_value(json_array_get(tl, (size_t)i));
        ck_assert_msg(fabs(got - lora_lp[i]) < 1e-4, "token %d: merged %.7f, base + adapter %.7f", i,
                      got, lora_lp[i]);
        moved = fmax(moved, fabs(lora_lp[i] - base_lp[i]));
    }
    ck_assert_msg(moved > 1e-3, "the adapter changed nothing (%g)", moved);
    dllm_policy_free(p);
    json_decref(js);
}
END_TEST

START_TEST(random_drop_zeroes_logged_coefficients)
{
    const double ps[2] = {0.5, 0.0};
    for (int k = 0; k < 2; k++) {
        char exp[32];
        snprintf(exp, sizeof exp, "drop%d", k);
        write_config("drop.yaml", exp, "{method: none, estimator: one_step}");
        ck_assert_int_eq(tu_sh("%s train %s/drop.yaml --quiet --set rollout.precision=trainer "
                               "--set grpo.random_drop=%g --set eval.every=0 --set "
                               "checkpoint.every=0", tu_bin(), tmp, ps[k]), 0);
        int64_t ns, nt, nc;
        double *step = read_col(exp, "steps/step", &ns);
        double *frac = read_col(exp, "steps/frac_dropped", &ns);
        double *tstep = read_col(exp, "trajectories/step", &nt);
        double *coef = read_col(exp, "trajectories/coef", &nc);
        ck_assert_int_eq(ns, 4);
        ck_assert_int_eq(nt, nc);
        long zeros = 0;
        for (int64_t s = 0; s < ns; s++) {
            int n = 0, z = 0;
            for (int64_t i = 0; i < nt; i++)
                if (tstep[i] == step[s]) {
                    n++;
                    z += coef[i] == 0.0;
                    ck_assert_msg(coef[i] == 0.0 || coef[i] == 1.0, "coef %g", coef[i]);
                }
            ck_assert_int_eq(n, 8);
            ck_assert_msg(frac[s] == (double)z / n, "p %g step %g: frac_dropped %g, %d of %d "
                          "coefficients 0", ps[k], step[s], frac[s], z, n);
            zeros += z;
        }
        if (ps[k] > 0)
            ck_assert_msg(zeros > 0 && zeros < nt, "p %g: %ld of %lld dropped", ps[k], zeros,
                          (long long)nt);
        else
            ck_assert_int_eq(zeros, 0);
        free(step);
        free(frac);
        free(tstep);
        free(coef);
    }
    const char *bad[2] = {"1", "-0.1"};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(tu_sh("%s train %s/drop.yaml --quiet --set grpo.random_drop=%s "
                               "--set experiment=bad%d 2>%s/drop.err", tu_bin(), tmp, bad[k], k,
                               tmp), 2);
        char *errs = tu_slurp("%s/drop.err", tmp);
        ck_assert_msg(errs && strstr(errs, "grpo.random_drop"), "%s", errs ? errs : "");
        free(errs);
    }
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sigkill_then_resume_is_bit_exact);
    tcase_add_test(tc, rollout_and_micro_batches_keep_the_run);
    tcase_add_loop_test(tc, diagnostics_recompute_from_the_log, 0, 2);
    tcase_add_test(tc, reference_arm_has_unit_weights);
    tcase_add_loop_test(tc, int8_rollouts_under_every_correction, 0, 6);
    tcase_add_test(tc, token_level_coef_is_the_token_mean);
    tcase_add_test(tc, log_w_se_per_trajectory);
    tcase_add_test(tc, bad_configs_exit_2_with_position);
    tcase_add_test(tc, generate_text_with_a_padded_vocabulary);
    tcase_add_test(tc, sft_answers_pad_to_answer_length);
    tcase_add_test(tc, paired_eval_outcomes);
    tcase_add_test(tc, eval_outcomes_match_the_log);
    tcase_add_test(tc, log_records_the_build_revision);
    tcase_add_test(tc, reference_resyncs_in_the_step);
    tcase_add_test(tc, frac_masked_left_matches_the_completions);
    tcase_add_test(tc, ar_decoding_on_trainer_logits);
    tcase_add_test(tc, export_latest_checkpoint);
    tcase_add_test(tc, random_drop_zeroes_logged_coefficients);
    suite_add_tcase(s, tc);
    return s;
}
