/* cfg_names.h: the names of an enumerated config value, one table per enum.
 *
 * A table lists every (YAML name, C value) pair of one key. The config parser
 * reads names through it, its error messages list the choices from it, and
 * anything that prints a value (the config dump, progress lines, logs) names
 * it through it, so a name is spelled in exactly one place. */
#ifndef DLLM_CFG_NAMES_H
#define DLLM_CFG_NAMES_H

#include "kernels/base.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name;
    int value;
} cfg_name;

typedef struct cfg_names {
    const char *key;     /* the config key the values belong to, for messages */
    const cfg_name *v;   /* (n) */
    int n;
    /* Set when the names are another table's (the architecture registry's): the
     * table as it is now; v and n are then unused. */
    const struct cfg_names *(*live)(void);
} cfg_names;

#define CFG_NAMES(key, table) {key, table, (int)(sizeof table / sizeof table[0]), NULL}

/* The entries of t now: t itself, or what its `live` gives. */
const cfg_names *cfg_names_of(const cfg_names *t);
/* Name of value, "?" when the table has none. */
const char *cfg_names_name(const cfg_names *t, int value);
/* Value of name s; false when s is not in the table. */
bool cfg_names_find(const cfg_names *t, const char *s, int *value);
/* "a|b|c" into out (truncated to n bytes); returns out. */
char *cfg_names_choices(const cfg_names *t, char *out, size_t n);
/* cfg_names_find with an input error "KEY: unknown value 's' (expected one of a|b|c)". */
int cfg_names_parse(const cfg_names *t, const char *s, int *value, dllm_err *err);

#endif
