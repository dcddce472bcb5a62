/* test_policy.c: the policy interface (dllm/policy.c) over LLaDA.
 *
 *  - open from a preset (LoRA by target names, precision names) and from a
 *    model directory (the merged checkpoint of a LoRA policy reproduces it);
 *  - input errors name the bad value: targets, precision names, arch,
 *    presets, directories;
 *  - rollout = dllm_sample on the ROLLOUT callback (and not on TRAIN's);
 *  - rollout_is_trainer: ROLLOUT logits equal TRAIN logits bit for bit when
 *    true, differ when false;
 *  - backward and sync: gradients flow; a sync after a weight change moves the
 *    rollout copy;
 *  - adapters: PEFT layout and config keys, save/load round trip (bit-exact
 *    logits), mismatched adapters refused;
 *  - Qwen3 behind the same calls: LoRA by its module names, rollout = AR
 *    decoding (dllm_ar_sample) with commit_prob = exp(sampling log-prob),
 *    ROLLOUT = TRAIN logits, adapter round trip with Qwen3 module names. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dllm/ar_sampler.h"
#include "dllm/policy.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

static const char *const TARGETS[] = {"q_proj", "v_proj", "ff_out"};

static dllm_policy_cfg tiny_cfg(int rank, const char *rollout)
{
    return (dllm_policy_cfg){.preset = "tiny", .arch = "llada", .seed = 3, .lora_rank = rank,
                             .lora_alpha = 16, .lora_targets = TARGETS, .n_lora_targets = 3,
                             .trainer = "fp32", .rollout = rollout, .fp8_format = "e4m3",
                             .fp8_scaling = "block"};
}

static dllm_policy *open_ok(const dllm_policy_cfg *c)
{
    dllm_policy *p;
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_open(&p, c, &err) == 0, "%s", err.msg);
    return p;
}

static void fill_normal(float *x, size_t n, double std, uint64_t seed)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 99, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(std * dllm_rng_normal(&r));
}

/* Random trainable values (LoRA B nonzero). */
static void randomise(dllm_policy *p, uint64_t seed)
{
    size_t n;
    dllm_optim o = dllm_policy_optim(p);
    dllm_optim_trainable(o, &n);
    float *w = dllm_malloc(n * sizeof(float));
    fill_normal(w, n, 0.05, seed);
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, w);
    free(w);
}

enum { B = 2, T = 10 };

static float *logits(dllm_policy *p, dllm_prec prec)
{
    int V = dllm_policy_config(p)->embedding_size;
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37 + 5) % V;
    float *lg = dllm_malloc((size_t)B * T * V * sizeof(float));
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, prec, &ctx);
    ck_assert_int_eq(fn(ctx, tok, NULL, B, T, NULL, 0, lg), 0);
    return lg;
}

static size_t n_logits(const dllm_policy *p)
{
    return (size_t)B * T * dllm_policy_config(p)->embedding_size;
}

static char *tmpdir(void)
{
    char *d = dllm_strdup("/tmp/dllm_policy_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void rm_tree(const char *dir, const char *const *files, int n)
{
    char path[512];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* ---- open -------------------------------------------------------------------------------- */

START_TEST(test_open_preset)
{
    dllm_policy_cfg c = tiny_cfg(4, NULL);
    dllm_policy *p = open_ok(&c);
    const dllm_model_config *mc = dllm_policy_config(p);
    ck_assert_int_eq(dllm_policy_arch(p), DLLM_ARCH_LLADA);
    ck_assert(dllm_policy_is_diffusion(p));
    ck_assert(dllm_policy_has_lora(p));
    ck_assert(dllm_policy_rollout_is_trainer(p)); /* rollout NULL: the trainer */
    size_t n;
    dllm_optim_trainable(dllm_policy_optim(p), &n);
    /* per layer: q (A 4xC, B Cx4), v (same), ff_out (A 4xH, B Cx4) */
    size_t C = (size_t)mc->d_model, H = (size_t)mc->mlp_hidden, per = 4 * (C + C + C + C + H + C);
    ck_assert_uint_eq(n, per * (size_t)mc->n_layers);
    dllm_policy_free(p);

    c = tiny_cfg(0, "fp8");
    p = open_ok(&c);
    ck_assert(!dllm_policy_has_lora(p));
    ck_assert(!dllm_policy_rollout_is_trainer(p));
    dllm_optim_trainable(dllm_policy_optim(p), &n);
    ck_assert_uint_eq(n, (size_t)dllm_config_num_params(dllm_policy_config(p)));
    dllm_policy_free(p);
}
END_TEST

static void expect_error(const dllm_policy_cfg *c, const char *word)
{
    dllm_policy *p = (dllm_policy *)1;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_open(&p, c, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, word) != NULL, "message '%s' does not mention '%s'", err.msg,
                  word);
}

START_TEST(test_open_errors)
{
    static const char *const bad_t[] = {"q_proj", "o_projj"};
    dllm_policy_cfg c = tiny_cfg(4, NULL);
    c.lora_targets = bad_t;
    c.n_lora_targets = 2;
    expect_error(&c, "o_projj");
    c = tiny_cfg(0, NULL);
    c.trainer = "fp16";
    expect_error(&c, "fp16");
    c = tiny_cfg(0, "int4");
    expect_error(&c, "int4");
    c = tiny_cfg(0, "fp8");
    c.fp8_format = "e4m4";
    expect_error(&c, "e4m4");
    c = tiny_cfg(0, "fp8");
    c.fp8_scaling = "group";
    expect_error(&c, "group");
    c = tiny_cfg(4, NULL);
    c.arch = "qwen3";
    c.lora_targets = bad_t;
    c.n_lora_targets = 2;
    expect_error(&c, "o_projj");
    c = tiny_cfg(0, NULL);
    c.arch = "gpt2";
    expect_error(&c, "gpt2");
    c = tiny_cfg(0, NULL);
    c.preset = "huge";
    expect_error(&c, "huge");
    c = tiny_cfg(0, NULL);
    c.preset = NULL;
    expect_error(&c, "preset");
    c = tiny_cfg(4, NULL);
    c.lora_alpha = 0;
    expect_error(&c, "alpha");
    c = tiny_cfg(0, NULL);
    c.path = "/nonexistent/model-dir";
    expect_error(&c, "/nonexistent/model-dir");
}
END_TEST

START_TEST(test_open_dir)
{
    dllm_policy_cfg c = tiny_cfg(4, "fp8");
    dllm_policy *a = open_ok(&c);
    randomise(a, 1);
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_sync_rollout(a, NULL, &err) == 0, "%s", err.msg);
    char *dir = tmpdir();
    ck_assert_msg(dllm_policy_save(a, dir, ST_F32, &err) == 0, "%s", err.msg);
    dllm_policy_cfg cd = {.path = dir, .rollout = "fp8"};
    dllm_policy *b = open_ok(&cd);
    ck_assert(!dllm_policy_has_lora(b));
    ck_assert_int_eq(dllm_policy_config(b)->d_model, dllm_policy_config(a)->d_model);
    /* runtime LoRA vs merged weights: equal up to fp32 rounding */
    float *la = logits(a, DLLM_PREC_TRAIN), *lb = logits(b, DLLM_PREC_TRAIN);
    size_t n = n_logits(a);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(la[i] - lb[i]) < 1e-5f, "logit %zu: %g vs %g", i, la[i], lb[i]);
    free(la);
    free(lb);
    /* the FP8 copy is built from the same merged weights */
    la = logits(a, DLLM_PREC_ROLLOUT);
    lb = logits(b, DLLM_PREC_ROLLOUT);
    ck_assert(memcmp(la, lb, n * sizeof(float)) == 0);
    free(la);
    free(lb);
    dllm_policy_free(a);
    dllm_policy_free(b);
    static const char *const files[] = {"model.safetensors", "config.json"};
    rm_tree(dir, files, 2);
    free(dir);
}
END_TEST

/* ---- rollouts ---------------------------------------------------------------------------- */

START_TEST(test_rollout_is_sampler_on_rollout_callback)
{
    dllm_policy_cfg c = tiny_cfg(4, "fp8");
    dllm_policy *p = open_ok(&c);
    randomise(p, 2);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_sync_rollout(p, NULL, &err), 0);
    const dllm_model_config *mc = dllm_policy_config(p);
    dllm_sampler_cfg sc = {.gen_length = 8, .block_length = 4, .steps = 4, .temperature = 0.7,
                           .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id,
                           .eot_id = -1, .vocab = mc->embedding_size};
    int32_t prompts[2 * 5] = {1, 10, 11, 12, 13, 0, 0, 1, 20, 21};
    uint8_t pm[2 * 5] = {1, 1, 1, 1, 1, 0, 0, 1, 1, 1};
    dllm_rollout r = {0}, s = {0}, t = {0};
    ck_assert_msg(dllm_policy_rollout(p, prompts, pm, 2, 5, &sc, 1.0, 42, &r, &err) == 0, "%s",
                  err.msg);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_ROLLOUT, &ctx);
    ck_assert_int_eq(dllm_sample(fn, ctx, prompts, pm, 2, 5, &sc, 42, &s, &err), 0);
    ck_assert(memcmp(r.tokens, s.tokens, sizeof(int32_t) * 2 * 13) == 0);
    ck_assert(memcmp(r.commit_step, s.commit_step, sizeof(int16_t) * 2 * 8) == 0);
    ck_assert(memcmp(r.commit_prob, s.commit_prob, sizeof(float) * 2 * 8) == 0);
    /* the TRAIN callback (fp32) gives other probabilities */
    fn = dllm_policy_logits(p, DLLM_PREC_TRAIN, &ctx);
    ck_assert_int_eq(dllm_sample(fn, ctx, prompts, pm, 2, 5, &sc, 42, &t, &err), 0);
    ck_assert(memcmp(r.commit_prob, t.commit_prob, sizeof(float) * 2 * 8) != 0);
    dllm_rollout_free(&r);
    dllm_rollout_free(&s);
    dllm_rollout_free(&t);
    dllm_policy_free(p);
}
END_TEST

START_TEST(test_rollout_is_trainer)
{
    const char *kinds[] = {"trainer", "bf16", "fp8"};
    for (int k = 0; k < 3; k++) {
        for (int bf = 0; bf < 2; bf++) {
            dllm_policy_cfg c = tiny_cfg(4, kinds[k]);
            c.trainer = bf ? "bf16" : "fp32";
            dllm_policy *p = open_ok(&c);
            randomise(p, 3);
            dllm_err err = {0};
            ck_assert_int_eq(dllm_policy_sync_rollout(p, NULL, &err), 0);
            float *lt = logits(p, DLLM_PREC_TRAIN), *lr = logits(p, DLLM_PREC_ROLLOUT);
            bool same = memcmp(lt, lr, n_logits(p) * sizeof(float)) == 0;
            ck_assert_int_eq(dllm_policy_rollout_is_trainer(p), k == 0);
            ck_assert_msg(same == (k == 0), "rollout %s, trainer %s: logits %s", kinds[k],
                          c.trainer, same ? "equal" : "differ");
            free(lt);
            free(lr);
            dllm_policy_free(p);
        }
    }
}
END_TEST

START_TEST(test_backward_and_sync)
{
    dllm_policy_cfg c = tiny_cfg(4, "bf16");
    dllm_policy *p = open_ok(&c);
    randomise(p, 4);
    dllm_err err = {0};
    double sec = -1;
    ck_assert_int_eq(dllm_policy_sync_rollout(p, &sec, &err), 0);
    ck_assert(sec >= 0);
    float *l0 = logits(p, DLLM_PREC_ROLLOUT);
    size_t n = n_logits(p), nt;
    float *dl = dllm_malloc(n * sizeof(float));
    fill_normal(dl, n, 1.0, 5);
    dllm_optim_zero_grad(dllm_policy_optim(p));
    float *lt = logits(p, DLLM_PREC_TRAIN);
    void *ctx;
    dllm_policy_logits(p, DLLM_PREC_TRAIN, &ctx);
    dllm_policy_backward(ctx, dl);
    const float *w0 = dllm_optim_trainable(dllm_policy_optim(p), &nt);
    float *w = dllm_malloc(nt * sizeof(float));
    memcpy(w, w0, nt * sizeof(float));
    const float *g = dllm_optim_grads(dllm_policy_optim(p));
    double gn = 0;
    for (size_t i = 0; i < nt; i++)
        gn += (double)g[i] * g[i];
    ck_assert(gn > 0);
    /* a step on the weights: the rollout copy moves at the sync, not before */
    for (size_t i = 0; i < nt; i++)
        w[i] -= 0.1f * g[i];
    dllm_optim_state_write(dllm_policy_optim(p), DLLM_STATE_PARAMS, 0, nt, w);
    free(w);
    float *l1 = logits(p, DLLM_PREC_ROLLOUT);
    ck_assert(memcmp(l0, l1, n * sizeof(float)) == 0);
    ck_assert_int_eq(dllm_policy_sync_rollout(p, NULL, &err), 0);
    float *l2 = logits(p, DLLM_PREC_ROLLOUT);
    ck_assert(memcmp(l0, l2, n * sizeof(float)) != 0);
    dllm_optim_zero_grad(dllm_policy_optim(p));
    g = dllm_optim_grads(dllm_policy_optim(p));
    for (size_t i = 0; i < nt; i++)
        ck_assert(g[i] == 0.0f);
    free(l0);
    free(l1);
    free(l2);
    free(lt);
    free(dl);
    dllm_policy_free(p);
}
END_TEST

/* ---- adapters ---------------------------------------------------------------------------- */

/* A swap for scoring (the reference policy, the old parameters): the trainable vector
 * written whole and the trainer told (dllm_optim_state_write, dllm_policy_trainer_changed)
 * computes what a policy holding those weights computes, under an fp32 or a bf16 trainer
 * (whose rounded copy follows), full fine-tuning or LoRA; written back, the logits return
 * bit for bit. */
static const struct {
    const char *trainer;
    int rank;
} swap_cases[] = {{"fp32", 0}, {"bf16", 0}, {"bf16", 4}};
START_TEST(test_swap_for_scoring)
{
    dllm_policy_cfg c = tiny_cfg(swap_cases[_i].rank, "fp8");
    c.trainer = swap_cases[_i].trainer;
    dllm_policy *p = open_ok(&c), *q = open_ok(&c);
    randomise(p, 11);
    randomise(q, 12);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_sync_rollout(p, NULL, &err), 0);
    ck_assert_int_eq(dllm_policy_sync_rollout(q, NULL, &err), 0);
    size_t n, nq, nl = n_logits(p);
    dllm_optim o = dllm_policy_optim(p);
    dllm_optim_trainable(o, &n);
    float *other = dllm_malloc(n * sizeof(float)), *save = dllm_malloc(n * sizeof(float));
    memcpy(other, dllm_optim_trainable(dllm_policy_optim(q), &nq), n * sizeof(float));
    ck_assert_uint_eq(n, nq);
    float *l_p = logits(p, DLLM_PREC_TRAIN_NOGRAD), *l_q = logits(q, DLLM_PREC_TRAIN_NOGRAD);
    ck_assert(memcmp(l_p, l_q, nl * sizeof(float)) != 0);
    dllm_optim_state_read(o, DLLM_STATE_PARAMS, 0, n, save);
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, other);
    dllm_policy_trainer_changed(p);
    float *l_swap = logits(p, DLLM_PREC_TRAIN_NOGRAD);
    ck_assert_msg(memcmp(l_swap, l_q, nl * sizeof(float)) == 0,
                  "%s trainer, rank %d: swapped-in weights' logits differ by %g",
                  swap_cases[_i].trainer, swap_cases[_i].rank, tu_max_abs_diff(l_swap, l_q, nl));
    dllm_optim_state_write(o, DLLM_STATE_PARAMS, 0, n, save);
    dllm_policy_trainer_changed(p);
    float *l_back = logits(p, DLLM_PREC_TRAIN_NOGRAD);
    ck_assert(memcmp(l_back, l_p, nl * sizeof(float)) == 0);
    free(other), free(save), free(l_p), free(l_q), free(l_swap), free(l_back);
    dllm_policy_free(p);
    dllm_policy_free(q);
}
END_TEST

START_TEST(test_adapter_roundtrip)
{
    dllm_policy_cfg c = tiny_cfg(4, "fp8");
    dllm_policy *a = open_ok(&c);
    randomise(a, 6);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_policy_sync_rollout(a, NULL, &err), 0);
    char *dir = tmpdir();
    ck_assert_msg(dllm_policy_save_adapter(a, dir, &err) == 0, "%s", err.msg);

    /* PEFT config */
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "peft_type")), "LORA");
    ck_assert_str_eq(json_string_value(json_object_get(j, "task_type")), "CAUSAL_LM");
    ck_assert_str_eq(json_string_value(json_object_get(j, "bias")), "none");
    ck_assert_str_eq(json_string_value(json_object_get(j, "base_model_name_or_path")),
                     "preset:tiny");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "r")), 4);
    ck_assert(json_number_value(json_object_get(j, "lora_alpha")) == 16.0);
    ck_assert(json_is_number(json_object_get(j, "lora_dropout")) &&
              json_number_value(json_object_get(j, "lora_dropout")) == 0.0);
    ck_assert(json_is_true(json_object_get(j, "inference_mode")));
    ck_assert(json_is_false(json_object_get(j, "fan_in_fan_out")));
    ck_assert(json_is_false(json_object_get(j, "use_rslora")));
    ck_assert(json_is_true(json_object_get(j, "init_lora_weights")));
    json_t *tm = json_object_get(j, "target_modules");
    ck_assert(json_is_array(tm) && json_array_size(tm) == 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(json_string_value(json_array_get(tm, (size_t)i)), TARGETS[i]);
    json_decref(j);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_archive *ar;
    ck_assert_msg(st_open(&ar, path, &err) == 0, "%s", err.msg);
    ck_assert_ptr_nonnull(
        st_find(ar, "base_model.model.model.transformer.blocks.1.ff_out.lora_B.weight"));
    st_close(ar);

    /* a policy without LoRA takes the adapter and its settings */
    dllm_policy_cfg cb = tiny_cfg(0, "fp8");
    dllm_policy *b = open_ok(&cb);
    ck_assert_msg(dllm_policy_load_adapter(b, dir, &err) == 0, "%s", err.msg);
    ck_assert(dllm_policy_has_lora(b));
    size_t na, nb;
    const float *wa = dllm_optim_trainable(dllm_policy_optim(a), &na);
    const float *wb = dllm_optim_trainable(dllm_policy_optim(b), &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(wa, wb, na * sizeof(float)) == 0);
    for (int prec = 0; prec < 2; prec++) {
        float *la = logits(a, (dllm_prec)prec), *lb = logits(b, (dllm_prec)prec);
        ck_assert_msg(memcmp(la, lb, n_logits(a) * sizeof(float)) == 0, "%s logits differ",
                      prec ? "ROLLOUT" : "TRAIN");
        free(la);
        free(lb);
    }
    /* a policy whose LoRA does not match refuses it, naming the file */
    dllm_policy_cfg cc = tiny_cfg(8, "fp8");
    dllm_policy *d = open_ok(&cc);
    err = (dllm_err){0};
    ck_assert_int_eq(dllm_policy_load_adapter(d, dir, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "adapter_config.json"), "%s", err.msg);
    /* no LoRA, no adapter to save */
    dllm_policy *e = open_ok(&cb);
    ck_assert_int_eq(dllm_policy_save_adapter(e, dir, &err), DLLM_EXIT_INPUT);
    /* a missing adapter directory */
    ck_assert_int_eq(dllm_policy_load_adapter(e, "/nonexistent/adapter", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "/nonexistent/adapter"), "%s", err.msg);
    dllm_policy_free(a);
    dllm_policy_free(b);
    dllm_policy_free(d);
    dllm_policy_free(e);
    static const char *const files[] = {"adapter_config.json", "adapter_model.safetensors"};
    rm_tree(dir, files, 2);
    free(dir);
}
END_TEST

START_TEST(test_adapter_config_errors)
{
    char *dir = tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    static const char *const bad[] = {
        "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"gate\"]}",
        "{\"peft_type\": \"IA3\", \"r\": 4, \"target_modules\": [\"q_proj\"]}",
        "{\"peft_type\": \"LORA\", \"r\": 4, \"use_rslora\": true, \"target_modules\": [\"q_proj\"]}",
        "{\"peft_type\": \"LORA\", \"target_modules\": [\"q_proj\"]}"};
    static const char *const word[] = {"gate", "IA3", "use_rslora", "'r'"};
    dllm_policy_cfg c = tiny_cfg(0, NULL);
    dllm_policy *p = open_ok(&c);
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(bad[i], f);
        fclose(f);
        dllm_err err = {0};
        ck_assert_int_eq(dllm_policy_load_adapter(p, dir, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, word[i]) && strstr(err.msg, "adapter_config.json"),
                      "case %d: '%s'", i, err.msg);
    }
    ck_assert(!dllm_policy_has_lora(p));
    dllm_policy_free(p);
    static const char *const files[] = {"adapter_config.json"};
    rm_tree(dir, files, 1);
    free(dir);
}
END_TEST

START_TEST(test_qwen3)
{
    static const char *const qt[] = {"q_proj", "o_proj", "down_proj"};
    dllm_policy_cfg c = tiny_cfg(4, "trainer");
    c.arch = "qwen3";
    c.lora_targets = qt;
    dllm_policy *p = open_ok(&c);
    ck_assert_int_eq(dllm_policy_arch(p), DLLM_ARCH_QWEN3);
    ck_assert(!dllm_policy_is_diffusion(p));
    ck_assert(dllm_policy_rollout_is_trainer(p));
    ck_assert(dllm_policy_has_lora(p));
    randomise(p, 8);
    dllm_err err = {0};
    double sec = -1;
    ck_assert_int_eq(dllm_policy_sync_rollout(p, &sec, &err), 0);
    ck_assert(sec == 0);
    float *lt = logits(p, DLLM_PREC_TRAIN), *lr = logits(p, DLLM_PREC_ROLLOUT);
    ck_assert(memcmp(lt, lr, n_logits(p) * sizeof(float)) == 0);
    free(lt);
    free(lr);
    /* rollout = AR decoding */
    const dllm_model_config *mc = dllm_policy_config(p);
    dllm_sampler_cfg sc = {.gen_length = 6, .block_length = 6, .steps = 6, .temperature = 0.8,
                           .mask_id = -1, .eos_id = mc->eos_token_id, .eot_id = -1,
                           .vocab = mc->embedding_size};
    int32_t prompts[2 * 4] = {1, 10, 11, 12, 0, 1, 20, 21};
    uint8_t pm[2 * 4] = {1, 1, 1, 1, 0, 1, 1, 1};
    dllm_rollout r = {0};
    ck_assert_msg(dllm_policy_rollout(p, prompts, pm, 2, 4, &sc, 0.9, 5, &r, &err) == 0, "%s",
                  err.msg);
    /* the same decoding straight from the AR sampler, on the same weights (a
     * second policy opened identically, then the same trainable values) */
    dllm_policy *q = open_ok(&c);
    size_t n, n2;
    const float *wp = dllm_optim_trainable(dllm_policy_optim(p), &n);
    dllm_optim_trainable(dllm_policy_optim(q), &n2);
    ck_assert_uint_eq(n, n2);
    dllm_optim_state_write(dllm_policy_optim(q), DLLM_STATE_PARAMS, 0, n, wp);
    char *dir = tmpdir();
    ck_assert_msg(dllm_policy_save(q, dir, ST_F32, &err) == 0, "%s", err.msg);
    dllm_tf *qm;
    ck_assert_msg(dllm_tf_load(&qm, dir, &err) == 0, "%s", err.msg);
    dllm_ar_cfg ac = {.max_new_tokens = 6, .temperature = 0.8, .top_p = 0.9,
                      .eos_id = mc->eos_token_id};
    dllm_ar_rollout ar = {0};
    ck_assert_int_eq(dllm_ar_sample(qm, prompts, pm, 2, 4, &ac, 5, &ar, &err), 0);
    /* merged weights: same tokens, probabilities within rounding */
    ck_assert(memcmp(ar.tokens, r.tokens, sizeof(int32_t) * 2 * 10) == 0);
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(r.commit_step[i], i % 6);
        ck_assert_msg(fabs(r.commit_prob[i] - exp(ar.logp[i])) < 1e-4, "token %d: %g vs %g", i,
                      r.commit_prob[i], exp(ar.logp[i]));
    }
    dllm_ar_rollout_free(&ar);
    dllm_rollout_free(&r);
    dllm_tf_free(qm);
    static const char *const files[] = {"model.safetensors", "config.json"};
    rm_tree(dir, files, 2);
    free(dir);

    /* adapters with Qwen3 module names */
    dir = tmpdir();
    ck_assert_msg(dllm_policy_save_adapter(p, dir, &err) == 0, "%s", err.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(j);
    json_t *tm = json_object_get(j, "target_modules");
    ck_assert(json_is_array(tm) && json_array_size(tm) == 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(json_string_value(json_array_get(tm, (size_t)i)), qt[i]);
    json_decref(j);
    dllm_policy_cfg c0 = c;
    c0.lora_rank = 0;
    dllm_policy *b = open_ok(&c0);
    ck_assert_msg(dllm_policy_load_adapter(b, dir, &err) == 0, "%s", err.msg);
    size_t nb;
    const float *wb = dllm_optim_trainable(dllm_policy_optim(b), &nb);
    ck_assert_uint_eq(nb, n);
    ck_assert(memcmp(wb, wp, n * sizeof(float)) == 0);
    float *la = logits(p, DLLM_PREC_TRAIN), *lb = logits(b, DLLM_PREC_TRAIN);
    ck_assert(memcmp(la, lb, n_logits(p) * sizeof(float)) == 0);
    free(la);
    free(lb);
    static const char *const afiles[] = {"adapter_config.json", "adapter_model.safetensors"};
    rm_tree(dir, afiles, 2);
    free(dir);
    dllm_policy_free(b);
    dllm_policy_free(q);
    dllm_policy_free(p);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("policy");
    TCase *c = tcase_create("core");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_open_preset);
    tcase_add_test(c, test_open_errors);
    tcase_add_test(c, test_open_dir);
    tcase_add_test(c, test_rollout_is_sampler_on_rollout_callback);
    tcase_add_test(c, test_rollout_is_trainer);
    tcase_add_test(c, test_backward_and_sync);
    tcase_add_loop_test(c, test_swap_for_scoring, 0, 3);
    tcase_add_test(c, test_adapter_roundtrip);
    tcase_add_test(c, test_adapter_config_errors);
    tcase_add_test(c, test_qwen3);
    suite_add_tcase(s, c);
    return s;
}
