/* mem_plan_run.c: a run's numerics and recomputation from its config (mem_plan_run.h). */
#include "src/plan/mem_plan_run.h"

#include "dllm/arch.h"
#include "dllm/sampler.h"

#include <string.h>

int mem_run_precision(const dllm_cfg *cfg, const dllm_model_config *mc, dllm_precision *prec,
                      int *lora_mask, dllm_err *err)
{
    if (dllm_precision_parse(prec,
                             cfg_names_name(&cfg_names_trainer_precision, cfg->model.trainer_precision),
                             cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision),
                             cfg_names_name(&cfg_names_fp8_format, cfg->rollout.fp8.format),
                             cfg_names_name(&cfg_names_fp8_scaling, cfg->rollout.fp8.scaling),
                             cfg->rollout.fp8.pow2_scale != 0, err) ||
        dllm_precision_parse_int8(prec, cfg_names_name(&cfg_names_int8_scaling,
                                                       cfg->rollout.int8.scaling), err))
        return err->code;
    const dllm_arch_desc *ad = dllm_arch_get(mc->arch);
    *lora_mask = cfg->model.lora.targets.n ? 0 : LORA_ALL;
    for (int i = 0; cfg->model.lora.rank > 0 && i < cfg->model.lora.targets.n; i++) {
        int bit = dllm_arch_lora_bit(ad, cfg->model.lora.targets.items[i]);
        char list[160];
        if (!bit)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.targets: unknown module '%s' "
                                "(expected %s)", cfg->model.lora.targets.items[i],
                                dllm_arch_lora_list(ad, list, sizeof list));
        *lora_mask |= bit;
    }
    return 0;
}

void mem_run_recompute(const dllm_cfg *cfg, const dllm_model_config *mc, mem_plan_opts *o)
{
    int k = 0;
    dllm_cfg_recompute_every(cfg->train.recompute, &k); /* checked when the config loaded */
    o->recompute = k == 0 ? MEM_RECOMPUTE_NONE : k == 1 ? MEM_RECOMPUTE_LAYER : MEM_RECOMPUTE_EVERY;
    o->recompute_every = k > mc->n_layers ? mc->n_layers : k > 0 ? k : 1;
}
