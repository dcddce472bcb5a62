/* test_nvfp4: the NVFP4 format of kernels/nvfp4.h.
 *  - every E2M1 code decodes to the table value (signs, -0), and encodes back;
 *  - encoding is round-to-nearest-even at every boundary (the midpoint goes to
 *    the even code, the floats just either side to the nearer value), and agrees
 *    with a brute-force nearest search over a dense sweep and random floats;
 *  - saturation of overflow and infinities, NaN's documented code;
 *  - the two-level scales: hand-computed blocks (g = 1, block amax 12 -> E4M3
 *    scale 2), and on random matrices every block scale and code recomputed here
 *    from the definitions, bit for bit; edge blocks (C not a multiple of 16),
 *    all-zero blocks and tensors, non-finite entries;
 *  - the vectorised block loops at every boundary, NaN, infinities and -0, codes
 *    and the codeless path, against the brute-force encoding;
 *  - quantise-dequantise of random matrices within the format's error bound;
 *  - the W4A4 linear against a plain product of the dequantised operands;
 *  - the coarser scalings (block32, channel, tensor): every scale and code from the
 *    definition with that block width, the codeless path bit for bit, block16
 *    through the scaled entry points bit for bit the default, round trips of values
 *    each scaling represents exactly, an error that grows from block16 to block32 to
 *    channel to tensor on a fixed matrix, the linear's activations at the weight's
 *    scaling, and the names (a bad one refused). */
#include "kernels/fp8.h"
#include "kernels/nvfp4.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const float table[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* nearest table value by search; ties to the even code; past 6 saturates */
static uint8_t brute_encode(float x)
{
    if (isnan(x))
        return 7;
    const uint8_t s = signbit(x) ? 8 : 0;
    const double a = fabs((double)x);
    if (isinf(a))
        return (uint8_t)(s | 7);
    int best = 0;
    for (int c = 1; c < 8; c++) {
        const double e = fabs(a - table[c]), eb = fabs(a - table[best]);
        if (e < eb || (e == eb && c % 2 == 0))
            best = c;
    }
    return (uint8_t)(s | best);
}

static float frand(unsigned *st)
{
    *st = *st * 1664525u + 1013904223u;
    return (float)((*st >> 8) & 0xFFFFFF) / 16777216.0f;
}

static float gauss(unsigned *st)
{
    const float u1 = frand(st) + 1e-7f, u2 = frand(st);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

START_TEST(decode_every_code)
{
    for (int c = 0; c < 16; c++) {
        const float v = nvfp4_e2m1_decode((uint8_t)c);
        const float want = c < 8 ? table[c] : -table[c - 8];
        ck_assert_msg(v == want, "code %d: %g vs %g", c, v, want);
        ck_assert(!!signbit(v) == (c >= 8));
        ck_assert_uint_eq(nvfp4_e2m1_encode(v), (uint8_t)c);
        ck_assert(nvfp4_e2m1_decode((uint8_t)(c | 0xF0)) == v); /* high bits ignored */
    }
    ck_assert_uint_eq(nvfp4_e2m1_encode(-0.0f), 8);
}
END_TEST

START_TEST(round_to_nearest_even_at_every_boundary)
{
    for (int c = 0; c < 7; c++) {
        const float lo = table[c], hi = table[c + 1], mid = 0.5f * (lo + hi);
        const int even = c % 2 == 0 ? c : c + 1;
        for (int s = 0; s < 2; s++) {
            const float sg = s ? -1.0f : 1.0f;
            const uint8_t sb = s ? 8 : 0;
            ck_assert_msg(nvfp4_e2m1_encode(sg * mid) == (sb | even), "tie %g", sg * mid);
            ck_assert_uint_eq(nvfp4_e2m1_encode(sg * nextafterf(mid, 0.0f)), sb | c);
            ck_assert_uint_eq(nvfp4_e2m1_encode(sg * nextafterf(mid, 100.0f)), sb | (c + 1));
            ck_assert_uint_eq(nvfp4_e2m1_encode(sg * nextafterf(lo, 100.0f)), sb | c);
            ck_assert_uint_eq(nvfp4_e2m1_encode(sg * nextafterf(hi, 0.0f)), sb | (c + 1));
        }
    }
    /* a dense sweep over [-8, 8] and random magnitudes across many octaves */
    for (int k = -80000; k <= 80000; k++) {
        const float x = (float)k / 10000.0f;
        ck_assert_msg(nvfp4_e2m1_encode(x) == brute_encode(x), "x = %.9g", x);
    }
    unsigned st = 12345;
    for (int k = 0; k < 200000; k++) {
        const float x = (frand(&st) - 0.5f) * ldexpf(1.0f, (int)(frand(&st) * 40.0f) - 20);
        ck_assert_msg(nvfp4_e2m1_encode(x) == brute_encode(x), "x = %.9g", x);
    }
}
END_TEST

START_TEST(saturation_and_nan)
{
    const float big[5] = {6.0f, nextafterf(6.0f, 7.0f), 7.0f, 1e30f, INFINITY};
    for (int k = 0; k < 5; k++) {
        ck_assert_uint_eq(nvfp4_e2m1_encode(big[k]), 7);
        ck_assert_uint_eq(nvfp4_e2m1_encode(-big[k]), 15);
    }
    ck_assert_uint_eq(nvfp4_e2m1_encode(NAN), 7);
    ck_assert_uint_eq(nvfp4_e2m1_encode(1e-30f), 0);
    ck_assert_uint_eq(nvfp4_e2m1_encode(-1e-30f), 8);
}
END_TEST

/* g = 2688 / 2688 = 1. Row 0: block 0 amax 12 -> scale e4m3(2) = 2: 12 -> 6,
 * 3 -> 1.5, -2.9 -> -1.45 -> -1.5, 0.5 -> 0.25 -> 0 (tie to even); block 1 all 0.
 * Row 1: block 0 amax 2688 -> scale 448 (the largest E4M3), 2688 -> 6, 1000 ->
 * 2.23 -> 2; block 1 (the 4-element edge) amax 0.7 -> 0.1167 -> E4M3 0.1171875. */
START_TEST(hand_computed_scales)
{
    enum { R = 2, C = 20 };
    float x[R * C] = {0};
    x[0] = 12.0f;
    x[1] = 3.0f;
    x[2] = -2.9f;
    x[3] = 0.5f;
    x[C + 0] = 2688.0f;
    x[C + 1] = 1000.0f;
    x[C + 16] = 0.7f;
    x[C + 17] = -0.35f;
    nvfp4_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(nvfp4_quantise(&m, x, R, C, &err), 0);
    ck_assert_int_eq(m.scale_cols, 2);
    ck_assert(m.global_scale == 1.0f);
    ck_assert(nvfp4_block_decode_scale(&m, 0, 0) == 2.0f);
    ck_assert(nvfp4_block_decode_scale(&m, 0, 1) == 0.0f);
    ck_assert(nvfp4_block_decode_scale(&m, 1, 0) == 448.0f);
    ck_assert_uint_eq(m.scale[2], 0x7E);
    const float d11 = nvfp4_block_decode_scale(&m, 1, 1);
    ck_assert(d11 == 0.1171875f); /* E4M3 2^-4 * 1.875, nearest to 0.7/6 */
    ck_assert_uint_eq(m.q[0], 7);
    ck_assert_uint_eq(m.q[1], 3);
    ck_assert_uint_eq(m.q[2], 11); /* -1.5 */
    ck_assert_uint_eq(m.q[3], 0);
    ck_assert_uint_eq(m.q[C + 0], 7);
    ck_assert_uint_eq(m.q[C + 1], 4);
    ck_assert_uint_eq(m.q[C + 16], 7);  /* 0.7 / 0.1171875 = 5.97 -> 6 */
    ck_assert_uint_eq(m.q[C + 17], 13); /* -2.99 -> -3 */
    float deq[R * C];
    nvfp4_dequantise(deq, &m);
    ck_assert(deq[0] == 12.0f && deq[1] == 3.0f && deq[2] == -3.0f && deq[3] == 0.0f);
    ck_assert(deq[C + 0] == 2688.0f && deq[C + 1] == 896.0f);
    ck_assert(deq[C + 16] == 6.0f * d11);
    for (int c = 4; c < C; c++)
        ck_assert(deq[c] == 0.0f);
    /* an all-zero tensor: g = 1, every scale 0, every code 0 */
    memset(x, 0, sizeof x);
    ck_assert_int_eq(nvfp4_quantise(&m, x, R, C, &err), 0);
    ck_assert(m.global_scale == 1.0f);
    for (int k = 0; k < R * C; k++)
        ck_assert_uint_eq(m.q[k], 0);
    nvfp4_matrix_free(&m);
    /* bad shape */
    ck_assert_int_eq(nvfp4_quantise(&m, x, 1, 0, &err), DLLM_EXIT_INTERNAL);
}
END_TEST

/* every scale and code recomputed from the definitions in nvfp4.h */
static void check_against_definition(const float *x, int R, int C, const nvfp4_matrix *m)
{
    float amax = 0.0f;
    for (int k = 0; k < R * C; k++)
        if (isfinite(x[k]) && fabsf(x[k]) > amax)
            amax = fabsf(x[k]);
    const float g = amax > 0.0f ? amax / 2688.0f : 1.0f;
    ck_assert(m->global_scale == g);
    for (int r = 0; r < R; r++)
        for (int j = 0; j * 16 < C; j++) {
            float ab = 0.0f;
            const int c1 = j * 16 + 16 < C ? j * 16 + 16 : C;
            for (int c = j * 16; c < c1; c++)
                if (isfinite(x[r * C + c]) && fabsf(x[r * C + c]) > ab)
                    ab = fabsf(x[r * C + c]);
            const uint8_t sc = fp8_encode((ab / 6.0f) / g, FP8_E4M3);
            ck_assert_uint_eq(m->scale[r * m->scale_cols + j], sc);
            const float d = fp8_decode(sc, FP8_E4M3) * g;
            for (int c = j * 16; c < c1; c++) {
                const float v = x[r * C + c];
                const uint8_t want = d > 0.0f ? brute_encode(v / d) : (signbit(v) ? 8 : 0);
                ck_assert_msg(m->q[r * C + c] == want, "[%d, %d] %g: code %u vs %u", r, c, v,
                              m->q[r * C + c], want);
            }
        }
}

START_TEST(random_matrices_bit_exact_and_bounded)
{
    const int shapes[4][2] = {{7, 16}, {5, 37}, {33, 128}, {1, 3}};
    unsigned st = 99;
    for (int s = 0; s < 4; s++) {
        const int R = shapes[s][0], C = shapes[s][1];
        float *x = malloc(sizeof *x * (size_t)R * C), *deq = malloc(sizeof *x * (size_t)R * C);
        float *qd = malloc(sizeof *x * (size_t)R * C);
        for (int k = 0; k < R * C; k++) /* rows of very different magnitudes */
            x[k] = gauss(&st) * ldexpf(1.0f, (k / C) % 9 - 4);
        nvfp4_matrix m = {0};
        dllm_err err = {0};
        ck_assert_int_eq(nvfp4_quantise(&m, x, R, C, &err), 0);
        check_against_definition(x, R, C, &m);
        nvfp4_dequantise(deq, &m);
        double se = 0, sx = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                const size_t k = (size_t)r * C + c;
                const float d = nvfp4_block_decode_scale(&m, r, c / 16);
                const double v = fabs((double)x[k]) / d;
                /* half the spacing around v (0.25 below 2, 0.5 below 4, 1 up to 6),
                 * or the distance to 6 when the E4M3-rounded scale saturates it */
                const double half = v < 2 ? 0.25 : v < 4 ? 0.5 : 1.0;
                const double bound = d * (v > 6 ? v - 6 : half) + 1e-6 * fabs(x[k]);
                ck_assert_msg(fabs((double)deq[k] - x[k]) <= bound, "[%d, %d] %g -> %g (bound %g)",
                              r, c, x[k], deq[k], bound);
                ck_assert(v <= 6.0 * (1 + 1.0 / 16)); /* the block scale is near amax / 6 */
                se += ((double)deq[k] - x[k]) * ((double)deq[k] - x[k]);
                sx += (double)x[k] * x[k];
            }
        if (R * C >= 256) /* 4 bits: about 10% relative error on Gaussian data */
            ck_assert_msg(sqrt(se / sx) < 0.15, "relative error %g", sqrt(se / sx));
        /* the codeless path agrees bit for bit, in place too */
        nvfp4_quant_dequant(qd, x, R, C);
        ck_assert(memcmp(qd, deq, sizeof *x * (size_t)R * C) == 0);
        memcpy(qd, x, sizeof *x * (size_t)R * C);
        nvfp4_quant_dequant(qd, qd, R, C);
        ck_assert(memcmp(qd, deq, sizeof *x * (size_t)R * C) == 0);
        /* re-quantising reuses the buffers and drops the cache */
        nvfp4_matrix_cache_dequant(&m);
        ck_assert(m.deq_valid && memcmp(m.deq, deq, sizeof *x * (size_t)R * C) == 0);
        uint8_t *q0 = m.q;
        ck_assert_int_eq(nvfp4_quantise(&m, x, R, C, &err), 0);
        ck_assert(m.q == q0 && !m.deq_valid);
        nvfp4_matrix_free(&m);
        free(x);
        free(deq);
        free(qd);
    }
}
END_TEST

START_TEST(nonfinite_entries)
{
    float x[16] = {1.0f, NAN, INFINITY, -INFINITY, 0.25f};
    nvfp4_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(nvfp4_quantise(&m, x, 1, 16, &err), 0);
    check_against_definition(x, 1, 16, &m); /* amax skips NaN and inf */
    ck_assert(nvfp4_block_decode_scale(&m, 0, 0) > 0.0f);
    ck_assert_uint_eq(m.q[0], 7);
    ck_assert_uint_eq(m.q[1], 7);  /* NaN: +6 */
    ck_assert_uint_eq(m.q[2], 7);  /* inf saturates */
    ck_assert_uint_eq(m.q[3], 15);
    nvfp4_matrix_free(&m);
}
END_TEST

/* The matrix paths count comparisons in vectorised block loops instead of calling
 * the scalar encoder: at every rounding boundary, the floats either side of it,
 * both signs, -0, NaN and infinities, in blocks whose decode scale is exactly 1
 * (a 2688 elsewhere makes g = 1; a 6 in the block makes its scale 1), the codes and
 * the codeless path's values are the brute-force encoding's, bit for bit. */
START_TEST(block_loops_match_the_definition_at_boundaries)
{
    const float edges[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.0f, 0.5f, 6.0f, 7.0f};
    enum { C = 16 * 12 };
    float x[2 * C];
    int n = 0;
    x[n++] = 2688.0f;
    while (n % 16)
        x[n++] = 1.0f;
    for (int e = 0; e < (int)(sizeof edges / sizeof *edges); e++)
        for (int sg = 0; sg < 2; sg++) {
            const float v = sg ? -edges[e] : edges[e];
            const float vals[3] = {nextafterf(v, -10.0f), v, nextafterf(v, 10.0f)};
            for (int k = 0; k < 3; k++) {
                if (n % 16 == 0)
                    x[n++] = 6.0f; /* the block's max: scale exactly 1 */
                x[n++] = vals[k];
            }
        }
    const float odd[] = {-0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-30f, -1e-30f};
    for (int k = 0; k < (int)(sizeof odd / sizeof *odd); k++) {
        if (n % 16 == 0)
            x[n++] = 6.0f;
        x[n++] = odd[k];
    }
    while (n < 2 * C - 16)
        x[n++] = 0.0f;
    while (n < 2 * C) /* an all-zero block with signs: scale 0 */
        x[n] = n % 2 ? -0.0f : 0.0f, n++;
    nvfp4_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(nvfp4_quantise(&m, x, 2, C, &err), 0);
    ck_assert(m.global_scale == 1.0f);
    check_against_definition(x, 2, C, &m);
    float out[2 * C];
    nvfp4_quant_dequant(out, x, 2, C);
    for (int k = 0; k < 2 * C; k++) {
        const float d = nvfp4_block_decode_scale(&m, k / C, (k % C) / 16);
        const float want = nvfp4_e2m1_decode(m.q[k]) * d;
        ck_assert_msg(memcmp(&out[k], &want, sizeof want) == 0, "%d: %a -> %a, want %a", k,
                      x[k], out[k], want);
    }
    nvfp4_matrix_free(&m);
}
END_TEST

/* check_against_definition with B elements per scale along C, one amax for the tensor
 * when tensor is set */
static void check_scaled_definition(const float *x, int R, int C, int B, bool tensor,
                                    const nvfp4_matrix *m)
{
    float amax = 0.0f;
    for (int k = 0; k < R * C; k++)
        if (isfinite(x[k]) && fabsf(x[k]) > amax)
            amax = fabsf(x[k]);
    const float g = amax > 0.0f ? amax / 2688.0f : 1.0f;
    ck_assert(m->global_scale == g);
    ck_assert_int_eq(m->block, B);
    ck_assert_int_eq(m->scale_cols, (C + B - 1) / B);
    for (int r = 0; r < R; r++)
        for (int j = 0; j * B < C; j++) {
            float ab = 0.0f;
            const int c1 = j * B + B < C ? j * B + B : C;
            for (int c = j * B; c < c1; c++)
                if (isfinite(x[r * C + c]) && fabsf(x[r * C + c]) > ab)
                    ab = fabsf(x[r * C + c]);
            if (tensor)
                ab = amax;
            const uint8_t sc = fp8_encode((ab / 6.0f) / g, FP8_E4M3);
            ck_assert_uint_eq(m->scale[r * m->scale_cols + j], sc);
            const float d = fp8_decode(sc, FP8_E4M3) * g;
            for (int c = j * B; c < c1; c++) {
                const float v = x[r * C + c];
                const uint8_t want = d > 0.0f ? brute_encode(v / d) : (signbit(v) ? 8 : 0);
                ck_assert_msg(m->q[r * C + c] == want, "B %d [%d, %d] %g: code %u vs %u", B, r,
                              c, v, m->q[r * C + c], want);
            }
        }
}

static const nvfp4_scaling all_scalings[NVFP4_N_SCALING] = {
    NVFP4_SCALE_BLOCK16, NVFP4_SCALE_BLOCK32, NVFP4_SCALE_CHANNEL, NVFP4_SCALE_TENSOR};

START_TEST(scaling_names_and_widths)
{
    for (int i = 0; i < NVFP4_N_SCALING; i++) {
        nvfp4_scaling s = NVFP4_SCALE_TENSOR;
        dllm_err err = {0};
        ck_assert_int_eq(nvfp4_scaling_parse(nvfp4_scaling_name(all_scalings[i]), &s, &err), 0);
        ck_assert_int_eq(s, all_scalings[i]);
    }
    ck_assert_str_eq(nvfp4_scaling_name(NVFP4_SCALE_BLOCK16), "block16");
    ck_assert_int_eq(nvfp4_block_width(NVFP4_SCALE_BLOCK16, 100), 16);
    ck_assert_int_eq(nvfp4_block_width(NVFP4_SCALE_BLOCK32, 100), 32);
    ck_assert_int_eq(nvfp4_block_width(NVFP4_SCALE_CHANNEL, 100), 100);
    ck_assert_int_eq(nvfp4_block_width(NVFP4_SCALE_TENSOR, 100), 100);
    const char *bad[] = {"block", "16", "Block16", "", "row"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nvfp4_scaling s;
        dllm_err err = {0};
        ck_assert_int_eq(nvfp4_scaling_parse(bad[i], &s, &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, "block16, block32, channel or tensor"), "%s", err.msg);
    }
    nvfp4_matrix m = {0};
    dllm_err err = {0};
    float x[4] = {1, 2, 3, 4};
    ck_assert_int_eq(nvfp4_quantise_scaled(&m, x, 1, 4, (nvfp4_scaling)7, &err),
                     DLLM_EXIT_INTERNAL);
    nvfp4_matrix_free(&m);
}
END_TEST

START_TEST(coarser_scalings_match_the_definition)
{
    const int shapes[4][2] = {{7, 16}, {5, 37}, {33, 128}, {3, 70}};
    unsigned st = 5;
    for (int s = 0; s < 4; s++) {
        const int R = shapes[s][0], C = shapes[s][1];
        const size_t n = (size_t)R * C;
        float *x = malloc(sizeof *x * n), *deq = malloc(sizeof *x * n);
        float *qd = malloc(sizeof *x * n), *ref = malloc(sizeof *x * n);
        for (size_t k = 0; k < n; k++)
            x[k] = gauss(&st) * ldexpf(1.0f, (int)(k / 16) % 7 - 3);
        x[3] = NAN; /* skipped by every amax */
        x[n - 1] = 0.0f;
        for (int i = 0; i < NVFP4_N_SCALING; i++) {
            const nvfp4_scaling sc = all_scalings[i];
            nvfp4_matrix m = {0};
            dllm_err err = {0};
            ck_assert_int_eq(nvfp4_quantise_scaled(&m, x, R, C, sc, &err), 0);
            ck_assert_int_eq(m.scaling, sc);
            check_scaled_definition(x, R, C, nvfp4_block_width(sc, C), sc == NVFP4_SCALE_TENSOR,
                                    &m);
            nvfp4_dequantise(deq, &m);
            nvfp4_quant_dequant_scaled(qd, x, R, C, sc);
            ck_assert_msg(memcmp(qd, deq, sizeof *x * n) == 0, "%s: codeless path differs",
                          nvfp4_scaling_name(sc));
            memcpy(qd, x, sizeof *x * n);
            nvfp4_quant_dequant_scaled(qd, qd, R, C, sc);
            ck_assert(memcmp(qd, deq, sizeof *x * n) == 0);
            if (sc == NVFP4_SCALE_BLOCK16) { /* the scaled entry points are the default's */
                nvfp4_matrix d = {0};
                ck_assert_int_eq(nvfp4_quantise(&d, x, R, C, &err), 0);
                ck_assert(memcmp(d.q, m.q, n) == 0 && memcmp(d.scale, m.scale, (size_t)R * m.scale_cols) == 0);
                nvfp4_quant_dequant(ref, x, R, C);
                ck_assert(memcmp(ref, deq, sizeof *x * n) == 0);
                nvfp4_matrix_free(&d);
            }
            if (sc == NVFP4_SCALE_TENSOR) /* one scale: every row's equal */
                for (int r = 1; r < R; r++)
                    ck_assert_uint_eq(m.scale[r], m.scale[0]);
            /* re-quantising at another scaling gets the other layout */
            const nvfp4_scaling other = all_scalings[(i + 1) % NVFP4_N_SCALING];
            ck_assert_int_eq(nvfp4_quantise_scaled(&m, x, R, C, other, &err), 0);
            check_scaled_definition(x, R, C, nvfp4_block_width(other, C),
                                    other == NVFP4_SCALE_TENSOR, &m);
            nvfp4_matrix_free(&m);
        }
        free(x);
        free(deq);
        free(qd);
        free(ref);
    }
}
END_TEST

/* Values a scaling represents exactly come back bit for bit: with g = 1 (the tensor's
 * amax 2688), a row whose every 16-block holds 6 s, s an E4M3 value, and E2M1 values
 * times s elsewhere, has decode scale s under block16, block32 and channel; a tensor
 * of E2M1 values times 448 has decode scale 448 under all four. */
START_TEST(representable_values_round_trip)
{
    enum { R = 4, C = 64 };
    const float s_row[R] = {448.0f, 2.0f, 0.5f, 0.0390625f};
    float x[R * C], out[R * C];
    unsigned st = 11;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const float v = c % 16 == 5 ? 6.0f : table[(int)(8 * frand(&st)) & 7];
            x[r * C + c] = (c % 3 ? v : -v) * s_row[r];
        }
    for (int i = 0; i < 3; i++) {
        nvfp4_matrix m = {0};
        dllm_err err = {0};
        ck_assert_int_eq(nvfp4_quantise_scaled(&m, x, R, C, all_scalings[i], &err), 0);
        ck_assert(m.global_scale == 1.0f);
        nvfp4_dequantise(out, &m);
        for (int k = 0; k < R * C; k++)
            ck_assert_msg(out[k] == x[k], "%s [%d]: %g -> %g", nvfp4_scaling_name(all_scalings[i]),
                          k, x[k], out[k]);
        nvfp4_quant_dequant_scaled(out, x, R, C, all_scalings[i]);
        ck_assert(memcmp(out, x, sizeof x) == 0);
        nvfp4_matrix_free(&m);
    }
    for (int k = 0; k < R * C; k++)
        x[k] = table[k % 8] * (k % 5 ? 448.0f : -448.0f);
    for (int i = 0; i < NVFP4_N_SCALING; i++) {
        nvfp4_quant_dequant_scaled(out, x, R, C, all_scalings[i]);
        ck_assert_msg(memcmp(out, x, sizeof x) == 0, "%s", nvfp4_scaling_name(all_scalings[i]));
    }
}
END_TEST

/* Coarser scales cost accuracy: on a fixed matrix whose magnitudes vary along rows
 * and between rows (as weights and activations do), the relative rms error of
 * quantise-dequantise grows strictly from block16 to block32 to channel to tensor. */
START_TEST(error_grows_from_block_to_tensor)
{
    enum { R = 48, C = 256 };
    float *x = malloc(sizeof(float) * R * C), *out = malloc(sizeof(float) * R * C);
    unsigned st = 2026;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) /* a magnitude per 16 elements and per row */
            x[r * C + c] = gauss(&st) * ldexpf(1.0f, (c / 16 * 5 + r * 3) % 11 - 5);
    double rel[NVFP4_N_SCALING];
    for (int i = 0; i < NVFP4_N_SCALING; i++) {
        nvfp4_quant_dequant_scaled(out, x, R, C, all_scalings[i]);
        double se = 0, sx = 0;
        for (int k = 0; k < R * C; k++) {
            se += ((double)out[k] - x[k]) * ((double)out[k] - x[k]);
            sx += (double)x[k] * x[k];
        }
        rel[i] = sqrt(se / sx);
    }
    ck_assert_msg(rel[0] < 0.15, "block16 %g", rel[0]);
    for (int i = 1; i < NVFP4_N_SCALING; i++)
        ck_assert_msg(rel[i] > rel[i - 1] * 1.02, "%s %g is not above %s %g",
                      nvfp4_scaling_name(all_scalings[i]), rel[i],
                      nvfp4_scaling_name(all_scalings[i - 1]), rel[i - 1]);
    free(x);
    free(out);
}
END_TEST

/* the linear quantises its input at the weight's scaling */
START_TEST(linear_follows_the_weight_scaling)
{
    enum { N = 6, C = 48, OC = 5 };
    unsigned st = 3;
    float w[OC * C], a[N * C], out[N * OC], wd[OC * C], ad[N * C];
    for (int k = 0; k < OC * C; k++)
        w[k] = 0.05f * gauss(&st);
    for (int k = 0; k < N * C; k++)
        a[k] = gauss(&st) * ldexpf(1.0f, k % 9 - 4);
    for (int i = 0; i < NVFP4_N_SCALING; i++) {
        nvfp4_matrix m = {0};
        dllm_err err = {0};
        ck_assert_int_eq(nvfp4_quantise_scaled(&m, w, OC, C, all_scalings[i], &err), 0);
        op_nvfp4_linear_fwd(out, a, &m, N, C, OC);
        nvfp4_dequantise(wd, &m);
        nvfp4_quant_dequant_scaled(ad, a, N, C, all_scalings[i]);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double ref = 0;
                for (int c = 0; c < C; c++)
                    ref += (double)ad[n * C + c] * wd[o * C + c];
                ck_assert_msg(fabs(out[n * OC + o] - ref) <= 1e-5 * (1 + fabs(ref)),
                              "%s: %g vs %g", nvfp4_scaling_name(all_scalings[i]),
                              out[n * OC + o], ref);
            }
        nvfp4_matrix_free(&m);
    }
}
END_TEST

START_TEST(linear_matches_dequantised_product)
{
    enum { N = 5, C = 40, OC = 7 };
    unsigned st = 7;
    float w[OC * C], a[N * C], out[N * OC], wd[OC * C], ad[N * C];
    for (int k = 0; k < OC * C; k++)
        w[k] = 0.05f * gauss(&st);
    for (int k = 0; k < N * C; k++)
        a[k] = gauss(&st);
    nvfp4_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(nvfp4_quantise(&m, w, OC, C, &err), 0);
    op_nvfp4_linear_fwd(out, a, &m, N, C, OC);
    nvfp4_dequantise(wd, &m);
    nvfp4_quant_dequant(ad, a, N, C);
    double err_fp32 = 0, ref_norm = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double ref = 0, exact = 0;
            for (int c = 0; c < C; c++) {
                ref += (double)ad[n * C + c] * wd[o * C + c];
                exact += (double)a[n * C + c] * w[o * C + c];
            }
            ck_assert_msg(fabs(out[n * OC + o] - ref) <= 1e-5 * (1 + fabs(ref)), "%g vs %g",
                          out[n * OC + o], ref);
            err_fp32 += (ref - exact) * (ref - exact);
            ref_norm += exact * exact;
        }
    /* W4A4 is far from the fp32 product, but not wildly */
    ck_assert(sqrt(err_fp32 / ref_norm) > 1e-3 && sqrt(err_fp32 / ref_norm) < 0.5);
    nvfp4_matrix_free(&m);
}
END_TEST

static Suite *nvfp4_suite(void)
{
    Suite *s = suite_create("nvfp4");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, decode_every_code);
    tcase_add_test(tc, round_to_nearest_even_at_every_boundary);
    tcase_add_test(tc, saturation_and_nan);
    tcase_add_test(tc, hand_computed_scales);
    tcase_add_test(tc, random_matrices_bit_exact_and_bounded);
    tcase_add_test(tc, nonfinite_entries);
    tcase_add_test(tc, block_loops_match_the_definition_at_boundaries);
    tcase_add_test(tc, linear_matches_dequantised_product);
    tcase_add_test(tc, scaling_names_and_widths);
    tcase_add_test(tc, coarser_scalings_match_the_definition);
    tcase_add_test(tc, representable_values_round_trip);
    tcase_add_test(tc, error_grows_from_block_to_tensor);
    tcase_add_test(tc, linear_follows_the_weight_scaling);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return nvfp4_suite();
}
