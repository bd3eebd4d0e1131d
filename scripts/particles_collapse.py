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

Reduction (``--reduce-at T``, needs ``--x64``): the full solve stops at ``T`` (or at
rest before it), each cluster is replaced by one token carrying its mass
(:func:`jaxsci.dynamics.particles.merge_clusters`; exact for collapsed clusters, the
largest distance of a token from its center is printed), and the reduced flow of the
few weighted tokens continues through its merges
(:func:`jaxsci.dynamics.particles.solve_merging`: two tokens closer than
``--merge-tol`` become one) until their diameter falls below ``--tol`` (one cluster)
or ``--t1``. Without the fast contraction inside each cluster the steps follow the
slow merging time, so horizons of 1e13 take a few hundred steps. For the seeds left
with two clusters the closed-form merging time
(:func:`jaxsci.dynamics.particles.merge_time_two_clusters`) is printed beside the
solver's as a check. The figure then shows each seed's merges as a staircase.

    python scripts/particles_collapse.py --betas 1,2,4,8,16 --x64 --reduce-at 1000 --t1 1e16
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
    ap.add_argument("--reduce-at", type=float, default=None,
                    help="stop the full solve at this time and continue with the reduced "
                         "flow of the merged clusters (needs --x64)")
    ap.add_argument("--max-clusters", type=int, default=32,
                    help="the reduced flow's size (more clusters at --reduce-at raise)")
    ap.add_argument("--merge-tol", type=float, default=1e-3,
                    help="reduced flow: two clusters closer than this become one")
    ap.add_argument("--out", default="runs/particles_collapse")
    args = ap.parse_args()
    if args.reduce_at is not None and not args.x64:
        ap.error("--reduce-at needs --x64 (the reduced solve reaches times where float32 "
                 "cannot resolve its steps)")
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    betas = [float(b) for b in args.betas.split(",")]
    t1_full = args.t1 if args.reduce_at is None else args.reduce_at
    # the last point exactly at the horizon (logspace may round past it)
    ts = jnp.logspace(-1.0, np.log10(t1_full), args.n_times).at[-1].set(t1_full)
    x0s = jax.vmap(lambda k: sample_uniform(k, args.n, args.d, dtype=jnp.result_type(float)))(
        jax.random.split(jax.random.key(0), args.seeds))

    solver = diffrax.Tsit5() if args.solver == "tsit5" else diffrax.Kvaerno5()

    @jax.jit
    def one_beta(beta, x0s):
        def one(x0):
            flow = pt.make_flow(args.d, beta, speed=jnp.exp(-beta))
            r = pt.solve_to_rest(flow, x0, t1_full, ts, vtol=args.vtol, rtol=args.rtol,
                                 atol=args.atol, max_steps=args.max_steps, solver=solver)
            k = jax.vmap(lambda x: pt.count_clusters(x, args.tol)[0])(r.xs)
            out = (k, r.t_stop, r.at_rest, r.n_steps, pt.count_clusters(r.final, args.tol)[0])
            if args.reduce_at is None:
                return out
            m = pt.merge_clusters(r.final, args.tol, args.max_clusters)
            h = pt.solve_merging(flow, m.centers, args.t1, weights=m.weights, tol=args.tol,
                                 merge_tol=args.merge_tol, rtol=args.rtol, atol=args.atol,
                                 max_steps=args.max_steps)
            c0, c1 = m.centers[0], m.centers[jnp.minimum(1, args.max_clusters - 1)]
            angle = jnp.arccos(jnp.clip(c0 @ c1, -1.0, 1.0))
            return out + (m.n_clusters, m.spread, h.t_merge, h.n_clusters, h.t_one,
                          h.n_steps, angle)
        return jax.vmap(one)(x0s)

    rows, curves = [], {}
    print(f"n={args.n} tokens on S^{args.d - 1}, {args.seeds} seeds, {x0s.dtype}, "
          f"{type(solver).__name__} adaptive "
          f"(rtol {args.rtol:g}, atol {args.atol:g}), vtol={args.vtol:g}, "
          f"max_steps={args.max_steps}, "
          f"cluster tol={args.tol}")
    print("beta | time to one cluster (median; per seed) | stopped at (median) | "
          "at rest | clusters at the stop | steps (max) | seconds")
    reduced = []
    for beta in betas:
        t0 = time.time()
        res = [np.asarray(x) for x in one_beta(jnp.asarray(beta, x0s.dtype), x0s)]
        k, t_stop, rest, steps, k_final = res[:5]
        sec = time.time() - t0
        # the first save time with one cluster, or the stop if that came first with one
        # cluster (save slots after the stop hold the final state); inf if never one
        t_one = np.asarray([min(float(ts[np.argmax(row == 1)]), float(ts_))
                            if kf == 1 else np.inf
                            for row, kf, ts_ in zip(k, k_final, t_stop, strict=True)])
        # each seed's curve: its save times before the stop, then the stop itself (later
        # slots repeat the final state)
        tsn = np.asarray(ts)
        curves[beta] = [(np.append(tsn[tsn < t_s], t_s), np.append(row[tsn < t_s], kf),
                         bool(r))
                        for row, t_s, kf, r in zip(k, t_stop, k_final, rest, strict=True)]
        if args.reduce_at is not None:
            n_cl, spread, t_merge, k_merge, t_red, steps2, angle = res[5:]
            for i in range(len(t_one)):
                if np.isfinite(t_one[i]) or k_final[i] == 1:
                    continue
                t_one[i] = t_stop[i] + t_red[i]
                t, kk, _ = curves[beta][i]
                live = np.isfinite(t_merge[i])  # the staircase of merges, then the end
                curves[beta][i] = (np.concatenate([t, t_stop[i] + t_merge[i][live]]),
                                   np.concatenate([kk, k_merge[i][live]]),
                                   bool(np.isfinite(t_red[i])))
            closed = [float(pt.merge_time_two_clusters(beta, a, 2 * np.arcsin(args.tol / 2)))
                      if c == 2 else np.nan for c, a in zip(n_cl, angle, strict=True)]
            reduced.append((beta, k_final, n_cl, spread, t_red, steps2, angle, closed,
                            t_merge, k_merge))
        rows.append((beta, t_one))
        per = ", ".join("-" if not np.isfinite(t) else f"{t:.3g}" for t in t_one)
        print(f"{beta:g} | {np.median(t_one):.3g} ({per}) | {np.median(t_stop):.3g} | "
              f"{int(rest.sum())}/{len(rest)} | {k_final.tolist()} | {int(steps.max())} | "
              f"{sec:.0f}")
    if reduced:
        print(f"reduced flow from t = {args.reduce_at:g} (or the rest before it), seeds "
              "not yet at one cluster: clusters merged | largest token-to-center distance | "
              "reduced time to one cluster | steps | merges (time: clusters left) | two "
              "clusters: their angle and the closed-form merging time")
        for beta, k_final, n_cl, spread, t_red, steps2, angle, closed, tm, km in reduced:
            for i in range(len(n_cl)):
                if k_final[i] == 1:
                    continue
                merges = ", ".join(f"{t:.3g}: {c}" for t, c in zip(tm[i], km[i], strict=True)
                                   if np.isfinite(t))
                two = (f" | angle {angle[i]:.4f} rad, closed form {closed[i]:.4g}"
                       if n_cl[i] == 2 else "")
                print(f"  beta={beta:g} seed {i}: {int(n_cl[i])} | {spread[i]:.1e} | "
                      f"{t_red[i]:.4g} | {int(steps2[i])} | {merges}{two}")
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
            ax.step(t, kk, where="post", color=f"C{i}", lw=1, alpha=0.7,
                    label=f"beta={beta:g}" if j == 0 else None)
            ax.plot(t[-1:], kk[-1:], color=f"C{i}", marker="o" if at_rest else "X", ms=7,
                    mfc="none" if at_rest else f"C{i}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time t (kernel exp(beta(<x,y>-1)) <= 1)")
    ax.set_ylabel(f"clusters (tol {args.tol}), one line per seed")
    if args.reduce_at is not None:
        ax.axvline(args.reduce_at, color="0.5", ls=":", lw=1)
        how = (f"merged clusters from t={args.reduce_at:g}, dotted; o: one cluster, "
               "X: not by t1")
    else:
        how = "curves end at the stop; o: at rest, X: step budget spent"
    ax.set_title(f"Attention only: n={args.n} on S^{args.d - 1}, adaptive steps\n({how})",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(out / "clusters_vs_time.png", dpi=120)
    print(f"wrote {out / 'clusters_vs_time.png'}")


if __name__ == "__main__":
    main()
