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

void op_gemm_bf16(bool tA, bool tB, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0 || K <= 0) {
        op_gemm(tA, tB, M, N, K, alpha, A, B, beta, C);
        return;
    }
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    float *a = dllm_malloc((na + nb) * sizeof(float)), *b = a + na;
    op_round_bf16_copy(a, A, na);
    op_round_bf16_copy(b, B, nb);
    op_gemm(tA, tB, M, N, K, alpha, a, b, beta, C);
    free(a);
}

const char *op_bf16_gemm_path(void)
{
    if (!dnnl_bf16_usable())
        return "fp32";
    return dnnl_amx() ? "dnnl-bf16-amx" : "dnnl-bf16";
}

static void check_linear(const char *who, const bf16_matrix *w, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "%s: weight is [%d, %d]%s, call expects [%d, %d]\n", who, w->rows,
                w->cols, w->w ? "" : " (not packed)", OC, C);
        abort();
    }
}

/* w's fp32 values, widened once (the fallback's operand) */
static const float *widened(bf16_matrix *w)
{
    if (!w->wf32_valid) {
        if (!w->wf32)
            w->wf32 = dllm_malloc((size_t)w->rows * w->cols * sizeof(float));
        op_bf16_to_f32_array(w->wf32, w->w, (size_t)w->rows * w->cols);
        w->wf32_valid = true;
    }
    return w->wf32;
}

void op_bf16_linears_fwd(int nw, float *const out[], const float *inp, bf16_matrix *const w[],
                         int N, int C, const int OC[])
{
    for (int i = 0; i < nw; i++)
        check_linear("op_bf16_linear_fwd", w[i], C, OC[i]);
    if (N <= 0 || nw <= 0)
        return;
    int done = 0;
    if (dnnl_bf16_usable()) {
        uint16_t *a = dllm_malloc((size_t)N * C * sizeof(uint16_t)); // (N, C)
        op_f32_to_bf16_array(a, inp, (size_t)N * C);
        while (done < nw && dnnl_gemm_bf16_nt(out[done], OC[done], a, C, w[done]->w, C, N,
                                              OC[done], C) == 0)
            done++;
        free(a);
        if (done == nw)
            return;
        /* oneDNN refused a shape: the fallback computes the same products */
    }
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    op_round_bf16_copy(a, inp, (size_t)N * C);
    for (int i = done; i < nw; i++)
        op_linear_fwd(out[i], a, widened(w[i]), N, C, OC[i]);
    free(a);
}

void op_bf16_linear_fwd(float *out, const float *inp, bf16_matrix *w, int N, int C, int OC)
{
    op_bf16_linears_fwd(1, &out, inp, &w, N, C, &OC);
}

void op_bf16_linear_bwd_x(float *dinp, const float *dout, bf16_matrix *w, int N, int C, int OC)
{
    check_linear("op_bf16_linear_bwd_x", w, C, OC);
    if (N <= 0)
        return;
    op_linear_bwd(dinp, NULL, dout, NULL, widened(w), N, C, OC);
}
