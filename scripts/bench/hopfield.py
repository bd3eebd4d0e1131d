"""Metropolis steps per second: jaxsci's sampler vs a plain NumPy one (same algorithm).

The peer is what a researcher writes without us: the same Metropolis sampler on
the sphere, vectorised over chains in NumPy (one BLAS matrix product for all
chains' overlaps per step, then the kernel, the acceptance test and the
renormalisation). Same N, M, chains, kernel and step size; both after warm-up.
jaxsci's compile time is reported separately. NumPy is timed with its default
BLAS threads and pinned to one thread (threadpoolctl); the table reports its
best.

    python scripts/bench/hopfield.py            # or: jaxsci bench hopfield
"""

from __future__ import annotations

import math
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import hopfield as hf

STEPS = 400
CHAINS = 64
CASES = [  # (kernel, N, alpha)
    ("lse", 20, 0.3),
    ("lse", 20, 0.55),
    ("lsr", 20, 0.3),
    ("lsr", 20, 0.55),
]


def numpy_metropolis(rng, patterns, x, temperature, kernel, steps, step_size, b=hf.B_DEFAULT):
    m, n = patterns.shape
    radius = math.sqrt(n)

    def energy(xs):
        phi = xs @ patterns.T / n  # (C, M)
        if kernel == "lse":
            z = -n * (1.0 - phi)
            zmax = z.max(axis=1, keepdims=True)
            return -(zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1)))
        s = np.maximum(0.0, 1.0 - b * (1.0 - phi)).sum(axis=1)
        with np.errstate(divide="ignore"):
            return np.where(s > 0, -(n / b) * np.log(s), np.inf)

    e = energy(x)
    accepted = 0
    for _ in range(steps):
        prop = x + step_size * rng.standard_normal(x.shape).astype(x.dtype)
        prop *= radius / np.linalg.norm(prop, axis=1, keepdims=True)
        e_new = energy(prop)
        with np.errstate(invalid="ignore", over="ignore"):
            acc = np.log(rng.random(len(x))) < -(e_new - e) / temperature
        x = np.where(acc[:, None], prop, x)
        e = np.where(acc, e_new, e)
        accepted += acc.sum()
    return x, accepted / (steps * len(x))


def bench_case(kernel, n, alpha):
    m = hf.num_patterns(alpha, n)
    patterns = hf.sample_patterns(jax.random.key(0), n, m)
    temps = jnp.full((CHAINS,), 0.3, jnp.float32)
    targets = jnp.arange(CHAINS) % m
    keys = jax.random.split(jax.random.key(1), CHAINS)

    kern = {"lse": hf.LSE(), "lsr": hf.LSR()}[kernel]
    config = hf.MetropolisConfig(n_equil=0, n_sample=STEPS, step_size=0.05)
    fn = jax.jit(jax.vmap(lambda k, t, T: hf.metropolis(k, patterns, t, T, kern, config)))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(keys, targets, temps))
    first = time.perf_counter() - t0
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(keys, targets, temps))
        runs.append(time.perf_counter() - t0)
    t_jax = min(runs)
    compile_s = max(first - t_jax, 0.0)

    pats_np = np.asarray(patterns)
    x0 = pats_np[np.asarray(targets)] + 0.05 * np.random.default_rng(0).standard_normal(
        (CHAINS, n)).astype(np.float32)
    x0 *= math.sqrt(n) / np.linalg.norm(x0, axis=1, keepdims=True)

    def time_numpy():
        numpy_metropolis(np.random.default_rng(2), pats_np, x0, 0.3, kernel, 5, 0.05)  # warm-up
        best = math.inf
        for _ in range(2):
            t0 = time.perf_counter()
            numpy_metropolis(np.random.default_rng(2), pats_np, x0, 0.3, kernel, STEPS, 0.05)
            best = min(best, time.perf_counter() - t0)
        return best

    t_np_default = time_numpy()
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            t_np_one = time_numpy()
    except ImportError:  # bench extra not installed
        t_np_one = math.inf
    t_np = min(t_np_default, t_np_one)
    chain_steps = STEPS * CHAINS
    return {
        "kernel": kernel, "N": n, "M": m,
        "jax_steps_per_s": chain_steps / t_jax,
        "numpy_steps_per_s": chain_steps / t_np,
        "numpy_threads": "1" if t_np_one < t_np_default else "default",
        "ratio": t_np / t_jax,
        "compile_s": compile_s,
    }


def main():
    print(f"# hopfield Metropolis: {CHAINS} chains x {STEPS} steps, T = 0.3")
    print(f"# machine: {platform.machine()}, {jax.devices()[0].platform}, "
          f"jax {jax.__version__}, numpy {np.__version__}")
    print("| kernel | N | M | jaxsci chain-steps/s | NumPy chain-steps/s (threads) "
          "| speed-up | jaxsci compile (s) |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        r = bench_case(*case)
        print(f"| {r['kernel']} | {r['N']} | {r['M']} | {r['jax_steps_per_s']:.3g} | "
              f"{r['numpy_steps_per_s']:.3g} ({r['numpy_threads']}) | {r['ratio']:.1f}x | "
              f"{r['compile_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
