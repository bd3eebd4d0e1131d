r"""Synthetic recommender data with planted structure (no recommender data ships offline).

:func:`community_interactions` -- implicit feedback on a user-item bipartite graph with
latent communities and popularity skew (graph collaborative filtering: ntssm):

* ``n_communities`` communities; item ``i`` belongs to community ``c_i`` (uniform) and has
  a popularity weight ``w_i = rank_i^{-zipf}`` (a random permutation of ranks);
* user ``u`` has community preferences ``theta_u ~ Dirichlet(concentration * 1)``;
* ``P(i | u) \propto w_i ((1 - noise) theta_u[c_i] + noise / C)``: the ``noise`` share of
  every user's clicks ignores the communities (popularity only);
* user ``u`` draws ``d_u = min_degree + Poisson(mean_degree - min_degree)`` distinct
  items from ``P(. | u)`` (without replacement);
* a random ``test_fraction`` of each user's items (at least one when ``d_u >= 2``) is
  held out as the test set; the rest is training.

The returned :class:`Interactions` carries the true ``P(i | u)`` (the *oracle* scores:
no learned model can rank held-out items better on average, a ceiling to read results
against) and the training popularity (the *floor*: a popularity ranking).

All generators here are NumPy, seeded by a JAX key (same key, same data).

>>> import jax
>>> from jaxsci.data import recsys
>>> d = recsys.community_interactions(jax.random.key(0), n_users=50, n_items=40)
>>> d.train.shape[0], d.n_items, int((d.test >= 0).sum()) > 0
(50, 40, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data.corpora import rng_from_key

__all__ = ["Interactions", "community_interactions", "pad_lists"]


def pad_lists(lists: Sequence[Sequence[int]], width: int | None = None) -> np.ndarray:
    """Ragged item lists as an ``(n, width)`` int32 array padded with ``-1``.

    ``width`` defaults to the longest list (at least 1); a longer list raises.
    """
    longest = max((len(x) for x in lists), default=0)
    width = max(longest, 1) if width is None else check_int("width", width, min=1)
    if longest > width:
        raise ValueError(f"width must be >= the longest list ({longest}), got {width}")
    out = np.full((len(lists), width), -1, np.int32)
    for r, x in enumerate(lists):
        out[r, : len(x)] = np.asarray(x, np.int32)
    return out



@dataclasses.dataclass(frozen=True)
class Interactions:
    """Implicit feedback split into training and test interactions (NumPy arrays).

    Attributes:
      n_users, n_items: sizes.
      users, items: ``(E,)`` int32, the training edges ``(users[e], items[e])``.
      train: ``(n_users, L)`` padded training items per user (``-1`` padding).
      test: ``(n_users, T)`` padded held-out items per user.
      popularity: ``(n_items,)`` training interaction counts.
      oracle: ``(n_users, n_items)`` the true ``P(i | u)`` (ceiling scores), or None.
      item_community: ``(n_items,)`` planted community of each item, or None.
    """

    n_users: int
    n_items: int
    users: np.ndarray
    items: np.ndarray
    train: np.ndarray
    test: np.ndarray
    popularity: np.ndarray
    oracle: np.ndarray | None = None
    item_community: np.ndarray | None = None

    @property
    def n_train(self) -> int:
        return int(self.users.shape[0])

    @property
    def n_test(self) -> int:
        return int((self.test >= 0).sum())


def community_interactions(
    key: jax.Array,
    *,
    n_users: int = 1000,
    n_items: int = 800,
    n_communities: int = 10,
    mean_degree: float = 30.0,
    min_degree: int = 5,
    zipf: float = 0.3,
    concentration: float = 0.2,
    noise: float = 0.05,
    test_fraction: float = 0.2,
) -> Interactions:
    """A bipartite interaction graph with planted communities (module docstring)."""
    check_int("n_users", n_users, min=2)
    check_int("n_items", n_items, min=2)
    check_int("n_communities", n_communities, min=1)
    check_int("min_degree", min_degree, min=1)
    check_scalar("mean_degree", mean_degree, ge=float(min_degree))
    if mean_degree >= n_items:
        raise ValueError(f"mean_degree must be < n_items ({n_items}), got {mean_degree}")
    check_scalar("zipf", zipf, ge=0.0)
    check_scalar("concentration", concentration, gt=0.0)
    check_scalar("noise", noise, ge=0.0, le=1.0)
    check_scalar("test_fraction", test_fraction, gt=0.0, lt=1.0)
    rng = rng_from_key(key)
    community = rng.integers(0, n_communities, n_items)
    weight = (1.0 + rng.permutation(n_items)) ** -float(zipf)
    theta = rng.dirichlet(np.full(n_communities, float(concentration)), n_users)
    affinity = (1.0 - noise) * theta[:, community] + noise / n_communities
    prob = weight[None, :] * affinity
    prob /= prob.sum(1, keepdims=True)
    degree = np.minimum(min_degree + rng.poisson(mean_degree - min_degree, n_users),
                        n_items - 1)
    train, test = [], []
    for u in range(n_users):
        # Distinct items without replacement (Gumbel top-d of log P).
        g = np.log(prob[u]) + rng.gumbel(size=n_items)
        picked = np.argpartition(-g, degree[u])[: degree[u]]
        picked = rng.permutation(picked)
        n_test = max(1, int(round(test_fraction * degree[u]))) if degree[u] >= 2 else 0
        test.append(np.sort(picked[:n_test]))
        train.append(np.sort(picked[n_test:]))
    users = np.concatenate([np.full(len(t), u, np.int32) for u, t in enumerate(train)])
    items = np.concatenate(train).astype(np.int32)
    pop = np.bincount(items, minlength=n_items).astype(np.float32)
    return Interactions(n_users, n_items, users, items, pad_lists(train), pad_lists(test),
                        pop, prob.astype(np.float32), community.astype(np.int32))
