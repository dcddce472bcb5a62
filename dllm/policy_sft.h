/* policy_sft.h: the SFT objective of either architecture, computed through
 * the policy interface (dllm/policy.h) only, so `sft` and `bench train` need
 * no per-architecture code.
 *
 * A batch is B sequences of T tokens, [prompt][answer], the answer at
 * [prompt_len[b], len[b]) (EOS included); tokens past len[b] are padding.
 *   diffusion (LLaDA): masked-diffusion SFT -- the answer positions with
 *     masked[b,t] = 1 are replaced by the mask token, and
 *     loss = (1/B) sum_b sum_{t masked} -log p(x_t | noisy) / (p_mask[b] * ans_len_b)
 *     with ans_len_b = T - prompt_len[b] (EOS padding to T counts as answer,
 *     as in LLaDA's SFT); len is not used;
 *   autoregressive (Qwen3): next-token cross-entropy on the answer tokens,
 *     loss = mean over the batch's answer tokens of -log p(x_t | x_<t), keys
 *     past len[b] masked; masked and p_mask are not used.
 * Log-probs are summed in double. With backward the TRAIN forward keeps its
 * activations and the gradients accumulate into dllm_optim_grads (the caller
 * zeroes them); without it the TRAIN_NOGRAD forward (the same logits) is used. */
#ifndef DLLM_POLICY_SFT_H
#define DLLM_POLICY_SFT_H

#include "dllm/policy.h"
#include "kernels/rng.h"

/* tokens (B, T); masked (B, T) and p_mask (B): diffusion only (NULL for AR);
 * prompt_len (B) >= 1; len (B) in (prompt_len, T]: AR only (NULL for diffusion).
 * Returns 0 and *loss, or an input error naming the sequence. */
int dllm_policy_sft_loss(dllm_policy *p, const int32_t *tokens, const uint8_t *masked,
                         const double *p_mask, const int32_t *prompt_len, const int *len, int B,
                         int T, bool backward, double *loss, dllm_err *err);

/* One diffusion sequence's mask (T entries) and mask probability *p from stream
 * r: its first uniform gives t and p = (1 - 1e-3) t + 1e-3, then one uniform per
 * answer position [prompt_len, T), in order, masks that position when below p;
 * the prompt stays clean. Runs from the same seed depend on this order. */
void sft_draw_mask(dllm_rng *r, int prompt_len, int T, uint8_t *mask, double *p);

#endif
