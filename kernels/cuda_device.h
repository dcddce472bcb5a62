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

/* Device memory for callers written in C (tests, the trainer). Failures are internal
 * errors: they print file:line and the CUDA error string, then exit(1). Built without
 * CUDA these say so and exit(1) too; check dllm_cuda_device_count first. */
void *dllm_cuda_malloc(size_t bytes);
void dllm_cuda_free(void *p);
void dllm_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
void dllm_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
void dllm_cuda_memset(void *p, int byte, size_t bytes);
/* Waits for all work on the device and reports any asynchronous error. */
void dllm_cuda_synchronize(void);
/* Device i's identity, the same in every process that sees that device: its UUID as
 * "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" in uuid (>= 41 bytes) and its PCI address
 * as "dddd:bb:dd" in pci (>= 16 bytes). 0, or -1 with the CUDA error string in uuid. */
int dllm_cuda_device_identity(int i, char *uuid, size_t uuid_len, char *pci, size_t pci_len);
/* Has all work issued to the device's default stream completed? 1 yes, 0 not yet, -1 a
 * CUDA error (its string in why). Does not wait. */
int dllm_cuda_idle(char *why, size_t why_len);
/* INT8 tensor-core GEMMs on the current device (compute capability 8.0 or later)? 1, or
 * 0 with the reason in why. Built without CUDA: 0. */
int dllm_cuda_int8_available(char *why, size_t why_len);
/* FP8 tensor-core GEMMs on the current device (compute capability 8.9 or later: Ada,
 * Hopper)? 1, or 0 with the reason in why. Built without CUDA: 0. */
int dllm_cuda_fp8_available(char *why, size_t why_len);
/* The device layout of an INT8 weight of OC x C at scaling s (0 channel, 1 block,
 * kernels/int8.h): rows allocated (OC rounded up to 4) and the row stride of the codes
 * (block: the k-blocks' 128 each; channel: C rounded up to 4), padded with zero codes,
 * as cuBLASLt's INT8 GEMM needs (kernels/cuda/gemm_int8.cu). Arithmetic (kernels/backend.c):
 * in every build. */
void dllm_cuda_int8_weight_layout(int OC, int C, int s, int *rows, int *ldq);
/* The scratch floats of the gated delta rule's backward (kernels/cuda/gated_delta.cu): the
 * states at segment boundaries (every DLLM_GD_RULE_SEG tokens) and one segment's, for each
 * of the B Hv heads' Dk x Dv states, and the value heads' dq, dk terms [B, T, Hv, Dk] each.
 * Arithmetic (kernels/backend.c): in every build, for the plan too. */
#define DLLM_GD_RULE_SEG 64
size_t dllm_cuda_gd_rule_bwd_scratch_floats(int B, int T, int Hk, int Dk, int Hv, int Dv);
/* Makes device i current for this process (before anything is allocated there: the data
 * parallel ranks pick theirs). 0, or -1 with the CUDA error string in why. */
int dllm_cuda_set_device(int i, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
