/* device_logits.h: a model whose forward runs on a backend, as the denoising sampler's
 * loop (dllm/sampler.c) sees it. Token ids, the key mask and row lists live
 * in the backend's memory; logits come out a chunk of rows at a time into a
 * buffer of the backend's, so no full [B*T, V] logits tensor exists and
 * nothing crosses to the host but what the caller downloads.
 *
 * The host-side interface (dllm_logits_fn, dllm/sampler.h) stays the one the
 * estimators use; the sampler serves it through this one on the CPU backend. One
 * instance reads one set of weights at one numerics (a trainer view or a rollout
 * copy). */
#ifndef DLLM_DEVICE_LOGITS_H
#define DLLM_DEVICE_LOGITS_H

#include "kernels/backend.h"

#include <stdint.h>

typedef struct dllm_device_logits {
    void *ctx;
    dllm_backend *be; /* the backend whose memory every pointer below is */
    int V;            /* logits per row (the embedding size) */
    int max_rows;     /* most rows one head() call takes: the chunk */
    /* The layers over d_tokens [B,T] (backend int32) with d_keymask [B,T]
     * (backend bytes, 1 = real token; NULL: all real). Keeps the final hidden
     * states for head() until the next layers() call. 0 on success. */
    int (*layers)(void *ctx, const int32_t *d_tokens, const uint8_t *d_keymask, int B, int T);
    /* logits (n, V) into d_logits (backend memory) for the flat rows d_rows
     * (backend int32, b*T + t) of the last layers() call, 0 < n <= max_rows,
     * at the numerics of this instance (shifted archs read the shifted hidden
     * row, as dllm_tf_forward does). 0 on success. */
    int (*head)(void *ctx, const int32_t *d_rows, int n, float *d_logits);
    /* Optional, both or neither (the block cache of cached denoising, docs/METHOD.md
     * §2a): fill is layers() that also keeps every layer's keys (after RoPE) and values
     * of all B*T positions; step recomputes only positions [lo, hi) of every sequence of
     * d_tokens [B,T] (B, T and the key mask those of the last fill) over the kept ones,
     * theirs replaced, and head() then takes rows b*T + t with lo <= t < hi. */
    int (*fill)(void *ctx, const int32_t *d_tokens, const uint8_t *d_keymask, int B, int T);
    int (*step)(void *ctx, const int32_t *d_tokens, int B, int T, int lo, int hi);
} dllm_device_logits;

#endif
