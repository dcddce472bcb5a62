/* cuda_ops.h: the op table (kernels/ops.h) on the GPU, plus the cuBLASLt GEMMs, FP8
 * quantisation and the sampler's x0 kernel. One file per op under kernels/cuda/.
 *
 * Conventions, the same as the CPU table unless said otherwise:
 *  - Every pointer is DEVICE memory; row-major fp32 unless the type says otherwise
 *    (uint16_t = bf16 bits, uint8_t = fp8 codes). Shape letters as in ops.h.
 *  - Backward functions ACCUMULATE (+=) into every gradient they are given; NULL means
 *    "not needed". Forward functions overwrite their outputs.
 *  - Every call is asynchronous on the given stream (NULL = the legacy default stream).
 *    A launch error aborts with file:line (kernels/cuda/check.cuh); a bad argument that
 *    is a programming error (shape, position or id out of range where checked on the
 *    host) aborts with a message naming the op.
 *  - No op allocates device memory: scratch comes from the caller (the *_scratch_floats
 *    functions say how much), so whatever counts or caps memory sees all of it.
 *  - Numerics: fp32 arithmetic without fast-math. Results agree with the CPU reference
 *    to rounding (tests/unit/test_backend_ops.c states each tolerance); bf16 conversion, FP8
 *    quantisation, AdamW and the sampler's x0 are bit-identical to the CPU.
 * Built without CUDA none of this exists: include it only under HAVE_CUDA. */
#ifndef DLLM_CUDA_OPS_H
#define DLLM_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/base.h"
#include "kernels/fp8.h"
#include "kernels/sample.h" /* dllm_dream_step */
#include "kernels/int8.h"

/* The same type as cudaStream_t, without pulling CUDA headers into C files. */
typedef struct CUstream_st *dllm_cuda_stream;

/* ---- RMSNorm (kernels/cuda/rmsnorm.cu) -----------------------------------------------
 * out[N,C] = w * x * rstd, rstd[N] = 1/sqrt(mean(x^2) + eps) (rstd may be NULL).
 * Backward: dinp += rstd * (dy - y * mean(dy*y)), dy = dout*w, y = x*rstd;
 *           dw += sum_n dout * y (deterministic: fixed row chunks, no atomics). */
void dllm_cuda_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w,
                           int N, int C, float eps, dllm_cuda_stream s);
/* rmsnorm_fwd (out may be NULL) and out's bf16 copy o16 (the conversion pass's bits) */
void dllm_cuda_rmsnorm_bf16_fwd(float *out, float *rstd, uint16_t *o16, const float *inp,
                                const float *w, int N, int C, float eps, dllm_cuda_stream s);
void dllm_cuda_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C, float *scratch,
                           dllm_cuda_stream s);
/* Floats of scratch rmsnorm_bwd needs for dw (device memory, not kept between calls). */
size_t dllm_cuda_rmsnorm_bwd_scratch_floats(int N, int C);

/* ---- RoPE, rotate-half (kernels/cuda/rope.cu) -------------------------------------------
 * x [N,NH,HD], pos [N]; cos, sin [max_pos, HD/2] (upload the CPU op_rope_table so the
 * angles are bit-identical). A position outside [0, max_pos) writes NaN to its row
 * (loud, never a wild read). In place allowed. Backward rotates by -angle and
 * accumulates into dinp, except in place (dinp == dout), where it replaces. */
void dllm_cuda_rope_fwd(float *out, const float *inp, const int32_t *pos, const float *cos,
                        const float *sin, int max_pos, int N, int NH, int HD,
                        dllm_cuda_stream s);
void dllm_cuda_rope_bwd(float *dinp, const float *dout, const int32_t *pos, const float *cos,
                        const float *sin, int max_pos, int N, int NH, int HD,
                        dllm_cuda_stream s);

/* ---- Attention, flash-style (kernels/cuda/attention.cu) --------------------------------
 * q, out [B,T,NH,HD]; k, v [B,T,NKV,HD] (NH % NKV == 0); keymask [B,T] or NULL;
 * causal: query t sees keys <= t. HD <= 256. Instead of the CPU's att [B,NH,T,T] the
 * forward saves lse [B,NH,T] = log sum_s exp(S[s]) over visible keys (-inf for a query
 * with no visible key, whose output is zero); lse NULL (inference) saves nothing. The
 * backward recomputes P from lse and needs the same keymask and causal flag and a
 * scratch of dllm_cuda_attention_bwd_scratch_floats(B, T, NH) floats; dq, dk, dv
 * accumulate (deterministically). */
void dllm_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k,
                             const float *v, const uint8_t *keymask, int B, int T, int NH,
                             int NKV, int HD, bool causal, dllm_cuda_stream s);
/* dllm_cuda_attention_fwd over q and k rotated by dllm_cuda_rope_fwd at positions pos [B*T]
 * (table cos, sin [max_pos, HD/2]), applied as the kernels load the query and key tiles:
 * the same values, bit for bit, as the two rotations in place followed by the attention;
 * q and k are only read. */
void dllm_cuda_rope_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                  const float *v, const int32_t *pos, const float *cos,
                                  const float *sin, int max_pos, const uint8_t *keymask, int B,
                                  int T, int NH, int NKV, int HD, bool causal,
                                  dllm_cuda_stream s);
/* The backward of dllm_cuda_rope_attention_fwd on the tensor-core kernels
 * (dllm_cuda_attention_tc(HD) must hold): the query and key tiles rotated as loaded, dq
 * and dk rotated back as stored, dq, dk, dv written (not accumulated): bit for bit
 * dllm_cuda_rope_fwd of q and k, zeroed gradients, dllm_cuda_attention_bwd, then
 * dllm_cuda_rope_bwd of dq and dk in place. scratch as dllm_cuda_attention_bwd's. */
void dllm_cuda_rope_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                                  const float *out, const float *lse, const float *q,
                                  const float *k, const float *v, const int32_t *pos,
                                  const float *cos, const float *sin, int max_pos,
                                  const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                                  bool causal, float *scratch, dllm_cuda_stream s);
void dllm_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q,
                             const float *k, const float *v, const uint8_t *keymask, int B,
                             int T, int NH, int NKV, int HD, bool causal, float *scratch,
                             dllm_cuda_stream s);
size_t dllm_cuda_attention_bwd_scratch_floats(int B, int T, int NH);

/* ---- SwiGLU (kernels/cuda/swiglu.cu): out = silu(gate) * up ---------------------------- */
void dllm_cuda_swiglu_fwd(float *out, const float *gate, const float *up, size_t n,
                          dllm_cuda_stream s);
void dllm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n, dllm_cuda_stream s);
/* swiglu_fwd (out may be NULL) and out's bf16 copy o16 (the conversion pass's bits) */
void dllm_cuda_swiglu_bf16_fwd(float *out, uint16_t *o16, const float *gate, const float *up,
                               size_t n, dllm_cuda_stream s);

/* ---- Embedding (kernels/cuda/embedding.cu) ------------------------------------------------
 * out[n,:] = wte[ids[n],:] (an id outside [0, V) writes NaN); dwte[ids[n],:] += dout[n,:]
 * with atomicAdd, since ids repeat (ids outside [0, V) are skipped). */
void dllm_cuda_embedding_fwd(float *out, const int32_t *ids, const float *wte, int N, int C,
                             int V, dllm_cuda_stream s);
void dllm_cuda_embedding_bwd(float *dwte, const float *dout, const int32_t *ids, int N, int C,
                             int V, dllm_cuda_stream s);

/* ---- Log-softmax + cross-entropy (kernels/cuda/xent.cu) ------------------------------------
 * One block per row, fp32 online logsumexp. logp[n] = logits[n,target] - lse (NaN for a
 * target outside [0, V)); lse[n] may be NULL. Per-token weights come in through dlogp
 * (loss = -sum w_n logp[n] gives dlogp[n] = -w_n); rows with dlogp == 0 are skipped.
 * Backward: dlogits[n,j] += dlogp[n] * (onehot(target)[j] - softmax[j]); lse NULL means
 * recompute it. */
void dllm_cuda_xent_fwd(float *logp, float *lse, const float *logits, const int32_t *target,
                        int N, int V, dllm_cuda_stream s);
void dllm_cuda_xent_bwd(float *dlogits, const float *dlogp, const float *logits,
                        const float *lse, const int32_t *target, int N, int V,
                        dllm_cuda_stream s);

/* ---- AdamW, gradient norm and clipping (kernels/cuda/adamw.cu) ---------------------------
 * dllm_cuda_adamw: op_adamw's step, bit-identical (same fp32 operations and fused
 * multiply-adds, scalars formed in double on the host). p_bf16 (may be NULL) receives
 * bf16(p) after the step: the bf16 working copy of the weights.
 * dllm_cuda_sumsq_accum: *acc (one device double) += sum g^2, accumulated in double;
 * call it for every tensor of the global norm after zeroing *acc.
 * dllm_cuda_clip_grad: norm = sqrt(*sumsq) read on the device (no host sync); if
 * max_norm / (norm + 1e-6) < 1, g *= that coefficient (as fp32), as op_clip_grad.
 * dllm_cuda_grad_norm: one tensor's L2 norm, synchronous (tests, logging); scratch is
 * one device double. */
void dllm_cuda_adamw(float *p, const float *g, float *m, float *v, uint16_t *p_bf16, size_t n,
                     int t, float lr, float b1, float b2, float eps, float wd,
                     dllm_cuda_stream s);
void dllm_cuda_sumsq_accum(double *acc, const float *g, size_t n, dllm_cuda_stream s);
void dllm_cuda_clip_grad(float *g, size_t n, const double *sumsq, double max_norm,
                         dllm_cuda_stream s);
double dllm_cuda_grad_norm(const float *g, size_t n, double *scratch, dllm_cuda_stream s);

/* ---- bf16 <-> fp32 (kernels/cuda/convert.cu): RNE, NaN stays (quiet) NaN --------------- */
void dllm_cuda_f32_to_bf16(uint16_t *out, const float *inp, size_t n, dllm_cuda_stream s);
void dllm_cuda_bf16_to_f32(float *out, const uint16_t *inp, size_t n, dllm_cuda_stream s);
/* x = bf16(x) in place (op_round_bf16); y += x (the backend table's add). */
void dllm_cuda_round_bf16(float *x, size_t n, dllm_cuda_stream s);
void dllm_cuda_add(float *y, const float *x, size_t n, dllm_cuda_stream s);
/* dst[r*dld + c] = src[r*sld + c] for rows x cols floats */
void dllm_cuda_copy_2d(float *dst, size_t dld, const float *src, size_t sld, int rows, int cols,
                       dllm_cuda_stream s);
/* out (N, OC) += bias (OC) per row; dbias (OC) += column sums of dout, rows in order
 * (both bit-identical to the CPU backend). */
void dllm_cuda_bias_fwd(float *out, const float *bias, int N, int OC, dllm_cuda_stream s);
void dllm_cuda_bias_bwd(float *dbias, const float *dout, int N, int OC, dllm_cuda_stream s);

/* ---- FP8 quantisation (kernels/cuda/fp8_quant.cu) ------------------------------------------
 * Bit-identical to fp8_quantise (kernels/fp8.h): x [R,C] cut into br x bc blocks (edge
 * blocks cover the remainder), scale = amax/max over the finite values (1 if amax == 0;
 * pow2: rounded up to a power of two), q = RNE-encode(x / scale) with saturation.
 * Scale (i, j) of the SR x SC grid is written to scale[i*srs + j*scs], so the caller
 * picks the layout:
 *   CPU layout (fp8_matrix.scale)          srs = SC, scs = 1
 *   cuBLASLt VEC128 activations (1 x 128)  srs = 1,  scs = R       (R contiguous)
 *   cuBLASLt BLK128x128 weights            srs = round_up(SC, 4), scs = 1
 * (dllm_cuda_fp8_gemm_scale_strides returns the last two). br, bc > 0. */
void dllm_cuda_fp8_quantise(uint8_t *q, float *scale, long srs, long scs, const float *x,
                            int R, int C, int br, int bc, fp8_format f, bool pow2,
                            dllm_cuda_stream s);
/* The same from bf16 input (bits as uint16_t), for activations kept in bf16. */
void dllm_cuda_fp8_quantise_bf16(uint8_t *q, float *scale, long srs, long scs,
                                 const uint16_t *x, int R, int C, int br, int bc,
                                 fp8_format f, bool pow2, dllm_cuda_stream s);
/* out[R,C] = decode(q) * scale (same layout arguments). */
void dllm_cuda_fp8_dequantise(float *out, const uint8_t *q, const float *scale, long srs,
                              long scs, int R, int C, int br, int bc, fp8_format f,
                              dllm_cuda_stream s);

/* ---- FP8 activations written by their producer (rmsnorm.cu, swiglu.cu) -------------------
 * The producer's forward plus the FP8 codes q [R,C] of its output and one scale per
 * 1 x gc group of each row (edge groups cover the remainder; gc >= C: one per row), in
 * one pass: bit-identical to the plain forward followed by
 *   dllm_cuda_fp8_quantise(q, scale, srs, scs, out, R, C, 1, gc, f, pow2)
 * (tests/unit/backend_kernel_cases.c). out (and rstd) may be NULL when only the codes are
 * needed. The layout arguments are the quantise pass's: gc = 128 with
 * dllm_cuda_fp8_gemm_scale_strides' activation strides gives what the block-scaled
 * FP8 GEMM reads. RMSNorm: R = N rows of C; SwiGLU: out = silu(gate) * up over [R, C]. */
void dllm_cuda_rmsnorm_fp8_fwd(float *out, float *rstd, uint8_t *q, float *scale, long srs,
                               long scs, const float *inp, const float *w, int N, int C,
                               float eps, int gc, fp8_format f, bool pow2, dllm_cuda_stream s);
void dllm_cuda_swiglu_fp8_fwd(float *out, uint8_t *q, float *scale, long srs, long scs,
                              const float *gate, const float *up, int R, int C, int gc,
                              fp8_format f, bool pow2, dllm_cuda_stream s);
/* The same with the INT8 linear's activation codes (gemm_int8.cu): q (R, ld) int8, zero
 * past C; scale (R, kb), one per 1 x gc group (kb = ceil(C / gc); gc = C: one per row).
 * Bit-identical to the plain forward followed by dllm_cuda_int8_linear's own pass. */
void dllm_cuda_rmsnorm_int8_fwd(float *out, float *rstd, int8_t *q, float *scale, int ld,
                                int kb, const float *inp, const float *w, int N, int C,
                                float eps, int gc, dllm_cuda_stream s);
void dllm_cuda_swiglu_int8_fwd(float *out, int8_t *q, float *scale, int ld, const float *gate,
                               const float *up, int R, int C, int gc, dllm_cuda_stream s);

/* ---- the INT8 W8A7 linear (kernels/cuda/gemm_int8.cu) ----------------------------------------
 * out[N, OC] = op_int8_linear_fwd's result bit for bit: the activations quantised on the
 * device with the CPU's codes, cuBLASLt's INT8 GEMM (exact int32 sums), the CPU's scaling.
 * w: q and scale device memory in the device layout (dllm_cuda_int8_weight_layout; the
 * scales in the CPU's layout), comp unused. scratch: dllm_cuda_int8_scratch_bytes(N, w)
 * bytes, 256-byte aligned. Legacy default stream. */
void dllm_cuda_int8_linear(float *out, const float *inp, const int8_matrix *w, int N, int C,
                           int OC, void *scratch, const float *res);
size_t dllm_cuda_int8_scratch_bytes(int N, const int8_matrix *w);
/* The same from activation codes a producer wrote (qa (N, w->ldq), sa (N, w->kb):
 * dllm_cuda_rmsnorm_int8_fwd / dllm_cuda_swiglu_int8_fwd with w's group and stride);
 * acc_scratch: dllm_cuda_int8_acc_bytes(N, w) bytes, 256-byte aligned. Either: res (N, OC)
 * (NULL: none) added to out after the product's sum. */
void dllm_cuda_int8_linear_codes(float *out, const int8_t *qa, const float *sa,
                                 const int8_matrix *w, int N, int C, int OC, void *acc_scratch,
                                 const float *res);
size_t dllm_cuda_int8_acc_bytes(int N, const int8_matrix *w);
/* The channel-scaled product's int32 scratch limit in elements (<= 0: the default,
 * INT8_DEVICE_ACC_ELEMS), so a test splits its rows into chunks at small shapes. */
void dllm_cuda_int8_acc_limit(int elems);

/* ---- GEMMs through cuBLASLt (kernels/cuda/gemm_cublaslt.cu) ---------------------------------
 * 32 MiB workspace (256-byte aligned) per device; the heuristic's algorithm is chosen
 * once per (shape, transposes, types) and cached. Shapes are checked on the host:
 * every leading dimension must be a multiple of 16 bytes and every pointer 16-byte
 * aligned; a violation returns DLLM_EXIT_INTERNAL with a message naming the operand.
 *
 * dllm_cuda_gemm_bf16: like op_gemm, row-major C[M,N] = alpha op(A) op(B) + beta C with
 * bf16 A and B, fp32 accumulation, C fp32 (out_bf16 false) or bf16 (out_bf16 true).
 * beta = 1 gives the accumulating backward. */
int dllm_cuda_gemm_bf16(bool transA, bool transB, int M, int N, int K, float alpha,
                        const uint16_t *A, const uint16_t *B, float beta, void *C,
                        bool out_bf16, dllm_cuda_stream s, dllm_err *err);
/* D[M,N] = alpha op(A) op(B) + R with bf16 A and B, fp32 R and D (R read in the GEMM's
 * epilogue as cuBLASLt's C with beta 1; D and R distinct, 16-byte aligned): a linear plus
 * the residual. */
int dllm_cuda_gemm_bf16_res(bool transA, bool transB, int M, int N, int K, float alpha,
                            const uint16_t *A, const uint16_t *B, const float *R, float *D,
                            dllm_cuda_stream s, dllm_err *err);

/* dllm_cuda_gemm_f32: op_gemm with fp32 A, B, C (cuBLASLt's SGEMM path, fp32 compute, no
 * TF32), any shape and leading dimension; the backend table's gemm and linear layers. */
int dllm_cuda_gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha,
                       const float *A, const float *B, float beta, float *C,
                       dllm_cuda_stream s, dllm_err *err);

/* W8A8 linear: out[N,OC] = dequant(act)[N,C] @ dequant(w)[OC,C]^T with codes in the
 * formats w_fmt and act_fmt, fp32 accumulation, out fp32 or bf16. cuBLASLt has no
 * E5M2 x E5M2 kernel: that pair is refused (DLLM_EXIT_INTERNAL, a message naming it);
 * E4M3 x E4M3, E4M3 weights x E5M2 activations and the reverse are taken. This is cuBLASLt's "TN" problem (m = OC, n = N,
 * k = C). scaling:
 *   FP8_SCALE_BLOCK  w in 128x128 blocks, act in 1x128 groups, scales in the cuBLASLt
 *                    layouts above; N a multiple of 8 (callers pad the token rows);
 *                    needs cuBLAS 12.9.1+ and sm_90
 *                    (dllm_cuda_fp8_block_scaling_available());
 *   FP8_SCALE_TENSOR one fp32 scale each (device pointers), any cuBLAS with FP8.
 * C % 16 == 0 and OC % 16 == 0 are required. */
int dllm_cuda_fp8_linear(void *out, bool out_bf16, const uint8_t *act_q, const float *act_scale,
                         fp8_format act_fmt, const uint8_t *w_q, const float *w_scale,
                         fp8_format w_fmt, fp8_scaling scaling, int N, int C, int OC,
                         dllm_cuda_stream s, dllm_err *err);
/* The same with out fp32 = the product + res (N x OC fp32, distinct from out, 16-byte
 * aligned): res is cuBLASLt's C with beta 1, read in the epilogue. cuBLASLt's FP8 GEMMs
 * take C and D fp32 with the fp32 scale type, tensor-wide or block-scaled (no C/D scale
 * pointers: none are set). */
int dllm_cuda_fp8_linear_res(float *out, const float *res, const uint8_t *act_q,
                             const float *act_scale, fp8_format act_fmt, const uint8_t *w_q,
                             const float *w_scale, fp8_format w_fmt, fp8_scaling scaling, int N,
                             int C, int OC, dllm_cuda_stream s, dllm_err *err);
/* True when this build, the cuBLAS found at run time (12.9.1 or later) and the current
 * device (sm_90) support block-scaled FP8 GEMMs; otherwise a block-scaled rollout is
 * refused (dllm_backend_fp8_block_ok). why (may be NULL) says which part is missing and
 * the version needed. */
bool dllm_cuda_fp8_block_scaling_available(char *why, size_t why_len);
/* Scale strides (srs, scs) for dllm_cuda_fp8_quantise that produce the cuBLASLt layouts:
 * activations act[N,C] in 1x128 groups, weights w[OC,C] in 128x128 blocks. */
void dllm_cuda_fp8_gemm_scale_strides(int N, int C, long *act_srs, long *act_scs,
                                      long *w_srs, long *w_scs);
/* Floats to allocate for the cuBLASLt-layout scales of a weight [OC,C] (with padding). */
size_t dllm_cuda_fp8_weight_scale_count(int OC, int C);

/* ---- Sampler x0 (kernels/cuda/sampler.cu) ----------------------------------------------------
 * For each of the n rows of logits [n,V] (row i belongs to the sequence with the 64-bit
 * global index row_seq[i], as the CPU sampler keys its noise, at canvas
 * position row_pos[i]): x0[i] = argmax (temperature == 0) or the Gumbel-max draw
 *   argmax_v exp(logit[v]) / (-log u_v)^temperature   (float64, as dllm/sampler.c)
 * with u_v = draw (row_pos*V + v) of the keyed stream
 *   dllm_rng_make(seed, DLLM_RNG_SAMPLER, gstep, 2*row_seq),
 * ties to the lowest v; prob[i] = softmax(logit)[x0] (float64 sums). rand_conf (may be
 * NULL) gets the random-remasking confidence: draw row_pos of stream 2*row_seq + 1.
 * x0 is bit-identical to the CPU sampler. */
void dllm_cuda_sampler_x0(int32_t *x0, float *prob, double *rand_conf, const float *logits,
                          const int64_t *row_seq, const int32_t *row_pos, int n, int V,
                          double temperature, uint64_t seed, uint64_t gstep,
                          dllm_cuda_stream s);
/* The same draw over every id but exclude (-1: none; mask_token = forbid passes the mask
 * id), as dllm_sampler_draw_x0_excl; prob keeps the excluded id in the normaliser. */
void dllm_cuda_sampler_x0_excl(int32_t *x0, float *prob, double *rand_conf,
                               const float *logits, const int64_t *row_seq,
                               const int32_t *row_pos, int n, int V, double temperature,
                               uint64_t seed, uint64_t gstep, int exclude, dllm_cuda_stream s);
/* The same with each row's step from its sequence: gstep of row i =
 * seq_step[row_seq[i] - seq_offset] (seq_step in device memory). */
void dllm_cuda_sampler_x0_steps(int32_t *x0, float *prob, double *rand_conf,
                                const float *logits, const int64_t *row_seq,
                                const int32_t *row_pos, int n, int V, double temperature,
                                uint64_t seed, const int32_t *seq_step, uint64_t seq_offset,
                                int exclude, dllm_cuda_stream s);
/* out[i] = draw ctr0 + i of stream (seed, a, b, c), i.e. dllm_rng_u64 after setting
 * ctr = ctr0 + i: the device RNG checked bit for bit against kernels/rng.c. */
void dllm_cuda_rng_u64(uint64_t *out, size_t n, uint64_t seed, uint64_t a, uint64_t b,
                       uint64_t c, uint64_t ctr0, dllm_cuda_stream s);

/* ---- Device sampler step (kernels/cuda/sampler_step.cu) -------------------------------------
 * The rest of one step of the LLaDA sampler (dllm/sampler.c), each as the CPU backend's
 * entries (kernels/cpu/denoise.c).
 * canvas [B,T] int32 (T = P + G; with CFG [2B,T], the unconditional copy second).
 *
 * dllm_cuda_sampler_rows: the committable rows, every position t in [lo, hi) of the first B
 * sequences that holds mask_id (with act_lo >= 0 only in sequences holding mask_id somewhere
 * in [act_lo, hi)), sequence-major then by t: rows[i] = b*T + t (rows_u[i] = (B+b)*T + t,
 * the unconditional copy's row, when rows_u is not NULL), row_seq[i] = seq_offset + b (the
 * noise key), row_pos[i] = t; seq_start[b] = the first row of sequence b, seq_start[B] =
 * *n = the count. Arrays sized B*(hi-lo). One block: ordered compaction. */
void dllm_cuda_sampler_rows(int32_t *rows, int32_t *rows_u, int64_t *row_seq, int32_t *row_pos,
                            int32_t *seq_start, int32_t *n, const int32_t *canvas, int B, int T,
                            int lo, int hi, int act_lo, int mask_id, uint64_t seq_offset,
                            dllm_cuda_stream s);
/* nm[b] = positions t in [lo, hi) of sequence b holding mask_id (the block's masked count
 * at its start, which the transfer-count schedule splits). */
void dllm_cuda_sampler_block_counts(int32_t *nm, const int32_t *canvas, int B, int T, int lo,
                                    int hi, int mask_id, dllm_cuda_stream s);
/* cond [n,V] = uncond + w (cond - uncond) in fp32 without fused multiply-adds (uncond
 * NULL: no CFG), then cond[:, eos_id] = -inf when eos_id >= 0 (logits_eos_inf). */
void dllm_cuda_sampler_logits_fix(float *cond, const float *uncond, int n, int V, float w,
                                  int eos_id, dllm_cuda_stream s);
/* Per sequence b, among its rows [seq_start[b], seq_start[b+1]) with x0, prob and (random
 * remasking; NULL for low_confidence) rand_conf from dllm_cuda_sampler_x0_excl: confidence
 * = rand_conf or (double)prob, -inf where x0 is eos_id or eot_id (pass -1 for both when
 * confidence_eos_eot_inf is off); the k = nm[b]/spb + (step_in_block < nm[b] % spb) most
 * confident (threshold > 0: the most confident and every other >= threshold) are
 * committed, ties to the lower position: canvas (both copies when cfg) gets x0,
 * commit_step (B,G) gets seq_step[b] and commit_prob (B,G) prob, except where x0 is
 * mask_id (written back: the position stays masked and unrecorded); then seq_step[b] += 1
 * (with a threshold only where b had rows). */
void dllm_cuda_sampler_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                              const int32_t *x0, const float *prob, const double *rand_conf,
                              const int32_t *row_pos, const int32_t *seq_start,
                              const int32_t *nm, int spb, int step_in_block, int32_t *seq_step,
                              double threshold, int B, int T, int P, int G, int mask_id,
                              int eos_id, int eot_id, bool cfg, dllm_cuda_stream s);

/* ---- Dream's sampler step (kernels/cuda/dream_step.cu) --------------------------------------
 * The CUDA backend's dream_draw and dream_commit entries (kernels/backend.h has the
 * contracts), row for row the CPU's kernels/cpu/dream_step.c. The draw of n rows needs
 * scratch of dllm_cuda_dream_scratch_bytes(n, V) bytes (12 V a row). */
size_t dllm_cuda_dream_scratch_bytes(int n, int V);
void dllm_cuda_dream_draw(int32_t *x0, double *key, float *prob, uint8_t *take,
                          const float *logits, const int64_t *row_seq, const int32_t *row_pos,
                          int n, int V, const dllm_dream_step *a, double *scratch,
                          dllm_cuda_stream s);
void dllm_cuda_dream_commit(int32_t *canvas, int16_t *commit_step, float *commit_prob,
                            const int32_t *x0, const double *key, const float *prob,
                            const uint8_t *take, const int32_t *row_pos, const int32_t *seq_start,
                            int B, int T, int P, int G, int mask_id, const dllm_dream_step *a,
                            dllm_cuda_stream s);

/* ---- KV-cache attention (kernels/cuda/attention.cu) ------------------------------------------
 * The CUDA backend's kv_append and attention_cached entries: kc, vc [B,max_len,NKV,HD] (K
 * after k_norm and RoPE), cmask [B,max_len]. kv_append writes k, v [B,T,NKV,HD] into slots
 * len .. len+T-1 and, when cmask is not NULL, their key mask (newmask [B,T], or NULL: all
 * real). attention_cached: y [B,T,NH,HD] for the queries q [B,T,NH,HD] at slots len + t
 * over the cached slots s <= len + t (causal; else every slot s < max_len) with cmask != 0
 * (cmask NULL: all; none visible: 0). HD <= 256. */
void dllm_cuda_kv_append(float *kc, float *vc, uint8_t *cmask, const float *k, const float *v,
                         const uint8_t *newmask, int B, int T, int len, int max_len, int KD,
                         dllm_cuda_stream s);
void dllm_cuda_attention_cached(float *y, const float *q, const float *kc, const float *vc,
                                const uint8_t *cmask, int B, int T, int len, int max_len,
                                int NH, int NKV, int HD, bool causal, dllm_cuda_stream s);

/* ---- Autoregressive sampler step (kernels/cuda/ar_sample.cu) --------------------------------
 * For the n rows r0 .. r0+n-1 of logits [n,V] (row r0 + i of the batch): the token of
 * dllm_ar_choose (top_p = 1) with u = draw 1 of (seed, DLLM_RNG_SAMPLER, g,
 * seq_offset + row), written to tokens[row,g] and next[row], its log-probs to logp and
 * logp_t1 [B,G], length[row] = g + 1, done[row] = (token == eos_id). A row with done set
 * only gets next[row] = eos_id. */
void dllm_cuda_ar_choose(int32_t *tokens, int32_t *next, float *logp, float *logp_t1,
                         int32_t *length, uint8_t *done, const float *logits, int r0, int n,
                         int V, int G, int g, double temperature, int eos_id, uint64_t seed,
                         uint64_t seq_offset, dllm_cuda_stream s);

/* ---- Gated DeltaNet (kernels/cuda/gated_delta.cu) ----------------------------------------
 * The ops of kernels/gated_delta.h with the same arguments, shapes and conventions (forwards
 * overwrite, backwards accumulate, NULL outputs skipped, state_out may be state_in), device
 * pointers, deterministic (no float atomics). conv_fwd: out must not alias x unless K == 1
 * (as on the CPU). The rule's forward keeps Dk x 32 columns of the state in shared memory
 * per block (Dk <= 361); the chunked forward runs the recurrent kernel (the same function,
 * equal to the CPU's chunked form to rounding). rule_bwd needs a scratch of
 * dllm_cuda_gd_rule_bwd_scratch_floats(...) floats (the recomputed states: B Hv Dk Dv
 * (ceil(T/64) + min(T,64) + 2) plus 2 B T Hv Dk) and max(Dk, Dv) <= 1024. */
void dllm_cuda_gd_conv_fwd(float *out, float *pre, float *state_out, const float *x,
                           const float *state, const float *w, int B, int T, int D, int K,
                           dllm_cuda_stream s);
void dllm_cuda_gd_conv_bwd(float *dx, float *dw, float *dstate, const float *dout,
                           const float *pre, const float *x, const float *state, const float *w,
                           int B, int T, int D, int K, dllm_cuda_stream s);
void dllm_cuda_gd_l2norm_fwd(float *out, float *rnorm, const float *x, int rows, int n,
                             float eps, dllm_cuda_stream s);
void dllm_cuda_gd_l2norm_bwd(float *dx, const float *dout, const float *out, const float *rnorm,
                             int rows, int n, dllm_cuda_stream s);
void dllm_cuda_gd_gates_fwd(float *g, float *beta, const float *a, const float *b,
                            const float *A_log, const float *dt_bias, int N, int Hv,
                            dllm_cuda_stream s);
void dllm_cuda_gd_gates_bwd(float *da, float *db, float *dA_log, float *ddt_bias,
                            const float *dg, const float *dbeta, const float *a, const float *b,
                            const float *A_log, const float *dt_bias, int N, int Hv,
                            dllm_cuda_stream s);
void dllm_cuda_gd_rule_recurrent_fwd(float *o, float *state_out, const float *q, const float *k,
                                     const float *v, const float *g, const float *beta,
                                     const float *state_in, int B, int T, int Hk, int Dk, int Hv,
                                     int Dv, dllm_cuda_stream s);
void dllm_cuda_gd_rule_chunked_fwd(float *o, float *state_out, const float *q, const float *k,
                                   const float *v, const float *g, const float *beta,
                                   const float *state_in, int B, int T, int Hk, int Dk, int Hv,
                                   int Dv, int chunk, dllm_cuda_stream s);
void dllm_cuda_gd_rule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta,
                           float *dstate_in, const float *dout, const float *q, const float *k,
                           const float *v, const float *g, const float *beta,
                           const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv,
                           float *scratch, dllm_cuda_stream s);
size_t dllm_cuda_gd_rule_bwd_scratch_floats(int B, int T, int Hk, int Dk, int Hv, int Dv);
void dllm_cuda_gd_gated_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *z,
                                    const float *w, int rows, int n, float eps,
                                    dllm_cuda_stream s);
void dllm_cuda_gd_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dout,
                                    const float *x, const float *z, const float *w,
                                    const float *rstd, int rows, int n, dllm_cuda_stream s);
void dllm_cuda_gd_partial_rope_fwd(float *out, const float *x, const int32_t *pos, int N, int NH,
                                   int HD, int rot, float theta, dllm_cuda_stream s);
void dllm_cuda_gd_partial_rope_bwd(float *dx, const float *dout, const int32_t *pos, int N,
                                   int NH, int HD, int rot, float theta, dllm_cuda_stream s);
void dllm_cuda_gd_out_gate_fwd(float *out, const float *x, const float *gate, size_t n,
                               dllm_cuda_stream s);
void dllm_cuda_gd_out_gate_bwd(float *dx, float *dgate, const float *dout, const float *x,
                               const float *gate, size_t n, dllm_cuda_stream s);

#ifdef __cplusplus
}
#endif
#endif
