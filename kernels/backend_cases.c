/* backend_cases.c: the op cases of kernels/backend_cases.h: how each table entry's
 * buffers are made and how the entry is called (moved here from tests/unit/test_backend_ops.c so
 * that `dllm-rl selftest` runs the same cases at a model's shapes), the test's table, the
 * model-shape table and the comparison of two backends. */
#include "kernels/backend_cases.h"

#include "kernels/base.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host helpers ------------------------------------------------------------------------ */

void dllm_fill_normal(float *x, size_t n, uint64_t seed, double scale)
{
    dllm_rng r = dllm_rng_make(seed, 91, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * dllm_rng_normal(&r));
}

float *dllm_host_normal(size_t n, uint64_t seed, double scale)
{
    float *x = dllm_malloc((n ? n : 1) * sizeof(float));
    dllm_fill_normal(x, n, seed, scale);
    return x;
}

double dllm_nmse(const float *a, const float *ref, size_t n)
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

/* ---- the ops' cases ------------------------------------------------------------------------ */

static size_t kbytes(bcase_kind k) { return k == BK_F32 || k == BK_I32 ? 4 : 1; }

static int addb(bcase_buf *b, int *nb, const char *name, bcase_kind k, size_t n, void *init, double tol)
{
    if (*nb >= BCASE_MAXB) { /* a case's buffers past the runners' arrays */
        fprintf(stderr, "backend case: buffer %s past BCASE_MAXB (%d)\n", name, BCASE_MAXB);
        abort();
    }
    b[*nb] = (bcase_buf){name, k, n, init, tol, false};
    return (*nb)++;
}
static float *rnd(size_t n, uint64_t seed, double scale) { return dllm_host_normal(n, seed, scale); }
static void *dup_bytes(const void *p, size_t bytes)
{
    void *q = dllm_malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

/* gemm: d = {M, N, K, transA, transB}; C = 0.75 op(A) op(B) + 0.5 C */
static void mk_gemm(const bcase *c, bcase_buf *b, int *nb)
{
    size_t M = c->d[0], N = c->d[1], K = c->d[2];
    addb(b, nb, "A", BK_F32, M * K, rnd(M * K, 1, 1.0), -1);
    addb(b, nb, "B", BK_F32, K * N, rnd(K * N, 2, 1.0), -1);
    addb(b, nb, "C", BK_F32, M * N, rnd(M * N, 3, 1.0), c->tol);
}
static void run_gemm(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->gemm(be, c->d[3], c->d[4], c->d[0], c->d[1], c->d[2], 0.75f, p[0], p[1], 0.5f, p[2]);
}

/* gemm_bf16: as gemm, on bf16 operands (both backends round the same values: the products
 * are exact, only the fp32 summation order differs) */
static void run_gemm_bf16(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->gemm_bf16(be, c->d[3], c->d[4], c->d[0], c->d[1], c->d[2], 0.75f, p[0], p[1], 0.5f,
                       p[2]);
}

/* linear: d = {N, C, OC} */
static void mk_linear_fwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 4, 1.0), -1);
    addb(b, nb, "w", BK_F32, OC * C, rnd(OC * C, 5, 0.2), -1);
    addb(b, nb, "out", BK_F32, N * OC, NULL, c->tol);
}
static void run_linear_fwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->linear_fwd(be, p[2], p[0], p[1], c->d[0], c->d[1], c->d[2]);
}
static void mk_linear_bwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 6, 1.0), -1);
    addb(b, nb, "w", BK_F32, OC * C, rnd(OC * C, 7, 0.2), -1);
    addb(b, nb, "dout", BK_F32, N * OC, rnd(N * OC, 8, 1.0), -1);
    addb(b, nb, "dinp", BK_F32, N * C, rnd(N * C, 9, 0.1), c->tol);
    addb(b, nb, "dw", BK_F32, OC * C, rnd(OC * C, 10, 0.1), c->tol);
}
static void run_linear_bwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->linear_bwd(be, p[3], p[4], p[2], p[0], p[1], c->d[0], c->d[1], c->d[2]);
}

/* A weight's scales (SR, SC) also at the row stride a backend that pads them stores
 * (dllm_backend_fp8_scale_ld: block scales' rows padded to a multiple of 4); a case
 * passes the one its backend reads (scale_pick), so that no op allocates */
static float *scale_padded(const fp8_matrix *m, size_t *n)
{
    size_t sc = (size_t)m->scale_cols, ld = m->scaling == FP8_SCALE_BLOCK ? (sc + 3) / 4 * 4 : sc;
    *n = (size_t)m->scale_rows * ld;
    float *p = dllm_calloc(*n, sizeof *p);
    for (int r = 0; r < m->scale_rows; r++)
        memcpy(p + r * ld, m->scale + r * sc, sc * sizeof *p);
    return p;
}
static void scale_pick(dllm_backend *be, fp8_matrix *w, float *compact, float *padded)
{
    size_t ld = dllm_backend_fp8_scale_ld(be, w->scaling, w->rows, w->cols);
    w->scale_ld = (int)ld;
    w->scale = ld == (size_t)w->scale_cols ? compact : padded;
}

/* fp8_linear_fwd: d = {N, C, OC, weight scaling, activation scaling}; E4M3 */
static void mk_fp8_linear(const bcase *c, bcase_buf *b, int *nb)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    float *w = rnd((size_t)OC * C, 11, 0.05), *a = rnd((size_t)N * C, 12, 1.0);
    for (size_t i = 0; i < (size_t)N * C; i += 131)
        a[i] *= 30.0f; /* outliers: groups get different scales */
    fp8_matrix m = {0};
    dllm_err err;
    if (fp8_quantise_weight(&m, w, OC, C, FP8_E4M3, (fp8_scaling)c->d[3], false, &err)) {
        fprintf(stderr, "backend case %s %s: %s\n", c->op, c->shape, err.msg);
        exit(1); /* random normal weights always quantise: a defect, not input */
    }
    size_t ns = (size_t)m.scale_rows * m.scale_cols;
    addb(b, nb, "w.q", BK_U8, (size_t)OC * C, dup_bytes(m.q, (size_t)OC * C), -1);
    addb(b, nb, "w.scale", BK_F32, ns, dup_bytes(m.scale, ns * 4), -1);
    addb(b, nb, "inp", BK_F32, (size_t)N * C, a, -1);
    addb(b, nb, "out", BK_F32, (size_t)N * OC, NULL, c->tol);
    size_t np;
    float *pad = scale_padded(&m, &np);
    addb(b, nb, "w.scale padded", BK_F32, np, pad, -1);
    fp8_matrix_free(&m);
    free(w);
}
static void run_fp8_linear(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    fp8_matrix w = {0};
    w.rows = OC, w.cols = C, w.format = FP8_E4M3, w.scaling = (fp8_scaling)c->d[3];
    fp8_block_shape(w.scaling, OC, C, &w.block_rows, &w.block_cols);
    w.scale_rows = (OC + w.block_rows - 1) / w.block_rows;
    w.scale_cols = (C + w.block_cols - 1) / w.block_cols;
    w.q = p[0], w.act_scaling = (fp8_scaling)c->d[4];
    scale_pick(be, &w, p[1], p[4]);
    be->ops->fp8_linear_fwd(be, p[3], p[2], &w, N, C, OC);
    be->ops->weight_cache_free(be, &w, NULL);
}

/* fp8_act: an FP8 linear whose input is a producer's output, d = {N, C, OC, producer}
 * (0 RMSNorm, 1 SwiGLU), weights 128x128 blocks, activations 1x128 groups, E4M3. A
 * backend with the fused entries (act_quant_prepare ... linear_quant_act_fwd) lets the
 * producer write the codes; the CPU reference runs the producer, then fp8_linear_fwd
 * quantises its input. The producer's fp32 output and the product are compared. */
static void mk_fp8_act(const bcase *c, bcase_buf *b, int *nb)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    bool sw = c->d[3];
    float *w = rnd((size_t)OC * C, 41, 0.05), *x = rnd((size_t)N * C, 42, sw ? 3.0 : 1.5);
    for (size_t i = 0; i < (size_t)N * C; i += 131)
        x[i] *= 30.0f; /* outliers: groups get different scales */
    fp8_matrix m = {0};
    dllm_err err;
    if (fp8_quantise_weight(&m, w, OC, C, FP8_E4M3, FP8_SCALE_BLOCK, false, &err)) {
        fprintf(stderr, "backend case %s %s: %s\n", c->op, c->shape, err.msg);
        exit(1);
    }
    size_t ns = (size_t)m.scale_rows * m.scale_cols;
    addb(b, nb, "w.q", BK_U8, (size_t)OC * C, dup_bytes(m.q, (size_t)OC * C), -1);
    addb(b, nb, "w.scale", BK_F32, ns, dup_bytes(m.scale, ns * 4), -1);
    addb(b, nb, sw ? "gate" : "inp", BK_F32, (size_t)N * C, x, -1);
    if (sw)
        addb(b, nb, "up", BK_F32, (size_t)N * C, rnd((size_t)N * C, 43, 1.0), -1);
    else
        addb(b, nb, "norm.w", BK_F32, (size_t)C, rnd((size_t)C, 44, 1.0), -1);
    addb(b, nb, sw ? "swiglu" : "rmsnorm", BK_F32, (size_t)N * C, NULL, 1e-10);
    addb(b, nb, "out", BK_F32, (size_t)N * OC, NULL, c->tol);
    addb(b, nb, "rstd", BK_F32, (size_t)N, NULL, sw ? -1 : 1e-10);
    size_t np;
    float *pad = scale_padded(&m, &np);
    addb(b, nb, "w.scale padded", BK_F32, np, pad, -1);
    fp8_matrix_free(&m);
    free(w);
}
/* The producer and the linear of fp8_act's case; with res, linear_res_fwd adding it. */
static void fp8_act_at(dllm_backend *be, const bcase *c, void **p, const float *res)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    bool sw = c->d[3];
    fp8_matrix w = {0};
    w.rows = OC, w.cols = C, w.format = FP8_E4M3, w.scaling = FP8_SCALE_BLOCK;
    fp8_block_shape(w.scaling, OC, C, &w.block_rows, &w.block_cols);
    w.scale_rows = (OC + w.block_rows - 1) / w.block_rows;
    w.scale_cols = (C + w.block_cols - 1) / w.block_cols;
    w.q = p[0], w.act_scaling = FP8_SCALE_GROUP;
    scale_pick(be, &w, p[1], p[7]);
    const dllm_lin_weight ws[1] = {{.f8 = &w}};
    dllm_qact qa;
    if (dllm_backend_supports(be, DLLM_OP_FUSED_ACT) &&
        be->ops->act_quant_prepare(be, &qa, N, C, ws, 1)) {
        if (sw)
            be->ops->swiglu_quant_fwd(be, p[4], &qa, p[2], p[3], N, C);
        else
            be->ops->rmsnorm_quant_fwd(be, p[4], p[6], &qa, p[2], p[3], N, C, 1e-5f);
        if (res)
            be->ops->linear_res_fwd(be, p[5], res, NULL, &qa, &ws[0], N, C, OC);
        else
            be->ops->linear_quant_act_fwd(be, p[5], &qa, &ws[0], N, C, OC);
    } else {
        if (sw)
            be->ops->swiglu_fwd(be, p[4], p[2], p[3], (size_t)N * C);
        else
            be->ops->rmsnorm_fwd(be, p[4], p[6], p[2], p[3], N, C, 1e-5f);
        if (res)
            be->ops->linear_res_fwd(be, p[5], res, p[4], NULL, &ws[0], N, C, OC);
        else
            be->ops->fp8_linear_fwd(be, p[5], p[4], &w, N, C, OC);
    }
    be->ops->weight_cache_free(be, &w, NULL);
}
static void run_fp8_act(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    fp8_act_at(be, c, p, NULL);
}

/* linear_res_fwd over an FP8 weight: fp8_linear_fwd's case (d as there) plus the residual
 * res (N, OC), out = the product + res */
static void mk_fp8_linear_res(const bcase *c, bcase_buf *b, int *nb)
{
    mk_fp8_linear(c, b, nb);
    size_t n = (size_t)c->d[0] * c->d[2];
    addb(b, nb, "res", BK_F32, n, rnd(n, 45, 2.0), -1);
}
static void run_fp8_linear_res(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    fp8_matrix w = {0};
    w.rows = OC, w.cols = C, w.format = FP8_E4M3, w.scaling = (fp8_scaling)c->d[3];
    fp8_block_shape(w.scaling, OC, C, &w.block_rows, &w.block_cols);
    w.scale_rows = (OC + w.block_rows - 1) / w.block_rows;
    w.scale_cols = (C + w.block_cols - 1) / w.block_cols;
    w.q = p[0], w.act_scaling = (fp8_scaling)c->d[4];
    scale_pick(be, &w, p[1], p[4]);
    const dllm_lin_weight lw = {.f8 = &w};
    be->ops->linear_res_fwd(be, p[3], p[5], p[2], NULL, &lw, N, C, OC);
    be->ops->weight_cache_free(be, &w, NULL);
}

/* linear_res_fwd after a producer: fp8_act's case plus the residual res (N, OC), the linear
 * fed the producer's codes where the backend has the fused entries (the MLP's down
 * projection of the rollout), else its fp32 output */
static void mk_fp8_act_res(const bcase *c, bcase_buf *b, int *nb)
{
    mk_fp8_act(c, b, nb);
    size_t n = (size_t)c->d[0] * c->d[2];
    addb(b, nb, "res", BK_F32, n, rnd(n, 46, 2.0), -1);
}
static void run_fp8_act_res(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    fp8_act_at(be, c, p, p[8]);
}

/* bf16_linear_fwd: d = {N, C, OC}; the weight packed as bf16 bits */
static void mk_bf16_linear(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    float *w = rnd(OC * C, 61, 0.2);
    uint16_t *wb = dllm_malloc(OC * C * 2);
    op_f32_to_bf16_array(wb, w, OC * C);
    free(w);
    addb(b, nb, "w", BK_U8, OC * C * 2, wb, -1);
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 62, 1.0), -1);
    addb(b, nb, "out", BK_F32, N * OC, NULL, c->tol);
}
static void run_bf16_linear(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    be->ops->bf16_linear_fwd(be, p[2], p[1], &w, c->d[0], c->d[1], c->d[2]);
    be->ops->weight_cache_free(be, NULL, &w);
}

/* pack_weight, then the format's linear: d = {N, C, OC, format, from_host} (format 0
 * bf16, 1 FP8 E4M3 in 128x128 blocks with 1x128 activation groups, the fast product, 2
 * INT8 per channel); from_host: src NULL, the weight handed from the host only (uploaded
 * into the stage where the backend needs it there). A backend's runs of one case pack
 * into the same structs, as a rollout copy is packed again after every update: the
 * first allocates, the next reuse (the harness's measured run allocates nothing), and
 * the second frees them by free_weight (the CPU's first: it runs once). */
typedef struct {
    const bcase *c;
    dllm_backend *be;
    int runs;
    bf16_matrix b16;
    fp8_matrix f8;
    int8_matrix i8;
} pack_slot;
static pack_slot pack_slots[8];

static void mk_pack_weight(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    addb(b, nb, "w", BK_F32, OC * C, rnd(OC * C, 71, 0.2), -1);
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 72, 1.0), -1);
    addb(b, nb, "out", BK_F32, N * OC, NULL, c->tol);
    addb(b, nb, "stage", BK_F32, OC * C, NULL, -1);
}
static void run_pack_weight(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    pack_slot *sl = NULL;
    for (size_t k = 0; k < sizeof pack_slots / sizeof *pack_slots && !sl; k++)
        if ((pack_slots[k].c == c && pack_slots[k].be == be) || !pack_slots[k].c)
            sl = &pack_slots[k];
    if (!sl) {
        fprintf(stderr, "backend case %s %s: no free slot\n", c->op, c->shape);
        exit(1); /* more pack_weight cases than slots: a defect of this file */
    }
    sl->c = c, sl->be = be;
    float *host = rnd((size_t)OC * C, 71, 0.2); /* p[0]'s values, on the host */
    dllm_lin_weight w = {0};
    if (c->d[3] == 0)
        w.b16 = &sl->b16;
    else if (c->d[3] == 1)
        w.f8 = &sl->f8;
    else
        w.i8 = &sl->i8;
    dllm_pack_args a = {.f8_format = FP8_E4M3, .f8_scaling = FP8_SCALE_BLOCK,
                        .f8_act = FP8_SCALE_GROUP, .f8_fast = true,
                        .i8_scaling = INT8_SCALE_CHANNEL};
    dllm_err err;
    if (be->ops->pack_weight(be, w, c->d[4] ? NULL : p[0], host, p[3], OC, C, &a, &err)) {
        fprintf(stderr, "backend case %s %s: %s\n", c->op, c->shape, err.msg);
        exit(1); /* the formats every backend packs: a defect, not input */
    }
    if (w.b16)
        be->ops->bf16_linear_fwd(be, p[2], p[1], w.b16, N, C, OC);
    else if (w.f8)
        be->ops->fp8_linear_fwd(be, p[2], p[1], w.f8, N, C, OC);
    else
        be->ops->int8_linear_fwd(be, p[2], p[1], w.i8, N, C, OC);
    if (be->kind == DLLM_BACKEND_CPU || ++sl->runs == 2) {
        be->ops->weight_cache_free(be, w.f8, w.b16);
        be->ops->free_weight(be, w);
        memset(sl, 0, sizeof *sl);
    }
    free(host);
}

/* linear_res_fwd over a bf16 weight: bf16_linear_fwd's case plus the residual res (N, OC) */
static void mk_bf16_linear_res(const bcase *c, bcase_buf *b, int *nb)
{
    mk_bf16_linear(c, b, nb);
    size_t n = (size_t)c->d[0] * c->d[2];
    addb(b, nb, "res", BK_F32, n, rnd(n, 66, 2.0), -1);
}
static void run_bf16_linear_res(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    const dllm_lin_weight lw = {.b16 = &w};
    be->ops->linear_res_fwd(be, p[2], p[3], p[1], NULL, &lw, c->d[0], c->d[1], c->d[2]);
    be->ops->weight_cache_free(be, NULL, &w);
}

/* bf16_linear_bwd_x: d = {N, C, OC}; dinp accumulates onto random values */
static void mk_bf16_linear_bwd_x(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    float *w = rnd(OC * C, 63, 0.2);
    uint16_t *wb = dllm_malloc(OC * C * 2);
    op_f32_to_bf16_array(wb, w, OC * C);
    free(w);
    addb(b, nb, "w", BK_U8, OC * C * 2, wb, -1);
    addb(b, nb, "dout", BK_F32, N * OC, rnd(N * OC, 64, 1.0), -1);
    addb(b, nb, "dinp", BK_F32, N * C, rnd(N * C, 65, 0.1), c->tol);
}
static void run_bf16_linear_bwd_x(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    be->ops->bf16_linear_bwd_x(be, p[2], p[1], &w, c->d[0], c->d[1], c->d[2]);
    be->ops->weight_cache_free(be, NULL, &w);
}

/* bf16_lora_fwd: d = {N, C, OC, r, with res}; LoRA scale 0.5 */
static void mk_bf16_lora_fwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2], r = c->d[3];
    mk_bf16_linear(c, b, nb); /* w, inp, out */
    addb(b, nb, "A", BK_F32, r * C, rnd(r * C, 67, 0.2), -1);
    addb(b, nb, "B", BK_F32, OC * r, rnd(OC * r, 68, 0.2), -1);
    addb(b, nb, "xa", BK_F32, N * r, NULL, c->tol);
    addb(b, nb, "res", BK_F32, N * OC, rnd(N * OC, 75, 2.0), -1);
}
static void run_bf16_lora_fwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    be->ops->bf16_lora_fwd(be, p[2], p[5], p[1], NULL, c->d[4] ? p[6] : NULL, &w, p[3], p[4],
                           0.5f, c->d[0], c->d[1], c->d[2], c->d[3]);
    be->ops->weight_cache_free(be, NULL, &w);
}

/* bf16_lora_bwd: d = {N, C, OC, r}; dinp, dA, dB accumulate onto random values; dinp
 * carries bf16_linear_bwd_x's rounding of dout (its tolerance, the case's), the adapter's
 * products multiply the same bf16 operands on both backends (1e-9: only a bf16 rounding
 * of dxa that its fp32 summation order tips differs) */
static void mk_bf16_lora_bwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2], r = c->d[3];
    mk_bf16_linear_bwd_x(c, b, nb); /* w, dout, dinp */
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 69, 1.0), -1);
    addb(b, nb, "xa", BK_F32, N * r, rnd(N * r, 70, 1.0), -1);
    addb(b, nb, "A", BK_F32, r * C, rnd(r * C, 71, 0.2), -1);
    addb(b, nb, "B", BK_F32, OC * r, rnd(OC * r, 72, 0.2), -1);
    addb(b, nb, "dA", BK_F32, r * C, rnd(r * C, 73, 0.1), 1e-9);
    addb(b, nb, "dB", BK_F32, OC * r, rnd(OC * r, 74, 0.1), 1e-9);
    addb(b, nb, "dxa", BK_F32, N * r, NULL, 1e-9);
}
static void run_bf16_lora_bwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    (void)ret;
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    be->ops->bf16_lora_bwd(be, p[2], p[7], p[8], p[9], p[1], p[3], p[4], &w, p[5], p[6], 0.5f,
                           c->d[0], c->d[1], c->d[2], c->d[3]);
    be->ops->weight_cache_free(be, NULL, &w);
}

/* to_bf16: d = {n} */
static void mk_to_bf16(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = (size_t)c->d[0];
    float *x = rnd(n, 63, 3.0);
    x[0] = NAN, x[1] = INFINITY, x[2] = -0.0f, x[3] = 1e-40f; /* the special values */
    addb(b, nb, "inp", BK_F32, n, x, -1);
    addb(b, nb, "out", BK_U8, n * 2, NULL, 0);
}
static void run_to_bf16(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->to_bf16(be, p[1], p[0], (size_t)c->d[0]);
}

/* fp8_quantise: d = {R, C, scaling, format, pow2} */
static void mk_fp8_quantise(const bcase *c, bcase_buf *b, int *nb)
{
    int R = c->d[0], C = c->d[1], br, bc;
    fp8_block_shape((fp8_scaling)c->d[2], R, C, &br, &bc);
    size_t ns = (size_t)((R + br - 1) / br) * ((C + bc - 1) / bc);
    float *x = rnd((size_t)R * C, 64, 0.05);
    for (size_t i = 0; i < (size_t)R * C; i += 97)
        x[i] *= 40.0f; /* outliers: blocks get different scales */
    addb(b, nb, "x", BK_F32, (size_t)R * C, x, -1);
    addb(b, nb, "q", BK_U8, (size_t)R * C, NULL, 0);
    addb(b, nb, "scale", BK_F32, ns, NULL, 0);
    /* where a backend pads the rows of block scales (dllm_backend_fp8_scale_ld) */
    size_t sc = (size_t)(C + bc - 1) / bc;
    size_t ld = c->d[2] == FP8_SCALE_BLOCK ? (sc + 3) / 4 * 4 : sc;
    addb(b, nb, "scale padded", BK_F32, ns / sc * ld, NULL, -1);
}
/* the scales compared in the CPU layout: a backend that pads their rows
 * (dllm_backend_fp8_scale_ld) writes them to its own buffer, copied out row by row */
static void run_fp8_quantise(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    int R = c->d[0], C = c->d[1], br, bc;
    fp8_scaling s = (fp8_scaling)c->d[2];
    fp8_block_shape(s, R, C, &br, &bc);
    size_t sr = (size_t)(R + br - 1) / br, sc = (size_t)(C + bc - 1) / bc;
    size_t ld = dllm_backend_fp8_scale_ld(be, s, R, C);
    float *scale = ld == sc ? p[2] : p[3];
    be->ops->fp8_quantise(be, p[1], scale, p[0], R, C, (fp8_format)c->d[3], s, c->d[4]);
    for (size_t r = 0; scale != p[2] && r < sr; r++)
        be->ops->copy(be, (float *)p[2] + r * sc, scale + r * ld, sc * sizeof(float));
}

/* rmsnorm: d = {N, C} */
static void mk_rmsnorm_fwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1];
    addb(b, nb, "inp", BK_F32, N * C, rnd(N * C, 13, 1.5), -1);
    addb(b, nb, "w", BK_F32, C, rnd(C, 14, 1.0), -1);
    addb(b, nb, "out", BK_F32, N * C, NULL, c->tol);
    addb(b, nb, "rstd", BK_F32, N, NULL, c->tol);
}
static void run_rmsnorm_fwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->rmsnorm_fwd(be, p[2], p[3], p[0], p[1], c->d[0], c->d[1], 1e-5f);
}
static void mk_rmsnorm_bwd(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1];
    float *x = rnd(N * C, 15, 1.5), *w = rnd(C, 16, 1.0), *rstd = dllm_malloc(N * 4);
    float *out = dllm_malloc(N * C * 4);
    op_rmsnorm_fwd(out, rstd, x, w, (int)N, (int)C, 1e-5f);
    free(out);
    addb(b, nb, "inp", BK_F32, N * C, x, -1);
    addb(b, nb, "w", BK_F32, C, w, -1);
    addb(b, nb, "rstd", BK_F32, N, rstd, -1);
    addb(b, nb, "dout", BK_F32, N * C, rnd(N * C, 17, 1.0), -1);
    addb(b, nb, "dinp", BK_F32, N * C, rnd(N * C, 18, 0.1), c->tol);
    addb(b, nb, "dw", BK_F32, C, rnd(C, 19, 0.1), c->tol);
}
static void run_rmsnorm_bwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->rmsnorm_bwd(be, p[4], p[5], p[3], p[0], p[1], p[2], c->d[0], c->d[1]);
}

/* rope: d = {N, NH, HD, max_pos, in place (bwd)} */
static void mk_rope(const bcase *c, bcase_buf *b, int *nb)
{
    int N = c->d[0], NH = c->d[1], HD = c->d[2], MAXP = c->d[3];
    size_t n = (size_t)N * NH * HD, tn = (size_t)MAXP * (HD / 2);
    op_rope_table t;
    op_rope_table_init(&t, MAXP, HD, 10000.0f);
    int32_t *pos = dllm_malloc((size_t)N * 4);
    dllm_rng r = dllm_rng_make(20, 0, 0, 0);
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)dllm_rng_below(&r, (uint64_t)MAXP);
    addb(b, nb, "pos", BK_I32, (size_t)N, pos, -1);
    addb(b, nb, "cos", BK_F32, tn, dup_bytes(t.cos, tn * 4), -1);
    addb(b, nb, "sin", BK_F32, tn, dup_bytes(t.sin, tn * 4), -1);
    addb(b, nb, "inp", BK_F32, n, rnd(n, 21, 1.0), c->d[4] ? c->tol : -1); /* in place: out */
    addb(b, nb, "out", BK_F32, n, rnd(n, 22, 0.3), c->tol);
    op_rope_table_free(&t);
}
static op_rope_table rope_of(const bcase *c, void **p)
{
    op_rope_table t = {c->d[3], c->d[2] / 2, p[1], p[2]};
    return t;
}
static void run_rope_fwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    op_rope_table t = rope_of(c, p);
    be->ops->rope_fwd(be, p[4], p[3], p[0], &t, c->d[0], c->d[1], c->d[2]);
}
static void run_rope_bwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    op_rope_table t = rope_of(c, p);
    be->ops->rope_bwd(be, c->d[4] ? p[3] : p[4], p[3], p[0], &t, c->d[0], c->d[1], c->d[2]);
}

/* attention forward then backward: d = {B, T, NH, NKV, HD, causal, masked} */
static void mk_attention(const bcase *c, bcase_buf *b, int *nb)
{
    int B = c->d[0], T = c->d[1], NH = c->d[2], NKV = c->d[3], HD = c->d[4];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    uint8_t *km = dllm_malloc((size_t)B * T);
    for (int bb = 0; bb < B; bb++)
        for (int t = 0; t < T; t++) /* left padding of 3b positions; sequence 1 all padding */
            km[(size_t)bb * T + t] = !c->d[6] || (bb != 1 && t >= bb * 3);
    addb(b, nb, "q", BK_F32, nq, rnd(nq, 23, 1.0), -1);
    addb(b, nb, "k", BK_F32, nk, rnd(nk, 24, 1.0), -1);
    addb(b, nb, "v", BK_F32, nk, rnd(nk, 25, 1.0), -1);
    addb(b, nb, "keymask", BK_U8, (size_t)B * T, km, -1);
    addb(b, nb, "out", BK_F32, nq, NULL, c->tol / 10); /* the forward is 10x tighter */
    int s = addb(b, nb, "state", BK_F32, 0, NULL, -1);
    b[s].attn_state = true;
    addb(b, nb, "dout", BK_F32, nq, rnd(nq, 26, 1.0), -1);
    addb(b, nb, "dq", BK_F32, nq, rnd(nq, 27, 0.1), c->tol);
    addb(b, nb, "dk", BK_F32, nk, rnd(nk, 28, 0.1), c->tol);
    addb(b, nb, "dv", BK_F32, nk, rnd(nk, 29, 0.1), c->tol);
}
static void run_attention(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    const int *d = c->d;
    const uint8_t *km = d[6] ? p[3] : NULL;
    be->ops->attention_fwd(be, p[4], p[5], p[0], p[1], p[2], km, d[0], d[1], d[2], d[3], d[4],
                           d[5]);
    be->ops->attention_bwd(be, p[7], p[8], p[9], p[6], p[4], p[5], p[0], p[1], p[2], km, d[0],
                           d[1], d[2], d[3], d[4], d[5]);
}

/* rope_attention_fwd: d = {B, T, NH, NKV, HD, causal, masked, max_pos}: attention over q
 * and k rotated at random positions below max_pos. The output as attention's forward
 * (c->tol / 10); q and k are not compared (the CPU rotates them in place, a device reads
 * them as given). */
static void mk_rope_attention(const bcase *c, bcase_buf *b, int *nb)
{
    int B = c->d[0], T = c->d[1], NH = c->d[2], NKV = c->d[3], HD = c->d[4], MAXP = c->d[7];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    size_t tn = (size_t)MAXP * (HD / 2);
    uint8_t *km = dllm_malloc((size_t)B * T);
    for (int bb = 0; bb < B; bb++)
        for (int t = 0; t < T; t++) /* left padding of 3b positions; sequence 1 all padding */
            km[(size_t)bb * T + t] = !c->d[6] || (bb != 1 && t >= bb * 3);
    op_rope_table t;
    op_rope_table_init(&t, MAXP, HD, 10000.0f);
    int32_t *pos = dllm_malloc((size_t)B * T * 4);
    dllm_rng r = dllm_rng_make(70, 0, 0, 0);
    for (int i = 0; i < B * T; i++)
        pos[i] = (int32_t)dllm_rng_below(&r, (uint64_t)MAXP);
    addb(b, nb, "q", BK_F32, nq, rnd(nq, 71, 1.0), -1);
    addb(b, nb, "k", BK_F32, nk, rnd(nk, 72, 1.0), -1);
    addb(b, nb, "v", BK_F32, nk, rnd(nk, 73, 1.0), -1);
    addb(b, nb, "keymask", BK_U8, (size_t)B * T, km, -1);
    addb(b, nb, "pos", BK_I32, (size_t)B * T, pos, -1);
    addb(b, nb, "cos", BK_F32, tn, dup_bytes(t.cos, tn * 4), -1);
    addb(b, nb, "sin", BK_F32, tn, dup_bytes(t.sin, tn * 4), -1);
    addb(b, nb, "out", BK_F32, nq, NULL, c->tol / 10);
    int st = addb(b, nb, "state", BK_F32, 0, NULL, -1);
    b[st].attn_state = true;
    op_rope_table_free(&t);
}
static void run_rope_attention(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    const int *d = c->d;
    op_rope_table t = {d[7], d[4] / 2, p[5], p[6]};
    be->ops->rope_attention_fwd(be, p[7], p[8], p[0], p[1], p[2], p[4], &t, d[6] ? p[3] : NULL,
                                d[0], d[1], d[2], d[3], d[4], d[5]);
}

/* rope_attention_fwd then rope_attention_bwd: as above, plus the gradients (over stale
 * values: they are written), compared as attention's (c->tol) */
static void mk_rope_attention_bwd(const bcase *c, bcase_buf *b, int *nb)
{
    int B = c->d[0], T = c->d[1], NH = c->d[2], NKV = c->d[3], HD = c->d[4];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    mk_rope_attention(c, b, nb); /* q k v keymask pos cos sin out state */
    addb(b, nb, "dout", BK_F32, nq, rnd(nq, 74, 1.0), -1);
    addb(b, nb, "dq", BK_F32, nq, rnd(nq, 75, 0.1), c->tol);
    addb(b, nb, "dk", BK_F32, nk, rnd(nk, 76, 0.1), c->tol);
    addb(b, nb, "dv", BK_F32, nk, rnd(nk, 77, 0.1), c->tol);
}
static void run_rope_attention_bwd(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    const int *d = c->d;
    op_rope_table t = {d[7], d[4] / 2, p[5], p[6]};
    const uint8_t *km = d[6] ? p[3] : NULL;
    be->ops->rope_attention_fwd(be, p[7], p[8], p[0], p[1], p[2], p[4], &t, km, d[0], d[1], d[2],
                                d[3], d[4], d[5]);
    be->ops->rope_attention_bwd(be, p[10], p[11], p[12], p[9], p[7], p[8], p[0], p[1], p[2], p[4],
                                &t, km, d[0], d[1], d[2], d[3], d[4], d[5]);
    (void)ret;
}

/* kv_append + attention_cached: d = {B, T, len, max_len, NH, NKV, HD, causal}. A prefix
 * of len slots is appended first (sequence 1's first 3 slots padding), then T new rows
 * (sequence 0's last one padding, newmask), and the T queries attend over the cache; the
 * cache, its key mask and y compared. On tensor cores (head dims up to 128) y is the
 * forward's bf16-operand result (ATT_TC_NMSE); the fp32 kernel (head dim 256) sums as the
 * CPU does (1e-10). */
static void mk_kv_cache(const bcase *c, bcase_buf *b, int *nb)
{
    int B = c->d[0], T = c->d[1], L = c->d[2], M = c->d[3], NH = c->d[4], NKV = c->d[5],
        HD = c->d[6];
    size_t kd = (size_t)NKV * HD, np = (size_t)B * L * kd, nn = (size_t)B * T * kd;
    uint8_t *pm = dllm_malloc((size_t)B * L), *nm = dllm_malloc((size_t)B * T);
    for (int bb = 0; bb < B; bb++) {
        for (int t = 0; t < L; t++)
            pm[(size_t)bb * L + t] = !(bb == 1 && t < 3);
        for (int t = 0; t < T; t++)
            nm[(size_t)bb * T + t] = !(bb == 0 && t == T - 1);
    }
    addb(b, nb, "k_prefix", BK_F32, np, rnd(np, 61, 1.0), -1);
    addb(b, nb, "v_prefix", BK_F32, np, rnd(np, 62, 1.0), -1);
    addb(b, nb, "mask_prefix", BK_U8, (size_t)B * L, pm, -1);
    addb(b, nb, "k", BK_F32, nn, rnd(nn, 63, 1.0), -1);
    addb(b, nb, "v", BK_F32, nn, rnd(nn, 64, 1.0), -1);
    addb(b, nb, "newmask", BK_U8, (size_t)B * T, nm, -1);
    addb(b, nb, "q", BK_F32, (size_t)B * T * NH * HD, rnd((size_t)B * T * NH * HD, 65, 1.0), -1);
    addb(b, nb, "kc", BK_F32, (size_t)B * M * kd, NULL, 0);
    addb(b, nb, "vc", BK_F32, (size_t)B * M * kd, NULL, 0);
    addb(b, nb, "cmask", BK_U8, (size_t)B * M, NULL, 0);
    addb(b, nb, "y", BK_F32, (size_t)B * T * NH * HD, rnd((size_t)B * T * NH * HD, 66, 1.0),
         c->tol);
}
static void run_kv_cache(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    const int *d = c->d;
    int kd = d[5] * d[6];
    be->ops->kv_append(be, p[7], p[8], p[9], p[0], p[1], p[2], d[0], d[2], 0, d[3], kd);
    be->ops->kv_append(be, p[7], p[8], p[9], p[3], p[4], p[5], d[0], d[1], d[2], d[3], kd);
    be->ops->attention_cached(be, p[10], p[6], p[7], p[8], p[9], d[0], d[1], d[2], d[3], d[4],
                              d[5], d[6], d[7]);
}

/* swiglu: d = {n} */
static void mk_swiglu(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "gate", BK_F32, n, rnd(n, 30, 3.0), -1);
    addb(b, nb, "up", BK_F32, n, rnd(n, 31, 1.0), -1);
    addb(b, nb, "out", BK_F32, n, NULL, c->tol);
    addb(b, nb, "dout", BK_F32, n, rnd(n, 32, 1.0), -1);
    addb(b, nb, "dgate", BK_F32, n, rnd(n, 33, 0.1), c->tol);
    addb(b, nb, "dup", BK_F32, n, rnd(n, 34, 0.1), c->tol);
}
static void run_swiglu(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->swiglu_fwd(be, p[2], p[0], p[1], (size_t)c->d[0]);
    be->ops->swiglu_bwd(be, p[4], p[5], p[3], p[0], p[1], (size_t)c->d[0]);
}

/* embedding: d = {N, C, V, backward}; few distinct ids, so rows repeat (atomics) */
static void mk_embedding(const bcase *c, bcase_buf *b, int *nb)
{
    int N = c->d[0], C = c->d[1], V = c->d[2];
    int32_t *ids = dllm_malloc((size_t)N * 4);
    dllm_rng r = dllm_rng_make(35, 0, 0, 0);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)dllm_rng_below(&r, 12) * (V / 12);
    addb(b, nb, "ids", BK_I32, (size_t)N, ids, -1);
    addb(b, nb, "wte", BK_F32, (size_t)V * C, rnd((size_t)V * C, 36, 1.0), c->d[3] ? c->tol : -1);
    addb(b, nb, "out", BK_F32, (size_t)N * C, rnd((size_t)N * C, 37, 1.0), c->d[3] ? -1 : c->tol);
}
static void run_embedding(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    if (c->d[3]) /* dwte (in "wte") += dout (in "out") */
        be->ops->embedding_bwd(be, p[1], p[2], p[0], c->d[0], c->d[1]);
    else
        be->ops->embedding_fwd(be, p[2], p[0], p[1], c->d[0], c->d[1]);
}

/* xent forward then backward: d = {N, V, backward without the saved lse} */
static void mk_xent(const bcase *c, bcase_buf *b, int *nb)
{
    int N = c->d[0], V = c->d[1];
    size_t nv = (size_t)N * V;
    float *lg = rnd(nv, 38, 3.0), *dlogp = dllm_malloc((size_t)N * 4);
    int32_t *tg = dllm_malloc((size_t)N * 4);
    dllm_rng r = dllm_rng_make(39, 0, 0, 0);
    for (int i = 0; i < N; i++) {
        tg[i] = (int32_t)dllm_rng_below(&r, (uint64_t)V);
        dlogp[i] = i % 3 == 0 ? 0.0f : -(float)(0.5 + dllm_rng_uniform(&r)); /* weights */
    }
    tg[N / 2] = -1; /* out of range: NaN on both sides, no gradient */
    dlogp[N / 2] = 0.0f;
    for (int j = 0; j < V; j += 7) /* masked logits, as the sampler's eos masking */
        lg[(size_t)1 * V + j] = -INFINITY;
    addb(b, nb, "logits", BK_F32, nv, lg, -1);
    addb(b, nb, "target", BK_I32, (size_t)N, tg, -1);
    addb(b, nb, "logp", BK_F32, (size_t)N, NULL, c->tol / 10);
    addb(b, nb, "lse", BK_F32, (size_t)N, NULL, c->tol / 10);
    addb(b, nb, "dlogp", BK_F32, (size_t)N, dlogp, -1);
    addb(b, nb, "dlogits", BK_F32, nv, rnd(nv, 40, 0.01), c->tol);
}
static void run_xent(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->xent_fwd(be, p[2], p[3], p[0], p[1], c->d[0], c->d[1]);
    be->ops->xent_bwd(be, p[5], p[4], p[0], c->d[2] ? NULL : p[3], p[1], c->d[0], c->d[1]);
}

/* round_bf16, add: d = {n} */
static void mk_round_bf16(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    float *x = rnd(n, 41, 100.0);
    dllm_rng r = dllm_rng_make(42, 0, 0, 0);
    for (size_t i = 0; i < n / 2; i++) { /* random bits: infs, ties, subnormals (no NaN) */
        uint32_t u = (uint32_t)dllm_rng_u64(&r);
        if (i % 4 == 0)
            u = (u & 0xFFFF0000u) | 0x8000u; /* exact ties */
        if ((u & 0x7F800000u) == 0x7F800000u)
            u &= 0xFF800000u; /* inf, not NaN: NaN payloads are compared elsewhere */
        memcpy(&x[i], &u, 4);
    }
    x[0] = FLT_MAX, x[1] = -INFINITY, x[2] = -0.0f, x[3] = FLT_TRUE_MIN;
    addb(b, nb, "x", BK_F32, n, x, 0);
}
static void run_round_bf16(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->round_bf16(be, p[0], (size_t)c->d[0]);
}
static void mk_add(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "y", BK_F32, n, rnd(n, 43, 1.0), 0);
    addb(b, nb, "x", BK_F32, n, rnd(n, 44, 1.0), -1);
}
static void run_add(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->add(be, p[0], p[1], (size_t)c->d[0]);
}

/* copy: d = {n floats}; device to device */
static void mk_copy(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "dst", BK_F32, n, rnd(n, 51, 1.0), 0);
    addb(b, nb, "src", BK_F32, n, rnd(n, 52, 1.0), -1);
}
static void run_copy(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->copy(be, p[0], p[1], (size_t)c->d[0] * sizeof(float));
}

/* copy_2d: d = {rows, cols, dld, sld}: a column block out of a wider matrix into a
 * narrower one (the destination's other columns untouched) */
static void mk_copy_2d(const bcase *c, bcase_buf *b, int *nb)
{
    size_t rows = c->d[0], dld = c->d[2], sld = c->d[3];
    addb(b, nb, "dst", BK_F32, rows * dld, rnd(rows * dld, 57, 1.0), 0);
    addb(b, nb, "src", BK_F32, rows * sld, rnd(rows * sld, 58, 1.0), -1);
}
static void run_copy_2d(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    float *src = p[1];
    be->ops->copy_2d(be, p[0], (size_t)c->d[2], src + c->d[4], (size_t)c->d[3], c->d[0], c->d[1]);
}

/* bias rows: d = {N, OC}; out += bias per row, dbias += column sums in row order */
static void mk_bias(const bcase *c, bcase_buf *b, int *nb)
{
    size_t N = c->d[0], OC = c->d[1];
    addb(b, nb, "out", BK_F32, N * OC, rnd(N * OC, 53, 1.0), 0);
    addb(b, nb, "bias", BK_F32, OC, rnd(OC, 54, 0.5), -1);
    addb(b, nb, "dbias", BK_F32, OC, rnd(OC, 55, 0.1), 0);
    addb(b, nb, "dout", BK_F32, N * OC, rnd(N * OC, 56, 1.0), -1);
}
static void run_bias(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    be->ops->bias_fwd(be, p[0], p[1], c->d[0], c->d[1]);
    be->ops->bias_bwd(be, p[2], p[3], c->d[0], c->d[1]);
}

/* adamw, three steps: d = {n, b1 x 100} (b1 0.9 and 0.3: both lerp branches) */
static void mk_adamw(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    float *v = rnd(n, 45, 0.01);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    addb(b, nb, "p", BK_F32, n, rnd(n, 46, 1.0), 0);
    addb(b, nb, "g", BK_F32, n, rnd(n, 47, 0.05), -1);
    addb(b, nb, "m", BK_F32, n, rnd(n, 48, 0.01), 0);
    addb(b, nb, "v", BK_F32, n, v, 0);
}
static void run_adamw(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    for (int t = 1; t <= 3; t++)
        be->ops->adamw(be, p[0], p[1], p[2], p[3], (size_t)c->d[0], t, 1e-3f,
                       (float)c->d[1] / 100.0f, 0.95f, 1e-8f, 0.1f);
}

/* grad_norm: d = {n}; the result is compared, not a buffer */
static void mk_grad_norm(const bcase *c, bcase_buf *b, int *nb)
{
    addb(b, nb, "g", BK_F32, (size_t)c->d[0], rnd((size_t)c->d[0], 49, 0.01), -1);
}
static void run_grad_norm(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    *ret = be->ops->grad_norm(be, p[0], (size_t)c->d[0]);
}

/* clip_grad: d = {n, max_norm x 1000}; the clipped g and the returned norm compared */
static void mk_clip_grad(const bcase *c, bcase_buf *b, int *nb)
{
    addb(b, nb, "g", BK_F32, (size_t)c->d[0], rnd((size_t)c->d[0], 57, 0.01), 0);
}
static void run_clip_grad(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    *ret = be->ops->clip_grad(be, p[0], (size_t)c->d[0], (double)c->d[1] / 1000.0);
}

/* adamw_step, three steps: d = {n, max_norm x 1000, a NaN gradient}; norm, clip and
 * AdamW in one call (the moments and weights compared after the third; the returned norm
 * is the last step's). With the NaN every step leaves p, m, v as they were. */
static void mk_adamw_step(const bcase *c, bcase_buf *b, int *nb)
{
    size_t n = c->d[0];
    float *v = rnd(n, 45, 0.01), *g = rnd(n, 58, 0.01);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    if (c->d[2])
        g[n / 2] = NAN;
    /* the device's clip scales by a coefficient of its own sum: 1e-12 (as clip_grad's) */
    double tol = c->d[1] && !c->d[2] ? 1e-12 : 0;
    addb(b, nb, "p", BK_F32, n, rnd(n, 46, 1.0), tol);
    addb(b, nb, "g", BK_F32, n, g, tol);
    addb(b, nb, "m", BK_F32, n, rnd(n, 48, 0.01), tol);
    addb(b, nb, "v", BK_F32, n, v, tol);
}
static void run_adamw_step(dllm_backend *be, const bcase *c, void **p, double *ret)
{
    for (int t = 1; t <= 3; t++) {
        dllm_adamw_args a = {t, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, (double)c->d[1] / 1000.0};
        *ret = be->ops->adamw_step(be, p[0], p[1], p[2], p[3], (size_t)c->d[0], &a);
    }
}

#define T_ (FP8_SCALE_TENSOR)
#define BLK_ (FP8_SCALE_BLOCK)
#define GRP_ (FP8_SCALE_GROUP)
#define CH_ (FP8_SCALE_CHANNEL)
/* Tolerances: fp32 GEMMs and layers differ from OpenBLAS in summation order (1e-10);
 * normalisation, rope and activation functions by libm ulps and fp32 block sums; the
 * attention on tensor cores (head dims up to 128) rounds its operands to bf16
 * (ATT_TC_NMSE); the fp32 attention kernels (head dim 256 here) sum the gradients over
 * keys in another order than the CPU's [T,T] probabilities (1e-9); FP8 GEMMs through cuBLASLt by the tensor cores' accumulation
 * (FP8_GEMM_NMSE); the FP8 fallback (no cuBLASLt form: C % 16 != 0, channel scales)
 * multiplies the CPU's own dequantised values in fp32 (1e-10); bf16_linear_bwd_x on BF16
 * tensor cores rounds dout to bf16 where the CPU multiplies it in fp32: an error uniform
 * within half a bf16 ulp (an ulp is 2^-7 of the leading bit), a relative variance of
 * 2^-14 / 12 x E[1 / m^2] (m the significand in [1, 2): 1/2) = 2.5e-6, independent across
 * the sum, so a normalised MSE of about 2.5e-6 (measured 2.7e-6; 8e-6 allows 3x); its
 * widened fallback keeps dout fp32 (1e-10). */
const bcase dllm_backend_cases[] = {
    {"gemm", "NN 37x29x53", {37, 29, 53, 0, 0}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "TN 37x29x53", {37, 29, 53, 1, 0}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "NT 37x29x53", {37, 29, 53, 0, 1}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "TT 64x48x96", {64, 48, 96, 1, 1}, 1e-10, mk_gemm, run_gemm, -1},
    /* a LoRA's shapes (rank 8, 16): x A^T (NT), its input gradient (NN), dA (TN) on
     * cuBLASLt's BF16 GEMM; a rank-4 adapter's leading dimension 4 takes the rounded fp32
     * copies */
    {"gemm_bf16", "BF16 GEMM NT 40x8x64", {40, 8, 64, 0, 1}, 1e-10, mk_gemm, run_gemm_bf16, -1},
    {"gemm_bf16", "BF16 GEMM NN 33x64x16", {33, 64, 16, 0, 0}, 1e-10, mk_gemm, run_gemm_bf16, -1},
    {"gemm_bf16", "BF16 GEMM TN 16x64x40", {16, 64, 40, 1, 0}, 1e-10, mk_gemm, run_gemm_bf16, -1},
    {"gemm_bf16", "rounded fp32 NT 37x29x4", {37, 29, 4, 0, 1}, 1e-10, mk_gemm, run_gemm_bf16, -1},
    {"gemm_bf16", "rounded fp32 TT 4x29x37", {4, 29, 37, 1, 1}, 1e-10, mk_gemm, run_gemm_bf16, -1},
    {"linear_fwd", "N33 C48 OC40", {33, 48, 40}, 1e-10, mk_linear_fwd, run_linear_fwd, -1},
    {"linear_bwd", "N33 C48 OC40", {33, 48, 40}, 1e-10, mk_linear_bwd, run_linear_bwd, -1},
    {"fp8_linear_fwd", "tensor N40 C144 OC48", {40, 144, 48, T_, T_}, FP8_GEMM_NMSE(144),
     mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "block/group N37 C384 OC80 (tokens padded)", {37, 384, 80, BLK_, GRP_},
     FP8_GEMM_NMSE(384), mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "block/group N40 C256 OC192", {40, 256, 192, BLK_, GRP_},
     FP8_GEMM_NMSE(256), mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "fallback block/group N24 C100 OC40", {24, 100, 40, BLK_, GRP_}, 1e-10,
     mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "fallback channel/group N24 C96 OC40", {24, 96, 40, CH_, GRP_}, 1e-10,
     mk_fp8_linear, run_fp8_linear, -1},
    {"bf16_linear_fwd", "cuBLASLt N33 C64 OC40", {33, 64, 40}, 1e-10, mk_bf16_linear,
     run_bf16_linear, -1},
    /* the residual in the GEMM's epilogue: FP8 tensor- and block-scaled (rows a multiple of
     * 8, and 37 rows: the padded product, then an add), the FP8 fallback, bf16 on cuBLASLt
     * and widened, and after a fused producer (the down projection's codes) */
    {"linear_res_fwd", "fp8 tensor N40 C144 OC48", {40, 144, 48, T_, T_}, FP8_GEMM_NMSE(144),
     mk_fp8_linear_res, run_fp8_linear_res, -1},
    {"linear_res_fwd", "fp8 block/group N40 C256 OC192", {40, 256, 192, BLK_, GRP_},
     FP8_GEMM_NMSE(256), mk_fp8_linear_res, run_fp8_linear_res, -1},
    {"linear_res_fwd", "fp8 block/group N37 C384 OC80 (tokens padded)", {37, 384, 80, BLK_, GRP_},
     FP8_GEMM_NMSE(384), mk_fp8_linear_res, run_fp8_linear_res, -1},
    {"linear_res_fwd", "fp8 fallback block/group N24 C100 OC40", {24, 100, 40, BLK_, GRP_},
     1e-10, mk_fp8_linear_res, run_fp8_linear_res, -1},
    {"linear_res_fwd", "bf16 cuBLASLt N33 C64 OC40", {33, 64, 40}, 1e-10, mk_bf16_linear_res,
     run_bf16_linear_res, -1},
    {"linear_res_fwd", "bf16 widened N9 C100 OC30", {9, 100, 30}, 1e-10, mk_bf16_linear_res,
     run_bf16_linear_res, -1},
    {"linear_res_fwd", "fp8 after swiglu N40 C384 OC272", {40, 384, 272, 1}, FP8_GEMM_NMSE(384),
     mk_fp8_act_res, run_fp8_act_res, -1},
    {"linear_res_fwd", "fp8 after swiglu N33 C384 OC272 (tokens padded)", {33, 384, 272, 1},
     FP8_GEMM_NMSE(384), mk_fp8_act_res, run_fp8_act_res, -1},
    {"bf16_linear_fwd", "widened N9 C100 OC30", {9, 100, 30}, 1e-10, mk_bf16_linear,
     run_bf16_linear, -1},
    /* a rollout copy's linears packed by each backend from the same fp32 weight */
    {"pack_weight", "bf16 N33 C64 OC40", {33, 64, 40, 0, 0}, 1e-10, mk_pack_weight,
     run_pack_weight, -1},
    {"pack_weight", "bf16 from the host N33 C64 OC40", {33, 64, 40, 0, 1}, 1e-10,
     mk_pack_weight, run_pack_weight, -1},
    {"pack_weight", "fp8 block/group N40 C256 OC192", {40, 256, 192, 1, 0}, FP8_GEMM_NMSE(256),
     mk_pack_weight, run_pack_weight, -1},
    {"pack_weight", "fp8 block/group from the host N40 C256 OC192", {40, 256, 192, 1, 1},
     FP8_GEMM_NMSE(256), mk_pack_weight, run_pack_weight, -1},
    {"pack_weight", "int8 channel N17 C64 OC40", {17, 64, 40, 2, 1}, 0, mk_pack_weight,
     run_pack_weight, -1},
    {"bf16_linear_bwd_x", "BF16 GEMM N33 C64 OC40", {33, 64, 40}, 8e-6, mk_bf16_linear_bwd_x,
     run_bf16_linear_bwd_x, -1},
    {"bf16_linear_bwd_x", "widened N9 C100 OC30", {9, 100, 30}, 1e-10, mk_bf16_linear_bwd_x,
     run_bf16_linear_bwd_x, -1},
    /* a bf16 trainer's LoRA linears: each operand rounded once (rank 8, and OC 44: the
     * forward's form, the backward's parts), and the parts (rank 4); with and without the
     * residual (the sum's order differs by the device: one fp32 rounding per add) */
    {"bf16_lora_fwd", "one rounding N33 C64 OC40 r8", {33, 64, 40, 8}, 1e-10, mk_bf16_lora_fwd,
     run_bf16_lora_fwd, -1},
    {"bf16_lora_fwd", "one rounding + res N33 C64 OC44 r8", {33, 64, 44, 8, 1}, 1e-10,
     mk_bf16_lora_fwd, run_bf16_lora_fwd, -1},
    {"bf16_lora_fwd", "parts N33 C64 OC40 r4", {33, 64, 40, 4}, 1e-10, mk_bf16_lora_fwd,
     run_bf16_lora_fwd, -1},
    {"bf16_lora_fwd", "parts + res N33 C64 OC40 r4", {33, 64, 40, 4, 1}, 1e-10,
     mk_bf16_lora_fwd, run_bf16_lora_fwd, -1},
    {"bf16_lora_bwd", "one rounding N33 C64 OC40 r8", {33, 64, 40, 8}, 8e-6, mk_bf16_lora_bwd,
     run_bf16_lora_bwd, -1},
    {"bf16_lora_bwd", "parts N33 C64 OC44 r8", {33, 64, 44, 8}, 8e-6, mk_bf16_lora_bwd,
     run_bf16_lora_bwd, -1},
    {"bf16_lora_bwd", "parts N33 C64 OC40 r4", {33, 64, 40, 4}, 8e-6, mk_bf16_lora_bwd,
     run_bf16_lora_bwd, -1},
    {"to_bf16", "n10007", {10007}, 0, mk_to_bf16, run_to_bf16, -1},
    {"fp8_act", "rmsnorm N40 C256 OC192", {40, 256, 192, 0}, FP8_GEMM_NMSE(256), mk_fp8_act,
     run_fp8_act, -1},
    {"fp8_act", "swiglu N33 C384 OC272", {33, 384, 272, 1}, FP8_GEMM_NMSE(384), mk_fp8_act,
     run_fp8_act, -1},
    {"fp8_quantise", "block R200 C300 e4m3", {200, 300, BLK_, FP8_E4M3, 0}, 0, mk_fp8_quantise,
     run_fp8_quantise, -1},
    {"fp8_quantise", "tensor R40 C96 e5m2 pow2", {40, 96, T_, FP8_E5M2, 1}, 0, mk_fp8_quantise,
     run_fp8_quantise, -1},
    {"fp8_quantise", "channel R40 C96 e4m3", {40, 96, CH_, FP8_E4M3, 0}, 0, mk_fp8_quantise,
     run_fp8_quantise, -1},
    {"rmsnorm_fwd", "N37 C300", {37, 300}, 1e-11, mk_rmsnorm_fwd, run_rmsnorm_fwd, -1},
    {"rmsnorm_bwd", "N37 C300", {37, 300}, 1e-10, mk_rmsnorm_bwd, run_rmsnorm_bwd, -1},
    {"rmsnorm_bwd", "N130 C96 (3 dw chunks)", {130, 96}, 1e-10, mk_rmsnorm_bwd, run_rmsnorm_bwd, -1},
    {"rope_fwd", "N19 NH3 HD64", {19, 3, 64, 64, 0}, 1e-12, mk_rope, run_rope_fwd, -1},
    {"rope_bwd", "N19 NH3 HD64", {19, 3, 64, 64, 0}, 1e-12, mk_rope, run_rope_bwd, -1},
    {"rope_bwd", "in place N19 NH3 HD64", {19, 3, 64, 64, 1}, 1e-12, mk_rope, run_rope_bwd, -1},
    {"attention", "B2 T45 NH4 NKV2 HD16 mask", {2, 45, 4, 2, 16, 0, 1}, ATT_TC_NMSE, mk_attention, run_attention, -1},
    {"attention", "B1 T70 NH2 NKV1 HD64 causal", {1, 70, 2, 1, 64, 1, 0}, ATT_TC_NMSE, mk_attention, run_attention, -1},
    {"attention", "B2 T33 NH2 NKV2 HD128 mask", {2, 33, 2, 2, 128, 0, 1}, ATT_TC_NMSE, mk_attention, run_attention, -1},
    {"attention", "B2 T29 NH4 NKV1 HD40 causal mask", {2, 29, 4, 1, 40, 1, 1}, ATT_TC_NMSE, mk_attention, run_attention, -1},
    {"attention", "B1 T20 NH2 NKV2 HD256", {1, 20, 2, 2, 256, 0, 0}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B3 T100 NH2 NKV2 HD32 causal mask", {3, 100, 2, 2, 32, 1, 1}, ATT_TC_NMSE, mk_attention, run_attention, -1},
    /* RoPE in the attention's loads: rows not a multiple of the tiles, GQA, key masks,
     * causal, the fp32 kernel (head dim 256) */
    {"rope_attention_fwd", "B2 T45 NH4 NKV2 HD16 mask", {2, 45, 4, 2, 16, 0, 1, 60}, ATT_TC_NMSE,
     mk_rope_attention, run_rope_attention, -1},
    {"rope_attention_fwd", "B1 T70 NH2 NKV1 HD64 causal", {1, 70, 2, 1, 64, 1, 0, 70},
     ATT_TC_NMSE, mk_rope_attention, run_rope_attention, -1},
    {"rope_attention_fwd", "B2 T33 NH4 NKV1 HD128 causal mask", {2, 33, 4, 1, 128, 1, 1, 40},
     ATT_TC_NMSE, mk_rope_attention, run_rope_attention, -1},
    {"rope_attention_fwd", "B2 T29 NH4 NKV2 HD40 mask", {2, 29, 4, 2, 40, 0, 1, 29}, ATT_TC_NMSE,
     mk_rope_attention, run_rope_attention, -1},
    {"rope_attention_fwd", "B1 T20 NH2 NKV1 HD256 causal", {1, 20, 2, 1, 256, 1, 0, 20}, 1e-9,
     mk_rope_attention, run_rope_attention, -1},
    {"rope_attention_bwd", "B2 T45 NH4 NKV2 HD16 mask", {2, 45, 4, 2, 16, 0, 1, 60}, ATT_TC_NMSE,
     mk_rope_attention_bwd, run_rope_attention_bwd, -1},
    {"rope_attention_bwd", "B2 T33 NH4 NKV1 HD128 causal mask", {2, 33, 4, 1, 128, 1, 1, 40},
     ATT_TC_NMSE, mk_rope_attention_bwd, run_rope_attention_bwd, -1},
    {"rope_attention_bwd", "B2 T29 NH4 NKV2 HD40 mask", {2, 29, 4, 2, 40, 0, 1, 29}, ATT_TC_NMSE,
     mk_rope_attention_bwd, run_rope_attention_bwd, -1},
    {"rope_attention_bwd", "B1 T20 NH2 NKV1 HD256 causal", {1, 20, 2, 1, 256, 1, 0, 20}, 1e-9,
     mk_rope_attention_bwd, run_rope_attention_bwd, -1},
    {"kv_cache", "B2 T5 len9 max16 NH4 NKV2 HD16 causal", {2, 5, 9, 16, 4, 2, 16, 1}, ATT_TC_NMSE,
     mk_kv_cache, run_kv_cache, -1},
    {"kv_cache", "B2 T7 len6 max13 NH2 NKV2 HD64 block", {2, 7, 6, 13, 2, 2, 64, 0}, ATT_TC_NMSE,
     mk_kv_cache, run_kv_cache, -1},
    {"kv_cache", "B1 T40 len30 max90 NH4 NKV2 HD40 causal", {1, 40, 30, 90, 4, 2, 40, 1},
     ATT_TC_NMSE, mk_kv_cache, run_kv_cache, -1},
    {"kv_cache", "B2 T6 len7 max15 NH2 NKV1 HD256 block", {2, 6, 7, 15, 2, 1, 256, 0}, 1e-10,
     mk_kv_cache, run_kv_cache, -1},
    {"swiglu", "n10007", {10007}, 1e-12, mk_swiglu, run_swiglu, -1},
    {"embedding_fwd", "N200 C96 V50", {200, 96, 50, 0}, 0, mk_embedding, run_embedding, -1},
    {"embedding_bwd", "N200 C96 V50", {200, 96, 50, 1}, 1e-12, mk_embedding, run_embedding, -1},
    {"xent", "N13 V5003", {13, 5003, 0}, 1e-10, mk_xent, run_xent, -1},
    {"xent", "N13 V5003, backward recomputes lse", {13, 5003, 1}, 1e-10, mk_xent, run_xent, -1},
    {"round_bf16", "n70000", {70000}, 0, mk_round_bf16, run_round_bf16, -1},
    {"add", "n10007", {10007}, 0, mk_add, run_add, -1},
    {"copy", "n5003", {5003}, 0, mk_copy, run_copy, -1},
    {"copy_2d", "rows37 cols16 dld20 sld48 +16", {37, 16, 20, 48, 16}, 0, mk_copy_2d, run_copy_2d,
     -1},
    {"copy_2d", "rows300 cols24 dld72 sld24", {300, 24, 72, 24, 0}, 0, mk_copy_2d, run_copy_2d,
     -1},
    {"bias", "N37 OC200", {37, 200}, 0, mk_bias, run_bias, -1},
    {"bias", "N1 OC7", {1, 7}, 0, mk_bias, run_bias, -1},
    {"adamw", "n30011 b1 0.9", {30011, 90}, 0, mk_adamw, run_adamw, -1},
    {"adamw", "n30011 b1 0.3", {30011, 30}, 0, mk_adamw, run_adamw, -1},
    {"grad_norm", "n300001", {300001}, 0, mk_grad_norm, run_grad_norm, 1e-12},
    {"clip_grad", "n30011 clipped", {30011, 100}, 1e-12, mk_clip_grad, run_clip_grad, 1e-12},
    {"clip_grad", "n30011 not clipped", {30011, 100000}, 0, mk_clip_grad, run_clip_grad, 1e-12},
    {"clip_grad", "n30011 norm only", {30011, 0}, 0, mk_clip_grad, run_clip_grad, 1e-12},
    {"adamw_step", "n30011 clipped", {30011, 100, 0}, 0, mk_adamw_step, run_adamw_step, 1e-12},
    {"adamw_step", "n30011 not clipped", {30011, 0, 0}, 0, mk_adamw_step, run_adamw_step, 1e-12},
    {"adamw_step", "n30011 NaN gradient", {30011, 100, 1}, 0, mk_adamw_step, run_adamw_step, -1},
};
const size_t dllm_backend_n_cases = sizeof dllm_backend_cases / sizeof *dllm_backend_cases;
#undef T_
#undef BLK_
#undef GRP_
#undef CH_


/* ---- buffers --------------------------------------------------------------------------------- */

size_t bcase_buf_bytes(const bcase_buf *b, dllm_backend *be, const bcase *c)
{
    if (b->attn_state)
        return be->ops->attn_state_floats(be, c->d[0], c->d[1], c->d[2]) * 4;
    return b->n * kbytes(b->kind);
}

/* ---- the same cases at a model's shapes ------------------------------------------------------- */

/* The tolerance the test table states for op (its first case of that op). */
static double table_tol(const char *op)
{
    for (size_t i = 0; i < dllm_backend_n_cases; i++)
        if (!strcmp(dllm_backend_cases[i].op, op))
            return dllm_backend_cases[i].tol;
    return 0.0;
}

static int add_case(bcase *out, int *n, int max, const char *op, int d0, int d1, int d2, int d3,
                    int d4, int d5, int d6, const char *fmt, double tol,
                    void (*make)(const bcase *, bcase_buf *, int *),
                    void (*run)(dllm_backend *, const bcase *, void **, double *), double ret_tol)
{
    if (*n >= max)
        return 0;
    bcase *c = &out[(*n)++];
    memset(c, 0, sizeof *c);
    c->op = op;
    int d[8] = {d0, d1, d2, d3, d4, d5, d6, 0};
    memcpy(c->d, d, sizeof d);
    snprintf(c->shape, sizeof c->shape, fmt, d0, d1, d2, d3, d4);
    c->tol = tol;
    c->make = make;
    c->run = run;
    c->ret_tol = ret_tol;
    return 1;
}

int bcase_model_cases(const bcase_model *m, bcase *out, int max)
{
    const int R = m->rows, C = m->C, I = m->I;
    const int T_ = FP8_SCALE_TENSOR, BLK_ = FP8_SCALE_BLOCK, GRP_ = FP8_SCALE_GROUP;
    int n = 0;
    /* gemm: the forward (NN), the input gradient (NT) and the weight gradient (TN) */
    add_case(out, &n, max, "gemm", R, I, C, 0, 0, 0, 0, "NN %dx%dx%d", table_tol("gemm"), mk_gemm,
             run_gemm, -1);
    add_case(out, &n, max, "gemm", R, C, I, 0, 1, 0, 0, "NT %dx%dx%d", table_tol("gemm"), mk_gemm,
             run_gemm, -1);
    add_case(out, &n, max, "gemm", C, I, R, 1, 0, 0, 0, "TN %dx%dx%d", table_tol("gemm"), mk_gemm,
             run_gemm, -1);
    add_case(out, &n, max, "linear_fwd", R, C, I, 0, 0, 0, 0, "N%d C%d OC%d (up)",
             table_tol("linear_fwd"), mk_linear_fwd, run_linear_fwd, -1);
    add_case(out, &n, max, "linear_fwd", R, I, C, 0, 0, 0, 0, "N%d C%d OC%d (down)",
             table_tol("linear_fwd"), mk_linear_fwd, run_linear_fwd, -1);
    add_case(out, &n, max, "linear_bwd", R, C, I, 0, 0, 0, 0, "N%d C%d OC%d",
             table_tol("linear_bwd"), mk_linear_bwd, run_linear_bwd, -1);
    /* the bf16 linears a bf16 rollout copy and a bf16 trainer's LoRA backward run: bf16
     * products summed in fp32 on both sides, so the fp32 linear's tolerance */
    add_case(out, &n, max, "bf16_linear_fwd", R, C, I, 0, 0, 0, 0, "N%d C%d OC%d (up)",
             table_tol("bf16_linear_fwd"), mk_bf16_linear, run_bf16_linear, -1);
    add_case(out, &n, max, "bf16_linear_fwd", R, I, C, 0, 0, 0, 0, "N%d C%d OC%d (down)",
             table_tol("bf16_linear_fwd"), mk_bf16_linear, run_bf16_linear, -1);
    add_case(out, &n, max, "bf16_linear_bwd_x", R, C, I, 0, 0, 0, 0, "N%d C%d OC%d (up)",
             table_tol("bf16_linear_bwd_x"), mk_bf16_linear_bwd_x, run_bf16_linear_bwd_x, -1);
    add_case(out, &n, max, "bf16_linear_bwd_x", R, I, C, 0, 0, 0, 0, "N%d C%d OC%d (down)",
             table_tol("bf16_linear_bwd_x"), mk_bf16_linear_bwd_x, run_bf16_linear_bwd_x, -1);
    add_case(out, &n, max, "bf16_lora_fwd", R, C, I, 16, 1, 0, 0, "N%d C%d OC%d r%d (up, res)",
             table_tol("bf16_lora_fwd"), mk_bf16_lora_fwd, run_bf16_lora_fwd, -1);
    add_case(out, &n, max, "bf16_lora_bwd", R, I, C, 16, 0, 0, 0, "N%d C%d OC%d r%d (down)",
             table_tol("bf16_lora_bwd"), mk_bf16_lora_bwd, run_bf16_lora_bwd, -1);
    add_case(out, &n, max, "fp8_linear_fwd", R, C, C, T_, T_, 0, 0, "tensor N%d C%d OC%d",
             FP8_GEMM_NMSE(C), mk_fp8_linear, run_fp8_linear, -1);
    add_case(out, &n, max, "fp8_linear_fwd", R, C, I, BLK_, GRP_, 0, 0, "block/group N%d C%d OC%d",
             FP8_GEMM_NMSE(C), mk_fp8_linear, run_fp8_linear, -1);
    add_case(out, &n, max, "fp8_linear_fwd", R, I, C, BLK_, GRP_, 0, 0, "block/group N%d C%d OC%d",
             FP8_GEMM_NMSE(I), mk_fp8_linear, run_fp8_linear, -1);
    add_case(out, &n, max, "fp8_act", R, C, I, 0, 0, 0, 0, "rmsnorm N%d C%d OC%d (up)",
             FP8_GEMM_NMSE(C), mk_fp8_act, run_fp8_act, -1);
    add_case(out, &n, max, "fp8_act", R, I, C, 1, 0, 0, 0, "swiglu N%d C%d OC%d (down)",
             FP8_GEMM_NMSE(I), mk_fp8_act, run_fp8_act, -1);
    add_case(out, &n, max, "rmsnorm_fwd", R, C, 0, 0, 0, 0, 0, "N%d C%d", table_tol("rmsnorm_fwd"),
             mk_rmsnorm_fwd, run_rmsnorm_fwd, -1);
    add_case(out, &n, max, "rmsnorm_bwd", R, C, 0, 0, 0, 0, 0, "N%d C%d", table_tol("rmsnorm_bwd"),
             mk_rmsnorm_bwd, run_rmsnorm_bwd, -1);
    add_case(out, &n, max, "rope_fwd", R, m->NH, m->HD, m->T, 0, 0, 0, "N%d NH%d HD%d pos<%d",
             table_tol("rope_fwd"), mk_rope, run_rope_fwd, -1);
    add_case(out, &n, max, "rope_bwd", R, m->NH, m->HD, m->T, 0, 0, 0, "N%d NH%d HD%d pos<%d",
             table_tol("rope_bwd"), mk_rope, run_rope_bwd, -1);
    add_case(out, &n, max, "attention", m->B, m->T, m->NH, m->NKV, m->HD, 0, 1,
             "B%d T%d NH%d NKV%d HD%d mask", table_tol("attention"), mk_attention, run_attention, -1);
    add_case(out, &n, max, "attention", m->B, m->T, m->NH, m->NKV, m->HD, 1, 0,
             "B%d T%d NH%d NKV%d HD%d causal", table_tol("attention"), mk_attention, run_attention,
             -1);
    /* the rollout's attention with RoPE in its loads, positions below T */
    if (add_case(out, &n, max, "rope_attention_fwd", m->B, m->T, m->NH, m->NKV, m->HD, 0, 1,
                 "B%d T%d NH%d NKV%d HD%d mask", table_tol("rope_attention_fwd"),
                 mk_rope_attention, run_rope_attention, -1))
        out[n - 1].d[7] = m->T;
    /* the kept forward's and its backward */
    if (add_case(out, &n, max, "rope_attention_bwd", m->B, m->T, m->NH, m->NKV, m->HD, 0, 1,
                 "B%d T%d NH%d NKV%d HD%d mask", table_tol("rope_attention_bwd"),
                 mk_rope_attention_bwd, run_rope_attention_bwd, -1))
        out[n - 1].d[7] = m->T;
    /* the down projection plus the residual, fed SwiGLU's codes */
    add_case(out, &n, max, "linear_res_fwd", R, I, C, 1, 0, 0, 0, "after swiglu N%d C%d OC%d",
             FP8_GEMM_NMSE(I), mk_fp8_act_res, run_fp8_act_res, -1);
    add_case(out, &n, max, "swiglu", R * I, 0, 0, 0, 0, 0, 0, "n%d", table_tol("swiglu"), mk_swiglu,
             run_swiglu, -1);
    add_case(out, &n, max, "embedding_fwd", R, C, m->V, 0, 0, 0, 0, "N%d C%d V%d",
             table_tol("embedding_fwd"), mk_embedding, run_embedding, -1);
    add_case(out, &n, max, "embedding_bwd", R, C, m->V, 1, 0, 0, 0, "N%d C%d V%d",
             table_tol("embedding_bwd"), mk_embedding, run_embedding, -1);
    add_case(out, &n, max, "xent", R, m->V, 0, 0, 0, 0, 0, "N%d V%d", table_tol("xent"), mk_xent,
             run_xent, -1);
    add_case(out, &n, max, "round_bf16", R * C, 0, 0, 0, 0, 0, 0, "n%d", table_tol("round_bf16"),
             mk_round_bf16, run_round_bf16, -1);
    add_case(out, &n, max, "add", R * C, 0, 0, 0, 0, 0, 0, "n%d", table_tol("add"), mk_add, run_add,
             -1);
    add_case(out, &n, max, "copy", R * C, 0, 0, 0, 0, 0, 0, "n%d", table_tol("copy"), mk_copy,
             run_copy, -1);
    add_case(out, &n, max, "bias", R, C, 0, 0, 0, 0, 0, "N%d OC%d", table_tol("bias"), mk_bias,
             run_bias, -1);
    add_case(out, &n, max, "adamw", C * I, 90, 0, 0, 0, 0, 0, "n%d b1 0.%d", table_tol("adamw"),
             mk_adamw, run_adamw, -1);
    add_case(out, &n, max, "grad_norm", C * I, 0, 0, 0, 0, 0, 0, "n%d", table_tol("grad_norm"),
             mk_grad_norm, run_grad_norm, 1e-12);
    return n;
}

/* ---- two backends, one case ------------------------------------------------------------------- */

static void upload_all(dllm_backend *be, const bcase_buf *b, int nb, void **p, const size_t *bytes)
{
    for (int i = 0; i < nb; i++) {
        if (b[i].init)
            be->ops->upload(be, p[i], b[i].init, bytes[i]);
        else if (bytes[i])
            be->ops->memset0(be, p[i], bytes[i]);
    }
}

void bcase_compare(dllm_backend *ref, dllm_backend *dev, const bcase *c, const char *perturb,
                   bcase_result *r)
{
    memset(r, 0, sizeof *r);
    r->ok = true;
    bcase_buf b[BCASE_MAXB];
    int nb = 0;
    c->make(c, b, &nb);
    void *hp[BCASE_MAXB], *dp[BCASE_MAXB];
    size_t hb[BCASE_MAXB], db[BCASE_MAXB];
    for (int i = 0; i < nb; i++) {
        hb[i] = bcase_buf_bytes(&b[i], ref, c);
        db[i] = bcase_buf_bytes(&b[i], dev, c);
        hp[i] = ref->ops->alloc(ref, hb[i] ? hb[i] : 1);
        dp[i] = dev->ops->alloc(dev, db[i] ? db[i] : 1);
    }
    upload_all(ref, b, nb, hp, hb);
    upload_all(dev, b, nb, dp, db);
    double rc = 0.0, rg = 0.0;
    c->run(ref, c, hp, &rc);
    c->run(dev, c, dp, &rg); /* warm-up: the backend's workspace grows */
    dev->ops->sync(dev);
    upload_all(dev, b, nb, dp, db);
    c->run(dev, c, dp, &rg);
    dev->ops->sync(dev);
    ref->ops->sync(ref);
    bool perturbed = false;
    double worst = -1.0;
    for (int i = 0; i < nb; i++) {
        if (b[i].tol < 0)
            continue;
        size_t bytes = db[i];
        void *g = dllm_malloc(bytes ? bytes : 1), *h = dllm_malloc(bytes ? bytes : 1);
        dev->ops->download(dev, g, dp[i], bytes);
        ref->ops->download(ref, h, hp[i], bytes);
        if (perturb && !strcmp(perturb, c->op) && !perturbed && bytes) {
            if (b[i].kind == BK_F32)
                ((float *)g)[0] = ((float *)g)[0] * 1.5f + 1.0f;
            else
                ((unsigned char *)g)[0] ^= 1u;
            perturbed = true;
        }
        double e;
        if (b[i].tol == 0 || b[i].kind != BK_F32)
            e = memcmp(g, h, bytes) == 0 ? 0.0 : INFINITY;
        else
            e = dllm_nmse(g, h, b[i].n);
        /* the output nearest its bound (a bit-for-bit output counts as 0 or infinitely far) */
        double ratio = b[i].tol > 0 ? e / b[i].tol : (e == 0 ? 0.0 : INFINITY);
        if (!(ratio <= worst)) {
            worst = ratio;
            r->err = e;
            r->tol = b[i].tol;
            snprintf(r->what, sizeof r->what, "%s", b[i].name);
        }
        if (!(e <= b[i].tol) && r->ok) {
            r->ok = false;
            if (b[i].tol == 0 || b[i].kind != BK_F32)
                snprintf(r->msg, sizeof r->msg, "%s %s: %s not bit-identical", c->op, c->shape,
                         b[i].name);
            else
                snprintf(r->msg, sizeof r->msg, "%s %s: %s nmse %.3g > %.3g", c->op, c->shape,
                         b[i].name, e, b[i].tol);
        }
        free(g);
        free(h);
    }
    if (c->ret_tol >= 0) {
        if (perturb && !strcmp(perturb, c->op))
            rg = rg * 1.5 + 1.0;
        double e = fabs(rg - rc) / (fabs(rc) > 0 ? fabs(rc) : 1.0);
        if (!(e / c->ret_tol <= worst)) {
            worst = e / c->ret_tol;
            r->err = e;
            r->tol = c->ret_tol;
            snprintf(r->what, sizeof r->what, "result");
        }
        if (!(e <= c->ret_tol) && r->ok) {
            r->ok = false;
            snprintf(r->msg, sizeof r->msg, "%s %s: %.17g vs reference %.17g", c->op, c->shape, rg,
                     rc);
        }
    }
    for (int i = 0; i < nb; i++) {
        ref->ops->free(ref, hp[i]);
        dev->ops->free(dev, dp[i]);
        free(b[i].init);
    }
}
