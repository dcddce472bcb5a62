/* base.h: what every module shares: errors for people, exit codes, timing.
 *
 * Error convention: a function that can fail on input returns 0 on success or a
 * nonzero DLLM_EXIT_* code, and fills a dllm_err with a message that names the
 * file (and tensor, key, line...) at fault. The CLI prints the message and exits
 * with that code: 2 for bad input (config, files, flags), 1 for internal failure. */
#ifndef DLLM_BASE_H
#define DLLM_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum { DLLM_OK = 0, DLLM_EXIT_INTERNAL = 1, DLLM_EXIT_INPUT = 2 };

typedef struct {
    int code;        /* DLLM_OK, DLLM_EXIT_INPUT or DLLM_EXIT_INTERNAL */
    char msg[1024];  /* "file: tensor 'x': expected shape [4, 8], found [4, 7]" */
} dllm_err;

/* Sets err (if not NULL) and returns code. printf-style message. */
int dllm_err_set(dllm_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message: "context: old message". Returns err->code. */
int dllm_err_prefix(dllm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Allocation that never returns NULL: aborts with a message on failure
 * (running out of memory is an internal failure, not bad input). */
void *dllm_malloc(size_t n);
void *dllm_calloc(size_t n, size_t size);
void *dllm_realloc(void *p, size_t n);
char *dllm_strdup(const char *s);

/* Monotonic wall clock in seconds. */
double dllm_now(void);

/* Reads a whole file into a NUL-terminated buffer. */
int dllm_read_file(const char *path, char **out, size_t *len, dllm_err *err);

#endif
