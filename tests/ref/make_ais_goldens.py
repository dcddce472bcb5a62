"""Golden values for tests/unit/test_corrections.c and tests/unit/test_grpo.c.

ais.json: the mismatch corrections and AIS diagnostics of docs/METHOD.md §5, written
here directly from the definitions with numpy (weights as arrays, np.var for the
population variances, w~ = w / mean(w) explicitly), on random batches: light and
heavy-tailed log-weights (one beyond exp's range), N = 1, zero-variance
advantages, non-finite entries, every method x level, both combines, eta > 0
with a previous alpha, clamping, zeroed and negative (reversed) diagnostic weights,
cap .inf, and the estimator-noise correction (noise debias / none) with per-completion
standard errors of log w: lw~ = m + k (lw - m), k = sqrt(max(0, 1 - S/V)), applied
here to the log-weights themselves before ESS and nu are taken; the diagnostics'
population (informative completions, marked per batch, or all; an empty one keeps
alpha and makes the diagnostics NaN), both forms of nu (total over the capped
mean-one weights, excess) and the logistic gain.

loss.json: GRPO advantages (torch.std, unbiased) and the clipped-surrogate loss
of docs/METHOD.md §4 in PyTorch float64 with its autograd gradient, for both ratios,
both aggregations, beta 0 and > 0, clipped terms, unscored tokens and c_i = 0.

Non-finite numbers are written as the strings "nan", "inf", "-inf".
Usage: python3 tests/ref/make_ais_goldens.py [ais]  (writes tests/data/grpo/; with
`ais` only ais.json, which needs numpy alone)
"""
import json
import math
import os

import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "grpo")

METHODS = ["none", "is", "tis", "mis", "fixed", "ais"]
LEVELS = ["sequence", "geo", "token"]


def enc(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def enc_list(a):
    return [enc(x) for x in np.asarray(a, dtype=np.float64).ravel()]


def default_cfg():
    return dict(method="ais", level="sequence", cap=2.0, fixed_alpha=0.5, combine="linear",
                w_rel=1.0, w_div=1.0, w_var=1.0, tau_delta=0.05, bias=-4.0, gain=8.0, eta=0.0,
                alpha_min=0.0, alpha_max=1.0, noise="debias", population="informative",
                variance="total")


# ---------------------------------------------------------------- corrections

def units(cfg, log_w, lens, d):
    """Per-unit log-weights, their advantages' owner, and which units exist."""
    N, T = d.shape
    if cfg["level"] == "token":
        lw, owner = [], []
        for i in range(N):
            for t in range(T):
                if not np.isnan(d[i, t]):
                    lw.append(d[i, t])
                    owner.append(i)
        return np.array(lw, dtype=np.float64), np.array(owner, dtype=np.int64)
    lw = log_w / lens if cfg["level"] == "geo" else log_w.copy()
    return lw, np.arange(N)


def coefficient(cfg, alpha, lw):
    C = cfg["cap"]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(lw)
    fin = np.isfinite(lw)
    m = cfg["method"]
    if m == "none":
        c = np.ones_like(lw)
    elif m == "is":
        c = w.copy()
    elif m == "tis":
        c = np.minimum(w, C)
    elif m == "mis":
        c = np.where((w >= 1.0 / C) & (w <= C), w, 0.0)
    else:
        a = cfg["fixed_alpha"] if m == "fixed" else alpha
        c = (1.0 - a) + a * np.minimum(w, C)
    # a weight that overflows where it is used uncapped would make c +inf (or inf * 0)
    with np.errstate(invalid="ignore"):
        over = fin & np.isinf(w) & (m != "none") & ((m == "is") | math.isinf(C))
    c = np.where(fin & ~over, c, 0.0)
    trunc = fin & (w > C) if m in ("tis", "fixed", "ais") else np.zeros_like(fin)
    zeroed = fin & ~((w >= 1.0 / C) & (w <= C)) if m == "mis" else np.zeros_like(fin)
    return c, trunc, zeroed, over


def denoise(cfg, lw, lens, se):
    """De-noised log-weights of the finite units and frac_var_mc (docs/METHOD.md §5)."""
    if se is None or cfg["level"] == "token" or len(lw) == 0:
        return lw, 0.0, 1.0
    se_u = se / lens if cfg["level"] == "geo" else se
    se_u = se_u[np.isfinite(se_u)]
    m, V = np.mean(lw), np.var(lw)
    S = np.mean(se_u ** 2) if len(se_u) else 0.0
    frac = min(1.0, S / V) if V > 0 else 0.0
    k = 1.0
    if cfg["noise"] == "debias" and V > 0 and S > 0:
        k = math.sqrt(max(0.0, 1.0 - S / V))
    return m + k * (lw - m), frac, k


def diagnostics(cfg, alpha_prev, log_w, lens, d, adv, se=None, member=None):
    lw_all, owner = units(cfg, log_w, lens, d)
    N = d.shape[0]
    if member is None or cfg["population"] == "all":
        member = np.ones(N, dtype=bool)
    member = np.asarray(member, dtype=bool)
    pop = member[owner]  # the units the diagnostics see
    lw = lw_all[pop]
    own = owner[pop]
    fin = np.isfinite(lw)
    A = adv[own][fin]
    se_f = None
    if se is not None and cfg["level"] != "token":
        se_f = se[pop][fin]
    w_l, frac_var_mc, _ = denoise(cfg, lw[fin],
                                  lens[pop][fin] if cfg["level"] != "token" else None, se_f)
    n = len(w_l)
    out = {"frac_var_mc": frac_var_mc}
    nu_total = nu_excess = 1.0
    if n > 0:
        w = np.exp(w_l - w_l.max())  # ESS and nu do not depend on the scale of w
        ess = w.sum() ** 2 / (w ** 2).sum()
        out["ess"] = ess
        out["rho_ess"] = ess / n
        out["s_rel"] = (n - ess) / (n - 1) if n > 1 else 0.0
        wt = w / w.mean()
        out["w_cv"] = math.sqrt(max(np.mean(wt ** 2) - 1.0, 0.0))
        out["log_mean_w"] = math.log(w.mean()) + w_l.max()
        if not (A.max() == A.min() or w_l.max() == w_l.min()):
            a = A - A.mean()  # centred advantages
            nu_excess = np.var(wt * a) / (np.mean(wt ** 2) * np.var(A))
            # the end point's capped weights min(w, C) (w = exp(lw~)), at mean one
            C = cfg["cap"]
            with np.errstate(over="ignore"):
                m = np.exp(w_l - w_l.max()) if math.isinf(C) else np.minimum(np.exp(w_l), C)
            ct = m / m.mean()
            nu_total = np.mean(ct ** 2 * a ** 2) / np.mean(a ** 2)
    else:
        out.update(ess=0.0, rho_ess=0.0, s_rel=0.0, w_cv=0.0, log_mean_w=-math.inf)
    nu = nu_excess if cfg["variance"] == "excess" else nu_total
    out["nu"] = nu
    out["nu_total"] = nu_total
    out["nu_excess"] = nu_excess
    out["s_var"] = 1.0 - 1.0 / max(nu, 1.0)
    out["n"] = float(n)
    # mean |log w| over the population's completions with a finite log w (raw)
    alw = np.abs(log_w[member][np.isfinite(log_w[member])])
    out["abs_log_w"] = float(np.mean(alw)) if len(alw) else math.nan

    # divergence: completions excluded when their (sequence/geo) weight is non-finite
    means, k3 = [], []
    for i in range(d.shape[0]):
        if not member[i]:
            continue
        if cfg["level"] != "token" and not np.isfinite(lw_all[i]):
            continue
        row = d[i][np.isfinite(d[i])]
        if len(row):
            means.append(np.mean(np.abs(row)))
            k3.extend(np.exp(row) - 1.0 - row)
    out["delta"] = float(np.mean(means)) if means else 0.0
    out["k3"] = float(np.mean(k3)) if k3 else 0.0
    out["s_div"] = 1.0 - math.exp(-out["delta"] / cfg["tau_delta"])

    s = np.array([out["s_rel"], out["s_div"], out["s_var"]])
    lam = np.array([cfg["w_rel"], cfg["w_div"], cfg["w_var"]])
    score = float(lam @ s) / np.abs(lam).sum() if np.abs(lam).sum() > 0 else 0.0
    if cfg["combine"] == "logistic":
        a_raw = 1.0 / (1.0 + math.exp(-(cfg["bias"] + cfg["gain"] * score)))
    elif np.abs(lam).sum() == 0:
        a_raw = cfg["alpha_min"]
    else:
        a_raw = float(np.clip(score, 0.0, 1.0))
    out["empty"] = 0.0
    if not member.any() and len(lw_all) > 0:
        # no informative completion: nothing to correct, alpha stays; diagnostics missing
        for k in ("ess", "rho_ess", "s_rel", "delta", "k3", "s_div", "nu", "nu_total",
                  "nu_excess", "s_var", "w_cv", "log_mean_w", "frac_var_mc"):
            out[k] = math.nan
        a_raw = alpha_prev
        out["empty"] = 1.0
    out["members"] = float(member.sum())
    out["alpha_raw"] = a_raw
    a = cfg["eta"] * alpha_prev + (1 - cfg["eta"]) * a_raw
    out["alpha"] = float(np.clip(a, cfg["alpha_min"], cfg["alpha_max"]))

    lw = lw_all  # coefficients and their fractions: every unit
    fin = np.isfinite(lw)
    c, trunc, zeroed, over = coefficient(cfg, out["alpha"], lw)
    U = len(lw)
    out["frac_nonfinite"] = float((~fin).sum() + over.sum()) / U if U else 0.0
    out["frac_truncated"] = float(trunc.sum()) / U if U else 0.0
    out["frac_zeroed"] = float(zeroed.sum()) / U if U else 0.0
    if cfg["level"] == "token":
        ct = np.zeros_like(d)
        ct[~np.isnan(d)] = c
        out["coef_tok"] = ct
    else:
        out["coef"] = c
    return out


def grouped_adv(rng, n_groups, G):
    r = rng.integers(0, 3, size=(n_groups, G)).astype(np.float64)
    m = r.mean(axis=1, keepdims=True)
    s = r.std(axis=1, ddof=1, keepdims=True)
    A = np.where(s > 0, (r - m) / (s + 1e-6), 0.0)
    return A.ravel()


def make_batch(rng, N, T, lw_gen, d_scale, heavy=False):
    lens = rng.integers(1, T + 1, size=N)
    d = np.full((N, T), np.nan)
    for i in range(N):
        for t in range(lens[i]):
            if rng.random() < 0.85:  # some tokens never masked: not scored
                d[i, t] = (rng.standard_t(2.0) if heavy else rng.normal()) * d_scale
    return lw_gen(N), lens.astype(np.int64), d


def batches():
    rng = np.random.default_rng(20240611)
    out = []
    lw, lens, d = make_batch(rng, 12, 6, lambda n: rng.normal(0, 0.4, n), 0.05)
    out.append(("random", lw, lens, d, grouped_adv(rng, 3, 4), {}, 0.0))
    lw, lens, d = make_batch(rng, 12, 6, lambda n: rng.standard_t(1.5, n) * 3.0, 0.3, True)
    out.append(("heavy", lw, lens, d, grouped_adv(rng, 2, 6), {}, 0.0))
    lw = lw.copy()
    lw[3] = 750.0  # beyond exp's range: the diagnostics must rescale
    out.append(("overflow", lw, lens, d, grouped_adv(rng, 2, 6), {}, 0.0))
    lw, lens, d = make_batch(rng, 1, 5, lambda n: np.array([0.9]), 0.1)
    out.append(("n1", lw, lens, d, np.array([0.7]), {}, 0.0))
    lw, lens, d = make_batch(rng, 8, 5, lambda n: rng.normal(0, 0.5, n), 0.08)
    out.append(("zero_var_adv", lw, lens, d, np.zeros(8), {}, 0.0))
    lw, lens, d = make_batch(rng, 10, 5, lambda n: rng.normal(0, 0.6, n), 0.1)
    lw[1], lw[4], lw[7] = np.nan, np.inf, -np.inf
    d[2, 0], d[5, 0], d[8, 0] = np.inf, -np.inf, np.inf
    out.append(("nonfinite", lw, lens, d, grouped_adv(rng, 2, 5), {}, 0.0))
    lw, lens, d = make_batch(rng, 12, 6, lambda n: rng.normal(0, 0.7, n), 0.06)
    out.append(("eta_clamp", lw, lens, d, grouped_adv(rng, 3, 4),
                dict(eta=0.7, alpha_min=0.05, alpha_max=0.6, cap=1.5, fixed_alpha=0.3), 0.4))
    out.append(("weights_201", lw, lens, d, grouped_adv(rng, 3, 4),
                dict(w_rel=2.0, w_div=0.0, w_var=1.0, tau_delta=0.02, bias=-1.0, gain=3.0), 0.0))
    out.append(("weights_zero", lw, lens, d, grouped_adv(rng, 3, 4),
                dict(w_rel=0.0, w_div=0.0, w_var=0.0, alpha_min=0.1, bias=0.5), 0.0))
    # advantages correlated with the weights: nu well above 1
    lw, lens, d = make_batch(rng, 16, 4, lambda n: rng.normal(0, 1.0, n), 0.2)
    A = (lw - lw.mean()) / lw.std() + rng.normal(0, 0.2, 16)
    out.append(("correlated", lw, lens, d, A, dict(w_rel=0.5, w_div=1.5, w_var=3.0), 0.0))
    # the opposite reading of a diagnostic: negative weights, normalised by sum |l|
    out.append(("reversed", lw, lens, d, A, dict(w_rel=-1.0, w_div=0.5, w_var=2.0), 0.0))
    out.append(("reversed_all", lw, lens, d, A, dict(w_rel=-1.0, w_div=-1.0, w_var=-0.5,
                                                     alpha_min=0.02), 0.0))
    # C = .inf: fixed/ais at alpha = 1 are full IS, mis never zeroes; an lw past
    # exp's range then overflows the coefficient
    lw2 = lw.copy()
    lw2[5] = 720.0
    out.append(("cap_inf", lw2, lens, d, A, dict(cap=math.inf, alpha_min=1.0, fixed_alpha=1.0),
                0.0))
    return out


def members(rng, name, adv, N):
    """The informative completions of a batch: groups whose advantages are not all 0
    (rewards not all equal); batches without groups get a random mask, zero_var_adv
    none (an empty population)."""
    if name == "zero_var_adv":
        return np.zeros(N, dtype=bool)
    if name == "n1":
        return np.ones(N, dtype=bool)
    if name in ("random", "heavy", "overflow", "nonfinite", "eta_clamp", "weights_201",
                "weights_zero"):
        G = {12: 4 if name in ("random", "eta_clamp", "weights_201", "weights_zero") else 6,
             10: 5}[N]
        grp = adv.reshape(-1, G)
        return np.repeat(np.any(grp != 0, axis=1), G)
    return rng.random(N) < 0.6


def with_se(rng, out):
    """Standard errors of log w for every batch: zero, small or dominating noise."""
    res = []
    for (name, lw, lens, d, adv, over, alpha_prev) in out:
        N = len(lw)
        if name == "random":
            se = np.abs(rng.normal(0, 0.25, N))  # a large share of the variance
        elif name == "correlated":
            se = np.full(N, 3.0)  # S > V: k = 0, frac_var_mc = 1
        elif name == "eta_clamp":
            se = np.zeros(N)  # exact estimator: k = 1
        else:
            se = np.abs(rng.normal(0, 0.1, N))
        if name == "nonfinite":
            se[0] = np.nan  # an unknown error: left out of S
        res.append((name, lw, lens, d, adv, over, alpha_prev, se, members(rng, name, adv, N)))
    return res


def corrections_goldens():
    """Batches once; cases name a batch, a config and the expected results."""
    batch_list, cases = [], []
    rng = np.random.default_rng(20261123)
    for b, (name, lw, lens, d, adv, over, alpha_prev, se, mem) in enumerate(
            with_se(rng, batches())):
        N, T = d.shape
        batch_list.append(dict(name=name, N=N, T=T, log_w=enc_list(lw),
                               len=[int(x) for x in lens], d=enc_list(d), adv=enc_list(adv),
                               log_w_se=enc_list(se), member=[int(x) for x in mem]))
        for level in LEVELS:
            for combine in ("linear", "logistic"):
                for method in METHODS:
                    if combine == "logistic" and method not in ("none", "ais"):
                        continue
                    for noise, pop, var in (("debias", "informative", "total"),
                                            ("none", "informative", "total"),
                                            ("no_se", "informative", "total"),
                                            ("debias", "all", "total"),
                                            ("debias", "informative", "excess"),
                                            ("debias", "all", "excess")):
                        # every method under the defaults; the other noise, population
                        # and variance settings for ais only
                        if (noise, pop, var) != ("debias", "informative", "total") and \
                                method != "ais":
                            continue
                        cfg = default_cfg()
                        cfg.update(over)
                        cfg.update(method=method, level=level, combine=combine,
                                   noise="none" if noise == "none" else "debias",
                                   population=pop, variance=var)
                        ex = diagnostics(cfg, alpha_prev, lw, lens, d, adv,
                                         None if noise == "no_se" else se, mem)
                        ex = {k: (enc_list(v) if isinstance(v, np.ndarray) else enc(v))
                              for k, v in ex.items()}
                        cases.append(dict(name=f"{name}/{level}/{combine}/{method}/{noise}/"
                                               f"{pop}/{var}",
                                          batch=b, alpha_prev=alpha_prev,
                                          cfg={k: enc(v) if isinstance(v, float) else v
                                               for k, v in cfg.items()},
                                          use_se=noise != "no_se", expect=ex))
    return dict(batches=batch_list, cases=cases)


# ---------------------------------------------------------------- GRPO loss

def torch_loss(case):
    import torch

    N, T = case["N"], case["T"]
    f = lambda k: torch.tensor(np.asarray(case[k], dtype=np.float64))  # noqa: E731
    A, c, eps, beta = f("adv"), f("coef"), case["clip_eps"], case["beta"]
    lp = f("logp_theta").reshape(N, T)
    maskf = (~torch.isnan(lp)).double()
    n_tok = maskf.sum(1)
    seq_mean = case["agg"] == "seq_mean"
    # per-token log-probs as a leaf: the token ratio and the KL differentiate them
    lp_leaf = torch.nan_to_num(lp).clone().requires_grad_(True)
    lt = None
    if case["ratio"] == "sequence":
        lt = f("l_theta").clone().requires_grad_(True)
        L = f("len")
        r = torch.exp((lt - f("l_old")) / L)
        S = torch.min(r * A, torch.clamp(r, 1 - eps, 1 + eps) * A)
        surr = (c * S).mean() if seq_mean else (L * c * S).sum() / L.sum()
        clipped = ((r > 1 + eps) & (A > 0)) | ((r < 1 - eps) & (A < 0))
        clip_frac = clipped.double().mean()
        ratio_mean = r.mean()
    else:
        lo = torch.nan_to_num(f("logp_old").reshape(N, T))
        r = torch.exp(lp_leaf - lo)
        Ab = A[:, None]
        S = torch.min(r * Ab, torch.clamp(r, 1 - eps, 1 + eps) * Ab)
        term = c[:, None] * S * maskf
        surr = (term.sum(1) / n_tok.clamp(min=1)).mean() if seq_mean else term.sum() / maskf.sum()
        clipped = (((r > 1 + eps) & (Ab > 0)) | ((r < 1 - eps) & (Ab < 0))).double() * maskf
        clip_frac = clipped.sum() / maskf.sum()
        ratio_mean = (r * maskf).sum() / maskf.sum()
    ref = torch.nan_to_num(f("logp_ref").reshape(N, T))
    x = ref - lp_leaf
    k3 = (torch.exp(x) - x - 1) * maskf
    kl = (k3.sum(1) / n_tok.clamp(min=1)).mean() if seq_mean else k3.sum() / maskf.sum()
    loss = -surr + beta * kl
    loss.backward()
    out = dict(loss=loss.item(), surrogate=surr.item(), policy_kl=kl.item(),
               clip_frac=clip_frac.item(), ratio_mean=ratio_mean.item())
    out["grad_logp"] = enc_list(lp_leaf.grad.numpy() * maskf.numpy())
    if lt is not None:
        out["grad_l"] = enc_list(lt.grad.numpy())
    return out


def loss_cases():
    rng = np.random.default_rng(7)
    cases = []
    N, T = 8, 5
    for ratio in ("sequence", "token"):
        for agg in ("seq_mean", "token_mean"):
            for beta in (0.0, 0.04):
                lens = rng.integers(1, T + 1, size=N)
                lp = np.full((N, T), np.nan)
                for i in range(N):
                    lp[i, :lens[i]] = rng.normal(-2.0, 1.0, lens[i])
                lp[2, 0] = np.nan  # an unscored token inside the completion
                lp[5, :] = np.nan  # a sequence with no scored token
                lo = lp + rng.normal(0, 0.25, (N, T))  # clips some terms, not most
                ref = lp + rng.normal(0, 0.3, (N, T))
                l_theta = rng.normal(-10, 3, N)
                l_old = l_theta + rng.normal(0, 0.15, N) * lens
                adv = rng.normal(0, 1, N)
                adv[3] = 0.0
                # completion 0 always in the clipped region (r > 1 + eps, A > 0)
                adv[0] = abs(adv[0]) + 0.1
                l_old[0] = l_theta[0] - 0.5 * lens[0]
                lo[0, 0] = lp[0, 0] - 0.5
                coef = rng.uniform(0.2, 2.0, N)
                coef[1] = 0.0  # zeroed by the correction: still in the denominator
                case = dict(ratio=ratio, agg=agg, beta=beta, clip_eps=0.2, N=N, T=T,
                            len=[int(x) for x in lens], adv=enc_list(adv), coef=enc_list(coef),
                            l_theta=enc_list(l_theta), l_old=enc_list(l_old),
                            logp_theta=enc_list(lp), logp_old=enc_list(lo),
                            logp_ref=enc_list(ref))
                case["expect"] = torch_loss(case)
                cases.append(case)
    # advantages: torch.std is the unbiased (N - 1) estimate
    import torch
    r = torch.tensor(rng.integers(0, 4, size=(5, 6)).astype(np.float64))
    r[2] = 1.0  # zero-variance group
    std = r.std(dim=1, keepdim=True)
    adv_std = torch.where(std > 0, (r - r.mean(1, keepdim=True)) / (std + 1e-6), 0.0)
    adv_none = torch.where(std > 0, r - r.mean(1, keepdim=True), 0.0)
    advantages = dict(groups=5, G=6, rewards=enc_list(r.numpy()),
                      std=enc_list(adv_std.numpy()), none=enc_list(adv_none.numpy()),
                      zero_var=1)
    return cases, advantages


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "ais.json"), "w") as fh:
        json.dump(corrections_goldens(), fh, separators=(",", ":"))
        fh.write("\n")
    if sys.argv[1:] == ["ais"]:
        return
    cases, adv = loss_cases()
    with open(os.path.join(OUT, "loss.json"), "w") as fh:
        json.dump(dict(cases=cases, advantages=adv), fh, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main()
