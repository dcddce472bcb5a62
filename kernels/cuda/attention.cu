/* attention.cu: scaled dot-product attention, flash-style (tiles of K/V in shared memory,
 * online softmax), bidirectional or causal, key padding mask, grouped-query heads.
 *
 * q, out [B,T,NH,HD]; k, v [B,T,NKV,HD]; head h reads kv head h / (NH/NKV).
 * Key s is visible to query t iff keymask[b,s] != 0 (or keymask NULL) and, if causal,
 * s <= t. With S[s] = q.k[s] / sqrt(HD) over the visible keys:
 *   lse = log sum_s exp(S[s]),  P[s] = exp(S[s] - lse),  out = sum_s P[s] v[s]
 * (a query with no visible key: out = 0, lse = -inf).
 * Forward, per query row: running max m, sum l and unnormalised output o; per tile of BK
 * keys m' = max(m, max S), l = l e^(m-m') + sum e^(S-m'), o = o e^(m-m') + sum e^(S-m') v.
 * Backward (accumulated), with D = sum_d dout*out per query row and P recomputed from lse:
 *   dP[s] = dout.v[s],  dS = P (dP - D),
 *   dq += scale sum_s dS[s] k[s]    (kernel over query tiles: K/V tiles in shared memory)
 *   dk[s] += scale sum_t dS q[t], dv[s] += sum_t P dout[t]
 *                                   (kernel over key tiles: Q/dout tiles in shared memory,
 *                                    looping over the query heads that share the kv head)
 * so every gradient element has one writer: deterministic, no atomics.
 * Work split: a query (or key) row is owned by TPR consecutive threads, each holding
 * D = HDP/TPR of its dims interleaved (dim i*TPR + p), so shared-memory reads by the TPR
 * threads fall in different banks; partial dot products are summed by xor shuffles.
 * HDP is HD rounded up to a power of two (16..256); padded dims are zero.
 * These fp32 kernels are the reference; the entries below run the tensor-core kernels of
 * attention_tc.cu instead where dllm_cuda_attention_tc (kernels/attention_path.h) says so. */
#include "kernels/attention_path.h"
#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

template <int HDP> struct AttCfg {
    static constexpr int TPR = HDP >= 32 ? HDP / 32 : 1; /* threads per row */
    static constexpr int D = HDP / TPR;                  /* dims per thread */
    static constexpr int BQ = 64;                        /* query rows per block */
    static constexpr int BK = HDP <= 128 ? 32 : 16;      /* keys per shared tile */
    static constexpr int THREADS = BQ * TPR;
};

/* Sum over the TPR threads of a row (consecutive lanes, TPR divides 32). */
template <int TPR> __device__ __forceinline__ float row_sum(float x)
{
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Element d of row s of x [B,T,NH_,HD] at head hh, rotated when rp.pos is set (row b*T + s
 * at its position). */
__device__ __forceinline__ float load_elem(const float *x, int b, int s, int T, int NH_, int hh,
                                           int HD, int d, const rope_in &rp)
{
    const float *row = x + (((size_t)b * T + s) * NH_ + hh) * HD;
    return rp.pos ? rope_elem(row, d, HD, rp.pos[(size_t)b * T + s], rp) : row[d];
}

/* Loads rows [s0, s0+rows) of x [B,T,NH_,HD] at head hh into tile [rows][HDP], zeros
 * past T and past HD; rotated by rp when its pos is set. */
template <int HDP>
__device__ __forceinline__ void load_tile(float *tile, const float *x, int b, int s0, int rows,
                                          int T, int NH_, int hh, int HD,
                                          const rope_in &rp = rope_in())
{
    for (int e = threadIdx.x; e < rows * HDP; e += blockDim.x) {
        int j = e / HDP, d = e % HDP, s = s0 + j;
        tile[e] = (s < T && d < HD) ? load_elem(x, b, s, T, NH_, hh, HD, d, rp) : 0.0f;
    }
}

template <int HDP>
__global__ static void __launch_bounds__(AttCfg<HDP>::THREADS)
attention_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                     const uint8_t *keymask, int T, int NH, int NKV, int HD, bool causal,
                     float scale, rope_in rp)
{
    typedef AttCfg<HDP> C;
    __shared__ float Ks[C::BK * HDP], Vs[C::BK * HDP];
    __shared__ bool vis[C::BK];
    const int r = threadIdx.x / C::TPR, p = threadIdx.x % C::TPR;
    const int t = blockIdx.x * C::BQ + r, h = blockIdx.y, b = blockIdx.z;
    const int kh = h / (NH / NKV);
    const bool row_ok = t < T;

    float qr[C::D], o[C::D];
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        qr[i] = (row_ok && d < HD) ? load_elem(q, b, t, T, NH, h, HD, d, rp) : 0.0f;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int t_last = min(T, (int)(blockIdx.x + 1) * C::BQ) - 1;
    const int kend = causal ? t_last + 1 : T;

    for (int k0 = 0; k0 < kend; k0 += C::BK) {
        __syncthreads(); /* the previous tile is no longer read */
        load_tile<HDP>(Ks, k, b, k0, C::BK, T, NKV, kh, HD, rp);
        load_tile<HDP>(Vs, v, b, k0, C::BK, T, NKV, kh, HD);
        for (int j = threadIdx.x; j < C::BK; j += blockDim.x) {
            int s = k0 + j;
            vis[j] = s < T && (!keymask || keymask[(size_t)b * T + s]);
        }
        __syncthreads();
        float sc[C::BK];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < C::BK; j++) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < C::D; i++)
                dot += qr[i] * Ks[j * HDP + i * C::TPR + p];
            dot = row_sum<C::TPR>(dot);
            bool ok = vis[j] && (!causal || k0 + j <= t);
            sc[j] = ok ? dot * scale : -INFINITY;
            tmax = fmaxf(tmax, sc[j]);
        }
        float mnew = fmaxf(m, tmax);
        if (mnew == -INFINITY)
            continue; /* nothing visible yet for this row */
        float corr = m == -INFINITY ? 0.0f : expf(m - mnew);
        l *= corr;
#pragma unroll
        for (int i = 0; i < C::D; i++)
            o[i] *= corr;
#pragma unroll
        for (int j = 0; j < C::BK; j++) {
            float pj = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mnew);
            l += pj;
#pragma unroll
            for (int i = 0; i < C::D; i++)
                o[i] += pj * Vs[j * HDP + i * C::TPR + p];
        }
        m = mnew;
    }
    if (!row_ok)
        return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        if (d < HD)
            out[(((size_t)b * T + t) * NH + h) * HD + d] = o[i] * inv;
    }
    if (lse && p == 0) /* NULL: inference, no backward will need it */
        lse[((size_t)b * NH + h) * T + t] = l > 0.0f ? m + logf(l) : -INFINITY;
}

/* D[b,h,t] = sum_d dout * out: one warp per (b, t, h) row. */
__global__ static void attention_bwd_dot_kernel(float *Dd, const float *dout, const float *out,
                                                int B, int T, int NH, int HD)
{
    size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (row >= (size_t)B * T * NH)
        return;
    const float *go = dout + row * HD, *o = out + row * HD;
    float acc = 0.0f;
    for (int d = lane; d < HD; d += 32)
        acc += go[d] * o[d];
    acc = warp_sum(acc);
    if (lane == 0) {
        int h = (int)(row % NH);
        size_t bt = row / NH;
        int t = (int)(bt % T), b = (int)(bt / T);
        Dd[((size_t)b * NH + h) * T + t] = acc;
    }
}

template <int HDP>
__global__ static void __launch_bounds__(AttCfg<HDP>::THREADS)
attention_bwd_dq_kernel(float *dq, const float *dout, const float *lse, const float *Dd,
                        const float *q, const float *k, const float *v, const uint8_t *keymask,
                        int T, int NH, int NKV, int HD, bool causal, float scale)
{
    typedef AttCfg<HDP> C;
    __shared__ float Ks[C::BK * HDP], Vs[C::BK * HDP];
    __shared__ bool vis[C::BK];
    const int r = threadIdx.x / C::TPR, p = threadIdx.x % C::TPR;
    const int t = blockIdx.x * C::BQ + r, h = blockIdx.y, b = blockIdx.z;
    const int kh = h / (NH / NKV);
    const bool row_ok = t < T;
    const size_t qoff = (((size_t)b * T + t) * NH + h) * HD;

    float qr[C::D], gr[C::D], acc[C::D];
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        bool in = row_ok && d < HD;
        qr[i] = in ? q[qoff + d] : 0.0f;
        gr[i] = in ? dout[qoff + d] : 0.0f;
        acc[i] = 0.0f;
    }
    const float L = row_ok ? lse[((size_t)b * NH + h) * T + t] : -INFINITY;
    const float Dr = row_ok ? Dd[((size_t)b * NH + h) * T + t] : 0.0f;
    const int t_last = min(T, (int)(blockIdx.x + 1) * C::BQ) - 1;
    const int kend = causal ? t_last + 1 : T;

    for (int k0 = 0; k0 < kend; k0 += C::BK) {
        __syncthreads();
        load_tile<HDP>(Ks, k, b, k0, C::BK, T, NKV, kh, HD);
        load_tile<HDP>(Vs, v, b, k0, C::BK, T, NKV, kh, HD);
        for (int j = threadIdx.x; j < C::BK; j += blockDim.x) {
            int s = k0 + j;
            vis[j] = s < T && (!keymask || keymask[(size_t)b * T + s]);
        }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < C::BK; j++) {
            float sdot = 0.0f, pdot = 0.0f;
#pragma unroll
            for (int i = 0; i < C::D; i++) {
                sdot += qr[i] * Ks[j * HDP + i * C::TPR + p];
                pdot += gr[i] * Vs[j * HDP + i * C::TPR + p];
            }
            sdot = row_sum<C::TPR>(sdot);
            pdot = row_sum<C::TPR>(pdot);
            bool ok = vis[j] && (!causal || k0 + j <= t) && L != -INFINITY;
            float P = ok ? expf(sdot * scale - L) : 0.0f;
            float dS = P * (pdot - Dr) * scale;
#pragma unroll
            for (int i = 0; i < C::D; i++)
                acc[i] += dS * Ks[j * HDP + i * C::TPR + p];
        }
    }
    if (!row_ok)
        return;
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        if (d < HD)
            dq[qoff + d] += acc[i];
    }
}

template <int HDP>
__global__ static void __launch_bounds__(AttCfg<HDP>::THREADS)
attention_bwd_dkv_kernel(float *dk, float *dv, const float *dout, const float *lse,
                         const float *Dd, const float *q, const float *k, const float *v,
                         const uint8_t *keymask, int T, int NH, int NKV, int HD, bool causal,
                         float scale)
{
    typedef AttCfg<HDP> C;
    __shared__ float Qs[C::BK * HDP], Gs[C::BK * HDP];
    __shared__ float Ls[C::BK], Ds[C::BK];
    const int r = threadIdx.x / C::TPR, p = threadIdx.x % C::TPR;
    const int s = blockIdx.x * C::BQ + r, kh = blockIdx.y, b = blockIdx.z;
    const int group = NH / NKV;
    const bool key_ok = s < T && (!keymask || keymask[(size_t)b * T + min(s, T - 1)]);
    const size_t koff = (((size_t)b * T + s) * NKV + kh) * HD;

    float kr[C::D], vr[C::D], dka[C::D], dva[C::D];
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        bool in = s < T && d < HD;
        kr[i] = in ? k[koff + d] : 0.0f;
        vr[i] = in ? v[koff + d] : 0.0f;
        dka[i] = dva[i] = 0.0f;
    }
    /* causal: queries before the block's first key see none of its keys */
    const int t_begin = causal ? blockIdx.x * C::BQ : 0;

    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int t0 = t_begin - t_begin % C::BK; t0 < T; t0 += C::BK) {
            __syncthreads();
            load_tile<HDP>(Qs, q, b, t0, C::BK, T, NH, h, HD);
            load_tile<HDP>(Gs, dout, b, t0, C::BK, T, NH, h, HD);
            for (int j = threadIdx.x; j < C::BK; j += blockDim.x) {
                int t = t0 + j;
                Ls[j] = t < T ? lse[((size_t)b * NH + h) * T + t] : -INFINITY;
                Ds[j] = t < T ? Dd[((size_t)b * NH + h) * T + t] : 0.0f;
            }
            __syncthreads();
#pragma unroll 4
            for (int j = 0; j < C::BK; j++) {
                float sdot = 0.0f, pdot = 0.0f;
#pragma unroll
                for (int i = 0; i < C::D; i++) {
                    sdot += Qs[j * HDP + i * C::TPR + p] * kr[i];
                    pdot += Gs[j * HDP + i * C::TPR + p] * vr[i];
                }
                sdot = row_sum<C::TPR>(sdot);
                pdot = row_sum<C::TPR>(pdot);
                float L = Ls[j];
                bool ok = key_ok && (!causal || s <= t0 + j) && L != -INFINITY;
                float P = ok ? expf(sdot * scale - L) : 0.0f;
                float dS = P * (pdot - Ds[j]) * scale;
#pragma unroll
                for (int i = 0; i < C::D; i++) {
                    dva[i] += P * Gs[j * HDP + i * C::TPR + p];
                    dka[i] += dS * Qs[j * HDP + i * C::TPR + p];
                }
            }
        }
    }
    if (s >= T)
        return;
#pragma unroll
    for (int i = 0; i < C::D; i++) {
        int d = i * C::TPR + p;
        if (d < HD) {
            if (dk)
                dk[koff + d] += dka[i];
            if (dv)
                dv[koff + d] += dva[i];
        }
    }
}

static int padded_hd(int HD)
{
    int h = 16;
    while (h < HD)
        h *= 2;
    return h;
}

static void check_shape(int B, int T, int NH, int NKV, int HD)
{
    DLLM_CUDA_REQUIRE(B > 0 && T > 0 && NH > 0 && NKV > 0 && HD > 0,
                      "bad shape B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
    DLLM_CUDA_REQUIRE(NH % NKV == 0, "NH=%d is not a multiple of NKV=%d", NH, NKV);
    DLLM_CUDA_REQUIRE(HD <= 256, "head dim %d: at most 256", HD);
    DLLM_CUDA_REQUIRE(B <= 65535 && NH <= 65535, "B=%d NH=%d: at most 65535", B, NH);
}

template <int HDP>
static void fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v,
                       const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                       bool causal, cudaStream_t st, rope_in rp)
{
    typedef AttCfg<HDP> C;
    dim3 grid((T + C::BQ - 1) / C::BQ, NH, B);
    DLLM_LAUNCH(attention_fwd_kernel<HDP>, grid, C::THREADS, 0, st)(out, lse, q, k, v, keymask, T,
        NH, NKV, HD, causal, 1.0f / sqrtf((float)HD), rp);
    cudaLaunchCheck();
}

template <int HDP>
static void bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                       const float *Dd, const float *q, const float *k, const float *v,
                       const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                       bool causal, cudaStream_t st)
{
    typedef AttCfg<HDP> C;
    float scale = 1.0f / sqrtf((float)HD);
    if (dq) {
        dim3 grid((T + C::BQ - 1) / C::BQ, NH, B);
        DLLM_LAUNCH(attention_bwd_dq_kernel<HDP>, grid, C::THREADS, 0, st)(dq, dout, lse, Dd, q, k,
            v, keymask, T, NH, NKV, HD, causal, scale);
        cudaLaunchCheck();
    }
    if (dk || dv) {
        dim3 grid((T + C::BQ - 1) / C::BQ, NKV, B);
        DLLM_LAUNCH(attention_bwd_dkv_kernel<HDP>, grid, C::THREADS, 0, st)(dk, dv, dout, lse, Dd,
            q, k, v, keymask, T, NH, NKV, HD, causal, scale);
        cudaLaunchCheck();
    }
}

/* The forward, q and k rotated by rp as they are loaded when rp.pos is set. */
static void attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                          const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                          bool causal, rope_in rp, cudaStream_t st)
{
    check_shape(B, T, NH, NKV, HD);
    if (dllm_cuda_attention_tc(HD)) {
        attention_tc_rope_fwd(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, st);
        return;
    }
    switch (padded_hd(HD)) {
    case 16: fwd_launch<16>(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, st, rp); break;
    case 32: fwd_launch<32>(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, st, rp); break;
    case 64: fwd_launch<64>(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, st, rp); break;
    case 128: fwd_launch<128>(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, st, rp); break;
    default: fwd_launch<256>(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, st, rp); break;
    }
}

extern "C" void dllm_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                        const float *v, const uint8_t *keymask, int B, int T,
                                        int NH, int NKV, int HD, bool causal,
                                        dllm_cuda_stream s)
{
    attention_fwd(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, rope_in(),
                  as_stream(s));
}

extern "C" void dllm_cuda_rope_attention_fwd(float *out, float *lse, const float *q,
                                             const float *k, const float *v, const int32_t *pos,
                                             const float *cos, const float *sin, int max_pos,
                                             const uint8_t *keymask, int B, int T, int NH,
                                             int NKV, int HD, bool causal, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(pos && cos && sin && max_pos > 0 && HD % 2 == 0,
                      "RoPE in attention: positions and a table of max_pos %d for an even head "
                      "dim (HD=%d)", max_pos, HD);
    rope_in rp = {pos, cos, sin, max_pos};
    attention_fwd(out, lse, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, as_stream(s));
}

extern "C" size_t dllm_cuda_attention_bwd_scratch_floats(int B, int T, int NH)
{
    return (size_t)B * NH * T;
}

/* The backward's row dots D = rowsum(dout * out) [B,NH,T] into the caller's scratch (so
 * it counts where memory is counted), after the checks both backwards share. */
static float *bwd_row_dots(const float *dout, const float *out, const float *lse, int B, int T,
                           int NH, int HD, float *scratch, cudaStream_t st)
{
    DLLM_CUDA_REQUIRE(lse && scratch, "the forward's lse and a scratch of %zu floats are "
                      "required", dllm_cuda_attention_bwd_scratch_floats(B, T, NH));
    size_t rows = (size_t)B * T * NH;
    unsigned dot_blocks = (unsigned)((rows * 32 + 255) / 256); /* a warp per row */
    DLLM_LAUNCH(attention_bwd_dot_kernel, dot_blocks, 256, 0, st)(scratch, dout, out, B, T, NH,
        HD);
    cudaLaunchCheck();
    return scratch;
}

extern "C" void dllm_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                                        const float *out, const float *lse, const float *q,
                                        const float *k, const float *v, const uint8_t *keymask,
                                        int B, int T, int NH, int NKV, int HD, bool causal,
                                        float *scratch, dllm_cuda_stream s)
{
    check_shape(B, T, NH, NKV, HD);
    if (!dq && !dk && !dv)
        return;
    cudaStream_t st = as_stream(s);
    const float *Dd = bwd_row_dots(dout, out, lse, B, T, NH, HD, scratch, st);
    if (dllm_cuda_attention_tc(HD)) {
        attention_tc_bwd(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal,
                         st);
        return;
    }
    switch (padded_hd(HD)) {
    case 16: bwd_launch<16>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, st); break;
    case 32: bwd_launch<32>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, st); break;
    case 64: bwd_launch<64>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, st); break;
    case 128: bwd_launch<128>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, st); break;
    default: bwd_launch<256>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, st); break;
    }
}

extern "C" void dllm_cuda_rope_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                                             const float *out, const float *lse, const float *q,
                                             const float *k, const float *v, const int32_t *pos,
                                             const float *cos, const float *sin, int max_pos,
                                             const uint8_t *keymask, int B, int T, int NH,
                                             int NKV, int HD, bool causal, float *scratch,
                                             dllm_cuda_stream s)
{
    check_shape(B, T, NH, NKV, HD);
    DLLM_CUDA_REQUIRE(dllm_cuda_attention_tc(HD) && pos && cos && sin && max_pos > 0 &&
                          HD % 2 == 0,
                      "RoPE in the attention's backward: the tensor-core kernels (HD=%d), "
                      "positions and a table of max_pos %d", HD, max_pos);
    if (!dq && !dk && !dv)
        return;
    cudaStream_t st = as_stream(s);
    const float *Dd = bwd_row_dots(dout, out, lse, B, T, NH, HD, scratch, st);
    rope_in rp = {pos, cos, sin, max_pos};
    attention_tc_rope_bwd(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal,
                          rp, true, st);
}

/* ---- Cached attention (the table's kv_append and attention_cached: KV-cache decoding,
 * dllm/qwen3.c; the block cache of cached denoising, dllm/block_cache.c) ---------------------
 * The cache holds K (after k_norm and RoPE) and V of every slot so far,
 * kc, vc [B,max_len,NKV,HD], with a key mask cmask [B,max_len]. kv_append writes the T new
 * slots len .. len+T-1 of each row; attention_cached lets new query t (slot len + t) see
 * the cached slots s <= len + t with cmask != 0 (causal: the CPU cache's rule, dllm/qwen3.c),
 * or every slot s < max_len with cmask (NULL: all) != 0 (bidirectional: the block cache).
 * On tensor cores (attention_tc_cached) where dllm_cuda_attention_tc says so, as the
 * forward; else one block per query row and head, the keys in tiles of CACHED_THREADS (one key per
 * thread for the scores, then one output dim per thread over the tile), online softmax
 * as in the forward above; a query with no visible key gets 0. */
enum { CACHED_THREADS = 128, CACHED_MAX_HD = 256, CACHED_DIMS = CACHED_MAX_HD / CACHED_THREADS };

__global__ static void kv_append_kernel(float *kc, float *vc, uint8_t *cmask, const float *k,
                                        const float *v, const uint8_t *newmask, int T, int len,
                                        int max_len, int KD, size_t n)
{
    // k, v (B*T, KD); newmask (B*T) or NULL (all real); n = B*T*KD
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / (size_t)KD, kd = i % (size_t)KD;
        size_t b = bt / (size_t)T, t = bt % (size_t)T;
        size_t slot = b * (size_t)max_len + (size_t)len + t;
        kc[slot * KD + kd] = k[i];
        vc[slot * KD + kd] = v[i];
        if (cmask && kd == 0)
            cmask[slot] = newmask ? newmask[bt] != 0 : 1;
    }
}

__global__ static void attention_cached_kernel(float *y, const float *q, const float *kc,
                                               const float *vc, const uint8_t *cmask, int T,
                                               int len, int max_len, int NH, int NKV, int HD,
                                               float scale, int causal)
{
    // y, q (B*T*NH, HD); grid.x = B*T*NH
    __shared__ float qs[CACHED_MAX_HD];
    __shared__ float ps[CACHED_THREADS];
    const int r = blockIdx.x, tid = threadIdx.x;
    const int h = r % NH, t = (r / NH) % T, b = r / (NH * T);
    const int kh = h / (NH / NKV), send = causal ? len + t + 1 : max_len;
    const size_t KD = (size_t)NKV * HD;
    const float *kb = kc + (size_t)b * max_len * KD + (size_t)kh * HD;
    const float *vb = vc + (size_t)b * max_len * KD + (size_t)kh * HD;
    const uint8_t *mb = cmask ? cmask + (size_t)b * max_len : NULL;
    for (int i = tid; i < HD; i += CACHED_THREADS)
        qs[i] = q[(size_t)r * HD + i];
    __syncthreads();
    float run_max = -INFINITY, run_sum = 0.0f, acc[CACHED_DIMS];
    for (int j = 0; j < CACHED_DIMS; j++)
        acc[j] = 0.0f;
    for (int s0 = 0; s0 < send; s0 += CACHED_THREADS) {
        const int s = s0 + tid;
        float sc = -INFINITY;
        if (s < send && (!mb || mb[s])) {
            float dot = 0.0f;
            for (int i = 0; i < HD; i++)
                dot += qs[i] * kb[(size_t)s * KD + i];
            sc = dot * scale;
        }
        const float nmax = fmaxf(run_max, block_max(sc));
        if (nmax == -INFINITY)
            continue; /* nothing visible yet: the same on every thread */
        const float e = sc == -INFINITY ? 0.0f : expf(sc - nmax);
        const float corr = run_max == -INFINITY ? 0.0f : expf(run_max - nmax);
        const float tsum = block_sum(e); /* its barriers also order ps[] against the last tile */
        ps[tid] = e;
        __syncthreads();
        run_sum = run_sum * corr + tsum;
        run_max = nmax;
        const int ns = send - s0 < CACHED_THREADS ? send - s0 : CACHED_THREADS;
        for (int j = 0; j < CACHED_DIMS; j++) {
            const int i = tid + j * CACHED_THREADS;
            if (i >= HD)
                break;
            float o = acc[j] * corr;
            for (int u = 0; u < ns; u++)
                if (ps[u] != 0.0f)
                    o += ps[u] * vb[(size_t)(s0 + u) * KD + i];
            acc[j] = o;
        }
        __syncthreads(); /* ps[] is rewritten by the next tile */
    }
    for (int j = 0; j < CACHED_DIMS; j++) {
        const int i = tid + j * CACHED_THREADS;
        if (i < HD)
            y[(size_t)r * HD + i] = run_sum > 0.0f ? acc[j] / run_sum : 0.0f;
    }
}

extern "C" void dllm_cuda_kv_append(float *kc, float *vc, uint8_t *cmask, const float *k,
                                    const float *v, const uint8_t *newmask, int B, int T, int len,
                                    int max_len, int KD, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B > 0 && T > 0 && len >= 0 && len + T <= max_len,
                      "%d new slots after %d do not fit %d", T, len, max_len);
    size_t n = (size_t)B * T * KD;
    DLLM_LAUNCH(kv_append_kernel, grid_for(n, 256), 256, 0, as_stream(s))(kc, vc, cmask, k, v,
        newmask, T, len, max_len, KD, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_attention_cached(float *y, const float *q, const float *kc,
                                           const float *vc, const uint8_t *cmask, int B, int T,
                                           int len, int max_len, int NH, int NKV, int HD,
                                           bool causal, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(HD <= CACHED_MAX_HD && NKV > 0 && NH % NKV == 0,
                      "head dim %d (at most %d), %d heads over %d kv heads", HD, CACHED_MAX_HD,
                      NH, NKV);
    DLLM_CUDA_REQUIRE(len + T <= max_len, "%d queries after %d exceed %d slots", T, len, max_len);
    size_t rows = (size_t)B * T * NH;
    if (rows == 0)
        return;
    if (dllm_cuda_attention_tc(HD)) { /* the numerics of the fill's attention_fwd */
        attention_tc_cached(y, NULL, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal,
                            as_stream(s));
        return;
    }
    DLLM_LAUNCH(attention_cached_kernel, (unsigned)rows, CACHED_THREADS, 0, as_stream(s))(y, q,
        kc, vc, cmask, T, len, max_len, NH, NKV, HD, 1.0f / sqrtf((float)HD), causal ? 1 : 0);
    cudaLaunchCheck();
}
