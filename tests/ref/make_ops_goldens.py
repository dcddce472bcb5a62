#!/usr/bin/env python3
"""Goldens for tests/unit/test_ops.c from PyTorch (CPU, fp32).

Writes, little-endian, into tests/data/ops/:

adamw.bin  torch.optim.AdamW (default single-tensor CPU path), NCASE = 2 cases,
           N = 64 parameters, STEPS = 5 steps each. Per case:
             float32 hyper[5] = lr, beta1, beta2, eps, weight_decay
             float32 p0[N]
             STEPS times: float32 g[N], p[N], m[N], v[N]   (state after the step)
           Hyper-parameters are fp32 values, handed to torch as the same numbers.

rope.bin   rotary cos/sin tables as LLaDA/LLaMA build them:
           inv_freq = 1 / theta ** (arange(0, HD, 2).float() / HD), angle =
           outer(pos.float(), inv_freq), then .cos() / .sin() in fp32.
             float32 theta, int32 HD, int32 NPOS
             int32 pos[NPOS]; float32 cos[NPOS][HD/2]; float32 sin[NPOS][HD/2]

Usage: python3 tests/ref/make_ops_goldens.py [outdir]
"""
import os
import struct
import sys

import numpy as np
import torch

f32 = np.float32


def adamw_case(out, gen, lr, b1, b2, eps, wd, n=64, steps=5):
    hyper = [float(f32(x)) for x in (lr, b1, b2, eps, wd)]
    out.write(struct.pack("<5f", *hyper))
    p = torch.randn(n, generator=gen, dtype=torch.float32)
    out.write(p.numpy().astype("<f4").tobytes())
    p = p.clone().requires_grad_(True)
    opt = torch.optim.AdamW([p], lr=hyper[0], betas=(hyper[1], hyper[2]), eps=hyper[3],
                            weight_decay=hyper[4], foreach=False)
    for step in range(steps):
        g = torch.randn(n, generator=gen, dtype=torch.float32) * 0.1
        if step == 1:
            g[3] = 0.0
        p.grad = g.clone()
        opt.step()
        st = opt.state[p]
        for t in (g, p.detach(), st["exp_avg"], st["exp_avg_sq"]):
            out.write(t.numpy().astype("<f4").tobytes())


def rope(out, theta, hd, pos):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = torch.outer(torch.tensor(pos, dtype=torch.float32), inv_freq)
    out.write(struct.pack("<fii", theta, hd, len(pos)))
    out.write(np.asarray(pos, dtype="<i4").tobytes())
    out.write(ang.cos().numpy().astype("<f4").tobytes())
    out.write(ang.sin().numpy().astype("<f4").tobytes())


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "ops")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    with open(os.path.join(outdir, "adamw.bin"), "wb") as out:
        adamw_case(out, gen, 1e-3, 0.9, 0.999, 1e-8, 0.01)
        adamw_case(out, gen, 2.5e-2, 0.9, 0.95, 1e-5, 0.1)
    pos = sorted(set([0, 1, 2, 3, 7, 100, 511, 512, 1000, 2047, 4095]
                     + list(range(4096 - 40 * 97, 4096, 97))))[:64]
    with open(os.path.join(outdir, "rope.bin"), "wb") as out:
        rope(out, 500000.0, 128, pos)
    print("wrote", outdir)


if __name__ == "__main__":
    main()
