/* policy_sft.c: the SFT loss through the policy's logits callbacks (see
 * policy_sft.h). Only the scored rows go through the output head; the
 * cross-entropy and its backward are the reference ops, or the device's when the model
 * trains there (the logits never leave it). Also the diffusion batch's mask draw. */
#include "dllm/policy_sft.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row r scores target[r] with loss weight w[r] (dloss/dlogp = -w[r]). */
static int rows_loss(dllm_policy *p, const int32_t *canvas, const uint8_t *keymask, int B, int T,
                     const int32_t *rows, const int32_t *target, const double *w, int R,
                     bool backward, double *loss, dllm_err *err)
{
    const int V = dllm_policy_config(p)->embedding_size;
    void *ctx;
    /* training on a device: the logits stay there, only log-probs and dloss/dlogp cross */
    dllm_logp_fn lfn = backward ? dllm_policy_train_logp(p, &ctx) : NULL;
    if (lfn) {
        float *lp = dllm_malloc(sizeof *lp * (size_t)R), *g = dllm_malloc(sizeof *g * (size_t)R);
        int rc = lfn(ctx, canvas, keymask, B, T, rows, target, R, lp);
        if (rc) {
            rc = dllm_err_set(err, rc, "sft batch: the model rejected the batch");
        } else {
            double s = 0;
            for (int r = 0; r < R; r++) {
                s -= w[r] * (double)lp[r];
                g[r] = (float)-w[r];
            }
            *loss = s;
            dllm_policy_backward_logp(ctx, g);
        }
        free(lp);
        free(g);
        return rc;
    }
    dllm_logits_fn fn = dllm_policy_logits(p, backward ? DLLM_PREC_TRAIN : DLLM_PREC_TRAIN_NOGRAD,
                                           &ctx);
    float *logits = dllm_malloc(sizeof *logits * (size_t)R * V);
    float *logp = dllm_malloc(sizeof *logp * (size_t)R), *lse = dllm_malloc(sizeof *lse * (size_t)R);
    int rc = fn(ctx, canvas, keymask, B, T, rows, R, logits);
    if (rc) {
        rc = dllm_err_set(err, rc, "sft batch: the model rejected the batch");
    } else {
        op_xent_fwd(logp, lse, logits, target, R, V);
        double s = 0;
        for (int r = 0; r < R; r++)
            s -= w[r] * (double)logp[r];
        *loss = s;
        if (backward) {
            float *dlogp = dllm_malloc(sizeof *dlogp * (size_t)R);
            float *dlogits = dllm_calloc((size_t)R * V, sizeof *dlogits);
            for (int r = 0; r < R; r++)
                dlogp[r] = (float)-w[r];
            op_xent_bwd(dlogits, dlogp, logits, lse, target, R, V);
            dllm_policy_backward(ctx, dlogits);
            free(dlogp);
            free(dlogits);
        }
    }
    free(logits);
    free(logp);
    free(lse);
    return rc;
}

static int check_tokens(const dllm_policy *p, const int32_t *tokens, int B, int T, dllm_err *err)
{
    const int V = dllm_policy_config(p)->vocab_size;
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: token %d at %d outside [0, %d)",
                                (int)(i / (size_t)T), tokens[i], (int)(i % (size_t)T), V);
    return 0;
}

static int diffusion_loss(dllm_policy *p, const int32_t *tokens, const uint8_t *masked,
                          const double *p_mask, const int32_t *prompt_len, int B, int T,
                          bool backward, double *loss, dllm_err *err)
{
    const int mask_id = dllm_policy_config(p)->mask_token_id;
    const size_t N = (size_t)B * T;
    for (int b = 0; b < B; b++) {
        if (!(p_mask[b] > 0 && p_mask[b] <= 1))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: mask probability %g outside (0, 1]", b,
                                p_mask[b]);
        for (int t = 0; t < prompt_len[b]; t++)
            if (masked[(size_t)b * T + t])
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "sft batch: sequence %d: masked position %d is in the prompt",
                                    b, t);
    }
    int32_t *noisy = dllm_malloc(sizeof *noisy * N);
    int32_t *rows = dllm_malloc(sizeof *rows * N), *target = dllm_malloc(sizeof *target * N);
    double *w = dllm_malloc(sizeof *w * N);
    int R = 0;
    for (size_t n = 0; n < N; n++) {
        const int b = (int)(n / (size_t)T);
        noisy[n] = masked[n] ? mask_id : tokens[n];
        if (masked[n]) {
            rows[R] = (int32_t)n;
            target[R] = tokens[n];
            w[R++] = 1.0 / (p_mask[b] * (T - prompt_len[b])) / B;
        }
    }
    int rc = 0;
    *loss = 0;
    if (R > 0) /* nothing masked: no term, no gradient */
        rc = rows_loss(p, noisy, NULL, B, T, rows, target, w, R, backward, loss, err);
    free(noisy);
    free(rows);
    free(target);
    free(w);
    return rc;
}

static int ar_loss(dllm_policy *p, const int32_t *tokens, const int32_t *prompt_len, const int *len,
                   int B, int T, bool backward, double *loss, dllm_err *err)
{
    int R = 0;
    for (int b = 0; b < B; b++) {
        if (len[b] <= prompt_len[b] || len[b] > T)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: answer [%d, %d) empty or past %d", b,
                                prompt_len[b], len[b], T);
        R += len[b] - prompt_len[b];
    }
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)R), *target = dllm_malloc(sizeof *target * (size_t)R);
    double *w = dllm_malloc(sizeof *w * (size_t)R);
    uint8_t *km = dllm_malloc((size_t)B * T);
    int k = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            km[(size_t)b * T + t] = t < len[b];
        /* position t predicts token t + 1 */
        for (int t = prompt_len[b] - 1; t < len[b] - 1; t++) {
            rows[k] = b * T + t;
            target[k] = tokens[(size_t)b * T + t + 1];
            w[k++] = 1.0 / R;
        }
    }
    int rc = rows_loss(p, tokens, km, B, T, rows, target, w, R, backward, loss, err);
    free(rows);
    free(target);
    free(w);
    free(km);
    return rc;
}

int dllm_policy_sft_loss(dllm_policy *p, const int32_t *tokens, const uint8_t *masked,
                         const double *p_mask, const int32_t *prompt_len, const int *len, int B,
                         int T, bool backward, double *loss, dllm_err *err)
{
    *loss = NAN;
    if (B < 1 || T < 2)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "sft batch: empty (B=%d, T=%d)", B, T);
    for (int b = 0; b < B; b++)
        if (prompt_len[b] < 1 || prompt_len[b] >= T)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: prompt length %d outside [1, %d)", b,
                                prompt_len[b], T);
    int rc = check_tokens(p, tokens, B, T, err);
    if (rc)
        return rc;
    if (dllm_policy_is_diffusion(p)) {
        if (!masked || !p_mask)
            return dllm_err_set(err, DLLM_EXIT_INPUT, "sft batch: masked diffusion needs masks");
        return diffusion_loss(p, tokens, masked, p_mask, prompt_len, B, T, backward, loss, err);
    }
    if (!len)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "sft batch: next-token SFT needs lengths");
    return ar_loss(p, tokens, prompt_len, len, B, T, backward, loss, err);
}

void sft_draw_mask(dllm_rng *r, int prompt_len, int T, uint8_t *mask, double *p)
{
    const double pb = (1.0 - 1e-3) * dllm_rng_uniform(r) + 1e-3;
    *p = pb;
    memset(mask, 0, (size_t)T);
    for (int i = prompt_len; i < T; i++)
        mask[i] = dllm_rng_uniform(r) < pb;
}
