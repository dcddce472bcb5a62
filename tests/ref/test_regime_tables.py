#!/usr/bin/env python3
"""notebooks_export/regime_tables.py on fabricated runs whose endpoints are known: the
late-window mean, the collapse step, the slope of |log w| / L, the per-seed paired t-test
and Holm's correction, the unfinished runs left out, and --write / --check.

    python3 tests/ref/test_regime_tables.py

Standard library only; exits 1 on the first failure."""
import math
import os
import re
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "notebooks_export", "regime_tables.py")
N = 100  # items per evaluation


def check(cond, msg):
    if not cond:
        print(f"test_regime_tables: FAIL: {msg}")
        sys.exit(1)


def write_eval(run, step, correct, items="ab12"):
    os.makedirs(os.path.join(run, "eval"), exist_ok=True)
    with open(os.path.join(run, "eval", f"sudoku-step-{step}.txt"), "w") as f:
        f.write(f"# dllm-rl eval outcomes: task sudoku, step {step}, n {N}, items {items}\n")
        f.write("".join("1\n" if i < correct else "0\n" for i in range(N)))


def main():
    tmp = tempfile.mkdtemp()
    root = os.path.join(tmp, "regime-a")
    # the fake binary: `inspect RUN --metric NAME` prints the run's metric file
    fake = os.path.join(tmp, "fake-dllm-rl")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\n[ "$1" = inspect ] && [ "$3" = --metric ] || exit 3\n'
                'cat "$2/metric-$4.txt"\n')
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    # accuracies (in items of 100) at steps 0, 50, ..., 500 per (arm, seed)
    base = [60, 62, 64, 66, 68, 70, 70, 70, 70, 70, 70]
    runs = {("reference", 1): base, ("reference", 2): [a + 2 for a in base],
            ("nvfp4-none", 1): base[:6] + [30, 20, 10, 12, 10],   # collapses at 300
            ("nvfp4-none", 2): [a - 4 for a in base],
            ("nvfp4-ais", 1): [a + 1 for a in base], ("nvfp4-ais", 2): [a + 3 for a in base],
            ("nvfp4-fixed", 1): base}
    slopes = {"nvfp4-none": (0.010, 0.002), "nvfp4-ais": (0.005, 0.001)}  # (start, per step/100)
    for (arm, seed), acc in runs.items():
        run = os.path.join(root, f"{arm}_seed={seed}")
        for k, a in enumerate(acc):
            write_eval(run, 50 * k, a)
        s0, ds = slopes.get(arm, (0.0, 0.0))
        ds *= seed  # seed 2 grows twice as fast
        with open(os.path.join(run, "metric-abs_log_w_informative.txt"), "w") as f:
            f.write("step abs_log_w_informative\n")
            f.write("".join(f"{t} {34 * (s0 + ds * t / 100):.17g}\n" for t in range(1, 501)))
        with open(os.path.join(run, "metric-completion_len.txt"), "w") as f:
            f.write("step completion_len\n" + "".join(f"{t} 34\n" for t in range(1, 501)))
    # an unfinished run: evaluations to step 200 only
    for k in range(5):
        write_eval(os.path.join(root, "nvfp4-fixed_seed=2"), 50 * k, 60)

    p = subprocess.run([sys.executable, SCRIPT, "regime-a", root, "--bin", fake],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr}")
    out = p.stdout
    check("finished: 7 of 8 found (unfinished: nvfp4-fixed_seed=2 (evaluations to step 200))"
          in out, out)
    rows = {m.group(1): m.group(2).split(" | ")
            for m in re.finditer(r"^\| (\S+_seed=\d) \| (.*) \|$", out, re.M)}
    # late window 300..500: base is 0.70 there; the collapsed run 0.10-0.20
    check(rows["reference_seed=1"][2] == "0.7000", rows["reference_seed=1"])
    check(rows["nvfp4-none_seed=1"][2] == "0.1640", rows["nvfp4-none_seed=1"])
    check(rows["nvfp4-none_seed=1"][3] == "300", f"collapse step: {rows['nvfp4-none_seed=1']}")
    check(rows["nvfp4-none_seed=2"][3] == "none", rows["nvfp4-none_seed=2"])
    check(rows["nvfp4-none_seed=1"][4] == "0.00200" and rows["nvfp4-none_seed=2"][4] == "0.00400",
          f"slopes: {rows['nvfp4-none_seed=1']}, {rows['nvfp4-none_seed=2']}")
    # nvfp4-ais - reference: +0.01 on both seeds -> t infinite, p 0
    m = re.search(r"\| late-window mean \| nvfp4-ais - reference \| 2 \| (\S+) \+- (\S+) \| (\S+) \|", out)
    check(m and m.group(1) == "0.0100" and m.group(2) == "0.0000" and m.group(3) == "inf", out)
    # nvfp4-none - reference: seed 1 (collapsed) 0.164 - 0.70, seed 2 0.66 - 0.72
    d1 = (30 + 20 + 10 + 12 + 10) / 5 / N - 0.70
    d2 = -0.06
    mu, se = (d1 + d2) / 2, abs(d1 - d2) / 2
    t = mu / se
    p_two = 1 - 2 * math.atan(abs(t)) / math.pi  # Student t with 1 degree of freedom
    m = re.search(r"\| late-window mean \| nvfp4-none - reference \| 2 \| (\S+) \+- (\S+) \| (\S+) \| (\S+) \| (\S+) \|", out)
    check(m and m.group(1) == f"{mu:.4f}" and m.group(2) == f"{se:.4f}", f"{mu} {se}: {out}")
    check(abs(float(m.group(4)) - p_two) < 1e-3, f"p {m.group(4)} against {p_two}")
    # Holm over the tests run (5 with two seeds: not nvfp4-fixed's, one seed finished)
    check("| late-window mean | nvfp4-fixed - reference | 1 | - |" in out, out)
    holm_p = [float(x.group(1)) for x in re.finditer(r"\| \S+ \| (\d\.\d{3}) \|$", out, re.M)]
    check(len(holm_p) == 4 and all(0 <= h <= 1 for h in holm_p), f"Holm p values: {holm_p}")
    # --write then --check, and --check failing on a changed block
    doc = os.path.join(tmp, "doc.md")
    with open(doc, "w") as f:
        f.write("before\n<!-- regime-a-table:begin -->\nold\n<!-- regime-a-table:end -->\nafter\n")
    for mode, want in (("--write", 0), ("--check", 0)):
        p = subprocess.run([sys.executable, SCRIPT, "regime-a", root, "--bin", fake, mode, doc],
                           capture_output=True, text=True)
        check(p.returncode == want, f"{mode}: exit {p.returncode}: {p.stderr}")
    with open(doc) as f:
        text = f.read()
    check(text.startswith("before\n") and text.endswith("after\n") and out in text, text)
    write_eval(os.path.join(root, "reference_seed=1"), 500, 71)
    p = subprocess.run([sys.executable, SCRIPT, "regime-a", root, "--bin", fake, "--check", doc],
                       capture_output=True, text=True)
    check(p.returncode == 1, f"--check after a change: exit {p.returncode}")
    # the controls: final accuracy (step 300) against the correction arm of another directory
    croot, lroot = os.path.join(tmp, "controls"), os.path.join(tmp, "repro-late")
    for d, arm, accs in ((croot, "lr-scaled", (70, 72)), (lroot, "nvfp4-tis", (68, 69)),
                         (croot, "random-drop", (66, 60)), (lroot, "nvfp4-mis", (64, 63))):
        for seed, a in enumerate(accs, 1):
            run = os.path.join(d, f"{arm}_seed={seed}")
            for k in range(7):
                write_eval(run, 50 * k, a if k == 6 else 50)
            for name, v in (("abs_log_w_informative", 0), ("completion_len", 34)):
                with open(os.path.join(run, f"metric-{name}.txt"), "w") as f:
                    f.write(f"step {name}\n" + "".join(f"{t} {v}\n" for t in range(1, 301)))
    p = subprocess.run([sys.executable, SCRIPT, "controls", croot, lroot, "--bin", fake],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"controls: exit {p.returncode}: {p.stderr}")
    # lr-scaled - nvfp4-tis: +0.02, +0.03; random-drop - nvfp4-mis: +0.02, -0.03
    m = re.search(r"\| late-window mean \| lr-scaled - nvfp4-tis \| 2 \| (\S+) \+- (\S+) \|", p.stdout)
    check(m and m.group(1) == "0.0250" and m.group(2) == "0.0050", p.stdout)
    m = re.search(r"\| late-window mean \| random-drop - nvfp4-mis \| 2 \| (\S+) \+- (\S+) \|", p.stdout)
    check(m and m.group(1) == "-0.0050" and m.group(2) == "0.0250", p.stdout)
    check("endpoint: the final accuracy, the evaluation at step 300" in p.stdout, p.stdout)
    # bad input: exit 2
    p = subprocess.run([sys.executable, SCRIPT, "regime-a", os.path.join(tmp, "none"), "--bin", fake],
                       capture_output=True, text=True)
    check(p.returncode == 2 and "not a directory" in p.stderr, p.stderr)
    print("test_regime_tables: PASS")


if __name__ == "__main__":
    main()
