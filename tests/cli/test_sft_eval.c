/* test_sft_eval: SFT's validation and keep-best, and the rejection-sampling data of the
 * RFT baseline, end to end on a tiny LLaDA model learning Sudoku.
 *  - sft.eval_every logs a validation line at each N-th step and the last; each equals
 *    `dllm-rl eval` of that step's checkpoint on the same items (sft.eval_n, seed
 *    sft.eval_seed) to the digits logged; ckpt/best names the earliest step of the
 *    highest logged accuracy, and survives checkpoint.keep, which removes the other
 *    evaluated checkpoints; inspect reports the validation;
 *  - a run stopped and resumed logs the same validation lines as one never stopped,
 *    and evaluates a checkpoint whose evaluation the stop cut off;
 *  - without the keys nothing changes: no validation line, no ckpt/best;
 *  - sft.keep_best without sft.eval_every is refused (exit 2, naming the key);
 *  - rft-data --all samples the RL run's step 1 bit for bit: each completion's reward is
 *    the one train logged for the same row (trajectories/reward); without --all it keeps exactly the correct completions, as SFT
 *    pairs that `dllm-rl sft` reads; an existing --out is refused without --force. */
#include "tests/harness/harness.h"
#include "tests/harness/test_log.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tiny run: 2-blank Sudoku, validated every 100 steps on 20 held-out puzzles of
 * seed 1000 (after 400 steps the model writes the answer's format and earns reward). */
static void write_sft_config(const char *name, const char *experiment, int steps,
                             const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "experiment: %s\nseed: 1\nmodel: {preset: tiny}\n"
             "data: {train: sft.jsonl, max_len: 64, answer_length: 34}\n"
             "task: {name: sudoku, format: plain, max_blanks: 2}\n"
             "sft: {steps: %d, batch_size: 16%s}\n"
             "optim: {lr: 1e-2, warmup: 10}\n"
             "eval: {gen_length: 34, block_length: 34, steps: 17}\n"
             "log: {dir: runs, every: 100}\ncheckpoint: {every: 0, keep: 1}\n",
             experiment, steps, extra);
    tu_write(name, text);
}

typedef struct {
    int step[16];
    double acc[16], rew[16];
    char line[16][256];
    int n;
} valid_lines;

static void read_valid(const char *run, valid_lines *v)
{
    char *log = tu_slurp("%s/runs/%s/sft_log.jsonl", tu_dir, run);
    ck_assert_ptr_nonnull(log);
    memset(v, 0, sizeof *v);
    for (char *l = strtok(log, "\n"); l; l = strtok(NULL, "\n")) {
        json_t *o = json_loads(l, 0, NULL);
        ck_assert_msg(o != NULL, "not JSON: %s", l);
        json_t *a = json_object_get(o, "eval_accuracy");
        if (a) {
            ck_assert_int_lt(v->n, 16);
            v->step[v->n] = (int)json_integer_value(json_object_get(o, "step"));
            v->acc[v->n] = json_number_value(a);
            v->rew[v->n] = json_number_value(json_object_get(o, "eval_reward"));
            ck_assert_int_eq((int)json_integer_value(json_object_get(o, "eval_n")), 20);
            snprintf(v->line[v->n], sizeof v->line[v->n], "%s", l);
            v->n++;
        }
        json_decref(o);
    }
    free(log);
}

static char *link_target(const char *rel)
{
    static char t[256];
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    ssize_t n = readlink(p, t, sizeof t - 1);
    t[n > 0 ? n : 0] = '\0';
    return t;
}

START_TEST(validation_and_keep_best)
{
    write_sft_config("v.yaml", "v", 400, ", eval_every: 100, eval_n: 20, keep_best: true");
    ck_assert_msg(tu_dllm("sft v.yaml") == 0, "%s", tu_err);
    ck_assert_ptr_nonnull(strstr(tu_out, "eval    100  accuracy"));
    valid_lines v;
    read_valid("v", &v);
    ck_assert_int_eq(v.n, 4);
    int best = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(v.step[i], 100 * (i + 1));
        if (v.acc[i] > v.acc[best])
            best = i;
    }
    /* the model learns: the last evaluation earns reward (it is not a constant 0) */
    ck_assert_msg(v.rew[3] > 0, "validation reward %g at step 400", v.rew[3]);
    char want[32];
    snprintf(want, sizeof want, "step-%d", v.step[best]);
    ck_assert_str_eq(link_target("runs/v/ckpt/best"), want);
    ck_assert_str_eq(link_target("runs/v/ckpt/latest"), "step-400");
    /* keep 1: the newest and the best stay, the other evaluated checkpoints go */
    for (int i = 0; i < 4; i++) {
        char p[64];
        snprintf(p, sizeof p, "runs/v/ckpt/step-%d", v.step[i]);
        ck_assert_msg(tu_exists(p) == (i == best || i == 3), "%s: %s", p,
                      tu_exists(p) ? "kept" : "removed");
    }
    /* each logged number is `dllm-rl eval`'s of the kept checkpoints */
    for (int i = 0; i < 4; i++) {
        if (i != best && i != 3)
            continue;
        ck_assert_msg(tu_dllm("eval --model runs/v/ckpt/step-%d --task sudoku --n 20 --seed 1000 "
                              "--json", v.step[i]) == 0, "%s", tu_err);
        json_t *o = json_loads(tu_out, 0, NULL);
        ck_assert_ptr_nonnull(o);
        char a[40], r[40], la[40], lr[40];
        snprintf(a, sizeof a, "%.9g", json_number_value(json_object_get(o, "accuracy")));
        snprintf(r, sizeof r, "%.9g", json_number_value(json_object_get(o, "reward_mean")));
        snprintf(la, sizeof la, "%.9g", v.acc[i]);
        snprintf(lr, sizeof lr, "%.9g", v.rew[i]);
        ck_assert_str_eq(a, la);
        ck_assert_str_eq(r, lr);
        json_decref(o);
    }
    ck_assert_int_eq(tu_dllm("inspect runs/v"), 0);
    ck_assert_msg(strstr(tu_out, "validation   best"), "%s", tu_out);
    ck_assert_msg(strstr(tu_out, "4 evaluations"), "%s", tu_out);

    /* stopped after step 100 and resumed (the learning rate is constant, so its first 200
     * steps are v's): the same validation lines; a checkpoint whose evaluation the stop
     * cut off (its line removed here) is evaluated on resume */
    write_sft_config("w.yaml", "w", 100, ", eval_every: 100, eval_n: 20, keep_best: true");
    ck_assert_msg(tu_dllm("sft w.yaml --quiet") == 0, "%s", tu_err);
    ck_assert_int_eq(tu_sh("cd %s && grep -v '\"step\": 100, \"eval_accuracy\"' runs/w/sft_log.jsonl "
                           "> x && mv x runs/w/sft_log.jsonl", tu_dir), 0);
    ck_assert_msg(tu_dllm("sft --resume runs/w --set sft.steps=200 --quiet") == 0, "%s", tu_err);
    valid_lines w;
    read_valid("w", &w);
    ck_assert_int_eq(w.n, 2);
    for (int i = 0; i < 2; i++)
        ck_assert_str_eq(w.line[i], v.line[i]);
    snprintf(want, sizeof want, "step-%d", v.acc[1] > v.acc[0] ? 200 : 100);
    ck_assert_str_eq(link_target("runs/w/ckpt/best"), want);

    /* off by default: no validation, no best */
    write_sft_config("p.yaml", "p", 20, "");
    ck_assert_msg(tu_dllm("sft p.yaml --quiet") == 0, "%s", tu_err);
    read_valid("p", &w);
    ck_assert_int_eq(w.n, 0);
    ck_assert(!tu_exists("runs/p/ckpt/best"));

    write_sft_config("k.yaml", "k", 20, ", keep_best: true");
    ck_assert_int_eq(tu_dllm("sft k.yaml --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "sft.keep_best needs sft.eval_every"), "%s", tu_err);
}
END_TEST

static void write_rl_config(const char *name, const char *reward)
{
    char text[2048];
    snprintf(text, sizeof text,
             "experiment: r\nseed: 7\nmodel: {path: runs/v/ckpt/latest}\n"
             "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 2, "
             "reward: %s}\n"
             "rollout: {precision: fp8, group_size: 4, gen_length: 34, block_length: 34, "
             "steps: 17}\n"
             "likelihood: {mc_samples: 2}\n"
             "grpo: {steps: 1, prompts_per_step: 4, inner_steps: 1, logp_estimator: trajectory}\n"
             "correction: {method: ais, estimator: trajectory}\n"
             "eval: {every: 0, n: 4}\nlog: {dir: runs}\ncheckpoint: {every: 0}\n",
             reward);
    tu_write(name, text);
}

START_TEST(rft_data_is_rl_step_one)
{
    /* its last checkpoint, not its best: the best is by accuracy, which a build's
     * summation order can leave at 0 at every evaluation (an ASan build on an AVX-512 CPU,
     * one thread), making the first checkpoint the best and RL's batch rewardless */
    ck_assert_msg(tu_exists("runs/v/ckpt/latest"), "needs validation_and_keep_best's model");
    write_rl_config("rl.yaml", "task");
    ck_assert_msg(tu_dllm("rft-data rl.yaml --all --out all.jsonl --quiet") == 0, "%s", tu_err);
    ck_assert_msg(strstr(tu_out, "16 completions (1 steps x 4 prompts x 4)"), "%s", tu_out);
    ck_assert_msg(tu_dllm("train rl.yaml --quiet") == 0, "%s", tu_err);
    int64_t nr = 0;
    double *train_reward = tu_log_column("trajectories/reward", &nr, "%s/runs/r/log.h5", tu_dir);
    ck_assert_int_eq(nr, 16);
    char *all = tu_slurp("%s/all.jsonl", tu_dir);
    ck_assert_ptr_nonnull(all);
    double sum = 0;
    int n = 0, n_ok = 0;
    for (char *l = strtok(all, "\n"); l; l = strtok(NULL, "\n"), n++) {
        json_t *o = json_loads(l, 0, NULL);
        ck_assert_ptr_nonnull(o);
        /* the prompt as task.format plain shows it: the puzzle */
        ck_assert_int_eq((int)strlen(json_string_value(json_object_get(o, "prompt"))), 16);
        const double r = json_number_value(json_object_get(o, "reward"));
        ck_assert_msg(r == train_reward[n], "row %d: rft-data reward %.17g, train's %.17g", n, r,
                      train_reward[n]);
        sum += r;
        n_ok += (int)json_integer_value(json_object_get(o, "correct"));
        json_decref(o);
    }
    free(all);
    ck_assert_int_eq(n, 16);
    free(train_reward);
    ck_assert_msg(sum > 0, "no reward in the batch: the check would be vacuous");

    /* the correct ones only, as SFT data */
    ck_assert_msg(tu_dllm("rft-data rl.yaml --out ok.jsonl --quiet") == 0, "%s", tu_err);
    char want[64];
    snprintf(want, sizeof want, "%d correct", n_ok);
    ck_assert_msg(strstr(tu_out, want), "%s: %s", want, tu_out);
    char *ok = tu_slurp("%s/ok.jsonl", tu_dir);
    int lines = 0;
    for (char *p = ok; p && *p; p++)
        lines += *p == '\n';
    free(ok);
    ck_assert_int_eq(lines, n_ok);
    if (n_ok > 0) {
        write_sft_config("f.yaml", "f", 2, "");
        ck_assert_msg(tu_dllm("sft f.yaml --set data.train=ok.jsonl --set model.path=runs/v/ckpt/best "
                              "--quiet") == 0, "%s", tu_err);
    }
    ck_assert_int_eq(tu_dllm("rft-data rl.yaml --out ok.jsonl --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "--force"), "%s", tu_err);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    if (tu_sh("%s tasks sft-data sudoku --n 200 --seed 101 --max-blanks 2 > %s/sft.jsonl",
              tu_bin(), tu_dir))
        return tu_abort(ctx, "tasks sft-data failed");
    ctx->nofork = true; /* the second case samples from the first one's model */
    Suite *s = suite_create("sft_eval");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, validation_and_keep_best);
    tcase_add_test(tc, rft_data_is_rl_step_one);
    suite_add_tcase(s, tc);
    return s;
}
