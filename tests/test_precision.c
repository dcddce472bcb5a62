/* test_precision.c: the precision machinery of the LLaDA model (llada.h,
 * "precision"): the rollout copy (trainer / bf16 / FP8 W8A8) and the bf16
 * trainer.
 *
 *  - rollout "trainer" is bit-identical to dllm_tf_forward (fp32 and bf16
 *    trainers, with LoRA), and a rollout forward leaves the trainer's kept
 *    activations intact;
 *  - FP8: the copy's block linears equal op_fp8_linear_fwd on a weight
 *    quantised here from the model's weights (block, channel and tensor
 *    scaling, each with its activation granularity), bit for bit; the logits
 *    differ from fp32 by a small nonzero amount, more for E5M2 than E4M3 and
 *    more than the bf16 copy's;
 *  - bf16: the copy's weights (read back through the linear on unit vectors)
 *    are bf16 numbers within half an ulp of the merged weights;
 *  - sync: a weight change reaches the copy only at the next sync; LoRA is
 *    merged (FP8 logits of a LoRA model equal those of its merged checkpoint);
 *  - bf16 trainer: differs from fp32, its straight-through gradient matches
 *    finite differences of the bf16 forward along random directions;
 *  - parsing of precision names. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dllm/llada.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

/* Sizes chosen so that 128-blocks have ragged edges (C = 160, H = 288). */
static dllm_model_config test_config(void)
{
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, DLLM_ARCH_LLADA, "tiny", &err), 0);
    c.d_model = 160;
    c.n_heads = 5;
    c.n_kv_heads = 5;
    c.head_dim = 32;
    c.mlp_hidden = 288;
    c.vocab_size = c.embedding_size = 200;
    c.n_layers = 2;
    return c;
}

static void fill_normal(float *x, size_t n, double std, uint64_t seed)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 77, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(std * dllm_rng_normal(&r));
}

/* A model with LoRA on every linear and nonzero B (so merging matters). */
static dllm_tf *make_model(bool lora)
{
    dllm_model_config c = test_config();
    dllm_tf *m = dllm_tf_create(&c, 7);
    if (lora) {
        dllm_tf_lora_enable(m, 4, 8.0f, LORA_ALL, 3);
        const dllm_param *lp;
        int n = dllm_tf_lora_params(m, &lp);
        for (int i = 0; i < n; i++)
            if (strstr(lp[i].name, "lora_B"))
                fill_normal(lp[i].data, lp[i].numel, 0.05, 100 + (uint64_t)i);
    }
    return m;
}

enum { B = 2, T = 12 };

typedef struct {
    int32_t tokens[B * T];
    uint8_t keymask[B * T];
} batch;

static batch make_batch(int V)
{
    batch b;
    dllm_rng r = dllm_rng_make(5, DLLM_RNG_INIT, 1, 2);
    for (int i = 0; i < B * T; i++) {
        b.tokens[i] = (int32_t)dllm_rng_below(&r, (uint64_t)V);
        b.keymask[i] = !(i >= T && i < T + 3); /* row 1: three padding keys */
    }
    return b;
}

static dllm_precision prec(const char *trainer, const char *rollout, const char *fmt,
                            const char *scaling)
{
    dllm_precision p;
    dllm_err err = {0};
    ck_assert_msg(dllm_precision_parse(&p, trainer, rollout, fmt, scaling, false, &err) == 0,
                  "%s", err.msg);
    return p;
}

static void do_sync(dllm_tf *m, dllm_precision p)
{
    dllm_err err = {0};
    double sec = -1;
    ck_assert_msg(dllm_tf_rollout_sync(m, &p, &sec, &err) == 0, "%s", err.msg);
    ck_assert(sec >= 0);
}

static float *logits_of(dllm_tf *m, const batch *b, bool rollout)
{
    int V = dllm_tf_config(m)->embedding_size;
    float *lg = dllm_malloc((size_t)B * T * V * sizeof(float));
    int rc = rollout ? dllm_tf_forward_rollout(m, b->tokens, b->keymask, B, T, NULL, 0, lg)
                     : dllm_tf_forward(m, b->tokens, b->keymask, B, T, NULL, 0, lg);
    ck_assert_int_eq(rc, 0);
    return lg;
}

/* max |a - b| and rms(b) over n. */
static double max_diff(const float *a, const float *b, size_t n, double *rms)
{
    double md = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md ? d : md;
        s += (double)b[i] * b[i];
    }
    if (rms)
        *rms = sqrt(s / (double)n);
    return md;
}

/* rms(a - b) / rms(b) over n. */
static double rel_rms(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(e / s);
}

/* ---- rollout "trainer" --------------------------------------------------------------- */

START_TEST(test_trainer_rollout_bit_identical)
{
    for (int bf = 0; bf < 2; bf++) {
        dllm_tf *m = make_model(true);
        batch b = make_batch(dllm_tf_config(m)->embedding_size);
        size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
        if (bf)
            do_sync(m, prec("bf16", "trainer", NULL, NULL));
        else { /* never synced: the defaults are fp32 + rollout trainer */
            dllm_precision p = dllm_tf_get_precision(m);
            ck_assert(!p.trainer_bf16 && p.rollout == DLLM_ROLLOUT_TRAINER);
        }
        float *a = logits_of(m, &b, false), *r = logits_of(m, &b, true);
        ck_assert_msg(memcmp(a, r, n * sizeof(float)) == 0, "trainer %s: rollout differs",
                      bf ? "bf16" : "fp32");
        free(a);
        free(r);
        dllm_tf_free(m);
    }
}
END_TEST

/* A rollout forward between a training forward and its backward changes nothing. */
START_TEST(test_rollout_keeps_trainer_activations)
{
    dllm_tf *m = make_model(true);
    do_sync(m, prec("fp32", "fp8", NULL, NULL));
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nt;
    float *dl = dllm_malloc(n * sizeof(float));
    fill_normal(dl, n, 1.0, 9);
    dllm_tf_trainable(m, &nt);
    float *g1 = dllm_malloc(nt * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        dllm_tf_zero_grad(m);
        float *lg = logits_of(m, &b, false);
        if (pass) {
            float *r = logits_of(m, &b, true);
            free(r);
        }
        dllm_tf_backward(m, dl);
        if (!pass)
            memcpy(g1, dllm_tf_grads(m), nt * sizeof(float));
        else
            ck_assert(memcmp(g1, dllm_tf_grads(m), nt * sizeof(float)) == 0);
        free(lg);
    }
    free(g1);
    free(dl);
    dllm_tf_free(m);
}
END_TEST

/* ---- FP8 ------------------------------------------------------------------------------- */

START_TEST(test_fp8_linear_matches_op)
{
    static const char *const scalings[] = {"block", "channel", "tensor"};
    static const fp8_scaling modes[] = {FP8_SCALE_BLOCK, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    static const fp8_scaling acts[] = {FP8_SCALE_GROUP, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    dllm_tf *m = make_model(false);
    const dllm_model_config *c = dllm_tf_config(m);
    const dllm_param *ps;
    int np = dllm_tf_params(m, &ps);
    for (int s = 0; s < 3; s++)
        for (int f = 0; f < 2; f++) {
            do_sync(m, prec(NULL, "fp8", f ? "e5m2" : "e4m3", scalings[s]));
            /* layer 0 q_proj (OC 160, C 160) and layer 1 ff_out (OC 160, C 288) */
            const char *names[2] = {"model.transformer.blocks.0.q_proj.weight",
                                    "model.transformer.blocks.1.ff_out.weight"};
            for (int k = 0; k < 2; k++) {
                const dllm_param *w = NULL;
                for (int i = 0; i < np; i++)
                    if (!strcmp(ps[i].name, names[k]))
                        w = &ps[i];
                ck_assert_ptr_nonnull(w);
                int OC = (int)w->shape[0], C = (int)w->shape[1], N = 7;
                float *x = dllm_malloc((size_t)N * C * sizeof(float));
                fill_normal(x, (size_t)N * C, 1.0, 11 + (uint64_t)k);
                x[3] = 40.0f; /* an outlier: group scales differ from the tensor scale */
                fp8_matrix q = {0};
                dllm_err err = {0};
                ck_assert_int_eq(fp8_quantise_weight(&q, w->data, OC, C, f ? FP8_E5M2 : FP8_E4M3,
                                                     modes[s], false, &err), 0);
                q.act_scaling = acts[s];
                float *ref = dllm_malloc((size_t)N * OC * sizeof(float));
                float *got = dllm_malloc((size_t)N * OC * sizeof(float));
                op_fp8_linear_fwd(ref, x, &q, N, C, OC);
                ck_assert_int_eq(dllm_tf_rollout_linear(m, k, k ? "ff_out" : "q_proj", x, N, got), 0);
                ck_assert_msg(memcmp(ref, got, (size_t)N * OC * sizeof(float)) == 0,
                              "%s %s %s: the copy's linear is not the FP8 GEMM", names[k],
                              scalings[s], f ? "e5m2" : "e4m3");
                /* and close to, but not, the fp32 product */
                op_linear_fwd(ref, x, w->data, N, C, OC);
                double e = rel_rms(got, ref, (size_t)N * OC);
                ck_assert_msg(e > 1e-3 && e < (f ? 0.15 : 0.08), "%s %s: relative error %g",
                              names[k], scalings[s], e);
                fp8_matrix_free(&q);
                free(x);
                free(ref);
                free(got);
            }
        }
    ck_assert_int_eq(dllm_tf_rollout_linear(m, 0, "lm_head", NULL, 1, NULL), DLLM_EXIT_INPUT);
    ck_assert_int_eq(dllm_tf_rollout_linear(m, c->n_layers, "q_proj", NULL, 1, NULL),
                     DLLM_EXIT_INPUT);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_fp8_logits_close_to_fp32)
{
    dllm_tf *m = make_model(true);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = logits_of(m, &b, false);
    double d[3];
    const char *kinds[3] = {"bf16", "fp8", "fp8"};
    const char *fmts[3] = {NULL, "e4m3", "e5m2"};
    for (int k = 0; k < 3; k++) {
        do_sync(m, prec(NULL, kinds[k], fmts[k], NULL));
        float *r = logits_of(m, &b, true);
        d[k] = rel_rms(r, ref, n);
        free(r);
    }
    printf("rms(logits - fp32) / rms(fp32): bf16 %.3g, fp8 e4m3 %.3g, e5m2 %.3g\n", d[0], d[1],
           d[2]);
    ck_assert(d[0] > 0 && d[1] > 0 && d[2] > 0);
    ck_assert(d[0] < 0.02 && d[1] < 0.15 && d[2] < 0.3); /* small */
    ck_assert(d[0] < d[1] && d[1] < d[2]);           /* bf16 < e4m3 < e5m2 */
    free(ref);
    dllm_tf_free(m);
}
END_TEST

/* ---- bf16 copy ------------------------------------------------------------------------- */

START_TEST(test_bf16_copy_representable)
{
    dllm_tf *m = make_model(true);
    do_sync(m, prec(NULL, "bf16", NULL, NULL));
    const dllm_param *ps, *lp;
    int np = dllm_tf_params(m, &ps);
    int nlp = dllm_tf_lora_params(m, &lp);
    float alpha;
    int rank = dllm_tf_lora_info(m, &alpha, NULL);
    /* layer 1 up_proj [288, 160]: its weight, read back as I W^T (unit vectors) */
    const dllm_param *w = NULL, *A = NULL, *Bm = NULL;
    for (int i = 0; i < np; i++)
        if (!strcmp(ps[i].name, "model.transformer.blocks.1.up_proj.weight"))
            w = &ps[i];
    for (int i = 0; i < nlp; i++) {
        if (!strcmp(lp[i].name, "base_model.model.model.transformer.blocks.1.up_proj.lora_A.weight"))
            A = &lp[i];
        if (!strcmp(lp[i].name, "base_model.model.model.transformer.blocks.1.up_proj.lora_B.weight"))
            Bm = &lp[i];
    }
    ck_assert(w && A && Bm);
    int OC = (int)w->shape[0], C = (int)w->shape[1];
    float *eye = calloc((size_t)C * C, sizeof(float)), *wt = dllm_malloc((size_t)C * OC * 4);
    for (int i = 0; i < C; i++)
        eye[(size_t)i * C + i] = 1.0f;
    ck_assert_int_eq(dllm_tf_rollout_linear(m, 1, "up_proj", eye, C, wt), 0);
    int changed = 0;
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            float v = wt[(size_t)c * OC + o], r = v;
            op_round_bf16(&r, 1);
            ck_assert_msg(r == v, "weight (%d, %d) = %.9g is not a bf16 number", o, c, v);
            double merged = w->data[(size_t)o * C + c];
            for (int k = 0; k < rank; k++)
                merged += (double)alpha / rank * Bm->data[(size_t)o * rank + k] *
                          A->data[(size_t)k * C + c];
            /* half a bf16 ulp, plus the fp32 merge's own rounding */
            ck_assert_msg(fabs(v - merged) <= fabs(merged) * (1.0 / 256) + 1e-6 * fabs(w->data[(size_t)o * C + c]) + 1e-9,
                          "weight (%d, %d): %.9g vs merged %.9g", o, c, v, merged);
            changed += fabs(merged - w->data[(size_t)o * C + c]) > fabs(merged) / 128;
        }
    ck_assert_msg(changed > OC * C / 4, "LoRA hardly changed the merged weight (%d)", changed);
    free(eye);
    free(wt);
    dllm_tf_free(m);
}
END_TEST

/* ---- sync ------------------------------------------------------------------------------ */

START_TEST(test_sync_after_weight_change)
{
    dllm_tf *m = make_model(false);
    dllm_precision p = prec(NULL, "fp8", NULL, NULL);
    do_sync(m, p);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nt;
    float *l0 = logits_of(m, &b, true);
    float *w = dllm_tf_trainable(m, &nt);
    for (size_t i = 0; i < nt; i++)
        w[i] *= 1.05f;
    float *l1 = logits_of(m, &b, true);
    ck_assert_msg(memcmp(l0, l1, n * sizeof(float)) == 0, "the copy changed before a sync");
    do_sync(m, p);
    float *l2 = logits_of(m, &b, true);
    ck_assert_msg(memcmp(l0, l2, n * sizeof(float)) != 0, "sync did not rebuild the copy");
    free(l0);
    free(l1);
    free(l2);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_sync_merges_lora)
{
    dllm_tf *m = make_model(true);
    dllm_precision p = prec(NULL, "fp8", NULL, NULL);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nl;
    /* B = 0: the copy equals the base model's */
    float *lw = dllm_tf_trainable(m, &nl);
    float *saved = dllm_malloc(nl * sizeof(float));
    memcpy(saved, lw, nl * sizeof(float));
    const dllm_param *lp;
    int nlp = dllm_tf_lora_params(m, &lp);
    for (int i = 0; i < nlp; i++)
        if (strstr(lp[i].name, "lora_B"))
            memset(lp[i].data, 0, lp[i].numel * sizeof(float));
    do_sync(m, p);
    float *l0 = logits_of(m, &b, true);
    memcpy(lw, saved, nl * sizeof(float)); /* nonzero B */
    do_sync(m, p);
    float *l1 = logits_of(m, &b, true);
    ck_assert_msg(memcmp(l0, l1, n * sizeof(float)) != 0, "a nonzero LoRA B left the copy alone");

    /* the merged checkpoint (dllm_tf_save merges), reloaded without LoRA, gives
     * the same FP8 copy: the merge is W + (alpha/r) B A */
    char dir[] = "/tmp/dllm_precision_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    dllm_err err = {0};
    ck_assert_msg(dllm_tf_save(m, dir, ST_F32, 0, &err) == 0, "%s", err.msg);
    dllm_tf *mm;
    ck_assert_msg(dllm_tf_load(&mm, dir, &err) == 0, "%s", err.msg);
    do_sync(mm, p);
    float *l2 = logits_of(mm, &b, true);
    ck_assert_msg(memcmp(l1, l2, n * sizeof(float)) == 0,
                  "the FP8 copy of the LoRA model is not that of its merged weights");
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    free(l0);
    free(l1);
    free(l2);
    free(saved);
    dllm_tf_free(mm);
    dllm_tf_free(m);
}
END_TEST

/* ---- bf16 trainer ---------------------------------------------------------------------- */

/* loss = sum c * logits (double) at the current weights, after a sync. */
static double lin_loss(dllm_tf *m, dllm_precision p, const batch *b, const float *c)
{
    do_sync(m, p);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *lg = dllm_malloc(n * sizeof(float));
    ck_assert_int_eq(dllm_tf_forward_nograd(m, b->tokens, b->keymask, B, T, NULL, 0, lg), 0);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)c[i] * lg[i];
    free(lg);
    return s;
}

/* Relative error of the directional derivative along d_k = g + k r_k (g the
 * analytic gradient, r_k random with |r_k| = |g|, k = 0..ndir-1), against
 * central differences of the forward at a relative step eps. Directions
 * leaning on g keep the signal (g.d = |g|^2) far above the bf16 forward's
 * rounding noise, which finite differences of a rounded function always
 * carry. */
static double fd_error(dllm_tf *m, dllm_precision p, double eps, int ndir)
{
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nt;
    float *c = dllm_malloc(n * sizeof(float));
    fill_normal(c, n, 1.0, 21);
    float *w = dllm_tf_trainable(m, &nt);
    float *w0 = dllm_malloc(nt * sizeof(float)), *d = dllm_malloc(nt * sizeof(float));
    float *g = dllm_malloc(nt * sizeof(float));
    memcpy(w0, w, nt * sizeof(float));
    do_sync(m, p);
    dllm_tf_zero_grad(m);
    float *lg = logits_of(m, &b, false);
    dllm_tf_backward(m, c);
    memcpy(g, dllm_tf_grads(m), nt * sizeof(float));
    double gn = 0, wn = 0;
    for (size_t i = 0; i < nt; i++) {
        gn += (double)g[i] * g[i];
        wn += (double)w0[i] * w0[i];
    }
    double worst = 0;
    for (int k = 0; k < ndir; k++) {
        fill_normal(d, nt, 1.0, 300 + (uint64_t)k);
        double rn = 0;
        for (size_t i = 0; i < nt; i++)
            rn += (double)d[i] * d[i];
        double sc = k * sqrt(gn / rn), gd = 0, dn = 0;
        for (size_t i = 0; i < nt; i++) {
            d[i] = (float)(g[i] + sc * d[i]);
            gd += (double)g[i] * d[i];
            dn += (double)d[i] * d[i];
        }
        double h = eps * sqrt(wn / dn); /* a relative step of eps */
        for (size_t i = 0; i < nt; i++)
            w[i] = (float)(w0[i] + h * d[i]);
        double fp = lin_loss(m, p, &b, c);
        for (size_t i = 0; i < nt; i++)
            w[i] = (float)(w0[i] - h * d[i]);
        double fm = lin_loss(m, p, &b, c);
        memcpy(w, w0, nt * sizeof(float));
        double fd = (fp - fm) / (2 * h), e = fabs(fd - gd) / fabs(gd);
        worst = e > worst ? e : worst;
    }
    do_sync(m, p);
    free(lg);
    free(c);
    free(w0);
    free(d);
    free(g);
    return worst;
}

START_TEST(test_trainer_bf16)
{
    dllm_tf *m = make_model(false);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *l32 = logits_of(m, &b, false);
    do_sync(m, prec("bf16", NULL, NULL, NULL));
    float *l16 = logits_of(m, &b, false);
    double rms, d = max_diff(l16, l32, n, &rms);
    ck_assert_msg(d > 0 && d < 0.05 * rms, "bf16 trainer vs fp32: max diff %g (rms %g)", d, rms);
    /* back to fp32: bit-identical to the start */
    do_sync(m, prec("fp32", NULL, NULL, NULL));
    float *l32b = logits_of(m, &b, false);
    ck_assert(memcmp(l32, l32b, n * sizeof(float)) == 0);

    /* the straight-through gradient is close to the fp32 gradient, not equal */
    size_t nt;
    dllm_tf_trainable(m, &nt);
    float *c = dllm_malloc(n * sizeof(float)), *g32 = dllm_malloc(nt * sizeof(float));
    fill_normal(c, n, 1.0, 21);
    for (int bf = 0; bf < 2; bf++) {
        do_sync(m, prec(bf ? "bf16" : "fp32", NULL, NULL, NULL));
        dllm_tf_zero_grad(m);
        float *lg = logits_of(m, &b, false);
        dllm_tf_backward(m, c);
        if (!bf)
            memcpy(g32, dllm_tf_grads(m), nt * sizeof(float));
        free(lg);
    }
    double eg = rel_rms(dllm_tf_grads(m), g32, nt);
    printf("bf16 straight-through gradient vs fp32 gradient: relative rms %.3g\n", eg);
    ck_assert(eg > 0 && eg < 0.05);
    free(c);
    free(g32);

    double e32 = fd_error(m, prec("fp32", NULL, NULL, NULL), 3e-5, 3);
    double e16 = fd_error(m, prec("bf16", NULL, NULL, NULL), 3e-4, 3);
    printf("directional derivative vs finite differences: fp32 %.2e, bf16 straight-through %.2e\n",
           e32, e16);
    ck_assert_msg(e32 < 1e-3, "fp32 gradient vs finite differences: %g", e32);
    ck_assert_msg(e16 < 2e-2, "bf16 straight-through gradient vs finite differences: %g", e16);
    free(l32);
    free(l16);
    free(l32b);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_trainer_bf16_lora)
{
    dllm_tf *m = make_model(true);
    double e16 = fd_error(m, prec("bf16", "fp8", NULL, NULL), 3e-3, 3);
    printf("LoRA, bf16 trainer: directional derivative error %.2e\n", e16);
    ck_assert_msg(e16 < 3e-2, "bf16 straight-through LoRA gradient vs finite differences: %g", e16);
    dllm_tf_free(m);
}
END_TEST

/* ---- names ----------------------------------------------------------------------------- */

START_TEST(test_parse)
{
    dllm_precision p;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_precision_parse(&p, NULL, NULL, NULL, NULL, false, &err), 0);
    ck_assert(!p.trainer_bf16 && p.rollout == DLLM_ROLLOUT_TRAINER && p.fp8_format == FP8_E4M3 &&
              p.fp8_scaling == FP8_SCALE_BLOCK && !p.fp8_pow2_scale);
    ck_assert_int_eq(dllm_precision_parse(&p, "bf16", "fp8", "e5m2", "tensor", true, &err), 0);
    ck_assert(p.trainer_bf16 && p.rollout == DLLM_ROLLOUT_FP8 && p.fp8_format == FP8_E5M2 &&
              p.fp8_scaling == FP8_SCALE_TENSOR && p.fp8_pow2_scale);
    ck_assert_str_eq(dllm_rollout_name(p.rollout), "fp8");
    struct {
        const char *t, *r, *f, *s, *word;
    } bad[] = {{"fp16", NULL, NULL, NULL, "fp16"},  {NULL, "int8", NULL, NULL, "int8"},
               {NULL, "fp8", "e3m4", NULL, "e3m4"}, {NULL, "fp8", NULL, "group", "group"},
               {NULL, "fp8", NULL, "rows", "rows"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (dllm_err){0};
        ck_assert_int_eq(dllm_precision_parse(&p, bad[i].t, bad[i].r, bad[i].f, bad[i].s, false,
                                               &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, bad[i].word), "message '%s' does not name '%s'", err.msg,
                      bad[i].word);
    }
    dllm_tf *m = make_model(false);
    p = prec(NULL, "fp8", NULL, NULL);
    p.fp8_scaling = FP8_SCALE_GROUP; /* not a weight scaling */
    ck_assert_int_eq(dllm_tf_rollout_sync(m, &p, NULL, &err), DLLM_EXIT_INPUT);
    dllm_tf_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("precision");
    TCase *c = tcase_create("core");
    tcase_set_timeout(c, 300);
    tcase_add_test(c, test_trainer_rollout_bit_identical);
    tcase_add_test(c, test_rollout_keeps_trainer_activations);
    tcase_add_test(c, test_fp8_linear_matches_op);
    tcase_add_test(c, test_fp8_logits_close_to_fp32);
    tcase_add_test(c, test_bf16_copy_representable);
    tcase_add_test(c, test_sync_after_weight_change);
    tcase_add_test(c, test_sync_merges_lora);
    tcase_add_test(c, test_trainer_bf16);
    tcase_add_test(c, test_trainer_bf16_lora);
    tcase_add_test(c, test_parse);
    suite_add_tcase(s, c);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
