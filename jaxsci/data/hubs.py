r"""Gaussian graphical models of several populations with common and individual hubs.

The simulation design of JIC-HD ("Joint Inverse Components for Hub Detection", ICML
2026; the abstract's setting: K related sub-populations whose GGMs share *common hub*
variables, highly connected in every population, and also differ by *individual* hubs
and background edges). The paper body was not available; this is the standard
hub-graph design (hub rows that connect with a probability, signed uniform weights,
the diagonal shifted for positive definiteness), with the choices below named.

For population ``k = 1..K`` the precision matrix is

.. math::
    \Theta_k = A_k + (\epsilon - \lambda_{\min}(A_k))\, I,

where the symmetric, zero-diagonal weight matrix ``A_k`` holds

* **common-hub edges** (shared by all populations: the common structure): a pair
  ``(i, j)`` that touches one of the ``n_common`` common hubs is an edge with
  probability ``p_common``, weight ``+-U[weight_low, weight_high]``; the edge pattern
  and weights are drawn once and used in every population;
* **individual-hub edges** of population ``k``: a pair touching one of that
  population's ``n_individual`` hubs (disjoint from the common hubs and from the other
  populations' hubs) is an edge with probability ``p_individual``, weight
  ``individual_strength[k] * (+-U[weight_low, weight_high])``, drawn per population;
* **background edges**: every other pair, probability ``p_background``, weight
  ``+-U[weight_low, weight_high]``, drawn per population.

``individual_strength > 1`` (one number, or one per population) with
``p_individual >= p_common`` is the regime where individual hubs dominate a
population's leading precision eigenvectors, and per-population methods confuse them
with common hubs (:func:`strong_individual`: population 1's individual hubs twice as
strong). The shift ``epsilon - lambda_min`` is by default **shared** by the
populations (``lambda_min = min_k lambda_min(A_k)``): they then differ only in their
edges. With per-population shifts (``shared_shift=False``) the population with the
strongest hubs also gets the largest diagonal, which dilutes *its* common-hub edges;
that makes the populations differ in scale, a harder case for a minimax over
populations (see ``docs/ggm.md``). Samples are ``x = L^{-T} z`` with
``Theta = L L^T`` and ``z ~ N(0, I)``, so ``Cov(x) = Theta^{-1}`` without inverting
``Theta``.

Transformations: :func:`hub_precisions` is jittable and vmappable in ``key`` and every
float field of :class:`HubSpec` (probabilities, weights, strength and ``min_eig`` are
pytree leaves; ``p``, ``n_populations``, ``n_common``, ``n_individual`` are static).
Gradients with respect to the probabilities are zero by construction (Bernoulli draws
``uniform < p``). :func:`gaussian_samples` is differentiable in ``theta``.

>>> import jax
>>> from jaxsci.data import hubs
>>> spec = hubs.HubSpec(p=30, n_common=2, n_individual=2)
>>> g = hubs.hub_precisions(jax.random.key(0), spec)
>>> g.theta.shape, int(g.common.sum()), g.individual.sum(axis=1).tolist()
((3, 30, 30), 2, [2, 2, 2])
>>> hubs.gaussian_samples(jax.random.key(1), g.theta, 50).shape
(3, 50, 30)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = ["HubSpec", "HubGraphs", "balanced", "strong_individual", "hub_precisions",
           "gaussian_samples"]


class HubSpec(eqx.Module):
    """The generator's settings (a value: the float fields are pytree leaves, so
    ``eqx.filter_vmap`` over a batch of specs works; the counts are static).

    Defaults: the issue's design (K = 3, p = 100) with the hub-graph literature's usual
    weights ``+-U[0.25, 0.75]`` and a smallest precision eigenvalue of 0.1; the paper's
    own numbers were not available.

    Attributes:
      p: variables per population.
      n_populations: ``K``.
      n_common: common hubs (hubs in every population).
      n_individual: individual hubs per population (disjoint across populations).
      p_common: edge probability of a common-hub row.
      p_individual: edge probability of an individual-hub row.
      p_background: edge probability of any other pair.
      weight_low, weight_high: edge weights are ``+-U[weight_low, weight_high]``.
      min_eig: the smallest eigenvalue after the diagonal shift (of every precision with
        a per-population shift; of the population with the most negative ``A_k`` with
        the shared shift).
      individual_strength: a number, or one per population.
      shared_shift: one diagonal shift for all populations (``min_eig - min_k
        lambda_min(A_k)``), so they differ only in their edges; ``False`` shifts each
        population by its own ``lambda_min(A_k)``.
    """

    p: int = eqx.field(static=True, default=100)
    n_populations: int = eqx.field(static=True, default=3)
    n_common: int = eqx.field(static=True, default=5)
    n_individual: int = eqx.field(static=True, default=5)
    p_common: float = 0.6
    p_individual: float = 0.6
    p_background: float = 0.02
    weight_low: float = 0.25
    weight_high: float = 0.75
    individual_strength: float | tuple[float, ...] = 1.0
    min_eig: float = 0.1
    shared_shift: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        check_int("p", self.p, min=3)
        check_int("n_populations", self.n_populations, min=1)
        check_int("n_common", self.n_common, min=0)
        check_int("n_individual", self.n_individual, min=0)
        hubs = self.n_common + self.n_populations * self.n_individual
        if hubs >= self.p:
            raise ValueError(f"n_common + n_populations * n_individual = {hubs} hubs must be "
                             f"fewer than p = {self.p} variables")
        for name in ("p_common", "p_individual", "p_background"):
            _check_leaf(name, getattr(self, name), ge=0.0, le=1.0)
        _check_leaf("weight_low", self.weight_low, ge=0.0)
        _check_leaf("weight_high", self.weight_high, ge=0.0)
        low, high = self.weight_low, self.weight_high
        if not isinstance(low, jax.core.Tracer) and not isinstance(high, jax.core.Tracer):
            if np.any(np.asarray(high) < np.asarray(low)):
                raise ValueError(f"weight_high must be >= weight_low = {low}, got {high}")
        _check_leaf("individual_strength", self.individual_strength, ge=0.0)
        if np.ndim(self.individual_strength) > 0 and np.shape(self.individual_strength)[-1] \
                != self.n_populations:
            raise ValueError(f"individual_strength must be a number or one per population "
                             f"({self.n_populations}), got shape "
                             f"{np.shape(self.individual_strength)}")
        _check_leaf("min_eig", self.min_eig, gt=0.0)


def _check_leaf(name, value, *, ge=None, le=None, gt=None):
    # A leaf is a number, a tracer (checked where it was concrete), or a batch of
    # numbers (a spec built for eqx.filter_vmap).
    if np.ndim(value) == 0 or isinstance(value, jax.core.Tracer):
        check_scalar(name, value, ge=ge, le=le, gt=gt)
        return
    check_array(name, value, ge=ge if gt is None else gt, le=le)
    if gt is not None and np.any(np.asarray(value) <= gt):
        raise ValueError(f"{name} must be > {gt}, got minimum {np.min(value)}")


def balanced(**overrides) -> HubSpec:
    """The balanced regime: individual hubs as strong as the common ones."""
    return HubSpec(**overrides)


def strong_individual(**overrides) -> HubSpec:
    """Individual hubs stronger than the common ones: denser (edge probability 0.8), and
    in population 1 with twice the weights (``individual_strength = (2, 1, ..., 1)``).
    Per-population hub detectors rank them above the common hubs, and so does pooling
    when one population's individual hubs dominate the mean."""
    k = overrides.get("n_populations", HubSpec.n_populations)
    return HubSpec(**{"individual_strength": (2.0,) + (1.0,) * (k - 1), "p_individual": 0.8,
                      **overrides})


class HubGraphs(NamedTuple):
    """Output of :func:`hub_precisions`.

    ``theta``: ``(K, p, p)`` precision matrices; ``common``: ``(p,)`` common-hub flags;
    ``individual``: ``(K, p)`` individual-hub flags per population; ``adjacency``:
    ``(K, p, p)`` edge flags (the support of ``theta`` off the diagonal).
    """

    theta: Float[Array, "k p p"]
    common: Bool[Array, " p"]
    individual: Bool[Array, "k p"]
    adjacency: Bool[Array, "k p p"]


def hub_precisions(key: jax.Array, spec: HubSpec | None = None) -> HubGraphs:
    """Draw ``K`` precision matrices with common hubs, individual hubs and background edges.

    Args:
      key: a ``jax.random`` key.
      spec: the :class:`HubSpec` (its float fields may be traced: vmappable); default
        ``HubSpec()``.

    Returns:
      :class:`HubGraphs` ``(theta, common, individual, adjacency)``; every ``theta[k]``
      is symmetric positive definite with smallest eigenvalue ``spec.min_eig``.
    """
    check_key("key", key)
    spec = HubSpec() if spec is None else spec
    if not isinstance(spec, HubSpec):
        raise TypeError(f"spec must be a HubSpec, got {type(spec).__name__}")
    return _hub_precisions(key, spec)


def _edges(u_edge, u_mag, u_sign, prob, low, high):
    """Upper-triangle Bernoulli(prob) edges with signed uniform weights, mirrored.

    Takes the uniforms (one draw per population for every random part: a few large
    draws compile much faster than many small ones)."""
    p = u_edge.shape[-1]
    upper = jnp.triu(jnp.ones((p, p), bool), 1)
    edge = upper & (u_edge < prob)
    mag = low + (high - low) * u_mag
    w = jnp.where(edge, jnp.where(u_sign < 0.5, mag, -mag), 0.0)
    return edge | edge.T, w + w.T


@eqx.filter_jit
def _hub_precisions(key, spec):
    s = spec
    p, n_pop, nc, ni = s.p, s.n_populations, s.n_common, s.n_individual
    k_perm, k_common, k_pop = jax.random.split(key, 3)
    order = jnp.argsort(jax.random.uniform(k_perm, (p,)))  # a uniform random permutation
    common = jnp.zeros(p, bool).at[order[:nc]].set(True)
    own = order[nc : nc + n_pop * ni].reshape(n_pop, ni)
    individual = jnp.zeros((n_pop, p), bool).at[jnp.arange(n_pop)[:, None], own].set(True)
    common_pair = common[:, None] | common[None, :]
    uc = jax.random.uniform(k_common, (3, p, p))
    e_common, w_common = _edges(uc[0], uc[1], uc[2], s.p_common, s.weight_low, s.weight_high)
    strength = jnp.broadcast_to(jnp.asarray(s.individual_strength), (n_pop,))
    u = jax.random.uniform(k_pop, (n_pop, 4, p, p))

    def one(uk, ind, st):
        ind_pair = (ind[:, None] | ind[None, :]) & ~common_pair
        bg_pair = ~common_pair & ~ind_pair
        # The individual and background pairs are disjoint: they share magnitudes/signs.
        e_ind, w_ind = _edges(uk[0], uk[2], uk[3], s.p_individual, s.weight_low,
                              s.weight_high)
        e_bg, w_bg = _edges(uk[1], uk[2], uk[3], s.p_background, s.weight_low, s.weight_high)
        edges = (common_pair & e_common) | (ind_pair & e_ind) | (bg_pair & e_bg)
        a = (jnp.where(common_pair, w_common, 0.0)
             + jnp.where(ind_pair, st * w_ind, 0.0)
             + jnp.where(bg_pair, w_bg, 0.0))
        return a, edges

    a, adjacency = jax.vmap(one)(u, individual, strength)
    lam_min = jnp.linalg.eigvalsh(a)[:, 0]
    if s.shared_shift:
        # One diagonal for every population: the populations differ only in their edges.
        lam_min = jnp.broadcast_to(jnp.min(lam_min), lam_min.shape)
    theta = a + (s.min_eig - lam_min)[:, None, None] * jnp.eye(p, dtype=a.dtype)
    return HubGraphs(theta, common, individual, adjacency)


def gaussian_samples(
    key: jax.Array, theta: Float[Array, "k p p"], n: int
) -> Float[Array, "k n p"]:
    """``n`` samples of ``N(0, Theta_k^{-1})`` per population (``x = L^{-T} z``).

    Args:
      key: a ``jax.random`` key (one draw for all populations).
      theta: ``(K, p, p)`` symmetric positive definite precision matrices.
      n: samples per population (static).

    Returns:
      ``(K, n, p)`` samples. A ``theta`` that is not positive definite raises (also
      inside ``jit``: its Cholesky factor is NaN).
    """
    check_key("key", key)
    check_array("theta", theta, ndim=3, dtype="floating")
    if theta.shape[1] != theta.shape[2]:
        raise ValueError(f"theta must hold square matrices (K, p, p), got shape "
                         f"{tuple(theta.shape)}")
    n = check_int("n", n, min=1)
    return _samples(key, jnp.asarray(theta), n)


@functools.partial(jax.jit, static_argnums=2)
def _samples(key, theta, n):
    chol = jnp.linalg.cholesky(theta)
    chol = eqx.error_if(chol, ~jnp.all(jnp.isfinite(chol)),
                        "theta must be positive definite (its Cholesky factor is not finite)")
    z = jax.random.normal(key, (theta.shape[0], theta.shape[1], n), theta.dtype)
    # Solve L^T x = z: Cov(x) = L^{-T} L^{-1} = Theta^{-1}.
    x = jax.vmap(lambda c, zk: jax.scipy.linalg.solve_triangular(c, zk, trans="T",
                                                                  lower=True))(chol, z)
    return jnp.swapaxes(x, 1, 2)
