/* arch.c: the architecture registry (arch.h): one array of descriptors --
 * LLaDA, Qwen3 and Dream -- plus those registered at run time, and the lookups
 * over it. A new member of the family is one more descriptor. */
#include "dllm/arch.h"
#include "dllm/policy_model.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The char-level tokenizer's special ids, shared by the tiny and small presets:
 * 0 <|endoftext|>, 1 <|startoftext|>, 2 <|mdm_mask|>. */
#define CHAR_IDS                                                                                   \
    .eos_token_id = 0, .pad_token_id = 0, .bos_token_id = 1, .mask_token_id = 2,                   \
    .rope_theta = 10000.0f, .torch_dtype = "float32"

static const dllm_arch_preset llada_presets[] = {
    {"tiny", {.d_model = 64, .n_layers = 2, .n_heads = 4, .mlp_hidden = 176, .vocab_size = 128,
              .max_seq_len = 512, .rms_norm_eps = 1e-5f, CHAR_IDS}, {NULL, NULL}},
    {"small", {.d_model = 512, .n_layers = 6, .n_heads = 8, .mlp_hidden = 1536, .vocab_size = 8192,
               .max_seq_len = 1024, .rms_norm_eps = 1e-5f, CHAR_IDS}, {NULL, NULL}},
    /* GSAI-ML/LLaDA-8B-Instruct */
    {"llada-8b", {.d_model = 4096, .n_layers = 32, .n_heads = 32, .mlp_hidden = 12288,
                  .vocab_size = 126464, .max_seq_len = 4096, .rope_theta = 500000.0f,
                  .rms_norm_eps = 1e-5f, .mask_token_id = 126336, .eos_token_id = 126081,
                  .pad_token_id = 126081, .bos_token_id = 126080, .torch_dtype = "bfloat16"},
     {"LLaDA-8B-Instruct", "LLaDA-8B-Base"}},
};

static const dllm_arch_preset qwen3_presets[] = {
    {"tiny", {.d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
              .mlp_hidden = 176, .vocab_size = 128, .max_seq_len = 512, .rms_norm_eps = 1e-6f,
              CHAR_IDS}, {NULL, NULL}},
    {"small", {.d_model = 512, .n_layers = 6, .n_heads = 8, .n_kv_heads = 4, .head_dim = 64,
               .mlp_hidden = 1536, .vocab_size = 8192, .max_seq_len = 1024, .rms_norm_eps = 1e-6f,
               CHAR_IDS}, {NULL, NULL}},
    /* Qwen/Qwen3-8B */
    {"qwen3-8b", {.d_model = 4096, .n_layers = 36, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
                  .mlp_hidden = 12288, .vocab_size = 151936, .max_seq_len = 40960,
                  .rope_theta = 1000000.0f, .rms_norm_eps = 1e-6f, .bos_token_id = 151643,
                  .eos_token_id = 151645, .pad_token_id = -1, .mask_token_id = -1,
                  .torch_dtype = "bfloat16"},
     {"Qwen3-8B", "Qwen3-8B-Base"}},
};

/* tiny/small: Qwen2-style sizes (head_dim 16 / 64, GQA) on the char ids */
static const dllm_arch_preset dream_presets[] = {
    {"tiny", {.d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .mlp_hidden = 176,
              .vocab_size = 128, .max_seq_len = 512, .rms_norm_eps = 1e-6f, CHAR_IDS}, {NULL, NULL}},
    {"small", {.d_model = 512, .n_layers = 6, .n_heads = 8, .n_kv_heads = 4, .mlp_hidden = 1536,
               .vocab_size = 8192, .max_seq_len = 1024, .rms_norm_eps = 1e-6f, CHAR_IDS},
     {NULL, NULL}},
    /* Dream-org/Dream-v0-Instruct-7B */
    {"dream-7b", {.d_model = 3584, .n_layers = 28, .n_heads = 28, .n_kv_heads = 4,
                  .mlp_hidden = 18944, .vocab_size = 152064, .max_seq_len = 131072,
                  .rope_theta = 1000000.0f, .rms_norm_eps = 1e-6f, .mask_token_id = 151666,
                  .eos_token_id = 151643, .pad_token_id = 151643, .bos_token_id = 151643,
                  .torch_dtype = "bfloat16"},
     {"Dream-v0-Instruct-7B", "Dream-v0-Base-7B"}},
};

/* The common sizes of Qwen3.5's presets (the rest: dllm/qwen35_init.c, qwen35_preset). */
static const dllm_arch_preset qwen35_presets[] = {
    {"tiny", {.d_model = 64, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
              .mlp_hidden = 176, .vocab_size = 128, .max_seq_len = 512, .rms_norm_eps = 1e-6f,
              CHAR_IDS}, {NULL, NULL}},
    /* Qwen/Qwen3.5-9B's text model */
    {"qwen3.5-9b", {.d_model = 4096, .n_layers = 32, .n_heads = 16, .n_kv_heads = 4,
                    .head_dim = 256, .mlp_hidden = 12288, .vocab_size = 248320,
                    .max_seq_len = 262144, .rope_theta = 10000000.0f, .rms_norm_eps = 1e-6f,
                    .bos_token_id = -1, .eos_token_id = 248044, .pad_token_id = -1,
                    .mask_token_id = -1, .torch_dtype = "bfloat16"},
     {"Qwen3.5-9B", "Qwen3.5-9B-Base"}},
};

#define PRESETS(p) .presets = p, .n_presets = (int)(sizeof p / sizeof p[0])

/* Qwen3.5's further LoRA targets: its Gated DeltaNet layers' projections. */
static const char *const qwen35_lora_more[] = {"in_proj_qkv", "in_proj_z", "out_proj", NULL};

/* LLaDA names, accepted slot for slot by Qwen3 and Dream. */
static const char *const llada_names[DLLM_NLIN] = {"q_proj", "k_proj", "v_proj", "attn_out",
                                                   "ff_proj", "up_proj", "ff_out"};

/* The HF Qwen family's layout (Qwen2.5, which Dream keeps; Qwen3; Qwen3.5's full-attention
 * layers and MLP): tensor names, the layer's paths, LoRA target names (LLaDA's accepted
 * slot for slot). */
#define QWEN_TENSORS                                                                             \
    .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",                     \
    .head = "lm_head.weight", .layer_fmt = "model.layers.%d."
#define QWEN_LAYER_PATHS                                                                         \
    [DLLM_LIN_Q] = "self_attn.q_proj", [DLLM_LIN_K] = "self_attn.k_proj",                        \
    [DLLM_LIN_V] = "self_attn.v_proj", [DLLM_LIN_O] = "self_attn.o_proj",                        \
    [DLLM_LIN_GATE] = "mlp.gate_proj", [DLLM_LIN_UP] = "mlp.up_proj",                            \
    [DLLM_LIN_DOWN] = "mlp.down_proj", [DLLM_T_ATTN_NORM] = "input_layernorm",                   \
    [DLLM_T_MLP_NORM] = "post_attention_layernorm"
#define QWEN_LORA                                                                                \
    .lora_name = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},  \
    .lora_alias = llada_names
/* Qwen3's layer (and Qwen3.5's full-attention one): q/k RMSNorm, no biases. */
#define QWEN3_LAYER                                                                              \
    .path = {QWEN_LAYER_PATHS, [DLLM_T_Q_NORM] = "self_attn.q_norm",                             \
             [DLLM_T_K_NORM] = "self_attn.k_norm"},                                              \
    .order = {DLLM_LIN_Q, DLLM_LIN_K, DLLM_LIN_V, DLLM_LIN_O, DLLM_T_Q_NORM, DLLM_T_K_NORM,      \
              DLLM_LIN_GATE, DLLM_LIN_UP, DLLM_LIN_DOWN, DLLM_T_ATTN_NORM, DLLM_T_MLP_NORM},     \
    .n_order = 11

const dllm_arch_desc dllm_arch_builtin[DLLM_ARCH_BUILTIN] = {
/* LLaDA (docs/METHOD.md §1): bidirectional, canvas positions, untied head; see llada.h. */
[DLLM_ARCH_LLADA] = {
    .name = "llada", .id = DLLM_ARCH_LLADA,
    .sampler = DLLM_SAMPLER_BLOCK, .chat = DLLM_CHAT_LLADA, .causal = false, .qk_norm = false, .qkv_bias = false, .shift_logits = false,
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
    .model_type = "llada", .hf_class = "LLaDAModelLM",
    .config_read = dllm_config_read_llada, .config_write = dllm_config_json_llada,
    PRESETS(llada_presets),
},

/* Qwen3 (HF Qwen3ForCausalLM): causal, q/k RMSNorm, left-padded batches,
 * tied or untied head; see qwen3.h. The LLaDA target names are accepted slot
 * for slot. */
[DLLM_ARCH_QWEN3] = {
    .name = "qwen3", .id = DLLM_ARCH_QWEN3,
    .sampler = DLLM_SAMPLER_AR, .chat = DLLM_CHAT_QWEN3, .causal = true, .qk_norm = true, .qkv_bias = false, .shift_logits = false,
    .tie_allowed = true, .embed_is_vocab = true,
    .rope_pos = DLLM_ROPE_REAL_COUNT,
    QWEN_TENSORS,
    QWEN3_LAYER,
    QWEN_LORA,
    .model_type = "qwen3", .hf_class = "Qwen3ForCausalLM",
    .config_read = dllm_config_read_qwen3, .config_write = dllm_config_json_qwen3,
    PRESETS(qwen3_presets),
},

/* Dream (Dream-v0 remote code modeling_dream.py, Qwen2.5-initialised):
 * bidirectional attention, q/k/v biases, logits shifted by one position
 * (position t is predicted from hidden state t-1, the first from itself),
 * RoPE positions counting real tokens (position_ids from the attention mask),
 * tied or untied head. Tensor names and order are the published state_dict's. */
[DLLM_ARCH_DREAM] = {
    .name = "dream", .id = DLLM_ARCH_DREAM,
    .sampler = DLLM_SAMPLER_DREAM, .chat = DLLM_CHAT_QWEN25, .causal = false, .qk_norm = false, .qkv_bias = true, .shift_logits = true,
    .tie_allowed = true, .embed_is_vocab = true,
    .rope_pos = DLLM_ROPE_REAL_COUNT,
    QWEN_TENSORS,
    .path = {QWEN_LAYER_PATHS, [DLLM_T_Q_BIAS] = "self_attn.q_proj",
             [DLLM_T_K_BIAS] = "self_attn.k_proj", [DLLM_T_V_BIAS] = "self_attn.v_proj"},
    .order = {DLLM_LIN_Q, DLLM_T_Q_BIAS, DLLM_LIN_K, DLLM_T_K_BIAS, DLLM_LIN_V, DLLM_T_V_BIAS,
              DLLM_LIN_O, DLLM_LIN_GATE, DLLM_LIN_UP, DLLM_LIN_DOWN, DLLM_T_ATTN_NORM,
              DLLM_T_MLP_NORM},
    .n_order = 12,
    QWEN_LORA,
    .model_type = "Dream", .model_type_alias = "dream", .hf_class = "DreamModel",
    .config_read = dllm_config_read_dream, .config_write = dllm_config_json_dream,
    PRESETS(dream_presets),
},

/* Qwen3.5 (HF Qwen3_5ForCausalLM, docs/QWEN35.md): causal, layers of two kinds
 * (config.json's layer_types), computed by its own model behind the policy
 * (dllm/qwen35_policy.c); the names below are its full-attention layers' and MLP's,
 * with LLaDA's accepted for them as Qwen3 accepts them (the default target list), and
 * its Gated DeltaNet projections' names beside them. */
[DLLM_ARCH_QWEN35] = {
    .name = "qwen3.5", .id = DLLM_ARCH_QWEN35,
    .sampler = DLLM_SAMPLER_AR, .chat = DLLM_CHAT_QWEN35, .causal = true, .qk_norm = true, .qkv_bias = false, .shift_logits = false,
    .tie_allowed = true, .embed_is_vocab = true,
    .rope_pos = DLLM_ROPE_REAL_COUNT,
    QWEN_TENSORS,
    QWEN3_LAYER,
    QWEN_LORA,
    .lora_more = qwen35_lora_more,
    .model_type = "qwen3_5_text", .model_type_alias = "qwen3_5", .hf_class = "Qwen3_5ForCausalLM",
    .config_read = qwen35_config_read_desc, .config_write = qwen35_config_json_desc,
    PRESETS(qwen35_presets),
    .model = &qwen35_model_ops,
},
};

/* Descriptors registered at run time, ids DLLM_ARCH_BUILTIN and up. */
static const dllm_arch_desc *registered[DLLM_ARCH_MAX - DLLM_ARCH_BUILTIN];
static int n_registered;

int dllm_arch_count(void) { return DLLM_ARCH_BUILTIN + n_registered; }

const dllm_arch_desc *dllm_arch_get(dllm_arch id)
{
    if ((int)id >= DLLM_ARCH_BUILTIN && (int)id < dllm_arch_count())
        return registered[id - DLLM_ARCH_BUILTIN];
    return (int)id >= 0 && (int)id < DLLM_ARCH_BUILTIN ? &dllm_arch_builtin[id] : NULL;
}

const char *dllm_arch_list(char *buf, size_t cap)
{
    size_t n = 0;
    int k = dllm_arch_count();
    buf[0] = 0;
    for (int i = 0; i < k && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", dllm_arch_get((dllm_arch)i)->name,
                              i == k - 2 ? " or " : i < k - 1 ? ", " : "");
    return buf;
}

static bool same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

const dllm_arch_desc *dllm_arch_by_name(const char *name)
{
    for (int i = 0; i < dllm_arch_count(); i++)
        if (same(name, dllm_arch_get((dllm_arch)i)->name))
            return dllm_arch_get((dllm_arch)i);
    return NULL;
}

const dllm_arch_desc *dllm_arch_by_model_type(const char *s)
{
    for (int i = 0; i < dllm_arch_count(); i++) {
        const dllm_arch_desc *a = dllm_arch_get((dllm_arch)i);
        if (same(s, a->model_type) || same(s, a->model_type_alias))
            return a;
    }
    return NULL;
}

const dllm_arch_desc *dllm_arch_by_hf_class(const char *s)
{
    for (int i = 0; i < dllm_arch_count(); i++)
        if (same(s, dllm_arch_get((dllm_arch)i)->hf_class))
            return dllm_arch_get((dllm_arch)i);
    return NULL;
}

int dllm_arch_register(dllm_arch_desc *a, dllm_err *err)
{
    if (dllm_arch_count() >= DLLM_ARCH_MAX)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "architecture '%s': the registry is full (%d)",
                            a->name, DLLM_ARCH_MAX);
    if (!a->name || dllm_arch_by_name(a->name))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "architecture '%s': the name is taken",
                            a->name ? a->name : "(null)");
    if (!a->model_type || dllm_arch_by_model_type(a->model_type) ||
        (a->model_type_alias && dllm_arch_by_model_type(a->model_type_alias)))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "architecture '%s': model_type '%s' is taken",
                            a->name, a->model_type ? a->model_type : "(null)");
    if (!a->config_read || !a->config_write || a->n_presets < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "architecture '%s': the descriptor has no config.json reader or writer",
                            a->name);
    a->id = (dllm_arch)dllm_arch_count();
    registered[n_registered++] = a;
    return DLLM_OK;
}

const dllm_arch_preset *dllm_arch_preset_get(const dllm_arch_desc *a, const char *name)
{
    for (int i = 0; a && i < a->n_presets; i++)
        if (same(name, a->presets[i].name))
            return &a->presets[i];
    return NULL;
}

const dllm_arch_desc *dllm_arch_of_preset(const char *name, const dllm_arch_desc *fallback)
{
    if (dllm_arch_preset_get(fallback, name))
        return fallback;
    for (int i = 0; i < dllm_arch_count(); i++)
        if (dllm_arch_preset_get(dllm_arch_get((dllm_arch)i), name))
            return dllm_arch_get((dllm_arch)i);
    return NULL;
}

const dllm_arch_desc *dllm_arch_of_published(const char *dir_name, const dllm_arch_preset **preset)
{
    for (int i = 0; i < dllm_arch_count(); i++) {
        const dllm_arch_desc *a = dllm_arch_get((dllm_arch)i);
        for (int k = 0; k < a->n_presets; k++)
            for (int j = 0; j < 2; j++)
                if (a->presets[k].published[j] && !strcasecmp(dir_name, a->presets[k].published[j])) {
                    *preset = &a->presets[k];
                    return a;
                }
    }
    return NULL;
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
