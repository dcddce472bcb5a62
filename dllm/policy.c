/* policy.c: the policy interface (policy.h) over the transformer core.
 *
 * A policy owns one dllm_tf (dllm/transformer.h): the fp32 master weights
 * (+ LoRA), the trainer's bf16 copy when the trainer is bf16, and the rollout
 * copy (bf16 or FP8 W8A8, LoRA merged) -- dllm/precision.h. The logits
 * callbacks take the policy itself as their context:
 *   TRAIN         dllm_tf_forward (keeps activations; dllm_policy_backward follows)
 *   TRAIN_NOGRAD  dllm_tf_forward_nograd
 *   ROLLOUT       dllm_tf_forward_rollout (host: its own buffers, TRAIN activations
 *                 survive; a device that trains: not, dllm/transformer.h)
 * The rollout copy is rebuilt by dllm_policy_sync_rollout after every weight
 * change (the RL loop calls it after each optimizer step); open and
 * load_adapter sync by themselves.
 *
 * The architecture matters in one place: rollouts. A diffusion model is
 * sampled by its family's sampler -- LLaDA by the block denoising sampler
 * (dllm/sampler.h), Dream by its timestep-schedule sampler
 * (dllm/dream_sampler.h, settings from dllm_policy_set_dream); an
 * autoregressive one (Qwen3)
 * by KV-cache decoding (dllm/ar_sampler.h) at the rollout copy's numerics
 * (qwen3_decode_at_rollout) with commit_step[t] = t and commit_prob = the
 * sampling probability of token t. Everything else comes from the
 * architecture descriptor (dllm/arch.h), LoRA target names included.
 *
 * With cfg.device cuda the model runs on the CUDA backend (dllm_tf_to_device): its
 * forwards, and once the caller trains there (dllm_tf_device_train: train, sft) the
 * backward and the optimizer too, whose state then lives on the device; sync_rollout
 * rebuilds the rollout copy there.
 *
 * An architecture the core does not compute (its descriptor's `model`: Qwen3.5) is
 * the model behind the table of dllm/policy_model.h instead of a dllm_tf: every call
 * below dispatches to it where it would call the core (p->ops; p->m is NULL).
 *
 * Adapters use the PEFT layout: DIR/adapter_model.safetensors (lora_A/lora_B
 * under base_model.model.<module>.lora_{A,B}.weight, F32) and
 * DIR/adapter_config.json (peft_type LORA, r, lora_alpha, target_modules, ...). */
#include "dllm/policy.h"
#include "dllm/ar_sampler.h"
#include "dllm/block_cache.h"
#include "dllm/dream_sampler.h"
#include "dllm/json_util.h"
#include "dllm/policy_model.h"
#include "dllm/qwen3.h"
#include "dllm/transformer.h"
#include "kernels/backend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct dllm_policy {
    const dllm_arch_desc *arch;
    dllm_tf *m;
    dllm_precision prec;
    char base[4096]; /* base_model_name_or_path of saved adapters */
    uint64_t seed;
    dllm_dream_cfg dream; /* Dream rollouts (alg, eps, alg_temp, top_k; top_p per call) */
    const dllm_model_ops *ops; /* a model of its own (arch->model), else NULL */
    void *impl;                /* its state */
    dllm_model_config mc;      /* its config */
};

/* The architecture's own model (dllm/policy_model.h): opened, moved to the device, its
 * LoRA adapters made, its rollout copy built. */
static int open_own(dllm_policy *p, const dllm_policy_cfg *c, dllm_model_config *mc,
                    dllm_err *err)
{
    p->ops = p->arch->model;
    dllm_backend *be = NULL;
    int rc = dllm_policy_device_parse(c->device, c->device_flag ? c->device_flag : "device", &be,
                                      err);
    p->mc = *mc;
    if (!rc)
        rc = p->ops->open(&p->impl, c->path && *c->path ? c->path : NULL, c->preset, c->seed,
                          &p->mc, err);
    if (!rc && be)
        rc = p->ops->to_device(p->impl, be, err);
    if (!rc && c->lora_rank > 0)
        rc = p->ops->lora_enable(p->impl, c->lora_rank, c->lora_alpha, c->lora_targets,
                                 c->n_lora_targets, "model.lora.targets", c->seed, err);
    return rc ? rc : p->ops->sync(p->impl, &p->prec, err);
}

/* HF's default shard size for merged checkpoints. */
static const size_t SHARD_BYTES = (size_t)5000000000ull;

static int parse_arch(const char *s, dllm_arch *a, dllm_err *err)
{
    const dllm_arch_desc *d = dllm_arch_by_name(s && *s ? s : "llada");
    if (!d) {
        char names[256];
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.arch '%s': expected %s", s,
                            dllm_arch_list(names, sizeof names));
    }
    *a = d->id;
    return 0;
}

/* LoRA target names (the arch's, dllm/arch.h) -> LORA_* mask; `what` names
 * the place in messages. */
static int targets_mask(const dllm_arch_desc *arch, const char *const *names, int n,
                        const char *what, int *mask, dllm_err *err)
{
    *mask = 0;
    for (int i = 0; i < n; i++) {
        int bit = dllm_arch_lora_bit(arch, names[i]);
        char list[160];
        if (!bit)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "%s: unknown LoRA target '%s' (expected %s)", what,
                                names[i] ? names[i] : "(null)",
                                dllm_arch_lora_list(arch, list, sizeof list));
        *mask |= bit;
    }
    return 0;
}

int dllm_policy_open(dllm_policy **out, const dllm_policy_cfg *c, dllm_err *err)
{
    *out = NULL;
    dllm_precision prec;
    int rc = dllm_precision_parse(&prec, c->trainer, c->rollout, c->fp8_format, c->fp8_scaling,
                                   c->fp8_pow2_scale, err);
    if (!rc)
        rc = dllm_precision_parse_int8(&prec, c->int8_scaling, err);
    if (!rc)
        rc = dllm_precision_parse_nvfp4(&prec, c->nvfp4_scaling, err);
    if (rc)
        return rc;
    int mask = LORA_ALL;
    if (c->lora_rank < 0)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.rank %d: must be >= 0", c->lora_rank);
    if (c->lora_rank > 0 && !(c->lora_alpha > 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "model.lora.alpha %g: must be > 0",
                            c->lora_alpha);

    dllm_policy *p = dllm_calloc(1, sizeof *p);
    p->seed = c->seed;
    p->dream = dllm_dream_cfg_default();
    /* rollout.dream.alg's default: greedy runs commit by confidence */
    p->dream.alg = DLLM_DREAM_MASKGIT_PLUS;
    p->prec = prec;
    dllm_model_config mc;
    dllm_arch id = DLLM_ARCH_LLADA;
    if (c->shape) {
        mc = *c->shape;
        id = mc.arch;
        snprintf(p->base, sizeof p->base, "shape");
    } else if (c->path && *c->path) {
        if ((rc = dllm_config_load(&mc, c->path, err)))
            goto fail;
        id = mc.arch;
        snprintf(p->base, sizeof p->base, "%s", c->path);
    } else {
        if ((rc = parse_arch(c->arch, &id, err)))
            goto fail;
        if (!c->preset || !*c->preset) {
            rc = dllm_err_set(err, DLLM_EXIT_INPUT, "model: give a path or a preset");
            goto fail;
        }
        if ((rc = dllm_config_preset(&mc, id, c->preset, err)))
            goto fail;
        snprintf(p->base, sizeof p->base, "preset:%s", c->preset);
    }
    p->arch = dllm_arch_get(id);
    if (p->arch->model) {
        if ((rc = open_own(p, c, &mc, err)))
            goto fail;
        *out = p;
        return 0;
    }
    if (c->lora_rank > 0 && c->n_lora_targets > 0 &&
        (rc = targets_mask(p->arch, c->lora_targets, c->n_lora_targets, "model.lora.targets",
                           &mask, err)))
        goto fail;
    if (c->shape)
        rc = (p->m = dllm_tf_create_shape(&mc, err)) ? 0 : err->code;
    else if (c->path && *c->path)
        rc = dllm_tf_load(&p->m, c->path, err);
    else
        p->m = dllm_tf_create(&mc, c->seed);
    if (rc)
        goto fail;
    if (c->lora_rank > 0)
        dllm_tf_lora_enable(p->m, c->lora_rank, (float)c->lora_alpha, mask, c->seed);
    if (p->arch->sampler == DLLM_SAMPLER_AR) /* rollouts (KV-cache decoding) at the rollout copy's numerics */
        qwen3_decode_at_rollout(p->m, true);
    dllm_backend *be = c->backend;
    if (c->shape) { /* no values to quantise on the host: the copy is built where it runs */
        if ((be && (rc = dllm_tf_to_device(p->m, be, err))) ||
            (rc = dllm_tf_rollout_sync(p->m, &p->prec, NULL, err)))
            goto fail;
        *out = p;
        return 0;
    }
    if ((rc = dllm_tf_rollout_sync(p->m, &p->prec, NULL, err)))
        goto fail;
    if ((!be && (rc = dllm_policy_device_parse(c->device, c->device_flag ? c->device_flag
                                                                          : "device",
                                               &be, err))) ||
        (be && (rc = dllm_tf_to_device(p->m, be, err))))
        goto fail;
    *out = p;
    return 0;
fail:
    dllm_policy_free(p);
    return rc;
}

int dllm_policy_device_parse(const char *device, const char *flag, dllm_backend **be,
                             dllm_err *err)
{
    *be = NULL;
    if (!device || !*device || !strcmp(device, "cpu"))
        return 0;
    if (strcmp(device, "cuda"))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s %s: expected cpu or cuda", flag, device);
    if (!(*be = dllm_backend_cuda()))
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s cuda: no usable CUDA backend (%s)", flag,
                            dllm_backend_cuda_why());
    return 0;
}

dllm_backend *dllm_policy_device(const dllm_policy *p) { return p->ops ? NULL : dllm_tf_device(p->m); }

void dllm_policy_trainer_changed(dllm_policy *p)
{
    if (!p->ops)
        dllm_tf_trainer_changed(p->m);
    else
        p->ops->trainer_changed(p->impl);
}

void dllm_policy_free(dllm_policy *p)
{
    if (!p)
        return;
    if (p->ops)
        p->ops->free(p->impl);
    dllm_tf_free(p->m);
    free(p);
}

dllm_arch dllm_policy_arch(const dllm_policy *p) { return p->arch->id; }

bool dllm_policy_is_diffusion(const dllm_policy *p) { return dllm_arch_is_diffusion(p->arch); }

dllm_sampler_family dllm_policy_sampler(const dllm_policy *p) { return p->arch->sampler; }

struct dllm_tf *dllm_policy_model(dllm_policy *p) { return p->m; }

const dllm_model_config *dllm_policy_config(const dllm_policy *p)
{
    return p->ops ? &p->mc : dllm_tf_config(p->m);
}

bool dllm_policy_rollout_is_trainer(const dllm_policy *p)
{
    return p->prec.rollout == DLLM_ROLLOUT_TRAINER;
}

/* ---- logits and gradients ------------------------------------------------------------ */

static int train_logits(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                        const int32_t *rows, int n_rows, float *logits)
{
    dllm_policy *p = ctx;
    if (p->ops)
        return p->ops->logits(p->impl, false, true, tokens, keymask, B, T, rows, n_rows, logits);
    return dllm_tf_forward(p->m, tokens, keymask, B, T, rows, n_rows, logits);
}

static int train_nograd_logits(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B,
                               int T, const int32_t *rows, int n_rows, float *logits)
{
    dllm_policy *p = ctx;
    if (p->ops)
        return p->ops->logits(p->impl, false, false, tokens, keymask, B, T, rows, n_rows, logits);
    return dllm_tf_forward_nograd(p->m, tokens, keymask, B, T, rows, n_rows, logits);
}

static int rollout_logits(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                          const int32_t *rows, int n_rows, float *logits)
{
    dllm_policy *p = ctx;
    if (p->ops)
        return p->ops->logits(p->impl, true, false, tokens, keymask, B, T, rows, n_rows, logits);
    return dllm_tf_forward_rollout(p->m, tokens, keymask, B, T, rows, n_rows, logits);
}

dllm_logits_fn dllm_policy_logits(dllm_policy *p, dllm_prec prec, void **ctx)
{
    *ctx = p;
    return prec == DLLM_PREC_ROLLOUT        ? rollout_logits
           : prec == DLLM_PREC_TRAIN_NOGRAD ? train_nograd_logits
                                            : train_logits;
}

static int nograd_logp(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                       const int32_t *rows, const int32_t *targets, int n_rows, float *logp)
{
    dllm_policy *p = ctx;
    return dllm_tf_target_logp(p->m, false, tokens, keymask, B, T, rows, targets, n_rows, logp);
}

static int rollout_logp(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                        const int32_t *rows, const int32_t *targets, int n_rows, float *logp)
{
    dllm_policy *p = ctx;
    return dllm_tf_target_logp(p->m, true, tokens, keymask, B, T, rows, targets, n_rows, logp);
}

dllm_logp_fn dllm_policy_logp(dllm_policy *p, dllm_prec prec, void **ctx)
{
    *ctx = p;
    if (p->ops || !dllm_tf_device(p->m) || prec == DLLM_PREC_TRAIN)
        return NULL;
    return prec == DLLM_PREC_ROLLOUT ? rollout_logp : nograd_logp;
}

void dllm_policy_backward(void *ctx, const float *dlogits)
{
    dllm_policy *p = ctx;
    if (p->ops)
        p->ops->backward(p->impl, dlogits);
    else
        dllm_tf_backward(p->m, dlogits);
}

static int train_logp(void *ctx, const int32_t *tokens, const uint8_t *keymask, int B, int T,
                      const int32_t *rows, const int32_t *targets, int n_rows, float *logp)
{
    dllm_policy *p = ctx;
    return dllm_tf_device_forward_logp(p->m, tokens, keymask, B, T, rows, targets, n_rows, logp);
}

dllm_logp_fn dllm_policy_train_logp(dllm_policy *p, void **ctx)
{
    *ctx = p;
    return !p->ops && dllm_tf_device_trains(p->m) ? train_logp : NULL;
}

void dllm_policy_backward_logp(void *ctx, const float *g)
{
    dllm_policy *p = ctx;
    dllm_tf_device_backward_logp(p->m, g);
}

dllm_optim dllm_policy_optim(dllm_policy *p)
{
    return p->ops ? (dllm_optim){p->ops->optim, p->impl} : dllm_tf_optim(p->m);
}

int dllm_policy_set_recompute(dllm_policy *p, int every)
{
    /* a model of its own keeps what its backward needs (Qwen3.5: each layer's input) */
    return p->ops ? (every < 0 ? DLLM_EXIT_INPUT : 0) : dllm_tf_set_recompute(p->m, every);
}

int dllm_policy_sync_rollout(dllm_policy *p, double *seconds, dllm_err *err)
{
    if (p->ops) {
        double t0 = dllm_now();
        int rc = p->ops->sync(p->impl, &p->prec, err);
        if (seconds)
            *seconds = p->prec.rollout == DLLM_ROLLOUT_TRAINER ? 0 : dllm_now() - t0;
        return rc;
    }
    int rc = dllm_tf_rollout_sync(p->m, &p->prec, seconds, err);
    if (!rc && seconds && !p->prec.trainer_bf16 && p->prec.rollout == DLLM_ROLLOUT_TRAINER)
        *seconds = 0; /* no copy to build */
    return rc;
}

/* AR decoding into the rollout record: commit_step[t] = t, commit_prob = the
 * sampling probability of token t (1 after EOS, where the row is padding). */
static int ar_rollout(dllm_policy *p, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                      int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                      dllm_rollout *out, dllm_err *err)
{
    dllm_ar_cfg ac = {.max_new_tokens = sc->gen_length, .temperature = sc->temperature,
                      .top_p = top_p, .eos_id = sc->eos_id, .seq_offset = sc->seq_offset};
    int rc = dllm_ar_check(&ac, dllm_policy_config(p)->embedding_size, err);
    dllm_ar_rollout ar = {0};
    if (!rc)
        rc = p->ops ? p->ops->rollout(p->impl, prompts, prompt_mask, B, P, &ac, seed, &ar, err)
                    : dllm_ar_sample(p->m, prompts, prompt_mask, B, P, &ac, seed, &ar, err);
    if (rc)
        return rc;
    int G = sc->gen_length;
    memset(out, 0, sizeof *out);
    out->B = B;
    out->P = P;
    out->G = G;
    out->tokens = dllm_malloc(sizeof *out->tokens * (size_t)B * (P + G));
    out->commit_step = dllm_malloc(sizeof *out->commit_step * (size_t)B * G);
    out->commit_prob = dllm_malloc(sizeof *out->commit_prob * (size_t)B * G);
    memcpy(out->tokens, ar.tokens, sizeof *out->tokens * (size_t)B * (P + G));
    for (size_t i = 0; i < (size_t)B * G; i++) {
        out->commit_step[i] = (int16_t)(i % (size_t)G);
        out->commit_prob[i] = expf(ar.logp[i]);
    }
    dllm_ar_rollout_free(&ar);
    return 0;
}

/* LLaDA's denoising sampler at the rollout copy's or the trainer view's numerics: the one
 * loop (dllm/sampler.h) over the model on the device when it is there (only tokens and
 * commit records come back), else over the host model. */
static int llada_sample(dllm_policy *p, bool rollout, const int32_t *prompts,
                        const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *sc,
                        uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    if (dllm_tf_device(p->m) && sc->cache == DLLM_CACHE_NONE) {
        dllm_device_logits dl;
        int rc = dllm_tf_device_logits(p->m, rollout, &dl, err);
        return rc ? rc : dllm_sample_model(&dl, prompts, prompt_mask, B, P, sc, seed, out, err);
    }
    if (sc->cache == DLLM_CACHE_NONE)
        return dllm_sample(rollout ? rollout_logits : train_nograd_logits, p, prompts, prompt_mask,
                           B, P, sc, seed, out, err);
    dllm_block_cache *bc = NULL;
    int rc = dllm_block_cache_new(&bc, p->m, rollout, err);
    if (rc)
        return rc;
    if (dllm_tf_device(p->m)) { /* the cache in the device's memory */
        dllm_device_logits v = dllm_block_cache_view(bc);
        rc = dllm_sample_model(&v, prompts, prompt_mask, B, P, sc, seed, out, err);
    } else {
        dllm_sampler_cache cache = {dllm_block_cache_fill, dllm_block_cache_step, bc};
        rc = dllm_sample_cached(NULL, NULL, &cache, prompts, prompt_mask, B, P, sc, seed, out,
                                err);
    }
    dllm_block_cache_free(bc);
    return rc;
}

/* Dream's sampler, as llada_sample: the one loop over the model on its device, else over
 * the host model. */
static int dream_sample(dllm_policy *p, bool rollout, const int32_t *prompts,
                        const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *sc,
                        double top_p, uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    dllm_dream_cfg d = p->dream;
    d.top_p = top_p;
    if (dllm_tf_device(p->m)) {
        dllm_device_logits dl;
        int rc = dllm_tf_device_logits(p->m, rollout, &dl, err);
        return rc ? rc : dllm_dream_sample_model(&dl, prompts, prompt_mask, B, P, sc, &d, seed,
                                                 out, err);
    }
    return dllm_dream_sample(rollout ? rollout_logits : train_nograd_logits, p, prompts,
                             prompt_mask, B, P, sc, &d, seed, out, err);
}

int dllm_policy_rollout(dllm_policy *p, const int32_t *prompts, const uint8_t *prompt_mask, int B,
                        int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                        dllm_rollout *out, dllm_err *err)
{
    if (p->arch->sampler == DLLM_SAMPLER_AR && (sc->cache != DLLM_CACHE_NONE || sc->threshold > 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: a denoising sampler's setting; %s decodes autoregressively",
                            sc->cache != DLLM_CACHE_NONE ? "cache" : "threshold", p->arch->name);
    if (p->arch->sampler == DLLM_SAMPLER_AR)
        return ar_rollout(p, prompts, prompt_mask, B, P, sc, top_p, seed, out, err);
    if (p->arch->sampler == DLLM_SAMPLER_DREAM && (sc->cache != DLLM_CACHE_NONE || sc->threshold > 0))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: not for Dream's sampler (docs/METHOD.md §2a)",
                            sc->cache != DLLM_CACHE_NONE ? "cache" : "threshold");
    if (p->arch->sampler == DLLM_SAMPLER_DREAM)
        return dream_sample(p, true, prompts, prompt_mask, B, P, sc, top_p, seed, out, err);
    /* top_p: nucleus sampling belongs to AR decoding; the denoising sampler has none */
    return llada_sample(p, true, prompts, prompt_mask, B, P, sc, seed, out, err);
}

int dllm_policy_sample_trainer(dllm_policy *p, const int32_t *prompts, const uint8_t *prompt_mask,
                               int B, int P, const dllm_sampler_cfg *sc, double top_p,
                               uint64_t seed, dllm_rollout *out, dllm_err *err)
{
    if (p->arch->sampler == DLLM_SAMPLER_DREAM)
        return dream_sample(p, false, prompts, prompt_mask, B, P, sc, top_p, seed, out, err);
    return llada_sample(p, false, prompts, prompt_mask, B, P, sc, seed, out, err);
}

void dllm_policy_set_dream(dllm_policy *p, const dllm_dream_cfg *d) { p->dream = *d; }

/* ---- checkpoints and adapters -------------------------------------------------------- */

int dllm_policy_save(const dllm_policy *p, const char *dir, st_dtype dtype, dllm_err *err)
{
    if (p->ops)
        return p->ops->save(p->impl, dir, dtype, err);
    return dllm_tf_save(p->m, dir, dtype, SHARD_BYTES, err);
}

static int lora_info(const dllm_policy *p, float *alpha, int *mask)
{
    if (p->ops) { /* its targets by name (own_targets): *mask is their count */
        int n, rank = p->ops->lora_info(p->impl, alpha, NULL, 0, &n);
        if (mask)
            *mask = n;
        return rank;
    }
    return dllm_tf_lora_info(p->m, alpha, mask);
}

bool dllm_policy_has_lora(const dllm_policy *p) { return lora_info(p, NULL, NULL) > 0; }

static int make_dir(const char *dir, dllm_err *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: cannot create directory: %s", dir,
                            strerror(errno));
    return 0;
}

int dllm_policy_save_adapter(const dllm_policy *p, const char *dir, dllm_err *err)
{
    float alpha;
    int mask, rank = lora_info(p, &alpha, &mask);
    if (!rank)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "%s: the policy has no LoRA adapter to save",
                            dir);
    int rc = make_dir(dir, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc)
        rc = p->ops ? p->ops->lora_save(p->impl, path, err) : dllm_tf_lora_save(p->m, path, err);
    if (rc)
        return rc;
    json_t *targets = json_array();
    const char *names[32];
    int nn = 0;
    if (p->ops)
        p->ops->lora_info(p->impl, NULL, names, 32, &nn);
    for (int j = 0; j < nn && j < 32; j++)
        json_array_append_new(targets, json_string(names[j]));
    for (int j = 0; !p->ops && j < DLLM_NLIN; j++)
        if ((mask >> j) & 1)
            json_array_append_new(targets, json_string(p->arch->lora_name[j]));
    double a = (double)alpha;
    json_t *cfg = json_object();
    json_object_set_new(cfg, "base_model_name_or_path", json_string(p->base));
    json_object_set_new(cfg, "peft_type", json_string("LORA"));
    json_object_set_new(cfg, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(cfg, "r", json_integer(rank));
    /* PEFT writes an integral alpha as an integer */
    json_object_set_new(cfg, "lora_alpha",
                        a == (double)(long long)a ? json_integer((json_int_t)a) : json_real(a));
    json_object_set_new(cfg, "lora_dropout", json_real(0.0));
    json_object_set_new(cfg, "target_modules", targets);
    json_object_set_new(cfg, "bias", json_string("none"));
    json_object_set_new(cfg, "inference_mode", json_true());
    json_object_set_new(cfg, "fan_in_fan_out", json_false());
    json_object_set_new(cfg, "use_rslora", json_false());
    json_object_set_new(cfg, "init_lora_weights", json_true());
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    rc = ju_save_file(cfg, path, JSON_INDENT(2) | JSON_SORT_KEYS, err);
    json_decref(cfg);
    return rc;
}

/* At most this many target names in an adapter of a model of its own, each this long. */
#define OWN_TARGETS 16
#define OWN_NAME 48

/* Reads the LoRA settings of DIR/adapter_config.json: the targets as arch's mask, or for a
 * model of its own (arch->model) their names into own[*n_own] (validated when enabled). */
static int read_adapter_config(const dllm_arch_desc *arch, const char *path, int *rank, double *alpha, int *mask,
                               char (*own)[OWN_NAME], int *n_own, dllm_err *err)
{
    json_t *root;
    int rc = ju_load_file(&root, path, err);
    if (rc)
        return rc;
    const char *type = "LORA";
    long long r = 0;
    bool rs = false, present;
    *alpha = 8; /* PEFT's default lora_alpha */
    if ((rc = ju_get_string(root, "peft_type", path, &type, &present, err)) ||
        (rc = ju_get_int(root, "r", path, &r, NULL, err)) ||
        (rc = ju_get_real(root, "lora_alpha", path, alpha, &present, err)) ||
        (rc = ju_get_bool(root, "use_rslora", path, &rs, &present, err)))
        goto done;
    if (strcmp(type, "LORA")) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'peft_type': '%s' is not LORA", path,
                          type);
        goto done;
    }
    if (r <= 0 || r > 1 << 20 || !(*alpha > 0)) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "%s: key 'r' (%lld) and 'lora_alpha' (%g) must be "
                          "positive", path, r, *alpha);
        goto done;
    }
    if (rs) {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: key 'use_rslora': rank-stabilised LoRA is not supported", path);
        goto done;
    }
    const json_t *t = json_object_get(root, "target_modules");
    *mask = 0;
    *n_own = 0;
    if (arch->model && (json_is_string(t) || json_is_array(t))) {
        size_t n = json_is_string(t) ? 1 : json_array_size(t);
        for (size_t i = 0; i < n && !rc; i++) {
            const json_t *e = json_is_string(t) ? t : json_array_get(t, i);
            if (!json_is_string(e) || strlen(json_string_value(e)) >= OWN_NAME || i >= OWN_TARGETS)
                rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                  "%s: key 'target_modules': entry %zu is not a target name "
                                  "(at most %d)", path, i, OWN_TARGETS);
            else
                snprintf(own[(*n_own)++], OWN_NAME, "%s", json_string_value(e));
        }
        if (!rc && !*n_own)
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: key 'target_modules': expected a non-empty list of module "
                              "names", path);
    } else if (json_is_string(t)) {
        const char *name = json_string_value(t);
        rc = targets_mask(arch, &name, 1, path, mask, err);
    } else if (json_is_array(t) && json_array_size(t) > 0) {
        for (size_t i = 0; i < json_array_size(t) && !rc; i++) {
            const json_t *e = json_array_get(t, i);
            if (!json_is_string(e)) {
                rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                                  "%s: key 'target_modules': entry %zu is not a string", path, i);
                break;
            }
            const char *name = json_string_value(e);
            int bit;
            rc = targets_mask(arch, &name, 1, path, &bit, err);
            *mask |= bit;
        }
    } else {
        rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                          "%s: key 'target_modules': expected a non-empty list of module names",
                          path);
    }
    *rank = (int)r;
done:
    json_decref(root);
    return rc;
}

/* load_adapter for a model of its own: LoRA enabled as the adapter says (or the policy's
 * checked against it: rank, alpha and the set of targets), its tensors read, the rollout
 * copy rebuilt. */
static int load_adapter_own(dllm_policy *p, const char *dir, const char *cfg_path, int rank,
                            double alpha, char (*own)[OWN_NAME], int n_own, dllm_err *err)
{
    float have_alpha;
    const char *have[OWN_TARGETS + 16];
    int n_have, have_rank = p->ops->lora_info(p->impl, &have_alpha, have, OWN_TARGETS + 16,
                                             &n_have);
    const char *want[OWN_TARGETS];
    for (int i = 0; i < n_own; i++)
        want[i] = own[i];
    int rc = 0;
    if (!have_rank) {
        rc = p->ops->lora_enable(p->impl, rank, alpha, want, n_own, cfg_path, p->seed, err);
    } else {
        bool same = have_rank == rank && have_alpha == (float)alpha;
        for (int i = 0; same && i < n_have; i++) { /* the same set, in any order */
            bool in = false;
            for (int j = 0; j < n_own; j++)
                in |= !strcmp(have[i], want[j]);
            same = in;
        }
        for (int j = 0; same && j < n_own; j++) {
            bool in = false;
            for (int i = 0; i < n_have; i++)
                in |= !strcmp(have[i], want[j]);
            same = in;
        }
        if (!same)
            rc = dllm_err_set(err, DLLM_EXIT_INPUT,
                              "%s: adapter (r %d, alpha %g, %d targets) does not match the "
                              "policy's LoRA (r %d, alpha %g, %d targets)", cfg_path, rank, alpha,
                              n_own, have_rank, (double)have_alpha, n_have);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    rc = rc ? rc : p->ops->lora_load(p->impl, path, err);
    return rc ? rc : p->ops->sync(p->impl, &p->prec, err);
}

int dllm_policy_load_adapter(dllm_policy *p, const char *dir, dllm_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rank = 0, mask = 0, n_own = 0;
    double alpha = 0;
    char own[OWN_TARGETS][OWN_NAME];
    int rc = read_adapter_config(p->arch, path, &rank, &alpha, &mask, own, &n_own, err);
    if (rc)
        return rc;
    if (p->ops)
        return load_adapter_own(p, dir, path, rank, alpha, own, n_own, err);
    float have_alpha;
    int have_mask, have_rank = lora_info(p, &have_alpha, &have_mask);
    if (!have_rank) {
        dllm_tf_lora_enable(p->m, rank, (float)alpha, mask, p->seed);
    } else if (have_rank != rank || have_mask != mask || have_alpha != (float)alpha) {
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: adapter (r %d, alpha %g, targets 0x%x) does not match the "
                            "policy's LoRA (r %d, alpha %g, targets 0x%x)", path, rank, alpha,
                            mask, have_rank, (double)have_alpha, have_mask);
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if ((rc = dllm_tf_lora_load(p->m, path, err)))
        return rc;
    return dllm_tf_rollout_sync(p->m, &p->prec, NULL, err);
}
