"""Reproduction: drift inference from temporally sparse samples by path augmentation.

For every system and observation interval ``tau``, ``n_traj`` trajectories of the
2-D SDE ``dX = f dt + sqrt(2D) dW`` are simulated (Euler-Maruyama, step ``dt``; a
burn-in brings them near the invariant density) and observed ``n_obs`` times, ``tau``
apart: the number of observations is the same at every ``tau``. Three estimators
see the same observations (:mod:`jaxsci.dynamics.langevin`): the direct
(Kramers-Moyal) one, the geometric one ``D grad log rho`` and path augmentation
(started from the geometric one; of its ``em.n_iter`` Monte-Carlo EM iterates the one
with the highest estimated observed-data log posterior is kept, a choice made from the
observations alone). Each is scored by the drift RMSE on a grid,
weighted by the kernel density of the observations (``wrmse_*``; shape
``(n_systems, n_taus)``, rows in ``systems`` order, columns in ``taus`` order).

Claims measured (the paper's): at large ``tau`` the augmented estimator's error is
below the direct one's, including on non-conservative systems, where the geometric
one fails. Each (system, tau) cell is a ``ctx.cell``: an interrupted run resumes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.dynamics import langevin as lg

__all__ = ["LangevinConfig", "CONFIGS", "EXPERIMENT", "SYSTEMS", "run"]

# The config's system names, mapped to the library's drift modules (default parameters).
SYSTEMS: dict[str, type[lg.AbstractDrift]] = {
    "double_well": lg.DoubleWell,
    "rotating_well": lg.RotatingWell,
    "hopf": lg.Hopf,
    "van_der_pol": lg.VanDerPol,
    "duffing": lg.Duffing,
}


def _multiple(name: str, value: float, dt: float) -> int:
    r = value / dt
    if abs(r - round(r)) > 1e-6 * max(r, 1.0):
        raise ValueError(f"{name} must be a multiple of dt={dt}, got {value}")
    return int(round(r))


@dataclasses.dataclass(frozen=True)
class LangevinConfig:
    systems: tuple[str, ...] = ("double_well", "rotating_well", "van_der_pol", "hopf", "duffing")
    # 2.8 = 280 steps of 0.01, the interval of the paper's public partial code.
    taus: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 2.8)
    diffusion: float = 0.5  # D in dX = f dt + sqrt(2D) dW
    diffusion_mode: str = "known"  # "known" (paper's default) or "estimated" (quadratic variation)
    n_traj: int = 100  # independent trajectories
    n_obs: int = 11  # observations per trajectory (n_traj * (n_obs - 1) pairs at every tau)
    burn_in: float = 5.0  # time simulated before the first observation
    dt: float = 0.01  # simulation step (the paper's public code)
    # The drift model's basis: "rff" (random Fourier features, non-parametric: the
    # paper's setting) or "poly" (monomials of degree <= degree: SFI's parametric basis)
    basis: str = "rff"
    n_features: int = 200  # random Fourier features of the drift model
    lengthscale: float = 0.7  # RBF kernel lengthscale
    degree: int = 3  # polynomial degree (basis="poly")
    # The EM settings (the library's config: prior_var, n_iter, n_bridges, ... are owned
    # there). Bridge steps per pair: max(ceil(tau / bridge_dt), em.n_steps).
    em: lg.EMConfig = lg.EMConfig(n_steps=4, n_score_bridges=32)
    bridge_dt: float = 0.1
    grid_size: int = 30  # evaluation grid per axis (over the 1-99 % range of the data)

    def __post_init__(self):
        if not self.systems or not self.taus:
            raise ValueError("systems and taus must be non-empty")
        for s in self.systems:
            check_choice("systems[i]", s, tuple(SYSTEMS))
        check_scalar("dt", self.dt, gt=0.0)
        for t in self.taus:
            check_scalar("taus[i]", t, gt=0.0)
            _multiple("taus", t, self.dt)
        if list(self.taus) != sorted(set(self.taus)):
            raise ValueError(f"taus must be strictly increasing, got {self.taus}")
        check_choice("diffusion_mode", self.diffusion_mode, ("known", "estimated"))
        check_choice("basis", self.basis, ("rff", "poly"))
        check_int("degree", self.degree, min=1)
        for name in ("n_traj", "n_features", "grid_size"):
            check_int(name, getattr(self, name), min=1)
        check_int("n_obs", self.n_obs, min=2)
        for name in ("diffusion", "lengthscale", "bridge_dt"):
            check_scalar(name, getattr(self, name), gt=0.0)
        check_scalar("burn_in", self.burn_in, ge=0.0)
        _multiple("burn_in", self.burn_in, self.dt)
        if not isinstance(self.em, lg.EMConfig):
            raise TypeError(f"em must be an EMConfig, got {type(self.em).__name__}")

    def bridge_steps(self, tau: float) -> int:
        return max(math.ceil(tau / self.bridge_dt - 1e-9), self.em.n_steps)


CONFIGS = {
    # Both taus give em.n_steps bridge steps: one path-augmentation compile.
    "smoke": LangevinConfig(systems=("double_well", "van_der_pol"), taus=(0.1, 0.8), n_traj=20,
                            n_obs=6, n_features=50, grid_size=10, burn_in=1.0, bridge_dt=0.2,
                            em=lg.EMConfig(n_iter=2, n_steps=4, n_bridges=2,
                                           n_score_bridges=4)),
    # Two systems (one conservative, one not) x three intervals, 1000 pairs per cell, a
    # coarser bridge step and a smaller EM budget, to fit the quick budget on 2 cores.
    "quick": LangevinConfig(systems=("double_well", "van_der_pol"), taus=(0.1, 0.5, 2.0),
                            bridge_dt=0.2, em=lg.EMConfig(n_iter=8, n_steps=4,
                                                          n_score_bridges=32)),
    # Paper scale (GPU): all five systems, seven intervals, more data and bridges.
    "full": LangevinConfig(n_traj=400, n_obs=26, bridge_dt=0.05,
                           em=lg.EMConfig(n_steps=4, n_bridges=16, n_score_bridges=64)),
}


def _grid(points: np.ndarray, size: int) -> np.ndarray:
    lo, hi = np.percentile(points, 1, axis=0), np.percentile(points, 99, axis=0)
    axes = [np.linspace(lo[i], hi[i], size) for i in range(points.shape[1])]
    return np.stack(np.meshgrid(*axes, indexing="xy"), -1).reshape(-1, points.shape[1])


@jax.jit
def _baselines(feats, obs, grid, tau, d, prior_var):
    """Density weights, the direct and geometric drifts on the grid, and the EM init."""
    pts = obs.reshape(-1, obs.shape[-1])
    w = lg.kde_density(grid, pts, lg.scott_bandwidth(pts))
    direct = lg.predict(lg.direct_estimator(feats, obs, tau, d, prior_var=prior_var), grid)
    geo = lg.geometric_drift(grid, obs, d)
    init = lg.fit_function(feats, pts, lg.geometric_drift(pts, obs, d))
    return w, direct, geo, init


class CellData(NamedTuple):
    """One cell's data and what path augmentation starts from (:func:`cell_data`)."""

    drift: lg.AbstractDrift  # the true drift
    obs: jax.Array  # [n_traj, n_obs, 2]
    diffusion: float  # D used by the estimators (known or estimated)
    grid: jax.Array  # evaluation grid over the 1-99 % range of the data
    weights: jax.Array  # the data's density (KDE) on the grid: the error's weights
    direct: jax.Array  # the direct estimator's drift on the grid
    geometric: jax.Array  # the geometric estimator's drift on the grid
    init: lg.DriftModel  # EM's start: the geometric drift fitted on the basis
    key: jax.Array  # the key of the path augmentation


def cell_data(c: LangevinConfig, key: jax.Array, feats: lg.AbstractFeatures, system: str,
              tau: float) -> CellData:
    """A cell's trajectories, grid, baselines and EM start, from the cell's key (what
    :func:`run_cell` fits; ``scripts/diagnose/langevin_from_truth.py`` starts EM elsewhere)."""
    drift = SYSTEMS[system]()
    k_x0, k_sim, k_aug = jax.random.split(key, 3)
    x0 = jax.random.normal(k_x0, (c.n_traj, 2))
    obs = lg.simulate(k_sim, drift, x0, c.diffusion, tau, c.n_obs,
                      steps_per_obs=_multiple("tau", tau, c.dt), burn_in=c.burn_in,
                      burn_in_steps=_multiple("burn_in", c.burn_in, c.dt))
    d = c.diffusion if c.diffusion_mode == "known" else float(lg.estimate_diffusion(obs, tau))
    pts = obs.reshape(-1, 2)
    grid = jnp.asarray(_grid(np.asarray(pts), c.grid_size), pts.dtype)
    w, direct, geo, init = _baselines(feats, obs, grid, tau, d, c.em.prior_var)
    return CellData(drift, obs, d, grid, w, direct, geo, init, k_aug)


def cell_key(ctx_key: jax.Array, i: int, j: int) -> jax.Array:
    """The key of cell ``(i, j)`` (system ``i``, interval ``j``) of a run whose context
    key is ``ctx_key``."""
    _, k_data = jax.random.split(ctx_key)
    return jax.random.fold_in(jax.random.fold_in(k_data, i), j)


def run_cell(c: LangevinConfig, key: jax.Array, feats: lg.AbstractFeatures, system: str,
             tau: float) -> dict[str, np.ndarray]:
    """One (system, tau) cell: simulate, fit the three estimators, score them on a grid."""
    drift, obs, d, grid, w, direct, geo, init, k_aug = cell_data(c, key, feats, system, tau)
    f_true = jax.vmap(drift)(grid)
    em = dataclasses.replace(c.em, n_steps=c.bridge_steps(tau))
    res = lg.path_augmentation(k_aug, init, obs, tau, d, em, probe=grid)
    sel = int(res.selected)
    aug = res.history[sel]
    return {
        "direct": lg.weighted_rmse(direct, f_true, w),
        "geometric": lg.weighted_rmse(geo, f_true, w),
        "augmented": lg.weighted_rmse(aug, f_true, w),
        "rms": lg.weighted_rmse(jnp.zeros_like(f_true), f_true, w),
        "per_iteration": jnp.stack([lg.weighted_rmse(h, f_true, w) for h in res.history]),
        "log_posterior": res.log_posterior,
        "selected": sel,
        "ess": res.ess[-1],
        "diffusion_used": d,
        "grid": grid, "field_true": f_true, "field_direct": direct, "field_geometric": geo,
        "field_augmented": aug,
    }


def run(config: LangevinConfig, ctx: Context) -> dict:
    """Simulate, fit the three estimators at every (system, tau), return the metrics."""
    c = config
    k_feat, _ = jax.random.split(ctx.key)
    feats = (lg.random_features(k_feat, 2, c.n_features, c.lengthscale) if c.basis == "rff"
             else lg.polynomial_features(2, c.degree))
    n_s, n_t = len(c.systems), len(c.taus)
    cells = {}
    bar = ctx.bar(total=n_s * n_t, desc="langevin cells (system, tau)")
    for i, system in enumerate(c.systems):
        for j, tau in enumerate(c.taus):
            bar.set_postfix(system=system, tau=tau)
            k = cell_key(ctx.key, i, j)
            cells[i, j] = ctx.cell(f"{system}/tau={tau:g}",
                                   lambda k=k, s=system, t=float(tau): run_cell(c, k, feats, s, t))
            bar.update()
    bar.close()

    def grid_of(name):
        return np.array([[np.asarray(cells[i, j][name]) for j in range(n_t)]
                         for i in range(n_s)])

    nonc = [i for i, s in enumerate(c.systems) if not SYSTEMS[s].conservative]
    m = {
        "wrmse_direct": grid_of("direct"),
        "wrmse_geometric": grid_of("geometric"),
        "wrmse_augmented": grid_of("augmented"),
        "drift_rms": grid_of("rms"),
        # Diagnostics: true error of every EM iterate (NOT used for selection), the
        # data-only selection criterion, and the iterate it picked (0 = init).
        "wrmse_augmented_per_iteration": grid_of("per_iteration"),
        "augmented_log_posterior": grid_of("log_posterior"),
        "augmented_selected_iteration": grid_of("selected").astype(int),
        "bridge_ess_fraction": grid_of("ess"),
        "diffusion_used": grid_of("diffusion_used"),
        "systems": list(c.systems),
        "conservative": [SYSTEMS[s].conservative for s in c.systems],
        "taus": list(c.taus),
    }
    direct, geo, aug, rms = (m[k] for k in ("wrmse_direct", "wrmse_geometric",
                                            "wrmse_augmented", "drift_rms"))
    # What the claims read, per system at the largest (smallest) tau.
    m["wrmse_direct_largest_tau"] = direct[:, -1]
    m["wrmse_augmented_largest_tau"] = aug[:, -1]
    m["wrmse_direct_smallest_tau"] = direct[:, 0]
    m["geometric_over_rms_nonconservative"] = geo[nonc, -1] / rms[nonc, -1]
    m["wrmse_geometric_nonconservative"] = geo[nonc, -1]
    m["wrmse_augmented_nonconservative"] = aug[nonc, -1]

    last = {c.systems[i]: cells[i, n_t - 1] for i in range(n_s)}
    ctx.report.add_figure(plot_error_vs_tau(c, m), "error_vs_tau.png",
                          "Density-weighted drift RMSE vs observation interval tau for the "
                          "direct, geometric and path-augmented estimators (dotted: RMS of "
                          "the true drift, the error of predicting zero).")
    ctx.report.add_figure(plot_fields(last, c.taus[-1]), "drift_fields.png",
                          f"True vs inferred drift fields at the largest interval tau = "
                          f"{c.taus[-1]:g}: arrows show the direction (unit length), colour "
                          "the magnitude |f| on one scale per system.")
    ctx.report.add_text(summary_markdown(c, m))
    return m


def plot_error_vs_tau(c, m):
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    n = len(c.systems)
    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.5), constrained_layout=True, squeeze=False)
    taus = np.asarray(c.taus)
    for i, (ax, s) in enumerate(zip(axes[0], c.systems, strict=True)):
        ax.plot(taus, m["wrmse_direct"][i], "s-", label="direct (Kramers-Moyal)")
        ax.plot(taus, m["wrmse_geometric"][i], "^-", label="geometric (D grad log rho)")
        ax.plot(taus, m["wrmse_augmented"][i], "o-", label="path augmentation")
        ax.plot(taus, m["drift_rms"][i], "k:", label="RMS of the true drift")
        # log tau with a tick at each simulated interval (no crowded minor labels).
        ax.set_xscale("log")
        ax.set_xticks(taus, [f"{t:g}" for t in taus])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0.0, None)
        ax.set_title(s + (" (conservative)" if SYSTEMS[s].conservative else ""))
        ax.set_xlabel("observation interval tau (time units)")
        ax.set_ylabel("weighted drift RMSE (state units / time)")
    axes[0, 0].legend(fontsize=7)
    return fig


def plot_fields(cells, tau):
    """Quiver plots: direction as unit arrows, magnitude as colour (shared per system).

    Arrows scaled by magnitude shrink to dots where an estimator is biased toward zero
    (the direct one at large tau), so the magnitude goes to the colour scale instead.
    """
    plt = pyplot()
    from matplotlib.colors import Normalize

    names = (("field_true", "true drift"), ("field_direct", "direct"),
             ("field_geometric", "geometric"), ("field_augmented", "path augmentation"))
    n = len(cells)
    fig, axes = plt.subplots(n, 4, figsize=(14, 3.4 * n), constrained_layout=True,
                             squeeze=False)
    for r, (s, cell) in enumerate(cells.items()):
        g = np.asarray(cell["grid"])
        mags = {k: np.linalg.norm(np.asarray(cell[k]), axis=1) for k, _ in names}
        vmax = max(np.percentile(v, 99) for v in mags.values())
        norm = Normalize(0.0, vmax)
        spacing = np.ptp(g[:, 0]) / max(int(round(math.sqrt(g.shape[0]))) - 1, 1)
        for ax, (key, label) in zip(axes[r], names, strict=True):
            v = np.asarray(cell[key])
            u = v / np.maximum(mags[key], 1e-12)[:, None]
            q = ax.quiver(g[:, 0], g[:, 1], u[:, 0], u[:, 1], mags[key], cmap="viridis",
                          norm=norm, angles="xy", scale_units="xy",
                          scale=1.0 / (0.8 * spacing), width=0.006, pivot="mid")
            ax.set_title(f"{s}: {label} (tau = {tau:g})", fontsize=9)
            ax.set_xlabel("x1 (state units)")
            ax.set_ylabel("x2 (state units)")
            ax.set_aspect("equal")
        fig.colorbar(q, ax=axes[r].tolist(), label="|f| (state units / time)", shrink=0.9)
    return fig


def summary_markdown(c, m) -> str:
    lines = ["Density-weighted drift RMSE (RMS of the true drift in brackets).\n"]
    head = "| system | estimator | " + " | ".join(f"tau={t:g}" for t in c.taus) + " |\n"
    head += "|---|---|" + "---|" * len(c.taus) + "\n"
    rows = ""
    for i, s in enumerate(c.systems):
        for est in ("direct", "geometric", "augmented"):
            vals = " | ".join(f"{v:.3f}" for v in m[f"wrmse_{est}"][i])
            rows += f"| {s} ({np.mean(m['drift_rms'][i]):.2f}) | {est} | {vals} |\n"
    lines.append(head + rows)
    lines.append("\n- EM iterate selected by the estimated log posterior (0 = init): "
                 + "; ".join(f"{s}: {list(map(int, m['augmented_selected_iteration'][i]))}"
                             for i, s in enumerate(c.systems)))
    lines.append("\n- bridge ESS fraction at the largest tau: "
                 + ", ".join(f"{v:.2f}" for v in m["bridge_ess_fraction"][:, -1]) + "\n")
    return "\n".join(lines)


GRID = "(n_systems, n_taus), rows in `systems` order, columns in `taus` order"
METRICS = (
    Metric("wrmse_direct", f"density-weighted drift RMSE of the direct estimator {GRID}",
           better="lower", unit="state/time"),
    Metric("wrmse_geometric", "same, geometric estimator D grad log rho", better="lower",
           unit="state/time"),
    Metric("wrmse_augmented", "same, path augmentation (selected EM iterate)", better="lower",
           unit="state/time"),
    Metric("drift_rms", "RMS of the true drift (the error of predicting zero)",
           unit="state/time"),
    Metric("wrmse_augmented_per_iteration", "true error of every EM iterate (diagnostic; "
           "not used for selection)", unit="state/time"),
    Metric("augmented_log_posterior", "estimated observed-data log posterior of every EM "
           "iterate (the data-only selection criterion; em.select='holdout': the held-out "
           "pairs' log-likelihood); -inf where the iterate's bridges overflowed (an "
           "unbounded basis)", finite=False),
    Metric("augmented_selected_iteration", "EM iterate returned (0 = geometric init)"),
    Metric("bridge_ess_fraction", "mean effective sample size fraction of the last E-step"),
    Metric("diffusion_used", "D given to the estimators (known, or quadratic variation)"),
    Metric("systems", "systems simulated (rows)", finite=False),  # names, not numbers
    Metric("conservative", "whether each system's drift is a gradient"),
    Metric("taus", "observation intervals (columns)", unit="time"),
    Metric("wrmse_direct_largest_tau", "direct estimator's error per system at the largest "
           "tau", better="lower", unit="state/time"),
    Metric("wrmse_augmented_largest_tau", "path augmentation's error per system at the "
           "largest tau", better="lower", unit="state/time"),
    Metric("wrmse_direct_smallest_tau", "direct estimator's error per system at the "
           "smallest tau", better="lower", unit="state/time"),
    # Empty when the config has no non-conservative system (then the claims fail).
    Metric("geometric_over_rms_nonconservative", "geometric error / drift RMS at the "
           "largest tau, per non-conservative system", finite=False),
    Metric("wrmse_geometric_nonconservative", "geometric error at the largest tau, per "
           "non-conservative system", unit="state/time", finite=False),
    Metric("wrmse_augmented_nonconservative", "path augmentation's error at the largest "
           "tau, per non-conservative system", unit="state/time", finite=False),
)

CLAIMS = (
    Claim("augmented_beats_direct", "At large observation intervals the path-augmented "
          "estimator recovers the drift better than the direct (Kramers-Moyal) one, on "
          "every system", "np.all(wrmse_augmented_largest_tau < wrmse_direct_largest_tau)"),
    Claim("direct_degrades", "The direct estimator degrades as tau grows (its bias toward "
          "(E[x'|x] - x) / tau)",
          "np.all(wrmse_direct_largest_tau > wrmse_direct_smallest_tau)"),
    Claim("geometric_fails_nonconservative", "On non-conservative systems the geometric "
          "estimator D grad log rho fails: its error is near the drift's own size",
          "len(geometric_over_rms_nonconservative) > 0 and "
          "np.all(geometric_over_rms_nonconservative > 0.8)",
          note="needs a non-conservative system in `systems`"),
    Claim("augmented_beats_geometric_nonconservative", "On non-conservative systems path "
          "augmentation beats the geometric estimator it starts from",
          "len(wrmse_augmented_nonconservative) > 0 and "
          "np.all(wrmse_augmented_nonconservative < wrmse_geometric_nonconservative)",
          note="needs a non-conservative system in `systems`"),
)

EXPERIMENT = Experiment(
    name="langevin",
    title="drift from temporally sparse samples by path augmentation",
    paper="Learning stochastic dynamics from temporally sparse samples as stochastic "
          "control (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
