/* mem_plan_model.c: the model dimensions a memory plan is made for (src/mem_plan.h):
 * a preset, model.path's config.json, or a published checkpoint's preset when its
 * directory is not on this machine. Shared by `dllm-rl plan` and `train`. */
#include "src/mem_plan.h"

#include "src/cfg_names.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Published checkpoints whose directory may not be on this machine yet: the
 * plan needs only their dimensions, which the presets hold. */
static const char *published_preset(const char *path, dllm_arch *arch)
{
    static const struct { const char *dir, *preset; dllm_arch arch; } known[] = {
        {"LLaDA-8B-Instruct", "llada-8b", DLLM_ARCH_LLADA},
        {"LLaDA-8B-Base", "llada-8b", DLLM_ARCH_LLADA},
        {"Qwen3-8B", "qwen3-8b", DLLM_ARCH_QWEN3},
        {"Qwen3-8B-Base", "qwen3-8b", DLLM_ARCH_QWEN3},
        {"Dream-v0-Instruct-7B", "dream-7b", DLLM_ARCH_DREAM},
        {"Dream-v0-Base-7B", "dream-7b", DLLM_ARCH_DREAM}};
    char buf[CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *base = basename(buf);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcasecmp(base, known[i].dir)) {
            *arch = known[i].arch;
            return known[i].preset;
        }
    return NULL;
}

int mem_plan_model(const dllm_cfg *cfg, const char *preset_flag, dllm_model_config *mc, char *what,
                   size_t n, dllm_err *err)
{
    dllm_arch arch = cfg->model.arch;
    if (preset_flag) {
        if (!strcmp(preset_flag, "llada-8b"))
            arch = DLLM_ARCH_LLADA;
        else if (!strcmp(preset_flag, "qwen3-8b"))
            arch = DLLM_ARCH_QWEN3;
        else if (!strcmp(preset_flag, "dream-7b"))
            arch = DLLM_ARCH_DREAM;
        if (dllm_config_preset(mc, arch, preset_flag, err))
            return dllm_err_prefix(err, "--preset");
        snprintf(what, n, "preset %s", preset_flag);
        return 0;
    }
    if (cfg->model.path[0]) {
        char p[CFG_STR_MAX + 16];
        snprintf(p, sizeof p, "%s/config.json", cfg->model.path);
        FILE *f = fopen(p, "r");
        if (f) {
            fclose(f);
            if (dllm_config_load(mc, cfg->model.path, err))
                return err->code;
            snprintf(what, n, "%s", p);
            return 0;
        }
        const char *preset = published_preset(cfg->model.path, &arch);
        if (!preset)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "model.path: '%s' has no config.json (give --preset NAME to plan with "
                                "a preset's dimensions)", cfg->model.path);
        if (dllm_config_preset(mc, arch, preset, err))
            return err->code;
        snprintf(what, n, "preset %s (model.path %s is not here; its published dimensions)", preset,
                 cfg->model.path);
        return 0;
    }
    const char *preset = cfg_names_name(&cfg_names_preset, cfg->model.preset);
    if (dllm_config_preset(mc, arch, preset, err))
        return dllm_err_prefix(err, "model.preset");
    snprintf(what, n, "preset %s", preset);
    return 0;
}
