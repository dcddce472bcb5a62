/* blas_threads.h: keeping OpenBLAS single-threaded while the CPU backend splits a
 * product over its own OpenMP threads (kernels/cpu/gemm.c, attention.c). */
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

#endif
