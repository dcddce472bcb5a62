/* sampler_device.h: the LLaDA denoising sampler of dllm/sampler.h with everything on
 * the device. The canvas, the committable-row list, the model (dllm/device_logits.h),
 * CFG, the EOS switches, the x0 draw, the confidences, the transfer-count schedule,
 * the top-k commit and the commit records live in the backend's memory; the logits are
 * made max_rows rows at a time and consumed where they are.
 *
 * Host traffic: the prompts, the key mask and the initial records go up once; per step
 * one int32 comes down (the number of committable rows, which sizes the head() calls
 * and lets a step with nothing to commit skip its forward, as the CPU sampler does:
 * one small synchronisation per step); at the end the canvas [B,P+G] and the records
 * [B,G] come down. Nothing of size V ever crosses.
 *
 * It runs on any backend through the table's denoising entries; on the CPU backend it is
 * dllm_sample bit for bit, commit_prob included (the same per-row code).
 *
 * Numerics on a device: the same rollout as dllm_sample on the same logits. x0 is bit for bit the
 * CPU's draw (float64 Gumbel scores from the same keyed noise; ties and NaN rules of
 * the CPU scan; the mask id left out under mask_token = forbid); CFG is the CPU's fp32
 * expression without contraction. Two exceptions: (1) commit_prob (and therefore the
 * low_confidence confidence) is softmax(x0) with float64 sums over a tree instead of
 * the CPU's left-to-right loop; the float result agrees to 1e-6 relative and is the
 * same float unless the double lands within a few ulps of a float rounding boundary,
 * and only then can the ranking of two nearly equal confidences differ; (2) on a GPU
 * the float64 exp/log/pow are the device's, which may differ from libm's in the last
 * ulp (two Gumbel scores equal to ~1e-16 relative could order differently). Under the
 * CUDA emulation the math is libm's. Logits with NaN rank as the CPU's qsort leaves
 * them, which is not defined: not supported.
 *
 * Call it where dllm_sample is called with a model whose forward is on the device:
 *   dllm_device_logits m = ...;            (the model's device view)
 *   dllm_sample_device(&m, prompts, prompt_mask, B, P, &cfg, seed, &rollout, &err);
 * cfg.vocab must equal m.V. The rollout is freed with dllm_rollout_free. The cached and
 * parallel denoising of dllm/sampler.h (cfg.cache, cfg.threshold) is not on the device yet:
 * an input error. */
#ifndef DLLM_SAMPLER_DEVICE_H
#define DLLM_SAMPLER_DEVICE_H

#include "dllm/device_logits.h"
#include "dllm/sampler.h"

#include <stdint.h>

/* As dllm_sample (prompts [B,P] left-padded on the host, prompt_mask [B,P] or NULL, out's
 * arrays allocated on the host), with the model m on its backend m->be. 0 on success;
 * DLLM_EXIT_INPUT for a bad config (dllm_sampler_check) or a vocabulary that is not m->V;
 * DLLM_EXIT_INTERNAL when layers() or head() fails. */
int dllm_sample_device(const dllm_device_logits *m, const int32_t *prompts,
                       const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                       uint64_t seed, dllm_rollout *out, dllm_err *err);

#endif
