/* dnnl_gemm.c: see dnnl_gemm.h.
 *
 * The bf16 and int8 products go through oneDNN's matmul primitive (the BLAS-like C API has no
 * bf16 GEMM). A primitive is made for one fixed shape: with a run-time M oneDNN picks
 * its generic jit GEMM, about half as fast as the brgemm kernels it picks for a fixed
 * M. Made primitives are kept in a small table keyed by shape and strides, so a model
 * that repeats its shapes builds each once. */
#include "config.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dnnl_gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dnnl_bf16_usable(void)
{
    return cpu_bf16_dot_usable() && dnnl_gemm_built();
}

bool cpu_bf16_dot_usable(void)
{
    const char *env = getenv("DLLM_BF16_GEMM");
    if (env && *env && strcmp(env, "auto") != 0) {
        if (strcmp(env, "fp32") == 0)
            return false;
        fprintf(stderr, "DLLM_BF16_GEMM=%s: expected auto or fp32\n", env);
        exit(2);
    }
    return cpu_has(CPU_AVX512BF16);
}

#ifndef HAVE_DNNL

bool dnnl_gemm_built(void) { return false; }

bool dnnl_amx(void) { return false; }

int dnnl_gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    return -1;
}

int dnnl_gemm_bf16_nt(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      int M, int N, int K)
{
    return -1;
}

int dnnl_gemm_u8s8_nt(int32_t *C, int ldc, const uint8_t *A, int lda, const int8_t *B, int ldb,
                      int M, int N, int K)
{
    return -1;
}

#else

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif

bool dnnl_gemm_built(void) { return true; }

bool dnnl_amx(void)
{
    cpu_isa_cap(); /* the caps first: the query fixes oneDNN's ISA */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

int dnnl_gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef _OPENMP
    /* oneDNN runs serially inside a parallel region; outside one it would fan out to
     * all OpenMP threads and split the product its own way, so it is held at one. */
    int saved = omp_in_parallel() ? 0 : omp_get_max_threads();
    if (saved > 1)
        omp_set_num_threads(1);
#endif
    dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda,
                                  B, ldb, beta, C, ldc);
#ifdef _OPENMP
    if (saved > 1)
        omp_set_num_threads(saved);
#endif
    return st == dnnl_success ? 0 : -1;
}

/* ---- bf16 matmul primitives -------------------------------------------------------- */

typedef struct {
    bool int8; /* u8 x s8 -> s32, else bf16 x bf16 -> f32 */
    int M, N, K, lda, ldb, ldc;
    dnnl_primitive_t prim;
} mm_entry;

enum { MM_CACHE = 64 };
static mm_entry mm_cache[MM_CACHE];
static int mm_count, mm_next;  /* entries used; next to replace once full */
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;

static int engine_init(void)
{
    if (engine)
        return 0;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        return -1;
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(engine);
        engine = NULL;
        return -1;
    }
    return 0;
}

/* The three memory descriptors of a shape: src [M,K], weights [K,N] (B^T), dst [M,N]. */
static int mm_descs(dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei, dnnl_memory_desc_t *dst,
                    bool int8, int M, int N, int K, int lda, int ldb, int ldc)
{
    dnnl_dims_t sd = {M, K}, ss = {lda, 1};
    dnnl_dims_t wd = {K, N}, ws = {1, ldb};
    dnnl_dims_t dd = {M, N}, ds = {ldc, 1};
    if (dnnl_memory_desc_init_by_strides(src, 2, sd, int8 ? dnnl_u8 : dnnl_bf16, ss) !=
            dnnl_success ||
        dnnl_memory_desc_init_by_strides(wei, 2, wd, int8 ? dnnl_s8 : dnnl_bf16, ws) !=
            dnnl_success ||
        dnnl_memory_desc_init_by_strides(dst, 2, dd, int8 ? dnnl_s32 : dnnl_f32, ds) !=
            dnnl_success)
        return -1;
    return 0;
}

static dnnl_primitive_t mm_make(bool int8, int M, int N, int K, int lda, int ldb, int ldc)
{
    dnnl_memory_desc_t src, wei, dst;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim = NULL;
    if (mm_descs(&src, &wei, &dst, int8, M, N, K, lda, ldb, ldc) ||
        dnnl_matmul_desc_init(&md, &src, &wei, NULL, &dst) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) != dnnl_success)
        return NULL;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success)
        prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

/* The cached primitive of a shape, made on first use; NULL if oneDNN refuses it. */
static dnnl_primitive_t mm_get(bool int8, int M, int N, int K, int lda, int ldb, int ldc)
{
    dnnl_primitive_t prim = NULL;
    pthread_mutex_lock(&mm_lock);
    if (engine_init() == 0) {
        for (int i = 0; i < mm_count && !prim; i++) {
            mm_entry *e = &mm_cache[i];
            if (e->int8 == int8 && e->M == M && e->N == N && e->K == K && e->lda == lda && e->ldb == ldb &&
                e->ldc == ldc)
                prim = e->prim;
        }
        if (!prim && (prim = mm_make(int8, M, N, K, lda, ldb, ldc))) {
            int slot = mm_count < MM_CACHE ? mm_count++ : mm_next++ % MM_CACHE;
            if (mm_cache[slot].prim)
                dnnl_primitive_destroy(mm_cache[slot].prim);
            mm_cache[slot] = (mm_entry){int8, M, N, K, lda, ldb, ldc, prim};
        }
    }
    pthread_mutex_unlock(&mm_lock);
    return prim;
}

/* Runs the cached primitive of a shape on A, B, C. */
static int mm_run(bool int8, void *C, int ldc, const void *A, int lda, const void *B, int ldb,
                  int M, int N, int K)
{
    dnnl_primitive_t prim = mm_get(int8, M, N, K, lda, ldb, ldc);
    if (!prim)
        return -1;
    dnnl_memory_desc_t src, wei, dst;
    mm_descs(&src, &wei, &dst, int8, M, N, K, lda, ldb, ldc);
    dnnl_memory_t ms = NULL, mw = NULL, md = NULL;
    int rc = -1;
    if (dnnl_memory_create(&ms, &src, engine, (void *)A) == dnnl_success &&
        dnnl_memory_create(&mw, &wei, engine, (void *)B) == dnnl_success &&
        dnnl_memory_create(&md, &dst, engine, C) == dnnl_success) {
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
        if (dnnl_primitive_execute(prim, stream, 3, args) == dnnl_success &&
            dnnl_stream_wait(stream) == dnnl_success)
            rc = 0;
    }
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(md);
    return rc;
}

int dnnl_gemm_bf16_nt(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      int M, int N, int K)
{
    return mm_run(false, C, ldc, A, lda, B, ldb, M, N, K);
}

int dnnl_gemm_u8s8_nt(int32_t *C, int ldc, const uint8_t *A, int lda, const int8_t *B, int ldb,
                      int M, int N, int K)
{
    return mm_run(true, C, ldc, A, lda, B, ldb, M, N, K);
}

#endif
