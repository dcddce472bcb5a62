/* check.cuh: error macros that carry the place. Each reports file:line and the
 * library's own error string, then aborts: a CUDA error mid-run is an internal
 * failure (exit status 1), never silently ignored. */
#ifndef DLLM_CUDA_CHECK_CUH
#define DLLM_CUDA_CHECK_CUH

#include <cstdio>
#include <cstdlib>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cublasLt.h>
#else /* the emulation build (kernels/cuda_emu/): the same API without CUDA installed */
#include "kernels/cuda_emu/cublaslt_emu.h"
#include "kernels/cuda_emu/cuda_emu.h"
#endif

static inline void cuda_check_(cudaError_t e, const char *file, int line)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "dllm-rl: CUDA error at %s:%d: %s\n", file, line, cudaGetErrorString(e));
        exit(1);
    }
}
#define cudaCheck(x) cuda_check_((x), __FILE__, __LINE__)

static inline void cublas_check_(cublasStatus_t s, const char *file, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "dllm-rl: cuBLAS error at %s:%d: %s\n", file, line,
                cublasLtGetStatusString(s));
        exit(1);
    }
}
#define cublasCheck(x) cublas_check_((x), __FILE__, __LINE__)

#endif
