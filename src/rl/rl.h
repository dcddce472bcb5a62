/* rl.h: an RL training run (docs/DESIGN.md "The RL step"; docs/METHOD.md §4-§5).
 *
 * The run owns the policy, the task data, the optimizer state and the log.
 * rl_step() is one step, readable top to bottom: prompts -> rollouts at the
 * rollout precision -> rewards -> advantages -> l_mu and l_pi on shared masks
 * -> correction coefficients and diagnostics -> inner GRPO updates (each an
 * AdamW step) -> rollout-weight sync -> reference-policy sync (every
 * grpo.ref_sync_every steps) -> metrics. Every likelihood evaluation (l_pi,
 * l_mu, l_old, the reference) is one call of the step's scoring helper: a
 * plan, a precision, and optionally a parameter vector put in place. Every random draw is keyed by
 * (seed, step, purpose, global sequence index), so a resumed run and a
 * data-parallel run reproduce an uninterrupted single-rank run. */
#ifndef DLLM_RL_H
#define DLLM_RL_H

#include "dllm/chat.h"
#include "dllm/lik_plan.h"
#include "dllm/policy.h"
#include "dllm/tokenizer.h"
#include "src/rl/corrections.h"
#include "src/rl/grpo.h"
#include "src/log/h5log.h"
#include "src/log/tb_events.h"
#include "src/config/yaml_config.h"
#include "tasks/custom.h"
#include "tasks/registry.h"

/* Mask-stream keys: (step, purpose) packed into the plan key. */
enum { RL_KEY_WEIGHT = 0, RL_KEY_POLICY = 1 /* + inner step with fresh masks */ };

typedef struct {
    int32_t *ids;
    int n;
} rl_prompt;

typedef struct {
    dllm_cfg cfg;
    char run_dir[4096];
    int rank, size;

    dllm_policy *pol;
    const dllm_model_config *mc;
    dllm_tokenizer *tok;
    dllm_chat_format chat;
    const dllm_task *task;
    dllm_custom *custom;  /* task.name custom: its reward program or plugin; else NULL */
    dllm_task_items train, eval;
    rl_prompt *train_prompts, *eval_prompts; /* encoded once */

    dllm_lik_cfg lik_w;   /* importance-weight estimator (p_mask_prompt 0) */
    dllm_lik_cfg lik_pol; /* policy-ratio estimator */
    bool shared_plan;     /* same estimator, no prompt masking: l_old = l_pi */
    bool sampler_probs;   /* l_mu is the cached / parallel sampler's own (trajectory
                             estimator; docs/METHOD.md §5), l_mu_exact the estimator's */
    dllm_sampler_cfg sampler, eval_sampler;
    int max_canvas;       /* canvases per forward call in the likelihood plans */

    size_t n_param;
    long opt_step;        /* AdamW steps taken (bias correction, warmup) */
    float *ref_params;    /* beta > 0: the reference policy's trainable vector */
    int64_t ref_synced_at;
    float *old_params;    /* fresh_masks: the parameters that made the batch */
    double alpha_prev;
    int64_t step;         /* last completed step */

    h5log *log;           /* rank 0 */
    tb_writer *tb;        /* rank 0, with log.tensorboard */
    int quiet, jsonl;
    double t_start;
} rl_run;

/* Everything one step produced, for the log (local slice of the batch). */
typedef struct {
    int n_prompts, G, N, P, Gen;  /* N = n_prompts * G completions on this rank */
    int64_t *prompt_index;        /* (n_prompts) */
    int32_t *prompts;             /* (N, P) left-padded */
    uint8_t *prompt_mask;         /* (N, P) */
    int32_t *prompt_len;          /* (N) */
    dllm_rollout ro;              /* tokens (N, P+Gen), commit steps/probs (N, Gen) */
    int32_t *gen;                 /* (N, Gen) */
    int *L;                       /* (N) completion lengths */
    int32_t *L32;                 /* (N) */
    double *reward, *correct, *adv;
    double *l_mu, *l_pi, *log_w, *log_w_se, *coef; /* (N) */
    double *l_mu_exact;           /* (N) the rollout precision scored exactly: l_mu unless the
                                     sampler is cached or parallel (rl_step) */
    double *coef_tok;             /* (N, Gen) level token, else NULL */
    double *tok_mu, *tok_pi, *d;  /* (N, Gen) */
    double *l_old, *tok_old;      /* policy-ratio estimator at the batch's parameters */
    double *tok_ref;              /* (N, Gen) beta > 0 */
    double *mismatch;             /* (S) mean |d| of tokens committed at each step */
    double split[4];              /* rho_ess_prec, rho_ess_cache, delta_prec, delta_cache */
    uint8_t *informative;         /* (N) 1: the completion's group has unequal rewards */
    double *tok_ent;              /* (N, Gen) trainer entropy at each scored token */
    double *pass_at_k;            /* (G) pass@k, k = 1..G, mean over the global groups */
    corr_diag diag;               /* over correction.ais.population: drives alpha */
    corr_diag diag_inf, diag_all; /* over the informative completions, and over all */
} rl_batch;

void rl_batch_free(rl_batch *b);

/* One RL step (step >= 1). metrics: H5LOG_N_METRICS values in table order. */
int rl_step(rl_run *run, int64_t step, rl_batch *b, double *metrics, dllm_err *err);

/* Completions of B prompts at precision prec: DLLM_PREC_ROLLOUT is the
 * policy's rollout (dllm_policy_rollout); DLLM_PREC_TRAIN_NOGRAD runs the same
 * sampler (denoising, or AR decoding with the same choice rule and random
 * stream) on the trainer's logits. top_p: AR only. */
int rl_generate(dllm_policy *pol, dllm_prec prec, const int32_t *prompts, const uint8_t *prompt_mask,
                int B, int P, const dllm_sampler_cfg *sc, double top_p, uint64_t seed,
                dllm_rollout *out, dllm_err *err);

/* Greedy evaluation on the held-out items (docs/METHOD.md §4) at eval.precision
 * (the trainer's weights by default, or the rollout copy), the same for every
 * architecture: accuracy, its standard error, mean reward; over all ranks. correct (NULL or run->eval.n):
 * each item's 0/1 outcome, on every rank. */
int rl_evaluate(rl_run *run, double *accuracy, double *accuracy_se, double *reward_mean,
                uint8_t *correct, dllm_err *err);

/* n prompts, each repeated rep times, left-padded with eos to the longest into
 * *out (n*rep, P) with the key *mask (n*rep, P) and the lengths *lens (n*rep),
 * malloc'd; returns P. The layout of every batch rl_step and rl_evaluate sample. */
int rl_pad_prompts(const rl_prompt *const *ps, int n, int rep, int eos, int32_t **out,
                   uint8_t **mask, int32_t **lens);

/* FNV-1a 64 of the eval items' questions: names the eval set in outcome files. */
uint64_t rl_eval_items_hash(const rl_run *run);

/* The prompt text of an item as the run shows it (task.format), malloc'd; NULL with
 * err set when a custom task's plugin fails. */
char *rl_task_format(rl_run *run, const dllm_task_item *it, dllm_err *err);
/* A completion's reward and correctness under the run's task; a custom task's
 * program or plugin may fail (an error naming it). */
int rl_task_score(rl_run *run, const dllm_task_item *it, const char *text, size_t len,
                  double *reward, int *correct, dllm_err *err);
/* Completion text of row i (up to the first EOS, excluded), malloc'd. */
char *rl_completion_text(rl_run *run, const int32_t *gen, int L, dllm_err *err);

#endif
