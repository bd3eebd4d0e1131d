"""G-RANS on meshes and coefficients it was not trained on (docs/grans.md, "Generalisation").

    python scripts/grans_generalise.py --sizes 65,129 --equations poisson,helmholtz

Trains the quick experiment's network (squares of 33 x 33 nodes, smooth log-normal
coefficients; seed 0), then solves to relative residual 1e-5 (at most 400 G-RANS
iterations, 4000 Krylov ones) systems of three unseen kinds per size: the unit square
with a checkerboard coefficient of contrast 100 (4 x 4 squares, times the smooth
field), the square with a hole of radius 0.25 (Dirichlet on its edge), and the
L-shaped domain (refined to a similar number of unknowns). Prints iterations, final
relative residual and seconds (best of ``--repeats`` after warm-up) for
G-RANS-FGMRES, the stand-alone G-RANS iteration, scipy CG (BiCGStab for the
non-symmetric advection-diffusion) and AMG-PCG, and each solver's iteration growth
per 4x unknowns. ``--projection galerkin --smoother jacobi`` trains and solves with the
paper's pair instead of the experiment's default (minimal residual, l1-Jacobi).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import fem
from jaxsci.experiments import grans as exp
from jaxsci.solvers import grans as gr
from jaxsci.solvers import krylov


def problems(size, equation, key):
    """(label, FEMProblem) of the three unseen kinds at ``size`` nodes per side."""
    level = max(1, int(math.log2(size - 1)) - 1)  # L-shape: 65 -> 5 (2.6k), 129 -> 6
    return [
        ("checkerboard x100", fem.assemble(key, equation, size=size, contrast=100.0)),
        ("hole", fem.assemble(key, equation, domain="hole", size=size)),
        ("L-shape", fem.assemble(key, equation, domain="lshape", size=level)),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="65,129")
    p.add_argument("--equations",
                   default="poisson,reaction_diffusion,helmholtz,advection_diffusion")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--projection", choices=tuple(exp.PROJECTIONS), default=None,
                   help="the correction's projection (default: the quick config's)")
    p.add_argument("--smoother", choices=tuple(exp.SMOOTHERS), default=None,
                   help="the smoother (default: the quick config's)")
    args = p.parse_args()
    cfg = dataclasses.replace(exp.CONFIGS["quick"], maxiter=400, repeats=args.repeats)
    for field in ("projection", "smoother"):
        if getattr(args, field) is not None:
            cfg = dataclasses.replace(cfg, **{field: getattr(args, field)})
    key = jax.random.key(args.seed)
    k_train, k_model, _, k_test = jax.random.split(key, 4)
    _, graphs, rhs = exp._train_set(cfg, k_train)
    t0 = time.perf_counter()
    model, _ = gr.train(exp.make_model(cfg, k_model), graphs, rhs, k_model, cfg.train,
                        progress=True)
    print(f"trained in {time.perf_counter() - t0:.1f} s ({cfg.projection} projection, "
          f"{cfg.smoother} smoother)")
    rows = {}
    print(f"{'problem':18s} {'equation':20s} {'n':>6s} | {'solver':14s} {'iters':>6s} "
          f"{'rel.res':>8s} {'seconds':>8s}")
    for size in (int(v) for v in args.sizes.split(",")):
        for ei, eq in enumerate(args.equations.split(",")):
            for label, prob in problems(size, eq, jax.random.fold_in(k_test, 100 * size + ei)):
                for name, it, res, secs in _solve_all(cfg, model, prob, args.repeats):
                    rows.setdefault((label, eq, name), []).append((prob.n, it, res))
                    ok = "" if res <= cfg.tol * 1.0001 else "  (not reached)"
                    print(f"{label:18s} {eq:20s} {prob.n:6d} | {name:14s} {it:6d} "
                          f"{res:8.1e} {secs:8.3f}{ok}", flush=True)
    print("\niteration growth per 4x unknowns (between consecutive sizes, converged runs):")
    for (label, eq, name), pts in rows.items():
        g = [(b[1] / a[1]) ** (math.log(4) / math.log(b[0] / a[0]))
             for a, b in zip(pts, pts[1:], strict=False)
             if a[2] <= cfg.tol * 1.0001 and b[2] <= cfg.tol * 1.0001 and a[1] > 0]
        if g:
            print(f"  {label:18s} {eq:20s} {name:14s} " + " ".join(f"{v:.2f}" for v in g))


def _solve_all(cfg, model, prob, repeats):
    out = []
    pad = -(-int(prob.matrix.nnz) // 4096) * 4096
    with jax.enable_x64(True):
        a64 = fem.to_bcoo(prob.matrix, jnp.float64, nnz=pad)
        b64 = jnp.asarray(prob.rhs, jnp.float64)
        for name, fn, extra in (("grans_fgmres", gr.solve_fgmres, {"restart": cfg.restart}),
                                ("grans", gr.solve, {})):
            def call(fn=fn, extra=extra):
                g = gr.build_graph(a64, prob.coords, levels=cfg.model.levels, nnz=pad)
                return fn(model, g, b64, tol=cfg.tol, maxiter=cfg.maxiter, throw=False,
                          **extra)

            res, secs = exp._best_time(call, repeats)
            rel = krylov.relative_residual(prob.matrix, prob.rhs, np.asarray(res.x))
            out.append((name, int(res.iterations), rel, secs))
    base = "scipy_cg" if prob.symmetric else "scipy_bicgstab"
    for name in (base, "amg_pcg"):
        if not krylov.applies(name, prob.symmetric):
            continue
        res, secs, _ = exp._run_host(name, prob, cfg)
        rel = krylov.relative_residual(prob.matrix, prob.rhs, np.asarray(res.x))
        out.append((name, int(res.iterations), rel, secs))
    return out


if __name__ == "__main__":
    main()
