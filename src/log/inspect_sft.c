/* inspect_sft.c: the summary of an SFT run (see inspect_sft.h). */
#include "src/log/inspect_sft.h"
#include "src/config/gen_settings.h"
#include "src/config/yaml_config.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the columns of sft_log.jsonl, in file order */
static const char *const cols[] = {"step", "loss", "grad_norm", "lr", "tokens_per_s", "elapsed_s"};
enum { NCOL = 6 };

typedef struct {
    double (*v)[NCOL]; /* (n) rows */
    int n;
    /* the validation lines (sft.eval_every): {"step", "eval_accuracy", ...} */
    int n_eval, best_step, last_eval_step;
    double best_acc, last_acc;
} sft_rows;

static int read_rows(const char *path, sft_rows *r)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dllm-rl inspect: %s: cannot open\n", path);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, capn = 0, rc = 0;
    memset(r, 0, sizeof *r);
    while (getline(&line, &cap, f) != -1) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!json_is_object(o)) {
            json_decref(o);
            if (!strchr(line, '\n'))
                break;   /* a line cut short by a kill: the rows before it stand */
            fprintf(stderr, "dllm-rl inspect: %s:%d: not a JSON object\n", path, lineno);
            rc = 2;
            break;
        }
        json_t *ea = json_object_get(o, "eval_accuracy");
        if (json_is_number(ea)) { /* a validation line, not a training row */
            const double a = json_number_value(ea);
            const int st = (int)json_integer_value(json_object_get(o, "step"));
            if (r->n_eval++ == 0 || a > r->best_acc)
                r->best_acc = a, r->best_step = st;
            r->last_acc = a;
            r->last_eval_step = st;
            json_decref(o);
            continue;
        }
        if (r->n == capn)
            r->v = realloc(r->v, sizeof *r->v * (size_t)(capn = capn ? 2 * capn : 64));
        for (int c = 0; c < NCOL; c++) {
            json_t *x = json_object_get(o, cols[c]);
            r->v[r->n][c] = json_is_number(x) ? json_number_value(x) : NAN;
        }
        r->n++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (rc) {
        free(r->v);
        r->v = NULL;
    }
    return rc;
}

/* the step-N directories of RUN_DIR/ckpt, ascending; *latest the link's step (-1) */
static int list_ckpts(const char *run_dir, long *steps, int cap, long *latest)
{
    char dir[4400], link[4500], target[256];
    snprintf(dir, sizeof dir, "%s/ckpt", run_dir);
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) && n < cap;) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step-%ld%c", &s, &tail) == 1)
            steps[n++] = s;
    }
    if (d)
        closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    snprintf(link, sizeof link, "%s/latest", dir);
    ssize_t l = readlink(link, target, sizeof target - 1);
    *latest = -1;
    if (l > 0) {
        target[l] = 0;
        sscanf(target, "step-%ld", latest);
    }
    return n;
}

/* the log's values were written with at most 9 significant digits */
static void num(double v)
{
    if (isfinite(v))
        printf("%.10g", v);
}

int inspect_sft(const char *run_dir, int json, int csv, const char *metric)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/sft_log.jsonl", run_dir);
    sft_rows r;
    int rc = read_rows(path, &r);
    if (rc)
        return rc;
    if (csv) {
        for (int c = 0; c < NCOL; c++)
            printf("%s%s", c ? "," : "", cols[c]);
        printf("\n");
        for (int i = 0; i < r.n; i++)
            for (int c = 0; c < NCOL; c++) {
                if (c)
                    printf(",");
                num(r.v[i][c]);
                if (c == NCOL - 1)
                    printf("\n");
            }
        free(r.v);
        return 0;
    }
    if (metric) {
        int c = 0;
        while (c < NCOL && strcmp(cols[c], metric))
            c++;
        if (c == NCOL || c == 0) {
            fprintf(stderr,
                    "dllm-rl inspect: %s: '%s' is not logged by sft: an sft run logs loss, "
                    "grad_norm, lr, tokens_per_s and elapsed_s per logged step (sft_log.jsonl; "
                    "the step metrics of train are in a train run's log.h5)\n",
                    run_dir, metric);
            free(r.v);
            return 2;
        }
        printf("step %s\n", metric);
        for (int i = 0; i < r.n; i++) {
            printf("%.0f ", r.v[i][0]);
            num(r.v[i][c]);
            printf("\n");
        }
        free(r.v);
        return 0;
    }
    /* the configured length, for finished / interrupted */
    dllm_cfg cfg;
    dllm_err err = {0};
    char cp[4400];
    snprintf(cp, sizeof cp, "%s/config.yaml", run_dir);
    dllm_cfg_defaults(&cfg);
    int total = dllm_cfg_load(&cfg, cp, &err) ? -1 : cfg.sft.steps;
    long ck[1024], latest;
    int nck = list_ckpts(run_dir, ck, 1024, &latest);
    /* the final step always writes a checkpoint: a run is finished when its
     * latest checkpoint is at sft.steps (log lines past it were cut by a kill) */
    int logged = r.n ? (int)r.v[r.n - 1][0] : 0;
    int done_step = latest > 0 ? (int)latest : 0;
    double lmin = INFINITY, lmax = -INFINITY, lsum = 0, lrmax = -INFINITY;
    int imin = -1, nl = 0;
    for (int i = 0; i < r.n; i++) {
        double l = r.v[i][1];
        if (isfinite(l)) {
            if (l < lmin)
                lmin = l, imin = i;
            lmax = l > lmax ? l : lmax;
            lsum += l;
            nl++;
        }
        lrmax = r.v[i][3] > lrmax ? r.v[i][3] : lrmax;
    }
    /* the loss curve: at most 9 rows, evenly spaced, always the first and last */
    int pts[9], np = 0;
    for (int k = 0; k < 9 && r.n; k++) {
        int i = r.n == 1 ? 0 : (int)((double)k * (r.n - 1) / 8 + 0.5);
        if (!np || pts[np - 1] != i)
            pts[np++] = i;
    }
    ckpt_generation g;
    ckpt_generation_default(&g, true, 0);
    char lat[4400];
    snprintf(lat, sizeof lat, "%s/ckpt/latest", run_dir);
    int have_gen = ckpt_read_generation(lat, &g, &err) == 0;
    const bool finished = total > 0 && done_step >= total;
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "kind", json_string("sft"));
        json_object_set_new(o, "path", json_string(run_dir));
        json_object_set_new(o, "steps", total > 0 ? json_integer(total) : json_null());
        json_object_set_new(o, "checkpointed_step", json_integer(done_step));
        json_object_set_new(o, "logged_step", json_integer(logged));
        json_object_set_new(o, "finished", json_boolean(finished));
        json_object_set_new(o, "log_rows", json_integer(r.n));
        json_t *l = json_object();
        json_object_set_new(l, "first", nl ? json_real(r.v[0][1]) : json_null());
        json_object_set_new(l, "last", nl ? json_real(r.v[r.n - 1][1]) : json_null());
        json_object_set_new(l, "min", nl ? json_real(lmin) : json_null());
        json_object_set_new(l, "min_step", nl ? json_integer((json_int_t)r.v[imin][0]) : json_null());
        json_object_set_new(l, "max", nl ? json_real(lmax) : json_null());
        json_object_set_new(l, "mean", nl ? json_real(lsum / nl) : json_null());
        json_object_set_new(o, "loss", l);
        json_t *curve = json_array();
        for (int k = 0; k < np; k++)
            json_array_append_new(curve, json_pack("[I, f]", (json_int_t)r.v[pts[k]][0],
                                                   isfinite(r.v[pts[k]][1]) ? r.v[pts[k]][1] : 0));
        json_object_set_new(o, "loss_curve", curve);
        json_object_set_new(o, "lr_last", r.n && isfinite(r.v[r.n - 1][3]) ? json_real(r.v[r.n - 1][3])
                                                                            : json_null());
        json_object_set_new(o, "lr_max", isfinite(lrmax) ? json_real(lrmax) : json_null());
        if (r.n_eval)
            json_object_set_new(o, "validation",
                                json_pack("{s:i, s:f, s:i, s:f, s:i}", "evaluations", r.n_eval,
                                          "best_accuracy", r.best_acc, "best_step", r.best_step,
                                          "last_accuracy", r.last_acc, "last_step",
                                          r.last_eval_step));
        json_t *c = json_array();
        for (int i = 0; i < nck; i++)
            json_array_append_new(c, json_integer(ck[i]));
        json_object_set_new(o, "checkpoints", c);
        json_object_set_new(o, "latest", latest >= 0 ? json_integer(latest) : json_null());
        if (have_gen)
            json_object_set_new(o, "generation",
                                json_pack("{s:i, s:i, s:i, s:f}", "gen_length", g.gen_length,
                                          "block_length", g.block_length, "steps", g.steps,
                                          "temperature", g.temperature));
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        fputc('\n', stdout);
        json_decref(o);
        free(r.v);
        return 0;
    }
    printf("run          %s (sft)\n", run_dir);
    if (total > 0)
        printf("steps        %d of %d (%s)\n", done_step, total,
               finished ? "finished"
                        : "unfinished: dllm-rl sft --resume RUN_DIR continues from the latest "
                          "checkpoint");
    else
        printf("steps        %d (config.yaml unreadable: %s)\n", done_step, err.msg);
    if (logged != done_step)
        printf("logged to    step %d\n", logged);
    if (nl) {
        printf("loss         first %.6g (step %.0f)  last %.6g (step %.0f)  min %.6g (step %.0f)\n",
               r.v[0][1], r.v[0][0], r.v[r.n - 1][1], r.v[r.n - 1][0], lmin, r.v[imin][0]);
        printf("loss curve  ");
        for (int k = 0; k < np; k++)
            printf(" %.0f:%.4g", r.v[pts[k]][0], r.v[pts[k]][1]);
        printf("\n");
        printf("lr           last %.3g  max %.3g\n", r.v[r.n - 1][3], lrmax);
        printf("grad_norm    last %.4g\n", r.v[r.n - 1][2]);
        printf("elapsed      %.1f s  (%.0f tokens/s at the end)\n", r.v[r.n - 1][5], r.v[r.n - 1][4]);
    } else {
        printf("loss         no logged step yet\n");
    }
    if (r.n_eval)
        printf("validation   best %.4f (step %d)  last %.4f (step %d)  %d evaluations\n",
               r.best_acc, r.best_step, r.last_acc, r.last_eval_step, r.n_eval);
    printf("checkpoints ");
    for (int i = 0; i < nck; i++)
        printf(" step-%ld%s", ck[i], ck[i] == latest ? " (latest)" : "");
    printf("%s\n", nck ? "" : " none");
    if (have_gen)
        printf("generation   gen_length %d, block_length %d, steps %d, temperature %g "
               "(ckpt/latest/generation.json)\n", g.gen_length, g.block_length, g.steps,
               g.temperature);
    free(r.v);
    return 0;
}
