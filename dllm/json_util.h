/* json_util.h: small jansson helpers shared by the checkpoint readers/writers.
 *
 * Loading rejects duplicate keys (a file where the same tensor or config key
 * appears twice is ambiguous, so it is bad input) and reports errors as
 * "PATH:LINE:COL: message". Writing goes to "PATH.tmp" and is renamed over
 * PATH, so a reader never sees a half-written file. */
#ifndef DLLM_JSON_UTIL_H
#define DLLM_JSON_UTIL_H

#include <jansson.h>

#include "kernels/base.h"

/* Parses the file at path (must hold an object). */
int ju_load_file(json_t **out, const char *path, dllm_err *err);
/* Dumps root with jansson flags (e.g. JSON_INDENT(2)) plus a trailing newline,
 * through PATH.tmp + rename. */
int ju_save_file(const json_t *root, const char *path, size_t flags, dllm_err *err);

/* Typed getters on an object. `what` names the place in error messages
 * ("DIR/config.json"); the messages read "WHAT: key 'KEY': ...".
 * A missing key (or null, where allowed) leaves *out untouched and returns 0
 * with *present = false, so callers set the default first; with present ==
 * NULL the key is required. */
int ju_get_int(const json_t *obj, const char *key, const char *what, long long *out,
               bool *present, dllm_err *err);
int ju_get_real(const json_t *obj, const char *key, const char *what, double *out,
                bool *present, dllm_err *err);
int ju_get_bool(const json_t *obj, const char *key, const char *what, bool *out,
                bool *present, dllm_err *err);
int ju_get_string(const json_t *obj, const char *key, const char *what, const char **out,
                  bool *present, dllm_err *err);

/* "object", "array", "string", "integer", "real", "true", "false", "null". */
const char *ju_type_name(const json_t *v);

/* The double whose shortest decimal form is the float's shortest decimal form
 * (1e-5f -> 1e-05, not 9.99999975e-06), so configs print as people wrote them. */
double ju_float_to_decimal(float f);

#endif
