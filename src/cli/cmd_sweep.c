/* cmd_sweep.c: `dllm-rl sweep SWEEP.yaml [--jobs N] [--dry-run] [--summary]`: runs
 * every arm x grid point of a sweep file (src/sweep/sweep_file.h) as a child `train`
 * process of this binary, N at once, skipping finished runs and resuming
 * interrupted ones, then writes the summary tables (src/sweep/sweep_summary.h). */
#include "src/cli/commands.h"
#include "src/cli/cli_util.h"
#include "src/run/run_dir.h"
#include "src/sweep/sweep_file.h"
#include "src/sweep/sweep_summary.h"

#include "kernels/base.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dllm-rl sweep SWEEP.yaml [--jobs N] [--arms A,B,...] [--dry-run] [--summary]\n\n"
            "Runs every arm x grid point of SWEEP.yaml as `dllm-rl train BASE --set ...`\n"
            "into LOG_DIR/NAME/RUN (LOG_DIR: the base config's log.dir), N runs at once\n"
            "(--jobs, default 1) with the OpenMP threads (OMP_NUM_THREADS, else the\n"
            "cores) divided between them, grid point by grid point (every arm of the\n"
            "first point, then of the next), so a sweep stopped part way holds whole\n"
            "comparisons. A finished run is skipped, an interrupted one\n"
            "continues with `train --resume` (or starts again when it wrote no\n"
            "checkpoint), a failed one is reported while the others go on. Each run's\n"
            "output goes to RUN/train.log. Then LOG_DIR/NAME/summary.csv and summary.md:\n"
            "one row per run and, per arm, the mean and standard error over its done runs.\n"
            "  --arms     run only these arms' runs (the summary still lists every run)\n"
            "  --dry-run  list the runs, their state and their overrides; run nothing\n"
            "  --summary  rebuild the summary from the run directories alone\n\n"
            "exit status: 0 every run done, 1 a run failed (or internal failure), 2 bad\n"
            "input (the sweep file's errors name file:line:col)\n");
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

typedef struct {
    pid_t pid;
    int run;
    double t0;
} child;

static void run_dir_of(const char *sweep_dir, const sweep_run *r, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", sweep_dir, r->name);
}

/* Starts one run: fresh (train BASE --set ...) or resumed (train --resume DIR). */
static pid_t start_run(const sweep_file *sf, const sweep_run *r, const char *sweep_dir,
                       const char *run_dir, bool resume, int threads)
{
    char logp[4200], exe[4096];
    snprintf(logp, sizeof logp, "%s/train.log", run_dir);
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0)
        snprintf(exe, sizeof exe, "dllm-rl");
    else
        exe[k] = '\0';
    /* a binary replaced on disk since the sweep started (a rebuild) reads "PATH (deleted)" */
    const char *gone = " (deleted)";
    size_t el = strlen(exe), gl = strlen(gone);
    if (el > gl && !strcmp(exe + el - gl, gone))
        exe[el - gl] = '\0';
    const pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* the child: dies with the sweep, writes to RUN/train.log */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    char th[32];
    snprintf(th, sizeof th, "%d", threads);
    setenv("OMP_NUM_THREADS", th, 1);
    const int max_args = 2 * r->n_sets + 16;
    char **argv = dllm_malloc(sizeof *argv * (size_t)max_args);
    char logdir[4200], exper[1200];
    snprintf(logdir, sizeof logdir, "log.dir=%s", sweep_dir);
    snprintf(exper, sizeof exper, "experiment=%s", r->name);
    int a = 0;
    argv[a++] = exe;
    argv[a++] = "train";
    if (resume) {
        argv[a++] = "--resume";
        argv[a++] = (char *)run_dir;
    } else {
        argv[a++] = sf->base;
        for (int i = 0; i < r->n_sets; i++) {
            argv[a++] = "--set";
            argv[a++] = r->sets[i];
        }
        argv[a++] = "--set";
        argv[a++] = logdir;
        argv[a++] = "--set";
        argv[a++] = exper;
    }
    argv[a] = NULL;
    /* every run with the binary the sweep started with, even when a rebuild has replaced
     * it on disk since: its image stays reachable through /proc/self/exe */
    execv("/proc/self/exe", argv);
    execv(exe, argv);
    execvp("dllm-rl", argv);
    fprintf(stderr, "dllm-rl sweep: cannot run %s: %s\n", exe, strerror(errno));
    _exit(127);
}

static int total_threads(void)
{
    const char *e = getenv("OMP_NUM_THREADS");
    int t = e ? atoi(e) : 0;
    if (t < 1)
        t = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return t < 1 ? 1 : t;
}

static void write_exit(const char *run_dir, int code)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/sweep-exit", run_dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fprintf(f, "exit %d\n", code);
        fclose(f);
    }
}

static int read_all(const char *sweep_dir, const sweep_run *runs, int n, sweep_result *res,
                    dllm_err *err)
{
    char rd[4200];
    for (int r = 0; r < n; r++) {
        run_dir_of(sweep_dir, &runs[r], rd, sizeof rd);
        if (sweep_read_result(rd, &res[r], err))
            return err->code;
    }
    return 0;
}

/* The k-th run to start: grid point by grid point, every arm of a point before the
 * next point (runs are stored arms outer), so that a sweep stopped part way, or still
 * running, already holds whole comparisons (every arm of seed 1, then of seed 2, ...). */
static int run_at(const sweep_file *sf, int n, int k)
{
    const int per_arm = n / sf->n_arms;
    return (k % sf->n_arms) * per_arm + k / sf->n_arms;
}

/* Marks in arm_on (sf->n_arms) the arms a --arms list names (NULL: every arm); an
 * unknown name is an input error naming it and the arms there are. */
static int select_arms(const sweep_file *sf, const char *list, bool *arm_on, dllm_err *err)
{
    for (int a = 0; a < sf->n_arms; a++)
        arm_on[a] = list == NULL;
    if (!list)
        return 0;
    char *copy = dllm_malloc(strlen(list) + 1), *save = NULL;
    strcpy(copy, list);
    int rc = 0, named = 0;
    for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        int a = 0;
        while (a < sf->n_arms && strcmp(sf->arms[a].name, t))
            a++;
        if (a == sf->n_arms) {
            char known[1024] = "";
            for (int b = 0; b < sf->n_arms; b++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", b ? ", " : "",
                         sf->arms[b].name);
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "--arms: %s: no arm '%s' (its arms: %s)",
                              sf->path, t, known);
        } else {
            arm_on[a] = true;
            named++;
        }
    }
    if (!rc && !named)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "--arms: no arm named in '%s'", list);
    free(copy);
    return rc;
}

static int dry_run(const sweep_file *sf, const sweep_run *runs, int n, const sweep_result *res,
                   const char *sweep_dir, const bool *arm_on)
{
    int ns = 0;
    for (int r = 0; r < n; r++)
        ns += arm_on[runs[r].arm];
    printf("sweep %s: %d runs in %s (base %s), in the order they run\n", sf->name, ns, sweep_dir,
           sf->base);
    for (int k = 0; k < n; k++) {
        const int r = run_at(sf, n, k);
        if (!arm_on[runs[r].arm])
            continue;
        const sweep_result *x = &res[r];
        const char *what = x->status == RUN_DONE       ? "skip (done)"
                           : x->status == RUN_MISSING  ? "start"
                           : x->resumable              ? "resume"
                                                       : "restart (no checkpoint)";
        printf("  %-40s %-10s %s:", runs[r].name, sweep_status_name(x->status), what);
        for (int i = 0; i < runs[r].n_sets; i++)
            printf(" %s", runs[r].sets[i]);
        printf("\n");
    }
    return 0;
}

static int execute(const sweep_file *sf, const sweep_run *runs, int n, sweep_result *res,
                   const char *sweep_dir, int jobs, const bool *arm_on, dllm_err *err)
{
    const int threads = total_threads() / jobs > 0 ? total_threads() / jobs : 1;
    int *queue = dllm_malloc(sizeof *queue * (size_t)(n + 1));
    bool *resume = dllm_calloc((size_t)n + 1, sizeof *resume);
    int nq = 0, failed = 0;
    char rd[4200], p[4300];
    int ns = 0; /* the runs of the selected arms */
    for (int k = 0; k < n; k++) {
        const int r = run_at(sf, n, k);
        if (!arm_on[runs[r].arm])
            continue;
        ns++;
        if (res[r].status == RUN_DONE) {
            printf("skip %s (done)\n", runs[r].name);
            continue;
        }
        run_dir_of(sweep_dir, &runs[r], rd, sizeof rd);
        long writer = run_dir_writer(rd);
        if (writer) { /* another process runs it (another sweep of the same file) */
            printf("skip %s (being written by pid %ld)\n", runs[r].name, writer);
            continue;
        }
        if (res[r].status != RUN_MISSING && !res[r].resumable) {
            /* interrupted before its first checkpoint: nothing to resume from */
            snprintf(p, sizeof p, "%s/log.h5", rd);
            unlink(p);
        }
        resume[r] = res[r].status != RUN_MISSING && res[r].resumable;
        queue[nq++] = r;
    }
    printf("sweep %s: %d of %d runs to do, %d at once, %d threads each\n", sf->name, nq, ns, jobs,
           threads);
    child *kids = dllm_calloc((size_t)jobs, sizeof *kids);
    int running = 0, next = 0, rc = 0;
    while ((next < nq || running > 0) && !rc) {
        while (!stop_signal && running < jobs && next < nq) {
            const int r = queue[next++];
            run_dir_of(sweep_dir, &runs[r], rd, sizeof rd);
            if ((rc = cli_mkdirs(rd, err)))
                break;
            unlink(strcat(strcpy(p, rd), "/sweep-exit"));
            pid_t pid = start_run(sf, &runs[r], sweep_dir, rd, resume[r], threads);
            if (pid < 0) {
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "fork: %s", strerror(errno));
                break;
            }
            for (int j = 0; j < jobs; j++)
                if (!kids[j].pid) {
                    kids[j] = (child){pid, r, dllm_now()};
                    break;
                }
            running++;
            printf("[%d/%d] %s %s\n", next, nq, resume[r] ? "resume" : "start", runs[r].name);
            fflush(stdout);
        }
        if (running == 0)
            break;
        if (stop_signal) /* again on every pass: a signal may land between the checks */
            for (int j = 0; j < jobs; j++)
                if (kids[j].pid)
                    kill(kids[j].pid, SIGTERM);
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "waitpid: %s", strerror(errno));
            break;
        }
        for (int j = 0; j < jobs; j++) {
            if (kids[j].pid != pid)
                continue;
            const int r = kids[j].run;
            run_dir_of(sweep_dir, &runs[r], rd, sizeof rd);
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (!stop_signal || code == 0)
                write_exit(rd, code);
            if (code == 0) {
                printf("done %s (%.1f s)\n", runs[r].name, dllm_now() - kids[j].t0);
            } else if (!stop_signal) {
                failed++;
                printf("FAILED %s (exit %d): see %s/train.log\n", runs[r].name, code, rd);
            }
            fflush(stdout);
            kids[j].pid = 0;
            running--;
        }
    }
    free(kids);
    free(queue);
    free(resume);
    if (rc)
        return rc;
    if (stop_signal)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "stopped by signal %d; run the sweep again to "
                            "finish it", (int)stop_signal);
    if ((rc = read_all(sweep_dir, runs, n, res, err)))
        return rc;
    if ((rc = sweep_write_summary(sf, runs, n, res, sweep_dir, err)))
        return rc;
    printf("summary: %s/summary.csv, %s/summary.md\n", sweep_dir, sweep_dir);
    if (failed)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%d of %d runs failed", failed, nq);
    return 0;
}

int cmd_sweep(int argc, char **argv)
{
    static const struct option opts[] = {{"jobs", required_argument, 0, 'j'},
                                         {"arms", required_argument, 0, 'a'},
                                         {"dry-run", no_argument, 0, 'd'},
                                         {"summary", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long jobs = 1;
    bool dry = false, summary = false;
    const char *arms = NULL;
    dllm_err err = {0};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'j':
            if (cli_parse_int(optarg, "--jobs", 1, 1024, &jobs, &err))
                return cli_fail("sweep", &err);
            break;
        case 'a': arms = optarg; break;
        case 'd': dry = true; break;
        case 's': summary = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return DLLM_EXIT_INPUT;
        }
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return DLLM_EXIT_INPUT;
    }
    sweep_file sf;
    if (sweep_file_load(&sf, argv[optind], &err))
        return cli_fail("sweep", &err);
    sweep_run *runs = NULL;
    int n = 0, rc = sweep_expand(&sf, &runs, &n, &err);
    bool *arm_on = dllm_calloc((size_t)sf.n_arms + 1, sizeof *arm_on);
    if (!rc)
        rc = select_arms(&sf, arms, arm_on, &err);
    char sweep_dir[4200];
    snprintf(sweep_dir, sizeof sweep_dir, "%s/%s", sf.log_dir, sf.name);
    sweep_result *res = dllm_calloc((size_t)n + 1, sizeof *res);
    if (!rc)
        rc = read_all(sweep_dir, runs, n, res, &err);
    int lock = -1;
    if (!rc && dry) {
        rc = dry_run(&sf, runs, n, res, sweep_dir, arm_on);
    } else if (!rc && summary) {
        if (!(rc = cli_mkdirs(sweep_dir, &err)) &&
            !(rc = sweep_write_summary(&sf, runs, n, res, sweep_dir, &err)))
            printf("summary: %s/summary.csv, %s/summary.md\n", sweep_dir, sweep_dir);
    } else if (!rc) {
        char lp[4300];
        snprintf(lp, sizeof lp, "%s/.sweep.lock", sweep_dir);
        if (!(rc = cli_mkdirs(sweep_dir, &err))) {
            lock = open(lp, O_RDWR | O_CREAT, 0644);
            if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB))
                rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "%s: another sweep is running in %s",
                                  argv[optind], sweep_dir);
        }
        if (!rc) {
            struct sigaction sa = {0};
            sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns EINTR */
            sigaction(SIGINT, &sa, NULL);
            sigaction(SIGTERM, &sa, NULL);
            rc = execute(&sf, runs, n, res, sweep_dir, (int)jobs, arm_on, &err);
        }
    }
    if (lock >= 0)
        close(lock);
    free(res);
    free(arm_on);
    sweep_runs_free(runs, n);
    sweep_file_free(&sf);
    if (rc)
        cli_fail("sweep", &err);
    return rc;
}
