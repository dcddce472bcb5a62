"""Golden outputs of the published Dream model and sampler for tests/unit/test_dream.c.

The published Dream-v0 remote code (modeling_dream.py: a Qwen2 block with
bidirectional attention; generation_utils.py: diffusion_generate / _sample)
is re-implemented here in NumPy from its algorithm:

  forward   embed -> per layer: RMSNorm, q/k/v projections with biases, RoPE
            (rotate-half, positions = cumsum(attention_mask) - 1 for a padded
            batch), grouped-query attention over every real key (query and key
            both real), o_proj, residual; RMSNorm, down(silu(gate) * up),
            residual -> final RMSNorm -> lm_head. The logits are shifted: the
            token at position t is predicted from position t-1, position 0 from
            itself (logits = cat(logits[:, :1], logits[:, :-1])).
  sampler   timesteps = linspace(1, eps, steps + 1) in float32; per step the
            masked positions' logits give x0 (argmax at temperature 0) and a
            confidence (maskgit_plus: p(x0); topk_margin: top1 - top2;
            entropy: sum p log(p + 1e-10)); the k = int(n_masked * (1 - s/t))
            most confident (all at the last step) are committed.

Written to tests/data/dream/:
  tiny/config.json, tiny/model.safetensors   a random tiny Dream model
  golden.json   shifted logits of a sequence and of a left-padded batch,
                per-token log-probs on a partly masked canvas, and greedy
                generations for maskgit_plus, topk_margin and entropy.
Every greedy case's smallest decision gap (argmax and top-k confidence) is
checked to be far above float rounding, so the ids cannot flip.

Usage: python3 tests/ref/make_dream_goldens.py   (NumPy only)

tests/ref/make_dream_goldens_published.py runs the published code itself (it
needs torch and the published model files); this re-implementation needs
neither and was checked against it: the same schedule, filter order,
confidences and shift.
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "dream")

CFG = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=40, rms_norm_eps=1e-6, rope_theta=10000.0,
           mask_token_id=39, eos_token_id=0, pad_token_id=0, bos_token_id=1,
           max_position_embeddings=64, tie_word_embeddings=False)


def make_weights(rng):
    C, F, V = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"]
    NH, NKV = CFG["num_attention_heads"], CFG["num_key_value_heads"]
    HD = C // NH
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0, (V, C))}
    for i in range(CFG["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.3, (NH * HD, C))
        w[p + "self_attn.q_proj.bias"] = rng.normal(0, 0.3, (NH * HD,))
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.3, (NKV * HD, C))
        w[p + "self_attn.k_proj.bias"] = rng.normal(0, 0.3, (NKV * HD,))
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.3, (NKV * HD, C))
        w[p + "self_attn.v_proj.bias"] = rng.normal(0, 0.3, (NKV * HD,))
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.3, (C, NH * HD))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.3, (F, C))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, 0.3, (F, C))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, 0.3, (C, F))
        w[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, (C,))
        w[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, (C,))
    w["model.norm.weight"] = 1 + rng.normal(0, 0.1, (C,))
    w["lm_head.weight"] = rng.normal(0, 0.5, (V, C))
    return {k: v.astype(np.float32) for k, v in w.items()}


def save_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def config_json():
    c = {"architectures": ["DreamModel"], "model_type": "Dream", "hidden_act": "silu",
         "attention_dropout": 0.0, "rope_scaling": None, "use_sliding_window": False,
         "sliding_window": None, "torch_dtype": "float32"}
    c.update(CFG)
    return c


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward(w, ids, attn=None):
    """Shifted logits (B, T, V) of the published model, in float64."""
    ids = np.asarray(ids)
    B, T = ids.shape
    C, NH, NKV = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    HD, eps = C // NH, CFG["rms_norm_eps"]
    W = {k: v.astype(np.float64) for k, v in w.items()}
    if attn is None:
        attn = np.ones((B, T), dtype=np.int64)
        pos = np.broadcast_to(np.arange(T), (B, T))
    else:  # the published position ids of a padded batch
        pos = np.cumsum(attn, -1) - 1
        pos = np.where(attn == 0, 1, pos)
    allowed = (attn[:, None, :] == 1) & (attn[:, :, None] == 1)  # (B, Tq, Tk)
    inv = 1.0 / (CFG["rope_theta"] ** (np.arange(0, HD, 2) / HD))
    ang = pos[..., None] * inv  # (B, T, HD/2)
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None]

    def rope(x):  # (B, H, T, HD)
        h = HD // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    x = W["model.embed_tokens.weight"][ids]
    for i in range(CFG["num_hidden_layers"]):
        p = "model.layers.%d." % i
        n = rms(x, W[p + "input_layernorm.weight"], eps)
        q = n @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]
        k = n @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]
        v = n @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]
        q = rope(q.reshape(B, T, NH, HD).transpose(0, 2, 1, 3))
        k = rope(k.reshape(B, T, NKV, HD).transpose(0, 2, 1, 3))
        v = v.reshape(B, T, NKV, HD).transpose(0, 2, 1, 3)
        k = np.repeat(k, NH // NKV, axis=1)
        v = np.repeat(v, NH // NKV, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HD)
        # a padding query sees no key: its row is 0 (it only feeds the
        # first real row's shifted logits, which are not compared)
        s = np.where(allowed[:, None], s, -np.inf)
        mx = np.where(allowed[:, None].any(-1, keepdims=True), s.max(-1, keepdims=True), 0)
        a = np.exp(s - mx)
        a = a / np.maximum(a.sum(-1, keepdims=True), 1e-300)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, NH * HD)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        n = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = n @ W[p + "mlp.gate_proj.weight"].T
        u = n @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"], eps)
    logits = x @ W["lm_head.weight"].T
    return np.concatenate([logits[:, :1], logits[:, :-1]], axis=1)


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def linspace_f32(start, end, n):
    """torch.linspace in float32 (ATen: first half up from start, second down from end)."""
    start, end = np.float32(start), np.float32(end)
    step = np.float32((end - start) / np.float32(n - 1))
    return np.array([start + step * np.float32(i) if i < n // 2
                     else end - step * np.float32(n - 1 - i) for i in range(n)], dtype=np.float32)


def sample_tokens_probs(logits, temperature, top_p, top_k):
    """The distribution the published sample_tokens draws from (float64)."""
    z = logits.astype(np.float64)
    if temperature > 0:
        z = z / temperature
    if top_p is not None and top_p < 1:
        order = np.argsort(-z, kind="stable")
        cum = np.cumsum(np.exp(log_softmax(z[order])))
        remove = cum > top_p
        remove[1:] = remove[:-1].copy()
        remove[0] = False
        z[order[remove]] = -np.inf
    if top_k is not None:
        kth = np.sort(z)[::-1][top_k - 1]
        z[z < kth] = -np.inf
    return np.exp(log_softmax(z))


def generate(w, prompt, gen_length, steps, alg, eps):
    """_sample at temperature 0, alg_temp None, batch 1; returns ids and the smallest gap."""
    mask = CFG["mask_token_id"]
    x = np.array([list(prompt) + [mask] * gen_length])
    ts = linspace_f32(1.0, eps, steps + 1)
    gap = np.inf
    for i in range(steps):
        mi = x[0] == mask
        if not mi.any():
            break
        logits = forward(w, x)[0][mi]
        p = np.exp(log_softmax(logits))
        srt = np.sort(p, -1)[:, ::-1]
        gap = min(gap, float((srt[:, 0] - srt[:, 1]).min()))
        x0 = p.argmax(-1)
        if alg == "maskgit_plus":
            conf = srt[:, 0]
        elif alg == "topk_margin":
            conf = srt[:, 0] - srt[:, 1]
        elif alg == "entropy":
            conf = (p * np.log(p + 1e-10)).sum(-1)
        else:
            raise ValueError(alg)
        t, s = ts[i], ts[i + 1]
        nm = np.float32(mi.sum())
        k = int(nm * (np.float32(1) - s / t)) if i < steps - 1 else int(nm)
        full = np.full(x.shape[1], -np.inf)
        full[mi] = conf
        if k > 0:
            order = np.argsort(-full, kind="stable")
            if k < mi.sum():
                gap = min(gap, float(full[order[k - 1]] - full[order[k]]))
            x_ = np.full(x.shape[1], mask)
            x_[mi] = x0
            x[0, order[:k]] = x_[order[:k]]
    return x[0, len(prompt):].tolist(), gap


def main():
    os.makedirs(os.path.join(OUT, "tiny"), exist_ok=True)
    rng = np.random.default_rng(20260523)
    w = make_weights(rng)
    save_safetensors(os.path.join(OUT, "tiny", "model.safetensors"), w)
    with open(os.path.join(OUT, "tiny", "config.json"), "w") as f:
        json.dump(config_json(), f, indent=2)
    w = {k: v.astype(np.float32) for k, v in w.items()}
    V = CFG["vocab_size"]
    gold = {"model": "tiny"}

    seq = rng.integers(2, V - 1, size=10).tolist()
    gold["logits"] = {"tokens": seq, "values": forward(w, [seq])[0].tolist()}

    # a left-padded batch: row 0 padded by 3, row 1 unpadded; the first real
    # row of a padded sequence reads the padding before it and is left out
    rows = [[0, 0, 0] + rng.integers(2, V - 1, size=5).tolist(),
            rng.integers(2, V - 1, size=8).tolist()]
    am = np.array([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8])
    lg = forward(w, rows, am)
    gold["padded"] = {"tokens": rows, "attention_mask": am.tolist(),
                      "compare": [[b, t] for b in range(2) for t in range(8)
                                  if am[b, t] and not (am[b].min() == 0 and t == 3)],
                      "values": lg.reshape(16, V).tolist()}

    # per-token log-probs of the targets at the masked positions of a canvas
    prompt = rng.integers(2, V - 1, size=4).tolist()
    target = rng.integers(2, V - 1, size=8).tolist()
    canvas = prompt + [t if j % 3 == 0 else CFG["mask_token_id"] for j, t in enumerate(target)]
    lp = log_softmax(forward(w, [canvas])[0])
    pos = [4 + j for j in range(8) if j % 3 != 0]
    gold["logp"] = {"canvas": canvas, "positions": pos,
                    "targets": [target[p - 4] for p in pos],
                    "values": [float(lp[p, target[p - 4]]) for p in pos]}

    gens = []
    for alg in ["maskgit_plus", "topk_margin", "entropy"]:
        for (P, G, S, eps) in [(4, 12, 6, 1e-3), (3, 10, 4, 1e-3), (5, 9, 9, 1e-2)]:
            pr = rng.integers(2, V - 1, size=P).tolist()
            ids, gap = generate(w, pr, G, S, alg, eps)
            assert gap > 1e-5, (alg, P, G, S, gap)
            gens.append({"alg": alg, "prompt": pr, "gen_length": G, "steps": S, "eps": eps,
                         "ids": ids, "min_gap": gap})
    gold["generate"] = gens

    # the token filtering of sample_tokens: temperature, top_p, top_k
    dists = []
    for (temp, top_p, top_k) in [(0.7, 0.8, None), (1.0, None, 5), (0.5, 0.9, 8), (0, None, None)]:
        lg = rng.normal(0, 2.0, size=V).astype(np.float32)
        p = sample_tokens_probs(lg, temp, top_p, top_k)
        srt = np.sort(p)[::-1]
        dists.append({"logits": lg.tolist(), "temperature": temp, "top_p": top_p or 1.0,
                      "top_k": top_k or 0, "probs": p.tolist(), "argmax": int(p.argmax()),
                      "margin": float(srt[0] - srt[1]),
                      "neg_entropy": float((p * np.log(p + 1e-10)).sum())})
    gold["token_dist"] = dists
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(gold, f)
    for g in gens:
        print(g["alg"], g["steps"], g["ids"], "gap %.2e" % g["min_gap"])


if __name__ == "__main__":
    main()
