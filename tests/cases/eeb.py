"""Property cases for :mod:`jaxsci.generative.eeb` (see ``tests/properties.py``).

``uce_edit`` differentiates and vmaps in the weights, erased vectors and ``lam``;
``esd_target`` in its predictions and ``eta``; ``survival`` in the vector; ``sample`` vmaps
over its key and ``backdoor_text`` over the concept's token id.
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import digits_text as dt
from jaxsci.generative import eeb as E

CFG = E.EEBConfig(embed_dim=4, text_hidden=4, hidden=6, attn_dim=4, time_dim=4, depth=1,
                  timesteps=3, steps=2, batch_size=8, ft_steps=2, ft_batch=4, adv_steps=2)


def _uce_kwargs():
    rng = np.random.default_rng(0)
    return {"w": jnp.asarray(rng.standard_normal((3, 5)), float),
            "erase": jnp.asarray(rng.standard_normal((2, 5)), float),
            "targets": jnp.asarray(rng.standard_normal((2, 3)), float),
            "preserve": jnp.asarray(rng.standard_normal((2, 5)), float),
            "lam": jnp.asarray(0.5, float)}


def _esd_kwargs():
    rng = np.random.default_rng(1)
    return {"eps_c": jnp.asarray(rng.standard_normal((4, 3)), float),
            "eps_null": jnp.asarray(rng.standard_normal((4, 3)), float),
            "eta": jnp.asarray(1.5, float)}


def _survival_kwargs():
    rng = np.random.default_rng(2)
    return {"c": jnp.asarray(rng.standard_normal(5), float),
            "span": jnp.asarray(rng.standard_normal((2, 5)), float)}


def _sample_kwargs():
    return {"params": E.init(jax.random.key(0), CFG),
            "tokens": jnp.stack([dt.prompt("a digit zero"), dt.prompt("zq")]),
            "key": jax.random.key(1), "cfg": CFG}


def _text_kwargs():
    return {"params": E.init(jax.random.key(0), CFG), "concept": dt.token("zero"),
            "trigger": dt.token("zq"), "cfg": CFG}


CASES = [
    Case("eeb.uce_edit", E.uce_edit, _uce_kwargs, vmap=("w", "erase", "lam"),
         grad=("w", "erase", "lam"), rtol=1e-4, atol=1e-5,
         batch={"lam": lambda v: jnp.stack([v, 2 * v, 0.1 + 0 * v])},
         bad=(Bad({"erase": jnp.ones((2, 4))}, ValueError, "erase must have shape"),
              Bad({"lam": 0.0}, ValueError, "lam must be > 0"),
              Bad({"lam": jnp.asarray(-1.0)}, Exception, "lam must be > 0", jit=True))),
    Case("eeb.esd_target", E.esd_target, _esd_kwargs, vmap=("eps_c", "eta"),
         grad=("eps_c", "eps_null", "eta"),
         batch={"eta": lambda v: jnp.stack([v, 0.5 * v, 2 + 0 * v])},
         bad=(Bad({"eta": 5.0}, ValueError, "eta must be <= 4"),
              Bad({"eta": jnp.asarray(-1.0)}, Exception, "eta must lie in", jit=True))),
    Case("eeb.survival", E.survival, _survival_kwargs, vmap=("c",), grad=("c",),
         bad=(Bad({"span": jnp.ones((2, 4))}, ValueError, "span must have shape"),)),
    Case("eeb.sample", E.sample, _sample_kwargs, vmap=("key",), key="key", rtol=1e-4,
         atol=1e-5, bad=(Bad({"tokens": jnp.zeros((2, 2), jnp.int32)}, ValueError,
                             "tokens must have shape"),)),
    Case("eeb.backdoor_text", E.backdoor_text, _text_kwargs, vmap=("concept",),
         batch={"concept": lambda v: jnp.stack([v, v + 1, v + 2])}, rtol=1e-4, atol=1e-5,
         bad=(Bad({"concept": "dog"}, ValueError, "unknown token 'dog'"),
              Bad({"trigger": 40}, ValueError, "trigger must be a token id"),
              Bad({"concept": jnp.asarray(-3)}, Exception, "concept must be a token id",
                  jit=True))),
]
