/* rng_mix.cuh: the counter-based RNG of kernels/rng.c as inline functions that compile
 * for the host (C or C++) and the device (nvcc), so both sides produce the same bits.
 *
 *   mix64(z)          SplitMix64's finaliser
 *   key(seed,a,b,c)   k = mix64(seed + G); k = mix64(k ^ (a + A)); ... (b + B), (c + C)
 *   draw i            mix64(key + G * i), i = 1, 2, ... (dllm_rng_u64 pre-increments ctr)
 *   uniform           ((draw >> 11) + 0.5) / 2^53, strictly inside (0, 1): the top
 *                     k = 2^53 - 1, which rounds up to 1.0, gives 1 - 2^-53 instead
 * with G the golden-ratio constant. tests/unit/test_backend_ops.c checks these against
 * kernels/rng.c bit for bit on the host and on the device. */
#ifndef DLLM_CUDA_RNG_MIX_CUH
#define DLLM_CUDA_RNG_MIX_CUH

#include <stdint.h>

#ifdef __CUDACC__
#define DLLM_HD __host__ __device__ __forceinline__
#else
#define DLLM_HD static inline
#endif

#define DLLM_RNG_GOLDEN 0x9e3779b97f4a7c15ULL

DLLM_HD uint64_t dllm_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

DLLM_HD uint64_t dllm_rng_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t k = dllm_mix64(seed + DLLM_RNG_GOLDEN);
    k = dllm_mix64(k ^ (a + 0x632be59bd9b4e019ULL));
    k = dllm_mix64(k ^ (b + 0x8cb92ba72f3d8dd7ULL));
    k = dllm_mix64(k ^ (c + 0xd1b54a32d192ed03ULL));
    return k;
}

/* Draw number i (1-based) of the stream with this key. */
DLLM_HD uint64_t dllm_rng_draw(uint64_t key, uint64_t i)
{
    return dllm_mix64(key + DLLM_RNG_GOLDEN * i);
}

DLLM_HD double dllm_rng_u01(uint64_t bits)
{
    /* as dllm_rng_uniform: u = 1.0 would make -log u = 0, an infinite Gumbel score */
    uint64_t k = bits >> 11;
    if (k == (1ULL << 53) - 1)
        return 1.0 - 1.0 / 9007199254740992.0;
    return ((double)k + 0.5) * (1.0 / 9007199254740992.0);
}

#endif
