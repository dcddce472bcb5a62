/* backend_cpu.c: the CPU backend -- host memory and the reference ops of
 * kernels/cpu/ behind the backend table (kernels/backend.h). Each entry is the
 * reference op itself, so a model computed through this table is bit-identical
 * to one calling the ops directly. */
#include "kernels/backend.h"
#include "kernels/gated_delta.h"
#include "kernels/rng.h"
#include "kernels/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Zero-filled. Small buffers (a decoding step's, per op) through malloc, whose per-thread
 * cache calloc bypasses, then zeroed; large ones through calloc (fresh pages come zeroed). */
static void *cpu_alloc(dllm_backend *be, size_t bytes)
{
    (void)be;
    if (bytes >= 65536)
        return dllm_calloc(bytes, 1);
    void *p = dllm_malloc(bytes ? bytes : 1);
    memset(p, 0, bytes);
    return p;
}
static void cpu_free(dllm_backend *be, void *p)
{
    (void)be;
    free(p);
}
static void cpu_copy(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}
static void cpu_memset0(dllm_backend *be, void *p, size_t bytes)
{
    (void)be;
    if (bytes)
        memset(p, 0, bytes);
}
static void cpu_sync(dllm_backend *be) { (void)be; }
static void cpu_copy_2d(dllm_backend *be, float *dst, size_t dld, const float *src, size_t sld,
                        int rows, int cols)
{
    (void)be;
    for (int r = 0; r < rows && cols > 0; r++)
        memcpy(dst + (size_t)r * dld, src + (size_t)r * sld, (size_t)cols * sizeof(float));
}

static void cpu_gemm(dllm_backend *be, bool tA, bool tB, int M, int N, int K, float alpha,
                     const float *A, const float *B, float beta, float *C)
{
    (void)be;
    op_gemm(tA, tB, M, N, K, alpha, A, B, beta, C);
}
static void cpu_gemm_bf16(dllm_backend *be, bool tA, bool tB, int M, int N, int K, float alpha,
                          const float *A, const float *B, float beta, float *C)
{
    (void)be;
    op_gemm_bf16(tA, tB, M, N, K, alpha, A, B, beta, C);
}
static void cpu_linear_fwd(dllm_backend *be, float *out, const float *inp, const float *w,
                           int N, int C, int OC)
{
    (void)be;
    op_linear_fwd(out, inp, w, N, C, OC);
}
static void cpu_linear_bwd(dllm_backend *be, float *dinp, float *dw, const float *dout,
                           const float *inp, const float *w, int N, int C, int OC)
{
    (void)be;
    op_linear_bwd(dinp, dw, dout, inp, w, N, C, OC);
}
static void cpu_fp8_linear_fwd(dllm_backend *be, float *out, const float *inp, fp8_matrix *w,
                               int N, int C, int OC)
{
    (void)be;
    op_fp8_linear_fwd(out, inp, w, N, C, OC);
}
static void cpu_bf16_linear_fwd(dllm_backend *be, float *out, const float *inp, bf16_matrix *w,
                                int N, int C, int OC)
{
    (void)be;
    op_bf16_linear_fwd(out, inp, w, N, C, OC);
}
static void cpu_bf16_linear_bwd_x(dllm_backend *be, float *dinp, const float *dout,
                                  bf16_matrix *w, int N, int C, int OC)
{
    (void)be;
    op_bf16_linear_bwd_x(dinp, dout, w, N, C, OC);
}
static void cpu_nvfp4_linear_fwd(dllm_backend *be, float *out, const float *inp,
                                 nvfp4_matrix *w, int N, int C, int OC)
{
    (void)be;
    op_nvfp4_linear_fwd(out, inp, w, N, C, OC);
}
static void cpu_int8_linear_fwd(dllm_backend *be, float *out, const float *inp,
                                const int8_matrix *w, int N, int C, int OC)
{
    (void)be;
    op_int8_linear_fwd(out, inp, w, N, C, OC);
}
static void cpu_rmsnorm_fwd(dllm_backend *be, float *out, float *rstd, const float *inp,
                            const float *w, int N, int C, float eps)
{
    (void)be;
    op_rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
}
static void cpu_rmsnorm_bwd(dllm_backend *be, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int N, int C)
{
    (void)be;
    op_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
}
static void cpu_rope_fwd(dllm_backend *be, float *out, const float *inp, const int32_t *pos,
                         const op_rope_table *t, int N, int NH, int HD)
{
    (void)be;
    op_rope_fwd(out, inp, pos, t, N, NH, HD);
}
static void cpu_rope_bwd(dllm_backend *be, float *dinp, const float *dout, const int32_t *pos,
                         const op_rope_table *t, int N, int NH, int HD)
{
    (void)be;
    op_rope_bwd(dinp, dout, pos, t, N, NH, HD);
}
/* The CPU keeps the softmax probabilities for backward. */
static size_t cpu_attn_state_floats(dllm_backend *be, int B, int T, int NH)
{
    (void)be;
    return (size_t)B * NH * T * T;
}
static void cpu_attention_fwd(dllm_backend *be, float *out, float *state, const float *q,
                              const float *k, const float *v, const uint8_t *keymask, int B,
                              int T, int NH, int NKV, int HD, bool causal)
{
    (void)be;
    op_attention_fwd(out, state, q, k, v, keymask, B, T, NH, NKV, HD, causal);
}
static void cpu_kv_append(dllm_backend *be, float *kc, float *vc, uint8_t *cmask, const float *k,
                          const float *v, const uint8_t *newmask, int B, int T, int len,
                          int max_len, int KD)
{
    (void)be;
    op_kv_append(kc, vc, cmask, k, v, newmask, B, T, len, max_len, KD);
}
static void cpu_attention_cached(dllm_backend *be, float *y, const float *q, const float *kc,
                                 const float *vc, const uint8_t *cmask, int B, int T, int len,
                                 int max_len, int NH, int NKV, int HD, bool causal)
{
    (void)be;
    op_attention_cached(y, q, kc, vc, cmask, B, T, len, max_len, NH, NKV, HD, causal);
}
static void cpu_attention_bwd(dllm_backend *be, float *dq, float *dk, float *dv,
                              const float *dout, const float *out, const float *state,
                              const float *q, const float *k, const float *v,
                              const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                              bool causal)
{
    /* the probabilities already carry the mask and causality */
    (void)be, (void)out, (void)keymask, (void)causal;
    op_attention_bwd(dq, dk, dv, dout, state, q, k, v, B, T, NH, NKV, HD);
}
static void cpu_swiglu_fwd(dllm_backend *be, float *out, const float *gate, const float *up,
                           size_t n)
{
    (void)be;
    op_swiglu_fwd(out, gate, up, n);
}
static void cpu_swiglu_bwd(dllm_backend *be, float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, size_t n)
{
    (void)be;
    op_swiglu_bwd(dgate, dup, dout, gate, up, n);
}
static void cpu_embedding_fwd(dllm_backend *be, float *out, const int32_t *ids, const float *wte,
                              int N, int C)
{
    (void)be;
    op_embedding_fwd(out, ids, wte, N, C);
}
static void cpu_embedding_bwd(dllm_backend *be, float *dwte, const float *dout,
                              const int32_t *ids, int N, int C)
{
    (void)be;
    op_embedding_bwd(dwte, dout, ids, N, C);
}
static void cpu_xent_fwd(dllm_backend *be, float *logp, float *lse, const float *logits,
                         const int32_t *target, int N, int V)
{
    (void)be;
    op_xent_fwd(logp, lse, logits, target, N, V);
}
static void cpu_xent_bwd(dllm_backend *be, float *dlogits, const float *dlogp,
                         const float *logits, const float *lse, const int32_t *target, int N,
                         int V)
{
    (void)be;
    op_xent_bwd(dlogits, dlogp, logits, lse, target, N, V);
}
static void cpu_round_bf16(dllm_backend *be, float *x, size_t n)
{
    (void)be;
    op_round_bf16(x, n);
}
static void cpu_add(dllm_backend *be, float *y, const float *x, size_t n)
{
    (void)be;
#pragma omp parallel for if (n > 65536)
    for (size_t e = 0; e < n; e++)
        y[e] += x[e];
}
static void cpu_adamw(dllm_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                      int t, float lr, float b1, float b2, float eps, float wd)
{
    (void)be;
    op_adamw(p, g, m, v, n, t, lr, b1, b2, eps, wd);
}
static double cpu_clip_grad(dllm_backend *be, float *g, size_t n, double max_norm)
{
    (void)be;
    double norm = op_grad_norm(g, n);
    if (max_norm > 0)
        op_clip_grad(g, n, norm, max_norm);
    return norm;
}
static double cpu_adamw_step(dllm_backend *be, float *p, float *g, float *m, float *v, size_t n,
                             const dllm_adamw_args *a)
{
    double norm = cpu_clip_grad(be, g, n, a->max_norm);
    if (isfinite(norm))
        op_adamw(p, g, m, v, n, a->t, a->lr, a->b1, a->b2, a->eps, a->wd);
    return norm;
}
static double cpu_grad_norm(dllm_backend *be, const float *g, size_t n)
{
    (void)be;
    return op_grad_norm(g, n);
}

static void cpu_bias_fwd(dllm_backend *be, float *out, const float *bias, int N, int OC)
{
    (void)be;
#pragma omp parallel for if ((long)N * OC > 65536)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            out[(size_t)n * OC + o] += bias[o];
}
/* Column sums, each column over the rows in order (deterministic for any
 * thread count). */
static void cpu_bias_bwd(dllm_backend *be, float *dbias, const float *dout, int N, int OC)
{
    (void)be;
#pragma omp parallel for if ((long)N * OC > 65536)
    for (int o = 0; o < OC; o++) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++)
            acc += dout[(size_t)n * OC + o];
        dbias[o] += acc;
    }
}

static void cpu_to_bf16(dllm_backend *be, uint16_t *out, const float *inp, size_t n)
{
    (void)be;
    op_f32_to_bf16_array(out, inp, n);
}
static void cpu_fp8_quantise(dllm_backend *be, uint8_t *q, float *scale, const float *x, int R,
                             int C, fp8_format f, fp8_scaling s, bool pow2)
{
    (void)be;
    fp8_matrix m = {0};
    dllm_err err;
    if (fp8_quantise(&m, x, R, C, f, s, pow2, &err)) {
        fprintf(stderr, "dllm-rl: cpu backend: %s\n", err.msg);
        exit(1);
    }
    memcpy(q, m.q, (size_t)R * C);
    memcpy(scale, m.scale, (size_t)m.scale_rows * m.scale_cols * sizeof(float));
    fp8_matrix_free(&m);
}

/* The CPU's own layouts (kernels/fp8.h, nvfp4.h, int8.h, ops.h), in host memory. */
static int cpu_pack_weight(dllm_backend *be, dllm_lin_weight w, const float *src,
                           const float *host_src, float *stage, int o, int i,
                           const dllm_pack_args *a, dllm_err *err)
{
    (void)be, (void)stage;
    if (!src)
        src = host_src;
    if (w.b16) {
        bf16_matrix_pack(w.b16, src, o, i);
        return 0;
    }
    if (w.i8)
        return int8_quantise_weight((int8_matrix *)w.i8, src, o, i, a->i8_scaling, err);
    if (w.f4) {
        int rc = nvfp4_quantise_scaled(w.f4, src, o, i, a->f4_scaling, err);
        if (!rc)
            nvfp4_matrix_cache_dequant(w.f4); /* before any threaded use */
        return rc;
    }
    int rc = fp8_quantise_weight(w.f8, src, o, i, a->f8_format, a->f8_scaling, a->f8_pow2,
                                 err);
    if (!rc) {
        w.f8->act_scaling = a->f8_act;
        w.f8->fast = a->f8_fast;
        if (!w.f8->fast) /* the fast mode packs its own bf16 codes on first use */
            fp8_matrix_cache_dequant(w.f8); /* before any threaded use */
    }
    return rc;
}
static void cpu_free_weight(dllm_backend *be, dllm_lin_weight w)
{
    (void)be;
    if (w.b16)
        bf16_matrix_free(w.b16);
    if (w.i8)
        int8_matrix_free((int8_matrix *)w.i8);
    if (w.f4)
        nvfp4_matrix_free(w.f4);
    if (w.f8)
        fp8_matrix_free(w.f8);
}

/* The grouped linears of one format (w[0]'s; the core never mixes formats in a group). */
static void cpu_linears_fwd(dllm_backend *be, int nw, float *const out[], const float *inp,
                            const dllm_lin_weight w[], int N, int C, const int OC[])
{
    (void)be;
    enum { MAXW = 8 };
    if (nw > MAXW) {
        for (int i = 0; i < nw; i += MAXW)
            cpu_linears_fwd(be, nw - i < MAXW ? nw - i : MAXW, out + i, inp, w + i, N, C,
                            OC + i);
        return;
    }
    union {
        fp8_matrix *f8[MAXW];
        nvfp4_matrix *f4[MAXW];
        const int8_matrix *i8[MAXW];
        bf16_matrix *b16[MAXW];
    } p;
    for (int i = 0; i < nw; i++) {
        if (w[0].f8)
            p.f8[i] = w[i].f8;
        else if (w[0].f4)
            p.f4[i] = w[i].f4;
        else if (w[0].i8)
            p.i8[i] = w[i].i8;
        else
            p.b16[i] = w[i].b16;
    }
    if (w[0].f8)
        op_fp8_linears_fwd(nw, out, inp, p.f8, N, C, OC);
    else if (w[0].f4)
        op_nvfp4_linears_fwd(nw, out, inp, p.f4, N, C, OC);
    else if (w[0].i8)
        op_int8_linears_fwd(nw, out, inp, p.i8, N, C, OC);
    else
        op_bf16_linears_fwd(nw, out, inp, p.b16, N, C, OC);
}

/* The caches the CPU kernels make on first use: the dequantised FP8 weight, its bf16
 * tiles for the fast path, the widened bf16 weight. */
static void cpu_weight_cache_free(dllm_backend *be, fp8_matrix *f8, bf16_matrix *b16)
{
    (void)be;
    if (f8) {
        free(f8->deq);
        free(f8->qbf);
        free(f8->qbf_scale);
        f8->deq = NULL, f8->qbf = NULL, f8->qbf_scale = NULL;
        f8->deq_valid = f8->qbf_valid = false;
    }
    if (b16) {
        free(b16->wf32);
        b16->wf32 = NULL;
        b16->wf32_valid = false;
    }
}

/* The rows are independent (keyed noise): drawn in parallel, one scratch per thread
 * when a nucleus is sorted. */
static void cpu_ar_choose_nucleus(dllm_backend *be, int32_t *tokens, int32_t *next, float *logp,
                                  float *logp_t1, int32_t *length, uint8_t *done,
                                  const float *logits, int r0, int n, int V, int G, int g,
                                  double temperature, double top_p, int eos_id, uint64_t seed,
                                  uint64_t seq_offset)
{
    (void)be;
#pragma omp parallel
    {
        void *work = temperature > 0 && top_p < 1 ? dllm_malloc(dllm_ar_work_bytes(V)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            const int b = r0 + i;
            if (done[b]) {
                next[b] = eos_id;
                continue;
            }
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)g,
                                       seq_offset + (uint64_t)b);
            double lp, lp1;
            int32_t tok = dllm_ar_choose(logits + (size_t)i * V, V, temperature, top_p,
                                         dllm_rng_uniform(&r), &lp, &lp1, work);
            next[b] = tokens[(size_t)b * G + g] = tok;
            logp[(size_t)b * G + g] = (float)lp;
            logp_t1[(size_t)b * G + g] = (float)lp1;
            length[b] = g + 1;
            done[b] = tok == eos_id;
        }
        free(work);
    }
}
static void cpu_ar_choose(dllm_backend *be, int32_t *tokens, int32_t *next, float *logp,
                          float *logp_t1, int32_t *length, uint8_t *done, const float *logits,
                          int r0, int n, int V, int G, int g, double temperature, int eos_id,
                          uint64_t seed, uint64_t seq_offset)
{
    cpu_ar_choose_nucleus(be, tokens, next, logp, logp_t1, length, done, logits, r0, n, V, G, g,
                          temperature, 1.0, eos_id, seed, seq_offset);
}

static void cpu_denoise_block_counts(dllm_backend *be, int32_t *nm, const int32_t *canvas, int B,
                                     int T, int lo, int hi, int mask_id)
{
    (void)be;
    op_denoise_block_counts(nm, canvas, B, T, lo, hi, mask_id);
}
static void cpu_denoise_rows(dllm_backend *be, int32_t *rows, int32_t *rows_u, int64_t *row_seq,
                             int32_t *row_pos, int32_t *seq_start, int32_t *n,
                             const int32_t *canvas, int B, int T, int lo, int hi, int act_lo,
                             int mask_id, uint64_t seq_offset)
{
    (void)be;
    op_denoise_rows(rows, rows_u, row_seq, row_pos, seq_start, n, canvas, B, T, lo, hi, act_lo,
                    mask_id, seq_offset);
}
static void cpu_denoise_logits_fix(dllm_backend *be, float *cond, const float *uncond, int n,
                                   int V, float w, int eos_id)
{
    (void)be;
    op_denoise_logits_fix(cond, uncond, n, V, w, eos_id);
}
static void cpu_denoise_draw(dllm_backend *be, int32_t *x0, float *prob, double *rand_conf,
                             const float *logits, const int64_t *row_seq,
                             const int32_t *row_pos, int n, int V, double temperature,
                             uint64_t seed, const int32_t *seq_step, uint64_t seq_offset,
                             int exclude)
{
    (void)be;
    op_denoise_draw(x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature, seed,
                    seq_step, seq_offset, exclude);
}
static void cpu_denoise_commit(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                               float *commit_prob, const int32_t *x0, const float *prob,
                               const double *rand_conf, const int32_t *row_pos,
                               const int32_t *seq_start, const int32_t *nm, int spb,
                               int step_in_block, int32_t *seq_step, double threshold, int B,
                               int T, int P, int G, int mask_id, int eos_id, int eot_id, bool cfg)
{
    (void)be;
    op_denoise_commit(canvas, commit_step, commit_prob, x0, prob, rand_conf, row_pos, seq_start,
                      nm, spb, step_in_block, seq_step, threshold, B, T, P, G, mask_id, eos_id,
                      eot_id, cfg);
}

static void cpu_dream_draw(dllm_backend *be, int32_t *x0, double *key, float *prob,
                           uint8_t *take, const float *logits, const int64_t *row_seq,
                           const int32_t *row_pos, int n, int V, const dllm_dream_step *a)
{
    (void)be;
    op_dream_draw(x0, key, prob, take, logits, row_seq, row_pos, n, V, a);
}
static void cpu_dream_commit(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                             float *commit_prob, const int32_t *x0, const double *key,
                             const float *prob, const uint8_t *take, const int32_t *row_pos,
                             const int32_t *seq_start, int B, int T, int P, int G, int mask_id,
                             const dllm_dream_step *a)
{
    (void)be;
    op_dream_commit(canvas, commit_step, commit_prob, x0, key, prob, take, row_pos, seq_start, B,
                    T, P, G, mask_id, a);
}

/* Gated DeltaNet: kernels/cpu/gated_delta.c */
static void cpu_gd_conv_fwd(dllm_backend *be, float *out, float *pre, float *state_out,
                            const float *x, const float *state, const float *w, int B, int T,
                            int D, int K)
{
    (void)be;
    gd_conv_fwd(out, pre, state_out, x, state, w, B, T, D, K);
}
static void cpu_gd_conv_bwd(dllm_backend *be, float *dx, float *dw, float *dstate,
                            const float *dout, const float *pre, const float *x,
                            const float *state, const float *w, int B, int T, int D, int K)
{
    (void)be;
    gd_conv_bwd(dx, dw, dstate, dout, pre, x, state, w, B, T, D, K);
}
static void cpu_gd_l2norm_fwd(dllm_backend *be, float *out, float *rnorm, const float *x,
                              int rows, int n, float eps)
{
    (void)be;
    gd_l2norm_fwd(out, rnorm, x, rows, n, eps);
}
static void cpu_gd_l2norm_bwd(dllm_backend *be, float *dx, const float *dout, const float *out,
                              const float *rnorm, int rows, int n)
{
    (void)be;
    gd_l2norm_bwd(dx, dout, out, rnorm, rows, n);
}
static void cpu_gd_gates_fwd(dllm_backend *be, float *g, float *beta, const float *a,
                             const float *b, const float *A_log, const float *dt_bias, int N,
                             int Hv)
{
    (void)be;
    gd_gates_fwd(g, beta, a, b, A_log, dt_bias, N, Hv);
}
static void cpu_gd_gates_bwd(dllm_backend *be, float *da, float *db, float *dA_log,
                             float *ddt_bias, const float *dg, const float *dbeta,
                             const float *a, const float *b, const float *A_log,
                             const float *dt_bias, int N, int Hv)
{
    (void)be;
    gd_gates_bwd(da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, N, Hv);
}
static void cpu_gd_rule_recurrent_fwd(dllm_backend *be, float *o, float *state_out,
                                      const float *q, const float *k, const float *v,
                                      const float *g, const float *beta, const float *state_in,
                                      int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    (void)be;
    gd_rule_recurrent_fwd(o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv, Dv);
}
static void cpu_gd_rule_chunked_fwd(dllm_backend *be, float *o, float *state_out,
                                    const float *q, const float *k, const float *v,
                                    const float *g, const float *beta, const float *state_in,
                                    int B, int T, int Hk, int Dk, int Hv, int Dv, int chunk)
{
    (void)be;
    gd_rule_chunked_fwd(o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv, Dv, chunk);
}
static void cpu_gd_rule_bwd(dllm_backend *be, float *dq, float *dk, float *dv, float *dg,
                            float *dbeta, float *dstate_in, const float *dout, const float *q,
                            const float *k, const float *v, const float *g, const float *beta,
                            const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    (void)be;
    gd_rule_bwd(dq, dk, dv, dg, dbeta, dstate_in, dout, q, k, v, g, beta, state_in, B, T, Hk, Dk,
                Hv, Dv);
}
static void cpu_gd_gated_rmsnorm_fwd(dllm_backend *be, float *out, float *rstd, const float *x,
                                     const float *z, const float *w, int rows, int n, float eps)
{
    (void)be;
    gd_gated_rmsnorm_fwd(out, rstd, x, z, w, rows, n, eps);
}
static void cpu_gd_gated_rmsnorm_bwd(dllm_backend *be, float *dx, float *dz, float *dw,
                                     const float *dout, const float *x, const float *z,
                                     const float *w, const float *rstd, int rows, int n)
{
    (void)be;
    gd_gated_rmsnorm_bwd(dx, dz, dw, dout, x, z, w, rstd, rows, n);
}
static void cpu_gd_partial_rope_fwd(dllm_backend *be, float *out, const float *x,
                                    const int32_t *pos, int N, int NH, int HD, int rot,
                                    float theta)
{
    (void)be;
    gd_partial_rope_fwd(out, x, pos, N, NH, HD, rot, theta);
}
static void cpu_gd_partial_rope_bwd(dllm_backend *be, float *dx, const float *dout,
                                    const int32_t *pos, int N, int NH, int HD, int rot,
                                    float theta)
{
    (void)be;
    gd_partial_rope_bwd(dx, dout, pos, N, NH, HD, rot, theta);
}
static void cpu_gd_out_gate_fwd(dllm_backend *be, float *out, const float *x, const float *gate,
                                size_t n)
{
    (void)be;
    gd_out_gate_fwd(out, x, gate, n);
}
static void cpu_gd_out_gate_bwd(dllm_backend *be, float *dx, float *dgate, const float *dout,
                                const float *x, const float *gate, size_t n)
{
    (void)be;
    gd_out_gate_bwd(dx, dgate, dout, x, gate, n);
}

/* The format's linear, then the residual added as the add entry adds it: the CPU's order
 * of operations, so results stay those of the two calls. No fused producers here: qa is
 * never set up by this backend (act_quant_prepare is absent). */
static void cpu_linear_res_fwd(dllm_backend *be, float *out, const float *res, const float *inp,
                               const dllm_qact *qa, const dllm_lin_weight *w, int N, int C,
                               int OC)
{
    if (qa) {
        fprintf(stderr, "dllm-rl: cpu backend: linear_res_fwd with quantised activations "
                        "(the CPU has no fused producers)\n");
        exit(1);
    }
    if (w->f8)
        cpu_fp8_linear_fwd(be, out, inp, w->f8, N, C, OC);
    else if (w->f4)
        cpu_nvfp4_linear_fwd(be, out, inp, w->f4, N, C, OC);
    else if (w->i8)
        cpu_int8_linear_fwd(be, out, inp, w->i8, N, C, OC);
    else if (w->b16)
        cpu_bf16_linear_fwd(be, out, inp, w->b16, N, C, OC);
    else {
        fprintf(stderr, "dllm-rl: cpu backend: linear_res_fwd without a weight\n");
        exit(1);
    }
    cpu_add(be, out, res, (size_t)N * OC);
}

/* RoPE in place, then attention: the two entries' results. */
/* The LoRA linears of a bf16 trainer: the calls they stand for, in turn. */
static void cpu_bf16_lora_fwd(dllm_backend *be, float *out, float *xa, const float *inp,
                              const dllm_qact *qa, const float *res, bf16_matrix *w,
                              const float *A, const float *B, float scale, int N, int C, int OC,
                              int r)
{
    (void)qa; /* never prepared here (no act_quant_prepare): inp is rounded as read */
    cpu_bf16_linear_fwd(be, out, inp, w, N, C, OC);
    cpu_gemm_bf16(be, false, true, N, r, C, 1.0f, inp, A, 0.0f, xa);
    cpu_gemm_bf16(be, false, true, N, OC, r, scale, xa, B, 1.0f, out);
    if (res)
        cpu_add(be, out, res, (size_t)N * OC);
}
static void cpu_bf16_lora_bwd(dllm_backend *be, float *dinp, float *dA, float *dB, float *dxa,
                              const float *dout, const float *inp, const float *xa,
                              bf16_matrix *w, const float *A, const float *B, float scale,
                              int N, int C, int OC, int r)
{
    cpu_bf16_linear_bwd_x(be, dinp, dout, w, N, C, OC);
    cpu_gemm_bf16(be, false, false, N, r, OC, scale, dout, B, 0.0f, dxa);
    cpu_gemm_bf16(be, true, false, OC, r, N, scale, dout, xa, 1.0f, dB);
    cpu_gemm_bf16(be, false, false, N, C, r, 1.0f, dxa, A, 1.0f, dinp);
    cpu_gemm_bf16(be, true, false, r, C, N, 1.0f, dxa, inp, 1.0f, dA);
}

static void cpu_rope_attention_fwd(dllm_backend *be, float *out, float *state, float *q, float *k,
                                   const float *v, const int32_t *pos, const op_rope_table *t,
                                   const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                                   bool causal)
{
    const int N = B * T;
    cpu_rope_fwd(be, q, q, pos, t, N, NH, HD);
    cpu_rope_fwd(be, k, k, pos, t, N, NKV, HD);
    cpu_attention_fwd(be, out, state, q, k, v, keymask, B, T, NH, NKV, HD, causal);
}
/* q and k were rotated in place by the forward: the parts. */
static void cpu_rope_attention_bwd(dllm_backend *be, float *dq, float *dk, float *dv,
                                   const float *dout, const float *out, const float *state,
                                   float *q, float *k, const float *v, const int32_t *pos,
                                   const op_rope_table *t, const uint8_t *keymask, int B, int T,
                                   int NH, int NKV, int HD, bool causal)
{
    const int N = B * T;
    size_t nq = (size_t)N * NH * HD * sizeof(float), nk = (size_t)N * NKV * HD * sizeof(float);
    if (dq)
        memset(dq, 0, nq);
    if (dk)
        memset(dk, 0, nk);
    if (dv)
        memset(dv, 0, nk);
    cpu_attention_bwd(be, dq, dk, dv, dout, out, state, q, k, v, keymask, B, T, NH, NKV, HD,
                      causal);
    if (dq)
        cpu_rope_bwd(be, dq, dq, pos, t, N, NH, HD);
    if (dk)
        cpu_rope_bwd(be, dk, dk, pos, t, N, NKV, HD);
}

static const dllm_backend_ops cpu_ops = {
    /* buffers */
    .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_copy, .download = cpu_copy,
    .copy = cpu_copy, .memset0 = cpu_memset0, .sync = cpu_sync, .copy_2d = cpu_copy_2d,
    /* linear layers and GEMM */
    .gemm = cpu_gemm, .gemm_bf16 = cpu_gemm_bf16, .linear_fwd = cpu_linear_fwd, .linear_bwd = cpu_linear_bwd,
    .bias_fwd = cpu_bias_fwd, .bias_bwd = cpu_bias_bwd,
    .bf16_linear_fwd = cpu_bf16_linear_fwd, .bf16_linear_bwd_x = cpu_bf16_linear_bwd_x,
    .nvfp4_linear_fwd = cpu_nvfp4_linear_fwd, .int8_linear_fwd = cpu_int8_linear_fwd,
    .weight_cache_free = cpu_weight_cache_free,
    /* attention and positions */
    .rope_fwd = cpu_rope_fwd, .rope_bwd = cpu_rope_bwd,
    .attn_state_floats = cpu_attn_state_floats,
    .attention_fwd = cpu_attention_fwd, .attention_bwd = cpu_attention_bwd,
    .kv_append = cpu_kv_append, .attention_cached = cpu_attention_cached,
    /* norms, activations, embeddings, elementwise */
    .rmsnorm_fwd = cpu_rmsnorm_fwd, .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .swiglu_fwd = cpu_swiglu_fwd, .swiglu_bwd = cpu_swiglu_bwd,
    .embedding_fwd = cpu_embedding_fwd, .embedding_bwd = cpu_embedding_bwd,
    .round_bf16 = cpu_round_bf16, .add = cpu_add,
    /* quantisation (no fused FP8 producers: the CPU's linears quantise their input) */
    .to_bf16 = cpu_to_bf16, .fp8_quantise = cpu_fp8_quantise,
    .pack_weight = cpu_pack_weight, .free_weight = cpu_free_weight,
    .fp8_linear_fwd = cpu_fp8_linear_fwd, .linears_fwd = cpu_linears_fwd,
    /* loss */
    .xent_fwd = cpu_xent_fwd, .xent_bwd = cpu_xent_bwd,
    /* optimizer */
    .adamw = cpu_adamw, .grad_norm = cpu_grad_norm, .clip_grad = cpu_clip_grad,
    .adamw_step = cpu_adamw_step,
    /* samplers */
    .ar_choose = cpu_ar_choose, .ar_choose_nucleus = cpu_ar_choose_nucleus,
    .denoise_block_counts = cpu_denoise_block_counts, .denoise_rows = cpu_denoise_rows,
    .denoise_logits_fix = cpu_denoise_logits_fix, .denoise_draw = cpu_denoise_draw,
    .denoise_commit = cpu_denoise_commit, .dream_draw = cpu_dream_draw,
    .dream_commit = cpu_dream_commit,
    /* Gated DeltaNet */
    .gd_conv_fwd = cpu_gd_conv_fwd, .gd_conv_bwd = cpu_gd_conv_bwd, .gd_l2norm_fwd =
    cpu_gd_l2norm_fwd, .gd_l2norm_bwd = cpu_gd_l2norm_bwd, .gd_gates_fwd = cpu_gd_gates_fwd,
    .gd_gates_bwd = cpu_gd_gates_bwd, .gd_rule_recurrent_fwd = cpu_gd_rule_recurrent_fwd,
    .gd_rule_chunked_fwd = cpu_gd_rule_chunked_fwd, .gd_rule_bwd = cpu_gd_rule_bwd,
    .gd_gated_rmsnorm_fwd = cpu_gd_gated_rmsnorm_fwd, .gd_gated_rmsnorm_bwd =
    cpu_gd_gated_rmsnorm_bwd, .gd_partial_rope_fwd = cpu_gd_partial_rope_fwd,
    .gd_partial_rope_bwd = cpu_gd_partial_rope_bwd, .gd_out_gate_fwd = cpu_gd_out_gate_fwd,
    .gd_out_gate_bwd = cpu_gd_out_gate_bwd,
    /* fused forwards: the CPU runs the parts in turn */
    .linear_res_fwd = cpu_linear_res_fwd, .rope_attention_fwd = cpu_rope_attention_fwd,
    .rope_attention_bwd = cpu_rope_attention_bwd,
    /* a bf16 trainer's LoRA linears: the parts in turn */
    .bf16_lora_fwd = cpu_bf16_lora_fwd, .bf16_lora_bwd = cpu_bf16_lora_bwd,
};

static dllm_backend cpu_backend = {
    .kind = DLLM_BACKEND_CPU, .name = "cpu", .ops = &cpu_ops, .impl = NULL,
};

dllm_backend *dllm_backend_cpu(void) { return &cpu_backend; }
