/* qwen35_init.c: Qwen3.5's named sizes, its config.json as transformers writes it
 * (qwen3_5_text), and a randomly initialised checkpoint in the published tensor
 * names (qwen35.h). */
#include "dllm/qwen35.h"
#include "dllm/json_util.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tiny: the char tokenizer's 128 ids (0 <|endoftext|> EOS, 1 <|startoftext|> BOS), three Gated DeltaNet
 * layers and one full-attention layer, the published ratios at toy sizes (key heads
 * half the value heads, GQA 2:1, RoPE on a quarter of each head).
 * qwen3.5-9b: Qwen/Qwen3.5-9B's text model -- the sizes transformers'
 * Qwen3_5TextConfig documents as its defaults ("Qwen3.5-9B style"), the model card's
 * layout 8 x (3 Gated DeltaNet, 1 gated attention), context 262144, RoPE base 1e7
 * on 64 of 256 dims, EOS <|im_end|> 248044, an untied head. */
static void layout(qwen35_config *c, int every)
{
    for (int l = 0; l < c->L; l++)
        c->kind[l] = (l + 1) % every ? QWEN35_LINEAR : QWEN35_FULL;
}

int qwen35_preset(const char *name, qwen35_config *c, dllm_err *err)
{
    memset(c, 0, sizeof *c);
    if (name && !strcmp(name, "tiny")) {
        *c = (qwen35_config){.C = 64, .L = 4, .H = 176, .V = 128, .NH = 4, .NKV = 2, .HD = 16,
                             .rot = 4, .theta = 10000.0f, .eps = 1e-6f, .Hk = 2, .Dk = 16,
                             .Hv = 4, .Dv = 16, .K = 4, .tied = false, .eos_token_id = 0,
                             .bos_token_id = 1, .max_pos = 512};
    } else if (name && !strcmp(name, "qwen3.5-9b")) {
        *c = (qwen35_config){.C = 4096, .L = 32, .H = 12288, .V = 248320, .NH = 16, .NKV = 4,
                             .HD = 256, .rot = 64, .theta = 10000000.0f, .eps = 1e-6f,
                             .Hk = 16, .Dk = 128, .Hv = 32, .Dv = 128, .K = 4, .tied = false,
                             .eos_token_id = 248044, .bos_token_id = -1, .max_pos = 262144};
    } else {
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--preset %s: a Qwen3.5 preset is %s",
                            name ? name : "(none)", QWEN35_PRESETS);
    }
    layout(c, 4);
    return 0;
}

bool qwen35_preset_published(const char *name) { return name && !strcmp(name, "qwen3.5-9b"); }

/* ---- the tensors ---------------------------------------------------------------------------
 * Every tensor of the text model in the published order and names, with how a fresh model
 * starts: normal(0, 0.02) for the projections, embeddings and convolution (the other
 * architectures' init); the zero-centred norms at w = 0 and the gated norm at 1 (both the
 * identity); A_log = log U(1, 16) and dt_bias = 1 (the published initialisation's ranges). */
typedef enum { INIT_NORMAL, INIT_ZERO, INIT_ONE, INIT_A_LOG } init_kind;

typedef struct {
    char name[96];
    int nd;
    int64_t shape[3];
    init_kind init;
} tensor_spec;

static int conv_dim(const qwen35_config *c) { return 2 * c->Hk * c->Dk + c->Hv * c->Dv; }

/* The specs of c's tensors into s (NULL: count only); returns their count. */
static int specs(const qwen35_config *c, tensor_spec *s)
{
    int n = 0, C = c->C, D = conv_dim(c), VD = c->Hv * c->Dv;
#define T(init_, nd_, d0, d1, d2, ...)                                                              \
    do {                                                                                           \
        if (s) {                                                                                   \
            snprintf(s[n].name, sizeof s[n].name, __VA_ARGS__);                                    \
            s[n].nd = nd_;                                                                         \
            s[n].shape[0] = d0, s[n].shape[1] = d1, s[n].shape[2] = d2;                            \
            s[n].init = init_;                                                                     \
        }                                                                                          \
        n++;                                                                                       \
    } while (0)
    T(INIT_NORMAL, 2, c->V, C, 0, "model.embed_tokens.weight");
    for (int l = 0; l < c->L; l++) {
        T(INIT_ZERO, 1, C, 0, 0, "model.layers.%d.input_layernorm.weight", l);
        if (c->kind[l] == QWEN35_LINEAR) {
            T(INIT_NORMAL, 2, D, C, 0, "model.layers.%d.linear_attn.in_proj_qkv.weight", l);
            T(INIT_NORMAL, 2, VD, C, 0, "model.layers.%d.linear_attn.in_proj_z.weight", l);
            T(INIT_NORMAL, 2, c->Hv, C, 0, "model.layers.%d.linear_attn.in_proj_b.weight", l);
            T(INIT_NORMAL, 2, c->Hv, C, 0, "model.layers.%d.linear_attn.in_proj_a.weight", l);
            T(INIT_NORMAL, 3, D, 1, c->K, "model.layers.%d.linear_attn.conv1d.weight", l);
            T(INIT_ONE, 1, c->Hv, 0, 0, "model.layers.%d.linear_attn.dt_bias", l);
            T(INIT_A_LOG, 1, c->Hv, 0, 0, "model.layers.%d.linear_attn.A_log", l);
            T(INIT_ONE, 1, c->Dv, 0, 0, "model.layers.%d.linear_attn.norm.weight", l);
            T(INIT_NORMAL, 2, C, VD, 0, "model.layers.%d.linear_attn.out_proj.weight", l);
        } else {
            T(INIT_NORMAL, 2, 2 * c->NH * c->HD, C, 0, "model.layers.%d.self_attn.q_proj.weight", l);
            T(INIT_NORMAL, 2, c->NKV * c->HD, C, 0, "model.layers.%d.self_attn.k_proj.weight", l);
            T(INIT_NORMAL, 2, c->NKV * c->HD, C, 0, "model.layers.%d.self_attn.v_proj.weight", l);
            T(INIT_NORMAL, 2, C, c->NH * c->HD, 0, "model.layers.%d.self_attn.o_proj.weight", l);
            T(INIT_ZERO, 1, c->HD, 0, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            T(INIT_ZERO, 1, c->HD, 0, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        T(INIT_ZERO, 1, C, 0, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        T(INIT_NORMAL, 2, c->H, C, 0, "model.layers.%d.mlp.gate_proj.weight", l);
        T(INIT_NORMAL, 2, c->H, C, 0, "model.layers.%d.mlp.up_proj.weight", l);
        T(INIT_NORMAL, 2, C, c->H, 0, "model.layers.%d.mlp.down_proj.weight", l);
    }
    T(INIT_ZERO, 1, C, 0, 0, "model.norm.weight");
    if (!c->tied)
        T(INIT_NORMAL, 2, c->V, C, 0, "lm_head.weight");
#undef T
    return n;
}

static int64_t numel(const tensor_spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->nd; i++)
        n *= s->shape[i];
    return n;
}

int64_t qwen35_num_params(const qwen35_config *c)
{
    int n = specs(c, NULL);
    tensor_spec *s = dllm_calloc((size_t)n, sizeof *s);
    specs(c, s);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += numel(&s[i]);
    free(s);
    return total;
}

/* ---- config.json ----------------------------------------------------------------------- */

json_t *qwen35_config_json(const qwen35_config *c, const char *torch_dtype)
{
    json_t *lt = json_array();
    for (int l = 0; l < c->L; l++)
        json_array_append_new(lt, json_string(c->kind[l] == QWEN35_LINEAR ? "linear_attention"
                                                                          : "full_attention"));
    json_t *rope = json_pack("{s:s, s:f, s:f}", "rope_type", "default", "rope_theta",
                             ju_float_to_decimal(c->theta), "partial_rotary_factor",
                             (double)c->rot / c->HD);
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b,"
        " s:o, s:o, s:o, s:o, s:s, s:b, s:b, s:s}",
        "architectures", "Qwen3_5ForCausalLM", "model_type", "qwen3_5_text", "hidden_size", c->C,
        "num_hidden_layers", c->L, "intermediate_size", c->H, "vocab_size", c->V,
        "num_attention_heads", c->NH, "num_key_value_heads", c->NKV, "head_dim", c->HD,
        "linear_num_key_heads", c->Hk, "linear_key_head_dim", c->Dk, "linear_num_value_heads",
        c->Hv, "linear_value_head_dim", c->Dv, "linear_conv_kernel_dim", c->K,
        "max_position_embeddings", c->max_pos, "rms_norm_eps", ju_float_to_decimal(c->eps),
        "tie_word_embeddings", c->tied, "eos_token_id",
        c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null(), "bos_token_id",
        c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null(), "layer_types", lt,
        "rope_parameters", rope, "hidden_act", "silu", "attn_output_gate", 1, "attention_bias", 0,
        "dtype", torch_dtype);
    return root;
}

int qwen35_config_save(const qwen35_config *c, const char *dir, const char *torch_dtype,
                       dllm_err *err)
{
    json_t *root = qwen35_config_json(c, torch_dtype);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = ju_save_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(16), err);
    json_decref(root);
    return rc;
}

/* ---- random weights ----------------------------------------------------------------------- */

typedef struct {
    const tensor_spec *s;
    uint64_t seed;
    int index; /* the tensor's position: its own stream */
} fill_ctx;

/* Values of elements [off, off + n): one stream per (tensor, chunk), so a value depends on
 * the seed, the tensor and its place only. */
static int fill(void *vctx, size_t off, size_t n, float *dst, dllm_err *err)
{
    (void)err;
    const fill_ctx *f = vctx;
    dllm_rng r = dllm_rng_make(f->seed, DLLM_RNG_INIT, (uint64_t)f->index, off / ST_STREAM_CHUNK);
    for (size_t i = 0; i < n; i++)
        switch (f->s->init) {
        case INIT_NORMAL: dst[i] = (float)(0.02 * dllm_rng_normal(&r)); break;
        case INIT_ZERO: dst[i] = 0.0f; break;
        case INIT_ONE: dst[i] = 1.0f; break;
        case INIT_A_LOG: dst[i] = (float)log(1.0 + 15.0 * dllm_rng_uniform(&r)); break;
        }
    return 0;
}

int qwen35_write_random(const qwen35_config *c, const char *dir, uint64_t seed, st_dtype dtype,
                        size_t max_shard_bytes, dllm_err *err)
{
    int n = specs(c, NULL);
    tensor_spec *s = dllm_calloc((size_t)n, sizeof *s);
    fill_ctx *fc = dllm_calloc((size_t)n, sizeof *fc);
    specs(c, s);
    st_writer *w = st_writer_new();
    st_writer_metadata(w, "format", "pt");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        fc[i] = (fill_ctx){&s[i], seed, i};
        rc = st_writer_add_f32_fn(w, s[i].name, dtype, s[i].nd, s[i].shape, fill, &fc[i], err);
    }
    rc = rc ? rc : st_writer_save_dir(w, dir, max_shard_bytes, err);
    st_writer_free(w);
    free(fc);
    free(s);
    return rc;
}

void qwen35_random_tensor(const qwen35_config *c, const char *name, uint64_t seed, float *dst,
                          size_t n)
{
    int k = specs(c, NULL);
    tensor_spec *s = dllm_calloc((size_t)k, sizeof *s);
    specs(c, s);
    memset(dst, 0, n * sizeof(float));
    for (int i = 0; i < k; i++)
        if (!strcmp(s[i].name, name)) {
            /* the chunks a streamed write asks for: the same values as the file's */
            fill_ctx f = {&s[i], seed, i};
            for (size_t off = 0; off < n; off += ST_STREAM_CHUNK)
                fill(&f, off, n - off < ST_STREAM_CHUNK ? n - off : ST_STREAM_CHUNK, dst + off,
                     NULL);
            break;
        }
    free(s);
}
