/* gated_delta.h: the ops of a Gated DeltaNet layer (Qwen3.5's linear attention),
 * CPU references in kernels/cpu/gated_delta.c. Conventions as kernels/ops.h:
 * row-major fp32, backward ACCUMULATES into every gradient it is given (NULL:
 * not needed), forwards overwrite. Letters: B batch, T tokens, D channels of
 * the convolution, K its kernel width, Hk/Dk key heads and their size, Hv/Dv
 * value heads and theirs (Hv a multiple of Hk: key head h / (Hv/Hk) serves
 * value head h).
 *
 * The layer, per token:  qkv = conv_silu(in_proj_qkv x);  q, k = l2norm(split);
 *   g = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b)   (per value head)
 *   o = gated_delta_rule(q, k, v, g, beta);  y = out_proj gated_rmsnorm(o, z). */
#ifndef DLLM_GATED_DELTA_H
#define DLLM_GATED_DELTA_H

#include <stddef.h>
#include <stdint.h>

/* ---- causal depthwise conv1d + SiLU ---------------------------------------------
 * x [B,T,D], w [D,K], state [B,K-1,D] the K-1 inputs before x[:,0] (NULL: zeros).
 *   pre[b,t,d] = sum_j w[d,j] * x[b, t-(K-1)+j, d]   (earlier rows from state)
 *   out = silu(pre);  pre [B,T,D] kept for backward (may be NULL in forward).
 * state_out [B,K-1,D] (NULL: none) receives the last K-1 inputs (state_out may be
 * state). Backward takes x and state as in forward; dstate (NULL: none). */
void gd_conv_fwd(float *out, float *pre, float *state_out, const float *x, const float *state,
                 const float *w, int B, int T, int D, int K);
void gd_conv_bwd(float *dx, float *dw, float *dstate, const float *dout, const float *pre,
                 const float *x, const float *state, const float *w, int B, int T, int D, int K);

/* ---- L2 normalisation over rows of n ------------------------------------------------
 * out = x / sqrt(sum x^2 + eps) (the published eps 1e-6); rnorm [rows] kept. */
void gd_l2norm_fwd(float *out, float *rnorm, const float *x, int rows, int n, float eps);
void gd_l2norm_bwd(float *dx, const float *dout, const float *out, const float *rnorm,
                   int rows, int n);

/* ---- gates -----------------------------------------------------------------------
 * g [N,Hv] = -exp(A_log[h]) * softplus(a[n,h] + dt_bias[h]),  beta = sigmoid(b). */
void gd_gates_fwd(float *g, float *beta, const float *a, const float *b, const float *A_log,
                  const float *dt_bias, int N, int Hv);
void gd_gates_bwd(float *da, float *db, float *dA_log, float *ddt_bias, const float *dg,
                  const float *dbeta, const float *a, const float *b, const float *A_log,
                  const float *dt_bias, int N, int Hv);

/* ---- the gated delta rule ------------------------------------------------------------
 * q, k [B,T,Hk,Dk] (L2-normalised by the caller), v [B,T,Hv,Dv], g, beta [B,T,Hv],
 * state S [B,Hv,Dk,Dv] (NULL in: zeros; out: the state after the last token, may be
 * the same buffer; NULL: not wanted). Per value head, with scale = 1/sqrt(Dk):
 *   S <- exp(g_t) S;  delta = beta_t (v_t - S^T k_t);  S <- S + k_t delta^T;
 *   o_t = scale S^T q_t                                    o [B,T,Hv,Dv]
 * The recurrent form steps token by token (decoding). The chunked form computes
 * the same in chunks of `chunk` tokens: within a chunk the written values delta
 * solve a unit lower-triangular system (the decays and key products between
 * its tokens), so the state is read and written once per chunk. Both in fp32;
 * they agree to rounding. */
void gd_rule_recurrent_fwd(float *o, float *state_out, const float *q, const float *k,
                           const float *v, const float *g, const float *beta,
                           const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv);
void gd_rule_chunked_fwd(float *o, float *state_out, const float *q, const float *k,
                         const float *v, const float *g, const float *beta,
                         const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv,
                         int chunk);
/* Backward of either form (inputs as in forward; state_in NULL: zeros): the states
 * are recomputed a chunk at a time from the ones at chunk boundaries, then the
 * recurrence is differentiated backwards. dstate_in (NULL: none) receives
 * d o / d state_in; the final state's gradient is taken as zero. */
void gd_rule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dstate_in,
                 const float *dout, const float *q, const float *k, const float *v,
                 const float *g, const float *beta, const float *state_in, int B, int T,
                 int Hk, int Dk, int Hv, int Dv);

/* ---- gated RMSNorm ----------------------------------------------------------------------
 * Over rows of n: out = w * (x * rstd) * silu(z), rstd = 1/sqrt(mean(x^2) + eps);
 * rstd [rows] kept (may be NULL in forward). */
void gd_gated_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *z,
                          const float *w, int rows, int n, float eps);
void gd_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dout, const float *x,
                          const float *z, const float *w, const float *rstd, int rows, int n);

/* ---- partial RoPE ------------------------------------------------------------------------
 * x [N,NH,HD]: rotate-half RoPE over the first `rot` dims of each head (rot even,
 * inv_freq_i = theta^(-2i/rot)), the rest passed through; row n at pos[n]. In
 * place allowed. Backward is the inverse rotation. */
void gd_partial_rope_fwd(float *out, const float *x, const int32_t *pos, int N, int NH, int HD,
                         int rot, float theta);
void gd_partial_rope_bwd(float *dx, const float *dout, const int32_t *pos, int N, int NH,
                         int HD, int rot, float theta);

/* ---- the output gate of gated full attention --------------------------------------------
 * out = x * sigmoid(gate) over n elements; the backward accumulates dx += dout * s and
 * dgate += dout * x * s * (1 - s), s = sigmoid(gate) (either may be NULL). */
void gd_out_gate_fwd(float *out, const float *x, const float *gate, size_t n);
void gd_out_gate_bwd(float *dx, float *dgate, const float *dout, const float *x,
                     const float *gate, size_t n);

#endif
