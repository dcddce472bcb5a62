/* device.cu: device discovery and plain device memory for the CUDA backend. */
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

extern "C" void *dllm_cuda_malloc(size_t bytes)
{
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

extern "C" void dllm_cuda_free(void *p)
{
    if (p)
        cudaCheck(cudaFree(p));
}

extern "C" void dllm_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

extern "C" void dllm_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

extern "C" void dllm_cuda_memset(void *p, int byte, size_t bytes)
{
    cudaCheck(cudaMemset(p, byte, bytes));
}

extern "C" void dllm_cuda_synchronize(void)
{
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaGetLastError());
}

extern "C" int dllm_cuda_set_device(int i, char *why, size_t why_len)
{
    cudaError_t e = cudaSetDevice(i);
    if (e == cudaSuccess)
        return 0;
    if (why)
        snprintf(why, why_len, "cudaSetDevice(%d): %s", i, cudaGetErrorString(e));
    return -1;
}
