/* test_cli_integrity.c: damaged logs, full disks, bad numbers and wrong settings,
 * run as a user runs them (the dllm-rl binary, DLLM_BIN) on a tiny model. Every
 * case checks the exit status, the message, and that nothing outside the run
 * directory changed:
 *
 *   damaged    a log.h5 overwritten in its metadata, or truncated: inspect and
 *              train --resume refuse it (exit 2) within seconds, say what to do,
 *              leave the log as it was and no log.h5.tmp;
 *   full disk  a file-size limit (ulimit -f) reached while the log grows: exit 1
 *              (no signal), one error line naming the cause, the last complete
 *              checkpoint kept; with the limit lifted the run resumes, and its
 *              steps equal those of a run that was never stopped; sft under the
 *              limit likewise, no partial checkpoint left;
 *   non-finite weights with a NaN refused at load naming the tensor (generate,
 *              score, train); an update that makes the weights non-finite stops
 *              the run (exit 1) before it is applied, the last checkpoint kept;
 *   long prompt a training prompt longer than the model's context refused before
 *              anything runs, naming the data file and the item;
 *   task       eval of a checkpoint uses the task settings it was trained with
 *              and says so; without them it says it used the defaults;
 *   smaller    correction.cap=inf hints at .inf; non-ASCII text under the char
 *              tokenizer refused in data files, warned about by generate; the
 *              device key's description. */
#include "tests/harness/harness.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


/* The checksums of every file in tu_dir outside dir into tu_dir/NAME: what a command
 * must not change. */
static void snapshot(const char *dir, const char *name)
{
    ck_assert_int_eq(tu_sh("cd %s && find . -type f ! -path './%s/*' ! -name 'outside.*' "
                           "| sort | xargs md5sum > outside.%s",
                           tu_dir, dir, name),
                     0);
}

static void assert_outside_unchanged(const char *dir)
{
    snapshot(dir, "after");
    ck_assert_msg(tu_sh("cmp -s %s/outside.before %s/outside.after", tu_dir, tu_dir) == 0,
                  "files outside %s changed", dir);
}

/* Overwrites n bytes of rel at offset off with a pattern (a disk error, a bad copy). */
static void scribble(const char *rel, long off)
{
    ck_assert_int_eq(tu_sh("printf 'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX' | dd of=%s/%s bs=1 seek=%ld "
                           "conv=notrunc 2>/dev/null",
                           tu_dir, rel, off),
                     0);
}

START_TEST(test_damaged_log_refused_quickly)
{
    tu_write_rl_config("d.yaml", "dmg", 4, 1);
    ck_assert_int_eq(tu_dllm("train d.yaml --quiet"), 0);
    ck_assert_int_eq(tu_sh("cp %s/runs/dmg/log.h5 %s/good.h5", tu_dir, tu_dir), 0);
    /* inside object headers (their "OHDR" signature, in file order after the root
     * group's: groups', datasets'), wherever the layout puts them; the HDF5 reader's default
     * retried a bad checksum 100 times with doubling sleeps: forever */
    size_t len = 0;
    char *img = tu_slurp_n(&len, "%s/good.h5", tu_dir);
    ck_assert_ptr_nonnull(img);
    long oh[64];
    int noh = 0;
    for (size_t k = 0; k + 4 <= len && noh < 64; k++)
        if (memcmp(img + k, "OHDR", 4) == 0)
            oh[noh++] = (long)k;
    free(img);
    ck_assert_int_ge(noh, 30);
    const long offsets[] = {oh[1] + 6, oh[2] + 6, oh[4] + 6, oh[20] + 6};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        ck_assert_int_eq(tu_sh("cp %s/good.h5 %s/runs/dmg/log.h5", tu_dir, tu_dir), 0);
        scribble("runs/dmg/log.h5", offsets[i]);
        ck_assert_int_eq(tu_sh("cp %s/runs/dmg/log.h5 %s/bad.h5", tu_dir, tu_dir), 0);
        snapshot("runs/dmg", "before");
        ck_assert_msg(tu_dllm("inspect runs/dmg") == 2, "offset %ld: inspect: %s", offsets[i], tu_err);
        ck_assert_msg(tu_seconds < 20, "offset %ld: inspect took %.1f s", offsets[i],
                      tu_seconds);
        ck_assert_msg(strstr(tu_err, "runs/dmg/log.h5: the log is damaged") &&
                          strstr(tu_err, "restore it from a copy"),
                      "offset %ld: %s", offsets[i], tu_err);
        ck_assert_msg(!strstr(tu_err, "HDF5-DIAG") && !strstr(tu_err, "infinite loop"), "%s",
                      tu_err);
        ck_assert_msg(tu_dllm("train --resume runs/dmg --quiet --set grpo.steps=6") == 2,
                      "offset %ld: resume: %s", offsets[i], tu_err);
        ck_assert_msg(tu_seconds < 30, "offset %ld: resume took %.1f s", offsets[i],
                      tu_seconds);
        ck_assert_msg(strstr(tu_err, "the log is damaged") && strstr(tu_err, "--force"),
                      "offset %ld: %s", offsets[i], tu_err);
        ck_assert_int_eq(tu_sh("cmp -s %s/runs/dmg/log.h5 %s/bad.h5", tu_dir, tu_dir), 0);
        ck_assert(!tu_exists("runs/dmg/log.h5.tmp"));
        assert_outside_unchanged("runs/dmg");
    }
    /* truncated (a bad copy): refused at once, naming the sizes */
    ck_assert_int_eq(tu_sh("head -c 100000 %s/good.h5 > %s/runs/dmg/log.h5", tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm("inspect runs/dmg"), 2);
    ck_assert_msg(strstr(tu_err, "shorter than it records (100000 of "), "%s", tu_err);
    ck_assert_int_eq(tu_dllm("train --resume runs/dmg --quiet --set grpo.steps=6"), 2);
    ck_assert_msg(strstr(tu_err, "cannot resume at step 4"), "%s", tu_err);
    ck_assert(!tu_exists("runs/dmg/log.h5.tmp"));
    /* the intact log still resumes */
    ck_assert_int_eq(tu_sh("cp %s/good.h5 %s/runs/dmg/log.h5", tu_dir, tu_dir), 0);
    ck_assert_int_eq(tu_dllm("train --resume runs/dmg --quiet --set grpo.steps=5"), 0);
}
END_TEST

/* LoRA keeps the checkpoints small (the log is then the file that grows past
 * the limit); 128 completions a step fill the log's first chunks in a few steps. */
static const char *const big_steps =
    "--set grpo.prompts_per_step=16 --set rollout.group_size=8 --set model.lora.rank=2 "
    "--set checkpoint.every=2 --set grpo.steps=10";

START_TEST(test_file_size_limit)
{
    tu_write_rl_config("f.yaml", "full", 4, 1);
    /* the log's size once every dataset has its first chunk (step 1); it grows
     * again when the first of them fills, a few steps and checkpoints later */
    ck_assert_int_eq(tu_dllm("train f.yaml --quiet %s --set grpo.steps=1 --set experiment=probe",
                         big_steps),
                     0);
    struct stat ls;
    char p[256], limit[64];
    snprintf(p, sizeof p, "%s/runs/probe/log.h5", tu_dir);
    ck_assert_int_eq(stat(p, &ls), 0);
    /* /bin/sh's ulimit -f counts 512-byte blocks */
    snprintf(limit, sizeof limit, "ulimit -f %lld", (long long)ls.st_size / 512 + 16);
    snapshot("runs/full", "before");
    int st = tu_dllm_with(limit, "train f.yaml --quiet %s", big_steps);
    ck_assert_msg(st == 1, "exit %d (a signal is -1): %s", st, tu_err);
    ck_assert_msg(strstr(tu_err, "runs/full/log.h5") && strstr(tu_err, "File too large") &&
                      strstr(tu_err, "ulimit -f"),
                  "%s", tu_err);
    ck_assert_msg(strstr(tu_err, "the last complete checkpoint is kept (runs/full/ckpt/step-") &&
                      strstr(tu_err, "`dllm-rl train --resume runs/full`"),
                  "%s", tu_err);
    ck_assert_msg(!strstr(tu_err, "HDF5") && !strstr(tu_err, "infinite loop"), "%s", tu_err);
    int lines = 0;
    for (const char *c = tu_err; *c; c++)
        lines += *c == '\n';
    ck_assert_msg(lines <= 4, "%d lines: %s", lines, tu_err);
    ck_assert(tu_exists("runs/full/ckpt/latest/state.json"));
    ck_assert_int_eq(tu_sh("ls -a %s/runs/full/ckpt | grep -q tu_dir", tu_dir), 1);
    assert_outside_unchanged("runs/full");
    /* space returns: the run continues, and equals a run never stopped */
    ck_assert_msg(tu_dllm("train --resume runs/full --quiet") == 0, "%s", tu_err);
    ck_assert_int_eq(tu_dllm("train f.yaml --quiet --set experiment=whole %s", big_steps), 0);
    ck_assert_int_eq(tu_dllm("inspect runs/full --csv"), 0);
    char *resumed = strdup(tu_out);
    ck_assert_int_eq(tu_dllm("inspect runs/whole --csv"), 0);
    /* the t_* timings differ: compare the rows up to the first timing column */
    char *a = resumed, *b = tu_out;
    int rows = 0;
    while (*a && *b) {
        char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        ck_assert(ea && eb);
        size_t la = (size_t)(ea - a), lb = (size_t)(eb - b);
        /* column cut: the first 14 fields (step .. frac_nonfinite) */
        int commas = 0;
        size_t ka = 0, kb = 0;
        while (ka < la && commas < 14)
            commas += a[ka++] == ',';
        commas = 0;
        while (kb < lb && commas < 14)
            commas += b[kb++] == ',';
        ck_assert_msg(ka == kb && !memcmp(a, b, ka), "row %d differs:\n%.*s\n%.*s", rows,
                      (int)la, a, (int)lb, b);
        a = ea + 1;
        b = eb + 1;
        rows++;
    }
    ck_assert_int_eq(rows, 11); /* header + 10 steps */
    free(resumed);

    /* sft: a checkpoint larger than the limit is an error, not a signal, and
     * leaves no partial checkpoint */
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 20 --seed 3 --max-blanks 6 "
                           "> sft.jsonl",
                           tu_dir, tu_bin()),
                     0);
    tu_write("s.yaml", "experiment: sfull\nseed: 1\nmodel: {path: model}\n"
                         "data: {train: sft.jsonl, max_len: 64, answer_length: 34}\n"
                         "sft: {steps: 4, batch_size: 4}\nlog: {dir: runs, every: 1}\n"
                         "checkpoint: {every: 2}\n");
    snapshot("runs/sfull", "before");
    st = tu_dllm_with("ulimit -f 1500", "sft s.yaml --quiet"); /* 750 KB: the weights fit */
    ck_assert_msg(st == 1, "exit %d: %s", st, tu_err);
    ck_assert_msg(strstr(tu_err, "File too large"), "%s", tu_err);
    ck_assert_int_eq(tu_sh("ls -a %s/runs/sfull/ckpt | grep -q step", tu_dir), 1);
    assert_outside_unchanged("runs/sfull");
}
END_TEST

/* Sets element 2 of the n-th tensor (in name order) of a safetensors file to
 * value, with python3; 77 when python3 is missing. */
static int poke(const char *rel, const char *tensor, const char *value)
{
    return tu_sh("cd %s && python3 -c \"import json,struct,sys\n"
                 "p='%s'; b=bytearray(open(p,'rb').read()); n=struct.unpack('<Q',b[:8])[0]\n"
                 "h=json.loads(b[8:8+n]); o=h['%s']['data_offsets'][0]+8+n\n"
                 "b[o+8:o+12]=struct.pack('<f',float('%s')); open(p,'wb').write(b)\"",
                 tu_dir, rel, tensor, value);
}

START_TEST(test_non_finite_weights)
{
    if (tu_sh("python3 -c 1 2>/dev/null") != 0) {
        fprintf(stderr, "test_non_finite_weights: SKIP: python3 not found\n");
        return;
    }
    ck_assert_int_eq(tu_sh("rm -rf %s/nanmodel && cp -r %s/model %s/nanmodel", tu_dir, tu_dir, tu_dir), 0);
    const char *t = "model.transformer.blocks.0.ff_out.weight";
    ck_assert_int_eq(poke("nanmodel/model.safetensors", t, "nan"), 0);
    tu_write_rl_config("n.yaml", "nan", 4, 1);
    snapshot("runs/nan", "before");
    ck_assert_int_eq(tu_dllm("generate --model nanmodel --prompt 12"), 2);
    ck_assert_msg(strstr(tu_err, "nanmodel: tensor 'model.transformer.blocks.0.ff_out.weight' "
                                "holds a non-finite value (nan at element 2)"),
                  "%s", tu_err);
    ck_assert_str_eq(tu_out, "");
    ck_assert_int_eq(tu_dllm("score --model nanmodel --prompt-ids 1,2 --completion-ids 3,4"), 2);
    ck_assert_msg(strstr(tu_err, "ff_out.weight' holds a non-finite value"), "%s", tu_err);
    ck_assert_msg(!strstr(tu_out, "null"), "%s", tu_out);
    ck_assert_int_eq(tu_dllm("train n.yaml --quiet --set model.path=nanmodel"), 2);
    ck_assert_msg(strstr(tu_err, "ff_out.weight' holds a non-finite value"), "%s", tu_err);
    ck_assert(!tu_exists("runs/nan/log.h5"));
    assert_outside_unchanged("runs/nan");

    /* an update that would make the weights non-finite: a negative second moment
     * in the optimizer state (finite, so it loads) turns AdamW's step into NaN */
    tu_write_rl_config("v.yaml", "div", 4, 1);
    ck_assert_int_eq(tu_dllm("train v.yaml --quiet --set grpo.steps=2"), 0);
    ck_assert_int_eq(poke("runs/div/ckpt/step-2/optimizer.safetensors", "adam_v", "-1"), 0);
    snapshot("runs/div", "before");
    ck_assert_int_eq(tu_dllm("train --resume runs/div --quiet --set grpo.steps=4"), 1);
    ck_assert_msg(strstr(tu_err, "step 3: the update made a weight non-finite") &&
                      strstr(tu_err, "the last complete checkpoint is kept (runs/div/ckpt/step-2)"),
                  "%s", tu_err);
    ck_assert(!tu_exists("runs/div/ckpt/step-3"));
    ck_assert_int_eq(tu_sh("readlink %s/runs/div/ckpt/latest | grep -qx step-2", tu_dir), 0);
    assert_outside_unchanged("runs/div");
    /* and a trainable vector with a NaN in a checkpoint is refused at resume */
    ck_assert_int_eq(poke("runs/div/ckpt/step-2/optimizer.safetensors", "trainable", "inf"), 0);
    ck_assert_int_eq(tu_dllm("train --resume runs/div --quiet --set grpo.steps=4"), 2);
    ck_assert_msg(strstr(tu_err, "optimizer.safetensors: tensor 'trainable' holds a non-finite "
                                "value (inf at element 2)"),
                  "%s", tu_err);
}
END_TEST

START_TEST(test_long_prompt_refused)
{
    /* one 3,900-character question among short ones */
    char *q = malloc(4000);
    q[0] = 0;
    for (int i = 0; i < 300; i++)
        strcat(q, "what is 1+1? ");
    char *text = malloc(6000);
    snprintf(text, 6000,
             "{\"question\": \"what is 1+1?\", \"answer\": \"2\"}\n"
             "{\"question\": \"what is 2+2?\", \"answer\": \"4\"}\n"
             "{\"question\": \"%s\", \"answer\": \"2\"}\n"
             "{\"question\": \"what is 3+3?\", \"answer\": \"6\"}\n",
             q);
    tu_write("long.jsonl", text);
    free(q);
    free(text);
    tu_write("g.yaml", "experiment: long\nmodel: {path: model}\n"
                         "task: {name: gsm8k, format: plain, chat: plain, train: {path: long.jsonl}, "
                         "eval: {path: long.jsonl}}\n"
                         "rollout: {group_size: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                         "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1}\n"
                         "eval: {every: 0, n: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                         "log: {dir: runs}\n");
    snapshot("runs/long", "before");
    ck_assert_int_eq(tu_dllm("train g.yaml --quiet"), 2);
    ck_assert_msg(tu_seconds < 20, "%.1f s", tu_seconds);
    ck_assert_msg(strstr(tu_err, "long.jsonl: training item 3 (\"what is 1+1? what is 1+1?") &&
                      strstr(tu_err, "its prompt of 3901 tokens (task.format plain) + "
                                    "rollout.gen_length 12 exceed the model's "
                                    "max_sequence_length 512"),
                  "%s", tu_err);
    ck_assert(!tu_exists("runs/long/log.h5"));
    assert_outside_unchanged("runs/long");
}
END_TEST

START_TEST(test_eval_uses_the_models_task_settings)
{
    tu_write_rl_config("e.yaml", "ev", 4, 1);
    ck_assert_int_eq(tu_dllm("train e.yaml --quiet --set grpo.steps=1"), 0);
    char *gen = NULL;
    char p[256];
    snprintf(p, sizeof p, "%s/runs/ev/ckpt/latest/generation.json", tu_dir);
    gen = tu_slurp("%s", p);
    ck_assert_ptr_nonnull(gen);
    ck_assert_msg(strstr(gen, "\"format\": \"plain\"") && strstr(gen, "\"max_blanks\": 6"), "%s",
                  gen);
    free(gen);
    ck_assert_int_eq(tu_dllm("eval --model runs/ev/ckpt/latest --task sudoku --n 4"), 0);
    ck_assert_msg(strstr(tu_out, "task sudoku: format plain, chat plain, max_blanks 6, "
                                "n_numbers 3, reward task (the model's generation.json"),
                  "%s", tu_out);
    ck_assert_int_eq(tu_dllm("eval --model runs/ev/ckpt/latest --task sudoku --n 4 --json"), 0);
    ck_assert_msg(strstr(tu_out, "\"task_format\": \"plain\", \"max_blanks\": 6, "
                                "\"task_settings\": \"model\""),
                  "%s", tu_out);
    /* --set still overrides, and says so */
    ck_assert_int_eq(tu_dllm("eval --model runs/ev/ckpt/latest --task sudoku --n 4 "
                         "--set task.max_blanks=3"),
                     0);
    ck_assert_msg(strstr(tu_out, "max_blanks 3") && strstr(tu_out, "; then --set"), "%s", tu_out);
    /* a model that records nothing: the defaults, said so (d1 prompts do not fit
     * this model's context at the default length: refused, naming the format) */
    ck_assert_int_eq(tu_dllm("eval --model model --task sudoku --n 4 --set task.format=plain"), 0);
    ck_assert_msg(strstr(tu_out, "format plain") &&
                      strstr(tu_out, "the task's defaults: the model records none"),
                  "%s", tu_out);
    ck_assert_int_eq(tu_dllm("eval --model model --task sudoku --n 4"), 2);
    ck_assert_msg(strstr(tu_err, "(task.format d1) + eval.gen_length 64 exceed the model's "
                                "max_sequence_length 512"),
                  "%s", tu_err);
    /* sft records the task its config names */
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 20 --seed 3 --max-blanks 5 "
                           "> sft5.jsonl",
                           tu_dir, tu_bin()),
                     0);
    tu_write("s5.yaml", "experiment: s5\nseed: 1\nmodel: {path: model}\n"
                          "data: {train: sft5.jsonl, max_len: 64, answer_length: 34}\n"
                          "task: {name: sudoku, format: plain, max_blanks: 5}\n"
                          "sft: {steps: 2, batch_size: 4}\nlog: {dir: runs}\n");
    ck_assert_int_eq(tu_dllm("sft s5.yaml --quiet"), 0);
    ck_assert_int_eq(tu_dllm("eval --model runs/s5/ckpt/latest --task sudoku --n 4"), 0);
    ck_assert_msg(strstr(tu_out, "task sudoku: format plain, chat plain, max_blanks 5") &&
                      strstr(tu_out, "the model's generation.json"),
                  "%s", tu_out);
}
END_TEST

START_TEST(test_small_refusals)
{
    tu_write_rl_config("c.yaml", "cap", 4, 1);
    snapshot("runs/cap", "before");
    ck_assert_int_eq(tu_dllm("train c.yaml --set correction.cap=inf"), 2);
    ck_assert_msg(strstr(tu_err, "correction.cap must be a number, got 'inf' (YAML writes "
                                "infinity as .inf)"),
                  "%s", tu_err);
    ck_assert_int_eq(tu_dllm("train c.yaml --set correction.cap=.inf --print-config"), 0);
    ck_assert_msg(strstr(tu_out, "cap: .inf"), "%s", tu_out);
    ck_assert(!tu_exists("runs/cap"));
    assert_outside_unchanged("runs/cap");
    /* non-ASCII text under the char tokenizer: refused in data files, naming the
     * file and line (sft) or item (train); warned about by generate */
    tu_write("uni.jsonl", "{\"prompt\": \"0420020403002140\", \"answer\": \"ok\"}\n"
                            "{\"prompt\": \"caf\xc3\xa9 1234\", \"answer\": \"x\"}\n");
    tu_write("u.yaml", "experiment: uni\nseed: 1\nmodel: {path: model}\n"
                         "data: {train: uni.jsonl, max_len: 64}\nsft: {steps: 2, batch_size: 2}\n"
                         "log: {dir: runs}\n");
    ck_assert_int_eq(tu_dllm("sft u.yaml --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "uni.jsonl:2: prompt: 1 character(s) the tokenizer cannot "
                                "represent (non-ASCII under the char tokenizer)"),
                  "%s", tu_err);
    tu_write("unq.jsonl", "{\"question\": \"a?\", \"answer\": \"2\"}\n"
                            "{\"question\": \"caf\xc3\xa9?\", \"answer\": \"2\"}\n");
    tu_write("uq.yaml", "experiment: unq\nmodel: {path: model}\n"
                          "task: {name: gsm8k, format: plain, chat: plain, "
                          "train: {path: unq.jsonl}, eval: {path: unq.jsonl}}\n"
                          "rollout: {group_size: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                          "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1}\n"
                          "eval: {every: 0, n: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                          "log: {dir: runs}\n");
    ck_assert_int_eq(tu_dllm("train uq.yaml --quiet"), 2);
    ck_assert_msg(strstr(tu_err, "unq.jsonl: item 2 (\"caf\xc3\xa9?\"): 1 character(s)"), "%s",
                  tu_err);
    ck_assert(!tu_exists("runs/unq/log.h5"));
    ck_assert_int_eq(tu_dllm("generate --model model --prompt caf\xc3\xa9 --gen-length 4 "
                         "--block-length 4 --steps 2"),
                     0);
    ck_assert_msg(strstr(tu_err, "warning: the prompt has characters the tokenizer cannot "
                                "represent"),
                  "%s", tu_err);
    ck_assert_int_eq(tu_dllm("generate --model model --prompt cafe --gen-length 4 "
                         "--block-length 4 --steps 2"),
                     0);
    ck_assert_msg(!strstr(tu_err, "warning"), "%s", tu_err);
    /* the device key says what the code does (and what the README says) */
    ck_assert_int_eq(tu_dllm("config device"), 0);
    ck_assert_msg(strstr(tu_out, "the update (forward, backward, clip, AdamW) too, LoRA or full "
                                "fine-tuning, fp32 or bf16 trainer; several ranks: one device "
                                "each, gradients summed with NCCL"),
                  "%s", tu_out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cli_integrity");
    TCase *tc = tcase_create("integrity");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_damaged_log_refused_quickly);
    tcase_add_test(tc, test_file_size_limit);
    tcase_add_test(tc, test_non_finite_weights);
    tcase_add_test(tc, test_long_prompt_refused);
    tcase_add_test(tc, test_eval_uses_the_models_task_settings);
    tcase_add_test(tc, test_small_refusals);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_cli_setup(ctx))
        return NULL;
    if (!tu_tiny_model("llada", "model"))
        return tu_abort(ctx, "init-model failed");
    ctx->nofork = true;
    return suite();
}
