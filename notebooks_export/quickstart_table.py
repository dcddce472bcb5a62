#!/usr/bin/env python3
"""The tables of the quickstart's claim (docs/REPRODUCTION.md, "The quickstart's claim on
any machine"; the test is preregistered in docs/PREREGISTRATION.md), from the runs of
configs/quickstart-table.sh alone.

    python3 notebooks_export/quickstart_table.py runs/quickstart-table
    python3 notebooks_export/quickstart_table.py runs/quickstart-table --check docs/REPRODUCTION.md
    python3 notebooks_export/quickstart_table.py runs/quickstart-table --write docs/REPRODUCTION.md

Reads, per GEMM library LIB (openblas, dnnl), SFT seed S (1-5) and RL seed R (1, 2):
LIB/sft_seed=S/sft_log.jsonl (the validation lines), and the per-item outcome files
(eval/sudoku-step-N.txt) of LIB/rl/sftS_seed=R (step 0: the best SFT checkpoint; step
60: after RL), LIB/sft-last/sftS_seed=R (the last SFT checkpoint) and
LIB/rft-eval/sftS_seed=R (rejection-sampling fine-tuning), all on RL seed R's 1,000
held-out puzzles (the files' item hashes must agree). Prints Markdown: the SFT models'
validation, every run's accuracies, and the preregistered contrasts with seed-level
standard errors, t-tests over the SFT models and Holm's correction. --check compares
the block between the markers <!-- quickstart-table:begin --> and <!-- quickstart-table:end -->
of FILE with that output (exit 1 when it differs); --write replaces it.

Python's standard library only, so the docs' tables regenerate byte for byte anywhere.
Exit status 2 on a bad directory or file.
"""
import argparse
import json
import math
import os
import re
import sys

import doc_block

LIBS = ("openblas", "dnnl")
SFT_SEEDS = (1, 2, 3, 4, 5)
RL_SEEDS = (1, 2)
RL_STEPS = 60
SFT_STEPS = 6000


def fail(msg):
    print(f"quickstart_table: {msg}", file=sys.stderr)
    sys.exit(2)


def outcomes(path):
    """(items hash, [0/1 per item]) of an outcome file, None when it does not exist."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        head = f.readline()
        m = re.match(r"# dllm-rl eval outcomes: task (\S+), step (\d+), n (\d+), items ([0-9a-f]+)", head)
        if not m:
            fail(f"{path}:1: not an outcome file header")
        ok = [int(line) for line in f if line.strip()]
    if len(ok) != int(m.group(3)):
        fail(f"{path}: {len(ok)} items, the header says {m.group(3)}")
    return m.group(4), ok


def validation(path):
    """The validation lines of an sft log: [(step, accuracy)]."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except ValueError:
                if line.endswith("\n"):
                    fail(f"{path}:{n}: not JSON")
                break  # a line cut short by a kill
            if "eval_accuracy" in o:
                rows.append((o["step"], o["eval_accuracy"]))
    return rows


def mean(xs):
    return sum(xs) / len(xs)


def sd(xs):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def betacf(a, b, x):
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lnf = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lnf) * betacf(a, b, x) / a
    return 1 - math.exp(lnf) * betacf(b, a, 1 - x) / b


def t_test(xs):
    """Mean, its standard error, t and the two-sided p of a one-sample t-test against 0."""
    m, n = mean(xs), len(xs)
    se = sd(xs) / math.sqrt(n)
    if se == 0:
        return m, se, math.inf if m else 0.0, 0.0 if m else 1.0
    t = m / se
    df = n - 1
    return m, se, t, betainc(df / 2, 0.5, df / (df + t * t))


def holm(ps):
    """Holm's step-down adjusted p-values, in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adj, run = [0.0] * len(ps), 0.0
    for k, i in enumerate(order):
        run = max(run, min(1.0, (len(ps) - k) * ps[i]))
        adj[i] = run
    return adj


def collect(root):
    """Every (lib, S, R)'s outcomes, and every SFT model's validation."""
    runs, sft = {}, {}
    for lib in LIBS:
        d = os.path.join(root, lib)
        for s in SFT_SEEDS:
            sft[lib, s] = validation(os.path.join(d, f"sft_seed={s}", "sft_log.jsonl"))
            for r in RL_SEEDS:
                name = f"sft{s}_seed={r}"
                ev = lambda sub, step: outcomes(os.path.join(d, sub, name, "eval", f"sudoku-step-{step}.txt"))
                got = {"sft-best": ev("rl", 0), "rl": ev("rl", RL_STEPS),
                       "sft-last": ev("sft-last", 0), "rft": ev("rft-eval", 0)}
                hashes = {v[0] for v in got.values() if v}
                if len(hashes) > 1:
                    fail(f"{d}: {name}: the outcome files are of different puzzles ({', '.join(sorted(hashes))})")
                runs[lib, s, r] = {k: v[1] if v else None for k, v in got.items()}
    return runs, sft


def acc(x):
    return f"{mean(x):.3f}" if x else "-"


def paired(a, b):
    """Mean of a_i - b_i and the standard error of the per-item differences."""
    d = [x - y for x, y in zip(a, b)]
    return mean(d), sd(d) / math.sqrt(len(d))


# the contrasts of docs/PREREGISTRATION.md: (name, first, second, primary)
CONTRASTS = (("RL - best SFT", "rl", "sft-best", True),
             ("RL - RFT", "rl", "rft", True),
             ("RFT - best SFT", "rft", "sft-best", False),
             ("last SFT - best SFT", "sft-last", "sft-best", False))


def table(w, head, rows):
    """A Markdown table of the rows that have data, or a line saying there are none."""
    if not rows:
        w("None yet.")
        return
    w("| " + " | ".join(head) + " |")
    w("|" + "---|" * len(head))
    for r in rows:
        w(r)


def render(root):
    runs, sft = collect(root)
    out = []
    w = out.append
    kinds = ("sft-best", "sft-last", "rft", "rl")
    done = {k: sum(1 for v in runs.values() if v[k] is not None) for k in kinds}
    sft_done = sum(1 for v in sft.values() if v and v[-1][0] == SFT_STEPS)
    w(f"Runs done: SFT models {sft_done} of {len(sft)}; evaluated on the test puzzles: "
      f"best SFT checkpoint {done['sft-best']}, last SFT checkpoint {done['sft-last']}, "
      f"RFT {done['rft']}, RL (step {RL_STEPS}) {done['rl']}, each of {len(runs)}.")
    w("")
    w("SFT models (validation: 1,000 held-out puzzles of seed 1000, every 500 steps):")
    w("")
    rows = []
    for (lib, s), v in sorted(sft.items(), key=lambda kv: (LIBS.index(kv[0][0]), kv[0][1])):
        if v:
            best = max(v, key=lambda x: (x[1], -x[0]))
            rows.append(f"| {lib} | {s} | {len(v)} | {best[0]} | {best[1]:.3f} | {v[-1][1]:.3f} ({v[-1][0]}) |")
    table(w, ("library", "SFT seed", "evaluations", "best step", "best validation accuracy",
              "last validation accuracy (step)"), rows)
    w("")
    w("Accuracy on RL seed R's 1,000 held-out puzzles (all 8 blanks right, greedy); "
      "`RL - best SFT` paired item by item, with the standard error of the per-item differences:")
    w("")
    rows = []
    for (lib, s, r), v in sorted(runs.items(), key=lambda kv: (LIBS.index(kv[0][0]), kv[0][1], kv[0][2])):
        if all(x is None for x in v.values()):
            continue
        d = "-"
        if v["rl"] and v["sft-best"]:
            m, se = paired(v["rl"], v["sft-best"])
            d = f"{m:+.3f} ± {se:.3f}"
        rows.append(f"| {lib} | {s} | {r} | {acc(v['sft-best'])} | {acc(v['sft-last'])} | "
                    f"{acc(v['rft'])} | {acc(v['rl'])} | {d} |")
    table(w, ("library", "SFT seed", "RL seed", "best SFT", "last SFT", "RFT", "RL", "RL - best SFT"),
          rows)
    w("")
    w("Contrasts (docs/PREREGISTRATION.md): per SFT model the paired difference averaged over "
      "its RL seeds, then the mean over SFT models with its seed-level standard error "
      "(sd / sqrt(n)), t with n - 1 degrees of freedom, two-sided p; Holm's correction over "
      "the two primary contrasts pooled over both libraries. A contrast is computed over the "
      "SFT models whose every run of it is done:")
    w("")
    rows, primary = [], []
    for name, a, b, prim in CONTRASTS:
        for libs in (("openblas",), ("dnnl",), LIBS):
            units = []
            for lib in libs:
                for s in SFT_SEEDS:
                    vs = [runs[lib, s, r] for r in RL_SEEDS]
                    if all(v[a] and v[b] for v in vs):
                        units.append(mean([paired(v[a], v[b])[0] for v in vs]))
            label = "both" if len(libs) > 1 else libs[0]
            if len(units) < 2:
                rows.append([name, label, len(units), None])
                continue
            m, se, t, p = t_test(units)
            rows.append([name, label, len(units), (m, se, t, p)])
            if prim and len(libs) > 1:
                primary.append((len(rows) - 1, p))
    adj = holm([p for _, p in primary]) if primary else []
    holm_of = {i: q for (i, _), q in zip(primary, adj)}
    lines = []
    for i, (name, label, n, st) in enumerate(rows):
        if st is None:
            continue
        m, se, t, p = st
        q = f"{holm_of[i]:.4f}" if i in holm_of else ""
        lines.append(f"| {name} | {label} | {n} | {m:+.4f} | {se:.4f} | {t:.2f} | {p:.4f} | {q} |")
    table(w, ("contrast", "libraries", "SFT models", "mean", "seed-level SE", "t", "p", "Holm p"), lines)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", help="the runs' directory (runs/quickstart-table)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="FILE", help="compare FILE's block with the tables")
    g.add_argument("--write", metavar="FILE", help="replace FILE's block with the tables")
    a = ap.parse_args()
    if not os.path.isdir(a.root):
        fail(f"{a.root}: not a directory")
    text = render(a.root)
    path = a.check or a.write
    if not path:
        sys.stdout.write(text)
        return 0
    doc_block.sync(path, "quickstart-table", text, bool(a.check), "quickstart_table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
