/* eval_outcomes.c: per-item evaluation outcomes (format in eval_outcomes.h). */
#include "src/log/eval_outcomes.h"
#include "src/cli/cli_util.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HEADER[] = "# dllm-rl eval outcomes: task %63[^,], step %lld, n %zu, items %llx";

int eval_outcomes_write(const char *run_dir, const char *task, long long step, const uint8_t *ok,
                        size_t n, uint64_t items, dllm_err *err)
{
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/eval", run_dir);
    int rc = cli_mkdirs(dir, err);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/%s-step-%lld.txt", dir, task, step);
    return eval_outcomes_write_file(path, task, step, ok, n, items, err);
}

int eval_outcomes_write_file(const char *path, const char *task, long long step,
                             const uint8_t *ok, size_t n, uint64_t items, dllm_err *err)
{
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", tmp, strerror(errno));
    fprintf(f, "# dllm-rl eval outcomes: task %s, step %lld, n %zu, items %016llx\n", task, step,
            n, (unsigned long long)items);
    for (size_t i = 0; i < n; i++)
        fputs(ok[i] ? "1\n" : "0\n", f);
    if (fclose(f) || rename(tmp, path)) {
        int e = errno;
        remove(tmp);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(e));
    }
    return 0;
}

int eval_outcomes_read(const char *path, eval_outcomes *o, dllm_err *err)
{
    memset(o, 0, sizeof *o);
    FILE *f = fopen(path, "r");
    if (!f)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", path, strerror(errno));
    char line[256];
    unsigned long long h;
    int rc = 0;
    if (!fgets(line, sizeof line, f) ||
        sscanf(line, HEADER, o->task, &o->step, &o->n, &h) != 4 || o->n > ((size_t)1 << 30)) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:1: not an eval outcomes header", path);
    } else {
        o->items = h;
        o->ok = dllm_malloc(o->n ? o->n : 1);
        for (size_t i = 0; i < o->n && !rc; i++)
            if (!fgets(line, sizeof line, f) || (strcmp(line, "0\n") && strcmp(line, "1\n")))
                rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: expected 0 or 1 (%zu items)",
                                  path, i + 2, o->n);
            else
                o->ok[i] = line[0] == '1';
        if (!rc && fgets(line, sizeof line, f))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%zu: more lines than its %zu items",
                              path, o->n + 2, o->n);
    }
    fclose(f);
    if (rc)
        eval_outcomes_free(o);
    return rc;
}

void eval_outcomes_free(eval_outcomes *o)
{
    free(o->ok);
    memset(o, 0, sizeof *o);
}

int eval_outcomes_find(const char *run_dir, const char *task, bool latest, char *path, size_t cap)
{
    char dir[4200], prefix[128];
    snprintf(dir, sizeof dir, "%s/eval", run_dir);
    snprintf(prefix, sizeof prefix, "%s-step-", task);
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    long long best = -1;
    size_t pl = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        const char *nm = e->d_name;
        if (strncmp(nm, prefix, pl))
            continue;
        char *end;
        errno = 0;
        long long s = strtoll(nm + pl, &end, 10);
        if (errno || end == nm + pl || strcmp(end, ".txt") || s < 0)
            continue;
        if (best < 0 || (latest ? s > best : s < best))
            best = s;
    }
    closedir(d);
    if (best < 0)
        return 1;
    snprintf(path, cap, "%s/%s%lld.txt", dir, prefix, best);
    return 0;
}

int eval_outcomes_pair(const eval_outcomes *a, const eval_outcomes *b, eval_paired *p,
                       dllm_err *err)
{
    if (a->n != b->n || a->items != b->items || strcmp(a->task, b->task))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "the evaluations score different items (%s: %zu items %016llx; "
                            "%s: %zu items %016llx)",
                            a->task, a->n, (unsigned long long)a->items, b->task, b->n,
                            (unsigned long long)b->items);
    memset(p, 0, sizeof *p);
    size_t sa = 0, sb = 0;
    for (size_t i = 0; i < a->n; i++) {
        sa += a->ok[i];
        sb += b->ok[i];
        p->only_a += a->ok[i] && !b->ok[i];
        p->only_b += !a->ok[i] && b->ok[i];
    }
    double n = (double)a->n;
    if (a->n == 0) {
        p->a = p->b = p->diff = p->se = NAN;
        return 0;
    }
    p->a = (double)sa / n;
    p->b = (double)sb / n;
    p->diff = ((double)p->only_a - (double)p->only_b) / n;
    /* d_i in {-1, 0, 1}: sum (d_i - mean)^2 = (only_a + only_b) - n mean^2 */
    double ss = (double)(p->only_a + p->only_b) - n * p->diff * p->diff;
    p->se = a->n > 1 ? sqrt((ss > 0 ? ss : 0) / (n * (n - 1))) : NAN;
    return 0;
}
