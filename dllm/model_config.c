/* model_config.c: HF config.json <-> dllm_model_config, and the presets.
 *
 * LLaDA (model_type "llada", remote code configuration_llada.py): a key that
 * is absent takes the reference's dataclass default, and options this
 * implementation does not compute (biases, LayerNorm, ALiBi, tied
 * embeddings, ...) are rejected rather than silently ignored, including when
 * the reference default is such an option (e.g. a config without "rope"
 * means rope false there). Exceptions, for usable hand-written configs:
 * embedding_size defaults to vocab_size and pad_token_id to eos_token_id.
 *
 * Qwen3 (model_type "qwen3", transformers Qwen3Config): the dense
 * decoder-only keys; sliding windows, RoPE scaling and attention biases are
 * rejected.
 *
 * Dream (model_type "Dream", remote code configuration_dream.py; Qwen2
 * keys): like Qwen3 without head_dim or q/k norms, with q/k/v biases (the
 * architecture's, not a key), a required mask_token_id and a bidirectional
 * block; sliding windows and RoPE scaling are rejected.
 *
 * Parameter count (C d_model, L layers, NH/NKV heads, HD head_dim, V rows of
 * the embedding, F mlp width):
 *   V*C (wte) + V*C (head, unless tied) + C (final norm)
 *   + L * (C*NH*HD + 2*C*NKV*HD + NH*HD*C   q, k, v, out
 *          + 3*C*F                          gate, up, down
 *          + 2*C                            two RMSNorm weights
 *          + 2*HD with q/k norms (Qwen3)
 *          + NH*HD + 2*NKV*HD with q/k/v biases (Dream)).
 *
 * Which reader and writer a file takes, and the presets, are the
 * architecture descriptor's (dllm/arch.h); this file holds the three
 * architectures' readers and writers the descriptors point at. */
#include "dllm/model_config.h"
#include "dllm/arch.h"
#include "dllm/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ loading */

typedef struct {
    const json_t *root;
    const char *path; /* DIR/config.json, the prefix of every message */
    dllm_err *err;
} cfg_reader;

/* An integer key that must fit an int. Optional when present != NULL. */
static int read_int(cfg_reader *r, const char *key, int *out, bool *present)
{
    long long v = *out;
    int rc = ju_get_int(r->root, key, r->path, &v, present, r->err);
    if (rc)
        return rc;
    if (v < -2147483647LL || v > 2147483647LL)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': %lld is out of range", r->path,
                            key, v);
    *out = (int)v;
    return DLLM_OK;
}

static int read_size(cfg_reader *r, const char *key, int *out, bool *present)
{
    int rc = read_int(r, key, out, present);
    if (rc)
        return rc;
    if ((!present || *present) && *out <= 0)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': must be positive, found %d",
                            r->path, key, *out);
    return DLLM_OK;
}

static int read_float(cfg_reader *r, const char *key, float *out, float def)
{
    double v = def;
    bool present;
    int rc = ju_get_real(r->root, key, r->path, &v, &present, r->err);
    if (rc)
        return rc;
    if (!(v > 0) || !isfinite(v))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': must be a positive number, found %g",
                            r->path, key, v);
    *out = (float)v;
    return DLLM_OK;
}

/* A boolean option this implementation supports only as `need`; `def` is
 * the reference's default when the key is absent (or null). */
static int require_bool(cfg_reader *r, const char *key, bool def, bool need)
{
    bool v = def, present;
    int rc = ju_get_bool(r->root, key, r->path, &v, &present, r->err);
    if (rc)
        return rc;
    if (v == need)
        return DLLM_OK;
    if (!present)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key '%s': missing, and its default (%s) is not supported (need %s)",
                            r->path, key, def ? "true" : "false", need ? "true" : "false");
    return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': %s is not supported (need %s)",
                        r->path, key, v ? "true" : "false", need ? "true" : "false");
}

static int require_string(cfg_reader *r, const char *key, const char *def, const char *need)
{
    const char *v = def;
    bool present;
    int rc = ju_get_string(r->root, key, r->path, &v, &present, r->err);
    if (rc)
        return rc;
    if (strcmp(v, need) == 0)
        return DLLM_OK;
    if (!present)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key '%s': missing, and its default \"%s\" is not supported (need \"%s\")",
                            r->path, key, def, need);
    return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': \"%s\" is not supported (need \"%s\")",
                        r->path, key, v, need);
}

/* A token id: absent/null -> def; present -> must index the embedding table. */
static int read_token(cfg_reader *r, const char *key, int *out, int def, int table)
{
    const json_t *v = json_object_get(r->root, key);
    /* Some configs list several EOS ids; the first is the canonical one. */
    if (json_is_array(v) && json_array_size(v) > 0)
        v = json_array_get(v, 0);
    if (!v || json_is_null(v)) {
        *out = def;
        return DLLM_OK;
    }
    if (!json_is_integer(v))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key '%s': expected an integer, found %s",
                            r->path, key, ju_type_name(v));
    long long id = json_integer_value(v);
    if (id < 0 || id >= table)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key '%s': %lld is outside the embedding table [0, %d)", r->path, key,
                            id, table);
    *out = (int)id;
    return DLLM_OK;
}

static int read_dtype(cfg_reader *r, dllm_model_config *cfg)
{
    const char *dt = "float32";
    bool present;
    int rc = ju_get_string(r->root, "torch_dtype", r->path, &dt, &present, r->err);
    if (rc)
        return rc;
    if (!present && (rc = ju_get_string(r->root, "dtype", r->path, &dt, &present, r->err)))
        return rc; /* transformers 5 names the key "dtype" */
    if (strcmp(dt, "float32") != 0 && strcmp(dt, "bfloat16") != 0 && strcmp(dt, "float16") != 0)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'torch_dtype': \"%s\" is not supported (float32, bfloat16 or float16)",
                            r->path, dt);
    snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", dt);
    return DLLM_OK;
}

/* Head-count consistency shared by both architectures. */
static int check_heads(cfg_reader *r, const dllm_model_config *cfg, const char *kv_key)
{
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key '%s': %d does not divide the %d attention heads", r->path, kv_key,
                            cfg->n_kv_heads, cfg->n_heads);
    return DLLM_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int load_llada(cfg_reader *r, dllm_model_config *cfg)
{
    bool present;
    TRY(read_size(r, "d_model", &cfg->d_model, NULL));
    TRY(read_size(r, "n_layers", &cfg->n_layers, NULL));
    TRY(read_size(r, "n_heads", &cfg->n_heads, NULL));
    TRY(read_size(r, "n_kv_heads", &cfg->n_kv_heads, &present));
    if (!present)
        cfg->n_kv_heads = cfg->n_heads;
    if (cfg->d_model % cfg->n_heads != 0)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'n_heads': %d heads do not divide d_model %d", r->path,
                            cfg->n_heads, cfg->d_model);
    cfg->head_dim = cfg->d_model / cfg->n_heads;
    TRY(check_heads(r, cfg, "n_kv_heads"));
    TRY(read_size(r, "mlp_hidden_size", &cfg->mlp_hidden, &present));
    if (!present) { /* the reference: mlp_ratio * d_model */
        int ratio = 4;
        TRY(read_size(r, "mlp_ratio", &ratio, &present));
        if ((long long)ratio * cfg->d_model > 2147483647LL)
            return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key 'mlp_ratio': %d is too large",
                                r->path, ratio);
        cfg->mlp_hidden = ratio * cfg->d_model;
    }
    TRY(read_size(r, "vocab_size", &cfg->vocab_size, NULL));
    TRY(read_size(r, "embedding_size", &cfg->embedding_size, &present));
    if (!present)
        cfg->embedding_size = cfg->vocab_size;
    if (cfg->embedding_size < cfg->vocab_size)
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'embedding_size': %d is smaller than vocab_size %d", r->path,
                            cfg->embedding_size, cfg->vocab_size);
    TRY(read_size(r, "max_sequence_length", &cfg->max_seq_len, NULL));
    TRY(read_float(r, "rope_theta", &cfg->rope_theta, 10000.0f));
    TRY(read_float(r, "rms_norm_eps", &cfg->rms_norm_eps, 1e-5f));

    if (!json_object_get(r->root, "mask_token_id") ||
        json_is_null(json_object_get(r->root, "mask_token_id")))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'mask_token_id': missing (a masked-diffusion model needs it)",
                            r->path);
    TRY(read_token(r, "mask_token_id", &cfg->mask_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "eos_token_id", &cfg->eos_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "pad_token_id", &cfg->pad_token_id, cfg->eos_token_id, cfg->embedding_size));
    TRY(read_token(r, "bos_token_id", &cfg->bos_token_id, -1, cfg->embedding_size));

    /* What the LLaDA block computes; defaults are configuration_llada.py's. */
    TRY(require_bool(r, "include_bias", false, false));
    TRY(require_bool(r, "include_qkv_bias", false, false));
    TRY(require_bool(r, "bias_for_layer_norm", false, false));
    TRY(require_bool(r, "layer_norm_with_affine", true, true));
    TRY(require_string(r, "layer_norm_type", "default", "rms"));
    TRY(require_string(r, "block_type", "sequential", "llama"));
    TRY(require_string(r, "activation_type", "swiglu", "silu"));
    TRY(require_bool(r, "alibi", false, false));
    TRY(require_bool(r, "rope", false, true));
    TRY(require_bool(r, "weight_tying", true, false));
    TRY(require_bool(r, "attention_layer_norm", false, false));
    TRY(require_bool(r, "input_emb_norm", false, false));
    TRY(require_bool(r, "scale_logits", false, false));
    TRY(require_bool(r, "multi_query_attention", false, false));
    cfg->weight_tying = false;
    return read_dtype(r, cfg);
}

/* transformers 5 writes RoPE settings as "rope_parameters": {"rope_type":
 * "default", "rope_theta": ...} instead of a top-level rope_theta; a present
 * top-level key wins. Only the plain (unscaled) rotation is supported. */
static int read_rope_parameters(cfg_reader *r, dllm_model_config *cfg)
{
    const json_t *rp = json_object_get(r->root, "rope_parameters");
    if (!rp || json_is_null(rp))
        return DLLM_OK;
    if (!json_is_object(rp))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT, "%s: key 'rope_parameters': expected an object, found %s",
                            r->path, ju_type_name(rp));
    const json_t *ty = json_object_get(rp, "rope_type");
    if (ty && !json_is_null(ty) && !(json_is_string(ty) && strcmp(json_string_value(ty), "default") == 0))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'rope_parameters.rope_type': only \"default\" RoPE is supported", r->path);
    if (json_object_get(r->root, "rope_theta"))
        return DLLM_OK;
    cfg_reader sub = {rp, r->path, r->err};
    return read_float(&sub, "rope_theta", &cfg->rope_theta, cfg->rope_theta);
}

static int load_qwen3(cfg_reader *r, dllm_model_config *cfg)
{
    bool present;
    TRY(read_size(r, "hidden_size", &cfg->d_model, NULL));
    TRY(read_size(r, "num_hidden_layers", &cfg->n_layers, NULL));
    TRY(read_size(r, "num_attention_heads", &cfg->n_heads, NULL));
    TRY(read_size(r, "num_key_value_heads", &cfg->n_kv_heads, &present));
    if (!present)
        cfg->n_kv_heads = cfg->n_heads;
    TRY(check_heads(r, cfg, "num_key_value_heads"));
    TRY(read_size(r, "head_dim", &cfg->head_dim, &present));
    if (!present) {
        if (cfg->d_model % cfg->n_heads != 0)
            return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                                "%s: key 'head_dim': missing, and %d heads do not divide hidden_size %d",
                                r->path, cfg->n_heads, cfg->d_model);
        cfg->head_dim = cfg->d_model / cfg->n_heads;
    }
    TRY(read_size(r, "intermediate_size", &cfg->mlp_hidden, NULL));
    TRY(read_size(r, "vocab_size", &cfg->vocab_size, NULL));
    cfg->embedding_size = cfg->vocab_size;
    TRY(read_size(r, "max_position_embeddings", &cfg->max_seq_len, NULL));
    TRY(read_float(r, "rope_theta", &cfg->rope_theta, 10000.0f));
    TRY(read_rope_parameters(r, cfg));
    TRY(read_float(r, "rms_norm_eps", &cfg->rms_norm_eps, 1e-6f));
    TRY(read_token(r, "mask_token_id", &cfg->mask_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "eos_token_id", &cfg->eos_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "pad_token_id", &cfg->pad_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "bos_token_id", &cfg->bos_token_id, -1, cfg->embedding_size));
    cfg->weight_tying = false;
    TRY(ju_get_bool(r->root, "tie_word_embeddings", r->path, &cfg->weight_tying, &present, r->err));
    TRY(require_string(r, "hidden_act", "silu", "silu"));
    TRY(require_bool(r, "attention_bias", false, false));
    TRY(require_bool(r, "use_sliding_window", false, false));
    const json_t *rs = json_object_get(r->root, "rope_scaling");
    if (rs && !json_is_null(rs))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'rope_scaling': RoPE scaling is not supported (need null)", r->path);
    return read_dtype(r, cfg);
}

static int load_dream(cfg_reader *r, dllm_model_config *cfg)
{
    bool present;
    TRY(read_size(r, "hidden_size", &cfg->d_model, NULL));
    TRY(read_size(r, "num_hidden_layers", &cfg->n_layers, NULL));
    TRY(read_size(r, "num_attention_heads", &cfg->n_heads, NULL));
    TRY(read_size(r, "num_key_value_heads", &cfg->n_kv_heads, &present));
    if (!present)
        cfg->n_kv_heads = cfg->n_heads;
    TRY(check_heads(r, cfg, "num_key_value_heads"));
    if (cfg->d_model % cfg->n_heads != 0) /* the published model has no head_dim key */
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'num_attention_heads': %d heads do not divide hidden_size %d",
                            r->path, cfg->n_heads, cfg->d_model);
    cfg->head_dim = cfg->d_model / cfg->n_heads;
    TRY(read_size(r, "intermediate_size", &cfg->mlp_hidden, NULL));
    TRY(read_size(r, "vocab_size", &cfg->vocab_size, NULL));
    cfg->embedding_size = cfg->vocab_size;
    TRY(read_size(r, "max_position_embeddings", &cfg->max_seq_len, NULL));
    TRY(read_float(r, "rope_theta", &cfg->rope_theta, 10000.0f));
    TRY(read_rope_parameters(r, cfg));
    TRY(read_float(r, "rms_norm_eps", &cfg->rms_norm_eps, 1e-6f));
    const json_t *mk = json_object_get(r->root, "mask_token_id");
    if (!mk || json_is_null(mk))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'mask_token_id': missing (a masked-diffusion model needs it)",
                            r->path);
    TRY(read_token(r, "mask_token_id", &cfg->mask_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "eos_token_id", &cfg->eos_token_id, -1, cfg->embedding_size));
    TRY(read_token(r, "pad_token_id", &cfg->pad_token_id, cfg->eos_token_id, cfg->embedding_size));
    TRY(read_token(r, "bos_token_id", &cfg->bos_token_id, -1, cfg->embedding_size));
    cfg->weight_tying = false;
    TRY(ju_get_bool(r->root, "tie_word_embeddings", r->path, &cfg->weight_tying, &present, r->err));
    TRY(require_string(r, "hidden_act", "silu", "silu"));
    TRY(require_bool(r, "use_sliding_window", false, false));
    const json_t *rs = json_object_get(r->root, "rope_scaling");
    if (rs && !json_is_null(rs))
        return dllm_err_set(r->err, DLLM_EXIT_INPUT,
                            "%s: key 'rope_scaling': RoPE scaling is not supported (need null)", r->path);
    return read_dtype(r, cfg);
}

int dllm_config_read_llada(const json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err)
{
    cfg_reader r = {root, path, err};
    return load_llada(&r, cfg);
}

int dllm_config_read_qwen3(const json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err)
{
    cfg_reader r = {root, path, err};
    return load_qwen3(&r, cfg);
}

int dllm_config_read_dream(const json_t *root, const char *path, dllm_model_config *cfg,
                           dllm_err *err)
{
    cfg_reader r = {root, path, err};
    return load_dream(&r, cfg);
}

/* "a, b or c" of the registry's config.json model_type values (or HF classes). */
static const char *arch_list(bool classes, char *buf, size_t cap)
{
    size_t n = 0;
    int k = dllm_arch_count();
    buf[0] = 0;
    for (int i = 0; i < k && n < cap; i++) {
        const dllm_arch_desc *a = dllm_arch_get((dllm_arch)i);
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", classes ? a->hf_class : a->model_type,
                              i == k - 2 ? (classes ? ", " : " or ") : i < k - 1 ? ", " : "");
    }
    return buf;
}

int dllm_config_load(dllm_model_config *cfg, const char *dir, dllm_err *err)
{
    size_t n = strlen(dir);
    char *path = dllm_malloc(n + 16);
    snprintf(path, n + 16, "%s%sconfig.json", dir, n && dir[n - 1] == '/' ? "" : "/");
    json_t *root;
    int rc = ju_load_file(&root, path, err);
    if (rc) {
        free(path);
        return rc;
    }
    memset(cfg, 0, sizeof *cfg);
    const char *mt = NULL;
    bool present;
    const dllm_arch_desc *a = NULL;
    char names[256];
    rc = ju_get_string(root, "model_type", path, &mt, &present, err);
    if (!rc && !present) { /* fall back to the architecture class name */
        const json_t *arch = json_object_get(root, "architectures");
        const json_t *a0 = json_is_array(arch) ? json_array_get(arch, 0) : NULL;
        if (!(a = dllm_arch_by_hf_class(json_is_string(a0) ? json_string_value(a0) : "")))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: key 'model_type': missing (and architectures names none of %s)",
                              path, arch_list(true, names, sizeof names));
    } else if (!rc) {
        a = dllm_arch_by_model_type(mt);
    }
    if (!rc && !a && present) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: key 'model_type': \"%s\" is not supported (%s)", path, mt,
                          arch_list(false, names, sizeof names));
    }
    if (!rc && !(rc = a->config_read(root, path, cfg, err)))
        cfg->arch = a->id;
    json_decref(root);
    free(path);
    return rc;
}

/* ------------------------------------------------------------- saving */

static json_t *real(float f) { return json_real(ju_float_to_decimal(f)); }

/* Optional token id: JSON null when absent. */
static json_t *token(int id) { return id >= 0 ? json_integer(id) : json_null(); }

/* The published LLaDA-8B-Instruct config.json, key for key, in its order,
 * with this model's sizes (plus bos_token_id and torch_dtype). */
json_t *dllm_config_json_llada(const dllm_arch_desc *a, const dllm_model_config *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "activation_type", json_string("silu"));
    json_object_set_new(o, "alibi", json_false());
    json_object_set_new(o, "alibi_bias_max", json_real(8.0));
    json_object_set_new(o, "architectures", json_pack("[s]", a->hf_class));
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "attention_layer_norm", json_false());
    json_object_set_new(o, "attention_layer_norm_with_affine", json_true());
    json_t *am = json_object();
    json_object_set_new(am, "AutoConfig", json_string("configuration_llada.LLaDAConfig"));
    json_object_set_new(am, "AutoModelForCausalLM", json_string("modeling_llada.LLaDAModelLM"));
    json_object_set_new(am, "AutoModel", json_string("modeling_llada.LLaDAModelLM"));
    json_object_set_new(o, "auto_map", am);
    json_object_set_new(o, "bias_for_layer_norm", json_false());
    json_object_set_new(o, "block_group_size", json_integer(1));
    json_object_set_new(o, "block_type", json_string("llama"));
    /* bos_token_id and torch_dtype are not in the published file (the
     * tokenizer carries BOS there); HF configs accept both, and ours keep them. */
    if (c->bos_token_id >= 0)
        json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    json_object_set_new(o, "d_model", json_integer(c->d_model));
    json_object_set_new(o, "embedding_dropout", json_real(0.0));
    json_object_set_new(o, "embedding_size", json_integer(c->embedding_size));
    json_object_set_new(o, "eos_token_id", token(c->eos_token_id));
    json_object_set_new(o, "flash_attention", json_false());
    json_object_set_new(o, "include_bias", json_false());
    json_object_set_new(o, "include_qkv_bias", json_false());
    json_object_set_new(o, "init_cutoff_factor", json_null());
    json_object_set_new(o, "init_device", json_string("meta"));
    json_object_set_new(o, "init_fn", json_string("mitchell"));
    json_object_set_new(o, "init_std", json_real(0.02));
    json_object_set_new(o, "input_emb_norm", json_false());
    json_object_set_new(o, "layer_norm_type", json_string("rms"));
    json_object_set_new(o, "layer_norm_with_affine", json_true());
    json_object_set_new(o, "mask_token_id", token(c->mask_token_id));
    json_object_set_new(o, "max_sequence_length", json_integer(c->max_seq_len));
    json_object_set_new(o, "mlp_hidden_size", json_integer(c->mlp_hidden));
    json_object_set_new(o, "mlp_ratio", json_integer(4));
    json_object_set_new(o, "model_type", json_string(a->model_type));
    json_object_set_new(o, "multi_query_attention", json_null());
    json_object_set_new(o, "n_heads", json_integer(c->n_heads));
    json_object_set_new(o, "n_kv_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "n_layers", json_integer(c->n_layers));
    json_object_set_new(o, "pad_token_id", token(c->pad_token_id));
    json_object_set_new(o, "precision", json_string("amp_bf16"));
    json_object_set_new(o, "residual_dropout", json_real(0.0));
    json_object_set_new(o, "rms_norm_eps", real(c->rms_norm_eps));
    json_object_set_new(o, "rope", json_true());
    json_object_set_new(o, "rope_full_precision", json_true());
    json_object_set_new(o, "rope_theta", real(c->rope_theta));
    json_object_set_new(o, "scale_logits", json_false());
    json_object_set_new(o, "torch_dtype", json_string(c->torch_dtype[0] ? c->torch_dtype : "float32"));
    json_object_set_new(o, "transformers_version", json_string("4.46.3"));
    json_object_set_new(o, "use_cache", json_false());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "weight_tying", json_false());
    return o;
}

/* The published Qwen3-8B config.json key set with this model's sizes. */
json_t *dllm_config_json_qwen3(const dllm_arch_desc *a, const dllm_model_config *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", a->hf_class));
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_object_set_new(o, "bos_token_id", token(c->bos_token_id));
    json_object_set_new(o, "eos_token_id", token(c->eos_token_id));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "hidden_size", json_integer(c->d_model));
    json_object_set_new(o, "initializer_range", json_real(0.02));
    json_object_set_new(o, "intermediate_size", json_integer(c->mlp_hidden));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(o, "max_window_layers", json_integer(c->n_layers));
    json_object_set_new(o, "model_type", json_string(a->model_type));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "rms_norm_eps", real(c->rms_norm_eps));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "rope_theta", real(c->rope_theta));
    json_object_set_new(o, "sliding_window", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->weight_tying));
    json_object_set_new(o, "torch_dtype", json_string(c->torch_dtype[0] ? c->torch_dtype : "float32"));
    json_object_set_new(o, "transformers_version", json_string("4.51.0"));
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    if (c->pad_token_id >= 0)
        json_object_set_new(o, "pad_token_id", json_integer(c->pad_token_id));
    if (c->mask_token_id >= 0)
        json_object_set_new(o, "mask_token_id", json_integer(c->mask_token_id));
    return o;
}

/* The published Dream-v0-Instruct-7B config.json key set with this model's sizes. */
json_t *dllm_config_json_dream(const dllm_arch_desc *a, const dllm_model_config *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", a->hf_class));
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    json_t *am = json_object();
    json_object_set_new(am, "AutoConfig", json_string("configuration_dream.DreamConfig"));
    json_object_set_new(am, "AutoModel", json_string("modeling_dream.DreamModel"));
    json_object_set_new(o, "auto_map", am);
    json_object_set_new(o, "bos_token_id", token(c->bos_token_id));
    json_object_set_new(o, "eos_token_id", token(c->eos_token_id));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "hidden_size", json_integer(c->d_model));
    json_object_set_new(o, "initializer_range", json_real(0.02));
    json_object_set_new(o, "intermediate_size", json_integer(c->mlp_hidden));
    json_object_set_new(o, "mask_token_id", token(c->mask_token_id));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(o, "max_window_layers", json_integer(c->n_layers));
    json_object_set_new(o, "model_type", json_string(a->model_type));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "pad_token_id", token(c->pad_token_id));
    json_object_set_new(o, "rms_norm_eps", real(c->rms_norm_eps));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "rope_theta", real(c->rope_theta));
    json_object_set_new(o, "sliding_window", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->weight_tying));
    json_object_set_new(o, "torch_dtype", json_string(c->torch_dtype[0] ? c->torch_dtype : "float32"));
    json_object_set_new(o, "transformers_version", json_string("4.46.2"));
    json_object_set_new(o, "use_cache", json_false());
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    return o;
}

int dllm_config_save(const dllm_model_config *cfg, const char *dir, dllm_err *err)
{
    const dllm_arch_desc *a = dllm_arch_get(cfg->arch);
    if (!a)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: unknown architecture %d", dir, (int)cfg->arch);
    json_t *o = a->config_write(a, cfg);
    if (!o)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: a %s config.json of these sizes is written by its model, not "
                            "from the common sizes", dir, a->name);
    size_t n = strlen(dir);
    char *path = dllm_malloc(n + 16);
    snprintf(path, n + 16, "%s%sconfig.json", dir, n && dir[n - 1] == '/' ? "" : "/");
    /* 16 digits print the decimal doubles of ju_float_to_decimal exactly as written. */
    int rc = ju_save_file(o, path, JSON_INDENT(2) | JSON_REAL_PRECISION(16), err);
    json_decref(o);
    free(path);
    return rc;
}

/* ------------------------------------------------------------ presets */

int dllm_config_preset(dllm_model_config *cfg, dllm_arch arch, const char *preset, dllm_err *err)
{
    const dllm_arch_desc *a = dllm_arch_get(arch);
    if (!a)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "unknown architecture %d", (int)arch);
    const dllm_arch_preset *p = dllm_arch_preset_get(a, preset);
    if (!p) {
        char names[256];
        size_t n = 0;
        names[0] = 0;
        for (int i = 0; i < a->n_presets && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", a->presets[i].name,
                                  i == a->n_presets - 2 ? " or " : i < a->n_presets - 1 ? ", " : "");
        return dllm_err_set(err, DLLM_EXIT_INPUT, "unknown %s preset '%s' (%s)", a->name, preset,
                            names);
    }
    *cfg = p->cfg;
    cfg->arch = arch;
    if (!cfg->n_kv_heads)
        cfg->n_kv_heads = cfg->n_heads;
    if (!cfg->head_dim)
        cfg->head_dim = cfg->d_model / cfg->n_heads;
    if (!cfg->embedding_size)
        cfg->embedding_size = cfg->vocab_size;
    return DLLM_OK;
}

/* The layer's optional tensors are the descriptor's: q/k norms (HD each), q/k/v biases. */
int64_t dllm_config_num_params(const dllm_model_config *cfg)
{
    const dllm_arch_desc *a = dllm_arch_get(cfg->arch);
    int64_t C = cfg->d_model, V = cfg->embedding_size, F = cfg->mlp_hidden;
    int64_t QD = (int64_t)cfg->n_heads * cfg->head_dim, KVD = (int64_t)cfg->n_kv_heads * cfg->head_dim;
    int64_t layer = C * QD + 2 * C * KVD + QD * C + 3 * C * F + 2 * C;
    if (a->qk_norm)
        layer += 2 * (int64_t)cfg->head_dim;
    if (a->qkv_bias)
        layer += QD + 2 * KVD;
    return V * C + (cfg->weight_tying ? 0 : V * C) + cfg->n_layers * layer + C;
}
