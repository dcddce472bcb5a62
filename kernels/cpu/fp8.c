/* fp8.c: FP8 E4M3 / E5M2 encode and decode, and block-scaled quantisation
 * (contract in kernels/fp8.h, method in docs/METHOD.md section 6).
 *
 * Encoding works on the fp32 bit pattern. With m mantissa bits and bias b:
 *  - |x| >= 2^(1-b) (fp8 normal range): drop the low 23-m mantissa bits of |x| with
 *    round-to-nearest-even on the whole exponent|mantissa integer (a carry rolls into
 *    the exponent, as it should), then re-bias the exponent; codes past max saturate.
 *  - |x| < 2^(1-b) (fp8 subnormal range): the code is |x| / 2^(1-b-m) rounded to an
 *    integer, i.e. the 24-bit significand shifted right with RNE; a carry out gives
 *    the smallest normal code, which is again the right answer. */
#include "kernels/fp8.h"
#include "kernels/cpu/vec_kernel.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int mbits, bias;
    uint8_t max_code;  /* positive max finite code */
    float max;
} fp8_params;

static const fp8_params PARAMS[2] = {
    [FP8_E4M3] = {3, 7, 0x7E, 448.0f},
    [FP8_E5M2] = {2, 15, 0x7B, 57344.0f},
};

/* NaN code (positive); both formats use S.1111111, a quiet NaN in E5M2 too. */
enum { FP8_NAN = 0x7F };

uint8_t fp8_encode(float x, fp8_format f)
{
    const fp8_params *p = &PARAMS[f];
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | FP8_NAN;
    if (a == 0x7F800000u)
        return sign | p->max_code;  /* inf saturates (docs/METHOD.md) */

    uint32_t code;
    const uint32_t min_normal = (uint32_t)(127 + 1 - p->bias) << 23;
    if (a >= min_normal) {
        int shift = 23 - p->mbits;
        /* round half to even on the exponent|mantissa integer; no uint32 overflow:
         * a <= 0x7F7FFFFF */
        uint32_t r = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
        code = (r >> shift) - ((uint32_t)(127 - p->bias) << p->mbits);
        if (code > p->max_code)
            code = p->max_code;
    } else {
        uint32_t E = a >> 23;
        if (E == 0) {
            code = 0;  /* fp32 zero or subnormal: far below half the smallest fp8 step */
        } else {
            uint32_t M = (a & 0x7FFFFFu) | 0x800000u;  /* |x| = M * 2^(E-127-23) */
            int s = 23 + 1 - p->bias - p->mbits - ((int)E - 127);  /* >= 24 - mbits */
            if (s >= 25)
                code = 0;  /* M < 2^24 <= half a step */
            else
                code = (M + ((1u << (s - 1)) - 1) + ((M >> s) & 1)) >> s;
        }
    }
    return sign | (uint8_t)code;
}

float fp8_decode(uint8_t c, fp8_format f)
{
    const fp8_params *p = &PARAMS[f];
    int mmask = (1 << p->mbits) - 1;
    int emask = (1 << (7 - p->mbits)) - 1;
    int e = (c >> p->mbits) & emask, m = c & mmask;
    bool neg = (c & 0x80) != 0;
    if (f == FP8_E4M3 && (c & 0x7F) == 0x7F)
        return neg ? -NAN : NAN;
    if (f == FP8_E5M2 && e == emask) {
        if (m)
            return neg ? -NAN : NAN;
        return neg ? -INFINITY : INFINITY;
    }
    float v = e == 0 ? ldexpf((float)m, 1 - p->bias - p->mbits)
                     : ldexpf((float)(mmask + 1 + m), e - p->bias - p->mbits);
    return neg ? -v : v;
}

/* decode(encode(x)) without the code: the same bit arithmetic as fp8_encode, kept
 * in the fp32 layout (mask the dropped mantissa bits instead of re-biasing), and
 * the subnormal range as an RNE integer multiple of the smallest step. */
float fp8_round(float x, fp8_format f)
{
    const fp8_params *p = &PARAMS[f];
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t sign = u & 0x80000000u, a = u & 0x7FFFFFFFu, r;
    const int shift = 23 - p->mbits;
    uint32_t maxbits;
    memcpy(&maxbits, &p->max, sizeof maxbits);
    if (a > 0x7F800000u)
        return sign ? -NAN : NAN; /* as fp8_decode of the NaN code */
    if (a >= (uint32_t)(127 + 1 - p->bias) << 23) {
        r = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1)) & ~((1u << shift) - 1);
        if (r > maxbits)
            r = maxbits; /* saturation, +-inf included */
    } else {
        /* |x| < 2^(1-bias): a multiple of 2^(1-bias-mbits), RNE (rintf in the default
         * rounding mode); both scalings by powers of two are exact */
        float q = rintf(fabsf(x) * ldexpf(1.0f, p->bias + p->mbits - 1)) *
                  ldexpf(1.0f, 1 - p->bias - p->mbits);
        memcpy(&r, &q, sizeof r);
    }
    r |= sign;
    float v;
    memcpy(&v, &r, sizeof v);
    return v;
}

float fp8_max(fp8_format f) { return PARAMS[f].max; }
uint8_t fp8_max_code(fp8_format f) { return PARAMS[f].max_code; }

float fp8_ulp(float v, fp8_format f)
{
    const fp8_params *p = &PARAMS[f];
    int emin = 1 - p->bias, ex = emin;
    float a = fabsf(v);
    if (a > 0) {
        int e2;
        frexpf(a, &e2);  /* a = fr * 2^e2, fr in [0.5, 1) */
        if (e2 - 1 > emin)
            ex = e2 - 1;
    }
    return ldexpf(1.0f, ex - p->mbits);
}

void fp8_encode_array(uint8_t *out, const float *inp, size_t n, fp8_format f)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        out[i] = fp8_encode(inp[i], f);
}

static void decode_table(float lut[256], fp8_format f)
{
    for (int c = 0; c < 256; c++)
        lut[c] = fp8_decode((uint8_t)c, f);
}

void fp8_decode_array(float *out, const uint8_t *inp, size_t n, fp8_format f)
{
    float lut[256];
    decode_table(lut, f);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        out[i] = lut[inp[i]];
}

/* ---- names ---------------------------------------------------------------------------- */

static const char *const FORMAT_NAMES[] = {"e4m3", "e5m2"};
static const char *const SCALING_NAMES[] = {"tensor", "channel", "block", "group"};

static bool format_ok(fp8_format f) { return f == FP8_E4M3 || f == FP8_E5M2; }
static bool scaling_ok(fp8_scaling s) { return s >= FP8_SCALE_TENSOR && s <= FP8_SCALE_GROUP; }

const char *fp8_format_name(fp8_format f) { return format_ok(f) ? FORMAT_NAMES[f] : "?"; }
const char *fp8_scaling_name(fp8_scaling s) { return scaling_ok(s) ? SCALING_NAMES[s] : "?"; }

int fp8_format_parse(const char *s, fp8_format *f, dllm_err *err)
{
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, FORMAT_NAMES[i]) == 0) {
            *f = (fp8_format)i;
            return DLLM_OK;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT, "fp8 format '%s': expected e4m3 or e5m2",
                        s ? s : "(null)");
}

int fp8_scaling_parse(const char *s, fp8_scaling *m, dllm_err *err)
{
    for (int i = 0; i < 4; i++)
        if (s && strcmp(s, SCALING_NAMES[i]) == 0) {
            *m = (fp8_scaling)i;
            return DLLM_OK;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT,
                        "fp8 scaling '%s': expected tensor, channel, block or group",
                        s ? s : "(null)");
}

/* ---- scales ------------------------------------------------------------------------------ */

void fp8_block_shape(fp8_scaling s, int R, int C, int *br, int *bc)
{
    switch (s) {
    default:
    case FP8_SCALE_TENSOR: *br = R; *bc = C; break;
    case FP8_SCALE_CHANNEL: *br = 1; *bc = C; break;
    case FP8_SCALE_BLOCK: *br = FP8_BLOCK; *bc = FP8_BLOCK; break;
    case FP8_SCALE_GROUP: *br = 1; *bc = FP8_BLOCK; break;
    }
    if (*br < 1) *br = 1;
    if (*bc < 1) *bc = 1;
}

/* Smallest power of two >= s, for finite s > 0. */
static float pow2_up(float s)
{
    int e;
    float fr = frexpf(s, &e);
    return fr == 0.5f ? s : ldexpf(1.0f, e);
}

static float scale_from_amax(float amax, const fp8_params *p, bool pow2)
{
    if (amax == 0.0f)
        return 1.0f;
    float s = amax / p->max;
    if (s == 0.0f)
        s = FLT_TRUE_MIN;  /* amax below 448 * 2^-149 underflows: avoid x / 0 */
    return pow2 ? pow2_up(s) : s;
}

float fp8_scale_from_amax(float amax, fp8_format f, bool pow2_scale)
{
    return scale_from_amax(amax, &PARAMS[f], pow2_scale);
}

/* Largest finite |x| of the block rows [r0, r1) x cols [c0, c1) of x[R, C]; NaN and
 * inf are skipped (NaN fails the comparison, inf exceeds FLT_MAX, both count as 0).
 * The FP8 rollout copy takes these maxima over every linear input, so the loop is
 * branch-free and compiled for AVX-512, AVX2 and the baseline (chosen at load time)
 * with the vectoriser on; a maximum does not depend on the order it is taken in, so
 * every clone returns the same value. */
VEC_KERNEL_WIDE(float, block_amax, (const float *x, int C, int r0, int r1, int c0, int c1),
                (x, C, r0, r1, c0, c1))
{
    float amax = 0.0f;
    for (int r = r0; r < r1; r++) {
        const float *row = x + (size_t)r * C;
#pragma omp simd reduction(max : amax)
        for (int c = c0; c < c1; c++) {
            float a = fabsf(row[c]);
            a = a <= FLT_MAX ? a : 0.0f;
            amax = a > amax ? a : amax;
        }
    }
    return amax;
}

/* scale[SR, SC] for x[R, C] with blocks br x bc. */
static void compute_scales(float *scale, const float *x, int R, int C, int br, int bc,
                           const fp8_params *p, bool pow2)
{
    int SR = (R + br - 1) / br, SC = (C + bc - 1) / bc;
    if (SR * SC == 1) {
        /* one block (per-tensor): split the rows across threads instead */
        float amax = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : amax)
        for (int r = 0; r < R; r++) {
            float a = block_amax(x, C, r, r + 1, 0, C);
            if (a > amax)
                amax = a;
        }
        scale[0] = scale_from_amax(amax, p, pow2);
        return;
    }
#pragma omp parallel for schedule(static) collapse(2)
    for (int i = 0; i < SR; i++)
        for (int j = 0; j < SC; j++) {
            int r1 = (i + 1) * br < R ? (i + 1) * br : R;
            int c1 = (j + 1) * bc < C ? (j + 1) * bc : C;
            scale[(size_t)i * SC + j] =
                scale_from_amax(block_amax(x, C, i * br, r1, j * bc, c1), p, pow2);
        }
}

/* ---- matrices ----------------------------------------------------------------------------- */

static int check_args(int R, int C, fp8_format f, fp8_scaling s, dllm_err *err)
{
    if (R <= 0 || C <= 0)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "fp8 quantise: bad shape [%d, %d]", R, C);
    if (!format_ok(f))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "fp8 quantise: unknown format %d", (int)f);
    if (!scaling_ok(s))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "fp8 quantise: unknown scaling %d", (int)s);
    return DLLM_OK;
}

int fp8_quantise(fp8_matrix *m, const float *x, int R, int C, fp8_format f, fp8_scaling s,
                 bool pow2_scale, dllm_err *err)
{
    int rc = check_args(R, C, f, s, err);
    if (rc)
        return rc;
    int br, bc;
    fp8_block_shape(s, R, C, &br, &bc);
    int SR = (R + br - 1) / br, SC = (C + bc - 1) / bc;

    if (m->q && (m->rows != R || m->cols != C)) {
        free(m->q);
        free(m->deq);
        free(m->qbf);
        free(m->qbf_scale);
        m->q = NULL;
        m->deq = NULL;
        m->qbf = NULL;
        m->qbf_scale = NULL;
    }
    if (!m->q)
        m->q = dllm_malloc((size_t)R * C);
    if (!m->scale || m->scale_rows * m->scale_cols != SR * SC)
        m->scale = dllm_realloc(m->scale, (size_t)SR * SC * sizeof(float));
    m->rows = R;
    m->cols = C;
    m->format = f;
    m->scaling = s;
    m->pow2_scale = pow2_scale;
    m->block_rows = br;
    m->block_cols = bc;
    m->scale_rows = SR;
    m->scale_cols = SC;
    m->deq_valid = false;
    m->qbf_valid = false;

    const fp8_params *p = &PARAMS[f];
    compute_scales(m->scale, x, R, C, br, bc, p, pow2_scale);
    const float *scale = m->scale;
    uint8_t *q = m->q;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        const float *srow = scale + (size_t)(r / br) * SC;
        for (int c = 0; c < C; c++)
            q[(size_t)r * C + c] = fp8_encode(x[(size_t)r * C + c] / srow[c / bc], f);
    }
    return DLLM_OK;
}

int fp8_quantise_weight(fp8_matrix *m, const float *w, int OC, int C, fp8_format f,
                        fp8_scaling s, bool pow2_scale, dllm_err *err)
{
    if (s == FP8_SCALE_GROUP)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "fp8 weight [%d, %d]: scaling must be tensor, channel or block",
                            OC, C);
    bool first = m->q == NULL;
    int rc = fp8_quantise(m, w, OC, C, f, s, pow2_scale, err);
    if (rc == DLLM_OK && first)
        m->act_scaling = FP8_SCALE_GROUP;  /* re-syncs keep a caller's choice */
    return rc;
}

int fp8_quantise_act(fp8_matrix *m, const float *a, int N, int K, fp8_format f,
                     fp8_scaling s, bool pow2_scale, dllm_err *err)
{
    if (s == FP8_SCALE_BLOCK)
        return dllm_err_set(err, DLLM_EXIT_INTERNAL,
                            "fp8 activations [%d, %d]: scaling must be group, channel or tensor",
                            N, K);
    return fp8_quantise(m, a, N, K, f, s, pow2_scale, err);
}

void fp8_dequantise(float *out, const fp8_matrix *m)
{
    float lut[256];
    decode_table(lut, m->format);
    int R = m->rows, C = m->cols, br = m->block_rows, bc = m->block_cols, SC = m->scale_cols;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        const float *srow = m->scale + (size_t)(r / br) * SC;
        const uint8_t *qrow = m->q + (size_t)r * C;
        float *orow = out + (size_t)r * C;
        for (int c = 0; c < C; c++)
            orow[c] = lut[qrow[c]] * srow[c / bc];
    }
}

void fp8_matrix_cache_dequant(fp8_matrix *m)
{
    if (m->deq_valid)
        return;
    if (!m->deq)
        m->deq = dllm_malloc((size_t)m->rows * m->cols * sizeof(float));
    fp8_dequantise(m->deq, m);
    m->deq_valid = true;
}

void fp8_matrix_free(fp8_matrix *m)
{
    free(m->q);
    free(m->scale);
    free(m->deq);
    free(m->qbf);
    free(m->qbf_scale);
    memset(m, 0, sizeof *m);
}

void fp8_scales(float *scale, const float *x, int R, int C, fp8_format f, fp8_scaling s,
                bool pow2_scale)
{
    int br, bc;
    fp8_block_shape(s, R, C, &br, &bc);
    compute_scales(scale, x, R, C, br, bc, &PARAMS[f], pow2_scale);
}

/* out[i] = fp8_round(x[i] / sc) * sc for n values: fp8_round's bit arithmetic with both
 * of its ranges computed and one selected, so the loop has no branch and vectorises
 * (vec_kernel.h). Integer arithmetic, rintf and exact power-of-two scalings only: every
 * clone gives fp8_round's bits (tests/unit/test_fp8.c compares them). */
VEC_KERNEL_NO_TRAP(void, round_scaled_run, (float *out, const float *x, int n, float sc, const fp8_params *p),
                   (out, x, n, sc, p))
{
    const int shift = 23 - p->mbits;
    const uint32_t half = (1u << (shift - 1)) - 1, keep = ~((1u << shift) - 1);
    const uint32_t minnorm = (uint32_t)(127 + 1 - p->bias) << 23;
    uint32_t maxbits;
    memcpy(&maxbits, &p->max, sizeof maxbits);
    const float up = ldexpf(1.0f, p->bias + p->mbits - 1), down = ldexpf(1.0f, 1 - p->bias - p->mbits);
    for (int i = 0; i < n; i++) {
        float y = x[i] / sc;
        uint32_t u;
        memcpy(&u, &y, sizeof u);
        uint32_t sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
        uint32_t rn = (a + half + ((a >> shift) & 1)) & keep;
        rn = rn > maxbits ? maxbits : rn;
        float qs = rintf(fabsf(y) * up) * down;
        uint32_t rs;
        memcpy(&rs, &qs, sizeof rs);
        uint32_t r = a >= minnorm ? rn : rs;
        r = a > 0x7F800000u ? 0x7FC00000u : r;
        r |= sign;
        float v;
        memcpy(&v, &r, sizeof v);
        out[i] = v * sc;
    }
}

void fp8_quant_dequant(float *out, const float *x, int R, int C, fp8_format f,
                       fp8_scaling s, bool pow2_scale)
{
    int br, bc;
    fp8_block_shape(s, R, C, &br, &bc);
    int SR = (R + br - 1) / br, SC = (C + bc - 1) / bc;
    float *scale = dllm_malloc((size_t)SR * SC * sizeof(float));
    /* all scales first, so out may alias x */
    compute_scales(scale, x, R, C, br, bc, &PARAMS[f], pow2_scale);
#pragma omp parallel for schedule(static) if ((size_t)R * C > 16384)
    for (int r = 0; r < R; r++) {
        const float *srow = scale + (size_t)(r / br) * SC;
        for (int c0 = 0; c0 < C; c0 += bc) {
            int c1 = c0 + bc < C ? c0 + bc : C;
            round_scaled_run(out + (size_t)r * C + c0, x + (size_t)r * C + c0, c1 - c0,
                             srow[c0 / bc], &PARAMS[f]);
        }
    }
    free(scale);
}
