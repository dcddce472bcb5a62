/* record.h: the recording backend -- the backend table (kernels/backend.h) run without a
 * device. It allocates nothing real and computes nothing: every entry records what the
 * CUDA backend (kernels/cuda/backend_cuda.cu) issues for the same call, one event per
 * kernel, cuBLASLt matmul, device copy or memset, allocation, transfer and host
 * synchronisation, with its shape, FLOPs, bytes read and written and the unit that
 * runs it there today. The model code runs its real paths on it (a denoising step,
 * scoring, the update) at any shape in seconds: what `dllm-rl plan --time` models and
 * where its device memory comes from.
 *
 * Pointers it hands out are addresses nobody may read (256-byte aligned as cudaMalloc's,
 * so alignment-dependent choices of the CUDA backend come out the same); downloads
 * write zeros. With an inner backend (the emulated CUDA backend in the tests) every
 * call is recorded and then run there, so the recording can be checked against what
 * that backend really issued. */
#ifndef DLLM_RECORD_H
#define DLLM_RECORD_H

#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where an event runs on the CUDA backend of today (Hopper's units). */
typedef enum {
    REC_UNIT_FP8_TC = 0,  /* FP8 tensor cores (cuBLASLt FP8 matmul) */
    REC_UNIT_BF16_TC,     /* BF16 tensor cores (cuBLASLt BF16 matmul, fp32 accumulation) */
    REC_UNIT_TF32_TC,     /* TF32 tensor cores (no op uses them today) */
    REC_UNIT_FP32_CORE,   /* fp32 CUDA cores: CUBLAS_COMPUTE_32F GEMMs, attention's tiles */
    REC_UNIT_MEMORY,      /* elementwise, norms, conversions, copies: bandwidth-bound */
    REC_UNIT_INT8_TC,     /* INT8 tensor cores (cuBLASLt INT8 matmul, int32 accumulation) */
    REC_NUNITS
} rec_unit;

extern const char *const rec_unit_names[REC_NUNITS];

typedef enum {
    REC_KERNEL = 0, /* one kernel launch */
    REC_MATMUL,     /* one cuBLASLt matmul */
    REC_COPY,       /* a device-side memcpy or memset (a GPU operation, not a kernel) */
    REC_H2D,        /* a blocking host-to-device copy (a transfer and a host sync) */
    REC_D2H,        /* a blocking device-to-host copy (a transfer and a host sync) */
    REC_SYNC,       /* a host synchronisation without a transfer */
    REC_ALLOC,      /* cudaMalloc */
    REC_FREE,       /* cudaFree */
    REC_NKINDS
} rec_kind;

extern const char *const rec_kind_names[REC_NKINDS];

typedef struct {
    const char *op;     /* the table entry that issued it ("fp8_linear_fwd") */
    const char *what;   /* the kernel, matmul or copy ("fp8_quant_rows", "scale_copy") */
    rec_kind kind;
    rec_unit unit;
    char shape[64];     /* the call's shape, "N=.. C=.. OC=.." */
    double flops;       /* multiply-adds count 2 */
    double rd, wr;      /* bytes read and written in device memory (compulsory traffic) */
    double xfer;        /* bytes across the host link (H2D, D2H) */
    int64_t bytes;      /* ALLOC / FREE: the allocation's size */
    const void *weight; /* a linear's weight operand (its bytes in weight_bytes), else NULL */
    double weight_bytes;
    bool dense;         /* a GEMM or attention: counted in a phase's ideal */
} rec_event;

/* A new recording backend (kind DLLM_BACKEND_CUDA, name "record"), or over inner: every
 * call recorded, then run on inner. block_fp8: whether block-scaled FP8 GEMMs exist
 * (cuBLASLt 12.9 or later; the CUDA backend asks its library). Free it with
 * dllm_record_free. */
dllm_backend *dllm_record_new(dllm_backend *inner, bool block_fp8);
void dllm_record_free(dllm_backend *be);
/* Whether be is a recording backend. */
bool dllm_record_is(const dllm_backend *be);

/* The events since the start or the last clear (valid until the next call on be). */
const rec_event *dllm_record_events(const dllm_backend *be, size_t *n);
void dllm_record_clear(dllm_backend *be);

/* Device bytes: allocated now, and the most allocated at once since the start or the
 * last dllm_record_reset_peak (the CUDA backend's workspaces and cuBLASLt's included). */
int64_t dllm_record_live(const dllm_backend *be);
int64_t dllm_record_peak(const dllm_backend *be);
void dllm_record_reset_peak(dllm_backend *be);

/* Allocation labels: tag names the allocations from now on (a string that outlives be;
 * NULL: "other"); the CUDA backend's own (its workspace, its buffer of fused FP8
 * activations, cuBLASLt's workspace) carry their own names. At most 31 distinct tags;
 * later ones count as "other". */
void dllm_record_tag(dllm_backend *be, const char *tag);
typedef struct {
    const char *tag;
    int64_t bytes;
} rec_tag_bytes;
/* The bytes live at the peak by tag, in the order the tags were first used (those with
 * none left out); returns how many were written to out (at most max). */
int dllm_record_peak_by_tag(const dllm_backend *be, rec_tag_bytes *out, int max);

/* Called after every table call with the events that call recorded (the tests compare
 * them with what the inner backend did). NULL: none. */
typedef void (*rec_call_hook)(void *ctx, const char *op, const rec_event *ev, size_t n);
void dllm_record_set_hook(dllm_backend *be, rec_call_hook hook, void *ctx);

#endif
