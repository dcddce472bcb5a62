/* gen_settings.c: CKPT/generation.json (see gen_settings.h). */
#include "src/config/gen_settings.h"

#include <jansson.h>
#include <math.h>
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
    g->dream = false;
    g->dcfg = dllm_dream_cfg_default();
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

void ckpt_generation_set_task(ckpt_generation *g, const dllm_cfg *cfg)
{
    g->has_task = true;
    g->task.name = (int)cfg->task.name;
    g->task.format = (int)cfg->task.format;
    g->task.max_blanks = cfg->task.max_blanks;
    g->task.n_numbers = cfg->task.n_numbers;
    g->task.reward = (int)cfg->task.reward.kind;
}

void ckpt_generation_apply_task(const ckpt_generation *g, dllm_cfg *cfg)
{
    if (!g->has_task)
        return;
    cfg->task.name = (cfg_task)g->task.name;
    cfg->task.format = (cfg_task_format)g->task.format;
    cfg->task.max_blanks = g->task.max_blanks;
    cfg->task.n_numbers = g->task.n_numbers;
    cfg->task.reward.kind = (cfg_reward)g->task.reward;
}

void ckpt_generation_set_dream(ckpt_generation *g, const dllm_cfg *cfg)
{
    g->dream = true;
    g->dcfg = (dllm_dream_cfg){.alg = cfg->rollout.dream.alg, .eps = cfg->rollout.dream.eps,
                               .alg_temp = cfg->rollout.dream.alg_temp, .top_p = cfg->rollout.top_p,
                               .top_k = cfg->rollout.dream.top_k};
    g->top_p = cfg->rollout.top_p;
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
    if (o && g->dream)
        json_object_set_new(o, "dream",
                            json_pack("{s:s, s:f, s:f, s:i}", "alg", dllm_dream_alg_name(g->dcfg.alg),
                                      "eps", g->dcfg.eps, "alg_temp", g->dcfg.alg_temp, "top_k",
                                      g->dcfg.top_k));
    if (o && g->has_task)
        json_object_set_new(
            o, "task",
            json_pack("{s:s, s:s, s:i, s:i, s:s}", "name",
                      cfg_names_name(&cfg_names_task, g->task.name), "format",
                      cfg_names_name(&cfg_names_task_format, g->task.format), "max_blanks",
                      g->task.max_blanks, "n_numbers", g->task.n_numbers, "reward",
                      cfg_names_name(&cfg_names_reward, g->task.reward)));
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

/* The "dream" object: each key optional, checked as dllm_dream_check does. */
static int get_dream(json_t *o, ckpt_generation *g, const char *path, dllm_err *err)
{
    json_t *d = json_object_get(o, "dream");
    if (!d)
        return 0;
    if (!json_is_object(d))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'dream': expected an object", path);
    dllm_dream_cfg c = g->dcfg;
    json_t *v = json_object_get(d, "alg");
    if (v && (!json_is_string(v) || dllm_dream_alg_parse(json_string_value(v), &c.alg)))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'dream.alg': expected origin, "
                            "maskgit_plus, topk_margin or entropy", path);
    if ((v = json_object_get(d, "eps")) &&
        (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) < 1)))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'dream.eps': expected a number in (0, 1)",
                            path);
    if (v)
        c.eps = json_number_value(v);
    if ((v = json_object_get(d, "alg_temp")) &&
        (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v))))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'dream.alg_temp': expected a number >= 0",
                            path);
    if (v)
        c.alg_temp = json_number_value(v);
    if ((v = json_object_get(d, "top_k")) &&
        (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30)))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'dream.top_k': expected an integer >= 0",
                            path);
    if (v)
        c.top_k = (int)json_integer_value(v);
    g->dcfg = c;
    g->dream = true;
    return 0;
}

/* The "task" object, when present: names checked against the config's tables. */
static int get_task(json_t *o, ckpt_generation *g, const char *path, dllm_err *err)
{
    json_t *t = json_object_get(o, "task");
    if (!t)
        return 0;
    const char *name = json_string_value(json_object_get(t, "name"));
    const char *format = json_string_value(json_object_get(t, "format"));
    const char *reward = json_string_value(json_object_get(t, "reward"));
    json_t *mb = json_object_get(t, "max_blanks"), *nn = json_object_get(t, "n_numbers");
    if (!json_is_object(t) || !name || !cfg_names_find(&cfg_names_task, name, &g->task.name) ||
        !format || !cfg_names_find(&cfg_names_task_format, format, &g->task.format) ||
        !reward || !cfg_names_find(&cfg_names_reward, reward, &g->task.reward) ||
        !json_is_integer(mb) || json_integer_value(mb) < 1 || json_integer_value(mb) > 16 ||
        !json_is_integer(nn) || json_integer_value(nn) < 3 || json_integer_value(nn) > 4)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: \"task\": expected {\"name\": a task, \"format\": d1|plain, "
                            "\"max_blanks\": 1..16, \"n_numbers\": 3..4, \"reward\": "
                            "task|correct|partial}", path);
    g->task.max_blanks = (int)json_integer_value(mb);
    g->task.n_numbers = (int)json_integer_value(nn);
    g->has_task = true;
    return 0;
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
    static const char *const chats[] = {"auto", "plain", "llada", "qwen3", "qwen2.5", "qwen3.5", NULL};
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
    if (!rc)
        rc = get_dream(o, g, path, err);
    if (!rc)
        rc = get_task(o, g, path, err);
    if (!rc)
        g->dcfg.top_p = g->top_p;
    if (!rc && sampler[0])
        g->diffusion = !strcmp(sampler, "denoising");
    json_decref(o);
    return rc;
}
