/* mem_plan_model.c: the model dimensions a memory plan is made for (src/plan/mem_plan.h):
 * a preset, model.path's config.json, or a published checkpoint's preset when its
 * directory is not on this machine. Shared by `dllm-rl plan` and `train`. */
#include "src/plan/mem_plan.h"

#include "src/config/cfg_names.h"
#include "dllm/arch.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>

/* Published checkpoints whose directory may not be on this machine yet: the
 * plan needs only their dimensions, which the presets hold (dllm/arch.c). */
static const char *published_preset(const char *path, dllm_arch *arch)
{
    char buf[CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const dllm_arch_preset *p;
    const dllm_arch_desc *a = dllm_arch_of_published(basename(buf), &p);
    if (!a)
        return NULL;
    *arch = a->id;
    return p->name;
}

int mem_plan_model(const dllm_cfg *cfg, const char *preset_flag, dllm_model_config *mc, char *what,
                   size_t n, dllm_err *err)
{
    dllm_arch arch = cfg->model.arch;
    if (preset_flag) {
        /* a published model's preset names its architecture; tiny and small keep the config's */
        const dllm_arch_desc *a = dllm_arch_of_preset(preset_flag, dllm_arch_get(arch));
        if (a)
            arch = a->id;
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
