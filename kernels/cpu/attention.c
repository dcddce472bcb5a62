/* attention.c: scaled dot-product attention, bidirectional or causal, with a
 * key padding mask and grouped-query heads (head h reads kv head h / (NH/NKV)).
 *
 * Per (b, h), with Q [T,HD], K, V [T,HD] the head's rows (strided views of the
 * interleaved [B,T,NH,HD] / [B,T,NKV,HD] buffers, never copied):
 *   S = Q K^T / sqrt(HD)                                   (GEMM)
 *   P = softmax over the visible keys of each row (keymask[b,s] != 0, and
 *       s <= t when causal), invisible keys P = 0; a row with no visible
 *       key is all zeros, so its output is zero
 *   out = P V                                               (GEMM)
 * att [B,NH,T,T] keeps P for the backward, which needs nothing else about the
 * mask: P = 0 entries contribute nothing.
 * Backward (accumulated), per (b, h):
 *   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP))   (GEMMs + a row pass)
 *   dQ += scale dS K,  dK += scale dS^T Q.
 * rowsum(P * dP) equals rowsum(dO * O); it is taken from P and dP because the
 * output is not an argument of the backward.
 *
 * Threads: OpenMP splits the (b, head) units; each unit runs its GEMMs on one
 * thread (OpenBLAS is held at one thread meanwhile), on the library op_gemm uses
 * (DLLM_GEMM: OpenBLAS by default, or oneDNN), so a unit's result does
 * not depend on the thread count nor on the rest of the batch. In the
 * backward one unit is a (b, kv head) with every query head of its group, so
 * dk/dv are written without races. */
#include "kernels/ops.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vec_kernel.h"
#include "kernels/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many multiply-adds in total, thread start-up costs more than it saves. */
#define PAR_MIN 262144.0

static int n_threads(bool par)
{
#ifdef _OPENMP
    return par && !omp_in_parallel() ? omp_get_max_threads() : 1;
#else
    (void)par;
    return 1;
#endif
}

/* The row passes are compiled for AVX2+FMA and the baseline (vec_kernel.h; the
 * default flags target the baseline only). */

/* exp(x) for x <= 0 in a form the compiler vectorises: 2^n * e^r with
 * n = round(x / ln 2), |r| <= ln2 / 2, e^r by Cephes' degree-6 polynomial
 * (about 1 ulp). Below -87.3 (where expf leaves the normal range) it returns
 * 0, which is also exp(-inf), the value of a masked score. */
VEC_INLINE float exp_nonpos(float x)
{
    const float big = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.3f ? -87.3f : x;
    float n = (xc * 1.44269504f + big) - big;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x < -87.3f ? 0.0f : y * two_n;
}

/* Softmax of one score row in place over the visible keys: s < send and
 * (km == NULL or km[s] != 0). Invisible entries become 0; if nothing is
 * visible the whole row is 0. */
VEC_KERNEL(void, softmax_row, (float *restrict p, int T, int send, const uint8_t *restrict km),
           (p, T, send, km))
{
    float maxv = -INFINITY;
    if (km) {
#pragma omp simd
        for (int s = 0; s < send; s++)
            p[s] = km[s] ? p[s] : -INFINITY;
    }
#pragma omp simd reduction(max : maxv)
    for (int s = 0; s < send; s++)
        maxv = p[s] > maxv ? p[s] : maxv;
    for (int s = send; s < T; s++)
        p[s] = 0.0f;
    if (maxv == -INFINITY) { /* no visible key */
        memset(p, 0, (size_t)send * sizeof(float));
        return;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int s = 0; s < send; s++) {
        float e = exp_nonpos(p[s] - maxv); /* masked: exp(-inf) = 0 */
        p[s] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int s = 0; s < send; s++)
        p[s] *= inv;
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
/* q[s] = exp_nonpos(q[s] - maxv) over a row, sixteen lanes at a time, with the bits
 * of exp_nonpos as the optimised AVX2 build of softmax_row computes it (the same
 * operations and the same fused multiply-adds, in the same order; GCC leaves that loop
 * scalar). Other builds (-O1 forms no fused multiply-adds) fail exp_row_fast's check
 * and keep the scalar loop. */
__attribute__((target("avx512f"))) static void exp_row_avx512(float *restrict q, int T,
                                                                float maxv)
{
    const __m512 m = _mm512_set1_ps(maxv), lim = _mm512_set1_ps(-87.3f);
    const __m512 big = _mm512_set1_ps(12582912.0f), l2e = _mm512_set1_ps(1.44269504f);
    const __m512 c1 = _mm512_set1_ps(0.693359375f), c2 = _mm512_set1_ps(2.12194440e-4f);
    const __m512 p0 = _mm512_set1_ps(1.9875691500e-4f), p1 = _mm512_set1_ps(1.3981999507e-3f);
    const __m512 p2 = _mm512_set1_ps(8.3334519073e-3f), p3 = _mm512_set1_ps(4.1665795894e-2f);
    const __m512 p4 = _mm512_set1_ps(1.6666665459e-1f), p5 = _mm512_set1_ps(5.0000001201e-1f);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int s = 0; s < T; s += 16) {
        __mmask16 k = T - s >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (T - s)) - 1);
        __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, q + s), m);
        __mmask16 under = _mm512_cmp_ps_mask(x, lim, _CMP_LT_OQ);
        __m512 xc = _mm512_mask_mov_ps(x, under, lim);
        __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, l2e, big), big);
        __m512 r = _mm512_fnmadd_ps(n, c1, xc);
        r = _mm512_fmadd_ps(n, c2, r);
        __m512 y = _mm512_fmadd_ps(r, p0, p1);
        y = _mm512_fmadd_ps(y, r, p2);
        y = _mm512_fmadd_ps(y, r, p3);
        y = _mm512_fmadd_ps(y, r, p4);
        y = _mm512_fmadd_ps(y, r, p5);
        y = _mm512_add_ps(_mm512_fmadd_ps(r, _mm512_mul_ps(r, y), r), one);
        __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n),
                                                          _mm512_set1_epi32(127)), 23);
        y = _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
        _mm512_mask_storeu_ps(q + s, k, _mm512_maskz_mov_ps((__mmask16)~under, y));
    }
}
/* The scalar form the vector one must reproduce: exp_nonpos as this build compiles it
 * (fused multiply-adds where the optimiser forms them: -O2, not -O1). */
VEC_KERNEL(void, exp_row_scalar, (float *restrict q, int T, float maxv),
           (q, T, maxv))
{
#pragma omp simd
    for (int s = 0; s < T; s++)
        q[s] = exp_nonpos(q[s] - maxv);
}

/* The vector path runs only where it gives this build's scalar bits: checked once on a
 * spread of scores (differences from the row maximum in [-100, 0], -inf included). */
static bool exp_row_fast(void)
{
    /* threads that meet it first may all run the check: each on its own buffers, and
     * all store the same answer */
    static int on = -1;
    int v = __atomic_load_n(&on, __ATOMIC_ACQUIRE);
    if (v < 0) {
        int ok = cpu_has(CPU_AVX512F) && cpu_has(CPU_FMA);
        enum { NS = 1027 };
        float a[NS], b[NS];
        for (int i = 0; ok && i < NS; i++)
            a[i] = i == 7 ? -INFINITY : -100.0f * (float)((i * 2654435761u) % 65536u) / 65536.0f;
        if (ok) {
            memcpy(b, a, sizeof a);
            exp_row_scalar(a, NS, 0.0f);
            exp_row_avx512(b, NS, 0.0f);
            ok = memcmp(a, b, sizeof a) == 0;
        }
        v = ok;
        __atomic_store_n(&on, v, __ATOMIC_RELEASE);
    }
    return v;
}
#define EXP_ROW_AVX512 1
#endif

/* softmax_row over nr rows of T with the same visible keys (no causal limit), with the
 * same bits: the masking, the maximum and the exponentials are elementwise (vectorised
 * here), and each row's sum still runs key by key from the first; the sums of RB rows
 * advance together, so the additions of one row no longer wait on each other (the
 * single sum's latency chain was most of softmax_row's time). */
VEC_KERNEL(void, softmax_rows, (float *restrict p, int nr, int T, const uint8_t *restrict km),
           (p, nr, T, km))
{
    enum { RB = 8 };
    for (int r0 = 0; r0 < nr; r0 += RB) {
        int nb = nr - r0 < RB ? nr - r0 : RB;
        float sum[RB] = {0};
        bool live[RB] = {0};
        for (int j = 0; j < nb; j++) {
            float *restrict q = p + (size_t)(r0 + j) * T;
            float maxv = -INFINITY;
            if (km) {
#pragma omp simd
                for (int s = 0; s < T; s++)
                    q[s] = km[s] ? q[s] : -INFINITY;
            }
#pragma omp simd reduction(max : maxv)
            for (int s = 0; s < T; s++)
                maxv = q[s] > maxv ? q[s] : maxv;
            if (maxv == -INFINITY) { /* no visible key */
                memset(q, 0, (size_t)T * sizeof(float));
                continue;
            }
            live[j] = true;
#ifdef EXP_ROW_AVX512
            if (exp_row_fast()) {
                exp_row_avx512(q, T, maxv);
                continue;
            }
#endif
#pragma omp simd
            for (int s = 0; s < T; s++)
                q[s] = exp_nonpos(q[s] - maxv); /* masked: exp(-inf) = 0 */
        }
        for (int s = 0; s < T; s++)
            for (int j = 0; j < nb; j++)
                sum[j] += p[(size_t)(r0 + j) * T + s];
        for (int j = 0; j < nb; j++) {
            if (!live[j])
                continue;
            float *restrict q = p + (size_t)(r0 + j) * T;
            float inv = 1.0f / sum[j];
#pragma omp simd
            for (int s = 0; s < T; s++)
                q[s] *= inv;
        }
    }
}

/* dS = scale * P * (dP - rowsum(P * dP)) for the rows of one head, in place
 * over dP. */
VEC_KERNEL(void, softmax_bwd_rows, (float *restrict ds, const float *restrict p, int T, float scale),
           (ds, p, T, scale))
{
    for (int t = 0; t < T; t++) {
        const float *restrict pr = p + (size_t)t * T;
        float *restrict dr = ds + (size_t)t * T;
        float rowdot = 0.0f;
#pragma omp simd reduction(+ : rowdot)
        for (int s = 0; s < T; s++)
            rowdot += pr[s] * dr[s];
#pragma omp simd
        for (int s = 0; s < T; s++)
            dr[s] = scale * pr[s] * (dr[s] - rowdot);
    }
}

void op_attention_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal)
{
    // out, q (B, T, NH, HD); k, v (B, T, NKV, HD); att (B, NH, T, T); keymask (B, T) or NULL
    if (B <= 0 || T <= 0 || NH <= 0)
        return;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    int ldq = NH * HD, ldk = NKV * HD;
    long units = (long)B * NH;
    bool par = units > 1 && 2.0 * units * T * T * HD > PAR_MIN;
    int nt = n_threads(par);
    int saved = blas_hold();
#pragma omp parallel for if (nt > 1) schedule(dynamic, 1)
    for (long u = 0; u < units; u++) {
        int b = (int)(u / NH), h = (int)(u % NH), kh = h / group;
        const float *qh = q + (size_t)b * T * ldq + (size_t)h * HD;  // (T, HD) stride ldq
        const float *kb = k + (size_t)b * T * ldk + (size_t)kh * HD; // (T, HD) stride ldk
        const float *vb = v + (size_t)b * T * ldk + (size_t)kh * HD; // (T, HD) stride ldk
        float *oh = out + (size_t)b * T * ldq + (size_t)h * HD;      // (T, HD) stride ldq
        float *p = att + (size_t)u * T * T;                          // (T, T)
        const uint8_t *km = keymask ? keymask + (size_t)b * T : NULL;
        if (HD > 0)
            gemm_serial(false, true, T, T, HD, scale, qh, ldq, kb,
                        ldk, 0.0f, p, T);
        else
            memset(p, 0, (size_t)T * T * sizeof(float));
        if (causal)
            for (int t = 0; t < T; t++)
                softmax_row(p + (size_t)t * T, T, t + 1, km);
        else
            softmax_rows(p, T, T, km);
        if (HD > 0)
            gemm_serial(false, false, T, HD, T, 1.0f, p, T, vb, ldk,
                        0.0f, oh, ldq);
    }
    blas_release(saved);
}

void op_attention_kv_fwd(float *out, const float *q, const float *k, const float *v,
                         const uint8_t *keymask, int B, int Tq, int Tk, int NH, int NKV, int HD)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0)
        return;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    int ldq = NH * HD, ldk = NKV * HD;
    long units = (long)B * NH;
    bool par = units > 1 && 2.0 * units * Tq * Tk * HD > PAR_MIN;
    int nt = n_threads(par);
    int saved = blas_hold();
#pragma omp parallel if (nt > 1)
    {
        float *p = dllm_malloc(sizeof *p * (size_t)Tq * Tk); // (Tq, Tk) one unit's scores
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < units; u++) {
            int b = (int)(u / NH), h = (int)(u % NH), kh = h / group;
            const float *qh = q + (size_t)b * Tq * ldq + (size_t)h * HD;  // (Tq, HD) stride ldq
            const float *kb = k + (size_t)b * Tk * ldk + (size_t)kh * HD; // (Tk, HD) stride ldk
            const float *vb = v + (size_t)b * Tk * ldk + (size_t)kh * HD; // (Tk, HD) stride ldk
            float *oh = out + (size_t)b * Tq * ldq + (size_t)h * HD;      // (Tq, HD) stride ldq
            const uint8_t *km = keymask ? keymask + (size_t)b * Tk : NULL;
            if (HD > 0)
                gemm_serial(false, true, Tq, Tk, HD, scale, qh, ldq, kb, ldk, 0.0f, p, Tk);
            else
                memset(p, 0, (size_t)Tq * Tk * sizeof(float));
            softmax_rows(p, Tq, Tk, km);
            if (HD > 0)
                gemm_serial(false, false, Tq, HD, Tk, 1.0f, p, Tk, vb, ldk, 0.0f, oh, ldq);
        }
        free(p);
    }
    blas_release(saved);
}

void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *att,
                      const float *q, const float *k, const float *v,
                      int B, int T, int NH, int NKV, int HD)
{
    // dq, dout, q (B, T, NH, HD); dk, dv, k, v (B, T, NKV, HD); att (B, NH, T, T)
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0 || (!dq && !dk && !dv))
        return;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    int ldq = NH * HD, ldk = NKV * HD;
    long units = (long)B * NKV;
    bool par = units > 1 && 4.0 * B * NH * T * T * HD > PAR_MIN;
    int nt = n_threads(par);
    int saved = blas_hold();
#pragma omp parallel if (nt > 1)
    {
        float *ds = (dq || dk) ? dllm_malloc((size_t)T * T * sizeof(float)) : NULL; /* dP, dS */
#pragma omp for schedule(dynamic, 1)
        for (long u = 0; u < units; u++) {
            int b = (int)(u / NKV), kh = (int)(u % NKV);
            const float *kb = k + (size_t)b * T * ldk + (size_t)kh * HD; // (T, HD) stride ldk
            const float *vb = v + (size_t)b * T * ldk + (size_t)kh * HD;
            float *dkb = dk ? dk + (size_t)b * T * ldk + (size_t)kh * HD : NULL;
            float *dvb = dv ? dv + (size_t)b * T * ldk + (size_t)kh * HD : NULL;
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                size_t qoff = (size_t)b * T * ldq + (size_t)h * HD; // (T, HD) stride ldq
                const float *p = att + ((size_t)b * NH + h) * T * T; // (T, T)
                const float *go = dout + qoff;
                if (dvb) /* dV += P^T dO */
                    gemm_serial(true, false, T, HD, T, 1.0f, p, T,
                                go, ldq, 1.0f, dvb, ldk);
                if (!ds)
                    continue;
                /* dP = dO V^T, then dS = scale * P * (dP - rowsum(P * dP)) in place */
                gemm_serial(false, true, T, T, HD, 1.0f, go, ldq, vb,
                            ldk, 0.0f, ds, T);
                softmax_bwd_rows(ds, p, T, scale);
                if (dq) /* dQ += dS K */
                    gemm_serial(false, false, T, HD, T, 1.0f, ds, T,
                                kb, ldk, 1.0f, dq + qoff, ldq);
                if (dkb) /* dK += dS^T Q */
                    gemm_serial(true, false, T, HD, T, 1.0f, ds, T,
                                q + qoff, ldq, 1.0f, dkb, ldk);
            }
        }
        free(ds);
    }
    blas_release(saved);
}

/* ---- the key/value cache (the table's kv_append and attention_cached) ------------------ */

void op_kv_append(float *kc, float *vc, uint8_t *cmask, const float *k, const float *v,
                  const uint8_t *newmask, int B, int T, int len, int max_len, int KD)
{
    for (int b = 0; b < B; b++) {
        size_t dst = ((size_t)b * max_len + (size_t)len) * KD, src = (size_t)b * T * KD;
        memcpy(kc + dst, k + src, (size_t)T * KD * sizeof(float));
        memcpy(vc + dst, v + src, (size_t)T * KD * sizeof(float));
        for (int t = 0; cmask && t < T; t++)
            cmask[(size_t)b * max_len + len + t] = newmask ? newmask[(size_t)b * T + t] != 0 : 1;
    }
}

/* Causal attention over the cache for row r (b, t, h) of the queries: the visible slots'
 * scores, their softmax and the weighted values in plain loops; p (len + T) scratch. */
static void cached_row(float *y, const float *q, const float *kc, const float *vc,
                       const uint8_t *cmask, long r, int T, int len, int max_len, int NH,
                       int NKV, int HD, float *p)
{
    const int KD = NKV * HD, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    int h = (int)(r % NH), t = (int)((r / NH) % T), b = (int)(r / ((long)NH * T));
    int kh = h / group, send = len + t + 1; /* causal: slots [0, send) */
    const float *qr = q + r * HD;
    float *o = y + r * HD;
    const uint8_t *km = cmask ? cmask + (size_t)b * max_len : NULL;
    float maxv = -INFINITY;
    int nvis = 0;
    for (int s = 0; s < send; s++) {
        if (km && !km[s]) {
            p[s] = -INFINITY;
            continue;
        }
        const float *kr = kc + ((size_t)b * max_len + s) * KD + (size_t)kh * HD;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++)
            dot += qr[i] * kr[i];
        dot *= scale;
        p[s] = dot;
        maxv = dot > maxv ? dot : maxv;
        nvis++;
    }
    memset(o, 0, (size_t)HD * sizeof(float));
    if (nvis == 0)
        return;
    float sum = 0.0f;
    for (int s = 0; s < send; s++) {
        float e = p[s] == -INFINITY ? 0.0f : expf(p[s] - maxv);
        p[s] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int s = 0; s < send; s++) {
        if (p[s] == 0.0f)
            continue;
        float ps = p[s] * inv;
        const float *vr = vc + ((size_t)b * max_len + s) * KD + (size_t)kh * HD;
        for (int i = 0; i < HD; i++)
            o[i] += ps * vr[i];
    }
}

/* Causal: one query row and head at a time (the decoding step's shapes are too thin for
 * the GEMMs), threads over the rows where the work pays for them; bidirectional:
 * op_attention_kv_fwd over all max_len slots. */
void op_attention_cached(float *y, const float *q, const float *kc, const float *vc,
                         const uint8_t *cmask, int B, int T, int len, int max_len, int NH,
                         int NKV, int HD, bool causal)
{
    if (!causal) {
        op_attention_kv_fwd(y, q, kc, vc, cmask, B, T, max_len, NH, NKV, HD);
        return;
    }
    long rows = (long)B * T * NH;
    if (rows * (len + T) * HD <= 65536) { /* a decoding step: no thread team */
        float *p = dllm_malloc((size_t)(len + T) * sizeof(float));
        for (long r = 0; r < rows; r++)
            cached_row(y, q, kc, vc, cmask, r, T, len, max_len, NH, NKV, HD, p);
        free(p);
        return;
    }
#pragma omp parallel
    {
        float *p = dllm_malloc((size_t)(len + T) * sizeof(float));
#pragma omp for schedule(dynamic, 8)
        for (long r = 0; r < rows; r++)
            cached_row(y, q, kc, vc, cmask, r, T, len, max_len, NH, NKV, HD, p);
        free(p);
    }
}
