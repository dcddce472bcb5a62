/* cli_util.h: small helpers shared by the subcommands. */
#ifndef DLLM_CLI_UTIL_H
#define DLLM_CLI_UTIL_H

#include "kernels/base.h"

#include <stdbool.h>
#include <stdio.h>

/* The --precision paragraph of generate's and score's help (the same copies of the
 * weights in both). */
#define CLI_PRECISION_HELP \
    "--precision: fp32 computes as the trainer; bf16 with a bf16 copy of the weights\n" \
    "(bf16 products, fp32 sums); fp8 with an FP8 (E4M3, 128x128 blockwise W8A8) copy of\n" \
    "the block linears, multiplied as an FP8 tensor core does (exact products, fp32 sums\n" \
    "per 128-block, scales per block); fp8-exact the same copy simulated exactly\n" \
    "(dequantised, fp32 GEMM); nvfp4 with an NVFP4 (W4A4, 16-element blocks) copy of the\n" \
    "block linears, simulated (--nvfp4-scaling: one E4M3 scale per 16 or 32 elements,\n" \
    "per row or per tensor, as rollout.nvfp4.scaling); int8 with an INT8 copy of the " \
    "block linears (weights per\n" \
    "output row at +-127, activations per token at +-63), exact integer products in\n" \
    "int32 (oneDNN), scaled in fp32. The rest of a low-precision copy is bf16.\n"

/* Parses "1,2,3" into a malloc'd array. Input error on anything else. */
int cli_parse_ids(const char *s, const char *flag, int32_t **ids, int *n, dllm_err *err);
/* Parses a non-negative integer flag value within [lo, hi]. */
int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out, dllm_err *err);
int cli_parse_double(const char *s, const char *flag, double *out, dllm_err *err);
/* Prints "dllm-rl CMD: message" to stderr and returns err->code. */
int cli_fail(const char *cmd, const dllm_err *err);
/* mkdir -p. */
int cli_mkdirs(const char *path, dllm_err *err);
/* Removes a file or a directory tree (best effort; returns rmdir's/unlink's result). */
int cli_rm_tree(const char *path);
/* 1 when path exists and is not an empty directory (a file counts as content). */
int cli_dir_has_entries(const char *path);
/* The same, not counting an entry named ignored (NULL: none). */
int cli_dir_has_entries_except(const char *path, const char *ignored);
/* An input error naming path when it holds anything: work is never overwritten
 * without --force (the message also offers --resume when can_resume). */
int cli_refuse_existing(const char *path, const char *what, bool can_resume, dllm_err *err);
/* Atomic directory output: cli_stage_dir makes an empty PARENT/.NAME.tmp-PID
 * beside path (same file system) for the caller to fill; cli_commit_dir renames
 * it onto path, replacing an existing path (moved aside first, removed after),
 * so a reader sees the old directory or the complete new one, never a mix. */
int cli_stage_dir(const char *path, char *tmp, size_t cap, dllm_err *err);
int cli_commit_dir(const char *tmp, const char *path, dllm_err *err);
/* Copies a whole file (written to its final name; callers write into temporary
 * directories they rename). */
int cli_copy_file(const char *from, const char *to, dllm_err *err);
/* The loud warning of a command that builds a randomly initialised preset
 * because no model path was given (stderr). */
void cli_warn_random_model(const char *cmd, const char *arch, const char *preset);
/* One line on stderr saying which product the CPU computes a rollout precision with
 * here (dllm_rollout_cpu_product), loud where bf16 or fp8 cannot be faster than fp32;
 * nothing for the trainer's own numerics or on a device. */
void cli_note_rollout_product(const char *cmd, const char *precision, const char *device);
/* JSON number for a float/double; "null" for non-finite values (JSON has no NaN). */
void cli_print_json_number(FILE *f, double v, int digits);

#endif
