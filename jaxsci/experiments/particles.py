"""Reproduction: transformer particle flow on the sphere, with and without the perceptron.

For every inverse temperature ``beta`` and perceptron (width, scale), ``seeds``
random initial configurations of ``n`` tokens uniform on ``S^{d-1}`` flow under
:func:`jaxsci.dynamics.particles.solve` (the mean-field gradient flow: attention
with ``Q^T K = V = I`` and ``Z_i = n`` plus a gradient perceptron). The final
configurations are summarised by their atoms (:func:`count_clusters`). Claims
checked: the energy never decreases; attention alone collapses to one cluster;
with the perceptron the flow stops at critical points (velocity ~ 0) that are
atomic (a few atoms) and localized (the same atoms whatever the initial tokens).

Long horizon (attention only). Metastable clusters merge on times exponential in
``beta``, far beyond ``t1``. Each attention-only run continues from its state at
``t1`` in float64: adaptive steps to rest (:func:`solve_to_rest`, at most ``rest_t1``
more), then each cluster becomes one token carrying its mass
(:func:`merge_clusters`) and the reduced flow runs through its merges to one cluster
(:func:`solve_merging`, up to ``collapse_t1``). That gives a time to one cluster for
every ``beta``, and the claim that attention alone collapses is checked at every
``beta`` of the grid, not only at those that merge within ``t1``.

Time is reparametrised by ``speed = exp(-beta)`` (the attention kernel becomes
``exp(beta (<x, y> - 1)) <= 1``) and the perceptron's output weights are
``scale * exp(beta)``, so ``scale`` is the perceptron's strength relative to the
attention between coincident tokens and one step size serves every ``beta``.
Each perceptron width is one :func:`jaxsci.core.sweep` over (beta, scale, seed).
The perceptron of a given width is the same in every cell (its key does not depend
on beta, scale or seed), so cells differ only by the initial tokens.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric, product_grid, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.sphere import sample_uniform
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.dynamics import particles as pt

__all__ = ["ParticlesConfig", "CONFIGS", "EXPERIMENT", "run", "simulate"]

# Attention alone merges its metastable clusters within t1 only at small beta (the
# merging time grows exponentially with beta): the collapse claim reads beta <= this.
COLLAPSE_BETA_MAX = 2.0


@dataclasses.dataclass(frozen=True)
class ParticlesConfig:
    n: int = 128  # tokens (particles)
    d: int = 3  # S^2, so final configurations can be drawn
    betas: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    widths: tuple[int, ...] = (4, 16)  # perceptron hidden units
    scales: tuple[float, ...] = (0.5, 2.0)  # perceptron strength relative to attention
    seeds: int = 4  # initial configurations per cell
    t1: float = 200.0  # final time (in units where the attention kernel is <= 1)
    dt: float = 0.1
    n_save: int = 40  # saved states for the energy-monotonicity check
    activation: str = "relu"  # the usual Transformer MLP activation
    bias_std: float = 0.5
    cluster_tol: float = 0.05  # tokens closer than this are one atom
    atomic_max: int = 10  # "atomic": at most this many atoms
    energy_rtol: float = 1e-5  # float32 round-off allowance for "never decreases"
    stationary_tol: float = 1e-5  # max |velocity| below which a run is at a critical point
    # Long horizon (attention only, float64): adaptive solve to rest for at most rest_t1
    # past t1, then the merged-cluster flow up to collapse_t1 (time past that rest).
    rest_t1: float = 1000.0
    collapse_t1: float = 1e16
    max_clusters: int = 64  # clusters the reduced flow can hold (more raise)
    max_steps: int = 100_000  # step budget of each adaptive solve

    def __post_init__(self):
        check_int("n", self.n, min=2)
        check_int("d", self.d, min=2)
        check_int("seeds", self.seeds, min=1)
        check_scalar("t1", self.t1, gt=0.0)
        check_scalar("dt", self.dt, gt=0.0)
        check_int("n_save", self.n_save, min=2)
        check_choice("activation", self.activation, pt.ACTIVATIONS)
        check_scalar("bias_std", self.bias_std, ge=0.0)
        check_scalar("cluster_tol", self.cluster_tol, gt=0.0)
        check_int("atomic_max", self.atomic_max, min=1)
        check_scalar("energy_rtol", self.energy_rtol, ge=0.0)
        check_scalar("stationary_tol", self.stationary_tol, gt=0.0)
        check_scalar("rest_t1", self.rest_t1, gt=0.0)
        check_scalar("collapse_t1", self.collapse_t1, gt=0.0)
        check_int("max_clusters", self.max_clusters, min=1)
        check_int("max_steps", self.max_steps, min=1)
        if not self.betas or not self.widths or not self.scales:
            raise ValueError("betas, widths and scales must be non-empty")
        for b in self.betas:
            check_scalar("betas[i]", b, gt=0.0)
        for w in self.widths:
            check_int("widths[i]", w, min=1)
        for s in self.scales:
            check_scalar("scales[i]", s, gt=0.0)
        if round(self.t1 / self.dt) < 1:
            raise ValueError(f"t1 / dt must give at least one step, got t1 = {self.t1}, "
                             f"dt = {self.dt}")


CONFIGS = {
    "smoke": ParticlesConfig(
        n=16, betas=(1.0, 4.0), widths=(4,), scales=(2.0,), seeds=2, t1=10.0, dt=0.2, n_save=5
    ),
    # ~1-2 minutes on 2 CPU cores.
    "quick": ParticlesConfig(),
    # The mean-field regime the paper studies: thousands of tokens, for a GPU.
    "full": ParticlesConfig(
        n=2048, betas=(1.0, 2.0, 4.0, 8.0, 16.0), widths=(4, 16, 64), scales=(0.25, 1.0, 4.0),
        seeds=16, t1=1000.0, dt=0.05, n_save=100,
    ),
}

def simulate(key: jax.Array, config: ParticlesConfig, width: int | None) -> dict[str, np.ndarray]:
    """One sweep over (beta, scale, seed) for one perceptron width (``None``: attention only).

    Returns arrays with a leading grid axis in ``product_grid(beta, scale, seed)`` order.
    """
    n, d = config.n, config.d
    scales = config.scales if width is not None else (0.0,)
    grid = product_grid(beta=config.betas, scale=scales, seed=np.arange(config.seeds))
    k_x, k_p = jax.random.split(key)
    # Initial tokens depend on the seed only: every cell sees the same seeds.
    x0s = jax.vmap(lambda k: sample_uniform(k, n, d))(jax.random.split(k_x, config.seeds))
    perceptron = None
    if width is not None:
        perceptron = pt.random_perceptron(
            k_p, d, width, 1.0, bias_std=config.bias_std, activation=config.activation
        )
    params = {
        "beta": grid["beta"].astype(np.float32),
        "scale": grid["scale"].astype(np.float32),
        "x0": x0s[grid["seed"]],
    }

    def one(p):
        per = None
        if perceptron is not None:
            c = perceptron.c * p["scale"] * jnp.exp(p["beta"])
            per = eqx.tree_at(lambda q: q.c, perceptron, c)
        flow = pt.make_flow(d, p["beta"], perceptron=per, speed=jnp.exp(-p["beta"]))
        tr = pt.solve(flow, p["x0"], config.t1, config.dt, n_save=config.n_save)
        k, labels = pt.count_clusters(tr.final, config.cluster_tol)
        de = jnp.diff(tr.energy)
        scale_e = jnp.maximum(jnp.abs(tr.energy).max(), 1e-6)
        vel = jnp.abs(pt.velocity(flow, tr.final)).max()
        return {
            "clusters": k,
            "labels": labels,
            "final": tr.final,
            "monotone": jnp.all(de >= -config.energy_rtol * scale_e),
            "min_rel_de": de.min() / scale_e,
            "max_velocity": vel,
            "energy": tr.energy,
        }

    out = sweep(one, params)
    res = {k: np.asarray(v) for k, v in out.items()}
    res.update({k: np.asarray(v) for k, v in grid.items()})
    return res


def long_horizon(config: ParticlesConfig, att: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Continue the attention-only runs from ``t1`` to one cluster (float64).

    Per run: adaptive steps to rest (``stationary_tol``) within ``rest_t1``, then the
    merged-cluster flow (:func:`pt.merge_clusters`, :func:`pt.solve_merging`) within
    ``collapse_t1``. ``t_one`` is the time (from 0) of one cluster: ``t1`` when the run
    had one at ``t1`` already, the end of the rest phase when it got there during that
    phase (both upper bounds), ``inf`` when not reached. More than ``max_clusters``
    clusters at rest raise (an error naming ``max_clusters``).
    """
    d = config.d
    with jax.enable_x64(True):
        x = jnp.asarray(att["final"], jnp.float64)
        x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        params = {"beta": jnp.asarray(att["beta"], jnp.float64), "x": x}
        max_clusters = min(config.max_clusters, config.n)

        def one(p):
            flow = pt.make_flow(d, p["beta"], speed=jnp.exp(-p["beta"]), dtype=jnp.float64)
            r = pt.solve_to_rest(flow, p["x"], config.rest_t1,
                                 jnp.asarray([config.rest_t1], jnp.float64),
                                 vtol=config.stationary_tol, max_steps=config.max_steps)
            m = pt.merge_clusters(r.final, config.cluster_tol, max_clusters)
            h = pt.solve_merging(flow, m.centers, config.collapse_t1, weights=m.weights,
                                 tol=config.cluster_tol, max_steps=config.max_steps)
            already = pt.count_clusters(p["x"], config.cluster_tol)[0] == 1
            t_one = jnp.where(already, config.t1, config.t1 + r.t_stop + h.t_one)
            return {"t_one": t_one, "clusters_at_rest": m.n_clusters,
                    "t_rest": config.t1 + r.t_stop, "spread": m.spread,
                    "merge_steps": h.n_steps}

        out = sweep(one, params)
        return {k: np.asarray(v) for k, v in out.items()}


def atoms(final: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Atom positions (normalised centroids of each cluster) and masses (fractions)."""
    roots = np.unique(labels)
    pos = np.stack([final[labels == r].mean(0) for r in roots])
    pos /= np.linalg.norm(pos, axis=-1, keepdims=True)
    mass = np.array([(labels == r).mean() for r in roots])
    return pos, mass


def hausdorff(a: np.ndarray, b: np.ndarray) -> float:
    dist = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    return float(max(dist.min(1).max(), dist.min(0).max()))


def run(config: ParticlesConfig, ctx: Context) -> dict:
    """The sweep: attention only, then each perceptron width (one resumable cell each)."""
    jobs: list[int | None] = [None, *config.widths]
    results: dict[int | None, dict[str, np.ndarray]] = {}
    bar = ctx.bar(total=len(jobs), desc="particles: flows per perceptron width")
    for job in jobs:
        tag = "attention_only" if job is None else f"width{job}"
        bar.set_postfix(job=tag)
        results[job] = ctx.cell(tag, lambda job=job: simulate(
            jax.random.fold_in(ctx.key, 0 if job is None else job), config, job))
        bar.update()
    bar.close()
    results["long"] = ctx.cell("attention_only_long_horizon",
                               lambda: long_horizon(config, results[None]))

    metrics = analyse(config, results)
    ctx.report.add_figure(
        plot_configurations(config, results), "final_configurations.png",
        "Final token configurations on S^2 (marker area: atom mass). Left: attention only; "
        "right: with the perceptron (same initial tokens).",
    )
    ctx.report.add_figure(
        plot_cluster_counts(config, results), "cluster_counts.png",
        "Number of atoms at the final time over the sweep (median over seeds, bars: min-max).",
    )
    ctx.report.add_figure(
        plot_collapse_times(config, results), "collapse_times.png",
        "Attention only: time to one cluster against beta (dots: seeds; line: median), "
        "from the long-horizon merged-cluster flow past t1 (dashed).",
    )
    ctx.report.add_text(summary_markdown(config, metrics))
    return metrics


def analyse(config: ParticlesConfig, results) -> dict:
    att = results[None]
    per = [results[w] for w in config.widths]
    all_mono = np.concatenate([att["monotone"]] + [r["monotone"] for r in per])
    k_per = np.concatenate([r["clusters"] for r in per])
    v_per = np.concatenate([r["max_velocity"] for r in per])
    by_beta = [float(np.median(att["clusters"][att["beta"] == b])) for b in config.betas]
    long = results["long"]
    t_one = [long["t_one"][att["beta"] == b] for b in config.betas]
    t_by_beta = [float(np.median(t)) if np.all(np.isfinite(t)) else float("inf")
                 for t in t_one]
    # growth of the median time to one cluster per unit of beta, over the betas that
    # collapsed after t1 (the times up to t1 are upper bounds)
    late = [(b, np.log10(t)) for b, t in zip(config.betas, t_by_beta, strict=True)
            if np.isfinite(t) and t > config.t1]
    growth = (float(10 ** np.polyfit(*np.asarray(late).T, 1)[0]) if len(late) >= 2
              else float("nan"))
    # Localization: with a fixed perceptron, the atoms reached from different initial
    # tokens coincide (Hausdorff distance between the atom sets of seed 0 and the others).
    spreads = []
    for r in per:
        for b in config.betas:
            for s in config.scales:
                idx = np.nonzero((r["beta"] == b) & (r["scale"] == np.float32(s)))[0]
                ref, _ = atoms(r["final"][idx[0]], r["labels"][idx[0]])
                for i in idx[1:]:
                    pos, _ = atoms(r["final"][i], r["labels"][i])
                    spreads.append(hausdorff(ref, pos))
    m = {
        "energy_monotone": float(all_mono.mean()),
        "energy_min_relative_increment": float(
            min(att["min_rel_de"].min(), *[r["min_rel_de"].min() for r in per])
        ),
        "clusters_attention_only": float(np.median(att["clusters"])),
        "clusters_with_perceptron": float(np.median(k_per)),
        "atomic_fraction": float(np.mean(k_per <= config.atomic_max)),
        "stationary_fraction_attention_only": float(
            np.mean(att["max_velocity"] < config.stationary_tol)
        ),
        "stationary_fraction_with_perceptron": float(np.mean(v_per < config.stationary_tol)),
        "support_spread_with_perceptron": float(np.median(spreads)) if spreads else 0.0,
        "support_match_fraction": float(np.mean(np.asarray(spreads) < 0.1)) if spreads else 1.0,
        "clusters_attention_only_by_beta": by_beta,
        "clusters_attention_only_low_beta": max(
            (k for b, k in zip(config.betas, by_beta, strict=True) if b <= COLLAPSE_BETA_MAX),
            default=float("nan")),
        "atomic_max": config.atomic_max,
        "collapse_time_attention_only_by_beta": t_by_beta,
        "collapse_time_attention_only_all": long["t_one"],
        "collapsed_fraction_attention_only_long": float(np.mean(np.isfinite(long["t_one"]))),
        "clusters_at_rest_attention_only": long["clusters_at_rest"],
        "collapse_time_growth_per_beta": growth,
        "betas": list(config.betas),
        "clusters_attention_only_all": att["clusters"],
        "max_velocity_attention_only": att["max_velocity"],
    }
    for w, r in zip(config.widths, per, strict=True):
        m[f"clusters_width{w}"] = r["clusters"].reshape(
            len(config.betas), len(config.scales), config.seeds
        )
        m[f"max_velocity_width{w}"] = float(r["max_velocity"].max())
    return m


def plot_configurations(config, results):
    plt = pyplot()

    att = results[None]
    w = config.widths[-1]
    per = results[w]
    b_lo, b_hi = config.betas[0], config.betas[-1]
    s_hi = np.float32(config.scales[-1])
    panels = [
        (att, (att["beta"] == b_lo) & (att["seed"] == 0), f"attention only, beta={b_lo}"),
        (att, (att["beta"] == b_hi) & (att["seed"] == 0), f"attention only, beta={b_hi}"),
        (per, (per["beta"] == b_lo) & (per["scale"] == s_hi) & (per["seed"] == 0),
         f"+ perceptron (m={w}, scale={float(s_hi)}), beta={b_lo}"),
        (per, (per["beta"] == b_hi) & (per["scale"] == s_hi) & (per["seed"] == 0),
         f"+ perceptron (m={w}, scale={float(s_hi)}), beta={b_hi}"),
    ]
    # Lambert cylindrical equal-area map of S^2 (azimuth, x_3): 2-D axes whose labels
    # read directly, and equal areas on the sphere are equal areas on the page.
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6), constrained_layout=True, sharey=True)
    for ax, (res, mask, title) in zip(axes, panels, strict=True):
        i = int(np.nonzero(mask)[0][0])
        final = res["final"][i]
        pos, mass = atoms(final, res["labels"][i])
        z = pos[:, 2] if pos.shape[1] >= 3 else np.zeros(len(pos))
        ax.scatter(np.arctan2(pos[:, 1], pos[:, 0]), z, s=20 + 400 * mass, c="C3", clip_on=False)
        ax.set_xlim(-np.pi, np.pi)
        ax.set_ylim(-1.05, 1.05)
        ax.set_title(f"{title}\n{int(res['clusters'][i])} atom(s)", fontsize=8)
        ax.set_xlabel(r"azimuth $\arctan(x_2 / x_1)$ (rad)")
        ax.set_ylabel(r"height $x_3$")
    return fig


def plot_cluster_counts(config, results):
    plt = pyplot()

    betas = np.asarray(config.betas)
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    att = results[None]
    k = att["clusters"].reshape(len(betas), config.seeds)
    med = np.median(k, 1)
    ax.errorbar(betas, med, yerr=[med - k.min(1), k.max(1) - med], fmt="k-o", capsize=3,
                label="attention only")
    for j, w in enumerate(config.widths):
        kk = results[w]["clusters"].reshape(len(betas), len(config.scales), config.seeds)
        for si, s in enumerate(config.scales):
            med = np.median(kk[:, si], 1)
            ax.errorbar(betas * (1.0 + 0.03 * (2 * j + si + 1)), med,
                        yerr=[med - kk[:, si].min(1), kk[:, si].max(1) - med], fmt="--s",
                        capsize=3, label=f"perceptron m={w}, scale={s}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"inverse temperature $\beta$")
    ax.set_ylabel("atoms at the final time")
    ax.set_title(f"n={config.n} tokens on S^{config.d - 1}, t={config.t1}")
    ax.legend(fontsize=7)
    return fig


def plot_collapse_times(config, results):
    plt = pyplot()

    att, long = results[None], results["long"]
    fig, ax = plt.subplots(figsize=(5, 3.6), constrained_layout=True)
    med = []
    for b in config.betas:
        t = long["t_one"][att["beta"] == b]
        ax.plot(np.full(len(t), b), np.where(np.isfinite(t), t, np.nan), "o", color="C0",
                alpha=0.5, ms=4)
        med.append(np.median(t))
    ax.plot(config.betas, np.where(np.isfinite(med), med, np.nan), "k-", lw=1)
    ax.axhline(config.t1, color="0.5", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel(r"inverse temperature $\beta$")
    ax.set_ylabel("time to one cluster")
    ax.set_title(f"attention only, n={config.n} on S^{config.d - 1}", fontsize=9)
    return fig


def summary_markdown(config, m) -> str:
    rows = [
        ("energy never decreases (fraction of runs)", f"{m['energy_monotone']:.3f}"),
        ("atoms, attention only (median; by beta)",
         f"{m['clusters_attention_only']:.1f}; "
         + ", ".join(f"beta={b}: {k:g}" for b, k in zip(config.betas,
                                                        m["clusters_attention_only_by_beta"],
                                                        strict=True))),
        ("attention only, time to one cluster (median by beta; t1: one already at t1; "
         "past t1 the merged-cluster flow)", ", ".join(f"beta={b}: {t:.3g}" for b, t in zip(
             config.betas, m["collapse_time_attention_only_by_beta"], strict=True))
         + f"; x {m['collapse_time_growth_per_beta']:.3g} per unit of beta"),
        ("atoms, with perceptron (median)", f"{m['clusters_with_perceptron']:.1f}"),
        (f"atomic fraction (<= {config.atomic_max} atoms)", f"{m['atomic_fraction']:.3f}"),
        ("at a critical point (max |v| < "
         f"{config.stationary_tol:g}): attention only / with perceptron",
         f"{m['stationary_fraction_attention_only']:.3f} / "
         f"{m['stationary_fraction_with_perceptron']:.3f}"),
        ("same atoms from other initial tokens: median Hausdorff distance / fraction < 0.1",
         f"{m['support_spread_with_perceptron']:.3g} / {m['support_match_fraction']:.3f}"),
    ]
    return "| quantity | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


METRICS = (
    Metric("energy_monotone", "fraction of runs whose energy never decreases (gradient flow)",
           better="higher"),
    Metric("energy_min_relative_increment", "most negative energy increment / |E| max"),
    Metric("clusters_attention_only", "median atoms at t1, attention only", better="lower"),
    Metric("clusters_with_perceptron", "median atoms at t1, with the perceptron"),
    Metric("atomic_fraction", "fraction of perceptron runs with <= atomic_max atoms",
           better="higher"),
    Metric("atomic_max", "the 'atomic' bound on the number of atoms"),
    Metric("stationary_fraction_attention_only", "fraction of attention-only runs at a "
           "critical point (max |velocity| < stationary_tol)"),
    Metric("stationary_fraction_with_perceptron", "same, with the perceptron",
           better="higher"),
    Metric("support_spread_with_perceptron", "median Hausdorff distance between the atoms "
           "reached from different initial tokens", better="lower"),
    Metric("support_match_fraction", "fraction of those distances below 0.1", better="higher"),
    Metric("clusters_attention_only_by_beta", "median atoms at t1 per beta, attention only"),
    Metric("clusters_attention_only_low_beta", f"largest median atom count over "
           f"beta <= {COLLAPSE_BETA_MAX}, attention only", better="lower", finite=False),
    Metric("betas", "inverse temperatures simulated"),
    Metric("collapse_time_attention_only_by_beta", "median time to one cluster per beta, "
           "attention only, through the long-horizon merged-cluster flow (t1 where one "
           "cluster was there at t1 already; inf where a seed did not collapse)",
           finite=False),
    Metric("collapsed_fraction_attention_only_long", "fraction of attention-only runs at "
           "one cluster within the long horizon", better="higher"),
    Metric("collapse_time_growth_per_beta", "factor by which the median time to one "
           "cluster grows per unit of beta (fit over the betas that collapse after t1)",
           finite=False),
)

CLAIMS = (
    Claim("energy_monotone", "The flow (attention with Q^T K = V = I and mean normalisation, "
          "plus a gradient perceptron) is a gradient flow: its energy never decreases",
          "energy_monotone == 1.0", note="float32 round-off allowance energy_rtol"),
    Claim("attention_collapses", "Attention alone collapses the tokens to a single cluster",
          "clusters_attention_only_low_beta == 1",
          note=f"at beta <= {COLLAPSE_BETA_MAX}, whose metastable clusters merge within t1 "
          "(merging is exponentially slow in beta)"),
    Claim("attention_collapses_every_beta", "Attention alone collapses the tokens to a "
          "single cluster at every beta (the long-time limit)",
          "collapsed_fraction_attention_only_long == 1.0",
          note="past t1 through the merged-cluster flow (float64, adaptive steps); the "
          "time grows exponentially in beta (collapse_time_growth_per_beta)"),
    Claim("perceptron_atomic", "With the perceptron the limit measures are atomic (a few atoms)",
          "atomic_fraction >= 0.9 and clusters_with_perceptron <= atomic_max"),
    Claim("perceptron_critical_points", "With the perceptron the flow stops at critical "
          "points (velocity ~ 0), unlike attention alone",
          "stationary_fraction_with_perceptron > stationary_fraction_attention_only"),
)

EXPERIMENT = Experiment(
    name="particles",
    title="Transformer particle flow on the sphere, with the perceptron block",
    paper="Transformer forward pass as interacting particles on the sphere, with the "
          "perceptron block (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
