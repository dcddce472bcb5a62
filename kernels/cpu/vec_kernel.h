/* Hot loops compiled in several versions, the loader picking one for the CPU it runs on
 * (GCC's target_clones on x86-64; other compilers and targets build the one baseline
 * version). At -O2 GCC vectorises only loops that need no scalar remainder, so each of
 * these also asks for the usual cost model.
 *
 *   VEC_KERNEL_WIDE     AVX-512, AVX2 and the baseline.
 *   VEC_KERNEL_WIDE_NO_TRAP  as VEC_KERNEL_WIDE, with VEC_KERNEL_NO_TRAP's selects.
 *   VEC_KERNEL          AVX2 (with FMA) and the baseline.
 *   VEC_KERNEL_NO_TRAP  as VEC_KERNEL, and float compares may become branch-free
 *                       selects (they raise no exception the code looks at).
 *   VEC_INLINE, VEC_INLINE_NO_TRAP: helpers forced inline into such a kernel, with its
 *                       vectoriser options.
 *
 * The set a loop is compiled for is part of its numerics: a clone may form fused
 * multiply-adds or vectorise differently. Moving a loop to another set needs the
 * bit-identity checks its kernel's tests and the quickstart log give. */
#ifndef DLLM_KERNELS_CPU_VEC_KERNEL_H
#define DLLM_KERNELS_CPU_VEC_KERNEL_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define VEC_OPTIMIZE optimize("tree-vectorize", "vect-cost-model=dynamic")
#define VEC_OPTIMIZE_NO_TRAP                                                             \
    optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#define VEC_CLONES_WIDE target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")
#define VEC_CLONES target_clones("arch=x86-64-v3", "default")
#define VEC_KERNEL_WIDE __attribute__((VEC_CLONES_WIDE, VEC_OPTIMIZE))
#define VEC_KERNEL_WIDE_NO_TRAP __attribute__((VEC_CLONES_WIDE, VEC_OPTIMIZE_NO_TRAP))
#define VEC_KERNEL __attribute__((VEC_CLONES, VEC_OPTIMIZE))
#define VEC_KERNEL_NO_TRAP __attribute__((VEC_CLONES, VEC_OPTIMIZE_NO_TRAP))
#define VEC_INLINE static inline __attribute__((always_inline, VEC_OPTIMIZE))
#define VEC_INLINE_NO_TRAP static inline __attribute__((always_inline, VEC_OPTIMIZE_NO_TRAP))
#else
#define VEC_KERNEL_WIDE
#define VEC_KERNEL_WIDE_NO_TRAP
#define VEC_KERNEL
#define VEC_KERNEL_NO_TRAP
#define VEC_INLINE static inline
#define VEC_INLINE_NO_TRAP static inline
#endif

#endif
