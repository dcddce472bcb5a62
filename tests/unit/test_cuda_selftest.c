/* test_cuda_selftest: runs kernels/cuda/selftest_probe.cu, the CUDA runtime and cuBLASLt
 * checks (on a GPU: what the emulation assumes; under emulation: also what it must
 * report), which `dllm-rl selftest --device cuda` reports as rows.
 * SKIP (77) without the CUDA backend or without a device. */
#include "config.h"

#include "kernels/cuda_device.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef HAVE_CUDA
#include "kernels/cuda_selftest.h"

START_TEST(test_selftest)
{
    static char report[16384];
    int fails = dllm_cuda_selftest(report, sizeof report);
    ck_assert_msg(fails == 0, "%d checks failed:\n%s", fails, report);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
    char why[256] = "";
    if (dllm_cuda_device_count(why, sizeof why) == 0)
        return tu_skip(ctx, "%s", why);
#ifdef HAVE_CUDA
    Suite *s = suite_create("cuda_selftest");
    TCase *tc = tcase_create("selftest");
    tcase_add_test(tc, test_selftest);
    suite_add_tcase(s, tc);
    ctx->nofork = true;
    return s;
#else
    return tu_skip(ctx, "built without CUDA");
#endif
}
