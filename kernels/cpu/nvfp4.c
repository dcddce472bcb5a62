/* nvfp4.c: E2M1 codes, two-level NVFP4 block scaling and the simulated W4A4 linear
 * layer; the definitions are in kernels/nvfp4.h. */
#include "kernels/nvfp4.h"

#include "kernels/cpu/vec_kernel.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float e2m1_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float nvfp4_e2m1_decode(uint8_t code)
{
    const float v = e2m1_values[code & 7];
    return code & 8 ? -v : v;
}

uint8_t nvfp4_e2m1_encode(float x)
{
    if (isnan(x))
        return 7;
    const uint8_t sign = signbit(x) ? 8 : 0;
    const float a = fabsf(x);
    /* midpoints between neighbours; a tie goes to the even code (mantissa bit 0) */
    uint8_t c;
    if (a <= 0.25f)
        c = 0;
    else if (a < 0.75f)
        c = 1;
    else if (a <= 1.25f)
        c = 2;
    else if (a < 1.75f)
        c = 3;
    else if (a <= 2.5f)
        c = 4;
    else if (a < 3.5f)
        c = 5;
    else if (a <= 5.0f)
        c = 6;
    else
        c = 7; /* 6, and everything past it saturates */
    return sign | c;
}

/* The block loops run over every linear input of an NVFP4 rollout: compiled for
 * AVX-512, AVX2 and the baseline (vec_kernel.h); integer and element-wise arithmetic,
 * so every clone gives the same bits. */

/* max |x| over the finite values. The bits of a non-negative float order like the
 * integers they read as, and the finite ones lie below the infinity's, so this is an
 * integer max, which vectorises (a float max with NaN would not). */
VEC_KERNEL_WIDE(float, amax_finite, (const float *x, size_t n),
                (x, n))
{
    uint32_t m = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t b;
        memcpy(&b, x + k, sizeof b);
        b &= 0x7fffffffu;
        const uint32_t f = b < 0x7f800000u ? b : 0u;
        m = f > m ? f : m;
    }
    float r;
    memcpy(&r, &m, sizeof r);
    return r;
}

/* |code| of v's magnitude a: nvfp4_e2m1_encode's comparison chain counted rather
 * than branched on, so that a block's loop vectorises; NaN counts 0 here */
static inline int e2m1_steps(float a)
{
    return (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
           (a > 5.0f);
}

/* decode(encode(v)): the same steps as magnitudes (0.5, 0.5, 0.5, 0.5, 1, 1, 2; the
 * sums are exact), v's sign, NaN -> +6 */
static inline float e2m1_round(float v)
{
    const float a = fabsf(v);
    const float m = (a > 0.25f ? 0.5f : 0.0f) + (a >= 0.75f ? 0.5f : 0.0f) +
                    (a > 1.25f ? 0.5f : 0.0f) + (a >= 1.75f ? 0.5f : 0.0f) +
                    (a > 2.5f ? 1.0f : 0.0f) + (a >= 3.5f ? 1.0f : 0.0f) +
                    (a > 5.0f ? 2.0f : 0.0f);
    return v != v ? NVFP4_E2M1_MAX : copysignf(m, v);
}

/* one block with decode scale d > 0: the dequantised values (deq may be x) */
VEC_KERNEL_WIDE(void, block_dequant, (float *deq, const float *x, int n, float d),
                (deq, x, n, d))
{
    for (int j = 0; j < n; j++)
        deq[j] = e2m1_round(x[j] / d) * d;
}

/* one block with decode scale d > 0: the codes */
VEC_KERNEL_WIDE(void, block_codes, (uint8_t *restrict q, const float *restrict x, int n, float d),
                (q, x, n, d))
{
    for (int j = 0; j < n; j++) {
        const float v = x[j] / d;
        const int c = e2m1_steps(fabsf(v)) | (signbit(v) ? 8 : 0);
        q[j] = (uint8_t)(v != v ? 7 : c);
    }
}

static float global_scale(float amax)
{
    const float g = amax / (NVFP4_E2M1_MAX * (float)NVFP4_E4M3_MAX);
    return g > 0.0f ? g : 1.0f;
}

/* one row: block scales sc (ceil(C/B)) and codes q (C), or the dequantised values
 * deq (C) when q is NULL; each block's amax is its own, or tensor_amax when that is
 * >= 0 (tensor scaling: one amax for every block) */
static void quant_row(const float *x, int C, int B, float tensor_amax, float g, uint8_t *sc,
                      uint8_t *q, float *deq)
{
    for (int j0 = 0, b = 0; j0 < C; j0 += B, b++) {
        const int n = C - j0 < B ? C - j0 : B;
        const float amax_b = tensor_amax >= 0.0f ? tensor_amax : amax_finite(x + j0, (size_t)n);
        const uint8_t s = fp8_encode((amax_b / NVFP4_E2M1_MAX) / g, FP8_E4M3);
        const float d = fp8_decode(s, FP8_E4M3) * g;
        if (sc)
            sc[b] = s;
        if (d > 0.0f) {
            if (q)
                block_codes(q + j0, x + j0, n, d);
            else
                block_dequant(deq + j0, x + j0, n, d);
            continue;
        }
        for (int j = j0; j < j0 + n; j++) { /* an all-zero block: +-0 */
            const uint8_t c = signbit(x[j]) ? 8 : 0;
            if (q)
                q[j] = c;
            else
                deq[j] = nvfp4_e2m1_decode(c) * d;
        }
    }
}

static const char *const scaling_names[NVFP4_N_SCALING] = {"block16", "block32", "channel",
                                                           "tensor"};

const char *nvfp4_scaling_name(nvfp4_scaling s)
{
    return (unsigned)s < NVFP4_N_SCALING ? scaling_names[s] : "?";
}

int nvfp4_scaling_parse(const char *s, nvfp4_scaling *out, dllm_err *err)
{
    for (int i = 0; i < NVFP4_N_SCALING; i++)
        if (s && !strcmp(s, scaling_names[i])) {
            *out = (nvfp4_scaling)i;
            return 0;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "NVFP4 scaling '%s': expected block16, block32, channel or tensor",
                        s ? s : "(null)");
}

int nvfp4_block_width(nvfp4_scaling s, int C)
{
    return s == NVFP4_SCALE_BLOCK16 ? NVFP4_BLOCK : s == NVFP4_SCALE_BLOCK32 ? 2 * NVFP4_BLOCK : C;
}

int nvfp4_quantise_scaled(nvfp4_matrix *m, const float *x, int R, int C, nvfp4_scaling s,
                          dllm_err *err)
{
    if (R < 0 || C < 1)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "nvfp4_quantise: bad shape [%d, %d]", R, C);
    if ((unsigned)s >= NVFP4_N_SCALING)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "nvfp4_quantise: bad scaling %d", (int)s);
    const int B = nvfp4_block_width(s, C);
    const int SC = (C + B - 1) / B;
    if (!m->q || m->rows != R || m->cols != C || m->block != B) {
        nvfp4_matrix_free(m);
        m->q = dllm_malloc((size_t)R * C + 1);
        m->scale = dllm_malloc((size_t)R * SC + 1);
        m->rows = R;
        m->cols = C;
        m->block = B;
        m->scale_cols = SC;
    }
    m->scaling = s;
    m->deq_valid = false;
    const float amax = amax_finite(x, (size_t)R * C);
    m->global_scale = global_scale(amax);
    const float tensor_amax = s == NVFP4_SCALE_TENSOR ? amax : -1.0f;
#pragma omp parallel for schedule(static) if ((size_t)R * C > 65536)
    for (int r = 0; r < R; r++)
        quant_row(x + (size_t)r * C, C, B, tensor_amax, m->global_scale,
                  m->scale + (size_t)r * SC, m->q + (size_t)r * C, NULL);
    return DLLM_OK;
}

int nvfp4_quantise(nvfp4_matrix *m, const float *x, int R, int C, dllm_err *err)
{
    return nvfp4_quantise_scaled(m, x, R, C, NVFP4_SCALE_BLOCK16, err);
}

float nvfp4_block_decode_scale(const nvfp4_matrix *m, int r, int j)
{
    return fp8_decode(m->scale[(size_t)r * m->scale_cols + j], FP8_E4M3) * m->global_scale;
}

void nvfp4_dequantise(float *out, const nvfp4_matrix *m)
{
    for (int r = 0; r < m->rows; r++)
        for (int j = 0; j < m->scale_cols; j++) {
            const float d = nvfp4_block_decode_scale(m, r, j);
            const int B = m->block;
            const int c1 = (j + 1) * B < m->cols ? (j + 1) * B : m->cols;
            for (int c = j * B; c < c1; c++) {
                const size_t k = (size_t)r * m->cols + c;
                out[k] = nvfp4_e2m1_decode(m->q[k]) * d;
            }
        }
}

void nvfp4_matrix_cache_dequant(nvfp4_matrix *m)
{
    if (m->deq_valid)
        return;
    if (!m->deq)
        m->deq = dllm_malloc(sizeof(float) * ((size_t)m->rows * m->cols + 1));
    nvfp4_dequantise(m->deq, m);
    m->deq_valid = true;
}

void nvfp4_matrix_free(nvfp4_matrix *m)
{
    free(m->q);
    free(m->scale);
    free(m->deq);
    memset(m, 0, sizeof *m);
}

/* max |x| over the finite values of each 16-wide block of a row (amax_finite's integer
 * max, one loop over the row: a call per block cost more than its 16 elements) */
VEC_INLINE uint32_t amax_bits16(const float *x)
{
    /* eight lanes of two elements each, then the lanes: a shape the vectoriser takes */
    uint32_t m[8];
    for (int k = 0; k < 8; k++) {
        uint32_t u, v;
        memcpy(&u, x + k, sizeof u);
        memcpy(&v, x + k + 8, sizeof v);
        u &= 0x7fffffffu;
        v &= 0x7fffffffu;
        u = u < 0x7f800000u ? u : 0u;
        v = v < 0x7f800000u ? v : 0u;
        m[k] = u > v ? u : v;
    }
    uint32_t r = 0;
    for (int k = 0; k < 8; k++)
        r = m[k] > r ? m[k] : r;
    return r;
}

VEC_KERNEL_WIDE(void, row_block_amax, (float *amax, const float *x, int C),
                (amax, x, C))
{
    const int full = C / NVFP4_BLOCK;
    for (int b = 0; b < full; b++) {
        const uint32_t m = amax_bits16(x + (size_t)b * NVFP4_BLOCK);
        memcpy(amax + b, &m, sizeof m);
    }
    if (full * NVFP4_BLOCK < C)
        amax[full] = amax_finite(x + (size_t)full * NVFP4_BLOCK, (size_t)(C - full * NVFP4_BLOCK));
}

/* block_dequant over a whole row, each element with its block's decode scale d[j / 16];
 * a block with d = 0 (all zero) gives +-0 with x's sign, as quant_row does */
VEC_KERNEL_WIDE_NO_TRAP(void, row_dequant, (float *restrict deq, const float *restrict x, int C, const float *restrict d),
                        (deq, x, C, d))
{
    const float six = NVFP4_E2M1_MAX;
    uint32_t six_bits;
    memcpy(&six_bits, &six, sizeof six_bits);
    for (int j0 = 0, b = 0; j0 < C; j0 += NVFP4_BLOCK, b++) {
        const int n = C - j0 < NVFP4_BLOCK ? C - j0 : NVFP4_BLOCK;
        const float db = d[b], div = db > 0.0f ? db : 1.0f;
        const uint32_t keep = db > 0.0f ? 0xffffffffu : 0u; /* 0: a +-0 block */
        for (int k = j0; k < j0 + n; k++) {
            /* e2m1_round(x / div) * db with integer selects, so that the loop vectorises:
             * the magnitude's steps (NaN compares false), the quotient's sign, NaN -> +6 */
            const float v = x[k] / div, a = fabsf(v);
            const float m = (a > 0.25f ? 0.5f : 0.0f) + (a >= 0.75f ? 0.5f : 0.0f) +
                            (a > 1.25f ? 0.5f : 0.0f) + (a >= 1.75f ? 0.5f : 0.0f) +
                            (a > 2.5f ? 1.0f : 0.0f) + (a >= 3.5f ? 1.0f : 0.0f) +
                            (a > 5.0f ? 2.0f : 0.0f);
            uint32_t vb, mb, xb;
            memcpy(&vb, &v, sizeof vb);
            memcpy(&mb, &m, sizeof mb);
            memcpy(&xb, x + k, sizeof xb);
            const uint32_t rb = (vb & 0x7fffffffu) > 0x7f800000u ? six_bits
                                                                 : mb | (vb & 0x80000000u);
            float r;
            memcpy(&r, &rb, sizeof r);
            const float q = r * db;
            uint32_t qb;
            memcpy(&qb, &q, sizeof qb);
            qb = (qb & keep) | (xb & 0x80000000u & ~keep);
            memcpy(deq + k, &qb, sizeof qb);
        }
    }
}

void nvfp4_quant_dequant(float *out, const float *x, int R, int C)
{
    if (R <= 0 || C <= 0)
        return;
    float lut[256]; /* the E4M3 block scales' values */
    for (int c = 0; c < 256; c++)
        lut[c] = fp8_decode((uint8_t)c, FP8_E4M3);
    const int SC = (C + NVFP4_BLOCK - 1) / NVFP4_BLOCK;
    /* quant_row's arithmetic, reordered: every block's amax first (the tensor's amax,
     * for the global scale, is their maximum), then each row's scales and one pass over
     * the row (the same operations on every element, so the same bits) */
    float *d = dllm_malloc(sizeof(float) * (size_t)R * SC); // (R, SC)
    const bool par = (size_t)R * C > 65536;
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < R; r++)
        row_block_amax(d + (size_t)r * SC, x + (size_t)r * C, C);
    const float g = global_scale(amax_finite(d, (size_t)R * SC));
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < R; r++) {
        float *dr = d + (size_t)r * SC;
        for (int b = 0; b < SC; b++)
            dr[b] = lut[fp8_encode((dr[b] / NVFP4_E2M1_MAX) / g, FP8_E4M3)] * g;
        row_dequant(out + (size_t)r * C, x + (size_t)r * C, C, dr);
    }
    free(d);
}

void nvfp4_quant_dequant_scaled(float *out, const float *x, int R, int C, nvfp4_scaling s)
{
    if (s == NVFP4_SCALE_BLOCK16 || (unsigned)s >= NVFP4_N_SCALING) {
        nvfp4_quant_dequant(out, x, R, C);
        return;
    }
    if (R <= 0 || C <= 0)
        return;
    /* the coarser scalings run quant_row itself: one amax per row or tensor, where the
     * 16-wide block loops above buy nothing */
    const float amax = amax_finite(x, (size_t)R * C);
    const float g = global_scale(amax);
    const float tensor_amax = s == NVFP4_SCALE_TENSOR ? amax : -1.0f;
    const int B = nvfp4_block_width(s, C);
#pragma omp parallel for schedule(static) if ((size_t)R * C > 65536)
    for (int r = 0; r < R; r++)
        quant_row(x + (size_t)r * C, C, B, tensor_amax, g, NULL, NULL, out + (size_t)r * C);
}

static void check_linear(const nvfp4_matrix *w, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "op_nvfp4_linear_fwd: weight is [%d, %d]%s, call expects [%d, %d]\n",
                w->rows, w->cols, w->q ? "" : " (not quantised)", OC, C);
        abort();
    }
}

void op_nvfp4_linears_fwd(int nw, float *const out[], const float *inp, nvfp4_matrix *const w[],
                          int N, int C, const int OC[])
{
    for (int i = 0; i < nw; i++)
        check_linear(w[i], C, OC[i]);
    if (N <= 0 || nw <= 0)
        return;
    for (int i = 1; i < nw; i++)
        if (w[i]->scaling != w[0]->scaling) { /* another activation quantisation each */
            for (int k = 0; k < nw; k++)
                op_nvfp4_linear_fwd(out[k], inp, w[k], N, C, OC[k]);
            return;
        }
    float *a = dllm_malloc((size_t)N * C * sizeof(float)); // (N, C)
    nvfp4_quant_dequant_scaled(a, inp, N, C, w[0]->scaling);
    for (int i = 0; i < nw; i++) {
        nvfp4_matrix_cache_dequant(w[i]);
        op_gemm(false, true, N, OC[i], C, 1.0f, a, w[i]->deq, 0.0f, out[i]);
    }
    free(a);
}

void op_nvfp4_linear_fwd(float *out, const float *inp, nvfp4_matrix *w, int N, int C, int OC)
{
    op_nvfp4_linears_fwd(1, &out, inp, &w, N, C, &OC);
}
