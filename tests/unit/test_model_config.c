/* test_model_config.c: config.json loading/saving and the presets.
 *
 * The reference is the published LLaDA-8B-Instruct config.json
 * (tests/data/checkpoint/llada-8b-instruct/config.json, unmodified) and its
 * model.safetensors.index.json total_size of 16031162368 bytes of bf16, i.e.
 * 8015581184 parameters. Each unsupported or inconsistent setting is applied
 * to a copy of the published file and must be rejected with exit code 2 and
 * a message naming the file and the key. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dllm/model_config.h"
#include "tests/harness/harness.h"

static const char *published_dir(void)
{
    static char dir[512];
    const char *d = getenv("DLLM_TEST_DATA");
    snprintf(dir, sizeof dir, "%s/checkpoint/llada-8b-instruct", d ? d : "tests/data");
    return dir;
}

static json_t *load_json(const char *dir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_error_t e;
    json_t *j = json_load_file(p, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", p, e.text);
    return j;
}

/* A fresh directory under the scratch dir. */
static void fresh_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tu_dir, name);
    mkdir(buf, 0777);
}

static void assert_same_config(const dllm_model_config *a, const dllm_model_config *b)
{
    ck_assert_int_eq(a->arch, b->arch);
    ck_assert_int_eq(a->d_model, b->d_model);
    ck_assert_int_eq(a->n_layers, b->n_layers);
    ck_assert_int_eq(a->n_heads, b->n_heads);
    ck_assert_int_eq(a->n_kv_heads, b->n_kv_heads);
    ck_assert_int_eq(a->head_dim, b->head_dim);
    ck_assert_int_eq(a->mlp_hidden, b->mlp_hidden);
    ck_assert_int_eq(a->vocab_size, b->vocab_size);
    ck_assert_int_eq(a->embedding_size, b->embedding_size);
    ck_assert_int_eq(a->max_seq_len, b->max_seq_len);
    ck_assert(a->rope_theta == b->rope_theta);
    ck_assert(a->rms_norm_eps == b->rms_norm_eps);
    ck_assert_int_eq(a->mask_token_id, b->mask_token_id);
    ck_assert_int_eq(a->eos_token_id, b->eos_token_id);
    ck_assert_int_eq(a->pad_token_id, b->pad_token_id);
    ck_assert_int_eq(a->bos_token_id, b->bos_token_id);
    ck_assert_int_eq(a->weight_tying, b->weight_tying);
    ck_assert_str_eq(a->torch_dtype, b->torch_dtype);
}

START_TEST(test_load_published)
{
    dllm_model_config c, p;
    dllm_err err = {0};
    ck_assert_msg(dllm_config_load(&c, published_dir(), &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, DLLM_ARCH_LLADA);
    ck_assert_int_eq(c.d_model, 4096);
    ck_assert_int_eq(c.n_layers, 32);
    ck_assert_int_eq(c.n_heads, 32);
    ck_assert_int_eq(c.n_kv_heads, 32);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.mlp_hidden, 12288);
    ck_assert_int_eq(c.vocab_size, 126464);
    ck_assert_int_eq(c.embedding_size, 126464);
    ck_assert_int_eq(c.max_seq_len, 4096);
    ck_assert(c.rope_theta == 500000.0f);
    ck_assert(c.rms_norm_eps == 1e-5f);
    ck_assert_int_eq(c.mask_token_id, 126336);
    ck_assert_int_eq(c.eos_token_id, 126081);
    ck_assert_int_eq(c.pad_token_id, 126081);
    ck_assert_int_eq(c.bos_token_id, -1); /* not in the published file */
    ck_assert(!c.weight_tying);
    ck_assert_str_eq(c.torch_dtype, "float32"); /* absent: the HF default */

    /* the preset is the published model (plus the tokenizer's BOS and bf16) */
    ck_assert_int_eq(dllm_config_preset(&p, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    ck_assert_int_eq(p.bos_token_id, 126080);
    ck_assert_str_eq(p.torch_dtype, "bfloat16");
    p.bos_token_id = -1;
    snprintf(p.torch_dtype, sizeof p.torch_dtype, "float32");
    assert_same_config(&c, &p);
    /* 16031162368 bytes of bf16 in the published index */
    ck_assert_int_eq(dllm_config_num_params(&c), 16031162368LL / 2);
}
END_TEST

/* Saving the llada-8b preset reproduces the published file key for key;
 * the only additions are bos_token_id and torch_dtype. */
START_TEST(test_save_matches_published)
{
    dllm_model_config p;
    dllm_err err = {0};
    char dir[512];
    fresh_dir(dir, sizeof dir, "save8b");
    ck_assert_int_eq(dllm_config_preset(&p, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    ck_assert_msg(dllm_config_save(&p, dir, &err) == 0, "%s", err.msg);
    json_t *ours = load_json(dir), *pub = load_json(published_dir());
    const char *key;
    json_t *v;
    json_object_foreach(pub, key, v) {
        json_t *o = json_object_get(ours, key);
        ck_assert_msg(o != NULL, "saved config lacks '%s'", key);
        char *a = json_dumps(o, JSON_ENCODE_ANY), *b = json_dumps(v, JSON_ENCODE_ANY);
        ck_assert_msg(json_equal(o, v), "'%s': ours %s, published %s", key, a, b);
        free(a);
        free(b);
    }
    json_object_foreach(ours, key, v)
        if (!json_object_get(pub, key))
            ck_assert_msg(strcmp(key, "bos_token_id") == 0 || strcmp(key, "torch_dtype") == 0,
                          "extra key '%s'", key);
    ck_assert_int_eq(json_integer_value(json_object_get(ours, "bos_token_id")), 126080);
    ck_assert_str_eq(json_string_value(json_object_get(ours, "torch_dtype")), "bfloat16");
    /* the published order is kept (architectures before auto_map before d_model) */
    char *text = json_dumps(ours, 0);
    const char *p1 = strstr(text, "\"architectures\""), *p2 = strstr(text, "\"auto_map\""),
               *p3 = strstr(text, "\"d_model\"");
    ck_assert(p1 && p2 && p3 && p1 < p2 && p2 < p3);
    free(text);
    json_decref(ours);
    json_decref(pub);
}
END_TEST

START_TEST(test_roundtrip_presets)
{
    const struct {
        dllm_arch arch;
        const char *name;
    } ps[] = {{DLLM_ARCH_LLADA, "tiny"}, {DLLM_ARCH_LLADA, "small"}, {DLLM_ARCH_LLADA, "llada-8b"},
              {DLLM_ARCH_QWEN3, "tiny"}, {DLLM_ARCH_QWEN3, "small"}, {DLLM_ARCH_QWEN3, "qwen3-8b"}};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        dllm_model_config a, b;
        dllm_err err = {0};
        char dir[512], name[64];
        snprintf(name, sizeof name, "rt-%d-%s", (int)ps[i].arch, ps[i].name);
        fresh_dir(dir, sizeof dir, name);
        ck_assert_int_eq(dllm_config_preset(&a, ps[i].arch, ps[i].name, &err), 0);
        ck_assert_msg(dllm_config_save(&a, dir, &err) == 0, "%s", err.msg);
        ck_assert_msg(dllm_config_load(&b, dir, &err) == 0, "%s: %s", name, err.msg);
        assert_same_config(&a, &b);
    }
}
END_TEST

START_TEST(test_presets)
{
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "tiny", &err), 0);
    ck_assert_int_eq(c.d_model, 64);
    ck_assert_int_eq(c.n_layers, 2);
    ck_assert_int_eq(c.n_heads, 4);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.mlp_hidden, 176);
    ck_assert_int_eq(c.vocab_size, 128);
    ck_assert_int_eq(c.embedding_size, 128);
    ck_assert_int_eq(c.max_seq_len, 512);
    ck_assert(c.rope_theta == 10000.0f && c.rms_norm_eps == 1e-5f);
    /* the char-level tokenizer: 0 endoftext, 1 startoftext, 2 mdm_mask */
    ck_assert_int_eq(c.eos_token_id, 0);
    ck_assert_int_eq(c.pad_token_id, 0);
    ck_assert_int_eq(c.bos_token_id, 1);
    ck_assert_int_eq(c.mask_token_id, 2);
    ck_assert_str_eq(c.torch_dtype, "float32");

    /* Parameter count = sum over the HF tensor list (docs/METHOD.md §1). */
    int64_t C = c.d_model, V = c.embedding_size, F = c.mlp_hidden, sum = 0;
    sum += V * C + C + V * C; /* wte, ln_f, ff_out (head) */
    for (int l = 0; l < c.n_layers; l++)
        sum += C + C                 /* attn_norm, ff_norm */
               + 4 * C * C           /* q_proj, k_proj, v_proj, attn_out */
               + F * C + F * C + C * F; /* ff_proj, up_proj, ff_out */
    ck_assert_int_eq(dllm_config_num_params(&c), sum);

    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "small", &err), 0);
    ck_assert_int_eq(c.d_model, 512);
    ck_assert_int_eq(c.n_layers, 6);
    ck_assert_int_eq(c.n_heads, 8);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.mlp_hidden, 1536);
    ck_assert_int_eq(c.vocab_size, 8192);
    ck_assert_int_eq(c.max_seq_len, 1024);
    ck_assert_int_eq(c.mask_token_id, 2);

    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    double n = (double)dllm_config_num_params(&c);
    ck_assert(n > 7.9e9 && n < 8.1e9);

    /* Qwen3-8B model card: 8.2B parameters, 6.95B without embeddings. */
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_QWEN3, "qwen3-8b", &err), 0);
    int64_t q = dllm_config_num_params(&c), emb = 2LL * c.vocab_size * c.d_model;
    ck_assert(fabs((double)q / 1e9 - 8.2) < 0.05);
    ck_assert(fabs((double)(q - emb) / 1e9 - 6.95) < 0.005);

    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "huge", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'huge'"));
}
END_TEST

/* ------------------------------------------------------------ rejections */

typedef struct {
    const char *key;
    const char *value; /* JSON text, or NULL to delete the key */
    const char *want;  /* besides the path and the key */
} bad_setting;

static const bad_setting bad_settings[] = {
    {"include_bias", "true", "not supported"},
    {"include_qkv_bias", "true", "not supported"},
    {"layer_norm_type", "\"default\"", "\"rms\""},
    {"block_type", "\"sequential\"", "\"llama\""},
    {"alibi", "true", "not supported"},
    {"rope", "false", "not supported"},
    {"rope", NULL, "missing, and its default (false)"},
    {"weight_tying", "true", "not supported"},
    {"weight_tying", NULL, "missing, and its default (true)"},
    {"activation_type", "\"gelu\"", "\"silu\""},
    {"scale_logits", "true", "not supported"},
    {"attention_layer_norm", "true", "not supported"},
    {"d_model", "0", "must be positive"},
    {"d_model", "-4096", "must be positive"},
    {"n_heads", "30", "do not divide"},
    {"d_model", NULL, "missing"},
    {"n_layers", "0", "must be positive"},
    {"n_heads", "0", "must be positive"},
    {"n_kv_heads", "5", "does not divide"},
    {"mlp_hidden_size", "-1", "must be positive"},
    {"vocab_size", "\"big\"", "expected an integer, found string"},
    {"vocab_size", "0", "must be positive"},
    {"embedding_size", "1000", "smaller than vocab_size"},
    {"max_sequence_length", "0", "must be positive"},
    {"max_sequence_length", "4096.5", "expected an integer, found real"},
    {"mask_token_id", "126464", "outside the embedding table"},
    {"mask_token_id", "-3", "outside the embedding table"},
    {"mask_token_id", NULL, "missing"},
    {"eos_token_id", "200000", "outside the embedding table"},
    {"rope_theta", "0", "positive number"},
    {"rms_norm_eps", "\"1e-5\"", "expected a number"},
    {"torch_dtype", "\"int8\"", "not supported"},
    {"model_type", "\"llama\"", "not supported"},
    {"d_model", "99999999999", "out of range"},
};

/* Writes the published config with one key changed into DIR/config.json. */
static void write_variant(const char *dir, const char *key, const char *value)
{
    json_t *j = load_json(published_dir());
    if (value) {
        json_error_t e;
        json_t *v = json_loads(value, JSON_DECODE_ANY, &e);
        ck_assert_msg(v != NULL, "%s", value);
        json_object_set_new(j, key, v);
    } else {
        json_object_del(j, key);
    }
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(j, p, JSON_INDENT(2)), 0);
    json_decref(j);
}

START_TEST(test_rejects)
{
    const bad_setting *b = &bad_settings[_i];
    char dir[512], name[64], path[600], keyq[80];
    snprintf(name, sizeof name, "bad-%d", _i);
    fresh_dir(dir, sizeof dir, name);
    write_variant(dir, b->key, b->value);
    dllm_model_config c;
    dllm_err err = {0};
    int rc = dllm_config_load(&c, dir, &err);
    ck_assert_msg(rc == DLLM_EXIT_INPUT, "%s=%s: rc %d (%s)", b->key, b->value ? b->value : "(deleted)",
                  rc, err.msg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(keyq, sizeof keyq, "key '%s'", b->key);
    ck_assert_msg(strstr(err.msg, path) != NULL, "no path in: %s", err.msg);
    ck_assert_msg(strstr(err.msg, keyq) != NULL, "no key in: %s", err.msg);
    ck_assert_msg(strstr(err.msg, b->want) != NULL, "no \"%s\" in: %s", b->want, err.msg);
}
END_TEST

START_TEST(test_defaults)
{
    /* null n_kv_heads / embedding_size fall back to n_heads / vocab_size;
     * no model_type but the LLaDA architecture is accepted. */
    char dir[512];
    fresh_dir(dir, sizeof dir, "defaults");
    json_t *j = load_json(published_dir());
    json_object_set_new(j, "n_kv_heads", json_null());
    json_object_set_new(j, "embedding_size", json_null());
    json_object_del(j, "model_type");
    json_object_del(j, "pad_token_id");
    json_object_del(j, "mlp_hidden_size");
    json_object_set_new(j, "bos_token_id", json_integer(126080));
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(j, p, 0), 0);
    json_decref(j);
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_msg(dllm_config_load(&c, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, DLLM_ARCH_LLADA);
    ck_assert_int_eq(c.n_kv_heads, 32);
    ck_assert_int_eq(c.embedding_size, 126464);
    ck_assert_int_eq(c.pad_token_id, 126081);  /* = eos, as the reference */
    ck_assert_int_eq(c.mlp_hidden, 4 * 4096);   /* mlp_ratio * d_model, as the reference */
    ck_assert_int_eq(c.bos_token_id, 126080);
}
END_TEST

START_TEST(test_file_errors)
{
    dllm_model_config c;
    dllm_err err = {0};
    char dir[512], p[600];
    fresh_dir(dir, sizeof dir, "nofile");
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_nonnull(strstr(err.msg, "No such file"));

    fresh_dir(dir, sizeof dir, "broken");
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\n  \"d_model\": 64,\n  \"n_layers\": ,\n}\n", f);
    fclose(f);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    char want[700];
    snprintf(want, sizeof want, "%s:3:", p); /* file:line:col */
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);

    f = fopen(p, "w");
    fputs("[1, 2]", f);
    fclose(f);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_nonnull(strstr(err.msg, "object"));

    f = fopen(p, "w");
    fputs("{\"model_type\": \"llada\", \"d_model\": 64, \"d_model\": 32}", f);
    fclose(f);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_nonnull(strstr(err.msg, "d_model"));

    f = fopen(p, "w");
    fputs("{\"architectures\": [\"GPT2LMHeadModel\"]}", f);
    fclose(f);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'model_type'"));
}
END_TEST

START_TEST(test_qwen3)
{
    dllm_model_config c;
    dllm_err err = {0};
    char dir[512];
    fresh_dir(dir, sizeof dir, "qwen3");
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_QWEN3, "qwen3-8b", &err), 0);
    ck_assert_int_eq(dllm_config_save(&c, dir, &err), 0);
    json_t *j = load_json(dir);
    /* the Qwen3-8B keys as published */
    ck_assert_int_eq(json_integer_value(json_object_get(j, "hidden_size")), 4096);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "num_key_value_heads")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "head_dim")), 128);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "vocab_size")), 151936);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "eos_token_id")), 151645);
    ck_assert(json_number_value(json_object_get(j, "rms_norm_eps")) == 1e-6);
    ck_assert(json_number_value(json_object_get(j, "rope_theta")) == 1e6);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), "qwen3");
    ck_assert(json_is_false(json_object_get(j, "tie_word_embeddings")));
    ck_assert_ptr_null(json_object_get(j, "mask_token_id"));

    json_object_set_new(j, "rope_scaling", json_pack("{sf}", "factor", 4.0));
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(j, p, 0), 0);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'rope_scaling'"));
    ck_assert_ptr_nonnull(strstr(err.msg, p));

    json_object_set_new(j, "rope_scaling", json_null());
    json_object_set_new(j, "attention_bias", json_true());
    ck_assert_int_eq(json_dump_file(j, p, 0), 0);
    ck_assert_int_eq(dllm_config_load(&c, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'attention_bias'"));

    /* tied embeddings are a valid Qwen3 option (the small models use it) */
    json_object_set_new(j, "attention_bias", json_false());
    json_object_set_new(j, "tie_word_embeddings", json_true());
    json_object_set_new(j, "eos_token_id", json_pack("[ii]", 151645, 151643));
    ck_assert_int_eq(json_dump_file(j, p, 0), 0);
    ck_assert_msg(dllm_config_load(&c, dir, &err) == 0, "%s", err.msg);
    ck_assert(c.weight_tying);
    ck_assert_int_eq(c.eos_token_id, 151645);
    ck_assert_int_eq(dllm_config_num_params(&c),
                     8190735360LL - (int64_t)c.vocab_size * c.d_model);
    json_decref(j);
}
END_TEST

static Suite *model_config_suite(void)
{
    Suite *s = suite_create("model_config");
    TCase *tc = tcase_create("published");
    tcase_add_test(tc, test_load_published);
    tcase_add_test(tc, test_save_matches_published);
    tcase_add_test(tc, test_roundtrip_presets);
    tcase_add_test(tc, test_presets);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_qwen3);
    suite_add_tcase(s, tc);
    tc = tcase_create("rejects");
    tcase_add_loop_test(tc, test_rejects, 0, (int)(sizeof bad_settings / sizeof bad_settings[0]));
    tcase_add_test(tc, test_file_errors);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    return tu_scratch(ctx) ? model_config_suite() : NULL;
}
