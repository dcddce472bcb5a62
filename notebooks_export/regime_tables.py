#!/usr/bin/env python3
"""The preregistered tables of regimes A, B and C and of the controls (docs/PREREGISTRATION.md;
the results in docs/REPRODUCTION.md), from the run directories alone.

    python3 notebooks_export/regime_tables.py regime-a studies/regime-a
    python3 notebooks_export/regime_tables.py regime-a studies/regime-a --check docs/REPRODUCTION.md
    python3 notebooks_export/regime_tables.py regime-a studies/regime-a --write docs/REPRODUCTION.md
    python3 notebooks_export/regime_tables.py controls studies/controls studies/repro-late

Reads every run directory ARM_seed=S under DIR (as `dllm-rl sweep` names them; a run kept
in studies/ or one under runs/): its per-item evaluation outcomes (eval/TASK-step-N.txt)
and, through `dllm-rl inspect RUN --metric`, its step metrics abs_log_w_informative and
completion_len. Per run the three endpoints of PREREGISTRATION: (1) the late-window area,
the mean accuracy of the evaluations in the regime's late window; (2) the collapse step
(an evaluation below half the best accuracy up to it, never recovered to that level
later), if any; (3) the slope of the informative mismatch, the least-squares slope over
steps of the step's mean |log w| over the informative completions divided by the step's
mean completion length (the length is fixed on these tasks, so this is |log w| / L), in
nats per token per 100 steps. Then per arm the mean and seed-level standard error
(sd / sqrt(n)), the collapses, and the regime's primary family: per-seed paired
differences, a two-sided one-sample t-test with n - 1 degrees of freedom over the seeds
both arms finished, Holm's step-down correction over the family. A run is finished when
its evaluation at the window's last step exists; unfinished runs are listed and left out.

--check compares the block between <!-- REGIME-table:begin --> and <!-- REGIME-table:end -->
of FILE with the output (exit 1 when it differs); --write replaces it. Python's standard
library and the dllm-rl binary (--bin, default build/dllm-rl) only, so the docs' tables
regenerate byte for byte anywhere. Exit status 2 on bad input.
"""
import argparse
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_block  # noqa: E402
from quickstart_table import holm, mean, sd, t_test  # noqa: E402

# The preregistered windows and families (docs/PREREGISTRATION.md). A family entry is
# (endpoint, arm, other arm or None for a test against 0).
NVFP4_FAMILY = [("late", "nvfp4-none", "reference"), ("late", "nvfp4-fixed", "reference"),
                ("late", "nvfp4-ais", "reference"), ("late", "nvfp4-ais", "nvfp4-none"),
                ("late", "nvfp4-ais", "nvfp4-fixed"), ("slope", "nvfp4-none", None)]
REGIMES = {
    "regime-a": {"late": (300, 500), "family": NVFP4_FAMILY},
    "regime-c": {"late": (300, 500), "family": NVFP4_FAMILY},
    "regime-b": {"late": (350, 600), "family": [
        e for sc in ("channel", "tensor") for e in (
            ("late", f"{sc}-none", "reference"), ("late", f"{sc}-ais", "reference"),
            ("late", f"{sc}-ais", f"{sc}-none"), ("slope", f"{sc}-none", None))]},
    # the controls (runs/controls) against their correction arms (runs/repro-late): the
    # final accuracy, the window being step 300 alone; two directories
    "controls": {"late": (300, 300), "family": [("late", "lr-scaled", "nvfp4-tis"),
                                                ("late", "random-drop", "nvfp4-mis")]},
}
EVERY = 50  # the sweeps' eval.every
RUN_RE = re.compile(r"^(.+)_seed=(\d+)$")
OUT_RE = re.compile(r"# dllm-rl eval outcomes: task (\S+), step (\d+), n (\d+), items ([0-9a-f]+)")


def fail(msg):
    print(f"regime_tables: {msg}", file=sys.stderr)
    sys.exit(2)


def evals(run):
    """{step: (items hash, accuracy)} from the run's outcome files."""
    d = os.path.join(run, "eval")
    out = {}
    if not os.path.isdir(d):
        return out
    for name in sorted(os.listdir(d)):
        m = re.match(r"^(.+)-step-(\d+)\.txt$", name)
        if not m:
            continue
        path = os.path.join(d, name)
        with open(path) as f:
            h = OUT_RE.match(f.readline())
            if not h:
                fail(f"{path}:1: not an outcome file header")
            ok = [int(line) for line in f if line.strip()]
        if len(ok) != int(h.group(3)):
            fail(f"{path}: {len(ok)} items, the header says {h.group(3)}")
        out[int(h.group(2))] = (h.group(4), sum(ok) / len(ok))
    return out


def collapse_step(curve):
    """The first step whose accuracy is below half the best up to it and never recovers to
    that level later (the sweep summary's definition), or None."""
    steps = sorted(curve)
    for i, s in enumerate(steps):
        best = max(curve[t] for t in steps[:i + 1])
        if curve[s] < best / 2 and all(curve[t] < best / 2 for t in steps[i:]):
            return s
    return None


def metric(binary, run, name):
    """{step: value} of one step metric (empty when the run has none)."""
    p = subprocess.run([binary, "inspect", run, "--metric", name], capture_output=True, text=True)
    if p.returncode == 2 and "absent" in p.stderr + p.stdout:
        return {}
    if p.returncode != 0:
        fail(f"{binary} inspect {run} --metric {name}: exit {p.returncode}: {p.stderr.strip()}")
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and re.match(r"^-?\d+$", f[0]):
            try:
                v = float(f[1])
            except ValueError:
                continue
            if math.isfinite(v):
                out[int(f[0])] = v
    return out


def slope(binary, run):
    """Least-squares slope of |log w| / L over the informative completions, per 100 steps."""
    lw, ln = metric(binary, run, "abs_log_w_informative"), metric(binary, run, "completion_len")
    pts = [(s, lw[s] / ln[s]) for s in sorted(lw) if s in ln and ln[s] > 0]
    if len(pts) < 2:
        return None
    mx, my = mean([p[0] for p in pts]), mean([p[1] for p in pts])
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return 100 * sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def fmt(x, nd=4):
    return "-" if x is None else f"{x:.{nd}f}"


def tables(regime, roots, binary):
    spec = REGIMES[regime]
    lo, hi = spec["late"]
    runs = {}
    for root in roots:
        for name in sorted(os.listdir(root)):
            m = RUN_RE.match(name)
            if m and os.path.isdir(os.path.join(root, name)):
                if (m.group(1), int(m.group(2))) in runs:
                    fail(f"{name}: in two of the directories")
                runs[m.group(1), int(m.group(2))] = os.path.join(root, name)
    if not runs:
        fail(f"{', '.join(roots)}: no run directories (ARM_seed=S)")
    res, unfinished = {}, []
    for (arm, seed), run in sorted(runs.items()):
        ev = evals(run)
        if hi not in ev:
            unfinished.append(f"{arm}_seed={seed} (evaluations to step {max(ev) if ev else '-'})")
            continue
        hashes = {ev[s][0] for s in ev}
        if len(hashes) > 1:
            fail(f"{run}: its evaluations are of different puzzles")
        curve = {s: ev[s][1] for s in ev}
        late = [curve[s] for s in range(lo, hi + 1, EVERY) if s in curve]
        if len(late) != (hi - lo) // EVERY + 1:
            fail(f"{run}: evaluations missing in the late window {lo}-{hi}")
        res[arm, seed] = {"items": hashes.pop(), "start": curve.get(0), "final": curve[hi],
                          "late": mean(late), "collapse": collapse_step(curve),
                          "slope": slope(binary, run)}
    arms = ["reference"] if any("reference" in e[1:] for e in spec["family"]) else []
    for e in spec["family"]:
        for a in e[1:]:
            if a and a not in arms:
                arms.append(a)
    arms += sorted({a for a, _ in res} - set(arms))
    window = (f"late window: the evaluations at steps {lo}, {lo + EVERY}, ..., {hi}" if hi > lo
              else f"endpoint: the final accuracy, the evaluation at step {hi} (the "
              "late-window columns below)")
    out = [f"Runs of `{regime}` finished: {len(res)} of {len(runs)} found"
           f"{' (unfinished: ' + ', '.join(unfinished) + ')' if unfinished else ''}; "
           f"{window}.", "",
           "| run | accuracy at step 0 | final accuracy | late-window mean | collapse step | "
           "slope of informative abs(log w) / L (per 100 steps) |", "|---|---|---|---|---|---|"]
    for (arm, seed) in sorted(res, key=lambda k: (arms.index(k[0]), k[1])):
        r = res[arm, seed]
        out.append(f"| {arm}_seed={seed} | {fmt(r['start'], 3)} | {fmt(r['final'], 3)} | "
                   f"{fmt(r['late'])} | {r['collapse'] if r['collapse'] is not None else 'none'} | "
                   f"{fmt(r['slope'], 5)} |")
    out += ["", "Per arm, over its finished runs: mean +- seed-level standard error "
            "(sd / sqrt(n)); a dash where fewer than 2 runs.", "",
            "| arm | runs | late-window mean | collapsed | slope (per 100 steps) |",
            "|---|---|---|---|---|"]
    for arm in arms:
        rs = [res[k] for k in sorted(res) if k[0] == arm]
        if not rs:
            out.append(f"| {arm} | 0 | - | - | - |")
            continue

        def ms(xs, nd):
            xs = [x for x in xs if x is not None]
            if not xs:
                return "-"
            if len(xs) < 2:
                return fmt(xs[0], nd)
            return f"{fmt(mean(xs), nd)} +- {fmt(sd(xs) / math.sqrt(len(xs)), nd)}"
        out.append(f"| {arm} | {len(rs)} | {ms([r['late'] for r in rs], 4)} | "
                   f"{sum(r['collapse'] is not None for r in rs)} | {ms([r['slope'] for r in rs], 5)} |")
    rows, ps = [], []
    for ep, a, b in spec["family"]:
        seeds = sorted(s for (arm, s) in res if arm == a and (b is None or (b, s) in res))
        diffs = [res[a, s][ep] - (res[b, s][ep] if b else 0.0) for s in seeds]
        if any(x is None for x in diffs) or len(diffs) < 2:
            rows.append((ep, a, b, len(diffs), None))
            continue
        if b and any(res[a, s]["items"] != res[b, s]["items"] for s in seeds):
            fail(f"{a} and {b}: a seed's evaluations are of different puzzles")
        m, se, t, p = t_test(diffs)
        rows.append((ep, a, b, len(diffs), (m, se, t, p)))
        ps.append(p)
    adj = holm(ps) if ps else []
    out += ["", f"Primary family ({len(spec['family'])} tests, Holm at 0.05 over those that "
            "have at least 2 paired seeds; a test with fewer is not run): paired per seed, "
            "two-sided one-sample t over the seeds.", "",
            "| endpoint | contrast | seeds | mean difference +- SE | t | p | Holm p |",
            "|---|---|---|---|---|---|---|"]
    k = 0
    for ep, a, b, n, r in rows:
        what = f"{a} - {b}" if b else f"{a} against 0"
        name = "late-window mean" if ep == "late" else "slope"
        nd = 4 if ep == "late" else 5
        if r is None:
            out.append(f"| {name} | {what} | {n} | - | - | - | - |")
            continue
        m, se, t, p = r
        out.append(f"| {name} | {what} | {n} | {fmt(m, nd)} +- {fmt(se, nd)} | "
                   f"{'inf' if math.isinf(t) else f'{t:.2f}'} | {p:.3f} | {adj[k]:.3f} |")
        k += 1
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("regime", choices=sorted(REGIMES))
    ap.add_argument("dir", nargs="+", help="directories of runs (the controls: two)")
    ap.add_argument("--bin", default="build/dllm-rl")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="FILE")
    g.add_argument("--write", metavar="FILE")
    a = ap.parse_args()
    for d in a.dir:
        if not os.path.isdir(d):
            fail(f"{d}: not a directory")
    if not os.access(a.bin, os.X_OK):
        fail(f"{a.bin}: not an executable (--bin)")
    text = tables(a.regime, a.dir, a.bin)
    if not (a.check or a.write):
        sys.stdout.write(text)
        return
    doc_block.sync(a.check or a.write, f"{a.regime}-table", text, bool(a.check), "regime_tables")


if __name__ == "__main__":
    main()
