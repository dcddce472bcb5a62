/* cmd_grade.c: `dllm-rl grade NAME --input F.jsonl`: rewards and accuracy of
 * completions. Each line is a JSON object with "completion" and the task's
 * reference fields ("answer"; "nums"/"target"; "puzzle"/"solution").
 *
 * Output: one line per input line "LINE REWARD CORRECT", then totals: n, mean
 * reward, accuracy p and its standard error s / sqrt(n), s the sample standard
 * deviation of the 0/1 outcomes (s^2 = n p (1 - p) / (n - 1); se = 0 when n = 1). */
#include "src/cli/commands.h"
#include "tasks/custom.h"
#include "tasks/registry.h"

#include "kernels/base.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dllm-rl grade NAME --input FILE.jsonl [--quiet]\n\n"
            "Grades completions of task NAME (see dllm-rl tasks list). Each line of FILE is\n"
            "a JSON object with \"completion\" (or \"text\", as `generate --format json`\n"
            "writes it) and the task's reference fields:\n"
            "  gsm8k      \"answer\" (a number, or a solution ending in \"#### N\")\n"
            "  math500    \"answer\" (LaTeX), or \"solution\" with a \\boxed{} answer\n"
            "  countdown  \"nums\" (array of integers) and \"target\"\n"
            "  sudoku     \"puzzle\" and \"solution\" (16 digits, 0 = blank)\n"
            "Prints \"LINE REWARD CORRECT\" per line (unless --quiet), then n, reward_mean,\n"
            "accuracy and accuracy_se (standard error of the mean of the 0/1 outcomes).\n"
            "A malformed line stops grading with FILE:LINE: message.\n\n"
            "exit status: 0 success, 2 bad input, 1 internal failure\n");
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            return 0;
    return 1;
}

int cmd_grade(int argc, char **argv)
{
    const char *name = NULL, *input = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--input") && i + 1 < argc) {
            input = argv[++i];
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            fprintf(stderr, "dllm-rl grade: unexpected argument '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!name || !input) {
        usage(stderr);
        return 2;
    }
    const dllm_task *t = dllm_task_find(name);
    if (!t) {
        if (!strcmp(name, dllm_task_custom.name))
            fprintf(stderr, "dllm-rl grade: task 'custom' is graded by its own reward program or "
                            "plugin (docs/CUSTOM_TASKS.md)\n");
        else
            fprintf(stderr, "dllm-rl grade: unknown task '%s' (see dllm-rl tasks list)\n", name);
        return 2;
    }
    char *buf;
    size_t len;
    dllm_err err = {0};
    int rc = dllm_read_file(input, &buf, &len, &err);
    if (rc) {
        fprintf(stderr, "dllm-rl grade: %s\n", err.msg);
        return rc;
    }
    size_t n = 0, lineno = 0;
    double sum_r = 0, sum_c = 0;
    for (size_t i = 0; i < len && !rc;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - buf) : len;
        lineno++;
        if (!blank(buf + i, e - i)) {
            json_error_t jerr;
            json_t *obj = json_loadb(buf + i, e - i, 0, &jerr);
            json_t *c = obj ? json_object_get(obj, "completion") : NULL;
            if (!c && obj) /* `generate --format json` also names it text */
                c = json_object_get(obj, "text");
            dllm_task_item it = {0};
            if (!obj) {
                rc = dllm_err_set(&err, 2, "%s:%zu: invalid JSON at column %d: %s", input, lineno, jerr.column,
                                  jerr.text);
            } else if (!json_is_object(obj)) {
                rc = dllm_err_set(&err, 2, "%s:%zu: expected a JSON object", input, lineno);
            } else if (!json_is_string(c)) {
                rc = dllm_err_set(&err, 2, "%s:%zu: key 'completion': %s", input, lineno,
                                  c ? "expected a string" : "missing");
            } else if ((rc = t->from_json(obj, 0, &it, &err))) {
                dllm_err_prefix(&err, "%s:%zu", input, lineno);
            } else {
                const char *text = json_string_value(c);
                size_t tl = json_string_length(c);
                double r = t->reward(&it, text, tl);
                int ok = t->correct(&it, text, tl);
                if (!quiet)
                    printf("%zu %.6f %d\n", lineno, r, ok);
                n++;
                sum_r += r;
                sum_c += ok;
            }
            dllm_task_item_free(&it);
            json_decref(obj);
        }
        i = e + 1;
    }
    free(buf);
    if (rc) {
        fprintf(stderr, "dllm-rl grade: %s\n", err.msg);
        return rc;
    }
    if (n == 0) {
        fprintf(stderr, "dllm-rl grade: %s: no lines to grade\n", input);
        return 2;
    }
    double p = sum_c / (double)n;
    /* sample variance of 0/1 outcomes: n p (1 - p) / (n - 1) */
    double se = n > 1 ? sqrt(p * (1 - p) * (double)n / (double)(n - 1) / (double)n) : 0.0;
    printf("n %zu\nreward_mean %.6f\naccuracy %.6f\naccuracy_se %.6f\n", n, sum_r / (double)n, p, se);
    return 0;
}
