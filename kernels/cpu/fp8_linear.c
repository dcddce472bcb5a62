/* fp8_linear.c: the W8A8 linear layer of the FP8 rollout copy on the CPU, in two modes
 * (kernels/fp8.h).
 *
 * Exact mode, the simulation:
 *   out[N, OC] = dequant(quant(inp))[N, C] @ dequant(w)[OC, C]^T
 * Activations are quantised at run time per w->act_scaling (1 x 128 groups along C by
 * default) in the weight's format, then both operands are dequantised and multiplied
 * in fp32 (op_gemm). The quantisation is bit-exact, so this is the FP8 GEMM up to
 * accumulation order. The dequantised weight is cached in w: it changes only when the
 * weight is re-quantised (weight sync), not per call.
 *
 * Fast mode, the block-scaled product: the codes themselves are multiplied, one block
 * of 128 along C at a time, and each block's fp32 partial sum is scaled by its
 * activation and weight scales as it is added to the output. On a CPU with bf16 dot
 * products this is kernels/cpu/fp8_bf16dot.c. The fallback here does the same in fp32
 * on op_gemm: per block a [rows, 128] x [128, OC] product of the decoded codes (rows
 * in chunks, so a chunk's partial sums stay in cache), then the scaling. */
#include "kernels/cpu/fp8_bf16dot.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows per chunk of the fast mode's fallback. */
#define ROW_CHUNK 256

static void check_shape(const fp8_matrix *w, int N, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_fp8_linear_fwd: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->q ? "" : " (not quantised)", OC, C);
        abort();
    }
}

/* out (KB, R, 128) = the codes q[R, C] decoded, zeros past C. */
static void codes_by_block(float *out, const uint8_t *q, int R, int C, fp8_format f)
{
    float lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = fp8_decode((uint8_t)c, f);
    int KB = (C + FP8_BLOCK - 1) / FP8_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)R * C > 65536)
    for (int r = 0; r < R; r++)
        for (int j = 0; j < KB; j++) {
            float *o = out + ((size_t)j * R + r) * FP8_BLOCK;
            int k0 = j * FP8_BLOCK, n = C - k0 < FP8_BLOCK ? C - k0 : FP8_BLOCK;
            for (int k = 0; k < n; k++)
                o[k] = lut[q[(size_t)r * C + k0 + k]];
            memset(o + n, 0, (size_t)(FP8_BLOCK - n) * sizeof *o);
        }
}

/* The scale of matrix m covering row r and the 128-block j of its columns (the
 * scaling modes' blocks are 128 or all columns wide, so one scale covers the block). */
static inline float block_scale(const fp8_matrix *m, int r, int j)
{
    return m->scale[(size_t)(r / m->block_rows) * m->scale_cols +
                    (size_t)j * FP8_BLOCK / m->block_cols];
}

/* out[r0:r0+rows, :] (+)= (sa[r, j] * sw[oc, j]) * P[rows, OC]: the first block sets,
 * the others accumulate. */
static void scale_add(float *out, const float *P, const fp8_matrix *a, const fp8_matrix *w,
                      int r0, int rows, int OC, int j)
{
#pragma omp parallel for schedule(static) if ((size_t)rows * OC > 65536)
    for (int r = 0; r < rows; r++) {
        float sa = block_scale(a, r0 + r, j);
        float *o = out + (size_t)(r0 + r) * OC;
        const float *p = P + (size_t)r * OC;
        for (int c0 = 0; c0 < OC; c0 += w->block_rows) {
            int c1 = c0 + w->block_rows < OC ? c0 + w->block_rows : OC;
            float s = sa * block_scale(w, c0, j);
            if (j == 0)
                for (int c = c0; c < c1; c++)
                    o[c] = s * p[c];
            else
                for (int c = c0; c < c1; c++)
                    o[c] += s * p[c];
        }
    }
}

/* The fast mode's fallback: fp32 products of the same decoded codes. */
static void fp8_linear_fast_fp32(float *out, const fp8_matrix *a, const fp8_matrix *w, int N,
                                 int C, int OC)
{
    int KB = (C + FP8_BLOCK - 1) / FP8_BLOCK;
    float *a32 = dllm_malloc((size_t)KB * N * FP8_BLOCK * sizeof(float));  // (KB, N, 128)
    float *w32 = dllm_malloc((size_t)KB * OC * FP8_BLOCK * sizeof(float)); // (KB, OC, 128)
    codes_by_block(a32, a->q, N, C, w->format);
    codes_by_block(w32, w->q, OC, C, w->format);
    int rc = ROW_CHUNK < N ? ROW_CHUNK : N;
    float *P = dllm_malloc((size_t)rc * OC * sizeof(float)); // (rows, OC)
    for (int r0 = 0; r0 < N; r0 += rc) {
        int rows = N - r0 < rc ? N - r0 : rc;
        for (int j = 0; j < KB; j++) {
            op_gemm(false, true, rows, OC, FP8_BLOCK, 1.0f,
                    a32 + ((size_t)j * N + r0) * FP8_BLOCK, w32 + (size_t)j * OC * FP8_BLOCK,
                    0.0f, P);
            scale_add(out, P, a, w, r0, rows, OC, j);
        }
    }
    free(P);
    free(a32);
    free(w32);
}

static void fp8_linear_fast(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    if (C <= 0) {
        memset(out, 0, (size_t)N * OC * sizeof *out);
        return;
    }
    if (fp8_bf16dot_usable()) {
        fp8_bf16dot_linear(out, inp, w, N, C, OC);
        return;
    }
    fp8_matrix a = {0};
    dllm_err err = {0};
    if (fp8_quantise_act(&a, inp, N, C, w->format, w->act_scaling, w->pow2_scale, &err)) {
        fprintf(stderr, "op_fp8_linear_fwd: %s\n", err.msg);
        abort();
    }
    fp8_linear_fast_fp32(out, &a, w, N, C, OC);
    fp8_matrix_free(&a);
}

const char *fp8_fast_path(void)
{
    return fp8_bf16dot_usable() ? "bf16-dot" : "fp32";
}

void op_fp8_linears_fwd(int nw, float *const out[], const float *inp, fp8_matrix *const w[],
                        int N, int C, const int OC[])
{
    bool shared = nw > 0 && N > 0 && C > 0 && fp8_bf16dot_usable();
    for (int i = 0; i < nw && shared; i++) {
        check_shape(w[i], N, C, OC[i]);
        shared = w[i]->fast && w[i]->format == w[0]->format &&
                 w[i]->act_scaling == w[0]->act_scaling && w[i]->pow2_scale == w[0]->pow2_scale;
    }
    if (shared) {
        fp8_bf16dot_linears(nw, out, inp, w, N, C, OC);
        return;
    }
    for (int i = 0; i < nw; i++)
        op_fp8_linear_fwd(out[i], inp, w[i], N, C, OC[i]);
}

void op_fp8_linear_fwd(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    check_shape(w, N, C, OC);
    if (N <= 0)
        return;
    if (w->fast) {
        fp8_linear_fast(out, inp, w, N, C, OC);
        return;
    }
    fp8_matrix_cache_dequant(w);
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    fp8_quant_dequant(a, inp, N, C, w->format, w->act_scaling, w->pow2_scale);
    /* through the op table's GEMM: one thread pool (OpenMP), as every other product */
    op_gemm(false, true, N, OC, C, 1.0f, a, w->deq, 0.0f, out);
    free(a);
}
