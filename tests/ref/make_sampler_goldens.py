"""Golden outputs of the published LLaDA sampler (generate() of the LLaDA
reference code, re-implemented here step for step) for tests/unit/test_sampler.c.

At temperature 0 with low_confidence remasking the sampler is deterministic,
so our C sampler must reproduce these ids exactly. The script also reports the
smallest decision margin (argmax gap and top-k confidence gap) of each case, so
that a case whose outcome could flip on float rounding is never used.

  greedy.json       the tiny reference checkpoint, in PyTorch (llada_ref.py);
                    its model never picks the mask id as x0.
  mask_commit.json  random tiny models (written to tests/data/sampler/rand*/)
                    with the mask id's logit raised by `mask_bias`, so the
                    argmax x0 often is the mask id. The published generate()
                    then writes the mask back: the position stays masked and
                    competes again at later steps and in later blocks, since
                    top-k runs over every masked position before the current
                    block's end; a position can stay masked to the end. This
                    part needs NumPy only (generate_np, forward_np, a plain
                    safetensors reader/writer); generate_np is first checked
                    against greedy.json.

Usage: python3 tests/ref/make_sampler_goldens.py [--mask-only]
       (writes tests/data/sampler/; --mask-only skips the PyTorch part)
"""
import argparse
import json
import math
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def get_num_transfer_tokens(mask_index, steps):
    import torch
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
    import torch
    import torch.nn.functional as F
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
                rows = [t for t in range(lo + block_length) if mask_index[j, t]]
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


def make_greedy():
    try:
        import torch
        import llada_ref as ref
    except ImportError as e:
        raise SystemExit(f"greedy.json needs PyTorch and safetensors ({e}); --mask-only skips it")
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


# ---- NumPy: the model, the published generate(), the mask-commit goldens ------------------------

def st_read(path):
    """{name: float32 array} of a safetensors file holding F32 tensors."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if h["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: only F32 tensors are read here")
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<f4").reshape(h["shape"]).copy()
    return out


def st_write(path, tensors):
    header, off, parts = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors.items():
        raw = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        parts.append(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(parts))


def rms_norm_np(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)))


def rope_np(x, theta):
    T, HD = x.shape[-2], x.shape[-1]
    inv_freq = (1.0 / (theta ** (np.arange(0, HD, 2, dtype=np.float32) / HD))).astype(np.float32)
    ang = np.outer(np.arange(T, dtype=np.float32), inv_freq)
    ang = np.concatenate([ang, ang], axis=-1)
    cos, sin = np.cos(ang), np.sin(ang)
    rot = np.concatenate([-x[..., HD // 2:], x[..., :HD // 2]], axis=-1)
    return x * cos + rot * sin


def forward_np(params, cfg, tokens, keymask=None):
    """The LLaDA forward (llada_ref.forward) in float32 NumPy: logits [B, T, V]."""
    B, T = tokens.shape
    C, NH, NKV = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = params["model.transformer.wte.weight"][tokens]
    bias = np.zeros((B, 1, 1, T), dtype=np.float32)
    if keymask is not None:
        bias[~keymask.astype(bool)[:, None, None, :]] = -np.inf
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        W = lambda n: params[p + n + ".weight"]
        n1 = rms_norm_np(x, W("attn_norm"), eps)
        q = (n1 @ W("q_proj").T).reshape(B, T, NH, HD).transpose(0, 2, 1, 3)
        k = (n1 @ W("k_proj").T).reshape(B, T, NKV, HD).transpose(0, 2, 1, 3)
        v = (n1 @ W("v_proj").T).reshape(B, T, NKV, HD).transpose(0, 2, 1, 3)
        q, k = rope_np(q, theta), rope_np(k, theta)
        if NKV != NH:
            k = np.repeat(k, NH // NKV, axis=1)
            v = np.repeat(v, NH // NKV, axis=1)
        att = (q @ k.transpose(0, 1, 3, 2)) / np.float32(math.sqrt(HD)) + bias
        att = np.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, NH * HD)
        h = x + y @ W("attn_out").T
        n2 = rms_norm_np(h, W("ff_norm"), eps)
        g, u = n2 @ W("ff_proj").T, n2 @ W("up_proj").T
        x = h + ((g / (1 + np.exp(-g))) * u) @ W("ff_out").T
    x = rms_norm_np(x, params["model.transformer.ln_f.weight"], eps)
    return (x @ params["model.transformer.ff_out.weight"].T).astype(np.float32)


def num_transfer_np(block_mask_index, steps):
    mask_num = block_mask_index.sum(axis=1)
    num = np.zeros((len(mask_num), steps), dtype=np.int64) + (mask_num // steps)[:, None]
    for i, r in enumerate(mask_num % steps):
        num[i, :r] += 1
    return num


def generate_np(model, prompt, attention_mask, steps, gen_length, block_length, cfg_scale,
                mask_id, eos_id, logits_eos_inf, margins, stats):
    """The published generate() at temperature 0, low_confidence remasking, in
    NumPy, statement for statement: x0 = argmax over every id, the mask id
    included; confidence -inf at and after the current block's end and at
    unmasked positions; top-k (ties to the lowest index) over the whole canvas.
    stats counts mask commits, positions re-committed in a later block and
    positions still masked at the end."""
    B, P = prompt.shape
    x = np.full((B, P + gen_length), mask_id, dtype=np.int64)
    x[:, :P] = prompt
    if attention_mask is not None:
        attention_mask = np.concatenate(
            [attention_mask, np.ones((B, gen_length), dtype=attention_mask.dtype)], axis=1)
    prompt_index = x != mask_id
    num_blocks = gen_length // block_length
    steps = steps // num_blocks
    mask_block = {}  # (j, t) -> block of its last mask commit
    for nb in range(num_blocks):
        lo = P + nb * block_length
        hi = lo + block_length
        num_transfer = num_transfer_np(x[:, lo:hi] == mask_id, steps)
        for i in range(steps):
            mask_index = x == mask_id
            if cfg_scale > 0:
                un_x = x.copy()
                un_x[prompt_index] = mask_id
                am = None if attention_mask is None else np.concatenate([attention_mask] * 2)
                both = model(np.concatenate([x, un_x]), am)
                logits, un_logits = both[:B], both[B:]
                logits = un_logits + np.float32(cfg_scale + 1) * (logits - un_logits)
            else:
                logits = model(x, attention_mask)
            if logits_eos_inf:
                logits[:, :, eos_id] = -np.inf
            x0 = logits.argmax(-1)
            z = logits.astype(np.float64)
            p = np.exp(z - z.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            x0_p = np.take_along_axis(p, x0[..., None], -1)[..., 0]
            x0_p[:, hi:] = -np.inf
            x0 = np.where(mask_index, x0, x)
            confidence = np.where(mask_index, x0_p, -np.inf)
            transfer = np.zeros_like(mask_index)
            for j in range(B):
                k = int(num_transfer[j, i])
                rows = [t for t in range(hi) if mask_index[j, t]]
                for t in rows:
                    top2 = np.sort(logits[j, t])[-2:]
                    margins.append(float(top2[1] - top2[0]))
                conf = sorted((float(confidence[j, t]) for t in rows), reverse=True)
                if 0 < k < len(conf):
                    margins.append(conf[k - 1] - conf[k])
                sel = np.argsort(-confidence[j], kind="stable")[:k]
                transfer[j, sel] = True
                for t in sel:
                    if x0[j, t] == mask_id:
                        stats["mask_commits"] += 1
                        mask_block[(j, int(t))] = nb
                    elif mask_block.get((j, int(t)), nb) < nb:
                        stats["later_block"] += 1
            x[transfer] = x0[transfer]
    stats["masked_left"] += int((x[:, P:] == mask_id).sum())
    return x


def check_numpy_reference(cfg, params):
    """generate_np must reproduce greedy.json (made by the PyTorch transcription)."""
    with open(os.path.join(DATA, "sampler", "greedy.json")) as f:
        cases = json.load(f)["cases"]
    model = lambda tok, am: forward_np(params, cfg, tok, am)
    for c in cases:
        am = np.array(c["attention_mask"]) if c["attention_mask"] else None
        stats = dict(mask_commits=0, later_block=0, masked_left=0)
        out = generate_np(model, np.array(c["prompt"]), am, c["steps"], c["gen_length"],
                          c["block_length"], c["cfg_scale"], cfg["mask_token_id"],
                          cfg["eos_token_id"], c["logits_eos_inf"], [], stats)
        if out.tolist() != c["output"]:
            raise SystemExit(f"generate_np differs from greedy.json on {c['name']}")
    print(f"generate_np reproduces greedy.json ({len(cases)} cases)")


def random_model(cfg, rng, std):
    """Weights as llada_ref.init_params: matrices N(0, std), norms 1 + N(0, 0.1)."""
    C, L, H, V = cfg["d_model"], cfg["n_layers"], cfg["mlp_hidden_size"], cfg["embedding_size"]
    NH, NKV = cfg["n_heads"], cfg["n_kv_heads"]
    HD = C // NH
    shapes = [("model.transformer.wte.weight", (V, C))]
    for i in range(L):
        p = f"model.transformer.blocks.{i}."
        shapes += [(p + "attn_norm.weight", (C,)), (p + "q_proj.weight", (NH * HD, C)),
                   (p + "k_proj.weight", (NKV * HD, C)), (p + "v_proj.weight", (NKV * HD, C)),
                   (p + "attn_out.weight", (C, NH * HD)), (p + "ff_norm.weight", (C,)),
                   (p + "ff_proj.weight", (H, C)), (p + "up_proj.weight", (H, C)),
                   (p + "ff_out.weight", (C, H))]
    shapes += [("model.transformer.ln_f.weight", (C,)),
               ("model.transformer.ff_out.weight", (V, C))]
    out = {}
    for name, shape in shapes:
        z = rng.standard_normal(shape)
        out[name] = (1.0 + 0.1 * z if len(shape) == 1 else std * z).astype(np.float32)
    return out


def make_mask_commit():
    tiny = os.path.join(DATA, "llada", "tiny")
    with open(os.path.join(tiny, "config.json")) as f:
        cfg = json.load(f)
    check_numpy_reference(cfg, st_read(os.path.join(tiny, "model.safetensors")))
    models = {}
    for name, seed in (("rand1", 11), ("rand2", 12)):
        d = os.path.join(DATA, "sampler", name)
        os.makedirs(d, exist_ok=True)
        params = random_model(cfg, np.random.default_rng(seed), 0.2)
        st_write(os.path.join(d, "model.safetensors"), params)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        models["sampler/" + name] = st_read(os.path.join(d, "model.safetensors"))
    models["llada/tiny"] = st_read(os.path.join(tiny, "model.safetensors"))
    V, mask_id, eos = cfg["vocab_size"], cfg["mask_token_id"], cfg["eos_token_id"]
    rng = np.random.default_rng(5)
    specs = [  # name, model, mask_bias, B, P, gen, block, steps, cfg, eos_inf, left-pad of
        # seq 0, and whether the case must re-commit, in a later block, a position
        # whose x0 was the mask id (else: at least one mask commit)
        ("two_per_step", "sampler/rand1", 1.5, 1, 5, 16, 4, 8, 0.0, False, 0, True),
        ("later_block", "sampler/rand2", 1.0, 1, 5, 16, 4, 8, 0.0, False, 0, True),
        ("tiny_biased", "llada/tiny", 0.5, 1, 5, 16, 4, 8, 0.0, False, 0, True),
        ("one_block", "sampler/rand1", 1.0, 1, 4, 8, 8, 4, 0.0, False, 0, False),
        ("three_blocks", "sampler/rand2", 1.0, 1, 6, 12, 4, 6, 0.0, False, 0, False),
        ("batch_left_pad", "sampler/rand2", 1.0, 2, 6, 12, 4, 6, 0.0, False, 2, False),
        ("cfg", "sampler/rand1", 1.0, 1, 5, 8, 4, 4, 1.0, False, 0, False),
        ("eos_inf", "sampler/rand2", 1.0, 1, 5, 12, 4, 6, 0.0, True, 0, False),
        ("one_per_step", "sampler/rand1", 1.5, 1, 4, 12, 4, 12, 0.0, False, 0, False),
    ]
    cases, total = [], dict(mask_commits=0, later_block=0, masked_left=0)
    for name, mdir, bias, B, P, G, BL, S, cfg_scale, eos_inf, pad, later in specs:
        params = models[mdir]

        def model(tok, am):
            logits = forward_np(params, cfg, tok, am)
            logits[:, :, mask_id] += np.float32(bias)
            return logits

        for attempt in range(400):
            prompt = rng.integers(3, V, (B, P))
            am = np.ones((B, P), dtype=np.int64)
            if pad:
                prompt[0, :pad] = eos
                am[0, :pad] = 0
            margins, stats = [], dict(mask_commits=0, later_block=0, masked_left=0)
            out = generate_np(model, prompt, am if pad else None, S, G, BL, cfg_scale, mask_id, eos,
                              eos_inf, margins, stats)
            if min(margins) > 1e-4 and stats["later_block" if later else "mask_commits"] > 0:
                break
        else:
            raise SystemExit(f"{name}: no case with mask commits and a safe decision margin")
        print(f"{name}: min margin {min(margins):.2e} (attempt {attempt}) {stats}")
        for k in total:
            total[k] += stats[k]
        cases.append({
            "name": name, "model": mdir, "mask_bias": bias, "prompt": prompt.tolist(),
            "attention_mask": am.tolist() if pad else None, "gen_length": G, "block_length": BL,
            "steps": S, "cfg_scale": cfg_scale, "logits_eos_inf": eos_inf,
            "output": out.tolist(), "stats": stats,
        })
    if not all(total.values()):
        raise SystemExit(f"the cases do not exercise every mask-commit path: {total}")
    with open(os.path.join(DATA, "sampler", "mask_commit.json"), "w") as f:
        json.dump({"temperature": 0, "remasking": "low_confidence", "cases": cases}, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mask-only", action="store_true", help="skip greedy.json (needs PyTorch)")
    args = ap.parse_args()
    if not args.mask_only:
        make_greedy()
    make_mask_commit()


if __name__ == "__main__":
    main()
