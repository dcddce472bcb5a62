/* backend_kernel_cases.c: the parts of tests/test_backend_ops that call the CUDA
 * functions of kernels/cuda_ops.h directly rather than through the backend table: FP8
 * quantisation in the cuBLASLt scale layouts, the cuBLASLt GEMMs (bf16, FP8 tensor and
 * block scaling, the refused FP8 pairs), the sampler's x0 and the device RNG, the global
 * norm and clipping, bf16 conversion, attention's log-sum-exp, and the checks that come
 * with fixed defects (no allocation inside ops, a multi-block tensor-wide amax, the
 * 64-bit sequence index of the sampler, an optional lse). */
#include "config.h"

#ifdef HAVE_CUDA
#include "tests/harness/backend_test_util.h"

#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/rng_mix.cuh"
#include "kernels/cuda_device.h"
#include "kernels/cuda_ops.h"
#include "kernels/fp8_gemm_check.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/ops.h"

#include "dllm/sampler.h"
#include "kernels/attention_path.h"

#include <float.h>
#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"
#endif

/* ---- attention -------------------------------------------------------------------------- */

typedef struct {
    int B, T, NH, NKV, HD;
    bool causal, mask;
} att_case;

static const att_case ATT_CASES[] = {
    {2, 45, 4, 2, 16, false, true},  {1, 70, 2, 1, 64, true, false},
    {2, 33, 2, 2, 128, false, true}, {2, 29, 4, 1, 40, true, true},
    {1, 20, 2, 2, 256, false, false}, {3, 100, 2, 2, 32, true, true},
};

/* Tensor-core attention (kernels/cuda/attention_tc.cu) against the fp32 CPU op: Q, K, V,
 * dO, P and dS are rounded to bf16 (8 significant bits) and summed in fp32, so outputs and
 * gradients are bounded in normalised squared error (ATT_TC_NMSE, kernels/backend_cases.h:
 * 3e-4 for gradients, 3e-5 for the output; typical 2e-5 and 1e-5), and the probabilities recomputed from lse at the arg max key within 2% (the score's bf16 error
 * through exp). T not a multiple of the 32-row tiles, several tiles, causal, GQA, left
 * padding and a sequence of padding only; head dims 8 (padded to 16) .. 128. */
static const att_case ATT_TC_CASES[] = {
    {2, 45, 4, 2, 16, false, true},  {1, 70, 2, 1, 64, true, false},
    {2, 33, 2, 2, 128, false, true}, {2, 29, 4, 1, 40, true, true},
    {3, 100, 2, 2, 32, true, true},  {2, 67, 8, 2, 128, true, true},
    {1, 7, 3, 1, 8, false, true},    {2, 96, 4, 4, 64, false, false},
};

/* Runs case c on the device with the attention path the environment selects and checks
 * out, dq, dk, dv and lse against the CPU: nmse within tol, P from lse within p_tol. */
static void attention_against_cpu(const att_case *c, int seed, double tol, double p_tol)
{
    const int _i = seed;
    const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD;
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    size_t natt = (size_t)B * NH * T * T;
    float *q = host_normal(nq, 20 + _i, 1.0), *k = host_normal(nk, 30 + _i, 1.0);
    float *v = host_normal(nk, 40 + _i, 1.0), *dout = host_normal(nq, 50 + _i, 1.0);
    float *dq = host_normal(nq, 60 + _i, 0.1), *dk = host_normal(nk, 70 + _i, 0.1);
    float *dv = host_normal(nk, 80 + _i, 0.1);
    uint8_t *km = dllm_malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) /* left padding of b positions; sequence 1 all padding */
            km[(size_t)b * T + t] = !c->mask || (b != 1 && t >= b * 3);
    dbuf d_q = dnew(nq * 4, q), d_k = dnew(nk * 4, k), d_v = dnew(nk * 4, v);
    dbuf d_dout = dnew(nq * 4, dout), d_dq = dnew(nq * 4, dq), d_dk = dnew(nk * 4, dk);
    dbuf d_dv = dnew(nk * 4, dv), d_km = dnew((size_t)B * T, km);
    dbuf d_out = dnew(nq * 4, NULL), d_lse = dnew((size_t)B * NH * T * 4, NULL);

    float *out = dllm_malloc(nq * 4), *att = dllm_malloc(natt * 4);
    op_attention_fwd(out, att, q, k, v, c->mask ? km : NULL, B, T, NH, NKV, HD, c->causal);
    op_attention_bwd(dq, dk, dv, dout, att, q, k, v, B, T, NH, NKV, HD);
    dllm_cuda_attention_fwd(d_out.d, d_lse.d, d_q.d, d_k.d, d_v.d, c->mask ? d_km.d : NULL, B, T,
                            NH, NKV, HD, c->causal, NULL);
    dbuf d_scr = dnew(dllm_cuda_attention_bwd_scratch_floats(B, T, NH) * 4, NULL);
    dllm_cuda_attention_bwd(d_dq.d, d_dk.d, d_dv.d, d_dout.d, d_out.d, d_lse.d, d_q.d, d_k.d,
                            d_v.d, c->mask ? d_km.d : NULL, B, T, NH, NKV, HD, c->causal,
                            d_scr.d, NULL);
    float *g_out = dl_f32(d_out), *g_lse = dl_f32(d_lse), *g_dq = dl_f32(d_dq),
          *g_dk = dl_f32(d_dk), *g_dv = dl_f32(d_dv);
    check_nmse(g_out, out, nq, tol / 10);
    check_nmse(g_dq, dq, nq, tol);
    check_nmse(g_dk, dk, nk, tol);
    check_nmse(g_dv, dv, nk, tol);
    printf("attention %s B%d T%d NH%d NKV%d HD%d%s%s: nmse out %.2g dq %.2g dk %.2g dv %.2g\n",
           dllm_cuda_attention_tc(HD) ? "tc" : "fp32", B, T, NH, NKV, HD,
           c->causal ? " causal" : "", c->mask ? " mask" : "", nmse(g_out, out, nq),
           nmse(g_dq, dq, nq), nmse(g_dk, dk, nk), nmse(g_dv, dv, nk));
    /* lse reproduces the CPU probabilities: P[s] = exp(S[s] - lse) at the arg max key */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                float L = g_lse[((size_t)b * NH + h) * T + t];
                int best = 0;
                for (int s = 1; s < T; s++)
                    if (p[s] > p[best])
                        best = s;
                if (p[best] == 0.0f) {
                    ck_assert_msg(isinf(L) && L < 0, "lse of a query without keys: %g", L);
                    continue;
                }
                const float *qr = q + (((size_t)b * T + t) * NH + h) * HD;
                const float *kr = k + (((size_t)b * T + best) * NKV + h / (NH / NKV)) * HD;
                double S = 0.0;
                for (int i = 0; i < HD; i++)
                    S += (double)qr[i] * kr[i];
                S /= sqrt((double)HD);
                ck_assert_msg(fabs(exp(S - L) - p[best]) < p_tol * p[best] + 1e-6,
                              "P from lse %g vs %g", exp(S - L), p[best]);
            }
    /* without lse: the same output, nothing else written */
    dbuf d_out2 = dnew(nq * 4, NULL);
    dllm_cuda_attention_fwd(d_out2.d, NULL, d_q.d, d_k.d, d_v.d, c->mask ? d_km.d : NULL, B, T,
                            NH, NKV, HD, c->causal, NULL);
    float *g_out2 = dl_f32(d_out2);
    ck_assert_msg(memcmp(g_out2, g_out, nq * 4) == 0, "output without lse differs");
    free(g_out2);
    dguard(d_out);
    dguard(d_out2);
    dguard(d_lse);
    dguard(d_dq);
    dguard(d_dk);
    dguard(d_dv);
    dguard(d_scr);
    dbuf all[] = {d_q, d_k, d_v, d_dout, d_dq, d_dk, d_dv, d_km, d_out, d_lse, d_out2, d_scr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(km), free(out),
        free(att), free(g_out), free(g_lse), free(g_dq), free(g_dk), free(g_dv);
}

/* The fp32 kernels (DLLM_CUDA_ATTENTION=fp32, and head dims above 128 always): the
 * forward's log-sum-exp reproduces the CPU's probabilities, a NULL lse (inference) is
 * allowed and gives the same output, and gradients differ from the CPU only in the order
 * of summation over keys. */
START_TEST(test_attention_lse)
{
    setenv("DLLM_CUDA_ATTENTION", "fp32", 1);
    ck_assert(!dllm_cuda_attention_tc(ATT_CASES[_i].HD));
    attention_against_cpu(&ATT_CASES[_i], _i, 1e-9, 1e-5);
    unsetenv("DLLM_CUDA_ATTENTION");
}
END_TEST

START_TEST(test_attention_tc)
{
    unsetenv("DLLM_CUDA_ATTENTION");
    ck_assert(dllm_cuda_attention_tc(ATT_TC_CASES[_i].HD));
    attention_against_cpu(&ATT_TC_CASES[_i], 100 + _i, ATT_TC_NMSE, 0.02);
}
END_TEST

/* The switch: head dims above 128 keep the fp32 kernels; fp32 and tc are its values. */
START_TEST(test_attention_path)
{
    unsetenv("DLLM_CUDA_ATTENTION");
    ck_assert(dllm_cuda_attention_tc(128) && dllm_cuda_attention_tc(8));
    ck_assert(!dllm_cuda_attention_tc(129) && !dllm_cuda_attention_tc(256));
    setenv("DLLM_CUDA_ATTENTION", "tc", 1);
    ck_assert(dllm_cuda_attention_tc(64));
    setenv("DLLM_CUDA_ATTENTION", "fp32", 1);
    ck_assert(!dllm_cuda_attention_tc(64));
    unsetenv("DLLM_CUDA_ATTENTION");
}
END_TEST

START_TEST(test_grad_norm_clip)
{
    const size_t n1 = 300001, n2 = 777;
    float *g1 = host_normal(n1, 140, 0.01), *g2 = host_normal(n2, 141, 1.0);
    dbuf d_g1 = dnew(n1 * 4, g1), d_g2 = dnew(n2 * 4, g2), d_acc = dnew(sizeof(double), NULL);
    double s1 = op_grad_norm(g1, n1), s2 = op_grad_norm(g2, n2);
    double total = sqrt(s1 * s1 + s2 * s2);
    ck_assert(fabs(dllm_cuda_grad_norm(d_g1.d, n1, d_acc.d, NULL) - s1) <= 1e-12 * s1);
    dllm_cuda_memset(d_acc.d, 0, sizeof(double));
    dllm_cuda_sumsq_accum(d_acc.d, d_g1.d, n1, NULL);
    dllm_cuda_sumsq_accum(d_acc.d, d_g2.d, n2, NULL);
    double acc;
    dget(&acc, d_acc);
    ck_assert_msg(fabs(sqrt(acc) - total) <= 1e-12 * total, "global norm %.17g vs %.17g",
                  sqrt(acc), total);
    const double max_norm[2] = {total * 0.5, total * 2.0}; /* clips, does not clip */
    for (int c = 0; c < 2; c++) {
        float *h = dllm_malloc(n2 * 4);
        memcpy(h, g2, n2 * 4);
        op_clip_grad(h, n2, total, max_norm[c]);
        dllm_cuda_clip_grad(d_g2.d, n2, d_acc.d, max_norm[c], NULL);
        float *g_g2 = dl_f32(d_g2);
        check_nmse(g_g2, h, n2, 1e-13);
        dllm_cuda_memcpy_h2d(d_g2.d, g2, n2 * 4);
        free(h), free(g_g2);
    }
    dguard(d_acc);
    dguard(d_g2);
    dfree(&d_g1), dfree(&d_g2), dfree(&d_acc);
    free(g1), free(g2);
}
END_TEST

START_TEST(test_bf16)
{
    const size_t n = 70000;
    float *x = host_normal(n, 150, 100.0);
    dllm_rng r = dllm_rng_make(151, 0, 0, 0);
    for (size_t i = 0; i < n / 2; i++) { /* random bit patterns: NaNs, infs, ties, subnormals */
        uint32_t u = (uint32_t)dllm_rng_u64(&r);
        if (i % 4 == 0)
            u = (u & 0xFFFF0000u) | 0x8000u; /* exact ties */
        memcpy(&x[i], &u, 4);
    }
    x[0] = FLT_MAX, x[1] = -INFINITY, x[2] = NAN, x[3] = -0.0f, x[4] = FLT_TRUE_MIN;
    uint16_t *hb = dllm_malloc(n * 2), *gb = dllm_malloc(n * 2);
    float *back = dllm_malloc(n * 4), *gback = dllm_malloc(n * 4);
    op_f32_to_bf16_array(hb, x, n);
    op_bf16_to_f32_array(back, hb, n);
    dbuf d_x = dnew(n * 4, x), d_b = dnew(n * 2, NULL), d_back = dnew(n * 4, NULL);
    dllm_cuda_f32_to_bf16(d_b.d, d_x.d, n, NULL);
    dllm_cuda_bf16_to_f32(d_back.d, d_b.d, n, NULL);
    dget(gb, d_b);
    dget(gback, d_back);
    ck_assert_msg(memcmp(gb, hb, n * 2) == 0, "fp32 -> bf16 not bit-identical");
    ck_assert_msg(memcmp(gback, back, n * 4) == 0, "bf16 -> fp32 not bit-identical");
    dguard(d_b);
    dguard(d_back);
    dfree(&d_x), dfree(&d_b), dfree(&d_back);
    free(x), free(hb), free(gb), free(back), free(gback);
}
END_TEST

/* ---- FP8 quantisation ------------------------------------------------------------------------ */

typedef struct {
    int R, C;
    fp8_scaling s;
} quant_case;

static const quant_case QUANT_CASES[] = {
    {37, 300, FP8_SCALE_GROUP}, {200, 300, FP8_SCALE_BLOCK}, {129, 128, FP8_SCALE_BLOCK},
    {33, 70, FP8_SCALE_CHANNEL}, {50, 90, FP8_SCALE_TENSOR},
};

START_TEST(test_fp8_quantise)
{
    const quant_case *qc = &QUANT_CASES[_i];
    const int R = qc->R, C = qc->C;
    const size_t n = (size_t)R * C;
    float *x = host_normal(n, 160 + _i, 2.0);
    for (size_t i = 0; i < n; i += 97)
        x[i] *= 1e-4f; /* small values: subnormal fp8 codes */
    x[5] = NAN, x[17] = INFINITY, x[n - 1] = -INFINITY, x[n / 2] = 0.0f;
    if (qc->s != FP8_SCALE_TENSOR)
        for (int c = 0; c < C; c++) /* an all-zero row or block: scale 1 */
            x[(size_t)(R - 1) * C + c] = 0.0f;
    int br, bc;
    fp8_block_shape(qc->s, R, C, &br, &bc);
    for (int f = 0; f < 2; f++)
        for (int pow2 = 0; pow2 < 2; pow2++) {
            fp8_matrix m = {0};
            dllm_err err;
            ck_assert_int_eq(fp8_quantise(&m, x, R, C, (fp8_format)f, qc->s, pow2, &err), 0);
            size_t ns = (size_t)m.scale_rows * m.scale_cols;
            dbuf d_x = dnew(n * 4, x), d_q = dnew(n, NULL), d_s = dnew(ns * 4, NULL);
            dllm_cuda_fp8_quantise(d_q.d, d_s.d, m.scale_cols, 1, d_x.d, R, C, br, bc,
                                   (fp8_format)f, pow2, NULL);
            uint8_t *gq = dllm_malloc(n);
            float *gs = dllm_malloc(ns * 4);
            dget(gq, d_q);
            dget(gs, d_s);
            ck_assert_msg(memcmp(gs, m.scale, ns * 4) == 0, "%s %s pow2=%d: scales differ",
                          fp8_scaling_name(qc->s), fp8_format_name((fp8_format)f), pow2);
            ck_assert_msg(memcmp(gq, m.q, n) == 0, "%s %s pow2=%d: codes differ",
                          fp8_scaling_name(qc->s), fp8_format_name((fp8_format)f), pow2);
            /* dequantise */
            float *deq = dllm_malloc(n * 4), *gdeq;
            fp8_dequantise(deq, &m);
            dbuf d_deq = dnew(n * 4, NULL);
            dllm_cuda_fp8_dequantise(d_deq.d, d_q.d, d_s.d, m.scale_cols, 1, R, C, br, bc,
                                     (fp8_format)f, NULL);
            gdeq = dl_f32(d_deq);
            ck_assert(nmse(gdeq, deq, n) == 0.0);
            /* bf16 input: the CPU quantises the same values rounded to bf16 */
            uint16_t *xb = dllm_malloc(n * 2);
            float *xr = dllm_malloc(n * 4);
            op_f32_to_bf16_array(xb, x, n);
            op_bf16_to_f32_array(xr, xb, n);
            fp8_matrix mb = {0};
            ck_assert_int_eq(fp8_quantise(&mb, xr, R, C, (fp8_format)f, qc->s, pow2, &err), 0);
            dbuf d_xb = dnew(n * 2, xb);
            dllm_cuda_fp8_quantise_bf16(d_q.d, d_s.d, m.scale_cols, 1, d_xb.d, R, C, br, bc,
                                        (fp8_format)f, pow2, NULL);
            dget(gq, d_q);
            dget(gs, d_s);
            ck_assert_msg(memcmp(gq, mb.q, n) == 0 && memcmp(gs, mb.scale, ns * 4) == 0,
                          "bf16 input: codes or scales differ");
            dguard(d_q);
            dguard(d_s);
            dguard(d_deq);
            dfree(&d_x), dfree(&d_q), dfree(&d_s), dfree(&d_deq), dfree(&d_xb);
            fp8_matrix_free(&m);
            fp8_matrix_free(&mb);
            free(gq), free(gs), free(deq), free(gdeq), free(xb), free(xr);
        }
    free(x);
}
END_TEST

/* ---- FP8 codes written by their producer ------------------------------------------------------
 * rmsnorm_fp8_fwd and swiglu_fp8_fwd against the plain forward followed by the quantise
 * pass, bit for bit (out, rstd, codes, scales), in both scale layouts, both formats, with
 * and without pow2 scales, on partial groups (C % gc != 0, gc > C) and rows of one group
 * (gc = C, channel scaling), with a NaN row, an inf and an all-zero row. */
typedef struct {
    int R, C, gc;
} fused_case;

static const fused_case FUSED_CASES[] = {
    {37, 300, 128}, {20, 256, 128}, {9, 72, 128}, {33, 70, 70}, {5, 1000, 128},
};

/* The codes and scales of both paths agree byte for byte. */
static void fused_compare(const char *what, dbuf q1, dbuf s1, dbuf q2, dbuf s2, int f, int pow2,
                          int layout)
{
    uint8_t *a = dllm_malloc(q1.bytes), *b = dllm_malloc(q1.bytes);
    float *sa = dllm_malloc(s1.bytes), *sb = dllm_malloc(s1.bytes);
    dget(a, q1), dget(b, q2), dget(sa, s1), dget(sb, s2);
    ck_assert_msg(memcmp(sa, sb, s1.bytes) == 0, "%s %s pow2=%d layout %d: scales differ", what,
                  fp8_format_name((fp8_format)f), pow2, layout);
    ck_assert_msg(memcmp(a, b, q1.bytes) == 0, "%s %s pow2=%d layout %d: codes differ", what,
                  fp8_format_name((fp8_format)f), pow2, layout);
    free(a), free(b), free(sa), free(sb);
}

START_TEST(test_fp8_fused_producers)
{
    const fused_case *fc = &FUSED_CASES[_i];
    const int R = fc->R, C = fc->C, gc = fc->gc, SC = (C + gc - 1) / gc;
    const size_t n = (size_t)R * C, ns = (size_t)R * SC;
    float *x = host_normal(n, 300 + _i, 2.0), *w = host_normal((size_t)C, 310 + _i, 0.3);
    float *g = host_normal(n, 320 + _i, 3.0), *u = host_normal(n, 330 + _i, 1.0);
    for (int c = 0; c < C; c++)
        w[c] += 1.0f;
    for (size_t i = 0; i < n; i += 53)
        x[i] *= 30.0f, g[i] *= 5.0f, u[i] *= 20.0f; /* outliers: groups differ in scale */
    for (int c = 0; c < C; c++)
        x[(size_t)(R - 1) * C + c] = 0.0f, u[(size_t)(R - 1) * C + c] = 0.0f; /* scale 1 */
    x[C + 3] = NAN, g[C + 3] = NAN; /* a NaN row after the norm; one NaN code in SwiGLU */
    if (R > 3)
        x[2 * C + 1] = INFINITY, u[2 * (size_t)C + 2] = -INFINITY;
    dbuf d_x = dnew(n * 4, x), d_w = dnew((size_t)C * 4, w), d_g = dnew(n * 4, g),
         d_u = dnew(n * 4, u);
    dbuf o1 = dnew(n * 4, NULL), o2 = dnew(n * 4, NULL), r1 = dnew((size_t)R * 4, NULL),
         r2 = dnew((size_t)R * 4, NULL);
    dbuf q1 = dnew(n, NULL), q2 = dnew(n, NULL), s1 = dnew(ns * 4, NULL), s2 = dnew(ns * 4, NULL);
    for (int layout = 0; layout < 2; layout++) /* the CPU's [R, SC]; cuBLASLt's [SC, R] */
        for (int f = 0; f < 2; f++)
            for (int pow2 = 0; pow2 < 2; pow2++) {
                long srs = layout ? 1 : SC, scs = layout ? R : 1;
                fp8_format ff = (fp8_format)f;
                /* RMSNorm */
                dllm_cuda_rmsnorm_fwd(o1.d, r1.d, d_x.d, d_w.d, R, C, 1e-5f, NULL);
                dllm_cuda_fp8_quantise(q1.d, s1.d, srs, scs, o1.d, R, C, 1, gc, ff, pow2, NULL);
                dllm_cuda_rmsnorm_fp8_fwd(o2.d, r2.d, q2.d, s2.d, srs, scs, d_x.d, d_w.d, R, C,
                                          1e-5f, gc, ff, pow2, NULL);
                float *a = dl_f32(o1), *b = dl_f32(o2), *ra = dl_f32(r1), *rb = dl_f32(r2);
                ck_assert(memcmp(a, b, n * 4) == 0 && memcmp(ra, rb, (size_t)R * 4) == 0);
                ck_assert(isnan(a[C]) && a[(size_t)(R - 1) * C] == 0.0f);
                fused_compare("rmsnorm", q1, s1, q2, s2, f, pow2, layout);
                dllm_cuda_memset(q2.d, 0, n), dllm_cuda_memset(s2.d, 0, ns * 4);
                dllm_cuda_rmsnorm_fp8_fwd(NULL, NULL, q2.d, s2.d, srs, scs, d_x.d, d_w.d, R, C,
                                          1e-5f, gc, ff, pow2, NULL);
                fused_compare("rmsnorm (codes only)", q1, s1, q2, s2, f, pow2, layout);
                free(a), free(b), free(ra), free(rb);
                /* SwiGLU */
                dllm_cuda_swiglu_fwd(o1.d, d_g.d, d_u.d, n, NULL);
                dllm_cuda_fp8_quantise(q1.d, s1.d, srs, scs, o1.d, R, C, 1, gc, ff, pow2, NULL);
                dllm_cuda_swiglu_fp8_fwd(o2.d, q2.d, s2.d, srs, scs, d_g.d, d_u.d, R, C, gc, ff,
                                         pow2, NULL);
                a = dl_f32(o1), b = dl_f32(o2);
                ck_assert(memcmp(a, b, n * 4) == 0);
                fused_compare("swiglu", q1, s1, q2, s2, f, pow2, layout);
                dllm_cuda_memset(q2.d, 0, n), dllm_cuda_memset(s2.d, 0, ns * 4);
                dllm_cuda_swiglu_fp8_fwd(NULL, q2.d, s2.d, srs, scs, d_g.d, d_u.d, R, C, gc, ff,
                                         pow2, NULL);
                fused_compare("swiglu (codes only)", q1, s1, q2, s2, f, pow2, layout);
                free(a), free(b);
            }
    dbuf all[] = {o1, o2, r1, r2, q1, q2, s1, s2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        dguard(all[i]);
        dfree(&all[i]);
    }
    dfree(&d_x), dfree(&d_w), dfree(&d_g), dfree(&d_u);
    free(x), free(w), free(g), free(u);
}
END_TEST

/* ---- INT8 codes written by their producer -----------------------------------------------------
 * rmsnorm_int8_fwd and swiglu_int8_fwd against the plain forward on the device, its output
 * quantised by the CPU's own activation quantiser (int8_quantise_act, the codes the INT8
 * linear's own pass writes): out and rstd bit for bit, codes (with the zero padding of the
 * row stride) and scales byte for byte; block scaling (1 x 128 groups, partial and gc > C)
 * and channel scaling (one group per row: the cases with gc = C), with the NaN, inf and
 * zero rows of the FP8 cases. */
static void int8_compare(const char *what, const int8_t *qh, const float *sh, dbuf q, dbuf sc,
                         int ci)
{
    int8_t *a = dllm_malloc(q.bytes);
    float *sa = dllm_malloc(sc.bytes);
    dget(a, q), dget(sa, sc);
    ck_assert_msg(memcmp(sa, sh, sc.bytes) == 0, "%s case %d: scales differ", what, ci);
    ck_assert_msg(memcmp(a, qh, q.bytes) == 0, "%s case %d: codes differ", what, ci);
    free(a), free(sa);
}

START_TEST(test_int8_fused_producers)
{
    const fused_case *fc = &FUSED_CASES[_i];
    const int R = fc->R, C = fc->C;
    const bool channel = fc->gc == C;
    const int8_scaling sc = channel ? INT8_SCALE_CHANNEL : INT8_SCALE_BLOCK;
    const int g = channel ? C : INT8_BLOCK, kb = (C + g - 1) / g;
    const int ld = channel ? (C + 3) / 4 * 4 : kb * INT8_BLOCK;
    const size_t n = (size_t)R * C, nq = (size_t)R * ld, ns = (size_t)R * kb;
    float *x = host_normal(n, 400 + _i, 2.0), *w = host_normal((size_t)C, 410 + _i, 0.3);
    float *gt = host_normal(n, 420 + _i, 3.0), *u = host_normal(n, 430 + _i, 1.0);
    for (int c = 0; c < C; c++)
        w[c] += 1.0f;
    for (size_t i = 0; i < n; i += 53)
        x[i] *= 30.0f, gt[i] *= 5.0f, u[i] *= 20.0f;
    for (int c = 0; c < C; c++)
        x[(size_t)(R - 1) * C + c] = 0.0f, u[(size_t)(R - 1) * C + c] = 0.0f; /* scale 1 */
    x[C + 3] = NAN, gt[C + 3] = NAN;
    if (R > 3)
        x[2 * C + 1] = INFINITY, u[2 * (size_t)C + 2] = -INFINITY;
    dbuf d_x = dnew(n * 4, x), d_w = dnew((size_t)C * 4, w), d_g = dnew(n * 4, gt),
         d_u = dnew(n * 4, u);
    dbuf o1 = dnew(n * 4, NULL), o2 = dnew(n * 4, NULL), r1 = dnew((size_t)R * 4, NULL),
         r2 = dnew((size_t)R * 4, NULL);
    dbuf q = dnew(nq, NULL), s2 = dnew(ns * 4, NULL);
    int8_t *qh = dllm_malloc(nq);
    float *sh = dllm_malloc(ns * 4);
    for (int op = 0; op < 2; op++) { /* RMSNorm, SwiGLU */
        if (op == 0)
            dllm_cuda_rmsnorm_fwd(o1.d, r1.d, d_x.d, d_w.d, R, C, 1e-5f, NULL);
        else
            dllm_cuda_swiglu_fwd(o1.d, d_g.d, d_u.d, n, NULL);
        float *a = dl_f32(o1);
        int8_quantise_act(qh, sh, a, R, C, ld, sc);
        for (int codes_only = 0; codes_only < 2; codes_only++) {
            dllm_cuda_memset(q.d, 0x55, nq); /* the padding must be written */
            dllm_cuda_memset(s2.d, 0, ns * 4);
            float *out = codes_only ? NULL : o2.d, *rs = codes_only ? NULL : r2.d;
            if (op == 0)
                dllm_cuda_rmsnorm_int8_fwd(out, rs, q.d, s2.d, ld, kb, d_x.d, d_w.d, R, C, 1e-5f,
                                           g, NULL);
            else
                dllm_cuda_swiglu_int8_fwd(out, q.d, s2.d, ld, d_g.d, d_u.d, R, C, g, NULL);
            if (!codes_only) {
                float *b = dl_f32(o2);
                ck_assert(memcmp(a, b, n * 4) == 0);
                if (op == 0) {
                    float *ra = dl_f32(r1), *rb = dl_f32(r2);
                    ck_assert(memcmp(ra, rb, (size_t)R * 4) == 0);
                    free(ra), free(rb);
                }
                free(b);
            }
            int8_compare(op == 0 ? "rmsnorm_int8" : "swiglu_int8", qh, sh, q, s2, _i);
        }
        free(a);
    }
    dbuf all[] = {o1, o2, r1, r2, q, s2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        dguard(all[i]);
        dfree(&all[i]);
    }
    dfree(&d_x), dfree(&d_w), dfree(&d_g), dfree(&d_u);
    free(x), free(w), free(gt), free(u), free(qh), free(sh);
}
END_TEST

/* The block-scaled INT8 product's tile kernel (dllm_cuda_int8_linear_codes under
 * INT8_SCALE_BLOCK) against the CPU's op_int8_linear_fwd, bit for bit: 70 rows (two row
 * tiles, the second partial), C = 300 (three k-blocks, the last short), OC = 130 (three
 * column tiles, two weight-scale blocks, padded weight rows), with and without a residual.
 * Every warp of a tile reads operand rows and sums the other warps loaded and stored. */
START_TEST(test_int8_block_product)
{
    enum { N = 70, C = 300, OC = 130 };
    float *w = host_normal((size_t)OC * C, 440, 0.1), *x = host_normal((size_t)N * C, 441, 1.0);
    float *res = host_normal((size_t)N * OC, 442, 2.0);
    int8_matrix h = {0};
    dllm_err err;
    ck_assert_int_eq(int8_quantise_weight(&h, w, OC, C, INT8_SCALE_BLOCK, &err), 0);
    int rows = 0, ldq = 0;
    dllm_cuda_int8_weight_layout(OC, C, (int)INT8_SCALE_BLOCK, &rows, &ldq);
    ck_assert_int_eq(ldq, h.ldq);
    int8_t *pad = dllm_malloc((size_t)rows * ldq);
    memset(pad, 0, (size_t)rows * ldq);
    memcpy(pad, h.q, (size_t)OC * ldq);
    const size_t ns = (size_t)(OC + INT8_BLOCK - 1) / INT8_BLOCK * h.kb;
    dbuf d_q = dnew((size_t)rows * ldq, pad), d_s = dnew(ns * 4, h.scale);
    int8_matrix d = h;
    d.q = d_q.d, d.scale = d_s.d, d.comp = NULL, d.deq = NULL;
    int8_t *qa = dllm_malloc((size_t)N * ldq);
    float *sa = dllm_malloc((size_t)N * h.kb * 4);
    int8_quantise_act(qa, sa, x, N, C, ldq, INT8_SCALE_BLOCK);
    dbuf d_qa = dnew((size_t)N * ldq, qa), d_sa = dnew((size_t)N * h.kb * 4, sa);
    dbuf d_res = dnew((size_t)N * OC * 4, res), d_out = dnew((size_t)N * OC * 4, NULL);
    float *want = dllm_malloc((size_t)N * OC * 4);
    op_int8_linear_fwd(want, x, &h, N, C, OC);
    for (int with_res = 0; with_res < 2; with_res++) {
        ck_assert_int_eq((int)dllm_cuda_int8_acc_bytes(N, &d), 0);
        dllm_cuda_int8_linear_codes(d_out.d, d_qa.d, d_sa.d, &d, N, C, OC, NULL,
                                    with_res ? d_res.d : NULL);
        float *got = dl_f32(d_out);
        for (size_t i = 0; i < (size_t)N * OC; i++) {
            float e = with_res ? want[i] + res[i] : want[i];
            ck_assert_msg(memcmp(&got[i], &e, 4) == 0, "%s at row %zu col %zu: %.9g, the "
                          "CPU's %.9g", with_res ? "with residual" : "product", i / OC, i % OC,
                          got[i], e);
        }
        free(got);
    }
    dbuf all[] = {d_q, d_s, d_qa, d_sa, d_res, d_out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        dguard(all[i]);
        dfree(&all[i]);
    }
    int8_matrix_free(&h);
    free(w), free(x), free(res), free(pad), free(qa), free(sa), free(want);
}
END_TEST

/* ---- GEMMs ---------------------------------------------------------------------------------- */

START_TEST(test_gemm_bf16)
{
    const int M = 48, N = 40, K = 64;
    for (int tr = 0; tr < 4; tr++) {
        bool ta = tr & 1, tb = (tr >> 1) & 1;
        size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        float *A = host_normal(na, 170 + tr, 1.0), *B = host_normal(nb, 180 + tr, 1.0);
        float *Cm = host_normal(nc, 190 + tr, 1.0);
        uint16_t *Ab = dllm_malloc(na * 2), *Bb = dllm_malloc(nb * 2);
        op_f32_to_bf16_array(Ab, A, na);
        op_f32_to_bf16_array(Bb, B, nb);
        op_bf16_to_f32_array(A, Ab, na);
        op_bf16_to_f32_array(B, Bb, nb);
        dbuf d_A = dnew(na * 2, Ab), d_B = dnew(nb * 2, Bb), d_C = dnew(nc * 4, Cm);
        dbuf d_Cb = dnew(nc * 2, NULL);
        dllm_err err = {0};
        /* accumulate: C = 0.5 op(A) op(B) + 1 * C */
        int rc = dllm_cuda_gemm_bf16(ta, tb, M, N, K, 0.5f, d_A.d, d_B.d, 1.0f, d_C.d, false,
                                     NULL, &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
        rc = dllm_cuda_gemm_bf16(ta, tb, M, N, K, 1.0f, d_A.d, d_B.d, 0.0f, d_Cb.d, true, NULL,
                                 &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
        float *ref = dllm_malloc(nc * 4), *ref0 = dllm_calloc(nc, 4);
        memcpy(ref, Cm, nc * 4);
        op_gemm(ta, tb, M, N, K, 0.5f, A, B, 1.0f, ref);
        op_gemm(ta, tb, M, N, K, 1.0f, A, B, 0.0f, ref0);
        float *g_C = dl_f32(d_C);
        uint16_t *g_Cb = dllm_malloc(nc * 2);
        float *g_Cbf = dllm_malloc(nc * 4);
        dget(g_Cb, d_Cb);
        op_bf16_to_f32_array(g_Cbf, g_Cb, nc);
        check_nmse(g_C, ref, nc, 1e-11);
        check_nmse(g_Cbf, ref0, nc, 1e-5); /* bf16 output rounding */
        dguard(d_C);
        dguard(d_Cb);
        dfree(&d_A), dfree(&d_B), dfree(&d_C), dfree(&d_Cb);
        free(A), free(B), free(Cm), free(Ab), free(Bb), free(ref), free(ref0), free(g_C),
            free(g_Cb), free(g_Cbf);
    }
    /* a misaligned shape is refused with a message naming the problem */
    dllm_err err = {0};
    dbuf d_A = dnew(64, NULL);
    ck_assert_int_ne(dllm_cuda_gemm_bf16(false, false, 2, 4, 6, 1.0f, d_A.d, d_A.d, 0.0f, d_A.d,
                                         false, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "multiples of 8") != NULL, "message: %s", err.msg);
    dfree(&d_A);
}
END_TEST

/* FP8 linear vs the CPU's definition (op_fp8_linear_fwd: dequantised codes, exact
 * products, fp32 sums): weight and activations quantised on the GPU in the cuBLASLt scale
 * layouts, multiplied, compared within FP8_GEMM_NMSE (the accumulator's precision), by
 * dllm_fp8_linear_parity (kernels/fp8_gemm_check.c, which `dllm-rl selftest` runs too).
 * The activations may take another format than the weight, so mixed pairs are checked. */
static void fp8_linear_case(fp8_scaling ws, fp8_format wf, fp8_format af, int N, int C, int OC,
                            uint64_t seed)
{
    dllm_fp8_parity r;
    dllm_err err = {0};
    int rc = dllm_fp8_linear_parity(ws, wf, af, N, C, OC, seed, &r, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_msg(r.codes_equal, "weight codes differ");
    ck_assert_msg(r.guards_ok, "a guard byte after a device buffer was overwritten");
    ck_assert_msg(r.nmse_f32 <= r.tol, "fp32 out: nmse %.3g > %.3g", r.nmse_f32, r.tol);
    ck_assert_msg(r.nmse_bf16 <= r.tol + 1e-5, "bf16 out: nmse %.3g > %.3g", r.nmse_bf16,
                  r.tol + 1e-5); /* + bf16 output rounding */
}

START_TEST(test_fp8_linear)
{
    fp8_linear_case(FP8_SCALE_TENSOR, FP8_E4M3, FP8_E4M3, 64, 256, 192, 200);
    fp8_linear_case(FP8_SCALE_TENSOR, FP8_E4M3, FP8_E4M3, 40, 144, 48, 210);
    /* the mixed pairs cuBLASLt takes (before the formats were passed, both were E4M3) */
    fp8_linear_case(FP8_SCALE_TENSOR, FP8_E4M3, FP8_E5M2, 40, 144, 48, 211);
    fp8_linear_case(FP8_SCALE_TENSOR, FP8_E5M2, FP8_E4M3, 40, 144, 48, 212);
    char why[256];
    if (!dllm_cuda_fp8_block_scaling_available(why, sizeof why)) {
        /* a build or device without block scaling uses tensor scaling (checked above) */
        printf("backend_ops: block-scaled FP8 GEMM not checked: %s\n", why);
        return;
    }
    fp8_linear_case(FP8_SCALE_BLOCK, FP8_E4M3, FP8_E4M3, 64, 256, 192, 220);
    fp8_linear_case(FP8_SCALE_BLOCK, FP8_E4M3, FP8_E4M3, 40, 384, 272, 230); /* OC % 128 != 0 */
    fp8_linear_case(FP8_SCALE_BLOCK, FP8_E4M3, FP8_E4M3, 129, 640, 256, 240); /* KB % 4 != 0 */
}
END_TEST

/* E5M2 x E5M2 (rollout.fp8.format: e5m2 quantises weights and activations alike) has no
 * cuBLASLt kernel: refused with a message that names it, before any library call. */
START_TEST(test_fp8_e5m2_pair_refused)
{
    dbuf d_q = dnew(64 * 64, NULL), d_s = dnew(16, NULL), d_out = dnew(64 * 64 * 4, NULL);
    dllm_err err = {0};
    int rc = dllm_cuda_fp8_linear(d_out.d, false, d_q.d, d_s.d, FP8_E5M2, d_q.d, d_s.d, FP8_E5M2,
                                  FP8_SCALE_TENSOR, 64, 64, 64, NULL, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err.msg, "E5M2 x E5M2") != NULL, "message: %s", err.msg);
    dguard(d_out);
    dfree(&d_q), dfree(&d_s), dfree(&d_out);
}
END_TEST

/* The cuBLASLt heuristic runs once per problem: a second GEMM of a shape reuses the
 * cached algorithm; another row count, another FP8 format pair (the E4M3/E5M2 choice is
 * an argument of the call), another scaling or output type is another problem. The
 * shapes are used by no other case, so the counts start from an empty cache entry. */
START_TEST(test_gemm_heuristic_cache)
{
#ifdef DLLM_CUDA_EMULATION
    enum { N = 48, C = 176, OC = 80 };
    dbuf d_a = dnew((size_t)N * C, NULL), d_w = dnew((size_t)OC * C, NULL);
    dbuf d_s = dnew(16, NULL), d_out = dnew((size_t)N * OC * 4, NULL);
    float one = 1.0f;
    dllm_cuda_memcpy_h2d(d_s.d, &one, sizeof one);
    struct {
        int n;
        fp8_format af;
        bool bf16;
        unsigned long long new_queries;
    } calls[] = {
        {N, FP8_E4M3, false, 1}, {N, FP8_E4M3, false, 0}, {N - 16, FP8_E4M3, false, 1},
        {N, FP8_E5M2, false, 1}, {N, FP8_E5M2, false, 0}, {N, FP8_E4M3, true, 1},
        {N - 16, FP8_E4M3, false, 0},
    };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        dllm_emu_stats a, b;
        dllm_emu_get_stats(&a);
        dllm_err err = {0};
        int rc = dllm_cuda_fp8_linear(d_out.d, calls[i].bf16, d_a.d, d_s.d, calls[i].af, d_w.d,
                                      d_s.d, FP8_E4M3, FP8_SCALE_TENSOR, calls[i].n, C, OC,
                                      NULL, &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
        dllm_cuda_synchronize();
        dllm_emu_get_stats(&b);
        ck_assert_msg(b.heuristics - a.heuristics == calls[i].new_queries &&
                          b.matmuls - a.matmuls == 1,
                      "call %zu: %llu heuristic queries (expected %llu), %llu matmuls", i,
                      b.heuristics - a.heuristics, calls[i].new_queries, b.matmuls - a.matmuls);
    }
    dguard(d_out);
    dfree(&d_a), dfree(&d_w), dfree(&d_s), dfree(&d_out);
#else
    printf("backend_ops: cuBLASLt's heuristic calls are counted only under emulation\n");
#endif
}
END_TEST

/* ---- sampler x0 and the device RNG -------------------------------------------------------------- */

START_TEST(test_sampler_x0)
{
    const int n = 24, V = 1000;
    const uint64_t seed = 1234, gstep = 17;
    const double temps[] = {0.0, 0.7, 1.0, 1.5};
    float *lg = host_normal((size_t)n * V, 250, 2.0);
    int64_t seq[24]; /* global sequence indices: the CPU keys the noise by 64 bits */
    int32_t pos[24];
    for (int i = 0; i < n; i++) {
        seq[i] = i / 8 + (i >= 16 ? 5000000000LL : 0); /* three sequences, one past 2^32 */
        pos[i] = 5 + 3 * (i % 8);
    }
    for (int v = 0; v < V; v += 2) /* masked entries (the eos masking) */
        lg[(size_t)3 * V + v] = -INFINITY;
    lg[(size_t)4 * V + 10] = lg[(size_t)4 * V + 900] = 50.0f; /* a tie: the lower index */
    lg[(size_t)5 * V + 0] = NAN;                              /* the CPU scan's NaN rule */
    dbuf d_lg = dnew((size_t)n * V * 4, lg), d_seq = dnew(sizeof seq, seq);
    dbuf d_pos = dnew(sizeof pos, pos), d_x0 = dnew(sizeof(int32_t) * n, NULL);
    dbuf d_prob = dnew(sizeof(float) * n, NULL), d_rc = dnew(sizeof(double) * n, NULL);
    for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++) {
        dllm_cuda_sampler_x0(d_x0.d, d_prob.d, d_rc.d, d_lg.d, d_seq.d, d_pos.d, n, V, temps[ti],
                             seed, gstep, NULL);
        int32_t gx[24];
        float gp[24];
        double grc[24];
        dget(gx, d_x0);
        dget(gp, d_prob);
        dget(grc, d_rc);
        for (int i = 0; i < n; i++) {
            dllm_rng noise = dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2 * (uint64_t)seq[i]);
            dllm_rng remask = dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2 * (uint64_t)seq[i] + 1);
            const float *row = lg + (size_t)i * V;
            int32_t x0 = dllm_sampler_draw_x0(row, V, temps[ti], &noise, pos[i]);
            ck_assert_msg(gx[i] == x0, "T=%g row %d: x0 %d vs CPU %d", temps[ti], i, gx[i], x0);
            float prob = (float)dllm_sampler_prob(row, V, x0);
            ck_assert_msg((isnan(prob) && isnan(gp[i])) || fabsf(gp[i] - prob) <= 1e-6f * prob + 1e-30f,
                          "T=%g row %d: prob %g vs %g", temps[ti], i, gp[i], prob);
            remask.ctr = (uint64_t)pos[i];
            ck_assert(grc[i] == dllm_rng_uniform(&remask));
        }
    }
    /* raw draws, bit for bit */
    enum { ND = 5000 };
    uint64_t *gd = dllm_malloc(ND * sizeof(uint64_t));
    dbuf d_u = dnew(ND * sizeof(uint64_t), NULL);
    dllm_cuda_rng_u64(d_u.d, ND, 99, 2, 7, 11, 123456, NULL);
    dget(gd, d_u);
    dllm_rng r = dllm_rng_make(99, 2, 7, 11);
    r.ctr = 123456;
    for (int i = 0; i < ND; i++)
        ck_assert_uint_eq(gd[i], dllm_rng_u64(&r));
    dguard(d_u);
    dguard(d_x0);
    dguard(d_prob);
    dguard(d_rc);
    dbuf all[] = {d_lg, d_seq, d_pos, d_x0, d_prob, d_rc, d_u};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(lg), free(gd);
}
END_TEST

/* A tensor-wide scale over a whole activation is reduced by many thread blocks (it was
 * one 256-thread block): the emulation counts the blocks of the amax pass. The codes
 * and the scale stay the CPU's (test_fp8_quantise). */
START_TEST(test_fp8_tensor_amax_multiblock)
{
#ifdef DLLM_CUDA_EMULATION
    const int R = 512, C = 256;
    float *x = host_normal((size_t)R * C, 300, 1.0);
    x[(size_t)R * C - 7] = 99.0f; /* the maximum in the last rows */
    fp8_matrix m = {0};
    dllm_err err;
    ck_assert_int_eq(fp8_quantise(&m, x, R, C, FP8_E4M3, FP8_SCALE_TENSOR, false, &err), 0);
    dbuf d_x = dnew((size_t)R * C * 4, x), d_q = dnew((size_t)R * C, NULL), d_s = dnew(4, NULL);
    dllm_emu_reset_stats();
    dllm_cuda_fp8_quantise(d_q.d, d_s.d, 1, 1, d_x.d, R, C, R, C, FP8_E4M3, false, NULL);
    float sc;
    dget(&sc, d_s);
    ck_assert_msg(sc == m.scale[0], "tensor scale %g vs CPU %g", sc, m.scale[0]);
    unsigned long long nb = dllm_emu_max_blocks("amax");
    ck_assert_msg(nb >= 64, "tensor-wide amax ran on %llu thread blocks", nb);
    dguard(d_s);
    dfree(&d_x), dfree(&d_q), dfree(&d_s);
    fp8_matrix_free(&m);
    free(x);
#else
    printf("backend_ops: thread-block count of the amax pass not observable on a GPU\n");
#endif
}
END_TEST

void backend_kernel_cases_add(TCase *tc)
{
    tcase_add_loop_test(tc, test_attention_lse, 0, (int)(sizeof ATT_CASES / sizeof *ATT_CASES));
    tcase_add_loop_test(tc, test_attention_tc, 0,
                        (int)(sizeof ATT_TC_CASES / sizeof *ATT_TC_CASES));
    tcase_add_test(tc, test_attention_path);
    tcase_add_test(tc, test_grad_norm_clip);
    tcase_add_test(tc, test_bf16);
    tcase_add_loop_test(tc, test_fp8_quantise, 0, (int)(sizeof QUANT_CASES / sizeof *QUANT_CASES));
    tcase_add_test(tc, test_fp8_tensor_amax_multiblock);
    tcase_add_loop_test(tc, test_fp8_fused_producers, 0,
                        (int)(sizeof FUSED_CASES / sizeof *FUSED_CASES));
    tcase_add_loop_test(tc, test_int8_fused_producers, 0,
                        (int)(sizeof FUSED_CASES / sizeof *FUSED_CASES));
    tcase_add_test(tc, test_int8_block_product);
    tcase_add_test(tc, test_gemm_bf16);
    tcase_add_test(tc, test_fp8_linear);
    tcase_add_test(tc, test_fp8_e5m2_pair_refused);
    tcase_add_test(tc, test_gemm_heuristic_cache);
    tcase_add_test(tc, test_sampler_x0);
}
#else
/* Without the CUDA backend there is nothing to call (ISO C wants a declaration). */
typedef int backend_kernel_cases_unused;
#endif
