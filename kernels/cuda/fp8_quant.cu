/* fp8_quant.cu: block-scaled FP8 quantisation on the device, bit-identical to
 * fp8_quantise in kernels/cpu/fp8.c (contract in kernels/fp8.h).
 * x [R, C] is cut into br x bc blocks (edge blocks cover the remainder). Per block:
 *   amax  = max |x| over finite values;  scale = amax / max (fp32; 1 if amax == 0;
 *           pow2: rounded up to a power of two);  q = encode(x / scale) (fp32 division,
 *           RNE, saturating). Max is order-independent, so any reduction tree gives the
 *           CPU's scale exactly.
 * Scale (i, j) goes to scale[i*srs + j*scs]: the CPU layout or cuBLASLt's (cuda_ops.h).
 * Kernels: br == 1 (activation groups 1 x 128, channels 1 x C): one warp per block row
 * segment; br > 1 (weights 128 x 128, tensor-wide): a multi-block amax pass, then the
 * scales, then a grid-stride encode (below). */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codec.cuh"

__device__ __forceinline__ float load_f32(const float *x, size_t i) { return x[i]; }
__device__ __forceinline__ float load_f32(const uint16_t *x, size_t i)
{
    return __uint_as_float((uint32_t)x[i] << 16);
}

/* One warp per (row r, column block j); blockDim.x = 256 (8 warps). */
template <typename T>
__global__ static void fp8_quant_rows_kernel(uint8_t *q, float *scale, long srs, long scs,
                                             const T *x, int R, int C, int bc, int SC, int f,
                                             bool pow2)
{
    // q (R, C), x (R, C)
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= (size_t)R * SC)
        return; /* whole warp leaves together: no shuffle is left half-populated */
    int r = (int)(warp / SC), j = (int)(warp % SC);
    int c0 = j * bc, c1 = min(c0 + bc, C);
    size_t row = (size_t)r * C;
    float amax = 0.0f;
    for (int c = c0 + lane; c < c1; c += 32)
        amax = fmaxf(amax, fp8c_finite_abs(load_f32(x, row + c)));
    amax = warp_max(amax);
    float sc = fp8c_scale_from_amax(amax, f, pow2);
    if (lane == 0)
        scale[(long)r * srs + (long)j * scs] = sc;
    for (int c = c0 + lane; c < c1; c += 32)
        q[row + c] = fp8c_encode(fp8c_div(load_f32(x, row + c), sc), f);
}

/* Scale blocks of several rows (weights 128 x 128, a tensor-wide scale) in three passes,
 * so that one scale over a whole activation is computed by many thread blocks:
 *  1. amax: grid (SC, SR, splits); block (j, i, z) folds rows z, z + splits, ... of scale
 *     block (i, j) into one block maximum and merges it into the scale slot with
 *     atomicMax on the bits (non-negative floats order as their bit patterns; the slots
 *     start at +0);
 *  2. the slots become scales (scale_from_amax);
 *  3. every element is encoded with its block's scale (grid-stride).
 * Max is order-independent, so the scales are the CPU's bit for bit. */
__global__ static void fp8_zero_slots_kernel(float *scale, long srs, long scs, int SR, int SC)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < SR * SC; e += gridDim.x * blockDim.x)
        scale[(long)(e / SC) * srs + (long)(e % SC) * scs] = 0.0f;
}

template <typename T>
__global__ static void fp8_amax_kernel(float *scale, long srs, long scs, const T *x, int R,
                                       int C, int br, int bc)
{
    // x (R, C); grid (SC, SR, splits)
    int i = blockIdx.y, j = blockIdx.x;
    int r0 = i * br, r1 = min(r0 + br, R), c0 = j * bc, c1 = min(c0 + bc, C);
    int w = c1 - c0;
    float amax = 0.0f;
    for (int r = r0 + (int)blockIdx.z; r < r1; r += (int)gridDim.z)
        for (int c = threadIdx.x; c < w; c += blockDim.x)
            amax = fmaxf(amax, fp8c_finite_abs(load_f32(x, (size_t)r * C + c0 + c)));
    amax = block_max(amax);
    if (threadIdx.x == 0)
        atomicMax((unsigned *)&scale[(long)i * srs + (long)j * scs], __float_as_uint(amax));
}

__global__ static void fp8_scale_from_amax_kernel(float *scale, long srs, long scs, int SR,
                                                  int SC, int f, bool pow2)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < SR * SC; e += gridDim.x * blockDim.x) {
        float *sl = &scale[(long)(e / SC) * srs + (long)(e % SC) * scs];
        *sl = fp8c_scale_from_amax(*sl, f, pow2);
    }
}

template <typename T>
__global__ static void fp8_encode_kernel(uint8_t *q, const float *scale, long srs, long scs,
                                         const T *x, int R, int C, int br, int bc, int f)
{
    size_t n = (size_t)R * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(idx / C), c = (int)(idx % C);
        float sc = scale[(long)(r / br) * srs + (long)(c / bc) * scs];
        q[idx] = fp8c_encode(fp8c_div(load_f32(x, idx), sc), f);
    }
}

template <typename T>
static void fp8_quant_launch(uint8_t *q, float *scale, long srs, long scs, const T *x, int R,
                             int C, int br, int bc, fp8_format f, bool pow2, cudaStream_t st)
{
    DLLM_CUDA_REQUIRE(R > 0 && C > 0 && br > 0 && bc > 0, "bad shape [%d, %d] blocks %d x %d",
                      R, C, br, bc);
    DLLM_CUDA_REQUIRE(f == FP8_E4M3 || f == FP8_E5M2, "unknown fp8 format %d", (int)f);
    if (br > R)
        br = R;
    if (bc > C)
        bc = C;
    int SR = (R + br - 1) / br, SC = (C + bc - 1) / bc;
    if (br == 1) {
        size_t warps = (size_t)R * SC;
        size_t blocks = (warps + 7) / 8;
        DLLM_CUDA_REQUIRE(blocks <= 0x7FFFFFFFu, "too many groups (%zu)", warps);
        DLLM_LAUNCH(fp8_quant_rows_kernel<T>, (unsigned)blocks, 256, 0, st)(q, scale, srs, scs, x,
            R, C, bc, SC, (int)f, pow2);
    } else {
        DLLM_CUDA_REQUIRE(SR <= 65535, "%d block rows: at most 65535", SR);
        const int nsc = SR * SC;
        /* enough thread blocks to fill a GPU (~1024) however few the scale blocks */
        int splits = (1024 + nsc - 1) / nsc;
        if (splits > br)
            splits = br;
        if (splits > 65535)
            splits = 65535;
        DLLM_LAUNCH(fp8_zero_slots_kernel, grid_for((size_t)nsc, 256), 256, 0, st)(scale, srs, scs,
            SR, SC);
        cudaLaunchCheck();
        DLLM_LAUNCH(fp8_amax_kernel<T>, dim3(SC, SR, splits), 256, 0, st)(scale, srs, scs, x, R, C,
            br, bc);
        cudaLaunchCheck();
        DLLM_LAUNCH(fp8_scale_from_amax_kernel, grid_for((size_t)nsc, 256), 256, 0, st)(scale, srs,
            scs, SR, SC, (int)f, pow2);
        cudaLaunchCheck();
        DLLM_LAUNCH(fp8_encode_kernel<T>, grid_for((size_t)R * C, 256), 256, 0, st)(q, scale, srs,
            scs, x, R, C, br, bc, (int)f);
    }
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_fp8_quantise(uint8_t *q, float *scale, long srs, long scs,
                                       const float *x, int R, int C, int br, int bc,
                                       fp8_format f, bool pow2, dllm_cuda_stream s)
{
    fp8_quant_launch<float>(q, scale, srs, scs, x, R, C, br, bc, f, pow2, as_stream(s));
}

extern "C" void dllm_cuda_fp8_quantise_bf16(uint8_t *q, float *scale, long srs, long scs,
                                            const uint16_t *x, int R, int C, int br, int bc,
                                            fp8_format f, bool pow2, dllm_cuda_stream s)
{
    fp8_quant_launch<uint16_t>(q, scale, srs, scs, x, R, C, br, bc, f, pow2, as_stream(s));
}

__global__ static void fp8_dequant_kernel(float *out, const uint8_t *q, const float *scale,
                                          long srs, long scs, int R, int C, int br, int bc,
                                          int f)
{
    size_t n = (size_t)R * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(idx / C), c = (int)(idx % C);
        float sc = scale[(long)(r / br) * srs + (long)(c / bc) * scs];
        out[idx] = fp8c_mul(fp8c_decode(q[idx], f), sc);
    }
}

extern "C" void dllm_cuda_fp8_dequantise(float *out, const uint8_t *q, const float *scale,
                                         long srs, long scs, int R, int C, int br, int bc,
                                         fp8_format f, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(R > 0 && C > 0 && br > 0 && bc > 0, "bad shape [%d, %d] blocks %d x %d",
                      R, C, br, bc);
    if (br > R)
        br = R;
    if (bc > C)
        bc = C;
    size_t n = (size_t)R * C;
    DLLM_LAUNCH(fp8_dequant_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, q, scale, srs, scs,
        R, C, br, bc, (int)f);
    cudaLaunchCheck();
}
