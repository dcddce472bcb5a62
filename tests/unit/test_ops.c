/* test_ops.c: the CPU op table (kernels/ops.h) against independent references.
 *
 *  - every backward against central finite differences of a random projection
 *    loss L = sum(r * out), evaluated in double;
 *  - forwards against naive double-precision loops written here;
 *  - the accumulate-into-gradients convention (two backward calls = twice);
 *  - AdamW against the torch formula in double, gradient clipping;
 *  - bf16/f16 rounding: ties, NaN/inf, overflow, exhaustive round trips;
 *  - guard floats after every output, which must stay untouched;
 *  - results that do not depend on the OpenMP thread count.
 * One suite for the whole table: the references and harness helpers are shared by
 * every op, and each op's cases are a few dozen lines. */
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "kernels/base.h"
#include "tests/harness/harness.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- helpers ------------------------------------------------------------------ */

#define GUARD 8
static const uint32_t SENTINEL = 0x7FC0DEADu; /* a NaN pattern no op writes */

/* n floats followed by GUARD sentinel floats, zeroed payload. */
static float *galloc(size_t n)
{
    float *p = dllm_malloc((n + GUARD) * sizeof(float));
    memset(p, 0, n * sizeof(float));
    for (size_t i = 0; i < GUARD; i++)
        memcpy(&p[n + i], &SENTINEL, sizeof SENTINEL);
    return p;
}

static void check_guard_at(const float *p, size_t n, const char *what, int line)
{
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &p[n + i], sizeof u);
        ck_assert_msg(u == SENTINEL, "line %d: guard %zu after %s overwritten", line, i, what);
    }
}
#define check_guard(p, n) check_guard_at((p), (n), #p, __LINE__)

static void fill_normal(float *x, size_t n, uint64_t seed, double scale)
{
    dllm_rng r = dllm_rng_make(seed, 77, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * dllm_rng_normal(&r));
}

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static double max_abs(const float *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* Finite-difference check: perturbs x[i] (for every i, or every stride-th),
 * evaluates loss(ctx) at x +- eps and compares the slope with grad[i]. The
 * relative error's denominator is guarded by 5% of the largest gradient, so
 * tiny entries are not judged on noise. Returns the max relative error. */
typedef double (*loss_fn)(void *ctx);
static double fd_check(float *x, const float *grad, size_t n, loss_fn loss, void *ctx,
                       float eps, const char *what)
{
    double gmax = max_abs(grad, n), worst = 0.0;
    ck_assert_msg(gmax > 0.0, "%s: analytic gradient is all zero", what);
    size_t stride = n > 200 ? n / 150 : 1;
    for (size_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        float xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / ((double)xp - xm);
        double rel = fabs(num - grad[i]) / (fabs(num) + fabs(grad[i]) + 0.05 * gmax);
        ck_assert_msg(rel < 3e-3, "%s[%zu]: analytic %.6g vs numeric %.6g (rel %.3g)", what, i,
                      (double)grad[i], num, rel);
        worst = fmax(worst, rel);
    }
    return worst;
}

/* ---- GEMM / linear -------------------------------------------------------------- */

/* op_gemm against a double loop for every transpose combination; large
 * shapes go through the threaded split (rows of C when M >= N, else columns),
 * with sides that are not multiples of the block width. */
static void gemm_case(int M, int N, int K)
{
    float *A = galloc((size_t)M * K), *B = galloc((size_t)K * N);
    float *C = galloc((size_t)M * N), *C0 = galloc((size_t)M * N);
    fill_normal(A, (size_t)M * K, 1, 1.0);
    fill_normal(B, (size_t)K * N, 2, 1.0);
    fill_normal(C0, (size_t)M * N, 3, 1.0);
    float alpha = 1.3f, beta = 0.7f;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            memcpy(C, C0, (size_t)M * N * sizeof(float));
            op_gemm(ta, tb, M, N, K, alpha, A, B, beta, C);
            /* A is stored [M,K] or [K,M], B [K,N] or [N,K]: same data, read differently */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0.0;
                    for (int kk = 0; kk < K; kk++) {
                        double a = ta ? A[(size_t)kk * M + i] : A[(size_t)i * K + kk];
                        double b = tb ? B[(size_t)j * K + kk] : B[(size_t)kk * N + j];
                        s += a * b;
                    }
                    double want = alpha * s + (double)beta * C0[(size_t)i * N + j];
                    ck_assert_msg(fabs(C[(size_t)i * N + j] - want) < 1e-4 * (1 + fabs(want)),
                                  "gemm ta=%d tb=%d [%d,%d]: %g vs %g", ta, tb, i, j,
                                  (double)C[(size_t)i * N + j], want);
                }
            check_guard(C, (size_t)M * N);
        }
    /* beta = 0 must ignore whatever C held, NaN included */
    for (int i = 0; i < M * N; i++)
        C[i] = NAN;
    op_gemm(false, false, M, N, K, 1.0f, A, B, 0.0f, C);
    for (int i = 0; i < M * N; i++)
        ck_assert(isfinite(C[i]));
    check_guard(C, (size_t)M * N);
    free(A), free(B), free(C), free(C0);
}

START_TEST(test_gemm_forward)
{
    gemm_case(7, 5, 9);
    gemm_case(150, 70, 40);
    gemm_case(70, 150, 40);
    gemm_case(37, 301, 30);
}
END_TEST

typedef struct {
    float *out, *inp, *w, *r;
    int N, C, OC;
} linear_ctx;

static double linear_loss(void *p)
{
    linear_ctx *c = p;
    op_linear_fwd(c->out, c->inp, c->w, c->N, c->C, c->OC);
    return dot_d(c->r, c->out, (size_t)c->N * c->OC);
}

START_TEST(test_linear_grad)
{
    linear_ctx c = {.N = 5, .C = 7, .OC = 6};
    size_t ni = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C, no = (size_t)c.N * c.OC;
    c.inp = galloc(ni), c.w = galloc(nw), c.out = galloc(no), c.r = galloc(no);
    fill_normal(c.inp, ni, 10, 1.0);
    fill_normal(c.w, nw, 11, 0.5);
    fill_normal(c.r, no, 12, 1.0);
    /* forward against a naive loop */
    linear_loss(&c);
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double s = 0.0;
            for (int k = 0; k < c.C; k++)
                s += (double)c.inp[n * c.C + k] * c.w[o * c.C + k];
            ck_assert(fabs(c.out[n * c.OC + o] - s) < 1e-5);
        }
    float *dinp = galloc(ni), *dw = galloc(nw);
    op_linear_bwd(dinp, dw, c.r, c.inp, c.w, c.N, c.C, c.OC);
    fd_check(c.inp, dinp, ni, linear_loss, &c, 1e-2f, "linear dinp");
    fd_check(c.w, dw, nw, linear_loss, &c, 1e-2f, "linear dw");
    /* accumulation: a second call doubles; NULL gradients are skipped */
    float *dinp2 = galloc(ni), *dw2 = galloc(nw);
    op_linear_bwd(dinp2, dw2, c.r, c.inp, c.w, c.N, c.C, c.OC);
    op_linear_bwd(dinp2, NULL, c.r, c.inp, c.w, c.N, c.C, c.OC);
    op_linear_bwd(NULL, dw2, c.r, c.inp, c.w, c.N, c.C, c.OC);
    for (size_t i = 0; i < ni; i++)
        ck_assert(fabsf(dinp2[i] - 2 * dinp[i]) <= 1e-6f * (1 + fabsf(dinp[i])));
    for (size_t i = 0; i < nw; i++)
        ck_assert(fabsf(dw2[i] - 2 * dw[i]) <= 1e-6f * (1 + fabsf(dw[i])));
    check_guard(c.out, no), check_guard(dinp, ni), check_guard(dw, nw);
    check_guard(dinp2, ni), check_guard(dw2, nw);
    free(c.inp), free(c.w), free(c.out), free(c.r), free(dinp), free(dw), free(dinp2), free(dw2);
}
END_TEST

/* ---- RMSNorm -------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *inp, *w, *r;
    int N, C;
    float eps;
} rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    op_rmsnorm_fwd(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return dot_d(c->r, c->out, (size_t)c->N * c->C);
}

START_TEST(test_rmsnorm)
{
    rms_ctx c = {.N = 4, .C = 16, .eps = 1e-5f};
    size_t n = (size_t)c.N * c.C;
    c.out = galloc(n), c.rstd = galloc(c.N), c.inp = galloc(n), c.w = galloc(c.C), c.r = galloc(n);
    fill_normal(c.inp, n, 20, 1.0);
    fill_normal(c.w, c.C, 21, 1.0);
    fill_normal(c.r, n, 22, 1.0);
    rms_loss(&c);
    for (int i = 0; i < c.N; i++) {
        double ss = 0.0;
        for (int j = 0; j < c.C; j++)
            ss += (double)c.inp[i * c.C + j] * c.inp[i * c.C + j];
        double rs = 1.0 / sqrt(ss / c.C + c.eps);
        ck_assert(fabs(c.rstd[i] - rs) < 1e-5 * rs);
        for (int j = 0; j < c.C; j++) {
            double want = (double)c.w[j] * c.inp[i * c.C + j] * rs;
            ck_assert_msg(fabs(c.out[i * c.C + j] - want) < 1e-5 * (1 + fabs(want)),
                          "rmsnorm [%d,%d] %g vs %g", i, j, (double)c.out[i * c.C + j], want);
        }
    }
    float *dinp = galloc(n), *dw = galloc(c.C);
    op_rmsnorm_bwd(dinp, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C);
    float *dinp1 = galloc(n), *dw1 = galloc(c.C);
    memcpy(dinp1, dinp, n * sizeof(float));
    memcpy(dw1, dw, c.C * sizeof(float));
    fd_check(c.inp, dinp, n, rms_loss, &c, 1e-2f, "rmsnorm dinp");
    fd_check(c.w, dw, c.C, rms_loss, &c, 1e-2f, "rmsnorm dw");
    rms_loss(&c); /* restore rstd for the unperturbed input */
    op_rmsnorm_bwd(dinp, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C);
    for (size_t i = 0; i < n; i++)
        ck_assert(fabsf(dinp[i] - 2 * dinp1[i]) <= 1e-6f * (1 + fabsf(dinp1[i])));
    for (int i = 0; i < c.C; i++)
        ck_assert(fabsf(dw[i] - 2 * dw1[i]) <= 1e-6f * (1 + fabsf(dw1[i])));
    check_guard(c.out, n), check_guard(c.rstd, c.N), check_guard(dinp, n), check_guard(dw, c.C);
    free(c.out), free(c.rstd), free(c.inp), free(c.w), free(c.r);
    free(dinp), free(dw), free(dinp1), free(dw1);
}
END_TEST

/* ---- RoPE ----------------------------------------------------------------------- */

typedef struct {
    float *out, *inp, *r;
    int32_t *pos;
    op_rope_table *t;
    int N, NH, HD;
} rope_ctx;

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    op_rope_fwd(c->out, c->inp, c->pos, c->t, c->N, c->NH, c->HD);
    return dot_d(c->r, c->out, (size_t)c->N * c->NH * c->HD);
}

START_TEST(test_rope)
{
    op_rope_table t;
    int max_pos = 64, HD = 8;
    float theta = 10000.0f;
    op_rope_table_init(&t, max_pos, HD, theta);
    /* table against the formula in double (angles differ from fp32 only by rounding) */
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < HD / 2; i++) {
            double ang = p * pow(theta, -2.0 * i / HD);
            ck_assert(fabs(t.cos[p * (HD / 2) + i] - cos(ang)) < 1e-5);
            ck_assert(fabs(t.sin[p * (HD / 2) + i] - sin(ang)) < 1e-5);
        }
    ck_assert(t.cos[1 * (HD / 2) + 0] == (float)cos(1.0)); /* inv_freq[0] = 1 exactly */

    rope_ctx c = {.N = 6, .NH = 2, .HD = HD, .t = &t};
    size_t n = (size_t)c.N * c.NH * HD;
    c.out = galloc(n), c.inp = galloc(n), c.r = galloc(n);
    c.pos = dllm_malloc(c.N * sizeof(int32_t));
    int32_t pos_vals[6] = {0, 3, 17, 63, 5, 40};
    memcpy(c.pos, pos_vals, sizeof pos_vals);
    fill_normal(c.inp, n, 30, 1.0);
    fill_normal(c.r, n, 31, 1.0);
    rope_loss(&c);
    /* forward against rotate-half in double */
    for (int row = 0; row < c.N; row++)
        for (int h = 0; h < c.NH; h++)
            for (int i = 0; i < HD / 2; i++) {
                const float *x = c.inp + (row * c.NH + h) * HD;
                const float *o = c.out + (row * c.NH + h) * HD;
                double ang = c.pos[row] * pow(theta, -2.0 * i / HD);
                double o1 = x[i] * cos(ang) - x[i + HD / 2] * sin(ang);
                double o2 = x[i + HD / 2] * cos(ang) + x[i] * sin(ang);
                ck_assert(fabs(o[i] - o1) < 1e-4 && fabs(o[i + HD / 2] - o2) < 1e-4);
                if (c.pos[row] == 0) /* position 0 is the identity */
                    ck_assert(o[i] == x[i] && o[i + HD / 2] == x[i + HD / 2]);
            }
    float *dinp = galloc(n);
    op_rope_bwd(dinp, c.r, c.pos, &t, c.N, c.NH, HD);
    fd_check(c.inp, dinp, n, rope_loss, &c, 1e-2f, "rope dinp");
    /* backward is the inverse rotation: bwd(fwd(x)) == x */
    float *back = galloc(n);
    rope_loss(&c);
    op_rope_bwd(back, c.out, c.pos, &t, c.N, c.NH, HD);
    ck_assert(max_abs_diff(back, c.inp, n) < 1e-5);
    /* accumulation, and in place (which replaces) */
    op_rope_bwd(back, c.out, c.pos, &t, c.N, c.NH, HD);
    for (size_t i = 0; i < n; i++)
        ck_assert(fabsf(back[i] - 2 * c.inp[i]) < 1e-5f);
    float *inplace = galloc(n);
    memcpy(inplace, c.inp, n * sizeof(float));
    op_rope_fwd(inplace, inplace, c.pos, &t, c.N, c.NH, HD);
    ck_assert(max_abs_diff(inplace, c.out, n) == 0.0);
    op_rope_bwd(inplace, inplace, c.pos, &t, c.N, c.NH, HD);
    ck_assert(max_abs_diff(inplace, c.inp, n) < 1e-5);
    check_guard(c.out, n), check_guard(dinp, n), check_guard(back, n), check_guard(inplace, n);
    free(c.out), free(c.inp), free(c.r), free(c.pos), free(dinp), free(back), free(inplace);
    op_rope_table_free(&t);
}
END_TEST

/* ---- attention ------------------------------------------------------------------ */

typedef struct {
    float *out, *att, *q, *k, *v, *r;
    uint8_t *mask;
    int B, T, NH, NKV, HD;
    bool causal;
} att_ctx;

static double att_loss(void *p)
{
    att_ctx *c = p;
    op_attention_fwd(c->out, c->att, c->q, c->k, c->v, c->mask, c->B, c->T, c->NH, c->NKV,
                     c->HD, c->causal);
    return dot_d(c->r, c->out, (size_t)c->B * c->T * c->NH * c->HD);
}

/* Naive attention in double, straight from the definition. */
static void att_naive(double *out, double *att, const att_ctx *c)
{
    int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD;
    double *sc = malloc(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0.0;
                for (int s = 0; s < T; s++) {
                    bool vis = (!c->mask || c->mask[b * T + s]) && (!c->causal || s <= t);
                    sc[s] = -INFINITY;
                    if (!vis)
                        continue;
                    double d = 0.0;
                    for (int i = 0; i < HD; i++)
                        d += (double)c->q[((b * T + t) * NH + h) * HD + i] *
                             c->k[((b * T + s) * NKV + kh) * HD + i];
                    sc[s] = d / sqrt((double)HD);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s < T; s++) {
                    sc[s] = sc[s] == -INFINITY ? 0.0 : exp(sc[s] - mx);
                    sum += sc[s];
                }
                for (int i = 0; i < HD; i++)
                    out[((b * T + t) * NH + h) * HD + i] = 0.0;
                for (int s = 0; s < T; s++) {
                    double pr = sum > 0 ? sc[s] / sum : 0.0;
                    att[((b * NH + h) * T + t) * T + s] = pr;
                    for (int i = 0; i < HD; i++)
                        out[((b * T + t) * NH + h) * HD + i] +=
                            pr * c->v[((b * T + s) * NKV + kh) * HD + i];
                }
            }
        }
    free(sc);
}

static void attention_case(int T, int HD, int NH, int NKV, bool causal, bool masked,
                           uint64_t seed)
{
    att_ctx c = {.B = 2, .T = T, .NH = NH, .NKV = NKV, .HD = HD, .causal = causal};
    size_t nq = (size_t)c.B * c.T * NH * c.HD, nk = (size_t)c.B * c.T * NKV * c.HD;
    size_t na = (size_t)c.B * NH * c.T * c.T;
    c.out = galloc(nq), c.att = galloc(na), c.q = galloc(nq), c.r = galloc(nq);
    c.k = galloc(nk), c.v = galloc(nk);
    fill_normal(c.q, nq, seed, 0.7);
    fill_normal(c.k, nk, seed + 1, 0.7);
    fill_normal(c.v, nk, seed + 2, 1.0);
    fill_normal(c.r, nq, seed + 3, 1.0);
    uint8_t *mask = dllm_malloc((size_t)c.B * T);
    memset(mask, 1, (size_t)c.B * T);
    if (masked) {
        /* sequence 0: last two keys are padding; sequence 1: key 0 is padding,
         * so with causal attention its query 0 sees nothing at all */
        mask[T - 2] = mask[T - 1] = 0;
        mask[T] = 0;
        c.mask = mask;
    }
    att_loss(&c);
    double *ref_out = malloc(nq * sizeof(double)), *ref_att = malloc(na * sizeof(double));
    att_naive(ref_out, ref_att, &c);
    for (size_t i = 0; i < nq; i++)
        ck_assert_msg(fabs(c.out[i] - ref_out[i]) < 1e-5, "attention out[%zu] %g vs %g", i,
                      (double)c.out[i], ref_out[i]);
    for (size_t i = 0; i < na; i++)
        ck_assert(fabs(c.att[i] - ref_att[i]) < 1e-6);

    float *dq = galloc(nq), *dk = galloc(nk), *dv = galloc(nk);
    op_attention_bwd(dq, dk, dv, c.r, c.att, c.q, c.k, c.v, c.B, c.T, NH, NKV, c.HD);
    if (masked && causal) {
        /* sequence 1, query 0: zero output, zero gradient */
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < c.HD; i++) {
                size_t o = ((size_t)(1 * c.T + 0) * NH + h) * c.HD + i;
                ck_assert(c.out[o] == 0.0f && dq[o] == 0.0f);
            }
    }
    if (masked) /* padded keys get no gradient */
        for (int kh = 0; kh < NKV; kh++)
            for (int i = 0; i < c.HD; i++) {
                size_t o = ((size_t)(T - 2) * NKV + kh) * c.HD + i;
                ck_assert(dk[o] == 0.0f && dv[o] == 0.0f);
            }
    float *dq1 = galloc(nq), *dk1 = galloc(nk), *dv1 = galloc(nk);
    memcpy(dq1, dq, nq * sizeof(float));
    memcpy(dk1, dk, nk * sizeof(float));
    memcpy(dv1, dv, nk * sizeof(float));
    fd_check(c.q, dq, nq, att_loss, &c, 1e-2f, "attention dq");
    fd_check(c.k, dk, nk, att_loss, &c, 1e-2f, "attention dk");
    fd_check(c.v, dv, nk, att_loss, &c, 1e-2f, "attention dv");
    att_loss(&c);
    op_attention_bwd(dq, dk, dv, c.r, c.att, c.q, c.k, c.v, c.B, c.T, NH, NKV, c.HD);
    for (size_t i = 0; i < nq; i++)
        ck_assert(fabsf(dq[i] - 2 * dq1[i]) <= 1e-6f * (1 + fabsf(dq1[i])));
    for (size_t i = 0; i < nk; i++)
        ck_assert(fabsf(dk[i] - 2 * dk1[i]) <= 1e-6f * (1 + fabsf(dk1[i])) &&
                  fabsf(dv[i] - 2 * dv1[i]) <= 1e-6f * (1 + fabsf(dv1[i])));
    check_guard(c.out, nq), check_guard(c.att, na);
    check_guard(dq, nq), check_guard(dk, nk), check_guard(dv, nk);
    free(c.out), free(c.att), free(c.q), free(c.k), free(c.v), free(c.r);
    free(dq), free(dk), free(dv), free(dq1), free(dk1), free(dv1), free(ref_out), free(ref_att);
    free(mask);
}

START_TEST(test_attention_bidirectional)
{
    attention_case(5, 8, 2, 2, false, false, 40);
}
END_TEST

START_TEST(test_attention_bidirectional_masked_gqa)
{
    attention_case(5, 8, 4, 2, false, true, 50);
}
END_TEST

START_TEST(test_attention_causal)
{
    attention_case(5, 8, 2, 2, true, false, 60);
}
END_TEST

START_TEST(test_attention_causal_masked_gqa)
{
    attention_case(5, 8, 4, 2, true, true, 70);
    attention_case(5, 8, 4, 1, true, true, 80);
}
END_TEST

/* Large enough for the threaded path: GEMMs on strided head views, (b, head)
 * units split across threads. */
START_TEST(test_attention_threaded)
{
    attention_case(40, 16, 4, 2, false, true, 90);
    attention_case(40, 16, 4, 2, true, true, 100);
    attention_case(33, 12, 2, 2, false, false, 110);
}
END_TEST

/* ---- SwiGLU --------------------------------------------------------------------- */

typedef struct {
    float *out, *gate, *up, *r;
    size_t n;
} swiglu_ctx;

static double swiglu_loss(void *p)
{
    swiglu_ctx *c = p;
    op_swiglu_fwd(c->out, c->gate, c->up, c->n);
    return dot_d(c->r, c->out, c->n);
}

START_TEST(test_swiglu)
{
    swiglu_ctx c = {.n = 60};
    c.out = galloc(c.n), c.gate = galloc(c.n), c.up = galloc(c.n), c.r = galloc(c.n);
    fill_normal(c.gate, c.n, 90, 2.0);
    fill_normal(c.up, c.n, 91, 1.0);
    fill_normal(c.r, c.n, 92, 1.0);
    /* saturated gates: sigmoid at 0 and 1, exp past its float range */
    c.gate[0] = 95.0f, c.gate[1] = -95.0f, c.gate[2] = 30.0f, c.gate[3] = -30.0f;
    swiglu_loss(&c);
    for (size_t i = 0; i < c.n; i++) {
        double g = c.gate[i], want = g / (1 + exp(-g)) * c.up[i];
        ck_assert(fabs(c.out[i] - want) < 1e-5 * (1 + fabs(want)));
    }
    float *dg = galloc(c.n), *du = galloc(c.n);
    op_swiglu_bwd(dg, du, c.r, c.gate, c.up, c.n);
    fd_check(c.gate, dg, c.n, swiglu_loss, &c, 1e-2f, "swiglu dgate");
    fd_check(c.up, du, c.n, swiglu_loss, &c, 1e-2f, "swiglu dup");
    /* written, not added: over stale values, and one output at a time */
    float *dg2 = galloc(c.n), *du2 = galloc(c.n);
    fill_normal(dg2, c.n, 96, 1.0), fill_normal(du2, c.n, 97, 1.0);
    op_swiglu_bwd(dg2, NULL, c.r, c.gate, c.up, c.n);
    op_swiglu_bwd(NULL, du2, c.r, c.gate, c.up, c.n);
    for (size_t i = 0; i < c.n; i++)
        ck_assert(dg2[i] == dg[i] && du2[i] == du[i]);
    check_guard(c.out, c.n), check_guard(dg, c.n), check_guard(du, c.n);
    check_guard(dg2, c.n), check_guard(du2, c.n);
    free(c.out), free(c.gate), free(c.up), free(c.r), free(dg), free(du), free(dg2), free(du2);
}
END_TEST

/* An element's result does not depend on its place in the array: a shifted,
 * shorter slice (other vector/remainder split) gives the same bits. */
START_TEST(test_swiglu_position_invariant)
{
    size_t n = 1000, off = 3;
    float *g = galloc(n), *u = galloc(n), *r = galloc(n), *o1 = galloc(n), *o2 = galloc(n);
    float *dg1 = galloc(n), *du1 = galloc(n), *dg2 = galloc(n), *du2 = galloc(n);
    fill_normal(g, n, 93, 3.0), fill_normal(u, n, 94, 1.0), fill_normal(r, n, 95, 1.0);
    op_swiglu_fwd(o1, g, u, n);
    op_swiglu_bwd(dg1, du1, r, g, u, n);
    op_swiglu_fwd(o2 + off, g + off, u + off, n - off - 2);
    op_swiglu_bwd(dg2 + off, du2 + off, r + off, g + off, u + off, n - off - 2);
    ck_assert(memcmp(o1 + off, o2 + off, (n - off - 2) * sizeof(float)) == 0);
    ck_assert(memcmp(dg1 + off, dg2 + off, (n - off - 2) * sizeof(float)) == 0);
    ck_assert(memcmp(du1 + off, du2 + off, (n - off - 2) * sizeof(float)) == 0);
    free(g), free(u), free(r), free(o1), free(o2), free(dg1), free(du1), free(dg2), free(du2);
}
END_TEST

/* ---- embedding ------------------------------------------------------------------ */

typedef struct {
    float *out, *wte, *r;
    int32_t *ids;
    int N, C;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    op_embedding_fwd(c->out, c->ids, c->wte, c->N, c->C);
    return dot_d(c->r, c->out, (size_t)c->N * c->C);
}

START_TEST(test_embedding)
{
    int V = 5;
    int32_t ids[6] = {3, 0, 3, 4, 1, 3}; /* repeats must accumulate */
    emb_ctx c = {.N = 6, .C = 4, .ids = ids};
    size_t no = (size_t)c.N * c.C, nw = (size_t)V * c.C;
    c.out = galloc(no), c.wte = galloc(nw), c.r = galloc(no);
    fill_normal(c.wte, nw, 100, 1.0);
    fill_normal(c.r, no, 101, 1.0);
    emb_loss(&c);
    for (int n = 0; n < c.N; n++)
        ck_assert(memcmp(c.out + n * c.C, c.wte + ids[n] * c.C, c.C * sizeof(float)) == 0);
    float *dw = galloc(nw);
    op_embedding_bwd(dw, c.r, ids, c.N, c.C);
    for (int i = 0; i < c.C; i++) /* token 2 is never used */
        ck_assert(dw[2 * c.C + i] == 0.0f);
    fd_check(c.wte, dw, nw, emb_loss, &c, 1e-2f, "embedding dwte");
    float *dw2 = galloc(nw);
    op_embedding_bwd(dw2, c.r, ids, c.N, c.C);
    op_embedding_bwd(dw2, c.r, ids, c.N, c.C);
    for (size_t i = 0; i < nw; i++)
        ck_assert(dw2[i] == 2 * dw[i]);
    check_guard(c.out, no), check_guard(dw, nw), check_guard(dw2, nw);
    free(c.out), free(c.wte), free(c.r), free(dw), free(dw2);
}
END_TEST

/* ---- cross-entropy -------------------------------------------------------------- */

typedef struct {
    float *logp, *lse, *logits, *w;
    int32_t *target;
    int N, V;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *c = p;
    op_xent_fwd(c->logp, c->lse, c->logits, c->target, c->N, c->V);
    double l = 0.0;
    for (int n = 0; n < c->N; n++)
        l -= (double)c->w[n] * c->logp[n];
    return l;
}

START_TEST(test_xent)
{
    int32_t target[6] = {2, 9, 0, 2, 5, 7};
    xent_ctx c = {.N = 6, .V = 10, .target = target};
    size_t nl = (size_t)c.N * c.V;
    c.logp = galloc(c.N), c.lse = galloc(c.N), c.logits = galloc(nl), c.w = galloc(c.N);
    fill_normal(c.logits, nl, 110, 2.0);
    c.logits[3 * c.V + 4] = 60.0f; /* a large logit: the max subtraction matters */
    float wts[6] = {1.0f, 0.0f, 0.5f, 2.0f, 0.0f, 1.5f}; /* zero rows are not scored */
    memcpy(c.w, wts, sizeof wts);
    xent_loss(&c);
    for (int n = 0; n < c.N; n++) {
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < c.V; j++)
            mx = fmax(mx, c.logits[n * c.V + j]);
        for (int j = 0; j < c.V; j++)
            s += exp((double)c.logits[n * c.V + j] - mx);
        double lse = mx + log(s), want = c.logits[n * c.V + target[n]] - lse;
        ck_assert_msg(fabs(c.logp[n] - want) < 1e-5 * (1 + fabs(want)), "xent row %d", n);
        ck_assert(fabs(c.lse[n] - lse) < 1e-5 * (1 + fabs(lse)));
        ck_assert(c.logp[n] <= 0.0f);
    }
    float *dlogp = galloc(c.N), *dl = galloc(nl), *dl_nolse = galloc(nl);
    for (int n = 0; n < c.N; n++)
        dlogp[n] = -c.w[n];
    op_xent_bwd(dl, dlogp, c.logits, c.lse, target, c.N, c.V);
    op_xent_bwd(dl_nolse, dlogp, c.logits, NULL, target, c.N, c.V);
    ck_assert(max_abs_diff(dl, dl_nolse, nl) < 1e-5); /* lse kept in fp32 */
    for (int j = 0; j < c.V; j++) /* zero-weight rows get exactly zero */
        ck_assert(dl[1 * c.V + j] == 0.0f && dl[4 * c.V + j] == 0.0f);
    for (int n = 0; n < c.N; n++) { /* each row's gradient sums to zero */
        double s = 0.0;
        for (int j = 0; j < c.V; j++)
            s += dl[n * c.V + j];
        ck_assert(fabs(s) < 1e-5);
    }
    fd_check(c.logits, dl, nl, xent_loss, &c, 1e-2f, "xent dlogits");
    xent_loss(&c); /* lse of the unperturbed logits */
    memcpy(dl_nolse, dl, nl * sizeof(float));
    op_xent_bwd(dl_nolse, dlogp, c.logits, c.lse, target, c.N, c.V);
    for (size_t i = 0; i < nl; i++)
        ck_assert(fabsf(dl_nolse[i] - 2 * dl[i]) <= 1e-6f);
    check_guard(c.logp, c.N), check_guard(c.lse, c.N), check_guard(dl, nl);
    check_guard(dl_nolse, nl);
    free(c.logp), free(c.lse), free(c.logits), free(c.w), free(dlogp), free(dl), free(dl_nolse);
}
END_TEST

/* A vocabulary-sized row (vectorised exp) against libm in double, with logits
 * that underflow exp and one far above the rest. */
START_TEST(test_xent_wide)
{
    int N = 3, V = 5003;
    size_t nl = (size_t)N * V;
    float *logits = galloc(nl), *logp = galloc(N), *lse = galloc(N), *dl = galloc(nl);
    float *dlogp = galloc(N);
    int32_t target[3] = {17, 5002, 0};
    fill_normal(logits, nl, 120, 4.0);
    for (int j = 0; j < V; j += 7)
        logits[(size_t)1 * V + j] = -1e4f;
    logits[(size_t)2 * V + 3] = 80.0f;
    op_xent_fwd(logp, lse, logits, target, N, V);
    for (int n = 0; n < N; n++)
        dlogp[n] = -0.5f - n;
    op_xent_bwd(dl, dlogp, logits, lse, target, N, V);
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, x[j]);
        for (int j = 0; j < V; j++)
            sum += exp((double)x[j] - mx);
        double want_lse = mx + log(sum), want = x[target[n]] - want_lse;
        ck_assert_msg(fabs(logp[n] - want) < 1e-6 * (1 + fabs(want)), "row %d: %g vs %g", n,
                      (double)logp[n], want);
        ck_assert(fabs(lse[n] - want_lse) < 1e-6 * (1 + fabs(want_lse)));
        for (int j = 0; j < V; j++) {
            double sm = exp((double)x[j] - (double)lse[n]);
            double g = (double)dlogp[n] * ((j == target[n]) - sm);
            ck_assert_msg(fabs(dl[(size_t)n * V + j] - g) < 1e-6 * (1 + fabs(g)),
                          "row %d col %d: %g vs %g", n, j, (double)dl[(size_t)n * V + j], g);
        }
    }
    check_guard(logp, N), check_guard(lse, N), check_guard(dl, nl);
    free(logits), free(logp), free(lse), free(dl), free(dlogp);
}
END_TEST

/* ---- AdamW, norms, clipping ----------------------------------------------------- */

/* AdamW for a few steps against the torch formula in double. The second
 * setting makes eps comparable to sqrt(v), so where eps sits matters. */
static void adamw_case(float lr, float b1, float b2, float eps, float wd, double gscale,
                       uint64_t seed)
{
    enum { NP = 33 };
    size_t n = NP;
    float *p = galloc(n), *g = galloc(n), *m = galloc(n), *v = galloc(n);
    double pd[NP], md[NP] = {0}, vd[NP] = {0};
    fill_normal(p, n, seed, 1.0);
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    for (int t = 1; t <= 3; t++) {
        fill_normal(g, n, seed + t, gscale);
        if (t == 2)
            g[5] = 0.0f; /* a zero gradient still decays and moves by momentum */
        op_adamw(p, g, m, v, n, t, lr, b1, b2, eps, wd);
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = b1 * md[i] + (1.0 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1.0 - b2) * (double)g[i] * g[i];
            pd[i] -= (lr / bc1) * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(p[i] - pd[i]) < 1e-6 * (1 + fabs(pd[i])),
                          "adamw step %d p[%zu] %.9g vs %.9g", t, i, (double)p[i], pd[i]);
            ck_assert(fabs(m[i] - md[i]) < 1e-6 * (gscale + fabs(md[i])));
            ck_assert(fabs(v[i] - vd[i]) < 1e-6 * (gscale * gscale + fabs(vd[i])));
        }
    }
    check_guard(p, n), check_guard(m, n), check_guard(v, n);
    free(p), free(g), free(m), free(v);
}

START_TEST(test_adamw)
{
    adamw_case(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0, 120);
    adamw_case(1e-1f, 0.8f, 0.99f, 1e-2f, 0.0f, 0.01, 125);
}
END_TEST

/* The CPU backend's adamw_step is the three ops in turn, bit for bit (a refactor of the
 * update path keeps the numerics), and a non-finite gradient norm updates nothing. */
START_TEST(test_adamw_step_cpu)
{
    enum { NP = 1001 };
    size_t n = NP;
    dllm_backend *be = dllm_backend_cpu();
    float *p = galloc(n), *g = galloc(n), *m = galloc(n), *v = galloc(n);
    float *pr = galloc(n), *gr = galloc(n), *mr = galloc(n), *vr = galloc(n);
    fill_normal(p, n, 130, 1.0);
    memcpy(pr, p, n * sizeof *p);
    for (int t = 1; t <= 3; t++) {
        fill_normal(g, n, 130 + t, 0.1);
        memcpy(gr, g, n * sizeof *g);
        double max_norm = t == 2 ? 0.0 : 0.5; /* clipped, not clipped, clipped */
        dllm_adamw_args a = {t, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, max_norm};
        double norm = be->ops->adamw_step(be, p, g, m, v, n, &a);
        double want = op_grad_norm(gr, n);
        if (max_norm > 0)
            op_clip_grad(gr, n, want, max_norm);
        op_adamw(pr, gr, mr, vr, n, t, a.lr, a.b1, a.b2, a.eps, a.wd);
        ck_assert(norm == want);
        ck_assert(memcmp(g, gr, n * sizeof *g) == 0);
        ck_assert(memcmp(p, pr, n * sizeof *p) == 0);
        ck_assert(memcmp(m, mr, n * sizeof *m) == 0);
        ck_assert(memcmp(v, vr, n * sizeof *v) == 0);
    }
    g[7] = INFINITY;
    dllm_adamw_args a = {4, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5};
    ck_assert(!isfinite(be->ops->adamw_step(be, p, g, m, v, n, &a)));
    ck_assert(memcmp(p, pr, n * sizeof *p) == 0);
    ck_assert(memcmp(m, mr, n * sizeof *m) == 0);
    ck_assert(memcmp(v, vr, n * sizeof *v) == 0);
    check_guard(p, n), check_guard(g, n), check_guard(m, n), check_guard(v, n);
    free(p), free(g), free(m), free(v), free(pr), free(gr), free(mr), free(vr);
}
END_TEST

static uint32_t bitsf_(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Loads tests/data/ops/<name>; fails the test if it is missing. */
static char *load_golden(const char *name, size_t *len)
{
    const char *dir = getenv("DLLM_TEST_DATA");
    ck_assert_msg(dir != NULL, "DLLM_TEST_DATA is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/ops/%s", dir, name);
    char *buf = NULL;
    dllm_err err = {0};
    ck_assert_msg(dllm_read_file(path, &buf, len, &err) == 0, "%s", err.msg);
    return buf;
}

/* AdamW against torch.optim.AdamW on the CPU. The moments go through the same
 * fp32 operations (fused multiply-adds included) and must match bit for bit;
 * the parameter may differ by an ulp in rare elements (torch's vector kernels),
 * so it is held to one ulp and to being mostly exact. */
START_TEST(test_adamw_torch)
{
    enum { NCASE = 2, NP = 64, STEPS = 5 };
    size_t len;
    char *buf = load_golden("adamw.bin", &len);
    size_t case_floats = 5 + NP + (size_t)STEPS * 4 * NP, exact = 0;
    ck_assert_uint_eq(len, NCASE * case_floats * sizeof(float));
    const float *f = (const float *)buf;
    for (int c = 0; c < NCASE; c++, f += case_floats) {
        float lr = f[0], b1 = f[1], b2 = f[2], eps = f[3], wd = f[4];
        float *p = galloc(NP), *m = galloc(NP), *v = galloc(NP);
        memcpy(p, f + 5, NP * sizeof(float));
        for (int t = 1; t <= STEPS; t++) {
            const float *g = f + 5 + NP + (size_t)(t - 1) * 4 * NP;
            const float *tp = g + NP, *tm = g + 2 * NP, *tv = g + 3 * NP;
            op_adamw(p, g, m, v, NP, t, lr, b1, b2, eps, wd);
            for (int i = 0; i < NP; i++) {
                ck_assert_msg(bitsf_(m[i]) == bitsf_(tm[i]) && bitsf_(v[i]) == bitsf_(tv[i]),
                              "case %d step %d [%d]: m %.9g vs %.9g, v %.9g vs %.9g", c, t, i,
                              (double)m[i], (double)tm[i], (double)v[i], (double)tv[i]);
                ck_assert_msg(p[i] == tp[i] || nextafterf(p[i], tp[i]) == tp[i],
                              "case %d step %d [%d]: p %.9g vs torch %.9g", c, t, i,
                              (double)p[i], (double)tp[i]);
                exact += p[i] == tp[i];
                p[i] = tp[i]; /* continue from torch's state */
            }
        }
        check_guard(p, NP), check_guard(m, NP), check_guard(v, NP);
        free(p), free(m), free(v);
    }
    ck_assert_msg(exact >= NCASE * STEPS * NP * 98 / 100, "only %zu exact parameters", exact);
    free(buf);
}
END_TEST

/* The RoPE table against torch's fp32 cos/sin of the same fp32 angles. */
START_TEST(test_rope_table_torch)
{
    size_t len;
    char *buf = load_golden("rope.bin", &len);
    ck_assert(len >= 12);
    float theta;
    int32_t hd, npos;
    memcpy(&theta, buf, 4), memcpy(&hd, buf + 4, 4), memcpy(&npos, buf + 8, 4);
    int half = hd / 2;
    ck_assert_uint_eq(len, 12 + (size_t)npos * 4 + 2 * (size_t)npos * half * 4);
    const int32_t *pos = (const int32_t *)(buf + 12);
    const float *tc = (const float *)(buf + 12 + (size_t)npos * 4);
    const float *ts = tc + (size_t)npos * half;
    int max_pos = pos[npos - 1] + 1;
    op_rope_table t;
    op_rope_table_init(&t, max_pos, hd, theta);
    size_t exact = 0;
    for (int j = 0; j < npos; j++)
        for (int i = 0; i < half; i++) {
            float c = t.cos[(size_t)pos[j] * half + i], sn = t.sin[(size_t)pos[j] * half + i];
            float wc = tc[(size_t)j * half + i], ws = ts[(size_t)j * half + i];
            /* torch's vectorised fp32 cos/sin are within an ulp of ours */
            ck_assert_msg(fabsf(c - wc) <= 1.2e-7f && fabsf(sn - ws) <= 1.2e-7f,
                          "pos %d i %d: cos %.9g vs %.9g, sin %.9g vs %.9g", pos[j], i,
                          (double)c, (double)wc, (double)sn, (double)ws);
            exact += (c == wc) + (sn == ws);
        }
    ck_assert(exact > (size_t)npos * half); /* most entries agree exactly */
    op_rope_table_free(&t);
    free(buf);
}
END_TEST

START_TEST(test_grad_norm_and_clip)
{
    size_t n = 200003; /* several fixed chunks */
    float *g = galloc(n);
    fill_normal(g, n, 140, 1.0);
    double want = 0.0;
    for (size_t i = 0; i < n; i++)
        want += (double)g[i] * g[i];
    want = sqrt(want);
    double norm = op_grad_norm(g, n);
    ck_assert(fabs(norm - want) < 1e-9 * want);
    /* below max: untouched */
    float *g0 = galloc(n);
    memcpy(g0, g, n * sizeof(float));
    ck_assert(op_clip_grad(g, n, norm, 2 * norm) == norm);
    ck_assert(memcmp(g, g0, n * sizeof(float)) == 0);
    /* above max: scaled to max_norm / (norm + 1e-6) */
    double maxn = norm / 4;
    ck_assert(op_clip_grad(g, n, norm, maxn) == norm);
    double coef = maxn / (norm + 1e-6);
    for (size_t i = 0; i < n; i += 97)
        ck_assert(fabs(g[i] - g0[i] * coef) <= 1e-6 * fabs(g0[i]) + 1e-12);
    ck_assert(fabs(op_grad_norm(g, n) - maxn) < 1e-5 * maxn);
    check_guard(g, n), check_guard(g0, n);
    free(g), free(g0);
}
END_TEST

/* ---- bf16 / f16 ----------------------------------------------------------------- */

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bitsf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Nearest-even bf16 by comparing distances in double to the two neighbours. */
static uint16_t bf16_reference(float x)
{
    uint32_t u = bitsf(x);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dx = x, dlo = fbits((uint32_t)lo << 16);
    double dhi = ((hi & 0x7F80) == 0x7F80) ? copysign(0x1p128, dx) /* next is inf */
                                            : (double)fbits((uint32_t)hi << 16);
    double elo = fabs(dx - dlo), ehi = fabs(dhi - dx);
    if (elo < ehi)
        return lo;
    if (ehi < elo)
        return hi;
    return (lo & 1) ? hi : lo;
}

START_TEST(test_bf16)
{
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x3F808000u)), 0x3F80); /* tie, even below */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x3F818000u)), 0x3F82); /* tie, odd: up */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x3F808001u)), 0x3F81); /* past the tie */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x3F807FFFu)), 0x3F80);
    ck_assert_uint_eq(op_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(op_f32_to_bf16(-2.0f), 0xC000);
    ck_assert_uint_eq(op_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(op_f32_to_bf16(-INFINITY), 0xFF80);
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x7F7FFFFFu)), 0x7F80);  /* FLT_MAX -> inf */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x7F7F7FFFu)), 0x7F7F);  /* below the tie */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x7F7F8000u)), 0x7F80);  /* tie to even: inf */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0xFF7F8000u)), 0xFF80);
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x00008000u)), 0x0000);  /* subnormal tie */
    ck_assert_uint_eq(op_f32_to_bf16(fbits(0x00018000u)), 0x0002);
    /* NaNs stay NaN, including ones whose payload sits only in the low bits */
    uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F80FFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = op_f32_to_bf16(fbits(nans[i]));
        ck_assert_msg(isnan(op_bf16_to_f32(h)), "NaN 0x%08x became 0x%04x", nans[i], h);
        ck_assert_uint_eq(h >> 15, nans[i] >> 31);
    }
    /* every non-NaN bf16 survives bf16 -> f32 -> bf16 and widens exactly */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = op_bf16_to_f32((uint16_t)h);
        ck_assert(bitsf(f) == h << 16);
        if (!isnan(f))
            ck_assert_uint_eq(op_f32_to_bf16(f), h);
    }
    /* random fp32 patterns against the nearest-even reference */
    dllm_rng r = dllm_rng_make(150, 0, 0, 0);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)dllm_rng_u64(&r);
        float x = fbits(u);
        if (isnan(x))
            continue;
        ck_assert_msg(op_f32_to_bf16(x) == bf16_reference(x), "0x%08x", u);
    }
    /* arrays and in-place rounding agree with the scalar */
    enum { NA = 1000 };
    float *x = galloc(NA), *back = galloc(NA), *rounded = galloc(NA);
    uint16_t *h = dllm_malloc((NA + 4) * sizeof(uint16_t));
    h[NA] = h[NA + 1] = 0xABCD;
    fill_normal(x, NA, 151, 10.0);
    op_f32_to_bf16_array(h, x, NA);
    op_bf16_to_f32_array(back, h, NA);
    memcpy(rounded, x, NA * sizeof(float));
    op_round_bf16(rounded, NA);
    for (int i = 0; i < NA; i++) {
        ck_assert(h[i] == op_f32_to_bf16(x[i]));
        ck_assert(bitsf(back[i]) == bitsf(rounded[i]));
        ck_assert(fabsf(rounded[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f);
    }
    ck_assert(h[NA] == 0xABCD && h[NA + 1] == 0xABCD);
    check_guard(back, NA), check_guard(rounded, NA);
    free(x), free(back), free(rounded), free(h);
}
END_TEST

START_TEST(test_f16)
{
    /* decoding against the IEEE definition */
    ck_assert(op_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(op_f16_to_f32(0xC000) == -2.0f);
    ck_assert(op_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(op_f16_to_f32(0x0400) == 0x1p-14f);
    ck_assert(op_f16_to_f32(0x0001) == 0x1p-24f); /* smallest subnormal */
    ck_assert(op_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    ck_assert(op_f16_to_f32(0x8001) == -0x1p-24f);
    ck_assert(op_f16_to_f32(0x7C00) == INFINITY && op_f16_to_f32(0xFC00) == -INFINITY);
    ck_assert(isnan(op_f16_to_f32(0x7E00)) && isnan(op_f16_to_f32(0x7C01)));
    ck_assert(bitsf(op_f16_to_f32(0x8000)) == 0x80000000u);
    /* encoding: rounding, overflow, subnormals */
    ck_assert_uint_eq(op_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(op_f32_to_f16(65519.0f), 0x7BFF);
    ck_assert_uint_eq(op_f32_to_f16(65520.0f), 0x7C00); /* tie to even is inf */
    ck_assert_uint_eq(op_f32_to_f16(1e10f), 0x7C00);
    ck_assert_uint_eq(op_f32_to_f16(-1e10f), 0xFC00);
    ck_assert_uint_eq(op_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);     /* tie, even below */
    ck_assert_uint_eq(op_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie, odd: up */
    ck_assert_uint_eq(op_f32_to_f16(0x1p-25f), 0x0000);            /* half the tiniest: even */
    ck_assert_uint_eq(op_f32_to_f16(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(op_f32_to_f16(3 * 0x1p-25f), 0x0002);        /* 1.5 ulps: even */
    ck_assert_uint_eq(op_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);  /* rounds up to normal */
    ck_assert_uint_eq(op_f32_to_f16(1e-30f), 0x0000);
    ck_assert_uint_eq(op_f32_to_f16(-1e-30f), 0x8000);
    ck_assert(isnan(op_f16_to_f32(op_f32_to_f16(NAN))));
    ck_assert(isnan(op_f16_to_f32(op_f32_to_f16(fbits(0x7F800001u)))));
    /* every finite half and both infinities round-trip exactly */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = op_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        ck_assert_msg(op_f32_to_f16(f) == h, "half 0x%04x -> %g -> 0x%04x", h, (double)f,
                      op_f32_to_f16(f));
    }
#ifdef __FLT16_MAX__
    /* random fp32 patterns against the compiler's own conversion */
    dllm_rng r = dllm_rng_make(160, 0, 0, 0);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)dllm_rng_u64(&r);
        /* bias the exponent into and around the half range */
        u = (u & 0x807FFFFFu) | ((uint32_t)(96 + dllm_rng_below(&r, 64)) << 23);
        float x = fbits(u);
        _Float16 hv = (_Float16)x;
        uint16_t want;
        memcpy(&want, &hv, sizeof want);
        ck_assert_msg(op_f32_to_f16(x) == want, "0x%08x: 0x%04x vs 0x%04x", u,
                      op_f32_to_f16(x), want);
        ck_assert(op_f16_to_f32(want) == (float)hv);
    }
#endif
}
END_TEST

/* ---- thread-count independence --------------------------------------------------- */

#ifdef _OPENMP
START_TEST(test_thread_independence)
{
    int B = 2, T = 48, NH = 4, NKV = 2, HD = 16, C = 512, N = 300, V = 700;
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    size_t na = (size_t)B * NH * T * T, nx = (size_t)N * C, nl = (size_t)N * V;
    float *q = galloc(nq), *k = galloc(nk), *v = galloc(nk), *go = galloc(nq);
    float *x = galloc(nx), *w = galloc(C), *gx = galloc(nx), *logits = galloc(nl);
    fill_normal(q, nq, 170, 0.5), fill_normal(k, nk, 171, 0.5), fill_normal(v, nk, 172, 1);
    fill_normal(go, nq, 173, 1), fill_normal(x, nx, 174, 1), fill_normal(w, C, 175, 1);
    fill_normal(gx, nx, 176, 1), fill_normal(logits, nl, 177, 3);
    uint8_t *mask = dllm_malloc((size_t)B * T);
    for (int i = 0; i < B * T; i++)
        mask[i] = (i % 7) != 3;
    int32_t *ids = dllm_malloc(N * sizeof(int32_t)), *tg = dllm_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7) % 11, tg[i] = (i * 13) % V;
    float *dlogp = galloc(N);
    for (int i = 0; i < N; i++)
        dlogp[i] = (i % 3) ? -1.0f : 0.0f;

    float *res[2][10];
    size_t sizes[10] = {nq, na, nq, nk, nk, nx, C, nx, (size_t)11 * C, nl};
    int saved = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        for (int j = 0; j < 10; j++)
            res[run][j] = galloc(sizes[j]);
        float **o = res[run];
        op_attention_fwd(o[0], o[1], q, k, v, mask, B, T, NH, NKV, HD, true);
        op_attention_bwd(o[2], o[3], o[4], go, o[1], q, k, v, B, T, NH, NKV, HD);
        float *rstd = galloc(N);
        op_rmsnorm_fwd(o[5], rstd, x, w, N, C, 1e-6f);
        op_rmsnorm_bwd(o[7], o[6], gx, x, w, rstd, N, C);
        op_embedding_bwd(o[8], gx, ids, N, C);
        float *lp = galloc(N), *lse = galloc(N);
        op_xent_fwd(lp, lse, logits, tg, N, V);
        op_xent_bwd(o[9], dlogp, logits, lse, tg, N, V);
        free(rstd), free(lp), free(lse);
        for (int j = 0; j < 10; j++)
            check_guard(o[j], sizes[j]);
    }
    omp_set_num_threads(saved);
    for (int j = 0; j < 10; j++) {
        ck_assert_msg(memcmp(res[0][j], res[1][j], sizes[j] * sizeof(float)) == 0,
                      "output %d differs between 1 and 2 threads", j);
        ck_assert(max_abs(res[0][j], sizes[j]) > 0);
        free(res[0][j]), free(res[1][j]);
    }
    free(q), free(k), free(v), free(go), free(x), free(w), free(gx), free(logits);
    free(mask), free(ids), free(tg), free(dlogp);
}
END_TEST
#endif

static Suite *ops_suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gemm_forward);
    tcase_add_test(tc, test_linear_grad);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_attention_bidirectional);
    tcase_add_test(tc, test_attention_bidirectional_masked_gqa);
    tcase_add_test(tc, test_attention_causal);
    tcase_add_test(tc, test_attention_causal_masked_gqa);
    tcase_add_test(tc, test_attention_threaded);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_swiglu_position_invariant);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_xent);
    tcase_add_test(tc, test_xent_wide);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_adamw_step_cpu);
    tcase_add_test(tc, test_adamw_torch);
    tcase_add_test(tc, test_rope_table_torch);
    tcase_add_test(tc, test_grad_norm_and_clip);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_f16);
#ifdef _OPENMP
    tcase_add_test(tc, test_thread_independence);
#endif
    suite_add_tcase(s, tc);
    return s;
}

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    return ops_suite();
}
