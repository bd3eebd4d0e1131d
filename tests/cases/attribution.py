"""Property cases for :mod:`jaxsci.llm.attribution` (see ``tests/properties.py``)."""

import jax.numpy as jnp
import numpy as np
import optax
from properties import Bad, Case

from jaxsci.llm import attribution as A

OPT = optax.chain(optax.add_decayed_weights(0.05),
                  optax.sgd(optax.linear_schedule(0.3, 0.1, 6), momentum=0.6))
ADAM = optax.adam(0.05, eps_root=1e-16)


def _loss(p, x):
    return jnp.sum(jnp.tanh(p * x) ** 2) + 0.1 * jnp.sum((p - x) ** 2)


def _behaviour(p):
    return jnp.sum(jnp.sin(p))


def _batches(seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((6, 2, 3)), float)


STAGES = jnp.asarray([0, 0, 1, 1, 2, 2])


def _params():
    return jnp.asarray([0.5, -0.3, 0.2], float)


def _weights_batch(w):
    return jnp.stack([w, w.at[2:4].set(0.0), w * 0.5])


def _params_batch(p):
    return jnp.stack([p, p + 0.1, -p])


CASES = [
    Case("attribution.replay", A.replay,
         lambda: {"loss": _loss, "optimizer": OPT, "params": _params(),
                  "batches": _batches(), "weights": jnp.ones(6, float)},
         out=lambda r: (r.params, r.losses), vmap=("weights", "params"),
         batch={"weights": _weights_batch, "params": _params_batch},
         grad=("params", "weights", "batches"),
         bad=(Bad({"weights": jnp.ones(5)}, ValueError, "weights must have shape"),
              Bad({"optimizer": "sgd"}, TypeError, "optimizer must be an optax"),
              Bad({"batches": jnp.ones((6,))}, ValueError, "batches must be a pytree"))),
    Case("attribution.stage_effects[tangent]", A.stage_effects,
         lambda: {"loss": _loss, "optimizer": OPT, "params": _params(),
                  "batches": _batches(), "stages": STAGES, "n_stages": 3,
                  "mode": "tangent"},
         vmap=("params",), batch={"params": _params_batch}, grad=("params", "batches"),
         fd_rtol=1e-3,
         bad=(Bad({"stages": jnp.asarray([0, 0, 1, 1, 2, 3])}, ValueError,
                  r"stages must lie in \[0, n_stages=3\)"),
              Bad({"stages": jnp.asarray([0, 1, 0, 1, 2, 2])}, ValueError,
                  "stages must be non-decreasing"),
              Bad({"stages": jnp.zeros(6)}, TypeError, "stages must have a.* integer dtype"),
              Bad({"mode": "exact"}, ValueError, "mode must be one of"))),
    Case("attribution.stage_effects[optimizer-adam]", A.stage_effects,
         lambda: {"loss": _loss, "optimizer": ADAM, "params": _params(),
                  "batches": _batches(1), "stages": STAGES, "n_stages": 3,
                  "mode": "optimizer"},
         vmap=("params",), batch={"params": _params_batch}, grad=("params",),
         fd_rtol=1e-3,
         bad=(Bad({"n_stages": 0}, ValueError, "n_stages must be >= 1"),)),
    Case("attribution.retrain_effects", A.retrain_effects,
         lambda: {"loss": _loss, "optimizer": OPT, "params": _params(),
                  "batches": _batches(), "stages": STAGES, "n_stages": 3},
         vmap=("params",), batch={"params": _params_batch}, grad=("params", "batches"),
         bad=(Bad({"stages": jnp.asarray([0, 0, 1])}, ValueError, "stages must have shape"),
              Bad({"params": jnp.asarray([1, 2, 3])}, TypeError,
                  "params must be a non-empty pytree of floating"))),
    Case("attribution.tracin_scores", A.tracin_scores,
         lambda: {"loss": _loss, "behaviour": _behaviour, "optimizer": ADAM,
                  "params": _params(), "batches": _batches(2), "weights": jnp.ones(6, float)},
         vmap=("weights", "params"),
         batch={"weights": _weights_batch, "params": _params_batch},
         grad=("params", "weights"), fd_rtol=1e-3,
         bad=(Bad({"behaviour": 3.0}, TypeError, "behaviour must be callable"),)),
]
