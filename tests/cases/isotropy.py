"""Property cases for :mod:`jaxsci.llm.isotropy` (see ``tests/properties.py``)."""

import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.llm import isotropy as I


def _emb(n=5, d=7, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((n, d)), float)


def _bags():
    return jnp.asarray((np.random.default_rng(1).random((5, 9)) < 0.5), float)


def _mask_batch(m):
    return jnp.stack([m, m.at[4].set(False), m.at[3:].set(False)])


MASK = jnp.ones(5, bool)

CASES = [
    Case("isotropy.semantic_isotropy", I.semantic_isotropy,
         lambda: {"embeddings": _emb(), "mask": MASK, "jitter": jnp.asarray(1e-3, float)},
         vmap=("embeddings", "mask", "jitter"), batch={"mask": _mask_batch},
         grad=("embeddings", "jitter"), fd_rtol=1e-3,
         bad=(Bad({"embeddings": jnp.ones((1, 4))}, ValueError, "at least 2 responses"),
              Bad({"mask": jnp.ones(4, bool)}, ValueError, "mask must have shape"),
              Bad({"jitter": -1.0}, ValueError, "jitter must be >= 0"))),
    Case("isotropy.eigenscore", I.eigenscore,
         lambda: {"hidden": _emb(5, 11, 2), "mask": MASK, "alpha": jnp.asarray(1e-2, float)},
         vmap=("hidden", "mask", "alpha"), batch={"mask": _mask_batch},
         grad=("hidden", "alpha"), fd_rtol=1e-3,
         bad=(Bad({"alpha": 0.0}, ValueError, "alpha must be > 0"),
              Bad({"hidden": jnp.ones((5,))}, ValueError, "hidden must have 2 dimensions"))),
    Case("isotropy.cosine_dispersion", I.cosine_dispersion,
         lambda: {"embeddings": _emb(), "mask": MASK},
         vmap=("embeddings", "mask"), batch={"mask": _mask_batch}, grad=("embeddings",),
         bad=(Bad({"mask": jnp.ones(5)}, TypeError, "mask must have a bool dtype"),)),
    Case("isotropy.trust_signals", I.trust_signals,
         lambda: {"embeddings": _emb(), "hidden": _emb(5, 11, 2), "bags": _bags(),
                  "nll": jnp.asarray([1.0, 2.0, 1.5, 0.5, 3.0], float), "mask": MASK},
         out=lambda s: tuple(s), vmap=("embeddings", "nll", "mask"),
         batch={"mask": _mask_batch}, grad=("embeddings", "nll"), fd_rtol=1e-3,
         bad=(Bad({"bags": jnp.ones((4, 9))}, ValueError, "bags must have one row per"),
              Bad({"nll": jnp.ones(4)}, ValueError, "nll must have shape"))),
]
