#!/usr/bin/env python3
"""notebooks_export/mismatch_windows.py on fabricated run logs whose mismatch is known:
only the informative completions counted (a group whose rewards differ), the first and
last window's |log w| / L, the change and the slope per seed, their seed-level standard
errors, an arm whose rollouts are the trainer's own left out, --write / --check, and the
mean correction coefficient (--coef).

    python3 tests/ref/test_mismatch_windows.py

Needs h5py and numpy (tests/ref/ci_check_h5log.sh runs it in its virtual environment);
exits 1 on the first failure."""
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "notebooks_export", "mismatch_windows.py")
STEPS, L = 100, 20


def check(cond, msg):
    if not cond:
        print(f"test_mismatch_windows: FAIL: {msg}")
        sys.exit(1)


def write_run(d, a, b):
    """Per step two groups of 4: group 0 informative (rewards 0, 1, 0, 1) with
    |log w| / L = a + b * step; group 1 flat (all 0) with |log w| / L = 1, which must not
    count."""
    os.makedirs(d)
    step, group, reward, log_w = [], [], [], []
    for s in range(1, STEPS + 1):
        for g in (0, 1):
            for i in range(4):
                step.append(s)
                group.append(g)
                reward.append(float(i % 2) if g == 0 else 0.0)
                log_w.append((a + b * s) * L if g == 0 else -1.0 * L)
    with h5py.File(os.path.join(d, "log.h5"), "w") as f:
        t = f.create_group("trajectories")
        t["step"] = np.array(step, dtype=np.int32)
        t["group"] = np.array(group, dtype=np.int32)
        t["reward"] = np.array(reward, dtype=np.float32)
        t["log_w"] = np.array(log_w, dtype=np.float64)
        t["completion_len"] = np.full(len(step), L, dtype=np.int32)
        # the correction's coefficient: 1 + a on the informative completions, 9 elsewhere
        t["coef"] = np.array([1 + a if g == 0 else 9.0 for g in group], dtype=np.float32)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    tmp = tempfile.mkdtemp()
    st = os.path.join(tmp, "s1")
    write_run(os.path.join(st, "x_seed=1"), 0.01, 0.0001)
    write_run(os.path.join(st, "x_seed=2"), 0.02, 0.0002)
    write_run(os.path.join(st, "reference_seed=1"), 0.0, 0.0)
    p = run("--summary", st, "--window", "50")
    check(p.returncode == 0, f"--summary: exit {p.returncode}: {p.stderr}")
    rows = [r for r in p.stdout.splitlines() if r.startswith("| s1 |")]
    check(len(rows) == 1, f"one arm expected (the reference left out), got {p.stdout}")
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    # study, arm, seeds, steps, ESS first, last, mm first, last, change, slope
    check(cells[1] == "x" and cells[2] == "2", f"arm and seeds: {cells}")
    check(cells[3] == "1-50, 51-100", f"windows: {cells[3]}")
    check(cells[4] == "1.0000 ± 0.0000", f"equal weights give ESS 1: {cells[4]}")
    # first window: a + b * 25.5 per seed (0.01255, 0.0251); last: a + b * 75.5
    check(cells[6] == "0.0188 ± 0.0063", f"first window: {cells[6]}")
    check(cells[7] == "0.0263 ± 0.0088", f"last window: {cells[7]}")
    check(cells[8] == "0.0075 ± 0.0025", f"change (0.005 and 0.01): {cells[8]}")
    check(cells[9] == "0.0150 ± 0.0050", f"slope per 100 steps (0.01 and 0.02): {cells[9]}")

    doc = os.path.join(tmp, "doc.md")
    with open(doc, "w") as f:
        f.write("before\n<!-- mismatch-windows:begin -->\nold\n<!-- mismatch-windows:end -->\nafter\n")
    p = run("--summary", st, "--check", doc)
    check(p.returncode == 1, f"--check of a stale block: exit {p.returncode}")
    p = run("--summary", st, "--write", doc)
    check(p.returncode == 0, f"--write: exit {p.returncode}: {p.stderr}")
    text = open(doc).read()
    check(text.startswith("before\n") and text.endswith("after\n") and "old" not in text,
          "--write replaces only the block")
    p = run("--summary", st, "--check", doc)
    check(p.returncode == 0, f"--check after --write: exit {p.returncode}: {p.stderr}")
    p = run(st, "--check", doc)
    check(p.returncode == 2 and re.search("--summary", p.stderr), "--check without --summary: exit 2")
    p = run("--summary", os.path.join(tmp, "nope"))
    check(p.returncode == 2, "a missing study directory: exit 2")
    # --coef: the informative completions' mean coefficient per run (1.01, 1.02), then theirs
    p = run("--coef", os.path.join(st, "x_seed=1"), os.path.join(st, "x_seed=2"))
    check(p.returncode == 0 and "mean coefficient 1.010000" in p.stdout
          and "mean over the 2 runs: 1.015000" in p.stdout, f"--coef: {p.stdout} {p.stderr}")
    print("test_mismatch_windows: pass")


if __name__ == "__main__":
    main()
