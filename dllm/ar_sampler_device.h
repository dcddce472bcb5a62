/* ar_sampler_device.h: the autoregressive sampler of dllm/ar_sampler.h with its loop on
 * the device. The prompts go up once; each step the model's last logits are made a chunk
 * of rows at a time in device memory and the choice kernel (kernels/cuda/ar_sample.cu)
 * turns them into the next token, its two log-probs, the row's length and its finished
 * flag, all in device memory; the next tokens feed the next step where they are.
 *
 * Host traffic: the prompts [B,P] once; per step what the model sends (for Qwen3: the
 * RoPE positions of the new tokens, B int32 up) and, when eos_id >= 0, the finished flags
 * (B bytes down: the step's one synchronisation, which ends the loop once every row has
 * stopped, as the CPU loop does); at the end tokens, logp, logp_t1 [B,G] and length [B].
 * Nothing of size V crosses.
 *
 * Numerics: the CPU sampler's on the same logits -- greedy tokens bit for bit; sampled
 * tokens the same unless u lies within a few ulps of a cumulative-probability boundary
 * (the sums are trees and per-thread runs, not the CPU's left-to-right loop), log-probs
 * to rounding; on a GPU float64 exp/log are the device's. Only top_p = 1 (or greedy):
 * dllm_ar_sample keeps a nucleus on the host. */
#ifndef DLLM_AR_SAMPLER_DEVICE_H
#define DLLM_AR_SAMPLER_DEVICE_H

#include "dllm/ar_sampler.h"
#include "kernels/backend.h"

#include <stdint.h>

/* A decoder whose state lives on a device backend. */
typedef struct {
    void *ctx;
    dllm_backend *be; /* whose memory every d_ pointer is */
    int V;            /* logits per row */
    int max_rows;     /* most rows one head() call takes */
    /* Appends d_tokens [B,T] (device int32) to every row, keymask [B,T] host or NULL
     * (all real); keeps each row's last state for head(). 0 on success. */
    int (*extend)(void *ctx, const int32_t *d_tokens, const uint8_t *keymask, int T);
    /* logits [n,V] of rows r0 .. r0+n-1 of the last extend into d_logits (device). */
    int (*head)(void *ctx, int r0, int n, float *d_logits);
} dllm_ar_device_model;

/* The decoder of a Qwen3 model on a device over its cache c (qwen3_cache_new on that
 * model, B rows: the batch every extend appends to). */
int qwen3_device_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_device_model *out,
                         dllm_err *err);

/* As dllm_ar_sample with the model m (a CUDA backend, the emulation build included):
 * out's arrays on the host. DLLM_EXIT_INPUT for a bad config, a prompt id outside the
 * vocabulary, top_p < 1 with a temperature, a backend that is not CUDA or a build
 * without CUDA; DLLM_EXIT_INTERNAL when the model fails. */
int dllm_ar_sample_device(const dllm_ar_device_model *m, const int32_t *prompts,
                          const uint8_t *prompt_mask, int B, int P, const dllm_ar_cfg *c,
                          uint64_t seed, dllm_ar_rollout *out, dllm_err *err);

#endif
