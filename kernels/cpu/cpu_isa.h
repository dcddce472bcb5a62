/* cpu_isa.h: the CPU features the kernels may use (cpu_isa.c). Every fast path asks here,
 * never the CPU directly, so DLLM_CPU_ISA can cap them: `native` (default: what the CPU
 * has), `avx2` (AVX2 and FMA only: the paths of a CPU without AVX-512 or AVX-VNNI, on any
 * newer one) or `baseline` (none: the portable loops). A cap also holds oneDNN to it.
 * The multiversioned loops of vec_kernel.h ask too (cpu_vec_level). Not capped: what the
 * loader picks before any code runs -- OpenBLAS's kernels (OPENBLAS_CORETYPE) and the C
 * library's own variants. */
#ifndef DLLM_KERNELS_CPU_ISA_H
#define DLLM_KERNELS_CPU_ISA_H

#include <stdbool.h>

typedef enum {
    CPU_AVX2,
    CPU_FMA,
    CPU_AVX512F,
    CPU_AVX512BF16,
    CPU_AVX512VNNI,
    CPU_AVXVNNI,
    CPU_AMXBF16, /* AMX tiles with bf16 dot products, and the kernel's leave to use them
                    (asked for once); DLLM_AMX=off leaves them unused */
    CPU_NFEATURES
} cpu_feature;

/* Whether the CPU has f and the cap allows it. An unknown DLLM_CPU_ISA exits 2 naming it. */
bool cpu_has(cpu_feature f);
/* The widest build of the multiversioned loops (vec_kernel.h) the CPU has and the cap
 * allows: 2 x86-64-v4 (AVX-512), 1 x86-64-v3 (AVX2, FMA), 0 the portable one. */
int cpu_vec_level(void);
/* The cap in force: "native", "avx2" or "baseline". */
const char *cpu_isa_cap(void);

#endif
