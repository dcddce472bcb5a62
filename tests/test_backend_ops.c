/* test_backend_ops.c: the CUDA backend against the CPU backend, op by op, through the
 * backend table (kernels/backend.h), in the spirit of ggml's test-backend-ops.
 *
 * One table, CASES, describes every case: the op of the table, its shape, its buffers
 * (inputs, accumulated gradients, outputs) with their contents, and the tolerance of
 * each output. One generic loop runs a case on both backends with the same data and
 * compares:
 *  - normalised MSE, sum (cuda - cpu)^2 / sum cpu^2, per output; the bound is stated per
 *    case: fp32 ops differ only in summation order and libm ulps (1e-9 to 1e-12), FP8
 *    GEMMs by the tensor cores' accumulation (FP8_GEMM_NMSE, tests/backend_test_util.h);
 *    0 means bit for bit (embedding forward, bf16 rounding, add, AdamW);
 *  - guard bytes after every device buffer (a sentinel pattern that must survive);
 *  - no device allocation while the op runs (emulation build: the runtime counts them),
 *    after one warm-up run that lets the backend's workspace grow.
 * Backward ops accumulate: gradient buffers start from the same random values on both
 * sides. tests/backend_kernel_cases.c adds the cases that call kernels/cuda_ops.h
 * directly (FP8 quantisation layouts, cuBLASLt GEMMs, the sampler's x0, ...).
 * The "host" case checks the host half of the shared headers (kernels/cuda/rng_mix.cuh,
 * fp8_codec.cuh) and runs everywhere. The other cases need the CUDA backend: built
 * without it, or with no device at run time, the program prints "SKIP: <why>" and exits
 * 77; in the --enable-cuda-emulation build they run on the host (logic, not speed).
 * Runs by itself too: tests/test_backend_ops (no data files). */
#include "config.h"

#include "kernels/backend.h"
#include "kernels/base.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/rng_mix.cuh"
#include "kernels/cuda_device.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "tests/backend_test_util.h"
#endif
#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"
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
    /* the one draw that would round to u = 1.0 (an infinite Gumbel score) */
    ck_assert(dllm_rng_u01(~0ULL) == 1.0 - 1.0 / 9007199254740992.0);
    ck_assert(dllm_rng_u01(~0ULL) < 1.0 && dllm_rng_u01(0) > 0.0);
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
/* ---- the case table ------------------------------------------------------------------ */

enum { MAXB = 12 };
typedef enum { K_F32, K_I32, K_U8 } bkind;

typedef struct {
    const char *name;
    bkind kind;
    size_t n;        /* elements; for the attention state: from the backend */
    void *init;      /* contents (malloc'd, freed by the loop); NULL = zeros */
    double tol;      /* output: nmse bound, 0 = bit for bit; < 0: not compared */
    bool attn_state; /* sized by attn_state_floats(be, d[0], d[1], d[2]) */
} tbuf;

typedef struct opc opc;
struct opc {
    const char *op;    /* the table entry */
    const char *shape; /* for messages */
    int d[8];          /* shape numbers, meaning per op */
    double tol;        /* nmse bound of the outputs (per op, stated in the table) */
    void (*make)(const opc *c, tbuf *b, int *nb);
    void (*run)(dllm_backend *be, const opc *c, void **p, double *ret);
    double ret_tol; /* relative bound of a scalar result; < 0: none */
};

static size_t kbytes(bkind k) { return k == K_F32 || k == K_I32 ? 4 : 1; }

static int addb(tbuf *b, int *nb, const char *name, bkind k, size_t n, void *init, double tol)
{
    b[*nb] = (tbuf){name, k, n, init, tol, false};
    return (*nb)++;
}
static float *rnd(size_t n, uint64_t seed, double scale) { return host_normal(n, seed, scale); }
static void *dup_bytes(const void *p, size_t bytes)
{
    void *q = dllm_malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

/* gemm: d = {M, N, K, transA, transB}; C = 0.75 op(A) op(B) + 0.5 C */
static void mk_gemm(const opc *c, tbuf *b, int *nb)
{
    size_t M = c->d[0], N = c->d[1], K = c->d[2];
    addb(b, nb, "A", K_F32, M * K, rnd(M * K, 1, 1.0), -1);
    addb(b, nb, "B", K_F32, K * N, rnd(K * N, 2, 1.0), -1);
    addb(b, nb, "C", K_F32, M * N, rnd(M * N, 3, 1.0), c->tol);
}
static void run_gemm(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->gemm(be, c->d[3], c->d[4], c->d[0], c->d[1], c->d[2], 0.75f, p[0], p[1], 0.5f, p[2]);
}

/* linear: d = {N, C, OC} */
static void mk_linear_fwd(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    addb(b, nb, "inp", K_F32, N * C, rnd(N * C, 4, 1.0), -1);
    addb(b, nb, "w", K_F32, OC * C, rnd(OC * C, 5, 0.2), -1);
    addb(b, nb, "out", K_F32, N * OC, NULL, c->tol);
}
static void run_linear_fwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->linear_fwd(be, p[2], p[0], p[1], c->d[0], c->d[1], c->d[2]);
}
static void mk_linear_bwd(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    addb(b, nb, "inp", K_F32, N * C, rnd(N * C, 6, 1.0), -1);
    addb(b, nb, "w", K_F32, OC * C, rnd(OC * C, 7, 0.2), -1);
    addb(b, nb, "dout", K_F32, N * OC, rnd(N * OC, 8, 1.0), -1);
    addb(b, nb, "dinp", K_F32, N * C, rnd(N * C, 9, 0.1), c->tol);
    addb(b, nb, "dw", K_F32, OC * C, rnd(OC * C, 10, 0.1), c->tol);
}
static void run_linear_bwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->linear_bwd(be, p[3], p[4], p[2], p[0], p[1], c->d[0], c->d[1], c->d[2]);
}

/* fp8_linear_fwd: d = {N, C, OC, weight scaling, activation scaling}; E4M3 */
static void mk_fp8_linear(const opc *c, tbuf *b, int *nb)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    float *w = rnd((size_t)OC * C, 11, 0.05), *a = rnd((size_t)N * C, 12, 1.0);
    for (size_t i = 0; i < (size_t)N * C; i += 131)
        a[i] *= 30.0f; /* outliers: groups get different scales */
    fp8_matrix m = {0};
    dllm_err err;
    ck_assert_int_eq(fp8_quantise_weight(&m, w, OC, C, FP8_E4M3, (fp8_scaling)c->d[3], false,
                                         &err), 0);
    size_t ns = (size_t)m.scale_rows * m.scale_cols;
    addb(b, nb, "w.q", K_U8, (size_t)OC * C, dup_bytes(m.q, (size_t)OC * C), -1);
    addb(b, nb, "w.scale", K_F32, ns, dup_bytes(m.scale, ns * 4), -1);
    addb(b, nb, "inp", K_F32, (size_t)N * C, a, -1);
    addb(b, nb, "out", K_F32, (size_t)N * OC, NULL, c->tol);
    fp8_matrix_free(&m);
    free(w);
}
static void run_fp8_linear(dllm_backend *be, const opc *c, void **p, double *ret)
{
    int N = c->d[0], C = c->d[1], OC = c->d[2];
    fp8_matrix w = {0};
    w.rows = OC, w.cols = C, w.format = FP8_E4M3, w.scaling = (fp8_scaling)c->d[3];
    fp8_block_shape(w.scaling, OC, C, &w.block_rows, &w.block_cols);
    w.scale_rows = (OC + w.block_rows - 1) / w.block_rows;
    w.scale_cols = (C + w.block_cols - 1) / w.block_cols;
    w.q = p[0], w.scale = p[1], w.act_scaling = (fp8_scaling)c->d[4];
    be->ops->fp8_linear_fwd(be, p[3], p[2], &w, N, C, OC);
    if (be->kind == DLLM_BACKEND_CPU)
        free(w.deq); /* the CPU's dequantised cache */
}

/* bf16_linear_fwd: d = {N, C, OC}; the weight packed as bf16 bits */
static void mk_bf16_linear(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    float *w = rnd(OC * C, 61, 0.2);
    uint16_t *wb = dllm_malloc(OC * C * 2);
    op_f32_to_bf16_array(wb, w, OC * C);
    free(w);
    addb(b, nb, "w", K_U8, OC * C * 2, wb, -1);
    addb(b, nb, "inp", K_F32, N * C, rnd(N * C, 62, 1.0), -1);
    addb(b, nb, "out", K_F32, N * OC, NULL, c->tol);
}
static void run_bf16_linear(dllm_backend *be, const opc *c, void **p, double *ret)
{
    bf16_matrix w = {.rows = c->d[2], .cols = c->d[1], .w = p[0]};
    be->ops->bf16_linear_fwd(be, p[2], p[1], &w, c->d[0], c->d[1], c->d[2]);
    if (be->kind == DLLM_BACKEND_CPU)
        free(w.wf32); /* the CPU's widened cache */
}

/* to_bf16: d = {n} */
static void mk_to_bf16(const opc *c, tbuf *b, int *nb)
{
    size_t n = (size_t)c->d[0];
    float *x = rnd(n, 63, 3.0);
    x[0] = NAN, x[1] = INFINITY, x[2] = -0.0f, x[3] = 1e-40f; /* the special values */
    addb(b, nb, "inp", K_F32, n, x, -1);
    addb(b, nb, "out", K_U8, n * 2, NULL, 0);
}
static void run_to_bf16(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->to_bf16(be, p[1], p[0], (size_t)c->d[0]);
}

/* fp8_quantise: d = {R, C, scaling, format, pow2} */
static void mk_fp8_quantise(const opc *c, tbuf *b, int *nb)
{
    int R = c->d[0], C = c->d[1], br, bc;
    fp8_block_shape((fp8_scaling)c->d[2], R, C, &br, &bc);
    size_t ns = (size_t)((R + br - 1) / br) * ((C + bc - 1) / bc);
    float *x = rnd((size_t)R * C, 64, 0.05);
    for (size_t i = 0; i < (size_t)R * C; i += 97)
        x[i] *= 40.0f; /* outliers: blocks get different scales */
    addb(b, nb, "x", K_F32, (size_t)R * C, x, -1);
    addb(b, nb, "q", K_U8, (size_t)R * C, NULL, 0);
    addb(b, nb, "scale", K_F32, ns, NULL, 0);
}
static void run_fp8_quantise(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->fp8_quantise(be, p[1], p[2], p[0], c->d[0], c->d[1], (fp8_format)c->d[3],
                          (fp8_scaling)c->d[2], c->d[4]);
}

/* rmsnorm: d = {N, C} */
static void mk_rmsnorm_fwd(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1];
    addb(b, nb, "inp", K_F32, N * C, rnd(N * C, 13, 1.5), -1);
    addb(b, nb, "w", K_F32, C, rnd(C, 14, 1.0), -1);
    addb(b, nb, "out", K_F32, N * C, NULL, c->tol);
    addb(b, nb, "rstd", K_F32, N, NULL, c->tol);
}
static void run_rmsnorm_fwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->rmsnorm_fwd(be, p[2], p[3], p[0], p[1], c->d[0], c->d[1], 1e-5f);
}
static void mk_rmsnorm_bwd(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], C = c->d[1];
    float *x = rnd(N * C, 15, 1.5), *w = rnd(C, 16, 1.0), *rstd = dllm_malloc(N * 4);
    float *out = dllm_malloc(N * C * 4);
    op_rmsnorm_fwd(out, rstd, x, w, (int)N, (int)C, 1e-5f);
    free(out);
    addb(b, nb, "inp", K_F32, N * C, x, -1);
    addb(b, nb, "w", K_F32, C, w, -1);
    addb(b, nb, "rstd", K_F32, N, rstd, -1);
    addb(b, nb, "dout", K_F32, N * C, rnd(N * C, 17, 1.0), -1);
    addb(b, nb, "dinp", K_F32, N * C, rnd(N * C, 18, 0.1), c->tol);
    addb(b, nb, "dw", K_F32, C, rnd(C, 19, 0.1), c->tol);
}
static void run_rmsnorm_bwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->rmsnorm_bwd(be, p[4], p[5], p[3], p[0], p[1], p[2], c->d[0], c->d[1]);
}

/* rope: d = {N, NH, HD, max_pos, in place (bwd)} */
static void mk_rope(const opc *c, tbuf *b, int *nb)
{
    int N = c->d[0], NH = c->d[1], HD = c->d[2], MAXP = c->d[3];
    size_t n = (size_t)N * NH * HD, tn = (size_t)MAXP * (HD / 2);
    op_rope_table t;
    op_rope_table_init(&t, MAXP, HD, 10000.0f);
    int32_t *pos = dllm_malloc((size_t)N * 4);
    dllm_rng r = dllm_rng_make(20, 0, 0, 0);
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)dllm_rng_below(&r, (uint64_t)MAXP);
    addb(b, nb, "pos", K_I32, (size_t)N, pos, -1);
    addb(b, nb, "cos", K_F32, tn, dup_bytes(t.cos, tn * 4), -1);
    addb(b, nb, "sin", K_F32, tn, dup_bytes(t.sin, tn * 4), -1);
    addb(b, nb, "inp", K_F32, n, rnd(n, 21, 1.0), c->d[4] ? c->tol : -1); /* in place: out */
    addb(b, nb, "out", K_F32, n, rnd(n, 22, 0.3), c->tol);
    op_rope_table_free(&t);
}
static op_rope_table rope_of(const opc *c, void **p)
{
    op_rope_table t = {c->d[3], c->d[2] / 2, p[1], p[2]};
    return t;
}
static void run_rope_fwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    op_rope_table t = rope_of(c, p);
    be->ops->rope_fwd(be, p[4], p[3], p[0], &t, c->d[0], c->d[1], c->d[2]);
}
static void run_rope_bwd(dllm_backend *be, const opc *c, void **p, double *ret)
{
    op_rope_table t = rope_of(c, p);
    be->ops->rope_bwd(be, c->d[4] ? p[3] : p[4], p[3], p[0], &t, c->d[0], c->d[1], c->d[2]);
}

/* attention forward then backward: d = {B, T, NH, NKV, HD, causal, masked} */
static void mk_attention(const opc *c, tbuf *b, int *nb)
{
    int B = c->d[0], T = c->d[1], NH = c->d[2], NKV = c->d[3], HD = c->d[4];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    uint8_t *km = dllm_malloc((size_t)B * T);
    for (int bb = 0; bb < B; bb++)
        for (int t = 0; t < T; t++) /* left padding of 3b positions; sequence 1 all padding */
            km[(size_t)bb * T + t] = !c->d[6] || (bb != 1 && t >= bb * 3);
    addb(b, nb, "q", K_F32, nq, rnd(nq, 23, 1.0), -1);
    addb(b, nb, "k", K_F32, nk, rnd(nk, 24, 1.0), -1);
    addb(b, nb, "v", K_F32, nk, rnd(nk, 25, 1.0), -1);
    addb(b, nb, "keymask", K_U8, (size_t)B * T, km, -1);
    addb(b, nb, "out", K_F32, nq, NULL, c->tol / 10); /* the forward is 10x tighter */
    int s = addb(b, nb, "state", K_F32, 0, NULL, -1);
    b[s].attn_state = true;
    addb(b, nb, "dout", K_F32, nq, rnd(nq, 26, 1.0), -1);
    addb(b, nb, "dq", K_F32, nq, rnd(nq, 27, 0.1), c->tol);
    addb(b, nb, "dk", K_F32, nk, rnd(nk, 28, 0.1), c->tol);
    addb(b, nb, "dv", K_F32, nk, rnd(nk, 29, 0.1), c->tol);
}
static void run_attention(dllm_backend *be, const opc *c, void **p, double *ret)
{
    const int *d = c->d;
    const uint8_t *km = d[6] ? p[3] : NULL;
    be->ops->attention_fwd(be, p[4], p[5], p[0], p[1], p[2], km, d[0], d[1], d[2], d[3], d[4],
                           d[5]);
    be->ops->attention_bwd(be, p[7], p[8], p[9], p[6], p[4], p[5], p[0], p[1], p[2], km, d[0],
                           d[1], d[2], d[3], d[4], d[5]);
}

/* swiglu: d = {n} */
static void mk_swiglu(const opc *c, tbuf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "gate", K_F32, n, rnd(n, 30, 3.0), -1);
    addb(b, nb, "up", K_F32, n, rnd(n, 31, 1.0), -1);
    addb(b, nb, "out", K_F32, n, NULL, c->tol);
    addb(b, nb, "dout", K_F32, n, rnd(n, 32, 1.0), -1);
    addb(b, nb, "dgate", K_F32, n, rnd(n, 33, 0.1), c->tol);
    addb(b, nb, "dup", K_F32, n, rnd(n, 34, 0.1), c->tol);
}
static void run_swiglu(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->swiglu_fwd(be, p[2], p[0], p[1], (size_t)c->d[0]);
    be->ops->swiglu_bwd(be, p[4], p[5], p[3], p[0], p[1], (size_t)c->d[0]);
}

/* embedding: d = {N, C, V, backward}; few distinct ids, so rows repeat (atomics) */
static void mk_embedding(const opc *c, tbuf *b, int *nb)
{
    int N = c->d[0], C = c->d[1], V = c->d[2];
    int32_t *ids = dllm_malloc((size_t)N * 4);
    dllm_rng r = dllm_rng_make(35, 0, 0, 0);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)dllm_rng_below(&r, 12) * (V / 12);
    addb(b, nb, "ids", K_I32, (size_t)N, ids, -1);
    addb(b, nb, "wte", K_F32, (size_t)V * C, rnd((size_t)V * C, 36, 1.0), c->d[3] ? c->tol : -1);
    addb(b, nb, "out", K_F32, (size_t)N * C, rnd((size_t)N * C, 37, 1.0), c->d[3] ? -1 : c->tol);
}
static void run_embedding(dllm_backend *be, const opc *c, void **p, double *ret)
{
    if (c->d[3]) /* dwte (in "wte") += dout (in "out") */
        be->ops->embedding_bwd(be, p[1], p[2], p[0], c->d[0], c->d[1]);
    else
        be->ops->embedding_fwd(be, p[2], p[0], p[1], c->d[0], c->d[1]);
}

/* xent forward then backward: d = {N, V, backward without the saved lse} */
static void mk_xent(const opc *c, tbuf *b, int *nb)
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
    addb(b, nb, "logits", K_F32, nv, lg, -1);
    addb(b, nb, "target", K_I32, (size_t)N, tg, -1);
    addb(b, nb, "logp", K_F32, (size_t)N, NULL, c->tol / 10);
    addb(b, nb, "lse", K_F32, (size_t)N, NULL, c->tol / 10);
    addb(b, nb, "dlogp", K_F32, (size_t)N, dlogp, -1);
    addb(b, nb, "dlogits", K_F32, nv, rnd(nv, 40, 0.01), c->tol);
}
static void run_xent(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->xent_fwd(be, p[2], p[3], p[0], p[1], c->d[0], c->d[1]);
    be->ops->xent_bwd(be, p[5], p[4], p[0], c->d[2] ? NULL : p[3], p[1], c->d[0], c->d[1]);
}

/* round_bf16, add: d = {n} */
static void mk_round_bf16(const opc *c, tbuf *b, int *nb)
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
    addb(b, nb, "x", K_F32, n, x, 0);
}
static void run_round_bf16(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->round_bf16(be, p[0], (size_t)c->d[0]);
}
static void mk_add(const opc *c, tbuf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "y", K_F32, n, rnd(n, 43, 1.0), 0);
    addb(b, nb, "x", K_F32, n, rnd(n, 44, 1.0), -1);
}
static void run_add(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->add(be, p[0], p[1], (size_t)c->d[0]);
}

/* copy: d = {n floats}; device to device */
static void mk_copy(const opc *c, tbuf *b, int *nb)
{
    size_t n = c->d[0];
    addb(b, nb, "dst", K_F32, n, rnd(n, 51, 1.0), 0);
    addb(b, nb, "src", K_F32, n, rnd(n, 52, 1.0), -1);
}
static void run_copy(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->copy(be, p[0], p[1], (size_t)c->d[0] * sizeof(float));
}

/* bias rows: d = {N, OC}; out += bias per row, dbias += column sums in row order */
static void mk_bias(const opc *c, tbuf *b, int *nb)
{
    size_t N = c->d[0], OC = c->d[1];
    addb(b, nb, "out", K_F32, N * OC, rnd(N * OC, 53, 1.0), 0);
    addb(b, nb, "bias", K_F32, OC, rnd(OC, 54, 0.5), -1);
    addb(b, nb, "dbias", K_F32, OC, rnd(OC, 55, 0.1), 0);
    addb(b, nb, "dout", K_F32, N * OC, rnd(N * OC, 56, 1.0), -1);
}
static void run_bias(dllm_backend *be, const opc *c, void **p, double *ret)
{
    be->ops->bias_fwd(be, p[0], p[1], c->d[0], c->d[1]);
    be->ops->bias_bwd(be, p[2], p[3], c->d[0], c->d[1]);
}

/* adamw, three steps: d = {n, b1 x 100} (b1 0.9 and 0.3: both lerp branches) */
static void mk_adamw(const opc *c, tbuf *b, int *nb)
{
    size_t n = c->d[0];
    float *v = rnd(n, 45, 0.01);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    addb(b, nb, "p", K_F32, n, rnd(n, 46, 1.0), 0);
    addb(b, nb, "g", K_F32, n, rnd(n, 47, 0.05), -1);
    addb(b, nb, "m", K_F32, n, rnd(n, 48, 0.01), 0);
    addb(b, nb, "v", K_F32, n, v, 0);
}
static void run_adamw(dllm_backend *be, const opc *c, void **p, double *ret)
{
    for (int t = 1; t <= 3; t++)
        be->ops->adamw(be, p[0], p[1], p[2], p[3], (size_t)c->d[0], t, 1e-3f,
                       (float)c->d[1] / 100.0f, 0.95f, 1e-8f, 0.1f);
}

/* grad_norm: d = {n}; the result is compared, not a buffer */
static void mk_grad_norm(const opc *c, tbuf *b, int *nb)
{
    addb(b, nb, "g", K_F32, (size_t)c->d[0], rnd((size_t)c->d[0], 49, 0.01), -1);
}
static void run_grad_norm(dllm_backend *be, const opc *c, void **p, double *ret)
{
    *ret = be->ops->grad_norm(be, p[0], (size_t)c->d[0]);
}

#define T_ (FP8_SCALE_TENSOR)
#define BLK_ (FP8_SCALE_BLOCK)
#define GRP_ (FP8_SCALE_GROUP)
#define CH_ (FP8_SCALE_CHANNEL)
/* Tolerances: fp32 GEMMs and layers differ from OpenBLAS in summation order (1e-10);
 * normalisation, rope and activation functions by libm ulps and fp32 block sums; the
 * attention gradients (1e-9) sum over keys in another order than the CPU's [T,T]
 * probabilities; FP8 GEMMs through cuBLASLt by the tensor cores' accumulation
 * (FP8_GEMM_NMSE); the FP8 fallback (no cuBLASLt form: C % 16 != 0, channel scales)
 * multiplies the CPU's own dequantised values in fp32 (1e-10). */
static const opc CASES[] = {
    {"gemm", "NN 37x29x53", {37, 29, 53, 0, 0}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "TN 37x29x53", {37, 29, 53, 1, 0}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "NT 37x29x53", {37, 29, 53, 0, 1}, 1e-10, mk_gemm, run_gemm, -1},
    {"gemm", "TT 64x48x96", {64, 48, 96, 1, 1}, 1e-10, mk_gemm, run_gemm, -1},
    {"linear_fwd", "N33 C48 OC40", {33, 48, 40}, 1e-10, mk_linear_fwd, run_linear_fwd, -1},
    {"linear_bwd", "N33 C48 OC40", {33, 48, 40}, 1e-10, mk_linear_bwd, run_linear_bwd, -1},
    {"fp8_linear_fwd", "tensor N40 C144 OC48", {40, 144, 48, T_, T_}, FP8_GEMM_NMSE(144),
     mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "block/group N40 C256 OC192", {40, 256, 192, BLK_, GRP_},
     FP8_GEMM_NMSE(256), mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "fallback block/group N24 C100 OC40", {24, 100, 40, BLK_, GRP_}, 1e-10,
     mk_fp8_linear, run_fp8_linear, -1},
    {"fp8_linear_fwd", "fallback channel/group N24 C96 OC40", {24, 96, 40, CH_, GRP_}, 1e-10,
     mk_fp8_linear, run_fp8_linear, -1},
    {"bf16_linear_fwd", "cuBLASLt N33 C64 OC40", {33, 64, 40}, 1e-10, mk_bf16_linear,
     run_bf16_linear, -1},
    {"bf16_linear_fwd", "widened N9 C100 OC30", {9, 100, 30}, 1e-10, mk_bf16_linear,
     run_bf16_linear, -1},
    {"to_bf16", "n10007", {10007}, 0, mk_to_bf16, run_to_bf16, -1},
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
    {"attention", "B2 T45 NH4 NKV2 HD16 mask", {2, 45, 4, 2, 16, 0, 1}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B1 T70 NH2 NKV1 HD64 causal", {1, 70, 2, 1, 64, 1, 0}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B2 T33 NH2 NKV2 HD128 mask", {2, 33, 2, 2, 128, 0, 1}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B2 T29 NH4 NKV1 HD40 causal mask", {2, 29, 4, 1, 40, 1, 1}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B1 T20 NH2 NKV2 HD256", {1, 20, 2, 2, 256, 0, 0}, 1e-9, mk_attention, run_attention, -1},
    {"attention", "B3 T100 NH2 NKV2 HD32 causal mask", {3, 100, 2, 2, 32, 1, 1}, 1e-9, mk_attention, run_attention, -1},
    {"swiglu", "n10007", {10007}, 1e-12, mk_swiglu, run_swiglu, -1},
    {"embedding_fwd", "N200 C96 V50", {200, 96, 50, 0}, 0, mk_embedding, run_embedding, -1},
    {"embedding_bwd", "N200 C96 V50", {200, 96, 50, 1}, 1e-12, mk_embedding, run_embedding, -1},
    {"xent", "N13 V5003", {13, 5003, 0}, 1e-10, mk_xent, run_xent, -1},
    {"xent", "N13 V5003, backward recomputes lse", {13, 5003, 1}, 1e-10, mk_xent, run_xent, -1},
    {"round_bf16", "n70000", {70000}, 0, mk_round_bf16, run_round_bf16, -1},
    {"add", "n10007", {10007}, 0, mk_add, run_add, -1},
    {"copy", "n5003", {5003}, 0, mk_copy, run_copy, -1},
    {"bias", "N37 OC200", {37, 200}, 0, mk_bias, run_bias, -1},
    {"bias", "N1 OC7", {1, 7}, 0, mk_bias, run_bias, -1},
    {"adamw", "n30011 b1 0.9", {30011, 90}, 0, mk_adamw, run_adamw, -1},
    {"adamw", "n30011 b1 0.3", {30011, 30}, 0, mk_adamw, run_adamw, -1},
    {"grad_norm", "n300001", {300001}, 0, mk_grad_norm, run_grad_norm, 1e-12},
};
#undef T_
#undef BLK_
#undef GRP_
#undef CH_

/* ---- the generic loop ------------------------------------------------------------------- */

static size_t buf_bytes(const tbuf *b, dllm_backend *be, const opc *c)
{
    if (b->attn_state)
        return be->ops->attn_state_floats(be, c->d[0], c->d[1], c->d[2]) * 4;
    return b->n * kbytes(b->kind);
}

static void upload_all(const tbuf *b, int nb, dbuf *db)
{
    for (int i = 0; i < nb; i++) {
        if (b[i].init)
            dllm_cuda_memcpy_h2d(db[i].d, b[i].init, db[i].bytes);
        else if (db[i].bytes)
            dllm_cuda_memset(db[i].d, 0, db[i].bytes);
    }
}

START_TEST(test_backend_table)
{
    const opc *c = &CASES[_i];
    dllm_backend *cpu = dllm_backend_cpu(), *gpu = dllm_backend_cuda();
    ck_assert_msg(gpu != NULL, "no CUDA backend: %s", dllm_backend_cuda_why());
    tbuf b[MAXB];
    int nb = 0;
    c->make(c, b, &nb);
    void *hp[MAXB], *dp[MAXB];
    dbuf db[MAXB];
    for (int i = 0; i < nb; i++) {
        size_t hbytes = buf_bytes(&b[i], cpu, c), dbytes = buf_bytes(&b[i], gpu, c);
        hp[i] = dllm_calloc(hbytes ? hbytes : 1, 1);
        if (b[i].init)
            memcpy(hp[i], b[i].init, hbytes);
        db[i] = dnew(dbytes, NULL);
        dp[i] = db[i].d;
    }
    upload_all(b, nb, db);
    double rc = 0.0, rg = 0.0;
    c->run(cpu, c, hp, &rc);
    /* a warm-up run lets the backend's workspace grow; the measured run must not allocate */
    c->run(gpu, c, dp, &rg);
    gpu->ops->sync(gpu);
    upload_all(b, nb, db);
#ifdef DLLM_CUDA_EMULATION
    dllm_emu_reset_stats();
#endif
    c->run(gpu, c, dp, &rg);
    gpu->ops->sync(gpu);
#ifdef DLLM_CUDA_EMULATION
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    ck_assert_msg(st.device_allocs == 0, "%s %s: %llu device allocations inside the op", c->op,
                  c->shape, st.device_allocs);
#endif
    for (int i = 0; i < nb; i++) {
        if (b[i].tol >= 0) {
            size_t bytes = db[i].bytes;
            void *g = dllm_malloc(bytes ? bytes : 1);
            gpu->ops->download(gpu, g, dp[i], bytes);
            if (b[i].tol == 0 || b[i].kind != K_F32) {
                ck_assert_msg(memcmp(g, hp[i], bytes) == 0, "%s %s: %s not bit-identical", c->op,
                              c->shape, b[i].name);
            } else {
                double e = nmse(g, hp[i], b[i].n);
                ck_assert_msg(e <= b[i].tol, "%s %s: %s nmse %.3g > %.3g", c->op, c->shape,
                              b[i].name, e, b[i].tol);
            }
            free(g);
        }
        dguard_at(db[i], b[i].name, __LINE__);
    }
    if (c->ret_tol >= 0)
        ck_assert_msg(fabs(rg - rc) <= c->ret_tol * fabs(rc), "%s %s: %.17g vs CPU %.17g", c->op,
                      c->shape, rg, rc);
    for (int i = 0; i < nb; i++) {
        dfree(&db[i]);
        free(hp[i]);
        free(b[i].init);
    }
}
END_TEST

/* Every entry of the table has at least one case (a new op must get one). */
START_TEST(test_backend_table_complete)
{
    static const char *const ops[] = {
        "gemm", "linear_fwd", "linear_bwd", "fp8_linear_fwd", "rmsnorm_fwd", "rmsnorm_bwd",
        "rope_fwd", "rope_bwd", "attention", "swiglu", "embedding_fwd", "embedding_bwd",
        "xent", "round_bf16", "add", "adamw", "grad_norm", "copy", "bias", "to_bf16",
        "fp8_quantise", "bf16_linear_fwd"};
    /* 6 buffer entries, 26 ops and 2 optional ones; attention (with attn_state_floats),
     * swiglu, xent and bias are cased as forward + backward pairs. A new entry changes the
     * count: add its case above and its name here. */
    ck_assert_uint_eq(sizeof(dllm_backend_ops) / sizeof(void (*)(void)), 6 + 26 + 2);
    /* the optional low-precision linears (backend.h): the CPU reference has them; a
     * device backend without one must leave it NULL (the core then refuses or falls
     * back), never a half-made entry -- a device entry needs its case here (bf16 has) */
    dllm_backend *cpu = dllm_backend_cpu(), *dev = dllm_backend_cuda();
    ck_assert(cpu->ops->bf16_linear_fwd && cpu->ops->nvfp4_linear_fwd);
    ck_assert_ptr_nonnull(dev);
    ck_assert_msg(!dev->ops->nvfp4_linear_fwd,
                  "a device low-precision linear has no parity case in this table");
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        bool found = false;
        for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++)
            found = found || strcmp(CASES[k].op, ops[i]) == 0;
        ck_assert_msg(found, "no case for op %s", ops[i]);
    }
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
        TCase *tc = tcase_create("table");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_backend_table_complete);
        tcase_add_loop_test(tc, test_backend_table, 0, (int)(sizeof CASES / sizeof *CASES));
        suite_add_tcase(s, tc);
        TCase *tk = tcase_create("kernels");
        tcase_set_timeout(tk, 300);
        backend_kernel_cases_add(tk);
        suite_add_tcase(s, tk);
    }
#else
    (void)gpu;
#endif
    return s;
}

int main(void)
{
    dllm_backend *be = dllm_backend_cuda();
    bool gpu = be != NULL;
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
        printf("SKIP: %s\n", dllm_backend_cuda_why());
        return 77;
    }
    return EXIT_SUCCESS;
}
