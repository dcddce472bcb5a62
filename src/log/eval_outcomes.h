/* eval_outcomes.h: per-item evaluation outcomes on disk, and paired comparisons.
 *
 * Every evaluation of `train` writes RUN_DIR/eval/TASK-step-N.txt:
 *   # dllm-rl eval outcomes: task TASK, step N, n COUNT, items HASH
 *   then COUNT lines, each 0 or 1 (the item was solved), in eval-set order.
 * HASH (16 hex digits) names the eval set (FNV-1a of the items' questions), so two
 * files are compared only when they score the same items. A file is written to a
 * temporary name and renamed: one that exists is complete.
 *
 * Two evaluations of the same items are compared item by item: with d_i = a_i - b_i,
 * the difference is mean(d) and its standard error sd(d) / sqrt(n). Items both get
 * right (or wrong) cancel, so this is far tighter than the two accuracies' separate
 * standard errors. */
#ifndef DLLM_EVAL_OUTCOMES_H
#define DLLM_EVAL_OUTCOMES_H

#include "kernels/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char task[64];
    long long step;
    size_t n;
    uint64_t items;     /* the eval set's hash */
    uint8_t *ok;        /* (n) 0/1 */
} eval_outcomes;

typedef struct {
    double a, b;        /* accuracies */
    double diff, se;    /* mean(a_i - b_i) and its standard error */
    size_t only_a, only_b; /* items one side solved and the other did not */
} eval_paired;

int eval_outcomes_write(const char *run_dir, const char *task, long long step, const uint8_t *ok,
                        size_t n, uint64_t items, dllm_err *err);
/* The same content at an explicit path (`dllm-rl eval --out`). */
int eval_outcomes_write_file(const char *path, const char *task, long long step,
                             const uint8_t *ok, size_t n, uint64_t items, dllm_err *err);
int eval_outcomes_read(const char *path, eval_outcomes *o, dllm_err *err);
void eval_outcomes_free(eval_outcomes *o);
/* The path of RUN_DIR's outcome file of TASK with the lowest (latest = false) or
 * highest step; 1 when there is none, 0 when found. */
int eval_outcomes_find(const char *run_dir, const char *task, bool latest, char *path, size_t cap);
/* a against b; an input error unless both score the same items. */
int eval_outcomes_pair(const eval_outcomes *a, const eval_outcomes *b, eval_paired *p,
                       dllm_err *err);

#endif
