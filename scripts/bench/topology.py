"""Benchmark: the distance stage in JAX vs SciPy/NumPy, and persistence end to end vs ripser.

A user computing Vietoris-Rips persistence of high-dimensional data would call
``ripser.ripser(Y, maxdim=1)`` on the point cloud (ripser builds the distance matrix
itself, through scikit-learn's ``pairwise_distances``), or build the matrix with SciPy's
``cdist`` / a NumPy Gram identity and pass ``distance_matrix=True``. jaxsci builds it with
the blockwise JAX Gram (:func:`jaxsci.stats.topology.pairwise_distances`, row blocks of
``--block`` rows) and hands it to the same ripser core.

On the same simulated grid-cell data (``n`` points, ``p`` features, Poisson noise) we
report, per ``n``:

* the distance stage: jaxsci (jitted, after warm-up; compile time apart), SciPy
  ``cdist`` (float64), NumPy Gram identity (float32), seconds, and the ratio;
* end to end (distances + H0/H1 persistence): ``ripser(Y)`` vs jaxsci distances +
  ``ripser(D, distance_matrix=True)``, seconds;
* the peak resident memory of each variant, measured in a fresh subprocess
  (``ru_maxrss`` minus the same process's RSS before the call), MiB.

    python scripts/bench/topology.py [--n 250 500 1000] [--p 2048] [--block 128]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _data(n, p):
    import jax

    from jaxsci.stats import topology as tp

    u = tp.sample_torus(jax.random.key(0), n)
    y = tp.simulate(tp.GridCells(2.0), tp.PoissonNoise(5.0), u, jax.random.key(1), p=p)
    return np.asarray(y)


def child(variant, n, p, block):
    """One variant in this (fresh) process; prints a JSON line."""
    import jax

    from jaxsci.stats import topology as tp

    y = _data(n, p)
    out = {}
    if variant.startswith("jax"):
        f = jax.jit(lambda a: tp.pairwise_distances(a, block))
        yj = jax.numpy.asarray(y)
        t0 = time.perf_counter()
        jax.block_until_ready(f(yj))
        out["compile_s"] = time.perf_counter() - t0
    base = _rss_mib()
    t0 = time.perf_counter()
    if variant == "jax":
        times = []
        for _ in range(3):
            t1 = time.perf_counter()
            jax.block_until_ready(f(yj))
            times.append(time.perf_counter() - t1)
        out["seconds"] = float(np.median(times))
    elif variant == "cdist":
        from scipy.spatial.distance import cdist

        cdist(y.astype(np.float64), y.astype(np.float64))
    elif variant == "numpy":
        g = y @ y.T
        sq = np.diagonal(g)
        np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * g, 0))
    elif variant == "ripser":
        from ripser import ripser

        ripser(y, maxdim=1)
    elif variant == "jax+ripser":
        from ripser import ripser

        d = np.asarray(f(yj))
        ripser(d, maxdim=1, distance_matrix=True)
    else:
        raise ValueError(variant)
    out.setdefault("seconds", time.perf_counter() - t0)
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    print(json.dumps(out))


def run_child(variant, n, p, block):
    proc = subprocess.run([sys.executable, __file__, "--child", variant, "--n", str(n),
                           "--p", str(p), "--block", str(block)],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} n={n} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[250, 500, 1000])
    ap.add_argument("--p", type=int, default=2048)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.n[0], args.p, args.block)
        return
    import jax
    import ripser
    import scipy

    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} CPUs); "
          f"scipy {scipy.__version__}; ripser {ripser.__version__}; grid cells, p = {args.p}, "
          f"block {args.block}")
    hdr = (f"{'n':>6} | {'jaxsci dist s':>13} {'compile s':>9} | {'cdist s':>8} "
           f"{'numpy s':>8} | {'cdist/jax':>9} | {'ripser(Y) s':>11} {'jax+ripser s':>12} | "
           f"{'peak MiB ripser(Y)':>18} {'jax+ripser':>10} {'cdist':>6} {'jax':>6}")
    print(hdr)
    print("-" * len(hdr))
    for n in args.n:
        r = {v: run_child(v, n, args.p, args.block)
             for v in ("jax", "cdist", "numpy", "ripser", "jax+ripser")}
        print(f"{n:>6} | {r['jax']['seconds']:>13.4f} {r['jax']['compile_s']:>9.2f} | "
              f"{r['cdist']['seconds']:>8.4f} {r['numpy']['seconds']:>8.4f} | "
              f"{r['cdist']['seconds'] / r['jax']['seconds']:>8.1f}x | "
              f"{r['ripser']['seconds']:>11.2f} {r['jax+ripser']['seconds']:>12.2f} | "
              f"{r['ripser']['peak_mib']:>18.0f} {r['jax+ripser']['peak_mib']:>10.0f} "
              f"{r['cdist']['peak_mib']:>6.0f} {r['jax']['peak_mib']:>6.0f}")


if __name__ == "__main__":
    main()
