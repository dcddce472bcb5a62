/* custom.c: see custom.h. */
#include "tasks/custom.h"
#include "tasks/reward_program.h"
#include "tasks/task_plugin.h"
#include "tasks/task_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const dllm_task dllm_task_custom = {
    .name = "custom",
    .description = "your own JSONL data and reward program or plugin (task.name: custom in a "
                   "config; not for `tasks sample` or `grade`)",
};

struct dllm_custom {
    char prompt_field[128], reference_field[128];
    dllm_reward_program *prog; /* one of prog and plugin */
    dllm_plugin *plugin;
};

int dllm_custom_open(dllm_custom **out, const dllm_custom_cfg *cfg, dllm_err *err)
{
    *out = NULL;
    dllm_custom *c = dllm_calloc(1, sizeof *c);
    snprintf(c->prompt_field, sizeof c->prompt_field, "%s", cfg->prompt_field);
    snprintf(c->reference_field, sizeof c->reference_field, "%s", cfg->reference_field);
    int rc = 0;
    if (cfg->command && cfg->command[0]) {
        if ((rc = dllm_reward_program_start(&c->prog, cfg->command, cfg->timeout_s, err)))
            dllm_err_prefix(err, "task.reward.command");
    } else if (cfg->plugin && cfg->plugin[0]) {
        rc = dllm_plugin_open(&c->plugin, cfg->plugin, err);
    } else {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "task.name custom needs a reward: "
                          "task.reward.command (a program) or task.plugin (a shared object)");
    }
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

bool dllm_custom_can_generate(const dllm_custom *c)
{
    return c->plugin && dllm_plugin_has_generate(c->plugin);
}

/* One JSONL line: the prompt a non-empty string, the reference any JSON value. */
static int custom_item(void *ctx, const void *obj, dllm_task_item *it, dllm_err *err)
{
    const dllm_custom *c = ctx;
    const char *q;
    if (dllm_json_get_string(obj, c->prompt_field, 1, &q, err))
        return dllm_err_prefix(err, "task.fields.prompt");
    if (!q[0])
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.fields.prompt: key '%s' is empty",
                            c->prompt_field);
    json_t *r = json_object_get((const json_t *)obj, c->reference_field);
    if (!r)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task.fields.reference: missing key '%s'",
                            c->reference_field);
    it->question = dllm_strdup(q);
    it->reference_json = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);
    it->answer = json_is_string(r) ? dllm_strdup(json_string_value(r)) : dllm_strdup(it->reference_json);
    return 0;
}

int dllm_custom_load(dllm_custom *c, const dllm_task_source *src, dllm_task_items *out,
                     dllm_err *err)
{
    out->items = NULL;
    out->n = 0;
    if (src->path) {
        char *buf;
        size_t len;
        int rc = dllm_read_file(src->path, &buf, &len, err);
        if (rc)
            return rc;
        rc = dllm_task_load_jsonl(src->path, buf, len, custom_item, c, out, err);
        free(buf);
        return rc;
    }
    if (!dllm_custom_can_generate(c))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "task custom: no data file (task.train.path, "
                            "task.eval.path) and no plugin generator");
    out->items = dllm_calloc(src->n ? src->n : 1, sizeof out->items[0]);
    for (size_t i = 0; i < src->n; i++) {
        dllm_task_item *it = &out->items[i];
        if (dllm_plugin_generate(c->plugin, src->seed, i, &it->question, &it->answer, err)) {
            out->n = i;
            dllm_task_items_free(out);
            return err->code;
        }
        out->n = i + 1;
    }
    return 0;
}

char *dllm_custom_format(dllm_custom *c, const dllm_task_item *it, dllm_err *err)
{
    if (c->plugin && dllm_plugin_has_format(c->plugin))
        return dllm_plugin_format(c->plugin, it->question, it->answer, err);
    return dllm_strdup(it->question);
}

char *dllm_utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    char *out = dllm_malloc(3 * n + 1), *o = out;
    for (size_t i = 0; i < n;) {
        unsigned char b = u[i];
        size_t k = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++)
            ok = (u[i + j] & 0xC0) == 0x80;
        if (ok && k > 1) { /* overlong forms, surrogates, beyond U+10FFFF */
            unsigned cp = b & (0x7F >> k);
            for (size_t j = 1; j < k; j++)
                cp = cp << 6 | (u[i + j] & 0x3F);
            ok = cp >= (k == 2 ? 0x80u : k == 3 ? 0x800u : 0x10000u) && cp <= 0x10FFFF &&
                 !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (ok && b == 0)
            ok = false; /* JSON strings here are C strings */
        if (ok) {
            memcpy(o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = '\0';
    if (out_len)
        *out_len = (size_t)(o - out);
    return out;
}

static json_t *utf8_string(const char *s, size_t len)
{
    size_t n;
    char *t = dllm_utf8_sanitize(s, len, &n);
    json_t *j = json_stringn(t, n);
    free(t);
    return j;
}

/* {"prompt": ..., "completion": ..., "reference": ...} on one line, malloc'd. */
static char *request_line(const dllm_task_item *it, const char *completion, size_t len)
{
    json_t *ref = it->reference_json ? json_loads(it->reference_json, JSON_DECODE_ANY, NULL) : NULL;
    json_t *o = json_object();
    json_object_set_new(o, "prompt", utf8_string(it->question, strlen(it->question)));
    json_object_set_new(o, "completion", utf8_string(completion, len));
    json_object_set_new(o, "reference", ref ? ref : utf8_string(it->answer, strlen(it->answer)));
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return line;
}

int dllm_custom_score(dllm_custom *c, const dllm_task_item *it, const char *completion,
                      size_t len, double *reward, int *correct, dllm_err *err)
{
    int said = -1, rc;
    if (c->prog) {
        char *line = request_line(it, completion, len);
        if (!line)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "custom task: cannot encode a request");
        rc = dllm_reward_program_ask(c->prog, line, strlen(line), reward, &said, err);
        free(line);
    } else {
        dllm_task_plugin_sample s = {.prompt = it->question, .reference = it->answer,
                                     .completion = completion, .completion_len = len};
        rc = dllm_plugin_reward(c->plugin, &s, reward, &said, DLLM_EXIT_INTERNAL, err);
    }
    if (rc)
        return rc;
    *correct = said >= 0 ? said : *reward > 0;
    return 0;
}

void dllm_custom_close(dllm_custom *c)
{
    if (!c)
        return;
    dllm_reward_program_stop(c->prog);
    dllm_plugin_close(c->plugin);
    free(c);
}
