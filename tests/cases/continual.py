"""Property cases for :mod:`jaxsci.llm.continual` (see ``tests/properties.py``)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.llm import continual as cl


def _vec(n, lo, hi, seed):
    return jnp.asarray(np.random.default_rng(seed).uniform(lo, hi, n), float)


def _model():
    m = cl.init(jax.random.key(0), n_experts=2, hidden=8, rank=3, text_dim=6)
    w = jax.random.normal(jax.random.key(1), m.router_w.shape)
    return eqx.tree_at(lambda t: t.router_w, m, w)


def _images(n=4, seed=2):
    return jnp.asarray(np.random.default_rng(seed).uniform(0, 1, (n, 64)), float)


CASES = [
    Case("continual.scr", cl.scr,
         lambda: {"retention": _vec(5, 0.2, 2.0, 0), "similarity": _vec(5, -0.5, 1.0, 1),
                  "temperature": jnp.asarray(0.3, float)},
         vmap=("retention", "similarity", "temperature"),
         grad=("retention", "similarity", "temperature"),
         bad=(Bad({"similarity": jnp.ones(4)}, ValueError, "similarity must have shape"),
              Bad({"temperature": -1.0}, ValueError, "temperature must be > 0"),
              Bad({"retention": jnp.ones((2, 5))}, ValueError,
                  "retention must have 1 dimensions"))),
    Case("continual.retention", cl.retention,
         lambda: {"acc_after": _vec(4, 0.0, 1.0, 2), "acc_before": _vec(4, 0.2, 1.0, 3),
                  "floor": jnp.asarray(0.1, float)},
         vmap=("acc_after", "acc_before"), grad=("acc_after", "acc_before"),
         bad=(Bad({"acc_before": jnp.asarray([0.5, 0.0, 0.2, 0.3]), "floor": 0.0},
                  Exception, "acc_before must be > 0", jit=True),
              Bad({"acc_before": jnp.ones(3)}, ValueError, "acc_before must have shape"))),
    Case("continual.domain_similarity", cl.domain_similarity,
         lambda: {"a": _images(5, 4)[:, :7] - 0.5, "b": _images(6, 5)[:, :7] - 0.5},
         vmap=("a", "b"), grad=("a", "b"), fd_rtol=1e-3,
         bad=(Bad({"b": jnp.ones((3, 4))}, ValueError, "b must have shape"),)),
    Case("continual.ema_update", cl.ema_update,
         lambda: {"ema": {"w": _vec(3, -1, 1, 6)}, "params": {"w": _vec(3, -1, 1, 7)},
                  "momentum": jnp.asarray(0.9, float)},
         vmap=("params", "momentum"), grad=("ema", "params", "momentum"),
         batch={"params": lambda p: {"w": jnp.stack([p["w"], 0.5 * p["w"], -p["w"]])}},
         bad=(Bad({"momentum": 2.0}, ValueError, "momentum must be <= 1"),
              Bad({"params": {"v": jnp.ones(3)}}, ValueError, "same tree structure"))),
    Case("continual.router_weights", cl.router_weights,
         lambda: {"model": _model(), "images": _images(),
                  "use_momentum": jnp.asarray(1.0, float)},
         vmap=("images", "use_momentum"), grad=("images", "model"), fd_rtol=1e-3,
         batch={"use_momentum": lambda u: jnp.stack([u, 0.0 * u, 0.5 * u])},
         loss=lambda w: jnp.sum(w[:, 0] ** 2),
         bad=(Bad({"images": jnp.ones(64)}, ValueError, "images must have 2 dimensions"),)),
    Case("continual.logits", cl.logits,
         lambda: {"model": _model(), "images": _images(), "text": _images(3, 8)[:, :6],
                  "method": cl.dfa_moe(), "scale": jnp.asarray(10.0, float)},
         vmap=("images", "scale"), grad=("images", "text", "scale"), fd_rtol=1e-3,
         bad=(Bad({"text": jnp.ones((3, 5))}, ValueError, "text must have 6 columns"),)),
]
