/* gated_delta.cu: the Gated DeltaNet ops (kernels/gated_delta.h) on the GPU, with the
 * CPU references' semantics (kernels/cpu/gated_delta.c): forwards overwrite, backwards
 * accumulate, NULL outputs are skipped, state_out may be the input state.
 *
 * Determinism: no float atomics. Every sum has one owner that adds in a fixed order:
 * where the CPU adds sequentially (conv, gates, the gated RMSNorm's dw, the rule's
 * forward and its per-column backward sums) the kernels add in the CPU's order, so under
 * the emulation (no contraction into FMAs) those results are the CPU's bit for bit; sums
 * over a row use block_sum's fixed tree, and the rule's dq, dk, dg sum over columns and
 * heads in another fixed order (rounding differs from the CPU's, not between runs).
 *
 * The gated delta rule is independent per value column j of the state S (Dk, Dv):
 *   S[:,j] *= exp(g);  delta_j = beta (v_j - k . S[:,j]);  S[:,j] += k delta_j;
 *   o_j = scale q . S[:,j]
 * so the forward gives each thread one column, and each block RULE_COLS columns of one
 * (batch, value head), that slice of the state in shared memory (Dk x RULE_COLS fp32:
 * 16 KiB at Qwen3.5's Dk = 128, whatever Dv is). The chunked forward runs this same
 * recurrent kernel: it computes the same function, and agrees with the CPU's chunked
 * form to rounding. The backward follows gd_rule_bwd: the states at segment boundaries
 * (every RULE_SEG tokens), then segment by segment from the last: the segment's states
 * recomputed, the recurrence differentiated token by token backwards. It runs one block
 * per (batch, value head), threads in two roles: thread j owns column j of the states
 * and of dS (all in the caller's scratch), thread a owns row a for the sums over columns
 * (dq, dk). Value heads sharing a key head leave their dq, dk terms in scratch, [B,T,Hv,Dk]
 * each, summed over the group in head order by a second kernel. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_device.h" /* DLLM_GD_RULE_SEG, the backward's scratch size */

enum {
    GD_THREADS = 256,
    GD_ROW_THREADS = 128, /* the norms: one block per row */
    RULE_COLS = 32,       /* forward: state columns per block */
    RULE_SEG = DLLM_GD_RULE_SEG, /* backward: tokens whose states are held at once (the CPU's) */
    RULE_MAX_SMEM = 48 * 1024
};

__device__ __forceinline__ float gd_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float gd_silu(float x) { return x * gd_sigmoid(x); }
__device__ __forceinline__ float gd_dsilu(float x)
{
    float s = gd_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}
__device__ __forceinline__ float gd_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- causal depthwise conv1d + SiLU ------------------------------------------------------ */

/* x at row s of sequence b; s < 0 reads the state (zeros without one). */
__device__ __forceinline__ float conv_in(const float *x, const float *state, int b, int s, int d,
                                         int T, int D, int K)
{
    if (s >= 0)
        return x[((size_t)b * T + s) * D + d];
    return state ? state[((size_t)b * (K - 1) + (K - 1 + s)) * D + d] : 0.0f;
}

__global__ static void conv_fwd_kernel(float *out, float *pre, const float *x, const float *state,
                                       const float *w, int B, int T, int D, int K)
{
    // out, pre (B, T, D); one thread per output, taps in the CPU's order
    size_t n = (size_t)B * T * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D), t = (int)(i / D % T), b = (int)(i / D / T);
        float acc = 0.0f;
        for (int j = 0; j < K; j++)
            acc += w[(size_t)d * K + j] * conv_in(x, state, b, t - (K - 1) + j, d, T, D, K);
        if (pre)
            pre[i] = acc;
        out[i] = gd_silu(acc);
    }
}

/* state_out[b,j,d] = input row T-(K-1)+j. In place (state_out == state) is safe in this
 * order: row j reads state row T + j > j, which no earlier j has written. Runs after the
 * forward, which has read the old state. */
__global__ static void conv_tail_kernel(float *state_out, const float *x, const float *state,
                                        int B, int T, int D, int K)
{
    size_t n = (size_t)B * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D), b = (int)(i / D);
        for (int j = 0; j < K - 1; j++)
            state_out[((size_t)b * (K - 1) + j) * D + d] =
                conv_in(x, state, b, T - (K - 1) + j, d, T, D, K);
    }
}

/* dx[b,s,d] (s >= 0) or dstate[b,K-1+s,d] (s < 0) for s in [-(K-1), T): a gather over the
 * outputs t = s + K-1-j that read it, added in t order (the CPU's). */
__global__ static void conv_dx_kernel(float *dx, float *dstate, const float *dout,
                                      const float *pre, const float *w, int B, int T, int D,
                                      int K)
{
    int S = T + K - 1;
    size_t n = (size_t)B * S * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D), s = (int)(i / D % S) - (K - 1), b = (int)(i / D / S);
        float *dst = s >= 0 ? (dx ? &dx[((size_t)b * T + s) * D + d] : NULL)
                            : (dstate ? &dstate[((size_t)b * (K - 1) + (K - 1 + s)) * D + d]
                                      : NULL);
        if (!dst)
            continue;
        float acc = *dst;
        for (int j = K - 1; j >= 0; j--) {
            int t = s + (K - 1) - j;
            if (t < 0 || t >= T)
                continue;
            size_t o = ((size_t)b * T + t) * D + d;
            float dp = dout[o] * gd_dsilu(pre[o]);
            acc += dp * w[(size_t)d * K + j];
        }
        *dst = acc;
    }
}

/* dw[d,j] += sum over (b, t) in order: one thread per (d, j), adjacent threads adjacent d. */
__global__ static void conv_dw_kernel(float *dw, const float *dout, const float *pre,
                                      const float *x, const float *state, int B, int T, int D,
                                      int K)
{
    size_t n = (size_t)D * K;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D), j = (int)(i / D);
        float acc = dw[(size_t)d * K + j];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)b * T + t) * D + d;
                float dp = dout[o] * gd_dsilu(pre[o]);
                acc += dp * conv_in(x, state, b, t - (K - 1) + j, d, T, D, K);
            }
        dw[(size_t)d * K + j] = acc;
    }
}

/* ---- L2 normalisation ---------------------------------------------------------------------- */

__global__ static void l2norm_fwd_kernel(float *out, float *rnorm, const float *x, int n,
                                         float eps)
{
    // one block per row; in place (out == x) allowed: every read precedes block_sum's barrier
    const float *xr = x + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    float inv = 1.0f / sqrtf(block_sum(ss) + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[(size_t)blockIdx.x * n + i] = xr[i] * inv;
    if (rnorm && threadIdx.x == 0)
        rnorm[blockIdx.x] = inv;
}

__global__ static void l2norm_bwd_kernel(float *dx, const float *dout, const float *out,
                                         const float *rnorm, int n)
{
    size_t off = (size_t)blockIdx.x * n;
    const float *o = out + off, *dy = dout + off;
    float dot = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dot += o[i] * dy[i];
    dot = block_sum(dot);
    float r = rnorm[blockIdx.x];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dx[off + i] += r * (dy[i] - o[i] * dot);
}

/* ---- gates ----------------------------------------------------------------------------------- */

__global__ static void gates_fwd_kernel(float *g, float *beta, const float *a, const float *b,
                                        const float *A_log, const float *dt_bias, int N, int Hv)
{
    size_t n = (size_t)N * Hv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(i % Hv);
        g[i] = -expf(A_log[h]) * gd_softplus(a[i] + dt_bias[h]);
        beta[i] = gd_sigmoid(b[i]);
    }
}

/* The per-element gradients da, db. */
__global__ static void gates_bwd_kernel(float *da, float *db, const float *dg, const float *dbeta,
                                        const float *a, const float *b, const float *A_log,
                                        const float *dt_bias, int N, int Hv)
{
    size_t n = (size_t)N * Hv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(i % Hv);
        if (da && dg) {
            float u = a[i] + dt_bias[h], A = expf(A_log[h]);
            da[i] += dg[i] * -A * gd_sigmoid(u); /* softplus' = sigmoid */
        }
        if (db && dbeta) {
            float s = gd_sigmoid(b[i]);
            db[i] += dbeta[i] * s * (1.0f - s);
        }
    }
}

/* dA_log[h], ddt_bias[h]: sums over the N rows, one thread per head, rows in order. */
__global__ static void gates_head_bwd_kernel(float *dA_log, float *ddt_bias, const float *dg,
                                             const float *a, const float *A_log,
                                             const float *dt_bias, int N, int Hv)
{
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= Hv)
        return;
    float A = expf(A_log[h]);
    float sA = dA_log ? dA_log[h] : 0.0f, sb = ddt_bias ? ddt_bias[h] : 0.0f;
    for (int n = 0; n < N; n++) {
        size_t i = (size_t)n * Hv + h;
        float u = a[i] + dt_bias[h];
        sb += dg[i] * -A * gd_sigmoid(u);
        sA += dg[i] * -A * gd_softplus(u);
    }
    if (dA_log)
        dA_log[h] = sA;
    if (ddt_bias)
        ddt_bias[h] = sb;
}

/* ---- the gated delta rule -------------------------------------------------------------------- */

#define GD_QK(x, b, t, hk) ((x) + (((size_t)(b) * T + (t)) * Hk + (hk)) * Dk)
#define GD_V(x, b, t, h) ((x) + (((size_t)(b) * T + (t)) * Hv + (h)) * Dv)
#define GD_G(x, b, t, h) ((x)[((size_t)(b) * T + (t)) * Hv + (h)])

/* One token on column j of S (rows strided by ld), k in shared memory: rule_step's
 * operations in its order. */
__device__ __forceinline__ void rule_col_step(float *S, int ld, const float *k, float v,
                                              float g, float beta, int Dk)
{
    float decay = expf(g);
    for (int a = 0; a < Dk; a++)
        S[(size_t)a * ld] *= decay;
    float kv = 0.0f;
    for (int a = 0; a < Dk; a++)
        kv += k[a] * S[(size_t)a * ld];
    kv = beta * (v - kv); /* delta */
    for (int a = 0; a < Dk; a++)
        S[(size_t)a * ld] += k[a] * kv;
}

__global__ static void rule_fwd_kernel(float *o, float *state_out, const float *q, const float *k,
                                       const float *v, const float *g, const float *beta,
                                       const float *state_in, int T, int Hk, int Dk, int Hv,
                                       int Dv)
{
    // grid (ceil(Dv / RULE_COLS), Hv, B), block RULE_COLS: thread c owns state column j
    DLLM_DYNAMIC_SHARED(float, smem);
    float *S = smem;                 // (Dk, RULE_COLS): this block's columns of the state
    float *qs = S + (size_t)Dk * RULE_COLS, *ks = qs + Dk; // (Dk) each: the token's q, k
    int b = blockIdx.z, h = blockIdx.y, hk = h / (Hv / Hk), c = threadIdx.x;
    int j = blockIdx.x * RULE_COLS + c;
    bool live = j < Dv;
    float scale = 1.0f / sqrtf((float)Dk);
    size_t SS = (size_t)Dk * Dv, base = ((size_t)b * Hv + h) * SS;
    for (int a = 0; a < Dk; a++)
        S[(size_t)a * RULE_COLS + c] = live && state_in ? state_in[base + (size_t)a * Dv + j] : 0.0f;
    for (int t = 0; t < T; t++) {
        __syncthreads(); /* the previous token's q, k are read */
        for (int a = c; a < Dk; a += blockDim.x) {
            qs[a] = GD_QK(q, b, t, hk)[a];
            ks[a] = GD_QK(k, b, t, hk)[a];
        }
        __syncthreads();
        if (!live)
            continue;
        float *Sc = S + c;
        rule_col_step(Sc, RULE_COLS, ks, GD_V(v, b, t, h)[j], GD_G(g, b, t, h),
                      GD_G(beta, b, t, h), Dk);
        if (o) {
            float acc = 0.0f;
            for (int a = 0; a < Dk; a++)
                acc += scale * qs[a] * Sc[(size_t)a * RULE_COLS];
            GD_V(o, b, t, h)[j] = acc;
        }
    }
    if (state_out && live)
        for (int a = 0; a < Dk; a++)
            state_out[base + (size_t)a * Dv + j] = S[(size_t)a * RULE_COLS + c];
}

/* The backward's scratch, carved per (b, h) = p of B*Hv:
 *   bound (B*Hv, nseg, Dk, Dv)   the state before each segment
 *   st    (B*Hv, L+1, Dk, Dv)    a segment's states (L = min(T, RULE_SEG))
 *   dS    (B*Hv, Dk, Dv)         d loss / d state, carried backwards
 *   dqp, dkp (B, T, Hv, Dk)      each value head's dq, dk terms */
struct rule_scratch {
    float *bound, *st, *dS, *dqp, *dkp;
};

static rule_scratch rule_carve(float *p, int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    (void)Hk;
    size_t SS = (size_t)Dk * Dv, P = (size_t)B * Hv;
    int nseg = (T + RULE_SEG - 1) / RULE_SEG, L = T < RULE_SEG ? T : RULE_SEG;
    rule_scratch r;
    r.bound = p;
    r.st = r.bound + P * nseg * SS;
    r.dS = r.st + P * (L + 1) * SS;
    r.dqp = r.dS + P * SS;
    r.dkp = r.dqp + (size_t)B * T * Hv * Dk;
    return r;
}

__global__ static void rule_bwd_kernel(float *dv, float *dg, float *dbeta, float *dstate_in,
                                       rule_scratch w, const float *dout, const float *q,
                                       const float *k, const float *v, const float *g,
                                       const float *beta, const float *state_in, bool want_dq,
                                       bool want_dk, int T, int Hk, int Dk, int Hv, int Dv)
{
    // grid (Hv, B), block >= max(Dk, Dv): thread x is column x (< Dv) and row x (< Dk)
    DLLM_DYNAMIC_SHARED(float, smem);
    float *ks = smem, *qs = ks + Dk;          // (Dk) the token's k, q
    float *dos = qs + Dk, *del = dos + Dv;    // (Dv) dout_t, delta_t
    float *dkv = del + Dv, *red = dkv + Dv;   // (Dv) d kv_t; (Dv) per-column partial sums
    int b = blockIdx.y, h = blockIdx.x, hk = h / (Hv / Hk), x = threadIdx.x;
    bool col = x < Dv, row = x < Dk;
    float scale = 1.0f / sqrtf((float)Dk);
    size_t SS = (size_t)Dk * Dv, p = (size_t)b * Hv + h;
    int nseg = (T + RULE_SEG - 1) / RULE_SEG, L = T < RULE_SEG ? T : RULE_SEG;
    float *bound = w.bound + p * nseg * SS, *St = w.st + p * (L + 1) * SS, *dS = w.dS + p * SS;

    /* the states at segment boundaries: bound[s] is the state before token s*RULE_SEG */
    if (col)
        for (int a = 0; a < Dk; a++)
            bound[(size_t)a * Dv + x] = state_in ? state_in[p * SS + (size_t)a * Dv + x] : 0.0f;
    for (int s = 0; s + 1 < nseg; s++) {
        float *Sn = bound + (size_t)(s + 1) * SS;
        if (col)
            for (int a = 0; a < Dk; a++)
                Sn[(size_t)a * Dv + x] = bound[(size_t)s * SS + (size_t)a * Dv + x];
        for (int t = s * RULE_SEG; t < (s + 1) * RULE_SEG; t++) {
            __syncthreads();
            for (int a = x; a < Dk; a += blockDim.x)
                ks[a] = GD_QK(k, b, t, hk)[a];
            __syncthreads();
            if (col)
                rule_col_step(Sn + x, Dv, ks, GD_V(v, b, t, h)[x], GD_G(g, b, t, h),
                              GD_G(beta, b, t, h), Dk);
        }
    }
    if (col)
        for (int a = 0; a < Dk; a++)
            dS[(size_t)a * Dv + x] = 0.0f;

    for (int s = nseg - 1; s >= 0; s--) {
        int t0 = s * RULE_SEG, t1 = T < t0 + RULE_SEG ? T : t0 + RULE_SEG;
        /* St[i] = the state after token t0 + i - 1 (St[0]: the boundary) */
        if (col)
            for (int a = 0; a < Dk; a++)
                St[(size_t)a * Dv + x] = bound[(size_t)s * SS + (size_t)a * Dv + x];
        for (int t = t0; t < t1; t++) {
            __syncthreads();
            for (int a = x; a < Dk; a += blockDim.x)
                ks[a] = GD_QK(k, b, t, hk)[a];
            __syncthreads();
            if (col) {
                float *Sp = St + (size_t)(t - t0) * SS, *Sn = Sp + SS;
                for (int a = 0; a < Dk; a++)
                    Sn[(size_t)a * Dv + x] = Sp[(size_t)a * Dv + x];
                rule_col_step(Sn + x, Dv, ks, GD_V(v, b, t, h)[x], GD_G(g, b, t, h),
                              GD_G(beta, b, t, h), Dk);
            }
        }
        for (int t = t1 - 1; t >= t0; t--) {
            const float *Sp = St + (size_t)(t - t0) * SS, *Sn = Sp + SS;
            float gt = GD_G(g, b, t, h), bt = GD_G(beta, b, t, h), e = expf(gt);
            __syncthreads(); /* the previous token's shared values are read */
            for (int a = x; a < Dk; a += blockDim.x) {
                ks[a] = GD_QK(k, b, t, hk)[a];
                qs[a] = GD_QK(q, b, t, hk)[a];
            }
            for (int j = x; j < Dv; j += blockDim.x)
                dos[j] = GD_V(dout, b, t, h)[j];
            __syncthreads();
            /* o = scale Sn^T q:  dq[a] += scale sum_j Sn[a][j] dout[j];  dS += scale q dout^T */
            if (row && want_dq) {
                float s2 = 0.0f;
                for (int j = 0; j < Dv; j++)
                    s2 += Sn[(size_t)x * Dv + j] * dos[j];
                w.dqp[(((size_t)b * T + t) * Hv + h) * Dk + x] = scale * s2;
            }
            if (col) {
                float vj = GD_V(v, b, t, h)[x];
                float s1 = 0.0f, s3 = 0.0f;
                for (int a = 0; a < Dk; a++) {
                    float *ds = &dS[(size_t)a * Dv + x];
                    *ds += scale * qs[a] * dos[x];
                    s1 += ks[a] * Sp[(size_t)a * Dv + x];
                    s3 += *ds * ks[a];
                }
                /* kv = (e Sp)^T k, delta = beta (v - kv) */
                float kv = e * s1, dd = s3; /* dd: d delta */
                del[x] = bt * (vj - kv);
                red[x] = dd * (vj - kv);
                if (dv)
                    GD_V(dv, b, t, h)[x] += bt * dd;
                dkv[x] = dd * -bt; /* d kv */
            }
            __syncthreads();
            /* dk[a] += sum_j dS[a][j] delta_j + sum_j e Sp[a][j] dkv_j */
            if (row && want_dk) {
                float s5 = 0.0f, s4 = 0.0f;
                for (int j = 0; j < Dv; j++) {
                    s5 += dS[(size_t)x * Dv + j] * del[j];
                    s4 += e * Sp[(size_t)x * Dv + j] * dkv[j];
                }
                w.dkp[(((size_t)b * T + t) * Hv + h) * Dk + x] = s5 + s4;
            }
            if (x == 0 && dbeta) {
                float dbt = 0.0f;
                for (int j = 0; j < Dv; j++)
                    dbt += red[j];
                GD_G(dbeta, b, t, h) += dbt;
            }
            __syncthreads(); /* dS and red are read */
            /* d(e Sp) = dS + k dkv^T;  dg += sum dS (e Sp);  dS <- e dS */
            if (col) {
                float dgt = 0.0f;
                for (int a = 0; a < Dk; a++) {
                    float *ds = &dS[(size_t)a * Dv + x];
                    *ds += ks[a] * dkv[x];
                    dgt += *ds * e * Sp[(size_t)a * Dv + x];
                    *ds *= e;
                }
                red[x] = dgt;
            }
            __syncthreads();
            if (x == 0 && dg) {
                float dgt = 0.0f;
                for (int j = 0; j < Dv; j++)
                    dgt += red[j];
                GD_G(dg, b, t, h) += dgt;
            }
        }
    }
    if (dstate_in && col)
        for (int a = 0; a < Dk; a++)
            dstate_in[p * SS + (size_t)a * Dv + x] += dS[(size_t)a * Dv + x];
}

/* dq or dk [B,T,Hk,Dk] += the terms of the value heads of each key head, in head order. */
__global__ static void rule_group_sum_kernel(float *dst, const float *part, int B, int T, int Hk,
                                             int Dk, int Hv)
{
    int grp = Hv / Hk;
    size_t n = (size_t)B * T * Hk * Dk;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int a = (int)(i % Dk);
        size_t bt = i / Dk / Hk;
        int hk = (int)(i / Dk % Hk);
        float acc = 0.0f;
        for (int h = hk * grp; h < (hk + 1) * grp; h++)
            acc += part[(bt * Hv + h) * Dk + a];
        dst[i] += acc;
    }
}

/* ---- gated RMSNorm --------------------------------------------------------------------------- */

__global__ static void gated_rmsnorm_fwd_kernel(float *out, float *rstd, const float *x,
                                                const float *z, const float *w, int n, float eps)
{
    // one block per row; in place (out == x) allowed, as l2norm
    size_t off = (size_t)blockIdx.x * n;
    const float *xr = x + off, *zr = z + off;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    float rs = 1.0f / sqrtf(block_sum(ss) / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[off + i] = w[i] * (xr[i] * rs) * gd_silu(zr[i]);
    if (rstd && threadIdx.x == 0)
        rstd[blockIdx.x] = rs;
}

__global__ static void gated_rmsnorm_bwd_kernel(float *dx, float *dz, const float *dout,
                                                const float *x, const float *z, const float *w,
                                                const float *rstd, int n)
{
    size_t off = (size_t)blockIdx.x * n;
    const float *xr = x + off, *zr = z + off, *dy = dout + off;
    float rs = rstd[blockIdx.x], m = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float nrm = xr[i] * rs, dn = dy[i] * w[i] * gd_silu(zr[i]);
        m += dn * nrm;
        if (dz)
            dz[off + i] += dy[i] * w[i] * nrm * gd_dsilu(zr[i]);
    }
    m = block_sum(m) / (float)n;
    if (dx)
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float dn = dy[i] * w[i] * gd_silu(zr[i]);
            dx[off + i] += rs * (dn - xr[i] * rs * m);
        }
}

/* dw[i] += sum over rows in order: one thread per column. */
__global__ static void gated_rmsnorm_dw_kernel(float *dw, const float *dout, const float *x,
                                               const float *z, const float *rstd, int rows, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float acc = dw[i];
    for (int r = 0; r < rows; r++) {
        size_t o = (size_t)r * n + i;
        float nrm = x[o] * rstd[r];
        acc += dout[o] * nrm * gd_silu(z[o]);
    }
    dw[i] = acc;
}

/* ---- partial RoPE ------------------------------------------------------------------------------ */

/* Per head, items 0 .. half-1 rotate the pair (i, i + half), items half .. half+HD-rot-1 the
 * passed-through dims. Forward (bwd false): out = R x, out = x past rot (skipped in place).
 * Backward: out += R^T x, out += x past rot. Each pair is read before it is written, so
 * out == x is safe either way. */
__global__ static void partial_rope_kernel(float *out, const float *x, const int32_t *pos,
                                           int N, int NH, int HD, int rot, float theta, bool bwd)
{
    int half = rot / 2, W = half + (HD - rot);
    size_t n = (size_t)N * NH * W;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e % W);
        size_t row = e / W; /* n * NH + h */
        const float *xr = x + row * HD;
        float *orow = out + row * HD;
        if (i < half) {
            float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rot);
            float ang = (float)pos[row / NH] * inv, c = cosf(ang);
            float s = (bwd ? -1.0f : 1.0f) * sinf(ang);
            float x1 = xr[i], x2 = xr[i + half];
            float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
            if (bwd) {
                orow[i] += y1;
                orow[i + half] += y2;
            } else {
                orow[i] = y1;
                orow[i + half] = y2;
            }
        } else {
            int d = rot + (i - half);
            if (bwd)
                orow[d] += xr[d];
            else if (out != x)
                orow[d] = xr[d];
        }
    }
}

/* ---- launchers ----------------------------------------------------------------------------------- */

extern "C" void dllm_cuda_gd_conv_fwd(float *out, float *pre, float *state_out, const float *x,
                                      const float *state, const float *w, int B, int T, int D,
                                      int K, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B >= 0 && T >= 0 && D > 0 && K > 0, "bad shape B=%d T=%d D=%d K=%d", B,
                      T, D, K);
    cudaStream_t st = as_stream(s);
    size_t n = (size_t)B * T * D;
    if (n > 0) {
        DLLM_LAUNCH(conv_fwd_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(out, pre, x,
            state, w, B, T, D, K);
        cudaLaunchCheck();
    }
    if (state_out && K > 1 && B > 0) {
        DLLM_LAUNCH(conv_tail_kernel, grid_for((size_t)B * D, GD_THREADS), GD_THREADS, 0, st)(
            state_out, x, state, B, T, D, K);
        cudaLaunchCheck();
    }
}

extern "C" void dllm_cuda_gd_conv_bwd(float *dx, float *dw, float *dstate, const float *dout,
                                      const float *pre, const float *x, const float *state,
                                      const float *w, int B, int T, int D, int K,
                                      dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(B >= 0 && T >= 0 && D > 0 && K > 0, "bad shape B=%d T=%d D=%d K=%d", B,
                      T, D, K);
    if (B == 0 || T == 0)
        return;
    cudaStream_t st = as_stream(s);
    if (dx || (dstate && K > 1)) {
        size_t n = (size_t)B * (T + K - 1) * D;
        DLLM_LAUNCH(conv_dx_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(dx, dstate, dout,
            pre, w, B, T, D, K);
        cudaLaunchCheck();
    }
    if (dw) {
        size_t n = (size_t)D * K;
        DLLM_LAUNCH(conv_dw_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(dw, dout, pre, x,
            state, B, T, D, K);
        cudaLaunchCheck();
    }
}

extern "C" void dllm_cuda_gd_l2norm_fwd(float *out, float *rnorm, const float *x, int rows,
                                        int n, float eps, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(rows >= 0 && n > 0, "bad shape rows=%d n=%d", rows, n);
    if (rows == 0)
        return;
    DLLM_LAUNCH(l2norm_fwd_kernel, rows, GD_ROW_THREADS, 0, as_stream(s))(out, rnorm, x, n, eps);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_l2norm_bwd(float *dx, const float *dout, const float *out,
                                        const float *rnorm, int rows, int n, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(rows >= 0 && n > 0, "bad shape rows=%d n=%d", rows, n);
    if (rows == 0 || !dx)
        return;
    DLLM_LAUNCH(l2norm_bwd_kernel, rows, GD_ROW_THREADS, 0, as_stream(s))(dx, dout, out, rnorm, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_gates_fwd(float *g, float *beta, const float *a, const float *b,
                                       const float *A_log, const float *dt_bias, int N, int Hv,
                                       dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && Hv > 0, "bad shape N=%d Hv=%d", N, Hv);
    size_t n = (size_t)N * Hv;
    if (n == 0)
        return;
    DLLM_LAUNCH(gates_fwd_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, as_stream(s))(g, beta,
        a, b, A_log, dt_bias, N, Hv);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_gates_bwd(float *da, float *db, float *dA_log, float *ddt_bias,
                                       const float *dg, const float *dbeta, const float *a,
                                       const float *b, const float *A_log, const float *dt_bias,
                                       int N, int Hv, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && Hv > 0, "bad shape N=%d Hv=%d", N, Hv);
    size_t n = (size_t)N * Hv;
    if (n == 0)
        return;
    cudaStream_t st = as_stream(s);
    if ((da && dg) || (db && dbeta)) {
        DLLM_LAUNCH(gates_bwd_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(da, db, dg,
            dbeta, a, b, A_log, dt_bias, N, Hv);
        cudaLaunchCheck();
    }
    if (dg && (dA_log || ddt_bias)) {
        DLLM_LAUNCH(gates_head_bwd_kernel, (Hv + 63) / 64, 64, 0, st)(dA_log, ddt_bias, dg, a,
            A_log, dt_bias, N, Hv);
        cudaLaunchCheck();
    }
}

static void rule_check(int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    DLLM_CUDA_REQUIRE(B >= 0 && T >= 0 && Hk > 0 && Dk > 0 && Hv > 0 && Dv > 0 && Hv % Hk == 0,
                      "bad shape B=%d T=%d Hk=%d Dk=%d Hv=%d Dv=%d", B, T, Hk, Dk, Hv, Dv);
    DLLM_CUDA_REQUIRE(B <= 65535 && Hv <= 65535, "B=%d Hv=%d: over the grid limit", B, Hv);
}

static size_t rule_fwd_smem(int Dk) { return ((size_t)Dk * RULE_COLS + 2 * (size_t)Dk) * sizeof(float); }

extern "C" void dllm_cuda_gd_rule_recurrent_fwd(float *o, float *state_out, const float *q,
                                                const float *k, const float *v, const float *g,
                                                const float *beta, const float *state_in, int B,
                                                int T, int Hk, int Dk, int Hv, int Dv,
                                                dllm_cuda_stream s)
{
    rule_check(B, T, Hk, Dk, Hv, Dv);
    size_t smem = rule_fwd_smem(Dk);
    DLLM_CUDA_REQUIRE(smem <= RULE_MAX_SMEM, "Dk=%d: the state slice needs %zu bytes of shared "
                      "memory, over %d", Dk, smem, (int)RULE_MAX_SMEM);
    if (B == 0 || (!o && !state_out))
        return;
    dim3 grid((unsigned)((Dv + RULE_COLS - 1) / RULE_COLS), (unsigned)Hv, (unsigned)B);
    DLLM_LAUNCH(rule_fwd_kernel, grid, RULE_COLS, smem, as_stream(s))(o, state_out, q, k, v, g,
        beta, state_in, T, Hk, Dk, Hv, Dv);
    cudaLaunchCheck();
}

/* The chunked form computes the same function as the recurrent one; on the GPU both run
 * the recurrent kernel (the chunk size is only checked). */
extern "C" void dllm_cuda_gd_rule_chunked_fwd(float *o, float *state_out, const float *q,
                                              const float *k, const float *v, const float *g,
                                              const float *beta, const float *state_in, int B,
                                              int T, int Hk, int Dk, int Hv, int Dv, int chunk,
                                              dllm_cuda_stream s)
{
    (void)chunk; /* < 1 means the default, as on the CPU: every value is valid */
    dllm_cuda_gd_rule_recurrent_fwd(o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv,
                                    Dv, s);
}

static int rule_bwd_threads(int Dk, int Dv)
{
    int m = Dk > Dv ? Dk : Dv;
    return (m + 31) / 32 * 32;
}

extern "C" void dllm_cuda_gd_rule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta,
                                      float *dstate_in, const float *dout, const float *q,
                                      const float *k, const float *v, const float *g,
                                      const float *beta, const float *state_in, int B, int T,
                                      int Hk, int Dk, int Hv, int Dv, float *scratch,
                                      dllm_cuda_stream s)
{
    rule_check(B, T, Hk, Dk, Hv, Dv);
    int threads = rule_bwd_threads(Dk, Dv);
    DLLM_CUDA_REQUIRE(threads <= 1024, "Dk=%d Dv=%d: over 1024 threads a block", Dk, Dv);
    size_t smem = (2 * (size_t)Dk + 4 * (size_t)Dv) * sizeof(float);
    DLLM_CUDA_REQUIRE(smem <= RULE_MAX_SMEM, "Dk=%d Dv=%d: %zu bytes of shared memory", Dk, Dv,
                      smem);
    if (B == 0 || T == 0 || (!dq && !dk && !dv && !dg && !dbeta && !dstate_in))
        return;
    DLLM_CUDA_REQUIRE(scratch, "a scratch of %zu floats is required",
                      dllm_cuda_gd_rule_bwd_scratch_floats(B, T, Hk, Dk, Hv, Dv));
    cudaStream_t st = as_stream(s);
    rule_scratch w = rule_carve(scratch, B, T, Hk, Dk, Hv, Dv);
    dim3 grid((unsigned)Hv, (unsigned)B);
    DLLM_LAUNCH(rule_bwd_kernel, grid, threads, smem, st)(dv, dg, dbeta, dstate_in, w, dout, q, k,
        v, g, beta, state_in, dq != NULL, dk != NULL, T, Hk, Dk, Hv, Dv);
    cudaLaunchCheck();
    size_t n = (size_t)B * T * Hk * Dk;
    if (dq) {
        DLLM_LAUNCH(rule_group_sum_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(dq, w.dqp,
            B, T, Hk, Dk, Hv);
        cudaLaunchCheck();
    }
    if (dk) {
        DLLM_LAUNCH(rule_group_sum_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, st)(dk, w.dkp,
            B, T, Hk, Dk, Hv);
        cudaLaunchCheck();
    }
}

extern "C" void dllm_cuda_gd_gated_rmsnorm_fwd(float *out, float *rstd, const float *x,
                                               const float *z, const float *w, int rows, int n,
                                               float eps, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(rows >= 0 && n > 0, "bad shape rows=%d n=%d", rows, n);
    if (rows == 0)
        return;
    DLLM_LAUNCH(gated_rmsnorm_fwd_kernel, rows, GD_ROW_THREADS, 0, as_stream(s))(out, rstd, x, z,
        w, n, eps);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dout,
                                               const float *x, const float *z, const float *w,
                                               const float *rstd, int rows, int n,
                                               dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(rows >= 0 && n > 0, "bad shape rows=%d n=%d", rows, n);
    if (rows == 0)
        return;
    cudaStream_t st = as_stream(s);
    if (dx || dz) {
        DLLM_LAUNCH(gated_rmsnorm_bwd_kernel, rows, GD_ROW_THREADS, 0, st)(dx, dz, dout, x, z, w,
            rstd, n);
        cudaLaunchCheck();
    }
    if (dw) {
        DLLM_LAUNCH(gated_rmsnorm_dw_kernel, (n + GD_THREADS - 1) / GD_THREADS, GD_THREADS, 0,
                    st)(dw, dout, x, z, rstd, rows, n);
        cudaLaunchCheck();
    }
}

static void rope_check(int N, int NH, int HD, int rot)
{
    DLLM_CUDA_REQUIRE(N >= 0 && NH > 0 && HD > 0 && rot >= 0 && rot <= HD && rot % 2 == 0,
                      "bad shape N=%d NH=%d HD=%d rot=%d", N, NH, HD, rot);
}

extern "C" void dllm_cuda_gd_partial_rope_fwd(float *out, const float *x, const int32_t *pos,
                                              int N, int NH, int HD, int rot, float theta,
                                              dllm_cuda_stream s)
{
    rope_check(N, NH, HD, rot);
    size_t n = (size_t)N * NH * (rot / 2 + HD - rot);
    if (n == 0)
        return;
    DLLM_LAUNCH(partial_rope_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, as_stream(s))(out, x,
        pos, N, NH, HD, rot, theta, false);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_partial_rope_bwd(float *dx, const float *dout, const int32_t *pos,
                                              int N, int NH, int HD, int rot, float theta,
                                              dllm_cuda_stream s)
{
    rope_check(N, NH, HD, rot);
    size_t n = (size_t)N * NH * (rot / 2 + HD - rot);
    if (n == 0)
        return;
    DLLM_LAUNCH(partial_rope_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, as_stream(s))(dx,
        dout, pos, N, NH, HD, rot, theta, true);
    cudaLaunchCheck();
}

/* ---- the output gate: out = x sigmoid(gate); the backward accumulates, in the CPU's
 * association ((dout x) s) (1 - s) and dout s ---- */
__global__ static void out_gate_fwd_kernel(float *out, const float *x, const float *gate, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fmul_rn(x[i], gd_sigmoid(gate[i]));
}

__global__ static void out_gate_bwd_kernel(float *dx, float *dgate, const float *dout,
                                           const float *x, const float *gate, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = gd_sigmoid(gate[i]);
        if (dgate)
            dgate[i] = __fadd_rn(dgate[i], __fmul_rn(__fmul_rn(__fmul_rn(dout[i], x[i]), s),
                                                     1.0f - s));
        if (dx)
            dx[i] = __fadd_rn(dx[i], __fmul_rn(dout[i], s));
    }
}

extern "C" void dllm_cuda_gd_out_gate_fwd(float *out, const float *x, const float *gate,
                                          size_t n, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(out_gate_fwd_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, as_stream(s))(out,
        x, gate, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_gd_out_gate_bwd(float *dx, float *dgate, const float *dout,
                                          const float *x, const float *gate, size_t n,
                                          dllm_cuda_stream s)
{
    if (n == 0 || (!dx && !dgate))
        return;
    DLLM_LAUNCH(out_gate_bwd_kernel, grid_for(n, GD_THREADS), GD_THREADS, 0, as_stream(s))(dx,
        dgate, dout, x, gate, n);
    cudaLaunchCheck();
}
