/* selftest_probe.cu: checks of the CUDA runtime and cuBLASLt behaviour the project relies
 * on, compiled like the kernels: by nvcc for a GPU, or by the host compiler for the
 * emulation (kernels/cuda_emu/). On a GPU they confirm what the emulation assumes (the
 * probes of kernels/cuda_emu/PROBES.md); under emulation they also check that the
 * emulation reports what a GPU would hide or fault on (a barrier in divergent code, a
 * shuffle with an exited lane, a store past a buffer). The checks come in groups, one
 * row each of `dllm-rl selftest --device cuda` (kernels/cuda_selftest.h);
 * tests/unit/test_cuda_selftest.c runs them all. Also here: what the device is and which of
 * this binary's code it runs (SASS or JIT-compiled PTX), and GEMM timing with events. */
#include "kernels/cuda_selftest.h"
#include "kernels/cuda_ops.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codec.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif
#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <vector>

namespace {

/* The group being run: its failed checks and the first failure's message. */
int g_fail, g_total_fail;
char g_first[300];
dllm_cuda_probe_row g_row;
void *g_ctx;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...)
{
    char line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_fail++ == 0)
        snprintf(g_first, sizeof g_first, "%s", line);
    g_total_fail++;
}

/* Ends a group: one row, PASS with what was checked or FAIL with the first failure. */
void row_end(const char *name, const char *checked)
{
    if (g_fail > 1) {
        size_t n = strlen(g_first);
        snprintf(g_first + n, sizeof g_first - n, " (and %d more)", g_fail - 1);
    }
    g_row(g_ctx, name, g_fail ? DLLM_PROBE_FAIL : DLLM_PROBE_PASS, g_fail ? g_first : checked);
    g_fail = 0;
    g_first[0] = '\0';
}
#define EXPECT(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond))                                                                        \
            fail(__VA_ARGS__);                                                              \
    } while (0)

/* ---- runtime semantics (GPU and emulation) ----------------------------------------- */

/* out[block] = sum of in over the block: static and dynamic shared memory, barriers */
__global__ void block_sum_kernel(float *out, const float *in, int n)
{
    DLLM_DYNAMIC_SHARED(float, dyn);
    __shared__ float stat[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    stat[threadIdx.x] = v;
    dyn[threadIdx.x] = 2.0f * v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            stat[threadIdx.x] += stat[threadIdx.x + s];
            dyn[threadIdx.x] += dyn[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = stat[0] + dyn[0] / 2.0f; /* twice the sum */
}

/* warp collectives: every lane writes what it received */
__global__ void warp_kernel(int *out)
{
    int l = threadIdx.x;
    out[l] = __shfl_xor_sync(0xffffffffu, l, 5);
    out[32 + l] = __shfl_down_sync(0xffffffffu, l, 3);
    out[64 + l] = __shfl_up_sync(0xffffffffu, l, 2);
    out[96 + l] = __shfl_sync(0xffffffffu, l * 10, 3, 16); /* lane 3 of each 16-lane half */
    unsigned b = __ballot_sync(0xffffffffu, l % 3 == 0);
    out[128 + l] = (int)(b == 0x49249249u) + 2 * __all_sync(0xffffffffu, l < 32) +
                   4 * __any_sync(0xffffffffu, l == 31);
}

__global__ void atomics_kernel(float *f, int *mx, unsigned *cas)
{
    atomicAdd(f, 1.0f);
    atomicMax(mx, (int)(blockIdx.x * blockDim.x + threadIdx.x));
    unsigned old;
    do { /* a CAS loop: increments once per thread */
        old = *(volatile unsigned *)cas;
    } while (atomicCAS(cas, old, old + 1u) != old);
}

__global__ void index_kernel(int *out)
{
    int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int nt = blockDim.x * blockDim.y * blockDim.z;
    out[b * nt + t] = b * 1000 + t;
}

void runtime_checks(void)
{
    const int n = 1000, threads = 256, blocks = (n + threads - 1) / threads;
    float h[1000], sums[4];
    for (int i = 0; i < n; i++)
        h[i] = (float)(i % 17);
    float *d_in, *d_out;
    cudaCheck(cudaMalloc(&d_in, sizeof h));
    cudaCheck(cudaMalloc(&d_out, sizeof sums));
    cudaCheck(cudaMemcpy(d_in, h, sizeof h, cudaMemcpyHostToDevice));
    DLLM_LAUNCH(block_sum_kernel, blocks, threads, threads * sizeof(float), NULL)(d_out, d_in, n);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpy(sums, d_out, sizeof sums, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++) {
        float want = 0.0f;
        for (int i = b * threads; i < n && i < (b + 1) * threads; i++)
            want += h[i];
        EXPECT(sums[b] == 2.0f * want, "block sum %d: %g, want %g", b, sums[b], 2.0f * want);
    }

    row_end("runtime: shared memory and barriers", "block sums over static and dynamic shared memory");

    int *d_w, w[160];
    cudaCheck(cudaMalloc(&d_w, sizeof w));
    DLLM_LAUNCH(warp_kernel, 1, 32, 0, NULL)(d_w);
    cudaCheck(cudaMemcpy(w, d_w, sizeof w, cudaMemcpyDeviceToHost));
    for (int l = 0; l < 32; l++) {
        EXPECT(w[l] == (l ^ 5), "shfl_xor lane %d: %d", l, w[l]);
        EXPECT(w[32 + l] == (l + 3 < 32 ? l + 3 : l), "shfl_down lane %d: %d", l, w[32 + l]);
        EXPECT(w[64 + l] == (l >= 2 ? l - 2 : l), "shfl_up lane %d: %d", l, w[64 + l]);
        EXPECT(w[96 + l] == (l < 16 ? 30 : 190), "shfl width 16 lane %d: %d", l, w[96 + l]);
        EXPECT(w[128 + l] == 7, "ballot/all/any lane %d: %d", l, w[128 + l]);
    }

    row_end("runtime: warp shuffles and votes", "shfl xor/down/up/width 16, ballot, all, any");

    float *d_f;
    int *d_mx;
    unsigned *d_cas;
    cudaCheck(cudaMalloc(&d_f, 4));
    cudaCheck(cudaMalloc(&d_mx, 4));
    cudaCheck(cudaMalloc(&d_cas, 4));
    cudaCheck(cudaMemset(d_f, 0, 4));
    cudaCheck(cudaMemset(d_mx, 0, 4));
    cudaCheck(cudaMemset(d_cas, 0, 4));
    DLLM_LAUNCH(atomics_kernel, 7, 96, 0, NULL)(d_f, d_mx, d_cas);
    float f;
    int mx;
    unsigned cas;
    cudaCheck(cudaMemcpy(&f, d_f, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&mx, d_mx, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&cas, d_cas, 4, cudaMemcpyDeviceToHost));
    EXPECT(f == 672.0f && mx == 671 && cas == 672u, "atomics: add %g max %d cas %u", f, mx, cas);

    row_end("runtime: atomics", "atomicAdd, atomicMax, a CAS loop over 672 threads");

    int *d_idx, idx[2 * 3 * 2 * 4 * 2 * 3];
    cudaCheck(cudaMalloc(&d_idx, sizeof idx));
    DLLM_LAUNCH(index_kernel, dim3(2, 3, 2), dim3(4, 2, 3), 0, NULL)(d_idx);
    cudaCheck(cudaMemcpy(idx, d_idx, sizeof idx, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++)
            EXPECT(idx[b * 24 + t] == b * 1000 + t, "index of block %d thread %d", b, t);

    row_end("runtime: 3-D grid and block indices", "grid 2x3x2, block 4x2x3");

    /* configuration errors are reported by cudaGetLastError and then cleared */
    DLLM_LAUNCH(index_kernel, 1, 2048, 0, NULL)(d_idx);
    cudaError_t e = cudaGetLastError();
    EXPECT(e == cudaErrorInvalidConfiguration, "2048 threads: %s", cudaGetErrorName(e));
    e = cudaGetLastError();
    EXPECT(e == cudaSuccess, "error not cleared: %s", cudaGetErrorName(e));
    void *big = NULL;
    e = cudaMalloc(&big, (size_t)1 << 52);
    EXPECT(e == cudaErrorMemoryAllocation, "4 PiB cudaMalloc: %s", cudaGetErrorName(e));
    cudaGetLastError();
    row_end("runtime: launch and allocation errors",
            "2048 threads: cudaErrorInvalidConfiguration, cleared; 4 PiB: cudaErrorMemoryAllocation");
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_w));
    cudaCheck(cudaFree(d_f));
    cudaCheck(cudaFree(d_mx));
    cudaCheck(cudaFree(d_cas));
    cudaCheck(cudaFree(d_idx));
}

/* The device's conversion intrinsics against the project's codecs (fp8_codec.cuh, the
 * CPU's bits): E4M3/E5M2 with saturation to the largest finite value, bf16 RNE. */
__global__ void cvt_kernel(uint8_t *e4, uint8_t *e5, uint16_t *bf, const float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        e4[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
        e5[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2);
        bf[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    }
}

void conversion_checks(void)
{
    enum { N = 20000 };
    static float x[N];
    static uint8_t e4[N], e5[N];
    static uint16_t bf[N];
    uint64_t r = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(r >> 32);
        if (i % 2) /* half near the fp8 ranges, where rounding and saturation happen */
            u = (u & 0x807FFFFFu) | ((uint32_t)(100 + (u >> 24) % 60) << 23);
        if ((u & 0x7F800000u) == 0x7F800000u)
            u &= 0xFF800000u; /* inf, never NaN (NaN encodings are a probe) */
        memcpy(&x[i], &u, 4);
    }
    x[0] = 448.0f, x[1] = 464.0f, x[2] = 57344.0f, x[3] = 61440.0f, x[4] = INFINITY;
    x[5] = -INFINITY, x[6] = -0.0f, x[7] = 1e-9f;
    float *d_x;
    uint8_t *d_e4, *d_e5;
    uint16_t *d_bf;
    cudaCheck(cudaMalloc(&d_x, sizeof x));
    cudaCheck(cudaMalloc(&d_e4, N));
    cudaCheck(cudaMalloc(&d_e5, N));
    cudaCheck(cudaMalloc(&d_bf, 2 * N));
    cudaCheck(cudaMemcpy(d_x, x, sizeof x, cudaMemcpyHostToDevice));
    DLLM_LAUNCH(cvt_kernel, 40, 256, 0, NULL)(d_e4, d_e5, d_bf, d_x, N);
    cudaCheck(cudaMemcpy(e4, d_e4, N, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(e5, d_e5, N, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(bf, d_bf, 2 * N, cudaMemcpyDeviceToHost));
    int bad4 = 0, bad5 = 0, badb = 0;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint16_t want_bf = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        if (e4[i] != fp8c_encode(x[i], 0) && bad4++ < 3)
            fail("E4M3 of %a: 0x%02x, codec 0x%02x", x[i], e4[i], fp8c_encode(x[i], 0));
        if (e5[i] != fp8c_encode(x[i], 1) && bad5++ < 3)
            fail("E5M2 of %a: 0x%02x, codec 0x%02x", x[i], e5[i], fp8c_encode(x[i], 1));
        if (bf[i] != want_bf && badb++ < 3)
            fail("bf16 of %a: 0x%04x, RNE 0x%04x", x[i], bf[i], want_bf);
    }
    row_end("conversions: fp8 and bf16 intrinsics",
            "E4M3/E5M2 SATFINITE and bf16 RNE of 20000 values equal the project's codecs");
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_e4));
    cudaCheck(cudaFree(d_e5));
    cudaCheck(cudaFree(d_bf));
}

#ifdef DLLM_CUDA_EMULATION
/* ---- what the emulation must report (a GPU hangs, faults or silently misbehaves) ---- */

__global__ void divergent_barrier_kernel(float *x)
{
    if (threadIdx.x < 16)
        return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

__global__ void exited_lane_kernel(float *x)
{
    if (threadIdx.x == 7)
        return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void overrun_kernel(float *x, int n)
{
    x[n + threadIdx.x] = 1.0f; /* past the end */
}

void emulation_checks(void)
{
    float *d;
    cudaCheck(cudaMalloc(&d, 64 * sizeof(float)));
    DLLM_LAUNCH(divergent_barrier_kernel, 1, 64, 0, NULL)(d);
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorLaunchFailure, "barrier in divergent code: %s", cudaGetErrorName(e));
    cudaDeviceReset();
    cudaCheck(cudaMalloc(&d, 64 * sizeof(float)));
    DLLM_LAUNCH(exited_lane_kernel, 1, 32, 0, NULL)(d);
    e = cudaGetLastError();
    EXPECT(e == cudaErrorLaunchFailure, "shuffle with an exited lane: %s", cudaGetErrorName(e));
    cudaDeviceReset();
    cudaCheck(cudaMalloc(&d, 64 * sizeof(float)));
    DLLM_LAUNCH(overrun_kernel, 1, 4, 0, NULL)(d, 64);
    e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorIllegalAddress, "store past the end: %s", cudaGetErrorName(e));
    cudaDeviceReset();
    row_end("emulation: faults a GPU hides are reported",
            "divergent barrier, shuffle with an exited lane, store past a buffer");
}
#endif

/* ---- cuBLASLt: what it takes and refuses (the FP8 rules of the documentation) -------- */

/* The heuristic's verdict on an FP8 (or bf16) problem m x n x k with A k x m (op T) and
 * B k x n (op N) unless tA/tB say otherwise; D fp32. */
bool lt_accepts(cudaDataType_t ta, cudaDataType_t tb, bool opa_t, bool opb_t, int m, int n, int k,
                int32_t amode, int32_t bmode)
{
    cublasLtHandle_t h;
    cublasCheck(cublasLtCreate(&h));
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t oa = opa_t ? CUBLAS_OP_T : CUBLAS_OP_N, ob = opb_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    bool ok = true;
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
    if (amode || bmode) {
        ok = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode,
                                            sizeof amode) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode,
                                            sizeof bmode) == CUBLAS_STATUS_SUCCESS;
    }
#endif
    cublasCheck(cublasLtMatrixLayoutCreate(&la, ta, opa_t ? k : m, opa_t ? m : k, opa_t ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, tb, opb_t ? n : k, opb_t ? k : n, opb_t ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 32u << 20;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res = {};
    int found = 0;
    if (ok) {
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res,
                                                          &found);
        ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    return ok;
}

/* The heuristic's verdict on an INT8 problem (A, B int8; C, D int32; COMPUTE_32I with
 * the given scale type), m x n x k, A k x m (op T) and B k x n (op N) unless opa_t / opb_t
 * say otherwise, the given leading dimensions and the pointer alignment promised. */
bool lt_int8_accepts(bool opa_t, bool opb_t, int m, int n, int k, int lda, int ldb, int ldc,
                     cudaDataType_t scale, uint32_t align)
{
    cublasLtHandle_t h;
    cublasCheck(cublasLtCreate(&h));
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, scale));
    cublasOperation_t oa = opa_t ? CUBLAS_OP_T : CUBLAS_OP_N, ob = opb_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, opa_t ? k : m, opa_t ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, opb_t ? n : k, opb_t ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, m, n, ldc));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 0;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t at[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, at[i], &align, sizeof align));
    cublasLtMatmulHeuristicResult_t res = {};
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res,
                                                      &found);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    return s == CUBLAS_STATUS_SUCCESS && found > 0;
}

void cublaslt_int8_checks(void)
{
    int major = 0, dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8) {
        g_row(g_ctx, "cuBLASLt: INT8 layout and alignment", DLLM_PROBE_SKIP,
              "INT8 tensor-core GEMMs need sm_80 or later");
        return;
    }
    const cudaDataType_t I = CUDA_R_32I;
    EXPECT(lt_int8_accepts(true, false, 64, 40, 128, 128, 128, 64, I, 4), "INT8 TN refused");
    EXPECT(lt_int8_accepts(true, false, 64, 40, 128, 256, 256, 64, I, 4),
           "INT8 TN with ld 256 > k refused");
    EXPECT(!lt_int8_accepts(false, false, 64, 40, 128, 64, 128, 64, I, 4), "INT8 NN accepted");
    EXPECT(!lt_int8_accepts(true, false, 64, 40, 128, 130, 128, 64, I, 4),
           "INT8 with lda 130 accepted");
    EXPECT(!lt_int8_accepts(true, false, 62, 40, 128, 128, 128, 62, I, 4),
           "INT8 with m = 62 accepted");
    EXPECT(!lt_int8_accepts(true, false, 64, 40, 126, 128, 128, 64, I, 4),
           "INT8 with k = 126 accepted");
    EXPECT(!lt_int8_accepts(true, false, 64, 40, 128, 128, 128, 64, I, 2),
           "INT8 with 2-byte aligned pointers accepted");
    row_end("cuBLASLt: INT8 layout and alignment",
            "TN taken (ld = k, ld > k); NN, lda 130, m 62, k 126, 2-byte alignment refused "
            "(the regular-ordering IMMA rules; PROBES 16)");
}

void cublaslt_checks(void)
{
    const cudaDataType_t E4 = CUDA_R_8F_E4M3, E5 = CUDA_R_8F_E5M2, BF = CUDA_R_16BF;
    EXPECT(lt_accepts(E4, E4, true, false, 64, 64, 128, 0, 0), "FP8 E4M3 x E4M3 TN refused");
    EXPECT(lt_accepts(E4, E5, true, false, 64, 64, 128, 0, 0), "FP8 E4M3 x E5M2 TN refused");
    EXPECT(lt_accepts(E5, E4, true, false, 64, 64, 128, 0, 0), "FP8 E5M2 x E4M3 TN refused");
    EXPECT(!lt_accepts(E5, E5, true, false, 64, 64, 128, 0, 0), "FP8 E5M2 x E5M2 accepted");
    row_end("cuBLASLt: FP8 format pairs",
            "E4M3xE4M3, E4M3xE5M2, E5M2xE4M3 taken; E5M2xE5M2 refused (PROBES 10)");
    EXPECT(!lt_accepts(E4, E4, false, false, 64, 64, 128, 0, 0), "FP8 NN accepted (sm_90: TN only)");
    EXPECT(!lt_accepts(E4, E4, true, false, 64, 64, 24, 0, 0), "FP8 with k = 24 accepted");
    row_end("cuBLASLt: FP8 layout and alignment",
            "TN only (NN refused); k = 24 refused: k a multiple of 16 (PROBES 5)");
    EXPECT(lt_accepts(BF, BF, false, false, 48, 40, 64, 0, 0), "bf16 NN refused");
    EXPECT(lt_accepts(BF, BF, true, true, 48, 40, 64, 0, 0), "bf16 TT refused");
    row_end("cuBLASLt: bf16 transposes", "bf16 NN and TT taken");
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
    const int32_t V = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                  B = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    EXPECT(lt_accepts(E4, E4, true, false, 256, 64, 256, B, V), "block scaling 128x128 x 1x128 refused");
    EXPECT(!lt_accepts(E4, E4, true, false, 256, 256, 256, B, B), "128x128 on both operands accepted");
    EXPECT(!lt_accepts(BF, BF, true, false, 256, 64, 256, B, V), "block scaling of bf16 accepted");
    row_end("cuBLASLt: block-scaling modes",
            "128x128 x 1x128 taken; 128x128 on both and bf16 refused (PROBES 9)");
#else
    g_row(g_ctx, "cuBLASLt: block-scaling modes", DLLM_PROBE_SKIP,
          "cuBLAS older than 12.9 has no block-scaled FP8: tensor scaling is used");
#endif
}

} // namespace


/* ---- the entry points ------------------------------------------------------------------ */

extern "C" int dllm_cuda_selftest_rows(dllm_cuda_probe_row row, void *ctx)
{
    g_row = row;
    g_ctx = ctx;
    g_fail = g_total_fail = 0;
    g_first[0] = '\0';
    runtime_checks();
    conversion_checks();
    cublaslt_checks();
    cublaslt_int8_checks();
#ifdef DLLM_CUDA_EMULATION
    emulation_checks();
#endif
    return g_total_fail;
}

namespace {
struct report_buf {
    char *p;
    size_t n;
};
void report_row(void *ctx, const char *name, int status, const char *detail)
{
    report_buf *r = (report_buf *)ctx;
    if (status != DLLM_PROBE_FAIL)
        return;
    size_t used = strlen(r->p);
    snprintf(r->p + used, r->n - used, "%s: %s\n", name, detail);
}
} // namespace

extern "C" int dllm_cuda_selftest(char *report, size_t report_len)
{
    report[0] = '\0';
    report_buf r = {report, report_len};
    return dllm_cuda_selftest_rows(report_row, &r);
}

/* ---- the device and its code ---------------------------------------------------------------- */

extern "C" int dllm_cuda_device_info_get(dllm_cuda_device_info *d, char *why, size_t why_len)
{
    memset(d, 0, sizeof *d);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    d->sms = p.multiProcessorCount;
    d->mem_total_gib = (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0);
#ifdef DLLM_CUDA_EMULATION
    d->emulated = true;
    d->mem_free_gib = d->mem_total_gib;
#else
    cudaDriverGetVersion(&d->driver_version);
    cudaRuntimeGetVersion(&d->runtime_version);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
        d->mem_free_gib = (double)fr / (1024.0 * 1024.0 * 1024.0);
    /* which of the fat binary's images the driver loads for this device: SASS for
     * sm_90/sm_90a, else the compute_90 PTX compiled at load time, else none */
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, block_sum_kernel);
    if (e == cudaSuccess) {
        d->binary_version = fa.binaryVersion;
        d->ptx_version = fa.ptxVersion;
    } else {
        snprintf(d->kernel_error, sizeof d->kernel_error, "%s", cudaGetErrorString(e));
        cudaGetLastError();
    }
#endif
    return 0;
}

/* ---- GEMM timing ------------------------------------------------------------------------------ */

namespace {

/* Uniform values in [-scale, scale) from a hash of the index: bf16 bits and/or fp32. */
__global__ void fill_kernel(uint16_t *bf, float *f, size_t n, uint32_t seed, float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        float v = scale * ((float)(h & 0xFFFFFFu) / 8388608.0f - 1.0f);
        if (bf)
            bf[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
        if (f)
            f[i] = v;
    }
}

void fill(uint16_t *bf, float *f, size_t n, uint32_t seed, float scale)
{
    DLLM_LAUNCH(fill_kernel, 1024, 256, 0, NULL)(bf, f, n, seed, scale);
    cudaLaunchCheck();
}

/* Device buffers released on every return path. */
struct bufs {
    std::vector<void *> p;
    ~bufs()
    {
        for (void *q : p)
            cudaFree(q);
    }
    void *get(size_t bytes, const char *what, dllm_err *err)
    {
        void *q = NULL;
        if (cudaMalloc(&q, bytes ? bytes : 1) != cudaSuccess) {
            cudaGetLastError();
            dllm_err_set(err, DLLM_EXIT_INTERNAL, "timing: cannot allocate %s (%.2f GiB)", what,
                         (double)bytes / (1024.0 * 1024.0 * 1024.0));
            return NULL;
        }
        p.push_back(q);
        return q;
    }
};

struct events {
    cudaEvent_t e[3];
    events()
    {
        for (cudaEvent_t &x : e)
            cudaCheck(cudaEventCreate(&x));
    }
    ~events()
    {
        for (cudaEvent_t x : e)
            cudaEventDestroy(x);
    }
    float ms(int a, int b)
    {
        float t = 0.0f;
        cudaCheck(cudaEventSynchronize(e[b]));
        cudaCheck(cudaEventElapsedTime(&t, e[a], e[b]));
        return t;
    }
};

double median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace

extern "C" int dllm_cuda_time_bf16_linear(int N, int C, int OC, int reps, double *ms, dllm_err *err)
{
    bufs b;
    uint16_t *a = (uint16_t *)b.get((size_t)N * C * 2, "the activations", err);
    uint16_t *w = a ? (uint16_t *)b.get((size_t)OC * C * 2, "the weight", err) : NULL;
    void *out = w ? b.get((size_t)N * OC * 2, "the output", err) : NULL;
    if (!out)
        return err->code;
    fill(a, NULL, (size_t)N * C, 1, 1.0f);
    fill(w, NULL, (size_t)OC * C, 2, 0.05f);
    events ev;
    std::vector<float> t;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up (the algorithm is chosen and cached) */
        cudaCheck(cudaEventRecord(ev.e[0], NULL));
        if (dllm_cuda_gemm_bf16(false, true, N, OC, C, 1.0f, a, w, 0.0f, out, true, NULL, err))
            return err->code;
        cudaCheck(cudaEventRecord(ev.e[1], NULL));
        float x = ev.ms(0, 1);
        if (r >= 0)
            t.push_back(x);
    }
    *ms = median(t);
    return 0;
}

extern "C" int dllm_cuda_time_fp8_linear(int N, int C, int OC, fp8_scaling scaling, int reps,
                                         double *gemm_ms, double *quant_ms, dllm_err *err)
{
    const bool block = scaling == FP8_SCALE_BLOCK;
    long as_r = 0, as_c = 0, ws_r = 0, ws_c = 0;
    size_t nas = 1, nws = 1;
    if (block) {
        dllm_cuda_fp8_gemm_scale_strides(N, C, &as_r, &as_c, &ws_r, &ws_c);
        nas = (size_t)N * ((C + 127) / 128);
        nws = dllm_cuda_fp8_weight_scale_count(OC, C);
    }
    bufs b;
    uint16_t *a = (uint16_t *)b.get((size_t)N * C * 2, "the activations", err);
    float *w = a ? (float *)b.get((size_t)OC * C * 4, "the fp32 weight", err) : NULL;
    uint8_t *aq = w ? (uint8_t *)b.get((size_t)N * C, "the activation codes", err) : NULL;
    uint8_t *wq = aq ? (uint8_t *)b.get((size_t)OC * C, "the weight codes", err) : NULL;
    float *as = wq ? (float *)b.get(nas * 4, "the activation scales", err) : NULL;
    float *ws = as ? (float *)b.get(nws * 4, "the weight scales", err) : NULL;
    void *out = ws ? b.get((size_t)N * OC * 2, "the output", err) : NULL;
    if (!out)
        return err->code;
    fill(a, NULL, (size_t)N * C, 3, 1.0f);
    fill(NULL, w, (size_t)OC * C, 4, 0.05f);
    dllm_cuda_fp8_quantise(wq, ws, ws_r, ws_c, w, OC, C, block ? 128 : OC, block ? 128 : C,
                           FP8_E4M3, false, NULL);
    events ev;
    std::vector<float> tg, tq;
    for (int r = -1; r < reps; r++) {
        cudaCheck(cudaEventRecord(ev.e[0], NULL));
        dllm_cuda_fp8_quantise_bf16(aq, as, as_r, as_c, a, N, C, block ? 1 : N, block ? 128 : C,
                                    FP8_E4M3, false, NULL);
        cudaCheck(cudaEventRecord(ev.e[1], NULL));
        if (dllm_cuda_fp8_linear(out, true, aq, as, FP8_E4M3, wq, ws, FP8_E4M3, scaling, N, C, OC,
                                 NULL, err))
            return err->code;
        cudaCheck(cudaEventRecord(ev.e[2], NULL));
        float q = ev.ms(0, 1), g = ev.ms(1, 2);
        if (r >= 0) {
            tq.push_back(q);
            tg.push_back(g);
        }
    }
    *gemm_ms = median(tg);
    if (quant_ms)
        *quant_ms = median(tq);
    return 0;
}
