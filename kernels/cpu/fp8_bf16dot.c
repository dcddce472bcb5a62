/* fp8_bf16dot.c: the block-scaled FP8 product on AVX512-BF16 dot products.
 *
 * vdpbf16ps multiplies 16 pairs of bf16 values and adds each pair's two products to
 * an fp32 lane. E4M3 and E5M2 codes decode to bf16 values exactly, and the product of
 * two has at most 8 significant bits, so every product is exact and only the fp32
 * sums round. For each output tile of 6 rows x 32 columns the kernel keeps two sets
 * of accumulators in registers: the partial dot products of the current 128-wide
 * k-block, and the output, into which each block's partial is added times its scale
 * sa[row, block] * sw[column, block] (one fused multiply-add). No partial sum leaves
 * the registers, and no scale is applied to a single product.
 *
 * Weight packing (once per quantisation, in w->qbf): for each tile of 32 output
 * channels and each k-block, 64 k-pairs x 2 registers x 16 lanes x 2 values, so the
 * kernel loads the two weight registers of a k-pair with two aligned loads; w->qbf_scale
 * holds sw[block, column] for the tile's 32 columns. Channels past OC and k past C are
 * zero codes. Activations are decoded into bf16 rows padded to a multiple of 128 (and
 * to 6 rows), and each row's 32-bit k-pair is broadcast. */
#include "kernels/cpu/fp8_bf16dot.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { TR = 6, TC = 32, KPAIRS = FP8_BLOCK / 2 };

bool fp8_bf16dot_usable(void)
{
#if defined(__x86_64__)
    return cpu_bf16_dot_usable();
#else
    return false;
#endif
}

#if defined(__x86_64__)

#define KERNEL_TARGET __attribute__((target("avx512f,avx512bf16")))

static void bf16_lut(uint16_t lut[256], fp8_format f)
{
    for (int c = 0; c < 256; c++)
        lut[c] = op_f32_to_bf16(fp8_decode((uint8_t)c, f)); /* exact */
}

/* The scale of m covering row r and k-block j (the scaling modes' blocks are 128 or
 * all columns wide, so one scale covers a k-block). */
static inline float block_scale(const fp8_matrix *m, int r, int j)
{
    return m->scale[(size_t)(r / m->block_rows) * m->scale_cols +
                    (size_t)j * FP8_BLOCK / m->block_cols];
}

static void pack_weight(fp8_matrix *w)
{
    int OC = w->rows, C = w->cols, KB = (C + FP8_BLOCK - 1) / FP8_BLOCK;
    int NT = (OC + TC - 1) / TC;
    size_t tile = (size_t)KB * KPAIRS * TC * 2; /* bf16 values per tile */
    if (!w->qbf)
        w->qbf = aligned_alloc(64, (size_t)NT * tile * sizeof(uint16_t));
    if (!w->qbf_scale)
        w->qbf_scale = aligned_alloc(64, (size_t)NT * KB * TC * sizeof(float));
    if (!w->qbf || !w->qbf_scale) {
        fprintf(stderr, "fp8_bf16dot: out of memory packing a [%d, %d] weight\n", OC, C);
        abort();
    }
    uint16_t lut[256];
    bf16_lut(lut, w->format);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < NT; t++) {
        uint16_t *pt = w->qbf + (size_t)t * tile;
        float *st = w->qbf_scale + (size_t)t * KB * TC;
        for (int j = 0; j < KB; j++)
            for (int c = 0; c < TC; c++) {
                int oc = t * TC + c;
                st[j * TC + c] = oc < OC ? block_scale(w, oc, j) : 0.0f;
                for (int kk = 0; kk < KPAIRS; kk++)
                    for (int e = 0; e < 2; e++) {
                        int k = j * FP8_BLOCK + 2 * kk + e;
                        /* register c / 16, lane c % 16, pair element e */
                        pt[((size_t)(j * KPAIRS + kk) * 2 + c / 16) * 32 + (c % 16) * 2 + e] =
                            oc < OC && k < C ? lut[w->q[(size_t)oc * C + k]] : 0;
                    }
            }
    }
    w->qbf_valid = true;
}

/* out[0:rows, 0:cols] (row stride ldo) = the tile's sums; a: TR rows of KB*128 bf16
 * codes (row stride lda values), sa: TR rows of KB activation scales, wp / sw: the
 * tile's packed weight and scales. */
KERNEL_TARGET static void tile_kernel(float *out, int ldo, int rows, int cols, const uint16_t *a,
                                      int lda, const float *sa, int KB, const uint16_t *wp,
                                      const float *sw)
{
    __m512 f[TR][2], p[TR][2];
#pragma GCC unroll 6
    for (int r = 0; r < TR; r++)
        f[r][0] = f[r][1] = _mm512_setzero_ps();
    for (int j = 0; j < KB; j++) {
#pragma GCC unroll 6
        for (int r = 0; r < TR; r++)
            p[r][0] = p[r][1] = _mm512_setzero_ps();
        const uint16_t *wj = wp + (size_t)j * KPAIRS * 64;
        const uint16_t *aj = a + (size_t)j * FP8_BLOCK;
        for (int kk = 0; kk < KPAIRS; kk++) {
            __m512bh w0 = (__m512bh)_mm512_load_si512(wj + kk * 64);
            __m512bh w1 = (__m512bh)_mm512_load_si512(wj + kk * 64 + 32);
#pragma GCC unroll 6
            for (int r = 0; r < TR; r++) {
                uint32_t pair;
                memcpy(&pair, aj + (size_t)r * lda + 2 * kk, sizeof pair);
                __m512bh b = (__m512bh)_mm512_set1_epi32((int)pair);
                p[r][0] = _mm512_dpbf16_ps(p[r][0], b, w0);
                p[r][1] = _mm512_dpbf16_ps(p[r][1], b, w1);
            }
        }
        __m512 s0 = _mm512_load_ps(sw + j * TC), s1 = _mm512_load_ps(sw + j * TC + 16);
#pragma GCC unroll 6
        for (int r = 0; r < TR; r++) {
            __m512 sr = _mm512_set1_ps(sa[r * KB + j]);
            f[r][0] = _mm512_fmadd_ps(p[r][0], _mm512_mul_ps(sr, s0), f[r][0]);
            f[r][1] = _mm512_fmadd_ps(p[r][1], _mm512_mul_ps(sr, s1), f[r][1]);
        }
    }
    __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
#pragma GCC unroll 6
    for (int r = 0; r < TR; r++)
        if (r < rows) {
            _mm512_mask_storeu_ps(out + (size_t)r * ldo, m0, f[r][0]);
            _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16, m1, f[r][1]);
        }
}

/* row[0:KP] = bf16(fp8_round(x[k] / scale)) for k < C (zeros after), the scale of
 * k-block j being sc[j]: fp8_round (kernels/cpu/fp8.c) sixteen lanes at a time, the same
 * bit arithmetic, so the values are the exact simulation's, bit for bit. */
KERNEL_TARGET static void act_row_bf16(uint16_t *row, const float *x, const float *sc, int C,
                                       int KB, fp8_format f)
{
    const int mbits = f == FP8_E4M3 ? 3 : 2, bias = f == FP8_E4M3 ? 7 : 15;
    const int shift = 23 - mbits;
    const float maxf = fp8_max(f);
    uint32_t maxbits;
    memcpy(&maxbits, &maxf, sizeof maxbits);
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i half = _mm512_set1_epi32((1 << (shift - 1)) - 1), one = _mm512_set1_epi32(1);
    const __m512i keep = _mm512_set1_epi32(~((1 << shift) - 1));
    const __m512i vmax = _mm512_set1_epi32((int)maxbits);
    const __m512i minnorm = _mm512_set1_epi32((127 + 1 - bias) << 23);
    const __m512i qnan = _mm512_set1_epi32(0x7FC00000);
    const __m512 up = _mm512_set1_ps(ldexpf(1.0f, bias + mbits - 1));
    const __m512 down = _mm512_set1_ps(ldexpf(1.0f, 1 - bias - mbits));
    for (int j = 0; j < KB; j++) {
        __m512 s = _mm512_set1_ps(sc[j]);
        for (int k0 = j * FP8_BLOCK; k0 < (j + 1) * FP8_BLOCK; k0 += 16) {
            int n = C - k0;
            __mmask16 m = n >= 16 ? 0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
            __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + k0), s);
            __m512i u = _mm512_castps_si512(v);
            __m512i a = _mm512_and_si512(u, absmask), sign = _mm512_andnot_si512(absmask, u);
            /* normal range: round half to even on the kept bits, saturate */
            __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, shift), one);
            __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, half), odd), keep);
            r = _mm512_min_epu32(r, vmax);
            /* below the smallest normal: a multiple of the smallest step, rint */
            __m512 q = _mm512_mul_ps(
                _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), up),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                down);
            __mmask16 sub = _mm512_cmplt_epu32_mask(a, minnorm);
            r = _mm512_mask_mov_epi32(r, sub, _mm512_castps_si512(q));
            r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, inf), qnan);
            r = _mm512_or_si512(r, sign);
            r = _mm512_maskz_mov_epi32(m, r); /* zeros past C */
            _mm256_storeu_si256((__m256i *)(row + k0),
                                _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
        }
    }
}

void fp8_bf16dot_linear(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    int KB = (C + FP8_BLOCK - 1) / FP8_BLOCK, KP = KB * FP8_BLOCK;
    if (!w->qbf_valid)
        pack_weight(w);
    int NR = (N + TR - 1) / TR, NT = (OC + TC - 1) / TC;
    /* the activations' scales, then their rounded values as bf16 rows */
    int br, bc;
    fp8_block_shape(w->act_scaling, N, C, &br, &bc);
    int SC = (C + bc - 1) / bc;
    float *scale = dllm_malloc((size_t)((N + br - 1) / br) * SC * sizeof(float));
    fp8_scales(scale, inp, N, C, w->format, w->act_scaling, w->pow2_scale);
    uint16_t *a16 = dllm_malloc((size_t)NR * TR * KP * sizeof(uint16_t)); // (NR*TR, KP)
    float *sa = dllm_malloc((size_t)NR * TR * KB * sizeof(float));         // (NR*TR, KB)
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < NR * TR; n++) {
        float *san = sa + (size_t)n * KB;
        for (int j = 0; j < KB; j++)
            san[j] = n < N ? scale[(size_t)(n / br) * SC + (size_t)j * FP8_BLOCK / bc] : 0.0f;
        if (n < N)
            act_row_bf16(a16 + (size_t)n * KP, inp + (size_t)n * C, san, C, KB, w->format);
        else
            memset(a16 + (size_t)n * KP, 0, (size_t)KP * sizeof(uint16_t));
    }
    free(scale);
    size_t tile = (size_t)KB * KPAIRS * TC * 2;
    /* column tiles outermost: a thread keeps one tile's weights in cache over the rows */
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * OC > (1u << 18))
    for (int t = 0; t < NT; t++)
        for (int rb = 0; rb < NR; rb++) {
            int r0 = rb * TR, c0 = t * TC;
            int rows = N - r0 < TR ? N - r0 : TR, cols = OC - c0 < TC ? OC - c0 : TC;
            tile_kernel(out + (size_t)r0 * OC + c0, OC, rows, cols, a16 + (size_t)r0 * KP, KP,
                        sa + (size_t)r0 * KB, KB, w->qbf + (size_t)t * tile,
                        w->qbf_scale + (size_t)t * KB * TC);
        }
    free(a16);
    free(sa);
}

#else

void fp8_bf16dot_linear(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    abort(); /* fp8_bf16dot_usable() is false: never called */
}

#endif
