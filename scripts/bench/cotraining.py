"""Benchmark: the Sinkhorn alignment loss of jaxsci.generative.cotraining against POT.

Two latent clouds of ``--batch`` points in ``--dim`` dimensions (the real and sim batch
latents of the OT arm), squared-Euclidean cost, uniform weights, entropic
regularisation ``--eps`` (relative to the mean cost, so the kernel does not underflow),
``--iters`` fixed iterations. jaxsci's :func:`sinkhorn_cost` (log-domain, jitted, after
warm-up; compile time reported apart) against POT's ``ot.sinkhorn2`` (``pot`` package,
``method="sinkhorn_log"``, same iterations) when it imports; otherwise that peer is
skipped with the pip line and a plain NumPy log-domain Sinkhorn (scipy ``logsumexp``)
is the peer. Values are compared too.

    python scripts/bench/cotraining.py [--batch 256] [--dim 64] [--iters 100]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from scipy.special import logsumexp

from jaxsci.generative import cotraining as C


def numpy_sinkhorn(a, b, eps, iters):
    cost = ((a[:, None] - b[None]) ** 2).sum(-1)
    n, m = cost.shape
    la, lb = np.full(n, -np.log(n)), np.full(m, -np.log(m))
    f, g = np.zeros(n), np.zeros(m)
    for _ in range(iters):
        f = -eps * logsumexp((g[None] - cost) / eps + lb[None], 1)
        g = -eps * logsumexp((f[:, None] - cost) / eps + la[:, None], 0)
    p = np.exp((f[:, None] + g[None] - cost) / eps + la[:, None] + lb[None])
    return float((p * cost).sum())


def _time(fn, reps=5):
    t0 = time.perf_counter()
    val = fn()
    first = time.perf_counter() - t0
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    best = float(np.median(ts))
    return val, best, max(first - best, 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--eps", type=float, default=0.05)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.batch, args.dim)).astype(np.float32)
    b = (rng.standard_normal((args.batch, args.dim)) + 0.5).astype(np.float32)
    mean_cost = float(((a[:, None] - b[None]) ** 2).sum(-1).mean())
    eps = args.eps * mean_cost
    fn = jax.jit(C.sinkhorn_cost, static_argnums=3)
    aj, bj = jax.numpy.asarray(a), jax.numpy.asarray(b)
    rows = [("jaxsci sinkhorn_cost (jit)",
             *_time(lambda: float(fn(aj, bj, eps, args.iters))))]
    try:
        import ot

        rows.append(("POT ot.sinkhorn2 (sinkhorn_log)", *_time(lambda: float(ot.sinkhorn2(
            np.full(args.batch, 1 / args.batch), np.full(args.batch, 1 / args.batch),
            ot.dist(a.astype(np.float64), b.astype(np.float64)), eps,
            method="sinkhorn_log", numItermax=args.iters, stopThr=0.0)))))
    except ImportError:
        print("POT not installed; skipped (pip install pot). Peer: NumPy log-domain Sinkhorn.")
        rows.append(("NumPy log-domain Sinkhorn", *_time(lambda: numpy_sinkhorn(
            a.astype(np.float64), b.astype(np.float64), eps, args.iters))))
    base = rows[0][2]
    print(f"batch {args.batch}, d = {args.dim}, {args.iters} iterations, "
          f"eps = {args.eps} x mean cost, {jax.devices()[0].platform}")
    print("| implementation | OT cost | time (ms) | compile (s) | time / jaxsci |")
    print("|---|---|---|---|---|")
    for name, val, t, comp in rows:
        print(f"| {name} | {val:.4f} | {1e3 * t:.2f} | {comp:.2f} | {t / base:.2f} |")


if __name__ == "__main__":
    main()
