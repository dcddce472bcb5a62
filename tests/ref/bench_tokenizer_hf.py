#!/usr/bin/env python3
"""Encode throughput on ~1 MB of mixed text: HF `tokenizers` vs `dllm-rl tokenize`.

    python3 tests/ref/bench_tokenizer_hf.py --tokenizer qwen3-tokenizer.json [--dllm build/dllm-rl]

The text is generated deterministically (English prose, code, numbers, CJK, Arabic,
Hindi, emoji, whitespace runs, special tokens). HF time = best of 3 single-string
encodes (add_special_tokens=False; the library may use several threads internally).
dllm-rl time = its own --stats line (encode only, file loading excluded), best of 3.
Both id sequences are compared."""
import argparse
import random
import re
import subprocess
import tempfile
import time

from tokenizers import Tokenizer


def make_text(nbytes=1 << 20, seed=7):
    rng = random.Random(seed)
    words = ("the of and to in is was that for on with as by at from this be are or it an which have "
             "model diffusion token gradient policy reward sequence sampling temperature").split()
    blocks = [
        lambda: " ".join(rng.choice(words) for _ in range(rng.randint(5, 40))).capitalize() + ". ",
        lambda: "def f_%d(x):\n    return x * %d + %d  # comment\n\n" % (rng.randint(0, 999), rng.randint(0, 99), rng.randint(0, 9999)),
        lambda: " ".join(str(rng.randint(0, 10 ** rng.randint(1, 12))) for _ in range(rng.randint(1, 8))) + "\n",
        lambda: "".join(chr(rng.randint(0x4e00, 0x9fff)) for _ in range(rng.randint(5, 30))) + "。",
        lambda: "مرحبا بالعالم هذا نص عربي " * rng.randint(1, 3),
        lambda: "नमस्ते दुनिया यह हिंदी पाठ है " * rng.randint(1, 3),
        lambda: rng.choice(["🤗", "🚀", "👨‍👩‍👧‍👦", "👍🏽", "🇯🇵"]) * rng.randint(1, 4) + " ",
        lambda: " " * rng.randint(2, 12) + "\t" * rng.randint(0, 3) + "\r\n" * rng.randint(0, 2),
        lambda: "<|im_start|>user\n" + rng.choice(words) + "<|im_end|>\n",
        lambda: "naïve café résumé über straße ",
    ]
    out, n = [], 0
    while n < nbytes:
        s = rng.choice(blocks)()
        out.append(s)
        n += len(s.encode("utf-8"))
    return "".join(out).encode("utf-8")[:nbytes].decode("utf-8", "ignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--dllm", help="path to the dllm-rl binary")
    a = ap.parse_args()
    text = make_text()
    data = text.encode("utf-8")
    mb = len(data) / 1e6
    tok = Tokenizer.from_file(a.tokenizer)
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        best = min(best, time.perf_counter() - t0)
    print(f"text: {len(data)} bytes, {len(ids)} tokens")
    print(f"HF tokenizers: {mb / best:.2f} MB/s ({best:.3f} s)")
    if a.dllm:
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(data)
            f.flush()
            best_d = 1e9
            for _ in range(3):
                r = subprocess.run([a.dllm, "tokenize", "--tokenizer", a.tokenizer, "--stats"],
                                   stdin=open(f.name, "rb"), capture_output=True, check=True)
                secs = float(re.search(r"in ([0-9.]+) s", r.stderr.decode()).group(1))
                best_d = min(best_d, secs)
            ours = [int(x) for x in r.stdout.decode().strip().split(",")]
        print(f"dllm-rl tokenize: {mb / best_d:.2f} MB/s ({best_d:.3f} s)")
        print("ids identical:", ours == ids)


if __name__ == "__main__":
    main()
