#!/usr/bin/env python3
"""llada_ref.py: an independent fp32 PyTorch reference of the LLaDA
masked-diffusion transformer (docs/METHOD.md section 1), written from the method
description only (it shares no code with the C model).

    x = wte[tokens]
    per block: h = x + attn_out(Attn(RoPE(q_proj(n1)), RoPE(k_proj(n1)), v_proj(n1))),
               n1 = attn_norm(x)
               y = h + ff_out(silu(ff_proj(n2)) * up_proj(n2)),  n2 = ff_norm(h)
    logits = head(ln_f(x)), head = model.transformer.ff_out (untied)

RMSNorm in fp32: w * (x * rsqrt(mean(x^2) + eps)). RoPE rotate-half over the
whole head, inv_freq[i] = theta^(-2i/HD), positions = canvas index. Attention
is bidirectional, scaled by 1/sqrt(HD), padding keys masked out.

Masked-diffusion SFT loss: per sequence, the sum over masked answer tokens of
cross-entropy / p, divided by that sequence's answer length; mean over the
batch. LoRA: W' = W + (alpha/r) B A on the chosen block linears.

Usage as a library (make_llada_goldens.py), or
    python3 tests/ref/llada_ref.py --bench     # SFT fwd+bwd tokens/s on the CPU
    python3 tests/ref/llada_ref.py --selftest  # the pieces against other formulations
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

BLOCK_LINEARS = ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")


# ---- config and parameter names -------------------------------------------------------------

def tiny_config():
    return dict(d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, mlp_hidden_size=48,
                vocab_size=40, embedding_size=40, max_sequence_length=64, rope_theta=10000.0,
                rms_norm_eps=1e-5, mask_token_id=2, eos_token_id=0, pad_token_id=0)


def small_config():
    return dict(d_model=512, n_layers=6, n_heads=8, n_kv_heads=8, mlp_hidden_size=1536,
                vocab_size=8192, embedding_size=8192, max_sequence_length=1024,
                rope_theta=10000.0, rms_norm_eps=1e-5, mask_token_id=2, eos_token_id=0,
                pad_token_id=0)


def full_config_json(cfg, dtype):
    """The HF config.json of a LLaDA model with these sizes."""
    out = dict(cfg)
    out.update(model_type="llada", architectures=["LLaDAModelLM"], include_bias=False,
               weight_tying=False, layer_norm_type="rms", block_type="llama",
               activation_type="silu", rope=True, alibi=False, torch_dtype=dtype)
    return out


def param_shapes(cfg):
    """[(HF name, shape)] in a fixed order."""
    C, L = cfg["d_model"], cfg["n_layers"]
    NH, NKV = cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    H, V = cfg["mlp_hidden_size"], cfg["embedding_size"]
    out = [("model.transformer.wte.weight", (V, C))]
    for i in range(L):
        p = f"model.transformer.blocks.{i}."
        out += [(p + "attn_norm.weight", (C,)),
                (p + "q_proj.weight", (NH * HD, C)),
                (p + "k_proj.weight", (NKV * HD, C)),
                (p + "v_proj.weight", (NKV * HD, C)),
                (p + "attn_out.weight", (C, NH * HD)),
                (p + "ff_norm.weight", (C,)),
                (p + "ff_proj.weight", (H, C)),
                (p + "up_proj.weight", (H, C)),
                (p + "ff_out.weight", (C, H))]
    out += [("model.transformer.ln_f.weight", (C,)),
            ("model.transformer.ff_out.weight", (V, C))]
    return out


def init_params(cfg, gen, std):
    """Random weights: linears/embeddings N(0, std), norm weights 1 + N(0, 0.1)."""
    params = {}
    for name, shape in param_shapes(cfg):
        if len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            t = std * torch.randn(shape, generator=gen)
        params[name] = t.float()
    return params


def lora_shapes(cfg, targets, rank):
    """[(PEFT name, shape)]: A [r, in], B [out, r] per targeted block linear."""
    shapes = dict(param_shapes(cfg))
    out = []
    for i in range(cfg["n_layers"]):
        for mod in BLOCK_LINEARS:
            if mod not in targets:
                continue
            full = f"model.transformer.blocks.{i}.{mod}"
            o, n = shapes[full + ".weight"]
            out.append((f"base_model.model.{full}.lora_A.weight", (rank, n)))
            out.append((f"base_model.model.{full}.lora_B.weight", (o, rank)))
    return out


# ---- checkpoint I/O -------------------------------------------------------------------------------

def load_config(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def load_params(d):
    """All tensors of DIR (single file or sharded with index), as fp32."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        for k, v in load_file(os.path.join(d, fn)).items():
            out[k] = v.float()
    return out


def save_model(d, cfg, params, dtype=torch.float32, n_shards=1):
    os.makedirs(d, exist_ok=True)
    dname = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(full_config_json(cfg, dname), f, indent=2, sort_keys=True)
        f.write("\n")
    names = [n for n, _ in param_shapes(cfg)]
    tensors = {n: params[n].detach().to(dtype).contiguous() for n in names}
    if n_shards == 1:
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return
    per = math.ceil(len(names) / n_shards)
    weight_map, total = {}, 0
    for s in range(n_shards):
        fn = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        save_file(part, os.path.join(d, fn), metadata={"format": "pt"})
        for n, t in part.items():
            weight_map[n] = fn
            total += t.numel() * t.element_size()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


# ---- the model ------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    xf = x.float() if x.element_size() < 4 else x  # at least fp32 (float64 in the selftest)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope(x, theta):
    """x [B, NH, T, HD]; rotate-half with positions 0..T-1."""
    T, HD = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    pos = torch.arange(T, dtype=torch.float32)
    ang = torch.outer(pos, inv_freq)
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


def linear(x, params, name, lora, scale):
    """x W^T, plus (alpha/r) (x A^T) B^T when `name` carries an adapter."""
    y = x @ params[name + ".weight"].t()
    if lora is not None:
        a = lora.get("base_model.model." + name + ".lora_A.weight")
        if a is not None:
            b = lora["base_model.model." + name + ".lora_B.weight"]
            y = y + scale * ((x @ a.t()) @ b.t())
    return y


def forward(params, cfg, tokens, keymask=None, lora=None, lora_scale=0.0):
    """tokens [B, T] int64, keymask [B, T] (1 = real token) -> logits [B, T, V] fp32."""
    B, T = tokens.shape
    C, NH, NKV = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = params["model.transformer.wte.weight"][tokens]
    if keymask is None:
        keymask = torch.ones(B, T, dtype=torch.bool)
    bias = torch.zeros(B, 1, 1, T)
    bias = bias.masked_fill(~keymask.bool()[:, None, None, :], float("-inf"))
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        n1 = rms_norm(x, params[p + "attn_norm.weight"], eps)
        q = linear(n1, params, p + "q_proj", lora, lora_scale).view(B, T, NH, HD).transpose(1, 2)
        k = linear(n1, params, p + "k_proj", lora, lora_scale).view(B, T, NKV, HD).transpose(1, 2)
        v = linear(n1, params, p + "v_proj", lora, lora_scale).view(B, T, NKV, HD).transpose(1, 2)
        q, k = rope(q, theta), rope(k, theta)
        if NKV != NH:
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HD) + bias
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HD)
        h = x + linear(y, params, p + "attn_out", lora, lora_scale)
        n2 = rms_norm(h, params[p + "ff_norm.weight"], eps)
        g = linear(n2, params, p + "ff_proj", lora, lora_scale)
        u = linear(n2, params, p + "up_proj", lora, lora_scale)
        x = h + linear(F.silu(g) * u, params, p + "ff_out", lora, lora_scale)
    x = rms_norm(x, params["model.transformer.ln_f.weight"], eps)
    return x @ params["model.transformer.ff_out.weight"].t()


def noisy_input(cfg, clean, masked):
    """The masked canvas: mask token where masked, the clean token elsewhere."""
    return torch.where(masked.bool(), torch.full_like(clean, cfg["mask_token_id"]), clean)


def sft_loss(params, cfg, clean, keymask, masked, p, ans_len, lora=None, lora_scale=0.0):
    """mean_b [ sum_{t masked} CE(logits[b,t], clean[b,t]) / p[b] / ans_len[b] ]."""
    logits = forward(params, cfg, noisy_input(cfg, clean, masked), keymask, lora, lora_scale)
    B, T, V = logits.shape
    ce = F.cross_entropy(logits.reshape(B * T, V), clean.reshape(B * T),
                         reduction="none").view(B, T)
    per_seq = (ce * masked.float()).sum(1) / p / ans_len.float()
    return per_seq.mean()


# ---- bench ------------------------------------------------------------------------------------------

def bench(threads, batch, seq, iters):
    torch.set_num_threads(threads)
    cfg = small_config()
    gen = torch.Generator().manual_seed(0)
    params = {k: v.requires_grad_() for k, v in init_params(cfg, gen, 0.02).items()}
    V = cfg["vocab_size"]
    clean = torch.randint(3, V, (batch, seq), generator=gen)
    keymask = torch.ones(batch, seq, dtype=torch.bool)
    prompt = seq // 4
    t = torch.rand(batch, generator=gen)
    p = (1 - 1e-3) * t + 1e-3
    masked = torch.rand(batch, seq, generator=gen) < p[:, None]
    masked[:, :prompt] = False
    ans_len = torch.full((batch,), seq - prompt)

    def step():
        for v in params.values():
            v.grad = None
        loss = sft_loss(params, cfg, clean, keymask, masked, p, ans_len)
        loss.backward()
        return loss.item()

    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    dt = time.perf_counter() - t0
    tok = batch * seq * iters
    print(f"torch {torch.__version__} threads={threads} preset=small B={batch} T={seq} "
          f"iters={iters}: {dt / iters * 1e3:.1f} ms/step, {tok / dt:.0f} tokens/s")


def selftest():
    """Checks the reference's pieces against independent formulations: RoPE as
    complex rotation of the pairs (i, i + HD/2), attention through torch's
    scaled_dot_product_attention, the loss through gradcheck in float64."""
    gen = torch.Generator().manual_seed(5)
    # RoPE: pair (x_i, x_{i+HD/2}) as a complex number times e^{i pos inv_freq_i}
    B, NH, T, HD, theta = 2, 3, 7, 8, 10000.0
    x = torch.randn(B, NH, T, HD, generator=gen, dtype=torch.float64)
    z = torch.complex(x[..., :HD // 2], x[..., HD // 2:])
    inv = theta ** (-torch.arange(0, HD // 2, dtype=torch.float64) * 2 / HD)
    z = z * torch.exp(1j * torch.outer(torch.arange(T, dtype=torch.float64), inv))
    want = torch.cat([z.real, z.imag], -1)
    assert torch.allclose(rope(x, theta), want, atol=1e-6), "rope"
    # attention with a key mask and grouped heads, against SDPA
    cfg = dict(tiny_config(), n_kv_heads=2)
    params = {k: v.double() for k, v in init_params(cfg, gen, 0.2).items()}
    tokens = torch.randint(0, cfg["vocab_size"], (2, 9), generator=gen)
    keymask = torch.ones(2, 9, dtype=torch.bool)
    keymask[1, :4] = False
    got = forward(params, cfg, tokens, keymask)
    # the same model, attention by SDPA
    C, NH, NKV = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    xx = params["model.transformer.wte.weight"][tokens]
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        n1 = rms_norm(xx, params[p + "attn_norm.weight"], cfg["rms_norm_eps"])
        q = (n1 @ params[p + "q_proj.weight"].t()).view(2, 9, NH, HD).transpose(1, 2)
        k = (n1 @ params[p + "k_proj.weight"].t()).view(2, 9, NKV, HD).transpose(1, 2)
        v = (n1 @ params[p + "v_proj.weight"].t()).view(2, 9, NKV, HD).transpose(1, 2)
        q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keymask[:, None, None, :])
        h = xx + y.transpose(1, 2).reshape(2, 9, C) @ params[p + "attn_out.weight"].t()
        n2 = rms_norm(h, params[p + "ff_norm.weight"], cfg["rms_norm_eps"])
        a = F.silu(n2 @ params[p + "ff_proj.weight"].t()) * (n2 @ params[p + "up_proj.weight"].t())
        xx = h + a @ params[p + "ff_out.weight"].t()
    xx = rms_norm(xx, params["model.transformer.ln_f.weight"], cfg["rms_norm_eps"])
    want = xx @ params["model.transformer.ff_out.weight"].t()
    assert torch.allclose(got, want, atol=1e-9), "attention"
    # the loss's gradient by finite differences (float64)
    masked = torch.zeros(2, 9, dtype=torch.int32)
    masked[0, 5:] = 1
    masked[1, 6] = 1
    p_ = torch.tensor([0.5, 0.3], dtype=torch.float64)
    ans = torch.tensor([4, 3])
    w = params["model.transformer.blocks.1.up_proj.weight"].clone().requires_grad_()

    def f(wv):
        P = dict(params)
        P["model.transformer.blocks.1.up_proj.weight"] = wv
        return sft_loss(P, cfg, tokens, keymask, masked, p_, ans)
    assert torch.autograd.gradcheck(f, (w,)), "gradcheck"
    print("selftest: rope, attention (SDPA, GQA, key mask) and loss gradients agree")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", action="store_true",
                    help="time SFT forward+backward of the small preset on the CPU")
    ap.add_argument("--selftest", action="store_true",
                    help="check the reference against independent formulations")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    if a.selftest:
        selftest()
    if a.bench:
        bench(a.threads, a.batch, a.seq, a.iters)
    if not (a.bench or a.selftest):
        ap.print_help()


if __name__ == "__main__":
    main()
