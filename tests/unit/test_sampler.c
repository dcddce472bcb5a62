/* test_sampler: the denoising sampler against the published reference
 * algorithm (tests/ref/make_sampler_goldens.py) on the tiny checkpoint and on
 * random tiny models whose mask id is often the argmax x0 (mask commits), plus
 * its invariants: commit schedule, determinism, keyed randomness, mask_token. */
#include "dllm/llada.h"
#include "dllm/sampler.h"

#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dllm_tf *model;

static void load_model(void)
{
    model = tu_load_llada("llada/tiny");
}

static void free_model(void)
{
    dllm_tf_free(model);
}

static dllm_sampler_cfg base_cfg(void)
{
    const dllm_model_config *mc = dllm_tf_config(model);
    dllm_sampler_cfg c = {.gen_length = 8, .block_length = 4, .steps = 4, .temperature = 0,
                          .remasking = REMASK_LOW_CONFIDENCE, .mask_id = mc->mask_token_id,
                          .eos_id = mc->eos_token_id, .eot_id = -1, .vocab = mc->embedding_size};
    return c;
}

static int32_t *json_ids(json_t *arr2d, int *B, int *T)
{
    *B = (int)json_array_size(arr2d);
    *T = (int)json_array_size(json_array_get(arr2d, 0));
    int32_t *out = malloc(sizeof *out * (size_t)(*B) * (size_t)(*T));
    for (int b = 0; b < *B; b++)
        for (int t = 0; t < *T; t++)
            out[b * *T + t] = (int32_t)json_integer_value(json_array_get(json_array_get(arr2d, b), t));
    return out;
}

START_TEST(greedy_matches_reference)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/sampler/greedy.json", getenv("DLLM_TEST_DATA"));
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root, "%s: %s", path, je.text);
    json_t *cases = json_object_get(root, "cases");
    ck_assert_int_ge((int)json_array_size(cases), 7);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        int B, P, B2, T;
        int32_t *prompt = json_ids(json_object_get(c, "prompt"), &B, &P);
        int32_t *want = json_ids(json_object_get(c, "output"), &B2, &T);
        uint8_t *am = NULL;
        json_t *amj = json_object_get(c, "attention_mask");
        if (json_is_array(amj)) {
            int b3, p3;
            int32_t *a = json_ids(amj, &b3, &p3);
            am = malloc((size_t)B * P);
            for (int k = 0; k < B * P; k++)
                am[k] = (uint8_t)a[k];
            free(a);
        }
        dllm_sampler_cfg sc = base_cfg();
        sc.gen_length = (int)json_integer_value(json_object_get(c, "gen_length"));
        sc.block_length = (int)json_integer_value(json_object_get(c, "block_length"));
        sc.steps = (int)json_integer_value(json_object_get(c, "steps"));
        sc.cfg_scale = json_real_value(json_object_get(c, "cfg_scale"));
        sc.logits_eos_inf = json_is_true(json_object_get(c, "logits_eos_inf"));
        dllm_rollout r;
        dllm_err err = {0};
        ck_assert_msg(dllm_sample(tu_llada_logits, model, prompt, am, B, P, &sc, 1, &r, &err) == 0, "%s",
                      err.msg);
        for (int k = 0; k < B * T; k++)
            ck_assert_msg(r.tokens[k] == want[k], "%s: position %d: got %d, reference %d", name, k,
                          r.tokens[k], want[k]);
        /* every generated token committed exactly once, with a probability */
        for (int k = 0; k < B * sc.gen_length; k++) {
            ck_assert_int_ge(r.commit_step[k], 0);
            ck_assert_int_lt(r.commit_step[k], sc.steps);
            ck_assert(r.commit_prob[k] > 0 && r.commit_prob[k] <= 1);
        }
        dllm_rollout_free(&r);
        free(prompt);
        free(want);
        free(am);
    }
    json_decref(root);
}
END_TEST

/* A model whose mask-id logit is raised by `bias`, as the golden script's. */
typedef struct {
    dllm_tf *m;
    float bias;
    int mask_id, V;
} biased_model;

static int biased_logits(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                         const int32_t *rows, int n_rows, float *logits)
{
    biased_model *bm = ctx;
    int rc = dllm_tf_forward(bm->m, tokens, keymask, B, T, rows, n_rows, logits);
    for (int r = 0; r < n_rows && !rc; r++)
        logits[(size_t)r * bm->V + bm->mask_id] += bm->bias;
    return rc;
}

/* The commit record agrees with the final canvas: a position holds a real
 * token iff it has a commit step (in range) and a probability; n_masked_left
 * counts the rest. Returns the row's masked count. */
static int check_record(const dllm_rollout *r, const dllm_sampler_cfg *sc, int b)
{
    const int G = r->G, T = r->P + G;
    int left = 0;
    for (int g = 0; g < G; g++) {
        size_t k = (size_t)b * G + g;
        if (r->tokens[(size_t)b * T + r->P + g] == sc->mask_id) {
            left++;
            ck_assert_int_eq(r->commit_step[k], -1);
            ck_assert(isnan(r->commit_prob[k]));
        } else {
            ck_assert_int_ge(r->commit_step[k], 0);
            ck_assert_int_lt(r->commit_step[k], sc->steps);
            ck_assert(r->commit_prob[k] > 0 && r->commit_prob[k] <= 1);
        }
    }
    ck_assert_int_eq(r->n_masked_left[b], left);
    return left;
}

/* mask_commit.json: the published generate() where the argmax x0 is often the
 * mask id -- written back, the position competes again, in later blocks too,
 * and may stay masked. Token for token; then the same case under forbid gives
 * every position a real token. */
START_TEST(mask_commits_match_reference)
{
    json_t *root = tu_json_load("sampler/mask_commit.json");
    json_t *cases = json_object_get(root, "cases");
    ck_assert_int_ge((int)json_array_size(cases), 9);
    int total_left = 0, total_later = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        dllm_tf *m = tu_load_llada(json_string_value(json_object_get(c, "model")));
        const dllm_model_config *mc = dllm_tf_config(m);
        biased_model bm = {m, (float)json_real_value(json_object_get(c, "mask_bias")), mc->mask_token_id,
                           mc->embedding_size};
        int B, P, B2, T;
        int32_t *prompt = json_ids(json_object_get(c, "prompt"), &B, &P);
        int32_t *want = json_ids(json_object_get(c, "output"), &B2, &T);
        uint8_t *am = NULL;
        json_t *amj = json_object_get(c, "attention_mask");
        if (json_is_array(amj)) {
            int b3, p3;
            int32_t *a = json_ids(amj, &b3, &p3);
            am = malloc((size_t)B * P);
            for (int k = 0; k < B * P; k++)
                am[k] = (uint8_t)a[k];
            free(a);
        }
        dllm_sampler_cfg sc = {.temperature = 0, .remasking = REMASK_LOW_CONFIDENCE,
                               .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id, .eot_id = -1,
                               .vocab = mc->embedding_size};
        sc.gen_length = (int)json_integer_value(json_object_get(c, "gen_length"));
        sc.block_length = (int)json_integer_value(json_object_get(c, "block_length"));
        sc.steps = (int)json_integer_value(json_object_get(c, "steps"));
        sc.cfg_scale = json_real_value(json_object_get(c, "cfg_scale"));
        sc.logits_eos_inf = json_is_true(json_object_get(c, "logits_eos_inf"));
        total_later += (int)json_integer_value(json_object_get(json_object_get(c, "stats"), "later_block"));
        dllm_rollout r;
        dllm_err err = {0};
        ck_assert_msg(dllm_sample(biased_logits, &bm, prompt, am, B, P, &sc, 1, &r, &err) == 0, "%s", err.msg);
        for (int k = 0; k < B * T; k++)
            ck_assert_msg(r.tokens[k] == want[k], "%s: position %d: got %d, reference %d", name, k,
                          r.tokens[k], want[k]);
        for (int b = 0; b < B; b++)
            total_left += check_record(&r, &sc, b);
        dllm_rollout_free(&r);

        sc.mask_token = DLLM_MASK_TOKEN_FORBID;
        ck_assert_int_eq(dllm_sample(biased_logits, &bm, prompt, am, B, P, &sc, 1, &r, &err), 0);
        for (int b = 0; b < B; b++)
            ck_assert_msg(check_record(&r, &sc, b) == 0, "%s: forbid left a position masked", name);
        dllm_rollout_free(&r);
        dllm_tf_free(m);
        free(prompt);
        free(want);
        free(am);
    }
    /* the goldens do exercise both paths */
    ck_assert_int_gt(total_left, 0);
    ck_assert_int_gt(total_later, 0);
    json_decref(root);
}
END_TEST

/* On a model whose draw never picks the mask id, forbid is bit-identical to
 * allow (so choosing forbid for RL changes no rollout of such a model), and at
 * temperature > 0 too: the excluded id's noise is skipped, not redrawn. */
START_TEST(forbid_is_allow_when_the_mask_never_wins)
{
    json_t *root = tu_json_load("sampler/greedy.json");
    json_t *cases = json_object_get(root, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        int B, P;
        int32_t *prompt = json_ids(json_object_get(c, "prompt"), &B, &P);
        dllm_sampler_cfg sc = base_cfg();
        sc.gen_length = (int)json_integer_value(json_object_get(c, "gen_length"));
        sc.block_length = (int)json_integer_value(json_object_get(c, "block_length"));
        sc.steps = (int)json_integer_value(json_object_get(c, "steps"));
        dllm_rollout a, f;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompt, NULL, B, P, &sc, 1, &a, &err), 0);
        sc.mask_token = DLLM_MASK_TOKEN_FORBID;
        ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompt, NULL, B, P, &sc, 1, &f, &err), 0);
        const size_t BG = (size_t)B * sc.gen_length;
        ck_assert_int_eq(memcmp(a.tokens, f.tokens, sizeof *a.tokens * (size_t)B * (P + sc.gen_length)), 0);
        ck_assert_int_eq(memcmp(a.commit_step, f.commit_step, sizeof *a.commit_step * BG), 0);
        ck_assert_int_eq(memcmp(a.commit_prob, f.commit_prob, sizeof *a.commit_prob * BG), 0);
        dllm_rollout_free(&a);
        dllm_rollout_free(&f);
        free(prompt);
    }
    json_decref(root);
    /* sampling: the draw over the other ids is the full draw's whenever the
     * full draw does not pick the excluded id */
    float logit[40];
    int agree = 0, differ = 0;
    for (int pos = 0; pos < 400; pos++) {
        for (int v = 0; v < 40; v++)
            logit[v] = (float)sin(0.37 * v + 0.11 * pos) * 2.0f;
        dllm_rng n1 = dllm_rng_make(9, DLLM_RNG_SAMPLER, 0, 0), n2 = n1;
        int32_t full = dllm_sampler_draw_x0(logit, 40, 1.0, &n1, pos);
        int32_t excl = dllm_sampler_draw_x0_excl(logit, 40, 1.0, &n2, pos, 2);
        ck_assert_int_ne(excl, 2);
        if (full != 2) {
            ck_assert_int_eq(excl, full);
            agree++;
        } else {
            differ++;
        }
    }
    ck_assert_int_gt(agree, 0);
    ck_assert_int_gt(differ, 0);
}
END_TEST

/* The Gumbel draw skips tokens whose score bound cannot beat the best so far: it must
 * pick what the full loop (every token's exp(l) / (-log u)^T, written out here)
 * picks, on flat and peaked rows, at low and high temperatures, with -inf logits
 * and an excluded id. */
static int32_t full_draw(const float *logit, int V, double temp, dllm_rng *noise, int pos,
                         int exclude)
{
    int32_t best = exclude == 0 && V > 1 ? 1 : 0;
    double best_s = -1;
    for (int v = 0; v < V; v++) {
        if (v == exclude)
            continue;
        noise->ctr = (uint64_t)pos * (uint64_t)V + (uint64_t)v;
        double u = dllm_rng_uniform(noise);
        double s = exp((double)logit[v]) / pow(-log(u), temp);
        if (s > best_s)
            best_s = s, best = v;
    }
    return best;
}

START_TEST(pruned_draw_is_the_full_draw)
{
    enum { V = 3000 };
    float *logit = malloc(V * sizeof *logit);
    const double temps[] = {0.05, 0.5, 0.9, 1.0, 1.7, 4.0};
    int n = 0;
    for (int shape = 0; shape < 4; shape++)
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (int pos = 0; pos < 40; pos++) {
                for (int v = 0; v < V; v++) {
                    double x = sin(0.731 * v + 1.3 * pos + shape);
                    logit[v] = (float)(shape == 0 ? 0.02 * x                /* flat */
                                       : shape == 1 ? 6.0 * x                 /* spread */
                                       : shape == 2 ? (v % 97 == pos ? 12.0 : x) /* peaked */
                                                    : (v % 3 ? -INFINITY : x)); /* masked */
                }
                int excl = pos % 3 == 0 ? (pos * 7) % V : -1;
                dllm_rng a = dllm_rng_make(5 + pos, DLLM_RNG_SAMPLER, 0, 0), b = a;
                int32_t want = full_draw(logit, V, temps[ti], &a, pos, excl);
                int32_t got = dllm_sampler_draw_x0_excl(logit, V, temps[ti], &b, pos, excl);
                ck_assert_msg(got == want, "shape %d, T %g, pos %d: drew %d, the full loop %d",
                              shape, temps[ti], pos, got, want);
                n++;
            }
    ck_assert_int_eq(n, 4 * 6 * 40);
    free(logit);
}
END_TEST

START_TEST(mask_token_names)
{
    dllm_mask_token m;
    ck_assert_int_eq(dllm_mask_token_parse("forbid", &m), 0);
    ck_assert_int_eq(m, DLLM_MASK_TOKEN_FORBID);
    ck_assert_str_eq(dllm_mask_token_name(m), "forbid");
    ck_assert_int_eq(dllm_mask_token_parse("allow", &m), 0);
    ck_assert_int_eq(m, DLLM_MASK_TOKEN_ALLOW);
    ck_assert_int_eq(dllm_mask_token_parse("never", &m), -1);
    dllm_sampler_cfg sc = base_cfg();
    sc.mask_token = (dllm_mask_token)7;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sampler_check(&sc, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "mask_token"));
}
END_TEST

/* Per block, step s commits n/spb (+1 for the first n % spb steps) tokens, and
 * tokens of block j are committed only during block j's steps. */
START_TEST(commit_schedule)
{
    dllm_sampler_cfg sc = base_cfg();
    sc.gen_length = 15;
    sc.block_length = 5;
    sc.steps = 6; /* 3 blocks x 2 steps: 3 then 2 per block */
    sc.temperature = 0.7;
    sc.remasking = REMASK_RANDOM;
    int32_t prompt[4] = {5, 6, 7, 8};
    dllm_rollout r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompt, NULL, 1, 4, &sc, 3, &r, &err), 0);
    int count[6] = {0};
    for (int g = 0; g < 15; g++) {
        int s = r.commit_step[g];
        ck_assert_int_eq(s / 2, g / 5);
        count[s]++;
    }
    for (int s = 0; s < 6; s++)
        ck_assert_int_eq(count[s], s % 2 == 0 ? 3 : 2);
    for (int t = 0; t < 4; t++)
        ck_assert_int_eq(r.tokens[t], prompt[t]);
    for (int t = 4; t < 19; t++)
        ck_assert_int_ne(r.tokens[t], sc.mask_id);
    dllm_rollout_free(&r);
}
END_TEST

START_TEST(seeded_and_batch_independent)
{
    dllm_sampler_cfg sc = base_cfg();
    sc.temperature = 1.0;
    int32_t prompts[2 * 5] = {5, 9, 11, 13, 17, 6, 8, 10, 12, 14};
    dllm_rollout a, b, c, solo;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompts, NULL, 2, 5, &sc, 11, &a, &err), 0);
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompts, NULL, 2, 5, &sc, 11, &b, &err), 0);
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompts, NULL, 2, 5, &sc, 12, &c, &err), 0);
    ck_assert_int_eq(memcmp(a.tokens, b.tokens, sizeof *a.tokens * 2 * 13), 0);
    ck_assert_int_eq(memcmp(a.commit_step, b.commit_step, sizeof *a.commit_step * 2 * 8), 0);
    ck_assert_int_ne(memcmp(a.tokens, c.tokens, sizeof *a.tokens * 2 * 13), 0);
    /* the first sequence alone gets the same noise as in the batch */
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompts, NULL, 1, 5, &sc, 11, &solo, &err), 0);
    ck_assert_int_eq(memcmp(a.tokens, solo.tokens, sizeof *a.tokens * 13), 0);
    dllm_rollout_free(&a);
    dllm_rollout_free(&b);
    dllm_rollout_free(&c);
    dllm_rollout_free(&solo);
}
END_TEST

START_TEST(eos_switches_and_lengths)
{
    dllm_sampler_cfg sc = base_cfg();
    sc.temperature = 1.5;
    sc.logits_eos_inf = true;
    int32_t prompt[3] = {5, 6, 7};
    dllm_rollout r;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompt, NULL, 1, 3, &sc, 5, &r, &err), 0);
    for (int t = 3; t < 11; t++)
        ck_assert_int_ne(r.tokens[t], sc.eos_id);
    dllm_rollout_free(&r);
    int32_t gen[6] = {4, 9, 0, 0, 7, 0};
    ck_assert_int_eq(dllm_completion_length(gen, 6, 0), 3);
    ck_assert_int_eq(dllm_completion_length(gen, 2, 0), 2);
}
END_TEST

START_TEST(bad_configs_are_input_errors)
{
    dllm_sampler_cfg sc = base_cfg();
    dllm_err err = {0};
    sc.block_length = 3;
    ck_assert_int_eq(dllm_sampler_check(&sc, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "block_length"));
    sc = base_cfg();
    sc.steps = 3;
    ck_assert_int_eq(dllm_sampler_check(&sc, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "steps"));
    sc = base_cfg();
    sc.temperature = -1;
    ck_assert_int_eq(dllm_sampler_check(&sc, &err), DLLM_EXIT_INPUT);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("llada");
    tcase_add_checked_fixture(tc, load_model, free_model);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, greedy_matches_reference);
    tcase_add_test(tc, mask_commits_match_reference);
    tcase_add_test(tc, forbid_is_allow_when_the_mask_never_wins);
    tcase_add_test(tc, mask_token_names);
    tcase_add_test(tc, pruned_draw_is_the_full_draw);
    tcase_add_test(tc, commit_schedule);
    tcase_add_test(tc, seeded_and_batch_independent);
    tcase_add_test(tc, eos_switches_and_lengths);
    tcase_add_test(tc, bad_configs_are_input_errors);
    suite_add_tcase(s, tc);
    return s;
}
