/* attention.c: scaled dot-product attention, bidirectional or causal, with a
 * key padding mask and grouped-query heads (head h reads kv head h / (NH/NKV)).
 *
 * Forward, per (b, h, t), over the visible keys s (keymask[b,s] != 0, and
 * s <= t when causal):
 *   S[s] = q.k[s] / sqrt(HD),  P = softmax(S) (fp32, max subtracted),
 *   out = sum_s P[s] v[s].
 * Invisible keys get P = 0; a query with no visible key outputs zeros.
 * att [B,NH,T,T] keeps P for the backward, which needs nothing else about the
 * mask: P = 0 entries contribute nothing.
 * Backward (accumulated):
 *   dv[s] += P[s] dout,  dP[s] = dout.v[s],  dS = P * (dP - sum_s dP P),
 *   dq += scale * sum_s dS[s] k[s],  dk[s] += scale * dS[s] q. */
#include "kernels/ops.h"
#include "kernels/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN 4096 /* in units of T*T*HD per (b, h) */

void op_attention_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal)
{
    // out, q (B, T, NH, HD); k, v (B, T, NKV, HD); att (B, NH, T, T); keymask (B, T) or NULL
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    long rows = (long)B * NH * T;
    bool par = (double)rows * T * HD > PAR_MIN;
#pragma omp parallel for if (par) schedule(dynamic, 16)
    for (long r = 0; r < rows; r++) {
        int t = (int)(r % T);
        int h = (int)((r / T) % NH);
        int b = (int)(r / ((long)T * NH));
        int kh = h / group;
        const float *qr = q + (((size_t)b * T + t) * NH + h) * HD;
        float *p = att + (((size_t)b * NH + h) * T + t) * T;
        float *o = out + (((size_t)b * T + t) * NH + h) * HD;
        const uint8_t *km = keymask ? keymask + (size_t)b * T : NULL;
        int send = causal ? t + 1 : T; /* keys [0, send) may be visible */

        float maxv = -INFINITY;
        int nvis = 0;
        for (int s = 0; s < T; s++) {
            if (s >= send || (km && !km[s])) {
                p[s] = -INFINITY;
                continue;
            }
            const float *kr = k + (((size_t)b * T + s) * NKV + kh) * HD;
            float dot = 0.0f;
            for (int i = 0; i < HD; i++)
                dot += qr[i] * kr[i];
            dot *= scale;
            p[s] = dot;
            if (dot > maxv)
                maxv = dot;
            nvis++;
        }
        memset(o, 0, (size_t)HD * sizeof(float));
        if (nvis == 0) {
            memset(p, 0, (size_t)T * sizeof(float));
            continue;
        }
        float sum = 0.0f;
        for (int s = 0; s < T; s++) {
            float e = p[s] == -INFINITY ? 0.0f : expf(p[s] - maxv);
            p[s] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int s = 0; s < T; s++) {
            if (p[s] == 0.0f)
                continue;
            p[s] *= inv;
            const float *vr = v + (((size_t)b * T + s) * NKV + kh) * HD;
            for (int i = 0; i < HD; i++)
                o[i] += p[s] * vr[i];
        }
    }
}

void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *att,
                      const float *q, const float *k, const float *v,
                      int B, int T, int NH, int NKV, int HD)
{
    // dq, dout, q (B, T, NH, HD); dk, dv, k, v (B, T, NKV, HD); att (B, NH, T, T)
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    long units = (long)B * NKV;
    bool par = units > 1 && (double)B * NH * T * T * HD > PAR_MIN;
    /* One thread owns a (b, kv head) and every query head that shares it, so
     * dk/dv (shared across the group) and dq are written without races, in a
     * fixed order whatever the thread count. */
#pragma omp parallel if (par)
    {
        float *ds = dllm_malloc((size_t)T * sizeof(float)); /* dS row */
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < units; u++) {
            int b = (int)(u / NKV), kh = (int)(u % NKV);
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                    const float *go = dout + (((size_t)b * T + t) * NH + h) * HD;
                    const float *qr = q + (((size_t)b * T + t) * NH + h) * HD;
                    /* dP and its P-weighted row sum */
                    float rowdot = 0.0f;
                    for (int s = 0; s < T; s++) {
                        if (p[s] == 0.0f) {
                            ds[s] = 0.0f;
                            continue;
                        }
                        const float *vr = v + (((size_t)b * T + s) * NKV + kh) * HD;
                        float dp = 0.0f;
                        for (int i = 0; i < HD; i++)
                            dp += go[i] * vr[i];
                        ds[s] = dp;
                        rowdot += dp * p[s];
                    }
                    float *dqr = dq ? dq + (((size_t)b * T + t) * NH + h) * HD : NULL;
                    for (int s = 0; s < T; s++) {
                        if (p[s] == 0.0f)
                            continue;
                        float g = p[s] * (ds[s] - rowdot) * scale; /* dS * scale */
                        size_t kvoff = (((size_t)b * T + s) * NKV + kh) * HD;
                        if (dqr) {
                            const float *kr = k + kvoff;
                            for (int i = 0; i < HD; i++)
                                dqr[i] += g * kr[i];
                        }
                        if (dk) {
                            float *dkr = dk + kvoff;
                            for (int i = 0; i < HD; i++)
                                dkr[i] += g * qr[i];
                        }
                        if (dv) {
                            float *dvr = dv + kvoff;
                            for (int i = 0; i < HD; i++)
                                dvr[i] += p[s] * go[i];
                        }
                    }
                }
            }
        }
        free(ds);
    }
}
