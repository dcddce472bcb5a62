/* vexpf.c: expf over an array, sixteen (AVX-512) or eight (AVX2 with FMA) at a time,
 * with the C library's bits.
 *
 * The SwiGLU gate calls expf once per hidden unit: 3.5 million calls per denoising
 * step of the small preset, about 7% of a bf16 step as scalar library calls. The
 * library's expf (glibc's, on x86-64 with FMA) computes in double: x N/ln2 = k + r
 * with N = 32, 2^(k/N) from a 32-entry table whose exponent field absorbs k / N, and
 * 2^(r/N) by a cubic; the float result rounds that double once. The same steps on
 * eight doubles per AVX-512 register, with the same constants, the same fused
 * multiply-adds and the same table (computed here: 2^(i/32) correctly rounded) -- or
 * on four doubles per AVX2 register, the table read by a gather --
 * give the same bits: checked over every float in (-103.9, 88.7) against the library
 * when this was written, and on a sample at load time on every machine (below), so
 * a library that computes otherwise turns this path off rather than change results.
 * Outside that range (overflow, underflow to subnormals, inf, NaN) the lanes are
 * recomputed by the library call. */
#include "kernels/cpu/vexpf.h"
#include "kernels/cpu/cpu_isa.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VEXPF_X86 1
#endif

#define LO (-103.9f) /* below: results near or in the subnormal range */
#define HI 88.7f     /* above: overflow */

void vexpf_ref(float *out, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = expf(x[i]);
}

#ifdef VEXPF_X86

/* 2^(i/32) correctly rounded to double, as bits, less i << 47 (k's share of the
 * exponent is added back) */
static const uint64_t g_tab[32] = {
    0x3ff0000000000000ULL, 0x3fefd9b0d3158574ULL, 0x3fefb5586cf9890fULL, 0x3fef9301d0125b51ULL,
    0x3fef72b83c7d517bULL, 0x3fef54873168b9aaULL, 0x3fef387a6e756238ULL, 0x3fef1e9df51fdee1ULL,
    0x3fef06fe0a31b715ULL, 0x3feef1a7373aa9cbULL, 0x3feedea64c123422ULL, 0x3feece086061892dULL,
    0x3feebfdad5362a27ULL, 0x3feeb42b569d4f82ULL, 0x3feeab07dd485429ULL, 0x3feea47eb03a5585ULL,
    0x3feea09e667f3bcdULL, 0x3fee9f75e8ec5f74ULL, 0x3feea11473eb0187ULL, 0x3feea589994cce13ULL,
    0x3feeace5422aa0dbULL, 0x3feeb737b0cdc5e5ULL, 0x3feec49182a3f090ULL, 0x3feed503b23e255dULL,
    0x3feee89f995ad3adULL, 0x3feeff76f2fb5e47ULL, 0x3fef199bdd85529cULL, 0x3fef3720dcef9069ULL,
    0x3fef5818dcfba487ULL, 0x3fef7c97337b9b5fULL, 0x3fefa4afa2a490daULL, 0x3fefd0765b6e4540ULL,
};

#define VEXPF_TARGET __attribute__((target("avx512f")))

/* expf of eight floats, in double until the last rounding */
VEXPF_TARGET static inline __m256 exp8(__m256 xf, const __m512i t[4])
{
    const __m512d inv_ln2n = _mm512_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m512d shift = _mm512_set1_pd(0x1.8p+52);
    const __m512d c0 = _mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32);
    const __m512d c1 = _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32);
    const __m512d c2 = _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32);
    const __m512d one = _mm512_set1_pd(1.0);
    __m512d xd = _mm512_cvtps_pd(xf);
    __m512d kd = _mm512_fmadd_pd(inv_ln2n, xd, shift); /* k in the low mantissa bits */
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(inv_ln2n, xd, kd); /* x N/ln2 - k, |r| <= 1/2 */
    /* table[k mod 32]: two 16-entry lookups, the one chosen by bit 4 of k */
    __m512i lo = _mm512_permutex2var_epi64(t[0], ki, t[1]);
    __m512i hi = _mm512_permutex2var_epi64(t[2], ki, t[3]);
    __m512i tk = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tk, _mm512_slli_epi64(ki, 47)));
    __m512d z = _mm512_fmadd_pd(c0, r, c1);
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

VEXPF_TARGET static void vexpf_avx512(float *out, const float *x, size_t n)
{
    __m512i t[4];
    for (int j = 0; j < 4; j++)
        t[j] = _mm512_loadu_si512((const void *)(g_tab + 8 * j));
    const __m512 lo = _mm512_set1_ps(LO), hi = _mm512_set1_ps(HI);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m256 a = exp8(_mm512_castps512_ps256(v), t);
        __m256 b = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), t);
        __m512 y = _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1));
        /* ordered compares: a NaN lane is out of range too */
        __mmask16 in = _mm512_cmp_ps_mask(v, lo, _CMP_GT_OQ) & _mm512_cmp_ps_mask(v, hi, _CMP_LT_OQ);
        if (in != 0xffff) { /* out may be x: keep the inputs of the lanes to redo */
            float keep[16];
            _mm512_storeu_ps(keep, v);
            _mm512_storeu_ps(out + i, y);
            for (int j = 0; j < 16; j++)
                if (!(in >> j & 1))
                    out[i + j] = expf(keep[j]);
        } else {
            _mm512_storeu_ps(out + i, y);
        }
    }
    if (i < n)
        vexpf_ref(out + i, x + i, n - i);
}

#define VEXPF_TARGET2 __attribute__((target("avx2,fma")))

/* exp8's steps on four doubles */
VEXPF_TARGET2 static inline __m128 exp4(__m128 xf)
{
    const __m256d inv_ln2n = _mm256_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m256d shift = _mm256_set1_pd(0x1.8p+52);
    const __m256d c0 = _mm256_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32);
    const __m256d c1 = _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32);
    const __m256d c2 = _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32);
    const __m256d one = _mm256_set1_pd(1.0);
    __m256d xd = _mm256_cvtps_pd(xf);
    __m256d kd = _mm256_fmadd_pd(inv_ln2n, xd, shift);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(inv_ln2n, xd, kd);
    __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i tk = _mm256_i64gather_epi64((const long long *)g_tab, idx, 8);
    __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(tk, _mm256_slli_epi64(ki, 47)));
    __m256d z = _mm256_fmadd_pd(c0, r, c1);
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(c2, r, one);
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, sc));
}

VEXPF_TARGET2 static void vexpf_avx2(float *out, const float *x, size_t n)
{
    const __m256 lo = _mm256_set1_ps(LO), hi = _mm256_set1_ps(HI);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128 a = exp4(_mm256_castps256_ps128(v));
        __m128 b = exp4(_mm256_extractf128_ps(v, 1));
        __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1);
        /* ordered compares: a NaN lane is out of range too */
        int in = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GT_OQ),
                                                  _mm256_cmp_ps(v, hi, _CMP_LT_OQ)));
        if (in != 0xff) { /* out may be x: keep the inputs of the lanes to redo */
            float keep[8];
            _mm256_storeu_ps(keep, v);
            _mm256_storeu_ps(out + i, y);
            for (int j = 0; j < 8; j++)
                if (!(in >> j & 1))
                    out[i + j] = expf(keep[j]);
        } else {
            _mm256_storeu_ps(out + i, y);
        }
    }
    if (i < n)
        vexpf_ref(out + i, x + i, n - i);
}

/* The path in use: 0 the library, 1 AVX2, 2 AVX-512. */
static int g_path;

/* The table, and the check against the library on a spread of inputs: every 4099th
 * float bit pattern in the fast range plus the range's ends. */
__attribute__((constructor)) static void vexpf_init(void)
{
    bool avx512 = cpu_has(CPU_AVX512F), avx2 = cpu_has(CPU_AVX2) && cpu_has(CPU_FMA);
    if (!avx512 && !avx2)
        return;
    enum { NS = 4096 };
    float xs[NS], ya[NS], yb[NS];
    int n = 0;
    for (uint64_t u = 0; u < 0x100000000ULL && n < NS; u += 4099 * 257) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, sizeof f);
        if (f > LO && f < HI)
            xs[n++] = f;
    }
    float ends[] = {LO, HI, -0.0f, 0.0f, 1e-30f, -1e-30f, 88.0f, -87.0f, -103.0f};
    for (size_t j = 0; j < sizeof ends / sizeof *ends && n < NS; j++)
        xs[n++] = ends[j];
    vexpf_ref(ya, xs, (size_t)n);
    if (avx512) {
        vexpf_avx512(yb, xs, (size_t)n);
        if (memcmp(ya, yb, (size_t)n * sizeof(float)) == 0) {
            g_path = 2;
            return;
        }
    }
    if (avx2) {
        vexpf_avx2(yb, xs, (size_t)n);
        if (memcmp(ya, yb, (size_t)n * sizeof(float)) == 0)
            g_path = 1;
    }
}

bool vexpf_fast(void) { return g_path != 0; }

const char *vexpf_path(void) { return g_path == 2 ? "avx512" : g_path == 1 ? "avx2" : "libm"; }

void vexpf(float *out, const float *x, size_t n)
{
    if (g_path == 2)
        vexpf_avx512(out, x, n);
    else if (g_path == 1)
        vexpf_avx2(out, x, n);
    else
        vexpf_ref(out, x, n);
}

#else

bool vexpf_fast(void) { return false; }

const char *vexpf_path(void) { return "libm"; }

void vexpf(float *out, const float *x, size_t n) { vexpf_ref(out, x, n); }

#endif
