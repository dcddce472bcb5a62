/* dnnl_gemm.h: the oneDNN GEMMs the CPU ops may use (kernels/cpu/dnnl_gemm.c), and the
 * CPU's bf16 dot-product capability. In a build without oneDNN every call reports
 * "unavailable" and the callers take their OpenBLAS path. */
#ifndef DLLM_CPU_DNNL_GEMM_H
#define DLLM_CPU_DNNL_GEMM_H

#include <stdbool.h>
#include <stdint.h>

/* True when the build has oneDNN. */
bool dnnl_gemm_built(void);

/* True when bf16 products may run on bf16 dot products: the CPU has AVX512-BF16
 * (vdpbf16ps) and DLLM_BF16_GEMM is not "fp32" (which forces the fp32 fallbacks, e.g.
 * to test them on a CPU that has the instructions). A DLLM_BF16_GEMM other than
 * "auto" or "fp32" is bad input: message, exit 2. */
bool cpu_bf16_dot_usable(void);
/* cpu_bf16_dot_usable() and oneDNN built: the bf16 linear runs on oneDNN. */
bool dnnl_bf16_usable(void);
/* oneDNN dispatches to AMX tiles (its effective ISA, under the caps of cpu_isa.h and
 * DLLM_AMX=off). */
bool dnnl_amx(void);

/* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major, leading dimensions given, on
 * oneDNN's fp32 GEMM, which runs on the calling thread only (one kernel call per
 * element's whole K sum, as the OpenBLAS path). Returns 0, or -1 if unavailable or
 * oneDNN failed. */
int dnnl_gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* C[M,N] (fp32, row stride ldc) = A[M,K] @ B[N,K]^T with A, B bf16 (row strides lda,
 * ldb), products exact and sums in fp32 (oneDNN matmul, its OpenMP threads). C is
 * overwritten. Primitives are cached per shape. Returns 0, or -1 if unavailable or
 * oneDNN failed. */
int dnnl_gemm_bf16_nt(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      int M, int N, int K);

/* C[M,N] (int32, row stride ldc) = A[M,K] @ B[N,K]^T with A u8 and B s8 (row strides lda,
 * ldb), summed in int32 (oneDNN matmul, its OpenMP threads). Exact only where no two
 * adjacent products sum past int16 (vpmaddubsw saturates on CPUs without VNNI): the
 * caller keeps A <= 127 (kernels/int8.h). Returns 0, or -1 if unavailable or oneDNN
 * failed. */
int dnnl_gemm_u8s8_nt(int32_t *C, int ldc, const uint8_t *A, int lda, const int8_t *B, int ldb,
                      int M, int N, int K);

#endif
