#!/usr/bin/env python3
"""bench_cpu_goals.py: the CPU speed goals of BENCHMARKS.md measured in one sitting.

Runs, round after round (the arms alternated, so that every arm sees the same load):
  (a) `dllm-rl bench rollout --preset small --precision fp32,bf16,fp8` under each fp32
      GEMM: OpenBLAS as the environment has it (OPENBLAS_CORETYPE pin, if any),
      OpenBLAS unpinned, oneDNN (DLLM_GEMM=dnnl); the bf16 and FP8 steps against the
      fastest fp32 step;
  (b) `dllm-rl bench train --preset small` under the same three, against PyTorch eager
      fp32 at the same shapes (tests/ref/bench_train_torch.py, run by --python);
  (c) with --published DIR: `dllm-rl generate` against the published LLaDA generate()
      (tests/ref/bench_generate_torch.py: 8 prompts x 128 tokens, 64 steps, small
      preset, fp32), dllm-rl on the round's fastest fp32 GEMM arm of (a);
  (d) a roofline line for each: achieved GFLOP/s against the peaks `dllm-rl bench
      gemm` measures here (the register-only FMA / bf16 dot-product loops, and the best
      rate of the library's own GEMM over the model's shapes and square 1024).
Prints every command's result line and, at the end, one summary line per goal with
medians over the rounds.

    python3 tests/ref/bench_cpu_goals.py --dllm build/dllm-rl --python PY \\
        [--published DIR] [--rounds 2] [--threads 2] [--clock wall|cpu]

--clock cpu times by process CPU time (pass --threads 1 with it): per core-second, the
robust measure on a shared machine. PY is a python with torch (and transformers for
(c)); this script itself needs only the standard library.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def fp32_envs():
    """(label, environment changes) of each fp32 GEMM arm."""
    # DLLM_GEMM names each arm's library: the build's default is not assumed (it is
    # oneDNN when configure found it, OpenBLAS otherwise)
    pin = os.environ.get("OPENBLAS_CORETYPE")
    envs = [("openblas" + (" (OPENBLAS_CORETYPE=%s)" % pin if pin else ""), {"DLLM_GEMM": "openblas"})]
    # unpinned, OpenBLAS picks the CPU's own kernels: not under a DLLM_CPU_ISA cap
    capped = os.environ.get("DLLM_CPU_ISA", "native") != "native"
    if pin and not capped:
        envs.append(("openblas (unpinned)", {"DLLM_GEMM": "openblas", "OPENBLAS_CORETYPE": None,
                                             "OPENBLAS_L2_SIZE": None}))
    envs.append(("dnnl", {"DLLM_GEMM": "dnnl"}))
    return envs


def run(cmd, threads, changes=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    for k, v in (changes or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (res.returncode, " ".join(cmd), res.stderr[-3000:]))
    return res.stdout


def gemm_peaks(a, changes):
    """fp32 FMA and bf16 dot peaks, and each path's best rate over the shapes."""
    cmd = [a.dllm, "bench", "gemm", "--preset", "small", "--square", "1024", "--rounds", "2"]
    if a.clock == "cpu":
        cmd += ["--clock", "cpu"]
    out = run(cmd, a.threads, changes)
    m = re.search(r"fp32 FMA ([\d.]+) GFLOP/s, bf16 dot ([\d.]+)", out)
    best = [0.0] * 5
    for line in out.splitlines():
        tok = line.split()
        if len(tok) >= 8 and not line.startswith(("GFLOP/s", "bench", "peak")):
            for i, t in enumerate(tok[-5:]):
                if t != "-":
                    best[i] = max(best[i], float(t))
    names = ("fp32 openblas", "fp32 dnnl", "bf16", "fp8 fast", "fp8 exact")
    return float(m.group(1)), float(m.group(2)), dict(zip(names, best))


def rollout(a, changes):
    cmd = [a.dllm, "bench", "rollout", "--preset", "small", "--precision", "fp32,bf16,fp8",
           "--steps", "8", "--iters", "2", "--warmup", "1"]
    if a.clock == "cpu":
        cmd += ["--clock", "cpu"]
    res = {}
    for line in run(cmd, a.threads, changes).splitlines():
        tok = line.split()
        # precision sync_s rollout_s step_ms tokens/s vs_first [nfe] GFLOP/s
        if tok and tok[0] in ("fp32", "bf16", "fp8") and len(tok) in (7, 8):
            res[tok[0]] = (float(tok[3]), float(tok[-1]))  # step ms, GFLOP/s
    return res


def train_dllm(a, changes):
    cmd = [a.dllm, "bench", "train", "--preset", "small", "--iters", str(a.train_iters),
           "--warmup", "1"]
    if a.clock == "cpu":
        cmd += ["--clock", "cpu"]
    m = re.search(r"([\d.]+) s per forward\+backward, [\d.]+ tokens/s, ([\d.]+) GFLOP/s",
                  run(cmd, a.threads, changes))
    return float(m.group(1)), float(m.group(2))


def train_torch(a):
    cmd = [a.python, os.path.join(HERE, "bench_train_torch.py"), "--threads", str(a.threads),
           "--iters", str(a.train_iters), "--clock", a.clock]
    m = re.search(r"([\d.]+) s per forward\+backward", run(cmd, a.threads))
    return float(m.group(1))


def generate(a, model, changes):
    cmd = [a.python, os.path.join(HERE, "bench_generate_torch.py"), "--published", a.published,
           "--model", model, "--dllm", a.dllm, "--rounds", "1", "--threads", str(a.threads),
           "--clock", a.clock]
    out = run(cmd, a.threads, changes)
    m = re.search(r"published ([\d.]+) s \(generate\(\) alone ([\d.]+) s\), dllm-rl generate "
                  r"--precision \S+ ([\d.]+) s", out)
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def generate_gflop(model):
    """Model FLOPs of the generate run (8 x (32 + 128) tokens, 64 steps, blocks of 32):
    every step the layers over the whole canvas, but the last layer's o_proj and MLP,
    and the head, on the block's masked rows alone (estimated as bench rollout does)."""
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    B, P, G, blk, steps = 8, 32, 128, 32, 64
    C, NH, NKV, H = c["d_model"], c["n_heads"], c["n_kv_heads"], c["mlp_hidden_size"]
    HD = C // NH
    QD, KD, T = NH * HD, NKV * HD, P + G
    plin = 2 * C * QD + 2 * C * KD + 3 * C * H
    spb = steps / (G / blk)
    hr = B * blk * (spb + 1) / (2 * spb)
    step = c["n_layers"] * (2 * B * T * plin + 4 * B * T * T * QD) + \
        2 * hr * C * c["embedding_size"] - 2 * (B * T - hr) * (C * QD + 3 * C * H)
    return steps * step / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dllm", required=True, help="the dllm-rl binary")
    ap.add_argument("--python", help="python with torch, for (b) and (c) (else skipped)")
    ap.add_argument("--published", help="the published LLaDA code's directory, for (c)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--train-iters", type=int, default=3)
    a = ap.parse_args()
    a.dllm = os.path.abspath(a.dllm)
    envs = fp32_envs()
    print("bench_cpu_goals: %d rounds, %d threads, %s clock; fp32 arms: %s"
          % (a.rounds, a.threads, a.clock, ", ".join(e[0] for e in envs)), flush=True)
    peaks = {}
    for label, ch in envs:
        peaks[label] = gemm_peaks(a, ch)
        pf, pb, best = peaks[label]
        print("peaks [%s]: fp32 FMA %.1f, bf16 dot %.1f GFLOP/s; best GEMM rates: %s"
              % (label, pf, pb, ", ".join("%s %.1f" % kv for kv in best.items())), flush=True)
    model = None
    tmp = tempfile.TemporaryDirectory()
    if a.published and a.python:
        model = os.path.join(tmp.name, "small")
        run([a.dllm, "init-model", "--arch", "llada", "--preset", "small", "--out", model], 1)
    ro = {label: {p: [] for p in ("fp32", "bf16", "fp8")} for label, _ in envs}
    tr = {label: [] for label, _ in envs}
    tt, gen = [], []
    for r in range(a.rounds):
        for label, ch in envs:
            res = rollout(a, ch)
            for p, (ms, gf) in res.items():
                ro[label][p].append((ms, gf))
            print("round %d rollout [%s]: %s" % (r + 1, label, ", ".join(
                "%s %.1f ms/step (%.1f GFLOP/s)" % (p, ms, gf) for p, (ms, gf) in res.items())),
                flush=True)
        for label, ch in envs:
            s, gf = train_dllm(a, ch)
            tr[label].append((s, gf))
            print("round %d train [%s]: %.3f s/step (%.1f GFLOP/s)" % (r + 1, label, s, gf),
                  flush=True)
        if a.python:
            s = train_torch(a)
            tt.append(s)
            print("round %d train [pytorch eager]: %.3f s/step" % (r + 1, s), flush=True)
        if model:
            # dllm-rl on this round's fastest fp32 GEMM (the published code runs on
            # PyTorch's own BLAS whatever the OpenBLAS and oneDNN settings)
            glabel, gch = min(envs, key=lambda e: ro[e[0]]["fp32"][-1][0])
            g = generate(a, model, gch)
            gen.append(g + (glabel,))
            print("round %d generate [%s]: published %.2f s (generate() alone %.2f s), dllm-rl "
                  "%.2f s" % ((r + 1, glabel) + g), flush=True)
    med = statistics.median
    print("---- summary (medians over %d rounds) ----" % a.rounds)
    # (a)
    f32 = {label: med(x[0] for x in ro[label]["fp32"]) for label, _ in envs}
    fast = min(f32, key=f32.get)
    for p in ("bf16", "fp8"):
        best_label = min(envs, key=lambda e: med(x[0] for x in ro[e[0]][p]))[0]
        ms = med(x[0] for x in ro[best_label][p])
        print("(a) rollout %s: %.1f ms/step [%s] vs fastest fp32 %.1f ms/step [%s]: %.2fx "
              "(goal 1.6x: %s)" % (p, ms, best_label, f32[fast], fast, f32[fast] / ms,
                                   "met" if f32[fast] / ms >= 1.6 else "not met"))
    # (b)
    tr_med = {label: med(x[0] for x in tr[label]) for label, _ in envs}
    tfast = min(tr_med, key=tr_med.get)
    if tt:
        print("(b) train: dllm-rl %.3f s/step [%s] vs PyTorch eager %.3f s/step: %.2fx (goal "
              "1.5x: %s); per arm: %s" % (tr_med[tfast], tfast, med(tt), med(tt) / tr_med[tfast],
                                        "met" if med(tt) / tr_med[tfast] >= 1.5 else "not met",
                                        ", ".join("%s %.2fx" % (k, med(tt) / v)
                                                  for k, v in tr_med.items())))
    # (c)
    if gen:
        gp, gg, gd = (med(g[i] for g in gen) for i in range(3))
        print("(c) generate [%s]: dllm-rl %.2f s vs published %.2f s (its generate() alone %.2f s): "
              "%.2fx (%.2fx against generate() alone; goal 2x: %s)"
              % ("/".join(sorted(set(g[3] for g in gen))), gd, gp, gg, gp / gd, gg / gd,
                 "met" if gg / gd >= 2 else "not met"))
    # (d)
    for label, _ in envs:
        pf, pb, best = peaks[label]
        lib = "fp32 dnnl" if label == "dnnl" else "fp32 openblas"
        for p in ("fp32", "bf16", "fp8"):
            gf = med(x[1] for x in ro[label][p])
            pk, col = (pf, lib) if p == "fp32" else (pb, "bf16" if p == "bf16" else "fp8 fast")
            if not pk or not best.get(col):
                print("(d) rollout %s [%s]: %.1f GFLOP/s (no %s peak here: its product is absent)"
                      % (p, label, gf, "bf16 dot" if p != "fp32" else "fp32 FMA"))
                continue
            print("(d) rollout %s [%s]: %.1f GFLOP/s = %.0f%% of the %s peak %.1f, %.0f%% of "
                  "the best %s GEMM %.1f" % (p, label, gf, 100 * gf / pk,
                                           "fp32 FMA" if p == "fp32" else "bf16 dot", pk,
                                           100 * gf / best[col], col, best[col]))
        gf = med(x[1] for x in tr[label])
        print("(d) train [%s]: %.1f GFLOP/s = %.0f%% of the fp32 FMA peak %.1f, %.0f%% of the "
              "best %s GEMM %.1f" % (label, gf, 100 * gf / pf, pf, 100 * gf / best[lib], lib,
                                     best[lib]))
    if gen:
        glabel = gen[-1][3]
        pf, pb, best = peaks[glabel]
        lib = "fp32 dnnl" if glabel == "dnnl" else "fp32 openblas"
        gfl = generate_gflop(model)
        gd = med(g[2] for g in gen)
        print("(d) generate [%s]: %.1f GFLOP in %.2f s (process, loading included) = %.1f "
              "GFLOP/s, %.0f%% of the fp32 FMA peak %.1f, %.0f%% of the best %s GEMM %.1f"
              % (glabel, gfl, gd, gfl / gd, 100 * gfl / gd / pf, pf,
                 100 * gfl / gd / best[lib], lib, best[lib]))
    tmp.cleanup()


if __name__ == "__main__":
    main()
