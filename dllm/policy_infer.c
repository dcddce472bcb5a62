/* policy_infer.c: inference helpers over the public policy API (see
 * policy_infer.h). */
#include "dllm/policy_infer.h"

#include "kernels/nvfp4.h"

#include <string.h>

int dllm_policy_infer_cfg(dllm_policy_cfg *c, const char *precision, const char *flag,
                          dllm_err *err)
{
    static const char *const names[] = {"bf16", "fp8", "fp8-exact", "nvfp4", "int8"};
    const char *rollout = !strcmp(precision, "fp32") ? "trainer" : NULL;
    for (size_t i = 0; !rollout && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(precision, names[i]))
            rollout = names[i];
    if (!rollout)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s %s: expected fp32, bf16, fp8, fp8-exact, nvfp4 or int8", flag,
                            precision);
    c->trainer = "fp32";
    c->rollout = rollout;
    c->fp8_format = "e4m3";
    c->fp8_scaling = "block";
    c->fp8_pow2_scale = false;
    c->int8_scaling = "channel";
    c->nvfp4_scaling = "block16";
    c->lora_rank = 0;
    c->n_lora_targets = 0;
    c->lora_targets = NULL;
    return 0;
}

int dllm_policy_infer_nvfp4(dllm_policy_cfg *c, const char *scaling, const char *flag,
                            dllm_err *err)
{
    if (!scaling)
        return 0;
    nvfp4_scaling s;
    if (nvfp4_scaling_parse(scaling, &s, err))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s %s: expected block16, block32, channel or tensor", flag, scaling);
    if (!c->rollout || strcmp(c->rollout, "nvfp4"))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s %s: applies to --precision nvfp4 only "
                            "(the precision is %s)", flag, scaling,
                            c->rollout && strcmp(c->rollout, "trainer") ? c->rollout : "fp32");
    c->nvfp4_scaling = nvfp4_scaling_name(s);
    return 0;
}

dllm_estimator dllm_policy_default_estimator(const dllm_policy *p)
{
    return dllm_policy_is_diffusion(p) ? EST_ONE_STEP : EST_AR_EXACT;
}

int dllm_policy_check_estimator(const dllm_policy *p, dllm_estimator e, const char *flag,
                                dllm_err *err)
{
    if (!dllm_policy_is_diffusion(p) && e != EST_AR_EXACT)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s %s: an autoregressive (qwen3) model is scored exactly; use "
                            "exact (the default for it)", flag, dllm_estimator_name(e));
    if (dllm_policy_is_diffusion(p) && e == EST_AR_EXACT)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s exact: a masked-diffusion (llada) model has no exact "
                            "likelihood; use one_step, elbo or trajectory", flag);
    return 0;
}

int dllm_policy_score(dllm_policy *p, dllm_prec prec, const int32_t *prompt, int P,
                      const int32_t *completion, int L, const int16_t *commit_step,
                      dllm_lik_cfg *c, dllm_rng rng, dllm_lik_result *out, dllm_err *err)
{
    const dllm_model_config *mc = dllm_policy_config(p);
    int rc = dllm_policy_check_estimator(p, c->kind, "estimator", err);
    if (rc)
        return rc;
    if (L < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "empty completion");
    if (c->kind == EST_AR_EXACT && P < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "an autoregressive model needs at least one prompt token to score "
                            "the first completion token");
    for (int i = 0; i < P + L; i++) {
        int32_t id = i < P ? prompt[i] : completion[i - P];
        if (id < 0 || id >= mc->vocab_size)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s id %d is outside the vocabulary (%d tokens)",
                                i < P ? "prompt" : "completion", id, mc->vocab_size);
    }
    if (P + L > mc->max_seq_len)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%d tokens exceed max_sequence_length %d",
                            P + L, mc->max_seq_len);
    c->mask_id = mc->mask_token_id;
    c->vocab = mc->embedding_size;
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(p, prec, &ctx);
    dllm_logp_fn lfn = dllm_policy_logp(p, prec, &ctx); /* on a device: the fused head */
    return dllm_seq_logprob_logp(fn, lfn, ctx, prompt, P, completion, L, commit_step, c, rng, out,
                                 err);
}
