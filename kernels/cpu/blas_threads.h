/* blas_threads.h: keeping OpenBLAS single-threaded while the CPU backend splits a
 * product over its own OpenMP threads (kernels/cpu/gemm.c, attention.c), and the
 * single-threaded product those ops share. */
#ifndef DLLM_CPU_BLAS_THREADS_H
#define DLLM_CPU_BLAS_THREADS_H

/* OpenBLAS built on pthreads does not know about our OpenMP threads: GEMMs issued
 * from inside a parallel region would each fan out to its own thread pool and
 * oversubscribe the cores, so it is held at one thread for the duration of an op.
 * The OpenMP build of OpenBLAS already goes serial inside a parallel region (and
 * setting its count would set OpenMP's), so it is left alone; inside a caller's
 * parallel region nothing is touched (threads would race on the setting).
 * Returns the count for blas_release to restore, or 0 if nothing was changed. */
int blas_hold(void);
void blas_release(int saved);

/* One row-major single-threaded sgemm, C = alpha op(A) op(B) + beta C with leading
 * dimensions, on the library op_gemm_library() picks (kernels/ops.h): OpenBLAS's
 * cblas_sgemm, or oneDNN's sgemm (which falls back to OpenBLAS if it refuses the
 * call). For the products inside other ops (attention), so that they follow the
 * same choice as op_gemm; on OpenBLAS it is the very cblas call. */
#include <stdbool.h>
void gemm_serial(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
