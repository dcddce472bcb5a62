/* sample.h: the samplers' per-row math on the host -- what the CPU backend's sampler
 * entries (kernels/backend.h) run for each row, and what the CUDA kernels are checked
 * against.
 *
 * Autoregressive choice (dllm/ar_sampler.h has the whole contract): from the last
 * logits z (V of them), temperature 0: argmax z, ties to the lowest id (sampling log-prob
 * 0); otherwise p = softmax(z / temperature) (double), restricted to the nucleus -- the
 * smallest set of most probable tokens whose mass reaches top_p (top_p = 1 keeps all)
 * -- renormalised, and sampled by inverse CDF over the kept ids in increasing id order
 * with the uniform u. */
#ifndef DLLM_SAMPLE_H
#define DLLM_SAMPLE_H

#include "kernels/base.h"

#include <stddef.h>
#include <stdint.h>

/* The sampling distribution of one row of logits [V]: probs[V] (double,
 * summing to 1 over the nucleus, 0 outside it). temperature > 0. work holds
 * V doubles and V ints' worth of scratch (dllm_ar_work_bytes(V)); NULL allocates. */
size_t dllm_ar_work_bytes(int V);
void dllm_ar_dist(const float *logits, int V, double temperature, double top_p, double *probs,
                  void *work);
/* One choice from logits [V] with uniform u in (0, 1) as described above;
 * *logp and *logp_t1 (may be NULL) receive the two log-probs. */
int32_t dllm_ar_choose(const float *logits, int V, double temperature, double top_p, double u,
                       double *logp, double *logp_t1, void *work);

#endif
