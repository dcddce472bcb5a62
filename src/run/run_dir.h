/* run_dir.h: the directory a training run writes (log.dir/experiment), kept so that
 * no work is lost:
 *   - its name is a plain directory name (never "..", "", or a path);
 *   - one writer at a time: the writer holds flock on RUN/.lock (which records its
 *     pid; the kernel releases the lock when the process dies, so a stale file never
 *     blocks); a second writer is refused naming the holder;
 *   - --force builds the new run beside the old one (log.dir/.NAME.force) and
 *     replaces the old only once the new one has written its first step;
 *   - a start that fails before its first step removes what it wrote (whatever was
 *     not in the directory when it opened), so a retry is not blocked by it;
 *   - the config the run wrote is recorded by hash (RUN/config.hash), so a resume
 *     notices a hand-edited config.yaml. */
#ifndef DLLM_RUN_DIR_H
#define DLLM_RUN_DIR_H

#include "kernels/base.h"
#include "src/config/yaml_config.h"

#include <stdbool.h>
#include <stddef.h>

/* Letters, digits, '.', '_', '+', '-', '=' (a sweep names runs key=value); not "",
 * "." or "..". */
bool run_dir_plain_name(const char *s);

typedef struct {
    char final_[4096];  /* the run directory */
    char path[4096];    /* where the run is written now: final_, or under --force the
                         * staging sibling until the first step */
    char stage[4200];   /* log.dir/.NAME.force */
    int lock_fd;        /* the flock'd path/.lock, -1 when none */
    int old_fd;         /* --force: the replaced run's lock, held until it is gone */
    bool opened;        /* locked by run_dir_open_new or run_dir_open_resume */
    bool created;       /* this process made final_ */
    char made_from[4096]; /* the highest directory it made for final_ (log.dir, when new) */
    bool started;       /* the first step is written: a failure keeps the run */
    char **before;      /* the entries final_ held when opened (a failed start keeps them) */
    int n_before;
} run_dir_hold;

/* An input error naming a run directory that holds content the new run refuses to
 * mix with (called with the lock held; dir is the run directory). */
typedef int (*run_dir_refuse_fn)(const char *dir, void *ctx, dllm_err *err);

/* A hold on nothing yet (path and final_ are dir): closing it does nothing. */
void run_dir_init(run_dir_hold *rd, const char *dir);
/* Opens a new run's directory dir for writing: made when absent, locked; with
 * force and existing content, the old run stays locked and untouched while the new
 * one is written in the staging sibling (rd->path); without force, refuse (may be
 * NULL) decides whether the content there forbids a new run. */
int run_dir_open_new(run_dir_hold *rd, const char *dir, bool force, run_dir_refuse_fn refuse,
                     void *ctx, dllm_err *err);
/* The pid of the process writing dir (holding its lock; -1 when its pid is not
 * known yet), or 0 when none. Takes nothing. */
long run_dir_writer(const char *dir);
/* Opens an existing run's directory to continue it: locked. */
int run_dir_open_resume(run_dir_hold *rd, const char *dir, dllm_err *err);
/* The first step is written: under --force the new run replaces the old one now
 * (rd->path becomes the run directory). */
int run_dir_started(run_dir_hold *rd, dllm_err *err);
/* Releases the lock. Before the first step (a failed or interrupted start) it
 * first removes what the run wrote: the staging sibling, or what was not in the
 * run directory when it opened, and the directories it made. */
void run_dir_close(run_dir_hold *rd);

/* RUN/config.hash: the hash of RUN/config.yaml as the run wrote it. */
int run_dir_record_config(const char *dir, dllm_err *err);
/* An input error when RUN/config.yaml is not the file the run recorded (edited by
 * hand), unless allow_edited (then the edited file is recorded and accepted, saying
 * so on stderr). A run with no record (older runs) is accepted. */
int run_dir_check_config(const char *dir, const char *cmd, bool allow_edited, dllm_err *err);

/* Is "key=value" an assignment to one of keys[0..n)? */
bool run_dir_key_in(const char *assignment, const char *const *keys, int n);
/* Applies --set assignments in order. */
int run_dir_apply_sets(dllm_cfg *cfg, const char *const *sets, int nsets, dllm_err *err);
/* The config of a resumed run (defaults, RUN/config.yaml, then the --set
 * assignments; not validated): --set may change only may_change[0..n) (keys that
 * extend a run or change what is written about it, never what a step computes),
 * and path, when given, must parse to the stored config (after the same --set).
 * cmd names the command in the messages. */
int run_dir_resume_config(dllm_cfg *cfg, const char *path, const char *resume_dir,
                          const char *const *sets, int nsets, const char *const *may_change,
                          int n, const char *cmd, dllm_err *err);

/* The error for --resume given something that is not a run directory (no
 * config.yaml): names what it is (a checkpoint, a file) and what to pass instead. */
int run_dir_not_a_run(const char *arg, const char *cmd, dllm_err *err);

#endif
