/* mem_plan.h: the host plans of `dllm-rl plan --device cpu`, and what every plan shares
 * (the options, the model's dimensions, sizes).
 *
 * A pure function of the model's dimensions (dllm_model_config), the experiment
 * (dllm_cfg) and a few planning options: every buffer the CPU backend holds for a run
 * (LLaDA) or Qwen3.5's host model, with its phase, its size in bytes and the formula that
 * gives it. A phase's peak is the resident items plus that phase's transient items. The
 * GPU path's memory is not modelled: it is recorded from the code's own allocations
 * (plan_memory.h). */
#ifndef DLLM_MEM_PLAN_H
#define DLLM_MEM_PLAN_H

#include "dllm/model_config.h"
#include "dllm/qwen35.h"
#include "src/config/yaml_config.h"

#include <stdio.h>

typedef enum {
    MEM_RESIDENT = 0, /* for the whole run */
    MEM_ROLLOUT,      /* denoising sampler / KV-cache decoding at rollout precision */
    MEM_LIKELIHOOD,   /* l_mu, l_pi, l_old (and the reference) without gradients */
    MEM_UPDATE,       /* forward with activations, backward, optimizer, weight sync */
    MEM_NPHASE
} mem_phase;

typedef enum { MEM_RECOMPUTE_NONE = 0, MEM_RECOMPUTE_LAYER, MEM_RECOMPUTE_EVERY } mem_recompute;

typedef struct {
    int ranks;             /* data-parallel ranks; must divide grpo.prompts_per_step */
    int prompt_tokens;     /* P: prompt tokens per sequence (padded length) */
    int micro_batch;       /* canvases per forward in the likelihood and update phases;
                              0: min(64, the phase's canvases), as the RL loop chunks today */
    int rollout_batch;     /* sequences decoded together; 0: the whole per-rank batch */
    mem_recompute recompute;
    int recompute_every;   /* K of MEM_RECOMPUTE_EVERY */
    int64_t cap;           /* bytes; the plan fits when its peak is at most this */
} mem_plan_opts;

#define MEM_PLAN_MAX_ITEMS 48

typedef struct {
    char name[64];
    mem_phase phase;
    int64_t bytes;
    char formula[128];   /* in the symbols of mem_plan.symbols */
    char shrink[96];     /* what makes it smaller ("" for fixed costs) */
} mem_item;

typedef struct {
    mem_plan_opts opts;
    dllm_arch arch;
    bool diffusion;
    int64_t n_params;          /* P */
    int64_t n_lin;             /* Plin: parameters of the block linears */
    int64_t n_lora;            /* Nl: LoRA A/B parameters (0 without LoRA) */
    int seqs;                  /* S: sequences per rank per step */
    int rollout_seqs;          /* Sr: sequences decoded together */
    int T;                     /* prompt + generated tokens */
    int mb_lik, mb_upd;        /* canvases per forward: likelihood, update */
    char symbols[512];         /* "C 4096, L 32, ..." the legend of the formulas */
    mem_item items[MEM_PLAN_MAX_ITEMS];
    int n_items;
    int64_t phase_bytes[MEM_NPHASE]; /* [MEM_RESIDENT]: resident total; others: resident + transient */
    mem_phase peak_phase;
    int64_t peak;
    bool fits;
    bool cpu;                  /* the CPU backend's buffers (mem_plan_build_cpu) */
} mem_plan;

extern const char *const mem_phase_names[MEM_NPHASE];

/* Defaults: 1 rank, 200 prompt tokens, micro-batch 0 (64), whole rollout batch,
 * recomputation per layer, cap 80 GB (80e9 bytes). */
void mem_plan_opts_defaults(mem_plan_opts *o);

/* The model's dimensions: preset_flag (a preset name, or NULL), else model.path's
 * config.json, else the preset of a published checkpoint directory that is not here
 * (LLaDA-8B-Instruct, Qwen3-8B, ...), else model.preset / model.arch. `what` receives
 * where they came from. Input errors name the flag or key. */
int mem_plan_model(const dllm_cfg *cfg, const char *preset_flag, dllm_model_config *mc, char *what,
                   size_t n, dllm_err *err);


/* The CPU backend's buffers today, for the LLaDA model (an input error for
 * other architectures): fp32 weights, copies, the activation sets that grow on
 * demand and stay (full attention probabilities), full logits of the scored
 * rows. No cap (opts->cap is ignored; fits is true). */
int mem_plan_build_cpu(mem_plan *p, const dllm_model_config *mc, const dllm_cfg *cfg,
                       const mem_plan_opts *o, dllm_err *err);

/* "80GB" (1e9), "80GiB" (2^30), "40G" (= GB), "81920MB", "512MiB", "1.5TB", "123B":
 * a positive number and a unit; units are case-insensitive, a bare K/M/G/T is
 * decimal. Input error naming `flag` otherwise. */
int mem_parse_size(const char *s, const char *flag, int64_t *bytes, dllm_err *err);

/* The table: items grouped by phase (GiB, 2 decimals, formula), the peak per
 * phase, and "fits in CAP: yes/no". `what` heads it (the config, the model). */
void mem_plan_print(const mem_plan *p, const char *what, FILE *f);
/* The same as one JSON object. */
void mem_plan_print_json(const mem_plan *p, const char *what, FILE *f);
/* Qwen3.5 (its own model behind the policy): its weights, gradients, AdamW moments and
 * rollout copy; decoding's per-sequence state -- the conv inputs and the recurrent state
 * of every Gated DeltaNet layer, K and V of every full-attention one -- the kept layer
 * inputs and the logits. q: its layer kinds and Gated DeltaNet sizes. device: the arrays
 * the model owns on a CUDA device instead of the host (the same arrays: the model
 * allocates them on its backend; the quantised projections in the device's layout, the
 * attention's kept state and the rule's backward scratch as the CUDA backend's), counted
 * from the shapes, not recorded; the cap then applies (p->fits). NVFP4 rollouts are an
 * input error on the device. */
int mem_plan_build_qwen35(mem_plan *p, const dllm_model_config *mc, const qwen35_config *q,
                          const dllm_cfg *cfg, const mem_plan_opts *o, bool device,
                          dllm_err *err);

#endif
