"""Benchmark: JIC-HD (jitted) vs scikit-learn's GraphicalLassoCV on the same hub data.

The peer a user would otherwise pick for common hubs of K populations: fit one
graphical lasso per population (``GraphicalLassoCV``, scikit-learn's defaults unless
``--cv``/``--refinements`` are given), score variables by their degree in the
intersection of the K graphs. Both run on identical samples (the strong-individual
regime of ``jaxsci.data.hubs``, K = 3, p = 100). Reported: time per instance (JIC-HD
after warm-up, compile time apart, single call and amortised under ``vmap``) and the
common-hub AUC and common-vs-individual separation of each, with the time ratio.
``gglasso`` (a joint graphical lasso) is not installed here; it would need its own
environment and is skipped.

    python scripts/bench/ggm.py [--reps 3] [--n 400] [--cv 5] [--refinements 4]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from jaxsci.data import hubs
from jaxsci.experiments.ggm import fit_glasso, glasso_scores
from jaxsci.stats import ggm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--refinements", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    import sklearn

    spec = hubs.strong_individual()
    solver = ggm.RiemannianSubgradient(n_steps=200, n_starts=4)

    @jax.jit
    def jic(x, key):
        return ggm.jic_hd(ggm.correlation(x), key, r_max=10, solver=solver).scores

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, scikit-learn "
          f"{sklearn.__version__}; p = {spec.p}, K = {spec.n_populations}, n = {args.n}, "
          f"GraphicalLassoCV(cv={args.cv}, n_refinements={args.refinements})")
    hdr = (f"{'rep':>3} | {'JIC ms':>8} {'compile s':>9} | {'glasso s':>8} | {'ratio':>7} | "
           f"{'JIC AUC':>7} {'GL AUC':>7} | {'JIC sep':>7} {'GL sep':>7} | {'GL edges':>8}")
    print(hdr)
    print("-" * len(hdr))
    ratios = []
    for rep in range(args.reps):
        g = hubs.hub_precisions(jax.random.key(rep), spec)
        x = hubs.gaussian_samples(jax.random.key(1000 + rep), g.theta, args.n)
        key = jax.random.key(rep)
        t0 = time.perf_counter()
        jax.block_until_ready(jic(x, key))
        first = time.perf_counter() - t0
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            scores = jax.block_until_ready(jic(x, key))
            times.append(time.perf_counter() - t0)
        t_jic = float(np.median(times))
        t0 = time.perf_counter()
        theta, _, _ = fit_glasso(np.asarray(x), cv=args.cv, n_refinements=args.refinements)
        t_gl = time.perf_counter() - t0
        gl, edges = glasso_scores(theta)
        ind = np.asarray(g.individual).any(0)
        auc = [float(ggm.hub_auc(s, g.common)) for s in (scores, gl)]
        sep = [float(ggm.hub_auc(s, g.common, ind)) for s in (scores, gl)]
        ratios.append(t_gl / t_jic)
        print(f"{rep:>3} | {1e3 * t_jic:>8.1f} {first - t_jic:>9.2f} | {t_gl:>8.2f} | "
              f"{t_gl / t_jic:>7.0f} | {auc[0]:>7.3f} {auc[1]:>7.3f} | {sep[0]:>7.3f} "
              f"{sep[1]:>7.3f} | {edges:>8d}")
    # Amortised under vmap: a batch of instances in one call (the sweep use case).
    xs = jax.vmap(lambda k: hubs.gaussian_samples(
        k, hubs.hub_precisions(k, spec).theta, args.n))(
        jax.random.split(jax.random.key(7), args.batch))
    keys = jax.random.split(jax.random.key(8), args.batch)
    batched = jax.jit(jax.vmap(jic))
    jax.block_until_ready(batched(xs, keys))
    t0 = time.perf_counter()
    jax.block_until_ready(batched(xs, keys))
    t_b = (time.perf_counter() - t0) / args.batch
    print(f"median ratio (glasso / JIC-HD single call) = {np.median(ratios):.0f}x; vmapped "
          f"batch of {args.batch}: {1e3 * t_b:.1f} ms per instance")
    print("AUC: common hubs vs all other variables; sep: common vs individual hubs; GL = "
          "GraphicalLassoCV per population, degree in the intersection of the K graphs")


if __name__ == "__main__":
    main()
