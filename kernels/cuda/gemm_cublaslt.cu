/* gemm_cublaslt.cu: the GEMMs, through cuBLASLt.
 *
 * cuBLASLt is column-major; our matrices are row-major. A row-major X[r,c] is the
 * column-major X^T, so row-major C[M,N] = op(A)[M,K] op(B)[K,N] is computed as the
 * column-major C^T[N,M] = op(B)^T op(A)^T: cuBLASLt's A is our B, its B is our A,
 * m = N, n = M, and each op flips meaning (a non-transposed row-major operand is a
 * column-major matrix used as is).
 *
 * BF16:  D = alpha op(A) op(B) + beta C, bf16 inputs, fp32 compute (CUBLAS_COMPUTE_32F),
 *        D fp32 or bf16 (C has D's type).
 * FP8:   out[N,OC] = act[N,C] @ w[OC,C]^T is cuBLASLt's "TN" problem, the only layout its
 *        FP8 kernels take (on sm_90), with E4M3 or E5M2 codes but never both E5M2: A = w (k x m column-major, ld C, op T), B = act (k x n, ld C,
 *        op N), D = out (m x n, ld OC), m = OC, n = N, k = C. Dequantisation scales enter
 *        as A/B scale pointers: per tensor (SCALAR_32F), or on cuBLAS 12.9.1+ and sm_90
 *        per 128x128 weight block (BLK128x128_32F, scale (ob, kb) at ob*round_up(KB,4)+kb,
 *        the layout the CUDA backend's quantiser writes once per weight sync) and per 1x128
 *        activation group (VEC128_32F, scale (n, kb) at kb*N + n); block-scaled calls take
 *        N a multiple of 8 (the backend pads the token rows; see dllm_cuda_fp8_linear).
 *        Fast accumulation is off (the default): Hopper then promotes partial sums to
 *        full fp32 regularly. Within a promotion interval its FP8 tensor cores keep only
 *        about 14 significant bits, so the product differs from op_fp8_linear_fwd (exact
 *        products, fp32 sums) by more than fp32 rounding: tests/unit/test_backend_ops.c states
 *        the bound.
 * Every device gets one handle and one 32 MiB workspace (cudaMalloc: 256-byte aligned).
 * The heuristic's best algorithm is looked up once per problem (kind, shape, leading
 * dimensions, types, scale mode) and cached. All pointers must be 16-byte aligned and
 * all leading dimensions multiples of 16 bytes; the heuristic is told so (minimum
 * alignment 16) so that the cached algorithm suits every later call of the same shape.
 * Calls from several host threads are serialised around the cache; two streams must not
 * run GEMMs at the same time on one device (they would share the workspace). */
#include "kernels/cuda/common.cuh"

#include <array>
#include <cstdarg>
#include <map>
#include <mutex>

#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define DLLM_HAVE_BLOCK_SCALED_FP8 1
#else
#define DLLM_HAVE_BLOCK_SCALED_FP8 0
#endif
/* The first cuBLAS whose block-scaled FP8 GEMMs we take: 12.9.1 (CUDA 12.9 Update 1),
 * as major * 10000 + minor * 100 + patch (cublasLtGetVersion's encoding). The headers of
 * 12.9.0 already declare the scale modes, so the build test above is not enough: the
 * library found at run time decides (docs/DESIGN.md, "FP8 and BF16 GEMMs on the device"). */
enum { BLOCK_FP8_MIN_CUBLAS = 120901 };

enum { WORKSPACE_BYTES = 32 << 20, MAX_DEVICES = 64 };

typedef std::array<int64_t, 12> gemm_key;

struct lt_context {
    cublasLtHandle_t handle;
    void *workspace;
    std::map<gemm_key, cublasLtMatmulAlgo_t> algos;
};

static std::mutex g_lt_mutex;
static lt_context *g_lt[MAX_DEVICES];

/* The current device's context, created on first use. Called with g_lt_mutex held. */
static lt_context *lt_get(void)
{
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev < 0 || dev >= MAX_DEVICES) {
        fprintf(stderr, "dllm-rl: cuBLASLt: device %d out of range\n", dev);
        exit(1);
    }
    if (!g_lt[dev]) {
        lt_context *c = new lt_context();
        cublasCheck(cublasLtCreate(&c->handle));
        cudaCheck(cudaMalloc(&c->workspace, WORKSPACE_BYTES));
        g_lt[dev] = c;
    }
    return g_lt[dev];
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Sets err and returns DLLM_EXIT_INTERNAL. */
static int gemm_fail(dllm_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int gemm_fail(dllm_err *err, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err) {
        err->code = DLLM_EXIT_INTERNAL;
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    } else {
        fprintf(stderr, "dllm-rl: %s\n", msg);
    }
    return DLLM_EXIT_INTERNAL;
}

/* Runs D = alpha op(A) op(B) + beta C (column-major; C == D, or C = Cin of D's layout
 * when Cin is set) with the cached or newly chosen algorithm. Descriptors are created and
 * destroyed per call (cheap); only the algorithm is remembered. */
static int lt_matmul(const char *what, const gemm_key &key, cublasLtMatmulDesc_t desc,
                     cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                     cublasLtMatrixLayout_t lc, const void *alpha, const void *A,
                     const void *B, const void *beta, void *C, cudaStream_t st, dllm_err *err,
                     uint32_t align = 16, const void *Cin = nullptr)
{
    std::lock_guard<std::mutex> lock(g_lt_mutex);
    lt_context *ctx = lt_get();
    auto it = ctx->algos.find(key);
    if (it == ctx->algos.end()) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = WORKSPACE_BYTES;
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        const cublasLtMatmulPreferenceAttributes_t aligns[] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (auto a : aligns)
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof align));
        cublasLtMatmulHeuristicResult_t res = {};
        int found = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, la, lb, lc, lc, pref,
                                                           1, &res, &found);
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (hs != CUBLAS_STATUS_SUCCESS || found == 0 || res.state != CUBLAS_STATUS_SUCCESS)
            return gemm_fail(err,
                             "%s: cuBLASLt has no algorithm for this problem "
                             "(m=%lld n=%lld k=%lld): %s",
                             what, (long long)key[2], (long long)key[3], (long long)key[4],
                             hs != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(hs)
                                                         : "heuristic returned none");
        it = ctx->algos.emplace(key, res.algo).first;
    }
    cublasStatus_t s = cublasLtMatmul(ctx->handle, desc, alpha, A, la, B, lb, beta,
                                      Cin ? Cin : C, lc, C, lc,
                                      &it->second, ctx->workspace, WORKSPACE_BYTES, st);
    if (s != CUBLAS_STATUS_SUCCESS)
        return gemm_fail(err, "%s: cublasLtMatmul: %s", what, cublasLtGetStatusString(s));
    return DLLM_OK;
}

/* dllm_cuda_gemm_bf16, with C read from R (fp32, C's layout) instead of C when R is set */
static int gemm_bf16(bool transA, bool transB, int M, int N, int K, float alpha,
                     const uint16_t *A, const uint16_t *B, float beta, void *C, bool out_bf16,
                     const float *R, dllm_cuda_stream s, dllm_err *err)
{
    const char *what = "bf16 gemm";
    if (M <= 0 || N <= 0 || K <= 0)
        return gemm_fail(err, "%s: bad shape M=%d N=%d K=%d", what, M, N, K);
    int lda = transA ? M : K; /* row-major leading dimensions, as op_gemm */
    int ldb = transB ? K : N;
    int ldc = N;
    if (lda % 8 || ldb % 8)
        return gemm_fail(err,
                         "%s: leading dimensions of A (%d) and B (%d) must be multiples of 8 "
                         "bf16 (16 bytes) (M=%d N=%d K=%d transA=%d transB=%d)",
                         what, lda, ldb, M, N, K, transA, transB);
    if (ldc % (out_bf16 ? 8 : 4))
        return gemm_fail(err, "%s: N=%d (leading dimension of C) must be a multiple of %d "
                              "(16 bytes)", what, N, out_bf16 ? 8 : 4);
    if (!aligned16(A) || !aligned16(B) || !aligned16(C) || (R && !aligned16(R)))
        return gemm_fail(err, "%s: A, B and C must be 16-byte aligned", what);

    /* column-major: m = N, n = M; cuBLASLt A = our B, cuBLASLt B = our A */
    cublasOperation_t opa = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t ct = out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, transB ? K : N, transB ? N : K, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, transA ? M : K, transA ? K : M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, ct, N, M, ldc));
    gemm_key key = {1, transA, transB, N, M, K, lda, ldb, ldc, out_bf16, beta != 0.0f, 0};
    int rc = lt_matmul(what, key, desc, la, lb, lc, &alpha, B, A, &beta, C, as_stream(s), err, 16,
                       R);
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return rc;
}

extern "C" int dllm_cuda_gemm_bf16(bool transA, bool transB, int M, int N, int K, float alpha,
                                   const uint16_t *A, const uint16_t *B, float beta, void *C,
                                   bool out_bf16, dllm_cuda_stream s, dllm_err *err)
{
    return gemm_bf16(transA, transB, M, N, K, alpha, A, B, beta, C, out_bf16, NULL, s, err);
}

extern "C" int dllm_cuda_gemm_bf16_res(bool transA, bool transB, int M, int N, int K,
                                       float alpha, const uint16_t *A, const uint16_t *B,
                                       const float *R, float *D, dllm_cuda_stream s,
                                       dllm_err *err)
{
    return gemm_bf16(transA, transB, M, N, K, alpha, A, B, 1.0f, D, false, R, s, err);
}

extern "C" int dllm_cuda_gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha,
                                  const float *A, const float *B, float beta, float *C,
                                  dllm_cuda_stream s, dllm_err *err)
{
    const char *what = "fp32 gemm";
    if (M <= 0 || N <= 0 || K <= 0)
        return gemm_fail(err, "%s: bad shape M=%d N=%d K=%d", what, M, N, K);
    int lda = transA ? M : K, ldb = transB ? K : N, ldc = N;
    /* fp32 operands of any shape: the heuristic is asked for 4-byte alignment only, and
     * the shape is part of the cache key, so odd leading dimensions are fine */
    cublasOperation_t opa = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transB ? K : N, transB ? N : K, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, transA ? M : K, transA ? K : M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, ldc));
    gemm_key key = {3, transA, transB, N, M, K, lda, ldb, ldc, 0, beta != 0.0f, 0};
    int rc = lt_matmul(what, key, desc, la, lb, lc, &alpha, B, A, &beta, C, as_stream(s), err, 4);
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return rc;
}

extern "C" bool dllm_cuda_fp8_block_scaling_available(char *why, size_t why_len)
{
#if DLLM_HAVE_BLOCK_SCALED_FP8
    size_t v = cublasLtGetVersion();
    if (v < BLOCK_FP8_MIN_CUBLAS) {
        if (why)
            snprintf(why, why_len, "cuBLASLt %zu.%zu.%zu at run time; block-scaled FP8 GEMMs "
                     "need cuBLAS 12.9.1 or later (CUDA 12.9 Update 1)", v / 10000,
                     v / 100 % 100, v % 100);
        return false;
    }
    /* attribute queries are cheap (unlike cudaGetDeviceProperties): this runs per GEMM */
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        if (why)
            snprintf(why, why_len, "no usable CUDA device");
        return false;
    }
    if (major != 9) {
        if (why)
            snprintf(why, why_len, "device %d is sm_%d%d; block-scaled FP8 GEMMs need sm_90 "
                                   "(Hopper)", dev, major, minor);
        return false;
    }
    if (why && why_len)
        why[0] = '\0';
    return true;
#else
    if (why)
        snprintf(why, why_len, "built with cuBLAS %d.%d.%d; block-scaled FP8 GEMMs need "
                 "cuBLAS 12.9.1 or later (CUDA 12.9 Update 1)", (int)CUBLAS_VERSION / 10000,
                 (int)CUBLAS_VERSION / 100 % 100, (int)CUBLAS_VERSION % 100);
    return false;
#endif
}

extern "C" void dllm_cuda_fp8_gemm_scale_strides(int N, int C, long *act_srs, long *act_scs,
                                                 long *w_srs, long *w_scs)
{
    long KB = (C + 127) / 128;
    *act_srs = 1;
    *act_scs = N;
    *w_srs = (KB + 3) / 4 * 4;
    *w_scs = 1;
}

extern "C" size_t dllm_cuda_fp8_weight_scale_count(int OC, int C)
{
    size_t KB = ((size_t)C + 127) / 128, OB = ((size_t)OC + 127) / 128;
    return OB * ((KB + 3) / 4 * 4);
}

static cudaDataType_t fp8_type(fp8_format f)
{
    return f == FP8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* dllm_cuda_fp8_linear, plus res (fp32 out's layout; NULL: none) as C with beta 1 */
static int fp8_linear(void *out, bool out_bf16, const float *res, const uint8_t *act_q,
                      const float *act_scale, fp8_format act_fmt, const uint8_t *w_q,
                      const float *w_scale, fp8_format w_fmt, fp8_scaling scaling, int N, int C,
                      int OC, dllm_cuda_stream s, dllm_err *err)
{
    const char *what = res ? "fp8 linear + residual" : "fp8 linear";
    if (N <= 0 || C <= 0 || OC <= 0)
        return gemm_fail(err, "%s: bad shape N=%d C=%d OC=%d", what, N, C, OC);
    if ((w_fmt != FP8_E4M3 && w_fmt != FP8_E5M2) || (act_fmt != FP8_E4M3 && act_fmt != FP8_E5M2))
        return gemm_fail(err, "%s: unknown fp8 format (weights %d, activations %d)", what,
                         (int)w_fmt, (int)act_fmt);
    /* cuBLASLt's FP8 kernels take E4M3 x E4M3 and the mixed pairs, never E5M2 x E5M2:
     * say so here rather than through an opaque heuristic failure */
    if (w_fmt == FP8_E5M2 && act_fmt == FP8_E5M2)
        return gemm_fail(err, "%s: fp8 format e5m2 for both weights and activations: cuBLASLt "
                              "has no E5M2 x E5M2 GEMM (use e4m3, the default)", what);
    if (C % 16 || OC % 16)
        return gemm_fail(err, "%s: C=%d and OC=%d must be multiples of 16 (16-byte rows of "
                              "fp8, TN layout)", what, C, OC);
    if (!aligned16(out) || !aligned16(act_q) || !aligned16(w_q) || (res && !aligned16(res)))
        return gemm_fail(err, "%s: out, residual, activations and weight must be 16-byte "
                              "aligned", what);
    if (res && out_bf16)
        return gemm_fail(err, "%s: the residual is added to an fp32 output only", what);
    if (!act_scale || !w_scale)
        return gemm_fail(err, "%s: scale pointers are required", what);
    if (scaling != FP8_SCALE_TENSOR && scaling != FP8_SCALE_BLOCK)
        return gemm_fail(err, "%s: scaling '%s' not supported on the GPU (tensor, or block "
                              "weights with 1x128 activation groups)",
                         what, fp8_scaling_name(scaling));
    if (scaling == FP8_SCALE_BLOCK) {
        char why[256];
        if (!dllm_cuda_fp8_block_scaling_available(why, sizeof why))
            return gemm_fail(err, "%s: %s", what, why);
        /* the 1x128 activation scales of a token lie N apart: 8 tokens keep every k block's
         * row of scales 32-byte aligned, and cuBLASLt refuses fewer (kernels/cuda_emu/
         * PROBES.md); the backend pads the token count */
        if (N % 8)
            return gemm_fail(err, "%s: block-scaled FP8 with N=%d tokens: pad N to a multiple "
                                  "of 8", what, N);
    }

    cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    cudaDataType_t ct = out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
#if DLLM_HAVE_BLOCK_SCALED_FP8
    if (scaling == FP8_SCALE_BLOCK) {
        int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                   &amode, sizeof amode));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                   &bmode, sizeof bmode));
    }
#endif
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                               &w_scale, sizeof w_scale));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                               &act_scale, sizeof act_scale));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, fp8_type(w_fmt), C, OC, C));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, fp8_type(act_fmt), C, N, C));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, ct, OC, N, OC));
    /* with a residual, D = acc + 1 * C: cuBLASLt's FP8 GEMMs take C and D fp32 with the fp32
     * scale type, the sum rounded once as the separate add would */
    float alpha = 1.0f, beta = res ? 1.0f : 0.0f;
    gemm_key key = {2, 1, 0, OC, N, C, C, C, OC, out_bf16 + 2 * (res != NULL),
                    (int64_t)w_fmt * 2 + act_fmt, (int64_t)scaling};
    int rc = lt_matmul(what, key, desc, la, lb, lc, &alpha, w_q, act_q, &beta, out, as_stream(s),
                       err, 16, res);
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return rc;
}

extern "C" int dllm_cuda_fp8_linear(void *out, bool out_bf16, const uint8_t *act_q,
                                    const float *act_scale, fp8_format act_fmt,
                                    const uint8_t *w_q, const float *w_scale, fp8_format w_fmt,
                                    fp8_scaling scaling, int N, int C, int OC,
                                    dllm_cuda_stream s, dllm_err *err)
{
    return fp8_linear(out, out_bf16, NULL, act_q, act_scale, act_fmt, w_q, w_scale, w_fmt,
                      scaling, N, C, OC, s, err);
}

extern "C" int dllm_cuda_fp8_linear_res(float *out, const float *res, const uint8_t *act_q,
                                        const float *act_scale, fp8_format act_fmt,
                                        const uint8_t *w_q, const float *w_scale,
                                        fp8_format w_fmt, fp8_scaling scaling, int N, int C,
                                        int OC, dllm_cuda_stream s, dllm_err *err)
{
    return fp8_linear(out, false, res, act_q, act_scale, act_fmt, w_q, w_scale, w_fmt, scaling,
                      N, C, OC, s, err);
}
