/* cuda_selftest.h: what `dllm-rl selftest --device cuda` asks the CUDA side
 * (kernels/cuda/selftest_probe.cu): the device and the code this binary carries for it,
 * the runtime and cuBLASLt behaviour the project relies on (the probes of
 * kernels/cuda_emu/PROBES.md) as rows, and GEMM timing with CUDA events.
 * Only in builds with the CUDA backend (nvcc or the emulation): include under HAVE_CUDA. */
#ifndef DLLM_CUDA_SELFTEST_H
#define DLLM_CUDA_SELFTEST_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/base.h" /* C headers: their declarations have C linkage */
#include "kernels/fp8.h"

typedef struct {
    char name[256];
    int cc_major, cc_minor, sms;
    int driver_version, runtime_version; /* 12040 = 12.4; 0 when emulated */
    double mem_total_gib, mem_free_gib;
    int binary_version, ptx_version; /* cudaFuncGetAttributes of a kernel: 90 = sm_90; 0 if none */
    bool emulated;                   /* the host emulation (kernels/cuda_emu), not a GPU */
    char kernel_error[160];          /* why no kernel of this binary loads ("" when one does) */
} dllm_cuda_device_info;

/* Device 0. Returns 0, or -1 with why when the device cannot be queried. */
int dllm_cuda_device_info_get(dllm_cuda_device_info *d, char *why, size_t why_len);

enum { DLLM_PROBE_PASS = 0, DLLM_PROBE_FAIL = 1, DLLM_PROBE_SKIP = 2 };
/* One row per group of checks: its name, status, and what was checked (PASS), the first
 * failure (FAIL) or why it did not run (SKIP). */
typedef void (*dllm_cuda_probe_row)(void *ctx, const char *name, int status, const char *detail);
/* Runs every group, one call of row each; returns the number of failed checks. Under
 * emulation it also checks that faults a GPU would hide are reported; that group resets
 * the device (every allocation of the process is released), so run it before anything
 * else allocates. */
int dllm_cuda_selftest_rows(dllm_cuda_probe_row row, void *ctx);
/* The same, the failures as lines into report. Returns the number of failed checks. */
int dllm_cuda_selftest(char *report, size_t report_len);

/* Median milliseconds over reps timed runs (after one warm-up) of out[N,OC] = act[N,C] @
 * w[OC,C]^T on random data, bf16 out:
 *  bf16: bf16 act and w through cuBLASLt (dllm_cuda_gemm_bf16);
 *  fp8:  E4M3 codes at scaling (block: 128x128 weights, 1x128 activations; tensor),
 *        dllm_cuda_fp8_linear; *quant_ms (may be NULL) the activation's quantisation from
 *        bf16, timed apart, as a rollout step pays it before every linear.
 * Returns 0, or an error (shape refused, out of memory) in err. */
int dllm_cuda_time_bf16_linear(int N, int C, int OC, int reps, double *ms, dllm_err *err);
int dllm_cuda_time_fp8_linear(int N, int C, int OC, fp8_scaling scaling, int reps, double *gemm_ms,
                              double *quant_ms, dllm_err *err);

#ifdef __cplusplus
}
#endif
#endif
