/* plan_time.c: the phases of one RL step on the recording backend, and their roofline
 * (plan_time.h).
 *
 * The phases, each run twice on a shape-only model and recorded the second time (the
 * steady state: every buffer already grown, as in a run after its first step):
 *   rollout_step  the mean denoising step of a whole rollout of the S sequences (twice
 *                 the canvases under CFG) of P + G tokens through the sampler's own
 *                 loop (dllm_sample_model) at the rollout copy, under rollout.cache over
 *                 its block cache: the layers, the head over the block's masked rows a
 *                 logits chunk at a time, the sampler's kernels (row lists, draw,
 *                 commit), its one sync per step (the count of rows to draw) and its
 *                 transfers at the start and the end, all over the steps;
 *   score         the old log-probs of the step's S sequences at the trainer view
 *                 (dllm_tf_target_logp), micro_batch canvases per forward, every
 *                 generated row scored;
 *   update_step   one inner step on the device: for each micro-batch the kept forward
 *                 (dllm_tf_device_forward_logp) and its backward, then the clip and AdamW.
 * The roofline of an event (docs/PLAN.md): max(FLOPs / (its unit's peak x 0.7),
 * bytes / (HBM x 0.8)) + 4 us per launch (kernel, matmul, device copy or memset);
 * a blocking copy or sync 10 us plus its bytes at 25 GB/s. */
#include "src/plan/plan_time.h"

#include "dllm/block_cache.h"
#include "dllm/device_logits.h"
#include "dllm/transformer.h"
#include "kernels/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const pt_phase_names[PT_NPHASES] = {"rollout_step", "score", "update_step"};
const char *const pt_gpu_names[2] = {"h100", "h200"};

/* H100 SXM dense peaks (FLOP/s, INT8 in OP/s) by unit; the memory-bound unit's few FLOPs
 * at fp32's; INT8 tensor cores at FP8's rate (NVIDIA's H100 datasheet: 1,979 dense
 * TOPS for either) */
static const double PEAK[REC_NUNITS] = {1979e12, 989e12, 494e12, 67e12, 67e12, 1979e12};
static const double HBM[2] = {3.35e12, 4.8e12};
#define FLOP_EFF 0.7
#define HBM_EFF 0.8
#define LAUNCH_S 4e-6
#define SYNC_S 10e-6
#define LINK_BPS 25e9

/* adds t seconds and k launches to the kind (op, what, unit) of r's list */
static void op_add(pt_phase_result *r, const char *op, const char *what, rec_unit unit,
                   double t, double k)
{
    int i = 0;
    while (i < r->nops && !(r->ops[i].unit == unit && !strcmp(r->ops[i].op, op) &&
                            !strcmp(r->ops[i].what, what)))
        i++;
    if (i == r->nops) {
        if (r->nops == PT_MAX_OPS) { /* full: the last kind becomes "other" */
            i = PT_MAX_OPS - 1;
            r->ops[i].op = r->ops[i].what = "other";
        } else {
            r->ops[i] = (pt_op_time){op, what, unit, 0, 0};
            r->nops++;
        }
    }
    r->ops[i].seconds += t;
    r->ops[i].launches += k;
}

static int op_cmp(const void *a, const void *b)
{
    double x = ((const pt_op_time *)a)->seconds, y = ((const pt_op_time *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

void plan_time_model(const rec_event *ev, size_t n, pt_gpu gpu, rec_unit ideal_unit,
                     pt_phase_result *r)
{
    memset(r, 0, sizeof *r);
    const double bw = HBM[gpu] * HBM_EFF;
    /* the weights the phase's linears read, each once: distinct weight operands */
    size_t cap = 64;
    while (cap < 4 * n)
        cap *= 2;
    const void **seen = dllm_calloc(cap, sizeof *seen);
    for (size_t i = 0; i < n; i++) {
        const rec_event *e = &ev[i];
        double bytes = e->rd + e->wr, t = 0;
        switch (e->kind) {
        case REC_KERNEL:
        case REC_MATMUL:
            t = fmax(e->flops / (PEAK[e->unit] * FLOP_EFF), bytes / bw);
            r->seconds_by_unit[e->unit] += t;
            t += LAUNCH_S;
            r->launches++;
            if (e->kind == REC_KERNEL)
                r->kernels++;
            else
                r->matmuls++;
            break;
        case REC_COPY:
            t = bytes / bw + LAUNCH_S;
            r->launches++;
            r->copies++;
            r->weight_copies += !strcmp(e->what, "scale_copy");
            break;
        case REC_H2D:
        case REC_D2H:
            t = e->xfer / LINK_BPS + SYNC_S;
            r->host_syncs++;
            r->transfer_bytes += e->xfer;
            break;
        case REC_SYNC:
            t = SYNC_S;
            r->host_syncs++;
            break;
        default: /* allocations: none in a steady step */
            break;
        }
        if (e->kind == REC_KERNEL || e->kind == REC_MATMUL || e->kind == REC_COPY)
            op_add(r, e->op, e->what, e->unit, t, 1);
        r->modelled_s += t;
        r->bytes += bytes;
        r->flops += e->flops;
        r->flops_by_unit[e->unit] += e->flops;
        if (e->dense)
            r->dense_flops += e->flops;
        if (e->weight) {
            size_t h = (size_t)(((uintptr_t)e->weight >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
            while (seen[h] && seen[h] != e->weight)
                h = (h + 1) & (cap - 1);
            if (!seen[h]) {
                seen[h] = e->weight;
                r->weight_bytes += e->weight_bytes;
            }
        }
    }
    free(seen);
    qsort(r->ops, (size_t)r->nops, sizeof r->ops[0], op_cmp);
    r->ideal_s = r->dense_flops / (PEAK[ideal_unit] * FLOP_EFF) + r->weight_bytes / bw;
}

/* ---- the phases ------------------------------------------------------------------------ */

typedef struct {
    dllm_tf *m;
    dllm_backend *be;
    const pt_shape *s;
    int T;
} runner;

/* The mean masked rows of one block over its steps (dllm/sampler.c's schedule: the
 * block's tokens spread evenly over its steps, the remainder to the first ones). */
static int block_rows(const pt_shape *s)
{
    int nb = s->G / s->block_length, spb = s->steps / nb;
    int base = s->block_length / spb, rem = s->block_length % spb;
    double left = s->block_length, sum = 0;
    for (int k = 0; k < spb; k++) {
        sum += left;
        left -= base + (k < rem ? 1 : 0);
    }
    return (int)lround(sum / spb);
}

/* The positions a cached step recomputes: the block's (dual), or the block's and every
 * later one's (prefix), for a block whose rows are the mean over the generation's
 * blocks (prefix recomputes G - b Bk rows at block b: Bk (nb + 1) / 2 on average). */
static void cached_span(const pt_shape *s, int *lo, int *hi)
{
    const int nb = s->G / s->block_length;
    *lo = s->P + (int)lround(s->block_length * (nb - 1) / 2.0);
    *hi = s->cache == DLLM_CACHE_DUAL ? *lo + s->block_length : s->P + s->G;
}

static void take(runner *u, pt_gpu gpu, rec_unit iu, pt_phase_result *r, int rows)
{
    size_t n;
    const rec_event *ev = dllm_record_events(u->be, &n);
    plan_time_model(ev, n, gpu, iu, r);
    r->rows = rows;
    r->launches_per_layer = (double)r->launches / dllm_tf_config(u->m)->n_layers;
}

/* r = wa a + wb b, field by field (counts rounded) */
static void mix(pt_phase_result *r, const pt_phase_result *a, double wa,
                const pt_phase_result *b, double wb)
{
#define MIX_D(f) r->f = wa * a->f + wb * b->f
#define MIX_L(f) r->f = lround(wa * (double)a->f + wb * (double)b->f)
    MIX_D(modelled_s), MIX_D(ideal_s), MIX_D(launches_per_layer), MIX_D(transfer_bytes);
    MIX_D(bytes), MIX_D(flops), MIX_D(dense_flops), MIX_D(weight_bytes), MIX_D(fwd_rows);
    MIX_L(launches), MIX_L(kernels), MIX_L(matmuls), MIX_L(copies), MIX_L(host_syncs);
    MIX_L(weight_copies), MIX_L(rows);
    for (int k = 0; k < REC_NUNITS; k++)
        MIX_D(flops_by_unit[k]), MIX_D(seconds_by_unit[k]);
#undef MIX_D
#undef MIX_L
    r->nops = 0;
    const pt_phase_result *src[2] = {a, b};
    const double w[2] = {wa, wb};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < src[s]->nops; i++) {
            const pt_op_time *o = &src[s]->ops[i];
            op_add(r, o->op, o->what, o->unit, w[s] * o->seconds, w[s] * o->launches);
        }
    qsort(r->ops, (size_t)r->nops, sizeof r->ops[0], op_cmp);
}

/* The sampler the run's rollouts use (pt_shape.sc), or, where the caller gave none (its
 * vocab 0), the published one at the shape's lengths over the model's vocabulary. */
static dllm_sampler_cfg sampler_of(const runner *u)
{
    const pt_shape *s = u->s;
    const dllm_model_config *mc = dllm_tf_config(u->m);
    dllm_sampler_cfg c = s->sc;
    if (!c.vocab) {
        c = (dllm_sampler_cfg){.temperature = 1.0, .remasking = REMASK_LOW_CONFIDENCE,
                               .mask_id = mc->mask_token_id, .eos_id = mc->eos_token_id,
                               .eot_id = -1, .vocab = mc->embedding_size};
        c.cfg_scale = s->cfg ? 1.0 : 0.0;
    }
    c.gen_length = s->G;
    c.block_length = s->block_length;
    c.steps = s->steps;
    c.cache = s->cache;
    c.cache_refresh = s->cache_refresh;
    return c;
}

/* The rollout phase: a whole rollout of the step's S sequences through the sampler's own
 * loop (dllm_sample_model) over the rollout copy's device view, or its block cache's
 * under rollout.cache, recorded warm (every buffer grown), and its mean denoising step:
 * each count and time over the steps. On a backend that computes nothing the sampler
 * commits by its schedule (no early ends). */
static int rollout_phase(runner *u, pt_gpu gpu, rec_unit iu, pt_phase_result *r, dllm_err *err)
{
    const pt_shape *s = u->s;
    const dllm_sampler_cfg sc = sampler_of(u);
    dllm_device_logits dl;
    dllm_block_cache *bc = NULL;
    if (s->cache == DLLM_CACHE_NONE ? dllm_tf_device_logits(u->m, true, &dl, err)
                                    : dllm_block_cache_new(&bc, u->m, true, err))
        return err->code;
    if (bc)
        dl = dllm_block_cache_view(bc);
    int32_t *prompts = dllm_calloc((size_t)(s->S > 0 ? s->S : 1) * (size_t)(s->P > 0 ? s->P : 1),
                                   sizeof *prompts);
    int rc = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        if (rep == 1)
            dllm_record_clear(u->be);
        dllm_rollout ro;
        rc = dllm_sample_model(&dl, prompts, NULL, s->S, s->P, &sc, 1, &ro, err);
        dllm_rollout_free(&ro);
    }
    free(prompts);
    if (bc)
        dllm_block_cache_free(bc);
    if (rc)
        return rc;
    pt_phase_result *all = dllm_malloc(sizeof *all), *none = dllm_calloc(1, sizeof *none);
    take(u, gpu, iu, all, s->S * block_rows(s));
    mix(r, all, 1.0 / s->steps, none, 0.0);
    r->rows = all->rows;
    const int BB = s->cfg ? 2 * s->S : s->S;
    if (s->cache == DLLM_CACHE_NONE) {
        r->fwd_rows = (double)BB * u->T;
    } else { /* a block's fills over the canvas (its first step and every cache_refresh-th),
              * then its cached steps' positions */
        const int spb = s->steps / (s->G / s->block_length);
        const int fills = s->cache_refresh > 0 ? (spb + s->cache_refresh - 1) / s->cache_refresh
                                               : 1;
        int lo, hi;
        cached_span(s, &lo, &hi);
        r->fwd_rows = ((double)fills * BB * u->T + (double)(spb - fills) * BB * (hi - lo)) / spb;
    }
    free(all), free(none);
    return 0;
}

/* host arrays of one micro-batch: tokens, the generated rows, their targets */
typedef struct {
    int32_t *tok, *rows, *tg;
    float *logp, *g;
} mb_bufs;

static void mb_make(mb_bufs *b, int B, int P, int G, int T)
{
    b->tok = dllm_calloc((size_t)B * T, sizeof *b->tok);
    b->rows = dllm_malloc(sizeof *b->rows * (size_t)B * G);
    b->tg = dllm_calloc((size_t)B * G, sizeof *b->tg);
    b->logp = dllm_malloc(sizeof *b->logp * (size_t)B * G);
    b->g = dllm_calloc((size_t)B * G, sizeof *b->g);
    for (int i = 0; i < B; i++)
        for (int t = 0; t < G; t++)
            b->rows[(size_t)i * G + t] = i * T + P + t;
}

static void mb_free(mb_bufs *b)
{
    free(b->tok);
    free(b->rows);
    free(b->tg);
    free(b->logp);
    free(b->g);
}

static int score(runner *u, int *rows_out, dllm_err *err)
{
    const pt_shape *s = u->s;
    mb_bufs b;
    int mbs = s->micro_batch < s->S ? s->micro_batch : s->S;
    mb_make(&b, mbs, s->P, s->G, u->T);
    int rc = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        if (rep == 1)
            dllm_record_clear(u->be);
        for (int i0 = 0; i0 < s->S && !rc; i0 += mbs) {
            int nb = s->S - i0 < mbs ? s->S - i0 : mbs;
            rc = dllm_tf_target_logp(u->m, false, b.tok, NULL, nb, u->T, b.rows, b.tg,
                                     nb * s->G, b.logp);
            if (rc)
                rc = dllm_err_set(err, rc, "plan --time: the scoring forward failed");
        }
    }
    *rows_out = s->S * s->G;
    mb_free(&b);
    return rc;
}

static int update_step(runner *u, int *rows_out, dllm_err *err)
{
    const pt_shape *s = u->s;
    mb_bufs b;
    int mbs = s->micro_batch < s->S ? s->micro_batch : s->S;
    mb_make(&b, mbs, s->P, s->G, u->T);
    int rc = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        if (rep == 1)
            dllm_record_clear(u->be);
        dllm_optim_zero_grad(dllm_tf_optim(u->m));
        for (int i0 = 0; i0 < s->S && !rc; i0 += mbs) {
            int nb = s->S - i0 < mbs ? s->S - i0 : mbs;
            rc = dllm_tf_device_forward_logp(u->m, b.tok, NULL, nb, u->T, b.rows, b.tg,
                                             nb * s->G, b.logp);
            if (rc) {
                rc = dllm_err_set(err, rc, "plan --time: the update's forward failed");
                break;
            }
            dllm_tf_device_backward_logp(u->m, b.g);
        }
        if (!rc) {
            dllm_adamw_args a = {rep + 1, 1e-6f, 0.9f, 0.99f, 1e-8f, 0.1f, s->grad_clip};
            dllm_optim_step(dllm_tf_optim(u->m), &a);
        }
    }
    *rows_out = s->S * s->G;
    mb_free(&b);
    return rc;
}

static rec_unit prec_unit(dllm_rollout_kind k)
{
    return dllm_rollout_is_fp8(k)       ? REC_UNIT_FP8_TC
           : k == DLLM_ROLLOUT_INT8 ? REC_UNIT_INT8_TC
                                    : REC_UNIT_BF16_TC;
}


static int check_shape(const pt_shape *s, dllm_err *err)
{
    if (s->prec.rollout == DLLM_ROLLOUT_NVFP4)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.precision nvfp4: the CUDA backend has "
                            "no NVFP4 linear (use bf16, fp8 or int8)");
    if (s->S < 1 || s->P < 0 || s->G < 1 || s->block_length < 1 || s->G % s->block_length ||
        s->steps < s->G / s->block_length || s->steps % (s->G / s->block_length) ||
        s->micro_batch < 1)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "plan --time: %d sequences of %d + %d tokens, "
                            "block %d, %d steps, micro-batch %d: not a rollout the sampler runs",
                            s->S, s->P, s->G, s->block_length, s->steps, s->micro_batch);
    if (s->cache != DLLM_CACHE_NONE && s->cfg)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "rollout.cache %s: classifier-free guidance "
                            "(rollout.cfg_scale > 0) is not cached", dllm_cache_name(s->cache));
    return 0;
}

int plan_time_phases(dllm_tf *m, dllm_backend *be, const pt_shape *s, pt_gpu gpu, pt_result *out,
                     dllm_err *err)
{
    memset(out, 0, sizeof *out);
    out->gpu = gpu;
    if (check_shape(s, err))
        return err->code;
    const dllm_rollout_kind k = s->prec.rollout;
    runner u = {m, be, s, s->P + s->G};
    int rc = dllm_tf_set_recompute(m, s->recompute);
    if (rc)
        rc = dllm_err_set(err, DLLM_EXIT_INPUT, "train.recompute %d: must be 0 or K >= 1",
                          s->recompute);
    if (!rc)
        rc = dllm_tf_to_device(m, be, err);
    if (!rc)
        rc = dllm_tf_rollout_sync(m, &s->prec, NULL, err);
    int rows = 0;
    if (!rc)
        rc = rollout_phase(&u, gpu, prec_unit(k), &out->ph[PT_ROLLOUT_STEP], err);
    if (!rc && s->cache != DLLM_CACHE_NONE) { /* the same rollout step, uncached */
        pt_shape su = *s;
        su.cache = DLLM_CACHE_NONE;
        su.cache_refresh = 0;
        runner uu = {m, be, &su, u.T};
        rc = rollout_phase(&uu, gpu, prec_unit(k), &out->uncached_rollout, err);
        if (!rc)
            out->uncached_over_cached =
                out->uncached_rollout.modelled_s / out->ph[PT_ROLLOUT_STEP].modelled_s;
    }
    if (!rc && !(rc = score(&u, &rows, err))) {
        take(&u, gpu, REC_UNIT_BF16_TC, &out->ph[PT_SCORE], rows);
        out->ph[PT_SCORE].fwd_rows = (double)s->S * u.T;
    }
    if (!rc)
        rc = dllm_tf_device_train(m, err);
    if (!rc && !(rc = update_step(&u, &rows, err))) {
        take(&u, gpu, REC_UNIT_BF16_TC, &out->ph[PT_UPDATE_STEP], rows);
        out->ph[PT_UPDATE_STEP].fwd_rows = (double)s->S * u.T;
    }
    /* the run's peak: the comparison below builds a second rollout copy a run never holds */
    out->peak_bytes = dllm_record_peak(be);
    if (!rc && dllm_rollout_is_fp8(k)) { /* the same step with a bf16 rollout copy */
        dllm_precision pb = s->prec;
        pb.rollout = DLLM_ROLLOUT_BF16;
        rc = dllm_tf_rollout_sync(m, &pb, NULL, err);
        if (!rc && !(rc = rollout_phase(&u, gpu, REC_UNIT_BF16_TC, &out->bf16_rollout, err))) {
            out->fp8_over_bf16 = out->bf16_rollout.modelled_s / out->ph[PT_ROLLOUT_STEP].modelled_s;
        }
    }
    return rc;
}

int plan_time_run(const dllm_model_config *mc, const pt_shape *s, pt_gpu gpu, pt_result *out,
                  dllm_err *err)
{
    memset(out, 0, sizeof *out);
    if (check_shape(s, err))
        return err->code;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dllm_tf *m = dllm_tf_create_shape(mc, err);
    if (!m)
        return err->code;
    if (s->lora_rank > 0)
        dllm_tf_lora_enable(m, s->lora_rank, s->lora_alpha, s->lora_mask, 1);
    /* block-scaled FP8 as on a GPU with CUDA 12.9 or later (H100, H200) */
    dllm_backend *be = dllm_record_new(NULL, true);
    int rc = plan_time_phases(m, be, s, gpu, out, err);
    dllm_tf_free(m);
    dllm_record_free(be);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->wall_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc;
}

/* ---- output ---------------------------------------------------------------------------- */

static double pct(double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; }

void plan_time_print(const pt_result *r, const char *what, FILE *f)
{
    fprintf(f, "modelled step time (%s; not a measurement): %s\n", pt_gpu_names[r->gpu], what);
    fprintf(f, "the CUDA backend's calls today, recorded without a device; an op takes\n"
               "max(FLOPs / (its unit's peak x 0.7), bytes / (HBM x 0.8)) + 4 us per launch,\n"
               "a host sync 10 us, a transfer 25 GB/s (docs/PLAN.md)\n\n");
    fprintf(f, "%-13s %12s %10s %7s %9s %6s %10s %8s %8s %8s %8s %8s %8s\n", "phase",
            "modelled_s", "ideal_s", "ratio", "launches", "syncs", "xfer_MB", "fp8_tc%",
            "int8_tc%", "bf16_tc%", "fp32_cc%", "memory%", "rows");
    for (int p = 0; p <= PT_NPHASES; p++) {
        const pt_phase_result *x = p < PT_NPHASES ? &r->ph[p] : &r->bf16_rollout;
        if (p == PT_NPHASES && r->fp8_over_bf16 <= 0)
            break;
        fprintf(f, "%-13s %12.4f %10.4f %7.2f %9ld %6ld %10.3f %8.2f %8.2f %8.2f %8.2f %8.2f %8d\n",
                p < PT_NPHASES ? pt_phase_names[p] : "rollout(bf16)", x->modelled_s, x->ideal_s,
                x->ideal_s > 0 ? x->modelled_s / x->ideal_s : 0.0, x->launches, x->host_syncs,
                x->transfer_bytes / 1e6, pct(x->flops_by_unit[REC_UNIT_FP8_TC], x->flops),
                pct(x->flops_by_unit[REC_UNIT_INT8_TC], x->flops),
                pct(x->flops_by_unit[REC_UNIT_BF16_TC], x->flops),
                pct(x->flops_by_unit[REC_UNIT_FP32_CORE], x->flops),
                pct(x->flops_by_unit[REC_UNIT_MEMORY], x->flops), x->rows);
    }
    fprintf(f, "\n%-13s %14s %14s %14s %14s %14s   (modelled seconds of kernels and matmuls by "
            "unit)\n", "phase", "fp8_tc_s", "int8_tc_s", "bf16_tc_s", "fp32_cc_s", "memory_s");
    for (int p = 0; p < PT_NPHASES; p++)
        fprintf(f, "%-13s %14.4f %14.4f %14.4f %14.4f %14.4f\n", pt_phase_names[p],
                r->ph[p].seconds_by_unit[REC_UNIT_FP8_TC],
                r->ph[p].seconds_by_unit[REC_UNIT_INT8_TC],
                r->ph[p].seconds_by_unit[REC_UNIT_BF16_TC],
                r->ph[p].seconds_by_unit[REC_UNIT_FP32_CORE],
                r->ph[p].seconds_by_unit[REC_UNIT_MEMORY]);
    fprintf(f, "\n");
    for (int p = 0; p < PT_NPHASES; p++)
        fprintf(f, "%s: %.1f launches per layer, %ld weight-scale copies\n", pt_phase_names[p],
                r->ph[p].launches_per_layer, r->ph[p].weight_copies);
    fprintf(f, "\nwhere the modelled time goes (table entry / kernel, matmul or copy, unit: "
               "seconds, share of the phase, launches), the first five kinds:\n");
    for (int p = 0; p < PT_NPHASES; p++) {
        const pt_phase_result *x = &r->ph[p];
        for (int i = 0; i < x->nops && i < 5; i++)
            fprintf(f, "%-13s %-22s %-22s %-16s %9.4f s %5.1f%% %8.0f\n", i ? "" : pt_phase_names[p],
                    x->ops[i].op, x->ops[i].what, rec_unit_names[x->ops[i].unit],
                    x->ops[i].seconds,
                    x->modelled_s > 0 ? 100 * x->ops[i].seconds / x->modelled_s : 0.0,
                    x->ops[i].launches);
    }
    fprintf(f, "\n");
    if (r->fp8_over_bf16 > 0)
        fprintf(f, "fp8 over bf16 (rollout step, modelled): %.3fx\n", r->fp8_over_bf16);
    if (r->uncached_over_cached > 0)
        fprintf(f, "rollout cache: a block's mean step %.4f s over %.0f forward rows; uncached "
                "%.4f s over %.0f rows; uncached over cached (modelled): %.3fx\n",
                r->ph[PT_ROLLOUT_STEP].modelled_s, r->ph[PT_ROLLOUT_STEP].fwd_rows,
                r->uncached_rollout.modelled_s, r->uncached_rollout.fwd_rows,
                r->uncached_over_cached);
    fprintf(f, "recorded in %.1f s\n", r->wall_s);
    if (r->peak_bytes > 0)
        fprintf(f, "device peak (the run's train phase, recorded; `plan` without --time "
                   "itemises it): %.2f GB (%lld bytes)\n",
                (double)r->peak_bytes / 1e9, (long long)r->peak_bytes);
}

static void json_str(const char *s, FILE *f)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_phase(const pt_phase_result *x, FILE *f)
{
    fprintf(f, "{\"modelled_s\": %.6g, \"ideal_s\": %.6g, \"launches\": %ld, "
               "\"launches_per_layer\": %.6g, \"kernels\": %ld, \"matmuls\": %ld, \"copies\": "
               "%ld, \"weight_copies\": %ld, \"host_syncs\": %ld, \"transfer_bytes\": %.0f, "
               "\"rows\": %d, \"fwd_rows\": %.6g, \"flops\": %.6g, \"dense_flops\": %.6g, \"weight_bytes\": %.6g, "
               "\"flops_by_unit\": {",
            x->modelled_s, x->ideal_s, x->launches, x->launches_per_layer, x->kernels,
            x->matmuls, x->copies, x->weight_copies, x->host_syncs, x->transfer_bytes, x->rows,
            x->fwd_rows, x->flops, x->dense_flops, x->weight_bytes);
    for (int u = 0; u < REC_NUNITS; u++)
        fprintf(f, "%s\"%s\": %.6g", u ? ", " : "", rec_unit_names[u], x->flops_by_unit[u]);
    fprintf(f, "}, \"seconds_by_unit\": {");
    for (int u = 0; u < REC_NUNITS; u++)
        fprintf(f, "%s\"%s\": %.6g", u ? ", " : "", rec_unit_names[u], x->seconds_by_unit[u]);
    fprintf(f, "}, \"bytes\": %.6g, \"ops\": [", x->bytes);
    for (int i = 0; i < x->nops; i++) {
        fprintf(f, "%s{\"op\": ", i ? ", " : "");
        json_str(x->ops[i].op, f);
        fprintf(f, ", \"what\": ");
        json_str(x->ops[i].what, f);
        fprintf(f, ", \"unit\": \"%s\", \"seconds\": %.6g, \"launches\": %.6g}",
                rec_unit_names[x->ops[i].unit], x->ops[i].seconds, x->ops[i].launches);
    }
    fprintf(f, "]}");
}

void plan_time_print_json(const pt_result *r, const char *what, FILE *f)
{
    fprintf(f, "{\"modelled\": true, \"measured\": false, \"gpu\": \"%s\", \"what\": ",
            pt_gpu_names[r->gpu]);
    json_str(what, f);
    fprintf(f, ", \"phases\": {");
    for (int p = 0; p < PT_NPHASES; p++) {
        fprintf(f, "%s\"%s\": ", p ? ", " : "", pt_phase_names[p]);
        json_phase(&r->ph[p], f);
    }
    fprintf(f, "}");
    if (r->fp8_over_bf16 > 0) {
        fprintf(f, ", \"rollout_step_bf16\": ");
        json_phase(&r->bf16_rollout, f);
        fprintf(f, ", \"fp8_over_bf16_rollout_step\": %.6g", r->fp8_over_bf16);
    } else {
        fprintf(f, ", \"fp8_over_bf16_rollout_step\": null");
    }
    if (r->uncached_over_cached > 0) {
        fprintf(f, ", \"rollout_step_uncached\": ");
        json_phase(&r->uncached_rollout, f);
        fprintf(f, ", \"uncached_over_cached_rollout_step\": %.6g", r->uncached_over_cached);
    } else {
        fprintf(f, ", \"uncached_over_cached_rollout_step\": null");
    }
    fprintf(f, ", \"device_peak_bytes\": %lld}\n", (long long)r->peak_bytes);
}
