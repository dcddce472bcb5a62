"""Golden values for tests/unit/test_estimators.c from the published LLaDA
likelihood estimator (get_log_likelihood.py of the LLaDA reference code,
re-implemented step for step in PyTorch) on the tiny reference checkpoint:
the Monte Carlo ELBO with stratified mask counts (mc_num samples in batches),
with its standard error, and the deterministic one-step estimate.

Usage: python3 tests/ref/make_estimator_goldens.py  (writes tests/data/estimators/)
"""
import json
import math
import os

import torch
import torch.nn.functional as F

import llada_ref as ref

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def forward_process(batch, prompt_index, mask_id, g):
    b, l = batch.shape
    target_len = (l - prompt_index.sum()).item()
    k = torch.randint(1, target_len + 1, (), generator=g)
    x = torch.round(torch.linspace(float(k), k + (b - 1) * (target_len / b), steps=b)).long()
    x = ((x - 1) % target_len) + 1
    indices = torch.arange(target_len).repeat(b, 1)
    is_mask = indices < x.unsqueeze(1)
    for i in range(b):
        is_mask[i] = is_mask[i][torch.randperm(target_len, generator=g)]
    is_mask = torch.cat((torch.zeros(b, int(prompt_index.sum()), dtype=torch.bool), is_mask), dim=1)
    noisy = torch.where(is_mask, mask_id, batch)
    return noisy, (x / target_len).unsqueeze(1).repeat(1, l)


def elbo(model, prompt, answer, mc_num, batch_size, mask_id, g):
    seq = torch.cat([prompt, answer])[None, :].repeat(batch_size, 1)
    prompt_index = torch.arange(seq.shape[1]) < len(prompt)
    vals = []
    for _ in range(mc_num // batch_size):
        noisy, p_mask = forward_process(seq, prompt_index, mask_id, g)
        mask_indices = noisy == mask_id
        logits = model(noisy)
        loss = F.cross_entropy(logits[mask_indices].double(), seq[mask_indices], reduction="none") \
            / p_mask[mask_indices]
        # per-sample values, to report the standard error as well as the mean
        per = torch.zeros(batch_size, dtype=torch.float64)
        rows = mask_indices.nonzero()[:, 0]
        per.index_add_(0, rows, loss)
        vals.extend((-per).tolist())
    mean = sum(vals) / len(vals)
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var / len(vals))


def main():
    d = os.path.join(DATA, "llada", "tiny")
    cfg = ref.load_config(d)
    params = ref.load_params(d)

    def model(tokens):
        with torch.no_grad():
            return ref.forward(params, cfg, tokens)

    g = torch.Generator().manual_seed(3)
    mask_id = cfg["mask_token_id"]
    cases = []
    for P, L in [(4, 6), (7, 12)]:
        prompt = torch.randint(3, cfg["vocab_size"], (P,), generator=g)
        answer = torch.randint(3, cfg["vocab_size"], (L,), generator=g)
        mean, se = elbo(model, prompt, answer, 1024, 32, mask_id, g)
        x = torch.cat([prompt, answer])[None, :].clone()
        x[0, P:] = mask_id
        lp = model(x).double().log_softmax(-1)[0, P:].gather(-1, answer[:, None])[:, 0]
        cases.append({"prompt": prompt.tolist(), "completion": answer.tolist(),
                      "elbo_mc1024": mean, "elbo_se": se,
                      "one_step": float(lp.sum()), "one_step_tokens": lp.tolist()})
        print(f"P={P} L={L}: elbo {mean:.4f} +- {se:.4f}, one_step {float(lp.sum()):.4f}")
    os.makedirs(os.path.join(DATA, "estimators"), exist_ok=True)
    with open(os.path.join(DATA, "estimators", "tiny.json"), "w") as f:
        json.dump({"model": "llada/tiny", "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
