/* test_fp8.c: FP8 numbers, scaled quantisation and the W8A8 linear against goldens
 * written by tests/ref/make_fp8_goldens.py (PyTorch float8 casts, numpy scaling).
 *
 * Reads DLLM_TEST_DATA/fp8/. The scaling cases' inputs are regenerated here with the
 * same splitmix64 formula as the script (matrix_input), so only codes and scales are
 * stored. */
#include <check.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"
#include "kernels/fp8.h"
#include "tests/harness/harness.h"

static const fp8_format FORMATS[2] = {FP8_E4M3, FP8_E5M2};

/* ---- fixtures --------------------------------------------------------------------------- */

static char *data_path(const char *name)
{
    const char *dir = getenv("DLLM_TEST_DATA");
    ck_assert_msg(dir != NULL, "DLLM_TEST_DATA is not set");
    size_t n = strlen(dir) + strlen(name) + 8;
    char *p = dllm_malloc(n);
    snprintf(p, n, "%s/fp8/%s", dir, name);
    return p;
}

/* Reads fp8/<name>; checks its size when want >= 0. */
static char *read_data(const char *name, long want, size_t *len)
{
    char *path = data_path(name), *buf;
    dllm_err err = {0};
    size_t n;
    int rc = dllm_read_file(path, &buf, &n, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_msg(want < 0 || n == (size_t)want, "%s: %zu bytes, expected %ld", path, n, want);
    free(path);
    if (len)
        *len = n;
    return buf;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Golden decode tables: [format][code]. */
static float GOLD_DECODE[2][256];

static void load_decode_goldens(void)
{
    const char *names[2] = {"decode_e4m3.bin", "decode_e5m2.bin"};
    for (int f = 0; f < 2; f++) {
        char *buf = read_data(names[f], 256 * 4, NULL);
        memcpy(GOLD_DECODE[f], buf, sizeof GOLD_DECODE[f]);
        free(buf);
    }
}

/* ---- scalars ------------------------------------------------------------------------------ */

START_TEST(test_decode_all_codes)
{
    load_decode_goldens();
    for (int f = 0; f < 2; f++) {
        int nans = 0;
        for (int c = 0; c < 256; c++) {
            float got = fp8_decode((uint8_t)c, FORMATS[f]), want = GOLD_DECODE[f][c];
            if (isnan(want)) {
                nans++;
                ck_assert_msg(isnan(got), "%s code 0x%02x: got %g, want NaN",
                              fp8_format_name(FORMATS[f]), c, got);
            } else {
                ck_assert_msg(bits_of(got) == bits_of(want),
                              "%s code 0x%02x: got %a, want %a",
                              fp8_format_name(FORMATS[f]), c, got, want);
            }
        }
        ck_assert_int_eq(nans, f == 0 ? 2 : 6);  /* E4M3: S.1111.111; E5M2: S.11111.{01,10,11} */
    }
    ck_assert(fp8_decode(fp8_max_code(FP8_E4M3), FP8_E4M3) == 448.0f);
    ck_assert(fp8_decode(fp8_max_code(FP8_E5M2), FP8_E5M2) == 57344.0f);
    ck_assert(fp8_max(FP8_E4M3) == 448.0f && fp8_max(FP8_E5M2) == 57344.0f);
}
END_TEST

START_TEST(test_roundtrip_codes)
{
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < 256; c++) {
            float v = fp8_decode((uint8_t)c, FORMATS[f]);
            if (isnan(v) || isinf(v))
                continue;  /* inf saturates to max by contract: test_saturation */
            ck_assert_msg(fp8_encode(v, FORMATS[f]) == c, "%s code 0x%02x (%a) -> 0x%02x",
                          fp8_format_name(FORMATS[f]), c, v, fp8_encode(v, FORMATS[f]));
        }
    ck_assert_int_eq(fp8_encode(-0.0f, FP8_E4M3), 0x80);
    ck_assert_int_eq(fp8_encode(-0.0f, FP8_E5M2), 0x80);
    ck_assert_int_eq(fp8_encode(0.0f, FP8_E4M3), 0x00);
}
END_TEST

START_TEST(test_encode_golden)
{
    size_t n;
    char *xb = read_data("encode_inputs.bin", -1, &n);
    ck_assert(n % 4 == 0 && n / 4 > 20000);
    n /= 4;
    const float *x = (const float *)xb;
    const char *names[2] = {"encode_e4m3.bin", "encode_e5m2.bin"};
    for (int f = 0; f < 2; f++) {
        uint8_t *want = (uint8_t *)read_data(names[f], (long)n, NULL);
        uint8_t *got = dllm_malloc(n);
        fp8_encode_array(got, x, n, FORMATS[f]);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i] && bad++ < 5)
                fprintf(stderr, "%s: x = %a: got 0x%02x, want 0x%02x\n",
                        fp8_format_name(FORMATS[f]), x[i], got[i], want[i]);
        ck_assert_msg(bad == 0, "%s: %zu of %zu encodings differ from torch",
                      fp8_format_name(FORMATS[f]), bad, n);
        free(got);
        free(want);
    }
    free(xb);
}
END_TEST

/* Independent of torch: encode(v) is the nearest code to clamp(v), ties to the code
 * with an even mantissa, checked by search over the golden decode table. */
START_TEST(test_encode_nearest_search)
{
    load_decode_goldens();
    uint64_t s = 12345;
    for (int f = 0; f < 2; f++) {
        float mx = fp8_max(FORMATS[f]);
        for (int it = 0; it < 100000; it++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t u = (uint32_t)(s >> 32);
            /* exponent in [2^-22, 2^18): the interesting range of both formats */
            u = (u & 0x807FFFFFu) | ((uint32_t)(127 - 22 + (u >> 23) % 40) << 23);
            float v;
            memcpy(&v, &u, sizeof v);
            double t = fmin(fmax((double)v, -mx), mx);
            int best = -1;
            double bd = INFINITY;
            for (int c = 0; c < 256; c++) {
                double d = GOLD_DECODE[f][c];
                if (!isfinite(d) || (signbit(d) != signbit(t)))
                    continue;
                double e = fabs(d - t);
                if (e < bd || (e == bd && (c & 1) == 0)) {
                    bd = e;
                    best = c;
                }
            }
            uint8_t got = fp8_encode(v, FORMATS[f]);
            ck_assert_msg(got == best, "%s: %a -> 0x%02x, nearest is 0x%02x",
                          fp8_format_name(FORMATS[f]), v, got, best);
        }
    }
}
END_TEST

START_TEST(test_saturation)
{
    const float big[] = {INFINITY, FLT_MAX, 1e30f, 1e6f, 65536.0f, 61440.0f, 480.0f, 464.0f};
    for (int f = 0; f < 2; f++) {
        uint8_t mc = fp8_max_code(FORMATS[f]);
        float mx = fp8_max(FORMATS[f]);
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
            if (big[i] < mx)
                continue;
            ck_assert_int_eq(fp8_encode(big[i], FORMATS[f]), mc);
            ck_assert_int_eq(fp8_encode(-big[i], FORMATS[f]), 0x80 | mc);
        }
        /* just below max rounds to max, not above */
        ck_assert_int_eq(fp8_encode(nextafterf(mx, 0), FORMATS[f]), mc);
    }
    ck_assert_int_eq(fp8_encode(464.0f, FP8_E4M3), 0x7E);  /* the tie beyond max */
    ck_assert_int_eq(fp8_encode(-INFINITY, FP8_E5M2), 0xFB);
}
END_TEST

START_TEST(test_nan)
{
    for (int f = 0; f < 2; f++) {
        uint8_t c = fp8_encode(NAN, FORMATS[f]), cn = fp8_encode(-NAN, FORMATS[f]);
        ck_assert_int_eq(c, 0x7F);
        ck_assert_int_eq(cn, 0xFF);
        ck_assert(isnan(fp8_decode(c, FORMATS[f])) && isnan(fp8_decode(cn, FORMATS[f])));
        uint32_t sig = 0x7F800001u;  /* a signalling NaN payload is still NaN */
        float snan;
        memcpy(&snan, &sig, sizeof snan);
        ck_assert(isnan(fp8_decode(fp8_encode(snan, FORMATS[f]), FORMATS[f])));
    }
    ck_assert(isinf(fp8_decode(0x7C, FP8_E5M2)) && fp8_decode(0xFC, FP8_E5M2) < 0);
}
END_TEST

/* fp8_round == decode(encode(x)) bit for bit: every 977th fp32 bit pattern (both
 * signs, every exponent, NaN and inf included) and every value near each format's
 * rounding boundaries (midpoints between adjacent codes, +-1 ulp). */
START_TEST(test_round_is_decode_encode)
{
    for (int f = 0; f < 2; f++) {
        fp8_format F = FORMATS[f];
        long checked = 0;
        for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 977) {
            uint32_t b = (uint32_t)u;
            float x;
            memcpy(&x, &b, sizeof x);
            float want = fp8_decode(fp8_encode(x, F), F), got = fp8_round(x, F);
            if (bits_of(got) != bits_of(want)) /* one assertion per mismatch only: */
                ck_abort_msg("%s: round(%a) = %a, want %a", fp8_format_name(F), (double)x,
                             (double)got, (double)want); /* Check marks each passing one */
            checked++;
        }
        for (int c = 0; c < 0x7F; c++) {
            float lo = fp8_decode((uint8_t)c, F), hi = fp8_decode((uint8_t)(c + 1), F);
            if (!isfinite(lo) || !isfinite(hi))
                continue;
            float mid = lo + (hi - lo) / 2; /* exact: a code's neighbours differ by one step */
            const float probes[] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), lo, hi};
            for (int k = 0; k < 5; k++)
                for (int sg = -1; sg <= 1; sg += 2) {
                    float x = probes[k] * (float)sg;
                    float want = fp8_decode(fp8_encode(x, F), F), got = fp8_round(x, F);
                    ck_assert_msg(bits_of(got) == bits_of(want), "%s: round(%a) = %a, want %a",
                                  fp8_format_name(F), (double)x, (double)got, (double)want);
                }
        }
        ck_assert(checked > 4000000);
    }
}
END_TEST

START_TEST(test_names)
{
    dllm_err err = {0};
    fp8_format f;
    fp8_scaling s;
    ck_assert_int_eq(fp8_format_parse("e5m2", &f, &err), 0);
    ck_assert_int_eq(f, FP8_E5M2);
    ck_assert_int_eq(fp8_scaling_parse("block", &s, &err), 0);
    ck_assert_int_eq(s, FP8_SCALE_BLOCK);
    ck_assert_str_eq(fp8_scaling_name(FP8_SCALE_GROUP), "group");
    ck_assert_int_eq(fp8_format_parse("e4m3fnuz", &f, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "e4m3fnuz") && strstr(err.msg, "e5m2"), "%s", err.msg);
    ck_assert_int_eq(fp8_scaling_parse("row", &s, &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "'row'"), "%s", err.msg);
}
END_TEST

/* ---- scaling cases ------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    char name[64], file[96];
    int R, C, SR, SC, seed, zr0, zr1, zc0, zc1;
    fp8_format format;
    fp8_scaling scaling;
    bool pow2;
    float *x;        /* (R, C) input */
    uint8_t *q;      /* (R, C) golden codes */
    float *scale;    /* (SR, SC) golden scales */
} qcase;

/* Same formula as matrix_input() in tests/ref/make_fp8_goldens.py. */
static float *matrix_input(const qcase *k)
{
    float *x = dllm_malloc((size_t)k->R * k->C * sizeof(float));
    for (int r = 0; r < k->R; r++)
        for (int c = 0; c < k->C; c++) {
            uint64_t h = splitmix64((uint64_t)k->seed * 1000003u + (uint64_t)r * k->C + c);
            int32_t m = (int32_t)(h >> 40) - (1 << 23);
            int e = -23 + ((r * 7 + c / 64) % 13) - 6;
            bool zero = r >= k->zr0 && r < k->zr1 && c >= k->zc0 && c < k->zc1;
            x[(size_t)r * k->C + c] = zero ? 0.0f : ldexpf((float)m, e);
        }
    return x;
}

static int geti(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_integer(v), "quant_cases.json: '%s' missing", key);
    return (int)json_integer_value(v);
}

static void get_pair(json_t *o, const char *key, int *a, int *b)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_array(v) && json_array_size(v) == 2, "quant_cases.json: '%s'", key);
    *a = (int)json_integer_value(json_array_get(v, 0));
    *b = (int)json_integer_value(json_array_get(v, 1));
}

static qcase *load_cases(int *n)
{
    char *txt = read_data("quant_cases.json", -1, NULL);
    json_error_t jerr;
    json_t *root = json_loads(txt, 0, &jerr);
    ck_assert_msg(root, "quant_cases.json:%d: %s", jerr.line, jerr.text);
    json_t *arr = json_object_get(root, "cases");
    ck_assert(json_is_array(arr) && json_array_size(arr) > 0);
    *n = (int)json_array_size(arr);
    qcase *cs = dllm_calloc((size_t)*n, sizeof *cs);
    dllm_err err = {0};
    for (int i = 0; i < *n; i++) {
        json_t *o = json_array_get(arr, (size_t)i);
        qcase *k = &cs[i];
        snprintf(k->name, sizeof k->name, "%s", json_string_value(json_object_get(o, "name")));
        snprintf(k->file, sizeof k->file, "%s", json_string_value(json_object_get(o, "file")));
        k->R = geti(o, "rows");
        k->C = geti(o, "cols");
        k->SR = geti(o, "scale_rows");
        k->SC = geti(o, "scale_cols");
        k->seed = geti(o, "seed");
        get_pair(o, "zero_rows", &k->zr0, &k->zr1);
        get_pair(o, "zero_cols", &k->zc0, &k->zc1);
        ck_assert_int_eq(fp8_format_parse(json_string_value(json_object_get(o, "format")),
                                          &k->format, &err), 0);
        ck_assert_int_eq(fp8_scaling_parse(json_string_value(json_object_get(o, "scaling")),
                                           &k->scaling, &err), 0);
        k->pow2 = json_is_true(json_object_get(o, "pow2"));
        size_t nq = (size_t)k->R * k->C, ns = (size_t)k->SR * k->SC;
        char *buf = read_data(k->file, (long)(nq + 4 * ns), NULL);
        k->q = dllm_malloc(nq);
        k->scale = dllm_malloc(ns * sizeof(float));
        memcpy(k->q, buf, nq);
        memcpy(k->scale, buf + nq, ns * sizeof(float));
        free(buf);
        k->x = matrix_input(k);
    }
    json_decref(root);
    free(txt);
    return cs;
}

static void free_cases(qcase *cs, int n)
{
    for (int i = 0; i < n; i++) {
        free(cs[i].x);
        free(cs[i].q);
        free(cs[i].scale);
    }
    free(cs);
}

static const qcase *find_case(const qcase *cs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(cs[i].name, name) == 0)
            return &cs[i];
    ck_abort_msg("quant_cases.json: no case '%s'", name);
    return NULL;
}

static void quantise_case(fp8_matrix *m, const qcase *k, bool pow2)
{
    dllm_err err = {0};
    int rc = k->name[0] == 'w'
                 ? fp8_quantise_weight(m, k->x, k->R, k->C, k->format, k->scaling, pow2, &err)
                 : fp8_quantise_act(m, k->x, k->R, k->C, k->format, k->scaling, pow2, &err);
    ck_assert_msg(rc == 0, "%s: %s", k->name, err.msg);
}

START_TEST(test_scaling_golden)
{
    int n;
    qcase *cs = load_cases(&n);
    int seen[4] = {0};
    for (int i = 0; i < n; i++) {
        const qcase *k = &cs[i];
        fp8_matrix m = {0};
        quantise_case(&m, k, k->pow2);
        seen[k->scaling]++;
        ck_assert_int_eq(m.scale_rows, k->SR);
        ck_assert_int_eq(m.scale_cols, k->SC);
        for (int s = 0; s < k->SR * k->SC; s++)
            ck_assert_msg(bits_of(m.scale[s]) == bits_of(k->scale[s]),
                          "%s: scale %d = %a, want %a", k->name, s, m.scale[s], k->scale[s]);
        size_t bad = 0, nq = (size_t)k->R * k->C;
        for (size_t j = 0; j < nq; j++)
            if (m.q[j] != k->q[j] && bad++ < 5)
                fprintf(stderr, "%s: [%zu, %zu] x = %a: code 0x%02x, want 0x%02x\n", k->name,
                        j / k->C, j % k->C, k->x[j], m.q[j], k->q[j]);
        ck_assert_msg(bad == 0, "%s: %zu codes differ", k->name, bad);
        fp8_matrix_free(&m);
    }
    ck_assert(seen[FP8_SCALE_TENSOR] && seen[FP8_SCALE_CHANNEL] && seen[FP8_SCALE_BLOCK] &&
              seen[FP8_SCALE_GROUP]);
    free_cases(cs, n);
}
END_TEST

/* Scales of blocks lying wholly in the zero region are 1; the 300 x 260 blockwise case
 * has edge blocks of 44 rows and 4 columns. */
START_TEST(test_scaling_zero_and_edges)
{
    int n;
    qcase *cs = load_cases(&n);
    const qcase *k = find_case(cs, n, "w_block_e4m3");
    ck_assert(k->R == 300 && k->C == 260);
    fp8_matrix m = {0};
    quantise_case(&m, k, false);
    ck_assert_int_eq(m.scale_rows, 3);
    ck_assert_int_eq(m.scale_cols, 3);
    ck_assert(m.scale[1 * 3 + 0] == 1.0f);  /* block (1, 0) is all zero */
    /* an edge block's scale is the amax of its 44 x 4 elements over 448 */
    float amax = 0;
    for (int r = 256; r < 300; r++)
        for (int c = 256; c < 260; c++)
            amax = fmaxf(amax, fabsf(k->x[r * 260 + c]));
    ck_assert(m.scale[2 * 3 + 2] == amax / 448.0f);
    fp8_matrix_free(&m);
    int zero_checked = 0;
    for (int i = 0; i < n; i++) {
        k = &cs[i];
        quantise_case(&m, k, k->pow2);
        for (int bi = 0; bi < m.scale_rows; bi++)
            for (int bj = 0; bj < m.scale_cols; bj++) {
                int r0 = bi * m.block_rows, c0 = bj * m.block_cols;
                int r1 = r0 + m.block_rows < k->R ? r0 + m.block_rows : k->R;
                int c1 = c0 + m.block_cols < k->C ? c0 + m.block_cols : k->C;
                if (r0 >= k->zr0 && r1 <= k->zr1 && c0 >= k->zc0 && c1 <= k->zc1) {
                    ck_assert_msg(m.scale[bi * m.scale_cols + bj] == 1.0f, "%s block (%d, %d)",
                                  k->name, bi, bj);
                    zero_checked++;
                }
            }
        fp8_matrix_free(&m);
    }
    ck_assert_int_ge(zero_checked, 5);
    free_cases(cs, n);
}
END_TEST

START_TEST(test_pow2_scales)
{
    int n;
    qcase *cs = load_cases(&n);
    for (int i = 0; i < n; i++) {
        const qcase *k = &cs[i];
        fp8_matrix plain = {0}, p2 = {0};
        quantise_case(&plain, k, false);
        quantise_case(&p2, k, true);
        for (int s = 0; s < plain.scale_rows * plain.scale_cols; s++) {
            int e;
            float fr = frexpf(p2.scale[s], &e);
            ck_assert_msg(fr == 0.5f, "%s: pow2 scale %a", k->name, p2.scale[s]);
            ck_assert(p2.scale[s] >= plain.scale[s] && p2.scale[s] < 2 * plain.scale[s]);
        }
        fp8_matrix_free(&plain);
        fp8_matrix_free(&p2);
    }
    free_cases(cs, n);
    /* a scale that already is a power of two stays: amax = 448 * 2^-3 -> 2^-3 */
    float x[3] = {-56.0f, 1.0f, 0.0f};
    fp8_matrix m = {0};
    dllm_err err = {0};
    ck_assert_int_eq(fp8_quantise_weight(&m, x, 1, 3, FP8_E4M3, FP8_SCALE_TENSOR, true, &err), 0);
    ck_assert(m.scale[0] == 0.125f);
    ck_assert_int_eq(m.q[0], 0xFE);
    fp8_matrix_free(&m);
}
END_TEST

/* NaN and inf do not enter amax: the scale comes from the finite values, inf saturates
 * and NaN stays NaN (docs/METHOD.md: inf saturates to max, NaN stays NaN). */
START_TEST(test_nonfinite_in_matrix)
{
    float x[6] = {1.0f, -INFINITY, NAN, -3.5f, INFINITY, 0.25f};
    for (int f = 0; f < 2; f++) {
        fp8_matrix m = {0};
        dllm_err err = {0};
        ck_assert_int_eq(fp8_quantise_act(&m, x, 2, 3, FORMATS[f], FP8_SCALE_TENSOR, false,
                                          &err), 0);
        ck_assert(m.scale[0] == 3.5f / fp8_max(FORMATS[f]));
        uint8_t mc = fp8_max_code(FORMATS[f]);
        ck_assert_int_eq(m.q[1], 0x80 | mc);
        ck_assert_int_eq(m.q[3], 0x80 | mc);
        ck_assert_int_eq(m.q[4], mc);
        ck_assert(isnan(fp8_decode(m.q[2], FORMATS[f])));
        fp8_matrix_free(&m);
    }
}
END_TEST

/* q = RNE(x / scale) with a true division. With scale S = 0x1.cdefcp+0 (19 bits; set by
 * amax = max * S) the inputs x = S v, v a midpoint between adjacent codes, are exact and
 * divide back to exact ties, which must go to even; x * (1/S) misses about half of them
 * (found by search in numpy for both formats). */
START_TEST(test_scale_division_exact)
{
    const float S = 0x1.cdefcp+0f;
    for (int f = 0; f < 2; f++) {
        fp8_format F = FORMATS[f];
        float mx = fp8_max(F);
        float x[130];
        uint8_t want[130];
        int n = 0;
        x[n] = S * mx;  /* sets amax, so scale = S */
        want[n++] = fp8_max_code(F);
        for (int c = 0; c < fp8_max_code(F) && n < 130; c++) {
            float v = 0.5f * (fp8_decode((uint8_t)c, F) + fp8_decode((uint8_t)(c + 1), F));
            ck_assert((double)(S * v) == (double)S * v);
            x[n] = S * v;
            want[n++] = fp8_encode(v, F);
        }
        fp8_matrix m = {0};
        dllm_err err = {0};
        ck_assert_int_eq(fp8_quantise_act(&m, x, 1, n, F, FP8_SCALE_TENSOR, false, &err), 0);
        ck_assert(m.scale[0] == S);
        for (int i = 0; i < n; i++)
            ck_assert_msg(m.q[i] == want[i], "%s: x = %a: 0x%02x, want 0x%02x",
                          fp8_format_name(F), x[i], m.q[i], want[i]);
        fp8_matrix_free(&m);
        float *d = dllm_malloc((size_t)n * sizeof(float));
        fp8_quant_dequant(d, x, 1, n, F, FP8_SCALE_TENSOR, false);
        for (int i = 0; i < n; i++)
            ck_assert_msg(d[i] == fp8_decode(want[i], F) * S, "%s: quant_dequant(%a)",
                          fp8_format_name(F), x[i]);
        free(d);
    }
}
END_TEST

/* fp8_quant_dequant's loop (a branch-free copy of fp8_round's arithmetic, vectorised)
 * gives fp8_round(x / scale) * scale bit for bit over both fp8 ranges, the fp32
 * subnormals, exact ties, saturation by rounding, +-inf and NaN, at an exact scale (1)
 * and an inexact one (3), in both formats and at a length that is no multiple of any
 * vector width. */
START_TEST(test_quant_dequant_is_round)
{
    enum { N = 200003 };
    float *x = dllm_malloc(N * sizeof(float)), *d = dllm_malloc(N * sizeof(float));
    const float scales[2] = {1.0f, 3.0f};
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int f = 0; f < 2; f++)
        for (int si = 0; si < 2; si++) {
            fp8_format F = FORMATS[f];
            float S = scales[si], mx = fp8_max(F);
            x[0] = mx * S; /* sets amax: the scale is S */
            int n = 1;
            x[n++] = -INFINITY;
            x[n++] = INFINITY;
            x[n++] = NAN;
            x[n++] = -NAN;
            x[n++] = 0.0f;
            x[n++] = -0.0f;
            x[n++] = 0x1p-149f; /* the smallest fp32 subnormal */
            for (int c = 0; c < 255; c++) { /* every code's value and the ties after it */
                float v = fp8_decode((uint8_t)c, F), w = fp8_decode((uint8_t)(c + 1), F);
                if (!isfinite(v) || !isfinite(w) || fabsf(v) > mx || fabsf(w) > mx)
                    continue;
                x[n++] = v * S;
                x[n++] = 0.5f * (v + w) * S;
                x[n++] = nextafterf(0.5f * (v + w), 0.0f) * S;
            }
            while (n < N) { /* log-uniform magnitudes 2^-140 .. 2^10, both signs */
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(st >> 32);
                float mag = ldexpf(1.0f + (float)(r & 0xFFFF) / 65536.0f, (int)(r >> 16) % 151 - 140);
                x[n++] = fminf(mag, mx * S) * ((r & 0x8000) ? -1.0f : 1.0f);
            }
            fp8_quant_dequant(d, x, 1, N, F, FP8_SCALE_TENSOR, false);
            for (int i = 0; i < N; i++) {
                float want = fp8_round(x[i] / S, F) * S;
                ck_assert_msg(bits_of(d[i]) == bits_of(want) || (isnan(d[i]) && isnan(want)),
                              "%s, scale %g: x = %a gives %a, fp8_round %a", fp8_format_name(F),
                              S, x[i], d[i], want);
            }
        }
    free(x);
    free(d);
}
END_TEST

/* |dequant(quant(x)) - x| <= ulp_format(x / scale) / 2 * scale, plus fp32 rounding of the
 * division and the product. Also: fp8_quant_dequant == fp8_dequantise(fp8_quantise). */
START_TEST(test_dequant_error_bound)
{
    int n;
    qcase *cs = load_cases(&n);
    for (int i = 0; i < n; i++) {
        const qcase *k = &cs[i];
        fp8_matrix m = {0};
        quantise_case(&m, k, k->pow2);
        size_t nq = (size_t)k->R * k->C;
        float *d = dllm_malloc(nq * sizeof(float)), *d2 = dllm_malloc(nq * sizeof(float));
        fp8_dequantise(d, &m);
        memcpy(d2, k->x, nq * sizeof(float));
        fp8_quant_dequant(d2, d2, k->R, k->C, k->format, k->scaling, k->pow2); /* in place */
        double worst = 0;
        for (size_t j = 0; j < nq; j++) {
            int r = (int)(j / k->C), c = (int)(j % k->C);
            float s = m.scale[(r / m.block_rows) * m.scale_cols + c / m.block_cols];
            double bound = 0.5 * fp8_ulp(k->x[j] / s, k->format) * s +
                           4.0 * FLT_EPSILON * fabs(k->x[j]);
            double e = fabs((double)d[j] - k->x[j]);
            ck_assert_msg(e <= bound, "%s [%d, %d]: x = %a, dequant %a, err %g > %g", k->name,
                          r, c, k->x[j], d[j], e, bound);
            worst = fmax(worst, e / bound);
            ck_assert_msg(bits_of(d[j]) == bits_of(d2[j]), "%s: quant_dequant differs", k->name);
        }
        ck_assert(worst > 0.1);  /* the bound is not vacuous */
        free(d);
        free(d2);
        fp8_matrix_free(&m);
    }
    free_cases(cs, n);
}
END_TEST

START_TEST(test_requantise_reuses)
{
    int n;
    qcase *cs = load_cases(&n);
    const qcase *k = find_case(cs, n, "w_block_e4m3");
    fp8_matrix m = {0};
    quantise_case(&m, k, false);
    ck_assert_int_eq(m.act_scaling, FP8_SCALE_GROUP);
    m.act_scaling = FP8_SCALE_TENSOR;
    fp8_matrix_cache_dequant(&m);
    ck_assert(m.deq_valid);
    float *x2 = dllm_malloc((size_t)k->R * k->C * sizeof(float));
    for (int j = 0; j < k->R * k->C; j++)
        x2[j] = 2.0f * k->x[j];
    dllm_err err = {0};
    ck_assert_int_eq(fp8_quantise_weight(&m, x2, k->R, k->C, k->format, k->scaling, false,
                                         &err), 0);
    ck_assert(!m.deq_valid);
    ck_assert_int_eq(m.act_scaling, FP8_SCALE_TENSOR);  /* caller's choice survives sync */
    /* doubling x doubles every scale and keeps every code */
    ck_assert_int_eq(memcmp(m.q, k->q, (size_t)k->R * k->C), 0);
    for (int s = 0; s < 9; s++)
        ck_assert(m.scale[s] == (s == 3 ? 1.0f : 2.0f * k->scale[s]));
    fp8_matrix_cache_dequant(&m);
    float *d = dllm_malloc((size_t)k->R * k->C * sizeof(float));
    fp8_dequantise(d, &m);
    ck_assert_int_eq(memcmp(d, m.deq, (size_t)k->R * k->C * sizeof(float)), 0);
    ck_assert_int_eq(fp8_quantise_weight(&m, x2, k->R, k->C, k->format, FP8_SCALE_GROUP,
                                         false, &err), DLLM_EXIT_INTERNAL);
    ck_assert_int_eq(fp8_quantise_act(&m, x2, k->R, k->C, k->format, FP8_SCALE_BLOCK,
                                      false, &err), DLLM_EXIT_INTERNAL);
    free(d);
    free(x2);
    fp8_matrix_free(&m);
    free_cases(cs, n);
}
END_TEST

/* ---- W8A8 linear ------------------------------------------------------------------------- */

/* Reference from the goldens alone: decode codes with torch's table, times golden scales,
 * GEMM in double. */
static double *golden_dequant(const qcase *k)
{
    int br, bc;
    fp8_block_shape(k->scaling, k->R, k->C, &br, &bc);
    double *d = dllm_malloc((size_t)k->R * k->C * sizeof(double));
    for (int r = 0; r < k->R; r++)
        for (int c = 0; c < k->C; c++) {
            float s = k->scale[(r / br) * k->SC + c / bc];
            d[r * k->C + c] = (double)(GOLD_DECODE[k->format][k->q[r * k->C + c]] * s);
        }
    return d;
}

static void check_linear(const char *wname, const char *aname, fp8_scaling act)
{
    load_decode_goldens();
    int n;
    qcase *cs = load_cases(&n);
    const qcase *wk = find_case(cs, n, wname), *ak = find_case(cs, n, aname);
    int OC = wk->R, C = wk->C, N = ak->R;
    ck_assert_int_eq(ak->C, C);
    fp8_matrix w = {0};
    quantise_case(&w, wk, false);
    w.act_scaling = act;
    double *wd = golden_dequant(wk), *ad = golden_dequant(ak);
    float *out = dllm_malloc((size_t)N * OC * sizeof(float));
    float *out2 = dllm_malloc((size_t)N * OC * sizeof(float));
    op_fp8_linear_fwd(out, ak->x, &w, N, C, OC);
    ck_assert(w.deq_valid);
    op_fp8_linear_fwd(out2, ak->x, &w, N, C, OC);  /* cached weight: same answer */
    ck_assert_int_eq(memcmp(out, out2, (size_t)N * OC * sizeof(float)), 0);
    double max_rel = 0, diff2 = 0, ref2 = 0;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double ref = 0, mag = 0, f32 = 0;
            for (int c = 0; c < C; c++) {
                ref += ad[i * C + c] * wd[o * C + c];
                mag += fabs(ad[i * C + c] * wd[o * C + c]);
                f32 += (double)ak->x[i * C + c] * wk->x[o * C + c];
            }
            double e = fabs(out[i * OC + o] - ref);
            ck_assert_msg(e <= 1e-5 * mag + 1e-30, "%s x %s [%d, %d]: %g vs %g", aname, wname,
                          i, o, out[i * OC + o], ref);
            if (mag > 0)
                max_rel = fmax(max_rel, e / mag);
            diff2 += (out[i * OC + o] - f32) * (out[i * OC + o] - f32);
            ref2 += f32 * f32;
        }
    /* FP8 is visibly not fp32: E4M3's 3 mantissa bits give ~2-3% relative error */
    double rel = sqrt(diff2 / ref2);
    fprintf(stderr, "fp8 linear %s x %s: max |err| / sum|a w| = %.2e, ||fp8 - fp32|| / "
            "||fp32|| = %.4f\n", aname, wname, max_rel, rel);
    ck_assert_msg(rel > 1e-3 && rel < 0.2, "relative difference from fp32 %g", rel);
    free(out);
    free(out2);
    free(wd);
    free(ad);
    fp8_matrix_free(&w);
    free_cases(cs, n);
}

START_TEST(test_linear_group_acts) { check_linear("w_block_e4m3", "a_group_e4m3", FP8_SCALE_GROUP); }
END_TEST

START_TEST(test_linear_tensor_acts) { check_linear("w_block_e4m3", "a_tensor_e4m3", FP8_SCALE_TENSOR); }
END_TEST

static Suite *fp8_suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("numbers");
    tcase_add_test(tc, test_decode_all_codes);
    tcase_add_test(tc, test_round_is_decode_encode);
    tcase_add_test(tc, test_roundtrip_codes);
    tcase_add_test(tc, test_encode_golden);
    tcase_add_test(tc, test_encode_nearest_search);
    tcase_add_test(tc, test_saturation);
    tcase_add_test(tc, test_nan);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("scaling");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_scaling_golden);
    tcase_add_test(tc, test_scaling_zero_and_edges);
    tcase_add_test(tc, test_pow2_scales);
    tcase_add_test(tc, test_scale_division_exact);
    tcase_add_test(tc, test_quant_dequant_is_round);
    tcase_add_test(tc, test_nonfinite_in_matrix);
    tcase_add_test(tc, test_dequant_error_bound);
    tcase_add_test(tc, test_requantise_reuses);
    suite_add_tcase(s, tc);
    tc = tcase_create("linear");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_linear_group_acts);
    tcase_add_test(tc, test_linear_tensor_acts);
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return fp8_suite();
}
