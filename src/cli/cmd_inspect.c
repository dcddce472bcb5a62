/* cmd_inspect.c: `dllm-rl inspect RUN_DIR|RUN.h5 [--json]`: a summary of a run
 * log: the root attributes, the number of steps and trajectories, per step
 * metric first/last/min/max/mean over its finite values (metrics with none are
 * skipped), and each eval task's latest result, with the paired change since the
 * first eval (and against another run with --against) from the per-item outcome
 * files of RUN_DIR/eval. Reads with SWMR, so it works on a running or killed run.
 * --csv prints every step metric, one row per step; --metric NAME one of them,
 * and when it holds no value says why (e.g. policy_kl without grpo.beta).
 * An SFT run (sft_log.jsonl, no log.h5) is summarised by inspect_sft.c. */
#include "src/cli/commands.h"
#include "src/log/eval_outcomes.h"
#include "src/log/h5log.h"
#include "src/log/inspect_sft.h"

#include "kernels/base.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dllm-rl inspect RUN_DIR|RUN.h5 [--against OTHER_RUN_DIR] [--json | --csv |\n"
            "                       --metric NAME]\n\n"
            "Summarises a run log (RUN_DIR/log.h5): attributes, number of steps and\n"
            "trajectories, first/last/min/max/mean of every step metric (over its finite\n"
            "values; all-NaN metrics are skipped) and the latest eval of each task.\n"
            "From the per-item outcomes in RUN_DIR/eval: the paired change of accuracy\n"
            "from the first eval to the latest (same items; the difference's standard\n"
            "error is that of the per-item differences). --against: the same comparison\n"
            "of this run's latest eval with OTHER_RUN_DIR's latest, which must score the\n"
            "same items.\n"
            "--json prints the same as one JSON object (non-finite numbers as null).\n"
            "--csv prints every step metric as CSV: a header (step, then the metrics),\n"
            "one row per step, empty fields where a metric was not computed.\n"
            "--metric NAME prints \"step value\" rows of one metric; a metric with no value\n"
            "in the run is an error that says why it is absent.\n"
            "An SFT run (RUN_DIR/sft_log.jsonl): steps done of sft.steps (finished or\n"
            "not), the loss (first, last, min, a curve of up to 9 points), lr, the\n"
            "checkpoints and the generation settings of ckpt/latest; --csv and --metric\n"
            "read sft_log.jsonl (step, loss, grad_norm, lr, tokens_per_s, elapsed_s).\n\n"
            "exit status: 0 success, 2 bad input (missing or corrupt log), 1 internal failure\n");
}

typedef struct {
    const char *name;
    int64_t n;                 /* finite values */
    double first, last, min, max, mean;
} metric_summary;

static metric_summary summarise(const char *name, const double *v, int64_t n)
{
    metric_summary s = {name, 0, NAN, NAN, INFINITY, -INFINITY, NAN};
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            continue;
        if (!s.n)
            s.first = v[i];
        s.last = v[i];
        s.min = v[i] < s.min ? v[i] : s.min;
        s.max = v[i] > s.max ? v[i] : s.max;
        sum += v[i];
        s.n++;
    }
    if (s.n)
        s.mean = sum / (double)s.n;
    return s;
}

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

typedef struct {
    const char *task;
    int64_t n;                                    /* evals logged */
    double step, accuracy, accuracy_se, reward_mean; /* the latest */
} eval_summary;

static int read_eval(h5log *log, const char *task, eval_summary *e, dllm_err *err)
{
    static const char *const fields[4] = {"step", "accuracy", "accuracy_se", "reward_mean"};
    double *out[4] = {&e->step, &e->accuracy, &e->accuracy_se, &e->reward_mean};
    e->task = task;
    e->n = 0;
    for (int f = 0; f < 4; f++) {
        char name[512];
        snprintf(name, sizeof name, "eval/%s/%s", task, fields[f]);
        double *v;
        int64_t n;
        int rc = h5log_read_column(log, name, &v, &n, err);
        if (rc)
            return rc;
        e->n = n;
        *out[f] = n ? v[n - 1] : NAN;
        free(v);
    }
    return 0;
}

typedef struct {
    char task[64], a_name[64], b_name[64];
    size_t n;
    eval_paired p;
} paired_row;

static void base_name(char *out, size_t cap, const char *dir, long long step)
{
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/')
        l--;
    const char *b = dir + l;
    while (b > dir && b[-1] != '/')
        b--;
    snprintf(out, cap, "%.*s@%lld", (int)(dir + l - b) > 40 ? 40 : (int)(dir + l - b), b, step);
}

static int pair_files(const char *pa, const char *dir_a, const char *pb, const char *dir_b,
                      const char *task, paired_row *row, int *npr, dllm_err *err)
{
    eval_outcomes a, b;
    int rc = eval_outcomes_read(pa, &a, err);
    if (rc)
        return rc;
    if ((rc = eval_outcomes_read(pb, &b, err))) {
        eval_outcomes_free(&a);
        return rc;
    }
    rc = eval_outcomes_pair(&a, &b, &row->p, err);
    if (!rc) {
        snprintf(row->task, sizeof row->task, "%s", task);
        base_name(row->a_name, sizeof row->a_name, dir_a, a.step);
        base_name(row->b_name, sizeof row->b_name, dir_b, b.step);
        row->n = a.n;
        ++*npr;
    }
    eval_outcomes_free(&a);
    eval_outcomes_free(&b);
    return rc;
}

/* the latest eval against the first, when the run has two */
static int paired_since_first(const char *run_dir, const char *task, paired_row *row, int *npr,
                              dllm_err *err)
{
    char first[4400], last[4400];
    if (eval_outcomes_find(run_dir, task, false, first, sizeof first) ||
        eval_outcomes_find(run_dir, task, true, last, sizeof last) || !strcmp(first, last))
        return 0;
    return pair_files(last, run_dir, first, run_dir, task, row, npr, err);
}

static int paired_against(const char *run_dir, const char *other, const char *task,
                          paired_row *row, int *npr, dllm_err *err)
{
    char mine[4400], theirs[4400];
    if (eval_outcomes_find(run_dir, task, true, mine, sizeof mine))
        return 0;
    if (eval_outcomes_find(other, task, true, theirs, sizeof theirs))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s/eval: no %s eval outcomes to compare with",
                            other, task);
    return pair_files(mine, run_dir, theirs, other, task, row, npr, err);
}

/* Why a step metric holds no finite value in a run whose config is cfg_yaml. */
static void absent_reason(const char *name, const char *cfg_yaml, char *out, size_t cap)
{
    if (!strcmp(name, "policy_kl")) {
        const char *b = cfg_yaml ? strstr(cfg_yaml, "beta:") : NULL;
        int l = 0;
        if (b)
            while (b[5 + l] && b[5 + l] != '\n' && b[5 + l] != ',' && b[5 + l] != '}' && l < 30)
                l++;
        snprintf(out, cap, "the KL to the reference policy is computed only when grpo.beta > 0 "
                 "(this run: grpo.beta%s%.*s)", b ? ":" : " 0, the default", l, b ? b + 5 : "");
    } else if (!strcmp(name, "clip_frac")) {
        snprintf(out, cap, "no policy ratio entered the loss at any step (every group's "
                 "advantages were zero, or grpo.inner_steps is 0)");
    } else if (!strcmp(name, "grad_norm") || !strcmp(name, "lr") || !strcmp(name, "loss")) {
        snprintf(out, cap, "no update was made at any step");
    } else if (!strcmp(name, "grad_cosine") || !strcmp(name, "grad_norm_ratio")) {
        snprintf(out, cap, "computed only under log.grad_cosine: true (one extra backward per "
                 "step; host updates only), and only when both gradients are non-zero");
    } else if (!strcmp(name, "rho_ess") || !strcmp(name, "s_rel") || !strcmp(name, "delta") ||
               !strcmp(name, "s_div") || !strcmp(name, "nu") || !strcmp(name, "s_var") ||
               !strcmp(name, "k3") || !strcmp(name, "nu_total") || !strcmp(name, "nu_excess") ||
               strstr(name, "_informative")) {
        snprintf(out, cap, "no step had an informative completion (a group whose rewards "
                 "differ; diag_empty is 1 at every step): the diagnostics over them are "
                 "missing (correction.ais.population: all diagnoses every completion)");
    } else {
        snprintf(out, cap, "not computed at any step of this run (NaN in every row)");
    }
}

static void csv_num(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
}

/* Every step metric of the log as CSV, one row per step. */
static int print_csv(h5log *log, const double *steps, int64_t nsteps, dllm_err *err)
{
    double *cols[H5LOG_N_METRICS];
    const char *names[H5LOG_N_METRICS];
    int nc = 0;
    for (int i = 0; i < H5LOG_N_METRICS; i++) {
        int64_t n;
        if (h5log_read_metric(log, h5log_metric_name(i), &cols[nc], &n, err))
            continue;  /* a metric this log predates */
        if (n < nsteps) {
            free(cols[nc]);
            continue;
        }
        names[nc++] = h5log_metric_name(i);
    }
    printf("step");
    for (int c = 0; c < nc; c++)
        printf(",%s", names[c]);
    printf("\n");
    for (int64_t t = 0; t < nsteps; t++) {
        printf("%.0f", steps[t]);
        for (int c = 0; c < nc; c++) {
            printf(",");
            csv_num(cols[c][t]);
        }
        printf("\n");
    }
    for (int c = 0; c < nc; c++)
        free(cols[c]);
    return 0;
}

/* One metric's rows, or why it has none (exit 2). */
static int print_metric(h5log *log, const char *metric, const double *steps, int64_t nsteps,
                        const char *cfg_yaml, dllm_err *err)
{
    bool known = false;
    for (int i = 0; i < H5LOG_N_METRICS; i++)
        known |= !strcmp(h5log_metric_name(i), metric);
    if (!known) {
        char list[4096] = "";
        for (int i = 0; i < H5LOG_N_METRICS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     h5log_metric_name(i));
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--metric %s: not a step metric of train "
                            "(they are: %s)", metric, list);
    }
    double *v;
    int64_t n;
    if (h5log_read_metric(log, metric, &v, &n, err))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--metric %s: this log predates the metric "
                            "(written by an older version)", metric);
    bool any = false;
    for (int64_t t = 0; t < n && t < nsteps; t++)
        any |= isfinite(v[t]) != 0;
    if (!any) {
        char why[512];
        absent_reason(metric, cfg_yaml, why, sizeof why);
        free(v);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--metric %s: no value in %lld steps: %s",
                            metric, (long long)nsteps, nsteps ? why : "the run has no step yet");
    }
    printf("step %s\n", metric);
    for (int64_t t = 0; t < n && t < nsteps; t++) {
        printf("%.0f ", steps[t]);
        csv_num(v[t]);
        printf("\n");
    }
    free(v);
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    const char *target = NULL, *against = NULL, *metric = NULL;
    int json = 0, csv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--csv")) {
            csv = 1;
        } else if (!strcmp(argv[i], "--metric") && i + 1 < argc) {
            metric = argv[++i];
        } else if (!strcmp(argv[i], "--against") && i + 1 < argc) {
            against = argv[++i];
        } else if (argv[i][0] != '-' && !target) {
            target = argv[i];
        } else {
            fprintf(stderr, "dllm-rl inspect: unexpected argument '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!target) {
        usage(stderr);
        return 2;
    }
    if (json + csv + !!metric > 1) {
        fprintf(stderr, "dllm-rl inspect: --json, --csv and --metric exclude each other\n");
        return 2;
    }
    /* A run directory holds log.h5. */
    char path[4096], run_dir[4096];
    struct stat st;
    size_t tl = strlen(target);
    if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s%slog.h5", target,
                 tl && target[tl - 1] == '/' ? "" : "/");
        char sft_log[4200];
        snprintf(sft_log, sizeof sft_log, "%s/sft_log.jsonl", target);
        if (stat(path, &st) && stat(sft_log, &st) == 0) {
            if (against) {
                fprintf(stderr, "dllm-rl inspect: %s is an sft run: --against pairs the "
                        "evaluations of train runs\n", target);
                return 2;
            }
            return inspect_sft(target, json, csv, metric);
        }
        if (stat(path, &st)) {
            fprintf(stderr, "dllm-rl inspect: %s: neither log.h5 (a train run) nor "
                    "sft_log.jsonl (an sft run)\n", target);
            return 2;
        }
        snprintf(run_dir, sizeof run_dir, "%s", target);
    } else {
        snprintf(path, sizeof path, "%s", target);
        snprintf(run_dir, sizeof run_dir, "%s", target);
        char *slash = strrchr(run_dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(run_dir, sizeof run_dir, ".");
    }

    dllm_err err = {0};
    h5log *log;
    int rc = h5log_open_read(&log, path, &err);
    if (rc) {
        fprintf(stderr, "dllm-rl inspect: %s\n", err.msg);
        return rc;
    }
    const h5log_meta *m = h5log_get_meta(log);
    const h5log_dims *d = h5log_get_dims(log);
    int64_t nsteps = h5log_nsteps(log), ntraj = h5log_ntrajectories(log);

    double *steps = NULL;
    int64_t n;
    rc = h5log_read_metric(log, "step", &steps, &n, &err);
    metric_summary *ms = dllm_calloc(H5LOG_N_METRICS, sizeof *ms);
    const char **absent = dllm_calloc(H5LOG_N_METRICS, sizeof *absent); /* all-NaN metrics */
    int nms = 0, nabsent = 0;
    for (int i = 0; i < H5LOG_N_METRICS && !rc; i++) {
        double *v;
        const char *name = h5log_metric_name(i);
        int rci = h5log_read_metric(log, name, &v, &n, &err);
        if (rci)
            continue;  /* a metric this log predates */
        metric_summary s = summarise(name, v, n);
        free(v);
        if (s.n)
            ms[nms++] = s;
        else if (nsteps)
            absent[nabsent++] = name;
    }
    eval_summary *ev = dllm_calloc(d->n_eval_tasks ? (size_t)d->n_eval_tasks : 1, sizeof *ev);
    paired_row *pr = dllm_calloc(2 * (d->n_eval_tasks ? (size_t)d->n_eval_tasks : 1), sizeof *pr);
    int npr = 0;
    for (int t = 0; t < d->n_eval_tasks && !rc; t++)
        rc = read_eval(log, d->eval_tasks[t], &ev[t], &err);
    for (int t = 0; t < d->n_eval_tasks && !rc; t++) {
        rc = paired_since_first(run_dir, d->eval_tasks[t], &pr[npr], &npr, &err);
        if (!rc && against)
            rc = paired_against(run_dir, against, d->eval_tasks[t], &pr[npr], &npr, &err);
    }
    if (rc) {
        fprintf(stderr, "dllm-rl inspect: %s\n", err.msg);
        goto done;
    }

    if (csv) {
        rc = print_csv(log, steps, nsteps, &err);
    } else if (metric) {
        rc = print_metric(log, metric, steps, nsteps, m->config_yaml, &err);
        if (rc)
            fprintf(stderr, "dllm-rl inspect: %s\n", err.msg);
    } else if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "path", json_string(path));
        json_t *attrs = json_object();
        json_object_set_new(attrs, "version", json_string(m->version));
        json_object_set_new(attrs, "git_revision", json_string(m->git_revision));
        json_object_set_new(attrs, "seed", json_integer(m->seed));
        json_object_set_new(attrs, "device", json_string(m->device));
        json_object_set_new(attrs, "started", json_string(m->started));
        json_object_set_new(attrs, "machine", json_string(m->machine));
        json_object_set_new(root, "attributes", attrs);
        json_object_set_new(root, "steps", json_integer(nsteps));
        json_object_set_new(root, "first_step", nsteps ? json_integer((json_int_t)steps[0])
                                                       : json_null());
        json_object_set_new(root, "last_step", nsteps ? json_integer(
                                                            (json_int_t)steps[nsteps - 1])
                                                      : json_null());
        json_object_set_new(root, "trajectories", json_integer(ntraj));
        json_t *jm = json_object();
        for (int i = 0; i < nms; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "n", json_integer(ms[i].n));
            json_object_set_new(o, "first", jnum(ms[i].first));
            json_object_set_new(o, "last", jnum(ms[i].last));
            json_object_set_new(o, "min", jnum(ms[i].min));
            json_object_set_new(o, "max", jnum(ms[i].max));
            json_object_set_new(o, "mean", jnum(ms[i].mean));
            json_object_set_new(jm, ms[i].name, o);
        }
        json_object_set_new(root, "metrics", jm);
        json_t *ja = json_object();
        for (int i = 0; i < nabsent; i++) {
            char why[512];
            absent_reason(absent[i], m->config_yaml, why, sizeof why);
            json_object_set_new(ja, absent[i], json_string(why));
        }
        json_object_set_new(root, "absent_metrics", ja);
        json_t *je = json_object();
        for (int t = 0; t < d->n_eval_tasks; t++) {
            json_t *o = json_object();
            json_object_set_new(o, "evals", json_integer(ev[t].n));
            json_object_set_new(o, "step", ev[t].n ? json_integer((json_int_t)ev[t].step)
                                                   : json_null());
            json_object_set_new(o, "accuracy", jnum(ev[t].accuracy));
            json_object_set_new(o, "accuracy_se", jnum(ev[t].accuracy_se));
            json_object_set_new(o, "reward_mean", jnum(ev[t].reward_mean));
            json_object_set_new(je, ev[t].task, o);
        }
        json_object_set_new(root, "eval", je);
        json_t *jp = json_array();
        for (int i = 0; i < npr; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "task", json_string(pr[i].task));
            json_object_set_new(o, "a", json_string(pr[i].a_name));
            json_object_set_new(o, "b", json_string(pr[i].b_name));
            json_object_set_new(o, "n", json_integer((json_int_t)pr[i].n));
            json_object_set_new(o, "accuracy_a", jnum(pr[i].p.a));
            json_object_set_new(o, "accuracy_b", jnum(pr[i].p.b));
            json_object_set_new(o, "diff", jnum(pr[i].p.diff));
            json_object_set_new(o, "diff_se", jnum(pr[i].p.se));
            json_object_set_new(o, "only_a", json_integer((json_int_t)pr[i].p.only_a));
            json_object_set_new(o, "only_b", json_integer((json_int_t)pr[i].p.only_b));
            json_array_append_new(jp, o);
        }
        json_object_set_new(root, "paired", jp);
        json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        fputc('\n', stdout);
        json_decref(root);
    } else {
        printf("log          %s\n", path);
        printf("version      %s\n", m->version);
        printf("git_revision %s\n", m->git_revision);
        printf("seed         %lld\n", (long long)m->seed);
        printf("device       %s\n", m->device);
        printf("started      %s\n", m->started);
        if (m->machine[0])
            printf("machine      %s\n", m->machine);
        if (nsteps)
            printf("steps        %lld (step %.0f .. %.0f)\n", (long long)nsteps, steps[0],
                   steps[nsteps - 1]);
        else
            printf("steps        0\n");
        printf("trajectories %lld\n", (long long)ntraj);
        if (nms) {
            printf("\n%-22s %6s %13s %13s %13s %13s %13s  %s\n", "metric", "n", "first", "last",
                   "min", "max", "mean", "units");
            for (int i = 0; i < nms; i++) {
                const char *units = "?", *desc;
                h5log_dataset_doc("steps", ms[i].name, &units, &desc);
                printf("%-22s %6lld %13.6g %13.6g %13.6g %13.6g %13.6g  %s\n", ms[i].name,
                       (long long)ms[i].n, ms[i].first, ms[i].last, ms[i].min, ms[i].max,
                       ms[i].mean, units);
            }
        }
        if (nabsent) { /* a column of NaN is a question: answer it here */
            printf("\nabsent (NaN at every step)\n");
            for (int i = 0; i < nabsent; i++) {
                char why[512];
                absent_reason(absent[i], m->config_yaml, why, sizeof why);
                printf("%-22s %s\n", absent[i], why);
            }
        }
        if (d->n_eval_tasks) {
            printf("\n%-14s %6s %8s %10s %12s %12s\n", "eval", "evals", "step", "accuracy",
                   "accuracy_se", "reward_mean");
            for (int t = 0; t < d->n_eval_tasks; t++) {
                if (ev[t].n)
                    printf("%-14s %6lld %8.0f %10.4f %12.4f %12.4f\n", ev[t].task,
                           (long long)ev[t].n, ev[t].step, ev[t].accuracy, ev[t].accuracy_se,
                           ev[t].reward_mean);
                else
                    printf("%-14s %6d %8s\n", ev[t].task, 0, "-");
            }
        }
        if (npr) {
            printf("\npaired (same items: a - b, standard error of the per-item differences)\n");
            printf("%-10s %-28s %-28s %6s %8s %8s %9s %8s %7s %7s\n", "task", "a", "b", "n",
                   "acc_a", "acc_b", "a - b", "se", "only_a", "only_b");
            for (int i = 0; i < npr; i++)
                printf("%-10s %-28s %-28s %6zu %8.4f %8.4f %+9.4f %8.4f %7zu %7zu\n", pr[i].task,
                       pr[i].a_name, pr[i].b_name, pr[i].n, pr[i].p.a, pr[i].p.b, pr[i].p.diff,
                       pr[i].p.se, pr[i].p.only_a, pr[i].p.only_b);
        }
    }
done:
    free(absent);
    free(pr);
    free(ev);
    free(ms);
    free(steps);
    h5log_close(log);
    return rc;
}
