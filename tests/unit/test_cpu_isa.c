/* test_cpu_isa: DLLM_CPU_ISA caps the features the fast paths ask for
 * (kernels/cpu/cpu_isa.h). The cap is read once per process (the first fast path asks at
 * load), so each case runs this binary again with the variable set and reads what it
 * reports: `avx2` leaves AVX2 and FMA as the CPU has them and nothing wider, `baseline`
 * leaves nothing, `native` is the CPU, and another value exits 2 naming the variable.
 * The vectorised exponentials follow the cap (vexpf_path). AMX (the FP8 kernel's tiles)
 * follows it too, and DLLM_AMX=off leaves it unused (another value exits 2). */
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vexpf.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const NAMES[CPU_NFEATURES] = {"avx2", "fma", "avx512f", "avx512bf16",
                                                 "avx512vnni", "avxvnni", "amx-bf16"};

/* the child's report: "cap F0 F1 ... expf-path vec-level" */
static void report(void)
{
    printf("%s", cpu_isa_cap());
    for (int f = 0; f < CPU_NFEATURES; f++)
        printf(" %d", cpu_has((cpu_feature)f));
    printf(" %s %d\n", vexpf_path(), cpu_vec_level());
}

/* runs this binary with DLLM_CPU_ISA=isa and DLLM_AMX=amx (NULL: unset); its output into
 * out, its exit status returned */
static int run_env(const char *isa, const char *amx, char *out, size_t cap)
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd[1], 1), dup2(fd[1], 2);
        close(fd[0]), close(fd[1]);
        if (isa)
            setenv("DLLM_CPU_ISA", isa, 1);
        else
            unsetenv("DLLM_CPU_ISA");
        if (amx)
            setenv("DLLM_AMX", amx, 1);
        else
            unsetenv("DLLM_AMX");
        setenv("TEST_CPU_ISA_REPORT", "1", 1);
        execl("/proc/self/exe", "test_cpu_isa", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int run_capped(const char *isa, char *out, size_t cap)
{
    return run_env(isa, NULL, out, cap);
}

static void parse(const char *out, char *capname, int *has, char *path, int *level)
{
    int at = 0, n = 0;
    ck_assert_msg(sscanf(out, "%15s%n", capname, &n) == 1, "report: %s", out);
    for (int f = 0; f < CPU_NFEATURES; f++) {
        at += n;
        ck_assert_msg(sscanf(out + at, "%d%n", &has[f], &n) == 1, "report: %s", out);
    }
    at += n;
    ck_assert_msg(sscanf(out + at, "%15s %d", path, level) == 2, "report: %s", out);
}

START_TEST(test_caps)
{
    char out[512], cn[16], path[16], ncn[16], npath[16];
    int has[CPU_NFEATURES], nat[CPU_NFEATURES], level, nlevel;
    ck_assert_int_eq(run_capped(NULL, out, sizeof out), 0);
    parse(out, ncn, nat, npath, &nlevel);
    ck_assert_str_eq(ncn, "native");
    for (int f = 0; f < CPU_NFEATURES; f++)
        ck_assert_int_eq(nat[f], cpu_has((cpu_feature)f) || strcmp(cpu_isa_cap(), "native"));
    /* the multiversioned loops' level: x86-64-v4 has AVX-512, v3 AVX2 and FMA */
    ck_assert(nlevel >= 0 && nlevel <= 2);
    ck_assert(nlevel < 2 || nat[CPU_AVX512F]);
    ck_assert(nlevel < 1 || (nat[CPU_AVX2] && nat[CPU_FMA]));
    printf("native: avx2 %d fma %d avx512f %d avx512bf16 %d avx512vnni %d avxvnni %d "
           "amx-bf16 %d, expf %s, loops x86-64-v%d\n", nat[0], nat[1], nat[2], nat[3], nat[4],
           nat[5], nat[6], npath, nlevel ? nlevel + 2 : 1);
    ck_assert(!nat[CPU_AMXBF16] || nat[CPU_AVX512BF16]);

    /* DLLM_AMX=off: everything else as native, AMX unused; another value exits 2 */
    ck_assert_int_eq(run_env(NULL, "off", out, sizeof out), 0);
    parse(out, cn, has, path, &level);
    for (int f = 0; f < CPU_NFEATURES; f++)
        ck_assert_msg(has[f] == (f == CPU_AMXBF16 ? 0 : nat[f]), "DLLM_AMX=off: %s is %d",
                      NAMES[f], has[f]);
    ck_assert_int_eq(run_env(NULL, "tiles", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "DLLM_AMX=tiles") && strstr(out, "auto or off"), "%s", out);

    ck_assert_int_eq(run_capped("avx2", out, sizeof out), 0);
    parse(out, cn, has, path, &level);
    ck_assert_int_eq(level, nlevel < 1 ? nlevel : 1);
    ck_assert_str_eq(cn, "avx2");
    for (int f = 0; f < CPU_NFEATURES; f++)
        ck_assert_msg(has[f] == ((f == CPU_AVX2 || f == CPU_FMA) && nat[f]),
                      "avx2 cap: %s is %d", NAMES[f], has[f]);
    ck_assert_str_eq(path, nat[CPU_AVX2] && nat[CPU_FMA] && strcmp(npath, "libm") ? "avx2" : "libm");

    ck_assert_int_eq(run_capped("baseline", out, sizeof out), 0);
    parse(out, cn, has, path, &level);
    ck_assert_int_eq(level, 0);
    ck_assert_str_eq(cn, "baseline");
    for (int f = 0; f < CPU_NFEATURES; f++)
        ck_assert_msg(!has[f], "baseline cap: %s is %d", NAMES[f], has[f]);
    ck_assert_str_eq(path, "libm");

    ck_assert_int_eq(run_capped("avx512", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "DLLM_CPU_ISA=avx512") && strstr(out, "native, avx2 or baseline"),
                  "%s", out);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    if (getenv("TEST_CPU_ISA_REPORT")) {
        report();
        exit(0);
    }
    Suite *s = suite_create("cpu_isa");
    TCase *tc = tcase_create("caps");
    tcase_add_test(tc, test_caps);
    suite_add_tcase(s, tc);
    return s;
}
