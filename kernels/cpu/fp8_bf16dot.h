/* fp8_bf16dot.h: the fast FP8 W8A8 product on AVX512-BF16 dot products
 * (kernels/cpu/fp8_bf16dot.c), used by op_fp8_linear_fwd's fast mode. */
#ifndef DLLM_CPU_FP8_BF16DOT_H
#define DLLM_CPU_FP8_BF16DOT_H

#include "kernels/fp8.h"

/* True when the CPU has vdpbf16ps and DLLM_BF16_GEMM is not "fp32" (kernels/cpu/
 * dnnl_gemm.h): the kernel below may run. */
bool fp8_bf16dot_usable(void);
/* fp8_bf16dot_usable() and the CPU's AMX tiles (cpu_isa.h CPU_AMXBF16): the kernel runs
 * its k-blocks on tile dot products. */
bool fp8_bf16dot_amx(void);

/* out[N, OC] = sum_j (sa[n, j] * sw[oc, j]) * (qa[n, block j] . qw[oc, block j]) over
 * the 128-wide blocks j of C: inp[N, C] quantised per w->act_scaling (group, channel or
 * tensor) in w's format (qa its decoded values, sa its scales, bit for bit as
 * fp8_quant_dequant rounds them), w the weight (block, channel or tensor). Packs w's
 * codes into w->qbf on first use. Call only when fp8_bf16dot_usable(). Each output is
 * summed by one thread in a fixed order: results depend neither on the thread count
 * nor on the other rows. */
void fp8_bf16dot_linear(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC);
/* The same for nw weights of one input, which is quantised once: w[i] (OC[i], C), all of
 * w[0]'s format, activation scaling and pow2_scale; out[i] (N, OC[i]) bit for bit as
 * fp8_bf16dot_linear(out[i], inp, w[i], ...). */
void fp8_bf16dot_linears(int nw, float *const out[], const float *inp, fp8_matrix *const w[],
                         int N, int C, const int OC[]);

#endif
