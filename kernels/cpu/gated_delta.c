/* gated_delta.c: CPU references of the Gated DeltaNet ops (kernels/gated_delta.h).
 * Plain loops: the layer's cost on the CPU is its projections (op_linear_fwd); the
 * recurrence is O(T Hv Dk Dv), the size of one more projection. */
#include "kernels/gated_delta.h"
#include "kernels/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float siluf_(float x) { return x * sigmoidf_(x); }
/* d silu / dx */
static inline float dsiluf_(float x)
{
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}
static inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- causal depthwise conv1d + SiLU ----------------------------------------------- */

/* x at row s of sequence b (s may be negative: the state's rows, zeros without one). */
static inline float conv_in(const float *x, const float *state, int b, int s, int d, int T, int D,
                            int K)
{
    if (s >= 0)
        return x[((size_t)b * T + s) * D + d];
    return state ? state[((size_t)b * (K - 1) + (K - 1 + s)) * D + d] : 0.0f;
}

void gd_conv_fwd(float *out, float *pre, float *state_out, const float *x, const float *state,
                 const float *w, int B, int T, int D, int K)
{
    float *tail = NULL;
    if (state_out && K > 1) { /* the last K-1 inputs, gathered before out may overwrite x */
        tail = dllm_malloc((size_t)B * (K - 1) * D * sizeof(float) + 4);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < K - 1; j++)
                for (int d = 0; d < D; d++)
                    tail[((size_t)b * (K - 1) + j) * D + d] =
                        conv_in(x, state, b, T - (K - 1) + j, d, T, D, K);
    }
#pragma omp parallel for collapse(2) if ((long)B * T * D * K > 65536)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                float acc = 0.0f;
                for (int j = 0; j < K; j++)
                    acc += w[(size_t)d * K + j] * conv_in(x, state, b, t - (K - 1) + j, d, T, D, K);
                if (pre)
                    pre[((size_t)b * T + t) * D + d] = acc;
                out[((size_t)b * T + t) * D + d] = siluf_(acc);
            }
    if (tail) {
        memcpy(state_out, tail, (size_t)B * (K - 1) * D * sizeof(float));
        free(tail);
    }
}

void gd_conv_bwd(float *dx, float *dw, float *dstate, const float *dout, const float *pre,
                 const float *x, const float *state, const float *w, int B, int T, int D, int K)
{
    /* one channel's whole history per iteration: no two threads touch the same dw row */
#pragma omp parallel for if ((long)B * T * D * K > 65536)
    for (int d = 0; d < D; d++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t n = ((size_t)b * T + t) * D + d;
                float dp = dout[n] * dsiluf_(pre[n]);
                for (int j = 0; j < K; j++) {
                    int s = t - (K - 1) + j;
                    if (dw)
                        dw[(size_t)d * K + j] += dp * conv_in(x, state, b, s, d, T, D, K);
                    if (s >= 0) {
                        if (dx)
                            dx[((size_t)b * T + s) * D + d] += dp * w[(size_t)d * K + j];
                    } else if (dstate) {
                        dstate[((size_t)b * (K - 1) + (K - 1 + s)) * D + d] +=
                            dp * w[(size_t)d * K + j];
                    }
                }
            }
}

/* ---- L2 normalisation ------------------------------------------------------------------ */

void gd_l2norm_fwd(float *out, float *rnorm, const float *x, int rows, int n, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float ss = 0.0f;
        for (int i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss + eps);
        for (int i = 0; i < n; i++)
            out[(size_t)r * n + i] = xr[i] * inv;
        if (rnorm)
            rnorm[r] = inv;
    }
}

/* out = x r, r = (|x|^2 + eps)^(-1/2):  dx = r (dout - out (out . dout)) */
void gd_l2norm_bwd(float *dx, const float *dout, const float *out, const float *rnorm,
                   int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const float *o = out + (size_t)r * n, *dy = dout + (size_t)r * n;
        float dot = 0.0f;
        for (int i = 0; i < n; i++)
            dot += o[i] * dy[i];
        for (int i = 0; i < n; i++)
            dx[(size_t)r * n + i] += rnorm[r] * (dy[i] - o[i] * dot);
    }
}

/* ---- gates --------------------------------------------------------------------------- */

void gd_gates_fwd(float *g, float *beta, const float *a, const float *b, const float *A_log,
                  const float *dt_bias, int N, int Hv)
{
    for (int n = 0; n < N; n++)
        for (int h = 0; h < Hv; h++) {
            size_t i = (size_t)n * Hv + h;
            g[i] = -expf(A_log[h]) * softplusf_(a[i] + dt_bias[h]);
            beta[i] = sigmoidf_(b[i]);
        }
}

void gd_gates_bwd(float *da, float *db, float *dA_log, float *ddt_bias, const float *dg,
                  const float *dbeta, const float *a, const float *b, const float *A_log,
                  const float *dt_bias, int N, int Hv)
{
    for (int n = 0; n < N; n++)
        for (int h = 0; h < Hv; h++) {
            size_t i = (size_t)n * Hv + h;
            float u = a[i] + dt_bias[h], A = expf(A_log[h]);
            if (dg) {
                float dsp = dg[i] * -A * sigmoidf_(u); /* softplus' = sigmoid */
                if (da)
                    da[i] += dsp;
                if (ddt_bias)
                    ddt_bias[h] += dsp;
                if (dA_log)
                    dA_log[h] += dg[i] * -A * softplusf_(u);
            }
            if (dbeta && db) {
                float s = sigmoidf_(b[i]);
                db[i] += dbeta[i] * s * (1.0f - s);
            }
        }
}

/* ---- the gated delta rule ----------------------------------------------------------- */

/* One value head's token: S (Dk, Dv) in place from its state before the token. */
static void rule_step(float *S, float *o, const float *q, const float *k, const float *v,
                      float g, float beta, float scale, int Dk, int Dv, float *kv)
{
    float decay = expf(g);
    for (int i = 0; i < Dk * Dv; i++)
        S[i] *= decay;
    for (int j = 0; j < Dv; j++)
        kv[j] = 0.0f;
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            kv[j] += k[i] * S[(size_t)i * Dv + j];
    for (int j = 0; j < Dv; j++)
        kv[j] = beta * (v[j] - kv[j]); /* delta */
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            S[(size_t)i * Dv + j] += k[i] * kv[j];
    if (o) {
        for (int j = 0; j < Dv; j++)
            o[j] = 0.0f;
        for (int i = 0; i < Dk; i++)
            for (int j = 0; j < Dv; j++)
                o[j] += scale * q[i] * S[(size_t)i * Dv + j];
    }
}

#define QK_AT(x, b, t, hk) ((x) + (((size_t)(b) * T + (t)) * Hk + (hk)) * Dk)
#define V_AT(x, b, t, h) ((x) + (((size_t)(b) * T + (t)) * Hv + (h)) * Dv)
#define G_AT(x, b, t, h) ((x)[((size_t)(b) * T + (t)) * Hv + (h)])

void gd_rule_recurrent_fwd(float *o, float *state_out, const float *q, const float *k,
                           const float *v, const float *g, const float *beta,
                           const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    int grp = Hv / Hk;
    float scale = 1.0f / sqrtf((float)Dk);
    size_t SS = (size_t)Dk * Dv;
#pragma omp parallel for collapse(2) if ((long)B * Hv * T * SS > 65536)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hv; h++) {
            float *S = dllm_malloc(SS * sizeof(float) + 4), *kv = dllm_malloc((size_t)Dv * 4 + 4);
            if (state_in)
                memcpy(S, state_in + ((size_t)b * Hv + h) * SS, SS * sizeof(float));
            else
                memset(S, 0, SS * sizeof(float));
            for (int t = 0; t < T; t++)
                rule_step(S, V_AT(o, b, t, h), QK_AT(q, b, t, h / grp), QK_AT(k, b, t, h / grp),
                          V_AT(v, b, t, h), G_AT(g, b, t, h), G_AT(beta, b, t, h), scale, Dk, Dv,
                          kv);
            if (state_out)
                memcpy(state_out + ((size_t)b * Hv + h) * SS, S, SS * sizeof(float));
            free(S);
            free(kv);
        }
}

/* One value head, one chunk of n tokens starting at t0, state S (Dk, Dv) in place.
 * gam[i] = g_{t0} + ... + g_{t0+i} (the decay since the chunk's start, in log space).
 * The written values solve (I + A) delta = beta (v - exp(gam) K S), A strictly lower:
 *   A[i][j] = beta_i exp(gam_i - gam_j) (k_i . k_j)    (j < i),
 * then o_i = scale (exp(gam_i) q_i^T S + sum_{j<=i} exp(gam_i - gam_j)(q_i . k_j) delta_j)
 * and S <- exp(gam_n) S + sum_j exp(gam_n - gam_j) k_j delta_j^T. */
static void rule_chunk(float *S, float *o, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, int b, int h, int t0, int n, int T,
                       int Hk, int Dk, int Hv, int Dv, float scale, float *gam, float *delta)
{
    int hk = h / (Hv / Hk);
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += G_AT(g, b, t0 + i, h);
        gam[i] = acc;
    }
    for (int i = 0; i < n; i++) {
        const float *ki = QK_AT(k, b, t0 + i, hk), *vi = V_AT(v, b, t0 + i, h);
        float bi = G_AT(beta, b, t0 + i, h), ei = expf(gam[i]);
        float *di = delta + (size_t)i * Dv;
        for (int j = 0; j < Dv; j++) {
            float ks = 0.0f;
            for (int a = 0; a < Dk; a++)
                ks += ki[a] * S[(size_t)a * Dv + j];
            di[j] = bi * (vi[j] - ei * ks);
        }
        for (int j = 0; j < i; j++) { /* forward substitution */
            const float *kj = QK_AT(k, b, t0 + j, hk);
            float kk = 0.0f;
            for (int a = 0; a < Dk; a++)
                kk += ki[a] * kj[a];
            float c = bi * expf(gam[i] - gam[j]) * kk;
            for (int e = 0; e < Dv; e++)
                di[e] -= c * delta[(size_t)j * Dv + e];
        }
    }
    for (int i = 0; i < n; i++) {
        const float *qi = QK_AT(q, b, t0 + i, hk);
        float *oi = V_AT(o, b, t0 + i, h), ei = expf(gam[i]);
        for (int j = 0; j < Dv; j++) {
            float qs = 0.0f;
            for (int a = 0; a < Dk; a++)
                qs += qi[a] * S[(size_t)a * Dv + j];
            oi[j] = ei * qs;
        }
        for (int j = 0; j <= i; j++) {
            const float *kj = QK_AT(k, b, t0 + j, hk);
            float qk = 0.0f;
            for (int a = 0; a < Dk; a++)
                qk += qi[a] * kj[a];
            float c = expf(gam[i] - gam[j]) * qk;
            for (int e = 0; e < Dv; e++)
                oi[e] += c * delta[(size_t)j * Dv + e];
        }
        for (int e = 0; e < Dv; e++)
            oi[e] *= scale;
    }
    float en = expf(gam[n - 1]);
    for (int a = 0; a < Dk * Dv; a++)
        S[a] *= en;
    for (int j = 0; j < n; j++) {
        const float *kj = QK_AT(k, b, t0 + j, hk);
        float c = expf(gam[n - 1] - gam[j]);
        for (int a = 0; a < Dk; a++)
            for (int e = 0; e < Dv; e++)
                S[(size_t)a * Dv + e] += c * kj[a] * delta[(size_t)j * Dv + e];
    }
}

void gd_rule_chunked_fwd(float *o, float *state_out, const float *q, const float *k,
                         const float *v, const float *g, const float *beta,
                         const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv,
                         int chunk)
{
    float scale = 1.0f / sqrtf((float)Dk);
    size_t SS = (size_t)Dk * Dv;
    if (chunk < 1)
        chunk = 64;
#pragma omp parallel for collapse(2) if ((long)B * Hv * T * SS > 65536)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hv; h++) {
            float *S = dllm_malloc(SS * sizeof(float) + 4);
            float *gam = dllm_malloc((size_t)chunk * sizeof(float) + 4);
            float *delta = dllm_malloc((size_t)chunk * Dv * sizeof(float) + 4);
            if (state_in)
                memcpy(S, state_in + ((size_t)b * Hv + h) * SS, SS * sizeof(float));
            else
                memset(S, 0, SS * sizeof(float));
            for (int t0 = 0; t0 < T; t0 += chunk)
                rule_chunk(S, o, q, k, v, g, beta, b, h, t0, T - t0 < chunk ? T - t0 : chunk, T,
                           Hk, Dk, Hv, Dv, scale, gam, delta);
            if (state_out)
                memcpy(state_out + ((size_t)b * Hv + h) * SS, S, SS * sizeof(float));
            free(S);
            free(gam);
            free(delta);
        }
}

/* Tokens whose states the backward holds at once. */
#define BWD_SEG 64

void gd_rule_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dstate_in,
                 const float *dout, const float *q, const float *k, const float *v,
                 const float *g, const float *beta, const float *state_in, int B, int T,
                 int Hk, int Dk, int Hv, int Dv)
{
    int grp = Hv / Hk, nseg = (T + BWD_SEG - 1) / BWD_SEG;
    float scale = 1.0f / sqrtf((float)Dk);
    size_t SS = (size_t)Dk * Dv;
    /* value heads sharing a key head write the same dq/dk rows: parallel over b and key
     * heads, the value heads of a group in turn */
#pragma omp parallel for collapse(2) if ((long)B * Hv * T * SS > 65536)
    for (int b = 0; b < B; b++)
        for (int hk = 0; hk < Hk; hk++) {
            float *bound = dllm_malloc((size_t)(nseg + 1) * SS * sizeof(float) + 4);
            float *St = dllm_malloc((size_t)(BWD_SEG + 1) * SS * sizeof(float) + 4);
            float *dS = dllm_malloc(SS * sizeof(float) + 4), *kv = dllm_malloc((size_t)Dv * 8 + 8);
            float *dd = kv + Dv;
            for (int h = hk * grp; h < (hk + 1) * grp; h++) {
                /* the states at segment boundaries */
                if (state_in)
                    memcpy(bound, state_in + ((size_t)b * Hv + h) * SS, SS * sizeof(float));
                else
                    memset(bound, 0, SS * sizeof(float));
                for (int s = 0; s < nseg; s++) {
                    memcpy(bound + (s + 1) * SS, bound + s * SS, SS * sizeof(float));
                    for (int t = s * BWD_SEG; t < T && t < (s + 1) * BWD_SEG; t++)
                        rule_step(bound + (s + 1) * SS, NULL, NULL, QK_AT(k, b, t, hk),
                                  V_AT(v, b, t, h), G_AT(g, b, t, h), G_AT(beta, b, t, h), scale,
                                  Dk, Dv, kv);
                }
                memset(dS, 0, SS * sizeof(float));
                for (int s = nseg - 1; s >= 0; s--) {
                    int t0 = s * BWD_SEG, t1 = T < t0 + BWD_SEG ? T : t0 + BWD_SEG;
                    /* St[i] = the state after token t0 + i - 1 (St[0]: the boundary) */
                    memcpy(St, bound + s * SS, SS * sizeof(float));
                    for (int t = t0; t < t1; t++) {
                        memcpy(St + (t - t0 + 1) * SS, St + (t - t0) * SS, SS * sizeof(float));
                        rule_step(St + (t - t0 + 1) * SS, NULL, NULL, QK_AT(k, b, t, hk),
                                  V_AT(v, b, t, h), G_AT(g, b, t, h), G_AT(beta, b, t, h), scale,
                                  Dk, Dv, kv);
                    }
                    for (int t = t1 - 1; t >= t0; t--) {
                        const float *Sp = St + (t - t0) * SS, *Sn = St + (t - t0 + 1) * SS;
                        const float *qt = QK_AT(q, b, t, hk), *kt = QK_AT(k, b, t, hk);
                        const float *vt = V_AT(v, b, t, h), *dot = V_AT(dout, b, t, h);
                        float gt = G_AT(g, b, t, h), bt = G_AT(beta, b, t, h), e = expf(gt);
                        /* o = scale Sn^T q */
                        for (int a = 0; a < Dk; a++) {
                            float s2 = 0.0f;
                            for (int j = 0; j < Dv; j++) {
                                s2 += Sn[(size_t)a * Dv + j] * dot[j];
                                dS[(size_t)a * Dv + j] += scale * qt[a] * dot[j];
                            }
                            if (dq)
                                QK_AT(dq, b, t, hk)[a] += scale * s2;
                        }
                        /* kv = (e Sp)^T k, delta = beta (v - kv), Sn = e Sp + k delta^T */
                        for (int j = 0; j < Dv; j++) {
                            float s1 = 0.0f, s3 = 0.0f;
                            for (int a = 0; a < Dk; a++) {
                                s1 += kt[a] * Sp[(size_t)a * Dv + j];
                                s3 += dS[(size_t)a * Dv + j] * kt[a];
                            }
                            kv[j] = e * s1;
                            dd[j] = s3; /* d delta */
                        }
                        float dbt = 0.0f;
                        for (int j = 0; j < Dv; j++) {
                            float delta = bt * (vt[j] - kv[j]);
                            dbt += dd[j] * (vt[j] - kv[j]);
                            if (dv)
                                V_AT(dv, b, t, h)[j] += bt * dd[j];
                            for (int a = 0; a < Dk; a++)
                                if (dk)
                                    QK_AT(dk, b, t, hk)[a] += dS[(size_t)a * Dv + j] * delta;
                            dd[j] *= -bt; /* now d kv */
                        }
                        if (dbeta)
                            G_AT(dbeta, b, t, h) += dbt;
                        /* d(e Sp) = dS + k dkv^T; dk += (e Sp) dkv */
                        for (int a = 0; a < Dk; a++) {
                            float s4 = 0.0f;
                            for (int j = 0; j < Dv; j++) {
                                s4 += e * Sp[(size_t)a * Dv + j] * dd[j];
                                dS[(size_t)a * Dv + j] += kt[a] * dd[j];
                            }
                            if (dk)
                                QK_AT(dk, b, t, hk)[a] += s4;
                        }
                        float dgt = 0.0f;
                        for (size_t i = 0; i < SS; i++) {
                            dgt += dS[i] * e * Sp[i];
                            dS[i] *= e;
                        }
                        if (dg)
                            G_AT(dg, b, t, h) += dgt;
                    }
                }
                if (dstate_in)
                    for (size_t i = 0; i < SS; i++)
                        dstate_in[((size_t)b * Hv + h) * SS + i] += dS[i];
            }
            free(bound);
            free(St);
            free(dS);
            free(kv);
        }
}

/* ---- gated RMSNorm --------------------------------------------------------------------- */

void gd_gated_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *z,
                          const float *w, int rows, int n, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n;
        float ss = 0.0f;
        for (int i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        float rs = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++)
            out[(size_t)r * n + i] = w[i] * (xr[i] * rs) * siluf_(zr[i]);
        if (rstd)
            rstd[r] = rs;
    }
}

void gd_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dout, const float *x,
                          const float *z, const float *w, const float *rstd, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n, *dy = dout + (size_t)r * n;
        float rs = rstd[r], m = 0.0f;
        for (int i = 0; i < n; i++) {
            float nrm = xr[i] * rs, dn = dy[i] * w[i] * siluf_(zr[i]);
            m += dn * nrm;
            if (dz)
                dz[(size_t)r * n + i] += dy[i] * w[i] * nrm * dsiluf_(zr[i]);
            if (dw)
                dw[i] += dy[i] * nrm * siluf_(zr[i]);
        }
        m /= (float)n;
        if (dx)
            for (int i = 0; i < n; i++) {
                float dn = dy[i] * w[i] * siluf_(zr[i]);
                dx[(size_t)r * n + i] += rs * (dn - xr[i] * rs * m);
            }
    }
}

/* ---- partial RoPE ----------------------------------------------------------------------- */

static void rope_rows(float *out, const float *x, const int32_t *pos, int N, int NH, int HD,
                      int rot, float theta, float sign)
{
    int half = rot / 2;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < half; i++) {
            float inv = 1.0f / powf(theta, (float)(2 * i) / (float)rot);
            float ang = (float)pos[n] * inv, c = cosf(ang), s = sign * sinf(ang);
            for (int h = 0; h < NH; h++) {
                const float *xr = x + ((size_t)n * NH + h) * HD;
                float *orow = out + ((size_t)n * NH + h) * HD;
                float x1 = xr[i], x2 = xr[i + half];
                orow[i] = x1 * c - x2 * s;
                orow[i + half] = x2 * c + x1 * s;
            }
        }
    if (out != x)
        for (int n = 0; n < N * NH; n++)
            memcpy(out + (size_t)n * HD + rot, x + (size_t)n * HD + rot,
                   (size_t)(HD - rot) * sizeof(float));
}

void gd_partial_rope_fwd(float *out, const float *x, const int32_t *pos, int N, int NH, int HD,
                         int rot, float theta)
{
    rope_rows(out, x, pos, N, NH, HD, rot, theta, 1.0f);
}

void gd_partial_rope_bwd(float *dx, const float *dout, const int32_t *pos, int N, int NH,
                         int HD, int rot, float theta)
{
    float *tmp = dllm_malloc((size_t)N * NH * HD * sizeof(float) + 4);
    rope_rows(tmp, dout, pos, N, NH, HD, rot, theta, -1.0f);
    for (size_t i = 0; i < (size_t)N * NH * HD; i++)
        dx[i] += tmp[i];
    free(tmp);
}

/* ---- the output gate ---------------------------------------------------------------------- */

void gd_out_gate_fwd(float *out, const float *x, const float *gate, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] * sigmoidf_(gate[i]);
}

void gd_out_gate_bwd(float *dx, float *dgate, const float *dout, const float *x,
                     const float *gate, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = sigmoidf_(gate[i]);
        if (dgate)
            dgate[i] += dout[i] * x[i] * s * (1.0f - s);
        if (dx)
            dx[i] += dout[i] * s;
    }
}
