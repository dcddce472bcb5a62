/* block_cache.h: the block-wise key/value cache of cached denoising (docs/METHOD.md
 * §2a; dllm/sampler.h, dllm_sample_cached), for a bidirectional transformer whose
 * logits are not shifted (LLaDA), on the host.
 *
 * fill runs the forward of dllm_tf_forward_rollout (rollout) or
 * dllm_tf_forward_nograd -- the same ops in the same order, so its logits are those
 * bits -- and keeps every layer's keys (after RoPE at their absolute positions: the
 * published code caches keys before RoPE and rotates the whole cache at every step,
 * which gives these values) and values for all B*T positions. step then runs only
 * the positions [lo, hi) of every sequence: their keys and values replace the cached
 * ones of those positions, and their queries attend to all T cached positions
 * (padding excluded by the fill's key mask). Positions outside [lo, hi) keep the
 * fill's keys and values until the next fill.
 *
 *   dllm_block_cache *c;
 *   dllm_block_cache_new(&c, model, true, &err);
 *   dllm_sampler_cache sc = {dllm_block_cache_fill, dllm_block_cache_step, c};
 *   dllm_sample_cached(NULL, NULL, &sc, prompts, mask, B, P, &cfg, seed, &out, &err);
 *   dllm_block_cache_free(c);
 *
 * The cache lives in the memory of the model's backend: for a model on a device,
 * dllm_block_cache_view gives the sampler's loop (dllm_sample_model) its fill, step and
 * head there, the keys and values never leaving the device:
 *
 *   dllm_device_logits v = dllm_block_cache_view(c);
 *   dllm_sample_model(&v, prompts, mask, B, P, &cfg, seed, &out, &err);
 *
 * (its layers() is the fill: the view serves the cached modes only). The host functions
 * below are for a model on the host. */
#ifndef DLLM_BLOCK_CACHE_H
#define DLLM_BLOCK_CACHE_H

#include "dllm/device_logits.h"
#include "dllm/transformer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dllm_block_cache dllm_block_cache;

/* A cache for m at the rollout copy's numerics (rollout) or the trainer's, on the model's
 * backend. Input errors: a causal model, shifted logits. */
int dllm_block_cache_new(dllm_block_cache **out, dllm_tf *m, bool rollout, dllm_err *err);
void dllm_block_cache_free(dllm_block_cache *c);

/* dllm_logits_fn: the full forward over tokens [B,T], filling the cache. */
int dllm_block_cache_fill(void *c, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          const int32_t *rows, int n_rows, float *logits);
/* dllm_cached_logits_fn: positions [lo, hi) of tokens [B,T] (B and T those of the last
 * fill) over the cache; rows (flat b*T + t) must lie in [lo, hi). keymask is the
 * fill's (ignored here). */
int dllm_block_cache_step(void *c, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          int lo, int hi, const int32_t *rows, int n_rows, float *logits);

/* The cache as the sampler loop's view of m (above), on the model's backend. */
dllm_device_logits dllm_block_cache_view(dllm_block_cache *c);

#endif
