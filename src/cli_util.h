/* cli_util.h: small helpers shared by the subcommands. */
#ifndef DLLM_CLI_UTIL_H
#define DLLM_CLI_UTIL_H

#include "kernels/base.h"

#include <stdio.h>

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
/* Copies a whole file (written to its final name; callers write into temporary
 * directories they rename). */
int cli_copy_file(const char *from, const char *to, dllm_err *err);
/* JSON number for a float/double; "null" for non-finite values (JSON has no NaN). */
void cli_print_json_number(FILE *f, double v, int digits);

#endif
