/* ops.h: the op table. Every op has a CPU reference (kernels/cpu/) and, where
 * built, a CUDA implementation (kernels/cuda/) tested against it.
 *
 * Conventions (the same for every op):
 *  - Row-major fp32 buffers. Shape comments use fixed letters: B batch, T tokens
 *    per sequence, N rows (= B*T), C channels, OC output channels, NH query
 *    heads, NKV key/value heads, HD head dim, V vocab.
 *  - Backward functions ACCUMULATE (+=) into every gradient buffer they are
 *    given, parameters and activations alike; the caller zeroes. A NULL gradient
 *    pointer means "not needed" and is skipped.
 *  - Forward functions overwrite their outputs.
 *  - Threads: the CPU ops parallelise over rows with OpenMP; GEMMs go to
 *    oneDNN or OpenBLAS (op_gemm_library). Results do not depend on the thread
 *    count except for GEMM summation order. */
#ifndef DLLM_OPS_H
#define DLLM_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- GEMM ------------------------------------------------------------------
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T. A is [M,K] (or
 * [K,M] if transA), B is [K,N] (or [N,K] if transB). */
void op_gemm(bool transA, bool transB, int M, int N, int K, float alpha,
             const float *A, const float *B, float beta, float *C);

/* The library op_gemm's kernel calls run on: OpenBLAS, or oneDNN (if built). Chosen
 * per call by the environment variable DLLM_GEMM=openblas|dnnl, else by configure's
 * --with-gemm, whose default (auto) is op_gemm_rule on this CPU; an unknown or
 * unbuilt choice is bad input (message, exit 2). The blocking and threading are the
 * same for both, so each is deterministic for a given thread count; the two differ in
 * the last bits. */
typedef enum { OP_GEMM_OPENBLAS = 0, OP_GEMM_DNNL = 1, OP_GEMM_AUTO = 2 } op_gemm_lib;
op_gemm_lib op_gemm_library(void);
/* One line naming the CPU and the paths this process's kernels take on it (the fp32 GEMM
 * library and OpenBLAS's core type, the bf16, FP8 and INT8 products, expf, the threads):
 * what a run's numerics depend on beyond its config (kernels/cpu/cpu_paths.c). */
void op_cpu_paths(char *out, size_t cap);
/* The library without DLLM_GEMM: configure's choice, or the rule on this CPU. */
op_gemm_lib op_gemm_library_default(void);
/* The rule (docs/BUILDING.md): oneDNN on a CPU with AVX-512 where the build has it,
 * else OpenBLAS (its AVX2 kernels are at least level with oneDNN's there). */
op_gemm_lib op_gemm_rule(bool avx512, bool dnnl_built);
bool op_gemm_library_built(op_gemm_lib lib);
const char *op_gemm_library_name(op_gemm_lib lib);

/* Linear layer in torch layout: out[N,OC] = inp[N,C] @ w[OC,C]^T.
 * Backward: dinp[N,C] += dout @ w; dw[OC,C] += dout^T @ inp. */
void op_linear_fwd(float *out, const float *inp, const float *w, int N, int C, int OC);
void op_linear_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                   const float *w, int N, int C, int OC);

/* ---- RMSNorm -----------------------------------------------------------------
 * out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), per row of C.
 * rstd[N] is saved for backward (may be NULL in forward-only use). */
void op_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w,
                    int N, int C, float eps);
void op_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const float *rstd, int N, int C);

/* ---- RoPE (rotate-half over the whole head) --------------------------------------
 * x is [N, NH, HD] with row n at position pos[n]. For i < HD/2:
 *   angle = pos * theta^(-2i/HD) (fp32),  x1 = x[i], x2 = x[i+HD/2]
 *   out[i] = x1*cos - x2*sin,  out[i+HD/2] = x2*cos + x1*sin.
 * A table of cos/sin [max_pos, HD/2] is built once per (theta, HD, max_pos).
 * Backward is the inverse rotation (rotation by -angle). In-place allowed. */
typedef struct {
    int max_pos, half;  /* half = HD/2 */
    float *cos, *sin;   /* [max_pos, half] */
} op_rope_table;
void op_rope_table_init(op_rope_table *t, int max_pos, int head_dim, float theta);
void op_rope_table_free(op_rope_table *t);
void op_rope_fwd(float *out, const float *inp, const int32_t *pos, const op_rope_table *t,
                 int N, int NH, int HD);
void op_rope_bwd(float *dinp, const float *dout, const int32_t *pos, const op_rope_table *t,
                 int N, int NH, int HD);

/* ---- Attention -----------------------------------------------------------------
 * q [B,T,NH,HD], k,v [B,T,NKV,HD] (NH % NKV == 0: grouped-query; head h uses
 * kv head h / (NH/NKV)), out [B,T,NH,HD]. Scores scaled by 1/sqrt(HD).
 * keymask [B,T]: 1 = key may be attended, 0 = padding (NULL: all valid).
 * causal: query t sees keys <= t. A query with no visible key outputs zeros.
 * att [B,NH,T,T] receives the softmax probabilities, needed by backward. */
void op_attention_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal);
/* Bidirectional attention of Tq queries over Tk cached keys (cached denoising):
 * out, q (B, Tq, NH, HD); k, v (B, Tk, NKV, HD); keymask (B, Tk) or NULL. The same
 * per-(b, head) GEMM, softmax and GEMM as op_attention_fwd without the causal case and
 * without keeping the probabilities. */
void op_attention_kv_fwd(float *out, const float *q, const float *k, const float *v,
                         const uint8_t *keymask, int B, int Tq, int Tk, int NH, int NKV, int HD);
/* The key/value cache (kernels/backend.h's kv_append and attention_cached have the
 * contracts): kc, vc (B, max_len, KD), cmask (B, max_len). */
void op_kv_append(float *kc, float *vc, uint8_t *cmask, const float *k, const float *v,
                  const uint8_t *newmask, int B, int T, int len, int max_len, int KD);
void op_attention_cached(float *y, const float *q, const float *kc, const float *vc,
                         const uint8_t *cmask, int B, int T, int len, int max_len, int NH,
                         int NKV, int HD, bool causal);
void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *att,
                      const float *q, const float *k, const float *v,
                      int B, int T, int NH, int NKV, int HD);

/* ---- SwiGLU ---------------------------------------------------------------------
 * out[n] = silu(gate[n]) * up[n], silu(x) = x / (1 + exp(-x)). The backward writes
 * dgate and dup (either may be NULL), it does not add to them: they are the gradients of
 * the two projections' outputs, each of which feeds only this op. */
void op_swiglu_fwd(float *out, const float *gate, const float *up, size_t n);
void op_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, size_t n);

/* ---- Embedding -----------------------------------------------------------------
 * out[N,C] = wte[ids[n], :]; backward dwte[ids[n], :] += dout[n, :]. */
void op_embedding_fwd(float *out, const int32_t *ids, const float *wte, int N, int C);
void op_embedding_bwd(float *dwte, const float *dout, const int32_t *ids, int N, int C);

/* ---- Log-softmax + cross-entropy ----------------------------------------------------
 * logp[n] = log softmax(logits[n, :])[target[n]] (computed in double, stored fp32).
 * Per-token weights enter through the backward's upstream gradient: with
 * loss = -sum_n w_n logp[n], pass dlogp[n] = -w_n. Rows with dlogp[n] == 0 are
 * skipped. Backward: dlogits[n, j] += dlogp[n] * (onehot(target)[j] - softmax[j]).
 * logsumexp[n] (may be NULL) is saved by forward and reused by backward. */
void op_xent_fwd(float *logp, float *logsumexp, const float *logits, const int32_t *target,
                 int N, int V);
void op_xent_bwd(float *dlogits, const float *dlogp, const float *logits,
                 const float *logsumexp, const int32_t *target, int N, int V);

/* ---- AdamW and gradient clipping (torch.optim.AdamW semantics) --------------------------
 * p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); t starts at 1. */
void op_adamw(float *p, const float *g, float *m, float *v, size_t n, int t,
              float lr, float b1, float b2, float eps, float wd);
/* L2 norm of a gradient vector, accumulated in double. */
double op_grad_norm(const float *g, size_t n);
/* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6); if coef < 1
 * scale g by coef. Returns the norm before clipping. */
double op_clip_grad(float *g, size_t n, double total_norm, double max_norm);

/* ---- bf16 ------------------------------------------------------------------------
 * Round to nearest even; NaN stays NaN (quiet); inf stays inf. The backward of
 * bf16 rounding is the identity (straight-through). */
uint16_t op_f32_to_bf16(float x);
float op_bf16_to_f32(uint16_t h);
void op_f32_to_bf16_array(uint16_t *out, const float *inp, size_t n);
void op_bf16_to_f32_array(float *out, const uint16_t *inp, size_t n);
void op_round_bf16(float *x, size_t n); /* in place: x = bf16(x) as fp32 */
void op_round_bf16_copy(float *out, const float *inp, size_t n); /* out = bf16(inp) as fp32 */
/* ---- bf16 linear (kernels/cpu/bf16_linear.c) ----------------------------------------
 * out[N,OC] = bf16(inp)[N,C] @ w[OC,C]^T with w packed once as bf16 (round to nearest
 * even). Numerics: bf16 inputs, their products exact in fp32, sums in fp32 (order up
 * to the kernel). On a CPU with AVX512-BF16 and a oneDNN build it runs on oneDNN's
 * bf16 matmul; otherwise (or with DLLM_BF16_GEMM=fp32) on op_gemm over the widened
 * values, which is bit for bit op_round_bf16(inp) then op_linear_fwd with the
 * bf16-rounded weights. Packing re-rounds in place when the shape is unchanged (the
 * weight sync after an optimizer step). */
typedef struct {
    int rows, cols;  /* OC, C */
    uint16_t *w;     /* (OC, C) bf16 bits */
    float *wf32;     /* (OC, C) the same values widened, for the fp32 fallback; valid
                        iff wf32_valid (made on first use) */
    bool wf32_valid;
} bf16_matrix;
/* m zeroed before first use (bf16_matrix m = {0}). */
void bf16_matrix_pack(bf16_matrix *m, const float *w, int OC, int C);
void bf16_matrix_free(bf16_matrix *m);
/* w->rows == OC and w->cols == C are checked (abort: a programming error). */
void op_bf16_linear_fwd(float *out, const float *inp, bf16_matrix *w, int N, int C, int OC);
/* out[i] (N, OC[i]) = op_bf16_linear_fwd(inp, w[i]) for the nw weights of one input
 * (q/k/v, gate/up), bit for bit as nw calls, the input rounded once. */
void op_bf16_linears_fwd(int nw, float *const out[], const float *inp, bf16_matrix *const w[],
                         int N, int C, const int OC[]);
/* dinp[N,C] += dout[N,OC] @ w[OC,C] with the bf16 weight widened (its fp32 cache): bit
 * for bit op_linear_bwd's dinp with the bf16-rounded fp32 weight. */
void op_bf16_linear_bwd_x(float *dinp, const float *dout, bf16_matrix *w, int N, int C, int OC);
/* C[M,N] = alpha bf16(op(A)) bf16(op(B)) + beta C: op_gemm on copies of A and B rounded to
 * bf16 (exact products in fp32, fp32 sums; the backend's gemm_bf16 on the CPU). */
void op_gemm_bf16(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C);
/* Whether op_bf16_linear_fwd (and the fast FP8 linear) run on bf16 dot products now
 * ("dnnl-bf16"; "dnnl-bf16-amx" where oneDNN runs it on AMX tiles) or on the fp32
 * fallback ("fp32"). */
const char *op_bf16_gemm_path(void);

/* IEEE half, for F16 checkpoints. */
uint16_t op_f32_to_f16(float x);
float op_f16_to_f32(uint16_t h);

#endif
