#!/usr/bin/env python3
"""Golden for the bf16 rollout copy of Qwen3.5 (dllm/qwen35.h, qwen35_round_bf16).

    python3 tests/ref/make_qwen35_bf16_golden.py SITE_PACKAGES   # from the repository root

Loads the tiny models of tests/data/qwen35 with transformers 5.x (Qwen3_5ForCausalLM, its
PyTorch reference kernels), rounds to bf16 the weights the copy rounds -- the embedding,
the head, in_proj_qkv, in_proj_z, out_proj, q/k/v/o_proj and the MLP projections -- and
rounds every input of those linears to bf16 (products and sums in fp32), then writes the
exact log-probs of a fixed completion to tests/data/qwen35/bf16_golden.json. Everything
else (in_proj_a/b, A_log, dt_bias, the convolution, the norms, attention and the
recurrence) stays fp32, as in the copy.
"""
import json
import os
import sys

if len(sys.argv) > 1:
    sys.path[:0] = sys.argv[1:]

import torch
import torch.nn.functional as F
from transformers import Qwen3_5ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "qwen35")
BIG = {"in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj",
       "gate_proj", "up_proj", "down_proj", "lm_head"}
PROMPT, COMPLETION = [1, 2, 3, 4, 9, 17], [5, 6, 7, 8, 30, 31, 2, 11]


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def rounded_linear(mod):
    return lambda x: F.linear(bf16(x), mod.weight, mod.bias)


def main():
    out = {"prompt_ids": PROMPT, "completion_ids": COMPLETION, "models": {}}
    for name in ["hybrid", "tied"]:
        m = Qwen3_5ForCausalLM.from_pretrained(os.path.join(ROOT, name), dtype=torch.float32).eval()
        with torch.no_grad():
            m.model.embed_tokens.weight.copy_(bf16(m.model.embed_tokens.weight))
            for mname, mod in m.named_modules():
                if isinstance(mod, torch.nn.Linear) and mname.split(".")[-1] in BIG:
                    mod.weight.copy_(bf16(mod.weight))
                    mod.forward = rounded_linear(mod)
            ids = PROMPT + COMPLETION
            lp = torch.log_softmax(m(torch.tensor([ids])).logits[0].double(), -1)
        P = len(PROMPT)
        out["models"][name] = [lp[P - 1 + i, COMPLETION[i]].item() for i in range(len(COMPLETION))]
    with open(os.path.join(ROOT, "bf16_golden.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
