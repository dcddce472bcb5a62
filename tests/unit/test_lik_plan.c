/* test_lik_plan: batched likelihood plans -- equal to the single-sequence
 * estimators, independent of chunking, and with exact gradients (finite
 * differences through the real tiny model); positions a rollout left masked
 * are never scored, by any estimator. */
#include "dllm/lik_plan.h"
#include "dllm/llada.h"

#include "kernels/ops.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dllm_tf *model;

static int fwd(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
               const int32_t *rows, int n_rows, float *logits)
{
    return dllm_tf_forward(m, tokens, keymask, B, T, rows, n_rows, logits);
}

static void bwd(void *m, const float *dlogits)
{
    dllm_tf_backward(m, dlogits);
}

/* The loss gradient the way a device builds it (dllm_lik_plan_backward_logp), played on
 * the host model: the kept forward's logits stay here, only log-probs (op_xent_fwd) go
 * to the plan and only dL/dlogp per row comes back (op_xent_bwd builds the dlogits). */
static struct {
    float *logits, *lse;
    int32_t *target;
    int R;
} kept;

static int fwd_logp(void *m, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                    const int32_t *rows, const int32_t *targets, int n_rows, float *logp)
{
    int V = dllm_tf_config(m)->embedding_size;
    free(kept.logits), free(kept.lse), free(kept.target);
    kept.logits = malloc(sizeof(float) * (size_t)n_rows * V);
    kept.lse = malloc(sizeof(float) * (size_t)n_rows);
    kept.target = malloc(sizeof(int32_t) * (size_t)n_rows);
    memcpy(kept.target, targets, sizeof(int32_t) * (size_t)n_rows);
    kept.R = n_rows;
    int rc = dllm_tf_forward(m, tokens, keymask, B, T, rows, n_rows, kept.logits);
    if (!rc)
        op_xent_fwd(logp, kept.lse, kept.logits, targets, n_rows, V);
    return rc;
}

static void bwd_logp(void *m, const float *g)
{
    int V = dllm_tf_config(m)->embedding_size;
    float *dl = calloc((size_t)kept.R * V, sizeof(float));
    op_xent_bwd(dl, g, kept.logits, kept.lse, kept.target, kept.R, V);
    dllm_tf_backward(m, dl);
    free(dl);
}

static void load_model(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/llada/tiny", getenv("DLLM_TEST_DATA"));
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_load(&model, dir, &err) == 0, "%s", err.msg);
}

static void free_model(void)
{
    dllm_tf_free(model);
}

static dllm_lik_cfg cfg_of(dllm_estimator kind)
{
    const dllm_model_config *mc = dllm_tf_config(model);
    dllm_lik_cfg c = {.kind = kind, .mc = 4, .shrink = 1, .temperature = 1.0,
                      .mask_id = mc->mask_token_id, .vocab = mc->embedding_size};
    return c;
}

enum { N = 3, P = 4, G = 6 };
static const int32_t prompts[N * P] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const int32_t gen[N * G] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                   32, 33, 34, 35, 36, 37};
static const int16_t steps[N * G] = {0, 2, 1, 3, 5, 4, 1, 1, 0, 2, 3, 2, 5, 4, 3, 2, 1, 0};

START_TEST(equals_single_sequence_estimators)
{
    int L[N] = {G, G, G}; /* no EOS: the single-sequence canvas is the same */
    dllm_estimator kinds[3] = {EST_ONE_STEP, EST_ELBO, EST_TRAJECTORY};
    for (int k = 0; k < 3; k++) {
        dllm_lik_cfg c = cfg_of(kinds[k]);
        dllm_lik_plan p;
        dllm_err err = {0};
        ck_assert_int_eq(dllm_lik_plan_build(&p, &c, prompts, NULL, gen, L, steps, N, P, G, 9, 4, 0, &err), 0);
        double seq[N], tok[N * G], se[N];
        ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 64, seq, tok, se, NULL, &err), 0);
        for (int i = 0; i < N; i++) {
            dllm_lik_result r;
            ck_assert_int_eq(dllm_seq_logprob(fwd, model, prompts + i * P, P, gen + i * G, G,
                                              steps + i * G, &c,
                                              dllm_rng_make(9, DLLM_RNG_MASKS, 4, (uint64_t)i), &r, &err), 0);
            ck_assert_msg(fabs(seq[i] - r.seq_logp) < 1e-5, "%s seq %d: %f vs %f",
                          dllm_estimator_name(kinds[k]), i, seq[i], r.seq_logp);
            for (int t = 0; t < G; t++)
                if (isnan(r.token_logp[t]))
                    ck_assert(isnan(tok[i * G + t]));
                else
                    ck_assert_double_eq_tol(tok[i * G + t], r.token_logp[t], 1e-5);
            if (kinds[k] == EST_ELBO)
                ck_assert_double_eq_tol(se[i], r.mc_se, 1e-5);
            dllm_lik_result_free(&r);
        }
        dllm_lik_plan_free(&p);
    }
}
END_TEST

START_TEST(chunking_and_lengths)
{
    int L[N] = {3, G, 1};
    dllm_lik_cfg c = cfg_of(EST_ELBO);
    dllm_lik_plan p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_lik_plan_build(&p, &c, prompts, NULL, gen, L, NULL, N, P, G, 1, 2, 0, &err), 0);
    ck_assert_int_eq(p.n_canvas, N * 4);
    double a[N], b[N], ta[N * G];
    ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 1, a, ta, NULL, NULL, &err), 0);
    ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 5, b, NULL, NULL, NULL, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq_tol(a[i], b[i], 1e-5);
    /* the padding tail past L is masked in every elbo canvas */
    for (int k = 0; k < p.n_canvas; k++) {
        const int i = p.canvas_seq[k];
        for (int t = L[i]; t < G; t++)
            ck_assert_int_eq(p.canvas[(size_t)k * p.T + P + t], c.mask_id);
    }
    /* tokens past L take no part */
    for (int t = 3; t < G; t++)
        ck_assert(isnan(ta[0 * G + t]));
    for (int t = 1; t < G; t++)
        ck_assert(isnan(ta[2 * G + t]));
    dllm_lik_plan_free(&p);
    /* bad lengths are input errors */
    int bad[N] = {0, 1, 1};
    ck_assert_int_eq(dllm_lik_plan_build(&p, &c, prompts, NULL, gen, bad, NULL, N, P, G, 1, 2, 0, &err),
                     DLLM_EXIT_INPUT);
}
END_TEST

typedef struct {
    const double *w, *u;
} lin_loss;

/* the gradient of a linear loss: constants, whatever the estimates */
static int lin_grad(void *ctx, int s0, int s1, const double *seq_logp, const double *tok_logp,
                    double *dseq, double *dtok, dllm_err *err)
{
    const lin_loss *ll = ctx;
    (void)seq_logp; (void)tok_logp; (void)err;
    for (int i = s0; i < s1; i++) {
        dseq[i] = ll->w[i];
        for (int t = 0; t < G; t++)
            dtok[i * G + t] = ll->u ? ll->u[i * G + t] : 0;
    }
    return 0;
}

/* loss = sum_i w_i seq_i + sum_{i,t} u_{i,t} tok_{i,t}: analytic gradient vs
 * central differences on a few entries of every parameter tensor and at the model's
 * largest gradient, which must not be zero (a lost gradient would otherwise agree with
 * a flat difference under the absolute floor). */
static void check_gradient_on(dllm_estimator kind, bool token_terms, const int32_t *gv,
                              const int16_t *sv, const int *L)
{
    uint8_t pm[N * P] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}; /* sequence 1 left-padded */
    dllm_lik_cfg c = cfg_of(kind);
    dllm_lik_plan p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_lik_plan_build(&p, &c, prompts, pm, gv, L, sv, N, P, G, 3, 1, 0, &err), 0);
    double w[N] = {0.7, -1.3, 0.4}, u[N * G];
    for (int k = 0; k < N * G; k++)
        u[k] = token_terms ? 0.1 * ((k * 7) % 5 - 2) : NAN;
    dllm_optim_zero_grad(dllm_tf_optim(model));
    double seq[N];
    lin_loss ll = {w, token_terms ? u : NULL};
    ck_assert_int_eq(dllm_lik_plan_backward(&p, fwd, bwd, model, 2, lin_grad, &ll, seq, NULL, &err), 0);
    /* the estimates backward returns are the forward's */
    double ev[N], evt[N * G], bt[N * G];
    ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 8, ev, evt, NULL, NULL, &err), 0);
    dllm_optim_zero_grad(dllm_tf_optim(model));
    ck_assert_int_eq(dllm_lik_plan_backward(&p, fwd, bwd, model, 2, lin_grad, &ll, seq, bt, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(seq[i] - ev[i]) < 1e-5, "backward's estimate %f vs eval's %f", seq[i], ev[i]);
    for (int k = 0; k < N * G; k++)
        ck_assert(isnan(evt[k]) ? isnan(bt[k]) : fabs(bt[k] - evt[k]) < 1e-5);
    /* the device form of the same backward: the same estimates and gradients to fp32
     * rounding (log-probs in fp32, dlogits from fp32 g) */
    size_t ntr;
    dllm_optim_trainable(dllm_tf_optim(model), &ntr);
    float *g_host = malloc(sizeof(float) * ntr);
    memcpy(g_host, dllm_optim_grads(dllm_tf_optim(model)), sizeof(float) * ntr);
    dllm_optim_zero_grad(dllm_tf_optim(model));
    double seq_l[N], bt_l[N * G];
    ck_assert_int_eq(dllm_lik_plan_backward_logp(&p, fwd_logp, bwd_logp, model, 2, lin_grad, &ll,
                                                 seq_l, bt_l, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(seq_l[i] - ev[i]) < 1e-4, "logp backward's estimate %f vs %f", seq_l[i],
                      ev[i]);
    for (int k = 0; k < N * G; k++)
        ck_assert(isnan(evt[k]) ? isnan(bt_l[k]) : fabs(bt_l[k] - evt[k]) < 1e-4);
    const float *g_dev = dllm_optim_grads(dllm_tf_optim(model));
    double e = 0, s2 = 0;
    for (size_t k = 0; k < ntr; k++) {
        e += ((double)g_dev[k] - g_host[k]) * ((double)g_dev[k] - g_host[k]);
        s2 += (double)g_host[k] * g_host[k];
    }
    ck_assert(s2 > 0);
    ck_assert_msg(e / s2 < 1e-10, "logp backward's gradients: normalised MSE %g", e / s2);
    free(g_host);
    dllm_optim_zero_grad(dllm_tf_optim(model));
    ck_assert_int_eq(dllm_lik_plan_backward(&p, fwd, bwd, model, 2, lin_grad, &ll, seq, bt, &err), 0);
    const dllm_param *ps;
    int np = dllm_tf_params(model, &ps);
    double worst = 0;
    int top_j = 0;
    size_t top_idx = 0;
    for (int j = 0; j < np; j++) {
        size_t n = 1;
        for (int d = 0; d < ps[j].ndim; d++)
            n *= (size_t)ps[j].shape[d];
        for (size_t i = 0; i < n; i++)
            if (fabsf(ps[j].grad[i]) > fabsf(ps[top_j].grad[top_idx]))
                top_j = j, top_idx = i;
    }
    /* measured 8.4 to 12 (an embedding row) */
    ck_assert_msg(fabsf(ps[top_j].grad[top_idx]) > 1.0f, "the largest gradient (%s[%zu]) is %g",
                  ps[top_j].name, top_idx, (double)ps[top_j].grad[top_idx]);
    for (int j = 0; j < np; j++) {
        size_t n = 1;
        for (int d = 0; d < ps[j].ndim; d++)
            n *= (size_t)ps[j].shape[d];
        for (int probe = 0; probe < (j == top_j ? 4 : 3); probe++) {
            size_t idx = probe == 3 ? top_idx : (size_t)(probe * 7919 + j * 31) % n;
            float *x = &ps[j].data[idx], x0 = *x;
            double f[2];
            for (int s = 0; s < 2; s++) {
                *x = x0 + (s ? -1e-2f : 1e-2f);
                double sq[N], tk[N * G];
                ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 8, sq, tk, NULL, NULL, &err), 0);
                f[s] = 0;
                for (int i = 0; i < N; i++)
                    f[s] += w[i] * sq[i];
                for (int k = 0; token_terms && k < N * G; k++)
                    if (!isnan(tk[k]))
                        f[s] += u[k] * tk[k];
            }
            *x = x0;
            double fd = (f[0] - f[1]) / 2e-2, an = ps[j].grad[idx];
            /* the floor: fp32 evaluations of a loss of about 50 differenced over 2e-2
             * carry ~1e-4 of rounding noise, which the build's optimisation level moves */
            double rel = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-2);
            ck_assert_msg(rel < 2e-2, "%s[%zu]: analytic %g, finite difference %g", ps[j].name, idx, an, fd);
            worst = rel > worst ? rel : worst;
        }
    }
    dllm_lik_plan_free(&p);
}

static void check_gradient(dllm_estimator kind, bool token_terms)
{
    int L[N] = {G, 4, 5};
    check_gradient_on(kind, token_terms, gen, steps, L);
}

/* Holes (positions left masked) in sequence 0, nothing but holes in sequence
 * 1: the gradient through what remains, with a row-less sequence in the
 * middle of the backward's chunks. */
static void check_gradient_holes(dllm_estimator kind)
{
    const int M = dllm_tf_config(model)->mask_token_id;
    const int32_t gv[N * G] = {20, M, 22, 23, M, 25, M, M, M, M, M, M, 32, 33, 34, 35, 36, 37};
    const int16_t sv[N * G] = {0, -1, 1, 3, -1, 4, -1, -1, -1, -1, -1, -1, 5, 4, 3, 2, 1, 0};
    int L[N] = {G, G, 5};
    check_gradient_on(kind, kind != EST_ELBO, gv, sv, L);
}

/* What the sampler can leave in a completion (mask_token = allow): positions
 * still masked (commit step -1), a committed-mask record (a step, but the mask
 * id), a completion that is nothing but masks, masks after the EOS. No
 * estimator scores a masked position; each stays masked in every canvas; the
 * rest are scored as usual. A real token without a commit step is still an
 * input error for trajectory. */
START_TEST(masked_positions_are_not_scored)
{
    const int M = dllm_tf_config(model)->mask_token_id;
    const int32_t g2[N * G] = {20, 21, M, 23, M, 25, M, M, M, M, M, M, 32, 33, 34, 0, 36, M};
    const int32_t full[N * G] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 0, 36, M};
    const int16_t cs2[N * G] = {0, 2, -1, 3, 3, 4, -1, -1, -1, -1, -1, -1, 5, 4, 3, 2, 1, -1};
    const int16_t csfull[N * G] = {0, 2, 1, 3, 3, 4, 1, 1, 0, 2, 3, 2, 5, 4, 3, 2, 1, 0};
    int L[N] = {G, G, 4};
    dllm_estimator kinds[3] = {EST_ONE_STEP, EST_ELBO, EST_TRAJECTORY};
    for (int k = 0; k < 3; k++) {
        dllm_lik_cfg c = cfg_of(kinds[k]);
        dllm_lik_plan p, q;
        dllm_err err = {0};
        ck_assert_msg(dllm_lik_plan_build(&p, &c, prompts, NULL, g2, L, cs2, N, P, G, 3, 1, 0, &err) == 0,
                      "%s: %s", dllm_estimator_name(kinds[k]), err.msg);
        for (int r = 0; r < p.n_rows; r++) {
            ck_assert_int_ne(p.target[r], M);
            ck_assert_int_ne(p.seq[r], 1);
        }
        int per_seq[N] = {0};
        for (int cv = 0; cv < p.n_canvas; cv++) {
            int i = p.canvas_seq[cv];
            per_seq[i]++;
            for (int t = 0; t < G; t++)
                if (g2[i * G + t] == M)
                    ck_assert_int_eq(p.canvas[(size_t)cv * p.T + P + t], M);
        }
        /* every sequence keeps a canvas, so every one reaches the loss */
        ck_assert_int_eq(per_seq[1], kinds[k] == EST_ELBO ? c.mc : 1);
        if (kinds[k] == EST_ELBO) /* weights L'/(n_k K) over the 4 scorable tokens */
            for (int cv = 0; cv < p.n_canvas; cv++) {
                int n = 0;
                double a = 0;
                for (int r = 0; r < p.n_rows; r++)
                    if (p.row[r] / p.T == cv) {
                        n++;
                        a = p.a[r];
                    }
                if (p.canvas_seq[cv] == 0)
                    ck_assert_double_eq_tol(a * n * c.mc, 4.0, 1e-12);
            }
        double seq[N], tok[N * G];
        ck_assert_int_eq(dllm_lik_plan_eval(&p, fwd, model, 2, seq, tok, NULL, NULL, &err), 0);
        ck_assert(seq[1] == 0.0);
        for (int i = 0; i < N; i++) {
            ck_assert(isfinite(seq[i]));
            for (int t = 0; t < G; t++)
                if (g2[i * G + t] == M || t >= L[i])
                    ck_assert(isnan(tok[i * G + t]));
        }
        if (kinds[k] != EST_ELBO)
            for (int t = 0; t < G; t++)
                if (g2[t] != M)
                    ck_assert(isfinite(tok[t]));
        /* one_step masks the whole completion: the scored tokens' values are
         * those of the same completion with real tokens in the holes */
        if (kinds[k] == EST_ONE_STEP) {
            ck_assert_int_eq(dllm_lik_plan_build(&q, &c, prompts, NULL, full, L, csfull, N, P, G, 3, 1, 0, &err), 0);
            double seq2[N], tok2[N * G];
            ck_assert_int_eq(dllm_lik_plan_eval(&q, fwd, model, 2, seq2, tok2, NULL, NULL, &err), 0);
            double sum = 0;
            for (int t = 0; t < G; t++)
                if (g2[t] != M) {
                    ck_assert_double_eq_tol(tok[t], tok2[t], 1e-5);
                    sum += tok[t];
                }
            ck_assert_double_eq_tol(seq[0], sum, 1e-9);
            dllm_lik_plan_free(&q);
        }
        dllm_lik_plan_free(&p);
    }
    /* trajectory: a real token that was never committed is no rollout */
    int16_t bad[N * G];
    memcpy(bad, cs2, sizeof bad);
    bad[1] = -1;
    dllm_lik_cfg c = cfg_of(EST_TRAJECTORY);
    dllm_lik_plan p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_lik_plan_build(&p, &c, prompts, NULL, g2, L, bad, N, P, G, 3, 1, 0, &err),
                     DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "token 1 (id 21) has no commit step"));
}
END_TEST

START_TEST(gradient_one_step_tokens) { check_gradient(EST_ONE_STEP, true); }
END_TEST
START_TEST(gradient_elbo) { check_gradient(EST_ELBO, false); }
END_TEST
START_TEST(gradient_trajectory) { check_gradient(EST_TRAJECTORY, true); }
END_TEST

START_TEST(gradient_with_holes)
{
    check_gradient_holes(EST_ONE_STEP);
    check_gradient_holes(EST_ELBO);
    check_gradient_holes(EST_TRAJECTORY);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("lik_plan");
    TCase *tc = tcase_create("llada");
    tcase_add_checked_fixture(tc, load_model, free_model);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, equals_single_sequence_estimators);
    tcase_add_test(tc, chunking_and_lengths);
    tcase_add_test(tc, masked_positions_are_not_scored);
    tcase_add_test(tc, gradient_one_step_tokens);
    tcase_add_test(tc, gradient_elbo);
    tcase_add_test(tc, gradient_trajectory);
    tcase_add_test(tc, gradient_with_holes);
    suite_add_tcase(s, tc);
    return s;
}
