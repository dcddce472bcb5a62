/* fp8.h: FP8 numbers, scaled FP8 matrices, and the simulated W8A8 linear layer
 * (docs/METHOD.md section 6).
 *
 * Formats (sign s, exponent e, mantissa m):
 *   E4M3 "fn": bias 7, 3 mantissa bits, max 448, no infinities, NaN = S.1111.111
 *              (0x7F / 0xFF); min normal 2^-6, min subnormal 2^-9.
 *   E5M2:      bias 15, 2 mantissa bits, max 57344, inf = S.11111.00, NaN = S.11111.xx;
 *              min normal 2^-14, min subnormal 2^-16.
 * fp8_encode rounds to nearest, ties to even, in the subnormal range too. Finite values
 * beyond max, and +-inf, saturate to +-max (both formats); NaN stays NaN (0x7F with the
 * input's sign, a quiet NaN in both formats); -0 keeps its sign.
 *
 * Scaled matrices. A matrix x[R, C] is cut into blocks of br x bc (edge blocks cover
 * the remainder); each block b has one fp32 scale:
 *   amax_b  = max |x| over the block's finite values (NaN and inf are skipped, so
 *             they stay NaN / saturate instead of poisoning the scale)
 *   scale_b = amax_b / max_code in fp32 (amax_b == 0 gives 1); with pow2_scale it is
 *             rounded UP to a power of two (so scale_b >= the plain scale)
 *   q[r, c] = fp8_encode(x[r, c] / scale_b)          (fp32 division, then RNE)
 *   dequant = fp8_decode(q[r, c]) * scale_b           (fp32 product)
 * Scaling modes and their block shapes:
 *   FP8_SCALE_TENSOR   R x C     (one scale)
 *   FP8_SCALE_CHANNEL  1 x C     (one scale per row = per output channel of a weight
 *                                 [OC, C], or per token of an activation [N, K])
 *   FP8_SCALE_BLOCK    128 x 128 (weights, DeepSeek-V3 / veRL)
 *   FP8_SCALE_GROUP    1 x 128   (activations: groups of 128 along K)
 *
 * The W8A8 linear (op_fp8_linear_fwd, kernels/cpu/fp8_linear.c) quantises the
 * activations at run time (by default 1 x 128 groups, in the weight's format). By
 * default it is the exact CPU simulation of an FP8 GEMM: both operands dequantised and
 * multiplied in fp32. Its fast mode (fp8_matrix.fast) multiplies the codes on bf16 dot
 * products and applies the scales per 128-wide k-block, as an FP8 tensor core does.
 * Quantisation is bit-exact in both; the products agree with a GPU FP8 GEMM within
 * accumulation tolerance. */
#ifndef DLLM_FP8_H
#define DLLM_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/base.h"

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } fp8_format;

typedef enum {
    FP8_SCALE_TENSOR = 0,
    FP8_SCALE_CHANNEL = 1,
    FP8_SCALE_BLOCK = 2,
    FP8_SCALE_GROUP = 3,
} fp8_scaling;

enum { FP8_BLOCK = 128 }; /* side of weight blocks and length of activation groups */

/* ---- scalars ------------------------------------------------------------------------ */
uint8_t fp8_encode(float x, fp8_format f);
float fp8_decode(uint8_t code, fp8_format f);
/* fp8_decode(fp8_encode(x, f), f), bit for bit, without the table: the run-time
 * activation path. */
float fp8_round(float x, fp8_format f);
float fp8_max(fp8_format f);          /* 448 or 57344 */
uint8_t fp8_max_code(fp8_format f);   /* 0x7E or 0x7B (positive max) */
/* Distance between adjacent codes around |v| (in units of the format, v unscaled):
 * 2^(max(floor(log2 |v|), emin) - mantissa_bits). Half of it bounds |decode(encode(v)) - v|
 * for |v| <= max. */
float fp8_ulp(float v, fp8_format f);
void fp8_encode_array(uint8_t *out, const float *inp, size_t n, fp8_format f);
void fp8_decode_array(float *out, const uint8_t *inp, size_t n, fp8_format f);

/* Names as in the config (rollout.fp8.format / rollout.fp8.scaling):
 * "e4m3" | "e5m2";  "tensor" | "channel" | "block" | "group".
 * Parsers return 0, or DLLM_EXIT_INPUT with a message listing the choices. */
const char *fp8_format_name(fp8_format f);
const char *fp8_scaling_name(fp8_scaling s);
int fp8_format_parse(const char *s, fp8_format *f, dllm_err *err);
int fp8_scaling_parse(const char *s, fp8_scaling *m, dllm_err *err);

/* ---- scaled matrices ---------------------------------------------------------------- */
typedef struct {
    int rows, cols;          /* R, C of the full-precision matrix */
    fp8_format format;
    fp8_scaling scaling;
    bool pow2_scale;
    int block_rows, block_cols;  /* br x bc: the block one scale covers */
    int scale_rows, scale_cols;  /* SR = ceil(R / br), SC = ceil(C / bc) */
    uint8_t *q;              /* (R, C) codes */
    float *scale;            /* (SR, SC) fp32 scales; block (i, j) covers rows
                                [i*br, min((i+1)*br, R)) x cols [j*bc, min((j+1)*bc, C)) */
    /* Used by op_fp8_linear_fwd when this matrix is a weight [OC, C]: */
    float *deq;              /* (R, C) cached dequantised values, valid iff deq_valid */
    bool deq_valid;
    fp8_scaling act_scaling; /* how activations meeting this weight are quantised:
                                FP8_SCALE_GROUP (default), _CHANNEL or _TENSOR */
    bool fast;               /* op_fp8_linear_fwd's mode: false (the default) = the exact
                                simulation, true = codes on bf16 dot products (below) */
    uint16_t *qbf;           /* the codes as bf16, packed for the fast mode's kernel
                                (kernels/cpu/fp8_bf16dot.c); valid iff qbf_valid */
    float *qbf_scale;        /* the weight scales per 32-column tile and k-block, ditto */
    bool qbf_valid;
    int scale_ld;            /* row stride of scale in floats; 0 means scale_cols. A
                                device backend may store block scales in its GEMM
                                library's padded layout (dllm_backend_fp8_scale_ld) */
} fp8_matrix;

/* The row stride of m->scale. */
static inline int fp8_scale_ld(const fp8_matrix *m)
{
    return m->scale_ld ? m->scale_ld : m->scale_cols;
}

/* Block shape of a scaling mode for an R x C matrix. */
void fp8_block_shape(fp8_scaling s, int R, int C, int *br, int *bc);

/* Quantises x[R, C] into m. m must be zeroed (fp8_matrix m = {0}) before its first
 * use; later calls reuse its buffers when the shape and mode allow (the weight sync
 * after every optimizer step re-quantises in place) and invalidate the dequantised
 * cache. Returns 0, or DLLM_EXIT_INTERNAL on a bad shape or mode. */
int fp8_quantise(fp8_matrix *m, const float *x, int R, int C, fp8_format f,
                 fp8_scaling s, bool pow2_scale, dllm_err *err);
/* A weight w[OC, C]: scaling tensor, channel or block (128 x 128); act_scaling is set
 * to FP8_SCALE_GROUP. */
int fp8_quantise_weight(fp8_matrix *m, const float *w, int OC, int C, fp8_format f,
                        fp8_scaling s, bool pow2_scale, dllm_err *err);
/* Activations a[N, K]: scaling group (1 x 128 along K), channel (per row) or tensor. */
int fp8_quantise_act(fp8_matrix *m, const float *a, int N, int K, fp8_format f,
                     fp8_scaling s, bool pow2_scale, dllm_err *err);
/* The scales fp8_quantise would compute for x[R, C] with scaling s: (SR, SC) row-major,
 * SR x SC as fp8_block_shape gives them; no codes. */
void fp8_scales(float *scale, const float *x, int R, int C, fp8_format f, fp8_scaling s,
                bool pow2_scale);
/* The scale of a block whose largest finite |x| is amax, as fp8_quantise sets it (for
 * kernels that find a block's maximum themselves). */
float fp8_scale_from_amax(float amax, fp8_format f, bool pow2_scale);
/* out[R, C] = decode(q) * scale. */
void fp8_dequantise(float *out, const fp8_matrix *m);
/* Fills m->deq (allocating it once) unless already valid. Call after (re)quantising a
 * weight and before sharing it across threads; op_fp8_linear_fwd calls it lazily. */
void fp8_matrix_cache_dequant(fp8_matrix *m);
void fp8_matrix_free(fp8_matrix *m);

/* out[R, C] = dequant(quant(x)) without keeping codes: the run-time activation path.
 * In place (out == x) is allowed. */
void fp8_quant_dequant(float *out, const float *x, int R, int C, fp8_format f,
                       fp8_scaling s, bool pow2_scale);

/* ---- W8A8 linear (kernels/cpu/fp8_linear.c) ------------------------------------------
 * Activations are quantised per w->act_scaling in w->format (pow2 as w->pow2_scale).
 * w->rows == OC and w->cols == C are checked (abort: a programming error).
 *
 * Exact mode (w->fast false, the default):
 *   out[N, OC] = dequant(quant(inp))[N, C] @ dequant(w)[OC, C]^T in fp32 (op_gemm);
 *   the dequantised weight is cached in w on first use.
 * Fast mode (w->fast true), the product an FP8 tensor core forms: with K cut into
 * blocks j of 128 (the last one shorter),
 *   out[n, oc] = sum_j (sa[n, j] * sw[oc, j]) * sum_{k in j} qa[n, k] * qw[oc, k]
 *   where qa, qw are the decoded codes (exact in bf16, their products exact in fp32)
 *   and sa, sw the activation / weight scales covering block j (group, channel or
 *   tensor for activations; block, channel or tensor for weights). The inner sums run
 *   on bf16 dot products (oneDNN) where the CPU has them, else in fp32 (OpenBLAS) on
 *   the same values; both accumulate in fp32, so the two modes differ only by fp32
 *   rounding: |fast - exact| <= (2K + 8) 2^-24 sum_k |a_k w_k| (tests/unit/test_fast_gemm.c).
 *   The bf16 codes are cached in w on first use. */
void op_fp8_linear_fwd(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC);
/* out[i] (N, OC[i]) = op_fp8_linear_fwd(inp, w[i]) for the nw weights of one input
 * (q/k/v, gate/up), bit for bit as nw calls; where the weights' modes allow (fast,
 * same format, activation scaling and pow2), the activations are quantised once. */
void op_fp8_linears_fwd(int nw, float *const out[], const float *inp, fp8_matrix *const w[],
                        int N, int C, const int OC[]);
/* Where the fast mode runs now: "amx-bf16" (the block-scaled kernel on AMX tiles),
 * "bf16-dot" (the same kernel on AVX512-BF16 dot products) -- both with results
 * independent of the thread count and of the other rows -- or "exact-fp32" (the exact
 * simulation on op_gemm). */
const char *fp8_fast_path(void);
/* Whether the fast mode runs a block-scaled kernel ("amx-bf16" or "bf16-dot"): its own
 * sums and a bf16 copy of the codes, not the exact simulation. */
bool fp8_fast_blocks(void);

#endif
