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
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jaxsci.core import Report, product_grid, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.dynamics import sysid as sid

__all__ = ["SysidConfig", "CONFIGS", "METRIC_KEYS", "run"]


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

    def validate(self) -> SysidConfig:
        for name in ("n_x", "n_y", "n_u", "m", "trials", "max_iter"):
            check_int(name, getattr(self, name), min=1)
        check_int("t_len", self.t_len, min=4)
        check_int("t_test", self.t_test, min=4)
        check_scalar("rho", self.rho, ge=0.0, lt=1.0)
        check_scalar("noise", self.noise, ge=0.0)
        check_scalar("input_corr", self.input_corr, ge=0.0, lt=1.0)
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
        return self


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

METRIC_KEYS = (
    "err_l2",
    "err_ls",
    "empirical_p_threshold",
    "lengths",
    "probs",
    "truncation_error",
)


def run(
    config: SysidConfig, out_dir: str | Path, *, seed: int = 0, progress: bool = True
) -> Report:
    """Run the (L, p) sweep and write metrics, figures and report."""
    config.validate()
    check_int("seed", seed, min=0)
    report = Report("sysid: l2-norm vs least squares under sparse adversarial attacks", out_dir)
    key = jax.random.key(seed)
    k_sys, k_att, k_test, k_runs = jax.random.split(key, 4)
    c = config
    system = sid.make_system(k_sys, c.n_x, c.n_y, c.n_u, c.m, c.rho)
    ka1, ka2 = jax.random.split(k_att)
    mean_dir = jax.random.normal(ka2, (c.n_y,))
    attack = sid.Attack(
        delta=c.attack_gain * jax.random.normal(ka1, (c.n_y, c.m)),
        mean=c.attack_mean * mean_dir / jnp.linalg.norm(mean_dir),
        scale=c.attack_scale,
        corr=c.attack_corr,
    )
    u_test = sid.ar_inputs(k_test, c.t_test, c.n_u, c.input_mean, c.input_corr)
    probs = np.asarray(c.probs, np.float32)
    n_l, n_p = len(c.lengths), len(probs)
    err_l2 = np.zeros((n_l, n_p, c.trials))
    err_ls = np.zeros_like(err_l2)
    iters = np.zeros_like(err_l2)
    trunc = np.zeros(n_l)
    t0 = time.perf_counter()
    bar = tqdm(c.lengths, desc="sysid L sweep", disable=not progress, leave=False)
    for i, L in enumerate(bar):
        phi_test, _, y_test, _ = sid.simulate(k_test, system, u_test, L, 0.0, attack, 0.0)
        trunc[i] = float(sid.prediction_error(sid.markov_parameters(system, L), phi_test, y_test))
        grid = product_grid(p=probs, trial=np.arange(c.trials))
        keys = jax.vmap(lambda t: jax.random.fold_in(k_runs, t))(jnp.asarray(grid["trial"]))
        params = {"p": grid["p"], "key": jax.random.key_data(keys)}

        def one(pt, L=L, phi_test=phi_test, y_test=y_test):
            k = jax.random.wrap_key_data(pt["key"])
            k_u, k_sim = jax.random.split(k)
            u = sid.ar_inputs(k_u, c.t_len, c.n_u, c.input_mean, c.input_corr)
            phi, y, _, _ = sid.simulate(k_sim, system, u, L, pt["p"], attack, c.noise)
            ls = sid.least_squares(phi, y)
            est = sid.l2_norm_estimator(phi, y, max_iter=c.max_iter)
            return {
                "ls": sid.prediction_error(ls, phi_test, y_test),
                "l2": sid.prediction_error(est.theta, phi_test, y_test),
                "iters": est.iterations,
            }

        out = sweep(one, params)
        err_ls[i] = np.asarray(out["ls"]).reshape(n_p, c.trials)
        err_l2[i] = np.asarray(out["l2"]).reshape(n_p, c.trials)
        iters[i] = np.asarray(out["iters"]).reshape(n_p, c.trials)
    wall = time.perf_counter() - t0

    med_l2, med_ls = np.median(err_l2, -1), np.median(err_ls, -1)
    thr_per_l = [crossing_p(probs, med_l2[i], c.breakdown_level) for i in range(n_l)]
    ls_thr_per_l = [crossing_p(probs, med_ls[i], c.breakdown_level) for i in range(n_l)]
    j = c.probs.index(c.fixed_p)
    m = {
        "err_l2": med_l2,
        "err_ls": med_ls,
        "err_l2_trials": err_l2,
        "err_ls_trials": err_ls,
        "irls_iterations_mean": float(iters.mean()),
        "lengths": list(c.lengths),
        "probs": probs,
        "truncation_error": trunc,
        "empirical_p_threshold": thr_per_l[-1][0],
        "empirical_p_threshold_censored": thr_per_l[-1][1],
        "empirical_p_threshold_per_L": [t for t, _ in thr_per_l],
        "ls_p_threshold_per_L": [t for t, _ in ls_thr_per_l],
        "fixed_p": c.fixed_p,
        "err_l2_vs_L_at_fixed_p": med_l2[:, j],
        "err_ls_vs_L_at_fixed_p": med_ls[:, j],
        "wall_time_s": wall,
        "config": dataclasses.asdict(c),
        "seed": seed,
    }
    report.metrics = m
    report.add_figure(plot_error_vs_L(c, m), "error_vs_L.png",
                      f"Median relative prediction error vs memory length L at p = {c.fixed_p} "
                      "(and p = 0), with the truncation error of the true map (the "
                      "memory term of the bound, decaying like rho^L).")
    report.add_figure(plot_error_vs_p(c, m), "error_vs_p.png",
                      "Median relative prediction error vs attack probability p at the "
                      "largest L; dashed: breakdown level, dotted: empirical threshold.")
    report.add_text(summary_markdown(c, m))
    report.write()
    return report


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
    ax.axhline(c.breakdown_level, color="gray", ls="--", lw=0.8)
    ax.set_xlabel("memory length L")
    ax.set_ylabel("relative prediction error")
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
    ax.axhline(c.breakdown_level, color="gray", ls="--", lw=0.8)
    ax.axvline(m["empirical_p_threshold"], color="k", ls=":", lw=1,
               label=f"empirical threshold {m['empirical_p_threshold']:.3f}")
    ax.set_xlabel("attack probability p")
    ax.set_ylabel("relative prediction error")
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
        f"- wall time {m['wall_time_s']:.1f} s, mean IRLS iterations "
        f"{m['irls_iterations_mean']:.1f}\n"
    )


def get_config(name: str) -> SysidConfig:
    check_choice("config", name, tuple(CONFIGS))
    return CONFIGS[name]
