/* test_sweep: `dllm-rl sweep` end to end on a tiny random model, and its parts.
 *  - 2 arms x 2 seeds, 2 GRPO steps each, run to completion after the sweep was
 *    stopped (SIGTERM) once its first run had finished: the restart finishes the
 *    rest and leaves the finished run's files untouched (bytes and mtimes);
 *  - summary.csv's rows agree with the logs read here (steps, final accuracy and
 *    its standard error, mean alpha and rho_ess, mean |log w|), the per-arm rows
 *    with the mean of the runs; --summary rebuilds the same files from the run
 *    directories; --dry-run lists the runs as done; runs start grid point by grid
 *    point (both arms of seed 1 first); --arms runs and lists one arm's runs only and
 *    names an arm the file lacks (exit 2);
 *  - a run that fails is reported (exit status 1, `failed (exit 2)` in the
 *    summary) while the others finish;
 *  - bad sweep files: file:line:col for unknown keys, bad override keys and values,
 *    a grid that is not a list, YAML syntax errors; exit status 2 from the CLI;
 *  - every shipped sweep file (configs/sweeps) loads and expands;
 *  - the collapse step on hand-made accuracy curves. */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "src/sweep/sweep_file.h"
#include "src/sweep/sweep_summary.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmp[64];

static void write_file(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void write_file(const char *name, const char *fmt, ...)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void setup(void)
{
    strcpy(tmp, "/tmp/dllm-sweep-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed 3 --out %s/model >/dev/null",
                        tu_bin(), tmp), 0);
    write_file("base.yaml",
               "experiment: x\n"
               "seed: 7\n"
               "model: {path: %s/model}\n"
               "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
               "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6,\n"
               "          temperature: 1.0}\n"
               "likelihood: {mc_samples: 2}\n"
               "grpo: {steps: 5, prompts_per_step: 2, inner_steps: 1}\n"
               /* all completions: the tiny runs' groups are mostly flat, and the
                * summary's means are checked as numbers */
               "correction: {method: ais, estimator: elbo, ais: {population: all}}\n"
               "optim: {lr: 3e-3}\n"
               "eval: {every: 1, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
               "log: {dir: %s/runs}\n"
               "checkpoint: {every: 1, keep: 2}\n",
               tmp, tmp);
}

static void teardown(void)
{
    tu_sh("rm -rf %s", tmp);
}

/* ---- the run directories ------------------------------------------------------------ */

/* the run's newest checkpoint step (0: none) */
static int latest_step(const char *run)
{
    char p[512], t[64];
    snprintf(p, sizeof p, "%s/runs/tiny/%s/ckpt/latest", tmp, run);
    ssize_t k = readlink(p, t, sizeof t - 1);
    if (k <= 0)
        return 0;
    t[k] = '\0';
    return atoi(t + 5);
}

static bool run_done(const char *run)
{
    return latest_step(run) == 2;
}

typedef struct {
    char *bytes;
    size_t len;
    struct timespec mtime;
} file_state;

static file_state state_of(const char *run, const char *file)
{
    char p[512];
    snprintf(p, sizeof p, "%s/runs/tiny/%s/%s", tmp, run, file);
    file_state s = {0};
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    s.mtime = st.st_mtim;
    s.bytes = tu_slurp_n(&s.len, "%s", p);
    return s;
}

static void check_unchanged(const file_state *a, const file_state *b, const char *what)
{
    ck_assert_msg(a->len == b->len && !memcmp(a->bytes, b->bytes, a->len), "%s changed", what);
    ck_assert_msg(a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec,
                  "%s was rewritten", what);
}

static double *read_col(const char *run, const char *dset, int64_t *n)
{
    return tu_log_column(dset, n, "%s/runs/tiny/%s/log.h5", tmp, run);
}

static double mean_of(const double *v, int64_t n, bool absolute)
{
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += absolute ? fabs(v[i]) : v[i];
            k++;
        }
    return s / (double)k;
}

/* the summary's numbers are printed with 6 significant digits */
static void check_num(const char *field, double want, const char *what)
{
    if (isnan(want)) { /* no finite value to average: the summary leaves the field empty */
        ck_assert_msg(!field[0], "%s: %s, expected empty", what, field);
        return;
    }
    ck_assert_msg(field[0], "%s: empty, expected %g", what, want);
    const double got = strtod(field, NULL);
    ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want) + 1e-12, "%s: %s vs %.9g", what, field, want);
}

/* splits a CSV line (no quoting in these) into at most 32 fields */
static int split(char *line, char **f)
{
    int n = 0;
    f[n++] = line;
    for (char *c = line; *c && n < 32; c++)
        if (*c == ',') {
            *c = '\0';
            f[n++] = c + 1;
        }
    return n;
}

/* in the summary's order (arms outer); they run grid point by grid point */
static const char *const RUNS[4] = {"reference_seed=1", "reference_seed=2", "fp8-ais_seed=1",
                                    "fp8-ais_seed=2"};
static const int RUN_ORDER[4] = {0, 2, 1, 3};

START_TEST(sweep_stops_restarts_and_summarises)
{
    write_file("sweep.yaml",
               "name: tiny\n"
               "base: base.yaml\n"
               "set: {grpo.steps: 2}\n"
               "arms:\n"
               "  - {name: reference, rollout.precision: trainer, correction.method: none}\n"
               "  - {name: fp8-ais, rollout.precision: fp8, correction: {method: ais, cap: .inf}}\n"
               "grid:\n"
               "  seed: [1, 2]\n");
    char sweep[256], out[256];
    snprintf(sweep, sizeof sweep, "%s/sweep.yaml", tmp);
    snprintf(out, sizeof out, "%s/first.out", tmp);
    /* the sweep, stopped once its first run is done */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        freopen(out, "w", stdout);
        execl(tu_bin(), tu_bin(), "sweep", sweep, "--jobs", "1", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 6000 && !run_done(RUNS[0]); i++)
        usleep(10000);
    ck_assert_msg(run_done(RUNS[0]), "the first run did not finish");
    /* stop it while the second run (the other arm of seed 1) is between its
     * checkpoints, if we catch it */
    for (int i = 0; i < 5000 && latest_step(RUNS[RUN_ORDER[1]]) == 0; i++)
        usleep(1000);
    kill(pid, SIGTERM);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0); /* stopped, not finished */
    char *first = tu_slurp("%s", out); /* seed 1's other arm ran second */
    ck_assert_msg(strstr(first, "[1/4] start reference_seed=1\n") &&
                      strstr(first, "[2/4] start fp8-ais_seed=1\n"), "run order:\n%s", first);
    free(first);
    int done_before = 0;
    bool resumable[4], was_done[4];
    for (int r = 0; r < 4; r++) {
        was_done[r] = run_done(RUNS[r]);
        done_before += was_done[r];
        resumable[r] = latest_step(RUNS[r]) == 1;
    }
    ck_assert_msg(done_before < 4, "the sweep finished before it could be stopped");
    file_state log0 = state_of(RUNS[0], "log.h5"), cfg0 = state_of(RUNS[0], "config.yaml");
    file_state tl0 = state_of(RUNS[0], "train.log");

    /* again: the rest is finished, the first run untouched */
    ck_assert_int_eq(tu_sh("%s sweep %s --jobs 2 > %s/second.out", tu_bin(), sweep, tmp), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/second.out", tmp);
    char *second = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(second, "skip reference_seed=1 (done)"));
    /* a run stopped after its first checkpoint continues from it */
    for (int r = 1; r < 4; r++) {
        char line[128];
        if (was_done[r])
            snprintf(line, sizeof line, "skip %s (done)\n", RUNS[r]);
        else
            snprintf(line, sizeof line, "] %s %s\n", resumable[r] ? "resume" : "start", RUNS[r]);
        ck_assert_msg(strstr(second, line), "expected '%s' in:\n%s", line, second);
    }
    if (getenv("DLLM_TEST_VERBOSE"))
        fprintf(stderr, "second sweep:\n%s", second);
    free(second);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(run_done(RUNS[r]), "%s not done", RUNS[r]);
    file_state log1 = state_of(RUNS[0], "log.h5"), cfg1 = state_of(RUNS[0], "config.yaml");
    file_state tl1 = state_of(RUNS[0], "train.log");
    check_unchanged(&log0, &log1, "log.h5 of the finished run");
    check_unchanged(&cfg0, &cfg1, "config.yaml of the finished run");
    check_unchanged(&tl0, &tl1, "train.log of the finished run");
    free(log0.bytes), free(log1.bytes), free(cfg0.bytes), free(cfg1.bytes);
    free(tl0.bytes), free(tl1.bytes);
    /* the overrides reached the runs */
    snprintf(p, sizeof p, "%s/runs/tiny/fp8-ais_seed=2/config.yaml", tmp);
    char *cfg = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(cfg, "cap: .inf"));
    ck_assert_ptr_nonnull(strstr(cfg, "seed: 2\n"));
    free(cfg);

    /* summary.csv against the logs */
    snprintf(p, sizeof p, "%s/runs/tiny/summary.csv", tmp);
    size_t csv_len;
    char *csv = tu_slurp_n(&csv_len, "%s", p);
    ck_assert_ptr_nonnull(csv);
    char *save, *line = strtok_r(csv, "\n", &save);
    ck_assert_str_eq(line, "run,arm,seed,status,steps,final_accuracy,final_accuracy_se,best_accuracy,"
                           "collapse_step,mean_alpha,mean_rho_ess,mean_abs_log_w,mean_abs_log_w_tok,"
                           "seconds");
    double arm_acc[2] = {0, 0}, arm_alpha[2] = {0, 0};
    for (int r = 0; r < 4; r++) {
        line = strtok_r(NULL, "\n", &save);
        ck_assert_ptr_nonnull(line);
        char *f[32];
        ck_assert_int_eq(split(line, f), 14);
        ck_assert_str_eq(f[0], RUNS[r]);
        ck_assert_str_eq(f[1], r < 2 ? "reference" : "fp8-ais");
        ck_assert_str_eq(f[2], r % 2 ? "2" : "1");
        ck_assert_str_eq(f[3], "done");
        int64_t n;
        double *steps = read_col(RUNS[r], "steps/step", &n);
        ck_assert_int_eq(atoi(f[4]), (int)n);
        ck_assert_int_eq(n, 2); /* each step once, resumed or not */
        ck_assert(steps[0] == 1 && steps[1] == 2);
        free(steps);
        double *acc = read_col(RUNS[r], "eval/sudoku/accuracy", &n);
        double *se = read_col(RUNS[r], "eval/sudoku/accuracy_se", &n);
        ck_assert_int_eq(n, 3); /* before training and after each step */
        check_num(f[5], acc[n - 1], "final_accuracy");
        check_num(f[6], se[n - 1], "final_accuracy_se");
        double best = acc[0];
        for (int64_t i = 1; i < n; i++)
            best = acc[i] > best ? acc[i] : best;
        check_num(f[7], best, "best_accuracy");
        arm_acc[r / 2] += acc[n - 1] / 2;
        free(acc);
        free(se);
        double *alpha = read_col(RUNS[r], "steps/alpha", &n);
        check_num(f[9], mean_of(alpha, n, false), "mean_alpha");
        arm_alpha[r / 2] += mean_of(alpha, n, false) / 2;
        if (r < 2)
            ck_assert_double_eq(mean_of(alpha, n, false), 0.0); /* none at w = 1 */
        free(alpha);
        double *rho = read_col(RUNS[r], "steps/rho_ess", &n);
        check_num(f[10], mean_of(rho, n, false), "mean_rho_ess");
        free(rho);
        double *lw = read_col(RUNS[r], "trajectories/log_w", &n);
        ck_assert_int_eq(n, 2 * 2 * 4);
        double *len = read_col(RUNS[r], "trajectories/completion_len", &n);
        double tok = 0;
        int ntok = 0;
        for (int64_t i = 0; i < n; i++)
            if (len[i] > 0 && isfinite(lw[i])) {
                tok += fabs(lw[i]) / len[i];
                ntok++;
            }
        ck_assert_int_gt(ntok, 0);
        if (r < 2) {
            ck_assert_str_eq(f[11], "0"); /* the reference arm: w = 1 exactly */
            ck_assert_str_eq(f[12], "0");
        } else {
            check_num(f[11], mean_of(lw, n, true), "mean_abs_log_w");
            check_num(f[12], tok / ntok, "mean_abs_log_w_tok");
        }
        free(lw);
        free(len);
        ck_assert(strtod(f[13], NULL) > 0);
    }
    for (int a = 0; a < 2; a++) {
        char *f[32];
        line = strtok_r(NULL, "\n", &save);
        ck_assert_int_eq(split(line, f), 14);
        ck_assert_str_eq(f[0], a ? "mean:fp8-ais" : "mean:reference");
        ck_assert_str_eq(f[3], "n=2");
        check_num(f[5], arm_acc[a], "arm mean final_accuracy");
        if (a)
            check_num(f[9], arm_alpha[a], "arm mean_alpha");
        line = strtok_r(NULL, "\n", &save);
        ck_assert_int_eq(split(line, f), 14);
        ck_assert_str_eq(f[0], a ? "se:fp8-ais" : "se:reference");
    }
    ck_assert_ptr_null(strtok_r(NULL, "\n", &save));
    free(csv);

    /* --summary rebuilds the same files; --dry-run lists the runs as done */
    char *csv0 = tu_slurp_n(&csv_len, "%s", p), md[512];
    snprintf(md, sizeof md, "%s/runs/tiny/summary.md", tmp);
    char *md0 = tu_slurp("%s", md);
    ck_assert_int_eq(tu_sh("rm %s %s && %s sweep %s --summary > /dev/null", p, md, tu_bin(), sweep), 0);
    char *csv1 = tu_slurp("%s", p), *md1 = tu_slurp("%s", md);
    ck_assert_str_eq(csv0, csv1);
    ck_assert_str_eq(md0, md1);
    ck_assert_ptr_nonnull(strstr(md1, "| fp8-ais_seed=2 | fp8-ais | 2 | done | 2 |"));
    free(csv0), free(csv1), free(md0), free(md1);
    ck_assert_int_eq(tu_sh("%s sweep %s --dry-run > %s/dry.out", tu_bin(), sweep, tmp), 0);
    snprintf(p, sizeof p, "%s/dry.out", tmp);
    char *dry = tu_slurp("%s", p);
    /* listed in the order they run: both arms of seed 1, then of seed 2 */
    const char *at = dry;
    for (int k = 0; k < 4; k++) {
        char want[128];
        snprintf(want, sizeof want, "\n  %s ", RUNS[RUN_ORDER[k]]);
        const char *hit = strstr(dry, want);
        ck_assert_msg(hit && hit > at, "%s not listed after the run before it:\n%s", want + 3, dry);
        at = hit;
    }
    ck_assert_ptr_nonnull(strstr(dry, "skip (done)"));
    free(dry);
    /* --arms: only that arm's runs (listed, and counted as the runs to do); an arm the
     * file does not have is named, exit 2 */
    ck_assert_int_eq(tu_sh("%s sweep %s --arms fp8-ais --dry-run > %s/dry.out", tu_bin(), sweep,
                           tmp), 0);
    dry = tu_slurp("%s", p);
    ck_assert_msg(strstr(dry, ": 2 runs in") && strstr(dry, "\n  fp8-ais_seed=1 ") &&
                      strstr(dry, "\n  fp8-ais_seed=2 ") && !strstr(dry, "reference_seed"),
                  "--arms fp8-ais lists:\n%s", dry);
    free(dry);
    ck_assert_int_eq(tu_sh("%s sweep %s --arms reference > %s/dry.out", tu_bin(), sweep, tmp), 0);
    dry = tu_slurp("%s", p);
    ck_assert_msg(strstr(dry, "0 of 2 runs to do"), "--arms reference runs:\n%s", dry);
    free(dry);
    ck_assert_int_eq(tu_sh("%s sweep %s --arms reference,nope > %s/dry.out 2>&1", tu_bin(), sweep,
                           tmp), 2);
    dry = tu_slurp("%s", p);
    ck_assert_msg(strstr(dry, "no arm 'nope'"), "%s", dry);
    free(dry);
}
END_TEST

START_TEST(failed_run_reported_others_go_on)
{
    write_file("fail.yaml",
               "name: tiny\n"
               "base: base.yaml\n"
               "set: {grpo.steps: 2}\n"
               "arms:\n"
               "  - {name: broken, model.path: %s/no-such-model}\n"
               "  - {name: fine}\n",
               tmp);
    ck_assert_int_eq(tu_sh("%s sweep %s/fail.yaml > %s/fail.out", tu_bin(), tmp, tmp), 1);
    char p[512];
    snprintf(p, sizeof p, "%s/fail.out", tmp);
    char *o = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(o, "FAILED broken (exit 2)"));
    ck_assert_ptr_nonnull(strstr(o, "done fine"));
    free(o);
    ck_assert(run_done("fine"));
    snprintf(p, sizeof p, "%s/runs/tiny/summary.csv", tmp);
    char *csv = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(csv, "\nbroken,broken,failed (exit 2),"));
    ck_assert_ptr_nonnull(strstr(csv, "\nfine,fine,done,2,"));
    free(csv);
    /* a run with a log but no checkpoint (stopped before its first) starts again */
    ck_assert_int_eq(tu_sh("rm -r %s/runs/tiny/fine/ckpt", tmp), 0);
    ck_assert_int_eq(tu_sh("%s sweep %s/fail.yaml --dry-run > %s/fail.out", tu_bin(), tmp, tmp), 0);
    snprintf(p, sizeof p, "%s/fail.out", tmp);
    o = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(o, "incomplete restart (no checkpoint)"));
    free(o);
    ck_assert_int_eq(tu_sh("%s sweep %s/fail.yaml > %s/fail.out", tu_bin(), tmp, tmp), 1);
    o = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(strstr(o, "start fine\n"));
    ck_assert_ptr_nonnull(strstr(o, "done fine"));
    free(o);
    ck_assert(run_done("fine"));
    int64_t n;
    double *steps = read_col("fine", "steps/step", &n);
    ck_assert_int_eq(n, 2);
    free(steps);
}
END_TEST

/* The binary the sweep started from is replaced on disk (a rebuild) while its first run
 * goes: every run still starts, with that binary (it used to fail them with exit 127,
 * "cannot run PATH (deleted)"). */
START_TEST(binary_replaced_mid_sweep)
{
    write_file("two.yaml",
               "name: two\n"
               "base: base.yaml\n"
               "set: {grpo.steps: 1}\n"
               "arms:\n"
               "  - {name: first}\n"
               "  - {name: second}\n");
    ck_assert_int_eq(tu_sh("mkdir -p %s/bin && cp %s %s/bin/dllm-rl", tmp, tu_bin(), tmp), 0);
    /* started in the background; once the first run's log exists (the sweep has forked
     * it), the binary is removed and a copy put in its place, as `make install` does */
    ck_assert_int_eq(tu_sh("cd %s && (bin/dllm-rl sweep two.yaml > two.out 2>&1; echo $? > two.rc) & "
                           "for i in $(seq 600); do [ -e %s/runs/two/first/train.log ] && break; "
                           "sleep 0.1; done; rm %s/bin/dllm-rl && cp %s %s/bin/dllm-rl.new && "
                           "mv %s/bin/dllm-rl.new %s/bin/dllm-rl; wait",
                           tmp, tmp, tmp, tu_bin(), tmp, tmp, tmp), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/two.rc", tmp);
    char *rc = tu_slurp("%s", p);
    snprintf(p, sizeof p, "%s/two.out", tmp);
    char *o = tu_slurp("%s", p);
    ck_assert_msg(atoi(rc) == 0 && strstr(o, "done first") && strstr(o, "done second"), "%s", o);
    free(rc);
    free(o);
}
END_TEST

/* a bad sweep file: the message starts with file:line:col and says what */
static void check_bad(const char *text, int line, int col, const char *says)
{
    write_file("bad.yaml", "%s", text);
    char path[256], want[300];
    snprintf(path, sizeof path, "%s/bad.yaml", tmp);
    sweep_file sf;
    dllm_err err = {0};
    ck_assert_int_eq(sweep_file_load(&sf, path, &err), DLLM_EXIT_INPUT);
    snprintf(want, sizeof want, "%s:%d:%d: ", path, line, col);
    ck_assert_msg(!strncmp(err.msg, want, strlen(want)), "expected '%s...', got '%s'", want, err.msg);
    ck_assert_msg(strstr(err.msg, says), "expected '%s' in '%s'", says, err.msg);
}

START_TEST(bad_sweep_files)
{
    check_bad("name: x\nbase: base.yaml\nbogus: 1\n", 3, 1, "unknown key 'bogus'");
    check_bad("name: x\nbase: base.yaml\narms:\n  - {name: a, grpo.stepz: 3}\n", 4, 27,
              "unknown key 'grpo.stepz'");
    check_bad("name: x\nbase: base.yaml\nset:\n  correction: {cap: 0.5}\n", 4, 21, "correction.cap");
    check_bad("name: x\nbase: base.yaml\ngrid:\n  seed: 3\n", 4, 9, "non-empty list");
    /* only the cap may be infinite; the noise mode is an enum */
    check_bad("name: x\nbase: base.yaml\nset: {correction.ais.bias: .inf}\n", 3, 28, "must be finite");
    check_bad("name: x\nbase: base.yaml\nset: {correction.ais.noise: off}\n", 3, 29,
              "debias|none");
    check_bad("name: x\nbase: base.yaml\narms:\n  - {rollout.precision: fp8}\n", 4, 5, "no name");
    check_bad("name: x\nbase: base.yaml\narms:\n  - {name: a}\n  - {name: a}\n", 5, 12,
              "duplicate arm name");
    check_bad("name: x y\nbase: base.yaml\n", 1, 7, "not a directory name");
    check_bad("name: x\nbase: nowhere.yaml\n", 2, 7, "base: ");
    check_bad("name: x\nbase: [base.yaml\n", 3, 1, "YAML syntax error");
    check_bad("base: base.yaml\n", 1, 1, "missing 'name'");
    /* the command: exit status 2 and the location on stderr */
    write_file("bad.yaml", "name: x\nbase: base.yaml\ngrid: {seed: [1, 2], seeed: [1]}\n");
    ck_assert_int_eq(tu_sh("%s sweep %s/bad.yaml 2> %s/err.out", tu_bin(), tmp, tmp), 2);
    char p[256];
    snprintf(p, sizeof p, "%s/err.out", tmp);
    char *e = tu_slurp("%s", p), want[300];
    snprintf(want, sizeof want, "%s/bad.yaml:3:30: ", tmp);
    ck_assert_msg(strstr(e, want) != NULL, "%s", e);
    free(e);
}
END_TEST

START_TEST(shipped_sweep_files_load)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/../../configs/sweeps", getenv("DLLM_TEST_DATA"));
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s", dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".yaml"))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        sweep_file sf;
        dllm_err err = {0};
        ck_assert_msg(sweep_file_load(&sf, path, &err) == 0, "%s", err.msg);
        sweep_run *runs;
        int nr;
        ck_assert_msg(sweep_expand(&sf, &runs, &nr, &err) == 0, "%s", err.msg);
        ck_assert_int_ge(nr, 2);
        sweep_runs_free(runs, nr);
        sweep_file_free(&sf);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 2);
}
END_TEST

START_TEST(collapse_step_definition)
{
    const double step[6] = {0, 10, 20, 30, 40, 50};
    /* rises to 0.6, falls below 0.3 at step 30 and stays there */
    const double a[6] = {0.4, 0.6, 0.5, 0.2, 0.1, 0.25};
    ck_assert_int_eq(sweep_collapse_step(step, a, 6, 0.5), 30);
    /* a dip that recovers is no collapse */
    const double b[6] = {0.4, 0.6, 0.2, 0.5, 0.1, 0.3};
    ck_assert_int_eq(sweep_collapse_step(step, b, 6, 0.5), -1);
    /* a dip that recovers, then a lasting fall */
    const double c[6] = {0.4, 0.6, 0.2, 0.5, 0.1, 0.29};
    ck_assert_int_eq(sweep_collapse_step(step, c, 6, 0.5), 40);
    /* never above 0: nothing to collapse from; NaN evaluations are skipped */
    const double z[3] = {0, 0, 0};
    ck_assert_int_eq(sweep_collapse_step(step, z, 3, 0.5), -1);
    const double w[4] = {0.5, NAN, 0.1, NAN};
    ck_assert_int_eq(sweep_collapse_step(step, w, 4, 0.5), 20);
    ck_assert_int_eq(sweep_collapse_step(step, w, 0, 0.5), -1);
}
END_TEST

static Suite *sweep_suite(void)
{
    Suite *s = suite_create("sweep");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, sweep_stops_restarts_and_summarises);
    tcase_add_test(tc, failed_run_reported_others_go_on);
    tcase_add_test(tc, binary_replaced_mid_sweep);
    tcase_add_test(tc, bad_sweep_files);
    tcase_add_test(tc, shipped_sweep_files_load);
    tcase_add_test(tc, collapse_step_definition);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return sweep_suite();
}
