#!/usr/bin/env python3
"""The mismatch where the gradient is (docs/PREREGISTRATION.md; issue 32's step 0).

    python3 notebooks_export/mismatch_windows.py RUN_DIR [RUN_DIR ...] [--window 50]
    python3 notebooks_export/mismatch_windows.py --summary STUDY_DIR [STUDY_DIR ...]
        [--window 50] [--write FILE | --check FILE]
    python3 notebooks_export/mismatch_windows.py --coef RUN_DIR [RUN_DIR ...]
    python3 notebooks_export/mismatch_windows.py --score MODEL[,MODEL ...] --from RUN_DIR
        --step N [--n 64] [--precisions bf16,fp8,nvfp4,int8] [--bin build/dllm-rl]

1. From the logs (RUN/log.h5): per run and per window of --window RL steps, over the
   informative completions only (METHOD section 5's population: a group whose rewards
   differ; the others carry no advantage, so no gradient): their share of the
   completions, the ESS ratio of their sequence weights (per step, then the mean over the
   window's steps), their mean |log w| per token (|log w| / L) and, beside it, that of all
   completions; then per run the slope of the step's informative |log w| / L over the steps
   (least squares, nats per token per 100 steps: regime A's third endpoint). Runs named
   ARM_seed=S (as `dllm-rl sweep` names them) are then averaged per arm, with the
   seed-level standard error (sd / sqrt(n)).
   --summary: one table over studies (each a directory of runs named ARM_seed=S, as
   studies/NAME or runs/NAME): per study and arm whose rollouts differ from the trainer
   (an arm with |log w| = 0 throughout, the reference, is left out), the first and the
   last window's informative ESS ratio and |log w| / L, the change between them and the
   slope, each a mean over the arm's seeds with its seed-level standard error. --write
   FILE replaces the block between <!-- mismatch-windows:begin --> and
   <!-- mismatch-windows:end --> of FILE with it; --check FILE compares (exit 1 when it
   differs).
   --coef: per run the mean coefficient the correction applied (trajectories/coef) over
   its informative completions, then their mean over the runs: the controls' scaled
   learning rate is 1e-4 times it (docs/PREREGISTRATION.md).
2. --score: the mismatch of checkpoints under each rollout precision on fixed
   completions: the first --n informative completions of step N of RUN_DIR (their prompt,
   tokens and commit steps), each scored by `dllm-rl score` with the trajectory estimator
   (the run's likelihood.shrink steps per pass) at fp32 and at each precision; per model
   and precision the mean |l_P - l_fp32| / L over the completions with its standard
   error. The same completions for every model, so the numbers say how the mismatch
   changes between checkpoints (the SFT model and a late one) with the completions held
   fixed. Each completion is scored alone, so a low-precision copy whose activation
   scales span the batch scores it differently from the run's batched l_mu (measured on a
   tiny model: NVFP4 -2.104 alone against -1.941 in its batch of 16; fp32 equal to 1e-6).

Needs h5py and numpy. Prints Markdown. Exit status 2 on a bad directory or log.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import h5py
import numpy as np

import doc_block


def fail(msg):
    print(f"mismatch_windows: {msg}", file=sys.stderr)
    sys.exit(2)


def read_traj(d, names):
    path = os.path.join(d, "log.h5")
    if not os.path.exists(path):
        fail(f"{path}: no log")
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        if "trajectories" not in f:
            fail(f"{path}: no trajectories (log.trajectories was off)")
        t = f["trajectories"]
        for k in names:
            if k not in t:
                fail(f"{path}: no trajectories/{k}")
        r = min(t[k].shape[0] for k in names)
        return {k: t[k][:r] for k in names}


def informative(traj):
    """1 where the completion's group (its step's prompt) has rewards that differ."""
    key = traj["step"].astype(np.int64) * 1_000_003 + traj["group"].astype(np.int64)
    out = np.zeros(len(key), dtype=bool)
    for k in np.unique(key):
        g = key == k
        out[g] = np.ptp(traj["reward"][g]) > 0
    return out


def ess_ratio(log_w):
    w = np.exp(log_w - log_w.max())
    return float(w.sum() ** 2 / (len(w) * (w * w).sum()))


def run_windows(d, window):
    t = read_traj(d, ("step", "group", "reward", "log_w", "completion_len"))
    inf = informative(t)
    ok = np.isfinite(t["log_w"]) & (t["completion_len"] > 0)
    per_tok = np.where(ok, np.abs(t["log_w"]) / np.maximum(t["completion_len"], 1), np.nan)
    steps = np.unique(t["step"])
    # per step: the informative completions' mean |log w| / L and ESS ratio
    st_mm, st_ess = {}, {}
    for s in steps:
        m = (t["step"] == s) & inf & ok
        if m.sum() >= 2:
            st_mm[int(s)] = float(per_tok[m].mean())
            st_ess[int(s)] = ess_ratio(t["log_w"][m])
    rows = []
    last = int(steps.max()) if len(steps) else 0
    for lo in range(1, last + 1, window):
        hi = lo + window - 1
        sel = (t["step"] >= lo) & (t["step"] <= hi)
        ws = [s for s in st_mm if lo <= s <= hi]
        rows.append({"lo": lo, "hi": min(hi, last), "n": int(sel.sum()),
                     "frac_inf": float(inf[sel].mean()) if sel.any() else math.nan,
                     "ess": float(np.mean([st_ess[s] for s in ws])) if ws else math.nan,
                     "mm_inf": float(np.mean([st_mm[s] for s in ws])) if ws else math.nan,
                     "mm_all": float(np.nanmean(per_tok[sel & ok])) if (sel & ok).any() else math.nan})
    xs = sorted(st_mm)
    slope = float(np.polyfit(xs, [st_mm[s] for s in xs], 1)[0] * 100) if len(xs) >= 2 else math.nan
    return rows, slope


def fmt(x, p=4):
    return "" if x is None or not math.isfinite(x) else f"{x:.{p}f}"


def mean_se(xs):
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return ""
    if len(xs) == 1:
        return fmt(xs[0])
    return f"{np.mean(xs):.4f} ± {np.std(xs, ddof=1) / math.sqrt(len(xs)):.4f}"


def windows_report(dirs, window):
    res = {}
    for d in dirs:
        res[os.path.basename(os.path.normpath(d))] = run_windows(d, window)
    print(f"Per run, windows of {window} steps; informative: completions of groups whose rewards "
          "differ; ESS / N and |log w| / L over them (per step, then the window's mean); "
          "slope: of the step's informative |log w| / L, nats per token per 100 steps.")
    print()
    print("| run | steps | completions | informative | ESS / N | abs(log w) / L informative | all | slope |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (rows, slope) in res.items():
        for i, r in enumerate(rows):
            print(f"| {name} | {r['lo']}-{r['hi']} | {r['n']} | {fmt(r['frac_inf'], 3)} | {fmt(r['ess'], 3)} | "
                  f"{fmt(r['mm_inf'])} | {fmt(r['mm_all'])} | {fmt(slope) if i == 0 else ''} |")
    arms = {}
    for name, v in res.items():
        m = re.match(r"(.*)_seed=\d+$", name)
        if m:
            arms.setdefault(m.group(1), []).append(v)
    if not arms:
        return
    print()
    print("Per arm, means over its seeds ± seed-level standard error:")
    print()
    print("| arm | seeds | steps | ESS / N | abs(log w) / L informative | slope |")
    print("|---|---|---|---|---|---|")
    for arm, vs in sorted(arms.items()):
        nw = min(len(rows) for rows, _ in vs)
        for i in range(nw):
            r0 = vs[0][0][i]
            print(f"| {arm} | {len(vs)} | {r0['lo']}-{r0['hi']} | {mean_se([rows[i]['ess'] for rows, _ in vs])} | "
                  f"{mean_se([rows[i]['mm_inf'] for rows, _ in vs])} | "
                  f"{mean_se([s for _, s in vs]) if i == 0 else ''} |")


def coef_report(dirs):
    ms = []
    for d in dirs:
        t = read_traj(d, ("step", "group", "reward", "coef"))
        inf = informative(t)
        if not inf.any():
            fail(f"{d}: no informative completion")
        ms.append(float(t["coef"][inf].mean()))
        print(f"{d}: {int(inf.sum())} informative completions, mean coefficient {ms[-1]:.6f}")
    print(f"mean over the {len(ms)} runs: {np.mean(ms):.6f}")


def summary_table(studies, window):
    out = [f"Windows of {window} steps; informative: completions of groups whose rewards differ "
           "(the gradient's population, METHOD section 5); first and last: the run's first and "
           "last window; change: last minus first, per seed; slope: least squares over every "
           "step, nats per token per 100 steps. Means over the arm's seeds ± seed-level standard "
           "error; arms whose rollouts are the trainer's own (|log w| = 0) left out.",
           "",
           "| study | arm | seeds | steps | ESS / N first | last | abs(log w) / L first | last "
           "| change | slope |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for st in studies:
        if not os.path.isdir(st):
            fail(f"{st}: not a directory")
        arms = {}
        for r in sorted(os.listdir(st)):
            m = re.match(r"(.*)_seed=(\d+)$", r)
            if m and os.path.isdir(os.path.join(st, r)):
                arms.setdefault(m.group(1), []).append((int(m.group(2)), os.path.join(st, r)))
        name = os.path.basename(os.path.normpath(st))
        for arm in sorted(arms):
            res = [run_windows(d, window) for _, d in sorted(arms[arm])]
            if all(not (r["mm_inf"] > 0) for rows, _ in res for r in rows):
                continue
            nw = min(len(rows) for rows, _ in res)
            if nw < 2:
                continue
            first = [rows[0] for rows, _ in res]
            last = [rows[nw - 1] for rows, _ in res]
            change = [b["mm_inf"] - a["mm_inf"] for a, b in zip(first, last)]
            steps = f"{first[0]['lo']}-{first[0]['hi']}, {last[0]['lo']}-{last[0]['hi']}"
            out.append(f"| {name} | {arm} | {len(res)} | {steps} | "
                       f"{mean_se([r['ess'] for r in first])} | {mean_se([r['ess'] for r in last])} | "
                       f"{mean_se([r['mm_inf'] for r in first])} | {mean_se([r['mm_inf'] for r in last])} | "
                       f"{mean_se(change)} | {mean_se([s for _, s in res])} |")
    return "\n".join(out) + "\n"


def score_one(binary, model, prompt, comp, steps, shrink, precision):
    cmd = [binary, "score", "--model", model, "--prompt-ids", ",".join(map(str, prompt)),
           "--completion-ids", ",".join(map(str, comp)), "--estimator", "trajectory",
           "--commit-steps", ",".join(map(str, steps)), "--shrink", str(shrink),
           "--precision", precision]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        fail(f"{' '.join(cmd[:4])} ... --precision {precision}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)["seq_logp"]


def run_shrink(run):
    """likelihood.shrink of the run's effective config (RUN/config.yaml)."""
    path = os.path.join(run, "config.yaml")
    try:
        m = re.search(r"^\s+shrink:\s*(\d+)", open(path).read(), re.M)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if not m:
        fail(f"{path}: no likelihood.shrink")
    return int(m.group(1))


def score_report(models, run, step, n, precisions, binary):
    shrink = run_shrink(run)
    t = read_traj(run, ("step", "group", "reward", "prompt_len", "prompt_tokens", "completion_len",
                        "completion_tokens", "commit_step"))
    inf = informative(t)
    rows = np.flatnonzero((t["step"] == step) & inf & (t["completion_len"] > 0))[:n]
    if len(rows) == 0:
        fail(f"{run}: no informative completion at step {step}")
    fixed = []
    for i in rows:
        pl, cl = int(t["prompt_len"][i]), int(t["completion_len"][i])
        fixed.append((t["prompt_tokens"][i][:pl].tolist(), t["completion_tokens"][i][:cl].tolist(),
                      t["commit_step"][i][:cl].tolist(), cl))
    print(f"{len(fixed)} informative completions of step {step} of {run}, scored with the trajectory "
          f"estimator (shrink {shrink}); mean |l_P - l_fp32| / L ± its standard error over the "
          "completions:")
    print()
    print("| model | " + " | ".join(precisions) + " |")
    print("|---|" + "---|" * len(precisions))
    for m in models:
        ref = [score_one(binary, m, p, c, s, shrink, "fp32") for p, c, s, _ in fixed]
        cells = []
        for prec in precisions:
            d = [abs(score_one(binary, m, p, c, s, shrink, prec) - r) / L
                 for (p, c, s, L), r in zip(fixed, ref)]
            se = np.std(d, ddof=1) / math.sqrt(len(d)) if len(d) > 1 else math.nan
            cells.append(f"{np.mean(d):.4f} ± {fmt(se)}")
        print(f"| {m} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", help="run directories (with log.h5)")
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--coef", action="store_true",
                    help="the mean correction coefficient over informative completions")
    ap.add_argument("--summary", action="store_true",
                    help="one table over study directories (of ARM_seed=S runs)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="FILE", help="with --summary: replace its block in FILE")
    g.add_argument("--check", metavar="FILE", help="with --summary: compare its block in FILE")
    ap.add_argument("--score", help="model directories, comma-separated")
    ap.add_argument("--from", dest="src", help="the run whose completions are scored")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--precisions", default="bf16,fp8,nvfp4,int8")
    ap.add_argument("--bin", default=os.environ.get("DLLM_BIN", "build/dllm-rl"))
    a = ap.parse_args()
    if a.window < 1:
        fail("--window must be at least 1")
    if a.score:
        if not a.src:
            fail("--score needs --from RUN_DIR")
        score_report(a.score.split(","), a.src, a.step, a.n, a.precisions.split(","), a.bin)
        return 0
    if not a.runs:
        fail("no run directory (see --help)")
    if a.coef:
        coef_report(a.runs)
        return 0
    if (a.write or a.check) and not a.summary:
        fail("--write and --check go with --summary")
    if a.summary:
        text = summary_table(a.runs, a.window)
        if a.write or a.check:
            doc_block.sync(a.write or a.check, "mismatch-windows", text, bool(a.check),
                           "mismatch_windows")
        else:
            sys.stdout.write(text)
        return 0
    windows_report(a.runs, a.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
