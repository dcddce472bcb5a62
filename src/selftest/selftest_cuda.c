/* selftest_cuda.c: the device rows of `dllm-rl selftest --device cuda`:
 *  1. the device: name, compute capability, driver and runtime, memory, and which of
 *     this binary's images it runs (SASS for sm_80/sm_90/sm_90a, or the compute_90 PTX
 *     JIT-compiled by the driver; neither is a failure);
 *  2. the runtime and cuBLASLt probes (kernels/cuda/selftest_probe.cu) and whether
 *     block-scaled FP8 GEMMs are available;
 *  3. every op of the backend table against the CPU backend at model shapes
 *     (kernels/backend_cases.h, the tolerances of tests/unit/test_backend_ops.c): the tiny
 *     and small presets, and LLaDA-8B's dimensions on a few rows without --quick;
 *  4. the FP8 GEMM against the CPU's exact simulation (kernels/fp8_gemm_check.h), and the
 *     INT8 linear (channel and block scaling) against the CPU's bit for bit (SKIP
 *     before sm_80, where rollout.precision int8 is refused);
 *  6. BF16 and FP8 GEMM rates at LLaDA-8B's linear shapes, each shape's FP8/BF16 ratio
 *     and that of one denoising step's linears at the d1 shape -- on a GPU only, never
 *     under emulation. The ratios are held to the documented range, not to a wish:
 *     NVIDIA's cuBLAS 12.9 release notes on block-scaled FP8 on Hopper (the blog
 *     "Boosting Matrix Multiplication Speed and Flexibility with NVIDIA cuBLAS 12.9")
 *     give 1.25-1.75x over BF16 at GEMM level, 1.75x for large matmuls; below 1.25 is a
 *     FAIL, above 1.75 is shown as beyond the documented range.
 * (Row group 5, generate and score on the device, is selftest_cli.c.) */
#include "config.h"
#include "src/selftest/selftest.h"

#ifdef HAVE_CUDA
#include "dllm/model_config.h"
#include "kernels/backend_cases.h"
#include "kernels/cuda_device.h"
#include "kernels/cuda_ops.h"
#include "kernels/int8.h"
#include "kernels/cuda_selftest.h"
#include "kernels/fp8_gemm_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the documented FP8-over-BF16 range of cuBLAS's block-scaled GEMMs on Hopper (above) */
#define FP8_OVER_BF16_LO 1.25
#define FP8_OVER_BF16_HI 1.75

/* d1's rollout: 64 sequences of 200 prompt + 256 generated tokens, blocks of 32 */
enum { D1_SEQS = 64, D1_TOKENS = 200 + 256, D1_BLOCK = 32, TIMED_REPS = 10 };

/* The device rows; false when no kernel of this binary can run on it (the remaining
 * rows would only abort). */
static bool device_rows(stbl_table *t, dllm_cuda_device_info *d)
{
    char why[256] = "";
    if (dllm_cuda_device_info_get(d, why, sizeof why)) {
        stbl_add(t, "cuda: device", STBL_FAIL, "", "", "%s", why);
        return false;
    }
    if (d->emulated) {
        stbl_add(t, "cuda: device", STBL_PASS, "emulated", "",
                 "%s (kernels/cuda_emu: logic only, no speed); answers as sm_%d%d", d->name,
                 d->cc_major, d->cc_minor);
        stbl_add(t, "cuda: code for this device", STBL_PASS, "emulated", "",
                 "the .cu files compiled for the host: no SASS or PTX to check");
        return true;
    }
    char cc[48];
    snprintf(cc, sizeof cc, "sm_%d%d", d->cc_major, d->cc_minor);
    stbl_add(t, "cuda: device", STBL_PASS, cc, "",
             "%s, %d SMs, %.1f GiB (%.1f free), driver %d.%d, runtime %d.%d", d->name, d->sms,
             d->mem_total_gib, d->mem_free_gib, d->driver_version / 1000,
             d->driver_version % 1000 / 10, d->runtime_version / 1000,
             d->runtime_version % 1000 / 10);
    /* built: SASS for sm_80, sm_90 and sm_90a, PTX for compute_90 (mk/cuda.am); sm_80's
     * code runs on every 8.x device */
    char bv[48];
    snprintf(bv, sizeof bv, "binary %d, ptx %d", d->binary_version, d->ptx_version);
    if (d->kernel_error[0]) {
        stbl_add(t, "cuda: code for this device", STBL_FAIL, "none", "sm_80 / sm_90 / compute_90",
                 "no image of this binary runs on %s (built: SASS sm_80, sm_90, sm_90a; PTX "
                 "compute_90): %s",
                 cc, d->kernel_error);
        return false;
    }
    if (d->cc_major == 9 && d->cc_minor == 0)
        stbl_add(t, "cuda: code for this device", STBL_PASS, bv, "sm_90 / compute_90",
                 "SASS for %s is in the binary", cc);
    else if (d->cc_major * 10 + d->cc_minor > 90)
        stbl_add(t, "cuda: code for this device", STBL_PASS, bv, "sm_90 / compute_90",
                 "no SASS for %s: the driver JIT-compiles the compute_90 PTX (slower first launch; "
                 "sm_90a-only paths are not used)", cc);
    else if (d->cc_major == 8)
        stbl_add(t, "cuda: code for this device", STBL_PASS, bv, "sm_80",
                 "the sm_80 SASS runs on %s (INT8 and BF16 tensor cores%s)", cc,
                 d->cc_minor >= 9 ? "; FP8 tensor-scaled only" : "; no FP8: rollouts in int8 "
                 "or bf16");
    else {
        stbl_add(t, "cuda: code for this device", STBL_FAIL, bv, "sm_80 / sm_90 / compute_90",
                 "%s is older than sm_80: neither the SASS nor the compute_90 PTX fits", cc);
        return false;
    }
    return true;
}

static void probe_row(void *ctx, const char *name, int status, const char *detail)
{
    char check[72];
    snprintf(check, sizeof check, "cuda: %s", name);
    stbl_add((stbl_table *)ctx, check,
             status == DLLM_PROBE_PASS ? STBL_PASS : status == DLLM_PROBE_FAIL ? STBL_FAIL : STBL_SKIP, "",
             "", "%s", detail);
}

static void model_of(const char *preset, int rows, int B, int T, bcase_model *m)
{
    dllm_model_config mc;
    dllm_err err = {0};
    if (dllm_config_preset(&mc, DLLM_ARCH_LLADA, preset, &err)) { /* the presets are ours */
        fprintf(stderr, "selftest: %s\n", err.msg);
        exit(1);
    }
    *m = (bcase_model){preset, rows, mc.d_model, mc.n_heads, mc.n_kv_heads, mc.head_dim,
                       mc.mlp_hidden, mc.vocab_size, B, T};
}

static void op_rows(stbl_table *t, dllm_backend *cpu, dllm_backend *dev, const bcase_model *m)
{
    bcase cases[64];
    int n = bcase_model_cases(m, cases, 64);
    for (int i = 0; i < n; i++) {
        const bcase *c = &cases[i];
        bcase_result r;
        bcase_compare(cpu, dev, c, t->perturb, &r);
        char check[72], meas[48], tol[40];
        snprintf(check, sizeof check, "op %s, %s", c->op, m->name);
        if (r.tol == 0) {
            snprintf(meas, sizeof meas, "%s", r.err == 0 ? "identical" : "differs");
            snprintf(tol, sizeof tol, "bit-exact");
        } else {
            snprintf(meas, sizeof meas, "%.2e", r.err);
            snprintf(tol, sizeof tol, "%.1e", r.tol);
        }
        if (r.ok)
            stbl_add(t, check, STBL_PASS, meas, tol, "%s; worst output %s (%s)", c->shape, r.what,
                     c->ret_tol >= 0 ? "relative error" : "nmse");
        else
            stbl_add(t, check, STBL_FAIL, meas, tol, "%s", r.msg);
    }
}

static void fp8_row(stbl_table *t, fp8_scaling s, const char *what, int N, int C, int OC)
{
    char check[72];
    snprintf(check, sizeof check, "fp8 GEMM %s, %s", fp8_scaling_name(s), what);
    dllm_fp8_parity r;
    dllm_err err = {0};
    if (dllm_fp8_linear_parity(s, FP8_E4M3, FP8_E4M3, N, C, OC, 7, &r, &err)) {
        stbl_add(t, check, STBL_FAIL, "", "", "%s", err.msg);
        return;
    }
    if (t->perturb && !strcmp(t->perturb, "fp8_gemm"))
        r.nmse_f32 = 10 * r.tol + 1.0;
    bool ok = r.codes_equal && r.guards_ok && r.nmse_f32 <= r.tol && r.nmse_bf16 <= r.tol + 1e-5;
    char meas[48], tol[40];
    snprintf(meas, sizeof meas, "%.2e", r.nmse_f32);
    snprintf(tol, sizeof tol, "%.1e", r.tol);
    stbl_add(t, check, ok ? STBL_PASS : STBL_FAIL, meas, tol,
             "N%d C%d OC%d E4M3 vs the CPU's exact simulation: nmse (relative RMS %.1e, bound "
             "%.1e = sqrt((C/32) 2^-24)); bf16 out %.2e; codes %s; guards %s", N, C, OC,
             sqrt(r.nmse_f32), sqrt(r.tol), r.nmse_bf16, r.codes_equal ? "equal" : "DIFFER",
             r.guards_ok ? "intact" : "OVERWRITTEN");
}

/* The device's INT8 linear against the CPU's (op_int8_linear_fwd) at a shape whose sizes
 * exercise the device layout's padding: equal bit for bit (the same codes, exact integer
 * sums, the CPU's scaling order: kernels/cuda/gemm_int8.cu). */
static void int8_row(stbl_table *t, dllm_backend *dev, int8_scaling s)
{
    char check[72], why[200];
    snprintf(check, sizeof check, "op int8_linear_fwd %s, vs cpu", int8_scaling_name(s));
    if (!dllm_cuda_int8_available(why, sizeof why)) {
        stbl_add(t, check, STBL_SKIP, "", "", "%s: rollout.precision int8 is refused here", why);
        return;
    }
    enum { N = 33, C = 300, OC = 130 };
    float *w = dllm_malloc(sizeof(float) * OC * C), *x = dllm_malloc(sizeof(float) * N * C);
    float *want = dllm_malloc(sizeof(float) * N * OC), *got = dllm_malloc(sizeof(float) * N * OC);
    uint64_t r = 12345;
    for (int i = 0; i < OC * C + N * C; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        float v = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
        if (i < OC * C)
            w[i] = 0.2f * v;
        else
            x[i - OC * C] = 4.0f * v;
    }
    int8_matrix h = {0}, d;
    dllm_err err = {0};
    if (int8_quantise_weight(&h, w, OC, C, s, &err)) {
        stbl_add(t, check, STBL_FAIL, "", "", "%s", err.msg);
        goto out;
    }
    op_int8_linear_fwd(want, x, &h, N, C, OC);
    /* the device copy in its layout (rows and channel strides padded with zero codes) */
    int rows, ldq;
    dllm_cuda_int8_weight_layout(OC, C, (int)s, &rows, &ldq);
    size_t ns = s == INT8_SCALE_BLOCK ? (size_t)(OC + INT8_BLOCK - 1) / INT8_BLOCK * h.kb : OC;
    int8_t *pad = calloc((size_t)rows * ldq, 1);
    for (int o = 0; o < OC; o++)
        memcpy(pad + (size_t)o * ldq, h.q + (size_t)o * h.ldq, (size_t)h.ldq);
    d = h;
    d.ldq = ldq, d.comp = NULL, d.deq = NULL;
    d.q = dev->ops->alloc(dev, (size_t)rows * ldq);
    d.scale = dev->ops->alloc(dev, ns * sizeof(float));
    dev->ops->upload(dev, d.q, pad, (size_t)rows * ldq);
    dev->ops->upload(dev, d.scale, h.scale, ns * sizeof(float));
    float *dx = dev->ops->alloc(dev, sizeof(float) * N * C), *dy = dev->ops->alloc(dev, sizeof(float) * N * OC);
    dev->ops->upload(dev, dx, x, sizeof(float) * N * C);
    dev->ops->int8_linear_fwd(dev, dy, dx, &d, N, C, OC);
    dev->ops->download(dev, got, dy, sizeof(float) * N * OC);
    dev->ops->sync(dev);
    if (t->perturb && !strcmp(t->perturb, "int8_linear_fwd"))
        got[7] = nextafterf(got[7], INFINITY);
    int differ = 0;
    for (int i = 0; i < N * OC; i++)
        differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    stbl_add(t, check, differ ? STBL_FAIL : STBL_PASS, differ ? "differs" : "identical",
             "bit-exact", "N%d C%d OC%d: %d of %d outputs differ from the CPU's (cuBLASLt INT8 "
             "GEMM, int32 sums)", N, C, OC, differ, N * OC);
    dev->ops->free(dev, dx), dev->ops->free(dev, dy), dev->ops->free(dev, d.q),
        dev->ops->free(dev, d.scale);
    free(pad);
out:
    int8_matrix_free(&h);
    free(w), free(x), free(want), free(got);
}

/* ---- rates ------------------------------------------------------------------------------- */

typedef struct {
    const char *what;
    int C, OC, per_layer; /* linears of this shape per layer */
} lin8b;

static const lin8b LIN8B[] = {{"q/k/v/o 4096 -> 4096", 4096, 4096, 4},
                              {"gate/up 4096 -> 12288", 4096, 12288, 2},
                              {"down 12288 -> 4096", 12288, 4096, 1}};

/* Bytes the FP8 timing of one shape holds (the larger of the two paths). */
static double timing_bytes(int N, int C, int OC)
{
    return (double)N * C * 3 + (double)OC * C * 5 + (double)N * OC * 2 + 64e6;
}

static void rate_rows(stbl_table *t, const dllm_cuda_device_info *d)
{
    const char *names[] = {"cuda: BF16 GEMM rate, 8B shapes", "cuda: FP8 GEMM rate, 8B shapes",
                           "cuda: FP8/BF16 ratio of a d1 denoising step's linears"};
    if (d->emulated || t->quick) {
        for (int i = 0; i < 3; i++)
            stbl_add(t, names[i], STBL_SKIP, "", "", "%s",
                     d->emulated ? "emulation measures no speed (logic only)"
                               : "--quick: no timing at the 8B shapes");
        return;
    }
    char why[256];
    fp8_scaling s = dllm_cuda_fp8_block_scaling_available(why, sizeof why) ? FP8_SCALE_BLOCK
                                                                           : FP8_SCALE_TENSOR;
    /* the d1 canvas: every token of every sequence goes through the layer linears at each
     * denoising step; fewer rows when the free memory does not hold the largest shape */
    int rows = D1_SEQS * D1_TOKENS;
    while (rows > 512 && timing_bytes(rows, 12288, 4096) > 0.5 * d->mem_free_gib * 1073741824.0)
        rows /= 2;
    const int head_rows = D1_SEQS * D1_BLOCK, V = 126464, L = 32;
    char rows_note[96];
    snprintf(rows_note, sizeof rows_note, "%d rows%s", rows,
             rows == D1_SEQS * D1_TOKENS ? " (64 x 456, the d1 canvas)"
                                         : " (fewer than d1's 64 x 456: free memory)");
    double step_bf = 0, step_fp = 0;
    for (size_t i = 0; i < sizeof LIN8B / sizeof *LIN8B; i++) {
        const lin8b *l = &LIN8B[i];
        double flop = 2.0 * rows * l->C * l->OC, bf, g, q;
        dllm_err err = {0};
        char check[72], meas[48];
        snprintf(check, sizeof check, "cuda: BF16 GEMM rate, %s", l->what);
        if (dllm_cuda_time_bf16_linear(rows, l->C, l->OC, TIMED_REPS, &bf, &err)) {
            stbl_add(t, check, STBL_FAIL, "", "", "%s", err.msg);
            return;
        }
        snprintf(meas, sizeof meas, "%.1f TFLOP/s", flop / (bf * 1e-3) / 1e12);
        stbl_add(t, check, STBL_PASS, meas, "", "%s; %.3f ms, median of %d (cudaEvent)", rows_note, bf,
                 TIMED_REPS);
        snprintf(check, sizeof check, "cuda: FP8 GEMM rate, %s", l->what);
        if (dllm_cuda_time_fp8_linear(rows, l->C, l->OC, s, TIMED_REPS, &g, &q, &err)) {
            stbl_add(t, check, STBL_FAIL, "", "", "%s", err.msg);
            return;
        }
        snprintf(meas, sizeof meas, "%.1f TFLOP/s", flop / (g * 1e-3) / 1e12);
        stbl_add(t, check, STBL_PASS, meas, "",
                 "%s scaling; %.3f ms GEMM + %.3f ms activation quantisation, medians of %d",
                 fp8_scaling_name(s), g, q, TIMED_REPS);
        snprintf(check, sizeof check, "cuda: FP8/BF16 GEMM ratio, %s", l->what);
        double gr = bf / g;
        snprintf(meas, sizeof meas, "%.2fx", gr);
        stbl_add(t, check, gr >= FP8_OVER_BF16_LO ? STBL_PASS : STBL_FAIL, meas, ">= 1.25",
                 "the GEMMs alone; cuBLAS 12.9 documents %.2f-%.2fx on Hopper%s", FP8_OVER_BF16_LO,
                 FP8_OVER_BF16_HI, gr > FP8_OVER_BF16_HI ? " (beyond the documented range)" : "");
        /* a layer quantises three inputs of width 4096 (q/k/v, o, gate/up) and one of 12288
         * (down): counted with the shape whose input they are */
        double quants = l->C == 12288 ? 1 : (l->OC == 4096 ? 2 : 1);
        step_bf += L * l->per_layer * bf;
        step_fp += L * (l->per_layer * g + quants * q);
    }
    double head = 0;
    dllm_err err = {0};
    if (dllm_cuda_time_bf16_linear(head_rows, 4096, V, TIMED_REPS, &head, &err)) {
        stbl_add(t, "cuda: BF16 GEMM rate, head 4096 -> 126464", STBL_FAIL, "", "", "%s", err.msg);
        return;
    }
    char meas[48];
    snprintf(meas, sizeof meas, "%.1f TFLOP/s", 2.0 * head_rows * 4096 * V / (head * 1e-3) / 1e12);
    stbl_add(t, "cuda: BF16 GEMM rate, head 4096 -> 126464", STBL_PASS, meas, "",
             "%d rows (64 x a block of 32); %.3f ms; bf16 in both rollout copies", head_rows, head);
    step_bf += head;
    step_fp += head;
    double ratio = step_bf / step_fp;
    snprintf(meas, sizeof meas, "%.2f", ratio);
    /* the step pays the activation quantisations too: held to the GEMMs' documented
     * lower end, so the quantisation must not eat what the GEMMs gain */
    stbl_add(t, names[2], ratio >= FP8_OVER_BF16_LO ? STBL_PASS : STBL_FAIL, meas, ">= 1.25",
             "32 layers x (4 x 4096^2, 2 x 4096x12288, 12288x4096) on %d rows + the bf16 head: "
             "BF16 %.1f ms, FP8 (%s, with 4 activation quantisations per layer) %.1f ms; "
             "documented GEMM range %.2f-%.2fx", rows, step_bf, fp8_scaling_name(s), step_fp,
             FP8_OVER_BF16_LO, FP8_OVER_BF16_HI);
}

void selftest_cuda(stbl_table *t)
{
    dllm_cuda_device_info d;
    if (!device_rows(t, &d))
        return;
    /* the probes first: under emulation one of them resets the device */
    dllm_cuda_selftest_rows(probe_row, t);
    char why[256] = "";
    bool blk = dllm_cuda_fp8_block_scaling_available(why, sizeof why);
    stbl_add(t, "cuda: block-scaled FP8 GEMM", blk ? STBL_PASS : STBL_SKIP, blk ? "available" : "no", "",
             "%s", blk ? "cuBLASLt 128x128 weight / 1x128 activation scales (rollout.fp8 block)"
                     : why);
    dllm_backend *cpu = dllm_backend_cpu(), *dev = dllm_backend_cuda();
    if (!dev) {
        stbl_add(t, "op: backend table", STBL_FAIL, "", "", "no CUDA backend: %s",
                 dllm_backend_cuda_why());
        return;
    }
    bcase_model m;
    model_of("tiny", 96, 2, 48, &m);
    op_rows(t, cpu, dev, &m);
    model_of("small", 96, 2, 48, &m);
    op_rows(t, cpu, dev, &m);
    /* the optional low-precision linears (kernels/backend.h): a device without them
     * leaves them empty and the core falls back */
    const struct { const char *name; bool present; } opt[] = {
        {"op nvfp4_linear_fwd", dllm_backend_supports(dev, DLLM_OP_NVFP4_LINEAR)}};
    for (int i = 0; i < 1; i++)
        stbl_add(t, opt[i].name, STBL_SKIP, "", "", "%s",
                 opt[i].present ? "the device backend has it; no parity case for it yet"
                                : "optional entry the device backend leaves empty (the core falls back)");
    int8_row(t, dev, INT8_SCALE_CHANNEL);
    int8_row(t, dev, INT8_SCALE_BLOCK);
    if (t->quick || d.emulated)
        stbl_add(t, "op: backend table, llada-8b", STBL_SKIP, "", "", "%s",
                 t->quick ? "--quick: the presets' shapes only"
                        : "emulation: the 8B shapes are for a GPU");
    else if (d.mem_free_gib < 12.0)
        stbl_add(t, "op: backend table, llada-8b", STBL_SKIP, "", "",
                 "%.1f GiB free: the 8B cases need about 12", d.mem_free_gib);
    else {
        model_of("llada-8b", 64, 1, 64, &m);
        op_rows(t, cpu, dev, &m);
    }
    /* FP8 GEMM against the exact simulation */
    if (t->quick || d.emulated) {
        fp8_row(t, FP8_SCALE_TENSOR, "small up", 96, 512, 1536);
        if (blk)
            fp8_row(t, FP8_SCALE_BLOCK, "small up", 96, 512, 1536);
    } else {
        fp8_row(t, FP8_SCALE_TENSOR, "llada-8b up", 64, 4096, 12288);
        if (blk) {
            fp8_row(t, FP8_SCALE_BLOCK, "llada-8b up", 64, 4096, 12288);
            fp8_row(t, FP8_SCALE_BLOCK, "llada-8b down", 64, 12288, 4096);
        }
    }
    if (!blk)
        stbl_add(t, "fp8 GEMM block", STBL_SKIP, "", "", "block scaling not available: %s", why);
    rate_rows(t, &d);
}
#else
void selftest_cuda(stbl_table *t)
{
    stbl_add(t, "cuda", STBL_FAIL, "", "", "built without CUDA");
}
#endif
