/* test_corrections: mismatch corrections and AIS diagnostics (docs/METHOD.md §5).
 *  - every method x level x combine against an independent numpy reference
 *    (tests/ref/make_ais_goldens.py -> tests/data/grpo/ais.json) to 1e-12
 *    relative: light and heavy-tailed log w, log w past exp's range, N = 1,
 *    zero-variance advantages, non-finite entries, eta > 0, clamping, zero and
 *    negative (reversed) weights, cap .inf, estimator noise debias / none / no
 *    standard errors, the population (informative / all; an empty one keeps alpha),
 *    both forms of nu (total / excess) and the logistic gain;
 *  - alpha_raw spans at least [0.05, 0.95] over the diagnostics' range under the
 *    defaults of each combine;
 *  - the reference arm (all log w == 0) gets coefficient exactly 1 everywhere;
 *  - the three-phase (extrema, moments, sums) protocol over 2 or 3 slices + merge
 *    equals the single pass;
 *  - a zero diagnostic weight removes that diagnostic; alpha clamping and eta;
 *  - hand-computed ESS and nu (centred advantages), de-noised ESS and frac_var_mc,
 *    signed weights, cap .inf and overflowing weights; the mean standard error of
 *    log w and the mismatch by denoising step; config checks and enum parsing. */
#include "src/rl/corrections.h"
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
    goldens = tu_json_load("grpo/ais.json");
}

static void free_goldens(void)
{
    json_decref(goldens);
}

/* 1e-12 relative (1e-14 absolute near 0, where scores such as s_rel = (N - ESS)/(N - 1)
 * are differences of nearly equal numbers); non-finite values must match exactly */
static int close_rel(double got, double want)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= 1e-12 * fabs(want) + 1e-14;
}

#define CHECK_CLOSE(got, want, what, name) \
    ck_assert_msg(close_rel(got, want), "%s: %s = %.17g, reference %.17g", name, what, \
                  (double)(got), (double)(want))

static void cfg_from_json(const json_t *j, corr_cfg *cfg)
{
    dllm_err err = {0};
    corr_cfg_default(cfg);
    ck_assert_int_eq(corr_parse_method(json_string_value(json_object_get(j, "method")),
                                       &cfg->method, &err), 0);
    ck_assert_int_eq(corr_parse_level(json_string_value(json_object_get(j, "level")),
                                      &cfg->level, &err), 0);
    ck_assert_int_eq(ais_parse_combine(json_string_value(json_object_get(j, "combine")),
                                       &cfg->ais.combine, &err), 0);
    ck_assert_int_eq(ais_parse_noise(json_string_value(json_object_get(j, "noise")),
                                     &cfg->ais.noise, &err), 0);
    ck_assert_int_eq(ais_parse_population(json_string_value(json_object_get(j, "population")),
                                          &cfg->ais.population, &err), 0);
    ck_assert_int_eq(ais_parse_variance(json_string_value(json_object_get(j, "variance")),
                                        &cfg->ais.variance, &err), 0);
    cfg->ais.gain = tu_jget(j, "gain");
    cfg->cap = tu_jget(j, "cap");
    cfg->fixed_alpha = tu_jget(j, "fixed_alpha");
    cfg->ais.w_rel = tu_jget(j, "w_rel");
    cfg->ais.w_div = tu_jget(j, "w_div");
    cfg->ais.w_var = tu_jget(j, "w_var");
    cfg->ais.tau_delta = tu_jget(j, "tau_delta");
    cfg->ais.bias = tu_jget(j, "bias");
    cfg->ais.eta = tu_jget(j, "eta");
    cfg->ais.alpha_min = tu_jget(j, "alpha_min");
    cfg->ais.alpha_max = tu_jget(j, "alpha_max");
    ck_assert_msg(corr_cfg_check(cfg, &err) == 0, "%s", err.msg);
}

typedef struct {
    corr_batch b;
    double *log_w, *d, *adv, *se;
    int *len;
    uint8_t *member;
} batch_buf;

static void batch_from_json(const json_t *j, batch_buf *bb)
{
    memset(bb, 0, sizeof *bb);
    bb->b.N = (int)json_integer_value(json_object_get(j, "N"));
    bb->b.T = (int)json_integer_value(json_object_get(j, "T"));
    bb->log_w = tu_jarr(j, "log_w", NULL);
    bb->d = tu_jarr(j, "d", NULL);
    bb->adv = tu_jarr(j, "adv", NULL);
    bb->se = tu_jarr(j, "log_w_se", NULL);
    size_t n;
    double *len = tu_jarr(j, "len", &n);
    bb->len = malloc(sizeof *bb->len * (n + 1));
    for (size_t k = 0; k < n; k++)
        bb->len[k] = (int)len[k];
    free(len);
    double *mem = tu_jarr(j, "member", &n);
    bb->member = malloc(n + 1);
    for (size_t k = 0; k < n; k++)
        bb->member[k] = mem[k] != 0;
    free(mem);
    bb->b.log_w = bb->log_w;
    bb->b.d = bb->d;
    bb->b.adv = bb->adv;
    bb->b.len = bb->len;
    bb->b.log_w_se = bb->se;
}

static void batch_free(batch_buf *bb)
{
    free(bb->log_w);
    free(bb->d);
    free(bb->adv);
    free(bb->se);
    free(bb->len);
    free(bb->member);
}

static void check_diag(const corr_diag *g, const json_t *ex, const char *name)
{
    struct { const char *key; double got; } f[] = {
        {"n", g->n}, {"ess", g->ess}, {"rho_ess", g->rho_ess}, {"s_rel", g->s_rel},
        {"delta", g->delta}, {"k3", g->k3}, {"s_div", g->s_div}, {"nu", g->nu},
        {"s_var", g->s_var}, {"w_cv", g->w_cv}, {"log_mean_w", g->log_mean_w},
        {"alpha_raw", g->alpha_raw}, {"alpha", g->alpha},
        {"frac_nonfinite", g->frac_nonfinite}, {"frac_truncated", g->frac_truncated},
        {"frac_zeroed", g->frac_zeroed}, {"frac_var_mc", g->frac_var_mc},
        {"nu_total", g->nu_total}, {"nu_excess", g->nu_excess}, {"abs_log_w", g->abs_log_w},
        {"members", g->members}, {"empty", g->empty},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        CHECK_CLOSE(f[k].got, tu_jget(ex, f[k].key), f[k].key, name);
}

START_TEST(matches_numpy_reference)
{
    const json_t *batches = json_object_get(goldens, "batches");
    const json_t *cases = json_object_get(goldens, "cases");
    ck_assert_int_ge(json_array_size(cases), 400);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        corr_cfg cfg;
        cfg_from_json(json_object_get(cs, "cfg"), &cfg);
        batch_buf bb;
        batch_from_json(json_array_get(batches,
                                       (size_t)json_integer_value(json_object_get(cs, "batch"))),
                        &bb);
        if (!json_is_true(json_object_get(cs, "use_se")))
            bb.b.log_w_se = NULL; /* an exact estimator */
        if (cfg.ais.population == AIS_POP_INFORMATIVE)
            bb.b.member = bb.member;
        const int N = bb.b.N, T = bb.b.T;
        double *coef = malloc(sizeof *coef * (size_t)N);
        double *coef_tok = malloc(sizeof *coef_tok * (size_t)N * T);
        corr_diag g;
        dllm_err err = {0};
        ck_assert_msg(corr_compute_all(&cfg, &bb.b, tu_jget(cs, "alpha_prev"), &g, coef, coef_tok,
                                       &err) == 0, "%s: %s", name, err.msg);
        const json_t *ex = json_object_get(cs, "expect");
        check_diag(&g, ex, name);
        size_t n;
        const bool tok = cfg.level == CORR_LEVEL_TOKEN;
        double *want = tu_jarr(ex, tok ? "coef_tok" : "coef", &n);
        ck_assert_int_eq((long)n, tok ? (long)N * T : N);
        for (size_t k = 0; k < n; k++)
            CHECK_CLOSE(tok ? coef_tok[k] : coef[k], want[k], "coefficient", name);
        free(want);
        free(coef);
        free(coef_tok);
        batch_free(&bb);
    }
}
END_TEST

/* Splits the batch into contiguous slices (the ranks of a data-parallel run),
 * runs the two reductions with merge, and compares with the single pass. */
static void check_split(const corr_cfg *cfg, const corr_batch *b, double alpha_prev,
                        int n_slices, const char *name)
{
    const int N = b->N, T = b->T;
    corr_diag one;
    double *coef1 = calloc((size_t)N + 1, sizeof *coef1);
    double *tok1 = calloc((size_t)N * T + 1, sizeof *tok1);
    double *coef2 = calloc((size_t)N + 1, sizeof *coef2);
    double *tok2 = calloc((size_t)N * T + 1, sizeof *tok2);
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(cfg, b, alpha_prev, &one, coef1, tok1, &err), 0);

    int cut[4] = {0, N / 3, N == 1 ? 1 : N - 2, N}; /* uneven slices; one may be empty */
    if (n_slices == 2)
        cut[1] = cut[2] = N / 2 + 1 > N ? N : N / 2 + 1;
    corr_batch sl[3];
    for (int s = 0; s < 3; s++) {
        const int i0 = cut[s], n = cut[s + 1] - cut[s];
        sl[s] = (corr_batch){.N = n, .T = T, .log_w = b->log_w + i0, .len = b->len + i0,
                             .d = b->d + (size_t)i0 * T, .adv = b->adv + i0,
                             .log_w_se = b->log_w_se ? b->log_w_se + i0 : NULL,
                             .member = b->member ? b->member + i0 : NULL};
    }
    corr_extrema gx, x;
    ck_assert_int_eq(corr_local_extrema(cfg, &sl[0], &gx, &err), 0);
    for (int s = 1; s < 3; s++) {
        ck_assert_int_eq(corr_local_extrema(cfg, &sl[s], &x, &err), 0);
        corr_extrema_merge(&gx, &x);
    }
    corr_moments gm, mo;
    ck_assert_int_eq(corr_local_moments(cfg, &sl[0], &gx, &gm, &err), 0);
    for (int s = 1; s < 3; s++) {
        ck_assert_int_eq(corr_local_moments(cfg, &sl[s], &gx, &mo, &err), 0);
        corr_moments_merge(&gm, &mo);
    }
    corr_stats gs, st;
    ck_assert_int_eq(corr_local_sums(cfg, &sl[0], &gx, &gm, &gs, &err), 0);
    for (int s = 1; s < 3; s++) {
        ck_assert_int_eq(corr_local_sums(cfg, &sl[s], &gx, &gm, &st, &err), 0);
        corr_stats_merge(&gs, &st);
    }
    corr_diag two;
    corr_finalize(&gs, &gx, &gm, cfg, alpha_prev, &two);
    long units = 0;
    for (int s = 0; s < 3; s++) {
        corr_counts cnt;
        ck_assert_int_eq(corr_coefficients(cfg, two.alpha, &sl[s], coef2 + cut[s],
                                           tok2 + (size_t)cut[s] * T, &cnt, &err), 0);
        units += cnt.units;
    }
    const double w[] = {one.n, one.ess, one.rho_ess, one.s_rel, one.delta, one.k3, one.s_div,
                        one.nu, one.s_var, one.w_cv, one.log_mean_w, one.alpha_raw, one.alpha,
                        one.frac_nonfinite, one.frac_truncated, one.frac_zeroed,
                        one.frac_var_mc, one.noise_k, one.nu_total, one.nu_excess,
                        one.abs_log_w, one.members, one.empty};
    const double g[] = {two.n, two.ess, two.rho_ess, two.s_rel, two.delta, two.k3, two.s_div,
                        two.nu, two.s_var, two.w_cv, two.log_mean_w, two.alpha_raw, two.alpha,
                        two.frac_nonfinite, two.frac_truncated, two.frac_zeroed,
                        two.frac_var_mc, two.noise_k, two.nu_total, two.nu_excess,
                        two.abs_log_w, two.members, two.empty};
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        ck_assert_msg(close_rel(g[k], w[k]), "%s (%d slices): diagnostic %zu: %.17g vs %.17g",
                      name, n_slices, k, g[k], w[k]);
    for (int i = 0; i < N; i++)
        ck_assert_msg(close_rel(coef2[i], coef1[i]), "%s: coef %d", name, i);
    for (int k = 0; k < N * T; k++)
        ck_assert_msg(close_rel(tok2[k], tok1[k]), "%s: coef_tok %d", name, k);
    ck_assert_int_gt(units, 0);
    free(coef1);
    free(tok1);
    free(coef2);
    free(tok2);
}

START_TEST(two_phase_split_equals_single_pass)
{
    const json_t *batches = json_object_get(goldens, "batches");
    for (size_t k = 0; k < json_array_size(batches); k++) {
        batch_buf bb;
        const json_t *bj = json_array_get(batches, k);
        batch_from_json(bj, &bb);
        for (int level = 0; level < 3; level++)
            for (int m = 0; m < 6; m++) {
                corr_cfg cfg;
                corr_cfg_default(&cfg);
                cfg.level = (corr_level)level;
                cfg.method = (corr_method)m;
                cfg.ais.eta = 0.5;
                char name[128];
                snprintf(name, sizeof name, "%s/%s/%s",
                         json_string_value(json_object_get(bj, "name")),
                         corr_level_name(cfg.level), corr_method_name(cfg.method));
                check_split(&cfg, &bb.b, 0.3, 2, name);
                check_split(&cfg, &bb.b, 0.3, 3, name);
                corr_batch inf = bb.b; /* the informative population, sliced with the rest */
                inf.member = bb.member;
                check_split(&cfg, &inf, 0.3, 3, name);
            }
        batch_free(&bb);
    }
}
END_TEST

START_TEST(reference_arm_gives_exactly_one)
{
    enum { N = 9, T = 5 };
    double log_w[N] = {0}, d[N * T], adv[N];
    int len[N];
    for (int i = 0; i < N; i++) {
        len[i] = 1 + i % T;
        adv[i] = (i % 3) - 1.0 + 0.25 * i;
        for (int t = 0; t < T; t++)
            d[i * T + t] = t < len[i] && (i + t) % 4 != 0 ? 0.0 : NAN;
    }
    corr_batch b = {.N = N, .T = T, .log_w = log_w, .len = len, .d = d, .adv = adv};
    for (int level = 0; level < 3; level++)
        for (int m = 0; m < 6; m++)
            for (int comb = 0; comb < 2; comb++)
                for (int e = 0; e < 2; e++) {
                    corr_cfg cfg;
                    corr_cfg_default(&cfg);
                    cfg.level = (corr_level)level;
                    cfg.method = (corr_method)m;
                    cfg.ais.combine = (ais_combine)comb;
                    cfg.ais.eta = e ? 0.8 : 0.0;
                    cfg.ais.alpha_min = e ? 0.3 : 0.0; /* a nonzero alpha must not matter */
                    cfg.cap = e ? 1.0 : 2.0;
                    cfg.fixed_alpha = 0.37;
                    double coef[N], coef_tok[N * T];
                    corr_diag g;
                    dllm_err err = {0};
                    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.9, &g, coef, coef_tok, &err),
                                     0);
                    for (int i = 0; i < N; i++) {
                        if (level != CORR_LEVEL_TOKEN) {
                            ck_assert(coef[i] == 1.0);
                            continue;
                        }
                        for (int t = 0; t < T; t++)
                            ck_assert(coef_tok[i * T + t] == (isnan(d[i * T + t]) ? 0.0 : 1.0));
                    }
                    ck_assert(g.ess == g.n && g.rho_ess == 1.0 && g.s_rel == 0.0);
                    ck_assert(g.delta == 0.0 && g.k3 == 0.0 && g.s_div == 0.0);
                    ck_assert(g.nu == 1.0 && g.s_var == 0.0 && g.w_cv == 0.0);
                    ck_assert(g.frac_truncated == 0.0 && g.frac_zeroed == 0.0);
                    if (comb == AIS_COMBINE_LINEAR)
                        ck_assert(g.alpha_raw == 0.0);
                }
}
END_TEST

/* nu's total form by hand, and the population: w = (1, 3), A = (1, -1).
 * C = 2: m = (1, 2), c~ = (2/3, 4/3), a = (1, -1): mean(c~^2 a^2) = 10/9, mean(a^2) = 1.
 * C = inf: c~ = (0.5, 1.5): nu = 1.25. The excess form is 0.8 (hand_computed). */
START_TEST(hand_computed_total_nu)
{
    double log_w[4] = {0.0, log(3.0), 5.0, -5.0}, adv[4] = {1.0, -1.0, 0.0, 0.0};
    uint8_t member[4] = {1, 1, 0, 0}; /* a flat group: no gradient, not diagnosed */
    corr_batch b = {.N = 4, .log_w = log_w, .adv = adv, .member = member};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    corr_diag g;
    double coef[4];
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.n == 2 && g.members == 2 && g.empty == 0);
    ck_assert_double_eq_tol(g.nu_total, 10.0 / 9.0, 1e-14);
    ck_assert_double_eq_tol(g.nu_excess, 0.8, 1e-14);
    ck_assert(g.nu == g.nu_total);
    ck_assert_double_eq_tol(g.s_var, 1.0 - 0.9, 1e-14);
    ck_assert_double_eq_tol(g.rho_ess, 0.8, 1e-15);
    ck_assert_double_eq_tol(g.abs_log_w, log(3.0) / 2, 1e-15);
    /* the flat group's completions are corrected all the same, and counted */
    ck_assert(g.frac_truncated == 0.5); /* w = 3 and w = e^5 exceed C, of 4 */
    ck_assert_double_eq_tol(coef[2], 1.0 + g.alpha * (2.0 - 1.0), 1e-15);
    ck_assert_double_eq_tol(coef[3], 1.0 + g.alpha * (exp(-5.0) - 1.0), 1e-15);
    cfg.ais.variance = AIS_VAR_EXCESS;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.nu == g.nu_excess && g.s_var == 0.0);
    cfg.cap = INFINITY;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.nu_total, 1.25, 1e-14);
    /* every completion: four weights, the flat group's too */
    b.member = NULL;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.n == 4 && g.members == 4);
    ck_assert_double_eq_tol(g.abs_log_w, (log(3.0) + 10.0) / 4, 1e-14);
}
END_TEST

/* No informative completion: nothing to correct; alpha keeps its previous value and
 * the diagnostics are missing (NaN), flagged. */
START_TEST(empty_population_keeps_alpha)
{
    double log_w[4] = {0.3, -0.2, 0.9, 0.1}, adv[4] = {0, 0, 0, 0};
    double d[8] = {0.1, 0.2, -0.1, NAN, 0.3, 0.0, 0.05, NAN};
    int len[4] = {2, 1, 2, 1};
    uint8_t member[4] = {0, 0, 0, 0};
    corr_batch b = {.N = 4, .T = 2, .log_w = log_w, .len = len, .d = d, .adv = adv,
                    .member = member};
    for (int comb = 0; comb < 2; comb++) {
        corr_cfg cfg;
        corr_cfg_default(&cfg);
        cfg.ais.combine = (ais_combine)comb;
        cfg.ais.eta = 0.5;
        corr_diag g;
        double coef[4];
        dllm_err err = {0};
        ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.35, &g, coef, NULL, &err), 0);
        ck_assert(g.empty == 1 && g.members == 0);
        ck_assert(isnan(g.rho_ess) && isnan(g.ess) && isnan(g.delta) && isnan(g.nu) &&
                  isnan(g.nu_total) && isnan(g.nu_excess) && isnan(g.s_var) && isnan(g.k3));
        ck_assert(g.alpha_raw == 0.35 && g.alpha == 0.35);
        for (int i = 0; i < 4; i++) /* the coefficients follow the kept alpha */
            ck_assert_double_eq_tol(coef[i], 1.0 + 0.35 * (fmin(exp(log_w[i]), 2.0) - 1.0),
                                    1e-15);
        /* one informative group: diagnosed again */
        member[0] = member[1] = 1;
        adv[0] = 1;
        adv[1] = -1;
        ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.35, &g, coef, NULL, &err), 0);
        ck_assert(g.empty == 0 && g.n == 2 && isfinite(g.rho_ess));
        member[0] = member[1] = 0;
        adv[0] = adv[1] = 0;
    }
    /* the informative marks come from the rewards of each group */
    const double reward[6] = {1, 1, 1, 0, 1, 0};
    uint8_t m[6];
    corr_informative(reward, 2, 3, m);
    ck_assert(!m[0] && !m[1] && !m[2] && m[3] && m[4] && m[5]);
}
END_TEST

/* alpha_raw covers at least [0.05, 0.95] as the diagnostics go over their range, under
 * the defaults of each combine: the logistic one with its gain reaches both ends (with
 * gain 1, its value before the gain, it stays below sigmoid(-1) = 0.27). */
START_TEST(alpha_raw_spans_unit_interval)
{
    enum { N = 64, T = 4 };
    double lw[N], adv[N], d[N * T];
    int len[N];
    for (int comb = 0; comb < 2; comb++)
        for (int gain1 = 0; gain1 < 1 + comb; gain1++) {
            double lo = 0, hi = 0;
            for (int end = 0; end < 2; end++) {
                /* low end: every weight 1, d = 0 (scores 0). High end: one weight holds
                 * the batch and the only non-zero advantage, |d| large (scores near 1) */
                for (int i = 0; i < N; i++) {
                    lw[i] = end && i > 0 ? -30.0 : 0.0;
                    adv[i] = end && i == 0 ? 1.0 : 0.0;
                    len[i] = T;
                    for (int t = 0; t < T; t++)
                        d[i * T + t] = end ? 2.0 : 0.0;
                }
                if (!end)
                    adv[0] = 1.0;
                corr_batch b = {.N = N, .T = T, .log_w = lw, .len = len, .d = d, .adv = adv};
                corr_cfg cfg;
                corr_cfg_default(&cfg);
                cfg.ais.combine = (ais_combine)comb;
                if (gain1)
                    cfg.ais.gain = 1.0;
                corr_diag g;
                double coef[N];
                dllm_err err = {0};
                ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
                *(end ? &hi : &lo) = g.alpha_raw;
            }
            if (gain1) {
                ck_assert_msg(hi < 0.27, "gain 1: alpha_raw %g", hi);
                continue;
            }
            ck_assert_msg(lo <= 0.05 && hi >= 0.95, "%s: alpha_raw spans [%g, %g]",
                          comb ? "logistic" : "linear", lo, hi);
        }
}
END_TEST

/* A small batch where every diagnostic can be worked out by hand. */
START_TEST(hand_computed)
{
    /* w = (1, 3): ESS = 16/10 = 1.6, rho = 0.8, s_rel = 0.4.
     * A = (1, -1): mean(w) = 2, w~ = (0.5, 1.5), w~A = (0.5, -1.5): Var = 1,
     * mean(w~^2) = 1.25, Var(A) = 1 -> nu = 0.8, s_var = 0.
     * d rows (0.1, -0.3) and (0.2): delta = (0.2 + 0.2)/2 = 0.2. */
    double log_w[2] = {0.0, log(3.0)}, adv[2] = {1.0, -1.0};
    double d[4] = {0.1, -0.3, 0.2, NAN};
    int len[2] = {2, 1};
    corr_batch b = {.N = 2, .T = 2, .log_w = log_w, .len = len, .d = d, .adv = adv};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    cfg.ais.tau_delta = 0.1;
    cfg.ais.variance = AIS_VAR_EXCESS; /* the total form: hand_computed_total_nu */
    corr_diag g;
    double coef[2];
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.ess, 1.6, 1e-15);
    ck_assert_double_eq_tol(g.rho_ess, 0.8, 1e-15);
    ck_assert_double_eq_tol(g.s_rel, 0.4, 1e-15);
    ck_assert_double_eq_tol(g.nu, 0.8, 1e-15);
    ck_assert(g.s_var == 0.0);
    ck_assert_double_eq_tol(g.delta, 0.2, 1e-15);
    ck_assert_double_eq_tol(g.s_div, 1.0 - exp(-2.0), 1e-15);
    ck_assert_double_eq_tol(g.k3, (exp(0.1) - 1.1 + exp(-0.3) - 0.7 + exp(0.2) - 1.2) / 3, 1e-15);
    const double a = (0.4 + (1.0 - exp(-2.0))) / 3;
    ck_assert_double_eq_tol(g.alpha, a, 1e-15);
    ck_assert(coef[0] == 1.0);
    ck_assert_double_eq_tol(coef[1], 1.0 + a * (2.0 - 1.0), 1e-15); /* min(3, C = 2) */
    ck_assert(g.frac_truncated == 0.5);
    /* the advantages are centred: A = (0, 2) is A = (1, -1) shifted by 1 and
     * reversed, a = (-1, 1), w~a = (-0.5, 1.5): Var = 1 -> nu = 0.8 again
     * (uncentred, w~A = (0, 3) would give Var 2.25 and nu 1.8) */
    adv[0] = 0.0;
    adv[1] = 2.0;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.nu, 0.8, 1e-14);
    ck_assert(g.s_var == 0.0);
    /* three completions, w = (1, 1, 4), A = (-1, -1, 2): mean(w) = 2,
     * w~ = (0.5, 0.5, 2), w~a = (-0.5, -0.5, 4): mean 1, mean sq 5.5, Var 4.5;
     * mean(w~^2) = 1.5, Var(A) = 2 -> nu = 1.5 */
    {
        double lw3[3] = {0.0, 0.0, log(4.0)}, a3[3] = {-1.0, -1.0, 2.0};
        corr_batch b3 = {.N = 3, .log_w = lw3, .adv = a3};
        double c3[3];
        ck_assert_int_eq(corr_compute_all(&cfg, &b3, 0.0, &g, c3, NULL, &err), 0);
        ck_assert_double_eq_tol(g.nu, 1.5, 1e-14);
        ck_assert_double_eq_tol(g.s_var, 1.0 / 3.0, 1e-14);
    }
    /* geo level, lengths (2, 1): w = (4^(1/2), 3^(1/1)) = (2, 3), ESS = 25/13 */
    cfg.level = CORR_LEVEL_GEO;
    log_w[0] = log(4.0);
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.ess, 25.0 / 13.0, 1e-14);
    /* mis: w = 2 <= C stays, w = 3 > C zeroed */
    cfg.method = CORR_MIS;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(coef[0], 2.0, 1e-15);
    ck_assert(coef[1] == 0.0);
    ck_assert(g.frac_zeroed == 0.5);
}
END_TEST

/* Estimator noise: lw = (0, 2), se = (sqrt(0.75), sqrt(0.75)): m = 1, V = 1,
 * S = 0.75, k = 0.5, lw~ = (0.5, 1.5), frac_var_mc = 0.75. */
START_TEST(noise_debias_hand_computed)
{
    double lw[2] = {0.0, 2.0}, adv[2] = {1.0, -1.0}, se[2] = {sqrt(0.75), sqrt(0.75)};
    corr_batch b = {.N = 2, .log_w = lw, .adv = adv, .log_w_se = se};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    ck_assert(cfg.ais.noise == AIS_NOISE_DEBIAS);
    cfg.method = CORR_IS;
    corr_diag g;
    double coef[2];
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    const double e = exp(1.0); /* w~ proportional to (1, e) */
    ck_assert_double_eq_tol(g.frac_var_mc, 0.75, 1e-15);
    ck_assert_double_eq_tol(g.noise_k, 0.5, 1e-15);
    ck_assert_double_eq_tol(g.ess, (1 + e) * (1 + e) / (1 + e * e), 1e-14);
    ck_assert_double_eq_tol(g.log_mean_w, log((exp(0.5) + exp(1.5)) / 2), 1e-14);
    /* the coefficients keep the raw weights */
    ck_assert(coef[0] == 1.0);
    ck_assert_double_eq_tol(coef[1], exp(2.0), 1e-13);
    /* noise none: the raw ESS, frac_var_mc still measured */
    cfg.ais.noise = AIS_NOISE_NONE;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    const double e2 = exp(2.0);
    ck_assert_double_eq_tol(g.ess, (1 + e2) * (1 + e2) / (1 + e2 * e2), 1e-14);
    ck_assert_double_eq_tol(g.frac_var_mc, 0.75, 1e-15);
    ck_assert(g.noise_k == 1.0);
    /* noise larger than the spread: k = 0, the weights are all noise, ESS = N, nu = 1 */
    cfg.ais.noise = AIS_NOISE_DEBIAS;
    se[0] = se[1] = 2.0;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.frac_var_mc == 1.0 && g.noise_k == 0.0);
    ck_assert_double_eq_tol(g.ess, 2.0, 1e-15);
    ck_assert(g.nu == 1.0);
    /* geo level divides se by L as it divides log w: L = (2, 2) gives lw = (0, 1),
     * V = 0.25, S = 0.75/4 -> the same k and frac_var_mc */
    int len[2] = {2, 2};
    b.len = len;
    se[0] = se[1] = sqrt(0.75);
    cfg.level = CORR_LEVEL_GEO;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.frac_var_mc, 0.75, 1e-15);
    ck_assert_double_eq_tol(g.noise_k, 0.5, 1e-15);
    /* all standard errors 0 (an exact estimator): nothing removed */
    cfg.level = CORR_LEVEL_SEQUENCE;
    se[0] = se[1] = 0.0;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.noise_k == 1.0 && g.frac_var_mc == 0.0);
    ck_assert_double_eq_tol(g.ess, (1 + e2) * (1 + e2) / (1 + e2 * e2), 1e-14);
}
END_TEST

/* Signed weights: linear divides by the sum of |l|. */
START_TEST(signed_weights_reverse_a_diagnostic)
{
    corr_stats s;
    memset(&s, 0, sizeof s);
    corr_extrema x = {{0, 0, 0, 0}};
    s.v[CORR_S_DELTA] = 0.05; /* delta = tau: s_div = 1 - e^-1 */
    s.v[CORR_S_DELTA_N] = 1.0;
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    dllm_err err = {0};
    cfg.ais.w_rel = cfg.ais.w_var = 0.0;
    cfg.ais.w_div = -1.0; /* divergence calls for less correction: clipped to 0 */
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    corr_diag g;
    corr_finalize(&s, &x, NULL, &cfg, 0.0, &g);
    ck_assert(g.alpha_raw == 0.0);
    /* reliability pulls up, divergence down: (2 s_rel - s_div) / 3 with s_rel from
     * N = 2 weights (1, 3) -> s_rel = 0.4 */
    double lw[2] = {0.0, log(3.0)}, adv[2] = {1.0, -1.0}, d[2] = {0.01, 0.01};
    corr_batch b = {.N = 2, .T = 1, .log_w = lw, .adv = adv, .d = d};
    cfg.ais.w_rel = 2.0;
    double coef[2];
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.alpha_raw, (2 * 0.4 - (1 - exp(-0.2))) / 3.0, 1e-14);
    ck_assert(g.alpha == g.alpha_raw);
}
END_TEST

/* C = .inf: min(w, C) = w; fixed at a = 1 is IS; mis never zeroes; a weight that
 * overflows is a non-finite unit (coefficient 0, counted), not inf or NaN. */
START_TEST(cap_inf_and_overflow)
{
    double lw[3] = {-3.0, 4.0, 720.0}, adv[3] = {1.0, -1.0, 0.0};
    corr_batch b = {.N = 3, .log_w = lw, .adv = adv};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    cfg.cap = INFINITY;
    dllm_err err = {0};
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    const corr_method ms[5] = {CORR_IS, CORR_TIS, CORR_MIS, CORR_FIXED, CORR_AIS};
    for (int k = 0; k < 5; k++) {
        cfg.method = ms[k];
        cfg.fixed_alpha = 1.0;
        cfg.ais.alpha_min = 1.0;
        corr_diag g;
        double coef[3];
        ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
        ck_assert_double_eq_tol(coef[0], exp(-3.0), 1e-15);
        ck_assert_double_eq_tol(coef[1], exp(4.0), 1e-12);
        ck_assert_msg(coef[2] == 0.0, "%s: %g", corr_method_name(ms[k]), coef[2]);
        ck_assert_double_eq_tol(g.frac_nonfinite, 1.0 / 3.0, 1e-15);
        ck_assert(g.frac_truncated == 0.0 && g.frac_zeroed == 0.0);
        ck_assert(g.n == 3); /* a finite lw stays in the diagnostics */
        ck_assert(isfinite(g.ess) && isfinite(g.nu));
    }
    /* with a finite cap the same weight is simply truncated */
    cfg.cap = 2.0;
    cfg.method = CORR_TIS;
    corr_diag g;
    double coef[3];
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(coef[2] == 2.0 && g.frac_nonfinite == 0.0);
    /* none ignores the weights entirely */
    cfg.method = CORR_NONE;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(coef[2] == 1.0 && g.frac_nonfinite == 0.0);
}
END_TEST

/* The GRPO loss with non-finite factors (grpo.h): zero factors give exactly 0,
 * infinite terms are dropped and counted, the loss stays finite. */
START_TEST(nonfinite_loss_terms_dropped_and_counted)
{
    enum { N = 5 };
    const double big = 800.0; /* (l_theta - l_old) / L = 800: r = exp(800) = +inf */
    double adv[N] = {1.0, 0.0, -1.0, 0.5, 1.0};
    double coef[N] = {INFINITY, 1.0, 1.0, 1.0, 1.0};
    double l_theta[N] = {-3.0, -3.0 + big, -3.0 + big, -3.0, -3.0 + big};
    double l_old[N] = {-3.0, -3.0, -3.0, -3.0, -3.0};
    int len[N] = {1, 1, 1, 2, 1};
    grpo_loss_cfg lc = {.ratio = GRPO_RATIO_SEQUENCE, .agg = GRPO_AGG_SEQ_MEAN, .clip_eps = 0.2};
    grpo_loss_in in = {.N = N, .adv = adv, .coef = coef, .len = len, .l_theta = l_theta,
                       .l_old = l_old};
    grpo_loss_out out;
    double grad[N];
    dllm_err err = {0};
    ck_assert_int_eq(grpo_loss(&lc, &in, &out, grad, NULL, &err), 0);
    /* kept: completion 3 (r = 1: 0.5) and 4 (clipped at r = +inf: 1.2 A, gradient 0);
     * 1 has A = 0 (not inf * 0 = NaN); 0 (c = inf) and 2 (r = inf, A < 0) dropped */
    ck_assert_msg(isfinite(out.loss), "loss %g", out.loss);
    ck_assert_double_eq_tol(out.loss, -(0.5 + 1.2) / N, 1e-15);
    ck_assert_int_eq(out.n_nonfinite, 2);
    for (int i = 0; i < N; i++)
        ck_assert_msg(isfinite(grad[i]), "grad %d = %g", i, grad[i]);
    ck_assert(grad[0] == 0.0 && grad[1] == 0.0 && grad[2] == 0.0 && grad[4] == 0.0);
    ck_assert_double_eq_tol(grad[3], -0.5 / N / 2.0, 1e-15);
    /* token ratio: the same at the token level */
    double lt[2] = {big, 0.0}, lo[2] = {0.0, 0.0}, a2[1] = {-1.0}, c2[1] = {1.0};
    grpo_loss_cfg tc = lc;
    tc.ratio = GRPO_RATIO_TOKEN;
    grpo_loss_in ti = {.N = 1, .T = 2, .adv = a2, .coef = c2, .logp_theta = lt, .logp_old = lo};
    double gt[2];
    ck_assert_int_eq(grpo_loss(&tc, &ti, &out, NULL, gt, &err), 0);
    ck_assert_int_eq(out.n_nonfinite, 1);
    ck_assert_double_eq_tol(out.loss, 1.0 / 2.0, 1e-15); /* -mean(c S) = -(-1 * 1) / 2 */
    ck_assert(gt[0] == 0.0 && isfinite(gt[1]));
}
END_TEST

START_TEST(nonfinite_excluded_and_counted)
{
    double log_w[4] = {0.2, NAN, INFINITY, -0.1}, adv[4] = {1.0, 5.0, -7.0, -1.0};
    double d[4 * 2] = {0.2, NAN, 9.0, 9.0, 9.0, 9.0, -0.1, NAN};
    corr_batch b = {.N = 4, .T = 2, .log_w = log_w, .d = d, .adv = adv};
    corr_batch only = {.N = 2, .T = 2, .log_w = (double[]){0.2, -0.1}, .d =
                       (double[]){0.2, NAN, -0.1, NAN}, .adv = (double[]){1.0, -1.0}};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    cfg.method = CORR_IS;
    corr_diag g, g2;
    double coef[4], coef2[2];
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_int_eq(corr_compute_all(&cfg, &only, 0.0, &g2, coef2, NULL, &err), 0);
    ck_assert(coef[1] == 0.0 && coef[2] == 0.0);
    ck_assert(coef[0] == coef2[0] && coef[3] == coef2[1]);
    ck_assert(g.frac_nonfinite == 0.5);
    /* the finite completions alone give the same diagnostics */
    ck_assert(g.n == 2 && g.ess == g2.ess && g.nu == g2.nu && g.delta == g2.delta &&
              g.k3 == g2.k3 && g.alpha == g2.alpha);
}
END_TEST

START_TEST(standard_error_and_step_mismatch)
{
    double log_w[3] = {0.1, INFINITY, -0.2}, adv[3] = {0, 1, 2}, se[3] = {0.3, 9.0, 0.5};
    double d[3 * 2] = {0.1, -0.4, 7.0, NAN, INFINITY, 0.2};
    int step[3 * 2] = {0, 1, 1, 0, 0, 5};
    corr_batch b = {.N = 3, .T = 2, .log_w = log_w, .d = d, .adv = adv, .log_w_se = se};
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    corr_diag g;
    double coef[3];
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert_double_eq_tol(g.log_w_se, 0.4, 1e-15); /* completion 1 (log w = inf) left out */
    b.log_w_se = NULL;
    ck_assert_int_eq(corr_compute_all(&cfg, &b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(isnan(g.log_w_se));
    /* step 0: |0.1|; step 1: |-0.4| + |7.0|; step 5 outside [0, 2); inf, NaN skipped */
    double sum[2] = {1.0, 0.0}, cnt[2] = {1.0, 0.0};
    corr_step_mismatch(&b, step, 2, sum, cnt);
    ck_assert_double_eq_tol(sum[0], 1.1, 1e-15);
    ck_assert(cnt[0] == 2.0 && cnt[1] == 2.0);
    ck_assert_double_eq_tol(sum[1], 7.4, 1e-15);
}
END_TEST

START_TEST(zero_weight_removes_diagnostic)
{
    const json_t *bj = json_array_get(json_object_get(goldens, "batches"), 0);
    batch_buf bb;
    batch_from_json(bj, &bb);
    const int N = bb.b.N, T = bb.b.T;
    double *d10 = malloc(sizeof *d10 * (size_t)N * T);
    for (int k = 0; k < N * T; k++)
        d10[k] = 10.0 * bb.d[k];
    corr_batch b10 = bb.b;
    b10.d = d10;
    for (int k = 0; k < 3; k++) {
        corr_cfg cfg;
        corr_cfg_default(&cfg);
        double *lam[3] = {&cfg.ais.w_rel, &cfg.ais.w_div, &cfg.ais.w_var};
        *lam[0] = 0.7;
        *lam[1] = 1.3;
        *lam[2] = 2.1;
        *lam[k] = 0.0;
        for (int comb = 0; comb < 2; comb++) {
            cfg.ais.combine = (ais_combine)comb;
            corr_diag g;
            double *coef = malloc(sizeof *coef * (size_t)N);
            dllm_err err = {0};
            ck_assert_int_eq(corr_compute_all(&cfg, &bb.b, 0.0, &g, coef, NULL, &err), 0);
            const double s[3] = {g.s_rel, g.s_div, g.s_var};
            double num = 0, den = 0;
            for (int j = 0; j < 3; j++)
                if (j != k) {
                    num += *lam[j] * s[j];
                    den += *lam[j];
                }
            const double want = comb == AIS_COMBINE_LINEAR
                                    ? num / den
                                    : 1.0 / (1.0 + exp(-(cfg.ais.bias + cfg.ais.gain * num / den)));
            ck_assert_double_eq_tol(g.alpha_raw, want, 1e-15);
            if (k == 1) { /* a tenfold divergence changes nothing when its weight is 0 */
                corr_diag g10;
                ck_assert_int_eq(corr_compute_all(&cfg, &b10, 0.0, &g10, coef, NULL, &err), 0);
                ck_assert(g10.s_div > g.s_div);
                ck_assert(g10.alpha == g.alpha);
            }
            free(coef);
        }
    }
    /* all weights 0 (linear): alpha_raw = alpha_min */
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    cfg.ais.w_rel = cfg.ais.w_div = cfg.ais.w_var = 0.0;
    cfg.ais.alpha_min = 0.15;
    corr_diag g;
    double *coef = malloc(sizeof *coef * (size_t)N);
    dllm_err err = {0};
    ck_assert_int_eq(corr_compute_all(&cfg, &bb.b, 0.0, &g, coef, NULL, &err), 0);
    ck_assert(g.alpha_raw == 0.15 && g.alpha == 0.15);
    free(coef);
    free(d10);
    batch_free(&bb);
}
END_TEST

START_TEST(alpha_clamp_and_eta)
{
    corr_stats s;
    memset(&s, 0, sizeof s);
    corr_extrema x = {{0, 0, 0, 0}};
    s.v[CORR_S_DELTA] = 1.0; /* delta = 1 nat per token: s_div ~ 1 */
    s.v[CORR_S_DELTA_N] = 1.0;
    corr_cfg cfg;
    corr_cfg_default(&cfg);
    cfg.ais.w_rel = cfg.ais.w_var = 0.0;
    corr_diag g;
    corr_finalize(&s, &x, NULL, &cfg, 0.0, &g);
    ck_assert_double_eq_tol(g.alpha, 1.0 - exp(-20.0), 1e-15);
    cfg.ais.alpha_max = 0.3;
    corr_finalize(&s, &x, NULL, &cfg, 0.0, &g);
    ck_assert(g.alpha == 0.3 && g.alpha_raw > 0.99);
    cfg.ais.alpha_max = 1.0;
    cfg.ais.eta = 0.75;
    corr_finalize(&s, &x, NULL, &cfg, 0.2, &g);
    ck_assert_double_eq_tol(g.alpha, 0.75 * 0.2 + 0.25 * g.alpha_raw, 1e-15);
    s.v[CORR_S_DELTA] = 0.0; /* no divergence: raw 0, alpha_min holds */
    cfg.ais.eta = 0.0;
    cfg.ais.alpha_min = 0.05;
    corr_finalize(&s, &x, NULL, &cfg, 0.9, &g);
    ck_assert(g.alpha_raw == 0.0 && g.alpha == 0.05);
    /* logistic combine ignores the [0,1] clip but not the clamp */
    cfg.ais.combine = AIS_COMBINE_LOGISTIC;
    cfg.ais.bias = 3.0;
    cfg.ais.alpha_max = 0.5;
    corr_finalize(&s, &x, NULL, &cfg, 0.0, &g);
    ck_assert_double_eq_tol(g.alpha_raw, 1.0 / (1.0 + exp(-3.0)), 1e-15);
    ck_assert(g.alpha == 0.5);
}
END_TEST

START_TEST(config_checks_and_names)
{
    corr_cfg cfg;
    dllm_err err = {0};
    corr_cfg_default(&cfg);
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    ck_assert(cfg.method == CORR_AIS && cfg.cap == 2.0 && cfg.ais.bias == -4.0 &&
              cfg.ais.tau_delta == 0.05);
    cfg.cap = 0.5;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "correction.cap"));
    cfg.cap = NAN;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), DLLM_EXIT_INPUT);
    cfg.cap = INFINITY;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    corr_cfg_default(&cfg);
    cfg.ais.alpha_min = 0.8;
    cfg.ais.alpha_max = 0.2;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "alpha_min"));
    corr_cfg_default(&cfg);
    cfg.ais.w_div = -1.0; /* signed weights, linear and logistic */
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    cfg.ais.combine = AIS_COMBINE_LOGISTIC;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), 0);
    cfg.ais.w_div = INFINITY;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "weights.divergence"));
    corr_cfg_default(&cfg);
    cfg.ais.tau_delta = 0.0;
    ck_assert_int_eq(corr_cfg_check(&cfg, &err), DLLM_EXIT_INPUT);

    for (int m = 0; m < 6; m++) {
        corr_method got;
        ck_assert_int_eq(corr_parse_method(corr_method_name((corr_method)m), &got, &err), 0);
        ck_assert_int_eq(got, m);
    }
    corr_method mm;
    ck_assert_int_eq(corr_parse_method("TIS", &mm, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "correction.method"));
    ck_assert_ptr_nonnull(strstr(err.msg, "'TIS'"));
    corr_level lv;
    ck_assert_int_eq(corr_parse_level("geo", &lv, &err), 0);
    ck_assert_int_eq(lv, CORR_LEVEL_GEO);
    ck_assert_int_eq(corr_parse_level("tokens", &lv, &err), DLLM_EXIT_INPUT);
    ais_combine cb;
    ck_assert_int_eq(ais_parse_combine("logistic", &cb, &err), 0);
    ck_assert_int_eq(cb, AIS_COMBINE_LOGISTIC);
    ais_noise nz;
    ck_assert_int_eq(ais_parse_noise("none", &nz, &err), 0);
    ck_assert_int_eq(nz, AIS_NOISE_NONE);
    ck_assert_int_eq(ais_parse_noise("debiased", &nz, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "correction.ais.noise"));

    /* geo needs lengths >= 1; token needs d */
    double lw[1] = {0.1}, adv[1] = {0};
    int len[1] = {0};
    corr_batch b = {.N = 1, .T = 1, .log_w = lw, .len = len, .adv = adv};
    corr_extrema x;
    corr_cfg_default(&cfg);
    cfg.level = CORR_LEVEL_GEO;
    ck_assert_int_ne(corr_local_extrema(&cfg, &b, &x, &err), 0);
    cfg.level = CORR_LEVEL_TOKEN;
    ck_assert_int_ne(corr_local_extrema(&cfg, &b, &x, &err), 0);
}
END_TEST

static Suite *corrections_suite(void)
{
    Suite *s = suite_create("corrections");
    TCase *tc = tcase_create("core");
    tcase_add_unchecked_fixture(tc, load_goldens, free_goldens);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, matches_numpy_reference);
    tcase_add_test(tc, two_phase_split_equals_single_pass);
    tcase_add_test(tc, reference_arm_gives_exactly_one);
    tcase_add_test(tc, hand_computed);
    tcase_add_test(tc, hand_computed_total_nu);
    tcase_add_test(tc, empty_population_keeps_alpha);
    tcase_add_test(tc, alpha_raw_spans_unit_interval);
    tcase_add_test(tc, noise_debias_hand_computed);
    tcase_add_test(tc, signed_weights_reverse_a_diagnostic);
    tcase_add_test(tc, cap_inf_and_overflow);
    tcase_add_test(tc, nonfinite_excluded_and_counted);
    tcase_add_test(tc, nonfinite_loss_terms_dropped_and_counted);
    tcase_add_test(tc, standard_error_and_step_mismatch);
    tcase_add_test(tc, zero_weight_removes_diagnostic);
    tcase_add_test(tc, alpha_clamp_and_eta);
    tcase_add_test(tc, config_checks_and_names);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return corrections_suite();
}
