/* test_estimators: sequence log-likelihood estimators (docs/METHOD.md §3).
 *  - elbo agrees with the published reference estimator within Monte Carlo
 *    error; one_step agrees to 1e-4 (tests/ref/make_estimator_goldens.py);
 *  - elbo is unbiased on a model whose exact likelihood is known;
 *  - coupled estimates of one policy under itself give a log-ratio of exactly 0;
 *  - the elbo's variance falls (at least) as 1/K;
 *  - trajectory replay with shrink 1 reproduces the sampler's commit probabilities. */
#include "dllm/estimators.h"
#include "dllm/llada.h"

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

static dllm_lik_cfg lik_cfg(dllm_estimator kind, int mc)
{
    const dllm_model_config *mc_ = dllm_tf_config(model);
    dllm_lik_cfg c = {.kind = kind, .mc = mc, .temperature = 1.0, .shrink = 1,
                      .mask_id = mc_->mask_token_id, .vocab = mc_->embedding_size};
    return c;
}

static int32_t *json_ids(json_t *a, int *n)
{
    *n = (int)json_array_size(a);
    int32_t *out = malloc(sizeof *out * (size_t)*n);
    for (int i = 0; i < *n; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return out;
}

START_TEST(matches_reference_estimator)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/estimators/tiny.json", getenv("DLLM_TEST_DATA"));
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root, "%s: %s", path, je.text);
    json_t *cases = json_object_get(root, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        int P, L;
        int32_t *prompt = json_ids(json_object_get(c, "prompt"), &P);
        int32_t *compl = json_ids(json_object_get(c, "completion"), &L);
        dllm_err err = {0};
        dllm_lik_result r;
        dllm_lik_cfg oc = lik_cfg(EST_ONE_STEP, 0);
        ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, P, compl, L, NULL, &oc,
                                          dllm_rng_make(1, DLLM_RNG_MASKS, 0, 0), &r, &err), 0);
        ck_assert_double_eq_tol(r.seq_logp, json_real_value(json_object_get(c, "one_step")), 1e-4);
        json_t *tok = json_object_get(c, "one_step_tokens");
        for (int t = 0; t < L; t++)
            ck_assert_double_eq_tol(r.token_logp[t], json_real_value(json_array_get(tok, (size_t)t)),
                                    1e-4);
        dllm_lik_result_free(&r);
        dllm_lik_cfg ec = lik_cfg(EST_ELBO, 1024);
        ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, P, compl, L, NULL, &ec,
                                          dllm_rng_make(1, DLLM_RNG_MASKS, 0, i), &r, &err), 0);
        double ref = json_real_value(json_object_get(c, "elbo_mc1024"));
        double se = json_real_value(json_object_get(c, "elbo_se"));
        double tol = 4 * sqrt(se * se + r.mc_se * r.mc_se);
        ck_assert_msg(fabs(r.seq_logp - ref) < tol, "elbo %.4f +- %.4f vs reference %.4f +- %.4f",
                      r.seq_logp, r.mc_se, ref, se);
        ck_assert(r.mc_se > 0 && r.mc_se < 3 * se);
        dllm_lik_result_free(&r);
        free(prompt);
        free(compl);
    }
    json_decref(root);
}
END_TEST

/* A model that ignores context: the logits of position t are a fixed function
 * of t. Its exact log-likelihood is sum_t log softmax(l_t)[y_t]. */
#define FV 7
static void context_free_logits(int t, float *out)
{
    for (int v = 0; v < FV; v++)
        out[v] = (float)sin(1.3 * t + 0.7 * v) * 2.0f;
}

static int context_free_fn(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                           const int32_t *rows, int n_rows, float *logits)
{
    (void)m; (void)tokens; (void)keymask; (void)B;
    for (int r = 0; r < n_rows; r++)
        context_free_logits(rows[r] % T, logits + (size_t)r * FV);
    return 0;
}

/* Many independent elbo estimates of a context-free model average to the
 * exact log-likelihood; with holes (positions holding the mask id, left by the
 * sampler) to that of the real tokens alone, so the L'/n_k weights are right. */
static void check_elbo_unbiased(const int32_t *compl, int L, int mask_id)
{
    int32_t prompt[3] = {1, 2, 3};
    const int P = 3;
    double exact = 0;
    for (int i = 0; i < L; i++) {
        if (compl[i] == mask_id)
            continue;
        float l[FV];
        context_free_logits(P + i, l);
        double z = 0;
        for (int v = 0; v < FV; v++)
            z += exp(l[v]);
        exact += l[compl[i]] - log(z);
    }
    dllm_lik_cfg c = {.kind = EST_ELBO, .mc = 2, .temperature = 1, .mask_id = mask_id, .vocab = FV};
    const int R = 4000;
    double sum = 0, sum2 = 0;
    for (int s = 0; s < R; s++) {
        dllm_lik_result r;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_seq_logprob(context_free_fn, NULL, prompt, P, compl, L, NULL, &c,
                                          dllm_rng_make(9, DLLM_RNG_MASKS, (uint64_t)s, 0), &r, &err), 0);
        for (int i = 0; i < L; i++)
            if (compl[i] == mask_id)
                ck_assert(isnan(r.token_logp[i]));
        sum += r.seq_logp;
        sum2 += r.seq_logp * r.seq_logp;
        dllm_lik_result_free(&r);
    }
    double mean = sum / R, se = sqrt((sum2 / R - mean * mean) / R);
    ck_assert_msg(se > 0, "the estimator should be random for this model");
    ck_assert_msg(fabs(mean - exact) < 4 * se, "mean %.5f vs exact %.5f (se %.5f)", mean, exact, se);
}

START_TEST(elbo_unbiased_when_exact_is_known)
{
    const int M = FV - 1; /* the mask id: no token of a completion, or a hole */
    int32_t compl[9] = {0, 4, 5, 1, 3, 2, 5, 0, 1}, holes[9] = {0, 4, M, 1, 3, 2, M, 0, 1};
    check_elbo_unbiased(compl, 9, M);
    check_elbo_unbiased(holes, 9, M);
}
END_TEST

START_TEST(coupled_self_ratio_is_exactly_zero)
{
    int32_t prompt[4] = {5, 6, 7, 8}, compl[6] = {9, 10, 11, 12, 0, 0};
    dllm_estimator kinds[2] = {EST_ELBO, EST_ONE_STEP};
    for (int k = 0; k < 2; k++) {
        dllm_lik_cfg c = lik_cfg(kinds[k], 8);
        c.p_mask_prompt = kinds[k] == EST_ONE_STEP ? 0.5 : 0;
        dllm_rng stream = dllm_rng_make(42, DLLM_RNG_MASKS, 3, 1);
        dllm_lik_result a, b, u;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 4, compl, 6, NULL, &c, stream, &a, &err), 0);
        ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 4, compl, 6, NULL, &c, stream, &b, &err), 0);
        ck_assert(a.seq_logp - b.seq_logp == 0.0);
        /* an uncoupled stream gives a different estimate (the estimator is random) */
        ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 4, compl, 6, NULL, &c,
                                          dllm_rng_make(43, DLLM_RNG_MASKS, 3, 1), &u, &err), 0);
        ck_assert(a.seq_logp != u.seq_logp);
        dllm_lik_result_free(&a);
        dllm_lik_result_free(&b);
        dllm_lik_result_free(&u);
    }
}
END_TEST

START_TEST(elbo_variance_falls_as_one_over_k)
{
    int32_t prompt[4] = {5, 6, 7, 8}, compl[8] = {9, 10, 11, 12, 13, 14, 0, 0};
    double var[2];
    int Ks[2] = {1, 8};
    for (int j = 0; j < 2; j++) {
        dllm_lik_cfg c = lik_cfg(EST_ELBO, Ks[j]);
        const int R = 300;
        double s = 0, s2 = 0;
        for (int r = 0; r < R; r++) {
            dllm_lik_result res;
            dllm_err err = {0};
            ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 4, compl, 8, NULL, &c,
                                              dllm_rng_make(5, DLLM_RNG_MASKS, (uint64_t)r, (uint64_t)j),
                                              &res, &err), 0);
            s += res.seq_logp;
            s2 += res.seq_logp * res.seq_logp;
            dllm_lik_result_free(&res);
        }
        var[j] = s2 / R - (s / R) * (s / R);
    }
    /* 1/K would give var[1] = var[0]/8; allow sampling noise (and stratification,
     * which can only help) */
    ck_assert_msg(var[1] < var[0] / 8 * 1.6, "var K=1 %.4f, K=8 %.4f", var[0], var[1]);
    ck_assert(var[1] > 0);
}
END_TEST

START_TEST(stratified_counts)
{
    dllm_rng r = dllm_rng_make(1, DLLM_RNG_MASKS, 0, 0);
    int n[16], seen[17] = {0};
    dllm_elbo_mask_counts(&r, 16, 16, n);
    for (int k = 0; k < 16; k++) {
        ck_assert(n[k] >= 1 && n[k] <= 16);
        seen[n[k]]++;
    }
    for (int v = 1; v <= 16; v++)
        ck_assert_int_eq(seen[v], 1); /* K = L: every count exactly once */
    dllm_elbo_mask_counts(&r, 5, 3, n);
    for (int k = 0; k < 3; k++)
        ck_assert(n[k] >= 1 && n[k] <= 5);
}
END_TEST

START_TEST(trajectory_replays_sampler_probabilities)
{
    const dllm_model_config *mc = dllm_tf_config(model);
    dllm_sampler_cfg sc = {.gen_length = 8, .block_length = 4, .steps = 8, .temperature = 1.0,
                           .remasking = REMASK_RANDOM, .mask_id = mc->mask_token_id,
                           .eos_id = mc->eos_token_id, .eot_id = -1, .vocab = mc->embedding_size};
    int32_t prompt[5] = {5, 9, 11, 13, 17};
    dllm_rollout ro;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_sample(tu_llada_logits, model, prompt, NULL, 1, 5, &sc, 21, &ro, &err), 0);
    dllm_lik_cfg c = lik_cfg(EST_TRAJECTORY, 0);
    dllm_lik_result r;
    ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 5, ro.tokens + 5, 8, ro.commit_step,
                                      &c, dllm_rng_make(1, DLLM_RNG_MASKS, 0, 0), &r, &err), 0);
    double surrogate = 0;
    for (int i = 0; i < 8; i++) {
        ck_assert_double_eq_tol(r.token_logp[i], log(ro.commit_prob[i]), 2e-5);
        surrogate += log(ro.commit_prob[i]);
    }
    ck_assert_double_eq_tol(r.seq_logp, surrogate, 1e-4);
    dllm_lik_result_free(&r);
    /* shrink 2: half the forward passes, every token still scored */
    c.shrink = 2;
    ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 5, ro.tokens + 5, 8, ro.commit_step,
                                      &c, dllm_rng_make(1, DLLM_RNG_MASKS, 0, 0), &r, &err), 0);
    for (int i = 0; i < 8; i++)
        ck_assert(isfinite(r.token_logp[i]) && r.token_logp[i] <= 0);
    dllm_lik_result_free(&r);
    /* without commit steps it is an input error */
    ck_assert_int_eq(dllm_seq_logprob(tu_llada_logits, model, prompt, 5, ro.tokens + 5, 8, NULL, &c,
                                      dllm_rng_make(1, DLLM_RNG_MASKS, 0, 0), &r, &err),
                     DLLM_EXIT_INPUT);
    dllm_rollout_free(&ro);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("estimators");
    TCase *tc = tcase_create("llada");
    tcase_add_checked_fixture(tc, load_model, free_model);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_reference_estimator);
    tcase_add_test(tc, elbo_unbiased_when_exact_is_known);
    tcase_add_test(tc, coupled_self_ratio_is_exactly_zero);
    tcase_add_test(tc, elbo_variance_falls_as_one_over_k);
    tcase_add_test(tc, stratified_counts);
    tcase_add_test(tc, trajectory_replays_sampler_probabilities);
    suite_add_tcase(s, tc);
    return s;
}
