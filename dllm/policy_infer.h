/* policy_infer.h: inference through the policy interface (dllm/policy.h) only,
 * for either architecture: opening a model directory at a named precision and
 * scoring one completion. `generate`, `score` and the benchmarks use these, so
 * none of them asks which model it holds except where the two differ in kind
 * (a denoising sampler's schedule; an estimator other than the exact AR sum).
 *
 * Precision names (the CLI's --precision):
 *   fp32  the trainer's numerics (rollout "trainer": no copy is built);
 *   bf16  a bf16 copy of the weights;
 *   fp8   an FP8 copy (E4M3, 128x128 blockwise W8A8) of the block linears.
 * The logits of the chosen precision are dllm_policy_logits(p, DLLM_PREC_ROLLOUT). */
#ifndef DLLM_POLICY_INFER_H
#define DLLM_POLICY_INFER_H

#include "dllm/estimators.h"
#include "dllm/policy.h"

/* Sets c's numerics for precision fp32 | bf16 | fp8 (fp32 trainer, E4M3
 * blockwise FP8, no LoRA) and leaves the model fields (path, preset, arch,
 * seed) as they are; the caller may change fp8_format / fp8_scaling before
 * dllm_policy_open. `flag` names the precision's source in messages. */
int dllm_policy_infer_cfg(dllm_policy_cfg *c, const char *precision, const char *flag,
                          dllm_err *err);
/* c->nvfp4_scaling from a command's flag (NULL: not given, block16 stays): one of
 * block16, block32, channel, tensor, and only with an nvfp4 precision (c->rollout set
 * by dllm_policy_infer_cfg); input errors name `flag`. */
int dllm_policy_infer_nvfp4(dllm_policy_cfg *c, const char *scaling, const char *flag,
                            dllm_err *err);

/* The estimator a model is scored with when none is named: one_step for a
 * masked-diffusion model, exact for an autoregressive one. */
dllm_estimator dllm_policy_default_estimator(const dllm_policy *p);

/* Checks that the estimator fits the architecture (exact only for AR models,
 * and AR models only exactly); the message names `flag`. */
int dllm_policy_check_estimator(const dllm_policy *p, dllm_estimator e, const char *flag,
                                dllm_err *err);

/* Scores prompt [P] + completion [L] under the logits of precision prec with
 * estimator c->kind (c->mask_id and c->vocab are filled from the model). Token
 * ids outside the vocabulary, an empty completion, a missing prompt (AR) and a
 * sequence longer than the model's context are input errors. For AR models
 * token_logp[i] = log softmax(z_{P+i-1} / temperature)[completion[i]], exactly. */
int dllm_policy_score(dllm_policy *p, dllm_prec prec, const int32_t *prompt, int P,
                      const int32_t *completion, int L, const int16_t *commit_step,
                      dllm_lik_cfg *c, dllm_rng rng, dllm_lik_result *out, dllm_err *err);

#endif
