/* qwen35_policy.c: Qwen3.5 behind the policy (dllm/policy_model.h) -- the model of
 * dllm/qwen35.h as the trainer (fp32 master weights, their gradients and AdamW
 * moments in one vector each; under LoRA the adapters') and a rollout copy (the trainer
 * itself, or a bf16, FP8, INT8 or NVFP4 copy of the weights with LoRA merged), with
 * autoregressive rollouts through the AR sampler's loop (dllm/ar_sampler.h) over one cache
 * per batch row. The descriptor's config.json reader and writer are dllm/qwen35_config.c.
 *
 * The bf16 trainer (model.trainer_precision bf16) is the trainer model with its weights
 * bf16-rounded as qwen35_round_bf16 rounds them (the inputs of those projections too,
 * forward and backward); the model keeps the fp32 master weights beside them
 * (qwen35_keep_master), the gradients computed through the rounded model step them straight
 * through, and every sync rounds them into the trainer again. LoRA's adapters stay fp32 on
 * top, as in the core. On a device (qwen35_to_backend) every array is the device's; what
 * crosses to the host is what the policy's table hands over: logits, log-probs and the
 * state a checkpoint moves. */
#include "dllm/arch.h"
#include "dllm/json_util.h"
#include "dllm/policy_model.h"
#include "dllm/qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model behind the policy ------------------------------------------------------- */

typedef struct {
    qwen35_model *m; /* the trainer (bf16-rounded weights and fp32 masters under a bf16 one) */
    qwen35_model *r; /* the rollout copy (on the trainer's backend); NULL: the trainer */
} q35;

static int q35_open(void **impl, const char *dir, const char *preset, uint64_t seed,
                    dllm_model_config *mc, dllm_err *err)
{
    q35 *q = dllm_calloc(1, sizeof *q);
    int rc;
    if (dir) {
        rc = qwen35_load(&q->m, dir, err);
    } else {
        qwen35_config c;
        rc = qwen35_preset(preset, &c, err);
        /* random weights are made in memory: a published size is its checkpoint's */
        if (!rc && qwen35_preset_published(preset))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "model.preset %s: the published model's sizes (%.2fB parameters): "
                              "give its checkpoint (model.path, --model)", preset,
                              (double)qwen35_num_params(&c) / 1e9);
        if (!rc && !(q->m = qwen35_create(&c, seed)))
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "model.preset %s: cannot be made", preset);
    }
    if (rc) {
        free(q);
        return rc;
    }
    const qwen35_config *c = qwen35_config_of(q->m);
    dllm_model_config keep = *mc;
    *mc = (dllm_model_config){
        .arch = DLLM_ARCH_QWEN35, .d_model = c->C, .n_layers = c->L, .n_heads = c->NH,
        .n_kv_heads = c->NKV, .head_dim = c->HD, .mlp_hidden = c->H, .vocab_size = c->V,
        .embedding_size = c->V, .max_seq_len = c->max_pos > 0 ? c->max_pos : 4096,
        .rope_theta = c->theta, .rms_norm_eps = c->eps, .mask_token_id = -1,
        .eos_token_id = c->eos_token_id, .bos_token_id = c->bos_token_id,
        .pad_token_id = keep.pad_token_id, /* the checkpoint's or the preset's */
        .weight_tying = c->tied};
    snprintf(mc->torch_dtype, sizeof mc->torch_dtype, "%s",
             keep.torch_dtype[0] ? keep.torch_dtype : "float32");
    *impl = q;
    return 0;
}

static void q35_free(void *impl)
{
    q35 *q = impl;
    if (!q)
        return;
    qwen35_free(q->m);
    qwen35_free(q->r);
    free(q);
}

static int q35_to_device(void *impl, dllm_backend *be, dllm_err *err)
{
    q35 *q = impl;
    return qwen35_to_backend(q->m, be, err);
}

static int q35_lora_enable(void *impl, int rank, double alpha, const char *const *targets,
                           int n, const char *what, uint64_t seed, dllm_err *err)
{
    q35 *q = impl;
    int mask;
    int rc = qwen35_lora_mask(targets, n, what, &mask, err);
    if (rc)
        return rc;
    qwen35_lora_enable(q->m, rank, (float)alpha, mask, seed);
    return 0;
}

static int q35_lora_info(void *impl, float *alpha, const char **names, int cap, int *n)
{
    q35 *q = impl;
    int mask, rank = qwen35_lora_info(q->m, alpha, &mask), k = 0;
    for (int j = 0; rank && j < QWEN35_NLORA; j++)
        if ((mask >> j) & 1) {
            if (names && k < cap)
                names[k] = qwen35_lora_names[j];
            k++;
        }
    if (n)
        *n = k;
    return rank;
}

static int q35_lora_save(void *impl, const char *path, dllm_err *err)
{
    q35 *q = impl;
    return qwen35_lora_save(q->m, path, err);
}

static int q35_lora_load(void *impl, const char *path, dllm_err *err)
{
    q35 *q = impl;
    return qwen35_lora_load(q->m, path, err);
}

/* dst (a model of the trainer's config; NULL: a new one) = the trainer's fp32 weights with
 * LoRA merged: what the rollout copies and merged checkpoints are made from. */
static qwen35_model *merged_into(const q35 *q, qwen35_model *dst)
{
    if (!dst)
        dst = qwen35_clone(q->m); /* the masters where the trainer keeps them */
    else
        qwen35_copy_weights(dst, q->m);
    qwen35_lora_merge(q->m, dst);
    return dst;
}

static int q35_logits(void *impl, bool rollout, bool keep, const int32_t *tokens,
                      const uint8_t *keymask, int B, int T, const int32_t *rows, int n_rows,
                      float *logits)
{
    q35 *q = impl;
    dllm_err err = {0};
    qwen35_model *m = rollout && q->r ? q->r : q->m;
    int rc = qwen35_forward(m, tokens, keymask, B, T, rows, n_rows, logits, keep && !rollout,
                            &err);
    if (rc)
        fprintf(stderr, "error: %s\n", err.msg);
    return rc;
}

static void q35_backward(void *impl, const float *dlogits)
{
    q35 *q = impl;
    qwen35_backward(q->m, dlogits);
}

/* The optimizer state wherever the model runs (qwen35.h: the trainable vector is the
 * masters where the model keeps them, else the weights or the adapters). */
static bool on_host(const q35 *q) { return qwen35_backend(q->m)->kind == DLLM_BACKEND_CPU; }

static const float *q35_trainable(void *impl, size_t *n)
{
    q35 *q = impl;
    return qwen35_params_host(q->m, n);
}

static const float *q35_trainable_host(void *impl, size_t *n)
{
    q35 *q = impl;
    return on_host(q) ? qwen35_params(q->m, n) : NULL;
}

static float *q35_grads(void *impl)
{
    q35 *q = impl;
    return on_host(q) ? qwen35_grads(q->m) : NULL; /* a device's: grad_buffer */
}

static void q35_zero_grad(void *impl)
{
    q35 *q = impl;
    qwen35_zero_grad(q->m);
}

static float *q35_grad_buffer(void *impl, size_t *n, dllm_backend **be)
{
    q35 *q = impl;
    qwen35_params(q->m, n);
    *be = qwen35_backend(q->m);
    return qwen35_grads(q->m);
}

static double q35_optim_step(void *impl, const dllm_adamw_args *a)
{
    q35 *q = impl;
    return qwen35_optim_step(q->m, a);
}

static void q35_state_move(void *impl, dllm_state s, size_t off, size_t n, float *buf, bool write)
{
    q35 *q = impl;
    qwen35_vec v = s == DLLM_STATE_PARAMS   ? QWEN35_VEC_PARAMS
                   : s == DLLM_STATE_ADAM_M ? QWEN35_VEC_ADAM_M
                                            : QWEN35_VEC_ADAM_V;
    qwen35_vec_move(q->m, v, off, n, buf, write);
}

static const dllm_optim_ops q35_optim = {
    .trainable = q35_trainable, .grads = q35_grads, .zero_grad = q35_zero_grad,
    .grad_buffer = q35_grad_buffer, .step = q35_optim_step,
    .trainable_host = q35_trainable_host, .state_move = q35_state_move,
};

/* A bf16 trainer's weights: the masters rounded (again). */
static void round_trainer(q35 *q)
{
    qwen35_weights_from_master(q->m);
    qwen35_round_bf16(q->m);
}

static void q35_trainer_changed(void *impl)
{
    q35 *q = impl;
    /* under LoRA the trainable vector is the adapters, read as they are */
    if (qwen35_has_master(q->m) && !qwen35_lora_info(q->m, NULL, NULL))
        round_trainer(q);
}

static int q35_sync(void *impl, const dllm_precision *p, dllm_err *err)
{
    q35 *q = impl;
    if (p->trainer_bf16) {
        qwen35_keep_master(q->m); /* the first sync: the trainer holds the fp32 weights */
        round_trainer(q);
    }
    if (p->rollout == DLLM_ROLLOUT_TRAINER) {
        qwen35_free(q->r);
        q->r = NULL;
        return 0;
    }
    q->r = merged_into(q, q->r);
    if (p->rollout == DLLM_ROLLOUT_BF16) {
        qwen35_round_bf16(q->r);
        return 0;
    }
    return qwen35_quantise(q->r, p, err);
}

/* The AR sampler's decoder over one cache per row: each extend appends a row's real
 * tokens (left padding dropped) and keeps the logits of its last one, in the memory of the
 * decoder's backend: the model's, so that a model on a device chooses there (only the
 * step's B tokens come to the host, to drop the padding), or the host's where the device
 * cannot choose (a nucleus without DLLM_OP_AR_NUCLEUS: the logits come down). */
typedef struct {
    qwen35_model *m;
    dllm_backend *be;  /* the decoder's: tokens and logits in its memory */
    qwen35_cache **kc; /* (B) */
    int B, V;
    float *lg;         /* (B, V) the last logits of each row, be's */
    int32_t *ids;      /* (T) scratch */
    int32_t *tok;      /* (B, T) the step's tokens on the host */
    int cap;
} q35_dec;

static int dec_extend(void *ctx, const int32_t *tokens, const uint8_t *keymask, int T,
                      dllm_err *err)
{
    q35_dec *d = ctx;
    if (T > d->cap) {
        free(d->ids), free(d->tok);
        d->ids = dllm_malloc((size_t)T * sizeof(int32_t));
        d->tok = dllm_malloc((size_t)d->B * T * sizeof(int32_t));
        d->cap = T;
    }
    d->be->ops->download(d->be, d->tok, tokens, (size_t)d->B * T * sizeof(int32_t));
    bool own = d->be == qwen35_backend(d->m); /* the logits stay where the model runs */
    for (int b = 0; b < d->B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            if (!keymask || keymask[(size_t)b * T + t])
                d->ids[n++] = d->tok[(size_t)b * T + t];
        float *lg = d->lg + (size_t)b * d->V;
        int rc = !n  ? 0
                 : own ? qwen35_extend_last(d->m, d->kc[b], d->ids, n, lg, err)
                       : qwen35_extend(d->m, d->kc[b], d->ids, n, lg, false, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int dec_head(void *ctx, int r0, int n, float *logits, dllm_err *err)
{
    (void)err;
    q35_dec *d = ctx;
    d->be->ops->copy(d->be, logits, d->lg + (size_t)r0 * d->V, (size_t)n * d->V * sizeof(float));
    return 0;
}

static int q35_rollout(void *impl, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                       int P, const dllm_ar_cfg *c, uint64_t seed, dllm_ar_rollout *out,
                       dllm_err *err)
{
    q35 *q = impl;
    qwen35_model *m = q->r ? q->r : q->m;
    int V = qwen35_config_of(m)->V;
    dllm_backend *be = qwen35_backend(m);
    if (c->top_p < 1.0 && c->temperature > 0 && !dllm_backend_supports(be, DLLM_OP_AR_NUCLEUS))
        be = dllm_backend_cpu(); /* the nucleus is chosen on the host */
    q35_dec d = {m, be, dllm_calloc((size_t)B, sizeof(qwen35_cache *)), B, V,
                 be->ops->alloc(be, ((size_t)B * V + 1) * sizeof(float)), NULL, NULL, 0};
    for (int b = 0; b < B; b++)
        d.kc[b] = qwen35_cache_new(m, P + c->max_new_tokens + 1);
    dllm_ar_decoder dec = {&d, be, V, B, dec_extend, dec_head};
    int rc = dllm_ar_sample_decoder(&dec, prompts, prompt_mask, B, P, c, seed, out, err);
    for (int b = 0; b < B; b++)
        qwen35_cache_free(d.kc[b]);
    free(d.kc);
    be->ops->free(be, d.lg);
    free(d.ids), free(d.tok);
    return rc;
}

static int q35_save(void *impl, const char *dir, st_dtype dtype, dllm_err *err)
{
    q35 *q = impl;
    /* HF's default shard size; LoRA merged, a bf16 trainer's fp32 masters */
    bool own = qwen35_has_master(q->m) || qwen35_lora_info(q->m, NULL, NULL);
    qwen35_model *m = own ? merged_into(q, NULL) : q->m;
    int rc = qwen35_save(m, dir, dtype, (size_t)5000000000ull, err);
    if (own)
        qwen35_free(m);
    return rc;
}

const dllm_model_ops qwen35_model_ops = {
    .open = q35_open, .free = q35_free, .to_device = q35_to_device,
    .lora_enable = q35_lora_enable,
    .lora_info = q35_lora_info, .lora_save = q35_lora_save, .lora_load = q35_lora_load,
    .logits = q35_logits,
    .backward = q35_backward, .optim = &q35_optim, .trainer_changed = q35_trainer_changed,
    .sync = q35_sync,
    .rollout = q35_rollout, .save = q35_save,
};

int qwen35_config_for(const dllm_model_config *mc, const char *dir, qwen35_config *qc,
                      dllm_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir ? dir : "");
    FILE *f = dir && *dir ? fopen(path, "r") : NULL;
    if (f) {
        fclose(f);
        return qwen35_config_read(path, qc, err);
    }
    const char *p = qwen35_preset_of(mc);
    if (!p)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "model: a Qwen3.5 model of these sizes (hidden %d, %d layers) is no "
                            "preset (%s): give model.path", mc->d_model, mc->n_layers,
                            QWEN35_PRESETS);
    return qwen35_preset(p, qc, err);
}
