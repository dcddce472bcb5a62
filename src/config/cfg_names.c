/* cfg_names.c: lookups in a names table; see cfg_names.h. */
#include "src/config/cfg_names.h"

#include <stdio.h>
#include <string.h>

const cfg_names *cfg_names_of(const cfg_names *t) { return t->live ? t->live() : t; }

const char *cfg_names_name(const cfg_names *t, int value)
{
    t = cfg_names_of(t);
    for (int i = 0; i < t->n; i++)
        if (t->v[i].value == value)
            return t->v[i].name;
    return "?";
}

bool cfg_names_find(const cfg_names *t, const char *s, int *value)
{
    t = cfg_names_of(t);
    for (int i = 0; s && i < t->n; i++)
        if (!strcmp(t->v[i].name, s)) {
            *value = t->v[i].value;
            return true;
        }
    return false;
}

char *cfg_names_choices(const cfg_names *t, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    t = cfg_names_of(t);
    for (int i = 0; i < t->n && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? "|" : "", t->v[i].name);
    return out;
}

int cfg_names_parse(const cfg_names *t, const char *s, int *value, dllm_err *err)
{
    if (cfg_names_find(t, s, value))
        return DLLM_OK;
    char choices[256];
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: unknown value '%s' (expected one of %s)", t->key,
                        s ? s : "(null)", cfg_names_choices(t, choices, sizeof choices));
}
