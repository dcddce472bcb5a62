/* llada.c: the LLaDA architecture descriptor (llada.h). */
#include "dllm/llada.h"

const dllm_arch_desc dllm_arch_llada = {
    .name = "llada",
    .id = DLLM_ARCH_LLADA,
    .diffusion = true,
    .causal = false,
    .qk_norm = false,
    .qkv_bias = false,
    .shift_logits = false,
    .tie_allowed = false,
    .embed_is_vocab = false,
    .rope_pos = DLLM_ROPE_CANVAS,
    .embed = "model.transformer.wte.weight",
    .final_norm = "model.transformer.ln_f.weight",
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
