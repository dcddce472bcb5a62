/* fp8_gemm_check.c: the device FP8 GEMM against the CPU's exact simulation
 * (kernels/fp8_gemm_check.h). Device buffers carry guard bytes after their payload. */
#include "config.h"

#ifdef HAVE_CUDA
#include "kernels/fp8_gemm_check.h"

#include "kernels/backend_cases.h"
#include "kernels/cuda_device.h"
#include "kernels/cuda_ops.h"
#include "kernels/ops.h"

#include <stdlib.h>
#include <string.h>

enum { GUARD = 64, GUARD_BYTE = 0xA5 };

static void *gnew(size_t bytes, const void *init)
{
    unsigned char g[GUARD];
    memset(g, GUARD_BYTE, sizeof g);
    char *d = dllm_cuda_malloc(bytes + GUARD);
    if (init)
        dllm_cuda_memcpy_h2d(d, init, bytes);
    else
        dllm_cuda_memset(d, 0, bytes);
    dllm_cuda_memcpy_h2d(d + bytes, g, GUARD);
    return d;
}

static bool gok(const void *d, size_t bytes)
{
    unsigned char g[GUARD];
    dllm_cuda_memcpy_d2h(g, (const char *)d + bytes, GUARD);
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_BYTE)
            return false;
    return true;
}

int dllm_fp8_linear_parity(fp8_scaling ws, fp8_format wf, fp8_format af, int N, int C, int OC,
                           uint64_t seed, dllm_fp8_parity *r, dllm_err *err)
{
    memset(r, 0, sizeof *r);
    const size_t na = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *a = dllm_host_normal(na, seed, 1.0), *w = dllm_host_normal(nw, seed + 1, 0.05);
    for (size_t i = 0; i < na; i += 131)
        a[i] *= 30.0f; /* outliers: groups get different scales */
    fp8_matrix wm = {0};
    if (fp8_quantise_weight(&wm, w, OC, C, wf, ws, false, err)) {
        free(a), free(w);
        return err->code;
    }
    fp8_scaling as = ws == FP8_SCALE_BLOCK ? FP8_SCALE_GROUP : FP8_SCALE_TENSOR;
    float *ref = dllm_malloc(no * 4), *adq = dllm_malloc(na * 4);
    fp8_quant_dequant(adq, a, N, C, af, as, false);
    fp8_matrix_cache_dequant(&wm);
    op_gemm(false, true, N, OC, C, 1.0f, adq, wm.deq, 0.0f, ref);

    long as_r, as_c, ws_r, ws_c;
    size_t nas, nws;
    int abr = 1, abc = 128, wbr = 128, wbc = 128;
    /* block-scaled GEMMs take the token count padded to 8, as the CUDA backend pads it:
     * codes, scales and product laid out for Np rows, rows N..Np never written or read */
    const int Np = ws == FP8_SCALE_BLOCK ? (N + 7) / 8 * 8 : N;
    const size_t nap = (size_t)Np * C, nop = (size_t)Np * OC;
    if (ws == FP8_SCALE_BLOCK) {
        dllm_cuda_fp8_gemm_scale_strides(Np, C, &as_r, &as_c, &ws_r, &ws_c);
        nas = (size_t)Np * ((C + 127) / 128);
        nws = dllm_cuda_fp8_weight_scale_count(OC, C);
    } else {
        as_r = as_c = ws_r = ws_c = 0;
        nas = nws = 1;
        abr = N, abc = C, wbr = OC, wbc = C;
    }
    void *d_a = gnew(na * 4, a), *d_w = gnew(nw * 4, w), *d_aq = gnew(nap, NULL);
    void *d_wq = gnew(nw, NULL), *d_as = gnew(nas * 4, NULL), *d_ws = gnew(nws * 4, NULL);
    void *d_out = gnew(nop * 4, NULL), *d_outb = gnew(nop * 2, NULL);
    dllm_cuda_fp8_quantise(d_wq, d_ws, ws_r, ws_c, d_w, OC, C, wbr, wbc, wf, false, NULL);
    dllm_cuda_fp8_quantise(d_aq, d_as, as_r, as_c, d_a, N, C, abr, abc, af, false, NULL);
    uint8_t *gq = dllm_malloc(nw);
    dllm_cuda_memcpy_d2h(gq, d_wq, nw);
    r->codes_equal = memcmp(gq, wm.q, nw) == 0;
    int rc = dllm_cuda_fp8_linear(d_out, false, d_aq, d_as, af, d_wq, d_ws, wf, ws, Np, C, OC,
                                  NULL, err);
    if (!rc)
        rc = dllm_cuda_fp8_linear(d_outb, true, d_aq, d_as, af, d_wq, d_ws, wf, ws, Np, C, OC,
                                  NULL, err);
    if (!rc) {
        dllm_cuda_synchronize();
        float *g = dllm_malloc(no * 4), *gb = dllm_malloc(no * 4);
        uint16_t *ob = dllm_malloc(no * 2);
        dllm_cuda_memcpy_d2h(g, d_out, no * 4);
        dllm_cuda_memcpy_d2h(ob, d_outb, no * 2);
        op_bf16_to_f32_array(gb, ob, no);
        r->nmse_f32 = dllm_nmse(g, ref, no);
        r->nmse_bf16 = dllm_nmse(gb, ref, no);
        r->tol = FP8_GEMM_NMSE(C);
        free(g), free(gb), free(ob);
    }
    r->guards_ok = gok(d_aq, nap) && gok(d_wq, nw) && gok(d_as, nas * 4) &&
                   gok(d_ws, nws * 4) && gok(d_out, nop * 4) && gok(d_outb, nop * 2);
    void *all[] = {d_a, d_w, d_aq, d_wq, d_as, d_ws, d_out, d_outb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dllm_cuda_free(all[i]);
    fp8_matrix_free(&wm);
    free(a), free(w), free(ref), free(adq), free(gq);
    return rc;
}
#else
/* Without the CUDA backend there is nothing to check (ISO C wants a declaration). */
typedef int fp8_gemm_check_unused;
#endif
