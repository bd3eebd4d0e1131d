"""Reproduction: l2-norm vs least-squares input-output learning under sparse attacks.

For every memory length ``L`` and attack probability ``p``, ``trials`` independent
data sets are simulated from one random Hammerstein system
(:func:`jaxsci.dynamics.sysid.make_system`: stable, partially observed, nonlinear
in correlated, non-zero-mean, non-Gaussian inputs), with the outputs attacked at
Bernoulli(``p``) times by an adversary that uses the input history. Both
estimators are fitted on the same data and evaluated on a fresh clean trajectory
(relative RMS prediction error). The grid of ``(p, trial)`` at one ``L`` is one
:func:`jaxsci.core.sweep` call; each ``L`` changes shapes, so it compiles once.

Claims measured (the paper's): the l2-norm estimator's error decays with ``L`` and
stays small while ``p`` is below a threshold, where least squares fails; past the
threshold it breaks down. ``empirical_p_threshold`` is the smallest ``p`` where the
median l2 error crosses ``breakdown_level`` (linear interpolation on the ``p`` grid),
at the largest ``L``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric, product_grid, succeeded, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.dynamics import sysid as sid

__all__ = ["SysidConfig", "CONFIGS", "EXPERIMENT", "run", "crossing_p"]

# The claims' "below the threshold" range (the paper gives no number for p*; these are
# the attack probabilities the trend test has always read).
SAFE_P_MAX = 0.3  # l2 stays accurate for 0 < p <= SAFE_P_MAX
LS_FAIL_P = (0.1, 0.3)  # least squares is worse than predicting 0 on this range


@dataclasses.dataclass(frozen=True)
class SysidConfig:
    n_x: int = 6  # state dimension (partially observed: n_y < n_x)
    n_y: int = 3  # outputs: the l2-norm estimator's residuals are vectors in R^{n_y}
    n_u: int = 2  # input dimension
    m: int = 8  # random features per lag
    rho: float = 0.6  # spectral radius of A: memory decays like rho^L
    t_len: int = 2000  # training samples
    t_test: int = 2000  # clean test samples
    lengths: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 10)  # memory lengths L
    probs: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
    trials: int = 4
    noise: float = 0.05  # benign noise std at attack-free times
    input_mean: float = 0.5  # non-zero-mean inputs
    input_corr: float = 0.7  # AR(1) correlation of the inputs
    attack_gain: float = 3.0  # size of Delta (the wrong model the adversary pushes)
    attack_mean: float = 4.0  # size of the attack's non-zero mean
    attack_scale: float = 2.0  # size of its correlated random part
    attack_corr: float = 0.8  # AR(1) correlation of the attack's random part
    breakdown_level: float = 1.0  # error above which an estimate is worse than predicting 0
    fixed_p: float = 0.2  # attack probability of the error-vs-L panel
    max_iter: int = 200  # IRLS iterations

    def __post_init__(self):
        for name in ("n_x", "n_y", "n_u", "m", "trials", "max_iter"):
            check_int(name, getattr(self, name), min=1)
        check_int("t_len", self.t_len, min=4)
        check_int("t_test", self.t_test, min=4)
        check_scalar("rho", self.rho, ge=0.0, lt=1.0)
        check_scalar("noise", self.noise, ge=0.0)
        check_scalar("input_mean", self.input_mean)
        check_scalar("input_corr", self.input_corr, ge=0.0, lt=1.0)
        check_scalar("attack_gain", self.attack_gain, ge=0.0)
        check_scalar("attack_mean", self.attack_mean, ge=0.0)
        check_scalar("attack_scale", self.attack_scale, ge=0.0)
        check_scalar("attack_corr", self.attack_corr, ge=0.0, lt=1.0)
        check_scalar("breakdown_level", self.breakdown_level, gt=0.0)
        if not self.lengths or not self.probs:
            raise ValueError("lengths and probs must be non-empty")
        for v in self.lengths:
            check_int("lengths[i]", v, min=1, max=min(self.t_len, self.t_test) - 2)
        for v in self.probs:
            check_scalar("probs[i]", v, ge=0.0, le=1.0)
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"lengths must be strictly increasing, got {self.lengths}")
        if list(self.probs) != sorted(set(self.probs)):
            raise ValueError(f"probs must be strictly increasing, got {self.probs}")
        if self.fixed_p not in self.probs:
            raise ValueError(f"fixed_p must be one of probs {self.probs}, got {self.fixed_p}")
        d = max(self.lengths) * self.m
        if self.t_len - max(self.lengths) < d:
            raise ValueError(f"t_len = {self.t_len} leaves fewer samples than the "
                             f"{d} features of L = {max(self.lengths)}; raise t_len")


CONFIGS = {
    "smoke": SysidConfig(t_len=200, t_test=200, lengths=(2,), probs=(0.0, 0.2, 0.6),
                         trials=2, max_iter=50),
    "quick": SysidConfig(),
    # Paper-scale sweep (GPU): longer records, finer grids, more trials.
    "full": SysidConfig(
        t_len=20000, t_test=5000, lengths=(1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20),
        probs=tuple(round(0.025 * i, 3) for i in range(0, 33)), trials=32,
    ),
}


def _problem(config: SysidConfig, key: jax.Array):
    c = config
    k_sys, k_att, k_test, k_runs = jax.random.split(key, 4)
    system = sid.make_system(k_sys, c.n_x, c.n_y, c.n_u, c.m, c.rho)
    ka1, ka2 = jax.random.split(k_att)
    mean_dir = jax.random.normal(ka2, (c.n_y,))
    attack = sid.Attack(
        delta=c.attack_gain * jax.random.normal(ka1, (c.n_y, c.m)),
        mean=c.attack_mean * mean_dir / jnp.linalg.norm(mean_dir),
        scale=c.attack_scale,
        corr=c.attack_corr,
    )
    return system, attack, k_test, k_runs


def simulate_length(config: SysidConfig, key: jax.Array, L: int) -> dict[str, np.ndarray]:
    """Both estimators' test errors on the ``(p, trial)`` grid at memory ``L`` (one sweep)."""
    c = config
    system, attack, k_test, k_runs = _problem(c, key)
    u_test = sid.ar_inputs(k_test, c.t_test, c.n_u, c.input_mean, c.input_corr)
    phi_test, _, y_test, _ = sid.simulate(k_test, system, u_test, L, 0.0, attack, 0.0)
    trunc = sid.prediction_error(sid.markov_parameters(system, L), phi_test, y_test)
    probs = np.asarray(c.probs, np.float32)
    grid = product_grid(p=probs, trial=np.arange(c.trials))
    keys = jax.vmap(lambda t: jax.random.fold_in(k_runs, t))(jnp.asarray(grid["trial"]))
    params = {"p": grid["p"], "key": jax.random.key_data(keys)}

    def one(pt):
        k = jax.random.wrap_key_data(pt["key"])
        k_u, k_sim = jax.random.split(k)
        u = sid.ar_inputs(k_u, c.t_len, c.n_u, c.input_mean, c.input_corr)
        phi, y, _, _ = sid.simulate(k_sim, system, u, L, pt["p"], attack, c.noise)
        ls = sid.least_squares(phi, y)
        # Past the threshold IRLS may use its whole budget: record the status, don't throw.
        est = sid.l2_norm_estimator(phi, y, max_iter=c.max_iter, throw=False)
        return {
            "ls": sid.prediction_error(ls, phi_test, y_test),
            "l2": sid.prediction_error(est.theta, phi_test, y_test),
            "iters": est.iterations,
            "ok": succeeded(est.result),
        }

    out = sweep(one, params)
    shape = (len(probs), c.trials)
    return {"ls": np.asarray(out["ls"]).reshape(shape), "l2": np.asarray(out["l2"]).reshape(shape),
            "iters": np.asarray(out["iters"]).reshape(shape),
            "ok": np.asarray(out["ok"]).reshape(shape), "trunc": np.asarray(trunc)}


def run(config: SysidConfig, ctx: Context) -> dict:
    """The (L, p) sweep: one ``ctx.cell`` per memory length (resumable)."""
    c = config
    probs = np.asarray(c.probs, np.float32)
    n_l, n_p = len(c.lengths), len(probs)
    err_l2 = np.zeros((n_l, n_p, c.trials))
    err_ls = np.zeros_like(err_l2)
    iters = np.zeros_like(err_l2)
    ok = np.zeros(err_l2.shape, bool)
    trunc = np.zeros(n_l)
    bar = ctx.bar(total=n_l, desc="sysid: (p, trial) grid per memory length L")
    for i, L in enumerate(c.lengths):
        bar.set_postfix(L=L)
        cell = ctx.cell(f"L{L}", lambda L=L: simulate_length(c, ctx.key, L))
        err_ls[i], err_l2[i], iters[i], ok[i] = cell["ls"], cell["l2"], cell["iters"], cell["ok"]
        trunc[i] = float(cell["trunc"])
        bar.update()
    bar.close()

    med_l2, med_ls = np.median(err_l2, -1), np.median(err_ls, -1)
    thr_per_l = [crossing_p(probs, med_l2[i], c.breakdown_level) for i in range(n_l)]
    ls_thr_per_l = [crossing_p(probs, med_ls[i], c.breakdown_level) for i in range(n_l)]
    j = c.probs.index(c.fixed_p)
    thr, censored = thr_per_l[-1]
    safe = (probs > 0) & (probs <= SAFE_P_MAX)
    ls_fail = (probs >= LS_FAIL_P[0]) & (probs <= LS_FAIL_P[1])
    above = probs > thr
    nan = float("nan")
    m = {
        "err_l2": med_l2,
        "err_ls": med_ls,
        "err_l2_trials": err_l2,
        "err_ls_trials": err_ls,
        "irls_iterations_mean": float(iters.mean()),
        "irls_converged_fraction": float(ok.mean()),
        "lengths": list(c.lengths),
        "probs": probs,
        "truncation_error": trunc,
        "breakdown_level": c.breakdown_level,
        "empirical_p_threshold": thr,
        "empirical_p_threshold_censored": censored,
        "empirical_p_threshold_per_L": [t for t, _ in thr_per_l],
        "ls_p_threshold_per_L": [t for t, _ in ls_thr_per_l],
        "fixed_p": c.fixed_p,
        "err_l2_vs_L_at_fixed_p": med_l2[:, j],
        "err_ls_vs_L_at_fixed_p": med_ls[:, j],
        "l2_decay_ratio_fixed_p": float(med_l2[-1, j] / med_l2[0, j]),
        "l2_decay_ratio_p0": float(med_l2[-1, 0] / med_l2[0, 0]),
        "l2_max_err_safe_p": float(med_l2[-1, safe].max()) if safe.any() else nan,
        "ls_over_l2_min_safe_p": (float((med_ls[-1, safe] / med_l2[-1, safe]).min())
                                  if safe.any() else nan),
        "ls_min_err_fail_p": float(med_ls[-1, ls_fail].min()) if ls_fail.any() else nan,
        "l2_min_err_above_threshold": float(med_l2[-1, above].min()) if above.any() else nan,
    }
    ctx.report.add_figure(plot_error_vs_L(c, m), "error_vs_L.png",
                          f"Median relative prediction error vs memory length L at "
                          f"p = {c.fixed_p} (and p = 0), with the truncation error of the true "
                          "map (the memory term of the bound, decaying like rho^L).")
    ctx.report.add_figure(plot_error_vs_p(c, m), "error_vs_p.png",
                          "Median relative prediction error vs attack probability p at the "
                          "smallest and largest L; dashed: breakdown level, dotted: empirical "
                          "threshold.")
    ctx.report.add_text(summary_markdown(c, m))
    return m


def crossing_p(probs: np.ndarray, values: np.ndarray, level: float) -> tuple[float, bool]:
    """First ``p`` where ``values`` rises above ``level`` (linear interpolation).

    Returns ``(p, censored)``; censored when it never does (``p`` is then the grid's last).
    """
    above = np.nonzero(values > level)[0]
    if above.size == 0:
        return float(probs[-1]), True
    i = int(above[0])
    if i == 0:
        return float(probs[0]), False
    p0, p1, v0, v1 = probs[i - 1], probs[i], values[i - 1], values[i]
    return float(p0 + (level - v0) * (p1 - p0) / (v1 - v0)), False


def plot_error_vs_L(c, m):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4), constrained_layout=True)
    lengths = np.asarray(m["lengths"])
    ax.semilogy(lengths, m["err_l2_vs_L_at_fixed_p"], "o-", label=f"l2-norm, p={c.fixed_p}")
    ax.semilogy(lengths, m["err_ls_vs_L_at_fixed_p"], "s-", label=f"least squares, p={c.fixed_p}")
    ax.semilogy(lengths, m["err_l2"][:, 0], "o--", alpha=0.6, label="l2-norm, p=0")
    ax.semilogy(lengths, m["truncation_error"], "k:", label="truncation of true map")
    ax.semilogy(lengths, m["truncation_error"][0] * c.rho ** (lengths - lengths[0]), "k-",
                lw=0.8, alpha=0.5, label=r"$\propto \rho^L$")
    ax.axhline(c.breakdown_level, color="gray", ls="--", lw=0.8, label="breakdown level")
    ax.set_xlabel("memory length L (lags)")
    ax.set_ylabel("relative RMS prediction error (clean test)")
    ax.set_title(f"Error vs memory length (median of {c.trials} trials)")
    ax.legend(fontsize=7)
    return fig


def plot_error_vs_p(c, m):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4), constrained_layout=True)
    probs = np.asarray(m["probs"])
    for i, L in enumerate(m["lengths"]):
        if i not in (0, len(m["lengths"]) - 1):
            continue
        ax.semilogy(probs, m["err_l2"][i], "o-", label=f"l2-norm, L={L}")
        ax.semilogy(probs, m["err_ls"][i], "s-", label=f"least squares, L={L}")
    ax.axhline(c.breakdown_level, color="gray", ls="--", lw=0.8, label="breakdown level")
    ax.axvline(m["empirical_p_threshold"], color="k", ls=":", lw=1,
               label=f"empirical threshold {m['empirical_p_threshold']:.3f}")
    ax.set_xlabel("attack probability p")
    ax.set_ylabel("relative RMS prediction error (clean test)")
    ax.set_title(f"Error vs attack probability (median of {c.trials} trials)")
    ax.legend(fontsize=7)
    return fig


def summary_markdown(c, m) -> str:
    lengths = m["lengths"]
    j = c.probs.index(c.fixed_p)
    head = "| L | " + " | ".join(f"p={p:g}" for p in c.probs) + " |\n"
    head += "|---|" + "---|" * len(c.probs) + "\n"
    rows_l2 = "".join(
        f"| {L} | " + " | ".join(f"{v:.3g}" for v in m["err_l2"][i]) + " |\n"
        for i, L in enumerate(lengths)
    )
    rows_ls = "".join(
        f"| {L} | " + " | ".join(f"{v:.3g}" for v in m["err_ls"][i]) + " |\n"
        for i, L in enumerate(lengths)
    )
    thr = m["empirical_p_threshold"]
    cens = " (not reached: lower bound)" if m["empirical_p_threshold_censored"] else ""
    return (
        "Median relative prediction error on a clean test trajectory.\n\n"
        f"**l2-norm estimator**\n\n{head}{rows_l2}\n**least squares**\n\n{head}{rows_ls}\n"
        f"- l2 error vs L at p = {c.fixed_p}: "
        + ", ".join(f"{v:.3g}" for v in m["err_l2"][:, j])
        + f"\n- empirical p threshold at L = {lengths[-1]} (median l2 error > "
        f"{c.breakdown_level}): **{thr:.3f}**{cens}\n"
        f"- per L: {', '.join(f'{t:.3f}' for t in m['empirical_p_threshold_per_L'])}; "
        f"least squares: {', '.join(f'{t:.3f}' for t in m['ls_p_threshold_per_L'])}\n"
        f"- mean IRLS iterations {m['irls_iterations_mean']:.1f}; IRLS converged (RESULTS "
        f"successful) in {100 * m['irls_converged_fraction']:.0f}% of the fits\n"
    )


METRICS = (
    Metric("err_l2", "median l2-norm test error per (L, p)", better="lower"),
    Metric("err_ls", "median least-squares test error per (L, p)", better="lower"),
    Metric("err_l2_trials", "l2-norm test error per (L, p, trial)", better="lower"),
    Metric("err_ls_trials", "least-squares test error per (L, p, trial)", better="lower"),
    Metric("irls_iterations_mean", "mean IRLS iterations per fit"),
    Metric("irls_converged_fraction", "fraction of IRLS fits with RESULTS.successful",
           better="higher"),
    Metric("lengths", "memory lengths L simulated"),
    Metric("probs", "attack probabilities p simulated"),
    Metric("truncation_error", "test error of the true map truncated at L (memory term)",
           better="lower"),
    Metric("breakdown_level", "error above which an estimate is worse than predicting 0"),
    Metric("empirical_p_threshold", "smallest p where the median l2 error crosses the "
           "breakdown level, at the largest L"),
    Metric("empirical_p_threshold_censored", "True when the l2 error never crossed it"),
    Metric("empirical_p_threshold_per_L", "the same threshold per L"),
    Metric("ls_p_threshold_per_L", "least squares' threshold per L"),
    Metric("fixed_p", "attack probability of the error-vs-L panel"),
    Metric("err_l2_vs_L_at_fixed_p", "median l2 error vs L at fixed_p", better="lower"),
    Metric("err_ls_vs_L_at_fixed_p", "median LS error vs L at fixed_p", better="lower"),
    Metric("l2_decay_ratio_fixed_p", "l2 error at the largest L / at the smallest L, "
           "p = fixed_p", better="lower"),
    Metric("l2_decay_ratio_p0", "l2 error at the largest L / at the smallest L, p = 0",
           better="lower"),
    Metric("l2_max_err_safe_p", f"largest median l2 error at the largest L for "
           f"0 < p <= {SAFE_P_MAX}", better="lower", finite=False),
    Metric("ls_over_l2_min_safe_p", f"smallest LS / l2 error ratio at the largest L for "
           f"0 < p <= {SAFE_P_MAX}", better="higher", finite=False),
    Metric("ls_min_err_fail_p", f"smallest median LS error at the largest L for "
           f"{LS_FAIL_P[0]} <= p <= {LS_FAIL_P[1]}", finite=False),
    Metric("l2_min_err_above_threshold", "smallest median l2 error at the largest L for p "
           "above the empirical threshold (NaN when no p is above it)", finite=False),
)

CLAIMS = (
    Claim("error_decays_with_L", "The l2-norm estimator's error bound decays with the "
          "memory length L (under attack)", "l2_decay_ratio_fixed_p < 0.25",
          note="ratio of the median error at the largest and smallest L at p = fixed_p"),
    Claim("error_decays_with_L_no_attack", "... and without attack",
          "l2_decay_ratio_p0 < 0.25"),
    Claim("l2_accurate_below_threshold", "Below the threshold the l2-norm estimator stays "
          "accurate", "l2_max_err_safe_p < 0.2",
          note=f"0 < p <= {SAFE_P_MAX}, largest L; relative RMS test error"),
    Claim("l2_beats_ls_below_threshold", "Below the threshold the l2-norm estimator beats "
          "least squares by a wide margin", "ls_over_l2_min_safe_p > 10"),
    Claim("ls_fails_under_attack", "Least squares has no such guarantee: it breaks down "
          "under sparse attacks", "ls_min_err_fail_p > breakdown_level",
          note=f"{LS_FAIL_P[0]} <= p <= {LS_FAIL_P[1]}, largest L"),
    Claim("threshold_exists", "There is a threshold probability in (0, 1) past which the "
          "l2-norm estimator breaks down too",
          "(not empirical_p_threshold_censored) and 0.3 < empirical_p_threshold < 0.7",
          note="the paper proves a threshold without a computable value; measured for this "
          "adversary"),
    Claim("breakdown_past_threshold", "Past the threshold the l2-norm estimator is worse "
          "than predicting zero", "l2_min_err_above_threshold > breakdown_level"),
)

EXPERIMENT = Experiment(
    name="sysid",
    title="l2-norm vs least squares under sparse adversarial attacks",
    paper="Learning the input-output map of nonlinear systems under sparse adversarial "
          "attacks (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
