#include "kernels/rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

dllm_rng dllm_rng_make(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ULL);
    k = mix64(k ^ (a + 0x632be59bd9b4e019ULL));
    k = mix64(k ^ (b + 0x8cb92ba72f3d8dd7ULL));
    k = mix64(k ^ (c + 0xd1b54a32d192ed03ULL));
    return (dllm_rng){.key = k, .ctr = 0};
}

uint64_t dllm_rng_u64(dllm_rng *r)
{
    return mix64(r->key + 0x9e3779b97f4a7c15ULL * ++r->ctr);
}

double dllm_rng_uniform(dllm_rng *r)
{
    /* (k + 0.5) / 2^53, k < 2^53. Past 2^52 the sum k + 0.5 is rounded to even,
     * and the top k = 2^53 - 1 rounds up to 2^53: u = 1.0 exactly, which gives
     * -log u = 0 and an infinite Gumbel score. That one draw is mapped to the
     * largest double below 1 (which no other k produces); every other draw is
     * unchanged. */
    uint64_t k = dllm_rng_u64(r) >> 11;
    if (k == (1ULL << 53) - 1)
        return 1.0 - 1.0 / 9007199254740992.0;
    return ((double)k + 0.5) * (1.0 / 9007199254740992.0);
}

uint64_t dllm_rng_below(dllm_rng *r, uint64_t n)
{
    uint64_t lim = -n % n; /* 2^64 mod n */
    for (;;) {
        uint64_t x = dllm_rng_u64(r);
        if (x >= lim)
            return x % n;
    }
}

double dllm_rng_normal(dllm_rng *r)
{
    double u1 = dllm_rng_uniform(r), u2 = dllm_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
