/* run_dir.c: a run directory's name, lock, --force replacement, failed-start
 * cleanup and config record (src/run/run_dir.h). */
#include "src/run/run_dir.h"

#include "src/cli/cli_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- the lock -------------------------------------------------------------------- */

/* flock on dir/.lock, which then holds our pid. The holder removes the file as it
 * ends, so after locking, the file must still be the one at the path (else lock the
 * new one). A file system without flock gets a warning: nothing refuses a second
 * writer there. */
static int lock_dir(const char *dir, int *out, dllm_err *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    for (int tries = 0; tries < 16; tries++) {
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create the run's lock file: %s",
                                p, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            int e = errno;
            if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
                fprintf(stderr, "dllm-rl: warning: %s: no file locks here (%s): a second writer "
                        "of this run would not be refused\n", p, strerror(e));
                *out = fd;
                return 0;
            }
            char buf[32] = "";
            ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
            buf[k > 0 ? k : 0] = '\0';
            close(fd);
            long pid = atol(buf);
            if (e != EWOULDBLOCK)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot lock: %s", p, strerror(e));
            if (pid > 0)
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "%s is being written by another process (pid %ld holds %s): two "
                                    "writers would corrupt the run; wait for it to end, or stop it "
                                    "(kill -INT %ld: it checkpoints and exits) and run this again",
                                    dir, pid, p, pid);
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s is being written by another process (it holds %s): two writers "
                                "would corrupt the run; wait for it to end and run this again",
                                dir, p);
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            char buf[32];
            int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) || pwrite(fd, buf, (size_t)n, 0) != n) {
                int e = errno;
                close(fd);
                return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write: %s", p, strerror(e));
            }
            *out = fd;
            return 0;
        }
        close(fd);
    }
    return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: the lock file keeps being replaced", p);
}

/* Removes dir/.lock, then lets go of it (in that order: a process that locks the
 * removed file after us sees that it is no longer the one at the path). */
static void unlock_dir(const char *dir, int *fd)
{
    if (*fd < 0)
        return;
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    unlink(p);
    close(*fd);
    *fd = -1;
}

long run_dir_writer(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long pid = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) && errno == EWOULDBLOCK) {
        char buf[32] = "";
        ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
        buf[k > 0 ? k : 0] = '\0';
        pid = atol(buf) > 0 ? atol(buf) : -1;
    }
    close(fd); /* a shared lock taken here goes with it */
    return pid;
}

/* ---- opening ---------------------------------------------------------------------- */

void run_dir_init(run_dir_hold *rd, const char *dir)
{
    memset(rd, 0, sizeof *rd);
    rd->lock_fd = rd->old_fd = -1;
    snprintf(rd->final_, sizeof rd->final_, "%s", dir);
    snprintf(rd->path, sizeof rd->path, "%s", dir);
}

int run_dir_open_new(run_dir_hold *rd, const char *dir, bool force, run_dir_refuse_fn refuse,
                     void *ctx, dllm_err *err)
{
    run_dir_init(rd, dir);
    struct stat st;
    if (lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s exists and is not a directory: the run directory must be one "
                            "(set another experiment name or log.dir)", dir);
    if (lstat(dir, &st)) {
        /* the highest missing directory on the way: a failed start removes from there */
        char p[4096];
        snprintf(p, sizeof p, "%s", dir);
        snprintf(rd->made_from, sizeof rd->made_from, "%s", dir);
        for (char *c = p + 1; *c; c++)
            if (*c == '/') {
                *c = '\0';
                bool missing = lstat(p, &st) != 0;
                *c = '/';
                if (missing) {
                    snprintf(rd->made_from, sizeof rd->made_from, "%.*s", (int)(c - p), p);
                    break;
                }
            }
        if (cli_mkdirs(dir, err))
            return err->code;
        rd->created = true;
    }
    if (lock_dir(dir, &rd->lock_fd, err)) {
        if (rd->created)
            rmdir(dir);
        rd->created = false;
        return err->code;
    }
    if (force && cli_dir_has_entries_except(dir, ".lock")) {
        /* the old run stays as it is, locked, until the new one has a step */
        rd->old_fd = rd->lock_fd;
        rd->lock_fd = -1;
        size_t l = strlen(dir);
        while (l > 1 && dir[l - 1] == '/')
            l--;
        const char *b = dir + l;
        while (b > dir && b[-1] != '/')
            b--;
        snprintf(rd->stage, sizeof rd->stage, "%.*s.%.*s.force", (int)(b - dir), dir,
                 (int)(dir + l - b), b);
        cli_rm_tree(rd->stage); /* left by a --force that was killed: ours, as we hold the lock */
        if (cli_mkdirs(rd->stage, err) || lock_dir(rd->stage, &rd->lock_fd, err)) {
            cli_rm_tree(rd->stage);
            unlock_dir(dir, &rd->old_fd);
            return err->code;
        }
        snprintf(rd->path, sizeof rd->path, "%s", rd->stage);
        rd->opened = true;
        return 0;
    }
    if (!force && refuse && refuse(dir, ctx, err)) {
        unlock_dir(dir, &rd->lock_fd);
        if (rd->created)
            rmdir(dir);
        return err->code;
    }
    /* what is there already stays whatever happens (a sweep's train.log) */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".lock"))
            continue;
        rd->before = dllm_realloc(rd->before, sizeof *rd->before * (size_t)(rd->n_before + 1));
        rd->before[rd->n_before++] = dllm_strdup(e->d_name);
    }
    if (d)
        closedir(d);
    rd->opened = true;
    return 0;
}

int run_dir_open_resume(run_dir_hold *rd, const char *dir, dllm_err *err)
{
    run_dir_init(rd, dir);
    rd->started = true;
    if (lock_dir(dir, &rd->lock_fd, err))
        return err->code;
    rd->opened = true;
    return 0;
}

/* Swaps the directories a and b (renameat2's exchange: no moment without a run
 * directory); where the kernel lacks it, a goes aside to a + ".old" first. */
static int exchange(const char *a, const char *b, char *aside, size_t n)
{
#if defined(__linux__) && defined(SYS_renameat2)
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */) == 0) {
        snprintf(aside, n, "%s", a);
        return 0;
    }
#endif
    snprintf(aside, n, "%s.old", a);
    cli_rm_tree(aside);
    if (rename(b, aside))
        return -1;
    if (rename(a, b)) {
        int e = errno;
        rename(aside, b);
        errno = e;
        return -1;
    }
    return 0;
}

int run_dir_started(run_dir_hold *rd, dllm_err *err)
{
    if (rd->started)
        return 0;
    rd->started = true;
    if (rd->old_fd < 0)
        return 0;
    char aside[4300];
    if (exchange(rd->stage, rd->final_, aside, sizeof aside))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "%s: cannot replace the old run with the new one (%s): the new run is "
                            "in %s", rd->final_, strerror(errno), rd->stage);
    snprintf(rd->path, sizeof rd->path, "%s", rd->final_);
    /* the old run, now at aside: its lock goes with it */
    close(rd->old_fd);
    rd->old_fd = -1;
    cli_rm_tree(aside);
    return 0;
}

void run_dir_close(run_dir_hold *rd)
{
    if (!rd->opened)
        return;
    rd->opened = false;
    if (!rd->started) {
        if (rd->old_fd >= 0) {
            unlock_dir(rd->stage, &rd->lock_fd);
            cli_rm_tree(rd->stage);
        } else if (rd->created) {
            unlock_dir(rd->final_, &rd->lock_fd);
            cli_rm_tree(rd->final_);
            /* and the directories made on the way, where nothing else came into them */
            char p[4096];
            snprintf(p, sizeof p, "%s", rd->final_);
            for (char *c; strcmp(p, rd->made_from) && (c = strrchr(p, '/')) && c > p;) {
                *c = '\0';
                if (rmdir(p))
                    break;
            }
        } else { /* everything the run wrote: what was not there when it opened */
            DIR *d = opendir(rd->final_);
            for (struct dirent *e; d && (e = readdir(d));) {
                bool keep = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                            !strcmp(e->d_name, ".lock");
                for (int i = 0; i < rd->n_before && !keep; i++)
                    keep = !strcmp(e->d_name, rd->before[i]);
                if (!keep) {
                    char p[4400];
                    snprintf(p, sizeof p, "%s/%s", rd->final_, e->d_name);
                    cli_rm_tree(p);
                }
            }
            if (d)
                closedir(d);
        }
    }
    unlock_dir(rd->path, &rd->lock_fd);
    unlock_dir(rd->final_, &rd->old_fd);
    for (int i = 0; i < rd->n_before; i++)
        free(rd->before[i]);
    free(rd->before);
    rd->before = NULL;
    rd->n_before = 0;
}

/* ---- the config's record ----------------------------------------------------------- */

static uint64_t fnv1a64(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h;
}

static int config_hash(const char *dir, uint64_t *h, dllm_err *err)
{
    char p[4200], *text;
    size_t n;
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    if (dllm_read_file(p, &text, &n, err))
        return err->code;
    *h = fnv1a64(text, n);
    free(text);
    return 0;
}

int run_dir_record_config(const char *dir, dllm_err *err)
{
    uint64_t h;
    if (config_hash(dir, &h, err))
        return err->code;
    char p[4200];
    snprintf(p, sizeof p, "%s/config.hash", dir);
    FILE *f = fopen(p, "w");
    int bad = !f || fprintf(f, "fnv1a64 %016llx config.yaml\n", (unsigned long long)h) < 0;
    if (f && fclose(f))
        bad = 1;
    return bad ? dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot write", p) : 0;
}

int run_dir_check_config(const char *dir, const char *cmd, bool allow_edited, dllm_err *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/config.hash", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    unsigned long long want = 0;
    int got = fscanf(f, "fnv1a64 %llx", &want);
    fclose(f);
    uint64_t h;
    if (config_hash(dir, &h, err))
        return err->code;
    if (got == 1 && h == want)
        return 0;
    if (!allow_edited)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s/config.yaml was edited after the run wrote it (it no longer matches "
                            "%s): a resumed run continues what it started. Restore the file, or "
                            "start the edited config as a new run (`dllm-rl %s %s/config.yaml "
                            "--set experiment=NEW`), or continue with the edit by adding "
                            "--allow-edited-config", dir, p, cmd, dir);
    fprintf(stderr, "dllm-rl %s: %s/config.yaml was edited after the run wrote it; continuing "
            "with the edited file (--allow-edited-config), which is recorded now\n", cmd, dir);
    return run_dir_record_config(dir, err);
}

/* ---- the config of a resumed run ------------------------------------------------------ */

bool run_dir_key_in(const char *assignment, const char *const *keys, int n)
{
    size_t len = strcspn(assignment, "=");
    for (int i = 0; i < n; i++)
        if (strlen(keys[i]) == len && !strncmp(assignment, keys[i], len))
            return true;
    return false;
}

int run_dir_apply_sets(dllm_cfg *cfg, const char *const *sets, int nsets, dllm_err *err)
{
    for (int i = 0; i < nsets; i++)
        if (dllm_cfg_set(cfg, sets[i], err))
            return err->code;
    return 0;
}

int run_dir_resume_config(dllm_cfg *cfg, const char *path, const char *resume_dir,
                          const char *const *sets, int nsets, const char *const *may_change,
                          int n, const char *cmd, dllm_err *err)
{
    for (int i = 0; i < nsets; i++)
        if (!run_dir_key_in(sets[i], may_change, n)) {
            char list[512] = "";
            for (int k = 0; k < n; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         k == 0 ? "" : k == n - 1 ? " and " : ", ", may_change[k]);
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "--set %s: a resumed run keeps its config; only %s may change (for "
                                "another setting start a new run: another experiment name, or "
                                "`dllm-rl %s %s/config.yaml --set ... --force` to replace %s)",
                                sets[i], list, cmd, resume_dir, resume_dir);
        }
    char stored[4200];
    snprintf(stored, sizeof stored, "%s/config.yaml", resume_dir);
    dllm_cfg_defaults(cfg);
    if (dllm_cfg_load(cfg, stored, err) || run_dir_apply_sets(cfg, sets, nsets, err) ||
        dllm_cfg_absolute_paths(cfg, err))
        return err->code;
    if (!path)
        return 0;
    /* the config named beside --resume must be the run's own */
    dllm_cfg *given = dllm_malloc(sizeof *given);
    dllm_cfg_defaults(given);
    int rc = dllm_cfg_load(given, path, err) || run_dir_apply_sets(given, sets, nsets, err) ||
                     dllm_cfg_absolute_paths(given, err)
                 ? err->code
                 : 0;
    const char *diff = rc ? NULL : dllm_cfg_first_difference(given, cfg);
    free(given);
    if (rc)
        return rc;
    if (diff)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s differs from the config of the run in %s (first in %s): continue "
                            "the run with `dllm-rl %s --resume %s`, or start this config as another "
                            "experiment", path, resume_dir, diff, cmd, resume_dir);
    return 0;
}

/* ---- a --resume argument that is not a run ------------------------------------------ */

int run_dir_not_a_run(const char *arg, const char *cmd, dllm_err *err)
{
    struct stat st;
    if (stat(arg, &st))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--resume %s: no such run directory", arg);
    char p[4400], run[4096];
    snprintf(p, sizeof p, "%s/state.json", arg);
    /* RUN/ckpt/step-N or RUN/ckpt/latest: the run is two levels up */
    snprintf(run, sizeof run, "%s", arg);
    size_t l = strlen(run);
    while (l > 1 && run[l - 1] == '/')
        run[--l] = '\0';
    char *slash = strrchr(run, '/');
    bool ckpt = access(p, F_OK) == 0;
    if (ckpt && slash) {
        *slash = '\0';
        char *up = strrchr(run, '/');
        if (up && !strcmp(up + 1, "ckpt"))
            *up = '\0';
        else if (!up && !strcmp(run, "ckpt"))
            snprintf(run, sizeof run, ".");
    }
    if (ckpt)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--resume %s: that is a checkpoint; --resume takes the run directory "
                            "(the one holding config.yaml and ckpt/) and continues from its newest "
                            "checkpoint: `dllm-rl %s --resume %s`", arg, cmd,
                            slash ? run : "RUN_DIR");
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "--resume %s: not a run directory (it has no config.yaml); --resume takes "
                        "the directory a run wrote (log.dir/experiment)", arg);
}
