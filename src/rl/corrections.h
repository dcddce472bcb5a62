/* corrections.h: rollout-training mismatch corrections and the AIS diagnostics
 * (docs/METHOD.md §5). Pure math on arrays, all in double; no model code.
 *
 * Units. A "unit" is what carries one importance weight w = exp(lw):
 *   level sequence: completion i, lw_i = log w_i = l_pi(y_i) - l_mu(y_i);
 *   level geo:      completion i, lw_i = log w_i / L_i (per-token geometric mean);
 *   level token:    scored token (i,t), lw = d_{i,t}; each carries A_i of its completion.
 * A unit whose lw is not finite (NaN, +-inf; at level token: +-inf d, since NaN
 * d means "not scored" and is no unit at all) gets coefficient 0, is counted
 * (frac_nonfinite) and takes no part in any diagnostic: at levels sequence/geo
 * its completion's tokens are left out of delta and k3 too.
 *
 * Estimator noise (levels sequence/geo, when log_w_se is given): with m = mean(lw),
 * V = population variance of lw and S = mean(se^2) over the finite units (se_i/L_i at
 * level geo), frac_var_mc = min(1, S/V) (0 when V = 0; always logged) and, under
 * noise debias, ESS and nu use the de-noised lw~ = m + k (lw - m), k = sqrt(max(0,
 * 1 - S/V)) (k = 1 when V = 0 or S = 0). Noise none, level token or no log_w_se: k = 1.
 * Coefficients always use the raw lw; delta and k3 are never de-noised.
 *
 * Population (correction.ais.population): the diagnostics see the units of the
 * completions with member[i] = 1 (informative: groups whose rewards differ; all:
 * every completion). Below, "finite units" are the population's. A population with
 * no completion (members = 0) makes every diagnostic NaN, empty = 1 and alpha_raw =
 * alpha_prev (nothing to correct this batch); the coefficients still follow.
 *
 * Diagnostics over the N finite units, with mean-one weights w~ = w / mean(w)
 * (w = exp(lw~)):
 *   ESS = (sum w)^2 / sum w^2;  rho_ess = ESS / N;  s_rel = (N - ESS) / (N - 1)
 *   (0 when N <= 1);
 *   delta = mean over completions of the mean over its scored tokens of |d|
 *   (a token is scored when d is finite; completions without one are skipped);
 *   k3 = mean over scored tokens of (e^d - 1 - d);  s_div = 1 - exp(-delta/tau_delta)
 *   (no scored token in the batch: delta = k3 = 0);
 *   a = A - mean(A) (centred advantages), population variances;
 *   nu_total  = mean(c~^2 a^2) / mean(a^2), c~ = m / mean(m), m = min(w, C) (w when
 *               C = inf): the end point's capped coefficients, mean one;
 *   nu_excess = Var(w~ a) / (mean(w~^2) Var(A));
 *   both 1 when Var(A) = 0 (all A equal) or when all weights are equal;
 *   nu = the form of correction.ais.variance;  s_var = 1 - 1/max(nu, 1);
 *   abs_log_w = mean |log w_i| over the population's completions with finite log w;
 *   with S = (l_rel s_rel + l_div s_div + l_var s_var) / (|l_rel| + |l_div| + |l_var|)
 *   (S = 0 when all l are 0):
 *   alpha_raw: linear   = clip01(S), alpha_min when all l are 0; a negative l reverses
 *                         a diagnostic;
 *              logistic = sigmoid(bias + gain S);
 *   alpha = clamp(eta alpha_prev + (1 - eta) alpha_raw, alpha_min, alpha_max).
 * With no finite unit: ESS = rho_ess = 0, s_rel = 0, nu = 1.
 *
 * Coefficients per unit (C = cap >= 1, may be +inf: then min(w, C) = w and mis
 * never zeroes):
 *   none 1;  is w;  tis min(w, C);  mis w if 1/C <= w <= C else 0;
 *   fixed 1 + a (min(w, C) - 1), a = fixed_alpha;  ais the same with a = alpha.
 * (1 + a(min(w,C) - 1) is (1 - a) + a min(w,C) written so that w = 1 gives exactly 1:
 * the reference arm, all lw == 0, gets coefficient 1 exactly under every method.)
 * w = exp(lw) is not rescaled for the coefficient. A finite lw whose weight
 * overflows (w = +inf: lw > ~709.78) where the method uses it uncapped (is; mis,
 * fixed, ais, tis with C = inf) makes the unit non-finite: coefficient 0, counted
 * in frac_nonfinite, but its lw stays in the diagnostics (they are scale-free).
 * frac_truncated: units with w > C (tis, fixed, ais); frac_zeroed: units with
 * w outside [1/C, C] (mis); both over all units, finite or not.
 *
 * Data parallelism (diagnostics are over the GLOBAL batch; each rank holds whole
 * completions). Three all-reduces, all on plain arrays of doubles:
 *   1. corr_local_extrema() on the local slice -> corr_extrema (max lw, -min lw,
 *      max A, -min A over finite units); all-reduce with MAX (corr_extrema_merge).
 *   2. corr_local_moments(global extrema) -> corr_moments (sums of lw and lw^2
 *      centred on the midpoint of its range, of se^2); all-reduce with SUM
 *      (corr_moments_merge). They fix m, V, S and so k.
 *   3. corr_local_sums(global extrema, global moments) -> corr_stats (counts and
 *      sums, weights scaled by exp(-max lw~) so nothing overflows, A centred on
 *      the midpoint of its range); all-reduce with SUM (corr_stats_merge). ESS,
 *      nu, the CV of w are invariant to the scale of w, so the scaled sums give
 *      them exactly.
 *   4. corr_finalize(global stats, extrema, moments) -> corr_diag, identical on
 *      every rank.
 *   5. corr_coefficients(diag.alpha) on the local slice.
 * corr_compute_all() does 1-5 on one process. */
#ifndef DLLM_CORRECTIONS_H
#define DLLM_CORRECTIONS_H

#include "kernels/base.h"

typedef enum { CORR_NONE, CORR_IS, CORR_TIS, CORR_MIS, CORR_FIXED, CORR_AIS } corr_method;
typedef enum { CORR_LEVEL_SEQUENCE, CORR_LEVEL_GEO, CORR_LEVEL_TOKEN } corr_level;
typedef enum { AIS_COMBINE_LINEAR, AIS_COMBINE_LOGISTIC } ais_combine;
typedef enum { AIS_NOISE_DEBIAS, AIS_NOISE_NONE } ais_noise;
typedef enum { AIS_POP_INFORMATIVE, AIS_POP_ALL } ais_population;
typedef enum { AIS_VAR_TOTAL, AIS_VAR_EXCESS } ais_variance;

typedef struct {
    ais_combine combine;   /* correction.ais.combine */
    ais_noise noise;       /* correction.ais.noise */
    ais_population population; /* correction.ais.population: which completions the diagnostics see */
    ais_variance variance; /* correction.ais.variance: which nu drives s_var */
    double w_rel;          /* correction.ais.weights.reliability (signed) */
    double w_div;          /* correction.ais.weights.divergence */
    double w_var;          /* correction.ais.weights.variance */
    double tau_delta;      /* correction.ais.tau_delta (nats per token), > 0 */
    double bias;           /* correction.ais.bias (logistic only) */
    double gain;           /* correction.ais.gain (logistic only), > 0 */
    double eta;            /* correction.ais.eta, in [0, 1] */
    double alpha_min;      /* correction.ais.alpha_min */
    double alpha_max;      /* correction.ais.alpha_max */
} ais_cfg;

typedef struct {
    corr_method method;    /* correction.method */
    corr_level level;      /* correction.level */
    double cap;            /* correction.cap, C >= 1, may be +inf */
    double fixed_alpha;    /* correction.fixed_alpha, in [0, 1] */
    ais_cfg ais;
} corr_cfg;

/* docs/METHOD.md defaults: ais, sequence, C 2, fixed_alpha 0.5, linear (1,1,1),
 * noise debias, tau_delta 0.05, bias -4, eta 0, alpha in [0, 1]. */
void corr_cfg_default(corr_cfg *cfg);
/* Range checks; messages name the config key ("correction.cap: ..."). */
int corr_cfg_check(const corr_cfg *cfg, dllm_err *err);

/* Enum names as written in YAML; parse errors name the key and the choices. */
const char *corr_method_name(corr_method m);
const char *corr_level_name(corr_level l);
const char *ais_combine_name(ais_combine c);
const char *ais_noise_name(ais_noise n);
const char *ais_population_name(ais_population p);
const char *ais_variance_name(ais_variance v);
int corr_parse_method(const char *s, corr_method *out, dllm_err *err);
int corr_parse_level(const char *s, corr_level *out, dllm_err *err);
int ais_parse_combine(const char *s, ais_combine *out, dllm_err *err);
int ais_parse_noise(const char *s, ais_noise *out, dllm_err *err);
int ais_parse_population(const char *s, ais_population *out, dllm_err *err);
int ais_parse_variance(const char *s, ais_variance *out, dllm_err *err);

/* Informative completions: member[i] = 1 when completion i's group (G consecutive
 * rows) has rewards that are not all equal, the only groups whose advantages, and so
 * gradients, are non-zero. reward (n_groups * G); member (n_groups * G). */
void corr_informative(const double *reward, int n_groups, int G, uint8_t *member);

/* One (local) batch of completions. */
typedef struct {
    int N;                 /* completions */
    int T;                 /* row stride of d (tokens per row, >= every L_i) */
    const double *log_w;   /* (N) log w_i = l_pi - l_mu; unused (may be NULL) at level token */
    const int *len;        /* (N) completion lengths L_i; needed at level geo, else may be NULL */
    const double *d;       /* (N, T) per-token log-ratios, NaN where not scored; needed at
                              level token, else may be NULL (then delta = k3 = 0) */
    const double *adv;     /* (N) advantages A_i */
    const double *log_w_se;/* (N) Monte Carlo standard error of log w_i, or NULL (exact
                              estimators: no noise to remove) */
    const uint8_t *member; /* (N) 1: completion i is in the diagnostics' population, or
                              NULL: every completion is. Coefficients and the fractions
                              truncated/zeroed/non-finite are over every unit regardless */
} corr_batch;

/* Phase 1: extrema, all-reduced with MAX. Empty entries are -inf. */
enum { CORR_X_LW_MAX, CORR_X_LW_NEGMIN, CORR_X_A_MAX, CORR_X_A_NEGMIN, CORR_EXT_N };
typedef struct { double v[CORR_EXT_N]; } corr_extrema;

/* Phase 2: moments of lw for the noise correction, all-reduced with SUM; over
 * finite units at levels sequence/geo (all zero at level token). c = the midpoint
 * of lw's range (from the global extrema). */
enum {
    CORR_M_N,          /* finite units */
    CORR_M_LW,         /* sum (lw - c) */
    CORR_M_LW2,        /* sum (lw - c)^2 */
    CORR_M_SE2,        /* sum se^2 over those with a finite se */
    CORR_M_SE_N,       /* their number */
    CORR_MOM_N
};
typedef struct { double v[CORR_MOM_N]; } corr_moments;

/* The noise model the moments give: k (the shrink factor of lw around its mean;
 * 1 = none) and frac_var_mc = min(1, S/V) (0 when V = 0 or nothing to measure). */
typedef struct { double k, frac_var_mc; } corr_noise_fit;

/* Phase 3: counts and sums, all-reduced with SUM. w' = exp(k (lw - max lw)),
 * b = A - (max A + min A)/2; sums over finite units unless noted. */
enum {
    CORR_S_UNITS,      /* all units, finite or not */
    CORR_S_FINITE,     /* N: finite units */
    CORR_S_NONFINITE,  /* units with non-finite lw or an overflowing coefficient */
    CORR_S_W,          /* sum w' */
    CORR_S_W2,         /* sum w'^2 */
    CORR_S_WA,         /* sum w' b */
    CORR_S_W2A,        /* sum w'^2 b */
    CORR_S_W2A2,       /* sum (w' b)^2 */
    CORR_S_A,          /* sum b */
    CORR_S_A2,         /* sum b^2 */
    CORR_S_DELTA,      /* sum over completions of their mean |d| */
    CORR_S_DELTA_N,    /* completions with a scored token */
    CORR_S_K3,         /* sum over scored tokens of e^d - 1 - d */
    CORR_S_K3_N,       /* scored tokens */
    CORR_S_TRUNC,      /* units with w > C (tis, fixed, ais) */
    CORR_S_ZEROED,     /* units with w outside [1/C, C] (mis) */
    CORR_S_SE,         /* sum of finite log_w_se over completions with finite lw */
    CORR_S_SE_N,       /* their number */
    CORR_S_MEMBERS,    /* completions in the population, finite or not */
    CORR_S_M,          /* sum m', m' = min(exp(lw~ - L), C exp(-L)), L = min(max lw~, log C) */
    CORR_S_M2,         /* sum m'^2 */
    CORR_S_M2A,        /* sum m'^2 b */
    CORR_S_M2A2,       /* sum (m' b)^2 */
    CORR_S_ABS_LW,     /* sum |log w_i| over completions with finite log w (raw, level-free) */
    CORR_S_ABS_LW_N,   /* their number */
    CORR_STATS_N
};
typedef struct { double v[CORR_STATS_N]; } corr_stats;

typedef struct {
    double n;              /* finite units N */
    double ess, rho_ess, s_rel;
    double delta, k3, s_div;
    double nu, s_var;      /* nu: the form of correction.ais.variance */
    double nu_total;       /* mean(c~^2 a^2) / mean(a^2), c~ the end point's mean-one capped weights */
    double nu_excess;      /* Var(w~ a) / (mean(w~^2) Var(A)) */
    double abs_log_w;      /* mean |log w_i| over the population's completions (nats) */
    double members;        /* completions in the population */
    int empty;             /* 1: the population is empty (no informative completion): the
                              diagnostics are NaN and alpha_raw = alpha_prev */
    double w_cv;           /* coefficient of variation of w: sqrt(mean(w~^2) - 1) */
    double log_mean_w;     /* log mean(w) over finite units (-inf when none) */
    double alpha_raw, alpha;
    double log_w_se;       /* mean Monte Carlo standard error of log w (NaN when not given) */
    double frac_var_mc;    /* min(1, S/V): the share of lw's variance that is estimator noise */
    double noise_k;        /* the shrink factor applied to lw (1: none) */
    double frac_nonfinite, frac_truncated, frac_zeroed; /* over all units */
} corr_diag;

/* Local counts from corr_coefficients (the global fractions are in corr_diag). */
typedef struct { long units, nonfinite, truncated, zeroed; } corr_counts;

int corr_local_extrema(const corr_cfg *cfg, const corr_batch *b, corr_extrema *ext,
                       dllm_err *err);
void corr_extrema_merge(corr_extrema *a, const corr_extrema *b); /* a = max(a, b) */
int corr_local_moments(const corr_cfg *cfg, const corr_batch *b, const corr_extrema *global_ext,
                       corr_moments *m, dllm_err *err);
void corr_moments_merge(corr_moments *a, const corr_moments *b); /* a += b */
/* k and frac_var_mc from the global moments (noise none: k = 1, frac still measured). */
corr_noise_fit corr_fit_noise(const corr_cfg *cfg, const corr_moments *global_mom);
/* global_mom may be NULL: no noise correction (k = 1, frac_var_mc 0). */
int corr_local_sums(const corr_cfg *cfg, const corr_batch *b, const corr_extrema *global_ext,
                    const corr_moments *global_mom, corr_stats *s, dllm_err *err);
void corr_stats_merge(corr_stats *a, const corr_stats *b);     /* a += b */
/* alpha_prev: alpha of the previous batch (0 at the first). */
void corr_finalize(const corr_stats *s, const corr_extrema *global_ext,
                   const corr_moments *global_mom, const corr_cfg *cfg, double alpha_prev,
                   corr_diag *diag);
/* coef (N): per completion at levels sequence/geo (may be NULL at level token).
 * coef_tok (N, T): per token at level token (0 at unscored tokens); not written
 * at the other levels. alpha: diag.alpha, used by ais only. cnt may be NULL. */
int corr_coefficients(const corr_cfg *cfg, double alpha, const corr_batch *b, double *coef,
                      double *coef_tok, corr_counts *cnt, dllm_err *err);
/* Mismatch by denoising step: for every scored token (finite d) committed at
 * step s = step[i,t] in [0, n_steps), sum_abs[s] += |d| and count[s] += 1.
 * Accumulates (+=), so ranks all-reduce both with SUM; the logged value is
 * sum_abs / count. step: (N, T); values outside [0, n_steps) are skipped. */
void corr_step_mismatch(const corr_batch *b, const int *step, int n_steps, double *sum_abs,
                        double *count);

/* Single process: phases 1-5. */
int corr_compute_all(const corr_cfg *cfg, const corr_batch *b, double alpha_prev,
                     corr_diag *diag, double *coef, double *coef_tok, dllm_err *err);

#endif
