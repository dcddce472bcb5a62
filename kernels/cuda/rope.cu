/* rope.cu: rotary position embedding, rotate-half form over the whole head.
 * x [N, NH, HD], row n at position pos[n]; table cos, sin [max_pos, HD/2] (the CPU
 * op_rope_table uploaded, so the angles are the same bits). For i < HD/2:
 *   out[i]      = x[i] * cos - x[i+HD/2] * sin
 *   out[i+HD/2] = x[i+HD/2] * cos + x[i] * sin
 * Backward: the rotation by -angle (sin -> -sin), accumulated into dinp, except in
 * place (dinp == dout) where it replaces. One thread per (n, h, i): it reads both
 * halves before writing, so in place is safe. A position outside the table gives NaN.
 * The rotation is rope.cuh's, which the attention kernels apply to the tiles they load
 * (dllm_cuda_rope_attention_fwd): the same bits either way. */
#include "kernels/cuda/rope.cuh"

__global__ static void rope_kernel(float *out, const float *inp, const int32_t *pos,
                                   const float *cos_t, const float *sin_t, int max_pos,
                                   int N, int NH, int HD, float dir, bool accumulate)
{
    // out, inp (N, NH, HD); pos (N); cos_t, sin_t (max_pos, HD/2)
    int half = HD / 2;
    size_t total = (size_t)N * NH * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t nh = idx / half; /* n * NH + h */
        int n = (int)(nh / NH);
        int p = pos[n];
        const float *x = inp + nh * HD;
        float *o = out + nh * HD;
        float o1, o2;
        if (p < 0 || p >= max_pos) {
            o1 = o2 = NAN;
        } else {
            float c = cos_t[(size_t)p * half + i], sn = dir * sin_t[(size_t)p * half + i];
            float x1 = x[i], x2 = x[i + half];
            o1 = rope_first(x1, x2, c, sn);
            o2 = rope_second(x1, x2, c, sn);
        }
        if (accumulate) {
            o[i] += o1;
            o[i + half] += o2;
        } else {
            o[i] = o1;
            o[i + half] = o2;
        }
    }
}

static void rope_launch(float *out, const float *inp, const int32_t *pos, const float *cos_t,
                        const float *sin_t, int max_pos, int N, int NH, int HD, float dir,
                        bool accumulate, cudaStream_t st)
{
    DLLM_CUDA_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && max_pos > 0,
                      "bad shape N=%d NH=%d HD=%d max_pos=%d (HD must be even)", N, NH, HD,
                      max_pos);
    size_t total = (size_t)N * NH * (HD / 2);
    if (total == 0)
        return;
    DLLM_LAUNCH(rope_kernel, grid_for(total, 256), 256, 0, st)(out, inp, pos, cos_t, sin_t, max_pos,
        N, NH, HD, dir, accumulate);
    cudaLaunchCheck();
}

extern "C" void dllm_cuda_rope_fwd(float *out, const float *inp, const int32_t *pos,
                                   const float *cos, const float *sin, int max_pos, int N,
                                   int NH, int HD, dllm_cuda_stream s)
{
    rope_launch(out, inp, pos, cos, sin, max_pos, N, NH, HD, 1.0f, false, as_stream(s));
}

extern "C" void dllm_cuda_rope_bwd(float *dinp, const float *dout, const int32_t *pos,
                                   const float *cos, const float *sin, int max_pos, int N,
                                   int NH, int HD, dllm_cuda_stream s)
{
    if (!dinp)
        return;
    rope_launch(dinp, dout, pos, cos, sin, max_pos, N, NH, HD, -1.0f, dinp != dout,
                as_stream(s));
}
