/* sweep_summary.c: run states and results from run directories, and the summary
 * tables of a sweep (definitions in sweep_summary.h). */
#include "src/sweep/sweep_summary.h"

#include "src/log/h5log.h"
#include "src/config/yaml_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t sweep_collapse_step(const double *step, const double *acc, int64_t n, double frac)
{
    double best = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(acc[i]))
            continue;
        best = acc[i] > best ? acc[i] : best;
        const double thr = frac * best;
        if (!(best > 0.0) || !(acc[i] < thr))
            continue;
        bool recovers = false;
        for (int64_t j = i + 1; j < n && !recovers; j++)
            recovers = isfinite(acc[j]) && acc[j] >= thr;
        if (!recovers)
            return (int64_t)step[i];
    }
    return -1;
}

const char *sweep_status_name(sweep_status s)
{
    static const char *const names[] = {"missing", "incomplete", "failed", "done"};
    return (unsigned)s < 4 ? names[s] : "?";
}

static double mean_finite(const double *v, int64_t n, bool absolute)
{
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += absolute ? fabs(v[i]) : v[i];
            k++;
        }
    return k ? s / (double)k : NAN;
}

int sweep_read_result(const char *run_dir, sweep_result *r, dllm_err *err)
{
    *r = (sweep_result){.status = RUN_MISSING, .final_accuracy = NAN, .final_accuracy_se = NAN,
                        .best_accuracy = NAN, .collapse_step = -1, .mean_alpha = NAN,
                        .mean_rho_ess = NAN, .mean_abs_log_w = NAN,
                        .mean_abs_log_w_tok = NAN, .seconds = NAN,
                        .target_steps = -1};
    char p[4200];
    /* the last attempt's exit status, when the sweep ran it */
    snprintf(p, sizeof p, "%s/sweep-exit", run_dir);
    FILE *f = fopen(p, "r");
    int code = 0;
    if (f && fscanf(f, "exit %d", &code) != 1)
        code = 0;
    if (f)
        fclose(f);
    snprintf(p, sizeof p, "%s/log.h5", run_dir);
    if (access(p, F_OK) != 0) {
        /* a run can fail before it writes a log (a bad config) */
        if (code != 0) {
            r->status = RUN_FAILED;
            r->exit_code = code;
        }
        return 0;
    }
    r->status = RUN_INCOMPLETE;
    char cfgpath[4200];
    snprintf(cfgpath, sizeof cfgpath, "%s/config.yaml", run_dir);
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    if (dllm_cfg_load(&cfg, cfgpath, err))
        return err->code;
    r->target_steps = cfg.grpo.steps;
    h5log *log;
    if (h5log_open_read(&log, p, err))
        return err->code;
    r->steps = h5log_nsteps(log);
    double *v = NULL;
    int64_t n = 0;
    int rc = 0;
    if (!(rc = h5log_read_metric(log, "alpha", &v, &n, err)))
        r->mean_alpha = mean_finite(v, n, false);
    free(v);
    v = NULL;
    if (!rc && !(rc = h5log_read_metric(log, "rho_ess", &v, &n, err)))
        r->mean_rho_ess = mean_finite(v, n, false);
    free(v);
    v = NULL;
    static const char *const times[] = {"t_rollout", "t_likelihood", "t_correction", "t_update",
                                        "t_sync", "t_log"};
    if (!rc && r->steps > 0)
        r->seconds = 0;
    for (int k = 0; k < 6 && !rc && r->steps > 0; k++) {
        if (!(rc = h5log_read_metric(log, times[k], &v, &n, err)))
            for (int64_t i = 0; i < n; i++)
                r->seconds += isfinite(v[i]) ? v[i] : 0.0;
        free(v);
        v = NULL;
    }
    double *len = NULL;
    int64_t nl = 0;
    if (!rc && h5log_ntrajectories(log) > 0 &&
        !(rc = h5log_read_column(log, "trajectories/log_w", &v, &n, err)) &&
        !(rc = h5log_read_column(log, "trajectories/completion_len", &len, &nl, err))) {
        r->mean_abs_log_w = mean_finite(v, n, true);
        /* per token: the mismatch whatever the completions' lengths (|log w| / L) */
        for (int64_t i = 0; i < n && i < nl; i++)
            v[i] = len[i] > 0 ? v[i] / len[i] : NAN;
        r->mean_abs_log_w_tok = mean_finite(v, n < nl ? n : nl, true);
    }
    free(v);
    free(len);
    v = NULL;
    /* evaluations of the run's task (none logged yet is not an error) */
    char ds[256];
    double *es = NULL, *acc = NULL, *se = NULL;
    int64_t ne = 0, na = 0, ns = 0;
    dllm_err e2 = {0};
    const char *task = cfg_names_name(&cfg_names_task, cfg.task.name);
    snprintf(ds, sizeof ds, "eval/%s/step", task);
    if (!rc && !h5log_read_column(log, ds, &es, &ne, &e2)) {
        snprintf(ds, sizeof ds, "eval/%s/accuracy", task);
        if (!h5log_read_column(log, ds, &acc, &na, &e2)) {
            snprintf(ds, sizeof ds, "eval/%s/accuracy_se", task);
            if (!h5log_read_column(log, ds, &se, &ns, &e2)) {
                const int64_t m = ne < na ? (ne < ns ? ne : ns) : (na < ns ? na : ns);
                if (m > 0) {
                    r->final_accuracy = acc[m - 1];
                    r->final_accuracy_se = se[m - 1];
                    r->best_accuracy = -INFINITY;
                    for (int64_t i = 0; i < m; i++)
                        if (isfinite(acc[i]) && acc[i] > r->best_accuracy)
                            r->best_accuracy = acc[i];
                    if (!isfinite(r->best_accuracy))
                        r->best_accuracy = NAN;
                    r->collapse_step = sweep_collapse_step(es, acc, m, SWEEP_COLLAPSE_FRAC);
                }
            }
        }
    }
    free(es);
    free(acc);
    free(se);
    h5log_close(log);
    if (rc)
        return rc;

    char link[4200], target[256], want[64];
    snprintf(link, sizeof link, "%s/ckpt/latest", run_dir);
    ssize_t k = readlink(link, target, sizeof target - 1);
    r->resumable = k > 0;
    if (k > 0) {
        target[k] = '\0';
        snprintf(want, sizeof want, "step-%lld", (long long)r->target_steps);
        if (!strcmp(target, want) && r->steps >= r->target_steps)
            r->status = RUN_DONE;
    }
    if (r->status != RUN_DONE && code != 0) {
        r->status = RUN_FAILED;
        r->exit_code = code;
    }
    return 0;
}

/* ---- tables ------------------------------------------------------------------------ */

enum { COL_FINAL, COL_FINAL_SE, COL_BEST, COL_ALPHA, COL_RHO, COL_LOGW, COL_LOGW_TOK, COL_SECONDS,
       N_VCOL };
static const char *const vcol_names[N_VCOL] = {"final_accuracy", "final_accuracy_se",
                                               "best_accuracy", "mean_alpha", "mean_rho_ess",
                                               "mean_abs_log_w", "mean_abs_log_w_tok", "seconds"};

static void values_of(const sweep_result *r, double *v)
{
    v[COL_FINAL] = r->final_accuracy;
    v[COL_FINAL_SE] = r->final_accuracy_se;
    v[COL_BEST] = r->best_accuracy;
    v[COL_ALPHA] = r->mean_alpha;
    v[COL_RHO] = r->mean_rho_ess;
    v[COL_LOGW] = r->mean_abs_log_w;
    v[COL_LOGW_TOK] = r->mean_abs_log_w_tok;
    v[COL_SECONDS] = r->seconds;
}

/* a number, or nothing for NaN */
static void num(char *out, size_t n, double v)
{
    if (isfinite(v))
        snprintf(out, n, "%.6g", v);
    else
        out[0] = '\0';
}

/* CSV field: quoted when it holds a comma, quote or newline */
static void csv_field(FILE *f, const char *s, bool last)
{
    if (strpbrk(s, ",\"\n")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
    fputc(last ? '\n' : ',', f);
}

static void status_text(const sweep_result *r, char *out, size_t n)
{
    if (r->status == RUN_FAILED)
        snprintf(out, n, "failed (exit %d)", r->exit_code);
    else
        snprintf(out, n, "%s", sweep_status_name(r->status));
}

/* mean and standard error (sample sd / sqrt(k)) over finite values */
static void mean_se(const double *v, int k, double *mean, double *se)
{
    double s = 0, s2 = 0;
    int m = 0;
    for (int i = 0; i < k; i++)
        if (isfinite(v[i])) {
            s += v[i];
            m++;
        }
    *mean = m ? s / m : NAN;
    for (int i = 0; i < k; i++)
        if (isfinite(v[i]))
            s2 += (v[i] - *mean) * (v[i] - *mean);
    *se = m > 1 ? sqrt(s2 / (m - 1) / m) : NAN;
}

int sweep_write_summary(const sweep_file *sf, const sweep_run *runs, int n_runs,
                        const sweep_result *res, const char *dir, dllm_err *err)
{
    char pc[4200], pm[4200], tc[4300], tm[4300];
    snprintf(pc, sizeof pc, "%s/summary.csv", dir);
    snprintf(pm, sizeof pm, "%s/summary.md", dir);
    snprintf(tc, sizeof tc, "%s.tmp", pc);
    snprintf(tm, sizeof tm, "%s.tmp", pm);
    FILE *c = fopen(tc, "w"), *m = fopen(tm, "w");
    if (!c || !m) {
        if (c)
            fclose(c);
        if (m)
            fclose(m);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write: %s", dir, strerror(errno));
    }
    /* header: run, arm, grid keys, status, steps, the values, collapse_step */
    csv_field(c, "run", false);
    csv_field(c, "arm", false);
    fprintf(m, "# Sweep %s\n\nBase config `%s`; %d runs.\n\n| run | arm |", sf->name, sf->base,
            n_runs);
    for (int g = 0; g < sf->n_grid; g++) {
        csv_field(c, sf->grid[g].key, false);
        fprintf(m, " %s |", sf->grid[g].key);
    }
    csv_field(c, "status", false);
    csv_field(c, "steps", false);
    fprintf(m, " status | steps |");
    for (int k = 0; k < N_VCOL; k++) {
        csv_field(c, vcol_names[k], false);
        if (k != COL_FINAL_SE)
            fprintf(m, " %s |", k == COL_FINAL ? "final_accuracy (se)" : vcol_names[k]);
        if (k == COL_BEST) {
            csv_field(c, "collapse_step", false);
            fprintf(m, " collapse_step |");
        }
    }
    fseek(c, -1, SEEK_CUR); /* the last field ends the line */
    fputc('\n', c);
    fprintf(m, "\n|");
    for (int k = 0; k < 2 + sf->n_grid + 2 + N_VCOL; k++)
        fprintf(m, "---|");
    fputc('\n', m);

    char b[64], b2[64];
    for (int r = 0; r < n_runs; r++) {
        const sweep_result *x = &res[r];
        double v[N_VCOL];
        values_of(x, v);
        csv_field(c, runs[r].name, false);
        csv_field(c, sf->arms[runs[r].arm].name, false);
        fprintf(m, "| %s | %s |", runs[r].name, sf->arms[runs[r].arm].name);
        for (int g = 0; g < sf->n_grid; g++) {
            const char *val = sf->grid[g].values[runs[r].grid_index[g]].value;
            csv_field(c, val, false);
            fprintf(m, " %s |", val);
        }
        status_text(x, b, sizeof b);
        csv_field(c, b, false);
        fprintf(m, " %s |", b);
        snprintf(b, sizeof b, "%lld", (long long)x->steps);
        csv_field(c, x->status == RUN_MISSING ? "" : b, false);
        fprintf(m, " %s |", x->status == RUN_MISSING ? "" : b);
        for (int k = 0; k < N_VCOL; k++) {
            num(b, sizeof b, v[k]);
            csv_field(c, b, false);
            if (k == COL_FINAL) {
                num(b2, sizeof b2, v[COL_FINAL_SE]);
                fprintf(m, " %s%s%s |", b, b2[0] ? " +- " : "", b2);
            } else if (k != COL_FINAL_SE) {
                fprintf(m, " %s |", b);
            }
            if (k == COL_BEST) {
                snprintf(b, sizeof b, "%lld", (long long)x->collapse_step);
                csv_field(c, x->collapse_step >= 0 ? b : "", false);
                fprintf(m, " %s |", x->collapse_step >= 0 ? b : "");
            }
        }
        fseek(c, -1, SEEK_CUR);
        fputc('\n', c);
        fputc('\n', m);
    }

    /* per arm: mean and standard error over its done runs (two CSV rows) */
    fprintf(m, "\nPer arm, over its done runs: mean +- standard error (sample sd / sqrt(n)); "
               "collapsed: runs with a collapse step.\n\n| arm | runs done | collapsed |");
    for (int k = 0; k < N_VCOL; k++)
        if (k != COL_FINAL_SE)
            fprintf(m, " %s |", vcol_names[k]);
    fprintf(m, "\n|---|---|---|");
    for (int k = 0; k < N_VCOL - 1; k++)
        fprintf(m, "---|");
    fputc('\n', m);
    double *vals = dllm_malloc(sizeof(double) * (size_t)(n_runs + 1) * N_VCOL);
    for (int a = 0; a < sf->n_arms; a++) {
        int k = 0, collapsed = 0;
        for (int r = 0; r < n_runs; r++)
            if (runs[r].arm == a && res[r].status == RUN_DONE) {
                values_of(&res[r], vals + (size_t)k * N_VCOL);
                collapsed += res[r].collapse_step >= 0;
                k++;
            }
        double mean[N_VCOL], se[N_VCOL];
        for (int j = 0; j < N_VCOL; j++) {
            double *col = dllm_malloc(sizeof(double) * (size_t)(k + 1));
            for (int i = 0; i < k; i++)
                col[i] = vals[(size_t)i * N_VCOL + j];
            mean_se(col, k, &mean[j], &se[j]);
            free(col);
        }
        const char *an = sf->arms[a].name[0] ? sf->arms[a].name : "(all)";
        for (int row = 0; row < 2; row++) {
            char rn[300];
            snprintf(rn, sizeof rn, "%s:%s", row ? "se" : "mean", an);
            csv_field(c, rn, false);
            csv_field(c, sf->arms[a].name, false);
            for (int g = 0; g < sf->n_grid; g++)
                csv_field(c, "", false);
            snprintf(b, sizeof b, "n=%d", k);
            csv_field(c, b, false);
            csv_field(c, "", false); /* steps */
            for (int j = 0; j < N_VCOL; j++) {
                num(b, sizeof b, row ? se[j] : mean[j]);
                csv_field(c, b, false);
                if (j == COL_BEST) {
                    snprintf(b, sizeof b, "%d", collapsed);
                    csv_field(c, row ? "" : b, false);
                }
            }
            fseek(c, -1, SEEK_CUR);
            fputc('\n', c);
        }
        fprintf(m, "| %s | %d | %d |", an, k, collapsed);
        for (int j = 0; j < N_VCOL; j++) {
            if (j == COL_FINAL_SE)
                continue;
            num(b, sizeof b, mean[j]);
            num(b2, sizeof b2, se[j]);
            fprintf(m, " %s%s%s |", b, b2[0] ? " +- " : "", b2);
        }
        fputc('\n', m);
    }
    free(vals);
    fprintf(m, "\nStatus: done (the last checkpoint written), incomplete (interrupted or "
               "running), failed (the last attempt's exit status), missing (not started). "
               "Collapse: the first evaluation below %g x the best accuracy so far that never "
               "recovers to it. seconds: the sum of the logged step times.\n",
            SWEEP_COLLAPSE_FRAC);
    int bad = ferror(c) || ferror(m);
    bad |= fclose(c) != 0;
    bad |= fclose(m) != 0;
    if (bad || rename(tc, pc) || rename(tm, pm))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write the summary: %s", dir,
                            strerror(errno));
    return 0;
}
