/* test_backend_ops.c: the CUDA backend against the CPU backend, op by op, through the
 * backend table (kernels/backend.h), in the spirit of ggml's test-backend-ops.
 *
 * One table, dllm_backend_cases (kernels/backend_cases.c, shared with `dllm-rl
 * selftest`), describes every case: the op of the table, its shape, its buffers
 * (inputs, accumulated gradients, outputs) with their contents, and the tolerance of
 * each output. One generic loop runs a case on both backends with the same data and
 * compares:
 *  - normalised MSE, sum (cuda - cpu)^2 / sum cpu^2, per output; the bound is stated per
 *    case: fp32 ops differ only in summation order and libm ulps (1e-9 to 1e-12), FP8
 *    GEMMs by the tensor cores' accumulation (FP8_GEMM_NMSE, kernels/backend_cases.h);
 *    0 means bit for bit (embedding forward, bf16 rounding, add, AdamW);
 *  - guard bytes after every device buffer (a sentinel pattern that must survive);
 *  - no device allocation while the op runs (emulation build: the runtime counts them),
 *    after one warm-up run that lets the backend's workspace grow.
 * Backward ops accumulate: gradient buffers start from the same random values on both
 * sides. tests/unit/backend_kernel_cases.c adds the cases that call kernels/cuda_ops.h
 * directly (FP8 quantisation layouts, cuBLASLt GEMMs, the sampler's x0, ...).
 * The "host" case checks the host half of the shared headers (kernels/cuda/rng_mix.cuh,
 * fp8_codec.cuh) and runs everywhere. The other cases need the CUDA backend: built
 * without it, or with no device at run time, the program prints "SKIP: <why>" and exits
 * 77; in the --enable-cuda-emulation build they run on the host (logic, not speed).
 * Runs by itself too: tests/test_backend_ops (no data files). */
#include "config.h"

#include "kernels/backend.h"
#include "kernels/backend_cases.h"
#include "kernels/base.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/rng_mix.cuh"
#include "kernels/cuda_device.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "tests/harness/backend_test_util.h"
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

/* ---- the supports query and the CPU-only entries (runs everywhere) ------------------- */

static void no_op_free(dllm_backend *be, void *p) { (void)be, (void)p; }
static bool no_prepare(dllm_backend *be, dllm_qact *qa, int N, int C, const dllm_lin_weight *ws,
                       int nw)
{
    (void)be, (void)qa, (void)N, (void)C, (void)ws, (void)nw;
    return false;
}
static void no_rmsnorm_q(dllm_backend *be, float *out, float *rstd, const dllm_qact *qa,
                           const float *inp, const float *w, int N, int C, float eps)
{
    (void)be, (void)out, (void)rstd, (void)qa, (void)inp, (void)w, (void)N, (void)C, (void)eps;
}
static void no_swiglu_q(dllm_backend *be, float *out, const dllm_qact *qa, const float *gate,
                          const float *up, int N, int H)
{
    (void)be, (void)out, (void)qa, (void)gate, (void)up, (void)N, (void)H;
}

START_TEST(test_supports_query)
{
    /* the CPU backend: the low-precision linears and the grouped linears, no fused
     * quantising producers */
    dllm_backend *cpu = dllm_backend_cpu();
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_BF16_LINEAR));
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_NVFP4_LINEAR));
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_INT8_LINEAR));
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_LINEARS));
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_AR_NUCLEUS));
    ck_assert(!dllm_backend_supports(cpu, DLLM_OP_FUSED_ACT));
    for (int op = 0; op < DLLM_OP_N_OPTIONAL; op++) /* every optional op has its name */
        ck_assert_str_ne(dllm_backend_op_name((dllm_backend_op)op), "?");
    ck_assert(!dllm_backend_supports(NULL, DLLM_OP_BF16_LINEAR));
    ck_assert(!dllm_backend_supports(cpu, DLLM_OP_N_OPTIONAL));
    ck_assert_str_eq(dllm_backend_op_name(DLLM_OP_LINEARS), "linears_fwd");
    /* a table with three of the four fused entries does not support the group */
    dllm_backend_ops ops = {0};
    ops.free = no_op_free;
    ops.act_quant_prepare = no_prepare;
    ops.rmsnorm_quant_fwd = no_rmsnorm_q;
    ops.swiglu_quant_fwd = no_swiglu_q;
    dllm_backend part = {DLLM_BACKEND_CPU, "partial", &ops, NULL};
    ck_assert(!dllm_backend_supports(&part, DLLM_OP_FUSED_ACT));
    ck_assert(!dllm_backend_supports(&part, DLLM_OP_BF16_LINEAR));
    ops.linear_quant_act_fwd = cpu->ops->linear_quant_act_fwd; /* NULL on the CPU: still not */
    ck_assert(!dllm_backend_supports(&part, DLLM_OP_FUSED_ACT));
}
END_TEST

/* The CPU's gemm_bf16 is the fp32 GEMM of operands rounded to bf16, bit for bit, and not
 * the fp32 GEMM of the operands as given (the device's is checked against it in the
 * table-driven cases). */
START_TEST(test_gemm_bf16_rounds)
{
    dllm_backend *cpu = dllm_backend_cpu();
    enum { M = 19, N = 23, K = 40 };
    static float A[M * K], B[K * N], Ar[M * K], Br[K * N], C0[M * N], C1[M * N], C2[M * N];
    dllm_rng rng = dllm_rng_make(7, 0, 0, 0);
    for (int i = 0; i < M * K; i++)
        A[i] = (float)dllm_rng_normal(&rng);
    for (int i = 0; i < K * N; i++)
        B[i] = (float)dllm_rng_normal(&rng);
    for (int i = 0; i < M * N; i++)
        C0[i] = C1[i] = C2[i] = (float)dllm_rng_normal(&rng);
    op_round_bf16_copy(Ar, A, M * K);
    op_round_bf16_copy(Br, B, K * N);
    for (int t = 0; t < 4; t++) { /* every transpose pair (the same buffers reinterpreted) */
        bool tA = t & 1, tB = t & 2;
        memcpy(C1, C0, sizeof C0);
        memcpy(C2, C0, sizeof C0);
        cpu->ops->gemm_bf16(cpu, tA, tB, M, N, K, 0.5f, A, B, 1.0f, C1);
        op_gemm(tA, tB, M, N, K, 0.5f, Ar, Br, 1.0f, C2);
        ck_assert_msg(memcmp(C1, C2, sizeof C1) == 0, "transposes %d: not the rounded GEMM", t);
        op_gemm(tA, tB, M, N, K, 0.5f, A, B, 1.0f, C2);
        ck_assert_msg(memcmp(C1, C2, sizeof C1) != 0, "transposes %d: nothing rounded", t);
    }
}
END_TEST

/* linears_fwd through the table is bit for bit the single-weight calls of each format
 * (FP8 block, NVFP4 16-blocks and per-channel, INT8 per-channel and 128-blocks, bf16),
 * and weight_cache_free drops the caches those calls made (the weights' own arrays
 * stay). C = 300: INT8's last k-block and NVFP4's blocks end short of C. */
enum { LIN_FMT_FP8, LIN_FMT_NVFP4, LIN_FMT_NVFP4_CH, LIN_FMT_INT8, LIN_FMT_INT8_BLK, LIN_FMT_BF16,
       LIN_FMT_N };
START_TEST(test_cpu_linears_entry)
{
    dllm_backend *cpu = dllm_backend_cpu();
    enum { N = 5, C = 300, NW = 3 };
    const int OC[NW] = {32, 16, 136};
    dllm_rng r = dllm_rng_make(11, 1, 2, (uint64_t)_i);
    float *x = dllm_malloc(sizeof(float) * N * C);
    for (int i = 0; i < N * C; i++)
        x[i] = (float)(dllm_rng_uniform(&r) - 0.5);
    x[7] = 40.0f; /* one outlier: its token's and group's scales differ from the rest */
    fp8_matrix f8[NW] = {{0}};
    nvfp4_matrix f4[NW] = {{0}};
    int8_matrix i8[NW] = {{0}};
    bf16_matrix b16[NW] = {{0}};
    dllm_lin_weight w[NW] = {{0}};
    float *grp[NW], *one[NW];
    for (int k = 0; k < NW; k++) {
        float *wf = dllm_malloc(sizeof *wf * (size_t)OC[k] * C);
        for (int i = 0; i < OC[k] * C; i++)
            wf[i] = (float)(dllm_rng_uniform(&r) - 0.5) * 0.2f;
        dllm_err err;
        switch (_i) {
        case LIN_FMT_FP8:
            ck_assert_int_eq(fp8_quantise_weight(&f8[k], wf, OC[k], C, FP8_E4M3,
                                                 FP8_SCALE_BLOCK, false, &err), 0);
            f8[k].act_scaling = FP8_SCALE_GROUP;
            w[k].f8 = &f8[k];
            break;
        case LIN_FMT_NVFP4:
        case LIN_FMT_NVFP4_CH:
            ck_assert_int_eq(nvfp4_quantise_scaled(&f4[k], wf, OC[k], C,
                                                   _i == LIN_FMT_NVFP4 ? NVFP4_SCALE_BLOCK16
                                                                       : NVFP4_SCALE_CHANNEL,
                                                   &err), 0);
            w[k].f4 = &f4[k];
            break;
        case LIN_FMT_INT8:
        case LIN_FMT_INT8_BLK:
            ck_assert_int_eq(int8_quantise_weight(&i8[k], wf, OC[k], C,
                                                  _i == LIN_FMT_INT8 ? INT8_SCALE_CHANNEL
                                                                     : INT8_SCALE_BLOCK,
                                                  &err), 0);
            w[k].i8 = &i8[k];
            break;
        default:
            bf16_matrix_pack(&b16[k], wf, OC[k], C);
            w[k].b16 = &b16[k];
        }
        free(wf);
        grp[k] = dllm_malloc(sizeof(float) * N * (size_t)OC[k]);
        one[k] = dllm_malloc(sizeof(float) * N * (size_t)OC[k]);
    }
    cpu->ops->linears_fwd(cpu, NW, grp, x, w, N, C, OC);
    for (int k = 0; k < NW; k++) {
        if (w[k].f8)
            cpu->ops->fp8_linear_fwd(cpu, one[k], x, w[k].f8, N, C, OC[k]);
        else if (w[k].f4)
            cpu->ops->nvfp4_linear_fwd(cpu, one[k], x, w[k].f4, N, C, OC[k]);
        else if (w[k].i8)
            cpu->ops->int8_linear_fwd(cpu, one[k], x, w[k].i8, N, C, OC[k]);
        else
            cpu->ops->bf16_linear_fwd(cpu, one[k], x, w[k].b16, N, C, OC[k]);
        ck_assert_msg(memcmp(grp[k], one[k], sizeof(float) * N * (size_t)OC[k]) == 0,
                      "format %d, weight %d: grouped != single", _i, k);
        bool nonzero = false;
        for (int i = 0; i < N * OC[k]; i++)
            nonzero = nonzero || one[k][i] != 0.0f;
        ck_assert(nonzero);
        if (w[k].f8) {
            ck_assert(f8[k].deq_valid); /* the exact path made its dequantised cache */
            cpu->ops->weight_cache_free(cpu, &f8[k], NULL);
            ck_assert(!f8[k].deq && !f8[k].deq_valid && f8[k].q && f8[k].scale);
        }
        fp8_matrix_free(&f8[k]);
        nvfp4_matrix_free(&f4[k]);
        int8_matrix_free(&i8[k]);
        bf16_matrix_free(&b16[k]);
        free(grp[k]);
        free(one[k]);
    }
    free(x);
}
END_TEST

START_TEST(test_cpu_weight_cache_free_bf16)
{
    dllm_backend *cpu = dllm_backend_cpu();
    enum { N = 5, C = 64 };
    float x[N * C];
    for (int i = 0; i < N * C; i++)
        x[i] = (float)i / (N * C) - 0.5f;
    bf16_matrix b = {0};
    float wb[4 * C], yb[N * 4];
    for (int i = 0; i < 4 * C; i++)
        wb[i] = (float)i / C;
    bf16_matrix_pack(&b, wb, 4, C);
    cpu->ops->bf16_linear_fwd(cpu, yb, x, &b, N, C, 4);
    cpu->ops->weight_cache_free(cpu, NULL, &b);
    ck_assert(!b.wf32 && !b.wf32_valid && b.w);
    bf16_matrix_free(&b);
}
END_TEST

#ifdef HAVE_CUDA
/* The case table and its cases are kernels/backend_cases.c (dllm_backend_cases: the
 * shapes and tolerances stated there), shared with `dllm-rl selftest`. */

/* ---- the generic loop ------------------------------------------------------------------- */

static void upload_all(const bcase_buf *b, int nb, dbuf *db)
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
    const bcase *c = &dllm_backend_cases[_i];
    dllm_backend *cpu = dllm_backend_cpu(), *gpu = dllm_backend_cuda();
    ck_assert_msg(gpu != NULL, "no CUDA backend: %s", dllm_backend_cuda_why());
    bcase_buf b[BCASE_MAXB];
    int nb = 0;
    c->make(c, b, &nb);
    void *hp[BCASE_MAXB], *dp[BCASE_MAXB];
    dbuf db[BCASE_MAXB];
    for (int i = 0; i < nb; i++) {
        size_t hbytes = bcase_buf_bytes(&b[i], cpu, c), dbytes = bcase_buf_bytes(&b[i], gpu, c);
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
            if (b[i].tol == 0 || b[i].kind != BK_F32) {
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
        "xent", "round_bf16", "add", "adamw", "grad_norm", "copy", "copy_2d", "bias", "to_bf16",
        "fp8_quantise", "bf16_linear_fwd", "clip_grad", "fp8_act", "bf16_linear_bwd_x",
        "adamw_step", "kv_cache", "gemm_bf16", "linear_res_fwd", "rope_attention_fwd",
        "rope_attention_bwd", "bf16_lora_fwd", "bf16_lora_bwd", "pack_weight"};
    /* 8 buffer entries, 31 ops (pack_weight and free_weight: one case name), 3 optional
     * low-precision linears (the CPU's NVFP4 and INT8 ones are checked against their references in test_nvfp4 and test_int8, and
     * by test_precision through the model), the CPU's grouped
     * FP8 linears, the weight-cache release and the 4 optional fused quantising ones (one
     * case name, fp8_act, covers them with FP8; INT8's kernels are
     * backend_kernel_cases.c's test_int8_fused_producers, its model path
     * test_device_model's test_fused_logits); attention (with attn_state_floats), swiglu, xent and
     * bias are cased as forward + backward pairs; the 9 sampler entries (the
     * autoregressive choice, its optional nucleus, the 5 of the denoising step, Dream's 2)
     * are run on both backends by the samplers' own tests (tests/unit/test_qwen3_device.c's
     * fake decoder, tests/unit/test_sampler_device.c; the kernels also in
     * tests/unit/backend_kernel_cases.c); the 2 key/value cache entries (kv_append,
     * attention_cached: one case name, kv_cache, runs both); the 15 Gated DeltaNet entries
     * (optional, all on both backends) are run on both, through this table, by
     * tests/unit/test_gated_delta_device.c; the 3 fused entries (linear_res_fwd: INT8's
     * bit for bit in tests/unit/test_int8_device.c; rope_attention_fwd and its backward);
     * the 2 LoRA linears of a bf16 trainer.
     * A new entry changes the count: add its case above and its name here (a CPU-only
     * entry: its check in the host case). */
    ck_assert_uint_eq(sizeof(dllm_backend_ops) / sizeof(void (*)(void)),
                      8 + 31 + 3 + 1 + 1 + 4 + 9 + 2 + 15 + 3 + 2);
    /* the optional entries (backend.h): the CPU reference has the low-precision linears
     * and the grouped FP8 linears; a device backend without one must leave it NULL (the
     * core then refuses or falls back), never a half-made entry -- a device entry needs
     * its parity case: bf16's is here, INT8's (the device keeps its weight in its own
     * padded layout) is tests/unit/test_int8_device.c, bit for bit against the CPU */
    dllm_backend *cpu = dllm_backend_cpu(), *dev = dllm_backend_cuda();
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_BF16_LINEAR) &&
              dllm_backend_supports(cpu, DLLM_OP_NVFP4_LINEAR) &&
              dllm_backend_supports(cpu, DLLM_OP_INT8_LINEAR) &&
              dllm_backend_supports(cpu, DLLM_OP_LINEARS));
    ck_assert_ptr_nonnull(dev);
    ck_assert(dllm_backend_supports(dev, DLLM_OP_INT8_LINEAR));
    ck_assert(dllm_backend_supports(cpu, DLLM_OP_GATED_DELTA) &&
              dllm_backend_supports(dev, DLLM_OP_GATED_DELTA));
    ck_assert_msg(!dllm_backend_supports(dev, DLLM_OP_NVFP4_LINEAR) &&
                  !dllm_backend_supports(dev, DLLM_OP_LINEARS) &&
                  !dllm_backend_supports(dev, DLLM_OP_AR_NUCLEUS),
                  "a device optional entry has no parity case in this table");
    /* the fused quantising producers: all four on the device, none on the CPU (whose
     * rollout path stays the producer followed by the linear's own quantisation) */
    ck_assert(dllm_backend_supports(dev, DLLM_OP_FUSED_ACT));
    ck_assert(!cpu->ops->act_quant_prepare && !cpu->ops->rmsnorm_quant_fwd &&
              !cpu->ops->swiglu_quant_fwd && !cpu->ops->linear_quant_act_fwd);
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        bool found = false;
        for (size_t k = 0; k < dllm_backend_n_cases; k++)
            found = found || strcmp(dllm_backend_cases[k].op, ops[i]) == 0;
        ck_assert_msg(found, "no case for op %s", ops[i]);
    }
}
END_TEST
#endif /* HAVE_CUDA */

/* ---- the fused forwards against their parts, bit for bit, on one backend ----------- */

static void *put(dllm_backend *be, const void *h, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    be->ops->upload(be, d, h, bytes);
    return d;
}

/* rope_attention_fwd against rope_fwd of q and k in place, then attention_fwd, and
 * rope_attention_bwd against zeroed gradients, attention_bwd, then rope_bwd in place:
 * d = {B, T, NH, NKV, HD, causal, masked} (GQA, masks, causal, rows not a multiple of the
 * tiles, the fp32 kernel at head dim 256) */
static const int ROPE_ATT[][7] = {{2, 45, 4, 2, 16, 0, 1}, {1, 70, 2, 1, 64, 1, 0},
                                  {2, 33, 4, 1, 128, 1, 1}, {1, 20, 2, 1, 256, 1, 1}};

static void check_rope_attention_parts(dllm_backend *be, int i)
{
    const int *d = ROPE_ATT[i];
    const int B = d[0], T = d[1], NH = d[2], NKV = d[3], HD = d[4], N = B * T;
    const size_t nq = (size_t)N * NH * HD, nk = (size_t)N * NKV * HD, tn = (size_t)T * (HD / 2);
    op_rope_table h;
    op_rope_table_init(&h, T, HD, 10000.0f);
    float *q = dllm_host_normal(nq, 81, 1.0), *k = dllm_host_normal(nk, 82, 1.0);
    float *v = dllm_host_normal(nk, 83, 1.0);
    int32_t *pos = malloc(sizeof *pos * (size_t)N);
    uint8_t *km = malloc((size_t)N);
    for (int r = 0; r < N; r++) {
        pos[r] = (r * 7 + 3) % T;
        km[r] = !d[6] || r % T >= 2 * (r / T) + 1;
    }
    op_rope_table t = {T, HD / 2, put(be, h.cos, tn * 4), put(be, h.sin, tn * 4)};
    float *dq1 = put(be, q, nq * 4), *dk1 = put(be, k, nk * 4), *dq2 = put(be, q, nq * 4);
    float *dk2 = put(be, k, nk * 4), *dv = put(be, v, nk * 4);
    int32_t *dpos = put(be, pos, (size_t)N * 4);
    uint8_t *dkm = d[6] ? put(be, km, (size_t)N) : NULL;
    size_t ns = be->ops->attn_state_floats(be, B, T, NH);
    float *o1 = be->ops->alloc(be, nq * 4), *o2 = be->ops->alloc(be, nq * 4);
    float *s1 = be->ops->alloc(be, ns * 4), *s2 = be->ops->alloc(be, ns * 4);
    be->ops->rope_attention_fwd(be, o1, s1, dq1, dk1, dv, dpos, &t, dkm, B, T, NH, NKV, HD, d[5]);
    be->ops->rope_fwd(be, dq2, dq2, dpos, &t, N, NH, HD);
    be->ops->rope_fwd(be, dk2, dk2, dpos, &t, N, NKV, HD);
    be->ops->attention_fwd(be, o2, s2, dq2, dk2, dv, dkm, B, T, NH, NKV, HD, d[5]);
    float *a = malloc(nq * 4), *b = malloc(nq * 4);
    be->ops->download(be, a, o1, nq * 4);
    be->ops->download(be, b, o2, nq * 4);
    ck_assert_msg(memcmp(a, b, nq * 4) == 0, "%s: rope_attention_fwd B%d T%d NH%d NKV%d HD%d "
                  "differs from rope then attention", be->name, B, T, NH, NKV, HD);
    float *sa = malloc(ns * 4 + 4), *sb = malloc(ns * 4 + 4);
    be->ops->download(be, sa, s1, ns * 4);
    be->ops->download(be, sb, s2, ns * 4);
    ck_assert_msg(memcmp(sa, sb, ns * 4) == 0, "%s: rope_attention_fwd's state differs",
                  be->name);
    /* the backward against its parts: over stale gradients (it writes them), from q and k
     * as each forward left them */
    float *go = dllm_host_normal(nq, 87, 1.0), *junk = dllm_host_normal(nq, 88, 1.0);
    float *gout = put(be, go, nq * 4);
    float *g1[3] = {put(be, junk, nq * 4), put(be, junk, nk * 4), put(be, junk, nk * 4)};
    float *g2[3] = {be->ops->alloc(be, nq * 4), be->ops->alloc(be, nk * 4),
                    be->ops->alloc(be, nk * 4)};
    be->ops->rope_attention_bwd(be, g1[0], g1[1], g1[2], gout, o1, s1, dq1, dk1, dv, dpos, &t, dkm,
                                B, T, NH, NKV, HD, d[5]);
    be->ops->attention_bwd(be, g2[0], g2[1], g2[2], gout, o2, s2, dq2, dk2, dv, dkm, B, T, NH, NKV,
                           HD, d[5]);
    be->ops->rope_bwd(be, g2[0], g2[0], dpos, &t, N, NH, HD);
    be->ops->rope_bwd(be, g2[1], g2[1], dpos, &t, N, NKV, HD);
    const char *gn[3] = {"dq", "dk", "dv"};
    for (int j = 0; j < 3; j++) {
        size_t n = j ? nk : nq;
        be->ops->download(be, a, g1[j], n * 4);
        be->ops->download(be, b, g2[j], n * 4);
        ck_assert_msg(memcmp(a, b, n * 4) == 0, "%s: rope_attention_bwd B%d T%d NH%d NKV%d HD%d: "
                      "%s differs from zeroing, attention_bwd, then rope_bwd", be->name, B, T, NH,
                      NKV, HD, gn[j]);
    }
    for (int j = 0; j < 3; j++)
        be->ops->free(be, g1[j]), be->ops->free(be, g2[j]);
    be->ops->free(be, gout);
    free(go), free(junk);
    void *all[] = {t.cos, t.sin, dq1, dk1, dq2, dk2, dv, dpos, dkm, o1, o2, s1, s2};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++)
        if (all[j])
            be->ops->free(be, all[j]);
    op_rope_table_free(&h);
    free(q), free(k), free(v), free(pos), free(km), free(a), free(b), free(sa), free(sb);
}

/* linear_res_fwd against the format's linear, then add: FP8 block-scaled with rows a
 * multiple of 8 (the epilogue) and not (the padded product), FP8 tensor-scaled, bf16 */
static const int LIN_RES[][4] = {{40, 256, 192, 0}, {37, 256, 192, 0}, {40, 144, 48, 1},
                                 {33, 64, 40, 2}};

static void check_linear_res_parts(dllm_backend *be, int i)
{
    const int N = LIN_RES[i][0], C = LIN_RES[i][1], OC = LIN_RES[i][2], kind = LIN_RES[i][3];
    float *w = dllm_host_normal((size_t)OC * C, 84, 0.05), *x = dllm_host_normal((size_t)N * C, 85, 1.0);
    float *res = dllm_host_normal((size_t)N * OC, 86, 2.0);
    fp8_matrix hm = {0}, dm;
    bf16_matrix hb = {0};
    dllm_lin_weight lw = {0};
    void *dwq = NULL, *dws = NULL;
    if (kind < 2) {
        dllm_err err;
        fp8_scaling sc = kind == 0 ? FP8_SCALE_BLOCK : FP8_SCALE_TENSOR;
        ck_assert_int_eq(fp8_quantise_weight(&hm, w, OC, C, FP8_E4M3, sc, false, &err), 0);
        dm = hm;
        dm.act_scaling = kind == 0 ? FP8_SCALE_GROUP : FP8_SCALE_TENSOR;
        size_t sc_cols = (size_t)hm.scale_cols;
        size_t ld = dllm_backend_fp8_scale_ld(be, sc, OC, C);
        float *sp = calloc((size_t)hm.scale_rows * ld, sizeof *sp);
        for (int r = 0; r < hm.scale_rows; r++)
            memcpy(sp + r * ld, hm.scale + r * sc_cols, sc_cols * sizeof *sp);
        dm.q = dwq = put(be, hm.q, (size_t)OC * C);
        dm.scale = dws = put(be, sp, (size_t)hm.scale_rows * ld * 4);
        dm.scale_ld = (int)ld;
        free(sp);
        lw.f8 = &dm;
    } else {
        uint16_t *wb = malloc((size_t)OC * C * 2);
        op_f32_to_bf16_array(wb, w, (size_t)OC * C);
        hb.rows = OC, hb.cols = C, hb.w = dwq = put(be, wb, (size_t)OC * C * 2);
        free(wb);
        lw.b16 = &hb;
    }
    float *dx = put(be, x, (size_t)N * C * 4), *dres = put(be, res, (size_t)N * OC * 4);
    float *o1 = be->ops->alloc(be, (size_t)N * OC * 4), *o2 = be->ops->alloc(be, (size_t)N * OC * 4);
    be->ops->linear_res_fwd(be, o1, dres, dx, NULL, &lw, N, C, OC);
    if (lw.f8)
        be->ops->fp8_linear_fwd(be, o2, dx, lw.f8, N, C, OC);
    else
        be->ops->bf16_linear_fwd(be, o2, dx, lw.b16, N, C, OC);
    be->ops->add(be, o2, dres, (size_t)N * OC);
    float *a = malloc((size_t)N * OC * 4), *b = malloc((size_t)N * OC * 4);
    be->ops->download(be, a, o1, (size_t)N * OC * 4);
    be->ops->download(be, b, o2, (size_t)N * OC * 4);
    ck_assert_msg(memcmp(a, b, (size_t)N * OC * 4) == 0, "%s: linear_res_fwd N%d C%d OC%d (%s) "
                  "differs from the linear then add", be->name, N, C, OC,
                  kind == 0 ? "fp8 block" : kind == 1 ? "fp8 tensor" : "bf16");
    be->ops->weight_cache_free(be, lw.f8, lw.b16);
    void *all[] = {dwq, dws, dx, dres, o1, o2};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++)
        if (all[j])
            be->ops->free(be, all[j]);
    if (kind < 2)
        fp8_matrix_free(&hm);
    free(w), free(x), free(res), free(a), free(b);
}

enum { N_ROPE_ATT = sizeof ROPE_ATT / sizeof *ROPE_ATT, N_LIN_RES = sizeof LIN_RES / sizeof *LIN_RES };

START_TEST(test_cpu_fused_forwards)
{
    if (_i < N_ROPE_ATT)
        check_rope_attention_parts(dllm_backend_cpu(), _i);
    else
        check_linear_res_parts(dllm_backend_cpu(), _i - N_ROPE_ATT);
}
END_TEST

#ifdef HAVE_CUDA
/* The device's fused forwards give its own unfused results bit for bit: the rotation is the
 * RoPE kernel's (kernels/cuda/rope.cuh), and the epilogue's acc + C is the add's one rounding. */
START_TEST(test_device_fused_forwards)
{
    dllm_backend *be = dllm_backend_cuda();
    if (_i < N_ROPE_ATT)
        check_rope_attention_parts(be, _i);
    else
        check_linear_res_parts(be, _i - N_ROPE_ATT);
}
END_TEST
#endif

static Suite *backend_suite(bool gpu)
{
    Suite *s = suite_create("backend_ops");
    TCase *th = tcase_create("host");
    tcase_add_test(th, test_host_shared_headers);
    tcase_add_test(th, test_supports_query);
    tcase_add_test(th, test_gemm_bf16_rounds);
    tcase_add_loop_test(th, test_cpu_linears_entry, 0, LIN_FMT_N);
    tcase_add_test(th, test_cpu_weight_cache_free_bf16);
    tcase_add_loop_test(th, test_cpu_fused_forwards, 0, N_ROPE_ATT + N_LIN_RES);
    suite_add_tcase(s, th);
#ifdef HAVE_CUDA
    if (gpu) {
        TCase *tc = tcase_create("table");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_backend_table_complete);
        tcase_add_loop_test(tc, test_backend_table, 0, (int)dllm_backend_n_cases);
        tcase_add_loop_test(tc, test_device_fused_forwards, 0, N_ROPE_ATT + N_LIN_RES);
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

Suite *tu_suite(tu_ctx *ctx)
{
    dllm_backend *be = dllm_backend_cuda();
    bool gpu = be != NULL;
    if (gpu) {
        char desc[256];
        if (dllm_cuda_device_describe(0, desc, sizeof desc) == 0)
            printf("backend_ops: device 0: %s\n", desc);
    } else {
        tu_partial(ctx, "%s", dllm_backend_cuda_why());
    }
    ctx->nofork = true; /* a CUDA context does not survive into a forked child */
    return backend_suite(gpu);
}
