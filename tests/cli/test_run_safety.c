/* test_run_safety.c: the exit-status contract of train and sft around run
 * directories, driven as a user drives the dllm-rl binary (DLLM_BIN) on a tiny
 * model. Every case checks the exit status (0, 1 or 2, never a signal), the
 * message, and that nothing outside the run directory changed: a listing of the
 * whole working directory (names, sizes, modification times, a checksum of every
 * file) is taken before and compared after, leaving out only the run directory
 * the command may write.
 *
 *   names       experiment "..", "", "a/b", "." with --force refused (exit 2,
 *               naming the key) by train and sft; the working directory's files
 *               and other runs untouched;
 *   resume      sft --resume refuses what train --resume refuses (--set optim.lr,
 *               data.train); --resume RUN/ckpt/step-N names the run directory;
 *               a hand-edited config.yaml refused unless --allow-edited-config;
 *   lock        a second writer of a running run (train, train --force,
 *               train --resume, sft) refused naming the holder's pid, the run going
 *               on; a sweep leaves a run another process writes alone; a killed
 *               writer's lock does not block;
 *   signals     SIGINT and SIGTERM: a checkpoint at the next step, the command that
 *               resumes, exit 1; the resumed run completes (train and sft);
 *   --force     a broken new model leaves the old run byte for byte; a good one
 *               replaces it, nothing left beside it;
 *   failed start  bad data (sft) or a bad model (train) leaves nothing that blocks a
 *               retry, and keeps other files of the directory (a run of no steps is
 *               complete, kept); a run with no checkpoint is offered --force, not
 *               --resume;
 *   export      an sft run exports (--merged: its weights), --adapter says why not;
 *   flags       --quiet with --jsonl refused. */
#include "tests/harness/harness.h"
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* The state of everything under tu_dir except out/ and the run directory `except`
 * (relative to tu_dir; NULL: nothing left out): each entry's path, type, size,
 * modification time and, for a file, its checksum. */
static char *snapshot(const char *except)
{
    char prune[600] = "";
    if (except)
        snprintf(prune, sizeof prune, "-path ./%s -prune -o", except);
    /* directories by name only: their times follow entries made and removed inside */
    ck_assert_int_eq(tu_sh("cd %s && { find . -path ./out -prune -o %s -type d -printf '%%p d\\n'; "
                           "find . -path ./out -prune -o %s ! -type d -printf '%%p %%y %%s %%T@\\n'; "
                           "} | sort > out/snap && find . -path ./out -prune -o %s -type f -print "
                           "| sort | xargs -r cksum >> out/snap", tu_dir, prune, prune, prune), 0);
    return tu_slurp("%s/out/snap", tu_dir);
}

static void assert_unchanged(const char *before, const char *except, const char *what)
{
    char *after = snapshot(except);
    if (strcmp(before, after)) {
        char p[128];
        snprintf(p, sizeof p, "%s/out/before", tu_dir);
        FILE *f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs(before, f);
        fclose(f);
        tu_sh("cd %s && diff out/before out/snap | head -c 3000 > out/diff", tu_dir);
        char *d = tu_slurp("%s/out/diff", tu_dir);
        ck_assert_msg(0, "%s changed what is outside %s:\n%s", what, except ? except : "(nothing)",
                      d);
    }
    free(after);
}

static bool exists(const char *rel)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    return lstat(p, &st) == 0;
}

/* ---- fixtures: a tiny model, SFT data and configs -------------------------------- */

static void write_file(const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void fixtures(void)
{
    static int done;
    if (done)
        return;
    ck_assert_int_eq(tu_sh("mkdir -p %s/out", tu_dir), 0);
    ck_assert_int_eq(tu_dllm("init-model --arch llada --preset tiny --seed 3 --out model"), 0);
    /* a model cut short: the new run --force must not let it cost the old one */
    ck_assert_int_eq(tu_sh("cd %s && cp -r model broken && truncate -s 1000 "
                           "broken/model.safetensors", tu_dir), 0);
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 24 --seed 5 --max-blanks 8 "
                           "> d.jsonl && echo 'not json' > bad.jsonl", tu_dir, tu_bin()), 0);
    write_file("t.yaml",
               "experiment: t\nseed: 7\nmodel: {path: model}\n"
               "task: {name: sudoku, format: plain, chat: plain, train: {n: 32}, max_blanks: 6}\n"
               "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6}\n"
               "likelihood: {mc_samples: 1}\n"
               "grpo: {steps: 2, prompts_per_step: 2, inner_steps: 1}\n"
               "eval: {every: 0, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
               "log: {dir: runs}\ncheckpoint: {every: 1, keep: 2}\n");
    write_file("s.yaml",
               "experiment: s\nseed: 1\nmodel: {preset: tiny}\n"
               "data: {train: d.jsonl, max_len: 64, answer_length: 34}\n"
               "sft: {steps: 2, batch_size: 4}\noptim: {lr: 3e-3}\n"
               "log: {dir: runs, every: 1}\ncheckpoint: {every: 1, keep: 3}\n");
    write_file("notes.txt", "the user's own notes\n");
    ck_assert_int_eq(tu_dllm("train t.yaml --quiet"), 0);
    ck_assert_int_eq(tu_dllm("sft s.yaml --quiet"), 0);
    done = 1;
}

/* ---- names ------------------------------------------------------------------------ */

START_TEST(test_names_refused)
{
    fixtures();
    static const char *const bad[] = {"..", ".", "a/b", "../runs", "/tmp"};
    char *before = snapshot(NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tu_dllm("train t.yaml --set 'experiment=%s' --force --quiet", bad[i]), 2);
        ck_assert_msg(strstr(tu_err, "experiment") && strstr(tu_err, "plain directory name"),
                      "train %s: %s", bad[i], tu_err);
        assert_unchanged(before, NULL, "train with a bad experiment name");
        ck_assert_int_eq(tu_dllm("sft s.yaml --set 'experiment=%s' --force --quiet", bad[i]), 2);
        ck_assert_msg(strstr(tu_err, "plain directory name"), "sft %s: %s", bad[i], tu_err);
        assert_unchanged(before, NULL, "sft with a bad experiment name");
    }
    /* experiment: "" in the file (log.dir itself would be the run directory) */
    ck_assert_int_eq(tu_sh("cd %s && sed 's/^experiment: t/experiment: \"\"/' t.yaml > e.yaml",
                           tu_dir), 0);
    free(before);
    before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train e.yaml --force --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "experiment: ''"), "%s", tu_err);
    assert_unchanged(before, NULL, "train with experiment \"\"");
    free(before);
}
END_TEST

START_TEST(test_quiet_jsonl_refused)
{
    fixtures();
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=qj --quiet --jsonl"), 2);
    ck_assert_msg(strstr(tu_err, "--quiet and --jsonl"), "%s", tu_err);
    ck_assert_str_eq(tu_out, "");
    assert_unchanged(before, NULL, "--quiet --jsonl");
    free(before);
}
END_TEST

/* ---- resuming --------------------------------------------------------------------- */

START_TEST(test_sft_resume_refuses_changes)
{
    fixtures();
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("sft --resume runs/s --set optim.lr=0.1 --set sft.steps=4"), 2);
    ck_assert_msg(strstr(tu_err, "--set optim.lr=0.1") && strstr(tu_err, "keeps its config") &&
                  strstr(tu_err, "sft.steps"), "%s", tu_err);
    ck_assert_int_eq(tu_dllm("sft --resume runs/s --set data.train=bad.jsonl --set sft.steps=4"), 2);
    ck_assert_msg(strstr(tu_err, "--set data.train"), "%s", tu_err);
    /* what train --resume refuses, in the same words */
    ck_assert_int_eq(tu_dllm("train --resume runs/t --set optim.lr=0.1"), 2);
    ck_assert_msg(strstr(tu_err, "--set optim.lr=0.1") && strstr(tu_err, "keeps its config"), "%s",
                  tu_err);
    assert_unchanged(before, NULL, "a refused resume");
    free(before);
}
END_TEST

START_TEST(test_resume_a_checkpoint_explained)
{
    fixtures();
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train --resume runs/t/ckpt/step-2"), 2);
    ck_assert_msg(strstr(tu_err, "checkpoint") && strstr(tu_err, "`dllm-rl train --resume runs/t`"),
                  "%s", tu_err);
    ck_assert_msg(!strstr(tu_err, "No such file"), "%s", tu_err);
    ck_assert_int_eq(tu_dllm("sft --resume runs/s/ckpt/latest"), 2);
    ck_assert_msg(strstr(tu_err, "`dllm-rl sft --resume runs/s`"), "%s", tu_err);
    ck_assert_int_eq(tu_dllm("train --resume runs/none"), 2);
    ck_assert_msg(strstr(tu_err, "runs/none: no such run directory"), "%s", tu_err);
    assert_unchanged(before, NULL, "--resume of a checkpoint");
    free(before);
}
END_TEST

START_TEST(test_edited_config_refused)
{
    fixtures();
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=ed --quiet"), 0);
    ck_assert_int_eq(tu_sh("cd %s && sed -i 's/^seed: 7/seed: 8/' runs/ed/config.yaml", tu_dir), 0);
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train --resume runs/ed --set grpo.steps=3 --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "runs/ed/config.yaml was edited") &&
                  strstr(tu_err, "--allow-edited-config"), "%s", tu_err);
    assert_unchanged(before, NULL, "a resume of an edited config");
    free(before);
    ck_assert_int_eq(tu_dllm("train --resume runs/ed --set grpo.steps=3 --quiet --allow-edited-config"), 0);
    ck_assert_msg(strstr(tu_err, "edited"), "the accepted edit was not reported: %s", tu_err);
    ck_assert(exists("runs/ed/ckpt/step-3"));
    /* the edit is the record now: the next resume is not refused */
    ck_assert_int_eq(tu_dllm("train --resume runs/ed --set grpo.steps=4 --quiet"), 0);
    /* sft: the same */
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=sed --quiet"), 0);
    ck_assert_int_eq(tu_sh("cd %s && sed -i 's/^seed: 1/seed: 2/' runs/sed/config.yaml", tu_dir), 0);
    ck_assert_int_eq(tu_dllm("sft --resume runs/sed --set sft.steps=3 --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "runs/sed/config.yaml was edited"), "%s", tu_err);
}
END_TEST

/* ---- a running run: its lock, and signals ----------------------------------------- */

/* Starts `dllm-rl ARGS` in tu_dir in the background (stdout and stderr to out/NAME.out
 * and out/NAME.err); its pid. */
static pid_t start(const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=1 exec %s %s >out/%s.out 2>out/%s.err",
             tu_dir, tu_bin(), args, name, name);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* Polls out/NAME.out until it holds needle (up to 120 s); false if the process ended
 * first. */
static bool wait_for(pid_t pid, const char *name, const char *needle)
{
    for (int i = 0; i < 2400; i++) {
        char *s = tu_slurp("%s/out/%s.out", tu_dir, name);
        bool seen = s && strstr(s, needle);
        free(s);
        if (seen)
            return true;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return false;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static int wait_exit(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_second_writer_refused)
{
    fixtures();
    pid_t pid = start("live", "train t.yaml --set experiment=live --set grpo.steps=100000 "
                              "--set checkpoint.every=0");
    ck_assert_msg(wait_for(pid, "live", "step 2/"), "the run did not get going");
    char want[64];
    snprintf(want, sizeof want, "pid %ld", (long)pid);
    char *lock = tu_slurp("%s/runs/live/.lock", tu_dir);
    ck_assert_ptr_nonnull(lock);
    ck_assert_int_eq(atol(lock), pid);
    free(lock);
    char *before = snapshot("runs/live");
    static const char *const second[] = {"train t.yaml --set experiment=live --force --quiet",
                                         "train --resume runs/live --quiet",
                                         "train t.yaml --set experiment=live --quiet",
                                         "sft s.yaml --set experiment=live --force --quiet"};
    for (size_t i = 0; i < sizeof second / sizeof second[0]; i++) {
        ck_assert_int_eq(tu_dllm("%s", second[i]), 2);
        ck_assert_msg(strstr(tu_err, "runs/live is being written by another process") &&
                      strstr(tu_err, want), "%s: %s", second[i], tu_err);
        assert_unchanged(before, "runs/live", second[i]);
    }
    free(before);
    /* the run was not disturbed: it still runs, its directory in place */
    ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
    ck_assert(exists("runs/live/log.h5") && exists("runs/live/config.yaml"));
    ck_assert(!exists("runs/.live.force"));
    /* a sweep whose run this is leaves it alone (before: it removed the log of a run
     * it took for one interrupted before its first checkpoint) */
    write_file("sw.yaml", "name: sw\nbase: t.yaml\narms:\n  - {name: a}\n");
    pid_t sw = start("swlive", "train t.yaml --set log.dir=runs/sw --set experiment=a "
                               "--set grpo.steps=100000 --set checkpoint.every=0");
    ck_assert_msg(wait_for(sw, "swlive", "step 1/"), "the sweep's run did not get going");
    struct stat a0, a1;
    char lp[256];
    snprintf(lp, sizeof lp, "%s/runs/sw/a/log.h5", tu_dir);
    ck_assert_int_eq(stat(lp, &a0), 0);
    int st = tu_dllm("sweep sw.yaml");
    snprintf(want, sizeof want, "skip a (being written by pid %ld)", (long)sw);
    ck_assert_msg(strstr(tu_out, want), "exit %d: %s%s", st, tu_out, tu_err);
    ck_assert_msg(st == 0 || st == 1, "sweep: exit %d: %s", st, tu_err);
    ck_assert_int_eq(stat(lp, &a1), 0);
    ck_assert_msg(a0.st_ino == a1.st_ino, "the sweep replaced a running run's log");
    ck_assert_int_eq(waitpid(sw, NULL, WNOHANG), 0);
    kill(sw, SIGKILL);
    wait_exit(sw);
    /* killed outright: its lock file stays, and does not block */
    kill(pid, SIGKILL);
    ck_assert_int_eq(wait_exit(pid), -1);
    ck_assert(exists("runs/live/.lock"));
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=live --force --quiet"), 0);
    ck_assert(exists("runs/live/ckpt/step-2") && !exists("runs/live/.lock"));
}
END_TEST

/* A run stopped by sig: exit 1 with a checkpoint at a step boundary and the
 * command that resumes; that command completes it. */
static void stop_and_resume(const char *cmd, const char *name, int sig, const char *progress,
                            const char *resume_args)
{
    char args[1024], dir[128];
    snprintf(args, sizeof args, cmd, name);
    snprintf(dir, sizeof dir, "runs/%s", name);
    pid_t pid = start(name, args);
    ck_assert_msg(wait_for(pid, name, progress), "%s did not get going", name);
    kill(pid, sig);
    ck_assert_int_eq(wait_exit(pid), 1);
    char *e = tu_slurp("%s/out/%s.err", tu_dir, name);
    char want[256];
    snprintf(want, sizeof want, "--resume %s`", dir);
    ck_assert_msg(e && strstr(e, "stopped by a signal after step") && strstr(e, want), "%s", e);
    /* the checkpoint it names is there, and is ckpt/latest */
    const char *at = strstr(e, "checkpoint written (");
    ck_assert_ptr_nonnull(at);
    char ckpt[256];
    ck_assert_int_eq(sscanf(at, "checkpoint written (%255[^)])", ckpt), 1);
    free(e);
    ck_assert_msg(exists(ckpt), "%s", ckpt);
    char latest[300], target[64];
    snprintf(latest, sizeof latest, "%s/%s/ckpt/latest", tu_dir, dir);
    ssize_t k = readlink(latest, target, sizeof target - 1);
    ck_assert_int_gt(k, 0);
    target[k] = 0;
    ck_assert_msg(strstr(ckpt, target), "%s vs latest -> %s", ckpt, target);
    snprintf(latest, sizeof latest, "%s/.lock", dir);
    ck_assert_msg(!exists(latest), "the stopped run left its lock file");
    ck_assert_int_eq(tu_dllm("%s --resume %s --quiet", resume_args, dir), 0);
}

START_TEST(test_signals_checkpoint_and_resume)
{
    fixtures();
    stop_and_resume("train t.yaml --set experiment=%s --set grpo.steps=10 --set checkpoint.every=0",
                    "int", SIGINT, "step 2/", "train");
    ck_assert(exists("runs/int/ckpt/step-10"));
    stop_and_resume("train t.yaml --set experiment=%s --set grpo.steps=10 --set checkpoint.every=0",
                    "term", SIGTERM, "step 1/", "train");
    stop_and_resume("sft s.yaml --set experiment=%s --set sft.steps=40 --set checkpoint.every=0",
                    "sint", SIGINT, "step     3/", "sft");
    ck_assert(exists("runs/sint/ckpt/step-40"));
}
END_TEST

/* ---- --force ---------------------------------------------------------------------- */

START_TEST(test_force_keeps_old_run_until_new_one_runs)
{
    fixtures();
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=fo --quiet"), 0);
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=fo --set model.path=broken --force --quiet"),
                     2);
    ck_assert_msg(strstr(tu_err, "broken/model.safetensors"), "%s", tu_err);
    /* the old run byte for byte, and nothing beside it */
    assert_unchanged(before, NULL, "a failed --force");
    free(before);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=s --set data.train=bad.jsonl --force --quiet"),
                     2);
    ck_assert_msg(strstr(tu_err, "bad.jsonl:1"), "%s", tu_err);
    ck_assert(exists("runs/s/ckpt/step-2"));
    ck_assert(!exists("runs/.s.force"));
    /* a good new run replaces the old one: its checkpoints alone */
    before = snapshot("runs/fo");
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=fo --set grpo.steps=1 --force --quiet"), 0);
    assert_unchanged(before, "runs/fo", "--force");
    free(before);
    ck_assert(exists("runs/fo/ckpt/step-1") && !exists("runs/fo/ckpt/step-2"));
    ck_assert(!exists("runs/.fo.force") && !exists("runs/fo/.lock"));
}
END_TEST

/* ---- a failed start ----------------------------------------------------------------- */

START_TEST(test_failed_start_leaves_nothing)
{
    fixtures();
    char *before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=fs --set data.train=bad.jsonl --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "bad.jsonl:1"), "%s", tu_err);
    ck_assert_msg(!strstr(tu_err, "--resume"), "a failed start offered --resume: %s", tu_err);
    assert_unchanged(before, NULL, "a failed sft start");
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=ft --set model.path=broken --quiet"), 2);
    assert_unchanged(before, NULL, "a failed train start");
    /* the log.dir it made goes too */
    ck_assert_int_eq(tu_dllm("train t.yaml --set log.dir=new/logs --set model.path=broken --quiet"), 2);
    assert_unchanged(before, NULL, "a failed train start in a new log.dir");
    free(before);
    /* the retry, fixed, needs no --force */
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=fs --quiet"), 0);
    ck_assert(exists("runs/fs/ckpt/step-2"));
    /* a run of no steps (evaluation only) is complete, not a failed start */
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=zero --set grpo.steps=0 "
                         "--set eval.every=1 --quiet"), 0);
    ck_assert(exists("runs/zero/log.h5") && exists("runs/zero/eval/sudoku-step-0.txt"));
    /* a directory made beforehand (a sweep's train.log in it) keeps what it had */
    ck_assert_int_eq(tu_sh("mkdir -p %s/runs/pre && echo log > %s/runs/pre/train.log", tu_dir, tu_dir), 0);
    before = snapshot(NULL);
    ck_assert_int_eq(tu_dllm("train t.yaml --set experiment=pre --set model.path=broken --quiet"), 2);
    assert_unchanged(before, NULL, "a failed start in a directory made beforehand");
    free(before);
}
END_TEST

START_TEST(test_no_checkpoint_offers_force)
{
    fixtures();
    /* a run killed after its first step, before any checkpoint */
    pid_t pid = start("nock", "sft s.yaml --set experiment=nock --set sft.steps=100000 "
                              "--set checkpoint.every=0");
    ck_assert_msg(wait_for(pid, "nock", "step     2/"), "the run did not get going");
    kill(pid, SIGKILL);
    wait_exit(pid);
    /* (the dead writer's lock file may go: left out) */
    char *before = snapshot("runs/nock/.lock");
    ck_assert_int_eq(tu_dllm("sft --resume runs/nock --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "no checkpoint") && strstr(tu_err, "--force"), "%s", tu_err);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=nock --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "--force") && !strstr(tu_err, "--resume"),
                  "--resume offered where it cannot work: %s", tu_err);
    assert_unchanged(before, "runs/nock/.lock", "a refused restart");
    free(before);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=nock --force --quiet"), 0);
}
END_TEST

/* ---- export of an sft run --------------------------------------------------------- */

START_TEST(test_export_sft_run)
{
    fixtures();
    char *before = snapshot("ex");
    ck_assert_int_eq(tu_dllm("export runs/s --merged --out ex"), 0);
    assert_unchanged(before, "ex", "export");
    free(before);
    ck_assert_int_eq(tu_sh("cd %s && cmp ex/model.safetensors runs/s/ckpt/latest/model.safetensors "
                           "&& cmp ex/tokenizer.json runs/s/ckpt/latest/tokenizer.json && cmp "
                           "ex/generation.json runs/s/ckpt/latest/generation.json", tu_dir), 0);
    /* the exported model generates what the checkpoint does */
    ck_assert_int_eq(tu_dllm("generate --model ex --prompt-ids 1,2,3 --format ids"), 0);
    char *a = strdup(tu_out);
    ck_assert_int_eq(tu_dllm("generate --model runs/s/ckpt/latest --prompt-ids 1,2,3 --format ids"), 0);
    ck_assert_str_eq(a, tu_out);
    ck_assert_int_gt(strlen(a), 0);
    free(a);
    ck_assert_int_eq(tu_dllm("export runs/s --adapter --out ex2"), 2);
    ck_assert_msg(strstr(tu_err, "sft run") && strstr(tu_err, "--merged"), "%s", tu_err);
    ck_assert(!exists("ex2"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("run_safety");
    TCase *tc = tcase_create("refusals");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_names_refused);
    tcase_add_test(tc, test_quiet_jsonl_refused);
    tcase_add_test(tc, test_sft_resume_refuses_changes);
    tcase_add_test(tc, test_resume_a_checkpoint_explained);
    tcase_add_test(tc, test_edited_config_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("running");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_second_writer_refused);
    tcase_add_test(tc, test_signals_checkpoint_and_resume);
    suite_add_tcase(s, tc);
    tc = tcase_create("force_and_failures");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_force_keeps_old_run_until_new_one_runs);
    tcase_add_test(tc, test_failed_start_leaves_nothing);
    tcase_add_test(tc, test_no_checkpoint_offers_force);
    tcase_add_test(tc, test_export_sft_run);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    ctx->nofork = true; /* one process: the cases share the model, the data and the first runs */
    return suite();
}
