#!/usr/bin/env python3
"""bench_train_torch.py: PyTorch eager counterpart of `dllm-rl bench train`.

Masked-diffusion SFT forward+backward of the LLaDA model in fp32 on the CPU,
timed the way src/cli/cmd_bench.c times the C model: the same preset sizes, batch
B x T tokens, the prompt the first T/4 positions of every sequence, each
answer position masked with probability 0.5 (p = 0.5), the loss
mean_b sum_{t masked} CE / p / answer_len, one untimed warm-up step, then the
mean over the timed steps. As in the C model, ln_f and the head run on the
masked rows only (--full-head runs them on every row, as llada_ref.py does).

Attention is eager matmul + softmax, as in llada_ref.py; --sdpa uses
torch.nn.functional.scaled_dot_product_attention instead (fused kernels).

    python3 tests/ref/bench_train_torch.py --threads 2 --batch 4 --seq 256 --iters 5
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llada_ref import init_params, rms_norm, rope, small_config, tiny_config  # noqa: E402


def forward_hidden(params, cfg, tokens, sdpa):
    """tokens [B, T] -> final hidden states [B, T, C] before ln_f."""
    B, T = tokens.shape
    C, NH, NKV = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = params["model.transformer.wte.weight"][tokens]
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        n1 = rms_norm(x, params[p + "attn_norm.weight"], eps)
        q = (n1 @ params[p + "q_proj.weight"].t()).view(B, T, NH, HD).transpose(1, 2)
        k = (n1 @ params[p + "k_proj.weight"].t()).view(B, T, NKV, HD).transpose(1, 2)
        v = (n1 @ params[p + "v_proj.weight"].t()).view(B, T, NKV, HD).transpose(1, 2)
        q, k = rope(q, theta), rope(k, theta)
        if NKV != NH:
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            att = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(HD), dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, NH * HD)
        h = x + y @ params[p + "attn_out.weight"].t()
        n2 = rms_norm(h, params[p + "ff_norm.weight"], eps)
        g = n2 @ params[p + "ff_proj.weight"].t()
        u = n2 @ params[p + "up_proj.weight"].t()
        x = h + (F.silu(g) * u) @ params[p + "ff_out.weight"].t()
    return x


def sft_loss(params, cfg, clean, masked, p, ans_len, sdpa, full_head):
    noisy = torch.where(masked, torch.full_like(clean, cfg["mask_token_id"]), clean)
    x = forward_hidden(params, cfg, noisy, sdpa)
    B, T, C = x.shape
    eps = cfg["rms_norm_eps"]
    wrow = (1.0 / (p * ans_len.float()))[:, None].expand(B, T)
    if full_head:
        xf = rms_norm(x, params["model.transformer.ln_f.weight"], eps)
        logits = xf @ params["model.transformer.ff_out.weight"].t()
        ce = F.cross_entropy(logits.reshape(B * T, -1), clean.reshape(B * T), reduction="none")
        return (ce * masked.reshape(-1).float() * wrow.reshape(-1)).sum() / B
    rows = masked.reshape(-1).nonzero().squeeze(1)
    xr = x.reshape(B * T, C)[rows]
    xf = rms_norm(xr, params["model.transformer.ln_f.weight"], eps)
    logits = xf @ params["model.transformer.ff_out.weight"].t()
    ce = F.cross_entropy(logits, clean.reshape(-1)[rows], reduction="none")
    return (ce * wrow.reshape(-1)[rows]).sum() / B


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=("tiny", "small"), default="small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sdpa", action="store_true", help="fused scaled_dot_product_attention")
    ap.add_argument("--full-head", action="store_true", help="ln_f and head on every row")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the process's CPU time (per core-second; use with --threads 1)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    cfg = small_config() if a.preset == "small" else tiny_config()
    gen = torch.Generator().manual_seed(1)
    params = {k: v.requires_grad_() for k, v in init_params(cfg, gen, 0.02).items()}
    B, T, V = a.batch, a.seq, cfg["vocab_size"]
    clean = torch.randint(0, V, (B, T), generator=gen)
    masked = torch.rand(B, T, generator=gen) < 0.5
    masked[:, :T // 4] = False
    p = torch.full((B,), 0.5, dtype=torch.float32)
    ans_len = torch.full((B,), T - T // 4)

    def step():
        for v in params.values():
            v.grad = None
        loss = sft_loss(params, cfg, clean, masked, p, ans_len, a.sdpa, a.full_head)
        loss.backward()
        return loss.item()

    for _ in range(a.warmup):
        step()
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    t0 = clock()
    for _ in range(a.iters):
        loss = step()
    dt = (clock() - t0) / a.iters
    print(f"bench train (torch {torch.__version__} eager{', sdpa' if a.sdpa else ''}"
          f"{', full head' if a.full_head else ''}): preset {a.preset}, batch {B} x {T} tokens, "
          f"{torch.get_num_threads()} threads{'; CPU time' if a.clock == 'cpu' else ''}")
    print(f"  {dt:.3f} s per forward+backward, {B * T / dt:.1f} tokens/s (loss {loss:.4f})")


if __name__ == "__main__":
    main()
