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


config = hf.MetropolisConfig(n_equil=800, n_sample=400)
kernels = {"lse": hf.LSE(), "lsr": hf.LSR()}  # kernels are values: LSE(beta), LSR(b)
chains = {  # one function per kernel, defined once: sweep caches its compiled program
    name: (lambda p, k=k: hf.metropolis(p["key"], patterns, p["target"], p["T"], k, config))
    for name, k in kernels.items()
}

for name, kernel in kernels.items():
    res = sweep(chains[name], grid)  # vmapped, sharded over all devices
    mc = np.asarray(res.alignment).reshape(len(temps), -1).mean(1)
    theory = np.asarray(hf.retrieval_boundary(jnp.asarray(temps), kernel, "exact"))
    for t, a, b in zip(temps, mc, theory, strict=True):
        verdict = "retrieval" if alpha < b else "no retrieval"
        print(f"{name} T={t:.1f}: MC alignment {a:+.2f}; theory (exact density): {verdict}")

# Annealing: init/step with the temperature given per step (hot to cold), one chain.
schedule = jnp.geomspace(1.5, 0.05, 600)
kernel = kernels["lsr"]
state = hf.init(jax.random.key(2), patterns, 0, kernel, config)


def anneal(state, kt):
    k, t = kt
    state, info = hf.step(k, state, patterns, t, kernel)
    return state, info.is_accepted


state, accepted = jax.lax.scan(
    anneal, state, (jax.random.split(jax.random.key(3), len(schedule)), schedule))
overlap = float(state.position @ patterns[0] / N)
print(f"lsr annealed 1.5 -> 0.05: overlap with the target {overlap:+.2f}, "
      f"acceptance {float(accepted.mean()):.2f}")
