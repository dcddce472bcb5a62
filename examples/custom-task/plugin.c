/* plugin.c: the sums task of reward.py as a C plugin (include/dllm_task_plugin.h),
 * with a prompt format and a generator of its own. Build, from the repository root:
 *
 *   cc -O2 -shared -fPIC -I include -o examples/custom-task/sums.so examples/custom-task/plugin.c
 *
 * Reward: 1 when the completion starts with the reference's number; otherwise 0.1
 * for each distinct digit of the reference that the completion contains (at most
 * 0.5), as reward.py. */
#include "dllm_task_plugin.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strings handed back to dllm-rl live here until the next call. */
typedef struct {
    char prompt[64], reference[32], formatted[128];
} sums_state;

static int sums_init(void **state, char *err, size_t err_len)
{
    *state = calloc(1, sizeof(sums_state));
    if (!*state) {
        snprintf(err, err_len, "out of memory");
        return 1;
    }
    return 0;
}

static void sums_fini(void *state)
{
    free(state);
}

static int sums_reward(void *state, const dllm_task_plugin_sample *s, double *reward, int *correct,
                       char *err, size_t err_len)
{
    const char *ref = s->reference, *c = s->completion;
    while (isspace((unsigned char)*c))
        c++;
    size_t n = strlen(ref);
    /* the completion's leading number, compared as text */
    size_t k = (*c == '-') ? 1 : 0;
    while (isdigit((unsigned char)c[k]))
        k++;
    if (k == n && n > 0 && !strncmp(c, ref, n)) {
        *reward = 1.0;
        *correct = 1;
        return 0;
    }
    int seen[10] = {0}, credit = 0;
    for (size_t i = 0; i < n; i++)
        if (isdigit((unsigned char)ref[i]) && !seen[ref[i] - '0']) {
            seen[ref[i] - '0'] = 1;
            credit += memchr(s->completion, ref[i], s->completion_len) != NULL;
        }
    *reward = credit > 5 ? 0.5 : 0.1 * credit;
    *correct = 0;
    return 0;
}

static const char *sums_format(void *state, const char *prompt, const char *reference)
{
    sums_state *st = state;
    snprintf(st->formatted, sizeof st->formatted, "Add: %s", prompt);
    return st->formatted;
}

/* Item index of seed: two numbers below 50 from a small mixing of (seed, index). */
static int sums_generate(void *state, uint64_t seed, uint64_t index, const char **prompt,
                         const char **reference, char *err, size_t err_len)
{
    sums_state *st = state;
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    int a = (int)(z % 50), b = (int)((z >> 32) % 50);
    snprintf(st->prompt, sizeof st->prompt, "%d+%d=", a, b);
    snprintf(st->reference, sizeof st->reference, "%d", a + b);
    *prompt = st->prompt;
    *reference = st->reference;
    return 0;
}

const dllm_task_plugin *dllm_task_plugin_entry(void);

const dllm_task_plugin *dllm_task_plugin_entry(void)
{
    static const dllm_task_plugin plugin = {
        .abi_version = DLLM_TASK_PLUGIN_ABI_VERSION,
        .size = sizeof plugin,
        .name = "sums",
        .init = sums_init,
        .fini = sums_fini,
        .reward = sums_reward,
        .format = sums_format,
        .generate = sums_generate,
    };
    return &plugin;
}
