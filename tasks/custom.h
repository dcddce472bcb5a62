/* custom.h: a task of the user's own (`task.name: custom`), made without
 * recompiling: items from a JSONL file whose prompt and reference keys the config
 * names (or from a plugin's generator), rewards from a reward program
 * (reward_program.h) or a C plugin (include/dllm_task_plugin.h).
 *
 *   dllm_custom *c;
 *   dllm_custom_cfg cc = {.prompt_field = "question", .reference_field = "answer",
 *                         .command = "python3 reward.py", .timeout_s = 30};
 *   dllm_custom_open(&c, &cc, &err);               // exit 2: cannot start / load
 *   dllm_custom_load(c, &src, &items, &err);       // "data.jsonl:7: missing key ..."
 *   dllm_custom_score(c, &items.items[i], text, len, &reward, &correct, &err);
 *   dllm_custom_close(c);
 *
 * An item's question is the prompt field's text and its answer the reference
 * field's (a string's text; a number, list or object as compact JSON); the
 * program receives the reference as the JSON value the file holds. */
#ifndef DLLM_TASKS_CUSTOM_H
#define DLLM_TASKS_CUSTOM_H

#include "tasks/registry.h"

typedef struct {
    const char *prompt_field;    /* JSONL key of the prompt */
    const char *reference_field; /* JSONL key of the reference */
    const char *command;         /* the reward program, or "" */
    double timeout_s;            /* the program's time per answer */
    const char *plugin;          /* path of the plugin, or "" */
} dllm_custom_cfg;

typedef struct dllm_custom dllm_custom;

/* The descriptor a run names the task by ("custom"); its functions are NULL: a
 * custom task is used through the calls below. */
extern const dllm_task dllm_task_custom;

/* Starts the reward program or loads the plugin (exactly one of them is set). */
int dllm_custom_open(dllm_custom **out, const dllm_custom_cfg *cfg, dllm_err *err);
/* Can items come without a file (the plugin generates)? */
bool dllm_custom_can_generate(const dllm_custom *c);
/* src->path's JSONL lines, or src->n generated items of src->seed. */
int dllm_custom_load(dllm_custom *c, const dllm_task_source *src, dllm_task_items *out,
                     dllm_err *err);
/* The text the model sees under task.format d1: the plugin's format when it has one,
 * else the prompt as it is. malloc'd; NULL with err set when the plugin fails. */
char *dllm_custom_format(dllm_custom *c, const dllm_task_item *it, dllm_err *err);
/* The reward of a completion and whether it is correct (the answer's "correct",
 * else reward > 0). An internal error (exit 1) naming the program or plugin. */
int dllm_custom_score(dllm_custom *c, const dllm_task_item *it, const char *completion,
                      size_t len, double *reward, int *correct, dllm_err *err);
void dllm_custom_close(dllm_custom *c);

/* s[0..n) with every byte that is not part of valid UTF-8 replaced by U+FFFD (JSON
 * strings must be UTF-8; a decoded completion may end inside a character). malloc'd. */
char *dllm_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif
