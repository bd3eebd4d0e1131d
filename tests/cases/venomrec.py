"""Property cases for :mod:`jaxsci.recsys.venomrec` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from properties import Bad, Case

from jaxsci.recsys import venomrec as V

_RNG = np.random.default_rng(0)
PATCHES = _RNG.normal(0.0, 0.1, (6, 4, 3))
TOKENS = jnp.asarray(_RNG.integers(0, 16, (6, 5)), jnp.int32)
POP = jnp.asarray([9.0, 1.0, 5.0, 7.0, 2.0, 3.0])
MODEL = V.FusionRecommender(6, 16, 3, dim=4, fusion="cross_attention", rngs=nnx.Rngs(0))
CONFIG = V.AttackConfig(n_popular=3, pool_size=2, rounds=2)
SEQS = jnp.asarray([[0, 2, 3, -1], [5, 1, 4, 2], [3, 0, -1, -1]])


def _perturb_kwargs():
    al = V.exposure_alignment(MODEL, jnp.asarray(PATCHES, jnp.float32), TOKENS, POP, 1, CONFIG)
    return {"model": MODEL, "patches": jnp.asarray(PATCHES[1], jnp.float32),
            "tokens": TOKENS[1], "alignment": al, "config": CONFIG,
            "eps": jnp.asarray(0.05), "mode": jnp.asarray(0)}


CASES = [
    Case("venomrec.perturb", V.perturb, _perturb_kwargs,
         vmap=("eps", "mode"), batch={"mode": lambda m: jnp.arange(4)},
         bad=(Bad({"eps": jnp.asarray(-0.1)}, Exception, "eps must be >= 0", jit=True),
              Bad({"mode": "both"}, ValueError, "mode must be one of"))),
    Case("venomrec.sequence_loss", V.sequence_loss,
         lambda: {"model": MODEL, "patches": jnp.asarray(PATCHES, float), "tokens": TOKENS,
                  "seqs": SEQS, "id_l2": jnp.asarray(0.1, float)},
         vmap=("seqs", "id_l2"), batch={"seqs": lambda s: jnp.stack([s, s[::-1], s[:, ::-1]])},
         grad=("patches", "id_l2"), fd_rtol=1e-3),
    Case("venomrec.fake_users", V.fake_users,
         lambda: {"key": jax.random.key(0), "target": jnp.asarray(2), "n_items": 12,
                  "n_fake": 3, "popularity": jnp.arange(12.0) + 1.0, "length": 6},
         vmap=("key", "target"), batch={"target": lambda t: jnp.asarray([0, 5, 11])},
         key="key",
         bad=(Bad({"target": jnp.asarray(12)}, Exception, r"target must be an item id in "
                  r"\[0, 12\)", jit=True),
              Bad({"position": 6}, ValueError, "position must be in"))),
    Case("venomrec.detection_auc", V.detection_auc,
         lambda: {"scores": jnp.asarray(_RNG.normal(size=10)),
                  "is_fake": jnp.asarray([1, 0, 0, 1, 0, 0, 0, 1, 0, 0], bool)},
         vmap=("scores",), zero_grad=("scores",)),
]
