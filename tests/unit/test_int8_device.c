/* test_int8_device: the CUDA backend's INT8 W8A7 linear (kernels/cuda/gemm_int8.cu)
 * against the CPU's (kernels/cpu/int8.c), in the emulation build:
 *   - int8_linear_fwd of the CUDA table equals op_int8_linear_fwd bit for bit (the
 *     activation codes and scales are the CPU's, the integer sums exact, the scaling
 *     formed in the CPU's order), channel and block scaling, at shapes whose C, OC and
 *     rows are not multiples of 4 or of 128 (the device layout's padding), at a larger
 *     one that splits channel scaling's rows into chunks, and at one whose block-scaled
 *     product spans several 64 x 64 output tiles in both directions, partial ones, k-blocks
 *     and weight-scale blocks (the tile kernel's edges); inputs with inf, NaN and a row of
 *     zeros; and within the fp32 bound of the dequantised reference (op_int8_linear_ref);
 *   - linear_res_fwd over the same weight equals the CPU's linear followed by its add, bit
 *     for bit (the residual joins after the product's sum).
 * (What the cuBLASLt stand-in refuses for INT8 is a probe row of kernels/cuda/
 * selftest_probe.cu, run by tests/test_cuda_selftest.) SKIP (77) outside the emulation
 * build. */
#include "config.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLLM_CUDA_EMULATION
#include "kernels/backend.h"
#include "kernels/cuda_device.h"
#include "kernels/cuda_ops.h"
#include "kernels/int8.h"
#include "kernels/rng.h"

/* The device copy of a host INT8 weight, laid out as the device wants it. */
static void to_device(int8_matrix *d, const int8_matrix *h)
{
    int rows, ldq;
    dllm_cuda_int8_weight_layout(h->rows, h->cols, (int)h->scaling, &rows, &ldq);
    int8_t *pad = calloc((size_t)rows * ldq, 1);
    for (int r = 0; r < h->rows; r++)
        memcpy(pad + (size_t)r * ldq, h->q + (size_t)r * h->ldq, (size_t)h->ldq);
    size_t ns = h->scaling == INT8_SCALE_BLOCK
                    ? (size_t)(h->rows + INT8_BLOCK - 1) / INT8_BLOCK * h->kb
                    : (size_t)h->rows;
    *d = *h;
    d->ldq = ldq;
    d->q = dllm_cuda_malloc((size_t)rows * ldq);
    d->scale = dllm_cuda_malloc(ns * sizeof(float));
    d->comp = NULL, d->deq = NULL;
    dllm_cuda_memcpy_h2d(d->q, pad, (size_t)rows * ldq);
    dllm_cuda_memcpy_h2d(d->scale, h->scale, ns * sizeof(float));
    free(pad);
}

static const struct {
    int N, C, OC;
} SHAPES[] = {{5, 37, 22}, {9, 300, 130}, {3, 256, 256}, {1100, 20, 3900}, {150, 400, 301}};

START_TEST(test_equals_cpu)
{
    const int8_scaling s = (int8_scaling)(_i % 2);
    const int N = SHAPES[_i / 2].N, C = SHAPES[_i / 2].C, OC = SHAPES[_i / 2].OC;
    dllm_backend *be = dllm_backend_cuda();
    ck_assert_ptr_nonnull(be);
    ck_assert(dllm_backend_supports(be, DLLM_OP_INT8_LINEAR));
    dllm_cuda_int8_acc_limit(1 << 22); /* 1100 x 3900 rows in two chunks */
    dllm_rng r = dllm_rng_make(9, DLLM_RNG_INIT, (uint64_t)_i, 0);
    float *w = malloc(sizeof(float) * (size_t)OC * C), *x = malloc(sizeof(float) * (size_t)N * C);
    for (size_t i = 0; i < (size_t)OC * C; i++)
        w[i] = (float)(0.1 * dllm_rng_normal(&r)) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (size_t i = 0; i < (size_t)N * C; i++)
        x[i] = (float)dllm_rng_normal(&r);
    x[3] = INFINITY; /* clamps; the amax is over finite values */
    if (N > 2) {
        x[C + 1] = NAN; /* codes as +63 */
        memset(x + 2 * (size_t)C, 0, sizeof(float) * (size_t)C); /* scale 1, codes 0 */
    }
    int8_matrix h = {0}, d;
    dllm_err err;
    ck_assert_int_eq(int8_quantise_weight(&h, w, OC, C, s, &err), 0);
    to_device(&d, &h);
    float *want = malloc(sizeof(float) * (size_t)N * OC), *got = malloc(sizeof(float) * (size_t)N * OC);
    float *ref = malloc(sizeof(float) * (size_t)N * OC);
    op_int8_linear_fwd(want, x, &h, N, C, OC);
    float *dx = dllm_cuda_malloc(sizeof(float) * (size_t)N * C);
    float *dout = dllm_cuda_malloc(sizeof(float) * (size_t)N * OC);
    dllm_cuda_memcpy_h2d(dx, x, sizeof(float) * (size_t)N * C);
    be->ops->int8_linear_fwd(be, dout, dx, &d, N, C, OC);
    dllm_cuda_memcpy_d2h(got, dout, sizeof(float) * (size_t)N * OC);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && !differ++)
            first = i;
    ck_assert_msg(differ == 0, "%s N%d C%d OC%d: %zu of %zu outputs differ from the CPU's (first "
                  "at %zu: %.9g vs %.9g)", int8_scaling_name(s), N, C, OC, differ,
                  (size_t)N * OC, first, got[first], want[first]);
    /* plus a residual (linear_res_fwd, added in the last scaling pass): the CPU's linear
     * then add, bit for bit */
    float *res = malloc(sizeof(float) * (size_t)N * OC);
    for (size_t i = 0; i < (size_t)N * OC; i++)
        res[i] = (float)(2.0 * dllm_rng_normal(&r));
    float *dres = dllm_cuda_malloc(sizeof(float) * (size_t)N * OC);
    dllm_cuda_memcpy_h2d(dres, res, sizeof(float) * (size_t)N * OC);
    const dllm_lin_weight lw = {.i8 = &d};
    be->ops->linear_res_fwd(be, dout, dres, dx, NULL, &lw, N, C, OC);
    dllm_cuda_memcpy_d2h(got, dout, sizeof(float) * (size_t)N * OC);
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        float sum = want[i] + res[i];
        ck_assert_msg(memcmp(&got[i], &sum, sizeof sum) == 0, "%s N%d C%d OC%d: linear + "
                      "residual at %zu: %.9g, the CPU's %.9g", int8_scaling_name(s), N, C, OC,
                      i, got[i], sum);
    }
    dllm_cuda_free(dres);
    free(res);
    /* and near the dequantised reference: fp32 rounding only (kernels/int8.h's bound) */
    be->ops->int8_linear_fwd(be, dout, dx, &d, N, C, OC);
    dllm_cuda_memcpy_d2h(got, dout, sizeof(float) * (size_t)N * OC);
    op_int8_linear_ref(ref, x, &h, N, C, OC);
    int8_matrix_cache_dequant(&h);
    int8_t *qa = malloc((size_t)N * h.ldq);
    float *sa = malloc(sizeof(float) * (size_t)N * h.kb);
    int8_quantise_act(qa, sa, x, N, C, h.ldq, s);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double mag = 0;
            for (int c = 0; c < C; c++)
                mag += fabs((double)qa[(size_t)n * h.ldq + c] * sa[(size_t)n * h.kb +
                            (s == INT8_SCALE_BLOCK ? c / INT8_BLOCK : 0)] * h.deq[(size_t)o * C + c]);
            double bound = (2.0 * C + 8) * ldexp(1, -24) * mag;
            double e = fabs((double)got[(size_t)n * OC + o] - ref[(size_t)n * OC + o]);
            ck_assert_msg(e <= bound, "row %d col %d: |device - ref| %g > %g", n, o, e, bound);
        }
    free(qa), free(sa);
    dllm_cuda_free(dx), dllm_cuda_free(dout), dllm_cuda_free(d.q), dllm_cuda_free(d.scale);
    int8_matrix_free(&h);
    free(w), free(x), free(want), free(got), free(ref);
    dllm_cuda_int8_acc_limit(0);
}
END_TEST

#endif

Suite *tu_suite(tu_ctx *ctx)
{
#ifndef DLLM_CUDA_EMULATION
    return tu_skip(ctx, "the CUDA INT8 linear is checked in the emulation build "
                        "(--enable-cuda-emulation)");
#else
    (void)ctx;
    Suite *s = suite_create("int8_device");
    TCase *tc = tcase_create("int8");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_equals_cpu, 0, 2 * (int)(sizeof SHAPES / sizeof SHAPES[0]));
    suite_add_tcase(s, tc);
    return s;
#endif
}
