/* attention_tc.cuh: the tensor-core attention kernels (attention_tc.cu), launched by the
 * entries of attention.cu when dllm_cuda_attention_tc(HD) says so (HD <= 128). Same
 * arguments and launches as the fp32 kernels there: the forward is one kernel; the
 * backward's dq and dk/dv kernels take the row dots D [B,NH,T] already computed. */
#ifndef DLLM_CUDA_ATTENTION_TC_CUH
#define DLLM_CUDA_ATTENTION_TC_CUH

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

void attention_tc_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal,
                      cudaStream_t st);
/* attention_tc_fwd over q and k rotated by rp as the query and key tiles are loaded (rp.pos
 * NULL: as given) */
void attention_tc_rope_fwd(float *out, float *lse, const float *q, const float *k,
                           const float *v, const uint8_t *keymask, int B, int T, int NH, int NKV,
                           int HD, bool causal, rope_in rp, cudaStream_t st);
/* Attention of T new queries over a key/value cache kc, vc [B,max_len,NKV,HD] with key
 * mask cmask [B,max_len] (NULL: all), the queries at slots len .. len+T-1: causal, query t
 * sees slots s <= len + t; else every slot (the table's attention_cached). lse [B,NH,T]
 * or NULL. attention_tc_fwd is the case max_len = T, len = 0. */
void attention_tc_cached(float *out, float *lse, const float *q, const float *kc, const float *vc,
                         const uint8_t *cmask, int B, int T, int max_len, int len, int NH,
                         int NKV, int HD, bool causal, cudaStream_t st);
void attention_tc_bwd(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                      const float *Dd, const float *q, const float *k, const float *v,
                      const uint8_t *keymask, int B, int T, int NH, int NKV, int HD, bool causal,
                      cudaStream_t st);
/* attention_tc_bwd over q and k rotated by rp as their tiles are loaded, dq and dk rotated
 * back as they are stored (the gradients of the unrotated q and k: the RoPE kernel's
 * backward of attention_tc_bwd's); write: dq, dk, dv written, not added to */
void attention_tc_rope_bwd(float *dq, float *dk, float *dv, const float *dout, const float *lse,
                           const float *Dd, const float *q, const float *k, const float *v,
                           const uint8_t *keymask, int B, int T, int NH, int NKV, int HD,
                           bool causal, rope_in rp, bool write, cudaStream_t st);

#endif
