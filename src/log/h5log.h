/* h5log.h: the run log of an RL training run (RUN_DIR/log.h5), HDF5 1.10, SWMR.
 *
 * Layout (docs: docs/DESIGN.md "The log"):
 *   /                     attributes config_yaml, version, git_revision, device,
 *                         started, machine (strings), seed (int64)
 *   /steps/step           int64 (T)        one row per RL step
 *   /steps/<metric>       float64 (T)      one dataset per H5LOG_STEP_METRICS entry
 *   /trajectories/...     one row per completion (R rows in all):
 *                         step, prompt_index, group                  int64 (R)
 *                         prompt_len, completion_len                 int32 (R)
 *                         prompt_tokens                              int32 (R, P)
 *                         completion_tokens                          int32 (R, G)
 *                         reward, advantage, l_mu, l_pi, log_w, coef,
 *                         log_w_se                                   float64 (R)
 *                         correct                                    float64 (R)
 *                         token_log_ratio, commit_prob, token_entropy float32 (R, G)
 *                         commit_step                                int16 (R, G)
 *   /mismatch_by_step/step        int64 (M)
 *   /mismatch_by_step/mean_abs_d  float64 (M, S)  mean |d| of the tokens committed
 *                                 at each denoising step (NaN: none committed)
 *   /pass_at_k/step       int64 (M)
 *   /pass_at_k/value      float64 (M, K)   pass@k for k = 1..K (K: the group size)
 *   /eval/<task>/{step int64, accuracy, accuracy_se, reward_mean float64} (E)
 * Padding: token ids and commit_step past a row's length are -1, token_log_ratio
 * and commit_prob are NaN (NaN also marks a token that was not scored); the pad
 * value is the dataset's HDF5 fill value. A metric not computed at a step is NaN.
 *
 * Crash safety: every dataset is created (chunked, unlimited first dimension)
 * before the file switches to SWMR writing; afterwards the writer only extends
 * them. h5log_append_step ends a step: it flushes the file, so a writer killed
 * with SIGKILL leaves a file that an SWMR reader opens with every completed step.
 * Datasets are extended one by one, so a kill in the middle of a step can leave
 * some of them one row longer: readers count the rows every dataset of a group
 * has (h5log_nsteps, h5log_ntrajectories). A file whose writer died is never
 * reopened for writing: h5log_resume copies it into a new file instead. File
 * space is paged (4 KiB pages): a metadata entry under a page never crosses one, and
 * a kill tears a write only between pages, so no entry is left half old, half new.
 * (A power loss can tear inside a page; that is out of this contract.)
 *
 * Call order per RL step: append_trajectories, append_mismatch, append_step
 * (flushes), then append_eval when an eval ran (flushes too). */
#ifndef DLLM_H5LOG_H
#define DLLM_H5LOG_H

#include "kernels/base.h"

#include <stdint.h>

/* The step metrics, in /steps and in the values array of h5log_append_step.
 * Adding a metric is one line here (docs/METHOD.md section 5 defines the AIS ones). */
#define H5LOG_STEP_METRICS(X) \
    X(reward_mean)          /* mean reward over the batch */ \
    X(reward_std)           /* population std of the rewards */ \
    X(accuracy)             /* fraction of completions judged correct */ \
    X(loss)                 /* GRPO loss of the last inner step */ \
    X(policy_kl)            /* KL to the reference policy (beta > 0) */ \
    X(clip_frac)            /* fraction of clipped ratios */ \
    X(grad_norm)            /* global grad norm before clipping */ \
    X(lr)                   /* learning rate used at this step */ \
    X(alpha_raw)            /* AIS mixing coefficient before smoothing */ \
    X(alpha)                /* AIS mixing coefficient used */ \
    X(rho_ess)              /* ESS / N of the importance weights */ \
    X(s_rel)                /* reliability score (N - ESS) / (N - 1) */ \
    X(delta)                /* mean |d| per token, nats */ \
    X(s_div)                /* divergence score 1 - exp(-delta / tau) */ \
    X(nu)                   /* variance amplification */ \
    X(s_var)                /* variance score 1 - 1 / max(nu, 1) */ \
    X(k3)                   /* per-token k3 estimate mean(e^d - 1 - d) */ \
    X(log_w_mc_se)          /* Monte Carlo standard error of log w */ \
    X(frac_truncated)       /* fraction of c_i truncated (tis/ais) */ \
    X(frac_zeroed)          /* fraction of c_i zeroed (mis) */ \
    X(frac_nonfinite)       /* non-finite log w or coefficient, plus dropped loss terms */ \
    X(frac_zero_var_groups) /* fraction of groups with zero reward variance */ \
    X(frac_masked_left)     /* generated positions still masked after the rollout */ \
    X(t_rollout)            /* seconds */ \
    X(t_likelihood)         /* l_mu, l_pi (and l_old, reference) estimates */ \
    X(t_correction)         /* correction coefficients and AIS diagnostics */ \
    X(t_update)             /* seconds, each t_*: H5LOG_DATASET_DOCS */ \
    X(t_sync) \
    X(t_log) \
    X(tokens_per_s)         /* completion tokens per second of the step */ \
    X(frac_var_mc)          /* share of log w's variance that is estimator noise */ \
    X(rho_ess_prec)         /* ESS / N of w_prec = exp(l_pi - l_mu_exact) */ \
    X(rho_ess_cache)        /* ESS / N of w_cache = exp(l_mu_exact - l_mu) */ \
    X(delta_prec)           /* mean |d_prec| per token, nats */ \
    X(delta_cache)          /* mean |d_cache| per token, nats */ \
    X(nu_total)             /* variance amplification, total form */ \
    X(nu_excess)            /* variance amplification, excess form */ \
    X(diag_empty)           /* 1: no completion in the diagnostics' population */ \
    X(frac_informative)     /* completions in groups with unequal rewards */ \
    X(rho_ess_informative)  /* rho_ess, delta, mean |log w| on the informative completions */ \
    X(delta_informative) \
    X(abs_log_w_informative) \
    X(rho_ess_all)          /* the same on every completion */ \
    X(delta_all) \
    X(abs_log_w_all) \
    X(log_w_q05)            /* quantiles of log w over the batch */ \
    X(log_w_q50) \
    X(log_w_q95) \
    X(entropy)              /* trainer token entropy on the completions */ \
    X(completion_len)       /* mean completion length to EOS */ \
    X(grad_cosine)          /* log.grad_cosine: corrected vs uncorrected gradient */ \
    X(grad_norm_ratio) \
    X(frac_dropped)         /* completions left out by grpo.random_drop */

#define H5LOG_METRIC_ENUM_(name) H5LOG_METRIC_##name,
enum { H5LOG_STEP_METRICS(H5LOG_METRIC_ENUM_) H5LOG_N_METRICS };
#undef H5LOG_METRIC_ENUM_
/* Index of a metric in the values array: v[H5LOG_M(alpha)] = 0.3; */
#define H5LOG_M(name) H5LOG_METRIC_##name


/* units and description of every dataset (HDF5 attributes "units" and
 * "description" on each): group, dataset name, units, meaning. Units: "1" a
 * pure number (fraction, ratio, count of a kind named in the description),
 * "s" seconds, "nats" natural-log probabilities or their differences,
 * "token id" ids of the model's tokenizer (tokenizer.json of the run). A
 * dataset without a row here is not created (h5log_create fails), so a metric
 * added above needs its row below. /eval/<task>/... rows use the group "eval". */
#define H5LOG_DATASET_DOCS(X) \
    X("steps", "step", "1", "RL step, 1-based") \
    X("steps", "reward_mean", "1", "mean reward over the batch") \
    X("steps", "reward_std", "1", "population standard deviation of the batch's rewards") \
    X("steps", "accuracy", "1", "fraction of completions judged correct") \
    X("steps", "loss", "1", "GRPO loss of the last inner step") \
    X("steps", "policy_kl", "nats", "KL estimate to the reference policy; NaN when grpo.beta = 0 (no reference)") \
    X("steps", "clip_frac", "1", "fraction of clipped ratios") \
    X("steps", "grad_norm", "1", "global gradient norm before clipping") \
    X("steps", "lr", "1", "learning rate used at this step") \
    X("steps", "alpha_raw", "1", "AIS mixing coefficient before smoothing; NaN unless correction.method = ais") \
    X("steps", "alpha", "1", "AIS mixing coefficient used; NaN unless correction.method = ais") \
    X("steps", "rho_ess", "1", "effective sample size / N of the importance weights") \
    X("steps", "s_rel", "1", "reliability score (N - ESS) / (N - 1)") \
    X("steps", "delta", "nats", "mean |d| per token, d the trainer-minus-rollout log-likelihood ratio") \
    X("steps", "s_div", "1", "divergence score 1 - exp(-delta / tau)") \
    X("steps", "nu", "1", "variance amplification of the importance weights") \
    X("steps", "s_var", "1", "variance score 1 - 1 / max(nu, 1)") \
    X("steps", "k3", "nats", "per-token k3 estimate mean(e^d - 1 - d)") \
    X("steps", "log_w_mc_se", "nats", "Monte Carlo standard error of log w") \
    X("steps", "frac_truncated", "1", "fraction of coefficients truncated (tis, ais)") \
    X("steps", "frac_zeroed", "1", "fraction of coefficients zeroed (mis)") \
    X("steps", "frac_nonfinite", "1", "fraction of non-finite log w or coefficients, plus dropped loss terms") \
    X("steps", "frac_zero_var_groups", "1", "fraction of groups whose rewards are all equal (no advantage)") \
    X("steps", "frac_masked_left", "1", "fraction of generated positions still masked after the rollout") \
    X("steps", "t_rollout", "s", "wall time of the rollouts") \
    X("steps", "t_likelihood", "s", "wall time of the likelihood estimates (l_mu, l_pi, old, reference)") \
    X("steps", "t_correction", "s", "wall time of the correction coefficients and AIS diagnostics") \
    X("steps", "t_update", "s", "wall time of the policy updates (inner steps)") \
    X("steps", "t_sync", "s", "wall time of copying the weights to the rollout copy") \
    X("steps", "t_log", "s", "wall time of writing the previous step's log rows") \
    X("steps", "tokens_per_s", "1/s", "completion tokens generated per second of the step") \
    X("steps", "frac_var_mc", "1", "share of log w's variance that is estimator noise") \
    X("steps", "rho_ess_prec", "1", "ESS / N of the precision part of the weight, w_prec = exp(l_pi - l_mu_exact), raw, over every completion") \
    X("steps", "rho_ess_cache", "1", "ESS / N of the cache part of the weight, w_cache = exp(l_mu_exact - l_mu), raw, over every completion (1: no cache)") \
    X("steps", "delta_prec", "nats", "mean over completions of the mean |tok_pi - tok_mu_exact| over scored tokens") \
    X("steps", "delta_cache", "nats", "mean over completions of the mean |tok_mu_exact - tok_mu| over scored tokens (0: no cache)") \
    X("steps", "nu_total", "1", "variance amplification mean(c~^2 a^2) / mean(a^2), c~ the capped weights at mean one (METHOD.md 5)") \
    X("steps", "nu_excess", "1", "variance amplification Var(w~ a) / (mean(w~^2) Var(A)): the part ESS does not explain") \
    X("steps", "diag_empty", "1", "1 when the diagnostics' population has no completion (no informative group): diagnostics NaN, alpha kept") \
    X("steps", "frac_informative", "1", "fraction of completions in groups whose rewards are not all equal") \
    X("steps", "rho_ess_informative", "1", "ESS / N of the importance weights over the informative completions") \
    X("steps", "delta_informative", "nats", "mean |d| per token over the informative completions") \
    X("steps", "abs_log_w_informative", "nats", "mean |log w| over the informative completions") \
    X("steps", "rho_ess_all", "1", "ESS / N of the importance weights over every completion") \
    X("steps", "delta_all", "nats", "mean |d| per token over every completion") \
    X("steps", "abs_log_w_all", "nats", "mean |log w| over every completion") \
    X("steps", "log_w_q05", "nats", "5 % quantile of log w over the batch's completions (linear interpolation)") \
    X("steps", "log_w_q50", "nats", "median of log w over the batch's completions") \
    X("steps", "log_w_q95", "nats", "95 % quantile of log w over the batch's completions") \
    X("steps", "entropy", "nats", "trainer token entropy on the completions: mean over scored tokens of trajectories/token_entropy") \
    X("steps", "completion_len", "1", "mean completion length in tokens, up to and including the first EOS") \
    X("steps", "grad_cosine", "1", "cosine between the corrected and uncorrected loss gradients (first inner step); NaN unless log.grad_cosine") \
    X("steps", "grad_norm_ratio", "1", "norm of the corrected over the uncorrected loss gradient (first inner step); NaN unless log.grad_cosine") \
    X("steps", "frac_dropped", "1", "fraction of the batch's completions whose coefficient grpo.random_drop set to 0 (0 when the key is 0)") \
    X("trajectories", "step", "1", "RL step of the completion") \
    X("trajectories", "prompt_index", "1", "index of the prompt in the training items") \
    X("trajectories", "group", "1", "group (prompt) of the completion within its step") \
    X("trajectories", "prompt_len", "1", "prompt length in tokens") \
    X("trajectories", "completion_len", "1", "completion length in tokens, up to the first EOS") \
    X("trajectories", "prompt_tokens", "token id", "prompt ids, -1 past prompt_len") \
    X("trajectories", "completion_tokens", "token id", "completion ids, -1 past completion_len") \
    X("trajectories", "reward", "1", "reward of the completion") \
    X("trajectories", "advantage", "1", "GRPO advantage of the completion") \
    X("trajectories", "l_mu", "nats", "log-likelihood under the rollout policy") \
    X("trajectories", "l_pi", "nats", "log-likelihood under the trainer policy") \
    X("trajectories", "log_w", "nats", "log importance weight l_pi - l_mu") \
    X("trajectories", "l_mu_exact", "nats", "log-likelihood under the rollout-precision model scored exactly (no cache); l_mu unless the sampler is cached or parallel (docs/METHOD.md section 5)") \
    X("trajectories", "coef", "1", "correction coefficient applied to the completion's loss (level token: the mean of its scored tokens' coefficients)") \
    X("trajectories", "log_w_se", "nats", "Monte Carlo standard error of log_w (elbo); 0 for a deterministic estimator") \
    X("trajectories", "token_log_ratio", "nats", "per-token log ratio trainer minus rollout; NaN not scored or padding") \
    X("trajectories", "commit_step", "1", "denoising step that committed the token, -1 padding") \
    X("trajectories", "commit_prob", "1", "probability of the token when committed; NaN padding") \
    X("trajectories", "correct", "1", "1 when the task judged the completion correct, else 0") \
    X("trajectories", "token_entropy", "nats", "trainer entropy of the predicted distribution at the token, in the weight estimator's contexts (mean over them); NaN not scored or padding") \
    X("pass_at_k", "step", "1", "RL step of the row") \
    X("pass_at_k", "value", "1", "pass@k for k = 1..G: mean over groups of 1 - C(G-c, k) / C(G, k), c correct of G") \
    X("mismatch_by_step", "step", "1", "RL step of the row") \
    X("mismatch_by_step", "mean_abs_d", "nats", "mean |d| of the tokens committed at each denoising step; NaN none committed") \
    X("eval", "step", "1", "RL step the evaluation ran after (0: before training)") \
    X("eval", "accuracy", "1", "fraction of evaluation items answered correctly (greedy)") \
    X("eval", "accuracy_se", "1", "binomial standard error of accuracy") \
    X("eval", "reward_mean", "1", "mean reward over the evaluation items")

/* The units and description of dataset `name` of `group` ("eval" for every
 * /eval/<task>); 0, or -1 when the table has no such row. */
int h5log_dataset_doc(const char *group, const char *name, const char **units,
                      const char **description);

/* Name of metric i (0 <= i < H5LOG_N_METRICS), NULL outside. */
const char *h5log_metric_name(int i);
/* Index of a metric name, or -1. */
int h5log_metric_index(const char *name);
/* Fills values[H5LOG_N_METRICS] with NaN (metrics not computed stay NaN). */
void h5log_values_nan(double *values);

/* Root attributes. Strings may be NULL (written as ""). */
typedef struct {
    const char *config_yaml;   /* the effective config */
    const char *version;       /* PACKAGE_VERSION */
    const char *git_revision;
    const char *device;        /* cpu | cuda */
    const char *started;       /* ISO 8601 time of the first start */
    const char *machine;       /* the CPU and its kernels' paths at the first start
                                  (op_cpu_paths); "" in logs written before it */
    int64_t seed;
} h5log_meta;

/* Fixed sizes of the log, chosen at creation. */
typedef struct {
    int max_prompt;             /* P >= 1: prompt_tokens row width */
    int max_completion;         /* G >= 1: per-token row width */
    int denoise_steps;          /* S >= 1: /mismatch_by_step width (AR: 1, unused) */
    int group_size;             /* G: /pass_at_k width; 0: no /pass_at_k */
    int n_eval_tasks;
    const char *const *eval_tasks; /* (n_eval_tasks) names: no '/', not "." */
} h5log_dims;

/* One step's completions. Token arrays are row-major with a stride; only the
 * first *_len[i] entries of row i are read, the rest is padded. A NULL
 * per-completion array is logged as NaN (float) or -1 (int); a NULL per-token
 * array as its pad. */
typedef struct {
    int n;                            /* completions in the batch */
    int64_t step;
    const int64_t *prompt_index;      /* (n) index of the prompt in the dataset */
    const int64_t *group;             /* (n) group of the completion in the step */
    const int32_t *prompt_tokens;     /* (n, prompt_stride) */
    const int32_t *prompt_len;        /* (n) <= P */
    int prompt_stride;
    const int32_t *completion_tokens; /* (n, completion_stride) */
    const int32_t *completion_len;    /* (n) <= G */
    int completion_stride;
    const double *reward, *advantage; /* (n) */
    const double *l_mu, *l_pi, *log_w, *coef; /* (n) */
    const double *log_w_se;           /* (n) Monte Carlo standard error of log_w */
    const double *l_mu_exact;         /* (n) the rollout precision scored exactly */
    const float *token_log_ratio;     /* (n, completion_stride), NaN: not scored */
    const int16_t *commit_step;       /* (n, completion_stride) */
    const float *commit_prob;         /* (n, completion_stride) */
    const double *correct;            /* (n) 1 correct, 0 not */
    const float *token_entropy;       /* (n, completion_stride), NaN: not scored */
} h5log_traj_batch;

/* The /trajectories columns, in file creation order: one table drives the
 * writer (h5log_append_trajectories) and anything that moves a batch between
 * processes (the rank gather of the RL loop packs rows column by column with
 * it). Adding a column is one line in h5log.c's table plus its pointer here. */
typedef enum { H5LOG_I64, H5LOG_I32, H5LOG_I16, H5LOG_F64, H5LOG_F32 } h5log_kind;
/* Row width: one value; a prompt row (max_prompt wide, prompt_len/prompt_stride);
 * a completion row (max_completion wide, completion_len/completion_stride);
 * the batch's scalar `step`, the same in every row. */
typedef enum { H5LOG_W1, H5LOG_WP, H5LOG_WG, H5LOG_WSTEP } h5log_width;
typedef struct {
    const char *name;      /* dataset under /trajectories */
    h5log_kind kind;
    h5log_width width;
    size_t off;            /* offsetof(h5log_traj_batch, its array), or of step */
} h5log_traj_col;
enum { H5LOG_N_TRAJ = 20 };
extern const h5log_traj_col h5log_traj_cols[H5LOG_N_TRAJ];
size_t h5log_kind_size(h5log_kind k);
/* Column c's array in b (NULL for H5LOG_WSTEP and absent arrays). */
const void *h5log_traj_col_data(const h5log_traj_batch *b, int c);

typedef struct h5log h5log;

/* Creates (truncates) path, writes the attributes, creates every dataset and
 * switches to SWMR writing. */
int h5log_create(h5log **out, const char *path, const h5log_meta *meta,
                 const h5log_dims *dims, dllm_err *err);

/* Resume: copies every row with step <= last_step (steps, trajectories,
 * mismatch, evals) and the attributes of path into path.tmp, renames it over
 * path and reopens it for SWMR appending. Input error when the log does not
 * reach last_step (a gap) or cannot be read. The old file is only read. A log cut
 * short by a write that failed (a full disk, a file-size limit: the file is
 * shorter than its superblock records) is read up to the rows its chunks written
 * in full hold, so a run resumes once space returns. */
int h5log_resume(h5log **out, const char *path, int64_t last_step, dllm_err *err);

/* values: (H5LOG_N_METRICS) in table order, NaN where not computed. Flushes. */
int h5log_append_step(h5log *log, int64_t step, const double *values, dllm_err *err);
/* Same, from parallel (name, value) arrays; unknown names are an error. */
int h5log_append_step_named(h5log *log, int64_t step, int n, const char *const *names,
                            const double *values, dllm_err *err);
int h5log_append_trajectories(h5log *log, const h5log_traj_batch *b, dllm_err *err);
/* mean_abs_d: (S) */
int h5log_append_mismatch(h5log *log, int64_t step, const double *mean_abs_d, dllm_err *err);
/* pass_at_k: (group_size); nothing is written when the log has no /pass_at_k. */
int h5log_append_pass_at_k(h5log *log, int64_t step, const double *pass_at_k, dllm_err *err);
/* Flushes. Unknown task is an error. */
int h5log_append_eval(h5log *log, const char *task, int64_t step, double accuracy,
                      double accuracy_se, double reward_mean, dllm_err *err);
int h5log_flush(h5log *log, dllm_err *err);
/* Closes (flushing) and frees; NULL is fine. Returns nonzero on a failed close. */
int h5log_close(h5log *log);

/* Opens for reading with SWMR read (works while a writer runs, and after the
 * writer was killed). Input error naming path, within seconds, for a missing,
 * damaged or truncated file or one that lacks the layout above. */
int h5log_open_read(h5log **out, const char *path, dllm_err *err);

/* Attributes and sizes (read from the file when opened for reading). */
const h5log_meta *h5log_get_meta(const h5log *log);
const h5log_dims *h5log_get_dims(const h5log *log);
const char *h5log_path(const h5log *log);
/* Complete steps: rows present in every /steps dataset. */
int64_t h5log_nsteps(h5log *log);
/* Rows present in every /trajectories dataset. */
int64_t h5log_ntrajectories(h5log *log);

/* Reads the first h5log_nsteps values of /steps/<metric> (a float64 metric or
 * "step", converted) into a malloc'd array. Input error for a missing metric. */
int h5log_read_metric(h5log *log, const char *metric, double **out, int64_t *n,
                      dllm_err *err);
/* Reads a 1-D dataset (any numeric type, converted to double), e.g.
 * "trajectories/log_w" or "eval/gsm8k/accuracy", up to the number of rows that
 * every dataset of its group has (complete rows only). */
int h5log_read_column(h5log *log, const char *dset, double **out, int64_t *n,
                      dllm_err *err);

#endif
