/* swiglu.cu: the SwiGLU gate of the MLP, elementwise.
 *   out = silu(gate) * up,  silu(x) = x * sigmoid(x) = x / (1 + exp(-x))
 * Backward (accumulated):  dup   += dout * silu(gate)
 *                          dgate += dout * up * sig * (1 + gate * (1 - sig)) */
#include "kernels/cuda/common.cuh"

__global__ static void swiglu_fwd_kernel(float *out, const float *gate, const float *up, size_t n)
{
    // out, gate, up (n)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ static void swiglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                         const float *gate, const float *up, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        if (dup)
            dup[i] += dout[i] * g * sig;
        if (dgate)
            dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    }
}

extern "C" void dllm_cuda_swiglu_fwd(float *out, const float *gate, const float *up, size_t n,
                                     dllm_cuda_stream s)
{
    if (n == 0)
        return;
    DLLM_LAUNCH(swiglu_fwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(out, gate, up, n);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout,
                                     const float *gate, const float *up, size_t n,
                                     dllm_cuda_stream s)
{
    if (n == 0 || (!dgate && !dup))
        return;
    DLLM_LAUNCH(swiglu_bwd_kernel, grid_for(n, 256), 256, 0, as_stream(s))(dgate, dup, dout, gate,
        up, n);
    cudaLaunchCheck();
}
