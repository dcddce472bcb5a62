#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with TensorBoard's own reader and compares
every scalar with what the run logged.

    python3 check_tensorboard.py DLLM_RL RUN_DIR

A train run (RUN_DIR/log.h5): every tag steps/<metric> against `DLLM_RL inspect
RUN_DIR --csv` (each non-empty field is a point at its step whose value is the
field rounded to float32; an empty field, a metric not computed, has no point),
and every tag eval/<task>/<name> against /eval/<task>/<name> of log.h5 (read with
h5py). An sft run (RUN_DIR/sft_log.jsonl): every tag sft/<name> against `inspect
--csv` the same way. No other scalar tag may exist, and no step may appear twice
(a resumed run's values replace the earlier ones from its first step on).
Exit status: 0 all equal, 1 a mismatch (listed), 2 bad arguments or no event file.
"""
import csv
import io
import logging
import math
import os
import subprocess
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def expected_from_csv(binary, run_dir, prefix):
    out = subprocess.run([binary, "inspect", run_dir, "--csv"], check=True,
                         capture_output=True, text=True).stdout
    rows = list(csv.reader(io.StringIO(out)))
    header, body = rows[0], rows[1:]
    if header[0] != "step":
        sys.exit(f"check_tensorboard: inspect --csv: first column {header[0]!r}, not step")
    want = {}
    for row in body:
        step = int(float(row[0]))
        for name, field in zip(header[1:], row[1:]):
            if field != "":
                want.setdefault(prefix + name, []).append((step, np.float32(float(field))))
    return want, len(body)


def expected_evals(run_dir):
    import h5py
    want = {}
    with h5py.File(os.path.join(run_dir, "log.h5"), "r", swmr=True) as f:
        for task in f.get("eval", {}):
            g = f["eval"][task]
            n = min(len(g[k]) for k in g)  # complete rows only, as the log's readers count
            steps = g["step"][:n]
            for name in ("accuracy", "accuracy_se", "reward_mean"):
                vals = g[name][:n]
                pts = [(int(s), np.float32(v)) for s, v in zip(steps, vals) if math.isfinite(v)]
                if pts:
                    want[f"eval/{task}/{name}"] = pts
    return want


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, run_dir = sys.argv[1], sys.argv[2]
    files = [f for f in os.listdir(run_dir) if "tfevents" in f]
    if not files:
        print(f"check_tensorboard: {run_dir}: no event file", file=sys.stderr)
        return 2
    if os.path.exists(os.path.join(run_dir, "log.h5")):
        want, nrows = expected_from_csv(binary, run_dir, "steps/")
        want.update(expected_evals(run_dir))
    else:
        want, nrows = expected_from_csv(binary, run_dir, "sft/")

    # the reader reports each restart marker it honours as a warning: expected here
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    got = {tag: [(e.step, np.float32(e.value)) for e in acc.Scalars(tag)]
           for tag in acc.Tags()["scalars"]}

    bad = []
    for tag in sorted(set(want) | set(got)):
        w, g = want.get(tag), got.get(tag)
        if w is None:
            bad.append(f"{tag}: in the event files, not in the log")
            continue
        if g is None:
            bad.append(f"{tag}: in the log ({len(w)} values), not in the event files")
            continue
        steps = [s for s, _ in g]
        if len(set(steps)) != len(steps):
            bad.append(f"{tag}: a step appears twice: {steps}")
            continue
        if [s for s, _ in w] != steps:
            bad.append(f"{tag}: steps {steps} in the event files, {[s for s, _ in w]} in the log")
            continue
        for (s, a), (_, b) in zip(g, w):
            if a.tobytes() != b.tobytes():
                bad.append(f"{tag} step {s}: {a!r} in the event files, {b!r} in the log")
    npoints = sum(len(v) for v in got.values())
    if bad:
        for line in bad[:40]:
            print("check_tensorboard: " + line, file=sys.stderr)
        print(f"check_tensorboard: {run_dir}: {len(bad)} mismatches", file=sys.stderr)
        return 1
    print(f"check_tensorboard: {run_dir}: {len(files)} event files, {len(got)} tags, "
          f"{npoints} values over {nrows} logged steps, all equal to the log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
