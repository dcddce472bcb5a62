/* backend.c: what every backend shares -- the query of its optional entries, the one
 * place that looks at their pointers. */
#include "kernels/backend.h"
#include "kernels/base.h"
#include "kernels/cuda_device.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int dllm_backend_int8_weight(dllm_backend *be, int8_matrix *q, const float *w, int o, int i,
                             int8_scaling s, dllm_err *err)
{
    int8_matrix h = {0};
    int rc = int8_quantise_weight(&h, w, o, i, s, err);
    if (rc)
        return rc;
    int rows, ldq;
    dllm_cuda_int8_weight_layout(o, i, (int)s, &rows, &ldq);
    size_t nscale = s == INT8_SCALE_BLOCK ? (size_t)(o + INT8_BLOCK - 1) / INT8_BLOCK * h.kb
                                          : (size_t)o;
    if (!q->q || q->rows != o || q->cols != i || q->scaling != s) {
        dllm_backend_int8_weight_free(be, q);
        q->q = be->ops->alloc(be, (size_t)rows * ldq);
        q->scale = be->ops->alloc(be, nscale * sizeof(float));
    }
    int8_t *pad = dllm_calloc((size_t)rows * ldq, 1); /* (rows, ldq) */
    for (int r = 0; r < o; r++)
        memcpy(pad + (size_t)r * ldq, h.q + (size_t)r * h.ldq, (size_t)h.ldq);
    be->ops->upload(be, q->q, pad, (size_t)rows * ldq);
    be->ops->upload(be, q->scale, h.scale, nscale * sizeof(float));
    free(pad);
    q->rows = o, q->cols = i, q->scaling = s, q->kb = h.kb, q->ldq = ldq;
    q->comp = NULL, q->deq = NULL, q->deq_valid = false;
    int8_matrix_free(&h);
    return 0;
}

void dllm_backend_int8_weight_free(dllm_backend *be, int8_matrix *q)
{
    if (q->q)
        be->ops->free(be, q->q);
    if (q->scale)
        be->ops->free(be, q->scale);
    q->q = NULL, q->scale = NULL;
}

void dllm_backend_fp8_weight(dllm_backend *be, fp8_matrix *q, const float *w, int o, int i,
                             fp8_format f, fp8_scaling s, bool pow2, fp8_scaling act, bool fast)
{
    q->rows = o, q->cols = i;
    q->format = f;
    q->scaling = s;
    q->pow2_scale = pow2;
    fp8_block_shape(q->scaling, o, i, &q->block_rows, &q->block_cols);
    q->scale_rows = (o + q->block_rows - 1) / q->block_rows;
    q->scale_cols = (i + q->block_cols - 1) / q->block_cols;
    q->scale_ld = (int)dllm_backend_fp8_scale_ld(be, q->scaling, o, i);
    q->act_scaling = act;
    q->fast = fast;
    if (!q->q) {
        q->q = be->ops->alloc(be, (size_t)o * i);
        q->scale = be->ops->alloc(be, (size_t)q->scale_rows * q->scale_ld * sizeof(float));
    }
    be->ops->fp8_quantise(be, q->q, q->scale, w, o, i, q->format, q->scaling, q->pow2_scale);
}

void dllm_backend_fp8_weight_free(dllm_backend *be, fp8_matrix *q)
{
    if (q->q)
        be->ops->free(be, q->q);
    if (q->scale)
        be->ops->free(be, q->scale);
    q->q = NULL, q->scale = NULL;
}

int dllm_backend_device_pack_weight(dllm_backend *be, dllm_lin_weight w, const float *src,
                                    const float *host_src, float *stage, int o, int i,
                                    const dllm_pack_args *a, dllm_err *err)
{
    size_t cnt = (size_t)o * i;
    if (w.i8) { /* quantised on the host by the CPU's quantiser: the same codes */
        if (!host_src)
            return dllm_err_set(err, DLLM_EXIT_INTERNAL, "the %s backend packs INT8 weights "
                                "from the host's copy, and none was given", be->name);
        return dllm_backend_int8_weight(be, (int8_matrix *)w.i8, host_src, o, i,
                                        a->i8_scaling, err);
    }
    if (w.f4)
        return dllm_err_set(err, DLLM_EXIT_INPUT, "the %s backend has no NVFP4 linear",
                            be->name);
    if (!src) {
        be->ops->upload(be, stage, host_src, cnt * sizeof(float));
        src = stage;
    }
    if (w.b16) {
        if (!w.b16->w)
            w.b16->w = be->ops->alloc(be, cnt * sizeof(uint16_t));
        w.b16->rows = o, w.b16->cols = i;
        be->ops->to_bf16(be, w.b16->w, src, cnt);
        return 0;
    }
    dllm_backend_fp8_weight(be, w.f8, src, o, i, a->f8_format, a->f8_scaling, a->f8_pow2,
                            a->f8_act, a->f8_fast);
    return 0;
}

void dllm_backend_device_free_weight(dllm_backend *be, dllm_lin_weight w)
{
    if (w.b16 && w.b16->w) {
        be->ops->free(be, w.b16->w);
        w.b16->w = NULL;
    }
    if (w.i8)
        dllm_backend_int8_weight_free(be, (int8_matrix *)w.i8);
    if (w.f8)
        dllm_backend_fp8_weight_free(be, w.f8);
}

/* Arithmetic only, so the recording backend and the plan have it in every build. */
size_t dllm_cuda_gd_rule_bwd_scratch_floats(int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    (void)Hk;
    if (B <= 0 || T <= 0 || Dk <= 0 || Hv <= 0 || Dv <= 0)
        return 0;
    size_t SS = (size_t)Dk * Dv, P = (size_t)B * Hv;
    size_t nseg = (size_t)(T + DLLM_GD_RULE_SEG - 1) / DLLM_GD_RULE_SEG;
    size_t L = T < DLLM_GD_RULE_SEG ? (size_t)T : DLLM_GD_RULE_SEG;
    return P * SS * (nseg + L + 2) + 2 * (size_t)B * T * Hv * Dk;
}


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
