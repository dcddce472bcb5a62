/* gemm_int8.cu: the INT8 W8A7 linear on the device (kernels/int8.h): the activations
 * quantised by a kernel with the CPU's bits, the exact integer products on cuBLASLt's
 * INT8 tensor-core GEMM (sm_80 and later here; int8 operands, int32 accumulation), then
 * the CPU's scaling, so a rollout on the device is the same policy as on the CPU.
 *
 * The scheme is the CPU's to the bit (kernels/cpu/int8.c): codes clamp(rint(x / s), +-Q)
 * with an IEEE fp32 division (__fdiv_rn, whatever nvcc's flags), NaN to +Q; scales
 * amax / Q over the finite values (1 when amax is 0); activations keep 7 bits (Q = 63)
 * here too, though a GPU's int8 products need no headroom, because the scheme is one on
 * every machine. The integer sums are exact whoever forms them, and the epilogue
 *   out[n, o] = sum_b (s_a[n, b] * s_w[o, b]) * (float)acc[n, o, b]
 * forms each product and sum with __fmul_rn / __fadd_rn (no contraction into an FMA), b
 * ascending and the first term assigned, as the CPU: equal outputs bit for bit.
 *
 * The GEMM. row-major out[N, OC] = qa[N, K] qw[OC, K]^T is cuBLASLt's "TN" problem, the
 * only form its INT8 kernels take with the regular data ordering: A = qw (k x m
 * column-major, ld ldq, op T), B = qa (k x n, ld ldq, op N), C = D = acc (m x n, ld m),
 * m = OC rounded up to 4, n = rows, k = the k-block's width. cuBLASLt's documented INT8
 * requirements (cublasLtMatmul, the IMMA kernels' regular ordering): COMPUTE_32I with an
 * int32 scale type, A/B int8, C/D int32, pointers 4-byte aligned, the leading
 * dimensions and m and k multiples of 4. The device copy of a weight is laid out for it
 * (dllm_cuda_int8_weight_layout): rows padded to a multiple of 4 and, under channel
 * scaling, the row stride too, with zero codes, which add nothing to the exact sums.
 * Channel scaling runs one such GEMM over the whole row (rows in chunks so the int32
 * scratch stays at most 256 MiB), then a scaling pass.
 *
 * Block scaling cannot be one cuBLASLt call: every 128-wide k-block has its own scales, and
 * one GEMM plus one scaling pass per k-block would write and reread the whole int32
 * product kb times. It runs int8_block_gemm_kernel instead: one
 * thread block per 64 x 64 tile of out, per k-block the integer sums on the tensor cores
 * (wmma, signed char operands, int32 accumulators: exact in any order), then the scaled
 * term added into fp32 registers in k-block order, the first assigned, as the CPU: one
 * launch per linear, no scratch, out written once. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/int8_codec.cuh"

#ifdef __CUDACC__
#include <mma.h>
#else
#include "kernels/cuda_emu/wmma_emu.h"
#endif

extern "C" {
#include "kernels/int8.h"
}

#include <mutex>

namespace {

std::mutex g_mutex;
cublasLtHandle_t g_handle;

int round4(int x) { return (x + 3) / 4 * 4; }

/* One warp per (row, group): amax, the scale, the codes; zero codes past C. qa (N, ldq),
 * sa (N, kb). */
__global__ static void int8_act_kernel(int8_t *qa, float *sa, const float *x, int N, int C,
                                       int ldq, int kb, int g)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)N * kb)
        return; /* the whole warp leaves together */
    int n = (int)(warp / kb), b = (int)(warp % kb);
    int c0 = b * g, c1 = min(c0 + g, C);
    const float *xr = x + (size_t)n * C;
    int8_t *qr = qa + (size_t)n * ldq;
    float amax = 0.0f;
    for (int c = c0 + lane; c < c1; c += 32)
        amax = fmaxf(amax, i8c_finite_abs(xr[c]));
    amax = warp_max(amax);
    float s = i8c_scale(amax, (float)INT8_A_MAX);
    if (lane == 0)
        sa[(size_t)n * kb + b] = s;
    for (int c = c0 + lane; c < c1; c += 32)
        qr[c] = i8c_code(xr[c], s, (float)INT8_A_MAX);
    /* the padding past C: in the last group's warp (the group, or the whole row) */
    if (b == kb - 1)
        for (int c = C + lane; c < ldq; c += 32)
            qr[c] = 0;
}

/* out rows [0, nr) under channel scaling: t = (s_a * s_w) * (float)acc, then res (rows as
 * out, or NULL) added: the order of the CPU's linear followed by its add. */
__global__ static void int8_scale_kernel(float *out, const int32_t *acc, int ldacc,
                                         const float *sa, const float *sw, int nr, int OC,
                                         const float *res)
{
    size_t total = (size_t)nr * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / OC), o = (int)(i % OC);
        float t = __fmul_rn(__fmul_rn(sa[n], sw[o]), (float)acc[(size_t)n * ldacc + o]);
        out[i] = res ? __fadd_rn(t, res[i]) : t;
    }
}

/* The block-scaled product (INT8_SCALE_BLOCK). Tile TB_M rows x TB_N outputs, one warp per
 * 32 x 32 quarter (2 x 2 wmma tiles). The operands of a k-block sit in shared memory
 * k-chunk-major ([k / 16][row][16]), so every fragment's pointer is 256-bit aligned and its
 * ldm 16 bytes, as wmma requires. A tile's TB_N columns lie in one 128-row weight block
 * (TB_N divides INT8_BLOCK): one weight scale per k-block. Tiles run in groups of TB_GROUP
 * row tiles (512 rows), each group over every column tile. res (as out, or NULL) is added
 * after the last k-block's term, as the CPU's linear followed by its add. */
enum { TB_M = 64, TB_N = 64, TB_THREADS = 128, TB_KC = INT8_BLOCK / 16,
       TB_PER_THREAD = TB_M * TB_N / TB_THREADS, TB_GROUP = 8 };
static_assert(INT8_BLOCK % TB_N == 0, "a tile's columns share one weight block");
static_assert(TB_M == TB_N, "one loop loads both operands' rows");

__global__ static void __launch_bounds__(TB_THREADS)
int8_block_gemm_kernel(float *out, const int8_t *qa, const float *sa, const int8_t *qw,
                       const float *sw, int N, int OC, int mp, int kb, int ldq, const float *res)
{
    namespace wmma = nvcuda::wmma;
    __shared__ __align__(32) signed char as[TB_KC][TB_M][16];
    __shared__ __align__(32) signed char bs[TB_KC][TB_N][16];
    __shared__ __align__(32) int cs[TB_M][TB_N];
    /* grouped order: TB_GROUP row tiles sweep every column tile together, so a group's
     * activation rows stay in L2 while the weight streams once per group */
    const int tiles_n = (N + TB_M - 1) / TB_M, tiles_o = (OC + TB_N - 1) / TB_N;
    const int grp = (int)(blockIdx.x / ((unsigned)TB_GROUP * tiles_o)),
              in = (int)(blockIdx.x % ((unsigned)TB_GROUP * tiles_o));
    const int first = grp * TB_GROUP, gsize = min(TB_GROUP, tiles_n - first);
    const int n0 = (first + in % gsize) * TB_M, o0 = (in / gsize) * TB_N;
    const int tid = threadIdx.x, warp = tid / 32;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;
    float acc[TB_PER_THREAD] = {0};
    for (int b = 0; b < kb; b++) {
        /* both operands' k-block, as 4-byte words (ldq is a multiple of 4): rows past N and
         * past the weight's padded rows read as zero codes */
        for (int i = 0; i < TB_M * INT8_BLOCK / 4 / TB_THREADS; i++) {
            const int w = tid + i * TB_THREADS, r = w / (INT8_BLOCK / 4), k = (w % (INT8_BLOCK / 4)) * 4;
            const size_t col = (size_t)b * INT8_BLOCK + k;
            const int n = n0 + r, o = o0 + r;
            *(uint32_t *)&as[k / 16][r][k % 16] =
                n < N ? *(const uint32_t *)(qa + (size_t)n * ldq + col) : 0u;
            *(uint32_t *)&bs[k / 16][r][k % 16] =
                o < mp ? *(const uint32_t *)(qw + (size_t)o * ldq + col) : 0u;
        }
        __syncthreads();
        wmma::fragment<wmma::accumulator, 16, 16, 16, int> c[2][2];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                wmma::fill_fragment(c[i][j], 0);
        for (int kc = 0; kc < TB_KC; kc++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb[2];
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], &as[kc][wr + 16 * i][0], 16);
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], &bs[kc][wc + 16 * j][0], 16);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(c[i][j], fa[i], fb[j], c[i][j]);
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                wmma::store_matrix_sync(&cs[wr + 16 * i][wc + 16 * j], c[i][j], TB_N,
                                        wmma::mem_row_major);
        __syncthreads();
        const float ws = o0 < OC ? sw[(size_t)(o0 / INT8_BLOCK) * kb + b] : 0.0f;
        for (int i = 0; i < TB_PER_THREAD; i++) {
            const int e = tid + i * TB_THREADS, r = e / TB_N, n = n0 + r;
            const float s = n < N ? sa[(size_t)n * kb + b] : 0.0f;
            const float t = __fmul_rn(__fmul_rn(s, ws), (float)cs[r][e % TB_N]);
            acc[i] = b == 0 ? t : __fadd_rn(acc[i], t);
        }
        /* the next k-block's loads overwrite as and bs, which every warp has finished
         * reading (the barrier above); cs is rewritten only after the next barrier */
    }
    for (int i = 0; i < TB_PER_THREAD; i++) {
        const int e = tid + i * TB_THREADS, n = n0 + e / TB_N, o = o0 + e % TB_N;
        if (n < N && o < OC) {
            const size_t at = (size_t)n * OC + o;
            out[at] = res ? __fadd_rn(acc[i], res[at]) : acc[i];
        }
    }
}

cublasLtHandle_t handle(void)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_handle)
        cublasCheck(cublasLtCreate(&g_handle));
    return g_handle;
}

/* acc (nr, mp) int32, column-major m x n = mp x nr = qw (mp, ldq)[.., k0 .. k0+k] .
 * qa (nr, ldq)[.., k0 .. k0+k]^T: the TN problem above. */
void int8_gemm(int32_t *acc, const int8_t *qw, const int8_t *qa, int mp, int nr, int k, int ldq)
{
    cublasLtHandle_t h = handle();
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    int32_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtMatrixLayout_t la, lb, lc;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, (uint64_t)k, (uint64_t)mp, ldq));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, (uint64_t)k, (uint64_t)nr, ldq));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, (uint64_t)mp, (uint64_t)nr, mp));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 0;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof ws));
    /* the heuristic is told the alignment the layout guarantees (4 bytes: a k-block's
     * offset within a row) */
    uint32_t al = 4;
    const cublasLtMatmulPreferenceAttributes_t at[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, at[i], &al, sizeof al));
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &got);
    if (st != CUBLAS_STATUS_SUCCESS || got < 1) {
        fprintf(stderr, "dllm-rl: cuda int8 linear: cuBLASLt has no INT8 GEMM for m %d n %d k %d "
                        "ld %d (%s)\n", mp, nr, k, ldq, cublasLtGetStatusString(st));
        exit(1);
    }
    const int32_t one = 1, zero = 0;
    cublasCheck(cublasLtMatmul(h, desc, &one, qw, la, qa, lb, &zero, acc, lc, acc, lc, &res.algo,
                               NULL, 0, 0));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
}

} // namespace

static int g_acc_elems = INT8_DEVICE_ACC_ELEMS;

extern "C" void dllm_cuda_int8_acc_limit(int elems)
{
    g_acc_elems = elems > 0 ? elems : INT8_DEVICE_ACC_ELEMS;
}

/* The int32 products' rows per GEMM for w over N rows (channel scaling). */
static int acc_chunk(int N, const int8_matrix *w)
{
    int chunk = g_acc_elems / round4(w->rows);
    return chunk < 1 ? 1 : chunk > N ? N : chunk;
}

static size_t a256(size_t b) { return (b + 255) / 256 * 256; }

extern "C" size_t dllm_cuda_int8_scratch_bytes(int N, const int8_matrix *w)
{
    return a256((size_t)N * w->ldq) + a256((size_t)N * w->kb * sizeof(float)) +
           dllm_cuda_int8_acc_bytes(N, w);
}

extern "C" size_t dllm_cuda_int8_acc_bytes(int N, const int8_matrix *w)
{
    if (w->scaling == INT8_SCALE_BLOCK)
        return 0; /* int8_block_gemm_kernel keeps its sums in registers */
    return a256((size_t)acc_chunk(N, w) * round4(w->rows) * sizeof(int32_t));
}

static void check_weight(const int8_matrix *w, int C, int OC)
{
    DLLM_CUDA_REQUIRE(w->q && w->rows == OC && w->cols == C,
                      "weight [%d, %d], call [%d, %d]", w->rows, w->cols, OC, C);
    DLLM_CUDA_REQUIRE(w->ldq % 4 == 0 &&
                      w->ldq >= w->kb * (w->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C),
                      "weight row stride %d is not the device layout", w->ldq);
}

extern "C" void dllm_cuda_int8_linear_codes(float *out, const int8_t *qa, const float *sa,
                                            const int8_matrix *w, int N, int C, int OC,
                                            void *acc_scratch, const float *res)
{
    check_weight(w, C, OC);
    if (N <= 0)
        return;
    const int kb = w->kb, ldq = w->ldq, mp = round4(OC);
    if (w->scaling == INT8_SCALE_BLOCK) {
        const size_t tiles = (size_t)((N + TB_M - 1) / TB_M) * ((OC + TB_N - 1) / TB_N);
        DLLM_LAUNCH(int8_block_gemm_kernel, (unsigned)tiles, TB_THREADS, 0, 0)(
            out, qa, sa, w->q, w->scale, N, OC, mp, kb, ldq, res);
        cudaLaunchCheck();
        return;
    }
    int32_t *acc = (int32_t *)acc_scratch; // (chunk, mp)
    const int chunk = acc_chunk(N, w);
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int nr = n0 + chunk < N ? chunk : N - n0;
        int8_gemm(acc, w->q, qa + (size_t)n0 * ldq, mp, nr, ldq, ldq);
        DLLM_LAUNCH(int8_scale_kernel, grid_for((size_t)nr * OC, 256), 256, 0, 0)(
            out + (size_t)n0 * OC, acc, mp, sa + (size_t)n0, w->scale, nr, OC,
            res ? res + (size_t)n0 * OC : NULL);
        cudaLaunchCheck();
    }
}

extern "C" void dllm_cuda_int8_linear(float *out, const float *inp, const int8_matrix *w, int N,
                                      int C, int OC, void *scratch, const float *res)
{
    check_weight(w, C, OC);
    if (N <= 0)
        return;
    const int kb = w->kb, ldq = w->ldq;
    const int g = w->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C;
    char *ws = (char *)scratch;
    int8_t *qa = (int8_t *)ws;                                  // (N, ldq)
    float *sa = (float *)(ws + a256((size_t)N * ldq));          // (N, kb)
    size_t warps = (size_t)N * kb;
    DLLM_LAUNCH(int8_act_kernel, grid_for(warps * 32, 256), 256, 0, 0)(qa, sa, inp, N, C, ldq, kb, g);
    cudaLaunchCheck();
    dllm_cuda_int8_linear_codes(out, qa, sa, w, N, C, OC,
                                ws + a256((size_t)N * ldq) + a256((size_t)N * kb * 4), res);
}

/* Whether the current device has compute capability need (10 x major + minor) or later;
 * else why says which device it is and what needs more. */
static int device_at_least(int need, const char *what, char *why, size_t why_len)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        if (why)
            snprintf(why, why_len, "no usable CUDA device");
        return 0;
    }
    if (10 * major + minor >= need)
        return 1;
    if (why)
        snprintf(why, why_len, "the device is sm_%d%d: %s need compute capability %d.%d or "
                 "later", major, minor, what, need / 10, need % 10);
    return 0;
}

extern "C" int dllm_cuda_fp8_available(char *why, size_t why_len)
{
    return device_at_least(89, "FP8 tensor-core GEMMs (L40S, H100)", why, why_len);
}

extern "C" int dllm_cuda_int8_available(char *why, size_t why_len)
{
    return device_at_least(80, "INT8 tensor-core GEMMs (A100, H100)", why, why_len);
}
