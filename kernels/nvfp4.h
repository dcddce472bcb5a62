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
 * The linear layer (op_nvfp4_linear_fwd) is W4A4: activations are quantised at run
 * time the same way (per-row blocks of 16 along C, their own per-tensor scale),
 * both operands are dequantised and multiplied in fp32, like op_fp8_linear_fwd. */
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

/* ---- scalars ---------------------------------------------------------------------- */
uint8_t nvfp4_e2m1_encode(float x);  /* a 4-bit code in the low bits */
float nvfp4_e2m1_decode(uint8_t code); /* the low 4 bits are used */

/* ---- scaled matrices -------------------------------------------------------------- */
typedef struct {
    int rows, cols;           /* R, C */
    int scale_cols;           /* SC = ceil(C / 16) */
    float global_scale;       /* g */
    uint8_t *q;               /* (R, C) E2M1 codes */
    uint8_t *scale;           /* (R, SC) E4M3 codes of the block scales */
    float *deq;               /* (R, C) cached dequantised values, valid iff deq_valid */
    bool deq_valid;
} nvfp4_matrix;

/* Quantises x[R, C] into m (zero m before its first use; later calls reuse its
 * buffers when the shape is the same and invalidate the dequantised cache).
 * Returns 0, or DLLM_EXIT_INTERNAL on a bad shape. */
int nvfp4_quantise(nvfp4_matrix *m, const float *x, int R, int C, dllm_err *err);
/* The decode scale d_b of block (r, j). */
float nvfp4_block_decode_scale(const nvfp4_matrix *m, int r, int j);
/* out[R, C] = decode(q) * d_b. */
void nvfp4_dequantise(float *out, const nvfp4_matrix *m);
void nvfp4_matrix_cache_dequant(nvfp4_matrix *m);
void nvfp4_matrix_free(nvfp4_matrix *m);
/* out[R, C] = dequant(quant(x)) without keeping codes; out == x allowed. */
void nvfp4_quant_dequant(float *out, const float *x, int R, int C);

/* out[N, OC] = dequant(quant(inp))[N, C] @ dequant(w)[OC, C]^T in fp32. w->rows == OC
 * and w->cols == C are checked (abort: a programming error). Caches w's dequantised
 * values on first use. */
void op_nvfp4_linear_fwd(float *out, const float *inp, nvfp4_matrix *w, int N, int C, int OC);

#endif
