/* test_record.c: the recording backend (kernels/record/record.h) and `plan --time`'s model
 * (src/plan/plan_time.h).
 *
 *   - every entry of the backend table is recorded: a slot the recording leaves NULL is
 *     one the CUDA backend leaves NULL (NVFP4, INT8), so an entry added to the table without a
 *     recording fails here (under the emulation, the NULL slots are compared with the
 *     CUDA backend's own table);
 *   - the roofline of hand-made events against the documented constants;
 *   - LLaDA-8B at the d1 recipe's shapes (96 x (200 + 256) tokens, FP8 rollout, LoRA 128)
 *     recorded on a shape-only model: the rollout step's FP8 GEMM and (BF16 tensor-core)
 *     attention FLOPs equal their closed forms, no weight-scale copy (the scales stay
 *     where the quantiser stored them), the 7 layer linears as cuBLASLt matmuls, two host
 *     syncs, in seconds and without the model's host memory;
 *   - under the CUDA emulation, tiny models at each precision (fp32 and bf16 trainers,
 *     bf16, block- and tensor-scaled FP8 rollouts, with and without LoRA and
 *     recomputation): every table call recorded over the emulated CUDA backend issues
 *     exactly the kernels, cuBLASLt matmuls, allocations and device bytes the emulation
 *     counts for it; the recorded peak equals the emulated allocator's to the byte; and
 *     the same phases recorded without a device (a shape-only model) give the same op
 *     stream, call by call (op, kernel, shape), and the same peak;
 *   - under the emulation, a run's device work through the policy (plan_memory.h's
 *     pm_work: LLaDA's, Dream's and autoregressive rollouts, scoring, the update) of tiny
 *     models recorded over the emulated backend: each call's kernels, matmuls and
 *     allocations as the emulation counts them, and the same peak. */
#include "config.h"

#include "dllm/arch.h"
#include "dllm/transformer.h"
#include "kernels/cuda_ops.h"
#include "kernels/record/record.h"
#include "src/plan/plan_memory.h"
#include "src/plan/plan_time.h"
#include "dllm/policy_infer.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"
#endif

typedef void (*slot_fn)(void);

START_TEST(test_every_entry_recorded)
{
    dllm_backend *be = dllm_record_new(NULL, true);
    const dllm_backend_ops *ops = be->ops;
    slot_fn slots[sizeof *ops / sizeof(slot_fn)];
    ck_assert_uint_eq(sizeof *ops % sizeof(slot_fn), 0);
    memcpy(slots, ops, sizeof slots);
    /* the optional entries the CUDA backend leaves empty */
    const size_t empty[] = {offsetof(dllm_backend_ops, nvfp4_linear_fwd) / sizeof(slot_fn),
                            offsetof(dllm_backend_ops, int8_linear_fwd) / sizeof(slot_fn),
                            offsetof(dllm_backend_ops, linears_fwd) / sizeof(slot_fn),
                            offsetof(dllm_backend_ops, ar_choose_nucleus) / sizeof(slot_fn)};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        ck_assert_msg(slots[i] != NULL || i == empty[0] || i == empty[1] || i == empty[2] ||
                          i == empty[3],
                      "backend table slot %zu has no recording (kernels/record/backend_record.c)",
                      i);
#ifdef DLLM_CUDA_EMULATION
    dllm_backend *cu = dllm_backend_cuda();
    ck_assert_ptr_nonnull(cu);
    slot_fn cs[sizeof slots / sizeof slots[0]];
    memcpy(cs, cu->ops, sizeof cs);
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        ck_assert_msg((slots[i] == NULL) == (cs[i] == NULL),
                      "slot %zu: the recording %s, the CUDA backend %s", i,
                      slots[i] ? "has it" : "has none", cs[i] ? "has it" : "has none");
#endif
    ck_assert(dllm_record_is(be));
    ck_assert(!dllm_record_is(dllm_backend_cpu()));
    dllm_record_free(be);
}
END_TEST

static rec_event ev(rec_kind k, rec_unit u, double flops, double rd, double wr, double xfer)
{
    rec_event e;
    memset(&e, 0, sizeof e);
    e.op = "t";
    e.what = "t";
    e.kind = k;
    e.unit = u;
    e.flops = flops;
    e.rd = rd;
    e.wr = wr;
    e.xfer = xfer;
    return e;
}

static void near(double got, double want)
{
    ck_assert_msg(fabs(got - want) <= 1e-12 * fabs(want) + 1e-15, "got %.15g, want %.15g", got,
                  want);
}

START_TEST(test_roofline)
{
    static int w1, w2;
    rec_event e[7];
    e[0] = ev(REC_MATMUL, REC_UNIT_FP8_TC, 1e12, 1e6, 1e6, 0); /* compute-bound */
    e[0].dense = true, e[0].weight = &w1, e[0].weight_bytes = 5e8;
    e[1] = ev(REC_MATMUL, REC_UNIT_FP8_TC, 1e12, 1e6, 1e6, 0); /* the same weight again */
    e[1].dense = true, e[1].weight = &w1, e[1].weight_bytes = 5e8;
    e[2] = ev(REC_KERNEL, REC_UNIT_MEMORY, 1e6, 2e9, 1e9, 0);  /* bandwidth-bound */
    e[3] = ev(REC_COPY, REC_UNIT_MEMORY, 0, 512, 512, 0);
    e[4] = ev(REC_D2H, REC_UNIT_MEMORY, 0, 1e6, 0, 1e6);
    e[5] = ev(REC_SYNC, REC_UNIT_MEMORY, 0, 0, 0, 0);
    e[6] = ev(REC_KERNEL, REC_UNIT_FP32_CORE, 67e12, 0, 0, 0);
    e[6].dense = true, e[6].weight = &w2, e[6].weight_bytes = 1e9;
    pt_phase_result r;
    plan_time_model(e, 7, PT_GPU_H100, REC_UNIT_BF16_TC, &r);
    const double bw = 3.35e12 * 0.8;
    double want = 2 * (1e12 / (1979e12 * 0.7) + 4e-6) + (3e9 / bw + 4e-6) + (1024 / bw + 4e-6) +
                  (1e6 / 25e9 + 10e-6) + 10e-6 + (1.0 / 0.7 + 4e-6);
    near(r.modelled_s, want);
    ck_assert_int_eq(r.launches, 5);
    ck_assert_int_eq(r.kernels, 2);
    ck_assert_int_eq(r.matmuls, 2);
    ck_assert_int_eq(r.copies, 1);
    ck_assert_int_eq(r.host_syncs, 2);
    near(r.transfer_bytes, 1e6);
    near(r.flops_by_unit[REC_UNIT_FP8_TC], 2e12);
    near(r.flops_by_unit[REC_UNIT_FP32_CORE], 67e12);
    near(r.weight_bytes, 1.5e9); /* each weight once */
    near(r.ideal_s, (2e12 + 67e12) / (989e12 * 0.7) + 1.5e9 / bw);
    pt_phase_result h;
    plan_time_model(e, 7, PT_GPU_H200, REC_UNIT_BF16_TC, &h);
    near(h.modelled_s - r.modelled_s, (3e9 + 1024) / (4.8e12 * 0.8) - (3e9 + 1024) / bw);
}
END_TEST

static pt_shape d1_shape(void)
{
    pt_shape s = {0};
    dllm_err err = {0};
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "fp32", "fp8", "e4m3", "block", false, &err), 0);
    s.lora_rank = 128, s.lora_alpha = 64, s.lora_mask = LORA_ALL;
    s.S = 96, s.P = 200, s.G = 256, s.block_length = 32, s.steps = 128;
    s.micro_batch = 64, s.recompute = 1, s.grad_clip = 0.2;
    return s;
}

START_TEST(test_llada8b_closed_forms)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    pt_shape s = d1_shape();
    pt_result *r = malloc(sizeof *r);
    ck_assert_msg(plan_time_run(&mc, &s, PT_GPU_H100, r, &err) == 0, "%s", err.msg);
    const pt_phase_result *ro = &r->ph[PT_ROLLOUT_STEP];
    const double N = 96.0 * 456, C = mc.d_model, H = mc.mlp_hidden, L = mc.n_layers;
    const double QD = (double)mc.n_heads * mc.head_dim, KD = (double)mc.n_kv_heads * mc.head_dim;
    const double lin = C * QD + 2 * C * KD + QD * C + 3 * C * H;
    near(ro->flops_by_unit[REC_UNIT_FP8_TC], 2 * N * L * lin);
    /* bidirectional attention on BF16 tensor cores (head dim 128): QK^T and PV over
     * 456 x 456 pairs per head; nothing left on fp32 CUDA cores */
    const double att = 4.0 * 96 * mc.n_heads * 456.0 * 456 * mc.head_dim * L;
    ck_assert(ro->flops_by_unit[REC_UNIT_FP32_CORE] == 0);
    /* the mean step of a whole rollout through the sampler's loop; the head over the
     * mean masked rows of a 32-token block in 16 steps (32 .. 2): 17 */
    ck_assert_int_eq(ro->rows, 96 * 17);
    near(ro->flops_by_unit[REC_UNIT_BF16_TC], att + 2.0 * 96 * 17 * C * mc.embedding_size);
    /* no weight-scale copies (the scales are stored in cuBLASLt's layout when quantised)
     * and, 96 x 456 tokens being a multiple of 8, no padded rows to copy out: only the
     * layers' two device copies (the canvas ids and key mask into the set) */
    ck_assert_int_eq(ro->copies, 2);
    ck_assert_int_eq(ro->weight_copies, 0);
    ck_assert(fabs(ro->launches_per_layer * L - (double)ro->launches) <= 0.5);
    /* the linears, and the head a logits chunk of rows at a time: step k of a block asks
     * for 96 (32 - 2k) rows */
    const int chunk = dllm_tf_device_chunk_rows(mc.embedding_size);
    double head = 0;
    for (int left = 32; left > 0; left -= 2)
        head += (96 * left + chunk - 1) / chunk;
    ck_assert_int_eq(ro->matmuls, lround(7 * L + head / 16));
    /* blocking copies: the step's count of rows down, and the rollout's transfers at its
     * start and end (the prompts, key mask and RoPE positions up; the canvas and the
     * records down: at most 16 bytes a canvas position) over its 128 steps */
    ck_assert_int_eq(ro->host_syncs, 1);
    ck_assert_msg(ro->transfer_bytes > 4 && ro->transfer_bytes <= 4 + 16.0 * N / 128,
                  "transfers %.0f bytes a step", ro->transfer_bytes);
    ck_assert(r->fp8_over_bf16 > 1.0);
    ck_assert(r->ph[PT_UPDATE_STEP].modelled_s > r->ph[PT_SCORE].modelled_s);
    /* the denoising step near the hardware's speed: RoPE inside the attention's loads and
     * the residual adds in the GEMMs' epilogues leave no separate pass over those
     * activations (rope_fwd and add: none in the step) */
    ck_assert_msg(ro->modelled_s <= 1.3 * ro->ideal_s, "rollout step modelled %.4f s, ideal "
                  "%.4f s: ratio %.3f > 1.3", ro->modelled_s, ro->ideal_s,
                  ro->modelled_s / ro->ideal_s);
    for (int i = 0; i < ro->nops; i++)
        ck_assert_msg(strcmp(ro->ops[i].op, "rope_fwd") && strcmp(ro->ops[i].op, "add"),
                      "the rollout step still runs %s (%s)", ro->ops[i].op, ro->ops[i].what);
    printf("llada-8b d1 (modelled, h100): rollout step %.3f s (ideal %.3f), score %.3f s, "
           "update %.3f s, fp8/bf16 %.3fx, peak %.2f GB, recorded in %.1f s\n", ro->modelled_s,
           ro->ideal_s, r->ph[PT_SCORE].modelled_s, r->ph[PT_UPDATE_STEP].modelled_s,
           r->fp8_over_bf16, (double)r->peak_bytes / 1e9, r->wall_s);
    free(r);
}
END_TEST

/* Under rollout.cache the rollout step is a block's mean: one fill over the whole canvas
 * and 15 cached steps over 32 rows (dual) or the mean block's and later rows (prefix);
 * refreshed every 4th step, 4 fills and 12 cached steps (dual). */
START_TEST(test_llada8b_cached_rollout)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    const double C = mc.d_model, H = mc.mlp_hidden, L = mc.n_layers;
    const double QD = (double)mc.n_heads * mc.head_dim, KD = (double)mc.n_kv_heads * mc.head_dim;
    const double lin = C * QD + 2 * C * KD + QD * C + 3 * C * H;
    const dllm_cache modes[3] = {DLLM_CACHE_DUAL, DLLM_CACHE_PREFIX, DLLM_CACHE_DUAL};
    const int refresh[3] = {0, 0, 4};
    /* mean rows per sequence: (456 + 15 x 32) / 16; prefix at the mean block: 456 -
     * (200 + 112) = 144 rows, (456 + 15 x 144) / 16 */
    const double rows[3] = {(456.0 + 15 * 32) / 16, (456.0 + 15 * 144) / 16,
                            (4 * 456.0 + 12 * 32) / 16};
    for (int k = 0; k < 3; k++) {
        pt_shape s = d1_shape();
        s.cache = modes[k];
        s.cache_refresh = refresh[k];
        pt_result *r = malloc(sizeof *r);
        ck_assert_msg(plan_time_run(&mc, &s, PT_GPU_H100, r, &err) == 0, "%s", err.msg);
        const pt_phase_result *ro = &r->ph[PT_ROLLOUT_STEP];
        near(ro->fwd_rows, 96 * rows[k]);
        near(r->uncached_rollout.fwd_rows, 96.0 * 456);
        near(ro->flops_by_unit[REC_UNIT_FP8_TC], 2 * 96 * rows[k] * L * lin);
        ck_assert_int_eq(ro->rows, 96 * 17); /* the head's rows as uncached */
        ck_assert(r->uncached_over_cached > (k == 0 ? 4.0 : 1.5));
        ck_assert_int_eq(ro->weight_copies, 0);
        printf("llada-8b d1, cache %s, refresh %d (modelled, h100): rollout step %.3f s over "
               "%.0f rows, uncached %.3f s over %.0f (%.2fx), peak %.2f GB\n",
               dllm_cache_name(modes[k]), refresh[k], ro->modelled_s, ro->fwd_rows, r->uncached_rollout.modelled_s,
               r->uncached_rollout.fwd_rows, r->uncached_over_cached,
               (double)r->peak_bytes / 1e9);
        free(r);
    }
    pt_shape s = d1_shape();
    s.cache = DLLM_CACHE_DUAL;
    s.cfg = true;
    pt_result r;
    ck_assert_int_eq(plan_time_run(&mc, &s, PT_GPU_H100, &r, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "rollout.cache"));
}
END_TEST

/* A bf16 trainer at 8B: its bf16 copy of a shape-only model is address space, not 32 GB
 * of host memory; the update's base linears run on BF16 tensor cores. */
START_TEST(test_llada8b_bf16_trainer)
{
    dllm_model_config mc;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "llada-8b", &err), 0);
    pt_shape s = d1_shape();
    ck_assert_int_eq(dllm_precision_parse(&s.prec, "bf16", "fp8", "e4m3", "block", false, &err), 0);
    pt_result *r = malloc(sizeof *r);
    ck_assert_msg(plan_time_run(&mc, &s, PT_GPU_H100, r, &err) == 0, "%s", err.msg);
    const pt_phase_result *u = &r->ph[PT_UPDATE_STEP];
    ck_assert(u->flops_by_unit[REC_UNIT_BF16_TC] > 0.9 * u->flops);
    ck_assert(r->ph[PT_SCORE].flops_by_unit[REC_UNIT_BF16_TC] > 0.9 * r->ph[PT_SCORE].flops);
    /* the recipe's recorded peak on one rank fits an 80 GB GPU (118.86 GB before one
     * no-grad set, the logits made again per chunk and the activations' shared region) */
    ck_assert_msg(r->peak_bytes > 0 && r->peak_bytes <= (int64_t)80e9, "peak %.2f GB",
                  (double)r->peak_bytes / 1e9);
    printf("llada-8b d1, bf16 trainer (modelled, h100): score %.3f s, update %.3f s (ideal "
           "%.3f), bf16 tensor cores %.1f%% of the update's FLOPs, peak %.2f GB\n",
           r->ph[PT_SCORE].modelled_s, u->modelled_s, u->ideal_s,
           100.0 * u->flops_by_unit[REC_UNIT_BF16_TC] / u->flops, (double)r->peak_bytes / 1e9);
    free(r);
}
END_TEST

#ifdef DLLM_CUDA_EMULATION
/* ---- against the emulated CUDA backend ---------------------------------------------- */

typedef struct {
    char (*line)[160];
    size_t n, cap;
    bool check;       /* compare each call with the emulation's counters */
    dllm_emu_stats last;
    char fail[512];
} trace;

static void on_call(void *ctx, const char *op, const rec_event *ev, size_t n)
{
    trace *t = ctx;
    long k = 0, mm = 0, al = 0;
    long long bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 1024;
            t->line = realloc(t->line, t->cap * sizeof *t->line);
        }
        snprintf(t->line[t->n++], sizeof t->line[0], "%s %s %s %s", op, ev[i].what,
                 rec_kind_names[ev[i].kind], ev[i].kind == REC_ALLOC || ev[i].kind == REC_FREE
                                                 ? "" : ev[i].shape);
        k += ev[i].kind == REC_KERNEL;
        mm += ev[i].kind == REC_MATMUL;
        al += ev[i].kind == REC_ALLOC;
        bytes += ev[i].kind == REC_ALLOC ? ev[i].bytes : ev[i].kind == REC_FREE ? -ev[i].bytes : 0;
    }
    if (!t->check || t->fail[0])
        return;
    dllm_emu_stats s;
    dllm_emu_get_stats(&s);
    long dk = (long)(s.launches - t->last.launches), dm = (long)(s.matmuls - t->last.matmuls);
    long da = (long)(s.device_allocs - t->last.device_allocs);
    long long db = (long long)s.bytes_in_use - (long long)t->last.bytes_in_use;
    if (dk != k || dm != mm || da != al || db != bytes)
        snprintf(t->fail, sizeof t->fail, "call %s (after %zu events): recorded %ld kernels, %ld "
                 "matmuls, %ld allocations, %lld bytes; the emulation ran %ld, %ld, %ld, %lld",
                 op, t->n, k, mm, al, bytes, dk, dm, da, db);
    t->last = s;
}

typedef struct {
    const char *trainer, *rollout, *scaling;
    int lora, recompute;
    dllm_cache cache;
} ecase;

static const ecase ECASES[] = {
    {"fp32", "fp8", "block", 4, 1, DLLM_CACHE_NONE},
    {"fp32", "fp8", "tensor", 0, 0, DLLM_CACHE_NONE},
    {"fp32", "bf16", "block", 0, 1, DLLM_CACHE_NONE},
    {"fp32", "trainer", "block", 8, 0, DLLM_CACHE_NONE},
    {"bf16", "bf16", "block", 4, 1, DLLM_CACHE_NONE},
    {"fp32", "fp8", "channel", 4, 2, DLLM_CACHE_NONE},
    {"fp32", "int8", "block", 4, 1, DLLM_CACHE_NONE},
    {"fp32", "fp8", "block", 4, 1, DLLM_CACHE_DUAL},
    {"fp32", "bf16", "block", 0, 1, DLLM_CACHE_PREFIX},
};
#define NECASES ((int)(sizeof ECASES / sizeof ECASES[0]))

START_TEST(test_matches_emulation)
{
    const ecase *c = &ECASES[_i];
    dllm_err err = {0};
    dllm_model_config mc;
    ck_assert_int_eq(dllm_config_preset(&mc, DLLM_ARCH_LLADA, "tiny", &err), 0);
    pt_shape s = {0};
    ck_assert_int_eq(dllm_precision_parse(&s.prec, c->trainer, c->rollout, "e4m3", c->scaling,
                                          false, &err), 0);
    s.lora_rank = c->lora, s.lora_alpha = 16, s.lora_mask = LORA_ALL;
    s.S = 3, s.P = 5, s.G = 8, s.block_length = 4, s.steps = 4, s.micro_batch = 2;
    s.recompute = c->recompute, s.grad_clip = 1.0, s.cache = c->cache;
    const bool blk = dllm_cuda_fp8_block_scaling_available(NULL, 0);

    /* a real tiny model over the emulated CUDA backend, call by call */
    dllm_tf *m = dllm_tf_create(&mc, 7);
    if (c->lora)
        dllm_tf_lora_enable(m, c->lora, 16, LORA_ALL, 3);
    dllm_backend *cu = dllm_backend_cuda();
    ck_assert_ptr_nonnull(cu);
    dllm_backend *rec = dllm_record_new(cu, blk);
    trace te = {.check = true};
    dllm_emu_reset_stats();
    dllm_emu_get_stats(&te.last);
    dllm_record_set_hook(rec, on_call, &te);
    pt_result *re = malloc(sizeof *re), *rs = malloc(sizeof *rs);
    ck_assert_msg(plan_time_phases(m, rec, &s, PT_GPU_H100, re, &err) == 0, "%s", err.msg);
    ck_assert_msg(!te.fail[0], "%s", te.fail);
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    ck_assert_msg(dllm_record_peak(rec) == (int64_t)st.peak_bytes,
                  "recorded peak %lld, the emulated allocator's %zu",
                  (long long)dllm_record_peak(rec), st.peak_bytes);

    /* the same phases without a device, on a shape-only model */
    dllm_tf *ms = dllm_tf_create_shape(&mc, &err);
    ck_assert_ptr_nonnull(ms);
    if (c->lora)
        dllm_tf_lora_enable(ms, c->lora, 16, LORA_ALL, 3);
    dllm_backend *rn = dllm_record_new(NULL, blk);
    trace tn = {.check = false};
    dllm_record_set_hook(rn, on_call, &tn);
    ck_assert_msg(plan_time_phases(ms, rn, &s, PT_GPU_H100, rs, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tn.n, te.n);
    for (size_t i = 0; i < te.n; i++)
        ck_assert_msg(!strcmp(te.line[i], tn.line[i]), "event %zu: over the emulation '%s', "
                      "without a device '%s'", i, te.line[i], tn.line[i]);
    ck_assert_int_eq(dllm_record_peak(rn), dllm_record_peak(rec));
    for (int p = 0; p < PT_NPHASES; p++) {
        ck_assert_int_eq(re->ph[p].launches, rs->ph[p].launches);
        ck_assert_int_eq(re->ph[p].host_syncs, rs->ph[p].host_syncs);
        near(rs->ph[p].modelled_s, re->ph[p].modelled_s);
    }
    printf("%s trainer, %s rollout (%s), lora %d, recompute %d, cache %s: %zu events, peak %lld "
           "bytes, equal\n", c->trainer, c->rollout, c->scaling, c->lora, c->recompute,
           dllm_cache_name(c->cache), te.n,
           (long long)dllm_record_peak(rec));
    dllm_tf_free(m);
    dllm_tf_free(ms);
    dllm_record_free(rec);
    dllm_record_free(rn);
    free(te.line);
    free(tn.line);
    free(re);
    free(rs);
}
END_TEST

/* The run's device work through the policy (plan_memory.h's pm_work: the samplers of every
 * family, the scorings, the update), over the emulated CUDA backend, call by call. */
typedef struct {
    const char *arch, *prec;
    int lora;
    pm_phase ph;
} wcase;

static const wcase WCASES[] = {
    {"llada", "fp8", 4, PM_TRAIN},  {"dream", "fp32", 0, PM_TRAIN}, {"dream", "fp8", 4, PM_ROLLOUT},
    {"qwen3", "bf16", 4, PM_TRAIN}, {"qwen3", "int8", 0, PM_SCORE},  {"llada", "fp32", 0, PM_TRAIN},
};
#define NWCASES ((int)(sizeof WCASES / sizeof WCASES[0]))

START_TEST(test_policy_work_matches_emulation)
{
    const wcase *c = &WCASES[_i];
    dllm_err err = {0};
    dllm_policy_cfg pc = {.preset = "tiny", .arch = c->arch, .seed = 5};
    ck_assert_int_eq(dllm_policy_infer_cfg(&pc, c->prec, "--precision", &err), 0);
    pc.lora_rank = c->lora, pc.lora_alpha = 16;
    dllm_backend *cu = dllm_backend_cuda();
    ck_assert_ptr_nonnull(cu);
    dllm_backend *rec = dllm_record_new(cu, dllm_cuda_fp8_block_scaling_available(NULL, 0));
    pc.backend = rec;
    trace te = {.check = true};
    dllm_emu_reset_stats();
    dllm_emu_get_stats(&te.last);
    dllm_record_set_hook(rec, on_call, &te);
    dllm_policy *p = NULL;
    ck_assert_msg(dllm_policy_open(&p, &pc, &err) == 0, "%s", err.msg);
    const dllm_model_config *mc = dllm_policy_config(p);
    pm_shape s = {.pc = pc, .B = 3, .P = 5, .S = 3, .mb = 2, .recompute = 1, .top_p = 1.0};
    s.dream = dllm_dream_cfg_default();
    s.sc = (dllm_sampler_cfg){.gen_length = 8, .block_length = 4, .steps = 4, .temperature = 1.0,
                              .remasking = REMASK_LOW_CONFIDENCE,
                              .mask_token = DLLM_MASK_TOKEN_FORBID, .mask_id = mc->mask_token_id,
                              .eos_id = mc->eos_token_id, .eot_id = -1,
                              .vocab = mc->embedding_size};
    bool upd;
    ck_assert_msg(pm_work(p, &s, c->ph, &upd, &err) == 0, "%s", err.msg);
    ck_assert_msg(!te.fail[0], "%s", te.fail);
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    ck_assert_msg(dllm_record_peak(rec) == (int64_t)st.peak_bytes,
                  "recorded peak %lld, the emulated allocator's %zu",
                  (long long)dllm_record_peak(rec), st.peak_bytes);
    printf("%s %s lora %d, %s phase: %zu events over the emulation, each call's kernels, "
           "matmuls and allocations equal, peak %lld\n", c->arch, c->prec, c->lora,
           pm_phase_names[c->ph], te.n, (long long)dllm_record_peak(rec));
    dllm_policy_free(p);
    dllm_record_free(rec);
    free(te.line);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("record");
    TCase *tc = tcase_create("record");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_entry_recorded);
    tcase_add_test(tc, test_roofline);
    tcase_add_test(tc, test_llada8b_closed_forms);
    tcase_add_test(tc, test_llada8b_cached_rollout);
    tcase_add_test(tc, test_llada8b_bf16_trainer);
#ifdef DLLM_CUDA_EMULATION
    tcase_add_loop_test(tc, test_matches_emulation, 0, NECASES);
    tcase_add_loop_test(tc, test_policy_work_matches_emulation, 0, NWCASES);
#endif
    suite_add_tcase(s, tc);
    return s; /* forked: each case on a fresh emulated device */
}
