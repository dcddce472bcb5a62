/* arch.c: the architectures the transformer core knows (their descriptors,
 * arch.h) and the lookups: LLaDA, Qwen3 and Dream. A new member of the family
 * is one more descriptor here, plus its config.json mapping in model_config.c. */
#include "dllm/arch.h"

#include <stdio.h>
#include <string.h>

/* LLaDA (docs/METHOD.md §1): bidirectional, canvas positions, untied head; see llada.h. */
const dllm_arch_desc dllm_arch_llada = {
    .name = "llada", .id = DLLM_ARCH_LLADA,
    .diffusion = true, .causal = false, .qk_norm = false, .qkv_bias = false, .shift_logits = false,
    .tie_allowed = false, .embed_is_vocab = false,
    .rope_pos = DLLM_ROPE_CANVAS,
    .embed = "model.transformer.wte.weight", .final_norm = "model.transformer.ln_f.weight",
    .head = "model.transformer.ff_out.weight",
    .layer_fmt = "model.transformer.blocks.%d.",
    .path = {[DLLM_LIN_Q] = "q_proj", [DLLM_LIN_K] = "k_proj", [DLLM_LIN_V] = "v_proj",
             [DLLM_LIN_O] = "attn_out", [DLLM_LIN_GATE] = "ff_proj", [DLLM_LIN_UP] = "up_proj",
             [DLLM_LIN_DOWN] = "ff_out", [DLLM_T_ATTN_NORM] = "attn_norm",
             [DLLM_T_MLP_NORM] = "ff_norm"},
    .order = {DLLM_T_ATTN_NORM, DLLM_LIN_Q, DLLM_LIN_K, DLLM_LIN_V, DLLM_LIN_O, DLLM_T_MLP_NORM,
              DLLM_LIN_GATE, DLLM_LIN_UP, DLLM_LIN_DOWN},
    .n_order = 9,
    .lora_name = {"q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"},
    .lora_alias = NULL,
};

/* Qwen3 (HF Qwen3ForCausalLM): causal, q/k RMSNorm, left-padded batches,
 * tied or untied head; see qwen3.h. The LLaDA target names are accepted slot
 * for slot. */
static const char *const llada_names[DLLM_NLIN] = {"q_proj", "k_proj", "v_proj", "attn_out",
                                                   "ff_proj", "up_proj", "ff_out"};

const dllm_arch_desc dllm_arch_qwen3 = {
    .name = "qwen3", .id = DLLM_ARCH_QWEN3,
    .diffusion = false, .causal = true, .qk_norm = true, .qkv_bias = false, .shift_logits = false,
    .tie_allowed = true, .embed_is_vocab = true,
    .rope_pos = DLLM_ROPE_REAL_COUNT,
    .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",
    .head = "lm_head.weight",
    .layer_fmt = "model.layers.%d.",
    .path = {[DLLM_LIN_Q] = "self_attn.q_proj", [DLLM_LIN_K] = "self_attn.k_proj",
             [DLLM_LIN_V] = "self_attn.v_proj", [DLLM_LIN_O] = "self_attn.o_proj",
             [DLLM_LIN_GATE] = "mlp.gate_proj", [DLLM_LIN_UP] = "mlp.up_proj",
             [DLLM_LIN_DOWN] = "mlp.down_proj", [DLLM_T_ATTN_NORM] = "input_layernorm",
             [DLLM_T_MLP_NORM] = "post_attention_layernorm",
             [DLLM_T_Q_NORM] = "self_attn.q_norm", [DLLM_T_K_NORM] = "self_attn.k_norm"},
    .order = {DLLM_LIN_Q, DLLM_LIN_K, DLLM_LIN_V, DLLM_LIN_O, DLLM_T_Q_NORM, DLLM_T_K_NORM,
              DLLM_LIN_GATE, DLLM_LIN_UP, DLLM_LIN_DOWN, DLLM_T_ATTN_NORM, DLLM_T_MLP_NORM},
    .n_order = 11,
    .lora_name = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
    .lora_alias = llada_names,
};

/* Dream (Dream-v0 remote code modeling_dream.py, Qwen2.5-initialised):
 * bidirectional attention, q/k/v biases, logits shifted by one position
 * (position t is predicted from hidden state t-1, the first from itself),
 * RoPE positions counting real tokens (position_ids from the attention mask),
 * tied or untied head. Tensor names and order are the published state_dict's. */
const dllm_arch_desc dllm_arch_dream = {
    .name = "dream", .id = DLLM_ARCH_DREAM,
    .diffusion = true, .causal = false, .qk_norm = false, .qkv_bias = true, .shift_logits = true,
    .tie_allowed = true, .embed_is_vocab = true,
    .rope_pos = DLLM_ROPE_REAL_COUNT,
    .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",
    .head = "lm_head.weight",
    .layer_fmt = "model.layers.%d.",
    .path = {[DLLM_LIN_Q] = "self_attn.q_proj", [DLLM_LIN_K] = "self_attn.k_proj",
             [DLLM_LIN_V] = "self_attn.v_proj", [DLLM_LIN_O] = "self_attn.o_proj",
             [DLLM_LIN_GATE] = "mlp.gate_proj", [DLLM_LIN_UP] = "mlp.up_proj",
             [DLLM_LIN_DOWN] = "mlp.down_proj", [DLLM_T_ATTN_NORM] = "input_layernorm",
             [DLLM_T_MLP_NORM] = "post_attention_layernorm",
             [DLLM_T_Q_BIAS] = "self_attn.q_proj", [DLLM_T_K_BIAS] = "self_attn.k_proj",
             [DLLM_T_V_BIAS] = "self_attn.v_proj"},
    .order = {DLLM_LIN_Q, DLLM_T_Q_BIAS, DLLM_LIN_K, DLLM_T_K_BIAS, DLLM_LIN_V, DLLM_T_V_BIAS,
              DLLM_LIN_O, DLLM_LIN_GATE, DLLM_LIN_UP, DLLM_LIN_DOWN, DLLM_T_ATTN_NORM,
              DLLM_T_MLP_NORM},
    .n_order = 12,
    .lora_name = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
    .lora_alias = llada_names,
};

const dllm_arch_desc *dllm_arch_by_name(const char *name)
{
    if (name && !strcmp(name, dllm_arch_dream.name))
        return &dllm_arch_dream;
    if (name && !strcmp(name, dllm_arch_qwen3.name))
        return &dllm_arch_qwen3;
    if (name && !strcmp(name, dllm_arch_llada.name))
        return &dllm_arch_llada;
    return NULL;
}

const dllm_arch_desc *dllm_arch_get(dllm_arch id)
{
    return id == DLLM_ARCH_QWEN3 ? &dllm_arch_qwen3
           : id == DLLM_ARCH_DREAM ? &dllm_arch_dream
                                   : &dllm_arch_llada;
}

int dllm_arch_lora_bit(const dllm_arch_desc *a, const char *name)
{
    for (int j = 0; name && j < DLLM_NLIN; j++)
        if (!strcmp(name, a->lora_name[j]) || (a->lora_alias && !strcmp(name, a->lora_alias[j])))
            return 1 << j;
    return 0;
}

const char *dllm_arch_lora_list(const dllm_arch_desc *a, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int j = 0; j < DLLM_NLIN && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", a->lora_name[j],
                              j == DLLM_NLIN - 2 ? " or " : j < DLLM_NLIN - 1 ? ", " : "");
    return buf;
}

bool dllm_arch_has(const dllm_arch_desc *a, int slot)
{
    for (int i = 0; i < a->n_order; i++)
        if (a->order[i] == slot)
            return true;
    return false;
}
