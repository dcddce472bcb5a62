/* mem_plan_run.c: a run's shapes for the device plans, from its config (mem_plan_run.h). */
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

int mem_dev_shape_of_run(mem_dev_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                         const mem_plan_opts *o, dllm_err *err)
{
    memset(s, 0, sizeof *s);
    if (mem_run_precision(cfg, mc, &s->prec, &s->lora_mask, err))
        return err->code;
    s->lora_rank = cfg->model.lora.rank;
    if (o->ranks < 1 || cfg->grpo.prompts_per_step % o->ranks)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--ranks %d must divide grpo.prompts_per_step %d (groups never split)",
                            o->ranks, cfg->grpo.prompts_per_step);
    const int S = cfg->grpo.prompts_per_step / o->ranks * cfg->rollout.group_size;
    s->B = o->rollout_batch ? o->rollout_batch : S;
    s->P = o->prompt_tokens;
    s->G = cfg->rollout.gen_length;
    s->cfg = cfg->rollout.cfg_scale > 0;
    s->random_remask = cfg->rollout.remasking == REMASK_RANDOM;
    s->sB = o->micro_batch ? o->micro_batch : S < 64 ? S : 64;
    s->sT = s->P + s->G;
    s->sR = s->sB * s->G;
    s->score_rollout = true;
    /* the update on the device where dllm_tf_device_train takes it (rl_run.c): an fp32
     * trainer, or LoRA under a bf16 one; its chunks as the scoring's (max_canvas) */
    s->update = !s->prec.trainer_bf16 || s->lora_rank > 0;
    s->uB = s->sB, s->uT = s->sT, s->uR = s->sR;
    s->recompute = o->recompute == MEM_RECOMPUTE_NONE    ? 0
                   : o->recompute == MEM_RECOMPUTE_LAYER ? 1
                                                         : o->recompute_every;
    return 0;
}
