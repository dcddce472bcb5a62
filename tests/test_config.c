/* test_config: the YAML config reader -- defaults, overrides, and every kind of
 * bad input reported as file:line:col with the offending line. */
#include "src/yaml_config.h"

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
    ck_assert_str_eq(cfg.device, "cpu");
    ck_assert_str_eq(cfg.model.preset, "tiny");
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
    ck_assert_str_eq(cfg.model.preset, "small");
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
    ck_assert_str_eq(cfg.correction.method, "tis");
    ck_assert_double_eq(cfg.correction.ais.weights.reliability, 0);
    ck_assert_double_eq(cfg.correction.ais.weights.divergence, 2);
    ck_assert_double_eq(cfg.correction.ais.weights.variance, 1);
    ck_assert_double_eq(cfg.correction.ais.eta, 0.5);
    path = write_yaml("ais2.yaml", "correction: {ais: {weights: {reliabilty: 1}}}\n");
    ck_assert_int_eq(dllm_cfg_load(&cfg, path, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown key 'correction.ais.weights.reliabilty' "
                                          "(known keys of correction.ais.weights: reliability, divergence, variance)"));
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

int main(void)
{
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
    tcase_add_test(tc, shipped_configs_parse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
