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

/* The sampling distribution of one row of logits [V]: probs[V] (double,
 * summing to 1 over the nucleus, 0 outside it). temperature > 0. work holds
 * V doubles and V ints' worth of scratch (dllm_ar_work_bytes(V)); NULL allocates. */
size_t dllm_ar_work_bytes(int V);
void dllm_ar_dist(const float *logits, int V, double temperature, double top_p, double *probs,
                  void *work);
/* One choice from logits [V] with uniform u in (0, 1) as described above;
 * *logp and *logp_t1 (may be NULL) receive the two log-probs. */
int32_t dllm_ar_choose(const float *logits, int V, double temperature, double top_p, double u,
                       double *logp, double *logp_t1, void *work);

/* Checks the configuration; input errors name the field. */
int dllm_ar_check(const dllm_ar_cfg *c, int vocab, dllm_err *err);
/* Generates for every row; allocates out's arrays (dllm_ar_rollout_free). */
int dllm_ar_sample(dllm_tf *m, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                   int P, const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out,
                   dllm_err *err);
void dllm_ar_rollout_free(dllm_ar_rollout *r);

#endif
