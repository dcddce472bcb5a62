#!/usr/bin/env python3
"""bench_generate_torch.py: `dllm-rl generate` against the published LLaDA sampler.

Both decode the same prompts with the same weights: a model directory written by
`dllm-rl init-model` (its config.json has the published LLaDA keys, its
model.safetensors the published tensor names), loaded on one side by the published
HF model code (configuration_llada.py / modeling_llada.py) and sampled by the
published generate() (generate.py), both read from --published DIR (not part of
this repository); on the other side by `dllm-rl generate --format ids`. Each arm is
timed as a whole process run from start to exit (model loading included: the
published code's import and load are timed the same way, in a child python), and the
published generate() call is also timed alone (the fairer figure for it: importing
torch and transformers takes seconds the C binary does not spend). The arms are
alternated (A B A B ...) so that both see the same machine load; the medians per arm
and the ratios are printed, with how many generated ids agree (greedy decoding of a
random model: near-ties between logits resolve differently under different fp32
summation orders, so agreement is partial).

The default shapes: 8 prompts of 32 random ids, 128 generated tokens in blocks of
32, 64 denoising steps, greedy (temperature 0), low-confidence remasking, fp32,
2 threads each. --clock cpu counts CPU seconds instead of wall seconds (with --threads
1: per core-second, the robust measure on a shared machine).

    python3 tests/ref/bench_generate_torch.py --published DIR --model MODEL_DIR \\
        --dllm build/dllm-rl --rounds 2

Run it with the python that has torch and transformers; --python (default: this
interpreter) is the one the published arm is started with.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import importlib, json, os, sys, time, types
t0 = time.time()
# the model files import each other relatively: the directory becomes a package of
# its own (its __init__.py, if any, is not run: it may import files not present)
pub = os.path.abspath(sys.argv[1])
pkg = "published_llada"
mod = types.ModuleType(pkg)
mod.__path__ = [pub]
sys.modules[pkg] = mod
import torch
from safetensors.torch import load_file
configuration_llada = importlib.import_module(pkg + ".configuration_llada")
modeling_llada = importlib.import_module(pkg + ".modeling_llada")
generate = importlib.import_module(pkg + ".generate").generate
args = json.loads(sys.argv[2])
torch.set_num_threads(args["threads"])
cfg = configuration_llada.LLaDAConfig.from_json_file(args["model"] + "/config.json")
cfg.use_cache = False  # (this transformers release drops the key on loading)
# LLaDAModelLM would build its inner model on "cuda": build it here on the CPU
mcfg = modeling_llada.create_model_config_from_pretrained_config(cfg)
mcfg.init_device = "cpu"
model = modeling_llada.LLaDAModelLM(cfg, model=modeling_llada.LLaDAModel(mcfg, init_params=False))
sd = load_file(args["model"] + "/model.safetensors")
missing, unexpected = model.load_state_dict(sd, strict=False)
if unexpected or [k for k in missing if "rotary" not in k]:
    sys.exit("state dict mismatch: missing %s, unexpected %s" % (missing, unexpected))
model = model.float().eval()
prompt = torch.tensor(args["prompts"], dtype=torch.long)
clock = time.process_time if args["clock"] == "cpu" else time.time
t1 = clock()
out = generate(model, prompt, steps=args["steps"], gen_length=args["gen"],
               block_length=args["block"], temperature=args["temperature"],
               remasking="low_confidence", mask_id=cfg.mask_token_id)
gen = out[:, prompt.shape[1]:].tolist()
print(json.dumps({"ids": gen, "generate_s": clock() - t1}))
"""


def child_clock(kind):
    """Wall seconds, or the CPU seconds of the finished child processes (--clock cpu)."""
    if kind == "wall":
        return time.time()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_published(py, published, args, prompts, env):
    spec = {"model": args.model, "threads": args.threads, "prompts": prompts,
            "steps": args.steps, "gen": args.gen_length, "block": args.block_length,
            "temperature": args.temperature, "clock": args.clock}
    t0 = child_clock(args.clock)
    res = subprocess.run([py, "-c", CHILD, published, json.dumps(spec)], env=env,
                         capture_output=True, text=True)
    dt = child_clock(args.clock) - t0
    if res.returncode != 0:
        sys.exit("published generate failed:\n" + res.stderr[-3000:])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return dt, out["generate_s"], out["ids"]


def run_dllm(dllm, args, batch_file, env):
    cmd = [dllm, "generate", "--model", args.model, "--batch-file", batch_file,
           "--gen-length", str(args.gen_length), "--block-length", str(args.block_length),
           "--steps", str(args.steps), "--temperature", str(args.temperature),
           "--precision", args.precision, "--format", "ids", "--chat", "plain"]
    t0 = child_clock(args.clock)
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = child_clock(args.clock) - t0
    if res.returncode != 0:
        sys.exit("dllm-rl generate failed:\n" + res.stderr[-3000:])
    ids = [[int(t) for t in line.split(",")] for line in res.stdout.strip().splitlines()]
    return dt, ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--published", required=True,
                    help="directory with generate.py, configuration_llada.py, modeling_llada.py")
    ap.add_argument("--model", required=True, help="model directory (dllm-rl init-model)")
    ap.add_argument("--dllm", required=True, help="the dllm-rl binary")
    ap.add_argument("--python", default=sys.executable, help="python for the published arm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-length", type=int, default=32)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--precision", default="fp32", help="dllm-rl generate --precision")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: CPU seconds of each process (per core-second; use --threads 1)")
    args = ap.parse_args()
    for f in ("generate.py", "configuration_llada.py", "modeling_llada.py"):
        if not os.path.isfile(os.path.join(args.published, f)):
            sys.exit("--published %s: no %s there" % (args.published, f))
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        sys.exit("--model %s: no config.json there" % args.model)
    args.model = os.path.abspath(args.model)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    special = {cfg["mask_token_id"], cfg["eos_token_id"], cfg.get("pad_token_id", 0),
               cfg.get("bos_token_id", 1)}
    rng = random.Random(args.seed)
    prompts = [[rng.choice([t for t in range(3, cfg["vocab_size"]) if t not in special])
                for _ in range(args.prompt_length)] for _ in range(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as bf:
        for p in prompts:
            bf.write(json.dumps({"prompt_ids": p}) + "\n")
        batch_file = bf.name
    times = {"published": [], "generate()": [], "dllm-rl": []}
    try:
        for r in range(args.rounds):
            tp, tg, ids_p = run_published(args.python, args.published, args, prompts, env)
            td, ids_d = run_dllm(args.dllm, args, batch_file, env)
            times["published"].append(tp)
            times["generate()"].append(tg)
            times["dllm-rl"].append(td)
            same = sum(a == b for ra, rb in zip(ids_p, ids_d) for a, b in zip(ra, rb))
            print("round %d: published process %.2f s (generate() alone %.2f s), dllm-rl "
                  "process %.2f s: %.2fx (%.2fx against generate() alone); %d of %d generated "
                  "ids equal" % (r + 1, tp, tg, td, tp / td, tg / td, same,
                                 args.batch * args.gen_length), flush=True)
    finally:
        os.unlink(batch_file)
    mp, md = statistics.median(times["published"]), statistics.median(times["dllm-rl"])
    mg = statistics.median(times["generate()"])
    print("median over %d rounds: published %.2f s (generate() alone %.2f s), dllm-rl "
          "generate --precision %s %.2f s: %.2fx (%.2fx against generate() alone)"
          % (args.rounds, mp, mg, args.precision, md, mp / md, mg / md))


if __name__ == "__main__":
    main()
