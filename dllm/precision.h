/* precision.h: the trainer's numerics and the rollout copy (docs/METHOD.md §5, §6),
 * shared by every architecture of the transformer core (dllm/transformer.h).
 *
 * Trainer: fp32 (default), or bf16 -- every weight the trainer forward reads is
 * a bf16-rounded copy of the fp32 master weights (refreshed by
 * dllm_tf_rollout_sync), every linear input (the head's too) is rounded to bf16
 * and saved rounded for backward, products accumulate in fp32; the backward
 * is straight-through (rounding has derivative 1) and its gradients go to the
 * fp32 master weights. LoRA A/B stay fp32 on top.
 *
 * Rollout copy, a forward-only model built by dllm_tf_rollout_sync from the
 * current master weights with LoRA merged (W + (alpha/r) B A, in fp32):
 *   trainer    no copy: the rollout forward is the trainer forward, bit for bit
 *              (the reference arm, w = 1 exactly);
 *   bf16       every weight rounded to bf16, every linear input rounded to bf16,
 *              products exact, sums in fp32. The seven layer linears and the
 *              head are packed as bf16 at the sync and multiplied by the
 *              backend's bf16 linear (CPU: op_bf16_linear_fwd, oneDNN's bf16
 *              matmul where the CPU has AVX512-BF16); only the order of the
 *              fp32 sums differs from the exact simulation (the rounded values
 *              widened to fp32, op_gemm), which it is bit for bit where the CPU
 *              lacks bf16 dot products or DLLM_BF16_GEMM=fp32 is set;
 *   fp8        the seven layer linears quantised (kernels/fp8.h) in fp8_format
 *              with weight scaling block (128x128) | channel | tensor,
 *              activations quantised at run time to match: block -> 1x128
 *              groups, channel -> per token, tensor -> per tensor; the product
 *              in the FP8 GEMM's fast mode (fp8_matrix.fast): the codes
 *              multiplied exactly on bf16 dot products and summed in fp32 per
 *              128-wide k-block, each block's sum times its two scales added to
 *              the output in fp32, as an FP8 tensor core does. The quantised
 *              values are those of fp8-exact bit for bit; the products differ
 *              from it by fp32 rounding only (|fast - exact| <= (2K + 8) 2^-24
 *              sum_k |a_k w_k|). On a CPU without bf16 dot products it computes
 *              as fp8-exact, bit for bit (dllm_rollout_cpu_product). Embeddings, norms and biases are bf16-rounded
 *              fp32 values; the head is the bf16 copy's (bf16 linear);
 *   fp8-exact  the same quantisation, the product simulated exactly: both
 *              operands dequantised and multiplied in fp32 (op_gemm), the head
 *              a bf16-rounded fp32 weight on a bf16-rounded input through the
 *              fp32 linear -- the rollout "fp8" of earlier versions, bit for bit;
 *   int8       the seven layer linears as INT8 (kernels/int8.h): weight codes in
 *              [-127, 127] per output row (int8_scaling channel) or per 128x128
 *              block, activations quantised at run time to [-63, 63] per token
 *              (per 1x128 group under block); the products exact integer sums
 *              in int32, scaled in fp32 (oneDNN's u8s8 matmul, or a portable
 *              loop: the same integers, so the same result bit for bit, on any
 *              thread count and independent of the other rows). The rest as
 *              fp8 (bf16, the head a bf16 linear);
 *   nvfp4      the seven layer linears as NVFP4 (kernels/nvfp4.h, W4A4: E2M1
 *              codes, E4M3 scales per 16 elements along the reduction, one fp32
 *              scale per tensor; activations quantised at run time the same
 *              way, per call), simulated: both operands dequantised and
 *              multiplied in fp32. nvfp4_scaling makes the scales coarser
 *              (per 32, per output channel / token, per tensor). The rest as
 *              fp8 (bf16, the head a bf16 linear).
 * The residual stream, norms, RoPE, attention and softmax compute in fp32 in
 * every mode.
 *
 * Bit-exactness. Every mode is deterministic for a given input batch, thread
 * count and build, so resumed runs repeat themselves bit for bit. Per row: the
 * fast FP8 kernel (kernels/cpu/fp8_bf16dot.c) sums each output in one thread in
 * a fixed order, so its results depend neither on the thread count nor on the
 * other rows; the bf16 linear's sums are oneDNN's (observed, not promised, to
 * be independent of both); fp8 with tensor scaling and nvfp4 compute one
 * activation scale over the whole call, so a row's result depends on the other
 * rows of the batch, as the exact simulation's fp32 GEMM may on the thread
 * count. Runs across data-parallel ranks therefore agree to floating-point
 * tolerance, as before. */
#ifndef DLLM_PRECISION_H
#define DLLM_PRECISION_H

#include "kernels/base.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/nvfp4.h"

#include <stdbool.h>

typedef enum {
    DLLM_ROLLOUT_TRAINER = 0,
    DLLM_ROLLOUT_BF16 = 1,
    DLLM_ROLLOUT_FP8 = 2,       /* the fast FP8 product */
    DLLM_ROLLOUT_FP8_EXACT = 3, /* the exact FP8 simulation */
    DLLM_ROLLOUT_NVFP4 = 4,
    DLLM_ROLLOUT_INT8 = 5
} dllm_rollout_kind;

typedef struct {
    bool trainer_bf16;        /* trainer: false = fp32, true = bf16 rounding */
    dllm_rollout_kind rollout;
    fp8_format fp8_format;    /* FP8_E4M3 | FP8_E5M2 (fp8, fp8-exact) */
    fp8_scaling fp8_scaling;  /* weights: FP8_SCALE_BLOCK | _CHANNEL | _TENSOR */
    bool fp8_pow2_scale;
    int8_scaling int8_scaling; /* INT8_SCALE_CHANNEL (default) | _BLOCK (int8) */
    nvfp4_scaling nvfp4_scaling; /* NVFP4_SCALE_BLOCK16 (default) | _BLOCK32 | _CHANNEL |
                                    _TENSOR (nvfp4) */
} dllm_precision;

/* Fills p from config names; NULL or "" takes the default:
 * trainer "fp32" | "bf16", rollout "trainer" | "bf16" | "fp8" | "fp8-exact" | "nvfp4" | "int8",
 * format "e4m3" | "e5m2", scaling "block" | "channel" | "tensor".
 * Input errors name the key and list the choices. */
int dllm_precision_parse(dllm_precision *p, const char *trainer, const char *rollout,
                         const char *format, const char *scaling, bool pow2_scale,
                         dllm_err *err);
/* p->int8_scaling from rollout.int8.scaling ("channel" | "block"; NULL or "" keeps
 * channel); an input error names the key and the choices. */
int dllm_precision_parse_int8(dllm_precision *p, const char *scaling, dllm_err *err);
/* p->nvfp4_scaling from rollout.nvfp4.scaling ("block16" | "block32" | "channel" |
 * "tensor"; NULL or "" keeps block16); an input error names the key and the choices. */
int dllm_precision_parse_nvfp4(dllm_precision *p, const char *scaling, dllm_err *err);
/* "trainer" | "bf16" | "fp8" | "fp8-exact" | "nvfp4" | "int8" */
const char *dllm_rollout_name(dllm_rollout_kind k);
/* Whether k quantises the layer linears to FP8 (fp8, fp8-exact). */
bool dllm_rollout_is_fp8(dllm_rollout_kind k);

/* What the CPU backend computes a rollout copy's linears with on this machine, in
 * words for a user ("oneDNN bf16 matmul on AVX512-BF16 dot products"), and whether
 * that product is faster than the fp32 trainer's (*faster). NULL for the trainer. */
const char *dllm_rollout_cpu_product(dllm_rollout_kind k, bool *faster);
/* The default: fp32 trainer, rollout "trainer" (e4m3 block for a later fp8). */
dllm_precision dllm_precision_default(void);
/* 0 if p holds valid enum values; else an input error naming `where`. */
int dllm_precision_check(const dllm_precision *p, const char *where, dllm_err *err);

#endif
