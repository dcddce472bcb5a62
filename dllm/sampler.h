/* sampler.h: the LLaDA reference denoising sampler (docs/METHOD.md §2), token for
 * token the published generate() of LLaDA.
 *
 * Canvas = prompt (left-padded, key-masked) followed by gen_length mask tokens.
 * Blocks of block_length are decoded left to right, steps/num_blocks steps each;
 * per step the block's masked count *at the start of the block* is split
 * evenly, the remainder going to the earliest steps. Each step runs one forward
 * pass, computing logits only at the committable positions (every still-masked
 * generated position before the current block's end -- exact, since no other
 * position's x0 can be committed this step), draws x0 by Gumbel-max at the
 * temperature (float64 noise u in (0,1), score = exp(logit) / (-log u)^T;
 * T = 0: argmax, ties to the lowest id), scores confidence (softmax prob of x0
 * for low_confidence, a uniform draw for random) and commits the k most
 * confident positions, ties to the lowest index.
 *
 * The mask token as x0 (mask_token = allow, the published behaviour): x0 may
 * be the mask id itself. Committing it writes the mask back, so the position
 * stays masked, uses up one of the step's k commits, and competes again at
 * every later step, in later blocks too (the reference ranks all masked
 * positions up to the current block's end). A position can therefore still be
 * masked when sampling ends; n_masked_left counts them. With mask_token =
 * forbid the mask id is excluded from the draw of x0 (its logit is -inf for
 * the argmax / Gumbel-max), so every position gets a real token and no
 * position is ever left masked; confidence and commit_prob stay the full
 * softmax probability of x0 (mask included in the normaliser), the quantity
 * the estimators score. So on a model whose draw never picks the mask, allow
 * and forbid give bit-identical rollouts.
 *
 * Two deliberate differences from the published code: prompt positions are
 * never rewritten (it would treat a mask id inside a prompt as masked), and
 * confidence_eos_eot_inf gives x0 in {EOS, EoT} confidence -inf (its switch
 * sets those logits to -inf after the draw, which renormalises every
 * position's confidence, EOS included only at temperature 0); with the switch
 * off, as it is by default, the output is the published one token for token.
 *
 * Which to use: `generate` defaults to allow (parity with the published
 * sampler, and a zero-initialised config is allow). RL should use forbid: a
 * weak model (a fresh initialisation, an early SFT) puts real mass on the mask
 * id, and under allow its completions keep mask tokens that no estimator can
 * score as a choice of the policy (they are left out, see estimators.h) and
 * that the reward sees as junk; forbid samples the model's distribution over
 * real tokens, every completion is fully determined, and every token of it has
 * a commit step for the trajectory estimator.
 *
 * Randomness is keyed: the Gumbel noise of (sequence b, canvas position t,
 * token v) at global step s is draw t*V + v of stream (seed, SAMPLER, s, 2b);
 * the random-remasking draw of position t is draw t of stream (seed, SAMPLER, s,
 * 2b+1), with b = seq_offset + the row in the batch. So the result does not depend on batch composition or backend.
 *
 * Cached and parallel denoising (docs/METHOD.md §2a; the published Fast-dLLM
 * generate_with_prefix_cache / generate_with_dual_cache and get_transfer_index):
 * with cache prefix or dual (dllm_sample_cached) the first step of every block is a
 * full pass (fill) that also stores every layer's keys and values, and commits as
 * the plain sampler's step; the block's later steps recompute only positions
 * [lo, hi) of every sequence over that cache (prefix: the block and everything after
 * it, hi = P+G; dual: the block alone), their keys/values replacing the cached ones,
 * and only the block's masked positions can be committed there (the published code
 * ranks nothing else). cache_refresh N > 0 (not in the published functions) makes
 * every N-th step of a block (steps 0, N, 2N, ...) such a fill: the cache is never more
 * than N - 1 steps stale, and N = 1 is the plain sampler's ids. With threshold T in
 * (0, 1] a step commits, per sequence, the most confident masked position and every
 * other whose confidence is >= T (the published comparison drops those below T), with
 * or without the cache; the block
 * ends when none of its positions is masked, or after block_length steps (reached
 * only under mask_token allow, where a drawn mask id commits nothing). Each sequence
 * then counts its own steps (commit_step, the noise key): a sequence whose block is
 * done waits without drawing, so the result still does not depend on the batch.
 * Without the cache and the threshold the sampler is the plain one, bit for bit.
 *
 * One loop serves every backend (dllm_sample_model): the canvas, the row lists, the
 * draws, the commits and the records live in the memory of the model's backend and the
 * step is the table's denoising entries (kernels/backend.h; the CPU's in
 * kernels/cpu/denoise.c, the CUDA kernels in kernels/cuda/sampler*.cu); dllm_sample and
 * dllm_sample_cached run it on the CPU backend over a host model. Host traffic on a
 * device: the prompts, the key mask and the initial records go up once; per step one
 * int32 comes down (the number of committable rows: it sizes the head() calls, skips a
 * step with nothing to commit and ends a threshold's block); at the end the canvas
 * [B,P+G] and the records [B,G]. Nothing of size V crosses.
 *
 * Numerics on a device: the same rollout as on the CPU on the same logits. x0 is bit
 * for bit the CPU's draw (float64 Gumbel scores from the same keyed noise; ties and NaN
 * rules of the CPU scan; the mask id left out under forbid); CFG is the CPU's fp32
 * expression without contraction. Two exceptions: (1) commit_prob (and therefore the
 * low_confidence confidence) is softmax(x0) with float64 sums over a tree instead of
 * the CPU's left-to-right loop; the float result agrees to 1e-6 relative and is the same
 * float unless the double lands within a few ulps of a float rounding boundary, and only
 * then can the ranking of two nearly equal confidences (or a confidence at the
 * threshold) differ; (2) on a GPU the float64 exp/log/pow are the device's, which may
 * differ from libm's in the last ulp (two Gumbel scores equal to ~1e-16 relative could
 * order differently). Under the CUDA emulation the math is libm's. Logits with NaN rank
 * as the CPU's qsort leaves them, which is not defined: not supported. */
#ifndef DLLM_SAMPLER_H
#define DLLM_SAMPLER_H

#include "dllm/device_logits.h"
#include "kernels/base.h"
#include "kernels/rng.h"
#include "kernels/sample.h" /* dllm_sampler_draw_x0(_excl), dllm_sampler_prob */

#include <stdbool.h>
#include <stdint.h>

/* Any model: logits [n_rows, V] at the flat rows (b*T + t) of tokens [B,T]. */
typedef int (*dllm_logits_fn)(void *model, const int32_t *tokens, const uint8_t *keymask, int B,
                              int T, const int32_t *rows, int n_rows, float *logits);

typedef enum { REMASK_LOW_CONFIDENCE = 0, REMASK_RANDOM = 1 } dllm_remasking;

/* Key/value caching of the denoising steps (above). */
typedef enum { DLLM_CACHE_NONE = 0, DLLM_CACHE_PREFIX = 1, DLLM_CACHE_DUAL = 2 } dllm_cache;

/* A model that keeps a block cache: fill is a dllm_logits_fn that also stores every
 * layer's keys and values of all B*T positions; step recomputes positions [lo, hi) of
 * every sequence of tokens [B,T] over the stored ones (theirs replaced), giving logits
 * at rows (flat b*T + t, lo <= t < hi). */
typedef int (*dllm_cached_logits_fn)(void *model, const int32_t *tokens, const uint8_t *keymask,
                                     int B, int T, int lo, int hi, const int32_t *rows,
                                     int n_rows, float *logits);
typedef struct {
    dllm_logits_fn fill;
    dllm_cached_logits_fn step;
    void *model;
} dllm_sampler_cache;

/* A host model (fn, and cache when it keeps one) as a view (dllm/device_logits.h) on the
 * CPU backend, for the loops written over views: head() runs one call of the host model
 * over its rows after the layers(), fill() or step() that noted the canvas; max_rows
 * should cover every row a step asks for, so a step is one forward. h is the view's
 * storage and must outlive its use. */
typedef struct {
    dllm_logits_fn fn;
    void *model;
    const dllm_sampler_cache *cache;
    const int32_t *tokens;
    const uint8_t *keymask;
    int B, T, lo, hi, mode;
} dllm_host_view;
dllm_device_logits dllm_host_view_make(dllm_host_view *h, dllm_logits_fn fn, void *model,
                                      const dllm_sampler_cache *cache, int V, long max_rows);

/* May x0 be the mask id? (above) */
typedef enum { DLLM_MASK_TOKEN_ALLOW = 0, DLLM_MASK_TOKEN_FORBID = 1 } dllm_mask_token;

typedef struct {
    int gen_length, block_length, steps;
    double temperature;
    dllm_remasking remasking;
    double cfg_scale;            /* 0: off; else un + (cfg+1)(cond - un) */
    bool logits_eos_inf;         /* EOS logit = -inf before sampling */
    bool confidence_eos_eot_inf; /* x0 in {EOS, EoT}: confidence -inf */
    int mask_id, eos_id, eot_id; /* eot_id -1 if the vocabulary has none */
    int vocab;                   /* V: logits per row */
    dllm_mask_token mask_token;  /* allow (published; the zero value) | forbid */
    uint64_t seq_offset;         /* global index of row 0: noise is keyed by it, so a
                                    batch split across ranks draws what one rank would */
    dllm_cache cache;            /* none (the zero value) | prefix | dual */
    double threshold;            /* 0: off; else in (0, 1]: parallel commits (above) */
    int cache_refresh;           /* under a cache: a fill every N steps of a block as at its
                                    start (0: only there; 1: every step, the plain ids) */
} dllm_sampler_cfg;

typedef struct {
    int32_t *tokens;      /* (B, P+G) final canvas */
    int16_t *commit_step; /* (B, G) global step that committed each generated token;
                             -1 where the position is still masked at the end (a
                             committed mask id is no commit: the position stays masked) */
    float *commit_prob;   /* (B, G) softmax prob (temperature 1, after the EOS switch) of
                             it; NaN where still masked */
    int32_t *n_masked_left; /* (B) generated positions still masked at the end (all G
                               of them, before and after the first EOS); 0 under forbid;
                               NULL in records not made by dllm_sample (AR decoding) */
    int B, P, G;
    int nfe;              /* forward passes of the batch (fills and cached steps alike);
                             0 in records not made by the denoising samplers */
} dllm_rollout;

/* Parses "allow" | "forbid" (0); -1 for anything else. */
int dllm_mask_token_parse(const char *s, dllm_mask_token *out);
const char *dllm_mask_token_name(dllm_mask_token m);
/* Parses "none" | "prefix" | "dual" (0); -1 for anything else. */
int dllm_cache_parse(const char *s, dllm_cache *out);
const char *dllm_cache_name(dllm_cache c);

/* Checks the config's divisibility rules; input errors name the flag. */
int dllm_sampler_check(const dllm_sampler_cfg *c, dllm_err *err);

/* The loop (above) over the model m on its backend m->be: prompts [B,P] left-padded on
 * the host, prompt_mask [B,P] (1 = real token, NULL = all); out's arrays allocated on the
 * host (free with dllm_rollout_free). cfg.vocab must equal m->V; cfg.cache needs m's fill
 * and step. 0 on success; DLLM_EXIT_INPUT for a bad config (dllm_sampler_check), a cache
 * the model does not keep or a vocabulary that is not m->V; DLLM_EXIT_INTERNAL when the
 * model's forward fails. */
int dllm_sample_model(const dllm_device_logits *m, const int32_t *prompts,
                      const uint8_t *prompt_mask, int B, int P, const dllm_sampler_cfg *c,
                      uint64_t seed, dllm_rollout *out, dllm_err *err);
/* The loop on the CPU backend over a host model: prompts [B,P] left-padded; prompt_mask
 * [B,P] (1 = real token, NULL = all). Allocates out's arrays (free with
 * dllm_rollout_free). */
int dllm_sample(dllm_logits_fn fn, void *model, const int32_t *prompts, const uint8_t *prompt_mask,
                int B, int P, const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                dllm_err *err);
void dllm_rollout_free(dllm_rollout *r);
/* The start every denoising sampler shares: out's arrays allocated, the canvas [B,P+G]
 * the prompts then G mask ids, commit_step -1 and commit_prob NaN everywhere; returns
 * the key mask [B,P+G] (prompt_mask on the prompt, NULL: all real; 1 on the generated
 * positions), malloc'd. */
uint8_t *dllm_rollout_start(dllm_rollout *out, const int32_t *prompts, const uint8_t *prompt_mask,
                            int B, int P, int G, int mask_id);
/* The same with cfg->cache prefix or dual served by cache (NULL: an input error
 * unless cfg->cache is none; with none, fn alone is used). CFG is not cached: an input
 * error with a cache. */
int dllm_sample_cached(dllm_logits_fn fn, void *model, const dllm_sampler_cache *cache,
                       const int32_t *prompts, const uint8_t *prompt_mask, int B, int P,
                       const dllm_sampler_cfg *c, uint64_t seed, dllm_rollout *out,
                       dllm_err *err);

/* Completion length: tokens up to and including the first EOS (G if none). */
int dllm_completion_length(const int32_t *gen, int G, int eos_id);

#endif
