/* precision.c: parsing and naming of the trainer / rollout precision (precision.h). */
#include "dllm/precision.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/ops.h"

#include <stdio.h>
#include <string.h>

/* by dllm_rollout_kind */
static const char *const rollout_names[] = {"trainer", "bf16",  "fp8", "fp8-exact",
                                            "nvfp4",   "int8"};
enum { N_ROLLOUT = sizeof rollout_names / sizeof rollout_names[0] };

const char *dllm_rollout_name(dllm_rollout_kind k)
{
    return (unsigned)k < N_ROLLOUT ? rollout_names[k] : "trainer";
}

bool dllm_rollout_is_fp8(dllm_rollout_kind k)
{
    return k == DLLM_ROLLOUT_FP8 || k == DLLM_ROLLOUT_FP8_EXACT;
}

const char *dllm_rollout_cpu_product(dllm_rollout_kind k, bool *faster)
{
    bool fast = false;
    const char *what = NULL;
    switch (k) {
    case DLLM_ROLLOUT_TRAINER: break;
    case DLLM_ROLLOUT_BF16:
        fast = strcmp(op_bf16_gemm_path(), "fp32") != 0;
        what = fast ? (strcmp(op_bf16_gemm_path(), "dnnl-bf16-amx") == 0
                           ? "oneDNN bf16 matmul on AMX bf16 tiles"
                           : "oneDNN bf16 matmul on AVX512-BF16 dot products")
                    : "no AVX512-BF16 on this CPU (or DLLM_BF16_GEMM=fp32): an fp32 product over "
                      "the bf16-rounded values, no speed-up over fp32";
        break;
    case DLLM_ROLLOUT_FP8:
        fast = fp8_fast_blocks();
        what = fast ? (strcmp(fp8_fast_path(), "amx-bf16") == 0
                           ? "block-scaled FP8 codes on AMX bf16 tiles"
                           : "block-scaled FP8 codes on AVX512-BF16 dot products")
                    : "no AVX512-BF16 on this CPU: quantised exactly, weights dequantised once per "
                      "sync, activations per call, one fp32 GEMM (bit for bit fp8-exact); no "
                      "speed-up over fp32 here";
        break;
    case DLLM_ROLLOUT_FP8_EXACT:
        what = "the exact simulation (weights dequantised once per sync, activations per call, "
               "one fp32 GEMM), no speed-up over fp32 by design";
        break;
    /* (each new precision names its product here, and cli_note_rollout_product whether
     * it is loud) */
    case DLLM_ROLLOUT_NVFP4:
        what = "simulated (weights dequantised once per sync, activations per call, one fp32 "
               "GEMM), no speed-up over fp32 by design";
        break;
    case DLLM_ROLLOUT_INT8: {
        static char buf[128];
        const char *isa = int8_cpu_isa();
        fast = strcmp(int8_gemm_path(), "onednn") == 0 && strcmp(isa, "none") != 0;
        if (strcmp(int8_gemm_path(), "onednn") == 0)
            snprintf(buf, sizeof buf, "oneDNN u8s8 matmul on %s, exact int32 sums", isa);
        else
            snprintf(buf, sizeof buf, "exact int32 sums in a portable loop (%s), no speed-up "
                     "over fp32", dnnl_gemm_built() ? "DLLM_INT8_GEMM=loop" : "no oneDNN");
        what = buf;
        break;
    }
    }
    if (faster)
        *faster = fast;
    return what;
}

dllm_precision dllm_precision_default(void)
{
    return (dllm_precision){.trainer_bf16 = false, .rollout = DLLM_ROLLOUT_TRAINER,
                            .fp8_format = FP8_E4M3, .fp8_scaling = FP8_SCALE_BLOCK};
}

int dllm_precision_parse(dllm_precision *p, const char *trainer, const char *rollout,
                         const char *format, const char *scaling, bool pow2_scale,
                         dllm_err *err)
{
    *p = dllm_precision_default();
    p->fp8_pow2_scale = pow2_scale;
    if (trainer && *trainer) {
        if (!strcmp(trainer, "bf16"))
            p->trainer_bf16 = true;
        else if (strcmp(trainer, "fp32"))
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "trainer precision '%s': expected fp32 or bf16", trainer);
    }
    if (rollout && *rollout) {
        int k = 0;
        while (k < N_ROLLOUT && strcmp(rollout, rollout_names[k]))
            k++;
        if (k == N_ROLLOUT)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "rollout precision '%s': expected trainer, bf16, fp8, fp8-exact, "
                                "nvfp4 or int8", rollout);
        p->rollout = (dllm_rollout_kind)k;
    }
    if (format && *format && fp8_format_parse(format, &p->fp8_format, err))
        return dllm_err_prefix(err, "rollout.fp8.format");
    if (scaling && *scaling) {
        if (fp8_scaling_parse(scaling, &p->fp8_scaling, err) ||
            p->fp8_scaling == FP8_SCALE_GROUP)
            return dllm_err_set(err, DLLM_EXIT_INPUT,
                                "rollout.fp8.scaling '%s': expected block, channel or tensor "
                                "(the weights' scaling; activations follow it)", scaling);
    }
    return 0;
}

int dllm_precision_parse_int8(dllm_precision *p, const char *scaling, dllm_err *err)
{
    if (scaling && *scaling && int8_scaling_parse(scaling, &p->int8_scaling, err))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.int8.scaling '%s': expected channel or block (weights per "
                            "output row or per 128x128 block; activations follow)", scaling);
    return 0;
}

int dllm_precision_parse_nvfp4(dllm_precision *p, const char *scaling, dllm_err *err)
{
    if (scaling && *scaling && nvfp4_scaling_parse(scaling, &p->nvfp4_scaling, err))
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "rollout.nvfp4.scaling '%s': expected block16, block32, channel or "
                            "tensor (what one E4M3 scale covers: 16 or 32 elements along the "
                            "reduction, a row, the tensor)", scaling);
    return 0;
}

int dllm_precision_check(const dllm_precision *p, const char *where, dllm_err *err)
{
    if ((unsigned)p->rollout >= N_ROLLOUT || (unsigned)p->fp8_format > FP8_E5M2 ||
        (p->fp8_scaling != FP8_SCALE_BLOCK && p->fp8_scaling != FP8_SCALE_CHANNEL &&
         p->fp8_scaling != FP8_SCALE_TENSOR) ||
        (p->int8_scaling != INT8_SCALE_CHANNEL && p->int8_scaling != INT8_SCALE_BLOCK) ||
        (unsigned)p->nvfp4_scaling >= NVFP4_N_SCALING)
        return dllm_err_set(err, DLLM_EXIT_INPUT,
                            "%s: bad precision (rollout %d, fp8 format %d, scaling %d)", where,
                            (int)p->rollout, (int)p->fp8_format, (int)p->fp8_scaling);
    return 0;
}
