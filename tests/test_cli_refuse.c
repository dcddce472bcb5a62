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
#include "tests/test_shell.h"
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

static char tmp[64];

static const char *bin(void)
{
    const char *b = getenv("DLLM_BIN");
    return b ? b : "./dllm-rl";
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

static char *out_s, *err_s;

/* Runs `dllm-rl ARGS` in tmp: its exit status; stdout and stderr in out_s, err_s. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char args[6000], p[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int st = tu_sh("cd %s && OMP_NUM_THREADS=1 %s %s >stdout 2>stderr", tmp, bin(), args);
    free(out_s);
    free(err_s);
    snprintf(p, sizeof p, "%s/stdout", tmp);
    out_s = slurp(p);
    snprintf(p, sizeof p, "%s/stderr", tmp);
    err_s = slurp(p);
    return st;
}

static void write_file(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* a tiny sudoku GRPO run on model/ (relative to tmp) */
static void write_rl_config(const char *name, const char *experiment, int ckpt_every)
{
    char text[2048];
    snprintf(text, sizeof text,
             "experiment: %s\nseed: 7\nmodel: {path: model}\n"
             "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
             "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "likelihood: {mc_samples: 2}\n"
             "grpo: {steps: 6, prompts_per_step: 2, inner_steps: 1}\n"
             "eval: {every: 0, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "log: {dir: runs}\ncheckpoint: {every: %d}\n",
             experiment, ckpt_every);
    write_file(name, text);
}

static void expect_refused(const char *args, const char *needle1, const char *needle2)
{
    ck_assert_msg(run("%s", args) == 2, "%s: not exit 2 (stderr: %s)", args, err_s);
    ck_assert_msg(strstr(err_s, needle1), "%s: '%s' not in: %s", args, needle1, err_s);
    ck_assert_msg(strstr(err_s, needle2), "%s: '%s' not in: %s", args, needle2, err_s);
}

START_TEST(test_refused_inputs)
{
    write_rl_config("rl.yaml", "r", 0);
    write_file("empty.yaml", "# nothing\n");
    write_file("sft.yaml", "sft: {steps: 2}\ndata: {train: d.jsonl}\n");
    ck_assert_int_eq(tu_sh("mkdir -p %s/adir", tmp), 0);
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
    snprintf(p, sizeof p, "%s/runs", tmp);
    ck_assert_int_ne(stat(p, &st), 0);
}
END_TEST

START_TEST(test_resume_rules)
{
    write_rl_config("f.yaml", "fin", 1);
    ck_assert_int_eq(run("train f.yaml --quiet --set grpo.steps=2"), 0);
    /* the stored config has grpo.steps 2: f.yaml (6) differs */
    expect_refused("train f.yaml --resume runs/fin", "first in grpo.steps", "train --resume runs/fin");
    ck_assert_int_eq(run("train --resume runs/fin"), 0);
    ck_assert_msg(strstr(out_s, "is finished") && strstr(out_s, "--set grpo.steps=N"), "%s", out_s);
    /* the same config with the same override is the run's own: accepted */
    ck_assert_int_eq(run("train f.yaml --resume runs/fin --set grpo.steps=2"), 0);
    ck_assert_ptr_nonnull(strstr(out_s, "is finished"));
    expect_refused("train --resume runs/fin --set rollout.temperature=0.5", "rollout.temperature",
                   "grpo.steps");
    /* extending: runs steps 3 and 4, and the next resume knows the new end */
    ck_assert_int_eq(run("train --resume runs/fin --set grpo.steps=4"), 0);
    ck_assert_msg(strstr(out_s, "resuming runs/fin at step 3") && strstr(out_s, "step 4/4"), "%s", out_s);
    ck_assert_int_eq(run("train --resume runs/fin"), 0);
    ck_assert_msg(strstr(out_s, "step 4 of grpo.steps 4"), "%s", out_s);
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
                 tmp, bin(), config);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, wait_for);
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
    write_rl_config("k.yaml", "killed", 1);
    start_and_kill("k.yaml", "runs/killed/ckpt/step-2/state.json", 1000u * (unsigned)(getpid() % 40));
    expect_refused("train k.yaml", "already holds a run", "--force");
    named_command(err_s, "continue it with", cmd, sizeof cmd);
    ck_assert_msg(run("%s --quiet", cmd) == 0, "%s: %s", cmd, err_s);
    ck_assert_int_eq(run("train --resume runs/killed"), 0);
    ck_assert_ptr_nonnull(strstr(out_s, "is finished"));

    /* killed before its first checkpoint: both messages say how to restart */
    write_rl_config("n.yaml", "nockpt", 1000);
    start_and_kill("n.yaml", "runs/nockpt/log.h5", 0);
    expect_refused("train n.yaml", "no checkpoint to continue from", "train n.yaml --force");
    expect_refused("train --resume runs/nockpt", "no checkpoint to resume from", "--force");
    named_command(err_s, "start it again with", cmd, sizeof cmd);
    ck_assert_msg(run("%s --quiet", cmd) == 0, "%s: %s", cmd, err_s);
    char p[256];
    snprintf(p, sizeof p, "%s/runs/nockpt/ckpt/step-6/state.json", tmp);
    ck_assert_int_eq(access(p, F_OK), 0);
}
END_TEST

START_TEST(test_feedback)
{
    write_rl_config("p.yaml", "shown", 0);
    ck_assert_int_eq(run("train p.yaml --print-config --set grpo.steps=7"), 0);
    ck_assert_msg(strstr(out_s, "grpo:\n") && strstr(out_s, "  steps: 7\n"), "%s", out_s);
    char p[256];
    snprintf(p, sizeof p, "%s/runs/shown", tmp);
    ck_assert_int_ne(access(p, F_OK), 0);
    /* evaluation of more than one batch reports its progress, on stderr */
    ck_assert_int_eq(run("train p.yaml --set grpo.steps=0 --set eval.every=1 --set eval.n=130 "
                         "--set task.train.n=64"), 0);
    ck_assert_msg(strstr(err_s, "train: opening ") && strstr(err_s, "model and sudoku items") &&
                      strstr(err_s, "train: opened in ") && strstr(err_s, "eval: 130 items") && strstr(err_s, "eval: 64/130 items") &&
                      strstr(err_s, "eval: 128/130 items") && strstr(err_s, "ETA"),
                  "%s", err_s);
    ck_assert_ptr_null(strstr(out_s, "eval: 64/130"));
    /* the summary says why a metric is NaN throughout, and gives units */
    ck_assert_int_eq(run("inspect runs/killed"), 0);
    ck_assert_msg(strstr(out_s, "absent (NaN at every step)") && strstr(out_s, "policy_kl") &&
                      strstr(out_s, "grpo.beta > 0") && strstr(out_s, "  units\n") &&
                      strstr(out_s, "  s\n"),
                  "%s", out_s);
    ck_assert_int_eq(run("inspect runs/killed --json"), 0);
    ck_assert_msg(strstr(out_s, "\"absent_metrics\"") && strstr(out_s, "grpo.beta > 0"), "%s", out_s);
    /* the model's tokenizer travels with the run */
    ck_assert_int_eq(tu_sh("cmp -s %s/model/tokenizer.json %s/runs/shown/tokenizer.json", tmp, tmp), 0);
}
END_TEST

/* The keys of the configuration reference's table (docs/CONFIG.md, up to its first
 * section): `a.b`, `.c` (a.c), `a.{x,y}`. */
static int config_doc_keys(char keys[][64], int cap)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/../../docs/CONFIG.md", getenv("DLLM_TEST_DATA"));
    char *readme = slurp(p);
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
    ck_assert_int_eq(run("config"), 0);
    char *listing = strdup(out_s);
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
    ck_assert_int_eq(run("config grpo.clip_eps"), 0);
    ck_assert_msg(strstr(out_s, "default: 0.2") && strstr(out_s, "(0, 1)"), "%s", out_s);
    ck_assert_int_eq(run("config correction.ais.weights"), 0);
    ck_assert_ptr_nonnull(strstr(out_s, "correction.ais.weights.variance\n"));
    ck_assert_ptr_null(strstr(out_s, "correction.ais.bias"));
    expect_refused("config grpo.nope", "grpo.nope", "dllm-rl config");
    /* --defaults is a config the reader takes back: the defaults themselves */
    ck_assert_int_eq(tu_sh("cd %s && %s config --defaults > d.yaml", tmp, bin()), 0);
    ck_assert_int_eq(run("train d.yaml --print-config"), 0);
    char *a = strdup(out_s);
    write_file("min.yaml", "seed: 1\n");
    ck_assert_int_eq(run("train min.yaml --print-config"), 0);
    ck_assert_str_eq(a, out_s);
    free(a);
}
END_TEST

/* With stdout a file (nohup, a batch system), the header is there while the
 * first evaluation still runs. */
START_TEST(test_header_reaches_a_file_at_once)
{
    write_rl_config("h.yaml", "header", 0);
    char cmd[2048], p[256];
    snprintf(cmd, sizeof cmd,
             "cd %s && OMP_NUM_THREADS=1 exec %s train h.yaml --set eval.every=1 "
             "--set eval.n=3000 --set task.train.n=64 >h.out 2>h.err", tmp, bin());
    snprintf(p, sizeof p, "%s/h.out", tmp);
    bool running;
    bool seen = tu_text_appears_while_running(cmd, p, "train: runs/header", 1200, &running);
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

int main(void)
{
    const char *b = getenv("DLLM_BIN");
    if (!b || access(b, X_OK) != 0) {
        fprintf(stderr, "test_cli_refuse: SKIP: DLLM_BIN (the dllm-rl binary) not set or not "
                        "executable\n");
        return 77;
    }
    if (!getenv("DLLM_TEST_DATA")) { /* docs/CONFIG.md is found beside the test data */
        fprintf(stderr, "test_cli_refuse: SKIP: DLLM_TEST_DATA not set\n");
        return 77;
    }
    strcpy(tmp, "/tmp/dllm-cli-refuse-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    if (tu_sh("%s init-model --arch llada --preset tiny --seed 3 --out %s/model >/dev/null", b, tmp)) {
        fprintf(stderr, "test_cli_refuse: init-model failed\n");
        return 1;
    }
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    free(out_s);
    free(err_s);
    tu_sh("rm -rf %s", tmp);
    return nf == 0 ? 0 : 1;
}
