/* dllm-rl eval: the evaluation protocol of `train` (greedy accuracy with its
 * standard error, mean reward, per-item outcomes) on a model directory, without
 * a training run. It opens the run through rl_run_open and scores with
 * rl_evaluate, the very functions `train` evaluates with, so the numbers equal
 * `train ... --set grpo.steps=0`'s for the same items and settings. */
#include "src/cli/cli_util.h"
#include "src/comm/comm.h"
#include "src/cli/commands.h"
#include "src/log/eval_outcomes.h"
#include "src/config/gen_settings.h"
#include "src/rl/rl.h"
#include "src/rl/rl_run.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage_text[] =
    "usage: dllm-rl eval --model DIR --task NAME [--n N] [--split eval|FILE] [--seed S]\n"
    "         [--gen-length N] [--block-length N] [--steps N] [--temperature T]\n"
    "         [--precision fp32|bf16] [--config CONFIG.yaml] [--set key.path=value ...]\n"
    "         [--out FILE] [--json]\n"
    "\n"
    "Evaluates a model as `train` does at every eval step: greedy decoding (at\n"
    "--temperature 0) of the first N held-out items (default 500), accuracy with its\n"
    "standard error, mean reward. --split eval (default) takes the task generator's\n"
    "held-out items for --seed (default 1; those `train` evaluates with the same\n"
    "seed); --split FILE the task's items from a JSONL file.\n"
    "Sampler settings: the flags, else DIR/generation.json (written by sft with every\n"
    "checkpoint), else eval.* of --config, else the config defaults (64, 16, 32, 0);\n"
    "a Dream checkpoint's generation.json also sets rollout.dream.* (its sampler).\n"
    "--precision: the trainer numerics evaluated with (fp32, or bf16 rounding).\n"
    "Task settings (task.format, task.max_blanks, task.n_numbers, task.reward): those\n"
    "the model was trained with when DIR/generation.json records them (every train\n"
    "checkpoint; sft when its config sets task.*) and NAME is that task, else the\n"
    "task's defaults; --config takes the task.* and eval.* settings of a training\n"
    "config instead; --set overrides any config key. The report names the settings.\n"
    "--out FILE writes the per-item outcomes in the format of RUN_DIR/eval/*.txt\n"
    "(header, then one 0/1 line per item). --json prints one JSON object.\n"
    "\n"
    "exit status: 0 success, 2 bad input, 1 internal failure\n";

typedef struct {
    const char *model, *task, *split, *precision, *config, *out;
    long n, seed, gen, block, steps;
    double temp;
    bool set_n, set_seed, set_gen, set_block, set_steps, set_temp;
    int json;
    const char *sets[64];
    int nsets;
} eval_args;

static int parse_args(int argc, char **argv, eval_args *a, dllm_err *err)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"task", required_argument, 0, 'k'},
        {"n", required_argument, 0, 'n'},          {"split", required_argument, 0, 'x'},
        {"seed", required_argument, 0, 'S'},       {"gen-length", required_argument, 0, 'g'},
        {"block-length", required_argument, 0, 'b'}, {"steps", required_argument, 0, 's'},
        {"temperature", required_argument, 0, 't'}, {"precision", required_argument, 0, 'P'},
        {"config", required_argument, 0, 'c'},     {"set", required_argument, 0, 'e'},
        {"out", required_argument, 0, 'o'},        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        int bad = 0;
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'k': a->task = optarg; break;
        case 'n': bad = cli_parse_int(optarg, "--n", 1, 1 << 24, &a->n, err); a->set_n = true; break;
        case 'x': a->split = optarg; break;
        case 'S':
            bad = cli_parse_int(optarg, "--seed", 0, 0x7fffffffffffffffL, &a->seed, err);
            a->set_seed = true;
            break;
        case 'g':
            bad = cli_parse_int(optarg, "--gen-length", 1, 1 << 20, &a->gen, err);
            a->set_gen = true;
            break;
        case 'b':
            bad = cli_parse_int(optarg, "--block-length", 1, 1 << 20, &a->block, err);
            a->set_block = true;
            break;
        case 's':
            bad = cli_parse_int(optarg, "--steps", 1, 32767, &a->steps, err);
            a->set_steps = true;
            break;
        case 't':
            bad = cli_parse_double(optarg, "--temperature", &a->temp, err);
            if (!bad && a->temp < 0)
                bad = dllm_err_set(err, DLLM_EXIT_INPUT, "--temperature must be >= 0");
            a->set_temp = true;
            break;
        case 'P': a->precision = optarg; break;
        case 'c': a->config = optarg; break;
        case 'e':
            if (a->nsets == 64)
                return dllm_err_set(err, DLLM_EXIT_INPUT, "too many --set options");
            a->sets[a->nsets++] = optarg;
            break;
        case 'o': a->out = optarg; break;
        case 'j': a->json = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return dllm_err_set(err, DLLM_EXIT_INPUT, "bad option (see --help)");
        }
        if (bad)
            return err->code;
    }
    if (optind < argc)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "unexpected argument '%s' (see --help)",
                            argv[optind]);
    if (!a->model || !a->task)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--model DIR and --task NAME are required "
                            "(see --help)");
    return 0;
}

/* The run's config: --config (or the defaults), the model and task, then the
 * sampler settings (flags > generation.json > config), then --set. */
/* Where eval's task settings came from, for its report line. */
typedef enum { TASK_DEFAULTS, TASK_MODEL, TASK_CONFIG, TASK_OTHER_TASK } task_source;

static int build_cfg(const eval_args *a, dllm_cfg *cfg, bool *from_ckpt, task_source *ts,
                     dllm_err *err)
{
    dllm_cfg_defaults(cfg);
    if (a->config && dllm_cfg_load(cfg, a->config, err))
        return err->code;
    char kv[4400];
#define SET(...)                                                                                   \
    do {                                                                                           \
        snprintf(kv, sizeof kv, __VA_ARGS__);                                                      \
        if (dllm_cfg_set(cfg, kv, err))                                                            \
            return err->code;                                                                      \
    } while (0)
    struct stat st;
    if (stat(a->model, &st) || !S_ISDIR(st.st_mode))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--model %s: not a model directory", a->model);
    SET("model.path=%s", a->model);
    SET("task.name=%s", a->task);
    if (a->precision) {
        if (strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16"))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "--precision %s: expected fp32 or bf16 (evaluation runs at the "
                                "trainer's numerics)", a->precision);
        SET("model.trainer_precision=%s", a->precision);
    }
    if (a->set_n)
        cfg->eval.n = (int)a->n;
    if (a->set_seed)
        cfg->seed = a->seed;
    if (a->split && strcmp(a->split, "eval")) {
        if (stat(a->split, &st))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "--split %s: no such file", a->split);
        snprintf(cfg->task.eval.path, sizeof cfg->task.eval.path, "%s", a->split);
        /* a task without a generator loads its training items from a file too */
        snprintf(cfg->task.train.path, sizeof cfg->task.train.path, "%s", a->split);
    }
    /* no rollout copy and one training item: only the evaluation is used */
    cfg->rollout.precision = CFG_ROLLOUT_TRAINER;
    cfg->task.train.n = 1;
    cfg->grpo.prompts_per_step = 1;
    cfg->grpo.steps = 0;
    ckpt_generation g;
    ckpt_generation_default(&g, true, cfg->eval.gen_length);
    g.block_length = cfg->eval.block_length;
    g.steps = cfg->eval.steps;
    g.temperature = cfg->eval.temperature;
    snprintf(g.chat, sizeof g.chat, "%s", cfg_names_name(&cfg_names_chat, cfg->task.chat));
    int grc = ckpt_read_generation(a->model, &g, err);
    if (grc > 0)
        return grc;
    *from_ckpt = grc == 0;
    if (grc == 0) {
        cfg->eval.gen_length = g.gen_length;
        cfg->eval.block_length = g.block_length;
        cfg->eval.steps = g.steps;
        cfg->eval.temperature = g.temperature;
        if (g.dream) { /* a Dream checkpoint's sampler */
            cfg->rollout.dream.alg = g.dcfg.alg;
            cfg->rollout.dream.eps = g.dcfg.eps;
            cfg->rollout.dream.alg_temp = g.dcfg.alg_temp;
            cfg->rollout.dream.top_k = g.dcfg.top_k;
        }
        if (!cfg_names_find(&cfg_names_chat, g.chat, &cfg->task.chat))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s/generation.json: chat '%s' is not one of "
                                "auto|plain|llada|qwen3", a->model, g.chat);
    }
    /* the task settings the model was trained with (prompt format, blanks, reward),
     * unless --config says otherwise; --set still overrides either */
    *ts = a->config ? TASK_CONFIG : TASK_DEFAULTS;
    if (grc == 0 && g.has_task && !a->config) {
        int want = (int)cfg->task.name;
        if (g.task.name == want) {
            ckpt_generation_apply_task(&g, cfg);
            *ts = TASK_MODEL;
        } else {
            *ts = TASK_OTHER_TASK;
        }
    }
    if (a->set_gen)
        cfg->eval.gen_length = (int)a->gen;
    if (a->set_block)
        cfg->eval.block_length = (int)a->block;
    if (a->set_steps)
        cfg->eval.steps = (int)a->steps;
    if (a->set_temp)
        cfg->eval.temperature = a->temp;
    for (int i = 0; i < a->nsets; i++)
        if (dllm_cfg_set(cfg, a->sets[i], err))
            return err->code;
#undef SET
    return 0;
}

/* The task settings evaluated with, and where they came from. */
static void print_task_settings(const dllm_cfg *cfg, task_source ts, bool sets, FILE *f)
{
    static const char *const from[] = {
        [TASK_DEFAULTS] = "the task's defaults: the model records none; --config or --set "
                          "task.* to change them",
        [TASK_MODEL] = "the model's generation.json: what it was trained with",
        [TASK_CONFIG] = "--config",
        [TASK_OTHER_TASK] = "the task's defaults: the model was trained on another task"};
    fprintf(f, "task %s: format %s, chat %s, max_blanks %d, n_numbers %d, reward %s (%s%s)\n",
            cfg_names_name(&cfg_names_task, cfg->task.name),
            cfg_names_name(&cfg_names_task_format, cfg->task.format),
            cfg_names_name(&cfg_names_chat, cfg->task.chat), cfg->task.max_blanks,
            cfg->task.n_numbers, cfg_names_name(&cfg_names_reward, cfg->task.reward.kind), from[ts],
            sets ? "; then --set" : "");
}

int cmd_eval(int argc, char **argv)
{
    eval_args a = {0};
    dllm_err err = {0};
    dllm_cfg cfg;
    bool from_ckpt = false;
    task_source ts = TASK_DEFAULTS;
    if (parse_args(argc, argv, &a, &err) || build_cfg(&a, &cfg, &from_ckpt, &ts, &err))
        return cli_fail("eval", &err);
    comm_init(&argc, &argv);
    rl_run run;
    double acc = NAN, se = NAN, rew = NAN;
    uint8_t *ok = NULL;
    int rc = rl_run_open(&run, &cfg, ".", &err);
    if (!rc && run.eval.n == 0)
        rc = dllm_err_set(&err, DLLM_EXIT_INPUT, "task %s: no evaluation items",
                          cfg_names_name(&cfg_names_task, cfg.task.name));
    if (!rc) {
        ok = dllm_calloc(run.eval.n, 1);
        rc = rl_evaluate(&run, &acc, &se, &rew, ok, &err);
    }
    if (!rc && a.out && run.rank == 0)
        rc = eval_outcomes_write_file(a.out, run.task->name, 0, ok, run.eval.n,
                                      rl_eval_items_hash(&run), &err);
    if (!rc && run.rank == 0) {
        const dllm_sampler_cfg *s = &run.eval_sampler;
        if (a.json) {
            printf("{\"task\": \"%s\", \"n\": %zu, \"accuracy\": ", run.task->name, run.eval.n);
            cli_print_json_number(stdout, acc, 17);
            printf(", \"accuracy_se\": ");
            cli_print_json_number(stdout, se, 17);
            printf(", \"reward_mean\": ");
            cli_print_json_number(stdout, rew, 17);
            printf(", \"gen_length\": %d, \"block_length\": %d, \"steps\": %d, \"temperature\": ",
                   s->gen_length, s->block_length, s->steps);
            cli_print_json_number(stdout, s->temperature, 17);
            static const char *const ts_name[] = {"defaults", "model", "config", "defaults"};
            printf(", \"task_format\": \"%s\", \"max_blanks\": %d, \"task_settings\": \"%s\"",
                   cfg_names_name(&cfg_names_task_format, cfg.task.format), cfg.task.max_blanks,
                   ts_name[ts]);
            printf(", \"items\": \"%016llx\"}\n", (unsigned long long)rl_eval_items_hash(&run));
        } else {
            printf("eval %s: %zu items, gen_length %d, block_length %d, steps %d, temperature "
                   "%g (%s)\n", run.task->name, run.eval.n, s->gen_length, s->block_length,
                   s->steps, s->temperature,
                   a.set_gen || a.set_block || a.set_steps || a.set_temp
                       ? "flags over the model's settings"
                   : from_ckpt ? "the model's generation.json"
                   : a.config  ? "the config's eval.*"
                               : "defaults: the model has no generation.json");
            print_task_settings(&cfg, ts, a.nsets > 0, stdout);
            printf("accuracy    %.4f +- %.4f\nreward_mean %.4f\n", acc, se, rew);
            if (a.out)
                printf("outcomes    %s\n", a.out);
        }
    }
    free(ok);
    rl_run_close(&run);
    comm_finalize();
    return rc ? cli_fail("eval", &err) : 0;
}
