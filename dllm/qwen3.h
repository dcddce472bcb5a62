/* qwen3.h: the Qwen3 decoder-only transformer (HF Qwen3ForCausalLM), fp32 on
 * the CPU (with a bf16 trainer and bf16 / FP8 rollout copies: "precision"
 * below) -- the autoregressive baseline, behind the same kind of interface
 * as llada.h.
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
 * Parameters live in one allocation carved into named pointers (torch layout
 * [out, in], HF state_dict order). With LoRA enabled the base weights are
 * frozen and the trainable vector is the LoRA A/B matrices only. */
#ifndef DLLM_QWEN3_H
#define DLLM_QWEN3_H

#include "dllm/llada.h" /* LORA_* target bits, llada_param */
#include "dllm/model_config.h"
#include "dllm/safetensors.h"

/* LoRA targets use the LORA_* bits of llada.h slot for slot:
 * LORA_Q_PROJ q_proj, LORA_K_PROJ k_proj, LORA_V_PROJ v_proj, LORA_ATTN_OUT
 * o_proj, LORA_FF_PROJ gate_proj, LORA_UP_PROJ up_proj, LORA_FF_OUT down_proj.
 * "o_proj" -> LORA_ATTN_OUT (the LLaDA names are accepted too); 0 if unknown. */
int qwen3_lora_target_bit(const char *name);

typedef struct qwen3_model qwen3_model;
/* name ("model.layers.0.self_attn.q_proj.weight", PEFT
 * "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), data,
 * grad (NULL when frozen or not yet allocated), ndim, shape, numel. */
typedef llada_param qwen3_param;

/* Random initialisation: norms 1, matrices N(0, 0.02) (deterministic for a
 * seed). cfg->arch must be DLLM_ARCH_QWEN3. */
qwen3_model *qwen3_create(const dllm_model_config *cfg, uint64_t seed);
/* Loads DIR (config.json + safetensors, single or sharded; any supported dtype). */
int qwen3_load(qwen3_model **out, const char *dir, dllm_err *err);
/* Writes DIR/config.json + safetensors in the HF layout (no lm_head.weight
 * when tied), dtype ST_F32 or ST_BF16, sharded above max_shard_bytes (0 = one
 * file). With LoRA the merged weights are written. */
int qwen3_save(const qwen3_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
               dllm_err *err);
void qwen3_free(qwen3_model *m);
const dllm_model_config *qwen3_config(const qwen3_model *m);

/* LoRA on the targets in `mask`: W' = W + (alpha/rank) B A, A [rank, in]
 * kaiming-uniform as PEFT, B [out, rank] = 0. rank <= 0 or mask 0: off. */
void qwen3_lora_enable(qwen3_model *m, int rank, float alpha, int mask, uint64_t seed);

/* Trainable parameters and their gradients, contiguous (for the optimizer). */
float *qwen3_trainable(qwen3_model *m, size_t *n);
float *qwen3_grads(qwen3_model *m);
void qwen3_zero_grad(qwen3_model *m);

/* Causal forward over tokens [B,T] (keymask [B,T], 1 = real token, left
 * padding; NULL = all real). Logits [n_rows, V] only for the flat rows
 * (b*T + t) listed in rows (NULL: all B*T rows). Keeps activations for
 * qwen3_backward. The signature of dllm_logits_fn (dllm/sampler.h). */
int qwen3_forward(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                  const int32_t *rows, int n_rows, float *logits);
/* The same logits keeping one layer of activations (no backward). */
int qwen3_forward_nograd(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                         int T, const int32_t *rows, int n_rows, float *logits);
/* Backward of the last qwen3_forward: dlogits [n_rows, V]; accumulates into
 * the gradients (tied: the head's part lands in embed_tokens' gradient). */
void qwen3_backward(qwen3_model *m, const float *dlogits);

/* Exact sequence log-probability (the autoregressive estimator): one causal
 * forward over prompt [P] + completion [L] (P >= 1, L >= 1),
 *   token_logp[i] = log softmax(logits(P+i-1) / temperature)[completion[i]],
 *   *seq_logp = sum_i token_logp[i]   (double throughout; token_logp may be NULL).
 * temperature > 0. Keeps nothing for backward. */
int qwen3_seq_logprob(qwen3_model *m, const int32_t *prompt, int P, const int32_t *completion,
                      int L, double temperature, double *seq_logp, double *token_logp,
                      dllm_err *err);

/* ---- incremental decoding with a KV cache ----------------------------------------------
 * Per layer K (after k_norm and RoPE) and V [B, max_len, NKV, HD], the key mask
 * of every cached slot, and each row's count of real tokens (its next RoPE
 * position). Every call appends the same number of slots to every row. */
typedef struct qwen3_kv_cache qwen3_kv_cache;
qwen3_kv_cache *qwen3_cache_new(const qwen3_model *m, int B, int max_len);
void qwen3_cache_free(qwen3_kv_cache *c);
/* Slots in use (the same for every row). */
int qwen3_cache_len(const qwen3_kv_cache *c);
/* Appends tokens [B,T] (keymask [B,T] or NULL; left padding is allowed only
 * while a row has no real token yet) and writes the logits of each row's LAST
 * appended slot into logits [B, V] (NULL: none). qwen3_prefill is this with
 * the prompt; qwen3_decode_step appends one real token per row. The logits
 * equal qwen3_forward's on the whole sequence (up to summation order). */
int qwen3_extend(qwen3_model *m, qwen3_kv_cache *c, const int32_t *tokens,
                 const uint8_t *keymask, int T, float *logits, dllm_err *err);
int qwen3_prefill(qwen3_model *m, qwen3_kv_cache *c, const int32_t *prompts,
                  const uint8_t *prompt_mask, int P, float *logits, dllm_err *err);
int qwen3_decode_step(qwen3_model *m, qwen3_kv_cache *c, const int32_t *tokens, float *logits,
                      dllm_err *err);

/* ---- precision: the trainer's numerics and the rollout copy (METHOD.md §5, §6) ----------
 * As llada.h, with the same llada_precision (llada_precision_parse fills it):
 *   trainer fp32 (default) | bf16: every weight the trainer forward reads is a
 *            bf16-rounded copy of the fp32 master weights (refreshed by
 *            qwen3_rollout_sync), every linear input (lm_head's too) is rounded
 *            to bf16 and saved rounded; the backward is straight-through and its
 *            gradients go to the fp32 master weights; LoRA A/B stay fp32 on top.
 *   rollout  a forward-only copy built by qwen3_rollout_sync from the current
 *            master weights with LoRA merged (W + (alpha/r) B A, in fp32):
 *     trainer  no copy: the rollout forward is the trainer forward, bit for bit;
 *     bf16     every weight rounded to bf16, every linear input rounded to bf16,
 *              fp32 accumulation;
 *     fp8      q/k/v/o_proj and gate/up/down_proj quantised (kernels/fp8.h) with
 *              weight scaling block (128x128) | channel | tensor and activations
 *              quantised at run time to match (1x128 groups | per token | per
 *              tensor); op_fp8_linear_fwd does the product. embed_tokens, lm_head
 *              and every RMSNorm (q_norm/k_norm included) are bf16 (weights
 *              rounded, lm_head's input rounded).
 * The residual stream, norms, RoPE, attention and softmax compute in fp32 in
 * every mode. A model never synced computes at fp32 with rollout "trainer". */

/* Applies p and (re)builds the trainer's bf16 copy and the rollout copy from
 * the current weights. Call it after every weight change (optimizer step,
 * adapter load, LoRA enable) when the trainer is bf16 or the rollout is not
 * "trainer". *seconds (may be NULL) receives its wall time. */
int qwen3_rollout_sync(qwen3_model *m, const llada_precision *p, double *seconds, dllm_err *err);
/* The precision last applied by qwen3_rollout_sync. */
llada_precision qwen3_get_precision(const qwen3_model *m);
/* Forward-only at rollout numerics (qwen3_forward_nograd-style memory, in
 * buffers of its own: the trainer's kept activations survive it). The
 * signature of dllm_logits_fn. */
int qwen3_forward_rollout(qwen3_model *m, const int32_t *tokens, const uint8_t *keymask, int B,
                          int T, const int32_t *rows, int n_rows, float *logits);
/* on: KV-cache decoding (qwen3_extend, qwen3_prefill, qwen3_decode_step)
 * computes at rollout numerics, so the AR sampler decodes with the rollout
 * copy; off (default): at the trainer's. Its logits equal
 * qwen3_forward_rollout's up to summation order -- except under FP8 tensor
 * scaling, whose activation scale spans the rows of each call. */
void qwen3_decode_at_rollout(qwen3_model *m, bool on);
/* One layer linear of the rollout copy on its own: out (N, out) = linear
 * `name` (q_proj, ..., down_proj) of `layer` applied to inp (N, in), exactly
 * as qwen3_forward_rollout computes it (for tests and benchmarks). Returns
 * DLLM_EXIT_INPUT for an unknown name or layer. */
int qwen3_rollout_linear(qwen3_model *m, int layer, const char *name, const float *inp, int N,
                         float *out);

/* ---- named parameters ------------------------------------------------------------------ */
/* The base parameters in HF state_dict order (embed_tokens; per layer q, k,
 * v, o proj, q_norm, k_norm, gate, up, down proj, input_layernorm,
 * post_attention_layernorm; norm; lm_head unless tied). */
int qwen3_params(qwen3_model *m, const qwen3_param **out);
/* The LoRA parameters (A then B per targeted linear, layer by layer, PEFT
 * names); 0 and *out = NULL when LoRA is off. lm_head never carries LoRA. */
int qwen3_lora_params(qwen3_model *m, const qwen3_param **out);
/* LoRA settings: returns the rank (0 = off); alpha and mask may be NULL. */
int qwen3_lora_info(const qwen3_model *m, float *alpha, int *mask);
/* PEFT adapter file <-> the enabled LoRA parameters (F32, every tensor). */
int qwen3_lora_load(qwen3_model *m, const char *path, dllm_err *err);
int qwen3_lora_save(const qwen3_model *m, const char *path, dllm_err *err);

#endif
