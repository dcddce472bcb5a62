/* rng.h: counter-based random streams.
 *
 * A stream is a 64-bit key derived from (seed, a, b, c) -- e.g. (seed, step,
 * purpose, sequence) -- plus a counter. Draw i of a stream is a pure function
 * of (key, i): SplitMix64's finaliser applied to key + i * golden-ratio. So the
 * same masks and noise come out on any backend, any rank, in any order, and two
 * policies can be evaluated on identical masks by giving them the same stream. */
#ifndef DLLM_RNG_H
#define DLLM_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t key;
    uint64_t ctr;
} dllm_rng;

/* Purposes, so that streams used for different things never coincide. */
enum {
    DLLM_RNG_DATA = 1,     /* data order, prompt sampling */
    DLLM_RNG_SAMPLER = 2,  /* Gumbel noise, random remasking */
    DLLM_RNG_MASKS = 3,    /* likelihood-estimator masks */
    DLLM_RNG_SFT = 4,      /* SFT mask ratios and masks */
    DLLM_RNG_INIT = 5,     /* weight initialisation */
    DLLM_RNG_TASK = 6,     /* procedural task generators */
    DLLM_RNG_DROP = 7      /* grpo.random_drop: completions left out of the gradient */
};

dllm_rng dllm_rng_make(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
uint64_t dllm_rng_u64(dllm_rng *r);
/* Uniform double strictly inside (0, 1), 53 random bits: (k + 0.5) / 2^53 for
 * k = draw >> 11, rounded to nearest; the one k that would round to 1.0
 * (2^53 - 1) gives 1 - 2^-53 instead. */
double dllm_rng_uniform(dllm_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t dllm_rng_below(dllm_rng *r, uint64_t n);
/* Standard normal (Box-Muller, double). */
double dllm_rng_normal(dllm_rng *r);

#endif
