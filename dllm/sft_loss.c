/* sft_loss.c: the masked-diffusion SFT loss (see sft_loss.h). Only the masked
 * rows go through ln_f and the head; the loss is summed in double from the
 * per-row log-probs of op_xent_fwd. */
#include "dllm/sft_loss.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_batch(const dllm_tf *m, const llada_sft_batch *bt, const uint8_t *masked,
                       const double *p, dllm_err *err)
{
    int V = dllm_tf_config(m)->vocab_size;
    for (int b = 0; b < bt->B; b++) {
        int s = bt->ans_start[b], n = bt->ans_len[b];
        if (s < 0 || n < 1 || s + n > bt->T)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: answer [%d, %d) outside [0, %d)", b, s,
                                s + n, bt->T);
        if (!(p[b] > 0.0 && p[b] <= 1.0))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "sft batch: sequence %d: mask probability %g outside (0, 1]", b,
                                (double)p[b]);
        for (int t = 0; t < bt->T; t++) {
            size_t i = (size_t)b * bt->T + t;
            if (masked[i] && (t < s || t >= s + n))
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "sft batch: sequence %d: masked position %d outside the "
                                    "answer [%d, %d)", b, t, s, s + n);
            if (bt->tokens[i] < 0 || bt->tokens[i] >= V)
                return dllm_err_set(err, DLLM_EXIT_INPUT,
                                    "sft batch: sequence %d: token %d at %d outside [0, %d)", b,
                                    bt->tokens[i], t, V);
        }
    }
    return 0;
}

double llada_sft_loss_batch(dllm_tf *m, const llada_sft_batch *bt, const uint8_t *masked,
                            const double *p, bool backward, dllm_err *err)
{
    if (bt->B <= 0 || bt->T <= 0) {
        dllm_err_set(err, DLLM_EXIT_INPUT, "sft batch: empty (B=%d, T=%d)", bt->B, bt->T);
        return NAN;
    }
    if (check_batch(m, bt, masked, p, err))
        return NAN;
    const dllm_model_config *cfg = dllm_tf_config(m);
    int B = bt->B, T = bt->T, N = B * T, V = cfg->embedding_size;

    // noisy canvas and the masked rows
    int32_t *noisy = dllm_malloc((size_t)N * sizeof(int32_t));
    int32_t *rows = dllm_malloc((size_t)N * sizeof(int32_t) + 1);
    int32_t *target = dllm_malloc((size_t)N * sizeof(int32_t) + 1);
    double *wrow = dllm_malloc((size_t)N * sizeof(double) + 1); /* 1 / (p * len) */
    int R = 0;
    for (int n = 0; n < N; n++) {
        int b = n / T;
        noisy[n] = masked[n] ? cfg->mask_token_id : bt->tokens[n];
        if (masked[n]) {
            rows[R] = n;
            target[R] = bt->tokens[n];
            wrow[R++] = 1.0 / (p[b] * bt->ans_len[b]);
        }
    }
    double loss = 0.0;
    if (R > 0) {
        float *logits = dllm_malloc((size_t)R * V * sizeof(float));
        float *logp = dllm_malloc((size_t)R * sizeof(float));
        float *lse = dllm_malloc((size_t)R * sizeof(float));
        int rc = backward ? dllm_tf_forward(m, noisy, bt->keymask, B, T, rows, R, logits)
                          : dllm_tf_forward_nograd(m, noisy, bt->keymask, B, T, rows, R, logits);
        if (rc) {
            dllm_err_set(err, rc, "sft batch: the model rejected the batch (see above)");
            loss = NAN;
        } else {
            op_xent_fwd(logp, lse, logits, target, R, V);
            for (int r = 0; r < R; r++)
                loss -= wrow[r] * (double)logp[r];
            loss /= B;
            if (backward) {
                float *dlogp = dllm_malloc((size_t)R * sizeof(float));
                float *dlogits = dllm_calloc((size_t)R * V, sizeof(float));
                for (int r = 0; r < R; r++)
                    dlogp[r] = (float)(-wrow[r] / B);
                op_xent_bwd(dlogits, dlogp, logits, lse, target, R, V);
                dllm_tf_backward(m, dlogits);
                free(dlogp);
                free(dlogits);
            }
        }
        free(logits);
        free(logp);
        free(lse);
    }
    free(noisy);
    free(rows);
    free(target);
    free(wrow);
    return loss;
}

double llada_sft_loss(dllm_tf *m, const int32_t *tokens, const uint8_t *masked,
                      const double *p, const int32_t *prompt_len, int B, int T, bool backward)
{
    int32_t *ans_len = dllm_malloc((size_t)(B > 0 ? B : 1) * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        ans_len[b] = T - prompt_len[b];
    llada_sft_batch bt = {B, T, tokens, NULL, prompt_len, ans_len};
    dllm_err err = {0};
    double loss = llada_sft_loss_batch(m, &bt, masked, p, backward, &err);
    if (err.code)
        fprintf(stderr, "%s\n", err.msg);
    free(ans_len);
    return loss;
}
