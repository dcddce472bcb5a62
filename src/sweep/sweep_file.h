/* sweep_file.h: the sweep files of `dllm-rl sweep` -- a base config, overrides for
 * every run, named arms and a grid, expanded into runs.
 *
 *   name: fp8-arms                 # runs go to LOG_DIR/NAME/RUN
 *   base: ../quickstart.yaml       # relative to the sweep file
 *   set: {grpo.steps: 200}         # overrides for every run
 *   arms:                          # optional named override sets
 *     - {name: reference, rollout.precision: trainer, correction.method: none}
 *     - {name: fp8-ais,   rollout.precision: fp8, correction.method: ais}
 *   grid:                          # cartesian product, crossed with the arms
 *     seed: [1, 2, 3]
 *
 * Override keys are config key paths, written dotted or as nested maps (`grpo:
 * {steps: 200}`); values are YAML scalars or flow sequences, checked against the
 * config schema at load time. Every error is `file:line:col: message` with the line
 * echoed, like the config reader's. Names (the sweep's, the arms') use letters,
 * digits and . _ + - = only.
 *
 * Runs: every arm (one unnamed arm when there are none) crossed with the grid
 * (its keys in file order, the last varying fastest). A run's overrides are `set`,
 * then the arm's, then its grid values (later ones win). Its name is the arm's
 * name, then `key=value` per grid key, joined by `_` (characters other than
 * letters, digits and . + - = in a value become `_`); `run` if both are empty. */
#ifndef DLLM_SWEEP_FILE_H
#define DLLM_SWEEP_FILE_H

#include "kernels/base.h"

typedef struct {
    char *key;       /* config key path */
    char *value;     /* YAML text: a scalar, or a flow sequence "[a, b]" */
    int line, col;   /* 1-based position of the value in the sweep file */
} sweep_set;

typedef struct {
    char *name;
    sweep_set *sets;
    int n_sets;
} sweep_arm;

typedef struct {
    char *key;
    sweep_set *values; /* the key repeated, one value each */
    int n_values;
} sweep_axis;

typedef struct {
    char *path;        /* the sweep file as given */
    char *name;
    char *base;        /* the base config, resolved against the sweep file's directory */
    char *log_dir;     /* the base config's log.dir after `set`: runs go to log_dir/name */
    sweep_set *sets;
    int n_sets;
    sweep_arm *arms;   /* n_arms >= 1; a file without arms has one with name "" */
    int n_arms;
    sweep_axis *grid;
    int n_grid;
} sweep_file;

typedef struct {
    char *name;        /* directory under log_dir/name */
    int arm;           /* index into arms */
    int *grid_index;   /* (n_grid) value index per grid key */
    char **sets;       /* "key=value" overrides in order, for `train --set` */
    int n_sets;
} sweep_run;

/* Reads, validates and expands nothing yet. Input errors name file:line:col. */
int sweep_file_load(sweep_file *sf, const char *path, dllm_err *err);
void sweep_file_free(sweep_file *sf);
/* The runs, in order (arms outer, grid inner); each checked against the config
 * schema on top of the base (errors point at the offending value). */
int sweep_expand(const sweep_file *sf, sweep_run **runs, int *n_runs, dllm_err *err);
void sweep_runs_free(sweep_run *runs, int n_runs);

#endif
