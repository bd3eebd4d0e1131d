"""Semantic isotropy: the dispersion of several responses' embeddings as a trust signal.

The paper (ICML 2026, "semantic isotropy") samples ``N`` long-form responses to one
prompt, embeds each, normalises the embeddings onto the unit sphere and measures how
uniformly they spread: responses that agree on the facts cluster, responses that make
facts up scatter. Higher isotropy predicts lower factual consistency, with no labels,
no fine-tuning and no hyperparameter.

The estimator (the authors' MIT-licensed code, read, not copied, fixes the details the
abstract leaves open):

* rows ``x_i / |x_i|`` of ``X`` (``N x d``), Gram matrix ``K = X X^T + eps I``
  (``eps = 1e-3``, the authors' jitter, a field here);
* eigenvalues ``lambda_j`` of ``K``, ``p_j = lambda_j / N``;
* von Neumann entropy ``S = -sum_j p_j log p_j``, normalised by ``log N``:
  :func:`semantic_isotropy`. Identical responses give ``S ~ 0``; mutually
  orthogonal ones give ``S = 1``. Because ``tr K = N (1 + eps)`` and the ``p_j`` are
  not renormalised, the value can exceed 1 by ``O(eps log(1/eps))`` (as in the authors'
  code; tested).

Baselines from the same responses, each one jitted function of arrays so one
``vmap`` over prompts computes them together (:func:`trust_signals`):

* :func:`cosine_dispersion`: one minus the mean pairwise cosine similarity;
* :func:`eigenscore`: INSIDE's EigenScore (Chen et al., 2024): the mean log-eigenvalue
  of ``Z J_d Z^T + alpha I`` for the responses' hidden states ``Z`` (``N x d``,
  ``J_d`` centres each state over its features), ``alpha = 1e-3``;
* :func:`lexical_dispersion`: one minus the mean pairwise Jaccard overlap of the
  responses' word sets (bags of words from :func:`bag_of_words`);
* the mean token negative log-likelihood of the responses (computed by the caller from
  the model's log-probabilities; passed through).

Every function takes an optional boolean ``mask`` over the ``N`` responses (traced), so
a sample-size curve ``N = 2..N_max`` from one cached bank of responses is one ``vmap``
over masks rather than one program per ``N``.

Gradients: the eigenvalue functions differentiate through ``jnp.linalg.eigh``, whose
derivative is undefined where eigenvalues coincide (identical responses, masked rows);
on distinct spectra they match finite differences (tested in the property harness).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxsci.core.validation import check_array, check_scalar

__all__ = [
    "JITTER",
    "EIGENSCORE_ALPHA",
    "Signals",
    "bag_of_words",
    "cosine_dispersion",
    "eigenscore",
    "lexical_dispersion",
    "semantic_isotropy",
    "trust_signals",
]

JITTER = 1e-3  # the authors' diagonal jitter on the Gram matrix
EIGENSCORE_ALPHA = 1e-3  # INSIDE's regulariser (Chen et al., 2024)


def _rows(name: str, x, min_rows: int = 2) -> Array:
    check_array(name, x, ndim=2, dtype="floating")
    if x.shape[0] < min_rows:
        raise ValueError(f"{name} must hold at least {min_rows} responses (rows), "
                         f"got shape {tuple(x.shape)}")
    return jnp.asarray(x)


def _mask(mask, n: int) -> Array:
    if mask is None:
        return jnp.ones((n,), bool)
    check_array("mask", mask, shape=(n,), dtype="bool")
    return jnp.asarray(mask)


def _pair_mean(m: Array, mask: Array) -> Array:
    """Mean of the off-diagonal entries of ``m`` between kept rows."""
    keep = (mask[:, None] & mask[None, :]) & ~jnp.eye(m.shape[0], dtype=bool)
    return jnp.sum(jnp.where(keep, m, 0.0)) / jnp.maximum(jnp.sum(keep), 1)


def _unit(x: Array) -> Array:
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def semantic_isotropy(embeddings: Float[Array, "n d"], mask: Bool[Array, " n"] | None = None,
                      *, jitter: float | Array = JITTER) -> Float[Array, ""]:
    """Normalised von Neumann entropy of the responses' Gram matrix (module docstring).

    Args:
      embeddings: ``(N, d)``, one row per response (normalised here).
      mask: ``(N,)`` bool, the responses that count (``None``: all); vmappable.
      jitter: ``eps`` added to the Gram diagonal (traced; sweepable).

    Returns:
      scalar: ``-sum p log p / log n`` with ``n`` the kept responses (at least 2).
    """
    x = _rows("embeddings", embeddings)
    check_scalar("jitter", jitter, ge=0.0)
    m = _mask(mask, x.shape[0])
    x = jnp.where(m[:, None], _unit(x), 0.0)
    n = jnp.sum(m)
    k = x @ x.T + jitter * jnp.diag(m.astype(x.dtype))
    lam = jnp.linalg.eigvalsh(k)
    p = jnp.clip(lam, 0.0) / n
    ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return ent / jnp.log(jnp.maximum(n, 2).astype(x.dtype))


def cosine_dispersion(embeddings: Float[Array, "n d"], mask: Bool[Array, " n"] | None = None
                      ) -> Float[Array, ""]:
    """One minus the mean pairwise cosine similarity of the kept responses."""
    x = _rows("embeddings", embeddings)
    m = _mask(mask, x.shape[0])
    u = _unit(x)
    return 1.0 - _pair_mean(u @ u.T, m)


def eigenscore(hidden: Float[Array, "n d"], mask: Bool[Array, " n"] | None = None,
               *, alpha: float | Array = EIGENSCORE_ALPHA) -> Float[Array, ""]:
    """INSIDE's EigenScore: ``(1/n) sum log eig(Z J_d Z^T + alpha I)`` over kept rows.

    Args:
      hidden: ``(N, d)`` hidden states (INSIDE: a middle layer at the response's last
        token); each row is centred over its features (``J_d``).
      mask: ``(N,)`` bool, kept responses.
      alpha: the regulariser (traced).
    """
    z = _rows("hidden", hidden)
    check_scalar("alpha", alpha, gt=0.0)
    m = _mask(mask, z.shape[0])
    z = z - jnp.mean(z, axis=1, keepdims=True)
    z = jnp.where(m[:, None], z, 0.0)
    cov = z @ z.T + alpha * jnp.eye(z.shape[0], dtype=z.dtype)
    lam = jnp.linalg.eigvalsh(cov)
    # Masked rows give eigenvalues exactly alpha; they are taken out of the mean.
    n = jnp.sum(m)
    total = jnp.sum(jnp.log(lam)) - (z.shape[0] - n) * jnp.log(alpha)
    return total / n


def lexical_dispersion(bags: Float[Array, "n v"], mask: Bool[Array, " n"] | None = None
                       ) -> Float[Array, ""]:
    """One minus the mean pairwise Jaccard overlap of the responses' word sets.

    ``bags``: ``(N, V)`` 0/1 word-presence rows (:func:`bag_of_words`); an empty pair
    (both rows without words) counts as identical.
    """
    b = _rows("bags", bags)
    m = _mask(mask, b.shape[0])
    b = (b > 0).astype(jnp.float32)
    inter = b @ b.T
    size = jnp.sum(b, axis=1)
    union = size[:, None] + size[None, :] - inter
    jac = jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 1.0)
    return 1.0 - _pair_mean(jac, m)


class Signals(NamedTuple):
    """The trust signals of one prompt's responses (higher: less trustworthy)."""

    isotropy: Array
    cosine: Array
    eigenscore: Array
    lexical: Array
    nll: Array


def trust_signals(embeddings: Float[Array, "n d"], hidden: Float[Array, "n h"],
                  bags: Float[Array, "n v"], nll: Float[Array, " n"],
                  mask: Bool[Array, " n"] | None = None, *, jitter: float | Array = JITTER,
                  alpha: float | Array = EIGENSCORE_ALPHA) -> Signals:
    """Semantic isotropy and the four baselines for one prompt's ``N`` responses.

    ``nll``: each response's mean token negative log-likelihood; the signal is its mean
    over kept responses. ``jax.jit(jax.vmap(trust_signals))`` scores many prompts at
    once (and ``vmap`` over ``mask`` gives a sample-size curve).
    """
    m = _mask(mask, embeddings.shape[0])
    check_array("nll", nll, shape=(embeddings.shape[0],), dtype="floating")
    for name, arr in (("hidden", hidden), ("bags", bags)):
        if arr.shape[0] != embeddings.shape[0]:
            raise ValueError(f"{name} must have one row per response "
                             f"({embeddings.shape[0]}), got shape {tuple(arr.shape)}")
    mean_nll = jnp.sum(jnp.where(m, nll, 0.0)) / jnp.maximum(jnp.sum(m), 1)
    return Signals(semantic_isotropy(embeddings, m, jitter=jitter),
                   cosine_dispersion(embeddings, m), eigenscore(hidden, m, alpha=alpha),
                   lexical_dispersion(bags, m), mean_nll)


_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words(groups: Sequence[Sequence[str]]) -> np.ndarray:
    """0/1 word-presence arrays ``(prompts, N, V)`` over one shared vocabulary.

    ``groups``: per prompt, its ``N`` response texts (the same ``N`` for all). Words are
    lower-cased alphanumeric runs.
    """
    if isinstance(groups, str) or not groups or any(isinstance(g, str) for g in groups):
        raise TypeError("groups must be a non-empty sequence of sequences of response texts")
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"every prompt needs the same number of responses, got {sorted(sizes)}")
    sets = [[set(_WORD.findall(str(t).lower())) for t in g] for g in groups]
    vocab = sorted(set().union(*[s for g in sets for s in g]))
    index = {w: i for i, w in enumerate(vocab)}
    out = np.zeros((len(groups), sizes.pop(), max(len(vocab), 1)), np.float32)
    for i, g in enumerate(sets):
        for j, s in enumerate(g):
            out[i, j, [index[w] for w in s]] = 1.0
    return out
