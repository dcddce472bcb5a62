/* fp8_linear.c: the W8A8 linear layer of the FP8 rollout copy, simulated on the CPU.
 *
 *   out[N, OC] = dequant(quant(inp))[N, C] @ dequant(w)[OC, C]^T
 *
 * Activations are quantised at run time per w->act_scaling (1 x 128 groups along C by
 * default) in the weight's format, then both operands are dequantised and multiplied
 * in fp32 (OpenBLAS sgemm). The quantisation is bit-exact, so this is the FP8 GEMM up
 * to accumulation order. The dequantised weight is cached in w: it changes only when
 * the weight is re-quantised (weight sync), not per call. */
#include "kernels/fp8.h"
#include "kernels/ops.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

void op_fp8_linear_fwd(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_fp8_linear_fwd: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->q ? "" : " (not quantised)", OC, C);
        abort();
    }
    if (N <= 0)
        return;
    fp8_matrix_cache_dequant(w);
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    fp8_quant_dequant(a, inp, N, C, w->format, w->act_scaling, w->pow2_scale);
    /* through the op table's GEMM: one thread pool (OpenMP), as every other product */
    op_gemm(false, true, N, OC, C, 1.0f, a, w->deq, 0.0f, out);
    free(a);
}
