"""Property cases for :mod:`jaxsci.recsys.ntssm` and :mod:`jaxsci.common.ranking` (see
``tests/properties.py``)."""

import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.common import ranking
from jaxsci.recsys import ntssm as N

USERS = np.array([0, 0, 1, 2, 2, 3])
ITEMS = np.array([0, 1, 1, 2, 0, 2])
GRAPH = N.bipartite_graph(USERS, ITEMS, 4, 3)


def _emb(n, d=3, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=(n, d)), float)


def _propagate_kwargs():
    return {"graph": GRAPH, "user_emb": _emb(4), "item_emb": _emb(3, seed=1), "n_layers": 2}


def _loss_kwargs():
    parts = [_emb(5, 4, seed=s) for s in range(4)]
    return {"user_even": parts[0], "user_odd": parts[1], "item_even": parts[2],
            "item_odd": parts[3], "weights": N.TypeWeights.paper(), "tau": jnp.asarray(0.2)}


def _weights_batch(w):
    return N.TypeWeights.stack([w, w.mirrored(), N.TypeWeights.ones()])


CASES = [
    Case("ntssm.propagate", N.propagate, _propagate_kwargs,
         out=lambda p: (p.user_even, p.user_odd, p.item_even, p.item_odd),
         vmap=("user_emb", "item_emb"), grad=("user_emb", "item_emb"),
         bad=(Bad({"item_emb": _emb(2)}, ValueError, "item_emb must have shape"),
              Bad({"n_layers": 0}, ValueError, "n_layers must be >= 1"))),
    Case("ntssm.nt_ssm_loss", N.nt_ssm_loss, _loss_kwargs,
         vmap=("weights", "user_even", "tau"), batch={"weights": _weights_batch},
         grad=("user_even", "item_odd", "tau"),
         bad=(Bad({"tau": jnp.asarray(-1.0)}, Exception, "tau must be > 0", jit=True),
              Bad({"item_odd": _emb(4, 4)}, ValueError, "item_odd must have the shape"))),
    Case("ntssm.ssm_loss", N.ssm_loss,
         lambda: {"user_vec": _emb(5, 4), "item_vec": _emb(5, 4, seed=2),
                  "tau": jnp.asarray(0.2)},
         vmap=("user_vec", "tau"), grad=("user_vec", "item_vec", "tau"),
         bad=(Bad({"directions": "items"}, ValueError, "directions must be one of"),)),
    Case("ntssm.evaluate_embeddings", ranking.evaluate_embeddings,
         lambda: {"user_emb": _emb(4), "item_emb": _emb(3, seed=1),
                  "history": jnp.asarray([[0], [1], [-1], [2]]),
                  "targets": jnp.asarray([[1], [0], [2], [-1]]), "ks": (1, 2)},
         vmap=("user_emb",),
         bad=(Bad({"targets": jnp.asarray([[3], [0], [2], [-1]])}, ValueError,
                  r"targets holds item ids in \[0, n_items\)"),)),
]
