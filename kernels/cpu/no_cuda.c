/* no_cuda.c: the CUDA device API when the backend is not built. Counting devices says
 * why there are none; anything that would touch device memory is a programming error
 * (the caller skipped dllm_cuda_device_count) and exits with status 1. */
#include "config.h"
#include "kernels/backend.h"
#include "kernels/cuda_device.h"

#include <stdio.h>
#include <stdlib.h>

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

static void no_device(const char *fn)
{
    fprintf(stderr, "dllm-rl: %s: built without CUDA (configure --with-cuda)\n", fn);
    exit(1);
}

void *dllm_cuda_malloc(size_t bytes)
{
    (void)bytes;
    no_device(__func__);
    return NULL;
}

void dllm_cuda_free(void *p)
{
    if (p)
        no_device(__func__);
}

void dllm_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    no_device(__func__);
}

void dllm_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    no_device(__func__);
}

void dllm_cuda_memset(void *p, int byte, size_t bytes)
{
    (void)p, (void)byte, (void)bytes;
    no_device(__func__);
}

void dllm_cuda_synchronize(void) { no_device(__func__); }

int dllm_cuda_set_device(int i, char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "device %d: built without CUDA (configure --with-cuda)", i);
    return -1;
}

int dllm_cuda_device_identity(int i, char *uuid, size_t uuid_len, char *pci, size_t pci_len)
{
    if (uuid)
        snprintf(uuid, uuid_len, "device %d: built without CUDA (configure --with-cuda)", i);
    if (pci && pci_len)
        pci[0] = '\0';
    return -1;
}

int dllm_cuda_idle(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "built without CUDA (configure --with-cuda)");
    return -1;
}

int dllm_cuda_int8_available(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "built without CUDA (configure --with-cuda)");
    return 0;
}

int dllm_cuda_fp8_available(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "built without CUDA (configure --with-cuda)");
    return 0;
}

dllm_backend *dllm_backend_cuda(void) { return NULL; }
const char *dllm_backend_cuda_why(void)
{
    return "built without CUDA (configure --with-cuda, or --enable-cuda-emulation to run the "
           "CUDA code on the host)";
}
size_t dllm_backend_cuda_workspace_bytes(void) { return 0; }
bool dllm_backend_cuda_fp8_block(char *why, size_t why_len)
{
    if (why)
        snprintf(why, why_len, "built without CUDA");
    return false;
}
void dllm_backend_cuda_transfers(unsigned long long *up, unsigned long long *down)
{
    *up = *down = 0;
}
#endif
