/* selftest_cpu.c: the CPU rows of `dllm-rl selftest`: the fast products the rollout copies
 * run on, against the exact fp32 reference, at the linear shapes of the presets (and of
 * LLaDA-8B without --quick, on a few rows):
 *  - the bf16 linear (op_bf16_linear_fwd) against the double sum of the same bf16
 *    products, within (K + 4) 2^-24 sum_k |a_k w_k| per output;
 *  - the FP8 fast mode (op_fp8_linear_fwd, bf16 dot products) against the exact
 *    simulation, within (2K + 8) 2^-24 sum_k |a_k w_k| (both sum exact products in fp32);
 *  - op_gemm on each GEMM library of the build against a double sum, within
 *    2 (K + 4) 2^-24 sum_k |a_k b_k|.
 * The bounds are those of tests/unit/test_fast_gemm.c; a row reports the worst output's error
 * as a fraction of its bound (at most 1 passes). */
#include "src/selftest/selftest.h"

#include "kernels/backend_cases.h"
#include "kernels/base.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double EPS32 = 5.9604644775390625e-08; /* 2^-24 */

typedef struct {
    const char *what;
    int N, K, OC;
} lin_shape;

/* max over outputs of |got - ref| / (tol_k * sum_k |a w|), ref the double sum of a[N,K] @
 * w[OC,K]^T unless ref32 is given. NaN counts as infinitely far. */
static double worst_ratio(const float *got, const float *a, const float *w, const float *ref32,
                          int N, int K, int OC, double tol_k)
{
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0, sa = 0;
            const float *ar = a + (size_t)n * K, *wr = w + (size_t)o * K;
            for (int k = 0; k < K; k++) {
                double p = (double)ar[k] * wr[k];
                s += p;
                sa += fabs(p);
            }
            double ref = ref32 ? ref32[(size_t)n * OC + o] : s;
            double r = fabs(got[(size_t)n * OC + o] - ref) / (tol_k * sa + 1.2e-38);
            if (!(r <= worst))
                worst = isnan(r) ? INFINITY : r;
        }
    return worst;
}

static void perturb_if(const stbl_table *t, const char *name, float *out)
{
    if (t->perturb && !strcmp(t->perturb, name))
        out[0] = out[0] * 1.5f + 1.0f;
}

static void add_ratio_row(stbl_table *t, const char *check, double r, const char *note)
{
    char m[48];
    snprintf(m, sizeof m, "%.3g", r);
    stbl_add(t, check, r <= 1.0 ? STBL_PASS : STBL_FAIL, m, "1 (bound)", "%s", note);
}

static void bf16_linear_row(stbl_table *t, const lin_shape *s)
{
    const int N = s->N, K = s->K, OC = s->OC;
    float *x = dllm_host_normal((size_t)N * K, 1, 1.0), *w = dllm_host_normal((size_t)OC * K, 2, 0.05);
    float *out = dllm_malloc((size_t)N * OC * sizeof(float));
    bf16_matrix m = {0};
    bf16_matrix_pack(&m, w, OC, K);
    op_bf16_linear_fwd(out, x, &m, N, K, OC);
    perturb_if(t, "bf16_linear", out);
    op_round_bf16(x, (size_t)N * K); /* the reference multiplies the same bf16 values */
    op_round_bf16(w, (size_t)OC * K);
    double r = worst_ratio(out, x, w, NULL, N, K, OC, (K + 4) * EPS32);
    char check[72], note[160];
    snprintf(check, sizeof check, "cpu: bf16 linear, %s", s->what);
    snprintf(note, sizeof note, "path %s; N%d K%d OC%d; worst |err| / ((K+4) 2^-24 sum|a w|)",
             op_bf16_gemm_path(), N, K, OC);
    add_ratio_row(t, check, r, note);
    bf16_matrix_free(&m);
    free(x), free(w), free(out);
}

static void fp8_fast_row(stbl_table *t, const lin_shape *s)
{
    const int N = s->N, K = s->K, OC = s->OC;
    float *x = dllm_host_normal((size_t)N * K, 3, 1.5), *w = dllm_host_normal((size_t)OC * K, 4, 0.03);
    x[0] *= 40.0f; /* a few large values make the block scales differ */
    w[(size_t)(OC - 1) * K] *= 30.0f;
    fp8_matrix m = {0};
    dllm_err err = {0};
    char check[72];
    snprintf(check, sizeof check, "cpu: fp8 fast vs fp8-exact, %s", s->what);
    if (fp8_quantise_weight(&m, w, OC, K, FP8_E4M3, FP8_SCALE_BLOCK, false, &err)) {
        stbl_add(t, check, STBL_FAIL, "", "", "quantising the weight: %s", err.msg);
        free(x), free(w);
        return;
    }
    m.act_scaling = FP8_SCALE_GROUP;
    float *exact = dllm_malloc((size_t)N * OC * sizeof(float));
    float *fast = dllm_malloc((size_t)N * OC * sizeof(float));
    op_fp8_linear_fwd(exact, x, &m, N, K, OC);
    m.fast = true;
    op_fp8_linear_fwd(fast, x, &m, N, K, OC);
    perturb_if(t, "fp8_fast", fast);
    float *ad = dllm_malloc((size_t)N * K * sizeof(float)), *wd = dllm_malloc((size_t)OC * K * sizeof(float));
    fp8_quant_dequant(ad, x, N, K, FP8_E4M3, FP8_SCALE_GROUP, false);
    fp8_dequantise(wd, &m);
    double r = worst_ratio(fast, ad, wd, exact, N, K, OC, (2 * K + 8) * EPS32);
    char note[160];
    snprintf(note, sizeof note,
             "path %s; E4M3 128x128 / 1x128; N%d K%d OC%d; worst |fast - exact| / ((2K+8) 2^-24 sum|a w|)",
             fp8_fast_path(), N, K, OC);
    add_ratio_row(t, check, r, note);
    fp8_matrix_free(&m);
    free(x), free(w), free(exact), free(fast), free(ad), free(wd);
}

/* op_gemm NN with alpha 1, beta 0 against a double sum, on one library. */
static void gemm_row(stbl_table *t, op_gemm_lib lib, const lin_shape *s)
{
    const int M = s->N, K = s->K, N = s->OC;
    char check[72];
    snprintf(check, sizeof check, "cpu: GEMM %s, %s", op_gemm_library_name(lib), s->what);
    if (!op_gemm_library_built(lib)) {
        stbl_add(t, check, STBL_SKIP, "", "", "not in this build");
        return;
    }
    const char *old = getenv("DLLM_GEMM");
    char *saved = old ? strdup(old) : NULL;
    setenv("DLLM_GEMM", op_gemm_library_name(lib), 1);
    float *a = dllm_host_normal((size_t)M * K, 5, 1.0), *b = dllm_host_normal((size_t)N * K, 6, 1.0);
    float *c = dllm_calloc((size_t)M * N, sizeof(float));
    op_gemm(false, true, M, N, K, 1.0f, a, b, 0.0f, c); /* c = a b^T: the linear layer's form */
    perturb_if(t, "gemm", c);
    double r = worst_ratio(c, a, b, NULL, M, K, N, 2.0 * (K + 4) * EPS32);
    char note[160];
    snprintf(note, sizeof note, "NT M%d N%d K%d; worst |err| / (2 (K+4) 2^-24 sum|a b|)", M, N, K);
    add_ratio_row(t, check, r, note);
    if (saved) {
        setenv("DLLM_GEMM", saved, 1);
        free(saved);
    } else {
        unsetenv("DLLM_GEMM");
    }
    free(a), free(b), free(c);
}

void selftest_cpu(stbl_table *t)
{
    /* rows: a rollout batch of 2 x 48 tokens at the presets; 8 rows at the 8B shapes */
    static const lin_shape QUICK[] = {
        {"tiny up (64 -> 176)", 96, 64, 176},   {"tiny down (176 -> 64)", 96, 176, 64},
        {"small up (512 -> 1536)", 96, 512, 1536}, {"small down (1536 -> 512)", 96, 1536, 512}};
    static const lin_shape FULL[] = {{"llada-8b up (4096 -> 12288)", 8, 4096, 12288},
                                     {"llada-8b down (12288 -> 4096)", 8, 12288, 4096}};
    const int nq = (int)(sizeof QUICK / sizeof *QUICK), nf = t->quick ? 0 : (int)(sizeof FULL / sizeof *FULL);
    for (int i = 0; i < nq + nf; i++)
        bf16_linear_row(t, i < nq ? &QUICK[i] : &FULL[i - nq]);
    for (int i = 0; i < nq + nf; i++)
        fp8_fast_row(t, i < nq ? &QUICK[i] : &FULL[i - nq]);
    for (int lib = 0; lib < 2; lib++)
        gemm_row(t, (op_gemm_lib)lib, t->quick ? &QUICK[2] : &FULL[0]);
}
