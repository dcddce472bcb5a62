/* test_fast_gemm.c: the fast CPU products against the exact fp32 reference ops.
 *
 *  - the bf16 array conversions (vectorised) equal the scalar rounding bit for bit,
 *    special values included; so does the chunked SwiGLU forward with the plain loop;
 *  - a stop request's handler runs on its own stack (the JIT GEMMs' stack is not touched);
 *  - op_bf16_linear_fwd against a double-precision sum of the same bf16 products,
 *    within the fp32 accumulation bound (K + 4) 2^-24 sum_k |a_k w_k|, on its fast
 *    path and on the forced fallback (DLLM_BF16_GEMM=fp32), which must equal
 *    op_round_bf16 + op_linear_fwd bit for bit;
 *  - the fast FP8 mode of op_fp8_linear_fwd against the exact simulation, within
 *    (2K + 8) 2^-24 sum_k |a_k w_k| (both sum exact products in fp32; they differ in
 *    order and in where the scales are applied), for every format, weight and
 *    activation scaling, pow2 scales, odd shapes (N = 1, K not a multiple of 128), on
 *    both paths, and after an in-place re-quantisation; on bf16 dot products the
 *    same bits on 1 or 2 threads and for a row alone or in a batch; without them
 *    (or under DLLM_BF16_GEMM=fp32) the fast mode equals the exact one bit for bit;
 *  - the fast mode's activation quantisation (in the kernel) against fp8_scales and
 *    fp8_round bit for bit (one-hot weights), and the grouped op_fp8_linears_fwd
 *    against one op_fp8_linear_fwd per weight bit for bit;
 *  - the exact mode stays the default of a freshly quantised weight;
 *  - op_gemm on each library (DLLM_GEMM): repeatable bit for bit, the libraries within
 *    the accumulation bound of each other, the default library as configured, and a
 *    bad DLLM_GEMM exits 2;
 *  - op_gemm's bits do not depend on where the operands lie (a resumed run allocates
 *    its buffers at other addresses than the run it repeats), on each library.
 *
 * Built three times: test_fast_gemm checks the fallbacks (forced) and everything that
 * holds on any CPU; test_fast_gemm_native (DLLM_TEST_NATIVE_PATHS) checks the machine's
 * own fast paths (the `auto` cases: oneDNN's bf16 GEMM, the block-scaled FP8 kernel, on
 * AMX tiles where the CPU has them) and reports SKIP, saying why, on a machine without
 * them, where `auto` is the fallback and the comparison would be the fallback against
 * itself; test_fast_gemm_no_amx (also DLLM_TEST_NO_AMX) the same with AMX left unused
 * (DLLM_AMX=off): the FP8 kernel and oneDNN's bf16 GEMM on AVX512-BF16 dot products on a
 * CPU with AMX too. */
#include "config.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "src/run/run_stop.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const double EPS32 = 5.9604644775390625e-08; /* 2^-24 */

static float *randn(size_t n, uint64_t seed, float sd)
{
    float *x = dllm_malloc(n * sizeof *x);
    dllm_rng r = dllm_rng_make(seed, 7, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sd * dllm_rng_normal(&r));
    return x;
}

/* max over outputs of |got - ref| / bound, with ref and bound from a[N,K] @ w[OC,K]^T in
 * double: bound = tol * sum_k |a w| (plus the smallest normal, for all-zero rows). */
static double worst_ratio(const float *got, const float *a, const float *w, const float *ref32,
                          int N, int K, int OC, double tol)
{
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)a[(size_t)n * K + k] * w[(size_t)o * K + k];
                s += p;
                sa += fabs(p);
            }
            double ref = ref32 ? ref32[(size_t)n * OC + o] : s;
            double r = fabs(got[(size_t)n * OC + o] - ref) / (tol * sa + 1.2e-38);
            if (!(r <= worst)) /* NaN propagates as a failure */
                worst = r;
        }
    return worst;
}

static const int SHAPES[][3] = {/* N, K, OC */
                                {1, 64, 176},  {7, 130, 33},  {37, 512, 96},
                                {300, 200, 129}, {2, 1, 5},   {260, 256, 64}};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

/* ---- bf16 linear ------------------------------------------------------------------ */

static void check_bf16_linear(const char *mode)
{
    for (int s = 0; s < NSHAPES; s++) {
        int N = SHAPES[s][0], K = SHAPES[s][1], OC = SHAPES[s][2];
        float *x = randn((size_t)N * K, 1 + s, 1.0f), *w = randn((size_t)OC * K, 100 + s, 0.05f);
        float *out = dllm_malloc((size_t)N * OC * sizeof(float));
        bf16_matrix m = {0};
        bf16_matrix_pack(&m, w, OC, K);
        op_bf16_linear_fwd(out, x, &m, N, K, OC);
        /* the reference: the bf16 values, multiplied and summed in double */
        float *xr = dllm_malloc((size_t)N * K * sizeof(float));
        float *wr = dllm_malloc((size_t)OC * K * sizeof(float));
        memcpy(xr, x, (size_t)N * K * sizeof(float));
        memcpy(wr, w, (size_t)OC * K * sizeof(float));
        op_round_bf16(xr, (size_t)N * K);
        op_round_bf16(wr, (size_t)OC * K);
        double r = worst_ratio(out, xr, wr, NULL, N, K, OC, (K + 4) * EPS32);
        ck_assert_msg(r <= 1.0, "%s: bf16 linear [%d,%d]x[%d,%d]^T: error %.3g of the bound",
                      mode, N, K, OC, K, r);
        /* the exact fp32 op on the rounded values: the fallback is it, bit for bit */
        float *ref = dllm_malloc((size_t)N * OC * sizeof(float));
        op_linear_fwd(ref, xr, wr, N, K, OC);
        if (strcmp(op_bf16_gemm_path(), "fp32") == 0)
            ck_assert_msg(memcmp(ref, out, (size_t)N * OC * sizeof(float)) == 0,
                          "%s: fallback differs from op_linear_fwd on [%d,%d,%d]", mode, N, K, OC);
        /* re-packing in place takes the new values */
        for (size_t i = 0; i < (size_t)OC * K; i++)
            w[i] = -w[i];
        bf16_matrix_pack(&m, w, OC, K);
        op_bf16_linear_fwd(out, x, &m, N, K, OC);
        for (size_t i = 0; i < (size_t)N * OC; i++)
            ck_assert_msg(fabsf(out[i] + ref[i]) <= 1e-4f * (1 + fabsf(ref[i])),
                          "%s: after re-pack, out[%zu] = %g, want %g", mode, i, out[i], -ref[i]);
        bf16_matrix_free(&m);
        free(x);
        free(w);
        free(xr);
        free(wr);
        free(out);
        free(ref);
    }
}

/* The vectorised bf16 array passes against the scalar rounding, element by element, on
 * bit patterns that include NaN payloads, infinities, ties, overflow to inf and
 * subnormals, at lengths that leave vector remainders and, past 262,144 values, are
 * split over threads. */
START_TEST(test_bf16_arrays_bitwise)
{
    static const uint32_t special[] = {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFF812345u,
                                       0x7FC00000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x3F808000u,
                                       0x3F818000u, 0x00000001u, 0x80008000u, 0x00000000u,
                                       0x80000000u, 0x3F80FFFFu, 0xC0017FFFu};
    const size_t lens[] = {1, 15, 17, 1000, 262144 + 37};
    dllm_rng r = dllm_rng_make(41, 0, 0, 0);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float *x = dllm_malloc(n * sizeof *x), *y = dllm_malloc(n * sizeof *y);
        float *back = dllm_malloc(n * sizeof *back);
        uint16_t *h = dllm_malloc((n + 1) * sizeof *h);
        h[n] = 0xBEEF;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = i < sizeof special / sizeof special[0] ? special[i]
                                                               : (uint32_t)dllm_rng_u64(&r);
            memcpy(&x[i], &u, sizeof u);
        }
        memcpy(y, x, n * sizeof *x);
        op_f32_to_bf16_array(h, x, n);
        op_round_bf16(y, n);
        op_bf16_to_f32_array(back, h, n);
        for (size_t i = 0; i < n; i++) {
            uint16_t want = op_f32_to_bf16(x[i]);
            uint32_t yb, bb, wb = (uint32_t)want << 16;
            memcpy(&yb, &y[i], sizeof yb);
            memcpy(&bb, &back[i], sizeof bb);
            ck_assert_msg(h[i] == want && yb == wb && bb == wb,
                          "n %zu, element %zu: 0x%04x / 0x%08x / 0x%08x, want 0x%04x", n, i,
                          h[i], yb, bb, want);
        }
        ck_assert_uint_eq(h[n], 0xBEEF);
        free(x), free(y), free(back), free(h);
    }
}
END_TEST

/* The chunked, vectorised SwiGLU forward equals the plain loop bit for bit, at lengths
 * around the chunk size and past the threading threshold, with large, tiny and
 * non-finite gates. */
START_TEST(test_swiglu_bitwise)
{
    const size_t lens[] = {1, 255, 257, 70001};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float *g = randn(n, 50 + li, 4.0f), *u = randn(n, 60 + li, 1.0f);
        float *out = dllm_malloc(n * sizeof *out);
        if (n > 8) {
            g[0] = 100.0f, g[1] = -100.0f, g[2] = INFINITY, g[3] = -INFINITY, g[4] = NAN;
            g[5] = 1e-30f, g[6] = -0.0f, g[7] = 89.0f;
        }
        op_swiglu_fwd(out, g, u, n);
        for (size_t i = 0; i < n; i++) {
            float want = g[i] / (1.0f + expf(-g[i])) * u[i];
            ck_assert_msg(memcmp(&want, &out[i], sizeof want) == 0,
                          "n %zu, element %zu (gate %g): %a, want %a", n, i, g[i], out[i], want);
        }
        free(g), free(u), free(out);
    }
    int level = cpu_vec_level();
    printf("fast path multiversioned loops (x86-64-%s, SwiGLU bit for bit): exercised\n",
           level == 2 ? "v4" : level == 1 ? "v3" : "baseline");
}
END_TEST

START_TEST(test_bf16_linear_auto)
{
    unsetenv("DLLM_BF16_GEMM");
    printf("bf16 path on this machine: %s\n", op_bf16_gemm_path());
    check_bf16_linear("auto");
}
END_TEST

START_TEST(test_bf16_linear_fallback)
{
    setenv("DLLM_BF16_GEMM", "fp32", 1);
    ck_assert_str_eq(op_bf16_gemm_path(), "fp32");
    check_bf16_linear("fallback");
    unsetenv("DLLM_BF16_GEMM");
}
END_TEST

START_TEST(test_bf16_env_bad)
{
    setenv("DLLM_BF16_GEMM", "avx9000", 1);
    op_bf16_gemm_path(); /* exits 2 */
}
END_TEST

/* ---- FP8 fast mode ------------------------------------------------------------------ */

static void check_fp8_fast(const char *mode)
{
    static const fp8_scaling WS[3] = {FP8_SCALE_BLOCK, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    static const fp8_scaling AS[3] = {FP8_SCALE_GROUP, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    int cases = 0;
    for (int s = 0; s < NSHAPES; s++)
        for (int f = 0; f < 2; f++)
            for (int ws = 0; ws < 3; ws++)
                for (int as = 0; as < 3; as++) {
                    if (as != ws && (s % 2)) /* the full cross on every other shape */
                        continue;
                    int N = SHAPES[s][0], K = SHAPES[s][1], OC = SHAPES[s][2];
                    fp8_format fmt = f ? FP8_E5M2 : FP8_E4M3;
                    bool pow2 = (s + ws + as) % 2;
                    float *x = randn((size_t)N * K, 11 + s, 1.5f);
                    float *w = randn((size_t)OC * K, 200 + s, 0.03f);
                    /* a few large values make the block scales differ */
                    x[0] *= 40.0f;
                    w[(size_t)(OC - 1) * K] *= 30.0f;
                    /* row 1 spans 2^-30 .. 2^10: the subnormal and saturated ranges */
                    for (int k = 0; k < K && N > 1; k++)
                        x[K + k] = ldexpf((k % 2 ? -1.0f : 1.0f) * (1.0f + (float)(k % 7) / 8.0f),
                                          k % 41 - 30);
                    fp8_matrix m = {0};
                    dllm_err err = {0};
                    ck_assert_int_eq(fp8_quantise_weight(&m, w, OC, K, fmt, WS[ws], pow2, &err), 0);
                    m.act_scaling = AS[as];
                    ck_assert(!m.fast); /* the exact simulation is the default */
                    float *exact = dllm_malloc((size_t)N * OC * sizeof(float));
                    float *fast = dllm_malloc((size_t)N * OC * sizeof(float));
                    op_fp8_linear_fwd(exact, x, &m, N, K, OC);
                    m.fast = true;
                    op_fp8_linear_fwd(fast, x, &m, N, K, OC);
                    /* without bf16 dot products the fast mode is the exact simulation */
                    if (!fp8_fast_blocks())
                        ck_assert_msg(!memcmp(fast, exact, (size_t)N * OC * sizeof(float)),
                                      "%s: fast fp8 on %s differs from fp8-exact", mode,
                                      fp8_fast_path());
                    /* the dequantised operands both modes multiply */
                    float *ad = dllm_malloc((size_t)N * K * sizeof(float));
                    float *wd = dllm_malloc((size_t)OC * K * sizeof(float));
                    fp8_quant_dequant(ad, x, N, K, fmt, AS[as], pow2);
                    fp8_dequantise(wd, &m);
                    double r1 = worst_ratio(fast, ad, wd, exact, N, K, OC, (2 * K + 8) * EPS32);
                    double r2 = worst_ratio(fast, ad, wd, NULL, N, K, OC, (K + 8) * EPS32);
                    ck_assert_msg(r1 <= 1.0 && r2 <= 1.0,
                                  "%s: fp8 %s w:%s a:%s pow2 %d [%d,%d]x[%d,%d]^T: error %.3g "
                                  "(vs exact), %.3g (vs double) of the bound", mode,
                                  fp8_format_name(fmt), fp8_scaling_name(WS[ws]),
                                  fp8_scaling_name(AS[as]), pow2, N, K, OC, K, r1, r2);
                    /* an in-place re-quantisation (weight sync) drops the bf16 codes */
                    for (size_t i = 0; i < (size_t)OC * K; i++)
                        w[i] *= -0.5f;
                    ck_assert_int_eq(fp8_quantise_weight(&m, w, OC, K, fmt, WS[ws], pow2, &err), 0);
                    ck_assert(m.fast && !m.qbf_valid);
                    op_fp8_linear_fwd(fast, x, &m, N, K, OC);
                    fp8_dequantise(wd, &m);
                    double r3 = worst_ratio(fast, ad, wd, NULL, N, K, OC, (K + 8) * EPS32);
                    ck_assert_msg(r3 <= 1.0, "%s: after re-quantising: error %.3g of the bound",
                                  mode, r3);
                    cases++;
                    fp8_matrix_free(&m);
                    free(x);
                    free(w);
                    free(exact);
                    free(fast);
                    free(ad);
                    free(wd);
                }
    ck_assert_int_gt(cases, 40);
}

START_TEST(test_fp8_fast_auto)
{
    unsetenv("DLLM_BF16_GEMM");
    check_fp8_fast("auto");
}
END_TEST

START_TEST(test_fp8_fast_fallback)
{
    setenv("DLLM_BF16_GEMM", "fp32", 1);
    check_fp8_fast("fallback");
    unsetenv("DLLM_BF16_GEMM");
}
END_TEST

/* The fast FP8 kernel sums each output on one thread in a fixed order: the same bits
 * on 1 or 2 threads, and a row's result does not depend on the rest of the batch. */
START_TEST(test_fp8_fast_invariance)
{
    unsetenv("DLLM_BF16_GEMM");
    int N = 300, K = 520, OC = 200, n1 = 7;
    float *x = randn((size_t)N * K, 91, 1.0f), *w = randn((size_t)OC * K, 92, 0.05f);
    fp8_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(fp8_quantise_weight(&m, w, OC, K, FP8_E4M3, FP8_SCALE_BLOCK, false, &err), 0);
    m.fast = true;
    float *o1 = dllm_malloc((size_t)N * OC * sizeof(float));
    float *o2 = dllm_malloc((size_t)N * OC * sizeof(float));
    float *o3 = dllm_malloc((size_t)n1 * OC * sizeof(float));
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    op_fp8_linear_fwd(o1, x, &m, N, K, OC);
    omp_set_num_threads(2);
    op_fp8_linear_fwd(o2, x, &m, N, K, OC);
    omp_set_num_threads(saved);
#else
    op_fp8_linear_fwd(o1, x, &m, N, K, OC);
    op_fp8_linear_fwd(o2, x, &m, N, K, OC);
#endif
    op_fp8_linear_fwd(o3, x, &m, n1, K, OC);
    if (fp8_fast_blocks()) {
        ck_assert_msg(memcmp(o1, o2, (size_t)N * OC * sizeof(float)) == 0,
                      "fast fp8: 1 and 2 threads differ");
        ck_assert_msg(memcmp(o1, o3, (size_t)n1 * OC * sizeof(float)) == 0,
                      "fast fp8: the first %d rows depend on the batch", n1);
    } else { /* the exact route promises only op_gemm's determinism */
        printf("fast fp8 runs as the exact simulation here: invariance not claimed\n");
        op_fp8_linear_fwd(o3, x, &m, n1, K, OC);
        float *o4 = dllm_malloc((size_t)n1 * OC * sizeof(float));
        op_fp8_linear_fwd(o4, x, &m, n1, K, OC);
        ck_assert(memcmp(o3, o4, (size_t)n1 * OC * sizeof(float)) == 0);
        free(o4);
    }
    fp8_matrix_free(&m);
    free(x);
    free(w);
    free(o1);
    free(o2);
    free(o3);
}
END_TEST

/* The fast mode quantises its activations in the kernel (each 128-group's maximum and
 * rounding in one pass): against fp8_scales and fp8_round, bit for bit. With one-hot
 * weights w[oc, k] = 448 [k == oc] (every weight scale 1, the codes exact) the output
 * is out[n, k] = fp8_round(x[n, k] / s) * s * 448, rounded once in both products (the
 * other products are zeros), for every activation scaling, format, pow2 choice and
 * edge value (saturation, infinities, the subnormal range). Zeros are compared by
 * value: the sign of a zero sum is the products' order. */
START_TEST(test_fp8_fast_quant_bitwise)
{
    unsetenv("DLLM_BF16_GEMM");
    static const int NK[][2] = {{1, 128}, {7, 200}, {30, 520}, {13, 256}};
    static const fp8_scaling AS[3] = {FP8_SCALE_GROUP, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    const bool exact_route = !fp8_fast_blocks();
    int checked = 0;
    for (size_t c = 0; c < sizeof NK / sizeof NK[0]; c++)
        for (int f = 0; f < 2; f++)
            for (int as = 0; as < 3; as++)
                for (int pow2 = 0; pow2 < 2; pow2++) {
                    int N = NK[c][0], K = NK[c][1], OC = K;
                    fp8_format fmt = f ? FP8_E5M2 : FP8_E4M3;
                    float *x = randn((size_t)N * K, 300 + c, 2.0f);
                    x[0] = INFINITY;
                    if (K > 3) {
                        x[1] = -INFINITY;
                        x[2] = 3e5f; /* saturates after scaling in most groups */
                        x[3] = 1e-30f;
                    }
                    for (int k = 0; k < K && N > 1; k++) /* 2^-30 .. 2^10 */
                        x[K + k] = ldexpf((k % 3 ? -1.0f : 1.0f) * (1.0f + (float)(k % 5) / 4.0f),
                                          k % 41 - 30);
                    float *w = dllm_calloc((size_t)OC * K, sizeof *w);
                    for (int k = 0; k < K; k++)
                        w[(size_t)k * K + k] = 448.0f;
                    fp8_matrix m = {0};
                    dllm_err err = {0};
                    ck_assert_int_eq(fp8_quantise_weight(&m, w, OC, K, fmt, FP8_SCALE_BLOCK,
                                                         pow2, &err), 0);
                    m.act_scaling = AS[as];
                    m.fast = true;
                    float *out = dllm_malloc((size_t)N * OC * sizeof *out);
                    op_fp8_linear_fwd(out, x, &m, N, K, OC);
                    int br, bc;
                    fp8_block_shape(AS[as], N, K, &br, &bc);
                    int SC = (K + bc - 1) / bc;
                    float *sc = dllm_malloc((size_t)((N + br - 1) / br) * SC * sizeof *sc);
                    fp8_scales(sc, x, N, K, fmt, AS[as], pow2);
                    for (int n = 0; n < N; n++)
                        for (int k = 0; k < K; k++) {
                            float s = sc[(size_t)(n / br) * SC + k / bc];
                            /* without bf16 dot products the fast mode is the exact
                             * simulation: the dequantised activation is rounded to fp32
                             * before its product with the weight */
                            float deq = fp8_round(x[(size_t)n * K + k] / s, fmt) * s;
                            float want = exact_route ? deq * 448.0f
                                                     : (float)((double)fp8_round(x[(size_t)n * K + k] / s, fmt) *
                                                               s * 448.0);
                            float got = out[(size_t)n * OC + k];
                            ck_assert_msg(got == want &&
                                              (want == 0 || memcmp(&got, &want, sizeof got) == 0),
                                          "%s %s a:%s pow2 %d [%d,%d] (%d,%d): %a, want %a",
                                          fp8_fast_path(), fp8_format_name(fmt),
                                          fp8_scaling_name(AS[as]), pow2, N, K, n, k, got, want);
                            checked++;
                        }
                    fp8_matrix_free(&m);
                    free(x);
                    free(w);
                    free(out);
                    free(sc);
                }
    ck_assert_int_gt(checked, 10000);
}
END_TEST

/* op_fp8_linears_fwd (one input, several weights: q/k/v, gate/up) equals one
 * op_fp8_linear_fwd per weight bit for bit: fast mode (the input quantised once), on 1
 * and 2 threads, with fewer row blocks than threads (N = 1) and more, and weights whose
 * modes differ (then it is the separate calls). */
START_TEST(test_fp8_linears_grouped)
{
    unsetenv("DLLM_BF16_GEMM");
    enum { NW = 3 };
    int K = 520, OC[NW] = {200, 72, 72};
    fp8_matrix m[NW] = {{0}};
    fp8_matrix *ws[NW];
    dllm_err err = {0};
    for (int i = 0; i < NW; i++) {
        float *w = randn((size_t)OC[i] * K, 400 + i, 0.05f);
        ck_assert_int_eq(fp8_quantise_weight(&m[i], w, OC[i], K, FP8_E4M3, FP8_SCALE_BLOCK,
                                             false, &err), 0);
        m[i].fast = true;
        ws[i] = &m[i];
        free(w);
    }
    static const int NS[3] = {1, 300, 13};
    int compared = 0;
    for (int ni = 0; ni < 3; ni++)
        for (int threads = 1; threads <= 2; threads++)
            for (int mixed = 0; mixed < 2; mixed++) {
                int N = NS[ni];
                float *x = randn((size_t)N * K, 500 + ni, 1.0f);
                x[0] *= 50.0f;
                m[1].fast = !mixed; /* mixed: the exact simulation for k */
#ifdef _OPENMP
                int saved = omp_get_max_threads();
                omp_set_num_threads(threads);
#endif
                float *sep[NW], *grp[NW];
                for (int i = 0; i < NW; i++) {
                    sep[i] = dllm_malloc((size_t)N * OC[i] * sizeof(float));
                    grp[i] = dllm_malloc((size_t)N * OC[i] * sizeof(float));
                    op_fp8_linear_fwd(sep[i], x, ws[i], N, K, OC[i]);
                }
                op_fp8_linears_fwd(NW, grp, x, ws, N, K, OC);
#ifdef _OPENMP
                omp_set_num_threads(saved);
#endif
                for (int i = 0; i < NW; i++) {
                    ck_assert_msg(memcmp(sep[i], grp[i], (size_t)N * OC[i] * sizeof(float)) == 0,
                                  "grouped fp8 linear %d, N %d, %d threads%s: other bits", i, N,
                                  threads, mixed ? ", mixed modes" : "");
                    compared++;
                    free(sep[i]);
                    free(grp[i]);
                }
                free(x);
            }
    ck_assert_int_eq(compared, 3 * 2 * 2 * NW);
    for (int i = 0; i < NW; i++)
        fp8_matrix_free(&m[i]);
}
END_TEST

/* ---- op_gemm's library -------------------------------------------------------------- */

/* c[M,N] = alpha op(a) op(b) + beta c0 within 2 (K + 4) 2^-24 of the double sum of the
 * magnitudes (fp32 accumulation of K products and the beta term). */
static void check_gemm(const float *c, const float *c0, const float *a, const float *b, bool ta,
                       bool tb, int M, int N, int K, const char *lib)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.25 * c0[(size_t)i * N + j], sa = fabs(s);
            for (int k = 0; k < K; k++) {
                double p = 0.5 * (double)(ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k]) *
                           (tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
                s += p;
                sa += fabs(p);
            }
            double got = c[(size_t)i * N + j];
            ck_assert_msg(fabs(got - s) <= 2 * (K + 4) * EPS32 * sa,
                          "%s gemm %c%c [%d,%d,%d] (%d,%d): %g, want %g", lib, ta ? 'T' : 'N',
                          tb ? 'T' : 'N', M, N, K, i, j, got, s);
        }
}

START_TEST(test_gemm_library)
{
    unsetenv("DLLM_GEMM");
    ck_assert_int_eq(op_gemm_library(), op_gemm_library_default());
    if (DLLM_GEMM_DEFAULT == OP_GEMM_AUTO) {
        bool avx512 = cpu_has(CPU_AVX512F);
        ck_assert_int_eq(op_gemm_library(), op_gemm_rule(avx512, op_gemm_library_built(OP_GEMM_DNNL)));
    } else {
        ck_assert_int_eq(op_gemm_library(), DLLM_GEMM_DEFAULT);
    }
    printf("fast path fp32 GEMM (rule: oneDNN on AVX-512, else OpenBLAS): %s\n",
           op_gemm_library_name(op_gemm_library()));
    setenv("DLLM_GEMM", "openblas", 1);
    ck_assert_int_eq(op_gemm_library(), OP_GEMM_OPENBLAS);
    static const char *const LIBS[2] = {"openblas", "dnnl"};
    static const int S[][3] = {{1, 64, 176}, {33, 130, 257}, {300, 512, 96}, {512, 96, 300}};
    for (int lib = 0; lib < 2; lib++) {
        setenv("DLLM_GEMM", LIBS[lib], 1);
        if (!op_gemm_library_built((op_gemm_lib)lib)) {
            printf("DLLM_GEMM=%s: not in this build\n", LIBS[lib]);
            continue;
        }
        ck_assert_int_eq(op_gemm_library(), lib);
        for (int s = 0; s < 4; s++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t & 2;
                int M = S[s][0], K = S[s][1], N = S[s][2];
                size_t mn = (size_t)M * N;
                float *a = randn((size_t)M * K, 300 + s, 1.0f);
                float *b = randn((size_t)K * N, 400 + s, 1.0f);
                float *c0 = randn(mn, 500 + s, 1.0f);
                float *c1 = dllm_malloc(mn * sizeof(float)), *c2 = dllm_malloc(mn * sizeof(float));
                memcpy(c1, c0, mn * sizeof(float));
                memcpy(c2, c0, mn * sizeof(float));
                op_gemm(ta, tb, M, N, K, 0.5f, a, b, 0.25f, c1);
                op_gemm(ta, tb, M, N, K, 0.5f, a, b, 0.25f, c2);
                ck_assert_msg(memcmp(c1, c2, mn * sizeof(float)) == 0, "%s gemm not repeatable",
                              LIBS[lib]);
                check_gemm(c1, c0, a, b, ta, tb, M, N, K, LIBS[lib]);
                free(a);
                free(b);
                free(c0);
                free(c1);
                free(c2);
            }
    }
    unsetenv("DLLM_GEMM");
}
END_TEST

/* The rule without DLLM_GEMM or a configured library: oneDNN only on an AVX-512 CPU and
 * only where built. */
START_TEST(test_gemm_rule)
{
    ck_assert_int_eq(op_gemm_rule(true, true), OP_GEMM_DNNL);
    ck_assert_int_eq(op_gemm_rule(false, true), OP_GEMM_OPENBLAS);
    ck_assert_int_eq(op_gemm_rule(true, false), OP_GEMM_OPENBLAS);
    ck_assert_int_eq(op_gemm_rule(false, false), OP_GEMM_OPENBLAS);
}
END_TEST

/* The same product with every operand moved by 0-15 floats off its allocation (other
 * 64-byte alignments): the same bits. Resume is bit for bit only if this holds, since a
 * resumed process's heap layout is not the uninterrupted one's. */
START_TEST(test_gemm_address_invariant)
{
    static const char *const LIBS[2] = {"openblas", "dnnl"};
    /* the model's kinds of product: a linear forward, its two backward products */
    static const int S[][5] = {{384, 64, 176, 0, 1}, {7, 512, 96, 0, 1}, {384, 176, 64, 0, 0},
                               {64, 176, 384, 1, 0}};
    for (int lib = 0; lib < 2; lib++) {
        if (!op_gemm_library_built((op_gemm_lib)lib))
            continue;
        setenv("DLLM_GEMM", LIBS[lib], 1);
        for (int s = 0; s < 4; s++) {
            int M = S[s][0], K = S[s][1], N = S[s][2];
            bool ta = S[s][3], tb = S[s][4];
            size_t na = (size_t)M * K, nb = (size_t)K * N, mn = (size_t)M * N;
            float *a = randn(na, 600 + s, 1.0f), *b = randn(nb, 700 + s, 1.0f);
            float *c0 = randn(mn, 800 + s, 1.0f);
            float *ref = dllm_malloc(mn * sizeof(float));
            memcpy(ref, c0, mn * sizeof(float));
            op_gemm(ta, tb, M, N, K, 1.0f, a, b, 1.0f, ref);
            static const int OFF[][3] = {{1, 2, 3}, {5, 0, 7}, {15, 9, 4}, {8, 13, 1}};
            for (int o = 0; o < 4; o++) {
                float *a2 = dllm_malloc((na + 16) * sizeof(float));
                float *b2 = dllm_malloc((nb + 16) * sizeof(float));
                float *c2 = dllm_malloc((mn + 16) * sizeof(float));
                float *pa = a2 + OFF[o][0], *pb = b2 + OFF[o][1], *pc = c2 + OFF[o][2];
                memcpy(pa, a, na * sizeof(float));
                memcpy(pb, b, nb * sizeof(float));
                memcpy(pc, c0, mn * sizeof(float));
                op_gemm(ta, tb, M, N, K, 1.0f, pa, pb, 1.0f, pc);
                ck_assert_msg(memcmp(pc, ref, mn * sizeof(float)) == 0,
                              "%s gemm [%d,%d,%d]: other bits with operands moved by %d/%d/%d "
                              "floats", LIBS[lib], M, N, K, OFF[o][0], OFF[o][1], OFF[o][2]);
                free(a2);
                free(b2);
                free(c2);
            }
            free(a);
            free(b);
            free(c0);
            free(ref);
        }
    }
    unsetenv("DLLM_GEMM");
}
END_TEST

START_TEST(test_gemm_env_bad)
{
    setenv("DLLM_GEMM", "mkl", 1);
    op_gemm_library(); /* exits 2 */
}
END_TEST

#ifndef HAVE_DNNL
START_TEST(test_gemm_env_unbuilt)
{
    setenv("DLLM_GEMM", "dnnl", 1);
    op_gemm_library(); /* exits 2: not in this build */
}
END_TEST
#endif

/* Why a fast path is absent here, or NULL when the machine has it. */
static const char *bf16_gemm_absent(void)
{
    if (strcmp(op_bf16_gemm_path(), "fp32") != 0)
        return NULL;
#if !defined(HAVE_DNNL)
    return "this build has no oneDNN (--without-dnnl)";
#elif defined(__x86_64__)
    return cpu_has(CPU_AVX512BF16) ? "oneDNN refused it"
                                   : !strcmp(cpu_isa_cap(), "native") ? "the CPU has no AVX512-BF16"
                                                                      : "DLLM_CPU_ISA caps it";
#else
    return "not an x86-64 CPU";
#endif
}

static const char *fp8_dot_absent(void)
{
    if (fp8_fast_blocks())
        return NULL;
#if defined(__x86_64__)
    return "the CPU has no AVX512-BF16";
#else
    return "not an x86-64 CPU";
#endif
}

/* A stop request (SIGINT, SIGTERM) is handled on a stack of its own: a handler frame
 * pushed on the interrupted stack corrupted oneDNN's AVX-512 JIT GEMM, which keeps data
 * below its stack pointer (heap corruption in 3 of 20 `sft` runs stopped under load) */
START_TEST(test_stop_handler_own_stack)
{
    run_stop_catch();
    const int sigs[] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction sa;
        ck_assert_int_eq(sigaction(sigs[i], NULL, &sa), 0);
        ck_assert_msg(sa.sa_flags & SA_ONSTACK, "signal %d: not on the alternate stack", sigs[i]);
    }
    stack_t ss;
    ck_assert_int_eq(sigaltstack(NULL, &ss), 0);
    ck_assert(!(ss.ss_flags & SS_DISABLE) && ss.ss_size >= 16384);
    /* a request still is one */
    raise(SIGTERM);
    ck_assert_int_eq(run_stop_requested(), SIGTERM);
}
END_TEST

/* native: the machine's fast paths that are present (bf16, fp8); else every case that
 * holds on any CPU, with the fallbacks forced */
static Suite *fast_gemm_suite(bool native, bool bf16, bool fp8)
{
    Suite *s = suite_create(native ? "fast_gemm_native" : "fast_gemm");
    TCase *tc = tcase_create(native ? "native" : "cpu");
    tcase_set_timeout(tc, 120);
    if (native) {
        if (bf16)
            tcase_add_test(tc, test_bf16_linear_auto);
        if (fp8) {
            tcase_add_test(tc, test_fp8_fast_auto);
            tcase_add_test(tc, test_fp8_fast_invariance);
        }
        suite_add_tcase(s, tc);
        return s;
    }
    tcase_add_test(tc, test_bf16_arrays_bitwise);
    tcase_add_test(tc, test_swiglu_bitwise);
    tcase_add_test(tc, test_bf16_linear_fallback);
    tcase_add_exit_test(tc, test_bf16_env_bad, 2);
    tcase_add_test(tc, test_fp8_fast_fallback);
    tcase_add_test(tc, test_fp8_fast_invariance);
    tcase_add_test(tc, test_fp8_fast_quant_bitwise);
    tcase_add_test(tc, test_fp8_linears_grouped);
    tcase_add_test(tc, test_gemm_library);
    tcase_add_test(tc, test_stop_handler_own_stack);
    tcase_add_test(tc, test_gemm_rule);
    tcase_add_test(tc, test_gemm_address_invariant);
    tcase_add_exit_test(tc, test_gemm_env_bad, 2);
#ifndef HAVE_DNNL
    tcase_add_exit_test(tc, test_gemm_env_unbuilt, 2);
#endif
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
#ifdef DLLM_TEST_NATIVE_PATHS
    const bool native = true;
#else
    const bool native = false;
#endif
    unsetenv("DLLM_BF16_GEMM");
#ifdef DLLM_TEST_NO_AMX
    /* the AVX512-BF16 kernels, on a CPU with AMX too. The caps are read before main (a
     * constructor asks for the CPU's features), and they hold oneDNN's ISA: run again with
     * the variable set from the start */
    if (!getenv("DLLM_AMX") || strcmp(getenv("DLLM_AMX"), "off")) {
        setenv("DLLM_AMX", "off", 1);
        execv("/proc/self/exe", ctx->argv);
        fprintf(stderr, "test_fast_gemm_no_amx: re-running with DLLM_AMX=off failed; oneDNN "
                        "keeps its own ISA\n");
    }
#else
    unsetenv("DLLM_AMX");
#endif
    const char *no_bf16 = bf16_gemm_absent(), *no_fp8 = fp8_dot_absent();
    if (native) {
        printf("fast path bf16 GEMM (oneDNN, %s): %s%s\n",
               !strcmp(op_bf16_gemm_path(), "dnnl-bf16-amx") ? "AMX bf16 tiles" : "AVX512-BF16",
               no_bf16 ? "absent: " : "exercised", no_bf16 ? no_bf16 : "");
        printf("fast path fp8 GEMM (block-scaled, %s): %s%s\n",
               !no_fp8 && !strcmp(fp8_fast_path(), "amx-bf16") ? "AMX bf16 tiles"
                                                                : "AVX512-BF16 dot products",
               no_fp8 ? "absent: " : "exercised", no_fp8 ? no_fp8 : "");
        if (no_bf16 && no_fp8)
            return tu_skip(ctx, "no fast GEMM path on this machine (bf16: %s; fp8: %s); `auto` "
                                "would be the fallback that test_fast_gemm checks", no_bf16, no_fp8);
    }
    return fast_gemm_suite(native, !no_bf16, !no_fp8);
}
