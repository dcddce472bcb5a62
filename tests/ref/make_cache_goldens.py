"""Goldens of the published Fast-dLLM samplers for tests/unit/test_cache.c.

Runs the published functions themselves (not a re-implementation): generate,
generate_with_prefix_cache and generate_with_dual_cache of llada/generate.py,
with and without `threshold`, on random tiny LLaDA models built from the
published llada/model/modeling_llada.py (whose attention keeps the per-layer
key/value cache they use), and writes the ids for tests/unit/test_cache.c to compare
with `dllm-rl generate --cache none|prefix|dual [--threshold T] --temperature 0`.

Expects the root of a checkout of NVlabs/Fast-dLLM (its llada/ directory is
imported: generate.py imports `model.modeling_llada`, so llada/ goes on
sys.path). Needs torch, transformers 4.x (generate.py and the model file
import it; written with 4.46) and einops (the model file imports it).

For each model it builds LLaDAModelLM from LLaDAConfig (block_type llama, RoPE,
RMSNorm, SwiGLU, no biases, untied head) with random weights (std well above
the published init's, so greedy decisions are not near ties), with the mask
id's head row zeroed so its logit (0) never wins the argmax (the published
cached loops index their commit schedule past its end when a drawn mask id
leaves a position masked), and writes config.json (the keys the project reads)
and model.safetensors (the published tensor names). Then, per prompt, every
mode x threshold setting at temperature 0, low_confidence remasking, batch 1
(the published functions take one prompt). Every decision the published
get_transfer_index makes is checked through a wrapper: the top-2 logit gap of
every ranked position, the gap either side of the k-th committed confidence
and every confidence's distance from the threshold must exceed GAP, so float
rounding cannot flip an id; a prompt that fails is redrawn. The summary
records how many cases the cache changes (against generate) and how many steps
commit more than one token under the threshold, so the test is known to
discriminate.

Usage: python tests/ref/make_cache_goldens.py FAST_DLLM_DIR [OUT_DIR]
OUT_DIR defaults to tests/data/cache_published.
"""
import importlib
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

GAP = 1e-4

MODELS = {
    "mha2": dict(d_model=32, n_heads=4, n_layers=2, mlp_hidden_size=48, vocab_size=40,
                 rope_theta=10000.0, mask_token_id=39, eos_token_id=0, pad_token_id=0),
    "mha3": dict(d_model=48, n_heads=6, n_layers=3, mlp_hidden_size=80, vocab_size=53,
                 rope_theta=500000.0, mask_token_id=50, eos_token_id=1, pad_token_id=1),
}

# (gen_length, block_length, steps) x threshold; steps = gen_length: one token per step
SCHEDULES = [(16, 8, 8), (24, 8, 24), (32, 16, 16)]
THRESHOLDS = [None, 0.9, 0.5]
MODES = ["none", "prefix", "dual"]


def load_published(root):
    sys.path.insert(0, os.path.join(os.path.abspath(root), "llada"))
    gen = importlib.import_module("generate")
    modeling = importlib.import_module("model.modeling_llada")
    conf = importlib.import_module("model.configuration_llada")
    return gen, modeling, conf


def build_model(modeling, conf, spec, seed):
    cfg = conf.LLaDAConfig(
        d_model=spec["d_model"], n_heads=spec["n_heads"], n_kv_heads=spec["n_heads"],
        n_layers=spec["n_layers"], mlp_hidden_size=spec["mlp_hidden_size"],
        activation_type="silu", block_type="llama", rope=True, rope_full_precision=True,
        rope_theta=spec["rope_theta"], layer_norm_type="rms", rms_norm_eps=1e-5,
        include_bias=False, include_qkv_bias=False, weight_tying=False,
        attention_dropout=0.0, residual_dropout=0.0, embedding_dropout=0.0,
        vocab_size=spec["vocab_size"], embedding_size=spec["vocab_size"],
        max_sequence_length=128, mask_token_id=spec["mask_token_id"],
        eos_token_id=spec["eos_token_id"], pad_token_id=spec["pad_token_id"],
        flash_attention=False, init_device="cpu")
    m = modeling.LLaDAModelLM(cfg, init_params=False).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("wte.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name == "model.transformer.ff_out.weight":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
                p[spec["mask_token_id"]].zero_()
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return m


def save_checkpoint(m, spec, out):
    os.makedirs(out, exist_ok=True)
    cfg = {
        "activation_type": "silu", "alibi": False, "architectures": ["LLaDAModelLM"],
        "block_type": "llama", "d_model": spec["d_model"], "embedding_size": spec["vocab_size"],
        "eos_token_id": spec["eos_token_id"], "include_bias": False, "layer_norm_type": "rms",
        "mask_token_id": spec["mask_token_id"], "max_sequence_length": 128,
        "mlp_hidden_size": spec["mlp_hidden_size"], "model_type": "llada",
        "n_heads": spec["n_heads"], "n_kv_heads": spec["n_heads"], "n_layers": spec["n_layers"],
        "pad_token_id": spec["pad_token_id"], "rms_norm_eps": 1e-05, "rope": True,
        "rope_theta": spec["rope_theta"], "torch_dtype": "float32",
        "vocab_size": spec["vocab_size"], "weight_tying": False,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"))


class Recorder:
    """Wraps the published get_transfer_index: the smallest decision gap seen and
    the number of steps committing more than one token."""

    def __init__(self, orig, mask_id):
        self.orig, self.mask_id = orig, mask_id
        self.reset()

    def reset(self):
        self.gap, self.parallel, self.mask_drawn = float("inf"), 0, False

    def __call__(self, logits, temperature, remasking, mask_index, x, num_transfer_tokens,
                 threshold=None):
        x0, transfer = self.orig(logits, temperature, remasking, mask_index, x,
                                 num_transfer_tokens, threshold)
        lg = logits[0][mask_index[0]].float()
        if lg.shape[0]:
            top2 = torch.topk(lg, 2, dim=-1).values
            self.gap = min(self.gap, float((top2[:, 0] - top2[:, 1]).min()))
            if bool((lg.argmax(-1) == self.mask_id).any()):
                self.mask_drawn = True
            p = F.softmax(logits[0][mask_index[0]].to(torch.float64), dim=-1)
            conf = torch.sort(p.max(-1).values, descending=True).values
            n = conf.shape[0]
            if threshold is None:
                k = int(num_transfer_tokens[0])
                if 0 < k < n:
                    self.gap = min(self.gap, float(conf[k - 1] - conf[k]))
            else:
                for j in range(1, n):
                    self.gap = min(self.gap, abs(float(conf[j]) - threshold))
                if n > 1 and float(conf[1]) < threshold:
                    self.gap = min(self.gap, float(conf[0] - conf[1]))
        if int(transfer.sum()) > 1 and threshold is not None:
            self.parallel += 1
        return x0, transfer


def run_case(gen, rec, m, prompt, mode, sched, thr, mask_id):
    G, blk, steps = sched
    fn = {"none": gen.generate, "prefix": gen.generate_with_prefix_cache,
          "dual": gen.generate_with_dual_cache}[mode]
    x = torch.tensor([prompt], dtype=torch.long)
    out, nfe = fn(m, x, steps=steps, gen_length=G, block_length=blk, temperature=0.,
                  remasking="low_confidence", mask_id=mask_id, threshold=thr)
    return out[0, len(prompt):].tolist(), nfe


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    gen, modeling, conf = load_published(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "data", "cache_published")
    torch.set_num_threads(1)
    rec = None
    golden = {"source": "NVlabs/Fast-dLLM llada/generate.py (generate, "
                        "generate_with_prefix_cache, generate_with_dual_cache)",
              "gap": GAP, "models": []}
    total = changed = parallel = 0
    for mi, (name, spec) in enumerate(MODELS.items()):
        m = build_model(modeling, conf, spec, 1000 + mi)
        if os.path.isdir(os.path.join(out, name)):
            shutil.rmtree(os.path.join(out, name))
        save_checkpoint(m, spec, os.path.join(out, name))
        mask_id = spec["mask_token_id"]
        rec = Recorder(gen.get_transfer_index, mask_id)
        gen.get_transfer_index = rec
        g = torch.Generator().manual_seed(7 + mi)
        cases = []
        for plen in (5, 9):
            for sched in SCHEDULES:
                for tries in range(200):
                    prompt = torch.randint(2, spec["vocab_size"] - 3, (plen,), generator=g).tolist()
                    prompt = [t for t in prompt if t != mask_id]
                    if len(prompt) != plen:
                        continue
                    ok, rows = True, []
                    for thr in THRESHOLDS:
                        ids = {}
                        for mode in MODES:
                            rec.reset()
                            ids[mode], nfe = run_case(gen, rec, m, prompt, mode, sched, thr,
                                                      mask_id)
                            if rec.gap < GAP or rec.mask_drawn:
                                ok = False
                                break
                            rows.append(dict(mode=mode, threshold=thr or 0, ids=ids[mode],
                                             nfe=nfe, parallel_steps=rec.parallel))
                        if not ok:
                            break
                    if ok:
                        break
                else:
                    sys.exit(f"{name}: no prompt of length {plen} clears the gap {GAP}")
                base = {r["threshold"]: r["ids"] for r in rows if r["mode"] == "none"}
                for r in rows:
                    total += 1
                    changed += r["mode"] != "none" and r["ids"] != base[r["threshold"]]
                    parallel += r["parallel_steps"] > 0
                cases.append(dict(prompt=prompt, gen_length=sched[0], block_length=sched[1],
                                  steps=sched[2], runs=rows))
        golden["models"].append(dict(name=name, cases=cases))
        gen.get_transfer_index = rec.orig
    golden["summary"] = dict(runs=total, cached_runs_differing_from_uncached=changed,
                             runs_with_parallel_commits=parallel)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(json.dumps(golden["summary"]))


if __name__ == "__main__":
    main()
