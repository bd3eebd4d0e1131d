"""Property cases for :mod:`jaxsci.agents.goals` and its grid worlds (``tests/properties.py``).

The grid-world functions are integer-valued (no gradients); the probe is trained by a
scanned optax loop, checked for jit, vmap over its features and determinism."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.agents import goals as G
from jaxsci.data import gridworld as gw

_GRID = gw.parse("A . # .\n. # . .\n. . . G\n# . . .")


def _grids(g):
    return gw.Grid(jnp.stack([g.cells, gw.transform(g, 1).cells, gw.transform(g, 4).cells]),
                   jnp.stack([g.agent, gw.transform(g, 1).agent, gw.transform(g, 4).agent]))


def _probe_data():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((24, 5)), float)
    y = jnp.asarray((np.asarray(x)[:, 0] > 0).astype(np.int32))
    return {"key": jax.random.key(0), "x": x, "y": y, "n_classes": 2,
            "config": G.ProbeConfig(steps=20)}


CASES = [
    Case("goals.generate", gw.generate,
         lambda: {"key": jax.random.key(1), "size": 6, "density": jnp.asarray(0.2, float),
                  "kind": "decoy"},
         vmap=("density",), batch={"density": lambda d: jnp.stack([d, 0.0 * d, d + 0.2])},
         key="key",
         bad=(Bad({"density": 1.5}, ValueError, "density must be a scalar in"),
              Bad({"kind": "three"}, ValueError, "kind"),
              Bad({"size": 2}, ValueError, "size"))),
    Case("goals.distances", gw.distances, lambda: {"grid": _GRID},
         vmap=("grid",), batch={"grid": _grids}),
    Case("goals.optimal_actions", gw.optimal_actions, lambda: {"grid": _GRID},
         vmap=("grid",), batch={"grid": _grids}),
    Case("goals.fit_probe", G.fit_probe, _probe_data, out=lambda p: p["params"],
         vmap=("x",), batch={"x": lambda x: jnp.stack([x, -x, 2 * x])}, key="key",
         bad=(Bad({"n_classes": 1}, ValueError, "n_classes"),
              Bad({"y": jnp.full(24, 3)}, ValueError, "labels in"))),
]
