/* convert.cu: fp32 <-> bf16 on the device, the same bits as kernels/cpu/convert.c
 * (fp32 -> bf16: bf16_codec.cuh; bf16 -> fp32 is exact, a shift left by 16), and the
 * elementwise add and the bias rows of the backend table. */
#include "kernels/cuda/bf16_codec.cuh"
#include "kernels/cuda/common.cuh"

__global__ static void f32_to_bf16_kernel(uint16_t *out, const float *inp, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16_rne(inp[i]);
}

__global__ static void bf16_to_f32_kernel(float *out, const uint16_t *inp, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __uint_as_float((uint32_t)inp[i] << 16);
}

extern "C" void dllm_cuda_f32_to_bf16(uint16_t *out, const float *inp, size_t n,
                                      dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(f32_to_bf16_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, inp, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_bf16_to_f32(float *out, const uint16_t *inp, size_t n,
                                      dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(bf16_to_f32_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, inp, n);
    cudaLaunchCheck();
}

__global__ static void round_bf16_kernel(float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __uint_as_float((uint32_t)f32_to_bf16_rne(x[i]) << 16);
}

__global__ static void add_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

extern "C" void dllm_cuda_round_bf16(float *x, size_t n, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(round_bf16_kernel, grid_for(n, 256), 256, 0, as_stream(s))(x, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_add(float *y, const float *x, size_t n, dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(add_kernel, grid_for(n, 256), 256, 0, as_stream(s))(y, x, n);
    cudaLaunchCheck();
}

/* rows x cols floats from a matrix of row stride sld into one of row stride dld */
__global__ static void copy_2d_kernel(float *dst, size_t dld, const float *src, size_t sld,
                                      int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[r * dld + c] = src[r * sld + c];
    }
}

extern "C" void dllm_cuda_copy_2d(float *dst, size_t dld, const float *src, size_t sld,
                                  int rows, int cols, dllm_cuda_stream s)
{
    if (rows <= 0 || cols <= 0)
        return;
    size_t n = (size_t)rows * cols;
    DLLM_LAUNCH(copy_2d_kernel, grid_for(n, 256), 256, 0, as_stream(s))(dst, dld, src, sld, rows,
                                                                         cols);
    cudaLaunchCheck();
}

/* out (N, OC) += bias (OC) on every row: one rounding per element, as the CPU. */
__global__ static void bias_fwd_kernel(float *out, const float *bias, size_t n, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(out[i], bias[i % (size_t)OC]);
}

/* dbias (OC) += column sums of dout (N, OC): one thread per column adds the rows in
 * order into a float, then into dbias, exactly the CPU's order (bit-identical). */
__global__ static void bias_bwd_kernel(float *dbias, const float *dout, int N, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC)
        return;
    float acc = 0.0f;
    for (int n = 0; n < N; n++)
        acc = __fadd_rn(acc, dout[(size_t)n * OC + o]);
    dbias[o] = __fadd_rn(dbias[o], acc);
}

extern "C" void dllm_cuda_bias_fwd(float *out, const float *bias, int N, int OC,
                                   dllm_cuda_stream s)
{
    size_t n = (size_t)N * OC;
    if (n == 0)
        return;
    DLLM_LAUNCH(bias_fwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, bias, n, OC);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_bias_bwd(float *dbias, const float *dout, int N, int OC,
                                   dllm_cuda_stream s)
{
    if (OC <= 0)
        return;
    DLLM_LAUNCH(bias_bwd_kernel, (OC + 127) / 128, 128, 0, as_stream(s))(dbias, dout, N, OC);
    cudaLaunchCheck();
}
