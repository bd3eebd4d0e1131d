"""Property cases for :mod:`jaxsci.stats.auctions` (see ``tests/properties.py``)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from properties import Bad, Case

from jaxsci.stats import auctions as au


def _instance():
    # Three bidders: the best-response iteration path (two-bidder enumeration is covered,
    # vmapped, by tests/stats/test_auctions.py; its compile is the expensive one).
    return au.Instance(jnp.asarray([1.0, 1.0, 0.5]),
                       jnp.asarray([[0.8, 0.2, 0.4], [0.3, 0.5, 0.6], [0.1, 0.4, 0.7]]),
                       jnp.asarray([1.0, 1.2, 0.9]))


def _instances(inst):
    return au.Instance(jnp.stack([inst.masses, inst.masses * 2, inst.masses[::-1]]),
                       jnp.stack([inst.probs, inst.probs * 0.5, inst.probs[:, ::-1]]),
                       jnp.stack([inst.values] * 3), jnp.stack([inst.budgets] * 3))


def _labels(lab):
    return jnp.stack([lab, jnp.zeros_like(lab), jnp.arange(lab.shape[0])])


def _solve_kwargs():
    return {"instance": _instance(), "labels": jnp.asarray([0, 1, 1]), "fmt": au.FirstPrice(),
            "bidder": au.MaxCPA()}


CASES = [
    Case("auctions.solve", au.solve, _solve_kwargs,
         out=lambda s: (s.revenue, s.welfare, s.liquid_welfare, s.alpha, s.result._value),
         vmap=("instance", "labels"), batch={"instance": _instances, "labels": _labels},
         rtol=1e-4, atol=1e-5,
         bad=(Bad({"labels": jnp.asarray([0, 1, 3])}, ValueError, "labels must hold cluster"),
              Bad({"fmt": "second"}, TypeError, "fmt must be an AbstractFormat"),
              # Out-of-range probabilities that bypass the eager check reach error_if.
              Bad({"instance": eqx.tree_at(lambda i: i.probs, _instance(),
                                           jnp.asarray([[1.5, 0.2, 0.4], [0.3, 0.5, 0.6],
                                                        [0.1, 0.4, 0.7]]))},
                  Exception, "probs must be in \\[0, 1\\]", jit=True))),
    Case("auctions.predictions", au.predictions,
         lambda: {"instance": _instance(), "labels": jnp.asarray([0, 0, 2])},
         vmap=("instance", "labels"), batch={"instance": _instances, "labels": _labels},
         grad=("instance",),
         bad=(Bad({"labels": jnp.asarray([0, 0])}, ValueError, "labels must be a 1-D integer"),
              Bad({"labels": jnp.asarray([0.0, 0.0, 1.0])}, TypeError, "integer dtype"))),
    Case("auctions.random_instance", au.random_instance,
         lambda: {"key": jax.random.key(0), "n_bidders": 2, "n_queries": 4,
                  "budget_fraction": 0.5},
         out=lambda i: (i.masses, i.probs, i.values, i.budgets),
         vmap=("key",), key="key",
         bad=(Bad({"n_bidders": 0}, ValueError, "n_bidders must be >= 1"),
              Bad({"key": 0}, TypeError, "key must be a jax.random key"))),
    Case("auctions.random_chain", au.random_chain,
         lambda: {"key": jax.random.key(0), "n_queries": 5, "length": 3},
         vmap=("key",), key="key",
         bad=(Bad({"length": 5}, ValueError, "length must be <= 4"),)),
    Case("auctions.is_refinement", au.is_refinement,
         lambda: {"fine": jnp.asarray([0, 1, 2]), "coarse": jnp.asarray([0, 0, 2])},
         vmap=("fine",), batch={"fine": _labels}),
]
