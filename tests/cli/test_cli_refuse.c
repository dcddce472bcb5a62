/* test_cli_refuse.c: train and sft refuse runs that are not what was meant, and
 * a run that stopped can always be continued or restarted by following the
 * messages; run as a user runs them (the dllm-rl binary, DLLM_BIN) on a tiny
 * model:
 *
 *   inputs    an empty --set value, an empty config, a directory, the other
 *             command's config, group_size 1, clip_eps outside (0, 1), eval.n 0:
 *             exit 2, the message names the key/flag/file and what to do;
 *   resume    a finished run says so (exit 0) and how to extend it; the
 *             extension runs; a CONFIG beside --resume must be the run's; a
 *             --set that changes what a step computes is refused;
 *   killed    a run killed at a random point (SIGKILL) after a checkpoint, and
 *             one killed before any: the command each message names is run
 *             and succeeds;
 *   config    `dllm-rl config` lists exactly the keys of docs/CONFIG.md's
 *             configuration table, each with default, range and meaning;
 *             --defaults reads back as the defaults;
 *   feedback  the header in a redirected stdout at once, --print-config, evaluation progress lines, inspect's summary
 *             names the absent metrics and why, tokenizer.json in the run
 *             directory. */
#include "tests/harness/harness.h"
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static void expect_refused(const char *args, const char *needle1, const char *needle2)
{
    ck_assert_msg(tu_dllm("%s", args) == 2, "%s: not exit 2 (stderr: %s)", args, tu_err);
    ck_assert_msg(strstr(tu_err, needle1), "%s: '%s' not in: %s", args, needle1, tu_err);
    ck_assert_msg(strstr(tu_err, needle2), "%s: '%s' not in: %s", args, needle2, tu_err);
}

START_TEST(test_refused_inputs)
{
    tu_write_rl_config("rl.yaml", "r", 6, 0);
    tu_write("empty.yaml", "# nothing\n");
    tu_write("sft.yaml", "sft: {steps: 2}\ndata: {train: d.jsonl}\n");
    ck_assert_int_eq(tu_sh("mkdir -p %s/adir", tu_dir), 0);
    expect_refused("train rl.yaml --set grpo.steps=", "grpo.steps", "empty value");
    expect_refused("train rl.yaml --set grpo.steps=", "--set grpo.steps=VALUE", "leave the --set out");
    expect_refused("train empty.yaml", "empty.yaml: empty config: nothing to run", "model.");
    expect_refused("sft empty.yaml", "empty.yaml: empty config", "dllm-rl config");
    expect_refused("train adir", "adir is a directory", "expected a YAML file");
    expect_refused("train sft.yaml", "sft.yaml is an SFT config", "dllm-rl sft sft.yaml");
    expect_refused("sft rl.yaml", "rl.yaml is an RL config", "dllm-rl train rl.yaml");
    expect_refused("train rl.yaml --set rollout.group_size=1", "rollout.group_size", "[2,");
    expect_refused("train rl.yaml --set grpo.clip_eps=0", "grpo.clip_eps", "(0, 1)");
    expect_refused("train rl.yaml --set grpo.clip_eps=1", "grpo.clip_eps", "(0, 1)");
    expect_refused("train rl.yaml --set eval.every=2 --set eval.n=0", "eval.n", "eval.every=0");
    /* nothing was started by any of them */
    struct stat st;
    char p[256];
    snprintf(p, sizeof p, "%s/runs", tu_dir);
    ck_assert_int_ne(stat(p, &st), 0);
}
END_TEST

START_TEST(test_resume_rules)
{
    tu_write_rl_config("f.yaml", "fin", 6, 1);
    ck_assert_int_eq(tu_dllm("train f.yaml --quiet --set grpo.steps=2"), 0);
    /* the stored config has grpo.steps 2: f.yaml (6) differs */
    expect_refused("train f.yaml --resume runs/fin", "first in grpo.steps", "train --resume runs/fin");
    ck_assert_int_eq(tu_dllm("train --resume runs/fin"), 0);
    ck_assert_msg(strstr(tu_out, "is finished") && strstr(tu_out, "--set grpo.steps=N"), "%s", tu_out);
    /* the same config with the same override is the run's own: accepted */
    ck_assert_int_eq(tu_dllm("train f.yaml --resume runs/fin --set grpo.steps=2"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "is finished"));
    expect_refused("train --resume runs/fin --set rollout.temperature=0.5", "rollout.temperature",
                   "grpo.steps");
    /* extending: runs steps 3 and 4, and the next resume knows the new end */
    ck_assert_int_eq(tu_dllm("train --resume runs/fin --set grpo.steps=4"), 0);
    ck_assert_msg(strstr(tu_out, "resuming runs/fin at step 3") && strstr(tu_out, "step 4/4"), "%s", tu_out);
    ck_assert_int_eq(tu_dllm("train --resume runs/fin"), 0);
    ck_assert_msg(strstr(tu_out, "step 4 of grpo.steps 4"), "%s", tu_out);
}
END_TEST

/* Starts `train CONFIG`, kills it (SIGKILL) once `wait_for` exists plus a
 * varying delay; asserts it was killed. */
static void start_and_kill(const char *config, const char *wait_for, unsigned extra_us)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=1 exec %s train %s --quiet >/dev/null 2>&1",
                 tu_dir, tu_bin(), config);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tu_dir, wait_for);
    for (int i = 0; i < 600000 && access(p, F_OK); i++)
        usleep(100);
    usleep(extra_us);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st), "the run finished before it could be killed");
}

/* The command a message names between backquotes after `after`, without "dllm-rl ". */
static void named_command(const char *msg, const char *after, char *cmd, size_t n)
{
    const char *a = strstr(msg, after);
    ck_assert_msg(a != NULL, "'%s' not in: %s", after, msg);
    const char *q = strchr(a, '`');
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(strncmp(q + 1, "dllm-rl ", 8), 0);
    const char *e = strchr(q + 1, '`');
    ck_assert_ptr_nonnull(e);
    snprintf(cmd, n, "%.*s", (int)(e - q - 9), q + 9);
}

START_TEST(test_killed_runs_follow_the_messages)
{
    char cmd[512];
    /* killed after a checkpoint, at a varying point: the message says --resume */
    tu_write_rl_config("k.yaml", "killed", 6, 1);
    start_and_kill("k.yaml", "runs/killed/ckpt/step-2/state.json", 1000u * (unsigned)(getpid() % 40));
    expect_refused("train k.yaml", "already holds a run", "--force");
    named_command(tu_err, "continue it with", cmd, sizeof cmd);
    ck_assert_msg(tu_dllm("%s --quiet", cmd) == 0, "%s: %s", cmd, tu_err);
    ck_assert_int_eq(tu_dllm("train --resume runs/killed"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "is finished"));

    /* killed before its first checkpoint: both messages say how to restart */
    tu_write_rl_config("n.yaml", "nockpt", 6, 1000);
    start_and_kill("n.yaml", "runs/nockpt/log.h5", 0);
    expect_refused("train n.yaml", "no checkpoint to continue from", "train n.yaml --force");
    expect_refused("train --resume runs/nockpt", "no checkpoint to resume from", "--force");
    named_command(tu_err, "start it again with", cmd, sizeof cmd);
    ck_assert_msg(tu_dllm("%s --quiet", cmd) == 0, "%s: %s", cmd, tu_err);
    char p[256];
    snprintf(p, sizeof p, "%s/runs/nockpt/ckpt/step-6/state.json", tu_dir);
    ck_assert_int_eq(access(p, F_OK), 0);
}
END_TEST

START_TEST(test_feedback)
{
    tu_write_rl_config("p.yaml", "shown", 6, 0);
    ck_assert_int_eq(tu_dllm("train p.yaml --print-config --set grpo.steps=7"), 0);
    ck_assert_msg(strstr(tu_out, "grpo:\n") && strstr(tu_out, "  steps: 7\n"), "%s", tu_out);
    char p[256];
    snprintf(p, sizeof p, "%s/runs/shown", tu_dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    /* evaluation of more than one batch reports its progress, on stderr */
    ck_assert_int_eq(tu_dllm("train p.yaml --set grpo.steps=0 --set eval.every=1 --set eval.n=130 "
                         "--set task.train.n=64"), 0);
    ck_assert_msg(strstr(tu_err, "train: opening ") && strstr(tu_err, "model and sudoku items") &&
                      strstr(tu_err, "train: opened in ") && strstr(tu_err, "eval: 130 items") && strstr(tu_err, "eval: 64/130 items") &&
                      strstr(tu_err, "eval: 128/130 items") && strstr(tu_err, "ETA"),
                  "%s", tu_err);
    ck_assert_ptr_null(strstr(tu_out, "eval: 64/130"));
    /* the summary says why a metric is NaN throughout, and gives units */
    ck_assert_int_eq(tu_dllm("inspect runs/killed"), 0);
    ck_assert_msg(strstr(tu_out, "absent (NaN at every step)") && strstr(tu_out, "policy_kl") &&
                      strstr(tu_out, "grpo.beta > 0") && strstr(tu_out, "  units\n") &&
                      strstr(tu_out, "  s\n"),
                  "%s", tu_out);
    ck_assert_int_eq(tu_dllm("inspect runs/killed --json"), 0);
    ck_assert_msg(strstr(tu_out, "\"absent_metrics\"") && strstr(tu_out, "grpo.beta > 0"), "%s", tu_out);
    /* the model's tokenizer travels with the run */
    ck_assert_int_eq(tu_sh("cmp -s %s/model/tokenizer.json %s/runs/shown/tokenizer.json", tu_dir, tu_dir), 0);
}
END_TEST

/* The keys of the configuration reference's table (docs/CONFIG.md, up to its first
 * section): `a.b`, `.c` (a.c), `a.{x,y}`. */
static int config_doc_keys(char keys[][64], int cap)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/../../docs/CONFIG.md", getenv("DLLM_TEST_DATA"));
    char *readme = tu_slurp("%s", p);
    ck_assert_msg(readme != NULL, "%s: cannot read", p);
    char *sec = strstr(readme, "# Configuration\n");
    ck_assert_ptr_nonnull(sec);
    char *end = strstr(sec, "\n## ");
    if (end)
        *end = '\0';
    int n = 0;
    for (char *line = sec; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "| `", 3))
            continue;
        char cell[512], base[128] = "";
        const char *bar = strstr(line + 2, " |");
        ck_assert_ptr_nonnull(bar);
        snprintf(cell, sizeof cell, "%.*s", (int)(bar - line - 2), line + 2);
        for (char *tok = strtok(cell, ","); tok; tok = strtok(NULL, ",")) {
            char key[128], full[256];
            if (sscanf(tok, " `%127[^`]`", key) != 1)
                continue;
            if (key[0] == '.') {
                snprintf(full, sizeof full, "%s%s", base, key + 1);
            } else {
                snprintf(full, sizeof full, "%s", key);
                snprintf(base, sizeof base, "%s", key);
                char *dot = strrchr(base, '.');
                if (dot)
                    dot[1] = '\0';
            }
            char *brace = strchr(full, '{');
            if (brace) { /* a.{x,y}: strtok split it at the comma; rejoin from the line */
                const char *b = strstr(line, full);
                ck_assert_ptr_nonnull(b);
                char list[128];
                ck_assert_int_eq(sscanf(b + (brace - full) + 1, "%127[^}]", list), 1);
                for (char *it = list; *it;) {
                    size_t m = strcspn(it, ",");
                    ck_assert_int_lt(n, cap);
                    snprintf(keys[n++], 64, "%.*s%.*s", (int)(brace - full), full, (int)m, it);
                    it += m + (it[m] == ',');
                }
                for (char *t; (t = strtok(NULL, ",")) && !strchr(t, '}');)
                    ;
                continue;
            }
            ck_assert_int_lt(n, cap);
            snprintf(keys[n++], 64, "%s", full);
        }
    }
    free(readme);
    return n;
}

/* `dllm-rl config` lists every key from the parser's table; docs/CONFIG.md's
 * configuration table documents exactly those keys. */
START_TEST(test_config_command_and_doc)
{
    ck_assert_int_eq(tu_dllm("config"), 0);
    char *listing = strdup(tu_out);
    static char keys[256][64];
    int n = config_doc_keys(keys, 256);
    ck_assert_int_gt(n, 80);
    int listed = 0;
    for (char *line = listing; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (*line == ' ' || *line == '\n')
            continue;
        char key[128];
        ck_assert_int_eq(sscanf(line, "%127s", key), 1);
        listed++;
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = !strcmp(keys[i], key);
        ck_assert_msg(found, "docs/CONFIG.md's configuration table does not document %s", key);
        /* default, range/choices/type, meaning */
        char *l2 = strchr(line, '\n') + 1, *l3 = strchr(l2, '\n') + 1, *l4 = strchr(l3, '\n') + 1;
        ck_assert_msg(!strncmp(l2, "  default: ", 11) && l3[0] == ' ' && l4[0] == ' ' && l4[3] != '\n',
                      "%s: incomplete entry", key);
    }
    for (int i = 0; i < n; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "%s\n  default:", keys[i]);
        ck_assert_msg(strstr(listing, needle), "docs/CONFIG.md key %s is not a key of the config", keys[i]);
    }
    ck_assert_int_eq(listed, n);
    free(listing);
    /* one key, one section, an unknown name */
    ck_assert_int_eq(tu_dllm("config grpo.clip_eps"), 0);
    ck_assert_msg(strstr(tu_out, "default: 0.2") && strstr(tu_out, "(0, 1)"), "%s", tu_out);
    ck_assert_int_eq(tu_dllm("config correction.ais.weights"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "correction.ais.weights.variance\n"));
    ck_assert_ptr_null(strstr(tu_out, "correction.ais.bias"));
    expect_refused("config grpo.nope", "grpo.nope", "dllm-rl config");
    /* --defaults is a config the reader takes back: the defaults themselves */
    ck_assert_int_eq(tu_sh("cd %s && %s config --defaults > d.yaml", tu_dir, tu_bin()), 0);
    ck_assert_int_eq(tu_dllm("train d.yaml --print-config"), 0);
    char *a = strdup(tu_out);
    tu_write("min.yaml", "seed: 1\n");
    ck_assert_int_eq(tu_dllm("train min.yaml --print-config"), 0);
    ck_assert_str_eq(a, tu_out);
    free(a);
}
END_TEST

/* With stdout a file (nohup, a batch system), the header is there while the
 * first evaluation still runs. */
START_TEST(test_header_reaches_a_file_at_once)
{
    tu_write_rl_config("h.yaml", "header", 6, 0);
    bool running;
    bool seen = tu_dllm_shows("h", "train: runs/header", 1200, &running,
                              "train h.yaml --set eval.every=1 --set eval.n=3000 "
                              "--set task.train.n=64");
    ck_assert_msg(running, "the run ended before the check");
    ck_assert_msg(seen, "the header did not reach the file during the first evaluation");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli_refuse");
    TCase *tc = tcase_create("refuse");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_refused_inputs);
    tcase_add_test(tc, test_resume_rules);
    tcase_add_test(tc, test_killed_runs_follow_the_messages);
    tcase_add_test(tc, test_feedback);
    tcase_add_test(tc, test_config_command_and_doc);
    tcase_add_test(tc, test_header_reaches_a_file_at_once);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx)) /* docs/CONFIG.md is found beside the test data */
        return NULL;
    if (!tu_tiny_model("llada", "model"))
        return tu_abort(ctx, "init-model failed");
    ctx->nofork = true;
    return suite();
}
