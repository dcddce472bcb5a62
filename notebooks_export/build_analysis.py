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

Per step, over the population `correction.ais.population` names (`informative`: the
completions of groups whose rewards differ; `all`), N completions: `w = exp(log_w)` (on
the de-noised `lw~ = m + k (lw - m)`, `k = sqrt(max(0, 1 - S/V))`, under `noise: debias`
with an estimator that has Monte Carlo noise), `ESS = (sum w)^2 / sum w^2`,
`rho_ess = ESS/N`; `delta` = mean over completions of the mean over scored tokens of
`|d|` (`token_log_ratio`, NaN where not scored); `nu` = `mean(c~^2 a^2) / mean(a^2)`
(`total`, `c~` the capped weights `min(w, C)` at mean one) or
`Var(w~ a) / (mean(w~^2) Var(A))` (`excess`), `a = A - mean(A)`, 1 when `Var(A) = 0`;
with S the weighted mean of the scores, `alpha_raw` = S clipped (linear) or
`sigmoid(bias + gain S)` (logistic), then `alpha_t = eta alpha_{t-1} + (1 - eta)
alpha_raw` clamped to `[alpha_min, alpha_max]`; a step with an empty population keeps
alpha and has NaN diagnostics. Constants from the run's `config_yaml`, defaulting to
docs/METHOD.md's. (`tests/ref/check_h5log.py --recompute` does the same for every
logged quantity.)
""")

code(r"""
full = {}
if yaml is not None:
    try:
        full = yaml.safe_load(f.attrs["config_yaml"]) or {}
    except Exception as e:  # a config that is not YAML: keep the defaults
        print("config_yaml:", e)
corr = full.get("correction") or {}
cfg = corr.get("ais") or {}
wts = cfg.get("weights") or {}
l_rel, l_div, l_var = (float(wts.get(k, 1.0)) for k in ("reliability", "divergence", "variance"))
tau, eta = float(cfg.get("tau_delta", 0.05)), float(cfg.get("eta", 0.0))
a_min, a_max = float(cfg.get("alpha_min", 0.0)), float(cfg.get("alpha_max", 1.0))
combine, bias = cfg.get("combine", "linear"), float(cfg.get("bias", -4.0))
gain = float(cfg.get("gain", 8.0))
population, variance = cfg.get("population", "informative"), cfg.get("variance", "total")
noise = cfg.get("noise", "debias")
cap = float(corr.get("cap", 2.0))
print(f"weights ({l_rel}, {l_div}, {l_var}), tau_delta {tau}, eta {eta}, "
      f"alpha in [{a_min}, {a_max}], combine {combine} (gain {gain}), population {population}, "
      f"nu {variance}, C {cap}")

t = f["trajectories"]
rows = min(d.shape[0] for d in t.values())
tstep, logw, adv = t["step"][:rows], t["log_w"][:rows], t["advantage"][:rows]
grp, rew = t["group"][:rows], t["reward"][:rows]
se_all = t["log_w_se"][:rows]
d = t["token_log_ratio"][:rows].astype(np.float64)

rec = {k: np.full(n, np.nan) for k in ("rho_ess", "s_rel", "delta", "s_div", "nu", "s_var",
                                       "alpha_raw", "alpha")}
alpha_prev = 0.0
for j, s in enumerate(step):
    sel = tstep == s
    if not sel.any():
        continue
    if population == "informative":
        g, r = grp[sel], rew[sel]
        member = np.array([np.unique(r[g == x]).size > 1 for x in g])
        sel = np.nonzero(sel)[0][member]
    else:
        sel = np.nonzero(sel)[0]
    N = len(sel)
    if N == 0:  # nothing to correct: alpha stays
        rec["alpha_raw"][j] = alpha_prev
        alpha_prev = float(np.clip(alpha_prev, a_min, a_max))
        rec["alpha"][j] = alpha_prev
        continue
    lw, A, se = logw[sel], adv[sel], se_all[sel]
    m, V, S = lw.mean(), lw.var(), np.mean(se ** 2)
    k = np.sqrt(max(0.0, 1 - S / V)) if noise == "debias" and V > 0 and S > 0 else 1.0
    lw = m + k * (lw - m)
    w = np.exp(lw - lw.max())
    ess = w.sum() ** 2 / (w ** 2).sum()
    rec["rho_ess"][j] = ess / N
    rec["s_rel"][j] = (N - ess) / (N - 1) if N > 1 else 0.0
    absd = np.abs(d[sel])
    per_seq = np.nanmean(np.where(np.isnan(absd), np.nan, absd), axis=1)
    rec["delta"][j] = np.nanmean(per_seq)
    rec["s_div"][j] = 1 - np.exp(-rec["delta"][j] / tau)
    a = A - A.mean()
    nu = 1.0
    if np.var(A) > 0 and lw.max() > lw.min():
        if variance == "excess":
            wt = w / w.mean()
            nu = np.var(wt * a) / (np.mean(wt ** 2) * np.var(A))
        else:
            mc = np.exp(lw - lw.max()) if np.isinf(cap) else np.minimum(np.exp(lw), cap)
            ct = mc / mc.mean()
            nu = np.mean(ct ** 2 * a ** 2) / np.mean(a ** 2)
    rec["nu"][j] = nu
    rec["s_var"][j] = 1 - 1 / max(nu, 1.0)
    tot = abs(l_rel) + abs(l_div) + abs(l_var)
    z = (l_rel * rec["s_rel"][j] + l_div * rec["s_div"][j] + l_var * rec["s_var"][j])
    z = z / tot if tot > 0 else 0.0
    if combine == "logistic":
        a_raw = 1 / (1 + np.exp(-(bias + gain * z)))
    else:
        a_raw = np.clip(z, 0, 1) if tot > 0 else a_min
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
## What else the log holds: entropy, length, pass@k, both populations, the gradient

Each panel is drawn when the log has the metric (older logs lack some): the trainer's
token entropy on the completions and the completion length to EOS; pass@k for
k = 1..G (`/pass_at_k`, the unbiased estimator over each group) at the first and last
step; rho_ess and mean |log w| on the informative completions against all of them;
the 5/50/95 % quantiles of log w; both forms of nu; and, under `log.grad_cosine`, the
cosine between the corrected and uncorrected loss gradients.
""")

code(r"""
def have(*names):
    return all(k in steps and np.any(np.isfinite(steps[k])) for k in names)

panels = [p for p in (("entropy", "completion_len"), ("pass_at_k",),
                      ("rho_ess_informative", "rho_ess_all"),
                      ("log_w_q05", "log_w_q50", "log_w_q95"), ("nu_total", "nu_excess"),
                      ("grad_cosine", "grad_norm_ratio"))
          if (p == ("pass_at_k",) and "pass_at_k" in f) or have(*p)]
if not panels:
    print("this log predates these metrics")
else:
    fig, axs = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, p in zip(axs[0], panels):
        if p == ("pass_at_k",):
            v = f["pass_at_k/value"]
            ks = np.arange(1, v.shape[1] + 1)
            for r, c in ((0, "C0"), (v.shape[0] - 1, "C3")):
                ax.plot(ks, v[r], "o-", color=c, label=f"step {f['pass_at_k/step'][r]}")
            ax.set_xlabel("k"); ax.set_title("pass@k"); ax.legend()
        else:
            for k in p:
                ax.plot(step, steps[k], label=k)
            ax.set_xlabel("step"); ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
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
