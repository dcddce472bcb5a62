#!/usr/bin/env python3
"""The tables of docs/CACHE.md's RL study, from a sweep directory alone (RUN/log.h5 of
every run of configs/sweeps/cache-rl.yaml).

    python3 notebooks_export/cache_tables.py runs/cache-rl [--reference fp8-ais] [--window 20]

Runs are named ARM_seed=S (as `dllm-rl sweep` names them). Prints Markdown:

1. per arm: the held-out accuracy after the last step and its gain over the same run's
   step-0 evaluation (the SFT model, the same items), each as the mean over seeds with the
   seed-level standard error (sd over seeds / sqrt(seeds)); the difference to the
   reference arm of the same seed, likewise; the seconds of rollout and of the whole
   step summed over the run (t_rollout, and the t_* parts of every step), and each over
   the same seed's reference's;
2. per arm and window of --window steps: the two parts of the mismatch per completion
   (mean |log w_prec| = |l_pi - l_mu_exact| and mean |log w_cache| = |l_mu_exact - l_mu|,
   from the trajectories), the total's ESS ratio and alpha;
3. per arm: the gain over the SFT model at each evaluation step (mean over seeds, with the
   seed-level standard error).

A sweep run with `eval.every: 0` (a timing sitting) has no evaluations: its accuracy
cells are "-" and the last table is left out.

Needs h5py and numpy. A run whose log cannot be opened (still being written) is left out,
named on stderr. Exit status 2 on a bad directory or a run without its log.
"""
import argparse
import glob
import math
import os
import re
import sys

import h5py
import numpy as np

STEP_TIMES = ("t_rollout", "t_likelihood", "t_correction", "t_update", "t_sync", "t_log")


def fail(msg):
    print(f"cache_tables: {msg}", file=sys.stderr)
    sys.exit(2)


def mean_se(xs):
    xs = np.asarray(xs, dtype=float)
    if xs.size == 0:
        return math.nan, math.nan
    se = xs.std(ddof=1) / math.sqrt(xs.size) if xs.size > 1 else math.nan
    return float(xs.mean()), float(se)


def fmt(m, se, digits=3):
    if math.isnan(m):
        return "-"
    return f"{m:.{digits}f}" + ("" if math.isnan(se) else f" +- {se:.{digits}f}")


def load(path):
    with h5py.File(os.path.join(path, "log.h5"), "r") as f:
        ev = f["eval"] if "eval" in f else {}
        task = sorted(ev)[0] if len(ev) else None
        steps = f["steps/step"][:]
        run = {
            "eval_step": ev[task]["step"][:] if task else np.zeros(0),
            "acc": ev[task]["accuracy"][:] if task else np.zeros(0),
            "n_steps": int(steps.size),
            "t_rollout": float(np.sum(f["steps/t_rollout"][:])),
            "t_step": float(sum(np.sum(f["steps/" + k][:]) for k in STEP_TIMES if "steps/" + k in f)),
            "alpha": f["steps/alpha"][:],
            "ess": f["steps/rho_ess"][:],
        }
        tr = f["trajectories"]
        run["tr_step"] = tr["step"][:]
        l_pi, l_mu, l_ex = tr["l_pi"][:], tr["l_mu"][:], tr["l_mu_exact"][:]
        run["w_prec"] = np.abs(l_pi - l_ex)
        run["w_cache"] = np.abs(l_ex - l_mu)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep_dir")
    ap.add_argument("--reference", default="fp8-ais")
    ap.add_argument("--window", type=int, default=20)
    a = ap.parse_args()
    runs = {}
    for d in sorted(glob.glob(os.path.join(a.sweep_dir, "*_seed=*"))):
        m = re.fullmatch(r"(.+)_seed=(\d+)", os.path.basename(d))
        if not m or not os.path.isdir(d):
            continue
        if not os.path.exists(os.path.join(d, "log.h5")):
            fail(f"{d}: no log.h5")
        try:
            run = load(d)
        except OSError as e:  # a run still writing its log
            print(f"cache_tables: {d} left out: {e}", file=sys.stderr)
            continue
        runs.setdefault(m.group(1), {})[int(m.group(2))] = run
    if not runs:
        fail(f"{a.sweep_dir}: no runs named ARM_seed=S")
    ref = runs.get(a.reference, {})

    print("| arm | seeds | accuracy (last step) | RL - SFT (same run) | arm - reference (same seed) "
          "| rollout s per run | step s per run | rollout s / reference's | step s / reference's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm, by_seed in runs.items():
        acc = [r["acc"][-1] for r in by_seed.values() if r["acc"].size]
        gain = [r["acc"][-1] - r["acc"][0] for r in by_seed.values() if r["acc"].size]
        vs = [r["acc"][-1] - ref[s]["acc"][-1] for s, r in by_seed.items()
              if s in ref and arm != a.reference and r["acc"].size and ref[s]["acc"].size]
        tro = [r["t_rollout"] for r in by_seed.values()]
        tst = [r["t_step"] for r in by_seed.values()]
        paired = [(r, ref[s]) for s, r in by_seed.items() if s in ref and arm != a.reference]
        rel_ro = [r["t_rollout"] / q["t_rollout"] for r, q in paired]
        rel = [r["t_step"] / q["t_step"] for r, q in paired]
        print(f"| {arm} | {len(by_seed)} | {fmt(*mean_se(acc))} | {fmt(*mean_se(gain))} "
              f"| {fmt(*mean_se(vs)) if vs else '-'} | {fmt(*mean_se(tro), 0)} | {fmt(*mean_se(tst), 0)} "
              f"| {fmt(*mean_se(rel_ro), 2) if rel_ro else '-'} | {fmt(*mean_se(rel), 2) if rel else '-'} |")

    print()
    print(f"| arm | steps | mean \\|log w_prec\\| | mean \\|log w_cache\\| | ESS ratio | alpha |")
    print("|---|---|---|---|---|---|")
    for arm, by_seed in runs.items():
        n = min(r["n_steps"] for r in by_seed.values())
        for lo in range(1, n + 1, a.window):
            hi = min(lo + a.window - 1, n)
            wp, wc, ess, al = [], [], [], []
            for r in by_seed.values():
                sel = (r["tr_step"] >= lo) & (r["tr_step"] <= hi)
                wp.append(r["w_prec"][sel].mean())
                wc.append(r["w_cache"][sel].mean())
                ess.append(np.nanmean(r["ess"][lo - 1:hi]))
                al.append(np.mean(r["alpha"][lo - 1:hi]))
            print(f"| {arm} | {lo}-{hi} | {fmt(*mean_se(wp), 4)} | {fmt(*mean_se(wc), 4)} "
                  f"| {fmt(*mean_se(ess))} | {fmt(*mean_se(al))} |")

    steps = next(iter(next(iter(runs.values())).values()))["eval_step"]
    if steps.size == 0:
        return
    print()
    print("| arm | " + " | ".join(f"step {int(t)}" for t in steps[1:]) + " |")
    print("|---|" + "---|" * (len(steps) - 1))
    for arm, by_seed in runs.items():
        cells = []
        for j in range(1, len(steps)):
            g = [r["acc"][j] - r["acc"][0] for r in by_seed.values() if r["acc"].size > j]
            cells.append(fmt(*mean_se(g)))
        print(f"| {arm} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
