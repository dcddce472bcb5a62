/* cublaslt.cc: the cuBLASLt stand-in of the emulation build (kernels/cuda_emu/
 * cublaslt_emu.h). It implements the subset the project calls -- matmul and layout
 * descriptors, transposes, CUBLAS_COMPUTE_32F with fp32 scale type, BF16 inputs and FP8
 * E4M3/E5M2 inputs with tensor-wide (scalar) or block scaling, D fp32 or bf16,
 * preferences, the heuristic and the workspace, and fp32 x fp32 (SGEMM) -- and refuses the
 * rest.
 *
 * Refusals follow NVIDIA's cuBLASLt documentation (cublasLtMatmul: "Datatypes
 * supported", the FP8 and block-scaling notes); where it is unclear the choice is marked
 * PROBE here and listed in kernels/cuda_emu/PROBES.md for a selftest on a real GPU:
 *  - FP8 (compute capability 8.9 or later: refused on an older device, the emulation's
 *    DLLM_EMU_SM): only the "TN" form (A transposed, B not); E5M2 x E5M2 has no kernel;
 *    pointers 16-byte aligned, leading dimensions multiples of 16 bytes; k multiple of 16
 *    (PROBE: the exact m / n rule)                              -> NOT_SUPPORTED
 *  - block scaling: VEC128_32F and BLK128x128_32F only with FP8 inputs, both operands
 *    block-scaled, not both 128x128, D fp32 or bf16, scale pointers set; the outer
 *    dimension of a VEC128_32F operand (the token count) a multiple of 8 (PROBE: the
 *    rule TransformerEngine's cuBLASLt wrapper enforces for these GEMMs)
 *                                                               -> NOT_SUPPORTED / INVALID_VALUE
 *  - the version: cublasLtGetVersion reports the headers' 12.9.1, or the number in the
 *    environment variable DLLM_EMU_CUBLASLT_VERSION (major * 10000 + minor * 100 + patch),
 *    so that a test can present an older library to the start-up check
 *  - INT8 (IMMA, sm_75 and later; the regular data ordering, the only one used here):
 *    A and B int8, C and D int32, COMPUTE_32I with an int32 scale type; only the "TN"
 *    form; pointers 4-byte aligned; leading dimensions of A, B and C, and m and k,
 *    multiples of 4; no scale pointers or modes                  -> NOT_SUPPORTED
 *  - a C matrix (beta != 0) of another type or layout than D (C may be another buffer
 *    than D: the residual of an FP8 or BF16 GEMM read in the epilogue; with FP8 inputs
 *    and block scaling too, PROBE)                             -> NOT_SUPPORTED
 *  - inconsistent shapes, ld < rows, NULL alpha/beta, a workspace size with no
 *    workspace                                                  -> INVALID_VALUE
 *  - an algorithm chosen for a larger minimum alignment than the pointers of the call
 *    have (PROBE: the status)                                   -> INVALID_VALUE
 *  - anything outside the subset (other types, compute types, attributes): NOT_SUPPORTED,
 *    with a line on stderr saying the stand-in does not implement it.
 * Heuristic failures return NOT_SUPPORTED with zero results.
 *
 * Numerics (a model, not the hardware): bf16 x bf16 products are exact in fp32 and summed
 * in fp32 in k order. FP8 products are exact; each 32-deep step (one tensor-core MMA) is
 * summed exactly and added to a partial sum kept to a 14-bit significand, truncated
 * (Hopper's FP8 accumulator; PROBE: width and rounding), and the partial sum is promoted
 * into an fp32 accumulator every 128 of k (cuBLAS without fast accumulation; PROBE: the
 * interval), after multiplying by the two block scales when block scaling is on. With
 * tensor-wide scales D = alpha * sa * sb * acc + beta * C in fp32. INT8 products are
 * summed exactly in 64 bits and D = alpha * acc + beta * C wraps to int32 (the
 * hardware's int32 accumulator wraps too; callers keep |acc| < 2^31). */
#include "kernels/cuda_emu/cublaslt_emu.h"
#include "kernels/cuda_emu/emu_internal.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

struct cublasLtContext {
    int magic;
};

struct cublasLtMatmulDescOpaque_emu {
    cublasComputeType_t compute;
    cudaDataType_t scale_type;
    int32_t opa, opb;
    const void *a_scale, *b_scale, *c_scale, *d_scale;
    int32_t a_mode, b_mode;
    int8_t fast_accum;
};

struct cublasLtMatrixLayoutOpaque_emu {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct cublasLtMatmulPreferenceOpaque_emu {
    uint64_t max_workspace;
    uint32_t align[4]; /* A, B, C, D minimum alignment promised by the caller */
};

namespace {

enum { STEP_K = 32, PROMOTE_K = 128, ACC_BITS = 14, BLOCK = 128 };
const uint64_t ALGO_MAGIC = 0x646c6c6d2d656d75ULL;

cublasStatus_t unimplemented(const char *what, long v)
{
    fprintf(stderr, "dllm-rl: cuBLASLt stand-in: %s %ld is not implemented (emulation)\n",
            what, v);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t type_bytes(cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
    case CUDA_R_8I: return 1;
    case CUDA_R_32I: return 4;
    }
    return 0;
}

unsigned ptr_align(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    unsigned a = 1;
    while (a < 256 && !(u & a))
        a <<= 1;
    return a;
}

struct problem {
    uint64_t m, n, k;
    bool fp8, block, i8;
};

/* The INT8 rules (the IMMA requirements with the regular data ordering). */
cublasStatus_t check_int8(const cublasLtMatmulDescOpaque_emu *d,
                          const cublasLtMatrixLayoutOpaque_emu *a,
                          const cublasLtMatrixLayoutOpaque_emu *b,
                          const cublasLtMatrixLayoutOpaque_emu *c, const unsigned align[4],
                          const problem *p, const char **why)
{
    if (d->scale_type != CUDA_R_32I)
        return *why = "COMPUTE_32I with int8 C/D-less outputs needs scale type R_32I",
               CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type != CUDA_R_8I || b->type != CUDA_R_8I || c->type != CUDA_R_32I)
        return *why = "COMPUTE_32I: A and B int8, C and D int32 (the stand-in's INT8 subset)",
               CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->opa != CUBLAS_OP_T || d->opb != CUBLAS_OP_N)
        return *why = "INT8 needs the TN form (A transposed, B not)", CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->ld % 4 || b->ld % 4 || c->ld % 4 || p->m % 4 || p->k % 4)
        return *why = "INT8 needs leading dimensions of A, B, C and m and k multiples of 4",
               CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 4; i++)
        if (align[i] < 4)
            return *why = "INT8 needs 4-byte aligned A, B, C and D", CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->a_scale || d->b_scale || d->c_scale || d->d_scale ||
        d->a_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
        d->b_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        return *why = "scale pointers and modes are for FP8 inputs", CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

/* The documented rules, for the heuristic (pointers NULL: their alignment comes from
 * the preference) and for the matmul itself. */
cublasStatus_t check(const cublasLtMatmulDescOpaque_emu *d, const cublasLtMatrixLayoutOpaque_emu *a,
                     const cublasLtMatrixLayoutOpaque_emu *b, const cublasLtMatrixLayoutOpaque_emu *c,
                     const cublasLtMatrixLayoutOpaque_emu *dl, const unsigned align[4],
                     problem *p, const char **why)
{
    if (!d || !a || !b || !c || !dl)
        return *why = "NULL descriptor", CUBLAS_STATUS_INVALID_VALUE;
    bool i8 = d->compute == CUBLAS_COMPUTE_32I;
    if (!i8 && (d->compute != CUBLAS_COMPUTE_32F || d->scale_type != CUDA_R_32F))
        return *why = "compute/scale type outside the stand-in (COMPUTE_32F with R_32F, "
                      "COMPUTE_32I)",
               CUBLAS_STATUS_NOT_SUPPORTED;
    uint64_t m = dl->rows, n = dl->cols;
    uint64_t am = d->opa == CUBLAS_OP_N ? a->rows : a->cols, ak = d->opa == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t bk = d->opb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->opb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != m || bn != n || ak != bk || c->rows != m || c->cols != n)
        return *why = "operand shapes do not agree", CUBLAS_STATUS_INVALID_VALUE;
    if (a->ld < (int64_t)a->rows || b->ld < (int64_t)b->rows || c->ld < (int64_t)c->rows ||
        dl->ld < (int64_t)dl->rows)
        return *why = "a leading dimension is smaller than the rows", CUBLAS_STATUS_INVALID_VALUE;
    if (c->type != dl->type || c->ld != dl->ld)
        return *why = "C and D differ in type or layout (the stand-in needs C == D)",
               CUBLAS_STATUS_NOT_SUPPORTED;
    p->m = m, p->n = n, p->k = ak;
    p->i8 = i8;
    if (i8 || a->type == CUDA_R_8I || b->type == CUDA_R_8I) {
        p->fp8 = p->block = false;
        if (!i8)
            return *why = "int8 inputs need COMPUTE_32I", CUBLAS_STATUS_NOT_SUPPORTED;
        return check_int8(d, a, b, c, align, p, why);
    }
    p->fp8 = is_fp8(a->type) || is_fp8(b->type);
    bool scalar_modes = d->a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
                        d->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    p->block = !scalar_modes;
    if (!p->fp8 && a->type == CUDA_R_32F) {
        if (b->type != CUDA_R_32F || dl->type != CUDA_R_32F)
            return *why = "fp32 A needs fp32 B and D", CUBLAS_STATUS_NOT_SUPPORTED;
        if (!scalar_modes || d->a_scale || d->b_scale)
            return *why = "scales are for FP8 inputs", CUBLAS_STATUS_NOT_SUPPORTED;
        for (int i = 0; i < 4; i++)
            if (align[i] < 4)
                return *why = "fp32 operands must be 4-byte aligned", CUBLAS_STATUS_INVALID_VALUE;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!p->fp8) {
        if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF)
            return *why = "input types outside the stand-in (FP32, BF16 x BF16 or FP8)",
                   CUBLAS_STATUS_NOT_SUPPORTED;
        if (dl->type != CUDA_R_16BF && dl->type != CUDA_R_32F)
            return *why = "BF16 inputs need D bf16 or fp32", CUBLAS_STATUS_NOT_SUPPORTED;
        if (!scalar_modes)
            return *why = "block scaling needs FP8 inputs", CUBLAS_STATUS_NOT_SUPPORTED;
        if (d->a_scale || d->b_scale)
            return *why = "A/B scale pointers are for FP8 inputs", CUBLAS_STATUS_NOT_SUPPORTED;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!is_fp8(a->type) || !is_fp8(b->type))
        return *why = "FP8 with a non-FP8 operand", CUBLAS_STATUS_NOT_SUPPORTED;
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major * 10 + minor < 89)
        return *why = "FP8 GEMMs need compute capability 8.9 or later", CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2)
        return *why = "E5M2 x E5M2 has no FP8 kernel (one operand must be E4M3)",
               CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->opa != CUBLAS_OP_T || d->opb != CUBLAS_OP_N)
        return *why = "FP8 needs the TN form (A transposed, B not)", CUBLAS_STATUS_NOT_SUPPORTED;
    if (dl->type != CUDA_R_32F && dl->type != CUDA_R_16BF)
        return *why = "FP8 output types other than fp32/bf16 are not in the stand-in",
               CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->ld % 16 || b->ld % 16 || ((uint64_t)dl->ld * type_bytes(dl->type)) % 16 || p->k % 16)
        return *why = "FP8 needs leading dimensions of 16 bytes and k a multiple of 16",
               CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 4; i++)
        if (align[i] < 16)
            return *why = "FP8 needs 16-byte aligned A, B, C and D", CUBLAS_STATUS_NOT_SUPPORTED;
    if (p->block) {
        bool a_ok = d->a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
                    d->a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        bool b_ok = d->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
                    d->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        if (!a_ok || !b_ok)
            return *why = "block scaling needs both A and B block-scaled (VEC128 or BLK128x128)",
                   CUBLAS_STATUS_NOT_SUPPORTED;
        if (d->a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
            d->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
            return *why = "128x128 block scales on both A and B", CUBLAS_STATUS_NOT_SUPPORTED;
        if (d->c_scale || d->d_scale)
            return *why = "block scaling takes no C/D scale", CUBLAS_STATUS_NOT_SUPPORTED;
        if ((d->a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F && m % 8) ||
            (d->b_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F && n % 8))
            return *why = "1x128 block scales over an outer dimension that is not a multiple "
                          "of 8 (pad the tokens)",
                   CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

float load(const void *p, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16BF: return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: {
        __half_raw h = __nv_cvt_fp8_to_halfraw(((const uint8_t *)p)[i],
                                               t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
        /* fp16 bits -> float (exact) */
        unsigned s = (h.x >> 15) & 1u, e = (h.x >> 10) & 31u, f = h.x & 1023u;
        float v = e == 31 ? (f ? NAN : INFINITY)
                  : e == 0 ? ldexpf((float)f, -24)
                           : ldexpf((float)(f | 1024u), (int)e - 25);
        return s ? -v : v;
    }
    default: return NAN;
    }
}

void store(void *p, cudaDataType_t t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = __float2bfloat16_rn(v).x;
}

/* Keeps ACC_BITS significant bits, dropping the rest (toward zero). */
double acc_round(double v)
{
    if (v == 0.0 || !std::isfinite(v))
        return v;
    int e;
    double fr = frexp(v, &e);
    return ldexp(trunc(ldexp(fr, ACC_BITS)), e - ACC_BITS);
}

/* Scale of operand X (rows = outer index i, k block kb) for a block-scaling mode; outer
 * is m for A and n for B. Layouts as documented for cuBLASLt 12.9: VEC128_32F, one scale
 * per outer index and 128 of k, outer index contiguous (kb * outer + i); BLK128x128_32F,
 * one per 128 x 128 block, k blocks contiguous with their count padded to a multiple of
 * 4 ((i / 128) * round_up(KB, 4) + kb). PROBE: both layouts. */
float block_scale(const float *s, int32_t mode, uint64_t outer, uint64_t KB, uint64_t i,
                  uint64_t kb)
{
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
        return s[kb * outer + i];
    return s[(i / BLOCK) * ((KB + 3) / 4 * 4) + kb];
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    int n = 0;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void)
{
    const char *v = getenv("DLLM_EMU_CUBLASLT_VERSION");
    if (v && *v) {
        char *end = NULL;
        unsigned long x = strtoul(v, &end, 10);
        if (end && !*end && x > 0)
            return x;
        fprintf(stderr, "dllm-rl: cuBLASLt stand-in: DLLM_EMU_CUBLASLT_VERSION '%s': expected "
                        "major * 10000 + minor * 100 + patch (e.g. 120800)\n", v);
        exit(2);
    }
    return CUBLAS_VERSION;
}

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    *d = new cublasLtMatmulDescOpaque_emu();
    (*d)->compute = compute;
    (*d)->scale_type = scale;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t size)
{
    if (!d || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (size != sizeof(int32_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        int32_t op;
        memcpy(&op, buf, sizeof op);
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (op == CUBLAS_OP_C)
            op = CUBLAS_OP_T; /* real types: conjugate transpose is the transpose */
        (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->opa : d->opb) = op;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: {
        if (size != sizeof(void *))
            return CUBLAS_STATUS_INVALID_VALUE;
        const void *p;
        memcpy(&p, buf, sizeof p);
        const void **slot = a == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER   ? &d->a_scale
                            : a == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER ? &d->b_scale
                            : a == CUBLASLT_MATMUL_DESC_C_SCALE_POINTER ? &d->c_scale
                                                                        : &d->d_scale;
        *slot = p;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: {
        if (size != sizeof(int32_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        int32_t mode;
        memcpy(&mode, buf, sizeof mode);
        if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
            mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F &&
            mode != CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
            return unimplemented("scale mode", mode);
        (a == CUBLASLT_MATMUL_DESC_A_SCALE_MODE ? d->a_mode : d->b_mode) = mode;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
        if (size != sizeof(int8_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->fast_accum, buf, 1);
        return d->fast_accum ? unimplemented("fast accumulation", 1) : CUBLAS_STATUS_SUCCESS;
    default: return unimplemented("matmul descriptor attribute", (long)a);
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (type_bytes(type) == 0)
        return unimplemented("data type", (long)type);
    *l = new cublasLtMatrixLayoutOpaque_emu{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    *p = new cublasLtMatmulPreferenceOpaque_emu{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t size)
{
    if (!p || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != sizeof(uint64_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->max_workspace, buf, sizeof p->max_workspace);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
        a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (size != sizeof(uint32_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, sizeof(uint32_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    return unimplemented("preference attribute", (long)a);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *returned)
{
    dllm_emu::count_heuristic();
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!p || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    unsigned align[4];
    for (int i = 0; i < 4; i++)
        align[i] = p->align[i];
    problem pr;
    const char *why = "";
    cublasStatus_t s = check(d, a, b, c, dl, align, &pr, &why);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s == CUBLAS_STATUS_NOT_SUPPORTED ? CUBLAS_STATUS_NOT_SUPPORTED : s;
    memset(&results[0], 0, sizeof results[0]);
    /* the algorithm remembers what it was chosen for: the alignment it may assume */
    results[0].algo.data[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        results[0].algo.data[1 + i] = align[i];
    results[0].algo.data[5] = pr.m;
    results[0].algo.data[6] = pr.n;
    results[0].algo.data[7] = pr.k;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t la, const void *B,
                              cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                              cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t s)
{
    (void)s;
    dllm_emu::count_matmul();
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !A || !B || !D || (workspace_bytes && !workspace))
        return CUBLAS_STATUS_INVALID_VALUE;
    unsigned align[4] = {ptr_align(A), ptr_align(B), ptr_align(C ? C : D), ptr_align(D)};
    problem pr;
    const char *why = "";
    cublasStatus_t st = check(d, la, lb, lc, ld, align, &pr, &why);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (algo) {
        if (algo->data[0] != ALGO_MAGIC)
            return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < 4; i++)
            if (align[i] < algo->data[1 + i])
                return CUBLAS_STATUS_INVALID_VALUE; /* PROBE: the real status */
    }
    const bool beta_nz = pr.i8 ? *(const int32_t *)beta != 0 : *(const float *)beta != 0.0f;
    size_t ea = type_bytes(la->type), eb = type_bytes(lb->type), ed = type_bytes(ld->type);
    if (!dllm_emu::is_device_range(A, (la->ld * (la->cols - 1) + la->rows) * ea) ||
        !dllm_emu::is_device_range(B, (lb->ld * (lb->cols - 1) + lb->rows) * eb) ||
        !dllm_emu::is_device_range(D, (ld->ld * (ld->cols - 1) + ld->rows) * ed) ||
        (pr.i8 && beta_nz && !C) ||
        (C && beta_nz && !dllm_emu::is_device_range(C, (lc->ld * (lc->cols - 1) + lc->rows) * ed))) {
        fprintf(stderr, "dllm-rl: cuBLASLt stand-in: an operand is not inside one device "
                        "allocation\n");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const uint64_t m = pr.m, n = pr.n, K = pr.k;
    const bool ta = d->opa != CUBLAS_OP_N, tb = d->opb != CUBLAS_OP_N;
    if (pr.i8) { /* TN: A (k, m) column-major read transposed, B (k, n) */
        const int32_t al = *(const int32_t *)alpha, be = *(const int32_t *)beta;
        const int8_t *a8 = (const int8_t *)A, *b8 = (const int8_t *)B;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                int64_t acc = 0;
                for (uint64_t k = 0; k < K; k++)
                    acc += (int64_t)a8[k + i * (uint64_t)la->ld] * b8[k + j * (uint64_t)lb->ld];
                int64_t r = (int64_t)al * acc;
                if (be != 0)
                    r += (int64_t)be * ((const int32_t *)C)[i + j * (uint64_t)lc->ld];
                ((int32_t *)D)[i + j * (uint64_t)ld->ld] = (int32_t)(uint32_t)(uint64_t)r;
            }
        return CUBLAS_STATUS_SUCCESS;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    auto aat = [&](uint64_t i, uint64_t k) {
        return load(A, la->type, ta ? k + i * (uint64_t)la->ld : i + k * (uint64_t)la->ld);
    };
    auto bat = [&](uint64_t k, uint64_t j) {
        return load(B, lb->type, tb ? j + k * (uint64_t)lb->ld : k + j * (uint64_t)lb->ld);
    };
    const uint64_t KB = (K + BLOCK - 1) / BLOCK;
    float sa = 1.0f, sb = 1.0f;
    if (pr.fp8 && !pr.block) {
        if (d->a_scale)
            sa = *(const float *)d->a_scale;
        if (d->b_scale)
            sb = *(const float *)d->b_scale;
    }
    if (pr.block && (!d->a_scale || !d->b_scale))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            if (!pr.fp8) {
                for (uint64_t k = 0; k < K; k++)
                    acc += aat(i, k) * bat(k, j);
            } else {
                for (uint64_t k0 = 0; k0 < K; k0 += PROMOTE_K) {
                    double part = 0.0;
                    for (uint64_t s0 = k0; s0 < K && s0 < k0 + PROMOTE_K; s0 += STEP_K) {
                        double step = 0.0; /* exact: products of fp8 values */
                        for (uint64_t k = s0; k < K && k < s0 + STEP_K; k++)
                            step += (double)aat(i, k) * (double)bat(k, j);
                        part = acc_round(part + step);
                    }
                    if (pr.block) {
                        uint64_t kb = k0 / BLOCK;
                        float bsa = block_scale((const float *)d->a_scale, d->a_mode, m, KB, i, kb);
                        float bsb = block_scale((const float *)d->b_scale, d->b_mode, n, KB, j, kb);
                        acc += (float)part * bsa * bsb;
                    } else {
                        acc += (float)part;
                    }
                }
                acc = acc * sa * sb;
            }
            size_t di = i + j * (uint64_t)ld->ld;
            float r = al * acc;
            if (be != 0.0f)
                r += be * load(C, lc->type, i + j * (uint64_t)lc->ld);
            store(D, ld->type, di, r);
        }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
