/* backend_cases.h: op cases of the backend table (kernels/backend.h) that run on two
 * backends with the same data and are compared output by output.
 *
 * A case names a table entry, its shape, its buffers (inputs, accumulated gradients,
 * outputs) with their contents, and the bound of each output: normalised MSE,
 * sum (dev - ref)^2 / sum ref^2, 0 meaning bit for bit. dllm_backend_cases is the table
 * of tests/unit/test_backend_ops.c (its shapes and tolerances, stated there);
 * bcase_model_cases builds the same cases at a model's shapes with the same
 * tolerances, which `dllm-rl selftest --device cuda` runs. Nothing here needs CUDA: a
 * case calls only the backend table. */
#ifndef DLLM_BACKEND_CASES_H
#define DLLM_BACKEND_CASES_H

#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- host helpers shared with the parity tests --------------------------------------- */

/* x[i] = scale * N(0,1), keyed by seed (the same numbers on every machine). */
void dllm_fill_normal(float *x, size_t n, uint64_t seed, double scale);
float *dllm_host_normal(size_t n, uint64_t seed, double scale); /* malloc'd */
/* sum (a - ref)^2 / sum ref^2; a NaN or inf where ref has none (or differs) gives +inf;
 * NaN in both places agrees. */
double dllm_nmse(const float *a, const float *ref, size_t n);

/* Tolerance of an FP8 GEMM on Hopper tensor cores against exact products with fp32
 * sums. Within each promotion interval the FP8 accumulator keeps about 14 significant
 * bits, so each of the K/32 MMA steps may drop up to 2^-13 of the running partial sum;
 * with partial sums up to about twice the result that is a normalised MSE of at most
 * about (K/32) * 2^-24. (A bound of 1e-9 would assume full fp32 accumulation and fail
 * on a real GPU; the emulation's cuBLASLt models the accumulator and shows it.) */
#define FP8_GEMM_NMSE(K) ((double)(K) / 32.0 * 5.96e-8)
/* Attention on tensor cores (kernels/cuda/attention_tc.cu, head dims up to 128) against
 * the fp32 CPU op: bf16 operands (Q, K, V, dO, P, dS) summed in fp32; the bound of the
 * gradients' normalised squared error (the forward's is 10x tighter). One bf16 rounding
 * is about 1.3e-6; typical results are 6e-6 .. 1.1e-5 (forward) and 7e-6 .. 2.1e-5. */
#define ATT_TC_NMSE 3e-4

/* ---- cases ------------------------------------------------------------------------------- */

enum { BCASE_MAXB = 16 };
typedef enum { BK_F32, BK_I32, BK_U8 } bcase_kind;

typedef struct {
    const char *name;
    bcase_kind kind;
    size_t n;        /* elements; for the attention state: from the backend */
    void *init;      /* contents (malloc'd, freed by whoever runs the case); NULL = zeros */
    double tol;      /* output: nmse bound, 0 = bit for bit; < 0: not compared */
    bool attn_state; /* sized by attn_state_floats(be, d[0], d[1], d[2]) */
} bcase_buf;

typedef struct bcase bcase;
struct bcase {
    const char *op; /* the table entry */
    char shape[64]; /* for messages */
    int d[8];       /* shape numbers, meaning per op (backend_cases.c) */
    double tol;     /* nmse bound of the outputs */
    void (*make)(const bcase *c, bcase_buf *b, int *nb);
    void (*run)(dllm_backend *be, const bcase *c, void **p, double *ret);
    double ret_tol; /* relative bound of a scalar result; < 0: none */
};

extern const bcase dllm_backend_cases[];
extern const size_t dllm_backend_n_cases;

/* Bytes of buffer b of case c on backend be (the attention state is the backend's). */
size_t bcase_buf_bytes(const bcase_buf *b, dllm_backend *be, const bcase *c);

/* A model's dimensions for bcase_model_cases: rows = tokens of one batch of the layer
 * ops; B x T the attention batch; C hidden, NH / NKV heads of HD, I the MLP width, V the
 * vocabulary. */
typedef struct {
    const char *name;
    int rows, C, NH, NKV, HD, I, V, B, T;
} bcase_model;

/* Every op of the table at m's shapes (the dims each op takes from m are in
 * backend_cases.c), each with the tolerance of the test table's case of that op
 * (FP8 GEMMs: FP8_GEMM_NMSE of the model's K). Returns the count written (at most max). */
int bcase_model_cases(const bcase_model *m, bcase *out, int max);

/* The outcome of one case on a device backend against a reference backend. */
typedef struct {
    bool ok;
    double err;        /* the worst output's nmse (or relative error of the scalar) */
    double tol;        /* its bound */
    char what[48];     /* that output's name */
    char msg[200];     /* the first violation, "" when ok */
} bcase_result;

/* Runs c on ref and on dev with the same data and compares every output (a warm-up run
 * on dev first, as the test does). perturb (NULL: none) names an op whose device result
 * is altered after it is read back: a hook for tests of whoever reports the result. */
void bcase_compare(dllm_backend *ref, dllm_backend *dev, const bcase *c, const char *perturb,
                   bcase_result *r);

#endif
