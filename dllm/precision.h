/* precision.h: the trainer's numerics and the rollout copy (METHOD.md §5, §6),
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
 *   trainer  no copy: the rollout forward is the trainer forward, bit for bit
 *            (the reference arm, w = 1 exactly);
 *   bf16     every weight rounded to bf16, every linear input rounded to bf16,
 *            fp32 accumulation;
 *   fp8      the seven layer linears quantised (kernels/fp8.h) in fp8_format
 *            with weight scaling block (128x128) | channel | tensor, activations
 *            quantised at run time to match: block -> 1x128 groups, channel ->
 *            per token, tensor -> per tensor; the backend's fp8_linear_fwd does
 *            the product. Embeddings, norms, biases and the head are bf16
 *            (weights rounded, head input rounded).
 * The residual stream, norms, RoPE, attention and softmax compute in fp32 in
 * every mode. */
#ifndef DLLM_PRECISION_H
#define DLLM_PRECISION_H

#include "kernels/base.h"
#include "kernels/fp8.h"

#include <stdbool.h>

typedef enum {
    DLLM_ROLLOUT_TRAINER = 0,
    DLLM_ROLLOUT_BF16 = 1,
    DLLM_ROLLOUT_FP8 = 2
} dllm_rollout_kind;

typedef struct {
    bool trainer_bf16;        /* trainer: false = fp32, true = bf16 rounding */
    dllm_rollout_kind rollout;
    fp8_format fp8_format;    /* FP8_E4M3 | FP8_E5M2 */
    fp8_scaling fp8_scaling;  /* weights: FP8_SCALE_BLOCK | _CHANNEL | _TENSOR */
    bool fp8_pow2_scale;
} dllm_precision;

/* Fills p from config names; NULL or "" takes the default:
 * trainer "fp32" | "bf16", rollout "trainer" | "bf16" | "fp8",
 * format "e4m3" | "e5m2", scaling "block" | "channel" | "tensor".
 * Input errors name the key and list the choices. */
int dllm_precision_parse(dllm_precision *p, const char *trainer, const char *rollout,
                         const char *format, const char *scaling, bool pow2_scale,
                         dllm_err *err);
const char *dllm_rollout_name(dllm_rollout_kind k); /* "trainer" | "bf16" | "fp8" */
/* The default: fp32 trainer, rollout "trainer" (e4m3 block for a later fp8). */
dllm_precision dllm_precision_default(void);
/* 0 if p holds valid enum values; else an input error naming `where`. */
int dllm_precision_check(const dllm_precision *p, const char *where, dllm_err *err);

#endif
