/* test_cli_safety.c: the CLI never destroys work and describes itself, run as a
 * user runs it (the dllm-rl binary, DLLM_BIN) on tiny models:
 *
 *   init-model, sft   an existing non-empty output refused (exit 2, the message
 *                     names the directory, --force and --resume); --force
 *                     replaces it with nothing stale left; init-model leaves no
 *                     temporary directory beside its output;
 *   sft --resume      a run cut after a checkpoint (cosine schedule, epochs
 *                     crossing) and a run extended past its end continue bit for
 *                     bit: weights, optimizer state and log equal an
 *                     uninterrupted run's; a finished run says so;
 *   generation.json   written by sft with the tokenizer; generate without flags
 *                     uses it (equal to the same flags given), flags override;
 *   eval              equals `train ... --set grpo.steps=0` on the same items
 *                     (outcome files byte for byte, accuracy and reward);
 *   generate -> grade --format json lines graded as they are;
 *   inspect           an sft run (summary, --csv, --json), a train run's --csv and
 *                     --metric (an absent metric says why);
 *   feedback          --help and -h of every command; sft --help lists every
 *                     sft key of docs/CONFIG.md's configuration table; the random
 *                     model warning; progress reaches a file while running. */
#include "kernels/cpu/cpu_isa.h"
#include "tests/harness/harness.h"
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static int files_equal(const char *a, const char *b)
{
    return tu_sh("cd %s && cmp -s %s %s", tu_dir, a, b) == 0;
}

/* The count of tensors in the safetensors file at tu_dir/rel, read from its header (8
 * bytes of little-endian length, then JSON), after checking each has dtype want and
 * data_offsets spanning numel elements of its size. */
static int tensor_dtypes(const char *rel, const char *want)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "%s", p);
    unsigned char len8[8];
    ck_assert_int_eq(fread(len8, 1, 8, f), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    ck_assert(n > 0 && n < (1u << 24));
    char *h = malloc(n + 1);
    ck_assert_int_eq(fread(h, 1, n, f), n);
    h[n] = 0;
    fclose(f);
    json_error_t je;
    json_t *j = json_loads(h, 0, &je);
    ck_assert_msg(j != NULL, "%s: header not JSON: %s", p, je.text);
    const char *key;
    json_t *t;
    int count = 0;
    json_object_foreach(j, key, t) {
        if (!strcmp(key, "__metadata__"))
            continue;
        const char *dt = json_string_value(json_object_get(t, "dtype"));
        ck_assert_msg(dt && !strcmp(dt, want), "%s: tensor %s has dtype %s, expected %s", p, key,
                      dt ? dt : "(none)", want);
        json_t *shape = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
        json_int_t numel = 1;
        for (size_t d = 0; d < json_array_size(shape); d++)
            numel *= json_integer_value(json_array_get(shape, d));
        json_int_t bytes = json_integer_value(json_array_get(off, 1)) -
                           json_integer_value(json_array_get(off, 0));
        ck_assert_int_eq(bytes, numel * (strcmp(want, "BF16") ? 4 : 2));
        count++;
    }
    ck_assert_int_gt(count, 0);
    json_decref(j);
    free(h);
    return count;
}

/* 40 solver-made 4x4 Sudoku SFT pairs, and an sft config over them */
static void write_sft_inputs(void)
{
    static int done;
    if (done)
        return;
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 40 --seed 5 --max-blanks 8 > d.jsonl",
                        tu_dir, tu_bin()), 0);
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 10 --seed 6 --max-blanks 8 > d10.jsonl",
                        tu_dir, tu_bin()), 0);
    char p[256];
    snprintf(p, sizeof p, "%s/s.yaml", tu_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("experiment: s\nseed: 1\nmodel: {preset: tiny}\n"
          "data: {train: d.jsonl, max_len: 64, answer_length: 34}\n"
          "sft: {steps: 6, batch_size: 4}\n"
          "optim: {lr: 3e-3, warmup: 2, schedule: cosine}\n"
          "log: {dir: runs, every: 2}\ncheckpoint: {every: 2, keep: 10}\n", f);
    fclose(f);
    done = 1;
}

/* ---- never destroy work ----------------------------------------------------------- */

START_TEST(test_init_model_refuses_and_forces)
{
    char *out, *err;
    ck_assert_int_eq(tu_dllm("init-model --preset tiny --seed 1 --out models/m"), 0);
    ck_assert_int_eq(tu_sh("cp %s/models/m/model.safetensors %s/m1.safetensors", tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm_take(&out, &err, "init-model --preset tiny --seed 2 --out models/m"), 2);
    ck_assert_msg(strstr(err, "models/m") && strstr(err, "--force"), "%s", err);
    ck_assert_msg(files_equal("models/m/model.safetensors", "m1.safetensors"),
                  "a refused init-model changed the existing model");
    free(out);
    free(err);
    ck_assert_int_eq(tu_dllm("init-model --preset tiny --seed 2 --out models/m --force"), 0);
    ck_assert_msg(!files_equal("models/m/model.safetensors", "m1.safetensors"),
                  "--force did not replace the model");
    ck_assert(tu_exists("models/m/config.json") && tu_exists("models/m/tokenizer.json"));
    /* nothing but the model beside it: the temporary and the old copy are gone */
    ck_assert_int_eq(tu_sh("test \"$(ls -A %s/models)\" = m", tu_dir), 0);
    /* an empty directory is not work: accepted without --force */
    ck_assert_int_eq(tu_sh("mkdir -p %s/models/empty", tu_dir), 0);
    ck_assert_int_eq(tu_dllm("init-model --preset tiny --out models/empty"), 0);
    ck_assert(tu_exists("models/empty/model.safetensors"));
}
END_TEST

START_TEST(test_sft_refuses_and_forces)
{
    write_sft_inputs();
    char *out, *err;
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=f --quiet"), 0);
    ck_assert(tu_exists("runs/f/ckpt/step-6") && tu_exists("runs/f/ckpt/step-2"));
    ck_assert_int_eq(tu_sh("cp %s/runs/f/ckpt/step-6/model.safetensors %s/f6.safetensors", tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm_take(&out, &err, "sft s.yaml --set experiment=f --set sft.steps=3 --quiet"), 2);
    ck_assert_msg(strstr(err, "runs/f") && strstr(err, "--force") && strstr(err, "--resume"), "%s",
                  err);
    ck_assert_msg(files_equal("runs/f/ckpt/step-6/model.safetensors", "f6.safetensors"),
                  "a refused sft changed the run");
    free(out);
    free(err);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=f --set sft.steps=3 "
                                     "--set checkpoint.every=0 --force --quiet"), 0);
    /* the new run alone: no step-6 of the old one beside its step-3 */
    ck_assert_int_eq(tu_sh("test \"$(ls %s/runs/f/ckpt | tr '\\n' ' ')\" = 'latest step-3 '", tu_dir), 0);
    char lp[256];
    snprintf(lp, sizeof lp, "%s/runs/f/sft_log.jsonl", tu_dir);
    char *log = tu_slurp("%s", lp);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(!strstr(log, "\"step\": 6"), "the old run's log survived --force: %s", log);
    free(log);
}
END_TEST

/* step, loss, grad_norm and lr of every line (timings differ between runs) */
static char *log_values(const char *rel)
{
    ck_assert_int_eq(tu_sh("cd %s && cut -d, -f1-4 %s > cut.txt", tu_dir, rel), 0);
    char p[256];
    snprintf(p, sizeof p, "%s/cut.txt", tu_dir);
    return tu_slurp("%s", p);
}

static void assert_same_run(const char *a, const char *b, int step)
{
    char x[512], y[512];
    snprintf(x, sizeof x, "runs/%s/ckpt/step-%d/model.safetensors", a, step);
    snprintf(y, sizeof y, "runs/%s/ckpt/step-%d/model.safetensors", b, step);
    ck_assert_msg(files_equal(x, y), "%s and %s: weights differ at step %d", a, b, step);
    snprintf(x, sizeof x, "runs/%s/ckpt/step-%d/optimizer.safetensors", a, step);
    snprintf(y, sizeof y, "runs/%s/ckpt/step-%d/optimizer.safetensors", b, step);
    ck_assert_msg(files_equal(x, y), "%s and %s: optimizer state differs at step %d", a, b, step);
    snprintf(x, sizeof x, "runs/%s/sft_log.jsonl", a);
    snprintf(y, sizeof y, "runs/%s/sft_log.jsonl", b);
    char *la = log_values(x), *lb = log_values(y);
    ck_assert_str_eq(la, lb);
    free(la);
    free(lb);
}

START_TEST(test_sft_resume_bit_identical)
{
    write_sft_inputs();
    /* 10 examples in batches of 4: epochs end mid-batch; cosine lr over 10 steps;
     * checkpoints every 3, log every 2: the checkpoint at step 3 holds a partly
     * accumulated loss */
    const char *common = "--set data.train=d10.jsonl --set sft.steps=10 --set checkpoint.every=3 "
                         "--set log.every=2 --quiet";
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=straight %s", common), 0);
    /* the same run cut after its step-3 checkpoint, as a kill at step 5 leaves it:
     * later checkpoints gone, latest at step-3, log lines past it */
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=cut %s", common), 0);
    ck_assert_int_eq(tu_sh("cd %s/runs/cut/ckpt && rm -rf step-6 step-9 step-10 && ln -sfn step-3 "
                        "latest && cd .. && head -n 2 sft_log.jsonl > l && mv l sft_log.jsonl",
                        tu_dir), 0);
    char *out, *err;
    ck_assert_int_eq(tu_dllm_take(&out, &err, "sft --resume runs/cut"), 0);
    ck_assert_msg(strstr(out, "resuming runs/cut from step 3"), "%s", out);
    free(out);
    free(err);
    assert_same_run("straight", "cut", 10);
    /* a finished run says so and changes nothing */
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "sft --resume runs/cut"), 0);
    ck_assert_msg(strstr(out, "already finished"), "%s", out);
    free(out);

    /* the same for a Qwen3 model with LoRA and the bf16 trainer (restored trainable
     * vector is the adapter; the bf16 copy is rebuilt from it) */
    const char *ar = "--set model.arch=qwen3 --set data.answer_length=0 --set model.lora.rank=4 "
                     "--set model.trainer_precision=bf16";
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=ar1 %s %s", ar, common), 0);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=ar2 %s %s", ar, common), 0);
    ck_assert_int_eq(tu_sh("cd %s/runs/ar2/ckpt && rm -rf step-6 step-9 step-10 && ln -sfn step-3 "
                        "latest", tu_dir), 0);
    ck_assert_int_eq(tu_dllm("sft --resume runs/ar2 --quiet"), 0);
    assert_same_run("ar1", "ar2", 10);

    /* N/2 steps, then resumed to N (constant lr: the first half is the same run) */
    const char *flat = "--set data.train=d10.jsonl --set optim.schedule=constant "
                       "--set optim.warmup=0 --set checkpoint.every=0 --set log.every=1 --quiet";
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=whole --set sft.steps=8 %s", flat), 0);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=half --set sft.steps=4 %s", flat), 0);
    ck_assert_int_eq(tu_dllm("sft --resume runs/half --set sft.steps=8 --quiet"), 0);
    assert_same_run("whole", "half", 8);
    /* bad resumes */
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "sft --resume runs/nowhere"), 2);
    ck_assert_msg(strstr(err, "runs/nowhere"), "%s", err);
    free(err);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "sft s.yaml --resume runs/half"), 2);
    ck_assert_msg(strstr(err, "--resume"), "%s", err);
    free(err);
}
END_TEST

/* ---- self-describing checkpoints, eval, generate -> grade -------------------------- */

/* a model that has learnt something (150 SFT steps: some blanks right) */
static void trained_model(void)
{
    write_sft_inputs();
    if (tu_exists("runs/w/ckpt/latest/generation.json"))
        return;
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 200 --seed 101 --max-blanks 8 > "
                        "d200.jsonl", tu_dir, tu_bin()), 0);
    ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=w --set data.train=d200.jsonl "
                                     "--set sft.steps=150 --set sft.batch_size=8 --set log.every=50 "
                                     "--set checkpoint.every=0 --quiet"), 0);
}

START_TEST(test_generation_json)
{
    trained_model();
    char p[256];
    snprintf(p, sizeof p, "%s/runs/w/ckpt/latest/generation.json", tu_dir);
    json_error_t je;
    json_t *g = json_load_file(p, 0, &je);
    ck_assert_msg(g != NULL, "%s: %s", p, je.text);
    ck_assert_int_eq(json_integer_value(json_object_get(g, "gen_length")), 34); /* answer_length */
    ck_assert_int_eq(json_integer_value(json_object_get(g, "block_length")), 34);
    ck_assert_int_eq(json_integer_value(json_object_get(g, "steps")), 17);
    ck_assert_str_eq(json_string_value(json_object_get(g, "sampler")), "denoising");
    ck_assert_str_eq(json_string_value(json_object_get(g, "chat")), "plain");
    json_decref(g);
    ck_assert(tu_exists("runs/w/ckpt/latest/tokenizer.json"));
    char *a, *b;
    ck_assert_int_eq(tu_dllm_take(&a, NULL, "generate --model runs/w/ckpt/latest --prompt 3000400220410420 "
                                   "--format ids"), 0);
    ck_assert_int_eq(tu_dllm_take(&b, NULL, "generate --model runs/w/ckpt/latest --prompt 3000400220410420 "
                                   "--format ids --gen-length 34 --block-length 34 --steps 17 "
                                   "--chat plain"), 0);
    ck_assert_str_eq(a, b);
    int commas = 0;
    for (const char *c = a; *c; c++)
        commas += *c == ',';
    ck_assert_int_eq(commas, 33);
    free(a);
    free(b);
    /* a flag still overrides */
    ck_assert_int_eq(tu_dllm_take(&a, NULL, "generate --model runs/w/ckpt/latest --prompt 3000400220410420 "
                                   "--format ids --gen-length 20 --block-length 20 --steps 10"), 0);
    commas = 0;
    for (const char *c = a; *c; c++)
        commas += *c == ',';
    ck_assert_int_eq(commas, 19);
    free(a);
    /* a malformed file is an input error naming it */
    ck_assert_int_eq(tu_sh("cp -r %s/runs/w/ckpt/latest/ %s/bad && echo '{\"steps\": -1}' > "
                        "%s/bad/generation.json", tu_dir, tu_dir, tu_dir), 0);
    char *err;
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "generate --model bad --prompt 1"), 2);
    ck_assert_msg(strstr(err, "generation.json") && strstr(err, "steps"), "%s", err);
    free(err);
}
END_TEST

START_TEST(test_eval_equals_train)
{
    trained_model();
    char p[256];
    snprintf(p, sizeof p, "%s/t.yaml", tu_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("experiment: ev\nseed: 1\nmodel: {path: runs/w/ckpt/latest}\n"
          "task: {name: sudoku, format: plain, chat: plain, train: {n: 50}, max_blanks: 8, "
          "reward: task}\n"
          "rollout: {precision: trainer, gen_length: 34, block_length: 34, steps: 17}\n"
          "grpo: {steps: 0, prompts_per_step: 2}\n"
          "eval: {every: 30, n: 30, gen_length: 34, block_length: 34, steps: 17, temperature: 0}\n"
          "log: {dir: runs}\n", f);
    fclose(f);
    ck_assert_int_eq(tu_dllm("train t.yaml --quiet"), 0);
    char *out;
    /* no config: the sampler from generation.json, the task settings by --set */
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "eval --model runs/w/ckpt/latest --task sudoku --n 30 "
                                     "--set task.format=plain --set task.max_blanks=8 "
                                     "--out o.txt --json"), 0);
    ck_assert_msg(files_equal("o.txt", "runs/ev/eval/sudoku-step-0.txt"),
                  "eval's outcomes differ from train's");
    json_t *e = json_loads(out, 0, NULL);
    ck_assert_msg(e != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/ev --json"), 0);
    json_t *t = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(t);
    free(out);
    json_t *te = json_object_get(json_object_get(t, "eval"), "sudoku");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "n")), 30);
    const char *k[3] = {"accuracy", "accuracy_se", "reward_mean"};
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq_tol(json_number_value(json_object_get(e, k[i])),
                                json_number_value(json_object_get(te, k[i])), 1e-12);
    json_decref(e);
    json_decref(t);
    /* --config takes the same settings from the training config */
    ck_assert_int_eq(tu_dllm("eval --model runs/w/ckpt/latest --task sudoku --config t.yaml "
                                     "--out o2.txt"), 0);
    ck_assert(files_equal("o2.txt", "runs/ev/eval/sudoku-step-0.txt"));
    char *err;
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "eval --model runs/w/ckpt/latest --task sudoku "
                                     "--precision fp8"), 2);
    ck_assert_msg(strstr(err, "--precision"), "%s", err);
    free(err);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "eval --model runs/w/ckpt/latest --task nope"), 2);
    ck_assert_msg(strstr(err, "nope"), "%s", err);
    free(err);
}
END_TEST

START_TEST(test_generate_json_to_grade)
{
    trained_model();
    char p[256];
    snprintf(p, sizeof p, "%s/batch.jsonl", tu_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"prompt\": \"3000400220410420\", \"puzzle\": \"3000400220410420\", "
          "\"solution\": \"3214413223411423\"}\n"
          "{\"prompt\": \"2000012400034012\", \"puzzle\": \"2000012400034012\", "
          "\"solution\": \"2431312412434312\"}\n", f);
    fclose(f);
    ck_assert_int_eq(tu_sh("cd %s && %s generate --model runs/w/ckpt/latest --batch-file batch.jsonl "
                        "--format json > gen.jsonl", tu_dir, tu_bin()), 0);
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "grade sudoku --input gen.jsonl"), 0);
    ck_assert_msg(strstr(out, "n 2\n"), "%s", out);
    free(out);
    /* each line carries the completion and the reference fields it was given */
    snprintf(p, sizeof p, "%s/gen.jsonl", tu_dir);
    char *g = tu_slurp("%s", p);
    json_t *j = json_loads(g, JSON_DISABLE_EOF_CHECK, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "completion")),
                     json_string_value(json_object_get(j, "text")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "solution")), "3214413223411423");
    json_decref(j);
    free(g);
}
END_TEST

/* ---- inspect ---------------------------------------------------------------------- */

START_TEST(test_inspect_sft)
{
    write_sft_inputs();
    if (!tu_exists("runs/i"))
        ck_assert_int_eq(tu_dllm("sft s.yaml --set experiment=i --quiet"), 0);
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/i"), 0);
    ck_assert_msg(strstr(out, "6 of 6 (finished)") && strstr(out, "step-6 (latest)") &&
                  strstr(out, "loss") && strstr(out, "gen_length 34"), "%s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/i --csv"), 0);
    ck_assert_msg(!strncmp(out, "step,loss,grad_norm,lr,tokens_per_s,elapsed_s\n2,", 48), "%s", out);
    int rows = 0;
    for (const char *c = out; *c; c++)
        rows += *c == '\n';
    ck_assert_int_eq(rows, 4); /* header + steps 2, 4, 6 */
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/i --json"), 0);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert(json_is_true(json_object_get(j, "finished")));
    ck_assert_int_eq(json_array_size(json_object_get(j, "checkpoints")), 3);
    json_decref(j);
    free(out);
    char *err;
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "inspect runs/i --metric reward_mean"), 2);
    ck_assert_msg(strstr(err, "sft"), "%s", err);
    free(err);
    /* an interrupted run is reported as such */
    ck_assert_int_eq(tu_sh("cp -r %s/runs/i %s/runs/i2 && cd %s/runs/i2/ckpt && rm -rf step-6 && "
                        "ln -sfn step-4 latest", tu_dir, tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/i2"), 0);
    ck_assert_msg(strstr(out, "--resume"), "%s", out);
    free(out);
}
END_TEST

START_TEST(test_inspect_train_csv_metric)
{
    write_sft_inputs();
    char p[256];
    snprintf(p, sizeof p, "%s/r.yaml", tu_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("experiment: r\nseed: 1\nmodel: {preset: tiny}\n"
          "task: {name: sudoku, format: plain, chat: plain, train: {n: 20}, max_blanks: 8}\n"
          "rollout: {precision: trainer, group_size: 2, gen_length: 34, block_length: 34, steps: 17}\n"
          "grpo: {steps: 3, prompts_per_step: 2, inner_steps: 1}\n"
          "eval: {every: 0, n: 4, gen_length: 34, block_length: 34, steps: 17}\n"
          "log: {dir: runs}\n", f);
    fclose(f);
    ck_assert_int_eq(tu_dllm("train r.yaml --quiet"), 0);
    char *out, *err;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/r --csv"), 0);
    ck_assert_msg(!strncmp(out, "step,reward_mean,", 17) && strstr(out, ",policy_kl,") &&
                  strstr(out, "\n1,") && strstr(out, "\n3,"), "%s", out);
    int rows = 0;
    for (const char *c = out; *c; c++)
        rows += *c == '\n';
    ck_assert_int_eq(rows, 4);
    free(out);
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "inspect runs/r --metric lr"), 0);
    ck_assert_msg(!strncmp(out, "step lr\n1 ", 10), "%s", out);
    free(out);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "inspect runs/r --metric policy_kl"), 2);
    ck_assert_msg(strstr(err, "grpo.beta"), "%s", err);
    free(err);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "inspect runs/r --metric nope"), 2);
    ck_assert_msg(strstr(err, "nope") && strstr(err, "reward_mean"), "%s", err);
    free(err);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "inspect models"), 2);
    ck_assert_msg(strstr(err, "sft_log.jsonl") && strstr(err, "log.h5"), "%s", err);
    free(err);
    /* the trainer's checkpoints carry the sampler settings; export keeps them, and
     * refuses to overwrite an existing export unless --force */
    ck_assert(tu_exists("runs/r/ckpt/latest/generation.json"));
    ck_assert_int_eq(tu_dllm("export runs/r --merged --out ex"), 0);
    ck_assert(tu_exists("ex/generation.json") && tu_exists("ex/tokenizer.json") &&
              tu_exists("ex/model.safetensors"));
    ck_assert_int_eq(tu_sh("cd %s && cp ex/model.safetensors ex-copy.safetensors", tu_dir), 0);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "export runs/r --merged --out ex --dtype bf16"), 2);
    ck_assert_msg(strstr(err, "ex") && strstr(err, "--force"), "%s", err);
    free(err);
    ck_assert(files_equal("ex/model.safetensors", "ex-copy.safetensors"));
    ck_assert_int_eq(tu_dllm("export runs/r --merged --out ex --dtype bf16 --force"), 0);
    ck_assert(!files_equal("ex/model.safetensors", "ex-copy.safetensors"));
    ck_assert(tu_exists("ex/generation.json"));
    /* --dtype bf16 writes BF16 tensors (the safetensors header, read here), half the bytes */
    ck_assert_int_eq(tensor_dtypes("ex-copy.safetensors", "F32"),
                     tensor_dtypes("ex/model.safetensors", "BF16"));
}
END_TEST

/* A run started from a relative model path is usable from anywhere: its stored
 * config names the model absolutely, so export and inspect work from another
 * directory. */
START_TEST(test_run_relocatable)
{
    ck_assert_int_eq(tu_dllm("init-model --preset tiny --seed 3 --out relmodel"), 0);
    char p[256];
    snprintf(p, sizeof p, "%s/rel.yaml", tu_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("experiment: rel\nseed: 1\nmodel: {path: relmodel}\n"
          "task: {name: sudoku, format: plain, chat: plain, train: {n: 20}, max_blanks: 8}\n"
          "rollout: {precision: trainer, group_size: 2, gen_length: 34, block_length: 34, steps: 17}\n"
          "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1}\n"
          "eval: {every: 0}\nlog: {dir: runs}\n", f);
    fclose(f);
    ck_assert_int_eq(tu_dllm("train rel.yaml --quiet"), 0);
    char *stored;
    snprintf(p, sizeof p, "%s/runs/rel/config.yaml", tu_dir);
    stored = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(stored);
    char want[300];
    snprintf(want, sizeof want, "%s/relmodel", tu_dir);
    ck_assert_msg(strstr(stored, want), "model.path not absolute in %s", stored);
    free(stored);
    ck_assert_int_eq(tu_sh("cd / && OMP_NUM_THREADS=1 %s export %s/runs/rel --merged --out %s/relex "
                        ">/dev/null 2>&1", tu_bin(), tu_dir, tu_dir), 0);
    ck_assert(tu_exists("relex/model.safetensors"));
    ck_assert_int_eq(tu_sh("cd / && %s inspect %s/runs/rel >/dev/null 2>&1", tu_bin(), tu_dir), 0);
}
END_TEST

/* ---- feedback --------------------------------------------------------------------- */

START_TEST(test_help_every_command)
{
    char *list;
    ck_assert_int_eq(tu_dllm_take(&list, NULL, "--help"), 0);
    const char *c = strstr(list, "commands:\n");
    ck_assert_ptr_nonnull(c);
    int n = 0;
    for (c += 10; *c == ' ';) {
        char name[64];
        ck_assert_int_eq(sscanf(c, " %63s", name), 1);
        for (int k = 0; k < 2; k++) {
            char *out, *err;
            int st = tu_dllm_take(&out, &err, "%s %s", name, k ? "-h" : "--help");
            ck_assert_msg(st == 0, "dllm-rl %s %s: exit %d: %s", name, k ? "-h" : "--help", st, err);
            ck_assert_msg(strstr(out, "usage"), "dllm-rl %s %s: no usage on stdout", name,
                          k ? "-h" : "--help");
            free(out);
            free(err);
        }
        n++;
        c = strchr(c, '\n') + 1;
    }
    ck_assert_int_ge(n, 12);
    ck_assert_msg(strstr(list, "eval"), "eval is not in the command table");
    /* and every benchmark of `bench` */
    static const char *const benches[] = {"train", "rollout", "mismatch", "rl-step", "gemm"};
    for (size_t i = 0; i < sizeof benches / sizeof *benches; i++)
        for (int k = 0; k < 2; k++) {
            char *out;
            ck_assert_msg(tu_dllm_take(&out, NULL, "bench %s %s", benches[i], k ? "-h" : "--help") == 0 &&
                              strstr(out, "usage"),
                          "dllm-rl bench %s %s", benches[i], k ? "-h" : "--help");
            free(out);
        }
    free(list);
}
END_TEST

/* bench gemm's measured fp32 peak is a number wherever the CPU has AVX-512F or AVX2 with
 * FMA (it printed 0 on AVX2 CPUs once); the bf16 dot peak is 0 and said to be absent
 * without AVX512-BF16. Only that it is positive: no speed is asserted. */
START_TEST(test_bench_gemm_peak)
{
#if defined(__x86_64__)
    bool fma = cpu_has(CPU_AVX512F) || (cpu_has(CPU_AVX2) && cpu_has(CPU_FMA));
    bool bf16 = cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BF16);
    char *out;
    ck_assert_int_eq(tu_dllm_take(&out, NULL, "bench gemm --preset tiny --square 64 --rounds 1 "
                                              "--time 0.01"), 0);
    const char *p = strstr(out, "fp32 FMA ");
    ck_assert_msg(p, "%s", out);
    double pf = -1, pb = -1;
    ck_assert_int_eq(sscanf(p, "fp32 FMA %lf GFLOP/s, bf16 dot %lf", &pf, &pb), 2);
    if (fma)
        ck_assert_msg(pf > 0, "fp32 peak %g on a CPU with FMA: %s", pf, out);
    else
        printf("SKIP fp32 peak: no AVX-512F or AVX2+FMA on this CPU\n");
    ck_assert_msg((pb > 0) == bf16, "bf16 peak %g (AVX512-BF16: %d)", pb, bf16);
    ck_assert_msg(bf16 || strstr(out, "no AVX512-BF16"), "%s", out);
    free(out);
#endif
}
END_TEST

/* Every key of docs/CONFIG.md's configuration table with a prefix sft reads
 * ("`optim.lr`, `.warmup`" names optim.lr and optim.warmup) is in sft --help. */
START_TEST(test_sft_help_lists_readme_keys)
{
    const char *data = getenv("DLLM_TEST_DATA");
    char p[4096];
    snprintf(p, sizeof p, "%s/../../docs/CONFIG.md", data);
    char *readme = tu_slurp("%s", p);
    ck_assert_msg(readme != NULL, "%s: cannot read", p);
    char *help;
    ck_assert_int_eq(tu_dllm_take(&help, NULL, "sft --help"), 0);
    static const char *const prefixes[] = {"data.", "sft.", "optim.", "model.", "log.",
                                           "checkpoint."};
    int checked = 0;
    for (char *line = readme; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "| `", 3))
            continue;
        char cell[512];
        const char *end = strstr(line + 2, " |");
        if (!end || end - line - 2 >= (long)sizeof cell)
            continue;
        snprintf(cell, sizeof cell, "%.*s", (int)(end - line - 2), line + 2);
        char base[256] = "";
        for (char *tok = strtok(cell, ","); tok; tok = strtok(NULL, ",")) {
            char key[256];
            if (sscanf(tok, " `%255[^`]`", key) != 1)
                continue;
            if (key[0] == '.') {
                char full[512];
                snprintf(full, sizeof full, "%s%s", base, key + 1);
                snprintf(key, sizeof key, "%s", full);
            } else {
                snprintf(base, sizeof base, "%s", key);
                char *dot = strrchr(base, '.');
                if (dot)
                    dot[1] = 0;
            }
            int ours = 0;
            for (int i = 0; i < 6; i++)
                ours |= !strncmp(key, prefixes[i], strlen(prefixes[i]));
            if (!ours)
                continue;
            ck_assert_msg(strstr(help, key), "sft --help does not list %s", key);
            checked++;
        }
    }
    ck_assert_int_ge(checked, 20);
    free(help);
    free(readme);
}
END_TEST

START_TEST(test_random_model_warning)
{
    write_sft_inputs();
    char *err;
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "sft s.yaml --set experiment=rw --set sft.steps=1 --quiet"), 0);
    ck_assert_msg(strstr(err, "RANDOM, UNTRAINED"), "%s", err);
    free(err);
    ck_assert_int_eq(tu_dllm("init-model --preset tiny --out models/rw"), 0);
    ck_assert_int_eq(tu_dllm_take(NULL, &err, "sft s.yaml --set experiment=rw2 --set sft.steps=1 "
                                     "--set model.path=models/rw --quiet"), 0);
    ck_assert_msg(!strstr(err, "RANDOM"), "warned for a model given by path: %s", err);
    free(err);
}
END_TEST

/* A progress line is in the file while the process still runs (stdout to a
 * file is fully buffered unless the program line-buffers it). */
START_TEST(test_progress_reaches_file)
{
    write_sft_inputs();
    bool running;
    bool seen = tu_dllm_shows("live", "sft: 40 examples", 600, &running,
                              "sft s.yaml --set experiment=live --set sft.steps=10000000 "
                              "--set log.every=10000000 --set checkpoint.every=0");
    ck_assert_msg(running, "the run ended early");
    ck_assert_msg(seen, "no progress line in the file while the run was going");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli_safety");
    TCase *tc = tcase_create("never_destroy");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_init_model_refuses_and_forces);
    tcase_add_test(tc, test_sft_refuses_and_forces);
    tcase_add_test(tc, test_sft_resume_bit_identical);
    suite_add_tcase(s, tc);
    tc = tcase_create("self_describing");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_generation_json);
    tcase_add_test(tc, test_eval_equals_train);
    tcase_add_test(tc, test_generate_json_to_grade);
    suite_add_tcase(s, tc);
    tc = tcase_create("inspect");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_inspect_sft);
    tcase_add_test(tc, test_inspect_train_csv_metric);
    tcase_add_test(tc, test_run_relocatable);
    suite_add_tcase(s, tc);
    tc = tcase_create("feedback");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help_every_command);
    tcase_add_test(tc, test_bench_gemm_peak);
    tcase_add_test(tc, test_sft_help_lists_readme_keys);
    tcase_add_test(tc, test_random_model_warning);
    tcase_add_test(tc, test_progress_reaches_file);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    ctx->nofork = true; /* one process: the tests share the trained model and the data files */
    return suite();
}
