/* backend.c: what every backend shares -- the query of its optional entries, the one
 * place that looks at their pointers. */
#include "kernels/backend.h"
#include "kernels/cuda_device.h"

#include <stddef.h>
#include <stdio.h>

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
    case DLLM_OP_LINEARS:
        return o->linears_fwd != NULL;
    case DLLM_OP_FUSED_ACT: /* all four or none (backend.h) */
        return o->act_quant_prepare && o->rmsnorm_quant_fwd && o->swiglu_quant_fwd &&
               o->linear_quant_act_fwd;
    case DLLM_OP_AR_NUCLEUS:
        return o->ar_choose_nucleus != NULL;
    case DLLM_OP_GATED_DELTA: /* all fifteen or none (backend.h) */
        return o->gd_conv_fwd && o->gd_conv_bwd && o->gd_l2norm_fwd && o->gd_l2norm_bwd &&
               o->gd_gates_fwd && o->gd_gates_bwd && o->gd_rule_recurrent_fwd &&
               o->gd_rule_chunked_fwd && o->gd_rule_bwd && o->gd_gated_rmsnorm_fwd &&
               o->gd_gated_rmsnorm_bwd && o->gd_partial_rope_fwd && o->gd_partial_rope_bwd &&
               o->gd_out_gate_fwd && o->gd_out_gate_bwd;
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
    case DLLM_OP_LINEARS:
        return "linears_fwd";
    case DLLM_OP_FUSED_ACT:
        return "fused_act";
    case DLLM_OP_AR_NUCLEUS:
        return "ar_choose_nucleus";
    case DLLM_OP_GATED_DELTA:
        return "gated_delta";
    case DLLM_OP_N_OPTIONAL:
        break;
    }
    return "?";
}

size_t dllm_backend_fp8_scale_ld(const dllm_backend *be, fp8_scaling s, int R, int C)
{
    int br = 1, bc = 1;
    fp8_block_shape(s, R, C, &br, &bc);
    size_t sc = ((size_t)(C > 0 ? C : 0) + (size_t)bc - 1) / (size_t)bc;
    if (be && be->kind == DLLM_BACKEND_CUDA && s == FP8_SCALE_BLOCK)
        return (sc + 3) / 4 * 4; /* BLK128x128_32F: k blocks padded to a multiple of 4 */
    return sc;
}

/* Arithmetic only, so the recording backend and the plan have it in every build. */
void dllm_cuda_int8_weight_layout(int OC, int C, int s, int *rows, int *ldq)
{
    int kb = s == INT8_SCALE_BLOCK ? (C + INT8_BLOCK - 1) / INT8_BLOCK : 1;
    *rows = (OC + 3) / 4 * 4;
    *ldq = s == INT8_SCALE_BLOCK ? kb * INT8_BLOCK : (C + 3) / 4 * 4;
}

bool dllm_backend_fp8_block_ok(const dllm_backend *be, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    /* the recording backend models a GPU that has them (plan --time); only the real
     * CUDA backend asks its library */
    if (!be || be->kind != DLLM_BACKEND_CUDA || be != dllm_backend_cuda())
        return true;
    return dllm_backend_cuda_fp8_block(why, why_len);
}
