"""Property cases for :mod:`jaxsci.stats.lagrangian` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
from properties import Bad, Case

from jaxsci.stats import lagrangian as L

# A fixed 2-row, 4-variable instance (x = 1 covers every row), built from Python floats
# so the gradient checks see float64 under x64.
C = [1.0, 0.8, 1.3, 0.6]
A = [[1.0, 0.5, 0.0, 0.7], [0.2, 1.0, 0.9, 0.0]]
B = [1.1, 0.9]


def _instance():
    return L.BoxMILP(jnp.asarray(C), jnp.asarray(A), jnp.asarray(B))


def _dist():
    inst = L.BoxMILP(jnp.asarray([C, [0.9, 1.0, 1.1, 0.8]]), jnp.asarray([A, A]),
                     jnp.asarray([B, [0.8, 1.2]]))
    return L.Scenarios(inst, jnp.asarray([0.5, 0.5]))


def _instance_batch(inst):
    return L.BoxMILP(jnp.stack([inst.c, inst.c * 0.9, inst.c * 1.1]),
                     jnp.stack([inst.A] * 3), jnp.stack([inst.b, inst.b * 0.8, inst.b]))


CASES = [
    Case("lagrangian.dual", L.dual,
         # pi away from the kinks c_j = a_j^T pi, so finite differences see one piece.
         lambda: {"pi": jnp.asarray([0.37, 0.51]), "instance": _instance()},
         vmap=("pi", "instance"), batch={"instance": _instance_batch}, grad=("pi", "instance"),
         bad=(Bad({"pi": jnp.ones(3)}, ValueError, r"pi must have shape \(\.\.\., 2\)"),
              Bad({"pi": jnp.asarray([-0.1, 0.2])}, ValueError, "pi must be >= 0"))),
    Case("lagrangian.learn_sga", L.learn_sga,
         lambda: {"distribution": _dist(), "key": jax.random.key(0), "n_samples": 12,
                  "radius": jnp.asarray(3.0), "max_samples": 16},
         out=lambda r: (r.multipliers, r.values),
         vmap=("n_samples", "key"), batch={"n_samples": lambda n: jnp.asarray([6, 12, 16])},
         key="key",
         bad=(Bad({"radius": -1.0}, ValueError, "radius must be > 0"),
              Bad({"radius": jnp.asarray(-1.0)}, Exception, "radius must be > 0", jit=True),
              Bad({"n_samples": 20}, ValueError, "n_samples must be <= 16"))),
    Case("lagrangian.subgradient", L.subgradient,
         lambda: {"instance": _instance(), "pi0": jnp.asarray([0.1, 0.2]), "n_steps": 20,
                  "scale": jnp.asarray(0.5)},
         out=lambda r: (r.multipliers, r.best_values),
         vmap=("pi0",),
         bad=(Bad({"n_steps": 0}, ValueError, "n_steps must be >= 1"),
              Bad({"pi0": jnp.zeros(3)}, ValueError, r"pi0 must have shape"),
              Bad({"scale": jnp.asarray(-1.0)}, Exception, "scale must be > 0", jit=True))),
    Case("lagrangian.fit_warm_start", L.fit_warm_start,
         lambda: {"targets": jnp.asarray([[0.5, 1.0], [0.7, 0.2], [0.1, 0.4]]),
                  "features": jnp.asarray([[1.0], [2.0], [0.5]]), "ridge": jnp.asarray(0.1)},
         out=lambda w: (w.weights, w.bias),
         vmap=("targets",), grad=("targets",),
         bad=(Bad({"ridge": -1.0}, ValueError, "ridge must be >= 0"),
              Bad({"features": jnp.ones((2, 1))}, ValueError, "features must have 3 rows"))),
    Case("lagrangian.random_scenarios", L.random_scenarios,
         lambda: {"key": jax.random.key(0), "n_scenarios": 3, "n_vars": 4, "n_coupling": 2,
                  "spread": jnp.asarray(0.4), "active": 1},
         out=lambda d: (d.instances.c, d.instances.A, d.instances.b),
         vmap=("key",), key="key",
         bad=(Bad({"spread": 1.5}, ValueError, "spread must be < 1"),
              Bad({"active": 3}, ValueError, "active must be <= 2"))),
]
