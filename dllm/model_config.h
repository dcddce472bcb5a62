/* model_config.h: the model's HF config.json (LLaDA, Qwen3 and Dream keys)
 * and the named presets of init-model; which keys and presets an
 * architecture has is its descriptor's (dllm/arch.h). */
#ifndef DLLM_MODEL_CONFIG_H
#define DLLM_MODEL_CONFIG_H

#include "kernels/base.h"

typedef enum {
    DLLM_ARCH_LLADA = 0, DLLM_ARCH_QWEN3 = 1, DLLM_ARCH_DREAM = 2, DLLM_ARCH_QWEN35 = 3
} dllm_arch;

typedef struct {
    dllm_arch arch;
    int d_model;          /* C   [d_model] */
    int n_layers;         /* L   [n_layers] */
    int n_heads;          /* NH  [n_heads] */
    int n_kv_heads;       /* NKV [n_kv_heads] */
    int head_dim;         /* HD = d_model / n_heads for LLaDA */
    int mlp_hidden;       /* [mlp_hidden_size] */
    int vocab_size;       /* [vocab_size] */
    int embedding_size;   /* [embedding_size]: rows of wte and the head (>= vocab_size) */
    int max_seq_len;      /* [max_sequence_length] */
    float rope_theta;     /* [rope_theta] */
    float rms_norm_eps;   /* [rms_norm_eps] */
    int mask_token_id, eos_token_id, pad_token_id, bos_token_id; /* -1 if absent */
    bool weight_tying;    /* [weight_tying]: must be false for LLaDA */
    char torch_dtype[16]; /* "float32" | "bfloat16" */
} dllm_model_config;

/* Reads DIR/config.json (the architecture by its model_type, else by its
 * "architectures" class). Unknown extra keys are fine (real configs carry
 * many); missing or mistyped required keys, unsupported options
 * (include_bias true, non-rms norm, alibi, ...) and inconsistent sizes are
 * input errors naming the file and key. */
int dllm_config_load(dllm_model_config *cfg, const char *dir, dllm_err *err);
/* Writes DIR/config.json with the architecture's published keys (all of them,
 * with the published values for everything this model does not vary). */
int dllm_config_save(const dllm_model_config *cfg, const char *dir, dllm_err *err);
/* The architecture's preset called `preset` (dllm/arch.c): "tiny", "small",
 * "llada-8b" (LLaDA); "tiny", "small", "qwen3-8b" (Qwen3); "tiny", "small",
 * "dream-7b" (Dream). */
int dllm_config_preset(dllm_model_config *cfg, dllm_arch arch, const char *preset, dllm_err *err);
/* Parameter count of the full model. */
int64_t dllm_config_num_params(const dllm_model_config *cfg);

/* The architectures' config.json readers and writers the descriptors point at
 * (dllm_config_reader, dllm_config_writer in dllm/arch.h); a descriptor of a
 * variant may point at them too. */
struct json_t;
struct dllm_arch_desc;
int dllm_config_read_llada(const struct json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err);
int dllm_config_read_qwen3(const struct json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err);
int dllm_config_read_dream(const struct json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err);
struct json_t *dllm_config_json_llada(const struct dllm_arch_desc *a, const dllm_model_config *c);
struct json_t *dllm_config_json_qwen3(const struct dllm_arch_desc *a, const dllm_model_config *c);
struct json_t *dllm_config_json_dream(const struct dllm_arch_desc *a, const dllm_model_config *c);

#endif
