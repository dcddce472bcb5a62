/* vexpf.h: expf over an array with the C library's bits, vectorised where the CPU
 * allows (vexpf.c). */
#ifndef DLLM_KERNELS_CPU_VEXPF_H
#define DLLM_KERNELS_CPU_VEXPF_H

#include <stdbool.h>
#include <stddef.h>

/* out[i] = expf(x[i]), bit for bit; out may equal x */
void vexpf(float *out, const float *x, size_t n);
/* The plain loop of library calls (the reference). */
void vexpf_ref(float *out, const float *x, size_t n);
/* Whether vexpf runs vectorised here (AVX-512, or AVX2 with FMA, and the load-time
 * check passed), and which: "avx512", "avx2" or "libm". */
bool vexpf_fast(void);
const char *vexpf_path(void);

#endif
