/* backend.h: the backend interface (the ggml idea). A backend owns memory
 * (buffers: alloc, free, upload, download) and runs the op table on it; the
 * model core (dllm/transformer.c) calls ops only through a dllm_backend, so the
 * CPU backend (kernels/cpu/backend_cpu.c), the CUDA backend and the CUDA
 * emulation build share one model code path.
 *
 * Conventions are those of kernels/ops.h (row-major fp32, backward ACCUMULATES
 * into every gradient it is given, NULL = not needed, forward overwrites). Every
 * pointer an op receives is memory of the backend it runs on. Ops are
 * asynchronous on a device backend: call sync before reading results on the host
 * (download syncs itself).
 *
 * Attention keeps a backend-defined state between forward and backward
 * (attn_state_floats tells its size): the CPU keeps the probabilities
 * [B,NH,T,T]; a flash-style device kernel keeps the log-sum-exp [B,NH,T]. The
 * backward receives everything either needs (the forward's output, key mask and
 * causal flag). */
#ifndef DLLM_BACKEND_H
#define DLLM_BACKEND_H

#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/sample.h" /* dllm_dream_step */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { DLLM_BACKEND_CPU = 0, DLLM_BACKEND_CUDA = 1 } dllm_backend_kind;

typedef struct dllm_backend dllm_backend;

/* Activations quantised by the op that produced them (the fused ops of the quantisation
 * group), for the FP8, INT8 or BF16 linears that read them: codes q (rows x ld: FP8
 * bytes, INT8 codes with zeros past cols, or bf16 values) and, FP8 and INT8, one scale
 * per 1 x group of a row, scale (r, j) at scale[r*srs + j*scs]; all in the backend's
 * memory, laid out as its GEMM reads them. The backend fills it (act_quant_prepare); it
 * stays valid until the next prepare. */
typedef enum { DLLM_QACT_FP8, DLLM_QACT_INT8, DLLM_QACT_BF16 } dllm_qact_kind;
typedef struct {
    dllm_qact_kind kind;
    void *q;
    float *scale;
    long srs, scs;
    int rows, cols, group, ld;
    fp8_format format; /* FP8 */
    bool pow2;         /* FP8 */
} dllm_qact;

/* The rollout copy's weight of one linear in its format: exactly one pointer set. */
typedef struct {
    fp8_matrix *f8;
    nvfp4_matrix *f4;
    const int8_matrix *i8;
    bf16_matrix *b16;
} dllm_lin_weight;

/* How pack_weight packs one linear's weight: the settings of its format (the one whose
 * pointer in the dllm_lin_weight is set). */
typedef struct {
    fp8_format f8_format;
    fp8_scaling f8_scaling;  /* the weight's scales */
    fp8_scaling f8_act;      /* the activations', quantised per call to match */
    bool f8_pow2;            /* power-of-two scales */
    bool f8_fast;            /* the fast product (rollout fp8; not fp8-exact) */
    int8_scaling i8_scaling;
    nvfp4_scaling f4_scaling;
} dllm_pack_args;

/* One optimizer step's settings (adamw_step). */
typedef struct {
    int t;                     /* the step, from 1 (bias correction, warmup) */
    float lr, b1, b2, eps, wd; /* op_adamw's */
    double max_norm;           /* > 0: the global gradient norm clipped to it */
} dllm_adamw_args;

/* The table, grouped by kind of op. Entries marked optional may be NULL: ask
 * dllm_backend_supports (below), never the pointer. */
typedef struct dllm_backend_ops {
    /* ---- buffers ---- */
    void *(*alloc)(dllm_backend *be, size_t bytes);          /* zero-filled */
    void (*free)(dllm_backend *be, void *p);
    void (*upload)(dllm_backend *be, void *dst, const void *src, size_t bytes);   /* host -> be */
    void (*download)(dllm_backend *be, void *dst, const void *src, size_t bytes); /* be -> host */
    void (*copy)(dllm_backend *be, void *dst, const void *src, size_t bytes);     /* be -> be */
    void (*memset0)(dllm_backend *be, void *p, size_t bytes);
    void (*sync)(dllm_backend *be);
    /* rows x cols floats: dst[r*dld + c] = src[r*sld + c] (be -> be; the two do not
     * overlap): a column block of a row-major matrix out or in */
    void (*copy_2d)(dllm_backend *be, float *dst, size_t dld, const float *src, size_t sld,
                    int rows, int cols);

    /* ---- linear layers and GEMM (torch layout [OC, C]) ---- */
    void (*gemm)(dllm_backend *be, bool transA, bool transB, int M, int N, int K, float alpha,
                 const float *A, const float *B, float beta, float *C);
    /* gemm on bf16 operands: C = alpha bf16(op(A)) bf16(op(B)) + beta C, A and B rounded
     * to bf16 (nearest even) as read, the products summed in fp32 (torch.autocast's
     * bf16 matmul with fp32 outputs): a bf16 trainer's LoRA products */
    void (*gemm_bf16)(dllm_backend *be, bool transA, bool transB, int M, int N, int K,
                      float alpha, const float *A, const float *B, float beta, float *C);
    void (*linear_fwd)(dllm_backend *be, float *out, const float *inp, const float *w, int N,
                       int C, int OC);
    void (*linear_bwd)(dllm_backend *be, float *dinp, float *dw, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC);
    /* out (N, OC) += bias (OC) on every row */
    void (*bias_fwd)(dllm_backend *be, float *out, const float *bias, int N, int OC);
    /* dbias (OC) += sum over the rows of dout (N, OC), rows in order */
    void (*bias_bwd)(dllm_backend *be, float *dbias, const float *dout, int N, int OC);
    /* optional (DLLM_OP_BF16_LINEAR; without it the core uses the exact fp32 simulation):
     * out (N, OC) = bf16(inp) w^T, w packed as bf16 (kernels/ops.h), fp32 sums */
    void (*bf16_linear_fwd)(dllm_backend *be, float *out, const float *inp, bf16_matrix *w,
                            int N, int C, int OC);
    /* dinp (N, C) += dout (N, OC) w (OC, C), w packed as bf16, dout fp32, fp32 sums: the
     * input gradient of bf16_linear_fwd through a frozen weight (LoRA over bf16 base
     * linears needs no dw) -- op_linear_bwd's dinp with the widened weight */
    void (*bf16_linear_bwd_x)(dllm_backend *be, float *dinp, const float *dout,
                              bf16_matrix *w, int N, int C, int OC);
    /* optional (DLLM_OP_NVFP4_LINEAR; without it an nvfp4 rollout is refused): W4A4
     * (kernels/nvfp4.h), activations quantised per call */
    void (*nvfp4_linear_fwd)(dllm_backend *be, float *out, const float *inp, nvfp4_matrix *w,
                             int N, int C, int OC);
    /* optional (DLLM_OP_INT8_LINEAR; without it an int8 rollout is refused): W8A7
     * (kernels/int8.h), activations quantised per call, exact integer sums */
    void (*int8_linear_fwd)(dllm_backend *be, float *out, const float *inp,
                            const int8_matrix *w, int N, int C, int OC);
    /* Frees what the backend derived from a weight on first use and keeps in its struct
     * (the CPU's dequantised or widened fp32 copies); the weight's own arrays stay the
     * caller's. Either pointer may be NULL. */
    void (*weight_cache_free)(dllm_backend *be, fp8_matrix *f8, bf16_matrix *b16);

    /* ---- attention and positions ---- */
    void (*rope_fwd)(dllm_backend *be, float *out, const float *inp, const int32_t *pos,
                     const op_rope_table *t, int N, int NH, int HD);
    void (*rope_bwd)(dllm_backend *be, float *dinp, const float *dout, const int32_t *pos,
                     const op_rope_table *t, int N, int NH, int HD);
    size_t (*attn_state_floats)(dllm_backend *be, int B, int T, int NH);
    void (*attention_fwd)(dllm_backend *be, float *out, float *state, const float *q,
                          const float *k, const float *v, const uint8_t *keymask, int B, int T,
                          int NH, int NKV, int HD, bool causal);
    void (*attention_bwd)(dllm_backend *be, float *dq, float *dk, float *dv, const float *dout,
                          const float *out, const float *state, const float *q, const float *k,
                          const float *v, const uint8_t *keymask, int B, int T, int NH,
                          int NKV, int HD, bool causal);
    /* The key/value cache (KV-cache decoding, dllm/qwen3.c; the block cache of cached
     * denoising, dllm/block_cache.c): kc, vc (B, max_len, KD) with key mask cmask
     * (B, max_len). kv_append writes k, v (B, T, KD) into slots len .. len+T-1 of each row
     * and, when cmask is not NULL, their key mask (newmask (B, T); NULL: all real). */
    void (*kv_append)(dllm_backend *be, float *kc, float *vc, uint8_t *cmask, const float *k,
                      const float *v, const uint8_t *newmask, int B, int T, int len,
                      int max_len, int KD);
    /* y (B, T, NH, HD) for the queries q (B, T, NH, HD) at slots len + t over the cache:
     * causal, the slots s <= len + t with cmask != 0 (the CPU: dllm/qwen3.c's loop); else
     * every slot s < max_len with cmask (NULL: all) != 0 (the CPU: op_attention_kv_fwd).
     * A query with no visible slot gets 0. */
    void (*attention_cached)(dllm_backend *be, float *y, const float *q, const float *kc,
                             const float *vc, const uint8_t *cmask, int B, int T, int len,
                             int max_len, int NH, int NKV, int HD, bool causal);

    /* ---- norms, activations, embeddings, elementwise ---- */
    void (*rmsnorm_fwd)(dllm_backend *be, float *out, float *rstd, const float *inp,
                        const float *w, int N, int C, float eps);
    void (*rmsnorm_bwd)(dllm_backend *be, float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w, const float *rstd, int N, int C);
    void (*swiglu_fwd)(dllm_backend *be, float *out, const float *gate, const float *up,
                       size_t n);
    /* dgate, dup written (not accumulated); either may be NULL */
    void (*swiglu_bwd)(dllm_backend *be, float *dgate, float *dup, const float *dout,
                       const float *gate, const float *up, size_t n);
    void (*embedding_fwd)(dllm_backend *be, float *out, const int32_t *ids, const float *wte,
                          int N, int C);
    void (*embedding_bwd)(dllm_backend *be, float *dwte, const float *dout, const int32_t *ids,
                          int N, int C);
    void (*round_bf16)(dllm_backend *be, float *x, size_t n);  /* x = bf16(x), in place */
    void (*add)(dllm_backend *be, float *y, const float *x, size_t n); /* y += x */

    /* ---- quantisation and the quantised linears ---- */
    /* out (n) = the bf16 bits of inp (n), round to nearest even (op_f32_to_bf16_array) */
    void (*to_bf16)(dllm_backend *be, uint16_t *out, const float *inp, size_t n);
    /* x (R, C) -> codes q (R, C) and scales (SR, SC) at row stride
     * dllm_backend_fp8_scale_ld(be, s, R, C) (the CPU layout of fp8_matrix, or the
     * device's GEMM layout: SR x ld floats), blocks as fp8_block_shape(s, R, C) gives
     * them; the values bit-identical to fp8_quantise */
    void (*fp8_quantise)(dllm_backend *be, uint8_t *q, float *scale, const float *x, int R,
                         int C, fp8_format f, fp8_scaling s, bool pow2);
    /* w = one linear's fp32 weight (o, i) in w's format (exactly one of its pointers set),
     * its arrays in be's memory in the layout be's linears read: allocated by the first
     * call, reused by the next ones (a rollout copy is packed again after every update).
     * src: the weight in be's memory, or NULL where it is on the host only (host_src):
     * then the entry uploads it into stage (o * i floats of be's memory) where it needs
     * it there. host_src: the weight on the host, or NULL where it is in be's memory
     * only (src): a backend that quantises a format on the host (the CUDA backend's INT8,
     * by the CPU's quantiser) refuses that. On the CPU both are host memory: src is
     * read. Returns 0, or an exit code with err set (a format be has no linear for). */
    int (*pack_weight)(dllm_backend *be, dllm_lin_weight w, const float *src,
                       const float *host_src, float *stage, int o, int i,
                       const dllm_pack_args *a, dllm_err *err);
    /* frees the arrays pack_weight allocated for w (w's structs are the caller's) */
    void (*free_weight)(dllm_backend *be, dllm_lin_weight w);
    /* W8A8 (kernels/fp8.h): activations quantised per w->act_scaling. */
    void (*fp8_linear_fwd)(dllm_backend *be, float *out, const float *inp, fp8_matrix *w, int N,
                           int C, int OC);
    /* optional (DLLM_OP_LINEARS): the nw linears out[i] (N, OC[i]) = inp (N, C) w[i]^T of
     * one input (q/k/v, gate/up), all of one format, in one call: bit for bit the nw
     * calls of that format's entry (fp8_, nvfp4_, int8_, bf16_linear_fwd), the input
     * quantised or rounded once for all of them */
    void (*linears_fwd)(dllm_backend *be, int nw, float *const out[], const float *inp,
                        const dllm_lin_weight w[], int N, int C, const int OC[]);
    /* FP8 or INT8 activations quantised, or bf16 copies rounded, by the op that produced
     * them (dllm/transformer_fwd.c); optional, all four or none (DLLM_OP_FUSED_ACT;
     * without them the producer writes fp32 and each linear quantises or rounds its
     * input). Bit-identical to that path. */
    /* true when the fused path serves the linears ws[0..nw) (all FP8, all INT8 or all
     * bf16, of input width C) over N rows; then qa is set up for one producer's output
     * (N, C) */
    bool (*act_quant_prepare)(dllm_backend *be, dllm_qact *qa, int N, int C,
                              const dllm_lin_weight *ws, int nw);
    /* rmsnorm_fwd (out, rstd may be NULL) that also writes qa's codes and scales */
    void (*rmsnorm_quant_fwd)(dllm_backend *be, float *out, float *rstd, const dllm_qact *qa,
                              const float *inp, const float *w, int N, int C, float eps);
    /* swiglu_fwd over (N, H) (out may be NULL) that also writes qa's codes and scales */
    void (*swiglu_quant_fwd)(dllm_backend *be, float *out, const dllm_qact *qa,
                             const float *gate, const float *up, int N, int H);
    /* fp8_, int8_ or bf16_linear_fwd (w's format) with the activations already quantised
     * or rounded (qa of the same N, C, prepared for w) */
    void (*linear_quant_act_fwd)(dllm_backend *be, float *out, const dllm_qact *qa,
                                 const dllm_lin_weight *w, int N, int C, int OC);

    /* ---- loss ---- */
    void (*xent_fwd)(dllm_backend *be, float *logp, float *logsumexp, const float *logits,
                     const int32_t *target, int N, int V);
    void (*xent_bwd)(dllm_backend *be, float *dlogits, const float *dlogp, const float *logits,
                     const float *logsumexp, const int32_t *target, int N, int V);

    /* ---- optimizer ---- */
    void (*adamw)(dllm_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                  int t, float lr, float b1, float b2, float eps, float wd);
    double (*grad_norm)(dllm_backend *be, const float *g, size_t n);
    /* returns the L2 norm of g (n) (as grad_norm); when max_norm > 0, then g *= coef with
     * coef = max_norm / (norm + 1e-6) where coef < 1 (op_clip_grad). A device clips
     * from the norm in its own memory: the returned value is for the log. */
    double (*clip_grad)(dllm_backend *be, float *g, size_t n, double max_norm);
    /* the global L2 norm of g (n) (grad_norm's), g clipped in place when a->max_norm > 0
     * (clip_grad's rule), then adamw of p, m, v (n) from g: bit-identical to those three
     * entries in turn. A non-finite norm leaves p, m and v as they were (a diverged
     * gradient never reaches the weights). Returns the norm. The model's one update call
     * (dllm_optim_step). */
    double (*adamw_step)(dllm_backend *be, float *p, float *g, float *m, float *v, size_t n,
                         const dllm_adamw_args *a);

    /* ---- samplers (the loops are dllm/'s, written once over these entries) ---- */
    /* The autoregressive choice (kernels/sample.h, dllm/ar_sampler.h) for rows r0 ..
     * r0+n-1 of the batch from their logits (n, V), generated index g: per row the token
     * of dllm_ar_choose (top_p 1) with u = draw 1 of (seed, DLLM_RNG_SAMPLER, g,
     * seq_offset + row) into tokens (B, G) at [row, g] and next (B), its log-probs into
     * logp and logp_t1 (B, G), length (B) = g + 1 and done (B) = (token == eos_id). A
     * row whose done is set only gets next = eos_id. */
    void (*ar_choose)(dllm_backend *be, int32_t *tokens, int32_t *next, float *logp,
                      float *logp_t1, int32_t *length, uint8_t *done, const float *logits,
                      int r0, int n, int V, int G, int g, double temperature, int eos_id,
                      uint64_t seed, uint64_t seq_offset);
    /* optional (DLLM_OP_AR_NUCLEUS): the same restricted to the nucleus top_p */
    void (*ar_choose_nucleus)(dllm_backend *be, int32_t *tokens, int32_t *next, float *logp,
                              float *logp_t1, int32_t *length, uint8_t *done,
                              const float *logits, int r0, int n, int V, int G, int g,
                              double temperature, double top_p, int eos_id, uint64_t seed,
                              uint64_t seq_offset);
    /* The LLaDA denoising step (dllm/sampler.h; its one loop, dllm/sampler.c), on a
     * canvas (B, T) int32, T = P + G (with CFG (2B, T), the unconditional copy second): */
    /* nm (B) = the positions t in [lo, hi) of sequence b holding mask_id */
    void (*denoise_block_counts)(dllm_backend *be, int32_t *nm, const int32_t *canvas, int B,
                                 int T, int lo, int hi, int mask_id);
    /* the committable rows: every t in [lo, hi) of the first B sequences holding mask_id,
     * sequence-major then by t: rows[i] = b*T + t (rows_u[i] = (B+b)*T + t unless rows_u
     * is NULL), row_seq[i] = seq_offset + b (the noise key), row_pos[i] = t; with
     * act_lo >= 0 only the sequences holding mask_id somewhere in [act_lo, hi) (the
     * threshold's sequences whose block is not done); seq_start (B+1) the first row of
     * each sequence, seq_start[B] = *n = the count */
    void (*denoise_rows)(dllm_backend *be, int32_t *rows, int32_t *rows_u, int64_t *row_seq,
                         int32_t *row_pos, int32_t *seq_start, int32_t *n,
                         const int32_t *canvas, int B, int T, int lo, int hi, int act_lo,
                         int mask_id, uint64_t seq_offset);
    /* cond (n, V) = uncond + w (cond - uncond) in fp32 without fused multiply-adds
     * (uncond NULL: no CFG), then cond[:, eos_id] = -inf when eos_id >= 0 */
    void (*denoise_logits_fix)(dllm_backend *be, float *cond, const float *uncond, int n,
                               int V, float w, int eos_id);
    /* per row i of logits (n, V), s = seq_step[row_seq[i] - seq_offset] (its sequence's
     * step): x0[i] = dllm_sampler_draw_x0_excl (kernels/sample.h) with the noise of stream
     * (seed, DLLM_RNG_SAMPLER, s, 2 row_seq[i]) at position row_pos[i], prob[i] =
     * softmax(logits)[x0] (float), rand_conf[i] (unless NULL) the random-remasking draw
     * row_pos[i] of stream 2 row_seq[i] + 1. The CPU's softmax sums left to right, a
     * device's may be a tree (dllm/sampler.h). */
    void (*denoise_draw)(dllm_backend *be, int32_t *x0, float *prob, double *rand_conf,
                         const float *logits, const int64_t *row_seq, const int32_t *row_pos,
                         int n, int V, double temperature, uint64_t seed,
                         const int32_t *seq_step, uint64_t seq_offset, int exclude);
    /* per sequence b, its rows [seq_start[b], seq_start[b+1]): confidence = rand_conf or
     * (double)prob, -inf where x0 is eos_id or eot_id (-1: off); committed, ties to the
     * lower position: the k = nm[b]/spb + (step_in_block < nm[b] % spb) most confident, or
     * with threshold > 0 the most confident and every other whose confidence is >=
     * threshold: canvas (both copies under cfg) = x0, commit_step (B, G) = seq_step[b],
     * commit_prob (B, G) = prob, except where x0 is mask_id (the position stays masked,
     * unrecorded); then seq_step[b] += 1 (with a threshold: only if b had rows) */
    void (*denoise_commit)(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                           float *commit_prob, const int32_t *x0, const float *prob,
                           const double *rand_conf, const int32_t *row_pos,
                           const int32_t *seq_start, const int32_t *nm, int spb,
                           int step_in_block, int32_t *seq_step, double threshold, int B,
                           int T, int P, int G, int mask_id, int eos_id, int eot_id, bool cfg);
    /* Dream's step (dllm/dream_sampler.h; its loop, dllm/dream_sampler.c), over the rows of
     * denoise_rows (every masked generated position): per row i of logits (n, V), global
     * sequence row_seq[i], position row_pos[i]: take[i] = whether the row takes part (origin:
     * draw row_pos of stream 4b+1 < a->ratio, or the last step; the other algs: 1); where
     * it does, x0[i] = dllm_dream_pick over dllm_dream_probs with u = draw row_pos of stream
     * 4b, key[i] = its confidence (alg_temp > 0: confidence / alg_temp + the Gumbel of draw
     * row_pos of stream 4b+2), prob[i] = softmax(logits)[x0] (float, temperature 1). */
    void (*dream_draw)(dllm_backend *be, int32_t *x0, double *key, float *prob, uint8_t *take,
                       const float *logits, const int64_t *row_seq, const int32_t *row_pos,
                       int n, int V, const dllm_dream_step *a);
    /* per sequence b, its rows [seq_start[b], seq_start[b+1]) (nm of them): origin commits
     * every row taking part; the other algs the k = nm (last step) or int(nm * ratio)
     * (float32) rows of the highest key, ties to the lower position: canvas (B, T) = x0,
     * commit_step (B, G) = a->step and commit_prob (B, G) = prob, except where x0 is mask_id
     * (the position stays masked, unrecorded) */
    void (*dream_commit)(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                         float *commit_prob, const int32_t *x0, const double *key,
                         const float *prob, const uint8_t *take, const int32_t *row_pos,
                         const int32_t *seq_start, int B, int T, int P, int G, int mask_id,
                         const dllm_dream_step *a);

    /* ---- Gated DeltaNet (optional, all or none: DLLM_OP_GATED_DELTA) ----
     * The ops of kernels/gated_delta.h with its arguments and conventions (forwards
     * overwrite, backwards accumulate, NULL outputs skipped, state_out may be state_in);
     * gd_rule_bwd's scratch is the backend's own. */
    void (*gd_conv_fwd)(dllm_backend *be, float *out, float *pre, float *state_out,
                        const float *x, const float *state, const float *w, int B, int T, int D,
                        int K);
    void (*gd_conv_bwd)(dllm_backend *be, float *dx, float *dw, float *dstate, const float *dout,
                        const float *pre, const float *x, const float *state, const float *w,
                        int B, int T, int D, int K);
    void (*gd_l2norm_fwd)(dllm_backend *be, float *out, float *rnorm, const float *x, int rows,
                          int n, float eps);
    void (*gd_l2norm_bwd)(dllm_backend *be, float *dx, const float *dout, const float *out,
                          const float *rnorm, int rows, int n);
    void (*gd_gates_fwd)(dllm_backend *be, float *g, float *beta, const float *a, const float *b,
                         const float *A_log, const float *dt_bias, int N, int Hv);
    void (*gd_gates_bwd)(dllm_backend *be, float *da, float *db, float *dA_log, float *ddt_bias,
                         const float *dg, const float *dbeta, const float *a, const float *b,
                         const float *A_log, const float *dt_bias, int N, int Hv);
    void (*gd_rule_recurrent_fwd)(dllm_backend *be, float *o, float *state_out, const float *q,
                                  const float *k, const float *v, const float *g,
                                  const float *beta, const float *state_in, int B, int T, int Hk,
                                  int Dk, int Hv, int Dv);
    void (*gd_rule_chunked_fwd)(dllm_backend *be, float *o, float *state_out, const float *q,
                                const float *k, const float *v, const float *g, const float *beta,
                                const float *state_in, int B, int T, int Hk, int Dk, int Hv,
                                int Dv, int chunk);
    void (*gd_rule_bwd)(dllm_backend *be, float *dq, float *dk, float *dv, float *dg,
                        float *dbeta, float *dstate_in, const float *dout, const float *q,
                        const float *k, const float *v, const float *g, const float *beta,
                        const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv);
    void (*gd_gated_rmsnorm_fwd)(dllm_backend *be, float *out, float *rstd, const float *x,
                                 const float *z, const float *w, int rows, int n, float eps);
    void (*gd_gated_rmsnorm_bwd)(dllm_backend *be, float *dx, float *dz, float *dw,
                                 const float *dout, const float *x, const float *z,
                                 const float *w, const float *rstd, int rows, int n);
    void (*gd_partial_rope_fwd)(dllm_backend *be, float *out, const float *x, const int32_t *pos,
                                int N, int NH, int HD, int rot, float theta);
    void (*gd_partial_rope_bwd)(dllm_backend *be, float *dx, const float *dout,
                                const int32_t *pos, int N, int NH, int HD, int rot, float theta);
    void (*gd_out_gate_fwd)(dllm_backend *be, float *out, const float *x, const float *gate,
                            size_t n);
    void (*gd_out_gate_bwd)(dllm_backend *be, float *dx, float *dgate, const float *dout,
                            const float *x, const float *gate, size_t n);

    /* ---- fused forwards (forwards that keep nothing for a backward) ---- */
    /* out (N, OC) = the linear of w (exactly one format set) + res (N, OC): bit for bit
     * that format's entry (fp8_, nvfp4_, int8_ or bf16_linear_fwd over inp (N, C); or
     * linear_quant_act_fwd over qa when qa is not NULL, inp then unused) into out, then
     * add (out, res): each element the product's fp32 value plus res's, rounded once.
     * out and res do not overlap. The residual stream's update after attention's output
     * projection and after the MLP's down projection: a device adds res in the GEMM's
     * epilogue (C = res, beta = 1) where its library takes it, saving a pass over out. */
    void (*linear_res_fwd)(dllm_backend *be, float *out, const float *res, const float *inp,
                           const dllm_qact *qa, const dllm_lin_weight *w, int N, int C,
                           int OC);
    /* attention_fwd over q (B, T, NH, HD) and k (B, T, NKV, HD) rotated by rope_fwd at
     * positions pos (B*T, table t): bit for bit rope_fwd of q and of k, then
     * attention_fwd. A device rotates the query and key tiles as it loads them, saving a
     * pass over each; the CPU rotates q and k in place. Afterwards q and k hold either
     * form: the caller reads neither again but through rope_attention_bwd. */
    void (*rope_attention_fwd)(dllm_backend *be, float *out, float *state, float *q, float *k,
                               const float *v, const int32_t *pos, const op_rope_table *t,
                               const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                               bool causal);
    /* Its backward, from q and k as rope_attention_fwd left them and its out and state: dq,
     * dk, dv written (not accumulated; NULL: not wanted), the gradients of q and k before
     * their rotation and of v: bit for bit zeroing them, attention_bwd over the rotated q
     * and k, then rope_bwd of dq and of dk in place. A device rotates the query and key
     * tiles as it loads them and the gradients as it stores them, saving the two RoPE
     * passes and the zeroing; the CPU runs the parts. Afterwards q and k hold either
     * form. */
    void (*rope_attention_bwd)(dllm_backend *be, float *dq, float *dk, float *dv,
                               const float *dout, const float *out, const float *state,
                               float *q, float *k, const float *v, const int32_t *pos,
                               const op_rope_table *t, const uint8_t *keymask, int B, int T,
                               int NH, int NKV, int HD, bool causal);

    /* ---- a bf16 trainer's LoRA linears over packed bf16 base weights ----
     * w (OC, C) packed, adapter A (r, C), B (OC, r) fp32, xa (N, r) = x A^T kept for the
     * backward. The CPU runs the calls each stands for, in their order; a device rounds
     * each operand to bf16 once for all of its products instead of once per product (the
     * forward's input for the base and the A product; the backward's dout for the base's
     * input gradient, dxa and dB), on the same bf16 operands. */
    /* bf16_linear_fwd (out, inp, w); gemm_bf16 (N, r, C: xa = inp A^T); gemm_bf16 (N, OC,
     * r: out += scale xa B^T); with res (N, OC; NULL: none, else not overlapping out)
     * add (out, res). A device sums the three terms in another order, each add in a GEMM's
     * epilogue (the adapter's product onto res, the base's onto that): no pass over out of
     * its own, one fp32 rounding per add as on the CPU. */
    /* qa: inp's bf16 copy, written by its producer (a DLLM_QACT_BF16 of act_quant_prepare
     * for w), or NULL (the op rounds inp) */
    void (*bf16_lora_fwd)(dllm_backend *be, float *out, float *xa, const float *inp,
                          const dllm_qact *qa, const float *res, bf16_matrix *w,
                          const float *A, const float *B, float scale, int N, int C, int OC,
                          int r);
    /* bf16_linear_bwd_x (dinp, dout, w); gemm_bf16: dxa = scale dout B, dB += scale
     * dout^T xa, dinp += dxa A, dA += dxa^T inp (dxa (N, r) is scratch) */
    void (*bf16_lora_bwd)(dllm_backend *be, float *dinp, float *dA, float *dB, float *dxa,
                          const float *dout, const float *inp, const float *xa, bf16_matrix *w,
                          const float *A, const float *B, float scale, int N, int C, int OC,
                          int r);
} dllm_backend_ops;

/* The optional entries (and groups of entries) a backend may lack. */
typedef enum {
    DLLM_OP_BF16_LINEAR,   /* bf16_linear_fwd */
    DLLM_OP_NVFP4_LINEAR,  /* nvfp4_linear_fwd */
    DLLM_OP_INT8_LINEAR,   /* int8_linear_fwd */
    DLLM_OP_LINEARS,       /* linears_fwd */
    DLLM_OP_FUSED_ACT,     /* act_quant_prepare, rmsnorm_quant_fwd, swiglu_quant_fwd,
                              linear_quant_act_fwd */
    DLLM_OP_AR_NUCLEUS,    /* ar_choose_nucleus */
    DLLM_OP_GATED_DELTA,   /* the 15 gd_* entries */
    DLLM_OP_N_OPTIONAL
} dllm_backend_op;

struct dllm_backend {
    dllm_backend_kind kind;
    const char *name;            /* "cpu", "cuda" */
    const dllm_backend_ops *ops;
    void *impl;                  /* backend-private state (streams, handles) */
};

/* The CPU backend: host memory, the reference ops of kernels/cpu/. A process-wide
 * instance; it is never freed. */
dllm_backend *dllm_backend_cpu(void);

/* The CUDA backend (kernels/cuda/backend_cuda.cu; in a --enable-cuda-emulation build the
 * same code on the host): device memory and the kernels of kernels/cuda/. NULL when
 * there is no usable device or the build has no CUDA; dllm_backend_cuda_why says why.
 * Pointers inside structs handed to ops are device memory too (op_rope_table's cos/sin,
 * fp8_matrix's q/scale, block scales in cuBLASLt's layout). A process-wide instance. Scratch is the
 * backend's own workspace (dllm_backend_cuda_workspace_bytes), grown between ops, never
 * allocated per call. */
#ifdef __cplusplus
extern "C" {
#endif
/* Whether be implements the optional entry (or group of entries) op. */
bool dllm_backend_supports(const dllm_backend *be, dllm_backend_op op);
/* The op's name as the table spells it ("bf16_linear_fwd", "fp8_fused_act"). */
const char *dllm_backend_op_name(dllm_backend_op op);
/* The row stride (floats) of the scales be's fp8_quantise writes for an R x C matrix
 * with scaling s: SC on the CPU; on a CUDA backend 128x128 block scales are stored in
 * cuBLASLt's layout (each row of SC k-block scales padded to a multiple of 4), once per
 * quantisation, so that its FP8 GEMMs read them in place. */
size_t dllm_backend_fp8_scale_ld(const dllm_backend *be, fp8_scaling s, int R, int C);
/* Whether be runs FP8 GEMMs with 128x128 weight-block scales (the CPU always; the CUDA
 * backend with cuBLAS 12.9.1 or later on sm_90); when not, why says why. A rollout
 * precision that needs them is refused when the model moves to be, never run through a
 * dequantised fallback. */
bool dllm_backend_fp8_block_ok(const dllm_backend *be, char *why, size_t why_len);

/* A device's quantised weights (dllm_backend_int8_weight, _fp8_weight) are a device's
 * arrays in the layout its linears read; the CPU keeps its own (kernels/int8.h, fp8.h). */
/* q = the INT8 weight of the host matrix w [o, i] in be's memory: quantised on the host by
 * the CPU's quantiser (the same codes and scales by construction), laid out as a device's
 * INT8 GEMM reads it (dllm_cuda_int8_weight_layout) and uploaded with its scales; q's
 * arrays reused when its shape and scaling are unchanged. */
int dllm_backend_int8_weight(dllm_backend *be, int8_matrix *q, const float *w, int o, int i,
                             int8_scaling s, dllm_err *err);
void dllm_backend_int8_weight_free(dllm_backend *be, int8_matrix *q);
/* q = the FP8 weight of w [o, i] (be's memory) quantised on be (fp8_quantise, its scales in
 * be's layout), activations quantised per act; q's arrays allocated on first use (kept
 * after: the same shape every call). */
void dllm_backend_fp8_weight(dllm_backend *be, fp8_matrix *q, const float *w, int o, int i,
                             fp8_format f, fp8_scaling s, bool pow2, fp8_scaling act, bool fast);
void dllm_backend_fp8_weight_free(dllm_backend *be, fp8_matrix *q);
/* pack_weight and free_weight of a device backend (CUDA, the recorder): bf16 by to_bf16,
 * FP8 by dllm_backend_fp8_weight, INT8 by dllm_backend_int8_weight (from host_src); no
 * NVFP4 (exit 2). */
int dllm_backend_device_pack_weight(dllm_backend *be, dllm_lin_weight w, const float *src,
                                    const float *host_src, float *stage, int o, int i,
                                    const dllm_pack_args *a, dllm_err *err);
void dllm_backend_device_free_weight(dllm_backend *be, dllm_lin_weight w);

dllm_backend *dllm_backend_cuda(void);
const char *dllm_backend_cuda_why(void);
/* The CUDA backend's block-scaled FP8 GEMMs (dllm_backend_fp8_block_ok) */
bool dllm_backend_cuda_fp8_block(char *why, size_t why_len);
size_t dllm_backend_cuda_workspace_bytes(void);
/* Bytes moved by the CUDA backend's upload (host -> device) and download (device -> host)
 * entries since the process started (0 without the backend): what `bench rl-step
 * --device cuda` reports per step. */
void dllm_backend_cuda_transfers(unsigned long long *up, unsigned long long *down);
#ifdef __cplusplus
}
#endif

#endif
