/* emu_internal.h: what the files of the CUDA emulation share (not for kernels). */
#ifndef DLLM_CUDA_EMU_INTERNAL_H
#define DLLM_CUDA_EMU_INTERNAL_H

#include "kernels/cuda_emu/cuda_emu.h"

namespace dllm_emu {
/* fiber.cc: runs a checked launch; false with msg when a block failed. */
bool execute_grid(const char *name, dim3 grid, dim3 block, size_t smem, thread_body body,
                  void *ctx, char *msg, size_t msg_len);
const char *schedule_name(void);
/* runtime.cc: is [p, p + bytes) inside one live device allocation? */
bool is_device_range(const void *p, size_t bytes);
/* runtime.cc: the cuBLASLt stand-in's calls, for dllm_emu_stats */
void count_heuristic(void);
void count_matmul(void);
/* runtime.cc: work that never completes is queued (the NCCL stand-in's collective whose
 * peer is gone): streams stay busy until stall(false). */
void stall(bool on);
} // namespace dllm_emu

#endif
