/* backend_cuda.cu: the CUDA backend -- device memory and the kernels of kernels/cuda/
 * behind the backend table (kernels/backend.h).
 *
 * Every pointer an op receives is device memory, including the arrays inside the
 * structs it is given: op_rope_table's cos/sin and fp8_matrix's q/scale (128x128 block
 * scales in cuBLASLt's padded layout, written so by fp8_quantise once per weight sync:
 * dllm_backend_fp8_scale_ld; other scales in the CPU layout). Ops run on the legacy
 * default stream in call order.
 * Scratch memory (rmsnorm's dw partial sums, attention's row dots, the quantised
 * activations of fp8_linear, a norm's accumulator) is the backend's own workspace,
 * grown between ops when a larger one is needed and never allocated per call, so a
 * memory budget sees it (dllm_backend_cuda_workspace_bytes).
 * The attention state is the forward's log-sum-exp [B,NH,T].
 * fp8_linear_fwd runs cuBLASLt's FP8 GEMM where it applies (tensor x tensor scaling, or
 * 128x128 weight blocks x 1x128 activation groups; C and OC multiples of 16) and
 * otherwise the CPU's definition on the device (dequantised operands, fp32 GEMM). Block
 * scaling without the library's block-scaled GEMMs (cuBLAS < 12.9.1, not sm_90) is refused
 * with exit status 2, not run dequantised. A block-scaled GEMM takes its token count padded
 * to a multiple of 8: the activation codes and scales are laid out for the padded count,
 * and an unaligned call writes its product to the workspace and copies the real rows
 * out (each output row depends only on its own activation row, so the padding rows'
 * contents never matter). Where the block-scaled GEMM applies, the rollout
 * forward may hand it activations its producer (RMSNorm, SwiGLU) already quantised: the
 * fused ops at the end of the table. Both formats E5M2 has no cuBLASLt kernel: refused
 * with exit status 2 (rollout.fp8.format: e4m3). An op that fails prints why and exits:
 * the table's ops return nothing. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_device.h"
extern "C" {
#include "kernels/attention_path.h"
#include "kernels/backend.h"
}

#include <climits>
#include <cmath>

namespace {

struct cuda_impl {
    void *ws;         /* device workspace */
    size_t ws_bytes;
    bool block_fp8;   /* block-scaled FP8 GEMMs available */
    void *qa;         /* device: activations quantised by their producer (dllm_qact) */
    size_t qa_bytes;
    unsigned long long up, down; /* bytes through upload / download (the table's only) */
};

cuda_impl g_impl;

/* Workspace of at least bytes; grows (after a sync) only when too small. */
void *ws_get(size_t bytes)
{
    if (bytes <= g_impl.ws_bytes)
        return g_impl.ws;
    size_t nb = g_impl.ws_bytes ? g_impl.ws_bytes : (size_t)1 << 20;
    while (nb < bytes)
        nb *= 2;
    cudaCheck(cudaDeviceSynchronize());
    if (g_impl.ws)
        cudaCheck(cudaFree(g_impl.ws));
    cudaCheck(cudaMalloc(&g_impl.ws, nb));
    g_impl.ws_bytes = nb;
    return g_impl.ws;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

void check_rc(int rc, const dllm_err &err)
{
    if (rc != DLLM_OK) {
        fprintf(stderr, "dllm-rl: cuda backend: %s\n", err.msg);
        exit(rc == DLLM_EXIT_INTERNAL ? 1 : rc);
    }
}

void *cu_alloc(dllm_backend *, size_t bytes)
{
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 1));
    return p;
}
void cu_free(dllm_backend *, void *p)
{
    if (p)
        cudaCheck(cudaFree(p));
}
void cu_upload(dllm_backend *, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    g_impl.up += bytes;
}
void cu_download(dllm_backend *, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    g_impl.down += bytes;
}
void cu_memset0(dllm_backend *, void *p, size_t bytes)
{
    if (bytes)
        cudaCheck(cudaMemset(p, 0, bytes));
}
void cu_sync(dllm_backend *)
{
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaGetLastError());
}

void cu_gemm(dllm_backend *, bool tA, bool tB, int M, int N, int K, float alpha, const float *A,
             const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* C = beta C, as op_gemm with an empty sum */
        fprintf(stderr, "dllm-rl: cuda backend: gemm with K=%d\n", K);
        exit(1);
    }
    dllm_err err = {};
    check_rc(dllm_cuda_gemm_f32(tA, tB, M, N, K, alpha, A, B, beta, C, NULL, &err), err);
}
/* bf16 operands, fp32 sums: both rounded into the workspace for cuBLASLt's BF16 GEMM where
 * its 16-byte rules hold (the leading dimensions of A and B multiples of 8, of C of 4, C
 * aligned), otherwise rounded fp32 copies through the fp32 GEMM (bf16 x bf16 is exact in
 * fp32: only the summation order differs). */
void cu_gemm_bf16(dllm_backend *be, bool tA, bool tB, int M, int N, int K, float alpha,
                  const float *A, const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        fprintf(stderr, "dllm-rl: cuda backend: gemm_bf16 with K=%d\n", K);
        exit(1);
    }
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    int lda = tA ? M : K, ldb = tB ? K : N;
    if (lda % 8 == 0 && ldb % 8 == 0 && N % 4 == 0 && (uintptr_t)C % 16 == 0) {
        char *ws = (char *)ws_get(align256(na * 2) + align256(nb * 2));
        uint16_t *a16 = (uint16_t *)ws, *b16 = (uint16_t *)(ws + align256(na * 2));
        dllm_cuda_f32_to_bf16(a16, A, na, NULL);
        dllm_cuda_f32_to_bf16(b16, B, nb, NULL);
        dllm_err err = {};
        check_rc(dllm_cuda_gemm_bf16(tA, tB, M, N, K, alpha, a16, b16, beta, C, false, NULL,
                                     &err),
                 err);
        return;
    }
    char *ws = (char *)ws_get(align256(na * 4) + align256(nb * 4));
    float *af = (float *)ws, *bf = (float *)(ws + align256(na * 4));
    cudaCheck(cudaMemcpy(af, A, na * 4, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(bf, B, nb * 4, cudaMemcpyDeviceToDevice));
    dllm_cuda_round_bf16(af, na, NULL);
    dllm_cuda_round_bf16(bf, nb, NULL);
    cu_gemm(be, tA, tB, M, N, K, alpha, af, bf, beta, C);
}
void cu_linear_fwd(dllm_backend *be, float *out, const float *inp, const float *w, int N, int C,
                   int OC)
{
    cu_gemm(be, false, true, N, OC, C, 1.0f, inp, w, 0.0f, out);
}
void cu_linear_bwd(dllm_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                   const float *w, int N, int C, int OC)
{
    if (dinp)
        cu_gemm(be, false, false, N, C, OC, 1.0f, dout, w, 1.0f, dinp);
    if (dw)
        cu_gemm(be, true, false, OC, C, N, 1.0f, dout, inp, 1.0f, dw);
}

/* Whether w takes cuBLASLt's FP8 GEMM (tensor x tensor, or 128x128 blocks x 1x128 groups
 * where block scaling is available; C and OC multiples of 16); *block says which. */
bool fp8_gemm_path(const fp8_matrix *w, int C, int OC, bool *block)
{
    bool tensor = w->scaling == FP8_SCALE_TENSOR && w->act_scaling == FP8_SCALE_TENSOR;
    *block = w->scaling == FP8_SCALE_BLOCK && w->act_scaling == FP8_SCALE_GROUP;
    return (tensor || *block) && C % 16 == 0 && OC % 16 == 0;
}

/* Block scaling needs the library's block-scaled GEMMs: a dequantised fp32 GEMM in their
 * place would be 20-40x slower, so it is refused (the model's move to the device refuses
 * it first, dllm_backend_fp8_block_ok) */
void fp8_require_block(const fp8_matrix *w)
{
    if (w->scaling != FP8_SCALE_BLOCK || g_impl.block_fp8)
        return;
    char why[256];
    dllm_cuda_fp8_block_scaling_available(why, sizeof why);
    fprintf(stderr, "dllm-rl: rollout.fp8.scaling: block: %s; use rollout.fp8.scaling: tensor "
                    "or a newer CUDA toolkit\n", why);
    exit(2);
}

/* The token count a block-scaled GEMM runs over (kernels/cuda/gemm_cublaslt.cu) */
int fp8_rows(int N, bool block) { return block ? (N + 7) / 8 * 8 : N; }

/* The GEMM over activations quantised for Np = fp8_rows(N, block) tokens, reading the
 * weight's scales where they are (block: cuBLASLt's padded layout, as fp8_quantise stored
 * them; tensor: the one scale). Np > N: the product goes to pad (Np x OC floats of
 * workspace) and its first N rows are copied to out. res (N x OC, or NULL) is added: in the
 * GEMM's epilogue (cuBLASLt's C, beta 1) when the rows need no padding, else by add after
 * the copy (res has no padded rows to be C of the padded product). */
void fp8_gemm_run(float *out, const uint8_t *aq, const float *as, const fp8_matrix *w,
                  bool block, int N, int C, int OC, float *pad, const float *res)
{
    long a_srs, a_scs, w_srs, w_scs;
    dllm_cuda_fp8_gemm_scale_strides(N, C, &a_srs, &a_scs, &w_srs, &w_scs);
    if (block && fp8_scale_ld(w) != w_srs) {
        fprintf(stderr, "dllm-rl: cuda backend: fp8 weight [%d, %d]: block scales at row "
                        "stride %d, not cuBLASLt's (quantise it with the backend's "
                        "fp8_quantise)\n", OC, C, fp8_scale_ld(w));
        exit(1);
    }
    const int Np = fp8_rows(N, block);
    const fp8_scaling sc = block ? FP8_SCALE_BLOCK : FP8_SCALE_TENSOR;
    dllm_err err = {};
    if (res && Np == N) {
        check_rc(dllm_cuda_fp8_linear_res(out, res, aq, as, w->format, w->q, w->scale, w->format,
                                          sc, N, C, OC, NULL, &err),
                 err);
        return;
    }
    check_rc(dllm_cuda_fp8_linear(Np != N ? pad : out, false, aq, as, w->format, w->q,
                                  w->scale, w->format, sc, Np, C, OC, NULL, &err),
             err);
    if (Np != N)
        cudaCheck(cudaMemcpyAsync(out, pad, (size_t)N * OC * sizeof(float),
                                  cudaMemcpyDeviceToDevice, NULL));
    if (res)
        dllm_cuda_add(out, res, (size_t)N * OC, NULL);
}

void fp8_check_weight(const fp8_matrix *w, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: fp8 weight is [%d, %d], call expects [%d, %d]\n",
                w->rows, w->cols, OC, C);
        exit(1);
    }
}

/* fp8_linear_fwd, plus res (NULL: none) as linear_res_fwd adds it */
void fp8_linear(dllm_backend *be, float *out, const float *inp, fp8_matrix *w, int N, int C,
                int OC, const float *res)
{
    fp8_check_weight(w, C, OC);
    if (N <= 0)
        return;
    if (w->format == FP8_E5M2) { /* activations take the weight's format, as on the CPU */
        fprintf(stderr, "dllm-rl: rollout.fp8.format: e5m2 for weights and activations has no "
                        "cuBLASLt FP8 GEMM (E5M2 x E5M2); use e4m3\n");
        exit(2);
    }
    const fp8_format f = w->format;
    const size_t na = (size_t)N * C;
    int abr, abc;
    fp8_block_shape(w->act_scaling, N, C, &abr, &abc);
    int aSR = (N + abr - 1) / abr, aSC = (C + abc - 1) / abc;
    bool block = false;
    fp8_require_block(w);
    if (fp8_gemm_path(w, C, OC, &block)) {
        /* codes and scales laid out for Np tokens; rows N..Np are never written */
        const int Np = fp8_rows(N, block);
        size_t KB = ((size_t)C + 127) / 128, nap = (size_t)Np * C;
        size_t nas = block ? (size_t)Np * KB : 1;
        size_t npad = Np != N ? (size_t)Np * OC : 0;
        char *ws = (char *)ws_get(align256(nap) + align256(nas * 4) + align256(npad * 4));
        uint8_t *aq = (uint8_t *)ws;
        float *as = (float *)(ws + align256(nap));
        float *pad = (float *)(ws + align256(nap) + align256(nas * 4));
        long a_srs = 0, a_scs = 0, w_srs = 0, w_scs = 0;
        if (block)
            dllm_cuda_fp8_gemm_scale_strides(Np, C, &a_srs, &a_scs, &w_srs, &w_scs);
        dllm_cuda_fp8_quantise(aq, as, a_srs, a_scs, inp, N, C, abr, abc, f, w->pow2_scale,
                               NULL);
        fp8_gemm_run(out, aq, as, w, block, N, C, OC, pad, res);
        return;
    }
    /* the CPU's definition: dequantised weight and quantised-dequantised activations */
    size_t nw = (size_t)OC * C;
    char *ws = (char *)ws_get(align256(nw * 4) + align256(na * 4) + align256(na) +
                              align256((size_t)aSR * aSC * 4));
    float *wd = (float *)ws, *ad = (float *)(ws + align256(nw * 4));
    uint8_t *aq = (uint8_t *)(ws + align256(nw * 4) + align256(na * 4));
    float *as = (float *)(ws + align256(nw * 4) + align256(na * 4) + align256(na));
    dllm_cuda_fp8_dequantise(wd, w->q, w->scale, fp8_scale_ld(w), 1, OC, C, w->block_rows,
                             w->block_cols, f, NULL);
    dllm_cuda_fp8_quantise(aq, as, aSC, 1, inp, N, C, abr, abc, f, w->pow2_scale, NULL);
    dllm_cuda_fp8_dequantise(ad, aq, as, aSC, 1, N, C, abr, abc, f, NULL);
    cu_gemm(be, false, true, N, OC, C, 1.0f, ad, wd, 0.0f, out);
    if (res) /* the fallback keeps its separate pass */
        dllm_cuda_add(out, res, (size_t)N * OC, NULL);
}

void cu_fp8_linear_fwd(dllm_backend *be, float *out, const float *inp, fp8_matrix *w, int N,
                       int C, int OC)
{
    fp8_linear(be, out, inp, w, N, C, OC, NULL);
}

void cu_rmsnorm_fwd(dllm_backend *, float *out, float *rstd, const float *inp, const float *w,
                    int N, int C, float eps)
{
    dllm_cuda_rmsnorm_fwd(out, rstd, inp, w, N, C, eps, NULL);
}
void cu_rmsnorm_bwd(dllm_backend *, float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const float *rstd, int N, int C)
{
    float *scratch = dw ? (float *)ws_get(dllm_cuda_rmsnorm_bwd_scratch_floats(N, C) * 4) : NULL;
    dllm_cuda_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C, scratch, NULL);
}
void cu_rope_fwd(dllm_backend *, float *out, const float *inp, const int32_t *pos,
                 const op_rope_table *t, int N, int NH, int HD)
{
    dllm_cuda_rope_fwd(out, inp, pos, t->cos, t->sin, t->max_pos, N, NH, HD, NULL);
}
void cu_rope_bwd(dllm_backend *, float *dinp, const float *dout, const int32_t *pos,
                 const op_rope_table *t, int N, int NH, int HD)
{
    dllm_cuda_rope_bwd(dinp, dout, pos, t->cos, t->sin, t->max_pos, N, NH, HD, NULL);
}
size_t cu_attn_state_floats(dllm_backend *, int B, int T, int NH) { return (size_t)B * NH * T; }
void cu_attention_fwd(dllm_backend *, float *out, float *state, const float *q, const float *k,
                      const float *v, const uint8_t *keymask, int B, int T, int NH, int NKV,
                      int HD, bool causal)
{
    dllm_cuda_attention_fwd(out, state, q, k, v, keymask, B, T, NH, NKV, HD, causal, NULL);
}
void cu_attention_bwd(dllm_backend *, float *dq, float *dk, float *dv, const float *dout,
                      const float *out, const float *state, const float *q, const float *k,
                      const float *v, const uint8_t *keymask, int B, int T, int NH, int NKV,
                      int HD, bool causal)
{
    float *scratch = (float *)ws_get(dllm_cuda_attention_bwd_scratch_floats(B, T, NH) * 4);
    dllm_cuda_attention_bwd(dq, dk, dv, dout, out, state, q, k, v, keymask, B, T, NH, NKV, HD,
                            causal, scratch, NULL);
}
void cu_swiglu_fwd(dllm_backend *, float *out, const float *gate, const float *up, size_t n)
{
    dllm_cuda_swiglu_fwd(out, gate, up, n, NULL);
}
void cu_swiglu_bwd(dllm_backend *, float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, size_t n)
{
    dllm_cuda_swiglu_bwd(dgate, dup, dout, gate, up, n, NULL);
}
/* The table gives no vocabulary size: ids are trusted as on the CPU (INT_MAX disables the
 * kernel's range check). */
void cu_embedding_fwd(dllm_backend *, float *out, const int32_t *ids, const float *wte, int N,
                      int C)
{
    dllm_cuda_embedding_fwd(out, ids, wte, N, C, INT_MAX, NULL);
}
void cu_embedding_bwd(dllm_backend *, float *dwte, const float *dout, const int32_t *ids, int N,
                      int C)
{
    dllm_cuda_embedding_bwd(dwte, dout, ids, N, C, INT_MAX, NULL);
}
void cu_xent_fwd(dllm_backend *, float *logp, float *lse, const float *logits,
                 const int32_t *target, int N, int V)
{
    dllm_cuda_xent_fwd(logp, lse, logits, target, N, V, NULL);
}
void cu_xent_bwd(dllm_backend *, float *dlogits, const float *dlogp, const float *logits,
                 const float *lse, const int32_t *target, int N, int V)
{
    dllm_cuda_xent_bwd(dlogits, dlogp, logits, lse, target, N, V, NULL);
}
void cu_round_bf16(dllm_backend *, float *x, size_t n) { dllm_cuda_round_bf16(x, n, NULL); }
void cu_add(dllm_backend *, float *y, const float *x, size_t n) { dllm_cuda_add(y, x, n, NULL); }
void cu_adamw(dllm_backend *, float *p, const float *g, float *m, float *v, size_t n, int t,
              float lr, float b1, float b2, float eps, float wd)
{
    dllm_cuda_adamw(p, g, m, v, NULL, n, t, lr, b1, b2, eps, wd, NULL);
}
double cu_grad_norm(dllm_backend *, const float *g, size_t n)
{
    return dllm_cuda_grad_norm(g, n, (double *)ws_get(sizeof(double)), NULL);
}
/* the sum of squares stays on the device for the clip; one double comes down for the log */
double cu_clip_grad(dllm_backend *, float *g, size_t n, double max_norm)
{
    double *acc = (double *)ws_get(sizeof(double)), sumsq = 0;
    cudaCheck(cudaMemset(acc, 0, sizeof(double)));
    dllm_cuda_sumsq_accum(acc, g, n, NULL);
    if (max_norm > 0)
        dllm_cuda_clip_grad(g, n, acc, max_norm, NULL);
    cudaCheck(cudaMemcpy(&sumsq, acc, sizeof(double), cudaMemcpyDeviceToHost));
    return sqrt(sumsq);
}
/* the clip's norm comes down (one double) anyway: a non-finite one skips the launch */
double cu_adamw_step(dllm_backend *be, float *p, float *g, float *m, float *v, size_t n,
                     const dllm_adamw_args *a)
{
    double norm = cu_clip_grad(be, g, n, a->max_norm);
    if (std::isfinite(norm))
        cu_adamw(be, p, g, m, v, n, a->t, a->lr, a->b1, a->b2, a->eps, a->wd);
    return norm;
}

void cu_copy(dllm_backend *, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void cu_copy_2d(dllm_backend *, float *dst, size_t dld, const float *src, size_t sld, int rows,
                int cols)
{
    dllm_cuda_copy_2d(dst, dld, src, sld, rows, cols, NULL);
}
void cu_bias_fwd(dllm_backend *, float *out, const float *bias, int N, int OC)
{
    dllm_cuda_bias_fwd(out, bias, N, OC, NULL);
}
void cu_bias_bwd(dllm_backend *, float *dbias, const float *dout, int N, int OC)
{
    dllm_cuda_bias_bwd(dbias, dout, N, OC, NULL);
}

void cu_to_bf16(dllm_backend *, uint16_t *out, const float *inp, size_t n)
{
    dllm_cuda_f32_to_bf16(out, inp, n, NULL);
}
void cu_fp8_quantise(dllm_backend *be, uint8_t *q, float *scale, const float *x, int R, int C,
                     fp8_format f, fp8_scaling s, bool pow2)
{
    int br, bc;
    fp8_block_shape(s, R, C, &br, &bc);
    long ld = (long)dllm_backend_fp8_scale_ld(be, s, R, C);
    dllm_cuda_fp8_quantise(q, scale, ld, 1, x, R, C, br, bc, f, pow2, NULL);
}

/* bf16(inp) w^T with fp32 sums: cuBLASLt's bf16 GEMM where its alignment rules hold (C a
 * multiple of 8, out's rows 16-byte aligned), otherwise the same products widened to fp32
 * through the fp32 GEMM (bf16 x bf16 is exact in fp32: only the summation order differs). */
/* bf16_linear_fwd, plus res (NULL: none): on cuBLASLt as C of its epilogue (beta 1), on
 * the fp32 fallback by a separate add */
static void bf16_check(const bf16_matrix *w, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: bf16 weight is [%d, %d], call expects [%d, %d]\n",
                w->rows, w->cols, OC, C);
        exit(1);
    }
}

static bool bf16_linear_lt(const float *out, const bf16_matrix *w, int C, int OC,
                           const float *res)
{
    return C % 8 == 0 && OC % 4 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)w->w % 16 == 0 &&
           (uintptr_t)res % 16 == 0;
}

/* out [+ res] = a16 w^T on BF16 tensor cores: the input's bf16 copy already made */
static void bf16_gemm_ready(float *out, const uint16_t *a16, const bf16_matrix *w, int N, int C,
                            int OC, const float *res)
{
    dllm_err err = {};
    if (res)
        check_rc(dllm_cuda_gemm_bf16_res(false, true, N, OC, C, 1.0f, a16, w->w, res, out, NULL,
                                         &err),
                 err);
    else
        check_rc(dllm_cuda_gemm_bf16(false, true, N, OC, C, 1.0f, a16, w->w, 0.0f, out, false,
                                     NULL, &err),
                 err);
}

/* Off cuBLASLt's 16-byte rules: the bf16 operands widened, the fp32 GEMM, then res. a16 must
 * not lie in the workspace (this takes it). */
static void bf16_linear_widened(float *out, const uint16_t *a16, const bf16_matrix *w, int N,
                                int C, int OC, const float *res)
{
    size_t na = (size_t)N * C, nw = (size_t)OC * C;
    char *ws = (char *)ws_get(align256(na * 4) + align256(nw * 4));
    float *af = (float *)ws, *wf = (float *)(ws + align256(na * 4));
    dllm_cuda_bf16_to_f32(af, a16, na, NULL);
    dllm_cuda_bf16_to_f32(wf, w->w, nw, NULL);
    cu_gemm(NULL, false, true, N, OC, C, 1.0f, af, wf, 0.0f, out);
    if (res)
        dllm_cuda_add(out, res, (size_t)N * OC, NULL);
}

/* The bf16 linear over the input's bf16 copy made by its producer (a DLLM_QACT_BF16) */
void bf16_linear_ready(float *out, const uint16_t *a16, bf16_matrix *w, int N, int C, int OC,
                       const float *res)
{
    bf16_check(w, C, OC);
    if (N <= 0)
        return;
    if (bf16_linear_lt(out, w, C, OC, res))
        bf16_gemm_ready(out, a16, w, N, C, OC, res);
    else
        bf16_linear_widened(out, a16, w, N, C, OC, res);
}

void bf16_linear(dllm_backend *be, float *out, const float *inp, bf16_matrix *w, int N, int C,
                 int OC, const float *res)
{
    bf16_check(w, C, OC);
    if (N <= 0)
        return;
    size_t na = (size_t)N * C, nw = (size_t)OC * C;
    if (bf16_linear_lt(out, w, C, OC, res)) {
        uint16_t *a16 = (uint16_t *)ws_get(align256(na * 2));
        dllm_cuda_f32_to_bf16(a16, inp, na, NULL);
        bf16_gemm_ready(out, a16, w, N, C, OC, res);
        return;
    }
    char *ws = (char *)ws_get(align256(na * 2) + align256(na * 4) + align256(nw * 4));
    uint16_t *a16 = (uint16_t *)ws;
    float *af = (float *)(ws + align256(na * 2)), *wf = (float *)(ws + align256(na * 2) +
                                                                  align256(na * 4));
    dllm_cuda_f32_to_bf16(a16, inp, na, NULL);
    dllm_cuda_bf16_to_f32(af, a16, na, NULL);
    dllm_cuda_bf16_to_f32(wf, w->w, nw, NULL);
    cu_gemm(be, false, true, N, OC, C, 1.0f, af, wf, 0.0f, out);
    if (res)
        dllm_cuda_add(out, res, (size_t)N * OC, NULL);
}

void cu_bf16_linear_fwd(dllm_backend *be, float *out, const float *inp, bf16_matrix *w, int N,
                        int C, int OC)
{
    bf16_linear(be, out, inp, w, N, C, OC, NULL);
}

/* ---- FP8 and INT8 activations from their producer -------------------------------------
 * FP8: fused where the consumer takes the block-scaled GEMM (1x128 groups: a row-local
 * quantisation the producer can finish alone). Tensor-wide activation scales need the
 * whole activation's amax first, and the fallback GEMM reads the CPU layout: both keep
 * the unfused path. INT8: always (1x128 groups or one per row, both row-local). The
 * codes live in their own buffer (qa_*), not the workspace the linears reuse for their
 * weight scales and products. */
static void *qa_buffer(size_t bytes)
{
    if (bytes > g_impl.qa_bytes) {
        cudaCheck(cudaDeviceSynchronize());
        if (g_impl.qa)
            cudaCheck(cudaFree(g_impl.qa));
        cudaCheck(cudaMalloc(&g_impl.qa, bytes));
        g_impl.qa_bytes = bytes;
    }
    return g_impl.qa;
}

static bool fp8_act_prepare(dllm_qact *qa, int N, int C, const dllm_lin_weight *ws, int nw)
{
    if (!g_impl.block_fp8) /* unfused: it refuses */
        return false;
    const fp8_matrix *w0 = ws[0].f8;
    for (int i = 0; i < nw; i++) {
        bool block = false;
        const fp8_matrix *w = ws[i].f8;
        /* e5m2 x e5m2 stays on the unfused path, which refuses it with its message */
        if (!w || w->cols != C || w->format != w0->format || w->format == FP8_E5M2 ||
            w->pow2_scale != w0->pow2_scale || !fp8_gemm_path(w, C, w->rows, &block) ||
            !block)
            return false;
    }
    const int Np = fp8_rows(N, true);
    size_t KB = ((size_t)C + 127) / 128, nq = align256((size_t)Np * C);
    char *buf = (char *)qa_buffer(nq + align256((size_t)Np * KB * sizeof(float)));
    long a_srs, a_scs, w_srs, w_scs;
    dllm_cuda_fp8_gemm_scale_strides(Np, C, &a_srs, &a_scs, &w_srs, &w_scs);
    *qa = dllm_qact{};
    qa->kind = DLLM_QACT_FP8;
    qa->q = buf;
    qa->scale = (float *)(buf + nq);
    qa->srs = a_srs, qa->scs = a_scs;
    qa->rows = N, qa->cols = C, qa->group = 128, qa->ld = C;
    qa->format = w0->format;
    qa->pow2 = w0->pow2_scale;
    return true;
}

/* The INT8 codes' layout is the weights' (dllm_cuda_int8_weight_layout): every weight of
 * the group must share its scaling (so its group and padded row stride). */
static bool int8_act_prepare(dllm_qact *qa, int N, int C, const dllm_lin_weight *ws, int nw)
{
    const int8_matrix *w0 = ws[0].i8;
    for (int i = 0; i < nw; i++) {
        const int8_matrix *w = ws[i].i8;
        if (!w || !w->q || w->cols != C || w->scaling != w0->scaling || w->ldq != w0->ldq ||
            w->kb != w0->kb)
            return false;
    }
    size_t nq = align256((size_t)N * w0->ldq);
    char *buf = (char *)qa_buffer(nq + align256((size_t)N * w0->kb * sizeof(float)));
    *qa = dllm_qact{};
    qa->kind = DLLM_QACT_INT8;
    qa->q = buf;
    qa->scale = (float *)(buf + nq);
    qa->srs = w0->kb, qa->scs = 1;
    qa->rows = N, qa->cols = C, qa->ld = w0->ldq;
    qa->group = w0->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C;
    return true;
}

/* bf16 copies serve every bf16 weight of width C: the linears' GEMM reads them as the
 * copy it would round into its workspace (same bits), and their fallbacks widen them. */
static bool bf16_act_prepare(dllm_qact *qa, int N, int C, const dllm_lin_weight *ws, int nw)
{
    for (int i = 0; i < nw; i++)
        if (!ws[i].b16 || ws[i].b16->cols != C)
            return false;
    *qa = dllm_qact{};
    qa->kind = DLLM_QACT_BF16;
    qa->q = qa_buffer(align256((size_t)N * C * 2));
    qa->rows = N, qa->cols = C, qa->ld = C;
    return true;
}

bool cu_act_quant_prepare(dllm_backend *, dllm_qact *qa, int N, int C, const dllm_lin_weight *ws,
                          int nw)
{
    if (N <= 0 || C <= 0 || nw <= 0 || !ws)
        return false;
    return ws[0].f8    ? fp8_act_prepare(qa, N, C, ws, nw)
           : ws[0].i8  ? int8_act_prepare(qa, N, C, ws, nw)
           : ws[0].b16 ? bf16_act_prepare(qa, N, C, ws, nw)
                       : false;
}

static void check_act(const dllm_qact *qa, int N, int C, const char *op)
{
    if (!qa || !qa->q || qa->rows != N || qa->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: %s: quantised activations are [%d, %d], call "
                        "expects [%d, %d]\n", op, qa ? qa->rows : -1, qa ? qa->cols : -1, N, C);
        exit(1);
    }
}

static int qact_groups(const dllm_qact *qa) { return (qa->cols + qa->group - 1) / qa->group; }

void cu_rmsnorm_quant_fwd(dllm_backend *, float *out, float *rstd, const dllm_qact *qa,
                          const float *inp, const float *w, int N, int C, float eps)
{
    check_act(qa, N, C, "rmsnorm_quant_fwd");
    if (qa->kind == DLLM_QACT_BF16)
        dllm_cuda_rmsnorm_bf16_fwd(out, rstd, (uint16_t *)qa->q, inp, w, N, C, eps, NULL);
    else if (qa->kind == DLLM_QACT_INT8)
        dllm_cuda_rmsnorm_int8_fwd(out, rstd, (int8_t *)qa->q, qa->scale, qa->ld,
                                   qact_groups(qa), inp, w, N, C, eps, qa->group, NULL);
    else
        dllm_cuda_rmsnorm_fp8_fwd(out, rstd, (uint8_t *)qa->q, qa->scale, qa->srs, qa->scs, inp,
                                  w, N, C, eps, qa->group, qa->format, qa->pow2, NULL);
}

void cu_swiglu_quant_fwd(dllm_backend *, float *out, const dllm_qact *qa, const float *gate,
                         const float *up, int N, int H)
{
    check_act(qa, N, H, "swiglu_quant_fwd");
    if (qa->kind == DLLM_QACT_BF16)
        dllm_cuda_swiglu_bf16_fwd(out, (uint16_t *)qa->q, gate, up, (size_t)N * H, NULL);
    else if (qa->kind == DLLM_QACT_INT8)
        dllm_cuda_swiglu_int8_fwd(out, (int8_t *)qa->q, qa->scale, qa->ld, gate, up, N, H,
                                  qa->group, NULL);
    else
        dllm_cuda_swiglu_fp8_fwd(out, (uint8_t *)qa->q, qa->scale, qa->srs, qa->scs, gate, up,
                                 N, H, qa->group, qa->format, qa->pow2, NULL);
}

static void act_mismatch(int OC, int C)
{
    fprintf(stderr, "dllm-rl: cuda backend: linear_quant_act_fwd: weight [%d, %d] does not "
                    "take the prepared activations (act_quant_prepare)\n", OC, C);
    exit(1);
}

/* linear_quant_act_fwd, plus res (NULL: none): INT8 in the last scaling pass, FP8 in the
 * GEMM's epilogue (fp8_gemm_run) */
void linear_quant_act(float *out, const dllm_qact *qa, const dllm_lin_weight *lw, int N, int C,
                      int OC, const float *res)
{
    check_act(qa, N, C, "linear_quant_act_fwd");
    if (qa->kind == DLLM_QACT_BF16) {
        if (!lw->b16 || lw->b16->cols != C)
            act_mismatch(OC, C);
        bf16_linear_ready(out, (const uint16_t *)qa->q, lw->b16, N, C, OC, res);
        return;
    }
    if (qa->kind == DLLM_QACT_INT8) {
        const int8_matrix *w = lw->i8;
        if (!w || w->ldq != qa->ld || w->kb != qact_groups(qa) ||
            (w->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C) != qa->group)
            act_mismatch(OC, C);
        dllm_cuda_int8_linear_codes(out, (const int8_t *)qa->q, qa->scale, w, N, C, OC,
                                    ws_get(dllm_cuda_int8_acc_bytes(N, w)), res);
        return;
    }
    fp8_matrix *w = lw->f8;
    if (!w)
        act_mismatch(OC, C);
    fp8_check_weight(w, C, OC);
    bool block = false;
    if (!fp8_gemm_path(w, C, OC, &block) || !block || qa->format != w->format ||
        qa->pow2 != w->pow2_scale)
        act_mismatch(OC, C);
    const int Np = fp8_rows(N, true);
    float *pad = Np != N ? (float *)ws_get((size_t)Np * OC * sizeof(float)) : NULL;
    fp8_gemm_run(out, (const uint8_t *)qa->q, qa->scale, w, true, N, C, OC, pad, res);
}

void cu_linear_quant_act_fwd(dllm_backend *, float *out, const dllm_qact *qa,
                             const dllm_lin_weight *lw, int N, int C, int OC)
{
    linear_quant_act(out, qa, lw, N, C, OC, NULL);
}

/* dinp += dout w on BF16 tensor cores: dout rounded to bf16 (round to nearest even) in the
 * workspace, fp32 sums, the accumulation into dinp fused into the GEMM's epilogue (beta 1).
 * Where cuBLASLt's 16-byte rules do not hold (OC or C not a multiple of 8, unaligned
 * pointers) the weight is widened to fp32 and dout stays fp32 (the fp32 GEMM). The bf16
 * rounding of dout is the difference from the host's bf16 trainer (which multiplies fp32
 * dout by the widened weight): a relative error of at most 2^-8 per dout element,
 * independent across the sum, about 2.5e-6 in normalised MSE (kernels/backend_cases.c
 * states the bound). */
void cu_bf16_linear_bwd_x(dllm_backend *be, float *dinp, const float *dout, bf16_matrix *w,
                          int N, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: bf16 weight is [%d, %d], call expects [%d, %d]\n",
                w->rows, w->cols, OC, C);
        exit(1);
    }
    if (N <= 0)
        return;
    if (OC % 8 == 0 && C % 8 == 0 && (uintptr_t)dinp % 16 == 0 && (uintptr_t)w->w % 16 == 0) {
        uint16_t *d16 = (uint16_t *)ws_get(align256((size_t)N * OC * 2));
        dllm_cuda_f32_to_bf16(d16, dout, (size_t)N * OC, NULL);
        dllm_err err = {};
        check_rc(dllm_cuda_gemm_bf16(false, false, N, C, OC, 1.0f, d16, w->w, 1.0f, dinp, false,
                                     NULL, &err),
                 err);
        return;
    }
    float *wf = (float *)ws_get(align256((size_t)OC * C * 4));
    dllm_cuda_bf16_to_f32(wf, w->w, (size_t)OC * C, NULL);
    cu_gemm(be, false, false, N, C, OC, 1.0f, dout, wf, 1.0f, dinp);
}

void cu_kv_append(dllm_backend *, float *kc, float *vc, uint8_t *cmask, const float *k,
                  const float *v, const uint8_t *newmask, int B, int T, int len, int max_len,
                  int KD)
{
    dllm_cuda_kv_append(kc, vc, cmask, k, v, newmask, B, T, len, max_len, KD, NULL);
}
void cu_attention_cached(dllm_backend *, float *y, const float *q, const float *kc,
                         const float *vc, const uint8_t *cmask, int B, int T, int len,
                         int max_len, int NH, int NKV, int HD, bool causal)
{
    dllm_cuda_attention_cached(y, q, kc, vc, cmask, B, T, len, max_len, NH, NKV, HD, causal,
                               NULL);
}

void cu_ar_choose(dllm_backend *, int32_t *tokens, int32_t *next, float *logp, float *logp_t1,
                  int32_t *length, uint8_t *done, const float *logits, int r0, int n, int V,
                  int G, int g, double temperature, int eos_id, uint64_t seed,
                  uint64_t seq_offset)
{
    dllm_cuda_ar_choose(tokens, next, logp, logp_t1, length, done, logits, r0, n, V, G, g,
                        temperature, eos_id, seed, seq_offset, NULL);
}

void cu_denoise_block_counts(dllm_backend *, int32_t *nm, const int32_t *canvas, int B, int T,
                             int lo, int hi, int mask_id)
{
    dllm_cuda_sampler_block_counts(nm, canvas, B, T, lo, hi, mask_id, NULL);
}
void cu_denoise_rows(dllm_backend *, int32_t *rows, int32_t *rows_u, int64_t *row_seq,
                     int32_t *row_pos, int32_t *seq_start, int32_t *n, const int32_t *canvas,
                     int B, int T, int lo, int hi, int act_lo, int mask_id,
                     uint64_t seq_offset)
{
    dllm_cuda_sampler_rows(rows, rows_u, row_seq, row_pos, seq_start, n, canvas, B, T, lo, hi,
                           act_lo, mask_id, seq_offset, NULL);
}
void cu_denoise_logits_fix(dllm_backend *, float *cond, const float *uncond, int n, int V,
                           float w, int eos_id)
{
    dllm_cuda_sampler_logits_fix(cond, uncond, n, V, w, eos_id, NULL);
}
void cu_denoise_draw(dllm_backend *, int32_t *x0, float *prob, double *rand_conf,
                     const float *logits, const int64_t *row_seq, const int32_t *row_pos, int n,
                     int V, double temperature, uint64_t seed, const int32_t *seq_step,
                     uint64_t seq_offset, int exclude)
{
    dllm_cuda_sampler_x0_steps(x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature,
                               seed, seq_step, seq_offset, exclude, NULL);
}
void cu_denoise_commit(dllm_backend *, int32_t *canvas, int16_t *commit_step, float *commit_prob,
                       const int32_t *x0, const float *prob, const double *rand_conf,
                       const int32_t *row_pos, const int32_t *seq_start, const int32_t *nm,
                       int spb, int step_in_block, int32_t *seq_step, double threshold,
                       int B, int T, int P, int G, int mask_id, int eos_id, int eot_id,
                       bool cfg)
{
    dllm_cuda_sampler_commit(canvas, commit_step, commit_prob, x0, prob, rand_conf, row_pos,
                             seq_start, nm, spb, step_in_block, seq_step, threshold, B, T, P, G,
                             mask_id, eos_id, eot_id, cfg, NULL);
}

void cu_dream_draw(dllm_backend *, int32_t *x0, double *key, float *prob, uint8_t *take,
                   const float *logits, const int64_t *row_seq, const int32_t *row_pos, int n,
                   int V, const dllm_dream_step *a)
{
    /* DREAM_ROWS rows a launch bound the scratch (12 V bytes a row) */
    enum { DREAM_ROWS = 32 };
    double *scratch = (double *)ws_get(dllm_cuda_dream_scratch_bytes(DREAM_ROWS, V));
    for (int i0 = 0; i0 < n; i0 += DREAM_ROWS) {
        int m = n - i0 < DREAM_ROWS ? n - i0 : DREAM_ROWS;
        dllm_cuda_dream_draw(x0 + i0, key + i0, prob + i0, take + i0, logits + (size_t)i0 * V,
                             row_seq + i0, row_pos + i0, m, V, a, scratch, NULL);
    }
}
void cu_dream_commit(dllm_backend *, int32_t *canvas, int16_t *commit_step, float *commit_prob,
                     const int32_t *x0, const double *key, const float *prob,
                     const uint8_t *take, const int32_t *row_pos, const int32_t *seq_start,
                     int B, int T, int P, int G, int mask_id, const dllm_dream_step *a)
{
    dllm_cuda_dream_commit(canvas, commit_step, commit_prob, x0, key, prob, take, row_pos,
                           seq_start, B, T, P, G, mask_id, a, NULL);
}

/* The INT8 linear (kernels/cuda/gemm_int8.cu); its scratch is the workspace. */
void cu_int8_linear_fwd(dllm_backend *, float *out, const float *inp, const int8_matrix *w,
                        int N, int C, int OC)
{
    dllm_cuda_int8_linear(out, inp, w, N, C, OC, ws_get(dllm_cuda_int8_scratch_bytes(N, w)),
                          NULL);
}

/* Nothing is cached in a weight's struct on the device. */
void cu_weight_cache_free(dllm_backend *, fp8_matrix *, bf16_matrix *) {}

/* Positional, in the table's order (kernels/backend.h), group by group. */
/* Gated DeltaNet: kernels/cuda/gated_delta.cu */
void cu_gd_conv_fwd(dllm_backend *, float *out, float *pre, float *state_out, const float *x,
                    const float *state, const float *w, int B, int T, int D, int K)
{
    dllm_cuda_gd_conv_fwd(out, pre, state_out, x, state, w, B, T, D, K, NULL);
}
void cu_gd_conv_bwd(dllm_backend *, float *dx, float *dw, float *dstate, const float *dout,
                    const float *pre, const float *x, const float *state, const float *w, int B,
                    int T, int D, int K)
{
    dllm_cuda_gd_conv_bwd(dx, dw, dstate, dout, pre, x, state, w, B, T, D, K, NULL);
}
void cu_gd_l2norm_fwd(dllm_backend *, float *out, float *rnorm, const float *x, int rows, int n,
                      float eps)
{
    dllm_cuda_gd_l2norm_fwd(out, rnorm, x, rows, n, eps, NULL);
}
void cu_gd_l2norm_bwd(dllm_backend *, float *dx, const float *dout, const float *out,
                      const float *rnorm, int rows, int n)
{
    dllm_cuda_gd_l2norm_bwd(dx, dout, out, rnorm, rows, n, NULL);
}
void cu_gd_gates_fwd(dllm_backend *, float *g, float *beta, const float *a, const float *b,
                     const float *A_log, const float *dt_bias, int N, int Hv)
{
    dllm_cuda_gd_gates_fwd(g, beta, a, b, A_log, dt_bias, N, Hv, NULL);
}
void cu_gd_gates_bwd(dllm_backend *, float *da, float *db, float *dA_log, float *ddt_bias,
                     const float *dg, const float *dbeta, const float *a, const float *b,
                     const float *A_log, const float *dt_bias, int N, int Hv)
{
    dllm_cuda_gd_gates_bwd(da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, N, Hv, NULL);
}
void cu_gd_rule_recurrent_fwd(dllm_backend *, float *o, float *state_out, const float *q,
                              const float *k, const float *v, const float *g, const float *beta,
                              const float *state_in, int B, int T, int Hk, int Dk, int Hv,
                              int Dv)
{
    dllm_cuda_gd_rule_recurrent_fwd(o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv, Dv,
                                    NULL);
}
void cu_gd_rule_chunked_fwd(dllm_backend *, float *o, float *state_out, const float *q,
                            const float *k, const float *v, const float *g, const float *beta,
                            const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv,
                            int chunk)
{
    dllm_cuda_gd_rule_chunked_fwd(o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv, Dv,
                                  chunk, NULL);
}
void cu_gd_rule_bwd(dllm_backend *, float *dq, float *dk, float *dv, float *dg, float *dbeta,
                    float *dstate_in, const float *dout, const float *q, const float *k,
                    const float *v, const float *g, const float *beta, const float *state_in,
                    int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    float *scratch = (float *)ws_get(
        dllm_cuda_gd_rule_bwd_scratch_floats(B, T, Hk, Dk, Hv, Dv) * sizeof(float));
    dllm_cuda_gd_rule_bwd(dq, dk, dv, dg, dbeta, dstate_in, dout, q, k, v, g, beta, state_in, B, T,
                          Hk, Dk, Hv, Dv, scratch, NULL);
}
void cu_gd_gated_rmsnorm_fwd(dllm_backend *, float *out, float *rstd, const float *x,
                             const float *z, const float *w, int rows, int n, float eps)
{
    dllm_cuda_gd_gated_rmsnorm_fwd(out, rstd, x, z, w, rows, n, eps, NULL);
}
void cu_gd_gated_rmsnorm_bwd(dllm_backend *, float *dx, float *dz, float *dw, const float *dout,
                             const float *x, const float *z, const float *w, const float *rstd,
                             int rows, int n)
{
    dllm_cuda_gd_gated_rmsnorm_bwd(dx, dz, dw, dout, x, z, w, rstd, rows, n, NULL);
}
void cu_gd_partial_rope_fwd(dllm_backend *, float *out, const float *x, const int32_t *pos,
                            int N, int NH, int HD, int rot, float theta)
{
    dllm_cuda_gd_partial_rope_fwd(out, x, pos, N, NH, HD, rot, theta, NULL);
}
void cu_gd_partial_rope_bwd(dllm_backend *, float *dx, const float *dout, const int32_t *pos,
                            int N, int NH, int HD, int rot, float theta)
{
    dllm_cuda_gd_partial_rope_bwd(dx, dout, pos, N, NH, HD, rot, theta, NULL);
}
void cu_gd_out_gate_fwd(dllm_backend *, float *out, const float *x, const float *gate, size_t n)
{
    dllm_cuda_gd_out_gate_fwd(out, x, gate, n, NULL);
}
void cu_gd_out_gate_bwd(dllm_backend *, float *dx, float *dgate, const float *dout,
                        const float *x, const float *gate, size_t n)
{
    dllm_cuda_gd_out_gate_bwd(dx, dgate, dout, x, gate, n, NULL);
}

/* The linear of w's format with the residual added where the product is made (the GEMM's
 * epilogue, or INT8's last scaling pass); a fallback product adds it in a pass of its own. */
void cu_linear_res_fwd(dllm_backend *be, float *out, const float *res, const float *inp,
                       const dllm_qact *qa, const dllm_lin_weight *w, int N, int C, int OC)
{
    if (qa) {
        linear_quant_act(out, qa, w, N, C, OC, res);
    } else if (w->f8) {
        fp8_linear(be, out, inp, w->f8, N, C, OC, res);
    } else if (w->i8) {
        if (N > 0)
            dllm_cuda_int8_linear(out, inp, w->i8, N, C, OC,
                                  ws_get(dllm_cuda_int8_scratch_bytes(N, w->i8)), res);
    } else if (w->b16) {
        bf16_linear(be, out, inp, w->b16, N, C, OC, res);
    } else {
        fprintf(stderr, "dllm-rl: cuda backend: linear_res_fwd: no FP8, INT8 or bf16 weight "
                        "(the device has no NVFP4 linear)\n");
        exit(1);
    }
}

/* A bf16 trainer's LoRA linears: the parts' cuBLASLt BF16 GEMMs on the same bf16 operands
 * (bf16_linear, cu_gemm_bf16, cu_bf16_linear_bwd_x), each operand rounded once into the
 * workspace for every product that reads it. Where a part would take its fp32 fallback
 * (shapes or pointers off cuBLASLt's 16-byte rules), the parts run instead. */
bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* The adapter's product first, onto res (or zero), then the base's onto it: both adds in
 * a GEMM's epilogue, the base's compute-bound GEMM hiding its read of out. */
void cu_bf16_lora_fwd(dllm_backend *be, float *out, float *xa, const float *inp,
                      const dllm_qact *qa, const float *res, bf16_matrix *w, const float *A,
                      const float *B, float scale, int N, int C, int OC, int r)
{
    if (qa && (qa->kind != DLLM_QACT_BF16 || qa->rows != N || qa->cols != C))
        act_mismatch(OC, C);
    if (N <= 0 || r <= 0 || w->rows != OC || w->cols != C || C % 8 || OC % 4 || r % 8 ||
        !al16(out) || !al16(xa) || !al16(w->w) || !al16(res)) {
        cu_bf16_linear_fwd(be, out, inp, w, N, C, OC);
        cu_gemm_bf16(be, false, true, N, r, C, 1.0f, inp, A, 0.0f, xa);
        cu_gemm_bf16(be, false, true, N, OC, r, scale, xa, B, 1.0f, out);
        if (res && N > 0)
            dllm_cuda_add(out, res, (size_t)N * OC, NULL);
        return;
    }
    /* inp's bf16 copy: its producer's (qa), or made here */
    size_t nx = qa ? 0 : (size_t)N * C, na = (size_t)r * C, nxa = (size_t)N * r;
    size_t nb = (size_t)OC * r;
    char *ws = (char *)ws_get(align256(nx * 2) + align256(na * 2) + align256(nxa * 2) +
                              align256(nb * 2));
    uint16_t *x16 = qa ? (uint16_t *)qa->q : (uint16_t *)ws;
    uint16_t *a16 = (uint16_t *)(ws + align256(nx * 2));
    uint16_t *xa16 = (uint16_t *)((char *)a16 + align256(na * 2));
    uint16_t *b16 = (uint16_t *)((char *)xa16 + align256(nxa * 2));
    dllm_err err = {};
    if (!qa)
        dllm_cuda_f32_to_bf16(x16, inp, nx, NULL);
    dllm_cuda_f32_to_bf16(a16, A, na, NULL);
    check_rc(dllm_cuda_gemm_bf16(false, true, N, r, C, 1.0f, x16, a16, 0.0f, xa, false, NULL,
                                 &err),
             err);
    dllm_cuda_f32_to_bf16(xa16, xa, nxa, NULL);
    dllm_cuda_f32_to_bf16(b16, B, nb, NULL);
    if (res)
        check_rc(dllm_cuda_gemm_bf16_res(false, true, N, OC, r, scale, xa16, b16, res, out,
                                         NULL, &err),
                 err);
    else
        check_rc(dllm_cuda_gemm_bf16(false, true, N, OC, r, scale, xa16, b16, 0.0f, out, false,
                                     NULL, &err),
                 err);
    check_rc(dllm_cuda_gemm_bf16(false, true, N, OC, C, 1.0f, x16, w->w, 1.0f, out, false, NULL,
                                 &err),
             err);
}

/* dout is rounded once for the base's input gradient, dxa and dB; inp, read only by dA's
 * product after those, is rounded into dout's place. */
void cu_bf16_lora_bwd(dllm_backend *be, float *dinp, float *dA, float *dB, float *dxa,
                      const float *dout, const float *inp, const float *xa, bf16_matrix *w,
                      const float *A, const float *B, float scale, int N, int C, int OC, int r)
{
    if (N <= 0 || r <= 0 || w->rows != OC || w->cols != C || C % 8 || OC % 8 || r % 8 ||
        !al16(dinp) || !al16(dA) || !al16(dB) || !al16(dxa) || !al16(w->w)) {
        cu_bf16_linear_bwd_x(be, dinp, dout, w, N, C, OC);
        cu_gemm_bf16(be, false, false, N, r, OC, scale, dout, B, 0.0f, dxa);
        cu_gemm_bf16(be, true, false, OC, r, N, scale, dout, xa, 1.0f, dB);
        cu_gemm_bf16(be, false, false, N, C, r, 1.0f, dxa, A, 1.0f, dinp);
        cu_gemm_bf16(be, true, false, r, C, N, 1.0f, dxa, inp, 1.0f, dA);
        return;
    }
    size_t nd = (size_t)N * OC, nx = (size_t)N * C, nxa = (size_t)N * r;
    size_t na = (size_t)r * C, nb = (size_t)OC * r, big = nd > nx ? nd : nx;
    char *ws = (char *)ws_get(align256(big * 2) + align256(nb * 2) + 2 * align256(nxa * 2) +
                              align256(na * 2));
    uint16_t *d16 = (uint16_t *)ws, *b16 = (uint16_t *)(ws + align256(big * 2));
    uint16_t *xa16 = (uint16_t *)((char *)b16 + align256(nb * 2));
    uint16_t *dxa16 = (uint16_t *)((char *)xa16 + align256(nxa * 2));
    uint16_t *a16 = (uint16_t *)((char *)dxa16 + align256(nxa * 2));
    dllm_err err = {};
    dllm_cuda_f32_to_bf16(d16, dout, nd, NULL);
    check_rc(dllm_cuda_gemm_bf16(false, false, N, C, OC, 1.0f, d16, w->w, 1.0f, dinp, false,
                                 NULL, &err),
             err);
    dllm_cuda_f32_to_bf16(b16, B, nb, NULL);
    check_rc(dllm_cuda_gemm_bf16(false, false, N, r, OC, scale, d16, b16, 0.0f, dxa, false,
                                 NULL, &err),
             err);
    dllm_cuda_f32_to_bf16(xa16, xa, nxa, NULL);
    check_rc(dllm_cuda_gemm_bf16(true, false, OC, r, N, scale, d16, xa16, 1.0f, dB, false,
                                 NULL, &err),
             err);
    dllm_cuda_f32_to_bf16(dxa16, dxa, nxa, NULL);
    dllm_cuda_f32_to_bf16(a16, A, na, NULL);
    check_rc(dllm_cuda_gemm_bf16(false, false, N, C, r, 1.0f, dxa16, a16, 1.0f, dinp, false,
                                 NULL, &err),
             err);
    uint16_t *x16 = d16; /* dout's bf16 copy is read by no later product */
    dllm_cuda_f32_to_bf16(x16, inp, nx, NULL);
    check_rc(dllm_cuda_gemm_bf16(true, false, r, C, N, 1.0f, dxa16, x16, 1.0f, dA, false, NULL,
                                 &err),
             err);
}

/* Attention with q and k rotated as the kernels load their tiles: q and k stay as given. */
void cu_rope_attention_fwd(dllm_backend *, float *out, float *state, float *q, float *k,
                           const float *v, const int32_t *pos, const op_rope_table *t,
                           const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                           bool causal)
{
    dllm_cuda_rope_attention_fwd(out, state, q, k, v, pos, t->cos, t->sin, t->max_pos, keymask,
                                 B, T, NH, NKV, HD, causal, NULL);
}

/* Its backward from the unrotated q and k: on tensor cores one pass that rotates the tiles
 * as loaded and the gradients as stored; the fp32 kernels (head dims above 128) take the
 * parts, q and k rotated in place first. */
void cu_rope_attention_bwd(dllm_backend *be, float *dq, float *dk, float *dv, const float *dout,
                           const float *out, const float *state, float *q, float *k,
                           const float *v, const int32_t *pos, const op_rope_table *t,
                           const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                           bool causal)
{
    if (dllm_cuda_attention_tc(HD)) {
        float *scratch = (float *)ws_get(dllm_cuda_attention_bwd_scratch_floats(B, T, NH) * 4);
        dllm_cuda_rope_attention_bwd(dq, dk, dv, dout, out, state, q, k, v, pos, t->cos, t->sin,
                                     t->max_pos, keymask, B, T, NH, NKV, HD, causal, scratch,
                                     NULL);
        return;
    }
    const int N = B * T;
    size_t nq = (size_t)N * NH * HD * 4, nk = (size_t)N * NKV * HD * 4;
    cu_rope_fwd(be, q, q, pos, t, N, NH, HD);
    cu_rope_fwd(be, k, k, pos, t, N, NKV, HD);
    if (dq)
        cu_memset0(be, dq, nq);
    if (dk)
        cu_memset0(be, dk, nk);
    if (dv)
        cu_memset0(be, dv, nk);
    cu_attention_bwd(be, dq, dk, dv, dout, out, state, q, k, v, keymask, B, T, NH, NKV, HD,
                     causal);
    if (dq)
        cu_rope_bwd(be, dq, dq, pos, t, N, NH, HD);
    if (dk)
        cu_rope_bwd(be, dk, dk, pos, t, N, NKV, HD);
}

const dllm_backend_ops cuda_ops = {
    /* buffers */
    cu_alloc, cu_free, cu_upload, cu_download, cu_copy, cu_memset0, cu_sync, cu_copy_2d,
    /* linear layers and GEMM; no NVFP4 linear: an nvfp4 rollout is refused on the device */
    cu_gemm, cu_gemm_bf16, cu_linear_fwd, cu_linear_bwd, cu_bias_fwd, cu_bias_bwd,
    cu_bf16_linear_fwd, cu_bf16_linear_bwd_x, NULL, cu_int8_linear_fwd, cu_weight_cache_free,
    /* attention and positions */
    cu_rope_fwd, cu_rope_bwd, cu_attn_state_floats, cu_attention_fwd, cu_attention_bwd,
    cu_kv_append, cu_attention_cached,
    /* norms, activations, embeddings, elementwise */
    cu_rmsnorm_fwd, cu_rmsnorm_bwd, cu_swiglu_fwd, cu_swiglu_bwd, cu_embedding_fwd,
    cu_embedding_bwd, cu_round_bf16, cu_add,
    /* quantisation: the fused producers instead of the grouped linears */
    cu_to_bf16, cu_fp8_quantise, dllm_backend_device_pack_weight,
    dllm_backend_device_free_weight, cu_fp8_linear_fwd, NULL,
    cu_act_quant_prepare, cu_rmsnorm_quant_fwd, cu_swiglu_quant_fwd, cu_linear_quant_act_fwd,
    /* loss */
    cu_xent_fwd, cu_xent_bwd,
    /* optimizer */
    cu_adamw, cu_grad_norm, cu_clip_grad, cu_adamw_step,
    /* samplers: the whole nucleus only (a nucleus is chosen on the host) */
    cu_ar_choose, NULL,
    cu_denoise_block_counts, cu_denoise_rows, cu_denoise_logits_fix, cu_denoise_draw,
    cu_denoise_commit, cu_dream_draw, cu_dream_commit,
    /* Gated DeltaNet */
    cu_gd_conv_fwd, cu_gd_conv_bwd, cu_gd_l2norm_fwd, cu_gd_l2norm_bwd, cu_gd_gates_fwd,
    cu_gd_gates_bwd, cu_gd_rule_recurrent_fwd, cu_gd_rule_chunked_fwd, cu_gd_rule_bwd,
    cu_gd_gated_rmsnorm_fwd, cu_gd_gated_rmsnorm_bwd, cu_gd_partial_rope_fwd,
    cu_gd_partial_rope_bwd, cu_gd_out_gate_fwd, cu_gd_out_gate_bwd,
    /* fused forwards */
    cu_linear_res_fwd, cu_rope_attention_fwd, cu_rope_attention_bwd,
    /* a bf16 trainer's LoRA linears */
    cu_bf16_lora_fwd, cu_bf16_lora_bwd,
};

dllm_backend g_backend = {DLLM_BACKEND_CUDA, "cuda", &cuda_ops, &g_impl};
bool g_probed = false, g_have = false;
char g_why[256];

} // namespace

extern "C" dllm_backend *dllm_backend_cuda(void)
{
    if (!g_probed) {
        g_probed = true;
        g_have = dllm_cuda_device_count(g_why, sizeof g_why) > 0;
        if (g_have)
            g_impl.block_fp8 = dllm_cuda_fp8_block_scaling_available(NULL, 0);
    }
    return g_have ? &g_backend : NULL;
}

extern "C" bool dllm_backend_cuda_fp8_block(char *why, size_t why_len)
{
    if (!dllm_backend_cuda()) {
        if (why)
            snprintf(why, why_len, "%s", g_why);
        return false;
    }
    return dllm_cuda_fp8_block_scaling_available(why, why_len);
}

extern "C" const char *dllm_backend_cuda_why(void)
{
    dllm_backend_cuda();
    return g_have ? "" : g_why;
}

extern "C" size_t dllm_backend_cuda_workspace_bytes(void)
{
    return g_impl.ws_bytes + g_impl.qa_bytes;
}

extern "C" void dllm_backend_cuda_transfers(unsigned long long *up, unsigned long long *down)
{
    *up = g_impl.up;
    *down = g_impl.down;
}
