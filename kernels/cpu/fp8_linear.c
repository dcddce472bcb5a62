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
 * products this is kernels/cpu/fp8_bf16dot.c (on AMX tiles where the CPU has them). Without them the block-scaled order
 * buys nothing: C/128 products of depth 128 and a scaling pass each ran at about 0.6x
 * of the fp32 linear on an AVX2 CPU. So there the fast mode computes exactly as the
 * exact mode (the same codes and scales, one fp32 GEMM over the cached dequantised
 * weight): bit for bit `fp8-exact`, at about the fp32 linear's speed. */
#include "kernels/cpu/fp8_bf16dot.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_shape(const fp8_matrix *w, int N, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_fp8_linear_fwd: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->q ? "" : " (not quantised)", OC, C);
        abort();
    }
}

/* The exact simulation: activations quantised and dequantised, one fp32 GEMM against
 * the dequantised weight (cached until the next re-quantisation). */
static void fp8_linear_exact(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    fp8_matrix_cache_dequant(w);
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    fp8_quant_dequant(a, inp, N, C, w->format, w->act_scaling, w->pow2_scale);
    /* through the op table's GEMM: one thread pool (OpenMP), as every other product */
    op_gemm(false, true, N, OC, C, 1.0f, a, w->deq, 0.0f, out);
    free(a);
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
    fp8_linear_exact(out, inp, w, N, C, OC);
}

const char *fp8_fast_path(void)
{
    return fp8_bf16dot_amx() ? "amx-bf16" : fp8_bf16dot_usable() ? "bf16-dot" : "exact-fp32";
}

bool fp8_fast_blocks(void) { return fp8_bf16dot_usable(); }

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
    /* Every other route of these weights (exact, or fast without bf16 dot products) is
     * the exact simulation: one quantised copy of the shared input serves them all. */
    bool exact = nw > 1 && N > 0 && C > 0 && !fp8_bf16dot_usable();
    for (int i = 0; i < nw && exact; i++) {
        check_shape(w[i], N, C, OC[i]);
        exact = w[i]->format == w[0]->format && w[i]->act_scaling == w[0]->act_scaling &&
                w[i]->pow2_scale == w[0]->pow2_scale;
    }
    if (exact) {
        float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
        fp8_quant_dequant(a, inp, N, C, w[0]->format, w[0]->act_scaling, w[0]->pow2_scale);
        for (int i = 0; i < nw; i++) {
            fp8_matrix_cache_dequant(w[i]);
            op_gemm(false, true, N, OC[i], C, 1.0f, a, w[i]->deq, 0.0f, out[i]);
        }
        free(a);
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
    if (w->fast)
        fp8_linear_fast(out, inp, w, N, C, OC);
    else
        fp8_linear_exact(out, inp, w, N, C, OC);
}
