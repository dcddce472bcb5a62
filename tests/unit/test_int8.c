/* test_int8: the INT8 scheme of kernels/int8.h against an independent implementation
 * written here from the scheme's text (double arithmetic rounded to fp32 where the
 * scheme says fp32, rounding half to even by hand, int64 sums):
 *  - codes: ties to even, clamping at +-127 / +-63, infinities, NaN's code, -0;
 *  - weight codes, scales and compensations of random matrices (odd shapes: C and OC
 *    not multiples of 128), channel and block, bit for bit; all-zero rows and blocks
 *    (scale 1, codes 0); non-finite entries;
 *  - activation codes and scales per token and per 1 x 128 group, bit for bit;
 *  - the product bit for bit against the scheme's formula on int64 sums, on oneDNN
 *    (where built) and on the portable loop, including the largest codes everywhere
 *    (a saturating int16 pair sum would show) and several row counts;
 *  - the product against the reference (dequantised fp32 GEMM) within the fp32
 *    rounding bound, and the reference itself against a double product;
 *  - the scaling parser's choices. */
#include "kernels/int8.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the independent implementation ------------------------------------------------------ */

static float ref_div(float x, float s) { return (float)((double)x / (double)s); }

/* round half to even, by hand */
static double rne(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5)
        return f + 1;
    if (d < 0.5)
        return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1;
}

static int ref_code(float x, float s, int Q)
{
    if (isnan(x))
        return Q;
    float v = ref_div(x, s);
    if (isnan(v))
        return Q;
    double r = rne(v);
    return r > Q ? Q : r < -Q ? -Q : (int)r;
}

static float ref_scale(const float *x, int n, int stride, int rows, int Q)
{
    float a = 0;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) {
            float v = fabsf(x[(size_t)r * stride + i]);
            if (v <= 3.4028235e38f && v > a) /* finite */
                a = v;
        }
    return a == 0 ? 1.0f : ref_div(a, (float)Q);
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float frand(float amp) { return (float)((2 * urand() - 1) * amp); }

/* weights: scales (per row, or per 128 x 128 block) and codes from the definitions */
static void ref_weight(int *q, float *sw_of, const float *w, int OC, int C, int8_scaling s)
{
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            float sc;
            if (s == INT8_SCALE_CHANNEL) {
                sc = ref_scale(w + (size_t)o * C, C, C, 1, 127);
            } else {
                int o0 = o / 128 * 128, c0 = c / 128 * 128;
                int nr = OC - o0 < 128 ? OC - o0 : 128, nc = C - c0 < 128 ? C - c0 : 128;
                sc = ref_scale(w + (size_t)o0 * C + c0, nc, C, nr, 127);
            }
            sw_of[(size_t)o * C + c] = sc;
            q[(size_t)o * C + c] = ref_code(w[(size_t)o * C + c], sc, 127);
        }
}

static void ref_act(int *q, float *sa_of, const float *x, int N, int C, int8_scaling s)
{
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            int c0 = s == INT8_SCALE_BLOCK ? c / 128 * 128 : 0;
            int nc = s == INT8_SCALE_BLOCK ? (C - c0 < 128 ? C - c0 : 128) : C;
            float sc = ref_scale(x + (size_t)n * C + c0, nc, C, 1, 63);
            sa_of[(size_t)n * C + c] = sc;
            q[(size_t)n * C + c] = ref_code(x[(size_t)n * C + c], sc, 63);
        }
}

/* the product's formula: int64 sums per k-block, fp32 scale products and sums */
static void ref_product(float *out, const float *x, const float *w, int N, int C, int OC,
                        int8_scaling s)
{
    int *qa = malloc(sizeof(int) * N * C), *qw = malloc(sizeof(int) * OC * C);
    float *sa = malloc(sizeof(float) * N * C), *sw = malloc(sizeof(float) * OC * C);
    ref_act(qa, sa, x, N, C, s);
    ref_weight(qw, sw, w, OC, C, s);
    int g = s == INT8_SCALE_BLOCK ? 128 : C;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float acc = 0;
            for (int c0 = 0; c0 < C; c0 += g) {
                int64_t a = 0;
                for (int c = c0; c < C && c < c0 + g; c++)
                    a += (int64_t)qa[(size_t)n * C + c] * qw[(size_t)o * C + c];
                float sc = (float)((double)sa[(size_t)n * C + c0] * sw[(size_t)o * C + c0]);
                float t = (float)((double)sc * (double)(float)a);
                acc = c0 == 0 ? t : (float)((double)acc + t);
            }
            out[(size_t)n * OC + o] = acc;
        }
    free(qa);
    free(qw);
    free(sa);
    free(sw);
}

/* ---- cases --------------------------------------------------------------------------------- */

START_TEST(codes_round_half_even_and_clamp)
{
    const struct { float x; int q127, q63; } c[] = {
        {0.5f, 0, 0},      {1.5f, 2, 2},       {2.5f, 2, 2},         {-0.5f, 0, 0},
        {-1.5f, -2, -2},   {-2.5f, -2, -2},    {0.49999997f, 0, 0},  {0.50000006f, 1, 1},
        {62.5f, 62, 62},   {63.5f, 64, 63},    {126.5f, 126, 63},    {127.4f, 127, 63},
        {200.0f, 127, 63}, {-1e30f, -127, -63}, {INFINITY, 127, 63}, {-INFINITY, -127, -63},
        {NAN, 127, 63},    {-0.0f, 0, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ck_assert_msg(int8_code(c[i].x, 1.0f, 127) == c[i].q127, "%g -> %d, expected %d",
                      c[i].x, int8_code(c[i].x, 1.0f, 127), c[i].q127);
        ck_assert_msg(int8_code(c[i].x, 1.0f, 63) == c[i].q63, "%g -> %d (63), expected %d",
                      c[i].x, int8_code(c[i].x, 1.0f, 63), c[i].q63);
        ck_assert_int_eq(int8_code(c[i].x, 1.0f, 127), ref_code(c[i].x, 1.0f, 127));
    }
    /* a scale that is not a power of two: x / s in fp32, then the rounding */
    for (int i = 0; i < 100000; i++) {
        float s = (float)(0.001 + urand()), x = frand(140.0f) * s;
        ck_assert_int_eq(int8_code(x, s, 127), ref_code(x, s, 127));
        ck_assert_int_eq(int8_code(x, s, 63), ref_code(x, s, 63));
    }
    ck_assert(int8_scale_from_amax(0.0f, 127) == 1.0f);
    ck_assert(int8_scale_from_amax(254.0f, 127) == 2.0f);
}
END_TEST

static void check_weight(const float *w, int OC, int C, int8_scaling s)
{
    int8_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(int8_quantise_weight(&m, w, OC, C, s, &err), 0);
    int *q = malloc(sizeof(int) * OC * C);
    float *sw = malloc(sizeof(float) * OC * C), *deq = malloc(sizeof(float) * OC * C);
    ref_weight(q, sw, w, OC, C, s);
    ck_assert_int_eq(m.kb, s == INT8_SCALE_BLOCK ? (C + 127) / 128 : 1);
    for (int o = 0; o < OC; o++) {
        for (int b = 0; b < m.kb; b++) {
            int64_t sum = 0;
            for (int c = b * (m.ldq / m.kb); c < C && (s == INT8_SCALE_CHANNEL || c < (b + 1) * 128);
                 c++)
                sum += q[(size_t)o * C + c];
            ck_assert_int_eq(m.comp[(size_t)o * m.kb + b], 64 * sum);
        }
        for (int c = 0; c < C; c++) {
            ck_assert_msg(m.q[(size_t)o * m.ldq + c] == q[(size_t)o * C + c],
                          "%s (%d, %d): code %d, expected %d", int8_scaling_name(s), o, c,
                          m.q[(size_t)o * m.ldq + c], q[(size_t)o * C + c]);
            int b = s == INT8_SCALE_BLOCK ? c / 128 : 0;
            ck_assert(int8_weight_scale(&m, o, b) == sw[(size_t)o * C + c]);
        }
        for (int c = C; c < m.ldq; c++)
            ck_assert_int_eq(m.q[(size_t)o * m.ldq + c], 0);
    }
    int8_dequantise_weight(deq, &m);
    for (size_t i = 0; i < (size_t)OC * C; i++) {
        ck_assert(deq[i] == (float)((double)q[i] * sw[i]));
        ck_assert(isfinite(deq[i]));
    }
    /* requantising in place gives the same */
    ck_assert_int_eq(int8_quantise_weight(&m, w, OC, C, s, &err), 0);
    ck_assert_int_eq(m.q[0], q[0]);
    int8_matrix_free(&m);
    free(q);
    free(sw);
    free(deq);
}

START_TEST(weights_bit_exact)
{
    const int shapes[][2] = {{1, 1}, {3, 130}, {129, 257}, {200, 128}, {64, 300}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int OC = shapes[k][0], C = shapes[k][1];
        float *w = malloc(sizeof(float) * OC * C);
        for (int i = 0; i < OC * C; i++)
            w[i] = frand(1.0f) * (i % 7 == 0 ? 30.0f : 1.0f);
        if (OC > 2) { /* an all-zero row; a tiny-valued one */
            memset(w + C, 0, sizeof(float) * C);
            for (int c = 0; c < C; c++)
                w[2 * C + c] = frand(1e-30f);
        }
        check_weight(w, OC, C, INT8_SCALE_CHANNEL);
        check_weight(w, OC, C, INT8_SCALE_BLOCK);
        free(w);
    }
}
END_TEST

START_TEST(zero_and_nonfinite)
{
    enum { OC = 130, C = 260 };
    float *w = calloc(OC * C, sizeof(float));
    int8_matrix m = {0};
    dllm_err err = {0};
    for (int s = 0; s < 2; s++) {
        ck_assert_int_eq(int8_quantise_weight(&m, w, OC, C, (int8_scaling)s, &err), 0);
        for (int o = 0; o < OC; o++)
            for (int b = 0; b < m.kb; b++)
                ck_assert(int8_weight_scale(&m, o, b) == 1.0f);
        for (int i = 0; i < OC * m.ldq; i++)
            ck_assert_int_eq(m.q[i], 0);
    }
    for (int i = 0; i < OC * C; i++)
        w[i] = frand(2.0f);
    w[5] = INFINITY;
    w[C + 7] = -INFINITY;
    w[2 * C + 9] = NAN;
    check_weight(w, OC, C, INT8_SCALE_CHANNEL);
    check_weight(w, OC, C, INT8_SCALE_BLOCK);
    ck_assert_int_eq(int8_quantise_weight(&m, w, OC, C, INT8_SCALE_CHANNEL, &err), 0);
    ck_assert_int_eq(m.q[5], 127);
    ck_assert_int_eq(m.q[C + 7], -127);
    ck_assert_int_eq(m.q[2 * C + 9], 127);
    ck_assert_int_ne(int8_quantise_weight(&m, w, 0, C, INT8_SCALE_CHANNEL, &err), 0);
    int8_matrix_free(&m);
    free(w);
}
END_TEST

START_TEST(activations_bit_exact)
{
    const int shapes[][2] = {{1, 5}, {7, 128}, {33, 300}, {4, 1000}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int s = 0; s < 2; s++) {
            int N = shapes[k][0], C = shapes[k][1];
            int kb = s == INT8_SCALE_BLOCK ? (C + 127) / 128 : 1;
            int ldq = s == INT8_SCALE_BLOCK ? kb * 128 : C;
            float *x = malloc(sizeof(float) * N * C), *sa = malloc(sizeof(float) * N * kb);
            float *saf = malloc(sizeof(float) * N * C);
            int8_t *q = malloc((size_t)N * ldq);
            int *qr = malloc(sizeof(int) * N * C);
            for (int i = 0; i < N * C; i++)
                x[i] = frand(3.0f) * (i % 11 == 0 ? 50.0f : 1.0f);
            if (N > 1)
                memset(x + C, 0, sizeof(float) * C);
            int8_quantise_act(q, sa, x, N, C, ldq, (int8_scaling)s);
            ref_act(qr, saf, x, N, C, (int8_scaling)s);
            for (int n = 0; n < N; n++) {
                for (int c = 0; c < C; c++) {
                    ck_assert_int_eq(q[(size_t)n * ldq + c], qr[(size_t)n * C + c]);
                    ck_assert(sa[(size_t)n * kb + (s ? c / 128 : 0)] == saf[(size_t)n * C + c]);
                }
                for (int c = C; c < ldq; c++)
                    ck_assert_int_eq(q[(size_t)n * ldq + c], 0);
            }
            free(x);
            free(sa);
            free(saf);
            free(q);
            free(qr);
        }
}
END_TEST

/* the product bit for bit against the formula, and against the reference */
static void check_product(const float *x, const float *w, int N, int C, int OC, int8_scaling s)
{
    int8_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(int8_quantise_weight(&m, w, OC, C, s, &err), 0);
    float *out = malloc(sizeof(float) * N * OC), *ref = malloc(sizeof(float) * N * OC);
    float *sim = malloc(sizeof(float) * N * OC);
    ref_product(ref, x, w, N, C, OC, s);
    op_int8_linear_fwd(out, x, &m, N, C, OC);
    op_int8_linear_ref(sim, x, &m, N, C, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            size_t i = (size_t)n * OC + o;
            ck_assert_msg(out[i] == ref[i] || (isnan(out[i]) && isnan(ref[i])),
                          "%s on %s, N %d C %d OC %d, (%d, %d): %.9g, formula %.9g",
                          int8_scaling_name(s), int8_gemm_path(), N, C, OC, n, o, out[i],
                          ref[i]);
            /* |fast - ref| <= (2K + 8) 2^-24 sum_k |a_k w_k| over the dequantised values,
             * each at most twice its input (a nonzero code needs |x| >= s/2) */
            double mag = 0;
            for (int c = 0; c < C; c++)
                mag += fabs((double)x[(size_t)n * C + c] * w[(size_t)o * C + c]);
            ck_assert_msg(fabs((double)out[i] - sim[i]) <= (2.0 * C + 8) * 0x1p-24 * 4 * mag +
                                                               1e-30,
                          "fast %.9g, reference %.9g", out[i], sim[i]);
        }
    int8_matrix_free(&m);
    free(out);
    free(ref);
    free(sim);
}

static void product_cases(void)
{
    const int shapes[][3] = {{1, 64, 8}, {5, 130, 33}, {16, 256, 64}, {37, 700, 129},
                             {64, 1000, 96}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], C = shapes[k][1], OC = shapes[k][2];
        float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C);
        for (int i = 0; i < N * C; i++)
            x[i] = frand(2.0f) * (i % 13 == 0 ? 20.0f : 1.0f);
        for (int i = 0; i < OC * C; i++)
            w[i] = frand(0.1f);
        check_product(x, w, N, C, OC, INT8_SCALE_CHANNEL);
        check_product(x, w, N, C, OC, INT8_SCALE_BLOCK);
        /* the largest codes everywhere: pairs of products at 127 x 127 after the shift */
        for (int i = 0; i < N * C; i++)
            x[i] = 1.0f;
        for (int i = 0; i < OC * C; i++)
            w[i] = i % 3 ? 0.5f : -0.5f;
        check_product(x, w, N, C, OC, INT8_SCALE_CHANNEL);
        check_product(x, w, N, C, OC, INT8_SCALE_BLOCK);
        for (int i = 0; i < N * C; i++)
            x[i] = -1.0f;
        for (int i = 0; i < OC * C; i++)
            w[i] = 0.5f;
        check_product(x, w, N, C, OC, INT8_SCALE_CHANNEL);
        free(x);
        free(w);
    }
}

START_TEST(product_on_the_default_path)
{
    unsetenv("DLLM_INT8_GEMM");
    product_cases();
}
END_TEST

START_TEST(product_on_the_loop)
{
    setenv("DLLM_INT8_GEMM", "loop", 1);
    ck_assert_str_eq(int8_gemm_path(), "loop");
    product_cases();
    unsetenv("DLLM_INT8_GEMM");
}
END_TEST

START_TEST(scaling_names)
{
    int8_scaling s;
    dllm_err err = {0};
    ck_assert_int_eq(int8_scaling_parse("channel", &s, &err), 0);
    ck_assert_int_eq(s, INT8_SCALE_CHANNEL);
    ck_assert_int_eq(int8_scaling_parse("block", &s, &err), 0);
    ck_assert_int_eq(s, INT8_SCALE_BLOCK);
    ck_assert_int_eq(int8_scaling_parse("tensor", &s, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "channel or block"));
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    if (!dnnl_gemm_built())
        tu_partial(ctx, "no oneDNN in this build: the product ran on the portable loop only");
    Suite *s = suite_create("int8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, codes_round_half_even_and_clamp);
    tcase_add_test(tc, weights_bit_exact);
    tcase_add_test(tc, zero_and_nonfinite);
    tcase_add_test(tc, activations_bit_exact);
    tcase_add_test(tc, product_on_the_default_path);
    tcase_add_test(tc, product_on_the_loop);
    tcase_add_test(tc, scaling_names);
    suite_add_tcase(s, tc);
    return s;
}
