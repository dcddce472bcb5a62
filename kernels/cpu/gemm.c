/* gemm.c: dense matrix products on the CPU through OpenBLAS or oneDNN.
 *
 * op_gemm:       C[M,N] = alpha * op(A) @ op(B) + beta * C (row-major).
 * op_linear_fwd: out[N,OC] = inp[N,C] @ w[OC,C]^T (torch nn.Linear, no bias).
 * op_linear_bwd: dinp[N,C] += dout @ w;  dw[OC,C] += dout^T @ inp.
 * The backward accumulates by running the GEMM with beta = 1.
 *
 * Threads: the other ops run on OpenMP threads. OpenBLAS built on pthreads
 * keeps a pool of its own, and on a machine with as many cores as threads the
 * two pools take turns spinning on each other's cores. So OpenBLAS always runs
 * single-threaded here, and a large product is cut into blocks of C along its
 * longer side, a few per OpenMP thread, handed out dynamically, one OpenBLAS
 * call each: every element still gets its whole K sum from one kernel call,
 * only the work is shared out. OMP_NUM_THREADS alone sets the thread count
 * (OpenBLAS's own threaded split would change the rounding with its count).
 *
 * Library: op_gemm_library() picks the kernel each block call runs on, OpenBLAS
 * sgemm or oneDNN's dnnl_sgemm. Unless configure or DLLM_GEMM names one, a rule on the
 * CPU's features picks it (op_gemm_rule): oneDNN on an AVX-512 CPU (about twice
 * OpenBLAS's rate at the model's shapes under the common Haswell pin, level with
 * OpenBLAS's own AVX-512 kernels), OpenBLAS on a CPU without AVX-512, where its
 * AVX2 kernels are its native ones and were measured at least level with oneDNN's
 * (BENCHMARKS.md). A rule, not a measurement, so the library -- and with it every
 * result's last bits -- never depends on how busy the machine was; the split above
 * is the same for both, so either is deterministic for a given thread count and shape
 * (and wherever the operands lie: tests/unit/test_fast_gemm.c), but the two differ from
 * each other in the last bits (their kernels sum K in different orders). Neither makes a row's
 * result independent of the batch, both pick kernels by shape; oneDNN changes more of
 * it (3 rows against 30 at K = 64-176: about 40 of 192-768 outputs differed on OpenBLAS
 * under the Haswell pin at one thread, most of them on oneDNN). */
#include "config.h"
#include "kernels/ops.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dnnl_gemm.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many multiply-adds a product runs on one thread. */
#define PAR_MIN (1L << 18)
/* Blocks are cut at multiples of this many rows/columns (kernel tile width). */
#define ALIGN 16
/* Blocks per thread, handed out dynamically: a thread the OS preempts holds up
 * the others by one block at most. */
#define CHUNKS 4

#ifndef DLLM_GEMM_DEFAULT
#define DLLM_GEMM_DEFAULT OP_GEMM_AUTO
#endif

op_gemm_lib op_gemm_rule(bool avx512, bool dnnl_built)
{
    return avx512 && dnnl_built ? OP_GEMM_DNNL : OP_GEMM_OPENBLAS;
}

static bool cpu_avx512(void)
{
    return cpu_has(CPU_AVX512F);
}

op_gemm_lib op_gemm_library_default(void)
{
    /* the CPU does not change under a running process; op_gemm may ask from any thread */
    static atomic_int lib = -1;
    int l = atomic_load_explicit(&lib, memory_order_relaxed);
    if (l < 0) {
        l = DLLM_GEMM_DEFAULT == OP_GEMM_AUTO ? (int)op_gemm_rule(cpu_avx512(), dnnl_gemm_built())
                                              : DLLM_GEMM_DEFAULT;
        atomic_store_explicit(&lib, l, memory_order_relaxed);
    }
    return (op_gemm_lib)l;
}

op_gemm_lib op_gemm_library(void)
{
    const char *env = getenv("DLLM_GEMM");
    if (!env || !*env)
        return op_gemm_library_default();
    if (strcmp(env, "openblas") == 0)
        return OP_GEMM_OPENBLAS;
    if (strcmp(env, "dnnl") == 0) {
        if (dnnl_gemm_built())
            return OP_GEMM_DNNL;
        fprintf(stderr, "DLLM_GEMM=dnnl: this build has no oneDNN (configure --with-dnnl)\n");
        exit(2);
    }
    fprintf(stderr, "DLLM_GEMM=%s: expected openblas or dnnl\n", env);
    exit(2);
}

bool op_gemm_library_built(op_gemm_lib lib)
{
    return lib == OP_GEMM_OPENBLAS || (lib == OP_GEMM_DNNL && dnnl_gemm_built());
}

const char *op_gemm_library_name(op_gemm_lib lib)
{
    return lib == OP_GEMM_DNNL ? "dnnl" : "openblas";
}

/* One block on one thread; oneDNN falls back to OpenBLAS if it refuses the call. */
static void sgemm(op_gemm_lib lib, bool transA, bool transB, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (lib == OP_GEMM_DNNL &&
        dnnl_gemm_f32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

void gemm_serial(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    sgemm(op_gemm_library(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The product split over nt OpenMP threads in blocks of C. */
static void gemm_split(op_gemm_lib lib, int nt, bool transA, bool transB, int M, int N, int K,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C)
{
    bool rows = M >= N; /* split the rows of C, else its columns */
    int len = rows ? M : N;
    int nchunk = nt * CHUNKS;
    int chunk = (len + nchunk - 1) / nchunk;
    chunk = (chunk + ALIGN - 1) / ALIGN * ALIGN;
    nchunk = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int i = 0; i < nchunk; i++) {
        int a = i * chunk, b = a + chunk < len ? a + chunk : len;
        if (a >= b)
            continue;
        if (rows) /* C[a:b, :] = op(A)[a:b, :] @ op(B) */
            sgemm(lib, transA, transB, b - a, N, K, alpha,
                  transA ? A + a : A + (size_t)a * lda, lda, B, ldb, beta, C + (size_t)a * N, N);
        else /* C[:, a:b] = op(A) @ op(B)[:, a:b] */
            sgemm(lib, transA, transB, M, b - a, K, alpha, A, lda,
                  transB ? B + (size_t)a * ldb : B + a, ldb, beta, C + a, N);
    }
}

void op_gemm(bool transA, bool transB, int M, int N, int K, float alpha,
             const float *A, const float *B, float beta, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        /* empty product: only the beta term is left (BLAS may reject K = 0) */
        for (size_t i = 0; i < (size_t)M * N; i++)
            C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    int lda = transA ? M : K; /* A stored [M,K] or [K,M] */
    int ldb = transB ? K : N; /* B stored [K,N] or [N,K] */
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel() && (double)M * N * K >= (double)PAR_MIN)
        nt = omp_get_max_threads();
#endif
    int len = M >= N ? M : N;
    if (nt > len / ALIGN)
        nt = len / ALIGN;
    op_gemm_lib lib = op_gemm_library();
    int saved = blas_hold();
    if (nt > 1)
        gemm_split(lib, nt, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C);
    else
        sgemm(lib, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, N);
    blas_release(saved);
}

void op_linear_fwd(float *out, const float *inp, const float *w, int N, int C, int OC)
{
    // out (N, OC), inp (N, C), w (OC, C)
    op_gemm(false, true, N, OC, C, 1.0f, inp, w, 0.0f, out);
}

void op_linear_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                   const float *w, int N, int C, int OC)
{
    // dinp (N, C), dw (OC, C), dout (N, OC)
    if (dinp)
        op_gemm(false, false, N, C, OC, 1.0f, dout, w, 1.0f, dinp);
    if (dw)
        op_gemm(true, false, OC, C, N, 1.0f, dout, inp, 1.0f, dw);
}
