/* test_custom_task: tasks and rewards of one's own (tasks/custom.h).
 *  - the reward program's protocol in process: answers read as numbers or
 *    {"reward", "correct"}; a program that cannot start is an input error, one
 *    that times out, exits or answers garbage an internal error naming it, and a
 *    program that closed its stdin never raises SIGPIPE here;
 *  - JSONL items under the configured field names, any JSON reference passed on
 *    as it is; a missing field and a bad line name FILE:LINE;
 *  - the example C plugin, built by its documented line, rewards and formats and
 *    generates; a plugin of another ABI version is refused;
 *  - end to end on the tiny model: every logged reward is the one the Python
 *    program answered, for the prompt and reference of the item it was asked
 *    about; the example config trains and its evaluation means are the program's;
 *    the refusals exit 2 and the failures mid-run exit 1, naming the program. */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"
#include "tasks/custom.h"
#include "tasks/reward_program.h"
#include "tasks/task_plugin.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tmp[64];

/* The source tree's root (DLLM_TEST_DATA is its tests/data). */
static const char *srcdir(void)
{
    static char p[1024];
    const char *d = getenv("DLLM_TEST_DATA");
    snprintf(p, sizeof p, "%s/../..", d ? d : "../tests/data");
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The file tmp/name, malloc'd ("" when absent). */
static char *slurp(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    char *buf = calloc(1, 1 << 20);
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

static bool have(const char *tool)
{
    return tu_sh("command -v %s >/dev/null 2>&1", tool) == 0;
}

static void setup(void)
{
    strcpy(tmp, "/tmp/dllm-custom-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    tu_sh("rm -rf %s", tmp);
}

/* ---- the reward program's protocol --------------------------------------------- */

START_TEST(command_words)
{
    char **argv;
    int argc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_command_split("  python3 'my reward.py' --x \"a \\\"b\\\"\" c\\ d ", &argv,
                                        &argc, &err), 0);
    ck_assert_int_eq(argc, 5);
    ck_assert_str_eq(argv[0], "python3");
    ck_assert_str_eq(argv[1], "my reward.py");
    ck_assert_str_eq(argv[2], "--x");
    ck_assert_str_eq(argv[3], "a \"b\"");
    ck_assert_str_eq(argv[4], "c d");
    ck_assert_ptr_null(argv[5]);
    free(argv);
    ck_assert_int_eq(dllm_command_split("python3 'open", &argv, &argc, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unterminated"));
    ck_assert_int_eq(dllm_command_split("   ", &argv, &argc, &err), DLLM_EXIT_INPUT);
}
END_TEST

START_TEST(answers_parse)
{
    double r;
    int c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_reward_parse_answer(" 0.25 ", &r, &c, &err), 0);
    ck_assert(r == 0.25 && c == -1);
    ck_assert_int_eq(dllm_reward_parse_answer("-3", &r, &c, &err), 0);
    ck_assert(r == -3 && c == -1);
    ck_assert_int_eq(dllm_reward_parse_answer("{\"reward\": 2, \"correct\": true}", &r, &c, &err), 0);
    ck_assert(r == 2 && c == 1);
    ck_assert_int_eq(dllm_reward_parse_answer("{\"correct\": 0, \"reward\": 0.5}", &r, &c, &err), 0);
    ck_assert(r == 0.5 && c == 0);
    const char *bad[] = {"", "hello", "1 2", "nan", "inf", "1e999", "{\"reward\": \"1\"}", "{}",
                         "{\"reward\": 1, \"correct\": 2}", "[1]", "{\"reward\": 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(dllm_reward_parse_answer(bad[i], &r, &c, &err) == DLLM_EXIT_INPUT,
                      "'%s' was accepted", bad[i]);
}
END_TEST

START_TEST(program_answers)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    /* answers alternate: a bare number, then an object */
    ck_assert_int_eq(dllm_reward_program_start(&p, "sh -c 'while read l; do echo 0.75; read l || "
                                               "exit 0; echo \"{\\\"reward\\\": -1, \\\"correct\\\": "
                                               "true}\"; done'", 5, &err), 0);
    double r;
    int c;
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(dllm_reward_program_ask(p, "{\"x\": 1}", 8, &r, &c, &err) == 0, "%s", err.msg);
        ck_assert(r == 0.75 && c == -1);
        ck_assert_msg(dllm_reward_program_ask(p, "{\"x\": 2}", 8, &r, &c, &err) == 0, "%s", err.msg);
        ck_assert(r == -1 && c == 1);
    }
    dllm_reward_program_stop(p);
}
END_TEST

START_TEST(program_cannot_start)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_reward_program_start(&p, "/no/such/reward-program --x", 5, &err),
                     DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "/no/such/reward-program"));
    ck_assert_ptr_null(p);
    write_file("noexec.py", "print(1)\n"); /* a file without the execute bit */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "%s/noexec.py", tmp);
    ck_assert_int_eq(dllm_reward_program_start(&p, cmd, 5, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "noexec.py"));
}
END_TEST

START_TEST(program_times_out)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_reward_program_start(&p, "sleep 100", 0.3, &err), 0);
    double r, t0 = now();
    int c;
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), DLLM_EXIT_INTERNAL);
    ck_assert_double_lt(now() - t0, 5);
    ck_assert_ptr_nonnull(strstr(err.msg, "'sleep 100'"));
    ck_assert_ptr_nonnull(strstr(err.msg, "timeout_s = 0.3"));
    /* out of step after a failure: later requests fail at once */
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), DLLM_EXIT_INTERNAL);
    dllm_reward_program_stop(p);
}
END_TEST

START_TEST(program_crashes)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    double r;
    int c;
    ck_assert_int_eq(dllm_reward_program_start(&p, "sh -c 'read l; echo 1; read l; exit 3'", 5, &err),
                     0);
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), 0);
    ck_assert(r == 1);
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "exited with status 3"), "%s", err.msg);
    dllm_reward_program_stop(p);
    ck_assert_int_eq(dllm_reward_program_start(&p, "sh -c 'read l; kill -SEGV $$'", 5, &err), 0);
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "killed by signal 11"), "%s", err.msg);
    dllm_reward_program_stop(p);
}
END_TEST

START_TEST(program_answers_garbage)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    double r;
    int c;
    ck_assert_int_eq(dllm_reward_program_start(&p, "sh -c 'while read l; do echo hello; done'", 5,
                                               &err), 0);
    ck_assert_int_eq(dllm_reward_program_ask(p, "{}", 2, &r, &c, &err), DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "answered 'hello'") && strstr(err.msg, "while read"), "%s", err.msg);
    dllm_reward_program_stop(p);
}
END_TEST

/* A program gone before it read anything: the write fails with EPIPE, the process
 * lives (no SIGPIPE delivered, none left pending) and its signal mask is as before. */
START_TEST(program_gone_raises_no_sigpipe)
{
    dllm_reward_program *p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_reward_program_start(&p, "true", 5, &err), 0);
    usleep(300 * 1000);
    size_t n = 1 << 20; /* more than a pipe holds */
    char *big = malloc(n);
    memset(big, 'x', n);
    sigset_t before, after, pending;
    pthread_sigmask(SIG_SETMASK, NULL, &before);
    double r;
    int c;
    ck_assert_int_eq(dllm_reward_program_ask(p, big, n, &r, &c, &err), DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "'true'") && strstr(err.msg, "exited with status 0"), "%s", err.msg);
    pthread_sigmask(SIG_SETMASK, NULL, &after);
    ck_assert_int_eq(sigismember(&before, SIGPIPE), sigismember(&after, SIGPIPE));
    sigpending(&pending);
    ck_assert(!sigismember(&pending, SIGPIPE));
    free(big);
    dllm_reward_program_stop(p);
}
END_TEST

/* ---- items --------------------------------------------------------------------- */

static dllm_custom *open_custom(const char *pf, const char *rf)
{
    dllm_custom *c;
    dllm_err err = {0};
    dllm_custom_cfg cc = {.prompt_field = pf, .reference_field = rf, .command = "cat",
                          .timeout_s = 5};
    ck_assert_msg(dllm_custom_open(&c, &cc, &err) == 0, "%s", err.msg);
    return c;
}

START_TEST(items_from_named_fields)
{
    write_file("d.jsonl", "{\"q\": \"first\", \"ref\": \"abc\"}\n\n"
                          "{\"q\": \"second\", \"ref\": 42, \"other\": 1}\n"
                          "{\"q\": \"third\", \"ref\": {\"cases\": [1, 2.5, \"x\"]}}\n");
    dllm_custom *c = open_custom("q", "ref");
    char path[128];
    snprintf(path, sizeof path, "%s/d.jsonl", tmp);
    dllm_task_source src = {.path = path};
    dllm_task_items items;
    dllm_err err = {0};
    ck_assert_msg(dllm_custom_load(c, &src, &items, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(items.n, 3);
    ck_assert_str_eq(items.items[0].question, "first");
    ck_assert_str_eq(items.items[0].answer, "abc");
    ck_assert_str_eq(items.items[0].reference_json, "\"abc\"");
    ck_assert_str_eq(items.items[1].answer, "42");
    ck_assert_str_eq(items.items[2].reference_json, "{\"cases\":[1,2.5,\"x\"]}");
    /* the program ("cat") receives the request line; its echo is not a number, and the
     * message shows what was sent: the reference as the file's JSON value */
    double r;
    int ok;
    ck_assert_int_eq(dllm_custom_score(c, &items.items[2], "ok\xff", 3, &r, &ok, &err),
                     DLLM_EXIT_INTERNAL);
    ck_assert_msg(strstr(err.msg, "{\"prompt\":\"third\",\"completion\":\"ok\xEF\xBF\xBD\","
                         "\"reference\":{\"cases\":[1,2.5,\"x\"]}}"), "%s", err.msg);
    dllm_task_items_free(&items);
    dllm_custom_close(c);
}
END_TEST

START_TEST(items_refused_with_file_and_line)
{
    dllm_custom *c = open_custom("q", "ref");
    char path[128];
    snprintf(path, sizeof path, "%s/d.jsonl", tmp);
    dllm_task_source src = {.path = path};
    dllm_task_items items;
    dllm_err err = {0};
    const struct { const char *text, *want; } cases[] = {
        {"{\"q\": \"a\", \"ref\": 1}\n{\"ref\": 2}\n", "d.jsonl:2: task.fields.prompt: missing key 'q'"},
        {"{\"q\": \"a\", \"ref\": 1}\n{\"q\": \"b\"}\n", "d.jsonl:2: task.fields.reference: missing key 'ref'"},
        {"{\"q\": \"a\", \"ref\": 1}\n\n{\"q\": \"b\", ref: 2}\n", "d.jsonl:3: invalid JSON"},
        {"{\"q\": 7, \"ref\": 1}\n", "d.jsonl:1: task.fields.prompt: key 'q': expected a string"},
        {"{\"q\": \"\", \"ref\": 1}\n", "d.jsonl:1: task.fields.prompt: key 'q' is empty"},
        {"[1, 2]\n", "d.jsonl:1: expected a JSON object"},
        {"\n\n", "d.jsonl: no items"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("d.jsonl", cases[i].text);
        ck_assert_int_eq(dllm_custom_load(c, &src, &items, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: %s", i, err.msg);
        ck_assert_int_eq(items.n, 0);
    }
    dllm_custom_close(c);
}
END_TEST

START_TEST(utf8_sanitized)
{
    size_t n;
    char *s = dllm_utf8_sanitize("a\xc3\xa9" "b\xc3" "c\xed\xa0\x80" "d\xf0\x9f\x98\x80", 14, &n);
    ck_assert_str_eq(s, "a\xc3\xa9" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                        "d\xf0\x9f\x98\x80");
    ck_assert_int_eq(n, strlen(s));
    free(s);
}
END_TEST

/* ---- plugins ------------------------------------------------------------------- */

/* Builds a plugin from source with the documented line. */
static void build_plugin(const char *src, const char *so)
{
    ck_assert_int_eq(tu_sh("cc -O2 -shared -fPIC -I %s/include -o %s %s", srcdir(), so, src), 0);
}

START_TEST(example_plugin_rewards)
{
    char src[1200], so[128];
    snprintf(src, sizeof src, "%s/examples/custom-task/plugin.c", srcdir());
    snprintf(so, sizeof so, "%s/sums.so", tmp);
    build_plugin(src, so);
    dllm_custom *c;
    dllm_err err = {0};
    dllm_custom_cfg cc = {.prompt_field = "prompt", .reference_field = "reference", .plugin = so};
    ck_assert_msg(dllm_custom_open(&c, &cc, &err) == 0, "%s", err.msg);
    ck_assert(dllm_custom_can_generate(c));
    dllm_task_source gen = {.seed = 5, .n = 20};
    dllm_task_items items, again;
    ck_assert_int_eq(dllm_custom_load(c, &gen, &items, &err), 0);
    ck_assert_int_eq(dllm_custom_load(c, &gen, &again, &err), 0);
    ck_assert_int_eq(items.n, 20);
    for (size_t i = 0; i < items.n; i++) { /* "a+b=" with a + b as reference, reproducible */
        int a, b;
        ck_assert_int_eq(sscanf(items.items[i].question, "%d+%d=", &a, &b), 2);
        ck_assert_int_eq(atoi(items.items[i].answer), a + b);
        ck_assert_str_eq(items.items[i].question, again.items[i].question);
    }
    dllm_task_item it = {.question = "20+9=", .answer = "29"};
    char *f = dllm_custom_format(c, &it, &err);
    ck_assert_str_eq(f, "Add: 20+9=");
    free(f);
    const struct { const char *completion; double reward; int correct; } cases[] = {
        {"29 is it", 1.0, 1}, {" 29", 1.0, 1}, {"290", 0.1 * 2, 0}, {"x9", 0.1, 0},
        {"nothing", 0.0, 0}, {"92", 0.2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double r;
        int ok;
        ck_assert_int_eq(dllm_custom_score(c, &it, cases[i].completion,
                                           strlen(cases[i].completion), &r, &ok, &err), 0);
        ck_assert_msg(fabs(r - cases[i].reward) < 1e-12 && ok == cases[i].correct,
                      "'%s': %g %d", cases[i].completion, r, ok);
    }
    dllm_task_items_free(&items);
    dllm_task_items_free(&again);
    dllm_custom_close(c);
    /* a bare file name is the file in the working directory (dlopen alone would search
     * the library path for it) */
    char cwd[1024];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(tmp), 0);
    dllm_plugin *p;
    int rc = dllm_plugin_open(&p, "sums.so", &err);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(rc == 0, "%s", err.msg);
    dllm_plugin_close(p);
}
END_TEST

START_TEST(plugin_of_another_version_refused)
{
    write_file("v99.c", "#include \"dllm_task_plugin.h\"\n"
                        "static int r(void *s, const dllm_task_plugin_sample *x, double *y, int *c,\n"
                        "             char *e, size_t n) { *y = 1; return 0; }\n"
                        "const dllm_task_plugin *dllm_task_plugin_entry(void) {\n"
                        "  static const dllm_task_plugin p = {.abi_version = 99, .size = sizeof p,\n"
                        "                                     .name = \"future\", .reward = r};\n"
                        "  return &p; }\n");
    write_file("noentry.c", "int something(void) { return 1; }\n");
    char src[128], so[128];
    snprintf(src, sizeof src, "%s/v99.c", tmp);
    snprintf(so, sizeof so, "%s/v99.so", tmp);
    build_plugin(src, so);
    dllm_plugin *p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_plugin_open(&p, so, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "v99.so") && strstr(err.msg, "ABI version 99"), "%s", err.msg);
    snprintf(src, sizeof src, "%s/noentry.c", tmp);
    snprintf(so, sizeof so, "%s/noentry.so", tmp);
    build_plugin(src, so);
    ck_assert_int_eq(dllm_plugin_open(&p, so, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "exports no dllm_task_plugin_entry"), "%s", err.msg);
    ck_assert_int_eq(dllm_plugin_open(&p, "/no/such/plugin.so", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "/no/such/plugin.so"), "%s", err.msg);
}
END_TEST

/* ---- end to end on the tiny model ---------------------------------------------- */

static void write_config(const char *name, const char *task)
{
    char text[4096];
    snprintf(text, sizeof text,
             "experiment: %s\n"
             "seed: 3\n"
             "model: {preset: tiny, arch: llada}\n"
             "task: %s\n"
             "rollout: {precision: fp8, group_size: 4, gen_length: 8, block_length: 8, steps: 4,\n"
             "          temperature: 1.0}\n"
             "likelihood: {mc_samples: 2}\n"
             "grpo: {steps: 3, prompts_per_step: 2, inner_steps: 1}\n"
             "optim: {lr: 1e-3}\n"
             "eval: {every: 0, n: 4, gen_length: 8, block_length: 8, steps: 4}\n"
             "log: {dir: %s/runs}\n"
             "checkpoint: {every: 0, keep: 1}\n",
             name, task, tmp);
    char file[80];
    snprintf(file, sizeof file, "%s.yaml", name);
    write_file(file, text);
}

/* A reward that differs from completion to completion, answered as JSON and logged
 * with the request it answers. */
static const char reward_py[] =
    "import json, sys\n"
    "log = open(sys.argv[1], 'a')\n"
    "for line in sys.stdin:\n"
    "    req = json.loads(line)\n"
    "    b = req['completion'].encode('utf-8')\n"
    "    r = (sum(b) % 97) / 97.0 + 0.001 * len(b)\n"
    "    print(json.dumps({'reward': r, 'correct': r > 0.5}), flush=True)\n"
    "    log.write(json.dumps({'request': req, 'reward': r}) + '\\n')\n"
    "    log.flush()\n";

static const char data_jsonl[] =
    "{\"text\": \"one two\", \"gold\": \"two\"}\n"
    "{\"text\": \"three\", \"gold\": [3, \"x\"]}\n"
    "{\"text\": \"four five\", \"gold\": 45}\n"
    "{\"text\": \"six\", \"gold\": {\"n\": 6}}\n";

START_TEST(python_reward_trains_and_is_logged)
{
    write_file("reward.py", reward_py);
    write_file("data.jsonl", data_jsonl);
    char task[1024];
    snprintf(task, sizeof task,
             "{name: custom, format: plain, chat: plain, train: {path: %s/data.jsonl},\n"
             "       fields: {prompt: text, reference: gold},\n"
             "       reward: {command: python3 %s/reward.py %s/asked.jsonl, timeout_s: 60}}",
             tmp, tmp, tmp);
    write_config("py", task);
    ck_assert_int_eq(tu_sh("%s train %s/py.yaml --quiet 2>%s/err", tu_bin(), tmp, tmp), 0);
    int64_t n;
    double *logged = tu_log_column("trajectories/reward", &n, "%s/runs/py/log.h5", tmp);
    ck_assert_int_eq(n, 3 * 2 * 4); /* steps x prompts x group */
    /* the data set, to check what each request carried */
    char path[128];
    snprintf(path, sizeof path, "%s/data.jsonl", tmp);
    json_t *data[4];
    FILE *f = fopen(path, "r");
    for (int i = 0; i < 4; i++) {
        char line[256];
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        data[i] = json_loads(line, 0, NULL);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/asked.jsonl", tmp);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[8192];
    int64_t k = 0;
    int distinct = 0;
    for (; fgets(line, sizeof line, f); k++) {
        json_t *o = json_loads(line, 0, NULL), *req = json_object_get(o, "request");
        ck_assert_ptr_nonnull(req);
        ck_assert_int_lt(k, n);
        double r = json_number_value(json_object_get(o, "reward"));
        ck_assert_msg(logged[k] == r, "row %lld: logged %.17g, the program answered %.17g",
                      (long long)k, logged[k], r);
        distinct += k > 0 && logged[k] != logged[k - 1];
        const char *prompt = json_string_value(json_object_get(req, "prompt"));
        bool found = false;
        for (int i = 0; i < 4; i++)
            if (!strcmp(prompt, json_string_value(json_object_get(data[i], "text")))) {
                found = true;
                ck_assert(json_equal(json_object_get(req, "reference"),
                                     json_object_get(data[i], "gold")));
            }
        ck_assert_msg(found, "request for an unknown prompt '%s'", prompt);
        ck_assert(json_is_string(json_object_get(req, "completion")));
        json_decref(o);
    }
    fclose(f);
    ck_assert_int_eq(k, n);
    ck_assert_int_gt(distinct, 0);
    for (int i = 0; i < 4; i++)
        json_decref(data[i]);
    free(logged);
    /* the stored config reads back: the run resumes with its reward program, and may
     * give it another timeout */
    ck_assert_int_eq(tu_sh("%s train --resume %s/runs/py --set grpo.steps=4 "
                           "--set task.reward.timeout_s=90 --quiet 2>>%s/err", tu_bin(), tmp, tmp), 0);
    logged = tu_log_column("trajectories/reward", &n, "%s/runs/py/log.h5", tmp);
    ck_assert_int_eq(n, 4 * 2 * 4);
    free(logged);
}
END_TEST

/* The example config, its reward.py logging what it answers: the evaluation means in
 * the log are the means of the program's answers for the eval file's items. */
START_TEST(example_config_trains)
{
    ck_assert_int_eq(tu_sh("cd %s && %s train examples/custom-task/python-reward.yaml --quiet "
                           "--set log.dir=%s/runs --set grpo.steps=1 --set eval.every=1 "
                           "--set 'task.reward.command=python3 examples/custom-task/reward.py "
                           "--log %s/asked.jsonl' 2>%s/err", srcdir(), tu_bin(), tmp, tmp, tmp), 0);
    int64_t n;
    double *mean = tu_log_column("eval/custom/reward_mean", &n, "%s/runs/custom-python/log.h5", tmp);
    ck_assert_int_eq(n, 2); /* before the first step and after the last */
    char path[128];
    snprintf(path, sizeof path, "%s/asked.jsonl", tmp);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[8192];
    double sum[2] = {0, 0};
    int count[2] = {0, 0}, train = 0, block = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *prompt = json_string_value(json_object_get(json_object_get(o, "request"), "prompt"));
        /* sums-eval.jsonl's first numbers are 50 or more, sums.jsonl's below 50 */
        if (atoi(prompt) >= 50) {
            ck_assert_int_lt(block, 2);
            sum[block] += json_number_value(json_object_get(o, "reward"));
            count[block]++;
        } else {
            train++;
            block = 1;
        }
        json_decref(o);
    }
    fclose(f);
    ck_assert_int_eq(count[0], 10);
    ck_assert_int_eq(count[1], 10);
    ck_assert_int_eq(train, 4 * 4);
    for (int b = 0; b < 2; b++)
        ck_assert_msg(fabs(mean[b] - sum[b] / 10) < 1e-12, "eval %d: %.17g vs %.17g", b, mean[b],
                      sum[b] / 10);
    free(mean);
}
END_TEST

START_TEST(example_plugin_trains)
{
    char src[1200], so[128];
    snprintf(src, sizeof src, "%s/examples/custom-task/plugin.c", srcdir());
    snprintf(so, sizeof so, "%s/sums.so", tmp);
    build_plugin(src, so);
    ck_assert_int_eq(tu_sh("cd %s && %s train examples/custom-task/plugin.yaml --quiet "
                           "--set log.dir=%s/runs --set grpo.steps=2 --set task.plugin=%s "
                           "2>%s/err", srcdir(), tu_bin(), tmp, so, tmp), 0);
    int64_t n;
    double *r = tu_log_column("trajectories/reward", &n, "%s/runs/custom-plugin/log.h5", tmp);
    ck_assert_int_eq(n, 2 * 4 * 4);
    for (int64_t i = 0; i < n; i++) { /* the plugin's values: 1, or 0.1 per digit up to 0.5 */
        double tenths = r[i] * 10;
        ck_assert_msg(r[i] == 1.0 || (fabs(tenths - round(tenths)) < 1e-9 && r[i] <= 0.5),
                      "reward %.17g", r[i]);
    }
    free(r);
}
END_TEST

/* What the CLI says and returns when the reward cannot work. */
START_TEST(cli_refusals_and_failures)
{
    write_file("data.jsonl", data_jsonl);
    const struct { const char *task; int status; const char *want[2]; double within_s; } cases[] = {
        {"{name: custom, train: {path: %s/data.jsonl}, fields: {prompt: text, reference: gold},\n"
         "       reward: {command: /no/such/reward-prog}}", 2, {"/no/such/reward-prog", "cannot start"}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}, fields: {prompt: text, reference: gold},\n"
         "       reward: {command: sleep 100, timeout_s: 0.5}}", 1, {"'sleep 100'", "timeout_s = 0.5"}, 60},
        {"{name: custom, train: {path: %s/data.jsonl}, fields: {prompt: text, reference: gold},\n"
         "       reward: {command: \"sh -c 'read l; exit 3'\"}}", 1, {"exited with status 3", "read l"}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}, fields: {prompt: text, reference: gold},\n"
         "       reward: {command: \"sh -c 'while read l; do echo oops; done'\"}}", 1,
         {"answered 'oops'", "while read"}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}, fields: {prompt: question, reference: gold},\n"
         "       reward: {command: cat}}", 2, {"data.jsonl:1:", "missing key 'question'"}, 0},
        {"{name: custom, train: {path: %s/bad.jsonl}, fields: {prompt: text, reference: gold},\n"
         "       reward: {command: cat}}", 2, {"bad.jsonl:3:", "invalid JSON"}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}}", 2, {"task.name custom needs its reward", ""}, 0},
        {"{name: gsm8k, train: {path: %s/data.jsonl}, reward: {command: cat}}", 2,
         {"task.reward.command is read only by task.name custom", ""}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}, plugin: %s/data.jsonl, reward: {command: cat}}", 2,
         {"one source, not both", ""}, 0},
        {"{name: custom, train: {path: %s/data.jsonl}, plugin: %s/data.jsonl}", 2,
         {"task.plugin: cannot load", "data.jsonl"}, 0},
    };
    write_file("bad.jsonl", "{\"text\": \"a\", \"gold\": 1}\n{\"text\": \"b\", \"gold\": 2}\n{\"text\": \n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char task[1024];
        snprintf(task, sizeof task, cases[i].task, tmp, tmp);
        write_config("c", task);
        double t0 = now();
        int st = tu_sh("%s train %s/c.yaml --quiet --force 2>%s/err >/dev/null", tu_bin(), tmp, tmp);
        char *err = slurp("err");
        ck_assert_msg(st == cases[i].status, "case %zu: exit %d, want %d: %s", i, st, cases[i].status,
                      err);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(strstr(err, cases[i].want[k]), "case %zu: no '%s' in: %s", i,
                          cases[i].want[k], err);
        if (cases[i].within_s > 0)
            ck_assert_double_lt(now() - t0, cases[i].within_s);
        free(err);
    }
}
END_TEST

/* The commands that take a task by name alone say where a custom task comes from. */
START_TEST(other_commands_point_to_the_config)
{
    ck_assert_int_eq(tu_sh("%s tasks list >%s/out 2>&1", tu_bin(), tmp), 0);
    char *out = slurp("out");
    ck_assert_ptr_nonnull(strstr(out, "\ncustom "));
    free(out);
    write_file("g.jsonl", "{\"completion\": \"x\"}\n");
    const char *cmds[] = {"tasks sample custom --data", "tasks sft-data custom --data",
                          "grade custom --input"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ck_assert_int_eq(tu_sh("%s %s %s/g.jsonl >%s/out 2>&1", tu_bin(), cmds[i], tmp, tmp), 2);
        out = slurp("out");
        ck_assert_msg(strstr(out, "docs/CUSTOM_TASKS.md"), "%s: %s", cmds[i], out);
        free(out);
    }
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_have_bin() || !getenv("DLLM_TEST_DATA"))
        return tu_skip(ctx, "DLLM_BIN (the dllm-rl binary) or DLLM_TEST_DATA not set");
    /* the cases that need a Python or a C compiler run where there is one */
    const bool py = have("python3"), cc = have("cc");
    Suite *s = suite_create("custom_task");
    TCase *unit = tcase_create("unit");
    tcase_add_checked_fixture(unit, setup, teardown);
    tcase_set_timeout(unit, 120);
    tcase_add_test(unit, command_words);
    tcase_add_test(unit, answers_parse);
    tcase_add_test(unit, program_answers);
    tcase_add_test(unit, program_cannot_start);
    tcase_add_test(unit, program_times_out);
    tcase_add_test(unit, program_crashes);
    tcase_add_test(unit, program_answers_garbage);
    tcase_add_test(unit, program_gone_raises_no_sigpipe);
    tcase_add_test(unit, items_from_named_fields);
    tcase_add_test(unit, items_refused_with_file_and_line);
    tcase_add_test(unit, utf8_sanitized);
    if (cc) {
        tcase_add_test(unit, example_plugin_rewards);
        tcase_add_test(unit, plugin_of_another_version_refused);
    }
    suite_add_tcase(s, unit);
    TCase *cli = tcase_create("cli");
    tcase_add_checked_fixture(cli, setup, teardown);
    tcase_set_timeout(cli, 600);
    if (py) {
        tcase_add_test(cli, python_reward_trains_and_is_logged);
        tcase_add_test(cli, example_config_trains);
    }
    if (cc)
        tcase_add_test(cli, example_plugin_trains);
    tcase_add_test(cli, cli_refusals_and_failures);
    tcase_add_test(cli, other_commands_point_to_the_config);
    suite_add_tcase(s, cli);
    if (!py || !cc)
        tu_partial(ctx, "no %s%s%s here for the cases that need it (the others ran)",
                   py ? "" : "python3", !py && !cc ? " and no " : "", cc ? "" : "C compiler (cc)");
    return s;
}
