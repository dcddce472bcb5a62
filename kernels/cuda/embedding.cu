/* embedding.cu: token embedding lookup.
 *   Forward:  out[n, :] = wte[ids[n], :]        (id outside [0, V): NaN row, loud)
 *   Backward: dwte[ids[n], :] += dout[n, :]     (atomicAdd: rows may share an id, so the
 *             order of the additions, and the last bits of dwte, may vary run to run)
 * One block per row n, threads over channels. */
#include "kernels/cuda/common.cuh"

__global__ static void embedding_fwd_kernel(float *out, const int32_t *ids, const float *wte,
                                            int C, int V)
{
    // out (N, C), ids (N), wte (V, C); grid.x = N
    int n = blockIdx.x;
    int id = ids[n];
    float *o = out + (size_t)n * C;
    if (id < 0 || id >= V) {
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            o[c] = NAN;
        return;
    }
    const float *w = wte + (size_t)id * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = w[c];
}

__global__ static void embedding_bwd_kernel(float *dwte, const float *dout, const int32_t *ids,
                                            int C, int V)
{
    int n = blockIdx.x;
    int id = ids[n];
    if (id < 0 || id >= V)
        return;
    float *d = dwte + (size_t)id * C;
    const float *g = dout + (size_t)n * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        atomicAdd(&d[c], g[c]);
}

extern "C" void dllm_cuda_embedding_fwd(float *out, const int32_t *ids, const float *wte, int N,
                                        int C, int V, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0 && V > 0, "bad shape N=%d C=%d V=%d", N, C, V);
    if (N == 0)
        return;
    DLLM_LAUNCH(embedding_fwd_kernel, N, 256, 0, as_stream(s))(out, ids, wte, C, V);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_embedding_bwd(float *dwte, const float *dout, const int32_t *ids,
                                        int N, int C, int V, dllm_cuda_stream s)
{
    DLLM_CUDA_REQUIRE(N >= 0 && C > 0 && V > 0, "bad shape N=%d C=%d V=%d", N, C, V);
    if (N == 0 || !dwte)
        return;
    DLLM_LAUNCH(embedding_bwd_kernel, N, 256, 0, as_stream(s))(dwte, dout, ids, C, V);
    cudaLaunchCheck();
}
