"""Benchmark: FFCC bit-trick activations vs the exact ``jax.nn`` activations (jitted).

The peer is what a user would otherwise call: ``jax.nn.silu``, ``jax.nn.sigmoid``,
``jax.nn.gelu(approximate=True)``, ``jax.nn.softplus``, ``jnp.exp``, compiled by XLA (whose
CPU ``exp`` is already a vectorised polynomial). Both run on the same ``--size`` float32
inputs uniform on ``[-6, 6]``, after a warm-up call (compile time reported apart); the
time is the median of ``--repeats`` calls. The approximations run with the untuned
closed-form constants, without the finiteness check (``check=False``), with 0 and 1
Newton steps after the reciprocal. The ratio is exact time / approximation time
(above 1: the approximation is faster).

At 10^7 floats one activation per element is memory-bound on a CPU (the script prints
the time of ``x + 1`` on the same array as the floor), so a second table evaluates
``--fused`` activations per element read (``sum_k f(x - 0.01 k)``, fused by XLA into one
loop): the compute-bound case, closer to an activation inside a larger fused kernel.

    python scripts/bench/ffcc.py [--size 10000000] [--repeats 7] [--fused 16]
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.numerics import ffcc

EXACT = {"exp": jnp.exp, "sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu,
         "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "softplus": jax.nn.softplus}


def timed(fn, x, repeats):
    f = eqx.filter_jit(fn)
    t0 = time.perf_counter()
    jax.block_until_ready(f(x))
    first = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        ts.append(time.perf_counter() - t0)
    t = float(np.median(ts))
    return t, max(first - t, 0.0)


def _fused(f, k):
    if k == 1:
        return f
    return lambda v: sum(f(v - 0.01 * i) for i in range(k))


def table(x, repeats, fused):
    print(f"\n{fused} activation(s) per element read")
    hdr = (f"{'activation':>10} | {'exact ms':>9} | {'ffcc ms (N=0)':>13} | {'ratio':>6} | "
           f"{'ffcc ms (N=1)':>13} | {'ratio':>6} | {'compile s exact/ffcc':>20}")
    print(hdr)
    print("-" * len(hdr))
    for name, exact in EXACT.items():
        t_e, c_e = timed(_fused(exact, fused), x, repeats)
        row = [f"{name:>10} | {1e3 * t_e:>9.1f}"]
        c_a = 0.0
        for newton in (0, 1):
            approx = ffcc.approximation(ffcc.ACTIVATIONS[name],
                                        ffcc.FloatTrick.standard(newton), check=False)
            t_a, c_a = timed(_fused(approx, fused), x, repeats)
            row.append(f"{1e3 * t_a:>13.1f} | {t_e / t_a:>6.2f}")
        print(" | ".join(row) + f" | {c_e:>9.2f} / {c_a:>8.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--fused", type=int, default=16)
    args = ap.parse_args()
    x = jax.random.uniform(jax.random.key(0), (args.size,), minval=-6.0, maxval=6.0)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {args.size} float32, "
          f"median of {args.repeats}")
    for fused in (1, args.fused):
        table(x, args.repeats, fused)
    t_c, _ = timed(lambda v: v + 1.0, x, args.repeats)
    print(f"(memory floor: x + 1 on the same array takes {1e3 * t_c:.1f} ms)")


if __name__ == "__main__":
    main()
