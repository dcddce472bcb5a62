/* plan_time.h: `dllm-rl plan --time`: a step's phases run on the recording backend
 * (kernels/record/record.h) at the run's shapes, and a roofline time for each from
 * fixed constants of the GPU. Modelled, never measured: docs/PLAN.md. */
#ifndef DLLM_PLAN_TIME_H
#define DLLM_PLAN_TIME_H

#include "dllm/model_config.h"
#include "dllm/precision.h"
#include "dllm/sampler.h"
#include "dllm/transformer.h"
#include "kernels/record/record.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { PT_GPU_H100 = 0, PT_GPU_H200 } pt_gpu;
typedef enum { PT_ROLLOUT_STEP = 0, PT_SCORE, PT_UPDATE_STEP, PT_NPHASES } pt_phase;

extern const char *const pt_phase_names[PT_NPHASES];
extern const char *const pt_gpu_names[2];

/* The run's shapes: S sequences of P prompt + G generated tokens per rank and step. */
typedef struct {
    dllm_precision prec;
    int lora_rank, lora_mask;
    float lora_alpha;
    int S, P, G;
    int block_length, steps; /* the rollout's blocks and denoising steps */
    bool cfg;                /* rollout.cfg_scale > 0: two canvases */
    dllm_cache cache;        /* rollout.cache: the rollout step is a block's mean step */
    int cache_refresh;       /* rollout.cache_refresh */
    int micro_batch;         /* canvases per scoring and update forward */
    int recompute;           /* dllm_tf_set_recompute's K (0: keep every layer) */
    double grad_clip;        /* optim.grad_clip */
    dllm_sampler_cfg sc;     /* the run's rollout sampler (its lengths, cache and CFG are the
                                fields above); vocab 0: the published one, low-confidence
                                remasking at temperature 1 */
} pt_shape;

/* The modelled time of one kind of GPU operation in a phase: the table entry that issued
 * it, the kernel, matmul or copy, its unit. */
typedef struct {
    const char *op, *what;
    rec_unit unit;
    double seconds, launches;
} pt_op_time;
#define PT_MAX_OPS 64 /* kinds kept per phase; later kinds fold into the last ("other") */

typedef struct {
    double modelled_s, ideal_s;
    long launches, kernels, matmuls, copies, host_syncs;
    long weight_copies;      /* the FP8 GEMMs' weight-scale copies among the copies */
    double launches_per_layer;
    double transfer_bytes, bytes, flops, dense_flops, weight_bytes;
    double flops_by_unit[REC_NUNITS];
    double seconds_by_unit[REC_NUNITS]; /* kernels' and matmuls' time by unit */
    int rows;                /* rollout step: the head's rows; else scored rows */
    double fwd_rows;         /* canvas rows through the layers (rollout: per step, mean) */
    pt_op_time ops[PT_MAX_OPS]; /* where the time goes, by kind, most first */
    int nops;
} pt_phase_result;

typedef struct {
    pt_gpu gpu;
    pt_phase_result ph[PT_NPHASES];
    pt_phase_result bf16_rollout; /* the same rollout step at rollout.precision bf16 */
    double fp8_over_bf16;         /* bf16's modelled rollout step over this one's (0: n/a) */
    /* under rollout.cache: the same rollout step uncached, and its modelled time over the
     * cached mean step's (0: no cache) */
    pt_phase_result uncached_rollout;
    double uncached_over_cached;
    int64_t peak_bytes;           /* the recorded device peak over all of them (`plan --time`
                                     puts the run's, plan_memory.h, here) */
    double wall_s;                /* how long the recording took here */
} pt_result;

/* Runs the phases on a shape-only model of mc (dllm_tf_create_shape) over a recording
 * backend and models them. Input errors (an nvfp4 rollout, bad shapes) name the key. */
int plan_time_run(const dllm_model_config *mc, const pt_shape *s, pt_gpu gpu, pt_result *out,
                  dllm_err *err);
/* The same phases of m (LoRA already enabled) on the recording backend be, which it moves
 * m to (tests: a real tiny model over the emulated CUDA backend). */

int plan_time_phases(dllm_tf *m, dllm_backend *be, const pt_shape *s, pt_gpu gpu, pt_result *out,
                     dllm_err *err);
/* The model of one recorded event list (the constants of docs/PLAN.md). */
void plan_time_model(const rec_event *ev, size_t n, pt_gpu gpu, rec_unit ideal_unit,
                     pt_phase_result *r);

void plan_time_print(const pt_result *r, const char *what, FILE *f);
void plan_time_print_json(const pt_result *r, const char *what, FILE *f);

#endif
