/* Hot loops compiled in several versions, one picked at its first call for the CPU it runs
 * on under the DLLM_CPU_ISA cap (cpu_vec_level, kernels/cpu/cpu_isa.h) -- on x86-64 with
 * GCC; other compilers and targets build the one baseline version. At -O2 GCC vectorises
 * only loops that need no scalar remainder, so each of these also asks for the usual cost
 * model. A kernel is a static function written
 *
 *   VEC_KERNEL(float, name, (const float *x, int n), (x, n))
 *   {
 *       ... the body ...
 *   }
 *
 * (the return type, the name, the parameters, and the same as arguments): the body is
 * compiled into each version, which the first call picks and later calls reuse.
 *
 *   VEC_KERNEL_WIDE     x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline.
 *   VEC_KERNEL_WIDE_NO_TRAP  as VEC_KERNEL_WIDE, with VEC_KERNEL_NO_TRAP's selects.
 *   VEC_KERNEL          x86-64-v3 and the baseline.
 *   VEC_KERNEL_NO_TRAP  as VEC_KERNEL, and float compares may become branch-free
 *                       selects (they raise no exception the code looks at).
 *   VEC_INLINE, VEC_INLINE_NO_TRAP: helpers forced inline into such a kernel, with its
 *                       vectoriser options.
 *
 * The set a loop is compiled for is part of its numerics: a version may form fused
 * multiply-adds or vectorise differently. Moving a loop to another set needs the
 * bit-identity checks its kernel's tests and the quickstart log give. */
#ifndef DLLM_KERNELS_CPU_VEC_KERNEL_H
#define DLLM_KERNELS_CPU_VEC_KERNEL_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#include "kernels/cpu/cpu_isa.h"

#define VEC_OPTIMIZE optimize("tree-vectorize", "vect-cost-model=dynamic")
#define VEC_OPTIMIZE_NO_TRAP                                                             \
    optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#define VEC_INLINE static inline __attribute__((always_inline, VEC_OPTIMIZE))
#define VEC_INLINE_NO_TRAP static inline __attribute__((always_inline, VEC_OPTIMIZE_NO_TRAP))

/* The body, forced inline into each version (whose target it is then compiled for). */
#define VEC_BODY_(opt, ret, name, params)                                                \
    static inline __attribute__((always_inline, opt)) ret name##_vbody params
/* The kernel: the version for the level cpu_vec_level allows, chosen once (every thread
 * that races to choose chooses the same). */
#define VEC_DISPATCH_(ret, name, params, args, pick)                                     \
    static ret name params                                                               \
    {                                                                                    \
        static ret(*chosen_) params;                                                     \
        ret(*f_) params = __atomic_load_n(&chosen_, __ATOMIC_RELAXED);                   \
        if (!f_) {                                                                       \
            int level_ = cpu_vec_level();                                                \
            f_ = pick;                                                                   \
            __atomic_store_n(&chosen_, f_, __ATOMIC_RELAXED);                            \
        }                                                                                \
        return f_ args;                                                                  \
    }
/* One version: the body compiled for target `tgt` ("default": the baseline). */
#define VEC_VERSION_(tgt, sfx, opt, ret, name, params, args)                             \
    __attribute__((noinline, target(tgt), opt)) static ret name##sfx params              \
    {                                                                                    \
        return name##_vbody args;                                                        \
    }
#define VEC_KERNEL3_(opt, ret, name, params, args)                                       \
    VEC_BODY_(opt, ret, name, params);                                                   \
    VEC_VERSION_("arch=x86-64-v4", _v4, opt, ret, name, params, args)                    \
    VEC_VERSION_("arch=x86-64-v3", _v3, opt, ret, name, params, args)                    \
    VEC_VERSION_("default", _v0, opt, ret, name, params, args)                           \
    VEC_DISPATCH_(ret, name, params, args,                                               \
                  level_ >= 2 ? name##_v4 : level_ == 1 ? name##_v3 : name##_v0)         \
    VEC_BODY_(opt, ret, name, params)
#define VEC_KERNEL2_(opt, ret, name, params, args)                                       \
    VEC_BODY_(opt, ret, name, params);                                                   \
    VEC_VERSION_("arch=x86-64-v3", _v3, opt, ret, name, params, args)                    \
    VEC_VERSION_("default", _v0, opt, ret, name, params, args)                           \
    VEC_DISPATCH_(ret, name, params, args, level_ >= 1 ? name##_v3 : name##_v0)           \
    VEC_BODY_(opt, ret, name, params)

#define VEC_KERNEL_WIDE(ret, name, params, args)                                         \
    VEC_KERNEL3_(VEC_OPTIMIZE, ret, name, params, args)
#define VEC_KERNEL_WIDE_NO_TRAP(ret, name, params, args)                                 \
    VEC_KERNEL3_(VEC_OPTIMIZE_NO_TRAP, ret, name, params, args)
#define VEC_KERNEL(ret, name, params, args) VEC_KERNEL2_(VEC_OPTIMIZE, ret, name, params, args)
#define VEC_KERNEL_NO_TRAP(ret, name, params, args)                                      \
    VEC_KERNEL2_(VEC_OPTIMIZE_NO_TRAP, ret, name, params, args)
#else
#define VEC_KERNEL_WIDE(ret, name, params, args) static ret name params
#define VEC_KERNEL_WIDE_NO_TRAP(ret, name, params, args) static ret name params
#define VEC_KERNEL(ret, name, params, args) static ret name params
#define VEC_KERNEL_NO_TRAP(ret, name, params, args) static ret name params
#define VEC_INLINE static inline
#define VEC_INLINE_NO_TRAP static inline
#endif

#endif
