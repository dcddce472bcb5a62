#!/usr/bin/env python3
"""make_qwen35_goldens.py: writes the Qwen3.5 fixtures of tests/unit/test_qwen35.c into
tests/data/qwen35/, computed by Hugging Face transformers' own Qwen3_5ForCausalLM
(transformers 5.x, its PyTorch reference kernels on the CPU: an implementation
independent of dllm/qwen35.c and kernels/cpu/gated_delta.c).

Two tiny random text models (model_type qwen3_5_text, fp32 safetensors):

    hybrid/   hidden 32, 4 layers [linear, linear, linear, full], vocab 64,
              intermediate 48; full attention 2 heads, 1 KV head, head_dim 16,
              partial_rotary_factor 0.25 (RoPE on 4 of 16 dims), output gate;
              Gated DeltaNet 2 key heads of 8, 4 value heads of 6 (each key head
              serves two value heads), conv kernel 4; untied head
    tied/     hidden 24, 3 layers [full, linear, linear], vocab 40,
              intermediate 40; 3 heads, 3 KV heads, head_dim 8, partial 0.5;
              Gated DeltaNet 3 key heads of 4, 3 value heads of 4, conv kernel 3;
              tie_word_embeddings true (no lm_head.weight)

Weights are drawn wider than the published initialisation (std 0.02 would make
every logit almost equal and the goldens weak): linears N(0, 0.25), embeddings
N(0, 0.4), the zero-centred RMSNorm weights N(0, 0.2), the gated norm's 1 + N(0, 0.2),
A_log log U(0.1, 1) (milder than the published U(0.01, 16): a chunk's cumulative
log decay stays small, so its fp32 rounding -- the same in both implementations, in
different order -- stays far below the tolerances), dt_bias N(0, 0.5), conv N(0, 0.4).

golden.safetensors, with <v> = hybrid | tied:

    <v>.ids [T] I32            a fixed id sequence (T = 70: two chunks of the
                               published chunk size 64)
    <v>.logits [T, V] F32      the logits of one forward over ids (no cache)
    <v>.gen_prompt [P] I32     a prompt; <v>.gen_ids [G] I32 greedy generate()
                               (do_sample False, max_new_tokens G, no EOS), through
                               the conv and recurrent caches; <v>.gen_margin [1] the
                               smallest top-1 minus top-2 logit along that path
    <v>.loss [1]               the mean next-token cross-entropy over ids (T - 1 targets)
    <v>.grad.<name>            its gradient w.r.t. every parameter (torch autograd; the
                               tied model's embedding gradient includes the head's)
    gdr.q, gdr.k [1, T, 2, 8], gdr.v [1, T, 4, 6], gdr.g, gdr.beta [1, T, 4],
    gdr.s0 [1, 4, 8, 6]        random inputs of the gated delta rule (T = 13)
    gdr.chunk_out [1, T, 4, 6], gdr.chunk_state [1, 4, 8, 6]
                               torch_chunk_gated_delta_rule (chunk_size 4, q/k
                               L2-normalised in the kernel, initial state s0)
    gdr.rec_out, gdr.rec_state torch_recurrent_gated_delta_rule, same inputs

Run from the repository root in a throwaway environment with torch and
transformers >= 5 (python3 tests/ref/make_qwen35_goldens.py [SITE_PACKAGES ...]:
directories put first on the import path, e.g. a venv's site-packages holding
transformers 5.x). Tests never run it; they read what it wrote.
"""
import json
import math
import os
import shutil
import sys

sys.path[:0] = [p for p in sys.argv[1:]]

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "qwen35")
T_SCORE, P_GEN, G_GEN = 70, 6, 12

MODELS = {
    "hybrid": dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                   layer_types=["linear_attention"] * 3 + ["full_attention"],
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                   linear_num_key_heads=2, linear_key_head_dim=8, linear_num_value_heads=4,
                   linear_value_head_dim=6, linear_conv_kernel_dim=4,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.25},
                   rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=256),
    "tied": dict(vocab_size=40, hidden_size=24, intermediate_size=40, num_hidden_layers=3,
                 layer_types=["full_attention", "linear_attention", "linear_attention"],
                 num_attention_heads=3, num_key_value_heads=3, head_dim=8,
                 linear_num_key_heads=3, linear_key_head_dim=4, linear_num_value_heads=3,
                 linear_value_head_dim=4, linear_conv_kernel_dim=3,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000.0,
                                  "partial_rotary_factor": 0.5},
                 rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=256),
}


def randomise(model, gen):
    """Wider-than-published random weights (see the module docstring)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.1, 1.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "conv1d" in name:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))


def greedy_margin(model, prompt, gen_ids):
    """The smallest top-1 minus top-2 logit along the greedy path (no cache)."""
    seq = torch.cat([prompt, gen_ids]).unsqueeze(0)
    with torch.no_grad():
        lg = model(seq, use_cache=False).logits[0]
    P = prompt.numel()
    top2 = lg[P - 1:P - 1 + gen_ids.numel()].topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def main():
    print("transformers", transformers.__version__, "torch", torch.__version__)
    torch.manual_seed(0)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    out = {}
    for k, (name, kw) in enumerate(MODELS.items()):
        gen = torch.Generator().manual_seed(31 + k)
        cfg = Qwen3_5TextConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)
        cfg._attn_implementation = "eager"
        model = Qwen3_5ForCausalLM(cfg).eval()
        randomise(model, gen)
        model.save_pretrained(os.path.join(OUT, name), safe_serialization=True)
        V = kw["vocab_size"]
        ids = torch.randint(0, V, (T_SCORE,), generator=gen)
        with torch.no_grad():
            logits = model(ids.unsqueeze(0), use_cache=False).logits[0]
        prompt = torch.randint(0, V, (P_GEN,), generator=gen)
        with torch.no_grad():
            seq = model.generate(prompt.unsqueeze(0), attention_mask=torch.ones(1, P_GEN,
                                 dtype=torch.long), do_sample=False, max_new_tokens=G_GEN,
                                 min_new_tokens=G_GEN, eos_token_id=None, pad_token_id=0)[0]
        gen_ids = seq[P_GEN:]
        assert gen_ids.numel() == G_GEN
        out[name + ".ids"] = ids.to(torch.int32)
        out[name + ".logits"] = logits.float().contiguous()
        out[name + ".gen_prompt"] = prompt.to(torch.int32)
        out[name + ".gen_ids"] = gen_ids.to(torch.int32).contiguous()
        out[name + ".gen_margin"] = torch.tensor([greedy_margin(model, prompt, gen_ids)])
        print(name, "margin", float(out[name + ".gen_margin"]))
        # the mean next-token cross-entropy over ids and its gradient (torch autograd
        # through the published chunked rule)
        model.zero_grad()
        lg = model(ids.unsqueeze(0), use_cache=False).logits[0]
        loss = torch.nn.functional.cross_entropy(lg[:-1], ids[1:])
        loss.backward()
        out[name + ".loss"] = loss.detach().reshape(1).float()
        for pn, p in model.named_parameters():
            if p.grad is not None:
                out[name + ".grad." + pn] = p.grad.float().contiguous()
        print(name, "loss", float(loss.detach()))

    # the gated delta rule's two published reference forms on shared inputs
    gen = torch.Generator().manual_seed(7)
    T, Hk, Dk, Hv, Dv = 13, 2, 8, 4, 6
    q = torch.randn(1, T, Hk, Dk, generator=gen)
    kk = torch.randn(1, T, Hk, Dk, generator=gen)
    v = torch.randn(1, T, Hv, Dv, generator=gen)
    g = -torch.rand(1, T, Hv, generator=gen) * 1.5
    beta = torch.rand(1, T, Hv, generator=gen)
    s0 = 0.5 * torch.randn(1, Hv, Dk, Dv, generator=gen)
    co, cs = ref.torch_chunk_gated_delta_rule(q, kk, v, g=g, beta=beta, chunk_size=4,
                                              initial_state=s0.clone(), output_final_state=True,
                                              use_qk_l2norm_in_kernel=True)
    ro, rs = ref.torch_recurrent_gated_delta_rule(q, kk, v, g=g, beta=beta,
                                                  initial_state=s0.clone(),
                                                  output_final_state=True,
                                                  use_qk_l2norm_in_kernel=True)
    for n, t in dict(q=q, k=kk, v=v, g=g, beta=beta, s0=s0, chunk_out=co, chunk_state=cs,
                     rec_out=ro, rec_state=rs).items():
        out["gdr." + n] = t.float().contiguous()
    print("gdr chunk vs recurrent", float((co - ro).abs().max()))
    save_file(out, os.path.join(OUT, "golden.safetensors"),
              metadata={"transformers": transformers.__version__})


if __name__ == "__main__":
    main()
