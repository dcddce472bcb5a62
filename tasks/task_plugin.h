/* task_plugin.h: loading a task plugin (include/dllm_task_plugin.h) and calling it
 * with dllm-rl's errors: the plugin's name and its own message. */
#ifndef DLLM_TASKS_TASK_PLUGIN_H
#define DLLM_TASKS_TASK_PLUGIN_H

#include "include/dllm_task_plugin.h"
#include "kernels/base.h"

typedef struct dllm_plugin dllm_plugin;

/* dlopens path, checks the ABI version and the required functions, runs init. An
 * input error naming the file on any failure. */
int dllm_plugin_open(dllm_plugin **out, const char *path, dllm_err *err);
/* err codes of the calls below: `code` (DLLM_EXIT_INPUT while a run starts,
 * DLLM_EXIT_INTERNAL once it trains). */
int dllm_plugin_reward(dllm_plugin *p, const dllm_task_plugin_sample *s, double *reward,
                       int *correct, int code, dllm_err *err);
bool dllm_plugin_has_format(const dllm_plugin *p);
bool dllm_plugin_has_generate(const dllm_plugin *p);
/* The formatted prompt, malloc'd; NULL with err set when the plugin fails. */
char *dllm_plugin_format(dllm_plugin *p, const char *prompt, const char *reference, dllm_err *err);
/* Generated item index of seed: prompt and reference malloc'd. */
int dllm_plugin_generate(dllm_plugin *p, uint64_t seed, uint64_t index, char **prompt,
                         char **reference, dllm_err *err);
const char *dllm_plugin_name(const dllm_plugin *p);
/* fini, then dlclose. */
void dllm_plugin_close(dllm_plugin *p);

#endif
