/* bf16_linear.c: the bf16 linear layer (kernels/ops.h), for the bf16 rollout copy.
 *
 * Fast path: activations rounded to bf16 once per call, then oneDNN's bf16 matmul
 * (AVX512-BF16 dot products, fp32 accumulation) against the packed weight. Fallback:
 * the same bf16 values widened to fp32 and op_gemm, so the products are the same
 * exact fp32 numbers and only the order of the fp32 sums differs between the two. */
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/base.h"
#include "kernels/ops.h"

#include <stdio.h>
#include <stdlib.h>

void bf16_matrix_pack(bf16_matrix *m, const float *w, int OC, int C)
{
    if (m->w && (m->rows != OC || m->cols != C)) {
        free(m->w);
        free(m->wf32);
        m->w = NULL;
        m->wf32 = NULL;
    }
    if (!m->w)
        m->w = dllm_malloc((size_t)OC * C * sizeof(uint16_t));
    m->rows = OC;
    m->cols = C;
    op_f32_to_bf16_array(m->w, w, (size_t)OC * C);
    m->wf32_valid = false;
}

void bf16_matrix_free(bf16_matrix *m)
{
    free(m->w);
    free(m->wf32);
    m->w = NULL;
    m->wf32 = NULL;
    m->rows = m->cols = 0;
    m->wf32_valid = false;
}

const char *op_bf16_gemm_path(void)
{
    return dnnl_bf16_usable() ? "dnnl-bf16" : "fp32";
}

void op_bf16_linear_fwd(float *out, const float *inp, bf16_matrix *w, int N, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_bf16_linear_fwd: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->w ? "" : " (not packed)", OC, C);
        abort();
    }
    if (N <= 0)
        return;
    if (dnnl_bf16_usable()) {
        uint16_t *a = dllm_malloc((size_t)N * C * sizeof(uint16_t)); // (N, C)
        op_f32_to_bf16_array(a, inp, (size_t)N * C);
        int rc = dnnl_gemm_bf16_nt(out, OC, a, C, w->w, C, N, OC, C);
        free(a);
        if (rc == 0)
            return;
        /* oneDNN refused the shape: the fallback computes the same products */
    }
    if (!w->wf32_valid) {
        if (!w->wf32)
            w->wf32 = dllm_malloc((size_t)OC * C * sizeof(float));
        op_bf16_to_f32_array(w->wf32, w->w, (size_t)OC * C);
        w->wf32_valid = true;
    }
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    for (size_t i = 0; i < (size_t)N * C; i++)
        a[i] = inp[i];
    op_round_bf16(a, (size_t)N * C);
    op_linear_fwd(out, a, w->wf32, N, C, OC);
    free(a);
}

void op_bf16_linear_bwd_x(float *dinp, const float *dout, bf16_matrix *w, int N, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_bf16_linear_bwd_x: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->w ? "" : " (not packed)", OC, C);
        abort();
    }
    if (N <= 0)
        return;
    if (!w->wf32_valid) {
        if (!w->wf32)
            w->wf32 = dllm_malloc((size_t)OC * C * sizeof(float));
        op_bf16_to_f32_array(w->wf32, w->w, (size_t)OC * C);
        w->wf32_valid = true;
    }
    op_linear_bwd(dinp, NULL, dout, NULL, w->wf32, N, C, OC);
}
