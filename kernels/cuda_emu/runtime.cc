/* runtime.cc: the runtime API of the CUDA emulation -- one device, device memory as
 * host memory with guard zones, streams and events as synchronous host operations,
 * launches checked as CUDA checks them, and CUDA's error codes.
 *
 * Device memory: every allocation is 256-byte aligned (as cudaMalloc) and framed by
 * 256-byte guard zones; it starts filled with 0xFF bytes (NaN floats, -1 integers) so a
 * read of memory never written shows. Guard zones are checked after every kernel, at
 * cudaFree and at every synchronisation; a damaged zone is reported with the kernel
 * that ran last and becomes the sticky error cudaErrorIllegalAddress, as an
 * out-of-bounds store is on a GPU. Copies and memsets must stay inside one allocation.
 * Environment: DLLM_EMU_DEVICES=0 pretends there is no device; DLLM_EMU_MEM_MB caps
 * device memory (cudaErrorMemoryAllocation past it); DLLM_EMU_SM=75 (two digits) makes it
 * answer with that compute capability instead of sm_90. The device's UUID is made from the
 * host name and the process id (every process has its own emulated device);
 * DLLM_EMU_DEVICE_UUID=text makes it from that text instead, so processes given the same
 * text present one device, as ranks sharing a GPU do.
 * A stall (dllm_emu::stall, the NCCL stand-in's collective whose peer is gone) leaves the
 * streams busy: cudaStreamQuery answers cudaErrorNotReady, and a synchronisation, which
 * on a GPU would wait forever, reports that and fails (cudaErrorLaunchFailure). */
#include "kernels/cuda_emu/emu_internal.h"

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

namespace {

enum { GUARD = 256, POISON = 0xFF };

struct allocation {
    size_t bytes;
    char *base; /* GUARD bytes, the payload, GUARD bytes */
};

std::map<uintptr_t, allocation> g_allocs;
cudaError_t g_sticky = cudaSuccess; /* a fault: every later call returns it */
cudaError_t g_last = cudaSuccess;   /* the last error, cleared by cudaGetLastError */
std::string g_last_kernel = "(none)";
dllm_emu_stats g_stats;
std::map<std::string, unsigned long long> g_max_blocks;
size_t g_cap = (size_t)-1;
bool g_init = false;
int g_devices = 1;
bool g_stalled = false;

struct CUstream_st_impl {
    int magic;
};
std::set<const void *> g_streams, g_events;

void init(void)
{
    if (g_init)
        return;
    g_init = true;
    const char *d = getenv("DLLM_EMU_DEVICES");
    if (d && *d)
        g_devices = atoi(d) > 0 ? 1 : 0;
    const char *m = getenv("DLLM_EMU_MEM_MB");
    if (m && *m)
        g_cap = (size_t)atoll(m) << 20;
}

cudaError_t fail(cudaError_t e)
{
    g_last = e;
    return e;
}

bool guards_ok(const allocation &a, const char **side)
{
    for (int i = 0; i < GUARD; i++) {
        if ((unsigned char)a.base[i] != POISON) {
            *side = "before the start";
            return false;
        }
        if ((unsigned char)a.base[GUARD + a.bytes + i] != POISON) {
            *side = "past the end";
            return false;
        }
    }
    return true;
}

/* Checks every guard zone; a damaged one becomes the sticky error. */
cudaError_t check_guards(const char *when)
{
    if (g_sticky != cudaSuccess)
        return g_sticky;
    for (auto &kv : g_allocs) {
        const char *side;
        if (!guards_ok(kv.second, &side)) {
            fprintf(stderr,
                    "dllm-rl: CUDA emulation: out-of-bounds write %s of a %zu-byte device "
                    "buffer, found %s; last kernel: %s\n",
                    side, kv.second.bytes, when, g_last_kernel.c_str());
            g_sticky = cudaErrorIllegalAddress;
            return fail(g_sticky);
        }
    }
    return cudaSuccess;
}

/* The allocation holding [p, p + n), or NULL. */
const allocation *find(const void *p, size_t n)
{
    uintptr_t u = (uintptr_t)p;
    auto it = g_allocs.upper_bound(u);
    if (it == g_allocs.begin())
        return NULL;
    --it;
    if (u < it->first || u + n > it->first + it->second.bytes || u + n < u)
        return NULL;
    return &it->second;
}

void report_range(const char *fn, const void *p, size_t n)
{
    fprintf(stderr, "dllm-rl: CUDA emulation: %s: [%p, +%zu) is not inside one device "
                    "allocation\n", fn, p, n);
}

} // namespace

namespace dllm_emu {
bool is_device_range(const void *p, size_t bytes) { return find(p, bytes ? bytes : 1) != NULL; }

void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
              thread_body body, void *ctx)
{
    init();
    if (g_sticky != cudaSuccess) {
        g_last = g_sticky;
        return;
    }
    if (s && !g_streams.count(s)) {
        fprintf(stderr, "dllm-rl: CUDA emulation: kernel %s launched on an unknown stream\n",
                name);
        fail(cudaErrorInvalidResourceHandle);
        return;
    }
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 ||
        grid.z > 65535 || smem > 48 * 1024) {
        fprintf(stderr, "dllm-rl: CUDA emulation: kernel %s: invalid configuration grid "
                        "(%u,%u,%u) block (%u,%u,%u) shared %zu\n", name, grid.x, grid.y,
                grid.z, block.x, block.y, block.z, smem);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    g_last_kernel = name;
    g_stats.launches++;
    unsigned long long nb = (unsigned long long)grid.x * grid.y * grid.z;
    g_stats.blocks += nb;
    unsigned long long &mb = g_max_blocks[name];
    if (nb > mb)
        mb = nb;
    char msg[700];
    if (!execute_grid(name, grid, block, smem, body, ctx, msg, sizeof msg)) {
        fprintf(stderr, "dllm-rl: CUDA emulation (schedule %s): %s\n", schedule_name(), msg);
        g_sticky = cudaErrorLaunchFailure;
        fail(g_sticky);
        return;
    }
    std::string when = std::string("after kernel ") + name;
    check_guards(when.c_str());
}

void count_heuristic(void) { g_stats.heuristics++; }
void count_matmul(void) { g_stats.matmuls++; }
void stall(bool on) { g_stalled = on; }
} // namespace dllm_emu

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulation)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = g_sticky;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_last; }

cudaError_t cudaGetDeviceCount(int *n)
{
    init();
    *n = g_devices;
    return g_devices ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int *dev)
{
    init();
    *dev = 0;
    return g_devices ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev)
{
    init();
    return dev == 0 && g_devices ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    init();
    if (dev != 0 || !g_devices)
        return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulation on the host, schedule %s",
             dllm_emu::schedule_name());
    p->totalGlobalMem = g_cap != (size_t)-1 ? g_cap : (size_t)80 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->maxThreadsPerBlock = 1024;
    p->major = 9; /* it answers as a Hopper: the kernels' target */
    p->minor = 0;
    const char *sm = getenv("DLLM_EMU_SM"); /* another compute capability: "80", "75" */
    if (sm && strlen(sm) == 2 && sm[0] >= '1' && sm[0] <= '9' && sm[1] >= '0' && sm[1] <= '9') {
        p->major = sm[0] - '0';
        p->minor = sm[1] - '0';
    }
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    /* FNV-1a of the identity text, twice with different seeds, as the 16 bytes */
    char who[320];
    const char *u = getenv("DLLM_EMU_DEVICE_UUID");
    if (u && *u) {
        snprintf(who, sizeof who, "%s", u);
    } else {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        snprintf(who, sizeof who, "%s:%ld", host, (long)getpid());
    }
    for (int half = 0; half < 2; half++) {
        uint64_t h = 1469598103934665603ull ^ (uint64_t)half;
        for (const char *c = who; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        memcpy(p->uuid.bytes + 8 * half, &h, 8);
    }
    p->pciBusID = 0; /* the bus id of every emulated device: the UUID tells them apart */
    p->pciDeviceID = 0;
    p->pciDomainID = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return e;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* A synchronisation behind a stall would never return on a GPU: said, and failed. */
static cudaError_t stalled(const char *where)
{
    fprintf(stderr, "dllm-rl: CUDA emulation: %s waits on a collective whose peer is gone "
                    "(on a GPU it would wait forever)\n", where);
    g_sticky = cudaErrorLaunchFailure;
    return fail(g_sticky);
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (g_stalled)
        return stalled("cudaDeviceSynchronize");
    return check_guards("at a synchronisation");
}

/* As CUDA: every allocation of the process is released and a sticky error cleared. */
cudaError_t cudaDeviceReset(void)
{
    for (auto &kv : g_allocs)
        free(kv.second.base);
    g_allocs.clear();
    g_stats.bytes_in_use = 0;
    g_sticky = g_last = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    init();
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (!g_devices)
        return fail(cudaErrorNoDevice);
    if (g_sticky != cudaSuccess)
        return g_sticky;
    if (bytes == 0)
        return cudaSuccess; /* as CUDA: success, NULL */
    if (bytes > g_cap || g_stats.bytes_in_use > g_cap - bytes)
        return fail(cudaErrorMemoryAllocation);
    size_t total = ((bytes + 2 * GUARD + 255) / 256) * 256;
    char *base = (char *)aligned_alloc(256, total);
    if (!base)
        return fail(cudaErrorMemoryAllocation);
    memset(base, POISON, total);
    g_allocs[(uintptr_t)(base + GUARD)] = allocation{bytes, base};
    g_stats.device_allocs++;
    g_stats.bytes_in_use += bytes;
    if (g_stats.bytes_in_use > g_stats.peak_bytes)
        g_stats.peak_bytes = g_stats.bytes_in_use;
    *p = base + GUARD;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end()) {
        fprintf(stderr, "dllm-rl: CUDA emulation: cudaFree(%p): not a device allocation "
                        "(freed twice, or a host pointer)\n", p);
        return fail(cudaErrorInvalidValue);
    }
    cudaError_t e = check_guards("at cudaFree");
    g_stats.bytes_in_use -= it->second.bytes;
    free(it->second.base);
    g_allocs.erase(it);
    return e;
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
    (void)s;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        g_stats.async_allocs++;
    return e;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    (void)s;
    return cudaFree(p);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    init();
    if (g_sticky != cudaSuccess)
        return g_sticky;
    if (bytes == 0)
        return cudaSuccess;
    bool dst_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    bool src_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    if ((int)k < 0 || (int)k > 4)
        return fail(cudaErrorInvalidMemcpyDirection);
    if (k == cudaMemcpyDefault) {
        dst_dev = find(dst, 1) != NULL;
        src_dev = find(src, 1) != NULL;
    }
    if (dst_dev && !find(dst, bytes)) {
        report_range("cudaMemcpy destination", dst, bytes);
        return fail(cudaErrorInvalidValue);
    }
    if (src_dev && !find(src, bytes)) {
        report_range("cudaMemcpy source", src, bytes);
        return fail(cudaErrorInvalidValue);
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, bytes, k);
}

cudaError_t cudaMemset(void *p, int byte, size_t bytes)
{
    init();
    if (g_sticky != cudaSuccess)
        return g_sticky;
    if (bytes == 0)
        return cudaSuccess;
    if (!find(p, bytes)) {
        report_range("cudaMemset", p, bytes);
        return fail(cudaErrorInvalidValue);
    }
    memset(p, byte, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, byte, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    CUstream_st_impl *x = new CUstream_st_impl{1};
    *s = (cudaStream_t)(void *)x;
    g_streams.insert(x);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!g_streams.erase(s))
        return fail(cudaErrorInvalidResourceHandle);
    delete (CUstream_st_impl *)(void *)s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (s && !g_streams.count(s))
        return fail(cudaErrorInvalidResourceHandle);
    if (g_stalled)
        return stalled("cudaStreamSynchronize");
    return check_guards("at a stream synchronisation");
}

/* Work is done when it is issued, except behind a stall. As CUDA, cudaErrorNotReady is
 * not an error: it does not become the last error. */
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    if (s && !g_streams.count(s))
        return fail(cudaErrorInvalidResourceHandle);
    if (g_sticky != cudaSuccess)
        return g_sticky;
    return g_stalled ? cudaErrorNotReady : cudaSuccess;
}

struct emu_event {
    double ms;
};

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if ((s && !g_streams.count(s)) || !g_events.count(e))
        return fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    emu_event *x = new emu_event{0.0};
    *e = (cudaEvent_t)(void *)x;
    g_events.insert(x);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!g_events.erase(e))
        return fail(cudaErrorInvalidResourceHandle);
    delete (emu_event *)(void *)e;
    return cudaSuccess;
}

/* Host time of the emulation: says nothing about a GPU's speed. */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!g_events.count(e) || (s && !g_streams.count(s)))
        return fail(cudaErrorInvalidResourceHandle);
    auto now = std::chrono::steady_clock::now().time_since_epoch();
    ((emu_event *)(void *)e)->ms = std::chrono::duration<double, std::milli>(now).count();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!g_events.count(e))
        return fail(cudaErrorInvalidResourceHandle);
    return check_guards("at an event synchronisation");
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!g_events.count(a) || !g_events.count(b))
        return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(((emu_event *)(void *)b)->ms - ((emu_event *)(void *)a)->ms);
    return cudaSuccess;
}

/* ---- hooks ---- */
void dllm_emu_get_stats(dllm_emu_stats *s) { *s = g_stats; }

void dllm_emu_reset_stats(void)
{
    size_t in_use = g_stats.bytes_in_use;
    memset(&g_stats, 0, sizeof g_stats);
    g_stats.bytes_in_use = g_stats.peak_bytes = in_use;
    g_max_blocks.clear();
}

unsigned long long dllm_emu_max_blocks(const char *sub)
{
    unsigned long long m = 0;
    for (auto &kv : g_max_blocks)
        if (strstr(kv.first.c_str(), sub) && kv.second > m)
            m = kv.second;
    return m;
}

const char *dllm_emu_schedule_name(void) { return dllm_emu::schedule_name(); }

} /* extern "C" */

/* ---- fp8 conversions (cuda_fp8.h semantics, host arithmetic) ---- */
__nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
                                         __nv_fp8_interpretation_t fmt)
{
    const int mbits = fmt == __NV_E4M3 ? 3 : 2, bias = fmt == __NV_E4M3 ? 7 : 15;
    const uint32_t max_code = fmt == __NV_E4M3 ? 0x7Eu : 0x7Bu;
    uint32_t u = __float_as_uint(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return (uint8_t)(sign | 0x7Fu);
    const uint32_t overflow = fmt == __NV_E4M3 ? 0x7Fu : 0x7Cu; /* NaN, or inf */
    if (a == 0x7F800000u)
        return (uint8_t)(sign | (sat == __NV_SATFINITE ? max_code : overflow));
    uint32_t code;
    const uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23;
    if (a >= min_normal) {
        int shift = 23 - mbits;
        uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
        code = (r >> shift) - ((uint32_t)(127 - bias) << mbits);
        if (code > max_code)
            code = sat == __NV_SATFINITE ? max_code : overflow;
    } else {
        uint32_t E = a >> 23;
        if (E == 0) {
            code = 0;
        } else {
            uint32_t M = (a & 0x7FFFFFu) | 0x800000u;
            int s = 23 + 1 - bias - mbits - ((int)E - 127);
            code = s >= 25 ? 0 : (M + ((1u << (s - 1)) - 1u) + ((M >> s) & 1u)) >> s;
        }
    }
    return (uint8_t)(sign | (uint8_t)code);
}

__half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t fmt)
{
    __half_raw h;
    if (fmt == __NV_E5M2) { /* E5M2 is the top byte of fp16 */
        h.x = (unsigned short)(x << 8);
        return h;
    }
    unsigned s = (x & 0x80u) << 8, e = (x >> 3) & 0xFu, m = x & 7u;
    if (e == 0xF && m == 7) {
        h.x = (unsigned short)(s | 0x7FFFu); /* NaN */
    } else if (e == 0) {
        if (m == 0) {
            h.x = (unsigned short)s;
        } else { /* subnormal m * 2^-9: normal in fp16 */
            int sh = 0;
            while (!(m & 4u)) {
                m <<= 1;
                sh++;
            }
            h.x = (unsigned short)(s | ((unsigned)(15 - 7 - sh) << 10) | ((m & 3u) << 8));
        }
    } else {
        h.x = (unsigned short)(s | ((e - 7 + 15) << 10) | (m << 7));
    }
    return h;
}
