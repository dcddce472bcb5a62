/* nccl_api.h: NCCL for the CUDA backend's multi-rank code: the real <nccl.h> in a CUDA
 * build, the stand-in over MPI (kernels/cuda_emu/nccl_emu.h) in the emulation build. */
#ifndef DLLM_NCCL_API_H
#define DLLM_NCCL_API_H

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/nccl_emu.h"
#else
#include <nccl.h>
#endif

#endif
