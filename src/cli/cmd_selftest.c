/* cmd_selftest.c: `dllm-rl selftest [--device cpu|cuda] [--quick] [--json FILE]`: checks
 * this build on this machine and prints one row per check (src/selftest/selftest.h). */
#include "config.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"
#include "src/selftest/selftest.h"

#include "kernels/cuda_device.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dllm-rl selftest [--device cpu|cuda] [--quick] [--json FILE]\n\n"
    "Checks this build on this machine and prints a table: one row per check with\n"
    "PASS, FAIL or SKIP, the measured error or number, and its tolerance.\n"
    "  --device cpu   (default) the fast CPU products against the exact fp32 reference:\n"
    "                 the bf16 linear, the FP8 fast mode against fp8-exact, op_gemm on\n"
    "                 each GEMM library of the build; each rollout precision with the\n"
    "                 product it runs here and its step time against fp32 (>= 0.95x:\n"
    "                 no precision slower than fp32 by more than 5%)\n"
    "  --device cuda  the GPU: the device and whether this binary carries SASS for it or\n"
    "                 JIT-compiles the compute_90 PTX; the runtime and cuBLASLt probes;\n"
    "                 every op of the backend table against the CPU backend at model\n"
    "                 shapes (the tiny and small presets, LLaDA-8B's with a few rows);\n"
    "                 the FP8 GEMM against the CPU's exact simulation; generate and score\n"
    "                 of a tiny model on the device against the CPU (child processes);\n"
    "                 BF16 and FP8 GEMM rates at LLaDA-8B's linear shapes and the\n"
    "                 FP8/BF16 ratio of a d1 denoising step's linears (not under the\n"
    "                 CUDA emulation, which measures no speed)\n"
    "  --quick        small shapes only, no timing (what CI runs under the emulation)\n"
    "  --json FILE    the table also as JSON\n\n"
    "exit status: 0 nothing failed, 1 a check failed, 2 bad flags or a build without\n"
    "CUDA asked for --device cuda\n";

int cmd_selftest(int argc, char **argv)
{
    static const struct option opts[] = {{"device", required_argument, 0, 'd'},
                                         {"quick", no_argument, 0, 'q'},
                                         {"json", required_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *device = "cpu", *json = NULL;
    bool quick = false;
    dllm_err err = {0};
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":", opts, NULL)) != -1;) {
        switch (c) {
        case 'd':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                dllm_err_set(&err, DLLM_EXIT_INPUT, "--device: expected cpu or cuda, got '%s'",
                             optarg);
                return cli_fail("selftest", &err);
            }
            device = optarg;
            break;
        case 'q': quick = true; break;
        case 'j': json = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case ':':
            dllm_err_set(&err, DLLM_EXIT_INPUT, "%s needs a value (see --help)", argv[optind - 1]);
            return cli_fail("selftest", &err);
        default:
            dllm_err_set(&err, DLLM_EXIT_INPUT, "unknown option '%s' (see --help)",
                         argv[optind - 1]);
            return cli_fail("selftest", &err);
        }
    }
    if (optind < argc) {
        dllm_err_set(&err, DLLM_EXIT_INPUT, "unexpected argument '%s' (see --help)", argv[optind]);
        return cli_fail("selftest", &err);
    }
    if (json) { /* a FILE that cannot be written is refused before any check runs */
        FILE *f = fopen(json, "w");
        if (!f || fclose(f)) {
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--json %s: cannot write", json);
            return cli_fail("selftest", &err);
        }
    }
    const bool cuda = !strcmp(device, "cuda");
#ifndef HAVE_CUDA
    if (cuda) {
        dllm_err_set(&err, DLLM_EXIT_INPUT,
                     "--device cuda: this build has no CUDA backend (configure --with-cuda, or "
                     "--enable-cuda-emulation to run the CUDA code on the host)");
        return cli_fail("selftest", &err);
    }
#endif
    /* the child-process rows run this very binary */
    static char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = '\0';
    else
        snprintf(exe, sizeof exe, "%s", argv[-1]); /* main passes argv + 1: the program */
    stbl_table t = {.quick = quick, .exe = exe, .live = stdout};
    const char *p = getenv("DLLM_SELFTEST_PERTURB"); /* set by tests/test_selftest only */
    t.perturb = p && p[0] ? p : NULL;
    printf("dllm-rl selftest: device %s%s (%s)\n\n", device, quick ? ", quick" : "",
           dllm_git_revision);
    stbl_print_header(stdout);
    if (cuda) {
        char why[256] = "";
        if (dllm_cuda_device_count(why, sizeof why) == 0)
            stbl_add(&t, "cuda: device", STBL_FAIL, "", "", "%s", why);
        else {
            selftest_cuda(&t);
            selftest_greedy(&t);
            selftest_cli(&t);
        }
    } else {
        selftest_cpu(&t);
        selftest_rollout(&t);
    }
    stbl_print_summary(&t, stdout);
    int rc = stbl_count(&t, STBL_FAIL) ? 1 : 0;
    char why[300];
    if (json && stbl_write_json(&t, device, json, why, sizeof why)) {
        fprintf(stderr, "selftest: %s\n", why);
        rc = rc ? rc : 1;
    }
    stbl_free(&t);
    return rc;
}
