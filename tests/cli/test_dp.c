/* test_dp: data parallelism on the CPU backend. `mpirun -np 2 dllm-rl train`
 * with grpo.prompts_per_step split across the ranks must log the same run as
 * one rank with the same global batch: identical rollouts and rewards (every
 * draw is keyed by the global sequence index), and losses, gradients and
 * diagnostics equal to floating-point tolerance (all-reduce order). The
 * rollout copy is bf16 rather than FP8: after the first update the ranks'
 * weights differ in the last bit (gradient sums in another order), and an FP8
 * code can flip on that, moving one log w by ~1e-3; bf16's steps are 256x
 * finer. A rank that fails alone once the ranks have agreed on the setup (here its
 * model has no weights) ends the job (MPI_Abort) instead of leaving the other waiting
 * in its next collective: the job exits non-zero within the time limit, saying which
 * rank failed and why. SKIP (77) when built without MPI or when mpirun is missing. */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


static double *col(const char *run, const char *dset, int64_t *n)
{
    return tu_log_column(dset, n, "%s/runs/%s/log.h5", tu_dir, run);
}

START_TEST(two_ranks_match_one)
{
    const char *bin = getenv("DLLM_BIN");
    ck_assert_ptr_nonnull(bin);
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed 5 --out %s/model >/dev/null",
                        bin, tu_dir), 0);
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/dp.yaml", tu_dir);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "seed: 3\nmodel: {path: %s/model}\n"
               "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
               "rollout: {precision: bf16, group_size: 4, gen_length: 12, block_length: 6, steps: 6,"
               " temperature: 1.0}\n"
               "likelihood: {mc_samples: 2}\n"
               "grpo: {steps: 3, prompts_per_step: 4, inner_steps: 2}\n"
               "correction: {method: ais, estimator: elbo}\n"
               "optim: {lr: 3e-3}\n"
               "eval: {every: 3, n: 6, gen_length: 12, block_length: 6, steps: 6}\n"
               "log: {dir: %s/runs}\n", tu_dir, tu_dir);
    fclose(f);
    ck_assert_int_eq(tu_sh("OMP_NUM_THREADS=1 %s train %s --quiet --set experiment=one", bin, cfg), 0);
    ck_assert_int_eq(tu_sh("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 "
                        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                        "mpirun --oversubscribe -np 2 %s train %s --quiet --set experiment=two",
                        bin, cfg), 0);
    /* identical: every draw keyed by global indices; close: all-reduced sums */
    static const struct { const char *name; double tol; } cols[] = {
        {"trajectories/reward", 0}, {"trajectories/advantage", 0}, {"trajectories/prompt_index", 0},
        {"trajectories/completion_len", 0}, {"trajectories/l_mu", 1e-4}, {"trajectories/l_pi", 1e-4},
        {"trajectories/log_w", 1e-3}, {"trajectories/coef", 1e-3}, {"steps/reward_mean", 0},
        {"steps/loss", 1e-5}, {"steps/grad_norm", 1e-4}, {"steps/rho_ess", 1e-6},
        {"steps/alpha", 1e-5}, {"steps/delta", 1e-5}, {"eval/sudoku/accuracy", 0}};
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
        int64_t na, nb;
        double *a = col("one", cols[k].name, &na), *b = col("two", cols[k].name, &nb);
        ck_assert_msg(na == nb && na > 0, "%s: %lld vs %lld rows", cols[k].name, (long long)na,
                      (long long)nb);
        for (int64_t i = 0; i < na; i++) {
            double tol = cols[k].tol * fmax(1, fabs(a[i]));
            ck_assert_msg(fabs(a[i] - b[i]) <= tol || (isnan(a[i]) && isnan(b[i])),
                          "%s[%lld]: one rank %.17g, two ranks %.17g", cols[k].name, (long long)i,
                          a[i], b[i]);
        }
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(one_rank_fails_alone)
{
    const char *bin = getenv("DLLM_BIN");
    ck_assert_ptr_nonnull(bin);
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed 5 --out %s/m2 >/dev/null"
                           " && cp -r %s/m2 %s/broken && rm %s/broken/model.safetensors",
                           bin, tu_dir, tu_dir, tu_dir, tu_dir), 0);
#define FAIL_YAML                                                                                \
    "seed: 3\nmodel: {path: %s/%s}\n"                                                            \
    "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"           \
    "rollout: {precision: bf16, group_size: 4, gen_length: 12, block_length: 6, steps: 6, "      \
    "temperature: 1.0}\n"                                                                       \
    "grpo: {steps: 3, prompts_per_step: 4, inner_steps: 1}\n"                                    \
    "eval: {every: 0}\nlog: {dir: %s/runs}\n"
    for (int k = 0; k < 2; k++) {
        char cfg[256];
        snprintf(cfg, sizeof cfg, "%s/%s.yaml", tu_dir, k ? "bad" : "good");
        FILE *f = fopen(cfg, "w");
        fprintf(f, FAIL_YAML, tu_dir, k ? "broken" : "m2", tu_dir);
        fclose(f);
    }
    /* rank 0 passes every check and starts; rank 1's model fails to open */
    int rc = tu_sh("OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 "
                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun --oversubscribe "
                   "-np 1 %s train %s/good.yaml --quiet --set experiment=fail : "
                   "-np 1 %s train %s/bad.yaml --quiet --set experiment=fail > %s/fail.out 2>&1",
                   bin, tu_dir, bin, tu_dir, tu_dir);
    ck_assert_msg(rc != 0 && rc != 124, "exit status %d (124: the job hung)", rc);
    ck_assert_int_eq(tu_sh("grep -q 'rank 1 of 2 failed' %s/fail.out", tu_dir), 0);
    ck_assert_int_eq(tu_sh("grep -q 'model.safetensors' %s/fail.out", tu_dir), 0);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
#ifndef HAVE_MPI
    return tu_skip(ctx, "built without MPI (configure found no ompi-c)");
#else
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        return tu_skip(ctx, "mpirun not found (apt-get install openmpi-bin)");
    if (!tu_scratch(ctx))
        return NULL;
    Suite *s = suite_create("data_parallel");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, two_ranks_match_one);
    tcase_add_test(tc, one_rank_fails_alone);
    suite_add_tcase(s, tc);
    return s;
#endif
}
