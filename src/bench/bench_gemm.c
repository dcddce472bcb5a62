/* dllm-rl bench gemm: GFLOP/s of the CPU's linear-layer products at the shapes a model
 * uses, on every path the build has, next to the machine's measured peak.
 *
 * Paths: fp32 on OpenBLAS and on oneDNN (op_linear_fwd under DLLM_GEMM), bf16
 * (op_bf16_linear_fwd: activations rounded to bf16 each call, packed bf16 weight), and
 * the FP8 W8A8 linear (op_fp8_linear_fwd, E4M3, 128 x 128 weight blocks, 1 x 128
 * activation groups) in its fast mode (codes on bf16 dot products) and its exact
 * simulation, and the INT8 linear (op_int8_linear_fwd, channel scaling). Every timing includes what the op does per call (activation rounding or
 * quantisation), not the one-off weight packing. FLOPs are 2 N K OC per product.
 *
 * Peak: a register-only loop of independent AVX-512 FMAs (fp32) and of vdpbf16ps (bf16
 * pairs, 4 FLOPs per fp32 lane) on every OpenMP thread: what the cores can issue, the
 * roof the GEMMs are measured against. */
#include "dllm/model_config.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/cli/cli_util.h"
#include "src/cli/commands.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const char usage_text[] =
    "usage: dllm-rl bench gemm [--preset tiny,small] [--rows N] [--square 1024,2048]\n"
    "                          [--time SECONDS] [--rounds R] [--clock wall|cpu]\n"
    "\n"
    "GFLOP/s of out[N,OC] = in[N,K] @ w[OC,K]^T at the linear layers of each preset\n"
    "(q/k/v/o [C,C], gate/up [H,C], down [C,H], head [V,C]; N = --rows, default 384 =\n"
    "a rollout batch of 4 x 96 tokens) and at square n x n x n products, for fp32 on\n"
    "OpenBLAS and oneDNN, bf16, FP8 W8A8 (fast: codes on bf16 dot products; exact:\n"
    "the fp32 simulation) and INT8 (channel scaling, activations quantised per call, exact\n"
    "integer sums: rollout.precision int8). Each number is the best of --rounds rounds of about --time\n"
    "seconds (default 3 x 0.1 s). Also prints the measured fp32 FMA and bf16 dot-product\n"
    "peaks of the OpenMP threads. Threads: OMP_NUM_THREADS.\n"
    "--clock cpu divides by the process's CPU time instead of wall time: GFLOP per\n"
    "core-second, less sensitive to other jobs on a shared machine (use it with\n"
    "OMP_NUM_THREADS=1: idle OpenMP threads spin and their CPU time counts).\n";

static bool cpu_clock;

/* Wall or process CPU seconds, per --clock. */
static double now(void)
{
    if (!cpu_clock)
        return dllm_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- peak ---------------------------------------------------------------------------- */

#if defined(__x86_64__)
/* FLOPs of `iters` rounds of 16 independent 16-lane FMAs. */
__attribute__((target("avx512f"))) static double peak_fma_loop(long iters)
{
    __m512 acc[16], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16 /* the accumulators must live in registers */
        for (int i = 0; i < 16; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    __m512 s = acc[0];
#pragma GCC unroll 16
    for (int i = 1; i < 16; i++)
        s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 16 * 16 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16_loop(long iters)
{
    __m512 acc[16];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f80);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16 /* the accumulators must live in registers */
        for (int i = 0; i < 16; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    __m512 s = acc[0];
#pragma GCC unroll 16
    for (int i = 1; i < 16; i++)
        s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 16 * 16 * 4;
}

/* The same with 8-lane FMAs on a CPU without AVX-512: 12 accumulators (with x and y, 14 of
 * the 16 ymm registers), enough to cover the FMA latency on two ports. */
__attribute__((target("avx2,fma"))) static double peak_fma256_loop(long iters)
{
    __m256 acc[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12 /* the accumulators must live in registers */
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    __m256 s = acc[0];
#pragma GCC unroll 12
    for (int i = 1; i < 12; i++)
        s = _mm256_add_ps(s, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    volatile float sink = lanes[0] + lanes[7];
    (void)sink;
    return (double)iters * 12 * 8 * 2;
}
#endif

/* GFLOP/s of the loop on all OpenMP threads, best of 3; 0 if the CPU lacks it (fp32: the
 * AVX-512 loop, else the AVX2 one; bf16: AVX512-BF16 only). */
static double peak(bool bf16)
{
#if defined(__x86_64__)
    bool z = cpu_has(CPU_AVX512F);
    bool y = cpu_has(CPU_AVX2) && cpu_has(CPU_FMA);
    if (bf16 ? !(z && cpu_has(CPU_AVX512BF16)) : !(z || y))
        return 0;
    double best = 0;
    long iters = 2000000;
    for (int r = 0; r < 3; r++) {
        double fl = 0, t0 = now();
#pragma omp parallel reduction(+ : fl)
        fl += bf16 ? peak_dpbf16_loop(iters) : z ? peak_fma_loop(iters) : peak_fma256_loop(iters);
        double g = fl / (now() - t0) / 1e9;
        best = g > best ? g : best;
    }
    return best;
#else
    (void)bf16;
    return 0;
#endif
}

/* ---- products ------------------------------------------------------------------------ */

enum { P_F32_OPENBLAS, P_F32_DNNL, P_BF16, P_FP8_FAST, P_FP8_EXACT, P_INT8, NPATH };
static const char *const path_names[NPATH] = {"fp32 openblas", "fp32 dnnl", "bf16",
                                              "fp8 fast", "fp8 exact", "int8"};

typedef struct {
    int path, N, K, OC;
    const float *x, *w;
    float *out;
    bf16_matrix *wb;
    fp8_matrix *w8;
    int8_matrix *wi;
} job;

static void run_once(const job *j)
{
    switch (j->path) {
    case P_F32_OPENBLAS:
    case P_F32_DNNL: op_linear_fwd(j->out, j->x, j->w, j->N, j->K, j->OC); break;
    case P_BF16: op_bf16_linear_fwd(j->out, j->x, j->wb, j->N, j->K, j->OC); break;
    case P_INT8: op_int8_linear_fwd(j->out, j->x, j->wi, j->N, j->K, j->OC); break;
    default: op_fp8_linear_fwd(j->out, j->x, j->w8, j->N, j->K, j->OC); break;
    }
}

/* Best GFLOP/s over `rounds` rounds of at least `secs` seconds each, after a warm-up. */
static double time_job(const job *j, double secs, int rounds)
{
    setenv("DLLM_GEMM", j->path == P_F32_DNNL ? "dnnl" : "openblas", 1);
    if (j->path == P_FP8_FAST || j->path == P_FP8_EXACT)
        j->w8->fast = j->path == P_FP8_FAST;
    run_once(j);
    double flop = 2.0 * j->N * (double)j->K * j->OC, best = 0;
    for (int r = 0; r < rounds; r++) {
        long n = 0;
        double t0 = now(), el;
        do {
            run_once(j);
            n++;
        } while ((el = now() - t0) < secs);
        double g = flop * (double)n / el / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

static void bench_shape(const char *label, int N, int K, int OC, double secs, int rounds,
                        bool have_dnnl)
{
    float *x = dllm_malloc((size_t)N * K * sizeof(float));
    float *w = dllm_malloc((size_t)OC * K * sizeof(float));
    float *out = dllm_malloc((size_t)N * OC * sizeof(float));
    dllm_rng r = dllm_rng_make(3, DLLM_RNG_DATA, (uint64_t)K, (uint64_t)OC);
    for (size_t i = 0; i < (size_t)N * K; i++)
        x[i] = (float)dllm_rng_normal(&r);
    for (size_t i = 0; i < (size_t)OC * K; i++)
        w[i] = (float)(0.02 * dllm_rng_normal(&r));
    bf16_matrix wb = {0};
    bf16_matrix_pack(&wb, w, OC, K);
    fp8_matrix w8 = {0};
    dllm_err err = {0};
    int8_matrix wi = {0};
    if (fp8_quantise_weight(&w8, w, OC, K, FP8_E4M3, FP8_SCALE_BLOCK, false, &err) ||
        int8_quantise_weight(&wi, w, OC, K, INT8_SCALE_CHANNEL, &err)) {
        fprintf(stderr, "bench gemm: %s\n", err.msg);
        exit(1);
    }
    printf("%-16s %5d %5d %5d", label, N, K, OC);
    for (int p = 0; p < NPATH; p++) {
        if (p == P_F32_DNNL && !have_dnnl) {
            printf(" %13s", "-");
            continue;
        }
        job j = {p, N, K, OC, x, w, out, &wb, &w8, &wi};
        printf(" %13.1f", time_job(&j, secs, rounds));
        fflush(stdout);
    }
    printf("\n");
    bf16_matrix_free(&wb);
    int8_matrix_free(&wi);
    fp8_matrix_free(&w8);
    free(x);
    free(w);
    free(out);
}

int bench_gemm(int argc, char **argv)
{
    const char *presets = "tiny,small", *squares = "1024,2048";
    long rows = 384, rounds = 3;
    double secs = 0.1;
    dllm_err err = {0};
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"rows", required_argument, 0, 'n'},
        {"square", required_argument, 0, 's'}, {"time", required_argument, 0, 't'},
        {"rounds", required_argument, 0, 'r'}, {"clock", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'p': presets = optarg; break;
        case 'n': bad = cli_parse_int(optarg, "--rows", 1, 1 << 20, &rows, &err); break;
        case 's': squares = optarg; break;
        case 't':
            bad = cli_parse_double(optarg, "--time", &secs, &err);
            if (!bad && !(secs > 0 && secs <= 10))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--time %s: expected 0 < seconds <= 10",
                                   optarg);
            break;
        case 'r': bad = cli_parse_int(optarg, "--rounds", 1, 100, &rounds, &err); break;
        case 'c':
            if (strcmp(optarg, "wall") && strcmp(optarg, "cpu"))
                bad = dllm_err_set(&err, DLLM_EXIT_INPUT, "--clock %s: expected wall or cpu",
                                   optarg);
            cpu_clock = !strcmp(optarg, "cpu");
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return DLLM_EXIT_INPUT;
        }
        if (bad)
            return cli_fail("bench gemm", &err);
    }
    /* parse the lists first: bad input fails before any timing */
    dllm_model_config cfg[4];
    char names[4][32];
    int np = 0;
    char *list = dllm_strdup(presets);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (np == 4 || strlen(t) >= sizeof names[0]) {
            free(list);
            dllm_err_set(&err, DLLM_EXIT_INPUT, "--preset %s: at most 4 preset names", presets);
            return cli_fail("bench gemm", &err);
        }
        if (dllm_config_preset(&cfg[np], DLLM_ARCH_LLADA, t, &err)) {
            free(list);
            dllm_err_prefix(&err, "--preset");
            return cli_fail("bench gemm", &err);
        }
        strcpy(names[np++], t);
    }
    free(list);
    long sq[8];
    int ns = 0;
    list = dllm_strdup(squares);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (ns == 8 || cli_parse_int(t, "--square", 1, 8192, &sq[ns], &err)) {
            free(list);
            if (ns == 8)
                dllm_err_set(&err, DLLM_EXIT_INPUT, "--square %s: at most 8 sizes", squares);
            return cli_fail("bench gemm", &err);
        }
        ns++;
    }
    free(list);

    const char *saved_gemm = getenv("DLLM_GEMM");
    char *saved = saved_gemm ? dllm_strdup(saved_gemm) : NULL;
    bool have_dnnl = op_gemm_library_built(OP_GEMM_DNNL);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("bench gemm: %d threads, OPENBLAS_CORETYPE=%s, bf16 path %s, fp8 fast path %s, "
           "%ld x %.2f s rounds (best), %s clock\n",
           omp_get_max_threads(), ct ? ct : "(unset)", op_bf16_gemm_path(), fp8_fast_path(),
           rounds, secs, cpu_clock ? "process CPU" : "wall");
    double pf = peak(false), pb = peak(true);
    printf("peak (measured, all threads): fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s%s\n", pf,
           pb, pb > 0 ? "" : " (no AVX512-BF16 on this CPU)");
    printf("%-16s %5s %5s %5s", "GFLOP/s", "N", "K", "OC");
    for (int p = 0; p < NPATH; p++)
        printf(" %13s", path_names[p]);
    printf("\n");
    for (int i = 0; i < np; i++) {
        const dllm_model_config *c = &cfg[i];
        int C = c->d_model, H = c->mlp_hidden, QD = c->n_heads * c->head_dim;
        char l[64];
        snprintf(l, sizeof l, "%s q/o", names[i]);
        bench_shape(l, (int)rows, C, QD, secs, (int)rounds, have_dnnl);
        snprintf(l, sizeof l, "%s gate/up", names[i]);
        bench_shape(l, (int)rows, C, H, secs, (int)rounds, have_dnnl);
        snprintf(l, sizeof l, "%s down", names[i]);
        bench_shape(l, (int)rows, H, C, secs, (int)rounds, have_dnnl);
        snprintf(l, sizeof l, "%s head", names[i]);
        bench_shape(l, (int)rows, C, c->vocab_size, secs, (int)rounds, have_dnnl);
    }
    for (int i = 0; i < ns; i++) {
        char l[32];
        snprintf(l, sizeof l, "square %ld", sq[i]);
        bench_shape(l, (int)sq[i], (int)sq[i], (int)sq[i], secs, (int)rounds, have_dnnl);
    }
    if (saved) {
        setenv("DLLM_GEMM", saved, 1);
        free(saved);
    } else {
        unsetenv("DLLM_GEMM");
    }
    return 0;
}
