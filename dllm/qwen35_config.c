/* qwen35_config.c: Qwen3.5's config.json (both layouts: qwen3_5_text, and qwen3_5 with
 * its text_config) and the registry descriptor's reader and writer (dllm/arch.c). The
 * config side only -- JSON and the common model config -- so that what reads a model
 * directory's config (the commands, the fuzz harnesses) does not need the model. */
#include "dllm/arch.h"
#include "dllm/json_util.h"
#include "dllm/policy_model.h"
#include "dllm/qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json --------------------------------------------------------------------- */

static int get_int(const json_t *o, const char *key, const char *what, int *out, bool required,
                   dllm_err *err)
{
    long long v = *out;
    bool present = false;
    int rc = ju_get_int(o, key, what, &v, required ? NULL : &present, err);
    if (rc)
        return rc;
    if ((required || present) && (v < 1 || v > (1 << 24)))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': %lld is not a positive size",
                            what, key, v);
    *out = (int)v;
    return 0;
}

bool qwen35_is_config(const char *path)
{
    json_t *root = NULL;
    dllm_err err = {0};
    if (ju_load_file(&root, path, &err))
        return false;
    const json_t *mt = json_object_get(root, "model_type");
    bool yes = json_is_string(mt) && (!strcmp(json_string_value(mt), "qwen3_5") ||
                                      !strcmp(json_string_value(mt), "qwen3_5_text"));
    json_decref(root);
    return yes;
}

static int read_text(const json_t *t, const char *what, qwen35_config *c, dllm_err *err)
{
    int rc = get_int(t, "hidden_size", what, &c->C, true, err);
    rc = rc ? rc : get_int(t, "num_hidden_layers", what, &c->L, true, err);
    rc = rc ? rc : get_int(t, "intermediate_size", what, &c->H, true, err);
    rc = rc ? rc : get_int(t, "vocab_size", what, &c->V, true, err);
    rc = rc ? rc : get_int(t, "num_attention_heads", what, &c->NH, true, err);
    c->NKV = c->NH;
    rc = rc ? rc : get_int(t, "num_key_value_heads", what, &c->NKV, false, err);
    c->HD = c->NH ? c->C / c->NH : 0;
    rc = rc ? rc : get_int(t, "head_dim", what, &c->HD, false, err);
    rc = rc ? rc : get_int(t, "linear_num_key_heads", what, &c->Hk, true, err);
    rc = rc ? rc : get_int(t, "linear_key_head_dim", what, &c->Dk, true, err);
    rc = rc ? rc : get_int(t, "linear_num_value_heads", what, &c->Hv, true, err);
    rc = rc ? rc : get_int(t, "linear_value_head_dim", what, &c->Dv, true, err);
    c->K = 4;
    rc = rc ? rc : get_int(t, "linear_conv_kernel_dim", what, &c->K, false, err);
    rc = rc ? rc : get_int(t, "max_position_embeddings", what, &c->max_pos, false, err);
    if (rc)
        return rc;
    double eps = 1e-6;
    bool present;
    rc = ju_get_real(t, "rms_norm_eps", what, &eps, &present, err);
    c->eps = (float)eps;
    c->tied = false;
    rc = rc ? rc : ju_get_bool(t, "tie_word_embeddings", what, &c->tied, &present, err);
    long long eos = -1;
    const json_t *je = json_object_get(t, "eos_token_id");
    if (json_is_integer(je))
        eos = json_integer_value(je);
    else if (json_is_array(je) && json_is_integer(json_array_get(je, 0)))
        eos = json_integer_value(json_array_get(je, 0));
    c->eos_token_id = eos >= 0 && eos < c->V ? (int)eos : -1;
    const json_t *jb = json_object_get(t, "bos_token_id");
    c->bos_token_id = json_is_integer(jb) && json_integer_value(jb) >= 0 &&
                              json_integer_value(jb) < c->V
                          ? (int)json_integer_value(jb)
                          : -1;
    /* RoPE: rope_parameters (transformers 5) or top-level keys (older layouts) */
    double theta = 10000.0, frac = 1.0;
    const json_t *rp = json_object_get(t, "rope_parameters");
    const json_t *ro = json_is_object(rp) ? rp : t;
    char rwhat[512];
    snprintf(rwhat, sizeof rwhat, "%s%s", what, ro == rp ? " rope_parameters" : "");
    rc = rc ? rc : ju_get_real(ro, "rope_theta", rwhat, &theta, &present, err);
    rc = rc ? rc : ju_get_real(ro, "partial_rotary_factor", rwhat, &frac, &present, err);
    if (rc)
        return rc;
    c->theta = (float)theta;
    /* the factor checked before it sizes anything (a huge one would overflow the int) */
    c->rot = frac > 0 && frac <= 1 ? (int)(c->HD * frac) : 0;
    if (!(frac > 0 && frac <= 1) || c->rot < 2 || c->rot % 2)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: key 'partial_rotary_factor': %g of head_dim %d is not an even "
                            "number of dims", rwhat, frac, c->HD);
    if (c->NH % c->NKV)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: key 'num_key_value_heads': %d does not divide %d heads", what,
                            c->NKV, c->NH);
    if (c->Hv % c->Hk)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: key 'linear_num_key_heads': %d does not divide %d value heads",
                            what, c->Hk, c->Hv);
    if (c->L > QWEN35_MAX_LAYERS)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'num_hidden_layers': %d is over %d",
                            what, c->L, QWEN35_MAX_LAYERS);
    const json_t *lt = json_object_get(t, "layer_types");
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->L)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: key 'layer_types': expected an array of num_hidden_layers (%d) "
                            "entries", what, c->L);
    for (int l = 0; l < c->L; l++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)l));
        if (s && !strcmp(s, "linear_attention"))
            c->kind[l] = QWEN35_LINEAR;
        else if (s && !strcmp(s, "full_attention"))
            c->kind[l] = QWEN35_FULL;
        else
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: key 'layer_types': entry %d \"%s\" is not linear_attention "
                                "or full_attention", what, l, s ? s : "(not a string)");
    }
    return 0;
}

int qwen35_config_parse(const json_t *root, const char *path, qwen35_config *cfg,
                        dllm_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    const char *mt = NULL;
    int rc = ju_get_string(root, "model_type", path, &mt, NULL, err);
    if (!rc && !strcmp(mt, "qwen3_5_text")) {
        rc = read_text(root, path, cfg, err);
    } else if (!rc && !strcmp(mt, "qwen3_5")) {
        const json_t *t = json_object_get(root, "text_config");
        char what[512];
        snprintf(what, sizeof what, "%s text_config", path);
        cfg->composite = true;
        if (!json_is_object(t))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: key 'text_config': missing -- no text model (a vision-only "
                              "checkpoint?)", path);
        else
            rc = read_text(t, what, cfg, err);
        /* the top level may carry the ids and the tying */
        const json_t *tw = json_object_get(root, "tie_word_embeddings");
        if (!rc && json_is_boolean(tw))
            cfg->tied = json_is_true(tw);
    } else if (!rc) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: key 'model_type': \"%s\" is not qwen3_5 or qwen3_5_text", path, mt);
    }
    return rc;
}

int qwen35_config_read(const char *path, qwen35_config *cfg, dllm_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    json_t *root = NULL;
    int rc = ju_load_file(&root, path, err);
    if (rc)
        return rc;
    rc = qwen35_config_parse(root, path, cfg, err);
    json_decref(root);
    return rc;
}

static const char *json_str(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int qwen35_config_read_desc(const json_t *root, const char *path, dllm_model_config *mc,
                            dllm_err *err)
{
    qwen35_config c;
    int rc = qwen35_config_parse(root, path, &c, err);
    if (rc)
        return rc;
    const json_t *t = c.composite ? json_object_get(root, "text_config") : root;
    const json_t *pad = json_object_get(t, "pad_token_id");
    *mc = (dllm_model_config){
        .arch = DLLM_ARCH_QWEN35, .d_model = c.C, .n_layers = c.L, .n_heads = c.NH,
        .n_kv_heads = c.NKV, .head_dim = c.HD, .mlp_hidden = c.H, .vocab_size = c.V,
        .embedding_size = c.V, .max_seq_len = c.max_pos > 0 ? c.max_pos : 4096,
        .rope_theta = c.theta, .rms_norm_eps = c.eps, .mask_token_id = -1,
        .eos_token_id = c.eos_token_id, .bos_token_id = c.bos_token_id,
        /* the published configs name no pad token: the EOS pads, as for Qwen3 */
        .pad_token_id = json_is_integer(pad) && json_integer_value(pad) >= 0 &&
                                json_integer_value(pad) < c.V
                            ? (int)json_integer_value(pad)
                            : c.eos_token_id,
        .weight_tying = c.tied};
    const char *dt = json_str(t, "dtype");
    dt = dt ? dt : json_str(t, "torch_dtype");
    dt = dt ? dt : json_str(root, "dtype");
    dt = dt ? dt : json_str(root, "torch_dtype");
    snprintf(mc->torch_dtype, sizeof mc->torch_dtype, "%s",
             dt && !strcmp(dt, "bfloat16") ? "bfloat16" : "float32");
    return 0;
}

/* The Qwen3.5 preset of mc's sizes: its config.json has layer kinds and Gated DeltaNet
 * sizes the common config does not carry. */
const char *qwen35_preset_of(const dllm_model_config *mc)
{
    static const char *const names[] = {"tiny", "qwen3.5-9b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        qwen35_config c;
        if (!qwen35_preset(names[i], &c, NULL) && c.C == mc->d_model && c.L == mc->n_layers &&
            c.V == mc->vocab_size && c.NH == mc->n_heads && c.H == mc->mlp_hidden)
            return names[i];
    }
    return NULL;
}

json_t *qwen35_config_json_desc(const dllm_arch_desc *a, const dllm_model_config *mc)
{
    (void)a;
    qwen35_config c;
    const char *p = qwen35_preset_of(mc);
    if (!p || qwen35_preset(p, &c, NULL))
        return NULL; /* only a model writes its own (qwen35_save) */
    return qwen35_config_json(&c, mc->torch_dtype[0] ? mc->torch_dtype : "float32");
}

