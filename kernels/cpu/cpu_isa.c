/* cpu_isa.c: the CPU's features under the DLLM_CPU_ISA cap (cpu_isa.h). */
#include "kernels/cpu/cpu_isa.h"

#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#ifdef HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

enum { CAP_NATIVE, CAP_AVX2, CAP_BASELINE };
static const char *const CAP_NAMES[] = {"native", "avx2", "baseline"};

/* DLLM_AMX: auto (or unset) or off; anything else exits 2 (unused where neither AMX nor
 * oneDNN can be) */
__attribute__((unused)) static bool amx_off(void)
{
    const char *e = getenv("DLLM_AMX");
    if (e && *e && strcmp(e, "off") && strcmp(e, "auto")) {
        fprintf(stderr, "dllm-rl: DLLM_AMX=%s: expected auto or off\n", e);
        exit(2);
    }
    return e && !strcmp(e, "off");
}

/* AMX with bf16: the CPU has it, DLLM_AMX is not "off", and Linux grants the process the
 * tile data state (asked once; a kernel that refuses leaves the AVX-512 kernels). */
static bool amx_bf16(void)
{
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && __GNUC__ >= 11
    static atomic_int ok = -1;
    int v = atomic_load(&ok);
    if (v >= 0)
        return v;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    __builtin_cpu_init();
    v = !amx_off() && __builtin_cpu_supports("amx-tile") &&
        __builtin_cpu_supports("amx-bf16") &&
        syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    atomic_store(&ok, v);
    return v;
#else
    return false;
#endif
}

static bool native(cpu_feature f)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    switch (f) {
    case CPU_AVX2:
        return __builtin_cpu_supports("avx2");
    case CPU_FMA:
        return __builtin_cpu_supports("fma");
    case CPU_AVX512F:
        return __builtin_cpu_supports("avx512f");
    case CPU_AVX512BF16:
        return __builtin_cpu_supports("avx512bf16");
    case CPU_AVX512VNNI:
        return __builtin_cpu_supports("avx512vnni");
    case CPU_AVXVNNI:
#if __GNUC__ >= 11
        return __builtin_cpu_supports("avxvnni");
#else
        return false;
#endif
    case CPU_AMXBF16:
        return amx_bf16();
    default:
        return false;
    }
#else
    (void)f;
    return false;
#endif
}

/* the cap, read once (any thread may ask first: each reads the same variable) */
static int cap(void)
{
    static atomic_int c = -1;
    int v = atomic_load(&c);
    if (v >= 0)
        return v;
    const char *e = getenv("DLLM_CPU_ISA");
    v = CAP_NATIVE;
    if (e && *e) {
        int i = 0;
        while (i < 3 && strcmp(e, CAP_NAMES[i]))
            i++;
        if (i == 3) {
            fprintf(stderr, "dllm-rl: DLLM_CPU_ISA=%s: expected native, avx2 or baseline\n", e);
            exit(2);
        }
        v = i;
    }
#ifdef HAVE_DNNL
    /* before oneDNN makes its first primitive, which fixes its ISA */
    if (v != CAP_NATIVE)
        dnnl_set_max_cpu_isa(v == CAP_AVX2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41);
    else if (amx_off())
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16); /* oneDNN's tiles too */
#endif
    atomic_store(&c, v);
    return v;
}

bool cpu_has(cpu_feature f)
{
    switch (cap()) {
    case CAP_AVX2:
        return (f == CPU_AVX2 || f == CPU_FMA) && native(f);
    case CAP_BASELINE:
        return false;
    default:
        return native(f);
    }
}

const char *cpu_isa_cap(void) { return CAP_NAMES[cap()]; }

int cpu_vec_level(void)
{
    int level = 0;
#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 12
    __builtin_cpu_init();
    level = __builtin_cpu_supports("x86-64-v4") ? 2 : __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
#elif defined(__x86_64__) && defined(__GNUC__)
    level = native(CPU_AVX512F) ? 2 : native(CPU_AVX2) && native(CPU_FMA) ? 1 : 0;
#endif
    int c = cap();
    return c == CAP_BASELINE ? 0 : c == CAP_AVX2 && level > 1 ? 1 : level;
}
