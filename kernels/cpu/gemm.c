/* gemm.c: dense matrix products on the CPU through OpenBLAS.
 *
 * op_gemm:       C[M,N] = alpha * op(A) @ op(B) + beta * C (row-major).
 * op_linear_fwd: out[N,OC] = inp[N,C] @ w[OC,C]^T (torch nn.Linear, no bias).
 * op_linear_bwd: dinp[N,C] += dout @ w;  dw[OC,C] += dout^T @ inp.
 * The backward accumulates by running the GEMM with beta = 1. */
#include "kernels/ops.h"

#include <cblas.h>

void op_gemm(bool transA, bool transB, int M, int N, int K, float alpha,
             const float *A, const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        /* empty product: only the beta term is left (BLAS may reject K = 0) */
        for (size_t i = 0; i < (size_t)M * N; i++)
            C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    int lda = transA ? M : K; /* A stored [M,K] or [K,M] */
    int ldb = transB ? K : N; /* B stored [K,N] or [N,K] */
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb,
                beta, C, N);
}

void op_linear_fwd(float *out, const float *inp, const float *w, int N, int C, int OC)
{
    // out (N, OC), inp (N, C), w (OC, C)
    op_gemm(false, true, N, OC, C, 1.0f, inp, w, 0.0f, out);
}

void op_linear_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                   const float *w, int N, int C, int OC)
{
    // dinp (N, C), dw (OC, C), dout (N, OC)
    if (dinp)
        op_gemm(false, false, N, C, OC, 1.0f, dout, w, 1.0f, dinp);
    if (dw)
        op_gemm(true, false, OC, C, N, 1.0f, dout, inp, 1.0f, dw);
}
