/* registry.h: the reasoning tasks RL trains and evaluates on.
 *
 * A task turns a data source (a JSONL/CSV file, or a seeded procedural
 * generator) into items {question, reference answer, metadata}, formats an item
 * into the instruction the model sees (the d1 prompts: reasoning in
 * <reasoning>...</reasoning>, final answer in <answer>...</answer>), and scores
 * a completion with a reward (a double, task-specific scale) and an accuracy
 * (0 or 1).
 *
 *   const dllm_task *t = dllm_task_find("gsm8k");
 *   dllm_task_source src = {.path = "train.jsonl", .seed = 1};
 *   dllm_task_items items;
 *   if (dllm_task_load(t, &src, &items, &err)) ... // "train.jsonl:7: ..."
 *   char *p = t->format(&items.items[i]);          // prompt text, free() it
 *   double r = t->reward(&items.items[i], completion, strlen(completion));
 *   dllm_task_items_free(&items);
 *
 * Rewards (see each task's file for the exact definitions):
 *   gsm8k     d1's sum: correctness 2.0 + strict format 0.5 + soft format 0.5
 *             + integer answer 0.5 + XML count (up to 0.5)          in [.., 4.0]
 *   math500   1 if the last \boxed{} is equivalent to the reference, else 0
 *   countdown 1.0 correct, 0.1 well-formed but wrong, 0 otherwise
 *             (partial: a wrong value from the right numbers earns up to 0.8 by its
 *             distance to the target)
 *   sudoku    fraction of the originally empty cells filled correctly (also its
 *             partial reward)
 * Every reward and accuracy function is total: any bytes in, a number out. */
#ifndef DLLM_TASKS_REGISTRY_H
#define DLLM_TASKS_REGISTRY_H

#include "kernels/base.h"

#include <stddef.h>
#include <stdint.h>

#define DLLM_TASK_MAX_NUMS 6

typedef struct {
    char *question;  /* problem text (countdown/sudoku: a short rendering of the puzzle) */
    char *answer;    /* reference: gsm8k number, MATH LaTeX, countdown target, sudoku solution */
    /* metadata */
    int64_t nums[DLLM_TASK_MAX_NUMS]; /* countdown: the numbers to use, each exactly once */
    int n_nums;
    int64_t target;                   /* countdown: the value to reach */
    char puzzle[17];                  /* sudoku: 16 digits, row-major, '0' = blank */
    char solution[17];                /* sudoku: 16 digits 1..4 */
    char *reference_json;             /* custom: the reference as the file's JSON value */
} dllm_task_item;

typedef struct {
    dllm_task_item *items; /* (n) */
    size_t n;
} dllm_task_items;

/* Where items come from. path != NULL: a dataset file. path == NULL: the task's
 * generator (countdown, sudoku) makes n items from seed. */
typedef struct {
    const char *path;
    uint64_t seed;
    size_t n;          /* generator: number of items */
    int n_numbers;     /* countdown generator: 3 or 4 (0: 3, as d1) */
    int max_blanks;    /* sudoku generator: most blanks per puzzle (0: 10) */
} dllm_task_source;

typedef struct dllm_task dllm_task;
struct dllm_task {
    const char *name;
    const char *description;
    int can_generate; /* 1 when a source without a path is allowed */
    /* Fills *it from one JSON object (a dataset line, or a grading line that
     * carries the reference fields). need_question = 0 for grading. On bad input
     * returns DLLM_EXIT_INPUT with err->msg saying what is wrong (no file:line:
     * the caller adds it). */
    int (*from_json)(const void *json_object, int need_question, dllm_task_item *it, dllm_err *err);
    /* Generator: item i of the stream seeded by src->seed. */
    int (*generate)(const dllm_task_source *src, size_t i, dllm_task_item *it, dllm_err *err);
    /* The prompt the model sees (user message, before any chat template). malloc'd. */
    char *(*format)(const dllm_task_item *it);
    double (*reward)(const dllm_task_item *it, const char *completion, size_t len);
    int (*correct)(const dllm_task_item *it, const char *completion, size_t len);
    /* A graded reward in [0, 1] (task.reward.kind partial), 1 exactly when correct;
     * NULL where the task has none. */
    double (*partial)(const dllm_task_item *it, const char *completion, size_t len);
};

/* NULL when no task has that name. */
const dllm_task *dllm_task_find(const char *name);
/* All tasks, in a fixed order; *n receives the count. */
const dllm_task *const *dllm_task_all(size_t *n);

/* Loads src->path (JSONL; sudoku also CSV) or runs the generator. Errors name
 * "FILE:LINE: ...". On failure *out is empty. */
int dllm_task_load(const dllm_task *t, const dllm_task_source *src, dllm_task_items *out, dllm_err *err);
/* The same from a buffer already in memory; name is used in error messages. */
int dllm_task_load_buffer(const dllm_task *t, const char *name, const char *buf, size_t len,
                          dllm_task_items *out, dllm_err *err);
void dllm_task_items_free(dllm_task_items *items);
/* The JSONL reader behind dllm_task_load, for a task whose items need more than
 * from_json's arguments: item(ctx, object, it, err) fills one item from each
 * non-blank line's object; errors become "NAME:LINE: ...". No items is an error. */
typedef int (*dllm_task_item_fn)(void *ctx, const void *json_object, dllm_task_item *it,
                                 dllm_err *err);
int dllm_task_load_jsonl(const char *name, const char *buf, size_t len, dllm_task_item_fn item,
                         void *ctx, dllm_task_items *out, dllm_err *err);
void dllm_task_item_free(dllm_task_item *it);

/* Deterministic split: a seeded permutation of 0..n-1 (dllm_rng, purpose
 * DLLM_RNG_TASK); its first n_eval entries are the eval split, the rest the
 * train split, n_eval = round(eval_frac * n). Each index array is malloc'd, in
 * increasing order within a split so that files stay readable in order. */
void dllm_task_split(size_t n, double eval_frac, uint64_t seed, size_t **train_idx, size_t *n_train,
                     size_t **eval_idx, size_t *n_eval);
/* k distinct indices of 0..n-1 (k <= n) in a seeded random order: prompt sampling. */
void dllm_task_sample_indices(size_t n, size_t k, uint64_t seed, uint64_t step, size_t *idx);

/* Task objects, defined in their own files. */
extern const dllm_task dllm_task_gsm8k;
extern const dllm_task dllm_task_math500;
extern const dllm_task dllm_task_countdown;
extern const dllm_task dllm_task_sudoku;

#endif
