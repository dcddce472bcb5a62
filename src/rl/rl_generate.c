/* rl_generate.c: completions at a chosen precision for the RL loop (see rl.h).
 *
 * At the rollout precision this is the policy's own rollout (the denoising
 * sampler, or KV-cached AR decoding). At the trainer's it runs the same
 * algorithms on the trainer's logits: the denoising sampler takes any logits
 * callback; AR decoding is done here, one forward of the whole prefix per
 * generated token (no KV cache: evaluation-sized batches only), choosing each
 * token exactly as dllm/ar_sampler.c does (same rule, same random stream). */
#include "src/rl/rl.h"

#include "dllm/ar_sampler.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* AR decoding through a logits callback. */
static int ar_decode(dllm_logits_fn fn, void *ctx, const int32_t *prompts, const uint8_t *prompt_mask,
                     int B, int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                     dllm_rollout *out, dllm_err *err)
{
    const int G = sc->gen_length, V = sc->vocab, T = P + G;
    dllm_ar_cfg ac = {.max_new_tokens = G, .temperature = sc->temperature, .top_p = top_p,
                      .eos_id = sc->eos_id};
    int rc = dllm_ar_check(&ac, V, err);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->B = B;
    out->P = P;
    out->G = G;
    out->tokens = dllm_malloc(sizeof *out->tokens * (size_t)B * T);
    out->commit_step = dllm_malloc(sizeof *out->commit_step * (size_t)B * G);
    out->commit_prob = dllm_malloc(sizeof *out->commit_prob * (size_t)B * G);
    /* canvas (B, T): prompt, then generated tokens; the forward sees the first P+g */
    uint8_t *keymask = dllm_malloc((size_t)B * T);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            out->tokens[(size_t)b * T + t] = t < P ? prompts[(size_t)b * P + t] : sc->eos_id;
            keymask[(size_t)b * T + t] = t < P ? (prompt_mask ? prompt_mask[(size_t)b * P + t] : 1) : 1;
        }
        for (int g = 0; g < G; g++) {
            out->commit_step[(size_t)b * G + g] = (int16_t)g;
            out->commit_prob[(size_t)b * G + g] = 1.0f; /* EOS after the end: probability 1 */
        }
    }
    int32_t *canvas = dllm_malloc(sizeof *canvas * (size_t)B * T);
    uint8_t *km = dllm_malloc((size_t)B * T);
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)B);
    float *logits = dllm_malloc(sizeof *logits * (size_t)B * V);
    void *work = dllm_malloc(dllm_ar_work_bytes(V));
    bool *done = dllm_calloc((size_t)B, sizeof *done);
    for (int g = 0; g < G && !rc; g++) {
        const int Tg = P + g; /* the prefix the next token follows */
        for (int b = 0; b < B; b++) {
            memcpy(canvas + (size_t)b * Tg, out->tokens + (size_t)b * T, sizeof *canvas * (size_t)Tg);
            memcpy(km + (size_t)b * Tg, keymask + (size_t)b * T, (size_t)Tg);
            rows[b] = b * Tg + Tg - 1;
        }
        rc = fn(ctx, canvas, km, B, Tg, rows, B, logits);
        if (rc) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "AR decoding: forward failed at token %d", g);
            break;
        }
        int n_done = 0;
        for (int b = 0; b < B; b++) {
            if (done[b]) {
                n_done++;
                continue;
            }
            dllm_rng r = dllm_rng_make(seed, DLLM_RNG_SAMPLER, (uint64_t)g, (uint64_t)b);
            double lp;
            int32_t tok = dllm_ar_choose(logits + (size_t)b * V, V, ac.temperature, ac.top_p,
                                         dllm_rng_uniform(&r), &lp, NULL, work);
            out->tokens[(size_t)b * T + P + g] = tok;
            out->commit_prob[(size_t)b * G + g] = expf((float)lp);
            if (tok == sc->eos_id) {
                done[b] = true;
                n_done++;
            }
        }
        if (n_done == B)
            break;
    }
    free(canvas);
    free(km);
    free(rows);
    free(logits);
    free(work);
    free(done);
    free(keymask);
    if (rc)
        dllm_rollout_free(out);
    return rc;
}

int rl_generate(dllm_policy *pol, dllm_prec prec, const int32_t *prompts, const uint8_t *prompt_mask,
                int B, int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                dllm_rollout *out, dllm_err *err)
{
    if (prec == DLLM_PREC_ROLLOUT)
        return dllm_policy_rollout(pol, prompts, prompt_mask, B, P, sc, top_p, seed, out, err);
    if (dllm_policy_is_diffusion(pol))
        return dllm_policy_sample_trainer(pol, prompts, prompt_mask, B, P, sc, top_p, seed, out,
                                          err);
    void *ctx;
    dllm_logits_fn fn = dllm_policy_logits(pol, DLLM_PREC_TRAIN_NOGRAD, &ctx);
    return ar_decode(fn, ctx, prompts, prompt_mask, B, P, sc, top_p, seed, out, err);
}
