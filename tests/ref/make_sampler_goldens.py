"""Golden outputs of the published LLaDA sampler (generate() of the LLaDA
reference code, re-implemented here step for step in PyTorch) on the tiny
reference checkpoint, for tests/test_sampler.c.

At temperature 0 with low_confidence remasking the sampler is deterministic,
so our C sampler must reproduce these ids exactly. The script also reports the
smallest decision margin (argmax gap and top-k confidence gap) of each case, so
that a case whose outcome could flip on float rounding is never used.

Usage: python3 tests/ref/make_sampler_goldens.py  (writes tests/data/sampler/)
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

import llada_ref as ref

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num[i, :remainder[i]] += 1
    return num


def generate(model, prompt, attention_mask, steps, gen_length, block_length, cfg_scale,
             mask_id, eos_id, logits_eos_inf, margins):
    """The published generate() at temperature 0, low_confidence remasking."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    if attention_mask is not None:
        attention_mask = torch.cat(
            [attention_mask, torch.ones((prompt.shape[0], gen_length), dtype=attention_mask.dtype)],
            dim=-1)
    prompt_index = x != mask_id
    num_blocks = gen_length // block_length
    steps = steps // num_blocks
    for nb in range(num_blocks):
        lo = prompt.shape[1] + nb * block_length
        block_mask_index = x[:, lo:lo + block_length] == mask_id
        num_transfer = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = x == mask_id
            if cfg_scale > 0:
                un_x = x.clone()
                un_x[prompt_index] = mask_id
                x_ = torch.cat([x, un_x], dim=0)
                am = torch.cat([attention_mask, attention_mask], dim=0) if attention_mask is not None else None
                logits = model(x_, am)
                logits, un_logits = torch.chunk(logits, 2, dim=0)
                logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            else:
                logits = model(x, attention_mask)
            if logits_eos_inf:
                logits[:, :, eos_id] = -torch.inf
            x0 = torch.argmax(logits, dim=-1)
            p = F.softmax(logits.double(), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, lo + block_length:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-np.inf, dtype=x0_p.dtype))
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(confidence.shape[0]):
                k = int(num_transfer[j, i])
                # decision margins: argmax gap at committable rows, k-th vs (k+1)-th confidence
                rows = [t for t in range(lo, lo + block_length) if mask_index[j, t]]
                for t in rows:
                    top2 = torch.topk(logits[j, t], 2).values
                    margins.append(float(top2[0] - top2[1]))
                conf = sorted((float(confidence[j, t]) for t in rows), reverse=True)
                if 0 < k < len(conf):
                    margins.append(conf[k - 1] - conf[k])
                _, sel = torch.topk(confidence[j], k=k)
                transfer[j, sel] = True
            x[transfer] = x0[transfer]
    return x


def main():
    d = os.path.join(DATA, "llada", "tiny")
    cfg = ref.load_config(d)
    params = ref.load_params(d)

    def model(tokens, attention_mask):
        with torch.no_grad():
            return ref.forward(params, cfg, tokens, attention_mask)

    g = torch.Generator().manual_seed(7)
    V, mask_id, eos = cfg["vocab_size"], cfg["mask_token_id"], cfg["eos_token_id"]
    cases = []
    specs = [  # name, B, P, gen, block, steps, cfg, eos_inf, left-pad of seq 0
        ("single_one_block", 1, 6, 8, 8, 8, 0.0, False, 0),
        ("single_blocks", 1, 5, 12, 4, 6, 0.0, False, 0),
        ("two_per_step", 1, 7, 16, 8, 4, 0.0, False, 0),
        ("remainder_first", 1, 4, 10, 5, 4, 0.0, False, 0),
        ("batch_left_pad", 2, 6, 8, 4, 4, 0.0, False, 2),
        ("cfg", 1, 5, 8, 4, 4, 1.0, False, 0),
        ("eos_inf", 1, 5, 8, 8, 4, 0.0, True, 0),
    ]
    for name, B, P, G, BL, S, cfg_scale, eos_inf, pad in specs:
        for attempt in range(50):
            prompt = torch.randint(3, V, (B, P), generator=g)
            am = torch.ones(B, P, dtype=torch.long)
            if pad:
                prompt[0, :pad] = eos
                am[0, :pad] = 0
            margins = []
            out = generate(model, prompt, am if pad else None, S, G, BL, cfg_scale, mask_id, eos,
                           eos_inf, margins)
            if min(margins) > 1e-4:
                break
        else:
            raise SystemExit(f"{name}: no case with a safe decision margin")
        print(f"{name}: min margin {min(margins):.2e} (attempt {attempt})")
        cases.append({
            "name": name, "prompt": prompt.tolist(), "attention_mask": am.tolist() if pad else None,
            "gen_length": G, "block_length": BL, "steps": S, "cfg_scale": cfg_scale,
            "logits_eos_inf": eos_inf, "output": out.tolist(),
        })
    os.makedirs(os.path.join(DATA, "sampler"), exist_ok=True)
    with open(os.path.join(DATA, "sampler", "greedy.json"), "w") as f:
        json.dump({"model": "llada/tiny", "temperature": 0, "remasking": "low_confidence",
                   "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
