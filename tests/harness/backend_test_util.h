/* backend_test_util.h: what the parts of tests/test_backend_ops share: random inputs,
 * the normalised MSE, and device buffers followed by guard bytes. Only in builds with
 * the CUDA backend (nvcc or the emulation). The random inputs, the normalised MSE and
 * FP8_GEMM_NMSE are the library's (kernels/backend_cases.h). */
#ifndef DLLM_BACKEND_TEST_UTIL_H
#define DLLM_BACKEND_TEST_UTIL_H

#include "kernels/backend_cases.h"
#include "kernels/base.h"
#include "kernels/cuda_device.h"
#include "kernels/rng.h"

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host helpers ----------------------------------------------------------------- */

static inline float *host_normal(size_t n, uint64_t seed, double scale)
{
    return dllm_host_normal(n, seed, scale);
}

static inline double nmse(const float *a, const float *ref, size_t n) { return dllm_nmse(a, ref, n); }

#define check_nmse(a, ref, n, tol)                                                            \
    do {                                                                                    \
        double e_ = nmse((a), (ref), (n));                                                   \
        ck_assert_msg(e_ <= (tol), "%s vs %s: nmse %.3g > %.3g", #a, #ref, e_, (double)(tol)); \
    } while (0)

/* ---- device buffers with guard bytes ------------------------------------------------ */

enum { GUARD_BYTES = 64, GUARD_BYTE = 0xA5 };

typedef struct {
    void *d;      /* device pointer */
    size_t bytes; /* payload; GUARD_BYTES of GUARD_BYTE follow */
} dbuf;

static inline dbuf dnew(size_t bytes, const void *init)
{
    dbuf b = {dllm_cuda_malloc(bytes + GUARD_BYTES), bytes};
    unsigned char g[GUARD_BYTES];
    memset(g, GUARD_BYTE, sizeof g);
    if (init && bytes)
        dllm_cuda_memcpy_h2d(b.d, init, bytes);
    else if (bytes)
        dllm_cuda_memset(b.d, 0, bytes);
    dllm_cuda_memcpy_h2d((char *)b.d + bytes, g, GUARD_BYTES);
    return b;
}

static inline void dget(void *host, dbuf b) { dllm_cuda_memcpy_d2h(host, b.d, b.bytes); }

static inline void dguard_at(dbuf b, const char *what, int line)
{
    unsigned char g[GUARD_BYTES];
    dllm_cuda_synchronize();
    dllm_cuda_memcpy_d2h(g, (char *)b.d + b.bytes, GUARD_BYTES);
    for (int i = 0; i < GUARD_BYTES; i++)
        ck_assert_msg(g[i] == GUARD_BYTE, "line %d: guard byte %d after %s overwritten", line, i,
                      what);
}
#define dguard(b) dguard_at((b), #b, __LINE__)

static inline void dfree(dbuf *b)
{
    dllm_cuda_free(b->d);
    b->d = NULL;
}

static inline float *dl_f32(dbuf b)
{
    float *h = dllm_malloc(b.bytes ? b.bytes : 1);
    dget(h, b);
    return h;
}


/* The direct kernel cases (tests/unit/backend_kernel_cases.c). */
void backend_kernel_cases_add(TCase *tc);

#endif
