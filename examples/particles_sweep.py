"""Sweep the transformer particle flow over beta with jaxsci.core.sweep and count atoms."""

import jax
import numpy as np

from jaxsci.core import product_grid, sweep
from jaxsci.core.sphere import sample_uniform
from jaxsci.dynamics import particles as pt

n, d = 64, 3
x0 = sample_uniform(jax.random.key(0), n, d)
perceptron = pt.random_perceptron(jax.random.key(1), d, width=8, scale=2.0)
grid = product_grid(beta=[1.0, 2.0, 4.0], with_mlp=[0.0, 1.0])


def final_atoms(p):
    per = pt.Perceptron(perceptron.w, perceptron.b, perceptron.c * p["with_mlp"],
                        perceptron.activation)
    flow = pt.make_flow(d, p["beta"], perceptron=per)
    traj = pt.solve(flow, x0, t1=20.0, dt=0.05, n_save=10)
    n_atoms, _ = pt.count_clusters(traj.final, tol=0.05)
    return n_atoms, traj.energy[-1] - traj.energy[0]


atoms, gain = sweep(final_atoms, {k: np.asarray(v, np.float32) for k, v in grid.items()})
for b, m, k, g in zip(grid["beta"], grid["with_mlp"], atoms, gain, strict=True):
    mlp = "yes" if m else "no "
    print(f"beta={b:.1f} perceptron={mlp} atoms={int(k)} energy gain={float(g):.3f}")
