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

extern "C" int dllm_cuda_device_identity(int i, char *uuid, size_t uuid_len, char *pci,
                                         size_t pci_len)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
        snprintf(uuid, uuid_len, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(e));
        return -1;
    }
    const unsigned char *b = (const unsigned char *)p.uuid.bytes;
    /* nvidia-smi's spelling: groups of 4-2-2-2-6 bytes */
    snprintf(uuid, uuid_len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    snprintf(pci, pci_len, "%04x:%02x:%02x", (unsigned)p.pciDomainID & 0xFFFFu,
             (unsigned)p.pciBusID & 0xFFu, (unsigned)p.pciDeviceID & 0xFFu);
    return 0;
}

extern "C" int dllm_cuda_idle(char *why, size_t why_len)
{
    cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess)
        return 1;
    if (e == cudaErrorNotReady)
        return 0;
    if (why)
        snprintf(why, why_len, "%s", cudaGetErrorString(e));
    return -1;
}
