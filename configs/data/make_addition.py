"""Writes addition.jsonl: two-digit additions as prompt/answer pairs for the
tiny SFT quickstart ({"prompt": "37+48=", "answer": "85"}). Deterministic."""
import json
import random

rng = random.Random(1)
with open("addition.jsonl", "w") as f:
    for _ in range(4000):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
