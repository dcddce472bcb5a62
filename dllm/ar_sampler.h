/* ar_sampler.h: autoregressive decoding of a Qwen3 model with a KV cache.
 *
 * Prompts [B,P] are left-padded (prompt_mask 1 = real token; every row needs
 * at least one). The prompt is prefilled once, then one token per row per
 * step is chosen from the last logits z (V of them):
 *   temperature 0: argmax z, ties to the lowest id (sampling log-prob 0);
 *   otherwise p = softmax(z / temperature) (double), restricted to the
 *   nucleus -- the smallest set of most probable tokens whose mass reaches
 *   top_p (transformers' TopPLogitsWarper; top_p = 1 keeps all) --
 *   renormalised, and sampled by inverse CDF over the kept ids in increasing
 *   id order with u = draw 0 of stream (seed, DLLM_RNG_SAMPLER, g, seq_offset + b)
 *   for generated index g of batch row b (so a row's tokens do not depend on the
 *   padding, on the other rows' lengths, or on how a global batch is split
 *   between ranks: seq_offset is the global index of row 0).
 * Each generated token records logp (under that sampling distribution) and
 * logp_t1 (log softmax(z)[token], the model at temperature 1). A row stops
 * at its first EOS; the rest of it is EOS with log-probs 0. */
#ifndef DLLM_AR_SAMPLER_H
#define DLLM_AR_SAMPLER_H

#include "dllm/qwen3.h"
#include "kernels/backend.h"
#include "kernels/sample.h" /* dllm_ar_dist, dllm_ar_choose: the per-row choice */

#include <stdint.h>

typedef struct {
    int max_new_tokens; /* G >= 1 */
    double temperature; /* >= 0; 0 = greedy */
    double top_p;       /* (0, 1]; 1 = off */
    int eos_id;         /* -1: never stops early */
    uint64_t seq_offset;/* global sequence index of row 0 (noise keys) */
} dllm_ar_cfg;

typedef struct {
    int32_t *tokens; /* (B, P+G) the prompts as given, then the generated tokens */
    float *logp;     /* (B, G) log-prob under the sampling distribution (0 after EOS) */
    float *logp_t1;  /* (B, G) log-prob under the model at temperature 1 (0 after EOS) */
    int32_t *length; /* (B) generated tokens up to and including the first EOS */
    int B, P, G;
} dllm_ar_rollout;

/* Checks the configuration; input errors name the field. */
int dllm_ar_check(const dllm_ar_cfg *c, int vocab, dllm_err *err);
/* Generates for every row; allocates out's arrays (dllm_ar_rollout_free). A model on a
 * device decodes there unless it samples a nucleus its backend cannot choose from
 * (dllm_backend_supports(be, DLLM_OP_AR_NUCLEUS)): then its logits come to the host. */
int dllm_ar_sample(dllm_tf *m, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                   int P, const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out,
                   dllm_err *err);

/* A decoder: a model with a KV cache whose state lives in the memory of backend be
 * (the host's for the CPU backend). */
typedef struct {
    void *ctx;
    dllm_backend *be; /* whose memory every d_ pointer is */
    int V;            /* logits per row */
    int max_rows;     /* most rows one head() call takes */
    /* Appends d_tokens [B,T] (be's int32) to every row, keymask [B,T] on the host or
     * NULL (all real); keeps each row's last state for head(). 0 or err's code. */
    int (*extend)(void *ctx, const int32_t *d_tokens, const uint8_t *keymask, int T,
                  dllm_err *err);
    /* logits [n,V] of rows r0 .. r0+n-1 of the last extend into d_logits (be's). */
    int (*head)(void *ctx, int r0, int n, float *d_logits, dllm_err *err);
} dllm_ar_decoder;

/* The decoders of a Qwen3 model over its cache c (qwen3_cache_new on that model, B rows:
 * the batch every extend appends to): in the memory of the backend the model runs on
 * (the host's, or its device's), or with tokens and logits on the host (a model on a
 * device then sends its logits down). */
int qwen3_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_decoder *out, dllm_err *err);
int qwen3_host_decoder(dllm_tf *m, qwen3_kv_cache *c, dllm_ar_decoder *out, dllm_err *err);

/* The loop of dllm_ar_sample over decoder d, prompts [B,P] and out's arrays on the host:
 * the prompts go up once; each step head() a chunk of rows at a time and the backend's
 * ar_choose (the next token, its two log-probs, the row's length and finished flag, in
 * be's memory) -> the finished flags down when there is an EOS (the step's one
 * synchronisation: the loop ends once every row has stopped) -> extend() over the next
 * tokens; at the end tokens, logp, logp_t1 and length down. Nothing of size V crosses.
 * DLLM_EXIT_INPUT for a bad config, a prompt id outside the vocabulary, or top_p < 1
 * with a temperature on a backend without DLLM_OP_AR_NUCLEUS. */
int dllm_ar_sample_decoder(const dllm_ar_decoder *d, const int32_t *prompts,
                           const uint8_t *prompt_mask, int B, int P, const dllm_ar_cfg *c,
                           uint64_t seed, dllm_ar_rollout *out, dllm_err *err);
void dllm_ar_rollout_free(dllm_ar_rollout *r);

#endif
