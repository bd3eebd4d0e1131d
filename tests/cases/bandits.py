"""Property cases for :mod:`jaxsci.stats.bandits` (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
from properties import Bad, Case

from jaxsci.stats import bandits as B

MEANS = (0.7, 0.45, 0.3)


def _simulate_kwargs():
    return {"policy": B.UncertainUCB(), "arms": B.BernoulliArms(jnp.asarray(MEANS)),
            "threshold": jnp.asarray(0.5), "key": jax.random.key(0), "checkpoints": (12,)}


def _arms_batch(arms):
    return B.BernoulliArms(jnp.stack([arms.means, arms.means * 0.9, arms.means * 1.1]))


CASES = [
    Case("bandits.simulate", B.simulate, _simulate_kwargs,
         out=lambda r: (r.satisficing_regret, r.regret, r.counts),
         vmap=("key", "arms"), batch={"arms": _arms_batch}, key="key",
         bad=(Bad({"threshold": 1.5}, ValueError, "threshold must be <= 1"),
              Bad({"threshold": jnp.asarray(1.5)}, Exception, "threshold S must be in",
                  jit=True),
              Bad({"checkpoints": (8, 4)}, ValueError, "strictly increasing"))),
    Case("bandits.exact_expected_regret", B.exact_expected_regret,
         lambda: {"policy": B.UCB1(), "means": jnp.asarray(MEANS),
                  "threshold": jnp.asarray(0.5), "horizon": 4},
         vmap=("means",),
         bad=(Bad({"horizon": 17}, ValueError, "horizon must be <= 16"),
              Bad({"means": [0.5, 1.2, 0.1]}, ValueError, "means must be <= 1"))),
    Case("bandits.uncertain_ucb_bound", B.uncertain_ucb_bound,
         lambda: {"means": jnp.asarray(MEANS), "threshold": jnp.asarray(0.6)},
         vmap=("threshold", "means"),
         bad=(Bad({"means": jnp.ones((2, 2))}, ValueError, "means must have 1 dimensions"),)),
    Case("bandits.make_means", B.make_means,
         lambda: {"threshold": jnp.asarray(0.6), "excess_gap": jnp.asarray(0.05),
                  "gaps": jnp.asarray([0.2, 0.3])},
         vmap=("excess_gap", "gaps"), grad=("excess_gap", "gaps"),
         bad=(Bad({"gaps": jnp.ones((2, 2))}, ValueError, "gaps must have 1 dimensions"),)),
]
