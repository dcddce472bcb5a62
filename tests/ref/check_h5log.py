#!/usr/bin/env python3
"""Independent read check of a dllm-rl run log (log.h5) with h5py.

Checks the schema of docs/DESIGN.md "The log" (dtypes, ranks, unlimited chunked
first dimension, consistent row counts per group, pads) on any log, and with
--test-values the exact values tests/unit/test_h5log.c writes (its formulas are
re-implemented here). Produce the files with

    DLLM_H5LOG_EXPORT=DIR build/tests/test_h5log
    python3 tests/ref/check_h5log.py DIR/test_values.h5 --test-values
    python3 tests/ref/check_h5log.py DIR/demo.h5

With --recompute (a log of `dllm-rl train` with log.trajectories true) every AIS
diagnostic, alpha and coefficient of every step is recomputed from the logged
trajectories with docs/METHOD.md section 5 written out here in float64 (the
population, both forms of nu, the linear and logistic combines with the gain, the
estimator-noise correction), and so are the two populations' ESS, delta and mean
|log w|, the log-weight quantiles, the completion length, the entropy (from the
logged per-token entropies) and pass@k (from the logged outcomes and groups):

    python3 tests/ref/check_h5log.py runs/NAME/log.h5 --recompute

Opens with SWMR read, as readers of a running (or killed) run must.
Exit status 0 when every check passes.
"""
import argparse
import math
import sys

import h5py
import numpy as np

METRICS = [
    "reward_mean", "reward_std", "accuracy", "loss", "policy_kl", "clip_frac", "grad_norm",
    "lr", "alpha_raw", "alpha", "rho_ess", "s_rel", "delta", "s_div", "nu", "s_var", "k3",
    "log_w_mc_se", "frac_truncated", "frac_zeroed", "frac_nonfinite",
    "frac_zero_var_groups", "frac_masked_left", "t_rollout", "t_likelihood", "t_correction", "t_update", "t_sync", "t_log",
    "tokens_per_s", "frac_var_mc", "rho_ess_prec", "rho_ess_cache", "delta_prec", "delta_cache",
    "nu_total", "nu_excess", "diag_empty", "frac_informative",
    "rho_ess_informative", "delta_informative", "abs_log_w_informative", "rho_ess_all",
    "delta_all", "abs_log_w_all", "log_w_q05", "log_w_q50", "log_w_q95", "entropy",
    "completion_len", "grad_cosine", "grad_norm_ratio", "frac_dropped",
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
    "commit_prob": ("<f4", "G"), "correct": ("<f8", None), "token_entropy": ("<f4", "G"),
}
ATTRS = ["config_yaml", "version", "git_revision", "device", "started", "machine"]

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
    check(np.all(np.isnan(t["token_entropy"][:][past])), "token_entropy pad is not NaN")
    if "pass_at_k" in f:
        check_dset(f, "pass_at_k/step", "<i8", 1)
        check_dset(f, "pass_at_k/value", "<f8", 2)
        check(f["pass_at_k/step"].shape[0] == f["pass_at_k/value"].shape[0],
              "/pass_at_k row counts differ")
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
    """The values of tests/unit/test_h5log.c (append_full_step, salt 0, steps 1..N)."""
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


# ---------------------------------------------------------------- recompute

def parse_config(text):
    """The effective config the log carries (dllm-rl's own dump: nested two-space
    mappings of scalars and flow lists) as a flat dict of dotted keys."""
    out, stack = {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        key, _, val = line.strip().partition(":")
        stack = stack[:depth] + [key]
        val = val.strip()
        if not val:
            continue
        if val.startswith('"'):
            v = val[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        elif val in ("true", "false"):
            v = val == "true"
        elif val.startswith("["):
            v = [x.strip() for x in val[1:-1].split(",") if x.strip()]
        elif val in (".inf", "-.inf"):
            v = math.inf if val == ".inf" else -math.inf
        else:
            try:
                v = int(val)
            except ValueError:
                v = float(val)
        out[".".join(stack)] = v
    return out


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def diagnose(c, lw_units, owner, member, adv, se, d_rows, log_w, lens, alpha_prev):
    """METHOD.md section 5 over the population member (per completion), float64.
    lw_units/owner: the units' log-weights and completions; d_rows: per-token log-ratios
    (NaN unscored); returns a dict of the diagnostics and alpha."""
    level, C = c["correction.level"], float(c["correction.cap"])
    pop = member[owner]
    lw, own = lw_units[pop], owner[pop]
    fin = np.isfinite(lw)
    lwf, A = lw[fin], adv[own][fin]
    n = len(lwf)
    out = {"n": n, "members": int(member.sum())}
    k = 1.0
    frac_var_mc = 0.0
    if se is not None and level != "token" and n > 0:
        se_u = (se / lens if level == "geo" else se)[member][np.isfinite(log_w[member])]
        se_u = se_u[np.isfinite(se_u)]
        m, V = lwf.mean(), lwf.var()
        S = np.mean(se_u ** 2) if len(se_u) else 0.0
        frac_var_mc = min(1.0, S / V) if V > 0 else 0.0
        if c["correction.ais.noise"] == "debias" and V > 0 and S > 0:
            k = math.sqrt(max(0.0, 1.0 - S / V))
        lwf = m + k * (lwf - m)
    out["frac_var_mc"] = frac_var_mc
    nu_t = nu_x = 1.0
    if n > 0:
        w = np.exp(lwf - lwf.max())
        ess = w.sum() ** 2 / (w ** 2).sum()
        out["rho_ess"] = ess / n
        out["s_rel"] = (n - ess) / (n - 1) if n > 1 else 0.0
        if not (A.max() == A.min() or lwf.max() == lwf.min() or k == 0.0):
            a = A - A.mean()
            wt = w / w.mean()
            nu_x = np.var(wt * a) / (np.mean(wt ** 2) * np.var(A))
            with np.errstate(over="ignore"):
                mcap = np.exp(lwf - lwf.max()) if math.isinf(C) else np.minimum(np.exp(lwf), C)
            ct = mcap / mcap.mean()
            nu_t = np.mean(ct ** 2 * a ** 2) / np.mean(a ** 2)
    else:
        out["rho_ess"], out["s_rel"] = 0.0, 0.0
    out["nu_total"], out["nu_excess"] = nu_t, nu_x
    nu = nu_x if c["correction.ais.variance"] == "excess" else nu_t
    out["nu"] = nu
    out["s_var"] = 1.0 - 1.0 / max(nu, 1.0)
    means, k3 = [], []
    lw_seq = log_w / lens if level == "geo" else log_w
    for i in np.nonzero(member)[0]:
        if level != "token" and not np.isfinite(lw_seq[i]):
            continue
        row = d_rows[i][np.isfinite(d_rows[i])]
        if len(row):
            means.append(np.mean(np.abs(row)))
            k3.extend(np.exp(row) - 1.0 - row)
    out["delta"] = float(np.mean(means)) if means else 0.0
    out["k3"] = float(np.mean(k3)) if k3 else 0.0
    out["s_div"] = 1.0 - math.exp(-out["delta"] / float(c["correction.ais.tau_delta"]))
    alw = np.abs(log_w[member][np.isfinite(log_w[member])])
    out["abs_log_w"] = float(np.mean(alw)) if len(alw) else math.nan
    lam = np.array([float(c["correction.ais.weights." + x])
                    for x in ("reliability", "divergence", "variance")])
    sc = np.array([out["s_rel"], out["s_div"], out["s_var"]])
    score = float(lam @ sc) / np.abs(lam).sum() if np.abs(lam).sum() > 0 else 0.0
    if c["correction.ais.combine"] == "logistic":
        raw = sigmoid(float(c["correction.ais.bias"]) + float(c["correction.ais.gain"]) * score)
    elif np.abs(lam).sum() == 0:
        raw = float(c["correction.ais.alpha_min"])
    else:
        raw = min(max(score, 0.0), 1.0)
    out["empty"] = 0.0
    if not member.any():
        for key in ("rho_ess", "s_rel", "delta", "k3", "s_div", "nu", "nu_total", "nu_excess",
                    "s_var", "frac_var_mc"):
            out[key] = math.nan
        raw, out["empty"] = alpha_prev, 1.0
    eta = float(c["correction.ais.eta"])
    out["alpha_raw"] = raw
    out["alpha"] = min(max(eta * alpha_prev + (1 - eta) * raw,
                           float(c["correction.ais.alpha_min"])),
                       float(c["correction.ais.alpha_max"]))
    return out


def coefficients(c, alpha, lw):
    """Per unit: c_i, truncated, zeroed, non-finite (METHOD.md section 5)."""
    C, m = float(c["correction.cap"]), c["correction.method"]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(lw)
    fin = np.isfinite(lw)
    if m == "none":
        co = np.ones_like(lw)
    elif m == "is":
        co = w.copy()
    elif m == "tis":
        co = np.minimum(w, C)
    elif m == "mis":
        co = np.where((w >= 1.0 / C) & (w <= C), w, 0.0)
    else:
        a = float(c["correction.fixed_alpha"]) if m == "fixed" else alpha
        co = 1.0 + a * (np.minimum(w, C) - 1.0)
    with np.errstate(invalid="ignore"):
        over = fin & np.isinf(w) & (m != "none") & ((m == "is") | math.isinf(C))
    co = np.where(fin & ~over, co, 0.0)
    trunc = fin & (w > C) if m in ("tis", "fixed", "ais") else np.zeros_like(fin)
    zeroed = fin & ~((w >= 1.0 / C) & (w <= C)) if m == "mis" else np.zeros_like(fin)
    return co, trunc, zeroed, ~fin | over


def pass_at_k(correct, groups, G):
    """Mean over groups of 1 - C(G - c, k) / C(G, k), k = 1..G."""
    vals = []
    for g in np.unique(groups):
        cnum = int((correct[groups == g] > 0.5).sum())
        vals.append([1.0 - (math.comb(G - cnum, k) / math.comb(G, k)) for k in range(1, G + 1)])
    return np.mean(vals, axis=0)


def close(got, want, rel):
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return abs(got - want) <= rel * max(1.0, abs(want))


def check_recompute(f):
    """Every step's diagnostics, alpha and coefficients from the trajectories."""
    c = parse_config(f.attrs["config_yaml"])
    G = int(c["rollout.group_size"])
    t = f["trajectories"]
    tstep = t["step"][:]
    steps = f["steps/step"][:]
    col = {k: t[k][:] for k in ("group", "reward", "advantage", "log_w", "log_w_se", "coef",
                                  "completion_len", "correct")}
    dtok = t["token_log_ratio"][:].astype(np.float64)
    ent = t["token_entropy"][:].astype(np.float64)
    m = {k: f["steps/" + k][:] for k in METRICS}
    pk = f["pass_at_k/value"][:] if "pass_at_k" in f else None
    pk_step = f["pass_at_k/step"][:] if "pass_at_k" in f else None
    level = c["correction.level"]
    alpha_prev = 0.0
    checked = 0
    for si, s in enumerate(steps):
        rows = np.nonzero(tstep == s)[0]
        if len(rows) == 0:
            alpha_prev = m["alpha"][si]
            continue
        grp, rew = col["group"][rows], col["reward"][rows]
        adv, log_w, se = col["advantage"][rows], col["log_w"][rows], col["log_w_se"][rows]
        lens = col["completion_len"][rows].astype(np.float64)
        d = dtok[rows]
        informative = np.array([np.unique(rew[grp == g]).size > 1 for g in grp])
        every = np.ones(len(rows), dtype=bool)
        if level == "token":
            owner = np.nonzero(~np.isnan(d))[0]
            lw_units = d[~np.isnan(d)]
        else:
            owner = np.arange(len(rows))
            lw_units = log_w / lens if level == "geo" else log_w.copy()
        use_se = c["correction.estimator"] == "elbo" or np.any(se != 0)
        pop = informative if c["correction.ais.population"] == "informative" else every
        args = (lw_units, owner)
        tail = (adv, se if use_se else None, d, log_w, lens, alpha_prev)
        g = diagnose(c, *args, pop, *tail)
        gi = diagnose(c, *args, informative, *tail)
        ga = diagnose(c, *args, every, *tail)
        # token-level log-ratios are stored as float32: what rests on them matches to that
        rel_d = 1e-5
        rel_w = 1e-5 if level == "token" else 1e-9
        want = {"alpha_raw": (g["alpha_raw"], rel_w), "alpha": (g["alpha"], rel_w),
                "rho_ess": (g["rho_ess"], rel_w), "s_rel": (g["s_rel"], rel_w),
                "delta": (g["delta"], rel_d), "s_div": (g["s_div"], rel_d),
                "k3": (g["k3"], rel_d), "nu": (g["nu"], rel_w), "s_var": (g["s_var"], rel_w),
                "nu_total": (g["nu_total"], rel_w), "nu_excess": (g["nu_excess"], rel_w),
                "frac_var_mc": (g["frac_var_mc"], rel_w), "diag_empty": (g["empty"], 0),
                "frac_informative": (float(informative.mean()), 1e-12),
                "rho_ess_informative": (gi["rho_ess"], rel_w),
                "delta_informative": (gi["delta"], rel_d),
                "abs_log_w_informative": (gi["abs_log_w"], 1e-12),
                "rho_ess_all": (ga["rho_ess"], rel_w), "delta_all": (ga["delta"], rel_d),
                "abs_log_w_all": (ga["abs_log_w"], 1e-12),
                "completion_len": (float(lens.mean()), 1e-12)}
        fin_lw = log_w[np.isfinite(log_w)]
        if len(fin_lw):
            for name, q in (("log_w_q05", 5), ("log_w_q50", 50), ("log_w_q95", 95)):
                want[name] = (float(np.percentile(fin_lw, q)), 1e-12)
        e = ent[rows]
        e = e[np.isfinite(e)]
        if len(e):
            want["entropy"] = (float(e.mean()), 1e-6)  # float32 per token
        for name, (v, rel) in want.items():
            got = float(m[name][si])
            check(close(got, float(v), rel), f"step {s}: {name} = {got!r}, recomputed {v!r}")
        co, trunc, zeroed, nonfin = coefficients(c, m["alpha"][si], lw_units)
        U = len(lw_units)
        if U:
            check(close(float(m["frac_truncated"][si]), trunc.sum() / U, 1e-12),
                  f"step {s}: frac_truncated")
            check(close(float(m["frac_zeroed"][si]), zeroed.sum() / U, 1e-12),
                  f"step {s}: frac_zeroed")
        if level == "token":
            ct = np.zeros_like(d)
            ct[~np.isnan(d)] = co
            # the logged coefficient is the mean of the scored tokens' coefficients
            per = np.array([ct[i][~np.isnan(d[i])].mean() if np.any(~np.isnan(d[i])) else 0.0
                            for i in range(len(rows))])
        else:
            per = co
        # grpo.random_drop zeroes whole completions after the correction: those rows are
        # 0 in the log, and the step's frac_dropped counts at least the visible ones
        logged = col["coef"][rows]
        if float(c.get("grpo.random_drop", 0) or 0) > 0:
            gone = (logged == 0) & (per != 0)
            check(float(m["frac_dropped"][si]) >= gone.sum() / len(rows) - 1e-12,
                  f"step {s}: frac_dropped below the zeroed coefficients")
            per = np.where(logged == 0, 0.0, per)
        else:
            check(not float(m["frac_dropped"][si]) > 0, f"step {s}: frac_dropped without the key")
        if level == "token":
            ok = np.allclose(logged, per, rtol=1e-5, atol=1e-6)
        else:
            ok = np.allclose(logged, per, rtol=1e-12, atol=1e-14)
        check(ok, f"step {s}: coefficients")
        if pk is not None:
            r = np.nonzero(pk_step == s)[0]
            check(len(r) == 1 and np.allclose(pk[r[0]], pass_at_k(col["correct"][rows], grp, G),
                                              rtol=1e-12, atol=1e-15),
                  f"step {s}: pass_at_k")
        # the next step starts from this step's logged alpha, so an error is its own
        alpha_prev = m["alpha"][si]
        checked += 1
    check(checked > 0, "no step with trajectories to recompute")
    return checked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--test-values", action="store_true",
                    help="also check the exact values tests/unit/test_h5log.c writes")
    ap.add_argument("--recompute", action="store_true",
                    help="recompute every AIS diagnostic, alpha, coefficient, pass@k and the "
                         "entropy of a train log from its trajectories")
    args = ap.parse_args()
    with h5py.File(args.log, "r", libver="latest", swmr=True) as f:
        P, G, S = check_schema(f)
        if args.test_values:
            check_test_values(f)
        if args.recompute:
            k = check_recompute(f)
            print(f"{args.log}: recomputed {k} steps from their trajectories")
        n = f["steps/step"].shape[0]
    for m in failures:
        print(f"{args.log}: FAIL {m}")
    print(f"{args.log}: {n} steps, P={P} G={G} S={S}: "
          f"{'ok' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
