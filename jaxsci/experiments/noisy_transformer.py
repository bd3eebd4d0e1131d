"""Reproduction: the antipodal phase transition of deep random Transformers.

Two tokens start orthogonal (``rho_0 = <x_1, x_2> = 0``) and pass ``t1 / h`` random
normalised layers (:func:`jaxsci.dynamics.noisy_transformer.run_layers`, full
d-dimensional tokens). The fraction of paths ending antipodal (``rho < 0``) is
compared with the scale-function probability of the one-dimensional ``rho`` SDE on a
grid of (beta, d), at the config's (gamma, sigma); ``critical_beta`` per d is the
theory's threshold. Also: the noiseless network (``sigma = 0``) always collapses,
more than two tokens still end in antipodal formations, and the layers agree with
diffrax's solution of the limit SDE on a shared Brownian path as ``h`` shrinks.

Each d is one :func:`jaxsci.core.sweep` over (beta, path).
"""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric, product_grid, sweep
from jaxsci.core.results import pyplot
from jaxsci.core.sphere import sample_uniform
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.dynamics import noisy_transformer as nt

__all__ = ["NoisyTransformerConfig", "CONFIGS", "EXPERIMENT", "run"]

# Distances from beta_c(d) the claims use: within AGREE_MARGIN of it the boundary's
# Lyapunov exponent is ~0 and absorption by t1 is incomplete (reported, not claimed);
# the transition claims read cells below beta_c - BELOW_MARGIN / above beta_c +
# ABOVE_MARGIN, where the antipodal probability must be 0 / clearly positive.
AGREE_MARGIN = 0.2
BELOW_MARGIN = 0.25
ABOVE_MARGIN = 0.5
ABOVE_MIN_P = 0.02


@dataclasses.dataclass(frozen=True)
class NoisyTransformerConfig:
    ds: tuple[int, ...] = (2, 4, 8)
    betas: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
    gamma: float = 1.0  # deterministic part of V = h gamma I + sqrt(h) sigma G
    sigma: float = 1.0  # initialisation noise
    rho0: float = 0.0  # orthogonal start: what random tokens look like in high d
    paths: int = 2000
    h: float = 0.01  # layer step (1 / depth per unit time)
    t1: float = 10.0  # depth * h
    many_tokens: int = 8
    many_d: int = 8
    many_beta: float = 4.0
    many_paths: int = 100
    many_t1: float = 20.0
    formation_tol: float = 1e-2
    sde_hs: tuple[float, ...] = (1 / 8, 1 / 32, 1 / 128)  # layer steps for the SDE check
    sde_paths: int = 8  # 0 skips the layers-vs-SDE check (its diffrax compile is ~40 s)
    sde_t1: float = 0.5

    def __post_init__(self):
        for d in self.ds:
            check_int("ds[i]", d, min=2)
        for b in self.betas:
            check_scalar("betas[i]", b, ge=0.0)
        if not self.ds or not self.betas:
            raise ValueError("ds and betas must be non-empty")
        check_scalar("gamma", self.gamma, ge=0.0)
        check_scalar("sigma", self.sigma, gt=0.0)
        check_scalar("rho0", self.rho0, gt=-1.0, lt=1.0)
        check_int("paths", self.paths, min=1)
        check_scalar("h", self.h, gt=0.0)
        check_scalar("t1", self.t1, gt=0.0)
        check_int("many_tokens", self.many_tokens, min=3)
        check_int("many_d", self.many_d, min=2)
        check_scalar("many_beta", self.many_beta, ge=0.0)
        check_int("many_paths", self.many_paths, min=1)
        check_scalar("many_t1", self.many_t1, gt=0.0)
        check_int("sde_paths", self.sde_paths, min=0)
        check_scalar("formation_tol", self.formation_tol, gt=0.0, lt=1.0)
        check_scalar("sde_t1", self.sde_t1, gt=0.0)
        for h in self.sde_hs:
            check_scalar("sde_hs[i]", h, gt=0.0)
        if list(self.ds) != sorted(set(self.ds)):
            raise ValueError(f"ds must be strictly increasing, got {self.ds}")


CONFIGS = {
    "smoke": NoisyTransformerConfig(
        ds=(2, 4), betas=(0.5, 2.0), paths=64, h=0.05, t1=2.0, many_tokens=4, many_d=4,
        many_paths=8, many_t1=2.0, sde_paths=0,
    ),
    "quick": NoisyTransformerConfig(),
    "full": NoisyTransformerConfig(
        ds=(2, 3, 4, 8, 16, 32), betas=tuple(np.round(np.linspace(0.1, 4.0, 20), 3)),
        paths=20000, h=0.002, t1=20.0, many_paths=1000, many_t1=40.0, sde_paths=64,
        sde_hs=(1 / 8, 1 / 32, 1 / 128, 1 / 512),
    ),
}

def two_token_grid(key, config, d, sigma):
    """Final rho of ``paths`` two-token networks for every beta (arrays ``(n_beta, paths)``)."""
    x0 = nt.two_tokens(config.rho0, d)
    grid = product_grid(beta=config.betas, path=np.arange(config.paths))
    keys = jax.random.key_data(jax.random.split(key, len(grid["beta"])))
    n_layers = max(1, int(round(config.t1 / config.h)))

    def one(p):
        out = nt.run_layers(jax.random.wrap_key_data(p["key"]), x0, n_layers, config.h,
                            p["beta"], config.gamma, sigma, noise="span")
        return jnp.sum(out.final[0] * out.final[1])

    rho = sweep(one, {"beta": grid["beta"].astype(np.float32), "key": keys})
    return np.asarray(rho).reshape(len(config.betas), config.paths)


def dimension_cell(key, config, d) -> dict[str, np.ndarray]:
    """Monte Carlo, theory and the noiseless network on the beta grid at one ``d``."""
    rho = two_token_grid(key, config, d, config.sigma)
    p_th = jax.jit(jax.vmap(
        lambda b: nt.p_antipodal(config.rho0, b, config.gamma, config.sigma, d)
    ))(jnp.asarray(config.betas))
    # noiseless network: deterministic, one path per beta (one sweep)
    x0 = nt.two_tokens(config.rho0, d)
    n_layers = max(1, int(round(config.t1 / config.h)))

    def quiet(b):
        xf = nt.run_layers(key, x0, n_layers, config.h, b, config.gamma, 0.0).final
        return xf[0] @ xf[1]

    rho_quiet = sweep(quiet, np.asarray(config.betas, np.float32))
    return {"antipodal": (rho < 0).mean(1), "undecided": (np.abs(rho) < 0.99).mean(1),
            "theory": np.asarray(p_th), "noiseless": np.asarray(rho_quiet) < 0}


def sample_paths(key, config) -> dict[str, np.ndarray]:
    """Sample paths of rho for the figure: d = first, beta = largest."""
    d_fig, b_fig = config.ds[0], config.betas[-1]
    n_fig = max(1, int(round(config.t1 / config.h)))
    paths = jax.vmap(lambda k: nt.run_layers(k, nt.two_tokens(config.rho0, d_fig), n_fig,
                                             config.h, b_fig, config.gamma, config.sigma,
                                             n_save=min(200, n_fig)))(jax.random.split(key, 12))
    return {"ts": np.asarray(paths.ts[0]),
            "rho": np.asarray(jnp.sum(paths.xs[:, :, 0] * paths.xs[:, :, 1], -1))}


def run(config: NoisyTransformerConfig, ctx: Context) -> dict:
    """The phase-transition reproduction: one resumable cell per d, then the checks."""
    key = ctx.key
    nb, nd = len(config.betas), len(config.ds)
    p_mc = np.zeros((nd, nb))
    undecided = np.zeros((nd, nb))
    p_th = np.zeros((nd, nb))
    p_noiseless = np.zeros((nd, nb))
    bar = ctx.bar(total=nd + 3, desc="noisy_transformer: two-token grids per d, then checks")
    for i, d in enumerate(config.ds):
        bar.set_postfix(d=d)
        cell = ctx.cell(f"d{d}", lambda d=d: dimension_cell(jax.random.fold_in(key, d),
                                                             config, d))
        p_mc[i], undecided[i] = cell["antipodal"], cell["undecided"]
        p_th[i], p_noiseless[i] = cell["theory"], cell["noiseless"]
        bar.update()
    crit = [float(nt.critical_beta(d, config.gamma, config.sigma)) for d in config.ds]
    bar.set_postfix(step="sample paths")
    fig_paths = ctx.cell("sample_paths", lambda: sample_paths(jax.random.fold_in(key, 7),
                                                             config))
    bar.update()
    bar.set_postfix(step="many tokens")
    many = ctx.cell("many_tokens", lambda: many_tokens(jax.random.fold_in(key, 11), config))
    bar.update()
    bar.set_postfix(step="layers vs SDE")
    sde_err = (list(ctx.cell("sde", lambda: {"err": sde_vs_layers(
        jax.random.fold_in(key, 13), config)})["err"]) if config.sde_paths else [])
    bar.update()
    bar.close()

    se = np.sqrt(np.maximum(p_mc * (1 - p_mc), 1.0 / config.paths) / config.paths)
    # Tolerance from the number of paths (3 standard errors) plus the paths not yet
    # absorbed at t1 (|rho| < 0.99), which may still go either way.
    tol = 3 * se + undecided
    gap = np.abs(p_mc - p_th)
    betas = np.asarray(config.betas)[None, :]
    bc = np.asarray(crit)[:, None]
    far = np.abs(betas - bc) > AGREE_MARGIN
    below = np.broadcast_to(betas < bc - BELOW_MARGIN, p_mc.shape)
    above = np.broadcast_to(betas > bc + ABOVE_MARGIN, p_mc.shape)
    nan = float("nan")
    metrics = {
        "ds": list(config.ds),
        "betas": list(config.betas),
        "gamma": config.gamma,
        "sigma": config.sigma,
        "p_antipodal_mc": p_mc,
        "p_antipodal_theory": p_th,
        "p_antipodal_se": se,
        "undecided_fraction": undecided,
        "max_abs_gap": float(gap.max()),
        "gap_tolerance": float(tol[np.unravel_index(gap.argmax(), gap.shape)]),
        "cells_within_tolerance": float(np.mean(gap <= tol)),
        "far_cells": int(far.sum()),
        "far_cells_within_tolerance": float(np.mean((gap <= tol)[far])) if far.any() else nan,
        "critical_beta": crit,
        "critical_beta_increasing": bool(all(a < b for a, b in zip(crit, crit[1:],
                                                                   strict=False))),
        "below_bc_cells": int(below.sum()),
        "below_bc_violations": int(np.sum((p_mc > 3 * se)[below])),
        "above_bc_cells": int(above.sum()),
        "above_bc_violations": int(np.sum((p_mc <= ABOVE_MIN_P)[above])),
        "p_antipodal_noiseless": float(p_noiseless.max()),
        "antipodal_fraction_many_tokens": float(many["antipodal"]),
        "collapse_fraction_many_tokens": float(many["collapse"]),
        "sde_layer_error": sde_err,
        "sde_error_ratio": float(sde_err[-1] / sde_err[0]) if len(sde_err) > 1 else nan,
        "sde_hs": list(config.sde_hs),
    }
    ctx.report.add_figure(plot_phase(config, p_mc, se, crit), "p_antipodal.png",
                          "P(rho -> -1) for two tokens: Monte Carlo of the d-dimensional "
                          "layers (markers, 1 s.e.) and the scale-function theory (lines); "
                          "dotted: beta_c(d).")
    ctx.report.add_figure(plot_paths(fig_paths["ts"], fig_paths["rho"], config.ds[0],
                                     config.betas[-1]), "rho_paths.png",
                          f"Sample paths of rho = <x_1, x_2> (d={config.ds[0]}, "
                          f"beta={config.betas[-1]}).")
    ctx.report.add_text(summary_markdown(config, metrics))
    return metrics


def many_tokens(key, config) -> dict[str, float]:
    """Fraction of n-token networks ending in an antipodal formation / in collapse."""
    n, d = config.many_tokens, config.many_d
    n_layers = max(1, int(round(config.many_t1 / config.h)))

    def one(k):
        k0, k1 = jax.random.split(k)
        x0 = sample_uniform(k0, n, d)
        xf = nt.run_layers(k1, x0, n_layers, config.h, config.many_beta, config.gamma,
                           config.sigma, noise="span").final
        gram = xf @ xf.T
        return nt.antipodal_formation(xf, config.formation_tol), jnp.all(
            gram > 1.0 - config.formation_tol)

    keys = jax.random.key_data(jax.random.split(key, config.many_paths))
    anti, coll = sweep(lambda kd: one(jax.random.wrap_key_data(kd)), keys)
    return {"antipodal": np.mean(np.asarray(anti)), "collapse": np.mean(np.asarray(coll))}


def sde_vs_layers(key, config) -> list[float]:
    """Mean max error of the layers vs diffrax's SDE solution on a shared path, per h."""
    d, beta = config.ds[0], config.betas[-1]
    t1 = config.sde_t1
    x0 = sample_uniform(jax.random.fold_in(key, 1), 3, max(d, 2))
    h_ref = min(config.sde_hs) / 8

    def errs(k):
        bm = diffrax.VirtualBrownianTree(0.0, t1, tol=h_ref / 4, shape=(x0.shape[1],) * 2, key=k)
        ref = nt.solve_sde(x0, t1, h_ref, beta, config.gamma, config.sigma, bm=bm)
        return jnp.stack([
            jnp.abs(nt.layers_from_brownian(bm, x0, t1, h, beta, config.gamma, config.sigma)
                    - ref).max() for h in config.sde_hs])

    e = jax.jit(jax.vmap(errs))(jax.random.split(key, config.sde_paths))
    return [float(v) for v in np.asarray(e).mean(0)]


def plot_phase(config, p_mc, se, crit):
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4.2), constrained_layout=True)
    fine = np.linspace(0.0, max(config.betas) * 1.05, 200)
    for i, d in enumerate(config.ds):
        th = jax.vmap(lambda b, d=d: nt.p_antipodal(config.rho0, b, config.gamma,
                                                    config.sigma, d))(jnp.asarray(fine))
        ax.plot(fine, np.asarray(th), color=f"C{i}", label=f"theory d={d}")
        ax.errorbar(config.betas, p_mc[i], yerr=se[i], fmt="o", color=f"C{i}", capsize=3,
                    label=f"layers d={d}")
        ax.axvline(crit[i], color=f"C{i}", ls=":", lw=1, label=rf"$\beta_c$ d={d}")
    ax.set_xlabel(r"interaction strength $\beta$")
    ax.set_ylabel(r"P(antipodal) from $\rho_0$" + f" = {config.rho0}")
    ax.set_title(f"gamma={config.gamma}, sigma={config.sigma}, h={config.h}, t={config.t1}")
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_paths(ts, rho, d, beta):
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.5), constrained_layout=True)
    for r in rho:
        ax.plot(ts, r, lw=1)
    ax.set_xlabel("depth t = layer * h")
    ax.set_ylabel(r"$\rho = \langle x_1, x_2\rangle$")
    ax.set_title(f"two tokens, d={d}, beta={beta}")
    return fig


def summary_markdown(config, m) -> str:
    lines = ["| d | beta_c (theory) | " + " | ".join(f"beta={b}" for b in config.betas) + " |",
             "|---|---|" + "---|" * len(config.betas)]
    for i, d in enumerate(config.ds):
        cells = [f"{m['p_antipodal_mc'][i][j]:.3f} / {m['p_antipodal_theory'][i][j]:.3f}"
                 for j in range(len(config.betas))]
        lines.append(f"| {d} | {m['critical_beta'][i]:.3f} | " + " | ".join(cells) + " |")
    table = "P(antipodal), Monte Carlo / theory:\n\n" + "\n".join(lines)
    rows = [
        ("max |MC - theory| (tolerance at that cell)",
         f"{m['max_abs_gap']:.4f} ({m['gap_tolerance']:.4f})"),
        ("cells within tolerance (3 s.e. + undecided paths)", f"{m['cells_within_tolerance']:.3f}"),
        ("P(antipodal) without noise (max over grid)", f"{m['p_antipodal_noiseless']:.3f}"),
        (f"{config.many_tokens} tokens, d={config.many_d}, beta={config.many_beta}: "
         "antipodal formation / collapse",
         f"{m['antipodal_fraction_many_tokens']:.3f} / {m['collapse_fraction_many_tokens']:.3f}"),
        ("layers vs SDE error for h = " + ", ".join(f"{h:.4g}" for h in config.sde_hs),
         ", ".join(f"{e:.4f}" for e in m["sde_layer_error"]) or "skipped"),
    ]
    return table + "\n\n| quantity | value |\n|---|---|\n" + "\n".join(
        f"| {a} | {b} |" for a, b in rows) + "\n"


METRICS = (
    Metric("ds", "token dimensions simulated"),
    Metric("betas", "interaction strengths simulated"),
    Metric("p_antipodal_mc", "P(rho -> -1) from the layers, per (d, beta)"),
    Metric("p_antipodal_theory", "P(rho -> -1) from the scale function, per (d, beta)"),
    Metric("p_antipodal_se", "standard error of the Monte Carlo probability"),
    Metric("undecided_fraction", "paths with |rho| < 0.99 at t1"),
    Metric("max_abs_gap", "max |MC - theory| over the grid", better="lower"),
    Metric("gap_tolerance", "3 s.e. + undecided at that cell"),
    Metric("cells_within_tolerance", "fraction of cells with |MC - theory| within tolerance",
           better="higher"),
    Metric("far_cells", f"cells farther than {AGREE_MARGIN} from beta_c(d)"),
    Metric("far_cells_within_tolerance", "fraction of those within tolerance",
           better="higher", finite=False),
    Metric("critical_beta", "beta_c(d) from the theory"),
    Metric("critical_beta_increasing", "beta_c grows with d"),
    Metric("below_bc_cells", f"cells with beta < beta_c - {BELOW_MARGIN}"),
    Metric("below_bc_violations", "of those, cells with P(antipodal) above 3 s.e.",
           better="lower"),
    Metric("above_bc_cells", f"cells with beta > beta_c + {ABOVE_MARGIN}"),
    Metric("above_bc_violations", f"of those, cells with P(antipodal) <= {ABOVE_MIN_P}",
           better="lower"),
    Metric("p_antipodal_noiseless", "P(antipodal) without noise (max over the grid)"),
    Metric("antipodal_fraction_many_tokens", "fraction of n-token networks ending in an "
           "antipodal formation"),
    Metric("collapse_fraction_many_tokens", "fraction ending collapsed to one point"),
    Metric("sde_layer_error", "mean max |layers - SDE| on a shared path, per h "
           "(empty when skipped)", better="lower", finite=False),
    Metric("sde_error_ratio", "that error at the smallest h / at the largest h "
           "(NaN when skipped)", better="lower", finite=False),
)

CLAIMS = (
    Claim("theory_matches_layers", "The two-token probability of the antipodal state is "
          "the scale-function probability of the one-dimensional rho SDE",
          "far_cells > 0 and far_cells_within_tolerance == 1.0",
          note=f"within 3 s.e. + the fraction of undecided paths, at cells farther than "
          f"{AGREE_MARGIN} from beta_c (absorption is incomplete near it)"),
    Claim("no_antipodal_below_bc", "Phase transition: below beta_c(d) the tokens collapse "
          "(no antipodal state)", "below_bc_cells > 0 and below_bc_violations == 0"),
    Claim("antipodal_above_bc", "Above beta_c(d) the antipodal state has positive probability",
          "above_bc_cells > 0 and above_bc_violations == 0"),
    Claim("bc_grows_with_d", "The transition is governed by the dimension too: beta_c grows "
          "with d", "critical_beta_increasing",
          paper_value="beta_c = arccosh(d - 2) / 2 at gamma = 0"),
    Claim("noiseless_collapses", "Without noise the tokens always collapse",
          "p_antipodal_noiseless == 0.0"),
    Claim("many_token_antipodal", "More than two tokens also end in antipodal formations",
          "antipodal_fraction_many_tokens > 0.0"),
    Claim("layers_converge_to_sde", "The layers converge to the Ito SDE as h -> 0",
          "sde_error_ratio < 1.0",
          note="shared Brownian path; skipped (NaN) in the smoke config"),
)

EXPERIMENT = Experiment(
    name="noisy_transformer",
    title="Antipodal phase transition of deep random Transformers",
    paper="Deep Transformers with random value matrices: common matrix Brownian noise on "
          "the sphere (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
