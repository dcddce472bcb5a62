/* emu_hooks.h: what a test may ask the CUDA emulation (kernels/cuda_emu/), from C or
 * C++. Only in a build configured with --enable-cuda-emulation (DLLM_CUDA_EMULATION). */
#ifndef DLLM_CUDA_EMU_HOOKS_H
#define DLLM_CUDA_EMU_HOOKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    unsigned long long launches;      /* kernels run */
    unsigned long long blocks;        /* blocks run */
    unsigned long long device_allocs; /* cudaMalloc and cudaMallocAsync calls */
    unsigned long long async_allocs;  /* cudaMallocAsync calls alone */
    size_t bytes_in_use, peak_bytes;  /* device memory, without guard zones */
    unsigned long long heuristics;    /* cublasLtMatmulAlgoGetHeuristic calls */
    unsigned long long matmuls;       /* cublasLtMatmul calls */
} dllm_emu_stats;

/* Counters since the start or the last reset. */
void dllm_emu_get_stats(dllm_emu_stats *s);
void dllm_emu_reset_stats(void);
/* The largest grid (blocks) among the launches since the last reset whose kernel name
 * contains sub; 0 when none ran. */
unsigned long long dllm_emu_max_blocks(const char *sub);
/* "in-order", "reverse" or "random:SEED" (DLLM_EMU_SCHEDULE). */
const char *dllm_emu_schedule_name(void);

#ifdef __cplusplus
}
#endif
#endif
