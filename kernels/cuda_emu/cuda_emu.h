/* cuda_emu.h: the part of the CUDA runtime and device language that the .cu files of
 * kernels/cuda use, for compiling those sources with a host C++ compiler (configure
 * --enable-cuda-emulation). Selected by the kernels' headers when __CUDACC__ is not
 * defined; it never includes a CUDA header, so the emulation builds where CUDA is not
 * installed.
 *
 * Model (kernels/cuda_emu/README.md): a launch runs at once, block after block; each
 * thread of a block is a fiber (kernels/cuda_emu/fiber.cc) that runs until it reaches a
 * barrier, a warp collective or its end. __syncthreads releases when every thread of the
 * block waits at the same barrier; warp shuffles and votes complete when every lane of
 * their mask has arrived with the same mask. Anything else (a barrier skipped by some
 * threads, a lane of the mask that exited) is reported with the kernel's name and makes
 * the launch fail. __shared__ variables are static storage reused by each block in turn
 * (blocks never run at the same time). Device memory is host memory with guard zones.
 * This verifies logic and memory discipline, never speed or a real GPU's behaviour. */
#ifndef DLLM_CUDA_EMU_H
#define DLLM_CUDA_EMU_H

#ifdef __CUDACC__
#error "cuda_emu.h is for the host-compiler emulation build; nvcc uses the CUDA headers"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- the device language as plain C++ ---------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace dllm_emu {
extern uint3 g_thread_idx, g_block_idx;
extern dim3 g_block_dim, g_grid_dim;
void syncthreads(const char *file, int line);
/* Warp collective: deposits size bytes (at most WARP_SLOT_BYTES) of *val for this lane,
 * waits until every lane of mask has arrived, then copies lane src's value (size bytes)
 * into out, or with src -1 the 32 lanes' values (32 * size bytes). */
enum { WARP_SLOT_BYTES = 32 };
void warp_exchange(unsigned mask, const void *val, size_t size, void *out, int src,
                   const char *what);
unsigned lane_id(void);
void *dynamic_smem(void);
void device_trap(const char *file, int line);
/* A warp matrix operation used against its documented rules: fails the launch. */
void warp_matrix_fail(const char *what, const char *why);
} // namespace dllm_emu

#define threadIdx (::dllm_emu::g_thread_idx)
#define blockIdx (::dllm_emu::g_block_idx)
#define blockDim (::dllm_emu::g_block_dim)
#define gridDim (::dllm_emu::g_grid_dim)
static constexpr int warpSize = 32;
#define __syncthreads() ::dllm_emu::syncthreads(__FILE__, __LINE__)
/* Dynamic shared memory: `extern __shared__ T name[]` under nvcc. */
#define DLLM_DYNAMIC_SHARED(T, name) T *name = (T *)::dllm_emu::dynamic_smem()
#define __trap() ::dllm_emu::device_trap(__FILE__, __LINE__)

using std::isinf;
using std::isnan;

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }

/* ---- bit casts and correctly rounded arithmetic (IEEE on the host, no contraction:
 * the emulation build compiles with -ffp-contract=off) ------------------------------- */
static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
static inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }

/* ---- bf16 and fp8 conversions, bit-exact host versions of cuda_bf16.h / cuda_fp8.h -- */
struct __nv_bfloat16 {
    uint16_t x;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u = __float_as_uint(f);
    __nv_bfloat16 r;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        r.x = (uint16_t)((u >> 16) | 0x0040u); /* NaN stays a quiet NaN */
    else
        r.x = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }

typedef unsigned char __nv_fp8_storage_t;
typedef enum { __NV_NOSAT = 0, __NV_SATFINITE = 1 } __nv_saturation_t;
typedef enum { __NV_E4M3 = 0, __NV_E5M2 = 1 } __nv_fp8_interpretation_t;
typedef struct {
    unsigned short x; /* fp16 bits */
} __half_raw;
/* fp32 -> fp8 with round to nearest even; SATFINITE clamps finite overflow and inf to the
 * largest finite value, NOSAT gives inf (E5M2) or NaN (E4M3); NaN -> NaN. */
__nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
                                         __nv_fp8_interpretation_t fmt);
/* fp8 -> fp16 bits (exact: every fp8 value is an fp16 value). */
__half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t fmt);

/* ---- warp collectives with CUDA's mask rules ----------------------------------------- */
template <typename T> static inline T dllm_emu_shfl(unsigned mask, T v, int src, int width,
                                                   const char *what)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of T");
    unsigned lane = ::dllm_emu::lane_id();
    unsigned base = lane & ~(unsigned)(width - 1);
    /* outside the segment: the caller's own value (it still takes part) */
    int from = src < 0 || src >= width ? (int)lane : (int)(base + (unsigned)src);
    T r;
    ::dllm_emu::warp_exchange(mask, &v, sizeof v, &r, from, what);
    return src < 0 || src >= width ? v : r;
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32)
{
    unsigned lane = ::dllm_emu::lane_id();
    int src = (int)((lane ^ (unsigned)lm) & (unsigned)(width - 1));
    if (((lane ^ (unsigned)lm) & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1)))
        src = (int)(lane & (unsigned)(width - 1));
    return dllm_emu_shfl(mask, v, src, width, "__shfl_xor_sync");
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return dllm_emu_shfl(mask, v, src & (width - 1), width, "__shfl_sync");
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    int l = (int)(::dllm_emu::lane_id() & (unsigned)(width - 1));
    return dllm_emu_shfl(mask, v, l + (int)d < width ? l + (int)d : l, width, "__shfl_down_sync");
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    int l = (int)(::dllm_emu::lane_id() & (unsigned)(width - 1));
    return dllm_emu_shfl(mask, v, l - (int)d >= 0 ? l - (int)d : l, width, "__shfl_up_sync");
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    int all[32];
    int p = pred != 0;
    ::dllm_emu::warp_exchange(mask, &p, sizeof p, all, -1, "__ballot_sync");
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (((mask >> l) & 1u) && all[l])
            r |= 1u << l;
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    int z = 0, r;
    ::dllm_emu::warp_exchange(mask, &z, sizeof z, &r, (int)::dllm_emu::lane_id(), "__syncwarp");
}

/* ---- atomics: fibers never interleave inside one, so plain read-modify-write ------ */
#define DLLM_EMU_ATOMIC2(name, T, expr)                                                     \
    static inline T name(T *p, T v)                                                         \
    {                                                                                       \
        T old = *p;                                                                         \
        *p = (expr);                                                                        \
        return old;                                                                         \
    }
DLLM_EMU_ATOMIC2(atomicAdd, float, old + v)
DLLM_EMU_ATOMIC2(atomicAdd, double, old + v)
DLLM_EMU_ATOMIC2(atomicAdd, int, old + v)
DLLM_EMU_ATOMIC2(atomicAdd, unsigned, old + v)
DLLM_EMU_ATOMIC2(atomicAdd, unsigned long long, old + v)
DLLM_EMU_ATOMIC2(atomicMax, int, old > v ? old : v)
DLLM_EMU_ATOMIC2(atomicMax, unsigned, old > v ? old : v)
DLLM_EMU_ATOMIC2(atomicMin, int, old < v ? old : v)
DLLM_EMU_ATOMIC2(atomicMin, unsigned, old < v ? old : v)
DLLM_EMU_ATOMIC2(atomicExch, int, v)
DLLM_EMU_ATOMIC2(atomicExch, unsigned, v)
DLLM_EMU_ATOMIC2(atomicExch, float, v)
#undef DLLM_EMU_ATOMIC2
static inline int atomicCAS(int *p, int cmp, int v) { int o = *p; if (o == cmp) *p = v; return o; }
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v)
{
    unsigned o = *p;
    if (o == cmp)
        *p = v;
    return o;
}
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp,
                                           unsigned long long v)
{
    unsigned long long o = *p;
    if (o == cmp)
        *p = v;
    return o;
}

/* ---- runtime API: types and error codes (the values of CUDA 12/13) -------------------- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
} cudaDeviceAttr;

struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st *cudaEvent_t;

/* CUDA's 16-byte device UUID */
typedef struct CUuuid_st {
    char bytes[16];
} cudaUUID_t;

struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    int pciBusID, pciDeviceID, pciDomainID;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int major, minor;
    int multiProcessorCount;
    int warpSize;
};

extern "C" {
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemset(void *p, int byte, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
}

template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}

/* ---- kernel launches ---------------------------------------------------------------------
 * DLLM_LAUNCH(kernel, grid, block, smem, stream)(args...) is kernel<<<grid, block, smem,
 * stream>>>(args...) under nvcc (kernels/cuda/common.cuh). Here the arguments are
 * converted to the kernel's parameter types once, as a real launch copies them, and
 * every thread of the grid calls the kernel with that copy. */
namespace dllm_emu {
typedef void (*thread_body)(void *ctx);
/* Runs the grid; errors become the sticky/launch error returned by cudaGetLastError. */
void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
              thread_body body, void *ctx);

template <typename... P> struct launcher {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <typename... A> void operator()(A &&...a) const
    {
        struct ctx_t {
            void (*k)(P...);
            std::tuple<typename std::decay<P>::type...> args;
        } ctx{kernel, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
        run_grid(name, grid, block, smem, stream,
                 [](void *c) {
                     ctx_t *x = (ctx_t *)c;
                     std::apply(x->k, x->args);
                 },
                 &ctx);
    }
};
template <typename... P>
static inline launcher<P...> make_launcher(void (*k)(P...), const char *name, dim3 g, dim3 b,
                                           size_t smem, cudaStream_t s)
{
    return launcher<P...>{k, name, g, b, smem, s};
}
} // namespace dllm_emu

#define DLLM_EMU_LAUNCH(kernel, grid, block, smem, stream)                                  \
    ::dllm_emu::make_launcher(kernel, #kernel, dim3(grid), dim3(block), (size_t)(smem), stream)

/* ---- hooks for tests (not part of CUDA) ---------------------------------------------- */
#include "kernels/cuda_emu/emu_hooks.h"

#endif
