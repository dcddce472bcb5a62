/* task_util.h: small helpers shared by the task files (JSON fields, strings). */
#ifndef DLLM_TASKS_TASK_UTIL_H
#define DLLM_TASKS_TASK_UTIL_H

#include "kernels/base.h"

#include <stddef.h>
#include <stdint.h>

/* obj is a json_t object. A missing key is an error only when required (then
 * *out = NULL); a present key must be a string. */
int dllm_json_get_string(const void *obj, const char *key, int required, const char **out, dllm_err *err);
/* A required reference answer: a string, or a number written back as text. malloc'd. */
int dllm_json_get_answer(const void *obj, const char *key, char **out, dllm_err *err);
/* A required integer (JSON integer, or a string of digits). */
int dllm_json_get_int(const void *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, dllm_err *err);

char *dllm_concat3(const char *a, const char *b, const char *c);
/* printf into a new malloc'd string. */
char *dllm_strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Number of UTF-8 code points (bytes that are not continuation bytes). */
size_t dllm_utf8_len(const char *s, size_t n);

#endif
