#!/usr/bin/env python3
"""make_fp8_goldens.py: independent reference for kernels/fp8 (PyTorch + numpy).

Writes tests/data/fp8/:
  decode_e4m3.bin, decode_e5m2.bin   float32[256]: code c -> torch float8 -> float32
  encode_inputs.bin                  float32[n]: random floats over a wide exponent
                                     range, midpoints between adjacent codes of both
                                     formats (ties-to-even), their fp32 neighbours,
                                     values around max and in the subnormal range
  encode_e4m3.bin, encode_e5m2.bin   uint8[n]: torch cast AFTER clamping to [-max, max]
                                     (torch's own cast may turn overflow into NaN)
  quant_cases.json                   scaling cases: shape, format, mode, pow2, input seed
  quant_<name>.bin                   uint8 codes[R*C] then float32 scales[SR*SC]

Scaling reference (docs/METHOD.md section 6): the matrix is cut into blocks (tensor: one
block; channel: 1 x C; block: 128 x 128; group: 1 x 128; edge blocks cover the
remainder). Per block: amax = max |x| (fp32), scale = amax / max_code in fp32
(amax == 0 -> 1), pow2 rounds scale up to a power of two, q = cast(clamp(x / scale)).

Matrix inputs are not stored: both sides generate them from a splitmix64 counter
(see matrix_input below and the same function in tests/unit/test_fp8.c); every value is
an exact fp32 (a 24-bit integer times a power of two).

Usage: python3 tests/ref/make_fp8_goldens.py [OUT_DIR]   (default tests/data/fp8)
"""
import json
import os
import sys

import numpy as np
import torch

FORMATS = {
    "e4m3": (torch.float8_e4m3fn, 448.0),
    "e5m2": (torch.float8_e5m2, 57344.0),
}
MASK = (1 << 64) - 1


def cast(x, fmt):
    """fp32 array -> uint8 codes, clamping first so overflow saturates."""
    dt, mx = FORMATS[fmt]
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    t = torch.clamp(t, -mx, mx)
    return t.to(dt).view(torch.uint8).numpy().copy()


def decode_all(fmt):
    dt, _ = FORMATS[fmt]
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return codes.view(dt).to(torch.float32).numpy()


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def matrix_input(R, C, seed, zero_rows, zero_cols):
    """x[r, c] = (int24 in [-2^23, 2^23)) * 2^(-23 + ((r*7 + c//64) % 13) - 6), except
    a zero region rows [zr0, zr1) x cols [zc0, zc1) (an amax = 0 block)."""
    x = np.empty((R, C), dtype=np.float32)
    for r in range(R):
        for c in range(C):
            h = splitmix64((seed * 1000003 + r * C + c) & MASK)
            m = (h >> 40) - (1 << 23)
            e = -23 + ((r * 7 + c // 64) % 13) - 6
            x[r, c] = np.float32(m) * np.float32(2.0 ** e)
    x[zero_rows[0]:zero_rows[1], zero_cols[0]:zero_cols[1]] = 0.0
    return x


def block_shape(mode, R, C):
    return {"tensor": (R, C), "channel": (1, C), "block": (128, 128), "group": (1, 128)}[mode]


def pow2_up(s):
    """Smallest power of two >= s (s > 0, fp32)."""
    m, e = np.frexp(np.float64(s))  # s = m * 2^e, m in [0.5, 1)
    return np.float32(s) if m == 0.5 else np.float32(np.ldexp(1.0, int(e)))


def quantise(x, fmt, mode, pow2):
    R, C = x.shape
    br, bc = block_shape(mode, R, C)
    SR, SC = -(-R // br), -(-C // bc)
    mx = np.float32(FORMATS[fmt][1])
    codes = np.empty((R, C), dtype=np.uint8)
    scales = np.empty((SR, SC), dtype=np.float32)
    for i in range(SR):
        for j in range(SC):
            blk = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            amax = np.float32(np.max(np.abs(blk)))
            s = np.float32(1.0) if amax == 0 else np.float32(amax / mx)
            if pow2:
                s = pow2_up(s)
            scales[i, j] = s
            codes[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = cast(blk / s, fmt)
    return codes, scales


def encode_inputs(rng):
    vals = []
    # Random floats: random sign, exponent in [2^-30, 2^21), random 23-bit mantissa.
    n = 20000
    sign = rng.integers(0, 2, n, dtype=np.uint32) << 31
    expo = rng.integers(127 - 30, 127 + 21, n, dtype=np.uint32) << 23
    mant = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    vals.append((sign | expo | mant).view(np.float32))
    for fmt in FORMATS:
        d = decode_all(fmt)
        pos = np.array(sorted(v for v in d[:128] if np.isfinite(v)), dtype=np.float64)
        mid = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)  # exact: few bits each
        assert np.all(mid.astype(np.float64) == (pos[:-1] + pos[1:]) / 2)
        mx = np.float32(FORMATS[fmt][1])
        last_gap = pos[-1] - pos[-2]
        around_max = np.array([mx, mx + last_gap / 2, mx + last_gap, mx * 2, 3e38,
                               pos[1] / 2, pos[1] / 4, pos[1] * 1.5, pos[1] * 2.5],
                              dtype=np.float32)
        for v in (mid, around_max):
            up = np.nextafter(v, np.float32(np.inf))
            dn = np.nextafter(v, np.float32(0))
            for w in (v, up, dn):
                vals.append(w)
                vals.append(-w)
    vals.append(np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38], dtype=np.float32))
    return np.concatenate(vals).astype(np.float32)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "fp8")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240607)

    for fmt in FORMATS:
        decode_all(fmt).astype("<f4").tofile(os.path.join(out, f"decode_{fmt}.bin"))

    xs = encode_inputs(rng)
    xs.astype("<f4").tofile(os.path.join(out, "encode_inputs.bin"))
    for fmt in FORMATS:
        cast(xs, fmt).tofile(os.path.join(out, f"encode_{fmt}.bin"))

    # Scaling cases. The weight (300 x 260) has a 128 x 128 zero block at block (1, 0)
    # and edge blocks of 44 rows / 4 columns; the activation (7 x 260) matches its C.
    # The 200 x 150 weights have a zero edge block (72 x 128) at block (1, 0).
    cases = [
        ("w_block_e4m3", 300, 260, "e4m3", "block", False, 1, [128, 256], [0, 128]),
        ("w_block_e4m3_pow2", 200, 150, "e4m3", "block", True, 5, [128, 200], [0, 128]),
        ("w_block_e5m2", 200, 150, "e5m2", "block", False, 5, [128, 200], [0, 128]),
        ("w_tensor_e4m3", 40, 260, "e4m3", "tensor", False, 2, [0, 0], [0, 0]),
        ("w_tensor_e5m2_pow2", 40, 260, "e5m2", "tensor", True, 2, [0, 0], [0, 0]),
        ("w_channel_e4m3", 40, 260, "e4m3", "channel", False, 3, [5, 6], [0, 260]),
        ("w_channel_e4m3_pow2", 40, 260, "e4m3", "channel", True, 3, [5, 6], [0, 260]),
        ("a_group_e4m3", 7, 260, "e4m3", "group", False, 4, [2, 3], [128, 256]),
        ("a_group_e5m2_pow2", 7, 260, "e5m2", "group", True, 4, [2, 3], [128, 256]),
        ("a_tensor_e4m3", 7, 260, "e4m3", "tensor", False, 4, [0, 0], [0, 0]),
    ]
    meta = []
    for name, R, C, fmt, mode, pow2, seed, zr, zc in cases:
        x = matrix_input(R, C, seed, zr, zc)
        codes, scales = quantise(x, fmt, mode, pow2)
        with open(os.path.join(out, f"quant_{name}.bin"), "wb") as f:
            f.write(codes.tobytes())
            f.write(scales.astype("<f4").tobytes())
        meta.append({"name": name, "rows": R, "cols": C, "format": fmt, "scaling": mode,
                     "pow2": pow2, "seed": seed, "zero_rows": zr, "zero_cols": zc,
                     "scale_rows": int(scales.shape[0]), "scale_cols": int(scales.shape[1]),
                     "file": f"quant_{name}.bin"})
    with open(os.path.join(out, "quant_cases.json"), "w") as f:
        json.dump({"cases": meta}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(xs)} encode inputs and {len(meta)} scaling cases to {out}")


if __name__ == "__main__":
    main()
