"""Property cases for :mod:`jaxsci.recsys.rsir` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
from flax import nnx
from properties import Bad, Case

from jaxsci.recsys import rsir as R

SEQS = jnp.asarray([[0, 1, 2, 3, -1], [4, 2, 5, -1, -1], [1, 3, 0, 2, 5]])
LENS = jnp.asarray([4, 3, 5])
SCORER = R.bigram_scorer(SEQS, 6)
MODEL = R.SASRec(6, 5, dim=8, n_blocks=1, dropout=0.1, rngs=nnx.Rngs(0))


def _gen_kwargs():
    return {"scorer": SCORER, "seeds": SEQS, "seed_lengths": LENS, "key": jax.random.key(0),
            "config": R.GenerateConfig(m=2, k=3, local_prob=0.5), "n_items": 6}


CASES = [
    Case("rsir.generate", R.generate, _gen_kwargs,
         out=lambda t: (t.items, t.lengths, t.stopped_by_filter),
         vmap=("key",), key="key",
         bad=(Bad({"seeds": jnp.asarray([[0, 7, -1, -1, -1]] * 3)}, ValueError,
                  r"seeds holds item ids in \[0, 6\)"),
              Bad({"seed_lengths": jnp.asarray([4, 0, 5])}, ValueError,
                  "seed_lengths must be >= 1"))),
    Case("rsir.sequence_loss", R.sequence_loss,
         lambda: {"model": MODEL, "seqs": SEQS, "key": jax.random.key(1), "n_negatives": 4,
                  "dropout_key": jax.random.key(2)},
         vmap=("key",), key="key"),
    Case("rsir.user_scores", R.user_scores,
         lambda: {"model": MODEL, "seqs": SEQS, "lengths": LENS},
         vmap=("seqs", "lengths")),
]
