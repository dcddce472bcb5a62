/* test_precision.c: the precision machinery of the transformer core
 * (dllm/precision.h): the rollout copy (trainer / bf16 / FP8 W8A8 fast and
 * exact / NVFP4 W4A4) and the bf16 trainer, table-driven over the architectures (LLaDA; Qwen3 with an
 * untied and a tied head), each at sizes whose 128-blocks have ragged edges.
 *
 *  - rollout "trainer" is bit-identical to dllm_tf_forward (fp32 and bf16
 *    trainers, with LoRA), and a rollout forward leaves the trainer's kept
 *    activations intact;
 *  - FP8 (fp8-exact and the fast fp8): every layer linear of the copy equals
 *    op_fp8_linear_fwd (exact mode, resp. fast mode) on a weight merged and
 *    quantised here, independently of the model (block, channel and tensor
 *    scaling, each with its activation granularity, both formats), bit for
 *    bit without LoRA and up to a flipped code with it; the fast one is within
 *    the fp32 accumulation bound of the exact one; both are close to, but not,
 *    the fp32 product; the logits differ from fp32 by a small nonzero amount,
 *    more for E5M2 than E4M3 and more than the bf16 copy's; fp8-exact's are
 *    fp8's of earlier versions (the same ops, checked at the linears);
 *  - NVFP4: every layer linear equals a direct computation from the
 *    dequantised values (weights quantised here, activations by
 *    nvfp4_quant_dequant), within the fp32 accumulation bound; its logits are
 *    further from fp32 than FP8 E4M3's;
 *  - INT8 (channel and block): every layer linear of the copy equals
 *    op_int8_linear_fwd on a weight merged and quantised here, bit for bit without
 *    LoRA, and is within the fp32 rounding bound of the reference product
 *    (op_int8_linear_ref); its logits differ from fp32 by a small nonzero amount;
 *  - fast vs exact: the fast bf16 and fp8 copies' logits are within a stated
 *    tolerance of the exact simulations' (bf16: DLLM_BF16_GEMM=fp32, which is
 *    bit for bit the exact one; fp8: fp8-exact);
 *  - bf16: the copy's weights (read back through the linear on unit vectors)
 *    are the bf16 roundings of the merged weights;
 *  - the bf16 trainer without LoRA computes the bf16 rollout's logits (bit for
 *    bit on the exact bf16 path, within tolerance on the fast one);
 *  - sync: a weight or LoRA change reaches the copy only at the next sync;
 *    LoRA is merged (FP8 logits of a LoRA model equal those of its merged
 *    checkpoint);
 *  - bf16 trainer: differs from fp32, its straight-through gradient is close
 *    to fp32's and matches finite differences of the bf16 forward along
 *    random directions (also with LoRA); back at fp32 the gradients are the
 *    fp32 ones bit for bit;
 *  - parsing of precision names.
 * What only Qwen3 has (KV-cache decoding at rollout precision, the AR policy
 * at FP8) is in test_qwen3_precision.c. The file runs past 900 lines because
 * every precision's checks share its model, batch and reference helpers. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dllm/transformer.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

/* The architectures, at sizes chosen so that 128-blocks have ragged edges
 * (LLaDA C = 160, H = 288; Qwen3 C = 144, H = 272). */
typedef struct {
    const char *name;
    dllm_arch arch;
    bool tied;
    bool heads5; /* 5 heads of 32 (C = 160, H = 288), 2 layers, vocabulary 200 */
} arch_case;
static const arch_case cases[] = {
    {"llada", DLLM_ARCH_LLADA, false, true},
    {"qwen3-untied", DLLM_ARCH_QWEN3, false, false},
    {"qwen3-tied", DLLM_ARCH_QWEN3, true, false},
};
enum { NCASE = sizeof cases / sizeof cases[0] };

static dllm_model_config test_config(int k)
{
    dllm_model_config c;
    dllm_err err = {0};
    ck_assert_int_eq(dllm_config_preset(&c, cases[k].arch, "tiny", &err), 0);
    if (cases[k].heads5) {
        c.d_model = 160;
        c.n_heads = 5;
        c.n_kv_heads = 5;
        c.head_dim = 32;
        c.mlp_hidden = 288;
        c.vocab_size = c.embedding_size = 200;
        c.n_layers = 2;
    } else {
        c.d_model = 144;
        c.mlp_hidden = 272;
        c.weight_tying = cases[k].tied;
    }
    return c;
}

static void fill_normal(float *x, size_t n, double std, uint64_t seed)
{
    dllm_rng r = dllm_rng_make(seed, DLLM_RNG_INIT, 77, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(std * dllm_rng_normal(&r));
}

/* A model of case k; with LoRA on every linear and nonzero B (so merging matters). */
static dllm_tf *make_model(int k, bool lora)
{
    dllm_model_config c = test_config(k);
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
        b.keymask[i] = !(i >= T && i < T + 3); /* row 1: three (left) padding keys */
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
    const dllm_arch_desc *ad = dllm_tf_arch(m);
    char mod[96], nm[160];
    int np0 = snprintf(mod, sizeof mod, ad->layer_fmt, l);
    snprintf(mod + np0, sizeof mod - (size_t)np0, "%s", ad->path[j]);
    snprintf(nm, sizeof nm, "%s.weight", mod);
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
        snprintf(nm, sizeof nm, "base_model.model.%s.lora_A.weight", mod);
        const float *A = find_param(ls, nl, nm)->data;
        snprintf(nm, sizeof nm, "base_model.model.%s.lora_B.weight", mod);
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



/* ---- rollout "trainer" --------------------------------------------------------------- */

START_TEST(test_trainer_rollout_bit_identical)
{
    for (int bf = 0; bf < 2; bf++) {
        dllm_tf *m = make_model(_i, true);
        batch b = make_batch(dllm_tf_config(m)->embedding_size);
        size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
        if (bf)
            do_sync(m, prec("bf16", "trainer", NULL, NULL));
        else { /* never synced: the defaults are fp32 + rollout trainer */
            dllm_precision p = dllm_tf_get_precision(m);
            ck_assert(!p.trainer_bf16 && p.rollout == DLLM_ROLLOUT_TRAINER);
        }
        float *a = logits_of(m, &b, false), *r = logits_of(m, &b, true);
        ck_assert_msg(memcmp(a, r, n * sizeof(float)) == 0, "%s, trainer %s: rollout differs",
                      cases[_i].name, bf ? "bf16" : "fp32");
        free(a);
        free(r);
        dllm_tf_free(m);
    }
}
END_TEST

/* A rollout forward between a training forward and its backward changes nothing. */
START_TEST(test_rollout_keeps_trainer_activations)
{
    dllm_tf *m = make_model(_i, true);
    do_sync(m, prec("fp32", "fp8", NULL, NULL));
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nt;
    float *dl = dllm_malloc(n * sizeof(float));
    fill_normal(dl, n, 1.0, 9);
    dllm_optim_trainable(dllm_tf_optim(m), &nt);
    float *g1 = dllm_malloc(nt * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        dllm_optim_zero_grad(dllm_tf_optim(m));
        float *lg = logits_of(m, &b, false);
        if (pass) {
            float *r = logits_of(m, &b, true);
            free(r);
        }
        dllm_tf_backward(m, dl);
        if (!pass)
            memcpy(g1, dllm_optim_grads(dllm_tf_optim(m)), nt * sizeof(float));
        else
            ck_assert(memcmp(g1, dllm_optim_grads(dllm_tf_optim(m)), nt * sizeof(float)) == 0);
        free(lg);
    }
    free(g1);
    free(dl);
    dllm_tf_free(m);
}
END_TEST

/* ---- FP8 ------------------------------------------------------------------------------- */

/* Every layer linear of the copy against op_fp8_linear_fwd (the copy's mode)
 * on the weight merged and quantised here; without LoRA also against the fp32
 * product, and the fast mode against the exact one. */
START_TEST(test_fp8_linears)
{
    static const char *const scal[] = {"block", "channel", "tensor"};
    static const fp8_scaling acts[] = {FP8_SCALE_GROUP, FP8_SCALE_CHANNEL, FP8_SCALE_TENSOR};
    static const char *const fmt[] = {"e4m3", "e5m2"};
    static const char *const kinds[] = {"fp8-exact", "fp8"};
    for (int lora = 0; lora < 2; lora++) {
        dllm_tf *m = make_model(_i, lora);
        const dllm_arch_desc *ad = dllm_tf_arch(m);
        for (int ki = 0; ki < 2; ki++)
            for (int si = 0; si < 3; si++)
                for (int fi = 0; fi < 2; fi++) {
                    dllm_precision p = prec(NULL, kinds[ki], fmt[fi], scal[si]);
                    do_sync(m, p);
                    for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
                        for (int j = 0; j < DLLM_NLIN; j++) {
                            int o, in, N = 5;
                            const char *name = ad->lora_name[j];
                            float *w = merged(m, l, j, &o, &in);
                            size_t no = (size_t)N * o;
                            float *x = dllm_malloc((size_t)N * in * sizeof(float));
                            fill_normal(x, (size_t)N * in, 1.0, 100 + (uint64_t)(l * 7 + j));
                            x[3] = 40.0f; /* an outlier: group scales differ from the tensor's */
                            float *got = dllm_malloc(no * sizeof(float));
                            float *want = dllm_malloc(no * sizeof(float));
                            ck_assert_int_eq(dllm_tf_rollout_linear(m, l, name, x, N, got), 0);
                            fp8_matrix q = {0};
                            dllm_err err = {0};
                            ck_assert_int_eq(fp8_quantise_weight(&q, w, o, in, p.fp8_format,
                                                                 p.fp8_scaling, false, &err), 0);
                            q.act_scaling = acts[si];
                            q.fast = ki == 1;
                            op_fp8_linear_fwd(want, x, &q, N, in, o);
                            if (!lora) { /* the same weight bits: the same product */
                                ck_assert_msg(memcmp(got, want, no * sizeof(float)) == 0,
                                              "%s %s %s %s layer %d %s: the copy's linear is not "
                                              "the FP8 GEMM", kinds[ki], cases[_i].name, scal[si],
                                              fmt[fi], l, name);
                                if (q.fast) { /* within fp32 rounding of the exact mode */
                                    float *ex = dllm_malloc(no * sizeof(float));
                                    float *xd = dllm_malloc((size_t)N * in * sizeof(float));
                                    q.fast = false;
                                    op_fp8_linear_fwd(ex, x, &q, N, in, o);
                                    fp8_quant_dequant(xd, x, N, in, p.fp8_format, acts[si], false);
                                    fp8_matrix_cache_dequant(&q);
                                    for (size_t e = 0; e < no; e++) {
                                        const float *a = xd + (e / (size_t)o) * (size_t)in;
                                        const float *wr = q.deq + (e % (size_t)o) * (size_t)in;
                                        double sa = 0;
                                        for (int c = 0; c < in; c++)
                                            sa += fabs((double)a[c] * wr[c]);
                                        ck_assert_msg(fabs((double)got[e] - ex[e]) <=
                                                          (2.0 * in + 8) * 0x1p-24 * sa + 1e-37,
                                                      "fast fp8 %s %s layer %d %s [%zu]: %.9g vs "
                                                      "exact %.9g", cases[_i].name, scal[si], l,
                                                      name, e, (double)got[e], (double)ex[e]);
                                    }
                                    free(ex);
                                    free(xd);
                                }
                                /* and close to, but not, the fp32 product */
                                op_linear_fwd(want, x, w, N, in, o);
                                double e = rel_rms(got, want, no);
                                ck_assert_msg(e > 1e-3 && e < (fi ? 0.15 : 0.08),
                                              "%s %s layer %d %s: relative error %g",
                                              cases[_i].name, scal[si], l, name, e);
                            } else { /* the merge's summation order may flip a code */
                                double rms, d = max_diff(got, want, no, &rms);
                                double mx = 0;
                                for (size_t e = 0; e < no; e++)
                                    mx = fmax(mx, fabs((double)want[e]));
                                ck_assert_msg(d <= 0.02 * mx, "%s %s lora layer %d %s: %g of %g",
                                              cases[_i].name, scal[si], l, name, d, mx);
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
        ck_assert_int_eq(dllm_tf_rollout_linear(m, dllm_tf_config(m)->n_layers, "q_proj", &dummy,
                                                1, &out), DLLM_EXIT_INPUT);
        dllm_tf_free(m);
    }
}
END_TEST

/* ---- NVFP4 ----------------------------------------------------------------------------- */

/* Every layer linear of the nvfp4 copy against out = Q(x) Q(W)^T computed here
 * in double from the dequantised values (Q(W): the merged weight quantised
 * here; Q(x): nvfp4_quant_dequant): within the fp32 accumulation bound
 * (K + 4) 2^-24 sum_k |a_k w_k| without LoRA (the same weight bits); with
 * LoRA the merge's summation order may move an element across a code
 * boundary (a step of up to a third of its block's maximum). */
START_TEST(test_nvfp4_linears)
{
    for (int lora = 0; lora < 2; lora++) {
        dllm_tf *m = make_model(_i, lora);
        const dllm_arch_desc *ad = dllm_tf_arch(m);
        do_sync(m, prec(NULL, "nvfp4", NULL, NULL));
        for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
            for (int j = 0; j < DLLM_NLIN; j++) {
                int o, in, N = 5;
                float *w = merged(m, l, j, &o, &in);
                size_t no = (size_t)N * o;
                float *x = dllm_malloc((size_t)N * in * sizeof(float));
                fill_normal(x, (size_t)N * in, 1.0, 200 + (uint64_t)(l * 7 + j));
                x[5] = 30.0f; /* an outlier: its block's scale differs from the others */
                float *got = dllm_malloc(no * sizeof(float));
                ck_assert_int_eq(dllm_tf_rollout_linear(m, l, ad->lora_name[j], x, N, got), 0);
                nvfp4_matrix q = {0};
                dllm_err err = {0};
                ck_assert_int_eq(nvfp4_quantise(&q, w, o, in, &err), 0);
                float *wd = dllm_malloc((size_t)o * in * sizeof(float));
                float *xd = dllm_malloc((size_t)N * in * sizeof(float));
                nvfp4_dequantise(wd, &q);
                nvfp4_quant_dequant(xd, x, N, in);
                double worst = 0, mx = 0, e2 = 0, r2 = 0, f2 = 0;
                for (size_t e = 0; e < no; e++) {
                    const float *a = xd + (e / (size_t)o) * (size_t)in;
                    const float *wr = wd + (e % (size_t)o) * (size_t)in;
                    const float *xr = x + (e / (size_t)o) * (size_t)in;
                    const float *w32 = w + (e % (size_t)o) * (size_t)in;
                    double sum = 0, sa = 0, f = 0;
                    for (int c = 0; c < in; c++) {
                        sum += (double)a[c] * wr[c];
                        sa += fabs((double)a[c] * wr[c]);
                        f += (double)xr[c] * w32[c];
                    }
                    worst = fmax(worst, fabs(got[e] - sum) / ((in + 4) * 0x1p-24 * sa + 1e-37));
                    mx = fmax(mx, fabs(sum));
                    e2 += (got[e] - sum) * (got[e] - sum);
                    r2 += sum * sum;
                    f2 += (sum - f) * (sum - f);
                }
                if (!lora)
                    ck_assert_msg(worst <= 1.0, "%s layer %d %s: %g x the accumulation bound",
                                  cases[_i].name, l, ad->lora_name[j], worst);
                else
                    ck_assert_msg(sqrt(e2 / r2) < 0.05, "%s lora layer %d %s: relative rms %g",
                                  cases[_i].name, l, ad->lora_name[j], sqrt(e2 / r2));
                /* 4-bit values: far from the fp32 product, but not unrelated */
                double ef = sqrt(f2 / r2);
                ck_assert_msg(ef > 0.02 && ef < 0.5, "%s layer %d %s: nvfp4 vs fp32 %g",
                              cases[_i].name, l, ad->lora_name[j], ef);
                nvfp4_matrix_free(&q);
                free(wd);
                free(xd);
                free(w);
                free(x);
                free(got);
            }
        dllm_tf_free(m);
    }
}
END_TEST

/* rollout.nvfp4.scaling: every layer linear of the copy is op_nvfp4_linear_fwd on the
 * merged weight quantised here at that scaling, bit for bit; block16 set explicitly
 * is the default copy bit for bit; changing the scaling rebuilds the copy (its logits
 * change); the tensor-scaled copy is farther from fp32 than the block16 one. */
START_TEST(test_nvfp4_scalings)
{
    dllm_tf *m = make_model(_i, false);
    const dllm_arch_desc *ad = dllm_tf_arch(m);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t nl = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = logits_of(m, &b, false);
    do_sync(m, prec(NULL, "nvfp4", NULL, NULL));
    float *dflt = logits_of(m, &b, true);
    double d[NVFP4_N_SCALING];
    for (int s = NVFP4_N_SCALING - 1; s >= 0; s--) { /* tensor first: block16 after a change */
        dllm_precision p = prec(NULL, "nvfp4", NULL, NULL);
        p.nvfp4_scaling = (nvfp4_scaling)s;
        do_sync(m, p);
        for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
            for (int j = 0; j < DLLM_NLIN; j++) {
                int o, in, N = 4;
                float *w = merged(m, l, j, &o, &in);
                size_t no = (size_t)N * o;
                float *x = dllm_malloc((size_t)N * in * sizeof(float));
                fill_normal(x, (size_t)N * in, 1.0, 400 + (uint64_t)(l * 7 + j));
                x[3] = 30.0f;
                float *got = dllm_malloc(no * sizeof(float)), *want = dllm_malloc(no * sizeof(float));
                ck_assert_int_eq(dllm_tf_rollout_linear(m, l, ad->lora_name[j], x, N, got), 0);
                nvfp4_matrix q = {0};
                dllm_err err = {0};
                ck_assert_int_eq(nvfp4_quantise_scaled(&q, w, o, in, (nvfp4_scaling)s, &err), 0);
                op_nvfp4_linear_fwd(want, x, &q, N, in, o);
                ck_assert_msg(memcmp(got, want, no * sizeof(float)) == 0, "%s %s layer %d %s",
                              cases[_i].name, nvfp4_scaling_name((nvfp4_scaling)s), l,
                              ad->lora_name[j]);
                nvfp4_matrix_free(&q);
                free(w);
                free(x);
                free(got);
                free(want);
            }
        float *r = logits_of(m, &b, true);
        d[s] = rel_rms(r, ref, nl);
        if (s == NVFP4_SCALE_BLOCK16)
            ck_assert_msg(memcmp(r, dflt, nl * sizeof(float)) == 0, "%s: block16 is not the default",
                          cases[_i].name);
        else
            ck_assert_msg(memcmp(r, dflt, nl * sizeof(float)) != 0, "%s: %s copy not rebuilt",
                          cases[_i].name, nvfp4_scaling_name((nvfp4_scaling)s));
        free(r);
    }
    printf("%s: rms(logits - fp32) / rms(fp32): nvfp4 block16 %.3g, block32 %.3g, channel %.3g, "
           "tensor %.3g\n", cases[_i].name, d[0], d[1], d[2], d[3]);
    ck_assert(d[0] > 0 && d[0] < d[3]);
    free(dflt);
    free(ref);
    dllm_tf_free(m);
}
END_TEST

/* Every layer linear of the int8 copy against op_int8_linear_fwd on the merged weight
 * quantised here (bit for bit: the integer sums are exact and the scaling is the same
 * fp32 arithmetic), and against the dequantised reference within the fp32 rounding
 * bound (2K + 8) 2^-24 sum_k |a_k w_k|; channel and block scaling. The logits differ
 * from fp32 by a small nonzero amount. */
START_TEST(test_int8_linears)
{
    dllm_tf *m = make_model(_i, false);
    const dllm_arch_desc *ad = dllm_tf_arch(m);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t nl = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = logits_of(m, &b, false);
    for (int s = 0; s < 2; s++) {
        dllm_precision p = prec(NULL, "int8", NULL, NULL);
        p.int8_scaling = (int8_scaling)s;
        do_sync(m, p);
        for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
            for (int j = 0; j < DLLM_NLIN; j++) {
                int o, in, N = 5;
                float *w = merged(m, l, j, &o, &in);
                size_t no = (size_t)N * o;
                float *x = dllm_malloc((size_t)N * in * sizeof(float));
                fill_normal(x, (size_t)N * in, 1.0, 300 + (uint64_t)(l * 7 + j));
                x[5] = 30.0f; /* an outlier: its token's (group's) scale differs */
                float *got = dllm_malloc(no * sizeof(float));
                float *want = dllm_malloc(no * sizeof(float));
                float *sim = dllm_malloc(no * sizeof(float));
                ck_assert_int_eq(dllm_tf_rollout_linear(m, l, ad->lora_name[j], x, N, got), 0);
                int8_matrix q = {0};
                dllm_err err = {0};
                ck_assert_int_eq(int8_quantise_weight(&q, w, o, in, (int8_scaling)s, &err), 0);
                op_int8_linear_fwd(want, x, &q, N, in, o);
                op_int8_linear_ref(sim, x, &q, N, in, o);
                for (size_t e = 0; e < no; e++) {
                    ck_assert_msg(got[e] == want[e], "%s %s layer %d %s [%zu]: %.9g vs %.9g",
                                  cases[_i].name, int8_scaling_name((int8_scaling)s), l,
                                  ad->lora_name[j], e, got[e], want[e]);
                    const float *xr = x + (e / (size_t)o) * (size_t)in;
                    const float *wr = w + (e % (size_t)o) * (size_t)in;
                    double sa = 0;
                    for (int c = 0; c < in; c++)
                        sa += fabs((double)xr[c] * wr[c]);
                    /* a nonzero code dequantises to at most twice its value (|x| >= s/2):
                     * 4 sa bounds the dequantised products' magnitudes */
                    ck_assert(fabs((double)got[e] - sim[e]) <= (2.0 * in + 8) * 0x1p-24 * 4 * sa);
                }
                int8_matrix_free(&q);
                free(w);
                free(x);
                free(got);
                free(want);
                free(sim);
            }
        float *r = logits_of(m, &b, true);
        double d = rel_rms(r, ref, nl);
        printf("%s: rms(logits - fp32) / rms(fp32): int8 %s %.3g\n", cases[_i].name,
               int8_scaling_name((int8_scaling)s), d);
        ck_assert(d > 0 && d < 0.15);
        free(r);
    }
    free(ref);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_logits_close_to_fp32)
{
    dllm_tf *m = make_model(_i, true);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = logits_of(m, &b, false);
    enum { NK = 5 };
    double d[NK];
    const char *kinds[NK] = {"bf16", "fp8", "fp8", "fp8-exact", "nvfp4"};
    const char *fmts[NK] = {NULL, "e4m3", "e5m2", "e4m3", NULL};
    for (int k = 0; k < NK; k++) {
        do_sync(m, prec(NULL, kinds[k], fmts[k], NULL));
        float *r = logits_of(m, &b, true);
        d[k] = rel_rms(r, ref, n);
        free(r);
        /* the trainer logits are untouched by the rollout copy */
        float *t = logits_of(m, &b, false);
        ck_assert(memcmp(t, ref, n * sizeof(float)) == 0);
        free(t);
    }
    printf("%s: rms(logits - fp32) / rms(fp32): bf16 %.3g, fp8 e4m3 %.3g, e5m2 %.3g, "
           "fp8-exact e4m3 %.3g, nvfp4 %.3g\n", cases[_i].name, d[0], d[1], d[2], d[3], d[4]);
    for (int k = 0; k < NK; k++)
        ck_assert(d[k] > 0);
    ck_assert(d[0] < 0.02 && d[1] < 0.15 && d[2] < 0.3 && d[3] < 0.15 && d[4] < 0.6); /* small */
    ck_assert(d[0] < d[1] && d[1] < d[2]);           /* bf16 < e4m3 < e5m2 */
    ck_assert(d[3] < d[4] && d[1] < d[4]);           /* e4m3 < nvfp4 */
    free(ref);
    dllm_tf_free(m);
}
END_TEST

/* ---- fast vs exact --------------------------------------------------------------------- */

/* Rollout logits of the fast bf16 and fp8 copies against the exact
 * simulations, on a LoRA model. The fast products differ from the exact ones
 * by fp32 rounding only (~1e-7 relative); where such a difference carries an
 * activation across a bf16 or FP8 rounding boundary, that element moves by a
 * rounding step and the logits by more. Tolerances, relative rms: bf16 at most
 * 0.33 x the exact bf16's distance from fp32 (seen: 0.07 x on LLaDA, 1e-5 x on
 * Qwen3), fp8 at most 0.02 x fp8-exact's (seen: below 5e-4 x); a mis-scaled or
 * misplaced product exceeds either many times. The fast bf16 path on a CPU without bf16 dot products is the exact
 * one: equal bit for bit there. */
START_TEST(test_fast_vs_exact)
{
    dllm_tf *m = make_model(_i, true);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *ref = logits_of(m, &b, false);
    /* bf16 */
    unsetenv("DLLM_BF16_GEMM");
    bool bf16_fast = strcmp(op_bf16_gemm_path(), "fp32") != 0;
    do_sync(m, prec(NULL, "bf16", NULL, NULL));
    float *fast = logits_of(m, &b, true);
    setenv("DLLM_BF16_GEMM", "fp32", 1);
    float *exact = logits_of(m, &b, true);
    unsetenv("DLLM_BF16_GEMM");
    double db = rel_rms(fast, exact, n), db32 = rel_rms(exact, ref, n);
    printf("%s: bf16 (%s) vs exact bf16: relative rms %.3g (exact bf16 vs fp32: %.3g)\n",
           cases[_i].name, op_bf16_gemm_path(), db, db32);
    if (!bf16_fast)
        ck_assert(memcmp(fast, exact, n * sizeof(float)) == 0);
    ck_assert_msg(db <= 0.33 * db32, "%s: fast bf16 vs exact %g (bf16 vs fp32 %g)",
                  cases[_i].name, db, db32);
    free(fast);
    free(exact);
    /* fp8 (block, both formats) */
    static const char *const fmt[] = {"e4m3", "e5m2"};
    for (int f = 0; f < 2; f++) {
        do_sync(m, prec(NULL, "fp8", fmt[f], NULL));
        fast = logits_of(m, &b, true);
        do_sync(m, prec(NULL, "fp8-exact", fmt[f], NULL));
        exact = logits_of(m, &b, true);
        double d8 = rel_rms(fast, exact, n), d832 = rel_rms(exact, ref, n);
        printf("%s: fp8 %s (%s) vs fp8-exact: relative rms %.3g (fp8-exact vs fp32: %.3g)\n",
               cases[_i].name, fmt[f], fp8_fast_path(), d8, d832);
        ck_assert_msg(d8 <= 0.02 * d832, "%s: fast fp8 %s vs exact %g (exact vs fp32 %g)",
                      cases[_i].name, fmt[f], d8, d832);
        free(fast);
        free(exact);
    }
    free(ref);
    dllm_tf_free(m);
}
END_TEST

/* ---- bf16 copy ------------------------------------------------------------------------- */

static bool is_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0xffffu) == 0;
}

/* Every layer linear's weight, read back as I W^T (unit vectors), is the bf16
 * rounding of the merged weight (up to one bf16 step where the fp32 merge
 * order differs); LoRA visibly changed it. */
START_TEST(test_bf16_copy_weights)
{
    dllm_tf *m = make_model(_i, true);
    do_sync(m, prec(NULL, "bf16", NULL, NULL));
    const dllm_param *ps;
    int np = dllm_tf_params(m, &ps);
    for (int l = 0; l < dllm_tf_config(m)->n_layers; l++)
        for (int j = 0; j < DLLM_NLIN; j++) {
            int o, in;
            const char *name = dllm_tf_arch(m)->lora_name[j];
            float *w = merged(m, l, j, &o, &in);
            char wn[160];
            int k = snprintf(wn, sizeof wn, dllm_tf_arch(m)->layer_fmt, l);
            snprintf(wn + k, sizeof wn - (size_t)k, "%s.weight", dllm_tf_arch(m)->path[j]);
            const float *base = find_param(ps, np, wn)->data;
            float *eye = dllm_calloc((size_t)in * in, sizeof(float));
            for (int i = 0; i < in; i++)
                eye[(size_t)i * in + i] = 1.0f;
            float *cols = dllm_malloc((size_t)in * o * sizeof(float)); // (in, o) = W^T
            ck_assert_int_eq(dllm_tf_rollout_linear(m, l, name, eye, in, cols), 0);
            int off = 0, changed = 0;
            for (int a = 0; a < o; a++)
                for (int c = 0; c < in; c++) {
                    float got = cols[(size_t)c * o + a], want = w[(size_t)a * in + c];
                    ck_assert_msg(is_bf16(got), "%s layer %d %s [%d,%d] %a not bf16",
                                  cases[_i].name, l, name, a, c, (double)got);
                    float r = want;
                    op_round_bf16(&r, 1);
                    if (got != r) { /* the fp32 merge order: at most one bf16 step (plus
                                     * the merge's own rounding where it cancels) */
                        off++;
                        ck_assert_msg(fabsf(got - r) <= fabsf(r) * 0x1p-7f +
                                                            1e-6f * fabsf(base[(size_t)a * in + c]) +
                                                            1e-9f,
                                      "%s layer %d %s [%d,%d]: %.9g vs %.9g", cases[_i].name, l,
                                      name, a, c, (double)got, (double)r);
                    }
                    changed += fabs((double)want - base[(size_t)a * in + c]) > fabs(want) / 128;
                }
            ck_assert_int_le(off, o * in / 100);
            ck_assert_msg(changed > o * in / 4, "LoRA hardly changed the merged weight (%d)",
                          changed);
            free(w);
            free(eye);
            free(cols);
        }
    dllm_tf_free(m);
}
END_TEST

/* Without LoRA the bf16 trainer reads the same weights with the same rounding
 * points as the bf16 rollout copy: the same logits, bit for bit on the exact
 * bf16 path (DLLM_BF16_GEMM=fp32), and within the fast-vs-exact tolerance on
 * the fast one (the trainer's products stay fp32 GEMMs over bf16 values). */
START_TEST(test_bf16_trainer_is_bf16_rollout)
{
    dllm_tf *m = make_model(_i, false);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size;
    float *l32 = logits_of(m, &b, false);
    do_sync(m, prec("fp32", "bf16", NULL, NULL));
    setenv("DLLM_BF16_GEMM", "fp32", 1);
    float *lb = logits_of(m, &b, true);
    unsetenv("DLLM_BF16_GEMM");
    float *lfast = logits_of(m, &b, true);
    do_sync(m, prec("bf16", "trainer", NULL, NULL));
    float *ltb = logits_of(m, &b, false), *lrb = logits_of(m, &b, true);
    ck_assert(memcmp(ltb, lb, n * sizeof(float)) == 0);
    ck_assert(memcmp(lrb, lb, n * sizeof(float)) == 0);
    ck_assert(rel_rms(lfast, ltb, n) <= 0.33 * rel_rms(ltb, l32, n));
    free(l32);
    free(lfast);
    free(lb);
    free(ltb);
    free(lrb);
    dllm_tf_free(m);
}
END_TEST

/* ---- sync ------------------------------------------------------------------------------ */

START_TEST(test_sync_after_weight_change)
{
    dllm_tf *m = make_model(_i, false);
    dllm_precision p = prec(NULL, "fp8", NULL, NULL);
    do_sync(m, p);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nt;
    float *l0 = logits_of(m, &b, true);
    float *w = tu_host_trainable(m, &nt);
    for (size_t i = 0; i < nt; i++)
        w[i] *= 1.05f;
    float *l1 = logits_of(m, &b, true);
    ck_assert_msg(memcmp(l0, l1, n * sizeof(float)) == 0, "the copy changed before a sync");
    do_sync(m, p);
    float *l2 = logits_of(m, &b, true);
    ck_assert_msg(memcmp(l0, l2, n * sizeof(float)) != 0, "sync did not rebuild the copy");
    /* LoRA enabled with B = 0 changes nothing after a sync; a B change only at the next */
    dllm_tf_lora_enable(m, 4, 8.0f, LORA_V_PROJ | LORA_FF_OUT, 12);
    do_sync(m, p);
    float *l3 = logits_of(m, &b, true);
    ck_assert(memcmp(l3, l2, n * sizeof(float)) == 0);
    const dllm_param *ls;
    int nl = dllm_tf_lora_params(m, &ls);
    for (int i = 0; i < nl; i++)
        if (strstr(ls[i].name, "lora_B"))
            fill_normal(ls[i].data, ls[i].numel, 0.05, 13 + (uint64_t)i);
    float *l4 = logits_of(m, &b, true);
    ck_assert(memcmp(l4, l3, n * sizeof(float)) == 0); /* the copy has LoRA merged: stale */
    do_sync(m, p);
    float *l5 = logits_of(m, &b, true);
    ck_assert(max_diff(l5, l4, n, NULL) > 1e-4);
    free(l0);
    free(l1);
    free(l2);
    free(l3);
    free(l4);
    free(l5);
    dllm_tf_free(m);
}
END_TEST

START_TEST(test_sync_merges_lora)
{
    dllm_tf *m = make_model(_i, true);
    dllm_precision p = prec(NULL, "fp8", NULL, NULL);
    batch b = make_batch(dllm_tf_config(m)->embedding_size);
    size_t n = (size_t)B * T * dllm_tf_config(m)->embedding_size, nl;
    /* B = 0: the copy equals the base model's */
    float *lw = tu_host_trainable(m, &nl);
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
    float *w = tu_host_trainable(m, &nt);
    float *w0 = dllm_malloc(nt * sizeof(float)), *d = dllm_malloc(nt * sizeof(float));
    float *g = dllm_malloc(nt * sizeof(float));
    memcpy(w0, w, nt * sizeof(float));
    do_sync(m, p);
    dllm_optim_zero_grad(dllm_tf_optim(m));
    float *lg = logits_of(m, &b, false);
    dllm_tf_backward(m, c);
    memcpy(g, dllm_optim_grads(dllm_tf_optim(m)), nt * sizeof(float));
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
    dllm_tf *m = make_model(_i, false);
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
    dllm_optim_trainable(dllm_tf_optim(m), &nt);
    float *c = dllm_malloc(n * sizeof(float)), *g32 = dllm_malloc(nt * sizeof(float));
    fill_normal(c, n, 1.0, 21);
    for (int bf = 0; bf < 2; bf++) {
        do_sync(m, prec(bf ? "bf16" : "fp32", NULL, NULL, NULL));
        dllm_optim_zero_grad(dllm_tf_optim(m));
        float *lg = logits_of(m, &b, false);
        dllm_tf_backward(m, c);
        if (!bf)
            memcpy(g32, dllm_optim_grads(dllm_tf_optim(m)), nt * sizeof(float));
        free(lg);
    }
    double eg = rel_rms(dllm_optim_grads(dllm_tf_optim(m)), g32, nt);
    printf("%s: bf16 straight-through gradient vs fp32 gradient: relative rms %.3g\n",
           cases[_i].name, eg);
    ck_assert(eg > 0 && eg < 0.05);
    /* back to fp32: the master weights were never rounded, the gradients are fp32's */
    do_sync(m, prec("fp32", NULL, NULL, NULL));
    dllm_optim_zero_grad(dllm_tf_optim(m));
    float *lg32 = logits_of(m, &b, false);
    dllm_tf_backward(m, c);
    ck_assert(memcmp(g32, dllm_optim_grads(dllm_tf_optim(m)), nt * sizeof(float)) == 0);
    free(lg32);
    free(c);
    free(g32);

    double e32 = fd_error(m, prec("fp32", NULL, NULL, NULL), 3e-5, 3);
    double e16 = fd_error(m, prec("bf16", NULL, NULL, NULL), 3e-4, 3);
    printf("%s: directional derivative vs finite differences: fp32 %.2e, bf16 "
           "straight-through %.2e\n", cases[_i].name, e32, e16);
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
    dllm_tf *m = make_model(_i, true);
    double e16 = fd_error(m, prec("bf16", "fp8", NULL, NULL), 3e-3, 3);
    printf("%s: LoRA, bf16 trainer: directional derivative error %.2e\n", cases[_i].name, e16);
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
    static const char *const kinds[] = {"trainer", "bf16", "fp8", "fp8-exact", "nvfp4", "int8"};
    for (int k = 0; k < 6; k++) {
        ck_assert_int_eq(dllm_precision_parse(&p, NULL, kinds[k], NULL, NULL, false, &err), 0);
        ck_assert_int_eq(p.rollout, k);
        ck_assert_str_eq(dllm_rollout_name(p.rollout), kinds[k]);
        ck_assert(dllm_rollout_is_fp8(p.rollout) == (k == 2 || k == 3));
    }
    struct {
        const char *t, *r, *f, *s, *word;
    } bad[] = {{"fp16", NULL, NULL, NULL, "fp16"},  {NULL, "int4", NULL, NULL, "int4"},
               {NULL, "fp8", "e3m4", NULL, "e3m4"}, {NULL, "fp8", NULL, "group", "group"},
               {NULL, "fp8", NULL, "rows", "rows"},
               {NULL, "fp8exact", NULL, NULL, "nvfp4 or int8"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (dllm_err){0};
        ck_assert_int_eq(dllm_precision_parse(&p, bad[i].t, bad[i].r, bad[i].f, bad[i].s, false,
                                               &err), DLLM_EXIT_INPUT);
        ck_assert_msg(strstr(err.msg, bad[i].word), "message '%s' does not name '%s'", err.msg,
                      bad[i].word);
    }
    err = (dllm_err){0};
    ck_assert_int_eq(dllm_precision_parse_int8(&p, "block", &err), 0);
    ck_assert_int_eq(p.int8_scaling, INT8_SCALE_BLOCK);
    ck_assert_int_eq(dllm_precision_parse_int8(&p, "tensor", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "rollout.int8.scaling") && strstr(err.msg, "channel or block"),
                  "%s", err.msg);
    err = (dllm_err){0};
    ck_assert_int_eq(p.nvfp4_scaling, NVFP4_SCALE_BLOCK16); /* the default */
    ck_assert_int_eq(dllm_precision_parse_nvfp4(&p, NULL, &err), 0);
    ck_assert_int_eq(p.nvfp4_scaling, NVFP4_SCALE_BLOCK16);
    ck_assert_int_eq(dllm_precision_parse_nvfp4(&p, "channel", &err), 0);
    ck_assert_int_eq(p.nvfp4_scaling, NVFP4_SCALE_CHANNEL);
    ck_assert_int_eq(dllm_precision_parse_nvfp4(&p, "block", &err), DLLM_EXIT_INPUT);
    ck_assert_msg(strstr(err.msg, "rollout.nvfp4.scaling") &&
                      strstr(err.msg, "block16, block32, channel or tensor"), "%s", err.msg);
    dllm_tf *m = make_model(0, false);
    p = prec(NULL, "fp8", NULL, NULL);
    p.fp8_scaling = FP8_SCALE_GROUP; /* not a weight scaling */
    ck_assert_int_eq(dllm_tf_rollout_sync(m, &p, NULL, &err), DLLM_EXIT_INPUT);
    dllm_tf_free(m);
}
END_TEST

Suite *tu_suite(tu_ctx *ctx)
{
    (void)ctx;
    Suite *s = suite_create("precision");
    TCase *c = tcase_create("core");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_trainer_rollout_bit_identical, 0, NCASE);
    tcase_add_loop_test(c, test_rollout_keeps_trainer_activations, 0, NCASE);
    tcase_add_loop_test(c, test_fp8_linears, 0, NCASE);
    tcase_add_loop_test(c, test_nvfp4_linears, 0, NCASE);
    tcase_add_loop_test(c, test_int8_linears, 0, NCASE);
    tcase_add_loop_test(c, test_nvfp4_scalings, 0, NCASE);
    tcase_add_loop_test(c, test_logits_close_to_fp32, 0, NCASE);
    tcase_add_loop_test(c, test_fast_vs_exact, 0, NCASE);
    tcase_add_loop_test(c, test_bf16_copy_weights, 0, NCASE);
    tcase_add_loop_test(c, test_bf16_trainer_is_bf16_rollout, 0, NCASE);
    tcase_add_loop_test(c, test_sync_after_weight_change, 0, NCASE);
    tcase_add_loop_test(c, test_sync_merges_lora, 0, NCASE);
    tcase_add_loop_test(c, test_trainer_bf16, 0, NCASE);
    tcase_add_loop_test(c, test_trainer_bf16_lora, 0, NCASE);
    tcase_add_test(c, test_parse);
    suite_add_tcase(s, c);
    return s;
}
