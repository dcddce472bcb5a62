/* task_util.c: see task_util.h. */
#include "tasks/task_util.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dllm_json_get_string(const void *obj, const char *key, int required, const char **out, dllm_err *err)
{
    json_t *v = json_object_get((const json_t *)obj, key);
    *out = NULL;
    if (!v) {
        if (required)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "missing key '%s'", key);
        return 0;
    }
    if (!json_is_string(v))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected a string", key);
    *out = json_string_value(v);
    return 0;
}

int dllm_json_get_answer(const void *obj, const char *key, char **out, dllm_err *err)
{
    json_t *v = json_object_get((const json_t *)obj, key);
    *out = NULL;
    if (!v)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "missing key '%s'", key);
    if (json_is_string(v))
        *out = dllm_strdup(json_string_value(v));
    else if (json_is_integer(v))
        *out = dllm_strfmt("%" PRId64, (int64_t)json_integer_value(v));
    else if (json_is_real(v))
        *out = dllm_strfmt("%.17g", json_real_value(v));
    else
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected a string or a number", key);
    return 0;
}

int dllm_json_get_int(const void *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, dllm_err *err)
{
    json_t *v = json_object_get((const json_t *)obj, key);
    int64_t x;
    if (!v)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "missing key '%s'", key);
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (!*s || strlen(s) > 18)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected an integer", key);
        x = strtoll(s, &end, 10);
        if (*end)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected an integer, found '%.40s'", key, s);
    } else {
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': expected an integer", key);
    }
    if (x < lo || x > hi)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "key '%s': %" PRId64 " is outside [%" PRId64 ", %" PRId64 "]",
                            key, x, lo, hi);
    *out = x;
    return 0;
}

char *dllm_concat3(const char *a, const char *b, const char *c)
{
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *s = dllm_malloc(na + nb + nc + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    memcpy(s + na + nb, c, nc + 1);
    return s;
}

char *dllm_strfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = dllm_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

size_t dllm_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}
