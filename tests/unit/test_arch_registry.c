/* test_arch_registry.c: a fourth architecture is one descriptor.
 *
 * The descriptor below is defined here and nowhere else: a LLaDA-like variant
 * under a new name, with its own config.json model_type and class, its own HF
 * tensor names and its own preset table (dllm/arch.h). Registered at start-up,
 * it is driven through the commands themselves, in this process (init-model,
 * score, generate, sft, linked into this binary), and the results are compared
 * with those of a LLaDA model with the same weights: the block is LLaDA's, so
 * every number must agree bit for bit, while the files carry the variant's
 * names. */
#include "dllm/arch.h"
#include "dllm/safetensors.h"
#include "dllm/transformer.h"
#include "src/cli/commands.h"
#include "src/config/yaml_config.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* src/cli/main.c's; the commands linked here refer to it. */
const char dllm_git_revision[] = "test";

static dllm_arch_desc variant;
static dllm_arch_preset variant_presets[2];

/* The variant: LLaDA's block and sampler, other names everywhere a checkpoint
 * shows them, and presets of its own ("tiny" is LLaDA's sizes, so the two can
 * be compared; "wide" is one LLaDA does not have). */
static void make_variant(void)
{
    variant = dllm_arch_llada;
    variant.name = "llada-variant";
    variant.model_type = "llada_variant";
    variant.model_type_alias = NULL;
    variant.hf_class = "LLaDAVariantLM";
    variant.embed = "backbone.embed.weight";
    variant.final_norm = "backbone.norm.weight";
    variant.head = "backbone.head.weight";
    variant.layer_fmt = "backbone.layers.%d.";
    variant_presets[0] = *dllm_arch_preset_get(&dllm_arch_llada, "tiny");
    variant_presets[1] = variant_presets[0];
    variant_presets[1].name = "wide";
    variant_presets[1].cfg.d_model = 96;
    variant_presets[1].cfg.n_heads = 6;
    variant.presets = variant_presets;
    variant.n_presets = 2;
}

/* Runs a command in this process with its stdout into DIR/stdout; its exit
 * status; *out: the output (malloc'd) when out is not NULL. */
static int run(int (*cmd)(int, char **), char **out, const char *args)
{
    char buf[4096], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "command %s", args); /* argv[0]: the command's name */
    for (char *s = strtok(buf, " "); s && argc < 63; s = strtok(NULL, " "))
        argv[argc++] = s;
    argv[argc] = NULL;
    char path[128];
    snprintf(path, sizeof path, "%s/stdout", tu_dir);
    fflush(stdout);
    int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 1);
    close(fd);
    int rc = cmd(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    if (out) {
        *out = tu_slurp("%s", path);
        ck_assert_ptr_nonnull(*out);
    }
    return rc;
}

/* The registry holds it beside the built-in three, by every key. */
START_TEST(test_lookups)
{
    ck_assert_int_eq(dllm_arch_count(), DLLM_ARCH_BUILTIN + 1);
    ck_assert_int_eq(variant.id, DLLM_ARCH_BUILTIN);
    ck_assert_ptr_eq(dllm_arch_get(variant.id), &variant);
    ck_assert_ptr_eq(dllm_arch_get(DLLM_ARCH_LLADA), &dllm_arch_llada);
    ck_assert_ptr_null(dllm_arch_get((dllm_arch)(DLLM_ARCH_BUILTIN + 1)));
    ck_assert_ptr_eq(dllm_arch_by_name("llada-variant"), &variant);
    ck_assert_ptr_eq(dllm_arch_by_model_type("llada_variant"), &variant);
    ck_assert_ptr_eq(dllm_arch_by_hf_class("LLaDAVariantLM"), &variant);
    ck_assert_ptr_eq(dllm_arch_by_model_type("llada"), &dllm_arch_llada);
    ck_assert_ptr_eq(dllm_arch_of_preset("wide", &dllm_arch_llada), &variant);
    ck_assert_ptr_eq(dllm_arch_of_preset("tiny", &variant), &variant);
    ck_assert_ptr_eq(dllm_arch_of_preset("tiny", &dllm_arch_qwen3), &dllm_arch_qwen3);
    char buf[256];
    ck_assert_str_eq(dllm_arch_list(buf, sizeof buf), "llada, qwen3, dream, qwen3.5 or llada-variant");
    /* the config's names are the registry's: model.arch, model.preset */
    int v;
    ck_assert(cfg_names_find(&cfg_names_arch, "llada-variant", &v));
    ck_assert_int_eq(v, variant.id);
    ck_assert(cfg_names_find(&cfg_names_preset, "wide", &v));
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, v), "wide");
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, CFG_PRESET_TINY), "tiny");
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, CFG_PRESET_SMALL), "small");
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, CFG_PRESET_LLADA_8B), "llada-8b");
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, CFG_PRESET_QWEN3_8B), "qwen3-8b");
    ck_assert_str_eq(cfg_names_name(&cfg_names_preset, CFG_PRESET_DREAM_7B), "dream-7b");
    /* a name or model_type already held is refused, and the registry is unchanged */
    dllm_arch_desc again = variant;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_arch_register(&again, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "llada-variant"));
    again.name = "other";
    ck_assert_int_eq(dllm_arch_register(&again, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "model_type 'llada_variant'"));
    ck_assert_int_eq(dllm_arch_count(), DLLM_ARCH_BUILTIN + 1);
}
END_TEST

/* Its presets, config.json and parameter count come from the descriptor. */
START_TEST(test_config_json)
{
    dllm_model_config c, r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, variant.id, "wide", &err), 0);
    ck_assert_int_eq(c.d_model, 96);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "wide", &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_config_preset(&c, variant.id, "llada-8b", &err), DLLM_EXIT_INPUT);
    ck_assert_str_eq(err.msg, "unknown llada-variant preset 'llada-8b' (tiny or wide)");
    ck_assert_int_eq(dllm_config_preset(&c, variant.id, "tiny", &err), 0);
    ck_assert_int_eq(dllm_config_preset(&r, DLLM_ARCH_LLADA, "tiny", &err), 0);
    ck_assert_int_eq(dllm_config_num_params(&c), dllm_config_num_params(&r));
    char dir[128];
    snprintf(dir, sizeof dir, "%s/cfg", tu_dir);
    ck_assert_int_eq(tu_sh("mkdir -p %s", dir), 0);
    ck_assert_int_eq(dllm_config_save(&c, dir, &err), 0);
    char path[160];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), "llada_variant");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                     "LLaDAVariantLM");
    /* read back by its model_type, and by its class when model_type is absent */
    ck_assert_int_eq(dllm_config_load(&r, dir, &err), 0);
    ck_assert_int_eq(r.arch, variant.id);
    json_object_del(j, "model_type");
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(dllm_config_load(&r, dir, &err), 0);
    ck_assert_int_eq(r.arch, variant.id);
    ck_assert_int_eq(r.d_model, c.d_model);
}
END_TEST

/* One trainable vector of a checkpoint directory (malloc'd). */
static float *weights_of(const char *dir, size_t *n)
{
    dllm_tf *m;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s", err.msg);
    const float *w = dllm_optim_trainable(dllm_tf_optim(m), n);
    float *copy = malloc(*n * sizeof *copy);
    memcpy(copy, w, *n * sizeof *copy);
    dllm_tf_free(m);
    return copy;
}

/* init-model, score, generate and sft on the variant: the variant's names in its
 * files, LLaDA's numbers in everything computed. */
START_TEST(test_commands)
{
    char args[1024], mv[128], ml[128], *a, *b;
    snprintf(mv, sizeof mv, "%s/variant", tu_dir);
    snprintf(ml, sizeof ml, "%s/llada", tu_dir);
    snprintf(args, sizeof args, "--arch llada-variant --preset tiny --seed 3 --out %s", mv);
    ck_assert_int_eq(run(cmd_init_model, NULL, args), 0);
    snprintf(args, sizeof args, "--arch llada --preset tiny --seed 3 --out %s", ml);
    ck_assert_int_eq(run(cmd_init_model, NULL, args), 0);

    /* the checkpoint names its tensors as the descriptor says */
    char st[160];
    snprintf(st, sizeof st, "%s/model.safetensors", mv);
    ck_assert_int_eq(tu_sh("grep -q backbone.layers.1.ff_out.weight %s", st), 0);
    ck_assert_int_ne(tu_sh("grep -q model.transformer %s", st), 0);
    size_t nv, nl;
    float *wv = weights_of(mv, &nv), *wl = weights_of(ml, &nl);
    ck_assert_uint_eq(nv, nl);
    ck_assert(memcmp(wv, wl, nv * sizeof *wv) == 0);
    free(wv);
    free(wl);

    const char *score = "--prompt-ids 1,10,11,12 --completion-ids 20,21,22,0";
    snprintf(args, sizeof args, "--model %s %s", mv, score);
    ck_assert_int_eq(run(cmd_score, &a, args), 0);
    snprintf(args, sizeof args, "--model %s %s", ml, score);
    ck_assert_int_eq(run(cmd_score, &b, args), 0);
    ck_assert_ptr_nonnull(strstr(a, "\"seq_logp\""));
    ck_assert_str_eq(a, b);
    free(a);
    free(b);

    const char *gen = "--prompt-ids 1,30,31,32 --gen-length 8 --block-length 4 --steps 4 "
                      "--temperature 1 --seed 5 --format ids";
    snprintf(args, sizeof args, "--model %s %s", mv, gen);
    ck_assert_int_eq(run(cmd_generate, &a, args), 0);
    snprintf(args, sizeof args, "--model %s %s", ml, gen);
    ck_assert_int_eq(run(cmd_generate, &b, args), 0);
    ck_assert_int_gt(strlen(a), 0);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);

    /* sft from each: the same trained weights, saved under each one's names */
    char data[160];
    snprintf(data, sizeof data, "%s/sft.jsonl", tu_dir);
    FILE *f = fopen(data, "w");
    for (int i = 0; i < 16; i++)
        fprintf(f, "{\"prompt\": \"%d+%d=\", \"answer\": \"%d\"}\n", i, 2 * i, 3 * i);
    fclose(f);
    const char *model[2] = {mv, ml}, *name[2] = {"sv", "sl"};
    for (int k = 0; k < 2; k++) {
        char yaml[160];
        snprintf(yaml, sizeof yaml, "%s/%s.yaml", tu_dir, name[k]);
        f = fopen(yaml, "w");
        fprintf(f, "experiment: %s\nseed: 1\nmodel: {path: %s}\n"
                   "data: {train: %s, max_len: 24}\nsft: {steps: 3, batch_size: 4}\n"
                   "optim: {lr: 1e-2}\nlog: {dir: %s/runs, every: 1}\ncheckpoint: {every: 0}\n",
                name[k], model[k], data, tu_dir);
        fclose(f);
        snprintf(args, sizeof args, "%s --quiet", yaml);
        ck_assert_int_eq(run(cmd_sft, NULL, args), 0);
    }
    char cv[160], cl[160];
    snprintf(cv, sizeof cv, "%s/runs/sv/ckpt/latest", tu_dir);
    snprintf(cl, sizeof cl, "%s/runs/sl/ckpt/latest", tu_dir);
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_load(&c, cv, &err), 0);
    ck_assert_int_eq(c.arch, variant.id);
    snprintf(st, sizeof st, "%s/model.safetensors", cv);
    ck_assert_int_eq(tu_sh("grep -q backbone.embed.weight %s", st), 0);
    wv = weights_of(cv, &nv);
    wl = weights_of(cl, &nl);
    ck_assert_uint_eq(nv, nl);
    float *w0 = weights_of(mv, &nl);
    ck_assert(memcmp(wv, w0, nv * sizeof *wv) != 0); /* it trained */
    ck_assert(memcmp(wv, wl, nv * sizeof *wv) == 0);
    free(wv);
    free(wl);
    free(w0);

    /* a random model of its own preset, named in the YAML */
    char yaml[160];
    snprintf(yaml, sizeof yaml, "%s/sw.yaml", tu_dir);
    f = fopen(yaml, "w");
    fprintf(f, "experiment: sw\nseed: 1\nmodel: {arch: llada-variant, preset: wide}\n"
               "data: {train: %s, max_len: 24}\nsft: {steps: 2, batch_size: 4}\n"
               "log: {dir: %s/runs, every: 1}\ncheckpoint: {every: 0}\n", data, tu_dir);
    fclose(f);
    snprintf(args, sizeof args, "%s --quiet", yaml);
    ck_assert_int_eq(run(cmd_sft, NULL, args), 0);
    snprintf(cv, sizeof cv, "%s/runs/sw/ckpt/latest", tu_dir);
    ck_assert_int_eq(dllm_config_load(&c, cv, &err), 0);
    ck_assert_int_eq(c.arch, variant.id);
    ck_assert_int_eq(c.d_model, 96);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("arch_registry");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_lookups);
    tcase_add_test(tc, test_config_json);
    tcase_add_test(tc, test_commands);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_scratch(ctx))
        return NULL;
    make_variant();
    dllm_err err = {0};
    if (dllm_arch_register(&variant, &err))
        return tu_abort(ctx, "%s", err.msg);
    return suite();
}
