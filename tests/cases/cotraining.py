"""Property cases for :mod:`jaxsci.generative.cotraining` (see ``tests/properties.py``).

``reweighting`` and ``optimal_denoiser`` vmap over the noised action and the time and
differentiate in both and in the log weights; ``mixture_log_weights`` vmaps and
differentiates in ``w``; ``sinkhorn_cost`` in both clouds and ``epsilon``;
``sim_real_toy`` vmaps over its key and gaps.
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import cotraining as toy
from jaxsci.generative import cotraining as C


def _denoise_kwargs():
    rng = np.random.default_rng(0)
    data = jnp.asarray(rng.standard_normal((5, 2)), float)
    return {"x": jnp.asarray([0.3, -0.2], float), "t": jnp.asarray(0.4, float),
            "data": data, "log_weights": C.mixture_log_weights(0.3, 2, 3)}


def _sinkhorn_kwargs():
    rng = np.random.default_rng(1)
    return {"a": jnp.asarray(rng.standard_normal((6, 2)), float),
            "b": jnp.asarray(rng.standard_normal((5, 2)) + 1.0, float),
            "epsilon": jnp.asarray(0.5, float), "iters": 20}


_BAD_DENOISE = (
    Bad({"t": jnp.asarray(1.0)}, ValueError, "t must be < 1"),
    Bad({"t": jnp.asarray(1.5)}, Exception, "t must lie in \\[0, 1\\)", jit=True),
    Bad({"x": jnp.zeros(3)}, ValueError, "x must have shape"),
    Bad({"log_weights": jnp.zeros(4)}, ValueError, "log_weights must have shape"),
)

CASES = [
    # The weights sum to 1: the gradient check reads a weighted sum instead.
    Case("cotraining.reweighting", C.reweighting, _denoise_kwargs, vmap=("x", "t"),
         loss=lambda g: jnp.sum(g * jnp.arange(1.0, g.shape[-1] + 1.0)),
         grad=("x", "t", "log_weights"), bad=_BAD_DENOISE),
    Case("cotraining.optimal_denoiser", C.optimal_denoiser, _denoise_kwargs,
         vmap=("x", "t"), grad=("x", "t", "data"), bad=_BAD_DENOISE),
    Case("cotraining.mixture_log_weights", C.mixture_log_weights,
         lambda: {"w": jnp.asarray(0.3, float), "n_real": 2, "n_sim": 3},
         vmap=("w",), grad=("w",),
         batch={"w": lambda w: jnp.stack([w, 0.5 * w, 0.9 + 0 * w])},
         bad=(Bad({"w": 1.5}, ValueError, "w must be <= 1"),
              Bad({"w": jnp.asarray(-0.5)}, Exception, "w must lie in \\[0, 1\\]", jit=True),
              Bad({"w": jnp.ones(2)}, ValueError, "w must be a scalar"))),
    Case("cotraining.sinkhorn_cost", C.sinkhorn_cost, _sinkhorn_kwargs,
         vmap=("a", "b", "epsilon"), grad=("a", "b", "epsilon"), rtol=1e-4, atol=1e-5,
         bad=(Bad({"b": jnp.zeros((4, 3))}, ValueError, "b must have shape"),
              Bad({"epsilon": 0.0}, ValueError, "epsilon must be > 0"))),
    Case("cotraining.sim_real_toy", toy.sim_real_toy,
         lambda: {"key": jax.random.key(0), "n_real": 4, "n_sim": 6, "n_test": 4,
                  "regime": "aligned", "physics_gap": jnp.asarray(0.5, float)},
         vmap=("key", "physics_gap"), key="key",
         bad=(Bad({"regime": "mixed"}, ValueError, "regime must be one of"),
              Bad({"support_edge": 1.0}, ValueError, "support_edge must be < 1"))),
]
