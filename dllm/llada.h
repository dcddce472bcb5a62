/* llada.h: the LLaDA masked-diffusion transformer (docs/METHOD.md §1) -- an
 * architecture descriptor of the transformer core (dllm/transformer.h):
 *
 *   x = wte[tokens]
 *   per block: h = x + attn_out(Attn(RoPE(q_proj(n1)), RoPE(k_proj(n1)), v_proj(n1))),
 *              n1 = attn_norm(x)
 *              y = h + ff_out(silu(ff_proj(n2)) * up_proj(n2)),  n2 = ff_norm(h)
 *   logits = ff_out_head(ln_f(x))   (untied head), bidirectional attention,
 *   positions = canvas index 0..T-1, padding excluded by a key mask.
 *
 * HF names: model.transformer.wte / blocks.N.{attn_norm, q_proj, k_proj,
 * v_proj, attn_out, ff_norm, ff_proj, up_proj, ff_out} / ln_f / ff_out (the
 * head, which never carries LoRA); LoRA targets q_proj, k_proj, v_proj,
 * attn_out, ff_proj, up_proj, ff_out. The descriptor is dllm_arch_llada
 * (dllm/arch.c); config.json is read by dllm/model_config.c. The model itself
 * is the transformer core's (dllm_tf), which this header brings in. */
#ifndef DLLM_LLADA_H
#define DLLM_LLADA_H

#include "dllm/transformer.h"

#endif
