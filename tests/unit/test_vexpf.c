/* test_vexpf.c: the vectorised exponentials keep the scalar bits: expf
 * (kernels/cpu/vexpf.h) against the C library's, the SwiGLU forward that uses it
 * against its plain formula, and the bidirectional attention's softmax (rows together,
 * exponentials sixteen at a time) against the causal path's row-by-row one.
 *
 * The fast path must give the library's bits on every input, or results would
 * depend on the CPU: a spread of float bit patterns over the whole range (every
 * 1031st, so every exponent and many mantissas), the neighbourhoods of the fast
 * range's ends, and the special values. On a CPU without AVX-512 or AVX2 + FMA (or where the load-time
 * check turned the fast path off) vexpf is the library, so those comparisons are not
 * made: the suite runs the rest (which holds on any CPU) and reports SKIP, saying why.
 * It prints which path it compared (AVX-512, or AVX2 with FMA); the path taken is
 * the widest one whose load-time check passed, so an AVX-512 machine does not compare
 * the AVX2 path (all 2^32 float bit patterns did match the library on an AVX2 EPYC
 * when that path was written). */
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vexpf.h"
#include "kernels/ops.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The count of inputs whose vexpf bits differ from expf's (NaN: any NaN). */
static size_t mismatches(const float *x, size_t n)
{
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    vexpf_ref(a, x, n);
    vexpf(b, x, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i]))
            continue;
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            if (bad < 5)
                fprintf(stderr, "vexpf(%a) = %a, expf = %a\n", (double)x[i], (double)b[i],
                        (double)a[i]);
            bad++;
        }
    }
    free(a);
    free(b);
    return bad;
}

START_TEST(test_spread)
{
    size_t n = (size_t)(0x100000000ULL / 1031) + 1, k = 0;
    float *x = malloc(n * sizeof *x);
    for (uint64_t u = 0; u < 0x100000000ULL; u += 1031)
        x[k++] = from_bits((uint32_t)u);
    /* odd lengths: the vector loop's tail */
    ck_assert_uint_eq(mismatches(x, k), 0);
    ck_assert_uint_eq(mismatches(x + 3, 29), 0);
    free(x);
}
END_TEST

START_TEST(test_edges)
{
    enum { W = 4096 };
    float ends[] = {-103.9f, 88.7f, -87.33f, 0.0f, 88.0f, -88.0f, -104.0f};
    float *x = malloc(sizeof(float) * 2 * W * (sizeof ends / sizeof *ends) + 64);
    size_t k = 0;
    for (size_t e = 0; e < sizeof ends / sizeof *ends; e++) {
        uint32_t b;
        memcpy(&b, &ends[e], sizeof b);
        for (int d = -W; d < W; d++)
            x[k++] = from_bits(b + (uint32_t)d);
    }
    float sp[] = {INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                  1e-45f, -1e-45f, 1.0f, -1.0f, 0.5f, 20.0f, -20.0f, 1e-8f};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++)
        x[k++] = sp[i];
    ck_assert_uint_eq(mismatches(x, k), 0);
    free(x);
}
END_TEST

/* The in-place form the SwiGLU forward uses, and the forward itself. */
START_TEST(test_swiglu_plain_bits)
{
    enum { N = 5000 };
    float *g = malloc(N * sizeof *g), *u = malloc(N * sizeof *u), *o = malloc(N * sizeof *o);
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        g[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 24.0f;
        s = s * 1664525u + 1013904223u;
        u[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
    g[7] = -120.0f, g[8] = 95.0f; /* lanes outside the fast range */
    op_swiglu_fwd(o, g, u, N);
    for (int i = 0; i < N; i++) {
        float want = g[i] / (1.0f + expf(-g[i])) * u[i];
        ck_assert_msg(!memcmp(&want, &o[i], sizeof want), "swiglu[%d]: %a, plain loop %a", i,
                      (double)o[i], (double)want);
    }
    float y[33];
    memcpy(y, g, sizeof y);
    vexpf(y, y, 33);
    for (int i = 0; i < 33; i++) {
        float want = expf(g[i]);
        ck_assert_msg(!memcmp(&want, &y[i], sizeof want), "vexpf(%a) = %a, expf %a", (double)g[i], (double)y[i], (double)want);
    }
    free(g);
    free(u);
    free(o);
}
END_TEST

/* A causal attention's last query row sees every key, as each row of the
 * bidirectional attention does: the two softmax paths must agree there bit for bit,
 * with and without a key mask. */
START_TEST(test_attention_rows_bits)
{
    enum { B = 2, T = 37, NH = 3, HD = 8 };
    size_t nq = (size_t)B * T * NH * HD;
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nq * 4);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4);
    float *a1 = malloc((size_t)B * NH * T * T * 4), *a2 = malloc((size_t)B * NH * T * T * 4);
    uint32_t s = 99;
    for (size_t i = 0; i < nq; i++) {
        s = s * 1664525u + 1013904223u;
        q[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 6.0f;
        s = s * 1664525u + 1013904223u;
        k[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 3.0f;
        v[i] = (float)(i % 13) - 6.0f;
    }
    uint8_t km[B * T];
    for (int i = 0; i < B * T; i++)
        km[i] = i % 5 != 1;
    for (int masked = 0; masked < 2; masked++) {
        op_attention_fwd(o1, a1, q, k, v, masked ? km : NULL, B, T, NH, NH, HD, false);
        op_attention_fwd(o2, a2, q, k, v, masked ? km : NULL, B, T, NH, NH, HD, true);
        for (int u = 0; u < B * NH; u++) {
            const float *r1 = a1 + ((size_t)u * T + T - 1) * T, *r2 = a2 + ((size_t)u * T + T - 1) * T;
            ck_assert_msg(!memcmp(r1, r2, T * sizeof(float)), "unit %d (mask %d): the "
                          "bidirectional softmax differs from the row-by-row one", u, masked);
        }
    }
    free(q), free(k), free(v), free(o1), free(o2), free(a1), free(a2);
}
END_TEST

/* Why the fast path is off here (NULL: it is on). */
static const char *vexpf_absent(void)
{
    if (vexpf_fast())
        return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    return cpu_has(CPU_AVX512F) || (cpu_has(CPU_AVX2) && cpu_has(CPU_FMA))
               ? "the load-time check against this C library's expf turned it off"
               : !strcmp(cpu_isa_cap(), "native")
                     ? "the CPU has neither AVX-512 nor AVX2 with FMA"
                     : "DLLM_CPU_ISA caps the CPU below AVX2 with FMA";
#else
    return "not an x86-64 build";
#endif
}

Suite *tu_suite(tu_ctx *ctx)
{
    const char *absent = vexpf_absent();
    printf("fast path vexpf (%s): %s%s\n", vexpf_path(), absent ? "absent: " : "exercised",
           absent ? absent : "");
    Suite *s = suite_create("vexpf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    if (!absent) {
        tcase_add_test(tc, test_spread);
        tcase_add_test(tc, test_edges);
    } else {
        tu_partial(ctx, "vexpf's vector paths are absent (%s): vexpf is expf here, so its bits "
                        "were not compared with the library's (the SwiGLU and attention checks "
                        "ran)", absent);
    }
    tcase_add_test(tc, test_swiglu_plain_bits);
    tcase_add_test(tc, test_attention_rows_bits);
    suite_add_tcase(s, tc);
    return s;
}
