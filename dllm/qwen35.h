/* qwen35.h: Qwen3.5's text model (HF Qwen3_5ForCausalLM, model_type qwen3_5_text,
 * or the text_config of a qwen3_5 checkpoint) -- a causal decoder whose layers are
 * of two kinds, as config.json's layer_types says (three Gated DeltaNet layers to
 * each full-attention one in the published models):
 *
 *   x = embed_tokens[ids]
 *   per layer: n1 = RMSNorm1(x)            (zero-centred: x rstd (1 + w))
 *     linear_attention (Gated DeltaNet, kernels/gated_delta.h):
 *       q|k|v = conv_silu(in_proj_qkv n1); q, k = l2norm(q), l2norm(k)
 *       g = -exp(A_log) softplus(in_proj_a n1 + dt_bias), beta = sigmoid(in_proj_b n1)
 *       o = gated_delta_rule(q, k, v, g, beta)
 *       mix = out_proj gated_rmsnorm(o, in_proj_z n1)
 *     full_attention: q|gate = q_proj n1 (per head: HD query dims, then HD gate dims)
 *       q = RoPE_partial(q_norm q), k = RoPE_partial(k_norm(k_proj n1)), v = v_proj n1
 *       mix = o_proj(CausalAttn(q, k, v) * sigmoid(gate))     (GQA, 1/sqrt(HD))
 *       RoPE on the first partial_rotary_factor * HD dims of each head
 *     h = x + mix;  x' = h + down_proj(silu(gate_proj n2) * up_proj n2), n2 = RMSNorm2(h)
 *   logits = lm_head(norm(x))            (lm_head = embed_tokens when tied)
 *
 * Decoding keeps, per linear layer, the last K-1 convolution inputs and the
 * recurrent state [Hv, Dk, Dv]; per full layer, K (after k_norm and RoPE) and V.
 * An extend of T > 1 tokens runs the chunked rule, one token the recurrent one --
 * as the published implementation does. Everything in fp32 (decoding may use a bf16 or
 * quantised copy), on the host or a device (qwen35_to_backend); a batch one row at a time.
 * The registry's qwen3.5
 * descriptor runs this model behind the policy (dllm/qwen35_policy.c), not through the
 * transformer core: docs/QWEN35.md. */
#ifndef DLLM_QWEN35_H
#define DLLM_QWEN35_H

#include "dllm/precision.h"
#include "dllm/safetensors.h"
#include "dllm/transformer.h" /* dllm_param */
#include "kernels/backend.h"
#include "kernels/base.h"

#include <stdbool.h>
#include <stdint.h>

#define QWEN35_MAX_LAYERS 256

typedef enum { QWEN35_LINEAR = 0, QWEN35_FULL = 1 } qwen35_layer_kind;

typedef struct {
    int C, L, H, V;          /* hidden, layers, MLP intermediate, vocabulary */
    int NH, NKV, HD, rot;    /* full attention: heads, KV heads, head dim, RoPE dims */
    float theta, eps;        /* rope_theta, rms_norm_eps */
    int Hk, Dk, Hv, Dv, K;   /* Gated DeltaNet: key/value heads and sizes, conv width */
    bool tied;               /* tie_word_embeddings */
    int eos_token_id;        /* -1: none */
    int bos_token_id;        /* -1: none (the published models have none) */
    int max_pos;             /* max_position_embeddings (0: not given) */
    bool composite;          /* a qwen3_5 checkpoint (text under text_config) */
    qwen35_layer_kind kind[QWEN35_MAX_LAYERS];
} qwen35_config;

/* Reads config.json at path: model_type qwen3_5_text, or qwen3_5 with its
 * text_config (its vision_config is ignored). Input errors (exit 2) name the
 * file and key: a layer_types entry other than linear_attention/full_attention,
 * a missing size, no text_config (a vision-only checkpoint). */
int qwen35_config_read(const char *path, qwen35_config *cfg, dllm_err *err);
/* The same over config.json's parsed root (path: for messages). */
struct json_t;
int qwen35_config_parse(const struct json_t *root, const char *path, qwen35_config *cfg,
                        dllm_err *err);
/* Whether config.json at path says qwen3_5 or qwen3_5_text (false when unreadable). */
bool qwen35_is_config(const char *path);

typedef struct qwen35_model qwen35_model;
/* Loads DIR/config.json and DIR's safetensors (one file or an index with shards;
 * F32/BF16/F16). The text weights are model.* (qwen3_5_text) or
 * model.language_model.* (qwen3_5); vision (model.visual.*) and multi-token
 * prediction (mtp.*) tensors are ignored with one note line on stderr. A missing
 * or misshapen tensor is an input error naming it. */
int qwen35_load(qwen35_model **out, const char *dir, dllm_err *err);
/* A model of cfg with the random weights qwen35_write_random writes for seed (F32). */
qwen35_model *qwen35_create(const qwen35_config *cfg, uint64_t seed);
/* A model with m's config and weights (not its gradients, moments, bf16 rounding or LoRA
 * adapters). */
qwen35_model *qwen35_clone(const qwen35_model *m);
/* dst's weights = src's fp32 weights (its masters where it keeps them; the same config,
 * the same backend), dst's bf16 rounding off. */
void qwen35_copy_weights(qwen35_model *dst, const qwen35_model *src);
/* DIR/config.json (qwen3_5_text, also for a model read from a qwen3_5 checkpoint) and its
 * weights in the published names, dtype ST_F32 or ST_BF16, shards of max_shard_bytes
 * (0: one file). */
int qwen35_save(const qwen35_model *m, const char *dir, st_dtype dtype, size_t max_shard_bytes,
                dllm_err *err);
void qwen35_free(qwen35_model *m);
const qwen35_config *qwen35_config_of(const qwen35_model *m);

typedef struct qwen35_cache qwen35_cache;
qwen35_cache *qwen35_cache_new(const qwen35_model *m, int max_len);
void qwen35_cache_free(qwen35_cache *c);
int qwen35_cache_len(const qwen35_cache *c);
/* Appends ids [T] to the sequence the cache holds and writes logits: of every
 * new token into logits [T, V] (all_rows), or of the last one into logits [V]
 * (NULL: none). */
int qwen35_extend(qwen35_model *m, qwen35_cache *c, const int32_t *ids, int T, float *logits,
                  bool all_rows, dllm_err *err);
/* The same with the logits of the last new token written to d_logits [V] in the memory of
 * the model's backend (qwen35_backend): a decoding step whose choice is made there. */
int qwen35_extend_last(qwen35_model *m, qwen35_cache *c, const int32_t *ids, int T,
                       float *d_logits, dllm_err *err);
/* log softmax(logits(P+i-1) / temperature)[completion[i]] for the L completion
 * tokens after prompt [P] (double; token_logp may be NULL), one chunked forward. */
int qwen35_seq_logprob(qwen35_model *m, const int32_t *prompt, int P, const int32_t *completion,
                       int L, double temperature, double *seq_logp, double *token_logp,
                       dllm_err *err);
/* Greedy decoding of G tokens after prompt [P] (the prompt through the chunked
 * rule, then one token at a time through the caches); stops after eos (>= 0), the
 * rest of out [G] then eos. Returns the count generated in *n (may be NULL). */
int qwen35_greedy(qwen35_model *m, const int32_t *prompt, int P, int G, int eos, int32_t *out,
                  int *n, dllm_err *err);

/* The bf16 rollout copy, in place, for decoding and scoring (qwen35_extend,
 * qwen35_seq_logprob, qwen35_greedy; not the training path): the embedding and the head,
 * in_proj_qkv, in_proj_z and out_proj of the Gated DeltaNet layers, q/k/v/o_proj of the
 * full ones and the MLPs rounded to bf16, and every input of those products rounded to
 * bf16, sums in fp32. Stay fp32: in_proj_a and in_proj_b (the decay and write gates),
 * A_log, dt_bias, the convolution, every norm, RoPE, attention, and the recurrence. */
void qwen35_round_bf16(qwen35_model *m);

/* ---- batches (the model behind the policy, dllm/qwen35_policy.c) -----------------------
 * logits [n_rows, V] of the flat rows (b*T + t; NULL: all B*T) of tokens [B,T] under
 * keymask [B,T] (1 = a real token; NULL: all): each batch row's real tokens run as one
 * sequence (the chunked rule), so left padding changes nothing; a padding position's
 * logits are zeros. keep: each row's layer inputs are kept for qwen35_backward (else
 * nothing is). At the bf16 copy's numerics after qwen35_round_bf16. */
int qwen35_forward(qwen35_model *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                   const int32_t *rows, int n_rows, float *logits, bool keep, dllm_err *err);
/* The backward of the last keeping qwen35_forward: dlogits [n_rows, V]; gradients
 * accumulate (qwen35_grads). Rows at padding positions carry none. */
void qwen35_backward(qwen35_model *m, const float *dlogits);
/* The trainable vector (*n floats): every weight (load order; the zero-centred norms held
 * as 1 + w; the fp32 masters where the model keeps them, qwen35_keep_master), or under LoRA
 * the adapters (qwen35_lora_params' order); its gradients (allocated zeroed on first use)
 * and the AdamW moments (which 0: m, 1: v) in the same layout. Pointers into the model's
 * backend's memory (qwen35_backend): host memory until qwen35_to_backend. */
float *qwen35_params(qwen35_model *m, size_t *n);
float *qwen35_grads(qwen35_model *m);
float *qwen35_moment(qwen35_model *m, int which);
/* Every weight in one vector (the layout of qwen35_params without LoRA), LoRA or not: the
 * weights the forward reads (bf16-rounded after qwen35_round_bf16). */
float *qwen35_weights(qwen35_model *m, size_t *n);
/* One optimizer step: the global gradient norm (returned), clipped to a->max_norm when
 * > 0, then AdamW (a's betas, eps, decay: the published w of the zero-centred norms; under
 * LoRA every adapter entry) of the trainable vector; a non-finite norm updates nothing. */
double qwen35_optim_step(qwen35_model *m, const dllm_adamw_args *a);
/* fp32 master weights beside the weights the forward reads (a bf16 trainer: the forward
 * reads them rounded): a copy of the current weights, made once; from then on the
 * optimizer steps the masters (the gradients computed through the rounded weights step
 * them straight through), the trainable vector is theirs and qwen35_copy_weights copies
 * them. qwen35_weights_from_master: the weights = the masters (rounding off again). */
void qwen35_keep_master(qwen35_model *m);
bool qwen35_has_master(const qwen35_model *m);
void qwen35_weights_from_master(qwen35_model *m);

/* ---- where it runs ------------------------------------------------------------------------
 * The backend whose ops the model runs and whose memory holds every array it owns: the
 * host's (dllm_backend_cpu) from load or create, or the one qwen35_to_backend moved it to:
 * weights, gradients, moments, masters and adapters are uploaded there (a quantised copy
 * is dropped: qwen35_quantise again). An input error for a backend without the Gated
 * DeltaNet ops or a model already on a device. */
dllm_backend *qwen35_backend(const qwen35_model *m);
int qwen35_to_backend(qwen35_model *m, dllm_backend *be, dllm_err *err);
/* Elements [off, off + n) of a vector of the optimizer state (or of the weights the
 * forward reads, qwen35_weights) to (write false) or from the host buffer buf, wherever the
 * model runs. */
typedef enum {
    QWEN35_VEC_PARAMS, QWEN35_VEC_GRADS, QWEN35_VEC_ADAM_M, QWEN35_VEC_ADAM_V, QWEN35_VEC_WEIGHTS
} qwen35_vec;
void qwen35_vec_move(qwen35_model *m, qwen35_vec which, size_t off, size_t n, float *buf,
                     bool write);
/* The trainable vector on the host: qwen35_params itself on the host, else a copy downloaded
 * at the call (valid until the next call). */
const float *qwen35_params_host(qwen35_model *m, size_t *n);

/* ---- LoRA -------------------------------------------------------------------------------
 * Adapters on the projections, PEFT's target names: in_proj_qkv, in_proj_z and out_proj of
 * the Gated DeltaNet layers; q_proj, k_proj, v_proj, o_proj of the full-attention ones;
 * gate_proj, up_proj, down_proj. A projection W (out, in) computes W x + (alpha / r) B A x,
 * A (r, in), B (out, r), in fp32 on the input the projection reads (bf16-rounded after
 * qwen35_round_bf16); the base weights are then frozen (no gradients, no moments). */
#define QWEN35_NLORA 10
extern const char *const qwen35_lora_names[QWEN35_NLORA];
/* 1 << (its index in qwen35_lora_names); 0 for another name. */
int qwen35_lora_bit(const char *name);
/* "in_proj_qkv, in_proj_z, ... or down_proj", for messages. */
const char *qwen35_lora_list(char *buf, size_t cap);
/* The mask of model.lora.targets' n names (0: every target): Qwen3.5's, and LLaDA's
 * attn_out, ff_proj, ff_out for o_proj, gate_proj, down_proj as the registry accepts them;
 * a list of all seven of the core's layer projections and none of the Gated DeltaNet ones
 * (the key's default) means every target. An unknown name is an input error naming what. */
int qwen35_lora_mask(const char *const *names, int n, const char *what, int *mask,
                     dllm_err *err);
/* The adapters' parameter count of rank r on mask's targets in a model of c. */
int64_t qwen35_lora_numel(const qwen35_config *c, int rank, int mask);
/* Adapters of rank r on the projections whose bits mask holds (every layer that has one):
 * A as PEFT initialises it (kaiming-uniform, U(-1/sqrt(in), 1/sqrt(in)), from seed), B = 0,
 * so the model computes what it did. rank <= 0 or mask 0: none. The base weights'
 * gradients and the moments are dropped (the trainable vector changes). */
void qwen35_lora_enable(qwen35_model *m, int rank, float alpha, int mask, uint64_t seed);
/* The rank (0: no LoRA); alpha and the target mask into *alpha, *mask (may be NULL). */
int qwen35_lora_info(const qwen35_model *m, float *alpha, int *mask);
/* The adapters in PEFT's names ("base_model.model.<weight name>" with lora_A / lora_B
 * for weight: "base_model.model.model.layers.0.linear_attn.in_proj_qkv.lora_A.weight"). */
int qwen35_lora_params(qwen35_model *m, const dllm_param **out);
/* dst's weights (m's config, no LoRA) += (alpha / r) B A for every adapter of m. */
void qwen35_lora_merge(const qwen35_model *m, qwen35_model *dst);
/* The adapters to / from one safetensors file (F32, qwen35_lora_params' names). */
int qwen35_lora_save(const qwen35_model *m, const char *path, dllm_err *err);
int qwen35_lora_load(qwen35_model *m, const char *path, dllm_err *err);

/* The FP8 (fp8, fp8-exact), INT8 or NVFP4 rollout copy of p->rollout, in place (after
 * qwen35_copy_weights): the projections qwen35_round_bf16 rounds -- in_proj_qkv, in_proj_z,
 * out_proj; q/k/v/o_proj; gate/up/down_proj -- quantised from their fp32 values as the
 * core's copies are (dllm/precision.h: the weight scaling, activations quantised per call
 * to match), the embedding and the head rounded to bf16 (the head's input too). Stay
 * fp32: in_proj_a, in_proj_b, A_log, dt_bias, the convolution, every norm, RoPE,
 * attention and the recurrence. For decoding and scoring, not the training path. */
int qwen35_quantise(qwen35_model *m, const dllm_precision *p, dllm_err *err);

/* ---- named sizes and fresh checkpoints (qwen35_init.c) ---------------------------------- */
#define QWEN35_PRESETS "tiny or qwen3.5-9b"
/* The preset called name (QWEN35_PRESETS); an input error naming it otherwise. */
int qwen35_preset(const char *name, qwen35_config *cfg, dllm_err *err);
/* Whether the preset has a published checkpoint's sizes (its weights are large). */
bool qwen35_preset_published(const char *name);
/* Parameters of the text model (the head counted once when tied). */
int64_t qwen35_num_params(const qwen35_config *cfg);
/* config.json's object in transformers' qwen3_5_text layout (the caller owns it). */
struct json_t *qwen35_config_json(const qwen35_config *cfg, const char *torch_dtype);
/* DIR/config.json in transformers' qwen3_5_text layout (Qwen3_5ForCausalLM); torch_dtype
 * as its "dtype" ("float32", "bfloat16"). */
int qwen35_config_save(const qwen35_config *cfg, const char *dir, const char *torch_dtype,
                       dllm_err *err);
/* Random weights of cfg in the published names into DIR (model.safetensors, or shards of
 * at most max_shard_bytes with the index), streamed: normal(0, 0.02) projections,
 * embeddings and convolution, identity norms, A_log = log U(1, 16), dt_bias = 1; each
 * value a function of seed, its tensor and its place. */
int qwen35_write_random(const qwen35_config *cfg, const char *dir, uint64_t seed, st_dtype dtype,
                        size_t max_shard_bytes, dllm_err *err);

/* The values qwen35_write_random writes for tensor `name` (published, F32) into dst [n]. */
void qwen35_random_tensor(const qwen35_config *cfg, const char *name, uint64_t seed, float *dst,
                          size_t n);

/* ---- training ---------------------------------------------------------------------------
 * The mean next-token cross-entropy over ids [T] (T - 1 targets) into *loss, its gradient
 * ACCUMULATED into every weight's gradient (allocated zeroed by the first call;
 * qwen35_zero_grad zeroes them). One sequence, the chunked rule forward, the ops'
 * backward (kernels/gated_delta.h); only each layer's input is kept, its activations
 * recomputed when the backward reaches it. */
int qwen35_loss_grad(qwen35_model *m, const int32_t *ids, int T, double *loss, dllm_err *err);
void qwen35_zero_grad(qwen35_model *m);
/* The gradient of the weight with the published name (e.g. "lm_head.weight"; a tied
 * head's is the embedding's), *n its length; NULL before any gradient, if none, or on a
 * device. The zero-centred norms' gradients are those of the published w. */
const float *qwen35_grad(const qwen35_model *m, const char *name, size_t *n);
/* One AdamW step (torch semantics, betas 0.9 / 0.999, eps 1e-8, step t >= 1) of every
 * weight from its gradient; the weight decay applies to the published w of the
 * zero-centred norms. A tied head is stepped once, as the embedding. */
void qwen35_adamw_step(qwen35_model *m, int t, float lr, float wd);

#endif
