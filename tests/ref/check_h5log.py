#!/usr/bin/env python3
"""Independent read check of a dllm-rl run log (log.h5) with h5py.

Checks the schema of docs/DESIGN.md "The log" (dtypes, ranks, unlimited chunked
first dimension, consistent row counts per group, pads) on any log, and with
--test-values the exact values tests/test_h5log.c writes (its formulas are
re-implemented here). Produce the files with

    DLLM_H5LOG_EXPORT=DIR build/tests/test_h5log
    python3 tests/ref/check_h5log.py DIR/test_values.h5 --test-values
    python3 tests/ref/check_h5log.py DIR/demo.h5

Opens with SWMR read, as readers of a running (or killed) run must.
Exit status 0 when every check passes.
"""
import argparse
import sys

import h5py
import numpy as np

METRICS = [
    "reward_mean", "reward_std", "accuracy", "loss", "policy_kl", "clip_frac", "grad_norm",
    "lr", "alpha_raw", "alpha", "rho_ess", "s_rel", "delta", "s_div", "nu", "s_var", "k3",
    "log_w_mc_se", "frac_truncated", "frac_zeroed", "frac_nonfinite",
    "frac_zero_var_groups", "frac_masked_left", "t_rollout", "t_likelihood", "t_correction", "t_update", "t_sync", "t_log",
    "tokens_per_s", "rho_ess_prec", "rho_ess_cache", "delta_prec", "delta_cache",
]
# name: (dtype, row width: None 1-D, "P" prompt, "G" completion)
TRAJ = {
    "step": ("<i8", None), "prompt_index": ("<i8", None), "group": ("<i8", None),
    "prompt_tokens": ("<i4", "P"), "completion_tokens": ("<i4", "G"),
    "prompt_len": ("<i4", None), "completion_len": ("<i4", None),
    "reward": ("<f8", None), "advantage": ("<f8", None), "l_mu": ("<f8", None),
    "l_pi": ("<f8", None), "log_w": ("<f8", None), "coef": ("<f8", None),
    "log_w_se": ("<f8", None), "l_mu_exact": ("<f8", None),
    "token_log_ratio": ("<f4", "G"), "commit_step": ("<i2", "G"),
    "commit_prob": ("<f4", "G"),
}
ATTRS = ["config_yaml", "version", "git_revision", "device", "started"]

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def check_dset(f, name, dtype, rank):
    d = f[name]
    check(d.dtype == np.dtype(dtype), f"{name}: dtype {d.dtype}, expected {dtype}")
    check(d.ndim == rank, f"{name}: rank {d.ndim}, expected {rank}")
    check(d.maxshape[0] is None, f"{name}: first dimension not unlimited")
    check(d.chunks is not None, f"{name}: not chunked")
    return d


def check_schema(f):
    for a in ATTRS:
        check(a in f.attrs and isinstance(f.attrs[a], str), f"attribute {a} missing or not str")
    check("seed" in f.attrs and np.asarray(f.attrs["seed"]).dtype == np.int64, "seed not int64")
    rows = {check_dset(f, "steps/step", "<i8", 1).shape[0]}
    for m in METRICS:
        rows.add(check_dset(f, f"steps/{m}", "<f8", 1).shape[0])
    check(len(rows) == 1, f"/steps row counts differ: {rows}")
    P = f["trajectories/prompt_tokens"].shape[1]
    G = f["trajectories/completion_tokens"].shape[1]
    rows = set()
    for name, (dt, w) in TRAJ.items():
        d = check_dset(f, f"trajectories/{name}", dt, 1 if w is None else 2)
        if w is not None:
            check(d.shape[1] == (P if w == "P" else G), f"trajectories/{name}: width")
        rows.add(d.shape[0])
    check(len(rows) == 1, f"/trajectories row counts differ: {rows}")
    # Pads: token ids -1 and NaN past each row's length.
    t = f["trajectories"]
    plen, clen = t["prompt_len"][:], t["completion_len"][:]
    cols = np.arange(G)[None, :]
    past = cols >= clen[:, None]
    check(np.all(t["completion_tokens"][:][past] == -1), "completion_tokens pad is not -1")
    check(np.all(t["commit_step"][:][past] == -1), "commit_step pad is not -1")
    check(np.all(np.isnan(t["token_log_ratio"][:][past])), "token_log_ratio pad is not NaN")
    check(np.all(np.isnan(t["commit_prob"][:][past])), "commit_prob pad is not NaN")
    ppast = np.arange(P)[None, :] >= plen[:, None]
    check(np.all(t["prompt_tokens"][:][ppast] == -1), "prompt_tokens pad is not -1")
    S = f["mismatch_by_step/mean_abs_d"].shape[1]
    check_dset(f, "mismatch_by_step/step", "<i8", 1)
    check_dset(f, "mismatch_by_step/mean_abs_d", "<f8", 2)
    check(f["mismatch_by_step/step"].shape[0] == f["mismatch_by_step/mean_abs_d"].shape[0],
          "/mismatch_by_step row counts differ")
    for task in f["eval"]:
        r = {check_dset(f, f"eval/{task}/step", "<i8", 1).shape[0]}
        for k in ("accuracy", "accuracy_se", "reward_mean"):
            r.add(check_dset(f, f"eval/{task}/{k}", "<f8", 1).shape[0])
        check(len(r) == 1, f"/eval/{task} row counts differ")
    return P, G, S


def check_test_values(f):
    """The values of tests/test_h5log.c (append_full_step, salt 0, steps 1..N)."""
    P, G, S, R = 5, 7, 4, 3
    steps = f["steps/step"][:]
    n = len(steps)
    check(np.array_equal(steps, np.arange(1, n + 1)), "steps are not 1..N")
    for i, m in enumerate(METRICS):
        want = steps + i / 32.0
        if m == "policy_kl":
            want = np.full(n, np.nan)
        if m == "lr":
            want = np.where(steps < 3, np.nan, want)
        check(np.array_equal(f[f"steps/{m}"][:], want, equal_nan=True), f"steps/{m} values")
    t = f["trajectories"]
    rows = np.arange(n * R)
    s, r = 1 + rows // R, rows % R
    check(np.array_equal(t["step"][:], s), "trajectories/step")
    check(np.array_equal(t["prompt_index"][:], 100 * s + r), "prompt_index")
    check(np.array_equal(t["group"][:], r // 2), "group")
    plen, clen = 1 + (s + r) % P, (s * 3 + r) % (G + 1)
    check(np.array_equal(t["prompt_len"][:], plen), "prompt_len")
    check(np.array_equal(t["completion_len"][:], clen), "completion_len")
    tp, tg = np.arange(P)[None, :], np.arange(G)[None, :]
    tok = lambda tt: 1000 * s[:, None] + 10 * r[:, None] + tt
    check(np.array_equal(t["prompt_tokens"][:], np.where(tp < plen[:, None], tok(tp), -1)),
          "prompt_tokens")
    inside = tg < clen[:, None]
    check(np.array_equal(t["completion_tokens"][:], np.where(inside, tok(tg) + 500, -1)),
          "completion_tokens")
    ratio = np.where(tg % 3 == 2, np.nan,
                     (s[:, None] - r[:, None]).astype(np.float32) / np.float32(16)
                     + tg.astype(np.float32) / np.float32(128)).astype(np.float32)
    check(np.array_equal(t["token_log_ratio"][:], np.where(inside, ratio, np.nan),
                         equal_nan=True), "token_log_ratio")
    check(np.array_equal(t["commit_prob"][:],
                         np.where(inside, tg / np.float32(8), np.nan).astype(np.float32),
                         equal_nan=True), "commit_prob")
    check(np.array_equal(t["commit_step"][:], np.where(inside, (tg * 5 + r[:, None]) % S, -1)),
          "commit_step")
    for k, name in enumerate(["reward", "advantage", "l_mu", "l_pi", "log_w", "coef",
                                 "log_w_se"]):
        check(np.array_equal(t[name][:], s + r / 8.0 + k / 64.0), f"trajectories/{name}")
    mm = f["mismatch_by_step/mean_abs_d"][:]
    want = steps[:, None] / 4.0 + np.arange(S)[None, :]
    want[:, 1] = np.nan
    check(np.array_equal(mm, want, equal_nan=True), "mean_abs_d")
    e = f["eval/gsm8k"]
    check(np.array_equal(e["step"][:], [5, 10]), "eval step")
    check(np.array_equal(e["accuracy"][:], [0.05, 0.10]), "eval accuracy")
    check(np.array_equal(e["accuracy_se"][:], [0.01, 0.01]), "eval accuracy_se")
    check(np.array_equal(e["reward_mean"][:], [0.1, 0.2]), "eval reward_mean")
    check(f["eval/countdown/step"].shape[0] == 0, "countdown has evals")
    check(f.attrs["seed"] == 7 and f.attrs["started"] == "2025-01-02T03:04:05Z", "attributes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--test-values", action="store_true",
                    help="also check the exact values tests/test_h5log.c writes")
    args = ap.parse_args()
    with h5py.File(args.log, "r", libver="latest", swmr=True) as f:
        P, G, S = check_schema(f)
        if args.test_values:
            check_test_values(f)
        n = f["steps/step"].shape[0]
    for m in failures:
        print(f"{args.log}: FAIL {m}")
    print(f"{args.log}: {n} steps, P={P} G={G} S={S}: "
          f"{'ok' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
