/* int8.c: INT8 codes, scales and the W8A7 products (kernels/int8.h). */
#include "kernels/int8.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/vec_kernel.h"
#include "kernels/ops.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names -------------------------------------------------------------------------------- */

static const char *const SCALING_NAMES[] = {"channel", "block"};

const char *int8_scaling_name(int8_scaling s)
{
    return (unsigned)s < 2 ? SCALING_NAMES[s] : "?";
}

int int8_scaling_parse(const char *s, int8_scaling *m, dllm_err *err)
{
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, SCALING_NAMES[i]) == 0) {
            *m = (int8_scaling)i;
            return DLLM_OK;
        }
    return dllm_err_set(err, DLLM_EXIT_INPUT, "int8 scaling '%s': expected channel or block",
                        s ? s : "(null)");
}

/* ---- codes and scales --------------------------------------------------------------------- */

int8_t int8_code(float x, float s, int qmax)
{
    float v = x / s;
    if (isnan(v))
        return (int8_t)qmax; /* shows as the largest value instead of vanishing */
    if (v >= (float)qmax)
        return (int8_t)qmax;
    if (v <= -(float)qmax)
        return (int8_t)-qmax;
    return (int8_t)rintf(v); /* round half to even (the default rounding mode) */
}

float int8_scale_from_amax(float amax, int qmax)
{
    return amax > 0.0f ? amax / (float)qmax : 1.0f;
}

/* The largest finite |x|: a maximum, the same whatever the order or vector width. On
 * the bits: |x| of a finite float orders as its bit pattern does, and an integer maximum
 * vectorises where a float one (its compare ordering NaN) would not. */
VEC_KERNEL(float, amax_finite, (const float *x, int n),
           (x, n))
{
    uint32_t a = 0;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7FFFFFFFu;
        u = u < 0x7F800000u ? u : 0u; /* NaN and inf count as 0 */
        a = a > u ? a : u;
    }
    float r;
    memcpy(&r, &a, sizeof r);
    return r;
}

/* q[i] = int8_code(x[i], s, qmax) + shift, element by element the same arithmetic (fp32
 * division, NaN to +qmax, the clamp, rounding half to even) in a loop that vectorises. */
VEC_KERNEL_NO_TRAP(void, code_row, (int8_t *q, const float *x, int n, float s, float qmax, float shift),
                   (q, x, n, s, qmax, shift))
{
    for (int i = 0; i < n; i++) {
        float v = x[i] / s;
        v = v == v ? v : qmax;
        v = v < qmax ? v : qmax;
        v = v > -qmax ? v : -qmax;
        q[i] = (int8_t)(int)(rintf(v) + shift);
    }
}

static int k_blocks(int C, int8_scaling s)
{
    return s == INT8_SCALE_BLOCK ? (C + INT8_BLOCK - 1) / INT8_BLOCK : 1;
}

/* ---- weights ------------------------------------------------------------------------------ */

float int8_weight_scale(const int8_matrix *m, int o, int b)
{
    return m->scaling == INT8_SCALE_BLOCK ? m->scale[(size_t)(o / INT8_BLOCK) * m->kb + b]
                                          : m->scale[o];
}

int int8_quantise_weight(int8_matrix *m, const float *w, int OC, int C, int8_scaling s,
                         dllm_err *err)
{
    if (OC <= 0 || C <= 0 || (s != INT8_SCALE_CHANNEL && s != INT8_SCALE_BLOCK))
        return dllm_err_set(err, DLLM_EXIT_INTERNAL, "int8_quantise_weight: bad shape [%d, %d] "
                            "or scaling %d", OC, C, (int)s);
    const int kb = k_blocks(C, s);
    const int ldq = s == INT8_SCALE_BLOCK ? kb * INT8_BLOCK : C;
    const int nscale = s == INT8_SCALE_BLOCK ? (OC + INT8_BLOCK - 1) / INT8_BLOCK * kb : OC;
    if (!m->q || m->rows != OC || m->cols != C || m->scaling != s) {
        int8_matrix_free(m);
        m->q = dllm_malloc((size_t)OC * ldq);
        m->scale = dllm_malloc((size_t)nscale * sizeof(float));
        m->comp = dllm_malloc((size_t)OC * kb * sizeof(int32_t));
        m->rows = OC;
        m->cols = C;
        m->scaling = s;
        m->kb = kb;
        m->ldq = ldq;
    }
    m->deq_valid = false;
    if (s == INT8_SCALE_CHANNEL) {
#pragma omp parallel for schedule(static) if ((size_t)OC * C > 65536)
        for (int o = 0; o < OC; o++)
            m->scale[o] = int8_scale_from_amax(amax_finite(w + (size_t)o * C, C), INT8_W_MAX);
    } else {
        const int rb = (OC + INT8_BLOCK - 1) / INT8_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)OC * C > 65536)
        for (int i = 0; i < rb; i++)
            for (int b = 0; b < kb; b++) {
                const int c0 = b * INT8_BLOCK, c1 = c0 + INT8_BLOCK < C ? c0 + INT8_BLOCK : C;
                float a = 0.0f;
                for (int o = i * INT8_BLOCK; o < OC && o < (i + 1) * INT8_BLOCK; o++) {
                    float ab = amax_finite(w + (size_t)o * C + c0, c1 - c0);
                    a = ab > a ? ab : a;
                }
                m->scale[(size_t)i * kb + b] = int8_scale_from_amax(a, INT8_W_MAX);
            }
    }
#pragma omp parallel for schedule(static) if ((size_t)OC * C > 65536)
    for (int o = 0; o < OC; o++) {
        int8_t *q = m->q + (size_t)o * ldq;
        for (int b = 0; b < kb; b++) {
            const float sc = int8_weight_scale(m, o, b);
            const int c0 = b * (ldq / kb), c1 = s == INT8_SCALE_BLOCK && c0 + INT8_BLOCK < C
                                                     ? c0 + INT8_BLOCK
                                                     : C;
            int32_t sum = 0;
            for (int c = c0; c < c1; c++) {
                q[c] = int8_code(w[(size_t)o * C + c], sc, INT8_W_MAX);
                sum += q[c];
            }
            m->comp[(size_t)o * kb + b] = INT8_A_SHIFT * sum;
        }
        memset(q + C, 0, (size_t)(ldq - C));
    }
    return DLLM_OK;
}

void int8_dequantise_weight(float *out, const int8_matrix *m)
{
    const int C = m->cols;
    for (int o = 0; o < m->rows; o++)
        for (int c = 0; c < C; c++)
            out[(size_t)o * C + c] =
                (float)m->q[(size_t)o * m->ldq + c] *
                int8_weight_scale(m, o, m->scaling == INT8_SCALE_BLOCK ? c / INT8_BLOCK : 0);
}

void int8_matrix_cache_dequant(int8_matrix *m)
{
    if (m->deq_valid)
        return;
    if (!m->deq)
        m->deq = dllm_malloc(sizeof(float) * ((size_t)m->rows * m->cols + 1));
    int8_dequantise_weight(m->deq, m);
    m->deq_valid = true;
}

void int8_matrix_free(int8_matrix *m)
{
    free(m->q);
    free(m->scale);
    free(m->comp);
    free(m->deq);
    memset(m, 0, sizeof *m);
}

/* ---- activations -------------------------------------------------------------------------- */

/* int8_quantise_act with every code plus shift (0, or 64: the u8 operand). */
static void quantise_act(int8_t *q, float *sa, const float *x, int N, int C, int ldq,
                         int8_scaling s, int shift)
{
    const int kb = k_blocks(C, s), g = s == INT8_SCALE_BLOCK ? INT8_BLOCK : C;
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        int8_t *qr = q + (size_t)n * ldq;
        for (int b = 0; b < kb; b++) {
            const int c0 = b * g, c1 = c0 + g < C ? c0 + g : C;
            const float sc = int8_scale_from_amax(amax_finite(xr + c0, c1 - c0), INT8_A_MAX);
            sa[(size_t)n * kb + b] = sc;
            code_row(qr + c0, xr + c0, c1 - c0, sc, (float)INT8_A_MAX, (float)shift);
        }
        memset(qr + C, shift, (size_t)(ldq - C));
    }
}

void int8_quantise_act(int8_t *q, float *sa, const float *x, int N, int C, int ldq,
                       int8_scaling s)
{
    quantise_act(q, sa, x, N, C, ldq, s, 0);
}

/* ---- products ----------------------------------------------------------------------------- */

static void check_shape(const char *who, const int8_matrix *w, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "%s: weight is [%d, %d]%s, call expects [%d, %d]\n", who, w->rows,
                w->cols, w->q ? "" : " (not quantised)", OC, C);
        abort();
    }
}

static bool loop_forced(void)
{
    const char *env = getenv("DLLM_INT8_GEMM");
    if (env && *env && strcmp(env, "auto") != 0) {
        if (strcmp(env, "loop") == 0)
            return true;
        fprintf(stderr, "DLLM_INT8_GEMM=%s: expected auto or loop\n", env);
        exit(2);
    }
    return false;
}

const char *int8_gemm_path(void)
{
    return dnnl_gemm_built() && !loop_forced() ? "onednn" : "loop";
}

const char *int8_cpu_isa(void)
{
    if (cpu_has(CPU_AVX512VNNI))
        return "AVX512-VNNI (vpdpbusd)";
    if (cpu_has(CPU_AVXVNNI))
        return "AVX-VNNI (vpdpbusd)";
    if (cpu_has(CPU_AVX2))
        return "AVX2 (vpmaddubsw)";
    return "none";
}

/* acc[n, o] (row stride ldc) = sum_{k < K} u[n, k] * q[o, k] in int32: the portable route,
 * the same integers oneDNN forms. */
static void loop_u8s8(int32_t *acc, int ldc, const uint8_t *u, int ldu, const int8_t *q,
                      int ldq, int N, int OC, int K)
{
#pragma omp parallel for schedule(static) if ((size_t)N * OC * K > 65536)
    for (int o = 0; o < OC; o++)
        for (int n = 0; n < N; n++) {
            const uint8_t *ur = u + (size_t)n * ldu;
            const int8_t *qr = q + (size_t)o * ldq;
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int32_t)ur[k] * qr[k];
            acc[(size_t)n * ldc + o] = s;
        }
}

static void gemm_u8s8(int32_t *acc, int ldc, const uint8_t *u, int ldu, const int8_t *q,
                      int ldq, int N, int OC, int K, bool onednn)
{
    if (!onednn || dnnl_gemm_u8s8_nt(acc, ldc, u, ldu, q, ldq, N, OC, K) != 0)
        loop_u8s8(acc, ldc, u, ldu, q, ldq, N, OC, K);
}

/* One row of the product's scaling: out[o] = (sa * ws[o]) * (float)(acc[o] - comp[o]), the
 * scale product formed first, in fp32 (int8.h): products only, so every clone gives the
 * same bits. */
VEC_KERNEL(void, scale_row, (float *restrict out, const int32_t *restrict acc, const int32_t *restrict comp, const float *restrict ws, float sa, int OC),
           (out, acc, comp, ws, sa, OC))
{
    for (int o = 0; o < OC; o++)
        out[o] = (sa * ws[o]) * (float)(acc[o] - comp[o]);
}

/* The same added to out (the k-blocks after the first): built for the baseline only, so
 * that the sum is never fused into a multiply-add. */
static void scale_row_add(float *restrict out, const int32_t *restrict acc,
                          const int32_t *restrict comp, const float *restrict ws, float sa,
                          int OC)
{
    for (int o = 0; o < OC; o++)
        out[o] = out[o] + (sa * ws[o]) * (float)(acc[o] - comp[o]);
}

/* out[N, OC] = the product of w with the activations already quantised: u (N, ldq) the
 * shifted codes, sa (N, kb) their scales. */
static void int8_product(float *out, const uint8_t *u, const float *sa, const int8_matrix *w,
                         int N, int OC, bool onednn)
{
    const int kb = w->kb, ldq = w->ldq, g = ldq / kb;
    /* one k-block at a time (channel: the one block of all C; block: zero codes pad the
     * last), rows in chunks so the int32 scratch stays small */
    int rows = (int)((1u << 22) / (unsigned)OC);
    rows = rows < 1 ? 1 : rows > N ? N : rows;
    int32_t *acc = dllm_malloc((size_t)rows * OC * sizeof(int32_t)); // (rows, OC)
    int32_t *cb = dllm_malloc((size_t)OC * sizeof(int32_t));            // (OC) block b's
    float *wb = dllm_malloc((size_t)OC * sizeof(float));                // (OC) block b's
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = n0 + rows < N ? rows : N - n0;
        float *o0 = out + (size_t)n0 * OC;
        for (int b = 0; b < kb; b++) {
            for (int o = 0; o < OC; o++) {
                cb[o] = w->comp[(size_t)o * kb + b];
                wb[o] = int8_weight_scale(w, o, b);
            }
            gemm_u8s8(acc, OC, u + (size_t)n0 * ldq + (size_t)b * g, ldq, w->q + b * g, ldq,
                      nr, OC, g, onednn);
#pragma omp parallel for schedule(static) if ((size_t)nr * OC > 65536)
            for (int n = 0; n < nr; n++)
                (b ? scale_row_add : scale_row)(o0 + (size_t)n * OC, acc + (size_t)n * OC, cb,
                                                wb, sa[(size_t)(n0 + n) * kb + b], OC);
        }
    }
    free(wb);
    free(cb);
    free(acc);
}

void op_int8_linears_fwd(int nw, float *const out[], const float *inp,
                         const int8_matrix *const w[], int N, int C, const int OC[])
{
    for (int i = 0; i < nw; i++)
        check_shape("op_int8_linears_fwd", w[i], C, OC[i]);
    if (N <= 0 || nw <= 0)
        return;
    for (int i = 1; i < nw; i++)
        if (w[i]->scaling != w[0]->scaling) { /* another activation quantisation each */
            for (int k = 0; k < nw; k++)
                op_int8_linear_fwd(out[k], inp, w[k], N, C, OC[k]);
            return;
        }
    const int kb = w[0]->kb, ldq = w[0]->ldq;
    const bool onednn = strcmp(int8_gemm_path(), "onednn") == 0;
    int8_t *qa = dllm_malloc((size_t)N * ldq);            // (N, ldq)
    float *sa = dllm_malloc((size_t)N * kb * sizeof(float)); // (N, kb)
    /* the u8 operand: codes + 64, in [1, 127] (the padding 64 meets zero weight codes) */
    quantise_act(qa, sa, inp, N, C, ldq, w[0]->scaling, INT8_A_SHIFT);
    for (int i = 0; i < nw; i++)
        int8_product(out[i], (const uint8_t *)qa, sa, w[i], N, OC[i], onednn);
    free(qa);
    free(sa);
}

void op_int8_linear_fwd(float *out, const float *inp, const int8_matrix *w, int N, int C,
                        int OC)
{
    check_shape("op_int8_linear_fwd", w, C, OC);
    op_int8_linears_fwd(1, &out, inp, &w, N, C, &OC);
}

void op_int8_linear_ref(float *out, const float *inp, int8_matrix *w, int N, int C, int OC)
{
    check_shape("op_int8_linear_ref", w, C, OC);
    if (N <= 0)
        return;
    int8_matrix_cache_dequant(w);
    const int kb = w->kb, ldq = w->ldq, g = ldq / kb;
    int8_t *qa = dllm_malloc((size_t)N * ldq);            // (N, ldq)
    float *sa = dllm_malloc((size_t)N * kb * sizeof(float)); // (N, kb)
    float *a = dllm_malloc((size_t)N * C * sizeof(float));   // (N, C)
    int8_quantise_act(qa, sa, inp, N, C, ldq, w->scaling);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            a[(size_t)n * C + c] = (float)qa[(size_t)n * ldq + c] * sa[(size_t)n * kb + c / g];
    op_gemm(false, true, N, OC, C, 1.0f, a, w->deq, 0.0f, out);
    free(a);
    free(qa);
    free(sa);
}
