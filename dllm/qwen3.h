/* qwen3.h: the Qwen3 decoder-only transformer (HF Qwen3ForCausalLM) -- an
 * architecture descriptor of the transformer core (dllm/transformer.h), plus
 * what is its own: exact sequence log-probabilities and KV-cache decoding.
 *
 *   x = embed_tokens[tokens]
 *   per layer: n1 = input_layernorm(x)
 *              q = RoPE(q_norm(q_proj n1)), k = RoPE(k_norm(k_proj n1)),
 *              v = v_proj n1        (q_norm/k_norm: RMSNorm over head_dim, per head)
 *              h = x + o_proj(CausalAttn(q, k, v))        (GQA, scale 1/sqrt(HD))
 *              x' = h + down_proj(silu(gate_proj n2) * up_proj n2),
 *              n2 = post_attention_layernorm(h)
 *   logits = lm_head(norm(x))   (lm_head = embed_tokens when tie_word_embeddings)
 *
 * Padding: batches are LEFT-padded; keymask [B,T] (1 = real token) hides the
 * padding keys, and the RoPE position of a real token is its index among the
 * real tokens of its row (cumsum(mask) - 1, padding at 0) -- exactly the
 * position_ids transformers' generate() derives from the attention mask, so a
 * left-padded row computes the same logits as the unpadded sequence. (RoPE
 * scores depend only on position differences, so a constant per-row offset
 * would change nothing but rounding; counting real tokens keeps the KV cache's
 * positions independent of how much padding a batch carries.) Logits at
 * padding rows are meaningless (their queries see no key: zero attention).
 *
 * HF names: model.embed_tokens / layers.N.self_attn.{q,k,v,o}_proj,
 * q_norm, k_norm / layers.N.mlp.{gate,up,down}_proj / input_layernorm,
 * post_attention_layernorm / model.norm / lm_head (absent when tied). LoRA
 * targets q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (the
 * LLaDA names are accepted slot for slot). The descriptor is dllm_arch_qwen3. */
#ifndef DLLM_QWEN3_H
#define DLLM_QWEN3_H

#include "dllm/transformer.h"

/* Exact sequence log-probability (the autoregressive estimator): one causal
 * forward over prompt [P] + completion [L] (P >= 1, L >= 1),
 *   token_logp[i] = log softmax(logits(P+i-1) / temperature)[completion[i]],
 *   *seq_logp = sum_i token_logp[i]   (double throughout; token_logp may be NULL).
 * temperature > 0. Keeps nothing for backward. m must be causal. */
int qwen3_seq_logprob(dllm_tf *m, const int32_t *prompt, int P, const int32_t *completion,
                      int L, double temperature, double *seq_logp, double *token_logp,
                      dllm_err *err);

/* ---- incremental decoding with a KV cache ----------------------------------------------
 * Per layer K (after k_norm and RoPE) and V [B, max_len, NKV, HD], the key mask
 * of every cached slot, and each row's count of real tokens (its next RoPE
 * position). Every call appends the same number of slots to every row. The
 * model must be causal, with unshifted logits. */
typedef struct qwen3_kv_cache qwen3_kv_cache;
qwen3_kv_cache *qwen3_cache_new(const dllm_tf *m, int B, int max_len);
void qwen3_cache_free(qwen3_kv_cache *c);
/* Slots in use (the same for every row). */
int qwen3_cache_len(const qwen3_kv_cache *c);
/* Appends tokens [B,T] (keymask [B,T] or NULL; left padding is allowed only
 * while a row has no real token yet) and writes the logits of each row's LAST
 * appended slot into logits [B, V] (NULL: none). qwen3_prefill is this with
 * the prompt; qwen3_decode_step appends one real token per row. The logits
 * equal dllm_tf_forward's on the whole sequence (up to summation order). */
int qwen3_extend(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens,
                 const uint8_t *keymask, int T, float *logits, dllm_err *err);
int qwen3_prefill(dllm_tf *m, qwen3_kv_cache *c, const int32_t *prompts,
                  const uint8_t *prompt_mask, int P, float *logits, dllm_err *err);
int qwen3_decode_step(dllm_tf *m, qwen3_kv_cache *c, const int32_t *tokens, float *logits,
                      dllm_err *err);
/* on: KV-cache decoding computes at rollout numerics, so the AR sampler
 * decodes with the rollout copy; off (default): at the trainer's. Its logits
 * equal dllm_tf_forward_rollout's up to summation order -- except under FP8
 * tensor scaling, whose activation scale spans the rows of each call. */
void qwen3_decode_at_rollout(dllm_tf *m, bool on);

/* A model on a device (dllm_tf_to_device): qwen3_cache_new puts K/V and the key mask in
 * the device's memory and qwen3_extend runs there, its logits downloaded; the decoder of
 * dllm/ar_sampler.h (qwen3_decoder) keeps tokens and logits there too. */

#endif
