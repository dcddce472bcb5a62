/* gen_settings.c: CKPT/generation.json (see gen_settings.h). */
#include "src/gen_settings.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void ckpt_generation_default(ckpt_generation *g, bool diffusion, int gen_length)
{
    memset(g, 0, sizeof *g);
    g->diffusion = diffusion;
    g->gen_length = gen_length;
    g->block_length = gen_length;
    g->steps = (gen_length + 1) / 2;
    g->temperature = 0;
    g->top_p = 1;
    snprintf(g->remasking, sizeof g->remasking, "low_confidence");
    snprintf(g->chat, sizeof g->chat, "plain");
}

void ckpt_generation_from_cfg(ckpt_generation *g, const dllm_cfg *cfg, bool diffusion,
                              const char *chat)
{
    ckpt_generation_default(g, diffusion, cfg->eval.gen_length);
    g->block_length = cfg->eval.block_length;
    g->steps = cfg->eval.steps;
    g->temperature = cfg->eval.temperature;
    g->top_p = cfg->rollout.top_p;
    snprintf(g->chat, sizeof g->chat, "%s", chat && chat[0] ? chat : "auto");
}

int ckpt_write_generation(const char *dir, const ckpt_generation *g, dllm_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/generation.json", dir);
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:s, s:f, s:s}", "sampler",
                          g->diffusion ? "denoising" : "autoregressive", "gen_length",
                          g->gen_length, "block_length", g->block_length, "steps", g->steps,
                          "temperature", g->temperature, "remasking", g->remasking, "top_p",
                          g->top_p, "chat", g->chat);
    int rc = !o || json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                               JSON_REAL_PRECISION(17));
    json_decref(o);
    return rc ? dllm_err_set(err, DLLM_EXIT_INTERNAL, "%s: write failed", path) : 0;
}

static int get_int(json_t *o, const char *key, int *out, const char *path, dllm_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': expected a positive integer",
                            path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double *out, const char *path, dllm_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v) || json_number_value(v) < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': expected a number >= 0", path,
                            key);
    *out = json_number_value(v);
    return 0;
}

static int get_str(json_t *o, const char *key, char *out, size_t cap, const char *const *allowed,
                   const char *path, dllm_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    for (int i = 0; json_is_string(v) && allowed[i]; i++)
        if (!strcmp(json_string_value(v), allowed[i])) {
            snprintf(out, cap, "%s", allowed[i]);
            return 0;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key '%s': unexpected value", path, key);
}

int ckpt_read_generation(const char *dir, ckpt_generation *g, dllm_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/generation.json", dir);
    struct stat st;
    if (stat(path, &st))
        return -1;
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s:%d:%d: %s", path, je.line, je.column,
                            je.text);
    static const char *const samplers[] = {"denoising", "autoregressive", NULL};
    static const char *const remask[] = {"low_confidence", "random", NULL};
    static const char *const chats[] = {"auto", "plain", "llada", "qwen3", "qwen2.5", NULL};
    char sampler[32] = "";
    int rc = json_is_object(o) ? 0
                               : dllm_err_set(err, DLLM_EXIT_INPUT, "%s: expected an object", path);
    if (!rc)
        rc = get_str(o, "sampler", sampler, sizeof sampler, samplers, path, err);
    if (!rc)
        rc = get_int(o, "gen_length", &g->gen_length, path, err);
    if (!rc)
        rc = get_int(o, "block_length", &g->block_length, path, err);
    if (!rc)
        rc = get_int(o, "steps", &g->steps, path, err);
    if (!rc)
        rc = get_num(o, "temperature", &g->temperature, path, err);
    if (!rc)
        rc = get_num(o, "top_p", &g->top_p, path, err);
    if (!rc)
        rc = get_str(o, "remasking", g->remasking, sizeof g->remasking, remask, path, err);
    if (!rc)
        rc = get_str(o, "chat", g->chat, sizeof g->chat, chats, path, err);
    if (!rc && sampler[0])
        g->diffusion = !strcmp(sampler, "denoising");
    json_decref(o);
    return rc;
}
