/* cuda_device.h: what the CUDA backend can report about the machine.
 * Built without CUDA, every function reports that plainly (count 0). */
#ifndef DLLM_CUDA_DEVICE_H
#define DLLM_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when none or when built without CUDA.
 * why (may be NULL) receives a sentence saying why there are none. */
int dllm_cuda_device_count(char *why, size_t why_len);
/* One line describing device i: name, compute capability, memory. */
int dllm_cuda_device_describe(int i, char *out, size_t out_len);

#ifdef __cplusplus
}
#endif
#endif
