/* corrections.c: mismatch correction coefficients and AIS diagnostics
 * (docs/METHOD.md §5); the definitions and the two-phase protocol are in corrections.h. */
#include "src/rl/corrections.h"

#include <math.h>
#include <string.h>

void corr_cfg_default(corr_cfg *cfg)
{
    *cfg = (corr_cfg){
        .method = CORR_AIS, .level = CORR_LEVEL_SEQUENCE, .cap = 2.0, .fixed_alpha = 0.5,
        .ais = {.combine = AIS_COMBINE_LINEAR, .noise = AIS_NOISE_DEBIAS,
                .population = AIS_POP_INFORMATIVE, .variance = AIS_VAR_TOTAL, .w_rel = 1.0,
                .w_div = 1.0, .w_var = 1.0, .tau_delta = 0.05, .bias = -4.0, .gain = 8.0,
                .eta = 0.0, .alpha_min = 0.0, .alpha_max = 1.0},
    };
}

int corr_cfg_check(const corr_cfg *cfg, dllm_err *err)
{
    const ais_cfg *a = &cfg->ais;
    /* +inf is allowed: min(w, C) = w, the fully importance-weighted arm */
    if (!(cfg->cap >= 1.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.cap: must be a number >= 1 or .inf (got %g)", cfg->cap);
    if (!(cfg->fixed_alpha >= 0.0 && cfg->fixed_alpha <= 1.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.fixed_alpha: must be in [0, 1] (got %g)", cfg->fixed_alpha);
    if (!(isfinite(a->tau_delta) && a->tau_delta > 0.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.ais.tau_delta: must be > 0 (got %g)", a->tau_delta);
    if (!(a->eta >= 0.0 && a->eta <= 1.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.ais.eta: must be in [0, 1] (got %g)", a->eta);
    if (!(a->alpha_min >= 0.0 && a->alpha_max <= 1.0 && a->alpha_min <= a->alpha_max))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "correction.ais.alpha_min/alpha_max: need 0 <= alpha_min <= "
                            "alpha_max <= 1 (got %g, %g)", a->alpha_min, a->alpha_max);
    if (!isfinite(a->bias))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "correction.ais.bias: must be finite");
    if (!(isfinite(a->gain) && a->gain > 0.0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "correction.ais.gain: must be > 0 (got %g)",
                            a->gain);
    const double ws[3] = {a->w_rel, a->w_div, a->w_var};
    const char *names[3] = {"reliability", "divergence", "variance"};
    /* signed: linear normalises by the sum of |weights|, so a negative weight
     * reverses its diagnostic and alpha_raw stays in [-1, 1] before the clip */
    for (int k = 0; k < 3; k++)
        if (!isfinite(ws[k]))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "correction.ais.weights.%s: must be finite (got %g)", names[k],
                                ws[k]);
    return DLLM_OK;
}

static const char *const method_names[] = {"none", "is", "tis", "mis", "fixed", "ais"};
static const char *const level_names[] = {"sequence", "geo", "token"};
static const char *const combine_names[] = {"linear", "logistic"};
static const char *const noise_names[] = {"debias", "none"};
static const char *const population_names[] = {"informative", "all"};
static const char *const variance_names[] = {"total", "excess"};

const char *corr_method_name(corr_method m)
{
    return (unsigned)m < 6 ? method_names[m] : "?";
}
const char *corr_level_name(corr_level l)
{
    return (unsigned)l < 3 ? level_names[l] : "?";
}
const char *ais_combine_name(ais_combine c)
{
    return (unsigned)c < 2 ? combine_names[c] : "?";
}
const char *ais_noise_name(ais_noise n)
{
    return (unsigned)n < 2 ? noise_names[n] : "?";
}
const char *ais_population_name(ais_population p)
{
    return (unsigned)p < 2 ? population_names[p] : "?";
}
const char *ais_variance_name(ais_variance v)
{
    return (unsigned)v < 2 ? variance_names[v] : "?";
}

/* Looks s up in names[n]; the error names the key and lists the choices. */
static int parse_enum(const char *s, const char *const *names, int n, const char *key, int *out,
                      dllm_err *err)
{
    for (int k = 0; k < n; k++)
        if (s && strcmp(s, names[k]) == 0) {
            *out = k;
            return DLLM_OK;
        }
    char choices[256] = "";
    for (int k = 0; k < n; k++) {
        strncat(choices, names[k], sizeof choices - strlen(choices) - 1);
        if (k + 1 < n)
            strncat(choices, ", ", sizeof choices - strlen(choices) - 1);
    }
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: unknown value '%s' (expected one of: %s)", key,
                        s ? s : "(null)", choices);
}

int corr_parse_method(const char *s, corr_method *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, method_names, 6, "correction.method", &k, err);
    if (rc == DLLM_OK)
        *out = (corr_method)k;
    return rc;
}
int corr_parse_level(const char *s, corr_level *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, level_names, 3, "correction.level", &k, err);
    if (rc == DLLM_OK)
        *out = (corr_level)k;
    return rc;
}
int ais_parse_combine(const char *s, ais_combine *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, combine_names, 2, "correction.ais.combine", &k, err);
    if (rc == DLLM_OK)
        *out = (ais_combine)k;
    return rc;
}
int ais_parse_noise(const char *s, ais_noise *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, noise_names, 2, "correction.ais.noise", &k, err);
    if (rc == DLLM_OK)
        *out = (ais_noise)k;
    return rc;
}

int ais_parse_population(const char *s, ais_population *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, population_names, 2, "correction.ais.population", &k, err);
    if (rc == DLLM_OK)
        *out = (ais_population)k;
    return rc;
}
int ais_parse_variance(const char *s, ais_variance *out, dllm_err *err)
{
    int k;
    int rc = parse_enum(s, variance_names, 2, "correction.ais.variance", &k, err);
    if (rc == DLLM_OK)
        *out = (ais_variance)k;
    return rc;
}

void corr_informative(const double *reward, int n_groups, int G, uint8_t *member)
{
    for (int g = 0; g < n_groups; g++) {
        const double *r = reward + (size_t)g * G;
        uint8_t differ = 0;
        for (int j = 1; j < G; j++)
            differ |= r[j] != r[0];
        for (int j = 0; j < G; j++)
            member[(size_t)g * G + j] = differ;
    }
}

/* whether completion i is in the diagnostics' population */
static bool in_pop(const corr_batch *b, int i)
{
    return !b->member || b->member[i];
}

static int check_batch(const corr_cfg *cfg, const corr_batch *b, dllm_err *err)
{
    if (b->N < 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "corrections: negative batch size %d", b->N);
    if (b->N == 0)
        return DLLM_OK;
    if (!b->adv)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "corrections: advantages missing");
    if (cfg->level == CORR_LEVEL_TOKEN && !b->d)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "corrections: correction.level token needs per-token log-ratios");
    if (cfg->level != CORR_LEVEL_TOKEN && !b->log_w)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "corrections: log w missing");
    if (b->d && b->T < 1)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "corrections: token stride T = %d", b->T);
    if (cfg->level == CORR_LEVEL_GEO) {
        if (!b->len)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                "corrections: correction.level geo needs completion lengths");
        for (int i = 0; i < b->N; i++)
            if (b->len[i] < 1)
                return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                                    "corrections: completion %d has length %d (geo needs >= 1)", i,
                                    b->len[i]);
    }
    return DLLM_OK;
}

/* log of the completion's weight at levels sequence/geo */
static double seq_lw(const corr_cfg *cfg, const corr_batch *b, int i)
{
    return cfg->level == CORR_LEVEL_GEO ? b->log_w[i] / (double)b->len[i] : b->log_w[i];
}

/* The coefficient of one unit, and whether it was truncated (tis/fixed/ais),
 * zeroed (mis) or non-finite (lw non-finite, or a weight that overflows where
 * the method uses it uncapped): non-finite -> 0. */
static double unit_coef(const corr_cfg *cfg, double alpha, double lw, int *trunc, int *zeroed,
                        int *nonfin)
{
    *trunc = *zeroed = 0;
    *nonfin = !isfinite(lw);
    if (*nonfin)
        return 0.0;
    const double C = cfg->cap, w = exp(lw);
    if (isinf(w) && cfg->method != CORR_NONE && (cfg->method == CORR_IS || isinf(C))) {
        /* an overflowing weight would make the coefficient +inf (or inf * 0) */
        *nonfin = 1;
        return 0.0;
    }
    switch (cfg->method) {
    case CORR_NONE:
        return 1.0;
    case CORR_IS:
        return w;
    case CORR_TIS:
        *trunc = w > C;
        return w > C ? C : w;
    case CORR_MIS:
        if (w >= 1.0 / C && w <= C)
            return w;
        *zeroed = 1;
        return 0.0;
    case CORR_FIXED:
    case CORR_AIS: {
        const double a = cfg->method == CORR_FIXED ? cfg->fixed_alpha : alpha;
        *trunc = w > C;
        /* = (1 - a) + a min(w, C), exactly 1 at w = 1 */
        return 1.0 + a * ((w > C ? C : w) - 1.0);
    }
    }
    return 0.0;
}

static void ext_add(corr_extrema *x, double lw, double A)
{
    if (lw > x->v[CORR_X_LW_MAX]) x->v[CORR_X_LW_MAX] = lw;
    if (-lw > x->v[CORR_X_LW_NEGMIN]) x->v[CORR_X_LW_NEGMIN] = -lw;
    if (A > x->v[CORR_X_A_MAX]) x->v[CORR_X_A_MAX] = A;
    if (-A > x->v[CORR_X_A_NEGMIN]) x->v[CORR_X_A_NEGMIN] = -A;
}

int corr_local_extrema(const corr_cfg *cfg, const corr_batch *b, corr_extrema *ext,
                       dllm_err *err)
{
    for (int k = 0; k < CORR_EXT_N; k++)
        ext->v[k] = -INFINITY;
    int rc = check_batch(cfg, b, err);
    if (rc)
        return rc;
    for (int i = 0; i < b->N; i++) {
        if (!in_pop(b, i))
            continue;
        if (cfg->level == CORR_LEVEL_TOKEN) {
            const double *d = b->d + (size_t)i * b->T;
            for (int t = 0; t < b->T; t++)
                if (isfinite(d[t]))
                    ext_add(ext, d[t], b->adv[i]);
        } else {
            const double lw = seq_lw(cfg, b, i);
            if (isfinite(lw))
                ext_add(ext, lw, b->adv[i]);
        }
    }
    return DLLM_OK;
}

void corr_extrema_merge(corr_extrema *a, const corr_extrema *b)
{
    for (int k = 0; k < CORR_EXT_N; k++)
        if (b->v[k] > a->v[k])
            a->v[k] = b->v[k];
}

/* One unit into the sums: finite or not, its truncation/zeroing counts; the
 * diagnostics' sums only for a member of the population.
 * k: the noise shrink factor (w' = exp(k (lw - lw_max))); cap_sc: the shift
 * max lw~ - L of the capped weight's exponent and the cap C exp(-L). */
static void sums_add_unit(const corr_cfg *cfg, double *s, double lw, double A, double lw_max,
                          double k, double a_mid, const double *cap_sc, bool member)
{
    int trunc, zeroed, nonfin;
    unit_coef(cfg, 0.0, lw, &trunc, &zeroed, &nonfin);
    s[CORR_S_UNITS] += 1;
    s[CORR_S_TRUNC] += trunc;
    s[CORR_S_ZEROED] += zeroed;
    s[CORR_S_NONFINITE] += nonfin;
    if (!isfinite(lw) || !member)
        return;
    const double w = exp(k * (lw - lw_max)), a = A - a_mid;
    /* the capped weight min(exp(lw~), C) on the scale exp(-L), L = min(max lw~, log C):
     * its largest value is 1, so neither it nor the sums overflow or all underflow
     * (lw~ - max lw~ = k (lw - max lw)) */
    const double mc = fmin(exp(k * (lw - lw_max) + cap_sc[0]), cap_sc[1]);
    s[CORR_S_M] += mc;
    s[CORR_S_M2] += mc * mc;
    s[CORR_S_M2A] += mc * mc * a;
    s[CORR_S_M2A2] += (mc * a) * (mc * a);
    s[CORR_S_FINITE] += 1;
    s[CORR_S_W] += w;
    s[CORR_S_W2] += w * w;
    s[CORR_S_WA] += w * a;
    s[CORR_S_W2A] += w * w * a;
    s[CORR_S_W2A2] += (w * a) * (w * a);
    s[CORR_S_A] += a;
    s[CORR_S_A2] += a * a;
}

/* the standard error of a unit's lw at levels sequence/geo */
static double seq_se(const corr_cfg *cfg, const corr_batch *b, int i)
{
    return cfg->level == CORR_LEVEL_GEO ? b->log_w_se[i] / (double)b->len[i] : b->log_w_se[i];
}

int corr_local_moments(const corr_cfg *cfg, const corr_batch *b, const corr_extrema *gx,
                       corr_moments *mo, dllm_err *err)
{
    memset(mo, 0, sizeof *mo);
    int rc = check_batch(cfg, b, err);
    if (rc || cfg->level == CORR_LEVEL_TOKEN)
        return rc; /* per-token log-ratios come from exact estimators: no noise */
    double *m = mo->v;
    const double c = 0.5 * (gx->v[CORR_X_LW_MAX] - gx->v[CORR_X_LW_NEGMIN]);
    for (int i = 0; i < b->N; i++) {
        const double lw = seq_lw(cfg, b, i);
        if (!isfinite(lw) || !in_pop(b, i))
            continue;
        m[CORR_M_N] += 1;
        m[CORR_M_LW] += lw - c;
        m[CORR_M_LW2] += (lw - c) * (lw - c);
        if (b->log_w_se && isfinite(b->log_w_se[i])) {
            const double se = seq_se(cfg, b, i);
            m[CORR_M_SE2] += se * se;
            m[CORR_M_SE_N] += 1;
        }
    }
    return DLLM_OK;
}

void corr_moments_merge(corr_moments *a, const corr_moments *b)
{
    for (int k = 0; k < CORR_MOM_N; k++)
        a->v[k] += b->v[k];
}

corr_noise_fit corr_fit_noise(const corr_cfg *cfg, const corr_moments *gm)
{
    corr_noise_fit f = {.k = 1.0, .frac_var_mc = 0.0};
    if (!gm || gm->v[CORR_M_N] <= 0 || gm->v[CORR_M_SE_N] <= 0)
        return f;
    const double n = gm->v[CORR_M_N], mean = gm->v[CORR_M_LW] / n;
    const double V = fmax(gm->v[CORR_M_LW2] / n - mean * mean, 0.0);
    const double S = gm->v[CORR_M_SE2] / gm->v[CORR_M_SE_N];
    if (V > 0.0)
        f.frac_var_mc = fmin(1.0, S / V);
    if (cfg->ais.noise == AIS_NOISE_DEBIAS && V > 0.0 && S > 0.0)
        f.k = sqrt(fmax(0.0, 1.0 - S / V));
    return f;
}

/* Tokens of one completion into delta and k3 (scored = finite d). */
static void sums_add_tokens(double *s, const double *d, int T)
{
    double abs_sum = 0.0;
    int n = 0;
    for (int t = 0; t < T; t++) {
        if (!isfinite(d[t]))
            continue;
        abs_sum += fabs(d[t]);
        s[CORR_S_K3] += exp(d[t]) - 1.0 - d[t];
        n++;
    }
    s[CORR_S_K3_N] += n;
    if (n > 0) {
        s[CORR_S_DELTA] += abs_sum / n;
        s[CORR_S_DELTA_N] += 1;
    }
}

/* max lw~ = m + k (max lw - m): the largest de-noised log-weight (max lw when k = 1) */
static double top_lw(const corr_cfg *cfg, const corr_extrema *gx, const corr_moments *gm)
{
    const corr_noise_fit nf = corr_fit_noise(cfg, gm);
    double top = gx->v[CORR_X_LW_MAX];
    if (nf.k != 1.0 && gm && gm->v[CORR_M_N] > 0) {
        const double c = 0.5 * (gx->v[CORR_X_LW_MAX] - gx->v[CORR_X_LW_NEGMIN]);
        const double m = c + gm->v[CORR_M_LW] / gm->v[CORR_M_N];
        top = m + nf.k * (top - m);
    }
    return top;
}

int corr_local_sums(const corr_cfg *cfg, const corr_batch *b, const corr_extrema *gx,
                    const corr_moments *gm, corr_stats *st, dllm_err *err)
{
    memset(st, 0, sizeof *st);
    int rc = check_batch(cfg, b, err);
    if (rc)
        return rc;
    double *s = st->v;
    const double lw_max = gx->v[CORR_X_LW_MAX];
    const double k = corr_fit_noise(cfg, gm).k;
    const double a_mid = 0.5 * (gx->v[CORR_X_A_MAX] - gx->v[CORR_X_A_NEGMIN]);
    /* w' = exp(lw~ - max lw~); the capped weight min(exp(lw~), C) scaled by exp(-L) is
     * min(w' exp(max lw~ - L), C exp(-L)) */
    const double top = top_lw(cfg, gx, gm), L = fmin(top, log(cfg->cap));
    const double cap_sc[2] = {isfinite(top) ? top - L : 0.0,
                              isfinite(L) ? exp(log(cfg->cap) - L) : INFINITY};
    for (int i = 0; i < b->N; i++) {
        const double *d = b->d ? b->d + (size_t)i * b->T : NULL;
        const bool member = in_pop(b, i);
        s[CORR_S_MEMBERS] += member;
        if (cfg->level == CORR_LEVEL_TOKEN) {
            for (int t = 0; t < b->T; t++)
                if (!isnan(d[t]))
                    sums_add_unit(cfg, s, d[t], b->adv[i], lw_max, 1.0, a_mid, cap_sc, member);
            if (member)
                sums_add_tokens(s, d, b->T);
        } else {
            const double lw = seq_lw(cfg, b, i);
            sums_add_unit(cfg, s, lw, b->adv[i], lw_max, k, a_mid, cap_sc, member);
            if (d && isfinite(lw) && member)
                sums_add_tokens(s, d, b->T);
        }
        if (!member)
            continue;
        if (b->log_w && isfinite(b->log_w[i])) {
            s[CORR_S_ABS_LW] += fabs(b->log_w[i]);
            s[CORR_S_ABS_LW_N] += 1;
        }
        /* the standard error belongs to the completion's log w at every level */
        if (b->log_w_se && b->log_w && isfinite(b->log_w[i]) && isfinite(b->log_w_se[i])) {
            s[CORR_S_SE] += b->log_w_se[i];
            s[CORR_S_SE_N] += 1;
        }
    }
    return DLLM_OK;
}

void corr_stats_merge(corr_stats *a, const corr_stats *b)
{
    for (int k = 0; k < CORR_STATS_N; k++)
        a->v[k] += b->v[k];
}

void corr_finalize(const corr_stats *st, const corr_extrema *gx, const corr_moments *gm,
                   const corr_cfg *cfg, double alpha_prev, corr_diag *g)
{
    const double *s = st->v;
    const ais_cfg *ac = &cfg->ais;
    const double n = s[CORR_S_FINITE];
    const corr_noise_fit nf = corr_fit_noise(cfg, gm);
    memset(g, 0, sizeof *g);
    g->n = n;
    g->members = s[CORR_S_MEMBERS];
    g->noise_k = nf.k;
    g->frac_var_mc = nf.frac_var_mc;
    g->nu = g->nu_total = g->nu_excess = 1.0;
    g->log_mean_w = -INFINITY;
    if (n > 0) {
        const double Sw = s[CORR_S_W];
        g->ess = Sw * Sw / s[CORR_S_W2];
        g->rho_ess = g->ess / n;
        g->s_rel = n > 1 ? (n - g->ess) / (n - 1) : 0.0;
        const double mean_wt2 = n * s[CORR_S_W2] / (Sw * Sw); /* mean(w~^2) */
        g->w_cv = sqrt(fmax(mean_wt2 - 1.0, 0.0));
        /* log mean(w), w = exp(lw~): the sums are scaled by exp(-max lw~) */
        g->log_mean_w = log(Sw / n) + top_lw(cfg, gx, gm);
        /* equal weights make w~ = c~ = 1 and equal advantages make Var(A) = 0: nu = 1
         * exactly in both cases, decided on the exact extrema, not on rounded sums
         * (k = 0 makes every de-noised weight equal) */
        const bool w_equal = gx->v[CORR_X_LW_MAX] == -gx->v[CORR_X_LW_NEGMIN] || nf.k == 0.0;
        const bool a_equal = gx->v[CORR_X_A_MAX] == -gx->v[CORR_X_A_NEGMIN];
        if (!w_equal && !a_equal) {
            /* b = A - a_mid; centred a = b - mb: w~ a = w~ b - mb w~, and mean(w~) = 1 */
            const double mb = s[CORR_S_A] / n;
            const double var_a = s[CORR_S_A2] / n - mb * mb;
            const double mwa = s[CORR_S_WA] / Sw - mb; /* mean(w~ a) */
            const double mwa2 = n * (s[CORR_S_W2A2] - 2.0 * mb * s[CORR_S_W2A] +
                                     mb * mb * s[CORR_S_W2]) / (Sw * Sw); /* mean((w~ a)^2) */
            const double var_wa = mwa2 - mwa * mwa;
            /* mean((c~ a)^2), c~ = m / mean(m): the same expansion on the capped weights */
            const double Sm = s[CORR_S_M];
            const double mca2 = n * (s[CORR_S_M2A2] - 2.0 * mb * s[CORR_S_M2A] +
                                     mb * mb * s[CORR_S_M2]) / (Sm * Sm);
            if (var_a > 0.0) {
                g->nu_excess = fmax(var_wa, 0.0) / (mean_wt2 * var_a);
                g->nu_total = fmax(mca2, 0.0) / var_a;
            }
        }
    }
    g->nu = ac->variance == AIS_VAR_EXCESS ? g->nu_excess : g->nu_total;
    g->s_var = 1.0 - 1.0 / fmax(g->nu, 1.0);
    g->delta = s[CORR_S_DELTA_N] > 0 ? s[CORR_S_DELTA] / s[CORR_S_DELTA_N] : 0.0;
    g->k3 = s[CORR_S_K3_N] > 0 ? s[CORR_S_K3] / s[CORR_S_K3_N] : 0.0;
    g->s_div = 1.0 - exp(-g->delta / ac->tau_delta);
    g->abs_log_w = s[CORR_S_ABS_LW_N] > 0 ? s[CORR_S_ABS_LW] / s[CORR_S_ABS_LW_N] : NAN;

    const double wsum = fabs(ac->w_rel) + fabs(ac->w_div) + fabs(ac->w_var);
    const double lin = ac->w_rel * g->s_rel + ac->w_div * g->s_div + ac->w_var * g->s_var;
    const double score = wsum > 0.0 ? lin / wsum : 0.0; /* in [-1, 1] */
    if (ac->combine == AIS_COMBINE_LOGISTIC)
        g->alpha_raw = 1.0 / (1.0 + exp(-(ac->bias + ac->gain * score)));
    else if (wsum == 0.0)
        g->alpha_raw = ac->alpha_min;
    else
        g->alpha_raw = fmin(fmax(score, 0.0), 1.0);

    g->log_w_se = s[CORR_S_SE_N] > 0 ? s[CORR_S_SE] / s[CORR_S_SE_N] : NAN;
    if (g->members == 0 && s[CORR_S_UNITS] > 0) {
        /* no completion to diagnose (no informative group): nothing to correct this
         * batch, so alpha stays where it was; the diagnostics are missing, not 0 */
        g->empty = 1;
        g->ess = g->rho_ess = g->s_rel = g->delta = g->k3 = g->s_div = NAN;
        g->nu = g->nu_total = g->nu_excess = g->s_var = g->w_cv = g->log_mean_w = NAN;
        g->frac_var_mc = NAN;
        g->alpha_raw = alpha_prev;
    }
    const double a = ac->eta * alpha_prev + (1.0 - ac->eta) * g->alpha_raw;
    g->alpha = fmin(fmax(a, ac->alpha_min), ac->alpha_max);

    const double units = s[CORR_S_UNITS];
    if (units > 0) {
        g->frac_nonfinite = s[CORR_S_NONFINITE] / units;
        g->frac_truncated = s[CORR_S_TRUNC] / units;
        g->frac_zeroed = s[CORR_S_ZEROED] / units;
    }
}

int corr_coefficients(const corr_cfg *cfg, double alpha, const corr_batch *b, double *coef,
                      double *coef_tok, corr_counts *cnt, dllm_err *err)
{
    int rc = check_batch(cfg, b, err);
    if (rc)
        return rc;
    corr_counts c = {0};
    const bool tok = cfg->level == CORR_LEVEL_TOKEN;
    if (b->N > 0 && ((tok && !coef_tok) || (!tok && !coef)))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "corrections: no output for level %s",
                            corr_level_name(cfg->level));
    for (int i = 0; i < b->N; i++) {
        int trunc, zeroed, nonfin;
        if (tok) {
            const double *d = b->d + (size_t)i * b->T;
            double *ct = coef_tok + (size_t)i * b->T;
            for (int t = 0; t < b->T; t++) {
                if (isnan(d[t])) {
                    ct[t] = 0.0; /* not scored */
                    continue;
                }
                ct[t] = unit_coef(cfg, alpha, d[t], &trunc, &zeroed, &nonfin);
                c.units++;
                c.nonfinite += nonfin;
                c.truncated += trunc;
                c.zeroed += zeroed;
            }
        } else {
            const double lw = seq_lw(cfg, b, i);
            coef[i] = unit_coef(cfg, alpha, lw, &trunc, &zeroed, &nonfin);
            c.units++;
            c.nonfinite += nonfin;
            c.truncated += trunc;
            c.zeroed += zeroed;
        }
    }
    if (cnt)
        *cnt = c;
    return DLLM_OK;
}

void corr_step_mismatch(const corr_batch *b, const int *step, int n_steps, double *sum_abs,
                        double *count)
{
    for (size_t k = 0; b->d && k < (size_t)b->N * b->T; k++) {
        if (!isfinite(b->d[k]) || step[k] < 0 || step[k] >= n_steps)
            continue;
        sum_abs[step[k]] += fabs(b->d[k]);
        count[step[k]] += 1;
    }
}

int corr_compute_all(const corr_cfg *cfg, const corr_batch *b, double alpha_prev,
                     corr_diag *diag, double *coef, double *coef_tok, dllm_err *err)
{
    corr_extrema x;
    corr_moments m;
    corr_stats s;
    int rc = corr_local_extrema(cfg, b, &x, err);
    if (!rc)
        rc = corr_local_moments(cfg, b, &x, &m, err);
    if (!rc)
        rc = corr_local_sums(cfg, b, &x, &m, &s, err);
    if (rc)
        return rc;
    corr_finalize(&s, &x, &m, cfg, alpha_prev, diag);
    return corr_coefficients(cfg, diag->alpha, b, coef, coef_tok, NULL, err);
}
