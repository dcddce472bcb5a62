/* cmd_tasks.c: `dllm-rl tasks list`, `dllm-rl tasks sample NAME ...` (the
 * registered tasks, and formatted prompts exactly as the model will see them,
 * deterministic for a given seed) and `dllm-rl tasks sft-data NAME ...`
 * (prompt/answer pairs with reference or solver-made answers, for SFT). */
#include "src/cli/commands.h"
#include "tasks/countdown.h"
#include "tasks/custom.h"
#include "tasks/registry.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dllm-rl tasks list\n"
            "       dllm-rl tasks sample NAME [--n N] [--seed S] [--data FILE] [--numbers K] [--max-blanks B]\n"
            "       dllm-rl tasks sft-data NAME [--n N] [--seed S] [--data FILE] [--format plain|d1]\n"
            "                                   [--numbers K] [--max-blanks B]\n\n"
            "list     the tasks, one per line: name and description\n"
            "sample   print N formatted prompts of task NAME (default 5), chosen with seed S\n"
            "         (default 0) from FILE (JSONL; sudoku also CSV), or made by the task's\n"
            "         generator when no FILE is given (countdown, sudoku)\n"
            "sft-data print N JSONL lines {\"prompt\": ..., \"answer\": ...} for `dllm-rl sft`:\n"
            "         the prompt as RL shows it (--format plain: the bare question; d1: the\n"
            "         d1 instruction), the answer in the tags the reward reads: countdown\n"
            "         a solver-made expression, sudoku the solution, gsm8k/math500 the\n"
            "         reference answer (d1: with <reasoning> and <answer> blocks)\n"
            "  --numbers K      countdown generator: numbers per problem, 2-4 (default 3)\n"
            "  --max-blanks B   sudoku generator: most blank cells (default 10)\n\n"
            "exit status: 0 success, 2 bad input (errors name FILE:LINE), 1 internal failure\n");
}

/* Parses an unsigned integer flag value; returns -1 on junk. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static int list_tasks(void)
{
    size_t n;
    const dllm_task *const *all = dllm_task_all(&n);
    for (size_t i = 0; i < n; i++)
        printf("%-10s %s\n", all[i]->name, all[i]->description);
    printf("%-10s %s\n", dllm_task_custom.name, dllm_task_custom.description);
    return 0;
}

static int sample(int argc, char **argv)
{
    const char *name = NULL;
    dllm_task_source src = {0};
    uint64_t n = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (a[0] == '-' && a[1] == '-') {
            if (i + 1 >= argc) {
                fprintf(stderr, "dllm-rl tasks: %s needs a value\n", a);
                return 2;
            }
            const char *val = argv[++i];
            if (!strcmp(a, "--data")) {
                src.path = val;
                continue;
            }
            if (parse_u64(val, &v)) {
                fprintf(stderr, "dllm-rl tasks: %s: '%s' is not a non-negative integer\n", a, val);
                return 2;
            }
            if (!strcmp(a, "--n"))
                n = v;
            else if (!strcmp(a, "--seed"))
                src.seed = v;
            else if (!strcmp(a, "--numbers") && v <= 16)
                src.n_numbers = (int)v;
            else if (!strcmp(a, "--max-blanks") && v <= 16)
                src.max_blanks = (int)v;
            else {
                fprintf(stderr, "dllm-rl tasks: unknown or out-of-range option %s %s\n", a, val);
                return 2;
            }
        } else if (!name) {
            name = a;
        } else {
            fprintf(stderr, "dllm-rl tasks: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!name) {
        usage(stderr);
        return 2;
    }
    const dllm_task *t = dllm_task_find(name);
    if (!t) {
        if (!strcmp(name, dllm_task_custom.name))
            fprintf(stderr, "dllm-rl tasks: task 'custom' takes its data and reward from a config "
                            "(task.name: custom; docs/CUSTOM_TASKS.md)\n");
        else
            fprintf(stderr, "dllm-rl tasks: unknown task '%s' (see dllm-rl tasks list)\n", name);
        return 2;
    }
    if (n == 0 || n > 1000000) {
        fprintf(stderr, "dllm-rl tasks: --n must be 1 to 1000000\n");
        return 2;
    }
    src.n = (size_t)n;
    dllm_task_items items;
    dllm_err err = {0};
    int rc = dllm_task_load(t, &src, &items, &err);
    if (rc) {
        fprintf(stderr, "dllm-rl tasks: %s\n", err.msg);
        return rc;
    }
    size_t k = src.path ? (n < items.n ? (size_t)n : items.n) : items.n;
    size_t *idx = malloc(k * sizeof *idx);
    if (!idx)
        return 1;
    if (src.path)
        dllm_task_sample_indices(items.n, k, src.seed, 0, idx);
    else
        for (size_t i = 0; i < k; i++)
            idx[i] = i;
    for (size_t i = 0; i < k; i++) {
        const dllm_task_item *it = &items.items[idx[i]];
        char *p = t->format(it);
        printf("=== %s item %zu (reference: %s) ===\n%s\n", t->name, idx[i], it->answer, p);
        free(p);
    }
    free(idx);
    dllm_task_items_free(&items);
    return 0;
}

/* The answer a model should produce for item it, in the tags the reward reads. */
static char *sft_answer(const dllm_task *t, const dllm_task_item *it, int d1)
{
    char body[512];
    if (!strcmp(t->name, "countdown")) {
        if (dllm_countdown_solve(it->nums, it->n_nums, it->target, body, sizeof body) != 1)
            return NULL;
    } else {
        snprintf(body, sizeof body, "%s", it->answer);
    }
    size_t n = strlen(body) + 128;
    char *out = malloc(n);
    if (!out)
        return NULL;
    if (d1)
        snprintf(out, n, "<reasoning>\n</reasoning>\n<answer>\n%s\n</answer>", body);
    else
        snprintf(out, n, "<answer>%s</answer>", body);
    return out;
}

static int sft_data(int argc, char **argv)
{
    const char *name = NULL, *data = NULL, *format = "plain";
    uint64_t n = 1000, seed = 0, numbers = 0, blanks = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (a[0] != '-') {
            if (name) {
                fprintf(stderr, "dllm-rl tasks sft-data: one task name expected\n");
                return 2;
            }
            name = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dllm-rl tasks sft-data: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--n"))
            bad = parse_u64(v, &n) || n == 0 || n > 10000000;
        else if (!strcmp(a, "--seed"))
            bad = parse_u64(v, &seed);
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--format"))
            bad = strcmp(v, "plain") && strcmp(v, "d1"), format = v;
        else if (!strcmp(a, "--numbers"))
            bad = parse_u64(v, &numbers) || numbers < 2 || numbers > 4;
        else if (!strcmp(a, "--max-blanks"))
            bad = parse_u64(v, &blanks) || blanks < 1 || blanks > 16;
        else {
            fprintf(stderr, "dllm-rl tasks sft-data: unknown option %s\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "dllm-rl tasks sft-data: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    const dllm_task *t = name ? dllm_task_find(name) : NULL;
    if (!t && name && !strcmp(name, dllm_task_custom.name)) {
        fprintf(stderr, "dllm-rl tasks sft-data: task 'custom' takes its data from a config; an "
                        "SFT set of it is your own JSONL of prompt/answer pairs (docs/CUSTOM_TASKS.md)\n");
        return 2;
    }
    if (!t) {
        fprintf(stderr, "dllm-rl tasks sft-data: %s (see `dllm-rl tasks list`)\n",
                name ? "unknown task" : "a task name is required");
        return 2;
    }
    dllm_task_source src = {.path = data, .seed = seed, .n = (size_t)n, .n_numbers = (int)numbers,
                            .max_blanks = (int)blanks};
    dllm_task_items items;
    dllm_err err = {0};
    int rc = dllm_task_load(t, &src, &items, &err);
    if (rc) {
        fprintf(stderr, "dllm-rl tasks sft-data: %s\n", err.msg);
        return rc;
    }
    int d1 = !strcmp(format, "d1");
    size_t k = items.n < n ? items.n : (size_t)n;
    for (size_t i = 0; i < k && !rc; i++) {
        const dllm_task_item *it = &items.items[i];
        char *prompt = d1 ? t->format(it) : strdup(it->question);
        char *answer = sft_answer(t, it, d1);
        if (!prompt || !answer) {
            fprintf(stderr, "dllm-rl tasks sft-data: item %zu has no solution\n", i);
            rc = 1;
        } else {
            json_t *o = json_pack("{s:s, s:s}", "prompt", prompt, "answer", answer);
            char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
            printf("%s\n", line);
            free(line);
            json_decref(o);
        }
        free(prompt);
        free(answer);
    }
    dllm_task_items_free(&items);
    return rc;
}

int cmd_tasks(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "list"))
        return list_tasks();
    if (!strcmp(argv[1], "sample"))
        return sample(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sft-data"))
        return sft_data(argc - 1, argv + 1);
    fprintf(stderr, "dllm-rl tasks: unknown subcommand '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
