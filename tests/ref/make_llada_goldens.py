#!/usr/bin/env python3
"""make_llada_goldens.py: writes the LLaDA model fixtures of tests/unit/test_llada.c
into tests/data/llada/ using the independent PyTorch reference llada_ref.py.

    tiny/           config.json + model.safetensors (fp32, random weights, std 0.2)
    tiny_bf16/      the same weights rounded to bf16, two shards + index
    tiny_gqa/       another random model with grouped-query attention (2 KV heads)
    lora_adapter.safetensors   LoRA A/B (PEFT names), rank 4, targets q_proj,v_proj,ff_out
    golden.safetensors         the batch and every expected output (see below)

The batch: B=2, T=12; sequence 0 = 4 prompt + 8 answer tokens; sequence 1 = 3
left-padding keys (key mask 0) + 3 prompt + 6 answer tokens; answers end in
EOS padding. A fixed set of answer positions is masked, with per-sequence p.

golden.safetensors:
    tokens, keymask, masked [B,T] I32; ans_start, ans_len [B] I32; p [B] F32
    logits [B,T,V]           forward of the noisy canvas (fp32 model)
    logits_bf16 [B,T,V]      the same with the bf16 weights
    loss [1]                 SFT loss (docs/METHOD.md section 1)
    grad.<name>              d loss / d parameter, every parameter
    adamw.<name>             parameters after 5 AdamW steps (clip 1.0) on this batch
    adamw_loss [5]           the loss before each step
    score_logp [B,T]         one-step score: answer fully masked, log p(clean) at
                             answer positions, 0 elsewhere
    lora_logits [B,T,V], lora_loss [1], lora_grad.<PEFT name>
    gqa_logits [B,T,V], gqa_loss [1], gqa_grad.<name> for the block-0 attention
                             weights (the ones the head grouping touches)

Run from the repository root: python3 tests/ref/make_llada_goldens.py
"""
import math
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada_ref as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llada")
LR, BETAS, EPS, WD, CLIP, STEPS = 1e-2, (0.9, 0.99), 1e-8, 0.1, 1.0, 5
LORA_RANK, LORA_ALPHA, LORA_TARGETS = 4, 8.0, ("q_proj", "v_proj", "ff_out")


def make_batch(cfg, gen):
    B, T, V = 2, 12, cfg["vocab_size"]
    eos, pad = cfg["eos_token_id"], cfg["pad_token_id"]
    tokens = torch.randint(3, V, (B, T), generator=gen)
    keymask = torch.ones(B, T, dtype=torch.int32)
    ans_start = torch.tensor([4, 6], dtype=torch.int32)
    ans_len = torch.tensor([8, 6], dtype=torch.int32)
    tokens[1, :3] = pad
    keymask[1, :3] = 0
    tokens[0, 10:] = eos  # EOS padding of the answer (part of the answer length)
    tokens[1, 11] = eos
    p = torch.tensor([0.7, 0.4])
    masked = torch.zeros(B, T, dtype=torch.int32)
    for b in range(B):
        s, n = int(ans_start[b]), int(ans_len[b])
        while True:
            m = (torch.rand(n, generator=gen) < p[b]).int()
            if 0 < int(m.sum()) < n:
                break
        masked[b, s:s + n] = m
    return tokens, keymask, masked, ans_start, ans_len, p


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    cfg = ref.tiny_config()
    params = ref.init_params(cfg, gen, 0.2)
    names = [n for n, _ in ref.param_shapes(cfg)]

    ref.save_model(os.path.join(OUT, "tiny"), cfg, params, torch.float32, 1)
    ref.save_model(os.path.join(OUT, "tiny_bf16"), cfg, params, torch.bfloat16, 2)
    # What the C side must load back: re-read both copies from disk.
    params = ref.load_params(os.path.join(OUT, "tiny"))
    params_bf16 = ref.load_params(os.path.join(OUT, "tiny_bf16"))

    tokens, keymask, masked, ans_start, ans_len, p = make_batch(cfg, gen)
    clean = tokens.long()
    km = keymask.bool()
    g = {"tokens": tokens.int(), "keymask": keymask, "masked": masked,
         "ans_start": ans_start, "ans_len": ans_len, "p": p.float()}

    noisy = ref.noisy_input(cfg, clean, masked)
    with torch.no_grad():
        g["logits"] = ref.forward(params, cfg, noisy, km)
        g["logits_bf16"] = ref.forward(params_bf16, cfg, noisy, km)

    # loss and every gradient
    P = {k: v.clone().requires_grad_() for k, v in params.items()}
    loss = ref.sft_loss(P, cfg, clean, km, masked, p, ans_len)
    loss.backward()
    g["loss"] = loss.detach().reshape(1)
    for n in names:
        g["grad." + n] = P[n].grad.detach().clone()

    # 5 AdamW steps on the same batch, global-norm clipping of all grads
    P = {k: v.clone().requires_grad_() for k, v in params.items()}
    plist = [P[n] for n in names]
    opt = torch.optim.AdamW(plist, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ref.sft_loss(P, cfg, clean, km, masked, p, ans_len)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, CLIP)
        opt.step()
        losses.append(loss.item())
    g["adamw_loss"] = torch.tensor(losses)
    for n in names:
        g["adamw." + n] = P[n].detach().clone()

    # one-step score: prompt clean, the whole answer masked
    score_mask = torch.zeros_like(masked)
    for b in range(clean.shape[0]):
        s, n = int(ans_start[b]), int(ans_len[b])
        score_mask[b, s:s + n] = 1
    with torch.no_grad():
        lg = ref.forward(params, cfg, ref.noisy_input(cfg, clean, score_mask), km)
        lp = torch.log_softmax(lg, -1).gather(-1, clean[..., None])[..., 0]
        g["score_logp"] = lp * score_mask.float()

    # LoRA: A ~ U(-1/sqrt(in), 1/sqrt(in)) as PEFT, B random nonzero for the test
    lora = {}
    for n, shape in ref.lora_shapes(cfg, LORA_TARGETS, LORA_RANK):
        if n.endswith("lora_A.weight"):
            bound = 1.0 / math.sqrt(shape[1])
            lora[n] = (torch.rand(shape, generator=gen) * 2 - 1) * bound
        else:
            lora[n] = 0.1 * torch.randn(shape, generator=gen)
    save_file({k: v.contiguous() for k, v in lora.items()},
              os.path.join(OUT, "lora_adapter.safetensors"), metadata={"format": "pt"})
    scale = LORA_ALPHA / LORA_RANK
    Lp = {k: v.clone().requires_grad_() for k, v in lora.items()}
    with torch.no_grad():
        g["lora_logits"] = ref.forward(params, cfg, noisy, km, Lp, scale)
    loss = ref.sft_loss(params, cfg, clean, km, masked, p, ans_len, Lp, scale)
    loss.backward()
    g["lora_loss"] = loss.detach().reshape(1)
    for n in lora:
        g["lora_grad." + n] = Lp[n].grad.detach().clone()

    # grouped-query attention: n_kv_heads 2 < n_heads 4
    gcfg = dict(cfg, n_kv_heads=2)
    ref.save_model(os.path.join(OUT, "tiny_gqa"), gcfg,
                   ref.init_params(gcfg, gen, 0.2), torch.float32, 1)
    gp = {k: v.requires_grad_() for k, v in ref.load_params(os.path.join(OUT, "tiny_gqa")).items()}
    with torch.no_grad():
        g["gqa_logits"] = ref.forward(gp, gcfg, noisy, km)
    loss = ref.sft_loss(gp, gcfg, clean, km, masked, p, ans_len)
    loss.backward()
    g["gqa_loss"] = loss.detach().reshape(1)
    for mod in ("q_proj", "k_proj", "v_proj", "attn_out"):
        n = f"model.transformer.blocks.0.{mod}.weight"
        g["gqa_grad." + n] = gp[n].grad.detach().clone()

    g = {k: v.contiguous() for k, v in g.items()}
    save_file(g, os.path.join(OUT, "golden.safetensors"), metadata={"format": "pt"})
    print(f"loss {g['loss'].item():.6f}  lora_loss {g['lora_loss'].item():.6f}  "
          f"adamw losses {[round(x, 5) for x in losses]}")


if __name__ == "__main__":
    main()
