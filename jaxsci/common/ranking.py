r"""Top-k ranking metrics of recommenders: Recall@k, NDCG@k (full ranking) and ER@k.

Shared by the recommender papers (ntssm, rsir, venomrec). Item lists are *padded index
arrays*: row ``u`` of an ``(n_users, L)`` integer array holds user ``u``'s items, padded
with ``-1`` (:func:`jaxsci.data.recsys.pad_lists` builds them). Nothing here builds a
dense ``(n_users, n_items)`` mask, so the metrics run on catalogues of any size in chunks
of users.

Definitions (the standard ones, as in the NT-SSM and RecBole evaluators):

* **Full ranking with the history masked.** For user ``u`` with scores ``s_u`` over all
  items, the items of ``history[u]`` (the training interactions) get score ``-inf``; the
  top-``k`` list ``R_u`` is the ``k`` highest remaining scores (``jax.lax.top_k``: a tie
  goes to the lower item index).
* ``Recall@k(u) = |R_u \cap T_u| / |T_u|`` for the held-out items ``T_u``;
* ``NDCG@k(u) = DCG / IDCG`` with ``DCG = sum_{r < k, R_u[r] in T_u} 1 / log2(r + 2)``
  and ``IDCG = sum_{r < min(|T_u|, k)} 1 / log2(r + 2)``;
* the reported value is the mean over users with at least one held-out item.
* **ER@k** (exposure rate, for targeted promotion): over a set of users, each scoring a
  list of candidates that contains a target item, the fraction whose target ranks in the
  top ``k``. The rank counts the candidates scoring *at least as high* as the target
  (ties go against the target), so random scores over ``n`` candidates give
  ``ER@k = k / n`` in expectation (:func:`exposure_rate`).

Everything is jittable; ``ks`` and ``chunk_size`` are static. Gradients are zero almost
everywhere (rank metrics are piecewise constant) and are not provided.

>>> import jax.numpy as jnp
>>> from jaxsci.common import ranking
>>> scores = jnp.array([[0.9, 0.1, 0.8, 0.3]])
>>> history = jnp.array([[0]])          # item 0 was trained on: masked
>>> targets = jnp.array([[3, -1]])      # one held-out item
>>> m = ranking.recall_ndcg(scores, history, targets, ks=(2,))
>>> float(m["recall@2"][0]), round(float(m["ndcg@2"][0]), 4)
(1.0, 0.6309)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxsci.core.validation import check_array, check_int

__all__ = [
    "mask_history",
    "top_k_hits",
    "recall_ndcg",
    "evaluate_embeddings",
    "exposure_rate",
    "item_popularity",
]


def _check_lists(name: str, lists, n_rows: int | None, n_items: int | None) -> None:
    check_array(name, lists, ndim=2, dtype="integer")
    if n_rows is not None and lists.shape[0] != n_rows:
        raise ValueError(f"{name} must have one row per user ({n_rows}), got shape "
                         f"{tuple(lists.shape)}")
    if n_items is not None and not isinstance(lists, jax.core.Tracer):
        a = np.asarray(lists)
        if a.size and (a.min() < -1 or a.max() >= n_items):
            raise ValueError(f"{name} holds item ids in [0, n_items) = [0, {n_items}) "
                             f"or -1 (padding), got values in [{a.min()}, {a.max()}]")


def _check_ks(ks) -> tuple[int, ...]:
    ks = (ks,) if isinstance(ks, int) else tuple(ks)
    if not ks:
        raise ValueError("ks must hold at least one cutoff")
    for k in ks:
        check_int("k", k, min=1)
    return ks


def mask_history(scores: Float[Array, "b n"], history: Int[Array, "b l"]) -> Array:
    """``scores`` with each row's history items set to ``-inf`` (``-1`` entries ignored)."""
    rows = jnp.arange(scores.shape[0])[:, None]
    cols = jnp.where(history >= 0, history, scores.shape[1])  # out of range: dropped
    return scores.at[rows, cols].set(-jnp.inf, mode="drop")


def top_k_hits(scores: Float[Array, "b n"], history: Int[Array, "b l"],
               targets: Int[Array, "b t"], k: int) -> Array:
    """``(b, k)`` booleans: is the item at rank ``r`` (history masked) a target?"""
    _, top = jax.lax.top_k(mask_history(scores, history), k)
    valid = targets >= 0
    return jnp.any((top[:, :, None] == targets[:, None, :]) & valid[:, None, :], axis=-1)


def _discounts(k: int) -> Array:
    return 1.0 / jnp.log2(jnp.arange(k, dtype=jnp.float32) + 2.0)


def _recall_ndcg(scores, history, targets, ks):
    kmax = max(ks)
    hits = top_k_hits(scores, history, targets, min(kmax, scores.shape[1]))
    n_t = jnp.sum(targets >= 0, axis=1)
    disc = _discounts(hits.shape[1])
    out = {}
    for k in ks:
        kk = min(k, hits.shape[1])
        h = hits[:, :kk]
        n_hit = jnp.sum(h, axis=1)
        dcg = jnp.sum(h * disc[:kk], axis=1)
        ideal = jnp.cumsum(disc[:kk])[jnp.clip(jnp.minimum(n_t, kk) - 1, 0)]
        out[f"recall@{k}"] = jnp.where(n_t > 0, n_hit / jnp.maximum(n_t, 1), 0.0)
        out[f"ndcg@{k}"] = jnp.where(n_t > 0, dcg / ideal, 0.0)
    out["has_target"] = n_t > 0
    return out


def recall_ndcg(scores: Float[Array, "b n"], history: Int[Array, "b l"],
                targets: Int[Array, "b t"], ks: int | Sequence[int] = (20,)) -> dict[str, Array]:
    """Per-user Recall@k and NDCG@k of a block of scores (module docstring).

    Args:
      scores: ``(b, n_items)`` scores of ``b`` users over the whole catalogue.
      history: ``(b, L)`` item ids to exclude from the ranking (``-1`` padding).
      targets: ``(b, T)`` held-out item ids (``-1`` padding).
      ks: the cutoffs (static).

    Returns:
      ``{"recall@k": (b,), "ndcg@k": (b,), ..., "has_target": (b,) bool}``; users with
      no target get 0 and ``has_target`` False (average over ``has_target``).
    """
    ks = _check_ks(ks)
    check_array("scores", scores, ndim=2, dtype="floating", finite=False)
    _check_lists("history", history, scores.shape[0], scores.shape[1])
    _check_lists("targets", targets, scores.shape[0], scores.shape[1])
    return _recall_ndcg(jnp.asarray(scores), jnp.asarray(history), jnp.asarray(targets), ks)


@functools.partial(jax.jit, static_argnames=("ks", "chunk_size"))
def _evaluate(user_emb, item_emb, history, targets, ks, chunk_size):
    n = user_emb.shape[0]
    pad = (-n) % chunk_size

    def padded(x, fill):
        return jnp.concatenate([x, jnp.full((pad, *x.shape[1:]), fill, x.dtype)])

    blocks = (padded(user_emb, 0.0), padded(history, -1), padded(targets, -1))
    blocks = [b.reshape(-1, chunk_size, *b.shape[1:]) for b in blocks]

    def one(block):
        u, h, t = block
        return _recall_ndcg(u @ item_emb.T, h, t, ks)

    per = jax.lax.map(one, tuple(blocks))
    per = {k: v.reshape(-1)[:n] for k, v in per.items()}
    w = per.pop("has_target").astype(jnp.float32)
    denom = jnp.maximum(jnp.sum(w), 1.0)
    return {k: jnp.sum(v * w) / denom for k, v in per.items()}


def evaluate_embeddings(user_emb: Float[Array, "u d"], item_emb: Float[Array, "n d"],
                        history: Int[Array, "u l"], targets: Int[Array, "u t"],
                        ks: int | Sequence[int] = (20,), *,
                        chunk_size: int = 256) -> dict[str, Array]:
    """Mean Recall@k / NDCG@k of dot-product scores ``user_emb @ item_emb.T``.

    Scores are built ``chunk_size`` users at a time (``lax.map``), so memory is
    ``chunk_size x n_items`` whatever the number of users. Means are over users with at
    least one target. Jitted; ``vmap`` over leading axes of the embeddings works.
    """
    ks = _check_ks(ks)
    check_int("chunk_size", chunk_size, min=1)
    check_array("user_emb", user_emb, ndim=2, dtype="floating")
    check_array("item_emb", item_emb, ndim=2, shape=(None, user_emb.shape[1]), dtype="floating")
    _check_lists("history", history, user_emb.shape[0], item_emb.shape[0])
    _check_lists("targets", targets, user_emb.shape[0], item_emb.shape[0])
    chunk = min(chunk_size, user_emb.shape[0])
    return _evaluate(jnp.asarray(user_emb), jnp.asarray(item_emb), jnp.asarray(history),
                     jnp.asarray(targets), ks, chunk)


def exposure_rate(scores: Float[Array, "b c"], target: Int[Array, " b"] | int = 0,
                  k: int = 20) -> Array:
    """ER@k: the fraction of rows whose ``target`` column ranks in the top ``k``.

    ``scores`` is ``(b, c)``: each row a user's scores over ``c`` candidates (the target
    among them, at column ``target``). The target's rank is the number of *other*
    candidates scoring at least as high (ties against the target); it is exposed when
    that number is below ``k``. Random continuous scores give ``k / c`` in expectation.
    """
    check_int("k", k, min=1)
    check_array("scores", scores, ndim=2, dtype="floating", finite=False)
    scores = jnp.asarray(scores)
    target = jnp.broadcast_to(jnp.asarray(target, jnp.int32), scores.shape[:1])
    s_t = jnp.take_along_axis(scores, target[:, None], axis=1)
    others = jnp.arange(scores.shape[1])[None, :] != target[:, None]
    ahead = jnp.sum((scores >= s_t) & others, axis=1)
    return jnp.mean((ahead < k).astype(jnp.float32))


def item_popularity(history: Int[Array, "u l"], n_items: int) -> Array:
    """Interaction counts per item from padded lists (``-1`` ignored)."""
    check_int("n_items", n_items, min=1)
    _check_lists("history", history, None, n_items)
    h = jnp.asarray(history).reshape(-1)
    return jnp.zeros(n_items, jnp.float32).at[jnp.where(h >= 0, h, n_items)].add(1.0, mode="drop")
