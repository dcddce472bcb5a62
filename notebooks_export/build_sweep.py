#!/usr/bin/env python3
"""Writes sweep.ipynb (unexecuted): the notebook over a sweep directory.

A sweep directory is what `dllm-rl sweep` writes: LOG_DIR/NAME/RUN/log.h5 per run,
plus summary.csv and summary.md. The cells are kept here as plain strings so
changes review as code; render_sweep.py builds, executes and exports the notebook
in one command (see README.md).

    python3 notebooks_export/build_sweep.py [--about TEXT] [--out FILE]
"""
import argparse
import inspect
import os
import re

import nbformat as nbf

HERE = os.path.dirname(os.path.abspath(__file__))

# Every figure the notebook saves (FIG_DIR/NAME.png); render_sweep.py and the CI
# check read this list, so a figure added here is checked there too.
FIGURES = ("final_accuracy", "train_curves", "eval_curves", "ais_scores", "token_log_ratio",
           "mismatch_by_step")

DEFAULT_ABOUT = ("Set `SWEEP_DIR` to a sweep directory (`LOG_DIR/NAME`) before running it; "
                 "`render_sweep.py` does this and records here which sweep it executed on.")


# A run's arm (its group). The notebook carries this function's source, and
# render_sweep.py checks --arms with it: one definition of what an arm is.
def group_of(run):
    # the run name without its seed: `ARM_key=v_seed=N` -> `ARM_key=v`
    g = re.sub(r"(^|_)seed=[^_]*", "", run).strip("_")
    return g or "(all)"


def cells(about):
    out = []

    def md(s):
        out.append(nbf.v4.new_markdown_cell(s.strip()))

    def code(s):
        out.append(nbf.v4.new_code_cell(s.strip()))

    md(r"""
# Sweep analysis

One table and a few figures over a `dllm-rl sweep` directory: per run `RUN/log.h5` (read
with h5py in SWMR read mode, so a sweep still running can be read), and the sweep's
`summary.csv`. Runs that differ only by their seed form one group (the arm, and any other
grid key); curves are the group's mean over seeds with a band of one standard error of
that mean (sample sd / sqrt(n) over the seeds that reached the step; no band with one
seed). A metric a run did not log is left out with a note saying so.

""" + about)

    code(r"""
import io, json, math, os, re, warnings
import h5py
import numpy as np
import matplotlib
matplotlib.use("Agg")  # figures are saved and shown as PNG bytes, never twice
import matplotlib.pyplot as plt
import matplotlib.ticker
from IPython.display import Image, Markdown, display
try:
    import pandas as pd
except ImportError:
    pd = None
try:
    import yaml
except ImportError:
    yaml = None
try:
    from PIL import Image as PILImage
except ImportError:
    PILImage = None

SWEEP_DIR = os.environ.get("SWEEP_DIR", ".")
FIG_DIR = os.environ.get("FIG_DIR")        # where the PNG figures go (none: only shown)
# the arms to draw, comma-separated (none: every arm); a sweep of many arms reads better
# drawn in parts (repro-late: the reference with the NVFP4 arms, then with the FP8 ones)
ARMS = [a.strip() for a in os.environ.get("SWEEP_ARMS", "").split(",") if a.strip()]
DPI = 80
NOTES = []                                 # (kind, text): kind "absent" for a missing metric

def note(text, kind="absent"):
    NOTES.append((kind, text))
    print(f"note: {text}")

def save(fig, name):
    # PNG at a small palette: the same bytes are shown here and written to FIG_DIR
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    if PILImage is not None:
        im = PILImage.open(io.BytesIO(data)).convert("RGB").quantize(colors=96)
        buf = io.BytesIO()
        im.save(buf, format="PNG", optimize=True)
        data = buf.getvalue()
    if FIG_DIR:
        os.makedirs(FIG_DIR, exist_ok=True)
        with open(os.path.join(FIG_DIR, name + ".png"), "wb") as fh:
            fh.write(data)
    display(Image(data=data))

def open_log(path):
    try:
        return h5py.File(path, "r", libver="latest", swmr=True)
    except OSError:
        return h5py.File(path, "r")  # a log not written in SWMR mode

""" + inspect.getsource(group_of) + r"""
runs, no_log = {}, []
for name in sorted(os.listdir(SWEEP_DIR)):
    p = os.path.join(SWEEP_DIR, name, "log.h5")
    if ARMS and group_of(name) not in ARMS:
        continue
    if not os.path.isfile(p):
        if os.path.isfile(os.path.join(SWEEP_DIR, name, "train.log")):
            no_log.append(name)  # started, or failed before its log
        continue
    try:
        f = open_log(p)
    except OSError as e:
        note(f"{name}: log.h5 cannot be opened yet ({e.__class__.__name__})", "info")
        continue
    seed = f.attrs.get("seed", "")
    runs[name] = {"f": f, "group": group_of(name), "seed": seed,
                  "dir": os.path.join(SWEEP_DIR, name)}
if ARMS:
    present = {group_of(n) for n in os.listdir(SWEEP_DIR)
               if os.path.isdir(os.path.join(SWEEP_DIR, n))}
    unknown = [a for a in ARMS if a not in present]
    if unknown:
        raise SystemExit(f"SWEEP_ARMS: no run of arm {', '.join(unknown)} under "
                         f"SWEEP_DIR={SWEEP_DIR} (the arms there: {', '.join(sorted(present))})")
if not runs:
    raise SystemExit(f"no RUN/log.h5 under SWEEP_DIR={SWEEP_DIR}: is it a sweep directory "
                     "(LOG_DIR/NAME of `dllm-rl sweep`)?")

# summary.csv rows in the sweep file's order give the group order; else by name
summary_path = os.path.join(SWEEP_DIR, "summary.csv")
order = []
if os.path.isfile(summary_path):
    import csv
    with open(summary_path, newline="") as fh:
        for row in csv.DictReader(fh):
            r = row.get("run", "")
            if r in runs and runs[r]["group"] not in order:
                order.append(runs[r]["group"])
groups = order + sorted({r["group"] for r in runs.values()} - set(order))
members = {g: [n for n in runs if runs[n]["group"] == g] for g in groups}
# the default cycle has 10 colours; past 10 groups it would repeat one, so a larger
# sweep (repro-late has 11 arms) takes the 20-colour map instead
palette = ([f"C{i}" for i in range(10)] if len(groups) <= 10
           else [matplotlib.colormaps["tab20"](i % 20) for i in range(len(groups))])
color = {g: palette[i] for i, g in enumerate(groups)}

def complete_rows(group):
    # rows every dataset of the group has: a writer between two writes can leave
    # some datasets one row longer
    ds = [d for d in group.values() if isinstance(d, h5py.Dataset)]
    return min((d.shape[0] for d in ds), default=0)

for r in runs.values():
    f = r["f"]
    n = complete_rows(f["steps"]) if "steps" in f else 0
    r["steps"] = {k: d[:n] for k, d in f["steps"].items()} if n else {}
    r["n_steps"] = n
    if n == 0:
        note(f"{os.path.basename(r['dir'])}: no complete step logged yet", "info")
    r["eval"] = {}
    for task, g in (f["eval"].items() if "eval" in f else ()):
        m = complete_rows(g)
        if m:
            r["eval"][task] = {k: d[:m] for k, d in g.items()}

print(f"sweep directory: {os.path.basename(os.path.normpath(SWEEP_DIR))}; "
      f"{len(runs)} runs in {len(groups)} groups")
for g in groups:
    parts = [f"{n} (seed {runs[n]['seed']}, {runs[n]['n_steps']} steps, "
             f"{sum(len(e['step']) for e in runs[n]['eval'].values())} evals)" for n in members[g]]
    print(f"  {g}: " + "; ".join(parts))
if no_log:
    print(f"  without a log (starting, or failed before writing one): {', '.join(no_log)}")
""")

    md(r"""
## What differs between the runs

The keys of the runs' effective configs (`RUN/config.yaml`) that are not the same in every
run (the run's name and log directory left out).
""")

    code(r"""
def flat(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out

cfgs = {}
if yaml is None:
    note("pyyaml is not installed: the configs are not compared", "info")
for n in runs:
    p = os.path.join(runs[n]["dir"], "config.yaml")
    if yaml is not None and os.path.isfile(p):
        with open(p) as fh:
            cfgs[n] = flat(yaml.safe_load(fh))
keys = sorted({k for c in cfgs.values() for k in c} - {"experiment", "log.dir"})
diff = [k for k in keys if len({repr(c.get(k)) for c in cfgs.values()}) > 1]
if not cfgs:
    note("no RUN/config.yaml found: the configs are not compared", "info")
elif not diff:
    print("every run has the same config")
elif pd is not None:
    display(pd.DataFrame({k: [cfgs[n].get(k) for n in cfgs] for k in diff}, index=list(cfgs)))
else:
    for n in cfgs:
        print(n, {k: cfgs[n].get(k) for k in diff})
""")

    md(r"""
## The summary table (`summary.csv`)

Written by `dllm-rl sweep` when the sweep ends (or at any time by `dllm-rl sweep
SWEEP.yaml --summary`): one row per run, then per arm the mean and its standard error
over the arm's done runs. The figure below it is recomputed from the logs themselves (the
last evaluation of each run), so it is current on a running sweep.
""")

    code(r"""
if not os.path.isfile(summary_path):
    note("summary.csv is absent (the sweep has not finished, or ran elsewhere): "
         "run `dllm-rl sweep SWEEP.yaml --summary` to write it", "info")
else:
    newest = max(os.path.getmtime(os.path.join(r["dir"], "log.h5")) for r in runs.values())
    if os.path.getmtime(summary_path) < newest:
        note("summary.csv is older than some run logs (a sweep still running?): "
             "`dllm-rl sweep SWEEP.yaml --summary` rewrites it", "info")
    if pd is not None:
        # as written (strings: blank stays blank); numbers only for the per-arm cells
        table = pd.read_csv(summary_path, dtype=str, keep_default_na=False)
        per_run = table[~table["run"].str.match(r"^(mean|se):")]
        pd.set_option("display.width", 200)
        display(per_run.set_index("run"))
        num = lambda df: df.apply(lambda c: pd.to_numeric(c, errors="coerce")
                                  if c.name not in ("run", "arm", "status") else c)
        means = num(table[table["run"].str.startswith("mean:")]).set_index("arm")
        ses = num(table[table["run"].str.startswith("se:")]).set_index("arm")
        cols = [c for c in ("final_accuracy", "best_accuracy", "mean_alpha", "mean_rho_ess",
                            "mean_abs_log_w", "seconds") if c in means]
        fmt = lambda m, s: ("" if pd.isna(m) else f"{m:.4g}" + ("" if pd.isna(s) else f" ± {s:.2g}"))
        per_arm = pd.DataFrame({c: [fmt(means.at[a, c], ses.at[a, c]) for a in means.index]
                                for c in cols}, index=means.index)
        per_arm.insert(0, "runs done", [means.at[a, "status"] for a in means.index])
        if "collapse_step" in means:
            per_arm.insert(1, "collapsed", [f"{c:.0f}" for c in means["collapse_step"]])
        display(Markdown("**Per arm** (mean ± standard error over its done runs):"))
        display(per_arm)
    else:
        with open(summary_path) as fh:
            print(fh.read())
""")

    code(r"""
tasks = sorted({t for r in runs.values() for t in r["eval"]})
fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(groups) + 2), 3.2))
any_eval = False
for i, g in enumerate(groups):
    # the first task's last evaluation of each run
    finals = [runs[n]["eval"][tasks[0]]["accuracy"][-1] for n in members[g]
              if tasks and tasks[0] in runs[n]["eval"]]
    if not finals:
        continue
    any_eval = True
    finals = np.array(finals)
    ax.plot(np.full(finals.size, i) + np.linspace(-0.08, 0.08, finals.size), finals, "o",
            color=color[g], alpha=0.5, ms=4)
    se = finals.std(ddof=1) / math.sqrt(finals.size) if finals.size > 1 else 0.0
    ax.errorbar(i + 0.22, finals.mean(), yerr=se, fmt="s", color=color[g], capsize=4)
if not any_eval:
    note("no run has an evaluation (`eval.every` 0?): no final accuracy")
    ax.text(0.5, 0.5, "no evaluations logged", ha="center", transform=ax.transAxes)
ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right")
ax.set_ylabel(f"{tasks[0]} accuracy, last eval" if tasks else "accuracy, last eval")
ax.set_title("per run (dots) and group mean ± se (squares)")
ax.grid(alpha=0.3)
save(fig, "final_accuracy")
""")

    md(r"""
## Reward and accuracy of the training batches

`/steps/reward_mean` and `/steps/accuracy`: the mean reward and the fraction right of each
step's rollouts (the sampled completions the update learns from, at the rollout
precision).
""")

    code(r"""
def band(ax, pairs, g, label=True, yerr_single=None):
    # pairs: [(x, y)] per seed; mean and se over the seeds that have each x
    pairs = [(np.asarray(x), np.asarray(y, dtype=float)) for x, y in pairs if len(x)]
    if not pairs:
        return False
    xs = np.unique(np.concatenate([x for x, _ in pairs]))
    Y = np.full((len(pairs), xs.size), np.nan)
    for i, (x, y) in enumerate(pairs):
        Y[i, np.searchsorted(xs, x)] = y
    k = np.sum(np.isfinite(Y), axis=0)
    ok = k > 0
    if not ok.any():
        return False
    xs, Y, k = xs[ok], Y[:, ok], k[ok]
    mean = np.nanmean(Y, axis=0)
    lab = f"{g} (n={len(pairs)})" if label else None
    if len(pairs) == 1 and yerr_single is not None:
        ax.errorbar(xs, mean, yerr=np.asarray(yerr_single)[ok], color=color[g], capsize=3,
                    marker="o", ms=3, label=lab)
        return True
    ax.plot(xs, mean, color=color[g], marker="o" if xs.size < 12 else None, ms=3, label=lab)
    if len(pairs) > 1:
        with warnings.catch_warnings():  # a step only one seed reached: no se there
            warnings.simplefilter("ignore", RuntimeWarning)
            sd = np.nanstd(Y, axis=0, ddof=1)
            se = np.where(k > 1, sd / np.sqrt(k), np.nan)
        ax.fill_between(xs, mean - se, mean + se, color=color[g], alpha=0.2, lw=0)
    return True

def legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)

def integer_x(*axs):
    for ax in axs:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))

def steps_metric(n, k):
    s = runs[n]["steps"]
    return (s["step"], s[k]) if k in s and "step" in s else (np.array([]), np.array([]))

fig, axs = plt.subplots(1, 2, figsize=(10, 3.3))
for ax, k in zip(axs, ("reward_mean", "accuracy")):
    drawn = False
    for g in groups:
        drawn |= band(ax, [steps_metric(n, k) for n in members[g]], g)
    if not drawn:
        note(f"/steps/{k} is absent (or empty) in every run")
        ax.text(0.5, 0.5, f"/steps/{k} not logged", ha="center", transform=ax.transAxes)
    ax.set_title(f"{k} (training batch)"); ax.set_xlabel("RL step"); ax.grid(alpha=0.3)
legend(axs[0], fontsize=8)
integer_x(*axs)
plt.tight_layout()
save(fig, "train_curves")
""")

    md(r"""
## Held-out evaluation

`/eval/TASK/accuracy` and `/eval/TASK/reward_mean`: greedy decoding on the run's eval set
(step 0 is the starting model). With one seed the error bars are that evaluation's own
standard error over items (`accuracy_se`).
""")

    code(r"""
fig, axs = plt.subplots(max(1, len(tasks)), 2, figsize=(10, 3.2 * max(1, len(tasks))),
                        squeeze=False)
if not tasks:
    note("no run logged an evaluation (`eval.every` 0, or none reached yet)")
    for ax in axs[0]:
        ax.text(0.5, 0.5, "no evaluations logged", ha="center", transform=ax.transAxes)
for row, task in zip(axs, tasks):
    for ax, k in zip(row, ("accuracy", "reward_mean")):
        for g in groups:
            ev = [runs[n]["eval"][task] for n in members[g] if task in runs[n]["eval"]]
            single = ev[0].get("accuracy_se") if len(ev) == 1 and k == "accuracy" else None
            band(ax, [(e["step"], e[k]) for e in ev if k in e], g, yerr_single=single)
        ax.set_title(f"eval {task}: {k}"); ax.set_xlabel("RL step"); ax.grid(alpha=0.3)
    missing = [n for n in runs if task not in runs[n]["eval"]]
    if missing:
        note(f"eval {task}: not logged by {len(missing)} run(s): {', '.join(missing)}")
legend(axs[0][0], fontsize=8)
integer_x(*axs.ravel())
plt.tight_layout()
save(fig, "eval_curves")
""")

    md(r"""
## AIS mixing coefficient and its three scores

`alpha` (the smoothed, clamped mixing coefficient the correction used), `s_rel = (N -
ESS)/(N - 1)` (weight reliability), `s_div = 1 - exp(-delta/tau_delta)` (divergence
severity) and `s_var = 1 - 1/max(nu, 1)` (variance amplification), per step over the
global batch. The diagnostics are computed and logged under every correction method;
only `ais` uses `alpha`.
""")

    code(r"""
fig, axs = plt.subplots(1, 4, figsize=(13, 3.1), sharex=True)
for ax, k in zip(axs, ("alpha", "s_rel", "s_div", "s_var")):
    drawn = False
    for g in groups:
        drawn |= band(ax, [steps_metric(n, k) for n in members[g]], g)
    if not drawn:
        note(f"/steps/{k} is absent (or all NaN) in every run")
        ax.text(0.5, 0.5, f"{k} not logged", ha="center", transform=ax.transAxes)
    ax.set_title(k); ax.set_xlabel("RL step"); ax.grid(alpha=0.3)
legend(axs[0], fontsize=7)
integer_x(*axs)
plt.tight_layout()
save(fig, "ais_scores")
""")

    md(r"""
## |log w| per token

`/trajectories/token_log_ratio`: the per-token log-ratio `d = log pi - log mu` between the
trainer and the rollout copy of every scored token of every logged completion (NaN: not
scored), over all steps and seeds of a group. The histogram is of `log10 |d|`; tokens with
`d` exactly 0 (rollouts made with the trainer's own weights) are counted beside it.
""")

    code(r"""
MAX_TOKENS = 2_000_000  # per run: a longer log is read every k-th completion
absd = {}
for g in groups:
    parts = []
    for n in members[g]:
        f = runs[n]["f"]
        if "trajectories/token_log_ratio" not in f:
            continue
        t = f["trajectories"]
        rows = complete_rows(t)
        d = t["token_log_ratio"]
        stride = max(1, math.ceil(rows * max(1, d.shape[1]) / MAX_TOKENS))
        if stride > 1:
            note(f"{n}: |d| from every {stride}-th of {rows} completions", "info")
        x = np.abs(d[:rows:stride].astype(np.float64)).ravel()
        parts.append(x[np.isfinite(x)])
    if parts:
        absd[g] = np.concatenate(parts)
missing = [g for g in groups if g not in absd]
if missing:
    note(f"/trajectories/token_log_ratio is absent for {', '.join(missing)}")

fig, ax = plt.subplots(figsize=(8, 3.4))
pos = [x[x > 0] for x in absd.values() if (x > 0).any()]
if pos:
    lo = np.floor(np.log10(min(p.min() for p in pos)))
    hi = np.ceil(np.log10(max(p.max() for p in pos)))
    bins = np.linspace(lo, max(hi, lo + 1), 50)
rows = []
for g, x in absd.items():
    zero = float(np.mean(x == 0)) if x.size else float("nan")
    if pos and (x > 0).any():
        ax.hist(np.log10(x[x > 0]), bins=bins, histtype="step", lw=1.5, color=color[g],
                density=True, label=f"{g} ({x.size} tokens, {100 * zero:.2g}% zero)")
    else:
        ax.plot([], [], color=color[g], label=f"{g} ({x.size} tokens, all zero)")
    q = np.quantile(x, [0.5, 0.9, 0.99]) if x.size else [np.nan] * 3
    rows.append((g, x.size, zero, x.mean() if x.size else np.nan, *q,
                 x.max() if x.size else np.nan))
if not absd:
    ax.text(0.5, 0.5, "token_log_ratio not logged", ha="center", transform=ax.transAxes)
ax.set_xlabel("log10 |d| per token (nats)"); ax.set_ylabel("density"); ax.grid(alpha=0.3)
legend(ax, fontsize=8)
save(fig, "token_log_ratio")
if rows and pd is not None:
    display(pd.DataFrame(rows, columns=["group", "tokens", "frac zero", "mean |d|", "median",
                                        "q90", "q99", "max"]).set_index("group"))
""")

    md(r"""
## Mismatch by denoising step

`/mismatch_by_step/mean_abs_d[t, k]`: the mean `|d|` of the tokens committed at denoising
step `k` of RL step `t` (NaN: none committed). Left: averaged over the RL steps of each
run, then mean ± se over the seeds. Right: the same per RL step, averaged over the
denoising steps, to see whether the mismatch grows with training.
""")

    code(r"""
fig, axs = plt.subplots(1, 2, figsize=(11, 3.3))
drawn = False
for g in groups:
    by_k, by_t = [], []
    for n in members[g]:
        f = runs[n]["f"]
        if "mismatch_by_step/mean_abs_d" not in f:
            continue
        mm = f["mismatch_by_step"]
        m = complete_rows(mm)
        D = mm["mean_abs_d"][:m]
        if m == 0 or D.ndim != 2 or D.shape[1] == 0 or not np.isfinite(D).any():
            continue
        with warnings.catch_warnings():  # a denoising step no token was committed at
            warnings.simplefilter("ignore", RuntimeWarning)
            by_k.append((np.arange(D.shape[1]), np.nanmean(D, axis=0)))
            by_t.append((mm["step"][:m], np.nanmean(D, axis=1)))
    if by_k:
        drawn = True
        band(axs[0], by_k, g)
        band(axs[1], by_t, g, label=False)
if not drawn:
    note("/mismatch_by_step/mean_abs_d is absent, empty or all NaN in every run")
    for ax in axs:
        ax.text(0.5, 0.5, "mismatch_by_step not logged", ha="center", transform=ax.transAxes)
axs[0].set_xlabel("denoising step k"); axs[0].set_ylabel("mean |d| (nats per token)")
axs[1].set_xlabel("RL step"); axs[1].set_ylabel("mean over k of mean |d|")
for ax in axs:
    ax.grid(alpha=0.3)
integer_x(*axs)
legend(axs[0], fontsize=8)
plt.tight_layout()
save(fig, "mismatch_by_step")
""")

    code(r"""
for r in runs.values():
    r["f"].close()
if FIG_DIR:
    with open(os.path.join(FIG_DIR, "notes.json"), "w") as fh:
        json.dump([{"kind": k, "text": t} for k, t in NOTES], fh, indent=1)
print(f"{len(NOTES)} notes" + "".join(f"\n  {k}: {t}" for k, t in NOTES))
""")
    return out


def build(about=DEFAULT_ABOUT):
    nb = nbf.v4.new_notebook()
    nb["cells"] = cells(about)
    for i, c in enumerate(nb["cells"]):  # stable ids: a re-render diffs only in outputs
        c["id"] = f"cell-{i:02d}"
    nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                     "language": "python"},
                      "language_info": {"name": "python"}}
    return nb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--about", default=DEFAULT_ABOUT,
                    help="Markdown for the first cell: what the notebook was executed on")
    ap.add_argument("--out", default=os.path.join(HERE, "sweep.ipynb"))
    a = ap.parse_args()
    nbf.write(build(a.about), a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
