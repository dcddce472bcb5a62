/* device.cu: device discovery for the CUDA backend. */
#include "kernels/cuda_device.h"
#include "kernels/cuda/check.cuh"

extern "C" int dllm_cuda_device_count(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why)
            snprintf(why, why_len, "no usable CUDA device: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why)
        snprintf(why, why_len, "no CUDA device present");
    return n;
}

extern "C" int dllm_cuda_device_describe(int i, char *out, size_t out_len)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
        return -1;
    snprintf(out, out_len, "%s (sm_%d%d, %.1f GiB, %d SMs)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.multiProcessorCount);
    return 0;
}
