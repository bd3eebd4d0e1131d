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

:func:`clustered_sequences` -- item sequences in time order (sequential recommenders:
rsir): clustered items with Zipf popularity and fixed in-cluster successors, users with
Dirichlet cluster preferences, a leave-one-out split, and the true next-item probability
as the oracle.

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

__all__ = ["Interactions", "Sequences", "clustered_sequences", "community_interactions",
           "pad_lists"]


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


@dataclasses.dataclass(frozen=True)
class Sequences:
    """Users' item sequences in time order, split leave-one-out (NumPy arrays).

    Attributes:
      n_items: catalogue size (item ids ``0..n_items-1``).
      train: ``(n_users, L)`` each user's sequence without its last item, left-aligned,
        padded with ``-1``.
      lengths: ``(n_users,)`` lengths of the ``train`` rows.
      test: ``(n_users,)`` the held-out last item of each user.
      oracle: ``(n_users, n_items)`` the true probability of the held-out step given the
        user's training sequence (ceiling scores), or None.
      transition: ``(n_items,)`` each item's fixed in-cluster successor, or None.
    """

    n_items: int
    train: np.ndarray
    lengths: np.ndarray
    test: np.ndarray
    oracle: np.ndarray | None = None
    transition: np.ndarray | None = None

    @property
    def n_users(self) -> int:
        return int(self.train.shape[0])

    @property
    def n_interactions(self) -> int:
        return int(self.lengths.sum() + self.n_users)


def clustered_sequences(
    key: jax.Array,
    *,
    n_users: int = 500,
    n_items: int = 300,
    n_clusters: int = 10,
    min_length: int = 8,
    max_length: int = 30,
    zipf: float = 0.8,
    concentration: float = 0.3,
    successor_prob: float = 0.5,
) -> Sequences:
    """Sequences with clusters, Zipf popularity and fixed in-cluster successors.

    Items are split into ``n_clusters`` clusters; within a cluster, popularity is Zipf
    (``rank^{-zipf}``) and each item has one fixed *successor* in its cluster. User ``u``
    has cluster preferences ``theta_u ~ Dirichlet(concentration * 1)`` and a length
    ``U[min_length, max_length]``; the first item is drawn from
    ``p_u(i) = theta_u[c_i] * zipf_{c_i}(i)``, and each next item is the current item's
    successor with probability ``successor_prob``, else a draw from ``p_u``; items the
    user already has are never repeated (the draw is renormalised over new items). The
    last item is held out (leave-one-out).

    ``oracle[u]`` is the true probability of the held-out step given the training
    sequence (the successor term of the last training item plus ``p_u``, history
    excluded): ranking by it attains the best Recall@k any model can on average.
    """
    check_int("n_users", n_users, min=2)
    check_int("n_clusters", n_clusters, min=1)
    check_int("n_items", n_items, min=2 * n_clusters)
    check_int("min_length", min_length, min=3)
    check_int("max_length", max_length, min=min_length)
    if max_length >= n_items:
        raise ValueError(f"max_length must be < n_items ({n_items}), got {max_length}")
    check_scalar("zipf", zipf, ge=0.0)
    check_scalar("concentration", concentration, gt=0.0)
    check_scalar("successor_prob", successor_prob, ge=0.0, le=1.0)
    rng = rng_from_key(key)
    cluster = rng.permutation(np.arange(n_items) % n_clusters)
    pop = np.empty(n_items)
    succ = np.empty(n_items, np.int64)
    for c in range(n_clusters):
        members = np.flatnonzero(cluster == c)
        pop[members] = (1.0 + rng.permutation(len(members))) ** -float(zipf)
        pop[members] /= pop[members].sum()
        order = rng.permutation(members)  # a random cycle through the cluster
        succ[order] = np.roll(order, -1)
    theta = rng.dirichlet(np.full(n_clusters, float(concentration)), n_users)
    lengths = rng.integers(min_length, max_length + 1, n_users)
    train, test, oracle = [], [], np.zeros((n_users, n_items), np.float32)
    for u in range(n_users):
        p_u = theta[u, cluster] * pop
        seen = np.zeros(n_items, bool)
        seq = []
        for t in range(lengths[u]):
            if t > 0 and not seen[succ[seq[-1]]] and rng.random() < successor_prob:
                nxt = int(succ[seq[-1]])
            else:
                q = np.where(seen, 0.0, p_u)
                nxt = int(rng.choice(n_items, p=q / q.sum()))
            seq.append(nxt)
            seen[nxt] = True
        seen_train = np.zeros(n_items, bool)
        seen_train[seq[:-1]] = True
        q = np.where(seen_train, 0.0, p_u)
        q = q / q.sum()
        s = int(succ[seq[-2]])
        if not seen_train[s]:
            q = (1.0 - successor_prob) * q
            q[s] += successor_prob
        oracle[u] = q
        train.append(seq[:-1])
        test.append(seq[-1])
    return Sequences(n_items, pad_lists(train), (lengths - 1).astype(np.int32),
                     np.asarray(test, np.int32), oracle, succ.astype(np.int32))
