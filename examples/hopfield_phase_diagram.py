"""Sweep the Dense Associative Memory sampler over temperatures and compare with theory.

    python examples/hopfield_phase_diagram.py
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import product_grid, sweep
from jaxsci.dynamics import hopfield as hf

N, alpha = 20, 0.3
patterns = hf.sample_patterns(jax.random.key(0), N, hf.num_patterns(alpha, N))  # M = e^(alpha N)
temps = np.array([0.1, 0.3, 0.6, 1.2])
grid = product_grid(T=temps, target=np.arange(8))  # 8 chains per T, each with its own target
grid["key"] = jax.random.split(jax.random.key(1), len(grid["T"]))


def chain(p, kernel):
    return hf.metropolis(p["key"], patterns, p["target"], p["T"], kernel, n_equil=800, n_sample=400)


for kernel in ("lse", "lsr"):
    res = sweep(lambda p, k=kernel: chain(p, k), grid)  # vmapped, sharded over all devices
    mc = np.asarray(res.alignment).reshape(len(temps), -1).mean(1)
    theory = np.asarray(hf.retrieval_boundary(jnp.asarray(temps), kernel, "exact"))
    for t, a, b in zip(temps, mc, theory, strict=True):
        verdict = "retrieval" if alpha < b else "no retrieval"
        print(f"{kernel} T={t:.1f}: MC alignment {a:+.2f}; theory (exact density): {verdict}")
