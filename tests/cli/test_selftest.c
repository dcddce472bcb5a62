/* test_selftest.c: `dllm-rl selftest` run as a user runs it (the binary, DLLM_BIN):
 *
 *   cpu       `selftest --quick` prints its rows, all PASS, exit 0, and the same table as
 *             JSON; a perturbed product (DLLM_SELFTEST_PERTURB, which only this test
 *             sets) turns its row into FAIL and the exit status into 1;
 *   flags     a bad --device, an unknown flag, an unwritable --json: exit 2;
 *   cuda      in a build with the CUDA backend (the emulation in CI): `selftest --device
 *             cuda --quick` has the device, probe (the INT8 rules too), op, FP8 GEMM,
 *             INT8 linear (bit for bit with the CPU), greedy tokens (with the tie
 *             margin), generate/score and rate rows, nothing FAIL, exit 0, the rates SKIP under emulation; a perturbed op
 *             (rmsnorm_fwd) FAILs its rows and only them, exit 1. Without CUDA in the
 *             build, --device cuda is refused with exit 2 and says so. */
#include "config.h"
#include "tests/harness/harness.h"

#include "kernels/cuda_device.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* The whole of a file (static buffer). */
static const char *slurp(const char *name)
{
    static char buf[1 << 18];
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", tu_dir, name);
    FILE *f = fopen(p, "rb");
    buf[0] = '\0';
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

/* The row whose check starts with prefix, as a line (static); "" if none. */
static const char *row(const char *out, const char *prefix)
{
    static char line[1024];
    line[0] = '\0';
    for (const char *p = out; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (!strncmp(p, prefix, strlen(prefix)) && n < sizeof line) {
            memcpy(line, p, n);
            line[n] = '\0';
            return line;
        }
        p = nl ? nl + 1 : NULL;
    }
    return line;
}

static bool row_is(const char *out, const char *prefix, const char *status)
{
    const char *r = row(out, prefix);
    char want[16];
    snprintf(want, sizeof want, " %s ", status);
    return r[0] && strstr(r, want) != NULL;
}

START_TEST(test_cpu_rows)
{
    int rc = tu_sh("%s selftest --quick --json %s/cpu.json > %s/cpu.txt 2>&1", tu_bin(), tu_dir, tu_dir);
    const char *out = slurp("cpu.txt");
    ck_assert_msg(rc == 0, "selftest exited %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, " FAIL ") == NULL, "a row failed:\n%s", out);
    static const char *const rows[] = {"cpu: bf16 linear, tiny up", "cpu: bf16 linear, small down",
                                       "cpu: fp8 fast vs fp8-exact, small up",
                                       "cpu: GEMM openblas"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        ck_assert_msg(row_is(out, rows[i], "PASS"), "no PASS row '%s':\n%s", rows[i], out);
    /* every rollout precision names its product (not timed under --quick) */
    static const char *const prec[] = {"bf16", "fp8", "fp8-exact", "nvfp4", "int8"};
    for (size_t i = 0; i < sizeof prec / sizeof *prec; i++) {
        char name[64];
        snprintf(name, sizeof name, "cpu: rollout %s, path", prec[i]);
        ck_assert_msg(row_is(out, name, "SKIP"), "no SKIP row '%s':\n%s", name, out);
        ck_assert_msg(strstr(row(out, name), "path: ") != NULL, "row '%s' names no path:\n%s",
                      name, out);
    }
    ck_assert_msg(strstr(out, "0 failed"), "summary:\n%s", out);
    char p[4200];
    snprintf(p, sizeof p, "%s/cpu.json", tu_dir);
    json_t *j = json_load_file(p, 0, NULL);
    ck_assert_msg(j != NULL, "cpu.json does not parse");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "failed")), 0);
    ck_assert_int_ge(json_array_size(json_object_get(j, "rows")), 10);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "rows"), 0),
                                                       "status")),
                     "PASS");
    json_decref(j);
}
END_TEST

START_TEST(test_cpu_mutation)
{
    int rc = tu_sh("DLLM_SELFTEST_PERTURB=bf16_linear %s selftest --quick > %s/mut.txt 2>&1", tu_bin(),
                   tu_dir);
    const char *out = slurp("mut.txt");
    ck_assert_msg(rc == 1, "a perturbed bf16 linear: exit %d, want 1:\n%s", rc, out);
    ck_assert_msg(row_is(out, "cpu: bf16 linear, tiny up", "FAIL"), "row not FAIL:\n%s", out);
    ck_assert_msg(row_is(out, "cpu: fp8 fast vs fp8-exact, tiny up", "PASS"),
                  "an unperturbed row failed:\n%s", out);
}
END_TEST

START_TEST(test_bad_flags)
{
    ck_assert_int_eq(tu_sh("%s selftest --device tpu > %s/f1.txt 2>&1", tu_bin(), tu_dir), 2);
    ck_assert_msg(strstr(slurp("f1.txt"), "--device"), "%s", slurp("f1.txt"));
    ck_assert_int_eq(tu_sh("%s selftest --fast > %s/f2.txt 2>&1", tu_bin(), tu_dir), 2);
    ck_assert_msg(strstr(slurp("f2.txt"), "--fast"), "%s", slurp("f2.txt"));
    ck_assert_int_eq(tu_sh("%s selftest --json %s/no/such/dir/x.json > %s/f3.txt 2>&1", tu_bin(), tu_dir,
                           tu_dir), 2);
    ck_assert_msg(strstr(slurp("f3.txt"), "x.json"), "%s", slurp("f3.txt"));
}
END_TEST

START_TEST(test_cuda_rows)
{
#ifndef HAVE_CUDA
    int rc = tu_sh("%s selftest --device cuda > %s/nocuda.txt 2>&1", tu_bin(), tu_dir);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(slurp("nocuda.txt"), "no CUDA backend"), "%s", slurp("nocuda.txt"));
#else
    char why[256];
    if (dllm_cuda_device_count(why, sizeof why) == 0) {
        printf("test_selftest: --device cuda not run: %s\n", why);
        return;
    }
    int rc = tu_sh("%s selftest --device cuda --quick --json %s/cuda.json > %s/cuda.txt 2>&1",
                   tu_bin(), tu_dir, tu_dir);
    const char *out = slurp("cuda.txt");
    ck_assert_msg(rc == 0, "selftest --device cuda exited %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, " FAIL ") == NULL, "a row failed:\n%s", out);
    static const char *const pass[] = {
        "cuda: device", "cuda: code for this device", "cuda: runtime: warp shuffles",
        "cuda: conversions: fp8 and bf16", "cuda: cuBLASLt: FP8 format pairs",
        "cuda: cuBLASLt: FP8 layout", "op gemm, tiny", "op fp8_linear_fwd, tiny",
        "op rmsnorm_fwd, tiny", "op attention, small", "op xent, small", "op adamw, small",
        "op grad_norm, small", "fp8 GEMM tensor, small up", "cuda: cuBLASLt: INT8 layout",
        "op int8_linear_fwd channel, vs cpu", "op int8_linear_fwd block, vs cpu",
        "greedy tokens, device vs cpu"};
    for (size_t i = 0; i < sizeof pass / sizeof *pass; i++)
        ck_assert_msg(row_is(out, pass[i], "PASS"), "no PASS row '%s':\n%s", pass[i], out);
    /* generate/score: PASS once the commands have --device, SKIP until then */
    ck_assert_msg(row_is(out, "cli: generate --device cuda vs cpu", "PASS") ||
                      row_is(out, "cli: generate --device cuda vs cpu", "SKIP"),
                  "generate row:\n%s", out);
    ck_assert_msg(row_is(out, "cli: score --device cuda vs cpu", "PASS") ||
                      row_is(out, "cli: score --device cuda vs cpu", "SKIP"),
                  "score row:\n%s", out);
#ifdef DLLM_CUDA_EMULATION
    ck_assert_msg(strstr(row(out, "cuda: device"), "emulated"), "%s", out);
    ck_assert_msg(row_is(out, "cuda: emulation: faults", "PASS"), "%s", out);
    ck_assert_msg(row_is(out, "cuda: BF16 GEMM rate", "SKIP") &&
                      strstr(row(out, "cuda: BF16 GEMM rate"), "emulation measures no speed"),
                  "a rate under emulation:\n%s", out);
    ck_assert_msg(strstr(out, "TFLOP/s") == NULL, "an emulated time as a rate:\n%s", out);
#endif
    /* a perturbed op fails its rows, and only them */
    rc = tu_sh("DLLM_SELFTEST_PERTURB=rmsnorm_fwd %s selftest --device cuda --quick > %s/cmut.txt "
               "2>&1", tu_bin(), tu_dir);
    out = slurp("cmut.txt");
    ck_assert_msg(rc == 1, "a perturbed rmsnorm_fwd: exit %d, want 1:\n%s", rc, out);
    ck_assert_msg(row_is(out, "op rmsnorm_fwd, tiny", "FAIL"), "row not FAIL:\n%s", out);
    ck_assert_msg(row_is(out, "op rmsnorm_fwd, small", "FAIL"), "row not FAIL:\n%s", out);
    ck_assert_msg(row_is(out, "op rmsnorm_bwd, tiny", "PASS"), "another row failed:\n%s", out);
    ck_assert_msg(strstr(out, "2 failed"), "summary:\n%s", out);
#endif
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    Suite *s = suite_create("selftest");
    TCase *tc = tcase_create("selftest");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cpu_rows);
    tcase_add_test(tc, test_cpu_mutation);
    tcase_add_test(tc, test_bad_flags);
    tcase_add_test(tc, test_cuda_rows);
    suite_add_tcase(s, tc);
    ctx->nofork = true;
    return s;
}
