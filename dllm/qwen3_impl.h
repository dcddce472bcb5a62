/* qwen3_impl.h: the KV cache's layout, shared by dllm/qwen3.c (the host cache) and
 * dllm/qwen3_device.c (the cache in a device backend's memory). Not a public interface. */
#ifndef DLLM_QWEN3_IMPL_H
#define DLLM_QWEN3_IMPL_H

#include "dllm/qwen3.h"
#include "dllm/transformer_impl.h"

struct qwen3_kv_cache {
    int B, max_len, len, L, NKV, HD;
    int T;            /* slots the extend in progress appends */
    float *k, *v;     // (L, B, max_len, NKV*HD) on the host; NULL on a device
    uint8_t *mask;    // (B, max_len) the key mask (on a device: the host's mirror)
    int32_t *npos;    // (B) real tokens so far = the next RoPE position
    tf_acts a;        /* one layer's activations for the B*T new rows (grown on demand);
                         on a device in its memory, with the B last rows in a.xr */
    /* a model on a device (qwen3_device.c); be NULL: the host cache above */
    dllm_backend *be;
    dllm_tf *m;        /* the model a decoder (dllm/ar_sampler.h) runs */
    float *dk, *dv;    // (L, B, max_len, NKV*HD) device
    uint8_t *dmask;    // (B, max_len) device key mask
    uint8_t *dnew;     // (B * max_len) device: the new slots' key mask of an extend
    const uint8_t *newmask; /* dnew while an extend with a key mask runs, else NULL */
    int32_t *dtok;     // (B * max_len) device: host tokens of qwen3_extend, uploaded
    float *dlg;        // (lg_rows, V) device: a chunk of logits for qwen3_extend
    int lg_rows;
    float *hlg;        // (B, V) host: the last rows' logits of the host decoder's extend
    const tf_view *view; /* the weights of the last extend, which the head reads */
    bool have_rows;    /* a.xr holds the last extend's B last rows */
};

/* The attention hook of an extend (tf_layers_fwd) over the cache c, on the host or its
 * device. */
void qwen3_cache_attention(dllm_tf *m, int l, tf_layer_io *io, void *ctx);
/* The cache's device half for a model on a device (m->dev): allocates it. */
void qwen3_device_cache_init(const dllm_tf *m, qwen3_kv_cache *c);
void qwen3_device_cache_free(qwen3_kv_cache *c);
/* qwen3_extend for a cache on a device (inputs checked): host tokens uploaded, the
 * logits of the last rows downloaded a chunk of rows at a time (logits NULL: none). */
int qwen3_device_extend_host(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens,
                             const uint8_t *keymask, int T, float *logits, dllm_err *err);

#endif
