/* test_config: the YAML config reader -- defaults, overrides, and every kind of
 * bad input reported as file:line:col with the offending line. */
#include "src/config/yaml_config.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static const char *write_yaml(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void setup(void)
{
    strcpy(tmpdir, "/tmp/dllm-cfg-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Loads text and expects an input error whose message contains every needle. */
static void expect_error(const char *text, const char *needle1, const char *needle2)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    const char *path = write_yaml("bad.yaml", text);
    int rc = dllm_cfg_load(&cfg, path, &err);
    ck_assert_int_eq(rc, DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, needle1), "'%s' not in: %s", needle1, err.msg);
    if (needle2)
        ck_assert_msg(strstr(err.msg, needle2), "'%s' not in: %s", needle2, err.msg);
}

START_TEST(defaults_are_set)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(cfg.device, CFG_DEVICE_CPU);
    ck_assert_int_eq(cfg.model.preset, CFG_PRESET_TINY);
    ck_assert_int_eq(cfg.eval.precision, CFG_EVAL_TRAINER);
    ck_assert_int_eq(cfg.rollout.mask_token, CFG_MASK_TOKEN_FORBID);
    ck_assert_int_eq(cfg.eval.mask_token, CFG_MASK_TOKEN_FORBID);
    ck_assert_int_eq(cfg.model.lora.targets.n, 7);
    ck_assert_str_eq(cfg.model.lora.targets.items[6], "ff_out");
    ck_assert_double_eq_tol(cfg.optim.betas[1], 0.99, 1e-15);
    ck_assert_double_eq_tol(cfg.optim.lr, 1e-4, 1e-18);
    ck_assert_int_eq(cfg.sft.batch_size, 8);
}
END_TEST

START_TEST(file_overrides_defaults)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    const char *path = write_yaml("ok.yaml", "experiment: demo\nseed: 7\n"
                                             "model: {preset: small, lora: {rank: 4, targets: [q_proj]}}\n"
                                             "optim:\n  lr: 3e-3\n  betas: [0.8, 0.95]\n"
                                             "sft:\n  chat: yes\n");
    ck_assert_int_eq(dllm_cfg_load(&cfg, path, &err), 0);
    ck_assert_str_eq(cfg.experiment, "demo");
    ck_assert_int_eq(cfg.seed, 7);
    ck_assert_int_eq(cfg.model.preset, CFG_PRESET_SMALL);
    ck_assert_int_eq(cfg.model.lora.rank, 4);
    ck_assert_int_eq(cfg.model.lora.targets.n, 1);
    ck_assert_double_eq_tol(cfg.optim.lr, 3e-3, 1e-15);
    ck_assert_double_eq_tol(cfg.optim.betas[0], 0.8, 1e-15);
    ck_assert_int_eq(cfg.sft.chat, 1);
    ck_assert_int_eq(cfg.sft.batch_size, 8); /* untouched default */
}
END_TEST

START_TEST(set_overrides_and_validates)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_cfg_set(&cfg, "optim.lr=0.5", &err), 0);
    ck_assert_double_eq_tol(cfg.optim.lr, 0.5, 1e-15);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "model.lora.targets=[up_proj, ff_out]", &err), 0);
    ck_assert_int_eq(cfg.model.lora.targets.n, 2);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "optim.lr=fast", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "optim.lr"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "optim.speed=1", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown key 'optim.speed'"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "no-equals-sign", &err), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "sft.batch_size=0", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
}
END_TEST

/* Inputs that used to run something else than meant. */
START_TEST(refused_inputs_name_the_key)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    ck_assert_int_eq(cfg.checkpoint.every, 10);
    /* an unset shell variable: --set grpo.steps=$STEPS */
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.steps=", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "empty value for 'grpo.steps'"), "%s", err.msg);
    ck_assert_int_eq(cfg.grpo.steps, 200);
    /* an empty file, a comment-only file, a directory */
    expect_error("", "empty config: nothing to run", "dllm-rl config");
    expect_error("# just a comment\n", "empty config", NULL);
    ck_assert_int_eq(dllm_cfg_load(&cfg, tmpdir, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "is a directory, expected a YAML file"), "%s", err.msg);
    /* one completion per group has no advantage; clip_eps outside (0, 1) */
    expect_error("rollout: {group_size: 1}\n", "rollout.group_size = 1 is out of range [2,", NULL);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.clip_eps=5", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "grpo.clip_eps"));
    const char *bad[] = {"grpo.clip_eps=0", "grpo.clip_eps=1"};
    for (int i = 0; i < 2; i++) {
        dllm_cfg_defaults(&cfg);
        ck_assert_int_eq(dllm_cfg_set(&cfg, bad[i], &err), 0);
        ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, "grpo.clip_eps") && strstr(err.msg, "(0, 1)"), "%s", err.msg);
    }
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.n=0", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "eval.n = 0") && strstr(err.msg, "eval.every=0"), "%s", err.msg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.every=0", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
}
END_TEST

/* train refuses an SFT config and sft an RL one; a full dump is both. */
START_TEST(config_kind)
{
    dllm_cfg cfg;
    dllm_err err = {0};
    dllm_cfg_keys_set c;
    dllm_cfg_defaults(&cfg);
    const char *p = write_yaml("s.yaml", "model: {preset: tiny}\nsft: {steps: 3}\ndata: {max_len: 64}\n");
    ck_assert_int_eq(dllm_cfg_load_counted(&cfg, p, &c, &err), 0);
    ck_assert_int_eq(c.total, 3);
    ck_assert_int_eq(c.sft, 2);
    ck_assert_int_eq(c.rl, 0);
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, false, &err), 0);
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, true, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "is an SFT config") && strstr(err.msg, "dllm-rl sft"), "%s", err.msg);
    p = write_yaml("r.yaml", "task: {name: sudoku}\ngrpo: {steps: 3}\n");
    ck_assert_int_eq(dllm_cfg_load_counted(&cfg, p, &c, &err), 0);
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, true, &err), 0);
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, false, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "is an RL config") && strstr(err.msg, "dllm-rl train"), "%s", err.msg);
    dllm_cfg_defaults(&cfg);
    char *dump = dllm_cfg_dump(&cfg);
    p = write_yaml("all.yaml", dump);
    free(dump);
    ck_assert_int_eq(dllm_cfg_load_counted(&cfg, p, &c, &err), 0);
    ck_assert_int_eq(c.total, (int)dllm_cfg_nkeys());
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, true, &err), 0);
    ck_assert_int_eq(dllm_cfg_require_kind(&c, p, false, &err), 0);
    /* first_difference names the first differing key, strings and lists by value */
    dllm_cfg a, b;
    dllm_cfg_defaults(&a);
    dllm_cfg_defaults(&b);
    ck_assert_ptr_null(dllm_cfg_first_difference(&a, &b));
    ck_assert_int_eq(dllm_cfg_set(&a, "experiment=a-much-longer-name", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&a, "experiment=run", &err), 0);
    ck_assert_ptr_null(dllm_cfg_first_difference(&a, &b));
    ck_assert_int_eq(dllm_cfg_set(&b, "grpo.beta=0.1", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&b, "optim.lr=0.5", &err), 0);
    ck_assert_str_eq(dllm_cfg_first_difference(&a, &b), "grpo.beta");
}
END_TEST

/* Every key is documented: a meaning and, for numbers and choices, a range. */
START_TEST(every_key_documented)
{
    ck_assert_int_gt(dllm_cfg_nkeys(), 80);
    for (size_t i = 0; i < dllm_cfg_nkeys(); i++) {
        dllm_cfg_key_doc k;
        dllm_cfg_key_doc_get(i, &k);
        ck_assert_msg(strlen(k.desc) > 8, "%s: no description", k.path);
        if (strcmp(k.type, "string"))
            ck_assert_msg(k.range[0], "%s: no range or choices", k.path);
    }
}
END_TEST

START_TEST(syntax_error_has_position)
{
    expect_error("seed: 1\nmodel: {preset: tiny\n", "bad.yaml:", "YAML syntax error");
    expect_error("seed: [1, 2\n", "bad.yaml:", "syntax");
}
END_TEST

START_TEST(unknown_key_is_rejected_with_line_col)
{
    expect_error("seed: 1\noptim:\n  lr: 1e-3\n  lrr: 2\n", "bad.yaml:4:3: unknown key 'optim.lrr'",
                 "  lrr: 2");
    expect_error("sedd: 1\n", "bad.yaml:1:1: unknown key 'sedd'", NULL);
}
END_TEST

START_TEST(wrong_types_are_rejected)
{
    expect_error("seed: one\n", "bad.yaml:1:7: seed must be an integer", NULL);
    expect_error("optim:\n  lr: [1, 2]\n", "bad.yaml:2:7:", "optim.lr must be a number");
    expect_error("optim: 3\n", "bad.yaml:1:8:", "'optim' is a section");
    expect_error("sft: {chat: maybe}\n", "sft.chat must be true or false", NULL);
    expect_error("optim: {betas: [0.9]}\n", "optim.betas must be a list of two numbers", NULL);
    expect_error("model: {lora: {targets: [q_proj, attn]}}\n", "unknown item 'attn'", NULL);
}
END_TEST

START_TEST(out_of_range_and_enums)
{
    expect_error("optim: {betas: [0.9, 1.5]}\n", "out of range", "bad.yaml:1:");
    expect_error("device: tpu\n", "device must be one of cpu|cuda, got 'tpu'", NULL);
    expect_error("sft: {steps: -3}\n", "sft.steps = -3 is out of range", NULL);
    expect_error("seed: 1\nseed: 2\n", "bad.yaml:2:1: duplicate key 'seed'", NULL);
    expect_error("rollout: {nvfp4: {scaling: row}}\n",
                 "rollout.nvfp4.scaling must be one of block16|block32|channel|tensor", NULL);
    expect_error("grpo: {random_drop: 1.5}\n", "grpo.random_drop = 1.5 is out of range", NULL);
    expect_error("grpo: {random_drop: -0.1}\n", "grpo.random_drop", NULL);
    /* 1 is in the table's range; the validation refuses it (nothing would be left) */
    dllm_cfg cfg;
    dllm_err err = {0};
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.random_drop=1", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "grpo.random_drop = 1 must lie in [0, 1)"), "%s", err.msg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.random_drop=0.34", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
}
END_TEST

START_TEST(missing_files)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_cfg_load(&cfg, "/nonexistent/x.yaml", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/x.yaml"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "data.train=/nonexistent/train.jsonl", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "data.train"));
}
END_TEST

START_TEST(cross_key_rules)
{
    dllm_cfg cfg;
    dllm_err err = {0};
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.block_length=24", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "rollout.block_length 24 must divide rollout.gen_length 64"));
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.steps=6", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "eval.steps 6"));
    /* d1's lengths: steps = length / 2 unless eval.gen_steps gives one count per length */
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.block_length=32", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_length=128", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.steps=64", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_lengths=[128, 256, 512]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_steps=[128, 256]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "eval.gen_steps has 2 entries, eval.gen_lengths 3"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_steps=[128, 256, 24]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "eval.gen_steps[2] = 24 must be a multiple of the 16"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_steps=[128, 256, 512]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    ck_assert_int_eq(cfg.eval.gen_steps.v[2], 512);
    /* without eval.gen_steps, length / 2 must split into whole steps per block */
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_steps=[]", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.block_length=1", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_length=128", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.steps=128", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_lengths=[128]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "or set eval.gen_steps"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.gen_steps=[128]", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.ratio=token", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.logp_estimator=elbo", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "grpo.ratio"));
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "correction.ais.alpha_min=0.8", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "correction.ais.alpha_max=0.5", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.train.path=/nonexistent/gsm8k.jsonl", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "task.train.path"));
    /* nested sections parse from YAML too */
    const char *path = write_yaml("ais.yaml", "correction:\n  method: tis\n  ais:\n    weights: "
                                              "{reliability: 0, divergence: 2}\n    eta: 0.5\n");
    dllm_cfg_defaults(&cfg);
    ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cfg.correction.c.method, CORR_TIS);
    ck_assert_double_eq(cfg.correction.c.ais.w_rel, 0);
    ck_assert_double_eq(cfg.correction.c.ais.w_div, 2);
    ck_assert_double_eq(cfg.correction.c.ais.w_var, 1);
    ck_assert_double_eq(cfg.correction.c.ais.eta, 0.5);
    path = write_yaml("ais2.yaml", "correction: {ais: {weights: {reliabilty: 1}}}\n");
    ck_assert_int_eq(dllm_cfg_load(&cfg, path, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown key 'correction.ais.weights.reliabilty' "
                                          "(known keys of correction.ais.weights: reliability, divergence, variance)"));
}
END_TEST

/* task.reward is a section (kind, command, timeout_s) that also takes a scalar, short
 * for its kind: configs and run directories written before still read, and the dump
 * (the run's config.yaml) reads back with a custom task's keys. */
START_TEST(reward_section_and_shorthand)
{
    dllm_cfg cfg, back;
    dllm_err err = {0};
    dllm_cfg_defaults(&cfg);
    const char *path = write_yaml("short.yaml", "task: {name: sudoku, reward: correct}\n");
    ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cfg.task.reward.kind, CFG_REWARD_CORRECT);
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.reward=correct", &err), 0);
    ck_assert_int_eq(cfg.task.reward.kind, CFG_REWARD_CORRECT);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.reward=graded", &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "task.reward.kind must be one of task|correct|partial"));
    /* partial: countdown and sudoku have a graded reward, the other tasks not */
    for (int k = 0; k < 4; k++) {
        static const char *const tasks[4] = {"countdown", "sudoku", "gsm8k", "math500"};
        char set[64];
        dllm_cfg_defaults(&cfg);
        snprintf(set, sizeof set, "task.name=%s", tasks[k]);
        ck_assert_int_eq(dllm_cfg_set(&cfg, set, &err), 0);
        ck_assert_int_eq(dllm_cfg_set(&cfg, "task.reward=partial", &err), 0);
        ck_assert_int_eq(cfg.task.reward.kind, CFG_REWARD_PARTIAL);
        ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), k < 2 ? 0 : DLLM_EXIT_INPUT);
        if (k >= 2)
            ck_assert_msg(strstr(err.msg, "task.reward.kind partial") && strstr(err.msg, tasks[k]),
                          "%s", err.msg);
    }
    dllm_cfg_defaults(&cfg);
    path = write_yaml("long.yaml",
                      "task:\n  name: custom\n  train: {path: /dev/null}\n"
                      "  fields: {prompt: question, reference: answer}\n"
                      "  reward:\n    kind: correct\n    command: python3 'my reward.py' --x\n"
                      "    timeout_s: 2.5\n");
    ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cfg.task.name, CFG_TASK_CUSTOM);
    ck_assert_int_eq(cfg.task.reward.kind, CFG_REWARD_CORRECT);
    ck_assert_str_eq(cfg.task.reward.command, "python3 'my reward.py' --x");
    ck_assert_double_eq(cfg.task.reward.timeout_s, 2.5);
    ck_assert_str_eq(cfg.task.fields.prompt, "question");
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    char *text = dllm_cfg_dump(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "  reward:\n    kind: \"correct\"\n"));
    path = write_yaml("dumped.yaml", text);
    free(text);
    dllm_cfg_defaults(&back);
    ck_assert_msg(dllm_cfg_load(&back, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(memcmp(&cfg, &back, sizeof cfg), 0);
    /* the custom task's keys: one reward source, only for task.name custom */
    dllm_cfg_defaults(&cfg);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.name=custom", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "task.name custom needs its reward"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.reward.command=cat", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.name=gsm8k", &err), 0);
    ck_assert_int_eq(dllm_cfg_validate(&cfg, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "task.reward.command is read only by task.name custom"));
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.reward.timeout_s=0", &err), DLLM_EXIT_INPUT);
    expect_error("task:\n  reward: {kind: task, comand: x}\n", "unknown key 'task.reward.comand'",
                 "command");
}
END_TEST

START_TEST(dump_reloads_to_same_config)
{
    dllm_cfg a, b;
    dllm_cfg_defaults(&a);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_cfg_set(&a, "optim.lr=0.00123", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&a, "model.lora.targets=[v_proj]", &err), 0);
    ck_assert_int_eq(dllm_cfg_set(&a, "experiment=x \"y\\\\z", &err), 0);
    char *text = dllm_cfg_dump(&a);
    const char *path = write_yaml("dump.yaml", text);
    free(text);
    dllm_cfg_defaults(&b);
    ck_assert_msg(dllm_cfg_load(&b, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
}
END_TEST

/* Enumerated keys parse once into C values; the correction and GRPO-loss
 * settings are the structs the math modules consume, with their defaults. */
START_TEST(enums_are_typed)
{
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    corr_cfg ref;
    corr_cfg_default(&ref);
    ck_assert_int_eq(cfg.correction.c.method, ref.method);
    ck_assert_int_eq(cfg.correction.c.level, ref.level);
    ck_assert_double_eq(cfg.correction.c.cap, ref.cap);
    ck_assert_double_eq(cfg.correction.c.fixed_alpha, ref.fixed_alpha);
    ck_assert_int_eq(cfg.correction.c.ais.combine, ref.ais.combine);
    ck_assert_double_eq(cfg.correction.c.ais.w_rel, ref.ais.w_rel);
    ck_assert_double_eq(cfg.correction.c.ais.w_div, ref.ais.w_div);
    ck_assert_double_eq(cfg.correction.c.ais.w_var, ref.ais.w_var);
    ck_assert_double_eq(cfg.correction.c.ais.tau_delta, ref.ais.tau_delta);
    ck_assert_double_eq(cfg.correction.c.ais.bias, ref.ais.bias);
    ck_assert_double_eq(cfg.correction.c.ais.eta, ref.ais.eta);
    ck_assert_double_eq(cfg.correction.c.ais.alpha_min, ref.ais.alpha_min);
    ck_assert_double_eq(cfg.correction.c.ais.alpha_max, ref.ais.alpha_max);
    ck_assert_int_eq(cfg.grpo.loss.ratio, GRPO_RATIO_SEQUENCE);
    ck_assert_int_eq(cfg.grpo.loss.agg, GRPO_AGG_SEQ_MEAN);
    ck_assert_double_eq(cfg.grpo.loss.clip_eps, 0.2);
    ck_assert_int_eq(cfg.model.dtype, ST_F32);
    ck_assert_int_eq(cfg.task.chat, CFG_CHAT_AUTO);
    dllm_err err = {0};
    ck_assert_int_eq(dllm_cfg_set(&cfg, "task.chat=qwen3", &err), 0);
    ck_assert_int_eq(cfg.task.chat, DLLM_CHAT_QWEN3);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.remasking=random", &err), 0);
    ck_assert_int_eq(cfg.rollout.remasking, REMASK_RANDOM);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.logp_estimator=trajectory", &err), 0);
    ck_assert_int_eq(cfg.grpo.logp_estimator, EST_TRAJECTORY);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "grpo.loss_agg=token_mean", &err), 0);
    ck_assert_int_eq(cfg.grpo.loss.agg, GRPO_AGG_TOKEN_MEAN);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.precision=rollout", &err), 0);
    ck_assert_int_eq(cfg.eval.precision, CFG_EVAL_ROLLOUT);
    ck_assert_int_eq(dllm_cfg_set(&cfg, "rollout.mask_token=forbid", &err), 0);
    ck_assert_int_eq(cfg.rollout.mask_token, CFG_MASK_TOKEN_FORBID);
    /* choices in messages come from the names table */
    ck_assert_int_eq(dllm_cfg_set(&cfg, "eval.precision=fp8", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "eval.precision must be one of trainer|rollout, got 'fp8'"), "%s",
                  err.msg);
    expect_error("rollout:\n  mask_token: never\n", "bad.yaml:2:15: rollout.mask_token must be one of "
                 "allow|forbid, got 'never'", "  mask_token: never");
    /* and the dump names values through the same tables */
    char *text = dllm_cfg_dump(&cfg);
    ck_assert_ptr_nonnull(strstr(text, "  precision: \"rollout\"\n"));
    ck_assert_ptr_nonnull(strstr(text, "  mask_token: \"forbid\"\n"));
    ck_assert_ptr_nonnull(strstr(text, "  chat: \"qwen3\"\n"));
    free(text);
}
END_TEST

/* Every name of every table maps to a distinct value and back. */
START_TEST(names_tables_round_trip)
{
    const cfg_names *t[] = {&cfg_names_device, &cfg_names_preset, &cfg_names_arch, &cfg_names_dtype,
                            &cfg_names_trainer_precision, &cfg_names_task, &cfg_names_task_format,
                            &cfg_names_chat, &cfg_names_reward, &cfg_names_rollout_precision,
                            &cfg_names_fp8_format, &cfg_names_fp8_scaling, &cfg_names_remasking,
                            &cfg_names_estimator, &cfg_names_corr_method, &cfg_names_corr_level,
                            &cfg_names_ais_combine, &cfg_names_schedule, &cfg_names_eval_precision,
                            &cfg_names_mask_token, &grpo_ratio_names, &grpo_agg_names,
                            &grpo_adv_scale_names};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        t[k] = cfg_names_of(t[k]); /* the registry's tables as they are */
        ck_assert_int_ge(t[k]->n, 2);
        for (int i = 0; i < t[k]->n; i++) {
            int v = -99;
            ck_assert(cfg_names_find(t[k], t[k]->v[i].name, &v));
            ck_assert_int_eq(v, t[k]->v[i].value);
            ck_assert_str_eq(cfg_names_name(t[k], v), t[k]->v[i].name);
            for (int j = 0; j < i; j++)
                ck_assert_int_ne(t[k]->v[j].value, v);
        }
        int v;
        ck_assert(!cfg_names_find(t[k], "no-such-name", &v));
    }
    /* the library's own names agree with the config's */
    ck_assert_str_eq(cfg_names_name(&cfg_names_corr_method, CORR_MIS), corr_method_name(CORR_MIS));
    ck_assert_str_eq(cfg_names_name(&cfg_names_estimator, EST_TRAJECTORY),
                     dllm_estimator_name(EST_TRAJECTORY));
    ck_assert_str_eq(cfg_names_name(&cfg_names_chat, DLLM_CHAT_LLADA),
                     dllm_chat_format_name(DLLM_CHAT_LLADA));
}
END_TEST

/* The quickstart recipe parses to the values it always had. */
START_TEST(quickstart_values)
{
    const char *data = getenv("DLLM_TEST_DATA");
    ck_assert_ptr_nonnull(data);
    char path[1024];
    snprintf(path, sizeof path, "%s/../../configs/quickstart.yaml", data);
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err err = {0};
    ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cfg.task.name, CFG_TASK_SUDOKU);
    ck_assert_int_eq(cfg.task.format, CFG_FORMAT_PLAIN);
    ck_assert_int_eq(cfg.task.chat, DLLM_CHAT_PLAIN);
    ck_assert_int_eq(cfg.task.reward.kind, CFG_REWARD_CORRECT);
    ck_assert_int_eq(cfg.rollout.precision, CFG_ROLLOUT_FP8);
    ck_assert_int_eq(cfg.rollout.fp8.format, CFG_FP8_E4M3);
    ck_assert_int_eq(cfg.rollout.fp8.scaling, CFG_FP8_BLOCK);
    ck_assert_int_eq(cfg.rollout.remasking, REMASK_LOW_CONFIDENCE);
    ck_assert_int_eq(cfg.grpo.logp_estimator, EST_TRAJECTORY);
    ck_assert_int_eq(cfg.grpo.loss.ratio, GRPO_RATIO_SEQUENCE);
    ck_assert_double_eq(cfg.grpo.loss.clip_eps, 0.2);
    ck_assert_int_eq(cfg.correction.c.method, CORR_AIS);
    ck_assert_int_eq(cfg.correction.estimator, EST_TRAJECTORY);
    ck_assert_int_eq(cfg.correction.c.level, CORR_LEVEL_SEQUENCE);
    ck_assert_double_eq(cfg.correction.c.cap, 2.0);
    ck_assert_int_eq(cfg.optim.schedule, CFG_SCHEDULE_CONSTANT);
    ck_assert_int_eq(cfg.eval.precision, CFG_EVAL_TRAINER);
}
END_TEST

/* Every recipe shipped in configs/ parses (file existence is checked at run time,
 * when the paths it names exist). */
START_TEST(shipped_configs_parse)
{
    const char *data = getenv("DLLM_TEST_DATA");
    ck_assert_ptr_nonnull(data);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/../../configs", data);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: cannot open", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml"))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        dllm_cfg cfg;
        dllm_err err = {0};
        ck_assert_msg(dllm_cfg_load(&cfg, path, &err) == 0, "%s", err.msg);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 6);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("yaml");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, defaults_are_set);
    tcase_add_test(tc, file_overrides_defaults);
    tcase_add_test(tc, set_overrides_and_validates);
    tcase_add_test(tc, syntax_error_has_position);
    tcase_add_test(tc, unknown_key_is_rejected_with_line_col);
    tcase_add_test(tc, wrong_types_are_rejected);
    tcase_add_test(tc, out_of_range_and_enums);
    tcase_add_test(tc, missing_files);
    tcase_add_test(tc, cross_key_rules);
    tcase_add_test(tc, dump_reloads_to_same_config);
    tcase_add_test(tc, reward_section_and_shorthand);
    tcase_add_test(tc, shipped_configs_parse);
    tcase_add_test(tc, refused_inputs_name_the_key);
    tcase_add_test(tc, config_kind);
    tcase_add_test(tc, every_key_documented);
    tcase_add_test(tc, enums_are_typed);
    tcase_add_test(tc, names_tables_round_trip);
    tcase_add_test(tc, quickstart_values);
    suite_add_tcase(s, tc);
    return s;
}
