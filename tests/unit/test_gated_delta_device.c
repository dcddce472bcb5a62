/* test_gated_delta_device: the CUDA Gated DeltaNet kernels (kernels/cuda/gated_delta.cu)
 * against the CPU ops (kernels/cpu/gated_delta.c), both through the backend table's gd_*
 * entries, in the emulation build. Every entry
 * runs on fresh random inputs at several shapes (Hv = 2 Hk, Dk != Dv, T not a multiple of
 * the chunk nor of the backward's 64-token segment, several column blocks of the state, a
 * nonzero input state, K = 4 convolution with a state and T < K-1, partial RoPE with
 * rot < HD, the output gate of full attention), with NULL optional outputs and the in-place forms the CPU allows. Gradients
 * start from random values on both sides, so accumulation is checked too. Outputs are
 * compared by normalised MSE, sum (dev - cpu)^2 / sum cpu^2; a NaN fails (device memory
 * starts as NaN in the emulation, so an output never written shows).
 * DLLM_TEST_VERBOSE=1 prints each measured value. SKIP (77) outside the emulation build. */
#include "config.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_device.h"
#include "kernels/cuda_ops.h"
#include "kernels/backend.h"
#include "kernels/gated_delta.h"
#include "kernels/rng.h"

/* Both sides through the backend table's Gated DeltaNet entries (the CUDA backend's run
 * the kernels of kernels/cuda/gated_delta.cu, the CPU's the ops of kernels/cpu/). */
#define DEV_GD(op,  ...) dllm_backend_cuda()->ops->gd_##op(dllm_backend_cuda(), __VA_ARGS__)
#define CPU_GD(op,  ...) dllm_backend_cpu()->ops->gd_##op(dllm_backend_cpu(), __VA_ARGS__)

/* Tolerances (normalised MSE). */
/* The same fp32 operations in the same order as the CPU (elementwise ops, sequential sums
 * kept in the CPU's order): 0 under the emulation (no contraction); the margin is for a
 * GPU's fused multiply-adds, a few ulps each. */
#define TOL_SAME 1e-12
/* Row sums as a block tree instead of the CPU's sequential sum (l2norm, gated RMSNorm):
 * only the summation order differs. */
#define TOL_TREE 1e-11
/* The rule's backward: dq, dk summed over columns and the value heads of a group, dg over
 * the whole state, in a different order than the CPU, then carried back over T tokens. */
#define TOL_RULE_BWD 1e-10
/* Chunked form: the device runs the recurrent form, the CPU the chunked (a triangular
 * solve per chunk): the same function, different rounding. */
#define TOL_CHUNKED 1e-10

static bool verbose(void)
{
    const char *v = getenv("DLLM_TEST_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

static float *host_normal(dllm_rng *r, size_t n, double sd)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(sd * dllm_rng_normal(r));
    return h;
}

static float *dev_copy(const float *h, size_t n)
{
    float *d = dllm_cuda_malloc(sizeof(float) * (n ? n : 1));
    if (n)
        dllm_cuda_memcpy_h2d(d, h, sizeof(float) * n);
    return d;
}

/* Fails unless device buffer d (n floats) is within tol of want by normalised MSE. */
static void expect_close(const char *what, const char *shape, const float *d, const float *want,
                         size_t n, double tol)
{
    dllm_cuda_synchronize();
    float *got = malloc(sizeof(float) * (n ? n : 1));
    if (n)
        dllm_cuda_memcpy_d2h(got, d, sizeof(float) * n);
    double num = 0, den = 0;
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && bad == n)
            bad = i;
        double e = (double)got[i] - want[i];
        num += e * e;
        den += (double)want[i] * want[i];
    }
    double nmse = num / (den > 0 ? den : 1.0);
    if (verbose())
        printf("%-28s %-34s nmse %.3g (tol %.0e)\n", what, shape, nmse, tol);
    ck_assert_msg(bad == n, "%s %s: element %zu is %g (CPU %g)", what, shape, bad,
                  bad < n ? got[bad] : 0.0, bad < n ? want[bad] : 0.0);
    ck_assert_msg(nmse <= tol, "%s %s: normalised MSE %.3g > %.0e", what, shape, nmse, tol);
    free(got);
}

/* ---- causal depthwise conv1d + SiLU ------------------------------------------------------- */

static const struct {
    int B, T, D, K;
    bool state;
} CONV[] = {{2, 9, 5, 4, true}, {1, 2, 7, 4, true}, {2, 20, 33, 1, false}, {3, 17, 40, 3, false},
            {1, 70, 300, 4, true}};

START_TEST(test_conv)
{
    const int B = CONV[_i].B, T = CONV[_i].T, D = CONV[_i].D, K = CONV[_i].K;
    const bool has_state = CONV[_i].state;
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d D%d K%d%s", B, T, D, K, has_state ? " state" : "");
    dllm_rng r = dllm_rng_make(31, DLLM_RNG_INIT, (uint64_t)_i, 0);
    size_t nx = (size_t)B * T * D, ns = (size_t)B * (K - 1) * D, nw = (size_t)D * K;
    float *x = host_normal(&r, nx, 1.0), *w = host_normal(&r, nw, 0.5);
    float *st = has_state ? host_normal(&r, ns, 1.0) : NULL;
    float *out = malloc(sizeof(float) * nx), *pre = malloc(sizeof(float) * nx);
    float *st_out = malloc(sizeof(float) * (ns + 1));
    CPU_GD(conv_fwd, out, pre, st_out, x, st, w, B, T, D, K);

    float *dx = dev_copy(x, nx), *dw = dev_copy(w, nw), *dst = has_state ? dev_copy(st, ns) : NULL;
    float *dout = dllm_cuda_malloc(sizeof(float) * nx), *dpre = dllm_cuda_malloc(sizeof(float) * nx);
    float *dsto = dllm_cuda_malloc(sizeof(float) * (ns + 1));
    DEV_GD(conv_fwd, dout, dpre, dsto, dx, dst, dw, B, T, D, K);
    expect_close("conv_fwd out", shape, dout, out, nx, TOL_SAME);
    expect_close("conv_fwd pre", shape, dpre, pre, nx, TOL_SAME);
    expect_close("conv_fwd state_out", shape, dsto, st_out, ns, TOL_SAME);
    /* pre NULL (inference), and the state updated in place */
    dllm_cuda_memset(dout, 0xFF, sizeof(float) * nx);
    if (has_state) {
        DEV_GD(conv_fwd, dout, NULL, dst, dx, dst, dw, B, T, D, K);
        expect_close("conv_fwd state in place", shape, dst, st_out, ns, TOL_SAME);
        dllm_cuda_memcpy_h2d(dst, st, sizeof(float) * ns);
    } else {
        DEV_GD(conv_fwd, dout, NULL, NULL, dx, NULL, dw, B, T, D, K);
    }
    expect_close("conv_fwd out, pre NULL", shape, dout, out, nx, TOL_SAME);

    /* backward, accumulating onto random gradients */
    float *g = host_normal(&r, nx, 1.0);
    float *gx = host_normal(&r, nx, 1.0), *gw = host_normal(&r, nw, 1.0);
    float *gs = host_normal(&r, ns, 1.0);
    float *dg = dev_copy(g, nx), *dgx = dev_copy(gx, nx), *dgw = dev_copy(gw, nw);
    float *dgs = dev_copy(gs, ns), *dpre_h = dev_copy(pre, nx);
    DEV_GD(conv_bwd, dgx, dgw, has_state ? dgs : NULL, dg, dpre_h, dx, dst, dw, B, T, D, K);
    CPU_GD(conv_bwd, gx, gw, has_state ? gs : NULL, g, pre, x, st, w, B, T, D, K);
    expect_close("conv_bwd dx", shape, dgx, gx, nx, TOL_SAME);
    expect_close("conv_bwd dw", shape, dgw, gw, nw, TOL_SAME);
    expect_close("conv_bwd dstate", shape, dgs, gs, ns, TOL_SAME);
    /* dx alone; dw and dstate alone */
    DEV_GD(conv_bwd, dgx, NULL, NULL, dg, dpre_h, dx, dst, dw, B, T, D, K);
    CPU_GD(conv_bwd, gx, NULL, NULL, g, pre, x, st, w, B, T, D, K);
    expect_close("conv_bwd dx only", shape, dgx, gx, nx, TOL_SAME);
    DEV_GD(conv_bwd, NULL, dgw, dgs, dg, dpre_h, dx, dst, dw, B, T, D, K);
    CPU_GD(conv_bwd, NULL, gw, gs, g, pre, x, st, w, B, T, D, K);
    expect_close("conv_bwd dw, dx NULL", shape, dgw, gw, nw, TOL_SAME);
    expect_close("conv_bwd dstate, dx NULL", shape, dgs, gs, ns, TOL_SAME);
    expect_close("conv_bwd dx untouched", shape, dgx, gx, nx, TOL_SAME);

    dllm_cuda_free(dx), dllm_cuda_free(dw), dllm_cuda_free(dst), dllm_cuda_free(dout);
    dllm_cuda_free(dpre), dllm_cuda_free(dsto), dllm_cuda_free(dg), dllm_cuda_free(dgx);
    dllm_cuda_free(dgw), dllm_cuda_free(dgs), dllm_cuda_free(dpre_h);
    free(x), free(w), free(st), free(out), free(pre), free(st_out), free(g), free(gx), free(gw);
    free(gs);
}
END_TEST

/* ---- L2 normalisation -------------------------------------------------------------------------- */

static const struct {
    int rows, n;
} ROWS[] = {{7, 16}, {5, 130}, {33, 128}, {3, 300}};

START_TEST(test_l2norm)
{
    const int rows = ROWS[_i].rows, n = ROWS[_i].n;
    char shape[64];
    snprintf(shape, sizeof shape, "rows%d n%d", rows, n);
    dllm_rng r = dllm_rng_make(32, DLLM_RNG_INIT, (uint64_t)_i, 0);
    size_t N = (size_t)rows * n;
    float *x = host_normal(&r, N, 2.0), *out = malloc(sizeof(float) * N);
    float *rn = malloc(sizeof(float) * rows);
    CPU_GD(l2norm_fwd, out, rn, x, rows, n, 1e-6f);
    float *dx = dev_copy(x, N), *dout = dllm_cuda_malloc(sizeof(float) * N);
    float *drn = dllm_cuda_malloc(sizeof(float) * rows);
    DEV_GD(l2norm_fwd, dout, drn, dx, rows, n, 1e-6f);
    expect_close("l2norm_fwd out", shape, dout, out, N, TOL_TREE);
    expect_close("l2norm_fwd rnorm", shape, drn, rn, rows, TOL_TREE);
    DEV_GD(l2norm_fwd, dx, NULL, dx, rows, n,
           1e-6f); /* in place, no rnorm */ expect_close("l2norm_fwd in place", shape, dx, out, N,
           TOL_TREE);

    float *g = host_normal(&r, N, 1.0), *gx = host_normal(&r, N, 1.0);
    float *dg = dev_copy(g, N), *dgx = dev_copy(gx, N), *dout_h = dev_copy(out, N);
    float *drn_h = dev_copy(rn, rows);
    DEV_GD(l2norm_bwd, dgx, dg, dout_h, drn_h, rows, n);
    CPU_GD(l2norm_bwd, gx, g, out, rn, rows, n);
    expect_close("l2norm_bwd dx", shape, dgx, gx, N, TOL_TREE);

    dllm_cuda_free(dx), dllm_cuda_free(dout), dllm_cuda_free(drn), dllm_cuda_free(dg);
    dllm_cuda_free(dgx), dllm_cuda_free(dout_h), dllm_cuda_free(drn_h);
    free(x), free(out), free(rn), free(g), free(gx);
}
END_TEST

/* ---- gates ------------------------------------------------------------------------------------ */

static const struct {
    int N, Hv;
} GATES[] = {{37, 4}, {5, 48}, {300, 32}};

START_TEST(test_gates)
{
    const int N = GATES[_i].N, Hv = GATES[_i].Hv;
    char shape[64];
    snprintf(shape, sizeof shape, "N%d Hv%d", N, Hv);
    dllm_rng r = dllm_rng_make(33, DLLM_RNG_INIT, (uint64_t)_i, 0);
    size_t n = (size_t)N * Hv;
    float *a = host_normal(&r, n, 3.0), *b = host_normal(&r, n, 2.0);
    float *A_log = host_normal(&r, Hv, 1.0), *dtb = host_normal(&r, Hv, 1.0);
    a[0] = 30.0f; /* softplus's linear branch */
    float *g = malloc(sizeof(float) * n), *beta = malloc(sizeof(float) * n);
    CPU_GD(gates_fwd, g, beta, a, b, A_log, dtb, N, Hv);
    float *da = dev_copy(a, n), *db = dev_copy(b, n), *dA = dev_copy(A_log, Hv);
    float *ddt = dev_copy(dtb, Hv);
    float *dgo = dllm_cuda_malloc(sizeof(float) * n), *dbo = dllm_cuda_malloc(sizeof(float) * n);
    DEV_GD(gates_fwd, dgo, dbo, da, db, dA, ddt, N, Hv);
    expect_close("gates_fwd g", shape, dgo, g, n, TOL_SAME);
    expect_close("gates_fwd beta", shape, dbo, beta, n, TOL_SAME);

    float *gg = host_normal(&r, n, 1.0), *gb = host_normal(&r, n, 1.0);
    float *ga = host_normal(&r, n, 1.0), *gbb = host_normal(&r, n, 1.0);
    float *gA = host_normal(&r, Hv, 1.0), *gdt = host_normal(&r, Hv, 1.0);
    float *dgg = dev_copy(gg, n), *dgb = dev_copy(gb, n), *dga = dev_copy(ga, n);
    float *dgbb = dev_copy(gbb, n), *dgA = dev_copy(gA, Hv), *dgdt = dev_copy(gdt, Hv);
    DEV_GD(gates_bwd, dga, dgbb, dgA, dgdt, dgg, dgb, da, db, dA, ddt, N, Hv);
    CPU_GD(gates_bwd, ga, gbb, gA, gdt, gg, gb, a, b, A_log, dtb, N, Hv);
    expect_close("gates_bwd da", shape, dga, ga, n, TOL_SAME);
    expect_close("gates_bwd db", shape, dgbb, gbb, n, TOL_SAME);
    expect_close("gates_bwd dA_log", shape, dgA, gA, Hv, TOL_SAME);
    expect_close("gates_bwd ddt_bias", shape, dgdt, gdt, Hv, TOL_SAME);
    /* only dbeta given (dg NULL): da, dA_log, ddt_bias untouched; then only dA_log */
    DEV_GD(gates_bwd, dga, dgbb, dgA, dgdt, NULL, dgb, da, db, dA, ddt, N, Hv);
    CPU_GD(gates_bwd, ga, gbb, gA, gdt, NULL, gb, a, b, A_log, dtb, N, Hv);
    DEV_GD(gates_bwd, NULL, NULL, dgA, NULL, dgg, dgb, da, db, dA, ddt, N, Hv);
    CPU_GD(gates_bwd, NULL, NULL, gA, NULL, gg, gb, a, b, A_log, dtb, N, Hv);
    expect_close("gates_bwd da, dg NULL", shape, dga, ga, n, TOL_SAME);
    expect_close("gates_bwd db, dg NULL", shape, dgbb, gbb, n, TOL_SAME);
    expect_close("gates_bwd dA_log only", shape, dgA, gA, Hv, TOL_SAME);
    expect_close("gates_bwd ddt_bias kept", shape, dgdt, gdt, Hv, TOL_SAME);

    dllm_cuda_free(da), dllm_cuda_free(db), dllm_cuda_free(dA), dllm_cuda_free(ddt);
    dllm_cuda_free(dgo), dllm_cuda_free(dbo), dllm_cuda_free(dgg), dllm_cuda_free(dgb);
    dllm_cuda_free(dga), dllm_cuda_free(dgbb), dllm_cuda_free(dgA), dllm_cuda_free(dgdt);
    free(a), free(b), free(A_log), free(dtb), free(g), free(beta), free(gg), free(gb), free(ga);
    free(gbb), free(gA), free(gdt);
}
END_TEST

/* ---- the gated delta rule ------------------------------------------------------------------- */

static const struct {
    int B, T, Hk, Dk, Hv, Dv, chunk;
    bool state;
} RULE[] = {
    {1, 5, 1, 8, 1, 8, 4, false},
    {2, 37, 2, 16, 4, 12, 8, true},   /* Hv = 2 Hk, Dk != Dv, T % chunk != 0 */
    {1, 70, 1, 20, 2, 40, 16, true},  /* two backward segments, two column blocks */
    {1, 131, 2, 32, 2, 36, 64, true}, /* three segments, a partial column block */
    {1, 9, 1, 40, 3, 24, 0, false},   /* Hv = 3 Hk, Dk > Dv, the default chunk */
    {1, 3, 1, 128, 2, 128, 64, true}, /* Qwen3.5-9B's head sizes: four column blocks */
};

typedef struct {
    float *q, *k, *v, *g, *beta, *s0;
} rule_in;

static void rule_inputs(rule_in *in, dllm_rng *r, int B, int T, int Hk, int Dk, int Hv, int Dv,
                        bool state)
{
    size_t nq = (size_t)B * T * Hk * Dk, nv = (size_t)B * T * Hv * Dv, ng = (size_t)B * T * Hv;
    float *q = host_normal(r, nq, 1.0), *k = host_normal(r, nq, 1.0);
    in->q = malloc(sizeof(float) * nq), in->k = malloc(sizeof(float) * nq);
    CPU_GD(l2norm_fwd, in->q, NULL, q, B * T * Hk, Dk, 1e-6f);
    CPU_GD(l2norm_fwd, in->k, NULL, k, B * T * Hk, Dk, 1e-6f);
    free(q), free(k);
    in->v = host_normal(r, nv, 1.0);
    in->g = malloc(sizeof(float) * ng), in->beta = malloc(sizeof(float) * ng);
    for (size_t i = 0; i < ng; i++) {
        in->g[i] = (float)(-0.02 - 0.6 * dllm_rng_uniform(r)); /* decays exp(g) in (0.55, 0.98) */
        in->beta[i] = (float)(1.0 / (1.0 + exp(-dllm_rng_normal(r))));
    }
    in->s0 = state ? host_normal(r, (size_t)B * Hv * Dk * Dv, 0.5) : NULL;
}

static void rule_free(rule_in *in)
{
    free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->s0);
}

START_TEST(test_rule)
{
    const int B = RULE[_i].B, T = RULE[_i].T, Hk = RULE[_i].Hk, Dk = RULE[_i].Dk;
    const int Hv = RULE[_i].Hv, Dv = RULE[_i].Dv, chunk = RULE[_i].chunk;
    const bool state = RULE[_i].state;
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d Hk%d Dk%d Hv%d Dv%d c%d%s", B, T, Hk, Dk, Hv, Dv, chunk,
             state ? " s0" : "");
    dllm_rng r = dllm_rng_make(34, DLLM_RNG_INIT, (uint64_t)_i, 0);
    rule_in h;
    rule_inputs(&h, &r, B, T, Hk, Dk, Hv, Dv, state);
    size_t nq = (size_t)B * T * Hk * Dk, nv = (size_t)B * T * Hv * Dv, ng = (size_t)B * T * Hv;
    size_t nS = (size_t)B * Hv * Dk * Dv;
    float *o = malloc(sizeof(float) * nv), *S = malloc(sizeof(float) * nS);
    float *oc = malloc(sizeof(float) * nv), *Sc = malloc(sizeof(float) * nS);
    CPU_GD(rule_recurrent_fwd, o, S, h.q, h.k, h.v, h.g, h.beta, h.s0, B, T, Hk, Dk, Hv, Dv);
    CPU_GD(rule_chunked_fwd, oc, Sc, h.q, h.k, h.v, h.g, h.beta, h.s0, B, T, Hk, Dk, Hv, Dv, chunk);

    float *dq = dev_copy(h.q, nq), *dk = dev_copy(h.k, nq), *dv = dev_copy(h.v, nv);
    float *dgt = dev_copy(h.g, ng), *dbt = dev_copy(h.beta, ng);
    float *ds0 = state ? dev_copy(h.s0, nS) : NULL;
    float *dout = dllm_cuda_malloc(sizeof(float) * nv), *dS = dllm_cuda_malloc(sizeof(float) * nS);
    DEV_GD(rule_recurrent_fwd, dout, dS, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk, Hv, Dv);
    expect_close("rule_recurrent_fwd o", shape, dout, o, nv, TOL_SAME);
    expect_close("rule_recurrent_fwd state", shape, dS, S, nS, TOL_SAME);
    /* no final state wanted; then the state alone (o NULL) */
    dllm_cuda_memset(dout, 0xFF, sizeof(float) * nv);
    DEV_GD(rule_recurrent_fwd, dout, NULL, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk, Hv, Dv);
    expect_close("rule_recurrent_fwd o, no state", shape, dout, o, nv, TOL_SAME);
    dllm_cuda_memset(dS, 0xFF, sizeof(float) * nS);
    DEV_GD(rule_recurrent_fwd, NULL, dS, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk, Hv, Dv);
    expect_close("rule_recurrent_fwd state, o NULL", shape, dS, S, nS, TOL_SAME);
    /* chunked, against the CPU's chunked form */
    dllm_cuda_memset(dout, 0xFF, sizeof(float) * nv);
    dllm_cuda_memset(dS, 0xFF, sizeof(float) * nS);
    DEV_GD(rule_chunked_fwd, dout, dS, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk, Hv, Dv, chunk);
    expect_close("rule_chunked_fwd o", shape, dout, oc, nv, TOL_CHUNKED);
    expect_close("rule_chunked_fwd state", shape, dS, Sc, nS, TOL_CHUNKED);
    if (state) { /* the state carried in place: state_out == state_in */
        float *dS2 = dev_copy(h.s0, nS);
        DEV_GD(rule_chunked_fwd, dout, dS2, dq, dk, dv, dgt, dbt, dS2, B, T, Hk, Dk, Hv, Dv, chunk);
        expect_close("rule_chunked_fwd in place", shape, dS2, Sc, nS, TOL_CHUNKED);
        dllm_cuda_free(dS2);
    }

    /* backward, accumulating onto random gradients */
    float *go = host_normal(&r, nv, 1.0);
    float *gq = host_normal(&r, nq, 1.0), *gk = host_normal(&r, nq, 1.0);
    float *gv = host_normal(&r, nv, 1.0), *gg = host_normal(&r, ng, 1.0);
    float *gb = host_normal(&r, ng, 1.0), *gs = host_normal(&r, nS, 1.0);
    float *dgo = dev_copy(go, nv), *dgq = dev_copy(gq, nq), *dgk = dev_copy(gk, nq);
    float *dgv = dev_copy(gv, nv), *dgg = dev_copy(gg, ng), *dgb = dev_copy(gb, ng);
    float *dgs = dev_copy(gs, nS);
    ck_assert(dllm_cuda_gd_rule_bwd_scratch_floats(B, T, Hk, Dk, Hv, Dv) > 0); /* the table's */
    DEV_GD(rule_bwd, dgq, dgk, dgv, dgg, dgb, state ? dgs : NULL, dgo, dq, dk, dv, dgt, dbt, ds0, B,
           T, Hk, Dk, Hv, Dv);
    CPU_GD(rule_bwd, gq, gk, gv, gg, gb, state ? gs : NULL, go, h.q, h.k, h.v, h.g, h.beta, h.s0, B,
           T, Hk, Dk, Hv, Dv);
    expect_close("rule_bwd dq", shape, dgq, gq, nq, TOL_RULE_BWD);
    expect_close("rule_bwd dk", shape, dgk, gk, nq, TOL_RULE_BWD);
    expect_close("rule_bwd dv", shape, dgv, gv, nv, TOL_RULE_BWD);
    expect_close("rule_bwd dg", shape, dgg, gg, ng, TOL_RULE_BWD);
    expect_close("rule_bwd dbeta", shape, dgb, gb, ng, TOL_RULE_BWD);
    expect_close("rule_bwd dstate_in", shape, dgs, gs, nS, TOL_RULE_BWD);
    /* some gradients not wanted: the others unchanged, the given ones as the CPU's */
    DEV_GD(rule_bwd, NULL, dgk, NULL, dgg, NULL, NULL, dgo, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk,
           Hv, Dv);
    CPU_GD(rule_bwd, NULL, gk, NULL, gg, NULL, NULL, go, h.q, h.k, h.v, h.g, h.beta, h.s0, B, T, Hk,
           Dk, Hv, Dv);
    expect_close("rule_bwd dk, others NULL", shape, dgk, gk, nq, TOL_RULE_BWD);
    expect_close("rule_bwd dg, others NULL", shape, dgg, gg, ng, TOL_RULE_BWD);
    expect_close("rule_bwd dq untouched", shape, dgq, gq, nq, TOL_RULE_BWD);
    DEV_GD(rule_bwd, dgq, NULL, dgv, NULL, dgb, NULL, dgo, dq, dk, dv, dgt, dbt, ds0, B, T, Hk, Dk,
           Hv, Dv);
    CPU_GD(rule_bwd, gq, NULL, gv, NULL, gb, NULL, go, h.q, h.k, h.v, h.g, h.beta, h.s0, B, T, Hk,
           Dk, Hv, Dv);
    expect_close("rule_bwd dq, dk NULL", shape, dgq, gq, nq, TOL_RULE_BWD);
    expect_close("rule_bwd dv, dk NULL", shape, dgv, gv, nv, TOL_RULE_BWD);
    expect_close("rule_bwd dbeta, dk NULL", shape, dgb, gb, ng, TOL_RULE_BWD);

    dllm_cuda_free(dq), dllm_cuda_free(dk), dllm_cuda_free(dv), dllm_cuda_free(dgt);
    dllm_cuda_free(dbt), dllm_cuda_free(ds0), dllm_cuda_free(dout), dllm_cuda_free(dS);
    dllm_cuda_free(dgo), dllm_cuda_free(dgq), dllm_cuda_free(dgk), dllm_cuda_free(dgv);
    dllm_cuda_free(dgg), dllm_cuda_free(dgb), dllm_cuda_free(dgs);
    free(o), free(S), free(oc), free(Sc), free(go), free(gq), free(gk), free(gv), free(gg);
    free(gb), free(gs);
    rule_free(&h);
}
END_TEST

/* Run to run: the backward twice from the same inputs gives the same bits (no atomics). */
START_TEST(test_rule_bwd_reproducible)
{
    const int B = 2, T = 70, Hk = 1, Dk = 16, Hv = 2, Dv = 24;
    dllm_rng r = dllm_rng_make(35, DLLM_RNG_INIT, 0, 0);
    rule_in h;
    rule_inputs(&h, &r, B, T, Hk, Dk, Hv, Dv, true);
    size_t nq = (size_t)B * T * Hk * Dk, nv = (size_t)B * T * Hv * Dv, ng = (size_t)B * T * Hv;
    float *go = host_normal(&r, nv, 1.0);
    float *dq = dev_copy(h.q, nq), *dk = dev_copy(h.k, nq), *dv = dev_copy(h.v, nv);
    float *dgt = dev_copy(h.g, ng), *dbt = dev_copy(h.beta, ng);
    float *ds0 = dev_copy(h.s0, (size_t)B * Hv * Dk * Dv), *dgo = dev_copy(go, nv);
    float *res[2];
    for (int run = 0; run < 2; run++) {
        float *gq = dllm_cuda_malloc(sizeof(float) * nq), *gg = dllm_cuda_malloc(sizeof(float) * ng);
        dllm_cuda_memset(gq, 0, sizeof(float) * nq);
        dllm_cuda_memset(gg, 0, sizeof(float) * ng);
        DEV_GD(rule_bwd, gq, NULL, NULL, gg, NULL, NULL, dgo, dq, dk, dv, dgt, dbt, ds0, B, T, Hk,
               Dk, Hv, Dv);
        dllm_cuda_synchronize();
        res[run] = malloc(sizeof(float) * (nq + ng));
        dllm_cuda_memcpy_d2h(res[run], gq, sizeof(float) * nq);
        dllm_cuda_memcpy_d2h(res[run] + nq, gg, sizeof(float) * ng);
        dllm_cuda_free(gq), dllm_cuda_free(gg);
    }
    ck_assert_msg(memcmp(res[0], res[1], sizeof(float) * (nq + ng)) == 0,
                  "rule_bwd: two runs differ");
    free(res[0]), free(res[1]), free(go);
    dllm_cuda_free(dq), dllm_cuda_free(dk), dllm_cuda_free(dv), dllm_cuda_free(dgt);
    dllm_cuda_free(dbt), dllm_cuda_free(ds0), dllm_cuda_free(dgo);
    rule_free(&h);
}
END_TEST

/* ---- gated RMSNorm -------------------------------------------------------------------------- */

START_TEST(test_gated_rmsnorm)
{
    const int rows = ROWS[_i].rows, n = ROWS[_i].n;
    char shape[64];
    snprintf(shape, sizeof shape, "rows%d n%d", rows, n);
    dllm_rng r = dllm_rng_make(36, DLLM_RNG_INIT, (uint64_t)_i, 0);
    size_t N = (size_t)rows * n;
    float *x = host_normal(&r, N, 2.0), *z = host_normal(&r, N, 2.0), *w = host_normal(&r, n, 1.0);
    float *out = malloc(sizeof(float) * N), *rs = malloc(sizeof(float) * rows);
    CPU_GD(gated_rmsnorm_fwd, out, rs, x, z, w, rows, n, 1e-6f);
    float *dx = dev_copy(x, N), *dz = dev_copy(z, N), *dw = dev_copy(w, n);
    float *dout = dllm_cuda_malloc(sizeof(float) * N), *drs = dllm_cuda_malloc(sizeof(float) * rows);
    DEV_GD(gated_rmsnorm_fwd, dout, drs, dx, dz, dw, rows, n, 1e-6f);
    expect_close("gated_rmsnorm_fwd out", shape, dout, out, N, TOL_TREE);
    expect_close("gated_rmsnorm_fwd rstd", shape, drs, rs, rows, TOL_TREE);
    dllm_cuda_memset(dout, 0xFF, sizeof(float) * N);
    DEV_GD(gated_rmsnorm_fwd, dout, NULL, dx, dz, dw, rows, n, 1e-6f);
    expect_close("gated_rmsnorm_fwd, rstd NULL", shape, dout, out, N, TOL_TREE);

    float *g = host_normal(&r, N, 1.0), *gx = host_normal(&r, N, 1.0);
    float *gz = host_normal(&r, N, 1.0), *gw = host_normal(&r, n, 1.0);
    float *dg = dev_copy(g, N), *dgx = dev_copy(gx, N), *dgz = dev_copy(gz, N);
    float *dgw = dev_copy(gw, n), *drs_h = dev_copy(rs, rows);
    DEV_GD(gated_rmsnorm_bwd, dgx, dgz, dgw, dg, dx, dz, dw, drs_h, rows, n);
    CPU_GD(gated_rmsnorm_bwd, gx, gz, gw, g, x, z, w, rs, rows, n);
    expect_close("gated_rmsnorm_bwd dx", shape, dgx, gx, N, TOL_TREE);
    expect_close("gated_rmsnorm_bwd dz", shape, dgz, gz, N, TOL_SAME);
    expect_close("gated_rmsnorm_bwd dw", shape, dgw, gw, n, TOL_SAME);
    DEV_GD(gated_rmsnorm_bwd, NULL, dgz, NULL, dg, dx, dz, dw, drs_h, rows, n);
    CPU_GD(gated_rmsnorm_bwd, NULL, gz, NULL, g, x, z, w, rs, rows, n);
    DEV_GD(gated_rmsnorm_bwd, dgx, NULL, NULL, dg, dx, dz, dw, drs_h, rows, n);
    CPU_GD(gated_rmsnorm_bwd, gx, NULL, NULL, g, x, z, w, rs, rows, n);
    expect_close("gated_rmsnorm_bwd dz only", shape, dgz, gz, N, TOL_SAME);
    expect_close("gated_rmsnorm_bwd dx only", shape, dgx, gx, N, TOL_TREE);
    expect_close("gated_rmsnorm_bwd dw untouched", shape, dgw, gw, n, TOL_SAME);

    dllm_cuda_free(dx), dllm_cuda_free(dz), dllm_cuda_free(dw), dllm_cuda_free(dout);
    dllm_cuda_free(drs), dllm_cuda_free(dg), dllm_cuda_free(dgx), dllm_cuda_free(dgz);
    dllm_cuda_free(dgw), dllm_cuda_free(drs_h);
    free(x), free(z), free(w), free(out), free(rs), free(g), free(gx), free(gz), free(gw);
}
END_TEST

/* ---- partial RoPE ------------------------------------------------------------------------------ */

static const struct {
    int N, NH, HD, rot;
} ROPE[] = {{6, 3, 16, 8}, {5, 2, 12, 12}, {4, 2, 10, 0}, {7, 4, 256, 64}};

START_TEST(test_partial_rope)
{
    const int N = ROPE[_i].N, NH = ROPE[_i].NH, HD = ROPE[_i].HD, rot = ROPE[_i].rot;
    const float theta = 1e7f;
    char shape[64];
    snprintf(shape, sizeof shape, "N%d NH%d HD%d rot%d", N, NH, HD, rot);
    dllm_rng r = dllm_rng_make(37, DLLM_RNG_INIT, (uint64_t)_i, 0);
    size_t n = (size_t)N * NH * HD;
    float *x = host_normal(&r, n, 1.0), *out = malloc(sizeof(float) * n);
    int32_t *pos = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)dllm_rng_below(&r, 40000);
    CPU_GD(partial_rope_fwd, out, x, pos, N, NH, HD, rot, theta);
    int32_t *dpos = dllm_cuda_malloc(sizeof(int32_t) * N);
    dllm_cuda_memcpy_h2d(dpos, pos, sizeof(int32_t) * N);
    float *dx = dev_copy(x, n), *dout = dllm_cuda_malloc(sizeof(float) * n);
    DEV_GD(partial_rope_fwd, dout, dx, dpos, N, NH, HD, rot, theta);
    expect_close("partial_rope_fwd", shape, dout, out, n, TOL_SAME);
    DEV_GD(partial_rope_fwd, dx, dx, dpos, N, NH, HD, rot, theta);
    expect_close("partial_rope_fwd in place", shape, dx, out, n, TOL_SAME);

    float *g = host_normal(&r, n, 1.0), *gx = host_normal(&r, n, 1.0);
    float *dg = dev_copy(g, n), *dgx = dev_copy(gx, n);
    DEV_GD(partial_rope_bwd, dgx, dg, dpos, N, NH, HD, rot, theta);
    CPU_GD(partial_rope_bwd, gx, g, pos, N, NH, HD, rot, theta);
    expect_close("partial_rope_bwd dx", shape, dgx, gx, n, TOL_SAME);
    /* the backward inverts the forward: R^T R x = x, so dx = 0 + bwd(fwd(x)) is x */
    dllm_cuda_memset(dgx, 0, sizeof(float) * n);
    DEV_GD(partial_rope_bwd, dgx, dout, dpos, N, NH, HD, rot, theta);
    expect_close("partial_rope_bwd(fwd(x))", shape, dgx, x, n, 1e-12);

    dllm_cuda_free(dpos), dllm_cuda_free(dx), dllm_cuda_free(dout), dllm_cuda_free(dg);
    dllm_cuda_free(dgx);
    free(x), free(out), free(pos), free(g), free(gx);
}
END_TEST

/* ---- the output gate of full attention ---------------------------------------------------- */

START_TEST(test_out_gate)
{
    const size_t n = _i ? 70001 : 37;
    char shape[64];
    snprintf(shape, sizeof shape, "n%zu", n);
    dllm_rng r = dllm_rng_make(38, DLLM_RNG_INIT, (uint64_t)_i, 0);
    float *x = host_normal(&r, n, 2.0), *gate = host_normal(&r, n, 3.0);
    float *out = malloc(sizeof(float) * n);
    CPU_GD(out_gate_fwd, out, x, gate, n);
    float *dx = dev_copy(x, n), *dgate = dev_copy(gate, n), *dout = dllm_cuda_malloc(sizeof(float) * n);
    DEV_GD(out_gate_fwd, dout, dx, dgate, n);
    expect_close("out_gate_fwd", shape, dout, out, n, TOL_SAME);
    float *xi = dev_copy(x, n); /* in place, as the model runs it */
    DEV_GD(out_gate_fwd, xi, xi, dgate, n);
    expect_close("out_gate_fwd in place", shape, xi, out, n, TOL_SAME);

    float *g = host_normal(&r, n, 1.0), *gx = host_normal(&r, n, 1.0), *gg = host_normal(&r, n, 1.0);
    float *dg = dev_copy(g, n), *dgx = dev_copy(gx, n), *dgg = dev_copy(gg, n);
    DEV_GD(out_gate_bwd, dgx, dgg, dg, dx, dgate, n);
    CPU_GD(out_gate_bwd, gx, gg, g, x, gate, n);
    expect_close("out_gate_bwd dx", shape, dgx, gx, n, TOL_SAME);
    expect_close("out_gate_bwd dgate", shape, dgg, gg, n, TOL_SAME);
    DEV_GD(out_gate_bwd, NULL, dgg, dg, dx, dgate, n);
    CPU_GD(out_gate_bwd, NULL, gg, g, x, gate, n);
    DEV_GD(out_gate_bwd, dgx, NULL, dg, dx, dgate, n);
    CPU_GD(out_gate_bwd, gx, NULL, g, x, gate, n);
    expect_close("out_gate_bwd dgate only", shape, dgg, gg, n, TOL_SAME);
    expect_close("out_gate_bwd dx only", shape, dgx, gx, n, TOL_SAME);

    dllm_cuda_free(dx), dllm_cuda_free(dgate), dllm_cuda_free(dout), dllm_cuda_free(xi);
    dllm_cuda_free(dg), dllm_cuda_free(dgx), dllm_cuda_free(dgg);
    free(x), free(gate), free(out), free(g), free(gx), free(gg);
}
END_TEST

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif

Suite *tu_suite(tu_ctx *ctx)
{
#ifndef DLLM_CUDA_EMULATION
    return tu_skip(ctx, "the CUDA Gated DeltaNet kernels are checked in the emulation build "
                        "(--enable-cuda-emulation)");
#else
    (void)ctx;
    Suite *s = suite_create("gated_delta_device");
    TCase *tc = tcase_create("gated_delta");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_conv, 0, COUNT(CONV));
    tcase_add_loop_test(tc, test_l2norm, 0, COUNT(ROWS));
    tcase_add_loop_test(tc, test_gates, 0, COUNT(GATES));
    tcase_add_loop_test(tc, test_rule, 0, COUNT(RULE));
    tcase_add_test(tc, test_rule_bwd_reproducible);
    tcase_add_loop_test(tc, test_gated_rmsnorm, 0, COUNT(ROWS));
    tcase_add_loop_test(tc, test_partial_rope, 0, COUNT(ROPE));
    tcase_add_loop_test(tc, test_out_gate, 0, 2);
    suite_add_tcase(s, tc);
    return s;
#endif
}
