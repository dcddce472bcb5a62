/* rl_log.h: an RL run's HDF5 log (h5log.h) as the training loop writes it.
 *
 * The trajectories of a step are the batch of every rank: each rank lays its
 * completions out as h5log_traj_batch rows, packs them row by row with the
 * column table h5log_traj_cols, rank 0 gathers the bytes and unpacks them
 * with the same table, and h5log writes them with it again: one description
 * of the columns for the gather and for the file. */
#ifndef DLLM_RL_LOG_H
#define DLLM_RL_LOG_H

#include "src/rl/rl.h"

/* Creates RUN_DIR log at path (rank 0 only; other ranks return 0). */
int rl_log_create(rl_run *run, const char *path, const char *git_revision, const char *started,
                  dllm_err *err);

/* The evaluation sets of the run as the log names them: the task's name, or with
 * eval.gen_lengths one per length, "<task>@<length>" (d1's protocol). Returns the
 * count (>= 1); names[i] holds at most RL_EVAL_NAME_MAX bytes. */
enum { RL_EVAL_NAME_MAX = 96 };
int rl_eval_names(const rl_run *run, char names[][RL_EVAL_NAME_MAX]);

/* Logs step `step`: its trajectories (with cfg log.trajectories), its mismatch
 * by denoising step and the metrics (m[t_log] is set to the time spent here
 * before the metrics are written). Collective: every rank calls it. */
int rl_log_step(rl_run *run, const rl_batch *b, int64_t step, double *m, dllm_err *err);

/* The per-row byte size of a packed trajectory record for prompt width P and
 * completion width G, and the packing itself (exposed for the tests). */
size_t rl_traj_record_size(int P, int G);
/* Packs b (strides P and G) into n records; *len receives the byte count. */
void *rl_traj_pack(const h5log_traj_batch *b, int P, int G, size_t *len);
/* Unpacks len bytes of records into out (arrays malloc'd; rl_traj_free); step is
 * out's step. */
void rl_traj_unpack(const void *buf, size_t len, int P, int G, int64_t step, h5log_traj_batch *out);
void rl_traj_free(h5log_traj_batch *b);

#endif
