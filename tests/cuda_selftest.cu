/* cuda_selftest.cu: checks of the CUDA runtime and cuBLASLt behaviour the project relies
 * on, compiled like the kernels: by nvcc for a GPU, or by the host compiler for the
 * emulation (kernels/cuda_emu/). On a GPU it confirms what the emulation assumes (the
 * probes of kernels/cuda_emu/PROBES.md); under emulation it also checks that the
 * emulation reports what a GPU would hide or fault on (a barrier in divergent code, a
 * shuffle with an exited lane, a store past a buffer). tests/test_cuda_selftest.c runs it. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codec.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif
#include <cstdarg>
#include <cstring>

namespace {

int g_fail;
char *g_rep;
size_t g_rep_len;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...)
{
    char line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_fail++;
    size_t used = strlen(g_rep);
    snprintf(g_rep + used, g_rep_len - used, "%s\n", line);
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

    int *d_idx, idx[2 * 3 * 2 * 4 * 2 * 3];
    cudaCheck(cudaMalloc(&d_idx, sizeof idx));
    DLLM_LAUNCH(index_kernel, dim3(2, 3, 2), dim3(4, 2, 3), 0, NULL)(d_idx);
    cudaCheck(cudaMemcpy(idx, d_idx, sizeof idx, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 12; b++)
        for (int t = 0; t < 24; t++)
            EXPECT(idx[b * 24 + t] == b * 1000 + t, "index of block %d thread %d", b, t);

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

void cublaslt_checks(void)
{
    const cudaDataType_t E4 = CUDA_R_8F_E4M3, E5 = CUDA_R_8F_E5M2, BF = CUDA_R_16BF;
    EXPECT(lt_accepts(E4, E4, true, false, 64, 64, 128, 0, 0), "FP8 E4M3 x E4M3 TN refused");
    EXPECT(lt_accepts(E4, E5, true, false, 64, 64, 128, 0, 0), "FP8 E4M3 x E5M2 TN refused");
    EXPECT(lt_accepts(E5, E4, true, false, 64, 64, 128, 0, 0), "FP8 E5M2 x E4M3 TN refused");
    EXPECT(!lt_accepts(E5, E5, true, false, 64, 64, 128, 0, 0), "FP8 E5M2 x E5M2 accepted");
    EXPECT(!lt_accepts(E4, E4, false, false, 64, 64, 128, 0, 0), "FP8 NN accepted (sm_90: TN only)");
    EXPECT(!lt_accepts(E4, E4, true, false, 64, 64, 24, 0, 0), "FP8 with k = 24 accepted");
    EXPECT(lt_accepts(BF, BF, false, false, 48, 40, 64, 0, 0), "bf16 NN refused");
    EXPECT(lt_accepts(BF, BF, true, true, 48, 40, 64, 0, 0), "bf16 TT refused");
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
    const int32_t V = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                  B = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    EXPECT(lt_accepts(E4, E4, true, false, 256, 64, 256, B, V), "block scaling 128x128 x 1x128 refused");
    EXPECT(!lt_accepts(E4, E4, true, false, 256, 256, 256, B, B), "128x128 on both operands accepted");
    EXPECT(!lt_accepts(BF, BF, true, false, 256, 64, 256, B, V), "block scaling of bf16 accepted");
#endif
}

} // namespace

extern "C" int dllm_cuda_selftest(char *report, size_t report_len)
{
    g_fail = 0;
    g_rep = report;
    g_rep_len = report_len;
    report[0] = '\0';
    runtime_checks();
    conversion_checks();
    cublaslt_checks();
#ifdef DLLM_CUDA_EMULATION
    emulation_checks();
#endif
    return g_fail;
}
