"""Reproduction: JIC-HD common hub detection vs pooling and per-population graphical lasso.

Data (:mod:`jaxsci.data.hubs`): ``K = 3`` precision matrices on ``p = 100`` variables
with 5 common hubs, 5 individual hubs per population and background edges, in two
regimes: **balanced** (individual hubs like the common ones) and **strong individual**
(denser individual hubs, twice as strong in population 1). For every regime, sample
size ``n`` and repetition, a fresh model and ``n`` Gaussian samples per population are
drawn, and JIC-HD (:func:`jaxsci.stats.ggm.jic_hd`), pooled IPC-HD (on the mean
correlation) and per-population IPC-HD score the variables. The whole
``(n, repetition)`` grid of one regime is one :func:`jaxsci.core.sweep` call (one
compiled program for both regimes and every ``n``: the sample size is traced).

Metrics: the common-hub AUC (common hubs against every other variable), the
common-vs-individual separation (AUC of common hubs against individual hubs only) and
the F1 of the two-means hub calls, per ``n``. The baseline a user would otherwise run,
scikit-learn's ``GraphicalLassoCV`` fitted per population (degree scores on the
intersection of the ``K`` estimated graphs), is fitted on ``glasso_reps`` fresh
instances at ``n = glasso_n`` in each regime of ``glasso_regimes``; JIC-HD is scored and
timed on the same instances, in the same run (one jitted call from samples to scores,
after a warm-up call, median of 3).

Claims: the AUC rises with ``n`` (both regimes); in the strong-individual regime,
where per-population detectors rank individual hubs above common ones (the
precondition, measured), JIC-HD separates common from individual hubs better than the
graphical-lasso intersection; JIC-HD is at least 50x faster than the graphical-lasso
path at equal or better AUC; and JIC-HD beats pooling in the strong regime (the
minimax's reason to exist). Where it does not win is reported too: the balanced
regime, where pooling is as good or better.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric, product_grid, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import hubs
from jaxsci.stats import ggm

__all__ = ["GGMConfig", "CONFIGS", "EXPERIMENT", "run", "glasso_scores", "fit_glasso"]

REGIMES = ("balanced", "strong")


@dataclasses.dataclass(frozen=True)
class GGMConfig:
    """The experiment's settings; the generator and the solver are nested values.

    The data defaults are the generator's (:class:`jaxsci.data.hubs.HubSpec`, the
    issue's design); ``r_max``, ``screen_keep`` and the solver budget are ours (the
    paper's were not available).
    """

    balanced: hubs.HubSpec = hubs.balanced()
    strong: hubs.HubSpec = hubs.strong_individual()
    ns: tuple[int, ...] = (50, 100, 200, 400, 800)  # samples per population
    reps: int = 6  # fresh models per (regime, n)
    r_max: int = 10  # the gap rule's largest r
    rank: int | None = None  # None: the gap rule on the joint values
    relative_gap: bool = True  # ratio form of the gap rule (ggm.gap_rank)
    screen_keep: float = 1.0  # per-population screening fraction (1: none)
    variant: Literal["joint", "sequential"] = "joint"
    solver: ggm.RiemannianSubgradient = ggm.RiemannianSubgradient(n_steps=200, n_starts=4)
    glasso_n: int = 400  # sample size of the graphical-lasso comparison
    glasso_reps: int = 2  # instances per regime fitted by GraphicalLassoCV
    glasso_regimes: tuple[str, ...] = ("strong",)
    glasso_cv: int = 3  # GraphicalLassoCV folds (scikit-learn's default: 5)
    glasso_refinements: int = 2  # GraphicalLassoCV n_refinements (default: 4)

    def __post_init__(self):
        for name in ("balanced", "strong"):
            if not isinstance(getattr(self, name), hubs.HubSpec):
                raise TypeError(f"{name} must be a HubSpec, got "
                                f"{type(getattr(self, name)).__name__}")
        b, s = self.balanced, self.strong
        shape = ("p", "n_populations", "n_common", "n_individual", "shared_shift")
        if any(getattr(b, f) != getattr(s, f) for f in shape):
            raise ValueError(f"balanced and strong must share {shape} (one compiled program)")
        if b.n_common < 1 or b.n_individual < 1:
            raise ValueError("the regimes need n_common >= 1 and n_individual >= 1 (the AUCs "
                             "rank common hubs against individual ones)")
        if not self.ns or list(self.ns) != sorted(set(self.ns)):
            raise ValueError(f"ns must be non-empty and strictly increasing, got {self.ns}")
        for n in self.ns:
            check_int("ns[i]", n, min=4)
        check_int("reps", self.reps, min=1)
        check_int("r_max", self.r_max, min=1, max=b.p - 1)
        if self.rank is not None:
            check_int("rank", self.rank, min=1, max=self.r_max)
        check_scalar("screen_keep", self.screen_keep, gt=0.0, le=1.0)
        if self.variant not in ("joint", "sequential"):
            raise ValueError(f"variant must be 'joint' or 'sequential', got {self.variant!r}")
        if not isinstance(self.solver, ggm.RiemannianSubgradient):
            raise TypeError("solver must be a RiemannianSubgradient")
        check_int("glasso_n", self.glasso_n, min=4)
        check_int("glasso_reps", self.glasso_reps, min=1)
        if not self.glasso_regimes or any(r not in REGIMES for r in self.glasso_regimes):
            raise ValueError(f"glasso_regimes must be a non-empty subset of {REGIMES}, got "
                             f"{self.glasso_regimes}")
        if "strong" not in self.glasso_regimes:
            raise ValueError("glasso_regimes must include 'strong' (the separation claim)")
        check_int("glasso_cv", self.glasso_cv, min=2)
        check_int("glasso_refinements", self.glasso_refinements, min=1)


CONFIGS = {
    "smoke": GGMConfig(
        balanced=hubs.balanced(p=30, n_common=2, n_individual=2),
        strong=hubs.strong_individual(p=30, n_common=2, n_individual=2),
        ns=(40, 80), reps=2, r_max=4, solver=ggm.RiemannianSubgradient(n_steps=20, n_starts=2),
        glasso_n=60, glasso_reps=1, glasso_cv=2, glasso_refinements=1),
    "quick": GGMConfig(),
    # Paper-scale: more repetitions and sizes, both regimes against GraphicalLassoCV with
    # scikit-learn's defaults (5 folds, 4 refinements).
    "full": GGMConfig(
        ns=(50, 100, 200, 400, 800, 1600), reps=50,
        solver=ggm.RiemannianSubgradient(n_steps=400, n_starts=8),
        glasso_reps=10, glasso_regimes=("balanced", "strong"), glasso_cv=5,
        glasso_refinements=4),
}


# --------------------------------------------------------------------------- JIC-HD


def _normalised(spec: hubs.HubSpec) -> hubs.HubSpec:
    """The spec with one strength per population (both regimes: one pytree structure)."""
    k = spec.n_populations
    strength = tuple(float(v) for v in np.broadcast_to(spec.individual_strength, (k,)))
    return dataclasses.replace(spec, individual_strength=strength)


def _scorer(config: GGMConfig):
    """One grid point ``{"key", "spec", "n"} -> dict``: a fresh instance, JIC-HD and the
    IPC-HD baselines. Made once per run: both regimes' sweeps share its program."""
    c = config
    n_max = max(max(c.ns), c.glasso_n)
    rank = None if c.rank is None else jnp.asarray(c.rank)

    def one(pt):
        key, spec, n = jax.random.wrap_key_data(pt["key"]), pt["spec"], pt["n"]
        k_g, k_x, k_j = jax.random.split(key, 3)
        g = hubs.hub_precisions(k_g, spec)
        x = hubs.gaussian_samples(k_x, g.theta, n_max)
        cs = ggm.correlation(x, n)
        j = ggm.jic_hd(cs, k_j, r_max=c.r_max, rank=rank, screen_keep=c.screen_keep,
                       solver=c.solver, sequential=c.variant == "sequential",
                       relative_gap=c.relative_gap, throw=False)
        kw = dict(r_max=c.r_max, rank=rank, screen_keep=c.screen_keep,
                  relative_gap=c.relative_gap, throw=False)
        pooled = ggm.pooled_ipc_hd(cs, **kw)
        per = jax.vmap(lambda ck: ggm.ipc_hd(ck, **kw).scores)(cs)
        ind = jnp.any(g.individual, axis=0)
        # All AUCs in one call: [JIC-HD, pooled] x [vs the rest, vs individual hubs], then
        # each population's IPC-HD against that population's individual hubs.
        two = jnp.stack([j.scores, pooled.scores])
        scores = jnp.concatenate([two, two, per])
        negative = jnp.concatenate([jnp.broadcast_to(~g.common, (2, g.common.size)),
                                    jnp.broadcast_to(ind, (2, ind.size)), g.individual])
        auc = ggm.hub_auc(scores, g.common, negative)
        return {
            "jic_auc": auc[0],
            "jic_sep": auc[2],
            "jic_f1": _f1(j.hubs, g.common),
            "jic_rank": j.rank,
            "pooled_auc": auc[1],
            "pooled_sep": auc[3],
            "pooled_f1": _f1(pooled.hubs, g.common),
            "per_sep": jnp.mean(auc[4:]),
            "ok": j.result == ggm.RESULTS.successful,
            "theta": g.theta,
            "common": g.common,
            "individual": g.individual,
        }

    return one


def _f1(called, truth):
    tp = jnp.sum(called & truth)
    return 2.0 * tp / jnp.maximum(jnp.sum(called) + jnp.sum(truth), 1)


def _grid(one, keys, ns, spec) -> dict[str, np.ndarray]:
    """``one`` at every ``(key, n)`` by one :func:`jaxsci.core.sweep` (shared program)."""
    g = len(ns)
    batched = jax.tree_util.tree_map(lambda v: jnp.full((g,), v, jnp.float32), spec)
    params = {"key": jax.random.key_data(keys), "n": jnp.asarray(ns), "spec": batched}
    return {k: np.asarray(v) for k, v in sweep(one, params).items()}


def _regime_grid(config: GGMConfig, one, key, spec) -> dict[str, np.ndarray]:
    c = config
    grid = product_grid(n=np.asarray(c.ns), rep=np.arange(c.reps))
    keys = jax.vmap(lambda r, n: jax.random.fold_in(jax.random.fold_in(key, r), n))(
        jnp.asarray(grid["rep"]), jnp.asarray(grid["n"]))
    out = _grid(one, keys, grid["n"], spec)
    shape = (len(c.ns), c.reps)
    return {k: v.reshape(shape) for k, v in out.items()
            if k not in ("theta", "common", "individual")}


# --------------------------------------------------------------------------- glasso


def fit_glasso(x: np.ndarray, *, cv: int = 5, n_refinements: int = 4):
    """scikit-learn ``GraphicalLassoCV`` on each population's standardised samples.

    Args:
      x: ``(K, n, p)`` samples.
      cv, n_refinements: ``GraphicalLassoCV``'s folds and grid refinements.

    Returns:
      ``(precisions (K, p, p), alphas (K,), failed)``: ``failed`` is the fraction of
      cross-validated grid points whose fit scikit-learn reported as failed (score
      ``-inf``: its coordinate descent stopped on an ill-conditioned system).
    """
    from sklearn.covariance import GraphicalLassoCV

    precisions, alphas, failed = [], [], []
    for xk in np.asarray(x, np.float64):
        xs = (xk - xk.mean(0)) / xk.std(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter of the CV path
            model = GraphicalLassoCV(cv=cv, n_refinements=n_refinements,
                                     assume_centered=True).fit(xs)
        precisions.append(model.precision_)
        alphas.append(model.alpha_)
        failed.append(np.mean(~np.isfinite(model.cv_results_["mean_test_score"])))
    return np.stack(precisions), np.asarray(alphas), float(np.mean(failed))


def glasso_scores(precisions: np.ndarray) -> tuple[np.ndarray, int]:
    """Common-hub scores from ``K`` estimated precisions: the degree in the
    intersection of the ``K`` graphs, ties broken by the smallest weighted degree
    ``min_k sum_i |Theta_k[i, j]|`` (scaled below 1). Returns ``(scores, edges)``
    with ``edges`` the number of edges of the intersection graph."""
    th = np.asarray(precisions, np.float64)
    p = th.shape[-1]
    off = ~np.eye(p, dtype=bool)
    edges = (np.abs(th) > 1e-8) & off
    inter = np.all(edges, axis=0)
    weighted = np.min(np.sum(np.abs(th) * off, axis=-1), axis=0)
    scores = inter.sum(1) + weighted / (1.0 + weighted.max())
    return scores, int(inter.sum() // 2)


def _glasso_cell(config: GGMConfig, one, jic, key, spec) -> dict[str, float]:
    """``glasso_reps`` fresh instances at ``n = glasso_n``: JIC-HD and the IPC-HD
    baselines scored through the sweep's program; JIC-HD timed as one jitted call
    (samples -> scores, after a warm-up call, median of 3); then ``GraphicalLassoCV`` per
    population on the same samples (timed)."""
    c = config
    size = len(c.ns) * c.reps  # the regime grids' size: the same compiled program
    which = np.arange(size) % c.glasso_reps
    keys = jax.vmap(lambda r: jax.random.fold_in(key, 10_000 + r))(jnp.asarray(which))
    out = _grid(one, keys, np.full(size, c.glasso_n), spec)
    rows = []
    n_max = max(max(c.ns), c.glasso_n)
    for i in range(c.glasso_reps):
        k_x, k_j = jax.random.split(keys[i], 3)[1:]  # the keys `one` used
        x = hubs.gaussian_samples(k_x, jnp.asarray(out["theta"][i]), n_max)[:, :c.glasso_n]
        jax.block_until_ready(jic(x, k_j))  # compile (not timed)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(jic(x, k_j))
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        theta, alphas, failed = fit_glasso(np.asarray(x), cv=c.glasso_cv,
                                           n_refinements=c.glasso_refinements)
        t_glasso = time.perf_counter() - t0
        scores, edges = glasso_scores(theta)
        common, individual = out["common"][i], out["individual"][i]
        rows.append({
            "glasso_auc": float(ggm.hub_auc(scores, common)),
            "glasso_sep": float(ggm.hub_auc(scores, common, individual.any(0))),
            "glasso_time": t_glasso, "glasso_edges": edges,
            "glasso_alpha": float(alphas.mean()), "glasso_failed": failed,
            "jic_auc": float(out["jic_auc"][i]), "jic_sep": float(out["jic_sep"][i]),
            "jic_time": float(np.median(times)), "per_sep": float(out["per_sep"][i]),
        })
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def _jic_call(config: GGMConfig):
    """Samples ``(K, n, p)`` -> JIC-HD scores, one jitted call: what is timed."""
    c = config
    rank = None if c.rank is None else jnp.asarray(c.rank)

    @jax.jit
    def jic(x, key):
        return ggm.jic_hd(ggm.correlation(x), key, r_max=c.r_max, rank=rank,
                          screen_keep=c.screen_keep, solver=c.solver,
                          sequential=c.variant == "sequential",
                          relative_gap=c.relative_gap).scores

    return jic


# --------------------------------------------------------------------------- run


def run(config: GGMConfig, ctx: Context) -> dict:
    """The two regimes' ``(n, rep)`` grids, then the graphical-lasso cells."""
    c = config
    specs = {"balanced": _normalised(c.balanced), "strong": _normalised(c.strong)}
    one = _scorer(c)
    grids = {}
    t0 = time.perf_counter()
    bar = ctx.bar(total=len(REGIMES), desc="ggm: (n, rep) grid per regime")
    for i, name in enumerate(REGIMES):
        grids[name] = ctx.cell(name, lambda name=name, i=i: _regime_grid(
            c, one, jax.random.fold_in(ctx.key, i), specs[name]))
        bar.update()
    bar.close()
    sweep_wall = time.perf_counter() - t0

    cells = {}
    jic = _jic_call(c)
    bar = ctx.bar(total=len(c.glasso_regimes), desc="ggm: GraphicalLassoCV vs JIC-HD (timed)")
    for name in c.glasso_regimes:
        i = REGIMES.index(name)
        cells[name] = ctx.cell(f"glasso_{name}", lambda name=name, i=i: _glasso_cell(
            c, one, jic, jax.random.fold_in(ctx.key, i), specs[name]))
        bar.update()
    bar.close()

    m: dict = {"ns": list(c.ns), "sweep_wall_s": sweep_wall}
    for name in REGIMES:
        gr = grids[name]
        for key in ("jic_auc", "jic_sep", "jic_f1", "pooled_auc", "pooled_sep", "pooled_f1",
                    "per_sep", "jic_rank"):
            m[f"{key}_{name}"] = gr[key].mean(1)
        auc = m[f"jic_auc_{name}"]
        m[f"auc_rise_{name}"] = float(auc[-1] - auc[0])
        m[f"auc_min_step_{name}"] = float(np.min(np.diff(auc))) if len(auc) > 1 else 0.0
        m[f"jic_ok_fraction_{name}"] = float(gr["ok"].mean())
        big = np.asarray(c.ns) >= np.median(c.ns)
        m[f"jic_minus_pooled_sep_{name}"] = float(
            (gr["jic_sep"] - gr["pooled_sep"])[big].mean())
        m[f"jic_minus_pooled_auc_{name}"] = float(
            (gr["jic_auc"] - gr["pooled_auc"])[big].mean())
    for name in c.glasso_regimes:
        for key, v in cells[name].items():
            m[f"gl_{key}_{name}"] = float(v)
    s = "strong"
    m["speedup"] = m[f"gl_glasso_time_{s}"] / m[f"gl_jic_time_{s}"]
    m["jic_auc_minus_glasso"] = m[f"gl_jic_auc_{s}"] - m[f"gl_glasso_auc_{s}"]
    m["jic_sep_minus_glasso"] = m[f"gl_jic_sep_{s}"] - m[f"gl_glasso_sep_{s}"]
    for fig, fname, caption in plots(c, m):
        ctx.report.add_figure(fig, fname, caption)
    ctx.report.add_text(summary_markdown(c, m))
    return m


def plots(c, m):
    plt = pyplot()
    ns = np.asarray(m["ns"])
    out = []
    for what, label in (("auc", "common-hub AUC (vs all other variables)"),
                        ("sep", "common-vs-individual separation AUC")):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
        for ax, name in zip(axes, REGIMES, strict=True):
            ax.semilogx(ns, m[f"jic_{what}_{name}"], "o-", label="JIC-HD")
            ax.semilogx(ns, m[f"pooled_{what}_{name}"], "s--", label="pooled IPC-HD")
            if what == "sep":
                ax.semilogx(ns, m[f"per_sep_{name}"], "^:", label="per-population IPC-HD")
            if name in c.glasso_regimes:
                ax.plot([c.glasso_n], [m[f"gl_glasso_{what}_{name}"]], "kx", ms=9,
                        label="GraphicalLassoCV (intersection)")
            ax.axhline(0.5, color="gray", lw=0.7, ls=":")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("samples per population n")
            ax.set_ylabel(label)
            ax.set_title(f"{name} regime (mean of {c.reps})")
            ax.legend(fontsize=7)
        out.append((fig, f"{what}_vs_n.png",
                    f"{label} against n, JIC-HD vs the baselines, both regimes."))
    return out


def summary_markdown(c, m) -> str:
    lines = ["Mean over repetitions; AUC: common hubs against every other variable; "
             "separation: common hubs against individual hubs only.\n"]
    for name in REGIMES:
        lines.append(f"**{name} regime**\n")
        lines.append("| n | JIC-HD AUC | pooled AUC | JIC-HD sep. | pooled sep. | "
                     "per-pop. sep. | JIC-HD F1 | mean r |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for i, n in enumerate(m["ns"]):
            lines.append(f"| {n} | {m[f'jic_auc_{name}'][i]:.3f} | "
                         f"{m[f'pooled_auc_{name}'][i]:.3f} | {m[f'jic_sep_{name}'][i]:.3f} | "
                         f"{m[f'pooled_sep_{name}'][i]:.3f} | {m[f'per_sep_{name}'][i]:.3f} | "
                         f"{m[f'jic_f1_{name}'][i]:.3f} | {m[f'jic_rank_{name}'][i]:.2f} |")
        lines.append("")
    lines.append(f"**GraphicalLassoCV at n = {c.glasso_n}** ({c.glasso_reps} instance(s) per "
                 f"regime, cv = {c.glasso_cv}, n_refinements = {c.glasso_refinements})\n")
    lines.append("| regime | glasso AUC | glasso sep. | JIC-HD AUC | JIC-HD sep. | glasso s | "
                 "JIC-HD ms | speedup | intersection edges | failed CV fits |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name in c.glasso_regimes:
        g = lambda k, name=name: m[f"gl_{k}_{name}"]  # noqa: E731
        lines.append(f"| {name} | {g('glasso_auc'):.3f} | {g('glasso_sep'):.3f} | "
                     f"{g('jic_auc'):.3f} | {g('jic_sep'):.3f} | {g('glasso_time'):.2f} | "
                     f"{1e3 * g('jic_time'):.1f} | {g('glasso_time') / g('jic_time'):.0f}x | "
                     f"{g('glasso_edges'):.0f} | {100 * g('glasso_failed'):.0f}% |")
    lines.append("")
    lines.append(f"- Where JIC-HD does not win: balanced regime, JIC-HD - pooled separation "
                 f"(n >= median) = {m['jic_minus_pooled_sep_balanced']:+.3f}, AUC "
                 f"{m['jic_minus_pooled_auc_balanced']:+.3f}; smallest n: AUC "
                 f"{m['jic_auc_balanced'][0]:.3f} (balanced), {m['jic_auc_strong'][0]:.3f} "
                 "(strong).")
    return "\n".join(lines) + "\n"


_PER_N = "per n (config ns)"
METRICS = (
    Metric("ns", "sample sizes per population"),
    Metric("sweep_wall_s", "wall time of both regimes' grids (compile included)", unit="s"),
    *[Metric(f"{k}_{r}", f"{what} {_PER_N}, {r} regime", better=b)
      for r in REGIMES
      for k, what, b in (
          ("jic_auc", "JIC-HD common-hub AUC", "higher"),
          ("jic_sep", "JIC-HD common-vs-individual separation AUC", "higher"),
          ("jic_f1", "F1 of JIC-HD's two-means calls against the common hubs", "higher"),
          ("pooled_auc", "pooled IPC-HD common-hub AUC", "higher"),
          ("pooled_sep", "pooled IPC-HD separation AUC", "higher"),
          ("pooled_f1", "F1 of pooled IPC-HD's calls", "higher"),
          ("per_sep", "per-population IPC-HD separation of common from that population's "
           "individual hubs (< 0.5: confused)", "none"),
          ("jic_rank", "mean r chosen by the gap rule on the joint values", "none"))],
    *[Metric(f"{k}_{r}", f"{what}, {r} regime", better=b)
      for r in REGIMES
      for k, what, b in (
          ("auc_rise", "JIC-HD AUC at the largest n minus at the smallest n", "higher"),
          ("auc_min_step", "smallest change of the JIC-HD AUC between consecutive n", "higher"),
          ("jic_ok_fraction", "fraction of JIC-HD fits with RESULTS.successful", "higher"),
          ("jic_minus_pooled_sep", "JIC-HD minus pooled separation, mean over n >= "
           "median(ns)", "higher"),
          ("jic_minus_pooled_auc", "JIC-HD minus pooled AUC, mean over n >= median(ns)",
           "higher"))],
    *[Metric(f"gl_{k}_strong", f"{what} (GraphicalLassoCV cells, strong regime, "
             "n = glasso_n)", better=b, unit=u)
      for k, what, b, u in (
          ("glasso_auc", "graphical-lasso intersection common-hub AUC", "higher", ""),
          ("glasso_sep", "graphical-lasso intersection separation AUC", "higher", ""),
          ("glasso_time", "GraphicalLassoCV time for the K populations", "lower", "s"),
          ("glasso_edges", "edges of the intersection graph", "none", ""),
          ("glasso_alpha", "mean CV-selected alpha", "none", ""),
          ("glasso_failed", "fraction of CV grid fits scikit-learn reported failed (-inf)",
           "lower", ""),
          ("jic_auc", "JIC-HD common-hub AUC on the same instances", "higher", ""),
          ("jic_sep", "JIC-HD separation AUC on the same instances", "higher", ""),
          ("jic_time", "JIC-HD time, samples to scores, one jitted call (median of 3, "
           "after warm-up)", "lower", "s"),
          ("per_sep", "per-population IPC-HD separation on the same instances", "none", ""))],
    Metric("speedup", "GraphicalLassoCV time / JIC-HD time, strong-regime cells",
           better="higher"),
    Metric("jic_auc_minus_glasso", "JIC-HD minus graphical-lasso AUC (strong cells)",
           better="higher"),
    Metric("jic_sep_minus_glasso", "JIC-HD minus graphical-lasso separation (strong cells)",
           better="higher"),
)

CLAIMS = (
    Claim("auc_rises_with_n", "JIC-HD's common-hub AUC rises with the sample size n",
          "auc_rise_balanced >= 0.05 and auc_rise_strong >= 0.05 and "
          "auc_min_step_balanced > -0.03 and auc_min_step_strong > -0.03",
          note="both regimes; a rise of at least 0.05 from the smallest to the largest n "
          "and no drop beyond noise (0.03) between consecutive n. Fails when the smallest "
          "n already saturates the AUC."),
    Claim("beats_glasso_on_separation", "With strong individual hubs (where per-population "
          "detectors confuse them with common hubs), JIC-HD separates common from "
          "individual hubs better than per-population graphical lasso",
          "gl_per_sep_strong < 0.5 and jic_sep_minus_glasso > 0.05",
          note="precondition gl_per_sep_strong < 0.5: per-population IPC-HD ranks a "
          "population's individual hubs above the common hubs on the same instances; "
          "GraphicalLassoCV degree scores on the intersection of the K graphs"),
    Claim("faster_than_glasso", "JIC-HD is at least 50x faster than the graphical-lasso "
          "path at equal or better AUC", "speedup >= 50 and jic_auc_minus_glasso >= -0.01",
          scale="full",
          note="a wall-clock claim: both timed in this run on the same instances (JIC-HD one "
          "jitted call, after warm-up; GraphicalLassoCV with the config's folds and "
          "refinements, fewer than scikit-learn's defaults at quick size, which favours the "
          "baseline's time). The trend test runs beside other jobs on 2 shared cores, so the "
          "ratio is not asserted there; scripts/bench/ggm.py measures it on its own"),
    Claim("minimax_beats_pooling", "The joint minimax eigenspace beats pooling the "
          "populations when one population's individual hubs dominate",
          "jic_minus_pooled_sep_strong > 0.03",
          note="our design's mechanism (docs/ggm.md): with symmetric populations the "
          "minimax and the mean choose alike; the balanced-regime difference is reported "
          "as jic_minus_pooled_sep_balanced"),
)

EXPERIMENT = Experiment(
    name="ggm",
    title="JIC-HD: common hubs across Gaussian graphical models",
    paper="Joint Inverse Components for Hub Detection (JIC-HD), common hubs across "
          "multiple Gaussian graphical models (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
