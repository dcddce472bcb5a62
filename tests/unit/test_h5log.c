/* test_h5log.c: the HDF5 run log. Files written through h5log are read back
 * with the raw HDF5 API (not through h5log's reader) and every value, dtype,
 * shape and pad is checked against the schema of docs/DESIGN.md; a writer killed
 * with SIGKILL leaves a file with every completed step; resume keeps the steps
 * up to the checkpoint exactly once; bad files are input errors (2) naming the
 * file; `dllm-rl inspect` summaries are checked against sums computed here.
 *
 * With DLLM_H5LOG_EXPORT=DIR the program also writes DIR/test_values.h5 (the
 * values the tests check, for tests/ref/check_h5log.py) and DIR/demo.h5 (a
 * synthetic run whose diagnostics follow docs/METHOD.md section 5, for the analysis
 * notebook), then runs the suite as usual. */
#define _GNU_SOURCE /* nftw */
#include "src/log/h5log.h"
#include "src/log/rl_log.h"

#include "kernels/base.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <ftw.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { P = 5, G = 7, S = 4, ROWS_PER_STEP = 3 };
static const char *const tasks[2] = {"gsm8k", "countdown"};

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dllm-test-h5log-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

/* Checked teardown: removes the test's directory. */
static void rm_tmpdir(void)
{
    if (tmpdir[0])
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    tmpdir[0] = 0;
}

static char *tmp_path(const char *name)
{
    static char buf[64][512];  /* a ring: earlier paths stay valid within a test */
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* ---- the values written: simple exact functions of (step, row, column) ---- */

/* Metric i at step s; policy_kl is never computed (NaN), and `lr` only from step 3. */
static double metric_value(int64_t s, int i, double salt)
{
    if (i == H5LOG_M(policy_kl))
        return NAN;
    if (i == H5LOG_M(lr) && s < 3)
        return NAN;
    return salt + (double)s + (double)i / 32.0;
}

static int prompt_len_of(int64_t s, int r) { return 1 + (int)((s + r) % P); }
static int completion_len_of(int64_t s, int r) { return (int)((s * 3 + r) % (G + 1)); }
static int32_t token_of(int64_t s, int r, int t) { return (int32_t)(1000 * s + 10 * r + t); }
static double traj_value(int64_t s, int r, int field) { return s + r / 8.0 + field / 64.0; }
static float ratio_of(int64_t s, int r, int t)
{
    return t % 3 == 2 ? NAN : (float)(s - r) / 16.0f + (float)t / 128.0f;
}

static h5log_meta test_meta(void)
{
    return (h5log_meta){.config_yaml = "seed: 7\ngrpo: {steps: 10}\n",
                        .version = "0.1.0",
                        .git_revision = "abc123",
                        .device = "cpu",
                        .started = "2025-01-02T03:04:05Z",
                        .machine = "cpu test (avx2); fp32 gemm openblas",
                        .seed = 7};
}

static h5log_dims test_dims(void)
{
    return (h5log_dims){.max_prompt = P, .max_completion = G, .denoise_steps = S,
                        .n_eval_tasks = 2, .eval_tasks = tasks};
}

/* Appends trajectories, mismatch and the step metrics of step s (and an eval
 * every 5 steps), as the RL loop does. */
/* Outside a test (the export) a failure exits; inside, it fails the test. */
static int exporting;

static void ok(int rc, const dllm_err *err)
{
    if (exporting) {
        if (rc) {
            fprintf(stderr, "%s\n", err->msg);
            exit(1);
        }
        return;
    }
    ck_assert_msg(rc == 0, "%s", err->msg);
}

static void append_full_step(h5log *log, int64_t s, double salt)
{
    dllm_err err = {0};
    enum { STRIDE = G + 2 };  /* caller arrays wider than the log rows */
    int64_t pidx[ROWS_PER_STEP], grp[ROWS_PER_STEP];
    int32_t ptok[ROWS_PER_STEP * STRIDE], ctok[ROWS_PER_STEP * STRIDE];
    int32_t plen[ROWS_PER_STEP], clen[ROWS_PER_STEP];
    double col[8][ROWS_PER_STEP];
    float ratio[ROWS_PER_STEP * STRIDE], prob[ROWS_PER_STEP * STRIDE];
    int16_t cstep[ROWS_PER_STEP * STRIDE];
    for (int r = 0; r < ROWS_PER_STEP; r++) {
        pidx[r] = 100 * s + r;
        grp[r] = r / 2;
        plen[r] = prompt_len_of(s, r);
        clen[r] = completion_len_of(s, r);
        for (int t = 0; t < STRIDE; t++) {
            /* Garbage past the lengths: must not reach the file. */
            ptok[r * STRIDE + t] = t < plen[r] ? token_of(s, r, t) : 77777;
            ctok[r * STRIDE + t] = t < clen[r] ? token_of(s, r, t) + 500 : 77777;
            ratio[r * STRIDE + t] = t < clen[r] ? ratio_of(s, r, t) : 99.0f;
            prob[r * STRIDE + t] = t < clen[r] ? (float)t / 8.0f : 99.0f;
            cstep[r * STRIDE + t] = (int16_t)(t < clen[r] ? (t * 5 + r) % S : 999);
        }
        for (int f = 0; f < 8; f++)
            col[f][r] = traj_value(s, r, f) + salt;
    }
    h5log_traj_batch b = {.n = ROWS_PER_STEP, .step = s, .prompt_index = pidx, .group = grp,
                          .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = STRIDE,
                          .completion_tokens = ctok, .completion_len = clen,
                          .completion_stride = STRIDE, .reward = col[0], .advantage = col[1],
                          .l_mu = col[2], .l_pi = col[3], .log_w = col[4], .coef = col[5],
                          .log_w_se = col[6], .l_mu_exact = col[7], .token_log_ratio = ratio,
                          .commit_step = cstep,
                          .commit_prob = prob};
    ok(h5log_append_trajectories(log, &b, &err), &err);
    double mm[S];
    for (int k = 0; k < S; k++)
        mm[k] = k == 1 ? NAN : salt + s / 4.0 + k;
    ok(h5log_append_mismatch(log, s, mm, &err), &err);
    double v[H5LOG_N_METRICS];
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        v[i] = metric_value(s, i, salt);
    ok(h5log_append_step(log, s, v, &err), &err);
    if (s % 5 == 0) {
        ok(h5log_append_eval(log, "gsm8k", s, salt + s / 100.0, 0.01, s / 50.0, &err),
           &err);
    }
}

/* ---- raw HDF5 reading (independent of h5log's reader) ---- */

static hid_t raw_open(const char *path)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    H5Pclose(fapl);
    ck_assert_msg(f >= 0, "cannot open %s", path);
    return f;
}

/* Dataset shape: rank, dims, and whether the first dim is unlimited + chunked. */
static int raw_shape(hid_t f, const char *name, hsize_t dims[2])
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "missing %s", name);
    hid_t s = H5Dget_space(d);
    hsize_t maxd[2] = {0, 0};
    dims[1] = 1;
    int rank = H5Sget_simple_extent_dims(s, dims, maxd);
    ck_assert_msg(maxd[0] == H5S_UNLIMITED, "%s: first dimension not unlimited", name);
    if (rank == 2)
        ck_assert_msg(maxd[1] == dims[1], "%s: second dimension not fixed", name);
    hid_t dcpl = H5Dget_create_plist(d);
    ck_assert_msg(H5Pget_layout(dcpl) == H5D_CHUNKED, "%s: not chunked", name);
    H5Pclose(dcpl);
    H5Sclose(s);
    H5Dclose(d);
    return rank;
}

/* Checks the file type: class, size in bytes, signedness, little endian. */
static void raw_check_type(hid_t f, const char *name, H5T_class_t cls, size_t size)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "missing %s", name);
    hid_t t = H5Dget_type(d);
    ck_assert_msg(H5Tget_class(t) == cls, "%s: wrong type class", name);
    ck_assert_msg(H5Tget_size(t) == size, "%s: %zu bytes, expected %zu", name,
                  H5Tget_size(t), size);
    ck_assert_msg(H5Tget_order(t) == H5T_ORDER_LE, "%s: not little endian", name);
    if (cls == H5T_INTEGER)
        ck_assert_msg(H5Tget_sign(t) == H5T_SGN_2, "%s: not signed", name);
    H5Tclose(t);
    H5Dclose(d);
}

/* Whole dataset in memtype; rows/width out. */
static void *raw_read(hid_t f, const char *name, hid_t memtype, hsize_t *rows, hsize_t *width)
{
    hsize_t dims[2];
    raw_shape(f, name, dims);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    size_t n = (size_t)dims[0] * (size_t)dims[1];
    void *buf = malloc((n ? n : 1) * H5Tget_size(memtype));
    ck_assert_ptr_nonnull(buf);
    if (n)
        ck_assert(H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Dclose(d);
    *rows = dims[0];
    if (width)
        *width = dims[1];
    return buf;
}

static char *raw_str_attr(hid_t f, const char *name)
{
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "missing attribute %s", name);
    hid_t t = H5Aget_type(a);
    ck_assert(H5Tget_class(t) == H5T_STRING);
    ck_assert(H5Tis_variable_str(t) > 0);
    char *v = NULL;
    ck_assert(H5Aread(a, t, &v) >= 0);
    char *out = strdup(v);
    H5free_memory(v);
    H5Tclose(t);
    H5Aclose(a);
    return out;
}

static int same(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* Verifies /steps (first n rows: steps first_step.., values with salt). */
static void check_steps(hid_t f, int64_t n, int64_t first_step, double salt, int64_t *rows_out)
{
    hsize_t rows, w;
    int64_t *st = raw_read(f, "steps/step", H5T_NATIVE_INT64, &rows, NULL);
    ck_assert_int_ge((int64_t)rows, n);
    for (int64_t r = 0; r < n; r++)
        ck_assert_int_eq(st[r], first_step + r);
    free(st);
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        char name[128];
        snprintf(name, sizeof name, "steps/%s", h5log_metric_name(i));
        double *v = raw_read(f, name, H5T_NATIVE_DOUBLE, &rows, &w);
        ck_assert_int_eq((int64_t)w, 1);
        ck_assert_int_ge((int64_t)rows, n);
        for (int64_t r = 0; r < n; r++)
            ck_assert_msg(same(v[r], metric_value(first_step + r, i, salt)),
                          "%s row %lld: %g", name, (long long)r, v[r]);
        free(v);
    }
    if (rows_out)
        *rows_out = (int64_t)rows;
}

/* Verifies the first n trajectory rows (steps from first_step, salt). */
static void check_trajectories(hid_t f, int64_t n, int64_t first_step, double salt)
{
    hsize_t rows, w;
    int64_t *st = raw_read(f, "trajectories/step", H5T_NATIVE_INT64, &rows, NULL);
    ck_assert_int_ge((int64_t)rows, n);
    int64_t *pidx = raw_read(f, "trajectories/prompt_index", H5T_NATIVE_INT64, &rows, NULL);
    int64_t *grp = raw_read(f, "trajectories/group", H5T_NATIVE_INT64, &rows, NULL);
    int32_t *plen = raw_read(f, "trajectories/prompt_len", H5T_NATIVE_INT32, &rows, NULL);
    int32_t *clen = raw_read(f, "trajectories/completion_len", H5T_NATIVE_INT32, &rows, NULL);
    int32_t *ptok = raw_read(f, "trajectories/prompt_tokens", H5T_NATIVE_INT32, &rows, &w);
    ck_assert_int_eq((int)w, P);
    int32_t *ctok = raw_read(f, "trajectories/completion_tokens", H5T_NATIVE_INT32, &rows, &w);
    ck_assert_int_eq((int)w, G);
    float *ratio = raw_read(f, "trajectories/token_log_ratio", H5T_NATIVE_FLOAT, &rows, &w);
    ck_assert_int_eq((int)w, G);
    float *prob = raw_read(f, "trajectories/commit_prob", H5T_NATIVE_FLOAT, &rows, &w);
    int16_t *cstep = raw_read(f, "trajectories/commit_step", H5T_NATIVE_INT16, &rows, &w);
    static const char *const cols[8] = {"reward", "advantage", "l_mu", "l_pi", "log_w", "coef",
                                        "log_w_se", "l_mu_exact"};
    double *col[8];
    for (int k = 0; k < 8; k++) {
        char name[64];
        snprintf(name, sizeof name, "trajectories/%s", cols[k]);
        col[k] = raw_read(f, name, H5T_NATIVE_DOUBLE, &rows, NULL);
        ck_assert_int_ge((int64_t)rows, n);
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t s = first_step + i / ROWS_PER_STEP;
        int r = (int)(i % ROWS_PER_STEP);
        ck_assert_int_eq(st[i], s);
        ck_assert_int_eq(pidx[i], 100 * s + r);
        ck_assert_int_eq(grp[i], r / 2);
        ck_assert_int_eq(plen[i], prompt_len_of(s, r));
        ck_assert_int_eq(clen[i], completion_len_of(s, r));
        for (int t = 0; t < P; t++)
            ck_assert_int_eq(ptok[i * P + t], t < plen[i] ? token_of(s, r, t) : -1);
        for (int t = 0; t < G; t++) {
            int in = t < clen[i];
            ck_assert_int_eq(ctok[i * G + t], in ? token_of(s, r, t) + 500 : -1);
            ck_assert(same(ratio[i * G + t], in ? ratio_of(s, r, t) : NAN));
            ck_assert(same(prob[i * G + t], in ? (float)t / 8.0f : NAN));
            ck_assert_int_eq(cstep[i * G + t], in ? (t * 5 + r) % S : -1);
        }
        for (int k = 0; k < 8; k++)
            ck_assert(same(col[k][i], traj_value(s, r, k) + salt));
    }
    for (int k = 0; k < 8; k++)
        free(col[k]);
    free(st); free(pidx); free(grp); free(plen); free(clen);
    free(ptok); free(ctok); free(ratio); free(prob); free(cstep);
}

static void write_log(const char *path, int64_t first, int64_t last, double salt)
{
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    h5log *log;
    ck_assert_msg(h5log_create(&log, path, &m, &d, &err) == 0, "%s", err.msg);
    for (int64_t s = first; s <= last; s++)
        append_full_step(log, s, salt);
    ck_assert_int_eq(h5log_nsteps(log), last - first + 1);
    ck_assert_int_eq(h5log_close(log), 0);
}

/* ---- tests ---- */

/* /pass_at_k exists with a group size, holds one row per step of width G, survives a
 * resume (rows past the resume step dropped); without a group size there is none and
 * appending writes nothing. */
START_TEST(test_pass_at_k)
{
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    d.group_size = 3;
    char *path = tmp_path("pass_at_k.h5");
    h5log *log;
    ck_assert_msg(h5log_create(&log, path, &m, &d, &err) == 0, "%s", err.msg);
    for (int64_t s = 1; s <= 3; s++) {
        append_full_step(log, s, 0.0);
        const double pk[3] = {0.1 * (double)s, 0.2 * (double)s, 0.25 * (double)s};
        ck_assert_int_eq(h5log_append_pass_at_k(log, s, pk, &err), 0);
    }
    ck_assert_int_eq(h5log_close(log), 0);
    ck_assert_msg(h5log_resume(&log, path, 2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_get_dims(log)->group_size, 3);
    ck_assert_int_eq(h5log_close(log), 0);
    hid_t f = raw_open(path);
    hsize_t rows, w;
    double *v = raw_read(f, "pass_at_k/value", H5T_NATIVE_DOUBLE, &rows, &w);
    ck_assert(rows == 2 && w == 3);
    ck_assert(v[0] == 0.1 && v[3 + 2] == 0.5);
    free(v);
    H5Fclose(f);

    d.group_size = 0;
    path = tmp_path("no_pass_at_k.h5");
    ck_assert_msg(h5log_create(&log, path, &m, &d, &err) == 0, "%s", err.msg);
    const double pk[1] = {1.0};
    ck_assert_int_eq(h5log_append_pass_at_k(log, 1, pk, &err), 0);
    ck_assert_int_eq(h5log_get_dims(log)->group_size, 0);
    ck_assert_int_eq(h5log_close(log), 0);
    f = raw_open(path);
    ck_assert(H5Lexists(f, "pass_at_k", H5P_DEFAULT) <= 0);
    H5Fclose(f);
}
END_TEST

START_TEST(test_roundtrip_values)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    enum { N = 12 };
    write_log(path, 1, N, 0.0);

    hid_t f = raw_open(path);
    /* Root attributes. */
    h5log_meta m = test_meta();
    const char *names[6] = {"config_yaml", "version", "git_revision", "device", "started",
                            "machine"};
    const char *want[6] = {m.config_yaml, m.version, m.git_revision, m.device, m.started,
                           m.machine};
    for (int i = 0; i < 6; i++) {
        char *v = raw_str_attr(f, names[i]);
        ck_assert_str_eq(v, want[i]);
        free(v);
    }
    hid_t a = H5Aopen(f, "seed", H5P_DEFAULT);
    hid_t at = H5Aget_type(a);
    ck_assert(H5Tget_class(at) == H5T_INTEGER && H5Tget_size(at) == 8);
    int64_t seed = 0;
    H5Aread(a, H5T_NATIVE_INT64, &seed);
    ck_assert_int_eq(seed, 7);
    H5Tclose(at);
    H5Aclose(a);

    int64_t rows;
    check_steps(f, N, 1, 0.0, &rows);
    ck_assert_int_eq(rows, N);
    check_trajectories(f, N * ROWS_PER_STEP, 1, 0.0);

    hsize_t r, w;
    int64_t *mst = raw_read(f, "mismatch_by_step/step", H5T_NATIVE_INT64, &r, NULL);
    ck_assert_int_eq((int64_t)r, N);
    double *mm = raw_read(f, "mismatch_by_step/mean_abs_d", H5T_NATIVE_DOUBLE, &r, &w);
    ck_assert_int_eq((int)w, S);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(mst[i], i + 1);
        for (int k = 0; k < S; k++)
            ck_assert(same(mm[i * S + k], k == 1 ? NAN : (i + 1) / 4.0 + k));
    }
    free(mst);
    free(mm);

    /* Evals: gsm8k at steps 5 and 10, countdown never. */
    int64_t *est = raw_read(f, "eval/gsm8k/step", H5T_NATIVE_INT64, &r, NULL);
    ck_assert_int_eq((int64_t)r, 2);
    ck_assert_int_eq(est[0], 5);
    ck_assert_int_eq(est[1], 10);
    double *acc = raw_read(f, "eval/gsm8k/accuracy", H5T_NATIVE_DOUBLE, &r, NULL);
    double *se = raw_read(f, "eval/gsm8k/accuracy_se", H5T_NATIVE_DOUBLE, &r, NULL);
    double *rm = raw_read(f, "eval/gsm8k/reward_mean", H5T_NATIVE_DOUBLE, &r, NULL);
    ck_assert(acc[1] == 10 / 100.0 && se[1] == 0.01 && rm[0] == 5 / 50.0);
    free(est); free(acc); free(se); free(rm);
    est = raw_read(f, "eval/countdown/step", H5T_NATIVE_INT64, &r, NULL);
    ck_assert_int_eq((int64_t)r, 0);
    free(est);
    H5Fclose(f);

    /* h5log's own reader agrees. */
    dllm_err err = {0};
    h5log *log;
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), N);
    ck_assert_int_eq(h5log_ntrajectories(log), N * ROWS_PER_STEP);
    ck_assert_int_eq(h5log_get_dims(log)->max_prompt, P);
    ck_assert_int_eq(h5log_get_dims(log)->max_completion, G);
    ck_assert_int_eq(h5log_get_dims(log)->denoise_steps, S);
    ck_assert_int_eq(h5log_get_dims(log)->n_eval_tasks, 2);
    ck_assert_str_eq(h5log_get_dims(log)->eval_tasks[0], "gsm8k");  /* creation order */
    ck_assert_str_eq(h5log_get_dims(log)->eval_tasks[1], "countdown");
    ck_assert_str_eq(h5log_get_meta(log)->started, m.started);
    ck_assert_str_eq(h5log_get_meta(log)->machine, m.machine);
    ck_assert_int_eq(h5log_get_meta(log)->seed, 7);
    double *v;
    int64_t n;
    ck_assert_msg(h5log_read_metric(log, "alpha", &v, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, N);
    for (int i = 0; i < N; i++)
        ck_assert(v[i] == metric_value(i + 1, H5LOG_M(alpha), 0));
    free(v);
    ck_assert_int_eq(h5log_read_metric(log, "no_such_metric", &v, &n, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_msg(h5log_read_column(log, "trajectories/log_w", &v, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, N * ROWS_PER_STEP);
    ck_assert(v[4] == traj_value(2, 1, 4));
    free(v);
    ck_assert_int_eq(h5log_close(log), 0);
}
END_TEST

/* The column table drives the rank gather: two ranks' rows packed with it and
 * concatenated unpack to the rows of both, in rank order, every column intact. */
START_TEST(test_traj_table_gather)
{
    enum { N1 = 2, N2 = 3, PW = 4, GW = 5 };
    /* the columns' pointer fields are distinct and the step is the only scalar */
    for (int c = 0; c < H5LOG_N_TRAJ; c++) {
        for (int d = 0; d < c; d++)
            ck_assert_uint_ne(h5log_traj_cols[c].off, h5log_traj_cols[d].off);
        ck_assert_int_eq(h5log_traj_cols[c].width == H5LOG_WSTEP, !strcmp(h5log_traj_cols[c].name, "step"));
    }
    h5log_traj_batch rank[2];
    void *bytes[2];
    size_t len[2];
    for (int k = 0; k < 2; k++) {
        int n = k ? N2 : N1;
        int64_t *pidx = malloc(sizeof *pidx * n), *grp = malloc(sizeof *grp * n);
        int32_t *plen = malloc(sizeof *plen * n), *clen = malloc(sizeof *clen * n);
        int32_t *ptok = malloc(sizeof *ptok * n * PW), *ctok = malloc(sizeof *ctok * n * GW);
        double *col[9];
        for (int f = 0; f < 9; f++)
            col[f] = malloc(sizeof(double) * n);
        float *ratio = malloc(sizeof *ratio * n * GW), *prob = malloc(sizeof *prob * n * GW);
        float *ent = malloc(sizeof *ent * n * GW);
        int16_t *cstep = malloc(sizeof *cstep * n * GW);
        for (int r = 0; r < n; r++) {
            pidx[r] = 10 * k + r;
            grp[r] = -(10 * k + r);
            plen[r] = 1 + r;
            clen[r] = 2 + r;
            for (int f = 0; f < 9; f++)
                col[f][r] = traj_value(k, r, f);
            for (int t = 0; t < PW; t++)
                ptok[r * PW + t] = 1000 * k + 10 * r + t;
            for (int t = 0; t < GW; t++) {
                ctok[r * GW + t] = 2000 * k + 10 * r + t;
                ratio[r * GW + t] = ratio_of(k, r, t);
                prob[r * GW + t] = (float)t / 16.0f;
                ent[r * GW + t] = (float)(k + r) / 4.0f + (float)t;
                cstep[r * GW + t] = (int16_t)(100 * k + r + t);
            }
        }
        rank[k] = (h5log_traj_batch){.n = n, .step = 9, .prompt_index = pidx, .group = grp,
                                     .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = PW,
                                     .completion_tokens = ctok, .completion_len = clen,
                                     .completion_stride = GW, .reward = col[0], .advantage = col[1],
                                     .l_mu = col[2], .l_pi = col[3], .log_w = col[4], .coef = col[5],
                                     .log_w_se = col[6], .l_mu_exact = col[7], .token_log_ratio = ratio,
                                     .commit_step = cstep, .commit_prob = prob, .correct = col[8],
                                     .token_entropy = ent};
        bytes[k] = rl_traj_pack(&rank[k], PW, GW, &len[k]);
        ck_assert_uint_eq(len[k], (size_t)n * rl_traj_record_size(PW, GW));
    }
    /* 2 int64 + 2 int32 + 9 doubles + PW int32 + GW (int32 + 3 float + int16) per row */
    ck_assert_uint_eq(rl_traj_record_size(PW, GW), 16 + 8 + 72 + 4 * PW + GW * 18);
    char *all = malloc(len[0] + len[1]);
    memcpy(all, bytes[0], len[0]);
    memcpy(all + len[0], bytes[1], len[1]);
    h5log_traj_batch got;
    rl_traj_unpack(all, len[0] + len[1], PW, GW, 9, &got);
    ck_assert_int_eq(got.n, N1 + N2);
    ck_assert_int_eq(got.step, 9);
    for (int c = 0; c < H5LOG_N_TRAJ; c++) {
        if (h5log_traj_cols[c].width == H5LOG_WSTEP)
            continue;
        size_t row = h5log_kind_size(h5log_traj_cols[c].kind) *
                     (h5log_traj_cols[c].width == H5LOG_WP   ? PW
                      : h5log_traj_cols[c].width == H5LOG_WG ? GW
                                                             : 1);
        const char *g = h5log_traj_col_data(&got, c);
        ck_assert_ptr_nonnull(g);
        ck_assert_msg(!memcmp(g, h5log_traj_col_data(&rank[0], c), row * N1), "%s rank 0",
                      h5log_traj_cols[c].name);
        ck_assert_msg(!memcmp(g + row * N1, h5log_traj_col_data(&rank[1], c), row * N2), "%s rank 1",
                      h5log_traj_cols[c].name);
    }
    rl_traj_free(&got);
    rl_traj_free(&rank[0]);
    rl_traj_free(&rank[1]);
    free(bytes[0]);
    free(bytes[1]);
    free(all);
}
END_TEST

/* Every dataset of the file: units and description attributes, the table's. */
static herr_t check_doc(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)info;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    ck_assert_msg(o >= 0, "%s", name);
    if (H5Iget_type(o) == H5I_DATASET) {
        char *units = raw_str_attr(o, "units"), *desc = raw_str_attr(o, "description");
        ck_assert_msg(units[0] && desc[0], "%s: empty units or description", name);
        /* the table's row: its group is the first component ("eval" for eval/<task>) */
        char group[64];
        snprintf(group, sizeof group, "%.*s", (int)strcspn(name, "/"), name);
        const char *u, *d;
        ck_assert_int_eq(h5log_dataset_doc(group, strrchr(name, '/') + 1, &u, &d), 0);
        ck_assert_str_eq(units, u);
        ck_assert_str_eq(desc, d);
        const char *base = strrchr(name, '/') + 1;
        if (!strncmp(base, "t_", 2))
            ck_assert_msg(!strcmp(units, "s"), "%s: units %s, not seconds", name, units);
        if (!strcmp(base, "log_w") || !strcmp(base, "token_log_ratio") || !strcmp(base, "l_pi"))
            ck_assert_msg(!strcmp(units, "nats"), "%s: units %s, not nats", name, units);
        free(units);
        free(desc);
        (*(int *)data)++;
    }
    H5Oclose(o);
    return 0;
}

START_TEST(test_datasets_have_units_and_description)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    write_log(path, 0, 2, 0.0);
    for (int pass = 0; pass < 2; pass++) {
        hid_t f = raw_open(path);
        int n = 0;
        ck_assert(H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, check_doc, &n) >= 0);
        /* step + metrics, trajectories, mismatch (2), eval (4 per task) */
        ck_assert_int_eq(n, 1 + H5LOG_N_METRICS + H5LOG_N_TRAJ + 2 + 4 * 2);
        H5Fclose(f);
        /* a resumed log is created anew: the attributes again */
        h5log *log;
        dllm_err err;
        ck_assert_msg(h5log_resume(&log, path, 1, &err) == 0, "%s", err.msg);
        h5log_close(log);
    }
    const char *u, *d;
    ck_assert_int_eq(h5log_dataset_doc("steps", "no_such_metric", &u, &d), -1);
    rm_tmpdir();
}
END_TEST

START_TEST(test_schema_dtypes)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    write_log(path, 0, 2, 0.0);
    hid_t f = raw_open(path);
    hsize_t dims[2];
    ck_assert_int_eq(raw_shape(f, "steps/step", dims), 1);
    raw_check_type(f, "steps/step", H5T_INTEGER, 8);
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        char name[128];
        snprintf(name, sizeof name, "steps/%s", h5log_metric_name(i));
        ck_assert_int_eq(raw_shape(f, name, dims), 1);
        ck_assert_int_eq((int)dims[0], 3);
        raw_check_type(f, name, H5T_FLOAT, 8);
    }
    /* The metric table is the schema's list, in order. */
    static const char *const schema[] = {
        "reward_mean", "reward_std", "accuracy", "loss", "policy_kl", "clip_frac",
        "grad_norm", "lr", "alpha_raw", "alpha", "rho_ess", "s_rel", "delta", "s_div", "nu",
        "s_var", "k3", "log_w_mc_se", "frac_truncated", "frac_zeroed", "frac_nonfinite",
        "frac_zero_var_groups", "frac_masked_left", "t_rollout", "t_likelihood", "t_correction", "t_update", "t_sync", "t_log",
        "tokens_per_s", "frac_var_mc", "rho_ess_prec", "rho_ess_cache", "delta_prec", "delta_cache",
        "nu_total", "nu_excess", "diag_empty",
        "frac_informative", "rho_ess_informative", "delta_informative", "abs_log_w_informative",
        "rho_ess_all", "delta_all", "abs_log_w_all", "log_w_q05", "log_w_q50", "log_w_q95",
        "entropy", "completion_len", "grad_cosine", "grad_norm_ratio", "frac_dropped"};
    ck_assert_int_eq(H5LOG_N_METRICS, (int)(sizeof schema / sizeof schema[0]));
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        ck_assert_str_eq(h5log_metric_name(i), schema[i]);
        ck_assert_int_eq(h5log_metric_index(schema[i]), i);
    }
    ck_assert_ptr_null(h5log_metric_name(H5LOG_N_METRICS));
    ck_assert_int_eq(h5log_metric_index("nope"), -1);

    static const struct {
        const char *name;
        H5T_class_t cls;
        size_t size;
        int width;  /* 0: 1-D */
    } t[] = {
        {"trajectories/step", H5T_INTEGER, 8, 0},
        {"trajectories/prompt_index", H5T_INTEGER, 8, 0},
        {"trajectories/group", H5T_INTEGER, 8, 0},
        {"trajectories/prompt_tokens", H5T_INTEGER, 4, P},
        {"trajectories/completion_tokens", H5T_INTEGER, 4, G},
        {"trajectories/prompt_len", H5T_INTEGER, 4, 0},
        {"trajectories/completion_len", H5T_INTEGER, 4, 0},
        {"trajectories/reward", H5T_FLOAT, 8, 0},
        {"trajectories/advantage", H5T_FLOAT, 8, 0},
        {"trajectories/l_mu", H5T_FLOAT, 8, 0},
        {"trajectories/l_pi", H5T_FLOAT, 8, 0},
        {"trajectories/log_w", H5T_FLOAT, 8, 0},
        {"trajectories/coef", H5T_FLOAT, 8, 0},
        {"trajectories/log_w_se", H5T_FLOAT, 8, 0},
        {"trajectories/l_mu_exact", H5T_FLOAT, 8, 0},
        {"trajectories/token_log_ratio", H5T_FLOAT, 4, G},
        {"trajectories/commit_step", H5T_INTEGER, 2, G},
        {"trajectories/commit_prob", H5T_FLOAT, 4, G},
        {"trajectories/correct", H5T_FLOAT, 8, 0},
        {"trajectories/token_entropy", H5T_FLOAT, 4, G},
        {"mismatch_by_step/step", H5T_INTEGER, 8, 0},
        {"mismatch_by_step/mean_abs_d", H5T_FLOAT, 8, S},
        {"eval/gsm8k/step", H5T_INTEGER, 8, 0},
        {"eval/gsm8k/accuracy", H5T_FLOAT, 8, 0},
        {"eval/gsm8k/accuracy_se", H5T_FLOAT, 8, 0},
        {"eval/gsm8k/reward_mean", H5T_FLOAT, 8, 0},
        {"eval/countdown/step", H5T_INTEGER, 8, 0},
        {"eval/countdown/accuracy", H5T_FLOAT, 8, 0},
        {"eval/countdown/accuracy_se", H5T_FLOAT, 8, 0},
        {"eval/countdown/reward_mean", H5T_FLOAT, 8, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int rank = raw_shape(f, t[i].name, dims);
        ck_assert_msg(rank == (t[i].width ? 2 : 1), "%s: rank %d", t[i].name, rank);
        if (t[i].width)
            ck_assert_msg((int)dims[1] == t[i].width, "%s: width %d", t[i].name,
                          (int)dims[1]);
        raw_check_type(f, t[i].name, t[i].cls, t[i].size);
    }
    /* The file is in the 1.10 (SWMR-capable) format: superblock version >= 3. */
    H5F_info2_t info;
    ck_assert(H5Fget_info2(f, &info) >= 0);
    ck_assert_uint_ge(info.super.version, 3);
    H5Fclose(f);
}
END_TEST

/* Every single-chunk object header of a log inside one 4 KiB page: a write that a
 * SIGKILL stops is torn only between pages, so such a header is either old or new,
 * never half of each (a checksum failure that made the whole log unreadable). */
typedef struct {
    int checked, crossing;
    char first[256];
} page_scan;

static herr_t scan_header(hid_t obj, const char *name, const H5O_info_t *info, void *data)
{
    (void)obj;
    page_scan *ps = data;
    if (info->hdr.nchunks != 1)
        return 0;
    haddr_t a = info->addr, b = info->addr + info->hdr.space.total - 1;
    ps->checked++;
    if (a / 4096 != b / 4096 && ps->crossing++ == 0)
        snprintf(ps->first, sizeof ps->first, "/%s at %llu..%llu", name,
                 (unsigned long long)a, (unsigned long long)b);
    return 0;
}

static void check_headers_within_pages(const char *path)
{
    hid_t f = raw_open(path);
    page_scan ps = {0};
    ck_assert(H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_NATIVE, scan_header, &ps,
                        H5O_INFO_BASIC | H5O_INFO_HDR) >= 0);
    H5Fclose(f);
    ck_assert_int_ge(ps.checked, 50);
    ck_assert_msg(ps.crossing == 0, "%s: %d of %d object headers cross a page, first %s", path,
                  ps.crossing, ps.checked, ps.first);
}

START_TEST(test_headers_within_pages)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    write_log(path, 1, 12, 0.0);
    check_headers_within_pages(path);
    /* a resumed log is a fresh copy: the same layout rule */
    dllm_err err = {0};
    h5log *log;
    ck_assert_msg(h5log_resume(&log, path, 9, &err) == 0, "%s", err.msg);
    append_full_step(log, 10, 0.0);
    ck_assert_int_eq(h5log_close(log), 0);
    check_headers_within_pages(path);
}
END_TEST

/* The writer the parent kills: creates the log, appends steps 1.. with a
 * flush each, reports step K through the pipe, and keeps going. */
static void killed_writer(const char *path, int fd, int k)
{
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    h5log *log;
    if (h5log_create(&log, path, &m, &d, &err))
        _exit(3);
    /* A bounded run: a parent that is descheduled for long (a loaded machine) must
     * not come back to a file of thousands of steps to verify. Past the bound the
     * writer waits for its kill; the kill then lands between steps. */
    for (int64_t s = 1; s <= k + 200; s++) {
        append_full_step(log, s, 0.0);
        if (s == k) {
            char c = 'k';
            if (write(fd, &c, 1) != 1)
                _exit(4);
        }
    }
    for (;;)
        pause();
}

/* After a kill, every dataset of a group has m or m + 1 rows (the step in
 * flight may have reached some of them); m >= k. Returns m. */
static int64_t check_killed_file(const char *path, int k)
{
    hid_t f = raw_open(path);
    hsize_t dims[2];
    int64_t lo = INT64_MAX, hi = -1;
    raw_shape(f, "steps/step", dims);
    lo = hi = (int64_t)dims[0];
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        char name[128];
        snprintf(name, sizeof name, "steps/%s", h5log_metric_name(i));
        raw_shape(f, name, dims);
        lo = (int64_t)dims[0] < lo ? (int64_t)dims[0] : lo;
        hi = (int64_t)dims[0] > hi ? (int64_t)dims[0] : hi;
    }
    ck_assert_int_ge(lo, k);
    ck_assert_int_le(hi - lo, 1);
    check_steps(f, lo, 1, 0.0, NULL);
    /* Trajectories: whole steps, at most one ahead of the complete steps. */
    const char *tnames[] = {"trajectories/step", "trajectories/log_w",
                            "trajectories/completion_tokens", "trajectories/commit_step"};
    int64_t tlo = INT64_MAX, thi = -1;
    for (int i = 0; i < 4; i++) {
        raw_shape(f, tnames[i], dims);
        tlo = (int64_t)dims[0] < tlo ? (int64_t)dims[0] : tlo;
        thi = (int64_t)dims[0] > thi ? (int64_t)dims[0] : thi;
    }
    ck_assert_int_ge(tlo, lo * ROWS_PER_STEP);
    ck_assert_int_le(thi, (hi + 1) * ROWS_PER_STEP);
    ck_assert_int_eq(tlo % ROWS_PER_STEP, 0);
    check_trajectories(f, lo * ROWS_PER_STEP, 1, 0.0);
    H5Fclose(f);

    dllm_err err = {0};
    h5log *log;
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), lo);
    ck_assert_int_ge(h5log_ntrajectories(log), lo * ROWS_PER_STEP);
    h5log_close(log);
    return lo;
}

static int64_t run_and_kill(const char *path, int k, int delay_us)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        killed_writer(path, fds[1], k);
    }
    close(fds[1]);
    char c = 0;
    ck_assert_int_eq(read(fds[0], &c, 1), 1);
    close(fds[0]);
    if (delay_us)
        usleep((useconds_t)delay_us);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "writer ended before the kill (status %d)", status);
    return check_killed_file(path, k);
}

START_TEST(test_sigkill_leaves_completed_steps)
{
    make_tmpdir();
    /* Kill right after step K and at a few later moments, mid-step by chance. */
    static const int delays[] = {0, 300, 1000, 3000, 7000};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "killed%zu.h5", i);
        int64_t m = run_and_kill(tmp_path(name), 15, delays[i]);
        ck_assert_int_ge(m, 15);
    }
}
END_TEST

START_TEST(test_resume_after_kill)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    int64_t m = run_and_kill(path, 8, 2000);
    /* Resume at the checkpoint (step 8), then continue with other values. */
    dllm_err err = {0};
    h5log *log;
    ck_assert_msg(h5log_resume(&log, path, 8, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), 8);
    ck_assert_int_eq(h5log_ntrajectories(log), 8 * ROWS_PER_STEP);
    append_full_step(log, 9, 0.0);
    append_full_step(log, 10, 0.0);
    ck_assert_int_eq(h5log_close(log), 0);
    ck_assert_int_ge(m, 8);
    hid_t f = raw_open(path);
    int64_t rows;
    check_steps(f, 10, 1, 0.0, &rows);
    ck_assert_int_eq(rows, 10);
    check_trajectories(f, 10 * ROWS_PER_STEP, 1, 0.0);
    H5Fclose(f);
    ck_assert_int_ne(access(tmp_path("log.h5.tmp"), F_OK), 0);
}
END_TEST

/* Trajectory datasets of many chunks (a long run's log): a resume and a reader
 * must read them through. HDF5 1.10 fails a multi-chunk read on a dataset handle
 * when another handle to the same dataset was refreshed, which every resume of a
 * run past about 500 rollouts used to hit. */
enum { BIG_ROWS = 5000 };  /* > 2 chunks of every trajectory dataset */

static void append_big_step(h5log *log, int64_t s)
{
    dllm_err err = {0};
    int n = BIG_ROWS;
    int64_t *pidx = calloc(n, sizeof *pidx), *grp = calloc(n, sizeof *grp);
    int32_t *plen = calloc(n, sizeof *plen), *clen = calloc(n, sizeof *clen);
    int32_t *ptok = calloc((size_t)n * P, sizeof *ptok), *ctok = calloc((size_t)n * G, sizeof *ctok);
    float *ratio = calloc((size_t)n * G, sizeof *ratio), *prob = calloc((size_t)n * G, sizeof *prob);
    int16_t *cstep = calloc((size_t)n * G, sizeof *cstep);
    double *col = calloc((size_t)n, sizeof *col);
    for (int r = 0; r < n; r++) {
        pidx[r] = r;
        grp[r] = r / 8;
        plen[r] = 1;
        clen[r] = G;
        ptok[(size_t)r * P] = r;
        for (int t = 0; t < G; t++) {
            ctok[(size_t)r * G + t] = r + t;
            prob[(size_t)r * G + t] = (float)t / 8.0f;
        }
        col[r] = (double)s * BIG_ROWS + r;
    }
    h5log_traj_batch b = {.n = n, .step = s, .prompt_index = pidx, .group = grp,
                          .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = P,
                          .completion_tokens = ctok, .completion_len = clen,
                          .completion_stride = G, .reward = col, .advantage = col,
                          .l_mu = col, .l_pi = col, .log_w = col, .coef = col,
                          .log_w_se = col, .l_mu_exact = col, .token_log_ratio = ratio,
                          .commit_step = cstep, .commit_prob = prob};
    ok(h5log_append_trajectories(log, &b, &err), &err);
    double mm[S] = {0}, v[H5LOG_N_METRICS];
    ok(h5log_append_mismatch(log, s, mm, &err), &err);
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        v[i] = metric_value(s, i, 0.0);
    ok(h5log_append_step(log, s, v, &err), &err);
    free(pidx); free(grp); free(plen); free(clen); free(ptok); free(ctok);
    free(ratio); free(prob); free(cstep); free(col);
}

START_TEST(test_resume_many_chunks)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    h5log *log;
    ck_assert_msg(h5log_create(&log, path, &m, &d, &err) == 0, "%s", err.msg);
    for (int64_t s = 1; s <= 3; s++)
        append_big_step(log, s);
    ck_assert_int_eq(h5log_close(log), 0);

    /* a reader: the row count, then a column read through the same log */
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_ntrajectories(log), 3 * BIG_ROWS);
    double *v;
    int64_t n;
    ck_assert_msg(h5log_read_column(log, "trajectories/reward", &v, &n, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, 3 * BIG_ROWS);
    for (int64_t i = 0; i < n; i++)
        ck_assert(same(v[i], (double)BIG_ROWS + (double)i));
    free(v);
    h5log_close(log);

    ck_assert_msg(h5log_resume(&log, path, 2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), 2);
    ck_assert_int_eq(h5log_ntrajectories(log), 2 * BIG_ROWS);
    ck_assert_int_eq(h5log_close(log), 0);
    hid_t f = raw_open(path);
    hsize_t r, w;
    float *prob = raw_read(f, "trajectories/commit_prob", H5T_NATIVE_FLOAT, &r, &w);
    ck_assert_int_eq((int64_t)r, 2 * BIG_ROWS);
    ck_assert_int_eq((int64_t)w, G);
    for (hsize_t i = 0; i < r; i++)
        for (int t = 0; t < G; t++)
            ck_assert(prob[i * G + t] == (float)t / 8.0f);
    free(prob);
    H5Fclose(f);
}
END_TEST

START_TEST(test_resume_drops_later_steps)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    write_log(path, 1, 10, 0.0);
    dllm_err err = {0};
    h5log *log;
    ck_assert_msg(h5log_resume(&log, path, 6, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), 6);
    ck_assert_int_eq(h5log_get_dims(log)->n_eval_tasks, 2);
    for (int64_t s = 7; s <= 9; s++)
        append_full_step(log, s, 1000.0);  /* new values, told apart by the salt */
    ck_assert_int_eq(h5log_close(log), 0);
    ck_assert_int_ne(access(tmp_path("log.h5.tmp"), F_OK), 0);

    hid_t f = raw_open(path);
    hsize_t r, w;
    int64_t *st = raw_read(f, "steps/step", H5T_NATIVE_INT64, &r, NULL);
    ck_assert_int_eq((int64_t)r, 9);  /* steps 1..9, each once */
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(st[i], i + 1);
    free(st);
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        char name[128];
        snprintf(name, sizeof name, "steps/%s", h5log_metric_name(i));
        double *v = raw_read(f, name, H5T_NATIVE_DOUBLE, &r, NULL);
        ck_assert_int_eq((int64_t)r, 9);
        for (int s = 1; s <= 9; s++)
            ck_assert(same(v[s - 1], metric_value(s, i, s <= 6 ? 0.0 : 1000.0)));
        free(v);
    }
    /* Trajectories: steps 1..6 old, 7..9 new. */
    check_trajectories(f, 6 * ROWS_PER_STEP, 1, 0.0);
    double *lw = raw_read(f, "trajectories/log_w", H5T_NATIVE_DOUBLE, &r, NULL);
    ck_assert_int_eq((int64_t)r, 9 * ROWS_PER_STEP);
    ck_assert(lw[6 * ROWS_PER_STEP + 1] == traj_value(7, 1, 4) + 1000.0);
    free(lw);
    int64_t *tst = raw_read(f, "trajectories/step", H5T_NATIVE_INT64, &r, NULL);
    for (int i = 0; i < 9 * ROWS_PER_STEP; i++)
        ck_assert_int_eq(tst[i], 1 + i / ROWS_PER_STEP);
    free(tst);
    double *mm = raw_read(f, "mismatch_by_step/mean_abs_d", H5T_NATIVE_DOUBLE, &r, &w);
    ck_assert_int_eq((int64_t)r, 9);
    ck_assert(mm[8 * S + 0] == 1000.0 + 9 / 4.0);
    ck_assert(mm[5 * S + 2] == 6 / 4.0 + 2);
    free(mm);
    /* Eval at step 5 kept, the one at step 10 dropped. */
    int64_t *est = raw_read(f, "eval/gsm8k/step", H5T_NATIVE_INT64, &r, NULL);
    ck_assert_int_eq((int64_t)r, 1);
    ck_assert_int_eq(est[0], 5);
    free(est);
    /* Attributes carried over. */
    char *started = raw_str_attr(f, "started");
    ck_assert_str_eq(started, test_meta().started);
    free(started);
    H5Fclose(f);

    /* Resuming past the end of the log would leave a gap: refused, log intact. */
    ck_assert_int_eq(h5log_resume(&log, path, 20, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(log);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_ptr_nonnull(strstr(err.msg, "step 9"));
    ck_assert_int_ne(access(tmp_path("log.h5.tmp"), F_OK), 0);
    ck_assert_msg(h5log_open_read(&log, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(h5log_nsteps(log), 9);
    h5log_close(log);
}
END_TEST

START_TEST(test_bad_files)
{
    make_tmpdir();
    dllm_err err = {0};
    h5log *log = (h5log *)1;
    /* Missing file. */
    const char *missing = tmp_path("nope.h5");
    ck_assert_int_eq(h5log_open_read(&log, missing, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(log);
    ck_assert_ptr_nonnull(strstr(err.msg, missing));
    /* Garbage bytes. */
    const char *junk = tmp_path("junk.h5");
    FILE *fp = fopen(junk, "w");
    fputs("this is not an HDF5 file\n", fp);
    fclose(fp);
    ck_assert_int_eq(h5log_open_read(&log, junk, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, junk));
    ck_assert_int_eq(h5log_resume(&log, junk, 3, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, junk));
    /* A valid HDF5 file that is not a run log. */
    const char *other = tmp_path("other.h5");
    hid_t f = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Fclose(f);
    ck_assert_int_eq(h5log_open_read(&log, other, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, other));
    ck_assert_ptr_nonnull(strstr(err.msg, "not a run log"));
    /* A truncated log. */
    const char *good = tmp_path("good.h5");
    write_log(good, 1, 3, 0.0);
    char *buf;
    size_t len;
    ck_assert_int_eq(dllm_read_file(good, &buf, &len, &err), 0);
    const char *cut = tmp_path("cut.h5");
    fp = fopen(cut, "w");
    fwrite(buf, 1, len / 3, fp);
    fclose(fp);
    free(buf);
    ck_assert_int_eq(h5log_open_read(&log, cut, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, cut));
    /* Creating in a missing directory, and bad sizes. */
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    const char *nodir = tmp_path("no/such/dir/log.h5");
    ck_assert_int_eq(h5log_create(&log, nodir, &m, &d, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, nodir));
    d.denoise_steps = 0;
    ck_assert_int_eq(h5log_create(&log, tmp_path("x.h5"), &m, &d, &err), DLLM_EXIT_INPUT);
    d = test_dims();
    const char *bad_tasks[2] = {"gsm8k", "a/b"};
    d.eval_tasks = bad_tasks;
    ck_assert_int_eq(h5log_create(&log, tmp_path("x.h5"), &m, &d, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "a/b"));
}
END_TEST

START_TEST(test_append_errors_and_named)
{
    make_tmpdir();
    const char *path = tmp_path("log.h5");
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    h5log *log;
    ck_assert_msg(h5log_create(&log, path, &m, &d, &err) == 0, "%s", err.msg);
    /* A prompt longer than the log's rows. */
    int32_t toks[P + 1] = {0}, plen = P + 1, clen = 0;
    h5log_traj_batch b = {.n = 1, .step = 1, .prompt_tokens = toks, .prompt_len = &plen,
                          .prompt_stride = P + 1, .completion_len = &clen};
    ck_assert_int_eq(h5log_append_trajectories(log, &b, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "prompt of 6 tokens"));
    ck_assert_int_eq(h5log_ntrajectories(log), 0);
    /* NULL optional columns: pads and NaN. */
    plen = 2;
    ck_assert_msg(h5log_append_trajectories(log, &b, &err) == 0, "%s", err.msg);
    ck_assert_int_ne(h5log_append_eval(log, "sudoku", 1, 0, 0, 0, &err), 0);
    const char *names[2] = {"alpha", "rho_ess"};
    double vals[2] = {0.25, 0.75};
    ck_assert_msg(h5log_append_step_named(log, 1, 2, names, vals, &err) == 0, "%s", err.msg);
    const char *bad[1] = {"alpah"};
    ck_assert_int_ne(h5log_append_step_named(log, 2, 1, bad, vals, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "alpah"));
    ck_assert_int_eq(h5log_nsteps(log), 1);
    ck_assert_int_eq(h5log_close(log), 0);

    hid_t f = raw_open(path);
    hsize_t r, w;
    double *a = raw_read(f, "steps/alpha", H5T_NATIVE_DOUBLE, &r, NULL);
    double *k3 = raw_read(f, "steps/k3", H5T_NATIVE_DOUBLE, &r, NULL);
    ck_assert(r == 1 && a[0] == 0.25 && isnan(k3[0]));
    free(a);
    free(k3);
    int64_t *pi = raw_read(f, "trajectories/prompt_index", H5T_NATIVE_INT64, &r, NULL);
    double *lw = raw_read(f, "trajectories/log_w", H5T_NATIVE_DOUBLE, &r, NULL);
    int32_t *pt = raw_read(f, "trajectories/prompt_tokens", H5T_NATIVE_INT32, &r, &w);
    ck_assert(r == 1 && pi[0] == -1 && isnan(lw[0]) && pt[0] == 0 && pt[2] == -1);
    free(pi);
    free(lw);
    free(pt);
    H5Fclose(f);
}
END_TEST

/* Runs dllm-rl with args, stdout into out (malloc'd). Returns the exit status. */
static int run_cli(const char *args, char **out, char **errout)
{
    const char *bin = getenv("DLLM_BIN");
    if (!bin)
        bin = "./dllm-rl";
    char cmd[2048];
    const char *ef = tmp_path("stderr.txt");
    snprintf(cmd, sizeof cmd, "%s %s 2>%s", bin, args, ef);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int st = pclose(p);
    *out = buf;
    size_t elen;
    dllm_err err;
    if (dllm_read_file(ef, errout, &elen, &err))
        *errout = strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_inspect_cli)
{
    make_tmpdir();
    char *out, *eout, args[1024];
    /* Missing log: exit 2, the file named. */
    snprintf(args, sizeof args, "inspect %s", tmp_path("missing.h5"));
    ck_assert_int_eq(run_cli(args, &out, &eout), 2);
    ck_assert_ptr_nonnull(strstr(eout, "missing.h5"));
    free(out);
    free(eout);
    /* A run directory whose log was killed mid-run: the summary of what is there. */
    const char *path = tmp_path("log.h5");
    enum { N = 12 };
    write_log(path, 1, N, 0.0);
    snprintf(args, sizeof args, "inspect %s --json", tmpdir);
    ck_assert_int_eq(run_cli(args, &out, &eout), 0);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    ck_assert_msg(root != NULL, "inspect --json: %s\n%s", je.text, out);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "steps")), N);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "trajectories")),
                     N * ROWS_PER_STEP);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "first_step")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "last_step")), N);
    json_t *attrs = json_object_get(root, "attributes");
    ck_assert_int_eq(json_integer_value(json_object_get(attrs, "seed")), 7);
    ck_assert_str_eq(json_string_value(json_object_get(attrs, "device")), "cpu");
    json_t *metrics = json_object_get(root, "metrics");
    ck_assert_ptr_null(json_object_get(metrics, "policy_kl"));  /* all NaN: skipped */
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        if (i == H5LOG_M(policy_kl))
            continue;
        json_t *o = json_object_get(metrics, h5log_metric_name(i));
        ck_assert_msg(o != NULL, "metric %s missing", h5log_metric_name(i));
        double sum = 0, first = NAN, last = NAN, mn = INFINITY, mx = -INFINITY;
        int n = 0;
        for (int s = 1; s <= N; s++) {
            double v = metric_value(s, i, 0.0);
            if (isnan(v))
                continue;
            first = n ? first : v;
            last = v;
            mn = fmin(mn, v);
            mx = fmax(mx, v);
            sum += v;
            n++;
        }
        ck_assert_int_eq(json_integer_value(json_object_get(o, "n")), n);
        ck_assert(json_real_value(json_object_get(o, "first")) == first);
        ck_assert(json_real_value(json_object_get(o, "last")) == last);
        ck_assert(json_real_value(json_object_get(o, "min")) == mn);
        ck_assert(json_real_value(json_object_get(o, "max")) == mx);
        ck_assert(fabs(json_real_value(json_object_get(o, "mean")) - sum / n) < 1e-12);
    }
    json_t *g = json_object_get(json_object_get(root, "eval"), "gsm8k");
    ck_assert_int_eq(json_integer_value(json_object_get(g, "evals")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(g, "step")), 10);
    ck_assert(json_real_value(json_object_get(g, "accuracy")) == 0.1);
    json_t *c = json_object_get(json_object_get(root, "eval"), "countdown");
    ck_assert(json_is_null(json_object_get(c, "step")));
    json_decref(root);
    free(out);
    free(eout);
    /* The text table names the metrics and the last eval. */
    snprintf(args, sizeof args, "inspect %s", path);
    ck_assert_int_eq(run_cli(args, &out, &eout), 0);
    ck_assert_ptr_nonnull(strstr(out, "steps        12 (step 1 .. 12)"));
    ck_assert_ptr_nonnull(strstr(out, "tokens_per_s"));
    /* the all-NaN policy_kl is not in the table, but listed with the reason */
    const char *absent = strstr(out, "absent (NaN at every step)");
    ck_assert_ptr_nonnull(absent);
    const char *kl = strstr(out, "policy_kl");
    ck_assert_msg(kl && kl > absent && strstr(kl, "grpo.beta"), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "gsm8k"));
    free(out);
    free(eout);
    /* A corrupt log: exit 2 naming it. */
    const char *junk = tmp_path("junk.h5");
    FILE *fp = fopen(junk, "w");
    fputs("garbage", fp);
    fclose(fp);
    snprintf(args, sizeof args, "inspect %s --json", junk);
    ck_assert_int_eq(run_cli(args, &out, &eout), 2);
    ck_assert_ptr_nonnull(strstr(eout, junk));
    free(out);
    free(eout);
}
END_TEST

/* ---- exported files (DLLM_H5LOG_EXPORT) ---- */

/* A synthetic run: NP prompts x NG completions of up to DG tokens; the
 * per-token log-ratios d grow over training (as rollout/trainer mismatch does),
 * rewards are Bernoulli with a rising success rate. The step diagnostics are
 * computed from the logged trajectories exactly as docs/METHOD.md section 5 defines
 * them (AIS linear combine, weights 1, tau_delta 0.05, C 2, eta 0), so the
 * notebook can recompute and compare them. */
static void write_demo_log(const char *path)
{
    enum { T = 40, NP = 4, NG = 8, N = NP * NG, DG = 16, DP = 6, DS = 8 };
    static const char *const demo_tasks[1] = {"countdown"};
    h5log_meta m = {.config_yaml = "experiment: demo\nseed: 11\ncorrection: {method: ais, ais: "
                                   "{population: all, variance: excess}}\n",
                    .version = "demo", .git_revision = "demo", .device = "cpu",
                    .started = "2025-01-01T00:00:00Z", .seed = 11};
    h5log_dims dims = {.max_prompt = DP, .max_completion = DG, .denoise_steps = DS,
                       .n_eval_tasks = 1, .eval_tasks = demo_tasks};
    dllm_err err = {0};
    h5log *log;
    if (h5log_create(&log, path, &m, &dims, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    const double tau = 0.05, cap = 2.0;
    for (int64_t step = 1; step <= T; step++) {
        dllm_rng rng = dllm_rng_make(11, (uint64_t)step, 0, 0);
        double sigma = 0.005 + 0.004 * (double)step;   /* per-token mismatch scale */
        double p_ok = 0.15 + 0.6 * (double)step / T;
        int32_t ptok[N * DP], ctok[N * DG], plen[N], clen[N];
        int64_t pidx[N], grp[N];
        float ratio[N * DG], prob[N * DG];
        int16_t cstep[N * DG];
        double reward[N], adv[N], lmu[N], lpi[N], logw[N], coef[N], w[N];
        double dsum[DS] = {0}, dcnt[DS] = {0}, delta = 0, k3 = 0, k3n = 0;
        for (int i = 0; i < N; i++) {
            pidx[i] = 1000 * step + i / NG;
            grp[i] = i / NG;
            plen[i] = DP;
            clen[i] = 8 + (int)dllm_rng_below(&rng, DG - 7);
            for (int t = 0; t < DP; t++)
                ptok[i * DP + t] = (int32_t)(100 + t);
            double lw = 0, dabs = 0;
            for (int t = 0; t < clen[i]; t++) {
                double d = sigma * dllm_rng_normal(&rng);
                ctok[i * DG + t] = (int32_t)dllm_rng_below(&rng, 1000);
                ratio[i * DG + t] = (float)d;
                cstep[i * DG + t] = (int16_t)dllm_rng_below(&rng, DS);
                prob[i * DG + t] = (float)(0.5 + 0.5 * dllm_rng_uniform(&rng));
                d = (double)ratio[i * DG + t];  /* the value as logged (float32) */
                lw += d;
                dabs += fabs(d);
                dsum[cstep[i * DG + t]] += fabs(d);
                dcnt[cstep[i * DG + t]] += 1;
                k3 += exp(d) - 1 - d;
                k3n += 1;
            }
            delta += dabs / clen[i];
            lmu[i] = -2.0 * clen[i] + 0.5 * dllm_rng_normal(&rng);
            lpi[i] = lmu[i] + lw;
            logw[i] = lpi[i] - lmu[i];
            w[i] = exp(logw[i]);
            reward[i] = dllm_rng_uniform(&rng) < p_ok ? 1.0 : 0.0;
        }
        delta /= N;
        k3 /= k3n;
        /* Group-normalised advantages (population std; 0 for a zero-variance group). */
        int zero_var = 0;
        double rmean = 0, rvar = 0;
        for (int g = 0; g < NP; g++) {
            double mu = 0, var = 0;
            for (int j = 0; j < NG; j++)
                mu += reward[g * NG + j] / NG;
            for (int j = 0; j < NG; j++)
                var += (reward[g * NG + j] - mu) * (reward[g * NG + j] - mu) / NG;
            zero_var += var == 0;
            for (int j = 0; j < NG; j++)
                adv[g * NG + j] = var > 0 ? (reward[g * NG + j] - mu) / sqrt(var) : 0.0;
        }
        for (int i = 0; i < N; i++)
            rmean += reward[i] / N;
        for (int i = 0; i < N; i++)
            rvar += (reward[i] - rmean) * (reward[i] - rmean) / N;
        /* AIS diagnostics. */
        double sw = 0, sw2 = 0;
        for (int i = 0; i < N; i++) {
            sw += w[i];
            sw2 += w[i] * w[i];
        }
        double ess = sw * sw / sw2, rho = ess / N, s_rel = (N - ess) / (N - 1);
        double s_div = 1 - exp(-delta / tau);
        double wbar = sw / N, ma = 0, mwa = 0, mw2 = 0;
        for (int i = 0; i < N; i++) {
            ma += adv[i] / N;
            mwa += w[i] / wbar * adv[i] / N;
            mw2 += (w[i] / wbar) * (w[i] / wbar) / N;
        }
        double va = 0, vwa = 0;
        for (int i = 0; i < N; i++) {
            va += (adv[i] - ma) * (adv[i] - ma) / N;
            vwa += (w[i] / wbar * adv[i] - mwa) * (w[i] / wbar * adv[i] - mwa) / N;
        }
        double nu = va > 0 ? vwa / (mw2 * va) : 1.0;
        double s_var = 1 - 1 / fmax(nu, 1.0);
        double alpha_raw = fmin(fmax((s_rel + s_div + s_var) / 3, 0.0), 1.0);
        double alpha = alpha_raw;
        int trunc = 0;
        for (int i = 0; i < N; i++) {
            coef[i] = (1 - alpha) + alpha * fmin(w[i], cap);
            trunc += w[i] > cap;
        }
        h5log_traj_batch b = {.n = N, .step = step, .prompt_index = pidx, .group = grp,
                              .prompt_tokens = ptok, .prompt_len = plen, .prompt_stride = DP,
                              .completion_tokens = ctok, .completion_len = clen,
                              .completion_stride = DG, .reward = reward, .advantage = adv,
                              .l_mu = lmu, .l_pi = lpi, .log_w = logw, .coef = coef,
                              .token_log_ratio = ratio, .commit_step = cstep,
                              .commit_prob = prob};
        double mm[DS];
        for (int k = 0; k < DS; k++)
            mm[k] = dcnt[k] ? dsum[k] / dcnt[k] : NAN;
        double v[H5LOG_N_METRICS];
        h5log_values_nan(v);
        v[H5LOG_M(reward_mean)] = rmean;
        v[H5LOG_M(reward_std)] = sqrt(rvar);
        v[H5LOG_M(accuracy)] = rmean;
        v[H5LOG_M(loss)] = -0.01 * (double)step / T;
        v[H5LOG_M(clip_frac)] = 0;
        v[H5LOG_M(grad_norm)] = 1.0 / (1 + 0.05 * (double)step);
        v[H5LOG_M(lr)] = 1e-4;
        v[H5LOG_M(alpha_raw)] = alpha_raw;
        v[H5LOG_M(alpha)] = alpha;
        v[H5LOG_M(rho_ess)] = rho;
        v[H5LOG_M(s_rel)] = s_rel;
        v[H5LOG_M(delta)] = delta;
        v[H5LOG_M(s_div)] = s_div;
        v[H5LOG_M(nu)] = nu;
        v[H5LOG_M(s_var)] = s_var;
        v[H5LOG_M(k3)] = k3;
        v[H5LOG_M(frac_truncated)] = (double)trunc / N;
        v[H5LOG_M(frac_zeroed)] = 0;
        v[H5LOG_M(frac_nonfinite)] = 0;
        v[H5LOG_M(frac_zero_var_groups)] = (double)zero_var / NP;
        if (h5log_append_trajectories(log, &b, &err) ||
            h5log_append_mismatch(log, step, mm, &err) ||
            h5log_append_step(log, step, v, &err) ||
            (step % 10 == 0 &&
             h5log_append_eval(log, "countdown", step, p_ok, sqrt(p_ok * (1 - p_ok) / 100),
                               p_ok, &err))) {
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
    }
    h5log_close(log);
}

static void export_logs(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/test_values.h5", dir);
    dllm_err err = {0};
    h5log_meta m = test_meta();
    h5log_dims d = test_dims();
    h5log *log;
    if (h5log_create(&log, path, &m, &d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int64_t s = 1; s <= 12; s++)
        append_full_step(log, s, 0.0);
    h5log_close(log);
    snprintf(path, sizeof path, "%s/demo.h5", dir);
    write_demo_log(path);
    printf("wrote %s/test_values.h5 and %s/demo.h5\n", dir, dir);
}

static Suite *h5log_suite(void)
{
    Suite *s = suite_create("h5log");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 180); /* the SIGKILL cases flush every step: slow on a loaded machine */
    tcase_add_checked_fixture(tc, NULL, rm_tmpdir);
    tcase_add_test(tc, test_roundtrip_values);
    tcase_add_test(tc, test_schema_dtypes);
    tcase_add_test(tc, test_datasets_have_units_and_description);
    tcase_add_test(tc, test_traj_table_gather);
    tcase_add_test(tc, test_pass_at_k);
    tcase_add_test(tc, test_headers_within_pages);
    tcase_add_test(tc, test_sigkill_leaves_completed_steps);
    tcase_add_test(tc, test_resume_after_kill);
    tcase_add_test(tc, test_resume_drops_later_steps);
    tcase_add_test(tc, test_resume_many_chunks);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_append_errors_and_named);
    tcase_add_test(tc, test_inspect_cli);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    const char *export_dir = getenv("DLLM_H5LOG_EXPORT");
    if (export_dir) {
        exporting = 1;
        export_logs(export_dir);
        exporting = 0;
    }
    return h5log_suite();
}
