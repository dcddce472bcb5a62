/* optim.h: a model's trainable state and its update, one interface for every model.
 *
 * The trainable vector (the parameters, or the LoRA adapters), its gradients and the AdamW
 * moments live in the memory of the backend that updates them: the host's, or a device's
 * once the model trains there. A model hands out a dllm_optim (the transformer core's
 * dllm_tf_optim, an architecture of its own through dllm/policy_model.h, the policy's
 * dllm_policy_optim for whichever it runs), and the loops (RL, SFT, checkpoints, plans)
 * call only these, the same for every model and every place its state lives. */
#ifndef DLLM_OPTIM_H
#define DLLM_OPTIM_H

#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>

/* Which vector of the optimizer state, in the trainable order: the parameters, AdamW's
 * m, v. */
typedef enum { DLLM_STATE_PARAMS = 0, DLLM_STATE_ADAM_M = 1, DLLM_STATE_ADAM_V = 2 } dllm_state;

typedef struct dllm_optim_ops {
    /* The trainable vector, contiguous, on the host: current at the call (downloaded
     * where a device's copy is the trainable vector), to read; state_move writes it */
    const float *(*trainable)(void *model, size_t *n);
    /* Its gradients on the host (where the backward accumulates them without a device) */
    float *(*grads)(void *model);
    /* Zeroes the gradients where the backward accumulates them */
    void (*zero_grad)(void *model);
    /* The gradients in the updating backend's memory (*n floats, *be's: the same length
     * and layout on every rank), for an in-place all-reduce between backward and step */
    float *(*grad_buffer)(void *model, size_t *n, dllm_backend **be);
    /* One step: the gradients' global L2 norm, clipped to a->max_norm when that is > 0,
     * then AdamW with the moments the model keeps (zero before its first step). A
     * non-finite norm updates nothing. Returns the norm. */
    double (*step)(void *model, const dllm_adamw_args *a);
    /* The host's trainable vector where it is the newest copy, NULL where a device's is:
     * for checks that must not bring a device's copy down */
    const float *(*trainable_host)(void *model, size_t *n);
    /* Elements [off, off + n) of state s to (write false) or from a host buffer of n
     * floats, so a checkpoint moves it through a bounded buffer from wherever it lives
     * (writing a device's parameters makes its copy the master, as a step does) */
    void (*state_move)(void *model, dllm_state s, size_t off, size_t n, float *buf,
                       bool write);
} dllm_optim_ops;

typedef struct {
    const dllm_optim_ops *ops;
    void *model;
} dllm_optim;

static inline const float *dllm_optim_trainable(dllm_optim o, size_t *n)
{
    return o.ops->trainable(o.model, n);
}
static inline float *dllm_optim_grads(dllm_optim o) { return o.ops->grads(o.model); }
static inline void dllm_optim_zero_grad(dllm_optim o) { o.ops->zero_grad(o.model); }
static inline float *dllm_optim_grad_buffer(dllm_optim o, size_t *n, dllm_backend **be)
{
    return o.ops->grad_buffer(o.model, n, be);
}
static inline double dllm_optim_step(dllm_optim o, const dllm_adamw_args *a)
{
    return o.ops->step(o.model, a);
}
static inline const float *dllm_optim_trainable_host(dllm_optim o, size_t *n)
{
    return o.ops->trainable_host(o.model, n);
}
static inline void dllm_optim_state_read(dllm_optim o, dllm_state s, size_t off, size_t n,
                                         float *dst)
{
    o.ops->state_move(o.model, s, off, n, dst, false);
}
static inline void dllm_optim_state_write(dllm_optim o, dllm_state s, size_t off, size_t n,
                                          const float *src)
{
    o.ops->state_move(o.model, s, off, n, (float *)src, true);
}

#endif
