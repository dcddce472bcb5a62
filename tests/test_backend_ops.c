/* test_backend_ops.c: every CUDA op against its CPU reference (kernels/ops.h,
 * kernels/fp8.h, the sampler's draw of x0), in the spirit of ggml's test-backend-ops.
 *
 *  - fresh random inputs per case; the CPU op and the CUDA op run on the same data and
 *    are compared by normalised MSE, sum (gpu - cpu)^2 / sum cpu^2, with a per-op bound
 *    (fp32 ops differ only in summation order and libm ulps: 1e-9 to 1e-11);
 *  - bit-identical where the contract says so: bf16 conversion, FP8 codes and scales,
 *    AdamW, the device RNG and the sampler's x0;
 *  - backward ops accumulate: every gradient buffer starts from the same random values
 *    on both sides;
 *  - guard bytes after every device output (a sentinel pattern that must survive);
 *  - the FP8 GEMM against op_fp8_linear_fwd, the exact CPU simulation, within
 *    accumulation tolerance.
 * The "host" case checks the host half of the shared headers (kernels/cuda/rng_mix.cuh,
 * fp8_codec.cuh) against kernels/rng.c and kernels/cpu/fp8.c and runs everywhere. The
 * GPU cases need a device: without one (built without CUDA, or none at run time) the
 * program prints "SKIP: <why>" and exits 77, automake's skip status. Runs by itself too:
 * tests/test_backend_ops (no data files needed). */
#include "config.h"

#include "kernels/base.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/rng_mix.cuh"
#include "kernels/cuda_device.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include "dllm/sampler.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "kernels/cuda_ops.h"
#endif

/* ---- host half of the shared headers (runs with or without a GPU) ------------------ */

START_TEST(test_host_shared_headers)
{
    /* RNG: keys and draws of rng_mix.cuh equal kernels/rng.c */
    for (uint64_t seed = 0; seed < 5; seed++) {
        dllm_rng r = dllm_rng_make(seed * 7919, 2, seed + 3, 2 * seed + 1);
        ck_assert_uint_eq(r.key, dllm_rng_key(seed * 7919, 2, seed + 3, 2 * seed + 1));
        for (uint64_t i = 1; i <= 100; i++) {
            uint64_t u = dllm_rng_u64(&r);
            ck_assert_uint_eq(u, dllm_rng_draw(r.key, i));
        }
        r.ctr = 41;
        double u = dllm_rng_uniform(&r);
        ck_assert(u == dllm_rng_u01(dllm_rng_draw(r.key, 42)));
    }
    /* FP8 codec: all codes decode alike; encode agrees on random and special bits */
    for (int f = 0; f < 2; f++) {
        for (int c = 0; c < 256; c++) {
            float a = fp8_decode((uint8_t)c, (fp8_format)f), b = fp8c_decode((uint8_t)c, f);
            ck_assert_msg((isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0,
                          "decode %s 0x%02x", fp8_format_name((fp8_format)f), c);
        }
        dllm_rng r = dllm_rng_make(5, 6, 7, (uint64_t)f);
        for (int i = 0; i < 200000; i++) {
            uint32_t bits = (uint32_t)dllm_rng_u64(&r);
            if (i % 2) /* half of them near the fp8 range, where rounding matters */
                bits = (bits & 0x807FFFFFu) | ((uint32_t)(100 + (bits >> 24) % 60) << 23);
            float x;
            memcpy(&x, &bits, sizeof x);
            ck_assert_msg(fp8_encode(x, (fp8_format)f) == fp8c_encode(x, f),
                          "encode %s of 0x%08x", fp8_format_name((fp8_format)f), bits);
        }
        const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, FLT_TRUE_MIN,
                                  448.0f, 464.0f, 57344.0f, 61440.0f, 1e-9f, -3e-3f};
        for (size_t i = 0; i < sizeof specials / sizeof *specials; i++)
            ck_assert(fp8_encode(specials[i], (fp8_format)f) == fp8c_encode(specials[i], f));
    }
}
END_TEST

#ifdef HAVE_CUDA
/* ---- host helpers ----------------------------------------------------------------- */

static void fill_normal(float *x, size_t n, uint64_t seed, double scale)
{
    dllm_rng r = dllm_rng_make(seed, 91, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * dllm_rng_normal(&r));
}

static float *host_normal(size_t n, uint64_t seed, double scale)
{
    float *x = dllm_malloc((n ? n : 1) * sizeof(float));
    fill_normal(x, n, seed, scale);
    return x;
}

/* sum (a - ref)^2 / sum ref^2; NaN where ref is finite and a is not gives +inf;
 * NaN in both places agrees. */
static double nmse(const float *a, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]) && isnan(a[i]))
            continue;
        if (isnan(a[i]) != isnan(ref[i]) || isinf(a[i]) != isinf(ref[i]))
            return INFINITY;
        if (isinf(ref[i])) {
            if (a[i] != ref[i])
                return INFINITY;
            continue;
        }
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

#define check_nmse(a, ref, n, tol)                                                            \
    do {                                                                                    \
        double e_ = nmse((a), (ref), (n));                                                   \
        ck_assert_msg(e_ <= (tol), "%s vs %s: nmse %.3g > %.3g", #a, #ref, e_, (double)(tol)); \
    } while (0)

/* ---- device buffers with guard bytes ------------------------------------------------ */

enum { GUARD_BYTES = 64, GUARD_BYTE = 0xA5 };

typedef struct {
    void *d;      /* device pointer */
    size_t bytes; /* payload; GUARD_BYTES of GUARD_BYTE follow */
} dbuf;

static dbuf dnew(size_t bytes, const void *init)
{
    dbuf b = {dllm_cuda_malloc(bytes + GUARD_BYTES), bytes};
    unsigned char g[GUARD_BYTES];
    memset(g, GUARD_BYTE, sizeof g);
    if (init && bytes)
        dllm_cuda_memcpy_h2d(b.d, init, bytes);
    else if (bytes)
        dllm_cuda_memset(b.d, 0, bytes);
    dllm_cuda_memcpy_h2d((char *)b.d + bytes, g, GUARD_BYTES);
    return b;
}

static void dget(void *host, dbuf b) { dllm_cuda_memcpy_d2h(host, b.d, b.bytes); }

static void dguard_at(dbuf b, const char *what, int line)
{
    unsigned char g[GUARD_BYTES];
    dllm_cuda_synchronize();
    dllm_cuda_memcpy_d2h(g, (char *)b.d + b.bytes, GUARD_BYTES);
    for (int i = 0; i < GUARD_BYTES; i++)
        ck_assert_msg(g[i] == GUARD_BYTE, "line %d: guard byte %d after %s overwritten", line, i,
                      what);
}
#define dguard(b) dguard_at((b), #b, __LINE__)

static void dfree(dbuf *b)
{
    dllm_cuda_free(b->d);
    b->d = NULL;
}

static float *dl_f32(dbuf b)
{
    float *h = dllm_malloc(b.bytes ? b.bytes : 1);
    dget(h, b);
    return h;
}

/* ---- RMSNorm ------------------------------------------------------------------------- */

START_TEST(test_rmsnorm)
{
    const int N = 37, C = 300;
    const float eps = 1e-5f;
    float *x = host_normal((size_t)N * C, 1, 1.5), *w = host_normal(C, 2, 1.0);
    float *dout = host_normal((size_t)N * C, 3, 1.0);
    float *dx0 = host_normal((size_t)N * C, 4, 0.1), *dw0 = host_normal(C, 5, 0.1);
    float *out = dllm_malloc(sizeof(float) * N * C), *rstd = dllm_malloc(sizeof(float) * N);
    float *dx = dllm_malloc(sizeof(float) * N * C), *dw = dllm_malloc(sizeof(float) * C);
    memcpy(dx, dx0, sizeof(float) * N * C);
    memcpy(dw, dw0, sizeof(float) * C);
    op_rmsnorm_fwd(out, rstd, x, w, N, C, eps);
    op_rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C);

    dbuf d_x = dnew(sizeof(float) * N * C, x), d_w = dnew(sizeof(float) * C, w);
    dbuf d_out = dnew(sizeof(float) * N * C, NULL), d_rstd = dnew(sizeof(float) * N, NULL);
    dbuf d_dout = dnew(sizeof(float) * N * C, dout);
    dbuf d_dx = dnew(sizeof(float) * N * C, dx0), d_dw = dnew(sizeof(float) * C, dw0);
    dllm_cuda_rmsnorm_fwd(d_out.d, d_rstd.d, d_x.d, d_w.d, N, C, eps, NULL);
    dllm_cuda_rmsnorm_bwd(d_dx.d, d_dw.d, d_dout.d, d_x.d, d_w.d, d_rstd.d, N, C, NULL);
    float *g_out = dl_f32(d_out), *g_rstd = dl_f32(d_rstd), *g_dx = dl_f32(d_dx),
          *g_dw = dl_f32(d_dw);
    check_nmse(g_out, out, (size_t)N * C, 1e-11);
    check_nmse(g_rstd, rstd, N, 1e-11);
    check_nmse(g_dx, dx, (size_t)N * C, 1e-10);
    check_nmse(g_dw, dw, C, 1e-10);
    dguard(d_out);
    dguard(d_rstd);
    dguard(d_dx);
    dguard(d_dw);
    dbuf all[] = {d_x, d_w, d_out, d_rstd, d_dout, d_dx, d_dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(x), free(w), free(dout), free(dx0), free(dw0), free(out), free(rstd), free(dx),
        free(dw), free(g_out), free(g_rstd), free(g_dx), free(g_dw);
}
END_TEST

/* ---- RoPE ------------------------------------------------------------------------------ */

START_TEST(test_rope)
{
    const int N = 19, NH = 3, HD = 64, MAXP = 64;
    const size_t n = (size_t)N * NH * HD;
    op_rope_table t;
    op_rope_table_init(&t, MAXP, HD, 10000.0f);
    int32_t pos[19];
    dllm_rng r = dllm_rng_make(8, 0, 0, 0);
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)dllm_rng_below(&r, MAXP);
    float *x = host_normal(n, 9, 1.0), *dout = host_normal(n, 10, 1.0);
    float *dx = host_normal(n, 11, 0.3), *out = dllm_malloc(n * sizeof(float));
    dbuf d_dx = dnew(n * sizeof(float), dx);
    op_rope_fwd(out, x, pos, &t, N, NH, HD);
    op_rope_bwd(dx, dout, pos, &t, N, NH, HD);

    size_t tb = (size_t)MAXP * (HD / 2) * sizeof(float);
    dbuf d_cos = dnew(tb, t.cos), d_sin = dnew(tb, t.sin), d_pos = dnew(sizeof pos, pos);
    dbuf d_x = dnew(n * sizeof(float), x), d_out = dnew(n * sizeof(float), NULL);
    dbuf d_dout = dnew(n * sizeof(float), dout);
    dllm_cuda_rope_fwd(d_out.d, d_x.d, d_pos.d, d_cos.d, d_sin.d, MAXP, N, NH, HD, NULL);
    dllm_cuda_rope_bwd(d_dx.d, d_dout.d, d_pos.d, d_cos.d, d_sin.d, MAXP, N, NH, HD, NULL);
    float *g_out = dl_f32(d_out), *g_dx = dl_f32(d_dx);
    check_nmse(g_out, out, n, 1e-12);
    check_nmse(g_dx, dx, n, 1e-12);
    /* in place: dout replaced by its rotation */
    op_rope_bwd(dout, dout, pos, &t, N, NH, HD);
    dllm_cuda_rope_bwd(d_dout.d, d_dout.d, d_pos.d, d_cos.d, d_sin.d, MAXP, N, NH, HD, NULL);
    float *g_dout = dl_f32(d_dout);
    check_nmse(g_dout, dout, n, 1e-12);
    dguard(d_out);
    dguard(d_dx);
    dguard(d_dout);
    dbuf all[] = {d_cos, d_sin, d_pos, d_x, d_out, d_dout, d_dx};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    op_rope_table_free(&t);
    free(x), free(dout), free(dx), free(out), free(g_out), free(g_dx), free(g_dout);
}
END_TEST

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

START_TEST(test_attention)
{
    const att_case *c = &ATT_CASES[_i];
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
    dllm_cuda_attention_bwd(d_dq.d, d_dk.d, d_dv.d, d_dout.d, d_out.d, d_lse.d, d_q.d, d_k.d,
                            d_v.d, c->mask ? d_km.d : NULL, B, T, NH, NKV, HD, c->causal, NULL);
    float *g_out = dl_f32(d_out), *g_lse = dl_f32(d_lse), *g_dq = dl_f32(d_dq),
          *g_dk = dl_f32(d_dk), *g_dv = dl_f32(d_dv);
    check_nmse(g_out, out, nq, 1e-10);
    check_nmse(g_dq, dq, nq, 1e-9);
    check_nmse(g_dk, dk, nk, 1e-9);
    check_nmse(g_dv, dv, nk, 1e-9);
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
                ck_assert_msg(fabs(exp(S - L) - p[best]) < 1e-5, "P from lse %g vs %g",
                              exp(S - L), p[best]);
            }
    dguard(d_out);
    dguard(d_lse);
    dguard(d_dq);
    dguard(d_dk);
    dguard(d_dv);
    dbuf all[] = {d_q, d_k, d_v, d_dout, d_dq, d_dk, d_dv, d_km, d_out, d_lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(km), free(out),
        free(att), free(g_out), free(g_lse), free(g_dq), free(g_dk), free(g_dv);
}
END_TEST

/* ---- SwiGLU, embedding ----------------------------------------------------------------- */

START_TEST(test_swiglu)
{
    const size_t n = 10007;
    float *g = host_normal(n, 90, 3.0), *u = host_normal(n, 91, 1.0);
    float *dout = host_normal(n, 92, 1.0), *dg = host_normal(n, 93, 0.1);
    float *du = host_normal(n, 94, 0.1), *out = dllm_malloc(n * 4);
    dbuf d_g = dnew(n * 4, g), d_u = dnew(n * 4, u), d_dout = dnew(n * 4, dout);
    dbuf d_dg = dnew(n * 4, dg), d_du = dnew(n * 4, du), d_out = dnew(n * 4, NULL);
    op_swiglu_fwd(out, g, u, n);
    op_swiglu_bwd(dg, du, dout, g, u, n);
    dllm_cuda_swiglu_fwd(d_out.d, d_g.d, d_u.d, n, NULL);
    dllm_cuda_swiglu_bwd(d_dg.d, d_du.d, d_dout.d, d_g.d, d_u.d, n, NULL);
    float *g_out = dl_f32(d_out), *g_dg = dl_f32(d_dg), *g_du = dl_f32(d_du);
    check_nmse(g_out, out, n, 1e-12);
    check_nmse(g_dg, dg, n, 1e-12);
    check_nmse(g_du, du, n, 1e-12);
    dguard(d_out);
    dguard(d_dg);
    dguard(d_du);
    dbuf all[] = {d_g, d_u, d_dout, d_dg, d_du, d_out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(g), free(u), free(dout), free(dg), free(du), free(out), free(g_out), free(g_dg),
        free(g_du);
}
END_TEST

START_TEST(test_embedding)
{
    const int N = 200, C = 96, V = 50;
    int32_t ids[200];
    dllm_rng r = dllm_rng_make(100, 0, 0, 0);
    for (int i = 0; i < N; i++) /* few ids: many repeats for the atomics */
        ids[i] = (int32_t)dllm_rng_below(&r, 12) * 4;
    float *wte = host_normal((size_t)V * C, 101, 1.0), *dout = host_normal((size_t)N * C, 102, 1.0);
    float *dwte = host_normal((size_t)V * C, 103, 0.1), *out = dllm_malloc((size_t)N * C * 4);
    dbuf d_ids = dnew(sizeof ids, ids), d_wte = dnew((size_t)V * C * 4, wte);
    dbuf d_dout = dnew((size_t)N * C * 4, dout), d_dwte = dnew((size_t)V * C * 4, dwte);
    dbuf d_out = dnew((size_t)N * C * 4, NULL);
    op_embedding_fwd(out, ids, wte, N, C);
    op_embedding_bwd(dwte, dout, ids, N, C);
    dllm_cuda_embedding_fwd(d_out.d, d_ids.d, d_wte.d, N, C, V, NULL);
    dllm_cuda_embedding_bwd(d_dwte.d, d_dout.d, d_ids.d, N, C, V, NULL);
    float *g_out = dl_f32(d_out), *g_dwte = dl_f32(d_dwte);
    ck_assert_msg(memcmp(g_out, out, (size_t)N * C * 4) == 0, "embedding forward differs");
    check_nmse(g_dwte, dwte, (size_t)V * C, 1e-12);
    dguard(d_out);
    dguard(d_dwte);
    dbuf all[] = {d_ids, d_wte, d_dout, d_dwte, d_out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(wte), free(dout), free(dwte), free(out), free(g_out), free(g_dwte);
}
END_TEST

/* ---- cross-entropy ----------------------------------------------------------------------- */

START_TEST(test_xent)
{
    const int N = 13, V = 5003;
    const size_t nv = (size_t)N * V;
    float *logits = host_normal(nv, 110, 3.0), *dl = host_normal(nv, 111, 0.01);
    int32_t tg[13];
    float dlogp[13];
    dllm_rng r = dllm_rng_make(112, 0, 0, 0);
    for (int i = 0; i < N; i++) {
        tg[i] = (int32_t)dllm_rng_below(&r, V);
        dlogp[i] = i % 3 == 0 ? 0.0f : -(float)(0.5 + dllm_rng_uniform(&r)); /* weights */
    }
    tg[5] = -1; /* out of range: NaN on both sides */
    dlogp[5] = 0.0f;
    for (int j = 0; j < V; j += 7) /* masked logits, as the sampler's eos masking */
        logits[(size_t)4 * V + j] = -INFINITY;
    float logp[13], lse[13];
    op_xent_fwd(logp, lse, logits, tg, N, V);
    op_xent_bwd(dl, dlogp, logits, lse, tg, N, V);
    dbuf d_lg = dnew(nv * 4, logits), d_dl = dnew(nv * 4, NULL), d_tg = dnew(sizeof tg, tg);
    dbuf d_dlogp = dnew(sizeof dlogp, dlogp), d_logp = dnew(sizeof logp, NULL);
    dbuf d_lse = dnew(sizeof lse, NULL);
    float *dl0 = host_normal(nv, 111, 0.01);
    dllm_cuda_memcpy_h2d(d_dl.d, dl0, nv * 4);
    dllm_cuda_xent_fwd(d_logp.d, d_lse.d, d_lg.d, d_tg.d, N, V, NULL);
    dllm_cuda_xent_bwd(d_dl.d, d_dlogp.d, d_lg.d, d_lse.d, d_tg.d, N, V, NULL);
    float *g_logp = dl_f32(d_logp), *g_lse = dl_f32(d_lse), *g_dl = dl_f32(d_dl);
    ck_assert(isnan(g_logp[5]));
    check_nmse(g_logp, logp, N, 1e-11);
    check_nmse(g_lse, lse, N, 1e-11);
    check_nmse(g_dl, dl, nv, 1e-10);
    /* backward without the saved lse recomputes it */
    dllm_cuda_memcpy_h2d(d_dl.d, dl0, nv * 4);
    dllm_cuda_xent_bwd(d_dl.d, d_dlogp.d, d_lg.d, NULL, d_tg.d, N, V, NULL);
    free(g_dl);
    g_dl = dl_f32(d_dl);
    check_nmse(g_dl, dl, nv, 1e-10);
    dguard(d_dl);
    dguard(d_logp);
    dguard(d_lse);
    dbuf all[] = {d_lg, d_dl, d_tg, d_dlogp, d_logp, d_lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    free(logits), free(dl), free(dl0), free(g_logp), free(g_lse), free(g_dl);
}
END_TEST

/* ---- AdamW, norm, clip, bf16 --------------------------------------------------------------- */

START_TEST(test_adamw)
{
    const size_t n = 100003;
    const float b1s[2] = {0.9f, 0.3f}; /* both lerp branches (weight below / above 0.5) */
    for (int variant = 0; variant < 2; variant++) {
        float *p = host_normal(n, 120, 1.0), *m = host_normal(n, 121, 0.01);
        float *v = host_normal(n, 122, 0.01);
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] * v[i];
        dbuf d_p = dnew(n * 4, p), d_m = dnew(n * 4, m), d_v = dnew(n * 4, v);
        dbuf d_g = dnew(n * 4, NULL), d_pb = dnew(n * 2, NULL);
        for (int t = 1; t <= 3; t++) {
            float *g = host_normal(n, 130 + t, 0.05);
            dllm_cuda_memcpy_h2d(d_g.d, g, n * 4);
            op_adamw(p, g, m, v, n, t, 1e-3f, b1s[variant], 0.95f, 1e-8f, 0.1f);
            dllm_cuda_adamw(d_p.d, d_g.d, d_m.d, d_v.d, d_pb.d, n, t, 1e-3f, b1s[variant], 0.95f,
                            1e-8f, 0.1f, NULL);
            free(g);
        }
        float *g_p = dl_f32(d_p), *g_m = dl_f32(d_m), *g_v = dl_f32(d_v);
        uint16_t *g_pb = dllm_malloc(n * 2);
        dget(g_pb, d_pb);
        ck_assert_msg(memcmp(g_p, p, n * 4) == 0, "AdamW p not bit-identical (b1 %g)", b1s[variant]);
        ck_assert_msg(memcmp(g_m, m, n * 4) == 0, "AdamW m not bit-identical");
        ck_assert_msg(memcmp(g_v, v, n * 4) == 0, "AdamW v not bit-identical");
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(g_pb[i], op_f32_to_bf16(p[i]));
        dguard(d_p);
        dguard(d_m);
        dguard(d_v);
        dguard(d_pb);
        dbuf all[] = {d_p, d_m, d_v, d_g, d_pb};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            dfree(&all[i]);
        free(p), free(m), free(v), free(g_p), free(g_m), free(g_v), free(g_pb);
    }
}
END_TEST

START_TEST(test_grad_norm_clip)
{
    const size_t n1 = 300001, n2 = 777;
    float *g1 = host_normal(n1, 140, 0.01), *g2 = host_normal(n2, 141, 1.0);
    dbuf d_g1 = dnew(n1 * 4, g1), d_g2 = dnew(n2 * 4, g2), d_acc = dnew(sizeof(double), NULL);
    double s1 = op_grad_norm(g1, n1), s2 = op_grad_norm(g2, n2);
    double total = sqrt(s1 * s1 + s2 * s2);
    ck_assert(fabs(dllm_cuda_grad_norm(d_g1.d, n1, NULL) - s1) <= 1e-12 * s1);
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

/* FP8 linear vs op_fp8_linear_fwd: quantise weight and activations on the GPU in the
 * cuBLASLt scale layouts, multiply, compare with the CPU simulation (same codes and
 * scales, fp32 products of the dequantised values). */
static void fp8_linear_case(fp8_scaling ws, int N, int C, int OC, uint64_t seed)
{
    float *a = host_normal((size_t)N * C, seed, 1.0), *w = host_normal((size_t)OC * C, seed + 1, 0.05);
    for (size_t i = 0; i < (size_t)N * C; i += 131)
        a[i] *= 30.0f; /* outliers: groups get different scales */
    fp8_matrix wm = {0};
    dllm_err err = {0};
    ck_assert_int_eq(fp8_quantise_weight(&wm, w, OC, C, FP8_E4M3, ws, false, &err), 0);
    wm.act_scaling = ws == FP8_SCALE_BLOCK ? FP8_SCALE_GROUP : FP8_SCALE_TENSOR;
    float *ref = dllm_malloc((size_t)N * OC * 4);
    op_fp8_linear_fwd(ref, a, &wm, N, C, OC);

    long as_r, as_c, ws_r, ws_c;
    size_t nas, nws;
    int abr = 1, abc = 128, wbr = 128, wbc = 128;
    if (ws == FP8_SCALE_BLOCK) {
        dllm_cuda_fp8_gemm_scale_strides(N, C, &as_r, &as_c, &ws_r, &ws_c);
        nas = (size_t)N * ((C + 127) / 128);
        nws = dllm_cuda_fp8_weight_scale_count(OC, C);
    } else {
        as_r = as_c = ws_r = ws_c = 0;
        nas = nws = 1;
        abr = N, abc = C, wbr = OC, wbc = C;
    }
    dbuf d_a = dnew((size_t)N * C * 4, a), d_w = dnew((size_t)OC * C * 4, w);
    dbuf d_aq = dnew((size_t)N * C, NULL), d_wq = dnew((size_t)OC * C, NULL);
    dbuf d_as = dnew(nas * 4, NULL), d_ws = dnew(nws * 4, NULL);
    dbuf d_out = dnew((size_t)N * OC * 4, NULL), d_outb = dnew((size_t)N * OC * 2, NULL);
    dllm_cuda_fp8_quantise(d_wq.d, d_ws.d, ws_r, ws_c, d_w.d, OC, C, wbr, wbc, FP8_E4M3, false,
                           NULL);
    dllm_cuda_fp8_quantise(d_aq.d, d_as.d, as_r, as_c, d_a.d, N, C, abr, abc, FP8_E4M3, false,
                           NULL);
    /* the weight codes are the CPU's */
    uint8_t *gq = dllm_malloc((size_t)OC * C);
    dget(gq, d_wq);
    ck_assert_msg(memcmp(gq, wm.q, (size_t)OC * C) == 0, "weight codes differ");
    int rc = dllm_cuda_fp8_linear(d_out.d, false, d_aq.d, d_as.d, d_wq.d, d_ws.d, ws, N, C, OC,
                                  NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    rc = dllm_cuda_fp8_linear(d_outb.d, true, d_aq.d, d_as.d, d_wq.d, d_ws.d, ws, N, C, OC, NULL,
                              &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    float *g_out = dl_f32(d_out), *g_outb = dllm_malloc((size_t)N * OC * 4);
    uint16_t *ob = dllm_malloc((size_t)N * OC * 2);
    dget(ob, d_outb);
    op_bf16_to_f32_array(g_outb, ob, (size_t)N * OC);
    check_nmse(g_out, ref, (size_t)N * OC, 1e-9);
    check_nmse(g_outb, ref, (size_t)N * OC, 1e-5);
    dguard(d_aq);
    dguard(d_wq);
    dguard(d_as);
    dguard(d_ws);
    dguard(d_out);
    dguard(d_outb);
    dbuf all[] = {d_a, d_w, d_aq, d_wq, d_as, d_ws, d_out, d_outb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dfree(&all[i]);
    fp8_matrix_free(&wm);
    free(a), free(w), free(ref), free(gq), free(g_out), free(g_outb), free(ob);
}

START_TEST(test_fp8_linear)
{
    fp8_linear_case(FP8_SCALE_TENSOR, 64, 256, 192, 200);
    fp8_linear_case(FP8_SCALE_TENSOR, 40, 144, 48, 210);
    char why[256];
    if (!dllm_cuda_fp8_block_scaling_available(why, sizeof why)) {
        /* a build or device without block scaling uses tensor scaling (checked above) */
        printf("backend_ops: block-scaled FP8 GEMM not checked: %s\n", why);
        return;
    }
    fp8_linear_case(FP8_SCALE_BLOCK, 64, 256, 192, 220);
    fp8_linear_case(FP8_SCALE_BLOCK, 40, 384, 272, 230);  /* OC not a multiple of 128 */
    fp8_linear_case(FP8_SCALE_BLOCK, 129, 640, 256, 240); /* K blocks not a multiple of 4 */
}
END_TEST

/* ---- sampler x0 and the device RNG -------------------------------------------------------------- */

START_TEST(test_sampler_x0)
{
    const int n = 24, V = 1000;
    const uint64_t seed = 1234, gstep = 17;
    const double temps[] = {0.0, 0.7, 1.0, 1.5};
    float *lg = host_normal((size_t)n * V, 250, 2.0);
    int32_t seq[24], pos[24];
    for (int i = 0; i < n; i++) {
        seq[i] = i / 8; /* three sequences */
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
#endif /* HAVE_CUDA */

static Suite *backend_suite(bool gpu)
{
    Suite *s = suite_create("backend_ops");
    TCase *th = tcase_create("host");
    tcase_add_test(th, test_host_shared_headers);
    suite_add_tcase(s, th);
#ifdef HAVE_CUDA
    if (gpu) {
        TCase *tc = tcase_create("gpu");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_rmsnorm);
        tcase_add_test(tc, test_rope);
        tcase_add_loop_test(tc, test_attention, 0, (int)(sizeof ATT_CASES / sizeof *ATT_CASES));
        tcase_add_test(tc, test_swiglu);
        tcase_add_test(tc, test_embedding);
        tcase_add_test(tc, test_xent);
        tcase_add_test(tc, test_adamw);
        tcase_add_test(tc, test_grad_norm_clip);
        tcase_add_test(tc, test_bf16);
        tcase_add_loop_test(tc, test_fp8_quantise, 0,
                            (int)(sizeof QUANT_CASES / sizeof *QUANT_CASES));
        tcase_add_test(tc, test_gemm_bf16);
        tcase_add_test(tc, test_fp8_linear);
        tcase_add_test(tc, test_sampler_x0);
        suite_add_tcase(s, tc);
    }
#else
    (void)gpu;
#endif
    return s;
}

int main(void)
{
    char why[256] = "";
    bool gpu = dllm_cuda_device_count(why, sizeof why) > 0;
    if (gpu) {
        char desc[256];
        if (dllm_cuda_device_describe(0, desc, sizeof desc) == 0)
            printf("backend_ops: device 0: %s\n", desc);
    }
    SRunner *sr = srunner_create(backend_suite(gpu));
    /* no fork: a CUDA context does not survive into a forked child */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed)
        return EXIT_FAILURE;
    if (!gpu) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    return EXIT_SUCCESS;
}
