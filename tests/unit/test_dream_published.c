/* test_dream_published.c: Dream against the published Dream-v0 code itself.
 * The goldens in tests/data/dream_published/ were written by
 * tests/ref/make_dream_goldens_published.py, which runs the published
 * modeling_dream.py and generation_utils.py (diffusion_generate) on three
 * random tiny models it saved with save_pretrained (GQA untied; MQA tied
 * with odd sizes; MHA with RoPE theta 1e6 and RMSNorm eps 1e-5):
 *   - per-token log-probs of clean sequences, of completions fully masked
 *     after left-padded prompts and of partly revealed completions, with the
 *     attention mask and position ids the published sampler builds (1e-4);
 *   - `score` (one_step) on a prompt and completion: its token_logp (1e-4);
 *   - greedy generations of maskgit_plus, topk_margin and entropy over
 *     several steps/eps settings, a left-padded batch of 3 and top_p/top_k
 *     filtering: ids equal;
 *   - the dream-7b preset keeps DreamConfig's defaults (RMSNorm eps, mask and
 *     pad ids, untied head, no sliding window or RoPE scaling);
 *   - `generate` driven by a checkpoint's generation.json alone (its "dream"
 *     settings, src/config/gen_settings.h) gives the published ids. */
#include "tests/harness/harness.h"
#include "dllm/dream_sampler.h"
#include "dllm/transformer.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dllm_tf *load_model(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "dream_published/%s", name);
    char *dir = tu_data_path(rel);
    dllm_tf *m = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&m, dir, &err) == 0, "%s: %s", name, err.msg);
    ck_assert_int_eq(dllm_tf_config(m)->arch, DLLM_ARCH_DREAM);
    free(dir);
    return m;
}

static int tf_logits(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                     const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward_nograd(m, tokens, keymask, B, T, rows, n_rows, logits);
}

static int jint(const json_t *a, size_t i)
{
    return (int)json_integer_value(json_array_get(a, i));
}

/* a [B][T] JSON array of integers into *B, *T and a malloc'd row-major array */
static int32_t *jmatrix(const json_t *a, int *B, int *T)
{
    *B = (int)json_array_size(a);
    *T = (int)json_array_size(json_array_get(a, 0));
    int32_t *v = dllm_malloc(sizeof *v * (size_t)(*B) * (size_t)(*T));
    for (int b = 0; b < *B; b++) {
        const json_t *r = json_array_get(a, (size_t)b);
        ck_assert_int_eq((int)json_array_size(r), *T);
        for (int t = 0; t < *T; t++)
            v[b * *T + t] = jint(r, (size_t)t);
    }
    return v;
}

START_TEST(test_published_logp)
{
    json_t *gold = tu_json_load("dream_published/golden.json");
    const json_t *models = json_object_get(gold, "models");
    ck_assert_int_eq((int)json_array_size(models), 3);
    int compared = 0;
    for (size_t k = 0; k < json_array_size(models); k++) {
        const json_t *me = json_array_get(models, k);
        const char *name = json_string_value(json_object_get(me, "name"));
        dllm_tf *m = load_model(name);
        const int V = dllm_tf_config(m)->embedding_size;
        const json_t *cases = json_object_get(me, "logp");
        ck_assert_int_ge((int)json_array_size(cases), 6);
        for (size_t c = 0; c < json_array_size(cases); c++) {
            const json_t *e = json_array_get(cases, c);
            int B, T, B2, T2;
            int32_t *tok = jmatrix(json_object_get(e, "tokens"), &B, &T);
            int32_t *am = jmatrix(json_object_get(e, "attention_mask"), &B2, &T2);
            ck_assert(B == B2 && T == T2);
            uint8_t *km = dllm_malloc((size_t)B * T);
            for (int i = 0; i < B * T; i++)
                km[i] = (uint8_t)am[i];
            const json_t *ent = json_object_get(e, "entries");
            const int n = (int)json_array_size(ent);
            ck_assert_int_gt(n, 0);
            int32_t *rows = dllm_malloc(sizeof *rows * (size_t)n);
            for (int i = 0; i < n; i++) {
                const json_t *r = json_array_get(ent, (size_t)i);
                rows[i] = jint(r, 0) * T + jint(r, 1);
            }
            float *out = dllm_malloc(sizeof *out * (size_t)n * V);
            /* only the scored rows, with the batch's key mask (left padding) */
            ck_assert_int_eq(dllm_tf_forward_nograd(m, tok, km, B, T, rows, n, out), 0);
            for (int i = 0; i < n; i++) {
                const json_t *r = json_array_get(ent, (size_t)i);
                const int target = jint(r, 2);
                double got = log(dllm_sampler_prob(out + (size_t)i * V, V, target));
                double ref = tu_jnum(json_array_get(r, 3));
                ck_assert_msg(fabs(got - ref) < 1e-4,
                              "%s %s case %zu: row %d position %d token %d: log-prob %.7f, "
                              "published %.7f",
                              name, json_string_value(json_object_get(e, "kind")), c, jint(r, 0),
                              jint(r, 1), target, got, ref);
                compared++;
            }
            free(tok);
            free(am);
            free(km);
            free(rows);
            free(out);
        }
        dllm_tf_free(m);
    }
    ck_assert_int_gt(compared, 200);
    json_decref(gold);
}
END_TEST

/* `dllm-rl score` (one_step: the completion fully masked after the prompt) on
 * each model's unpadded one_step case: its token_logp are the published ones. */
START_TEST(test_published_score_cli)
{
    const char *bin = getenv("DLLM_BIN");
    if (!bin) {
        fprintf(stderr, "test_published_score_cli: DLLM_BIN not set\n");
        return;
    }
    json_t *gold = tu_json_load("dream_published/golden.json");
    char *tmp = tu_make_tmpdir();
    const json_t *models = json_object_get(gold, "models");
    int checked = 0;
    for (size_t k = 0; k < json_array_size(models); k++) {
        const json_t *me = json_array_get(models, k);
        const char *name = json_string_value(json_object_get(me, "name"));
        const json_t *cases = json_object_get(me, "logp");
        for (size_t c = 0; c < json_array_size(cases); c++) {
            const json_t *e = json_array_get(cases, c);
            const json_t *toks = json_object_get(e, "tokens");
            if (strcmp(json_string_value(json_object_get(e, "kind")), "one_step") ||
                json_array_size(toks) != 1)
                continue;
            const json_t *comp = json_array_get(json_object_get(e, "completions"), 0);
            const json_t *row = json_array_get(toks, 0);
            const size_t L = json_array_size(comp), P = json_array_size(row) - L;
            char pids[512] = "", cids[512] = "";
            for (size_t t = 0; t < P; t++)
                snprintf(pids + strlen(pids), sizeof pids - strlen(pids), "%s%d", t ? "," : "",
                         jint(row, t));
            for (size_t t = 0; t < L; t++)
                snprintf(cids + strlen(cids), sizeof cids - strlen(cids), "%s%d", t ? "," : "",
                         jint(comp, t));
            ck_assert_int_eq(tu_sh("%s score --model %s/dream_published/%s --prompt-ids %s"
                                   " --completion-ids %s > %s/score.json",
                                   bin, getenv("DLLM_TEST_DATA"), name, pids, cids, tmp),
                             0);
            char path[512];
            snprintf(path, sizeof path, "%s/score.json", tmp);
            json_error_t je;
            json_t *s = json_load_file(path, 0, &je);
            ck_assert_msg(s != NULL, "%s: score output: %s", name, je.text);
            const json_t *tl = json_object_get(s, "token_logp"), *ent = json_object_get(e, "entries");
            ck_assert_int_eq((int)json_array_size(tl), (int)L);
            ck_assert_int_eq((int)json_array_size(ent), (int)L);
            double sum = 0;
            for (size_t t = 0; t < L; t++) {
                double got = tu_jnum(json_array_get(tl, t));
                double ref = tu_jnum(json_array_get(json_array_get(ent, t), 3));
                ck_assert_msg(fabs(got - ref) < 1e-4, "%s: score token %zu: %.7f, published %.7f",
                              name, t, got, ref);
                sum += ref;
            }
            ck_assert(fabs(tu_jget(s, "seq_logp") - sum) < 1e-3);
            json_decref(s);
            checked++;
        }
    }
    ck_assert_int_eq(checked, 3);
    json_decref(gold);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_published_generate)
{
    json_t *gold = tu_json_load("dream_published/golden.json");
    const json_t *models = json_object_get(gold, "models");
    dllm_err err = {0};
    int cases_run = 0;
    for (size_t k = 0; k < json_array_size(models); k++) {
        const json_t *me = json_array_get(models, k);
        const char *name = json_string_value(json_object_get(me, "name"));
        dllm_tf *m = load_model(name);
        const dllm_model_config *mc = dllm_tf_config(m);
        const json_t *gens = json_object_get(me, "generate");
        ck_assert_int_eq((int)json_array_size(gens), 18);
        for (size_t c = 0; c < json_array_size(gens); c++) {
            const json_t *e = json_array_get(gens, c);
            const json_t *prs = json_object_get(e, "prompts");
            const int B = (int)json_array_size(prs);
            int P = 0;
            for (int b = 0; b < B; b++) {
                const int n = (int)json_array_size(json_array_get(prs, (size_t)b));
                P = n > P ? n : P;
            }
            /* left-padded with the pad id, as the published batch is */
            int32_t *pr = dllm_malloc(sizeof *pr * (size_t)B * P);
            uint8_t *pm = dllm_malloc((size_t)B * P);
            for (int b = 0; b < B; b++) {
                const json_t *r = json_array_get(prs, (size_t)b);
                const int n = (int)json_array_size(r);
                for (int t = 0; t < P; t++) {
                    pm[b * P + t] = t >= P - n;
                    pr[b * P + t] = t >= P - n ? jint(r, (size_t)(t - (P - n))) : mc->pad_token_id;
                }
            }
            const int G = (int)tu_jget(e, "gen_length"), S = (int)tu_jget(e, "steps");
            dllm_dream_cfg d = dllm_dream_cfg_default();
            ck_assert_int_eq(dllm_dream_alg_parse(json_string_value(json_object_get(e, "alg")), &d.alg), 0);
            d.eps = tu_jget(e, "eps");
            d.top_p = tu_jget(e, "top_p");
            d.top_k = (int)tu_jget(e, "top_k");
            dllm_sampler_cfg sc = {.gen_length = G, .block_length = G, .steps = S,
                                   .temperature = 0, .mask_id = mc->mask_token_id,
                                   .eos_id = mc->eos_token_id, .eot_id = -1,
                                   .vocab = mc->embedding_size};
            dllm_rollout r;
            ck_assert_msg(dllm_dream_sample(tf_logits, m, pr, B > 1 ? pm : NULL, B, P, &sc, &d, 7,
                                            &r, &err) == 0,
                          "%s", err.msg);
            const json_t *ids = json_object_get(e, "ids");
            for (int b = 0; b < B; b++) {
                const json_t *want = json_array_get(ids, (size_t)b);
                ck_assert_int_eq((int)json_array_size(want), G);
                for (int t = 0; t < G; t++)
                    ck_assert_msg(r.tokens[(size_t)b * (P + G) + P + t] == jint(want, (size_t)t),
                                  "%s %s steps %d eps %g top_p %g top_k %d row %d: position %d "
                                  "is %d, published %d",
                                  name, dllm_dream_alg_name(d.alg), S, d.eps, d.top_p, d.top_k, b,
                                  t, r.tokens[(size_t)b * (P + G) + P + t], jint(want, (size_t)t));
            }
            dllm_rollout_free(&r);
            free(pr);
            free(pm);
            cases_run++;
        }
        dllm_tf_free(m);
    }
    ck_assert_int_eq(cases_run, 54);
    json_decref(gold);
}
END_TEST

/* `generate` with no sampler flags on a Dream checkpoint whose generation.json
 * holds the settings (steps, gen_length, top_p and the "dream" object: alg,
 * eps, top_k) reproduces the published generations. */
START_TEST(test_published_generate_cli)
{
    const char *bin = getenv("DLLM_BIN"), *data = getenv("DLLM_TEST_DATA");
    if (!bin || !data) {
        fprintf(stderr, "test_published_generate_cli: DLLM_BIN / DLLM_TEST_DATA not set\n");
        return;
    }
    json_t *gold = tu_json_load("dream_published/golden.json");
    char *tmp = tu_make_tmpdir();
    const json_t *me = json_array_get(json_object_get(gold, "models"), 0);
    const char *name = json_string_value(json_object_get(me, "name"));
    ck_assert_int_eq(tu_sh("cp %s/dream_published/%s/config.json %s/dream_published/%s/model.safetensors %s/",
                           data, name, data, name, tmp),
                     0);
    const json_t *gens = json_object_get(me, "generate");
    int checked = 0;
    for (size_t c = 0; c < json_array_size(gens); c++) {
        const json_t *e = json_array_get(gens, c);
        const json_t *prs = json_object_get(e, "prompts");
        /* batch 1: the first setting and the top_p / top_k one (5) */
        const int setting = (int)tu_jget(e, "setting");
        if (setting != 0 && setting != 5)
            continue;
        ck_assert_int_eq((int)json_array_size(prs), 1);
        char path[512];
        snprintf(path, sizeof path, "%s/generation.json", tmp);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "{\"sampler\": \"denoising\", \"gen_length\": %d, \"block_length\": %d,"
                   " \"steps\": %d, \"temperature\": 0, \"top_p\": %.17g, \"chat\": \"plain\","
                   " \"dream\": {\"alg\": \"%s\", \"eps\": %.17g, \"alg_temp\": 0, \"top_k\": %d}}\n",
                (int)tu_jget(e, "gen_length"), (int)tu_jget(e, "gen_length"), (int)tu_jget(e, "steps"),
                tu_jget(e, "top_p"), json_string_value(json_object_get(e, "alg")), tu_jget(e, "eps"),
                (int)tu_jget(e, "top_k"));
        fclose(f);
        const json_t *pr = json_array_get(prs, 0), *want = json_array_get(json_object_get(e, "ids"), 0);
        char pids[512] = "", wids[512] = "";
        for (size_t t = 0; t < json_array_size(pr); t++)
            snprintf(pids + strlen(pids), sizeof pids - strlen(pids), "%s%d", t ? "," : "", jint(pr, t));
        for (size_t t = 0; t < json_array_size(want); t++)
            snprintf(wids + strlen(wids), sizeof wids - strlen(wids), "%s%d", t ? "," : "", jint(want, t));
        ck_assert_int_eq(tu_sh("%s generate --model %s --prompt-ids %s --format ids > %s/ids.txt", bin,
                               tmp, pids, tmp),
                         0);
        snprintf(path, sizeof path, "%s/ids.txt", tmp);
        f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        char line[1024] = "";
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        fclose(f);
        line[strcspn(line, "\n")] = '\0';
        ck_assert_msg(!strcmp(line, wids), "%s %s from generation.json: %s, published %s", name,
                      json_string_value(json_object_get(e, "alg")), line, wids);
        checked++;
    }
    ck_assert_int_eq(checked, 6);
    tu_rm_rf(tmp);
    free(tmp);
    json_decref(gold);
}
END_TEST

/* The dream-7b preset keeps the published DreamConfig defaults that the
 * Dream-v0 checkpoints do not override, and its config.json says so. */
START_TEST(test_published_preset)
{
    json_t *gold = tu_json_load("dream_published/golden.json");
    const json_t *d = json_object_get(gold, "config_defaults");
    ck_assert_ptr_nonnull(d);
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_DREAM, "dream-7b", &err), 0);
    ck_assert(fabs(c.rms_norm_eps - tu_jget(d, "rms_norm_eps")) < 1e-12);
    ck_assert_int_eq(c.mask_token_id, (int)tu_jget(d, "mask_token_id"));
    ck_assert_int_eq(c.pad_token_id, (int)tu_jget(d, "pad_token_id"));
    ck_assert(c.weight_tying == json_is_true(json_object_get(d, "tie_word_embeddings")));
    char *tmp = tu_make_tmpdir();
    ck_assert_msg(dllm_config_save(&c, tmp, &err) == 0, "%s", err.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(o);
    const char *keys[] = {"hidden_act", "use_sliding_window", "rope_scaling", "attention_dropout",
                          "tie_word_embeddings", "mask_token_id", "pad_token_id"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const json_t *a = json_object_get(o, keys[i]), *b = json_object_get(d, keys[i]);
        ck_assert_msg(a && b && (json_equal(a, b) ||
                                 (json_is_number(a) && json_is_number(b) &&
                                  json_number_value(a) == json_number_value(b))),
                      "config.json key %s differs from the published default", keys[i]);
    }
    json_decref(o);
    tu_rm_rf(tmp);
    free(tmp);
    json_decref(gold);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("dream_published");
    TCase *tc = tcase_create("published");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_published_preset);
    tcase_add_test(tc, test_published_logp);
    tcase_add_test(tc, test_published_score_cli);
    tcase_add_test(tc, test_published_generate);
    tcase_add_test(tc, test_published_generate_cli);
    suite_add_tcase(s, tc);
    return s;
}
