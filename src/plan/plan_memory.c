/* plan_memory.c: a run's device memory, recorded (plan_memory.h). */
#include "src/plan/plan_memory.h"

#include "dllm/arch.h"
#include "dllm/policy_infer.h"
#include "dllm/policy_sft.h"
#include "dllm/transformer.h"
#include "src/plan/mem_plan_run.h"
#include "src/rl/rl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const pm_phase_names[3] = {"rollout", "score", "train"};

int pm_shape_of_run(pm_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                    const mem_plan_opts *o, dllm_err *err)
{
    memset(s, 0, sizeof *s);
    dllm_precision prec;
    int mask;
    if (mem_run_precision(cfg, mc, &prec, &mask, err)) /* the LoRA targets checked here */
        return err->code;
    if (o->ranks < 1 || cfg->grpo.prompts_per_step % o->ranks)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "--ranks %d must divide grpo.prompts_per_step %d (groups never split)",
                            o->ranks, cfg->grpo.prompts_per_step);
    dllm_policy_cfg *pc = &s->pc;
    pc->seed = 1;
    pc->lora_rank = cfg->model.lora.rank;
    pc->lora_alpha = cfg->model.lora.alpha;
    pc->n_lora_targets = cfg->model.lora.targets.n < 16 ? cfg->model.lora.targets.n : 16;
    for (int i = 0; i < pc->n_lora_targets; i++)
        snprintf(s->targets[i], sizeof s->targets[i], "%s", cfg->model.lora.targets.items[i]);
    pc->trainer = cfg_names_name(&cfg_names_trainer_precision, cfg->model.trainer_precision);
    pc->rollout = cfg_names_name(&cfg_names_rollout_precision, cfg->rollout.precision);
    pc->fp8_format = cfg_names_name(&cfg_names_fp8_format, cfg->rollout.fp8.format);
    pc->fp8_scaling = cfg_names_name(&cfg_names_fp8_scaling, cfg->rollout.fp8.scaling);
    pc->fp8_pow2_scale = cfg->rollout.fp8.pow2_scale;
    pc->int8_scaling = cfg_names_name(&cfg_names_int8_scaling, cfg->rollout.int8.scaling);
    pc->nvfp4_scaling = cfg_names_name(&cfg_names_nvfp4_scaling, cfg->rollout.nvfp4.scaling);
    if (prec.rollout == DLLM_ROLLOUT_NVFP4)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision nvfp4: the CUDA backend has "
                            "no NVFP4 linear (use bf16, fp8 or int8)");
    s->S = cfg->grpo.prompts_per_step / o->ranks * cfg->rollout.group_size;
    /* the run's rollout.batch and train.micro_batch unless the flags say otherwise */
    const int rb = o->rollout_batch ? o->rollout_batch : cfg->rollout.batch;
    s->B = rb && (rb < s->S || o->rollout_batch) ? rb : s->S;
    s->P = o->prompt_tokens;
    const int mb = o->micro_batch ? o->micro_batch : cfg->train.micro_batch;
    s->mb = mb < s->S ? mb : s->S;
    s->recompute = o->recompute == MEM_RECOMPUTE_NONE    ? 0
                   : o->recompute == MEM_RECOMPUTE_LAYER ? 1
                                                         : o->recompute_every;
    dllm_sampler_cfg *sc = &s->sc;
    sc->gen_length = cfg->rollout.gen_length;
    sc->block_length = cfg->rollout.block_length;
    sc->steps = cfg->rollout.steps;
    sc->temperature = cfg->rollout.temperature;
    sc->remasking = cfg->rollout.remasking;
    sc->cfg_scale = cfg->rollout.cfg_scale;
    sc->logits_eos_inf = cfg->rollout.logits_eos_inf;
    sc->confidence_eos_eot_inf = cfg->rollout.confidence_eos_eot_inf;
    sc->mask_id = mc->mask_token_id;
    sc->eos_id = mc->eos_token_id;
    sc->eot_id = -1;
    sc->vocab = mc->embedding_size;
    sc->mask_token = cfg->rollout.mask_token == CFG_MASK_TOKEN_FORBID ? DLLM_MASK_TOKEN_FORBID
                                                                      : DLLM_MASK_TOKEN_ALLOW;
    sc->cache = cfg->rollout.cache;
    sc->threshold = cfg->rollout.threshold;
    sc->cache_refresh = cfg->rollout.cache_refresh;
    s->dream = dllm_dream_cfg_default();
    s->dream.alg = cfg->rollout.dream.alg;
    s->dream.eps = cfg->rollout.dream.eps;
    s->dream.alg_temp = cfg->rollout.dream.alg_temp;
    s->dream.top_k = cfg->rollout.dream.top_k;
    s->top_p = cfg->rollout.top_p > 0 ? cfg->rollout.top_p : 1.0;
    if (s->B < 1 || s->B > s->S)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "--rollout-batch %d: must be 1 to the rank's "
                            "%d sequences", s->B, s->S);
    /* the evaluation (at the end, and every eval.every steps): rl_evaluate's batches of at
     * most 64 prompts, at its longest generation (d1's protocol takes each length in turn) */
    s->eval = cfg->eval.n > 0;
    s->eval_B = cfg->eval.n < 64 ? cfg->eval.n : 64;
    s->eval_prec = cfg->eval.precision == CFG_EVAL_ROLLOUT ? DLLM_PREC_ROLLOUT
                                                           : DLLM_PREC_TRAIN_NOGRAD;
    dllm_sampler_cfg *e = &s->esc;
    *e = *sc;
    e->gen_length = cfg->eval.gen_length;
    e->block_length = cfg->eval.block_length;
    e->steps = cfg->eval.steps;
    for (int i = 0; i < cfg->eval.gen_lengths.n; i++)
        if (cfg->eval.gen_lengths.v[i] > e->gen_length || i == 0) {
            e->gen_length = cfg->eval.gen_lengths.v[i];
            e->steps = i < cfg->eval.gen_steps.n ? cfg->eval.gen_steps.v[i]
                                                  : e->gen_length / 2;
        }
    e->temperature = cfg->eval.temperature;
    e->remasking = REMASK_LOW_CONFIDENCE;
    e->cfg_scale = 0;
    e->mask_token = cfg->eval.mask_token == CFG_MASK_TOKEN_FORBID ? DLLM_MASK_TOKEN_FORBID
                                                                  : DLLM_MASK_TOKEN_ALLOW;
    e->cache = cfg->eval.cache;
    e->threshold = cfg->eval.threshold;
    e->cache_refresh = cfg->eval.cache_refresh;
    if (s->eval && dllm_sampler_check(e, err))
        return dllm_err_prefix(err, "eval");
    return dllm_sampler_check(sc, err);
}

static void tag(dllm_backend *be, const char *what)
{
    if (be && dllm_record_is(be))
        dllm_record_tag(be, what);
}

/* B canvases of the shape's tokens: prompts, then the generated positions (masked for a
 * diffusion model's scoring when `masked`) */
static int32_t *canvases(const dllm_model_config *mc, int B, int T, int P, bool masked)
{
    int32_t *t = dllm_malloc(sizeof *t * (size_t)B * T);
    for (int i = 0; i < B * T; i++) {
        int v = 3 + (i * 7) % (mc->vocab_size - 3);
        t[i] = v == mc->mask_token_id || v == mc->eos_token_id ? 5 : v;
        if (masked && i % T >= P)
            t[i] = mc->mask_token_id;
    }
    return t;
}

static int rollout(dllm_policy *p, const pm_shape *s, uint64_t seed, dllm_err *err)
{
    const dllm_model_config *mc = dllm_policy_config(p);
    int32_t *pr = canvases(mc, s->B, s->P, s->P, false);
    dllm_rollout ro = {0};
    int rc = dllm_policy_rollout(p, pr, NULL, s->B, s->P, &s->sc, s->top_p, seed, &ro, err);
    dllm_rollout_free(&ro);
    free(pr);
    return rc;
}

int pm_work(dllm_policy *p, const pm_shape *s, pm_phase ph, bool *update, dllm_err *err)
{
    dllm_backend *be = dllm_policy_device(p);
    dllm_tf *m = dllm_policy_model(p);
    *update = false;
    if (!be || !m)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan: the policy is not on a device");
    const dllm_model_config *mc = dllm_policy_config(p);
    dllm_policy_set_dream(p, &s->dream);
    int rc = 0;
    if (ph == PM_TRAIN) { /* as rl_run_open: the recomputation, the device trainer, a sync */
        if (dllm_policy_set_recompute(p, s->recompute))
            return dllm_err_set(err, DLLM_EXIT_INPUT, "train.recompute %d: refused", s->recompute);
        tag(be, "update: gradients, AdamW moments, trainer view");
        dllm_err e2 = {0};
        *update = dllm_tf_device_train(m, &e2) == 0;
        tag(be, "rollout copy rebuild");
        if ((rc = dllm_policy_sync_rollout(p, NULL, err)))
            return rc;
    }
    if (ph != PM_SCORE) {
        tag(be, "rollout: sampler, activations, logits");
        if ((rc = rollout(p, s, 9, err)))
            return rc;
    }
    if (ph == PM_ROLLOUT)
        return 0;
    const int G = s->sc.gen_length, T = s->P + G, nb = s->mb < s->S ? s->mb : s->S, R = nb * G;
    const bool diffusion = dllm_policy_is_diffusion(p);
    int32_t *tok = canvases(mc, nb, T, s->P, diffusion);
    int32_t *rows = dllm_malloc(sizeof *rows * (size_t)R);
    int32_t *tg = dllm_malloc(sizeof *tg * (size_t)R);
    float *lp = dllm_malloc(sizeof *lp * (size_t)R);
    for (int b = 0; b < nb; b++)
        for (int g = 0; g < G; g++) {
            rows[b * G + g] = b * T + s->P + g;
            tg[b * G + g] = 5 + g % 7;
        }
    /* the step's likelihoods: at the rollout copy (l_mu), at the trainer (l_pi, l_old) */
    for (int k = 0; k < (ph == PM_TRAIN ? 2 : 1) && !rc; k++) {
        tag(be, k ? "scoring: trainer view" : "scoring: rollout copy");
        void *ctx;
        dllm_logp_fn f = dllm_policy_logp(p, k ? DLLM_PREC_TRAIN_NOGRAD : DLLM_PREC_ROLLOUT, &ctx);
        if (!f || f(ctx, tok, NULL, nb, T, rows, tg, R, lp))
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "plan: the scoring forward failed");
    }
    if (!rc && ph == PM_TRAIN && *update) { /* rl_step's update of one micro-batch */
        void *ctx;
        tag(be, "update: kept forward");
        dllm_optim_zero_grad(dllm_policy_optim(p));
        dllm_logp_fn f = dllm_policy_train_logp(p, &ctx);
        if (!f || f(ctx, tok, NULL, nb, T, rows, tg, R, lp)) {
            rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "plan: the update's forward failed");
        } else {
            for (int i = 0; i < R; i++) /* any dL/dlogp: sizes are what count */
                lp[i] = 1e-3f * (float)(i % 7 - 3);
            tag(be, "update: backward");
            dllm_policy_backward_logp(ctx, lp);
            tag(be, "update: clip and AdamW");
            dllm_adamw_args a = {1, 1e-6f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0};
            dllm_optim_step(dllm_policy_optim(p), &a);
            tag(be, "rollout copy rebuild");
            rc = dllm_policy_sync_rollout(p, NULL, err);
        }
    }
    free(tok), free(rows), free(tg), free(lp);
    if (!rc && ph == PM_TRAIN) { /* the next step's rollout, the scoring's buffers kept */
        tag(be, "rollout: sampler, activations, logits");
        rc = rollout(p, s, 10, err);
    }
    if (!rc && ph == PM_TRAIN && s->eval) { /* rl_evaluate's greedy rollouts */
        tag(be, "evaluation: rollouts");
        const int eB = s->eval_B, eT = s->P + s->esc.gen_length - 1;
        if (!diffusion && s->eval_prec == DLLM_PREC_TRAIN_NOGRAD) {
            /* autoregressive decoding at the trainer's numerics runs one forward of the
             * whole prefix per token (rl_generate.c): its buffers grow to the last one's,
             * which is what is recorded (not the thousand before it) */
            void *ctx;
            dllm_logits_fn fn = dllm_policy_logits(p, DLLM_PREC_TRAIN_NOGRAD, &ctx);
            int32_t *cv = canvases(mc, eB, eT, eT, false), *lr = dllm_malloc(sizeof *lr * eB);
            uint8_t *km = dllm_malloc((size_t)eB * eT);
            float *lg = dllm_malloc(sizeof *lg * (size_t)eB * mc->embedding_size);
            memset(km, 1, (size_t)eB * eT);
            for (int b = 0; b < eB; b++)
                lr[b] = b * eT + eT - 1;
            if (!fn || fn(ctx, cv, km, eB, eT, lr, eB, lg))
                rc = dllm_err_set(err, DLLM_EXIT_INTERNAL, "plan: the evaluation forward failed");
            free(cv), free(lr), free(km), free(lg);
        } else {
            int32_t *pr = canvases(mc, eB, s->P, s->P, false);
            dllm_rollout ro = {0};
            rc = rl_generate(p, s->eval_prec, pr, NULL, eB, s->P, &s->esc, 1.0, 12, &ro, err);
            dllm_rollout_free(&ro);
            free(pr);
        }
    }
    return rc;
}

int pm_record(const dllm_model_config *mc, const pm_shape *s, pm_phase ph, pm_plan *out,
              dllm_err *err)
{
    memset(out, 0, sizeof *out);
    out->phase = ph;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* block-scaled FP8 as on a GPU with CUDA 12.9 or later (H100, H200) */
    dllm_backend *be = dllm_record_new(NULL, true);
    dllm_policy_cfg pc = s->pc;
    const char *targets[16];
    for (int i = 0; i < pc.n_lora_targets; i++)
        targets[i] = s->targets[i];
    pc.lora_targets = targets;
    pc.shape = mc;
    pc.backend = be;
    dllm_record_tag(be, "model: weights, views, LoRA, rollout copy");
    dllm_policy *p = NULL;
    int rc = dllm_policy_open(&p, &pc, err);
    if (!rc)
        rc = pm_work(p, s, ph, &out->update, err);
    out->peak = dllm_record_peak(be);
    out->n = dllm_record_peak_by_tag(be, out->items, PM_MAX_ITEMS);
    dllm_policy_free(p);
    dllm_record_free(be);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->wall_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc;
}

void pm_print(const pm_plan *p, const char *what, int64_t cap, FILE *f)
{
    fprintf(f, "device memory (%s phase, recorded): %s\n", pm_phase_names[p->phase], what);
    fprintf(f, "the code's own allocations on the CUDA backend, recorded without a device in "
               "%.1f s: bytes live at the peak, by the work that allocated them%s\n\n",
            p->wall_s, p->phase == PM_TRAIN && !p->update ? " (the update runs on the host)" : "");
    fprintf(f, "%-48s %10s  %s\n", "allocated by", "GB", "bytes");
    for (int i = 0; i < p->n; i++)
        fprintf(f, "%-48s %10.3f  %lld\n", p->items[i].tag, (double)p->items[i].bytes / 1e9,
                (long long)p->items[i].bytes);
    fprintf(f, "\npeak: %.2f GB (%lld bytes; %.2f GiB)\n", (double)p->peak / 1e9,
            (long long)p->peak, (double)p->peak / (1024.0 * 1024 * 1024));
    if (cap > 0)
        fprintf(f, "fits in %.2f GB (%.2f GiB): %s\n", (double)cap / 1e9,
                (double)cap / (1024.0 * 1024 * 1024), p->peak <= cap ? "yes" : "no");
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    fputc('"', f);
}

void pm_print_json(const pm_plan *p, const char *what, int64_t cap, FILE *f)
{
    fputs("{\"what\": ", f);
    json_str(f, what);
    fprintf(f, ", \"recorded\": true, \"phase\": \"%s\", \"update_on_device\": %s, "
               "\"peak_bytes\": %lld, \"cap_bytes\": %lld, \"fits\": %s, \"recorded_in_s\": %.3f, "
               "\"items\": [", pm_phase_names[p->phase], p->update ? "true" : "false",
            (long long)p->peak, (long long)cap, cap <= 0 || p->peak <= cap ? "true" : "false",
            p->wall_s);
    for (int i = 0; i < p->n; i++) {
        fputs(i ? ", {\"allocated_by\": " : "{\"allocated_by\": ", f);
        json_str(f, p->items[i].tag);
        fprintf(f, ", \"bytes\": %lld}", (long long)p->items[i].bytes);
    }
    fputs("]}\n", f);
}

static int try_fit(const dllm_model_config *mc, const pm_shape *s, pm_phase ph, int64_t cap,
                   int64_t *peak)
{
    dllm_err e = {0};
    pm_plan *q = dllm_malloc(sizeof *q);
    int ok = !pm_record(mc, s, ph, q, &e) && q->peak <= cap;
    *peak = q->peak;
    free(q);
    return ok;
}

/* The largest of *v's halvings (from / 2, from / 4, ... 1) with which the phase fits, into
 * *v and *peak; false (and *v = from) when none does. The peak grows with the batch, so
 * after the largest the smallest is tried and the rest by bisection: a few recordings of
 * the step rather than one per halving (each is seconds at 8B). */
static bool largest_fit(const dllm_model_config *mc, pm_shape *t, int *v, int from, pm_phase ph,
                        int64_t cap, int64_t *peak)
{
    int K = 0; /* halvings down to 1 */
    while ((from >> (K + 1)) >= 1)
        K++;
    int lo = 1, hi = 1; /* the answer: the smallest k in [lo, hi] that fits; hi fits */
    int64_t pk;
    *v = from >> 1;
    if (K == 0 || !try_fit(mc, t, ph, cap, peak)) {
        *v = from >> K;
        if (K <= 1 || !try_fit(mc, t, ph, cap, peak)) {
            *v = from;
            return false;
        }
        lo = 2, hi = K;
    }
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        *v = from >> mid;
        if (try_fit(mc, t, ph, cap, &pk)) {
            hi = mid;
            *peak = pk;
        } else {
            lo = mid + 1;
        }
    }
    *v = from >> hi;
    return true;
}

int pm_suggest(const dllm_model_config *mc, const pm_shape *s, pm_phase ph, int64_t cap,
               char *buf, size_t n)
{
    pm_shape t = *s;
    int64_t peak;
    if (ph == PM_TRAIN && s->recompute != 1) {
        t.recompute = 1;
        if (try_fit(mc, &t, ph, cap, &peak)) {
            snprintf(buf, n, "--recompute layer (train.recompute: layer; peak %.2f GB)",
                     (double)peak / 1e9);
            return 1;
        }
        t.recompute = s->recompute;
    }
    if (ph != PM_ROLLOUT && largest_fit(mc, &t, &t.mb, s->mb, ph, cap, &peak)) {
        snprintf(buf, n, "--micro-batch %d (train.micro_batch: %d; peak %.2f GB)", t.mb, t.mb,
                 (double)peak / 1e9);
        return 1;
    }
    if (ph != PM_SCORE && largest_fit(mc, &t, &t.B, s->B, ph, cap, &peak)) {
        snprintf(buf, n, "--rollout-batch %d (rollout.batch: %d; peak %.2f GB)", t.B, t.B,
                 (double)peak / 1e9);
        return 1;
    }
    return 0;
}

int pm_does_not_fit(const pm_plan *p, const dllm_model_config *mc, const pm_shape *s,
                    int64_t cap, dllm_err *err)
{
    char big[384] = "";
    size_t used = 0;
    bool done[PM_MAX_ITEMS] = {false};
    for (int k = 0; k < 3; k++) {
        int top = -1;
        for (int i = 0; i < p->n; i++)
            if (!done[i] && (top < 0 || p->items[i].bytes > p->items[top].bytes))
                top = i;
        if (top < 0)
            break;
        done[top] = true;
        used += (size_t)snprintf(big + used, used < sizeof big ? sizeof big - used : 0,
                                 "%s%s %.2f GB", k ? "; " : "", p->items[top].tag,
                                 (double)p->items[top].bytes / 1e9);
        if (used >= sizeof big)
            break;
    }
    char fix[128], rec[32];
    bool one = pm_suggest(mc, s, p->phase, cap, fix, sizeof fix);
    if (s->recompute > 1)
        snprintf(rec, sizeof rec, "every:%d", s->recompute);
    else
        snprintf(rec, sizeof rec, "%s", s->recompute ? "layer" : "none");
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "does not fit: the %s phase peaks at %.2f GB (%lld bytes) over "
                        "--max-gpu-memory %.2f GB; its largest items: %s. To shrink them: "
                        "--micro-batch N (train.micro_batch; now %d canvases), --recompute "
                        "layer or every:K (train.recompute; now %s), --rollout-batch N "
                        "(rollout.batch; now %d sequences), more ranks (--ranks; or fewer "
                        "grpo.prompts_per_step or rollout.group_size), %s, or a larger device "
                        "(--max-gpu-memory)%s%s",
                        pm_phase_names[p->phase], (double)p->peak / 1e9, (long long)p->peak,
                        (double)cap / 1e9, big, s->mb < s->S ? s->mb : s->S, rec, s->B,
                        s->pc.lora_rank > 0 ? "a lower model.lora.rank"
                                            : "LoRA (model.lora.rank > 0: full fine-tuning keeps "
                                              "fp32 weights, gradients and AdamW moments)",
                        one ? ". This fits: " : "", one ? fix : "");
}

/* ---- sft --------------------------------------------------------------------------- */

int pm_sft_shape_of(pm_sft_shape *s, const dllm_cfg *cfg, const dllm_model_config *mc,
                    int prompt_tokens, dllm_err *err)
{
    memset(s, 0, sizeof *s);
    dllm_precision prec;
    int mask;
    if (mem_run_precision(cfg, mc, &prec, &mask, err))
        return err->code;
    dllm_policy_cfg *pc = &s->pc;
    pc->seed = 1;
    pc->lora_rank = cfg->model.lora.rank;
    pc->lora_alpha = cfg->model.lora.alpha;
    pc->n_lora_targets = cfg->model.lora.targets.n < 16 ? cfg->model.lora.targets.n : 16;
    for (int i = 0; i < pc->n_lora_targets; i++)
        snprintf(s->targets[i], sizeof s->targets[i], "%s", cfg->model.lora.targets.items[i]);
    pc->trainer = cfg_names_name(&cfg_names_trainer_precision, cfg->model.trainer_precision);
    pc->rollout = "trainer";
    s->B = cfg->sft.batch_size;
    s->T = cfg->data.max_len;
    s->eval = cfg->sft.eval_every > 0 && cfg->sft.eval_n > 0;
    s->eval_B = cfg->sft.eval_n < 64 ? cfg->sft.eval_n : 64; /* rl_evaluate's batches */
    s->P = prompt_tokens;
    dllm_sampler_cfg *sc = &s->esc;
    sc->gen_length = cfg->eval.gen_length;
    sc->block_length = cfg->eval.block_length;
    sc->steps = cfg->eval.steps;
    sc->temperature = cfg->eval.temperature;
    sc->remasking = REMASK_LOW_CONFIDENCE;
    sc->mask_id = mc->mask_token_id;
    sc->eos_id = mc->eos_token_id;
    sc->eot_id = -1;
    sc->vocab = mc->embedding_size;
    sc->mask_token = DLLM_MASK_TOKEN_FORBID;
    sc->cache = cfg->eval.cache;
    sc->threshold = cfg->eval.threshold;
    sc->cache_refresh = cfg->eval.cache_refresh;
    if (s->B < 1 || s->T < 2)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "sft.batch_size %d, data.max_len %d: not a "
                            "batch", s->B, s->T);
    return s->eval ? dllm_sampler_check(sc, err) : 0;
}

int pm_work_sft(dllm_policy *p, const pm_sft_shape *s, const dllm_policy_cfg *eval_cfg,
                bool *update, dllm_err *err)
{
    dllm_backend *be = dllm_policy_device(p);
    *update = false;
    if (!be)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan: the policy is not on a device");
    const dllm_model_config *mc = dllm_policy_config(p);
    /* as `sft`: the device trainer, then one step */
    tag(be, "update: gradients, AdamW moments, trainer view");
    dllm_err e2 = {0};
    *update = dllm_tf_device_train(dllm_policy_model(p), &e2) == 0;
    int rc = dllm_policy_sync_rollout(p, NULL, err);
    const int B = s->B, T = s->T;
    int32_t *tok = canvases(mc, B, T, T, false), *plen = dllm_malloc(sizeof *plen * (size_t)B);
    int *len = dllm_malloc(sizeof *len * (size_t)B);
    uint8_t *mk = dllm_malloc((size_t)B * T);
    double *pm = dllm_malloc(sizeof *pm * (size_t)B);
    for (int b = 0; b < B; b++) { /* every position after the first scored */
        plen[b] = 1, len[b] = T, pm[b] = 0.5;
        for (int t = 0; t < T; t++)
            mk[(size_t)b * T + t] = t >= 1;
    }
    if (!rc) {
        tag(be, "update: forward and backward");
        dllm_optim_zero_grad(dllm_policy_optim(p));
        double loss;
        rc = dllm_policy_sft_loss(p, tok, mk, pm, plen, len, B, T, true, &loss, err);
    }
    if (!rc) {
        tag(be, "update: clip and AdamW");
        dllm_adamw_args a = {1, 1e-6f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0};
        dllm_optim_step(dllm_policy_optim(p), &a);
    }
    free(tok), free(plen), free(len), free(mk), free(pm);
    dllm_policy *ev = NULL;
    if (!rc && s->eval) { /* validation: the checkpoint opened beside the trained model */
        tag(be, "validation: the checkpoint's model and its rollouts");
        rc = dllm_policy_open(&ev, eval_cfg, err);
        if (!rc) { /* rl_run_open's device trainer and sync, then rl_evaluate's generation */
            dllm_err e3 = {0};
            dllm_tf_device_train(dllm_policy_model(ev), &e3);
            rc = dllm_policy_sync_rollout(ev, NULL, err);
        }
        if (!rc) {
            int32_t *pr = canvases(mc, s->eval_B, s->P, s->P, false);
            dllm_rollout ro = {0};
            rc = rl_generate(ev, DLLM_PREC_TRAIN_NOGRAD, pr, NULL, s->eval_B, s->P, &s->esc, 1.0,
                             11, &ro, err);
            dllm_rollout_free(&ro);
            free(pr);
        }
        dllm_policy_free(ev);
    }
    return rc;
}

int pm_record_sft(const dllm_model_config *mc, const pm_sft_shape *s, pm_plan *out,
                  dllm_err *err)
{
    memset(out, 0, sizeof *out);
    out->phase = PM_TRAIN;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dllm_backend *be = dllm_record_new(NULL, true);
    dllm_policy_cfg pc = s->pc;
    const char *targets[16];
    for (int i = 0; i < pc.n_lora_targets; i++)
        targets[i] = s->targets[i];
    pc.lora_targets = targets;
    pc.shape = mc;
    pc.backend = be;
    const dllm_policy_cfg ec = {.seed = 1, .trainer = s->pc.trainer, .rollout = "trainer",
                                .shape = mc, .backend = be};
    dllm_record_tag(be, "model: weights, views, LoRA");
    dllm_policy *p = NULL;
    int rc = dllm_policy_open(&p, &pc, err);
    if (!rc)
        rc = pm_work_sft(p, s, &ec, &out->update, err);
    out->peak = dllm_record_peak(be);
    out->n = dllm_record_peak_by_tag(be, out->items, PM_MAX_ITEMS);
    dllm_policy_free(p);
    dllm_record_free(be);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->wall_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc;
}
