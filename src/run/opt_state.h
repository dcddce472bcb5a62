/* opt_state.h: the exact optimizer state a checkpoint holds for resuming
 * (optimizer.safetensors, the same file for `sft` and `train`): the trainable vector
 * "trainable", the AdamW moments "adam_m" and "adam_v", and optional host vectors of
 * the same length ("reference": the KL reference policy). The model's state is
 * streamed from and to wherever it lives (dllm_optim_state_read / _write: the host, or
 * the device it trains on), a bounded chunk at a time through one host buffer: no
 * second copy of the state is made. */
#ifndef DLLM_OPT_STATE_H
#define DLLM_OPT_STATE_H

#include "dllm/policy.h"

typedef struct {
    size_t n;               /* the trainable vector's length */
    dllm_policy *p;         /* whose trainable vector and AdamW moments */
    const char *extra_name; /* NULL, or one more host vector of n floats */
    float *extra;
} opt_state;

/* Writes PATH (through PATH.tmp). */
int opt_state_save(const opt_state *s, const char *path, dllm_err *err);
/* Reads PATH into the state's vectors (each tensor present with shape [n]; errors name
 * file and tensor). */
int opt_state_load(const opt_state *s, const char *path, dllm_err *err);

#endif
