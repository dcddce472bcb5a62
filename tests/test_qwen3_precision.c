/* test_qwen3_precision.c: the Qwen3 trainer/rollout precisions (dllm/qwen3.h,
 * "precision"; METHOD.md §6) and the Qwen3 policy at FP8.
 *
 *  - rollout "trainer" is the trainer forward bit for bit, and the rollout
 *    forward leaves the trainer's kept activations intact (same gradients);
 *  - FP8: every layer linear of the copy equals op_fp8_linear_fwd on an
 *    independently quantised weight (block, channel and tensor scaling, both
 *    formats); with LoRA the merged weight is what is quantised;
 *  - bf16: the copy's linear weights are the bf16 roundings of the (merged)
 *    weights, read back through identity inputs;
 *  - logits at bf16 and FP8 differ from fp32 by a small nonzero amount, FP8
 *    more than bf16; the bf16 trainer forward equals the bf16 rollout without
 *    LoRA, and its straight-through gradients stay close to fp32's;
 *  - sync: the copy stays stale until a sync after a weight or LoRA B change;
 *  - KV-cache decoding at rollout precision (qwen3_decode_at_rollout) equals
 *    the full rollout forward on left-padded prompts;
 *  - a policy opened with arch qwen3 and rollout fp8 is not "trainer", and its
 *    AR rollouts record the sampling probabilities of the FP8 copy. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dllm/ar_sampler.h"
#include "dllm/policy.h"
#include "dllm/qwen3.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

static const char *const LIN[7] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                   "gate_proj", "up_proj", "down_proj"};

/* The tiny preset widened so that gate/up/down_proj span several 128 blocks. */
static dllm_tf *make_model(bool tied, uint64_t seed)
{
    dllm_model_config cfg;
    dllm_err err = {0};
    ck_assert_msg(dllm_config_preset(&cfg, DLLM_ARCH_QWEN3, "tiny", &err) == 0, "%s", err.msg);
    cfg.d_model = 144;
    cfg.mlp_hidden = 272;
    cfg.weight_tying = tied;
    return dllm_tf_create(&cfg, seed);
}

static void fill_normal(float *x, size_t n, double std, uint64_t seed)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 77, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(std * dllm_rng_normal(&r));
}

/* LoRA on every linear with random A and B (B nonzero, so merging matters). */
static void lora_random(dllm_tf *m, uint64_t seed)
{
    dllm_tf_lora_enable(m, 4, 8.0f, LORA_ALL, seed);
    size_t n;
    float *w = dllm_tf_trainable(m, &n);
    fill_normal(w, n, 0.05, seed + 1);
}

static dllm_precision prec(const char *trainer, const char *rollout, const char *scaling,
                            const char *format)
{
    dllm_precision p;
    dllm_err err = {0};
    ck_assert_msg(dllm_precision_parse(&p, trainer, rollout, format, scaling, false, &err) == 0,
                  "%s", err.msg);
    return p;
}

static void sync(dllm_tf *m, const dllm_precision *p)
{
    dllm_err err = {0};
    double sec = -1;
    ck_assert_msg(dllm_tf_rollout_sync(m, p, &sec, &err) == 0, "%s", err.msg);
    ck_assert(sec >= 0);
}

enum { B = 2, T = 12 };

static void batch(int V, int32_t *tok, uint8_t *km)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 37 + 11) % V;
        km[i] = !(i / T == 1 && i % T < 3); /* row 1 left-padded by 3 */
    }
}

static float *logits_of(dllm_tf *m, bool rollout)
{
    int V = dllm_tf_config(m)->vocab_size;
    int32_t tok[B * T];
    uint8_t km[B * T];
    batch(V, tok, km);
    float *lg = dllm_malloc((size_t)B * T * V * sizeof(float));
    int rc = rollout ? dllm_tf_forward_rollout(m, tok, km, B, T, NULL, 0, lg)
                     : dllm_tf_forward(m, tok, km, B, T, NULL, 0, lg);
    ck_assert_int_eq(rc, 0);
    return lg;
}

/* max |a - b| over the real (unpadded) rows; *amax = max |b| there. */
static double maxdiff(const float *a, const float *b, int V, double *amax)
{
    int32_t tok[B * T];
    uint8_t km[B * T];
    batch(V, tok, km);
    double d = 0, mx = 0;
    for (int n = 0; n < B * T; n++)
        for (int v = 0; km[n] && v < V; v++) {
            size_t i = (size_t)n * V + v;
            d = fmax(d, fabs((double)a[i] - b[i]));
            mx = fmax(mx, fabs((double)b[i]));
        }
    if (amax)
        *amax = mx;
    return d;
}

static const dllm_param *find_param(dllm_param const *ps, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ps[i].name, name))
            return &ps[i];
    ck_abort_msg("parameter %s missing", name);
    return NULL;
}

/* dst (out, in) = W + (alpha/r) B A of linear j of layer l, in double then
 * rounded to fp32 (independent of the model's own merge). */
static float *merged(dllm_tf *m, int l, int j, int *o, int *in)
{
    const dllm_param *ps;
    int np = dllm_tf_params(m, &ps);
    char nm[128];
    snprintf(nm, sizeof nm, "model.layers.%d.%s.%s.weight", l, j < 4 ? "self_attn" : "mlp",
             LIN[j]);
    const dllm_param *w = find_param(ps, np, nm);
    *o = (int)w->shape[0];
    *in = (int)w->shape[1];
    float *dst = dllm_malloc(w->numel * sizeof(float));
    memcpy(dst, w->data, w->numel * sizeof(float));
    float alpha;
    int mask, r = dllm_tf_lora_info(m, &alpha, &mask);
    if (r && ((mask >> j) & 1)) {
        const dllm_param *ls;
        int nl = dllm_tf_lora_params(m, &ls);
        snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.%s.lora_A.weight", l,
                 j < 4 ? "self_attn" : "mlp", LIN[j]);
        const float *A = find_param(ls, nl, nm)->data;
        snprintf(nm, sizeof nm, "base_model.model.model.layers.%d.%s.%s.lora_B.weight", l,
                 j < 4 ? "self_attn" : "mlp", LIN[j]);
        const float *Bm = find_param(ls, nl, nm)->data;
        for (int a = 0; a < *o; a++)
            for (int b = 0; b < *in; b++) {
                double s = 0;
                for (int k = 0; k < r; k++)
                    s += (double)Bm[a * r + k] * A[k * *in + b];
                dst[(size_t)a * *in + b] = (float)((double)w->data[(size_t)a * *in + b] +
                                                   (double)alpha / r * s);
            }
    }
    return dst;
}

/* ---- rollout "trainer" -------------------------------------------------------------- */

START_TEST(test_trainer_bit_identical)
{
    dllm_tf *m = make_model(false, 1);
    lora_random(m, 2);
    dllm_precision p = prec("fp32", "trainer", NULL, NULL);
    sync(m, &p);
    int V = dllm_tf_config(m)->vocab_size;
    size_t nl = (size_t)B * T * V;
    float *lt = logits_of(m, false), *lr = logits_of(m, true);
    ck_assert(memcmp(lt, lr, nl * sizeof(float)) == 0);
    /* a rollout forward between forward and backward changes no gradient */
    float *dl = dllm_malloc(nl * sizeof(float));
    fill_normal(dl, nl, 1.0, 5);
    size_t ng;
    dllm_tf_trainable(m, &ng);
    dllm_tf_zero_grad(m);
    free(logits_of(m, false));
    dllm_tf_backward(m, dl);
    float *g1 = dllm_malloc(ng * sizeof(float));
    memcpy(g1, dllm_tf_grads(m), ng * sizeof(float));
    dllm_tf_zero_grad(m);
    free(logits_of(m, false));
    free(logits_of(m, true));
    dllm_tf_backward(m, dl);
    ck_assert(memcmp(g1, dllm_tf_grads(m), ng * sizeof(float)) == 0);
    free(g1);
    free(dl);
    free(lt);
    free(lr);
    dllm_tf_free(m);
}
END_TEST

/* ---- FP8 linears ------------------------------------------------------------------- */

START_TEST(test_fp8_linears)
{
    static const char *const scal[] = {"block", "channel", "tensor"};
    static const char *const fmt[] = {"e4m3", "e5m2"};
    for (int lora = 0; lora < 2; lora++) {
        dllm_tf *m = make_model(true, 3);
        if (lora)
            lora_random(m, 4);
        for (int si = 0; si < 3; si++)
            for (int fi = 0; fi < 2; fi++) {
                dllm_precision p = prec("fp32", "fp8", scal[si], fmt[fi]);
                sync(m, &p);
                for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
                    for (int j = 0; j < 7; j++) {
                        int o, in, N = 5;
                        float *w = merged(m, l, j, &o, &in);
                        float *x = dllm_malloc((size_t)N * in * sizeof(float));
                        fill_normal(x, (size_t)N * in, 1.0, 100 + l * 7 + j);
                        x[3] = 40.0f; /* an outlier: the activation scale matters */
                        float *got = dllm_malloc((size_t)N * o * sizeof(float));
                        float *want = dllm_malloc((size_t)N * o * sizeof(float));
                        ck_assert_int_eq(dllm_tf_rollout_linear(m, l, LIN[j], x, N, got), 0);
                        fp8_matrix q = {0};
                        dllm_err err = {0};
                        ck_assert_int_eq(fp8_quantise_weight(&q, w, o, in, p.fp8_format,
                                                             p.fp8_scaling, false, &err), 0);
                        q.act_scaling = si == 0 ? FP8_SCALE_GROUP
                                        : si == 1 ? FP8_SCALE_CHANNEL : FP8_SCALE_TENSOR;
                        op_fp8_linear_fwd(want, x, &q, N, in, o);
                        if (!lora) { /* the same weight bits: the same product */
                            ck_assert_msg(memcmp(got, want, (size_t)N * o * sizeof(float)) == 0,
                                          "%s %s layer %d %s", scal[si], fmt[fi], l, LIN[j]);
                        } else { /* merge order may flip a code: nearly equal */
                            double d = 0, mx = 0;
                            for (size_t e = 0; e < (size_t)N * o; e++) {
                                d = fmax(d, fabs((double)got[e] - want[e]));
                                mx = fmax(mx, fabs((double)want[e]));
                            }
                            ck_assert_msg(d <= 0.02 * mx, "%s lora layer %d %s: %g of %g",
                                          scal[si], l, LIN[j], d, mx);
                        }
                        fp8_matrix_free(&q);
                        free(w);
                        free(x);
                        free(got);
                        free(want);
                    }
            }
        float dummy = 0, out;
        ck_assert_int_eq(dllm_tf_rollout_linear(m, 0, "lm_head", &dummy, 1, &out),
                         DLLM_EXIT_INPUT);
        ck_assert_int_eq(dllm_tf_rollout_linear(m, 9, "q_proj", &dummy, 1, &out), DLLM_EXIT_INPUT);
        dllm_tf_free(m);
    }
}
END_TEST

/* ---- bf16 weights -------------------------------------------------------------------- */

static bool is_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0xffffu) == 0;
}

START_TEST(test_bf16_weights)
{
    dllm_tf *m = make_model(false, 5);
    lora_random(m, 6);
    dllm_precision p = prec("fp32", "bf16", NULL, NULL);
    sync(m, &p);
    for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
        for (int j = 0; j < 7; j++) {
            int o, in;
            float *w = merged(m, l, j, &o, &in);
            float *eye = dllm_calloc((size_t)in * in, sizeof(float));
            for (int i = 0; i < in; i++)
                eye[(size_t)i * in + i] = 1.0f;
            float *cols = dllm_malloc((size_t)in * o * sizeof(float)); // (in, o) = W^T
            ck_assert_int_eq(dllm_tf_rollout_linear(m, l, LIN[j], eye, in, cols), 0);
            int off = 0;
            for (int a = 0; a < o; a++)
                for (int b = 0; b < in; b++) {
                    float got = cols[(size_t)b * o + a], want = w[(size_t)a * in + b];
                    ck_assert_msg(is_bf16(got), "layer %d %s [%d,%d] %a not bf16", l, LIN[j], a,
                                  b, (double)got);
                    float r = want;
                    op_round_bf16(&r, 1);
                    if (got != r) { /* the fp32 merge order: at most one bf16 step */
                        off++;
                        ck_assert(fabsf(got - r) <= fabsf(r) * 0x1p-7f);
                    }
                }
            ck_assert_int_le(off, o * in / 100);
            free(w);
            free(eye);
            free(cols);
        }
    dllm_tf_free(m);
}
END_TEST

/* ---- logits at each precision ------------------------------------------------------- */

START_TEST(test_logits_close)
{
    for (int tied = 0; tied < 2; tied++) {
        dllm_tf *m = make_model(tied, 7);
        int V = dllm_tf_config(m)->vocab_size;
        float *l32 = logits_of(m, false);
        double amax;
        dllm_precision p = prec("fp32", "bf16", NULL, NULL);
        sync(m, &p);
        float *lb = logits_of(m, true);
        double db = maxdiff(lb, l32, V, &amax);
        p = prec("fp32", "fp8", "block", "e4m3");
        sync(m, &p);
        float *l8 = logits_of(m, true);
        double d8 = maxdiff(l8, l32, V, NULL);
        ck_assert_msg(db > 0 && db < 0.02 * amax, "bf16: %g of %g", db, amax);
        ck_assert_msg(d8 > db && d8 < 0.15 * amax, "fp8: %g (bf16 %g) of %g", d8, db, amax);
        /* the trainer logits are untouched by the rollout copy */
        float *lt = logits_of(m, false);
        ck_assert(memcmp(lt, l32, (size_t)B * T * V * sizeof(float)) == 0);
        /* bf16 trainer without LoRA = the bf16 rollout (same weights, same rounding) */
        p = prec("bf16", "trainer", NULL, NULL);
        sync(m, &p);
        float *ltb = logits_of(m, false), *lrb = logits_of(m, true);
        ck_assert(memcmp(ltb, lb, (size_t)B * T * V * sizeof(float)) == 0);
        ck_assert(memcmp(lrb, lb, (size_t)B * T * V * sizeof(float)) == 0);
        printf("qwen3 %s: max |logit - fp32| bf16 %.3g, fp8 e4m3 block %.3g (max |logit| %.3g)\n",
               tied ? "tied" : "untied", db, d8, amax);
        free(l32);
        free(lb);
        free(l8);
        free(lt);
        free(ltb);
        free(lrb);
        dllm_tf_free(m);
    }
}
END_TEST

START_TEST(test_bf16_trainer_grads)
{
    dllm_tf *m = make_model(false, 8);
    lora_random(m, 9);
    int V = dllm_tf_config(m)->vocab_size;
    size_t nl = (size_t)B * T * V, ng;
    float *dl = dllm_malloc(nl * sizeof(float));
    fill_normal(dl, nl, 1.0, 10);
    dllm_tf_trainable(m, &ng);
    float *g32 = dllm_malloc(ng * sizeof(float));
    dllm_tf_zero_grad(m);
    free(logits_of(m, false));
    dllm_tf_backward(m, dl);
    memcpy(g32, dllm_tf_grads(m), ng * sizeof(float));
    dllm_precision p = prec("bf16", "trainer", NULL, NULL);
    sync(m, &p);
    dllm_tf_zero_grad(m);
    free(logits_of(m, false));
    dllm_tf_backward(m, dl);
    const float *g16 = dllm_tf_grads(m);
    double d = 0, mx = 0;
    for (size_t i = 0; i < ng; i++) {
        d = fmax(d, fabs((double)g16[i] - g32[i]));
        mx = fmax(mx, fabs((double)g32[i]));
    }
    ck_assert_msg(d > 0 && d < 0.05 * mx, "bf16 trainer gradients: %g of %g", d, mx);
    /* back to fp32: the master weights were never rounded */
    p = prec("fp32", "trainer", NULL, NULL);
    sync(m, &p);
    dllm_tf_zero_grad(m);
    free(logits_of(m, false));
    dllm_tf_backward(m, dl);
    ck_assert(memcmp(g32, dllm_tf_grads(m), ng * sizeof(float)) == 0);
    free(g32);
    free(dl);
    dllm_tf_free(m);
}
END_TEST

/* ---- sync -------------------------------------------------------------------------- */

START_TEST(test_sync_moves)
{
    dllm_tf *m = make_model(false, 11);
    int V = dllm_tf_config(m)->vocab_size;
    size_t nb = (size_t)B * T * V * sizeof(float);
    dllm_precision p = prec("fp32", "fp8", "block", "e4m3");
    sync(m, &p);
    float *l0 = logits_of(m, true);
    /* a base weight change: stale until the sync */
    const dllm_param *ps;
    int np = dllm_tf_params(m, &ps);
    const dllm_param *w = find_param(ps, np, "model.layers.0.mlp.up_proj.weight");
    for (size_t e = 0; e < w->numel; e++)
        w->data[e] *= 1.5f;
    float *l1 = logits_of(m, true);
    ck_assert(memcmp(l0, l1, nb) == 0);
    sync(m, &p);
    float *l2 = logits_of(m, true);
    ck_assert(maxdiff(l2, l1, V, NULL) > 1e-4);
    /* LoRA B change (B = 0 first: enabling changes nothing after a sync) */
    dllm_tf_lora_enable(m, 4, 8.0f, LORA_V_PROJ | LORA_FF_OUT, 12);
    sync(m, &p);
    float *l3 = logits_of(m, true);
    ck_assert(memcmp(l3, l2, nb) == 0);
    const dllm_param *ls;
    int nl = dllm_tf_lora_params(m, &ls);
    for (int i = 0; i < nl; i++)
        if (strstr(ls[i].name, "lora_B"))
            fill_normal(ls[i].data, ls[i].numel, 0.05, 13 + i);
    float *l4 = logits_of(m, true);
    ck_assert(memcmp(l4, l3, nb) == 0); /* the copy has LoRA merged: stale */
    sync(m, &p);
    float *l5 = logits_of(m, true);
    ck_assert(maxdiff(l5, l4, V, NULL) > 1e-4);
    free(l0);
    free(l1);
    free(l2);
    free(l3);
    free(l4);
    free(l5);
    dllm_tf_free(m);
}
END_TEST

/* ---- KV-cache decoding at rollout precision ---------------------------------------- */

enum { KB = 3, KP = 5, KG = 6 };

/* Prefill + teacher-forced decode vs dllm_tf_forward_rollout on the whole
 * sequence; returns the max |difference| over the KB*KG logit rows, *nbad
 * the rows that differ by more than 1e-5 and *amax the max |logit|. */
static double decode_vs_full(dllm_tf *m, int *nbad, double *amax)
{
    int V = dllm_tf_config(m)->vocab_size, TT = KP + KG - 1;
    int32_t seq[KB * (KP + KG - 1)];
    uint8_t km[KB * (KP + KG - 1)];
    for (int b = 0; b < KB; b++)
        for (int t = 0; t < TT; t++) {
            seq[b * TT + t] = (b * 31 + t * 17 + 3) % V;
            km[b * TT + t] = !(t < KP && t < b); /* row b left-padded by b */
        }
    float *full = dllm_malloc((size_t)KB * TT * V * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward_rollout(m, seq, km, KB, TT, NULL, 0, full), 0);
    qwen3_kv_cache *c = qwen3_cache_new(m, KB, KP + KG);
    int32_t prompts[KB * KP], next[KB];
    uint8_t pm[KB * KP];
    for (int b = 0; b < KB; b++)
        for (int t = 0; t < KP; t++) {
            prompts[b * KP + t] = seq[b * TT + t];
            pm[b * KP + t] = km[b * TT + t];
        }
    float *lg = dllm_malloc((size_t)KB * V * sizeof(float));
    dllm_err err = {0};
    ck_assert_msg(qwen3_prefill(m, c, prompts, pm, KP, lg, &err) == 0, "%s", err.msg);
    double d = 0;
    *nbad = 0;
    *amax = 0;
    for (int g = 0; g < KG; g++) {
        if (g > 0) {
            for (int b = 0; b < KB; b++)
                next[b] = seq[b * TT + KP + g - 1];
            ck_assert_msg(qwen3_decode_step(m, c, next, lg, &err) == 0, "%s", err.msg);
        }
        for (int b = 0; b < KB; b++) {
            double dr = 0;
            for (int v = 0; v < V; v++) {
                float f = full[((size_t)b * TT + KP - 1 + g) * V + v];
                dr = fmax(dr, fabs((double)lg[(size_t)b * V + v] - f));
                *amax = fmax(*amax, fabs((double)f));
            }
            *nbad += dr > 1e-5;
            d = fmax(d, dr);
        }
    }
    qwen3_cache_free(c);
    free(full);
    free(lg);
    return d;
}

/* Summation order differs between the full forward and decoding (~1e-7);
 * where such a difference carries an activation across a bf16 or FP8
 * rounding boundary, one code flips and the logits move by more (seen on a
 * few rows out of tens, ~1e-4). So: most rows within 1e-5, every row close;
 * decoding off the copy (the trainer's numerics) misses most rows. */
START_TEST(test_kv_decode_rollout)
{
    dllm_tf *m = make_model(false, 14);
    lora_random(m, 15);
    static const char *const modes[][2] = {{"fp8", "block"}, {"fp8", "channel"}, {"bf16", NULL},
                                           {"trainer", NULL}};
    for (int k = 0; k < 4; k++) {
        dllm_precision p = prec("fp32", modes[k][0], modes[k][1], "e4m3");
        sync(m, &p);
        qwen3_decode_at_rollout(m, true);
        int nbad, nbad0;
        double amax, d = decode_vs_full(m, &nbad, &amax);
        ck_assert_msg(nbad <= KB * KG / 5 && d < 0.01 * amax,
                      "%s %s: decode vs full rollout forward: %d of %d rows beyond 1e-5, max %g",
                      modes[k][0], modes[k][1] ? modes[k][1] : "", nbad, KB * KG, d);
        qwen3_decode_at_rollout(m, false);
        double d0 = decode_vs_full(m, &nbad0, &amax);
        if (strcmp(modes[k][0], "trainer"))
            ck_assert_msg(nbad0 >= KB * KG / 2, "%s: decoding off the copy matched it (%g)",
                          modes[k][0], d0);
        printf("qwen3 KV decode vs full rollout forward, %s %s: max %.3g, %d of %d rows beyond "
               "1e-5 (trainer numerics: max %.3g)\n", modes[k][0], modes[k][1] ? modes[k][1] : "",
               d, nbad, KB * KG, d0);
    }
    dllm_tf_free(m);
}
END_TEST

/* ---- the policy ---------------------------------------------------------------------- */

START_TEST(test_policy_fp8)
{
    static const char *const qt[] = {"q_proj", "o_proj", "down_proj"};
    dllm_policy_cfg c = {.preset = "tiny", .arch = "qwen3", .seed = 3, .lora_rank = 4,
                         .lora_alpha = 16, .lora_targets = qt, .n_lora_targets = 3,
                         .trainer = "fp32", .rollout = "fp8", .fp8_format = "e4m3",
                         .fp8_scaling = "block"};
    dllm_policy *p;
    dllm_err err = {0};
    ck_assert_msg(dllm_policy_open(&p, &c, &err) == 0, "%s", err.msg);
    ck_assert(!dllm_policy_rollout_is_trainer(p));
    size_t n;
    float *tr = dllm_policy_trainable(p, &n);
    fill_normal(tr, n, 0.05, 21);
    ck_assert_msg(dllm_policy_sync_rollout(p, NULL, &err) == 0, "%s", err.msg);
    const dllm_model_config *mc = dllm_policy_config(p);
    int V = mc->embedding_size;
    enum { PB = 2, PP = 4, PG = 8 };
    dllm_sampler_cfg sc = {.gen_length = PG, .block_length = PG, .steps = PG, .temperature = 0.9,
                           .mask_id = -1, .eos_id = -1, .eot_id = -1, .vocab = V};
    int32_t prompts[PB * PP] = {1, 10, 11, 12, 0, 1, 20, 21};
    uint8_t pm[PB * PP] = {1, 1, 1, 1, 0, 1, 1, 1};
    dllm_rollout r = {0};
    ck_assert_msg(dllm_policy_rollout(p, prompts, pm, PB, PP, &sc, 1.0, 5, &r, &err) == 0, "%s",
                  err.msg);
    /* commit_prob = the sampling probability under the ROLLOUT (FP8) logits */
    int TT = PP + PG - 1;
    int32_t seq[PB * (PP + PG - 1)];
    uint8_t km[PB * (PP + PG - 1)];
    for (int b = 0; b < PB; b++)
        for (int t = 0; t < TT; t++) {
            seq[b * TT + t] = r.tokens[b * (PP + PG) + t];
            km[b * TT + t] = t < PP ? pm[b * PP + t] : 1;
            ck_assert(r.tokens[b * (PP + PG) + t] >= 0 && r.tokens[b * (PP + PG) + t] < V);
        }
    double err_r = 0, err_t = 0;
    double *probs = dllm_malloc((size_t)V * sizeof(double));
    for (int prc = 0; prc < 2; prc++) {
        float *lg = dllm_malloc((size_t)PB * TT * V * sizeof(float));
        void *ctx;
        dllm_logits_fn fn = dllm_policy_logits(p, prc ? DLLM_PREC_TRAIN : DLLM_PREC_ROLLOUT, &ctx);
        ck_assert_int_eq(fn(ctx, seq, km, PB, TT, NULL, 0, lg), 0);
        for (int b = 0; b < PB; b++)
            for (int g = 0; g < PG; g++) {
                dllm_ar_dist(lg + ((size_t)b * TT + PP - 1 + g) * V, V, sc.temperature, 1.0,
                             probs, NULL);
                double e = fabs(probs[r.tokens[b * (PP + PG) + PP + g]] -
                                (double)r.commit_prob[b * PG + g]);
                if (prc)
                    err_t = fmax(err_t, e);
                else
                    err_r = fmax(err_r, e);
            }
        free(lg);
    }
    printf("qwen3 policy fp8 rollout: |commit_prob - p_rollout| %.3g, - p_train %.3g\n", err_r,
           err_t);
    ck_assert_msg(err_r < 1e-5, "commit_prob vs the FP8 logits: %g", err_r);
    ck_assert_msg(err_t > 10 * err_r, "commit_prob vs the trainer logits: %g", err_t);
    free(probs);
    dllm_rollout_free(&r);
    dllm_policy_free(p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("qwen3_precision");
    TCase *c = tcase_create("core");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_trainer_bit_identical);
    tcase_add_test(c, test_fp8_linears);
    tcase_add_test(c, test_bf16_weights);
    tcase_add_test(c, test_logits_close);
    tcase_add_test(c, test_bf16_trainer_grads);
    tcase_add_test(c, test_sync_moves);
    tcase_add_test(c, test_kv_decode_rollout);
    tcase_add_test(c, test_policy_fp8);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
