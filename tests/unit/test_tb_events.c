/* test_tb_events: the TensorBoard event file writer (src/log/tb_events.c).
 *  - CRC32C against the published test vectors (RFC 3720, appendix B.4, and the
 *    check value of "123456789"), and the TFRecord mask;
 *  - Event protobufs and TFRecord framing against bytes worked out by hand from
 *    the wire format (the same bytes the protobuf library serialises);
 *  - the writer: a file that opens with its file_version, one flushed record per
 *    step, a resumed run's file named after the first and opening with a restart at
 *    its first step, a directory that cannot be written refused naming the path;
 *  - `train` with log.tensorboard, cut back a checkpoint and resumed: the event files,
 *    read as TensorBoard reads them (a restart drops what came at its step or later),
 *    hold every finite step metric and evaluation of log.h5 as its float, once, and
 *    nothing else; `sft`'s hold sft_log.jsonl's values. */
#include "src/log/tb_events.h"
#include "tests/harness/harness.h"
#include "tests/harness/tb_read.h"
#include "tests/harness/test_log.h"

#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void assert_bytes(const tb_buf *b, const uint8_t *want, size_t n, const char *what)
{
    ck_assert_msg(b->n == n, "%s: %zu bytes, want %zu", what, b->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b->p[i] == want[i], "%s: byte %zu is %02x, want %02x", what, i, b->p[i],
                      want[i]);
}

START_TEST(crc32c_vectors)
{
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    ck_assert_uint_eq(tb_crc32c(buf, 32), 0x113FDB5Cu);
    ck_assert_uint_eq(tb_crc32c("123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(tb_crc32c("", 0), 0);
    /* mask: rotate right by 15, add 0xa282ead8 */
    ck_assert_uint_eq(tb_masked_crc32c("", 0), 0xA282EAD8u);
    ck_assert_uint_eq(tb_masked_crc32c("123456789", 9),
                      (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u) & 0xFFFFFFFFu);
}
END_TEST

START_TEST(event_bytes)
{
    tb_buf b = {0};
    /* wall_time 1.5: key 1<<3|1 = 0x09, the double's 8 bytes little-endian;
     * file_version: key 3<<3|2 = 0x1a, length 13, the text */
    static const uint8_t version[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
                                      0x1a, 0x0d, 'b',  'r',  'a',  'i',  'n',  '.',  'E',
                                      'v',  'e',  'n',  't',  ':',  '2'};
    tb_event_file_version(&b, 1.5);
    assert_bytes(&b, version, sizeof version, "file_version event");

    /* step 300: key 0x10, varint ac 02; summary: key 5<<3|2 = 0x2a, 15 bytes: one
     * Value (key 0x0a, 13 bytes): tag (0x0a, 6, "s/loss"), simple_value (key
     * 2<<3|5 = 0x15, 0.25f = 0x3e800000 little-endian); the NaN value is left out */
    static const uint8_t scalar[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x10,
                                     0xac, 0x02, 0x2a, 0x0f, 0x0a, 0x0d, 0x0a, 0x06, 's',  '/',
                                     'l',  'o',  's',  's',  0x15, 0x00, 0x00, 0x80, 0x3e};
    const char *names[3] = {"loss", "alpha", "k3"};
    const double values[3] = {0.25, NAN, INFINITY};
    b.n = 0;
    tb_event_scalars(&b, 2.0, 300, "s/", 3, names, values);
    assert_bytes(&b, scalar, sizeof scalar, "scalar event");

    /* SessionLog START at step 3: session_log is field 7 (key 0x3a), status field 1 = 1 */
    static const uint8_t start[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8,
                                    0x3f, 0x10, 0x03, 0x3a, 0x02, 0x08, 0x01};
    b.n = 0;
    tb_event_start(&b, 1.5, 3);
    assert_bytes(&b, start, sizeof start, "start event");

    /* a step past 32 bits, 2^35 + 1: six varint bytes; no finite value: an empty summary */
    static const uint8_t big[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f, 0x10,
                                  0x81, 0x80, 0x80, 0x80, 0x80, 0x01, 0x2a, 0x00};
    const double none[1] = {NAN};
    b.n = 0;
    tb_event_scalars(&b, 0.5, ((int64_t)1 << 35) + 1, "", 1, names, none);
    assert_bytes(&b, big, sizeof big, "large step");

    /* step 0 is proto3's default: not written */
    static const uint8_t zero[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f,
                                   0x2a, 0x0b, 0x0a, 0x09, 0x0a, 0x02, 'k',  '3',  0x15,
                                   0x00, 0x00, 0xc0, 0xbf};
    const double minus[1] = {-1.5};
    b.n = 0;
    tb_event_scalars(&b, 1.0, 0, "", 1, names + 2, minus);
    assert_bytes(&b, zero, sizeof zero, "step 0");
    tb_buf_free(&b);
}
END_TEST

START_TEST(record_framing)
{
    /* uint64 length, masked CRC32C of those 8 bytes, data, masked CRC32C of the data;
     * the CRCs as TensorFlow's record writer computes them */
    tb_buf b = {0};
    static const uint8_t empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07,
                                    0xd8, 0xea, 0x82, 0xa2};
    tb_record(&b, (const uint8_t *)"", 0);
    assert_bytes(&b, empty, sizeof empty, "empty record");
    static const uint8_t abc[] = {3,    0,    0,    0,    0,   0,   0,   0,    0xb0, 0x99, 0x49,
                                  0x0e, 'a',  'b',  'c',  0x6e, 0x57, 0xf1, 0x21};
    b.n = 0;
    tb_record(&b, (const uint8_t *)"abc", 3);
    assert_bytes(&b, abc, sizeof abc, "record of abc");
    /* the file_version event of event_bytes, framed */
    tb_buf ev = {0};
    tb_event_file_version(&ev, 1.5);
    b.n = 0;
    tb_record(&b, ev.p, ev.n);
    static const uint8_t head[] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    static const uint8_t tail[] = {0x2a, 0x28, 0x64, 0x6c};
    ck_assert_uint_eq(b.n, 12 + 24 + 4);
    ck_assert_int_eq(memcmp(b.p, head, 12), 0);
    ck_assert_int_eq(memcmp(b.p + 12, ev.p, 24), 0);
    ck_assert_int_eq(memcmp(b.p + 36, tail, 4), 0);
    tb_buf_free(&ev);
    tb_buf_free(&b);
}
END_TEST

/* The event files of dir in name order (at most 8). */
static int event_files(const char *dir, char names[8][512])
{
    int n = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
            ck_assert_int_lt(n, 8);
            snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
        }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[512];
            memcpy(t, names[j], 512);
            memcpy(names[j], names[j - 1], 512);
            memcpy(names[j - 1], t, 512);
        }
    return n;
}

START_TEST(writer_files)
{
    char dir[] = "/tmp/dllm-tb-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dllm_err err = {0};
    tb_writer *w;
    ck_assert_msg(tb_writer_open(&w, dir, -1, &err) == 0, "%s", err.msg);
    const char *names[2] = {"a", "b"};
    for (int s = 1; s <= 3; s++) {
        double v[2] = {s * 0.5, s == 2 ? NAN : -s};
        ck_assert_msg(tb_write_scalars(w, s, "steps/", 2, names, v, &err) == 0, "%s", err.msg);
        /* flushed per step: the file holds the step before the writer closes */
        int n;
        tu_tb_event *ev = tu_tb_read(tb_writer_path(w), &n);
        ck_assert_int_eq(n, 1 + s);
        ck_assert_int_eq(ev[s].step, s);
        ck_assert_int_eq(ev[s].n, s == 2 ? 1 : 2);
        ck_assert_str_eq(ev[s].v[0].tag, "steps/a");
        ck_assert_float_eq(ev[s].v[0].value, (float)(s * 0.5));
        if (s != 2) {
            ck_assert_str_eq(ev[s].v[1].tag, "steps/b");
            ck_assert_float_eq(ev[s].v[1].value, (float)-s);
        }
        free(ev);
    }
    ck_assert_int_eq(tb_writer_close(w), 0);
    /* a resumed run (same second, most likely): a second file, after the first by name */
    ck_assert_msg(tb_writer_open(&w, dir, 3, &err) == 0, "%s", err.msg);
    double v2[2] = {7, 8};
    ck_assert_int_eq(tb_write_scalars(w, 3, "steps/", 2, names, v2, &err), 0);
    ck_assert_int_eq(tb_writer_close(w), 0);
    char files[8][512];
    ck_assert_int_eq(event_files(dir, files), 2);
    int n0, n1;
    tu_tb_event *a = tu_tb_read(files[0], &n0), *b = tu_tb_read(files[1], &n1);
    ck_assert_int_eq(n0, 4);
    ck_assert_str_eq(a[0].file_version, "brain.Event:2");
    ck_assert_int_eq(a[0].has_summary, 0);
    ck_assert_int_eq(a[0].session_status, 0);
    ck_assert_int_eq(n1, 3);
    ck_assert_str_eq(b[0].file_version, "brain.Event:2");
    ck_assert_int_eq(b[1].session_status, 1); /* START */
    ck_assert_int_eq(b[1].step, 3);
    ck_assert_int_eq(b[1].has_summary, 0);
    ck_assert_int_eq(b[2].step, 3);
    ck_assert_float_eq(b[2].v[1].value, 8.0f);
    /* wall times: seconds since the epoch, this century */
    ck_assert(a[0].wall_time > 1.6e9 && b[2].wall_time >= a[0].wall_time);
    free(a);
    free(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(unwritable_directory_is_refused)
{
    dllm_err err = {0};
    tb_writer *w = (tb_writer *)&err;
    ck_assert_int_eq(tb_writer_open(&w, "/nonexistent-dllm-dir", -1, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.msg, "/nonexistent-dllm-dir/events.out.tfevents.") &&
                      strstr(err.msg, "cannot create"),
                  "%s", err.msg);
}
END_TEST

/* ---- the commands ----------------------------------------------------------------- */

/* What TensorBoard shows of a run: the points of its event files read in name order,
 * a restart (SessionLog START) dropping every point at its step or later. */
typedef struct {
    char tag[128];
    int64_t step;
    float value;
} tb_point;

static tb_point *shown_points(const char *run_dir, int *n_out, int *n_files, int64_t *restart)
{
    char files[8][512];
    int nf = event_files(run_dir, files), n = 0;
    tb_point *pts = NULL;
    *restart = -1;
    for (int f = 0; f < nf; f++) {
        int ne;
        tu_tb_event *ev = tu_tb_read(files[f], &ne);
        ck_assert_msg(ne >= 1 && !strcmp(ev[0].file_version, "brain.Event:2"),
                      "%s: no file_version first", files[f]);
        for (int e = 1; e < ne; e++) {
            if (ev[e].session_status == 1) {
                ck_assert_msg(e == 1, "%s: a restart past the file's start", files[f]);
                *restart = ev[e].step;
                int k = 0;
                for (int i = 0; i < n; i++)
                    if (pts[i].step < ev[e].step)
                        pts[k++] = pts[i];
                n = k;
                continue;
            }
            for (int v = 0; v < ev[e].n; v++) {
                pts = realloc(pts, sizeof *pts * (size_t)(n + 1));
                snprintf(pts[n].tag, sizeof pts[n].tag, "%s", ev[e].v[v].tag);
                pts[n].step = ev[e].step;
                pts[n++].value = ev[e].v[v].value;
            }
        }
        free(ev);
    }
    *n_out = n;
    *n_files = nf;
    return pts;
}

/* Checks that tag holds value (as a float) at step exactly once; counts the match. */
static void expect_point(const tb_point *pts, int n, const char *tag, int64_t step, double value,
                         int *matched)
{
    int found = 0;
    for (int i = 0; i < n; i++)
        if (pts[i].step == step && !strcmp(pts[i].tag, tag)) {
            found++;
            ck_assert_msg(memcmp(&pts[i].value, &(float){(float)value}, sizeof(float)) == 0,
                          "%s step %lld: %.9g in the events, %.9g in the log", tag,
                          (long long)step, pts[i].value, (float)value);
        }
    ck_assert_msg(found == 1, "%s step %lld: %d points in the events", tag, (long long)step, found);
    (*matched)++;
}

START_TEST(train_events_equal_the_log)
{
    char tmp[] = "/tmp/dllm-tb-cli-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    ck_assert_int_eq(tu_sh("%s init-model --arch llada --preset tiny --seed 3 --out %s/model "
                           ">/dev/null", tu_bin(), tmp), 0);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/t.yaml", tmp);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "experiment: tb\nseed: 1\nmodel: {path: %s/model}\n"
            "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
            "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 12, steps: 6,\n"
            "          temperature: 1.0}\n"
            "likelihood: {mc_samples: 2}\n"
            "grpo: {steps: 3, prompts_per_step: 2, inner_steps: 1}\n"
            "correction: {method: ais, estimator: elbo}\n"
            "eval: {every: 2, n: 4, gen_length: 12, block_length: 12, steps: 6}\n"
            "log: {dir: %s/runs, tensorboard: true}\n"
            "checkpoint: {every: 1, keep: 0}\n", tmp, tmp);
    fclose(f);
    ck_assert_int_eq(tu_sh("%s train %s --quiet", tu_bin(), cfg), 0);
    /* as a kill after step 3's log rows and before its checkpoint leaves the run */
    ck_assert_int_eq(tu_sh("rm -rf %s/runs/tb/ckpt/step-3 && ln -sfn step-2 %s/runs/tb/ckpt/latest",
                           tmp, tmp), 0);
    ck_assert_int_eq(tu_sh("%s train --resume %s/runs/tb --quiet", tu_bin(), tmp), 0);

    char run[600];
    snprintf(run, sizeof run, "%s/runs/tb", tmp);
    int n, nf, matched = 0;
    int64_t restart;
    tb_point *pts = shown_points(run, &n, &nf, &restart);
    ck_assert_int_eq(nf, 2);
    ck_assert_int_eq(restart, 3);
    int64_t ns;
    double *steps = tu_log_column("steps/step", &ns, "%s/log.h5", run);
    ck_assert_int_eq(ns, 3);
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        char dset[128], tag[128];
        snprintf(dset, sizeof dset, "steps/%s", h5log_metric_name(i));
        snprintf(tag, sizeof tag, "steps/%s", h5log_metric_name(i));
        int64_t nv;
        double *v = tu_log_column(dset, &nv, "%s/log.h5", run);
        for (int64_t t = 0; t < nv; t++)
            if (isfinite(v[t]))
                expect_point(pts, n, tag, (int64_t)steps[t], v[t], &matched);
        free(v);
    }
    int n_metric_points = matched;
    ck_assert_int_ge(n_metric_points, 3 * 20); /* most metrics are computed at every step */
    static const char *const eval_names[3] = {"accuracy", "accuracy_se", "reward_mean"};
    int64_t ne;
    double *eval_steps = tu_log_column("eval/sudoku/step", &ne, "%s/log.h5", run);
    ck_assert_int_eq(ne, 3); /* before training, step 2, the last step */
    for (int k = 0; k < 3; k++) {
        char dset[128];
        snprintf(dset, sizeof dset, "eval/sudoku/%s", eval_names[k]);
        int64_t nv;
        double *v = tu_log_column(dset, &nv, "%s/log.h5", run);
        for (int64_t t = 0; t < nv; t++)
            expect_point(pts, n, dset, (int64_t)eval_steps[t], v[t], &matched);
        free(v);
    }
    ck_assert_msg(matched == n, "%d points in the events, %d in the log", n, matched);
    free(eval_steps);
    free(steps);
    free(pts);

    /* sft: sft_log.jsonl's numbers, as the file holds them */
    ck_assert_int_eq(tu_sh("%s tasks sft-data sudoku --n 8 --seed 1 --max-blanks 6 > %s/sft.jsonl",
                           tu_bin(), tmp), 0);
    snprintf(cfg, sizeof cfg, "%s/s.yaml", tmp);
    f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "experiment: sft\nseed: 1\nmodel: {path: %s/model}\n"
               "data: {train: %s/sft.jsonl, max_len: 64}\nsft: {steps: 2, batch_size: 2}\n"
               "log: {dir: %s/runs, every: 1, tensorboard: true}\n", tmp, tmp, tmp);
    fclose(f);
    ck_assert_int_eq(tu_sh("%s sft %s --quiet", tu_bin(), cfg), 0);
    snprintf(run, sizeof run, "%s/runs/sft", tmp);
    pts = shown_points(run, &n, &nf, &restart);
    ck_assert_int_eq(nf, 1);
    ck_assert_int_eq(restart, -1);
    char jl[700];
    snprintf(jl, sizeof jl, "%s/sft_log.jsonl", run);
    FILE *lf = fopen(jl, "r");
    ck_assert_ptr_nonnull(lf);
    char line[1024];
    static const char *const sft_names[5] = {"loss", "grad_norm", "lr", "tokens_per_s",
                                             "elapsed_s"};
    matched = 0;
    while (fgets(line, sizeof line, lf)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        ck_assert_msg(o, "%s: %s", jl, je.text);
        int64_t step = json_integer_value(json_object_get(o, "step"));
        for (int k = 0; k < 5; k++) {
            char tag[64];
            snprintf(tag, sizeof tag, "sft/%s", sft_names[k]);
            expect_point(pts, n, tag, step,
                         json_number_value(json_object_get(o, sft_names[k])), &matched);
        }
        json_decref(o);
    }
    fclose(lf);
    ck_assert_int_eq(matched, 10);
    ck_assert_int_eq(n, 10);
    free(pts);
    tu_sh("rm -rf %s", tmp);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("tb_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, crc32c_vectors);
    tcase_add_test(tc, event_bytes);
    tcase_add_test(tc, record_framing);
    tcase_add_test(tc, writer_files);
    tcase_add_test(tc, unwritable_directory_is_refused);
    suite_add_tcase(s, tc);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 600);
    tcase_add_test(cli, train_events_equal_the_log);
    suite_add_tcase(s, cli);
    return s;
}
