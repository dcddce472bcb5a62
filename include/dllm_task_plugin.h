/* dllm_task_plugin.h: the C interface of a task plugin (`task.name: custom` with
 * `task.plugin: path/to/plugin.so`), for rewards too fast or too intricate for a
 * reward program. Self-contained: a plugin needs this header and nothing else of
 * dllm-rl.
 *
 * A plugin exports one function, named by DLLM_TASK_PLUGIN_ENTRY:
 *
 *   #include "dllm_task_plugin.h"
 *   static int my_reward(void *state, const dllm_task_plugin_sample *s, double *reward,
 *                        int *correct, char *err, size_t err_len)
 *   {
 *       *reward = strstr(s->completion, s->reference) ? 1.0 : 0.0;
 *       return 0;
 *   }
 *   const dllm_task_plugin *dllm_task_plugin_entry(void)
 *   {
 *       static const dllm_task_plugin p = {
 *           .abi_version = DLLM_TASK_PLUGIN_ABI_VERSION, .size = sizeof p,
 *           .name = "contains", .reward = my_reward};
 *       return &p;
 *   }
 *
 *   cc -O2 -shared -fPIC -I include -o contains.so contains.c
 *
 * dllm-rl checks abi_version against the DLLM_TASK_PLUGIN_ABI_VERSION it was built
 * with and refuses any other (exit 2: rebuild the plugin against this header). A
 * later version of the interface changes the number; fields are only appended, and
 * size says how much of the table the plugin knows.
 *
 * Calls come from one thread, one at a time. Strings are UTF-8 and NUL-terminated.
 * A function that fails returns nonzero and may write a message into err (err_len
 * bytes, always NUL-terminated by dllm-rl afterwards); dllm-rl stops with that
 * message and the plugin's name (exit 2 while the run starts, 1 once it trains). */
#ifndef DLLM_TASK_PLUGIN_H
#define DLLM_TASK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define DLLM_TASK_PLUGIN_ABI_VERSION 1
#define DLLM_TASK_PLUGIN_ENTRY "dllm_task_plugin_entry"

/* One completion to score. */
typedef struct {
    const char *prompt;     /* the item's prompt field, before any formatting */
    const char *reference;  /* its reference field: a JSON string's text, any other
                               JSON value (number, list, object) as compact JSON */
    const char *completion; /* the model's completion, decoded */
    size_t completion_len;  /* strlen(completion) */
} dllm_task_plugin_sample;

typedef struct {
    uint32_t abi_version; /* DLLM_TASK_PLUGIN_ABI_VERSION */
    uint32_t size;        /* sizeof(dllm_task_plugin) as the plugin was built */
    const char *name;     /* shown in messages */

    /* Optional: called once before anything else; *state is passed to every later
     * call (NULL when there is no init). */
    int (*init)(void **state, char *err, size_t err_len);
    /* Optional: called once at the end. */
    void (*fini)(void *state);

    /* Required: the reward of one completion, a finite number. *correct arrives as
     * -1; set it to 0 or 1 to say whether the answer is correct (the accuracy that
     * evaluation reports, and the reward under `task.reward: correct`); left at -1,
     * a completion is correct when its reward is above 0. */
    int (*reward)(void *state, const dllm_task_plugin_sample *s, double *reward, int *correct,
                  char *err, size_t err_len);

    /* Optional: the text the model sees for an item (under `task.format: d1`; plain
     * shows the prompt field as it is). The string belongs to the plugin and must
     * stay valid until the next call; NULL is an error. */
    const char *(*format)(void *state, const char *prompt, const char *reference);

    /* Optional: item `index` of a data set made from `seed`, used when the config
     * names no data file (task.train.path / task.eval.path empty). *prompt and
     * *reference belong to the plugin and must stay valid until the next call; the
     * reference is passed back to reward as it is. */
    int (*generate)(void *state, uint64_t seed, uint64_t index, const char **prompt,
                    const char **reference, char *err, size_t err_len);
} dllm_task_plugin;

/* The one symbol a plugin exports. */
typedef const dllm_task_plugin *(*dllm_task_plugin_entry_fn)(void);

#endif
