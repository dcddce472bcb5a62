/* selftest.h: `dllm-rl selftest`: the table of checks (one row each: PASS, FAIL or
 * SKIP, the measured number, the tolerance, a note) and the modules that fill it:
 * selftest_cpu.c (the fast CPU products against the exact fp32 reference),
 * selftest_rollout.c (each rollout precision's CPU product and step ratio to fp32),
 * selftest_cuda.c (the device, the runtime and cuBLASLt probes, every op of the backend
 * table and the FP8 GEMM against the CPU, GEMM rates), selftest_greedy.c (greedy tokens
 * of tiny random models on the device against the CPU, judged with a tie margin),
 * selftest_cli.c (generate and score of a small model on the device against the CPU, as
 * child processes). */
#ifndef DLLM_SELFTEST_H
#define DLLM_SELFTEST_H

#include <stdbool.h>
#include <stdio.h>

typedef enum { STBL_PASS = 0, STBL_FAIL, STBL_SKIP } stbl_status;

typedef struct {
    char check[72];     /* what was checked */
    stbl_status status;
    char measured[48];  /* the number (an error, a rate), or "" */
    char tolerance[40]; /* its bound, or "" */
    char note[240];     /* shape, path, first failure, why skipped */
} stbl_row;

typedef struct {
    stbl_row *rows;
    int n, cap;
    bool quick;          /* small shapes only (--quick) */
    const char *exe;     /* this binary, for the child-process rows */
    const char *perturb; /* DLLM_SELFTEST_PERTURB: an op whose device result is altered */
    FILE *live;          /* rows are printed here as they are added (NULL: not) */
} stbl_table;

/* Adds a row (printf-formatted note) and prints it to t->live. */
void stbl_add(stbl_table *t, const char *check, stbl_status s, const char *measured,
              const char *tolerance, const char *note_fmt, ...)
    __attribute__((format(printf, 6, 7)));
void stbl_print_header(FILE *f);
void stbl_print_row(FILE *f, const stbl_row *r);
/* The summary line: counts per status. */
void stbl_print_summary(const stbl_table *t, FILE *f);
int stbl_count(const stbl_table *t, stbl_status s);
/* The table as one JSON object, into path; an error message into why on failure. */
int stbl_write_json(const stbl_table *t, const char *device, const char *path, char *why, size_t n);
void stbl_free(stbl_table *t);

/* The modules. Each adds its rows. */
void selftest_cpu(stbl_table *t);
/* One row per rollout precision: its CPU product here and its step time against fp32. */
void selftest_rollout(stbl_table *t);
void selftest_cuda(stbl_table *t);
/* Greedy tokens of the device against the CPU's, a difference counted only where the
 * CPU's top-2 logit gap exceeds the tie margin. */
void selftest_greedy(stbl_table *t);
void selftest_cli(stbl_table *t);

#endif
