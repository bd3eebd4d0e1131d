"""Property cases for :mod:`jaxsci.generative.augmask` and :mod:`jaxsci.data.tabular`
(see ``tests/properties.py``).

``loss`` differentiates in the rows and the denoiser's parameters and vmaps over its key
and rows; ``aux_draw`` vmaps over its key and rows; ``sample`` and ``missing_mask`` over
their keys (``missing_mask`` also over the rate).
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import tabular
from jaxsci.generative import augmask as A

LAYOUT = A.Layout((0, 0, 2))
CFG = A.AugMaskConfig(hidden=6, depth=1, time_dim=4, timesteps=4, aux_hidden=4)


def _rows():
    rng = np.random.default_rng(0)
    x = np.c_[rng.standard_normal((5, 2)), np.eye(2)[rng.integers(0, 2, 5)]]
    obs = (rng.uniform(size=(5, 3)) > 0.4).astype(float)
    return jnp.asarray(x, float), jnp.asarray(obs, float)


def _loss_kwargs():
    x, obs = _rows()
    return {"params": A.denoiser_init(jax.random.key(0), LAYOUT, CFG), "x0": x,
            "observed": obs, "a": A.arm("augmask"), "key": jax.random.key(1),
            "layout": LAYOUT, "alpha_bar": jnp.asarray(A.schedule(CFG)[1], float),
            "cfg": CFG}


def _draw_kwargs():
    x, obs = _rows()
    return {"params": A.aux_init(jax.random.key(2), LAYOUT, 4), "x": x, "observed": obs,
            "layout": LAYOUT, "key": jax.random.key(3)}


def _mask_kwargs():
    return {"key": jax.random.key(0), "x": tabular.planted_table(jax.random.key(1), 40),
            "mechanism": "mnar", "rate": jnp.asarray(0.3, float)}


CASES = [
    Case("augmask.loss", A.loss, _loss_kwargs, vmap=("key", "x0"), grad=("x0", "params"),
         key="key", rtol=1e-4, atol=1e-5),
    Case("augmask.aux_draw", A.aux_draw, _draw_kwargs, vmap=("key", "x"), key="key",
         bad=(Bad({"observed": jnp.ones((5, 2))}, ValueError, "observed must have shape"),
              Bad({"x": jnp.ones((5, 3))}, ValueError, "x must have shape"))),
    Case("augmask.sample", A.sample,
         lambda: {"params": A.denoiser_init(jax.random.key(0), LAYOUT, CFG), "n": 3,
                  "key": jax.random.key(4), "layout": LAYOUT, "cfg": CFG},
         vmap=("key",), key="key", rtol=1e-4, atol=1e-5,
         bad=(Bad({"n": 0}, ValueError, "n must be >= 1"),)),
    Case("augmask.missing_mask", tabular.missing_mask, _mask_kwargs, vmap=("key", "rate"),
         key="key",
         batch={"rate": lambda r: jnp.stack([r, 0.5 * r, 0.1 + 0 * r])},
         bad=(Bad({"mechanism": "nmar"}, ValueError, "mechanism must be one of"),
              Bad({"rate": 1.0}, ValueError, "rate must be < 1"),
              Bad({"rate": jnp.asarray(1.5)}, Exception, "rate must lie in \\[0, 1\\)",
                  jit=True),
              Bad({"x": jnp.ones(5)}, ValueError, "x must have 2 dimensions"))),
    Case("augmask.planted_table", tabular.planted_table,
         lambda: {"key": jax.random.key(0), "n": 6}, vmap=("key",), key="key",
         bad=(Bad({"n": 0}, ValueError, "n must be >= 1"),)),
]
