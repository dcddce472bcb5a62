/* cpu_paths.c: the CPU and the paths its kernels take here, in one line (kernels/ops.h). */
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vexpf.h"
#include "kernels/fp8.h"
#include "kernels/int8.h"
#include "kernels/ops.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* /proc/cpuinfo's first "model name", or "unknown" */
static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10))
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, cap, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

void op_cpu_paths(char *out, size_t cap)
{
    char model[128];
    cpu_model(model, sizeof model);
    const char *isa = cpu_has(CPU_AVX512F) ? "avx512" : cpu_has(CPU_AVX2) ? "avx2" : "baseline";
    /* under a cap, OpenBLAS's kernels too: it chose them at load (OPENBLAS_CORETYPE) */
    char isa_cap[128];
    if (strcmp(cpu_isa_cap(), "native"))
        snprintf(isa_cap, sizeof isa_cap, "%s, DLLM_CPU_ISA=%s, openblas core %s", isa,
                 cpu_isa_cap(), openblas_get_corename());
    else
        snprintf(isa_cap, sizeof isa_cap, "%s", isa);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    bool dnnl = op_gemm_library() == OP_GEMM_DNNL;
    snprintf(out, cap,
             "cpu %s (%s); fp32 gemm %s%s%s; bf16 %s; fp8 %s; int8 %s; expf %s; threads %d",
             model, isa_cap, dnnl ? "dnnl" : "openblas", !dnnl && ct ? " coretype " : "",
             !dnnl && ct ? ct : "", op_bf16_gemm_path(), fp8_fast_path(), int8_cpu_isa(),
             vexpf_path(), omp_get_max_threads());
}
