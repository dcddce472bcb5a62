/* arch.h: the architecture descriptor -- everything that distinguishes one
 * member of the transformer family the core (dllm/transformer.h) computes from
 * another. The core is one pre-norm block,
 *
 *   x = embed[tokens]
 *   per layer: n1 = attn_norm(x)
 *              q = RoPE([q_norm](q_proj n1 [+ q_bias])), k likewise, v = v_proj n1 [+ v_bias]
 *              h = x + o_proj(Attn(q, k, v))      (GQA; causal or bidirectional)
 *              x' = h + down_proj(silu(gate_proj n2) * up_proj n2),  n2 = mlp_norm(h)
 *   logits = head(final_norm(x))                (head = embed when tied)
 *
 * and the descriptor says which of the bracketed parts exist, how attention
 * and RoPE positions see a left-padded batch, whether the logits are shifted
 * by one position, and what the tensors are called in the HF checkpoint and
 * the PEFT adapter. LLaDA, Qwen3 and Dream (Qwen2-style: bidirectional, q/k/v
 * biases, shifted logits) are descriptors (arch.c). */
#ifndef DLLM_ARCH_H
#define DLLM_ARCH_H

#include "dllm/model_config.h"

#include <stdbool.h>

/* The seven layer linears (slot order = LoRA bit order). */
enum { DLLM_LIN_Q, DLLM_LIN_K, DLLM_LIN_V, DLLM_LIN_O, DLLM_LIN_GATE, DLLM_LIN_UP,
       DLLM_LIN_DOWN, DLLM_NLIN };
/* Every per-layer tensor: the linears, then norms and biases. */
enum { DLLM_T_ATTN_NORM = DLLM_NLIN, DLLM_T_MLP_NORM, DLLM_T_Q_NORM, DLLM_T_K_NORM,
       DLLM_T_Q_BIAS, DLLM_T_K_BIAS, DLLM_T_V_BIAS, DLLM_NT };

/* LoRA target bits, by linear slot. */
enum {
    LORA_Q_PROJ = 1 << DLLM_LIN_Q, LORA_K_PROJ = 1 << DLLM_LIN_K, LORA_V_PROJ = 1 << DLLM_LIN_V,
    LORA_ATTN_OUT = 1 << DLLM_LIN_O, LORA_FF_PROJ = 1 << DLLM_LIN_GATE,
    LORA_UP_PROJ = 1 << DLLM_LIN_UP, LORA_FF_OUT = 1 << DLLM_LIN_DOWN,
    LORA_ALL = 0x7f
};

/* RoPE position of row (b, t): the canvas index t (LLaDA), or the count of
 * real tokens before it in its row under the key mask (Qwen3, Dream: the
 * position_ids HF derives for a left-padded batch; padding at 0). */
typedef enum { DLLM_ROPE_CANVAS = 0, DLLM_ROPE_REAL_COUNT = 1 } dllm_rope_pos;

typedef struct dllm_arch_desc {
    const char *name;       /* "llada", "qwen3", "dream" */
    dllm_arch id;           /* model_config's arch (config.json model_type) */
    bool diffusion;         /* sampled by the denoising sampler (else AR decoding) */
    bool causal;            /* causal attention (else bidirectional) */
    bool qk_norm;           /* RMSNorm over head_dim on q and k, per head, before RoPE */
    bool qkv_bias;          /* q/k/v projections carry biases */
    bool shift_logits;      /* logits at t come from position t-1 (t = 0 from itself) */
    bool tie_allowed;       /* config weight_tying may be true (head = embedding) */
    bool embed_is_vocab;    /* embedding_size must equal vocab_size */
    dllm_rope_pos rope_pos;
    /* HF tensor names: the top-level ones in full, a layer's as
     * layer_fmt (with %d) + path[slot] + ".weight" (".bias" for bias slots) */
    const char *embed, *final_norm, *head;
    const char *layer_fmt;
    const char *path[DLLM_NT];
    /* the HF state_dict order of a layer's tensors (the slots it has) */
    int order[DLLM_NT];
    int n_order;
    /* LoRA target names (PEFT target_modules), slot for slot; alias: further
     * accepted names, or NULL */
    const char *lora_name[DLLM_NLIN];
    const char *const *lora_alias;
} dllm_arch_desc;

extern const dllm_arch_desc dllm_arch_llada;
extern const dllm_arch_desc dllm_arch_qwen3;
extern const dllm_arch_desc dllm_arch_dream;

/* The descriptor of a config's arch. */
const dllm_arch_desc *dllm_arch_get(dllm_arch id);
/* The descriptor called `name` ("llada", "qwen3", "dream"); NULL if none. */
const dllm_arch_desc *dllm_arch_by_name(const char *name);
/* "q_proj" -> LORA_Q_PROJ (the arch's names, then its aliases); 0 if unknown. */
int dllm_arch_lora_bit(const dllm_arch_desc *a, const char *name);
/* "q_proj, k_proj, ... or down_proj": the arch's target names, for messages. */
const char *dllm_arch_lora_list(const dllm_arch_desc *a, char *buf, size_t cap);
/* Whether layer slot t exists in the arch (norms and biases are optional). */
bool dllm_arch_has(const dllm_arch_desc *a, int slot);

#endif
