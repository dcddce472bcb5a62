/* attention_tc.cu: scaled dot-product attention on tensor cores (BF16 operands, fp32
 * accumulation and softmax statistics), forward and backward, bidirectional or causal,
 * key padding mask, grouped-query heads: the same contract and the same launches as the
 * fp32 kernels of attention.cu (kernels/cuda_ops.h), which stay the reference and serve
 * head dims above 128 and DLLM_CUDA_ATTENTION=fp32 (dllm_cuda_attention_tc).
 *
 * FlashAttention-2's scheme on the warp matrix functions (nvcuda::wmma, m16n16k16 bf16
 * fragments, fp32 accumulators). A block owns a tile of 32 rows (query rows in the
 * forward and dq kernels, key rows in the dk/dv kernel) and walks the 32-row tiles of the
 * other side; its 4 warps each compute one 16x16 quarter of the 32x32 score tile. The
 * fragment layout is opaque, so everything a row needs (max, sum, masks, the softmax
 * rescale of the output) is done by threads on fp32 tiles in shared memory between
 * barriers; products re-enter the tensor cores as bf16 tiles. Per tile:
 *   forward   S = Q K^T (wmma) -> 4 threads per row: online softmax over S, P = e^(S-m)
 *             as bf16, O rows rescaled by e^(m_old - m) -> O += P V (wmma; O in shared)
 *   dq        S = Q K^T, dP = dO V^T (wmma) -> dS = P (dP - D) scale as bf16 ->
 *             dQ += dS K (wmma; dQ in fragments for the whole walk)
 *   dk/dv     S, dP as above for a tile of queries against the block's keys ->
 *             dV += P^T dO, dK += dS^T Q (wmma, transposes as column-major loads;
 *             dK, dV in fragments), over every query head of the kv head's group
 * The tile of the block's own rows (Q and dO, or K and V) is rounded to bf16 once and held
 * in fragments; the walked tiles are rounded to bf16 as they are loaded from the fp32
 * tensors. Every gradient element still has one writer: deterministic, no atomics.
 *
 * Numerics against the fp32 kernels: Q, K, V, dO, P and dS are rounded to bf16 (8
 * significant bits); products are exact and sums fp32. The test suite bounds the
 * normalised squared error against fp32 (ATT_TC_NMSE, kernels/backend_cases.h: 3e-5 for
 * out, 3e-4 for dq, dk, dv; typical 1e-5 and 2e-5).
 *
 * Register use (nvcc 13, -Xptxas -v, sm_90, head dims 16/32/64/128): forward 56/56/64/96
 * registers, dq 56/72/122/166, dk/dv 72/96/128/232 (K, V fragments and dK, dV
 * accumulators of a 128-dim tile: two blocks of 4 warps per SM at most; nothing spilled
 * but 4 bytes at head dim 32); static shared memory 41.5 KB at most (forward,
 * head dim 128), within the 48 KB a launch gets without opting in. Not tuned: output and
 * scores round-trip through shared memory and the tiles are small; the point is the
 * tensor-core rate and a path CI runs (the emulation's wmma, kernels/cuda_emu/README.md). */
#include "kernels/cuda/attention_tc.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <mma.h>
#else
#include "kernels/cuda_emu/wmma_emu.h"
#endif

namespace wmma = nvcuda::wmma;
typedef __nv_bfloat16 bf16;

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> frag_a_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

/* Shared tiles: strides padded (8 bf16, 4 floats) against bank conflicts; every tile and
 * every 16x16 sub-tile starts 32-byte aligned and every stride is a multiple of 16 bytes,
 * as wmma requires. */
template <int HDP> struct TcCfg {
    static constexpr int R = 32;                /* rows of a tile (queries or keys) */
    static constexpr int THREADS = 128;         /* 4 warps: one 16x16 score quarter each */
    static constexpr int LDH = HDP + 8;         /* bf16 [R][HDP] tiles */
    static constexpr int LDS = R + 4;           /* fp32 [R][R] score tiles */
    static constexpr int LDP = R + 8;           /* bf16 [R][R] probability tiles */
    static constexpr int LDO = HDP + 4;         /* fp32 [R][HDP] output tiles */
    static constexpr int KT = HDP / 16;         /* 16-deep steps over the head dim */
    static constexpr int OT = 2 * HDP / 16;     /* 16x16 tiles of an [R][HDP] output */
    static constexpr int OPW = OT >= 4 ? OT / 4 : 1; /* of them per warp */
    static constexpr size_t H_BYTES = (size_t)R * LDH * 2, S_BYTES = (size_t)R * LDS * 4,
                            P_BYTES = (size_t)R * LDP * 2, O_BYTES = (size_t)R * LDO * 4;
    static_assert(H_BYTES % 32 == 0 && S_BYTES % 32 == 0 && P_BYTES % 32 == 0 &&
                  O_BYTES % 32 == 0, "32-byte aligned tiles");
};

/* Rows [r0, r0+R) of x [B,T,NH_,HD] at head hh into a bf16 tile [R][LDH], zeros past T and
 * past HD; rotated by rp (row b*T + s at its position) before the rounding when rp.pos is
 * set: the fp32 value the RoPE kernel would have written. */
template <int HDP>
__device__ __forceinline__ void load_bf16_tile(bf16 *tile, const float *x, int b, int r0, int T,
                                               int NH_, int hh, int HD,
                                               const rope_in &rp = rope_in())
{
    typedef TcCfg<HDP> C;
    for (int e = threadIdx.x; e < C::R * HDP; e += blockDim.x) {
        int j = e / HDP, d = e % HDP, s = r0 + j;
        float val = 0.0f;
        if (s < T && d < HD) {
            const float *row = x + (((size_t)b * T + s) * NH_ + hh) * HD;
            val = rp.pos ? rope_elem(row, d, HD, rp.pos[(size_t)b * T + s], rp) : row[d];
        }
        tile[j * C::LDH + d] = __float2bfloat16_rn(val);
    }
}

/* The [16][HDP] row block rb of a bf16 tile as KT fragments: operand A row-major (the
 * tile's rows are the product's rows) or operand B column-major (the tile transposed). */
template <int HDP>
__device__ __forceinline__ void rows_as_a(frag_a_row *f, const bf16 *tile, int rb)
{
#pragma unroll
    for (int kk = 0; kk < TcCfg<HDP>::KT; kk++)
        wmma::load_matrix_sync(f[kk], tile + rb * 16 * TcCfg<HDP>::LDH + kk * 16,
                               TcCfg<HDP>::LDH);
}
template <int HDP>
__device__ __forceinline__ void rows_as_bt(frag_b_col *f, const bf16 *tile, int rb)
{
#pragma unroll
    for (int kk = 0; kk < TcCfg<HDP>::KT; kk++)
        wmma::load_matrix_sync(f[kk], tile + rb * 16 * TcCfg<HDP>::LDH + kk * 16,
                               TcCfg<HDP>::LDH);
}

/* acc = A_rows (16 x HDP, fragments) times the transpose of rows cb of tile (16 x HDP). */
template <int HDP>
__device__ __forceinline__ void dot_rows(frag_acc &acc, const frag_a_row *a, const bf16 *tile,
                                         int cb)
{
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < TcCfg<HDP>::KT; kk++) {
        frag_b_col bt;
        wmma::load_matrix_sync(bt, tile + cb * 16 * TcCfg<HDP>::LDH + kk * 16, TcCfg<HDP>::LDH);
        wmma::mma_sync(acc, a[kk], bt, acc);
    }
}

/* acc = rows rb of tile (16 x HDP) times B (HDP x 16, fragments of a transposed tile). */
template <int HDP>
__device__ __forceinline__ void dot_cols(frag_acc &acc, const bf16 *tile, int rb,
                                         const frag_b_col *bt)
{
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < TcCfg<HDP>::KT; kk++) {
        frag_a_row a;
        wmma::load_matrix_sync(a, tile + rb * 16 * TcCfg<HDP>::LDH + kk * 16, TcCfg<HDP>::LDH);
        wmma::mma_sync(acc, a, bt[kk], acc);
    }
}

/* Sum and max over the 4 consecutive threads that share a row. */
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

template <int HDP>
__global__ static void __launch_bounds__(TcCfg<HDP>::THREADS)
attention_tc_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                        const uint8_t *keymask, int T, int Tk, int q_off, int NH, int NKV,
                        int HD, bool causal, float scale, rope_in rp)
{
    /* T query rows [B,T,NH,HD] over Tk key rows [B,Tk,NKV,HD] (keymask [B,Tk]); query t
     * sits at key position q_off + t (causal: it sees keys s <= q_off + t). Self-attention
     * is Tk = T, q_off = 0; a key/value cache's is Tk = its slots, q_off = its length.
     * rp.pos set: queries and keys rotated as they are loaded (self-attention only). */
    typedef TcCfg<HDP> C;
    __shared__ __align__(32) unsigned char smem[2 * C::H_BYTES + C::S_BYTES + C::P_BYTES +
                                                C::O_BYTES + 32];
    bf16 *Ks = (bf16 *)smem, *Vs = (bf16 *)(smem + C::H_BYTES);          /* [R][LDH] */
    float *Ss = (float *)(smem + 2 * C::H_BYTES);                         /* [R][LDS] */
    bf16 *Ps = (bf16 *)(smem + 2 * C::H_BYTES + C::S_BYTES);              /* [R][LDP] */
    float *Os = (float *)(smem + 2 * C::H_BYTES + C::S_BYTES + C::P_BYTES); /* [R][LDO] */
    bool *vis = (bool *)(smem + 2 * C::H_BYTES + C::S_BYTES + C::P_BYTES + C::O_BYTES);
    const int warp = threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * C::R, kh = h / (NH / NKV);
    const int r = threadIdx.x / 4, part = threadIdx.x % 4; /* softmax: 4 threads per row */
    const int t = q0 + r;
    const int rb = warp / 2, cb = warp % 2; /* this warp's quarter of the score tile */

    /* the block's queries as fragments, staged through the K tile */
    load_bf16_tile<HDP>(Ks, q, b, q0, T, NH, h, HD, rp);
    for (int e = threadIdx.x; e < C::R * C::LDO; e += blockDim.x)
        Os[e] = 0.0f;
    __syncthreads();
    frag_a_row qf[C::KT];
    rows_as_a<HDP>(qf, Ks, rb);

    float m = -INFINITY, l = 0.0f; /* this row's running max and sum (same in its 4 threads) */
    const int kend = causal ? min(Tk, q_off + q0 + C::R) : Tk;
    for (int k0 = 0; k0 < kend; k0 += C::R) {
        __syncthreads(); /* the previous tiles (and the staged queries) are no longer read */
        load_bf16_tile<HDP>(Ks, k, b, k0, Tk, NKV, kh, HD, rp);
        load_bf16_tile<HDP>(Vs, v, b, k0, Tk, NKV, kh, HD);
        for (int j = threadIdx.x; j < C::R; j += blockDim.x) {
            int s = k0 + j;
            vis[j] = s < Tk && (!keymask || keymask[(size_t)b * Tk + s]);
        }
        __syncthreads();
        frag_acc sf;
        dot_rows<HDP>(sf, qf, Ks, cb);
        wmma::store_matrix_sync(Ss + rb * 16 * C::LDS + cb * 16, sf, C::LDS, wmma::mem_row_major);
        __syncthreads();
        /* online softmax of row r over this tile's keys part*8 .. part*8+7 */
        float sc[8], tmax = -INFINITY;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int j = part * 8 + i;
            bool ok = vis[j] && (!causal || k0 + j <= q_off + t);
            sc[i] = ok ? Ss[r * C::LDS + j] * scale : -INFINITY;
            tmax = fmaxf(tmax, sc[i]);
        }
        const float mnew = fmaxf(m, quad_max(tmax));
        const float corr = (m == -INFINITY || mnew == -INFINITY) ? 0.0f : expf(m - mnew);
        float psum = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float p = sc[i] == -INFINITY ? 0.0f : expf(sc[i] - mnew);
            psum += p;
            Ps[r * C::LDP + part * 8 + i] = __float2bfloat16_rn(p);
        }
        l = l * corr + quad_sum(psum);
        m = mnew;
        for (int d = part; d < HDP; d += 4)
            Os[r * C::LDO + d] *= corr;
        __syncthreads();
        /* O += P V over this warp's output tiles */
        for (int i = 0; i < C::OPW; i++) {
            int ot = warp + 4 * i;
            if (ot >= C::OT)
                break;
            int orb = ot % 2, ocb = ot / 2;
            frag_acc of;
            wmma::load_matrix_sync(of, Os + orb * 16 * C::LDO + ocb * 16, C::LDO,
                                   wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < C::R / 16; kk++) {
                frag_a_row pa;
                frag_b_row vb;
                wmma::load_matrix_sync(pa, Ps + orb * 16 * C::LDP + kk * 16, C::LDP);
                wmma::load_matrix_sync(vb, Vs + kk * 16 * C::LDH + ocb * 16, C::LDH);
                wmma::mma_sync(of, pa, vb, of);
            }
            wmma::store_matrix_sync(Os + orb * 16 * C::LDO + ocb * 16, of, C::LDO,
                                    wmma::mem_row_major);
        }
    }
    __syncthreads();
    if (t >= T)
        return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = part; d < HD; d += 4)
        out[(((size_t)b * T + t) * NH + h) * HD + d] = Os[r * C::LDO + d] * inv;
    if (lse && part == 0) /* NULL: inference, no backward will need it */
        lse[((size_t)b * NH + h) * T + t] = l > 0.0f ? m + logf(l) : -INFINITY;
}

/* The [R][HDP] fp32 result of a walk, accumulated in this warp's output fragments, added
 * into x [B,T,NH_,HD] rows r0.. at head hh through the staging tile Xs [R][LDO], or
 * written there (write); rp.pos set: each row first rotated back by its angle (the RoPE
 * kernel's backward, sin negated: the gradient of the unrotated row). */
template <int HDP>
__device__ __forceinline__ void add_rows(float *x, float *Xs, const frag_acc *acc, int b, int r0,
                                         int T, int NH_, int hh, int HD,
                                         const rope_in &rp = rope_in(), bool write = false)
{
    typedef TcCfg<HDP> C;
    const int warp = threadIdx.x / 32;
    for (int i = 0; i < C::OPW; i++) {
        int ot = warp + 4 * i;
        if (ot < C::OT)
            wmma::store_matrix_sync(Xs + (ot % 2) * 16 * C::LDO + (ot / 2) * 16, acc[i], C::LDO,
                                    wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C::R * HDP; e += blockDim.x) {
        int j = e / HDP, d = e % HDP, s = r0 + j;
        if (s >= T || d >= HD)
            continue;
        const float *row = Xs + j * C::LDO;
        float val = row[d];
        if (rp.pos) {
            const int p = rp.pos[(size_t)b * T + s], half = HD / 2, i = d < half ? d : d - half;
            if (p < 0 || p >= rp.max_pos) {
                val = NAN;
            } else {
                const float c = rp.cos[(size_t)p * half + i], sn = -rp.sin[(size_t)p * half + i];
                val = d < half ? rope_first(row[i], row[i + half], c, sn)
                               : rope_second(row[i], row[i + half], c, sn);
            }
        }
        float *o = x + (((size_t)b * T + s) * NH_ + hh) * HD + d;
        *o = write ? val : *o + val;
    }
}

template <int HDP>
__global__ static void __launch_bounds__(TcCfg<HDP>::THREADS)
attention_tc_bwd_dq_kernel(float *dq, const float *dout, const float *lse, const float *Dd,
                           const float *q, const float *k, const float *v,
                           const uint8_t *keymask, int T, int NH, int NKV, int HD, bool causal,
                           float scale, rope_in rp, bool write)
{
    typedef TcCfg<HDP> C;
    __shared__ __align__(32) unsigned char smem[2 * C::H_BYTES + 2 * C::S_BYTES + C::P_BYTES +
                                                3 * C::R * 4 + 32];
    static_assert(2 * C::H_BYTES >= C::O_BYTES, "dQ is staged in the K and V tiles");
    bf16 *Ks = (bf16 *)smem, *Vs = (bf16 *)(smem + C::H_BYTES);           /* [R][LDH] */
    float *Ss = (float *)(smem + 2 * C::H_BYTES);                          /* [R][LDS] */
    float *dPs = (float *)(smem + 2 * C::H_BYTES + C::S_BYTES);            /* [R][LDS] */
    bf16 *dSs = (bf16 *)(smem + 2 * C::H_BYTES + 2 * C::S_BYTES);          /* [R][LDP] */
    float *Ls = (float *)(smem + 2 * C::H_BYTES + 2 * C::S_BYTES + C::P_BYTES); /* [R] */
    float *Ds = Ls + C::R;                                                  /* [R] */
    bool *vis = (bool *)(Ds + C::R);                                        /* [R] */
    const int warp = threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * C::R, kh = h / (NH / NKV);
    const int r = threadIdx.x / 4, part = threadIdx.x % 4;
    const int rb = warp / 2, cb = warp % 2;

    /* the block's queries and output gradients as fragments, staged through K and V */
    load_bf16_tile<HDP>(Ks, q, b, q0, T, NH, h, HD, rp);
    load_bf16_tile<HDP>(Vs, dout, b, q0, T, NH, h, HD);
    for (int j = threadIdx.x; j < C::R; j += blockDim.x) {
        int t = q0 + j;
        Ls[j] = t < T ? lse[((size_t)b * NH + h) * T + t] : -INFINITY;
        Ds[j] = t < T ? Dd[((size_t)b * NH + h) * T + t] : 0.0f;
    }
    __syncthreads();
    frag_a_row qf[C::KT], gf[C::KT];
    rows_as_a<HDP>(qf, Ks, rb);
    rows_as_a<HDP>(gf, Vs, rb);
    frag_acc acc[C::OPW];
    for (int i = 0; i < C::OPW; i++)
        wmma::fill_fragment(acc[i], 0.0f);

    const int t = q0 + r;
    const float L = Ls[r], Dr = Ds[r];
    const int kend = causal ? min(T, q0 + C::R) : T;
    for (int k0 = 0; k0 < kend; k0 += C::R) {
        __syncthreads();
        load_bf16_tile<HDP>(Ks, k, b, k0, T, NKV, kh, HD, rp);
        load_bf16_tile<HDP>(Vs, v, b, k0, T, NKV, kh, HD);
        for (int j = threadIdx.x; j < C::R; j += blockDim.x) {
            int s = k0 + j;
            vis[j] = s < T && (!keymask || keymask[(size_t)b * T + s]);
        }
        __syncthreads();
        frag_acc sf, pf;
        dot_rows<HDP>(sf, qf, Ks, cb);
        dot_rows<HDP>(pf, gf, Vs, cb);
        wmma::store_matrix_sync(Ss + rb * 16 * C::LDS + cb * 16, sf, C::LDS, wmma::mem_row_major);
        wmma::store_matrix_sync(dPs + rb * 16 * C::LDS + cb * 16, pf, C::LDS,
                                wmma::mem_row_major);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int j = part * 8 + i;
            bool ok = vis[j] && (!causal || k0 + j <= t) && L != -INFINITY;
            float P = ok ? expf(Ss[r * C::LDS + j] * scale - L) : 0.0f;
            dSs[r * C::LDP + j] = __float2bfloat16_rn(P * (dPs[r * C::LDS + j] - Dr) * scale);
        }
        __syncthreads();
        /* dQ += dS K */
        for (int i = 0; i < C::OPW; i++) {
            int ot = warp + 4 * i;
            if (ot >= C::OT)
                break;
            int orb = ot % 2, ocb = ot / 2;
#pragma unroll
            for (int kk = 0; kk < C::R / 16; kk++) {
                frag_a_row sa;
                frag_b_row kb;
                wmma::load_matrix_sync(sa, dSs + orb * 16 * C::LDP + kk * 16, C::LDP);
                wmma::load_matrix_sync(kb, Ks + kk * 16 * C::LDH + ocb * 16, C::LDH);
                wmma::mma_sync(acc[i], sa, kb, acc[i]);
            }
        }
    }
    __syncthreads(); /* the K and V tiles become dQ's staging */
    add_rows<HDP>(dq, (float *)smem, acc, b, q0, T, NH, h, HD, rp, write);
}

template <int HDP>
__global__ static void __launch_bounds__(TcCfg<HDP>::THREADS)
attention_tc_bwd_dkv_kernel(float *dk, float *dv, const float *dout, const float *lse,
                            const float *Dd, const float *q, const float *k, const float *v,
                            const uint8_t *keymask, int T, int NH, int NKV, int HD, bool causal,
                            float scale, rope_in rp, bool write)
{
    typedef TcCfg<HDP> C;
    __shared__ __align__(32) unsigned char smem[2 * C::H_BYTES + 2 * C::S_BYTES +
                                                2 * C::P_BYTES + 3 * C::R * 4 + 32];
    static_assert(2 * C::H_BYTES >= C::O_BYTES, "dK, dV are staged in the Q and dO tiles");
    bf16 *Qs = (bf16 *)smem, *Gs = (bf16 *)(smem + C::H_BYTES);           /* [R][LDH] */
    float *Ss = (float *)(smem + 2 * C::H_BYTES);                          /* [R][LDS] */
    float *dPs = (float *)(smem + 2 * C::H_BYTES + C::S_BYTES);            /* [R][LDS] */
    bf16 *Ps = (bf16 *)(smem + 2 * C::H_BYTES + 2 * C::S_BYTES);           /* [R][LDP] */
    bf16 *dSs = (bf16 *)(smem + 2 * C::H_BYTES + 2 * C::S_BYTES + C::P_BYTES);
    float *Ls = (float *)(smem + 2 * C::H_BYTES + 2 * C::S_BYTES + 2 * C::P_BYTES); /* [R] */
    float *Ds = Ls + C::R;                                                  /* [R] */
    bool *kvis = (bool *)(Ds + C::R);                                       /* [R] */
    const int warp = threadIdx.x / 32, kh = blockIdx.y, b = blockIdx.z;
    const int s0 = blockIdx.x * C::R, group = NH / NKV;
    const int r = threadIdx.x / 4, part = threadIdx.x % 4; /* r: a query row of the tile */
    const int rb = warp / 2, cb = warp % 2; /* score quarter: queries rb, keys cb */

    /* the block's keys and values as transposed operands, staged through Q and dO */
    load_bf16_tile<HDP>(Qs, k, b, s0, T, NKV, kh, HD, rp);
    load_bf16_tile<HDP>(Gs, v, b, s0, T, NKV, kh, HD);
    for (int j = threadIdx.x; j < C::R; j += blockDim.x) {
        int s = s0 + j;
        kvis[j] = s < T && (!keymask || keymask[(size_t)b * T + s]);
    }
    __syncthreads();
    frag_b_col kf[C::KT], vf[C::KT];
    rows_as_bt<HDP>(kf, Qs, cb);
    rows_as_bt<HDP>(vf, Gs, cb);
    frag_acc dka[C::OPW], dva[C::OPW];
    for (int i = 0; i < C::OPW; i++) {
        wmma::fill_fragment(dka[i], 0.0f);
        wmma::fill_fragment(dva[i], 0.0f);
    }

    /* causal: queries before the block's first key see none of its keys */
    const int t_begin = causal ? s0 : 0;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int t0 = t_begin; t0 < T; t0 += C::R) {
            __syncthreads(); /* the previous tiles (and the staged keys) are no longer read */
            load_bf16_tile<HDP>(Qs, q, b, t0, T, NH, h, HD, rp);
            load_bf16_tile<HDP>(Gs, dout, b, t0, T, NH, h, HD);
            for (int j = threadIdx.x; j < C::R; j += blockDim.x) {
                int t = t0 + j;
                Ls[j] = t < T ? lse[((size_t)b * NH + h) * T + t] : -INFINITY;
                Ds[j] = t < T ? Dd[((size_t)b * NH + h) * T + t] : 0.0f;
            }
            __syncthreads();
            frag_acc sf, pf;
            dot_cols<HDP>(sf, Qs, rb, kf);
            dot_cols<HDP>(pf, Gs, rb, vf);
            wmma::store_matrix_sync(Ss + rb * 16 * C::LDS + cb * 16, sf, C::LDS,
                                    wmma::mem_row_major);
            wmma::store_matrix_sync(dPs + rb * 16 * C::LDS + cb * 16, pf, C::LDS,
                                    wmma::mem_row_major);
            __syncthreads();
            const int t = t0 + r;
            const float L = Ls[r], Dr = Ds[r];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int j = part * 8 + i;
                bool ok = kvis[j] && (!causal || s0 + j <= t) && L != -INFINITY;
                float P = ok ? expf(Ss[r * C::LDS + j] * scale - L) : 0.0f;
                Ps[r * C::LDP + j] = __float2bfloat16_rn(P);
                dSs[r * C::LDP + j] =
                    __float2bfloat16_rn(P * (dPs[r * C::LDS + j] - Dr) * scale);
            }
            __syncthreads();
            /* dV += P^T dO, dK += dS^T Q: P and dS read column-major are their transposes */
            for (int i = 0; i < C::OPW; i++) {
                int ot = warp + 4 * i;
                if (ot >= C::OT)
                    break;
                int orb = ot % 2, ocb = ot / 2;
#pragma unroll
                for (int kk = 0; kk < C::R / 16; kk++) {
                    frag_a_col pa, sa;
                    frag_b_row gb, qb;
                    wmma::load_matrix_sync(pa, Ps + kk * 16 * C::LDP + orb * 16, C::LDP);
                    wmma::load_matrix_sync(gb, Gs + kk * 16 * C::LDH + ocb * 16, C::LDH);
                    wmma::mma_sync(dva[i], pa, gb, dva[i]);
                    wmma::load_matrix_sync(sa, dSs + kk * 16 * C::LDP + orb * 16, C::LDP);
                    wmma::load_matrix_sync(qb, Qs + kk * 16 * C::LDH + ocb * 16, C::LDH);
                    wmma::mma_sync(dka[i], sa, qb, dka[i]);
                }
            }
        }
    }
    __syncthreads(); /* the Q and dO tiles become the staging of dK, then of dV */
    if (dk)
        add_rows<HDP>(dk, (float *)smem, dka, b, s0, T, NKV, kh, HD, rp, write);
    __syncthreads();
    if (dv)
        add_rows<HDP>(dv, (float *)smem, dva, b, s0, T, NKV, kh, HD, rope_in(), write);
}

template <int HDP>
static void tc_fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v,
                          const uint8_t *keymask, int B, int T, int Tk, int q_off, int NH,
                          int NKV, int HD, bool causal, rope_in rp, cudaStream_t st)
{
    typedef TcCfg<HDP> C;
    dim3 grid((T + C::R - 1) / C::R, NH, B);
    DLLM_LAUNCH(attention_tc_fwd_kernel<HDP>, grid, C::THREADS, 0, st)(out, lse, q, k, v, keymask,
        T, Tk, q_off, NH, NKV, HD, causal, 1.0f / sqrtf((float)HD), rp);
    cudaLaunchCheck();
}

template <int HDP>
static void tc_bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                          const float *Dd, const float *q, const float *k, const float *v,
                          const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                          bool causal, rope_in rp, bool write, cudaStream_t st)
{
    typedef TcCfg<HDP> C;
    float scale = 1.0f / sqrtf((float)HD);
    if (dq) {
        dim3 grid((T + C::R - 1) / C::R, NH, B);
        DLLM_LAUNCH(attention_tc_bwd_dq_kernel<HDP>, grid, C::THREADS, 0, st)(dq, dout, lse, Dd,
            q, k, v, keymask, T, NH, NKV, HD, causal, scale, rp, write);
        cudaLaunchCheck();
    }
    if (dk || dv) {
        dim3 grid((T + C::R - 1) / C::R, NKV, B);
        DLLM_LAUNCH(attention_tc_bwd_dkv_kernel<HDP>, grid, C::THREADS, 0, st)(dk, dv, dout, lse,
            Dd, q, k, v, keymask, T, NH, NKV, HD, causal, scale, rp, write);
        cudaLaunchCheck();
    }
}

/* Head dims are padded to 16, 32, 64 or 128 (dllm_cuda_attention_tc admits HD <= 128). */
static int tc_padded_hd(int HD)
{
    int h = 16;
    while (h < HD)
        h *= 2;
    return h;
}

static void tc_fwd(float *out, float *lse, const float *q, const float *kc, const float *vc,
                   const uint8_t *cmask, int B, int T, int max_len, int len, int NH, int NKV,
                   int HD, bool causal, rope_in rp, cudaStream_t st)
{
    switch (tc_padded_hd(HD)) {
    case 16: tc_fwd_launch<16>(out, lse, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal, rp, st); break;
    case 32: tc_fwd_launch<32>(out, lse, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal, rp, st); break;
    case 64: tc_fwd_launch<64>(out, lse, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal, rp, st); break;
    default: tc_fwd_launch<128>(out, lse, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal, rp, st); break;
    }
}

void attention_tc_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal,
                      cudaStream_t st)
{
    tc_fwd(out, lse, q, k, v, keymask, B, T, T, 0, NH, NKV, HD, causal, rope_in(), st);
}

void attention_tc_rope_fwd(float *out, float *lse, const float *q, const float *k,
                           const float *v, const uint8_t *keymask, int B, int T, int NH, int NKV,
                           int HD, bool causal, rope_in rp, cudaStream_t st)
{
    tc_fwd(out, lse, q, k, v, keymask, B, T, T, 0, NH, NKV, HD, causal, rp, st);
}

void attention_tc_cached(float *out, float *lse, const float *q, const float *kc, const float *vc,
                         const uint8_t *cmask, int B, int T, int max_len, int len, int NH,
                         int NKV, int HD, bool causal, cudaStream_t st)
{
    tc_fwd(out, lse, q, kc, vc, cmask, B, T, max_len, len, NH, NKV, HD, causal, rope_in(), st);
}

void attention_tc_rope_bwd(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                           const float *Dd, const float *q, const float *k, const float *v,
                           const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                           bool causal, rope_in rp, bool write, cudaStream_t st)
{
    switch (tc_padded_hd(HD)) {
    case 16: tc_bwd_launch<16>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, write, st); break;
    case 32: tc_bwd_launch<32>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, write, st); break;
    case 64: tc_bwd_launch<64>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, write, st); break;
    default: tc_bwd_launch<128>(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal, rp, write, st); break;
    }
}

void attention_tc_bwd(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                      const float *Dd, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal,
                      cudaStream_t st)
{
    attention_tc_rope_bwd(dq, dk, dv, dout, lse, Dd, q, k, v, keymask, B, T, NH, NKV, HD, causal,
                          rope_in(), false, st);
}
