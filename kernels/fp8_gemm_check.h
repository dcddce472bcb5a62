/* fp8_gemm_check.h: the device FP8 GEMM (dllm_cuda_fp8_linear) against the CPU's exact
 * simulation of it, for tests/test_backend_ops and `dllm-rl selftest --device cuda`.
 * Only in builds with the CUDA backend: include under HAVE_CUDA. */
#ifndef DLLM_FP8_GEMM_CHECK_H
#define DLLM_FP8_GEMM_CHECK_H

#include "kernels/base.h"
#include "kernels/fp8.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool codes_equal; /* the device's weight codes are the CPU's, byte for byte */
    bool guards_ok;   /* no device buffer was written past its end */
    double nmse_f32;  /* fp32 output against the reference */
    double nmse_bf16; /* bf16 output against the reference */
    double tol;       /* FP8_GEMM_NMSE(C): the bound of nmse_f32 (bf16: + 1e-5) */
} dllm_fp8_parity;

/* out[N,OC] = act[N,C] @ w[OC,C]^T on random data (seeded; activations with outliers, so
 * groups get different scales): weight and activations quantised on the device in the
 * cuBLASLt scale layouts (weight scaling ws: FP8_SCALE_BLOCK, activations then in 1x128
 * groups, or FP8_SCALE_TENSOR), multiplied by dllm_cuda_fp8_linear into fp32 and bf16;
 * the reference is the CPU's: its own codes dequantised (fp8_quant_dequant, the weight's
 * fp8_matrix), multiplied exactly with fp32 sums (op_gemm). Returns 0 with r filled, or
 * the GEMM's error (a refused shape or format pair) in err. */
int dllm_fp8_linear_parity(fp8_scaling ws, fp8_format wf, fp8_format af, int N, int C, int OC,
                           uint64_t seed, dllm_fp8_parity *r, dllm_err *err);

#endif
