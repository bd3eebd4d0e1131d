"""Property cases for :mod:`jaxsci.agents.tampo` (``tests/properties.py``).

The pessimistic reward is traced in every argument, vmappable over the preference and the
predictions and differentiable in them; the ensemble's prediction is differentiable in
its input; the ensemble fit and random search are deterministic in their key."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.agents import tampo as TM


def _reward():
    return {"mu": jnp.asarray([0.8, 0.75, 0.6], float), "sigma": jnp.asarray([0.2, 0.01, 0.05],
                                                                           float),
            "cost": jnp.asarray([0.9, 0.5, 0.1], float), "w": jnp.asarray([0.7, 0.3], float),
            "beta": jnp.asarray(1.0, float)}


_X = np.linspace(-1, 1, 12)[:, None].astype(np.float32)
_Y = (0.5 + 0.3 * np.sin(2 * _X[:, 0])).astype(np.float32)
_CFG = TM.RewardConfig(members=3, width=8, steps=20)


def _ens():
    return TM.fit_ensemble(jax.random.key(0), _X, _Y, np.ones(12), _CFG)


def _predict(ens, x):
    return ens(x)


def _searches(key, dev_quality, cost, w, n):
    """Random search under eight keys split from ``key`` (one draw may repeat by chance)."""
    return jax.vmap(lambda k: TM.random_search(k, dev_quality, cost, w, n))(
        jax.random.split(key, 8))


CASES = [
    Case("tampo.pessimistic_reward", TM.pessimistic_reward, _reward,
         vmap=("w", "mu", "beta"),
         batch={"w": lambda w: jnp.stack([w, w[::-1], jnp.asarray([1.0, 0.0], w.dtype)])},
         grad=("mu", "sigma", "cost", "w", "beta"),
         bad=(Bad({"w": jnp.ones(3)}, ValueError, "w must have shape"),
              Bad({"beta": jnp.ones(2)}, ValueError, "beta must be a scalar"),
              Bad({"beta": jnp.asarray(-1.0)}, Exception, "beta must be >= 0", jit=True),
              Bad({"sigma": jnp.asarray([0.1, -0.1, 0.0])}, Exception,
                  "sigma must be non-negative", jit=True))),
    Case("tampo.ensemble_predict", _predict,
         lambda: {"ens": _ens(), "x": jnp.asarray([[0.3], [2.0]], float)},
         out=lambda r: jnp.stack(r), vmap=("x",), grad=("x",),
         bad=(Bad({"x": jnp.zeros((2, 3))}, ValueError, "x must have 1 features"),)),
    Case("tampo.fit_ensemble", TM.fit_ensemble,
         lambda: {"key": jax.random.key(2), "x": jnp.asarray(_X), "y": jnp.asarray(_Y),
                  "weight": jnp.ones(12), "config": _CFG},
         out=lambda e: e.w3, key="key",
         bad=(Bad({"weight": jnp.zeros(12)}, Exception, "weight must be non-negative",
                  jit=True),
              Bad({"y": jnp.zeros(5)}, ValueError, "x must have shape"))),
    Case("tampo.random_search", _searches,
         lambda: {"key": jax.random.key(3), "dev_quality": jnp.asarray([0.2, 0.9, 0.5, 0.7]),
                  "cost": jnp.asarray([0.1, 0.9, 0.3, 0.5]), "w": jnp.asarray([0.8, 0.2]),
                  "n": 2},
         key="key", vmap=("w",),
         bad=(Bad({"n": 0}, ValueError, "n must be >= 1"),
              Bad({"dev_quality": jnp.zeros((2, 4))}, ValueError,
                  "dev_quality must have shape"))),
]
