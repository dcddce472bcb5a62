/* test_device_train.c: training on the device (dllm_tf_device_train) against the CPU
 * backend, on tiny random models of each architecture, LoRA (B random, so every path
 * carries gradient) and full fine-tuning:
 *   - the kept forward's logits within 1e-4 (max abs) of the CPU's;
 *   - one backward of the same dlogits, accumulated twice: every trainable parameter's
 *     gradient within a normalised MSE of 1e-8 of the CPU's (fp32 sums in other orders;
 *     the attention backward recomputes from the log-sum-exp instead of the CPU's kept
 *     probabilities), and the global norm within 1e-5 relative;
 *   - the norm and clipping on the device: the norm within 1e-12 of op_grad_norm of the
 *     downloaded gradients, the clipped gradients op_clip_grad's (normalised MSE 1e-12);
 *   - three AdamW steps on the device equal op_adamw on the host from the same
 *     gradients bit for bit (parameters, which come down into the host masters, and both
 *     moments), and the moments go back up unchanged.
 * Without a usable CUDA backend (the plain build) it reports SKIP (77) with the reason;
 * the emulation build's `make check` runs it. */
#include "config.h"

#include "dllm/transformer.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 11, NROWS = 7 };
static const char *const ARCHS[] = {"llada", "qwen3", "dream"};

static dllm_tf *tiny(int arch_i, bool lora)
{
    const dllm_arch_desc *a = dllm_arch_by_name(ARCHS[arch_i]);
    ck_assert_ptr_nonnull(a);
    dllm_model_config cfg;
    dllm_err err;
    ck_assert_int_eq(dllm_config_preset(&cfg, a->id, "tiny", &err), 0);
    dllm_tf *m = dllm_tf_create(&cfg, 21 + arch_i);
    if (lora) {
        dllm_tf_lora_enable(m, 4, 8.0f, LORA_ALL, 5);
        size_t n;
        float *p = dllm_tf_trainable(m, &n);
        dllm_rng r = dllm_rng_make(78, DLLM_RNG_INIT, 3, 0);
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(0.05 * dllm_rng_normal(&r));
    }
    return m;
}

static void inputs(const dllm_tf *m, int32_t *tok, uint8_t *mask, int32_t *rows)
{
    int V = dllm_tf_config(m)->vocab_size;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 37 + 5) % V;
        mask[i] = !(i / T == 1 && i % T < 3); /* row 1 left-padded by 3 */
    }
    for (int r = 0; r < NROWS; r++)
        rows[r] = (r * 5 + 2) % (B * T);
}

static double nmse(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? e / s : e;
}

/* _i: arch (0..2) x {LoRA, full} */
START_TEST(test_grad_parity)
{
    int arch_i = _i / 2;
    bool lora = _i % 2 == 0;
    dllm_backend *be = dllm_backend_cuda();
    dllm_err err;
    dllm_tf *h = tiny(arch_i, lora), *d = tiny(arch_i, lora);
    ck_assert_int_eq(dllm_tf_to_device(d, be, &err), 0);
    ck_assert_int_eq(dllm_tf_device_train(d, &err), 0);
    ck_assert(dllm_tf_device_trains(d));
    int V = dllm_tf_config(h)->embedding_size;
    int32_t tok[B * T], rows[NROWS];
    uint8_t mask[B * T];
    inputs(h, tok, mask, rows);
    float *lh = malloc(sizeof(float) * NROWS * V), *ld = malloc(sizeof(float) * NROWS * V);
    float *dl = malloc(sizeof(float) * NROWS * V);
    dllm_rng r = dllm_rng_make(79, DLLM_RNG_INIT, 4, 0);
    for (int i = 0; i < NROWS * V; i++)
        dl[i] = (float)(0.1 * dllm_rng_normal(&r));
    size_t n, nd;
    dllm_tf_trainable(h, &n);
    dllm_tf_trainable(d, &nd);
    ck_assert_uint_eq(n, nd);
    dllm_tf_zero_grad(h);
    dllm_tf_device_zero_grad(d);
    for (int rep = 0; rep < 2; rep++) { /* gradients accumulate across backward calls */
        ck_assert_int_eq(dllm_tf_forward(h, tok, mask, B, T, rows, NROWS, lh), 0);
        ck_assert_int_eq(dllm_tf_forward(d, tok, mask, B, T, rows, NROWS, ld), 0);
        double mx = 0;
        for (int i = 0; i < NROWS * V; i++)
            mx = fmax(mx, fabs((double)lh[i] - ld[i]));
        ck_assert_msg(mx <= 1e-4, "%s kept-forward logits differ by %g", ARCHS[arch_i], mx);
        dllm_tf_backward(h, dl);
        dllm_tf_backward(d, dl);
    }
    float *gh = dllm_tf_grads(h), *gd = malloc(sizeof(float) * n);
    dllm_tf_device_grads(d, gd);
    const dllm_param *pl;
    int np = lora ? dllm_tf_lora_params(h, &pl) : dllm_tf_params(h, &pl);
    float *base = dllm_tf_trainable(h, &n);
    double worst = 0;
    for (int k = 0; k < np; k++) {
        size_t off = (size_t)(pl[k].data - base);
        double e = nmse(gd + off, gh + off, pl[k].numel);
        worst = fmax(worst, e);
        ck_assert_msg(e <= 1e-8, "%s %s: gradient %s normalised MSE %g", ARCHS[arch_i],
                      lora ? "LoRA" : "full", pl[k].name, e);
    }
    double nh = op_grad_norm(gh, n), nd_ = op_grad_norm(gd, n);
    ck_assert(nh > 0);
    ck_assert_msg(fabs(nh - nd_) <= 1e-5 * nh, "norm %g vs %g", nd_, nh);
    printf("%s %s: %d tensors, worst gradient nmse %.2e, norm %.6g (cpu %.6g)\n",
           ARCHS[arch_i], lora ? "LoRA" : "full", np, worst, nd_, nh);

    /* the norm and the clip on the device */
    double norm = dllm_tf_device_clip_grad(d, 0.0);
    ck_assert_msg(fabs(norm - nd_) <= 1e-12 * nd_, "device norm %.17g vs %.17g", norm, nd_);
    float *gc = malloc(sizeof(float) * n), *gcd = malloc(sizeof(float) * n);
    memcpy(gc, gd, sizeof(float) * n);
    op_clip_grad(gc, n, nd_, 0.5 * nd_);
    ck_assert(fabs(dllm_tf_device_clip_grad(d, 0.5 * nd_) - nd_) <= 1e-12 * nd_);
    dllm_tf_device_grads(d, gcd);
    ck_assert(nmse(gcd, gc, n) <= 1e-12);

    /* AdamW: three steps from the clipped gradients, bit for bit with op_adamw */
    float *p = malloc(sizeof(float) * n), *mo = calloc(n, sizeof(float));
    float *vo = calloc(n, sizeof(float));
    memcpy(p, dllm_tf_trainable(d, &nd), sizeof(float) * n);
    for (int t = 1; t <= 3; t++) {
        op_adamw(p, gcd, mo, vo, n, t, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
        dllm_tf_device_adamw(d, t, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    }
    ck_assert(memcmp(p, dllm_tf_trainable(d, &nd), sizeof(float) * n) == 0);
    float *md = malloc(sizeof(float) * n), *vd = malloc(sizeof(float) * n);
    dllm_tf_device_moments(d, md, vd, false);
    ck_assert(memcmp(md, mo, sizeof(float) * n) == 0);
    ck_assert(memcmp(vd, vo, sizeof(float) * n) == 0);
    /* up and down again: unchanged */
    memset(md, 0, sizeof(float) * n);
    dllm_tf_device_moments(d, mo, vo, true);
    dllm_tf_device_moments(d, md, vd, false);
    ck_assert(memcmp(md, mo, sizeof(float) * n) == 0);
    free(md), free(vd), free(p), free(mo), free(vo), free(gc), free(gcd), free(gd);
    free(lh), free(ld), free(dl);
    dllm_tf_free(h);
    dllm_tf_free(d);
}
END_TEST

/* A bf16 trainer has no fp32 linears on the device: refused with an input error. */
START_TEST(test_bf16_trainer_refused)
{
    dllm_tf *d = tiny(0, true);
    dllm_err err;
    dllm_precision p = dllm_tf_get_precision(d);
    p.trainer_bf16 = true;
    p.rollout = DLLM_ROLLOUT_BF16;
    ck_assert_int_eq(dllm_tf_rollout_sync(d, &p, NULL, &err), 0);
    ck_assert_int_eq(dllm_tf_to_device(d, dllm_backend_cuda(), &err), 0);
    ck_assert_int_eq(dllm_tf_device_train(d, &err), DLLM_EXIT_INPUT);
    ck_assert_ptr_nonnull(strstr(err.msg, "fp32 trainer"));
    ck_assert(!dllm_tf_device_trains(d));
    dllm_tf_free(d);
}
END_TEST

int main(void)
{
    if (!dllm_backend_cuda()) {
        printf("SKIP: no usable CUDA backend: %s\n", dllm_backend_cuda_why());
        return 77;
    }
    Suite *s = suite_create("device_train");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_grad_parity, 0, 6);
    tcase_add_test(tc, test_bf16_trainer_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* a CUDA context does not survive a fork */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
