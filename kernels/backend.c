/* backend.c: what every backend shares -- the query of its optional entries, the one
 * place that looks at their pointers. */
#include "kernels/backend.h"

#include <stddef.h>

bool dllm_backend_supports(const dllm_backend *be, dllm_backend_op op)
{
    if (!be || !be->ops)
        return false;
    const dllm_backend_ops *o = be->ops;
    switch (op) {
    case DLLM_OP_BF16_LINEAR:
        return o->bf16_linear_fwd != NULL;
    case DLLM_OP_NVFP4_LINEAR:
        return o->nvfp4_linear_fwd != NULL;
    case DLLM_OP_INT8_LINEAR:
        return o->int8_linear_fwd != NULL;
    case DLLM_OP_FP8_LINEARS:
        return o->fp8_linears_fwd != NULL;
    case DLLM_OP_FP8_FUSED_ACT: /* all four or none (backend.h) */
        return o->fp8_act_prepare && o->rmsnorm_fp8_fwd && o->swiglu_fp8_fwd &&
               o->fp8_linear_act_fwd;
    case DLLM_OP_AR_NUCLEUS:
        return o->ar_choose_nucleus != NULL;
    case DLLM_OP_N_OPTIONAL:
        break;
    }
    return false;
}

const char *dllm_backend_op_name(dllm_backend_op op)
{
    switch (op) {
    case DLLM_OP_BF16_LINEAR:
        return "bf16_linear_fwd";
    case DLLM_OP_NVFP4_LINEAR:
        return "nvfp4_linear_fwd";
    case DLLM_OP_INT8_LINEAR:
        return "int8_linear_fwd";
    case DLLM_OP_FP8_LINEARS:
        return "fp8_linears_fwd";
    case DLLM_OP_FP8_FUSED_ACT:
        return "fp8_fused_act";
    case DLLM_OP_AR_NUCLEUS:
        return "ar_choose_nucleus";
    case DLLM_OP_N_OPTIONAL:
        break;
    }
    return "?";
}
