/* test_qwen35.c: Qwen3.5's text model (dllm/qwen35.h) and the Gated DeltaNet ops
 * (kernels/gated_delta.h).
 *
 *  - the gated delta rule's chunked and recurrent forms against the published torch
 *    functions (tests/ref/make_qwen35_goldens.py) and against each other (1e-5);
 *  - every op's backward against central finite differences of L = sum(r * out);
 *  - two tiny random models saved by transformers' Qwen3_5ForCausalLM: logits
 *    within 1e-4, greedy ids identical to its generate(), the cached decode equal
 *    to the full forward;
 *  - bad input: an unknown layer_types entry, a missing linear-attention tensor, a
 *    checkpoint with no text model -- exit 2 naming the key or tensor. */
#include "dllm/qwen35.h"
#include "dllm/safetensors.h"
#include "kernels/gated_delta.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------------------- */

static float *rnd(size_t n, uint64_t seed, double scale)
{
    float *x = malloc((n + 1) * sizeof(float));
    dllm_rng r = dllm_rng_make(seed, 31, 0, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * dllm_rng_normal(&r));
    return x;
}

static float *zeros(size_t n) { return calloc(n + 1, sizeof(float)); }

static float *golden(st_archive *a, const char *name, size_t *n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t != NULL, "golden tensor %s missing", name);
    float *p = malloc(((size_t)t->numel + 1) * sizeof(float));
    dllm_err err = {0};
    ck_assert_msg(st_read_f32(a, name, t->shape, t->ndim, p, &err) == 0, "%s", err.msg);
    if (n)
        *n = (size_t)t->numel;
    return p;
}

static int32_t *golden_ids(st_archive *a, const char *name, size_t *n)
{
    const st_tensor *t = st_find(a, name);
    ck_assert_msg(t != NULL && t->dtype == ST_I32, "golden tensor %s missing or not I32", name);
    int32_t *p = malloc((size_t)t->numel * sizeof(int32_t) + 4);
    memcpy(p, t->data, (size_t)t->numel * sizeof(int32_t));
    *n = (size_t)t->numel;
    return p;
}

/* ---- the rule against the published functions ----------------------------------------- */

START_TEST(rule_matches_published)
{
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    float *q = golden(a, "gdr.q", NULL), *k = golden(a, "gdr.k", NULL);
    float *v = golden(a, "gdr.v", NULL), *g = golden(a, "gdr.g", NULL);
    float *beta = golden(a, "gdr.beta", NULL), *s0 = golden(a, "gdr.s0", NULL);
    size_t no, ns;
    float *co = golden(a, "gdr.chunk_out", &no), *cs = golden(a, "gdr.chunk_state", &ns);
    float *ro = golden(a, "gdr.rec_out", NULL), *rs = golden(a, "gdr.rec_state", NULL);
    int T = 13, Hk = 2, Dk = 8, Hv = 4, Dv = 6;
    /* the published functions normalise q and k inside */
    gd_l2norm_fwd(q, NULL, q, T * Hk, Dk, 1e-6f);
    gd_l2norm_fwd(k, NULL, k, T * Hk, Dk, 1e-6f);
    float *o = zeros(no), *S = zeros(ns);
    gd_rule_chunked_fwd(o, S, q, k, v, g, beta, s0, 1, T, Hk, Dk, Hv, Dv, 4);
    ck_assert_msg(tu_max_abs_diff(o, co, no) < 1e-5, "chunked out %g",
                  tu_max_abs_diff(o, co, no));
    ck_assert_msg(tu_max_abs_diff(S, cs, ns) < 1e-5, "chunked state %g",
                  tu_max_abs_diff(S, cs, ns));
    gd_rule_recurrent_fwd(o, S, q, k, v, g, beta, s0, 1, T, Hk, Dk, Hv, Dv);
    ck_assert_msg(tu_max_abs_diff(o, ro, no) < 1e-5, "recurrent out %g",
                  tu_max_abs_diff(o, ro, no));
    ck_assert_msg(tu_max_abs_diff(S, rs, ns) < 1e-5, "recurrent state %g",
                  tu_max_abs_diff(S, rs, ns));
    float *bufs[] = {q, k, v, g, beta, s0, co, cs, ro, rs, o, S};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    st_close(a);
}
END_TEST

/* Chunked and recurrent forms on a longer sequence, batch 2, several chunk sizes,
 * and a state carried across two calls equal to one call over both halves. */
START_TEST(rule_chunked_equals_recurrent)
{
    int B = 2, T = 150, Hk = 2, Dk = 16, Hv = 4, Dv = 8;
    size_t nq = (size_t)B * T * Hk * Dk, nv = (size_t)B * T * Hv * Dv, ng = (size_t)B * T * Hv;
    size_t ns = (size_t)B * Hv * Dk * Dv;
    float *q = rnd(nq, 1, 1), *k = rnd(nq, 2, 1), *v = rnd(nv, 3, 1), *g = rnd(ng, 4, 1);
    float *beta = rnd(ng, 5, 1), *s0 = rnd(ns, 6, 0.3);
    for (size_t i = 0; i < ng; i++) {
        g[i] = -fabsf(g[i]) * 0.3f;
        beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    }
    gd_l2norm_fwd(q, NULL, q, B * T * Hk, Dk, 1e-6f);
    gd_l2norm_fwd(k, NULL, k, B * T * Hk, Dk, 1e-6f);
    float *ro = zeros(nv), *rs = zeros(ns), *co = zeros(nv), *cs = zeros(ns);
    gd_rule_recurrent_fwd(ro, rs, q, k, v, g, beta, s0, B, T, Hk, Dk, Hv, Dv);
    int chunks[] = {1, 7, 64, 200};
    for (int c = 0; c < 4; c++) {
        gd_rule_chunked_fwd(co, cs, q, k, v, g, beta, s0, B, T, Hk, Dk, Hv, Dv, chunks[c]);
        ck_assert_msg(tu_max_abs_diff(co, ro, nv) < 1e-5, "chunk %d: out %g", chunks[c],
                      tu_max_abs_diff(co, ro, nv));
        ck_assert_msg(tu_max_abs_diff(cs, rs, ns) < 1e-5, "chunk %d: state %g", chunks[c],
                      tu_max_abs_diff(cs, rs, ns));
    }
    ck_assert(tu_max_abs(ro, nv) > 0.05);
    free(q), free(k), free(v), free(g), free(beta), free(s0), free(ro), free(rs), free(co),
        free(cs);
}
END_TEST

/* ---- finite differences ------------------------------------------------------------------ */

/* The forward of an op as a function of its inputs: fills out from in[]. */
typedef void (*fwd_fn)(float **in, float *out, void *ctx);

/* Central differences of L = sum(r * out) w.r.t. every entry of in[which] (n of them)
 * against the analytic gradient an (n); tolerance relative to the largest entry. */
static void fd_check(fwd_fn f, void *ctx, float **in, int which, size_t n, float *out, size_t nout,
                     const float *r, const float *an, const char *what)
{
    double maxg = 1e-3, worst = 0;
    for (size_t i = 0; i < n; i++)
        maxg = fabs(an[i]) > maxg ? fabs(an[i]) : maxg;
    for (size_t i = 0; i < n; i++) {
        float x0 = in[which][i], h = 1e-2f * (fabsf(x0) > 1 ? fabsf(x0) : 1.0f);
        double lp = 0, lm = 0;
        in[which][i] = x0 + h;
        f(in, out, ctx);
        for (size_t j = 0; j < nout; j++)
            lp += (double)r[j] * out[j];
        in[which][i] = x0 - h;
        f(in, out, ctx);
        for (size_t j = 0; j < nout; j++)
            lm += (double)r[j] * out[j];
        in[which][i] = x0;
        double num = (lp - lm) / (2.0 * h), d = fabs(num - an[i]) / maxg;
        worst = d > worst ? d : worst;
    }
    ck_assert_msg(worst < 2e-2, "%s: finite differences differ by %g of the largest gradient",
                  what, worst);
}

enum { B_ = 2, T_ = 9, D_ = 5, K_ = 4 };

static void conv_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_conv_fwd(out, NULL, NULL, in[0], in[2], in[1], B_, T_, D_, K_);
}

START_TEST(conv_backward)
{
    size_t nx = B_ * T_ * D_, nw = D_ * K_, nst = B_ * (K_ - 1) * D_;
    float *in[3] = {rnd(nx, 11, 1), rnd(nw, 12, 0.5), rnd(nst, 13, 1)};
    float *out = zeros(nx), *pre = zeros(nx), *r = rnd(nx, 14, 1), *st = zeros(nst);
    float *d[3] = {zeros(nx), zeros(nw), zeros(nst)};
    gd_conv_fwd(out, pre, st, in[0], in[2], in[1], B_, T_, D_, K_);
    /* the state out is the last K-1 inputs */
    for (int b = 0; b < B_; b++)
        for (int j = 0; j < K_ - 1; j++)
            for (int c = 0; c < D_; c++)
                ck_assert(st[((size_t)b * (K_ - 1) + j) * D_ + c] ==
                          in[0][((size_t)b * T_ + T_ - (K_ - 1) + j) * D_ + c]);
    gd_conv_bwd(d[0], d[1], d[2], r, pre, in[0], in[2], in[1], B_, T_, D_, K_);
    fd_check(conv_f, NULL, in, 0, nx, out, nx, r, d[0], "conv dx");
    fd_check(conv_f, NULL, in, 1, nw, out, nx, r, d[1], "conv dw");
    fd_check(conv_f, NULL, in, 2, nst, out, nx, r, d[2], "conv dstate");
    /* a sequence split in two through the state equals it whole */
    float *o1 = zeros(nx), *st2 = zeros(nst);
    int T1 = 4;
    float *xa = malloc(sizeof(float) * B_ * T1 * D_), *xb = malloc(sizeof(float) * B_ * (T_ - T1) * D_);
    float *oa = zeros(B_ * T1 * D_), *ob = zeros(B_ * (T_ - T1) * D_);
    for (int b = 0; b < B_; b++) {
        memcpy(xa + (size_t)b * T1 * D_, in[0] + (size_t)b * T_ * D_, sizeof(float) * T1 * D_);
        memcpy(xb + (size_t)b * (T_ - T1) * D_, in[0] + ((size_t)b * T_ + T1) * D_,
               sizeof(float) * (T_ - T1) * D_);
    }
    gd_conv_fwd(o1, NULL, NULL, in[0], NULL, in[1], B_, T_, D_, K_);
    gd_conv_fwd(oa, NULL, st2, xa, NULL, in[1], B_, T1, D_, K_);
    gd_conv_fwd(ob, NULL, st2, xb, st2, in[1], B_, T_ - T1, D_, K_);
    for (int b = 0; b < B_; b++)
        for (int t = 0; t < T_; t++)
            for (int c = 0; c < D_; c++) {
                float whole = o1[((size_t)b * T_ + t) * D_ + c];
                float part = t < T1 ? oa[((size_t)b * T1 + t) * D_ + c]
                                    : ob[((size_t)b * (T_ - T1) + t - T1) * D_ + c];
                ck_assert_msg(fabsf(whole - part) < 1e-6f, "split conv at (%d,%d,%d)", b, t, c);
            }
    for (int i = 0; i < 3; i++)
        free(in[i]), free(d[i]);
    free(out), free(pre), free(r), free(st), free(o1), free(st2), free(xa), free(xb), free(oa),
        free(ob);
}
END_TEST

static void l2_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_l2norm_fwd(out, NULL, in[0], 6, 7, 1e-6f);
}

START_TEST(l2norm_backward)
{
    float *in[1] = {rnd(42, 21, 1)}, *out = zeros(42), *rn = zeros(6), *r = rnd(42, 22, 1);
    float *dx = zeros(42);
    gd_l2norm_fwd(out, rn, in[0], 6, 7, 1e-6f);
    for (int i = 0; i < 6; i++) {
        double s = 0;
        for (int j = 0; j < 7; j++)
            s += (double)out[i * 7 + j] * out[i * 7 + j];
        ck_assert_msg(fabs(s - 1) < 1e-5, "row %d norm^2 %g", i, s);
    }
    gd_l2norm_bwd(dx, r, out, rn, 6, 7);
    fd_check(l2_f, NULL, in, 0, 42, out, 42, r, dx, "l2norm dx");
    free(in[0]), free(out), free(rn), free(r), free(dx);
}
END_TEST

enum { GN_ = 5, GH_ = 3 };
static void gates_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_gates_fwd(out, out + GN_ * GH_, in[0], in[1], in[2], in[3], GN_, GH_);
}

START_TEST(gates_backward)
{
    size_t n = GN_ * GH_;
    float *in[4] = {rnd(n, 31, 1), rnd(n, 32, 1), rnd(GH_, 33, 1), rnd(GH_, 34, 1)};
    float *out = zeros(2 * n), *r = rnd(2 * n, 35, 1);
    float *d[4] = {zeros(n), zeros(n), zeros(GH_), zeros(GH_)};
    gates_f(in, out, NULL);
    for (size_t i = 0; i < n; i++)
        ck_assert(out[i] < 0 && out[n + i] > 0 && out[n + i] < 1);
    gd_gates_bwd(d[0], d[1], d[2], d[3], r, r + n, in[0], in[1], in[2], in[3], GN_, GH_);
    const char *names[] = {"gates da", "gates db", "gates dA_log", "gates ddt_bias"};
    size_t ns[] = {n, n, GH_, GH_};
    for (int i = 0; i < 4; i++)
        fd_check(gates_f, NULL, in, i, ns[i], out, 2 * n, r, d[i], names[i]);
    for (int i = 0; i < 4; i++)
        free(in[i]), free(d[i]);
    free(out), free(r);
}
END_TEST

enum { RB = 2, RT = 70, RHk = 1, RDk = 3, RHv = 2, RDv = 2 };
static void rule_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_rule_recurrent_fwd(out, NULL, in[0], in[1], in[2], in[3], in[4], in[5], RB, RT, RHk, RDk,
                          RHv, RDv);
}

/* T = 70 crosses the backward's 64-token recomputation segment. */
START_TEST(rule_backward)
{
    size_t nq = RB * RT * RHk * RDk, nv = RB * RT * RHv * RDv, ng = RB * RT * RHv;
    size_t ns = RB * RHv * RDk * RDv;
    float *in[6] = {rnd(nq, 41, 1), rnd(nq, 42, 1), rnd(nv, 43, 1), rnd(ng, 44, 1),
                    rnd(ng, 45, 1), rnd(ns, 46, 0.5)};
    for (size_t i = 0; i < ng; i++) {
        in[3][i] = -fabsf(in[3][i]) * 0.2f;
        in[4][i] = 1.0f / (1.0f + expf(-in[4][i]));
    }
    float *out = zeros(nv), *r = rnd(nv, 47, 1);
    float *d[6] = {zeros(nq), zeros(nq), zeros(nv), zeros(ng), zeros(ng), zeros(ns)};
    gd_rule_bwd(d[0], d[1], d[2], d[3], d[4], d[5], r, in[0], in[1], in[2], in[3], in[4], in[5],
                RB, RT, RHk, RDk, RHv, RDv);
    const char *names[] = {"rule dq", "rule dk", "rule dv", "rule dg", "rule dbeta",
                           "rule dstate"};
    size_t ns_[] = {nq, nq, nv, ng, ng, ns};
    for (int i = 0; i < 6; i++)
        fd_check(rule_f, NULL, in, i, ns_[i], out, nv, r, d[i], names[i]);
    /* accumulation: a second backward doubles every gradient */
    float *dq2 = zeros(nq);
    memcpy(dq2, d[0], nq * sizeof(float));
    gd_rule_bwd(d[0], NULL, NULL, NULL, NULL, NULL, r, in[0], in[1], in[2], in[3], in[4], in[5],
                RB, RT, RHk, RDk, RHv, RDv);
    for (size_t i = 0; i < nq; i++)
        ck_assert(fabsf(d[0][i] - 2 * dq2[i]) <= 1e-6f * (1 + fabsf(dq2[i])));
    for (int i = 0; i < 6; i++)
        free(in[i]), free(d[i]);
    free(out), free(r), free(dq2);
}
END_TEST

static void gnorm_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_gated_rmsnorm_fwd(out, NULL, in[0], in[1], in[2], 4, 6, 1e-6f);
}

START_TEST(gated_rmsnorm_backward)
{
    float *in[3] = {rnd(24, 51, 1), rnd(24, 52, 1), rnd(6, 53, 1)};
    float *out = zeros(24), *rs = zeros(4), *r = rnd(24, 54, 1);
    float *d[3] = {zeros(24), zeros(24), zeros(6)};
    gd_gated_rmsnorm_fwd(out, rs, in[0], in[1], in[2], 4, 6, 1e-6f);
    gd_gated_rmsnorm_bwd(d[0], d[1], d[2], r, in[0], in[1], in[2], rs, 4, 6);
    const char *names[] = {"gated norm dx", "gated norm dz", "gated norm dw"};
    size_t ns[] = {24, 24, 6};
    for (int i = 0; i < 3; i++)
        fd_check(gnorm_f, NULL, in, i, ns[i], out, 24, r, d[i], names[i]);
    for (int i = 0; i < 3; i++)
        free(in[i]), free(d[i]);
    free(out), free(rs), free(r);
}
END_TEST

static const int32_t rope_pos[3] = {0, 5, 17};
static void rope_f(float **in, float *out, void *ctx)
{
    (void)ctx;
    gd_partial_rope_fwd(out, in[0], rope_pos, 3, 2, 8, 4, 100.0f);
}

START_TEST(partial_rope_backward)
{
    size_t n = 3 * 2 * 8;
    float *in[1] = {rnd(n, 61, 1)}, *out = zeros(n), *r = rnd(n, 62, 1), *dx = zeros(n);
    rope_f(in, out, NULL);
    /* dims past rot pass through; position 0 is the identity */
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 8; i++)
            ck_assert(out[h * 8 + i] == in[0][h * 8 + i]);
    for (int rrow = 0; rrow < 6; rrow++)
        for (int i = 4; i < 8; i++)
            ck_assert(out[rrow * 8 + i] == in[0][rrow * 8 + i]);
    gd_partial_rope_bwd(dx, r, rope_pos, 3, 2, 8, 4, 100.0f);
    fd_check(rope_f, NULL, in, 0, n, out, n, r, dx, "partial rope dx");
    free(in[0]), free(out), free(r), free(dx);
}
END_TEST

/* ---- the models against transformers --------------------------------------------------- */

static qwen35_model *load_model(const char *rel)
{
    char *dir = tu_data_path(rel);
    qwen35_model *m;
    dllm_err err = {0};
    ck_assert_msg(qwen35_load(&m, dir, &err) == 0, "%s", err.msg);
    free(dir);
    return m;
}

static void check_model(const char *name)
{
    char rel[64], key[64];
    snprintf(rel, sizeof rel, "qwen35/%s", name);
    qwen35_model *m = load_model(rel);
    const qwen35_config *c = qwen35_config_of(m);
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    size_t T, nl, P, G;
    snprintf(key, sizeof key, "%s.ids", name);
    int32_t *ids = golden_ids(a, key, &T);
    snprintf(key, sizeof key, "%s.logits", name);
    float *ref = golden(a, key, &nl);
    ck_assert_uint_eq(nl, T * (size_t)c->V);
    dllm_err err = {0};
    /* the whole sequence in one chunked forward */
    float *lg = zeros(nl);
    qwen35_cache *kc = qwen35_cache_new(m, (int)T);
    ck_assert_msg(qwen35_extend(m, kc, ids, (int)T, lg, true, &err) == 0, "%s", err.msg);
    qwen35_cache_free(kc);
    double d = tu_max_abs_diff(lg, ref, nl);
    /* fp32 throughout on both sides, the order of the sums differing: the logits agree to
     * 2e-5 of their range (a full-attention layer first, as in `tied`, carries its rounding
     * through the linear layers after it); the log-probs below to 1e-4 absolute */
    double tol = 2e-5 * tu_max_abs(ref, nl);
    ck_assert_msg(d < tol, "%s: logits differ from transformers by %g (tolerance %g)", name, d,
                  tol);
    ck_assert(tu_max_abs(ref, nl) > 1.0);
    /* the same through the caches: 5 tokens chunked, then one at a time */
    float *step = zeros(c->V);
    kc = qwen35_cache_new(m, (int)T);
    ck_assert(qwen35_extend(m, kc, ids, 5, NULL, false, &err) == 0);
    double worst = 0;
    for (size_t t = 5; t < T; t++) {
        ck_assert(qwen35_extend(m, kc, ids + t, 1, step, false, &err) == 0);
        double dd = tu_max_abs_diff(step, ref + t * c->V, (size_t)c->V);
        worst = dd > worst ? dd : worst;
    }
    qwen35_cache_free(kc);
    ck_assert_msg(worst < tol, "%s: cached decoding differs from transformers by %g", name,
                  worst);
    /* log-probs over the ids split as prompt + completion */
    double tl[80], seq;
    int Pp = 10, L = (int)T - Pp;
    ck_assert(qwen35_seq_logprob(m, ids, Pp, ids + Pp, L, 1.0, &seq, tl, &err) == 0);
    for (int i = 0; i < L; i++) {
        const float *z = ref + (size_t)(Pp + i - 1) * c->V;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < c->V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < c->V; j++)
            s += exp(z[j] - mx);
        double want = z[ids[Pp + i]] - mx - log(s);
        ck_assert_msg(fabs(tl[i] - want) < 1e-4, "%s: token %d log-prob %g, transformers %g",
                      name, i, tl[i], want);
    }
    /* greedy ids */
    snprintf(key, sizeof key, "%s.gen_prompt", name);
    int32_t *prompt = golden_ids(a, key, &P);
    snprintf(key, sizeof key, "%s.gen_ids", name);
    int32_t *want = golden_ids(a, key, &G);
    int32_t out[64];
    int n = 0;
    ck_assert(qwen35_greedy(m, prompt, (int)P, (int)G, -1, out, &n, &err) == 0);
    ck_assert_int_eq(n, (int)G);
    for (size_t i = 0; i < G; i++)
        ck_assert_msg(out[i] == want[i], "%s: greedy token %zu is %d, transformers %d", name, i,
                      out[i], want[i]);
    free(ids), free(ref), free(lg), free(step), free(prompt), free(want);
    st_close(a);
    qwen35_free(m);
}

START_TEST(hybrid_matches_transformers) { check_model("hybrid"); }
END_TEST
START_TEST(tied_matches_transformers) { check_model("tied"); }
END_TEST

/* The next-token loss and the gradient of every weight against torch autograd. */
static void check_grad(const char *name)
{
    char rel[64], key[256];
    snprintf(rel, sizeof rel, "qwen35/%s", name);
    qwen35_model *m = load_model(rel);
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    size_t T;
    snprintf(key, sizeof key, "%s.ids", name);
    int32_t *ids = golden_ids(a, key, &T);
    snprintf(key, sizeof key, "%s.loss", name);
    float *want = golden(a, key, NULL);
    dllm_err err = {0};
    double loss;
    ck_assert_msg(qwen35_loss_grad(m, ids, (int)T, &loss, &err) == 0, "%s", err.msg);
    ck_assert_msg(fabs(loss - want[0]) < 1e-5 * (1 + fabs(want[0])), "%s: loss %.9g, torch %.9g",
                  name, loss, want[0]);
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "%s.grad.", name), checked = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < st_count(a); i++) {
        const char *gn = st_at(a, i)->name;
        if (strncmp(gn, prefix, (size_t)n))
            continue;
        size_t ng, nm;
        float *g = golden(a, gn, &ng);
        const float *mine = qwen35_grad(m, gn + n, &nm);
        ck_assert_msg(mine != NULL, "%s: no gradient for %s", name, gn + n);
        ck_assert_uint_eq(nm, ng);
        double d = tu_max_abs_diff(mine, g, ng) / (tu_max_abs(g, ng) + 1e-6);
        if (d > worst) {
            worst = d;
            worst_name = st_at(a, i)->name;
        }
        checked++;
        free(g);
    }
    ck_assert_msg(worst < 1e-3, "%s: gradient of %s off by %g of its largest entry", name,
                  worst_name, worst);
    ck_assert_int_ge(checked, 20);
    /* a second call accumulates */
    size_t ne;
    const float *ge = qwen35_grad(m, "model.embed_tokens.weight", &ne);
    float *once = malloc(ne * sizeof(float));
    memcpy(once, ge, ne * sizeof(float));
    ck_assert(qwen35_loss_grad(m, ids, (int)T, &loss, &err) == 0);
    for (size_t i = 0; i < ne; i++)
        ck_assert(fabsf(ge[i] - 2 * once[i]) <= 1e-5f * (1 + fabsf(once[i])));
    qwen35_zero_grad(m);
    ck_assert(tu_max_abs(ge, ne) == 0);
    free(once), free(ids), free(want);
    st_close(a);
    qwen35_free(m);
}

START_TEST(hybrid_gradient) { check_grad("hybrid"); }
END_TEST
START_TEST(tied_gradient) { check_grad("tied"); }
END_TEST

/* Training through the new ops: AdamW on one sequence lowers its loss, and the
 * cached decode of the trained weights still equals their full forward. */
START_TEST(training_lowers_loss)
{
    qwen35_model *m = load_model("qwen35/hybrid");
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    size_t T;
    int32_t *ids = golden_ids(a, "hybrid.ids", &T);
    dllm_err err = {0};
    double first = 0, loss = 0;
    for (int step = 1; step <= 30; step++) {
        qwen35_zero_grad(m);
        ck_assert(qwen35_loss_grad(m, ids, 24, &loss, &err) == 0);
        if (step == 1)
            first = loss;
        qwen35_adamw_step(m, step, 1e-2f, 0.01f);
    }
    ck_assert_msg(loss < 0.5 * first, "30 AdamW steps: loss %g from %g", loss, first);
    const qwen35_config *c = qwen35_config_of(m);
    float *full = zeros((size_t)24 * c->V), *step1 = zeros(c->V);
    qwen35_cache *kc = qwen35_cache_new(m, 24);
    ck_assert(qwen35_extend(m, kc, ids, 24, full, true, &err) == 0);
    qwen35_cache_free(kc);
    kc = qwen35_cache_new(m, 24);
    ck_assert(qwen35_extend(m, kc, ids, 3, NULL, false, &err) == 0);
    for (int t = 3; t < 24; t++) {
        ck_assert(qwen35_extend(m, kc, ids + t, 1, step1, false, &err) == 0);
        ck_assert(tu_max_abs_diff(step1, full + (size_t)t * c->V, (size_t)c->V) < 1e-4);
    }
    qwen35_cache_free(kc);
    free(full), free(step1), free(ids);
    st_close(a);
    qwen35_free(m);
}
END_TEST

/* The bf16 rollout copy: not the fp32 model, deterministic, and its cached decode equal
 * to its own full forward (its values against transformers: cli_score_bf16). */
START_TEST(bf16_rollout_copy)
{
    qwen35_model *m = load_model("qwen35/hybrid"), *h = load_model("qwen35/hybrid");
    qwen35_round_bf16(h);
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    size_t T;
    int32_t *ids = golden_ids(a, "hybrid.ids", &T);
    dllm_err err = {0};
    const qwen35_config *c = qwen35_config_of(m);
    int n = 24;
    float *f32 = zeros((size_t)n * c->V), *f16 = zeros((size_t)n * c->V);
    float *again = zeros((size_t)n * c->V), *step1 = zeros(c->V);
    qwen35_cache *kc = qwen35_cache_new(m, n);
    ck_assert(qwen35_extend(m, kc, ids, n, f32, true, &err) == 0);
    qwen35_cache_free(kc);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, n, f16, true, &err) == 0);
    qwen35_cache_free(kc);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, n, again, true, &err) == 0);
    qwen35_cache_free(kc);
    ck_assert(memcmp(f16, again, (size_t)n * c->V * sizeof(float)) == 0);
    double d = tu_max_abs_diff(f16, f32, (size_t)n * c->V);
    ck_assert_msg(d > 1e-6, "bf16 copy: logits %g from fp32", d);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, 3, NULL, false, &err) == 0);
    for (int t = 3; t < n; t++) {
        ck_assert(qwen35_extend(h, kc, ids + t, 1, step1, false, &err) == 0);
        ck_assert(tu_max_abs_diff(step1, f16 + (size_t)t * c->V, (size_t)c->V) < 1e-4);
    }
    qwen35_cache_free(kc);
    free(f32), free(f16), free(again), free(step1), free(ids);
    st_close(a);
    qwen35_free(m);
    qwen35_free(h);
}
END_TEST

/* The FP8 (fast and exact), INT8 and NVFP4 copies (loop index): finite logits that differ
 * from fp32's, the copy rebuilt from the same weights the same bit for bit, the cached
 * decode equal to the full forward (per-token activation scales: one token or many give
 * the same products; nvfp4's tensor-wide activation scale does not, so only bounded). */
static const dllm_rollout_kind quant_kinds[] = {DLLM_ROLLOUT_FP8, DLLM_ROLLOUT_FP8_EXACT,
                                                DLLM_ROLLOUT_INT8, DLLM_ROLLOUT_NVFP4};
START_TEST(quantised_rollout_copy)
{
    dllm_precision p = dllm_precision_default();
    p.rollout = quant_kinds[_i];
    qwen35_model *m = load_model("qwen35/hybrid"), *h = qwen35_clone(m);
    dllm_err err = {0};
    ck_assert_msg(qwen35_quantise(h, &p, &err) == 0, "%s", err.msg);
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    size_t T;
    int32_t *ids = golden_ids(a, "hybrid.ids", &T);
    const qwen35_config *c = qwen35_config_of(m);
    int n = 24;
    float *f32 = zeros((size_t)n * c->V), *fq = zeros((size_t)n * c->V);
    float *again = zeros((size_t)n * c->V), *step1 = zeros(c->V);
    qwen35_cache *kc = qwen35_cache_new(m, n);
    ck_assert(qwen35_extend(m, kc, ids, n, f32, true, &err) == 0);
    qwen35_cache_free(kc);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, n, fq, true, &err) == 0);
    qwen35_cache_free(kc);
    /* rebuilt from the same weights: the same copy */
    qwen35_copy_weights(h, m);
    ck_assert(qwen35_quantise(h, &p, &err) == 0);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, n, again, true, &err) == 0);
    qwen35_cache_free(kc);
    ck_assert(memcmp(fq, again, (size_t)n * c->V * sizeof(float)) == 0);
    double d = tu_max_abs_diff(fq, f32, (size_t)n * c->V), big = 0;
    for (size_t i = 0; i < (size_t)n * c->V; i++)
        big = fmax(big, fabs(f32[i]));
    /* this random model is sensitive (bf16 moves its token log-probs by ~0.1, fp8 by
     * ~0.7, nvfp4's 4-bit codes by several nats): a bound, not a closeness test */
    for (size_t i = 0; i < (size_t)n * c->V; i++)
        ck_assert(isfinite(fq[i]));
    ck_assert_msg(d > 1e-6 && (p.rollout == DLLM_ROLLOUT_NVFP4 || d < big),
                  "%s copy: logits %g from fp32's (largest %g)", dllm_rollout_name(p.rollout), d,
                  big);
    kc = qwen35_cache_new(h, n);
    ck_assert(qwen35_extend(h, kc, ids, 3, NULL, false, &err) == 0);
    for (int t = 3; t < n; t++) {
        ck_assert(qwen35_extend(h, kc, ids + t, 1, step1, false, &err) == 0);
        /* tensor-wide activation scales (nvfp4) see one token instead of many */
        double tol = p.rollout == DLLM_ROLLOUT_NVFP4 ? 2 * big : 1e-4;
        ck_assert_msg(tu_max_abs_diff(step1, fq + (size_t)t * c->V, (size_t)c->V) < tol,
                      "%s: decode step %d", dllm_rollout_name(p.rollout), t);
    }
    qwen35_cache_free(kc);
    free(f32), free(fq), free(again), free(step1), free(ids);
    st_close(a);
    qwen35_free(m);
    qwen35_free(h);
}
END_TEST

/* bf16 weights in shards (an index and several files) read as the same fp32 values
 * in one F32 file: identical logits, and close to the fp32 model's. */
START_TEST(bf16_shards)
{
    char *d16 = tu_make_tmpdir(), *d32 = tu_make_tmpdir(), path[4096];
    char *cfg = tu_data_path("qwen35/hybrid/config.json");
    snprintf(path, sizeof path, "cp %s %s/ && cp %s %s/", cfg, d16, cfg, d32);
    ck_assert(tu_sh("%s", path) == 0);
    st_archive *a = tu_open_archive("qwen35/hybrid/model.safetensors");
    st_writer *w16 = st_writer_new(), *w32 = st_writer_new();
    dllm_err err = {0};
    for (int i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        float *x = malloc(((size_t)t->numel + 1) * sizeof(float));
        ck_assert(st_read_f32(a, t->name, t->shape, t->ndim, x, &err) == 0);
        op_round_bf16(x, (size_t)t->numel);
        ck_assert(st_writer_add_f32(w16, t->name, ST_BF16, t->ndim, t->shape, x, &err) == 0);
        ck_assert(st_writer_add_f32(w32, t->name, ST_F32, t->ndim, t->shape, x, &err) == 0);
        free(x);
    }
    ck_assert_msg(st_writer_save_dir(w16, d16, 16384, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", d16);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "the bf16 copy is not sharded");
    fclose(f);
    ck_assert(st_writer_save_dir(w32, d32, 0, &err) == 0);
    st_writer_free(w16);
    st_writer_free(w32);
    st_close(a);
    qwen35_model *m16, *m32;
    ck_assert_msg(qwen35_load(&m16, d16, &err) == 0, "%s", err.msg);
    ck_assert_msg(qwen35_load(&m32, d32, &err) == 0, "%s", err.msg);
    st_archive *g = tu_open_archive("qwen35/golden.safetensors");
    size_t T, nl;
    int32_t *ids = golden_ids(g, "hybrid.ids", &T);
    float *ref = golden(g, "hybrid.logits", &nl), *l16 = zeros(nl), *l32 = zeros(nl);
    qwen35_cache *k1 = qwen35_cache_new(m16, (int)T), *k2 = qwen35_cache_new(m32, (int)T);
    ck_assert(qwen35_extend(m16, k1, ids, (int)T, l16, true, &err) == 0);
    ck_assert(qwen35_extend(m32, k2, ids, (int)T, l32, true, &err) == 0);
    ck_assert(memcmp(l16, l32, nl * sizeof(float)) == 0);
    double dd = tu_max_abs_diff(l16, ref, nl);
    ck_assert_msg(dd > 0 && dd < 0.5, "bf16 weights: logits %g from the fp32 model's", dd);
    qwen35_cache_free(k1), qwen35_cache_free(k2);
    qwen35_free(m16), qwen35_free(m32);
    st_close(g);
    free(ids), free(ref), free(l16), free(l32), free(cfg);
    tu_rm_rf(d16), tu_rm_rf(d32);
    free(d16), free(d32);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------------ */

/* Copies tests/data/qwen35/hybrid into tmp with config.json's text replaced (from ->
 * to, NULL: kept) and the tensors filtered (skip: a name to leave out, NULL: none;
 * only_prefix: keep only names with it and rename them, NULL: all). */
static char *variant(const char *from, const char *to, const char *skip, const char *rename_to)
{
    char *tmp = tu_make_tmpdir();
    char *src = tu_data_path("qwen35/hybrid/config.json"), path[4096];
    FILE *f = fopen(src, "rb");
    ck_assert(f != NULL);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char out[8192];
    char *hit = from ? strstr(buf, from) : NULL;
    if (from)
        ck_assert_msg(hit != NULL, "config.json has no '%s'", from);
    if (hit)
        snprintf(out, sizeof out, "%.*s%s%s", (int)(hit - buf), buf, to, hit + strlen(from));
    else
        snprintf(out, sizeof out, "%s", buf);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    f = fopen(path, "wb");
    fputs(out, f);
    fclose(f);
    st_archive *a = tu_open_archive("qwen35/hybrid/model.safetensors");
    st_writer *w = st_writer_new();
    dllm_err err = {0};
    for (int i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        if (skip && !strcmp(t->name, skip))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s%s", rename_to ? rename_to : "", t->name);
        ck_assert(st_writer_add_raw(w, name, t->dtype, t->ndim, t->shape, t->data, &err) == 0);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    ck_assert_msg(st_writer_save_file(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    st_close(a);
    free(src);
    return tmp;
}

static void expect_input_error(const char *dir, const char *needle)
{
    qwen35_model *m = NULL;
    dllm_err err = {0};
    int rc = qwen35_load(&m, dir, &err);
    ck_assert_msg(rc == DLLM_EXIT_INPUT, "expected exit 2 mentioning '%s', got %d (%s)", needle,
                  rc, err.msg);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' not in: %s", needle, err.msg);
    ck_assert(m == NULL);
}

START_TEST(bad_layer_type)
{
    char *d = variant("\"full_attention\"", "\"sliding_attention\"", NULL, NULL);
    expect_input_error(d, "layer_types");
    expect_input_error(d, "sliding_attention");
    tu_rm_rf(d);
    free(d);
}
END_TEST

START_TEST(missing_linear_tensor)
{
    char *d = variant(NULL, NULL, "model.layers.1.linear_attn.A_log", NULL);
    expect_input_error(d, "model.layers.1.linear_attn.A_log");
    tu_rm_rf(d);
    free(d);
}
END_TEST

START_TEST(vision_only)
{
    /* a qwen3_5 config without text_config */
    char *d = variant("\"qwen3_5_text\"", "\"qwen3_5\", \"vision_config\": {}", NULL, NULL);
    expect_input_error(d, "text_config");
    tu_rm_rf(d);
    free(d);
    /* weights that hold only a vision tower */
    d = variant(NULL, NULL, NULL, "model.visual.");
    expect_input_error(d, "vision-only");
    tu_rm_rf(d);
    free(d);
}
END_TEST

/* The published composite layout: qwen3_5 with text_config, text weights under
 * model.language_model., vision and MTP tensors beside them (ignored). */
START_TEST(composite_layout)
{
    char *tmp = tu_make_tmpdir(), path[4096];
    json_t *text = tu_json_load("qwen35/hybrid/config.json");
    json_object_set_new(text, "model_type", json_string("qwen3_5_text"));
    json_t *root = json_object();
    json_object_set_new(root, "model_type", json_string("qwen3_5"));
    json_object_set_new(root, "text_config", text);
    json_object_set_new(root, "vision_config", json_object());
    json_object_set_new(root, "tie_word_embeddings", json_false());
    snprintf(path, sizeof path, "%s/config.json", tmp);
    ck_assert(json_dump_file(root, path, 0) == 0);
    json_decref(root);
    st_archive *a = tu_open_archive("qwen35/hybrid/model.safetensors");
    st_writer *w = st_writer_new();
    dllm_err err = {0};
    for (int i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        char name[256];
        if (!strncmp(t->name, "model.", 6))
            snprintf(name, sizeof name, "model.language_model.%s", t->name + 6);
        else
            snprintf(name, sizeof name, "%s", t->name);
        ck_assert(st_writer_add_raw(w, name, t->dtype, t->ndim, t->shape, t->data, &err) == 0);
    }
    float junk[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4};
    ck_assert(st_writer_add_f32(w, "model.visual.patch_embed.proj.weight", ST_F32, 1, sh, junk,
                                &err) == 0);
    ck_assert(st_writer_add_f32(w, "mtp.fc.weight", ST_F32, 1, sh, junk, &err) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    ck_assert(st_writer_save_file(w, path, &err) == 0);
    st_writer_free(w);
    st_close(a);
    qwen35_model *m;
    ck_assert_msg(qwen35_load(&m, tmp, &err) == 0, "%s", err.msg);
    ck_assert(qwen35_config_of(m)->composite);
    st_archive *g = tu_open_archive("qwen35/golden.safetensors");
    size_t T, nl;
    int32_t *ids = golden_ids(g, "hybrid.ids", &T);
    float *ref = golden(g, "hybrid.logits", &nl), *lg = zeros(nl);
    qwen35_cache *kc = qwen35_cache_new(m, (int)T);
    ck_assert(qwen35_extend(m, kc, ids, (int)T, lg, true, &err) == 0);
    ck_assert(tu_max_abs_diff(lg, ref, nl) < 1e-4);
    qwen35_cache_free(kc);
    qwen35_free(m);
    st_close(g);
    free(ids), free(ref), free(lg);
    tu_rm_rf(tmp);
    free(tmp);
}
END_TEST

/* ---- the commands --------------------------------------------------------------------- */

static char *ids_csv(const int32_t *ids, size_t n)
{
    char *s = malloc(n * 12 + 1);
    size_t k = 0;
    s[0] = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(s + k, "%s%d", i ? "," : "", ids[i]);
    return s;
}

START_TEST(cli_score_and_generate)
{
    const char *names[] = {"hybrid", "tied"};
    st_archive *a = tu_open_archive("qwen35/golden.safetensors");
    for (int v = 0; v < 2; v++) {
        char key[64], args[4096];
        size_t T, nl, P, G;
        snprintf(key, sizeof key, "%s.ids", names[v]);
        int32_t *ids = golden_ids(a, key, &T);
        snprintf(key, sizeof key, "%s.logits", names[v]);
        float *ref = golden(a, key, &nl);
        int V = (int)(nl / T), Pp = 7;
        char *ps = ids_csv(ids, (size_t)Pp), *cs = ids_csv(ids + Pp, T - (size_t)Pp);
        snprintf(args, sizeof args, "score --model %s/qwen35/%s --prompt-ids %s --completion-ids %s",
                 getenv("DLLM_TEST_DATA"), names[v], ps, cs);
        char *out, *errs;
        int rc = tu_dllm_take(&out, &errs, "%s", args);
        ck_assert_msg(rc == 0, "score exit %d: %s", rc, errs);
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        ck_assert_msg(j != NULL, "score printed no JSON: %s", out);
        const json_t *tl = json_object_get(j, "token_logp");
        ck_assert_uint_eq(json_array_size(tl), T - (size_t)Pp);
        double worst = 0;
        for (size_t i = 0; i < T - (size_t)Pp; i++) {
            const float *z = ref + (Pp + i - 1) * (size_t)V;
            double mx = -INFINITY, s = 0;
            for (int k = 0; k < V; k++)
                mx = z[k] > mx ? z[k] : mx;
            for (int k = 0; k < V; k++)
                s += exp(z[k] - mx);
            double want = z[ids[Pp + i]] - mx - log(s);
            double d = fabs(json_number_value(json_array_get(tl, i)) - want);
            worst = d > worst ? d : worst;
        }
        ck_assert_msg(worst < 1e-4, "%s: score's log-probs differ from transformers by %g",
                      names[v], worst);
        json_decref(j);
        free(out), free(errs), free(ps), free(cs);
        snprintf(key, sizeof key, "%s.gen_prompt", names[v]);
        int32_t *prompt = golden_ids(a, key, &P);
        snprintf(key, sizeof key, "%s.gen_ids", names[v]);
        int32_t *want = golden_ids(a, key, &G);
        ps = ids_csv(prompt, P);
        char *ws = ids_csv(want, G);
        snprintf(args, sizeof args,
                 "generate --model %s/qwen35/%s --prompt-ids %s --gen-length %zu --format ids",
                 getenv("DLLM_TEST_DATA"), names[v], ps, G);
        rc = tu_dllm_take(&out, &errs, "%s", args);
        ck_assert_msg(rc == 0, "generate exit %d: %s", rc, errs);
        out[strcspn(out, "\n")] = 0;
        ck_assert_msg(!strcmp(out, ws), "%s: generate printed %s, transformers %s", names[v], out,
                      ws);
        free(out), free(errs), free(ps), free(ws), free(prompt), free(want), free(ids), free(ref);
    }
    st_close(a);
}
END_TEST

/* init-model --arch qwen3.5: the tiny preset's checkpoint reads back as the preset (every
 * size and layer kind), loads, scores and is the same for the same seed; qwen3.5-9b writes
 * the published sizes (config only: about 9B parameters); other presets exit 2. */
START_TEST(init_model_presets)
{
    dllm_err err = {0};
    qwen35_config want, got;
    ck_assert_int_eq(qwen35_preset("tiny", &want, &err), 0);
    ck_assert_int_eq(tu_dllm("init-model --arch qwen3.5 --preset tiny --out q35tiny --seed 3"), 0);
    char p[600];
    snprintf(p, sizeof p, "%s/q35tiny/config.json", tu_dir);
    ck_assert_msg(qwen35_config_read(p, &got, &err) == 0, "%s", err.msg);
    int gi[] = {got.C, got.L, got.H, got.V, got.NH, got.NKV, got.HD, got.rot, got.Hk, got.Dk,
                got.Hv, got.Dv, got.K, got.tied, got.eos_token_id, got.bos_token_id, got.max_pos,
                got.composite};
    int wi[] = {want.C, want.L, want.H, want.V, want.NH, want.NKV, want.HD, want.rot, want.Hk,
                want.Dk, want.Hv, want.Dv, want.K, want.tied, want.eos_token_id, want.bos_token_id,
                want.max_pos, want.composite};
    for (size_t i = 0; i < sizeof gi / sizeof gi[0]; i++)
        ck_assert_msg(gi[i] == wi[i], "field %zu: read %d, preset %d", i, gi[i], wi[i]);
    ck_assert(got.theta == want.theta && got.eps == want.eps);
    for (int l = 0; l < want.L; l++)
        ck_assert_int_eq(got.kind[l], want.kind[l]);
    ck_assert_int_eq(got.kind[2], QWEN35_LINEAR);
    ck_assert_int_eq(got.kind[3], QWEN35_FULL);
    snprintf(p, sizeof p, "%s/q35tiny", tu_dir);
    qwen35_model *m = NULL;
    ck_assert_msg(qwen35_load(&m, p, &err) == 0, "%s", err.msg);
    qwen35_free(m);
    snprintf(p, sizeof p, "%s/q35tiny/model.safetensors", tu_dir);
    st_archive *a = NULL;
    ck_assert_int_eq(st_open(&a, p, &err), 0);
    int64_t total = 0;
    for (int i = 0; i < st_count(a); i++)
        total += st_at(a, i)->numel;
    ck_assert_int_eq(total, qwen35_num_params(&want));
    float A[4];
    int64_t shape[1] = {4};
    ck_assert_int_eq(st_read_f32(a, "model.layers.0.linear_attn.A_log", shape, 1, A, &err), 0);
    for (int i = 0; i < 4; i++)
        ck_assert(A[i] >= 0.0f && A[i] <= logf(16.0f));
    st_close(a);
    ck_assert_int_eq(tu_dllm("score --model q35tiny --prompt-ids 5,6,7 --completion-ids 8,9"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "seq_logp"));
    /* a text prompt: BOS + the char ids (2 -> 25, + -> 18, = -> 36), the same greedy ids;
     * json and text decode them */
    ck_assert_int_eq(tu_dllm("generate --model q35tiny --prompt-ids 1,25,18,25,36 --gen-length 6 "
                             "--format ids"), 0);
    char *by_ids = strdup(tu_out);
    ck_assert_int_eq(tu_dllm("generate --model q35tiny --prompt 2+2= --gen-length 6 --format ids"), 0);
    ck_assert_str_eq(tu_out, by_ids);
    free(by_ids);
    ck_assert_int_eq(tu_dllm("generate --model q35tiny --prompt 2+2= --gen-length 6 --format json"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "\"text\""));
    ck_assert_ptr_nonnull(strstr(tu_out, "\"completion_length\": 6"));
    /* bench train: its own loss and gradient, on the preset's random weights or the model's */
    ck_assert_int_eq(tu_dllm("bench train --arch qwen3.5 --batch 2 --seq 16 --iters 1 --warmup 0"), 0);
    ck_assert_msg(strstr(tu_out, "tokens/s") && strstr(tu_out, "qwen3.5 tiny"), "%s", tu_out);
    ck_assert_int_eq(tu_dllm("bench train --arch qwen3.5 --model q35tiny --seq 16 --iters 1"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "tokens/s"));
    ck_assert_int_eq(tu_dllm("bench train --arch qwen3.5 --lora 4 --batch 2 --seq 16 --iters 1 "
                             "--warmup 0"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "tokens/s"));
    /* the published sizes are a checkpoint's, not random weights made in memory */
    ck_assert_int_eq(tu_dllm("bench train --arch qwen3.5 --preset qwen3.5-9b --iters 1"), 2);
    ck_assert_ptr_nonnull(strstr(tu_err, "--model"));
    ck_assert_int_eq(tu_dllm("init-model --arch qwen3.5 --preset tiny --out q35same --seed 3"), 0);
    ck_assert_int_eq(tu_dllm("init-model --arch qwen3.5 --preset tiny --out q35other --seed 4"), 0);
    ck_assert_int_eq(tu_sh("cmp -s %s/q35tiny/model.safetensors %s/q35same/model.safetensors",
                           tu_dir, tu_dir), 0);
    ck_assert_int_ne(tu_sh("cmp -s %s/q35tiny/model.safetensors %s/q35other/model.safetensors",
                           tu_dir, tu_dir), 0);
    /* the published sizes: config only */
    ck_assert_int_eq(tu_dllm("init-model --arch qwen3.5 --preset qwen3.5-9b --out q35big"), 0);
    snprintf(p, sizeof p, "%s/q35big/config.json", tu_dir);
    ck_assert_msg(qwen35_config_read(p, &got, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(got.C, 4096);
    ck_assert_int_eq(got.L, 32);
    ck_assert_int_eq(got.V, 248320);
    ck_assert_int_eq(got.rot, 64);
    ck_assert_int_eq(got.Hv, 32);
    ck_assert_int_eq(got.Hk, 16);
    ck_assert_int_eq(got.eos_token_id, 248044);
    ck_assert(got.theta == 1e7f);
    for (int l = 0; l < 32; l++)
        ck_assert_int_eq(got.kind[l], l % 4 == 3 ? QWEN35_FULL : QWEN35_LINEAR);
    int64_t n9 = qwen35_num_params(&got);
    ck_assert_msg(n9 > 8.9e9 && n9 < 9.0e9, "%lld parameters", (long long)n9);
    snprintf(p, sizeof p, "%s/q35big/model.safetensors", tu_dir);
    ck_assert(access(p, F_OK) != 0);
    ck_assert_int_eq(tu_dllm("init-model --arch qwen3.5 --preset small --out q35small"), 2);
    ck_assert_ptr_nonnull(strstr(tu_err, "small"));
}
END_TEST

/* score --precision bf16 against transformers with the same roundings
 * (tests/ref/make_qwen35_bf16_golden.py): within 1e-5 for both models. */
START_TEST(cli_score_bf16)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/qwen35/bf16_golden.json", getenv("DLLM_TEST_DATA"));
    json_error_t je;
    json_t *g = json_load_file(p, 0, &je);
    ck_assert_msg(g != NULL, "%s: %s", p, je.text);
    int32_t pi[16], ci[16];
    size_t np = json_array_size(json_object_get(g, "prompt_ids"));
    size_t nc = json_array_size(json_object_get(g, "completion_ids"));
    ck_assert(np <= 16 && nc <= 16);
    for (size_t i = 0; i < np; i++)
        pi[i] = (int32_t)json_integer_value(json_array_get(json_object_get(g, "prompt_ids"), i));
    for (size_t i = 0; i < nc; i++)
        ci[i] = (int32_t)json_integer_value(json_array_get(json_object_get(g, "completion_ids"), i));
    char *ps = ids_csv(pi, np), *cs = ids_csv(ci, nc);
    const char *names[] = {"hybrid", "tied"};
    for (int v = 0; v < 2; v++) {
        ck_assert_int_eq(tu_dllm("score --model %s/qwen35/%s --prompt-ids %s --completion-ids %s "
                                 "--precision bf16", getenv("DLLM_TEST_DATA"), names[v], ps, cs), 0);
        json_t *j = json_loads(tu_out, 0, &je);
        ck_assert_msg(j != NULL, "score printed no JSON: %s", tu_out);
        const json_t *want = json_object_get(json_object_get(g, "models"), names[v]);
        const json_t *got = json_object_get(j, "token_logp");
        ck_assert_uint_eq(json_array_size(got), nc);
        for (size_t i = 0; i < nc; i++) {
            double d = fabs(json_number_value(json_array_get(got, i)) -
                            json_number_value(json_array_get(want, i)));
            ck_assert_msg(d < 1e-5, "%s token %zu: bf16 log-prob %g from transformers'", names[v],
                          i, d);
        }
        json_decref(j);
    }
    free(ps), free(cs);
    json_decref(g);
}
END_TEST

START_TEST(cli_refusals)
{
    char *out, *errs, args[4096];
    const char *d = getenv("DLLM_TEST_DATA");
    /* every rollout copy scores */
    static const char *const precs[] = {"bf16", "fp8", "fp8-exact", "int8", "nvfp4"};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
        snprintf(args, sizeof args, "score --model %s/qwen35/hybrid --prompt-ids 1,2 "
                 "--completion-ids 3 --precision %s", d, precs[i]);
        ck_assert_int_eq(tu_dllm_take(&out, &errs, "%s", args), 0);
        ck_assert_msg(strstr(out, "seq_logp") != NULL, "%s: %s", precs[i], out);
        free(out), free(errs);
    }
    snprintf(args, sizeof args, "score --model %s/qwen35/hybrid --prompt-ids 1,2 "
             "--completion-ids 3 --mc 4", d);
    ck_assert_int_eq(tu_dllm_take(&out, &errs, "%s", args), 2);
    ck_assert_msg(strstr(errs, "--mc") != NULL, "%s", errs);
    free(out), free(errs);
    /* a text prompt needs the directory's tokenizer */
    snprintf(args, sizeof args, "generate --model %s/qwen35/hybrid --prompt hello", d);
    ck_assert_int_eq(tu_dllm_take(&out, &errs, "%s", args), 2);
    ck_assert_msg(strstr(errs, "tokenizer.json") != NULL, "%s", errs);
    free(out), free(errs);
    char *bad = variant("\"linear_attention\"", "\"mamba\"", NULL, NULL);
    snprintf(args, sizeof args, "score --model %s --prompt-ids 1,2 --completion-ids 3", bad);
    ck_assert_int_eq(tu_dllm_take(&out, &errs, "%s", args), 2);
    ck_assert_msg(strstr(errs, "layer_types") && strstr(errs, "mamba"), "%s", errs);
    free(out), free(errs);
    tu_rm_rf(bad);
    free(bad);
}
END_TEST

/* ---- behind the policy: batches, the registry, every command ----------------------------- */

/* A left-padded batch through qwen35_forward: each row's logits equal its tokens' own
 * forward (padding changes nothing), and the backward of the mean next-token
 * cross-entropy of row 1 built from those logits equals qwen35_loss_grad's gradient. */
START_TEST(batch_forward_backward)
{
    qwen35_model *m = load_model("qwen35/hybrid"), *ref = load_model("qwen35/hybrid");
    const qwen35_config *c = qwen35_config_of(m);
    int V = c->V;
    enum { B = 2, T = 20, PAD = 6 };
    int32_t tok[B * T];
    uint8_t km[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % V);
        km[i] = !(i / T == 1 && i % T < PAD); /* row 1 left-padded */
    }
    float *lg = zeros((size_t)B * T * V), *own = zeros((size_t)T * V);
    dllm_err err = {0};
    ck_assert_msg(qwen35_forward(m, tok, km, B, T, NULL, 0, lg, true, &err) == 0, "%s", err.msg);
    for (int b = 0; b < B; b++) {
        int n = b ? T - PAD : T;
        qwen35_cache *kc = qwen35_cache_new(ref, n);
        ck_assert(qwen35_extend(ref, kc, tok + b * T + (T - n), n, own, true, &err) == 0);
        qwen35_cache_free(kc);
        double worst = 0;
        for (int t = 0; t < n; t++)
            for (int v = 0; v < V; v++)
                worst = fmax(worst, fabs(lg[((size_t)b * T + T - n + t) * V + v] -
                                         own[(size_t)t * V + v]));
        /* the head's product over other row counts: fp32 rounding only */
        ck_assert_msg(worst < 1e-5, "row %d: batched logits differ from its own by %g", b, worst);
    }
    /* dlogits of mean CE over row 1's next-token targets, rows T-n .. T-2 */
    int n = T - PAD, R = n - 1;
    float *dl = zeros((size_t)B * T * V);
    for (int r = 0; r < R; r++) {
        size_t row = (size_t)T + PAD + r;
        const float *z = lg + row * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++)
            mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        for (int v = 0; v < V; v++)
            dl[row * V + v] = (float)(exp(z[v] - mx) / sum / R);
        dl[row * V + tok[row + 1]] -= 1.0f / (float)R;
    }
    qwen35_zero_grad(m);
    qwen35_backward(m, dl);
    double loss;
    qwen35_zero_grad(ref);
    ck_assert(qwen35_loss_grad(ref, tok + T + PAD, n, &loss, &err) == 0);
    size_t np;
    qwen35_params(m, &np);
    const float *g = qwen35_grads(m), *gr = qwen35_grads(ref);
    double worst = 0, big = 0;
    for (size_t i = 0; i < np; i++) {
        worst = fmax(worst, fabs(g[i] - gr[i]));
        big = fmax(big, fabs(gr[i]));
    }
    ck_assert_msg(big > 0 && worst <= 1e-5 * big, "gradients differ by %g (largest %g)", worst,
                  big);
    free(lg), free(own), free(dl);
    qwen35_free(m);
    qwen35_free(ref);
}
END_TEST

/* sft, train (configs/quickstart-qwen35.yaml, 2 steps), inspect, eval, export, plan and
 * bench on the tiny preset, through the registry and the policy; the device plan, which it
 * does not model, exits 2 naming the key. */
START_TEST(commands_on_tiny)
{
    const char *data = getenv("DLLM_TEST_DATA");
    char *out, *errs;
    ck_assert_int_eq(tu_sh("%s tasks sft-data sudoku --n 32 --seed 101 --max-blanks 4 > "
                           "%s/q35sft.jsonl", tu_bin(), tu_dir), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/q35sft.yaml", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "experiment: q35sft\nseed: 1\nmodel: {arch: qwen3.5, preset: tiny}\n"
               "data: {train: %s/q35sft.jsonl, max_len: 64}\nsft: {steps: 4, batch_size: 4}\n"
               "optim: {lr: 3e-3}\nlog: {dir: %s/q35runs, every: 2}\ncheckpoint: {every: 0}\n",
            tu_dir, tu_dir);
    fclose(f);
    ck_assert_msg(tu_dllm("sft q35sft.yaml --quiet") == 0, "%s", tu_err);
    const char *ck = "q35runs/q35sft/ckpt/latest";
    ck_assert_int_eq(tu_dllm("score --model %s --prompt-ids 1,5,6 --completion-ids 7,0", ck), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "seq_logp"));
    const char *small = "--set grpo.steps=2 --set grpo.prompts_per_step=2 --set rollout.group_size=2"
                        " --set eval.every=2 --set eval.n=2 --set checkpoint.every=2"
                        " --set task.train.n=16 --set log.dir=q35runs";
    ck_assert_msg(tu_dllm("train %s/../../configs/quickstart-qwen35.yaml --quiet %s --set "
                          "model.path=%s", data, small, ck) == 0, "%s", tu_err);
    ck_assert_int_eq(tu_dllm("inspect q35runs/quickstart-qwen35-rl --csv"), 0);
    int rows = -1;
    for (const char *l = tu_out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        rows += *l != 0;
    ck_assert_int_eq(rows, 2);
    const char *body = strchr(tu_out, '\n'); /* the values, past the header */
    ck_assert_msg(body && !strstr(body, "nan") && !strstr(body, "inf"), "%s", tu_out);
    const char *rck = "q35runs/quickstart-qwen35-rl/ckpt/latest";
    ck_assert_msg(tu_dllm("eval --model %s --task sudoku --n 2", rck) == 0, "%s", tu_err);
    ck_assert_ptr_nonnull(strstr(tu_out, "accuracy"));
    /* export: the merged model is a qwen3_5_text checkpoint that scores as the run's */
    ck_assert_int_eq(tu_dllm("export q35runs/quickstart-qwen35-rl --merged --out q35merged"), 0);
    ck_assert_int_eq(tu_sh("grep -q '\"model_type\": \"qwen3_5_text\"' %s/q35merged/config.json",
                           tu_dir), 0);
    ck_assert_int_eq(tu_dllm("score --model %s --prompt-ids 1,5,6 --completion-ids 7,0", rck), 0);
    char *a = strdup(tu_out);
    ck_assert_int_eq(tu_dllm("score --model q35merged --prompt-ids 1,5,6 --completion-ids 7,0"), 0);
    ck_assert_str_eq(tu_out, a);
    free(a);
    ck_assert_int_eq(tu_dllm("export q35runs/quickstart-qwen35-rl --adapter --out q35ad"), 2);
    /* plan: the linear layers' states and the full layers' KV cache */
    ck_assert_int_eq(tu_dllm("plan %s/../../configs/quickstart-qwen35.yaml --set model.path=%s",
                             data, ck), 0);
    ck_assert_msg(strstr(tu_out, "recurrent state") && strstr(tu_out, "conv state") &&
                  strstr(tu_out, "KV cache"), "%s", tu_out);
    /* on the device: the same arrays, the device's attention state and the rule's scratch,
     * the cap applied; its step is not recorded */
    ck_assert_int_eq(tu_dllm("plan %s/../../configs/quickstart-qwen35.yaml --set model.path=%s "
                             "--device cuda", data, ck), 0);
    ck_assert_msg(strstr(tu_out, "cuda device") && strstr(tu_out, "recurrent state") &&
                  strstr(tu_out, "log-sum-exp") && strstr(tu_out, "recomputed states") &&
                  !strstr(tu_out, "probabilities"), "%s", tu_out);
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "plan %s/../../configs/quickstart-qwen35.yaml "
                                  "--set model.path=%s --device cuda --max-gpu-memory 1MB", data,
                                  ck), 2);
    ck_assert_msg(strstr(errs, "--max-gpu-memory") && strstr(errs, "does not fit"), "%s", errs);
    free(errs);
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "plan %s/../../configs/quickstart-qwen35.yaml "
                                  "--set model.path=%s --device cuda --time", data, ck), 2);
    ck_assert_msg(strstr(errs, "--time") && strstr(errs, "qwen3.5"), "%s", errs);
    free(errs);
    ck_assert_int_eq(tu_dllm_take(NULL, &errs, "plan %s/../../configs/quickstart-qwen35.yaml "
                                  "--set model.path=%s --device cuda --set "
                                  "rollout.precision=nvfp4", data, ck), 2);
    ck_assert_msg(strstr(errs, "nvfp4"), "%s", errs);
    free(errs);
    ck_assert_int_eq(tu_dllm("bench rollout --arch qwen3.5 --preset tiny --precision bf16 --batch 2 "
                             "--prompt 4 --gen-length 4 --iters 1 --warmup 0"), 0);
    ck_assert_ptr_nonnull(strstr(tu_out, "qwen3.5 tiny"));
    /* without a usable CUDA backend the device is refused naming it (on one:
     * test_qwen35_device) */
    if (!dllm_backend_cuda()) {
        ck_assert_int_eq(tu_dllm_take(&out, &errs, "train %s/../../configs/quickstart-qwen35.yaml "
                                      "--quiet %s --set model.path=%s --set experiment=q35no "
                                      "--set device=cuda", data, small, ck), 2);
        ck_assert_msg(strstr(errs, "cuda") != NULL, "%s", errs);
        free(out), free(errs);
    }
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    if (!tu_scratch(ctx)) /* where the commands run */
        return NULL;
    Suite *s = suite_create("qwen35");
    TCase *ops = tcase_create("ops");
    tcase_add_test(ops, rule_matches_published);
    tcase_add_test(ops, rule_chunked_equals_recurrent);
    tcase_add_test(ops, conv_backward);
    tcase_add_test(ops, l2norm_backward);
    tcase_add_test(ops, gates_backward);
    tcase_add_test(ops, rule_backward);
    tcase_add_test(ops, gated_rmsnorm_backward);
    tcase_add_test(ops, partial_rope_backward);
    suite_add_tcase(s, ops);
    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 60);
    tcase_add_test(model, hybrid_matches_transformers);
    tcase_add_test(model, tied_matches_transformers);
    tcase_add_test(model, composite_layout);
    tcase_add_test(model, bf16_shards);
    tcase_add_test(model, bf16_rollout_copy);
    tcase_add_loop_test(model, quantised_rollout_copy, 0,
                        (int)(sizeof quant_kinds / sizeof quant_kinds[0]));
    tcase_add_test(model, hybrid_gradient);
    tcase_add_test(model, tied_gradient);
    tcase_add_test(model, training_lowers_loss);
    tcase_add_test(model, batch_forward_backward);
    tcase_add_test(model, bad_layer_type);
    tcase_add_test(model, missing_linear_tensor);
    tcase_add_test(model, vision_only);
    suite_add_tcase(s, model);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_test(cli, cli_score_and_generate);
    tcase_add_test(cli, commands_on_tiny);
    tcase_add_test(cli, cli_refusals);
    tcase_add_test(cli, cli_score_bf16);
    tcase_add_test(cli, init_model_presets);
    suite_add_tcase(s, cli);
    return s;
}
