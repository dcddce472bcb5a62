/* test_recompute.c: activation recomputation (dllm_tf_set_recompute) changes no bit.
 *
 * Tiny models of each architecture with 5 layers (so segments of 1, 2 and 3 layers and a
 * short last segment occur), LoRA (B random) and full fine-tuning: two kept forwards and
 * backwards of the same dlogits (the gradients accumulate) with recomputation every K in
 * {1, 2, 3, 5} against a model that keeps every layer:
 *   - the logits and every trainable gradient equal bit for bit, on the CPU backend;
 *   - the same on the CUDA backend (the emulation build; training on the device), where
 *     the device's kept activations take the slots of the recomputation, and the
 *     emulated allocator's peak of device bytes (less the workspaces; 4 canvases of 64
 *     tokens) falls from none to every 2 to every 1.
 * A negative K is an input error. The CPU half always runs; the device half only with a
 * usable CUDA backend (the emulation build), and without one the suite says it did not
 * run it (SKIP, with the reason) rather than counting it as passed. */
#include "config.h"

#include "dllm/transformer.h"
#include "kernels/backend.h"
#include "kernels/rng.h"
#include "tests/harness/harness.h"
#include "tests/harness/test_util.h"

#ifdef DLLM_CUDA_EMULATION
#include "kernels/cuda_emu/emu_hooks.h"
#endif

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 9, NROWS = 6, NL = 5 };
static const char *const ARCHS[] = {"llada", "qwen3", "dream"};
static const int KS[] = {1, 2, 3, 5};

static dllm_tf *model(int arch_i, bool lora)
{
    const dllm_arch_desc *a = dllm_arch_by_name(ARCHS[arch_i]);
    ck_assert_ptr_nonnull(a);
    dllm_model_config cfg;
    dllm_err err;
    ck_assert_int_eq(dllm_config_preset(&cfg, a->id, "tiny", &err), 0);
    cfg.n_layers = NL;
    dllm_tf *m = dllm_tf_create(&cfg, 31 + arch_i);
    ck_assert_ptr_nonnull(m);
    if (lora) {
        dllm_tf_lora_enable(m, 4, 8.0f, LORA_ALL, 5);
        size_t n;
        float *p = tu_host_trainable(m, &n);
        dllm_rng r = dllm_rng_make(81, DLLM_RNG_INIT, 3, 0);
        for (size_t i = 0; i < n; i++)
            p[i] = (float)(0.05 * dllm_rng_normal(&r));
    }
    return m;
}

/* Two kept forwards and backwards of nb canvases of nt tokens; logits (2, NROWS, V) and
 * the gradients (n) out. */
static void run_at(dllm_tf *m, bool dev, int nb, int nt, float *logits, float *grads)
{
    int V = dllm_tf_config(m)->embedding_size;
    int32_t *tok = malloc(sizeof *tok * (size_t)nb * nt), rows[NROWS];
    uint8_t *mask = malloc((size_t)nb * nt);
    for (int i = 0; i < nb * nt; i++) {
        tok[i] = (i * 29 + 3) % V;
        mask[i] = !(i / nt == 1 && i % nt < 2); /* row 1 left-padded by 2 */
    }
    for (int r = 0; r < NROWS; r++)
        rows[r] = (r * 7 + 1) % (nb * nt);
    float *dl = malloc(sizeof(float) * NROWS * V);
    dllm_rng r = dllm_rng_make(82, DLLM_RNG_INIT, 4, 0);
    for (int i = 0; i < NROWS * V; i++)
        dl[i] = (float)(0.1 * dllm_rng_normal(&r));
    dllm_optim_zero_grad(dllm_tf_optim(m));
    for (int rep = 0; rep < 2; rep++) {
        ck_assert_int_eq(dllm_tf_forward(m, tok, mask, nb, nt, rows, NROWS,
                                         logits + (size_t)rep * NROWS * V), 0);
        dllm_tf_backward(m, dl);
    }
    size_t n;
    dllm_optim_trainable(dllm_tf_optim(m), &n);
    if (dev)
        dllm_tf_device_grads(m, grads);
    else
        memcpy(grads, dllm_optim_grads(dllm_tf_optim(m)), sizeof(float) * n);
    free(dl), free(tok), free(mask);
}

static void run(dllm_tf *m, bool dev, float *logits, float *grads)
{
    run_at(m, dev, B, T, logits, grads);
}

/* _i: arch (0..2) x {LoRA, full} x {CPU, device} */
START_TEST(test_bit_identical)
{
    int arch_i = _i / 4;
    bool lora = _i % 2 == 0, dev = _i / 2 % 2 == 1;
    dllm_err err;
    dllm_backend *be = dev ? dllm_backend_cuda() : NULL;
    ck_assert(!dev || be); /* main registers the device half only with a backend */
    dllm_tf *ref = model(arch_i, lora);
    if (dev) {
        ck_assert_int_eq(dllm_tf_to_device(ref, be, &err), 0);
        ck_assert_int_eq(dllm_tf_device_train(ref, &err), 0);
    }
    int V = dllm_tf_config(ref)->embedding_size;
    size_t n;
    dllm_optim_trainable(dllm_tf_optim(ref), &n);
    float *l0 = malloc(sizeof(float) * 2 * NROWS * V), *g0 = malloc(sizeof(float) * n);
    float *l1 = malloc(sizeof(float) * 2 * NROWS * V), *g1 = malloc(sizeof(float) * n);
    run(ref, dev, l0, g0);
    double gs = 0;
    for (size_t i = 0; i < n; i++)
        gs += (double)g0[i] * g0[i];
    ck_assert(gs > 0); /* something to compare */
    for (size_t k = 0; k < sizeof KS / sizeof *KS; k++) {
        dllm_tf *m = model(arch_i, lora);
        ck_assert_int_eq(dllm_tf_set_recompute(m, KS[k]), 0);
        if (dev) {
            ck_assert_int_eq(dllm_tf_to_device(m, be, &err), 0);
            ck_assert_int_eq(dllm_tf_device_train(m, &err), 0);
        }
        run(m, dev, l1, g1);
        ck_assert_msg(memcmp(l0, l1, sizeof(float) * 2 * NROWS * V) == 0,
                      "%s %s %s every %d: logits differ", ARCHS[arch_i], lora ? "LoRA" : "full",
                      dev ? "device" : "cpu", KS[k]);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += memcmp(&g0[i], &g1[i], sizeof(float)) != 0;
        ck_assert_msg(bad == 0, "%s %s %s every %d: %zu of %zu gradients differ", ARCHS[arch_i],
                      lora ? "LoRA" : "full", dev ? "device" : "cpu", KS[k], bad, n);
        dllm_tf_free(m);
    }
    printf("%s %s %s: gradients bit-identical at every K in {1, 2, 3, 5}\n", ARCHS[arch_i],
           lora ? "LoRA" : "full", dev ? "device" : "cpu");
    ck_assert_int_eq(dllm_tf_set_recompute(ref, -1), DLLM_EXIT_INPUT);
    free(l0), free(g0), free(l1), free(g1);
    dllm_tf_free(ref);
}
END_TEST

#ifdef DLLM_CUDA_EMULATION
/* The emulated device's peak over one kept forward and backward of 4 canvases of 64
 * tokens, at recomputation every; less the two workspaces (cuBLASLt's 32 MiB, the
 * backend's), so the model's own bytes are compared. */
static int64_t device_peak(int every)
{
    dllm_err err;
    dllm_emu_reset_stats();
    dllm_tf *m = model(0, false);
    ck_assert_int_eq(dllm_tf_set_recompute(m, every), 0);
    ck_assert_int_eq(dllm_tf_to_device(m, dllm_backend_cuda(), &err), 0);
    ck_assert_int_eq(dllm_tf_device_train(m, &err), 0);
    size_t n;
    dllm_optim_trainable(dllm_tf_optim(m), &n);
    int V = dllm_tf_config(m)->embedding_size;
    float *l = malloc(sizeof(float) * 2 * NROWS * V), *g = malloc(sizeof(float) * n);
    run_at(m, true, 4, 64, l, g);
    dllm_tf_free(m);
    free(l), free(g);
    dllm_emu_stats st;
    dllm_emu_get_stats(&st);
    return (int64_t)st.peak_bytes - ((int64_t)32 << 20) -
           (int64_t)dllm_backend_cuda_workspace_bytes();
}

START_TEST(test_device_peak_falls)
{
    int64_t none = device_peak(0), layer = device_peak(1), two = device_peak(2);
    printf("emulated device peak less the workspaces (llada, %d layers, 4 x 64 tokens, full): "
           "none %lld, every 1 %lld, every 2 %lld bytes\n", NL, (long long)none,
           (long long)layer, (long long)two);
    ck_assert(layer < two && two < none);
}
END_TEST
#endif

Suite *tu_suite(tu_ctx *ctx)
{
    const bool device = dllm_backend_cuda() != NULL;
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("recompute");
    tcase_set_timeout(tc, 600);
    /* _i: arch x {LoRA, full} x {CPU, device}: the device iterations are _i / 2 odd */
    for (int i = 0; i < 12; i++)
        if (device || i / 2 % 2 == 0)
            tcase_add_loop_test(tc, test_bit_identical, i, i + 1);
#ifdef DLLM_CUDA_EMULATION
    if (device)
        tcase_add_test(tc, test_device_peak_falls);
#endif
    suite_add_tcase(s, tc);
    ctx->nofork = true; /* a CUDA context does not survive a fork */
    if (!device)
        tu_partial(ctx, "the device half (6 of 12 cases: recomputation on the CUDA backend) did "
                        "not run: no usable CUDA backend (%s); the CPU half ran and passed",
                   dllm_backend_cuda_why());
    return s;
}
