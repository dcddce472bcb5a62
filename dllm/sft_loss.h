/* sft_loss.h: the masked-diffusion SFT objective of LLaDA (docs/METHOD.md §1).
 *
 * A sequence is [left padding][prompt][answer], the answer (EOS padding
 * included) at positions [ans_start, ans_start + ans_len). Draw t ~ U(0,1),
 * p = (1 - 1e-3) t + 1e-3, mask each answer token with probability p (the
 * prompt stays clean), run the model on the noisy canvas and take
 *   loss = (1/B) sum_b [ sum_{t masked in b} -log p(x_t | noisy) / (p_b * ans_len_b) ].
 * The backward seeds dlogp = -1 / (p_b * ans_len_b * B) per masked row. */
#ifndef DLLM_SFT_LOSS_H
#define DLLM_SFT_LOSS_H

#include "dllm/llada.h"

typedef struct {
    int B, T;
    const int32_t *tokens;    // (B, T) clean tokens
    const uint8_t *keymask;   // (B, T) 1 = real token, 0 = padding; NULL = all real
    const int32_t *ans_start; // (B) position of the first answer token
    const int32_t *ans_len;   // (B) answer length, >= 1, ans_start + ans_len <= T
} llada_sft_batch;

/* The SFT loss of the batch under the given masks (B, T) and p (B); masked
 * positions must lie inside the answers. With backward, gradients accumulate
 * into the model's trainable gradients (the caller zeroes). Returns NAN and
 * fills err on bad input. */
double llada_sft_loss_batch(dllm_tf *m, const llada_sft_batch *bt, const uint8_t *masked,
                            const double *p, bool backward, dllm_err *err);

/* The common case: no padding keys, answer of sequence b = [prompt_len[b], T).
 * Bad input prints its message to stderr and returns NAN. */
double llada_sft_loss(dllm_tf *m, const int32_t *tokens, const uint8_t *masked,
                      const double *p, const int32_t *prompt_len, int B, int T, bool backward);

#endif
