/* test_sampler: the denoising sampler against the published reference
 * algorithm (tests/ref/make_sampler_goldens.py) on the tiny checkpoint, plus
 * its invariants: commit schedule, determinism, keyed randomness. */
#include "dllm/llada.h"
#include "dllm/sampler.h"

#include "tests/test_util.h"

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

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("llada");
    tcase_add_checked_fixture(tc, load_model, free_model);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, greedy_matches_reference);
    tcase_add_test(tc, commit_schedule);
    tcase_add_test(tc, seeded_and_batch_independent);
    tcase_add_test(tc, eos_switches_and_lengths);
    tcase_add_test(tc, bad_configs_are_input_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
