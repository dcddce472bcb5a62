#include "dllm/estimators.h"
#include "dllm/lik_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dllm_estimator_parse(const char *s, dllm_estimator *out)
{
    if (!strcmp(s, "one_step"))
        *out = EST_ONE_STEP;
    else if (!strcmp(s, "elbo"))
        *out = EST_ELBO;
    else if (!strcmp(s, "trajectory"))
        *out = EST_TRAJECTORY;
    else if (!strcmp(s, "exact"))
        *out = EST_AR_EXACT;
    else
        return -1;
    return 0;
}

const char *dllm_estimator_name(dllm_estimator e)
{
    switch (e) {
    case EST_ONE_STEP: return "one_step";
    case EST_ELBO: return "elbo";
    case EST_TRAJECTORY: return "trajectory";
    case EST_AR_EXACT: return "exact";
    }
    return "?";
}

void dllm_lik_result_free(dllm_lik_result *r)
{
    free(r->token_logp);
    r->token_logp = NULL;
}

void dllm_elbo_mask_counts(dllm_rng *rng, int L, int K, int *n)
{
    int k0 = 1 + (int)dllm_rng_below(rng, (uint64_t)L);
    for (int j = 0; j < K; j++) {
        /* torch.round(linspace(k0, k0 + (K-1) L/K, K)): half to even */
        double x = nearbyint((double)k0 + (double)j * ((double)L / (double)K));
        n[j] = (int)(((long)x - 1) % L) + 1;
    }
}

int dllm_seq_logprob(dllm_logits_fn fn, void *model, const int32_t *prompt, int P,
                     const int32_t *completion, int L, const int16_t *commit_step,
                     const dllm_lik_cfg *c, dllm_rng rng, dllm_lik_result *out, dllm_err *err)
{
    return dllm_seq_logprob_logp(fn, NULL, model, prompt, P, completion, L, commit_step, c, rng,
                                 out, err);
}

int dllm_seq_logprob_logp(dllm_logits_fn fn, dllm_logp_fn lfn, void *model,
                          const int32_t *prompt, int P, const int32_t *completion, int L,
                          const int16_t *commit_step, const dllm_lik_cfg *c, dllm_rng rng,
                          dllm_lik_result *out, dllm_err *err)
{
    /* one sequence is a plan with one sequence: the masks, rows and sums are the
     * batched code's, so single and batched estimates cannot drift apart */
    memset(out, 0, sizeof *out);
    dllm_lik_plan p;
    if (dllm_lik_plan_build_one(&p, c, prompt, P, completion, L, commit_step, rng, err))
        return err->code;
    out->L = L;
    out->token_logp = dllm_malloc(sizeof *out->token_logp * (size_t)L);
    int rc = dllm_lik_plan_eval_logp(&p, fn, lfn, model, 64, &out->seq_logp, out->token_logp,
                                     &out->mc_se, NULL, err);
    dllm_lik_plan_free(&p);
    if (rc)
        dllm_lik_result_free(out);
    return rc;
}
