"""Reproduction: G-RANS against Krylov and AMG on random P1 FEM systems.

1. Train one G-RANS network (self-supervised, progressive bootstrap) on small random
   systems of ``train_equations``.
2. On held-out systems of every equation, mesh size and coefficient shift, solve to
   relative residual ``tol`` (1e-5) with G-RANS (stand-alone cycles, and as the
   preconditioner of flexible GMRES), the untrained network (ablation), and every
   baseline of :mod:`jaxsci.solvers.krylov`. Solves run in float64 (float32 CG stalls
   near 3e-4 relative residual on these systems, above the target); the network runs
   in float32 inside them.
3. An end-to-end neural operator (the same network, one output vector, scaled by its
   1-D Galerkin projection) is trained supervised on exact solutions to show the
   residual one-shot prediction reaches.

Times are wall-clock on this machine after warm-up (compile excluded, best of
``repeats``); scipy/pyamg run with BLAS pinned to one thread and unpinned, the faster
counts. Per-matrix setup (G-RANS graph, AMG hierarchy) is included in
``solve_seconds``. Training time is ``train_seconds``, not in any speedup.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from jaxsci.core import Report, TrainConfig, fit
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.data import fem
from jaxsci.solvers import grans as gr
from jaxsci.solvers import krylov

__all__ = ["GRANSExperimentConfig", "CONFIGS", "METRIC_KEYS", "run"]


@dataclasses.dataclass(frozen=True)
class GRANSExperimentConfig:
    train_equations: tuple[str, ...] = ("poisson", "reaction_diffusion")
    test_equations: tuple[str, ...] = fem.EQUATIONS
    train_size: int = 17  # nodes per side of the training meshes
    train_problems: int = 4  # per training equation
    test_sizes: tuple[int, ...] = (33, 49)  # 961 and 2209 unknowns
    shifts: tuple[float, ...] = (-0.7, 0.0, 0.7)  # the paper's +-70%
    shift_size: int = 33  # mesh on which the shifts are tested
    # Minimal-residual projection and l1-Jacobi, not the paper's Galerkin projection and
    # weighted Jacobi (gr.GRANSConfig()'s defaults): measured on quick, the paper's pair
    # fails +70% advection-diffusion (weighted Jacobi's error propagator has spectral
    # radius 5.9 there) and +70% Helmholtz (indefinite; near-singular V^T A V), this
    # pair reaches 1e-5 on all 16 cases (docs/grans.md, "Differences").
    model: gr.GRANSConfig = gr.GRANSConfig(projection="minres", smoother="l1_jacobi")
    stages: int = 2
    steps_per_stage: int = 60
    iters_per_stage: int = 4
    batch_size: int = 4
    learning_rate: float = 3e-3
    operator_steps: int = 150
    tol: float = 1e-5  # the stopping rule
    maxiter: int = 400
    restart: int = 20
    repeats: int = 2
    baselines: tuple[str, ...] = (
        "jax_cg", "jax_gmres", "lineax_cg", "scipy_cg", "scipy_gmres", "scipy_bicgstab",
        "amg", "amg_pcg",
    )

    def validate(self) -> GRANSExperimentConfig:
        for e in self.train_equations + self.test_equations:
            check_choice("equation", e, fem.EQUATIONS)
        check_int("train_size", self.train_size, min=5)
        check_int("train_problems", self.train_problems, min=1)
        for s in self.test_sizes + (self.shift_size,):
            check_int("test_sizes[i]", s, min=5)
        for s in self.shifts:
            check_scalar("shifts[i]", s, gt=-1.0)
        for b in self.baselines:
            check_choice("baselines[i]", b, krylov.SOLVERS)
        self.model.validate()
        check_int("stages", self.stages, min=1)
        check_int("steps_per_stage", self.steps_per_stage, min=1)
        check_int("operator_steps", self.operator_steps, min=1)
        check_scalar("tol", self.tol, gt=0.0, lt=1.0)
        check_int("maxiter", self.maxiter, min=1)
        check_int("repeats", self.repeats, min=1)
        return self


CONFIGS = {
    "smoke": GRANSExperimentConfig(
        train_equations=("poisson",),
        test_equations=("poisson", "advection_diffusion"),
        train_size=9,
        train_problems=2,
        test_sizes=(13,),
        shifts=(-0.7,),
        shift_size=13,
        stages=1,
        steps_per_stage=5,
        operator_steps=5,
        repeats=1,
        maxiter=300,
        baselines=("jax_cg", "scipy_cg", "scipy_bicgstab", "amg_pcg"),
    ),
    # Two meshes (529 and 961 unknowns), one timing repeat and the host/AMG baselines
    # plus jax CG keep this under ~4 minutes on 2 CPU cores; the 2209-unknown mesh, the
    # jax GMRES/lineax baselines and repeated timings are in `full`.
    "quick": GRANSExperimentConfig(
        test_sizes=(25, 33),
        repeats=1,
        baselines=("jax_cg", "scipy_cg", "scipy_gmres", "scipy_bicgstab", "amg", "amg_pcg"),
    ),
    # The paper's scale (1k-65k unknowns, longer training), for a GPU.
    "full": GRANSExperimentConfig(
        train_size=33,
        train_problems=16,
        test_sizes=(33, 65, 129, 257),
        shift_size=65,
        shifts=(-0.7, -0.35, 0.0, 0.35, 0.7),
        model=gr.GRANSConfig(hidden=32, layers=3, levels=5, projection="minres",
                             smoother="l1_jacobi"),
        stages=4,
        steps_per_stage=2000,
        batch_size=16,
        learning_rate=1e-3,
        operator_steps=4000,
        maxiter=2000,
        repeats=3,
        baselines=krylov.SOLVERS,
    ),
}

METRIC_KEYS = (
    "train_seconds",
    "grans_converged_fraction",
    "grans_fgmres_converged_fraction",
    "grans_fgmres_max_final_rel_residual",
    "cross_equation_fgmres_converged_fraction",
    "shift_fgmres_converged_fraction",
    "median_speedup_vs_cg",
    "median_speedup_vs_gmres",
    "median_speedup_vs_amg_pcg",
    "median_iteration_ratio_vs_cg",
    "median_untrained_over_trained_iterations",
    "neural_operator_rel_residual",
    "neural_operator_rel_error",
    "cases",
)


def _best_time(fn, repeats):
    out = fn()  # warm-up (compiles JAX solvers)
    jax.block_until_ready(out)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return out, best


def _train_set(config, key):
    probs = [
        fem.assemble(jax.random.fold_in(key, 1000 * i + j), eq, size=config.train_size)
        for i, eq in enumerate(config.train_equations)
        for j in range(config.train_problems)
    ]
    nnz = max(p.matrix.nnz for p in probs)
    graphs = gr.stack_graphs(
        [
            gr.build_graph(fem.to_bcoo(p.matrix), p.coords, levels=config.model.levels, nnz=nnz)
            for p in probs
        ]
    )
    rhs = jnp.stack([jnp.asarray(p.rhs, jnp.float32) for p in probs])
    return probs, graphs, rhs


def _train_operator(config, probs, graphs, key, progress):
    """End-to-end neural operator: x = s * Phi(b), Phi the same network with one output,
    s its 1-D Galerkin scale, trained on the relative error to the exact solution."""
    import scipy.sparse.linalg as spla

    cfg = dataclasses.replace(config.model, n_basis=1)
    sols = jnp.stack([jnp.asarray(spla.spsolve(p.matrix.tocsc(), p.rhs), jnp.float32)
                      for p in probs])
    rhs = jnp.stack([jnp.asarray(p.rhs, jnp.float32) for p in probs])

    def predict(m, g, b):
        v = gr.basis(m, g, b)
        return gr.galerkin_correction(lambda q: gr.matvec(g, q), v, b, cfg.ridge)

    def loss_fn(m, k):
        xs = jax.vmap(lambda g, b: predict(m, g, b))(graphs, rhs)
        err = jnp.linalg.norm(xs - sols, axis=1) / jnp.linalg.norm(sols, axis=1)
        return jnp.mean(err)

    state, _ = fit(
        loss_fn,
        gr.init_model(key, cfg),
        optax.adam(config.learning_rate),
        key,
        TrainConfig(steps=config.operator_steps, progress=progress,
                    log_every=max(1, config.operator_steps // 4)),
    )
    return state.params, predict


def _cases(config):
    cases = [(eq, 0.0, n) for n in config.test_sizes for eq in config.test_equations]
    cases += [
        (eq, s, config.shift_size)
        for s in config.shifts
        if s != 0.0
        for eq in config.test_equations
    ]
    return cases


def _run_host(name, prob, config):
    def call():
        return krylov.host_solver(
            name, prob.matrix, prob.rhs, tol=config.tol, maxiter=10 * config.maxiter,
            symmetric=prob.symmetric,
        )

    with warnings.catch_warnings():
        # pyamg notes when it caps GMRES's maxiter at n; the cap does not change the result
        warnings.simplefilter("ignore", UserWarning)
        res, t_free = _best_time(call, config.repeats)
        with threadpool_limits(1):
            res1, t_pin = _best_time(call, config.repeats)
    if t_pin < t_free:
        return res1, t_pin, "pinned"
    return res, t_free, "default"


def run(
    config: GRANSExperimentConfig, out_dir: str | Path, *, seed: int = 0, progress: bool = True
) -> Report:
    """Train G-RANS, solve every test case with every solver, write metrics and figures."""
    config.validate()
    check_int("seed", seed, min=0)
    report = Report("grans: neural subspace-correction solver vs Krylov and AMG", out_dir)
    key = jax.random.key(seed)
    k_train, k_model, k_op, k_test = jax.random.split(key, 4)

    probs, graphs, rhs = _train_set(config, k_train)
    t0 = time.perf_counter()
    model0 = gr.init_model(k_model, config.model)
    model, losses = gr.train(
        model0, graphs, rhs, k_model, stages=config.stages,
        steps_per_stage=config.steps_per_stage, iters_per_stage=config.iters_per_stage,
        batch_size=config.batch_size, learning_rate=config.learning_rate, progress=progress,
    )
    train_seconds = time.perf_counter() - t0
    op_model, op_predict = _train_operator(config, probs, graphs, k_op, progress)

    cases = _cases(config)
    # one padded nnz per mesh size: every equation at that size shares compiled solvers
    results: dict[str, dict] = {}
    curves: dict[str, dict] = {}
    bar = tqdm(total=len(cases), desc="grans solves", disable=not progress, leave=False)
    op_res, op_err = [], []
    example = None
    for ci, (eq, shift, size) in enumerate(cases):
        bar.set_postfix(eq=eq, shift=shift, n=size)
        prob = fem.assemble(jax.random.fold_in(k_test, ci), eq, size=size, shift=shift)
        pad = 4 * 7 * prob.n  # >= nnz of any P1 matrix on these meshes (<= 7 per row)
        case: dict[str, dict] = {}
        with jax.enable_x64(True):
            a64 = fem.to_bcoo(prob.matrix, jnp.float64, nnz=pad)
            b64 = jnp.asarray(prob.rhs, jnp.float64)

            for label, m, fn in (
                ("grans", model, gr.solve),
                ("grans_fgmres", model, gr.solve_fgmres),
                ("grans_untrained", model0, gr.solve),
            ):
                extra = {"restart": config.restart} if fn is gr.solve_fgmres else {}

                def call(m=m, fn=fn, extra=extra, a64=a64, prob=prob, pad=pad, b64=b64):
                    g = gr.build_graph(a64, prob.coords, levels=config.model.levels, nnz=pad)
                    return fn(m, g, b64, tol=config.tol, maxiter=config.maxiter, **extra)

                res, secs = _best_time(call, config.repeats)
                case[label] = {
                    "final_rel_residual": krylov.relative_residual(prob.matrix, prob.rhs, res.x),
                    "iterations": int(res.iterations),
                    "solve_seconds": secs,
                    "status": int(res.status),
                }
                hist = np.asarray(res.residuals)
                curves.setdefault(f"{eq}/{shift}/{size}", {})[label] = (hist, secs)
                if label == "grans_fgmres" and example is None and eq == "poisson":
                    example = (prob, np.asarray(res.x))

            for name in config.baselines:
                if not krylov.applies(name, prob.symmetric):
                    continue
                if name in krylov.JAX_SOLVERS:
                    solver = krylov.jax_solver(name, a64, tol=config.tol,
                                               maxiter=10 * config.maxiter)
                    res, secs = _best_time(lambda s=solver, b=b64: s(b), config.repeats)
                    threads = "jax"
                else:
                    res, secs, threads = _run_host(name, prob, config)
                case[name] = {
                    "final_rel_residual": krylov.relative_residual(prob.matrix, prob.rhs, res.x),
                    "iterations": int(res.iterations),
                    "solve_seconds": secs,
                    "threads": threads,
                }
                if len(res.residuals):
                    curves[f"{eq}/{shift}/{size}"][name] = (np.asarray(res.residuals), secs)

        # the one-shot neural operator on this case (float32, as trained)
        a32 = fem.to_bcoo(prob.matrix, jnp.float32)
        g32 = gr.build_graph(a32, prob.coords, levels=config.model.levels)
        x_op = np.asarray(op_predict(op_model, g32, jnp.asarray(prob.rhs, jnp.float32)))
        exact = __import__("scipy.sparse.linalg", fromlist=["spsolve"]).spsolve(
            prob.matrix.tocsc(), prob.rhs
        )
        op_res.append(krylov.relative_residual(prob.matrix, prob.rhs, x_op))
        op_err.append(float(np.linalg.norm(x_op - exact) / np.linalg.norm(exact)))
        case["neural_operator"] = {"final_rel_residual": op_res[-1], "rel_error": op_err[-1]}
        _add_speedups(case, prob.symmetric)
        case["meta"] = {
            "equation": eq, "shift": shift, "unknowns": prob.n, "nnz": int(prob.matrix.nnz),
            "symmetric": prob.symmetric, "seen_in_training": eq in config.train_equations,
        }
        results[f"{eq}/shift{shift:+.2f}/n{prob.n}"] = case
        bar.update()
    bar.close()

    report.metrics = _summarise(config, results, train_seconds, op_res, op_err)
    report.metrics["train_loss_first_last"] = [float(losses[0]), float(losses[-1])]
    report.metrics["config"] = dataclasses.asdict(config)
    report.metrics["seed"] = seed
    _figures(report, curves, example, config)
    report.add_text(_summary_markdown(report.metrics))
    report.write()
    return report


def _add_speedups(case, symmetric):
    cg = "scipy_cg" if symmetric else "scipy_bicgstab"  # CG needs symmetry
    for label in ("grans", "grans_fgmres"):
        t = case[label]["solve_seconds"]
        for key, peer in (("cg", cg), ("gmres", "scipy_gmres"), ("amg_pcg", "amg_pcg")):
            if peer in case:
                case[label][f"speedup_vs_{key}"] = case[peer]["solve_seconds"] / t
        if cg in case and case[cg]["iterations"] > 0:
            case[label]["iteration_ratio_vs_cg"] = case[cg]["iterations"] / max(
                case[label]["iterations"], 1
            )


def _summarise(config, results, train_seconds, op_res, op_err):
    tol = config.tol * (1 + 1e-6)

    def frac(label, pred=lambda c: True):
        sel = [c for c in results.values() if pred(c)]
        if not sel:
            return 1.0
        return float(np.mean([c[label]["final_rel_residual"] <= tol for c in sel]))

    def median(label, key):
        vals = [c[label][key] for c in results.values() if key in c[label]]
        return float(np.median(vals)) if vals else float("nan")

    ratio = [
        c["grans_untrained"]["iterations"] / max(c["grans"]["iterations"], 1)
        for c in results.values()
    ]
    return {
        "train_seconds": train_seconds,
        "grans_converged_fraction": frac("grans"),
        "grans_fgmres_converged_fraction": frac("grans_fgmres"),
        "grans_fgmres_max_final_rel_residual": max(
            c["grans_fgmres"]["final_rel_residual"] for c in results.values()
        ),
        "cross_equation_fgmres_converged_fraction": frac(
            "grans_fgmres", lambda c: not c["meta"]["seen_in_training"]
        ),
        "shift_fgmres_converged_fraction": frac(
            "grans_fgmres", lambda c: c["meta"]["shift"] != 0.0
        ),
        "median_speedup_vs_cg": median("grans_fgmres", "speedup_vs_cg"),
        "median_speedup_vs_gmres": median("grans_fgmres", "speedup_vs_gmres"),
        "median_speedup_vs_amg_pcg": median("grans_fgmres", "speedup_vs_amg_pcg"),
        "median_iteration_ratio_vs_cg": median("grans_fgmres", "iteration_ratio_vs_cg"),
        "median_untrained_over_trained_iterations": float(np.median(ratio)),
        "neural_operator_rel_residual": float(np.median(op_res)),
        "neural_operator_rel_error": float(np.median(op_err)),
        "cases": results,
    }


def _figures(report, curves, example, config):
    plt = pyplot()

    key = next(iter(curves))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, (hist, secs) in curves[key].items():
        h = np.asarray(hist, float)
        k = np.arange(len(h))
        ok = np.isfinite(h)
        if not ok.any():
            continue
        last = int(np.max(np.nonzero(ok)))
        axes[0].semilogy(k[ok], h[ok], ".-" if "grans" in label else "-", label=label, ms=3)
        # time axis: the measured solve time spread evenly over the iterations taken
        axes[1].semilogy(k[ok] * secs / max(last, 1), h[ok], label=label)
    for ax, xl in zip(axes, ("iteration", "seconds (uniform per iteration)"), strict=True):
        ax.axhline(config.tol, color="k", lw=0.8, ls=":")
        ax.set_xlabel(xl)
        ax.set_ylabel("relative residual")
    axes[0].legend(fontsize=7)
    axes[0].set_title(key)
    report.add_figure(fig, "residuals.png",
                      f"Relative residual vs iteration and vs time, {key} (shift/unknown side).")
    plt.close(fig)
    if example is not None:
        prob, x = example
        import scipy.sparse.linalg as spla

        exact = spla.spsolve(prob.matrix.tocsc(), prob.rhs)
        mesh = prob.mesh
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, val, title in (
            (axes[0], fem.full_solution(prob, x), "G-RANS-FGMRES solution"),
            (axes[1], fem.full_solution(prob, x - exact), "error vs sparse direct"),
        ):
            im = ax.tripcolor(mesh.p[0], mesh.p[1], mesh.t.T, val, shading="gouraud")
            ax.set_aspect("equal")
            ax.set_title(title)
            fig.colorbar(im, ax=ax)
        report.add_figure(fig, "solution.png", "Poisson test problem: solution and its error.")
        plt.close(fig)


def _summary_markdown(m):
    lines = [
        "## Summary",
        "",
        f"- training: {m['train_seconds']:.1f} s (excluded from speedups)",
        f"- G-RANS stand-alone reached tol on {100 * m['grans_converged_fraction']:.0f}% of cases;"
        f" G-RANS-FGMRES on {100 * m['grans_fgmres_converged_fraction']:.0f}%"
        f" (unseen equations {100 * m['cross_equation_fgmres_converged_fraction']:.0f}%,"
        f" shifted {100 * m['shift_fgmres_converged_fraction']:.0f}%)",
        f"- median speedup of G-RANS-FGMRES: vs CG {m['median_speedup_vs_cg']:.2f}x, vs GMRES "
        f"{m['median_speedup_vs_gmres']:.2f}x, vs AMG-PCG {m['median_speedup_vs_amg_pcg']:.2f}x;"
        f" iteration ratio CG/G-RANS {m['median_iteration_ratio_vs_cg']:.2f}",
        f"- untrained/trained iterations (stand-alone): "
        f"{m['median_untrained_over_trained_iterations']:.2f}",
        f"- one-shot neural operator: relative residual {m['neural_operator_rel_residual']:.2e},"
        f" relative error {m['neural_operator_rel_error']:.2e}",
        "",
        "| case | solver | rel. residual | iterations | seconds |",
        "|---|---|---|---|---|",
    ]
    for name, case in m["cases"].items():
        for label, r in case.items():
            if label in ("meta", "neural_operator"):
                continue
            lines.append(
                f"| {name} | {label} | {r['final_rel_residual']:.1e} | {r['iterations']} | "
                f"{r['solve_seconds']:.4f} |"
            )
    return "\n".join(lines)



