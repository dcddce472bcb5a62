/* test_grpo: GRPO advantages and loss (docs/METHOD.md §4).
 *  - advantages against hand values and torch.std (unbiased) goldens; zero-variance
 *    groups give exactly 0 and are counted;
 *  - loss, surrogate, KL, clip_frac and the gradients against a PyTorch float64
 *    autograd reference (tests/ref/make_ais_goldens.py -> tests/data/grpo/loss.json)
 *    for sequence/token ratio x seq_mean/token_mean x beta 0/0.04;
 *  - the gradient by central finite differences in double for the same cases;
 *  - with all-reduced denominators, slices of the batch add up to the global
 *    loss with the same gradients (data parallelism);
 *  - zero gradient where the clip is active; c_i = 0 keeps the denominator and
 *    cannot poison the batch; argument checks and enum parsing;
 *  - grpo.random_drop: over 2000 steps of 64 completions the dropped share is within
 *    four binomial standard errors of p (0.34 and 0.05), and no step's count is far
 *    outside its own binomial spread; the draws are a function of (seed, step, global
 *    index) alone (one batch equals two rank slices; another seed or step draws
 *    others); p = 0 leaves every coefficient's bits; a dropped completion's token
 *    coefficients are all 0 and the others untouched. */
#include "src/rl/grpo.h"

#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *goldens;

static void load_goldens(void)
{
    goldens = tu_json_load("grpo/loss.json");
}

static void free_goldens(void)
{
    json_decref(goldens);
}

static int close_rel(double got, double want, double rel, double abs_)
{
    if (isnan(want))
        return isnan(got);
    return fabs(got - want) <= rel * fabs(want) + abs_;
}

START_TEST(advantages_hand_values)
{
    /* group 0: r = (1, 0, 0, 1): mean 0.5, unbiased std sqrt(1/3);
     * group 1: all equal -> exactly 0; group 2: (3, 1, 2, 2): mean 2, std sqrt(2/3) */
    const double r[12] = {1, 0, 0, 1, 2, 2, 2, 2, 3, 1, 2, 2};
    double A[12];
    int zv = -1;
    dllm_err err = {0};
    ck_assert_int_eq(grpo_advantages(r, 3, 4, GRPO_ADV_STD, 1e-6, A, &zv, &err), 0);
    const double s0 = sqrt(1.0 / 3.0) + 1e-6, s2 = sqrt(2.0 / 3.0) + 1e-6;
    const double want[12] = {0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0, 0, 0, 0, 0,
                             1 / s2, -1 / s2, 0, 0};
    for (int k = 0; k < 12; k++)
        ck_assert_double_eq_tol(A[k], want[k], 1e-15);
    ck_assert_int_eq(zv, 1);
    ck_assert_double_eq_tol(A[0], 0.866023903787037, 1e-15); /* 0.5 / (0.5773502692 + 1e-6) */
    ck_assert_int_eq(grpo_advantages(r, 3, 4, GRPO_ADV_NONE, 1e-6, A, &zv, &err), 0);
    const double want_none[12] = {0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, 1, -1, 0, 0};
    for (int k = 0; k < 12; k++)
        ck_assert(A[k] == want_none[k]);
    /* rewards of 0.1: r - mean would be ~1e-17, not 0 */
    const double tenth[3] = {0.1, 0.1, 0.1};
    ck_assert_int_eq(grpo_advantages(tenth, 1, 3, GRPO_ADV_NONE, 1e-6, A, &zv, &err), 0);
    ck_assert(A[0] == 0.0 && A[1] == 0.0 && A[2] == 0.0 && zv == 1);
    /* G = 1: no variance to speak of */
    ck_assert_int_eq(grpo_advantages(r, 2, 1, GRPO_ADV_STD, 1e-6, A, &zv, &err), 0);
    ck_assert(A[0] == 0.0 && A[1] == 0.0 && zv == 2);
    /* the eps is a parameter */
    ck_assert_int_eq(grpo_advantages(r, 1, 4, GRPO_ADV_STD, 0.0, A, &zv, &err), 0);
    ck_assert_double_eq_tol(A[0], 0.5 / sqrt(1.0 / 3.0), 1e-15);
    const double bad[2] = {1.0, NAN};
    ck_assert_int_eq(grpo_advantages(bad, 1, 2, GRPO_ADV_STD, 1e-6, A, &zv, &err),
                     DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "group 0, completion 1"));
}
END_TEST

START_TEST(advantages_match_torch)
{
    const json_t *a = json_object_get(goldens, "advantages");
    const int groups = (int)json_integer_value(json_object_get(a, "groups"));
    const int G = (int)json_integer_value(json_object_get(a, "G"));
    double *r = tu_jarr(a, "rewards", NULL), *want_std = tu_jarr(a, "std", NULL);
    double *want_none = tu_jarr(a, "none", NULL);
    double *A = malloc(sizeof *A * (size_t)groups * G);
    int zv;
    dllm_err err = {0};
    ck_assert_int_eq(grpo_advantages(r, groups, G, GRPO_ADV_STD, 1e-6, A, &zv, &err), 0);
    for (int k = 0; k < groups * G; k++)
        ck_assert_msg(close_rel(A[k], want_std[k], 1e-12, 1e-15), "std %d: %.17g vs %.17g", k,
                      A[k], want_std[k]);
    ck_assert_int_eq(zv, (int)tu_jget(a, "zero_var"));
    ck_assert_int_eq(grpo_advantages(r, groups, G, GRPO_ADV_NONE, 1e-6, A, &zv, &err), 0);
    for (int k = 0; k < groups * G; k++)
        ck_assert_msg(close_rel(A[k], want_none[k], 1e-12, 1e-15), "none %d", k);
    free(r);
    free(want_std);
    free(want_none);
    free(A);
}
END_TEST

/* One golden case: owns its arrays so the finite-difference test can perturb them. */
typedef struct {
    grpo_loss_cfg cfg;
    grpo_loss_in in;
    double *adv, *coef, *l_theta, *l_old, *lp, *lo, *ref;
    int *len;
    char name[64];
} loss_case;

static void case_from_json(const json_t *j, loss_case *c)
{
    memset(c, 0, sizeof *c);
    dllm_err err = {0};
    ck_assert_int_eq(grpo_parse_ratio(json_string_value(json_object_get(j, "ratio")),
                                      &c->cfg.ratio, &err), 0);
    ck_assert_int_eq(grpo_parse_agg(json_string_value(json_object_get(j, "agg")), &c->cfg.agg,
                                    &err), 0);
    c->cfg.clip_eps = tu_jget(j, "clip_eps");
    c->cfg.beta = tu_jget(j, "beta");
    snprintf(c->name, sizeof c->name, "%s/%s/beta=%g", grpo_ratio_name(c->cfg.ratio),
             grpo_agg_name(c->cfg.agg), c->cfg.beta);
    const int N = (int)tu_jget(j, "N"), T = (int)tu_jget(j, "T");
    c->adv = tu_jarr(j, "adv", NULL);
    c->coef = tu_jarr(j, "coef", NULL);
    c->l_theta = tu_jarr(j, "l_theta", NULL);
    c->l_old = tu_jarr(j, "l_old", NULL);
    c->lp = tu_jarr(j, "logp_theta", NULL);
    c->lo = tu_jarr(j, "logp_old", NULL);
    c->ref = tu_jarr(j, "logp_ref", NULL);
    double *len = tu_jarr(j, "len", NULL);
    c->len = malloc(sizeof *c->len * (size_t)N);
    for (int i = 0; i < N; i++)
        c->len[i] = (int)len[i];
    free(len);
    c->in = (grpo_loss_in){.N = N, .T = T, .adv = c->adv, .coef = c->coef, .len = c->len,
                           .l_theta = c->l_theta, .l_old = c->l_old, .logp_theta = c->lp,
                           .logp_old = c->lo, .logp_ref = c->ref};
}

static void case_free(loss_case *c)
{
    free(c->adv);
    free(c->coef);
    free(c->l_theta);
    free(c->l_old);
    free(c->lp);
    free(c->lo);
    free(c->ref);
    free(c->len);
}

static double loss_at(const loss_case *c)
{
    grpo_loss_out o;
    dllm_err err = {0};
    ck_assert_int_eq(grpo_loss(&c->cfg, &c->in, &o, NULL, NULL, &err), 0);
    return o.loss;
}

START_TEST(loss_matches_torch)
{
    const json_t *cases = json_object_get(goldens, "cases");
    ck_assert_int_eq(json_array_size(cases), 8);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *cj = json_array_get(cases, k);
        loss_case c;
        case_from_json(cj, &c);
        const int N = c.in.N, T = c.in.T;
        double *gl = malloc(sizeof *gl * (size_t)N), *gt = malloc(sizeof *gt * (size_t)N * T);
        grpo_loss_out o;
        dllm_err err = {0};
        ck_assert_msg(grpo_loss(&c.cfg, &c.in, &o, gl, gt, &err) == 0, "%s", err.msg);
        const json_t *ex = json_object_get(cj, "expect");
        const struct { const char *key; double got; } f[] = {
            {"loss", o.loss}, {"surrogate", o.surrogate}, {"policy_kl", o.policy_kl},
            {"clip_frac", o.clip_frac}, {"ratio_mean", o.ratio_mean}};
        for (size_t q = 0; q < sizeof f / sizeof f[0]; q++)
            ck_assert_msg(close_rel(f[q].got, tu_jget(ex, f[q].key), 1e-12, 1e-15),
                          "%s: %s = %.17g, torch %.17g", c.name, f[q].key, f[q].got,
                          tu_jget(ex, f[q].key));
        ck_assert_msg(o.clip_frac > 0.05, "%s: the case should exercise the clip", c.name);
        double *want_t = tu_jarr(ex, "grad_logp", NULL);
        for (int q = 0; q < N * T; q++)
            ck_assert_msg(close_rel(gt[q], want_t[q], 1e-12, 1e-15),
                          "%s: grad_logp[%d] = %.17g, torch %.17g", c.name, q, gt[q], want_t[q]);
        free(want_t);
        if (c.cfg.ratio == GRPO_RATIO_SEQUENCE) {
            double *want_l = tu_jarr(ex, "grad_l", NULL);
            for (int i = 0; i < N; i++)
                ck_assert_msg(close_rel(gl[i], want_l[i], 1e-12, 1e-15),
                              "%s: grad_l[%d] = %.17g, torch %.17g", c.name, i, gl[i], want_l[i]);
            free(want_l);
        }
        free(gl);
        free(gt);
        case_free(&c);
    }
}
END_TEST

/* Central differences on every input the loss differentiates, skipping points
 * within reach of the clip's kinks. */
START_TEST(gradient_by_finite_differences)
{
    const json_t *cases = json_object_get(goldens, "cases");
    const double h = 1e-6;
    for (size_t k = 0; k < json_array_size(cases); k++) {
        loss_case c;
        case_from_json(json_array_get(cases, k), &c);
        const int N = c.in.N, T = c.in.T;
        const double lo_b = 1 - c.cfg.clip_eps, hi_b = 1 + c.cfg.clip_eps;
        double *gl = malloc(sizeof *gl * (size_t)N), *gt = malloc(sizeof *gt * (size_t)N * T);
        grpo_loss_out o;
        dllm_err err = {0};
        ck_assert_int_eq(grpo_loss(&c.cfg, &c.in, &o, gl, gt, &err), 0);
        int checked = 0, nonzero = 0;
        if (c.cfg.ratio == GRPO_RATIO_SEQUENCE)
            for (int i = 0; i < N; i++) {
                const double r = exp((c.l_theta[i] - c.l_old[i]) / c.len[i]);
                if (fabs(r - lo_b) < 1e-4 || fabs(r - hi_b) < 1e-4)
                    continue;
                const double x0 = c.l_theta[i];
                c.l_theta[i] = x0 + h;
                const double up = loss_at(&c);
                c.l_theta[i] = x0 - h;
                const double dn = loss_at(&c);
                c.l_theta[i] = x0;
                const double fd = (up - dn) / (2 * h);
                ck_assert_msg(fabs(fd - gl[i]) <= 1e-7 * fabs(gl[i]) + 1e-9,
                              "%s: dloss/dl_theta[%d] = %.12g, finite differences %.12g", c.name,
                              i, gl[i], fd);
                checked++;
                nonzero += gl[i] != 0.0;
            }
        for (int q = 0; q < N * T; q++) {
            if (isnan(c.lp[q]))
                continue;
            if (c.cfg.ratio == GRPO_RATIO_TOKEN) {
                const double r = exp(c.lp[q] - c.lo[q]);
                if (fabs(r - lo_b) < 1e-4 || fabs(r - hi_b) < 1e-4)
                    continue;
            }
            const double x0 = c.lp[q];
            c.lp[q] = x0 + h;
            const double up = loss_at(&c);
            c.lp[q] = x0 - h;
            const double dn = loss_at(&c);
            c.lp[q] = x0;
            const double fd = (up - dn) / (2 * h);
            ck_assert_msg(fabs(fd - gt[q]) <= 1e-7 * fabs(gt[q]) + 1e-9,
                          "%s: dloss/dlogp_theta[%d] = %.12g, finite differences %.12g", c.name,
                          q, gt[q], fd);
            checked++;
            nonzero += gt[q] != 0.0;
        }
        ck_assert_int_gt(checked, N);
        ck_assert_int_gt(nonzero, 3);
        free(gl);
        free(gt);
        case_free(&c);
    }
}
END_TEST

/* Data parallelism: two ranks with the all-reduced denominators give shares
 * that add up to the global loss, with the same gradients. */
START_TEST(global_denominators_split_the_loss)
{
    const json_t *cases = json_object_get(goldens, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        loss_case c;
        case_from_json(json_array_get(cases, k), &c);
        const int N = c.in.N, T = c.in.T, cut = 3;
        double *gl = malloc(sizeof *gl * (size_t)N), *gt = malloc(sizeof *gt * (size_t)N * T);
        double *gl2 = malloc(sizeof *gl2 * (size_t)N), *gt2 = malloc(sizeof *gt2 * (size_t)N * T);
        grpo_loss_out full, o0, o1;
        dllm_err err = {0};
        ck_assert_int_eq(grpo_loss(&c.cfg, &c.in, &full, gl, gt, &err), 0);
        grpo_loss_in part[2] = {c.in, c.in};
        part[0].N = cut;
        part[1].N = N - cut;
        part[1].adv += cut;
        part[1].coef += cut;
        part[1].len += cut;
        part[1].l_theta += cut;
        part[1].l_old += cut;
        part[1].logp_theta += (size_t)cut * T;
        part[1].logp_old += (size_t)cut * T;
        part[1].logp_ref += (size_t)cut * T;
        grpo_denoms d0, d1;
        grpo_local_denoms(&c.cfg, &part[0], &d0);
        grpo_local_denoms(&c.cfg, &part[1], &d1);
        grpo_denoms global = {d0.surr + d1.surr, d0.kl + d1.kl};
        part[0].denoms = part[1].denoms = &global;
        ck_assert_int_eq(grpo_loss(&c.cfg, &part[0], &o0, gl2, gt2, &err), 0);
        ck_assert_int_eq(grpo_loss(&c.cfg, &part[1], &o1, gl2 + cut, gt2 + (size_t)cut * T, &err),
                         0);
        ck_assert_msg(fabs(o0.loss + o1.loss - full.loss) <= 1e-14 * fabs(full.loss), "%s",
                      c.name);
        ck_assert(o0.loss != 0.0 && o1.loss != 0.0);
        for (int i = 0; i < N; i++)
            ck_assert_double_eq_tol(gl2[i], gl[i], 1e-15);
        for (int q = 0; q < N * T; q++)
            ck_assert_double_eq_tol(gt2[q], gt[q], 1e-15);
        free(gl);
        free(gt);
        free(gl2);
        free(gt2);
        case_free(&c);
    }
}
END_TEST

START_TEST(clipped_region_has_zero_gradient)
{
    /* sequence ratio, L = 2, eps 0.2: r = exp(0.5) ~ 1.65 > 1.2 */
    double lt[4] = {1.0, 1.0, -1.0, -1.0}, lo[4] = {0.0, 0.0, 0.0, 0.0};
    double A[4] = {1.0, -1.0, 1.0, -1.0}, c[4] = {1, 1, 1, 1};
    int len[4] = {2, 2, 2, 2};
    grpo_loss_cfg cfg = {.ratio = GRPO_RATIO_SEQUENCE, .agg = GRPO_AGG_SEQ_MEAN,
                         .clip_eps = 0.2, .beta = 0.0};
    grpo_loss_in in = {.N = 4, .adv = A, .coef = c, .len = len, .l_theta = lt, .l_old = lo};
    grpo_loss_out o;
    double g[4];
    dllm_err err = {0};
    ck_assert_int_eq(grpo_loss(&cfg, &in, &o, g, NULL, &err), 0);
    const double rh = exp(0.5), rl = exp(-0.5);
    ck_assert(g[0] == 0.0);                                  /* r > 1+eps, A > 0: clipped */
    ck_assert_double_eq_tol(g[1], 0.25 * rh / 2, 1e-15);     /* r > 1+eps, A < 0: not */
    ck_assert_double_eq_tol(g[2], -0.25 * rl / 2, 1e-15);    /* r < 1-eps, A > 0: not */
    ck_assert(g[3] == 0.0);                                  /* r < 1-eps, A < 0: clipped */
    ck_assert_double_eq_tol(o.clip_frac, 0.5, 1e-15);
    ck_assert_double_eq_tol(o.loss, -0.25 * (1.2 - rh + rl - 0.8), 1e-15);
}
END_TEST

START_TEST(zero_coefficient_keeps_denominator)
{
    const json_t *cases = json_object_get(goldens, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        loss_case c;
        case_from_json(json_array_get(cases, k), &c);
        if (c.cfg.agg != GRPO_AGG_SEQ_MEAN || c.cfg.beta != 0.0) {
            case_free(&c);
            continue;
        }
        const int N = c.in.N, T = c.in.T;
        /* the full batch with c_0 = 0 vs the batch without completion 0 */
        c.coef[0] = 0.0;
        const double full = loss_at(&c);
        grpo_loss_in rest = c.in;
        rest.N = N - 1;
        rest.adv++;
        rest.coef++;
        rest.len++;
        rest.l_theta++;
        rest.l_old++;
        rest.logp_theta += T;
        rest.logp_old += T;
        rest.logp_ref += T;
        grpo_loss_out o;
        dllm_err err = {0};
        ck_assert_int_eq(grpo_loss(&c.cfg, &rest, &o, NULL, NULL, &err), 0);
        ck_assert_double_eq_tol(full, o.loss * (N - 1) / N, 1e-14);
        ck_assert(full != 0.0);
        /* a zeroed sample cannot poison the batch, even with a non-finite estimate */
        c.l_theta[0] = NAN;
        for (int t = 0; t < T; t++)
            if (!isnan(c.lp[t]))
                c.lp[t] = INFINITY;
        double *gl = malloc(sizeof *gl * (size_t)N), *gt = malloc(sizeof *gt * (size_t)N * T);
        ck_assert_int_eq(grpo_loss(&c.cfg, &c.in, &o, gl, gt, &err), 0);
        ck_assert(isfinite(o.surrogate));
        ck_assert(gl[0] == 0.0);
        if (c.cfg.ratio == GRPO_RATIO_TOKEN)
            for (int t = 0; t < T; t++)
                ck_assert(gt[t] == 0.0);
        free(gl);
        free(gt);
        case_free(&c);
    }
    /* token_mean: c_i = 0 keeps its L_i tokens in the denominator */
    double lt[2] = {0.1, -0.2}, lo[2] = {0.0, 0.0}, A[2] = {1.0, 0.5}, c[2] = {1.0, 0.0};
    int len[2] = {3, 5};
    grpo_loss_cfg cfg = {.ratio = GRPO_RATIO_SEQUENCE, .agg = GRPO_AGG_TOKEN_MEAN,
                         .clip_eps = 0.5};
    grpo_loss_in in = {.N = 2, .adv = A, .coef = c, .len = len, .l_theta = lt, .l_old = lo};
    grpo_loss_out o;
    dllm_err err = {0};
    ck_assert_int_eq(grpo_loss(&cfg, &in, &o, NULL, NULL, &err), 0);
    ck_assert_double_eq_tol(o.loss, -3.0 * exp(0.1 / 3) / 8.0, 1e-15);
}
END_TEST

START_TEST(token_coefficients_and_checks)
{
    /* per-token coefficients replace c_i token by token */
    double lp[4] = {-1.0, -2.0, -0.5, NAN}, lo[4] = {-1.1, -1.9, -0.5, NAN};
    double A[2] = {1.0, -2.0}, c[2] = {1.0, 1.0}, ct[4] = {2.0, 0.5, 1.5, 0.0};
    grpo_loss_cfg cfg = {.ratio = GRPO_RATIO_TOKEN, .agg = GRPO_AGG_TOKEN_MEAN, .clip_eps = 0.2};
    grpo_loss_in in = {.N = 2, .T = 2, .adv = A, .coef = c, .coef_tok = ct, .logp_theta = lp,
                       .logp_old = lo};
    grpo_loss_out o;
    double g[4];
    dllm_err err = {0};
    ck_assert_int_eq(grpo_loss(&cfg, &in, &o, NULL, g, &err), 0);
    const double r0 = exp(0.1), r1 = exp(-0.1);
    ck_assert_double_eq_tol(o.surrogate, (2.0 * r0 + 0.5 * r1 + 1.5 * -2.0) / 3.0, 1e-15);
    ck_assert_double_eq_tol(g[0], -2.0 * r0 / 3.0, 1e-15);
    ck_assert(g[3] == 0.0);
    ck_assert(isnan(o.policy_kl));
    /* mismatched scoring patterns, beta without a reference, coef_tok with the sequence ratio */
    lo[1] = NAN;
    ck_assert_int_ne(grpo_loss(&cfg, &in, &o, NULL, g, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "completion 0 token 1"));
    lo[1] = -1.9;
    cfg.beta = 0.1;
    ck_assert_int_ne(grpo_loss(&cfg, &in, &o, NULL, g, &err), 0);
    cfg.beta = -0.1;
    in.logp_ref = lp;
    ck_assert_int_eq(grpo_loss(&cfg, &in, &o, NULL, g, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "grpo.beta"));
    cfg.beta = 0.0;
    cfg.ratio = GRPO_RATIO_SEQUENCE;
    ck_assert_int_ne(grpo_loss(&cfg, &in, &o, NULL, g, &err), 0);

    grpo_ratio r;
    grpo_agg a;
    grpo_adv_scale s;
    ck_assert_int_eq(grpo_parse_ratio("token", &r, &err), 0);
    ck_assert_int_eq(r, GRPO_RATIO_TOKEN);
    ck_assert_int_eq(grpo_parse_agg("token_mean", &a, &err), 0);
    ck_assert_int_eq(a, GRPO_AGG_TOKEN_MEAN);
    ck_assert_int_eq(grpo_parse_adv_scale("none", &s, &err), 0);
    ck_assert_int_eq(s, GRPO_ADV_NONE);
    ck_assert_int_eq(grpo_parse_agg("mean", &a, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "grpo.loss_agg"));
    ck_assert_ptr_nonnull(strstr(err.msg, "seq_mean"));
}
END_TEST

START_TEST(random_drop_share_and_determinism)
{
    enum { N = 64, T = 3, STEPS = 2000 };
    const double ps[2] = {0.34, 0.05};
    double coef[N], tok[N * T];
    for (int k = 0; k < 2; k++) {
        const double p = ps[k];
        long total = 0;
        int wide = 0; /* steps more than 4 binomial sd from N p */
        for (int s = 1; s <= STEPS; s++) {
            for (int i = 0; i < N; i++)
                coef[i] = 1.0;
            long n = grpo_random_drop(p, 7, s, 0, coef, NULL, N, T);
            long zeros = 0;
            for (int i = 0; i < N; i++)
                zeros += coef[i] == 0.0;
            ck_assert_int_eq(zeros, n);
            total += n;
            wide += fabs((double)n - N * p) > 4 * sqrt(N * p * (1 - p));
        }
        const double share = (double)total / ((double)N * STEPS);
        const double se = sqrt(p * (1 - p) / ((double)N * STEPS));
        ck_assert_msg(fabs(share - p) < 4 * se, "p %g: dropped share %g (se %g)", p, share, se);
        ck_assert_msg(wide <= 2, "p %g: %d of %d steps beyond 4 sd", p, wide, STEPS);
    }
    /* a function of (seed, step, global index): one batch is two rank slices */
    double a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = 0.5 + i;
    long na = grpo_random_drop(0.34, 3, 11, 100, a, NULL, N, T);
    long nb = grpo_random_drop(0.34, 3, 11, 100, b, NULL, N / 2, T) +
              grpo_random_drop(0.34, 3, 11, 100 + N / 2, b + N / 2, NULL, N / 2, T);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(na > 0 && na < N);
    for (int i = 0; i < N; i++) /* kept coefficients keep their values */
        ck_assert(a[i] == 0.0 || a[i] == 0.5 + i);
    /* another seed, another step: other completions */
    int same_seed = 1, same_step = 1;
    for (int i = 0; i < N; i++)
        b[i] = 1.0, coef[i] = 1.0;
    grpo_random_drop(0.34, 4, 11, 100, b, NULL, N, T);
    grpo_random_drop(0.34, 3, 12, 100, coef, NULL, N, T);
    for (int i = 0; i < N; i++) {
        same_seed &= (a[i] == 0.0) == (b[i] == 0.0);
        same_step &= (a[i] == 0.0) == (coef[i] == 0.0);
    }
    ck_assert(!same_seed && !same_step);
    /* p = 0: nothing drawn, every bit kept */
    for (int i = 0; i < N; i++)
        coef[i] = b[i] = 1.0 / (i + 3);
    ck_assert_int_eq(grpo_random_drop(0.0, 3, 11, 0, coef, NULL, N, T), 0);
    ck_assert(memcmp(coef, b, sizeof coef) == 0);
    /* token coefficients: a dropped completion's row is 0, the others untouched */
    for (int i = 0; i < N; i++)
        coef[i] = 1.0;
    for (int k = 0; k < N * T; k++)
        tok[k] = 2.0;
    long n = grpo_random_drop(0.5, 9, 1, 0, coef, tok, N, T);
    ck_assert(n > 0 && n < N);
    for (int i = 0; i < N; i++)
        for (int t = 0; t < T; t++)
            ck_assert(tok[i * T + t] == (coef[i] == 0.0 ? 0.0 : 2.0));
}
END_TEST

static Suite *grpo_suite(void)
{
    Suite *s = suite_create("grpo");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, load_goldens, free_goldens);
    tcase_add_test(tc, advantages_hand_values);
    tcase_add_test(tc, advantages_match_torch);
    tcase_add_test(tc, loss_matches_torch);
    tcase_add_test(tc, gradient_by_finite_differences);
    tcase_add_test(tc, global_denominators_split_the_loss);
    tcase_add_test(tc, clipped_region_has_zero_gradient);
    tcase_add_test(tc, zero_coefficient_keeps_denominator);
    tcase_add_test(tc, token_coefficients_and_checks);
    tcase_add_test(tc, random_drop_share_and_determinism);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return grpo_suite();
}
