"""Reproduction: when high dimension helps persistent homology (the blessing of
dimensionality for Vietoris-Rips persistence).

Four studies on the random function model ``Y_i = X(Z_i) + E_i``
(:mod:`jaxsci.stats.topology`), each one :func:`jaxsci.core.sweep` call (one compiled
program, the ripser stage a sequential host callback inside it) saved as one
``ctx.cell`` (resumable):

1. **Concentration** (noisy circle, :class:`~jaxsci.stats.topology.FourierCircle` with
   Gaussian noise): ``max_{i,j} |<Y_i, Y_j> / p - f(Z_i, Z_j) - s delta_ij|`` over a grid
   of ``p`` (``p_eff = p``); the paper's rate ``sqrt(log n / p_eff)`` is a slope of
   ``-1/2`` in ``log p``.
2. **Circle H1**: the longest H1 bar of the noisy circle against the second longest
   (separation) and against the bar of the ``p -> infinity`` limit distances
   (:func:`~jaxsci.stats.topology.limit_distances`; convergence).
3. **Grid-cell torus**: simulated grid cells (:class:`~jaxsci.stats.topology.GridCells`,
   hexagonal tuning, Poisson spike counts) at a fixed ``p`` with ``p_eff`` swept by the
   flat-top feature scales; Betti numbers ``(b_1, b_2)`` at the *oracle scale* and the
   isometry score (``R^2`` of squared data distances against squared flat-torus
   distances, pairs within ``isometry_radius``).
4. **Phase diagram** over ``(p_eff / log n, sigma)`` (grid cells, Gaussian noise), one
   vmapped sweep over every (``p_eff``, ``sigma``, repetition): the torus' H1 is
   recovered when ``b_1 = 2`` at the oracle scale.

The oracle scale (our choice; the abstract does not say at which scale Betti numbers are
read): the midpoint of the longest interval of scales on which the noiseless limit
diagram of the same latents has the torus' Betti numbers (``b_1 = 2``, ``b_2 = 1``).
A noise of per-feature variance ``s`` shifts every squared limit distance by ``2 s``
(the paper's uniform shift), which keeps the filtration's order, so the scale for noise
``s`` is ``sqrt(scale_0^2 + 2 s)``: one noiseless limit diagram serves every noise
level. If the limit diagram has no such interval (too few points for the Rips complex
to see the torus), the torus claims fail with that reason.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.stats import topology as tp

__all__ = ["TopologyConfig", "CONFIGS", "EXPERIMENT", "run", "oracle_scale", "loglog_slope"]


def _increasing(name, values, lo=None, hi=None):
    if len(values) < 3:
        raise ValueError(f"{name} needs at least 3 values, got {values}")
    if list(values) != sorted(set(values)):
        raise ValueError(f"{name} must be strictly increasing, got {values}")
    for v in values:
        if lo is not None and v < lo:
            raise ValueError(f"{name}[i] must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise ValueError(f"{name}[i] must be <= {hi}, got {v}")


@dataclasses.dataclass(frozen=True)
class TopologyConfig:
    # 1-2: the noisy circle (FourierCircle with one harmonic: a round circle in the limit).
    circle_n: int = 100
    circle_sigma: float = 1.0  # Gaussian noise per feature (the signal's variance is 1)
    circle_ps: tuple[int, ...] = (64, 256, 1024, 4096, 16384)
    circle_reps: int = 4
    # 3: the grid-cell torus, p_eff swept at a fixed p.
    torus_n: int = 150
    # p = 8192 for the quick budget: drawing the Poisson counts (150 x p per point) is the
    # study's main cost on 2 CPU cores; the full config goes to 65536.
    torus_p: int = 8192
    torus_p_effs: tuple[float, ...] = (16.0, 64.0, 256.0, 1024.0, 4096.0, 8192.0)
    torus_reps: int = 2
    kappa: float = 2.0  # grid-cell tuning sharpness
    poisson_rate: float = 5.0  # expected spike count at a cell's peak
    isometry_radius: float = 0.25  # flat-torus distance of the pairs scored (diameter 0.577)
    threshold_factor: float = 1.25  # the torus' Rips filtration stops at this x the scale
    # 4: the phase diagram (grid cells, Gaussian noise, H1 only).
    phase_n: int = 100
    phase_p: int = 4096
    phase_p_effs: tuple[float, ...] = (8.0, 32.0, 128.0, 512.0, 2048.0, 4096.0)
    # Spans the transition at p <= 4096 (grid-cell rates are <= 1, mean 0.2): a first grid
    # (0.25, 0.5, 1, 2) put every level but the lowest beyond p_eff = p (docs/topology.md).
    phase_sigmas: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    phase_reps: int = 3
    block_size: int = 64  # rows per block of the Gram/distance stage
    chunk_size: int | None = 12  # sweep points evaluated at once (bounds memory)
    n_bars: int = 8  # bars kept per dimension

    def __post_init__(self):
        for name in ("circle_n", "torus_n", "phase_n"):
            check_int(name, getattr(self, name), min=8)
        for name in ("circle_reps", "torus_reps", "phase_reps"):
            check_int(name, getattr(self, name), min=1)
        check_int("torus_p", self.torus_p, min=2)
        check_int("phase_p", self.phase_p, min=2)
        check_int("block_size", self.block_size, min=1)
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, min=1)
        check_int("n_bars", self.n_bars, min=4)
        check_scalar("circle_sigma", self.circle_sigma, ge=0.0)
        check_scalar("kappa", self.kappa, gt=0.0)
        check_scalar("poisson_rate", self.poisson_rate, gt=0.0)
        check_scalar("isometry_radius", self.isometry_radius, gt=0.0)
        check_scalar("threshold_factor", self.threshold_factor, gt=1.0)
        _increasing("circle_ps", self.circle_ps, lo=2)
        _increasing("torus_p_effs", self.torus_p_effs, lo=1.0, hi=self.torus_p)
        _increasing("phase_p_effs", self.phase_p_effs, lo=1.0, hi=self.phase_p)
        if len(self.phase_sigmas) < 2 or list(self.phase_sigmas) != sorted(set(self.phase_sigmas)):
            raise ValueError(f"phase_sigmas must be at least 2 strictly increasing values, got "
                             f"{self.phase_sigmas}")
        for s in self.phase_sigmas:
            check_scalar("phase_sigmas[i]", s, ge=0.0)


CONFIGS = {
    "smoke": TopologyConfig(circle_n=24, circle_ps=(32, 128, 512), circle_reps=1,
                            torus_n=40, torus_p=512, torus_p_effs=(8.0, 64.0, 512.0),
                            torus_reps=1, phase_n=30, phase_p=256,
                            phase_p_effs=(8.0, 64.0, 256.0), phase_sigmas=(0.5, 1.0),
                            phase_reps=1, block_size=16),
    "quick": TopologyConfig(),
    # Paper scale (a GPU and a few CPU minutes of ripser): more points, more repetitions.
    "full": TopologyConfig(circle_n=300, circle_ps=(64, 256, 1024, 4096, 16384, 65536),
                           circle_reps=16, torus_n=300, torus_p=65536,
                           torus_p_effs=(16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0),
                           torus_reps=8, phase_n=200, phase_p=16384,
                           phase_p_effs=(8.0, 32.0, 128.0, 512.0, 2048.0, 8192.0, 16384.0),
                           phase_sigmas=(0.25, 0.5, 1.0, 2.0, 4.0), phase_reps=8,
                           block_size=256),
}


# --------------------------------------------------------------------------- helpers


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.maximum(np.asarray(y, float), 1e-30))
    return float(np.polyfit(lx, ly, 1)[0])


def oracle_scale(dg: tp.Diagrams, target: tuple[int, ...]) -> tuple[float, float]:
    """Midpoint and length of the longest interval of scales on which ``dg`` has Betti
    numbers ``target`` in dimensions ``1..len(target)``; ``(nan, 0)`` when none has."""
    births, deaths = np.asarray(dg.births), np.asarray(dg.deaths)
    ends = np.concatenate([births[1:].ravel(), deaths[1:].ravel()])
    ends = np.unique(ends[np.isfinite(ends) & (ends > 0)])
    best = (math.nan, 0.0)
    for a, b in zip(ends[:-1], ends[1:], strict=True):
        mid = 0.5 * (a + b)
        alive = ((births <= mid) & (mid < deaths)).sum(-1)[1:len(target) + 1]
        if tuple(int(x) for x in alive) == tuple(target) and b - a > best[1]:
            best = (float(mid), float(b - a))
    return best


def _keys(key, *shape):
    n = int(np.prod(shape))
    return jax.random.key_data(jax.random.split(key, n))


# --------------------------------------------------------------------------- studies


def circle_study(c: TopologyConfig, key) -> dict[str, np.ndarray]:
    """Studies 1-2: one sweep over repetitions. Each repetition draws ``max(circle_ps)``
    features; the ``p``-feature data set is its first ``p`` features (the features are
    iid, so a prefix is a draw at ``p``: nested designs, common random numbers over
    ``p``), so every ``p`` runs in one compiled program."""
    fn, noise = tp.FourierCircle(), tp.GaussianNoise(c.circle_sigma)
    z = tp.sample_circle(jax.random.fold_in(key, 0), c.circle_n)
    want = tp.expected_gram(fn, noise, z)
    p_max = max(c.circle_ps)

    def one(pt):
        y = tp.simulate(fn, noise, z, jax.random.wrap_key_data(pt["key"]), p=p_max)
        out = {"err": [], "top": [], "second": []}
        for p in c.circle_ps:
            yp = y[:, :p]
            d = tp.pairwise_distances(yp, c.block_size, float(p))
            pers = tp.bar_persistence(tp.rips_persistence(d, maxdim=1, n_bars=c.n_bars))[1]
            out["err"].append(tp.dot_product_error(tp.gram(yp, c.block_size), want))
            out["top"].append(pers[0])
            out["second"].append(pers[1])
        return {k: jnp.stack(v) for k, v in out.items()}

    res = sweep(one, {"key": _keys(jax.random.fold_in(key, 1), c.circle_reps)})
    lim = tp.rips_persistence(tp.limit_distances(fn, noise, z), maxdim=1, n_bars=c.n_bars)
    lim_pers = np.asarray(tp.bar_persistence(lim))[1]
    # (reps, n_p) -> (n_p, reps)
    return {**{k: np.asarray(v).T for k, v in res.items()}, "limit_top": lim_pers[0],
            "limit_second": lim_pers[1]}


def torus_study(c: TopologyConfig, key) -> dict[str, np.ndarray]:
    """Study 3: one sweep over (p_eff, repetition) at a fixed ``p``."""
    fn, noise = tp.GridCells(c.kappa), tp.PoissonNoise(c.poisson_rate)
    u = tp.sample_torus(jax.random.fold_in(key, 0), c.torus_n)
    lim0 = tp.rips_persistence(tp.limit_distances(fn, tp.GaussianNoise(0.0), u), maxdim=2,
                               n_bars=c.n_bars)
    scale0, width0 = oracle_scale(lim0, (2, 1))
    shift = float(noise.shift(fn))
    scale = math.sqrt(scale0**2 + 2 * shift) if math.isfinite(scale0) else 0.0
    threshold = c.threshold_factor * scale if scale > 0 else math.inf
    latent = tp.torus_distance(u, u)
    n_pe = len(c.torus_p_effs)
    pe = np.repeat(np.asarray(c.torus_p_effs, np.float32), c.torus_reps)
    p = c.torus_p

    def one(pt):
        y = tp.simulate(fn, noise, u, jax.random.wrap_key_data(pt["key"]), p=p,
                        scales=tp.feature_scales(p, pt["p_eff"]))
        d = tp.pairwise_distances(y, c.block_size, float(p))
        # The filtration stops at threshold_factor x the oracle scale: the Betti numbers
        # at the scale are exact, bars still alive there are capped at the threshold.
        dg = tp.rips_persistence(d, maxdim=2, n_bars=c.n_bars, threshold=threshold)
        pers = jnp.minimum(dg.deaths, threshold) - dg.births
        return {"betti": tp.betti_numbers(dg, scale), "h1": pers[1], "h2": pers[2],
                "iso": tp.isometry_score(d, latent, c.isometry_radius)}

    res = sweep(one, {"p_eff": pe, "key": _keys(jax.random.fold_in(key, 1), n_pe * c.torus_reps)},
                chunk_size=c.chunk_size)
    shape = (n_pe, c.torus_reps)
    out = {k: np.asarray(v).reshape(shape + np.shape(v)[1:]) for k, v in res.items()}
    lim = tp.rips_persistence(tp.limit_distances(fn, noise, u), maxdim=2, n_bars=c.n_bars)
    return {**out, "scale0": np.asarray(scale0), "scale": np.asarray(scale),
            "scale_width": np.asarray(width0), "shift": np.asarray(shift),
            "limit_betti": np.asarray(tp.betti_numbers(lim, scale)),
            "limit_iso": np.asarray(tp.isometry_score(tp.limit_distances(fn, noise, u), latent,
                                                      c.isometry_radius))}


def phase_study(c: TopologyConfig, key) -> dict[str, np.ndarray]:
    """Study 4: one vmapped sweep over every (p_eff, sigma, repetition)."""
    fn = tp.GridCells(c.kappa)
    u = tp.sample_torus(jax.random.fold_in(key, 0), c.phase_n)
    lim0 = tp.rips_persistence(tp.limit_distances(fn, tp.GaussianNoise(0.0), u), maxdim=1,
                               n_bars=c.n_bars)
    scale0, width0 = oracle_scale(lim0, (2,))
    s0 = scale0 if math.isfinite(scale0) else 0.0
    a, b, r = np.meshgrid(np.asarray(c.phase_p_effs, np.float32),
                          np.asarray(c.phase_sigmas, np.float32), np.arange(c.phase_reps),
                          indexing="ij")
    p = c.phase_p

    def one(pt):
        noise = tp.GaussianNoise(pt["sigma"])
        y = tp.simulate(fn, noise, u, jax.random.wrap_key_data(pt["key"]), p=p,
                        scales=tp.feature_scales(p, pt["p_eff"]))
        d = tp.pairwise_distances(y, c.block_size, float(p))
        dg = tp.rips_persistence(d, maxdim=1, n_bars=c.n_bars)
        scale = jnp.sqrt(s0**2 + 2 * noise.shift(fn))  # the uniform shift of the limit
        return {"b1": tp.betti_numbers(dg, scale)[1]}

    res = sweep(one, {"p_eff": a.ravel(), "sigma": b.ravel(),
                      "key": _keys(jax.random.fold_in(key, 1), a.size)},
                chunk_size=c.chunk_size)
    b1 = np.asarray(res["b1"]).reshape(a.shape)
    return {"b1": b1, "scale0": np.asarray(scale0), "scale_width": np.asarray(width0)}


# --------------------------------------------------------------------------- run


def _first_at_least(x, values, level):
    hits = np.nonzero(np.asarray(values) >= level)[0]
    return float(x[hits[0]]) if hits.size else math.inf


def run(config: TopologyConfig, ctx: Context) -> dict:
    c = config
    bar = ctx.bar(total=3, desc="topology: circle, torus, phase diagram")
    studies = {"circle": circle_study, "torus": torus_study, "phase": phase_study}
    cells, seconds = {}, {}
    for i, (name, study) in enumerate(studies.items()):
        bar.set_postfix(study=name)
        t0 = time.perf_counter()
        cells[name] = ctx.cell(name, lambda study=study, i=i: study(
            c, jax.random.fold_in(ctx.key, i)))
        seconds[name] = time.perf_counter() - t0
        bar.update()
    bar.close()
    circ, tor, ph = cells["circle"], cells["torus"], cells["phase"]

    m: dict = {}
    ps = np.asarray(c.circle_ps, float)
    err = circ["err"].mean(1)
    m["circle_ps"] = ps
    m["dot_error"] = err
    m["dot_error_slope"] = loglog_slope(ps, err)
    m["dot_error_over_rate"] = err / np.sqrt(math.log(c.circle_n) / ps)
    top, second = circ["top"].mean(1), circ["second"].mean(1)
    lim_top = float(circ["limit_top"])
    m["h1_top"] = top
    m["h1_second"] = second
    m["h1_limit_top"] = lim_top
    m["h1_limit_second"] = float(circ["limit_second"])
    m["h1_separation"] = second / np.maximum(top, 1e-12)  # -> limit's ratio (0: one bar)
    m["h1_rel_error"] = np.abs(circ["top"] - lim_top).mean(1) / lim_top
    m["h1_separation_first"], m["h1_separation_last"] = float(m["h1_separation"][0]), \
        float(m["h1_separation"][-1])
    m["h1_rel_error_first"], m["h1_rel_error_last"] = float(m["h1_rel_error"][0]), \
        float(m["h1_rel_error"][-1])

    pe = np.asarray(c.torus_p_effs, float)
    ratio = pe / math.log(c.torus_n)
    betti = tor["betti"]  # (n_pe, reps, 3)
    is_torus = (betti[..., 1] == 2) & (betti[..., 2] == 1)
    m["torus_p_eff_over_log_n"] = ratio
    m["torus_scale"] = float(tor["scale"])
    m["torus_scale_width"] = float(tor["scale_width"])
    m["torus_limit_is_torus"] = float((tor["limit_betti"][1] == 2) & (tor["limit_betti"][2] == 1)
                                      & (tor["scale_width"] > 0))
    m["torus_b1"] = betti[..., 1].mean(1)
    m["torus_b2"] = betti[..., 2].mean(1)
    m["torus_fraction"] = is_torus.mean(1)
    m["torus_fraction_first"] = float(m["torus_fraction"][0])
    m["torus_fraction_last"] = float(m["torus_fraction"][-1])
    m["torus_h1_top3"] = tor["h1"][..., :3].mean(1)
    m["torus_h2_top2"] = tor["h2"][..., :2].mean(1)
    iso = tor["iso"].mean(1)
    m["isometry_score"] = iso
    m["isometry_limit"] = float(tor["limit_iso"])
    m["isometry_first"], m["isometry_last"] = float(iso[0]), float(iso[-1])
    m["isometry_rank_corr"] = float(np.corrcoef(np.argsort(np.argsort(iso)),
                                                np.arange(len(iso)))[0, 1])

    ppe = np.asarray(c.phase_p_effs, float)
    prat = ppe / math.log(c.phase_n)
    rec = (ph["b1"] == 2).mean(-1)  # (n_pe, n_sigma)
    m["phase_p_eff_over_log_n"] = prat
    m["phase_sigmas"] = np.asarray(c.phase_sigmas, float)
    m["phase_recovered"] = rec
    m["phase_scale_width"] = float(ph["scale_width"])
    bound = np.asarray([_first_at_least(prat, rec[:, j], 0.5) for j in range(rec.shape[1])])
    m["phase_boundary"] = bound  # inf: never recovered on the grid
    m["phase_boundaries_found"] = int(np.sum(np.isfinite(bound)))
    # Non-decreasing in sigma (a boundary beyond the grid, inf, may only follow).
    m["phase_boundary_monotone"] = float(all(b2 >= b1 for b1, b2 in zip(bound[:-1], bound[1:],
                                                                         strict=True)))
    m["phase_low_noise_first"] = float(rec[0, 0])
    m["phase_low_noise_last"] = float(rec[-1, 0])

    ctx.report.add_figure(plot_circle(c, m), "circle.png",
                          "Left: max |<Y_i, Y_j>/p - f - s delta_ij| against p (log-log) with "
                          "the slope -1/2 reference. Right: the two longest H1 bars of the "
                          "noisy circle against p, and the p -> infinity bar (dashed).")
    ctx.report.add_figure(plot_torus(c, m), "torus.png",
                          "Simulated grid cells: fraction of runs with (b1, b2) = (2, 1) at "
                          "the oracle scale, and the isometry score, against p_eff / log n.")
    ctx.report.add_figure(plot_phase(c, m), "phase.png",
                          "Phase diagram: fraction of runs recovering the torus' H1 (b1 = 2 "
                          "at the oracle scale) over (p_eff / log n, sigma).")
    ctx.report.add_text(summary_markdown(c, m) + "\nwall time per study (s; 0: resumed "
                        "from a saved cell): " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                          seconds.items()) + "\n")
    return m


def plot_circle(c, m):
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8), constrained_layout=True)
    ps = np.asarray(m["circle_ps"])
    a1.loglog(ps, m["dot_error"], "o-", label=f"measured (slope {m['dot_error_slope']:.2f})")
    a1.loglog(ps, m["dot_error"][0] * np.sqrt(ps[0] / ps), "k:", label="slope -1/2")
    a1.set_xlabel("p (= p_eff)")
    a1.set_ylabel("max |<Y_i,Y_j>/p - E|")
    a1.set_title("Dot-product concentration")
    a1.legend(fontsize=7)
    a2.semilogx(ps, m["h1_top"], "o-", label="longest H1 bar")
    a2.semilogx(ps, m["h1_second"], "s-", label="second H1 bar")
    a2.axhline(m["h1_limit_top"], color="k", ls="--", label="p -> infinity limit")
    a2.set_xlabel("p")
    a2.set_ylabel("bar length (distance / sqrt p)")
    a2.set_title(f"Noisy circle, sigma = {c.circle_sigma}")
    a2.legend(fontsize=7)
    return fig


def plot_torus(c, m):
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8), constrained_layout=True)
    x = np.asarray(m["torus_p_eff_over_log_n"])
    a1.semilogx(x, m["torus_fraction"], "o-", label="(b1, b2) = (2, 1)")
    a1.semilogx(x, m["torus_b1"], "s--", label="mean b1")
    a1.semilogx(x, m["torus_b2"], "^--", label="mean b2")
    a1.set_xlabel("p_eff / log n")
    a1.set_ylabel("fraction / Betti number")
    a1.set_title("Grid-cell torus at the oracle scale")
    a1.legend(fontsize=7)
    a2.semilogx(x, m["isometry_score"], "o-", label="data")
    a2.axhline(m["isometry_limit"], color="k", ls="--", label="p -> infinity limit")
    a2.set_xlabel("p_eff / log n")
    a2.set_ylabel("R^2 vs flat-torus distances")
    a2.set_title(f"Isometry score (pairs within {c.isometry_radius})")
    a2.legend(fontsize=7)
    return fig


def plot_phase(c, m):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4), constrained_layout=True)
    rec = np.asarray(m["phase_recovered"])
    im = ax.imshow(rec.T, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(rec.shape[0]), [f"{v:.0f}" for v in m["phase_p_eff_over_log_n"]])
    ax.set_yticks(range(rec.shape[1]), [f"{v:g}" for v in m["phase_sigmas"]])
    ax.set_xlabel("p_eff / log n")
    ax.set_ylabel("noise sigma")
    ax.set_title("Torus H1 recovered (fraction of runs)")
    fig.colorbar(im, ax=ax)
    return fig


def summary_markdown(c, m) -> str:
    rows = "".join(f"| {int(p)} | {e:.4f} | {r:.2f} | {t:.3f} | {s:.3f} | {q:.3f} |\n"
                   for p, e, r, t, s, q in zip(m["circle_ps"], m["dot_error"],
                                               m["dot_error_over_rate"], m["h1_top"],
                                               m["h1_second"], m["h1_rel_error"], strict=True))
    trows = "".join(
        f"| {pe:g} | {x:.1f} | {f:.2f} | {b1:.2f} | {b2:.2f} | {i:.3f} |\n"
        for pe, x, f, b1, b2, i in zip(c.torus_p_effs, m["torus_p_eff_over_log_n"],
                                       m["torus_fraction"], m["torus_b1"], m["torus_b2"],
                                       m["isometry_score"], strict=True))
    prow = "| p_eff / log n | " + " | ".join(f"sigma {s:g}" for s in c.phase_sigmas) + " |\n"
    prow += "|---|" + "---|" * len(c.phase_sigmas) + "\n"
    for x, r in zip(m["phase_p_eff_over_log_n"], m["phase_recovered"], strict=True):
        prow += f"| {x:.1f} | " + " | ".join(f"{v:.2f}" for v in r) + " |\n"
    return (
        f"### Noisy circle (n = {c.circle_n}, sigma = {c.circle_sigma}, {c.circle_reps} reps)\n\n"
        "| p | max dot error | error / sqrt(log n / p) | H1 top | H1 second | "
        "H1 relative error |\n|---|---|---|---|---|---|\n" + rows +
        f"\nslope of log error vs log p: {m['dot_error_slope']:.3f} (paper: -1/2); the "
        f"p -> infinity H1 bar: {m['h1_limit_top']:.3f} (second {m['h1_limit_second']:.3f})\n\n"
        f"### Grid-cell torus (n = {c.torus_n}, p = {c.torus_p}, kappa = {c.kappa}, Poisson "
        f"rate {c.poisson_rate}, {c.torus_reps} reps)\n\n"
        f"oracle scale {m['torus_scale']:.4f} (interval width {m['torus_scale_width']:.4f}); "
        f"the limit diagram is a torus there: {bool(m['torus_limit_is_torus'])}; limit "
        f"isometry score {m['isometry_limit']:.3f}\n\n"
        "| p_eff | p_eff / log n | fraction (b1, b2) = (2, 1) | mean b1 | mean b2 | "
        "isometry R^2 |\n|---|---|---|---|---|---|\n" + trows +
        f"\n### Phase diagram (n = {c.phase_n}, p = {c.phase_p}, {c.phase_reps} reps; "
        "fraction with b1 = 2)\n\n" + prow +
        "\nboundary (first p_eff / log n with fraction >= 1/2) per sigma: "
        + ", ".join(f"{b:.1f}" for b in m["phase_boundary"]) + "\n"
    )


METRICS = (
    Metric("circle_ps", "p values of the circle studies"),
    Metric("dot_error", "mean max |<Y_i,Y_j>/p - f - s delta_ij| per p", better="lower"),
    Metric("dot_error_slope", "slope of log dot_error against log p"),
    Metric("dot_error_over_rate", "dot_error / sqrt(log n / p) per p (flat: the paper's rate)"),
    Metric("h1_top", "mean longest H1 bar of the noisy circle per p"),
    Metric("h1_second", "mean second-longest H1 bar per p"),
    Metric("h1_limit_top", "longest H1 bar of the p -> infinity limit distances"),
    Metric("h1_limit_second", "second-longest H1 bar of the limit"),
    Metric("h1_separation", "second / longest H1 bar per p", better="lower"),
    Metric("h1_rel_error", "mean |longest H1 bar - limit| / limit per p", better="lower"),
    Metric("h1_separation_first", "h1_separation at the smallest p"),
    Metric("h1_separation_last", "h1_separation at the largest p", better="lower"),
    Metric("h1_rel_error_first", "h1_rel_error at the smallest p"),
    Metric("h1_rel_error_last", "h1_rel_error at the largest p", better="lower"),
    Metric("torus_p_eff_over_log_n", "p_eff / log n of the torus study"),
    Metric("torus_scale", "the oracle scale at the torus study's noise"),
    Metric("torus_scale_width", "width of the limit's (2, 1) interval (0: none)"),
    Metric("torus_limit_is_torus", "1 if the limit diagram has (b1, b2) = (2, 1) there"),
    Metric("torus_b1", "mean b1 at the oracle scale per p_eff"),
    Metric("torus_b2", "mean b2 at the oracle scale per p_eff"),
    Metric("torus_fraction", "fraction of runs with (b1, b2) = (2, 1) per p_eff", better="higher"),
    Metric("torus_fraction_first", "torus_fraction at the smallest p_eff"),
    Metric("torus_fraction_last", "torus_fraction at the largest p_eff", better="higher"),
    Metric("torus_h1_top3", "mean three longest H1 bars per p_eff (capped at the threshold)"),
    Metric("torus_h2_top2", "mean two longest H2 bars per p_eff (capped at the threshold)"),
    Metric("isometry_score", "mean isometry R^2 per p_eff", better="higher"),
    Metric("isometry_limit", "isometry R^2 of the limit distances"),
    Metric("isometry_first", "isometry R^2 at the smallest p_eff"),
    Metric("isometry_last", "isometry R^2 at the largest p_eff", better="higher"),
    Metric("isometry_rank_corr", "rank correlation of the isometry score with p_eff"),
    Metric("phase_p_eff_over_log_n", "p_eff / log n of the phase diagram"),
    Metric("phase_sigmas", "noise levels of the phase diagram"),
    Metric("phase_recovered", "fraction with b1 = 2 per (p_eff, sigma)"),
    Metric("phase_scale_width", "width of the noiseless limit's b1 = 2 interval (0: none)"),
    Metric("phase_boundary", "first p_eff / log n with recovery >= 1/2 per sigma (inf: none)",
           finite=False),
    Metric("phase_boundaries_found", "noise levels whose boundary lies on the grid"),
    Metric("phase_boundary_monotone", "1 if the boundary moves to larger p_eff with noise"),
    Metric("phase_low_noise_first", "recovery at the smallest p_eff, lowest noise"),
    Metric("phase_low_noise_last", "recovery at the largest p_eff, lowest noise"),
)

CLAIMS = (
    Claim("dot_products_concentrate", "max |<Y_i,Y_j>/p - f(Z_i,Z_j)| decays at the rate "
          "sqrt(log n / p_eff): slope about -1/2 in log p",
          "-0.6 < dot_error_slope < -0.4", paper_value="O(sqrt(log n / p_eff))"),
    Claim("circle_h1_separates", "The top H1 bar of a noisy circle separates from the rest as "
          "p grows", "h1_separation_last < 0.5 * h1_separation_first and "
          "h1_separation_last < 0.5"),
    Claim("circle_h1_converges", "... and converges to its p -> infinity limit",
          "h1_rel_error_last < 0.1 and h1_rel_error_last < 0.5 * h1_rel_error_first"),
    Claim("torus_homology_recovered", "Simulated grid cells show H1 rank 2 and H2 rank 1 once "
          "p_eff >> log n, and not before",
          "torus_limit_is_torus == 1 and torus_fraction_last == 1 and "
          "torus_fraction_first == 0",
          note="Betti numbers at the oracle scale (module docstring); the precondition is "
          "that the p -> infinity diagram of the same latents is a torus there"),
    Claim("isometry_rises", "The isometry score (R^2 against flat-torus distances) rises "
          "with p_eff", "isometry_rank_corr > 0.8 and isometry_last > isometry_first + 0.3"),
    Claim("phase_transition", "Phase diagram over (p_eff / log n, noise): recovery once "
          "p_eff / log n is large, not below; the boundary moves to larger p_eff with noise",
          "phase_low_noise_last == 1 and phase_low_noise_first == 0 and "
          "phase_boundaries_found >= 2 and phase_boundary_monotone == 1",
          note="precondition: a boundary on the grid for at least two noise levels"),
)

EXPERIMENT = Experiment(
    name="topology",
    title="When high dimension helps persistent homology",
    paper="A blessing of dimensionality for persistent homology under a random function "
          "model (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
