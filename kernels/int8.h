/* int8.h: INT8 W8A8 with 7-bit activations -- symmetric integer codes, fp32 scales,
 * an exact integer product (docs/METHOD.md section 6, "INT8").
 *
 * Codes. A value x under scale s has the code
 *   q = clamp(rint(x / s), -Q, Q)     (fp32 division, then round half to even;
 *                                      +-inf clamp to +-Q, NaN codes as +Q)
 * with Q = 127 for weights and Q = 63 for activations; dequant = q * s in fp32.
 * Activations keep 7 bits so that the product is exact on AVX2's vpmaddubsw, which
 * adds two u8 x s8 products in saturating int16: with the activation codes shifted
 * to u = q + 64 in [1, 127], |u0 w0 + u1 w1| <= 2 * 127 * 127 = 32258 < 2^15. One
 * scheme on every CPU (and on a GPU later) keeps the rollouts the same everywhere.
 *
 * Scales (fp32, amax over the finite values; amax == 0 gives s = 1 and codes 0):
 *   weight [OC, C], INT8_SCALE_CHANNEL: s_w = amax(row) / 127 per output row;
 *                   INT8_SCALE_BLOCK:   s_w = amax(block) / 127 per 128 x 128 block;
 *   activation [N, C], channel: s_a = amax(row) / 63 per token;
 *                      block:   s_a = amax(group) / 63 per 1 x 128 group along C.
 *
 * The product (op_int8_linear_fwd), with K cut into k-blocks b (channel: one block of
 * all C; block: 128 wide, the last one shorter):
 *   acc[n, o, b] = sum_{k in b} qa[n, k] * qw[o, k]          (exact, int32)
 *   out[n, o]    = sum_b (s_a[n, b] * s_w[o, b]) * (float)acc[n, o, b]
 * in fp32, b ascending, the scale product formed first. |acc| <= K * 63 * 127 and the
 * shifted sum the library forms <= K * 127 * 127 < 2^31 for K < 133,000. The integer
 * sums are exact whoever forms them (oneDNN's u8s8 matmul, or the portable loop), so
 * the result depends neither on the library, the thread count nor the other rows.
 *
 * The reference product (op_int8_linear_ref) multiplies the dequantised operands in
 * fp32 (op_gemm): the same values, summed in fp32, so the two differ by fp32 rounding
 * only (|fast - ref| <= (2K + 8) 2^-24 sum_k |a_k w_k|, tests/unit/test_int8.c). */
#ifndef DLLM_INT8_H
#define DLLM_INT8_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/base.h"

typedef enum { INT8_SCALE_CHANNEL = 0, INT8_SCALE_BLOCK = 1 } int8_scaling;

enum {
    INT8_BLOCK = 128,   /* weight block side, activation group length, k-block width */
    INT8_W_MAX = 127,   /* weight codes in [-127, 127] */
    INT8_A_MAX = 63,    /* activation codes in [-63, 63] */
    INT8_A_SHIFT = 64,  /* activation codes + 64: the u8 operand, in [1, 127] */
    /* the CUDA backend's channel-scaled product: its int32 sums, a chunk of rows at a
     * time, in at most this many elements of scratch (256 MiB; kernels/cuda/gemm_int8.cu,
     * planned the same by the recorder) */
    INT8_DEVICE_ACC_ELEMS = 1 << 26
};

/* "channel" | "block" (rollout.int8.scaling). The parser returns 0, or
 * DLLM_EXIT_INPUT with a message listing the choices. */
const char *int8_scaling_name(int8_scaling s);
int int8_scaling_parse(const char *s, int8_scaling *m, dllm_err *err);

/* The code of x under scale s with largest code qmax (above). */
int8_t int8_code(float x, float s, int qmax);
/* The scale of values whose largest finite |x| is amax: amax / qmax, 1 when amax is 0. */
float int8_scale_from_amax(float amax, int qmax);

typedef struct {
    int rows, cols;         /* OC, C */
    int8_scaling scaling;
    int kb;                 /* k-blocks: 1 (channel) or ceil(C / 128) (block) */
    int ldq;                /* row stride of q: C (channel) or kb * 128 (block) */
    int8_t *q;              /* (OC, ldq) codes; block: zero past C */
    float *scale;           /* channel: (OC); block: (ceil(OC / 128), kb) */
    int32_t *comp;          /* (OC, kb): 64 * the sum of the row's codes in each k-block,
                               taken off the shifted activations' integer sums */
    float *deq;             /* (OC, C) dequantised values for the reference product,
                               valid iff deq_valid */
    bool deq_valid;
} int8_matrix;

/* Quantises the weight w[OC, C] into m (zero m before its first use; later calls reuse
 * its buffers for the same shape and scaling and invalidate the dequantised cache).
 * Returns 0, or DLLM_EXIT_INTERNAL on a bad shape. */
int int8_quantise_weight(int8_matrix *m, const float *w, int OC, int C, int8_scaling s,
                         dllm_err *err);
/* The weight scale covering (row o, k-block b). */
float int8_weight_scale(const int8_matrix *m, int o, int b);
/* Activations x[N, C] at scaling s: codes q (N, ldq) (zero past C), scales sa (N, kb),
 * kb and ldq as a weight of C columns at s has them. */
void int8_quantise_act(int8_t *q, float *sa, const float *x, int N, int C, int ldq,
                       int8_scaling s);
/* out[OC, C] = q * s_w. */
void int8_dequantise_weight(float *out, const int8_matrix *m);
/* Fills m->deq once (call before sharing m across threads). */
void int8_matrix_cache_dequant(int8_matrix *m);
void int8_matrix_free(int8_matrix *m);

/* out[N, OC] = the product above; w->rows == OC and w->cols == C are checked (abort:
 * a programming error). Overwrites out. */
void op_int8_linear_fwd(float *out, const float *inp, const int8_matrix *w, int N, int C,
                        int OC);
/* out[i] (N, OC[i]) = op_int8_linear_fwd(inp, w[i]) for the nw weights of one input
 * (q/k/v, gate/up), bit for bit as nw calls; the activations quantised once where the
 * weights share their scaling. */
void op_int8_linears_fwd(int nw, float *const out[], const float *inp,
                         const int8_matrix *const w[], int N, int C, const int OC[]);
/* out[N, OC] = dequant(quant(inp)) @ dequant(w)^T in fp32 (op_gemm): the reference. */
void op_int8_linear_ref(float *out, const float *inp, int8_matrix *w, int N, int C, int OC);
/* Who forms the integer sums here: "onednn" (oneDNN's u8s8 matmul) or "loop" (the
 * portable loop, a build without oneDNN or DLLM_INT8_GEMM=loop). */
const char *int8_gemm_path(void);
/* The CPU's int8 dot-product instructions in words: "AVX512-VNNI (vpdpbusd)",
 * "AVX-VNNI (vpdpbusd)", "AVX2 (vpmaddubsw)" or "none". */
const char *int8_cpu_isa(void);

#endif
