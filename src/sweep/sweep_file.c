/* sweep_file.c: reading and expanding sweep files (the format is in sweep_file.h). */
#include "src/sweep/sweep_file.h"

#include "src/config/yaml_config.h"
#include "src/run/run_dir.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    const char *file;
    const char *text;
} src_text;

/* file:line:col: message, the line echoed with a caret (line, col 1-based) */
static int fail_at(dllm_err *err, const src_text *src, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_at(dllm_err *err, const src_text *src, int line, int col, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char text[256] = "";
    const char *p = src->text;
    for (int l = 1; p && *p && l < line; p++)
        if (*p == '\n')
            l++;
    if (p) {
        size_t n = strcspn(p, "\n");
        n = n < sizeof text - 1 ? n : sizeof text - 1;
        memcpy(text, p, n);
        text[n] = '\0';
    }
    char caret[208];
    int c = col - 1 < 200 ? (col - 1 > 0 ? col - 1 : 0) : 200;
    memset(caret, ' ', (size_t)c);
    caret[c] = '^';
    caret[c + 1] = '\0';
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s\n  %s\n  %s", src->file, line, col, msg,
                        text, caret);
}

static int node_fail(dllm_err *err, const src_text *src, const yaml_node_t *n, const char *fmt,
                     const char *a, const char *b)
{
    return fail_at(err, src, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1, fmt, a,
                   b);
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = dllm_malloc(n);
    memcpy(d, s, n);
    return d;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The YAML text of an override value: a scalar as written, a flat sequence of
 * scalars as "[a, b]". */
static int value_text(yaml_document_t *doc, yaml_node_t *v, const src_text *src, const char *key,
                      char **out, dllm_err *err)
{
    if (v->type == YAML_SCALAR_NODE) {
        *out = xstrdup(scalar(v));
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return node_fail(err, src, v, "%s: expected a value, found a mapping%s", key, "");
    size_t cap = 64, used = 0;
    char *s = dllm_malloc(cap);
    s[used++] = '[';
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(doc, *it);
        if (!scalar(e)) {
            free(s);
            return node_fail(err, src, e, "%s: list items must be plain values%s", key, "");
        }
        size_t n = strlen(scalar(e));
        while (used + n + 4 > cap)
            s = dllm_realloc(s, cap *= 2);
        if (it != v->data.sequence.items.start)
            s[used++] = ',', s[used++] = ' ';
        memcpy(s + used, scalar(e), n);
        used += n;
    }
    s[used++] = ']';
    s[used] = '\0';
    *out = s;
    return 0;
}

static void push_set(sweep_set **sets, int *n, const char *key, char *value, const yaml_node_t *v)
{
    *sets = dllm_realloc(*sets, sizeof **sets * (size_t)(*n + 1));
    (*sets)[(*n)++] = (sweep_set){.key = xstrdup(key), .value = value,
                                   .line = (int)v->start_mark.line + 1,
                                   .col = (int)v->start_mark.column + 1};
}

/* Flattens a mapping of overrides (dotted keys or nested maps) into sets;
 * `skip` names a key handled by the caller (an arm's name). */
static int read_overrides(yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                          const src_text *src, const char *skip, sweep_set **sets, int *n,
                          dllm_err *err)
{
    if (map->type != YAML_MAPPING_NODE)
        return node_fail(err, src, map, "%s: expected a mapping of config keys to values%s",
                         prefix[0] ? prefix : "overrides", "");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!scalar(k) || !*scalar(k))
            return node_fail(err, src, k, "expected a config key%s%s", "", "");
        if (!prefix[0] && skip && !strcmp(scalar(k), skip))
            continue;
        char key[256];
        if ((size_t)snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", scalar(k)) >=
            sizeof key)
            return node_fail(err, src, k, "key too long: %s%s", scalar(k), "");
        int rc;
        if (v->type == YAML_MAPPING_NODE) {
            rc = read_overrides(doc, v, key, src, NULL, sets, n, err);
        } else {
            char *text;
            rc = value_text(doc, v, src, key, &text, err);
            if (!rc)
                push_set(sets, n, key, text, v);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* The directory part of path ("." when none), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = dllm_malloc(n + 1);
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Applies one override to cfg; a config error is re-reported at the value. */
static int apply_set(dllm_cfg *cfg, const sweep_set *s, const src_text *src, dllm_err *err)
{
    size_t n = strlen(s->key) + strlen(s->value) + 2;
    char *a = dllm_malloc(n);
    snprintf(a, n, "%s=%s", s->key, s->value);
    dllm_err e = {0};
    int rc = dllm_cfg_set(cfg, a, &e);
    free(a);
    if (rc) {
        /* "--set k=v: message" -> "message" */
        const char *m = strstr(e.msg, ": ");
        return fail_at(err, src, s->line, s->col, "%s", m && !strncmp(e.msg, "--set ", 6) ? m + 2 : e.msg);
    }
    return 0;
}

static int parse_doc(sweep_file *sf, yaml_document_t *doc, const src_text *src, dllm_err *err)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return fail_at(err, src, root ? (int)root->start_mark.line + 1 : 1,
                       root ? (int)root->start_mark.column + 1 : 1,
                       "a sweep file is a mapping with name, base, and optional set, arms, grid");
    const yaml_node_t *name_node = NULL, *base_node = NULL;
    int rc = 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
         p < root->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k) ? scalar(k) : "";
        if (!strcmp(key, "name") || !strcmp(key, "base")) {
            if (!scalar(v) || !*scalar(v))
                return node_fail(err, src, v, "%s: expected a string%s", key, "");
            if (!strcmp(key, "name")) {
                if (!run_dir_plain_name(scalar(v)))
                    return node_fail(err, src, v,
                                     "name: '%s' is not a directory name (letters, digits, . _ + - =)%s",
                                     scalar(v), "");
                name_node = v;
            } else {
                base_node = v;
            }
        } else if (!strcmp(key, "set")) {
            rc = read_overrides(doc, v, "", src, NULL, &sf->sets, &sf->n_sets, err);
        } else if (!strcmp(key, "arms")) {
            if (v->type != YAML_SEQUENCE_NODE)
                return node_fail(err, src, v, "arms: expected a list of {name: ..., key: value, ...}%s%s",
                                 "", "");
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top && !rc; it++) {
                yaml_node_t *a = yaml_document_get_node(doc, *it);
                if (a->type != YAML_MAPPING_NODE)
                    return node_fail(err, src, a, "arms: each arm is a mapping with a name%s%s", "", "");
                const yaml_node_t *an = NULL;
                for (yaml_node_pair_t *q = a->data.mapping.pairs.start; q < a->data.mapping.pairs.top; q++)
                    if (scalar(yaml_document_get_node(doc, q->key)) &&
                        !strcmp(scalar(yaml_document_get_node(doc, q->key)), "name"))
                        an = yaml_document_get_node(doc, q->value);
                if (!an)
                    return node_fail(err, src, a, "arms: this arm has no name%s%s", "", "");
                if (!scalar(an) || !run_dir_plain_name(scalar(an)))
                    return node_fail(err, src, an,
                                     "arms: name '%s' is not a directory name (letters, digits, . _ + - =)%s",
                                     scalar(an) ? scalar(an) : "", "");
                for (int j = 0; j < sf->n_arms; j++)
                    if (!strcmp(sf->arms[j].name, scalar(an)))
                        return node_fail(err, src, an, "arms: duplicate arm name '%s'%s", scalar(an), "");
                sf->arms = dllm_realloc(sf->arms, sizeof *sf->arms * (size_t)(sf->n_arms + 1));
                sweep_arm *arm = &sf->arms[sf->n_arms++];
                *arm = (sweep_arm){.name = xstrdup(scalar(an))};
                rc = read_overrides(doc, a, "", src, "name", &arm->sets, &arm->n_sets, err);
            }
            if (!rc && sf->n_arms == 0)
                return node_fail(err, src, v, "arms: the list is empty (leave the key out instead)%s%s",
                                 "", "");
        } else if (!strcmp(key, "grid")) {
            if (v->type != YAML_MAPPING_NODE)
                return node_fail(err, src, v, "grid: expected a mapping of config keys to lists%s%s", "", "");
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start;
                 q < v->data.mapping.pairs.top && !rc; q++) {
                yaml_node_t *gk = yaml_document_get_node(doc, q->key);
                yaml_node_t *gv = yaml_document_get_node(doc, q->value);
                if (!scalar(gk) || !*scalar(gk))
                    return node_fail(err, src, gk, "grid: expected a config key%s%s", "", "");
                if (gv->type != YAML_SEQUENCE_NODE || gv->data.sequence.items.top ==
                                                          gv->data.sequence.items.start)
                    return node_fail(err, src, gv, "grid: %s: expected a non-empty list of values%s",
                                     scalar(gk), "");
                for (int j = 0; j < sf->n_grid; j++)
                    if (!strcmp(sf->grid[j].key, scalar(gk)))
                        return node_fail(err, src, gk, "grid: duplicate key '%s'%s", scalar(gk), "");
                sf->grid = dllm_realloc(sf->grid, sizeof *sf->grid * (size_t)(sf->n_grid + 1));
                sweep_axis *ax = &sf->grid[sf->n_grid++];
                *ax = (sweep_axis){.key = xstrdup(scalar(gk))};
                for (yaml_node_item_t *it = gv->data.sequence.items.start;
                     it < gv->data.sequence.items.top && !rc; it++) {
                    yaml_node_t *e = yaml_document_get_node(doc, *it);
                    char *text;
                    rc = value_text(doc, e, src, ax->key, &text, err);
                    if (!rc)
                        push_set(&ax->values, &ax->n_values, ax->key, text, e);
                }
            }
        } else {
            return node_fail(err, src, k, "unknown key '%s' (known keys: name, base, set, arms, grid)%s",
                             key, "");
        }
    }
    if (rc)
        return rc;
    if (!name_node || !base_node)
        return fail_at(err, src, (int)root->start_mark.line + 1, (int)root->start_mark.column + 1,
                       "missing '%s' (a sweep file needs name and base)", !name_node ? "name" : "base");
    sf->name = xstrdup(scalar(name_node));
    const char *b = scalar(base_node);
    if (b[0] == '/') {
        sf->base = xstrdup(b);
    } else {
        char *d = dir_of(sf->path);
        size_t n = strlen(d) + strlen(b) + 2;
        sf->base = dllm_malloc(n);
        snprintf(sf->base, n, "%s/%s", d, b);
        free(d);
    }
    if (sf->n_arms == 0) {
        sf->arms = dllm_calloc(1, sizeof *sf->arms);
        sf->arms[0].name = xstrdup("");
        sf->n_arms = 1;
    }
    /* the base must load, and `set` must apply to it: that fixes log.dir */
    dllm_cfg cfg;
    dllm_cfg_defaults(&cfg);
    dllm_err e = {0};
    if (dllm_cfg_load(&cfg, sf->base, &e))
        return fail_at(err, src, (int)base_node->start_mark.line + 1,
                       (int)base_node->start_mark.column + 1, "base: %s", e.msg);
    for (int i = 0; i < sf->n_sets; i++)
        if ((rc = apply_set(&cfg, &sf->sets[i], src, err)))
            return rc;
    sf->log_dir = xstrdup(cfg.log.dir);
    return 0;
}

int sweep_file_load(sweep_file *sf, const char *path, dllm_err *err)
{
    memset(sf, 0, sizeof *sf);
    sf->path = xstrdup(path);
    char *text;
    size_t len;
    if (dllm_read_file(path, &text, &len, err))
        return err->code;
    src_text src = {path, text};
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = fail_at(err, &src, (int)parser.problem_mark.line + 1,
                     (int)parser.problem_mark.column + 1, "YAML syntax error: %s%s%s", parser.problem,
                     parser.context ? " " : "", parser.context ? parser.context : "");
    } else {
        rc = parse_doc(sf, &doc, &src, err);
        if (!rc) {
            /* every run's overrides must apply: report the first that does not */
            sweep_run *runs;
            int n;
            rc = sweep_expand(sf, &runs, &n, err);
            if (!rc)
                sweep_runs_free(runs, n);
        }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    if (rc)
        sweep_file_free(sf);
    free(text);
    return rc;
}

static void sets_free(sweep_set *s, int n)
{
    for (int i = 0; i < n; i++) {
        free(s[i].key);
        free(s[i].value);
    }
    free(s);
}

void sweep_file_free(sweep_file *sf)
{
    free(sf->path);
    free(sf->name);
    free(sf->base);
    free(sf->log_dir);
    sets_free(sf->sets, sf->n_sets);
    for (int i = 0; i < sf->n_arms; i++) {
        free(sf->arms[i].name);
        sets_free(sf->arms[i].sets, sf->arms[i].n_sets);
    }
    free(sf->arms);
    for (int i = 0; i < sf->n_grid; i++) {
        free(sf->grid[i].key);
        sets_free(sf->grid[i].values, sf->grid[i].n_values);
    }
    free(sf->grid);
    memset(sf, 0, sizeof *sf);
}

static void append(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(dst);
    snprintf(dst + n, cap - n, "%s", s);
}

int sweep_expand(const sweep_file *sf, sweep_run **runs_out, int *n_out, dllm_err *err)
{
    int per_arm = 1;
    for (int g = 0; g < sf->n_grid; g++)
        per_arm *= sf->grid[g].n_values;
    const int n = per_arm * sf->n_arms;
    sweep_run *runs = dllm_calloc((size_t)n, sizeof *runs);
    char *text = NULL;
    size_t tlen;
    int rc = dllm_read_file(sf->path, &text, &tlen, err);
    src_text src = {sf->path, text};
    for (int r = 0; r < n && !rc; r++) {
        sweep_run *run = &runs[r];
        run->arm = r / per_arm;
        run->grid_index = dllm_calloc((size_t)sf->n_grid + 1, sizeof *run->grid_index);
        for (int g = sf->n_grid - 1, rest = r % per_arm; g >= 0; g--) {
            run->grid_index[g] = rest % sf->grid[g].n_values;
            rest /= sf->grid[g].n_values;
        }
        const sweep_arm *arm = &sf->arms[run->arm];
        /* the overrides in order: set, the arm's, the grid's */
        const int total = sf->n_sets + arm->n_sets + sf->n_grid;
        if (total > 60) { /* train takes 64 --set options, two of them the sweep's own */
            free(text);
            sweep_runs_free(runs, n);
            return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: %d overrides for one run (at most 60)",
                                sf->path, total);
        }
        const sweep_set **all = dllm_malloc(sizeof *all * (size_t)(total + 1));
        int k = 0;
        for (int i = 0; i < sf->n_sets; i++)
            all[k++] = &sf->sets[i];
        for (int i = 0; i < arm->n_sets; i++)
            all[k++] = &arm->sets[i];
        for (int g = 0; g < sf->n_grid; g++)
            all[k++] = &sf->grid[g].values[run->grid_index[g]];
        char name[1024] = "";
        append(name, sizeof name, arm->name);
        for (int g = 0; g < sf->n_grid; g++) {
            const sweep_set *v = &sf->grid[g].values[run->grid_index[g]];
            if (name[0])
                append(name, sizeof name, "_");
            append(name, sizeof name, sf->grid[g].key);
            append(name, sizeof name, "=");
            size_t at = strlen(name);
            append(name, sizeof name, v->value);
            for (char *c = name + at; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr(".+-=", *c))
                    *c = '_';
        }
        run->name = xstrdup(name[0] ? name : "run");
        dllm_cfg cfg;
        dllm_cfg_defaults(&cfg);
        rc = dllm_cfg_load(&cfg, sf->base, err);
        run->sets = dllm_malloc(sizeof *run->sets * (size_t)(total + 1));
        for (int i = 0; i < total && !rc; i++) {
            rc = apply_set(&cfg, all[i], &src, err);
            size_t len = strlen(all[i]->key) + strlen(all[i]->value) + 2;
            run->sets[run->n_sets] = dllm_malloc(len);
            snprintf(run->sets[run->n_sets++], len, "%s=%s", all[i]->key, all[i]->value);
        }
        free(all);
        for (int j = 0; j < r && !rc; j++)
            if (!strcmp(runs[j].name, run->name))
                rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: two runs are both named '%s'", sf->path,
                                  run->name);
    }
    free(text);
    if (rc) {
        sweep_runs_free(runs, n);
        return rc;
    }
    *runs_out = runs;
    *n_out = n;
    return 0;
}

void sweep_runs_free(sweep_run *runs, int n)
{
    for (int r = 0; runs && r < n; r++) {
        free(runs[r].name);
        free(runs[r].grid_index);
        for (int i = 0; i < runs[r].n_sets; i++)
            free(runs[r].sets[i]);
        free(runs[r].sets);
    }
    free(runs);
}
