"""How long attention alone takes to collapse the tokens to one cluster, per beta.

    python scripts/particles_collapse.py --betas 1,2,4,8 --seeds 4 --max-steps 100000

The particles experiment's attention-only flow (``n`` tokens uniform on ``S^{d-1}``,
``Q^T K = V = I``, mean normalisation, time in units where the kernel
``exp(beta (<x, y> - 1))`` is at most 1) integrated by
:func:`jaxsci.dynamics.particles.solve_to_rest`: adaptive Tsit5 steps up to ``--t1``,
stopping when the largest velocity falls below ``--vtol`` or after ``--max-steps``
steps. Clusters (``--tol``, as the experiment's ``cluster_tol``) are counted at
log-spaced times. Prints, per beta: the median time to one cluster over the seeds (or
that it was not reached), where the solves stopped and why, and the clusters left;
then a fit of log10(time to one cluster) against beta over the betas that collapsed and
its extrapolation to those that did not. Writes ``clusters_vs_time.png`` (clusters
against time, log axes, one line per seed ending where its solve stopped, marked o
when at rest and X when the step budget ran out) to ``--out``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.results import pyplot
from jaxsci.core.sphere import sample_uniform
from jaxsci.dynamics import particles as pt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--betas", default="1,2,4,8")
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--t1", type=float, default=1e9)
    ap.add_argument("--n-times", type=int, default=101)
    ap.add_argument("--vtol", type=float, default=1e-5)  # the experiment's stationary_tol
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-7)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--max-steps", type=int, default=100_000)
    ap.add_argument("--solver", choices=("tsit5", "kvaerno5"), default="tsit5",
                    help="explicit Tsit5, or implicit Kvaerno5 (long steps through stiffness)")
    ap.add_argument("--x64", action="store_true",
                    help="float64 (a velocity floor far below float32's, for small --vtol)")
    ap.add_argument("--out", default="runs/particles_collapse")
    args = ap.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    betas = [float(b) for b in args.betas.split(",")]
    ts = jnp.logspace(-1.0, np.log10(args.t1), args.n_times)
    x0s = jax.vmap(lambda k: sample_uniform(k, args.n, args.d, dtype=jnp.result_type(float)))(
        jax.random.split(jax.random.key(0), args.seeds))

    solver = diffrax.Tsit5() if args.solver == "tsit5" else diffrax.Kvaerno5()

    @jax.jit
    def one_beta(beta, x0s):
        def one(x0):
            flow = pt.make_flow(args.d, beta, speed=jnp.exp(-beta))
            r = pt.solve_to_rest(flow, x0, args.t1, ts, vtol=args.vtol, rtol=args.rtol,
                                 atol=args.atol, max_steps=args.max_steps, solver=solver)
            k = jax.vmap(lambda x: pt.count_clusters(x, args.tol)[0])(r.xs)
            return k, r.t_stop, r.at_rest, r.n_steps, pt.count_clusters(r.final, args.tol)[0]
        return jax.vmap(one)(x0s)

    rows, curves = [], {}
    print(f"n={args.n} tokens on S^{args.d - 1}, {args.seeds} seeds, {x0s.dtype}, "
          f"{type(solver).__name__} adaptive "
          f"(rtol {args.rtol:g}, atol {args.atol:g}), vtol={args.vtol:g}, "
          f"max_steps={args.max_steps}, "
          f"cluster tol={args.tol}")
    print("beta | time to one cluster (median; per seed) | stopped at (median) | "
          "at rest | clusters at the stop | steps (max) | seconds")
    for beta in betas:
        t0 = time.time()
        k, t_stop, rest, steps, k_final = (np.asarray(x) for x in
                                           one_beta(jnp.asarray(beta, x0s.dtype), x0s))
        sec = time.time() - t0
        # the first save time with one cluster, or the stop if that came first with one
        # cluster (save slots after the stop hold the final state); inf if never one
        t_one = np.asarray([min(float(ts[np.argmax(row == 1)]), float(ts_))
                            if kf == 1 else np.inf
                            for row, kf, ts_ in zip(k, k_final, t_stop, strict=True)])
        # each seed's curve: its save times before the stop, then the stop itself (later
        # slots repeat the final state)
        curves[beta] = [(np.append(np.asarray(ts)[np.asarray(ts) < t_s], t_s),
                         np.append(row[np.asarray(ts) < t_s], kf), bool(r))
                        for row, t_s, kf, r in zip(k, t_stop, k_final, rest, strict=True)]
        rows.append((beta, t_one))
        per = ", ".join("-" if not np.isfinite(t) else f"{t:.3g}" for t in t_one)
        print(f"{beta:g} | {np.median(t_one):.3g} ({per}) | {np.median(t_stop):.3g} | "
              f"{int(rest.sum())}/{len(rest)} | {k_final.tolist()} | {int(steps.max())} | "
              f"{sec:.0f}")
    done = [(b, np.log10(np.median(t))) for b, t in rows if np.isfinite(np.median(t))]
    if len(done) >= 2:
        slope, icpt = np.polyfit(*np.asarray(done).T, 1)
        print(f"fit over the collapsed betas {[b for b, _ in done]}: log10(time to one "
              f"cluster) = {icpt:.2f} + {slope:.3f} beta (time x {10 ** slope:.2f} per unit "
              f"of beta)")
        for b, t in rows:
            if not np.isfinite(np.median(t)):
                print(f"  beta={b:g} not collapsed within the budget; the fit predicts "
                      f"t = {10 ** (icpt + slope * b):.3g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    for i, (beta, seeds) in enumerate(curves.items()):
        for j, (t, kk, at_rest) in enumerate(seeds):
            ax.plot(t, kk, color=f"C{i}", lw=1, alpha=0.7,
                    label=f"beta={beta:g}" if j == 0 else None)
            ax.plot(t[-1:], kk[-1:], color=f"C{i}", marker="o" if at_rest else "X", ms=7,
                    mfc="none" if at_rest else f"C{i}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time t (kernel exp(beta(<x,y>-1)) <= 1)")
    ax.set_ylabel(f"clusters (tol {args.tol}), one line per seed")
    ax.set_title(f"Attention only: n={args.n} on S^{args.d - 1}, adaptive steps\n"
                 f"(curves end at the stop; o: at rest, X: step budget spent)", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(out / "clusters_vs_time.png", dpi=120)
    print(f"wrote {out / 'clusters_vs_time.png'}")


if __name__ == "__main__":
    main()
