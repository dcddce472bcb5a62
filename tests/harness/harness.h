/* harness.h: what every Check suite shares.
 *
 * The runner: one main (runner.c) for every suite binary. A suite file defines
 * tu_suite(), which prepares what its cases need and returns the Suite to run, or NULL
 * with the exit status in ctx->status (tu_skip: 77, the Automake SKIP; tu_abort: 1).
 *
 * The binary: the CLI tier drives dllm-rl (DLLM_BIN) the way a user does, in a scratch
 * directory of the suite (tu_scratch), and reads back what it printed and wrote. */
#ifndef DLLM_TEST_HARNESS_H
#define DLLM_TEST_HARNESS_H

#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- the runner (runner.c) ---------------------------------------------------------- */

typedef struct tu_ctx {
    int argc;
    char **argv;
    /* Runs the cases in this process: a CUDA context and an MPI rank do not survive a
     * fork, and cases that share state built by earlier ones need one process. */
    bool nofork;
    /* After the cases, with the exit status so far (0 passed, 1 failed); returns the
     * final one, e.g. 77 when the cases that could run passed but some could not run. */
    int (*finish)(int status);
    int status;        /* the exit status when tu_suite returns NULL */
    char partial[512]; /* set by tu_partial */
} tu_ctx;

/* Defined by each suite file. */
Suite *tu_suite(tu_ctx *ctx);

/* "NAME: SKIP: why" on stdout; status 77; NULL. */
Suite *tu_skip(tu_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "NAME: why" on stderr (a fixture could not be made); status 1; NULL. */
Suite *tu_abort(tu_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Some cases cannot run here (printf-formatted why): when the others pass, the run ends
 * as SKIP (77) with that reason instead of as a pass. */
void tu_partial(tu_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The suite binary's name (test_foo). */
const char *tu_name(void);

/* Between the runner and the rest of the harness: the binary's name as main saw it, and
 * the removal of what tu_scratch made (after the cases). */
extern const char *tu_runner_name;
void tu_cleanup(void);

/* ---- files and shell commands (shell.c) --------------------------------------------- */

/* Runs the printf-formatted command with /bin/sh; its exit status, or -1 when it did
 * not exit normally (a signal). */
int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The whole file at the printf-formatted path, NUL-terminated (malloc'd), or NULL when
 * it cannot be read. tu_slurp_n also gives its length. */
char *tu_slurp(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *tu_slurp_n(size_t *len, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts the shell command cmd (it should redirect its output to file), polls file
 * every 50 ms for up to tries polls until it contains needle, then kills the
 * command. Returns whether needle was seen; *still_running says whether the
 * command had not ended when it was seen (or when polling gave up). */
bool tu_text_appears_while_running(const char *cmd, const char *file, const char *needle,
                                   int tries, bool *still_running);

/* ---- the binary (cli.c) ------------------------------------------------------------- */

/* The CLI tier's start: SKIP unless DLLM_BIN is an executable and DLLM_TEST_DATA is set,
 * then tu_scratch; false with ctx->status set when the suite cannot run. */
bool tu_cli_setup(tu_ctx *ctx);

/* The suite's scratch directory, made by tu_scratch and removed after the cases. */
extern char tu_dir[256];

/* Makes tu_dir (/tmp/dllm-NAME-XXXXXX) and the place where the output of tu_dllm goes;
 * false (with tu_abort's message and status) when it cannot. */
bool tu_scratch(tu_ctx *ctx);

/* DLLM_BIN (NULL when unset); tu_have_bin: whether it names an executable. */
const char *tu_bin(void);
bool tu_have_bin(void);

/* The last tu_dllm's stdout and stderr (never NULL after a run) and wall time. */
extern char *tu_out, *tu_err;
extern double tu_seconds;

/* Runs `dllm-rl ARGS` in tu_dir with OMP_NUM_THREADS=1: its exit status (-1 for a
 * signal); stdout and stderr into tu_out and tu_err. */
int tu_dllm(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same after the shell command prefix (e.g. a ulimit), run in the same subshell. */
int tu_dllm_with(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, with stdout and stderr handed over as malloc'd copies (either may be NULL). */
int tu_dllm_take(char **out, char **errs, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Starts `dllm-rl ARGS` in tu_dir with stdout into tu_dir/NAME.out and stderr into
 * NAME.err and waits (tu_text_appears_while_running, tries polls of 50 ms) for needle in
 * NAME.out: whether it was seen; *still_running: whether the command was still going then. */
bool tu_dllm_shows(const char *name, const char *needle, int tries, bool *still_running,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Writes text to tu_dir/rel. */
void tu_write(const char *rel, const char *text);
/* Whether tu_dir/rel exists (a link counts, wherever it points). */
bool tu_exists(const char *rel);

/* The tiny-model fixture: `init-model --arch ARCH --preset tiny --seed 3 --out OUT` (OUT
 * relative to tu_dir, or absolute); whether it succeeded. */
bool tu_tiny_model(const char *arch, const char *out);

/* A tiny Sudoku GRPO run of `steps` steps on tu_dir/model, logging to runs/EXPERIMENT,
 * with a checkpoint every ckpt_every steps (0: none), written to tu_dir/name. */
void tu_write_rl_config(const char *name, const char *experiment, int steps, int ckpt_every);

/* A model that earns reward on Sudoku, for cases that compare training steps (a random
 * model's rewards, and so its advantages and gradients, are all 0): dir/sft.jsonl, 200
 * solver-made pairs (tu_sudoku_sft_data), then `steps` steps of masked-diffusion SFT of a
 * tiny LLaDA on them as run dir/runs/EXPERIMENT (config dir/EXPERIMENT.yaml, checkpoint at
 * the end). Whether each succeeded. */
bool tu_sudoku_sft_data(const char *dir);
bool tu_sudoku_sft_model(const char *dir, const char *experiment, int steps);

#endif
