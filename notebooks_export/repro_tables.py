#!/usr/bin/env python3
"""The tables of docs/REPRODUCTION.md that the sweep summary does not hold, from a sweep
directory alone (RUN/log.h5 and RUN/eval/TASK-step-N.txt of every run).

    python3 notebooks_export/repro_tables.py runs/repro [--reference reference] [--window 10]

Runs are named ARM_seed=S (as `dllm-rl sweep` names them). Prints Markdown:

1. per arm, early (the first --window steps) and late (the last --window steps) means over
   its runs: the mismatch per token (mean |log w| / L over completions; delta, the mean |d|
   per scored token), the ESS ratio, alpha, the reward of the training batches and the
   mean commit probability of the sampled tokens; then how concentrated the rollout
   policy is: the completions' negative log-likelihood under the trainer, the distinct
   completions per group, the share of groups with equal rewards (no gradient), and the
   share of tokens committed with probability below 0.9 with their share of the mismatch;
2. per arm, the final evaluation paired with the same run's step-0 evaluation (the SFT
   model) and with the reference arm's of the same seed (the same eval items): the mean
   difference over all paired items of all seeds, with the standard error of the per-item
   differences, and the count of items solved only by the arm or only by the reference;
3. per arm, the held-out accuracy at every evaluation step (mean over its seeds), and each
   other arm's paired difference to the reference at that step, as in 2.

Needs h5py, numpy and pyyaml. Runs that have not logged every step of their config are
left out (and named). Exit status 2 on a bad directory or a run without its log.
"""
import argparse
import csv
import glob
import math
import os
import re
import sys

import h5py
import numpy as np
import yaml


def fail(msg):
    print(f"repro_tables: {msg}", file=sys.stderr)
    sys.exit(2)


def read_run(d):
    path = os.path.join(d, "log.h5")
    if not os.path.exists(path):
        fail(f"{path}: no log")
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        steps = {k: f["steps"][k][:] for k in ("step", "rho_ess", "alpha", "delta", "reward_mean")}
        n = min(len(v) for v in steps.values())
        steps = {k: v[:n] for k, v in steps.items()}
        t = f["trajectories"]
        names = ("step", "group", "log_w", "l_pi", "reward", "completion_len", "commit_prob",
                 "completion_tokens", "token_log_ratio")
        r = min(t[k].shape[0] for k in names)
        traj = {"step": t["step"][:r], "group": t["group"][:r], "log_w": t["log_w"][:r],
                "l_pi": t["l_pi"][:r], "reward": t["reward"][:r],
                "len": t["completion_len"][:r], "commit_prob": t["commit_prob"][:r],
                "tokens": t["completion_tokens"][:r], "d": t["token_log_ratio"][:r]}
    evals = {}
    for p in glob.glob(os.path.join(d, "eval", "*-step-*.txt")):
        m = re.search(r"-step-(\d+)\.txt$", p)
        with open(p) as fh:
            lines = [x.strip() for x in fh if x.strip() and not x.startswith("#")]
        evals[int(m.group(1))] = np.array([int(x) for x in lines])
    return steps, traj, evals


def target_steps(d):
    """grpo.steps of the run's effective config (RUN/config.yaml)."""
    path = os.path.join(d, "config.yaml")
    try:
        with open(path) as fh:
            cfg = yaml.safe_load(fh)
        return int(cfg["grpo"]["steps"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as e:
        fail(f"{path}: no grpo.steps ({e})")


def paired(parts):
    """Mean +- standard error of the per-item differences pooled over seeds."""
    if not parts:
        return ""
    d = np.concatenate(parts)
    se = d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return f"{d.mean():+.3f} +- {se:.3f}"


UNSURE = 0.9  # commit probability below which a token counts as one the policy is unsure of


def window_means(steps, traj, lo, hi):
    """Means over RL steps lo..hi (inclusive) of one run."""
    sel = (steps["step"] >= lo) & (steps["step"] <= hi)
    ts = (traj["step"] >= lo) & (traj["step"] <= hi)
    lw, ln = traj["log_w"][ts], traj["len"][ts]
    ok = np.isfinite(lw) & (ln > 0)
    cp = traj["commit_prob"][ts]
    # commit probabilities of the completion tokens up to each row's length
    mask = np.arange(cp.shape[1])[None, :] < ln[:, None]
    cpv = cp[mask]
    cpv = cpv[np.isfinite(cpv)]
    nanmean = lambda v: float(np.nanmean(v)) if np.isfinite(v).any() else math.nan
    # per group (a prompt's completions in one step): distinct completions, and whether
    # every reward is the same (no advantage, no gradient)
    distinct, flat = [], []
    keys = np.stack([traj["step"][ts], traj["group"][ts]], axis=1)
    toks, rew = traj["tokens"][ts], traj["reward"][ts]
    for k in np.unique(keys, axis=0):
        g = np.all(keys == k, axis=1)
        distinct.append(len({row.tobytes() for row in toks[g]}))
        flat.append(float(np.ptp(rew[g]) == 0))
    nll = -traj["l_pi"][ts]
    # the tokens the policy is unsure of (committed with probability below 0.9): their
    # share of the scored tokens, and their share of the summed |d|
    d = np.abs(traj["d"][ts][:, :cp.shape[1]])
    scored = mask & np.isfinite(d) & np.isfinite(cp)
    unsure = scored & (cp < UNSURE)
    dsum = d[scored].sum()
    return {
        "lw_tok": float(np.mean(np.abs(lw[ok]) / ln[ok])) if ok.any() else math.nan,
        "delta": nanmean(steps["delta"][sel]),
        "rho_ess": nanmean(steps["rho_ess"][sel]),
        "alpha": nanmean(steps["alpha"][sel]),
        "reward": nanmean(steps["reward_mean"][sel]),
        "commit_prob": float(np.mean(cpv)) if cpv.size else math.nan,
        "distinct": float(np.mean(distinct)) if distinct else math.nan,
        "nll": nanmean(nll) if nll.size else math.nan,
        "flat": float(np.mean(flat)) if flat else math.nan,
        "unsure": float(unsure.sum() / scored.sum()) if scored.any() else math.nan,
        "unsure_d": float(d[unsure].sum() / dsum) if dsum > 0 else math.nan,
    }


def fmt(v, digits=3):
    if v is None or not np.isfinite(v):
        return ""
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e4):
        return f"{v:.2e}"
    return f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_dir")
    ap.add_argument("--reference", default="reference", help="the arm others are paired with")
    ap.add_argument("--window", type=int, default=10, help="steps in the early and late windows")
    a = ap.parse_args()
    if not os.path.isdir(a.sweep_dir):
        fail(f"{a.sweep_dir}: not a directory")
    runs, skipped = {}, []
    for d in sorted(glob.glob(os.path.join(a.sweep_dir, "*_seed=*"))):
        m = re.match(r"(.+)_seed=(\d+)$", os.path.basename(d))
        if not m or not os.path.exists(os.path.join(d, "log.h5")):
            continue
        run = read_run(d)
        # finished runs only: every step of the config logged (runs still going are left out)
        if len(run[0]["step"]) < target_steps(d):
            skipped.append(os.path.basename(d))
            continue
        runs.setdefault(m.group(1), {})[int(m.group(2))] = run
    if skipped:
        print(f"Left out (not finished): {', '.join(skipped)}.\n")
    if not runs:
        fail(f"{a.sweep_dir}: no finished ARM_seed=S runs")
    # the sweep file's order (summary.csv lists the runs in it), as the docs' tables are;
    # the reference first, arms summary.csv does not list after the others
    order = []
    summary = os.path.join(a.sweep_dir, "summary.csv")
    if os.path.isfile(summary):
        with open(summary, newline="") as fh:
            order = list(dict.fromkeys(r.get("arm", "") for r in csv.DictReader(fh)))
    rank = {arm: i for i, arm in enumerate(order)}
    arms = sorted(runs, key=lambda x: (x != a.reference, rank.get(x, len(rank)),
                                       x.split("-")[0], x))

    windows = {}
    for arm in arms:
        early, late, nsteps = [], [], []
        for s, (steps, traj, _) in sorted(runs[arm].items()):
            last = int(steps["step"].max()) if len(steps["step"]) else 0
            nsteps.append(last)
            early.append(window_means(steps, traj, 1, a.window))
            late.append(window_means(steps, traj, last - a.window + 1, last))
        windows[arm] = (early, late, nsteps)

    def table(keys, heads, digits):
        print("| arm | seeds | steps | " + " | ".join(f"{h} early | late" for h in heads) + " |")
        print("|---|---|---|" + "---|---|" * len(heads))
        for arm in arms:
            early, late, nsteps = windows[arm]
            cells = []
            for k in keys:
                e, l = ([x[k] for x in w] for w in (early, late))
                mean = lambda v: np.nanmean(v) if any(np.isfinite(x) for x in v) else math.nan
                cells += [fmt(mean(e), digits.get(k, 3)), fmt(mean(l), digits.get(k, 3))]
            print(f"| {arm} | {len(early)} | {min(nsteps)} | " + " | ".join(cells) + " |")

    print(f"Early: steps 1-{a.window}; late: the last {a.window} steps of each run. "
          "Means over the arm's seeds.\n")
    table(["lw_tok", "delta", "rho_ess", "alpha", "reward", "commit_prob"],
          ["abs(log w) / L", "delta", "ESS / N", "alpha", "reward", "commit prob"],
          {"lw_tok": 4, "delta": 4})
    print("\nConcentration of the rollout policy, same windows: the completions' negative "
          "log-likelihood under the trainer (-l_pi, nats per completion), distinct "
          "completions per group, the share of groups whose rewards are all equal (no "
          "advantage, so no gradient), and the share of scored tokens committed with "
          f"probability below {UNSURE} with their share of the summed abs(d) (the per-token "
          "log-ratio).\n")
    table(["nll", "distinct", "flat", "unsure", "unsure_d"],
          ["-l_pi", "distinct / group", "flat groups", "unsure tokens", "their share of abs(d)"],
          {"nll": 2, "distinct": 2, "unsure": 4})

    ref = runs.get(a.reference)
    if not ref:
        return
    print(f"\nFinal evaluation paired with `{a.reference}` of the same seed (the same items): "
          "mean difference over all paired items, standard error of the per-item "
          "differences, items solved only by the arm / only by the reference.\n")
    print("| arm | seeds | step 0 (SFT) | final accuracy | change since step 0 | "
          "difference to reference | only arm / only reference |")
    print("|---|---|---|---|---|---|---|")
    for arm in arms:
        diffs, accs, starts, changes, only_a, only_r, seeds = [], [], [], [], 0, 0, 0
        for s, (_, _, ev) in sorted(runs[arm].items()):
            if s not in ref or not ev or not ref[s][2]:
                continue
            step = max(ev)
            if step not in ref[s][2] or len(ref[s][2][step]) != len(ev[step]):
                continue
            x, y = ev[step], ref[s][2][step]
            diffs.append(x - y)
            accs.append(x.mean())
            if 0 in ev and len(ev[0]) == len(x):
                starts.append(ev[0].mean())
                changes.append(x - ev[0])
            only_a += int(((x == 1) & (y == 0)).sum())
            only_r += int(((x == 0) & (y == 1)).sum())
            seeds += 1
        if not seeds:
            continue
        start = f"{np.mean(starts):.3f}" if starts else ""
        print(f"| {arm} | {seeds} | {start} | {np.mean(accs):.3f} | {paired(changes)} | "
              f"{paired(diffs)} | {only_a} / {only_r} |")

    curves(runs, arms, a.reference)


def curves(runs, arms, reference):
    """Table 3: accuracy at each evaluation step, and the paired difference to the
    reference of the same seed at that step."""
    evals = {arm: {s: r[2] for s, r in runs[arm].items()} for arm in arms}
    steps = sorted({t for arm in arms for ev in evals[arm].values() for t in ev})
    if not steps:
        return
    ref = evals.get(reference, {})
    print("\nHeld-out accuracy at each evaluation (mean over the arm's seeds), and the "
          f"paired difference to `{reference}` of the same seed (mean over all paired "
          "items, standard error of the per-item differences).\n")
    print("| arm | seeds | " + " | ".join(f"step {t}" for t in steps) + " |")
    print("|---|---|" + "---|" * len(steps))
    for arm in arms:
        ev = evals[arm]
        cells = []
        for t in steps:
            acc = [e[t].mean() for e in ev.values() if t in e]
            cells.append(f"{np.mean(acc):.3f}" if len(acc) == len(ev) else "")
        print(f"| {arm} | {len(ev)} | " + " | ".join(cells) + " |")
    for arm in arms:
        if arm == reference or not ref:
            continue
        cells, seeds = [], set()
        for t in steps:
            parts = []
            for s, e in evals[arm].items():
                r = ref.get(s, {})
                if t in e and t in r and len(e[t]) == len(r[t]):
                    parts.append(e[t] - r[t])
                    seeds.add(s)
            cells.append(paired(parts) if t > 0 else "")
        if seeds:
            print(f"| {arm} - {reference} | {len(seeds)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
