"""Reproduction: learning Lagrangian multipliers at the ``s / sqrt N`` and ``s / N`` rates.

The family (:func:`jaxsci.stats.lagrangian.random_scenarios`): box MILPs ``min c^T x``
s.t. ``A x >= b`` (``s`` coupling rows), ``x in {0, 1}^n``; a distribution is ``K``
equally likely covering scenarios around a random base. By default the rows are
*separable* (row ``i`` covers its own variables), the product structure of the
paper's minimax lower bound, on which ``F(pi) = E u(pi, P)`` is a sum of ``s``
piecewise-linear one-dimensional problems with sharp maxima. One repetition is a fresh
distribution from the family and a fresh sample; the excess of a learned ``pi`` is
computed *exactly* over the finite support (``F(pi*) - F(pi)``, the limit of a held-out
sample), with ``pi* = argmax F`` from one LP (HiGHS,
:func:`~jaxsci.stats.lagrangian.best_constant_multiplier`).

Measured: averaged projected SGA (``R = radius_factor ||pi*||``, step ``R / (G sqrt
N)``) over a grid of ``N`` (one compiled program: ``vmap`` over the distributions, the
keys and ``N`` below a static maximum); the same at fixed ``N`` over a grid of ``s``
(zero rows: ``vmap`` over ``s``); the warm start (the mean of ``N`` per-instance LP
multipliers), whose excess risk ``E||pi_0 - pi*(P)||^2 - min`` is ``||pi_0 - E
pi*(P)||^2``; and the per-instance subgradient method from 0 and from a warm start
learned on ``warm_n`` instances, iterations to a relative gap on every scenario.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.stats import lagrangian as lr

__all__ = ["LagrangianConfig", "CONFIGS", "EXPERIMENT", "run", "loglog_slope"]


@dataclasses.dataclass(frozen=True)
class LagrangianConfig:
    n_scenarios: int = 4  # K: instances per distribution (a finite support)
    s_max: int = 16  # coupling rows of the generated family (rows >= s are zero)
    vars_per_row: int = 1  # n = s_max * vars_per_row
    separable: bool = True  # block rows (the lower bound's product structure)
    spread: float = 0.5  # relative size of the scenarios' perturbations
    demand: tuple[float, float] = (0.3, 0.7)  # each row asks for this share of its coverage
    n_coupling: int = 8  # s of the N sweep
    sample_sizes: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    s_grid: tuple[int, ...] = (1, 2, 4, 8, 16)
    n_for_s: int = 256  # N of the s sweep
    reps: int = 32  # repetitions per grid point (the issue asks for >= 16)
    radius_factor: float = 2.0  # R = radius_factor * ||pi*|| (the theory's ||pi*|| <= R)
    warm_n: int = 64  # training instances of the warm start used for the iteration counts
    gap: float = 0.05  # relative gap to reach, (u* - best) / max(|u*|, 1)
    subgradient_steps: int = 1000

    def __post_init__(self):
        for name in ("n_scenarios", "s_max", "vars_per_row", "n_coupling", "reps", "n_for_s",
                     "warm_n", "subgradient_steps"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("spread", self.spread, ge=0.0, lt=1.0)
        check_scalar("radius_factor", self.radius_factor, ge=1.0)
        check_scalar("gap", self.gap, gt=0.0)
        lo, hi = self.demand
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"demand must satisfy 0 <= lo <= hi <= 1, got {self.demand}")
        for name, grid in (("sample_sizes", self.sample_sizes), ("s_grid", self.s_grid)):
            if len(grid) < 3:
                raise ValueError(f"{name} needs at least 3 values to fit a slope, got {grid}")
            if list(grid) != sorted(set(grid)) or grid[0] < 1:
                raise ValueError(f"{name} must be strictly increasing positive ints, got {grid}")
        if self.n_coupling > self.s_max or self.s_grid[-1] > self.s_max:
            raise ValueError(f"n_coupling and s_grid must be <= s_max = {self.s_max}, got "
                             f"{self.n_coupling} and {self.s_grid}")
        if self.n_for_s > self.sample_sizes[-1] or self.warm_n > self.sample_sizes[-1]:
            raise ValueError("n_for_s and warm_n must be <= the largest sample size")


CONFIGS = {
    "smoke": LagrangianConfig(s_max=4, n_coupling=2, sample_sizes=(16, 32, 64),
                              s_grid=(1, 2, 4), n_for_s=32, reps=4, warm_n=16,
                              subgradient_steps=40),
    "quick": LagrangianConfig(),
    # Paper scale: larger supports and sample sizes, more repetitions.
    "full": LagrangianConfig(n_scenarios=16, s_max=32, vars_per_row=2, s_grid=(1, 2, 4, 8, 16, 32),
                             sample_sizes=tuple(2**k for k in range(4, 17)), reps=256,
                             n_coupling=16, n_for_s=1024, subgradient_steps=2000),
}


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (``y`` floored at 1e-12)."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.maximum(np.asarray(y, float), 1e-12))
    return float(np.polyfit(lx, ly, 1)[0])


def families(c: LagrangianConfig, key_data: np.ndarray, active) -> lr.Scenarios:
    """One distribution per row of ``key_data`` (raw key data, ``(reps, 2)``) for each entry
    of ``active`` (leading axes ``(len(active), reps)``), as NumPy leaves."""

    def one(kd, a):
        return lr.random_scenarios(jax.random.wrap_key_data(kd), c.n_scenarios,
                                   c.s_max * c.vars_per_row, c.s_max, active=a,
                                   spread=c.spread, demand=jnp.asarray(c.demand),
                                   separable=c.separable)

    fam = jax.jit(jax.vmap(jax.vmap(one, (0, None)), (None, 0)))(
        key_data, np.asarray(active, np.int32))
    return jax.tree_util.tree_map(np.asarray, fam)


def _index(tree, *idx):
    return jax.tree_util.tree_map(lambda x: x[idx], tree)


def references(fam: dict[str, np.ndarray], s: int, per_instance: bool = True
               ) -> dict[str, np.ndarray]:
    """Host LPs (HiGHS) per distribution of a stack (NumPy ``c, A, b`` with a leading
    repetition axis) on its ``s`` active rows: ``max F`` and ``pi*``; with
    ``per_instance``, each scenario's LP value and multipliers (the warm start's targets)."""
    reps, k, s_all, _ = fam["A"].shape
    out = {"lp_value": np.zeros(reps), "pi_star": np.zeros((reps, s_all)),
           "inst_value": np.zeros((reps, k)), "inst_pi": np.zeros((reps, k, s_all))}
    for r in range(reps):
        c, A, b = fam["c"][r], fam["A"][r, :, :s], fam["b"][r, :, :s]
        act = lr.Scenarios(lr.BoxMILP(c, A, b), np.ones(k, np.float32))
        out["lp_value"][r], out["pi_star"][r, :s] = lr.best_constant_multiplier(act)
        for j in range(k if per_instance else 0):
            res = lr.lp_relaxation(lr.MILP(c[j], A[j], b[j]))
            out["inst_value"][r, j] = res.value
            out["inst_pi"][r, j, :s] = res.multipliers
    return out


def sga_lanes(dists: lr.Scenarios, pi_star, radius, key_data, sizes, max_n: int):
    """Averaged SGA on every lane ``(dists[i], key_data[i], sizes[i])`` in one compiled
    program: the exact excess ``F(pi*) - F(pi_bar)``, the bound ``G`` and ``F(pi*)``."""

    def one(d, ps, rad, kd, n):
        pi = lr.learn_sga(d, jax.random.wrap_key_data(kd), n, rad, max_samples=max_n).multipliers
        f_star = d.expected_dual(ps)
        return f_star - d.expected_dual(pi), d.grad_bound(), f_star

    out = jax.jit(jax.vmap(one))(dists, np.asarray(pi_star, np.float32),
                                 np.asarray(radius, np.float32), key_data,
                                 np.asarray(sizes, np.int32))
    return [np.asarray(x, np.float64) for x in out]


def warm_and_iterations(c: LagrangianConfig, dists: lr.Scenarios, inst_pi, inst_value,
                        key_data, sizes):
    """Per repetition, in one compiled program: the warm start (mean of ``N`` sampled
    targets, :func:`~jaxsci.stats.lagrangian.fit_warm_start` with a 0/1 mask per ``N``) and
    its excess risk ``||pi_hat_N - E pi*(P)||^2``; then the per-instance subgradient
    method on every scenario from 0 and from the warm start learned on ``warm_n``
    instances, each with its own training estimate of the distance to the optimum as the
    step scale."""
    max_n = int(max(sizes))
    masks = (np.arange(max_n)[None, :] < np.asarray(sizes)[:, None]).astype(np.float32)
    warm_mask = (np.arange(max_n) < c.warm_n).astype(np.float32)

    def one(targets, kd, insts, values):
        # Uniform scenario indices (the family's weights are uniform) by one flat draw.
        u = jax.random.uniform(jax.random.wrap_key_data(kd), (max_n,))
        ix = jnp.minimum((u * targets.shape[0]).astype(jnp.int32), targets.shape[0] - 1)
        sample = targets[ix]
        mean = jnp.mean(targets, 0)  # uniform scenario weights
        hats = jax.vmap(lambda w: lr.fit_warm_start(sample, weights=w)())(masks)
        excess = jnp.sum((hats - mean) ** 2, -1)
        warm = lr.fit_warm_start(sample, weights=warm_mask)()
        zero = jnp.zeros_like(warm)
        d_warm = jnp.sqrt(lr.warm_start_risk(warm, sample, warm_mask))
        d_cold = jnp.sqrt(lr.warm_start_risk(zero, sample, warm_mask))

        def solve(pi0, scale):
            def per(inst, target):
                best = lr.subgradient(inst, pi0, c.subgradient_steps, scale).best_values
                return best, *lr.iterations_to_gap(best, target, c.gap)

            return jax.vmap(per)(insts, values)

        return excess, solve(zero, d_cold), solve(warm, d_warm), d_cold, d_warm

    excess, cold, hot, d_cold, d_warm = jax.jit(jax.vmap(one))(
        np.asarray(inst_pi, np.float32), key_data, dists.instances,
        np.asarray(inst_value, np.float32))
    out = {"warm_excess": np.asarray(excess, np.float64),
           "d_cold": np.asarray(d_cold), "d_warm": np.asarray(d_warm)}
    for tag, (best, iters, reached) in (("cold", cold), ("warm", hot)):
        gap = (inst_value[..., None] - np.asarray(best, np.float64)) / np.maximum(
            np.abs(inst_value[..., None]), 1.0)
        out[f"{tag}_gap_curve"] = gap.reshape(-1, gap.shape[-1]).mean(0)
        out[f"{tag}_iters"] = np.asarray(iters, np.float64)
        out[f"{tag}_reached"] = np.asarray(reached)
    return out


def _stats(x):
    """Mean over repetitions, its standard error, and min mean / se (resolution)."""
    mean = x.mean(0)
    se = x.std(0, ddof=1) / np.sqrt(x.shape[0])
    return mean, se, float(np.min(mean / np.maximum(se, 1e-300)))


def compute(c: LagrangianConfig, key) -> dict[str, np.ndarray]:
    """Every measurement of the experiment (three compiled programs and host LPs)."""
    sizes = np.asarray(c.sample_sizes)
    n_s = len(c.s_grid)
    n_first = c.reps * len(sizes)
    n_lanes = n_first + n_s * c.reps
    # Every key from one split (raw key data, indexed on the host): one small program.
    kd = np.asarray(jax.random.key_data(jax.random.split(key, 2 * c.reps + n_lanes)))
    kd_fam, kd_lane, kd_warm = kd[: c.reps], kd[c.reps: c.reps + n_lanes], kd[c.reps + n_lanes:]
    # The N sweep's distributions first, then the s sweep's (same keys: common random
    # numbers across s), all from one generator program.
    fam = families(c, kd_fam, [c.n_coupling, *c.s_grid])  # (1 + n_s, reps) distributions
    host = {k: getattr(fam.instances, k) for k in ("c", "A", "b")}
    ref = references({k: v[0] for k, v in host.items()}, c.n_coupling)
    pi_s = [references({k: v[1 + i] for k, v in host.items()}, s, per_instance=False)["pi_star"]
            for i, s in enumerate(c.s_grid)]
    # Lanes: (repetition, N) of the N sweep, then (s, repetition) at N = n_for_s.
    pi_lane = np.concatenate([np.repeat(ref["pi_star"], len(sizes), 0), *pi_s])
    n_lane = np.concatenate([np.tile(sizes, c.reps), np.full(n_s * c.reps, c.n_for_s)])
    rep_lane = np.concatenate([np.repeat(np.arange(c.reps), len(sizes)),
                               np.tile(np.arange(c.reps), n_s)])
    grp_lane = np.concatenate([np.zeros(c.reps * len(sizes), int),
                               np.repeat(1 + np.arange(n_s), c.reps)])
    dists = jax.tree_util.tree_map(lambda x: x[grp_lane, rep_lane], fam)
    radius = c.radius_factor * np.linalg.norm(pi_lane, axis=1)
    ex, g, f_star = sga_lanes(dists, pi_lane, radius, kd_lane, n_lane, int(sizes[-1]))
    bound = radius * g / np.sqrt(n_lane)
    out = {**ref,
           "sga_excess": ex[:n_first].reshape(c.reps, len(sizes)),
           "sga_bound": bound[:n_first].reshape(c.reps, len(sizes)),
           "f_star": f_star[:n_first].reshape(c.reps, len(sizes))[:, 0],
           "s_excess": ex[n_first:].reshape(n_s, c.reps).T,
           "s_bound": bound[n_first:].reshape(n_s, c.reps).T}
    out.update(warm_and_iterations(c, _index(fam, 0), ref["inst_pi"], ref["inst_value"],
                                   kd_warm, sizes))
    return out


def run(config: LagrangianConfig, ctx: Context) -> dict:
    c = config
    sizes = np.asarray(c.sample_sizes)
    cell = ctx.cell("all", lambda: compute(c, ctx.key))
    m: dict = {"sample_sizes": sizes, "s_grid": np.asarray(c.s_grid), "reps": c.reps,
               "n_coupling": c.n_coupling}
    ex = cell["sga_excess"]
    m["sga_excess"], m["sga_excess_se"], m["sga_excess_min_z"] = _stats(ex)
    m["sga_slope"] = loglog_slope(sizes, m["sga_excess"])
    m["sga_bound"] = cell["sga_bound"].mean(0)
    m["sga_bound_ratio_max"] = float(np.max((ex / cell["sga_bound"]).mean(0)))
    m["sga_relative_excess_at_max_n"] = float(np.mean(ex[:, -1] / np.abs(cell["f_star"])))
    m["reference_duality_gap"] = float(np.max(np.abs(cell["f_star"] - cell["lp_value"])
                                              / np.maximum(np.abs(cell["lp_value"]), 1.0)))
    wex = cell["warm_excess"]
    m["warm_excess"], m["warm_excess_se"], m["warm_excess_min_z"] = _stats(wex)
    m["warm_slope"] = loglog_slope(sizes, m["warm_excess"])
    sex = cell["s_excess"]
    m["s_excess"], m["s_excess_se"], _ = _stats(sex)
    m["s_slope"] = loglog_slope(c.s_grid, m["s_excess"])
    m["s_monotone"] = bool(np.all(np.diff(m["s_excess"]) > 0))
    m["s_bound"] = cell["s_bound"].mean(0)
    m["cold_iters"] = float(cell["cold_iters"].mean())
    m["warm_iters"] = float(cell["warm_iters"].mean())
    m["cold_reached_fraction"] = float(cell["cold_reached"].mean())
    m["warm_reached_fraction"] = float(cell["warm_reached"].mean())
    m["warm_over_cold_iterations"] = m["warm_iters"] / max(m["cold_iters"], 1e-9)
    m["cold_gap_curve"] = cell["cold_gap_curve"]
    m["warm_gap_curve"] = cell["warm_gap_curve"]
    m["start_distance_ratio"] = float(np.mean(cell["d_warm"] / cell["d_cold"]))

    ctx.report.add_figure(plot(c, m), "excess_vs_n.png",
                          f"Left: excess expected dual value of averaged SGA and excess "
                          f"warm-start risk vs N (mean ± s.e., {c.reps} repetitions, s = "
                          f"{c.n_coupling}); dotted: the bound R G / sqrt N. Middle: SGA "
                          f"excess vs s at N = {c.n_for_s}. Right: mean relative gap of the "
                          "per-instance subgradient method from 0 and from the warm start.")
    ctx.report.add_text(summary_markdown(c, m))
    return m


def plot(c, m):
    plt = pyplot()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    n = np.asarray(m["sample_sizes"], float)
    a1.errorbar(n, m["sga_excess"], yerr=m["sga_excess_se"], marker="o", capsize=2,
                label=f"averaged SGA: F(pi*) - F(pi_bar) (slope {m['sga_slope']:.2f})")
    a1.errorbar(n, m["warm_excess"], yerr=m["warm_excess_se"], marker="s", capsize=2,
                label=f"warm start: excess risk (slope {m['warm_slope']:.2f})")
    a1.plot(n, m["sga_bound"], "k:", label="R G / sqrt N")
    a1.plot(n, m["sga_excess"][0] * (n / n[0]) ** -0.5, color="0.6", lw=0.8, label="slope -1/2")
    a1.plot(n, m["warm_excess"][0] * (n / n[0]) ** -1.0, color="0.6", lw=0.8, ls="--",
            label="slope -1")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("sample size N")
    a1.set_ylabel("excess")
    a1.set_title("Excess vs N (log-log)")
    a1.legend(fontsize=7)
    s = np.asarray(m["s_grid"], float)
    a2.errorbar(s, m["s_excess"], yerr=m["s_excess_se"], marker="o", capsize=2,
                label=f"averaged SGA (slope {m['s_slope']:.2f})")
    a2.plot(s, m["s_bound"], "k:", label="R G / sqrt N")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("coupling constraints s")
    a2.set_ylabel(f"excess at N = {c.n_for_s}")
    a2.set_title("Excess vs s at fixed N")
    a2.legend(fontsize=7)
    t = np.arange(len(m["cold_gap_curve"]))
    a3.plot(t, np.maximum(m["cold_gap_curve"], 1e-7), label=f"from 0 ({m['cold_iters']:.0f} it.)")
    a3.plot(t, np.maximum(m["warm_gap_curve"], 1e-7),
            label=f"learned warm start ({m['warm_iters']:.0f} it.)")
    a3.axhline(c.gap, color="k", ls=":", lw=0.8, label=f"gap {c.gap:g}")
    a3.set_yscale("log")
    a3.set_xlabel("subgradient iteration")
    a3.set_ylabel("mean relative gap (u* - best) / |u*|")
    a3.set_title("Per-instance subgradient method")
    a3.legend(fontsize=7)
    return fig


def summary_markdown(c, m) -> str:
    rows = "".join(
        f"| {n} | {e:.4g} ± {se:.2g} | {b:.3g} | {w:.3g} ± {ws:.2g} |\n"
        for n, e, se, b, w, ws in zip(m["sample_sizes"], m["sga_excess"], m["sga_excess_se"],
                                      m["sga_bound"], m["warm_excess"], m["warm_excess_se"],
                                      strict=True))
    srows = "".join(f"| {s} | {e:.4g} ± {se:.2g} | {b:.3g} |\n" for s, e, se, b in zip(
        m["s_grid"], m["s_excess"], m["s_excess_se"], m["s_bound"], strict=True))
    return (
        f"Family: K = {c.n_scenarios} scenarios, separable = {c.separable}, "
        f"{c.vars_per_row} variable(s) per row, spread {c.spread}, demand {c.demand}; "
        f"{c.reps} repetitions (a fresh distribution and sample each), exact expectations.\n\n"
        f"| N | SGA excess (s = {c.n_coupling}) | R G / sqrt N | warm-start excess |\n"
        f"|---|---|---|---|\n{rows}\n"
        f"- slopes in log N: SGA {m['sga_slope']:.3f}, warm start {m['warm_slope']:.3f}\n"
        f"- largest mean excess / bound: {m['sga_bound_ratio_max']:.3f}; relative excess at "
        f"N = {int(m['sample_sizes'][-1])}: {m['sga_relative_excess_at_max_n']:.2e}\n\n"
        f"| s | SGA excess at N = {c.n_for_s} | R G / sqrt N |\n|---|---|---|\n{srows}\n"
        f"- slope in log s: {m['s_slope']:.3f}\n"
        f"- per-instance subgradient, iterations to relative gap {c.gap:g} (mean over "
        f"{c.reps} x {c.n_scenarios} instances, {c.subgradient_steps} steps at most): from 0 "
        f"{m['cold_iters']:.1f} (reached {m['cold_reached_fraction']:.2f}), from the warm start "
        f"learned on {c.warm_n} instances {m['warm_iters']:.1f} (reached "
        f"{m['warm_reached_fraction']:.2f}); ratio {m['warm_over_cold_iterations']:.3f}\n"
    )


def _resolved(name: str, meaning: str) -> tuple[Metric, ...]:
    """A mean over repetitions, its standard error and its resolution (mean / s.e.)."""
    return (Metric(name, meaning, better="lower"), Metric(f"{name}_se", "its standard error"),
            Metric(f"{name}_min_z", "smallest mean / standard error over N (resolution)"))


METRICS = (
    Metric("sample_sizes", "N grid"),
    Metric("s_grid", "s grid of the s sweep"),
    Metric("reps", "repetitions per grid point"),
    Metric("n_coupling", "s of the N sweep"),
    *_resolved("sga_excess", "mean exact excess F(pi*) - F(pi_bar) of averaged SGA per N"),
    Metric("sga_slope", "slope of log SGA excess vs log N"),
    Metric("sga_bound", "mean R G / sqrt N per N"),
    Metric("sga_bound_ratio_max", "largest mean excess / (R G / sqrt N) over N", better="lower"),
    Metric("sga_relative_excess_at_max_n", "mean excess / |F(pi*)| at the largest N",
           better="lower"),
    Metric("reference_duality_gap", "largest |F(pi*) - aggregated LP value| / |LP value|",
           better="lower"),
    *_resolved("warm_excess", "mean excess warm-start risk ||pi_hat - E pi*(P)||^2 per N"),
    Metric("warm_slope", "slope of log warm-start excess vs log N"),
    Metric("s_excess", "mean SGA excess per s at fixed N", better="lower"),
    Metric("s_excess_se", "its standard error"),
    Metric("s_slope", "slope of log SGA excess vs log s"),
    Metric("s_monotone", "the mean excess increases at every step of the s grid"),
    Metric("s_bound", "mean R G / sqrt N per s"),
    Metric("cold_iters", "mean subgradient iterations to the gap from 0", better="lower"),
    Metric("warm_iters", "mean subgradient iterations to the gap from the learned warm start",
           better="lower"),
    Metric("cold_reached_fraction", "share of instances where the cold start reached the gap"),
    Metric("warm_reached_fraction", "share of instances where the warm start reached the gap"),
    Metric("warm_over_cold_iterations", "warm / cold mean iterations to the gap", better="lower"),
    Metric("cold_gap_curve", "mean relative gap per iteration from 0"),
    Metric("warm_gap_curve", "mean relative gap per iteration from the warm start"),
    Metric("start_distance_ratio", "mean sqrt warm-start risk / sqrt cold risk (training)"),
)

CLAIMS = (
    Claim("sga_rate_sqrt_n", "Averaged projected SGA's excess expected dual value decays like "
          "1/sqrt N (slope about -1/2 in log N)",
          "-0.65 <= sga_slope <= -0.35 and sga_excess_min_z > 3",
          paper_value="Theta(s / sqrt N)",
          note="precondition: the excess is resolved (mean > 3 standard errors) at every N; "
          "exact expectations over the finite support, pi* from one LP"),
    Claim("sga_within_bound", "The excess stays below the guarantee R G / sqrt N, and SGA "
          "approaches the best constant multiplier (whose value equals the aggregated LP "
          "relaxation: LP duality)",
          "sga_bound_ratio_max < 1 and reference_duality_gap < 1e-4 and "
          "sga_relative_excess_at_max_n < 0.02"),
    Claim("warm_rate_n", "The learned warm start's excess decays like 1/N (slope about -1)",
          "-1.25 <= warm_slope <= -0.75 and warm_excess_min_z > 3", paper_value="Theta(s / N)",
          note="warm-start risk E||pi_0 - pi*(P)||^2, the distance term of the subgradient "
          "method's bound; targets pi*(P) are exact LP multipliers"),
    Claim("excess_grows_with_s", "At fixed N the excess grows with the number of coupling "
          "constraints s (linearly: slope about 1 in log s)",
          "s_monotone and 0.5 <= s_slope <= 1.5", paper_value="Theta(s / sqrt N)"),
    Claim("warm_start_cuts_iterations", "A learned warm start cuts the per-instance subgradient "
          "method's iterations to a given gap",
          "cold_reached_fraction >= 0.9 and warm_reached_fraction >= 0.9 and "
          "warm_over_cold_iterations < 0.5",
          note="precondition: both starts reach the gap on >= 90% of instances within the "
          "step budget; each start's step scale is its own training-set distance estimate"),
)

EXPERIMENT = Experiment(
    name="lagrangian",
    title="Learning Lagrangian multipliers: averaged SGA at s/sqrt(N), warm starts at s/N",
    paper="Learning Lagrangian relaxation multipliers: generalisation, minimax rates and warm "
          "starts (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
