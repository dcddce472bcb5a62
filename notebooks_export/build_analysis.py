#!/usr/bin/env python3
"""Writes analysis.ipynb (unexecuted): the analysis notebook over a run log.

The cells are kept here as plain strings so changes review as code; see
README.md for how to regenerate the notebook with executed outputs.
"""
import os

import nbformat as nbf

HERE = os.path.dirname(os.path.abspath(__file__))

cells = []


def md(s):
    cells.append(nbf.v4.new_markdown_cell(s.strip()))


def code(s):
    cells.append(nbf.v4.new_code_cell(s.strip()))


md(r"""
# Run log analysis (`log.h5`)

Opens a dllm-rl run log with h5py in SWMR read mode (so it works on a running or killed
run), plots the training curves and the AIS diagnostics of docs/METHOD.md section 5, and
recomputes the diagnostics from the logged per-completion `log_w` and `advantage` and the
per-token `token_log_ratio`, to check the values logged under `/steps`.

Set the environment variable `LOG_H5` to a run's `log.h5` (default: `demo.h5` in the
working directory, the synthetic run written by the test program; see README.md).
""")

code(r"""
import os
import h5py
import numpy as np
import matplotlib
import matplotlib.pyplot as plt
try:
    import yaml
except ImportError:
    yaml = None

path = os.environ.get("LOG_H5", "demo.h5")
f = h5py.File(path, "r", libver="latest", swmr=True)
for name in ("version", "git_revision", "seed", "device", "started"):
    print(f"{name:13s} {f.attrs[name]}")

# Complete steps only: rows that every /steps dataset has (a writer killed mid-step can
# leave some datasets one row longer).
n = min(d.shape[0] for d in f["steps"].values())
steps = {k: d[:n] for k, d in f["steps"].items()}
step = steps["step"]
print(f"{n} steps ({step[0]} .. {step[-1]}), {f['trajectories/step'].shape[0]} trajectories")
""")

md("## Reward and accuracy")

code(r"""
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(step, steps["reward_mean"], label="reward_mean (train batch)")
ax.plot(step, steps["accuracy"], label="accuracy (train batch)", alpha=0.7)
for task, g in f["eval"].items():
    m = min(d.shape[0] for d in g.values())
    if m:
        ax.errorbar(g["step"][:m], g["accuracy"][:m], yerr=g["accuracy_se"][:m],
                    fmt="o", capsize=3, label=f"eval {task} accuracy")
ax.set_xlabel("step"); ax.set_ylim(0, 1); ax.legend(); ax.grid(alpha=0.3)
plt.show()
""")

md(r"""
## AIS mixing coefficient and its three scores

`s_rel = (N - ESS)/(N - 1)` (weight reliability), `s_div = 1 - exp(-delta/tau_delta)`
(divergence), `s_var = 1 - 1/max(nu, 1)` (variance amplification); `alpha_raw` combines
them, `alpha` is the smoothed, clamped value used for the coefficients.
""")

code(r"""
fig, ax = plt.subplots(figsize=(8, 3.5))
for k in ("s_rel", "s_div", "s_var"):
    ax.plot(step, steps[k], label=k)
ax.plot(step, steps["alpha_raw"], "k--", lw=1, label="alpha_raw")
ax.plot(step, steps["alpha"], "k", lw=2, label="alpha")
ax.set_xlabel("step"); ax.set_ylim(-0.02, 1.02); ax.legend(ncol=5); ax.grid(alpha=0.3)
plt.show()
""")

md("## ESS ratio and per-token mismatch")

code(r"""
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(step, steps["rho_ess"], "C0", label="rho_ess = ESS / N")
ax.set_xlabel("step"); ax.set_ylabel("rho_ess", color="C0"); ax.grid(alpha=0.3)
ax2 = ax.twinx()
ax2.plot(step, steps["delta"], "C3", label="delta (nats/token)")
ax2.set_ylabel("delta = mean |d| (nats per token)", color="C3")
plt.show()
""")

md(r"""
## Recomputing the diagnostics from the trajectories (docs/METHOD.md section 5)

Per step, over its N completions: `w = exp(log_w)`, `ESS = (sum w)^2 / sum w^2`,
`rho_ess = ESS/N`; `delta` = mean over completions of the mean over scored tokens of `|d|`
(`token_log_ratio`, NaN where not scored); `nu = Var(w~ A) / (mean(w~^2) Var(A))` with
`w~ = w / mean(w)` and population variances (1 when `Var(A) = 0`); the linear combination
with the configured weights gives `alpha_raw`, then `alpha_t = eta alpha_{t-1} + (1 - eta)
alpha_raw` clamped to `[alpha_min, alpha_max]`. The constants come from the run's
`config_yaml` (`correction.ais`), defaulting to docs/METHOD.md's.
""")

code(r"""
cfg = {}
if yaml is not None:
    try:
        cfg = ((yaml.safe_load(f.attrs["config_yaml"]) or {}).get("correction") or {}).get("ais") or {}
    except Exception as e:  # a config that is not YAML: keep the defaults
        print("config_yaml:", e)
wts = cfg.get("weights") or {}
l_rel, l_div, l_var = (float(wts.get(k, 1.0)) for k in ("reliability", "divergence", "variance"))
tau, eta = float(cfg.get("tau_delta", 0.05)), float(cfg.get("eta", 0.0))
a_min, a_max = float(cfg.get("alpha_min", 0.0)), float(cfg.get("alpha_max", 1.0))
combine, bias = cfg.get("combine", "linear"), float(cfg.get("bias", -4.0))
print(f"weights ({l_rel}, {l_div}, {l_var}), tau_delta {tau}, eta {eta}, "
      f"alpha in [{a_min}, {a_max}], combine {combine}")

t = f["trajectories"]
rows = min(d.shape[0] for d in t.values())
tstep, logw, adv = t["step"][:rows], t["log_w"][:rows], t["advantage"][:rows]
d = t["token_log_ratio"][:rows].astype(np.float64)

rec = {k: np.full(n, np.nan) for k in ("rho_ess", "s_rel", "delta", "s_div", "nu", "s_var",
                                       "alpha_raw", "alpha")}
alpha_prev = 0.0
for j, s in enumerate(step):
    sel = tstep == s
    N = int(sel.sum())
    if N == 0:
        continue
    w, A = np.exp(logw[sel]), adv[sel]
    ess = w.sum() ** 2 / (w ** 2).sum()
    rec["rho_ess"][j] = ess / N
    rec["s_rel"][j] = (N - ess) / (N - 1) if N > 1 else 0.0
    absd = np.abs(d[sel])
    per_seq = np.nanmean(np.where(np.isnan(absd), np.nan, absd), axis=1)
    rec["delta"][j] = np.nanmean(per_seq)
    rec["s_div"][j] = 1 - np.exp(-rec["delta"][j] / tau)
    wt = w / w.mean()
    rec["nu"][j] = np.var(wt * A) / (np.mean(wt ** 2) * np.var(A)) if np.var(A) > 0 else 1.0
    rec["s_var"][j] = 1 - 1 / max(rec["nu"][j], 1.0)
    z = l_rel * rec["s_rel"][j] + l_div * rec["s_div"][j] + l_var * rec["s_var"][j]
    if combine == "logistic":
        a_raw = 1 / (1 + np.exp(-(bias + z)))
    else:
        tot = l_rel + l_div + l_var
        a_raw = np.clip(z / tot, 0, 1) if tot > 0 else a_min
    rec["alpha_raw"][j] = a_raw
    alpha_prev = float(np.clip(eta * alpha_prev + (1 - eta) * a_raw, a_min, a_max))
    rec["alpha"][j] = alpha_prev

print(f"{'metric':10s} {'max |recomputed - logged|':>26s}")
for k, v in rec.items():
    diff = np.nanmax(np.abs(v - steps[k])) if np.any(np.isfinite(steps[k])) else np.nan
    print(f"{k:10s} {diff:26.3g}")
""")

code(r"""
fig, axs = plt.subplots(1, 3, figsize=(11, 3.2))
for ax, k in zip(axs, ("rho_ess", "nu", "alpha")):
    ax.plot(step, steps[k], lw=3, alpha=0.4, label="logged")
    ax.plot(step, rec[k], "k.", ms=3, label="recomputed")
    ax.set_title(k); ax.set_xlabel("step"); ax.grid(alpha=0.3)
axs[0].legend()
plt.tight_layout(); plt.show()
""")

md(r"""
## Mismatch by denoising step and the distribution of log-weights

`/mismatch_by_step/mean_abs_d[t, k]`: mean `|d|` of the tokens committed at denoising step
`k` (NaN: none committed). Right: `log w` of the completions at the first and last step.
""")

code(r"""
mm = f["mismatch_by_step/mean_abs_d"]
m = min(mm.shape[0], f["mismatch_by_step/step"].shape[0])
fig, axs = plt.subplots(1, 2, figsize=(11, 3.5))
if m:
    im = axs[0].imshow(mm[:m].T, aspect="auto", origin="lower", interpolation="nearest",
                       extent=(f["mismatch_by_step/step"][0] - 0.5,
                               f["mismatch_by_step/step"][m - 1] + 0.5, -0.5, mm.shape[1] - 0.5))
    fig.colorbar(im, ax=axs[0], label="mean |d|")
axs[0].set_xlabel("RL step"); axs[0].set_ylabel("denoising step")
for s, c in ((step[0], "C0"), (step[-1], "C3")):
    axs[1].hist(logw[tstep == s], bins=20, alpha=0.6, color=c, label=f"step {s}")
axs[1].set_xlabel("log w = l_pi - l_mu"); axs[1].legend()
plt.tight_layout(); plt.show()
""")

md(r"""
## Paired evaluation: which held-out items changed

Every evaluation of `dllm-rl train` writes the per-item 0/1 outcomes to
`RUN_DIR/eval/TASK-step-N.txt` (header: task, step, item count, a hash of the eval set).
On the same items, the change of accuracy between two evaluations is the mean of the
per-item differences, and its standard error is theirs: items both evaluations get right
(or wrong) cancel. This is what `dllm-rl inspect` prints. Set `COMPARE_RUN` to another
run directory with the same eval set (a control) to compare against it too.
""")

code(r"""
import glob, re

def outcomes(run_dir):
    # {task: [(step, items_hash, 0/1 array)]} from run_dir/eval, sorted by step
    out = {}
    for p in glob.glob(os.path.join(run_dir, "eval", "*-step-*.txt")):
        with open(p) as fh:
            m = re.match(r"# dllm-rl eval outcomes: task (.+), step (\d+), n (\d+), items ([0-9a-f]+)",
                         fh.readline())
            ok = np.array([int(x) for x in fh.read().split()], dtype=float)
        if m and ok.size == int(m.group(3)):
            out.setdefault(m.group(1), []).append((int(m.group(2)), m.group(4), ok))
    return {t: sorted(v, key=lambda e: e[0]) for t, v in out.items()}

def paired(a, b):
    d = a - b
    return d.mean(), d.std(ddof=1) / np.sqrt(d.size), int((d > 0).sum()), int((d < 0).sum())

run_dir = os.path.dirname(os.path.abspath(path))
evs = outcomes(run_dir)
other = os.environ.get("COMPARE_RUN")
oevs = outcomes(other) if other else {}
if not evs:
    print("no per-item eval outcomes beside this log")
for task, ev in evs.items():
    first = ev[0]
    print(f"{task}: {len(ev)} evaluations of {first[2].size} items")
    for s, h, ok in ev:
        line = f"  step {s:5d}: accuracy {ok.mean():.4f}"
        if s != first[0]:
            d, se, up, down = paired(ok, first[2])
            line += f"   vs step {first[0]}: {d:+.4f} +- {se:.4f} ({up} gained, {down} lost)"
        print(line)
    for s, h, ok in oevs.get(task, [])[-1:]:
        if h != ev[-1][1]:
            print(f"  {other}: another eval set (items {h}), not compared")
            continue
        d, se, up, down = paired(ev[-1][2], ok)
        print(f"  latest vs {os.path.basename(os.path.normpath(other))} step {s}: "
              f"{d:+.4f} +- {se:.4f} ({up} only here, {down} only there)")
    if len(ev) > 1:
        fig, ax = plt.subplots(figsize=(8, 2.8))
        S = [e[0] for e in ev]
        D = [paired(e[2], first[2]) for e in ev]
        ax.errorbar(S, [x[0] for x in D], yerr=[2 * x[1] for x in D], fmt="o-", capsize=3)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("step"); ax.set_ylabel(f"accuracy - step {first[0]}")
        ax.set_title(f"{task}: paired change (2 standard errors)"); ax.grid(alpha=0.3)
        plt.tight_layout(); plt.show()
""")

code(r"""
f.close()
""")

nb = nbf.v4.new_notebook()
nb["cells"] = cells
nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"},
                  "language_info": {"name": "python"}}
out = os.path.join(HERE, os.environ.get("NOTEBOOK_NAME", "analysis.ipynb"))
nbf.write(nb, out)
print("wrote", out)
