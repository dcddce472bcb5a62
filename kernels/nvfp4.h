/* nvfp4.h: the NVFP4 4-bit format, simulated bit-exactly on the CPU, and a
 * quantised linear layer on it (a harsher rollout precision than FP8).
 *
 * Element format E2M1 (sign s, 2 exponent bits e, 1 mantissa bit m, bias 1):
 *   code s.ee.m -> (-1)^s * 2^(e-1) * (1 + m/2) for e > 0, (-1)^s * m/2 for e = 0:
 *   magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7; 8..15 the negatives, 8 = -0).
 *   No infinities and no NaN. nvfp4_e2m1_encode rounds to nearest, ties to the even
 *   code (m = 0): 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
 *   5 -> 4; magnitudes above 6 and +-inf saturate to +-6; NaN (which has no code)
 *   encodes as +6, so a NaN in a tensor shows as the largest value rather than
 *   vanishing; -0 keeps its sign.
 *
 * Scaled matrices (two-level scaling, as NVIDIA's NVFP4 recipe): x[R, C] is cut
 * into blocks of 16 consecutive elements along C (the reduction dimension of a
 * linear layer; an edge block covers the remainder). In fp32:
 *   amax      = max |x| over the tensor's finite values
 *   g         = amax / (6 * 448)  (the per-tensor fp32 scale; 1 when amax is 0)
 *   amax_b    = max |x| over block b's finite values
 *   sc_b      = fp8_encode((amax_b / 6) / g, E4M3)      (the block scale, E4M3 code)
 *   d_b       = fp8_decode(sc_b, E4M3) * g               (the block's decode scale)
 *   q[r, c]   = nvfp4_e2m1_encode(x[r, c] / d_b)         (d_b = 0: +-0 with x's sign)
 *   dequant   = nvfp4_e2m1_decode(q[r, c]) * d_b
 * so the block maximum lands near 6 and g keeps every block scale within E4M3's
 * range (amax_b / 6 / g <= 448). Codes are stored one per byte (not packed).
 *
 * Coarser scaling (nvfp4_scaling, rollout.nvfp4.scaling) keeps the E2M1 codes and the
 * two levels and changes only what one E4M3 scale covers: block16 (the recipe above,
 * the default), block32 (32 consecutive elements along C), channel (a whole row: one
 * scale per output channel of a weight, per token of an activation) or tensor (every
 * element: amax_b = amax, so sc_b = E4M3(448) and d_b = 448 g, the tensor's amax / 6
 * up to fp32 rounding). A tensor-scaled matrix still stores one scale per row, all
 * equal, so that every scaling reads its scales the same way.
 *
 * The linear layer (op_nvfp4_linear_fwd) is W4A4: activations are quantised at run
 * time the same way, at the weight's scaling (per-row blocks of 16 along C by default,
 * their own per-tensor scale), both operands are dequantised and multiplied in fp32,
 * like op_fp8_linear_fwd. */
#ifndef DLLM_NVFP4_H
#define DLLM_NVFP4_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/base.h"

enum {
    NVFP4_BLOCK = 16,      /* elements per block scale */
    NVFP4_E4M3_MAX = 448   /* the block scale's largest value */
};
#define NVFP4_E2M1_MAX 6.0f

/* What one block scale covers (rollout.nvfp4.scaling); block16 is NVIDIA's NVFP4 and
 * the zero value, so a zeroed nvfp4_matrix has it. */
typedef enum {
    NVFP4_SCALE_BLOCK16 = 0, /* 16 consecutive elements of a row */
    NVFP4_SCALE_BLOCK32 = 1, /* 32 consecutive elements of a row */
    NVFP4_SCALE_CHANNEL = 2, /* a whole row (output channel / token) */
    NVFP4_SCALE_TENSOR = 3   /* the whole tensor */
} nvfp4_scaling;
enum { NVFP4_N_SCALING = 4 };

/* "block16" | "block32" | "channel" | "tensor" (rollout.nvfp4.scaling). The parser
 * returns 0, or DLLM_EXIT_INPUT listing the choices. */
const char *nvfp4_scaling_name(nvfp4_scaling s);
int nvfp4_scaling_parse(const char *s, nvfp4_scaling *out, dllm_err *err);
/* Elements per block scale along a row of C elements under s (C for channel, tensor). */
int nvfp4_block_width(nvfp4_scaling s, int C);

/* ---- scalars ---------------------------------------------------------------------- */
uint8_t nvfp4_e2m1_encode(float x);  /* a 4-bit code in the low bits */
float nvfp4_e2m1_decode(uint8_t code); /* the low 4 bits are used */

/* ---- scaled matrices -------------------------------------------------------------- */
typedef struct {
    int rows, cols;           /* R, C */
    nvfp4_scaling scaling;    /* what one block scale covers */
    int block;                /* B: elements per block scale along C (16, 32 or C) */
    int scale_cols;           /* SC = ceil(C / B) */
    float global_scale;       /* g */
    uint8_t *q;               /* (R, C) E2M1 codes */
    uint8_t *scale;           /* (R, SC) E4M3 codes of the block scales */
    float *deq;               /* (R, C) cached dequantised values, valid iff deq_valid */
    bool deq_valid;
} nvfp4_matrix;

/* Quantises x[R, C] into m under scaling s (zero m before its first use; later calls
 * reuse its buffers when the shape and scaling are the same and invalidate the
 * dequantised cache). Returns 0, or DLLM_EXIT_INTERNAL on a bad shape or scaling. */
int nvfp4_quantise_scaled(nvfp4_matrix *m, const float *x, int R, int C, nvfp4_scaling s,
                          dllm_err *err);
/* nvfp4_quantise_scaled with block16 */
int nvfp4_quantise(nvfp4_matrix *m, const float *x, int R, int C, dllm_err *err);
/* The decode scale d_b of block (r, j). */
float nvfp4_block_decode_scale(const nvfp4_matrix *m, int r, int j);
/* out[R, C] = decode(q) * d_b. */
void nvfp4_dequantise(float *out, const nvfp4_matrix *m);
void nvfp4_matrix_cache_dequant(nvfp4_matrix *m);
void nvfp4_matrix_free(nvfp4_matrix *m);
/* out[R, C] = dequant(quant(x)) without keeping codes, under block16 (the first) or s;
 * out == x allowed. */
void nvfp4_quant_dequant(float *out, const float *x, int R, int C);
void nvfp4_quant_dequant_scaled(float *out, const float *x, int R, int C, nvfp4_scaling s);

/* out[N, OC] = dequant(quant(inp))[N, C] @ dequant(w)[OC, C]^T in fp32, the input
 * quantised at w's scaling. w->rows == OC and w->cols == C are checked (abort: a
 * programming error). Caches w's dequantised values on first use. */
void op_nvfp4_linear_fwd(float *out, const float *inp, nvfp4_matrix *w, int N, int C, int OC);
/* out[i] (N, OC[i]) = op_nvfp4_linear_fwd(inp, w[i]) for the nw weights of one input
 * (q/k/v, gate/up), bit for bit as nw calls; the activations quantised once where the
 * weights share their scaling. */
void op_nvfp4_linears_fwd(int nw, float *const out[], const float *inp, nvfp4_matrix *const w[],
                          int N, int C, const int OC[]);

#endif
