/* attention_path.h: the CUDA backend's choice of attention kernels.
 *
 * Attention runs on tensor cores (kernels/cuda/attention_tc.cu: BF16 operands, fp32
 * softmax statistics and accumulation) for head dims up to DLLM_CUDA_ATTENTION_TC_MAX_HD,
 * and on the fp32 CUDA-core kernels of kernels/cuda/attention.cu above it or when the
 * environment says DLLM_CUDA_ATTENTION=fp32 (the reference: fp32 end to end, as close to
 * the CPU as the summation order allows). DLLM_CUDA_ATTENTION=tc (or unset) is the
 * default; any other value exits with status 2. Read at every call, so a forward and
 * its backward agree unless the environment changes between them (their lse has one
 * meaning either way). */
#ifndef DLLM_ATTENTION_PATH_H
#define DLLM_ATTENTION_PATH_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DLLM_CUDA_ATTENTION_TC_MAX_HD = 128 };

/* True when attention with this head dim runs on the tensor-core kernels. */
bool dllm_cuda_attention_tc(int head_dim);

#ifdef __cplusplus
}
#endif

#endif
