/* registry.c: task lookup, dataset loading (JSONL, sudoku CSV), generators,
 * deterministic splits (see registry.h). */
#include "tasks/registry.h"
#include "tasks/sudoku.h"

#include "kernels/rng.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const dllm_task *const all_tasks[] = {&dllm_task_gsm8k, &dllm_task_math500, &dllm_task_countdown,
                                             &dllm_task_sudoku};

const dllm_task *const *dllm_task_all(size_t *n)
{
    *n = sizeof all_tasks / sizeof all_tasks[0];
    return all_tasks;
}

const dllm_task *dllm_task_find(const char *name)
{
    for (size_t i = 0; i < sizeof all_tasks / sizeof all_tasks[0]; i++)
        if (!strcmp(all_tasks[i]->name, name))
            return all_tasks[i];
    return NULL;
}

void dllm_task_item_free(dllm_task_item *it)
{
    free(it->question);
    free(it->answer);
    free(it->reference_json);
    memset(it, 0, sizeof *it);
}

void dllm_task_items_free(dllm_task_items *items)
{
    for (size_t i = 0; i < items->n; i++)
        dllm_task_item_free(&items->items[i]);
    free(items->items);
    items->items = NULL;
    items->n = 0;
}

static dllm_task_item *push(dllm_task_items *out, size_t *cap)
{
    if (out->n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        out->items = dllm_realloc(out->items, *cap * sizeof out->items[0]);
    }
    dllm_task_item *it = &out->items[out->n];
    memset(it, 0, sizeof *it);
    return it;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            return 0;
    return 1;
}

/* Splits a CSV line (no quoting beyond stripping one pair of surrounding
 * quotes per field) into at most max fields; returns the count. Modifies line. */
static int csv_fields(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = 0;
        if (n < max) {
            while (*p == ' ')
                p++;
            size_t l = strlen(p);
            while (l && (p[l - 1] == ' ' || p[l - 1] == '\r'))
                p[--l] = 0;
            if (l >= 2 && p[0] == '"' && p[l - 1] == '"') {
                p[l - 1] = 0;
                p++;
            }
            f[n] = p;
        }
        n++;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

static int load_csv_sudoku(const char *name, const char *buf, size_t len, dllm_task_items *out, dllm_err *err)
{
    size_t cap = 0, lineno = 0;
    int col_p = -1, col_s = -1, ncols = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - buf) : len;
        lineno++;
        if (!blank(buf + i, e - i)) {
            if (memchr(buf + i, 0, e - i))
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: NUL byte in line", name, lineno);
            char *line = dllm_malloc(e - i + 1);
            memcpy(line, buf + i, e - i);
            line[e - i] = 0;
            char *f[8];
            int n = csv_fields(line, f, 8);
            if (col_p < 0) {
                ncols = n;
                for (int k = 0; k < n && k < 8; k++) {
                    if (!strcasecmp(f[k], "puzzle"))
                        col_p = k;
                    if (!strcasecmp(f[k], "solution"))
                        col_s = k;
                }
                free(line);
                if (col_p < 0 || col_s < 0)
                    return dllm_err_set(err, DLLM_EXIT_INPUT,
                                        "%s:%zu: CSV header must name the 'Puzzle' and 'Solution' columns", name,
                                        lineno);
            } else {
                int rc = 0;
                if (n != ncols)
                    rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: expected %d fields, found %d", name, lineno,
                                      ncols, n);
                else if ((rc = dllm_sudoku_item_from_strings(push(out, &cap), f[col_p], f[col_s], err)))
                    dllm_err_prefix(err, "%s:%zu", name, lineno);
                else
                    out->n++;
                free(line);
                if (rc)
                    return rc;
            }
        }
        i = e + 1;
    }
    return 0;
}

static int load_jsonl(const char *name, const char *buf, size_t len, dllm_task_item_fn item,
                      void *ctx, dllm_task_items *out, dllm_err *err)
{
    size_t cap = 0, lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - buf) : len;
        lineno++;
        if (!blank(buf + i, e - i)) {
            json_error_t jerr;
            json_t *obj = json_loadb(buf + i, e - i, 0, &jerr);
            if (!obj)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: invalid JSON at column %d: %s", name, lineno,
                                    jerr.column, jerr.text);
            int rc;
            if (!json_is_object(obj)) {
                rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: expected a JSON object", name, lineno);
            } else if ((rc = item(ctx, obj, push(out, &cap), err))) {
                dllm_task_item_free(&out->items[out->n]);
                dllm_err_prefix(err, "%s:%zu", name, lineno);
            } else {
                out->n++;
            }
            json_decref(obj);
            if (rc)
                return rc;
        }
        i = e + 1;
    }
    return 0;
}

/* A built-in task's dataset line: its from_json with the question required. */
static int task_item(void *ctx, const void *obj, dllm_task_item *it, dllm_err *err)
{
    const dllm_task *t = ctx;
    return t->from_json(obj, 1, it, err);
}

int dllm_task_load_jsonl(const char *name, const char *buf, size_t len, dllm_task_item_fn item,
                         void *ctx, dllm_task_items *out, dllm_err *err)
{
    out->items = NULL;
    out->n = 0;
    int rc = load_jsonl(name, buf, len, item, ctx, out, err);
    if (!rc && out->n == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no items", name);
    if (rc)
        dllm_task_items_free(out);
    return rc;
}

int dllm_task_load_buffer(const dllm_task *t, const char *name, const char *buf, size_t len,
                          dllm_task_items *out, dllm_err *err)
{
    out->items = NULL;
    out->n = 0;
    size_t k = 0;
    while (k < len && isspace((unsigned char)buf[k]))
        k++;
    int rc;
    if (t == &dllm_task_sudoku && k < len && buf[k] != '{')
        rc = load_csv_sudoku(name, buf, len, out, err);
    else
        rc = load_jsonl(name, buf, len, task_item, (void *)t, out, err);
    if (!rc && out->n == 0)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: no items", name);
    if (rc)
        dllm_task_items_free(out);
    return rc;
}

int dllm_task_load(const dllm_task *t, const dllm_task_source *src, dllm_task_items *out, dllm_err *err)
{
    out->items = NULL;
    out->n = 0;
    if (src->path) {
        char *buf;
        size_t len;
        int rc = dllm_read_file(src->path, &buf, &len, err);
        if (rc)
            return rc;
        rc = dllm_task_load_buffer(t, src->path, buf, len, out, err);
        free(buf);
        return rc;
    }
    if (!t->can_generate)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task '%s' has no generator: give a data file", t->name);
    if (src->n == 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task '%s': number of items to generate must be positive",
                            t->name);
    out->items = dllm_calloc(src->n, sizeof out->items[0]);
    for (size_t i = 0; i < src->n; i++) {
        int rc = t->generate(src, i, &out->items[i], err);
        if (rc) {
            out->n = i;
            dllm_task_items_free(out);
            return rc;
        }
    }
    out->n = src->n;
    return 0;
}

/* Seeded Fisher-Yates permutation of 0..n-1. */
static size_t *permutation(size_t n, uint64_t seed, uint64_t a, uint64_t b)
{
    size_t *p = dllm_malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = i;
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_TASK, a, b);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)dllm_rng_below(&r, i);
        size_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

void dllm_task_split(size_t n, double eval_frac, uint64_t seed, size_t **train_idx, size_t *n_train,
                     size_t **eval_idx, size_t *n_eval)
{
    if (!(eval_frac > 0))
        eval_frac = 0;
    if (eval_frac > 1)
        eval_frac = 1;
    size_t ne = (size_t)llround(eval_frac * (double)n);
    size_t *p = permutation(n, seed, 100, 0);
    *eval_idx = dllm_malloc((ne ? ne : 1) * sizeof(size_t));
    *train_idx = dllm_malloc((n - ne ? n - ne : 1) * sizeof(size_t));
    memcpy(*eval_idx, p, ne * sizeof(size_t));
    memcpy(*train_idx, p + ne, (n - ne) * sizeof(size_t));
    qsort(*eval_idx, ne, sizeof(size_t), cmp_size);
    qsort(*train_idx, n - ne, sizeof(size_t), cmp_size);
    *n_eval = ne;
    *n_train = n - ne;
    free(p);
}

void dllm_task_sample_indices(size_t n, size_t k, uint64_t seed, uint64_t step, size_t *idx)
{
    size_t *p = permutation(n, seed, 101, step);
    memcpy(idx, p, (k < n ? k : n) * sizeof(size_t));
    free(p);
}
