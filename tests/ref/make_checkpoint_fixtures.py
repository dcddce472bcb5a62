#!/usr/bin/env python3
"""Reference fixtures for tests/unit/test_safetensors.c, written by the Python
`safetensors` library (and huggingface_hub for the sharded layout, which is
the code transformers' save_pretrained uses).

    python3 tests/ref/make_checkpoint_fixtures.py            # (re)writes tests/data/checkpoint/

writes, under tests/data/checkpoint/:
  ref_single.safetensors   F32, BF16, F16 (a spread of bit patterns incl. inf,
                           NaN, subnormals), every F8_E4M3 and F8_E5M2 code,
                           an I64 and an empty tensor; metadata
  ref_single.expected      each float tensor converted to fp32 by torch:
                           "NAME DTYPE NDIM DIMS... NUMEL" then NUMEL fp32 bit
                           patterns in hex
  ref_sharded/             a small LLaDA-named bf16 state dict saved by
                           huggingface_hub.save_torch_state_dict (6 shards +
                           model.safetensors.index.json)
  ref_sharded.expected     its values, same format
  conversions.safetensors  "input" (F32) and torch's round-to-nearest-even
                           conversions "bf16" (BF16) and "f16" (F16), which the
                           C writer must reproduce bit for bit (NaN: any NaN)

The reverse direction (files written by the C writer load in the reference):

    DLLM_TEST_DATA=tests/data DLLM_ST_GOLDEN_OUT=OUT BUILD/tests/test_safetensors
    python3 tests/ref/make_checkpoint_fixtures.py --check-ours OUT

The test writes OUT/ours_single.safetensors (conversions' input stored as
F32, BF16 and F16, metadata {"format": "pt", "writer": "dllm-rl"}) and
OUT/ours_sharded/ (the same tensors split into shards). The check loads both
with safetensors.torch and compares every value with torch's own
conversions. Last run: all checks passed (safetensors 0.8.0, torch 2.15).
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "checkpoint")


def bits_f32(t):
    """fp32 bit patterns of a tensor converted by torch."""
    return t.to(torch.float32).contiguous().view(torch.int32).numpy().astype(np.uint32)


def write_expected(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors.items():
            dt = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                  torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}.get(t.dtype)
            if dt is None:
                continue
            shape = list(t.shape)
            f.write(f"{name} {dt} {len(shape)} {' '.join(map(str, shape))} {t.numel()}\n")
            words = [f"{b:08x}" for b in bits_f32(t).reshape(-1)]
            for i in range(0, len(words), 8):
                f.write(" ".join(words[i:i + 8]) + "\n")


def special_f32():
    """Values that exercise rounding: ties, overflow, subnormals, specials."""
    v = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
         65504.0, 65519.99, 65520.0, 70000.0, -65520.0, 6.1e-5, 2.0 ** -14, 2.0 ** -24,
         2.0 ** -25, 2.0 ** -25 * 1.0001, 1.5 * 2.0 ** -24, 2.5 * 2.0 ** -24, 3.5 * 2.0 ** -24,
         1e-8, -1e-8, 3.4028234e38, -3.4028234e38, 1e-45, 1.17549435e-38, 0.1, 1 / 3]
    a = np.array(v, dtype=np.float32)
    # bf16 ties: low 16 bits exactly 0x8000, upper half even and odd
    ties = np.array([0x3f808000, 0x3f818000, 0xbf808000, 0x40490000 | 0x8000,
                     0x7f7f8000, 0x7f7fffff, 0x00018000, 0x3f80ffff, 0x3f807fff],
                    dtype=np.uint32).view(np.float32)
    # f16 ties: 1 + k * 2^-11 (halfway between f16 neighbours near 1)
    f16t = np.array([1 + k * 2.0 ** -11 for k in range(1, 9)], dtype=np.float32)
    return np.concatenate([a, ties, f16t, -f16t])


def make_single():
    g = torch.Generator().manual_seed(1234)
    codes16 = torch.arange(0, 65536, 61, dtype=torch.int32).to(torch.int16)
    specials16 = torch.tensor([0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x03ff, 0x0400,
                               0x7bff, 0xfbff, 0x3c00], dtype=torch.int32).to(torch.int16)
    f16 = torch.cat([codes16, specials16]).view(torch.float16)
    bf16 = torch.cat([torch.randn(60, generator=g) * 10,
                      torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-40])]
                     ).to(torch.bfloat16)
    tensors = {
        "model.f32.mat": torch.randn(3, 4, generator=g),
        "model.bf16.vals": bf16.reshape(6, 11),
        "model.f16.vals": f16,
        "model.e4m3.all": torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn),
        "model.e5m2.all": torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e5m2).reshape(16, 16),
        "model.i64.ids": torch.tensor([1, -2, 3, 1 << 40, -(1 << 50)], dtype=torch.int64),
        "model.empty": torch.zeros(0, 4),
    }
    save_file(tensors, os.path.join(OUT, "ref_single.safetensors"),
              metadata={"format": "pt", "origin": "safetensors-python"})
    write_expected(os.path.join(OUT, "ref_single.expected"), tensors)


def make_sharded():
    from huggingface_hub import save_torch_state_dict
    g = torch.Generator().manual_seed(99)
    C, V, F = 16, 24, 40
    sd = {"model.transformer.wte.weight": torch.randn(V, C, generator=g),
          "model.transformer.ln_f.weight": torch.randn(C, generator=g),
          "model.transformer.ff_out.weight": torch.randn(V, C, generator=g)}
    for i in range(2):
        p = f"model.transformer.blocks.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "attn_out"):
            sd[p + n + ".weight"] = torch.randn(C, C, generator=g)
        sd[p + "ff_proj.weight"] = torch.randn(F, C, generator=g)
        sd[p + "up_proj.weight"] = torch.randn(F, C, generator=g)
        sd[p + "ff_out.weight"] = torch.randn(C, F, generator=g)
        sd[p + "attn_norm.weight"] = torch.randn(C, generator=g)
        sd[p + "ff_norm.weight"] = torch.randn(C, generator=g)
    sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    d = os.path.join(OUT, "ref_sharded")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    save_torch_state_dict(sd, d, max_shard_size=3000)
    shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert len(shards) >= 2 and os.path.exists(os.path.join(d, "model.safetensors.index.json")), shards
    write_expected(os.path.join(OUT, "ref_sharded.expected"), sd)


def make_conversions():
    g = torch.Generator().manual_seed(7)
    rnd = torch.cat([torch.randn(1500, generator=g) * s for s in (1.0,)] +
                    [torch.randn(200, generator=g) * 1e-6, torch.randn(200, generator=g) * 3e4,
                     torch.randn(100, generator=g) * 1e-30])
    x = torch.cat([torch.from_numpy(special_f32()), rnd]).to(torch.float32)
    save_file({"input": x, "bf16": x.to(torch.bfloat16), "f16": x.to(torch.float16)},
              os.path.join(OUT, "conversions.safetensors"), metadata={"format": "pt"})


def same(a, b):
    """Bitwise equal, except that any NaN matches any NaN."""
    a = a.to(torch.float32)
    b = b.to(torch.float32)
    nan = torch.isnan(a)
    return bool((nan == torch.isnan(b)).all()) and bool(
        (a[~nan].view(torch.int32) == b[~nan].view(torch.int32)).all())


def check_ours(out):
    ref = load_file(os.path.join(OUT, "conversions.safetensors"))
    x = ref["input"]
    want = {"input.f32": x, "input.bf16": x.to(torch.bfloat16), "input.f16": x.to(torch.float16)}
    path = os.path.join(out, "ours_single.safetensors")
    got = load_file(path)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert same(got[k], v), k
    with safe_open(path, "pt") as f:
        md = f.metadata()
    assert md == {"format": "pt", "writer": "dllm-rl"}, md
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0, n
    header = json.loads(raw[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    assert names == sorted(names), names
    d = os.path.join(out, "ours_sharded")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    total = 0
    for shard in sorted(set(index["weight_map"].values())):
        part = load_file(os.path.join(d, shard))
        for k, v in part.items():
            assert index["weight_map"][k] == shard, k
            assert same(v, want[k]), k
            total += v.numel() * v.element_size()
    assert set(index["weight_map"]) == set(want)
    assert index["metadata"]["total_size"] == total, (index["metadata"], total)
    print("check-ours: all checks passed")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-ours":
        check_ours(sys.argv[2])
        return
    os.makedirs(OUT, exist_ok=True)
    make_single()
    make_sharded()
    make_conversions()
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
