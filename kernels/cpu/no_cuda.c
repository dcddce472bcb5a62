/* no_cuda.c: the CUDA device API when the backend is not built. */
#include "config.h"
#include "kernels/cuda_device.h"

#include <stdio.h>

#ifndef HAVE_CUDA
int dllm_cuda_device_count(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "built without CUDA (configure --with-cuda)");
    return 0;
}

int dllm_cuda_device_describe(int i, char *out, size_t out_len)
{
    (void)i;
    if (out && out_len)
        out[0] = '\0';
    return -1;
}
#endif
