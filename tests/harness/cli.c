/* cli.c: driving the dllm-rl binary from a suite (harness.h). */
#include "tests/harness/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char tu_dir[256];
char *tu_out, *tu_err;
double tu_seconds;

/* Where stdout and stderr of tu_dllm go: beside tu_dir, not in it, so that what a
 * suite finds in tu_dir is only what the binary wrote there. */
static char cap_dir[256];

void tu_cleanup(void)
{
    if (tu_dir[0])
        tu_sh("rm -rf '%s'", tu_dir);
    if (cap_dir[0])
        tu_sh("rm -rf '%s'", cap_dir);
    tu_dir[0] = cap_dir[0] = '\0';
    free(tu_out);
    free(tu_err);
    tu_out = tu_err = NULL;
}

bool tu_scratch(tu_ctx *ctx)
{
    snprintf(tu_dir, sizeof tu_dir, "/tmp/dllm-%s-XXXXXX", tu_name());
    snprintf(cap_dir, sizeof cap_dir, "/tmp/dllm-%s-out-XXXXXX", tu_name());
    if (!mkdtemp(tu_dir) || !mkdtemp(cap_dir)) {
        tu_abort(ctx, "cannot make a scratch directory under /tmp");
        return false;
    }
    return true;
}

bool tu_cli_setup(tu_ctx *ctx)
{
    if (!tu_have_bin()) {
        tu_skip(ctx, "DLLM_BIN (the dllm-rl binary) not set or not executable");
        return false;
    }
    if (!getenv("DLLM_TEST_DATA")) {
        tu_skip(ctx, "DLLM_TEST_DATA not set");
        return false;
    }
    return tu_scratch(ctx);
}

const char *tu_bin(void) { return getenv("DLLM_BIN"); }

bool tu_have_bin(void)
{
    const char *b = getenv("DLLM_BIN");
    return b && access(b, X_OK) == 0;
}

static int dllm_v(const char *prefix, const char *fmt, va_list ap)
{
    char args[8192];
    vsnprintf(args, sizeof args, fmt, ap);
    ck_assert_msg(tu_dir[0] && cap_dir[0] && tu_bin(), "DLLM_BIN is not set, or tu_dllm ran before tu_scratch");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = tu_sh("cd '%s' && (%s%s OMP_NUM_THREADS=1 exec %s %s) >'%s/stdout' 2>'%s/stderr'",
                   tu_dir, prefix ? prefix : "", prefix ? ";" : "", tu_bin(), args, cap_dir,
                   cap_dir);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    tu_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(tu_out);
    free(tu_err);
    tu_out = tu_slurp("%s/stdout", cap_dir);
    tu_err = tu_slurp("%s/stderr", cap_dir);
    ck_assert_msg(tu_out && tu_err, "the output of `dllm-rl %s` could not be read", args);
    return st > 128 ? -1 : st; /* the shell reports a signal as 128 + n */
}

int tu_dllm(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = dllm_v(NULL, fmt, ap);
    va_end(ap);
    return st;
}

int tu_dllm_with(const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = dllm_v(prefix, fmt, ap);
    va_end(ap);
    return st;
}

int tu_dllm_take(char **out, char **errs, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int st = dllm_v(NULL, fmt, ap);
    va_end(ap);
    if (out)
        *out = strdup(tu_out);
    if (errs)
        *errs = strdup(tu_err);
    return st;
}

bool tu_dllm_shows(const char *name, const char *needle, int tries, bool *still_running,
                   const char *fmt, ...)
{
    char args[8192], cmd[16384], out[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && OMP_NUM_THREADS=1 exec %s %s >%s.out 2>%s.err", tu_dir,
             tu_bin(), args, name, name);
    snprintf(out, sizeof out, "%s/%s.out", tu_dir, name);
    return tu_text_appears_while_running(cmd, out, needle, tries, still_running);
}

void tu_write(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

void tu_write_rl_config(const char *name, const char *experiment, int steps, int ckpt_every)
{
    char text[2048];
    snprintf(text, sizeof text,
             "experiment: %s\nseed: 7\nmodel: {path: model}\n"
             "task: {name: sudoku, format: plain, chat: plain, train: {n: 64}, max_blanks: 6}\n"
             "rollout: {precision: fp8, group_size: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "likelihood: {mc_samples: 2}\n"
             "grpo: {steps: %d, prompts_per_step: 2, inner_steps: 1}\n"
             "eval: {every: 0, n: 4, gen_length: 12, block_length: 6, steps: 6}\n"
             "log: {dir: runs}\ncheckpoint: {every: %d}\n",
             experiment, steps, ckpt_every);
    tu_write(name, text);
}

bool tu_exists(const char *rel)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tu_dir, rel);
    return lstat(p, &st) == 0;
}

bool tu_sudoku_sft_data(const char *dir)
{
    return tu_sh("%s tasks sft-data sudoku --n 200 --seed 101 --max-blanks 4 > %s/sft.jsonl",
                 tu_bin(), dir) == 0;
}

bool tu_sudoku_sft_model(const char *dir, const char *experiment, int steps)
{
    return tu_sh("printf 'experiment: %s\\nseed: 1\\nmodel: {preset: tiny}\\n"
                 "data: {train: %s/sft.jsonl, max_len: 64, answer_length: 34}\\n"
                 "sft: {steps: %d, batch_size: 16}\\noptim: {lr: 1e-2, warmup: 10}\\n"
                 "log: {dir: %s/runs}\\ncheckpoint: {every: %d}\\n' > %s/%s.yaml && "
                 "%s sft %s/%s.yaml --quiet 2>/dev/null",
                 experiment, dir, steps, dir, steps, dir, experiment, tu_bin(), dir,
                 experiment) == 0;
}

bool tu_tiny_model(const char *arch, const char *out)
{
    return tu_sh("cd '%s' && %s init-model --arch %s --preset tiny --seed 3 --out %s >/dev/null",
                 tu_dir, tu_bin(), arch, out) == 0;
}
