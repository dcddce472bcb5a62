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
#include "tests/test_shell.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
static double last_seconds;

/* Runs `[PREFIX;] dllm-rl ARGS` in a subshell in tmp (prefix: e.g. a ulimit):
 * its exit status (-1 for a signal, as the shell reports 128 + n); stdout and
 * stderr in out_s, err_s; its wall time in last_seconds. */
static int run_with(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_with(const char *prefix, const char *fmt, ...)
{
    char args[6000], p[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = tu_sh("cd %s && (%s%s OMP_NUM_THREADS=1 exec %s %s) >stdout 2>stderr", tmp,
                   prefix ? prefix : "", prefix ? ";" : "", bin(), args);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    last_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(out_s);
    free(err_s);
    snprintf(p, sizeof p, "%s/stdout", tmp);
    out_s = slurp(p);
    snprintf(p, sizeof p, "%s/stderr", tmp);
    err_s = slurp(p);
    return st > 128 ? -1 : st;
}

#define run(...) run_with(NULL, __VA_ARGS__)

static void write_file(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static bool exists(const char *rel)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tmp, rel);
    return stat(p, &st) == 0;
}

/* The checksums of every file in tmp outside dir (and the command's own stdout
 * and stderr) into tmp/NAME: what a command must not change. */
static void snapshot(const char *dir, const char *name)
{
    ck_assert_int_eq(tu_sh("cd %s && find . -type f ! -path './%s/*' ! -name stdout ! -name "
                           "stderr ! -name 'outside.*' | sort | xargs md5sum > outside.%s",
                           tmp, dir, name),
                     0);
}

static void assert_outside_unchanged(const char *dir)
{
    snapshot(dir, "after");
    ck_assert_msg(tu_sh("cmp -s %s/outside.before %s/outside.after", tmp, tmp) == 0,
                  "files outside %s changed", dir);
}

/* a tiny sudoku GRPO run on model/ */
static void write_rl_config(const char *name, const char *experiment)
{
    char text[2048];
    snprintf(text, sizeof text,
             "experiment: %s\nseed: 7\nmodel: {path: model}\n"
             "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
             "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "likelihood: {mc_samples: 2}\n"
             "grpo: {steps: 4, prompts_per_step: 2, inner_steps: 1}\n"
             "eval: {every: 0, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "log: {dir: runs}\ncheckpoint: {every: 1}\n",
             experiment);
    write_file(name, text);
}

/* Overwrites n bytes of rel at offset off with a pattern (a disk error, a bad copy). */
static void scribble(const char *rel, long off)
{
    ck_assert_int_eq(tu_sh("printf 'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX' | dd of=%s/%s bs=1 seek=%ld "
                           "conv=notrunc 2>/dev/null",
                           tmp, rel, off),
                     0);
}

START_TEST(test_damaged_log_refused_quickly)
{
    write_rl_config("d.yaml", "dmg");
    ck_assert_int_eq(run("train d.yaml --quiet"), 0);
    ck_assert_int_eq(tu_sh("cp %s/runs/dmg/log.h5 %s/good.h5", tmp, tmp), 0);
    /* metadata of the root group, of /steps and of its datasets; the HDF5 reader's
     * default retried a bad checksum 100 times with doubling sleeps: forever */
    const long offsets[] = {200, 1000, 8000, 20000};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        ck_assert_int_eq(tu_sh("cp %s/good.h5 %s/runs/dmg/log.h5", tmp, tmp), 0);
        scribble("runs/dmg/log.h5", offsets[i]);
        ck_assert_int_eq(tu_sh("cp %s/runs/dmg/log.h5 %s/bad.h5", tmp, tmp), 0);
        snapshot("runs/dmg", "before");
        ck_assert_msg(run("inspect runs/dmg") == 2, "offset %ld: inspect: %s", offsets[i], err_s);
        ck_assert_msg(last_seconds < 20, "offset %ld: inspect took %.1f s", offsets[i],
                      last_seconds);
        ck_assert_msg(strstr(err_s, "runs/dmg/log.h5: the log is damaged") &&
                          strstr(err_s, "restore it from a copy"),
                      "offset %ld: %s", offsets[i], err_s);
        ck_assert_msg(!strstr(err_s, "HDF5-DIAG") && !strstr(err_s, "infinite loop"), "%s",
                      err_s);
        ck_assert_msg(run("train --resume runs/dmg --quiet --set grpo.steps=6") == 2,
                      "offset %ld: resume: %s", offsets[i], err_s);
        ck_assert_msg(last_seconds < 30, "offset %ld: resume took %.1f s", offsets[i],
                      last_seconds);
        ck_assert_msg(strstr(err_s, "the log is damaged") && strstr(err_s, "--force"),
                      "offset %ld: %s", offsets[i], err_s);
        ck_assert_int_eq(tu_sh("cmp -s %s/runs/dmg/log.h5 %s/bad.h5", tmp, tmp), 0);
        ck_assert(!exists("runs/dmg/log.h5.tmp"));
        assert_outside_unchanged("runs/dmg");
    }
    /* truncated (a bad copy): refused at once, naming the sizes */
    ck_assert_int_eq(tu_sh("head -c 100000 %s/good.h5 > %s/runs/dmg/log.h5", tmp, tmp), 0);
    ck_assert_int_eq(run("inspect runs/dmg"), 2);
    ck_assert_msg(strstr(err_s, "shorter than it records (100000 of "), "%s", err_s);
    ck_assert_int_eq(run("train --resume runs/dmg --quiet --set grpo.steps=6"), 2);
    ck_assert_msg(strstr(err_s, "cannot resume at step 4"), "%s", err_s);
    ck_assert(!exists("runs/dmg/log.h5.tmp"));
    /* the intact log still resumes */
    ck_assert_int_eq(tu_sh("cp %s/good.h5 %s/runs/dmg/log.h5", tmp, tmp), 0);
    ck_assert_int_eq(run("train --resume runs/dmg --quiet --set grpo.steps=5"), 0);
}
END_TEST

/* LoRA keeps the checkpoints small (the log is then the file that grows past
 * the limit); 128 completions a step fill the log's first chunks in a few steps. */
static const char *const big_steps =
    "--set grpo.prompts_per_step=16 --set rollout.group_size=8 --set model.lora.rank=2 "
    "--set checkpoint.every=2 --set grpo.steps=10";

START_TEST(test_file_size_limit)
{
    write_rl_config("f.yaml", "full");
    /* the log's size once every dataset has its first chunk (step 1); it grows
     * again when the first of them fills, a few steps and checkpoints later */
    ck_assert_int_eq(run("train f.yaml --quiet %s --set grpo.steps=1 --set experiment=probe",
                         big_steps),
                     0);
    struct stat ls;
    char p[256], limit[64];
    snprintf(p, sizeof p, "%s/runs/probe/log.h5", tmp);
    ck_assert_int_eq(stat(p, &ls), 0);
    /* /bin/sh's ulimit -f counts 512-byte blocks */
    snprintf(limit, sizeof limit, "ulimit -f %lld", (long long)ls.st_size / 512 + 16);
    snapshot("runs/full", "before");
    int st = run_with(limit, "train f.yaml --quiet %s", big_steps);
    ck_assert_msg(st == 1, "exit %d (a signal is -1): %s", st, err_s);
    ck_assert_msg(strstr(err_s, "runs/full/log.h5") && strstr(err_s, "File too large") &&
                      strstr(err_s, "ulimit -f"),
                  "%s", err_s);
    ck_assert_msg(strstr(err_s, "the last complete checkpoint is kept (runs/full/ckpt/step-") &&
                      strstr(err_s, "`dllm-rl train --resume runs/full`"),
                  "%s", err_s);
    ck_assert_msg(!strstr(err_s, "HDF5") && !strstr(err_s, "infinite loop"), "%s", err_s);
    int lines = 0;
    for (const char *c = err_s; *c; c++)
        lines += *c == '\n';
    ck_assert_msg(lines <= 4, "%d lines: %s", lines, err_s);
    ck_assert(exists("runs/full/ckpt/latest/state.json"));
    ck_assert_int_eq(tu_sh("ls -a %s/runs/full/ckpt | grep -q tmp", tmp), 1);
    assert_outside_unchanged("runs/full");
    /* space returns: the run continues, and equals a run never stopped */
    ck_assert_msg(run("train --resume runs/full --quiet") == 0, "%s", err_s);
    ck_assert_int_eq(run("train f.yaml --quiet --set experiment=whole %s", big_steps), 0);
    ck_assert_int_eq(run("inspect runs/full --csv"), 0);
    char *resumed = strdup(out_s);
    ck_assert_int_eq(run("inspect runs/whole --csv"), 0);
    /* the t_* timings differ: compare the rows up to the first timing column */
    char *a = resumed, *b = out_s;
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
                           tmp, bin()),
                     0);
    write_file("s.yaml", "experiment: sfull\nseed: 1\nmodel: {path: model}\n"
                         "data: {train: sft.jsonl, max_len: 64, answer_length: 34}\n"
                         "sft: {steps: 4, batch_size: 4}\nlog: {dir: runs, every: 1}\n"
                         "checkpoint: {every: 2}\n");
    snapshot("runs/sfull", "before");
    st = run_with("ulimit -f 1500", "sft s.yaml --quiet"); /* 750 KB: the weights fit */
    ck_assert_msg(st == 1, "exit %d: %s", st, err_s);
    ck_assert_msg(strstr(err_s, "File too large"), "%s", err_s);
    ck_assert_int_eq(tu_sh("ls -a %s/runs/sfull/ckpt | grep -q step", tmp), 1);
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
                 tmp, rel, tensor, value);
}

START_TEST(test_non_finite_weights)
{
    if (tu_sh("python3 -c 1 2>/dev/null") != 0) {
        fprintf(stderr, "test_non_finite_weights: SKIP: python3 not found\n");
        return;
    }
    ck_assert_int_eq(tu_sh("rm -rf %s/nanmodel && cp -r %s/model %s/nanmodel", tmp, tmp, tmp), 0);
    const char *t = "model.transformer.blocks.0.ff_out.weight";
    ck_assert_int_eq(poke("nanmodel/model.safetensors", t, "nan"), 0);
    write_rl_config("n.yaml", "nan");
    snapshot("runs/nan", "before");
    ck_assert_int_eq(run("generate --model nanmodel --prompt 12"), 2);
    ck_assert_msg(strstr(err_s, "nanmodel: tensor 'model.transformer.blocks.0.ff_out.weight' "
                                "holds a non-finite value (nan at element 2)"),
                  "%s", err_s);
    ck_assert_str_eq(out_s, "");
    ck_assert_int_eq(run("score --model nanmodel --prompt-ids 1,2 --completion-ids 3,4"), 2);
    ck_assert_msg(strstr(err_s, "ff_out.weight' holds a non-finite value"), "%s", err_s);
    ck_assert_msg(!strstr(out_s, "null"), "%s", out_s);
    ck_assert_int_eq(run("train n.yaml --quiet --set model.path=nanmodel"), 2);
    ck_assert_msg(strstr(err_s, "ff_out.weight' holds a non-finite value"), "%s", err_s);
    ck_assert(!exists("runs/nan/log.h5"));
    assert_outside_unchanged("runs/nan");

    /* an update that would make the weights non-finite: a negative second moment
     * in the optimizer state (finite, so it loads) turns AdamW's step into NaN */
    write_rl_config("v.yaml", "div");
    ck_assert_int_eq(run("train v.yaml --quiet --set grpo.steps=2"), 0);
    ck_assert_int_eq(poke("runs/div/ckpt/step-2/optimizer.safetensors", "adam_v", "-1"), 0);
    snapshot("runs/div", "before");
    ck_assert_int_eq(run("train --resume runs/div --quiet --set grpo.steps=4"), 1);
    ck_assert_msg(strstr(err_s, "step 3: the update made a weight non-finite") &&
                      strstr(err_s, "the last complete checkpoint is kept (runs/div/ckpt/step-2)"),
                  "%s", err_s);
    ck_assert(!exists("runs/div/ckpt/step-3"));
    ck_assert_int_eq(tu_sh("readlink %s/runs/div/ckpt/latest | grep -qx step-2", tmp), 0);
    assert_outside_unchanged("runs/div");
    /* and a trainable vector with a NaN in a checkpoint is refused at resume */
    ck_assert_int_eq(poke("runs/div/ckpt/step-2/optimizer.safetensors", "trainable", "inf"), 0);
    ck_assert_int_eq(run("train --resume runs/div --quiet --set grpo.steps=4"), 2);
    ck_assert_msg(strstr(err_s, "optimizer.safetensors: tensor 'trainable' holds a non-finite "
                                "value (inf at element 2)"),
                  "%s", err_s);
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
    write_file("long.jsonl", text);
    free(q);
    free(text);
    write_file("g.yaml", "experiment: long\nmodel: {path: model}\n"
                         "task: {name: gsm8k, format: plain, chat: plain, train: {path: long.jsonl}, "
                         "eval: {path: long.jsonl}}\n"
                         "rollout: {group_size: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                         "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1}\n"
                         "eval: {every: 0, n: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                         "log: {dir: runs}\n");
    snapshot("runs/long", "before");
    ck_assert_int_eq(run("train g.yaml --quiet"), 2);
    ck_assert_msg(last_seconds < 20, "%.1f s", last_seconds);
    ck_assert_msg(strstr(err_s, "long.jsonl: training item 3 (\"what is 1+1? what is 1+1?") &&
                      strstr(err_s, "its prompt of 3901 tokens (task.format plain) + "
                                    "rollout.gen_length 12 exceed the model's "
                                    "max_sequence_length 512"),
                  "%s", err_s);
    ck_assert(!exists("runs/long/log.h5"));
    assert_outside_unchanged("runs/long");
}
END_TEST

START_TEST(test_eval_uses_the_models_task_settings)
{
    write_rl_config("e.yaml", "ev");
    ck_assert_int_eq(run("train e.yaml --quiet --set grpo.steps=1"), 0);
    char *gen = NULL;
    char p[256];
    snprintf(p, sizeof p, "%s/runs/ev/ckpt/latest/generation.json", tmp);
    gen = slurp(p);
    ck_assert_ptr_nonnull(gen);
    ck_assert_msg(strstr(gen, "\"format\": \"plain\"") && strstr(gen, "\"max_blanks\": 6"), "%s",
                  gen);
    free(gen);
    ck_assert_int_eq(run("eval --model runs/ev/ckpt/latest --task sudoku --n 4"), 0);
    ck_assert_msg(strstr(out_s, "task sudoku: format plain, chat plain, max_blanks 6, "
                                "n_numbers 3, reward task (the model's generation.json"),
                  "%s", out_s);
    ck_assert_int_eq(run("eval --model runs/ev/ckpt/latest --task sudoku --n 4 --json"), 0);
    ck_assert_msg(strstr(out_s, "\"task_format\": \"plain\", \"max_blanks\": 6, "
                                "\"task_settings\": \"model\""),
                  "%s", out_s);
    /* --set still overrides, and says so */
    ck_assert_int_eq(run("eval --model runs/ev/ckpt/latest --task sudoku --n 4 "
                         "--set task.max_blanks=3"),
                     0);
    ck_assert_msg(strstr(out_s, "max_blanks 3") && strstr(out_s, "; then --set"), "%s", out_s);
    /* a model that records nothing: the defaults, said so (d1 prompts do not fit
     * this model's context at the default length: refused, naming the format) */
    ck_assert_int_eq(run("eval --model model --task sudoku --n 4 --set task.format=plain"), 0);
    ck_assert_msg(strstr(out_s, "format plain") &&
                      strstr(out_s, "the task's defaults: the model records none"),
                  "%s", out_s);
    ck_assert_int_eq(run("eval --model model --task sudoku --n 4"), 2);
    ck_assert_msg(strstr(err_s, "(task.format d1) + eval.gen_length 64 exceed the model's "
                                "max_sequence_length 512"),
                  "%s", err_s);
    /* sft records the task its config names */
    ck_assert_int_eq(tu_sh("cd %s && %s tasks sft-data sudoku --n 20 --seed 3 --max-blanks 5 "
                           "> sft5.jsonl",
                           tmp, bin()),
                     0);
    write_file("s5.yaml", "experiment: s5\nseed: 1\nmodel: {path: model}\n"
                          "data: {train: sft5.jsonl, max_len: 64, answer_length: 34}\n"
                          "task: {name: sudoku, format: plain, max_blanks: 5}\n"
                          "sft: {steps: 2, batch_size: 4}\nlog: {dir: runs}\n");
    ck_assert_int_eq(run("sft s5.yaml --quiet"), 0);
    ck_assert_int_eq(run("eval --model runs/s5/ckpt/latest --task sudoku --n 4"), 0);
    ck_assert_msg(strstr(out_s, "task sudoku: format plain, chat plain, max_blanks 5") &&
                      strstr(out_s, "the model's generation.json"),
                  "%s", out_s);
}
END_TEST

START_TEST(test_small_refusals)
{
    write_rl_config("c.yaml", "cap");
    snapshot("runs/cap", "before");
    ck_assert_int_eq(run("train c.yaml --set correction.cap=inf"), 2);
    ck_assert_msg(strstr(err_s, "correction.cap must be a number, got 'inf' (YAML writes "
                                "infinity as .inf)"),
                  "%s", err_s);
    ck_assert_int_eq(run("train c.yaml --set correction.cap=.inf --print-config"), 0);
    ck_assert_msg(strstr(out_s, "cap: .inf"), "%s", out_s);
    ck_assert(!exists("runs/cap"));
    assert_outside_unchanged("runs/cap");
    /* non-ASCII text under the char tokenizer: refused in data files, naming the
     * file and line (sft) or item (train); warned about by generate */
    write_file("uni.jsonl", "{\"prompt\": \"0420020403002140\", \"answer\": \"ok\"}\n"
                            "{\"prompt\": \"caf\xc3\xa9 1234\", \"answer\": \"x\"}\n");
    write_file("u.yaml", "experiment: uni\nseed: 1\nmodel: {path: model}\n"
                         "data: {train: uni.jsonl, max_len: 64}\nsft: {steps: 2, batch_size: 2}\n"
                         "log: {dir: runs}\n");
    ck_assert_int_eq(run("sft u.yaml --quiet"), 2);
    ck_assert_msg(strstr(err_s, "uni.jsonl:2: prompt: 1 character(s) the tokenizer cannot "
                                "represent (non-ASCII under the char tokenizer)"),
                  "%s", err_s);
    write_file("unq.jsonl", "{\"question\": \"a?\", \"answer\": \"2\"}\n"
                            "{\"question\": \"caf\xc3\xa9?\", \"answer\": \"2\"}\n");
    write_file("uq.yaml", "experiment: unq\nmodel: {path: model}\n"
                          "task: {name: gsm8k, format: plain, chat: plain, "
                          "train: {path: unq.jsonl}, eval: {path: unq.jsonl}}\n"
                          "rollout: {group_size: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                          "grpo: {steps: 1, prompts_per_step: 2, inner_steps: 1}\n"
                          "eval: {every: 0, n: 2, gen_length: 12, block_length: 6, steps: 6}\n"
                          "log: {dir: runs}\n");
    ck_assert_int_eq(run("train uq.yaml --quiet"), 2);
    ck_assert_msg(strstr(err_s, "unq.jsonl: item 2 (\"caf\xc3\xa9?\"): 1 character(s)"), "%s",
                  err_s);
    ck_assert(!exists("runs/unq/log.h5"));
    ck_assert_int_eq(run("generate --model model --prompt caf\xc3\xa9 --gen-length 4 "
                         "--block-length 4 --steps 2"),
                     0);
    ck_assert_msg(strstr(err_s, "warning: the prompt has characters the tokenizer cannot "
                                "represent"),
                  "%s", err_s);
    ck_assert_int_eq(run("generate --model model --prompt cafe --gen-length 4 "
                         "--block-length 4 --steps 2"),
                     0);
    ck_assert_msg(!strstr(err_s, "warning"), "%s", err_s);
    /* the device key says what the code does (and what the README says) */
    ck_assert_int_eq(run("config device"), 0);
    ck_assert_msg(strstr(out_s, "with LoRA (fp32 or bf16 trainer) or full fine-tuning (fp32 "
                                "trainer), else on the host; several ranks: one device each, "
                                "gradients summed with NCCL"),
                  "%s", out_s);
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

int main(void)
{
    const char *b = getenv("DLLM_BIN");
    if (!b || access(b, X_OK) != 0) {
        fprintf(stderr, "test_cli_integrity: SKIP: DLLM_BIN (the dllm-rl binary) not set or not "
                        "executable\n");
        return 77;
    }
    strcpy(tmp, "/tmp/dllm-cli-integrity-XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    if (tu_sh("%s init-model --arch llada --preset tiny --seed 3 --out %s/model >/dev/null", b, tmp)) {
        fprintf(stderr, "test_cli_integrity: init-model failed\n");
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
