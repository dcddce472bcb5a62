/* sweep_summary.h: the state and results of a sweep's runs, from their
 * directories alone (config.yaml, log.h5, ckpt/latest, sweep-exit), and the
 * summary tables.
 *
 * Status of a run directory:
 *   done        ckpt/latest is step-<grpo.steps> and the log holds that many steps;
 *   failed      not done, and the last attempt's exit status (RUN_DIR/sweep-exit,
 *               written by the sweep) was not 0 (with or without a log);
 *   incomplete  a log exists, not done (interrupted or still running);
 *   missing     no log.
 * Columns: steps (logged), final_accuracy and final_accuracy_se (the last
 * evaluation of the run's task), best_accuracy (the best evaluation), collapse_step
 * (see sweep_collapse_step), mean_alpha and mean_rho_ess (means over the logged
 * steps of the finite values), mean_abs_log_w (mean |log w| over the logged
 * completions with a finite log w), mean_abs_log_w_tok (the same of |log w| / L, L
 * the completion's length: the mismatch per token), seconds (the sum of the logged step times,
 * t_rollout + t_likelihood + t_correction + t_update + t_sync + t_log: training
 * time, without evaluations and checkpoints, comparable across interrupted runs).
 * Values that do not exist are NaN (empty in the tables). */
#ifndef DLLM_SWEEP_SUMMARY_H
#define DLLM_SWEEP_SUMMARY_H

#include "src/sweep/sweep_file.h"

#include <stdint.h>

/* Collapse: the first evaluation whose accuracy is below frac times the best
 * accuracy of the evaluations up to it, when every later evaluation stays below
 * that threshold too (it never recovers). The best must be > 0. Returns its
 * step, or -1 when there is none. The sweep uses frac = SWEEP_COLLAPSE_FRAC. */
#define SWEEP_COLLAPSE_FRAC 0.5
int64_t sweep_collapse_step(const double *step, const double *acc, int64_t n, double frac);

typedef enum { RUN_MISSING, RUN_INCOMPLETE, RUN_FAILED, RUN_DONE } sweep_status;

typedef struct {
    sweep_status status;
    int exit_code;              /* of the last attempt (failed) */
    bool resumable;             /* ckpt/latest exists */
    int64_t steps, target_steps;
    double final_accuracy, final_accuracy_se, best_accuracy;
    int64_t collapse_step;      /* -1: none */
    double mean_alpha, mean_rho_ess, mean_abs_log_w, mean_abs_log_w_tok, seconds;
} sweep_result;

const char *sweep_status_name(sweep_status s);
/* Reads RUN_DIR. A missing directory or log is status missing, not an error; a
 * log that cannot be read is an input error naming it. */
int sweep_read_result(const char *run_dir, sweep_result *r, dllm_err *err);
/* Writes DIR/summary.csv and DIR/summary.md: one row per run, then per arm the
 * mean and standard error over its done runs. */
int sweep_write_summary(const sweep_file *sf, const sweep_run *runs, int n_runs,
                        const sweep_result *res, const char *dir, dllm_err *err);

#endif
