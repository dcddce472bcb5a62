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
 * zero codes. Activations are rounded straight into bf16 rows padded to a multiple of
 * 128 (and to 6 rows): with 1 x 128 groups each group's maximum, scale and rounding in
 * one pass while it is in L1 (no codes: the kernel needs only their bf16 values), and
 * each row's 32-bit k-pair is broadcast.
 *
 * With AMX (cpu_isa.h: CPU_AMXBF16) the tiles are 32 rows x 32 columns and each k-block's
 * partial sums come from tile dot products (TDPBF16PS: the same exact products, fp32
 * sums in the hardware's order), read out of the tile registers and added times their
 * scale exactly as above. The weight's packing serves both: a k-pair's register for 16
 * columns is a row of an AMX B tile (stride: the two registers of a pair). The two
 * kernels round differently (the order of a block's sums); each is fixed, so a machine's
 * results depend on neither the thread count nor the other rows.
 *
 * Threads: one OpenMP region per call, which may serve several weights of one input
 * (q/k/v, gate/up: the input quantised once). Each thread takes a range of row blocks,
 * quantises those rows and multiplies them by every weight, so no thread waits on
 * another before the region ends (with passive waiting every wake-up and barrier
 * costs a sleep); with fewer row blocks than threads the columns are split instead. */
#include "kernels/cpu/fp8_bf16dot.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/ops.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { TR = 6, TR_AMX = 32, TC = 32, KPAIRS = FP8_BLOCK / 2 };

bool fp8_bf16dot_usable(void)
{
#if defined(__x86_64__)
    return cpu_bf16_dot_usable();
#else
    return false;
#endif
}

bool fp8_bf16dot_amx(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 11
    return fp8_bf16dot_usable() && cpu_has(CPU_AMXBF16);
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

/* the store mask of a 32-column output tile's half h (0: columns 0-15, 1: 16-31) */
static inline uint16_t col_mask(int cols, int h)
{
    const int c = cols - 16 * h;
    return c >= 16 ? 0xFFFF : c <= 0 ? 0 : (uint16_t)((1u << c) - 1);
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
    __mmask16 m0 = col_mask(cols, 0), m1 = col_mask(cols, 1);
#pragma GCC unroll 6
    for (int r = 0; r < TR; r++)
        if (r < rows) {
            _mm512_mask_storeu_ps(out + (size_t)r * ldo, m0, f[r][0]);
            _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16, m1, f[r][1]);
        }
}

#if defined(__GNUC__) && __GNUC__ >= 11
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16")))

/* The tile registers' shapes: 0-3 the 2 x 2 output blocks of 16 x 16 fp32, 4-5 the two
 * 16-row halves of the activations' 32 bf16 of k, 6-7 the 16 k-pairs of the two 16-column
 * halves of the weight. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* In static memory: a compiler may drop the stores into an automatic one that only the
 * tile configuration instruction reads. */
static const amx_config AMX_SHAPES = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

AMX_TARGET static void amx_configure(void) { _tile_loadconfig(&AMX_SHAPES); }

/* tile_kernel's sums for TR_AMX rows (a has them all, zero padded) on AMX tiles. */
AMX_TARGET static void amx_tile_kernel(float *out, int ldo, int rows, int cols,
                                       const uint16_t *a, int lda, const float *sa, int KB,
                                       const uint16_t *wp, const float *sw)
{
    _Alignas(64) float f[TR_AMX][TC], p[4][16][16];
    memset(f, 0, sizeof f);
    const size_t as = (size_t)lda * sizeof(uint16_t);
    for (int j = 0; j < KB; j++) {
        const uint16_t *wj = wp + (size_t)j * KPAIRS * 64, *aj = a + (size_t)j * FP8_BLOCK;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int k = 0; k < FP8_BLOCK / 32; k++) { /* 32 values of k: 16 pairs */
            _tile_loadd(4, aj + k * 32, as);
            _tile_loadd(5, aj + (size_t)16 * lda + k * 32, as);
            _tile_loadd(6, wj + (size_t)k * 16 * 64, 128);
            _tile_loadd(7, wj + (size_t)k * 16 * 64 + 32, 128);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, p[0], 64);
        _tile_stored(1, p[1], 64);
        _tile_stored(2, p[2], 64);
        _tile_stored(3, p[3], 64);
        __m512 s0 = _mm512_load_ps(sw + j * TC), s1 = _mm512_load_ps(sw + j * TC + 16);
        for (int r = 0; r < TR_AMX; r++) {
            __m512 sr = _mm512_set1_ps(sa[r * KB + j]);
            const float *p0 = p[(r / 16) * 2][r % 16], *p1 = p[(r / 16) * 2 + 1][r % 16];
            _mm512_store_ps(f[r], _mm512_fmadd_ps(_mm512_load_ps(p0), _mm512_mul_ps(sr, s0),
                                                  _mm512_load_ps(f[r])));
            _mm512_store_ps(f[r] + 16, _mm512_fmadd_ps(_mm512_load_ps(p1),
                                                       _mm512_mul_ps(sr, s1),
                                                       _mm512_load_ps(f[r] + 16)));
        }
    }
    __mmask16 m0 = col_mask(cols, 0), m1 = col_mask(cols, 1);
    for (int r = 0; r < rows && r < TR_AMX; r++) {
        _mm512_mask_storeu_ps(out + (size_t)r * ldo, m0, _mm512_load_ps(f[r]));
        _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16, m1, _mm512_load_ps(f[r] + 16));
    }
}

AMX_TARGET static void amx_release(void) { _tile_release(); }
#else
static void amx_configure(void) { abort(); }
static void amx_release(void) {}
static void amx_tile_kernel(float *out, int ldo, int rows, int cols, const uint16_t *a, int lda,
                            const float *sa, int KB, const uint16_t *wp, const float *sw)
{
    abort();
}
#endif

/* Largest finite |x[k]| of a group of n <= 128 values (NaN and inf count as 0, as
 * kernels/cpu/fp8.c's block maximum takes it; a maximum is the same in any order). */
KERNEL_TARGET static float group_amax(const float *x, int n)
{
    const __m512 fmax = _mm512_set1_ps(FLT_MAX);
    __m512 amax = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 16) {
        __mmask16 m = n - k >= 16 ? 0xFFFF : (__mmask16)((1u << (n - k)) - 1);
        __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + k));
        __mmask16 fin = _mm512_cmp_ps_mask(a, fmax, _CMP_LE_OQ);
        amax = _mm512_max_ps(amax, _mm512_maskz_mov_ps(fin, a));
    }
    return _mm512_reduce_max_ps(amax);
}

/* row[0:128] = bf16(fp8_round(x[k] / s)) for the group's n <= 128 values, zeros after:
 * fp8_round (kernels/cpu/fp8.c) sixteen lanes at a time, the same bit arithmetic, so
 * the values are the exact simulation's, bit for bit. */
KERNEL_TARGET static inline void act_group_bf16(uint16_t *row, const float *x, float sc, int n,
                                                fp8_format f)
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
    __m512 s = _mm512_set1_ps(sc);
    for (int k = 0; k < FP8_BLOCK; k += 16) {
        __mmask16 m = n - k >= 16 ? 0xFFFF : n - k <= 0 ? 0 : (__mmask16)((1u << (n - k)) - 1);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + k), s);
        __m512i u = _mm512_castps_si512(v);
        __m512i a = _mm512_and_si512(u, absmask), sign = _mm512_andnot_si512(absmask, u);
        /* normal range: round half to even on the kept bits, saturate */
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, shift), one);
        __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, half), odd), keep);
        r = _mm512_min_epu32(r, vmax);
        /* nonzero values below the smallest normal (zeros are right already), NaN:
         * rare in a scaled group (E4M3: |x| < amax / 28672), so tested for first */
        __mmask16 sub = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(a, a), a, minnorm);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(a, inf);
        if (sub | nan) {
            /* below the smallest normal: a multiple of the smallest step, rint */
            __m512 q = _mm512_mul_ps(
                _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), up),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                down);
            r = _mm512_mask_mov_epi32(r, sub, _mm512_castps_si512(q));
            r = _mm512_mask_mov_epi32(r, nan, qnan);
        }
        r = _mm512_or_si512(r, sign);
        r = _mm512_maskz_mov_epi32(m, r); /* zeros past the group */
        _mm256_storeu_si256((__m256i *)(row + k),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
}

/* The activations of one call, quantised once for every weight that shares them. */
typedef struct {
    const float *inp;     /* (N, C) */
    int N, C, KB, KP;
    int tr;               /* rows of a tile: TR, or TR_AMX on AMX */
    fp8_format format;
    bool group, pow2;     /* 1 x 128 groups (scales found row by row), pow2 scales */
    const float *scale;   /* channel / tensor scaling: the scales, (SR, SC); else NULL */
    int br, bc, SC;       /* their block shape */
    uint16_t *a16;        /* (NR*tr, KP) the rounded values as bf16, zero padded */
    float *sa;            /* (NR*tr, KB) the scale of each row and k-block */
} act_rows;

/* Rows [r0, r1) of A: their scales (for groups found here, one pass over each group
 * while it is in L1: its maximum, then its rounding) and bf16 values. */
KERNEL_TARGET static void act_quantise_rows(const act_rows *A, int r0, int r1)
{
    int C = A->C, KB = A->KB, KP = A->KP;
    for (int n = r0; n < r1; n++) {
        float *san = A->sa + (size_t)n * KB;
        uint16_t *row = A->a16 + (size_t)n * KP;
        if (n >= A->N) {
            memset(san, 0, (size_t)KB * sizeof *san);
            memset(row, 0, (size_t)KP * sizeof *row);
            continue;
        }
        const float *x = A->inp + (size_t)n * C;
        for (int j = 0; j < KB; j++) {
            int k0 = j * FP8_BLOCK, len = C - k0 < FP8_BLOCK ? C - k0 : FP8_BLOCK;
            float s = A->group ? fp8_scale_from_amax(group_amax(x + k0, len), A->format, A->pow2)
                               : A->scale[(size_t)(n / A->br) * A->SC + (size_t)k0 / A->bc];
            san[j] = s;
            act_group_bf16(row + k0, x + k0, s, len, A->format);
        }
    }
}

static void tile_range(float *out, const act_rows *A, const fp8_matrix *w, int OC, int t,
                       int rb0, int rb1)
{
    int KB = A->KB, KP = A->KP, N = A->N, tr = A->tr;
    size_t tile = (size_t)KB * KPAIRS * TC * 2;
    for (int rb = rb0; rb < rb1; rb++) {
        int r0 = rb * tr, c0 = t * TC;
        int rows = N - r0 < tr ? N - r0 : tr, cols = OC - c0 < TC ? OC - c0 : TC;
        (tr == TR_AMX ? amx_tile_kernel : tile_kernel)(
            out + (size_t)r0 * OC + c0, OC, rows, cols, A->a16 + (size_t)r0 * KP, KP,
            A->sa + (size_t)r0 * KB, KB, w->qbf + (size_t)t * tile,
            w->qbf_scale + (size_t)t * KB * TC);
    }
}

void fp8_bf16dot_linears(int nw, float *const out[], const float *inp, fp8_matrix *const w[],
                         int N, int C, const int OC[])
{
    const bool amx = fp8_bf16dot_amx();
    const int tr = amx ? TR_AMX : TR;
    int KB = (C + FP8_BLOCK - 1) / FP8_BLOCK, NR = (N + tr - 1) / tr;
    size_t flops = 0;
    for (int i = 0; i < nw; i++) {
        if (!w[i]->qbf_valid)
            pack_weight(w[i]);
        flops += (size_t)N * C * OC[i];
    }
    act_rows A = {.inp = inp, .N = N, .C = C, .KB = KB, .KP = KB * FP8_BLOCK, .tr = tr,
                  .format = w[0]->format, .pow2 = w[0]->pow2_scale,
                  .group = w[0]->act_scaling == FP8_SCALE_GROUP};
    float *scale = NULL;
    fp8_block_shape(w[0]->act_scaling, N, C, &A.br, &A.bc);
    A.SC = (C + A.bc - 1) / A.bc;
    if (!A.group) { /* a row's or the tensor's maximum first */
        scale = dllm_malloc((size_t)((N + A.br - 1) / A.br) * A.SC * sizeof(float));
        fp8_scales(scale, inp, N, C, A.format, w[0]->act_scaling, A.pow2);
        A.scale = scale;
    }
    A.a16 = dllm_malloc((size_t)NR * tr * A.KP * sizeof(uint16_t));
    A.sa = dllm_malloc((size_t)NR * tr * KB * sizeof(float));
    /* One parallel region per call (each costs a wake-up of the pool, dear with passive
     * waiting). With a row block or more per thread, each thread quantises its own
     * rows and multiplies them by every weight: no barrier; the weights' column tiles
     * outermost, so one tile stays in cache over the thread's rows. */
#pragma omp parallel if (flops > (1u << 18))
    {
        int nth = omp_get_num_threads(), th = omp_get_thread_num();
        if (amx) /* the tile registers' shapes, per thread */
            amx_configure();
        if (NR >= nth) {
            int rb0 = (int)((long)th * NR / nth), rb1 = (int)((long)(th + 1) * NR / nth);
            act_quantise_rows(&A, rb0 * tr, rb1 * tr);
            for (int i = 0; i < nw; i++)
                for (int t = 0; t < (OC[i] + TC - 1) / TC; t++)
                    tile_range(out[i], &A, w[i], OC[i], t, rb0, rb1);
        } else {
#pragma omp for schedule(static)
            for (int rb = 0; rb < NR; rb++)
                act_quantise_rows(&A, rb * tr, (rb + 1) * tr);
            for (int i = 0; i < nw; i++) {
#pragma omp for schedule(static) nowait
                for (int t = 0; t < (OC[i] + TC - 1) / TC; t++)
                    tile_range(out[i], &A, w[i], OC[i], t, 0, NR);
            }
        }
        if (amx)
            amx_release();
    }
    free(scale);
    free(A.a16);
    free(A.sa);
}

void fp8_bf16dot_linear(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    fp8_bf16dot_linears(1, &out, inp, &w, N, C, &OC);
}

#else

void fp8_bf16dot_linears(int nw, float *const out[], const float *inp, fp8_matrix *const w[],
                         int N, int C, const int OC[])
{
    abort(); /* fp8_bf16dot_usable() is false: never called */
}

void fp8_bf16dot_linear(float *out, const float *inp, fp8_matrix *w, int N, int C, int OC)
{
    abort();
}

#endif
