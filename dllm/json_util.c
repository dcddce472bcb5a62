/* json_util.c: see json_util.h. */
#include "dllm/json_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ju_load_file(json_t **out, const char *path, dllm_err *err)
{
    char *text;
    size_t len;
    int rc = dllm_read_file(path, &text, &len, err);
    if (rc)
        return rc;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, jerr.line, jerr.column,
                            jerr.text);
    if (!json_is_object(root)) {
        const char *t = ju_type_name(root);
        json_decref(root);
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: expected a JSON object, found %s", path, t);
    }
    *out = root;
    return DLLM_OK;
}

int ju_save_file(const json_t *root, const char *path, size_t flags, dllm_err *err)
{
    char *text = json_dumps(root, flags);
    if (!text)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: cannot encode JSON", path);
    size_t plen = strlen(path);
    char *tmp = dllm_malloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = DLLM_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    size_t n = strlen(text);
    bool bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF || fflush(f) != 0 ||
               fsync(fileno(f)) != 0;
    bad = (fclose(f) != 0) || bad;
    if (bad) {
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: cannot rename to %s: %s", tmp, path,
                          strerror(errno));
        unlink(tmp);
    }
done:
    free(tmp);
    free(text);
    return rc;
}

const char *ju_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Shared front of the getters: NULL (and *present = false) when the key is
 * absent or null and optional; an error when it is required. */
static int lookup(const json_t *obj, const char *key, const char *what, bool *present,
                  const json_t **v, dllm_err *err)
{
    *v = json_object_get(obj, key);
    if (*v && json_is_null(*v))
        *v = NULL;
    if (present)
        *present = *v != NULL;
    if (!*v && !present)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': missing", what, key);
    return DLLM_OK;
}

static int wrong_type(const json_t *v, const char *key, const char *what, const char *want,
                      dllm_err *err)
{
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': expected %s, found %s", what, key,
                        want, ju_type_name(v));
}

int ju_get_int(const json_t *obj, const char *key, const char *what, long long *out,
               bool *present, dllm_err *err)
{
    const json_t *v;
    int rc = lookup(obj, key, what, present, &v, err);
    if (rc || !v)
        return rc;
    if (!json_is_integer(v))
        return wrong_type(v, key, what, "an integer", err);
    *out = json_integer_value(v);
    return DLLM_OK;
}

int ju_get_real(const json_t *obj, const char *key, const char *what, double *out,
                bool *present, dllm_err *err)
{
    const json_t *v;
    int rc = lookup(obj, key, what, present, &v, err);
    if (rc || !v)
        return rc;
    if (!json_is_number(v))
        return wrong_type(v, key, what, "a number", err);
    *out = json_number_value(v);
    return DLLM_OK;
}

int ju_get_bool(const json_t *obj, const char *key, const char *what, bool *out,
                bool *present, dllm_err *err)
{
    const json_t *v;
    int rc = lookup(obj, key, what, present, &v, err);
    if (rc || !v)
        return rc;
    if (!json_is_boolean(v))
        return wrong_type(v, key, what, "true or false", err);
    *out = json_is_true(v);
    return DLLM_OK;
}

int ju_get_string(const json_t *obj, const char *key, const char *what, const char **out,
                  bool *present, dllm_err *err)
{
    const json_t *v;
    int rc = lookup(obj, key, what, present, &v, err);
    if (rc || !v)
        return rc;
    if (!json_is_string(v))
        return wrong_type(v, key, what, "a string", err);
    *out = json_string_value(v);
    return DLLM_OK;
}

double ju_float_to_decimal(float f)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f; /* NaN/inf: not reached for finite floats */
}
