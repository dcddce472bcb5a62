"""Goldens of the published Dream-v0 code for tests/unit/test_dream.c.

Runs the published model and sampler themselves (not a re-implementation) on
random tiny Dream models and writes what tests/unit/test_dream.c compares against.

Expects the directory of the published Dream-v0 model code, the Hugging Face
model files of Dream-org/Dream-v0-Instruct-7B (or -Base-7B), which the GitHub
repository DreamLM/Dream does not contain:
    configuration_dream.py   DreamConfig
    modeling_dream.py        DreamModel (its forward(input_ids, attention_mask,
                             position_ids); the copy vendored by the dllm project
                             also accepts a 2-D mask, a path not used here)
    generation_utils.py      DreamGenerationConfig, diffusion_generate / _sample
(tokenization_dream.py is not needed.) The directory is imported as a package,
so the files' relative imports work with or without an __init__.py. Needs
torch and transformers 4.x (4.46, the version Dream-v0 was published with;
transformers 5 no longer has the 'default' RoPE initialiser modeling_dream.py
looks up).

For each model (GQA untied; MQA tied with odd sizes; MHA with another RoPE
theta and RMSNorm eps) it builds DreamModel from DreamConfig with random
weights (std well above the published init's 0.02, so greedy decisions are
not near ties), saves it with save_pretrained (config.json +
model.safetensors, the published tensor names; a tied head has no lm_head
tensor) and records:
  logp       per-token log-probs of the model's logits shifted as the
             generation code shifts them (logits = cat(logits[:, :1],
             logits[:, :-1])) on left-padded batches, with the 4-D attention
             mask and position ids (cumsum(mask) - 1, padding at 1) that
             _sample builds, or "full" and no position ids for a batch without
             padding: clean sequences (every real position whose previous
             position is real), completions fully masked after the prompt
             (score's one_step), and partly revealed completions. The first
             real token of a padded row is predicted from a padding position
             in the published code; it is a prompt token and left out.
  generate   greedy (temperature 0) diffusion_generate for maskgit_plus,
             topk_margin and entropy: batch 1 with several steps/eps settings
             (including more steps than tokens), a left-padded batch of 3,
             and top_p / top_k filtering. No empty prompt: positions 0 and 1
             then share one logit (position 0 is scored from itself), so
             their confidences tie exactly and torch.topk's order decides; the
             first position's shifted logit is compared in logp instead
             (clean sequences without padding include t = 0). origin and alg_temp > 0 are
             stochastic and not recorded. Every case's smallest decision gap
             (the top-2 probabilities of a masked position, and the
             confidences either side of the k-th committed one) is measured
             in the published sampler through its logits hook and must exceed
             GAP, so float rounding cannot flip an id; a prompt that fails is
             redrawn. Each row of a padded batch must keep the same masked
             count at every step (the published code commits the batch
             average; see dllm/dream_sampler.h).
  config_defaults   DreamConfig's defaults that the Dream-v0 checkpoints keep
             (RMSNorm eps, mask and pad ids, untied head, no sliding window
             or RoPE scaling), for the dream-7b preset.

Usage: python tests/ref/make_dream_goldens_published.py DREAM_CODE_DIR [OUT_DIR]
OUT_DIR defaults to tests/data/dream_published.
"""
import importlib
import json
import os
import shutil
import sys
import types

import torch
import torch.nn.functional as F

GAP = 2e-5

MODELS = {
    "gqa": dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                rms_norm_eps=1e-6, tie_word_embeddings=False, mask_token_id=39,
                pad_token_id=0, bos_token_id=1, eos_token_id=0),
    "tied_odd": dict(vocab_size=37, hidden_size=24, intermediate_size=37, num_hidden_layers=3,
                     num_attention_heads=3, num_key_value_heads=1, rope_theta=10000.0,
                     rms_norm_eps=1e-6, tie_word_embeddings=True, mask_token_id=33,
                     pad_token_id=2, bos_token_id=1, eos_token_id=2),
    "mha": dict(vocab_size=45, hidden_size=48, intermediate_size=40, num_hidden_layers=1,
                num_attention_heads=6, num_key_value_heads=6, rope_theta=1000000.0,
                rms_norm_eps=1e-5, tie_word_embeddings=False, mask_token_id=44,
                pad_token_id=0, bos_token_id=1, eos_token_id=0),
}


def load_published(code_dir):
    """Imports DREAM_CODE_DIR as the package dream_published."""
    pkg = types.ModuleType("dream_published")
    pkg.__path__ = [os.path.abspath(code_dir)]
    sys.modules["dream_published"] = pkg
    conf = importlib.import_module("dream_published.configuration_dream")
    model = importlib.import_module("dream_published.modeling_dream")
    gen = importlib.import_module("dream_published.generation_utils")
    return conf, model, gen


def build_model(conf, modeling, spec, seed):
    cfg = conf.DreamConfig(max_position_embeddings=64, **spec)
    m = modeling.DreamModel(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g))
            elif name == "lm_head.weight":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    if spec["tie_word_embeddings"]:
        assert m.lm_head.weight is m.model.embed_tokens.weight
    return m


def save_checkpoint(m, out):
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    m.save_pretrained(tmp, safe_serialization=True)
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(tmp, f), os.path.join(out, f))
    shutil.rmtree(tmp)


def masks_as_sample_builds(am):
    """_sample's attention mask and position ids for a [B, T] 0/1 mask."""
    if not torch.any(am == 0):
        return "full", None
    tok_idx = am.long().cumsum(-1) - 1
    tok_idx.masked_fill_(am == 0, 1)
    att = torch.logical_and(am.unsqueeze(1).unsqueeze(-2), am.unsqueeze(1).unsqueeze(-1))
    return att, tok_idx


@torch.no_grad()
def shifted_logp(m, x, am):
    att, tok_idx = masks_as_sample_builds(am)
    logits = m(x, att, tok_idx).logits
    logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return torch.log_softmax(logits.double(), -1)


def left_pad(rows, pad):
    T = max(len(r) for r in rows)
    x = torch.tensor([[pad] * (T - len(r)) + r for r in rows], dtype=torch.long)
    am = torch.tensor([[0] * (T - len(r)) + [1] * len(r) for r in rows])
    return x, am


def logp_cases(m, spec, rng):
    V, mask, pad = spec["vocab_size"], spec["mask_token_id"], spec["pad_token_id"]

    def draw(n):
        return torch.randint(3, mask, (n,), generator=rng).tolist()

    cases = []
    # clean sequences: every real position whose predecessor is real (or t = 0)
    for lens in ([9], [7, 10, 4], [6, 6]):
        x, am = left_pad([draw(n) for n in lens], pad)
        lp = shifted_logp(m, x, am)
        ent = []
        for b in range(x.shape[0]):
            for t in range(x.shape[1]):
                if am[b, t] and (t == 0 or am[b, t - 1]):
                    ent.append([b, t, int(x[b, t]), float(lp[b, t, x[b, t]])])
        cases.append({"kind": "clean", "tokens": x.tolist(), "attention_mask": am.tolist(),
                      "entries": ent})
    # completions after left-padded prompts, fully masked (one_step) or partly revealed
    for kind, plens, L in (("one_step", [5], 7), ("one_step", [3, 6, 4], 6),
                           ("partial", [4, 2], 8)):
        prompts = [draw(n) for n in plens]
        comps = [draw(L) for _ in plens]
        rows = []
        for b, (p, c) in enumerate(zip(prompts, comps)):
            shown = [c[j] if kind == "partial" and (j + b) % 3 == 0 else mask for j in range(L)]
            rows.append(p + shown)
        x, am = left_pad(rows, pad)
        lp = shifted_logp(m, x, am)
        T = x.shape[1]
        ent = []
        for b in range(x.shape[0]):
            for j in range(L):
                t = T - L + j
                if x[b, t] == mask:
                    ent.append([b, t, comps[b][j], float(lp[b, t, comps[b][j]])])
        cases.append({"kind": kind, "tokens": x.tolist(), "attention_mask": am.tolist(),
                      "completions": comps, "entries": ent})
    return cases


class GapProbe:
    """The logits hook of diffusion_generate: measures the sampler's smallest
    decision gap and the per-row masked counts, without changing the logits."""

    def __init__(self, gen, spec, steps, eps, alg, top_p, top_k, T0):
        self.gen, self.mask, self.alg = gen, spec["mask_token_id"], alg
        self.top_p, self.top_k, self.steps, self.T0 = top_p, top_k, steps, T0
        self.ts = torch.linspace(1, eps, steps + 1)
        self.gap, self.equal_counts = float("inf"), True

    def __call__(self, i, x, logits):
        mi = x == self.mask
        counts = mi[:, self.T0:].sum(-1)
        self.equal_counts &= bool((counts == counts[0]).all())
        z = logits[mi]
        if self.top_p is not None and self.top_p < 1:
            z = self.gen.top_p_logits(z, self.top_p)
        if self.top_k is not None:
            z = self.gen.top_k_logits(z, self.top_k)
        p = torch.softmax(z, -1)
        srt = torch.sort(p, -1, descending=True)[0]
        if srt.shape[-1] > 1 and srt.shape[0] > 0:
            self.gap = min(self.gap, float((srt[:, 0] - srt[:, 1]).min()))
        conf, _ = self.gen.sample_tokens(logits[mi], 0.0, top_p=self.top_p, top_k=self.top_k,
                                         margin_confidence=self.alg == "topk_margin",
                                         neg_entropy=self.alg == "entropy")
        n = mi.sum() / mi.shape[0]
        t, s = self.ts[i], self.ts[i + 1]
        k = int(n * (1 - s / t)) if i < self.steps - 1 else int(n)
        full = torch.full(x.shape, -torch.inf, dtype=logits.dtype)
        full[mi] = conf
        fs = torch.sort(full, -1, descending=True)[0]
        for b in range(x.shape[0]):
            nb = int(mi[b].sum())
            if 0 < k < nb:
                self.gap = min(self.gap, float(fs[b, k - 1] - fs[b, k]))
        return logits


def generate_case(m, gen, spec, prompts, G, steps, eps, alg, top_p, top_k):
    x, am = left_pad(prompts, spec["pad_token_id"])
    probe = GapProbe(gen, spec, steps, eps, alg, top_p, top_k, x.shape[1])
    gc = gen.DreamGenerationConfig(
        mask_token_id=spec["mask_token_id"], pad_token_id=spec["pad_token_id"],
        bos_token_id=spec["bos_token_id"], eos_token_id=spec["eos_token_id"],
        max_new_tokens=G, steps=steps, eps=eps, alg=alg, alg_temp=None, temperature=0.0,
        top_p=top_p, top_k=top_k, return_dict=True, output_history=False)
    kw = {"attention_mask": am} if torch.any(am == 0) else {}
    out = m.diffusion_generate(x, generation_config=gc, generation_logits_hook_func=probe, **kw)
    seq = out.sequences
    assert seq.shape[1] == x.shape[1] + G
    return seq[:, x.shape[1]:].tolist(), probe


def generate_cases(m, gen, spec, rng):
    mask = spec["mask_token_id"]
    # (prompt lengths, gen length, steps, eps, top_p, top_k)
    settings = [([4], 12, 6, 1e-3, None, None), ([3], 10, 4, 1e-3, None, None),
                ([5], 9, 9, 1e-2, None, None), ([3], 6, 10, 1e-3, None, None),
                ([5, 3, 4], 8, 4, 1e-3, None, None), ([4], 8, 4, 1e-3, 0.9, 5)]
    cases = []
    for alg in ("maskgit_plus", "topk_margin", "entropy"):
        for j, (plens, G, S, eps, top_p, top_k) in enumerate(settings):
            for attempt in range(50):
                prompts = [torch.randint(3, mask, (n,), generator=rng).tolist() for n in plens]
                ids, probe = generate_case(m, gen, spec, prompts, G, S, eps, alg, top_p, top_k)
                if probe.gap > GAP and probe.equal_counts:
                    break
            else:
                raise SystemExit("no prompt with a safe decision gap: %s %s" % (alg, plens))
            cases.append({"alg": alg, "setting": j, "prompts": prompts, "gen_length": G, "steps": S,
                          "eps": eps, "top_p": top_p or 1.0, "top_k": top_k or 0,
                          "ids": ids, "min_gap": probe.gap})
    return cases


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    conf, modeling, gen = load_published(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "data", "dream_published")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    # the published defaults a Dream-v0 config.json does not override (the
    # 7B's sizes are its config.json's, not these defaults)
    d = conf.DreamConfig()
    gold = {"config_defaults": {k: getattr(d, k) for k in (
        "rms_norm_eps", "mask_token_id", "pad_token_id", "tie_word_embeddings", "hidden_act",
        "use_sliding_window", "rope_scaling", "attention_dropout")}, "models": []}
    for k, (name, spec) in enumerate(MODELS.items()):
        m = build_model(conf, modeling, spec, 1000 + k)
        save_checkpoint(m, os.path.join(out, name))
        rng = torch.Generator().manual_seed(2000 + k)
        entry = {"name": name, "logp": logp_cases(m, spec, rng),
                 "generate": generate_cases(m, gen, spec, rng)}
        gold["models"].append(entry)
        for g in entry["generate"]:
            print(name, g["alg"], g["steps"], len(g["prompts"]), "gap %.2e" % g["min_gap"])
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(gold, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
