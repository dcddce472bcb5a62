/* backend_record.c: the recording backend (record.h).
 *
 * Each entry mirrors the CUDA backend's entry of the same name (kernels/cuda/
 * backend_cuda.cu) and the launch helpers it calls (the kernels/cuda sources): the same kernels in
 * the same order, the same cuBLASLt matmuls (FP8 GEMMs reading the weight scales where the
 * quantiser stored them, the rows of an unaligned token count copied out of the padded
 * product), its workspace grown (after a device sync) exactly when it grows, cuBLASLt's
 * 32 MiB on the first matmul, and the blocking copies of upload, download and the norm.
 * Bytes are the compulsory traffic (each operand read once, each result written once);
 * FLOPs count a multiply-add as 2. A change to the CUDA backend's calls is a change here:
 * tests/unit/test_record.c runs both under the CUDA emulation and compares them call by call. */
#include "kernels/record/record.h"

#include "kernels/attention_path.h"
#include "kernels/base.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rec_unit_names[REC_NUNITS] = {"fp8_tensor_core", "bf16_tensor_core",
                                                "tf32_tensor_core", "fp32_cuda_core",
                                                "memory_bound", "int8_tensor_core"};
const char *const rec_kind_names[REC_NKINDS] = {"kernel", "matmul", "copy", "h2d", "d2h",
                                                "sync",   "alloc",  "free"};

enum { LT_WORKSPACE = 32 << 20 }; /* kernels/cuda/gemm_cublaslt.cu WORKSPACE_BYTES */
#define WS_FIRST ((size_t)1 << 20) /* backend_cuda.cu ws_get's first size */

typedef struct {
    uintptr_t key;
    size_t bytes;
    int tag;              /* its index in the recorder's tags */
} slot;

#define REC_MAX_TAGS 32

typedef struct {
    dllm_backend be;
    dllm_backend *inner;
    bool block_fp8;
    rec_event *ev;
    size_t n, cap;
    int64_t live, peak;
    slot *tab;            /* allocation sizes by address (open addressing) */
    size_t tcap, tn;
    uintptr_t next;       /* the next address handed out without an inner backend */
    size_t ws_bytes, qa_bytes; /* the CUDA backend's workspace and fused-FP8 buffer */
    void *ws, *qa;        /* their addresses here (ours even over an inner backend) */
    bool lt;              /* cuBLASLt's workspace allocated */
    const char *op;       /* the entry being recorded */
    const char *tags[REC_MAX_TAGS]; /* allocation labels, as first used ([0]: untagged) */
    int ntags, tag;       /* how many; the current one */
    int64_t tag_live[REC_MAX_TAGS], tag_peak[REC_MAX_TAGS]; /* live bytes by tag: now, at the peak */
    rec_call_hook hook;
    void *hook_ctx;
} recorder;

static recorder *R(dllm_backend *be) { return (recorder *)be->impl; }
static const recorder *RC(const dllm_backend *be) { return (const recorder *)be->impl; }

/* ---- the event list ------------------------------------------------------------------- */

static rec_event *emit(recorder *r, rec_kind k, rec_unit u, const char *what, double flops,
                       double rd, double wr, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static rec_event *emit(recorder *r, rec_kind k, rec_unit u, const char *what, double flops,
                       double rd, double wr, const char *fmt, ...)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->ev = dllm_realloc(r->ev, r->cap * sizeof *r->ev);
    }
    rec_event *e = &r->ev[r->n++];
    memset(e, 0, sizeof *e);
    e->op = r->op ? r->op : "";
    e->what = what;
    e->kind = k;
    e->unit = u;
    e->flops = flops;
    e->rd = rd;
    e->wr = wr;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->shape, sizeof e->shape, fmt, ap);
    va_end(ap);
    return e;
}

/* ---- allocations: sizes by address ---------------------------------------------------- */

static size_t hash_at(uintptr_t k, size_t cap) { return (size_t)((k >> 8) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static void tab_put(recorder *r, uintptr_t k, size_t bytes, int tag)
{
    if (2 * (r->tn + 1) > r->tcap) {
        size_t oc = r->tcap, nc = oc ? 2 * oc : 1024;
        slot *old = r->tab;
        r->tab = dllm_calloc(nc, sizeof *r->tab);
        r->tcap = nc;
        r->tn = 0;
        for (size_t i = 0; i < oc; i++)
            if (old[i].key)
                tab_put(r, old[i].key, old[i].bytes, old[i].tag);
        free(old);
    }
    size_t i = hash_at(k, r->tcap);
    while (r->tab[i].key && r->tab[i].key != k)
        i = (i + 1) & (r->tcap - 1);
    if (!r->tab[i].key)
        r->tn++;
    r->tab[i] = (slot){k, bytes, tag};
}

/* The size of k's allocation (its tag in *tag), removed (backward-shift deletion); 0 when
 * unknown. */
static size_t tab_take(recorder *r, uintptr_t k, int *tag)
{
    *tag = 0;
    if (!r->tcap)
        return 0;
    size_t i = hash_at(k, r->tcap);
    while (r->tab[i].key && r->tab[i].key != k)
        i = (i + 1) & (r->tcap - 1);
    if (!r->tab[i].key)
        return 0;
    size_t bytes = r->tab[i].bytes;
    *tag = r->tab[i].tag;
    r->tab[i].key = 0;
    r->tn--;
    for (size_t j = (i + 1) & (r->tcap - 1); r->tab[j].key; j = (j + 1) & (r->tcap - 1)) {
        slot s = r->tab[j];
        r->tab[j].key = 0;
        r->tn--;
        tab_put(r, s.key, s.bytes, s.tag);
    }
    return bytes;
}

static int tag_index(recorder *r, const char *tag)
{
    if (!tag)
        return 0;
    for (int i = 0; i < r->ntags; i++)
        if (r->tags[i] == tag || !strcmp(r->tags[i], tag))
            return i;
    if (r->ntags == REC_MAX_TAGS)
        return 0;
    r->tags[r->ntags] = tag;
    return r->ntags++;
}

/* cudaMalloc of bytes (inner: its pointer p; else an address of our own), labelled with
 * tag (NULL: the current one). */
static void *dev_malloc_as(recorder *r, size_t bytes, void *p, const char *tag)
{
    size_t b = bytes ? bytes : 1;
    if (!p) {
        p = (void *)r->next;
        r->next += (b + 511) / 256 * 256; /* 256-aligned, never reused */
    }
    int t = tag ? tag_index(r, tag) : r->tag;
    tab_put(r, (uintptr_t)p, b, t);
    r->live += (int64_t)b;
    r->tag_live[t] += (int64_t)b;
    if (r->live > r->peak) {
        r->peak = r->live;
        memcpy(r->tag_peak, r->tag_live, sizeof r->tag_peak);
    }
    emit(r, REC_ALLOC, REC_UNIT_MEMORY, "cudaMalloc", 0, 0, 0, "%zu bytes", b)->bytes =
        (int64_t)b;
    return p;
}

static void *dev_malloc(recorder *r, size_t bytes, void *p) { return dev_malloc_as(r, bytes, p, NULL); }

static void dev_free(recorder *r, const void *p)
{
    if (!p)
        return;
    int t;
    size_t b = tab_take(r, (uintptr_t)p, &t);
    r->live -= (int64_t)b;
    r->tag_live[t] -= (int64_t)b;
    emit(r, REC_FREE, REC_UNIT_MEMORY, "cudaFree", 0, 0, 0, "%zu bytes", b)->bytes = (int64_t)b;
}

static void host_sync(recorder *r, const char *what)
{
    emit(r, REC_SYNC, REC_UNIT_MEMORY, what, 0, 0, 0, "device");
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/* backend_cuda.cu's ws_get: grows (after a sync) only when too small */
static void ws_get(recorder *r, size_t bytes)
{
    if (bytes <= r->ws_bytes)
        return;
    size_t nb = r->ws_bytes ? r->ws_bytes : WS_FIRST;
    while (nb < bytes)
        nb *= 2;
    host_sync(r, "cudaDeviceSynchronize");
    dev_free(r, r->ws);
    r->ws = dev_malloc_as(r, nb, NULL, "backend workspace"); /* the inner backend grows its own alike */
    r->ws_bytes = nb;
}

static size_t begin(recorder *r, const char *op)
{
    r->op = op;
    return r->n;
}

static void end(recorder *r, size_t n0)
{
    if (r->hook)
        r->hook(r->hook_ctx, r->op, r->ev + n0, r->n - n0);
    r->op = NULL;
}

#define IN (r->inner)
#define INOPS (r->inner->ops)

static void kernel(recorder *r, const char *what, double flops, double rd, double wr,
                   const char *shape)
{
    emit(r, REC_KERNEL, REC_UNIT_MEMORY, what, flops, rd, wr, "%s", shape);
}

static void dev_copy(recorder *r, const char *what, double rd, double wr, size_t bytes)
{
    emit(r, REC_COPY, REC_UNIT_MEMORY, what, 0, rd, wr, "%zu bytes", bytes);
}

/* one cuBLASLt matmul (its workspace on the first) */
static rec_event *matmul(recorder *r, const char *what, rec_unit u, double M, double N, double K,
                         double rd, double wr)
{
    if (!r->lt) {
        r->lt = true;
        dev_malloc_as(r, LT_WORKSPACE, NULL, "cuBLASLt workspace");
    }
    rec_event *e = emit(r, REC_MATMUL, u, what, 2 * M * N * K, rd, wr, "M=%.0f N=%.0f K=%.0f",
                        M, N, K);
    e->dense = true;
    return e;
}

/* cu_gemm: dllm_cuda_gemm_f32 (CUBLAS_COMPUTE_32F on fp32 operands: CUDA cores) */
static rec_event *gemm_f32(recorder *r, int M, int N, int K, float beta, const void *weight,
                           double wbytes)
{
    if (M <= 0 || N <= 0)
        return NULL;
    if (K <= 0) {
        fprintf(stderr, "dllm-rl: cuda backend: gemm with K=%d\n", K);
        exit(1);
    }
    double m = M, n = N, k = K;
    rec_event *e = matmul(r, "gemm_f32", REC_UNIT_FP32_CORE, m, n, k,
                          4 * (m * k + k * n) + (beta != 0.0f ? 4 * m * n : 0), 4 * m * n);
    e->weight = weight;
    e->weight_bytes = weight ? wbytes : 0;
    return e;
}

/* dllm_cuda_fp8_quantise over R x C in br x bc blocks: one kernel for row-local groups
 * (br 1), else zero, amax, scale, encode */
static void fp8_quant(recorder *r, int R, int C, int br, int bc, const char *src)
{
    double n = (double)R * C, ns = (double)((R + br - 1) / br) * ((C + bc - 1) / bc);
    char sh[64];
    snprintf(sh, sizeof sh, "R=%d C=%d block %dx%d%s", R, C, br, bc, src);
    double in = strcmp(src, " bf16") ? 4 : 2;
    if ((br > R ? R : br) == 1) {
        kernel(r, "fp8_quant_rows", 4 * n, in * n, n + 4 * ns, sh);
        return;
    }
    kernel(r, "fp8_zero_slots", 0, 0, 4 * ns, sh);
    kernel(r, "fp8_amax", n, in * n, 4 * ns, sh);
    kernel(r, "fp8_scale_from_amax", ns, 4 * ns, 4 * ns, sh);
    kernel(r, "fp8_encode", 2 * n, in * n + 4 * ns, n, sh);
}

static void fp8_dequant(recorder *r, int R, int C)
{
    char sh[64];
    snprintf(sh, sizeof sh, "R=%d C=%d", R, C);
    double n = (double)R * C;
    kernel(r, "fp8_dequant", n, n, 4 * n, sh);
}

/* ---- buffers -------------------------------------------------------------------------- */

static void *rc_alloc(dllm_backend *be, size_t bytes)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "alloc");
    void *p = IN ? INOPS->alloc(IN, bytes) : NULL;
    p = dev_malloc(r, bytes, p);
    dev_copy(r, "cudaMemset", 0, (double)(bytes ? bytes : 1), bytes ? bytes : 1);
    end(r, n0);
    return p;
}

static void rc_free(dllm_backend *be, void *p)
{
    recorder *r = R(be);
    if (!p)
        return;
    size_t n0 = begin(r, "free");
    dev_free(r, p);
    if (IN)
        INOPS->free(IN, p);
    end(r, n0);
}

static void rc_upload(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "upload");
    if (bytes)
        emit(r, REC_H2D, REC_UNIT_MEMORY, "cudaMemcpy", 0, 0, (double)bytes, "%zu bytes",
             bytes)->xfer = (double)bytes;
    if (IN)
        INOPS->upload(IN, dst, src, bytes);
    end(r, n0);
}

static void rc_download(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "download");
    if (bytes)
        emit(r, REC_D2H, REC_UNIT_MEMORY, "cudaMemcpy", 0, (double)bytes, 0, "%zu bytes",
             bytes)->xfer = (double)bytes;
    if (IN)
        INOPS->download(IN, dst, src, bytes);
    else if (bytes)
        memset(dst, 0, bytes); /* nothing was computed */
    end(r, n0);
}

static void rc_memset0(dllm_backend *be, void *p, size_t bytes)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "memset0");
    if (bytes)
        dev_copy(r, "cudaMemset", 0, (double)bytes, bytes);
    if (IN)
        INOPS->memset0(IN, p, bytes);
    end(r, n0);
}

static void rc_sync(dllm_backend *be)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "sync");
    host_sync(r, "cudaDeviceSynchronize");
    if (IN)
        INOPS->sync(IN);
    end(r, n0);
}

/* ---- GEMM and linear layers ----------------------------------------------------------- */

static void rc_gemm(dllm_backend *be, bool tA, bool tB, int M, int N, int K, float alpha,
                    const float *A, const float *B, float beta, float *C)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gemm");
    gemm_f32(r, M, N, K, beta, NULL, 0);
    if (IN)
        INOPS->gemm(IN, tA, tB, M, N, K, alpha, A, B, beta, C);
    end(r, n0);
}

static void elementwise(recorder *r, const char *what, size_t n, double flops, double rd,
                        double wr);

/* cu_gemm_bf16: both operands rounded into the workspace and cuBLASLt's BF16 GEMM, or
 * (16-byte rules broken) rounded fp32 copies through the fp32 GEMM */
static void gemm_bf16_ops(recorder *r, bool tA, bool tB, int M, int N, int K, float beta,
                          const float *C)
{
    if (M > 0 && N > 0) {
        if (K <= 0) {
            fprintf(stderr, "dllm-rl: cuda backend: gemm_bf16 with K=%d\n", K);
            exit(1);
        }
        size_t na = (size_t)M * K, nb = (size_t)K * N;
        int lda = tA ? M : K, ldb = tB ? K : N;
        if (lda % 8 == 0 && ldb % 8 == 0 && N % 4 == 0 && (uintptr_t)C % 16 == 0) {
            double m = M, n = N, k = K;
            ws_get(r, align256(na * 2) + align256(nb * 2));
            elementwise(r, "f32_to_bf16", na, 1, 4, 2);
            elementwise(r, "f32_to_bf16", nb, 1, 4, 2);
            matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, m, n, k,
                   2 * (m * k + k * n) + (beta != 0.0f ? 4 * m * n : 0), 4 * m * n);
        } else {
            ws_get(r, align256(na * 4) + align256(nb * 4));
            dev_copy(r, "cudaMemcpy D2D", 4.0 * na, 4.0 * na, 4 * na);
            dev_copy(r, "cudaMemcpy D2D", 4.0 * nb, 4.0 * nb, 4 * nb);
            elementwise(r, "round_bf16", na, 1, 4, 4);
            elementwise(r, "round_bf16", nb, 1, 4, 4);
            gemm_f32(r, M, N, K, beta, NULL, 0);
        }
    }
}

static void rc_gemm_bf16(dllm_backend *be, bool tA, bool tB, int M, int N, int K, float alpha,
                         const float *A, const float *B, float beta, float *C)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gemm_bf16");
    gemm_bf16_ops(r, tA, tB, M, N, K, beta, C);
    if (IN)
        INOPS->gemm_bf16(IN, tA, tB, M, N, K, alpha, A, B, beta, C);
    end(r, n0);
}

static void rc_linear_fwd(dllm_backend *be, float *out, const float *inp, const float *w, int N,
                          int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "linear_fwd");
    gemm_f32(r, N, OC, C, 0.0f, w, 4.0 * OC * C);
    if (IN)
        INOPS->linear_fwd(IN, out, inp, w, N, C, OC);
    end(r, n0);
}

static void rc_linear_bwd(dllm_backend *be, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "linear_bwd");
    if (dinp)
        gemm_f32(r, N, C, OC, 1.0f, w, 4.0 * OC * C);
    if (dw)
        gemm_f32(r, OC, C, N, 1.0f, NULL, 0);
    if (IN)
        INOPS->linear_bwd(IN, dinp, dw, dout, inp, w, N, C, OC);
    end(r, n0);
}

/* backend_cuda.cu's fp8_gemm_path */
static bool fp8_gemm_path(const recorder *r, const fp8_matrix *w, int C, int OC, bool *block)
{
    bool tensor = w->scaling == FP8_SCALE_TENSOR && w->act_scaling == FP8_SCALE_TENSOR;
    *block = w->scaling == FP8_SCALE_BLOCK && w->act_scaling == FP8_SCALE_GROUP;
    return (tensor || *block) && C % 16 == 0 && OC % 16 == 0;
}

/* backend_cuda.cu's fp8_require_block (the reason comes from the library there) */
static void fp8_require_block(const recorder *r, const fp8_matrix *w)
{
    if (w->scaling != FP8_SCALE_BLOCK || r->block_fp8)
        return;
    fprintf(stderr, "dllm-rl: rollout.fp8.scaling: block: the recorded device has no "
                    "block-scaled FP8 GEMMs; use rollout.fp8.scaling: tensor or a newer CUDA "
                    "toolkit\n");
    exit(2);
}

static size_t KBLK(int C) { return ((size_t)C + 127) / 128; }
/* backend_cuda.cu's fp8_rows: block-scaled GEMMs run over tokens padded to 8 */
static int fp8_rows(int N, bool block) { return block ? (N + 7) / 8 * 8 : N; }

/* fp8_gemm_run: the FP8 matmul over Np = fp8_rows(N) tokens, the weight's scales read in
 * place (cuBLASLt's padded layout), the first N rows copied out of a padded product; res: a
 * residual added, read once as the epilogue's C (unpadded rows), else by add after the copy */
static void fp8_gemm_run(recorder *r, const fp8_matrix *w, bool block, int N, int C, int OC,
                         bool res)
{
    size_t KB = KBLK(C), OB = ((size_t)OC + 127) / 128, ld = (KB + 3) / 4 * 4;
    const int Np = fp8_rows(N, block);
    double n = Np, c = C, oc = OC;
    double scales = block ? 4 * (n * KB + (double)OB * ld) : 8;
    const bool epi = res && Np == N;
    rec_event *e = matmul(r, "fp8_gemm", REC_UNIT_FP8_TC, n, oc, c,
                          n * c + oc * c + scales + (epi ? 4 * n * oc : 0), 4 * n * oc);
    snprintf(e->shape, sizeof e->shape, "N=%d C=%d OC=%d %s", Np, C, OC,
             block ? "block" : "tensor");
    e->weight = w->q;
    e->weight_bytes = oc * c + 4.0 * (block ? (double)OB * ld : 1);
    if (Np != N)
        dev_copy(r, "pad_rows_out", 4.0 * N * OC, 4.0 * N * OC, (size_t)N * OC * 4);
    if (res && !epi)
        elementwise(r, "add", (size_t)N * OC, 1, 8, 4);
}

static void fp8_check_weight(const fp8_matrix *w, int C, int OC)
{
    if (!w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: fp8 weight is [%d, %d], call expects [%d, %d]\n",
                w->rows, w->cols, OC, C);
        exit(1);
    }
}

/* backend_cuda.cu's fp8_linear: fp8_linear_fwd, with a residual added when res */
static void fp8_linear(recorder *r, fp8_matrix *w, int N, int C, int OC, bool res)
{
    fp8_check_weight(w, C, OC);
    if (N > 0) {
        if (w->format == FP8_E5M2) { /* the CUDA backend's refusal, word for word */
            fprintf(stderr, "dllm-rl: rollout.fp8.format: e5m2 for weights and activations has "
                            "no cuBLASLt FP8 GEMM (E5M2 x E5M2); use e4m3\n");
            exit(2);
        }
        const size_t na = (size_t)N * C;
        int abr, abc;
        fp8_block_shape(w->act_scaling, N, C, &abr, &abc);
        int aSR = (N + abr - 1) / abr, aSC = (C + abc - 1) / abc;
        bool block = false;
        fp8_require_block(r, w);
        if (fp8_gemm_path(r, w, C, OC, &block)) {
            const int Np = fp8_rows(N, block);
            size_t nap = (size_t)Np * C, nas = block ? (size_t)Np * KBLK(C) : 1;
            size_t npad = Np != N ? (size_t)Np * OC : 0;
            ws_get(r, align256(nap) + align256(nas * 4) + align256(npad * 4));
            fp8_quant(r, N, C, abr, abc, "");
            fp8_gemm_run(r, w, block, N, C, OC, res);
        } else { /* the CPU's definition on the device: dequantised operands, fp32 GEMM */
            size_t nw = (size_t)OC * C;
            ws_get(r, align256(nw * 4) + align256(na * 4) + align256(na) +
                          align256((size_t)aSR * aSC * 4));
            fp8_dequant(r, OC, C);
            fp8_quant(r, N, C, abr, abc, "");
            fp8_dequant(r, N, C);
            gemm_f32(r, N, OC, C, 0.0f, w->q, (double)OC * C);
            if (res)
                elementwise(r, "add", (size_t)N * OC, 1, 8, 4);
        }
    }
}

static void rc_fp8_linear_fwd(dllm_backend *be, float *out, const float *inp, fp8_matrix *w,
                              int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "fp8_linear_fwd");
    fp8_linear(r, w, N, C, OC, false);
    if (IN)
        INOPS->fp8_linear_fwd(IN, out, inp, w, N, C, OC);
    end(r, n0);
}

static void int8_check_weight(const int8_matrix *w, int C, int OC)
{
    if (!w || !w->q || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: int8 weight is [%d, %d], call expects [%d, %d]\n",
                w ? w->rows : -1, w ? w->cols : -1, OC, C);
        exit(1);
    }
}

/* dllm_cuda_int8_acc_bytes: channel scaling's int32 rows per GEMM (INT8_DEVICE_ACC_ELEMS);
 * block scaling keeps its sums in registers */
static int int8_acc_chunk(int N, const int8_matrix *w)
{
    int chunk = INT8_DEVICE_ACC_ELEMS / ((w->rows + 3) / 4 * 4);
    return chunk < 1 ? 1 : chunk > N ? N : chunk;
}

static size_t int8_acc_bytes(int N, const int8_matrix *w)
{
    return w->scaling == INT8_SCALE_BLOCK
               ? 0
               : align256((size_t)int8_acc_chunk(N, w) * ((w->rows + 3) / 4 * 4) * 4);
}

/* dllm_cuda_int8_linear_codes. Channel: per chunk of rows an INT8 matmul into the int32
 * scratch (its own handle: no cuBLASLt workspace) and the scaling pass into out. Block:
 * int8_block_gemm_kernel, one launch: the tensor-core products of 64 x 64 output tiles
 * over the 128-wide k-blocks, out written once (the scaling's few FLOPs per k-block ride on
 * the products). Its tiles run in groups of 8 row tiles (512 rows) over every column tile:
 * the activations are read once (a group's rows, at most 512 x 14,336 bytes, stay in L2
 * while it runs), the weight once per group. */
static void int8_products(recorder *r, const int8_matrix *w, int N, int OC, bool res)
{
    const int kb = w->kb, ldq = w->ldq, mp = (OC + 3) / 4 * 4;
    char shape[64];
    if (w->scaling == INT8_SCALE_BLOCK) {
        const double groups = (N + 511) / 512, nscale = (double)((OC + 127) / 128) * kb;
        rec_event *e = emit(r, REC_KERNEL, REC_UNIT_INT8_TC, "int8_block_gemm",
                            2.0 * mp * N * (double)kb * INT8_BLOCK,
                            (double)N * ldq + 4.0 * N * kb + groups * ((double)mp * ldq + 4 * nscale) +
                                (res ? 4.0 * N * OC : 0),
                            4.0 * N * OC, "N=%d OC=%d K=%d blocks=%d", N, OC, ldq, kb);
        e->dense = true;
        e->weight = w->q;
        e->weight_bytes = (double)mp * ldq + 4 * nscale;
        return;
    }
    const int chunk = int8_acc_chunk(N, w);
    for (int n0r = 0; n0r < N; n0r += chunk) {
        const int nr = n0r + chunk < N ? chunk : N - n0r;
        rec_event *e = emit(r, REC_MATMUL, REC_UNIT_INT8_TC, "int8_gemm", 2.0 * mp * nr * ldq,
                            (double)nr * ldq + (double)mp * ldq, 4.0 * nr * mp,
                            "M=%d N=%d K=%d", nr, mp, ldq);
        e->dense = true;
        e->weight = w->q;
        e->weight_bytes = (double)mp * ldq + 4.0 * OC;
        snprintf(shape, sizeof shape, "N=%d OC=%d", nr, OC);
        kernel(r, "int8_scale", (3.0 + res) * nr * OC,
               4.0 * nr * mp + 4.0 * nr + 4.0 * OC + (res ? 4.0 * nr * OC : 0), 4.0 * nr * OC,
               shape);
    }
}

/* dllm_cuda_int8_linear (kernels/cuda/gemm_int8.cu): the activation codes in one pass,
 * then the products from them */
static void int8_linear(recorder *r, const int8_matrix *w, int N, int C, int OC, bool res)
{
    int8_check_weight(w, C, OC);
    if (N > 0) {
        const int kb = w->kb, ldq = w->ldq;
        ws_get(r, align256((size_t)N * ldq) + align256((size_t)N * kb * 4) + int8_acc_bytes(N, w));
        char shape[64];
        snprintf(shape, sizeof shape, "N=%d C=%d groups=%d", N, C, kb);
        kernel(r, "int8_act_quant", 2.0 * N * C, 4.0 * N * C, (double)N * ldq + 4.0 * N * kb,
               shape);
        int8_products(r, w, N, OC, res);
    }
}

static void rc_int8_linear_fwd(dllm_backend *be, float *out, const float *inp,
                               const int8_matrix *w, int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "int8_linear_fwd");
    int8_linear(r, w, N, C, OC, false);
    if (IN)
        INOPS->int8_linear_fwd(IN, out, inp, w, N, C, OC);
    end(r, n0);
}

/* ---- normalisation, position, attention, MLP ----------------------------------------- */

static void rc_rmsnorm_fwd(dllm_backend *be, float *out, float *rstd, const float *inp,
                           const float *w, int N, int C, float eps)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rmsnorm_fwd");
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d C=%d", N, C);
        double n = (double)N * C;
        kernel(r, "rmsnorm_fwd", 4 * n, 4 * n + 4.0 * C, 4 * n + (rstd ? 4.0 * N : 0), sh);
    }
    if (IN)
        INOPS->rmsnorm_fwd(IN, out, rstd, inp, w, N, C, eps);
    end(r, n0);
}

static void rc_rmsnorm_bwd(dllm_backend *be, float *dinp, float *dw, const float *dout,
                           const float *inp, const float *w, const float *rstd, int N, int C)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rmsnorm_bwd");
    if (dw) /* dllm_cuda_rmsnorm_bwd_scratch_floats: 64-row chunks of C partial sums */
        ws_get(r, (N > 0 && C > 0 ? (size_t)((N + 63) / 64) * C : 0) * 4);
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d C=%d", N, C);
        double n = (double)N * C, chunks = (N + 63) / 64;
        if (dinp)
            kernel(r, "rmsnorm_dx", 6 * n, 12 * n + 4.0 * C + 4.0 * N, 8 * n, sh);
        if (dw) {
            kernel(r, "rmsnorm_dw_partial", 3 * n, 8 * n + 4.0 * N, 4 * chunks * C, sh);
            kernel(r, "rmsnorm_dw_reduce", chunks * C, 4 * chunks * C + 4.0 * C, 4.0 * C, sh);
        }
    }
    if (IN)
        INOPS->rmsnorm_bwd(IN, dinp, dw, dout, inp, w, rstd, N, C);
    end(r, n0);
}

static void rope(recorder *r, const char *what, int N, int NH, int HD, bool acc)
{
    double total = (double)N * NH * (HD / 2);
    if (total == 0)
        return;
    char sh[64];
    snprintf(sh, sizeof sh, "N=%d NH=%d HD=%d", N, NH, HD);
    kernel(r, what, 6 * total, 8 * total * (acc ? 2 : 1) + 4.0 * N + 8 * total, 8 * total, sh);
}

static void rc_rope_fwd(dllm_backend *be, float *out, const float *inp, const int32_t *pos,
                        const op_rope_table *t, int N, int NH, int HD)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rope_fwd");
    rope(r, "rope", N, NH, HD, false);
    if (IN)
        INOPS->rope_fwd(IN, out, inp, pos, t, N, NH, HD);
    end(r, n0);
}

static void rc_rope_bwd(dllm_backend *be, float *dinp, const float *dout, const int32_t *pos,
                        const op_rope_table *t, int N, int NH, int HD)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rope_bwd");
    rope(r, "rope", N, NH, HD, true);
    if (IN)
        INOPS->rope_bwd(IN, dinp, dout, pos, t, N, NH, HD);
    end(r, n0);
}

static size_t rc_attn_state_floats(dllm_backend *be, int B, int T, int NH)
{
    (void)be;
    return (size_t)B * NH * T; /* the CUDA backend's log-sum-exp */
}

/* Score pairs one head's queries meet: all T x T, or the causal triangle. */
static double att_pairs(int T, bool causal)
{
    return causal ? (double)T * (T + 1) / 2 : (double)T * T;
}

/* The flash-style attention kernels: BF16 tensor cores (kernels/cuda/attention_tc.cu) where
 * the CUDA backend runs them (kernels/attention_path.h: head dims up to 128 unless
 * DLLM_CUDA_ATTENTION=fp32), else the fp32 tiles on CUDA cores of attention.cu. The same
 * launches and the same fp32 tensors read and written either way. */
static void att_kernel(recorder *r, const char *what, double mm, int B, int T, int NH, int NKV,
                       int HD, bool causal, double rd, double wr)
{
    double pairs = (double)B * NH * att_pairs(T, causal);
    rec_unit unit = dllm_cuda_attention_tc(HD) ? REC_UNIT_BF16_TC : REC_UNIT_FP32_CORE;
    rec_event *e = emit(r, REC_KERNEL, unit, what, mm * 2 * pairs * HD, rd, wr,
                        "B=%d T=%d NH=%d NKV=%d HD=%d%s", B, T, NH, NKV, HD,
                        causal ? " causal" : "");
    e->dense = true;
}

static void rc_attention_fwd(dllm_backend *be, float *out, float *state, const float *q,
                             const float *k, const float *v, const uint8_t *keymask, int B,
                             int T, int NH, int NKV, int HD, bool causal)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "attention_fwd");
    double bt = (double)B * T;
    /* QK^T and PV: two products of the query rows with the keys */
    att_kernel(r, "attention_fwd", 2, B, T, NH, NKV, HD, causal,
               4 * bt * (NH + 2.0 * NKV) * HD + (keymask ? bt : 0), 4 * bt * NH * HD + 4 * bt * NH);
    if (IN)
        INOPS->attention_fwd(IN, out, state, q, k, v, keymask, B, T, NH, NKV, HD, causal);
    end(r, n0);
}

/* cu_rope_attention_fwd: one attention kernel that rotates q and k as it loads them: the
 * attention's compulsory traffic plus the rows' positions and the table once (max_pos x
 * HD/2 cosines and sines, a few hundred KB that every head's tiles re-read from cache);
 * the rotation's few FLOPs ride on the tiles' loads */
static void rc_rope_attention_fwd(dllm_backend *be, float *out, float *state, float *q, float *k,
                                  const float *v, const int32_t *pos, const op_rope_table *t,
                                  const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                                  bool causal)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rope_attention_fwd");
    double bt = (double)B * T;
    att_kernel(r, "attention_rope_fwd", 2, B, T, NH, NKV, HD, causal,
               4 * bt * (NH + 2.0 * NKV) * HD + (keymask ? bt : 0) + 4 * bt +
                   4.0 * t->max_pos * HD,
               4 * bt * NH * HD + 4 * bt * NH);
    if (IN)
        INOPS->rope_attention_fwd(IN, out, state, q, k, v, pos, t, keymask, B, T, NH, NKV, HD,
                                  causal);
    end(r, n0);
}

static void elementwise(recorder *r, const char *what, size_t n, double flops, double rd,
                        double wr);

static void rc_kv_append(dllm_backend *be, float *kc, float *vc, uint8_t *cmask, const float *k,
                         const float *v, const uint8_t *newmask, int B, int T, int len,
                         int max_len, int KD)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "kv_append");
    elementwise(r, "kv_append", (size_t)B * T * KD, 2, 4, 4);
    if (IN)
        INOPS->kv_append(IN, kc, vc, cmask, k, v, newmask, B, T, len, max_len, KD);
    end(r, n0);
}

/* Cached attention: T query rows a sequence over the visible slots (the causal triangle
 * after len, or all max_len) -- the forward rows a step computes. */
static void rc_attention_cached(dllm_backend *be, float *y, const float *q, const float *kc,
                                const float *vc, const uint8_t *cmask, int B, int T, int len,
                                int max_len, int NH, int NKV, int HD, bool causal)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "attention_cached");
    double slots = causal ? (double)T * len + (double)T * (T + 1) / 2 : (double)T * max_len;
    double bt = (double)B * T, keys = (double)B * (causal ? len + T : max_len);
    rec_unit unit = dllm_cuda_attention_tc(HD) ? REC_UNIT_BF16_TC : REC_UNIT_FP32_CORE;
    rec_event *e = emit(r, REC_KERNEL, unit, "attention_cached",
                        2.0 * 2 * B * NH * slots * HD, 4 * bt * NH * HD + 8 * keys * NKV * HD,
                        4 * bt * NH * HD, "B=%d T=%d len=%d max_len=%d NH=%d NKV=%d HD=%d%s", B,
                        T, len, max_len, NH, NKV, HD, causal ? " causal" : "");
    e->dense = true;
    if (IN)
        INOPS->attention_cached(IN, y, q, kc, vc, cmask, B, T, len, max_len, NH, NKV, HD, causal);
    end(r, n0);
}

/* cu_attention_bwd's kernels; rope: rotating q, k as loaded and dq, dk as stored, which
 * then write their gradients (no read of them) and read the positions and the table */
static void attention_bwd_ops(recorder *r, bool dq, bool dk, bool dv, int B, int T, int NH,
                              int NKV, int HD, bool causal, const op_rope_table *rope)
{
    ws_get(r, (size_t)B * NH * T * 4);
    if (dq || dk || dv) {
        double bt = (double)B * T, q4 = 4 * bt * NH * HD, kv4 = 4 * bt * NKV * HD;
        double rd = rope ? 4 * bt + 4.0 * rope->max_pos * HD : 0;
        char sh[64];
        snprintf(sh, sizeof sh, "B=%d T=%d NH=%d HD=%d", B, T, NH, HD);
        kernel(r, "attention_bwd_dot", 2 * bt * NH * HD, 2 * q4, 4 * bt * NH, sh);
        /* dq: S = QK^T again, dP = dO V^T, dQ = dS K; dk/dv: S, dP, dV = P^T dO, dK = dS^T Q */
        if (dq)
            att_kernel(r, rope ? "attention_rope_bwd_dq" : "attention_bwd_dq", 3, B, T, NH, NKV,
                       HD, causal, (rope ? 2 : 3) * q4 + 2 * kv4 + 8 * bt * NH + rd, q4);
        if (dk || dv)
            att_kernel(r, rope ? "attention_rope_bwd_dkv" : "attention_bwd_dkv", 4, B, T, NH,
                       NKV, HD, causal, 2 * q4 + (rope ? 0 : 2) * kv4 + 8 * bt * NH + rd,
                       2 * kv4);
    }
}

static void rc_attention_bwd(dllm_backend *be, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *state, const float *q, const float *k,
                             const float *v, const uint8_t *keymask, int B, int T, int NH, int NKV,
                             int HD, bool causal)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "attention_bwd");
    attention_bwd_ops(r, dq, dk, dv, B, T, NH, NKV, HD, causal, NULL);
    if (IN)
        INOPS->attention_bwd(IN, dq, dk, dv, dout, out, state, q, k, v, keymask, B, T, NH, NKV,
                             HD, causal);
    end(r, n0);
}

/* cu_rope_attention_bwd: one pass on tensor cores; the fp32 kernels' parts otherwise */
static void rc_rope_attention_bwd(dllm_backend *be, float *dq, float *dk, float *dv,
                                  const float *dout, const float *out, const float *state,
                                  float *q, float *k, const float *v, const int32_t *pos,
                                  const op_rope_table *t, const uint8_t *keymask, int B, int T,
                                  int NH, int NKV, int HD, bool causal)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rope_attention_bwd");
    if (dllm_cuda_attention_tc(HD)) {
        attention_bwd_ops(r, dq, dk, dv, B, T, NH, NKV, HD, causal, t);
    } else {
        const int N = B * T;
        double nq = 4.0 * N * NH * HD, nk = 4.0 * N * NKV * HD;
        rope(r, "rope", N, NH, HD, false);
        rope(r, "rope", N, NKV, HD, false);
        if (dq && nq)
            dev_copy(r, "cudaMemset", 0, nq, (size_t)nq);
        if (dk && nk)
            dev_copy(r, "cudaMemset", 0, nk, (size_t)nk);
        if (dv && nk)
            dev_copy(r, "cudaMemset", 0, nk, (size_t)nk);
        attention_bwd_ops(r, dq, dk, dv, B, T, NH, NKV, HD, causal, NULL);
        if (dq)
            rope(r, "rope", N, NH, HD, false);
        if (dk)
            rope(r, "rope", N, NKV, HD, false);
    }
    if (IN)
        INOPS->rope_attention_bwd(IN, dq, dk, dv, dout, out, state, q, k, v, pos, t, keymask, B,
                                  T, NH, NKV, HD, causal);
    end(r, n0);
}

static void rc_swiglu_fwd(dllm_backend *be, float *out, const float *gate, const float *up,
                          size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "swiglu_fwd");
    if (n) {
        char sh[64];
        snprintf(sh, sizeof sh, "n=%zu", n);
        kernel(r, "swiglu_fwd", 6.0 * n, 8.0 * n, 4.0 * n, sh);
    }
    if (IN)
        INOPS->swiglu_fwd(IN, out, gate, up, n);
    end(r, n0);
}

static void rc_swiglu_bwd(dllm_backend *be, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "swiglu_bwd");
    if (n && (dgate || dup)) {
        char sh[64];
        snprintf(sh, sizeof sh, "n=%zu", n);
        double o = (dgate ? 1 : 0) + (dup ? 1 : 0);
        kernel(r, "swiglu_bwd", 10.0 * n, 12.0 * n, 4 * o * n, sh);
    }
    if (IN)
        INOPS->swiglu_bwd(IN, dgate, dup, dout, gate, up, n);
    end(r, n0);
}

static void rc_embedding_fwd(dllm_backend *be, float *out, const int32_t *ids, const float *wte,
                             int N, int C)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "embedding_fwd");
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d C=%d", N, C);
        kernel(r, "embedding_fwd", 0, 4.0 * N * C + 4.0 * N, 4.0 * N * C, sh);
    }
    if (IN)
        INOPS->embedding_fwd(IN, out, ids, wte, N, C);
    end(r, n0);
}

static void rc_embedding_bwd(dllm_backend *be, float *dwte, const float *dout,
                             const int32_t *ids, int N, int C)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "embedding_bwd");
    if (N > 0 && dwte) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d C=%d", N, C);
        kernel(r, "embedding_bwd", (double)N * C, 8.0 * N * C + 4.0 * N, 4.0 * N * C, sh);
    }
    if (IN)
        INOPS->embedding_bwd(IN, dwte, dout, ids, N, C);
    end(r, n0);
}

static void rc_xent_fwd(dllm_backend *be, float *logp, float *lse, const float *logits,
                        const int32_t *target, int N, int V)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "xent_fwd");
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d V=%d", N, V);
        kernel(r, "xent_fwd", 4.0 * N * V, 4.0 * N * V + 4.0 * N, 8.0 * N, sh);
    }
    if (IN)
        INOPS->xent_fwd(IN, logp, lse, logits, target, N, V);
    end(r, n0);
}

static void rc_xent_bwd(dllm_backend *be, float *dlogits, const float *dlogp, const float *logits,
                        const float *lse, const int32_t *target, int N, int V)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "xent_bwd");
    if (N > 0 && dlogits) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d V=%d", N, V);
        kernel(r, "xent_bwd", 4.0 * N * V, 8.0 * N * V + 12.0 * N, 4.0 * N * V, sh);
    }
    if (IN)
        INOPS->xent_bwd(IN, dlogits, dlogp, logits, lse, target, N, V);
    end(r, n0);
}

/* ---- elementwise and optimizer -------------------------------------------------------- */

static void elementwise(recorder *r, const char *what, size_t n, double flops, double rd,
                        double wr)
{
    if (!n)
        return;
    char sh[64];
    snprintf(sh, sizeof sh, "n=%zu", n);
    kernel(r, what, flops * n, rd * n, wr * n, sh);
}

static void rc_round_bf16(dllm_backend *be, float *x, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "round_bf16");
    elementwise(r, "round_bf16", n, 1, 4, 4);
    if (IN)
        INOPS->round_bf16(IN, x, n);
    end(r, n0);
}

static void rc_add(dllm_backend *be, float *y, const float *x, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "add");
    elementwise(r, "add", n, 1, 8, 4);
    if (IN)
        INOPS->add(IN, y, x, n);
    end(r, n0);
}

static void rc_adamw(dllm_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     int t, float lr, float b1, float b2, float eps, float wd)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "adamw");
    elementwise(r, "adamw", n, 12, 16, 12);
    if (IN)
        INOPS->adamw(IN, p, g, m, v, n, t, lr, b1, b2, eps, wd);
    end(r, n0);
}

/* dllm_cuda_grad_norm: the sum of squares into a device double, copied down */
static double rc_grad_norm(dllm_backend *be, const float *g, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "grad_norm");
    ws_get(r, sizeof(double));
    dev_copy(r, "cudaMemsetAsync", 0, 8, 8);
    elementwise(r, "sumsq", n, 2, 4, 0);
    emit(r, REC_D2H, REC_UNIT_MEMORY, "cudaMemcpyAsync+sync", 0, 8, 0, "8 bytes")->xfer = 8;
    double v = IN ? INOPS->grad_norm(IN, g, n) : 0.0;
    end(r, n0);
    return v;
}

static double rc_clip_grad(dllm_backend *be, float *g, size_t n, double max_norm)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "clip_grad");
    ws_get(r, sizeof(double));
    dev_copy(r, "cudaMemset", 0, 8, 8);
    elementwise(r, "sumsq", n, 2, 4, 0);
    if (max_norm > 0)
        elementwise(r, "clip", n, 1, 4, 4);
    emit(r, REC_D2H, REC_UNIT_MEMORY, "cudaMemcpy", 0, 8, 0, "8 bytes")->xfer = 8;
    double v = IN ? INOPS->clip_grad(IN, g, n, max_norm) : 0.0;
    end(r, n0);
    return v;
}

/* cu_adamw_step: clip_grad's launches and copy, then adamw's unless the norm that came
 * down is not finite (without an inner backend the norm is 0: the launch is recorded) */
static double rc_adamw_step(dllm_backend *be, float *p, float *g, float *m, float *v, size_t n,
                            const dllm_adamw_args *a)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "adamw_step");
    ws_get(r, sizeof(double));
    dev_copy(r, "cudaMemset", 0, 8, 8);
    elementwise(r, "sumsq", n, 2, 4, 0);
    if (a->max_norm > 0)
        elementwise(r, "clip", n, 1, 4, 4);
    emit(r, REC_D2H, REC_UNIT_MEMORY, "cudaMemcpy", 0, 8, 0, "8 bytes")->xfer = 8;
    double norm = IN ? INOPS->adamw_step(IN, p, g, m, v, n, a) : 0.0;
    if (isfinite(norm))
        elementwise(r, "adamw", n, 12, 16, 12);
    end(r, n0);
    return norm;
}

static void rc_copy(dllm_backend *be, void *dst, const void *src, size_t bytes)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "copy");
    if (bytes)
        dev_copy(r, "cudaMemcpy D2D", (double)bytes, (double)bytes, bytes);
    if (IN)
        INOPS->copy(IN, dst, src, bytes);
    end(r, n0);
}

static void rc_copy_2d(dllm_backend *be, float *dst, size_t dld, const float *src, size_t sld,
                       int rows, int cols)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "copy_2d");
    elementwise(r, "copy_2d", (size_t)(rows > 0 ? rows : 0) * (size_t)(cols > 0 ? cols : 0), 0,
                4, 4);
    if (IN)
        INOPS->copy_2d(IN, dst, dld, src, sld, rows, cols);
    end(r, n0);
}

static void rc_bias_fwd(dllm_backend *be, float *out, const float *bias, int N, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bias_fwd");
    elementwise(r, "bias_fwd", (size_t)(N > 0 && OC > 0 ? N : 0) * (size_t)(OC > 0 ? OC : 0),
                1, 8, 4);
    if (IN)
        INOPS->bias_fwd(IN, out, bias, N, OC);
    end(r, n0);
}

static void rc_bias_bwd(dllm_backend *be, float *dbias, const float *dout, int N, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bias_bwd");
    if (N > 0 && OC > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d OC=%d", N, OC);
        kernel(r, "bias_bwd", (double)N * OC, 4.0 * N * OC + 4.0 * OC, 4.0 * OC, sh);
    }
    if (IN)
        INOPS->bias_bwd(IN, dbias, dout, N, OC);
    end(r, n0);
}

/* ---- weight copies built in the backend's memory --------------------------------------- */

static void rc_to_bf16(dllm_backend *be, uint16_t *out, const float *inp, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "to_bf16");
    elementwise(r, "f32_to_bf16", n, 1, 4, 2);
    if (IN)
        INOPS->to_bf16(IN, out, inp, n);
    end(r, n0);
}

static void rc_fp8_quantise(dllm_backend *be, uint8_t *q, float *scale, const float *x, int R_,
                            int C, fp8_format f, fp8_scaling s, bool pow2)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "fp8_quantise");
    int br, bc;
    fp8_block_shape(s, R_, C, &br, &bc);
    fp8_quant(r, R_, C, br, bc, "");
    if (IN)
        INOPS->fp8_quantise(IN, q, scale, x, R_, C, f, s, pow2);
    end(r, n0);
}

/* ---- low-precision rollout linears ---------------------------------------------------- */

static void bf16_check(const bf16_matrix *w, int C, int OC)
{
    if (!w->w || w->rows != OC || w->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: bf16 weight is [%d, %d], call expects [%d, %d]\n",
                w->rows, w->cols, OC, C);
        exit(1);
    }
}

/* backend_cuda.cu's bf16_linear: bf16_linear_fwd, plus res (NULL: none) read as the
 * epilogue's C on cuBLASLt or added by a pass of its own on the fallback */
static void bf16_linear(recorder *r, const float *out, bf16_matrix *w, int N, int C, int OC,
                        const float *res)
{
    bf16_check(w, C, OC);
    if (N > 0) {
        size_t na = (size_t)N * C, nw = (size_t)OC * C;
        bool lt = C % 8 == 0 && OC % 4 == 0 && (uintptr_t)out % 16 == 0 &&
                  (uintptr_t)w->w % 16 == 0 && (uintptr_t)res % 16 == 0;
        if (lt) {
            ws_get(r, align256(na * 2));
            elementwise(r, "f32_to_bf16", na, 1, 4, 2);
            double n = N, c = C, oc = OC;
            rec_event *e = matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, n, oc, c,
                                  2 * (n * c + oc * c) + (res ? 4 * n * oc : 0), 4 * n * oc);
            e->weight = w->w;
            e->weight_bytes = 2 * oc * c;
        } else { /* widened to fp32 through the fp32 GEMM */
            ws_get(r, align256(na * 2) + align256(na * 4) + align256(nw * 4));
            elementwise(r, "f32_to_bf16", na, 1, 4, 2);
            elementwise(r, "bf16_to_f32", na, 1, 2, 4);
            elementwise(r, "bf16_to_f32", nw, 1, 2, 4);
            gemm_f32(r, N, OC, C, 0.0f, w->w, 2.0 * nw);
            if (res)
                elementwise(r, "add", (size_t)N * OC, 1, 8, 4);
        }
    }
}

/* backend_cuda.cu's bf16_linear_ready: over the input's bf16 copy its producer made */
static void bf16_linear_ready(recorder *r, const float *out, bf16_matrix *w, int N, int C, int OC,
                              const float *res)
{
    bf16_check(w, C, OC);
    if (N <= 0)
        return;
    double n = N, c = C, oc = OC;
    size_t na = (size_t)N * C, nw = (size_t)OC * C;
    if (C % 8 == 0 && OC % 4 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)w->w % 16 == 0 &&
        (uintptr_t)res % 16 == 0) {
        rec_event *e = matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, n, oc, c,
                              2 * (n * c + oc * c) + (res ? 4 * n * oc : 0), 4 * n * oc);
        e->weight = w->w;
        e->weight_bytes = 2 * oc * c;
    } else {
        ws_get(r, align256(na * 4) + align256(nw * 4));
        elementwise(r, "bf16_to_f32", na, 1, 2, 4);
        elementwise(r, "bf16_to_f32", nw, 1, 2, 4);
        gemm_f32(r, N, OC, C, 0.0f, w->w, 2.0 * nw);
        if (res)
            elementwise(r, "add", (size_t)N * OC, 1, 8, 4);
    }
}

static void rc_bf16_linear_fwd(dllm_backend *be, float *out, const float *inp, bf16_matrix *w,
                               int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bf16_linear_fwd");
    bf16_linear(r, out, w, N, C, OC, NULL);
    if (IN)
        INOPS->bf16_linear_fwd(IN, out, inp, w, N, C, OC);
    end(r, n0);
}

/* ---- FP8 and INT8 activations from their producer (backend_cuda.cu's) ----------------- */

static void *qa_buffer(recorder *r, size_t bytes)
{
    if (bytes > r->qa_bytes) {
        host_sync(r, "cudaDeviceSynchronize");
        dev_free(r, r->qa);
        r->qa = dev_malloc_as(r, bytes, NULL, "fused producers: codes, bf16 copies");
        r->qa_bytes = bytes;
    }
    return r->qa;
}

static bool fp8_act_ok(recorder *r, int C, const dllm_lin_weight *ws, int nw)
{
    const fp8_matrix *w0 = ws[0].f8;
    if (!r->block_fp8)
        return false;
    for (int i = 0; i < nw; i++) {
        bool block = false;
        const fp8_matrix *w = ws[i].f8;
        if (!w || w->cols != C || w->format != w0->format || w->format == FP8_E5M2 ||
            w->pow2_scale != w0->pow2_scale || !fp8_gemm_path(r, w, C, w->rows, &block) ||
            !block)
            return false;
    }
    return true;
}

static bool int8_act_ok(int C, const dllm_lin_weight *ws, int nw)
{
    const int8_matrix *w0 = ws[0].i8;
    for (int i = 0; i < nw; i++) {
        const int8_matrix *w = ws[i].i8;
        if (!w || !w->q || w->cols != C || w->scaling != w0->scaling || w->ldq != w0->ldq ||
            w->kb != w0->kb)
            return false;
    }
    return true;
}

/* backend_cuda.cu's bf16_act_prepare */
static bool bf16_act_ok(int C, const dllm_lin_weight *ws, int nw)
{
    for (int i = 0; i < nw; i++)
        if (!ws[i].b16 || ws[i].b16->cols != C)
            return false;
    return true;
}

static bool rc_act_quant_prepare(dllm_backend *be, dllm_qact *qa, int N, int C,
                                 const dllm_lin_weight *ws, int nw)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "act_quant_prepare");
    bool ok = N > 0 && C > 0 && nw > 0 && ws &&
              (ws[0].f8    ? fp8_act_ok(r, C, ws, nw)
         : ws[0].i8  ? int8_act_ok(C, ws, nw)
         : ws[0].b16 ? bf16_act_ok(C, ws, nw)
                     : false);
    if (ok) {
        dllm_qact h = {0};
        if (ws[0].b16) {
            h = (dllm_qact){.kind = DLLM_QACT_BF16, .q = qa_buffer(r, align256((size_t)N * C * 2)),
                            .rows = N, .cols = C, .ld = C};
        } else if (ws[0].f8) {
            const int Np = fp8_rows(N, true);
            size_t nq = align256((size_t)Np * C);
            char *buf = qa_buffer(r, nq + align256((size_t)Np * KBLK(C) * sizeof(float)));
            h = (dllm_qact){.kind = DLLM_QACT_FP8, .q = buf, .scale = (float *)(buf + nq),
                            .srs = 1, .scs = Np, /* dllm_cuda_fp8_gemm_scale_strides */
                            .rows = N, .cols = C, .group = 128, .ld = C,
                            .format = ws[0].f8->format, .pow2 = ws[0].f8->pow2_scale};
        } else {
            const int8_matrix *w0 = ws[0].i8;
            size_t nq = align256((size_t)N * w0->ldq);
            char *buf = qa_buffer(r, nq + align256((size_t)N * w0->kb * sizeof(float)));
            h = (dllm_qact){.kind = DLLM_QACT_INT8, .q = buf, .scale = (float *)(buf + nq),
                            .srs = w0->kb, .scs = 1, .rows = N, .cols = C, .ld = w0->ldq,
                            .group = w0->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C};
        }
        if (IN) {
            if (!INOPS->act_quant_prepare(IN, qa, N, C, ws, nw)) {
                fprintf(stderr, "dllm-rl: record backend: act_quant_prepare: the inner backend "
                                "refused what the CUDA backend takes\n");
                exit(1);
            }
        } else {
            *qa = h;
        }
    }
    end(r, n0);
    return ok;
}

static void check_act(const dllm_qact *qa, int N, int C, const char *op)
{
    if (!qa || !qa->q || qa->rows != N || qa->cols != C) {
        fprintf(stderr, "dllm-rl: cuda backend: %s: quantised activations are [%d, %d], call "
                        "expects [%d, %d]\n", op, qa ? qa->rows : -1, qa ? qa->cols : -1, N, C);
        exit(1);
    }
}

/* Bytes of codes and scales a producer writes for N rows of C. */
static double qact_bytes(const dllm_qact *qa, int N, int C)
{
    if (qa->kind == DLLM_QACT_BF16)
        return 2.0 * N * C;
    double groups = (double)((C + qa->group - 1) / qa->group);
    return qa->kind == DLLM_QACT_INT8 ? (double)N * qa->ld + 4.0 * N * groups
                                      : (double)N * C + 4.0 * N * KBLK(C);
}

static void rc_rmsnorm_quant_fwd(dllm_backend *be, float *out, float *rstd, const dllm_qact *qa,
                                 const float *inp, const float *w, int N, int C, float eps)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "rmsnorm_quant_fwd");
    check_act(qa, N, C, "rmsnorm_quant_fwd");
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d C=%d", N, C);
        double n = (double)N * C;
        kernel(r, qa->kind == DLLM_QACT_INT8   ? "rmsnorm_int8_fwd"
                  : qa->kind == DLLM_QACT_BF16 ? "rmsnorm_bf16_fwd"
                                               : "rmsnorm_fp8_fwd", 8 * n,
               4 * n + 4.0 * C, (out ? 4 * n : 0) + (rstd ? 4.0 * N : 0) + qact_bytes(qa, N, C),
               sh);
    }
    if (IN)
        INOPS->rmsnorm_quant_fwd(IN, out, rstd, qa, inp, w, N, C, eps);
    end(r, n0);
}

static void rc_swiglu_quant_fwd(dllm_backend *be, float *out, const dllm_qact *qa,
                                const float *gate, const float *up, int N, int H)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "swiglu_quant_fwd");
    check_act(qa, N, H, "swiglu_quant_fwd");
    if (N > 0) {
        char sh[64];
        snprintf(sh, sizeof sh, "N=%d H=%d", N, H);
        double n = (double)N * H;
        kernel(r, qa->kind == DLLM_QACT_INT8   ? "swiglu_int8_fwd"
                  : qa->kind == DLLM_QACT_BF16 ? "swiglu_bf16_fwd"
                                               : "swiglu_fp8_fwd", 10 * n,
               8 * n, (out ? 4 * n : 0) + qact_bytes(qa, N, H), sh);
    }
    if (IN)
        INOPS->swiglu_quant_fwd(IN, out, qa, gate, up, N, H);
    end(r, n0);
}

static void act_mismatch(int OC, int C)
{
    fprintf(stderr, "dllm-rl: cuda backend: linear_quant_act_fwd: weight [%d, %d] does not "
                    "take the prepared activations (act_quant_prepare)\n", OC, C);
    exit(1);
}

/* backend_cuda.cu's linear_quant_act: linear_quant_act_fwd, with a residual when res */
static void linear_quant_act(recorder *r, const float *out, const dllm_qact *qa,
                             const dllm_lin_weight *lw, int N, int C, int OC, const float *res)
{
    check_act(qa, N, C, "linear_quant_act_fwd");
    if (qa->kind == DLLM_QACT_BF16) {
        if (!lw->b16 || lw->b16->cols != C)
            act_mismatch(OC, C);
        bf16_linear_ready(r, out, lw->b16, N, C, OC, res);
    } else if (qa->kind == DLLM_QACT_INT8) {
        const int8_matrix *w = lw->i8;
        int8_check_weight(w, C, OC);
        if (w->ldq != qa->ld || w->kb != (C + qa->group - 1) / qa->group ||
            (w->scaling == INT8_SCALE_BLOCK ? INT8_BLOCK : C) != qa->group)
            act_mismatch(OC, C);
        if (N > 0) {
            ws_get(r, int8_acc_bytes(N, w));
            int8_products(r, w, N, OC, res != NULL);
        }
    } else {
        fp8_matrix *w = lw->f8;
        if (!w)
            act_mismatch(OC, C);
        fp8_check_weight(w, C, OC);
        bool block = false;
        if (!fp8_gemm_path(r, w, C, OC, &block) || !block || qa->format != w->format ||
            qa->pow2 != w->pow2_scale)
            act_mismatch(OC, C);
        if (fp8_rows(N, true) != N)
            ws_get(r, (size_t)fp8_rows(N, true) * OC * sizeof(float));
        fp8_gemm_run(r, w, true, N, C, OC, res != NULL);
    }
}

static void rc_linear_quant_act_fwd(dllm_backend *be, float *out, const dllm_qact *qa,
                                    const dllm_lin_weight *lw, int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "linear_quant_act_fwd");
    linear_quant_act(r, out, qa, lw, N, C, OC, NULL);
    if (IN)
        INOPS->linear_quant_act_fwd(IN, out, qa, lw, N, C, OC);
    end(r, n0);
}

/* cu_linear_res_fwd: the format's linear with the residual added where the product is made
 * (the epilogue reads it once), or by a pass of its own on a fallback */
static void rc_linear_res_fwd(dllm_backend *be, float *out, const float *res, const float *inp,
                              const dllm_qact *qa, const dllm_lin_weight *w, int N, int C,
                              int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "linear_res_fwd");
    if (qa) {
        linear_quant_act(r, out, qa, w, N, C, OC, res);
    } else if (w->f8) {
        fp8_linear(r, w->f8, N, C, OC, true);
    } else if (w->i8) {
        if (N > 0)
            int8_linear(r, w->i8, N, C, OC, true);
    } else if (w->b16) {
        bf16_linear(r, out, w->b16, N, C, OC, res);
    } else {
        fprintf(stderr, "dllm-rl: cuda backend: linear_res_fwd: no FP8, INT8 or bf16 weight "
                        "(the device has no NVFP4 linear)\n");
        exit(1);
    }
    if (IN)
        INOPS->linear_res_fwd(IN, out, res, inp, qa, w, N, C, OC);
    end(r, n0);
}

/* cu_bf16_linear_bwd_x */
static void bf16_linear_bwd_x_ops(recorder *r, const float *dinp, bf16_matrix *w, int N, int C,
                                  int OC)
{
    bf16_check(w, C, OC);
    if (N > 0 && OC % 8 == 0 && C % 8 == 0 && (uintptr_t)dinp % 16 == 0 &&
        (uintptr_t)w->w % 16 == 0) { /* dout to bf16, the BF16 GEMM accumulating (beta 1) */
        double n = N, c = C, oc = OC;
        ws_get(r, align256((size_t)N * OC * 2));
        elementwise(r, "f32_to_bf16", (size_t)N * OC, 1, 4, 2);
        rec_event *e = matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, n, c, oc,
                              2 * (n * oc + oc * c) + 4 * n * c, 4 * n * c);
        e->weight = w->w;
        e->weight_bytes = 2 * oc * c;
    } else if (N > 0) { /* the weight widened to fp32 in the workspace, then the fp32 GEMM */
        size_t nw = (size_t)OC * C;
        ws_get(r, align256(nw * 4));
        elementwise(r, "bf16_to_f32", nw, 1, 2, 4);
        gemm_f32(r, N, C, OC, 1.0f, w->w, 2.0 * nw);
    }
}

static void rc_bf16_linear_bwd_x(dllm_backend *be, float *dinp, const float *dout, bf16_matrix *w,
                                 int N, int C, int OC)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bf16_linear_bwd_x");
    bf16_linear_bwd_x_ops(r, dinp, w, N, C, OC);
    if (IN)
        INOPS->bf16_linear_bwd_x(IN, dinp, dout, w, N, C, OC);
    end(r, n0);
}

/* ---- a bf16 trainer's LoRA linears (backend_cuda.cu's cu_bf16_lora_fwd, _bwd) ----------
 * Each activation operand rounded once into the workspace for all of its products; the
 * products are the parts' GEMMs. Off cuBLASLt's 16-byte rules: the parts. */
static bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* the BF16 GEMM C (M, N) = op(A) op(B) over K on operands already in bf16 */
static void gemm_bf16_ready(recorder *r, double m, double n, double k, bool beta)
{
    matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, m, n, k, 2 * (m * k + k * n) + (beta ? 4 * m * n : 0),
           4 * m * n);
}

/* the adapter's product onto res (its epilogue's C) or zero, then the base's onto out */
static void rc_bf16_lora_fwd(dllm_backend *be, float *out, float *xa, const float *inp,
                             const dllm_qact *qa, const float *res, bf16_matrix *w,
                             const float *A, const float *B, float scale, int N, int C, int OC,
                             int r_)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bf16_lora_fwd");
    if (qa && (qa->kind != DLLM_QACT_BF16 || qa->rows != N || qa->cols != C))
        act_mismatch(OC, C);
    if (N <= 0 || r_ <= 0 || w->rows != OC || w->cols != C || C % 8 || OC % 4 || r_ % 8 ||
        !al16(out) || !al16(xa) || !al16(w->w) || !al16(res)) {
        bf16_linear(r, out, w, N, C, OC, NULL);
        gemm_bf16_ops(r, false, true, N, r_, C, 0.0f, xa);
        gemm_bf16_ops(r, false, true, N, OC, r_, 1.0f, out);
        if (res && N > 0)
            elementwise(r, "add", (size_t)N * OC, 1, 8, 4);
    } else {
        size_t nx = qa ? 0 : (size_t)N * C, na = (size_t)r_ * C, nxa = (size_t)N * r_;
        size_t nb = (size_t)OC * r_;
        double n = N, c = C, oc = OC, rr = r_;
        ws_get(r, align256(nx * 2) + align256(na * 2) + align256(nxa * 2) + align256(nb * 2));
        if (!qa)
            elementwise(r, "f32_to_bf16", nx, 1, 4, 2);
        elementwise(r, "f32_to_bf16", na, 1, 4, 2);
        gemm_bf16_ready(r, n, rr, c, false); /* xa */
        elementwise(r, "f32_to_bf16", nxa, 1, 4, 2);
        elementwise(r, "f32_to_bf16", nb, 1, 4, 2);
        gemm_bf16_ready(r, n, oc, rr, res != NULL); /* the adapter's product [+ res] */
        rec_event *e = matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, n, oc, c,
                              2 * (n * c + oc * c) + 4 * n * oc, 4 * n * oc);
        e->weight = w->w;
        e->weight_bytes = 2 * oc * c;
    }
    if (IN)
        INOPS->bf16_lora_fwd(IN, out, xa, inp, qa, res, w, A, B, scale, N, C, OC, r_);
    end(r, n0);
}

static void rc_bf16_lora_bwd(dllm_backend *be, float *dinp, float *dA, float *dB, float *dxa,
                             const float *dout, const float *inp, const float *xa,
                             bf16_matrix *w, const float *A, const float *B, float scale, int N,
                             int C, int OC, int r_)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "bf16_lora_bwd");
    if (N <= 0 || r_ <= 0 || w->rows != OC || w->cols != C || C % 8 || OC % 8 || r_ % 8 ||
        !al16(dinp) || !al16(dA) || !al16(dB) || !al16(dxa) || !al16(w->w)) {
        bf16_linear_bwd_x_ops(r, dinp, w, N, C, OC);
        gemm_bf16_ops(r, false, false, N, r_, OC, 0.0f, dxa);
        gemm_bf16_ops(r, true, false, OC, r_, N, 1.0f, dB);
        gemm_bf16_ops(r, false, false, N, C, r_, 1.0f, dinp);
        gemm_bf16_ops(r, true, false, r_, C, N, 1.0f, dA);
    } else {
        size_t nd = (size_t)N * OC, nx = (size_t)N * C, nxa = (size_t)N * r_;
        size_t na = (size_t)r_ * C, nb = (size_t)OC * r_, big = nd > nx ? nd : nx;
        double n = N, c = C, oc = OC, rr = r_;
        ws_get(r, align256(big * 2) + align256(nb * 2) + 2 * align256(nxa * 2) +
                      align256(na * 2));
        elementwise(r, "f32_to_bf16", nd, 1, 4, 2);
        rec_event *e = matmul(r, "gemm_bf16", REC_UNIT_BF16_TC, n, c, oc,
                              2 * (n * oc + oc * c) + 4 * n * c, 4 * n * c);
        e->weight = w->w;
        e->weight_bytes = 2 * oc * c;
        elementwise(r, "f32_to_bf16", nb, 1, 4, 2);
        gemm_bf16_ready(r, n, rr, oc, false); /* dxa */
        elementwise(r, "f32_to_bf16", nxa, 1, 4, 2);
        gemm_bf16_ready(r, oc, rr, n, true); /* dB */
        elementwise(r, "f32_to_bf16", nxa, 1, 4, 2);
        elementwise(r, "f32_to_bf16", na, 1, 4, 2);
        gemm_bf16_ready(r, n, c, rr, true); /* dinp */
        elementwise(r, "f32_to_bf16", nx, 1, 4, 2);
        gemm_bf16_ready(r, rr, c, n, true); /* dA */
    }
    if (IN)
        INOPS->bf16_lora_bwd(IN, dinp, dA, dB, dxa, dout, inp, xa, w, A, B, scale, N, C, OC, r_);
    end(r, n0);
}

/* ---- samplers: one kernel each, the bytes its rows read and write -------------------- */

static void rc_weight_cache_free(dllm_backend *be, fp8_matrix *f8, bf16_matrix *b16)
{
    recorder *r = R(be);
    if (IN)
        INOPS->weight_cache_free(IN, f8, b16);
}

static void rc_ar_choose(dllm_backend *be, int32_t *tokens, int32_t *next, float *logp,
                         float *logp_t1, int32_t *length, uint8_t *done, const float *logits,
                         int r0, int n, int V, int G, int g, double temperature, int eos_id,
                         uint64_t seed, uint64_t seq_offset)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "ar_choose");
    char sh[64];
    snprintf(sh, sizeof sh, "n=%d V=%d", n, V);
    kernel(r, "ar_choose", 8.0 * n * V, 4.0 * n * V, 17.0 * n, sh);
    if (IN)
        INOPS->ar_choose(IN, tokens, next, logp, logp_t1, length, done, logits, r0, n, V, G, g,
                         temperature, eos_id, seed, seq_offset);
    end(r, n0);
}

static void rc_denoise_block_counts(dllm_backend *be, int32_t *nm, const int32_t *canvas, int B,
                                    int T, int lo, int hi, int mask_id)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "denoise_block_counts");
    elementwise(r, "denoise_block_counts", (size_t)B * (size_t)(hi > lo ? hi - lo : 0), 1, 4, 0);
    if (IN)
        INOPS->denoise_block_counts(IN, nm, canvas, B, T, lo, hi, mask_id);
    end(r, n0);
}

static void rc_denoise_rows(dllm_backend *be, int32_t *rows, int32_t *rows_u, int64_t *row_seq,
                            int32_t *row_pos, int32_t *seq_start, int32_t *n,
                            const int32_t *canvas, int B, int T, int lo, int hi, int act_lo,
                            int mask_id, uint64_t seq_offset)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "denoise_rows");
    elementwise(r, "denoise_rows", (size_t)B * (size_t)(hi > lo ? hi - lo : 0), 1, 4, 20);
    if (IN)
        INOPS->denoise_rows(IN, rows, rows_u, row_seq, row_pos, seq_start, n, canvas, B, T, lo,
                            hi, act_lo, mask_id, seq_offset);
    end(r, n0);
}

static void rc_denoise_logits_fix(dllm_backend *be, float *cond, const float *uncond, int n,
                                  int V, float w, int eos_id)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "denoise_logits_fix");
    if (uncond)
        elementwise(r, "denoise_logits_fix", (size_t)n * (size_t)V, 3, 8, 4);
    if (IN)
        INOPS->denoise_logits_fix(IN, cond, uncond, n, V, w, eos_id);
    end(r, n0);
}

static void rc_denoise_draw(dllm_backend *be, int32_t *x0, float *prob, double *rand_conf,
                            const float *logits, const int64_t *row_seq, const int32_t *row_pos,
                            int n, int V, double temperature, uint64_t seed,
                            const int32_t *seq_step, uint64_t seq_offset, int exclude)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "denoise_draw");
    char sh[64];
    snprintf(sh, sizeof sh, "n=%d V=%d", n, V);
    kernel(r, "denoise_draw", 40.0 * n * V, 4.0 * n * V, 16.0 * n, sh);
    if (IN)
        INOPS->denoise_draw(IN, x0, prob, rand_conf, logits, row_seq, row_pos, n, V, temperature,
                            seed, seq_step, seq_offset, exclude);
    end(r, n0);
}

static void rc_denoise_commit(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                              float *commit_prob, const int32_t *x0, const float *prob,
                              const double *rand_conf, const int32_t *row_pos,
                              const int32_t *seq_start, const int32_t *nm, int spb,
                              int step_in_block, int32_t *seq_step, double threshold, int B,
                              int T, int P, int G, int mask_id, int eos_id, int eot_id, bool cfg)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "denoise_commit");
    elementwise(r, "denoise_commit", (size_t)B * (size_t)G, 1, 24, 10);
    if (IN)
        INOPS->denoise_commit(IN, canvas, commit_step, commit_prob, x0, prob, rand_conf, row_pos,
                              seq_start, nm, spb, step_in_block, seq_step, threshold, B, T, P,
                              G, mask_id, eos_id, eot_id, cfg);
    end(r, n0);
}

static void rc_dream_draw(dllm_backend *be, int32_t *x0, double *key, float *prob, uint8_t *take,
                          const float *logits, const int64_t *row_seq, const int32_t *row_pos,
                          int n, int V, const dllm_dream_step *a)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "dream_draw");
    /* cu_dream_draw: a scratch of 12 V bytes a row for 32 rows, one launch per 32 rows */
    enum { DREAM_ROWS = 32 };
    ws_get(r, (size_t)DREAM_ROWS * (size_t)V * 12);
    for (int i0 = 0; i0 < n; i0 += DREAM_ROWS) {
        int m = n - i0 < DREAM_ROWS ? n - i0 : DREAM_ROWS;
        char sh[64];
        snprintf(sh, sizeof sh, "n=%d V=%d", m, V);
        kernel(r, "dream_draw", 30.0 * m * V, 4.0 * m * V, 25.0 * m, sh);
    }
    if (IN)
        INOPS->dream_draw(IN, x0, key, prob, take, logits, row_seq, row_pos, n, V, a);
    end(r, n0);
}

static void rc_dream_commit(dllm_backend *be, int32_t *canvas, int16_t *commit_step,
                            float *commit_prob, const int32_t *x0, const double *key,
                            const float *prob, const uint8_t *take, const int32_t *row_pos,
                            const int32_t *seq_start, int B, int T, int P, int G, int mask_id,
                            const dllm_dream_step *a)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "dream_commit");
    elementwise(r, "dream_commit", (size_t)B * (size_t)G, 1, 25, 10);
    if (IN)
        INOPS->dream_commit(IN, canvas, commit_step, commit_prob, x0, key, prob, take, row_pos,
                            seq_start, B, T, P, G, mask_id, a);
    end(r, n0);
}

/* Every entry the CUDA backend has, by name so that the table's order is free; the CUDA
 * backend has no NVFP4 linear, grouped FP8 linears or nucleus choice, so neither has the
 * recording (the model refuses an nvfp4 rollout on it as on the device). tests/unit/test_record.c fails on an entry left out. */
/* ---- Gated DeltaNet (kernels/cuda/gated_delta.cu: one kernel per op) ---- */

/* An elementwise or per-row gd kernel (bandwidth-bound) or the rule's recurrence (fp32
 * CUDA cores: each (batch, value head, step) updates a Dk x Dv state). */
static void gd_kernel(recorder *r, rec_unit u, const char *what, double flops, double rd,
                      double wr, const char *shape)
{
    emit(r, REC_KERNEL, u, what, flops, rd, wr, "%s", shape);
}

static void rc_gd_conv_fwd(dllm_backend *be, float *out, float *pre, float *state_out,
                           const float *x, const float *state, const float *w, int B, int T,
                           int D, int K)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_conv_fwd");
    char sh[64];
    snprintf(sh, sizeof sh, "B=%d T=%d D=%d K=%d", B, T, D, K);
    double n = (double)B * T * D, st = 4.0 * B * D * (K - 1);
    gd_kernel(r, REC_UNIT_MEMORY, "gd_conv_fwd", 2 * n * K + 4 * n,
              4 * n + 4.0 * D * K + (state ? st : 0),
              (out ? 4 * n : 0) + (pre ? 4 * n : 0) + (state_out ? st : 0), sh);
    if (IN)
        INOPS->gd_conv_fwd(IN, out, pre, state_out, x, state, w, B, T, D, K);
    end(r, n0);
}

static void rc_gd_conv_bwd(dllm_backend *be, float *dx, float *dw, float *dstate,
                           const float *dout, const float *pre, const float *x,
                           const float *state, const float *w, int B, int T, int D, int K)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_conv_bwd");
    char sh[64];
    snprintf(sh, sizeof sh, "B=%d T=%d D=%d K=%d", B, T, D, K);
    double n = (double)B * T * D, st = 4.0 * B * D * (K - 1);
    gd_kernel(r, REC_UNIT_MEMORY, "gd_conv_bwd", 4 * n * K + 6 * n,
              12 * n + 4.0 * D * K + (state ? st : 0),
              (dx ? 4 * n : 0) + (dw ? 4.0 * D * K : 0) + (dstate ? st : 0), sh);
    if (IN)
        INOPS->gd_conv_bwd(IN, dx, dw, dstate, dout, pre, x, state, w, B, T, D, K);
    end(r, n0);
}

static void rc_gd_l2norm_fwd(dllm_backend *be, float *out, float *rnorm, const float *x, int rows,
                             int n, float eps)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_l2norm_fwd");
    char sh[64];
    snprintf(sh, sizeof sh, "rows=%d n=%d", rows, n);
    double e = (double)rows * n;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_l2norm_fwd", 3 * e, 4 * e,
              4 * e + (rnorm ? 4.0 * rows : 0), sh);
    if (IN)
        INOPS->gd_l2norm_fwd(IN, out, rnorm, x, rows, n, eps);
    end(r, n0);
}

static void rc_gd_l2norm_bwd(dllm_backend *be, float *dx, const float *dout, const float *out,
                             const float *rnorm, int rows, int n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_l2norm_bwd");
    char sh[64];
    snprintf(sh, sizeof sh, "rows=%d n=%d", rows, n);
    double e = (double)rows * n;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_l2norm_bwd", 4 * e, 12 * e + 4.0 * rows, 4 * e, sh);
    if (IN)
        INOPS->gd_l2norm_bwd(IN, dx, dout, out, rnorm, rows, n);
    end(r, n0);
}

static void rc_gd_gates_fwd(dllm_backend *be, float *g, float *beta, const float *a,
                            const float *b, const float *A_log, const float *dt_bias, int N,
                            int Hv)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_gates_fwd");
    char sh[64];
    snprintf(sh, sizeof sh, "N=%d Hv=%d", N, Hv);
    double e = (double)N * Hv;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_gates_fwd", 10 * e, 8 * e + 8.0 * Hv,
              (g ? 4 * e : 0) + (beta ? 4 * e : 0), sh);
    if (IN)
        INOPS->gd_gates_fwd(IN, g, beta, a, b, A_log, dt_bias, N, Hv);
    end(r, n0);
}

static void rc_gd_gates_bwd(dllm_backend *be, float *da, float *db, float *dA_log,
                            float *ddt_bias, const float *dg, const float *dbeta, const float *a,
                            const float *b, const float *A_log, const float *dt_bias, int N,
                            int Hv)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_gates_bwd");
    char sh[64];
    snprintf(sh, sizeof sh, "N=%d Hv=%d", N, Hv);
    double e = (double)N * Hv;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_gates_bwd", 15 * e, 16 * e + 8.0 * Hv,
              (da ? 4 * e : 0) + (db ? 4 * e : 0) + (dA_log ? 4.0 * Hv : 0) +
                  (ddt_bias ? 4.0 * Hv : 0),
              sh);
    if (IN)
        INOPS->gd_gates_bwd(IN, da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, N,
                            Hv);
    end(r, n0);
}

/* The rule's bytes: q, k (B T Hk Dk), v (B T Hv Dv), g and beta (B T Hv), the states. */
static double gd_rule_rd(int B, int T, int Hk, int Dk, int Hv, int Dv, bool state)
{
    double bt = (double)B * T;
    return 4 * (2 * bt * Hk * Dk + bt * Hv * Dv + 2 * bt * Hv) +
           (state ? 4.0 * B * Hv * Dk * Dv : 0);
}

static void rule_fwd(recorder *r, const char *op, float *o, float *state_out, const float *state_in,
                     int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    char sh[80];
    snprintf(sh, sizeof sh, "B=%d T=%d Hk=%d Dk=%d Hv=%d Dv=%d", B, T, Hk, Dk, Hv, Dv);
    double steps = (double)B * T * Hv;
    gd_kernel(r, REC_UNIT_FP32_CORE, op, steps * 8.0 * Dk * Dv,
              gd_rule_rd(B, T, Hk, Dk, Hv, Dv, state_in != NULL),
              (o ? 4 * steps * Dv : 0) + (state_out ? 4.0 * B * Hv * Dk * Dv : 0), sh);
}

static void rc_gd_rule_recurrent_fwd(dllm_backend *be, float *o, float *state_out, const float *q,
                                     const float *k, const float *v, const float *g,
                                     const float *beta, const float *state_in, int B, int T,
                                     int Hk, int Dk, int Hv, int Dv)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_rule_recurrent_fwd");
    rule_fwd(r, "gd_rule_fwd", o, state_out, state_in, B, T, Hk, Dk, Hv, Dv);
    if (IN)
        INOPS->gd_rule_recurrent_fwd(IN, o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk,
                                     Hv, Dv);
    end(r, n0);
}

static void rc_gd_rule_chunked_fwd(dllm_backend *be, float *o, float *state_out, const float *q,
                                   const float *k, const float *v, const float *g,
                                   const float *beta, const float *state_in, int B, int T, int Hk,
                                   int Dk, int Hv, int Dv, int chunk)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_rule_chunked_fwd");
    rule_fwd(r, "gd_rule_fwd", o, state_out, state_in, B, T, Hk, Dk, Hv, Dv); /* the same kernel */
    if (IN)
        INOPS->gd_rule_chunked_fwd(IN, o, state_out, q, k, v, g, beta, state_in, B, T, Hk, Dk, Hv,
                                   Dv, chunk);
    end(r, n0);
}

static void rc_gd_rule_bwd(dllm_backend *be, float *dq, float *dk, float *dv, float *dg,
                           float *dbeta, float *dstate_in, const float *dout, const float *q,
                           const float *k, const float *v, const float *g, const float *beta,
                           const float *state_in, int B, int T, int Hk, int Dk, int Hv, int Dv)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_rule_bwd");
    /* backend_cuda.cu's scratch: the recomputed states (gated_delta.cu) */
    int nc = (T + 63) / 64, tc = T < 64 ? T : 64;
    if (B > 0 && T > 0 && Dk > 0 && Hv > 0 && Dv > 0)
        ws_get(r, 4 * ((size_t)B * Hv * Dk * Dv * (size_t)(nc + tc + 2) +
                       2 * (size_t)B * T * Hv * Dk));
    char sh[80];
    snprintf(sh, sizeof sh, "B=%d T=%d Hk=%d Dk=%d Hv=%d Dv=%d", B, T, Hk, Dk, Hv, Dv);
    double steps = (double)B * T * Hv, bt = (double)B * T;
    gd_kernel(r, REC_UNIT_FP32_CORE, "gd_rule_bwd", steps * 24.0 * Dk * Dv,
              gd_rule_rd(B, T, Hk, Dk, Hv, Dv, state_in != NULL) + 4 * steps * Dv,
              (dq ? 4 * bt * Hk * Dk : 0) + (dk ? 4 * bt * Hk * Dk : 0) +
                  (dv ? 4 * steps * Dv : 0) + (dg ? 4 * steps : 0) + (dbeta ? 4 * steps : 0) +
                  (dstate_in ? 4.0 * B * Hv * Dk * Dv : 0),
              sh);
    if (IN)
        INOPS->gd_rule_bwd(IN, dq, dk, dv, dg, dbeta, dstate_in, dout, q, k, v, g, beta, state_in,
                           B, T, Hk, Dk, Hv, Dv);
    end(r, n0);
}

static void rc_gd_gated_rmsnorm_fwd(dllm_backend *be, float *out, float *rstd, const float *x,
                                    const float *z, const float *w, int rows, int n, float eps)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_gated_rmsnorm_fwd");
    char sh[64];
    snprintf(sh, sizeof sh, "rows=%d n=%d", rows, n);
    double e = (double)rows * n;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_gated_rmsnorm_fwd", 8 * e, 8 * e + 4.0 * n,
              4 * e + (rstd ? 4.0 * rows : 0), sh);
    if (IN)
        INOPS->gd_gated_rmsnorm_fwd(IN, out, rstd, x, z, w, rows, n, eps);
    end(r, n0);
}

static void rc_gd_gated_rmsnorm_bwd(dllm_backend *be, float *dx, float *dz, float *dw,
                                    const float *dout, const float *x, const float *z,
                                    const float *w, const float *rstd, int rows, int n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_gated_rmsnorm_bwd");
    char sh[64];
    snprintf(sh, sizeof sh, "rows=%d n=%d", rows, n);
    double e = (double)rows * n;
    gd_kernel(r, REC_UNIT_MEMORY, "gd_gated_rmsnorm_bwd", 12 * e, 12 * e + 4.0 * (n + rows),
              (dx ? 4 * e : 0) + (dz ? 4 * e : 0) + (dw ? 4.0 * n : 0), sh);
    if (IN)
        INOPS->gd_gated_rmsnorm_bwd(IN, dx, dz, dw, dout, x, z, w, rstd, rows, n);
    end(r, n0);
}

static void rc_gd_partial_rope(dllm_backend *be, bool fwd, float *out, const float *x,
                               const int32_t *pos, int N, int NH, int HD, int rot, float theta)
{
    recorder *r = R(be);
    size_t n0 = begin(r, fwd ? "gd_partial_rope_fwd" : "gd_partial_rope_bwd");
    char sh[64];
    snprintf(sh, sizeof sh, "N=%d NH=%d HD=%d rot=%d", N, NH, HD, rot);
    double e = (double)N * NH * HD;
    gd_kernel(r, REC_UNIT_MEMORY, fwd ? "gd_partial_rope_fwd" : "gd_partial_rope_bwd",
              3.0 * N * NH * rot, 4 * e + 4.0 * N, 4 * e, sh);
    if (IN && fwd)
        INOPS->gd_partial_rope_fwd(IN, out, x, pos, N, NH, HD, rot, theta);
    else if (IN)
        INOPS->gd_partial_rope_bwd(IN, out, x, pos, N, NH, HD, rot, theta);
    end(r, n0);
}
static void rc_gd_partial_rope_fwd(dllm_backend *be, float *out, const float *x,
                                   const int32_t *pos, int N, int NH, int HD, int rot, float theta)
{
    rc_gd_partial_rope(be, true, out, x, pos, N, NH, HD, rot, theta);
}
static void rc_gd_partial_rope_bwd(dllm_backend *be, float *dx, const float *dout,
                                   const int32_t *pos, int N, int NH, int HD, int rot, float theta)
{
    rc_gd_partial_rope(be, false, dx, dout, pos, N, NH, HD, rot, theta);
}
static void rc_gd_out_gate_fwd(dllm_backend *be, float *out, const float *x, const float *gate,
                               size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_out_gate_fwd");
    elementwise(r, "gd_out_gate_fwd", n, 4, 8, 4);
    if (IN)
        INOPS->gd_out_gate_fwd(IN, out, x, gate, n);
    end(r, n0);
}
static void rc_gd_out_gate_bwd(dllm_backend *be, float *dx, float *dgate, const float *dout,
                               const float *x, const float *gate, size_t n)
{
    recorder *r = R(be);
    size_t n0 = begin(r, "gd_out_gate_bwd");
    elementwise(r, "gd_out_gate_bwd", n, 10, 20, 8);
    if (IN)
        INOPS->gd_out_gate_bwd(IN, dx, dgate, dout, x, gate, n);
    end(r, n0);
}


static const dllm_backend_ops record_ops = {
    .alloc = rc_alloc,
    .free = rc_free,
    .upload = rc_upload,
    .download = rc_download,
    .memset0 = rc_memset0,
    .sync = rc_sync,
    .gemm = rc_gemm,
    .gemm_bf16 = rc_gemm_bf16,
    .linear_fwd = rc_linear_fwd,
    .linear_bwd = rc_linear_bwd,
    .fp8_linear_fwd = rc_fp8_linear_fwd,
    .rmsnorm_fwd = rc_rmsnorm_fwd,
    .rmsnorm_bwd = rc_rmsnorm_bwd,
    .rope_fwd = rc_rope_fwd,
    .rope_bwd = rc_rope_bwd,
    .attn_state_floats = rc_attn_state_floats,
    .attention_fwd = rc_attention_fwd,
    .attention_bwd = rc_attention_bwd,
    .kv_append = rc_kv_append,
    .attention_cached = rc_attention_cached,
    .swiglu_fwd = rc_swiglu_fwd,
    .swiglu_bwd = rc_swiglu_bwd,
    .embedding_fwd = rc_embedding_fwd,
    .embedding_bwd = rc_embedding_bwd,
    .xent_fwd = rc_xent_fwd,
    .xent_bwd = rc_xent_bwd,
    .round_bf16 = rc_round_bf16,
    .add = rc_add,
    .adamw = rc_adamw,
    .grad_norm = rc_grad_norm,
    .copy = rc_copy,
    .copy_2d = rc_copy_2d,
    .bias_fwd = rc_bias_fwd,
    .bias_bwd = rc_bias_bwd,
    .to_bf16 = rc_to_bf16,
    .fp8_quantise = rc_fp8_quantise,
    .pack_weight = dllm_backend_device_pack_weight,
    .free_weight = dllm_backend_device_free_weight,
    .bf16_linear_fwd = rc_bf16_linear_fwd,
    .nvfp4_linear_fwd = NULL,
    .int8_linear_fwd = rc_int8_linear_fwd,
    .clip_grad = rc_clip_grad,
    .act_quant_prepare = rc_act_quant_prepare,
    .rmsnorm_quant_fwd = rc_rmsnorm_quant_fwd,
    .swiglu_quant_fwd = rc_swiglu_quant_fwd,
    .linear_quant_act_fwd = rc_linear_quant_act_fwd,
    .bf16_linear_bwd_x = rc_bf16_linear_bwd_x,
    .bf16_lora_fwd = rc_bf16_lora_fwd,
    .bf16_lora_bwd = rc_bf16_lora_bwd,
    .weight_cache_free = rc_weight_cache_free,
    .linears_fwd = NULL, /* the CPU's: the core asks dllm_backend_supports */
    .ar_choose = rc_ar_choose,
    .ar_choose_nucleus = NULL,
    .denoise_block_counts = rc_denoise_block_counts,
    .denoise_rows = rc_denoise_rows,
    .denoise_logits_fix = rc_denoise_logits_fix,
    .denoise_draw = rc_denoise_draw,
    .denoise_commit = rc_denoise_commit,
    .dream_draw = rc_dream_draw,
    .dream_commit = rc_dream_commit,
    .gd_conv_fwd = rc_gd_conv_fwd, .gd_conv_bwd = rc_gd_conv_bwd,
    .gd_l2norm_fwd = rc_gd_l2norm_fwd, .gd_l2norm_bwd = rc_gd_l2norm_bwd,
    .gd_gates_fwd = rc_gd_gates_fwd, .gd_gates_bwd = rc_gd_gates_bwd,
    .gd_rule_recurrent_fwd = rc_gd_rule_recurrent_fwd,
    .gd_rule_chunked_fwd = rc_gd_rule_chunked_fwd, .gd_rule_bwd = rc_gd_rule_bwd,
    .gd_gated_rmsnorm_fwd = rc_gd_gated_rmsnorm_fwd,
    .gd_gated_rmsnorm_bwd = rc_gd_gated_rmsnorm_bwd,
    .gd_partial_rope_fwd = rc_gd_partial_rope_fwd, .gd_partial_rope_bwd = rc_gd_partial_rope_bwd,
    .gd_out_gate_fwd = rc_gd_out_gate_fwd, .gd_out_gate_bwd = rc_gd_out_gate_bwd,
    .adamw_step = rc_adamw_step,
    .linear_res_fwd = rc_linear_res_fwd,
    .rope_attention_fwd = rc_rope_attention_fwd,
    .rope_attention_bwd = rc_rope_attention_bwd,
};

/* ---- the instance ---------------------------------------------------------------------- */

dllm_backend *dllm_record_new(dllm_backend *inner, bool block_fp8)
{
    recorder *r = dllm_calloc(1, sizeof *r);
    r->be = (dllm_backend){DLLM_BACKEND_CUDA, "record", &record_ops, r};
    r->inner = inner;
    r->block_fp8 = block_fp8;
    r->next = (uintptr_t)1 << 46; /* far from any host heap: inner pointers never collide */
    r->tags[r->ntags++] = "other";
    return &r->be;
}

void dllm_record_free(dllm_backend *be)
{
    if (!be)
        return;
    recorder *r = R(be);
    free(r->ev);
    free(r->tab);
    free(r);
}

bool dllm_record_is(const dllm_backend *be) { return be && be->ops == &record_ops; }

const rec_event *dllm_record_events(const dllm_backend *be, size_t *n)
{
    *n = RC(be)->n;
    return RC(be)->ev;
}

void dllm_record_clear(dllm_backend *be) { R(be)->n = 0; }
int64_t dllm_record_live(const dllm_backend *be) { return RC(be)->live; }
int64_t dllm_record_peak(const dllm_backend *be) { return RC(be)->peak; }
void dllm_record_reset_peak(dllm_backend *be)
{
    recorder *r = R(be);
    r->peak = r->live;
    memcpy(r->tag_peak, r->tag_live, sizeof r->tag_peak);
}

void dllm_record_tag(dllm_backend *be, const char *tag)
{
    recorder *r = R(be);
    r->tag = tag_index(r, tag);
}

int dllm_record_peak_by_tag(const dllm_backend *be, rec_tag_bytes *out, int max)
{
    const recorder *r = RC(be);
    int n = 0;
    for (int i = 0; i < r->ntags && n < max; i++)
        if (r->tag_peak[i])
            out[n++] = (rec_tag_bytes){r->tags[i], r->tag_peak[i]};
    return n;
}

void dllm_record_set_hook(dllm_backend *be, rec_call_hook hook, void *ctx)
{
    R(be)->hook = hook;
    R(be)->hook_ctx = ctx;
}
