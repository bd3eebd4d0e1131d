"""Does the operand order of a per-sample matrix-vector product matter under ``vmap``?

``jaxsci.common.bounds`` got 1.3-1.9x faster IBP by writing its per-box products
box-first (``c W^T`` instead of ``W c``, ``scripts/bench/lyapunov.py``). This times the
bare product alone, vmapped over 1024 rows, in both forms (XLA defaults, one process):
if they time the same, the speed-up came from the surrounding program (result layout,
fusion with the elementwise work), not from the product itself.

    taskset -c 1 python scripts/diagnose/vmap_matvec.py
"""

from __future__ import annotations

import time

import jax
import numpy as np


def _ms(f, x, repeats=30):
    jax.block_until_ready(f(x))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main():
    print(f"{'n':>5} | {'W @ x (ms)':>10} | {'x @ W.T (ms)':>12}")
    for n in (32, 128, 256):
        W = jax.random.normal(jax.random.key(0), (n, n))
        X = jax.random.normal(jax.random.key(1), (1024, n))
        right = jax.jit(jax.vmap(lambda x, W=W: W @ x))
        left = jax.jit(jax.vmap(lambda x, W=W: x @ W.T))
        print(f"{n:>5} | {_ms(right, X):>10.3f} | {_ms(left, X):>12.3f}")


if __name__ == "__main__":
    main()
