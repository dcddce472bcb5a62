#!/usr/bin/env python3
"""make_qwen3_goldens.py: writes the Qwen3 fixtures of tests/unit/test_qwen3.c into
tests/data/qwen3/, computed by Hugging Face transformers' own
Qwen3ForCausalLM (an implementation independent of dllm/qwen3.c).

Two tiny random models (hidden 32, 2 layers, 4 heads, 2 KV heads, head_dim 8,
intermediate 48, vocab 50, rope_theta 1000, rms_norm_eps 1e-5, EOS id 7):

    tied/         tie_word_embeddings true; config.json as transformers writes
                  it (rope_parameters, dtype keys), model.safetensors fp32
                  without lm_head.weight
    untied/       tie_word_embeddings false; config.json rewritten with the
                  published Qwen3 key layout (top-level rope_theta,
                  torch_dtype), model.safetensors fp32
    untied_bf16/  the untied weights rounded to bf16, saved by transformers
                  in two shards + index
    golden.safetensors, with <v> = tied | untied:

    tokens, keymask [B,T] I32   a left-padded batch (B=3, T=10)
    pos [B,T] I32               position ids: index among the real tokens (0 at pads),
                                as generate() derives them from the attention mask
    <v>.logits [B,T,V]          HF logits (rows at padding are not compared)
    rows, targets [R] I32       next-token rows (b*T+t, both t and t+1 real) and targets
    <v>.loss [1]                mean next-token cross-entropy over those rows
    <v>.grad.<name>             d loss / d parameter (torch autograd), every tensor
    untied.logits_bf16 [B,T,V]  fp32 forward of the bf16-rounded weights
    lp_prompt [P], lp_completion [L] I32, lp_temperature [1] F32
    <v>.token_logp [L] F64      log softmax(logits(P+i-1) / temperature)[completion[i]]
    gen_prompts, gen_mask [GB,GP] I32   left-padded prompts for greedy decoding
    <v>.gen_ids [GB,GN] I32     generate(do_sample=False, max_new_tokens=GN), padded
                                after EOS with EOS
    <v>.gen_margin [1]          smallest top-1 minus top-2 logit along the greedy paths
    dist_logits [K,V] F32, dist_temp, dist_top_p [K] F32, dist_probs [K,V] F64
                                the sampling distribution of transformers'
                                TemperatureLogitsWarper + TopPLogitsWarper + softmax

Run from the repository root: python3 tests/ref/make_qwen3_goldens.py
(needs torch, transformers, safetensors).
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "qwen3")
V, EOS = 50, 7
B, T = 3, 10
GN = 8


def make_config(tied):
    return Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       max_position_embeddings=64, rope_theta=1000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=tied, bos_token_id=None, eos_token_id=EOS,
                       pad_token_id=None, attn_implementation="eager")


def make_model(tied, seed):
    torch.manual_seed(seed)
    m = Qwen3ForCausalLM(make_config(tied)).float().eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.ndim == 1:  # norm weights away from 1 so their gradients matter
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:  # large enough that attention and the logits are far from flat
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    if tied:
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    return m


def positions(mask):
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 0)


def make_batch(gen):
    tokens = torch.randint(0, V, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    for b, npad in enumerate([0, 3, 6]):
        mask[b, :npad] = 0
        tokens[b, :npad] = 0
    return tokens, mask


def next_token_rows(tokens, mask):
    rows, targets = [], []
    for b in range(B):
        for t in range(T - 1):
            if mask[b, t] and mask[b, t + 1]:
                rows.append(b * T + t)
                targets.append(int(tokens[b, t + 1]))
    return torch.tensor(rows), torch.tensor(targets)


def forward_logits(m, tokens, mask):
    return m(input_ids=tokens, attention_mask=mask, position_ids=positions(mask)).logits


def greedy(m, prompts, pmask):
    """HF generate, greedy; also the smallest top-1/top-2 margin on the path."""
    with torch.no_grad():
        out = m.generate(input_ids=prompts, attention_mask=pmask, do_sample=False,
                         max_new_tokens=GN, eos_token_id=EOS, pad_token_id=EOS,
                         output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[:, prompts.shape[1]:]
    if ids.shape[1] < GN:  # every sequence stopped early
        ids = torch.cat([ids, torch.full((ids.shape[0], GN - ids.shape[1]), EOS)], 1)
    margin = float("inf")
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for step, sc in enumerate(out.scores):
        top = sc.topk(2, dim=-1).values
        for b in range(ids.shape[0]):
            if not done[b]:
                margin = min(margin, float(top[b, 0] - top[b, 1]))
        done |= ids[:, step] == EOS
    return ids, margin


def sampling_dists(gen):
    """HF's own warpers on a few logit rows; cases away from the nucleus edge."""
    temps = [1.0, 0.7, 1.3, 0.5, 1.0]
    tops = [1.0, 0.9, 0.5, 0.95, 0.3]
    logits = 2.0 * torch.randn(len(temps), V, generator=gen)
    probs = []
    for i, (t, p) in enumerate(zip(temps, tops)):
        z = logits[i:i + 1].double()
        z = TemperatureLogitsWarper(t)(None, z)
        if p < 1.0:
            z = TopPLogitsWarper(p)(None, z)
            # the nucleus edge must not be a near-tie for the float rule
            sp = torch.softmax(logits[i].double() / t, -1).sort(descending=True).values
            cum = sp.cumsum(0)
            assert (cum - p).abs().min() > 1e-6
        probs.append(torch.softmax(z, -1)[0])
    return logits, torch.tensor(temps), torch.tensor(tops), torch.stack(probs)


def write_model(m, path, published_keys):
    if os.path.isdir(path):
        shutil.rmtree(path)
    m.save_pretrained(path, safe_serialization=True)
    gc = os.path.join(path, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    if published_keys:  # the layout of the published Qwen3 configs
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]
        cfg["torch_dtype"] = cfg.pop("dtype")
        cfg.pop("layer_types", None)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    tokens, mask = make_batch(gen)
    rows, targets = next_token_rows(tokens, mask)
    lp_prompt = torch.tensor([3, 17, 42, 5])
    lp_completion = torch.tensor([11, 29, 0, 48, 7])
    lp_temp = 0.7
    gen_prompts = torch.tensor([[12, 30, 4, 44, 9, 21], [0, 0, 33, 2, 18, 40],
                                [0, 0, 0, 0, 25, 14]])
    gen_mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])

    g = {"tokens": tokens.int(), "keymask": mask.int(), "pos": positions(mask).int(),
         "rows": rows.int(), "targets": targets.int(),
         "lp_prompt": lp_prompt.int(), "lp_completion": lp_completion.int(),
         "lp_temperature": torch.tensor([lp_temp]),
         "gen_prompts": gen_prompts.int(), "gen_mask": gen_mask.int()}
    dl, dt, dp, dpr = sampling_dists(gen)
    g.update({"dist_logits": dl.float(), "dist_temp": dt.float(), "dist_top_p": dp.float(),
              "dist_probs": dpr.double()})
    for tied, seed in ((True, 1), (False, 2)):
        v = "tied" if tied else "untied"
        m = make_model(tied, seed)
        write_model(m, os.path.join(OUT, v), published_keys=not tied)

        # logits, loss and every gradient
        m.zero_grad()
        logits = forward_logits(m, tokens, mask)
        flat = logits.reshape(B * T, V)
        loss = torch.nn.functional.cross_entropy(flat[rows], targets)
        loss.backward()
        g[v + ".logits"] = logits.detach().float().contiguous()
        g[v + ".loss"] = loss.detach().reshape(1)
        for name, p in m.named_parameters():
            g[v + ".grad." + name] = p.grad.detach().clone().contiguous()
        assert all(torch.isfinite(t).all() for k, t in g.items() if k.startswith(v))

        # exact sequence log-probs of a completion (unpadded, one sequence)
        with torch.no_grad():
            seq = torch.cat([lp_prompt, lp_completion]).reshape(1, -1)
            lg = m(input_ids=seq).logits[0].double()
            P, L = len(lp_prompt), len(lp_completion)
            lsm = torch.log_softmax(lg[P - 1:P + L - 1] / lp_temp, dim=-1)
            g[v + ".token_logp"] = lsm[torch.arange(L), lp_completion].contiguous()

        # greedy decoding with a KV cache, as generate() does it
        ids, margin = greedy(m, gen_prompts, gen_mask)
        print(f"{v}: loss {loss.item():.6f}, logits max |x| {logits.abs().max().item():.3f}, "
              f"greedy ids {ids.tolist()}, min margin {margin:.4g}")
        assert margin > 1e-3, "greedy path too close to a tie; change the seed"
        g[v + ".gen_ids"] = ids.int().contiguous()
        g[v + ".gen_margin"] = torch.tensor([margin])

        if not tied:  # the same weights through bf16, sharded by transformers
            # the reference: an fp32 model holding the bf16-rounded parameters
            # (not model.to(bfloat16).float(), which would round the RoPE
            # inverse frequencies too)
            mr = make_model(tied, seed)
            with torch.no_grad():
                for p in mr.parameters():
                    p.copy_(p.bfloat16().float())
                g["untied.logits_bf16"] = forward_logits(mr, tokens, mask).contiguous()
            mb = make_model(tied, seed).to(torch.bfloat16)
            path = os.path.join(OUT, "untied_bf16")
            if os.path.isdir(path):
                shutil.rmtree(path)
            mb.save_pretrained(path, safe_serialization=True, max_shard_size="24KB")
            gc = os.path.join(path, "generation_config.json")
            if os.path.exists(gc):
                os.remove(gc)
            print("bf16 shards:", sorted(os.listdir(path)))

    save_file({k: t.contiguous() for k, t in g.items()}, os.path.join(OUT, "golden.safetensors"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
