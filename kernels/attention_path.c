/* attention_path.c: which kernels the CUDA backend's attention runs, decided in C so
 * that the recording backend (kernels/record), which runs without a device, classifies
 * the same launches as the device executes. */
#include "config.h"
#include "kernels/attention_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dllm_cuda_attention_tc(int head_dim)
{
    const char *env = getenv("DLLM_CUDA_ATTENTION");
    bool tc = true;
    if (env && *env) {
        if (strcmp(env, "fp32") == 0)
            tc = false;
        else if (strcmp(env, "tc") != 0) {
            fprintf(stderr, "DLLM_CUDA_ATTENTION=%s: expected tc or fp32\n", env);
            exit(2);
        }
    }
    return tc && head_dim <= DLLM_CUDA_ATTENTION_TC_MAX_HD;
}
