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
 * the PEFT adapter. Beyond the block it says how the model is sampled, which
 * chat template its checkpoints use, how its config.json reads and writes,
 * and its named sizes (presets).
 *
 * The registry is one array of descriptors (arch.c): LLaDA, Qwen3 and Dream
 * (Qwen2-style: bidirectional, q/k/v biases, shifted logits), which the core
 * computes, and Qwen3.5, whose layers are not all of the block above (Gated
 * DeltaNet linear attention beside gated full attention): its descriptor names a
 * model of its own behind the policy (`model`, dllm/policy_model.h). Callers ask a
 * descriptor, never compare architecture ids; a further architecture is one
 * more descriptor (dllm_arch_register adds one at run time). */
#ifndef DLLM_ARCH_H
#define DLLM_ARCH_H

#include "dllm/chat.h"
#include "dllm/model_config.h"

#include <stdbool.h>

struct json_t;
struct dllm_model_ops;

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

/* How rollouts decode: LLaDA's semi-autoregressive block denoising
 * (dllm/sampler.h), Dream's whole-canvas denoising over shifted logits
 * (dllm/dream_sampler.h), or autoregressive decoding with a KV cache
 * (dllm/ar_sampler.h). The first two are masked diffusion. */
typedef enum { DLLM_SAMPLER_BLOCK = 0, DLLM_SAMPLER_DREAM = 1, DLLM_SAMPLER_AR = 2 } dllm_sampler_family;

/* A named size of an architecture (init-model --preset, model.preset, plan
 * --preset). Fields left 0 are derived: n_kv_heads = n_heads, head_dim =
 * d_model / n_heads, embedding_size = vocab_size. */
typedef struct {
    const char *name;           /* "tiny", "small", "llada-8b", ... */
    dllm_model_config cfg;      /* every field but arch */
    const char *published[2];   /* HF directory names of checkpoints of these sizes, or NULL */
} dllm_arch_preset;

struct dllm_arch_desc;
/* config.json: read the parsed ROOT of PATH (the prefix of every message)
 * into cfg (all but arch); build the published key set of cfg. */
typedef int (*dllm_config_reader)(const struct json_t *root, const char *path,
                                  dllm_model_config *cfg, dllm_err *err);
typedef struct json_t *(*dllm_config_writer)(const struct dllm_arch_desc *a,
                                             const dllm_model_config *cfg);

typedef struct dllm_arch_desc {
    const char *name;       /* "llada", "qwen3", "dream": model.arch */
    dllm_arch id;           /* index in the registry (set by dllm_arch_register) */
    dllm_sampler_family sampler;
    dllm_chat_format chat;  /* the template when the tokenizer's config names none */
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
    /* further target names of a model of its own (NULL-terminated; NULL: none): the
     * config accepts them, its model (dllm/policy_model.h) resolves every name */
    const char *const *lora_more;
    /* config.json: model_type as written (and a further spelling read, or
     * NULL), the HF class in "architectures" (read when model_type is absent) */
    const char *model_type, *model_type_alias, *hf_class;
    dllm_config_reader config_read;
    dllm_config_writer config_write;
    const dllm_arch_preset *presets;
    int n_presets;
    /* NULL: the transformer core (dllm/transformer.h) computes the model; else the
     * model behind the policy that does (dllm/policy_model.h): the commands reach it
     * through the policy only */
    const struct dllm_model_ops *model;
} dllm_arch_desc;

/* The built-in descriptors, indexed by their ids. */
#define DLLM_ARCH_BUILTIN 4
extern const dllm_arch_desc dllm_arch_builtin[DLLM_ARCH_BUILTIN];
#define dllm_arch_llada (dllm_arch_builtin[DLLM_ARCH_LLADA])
#define dllm_arch_qwen3 (dllm_arch_builtin[DLLM_ARCH_QWEN3])
#define dllm_arch_dream (dllm_arch_builtin[DLLM_ARCH_DREAM])
#define dllm_arch_qwen35 (dllm_arch_builtin[DLLM_ARCH_QWEN35])
/* At most this many architectures, built-in and registered. */
#define DLLM_ARCH_MAX 8

/* Adds a descriptor to the registry (its id is set to the next free one);
 * `a` must outlive every use. An input error when its name or model_type is
 * taken or the registry is full. */
int dllm_arch_register(dllm_arch_desc *a, dllm_err *err);
/* How many architectures the registry holds; their ids are 0 .. count-1. */
int dllm_arch_count(void);
/* "llada, qwen3 or dream": the registry's names, for messages. */
const char *dllm_arch_list(char *buf, size_t cap);
/* The descriptor of a config's arch (an id the registry holds). */
const dllm_arch_desc *dllm_arch_get(dllm_arch id);
/* The descriptor called `name` ("llada", "qwen3", "dream"); NULL if none. */
const dllm_arch_desc *dllm_arch_by_name(const char *name);
/* The descriptor whose config.json model_type (or HF class) is `s`; NULL if none. */
const dllm_arch_desc *dllm_arch_by_model_type(const char *s);
const dllm_arch_desc *dllm_arch_by_hf_class(const char *s);
/* The preset called `name` of a; NULL if it has none. */
const dllm_arch_preset *dllm_arch_preset_get(const dllm_arch_desc *a, const char *name);
/* The architecture a preset name implies: `fallback` when it has the preset
 * (the shared sizes, "tiny", "small"), else the first that does; NULL if none. */
const dllm_arch_desc *dllm_arch_of_preset(const char *name, const dllm_arch_desc *fallback);
/* The architecture and preset of a published checkpoint's HF directory name
 * ("LLaDA-8B-Instruct", any case; dllm_arch_preset.published); NULL if none. */
const dllm_arch_desc *dllm_arch_of_published(const char *dir_name, const dllm_arch_preset **preset);
/* Whether a's rollouts denoise a masked canvas (block or Dream sampler). */
static inline bool dllm_arch_is_diffusion(const dllm_arch_desc *a)
{
    return a->sampler != DLLM_SAMPLER_AR;
}
/* Whether the transformer core computes a's models (else a model of its own behind the
 * policy does: a->model). */
static inline bool dllm_arch_in_core(const dllm_arch_desc *a)
{
    return !a->model;
}
/* "q_proj" -> LORA_Q_PROJ (the arch's names, then its aliases); 0 if unknown. */
int dllm_arch_lora_bit(const dllm_arch_desc *a, const char *name);
/* "q_proj, k_proj, ... or down_proj": the arch's target names, for messages. */
const char *dllm_arch_lora_list(const dllm_arch_desc *a, char *buf, size_t cap);
/* Whether layer slot t exists in the arch (norms and biases are optional). */
bool dllm_arch_has(const dllm_arch_desc *a, int slot);

#endif
