r"""Streaming ATE estimation with kernel-balancing coresets in bounded memory.

Paper: the ICML 2026 paper on model-agnostic streaming ATE estimation by
discrepancy-theory coresets (only its abstract was available). Units arrive one at a
time as ``(x_t, T_t, y_t)`` (covariates, binary treatment, outcome); memory may not grow
with the stream, and both the treatment assignment ``e(x) = P(T = 1 | x)`` and the
outcome process may shift mid-stream. The estimand is ``ATE = E[y(1) - y(0)]``.

The method, as formalised here
------------------------------
**Kernel balancing objective.** With a characteristic kernel ``k`` (its RKHS ``H``
rich enough that matching mean embeddings matches distributions), arm ``a``'s
balancing weights ``w`` on the arm's units solve

    (1)  min_{w in simplex}  MMD^2(w) + lambda * sum_i w_i^2 / pi_i,
         MMD^2(w) = || sum_i w_i k(x_i, .) - sum_j c_j k(z_j, .) ||_H^2
                  = w' K_aa w - 2 w' K_az c + c' K_zz c,

``c`` the target's weights (all units: ``c_j = 1/n``) and ``pi_i`` the arm's own
empirical weights (``1/n_a``). The ridge ``lambda sum_i w_i^2 / pi_i`` equals
``lambda n_a ||u||^2`` on unit weights ``u``, so it is ``lambda`` at uniform weights
whatever the arm size, and stays the same problem when units are grouped into coreset
points (see below). The estimate is

    (2)  ATE_hat = sum_i w^1_i y_i - sum_i w^0_i y_i,

a difference of weighted outcome means: no propensity model, and, since ``E[y | x, a]``
is balanced for every function in ``H`` up to ``||f||_H MMD(w)``, no outcome model.
:func:`balance_weights` solves (1) by accelerated projected gradient (FISTA with a
sort-based simplex projection, step ``1/L`` with ``L`` from a power iteration), a fixed
``max_steps`` loop (so it is reverse-differentiable) that reports ``RESULTS`` from its
gradient-mapping residual.

**Coresets.** The stream of each arm, and the stream of all units, is compressed by
merge-reduce (:func:`coreset_insert`): level ``l`` holds at most ``m`` points of
weight ``2^l``; a full level is *halved* to ``m/2`` points which move to level ``l+1``.
The stored measure ``sum_l 2^l sum_{p in level l} delta_p`` has total mass exactly
``n`` at all times, and at most ``m (1 + log2(n / m)) + m`` points are stored. Halving
(:class:`KernelHalving`) is Dwivedi & Mackey's kernel halving (the self-balancing
Hilbert walk of kernel thinning's KT-SPLIT with one round; also the halving step of
Compress++): the points are paired in arrival order ``(a_i, b_i)``, ``f_i = k(a_i, .) -
k(b_i, .)``, ``psi_{i-1} = sum_{j<i} eps_j f_j``, ``alpha_i = <psi_{i-1}, f_i>``,

    (3)  P(eps_i = +1) = (1 - alpha_i / t_i) / 2,
         t_i = max(b_i sigma_{i-1} sqrt(2 log(2 / delta_i)), b_i^2),  b_i = ||f_i||,
         sigma_i^2 = sigma_{i-1}^2 + b_i^2 (1 + (b_i^2 - 2 alpha_i) sigma_{i-1}^2 / t_i^2)^+,

keeping ``a_i`` when ``eps_i = +1`` and ``b_i`` otherwise, so that ``||psi||_H``,
i.e. the MMD between the kept half and the whole, stays ``O(sqrt(log m))`` times a
kernel constant. ``delta_i = 2 delta / m`` (a union bound over the pairs;
kernel thinning's default ``delta = 1/2``). :class:`GreedyHalving` is the
deterministic sign ``eps_i = -sign(alpha_i)`` and :class:`RandomHalving` uniform
sub-sampling, the baseline that kernel halving improves on.

**Balancing on coresets.** :func:`estimate` solves (1) on the treated coreset against
the all-units coreset, and the same for the control coreset, with ``pi_p`` and ``c_q``
the coreset points' shares of their mass (``2^l / n_a``, ``2^l / n``); a coreset point
of weight ``2^l`` stands for ``2^l`` units with equal unit weights, so (1) on the
coreset is (1) on the stream restricted to such weights and equals the offline
problem when nothing has been halved (:func:`offline_ate`, tested). Then (2).

Choices where the abstract leaves the method open (each a field of
:class:`StreamingATE`): the kernel (:class:`Gaussian` with unit lengthscale on
standardised covariates by default; :class:`Laplace` also characteristic), the ridge
``lambda = 1e-4``, ``m = 32``, kernel halving with ``delta = 1/2`` and pairs in arrival
order (no KT-SWAP refinement), one base ``key`` shared by the three coresets (a
halving's key is the level and that level's halving count folded into it: two coresets
that see the same points halve them identically, which makes a paired randomised
stream's estimate exact). *Which covariates enter the balance* is the user's choice:
when assignment and outcome shift together in time, stream time is a confounder and
must be one of the covariates (:func:`make_shifting_stream` appends it, standardised).

Baselines: :func:`online_ipw_step` (Hajek IPW with a logistic propensity fitted online
by SGD, each unit weighted by the propensity predicted on its arrival; the naive
difference of means from the same running sums) and :func:`offline_ate` (problem (1)
on all data: memory ``O(n)``, time ``O(n^2)`` per solve).

API
---
:class:`StreamingATE` is the estimator (a final equinox Module: kernel, halving rule,
ridge as traced leaves; ``m``, ``levels``, ``max_steps`` static). ``init(est, dim,
key) -> StreamState``, ``step(est, state, x, treat, y) -> (StreamState, StepInfo)``
(jitted, static-shape buffers of ``levels x m`` points per coreset), ``estimate(est,
state) -> Estimate``, and :func:`run`, a thin driver (``lax.scan`` over checkpoint
segments of ``fori_loop``s over units) that returns the estimates at the checkpoints
and the peak number of stored points. :func:`balance_weights`, :func:`estimate` and
:func:`offline_ate` are differentiable in the outcomes (linear), the ridge, the points
and the kernel's parameters (through the unrolled solver); the coreset's choice of
points is discrete, and :func:`run` (a ``while_loop`` cascade) is not
reverse-differentiable.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.stats import streaming_ate as sa
>>> s = sa.make_shifting_stream(jax.random.key(0), 512)
>>> est = sa.StreamingATE(sa.Gaussian(1.0), m=16, levels=sa.levels_for(512, 16))
>>> res = sa.run(est, s.x, s.treat, s.y, jax.random.key(1), checkpoints=(256, 512))
>>> res.ate.shape, int(res.peak_stored) < 3 * 512
((2,), True)
"""

from __future__ import annotations

import abc
import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import as_array, check_array, check_int, check_key, check_scalar

__all__ = [
    "AbstractKernel",
    "Gaussian",
    "Laplace",
    "AbstractHalving",
    "KernelHalving",
    "GreedyHalving",
    "RandomHalving",
    "CoresetState",
    "coreset_init",
    "coreset_insert",
    "coreset_measure",
    "capacity",
    "levels_for",
    "BalanceSolution",
    "balance_weights",
    "StreamingATE",
    "StreamState",
    "StepInfo",
    "Estimate",
    "StreamResult",
    "init",
    "step",
    "estimate",
    "run",
    "offline_ate",
    "IPWState",
    "online_ipw_init",
    "online_ipw_step",
    "online_ipw_estimate",
    "Stream",
    "make_shifting_stream",
]


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _float(x: Any) -> Array:
    if _is_tracer(x):
        return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(float)
    if isinstance(x, int | float) and not isinstance(x, bool):
        return jnp.asarray(x, jnp.zeros((), float).dtype)
    return as_array("value", x)


def _positive(name: str, value: Any) -> None:
    if not _is_tracer(value):
        arr = np.asarray(value)
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name} must be finite and > 0, got {value}")


# --------------------------------------------------------------------------- kernels


class AbstractKernel(eqx.Module):
    """A positive-definite kernel ``k(x, y)``; subclass and define ``__call__``."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"], y: Float[Array, " d"]) -> Float[Array, ""]:
        """``k(x, y)`` for two points."""

    def gram(self, xs: Float[Array, "n d"], ys: Float[Array, "p d"]) -> Float[Array, "n p"]:
        """The matrix ``k(xs_i, ys_j)``."""
        return jax.vmap(lambda a: jax.vmap(lambda b: self(a, b))(ys))(xs)


class Gaussian(AbstractKernel):
    """``exp(-||x - y||^2 / (2 lengthscale^2))`` (characteristic on ``R^d``)."""

    lengthscale: Float[Array, ""] = eqx.field(default=1.0, converter=_float)

    def __check_init__(self):
        _positive("lengthscale", self.lengthscale)

    def __call__(self, x, y):
        return jnp.exp(-jnp.sum((x - y) ** 2) / (2.0 * self.lengthscale**2))


class Laplace(AbstractKernel):
    """``exp(-||x - y|| / lengthscale)`` (characteristic on ``R^d``)."""

    lengthscale: Float[Array, ""] = eqx.field(default=1.0, converter=_float)

    def __check_init__(self):
        _positive("lengthscale", self.lengthscale)

    def __call__(self, x, y):
        # The norm's gradient at x = y is undefined; the safe form has gradient 0 there.
        d2 = jnp.sum((x - y) ** 2)
        safe = jnp.where(d2 > 0, d2, 1.0)
        return jnp.exp(-jnp.where(d2 > 0, jnp.sqrt(safe), 0.0) / self.lengthscale)


# --------------------------------------------------------------------------- halving


class AbstractHalving(eqx.Module):
    """A rule that keeps ``m/2`` of ``m`` points (a coreset's reduce step)."""

    @abc.abstractmethod
    def halve(self, kernel: AbstractKernel, points: Float[Array, "m d"], key: jax.Array
              ) -> Int[Array, " h"]:
        """Indices of the ``m/2`` kept points."""


def _pair_gram(kernel, points):
    """``D[i, j] = <f_i, f_j>``, ``f_i = k(a_i, .) - k(b_i, .)`` for consecutive pairs."""
    a, b = points[0::2], points[1::2]
    return (kernel.gram(a, a) - kernel.gram(a, b) - kernel.gram(b, a) + kernel.gram(b, b))


def _walk(gram_d, key, delta, greedy):
    h = gram_d.shape[0]
    dtype = gram_d.dtype
    log_term = jnp.log(2.0 * h / delta) if not greedy else 0.0
    us = jax.random.uniform(key, (h,), dtype=dtype)

    def body(carry, i):
        eps, sig2 = carry
        alpha = eps @ gram_d[:, i]
        b2 = jnp.maximum(gram_d[i, i], 0.0)
        if greedy:
            e = jnp.where(alpha > 0, -1.0, 1.0).astype(dtype)
            sig2n = sig2
        else:
            b = jnp.sqrt(b2)
            t = jnp.maximum(b * jnp.sqrt(sig2 * 2.0 * log_term), b2)
            pos = t > 0
            t_safe = jnp.where(pos, t, 1.0)
            p_plus = jnp.where(pos, jnp.clip(0.5 * (1.0 - alpha / t_safe), 0.0, 1.0), 0.5)
            e = jnp.where(us[i] < p_plus, 1.0, -1.0).astype(dtype)
            grow = jnp.maximum(1.0 + (b2 - 2.0 * alpha) * sig2 / t_safe**2, 0.0)
            sig2n = sig2 + jnp.where(pos, b2 * grow, 0.0)
        return (eps.at[i].set(e), sig2n), e

    init = (jnp.zeros(h, dtype), jnp.zeros((), dtype))
    _, signs = jax.lax.scan(body, init, jnp.arange(h))
    return jnp.where(signs > 0, 2 * jnp.arange(h), 2 * jnp.arange(h) + 1)


class KernelHalving(AbstractHalving):
    """Dwivedi & Mackey's kernel halving: the randomised self-balancing walk (3) over
    consecutive pairs with failure level ``delta`` (traced; kernel thinning's 1/2)."""

    delta: Float[Array, ""] = eqx.field(default=0.5, converter=_float)

    def __check_init__(self):
        if not _is_tracer(self.delta):
            d = np.asarray(self.delta)
            if not (np.all(d > 0) and np.all(d <= 1)):
                raise ValueError(f"delta must be in (0, 1], got {self.delta}")

    def halve(self, kernel, points, key):
        return _walk(_pair_gram(kernel, points), key, self.delta, greedy=False)


class GreedyHalving(AbstractHalving):
    """Deterministic kernel halving: ``eps_i = -sign(alpha_i)`` (``+1`` on ties)."""

    def halve(self, kernel, points, key):
        return _walk(_pair_gram(kernel, points), key, 1.0, greedy=True)


class RandomHalving(AbstractHalving):
    """Uniform halving: one point of each consecutive pair at random (the baseline)."""

    def halve(self, kernel, points, key):
        h = points.shape[0] // 2
        return 2 * jnp.arange(h) + jax.random.bernoulli(key, 0.5, (h,)).astype(jnp.int32)


# --------------------------------------------------------------------------- coresets


class CoresetState(NamedTuple):
    """Merge-reduce buffers: level ``l`` holds ``counts[l] <= m`` points of weight ``2^l``."""

    points: Float[Array, "levels m d"]
    values: Float[Array, "levels m"]  # a payload carried with each point (outcomes)
    counts: Int[Array, " levels"]
    halvings: Int[Array, " levels"]  # halvings done at each level (the keys' counter)
    n: Int[Array, ""]  # units inserted
    overflow: Bool[Array, ""]  # a push into a full top level happened (mass lost)
    kernel_evals: Int[Array, ""]  # kernel evaluations spent halving (a cost counter)


def _check_m(m):
    m = check_int("m", m, min=2)
    if m % 2:
        raise ValueError(f"m must be an even int >= 2 (a level of m points is halved), got {m}")
    return m


def capacity(m: int, levels: int) -> int:
    """Units a ``levels x m`` merge-reduce buffer takes before its top level overflows.

    Level ``l`` receives ``m/2`` points (``m 2^(l-1)`` units) per halving below it; the
    top level takes two such pushes, and the third (at unit ``3 m 2^(levels-2)``)
    overflows. One level holds ``m`` units."""
    m = _check_m(m)
    levels = check_int("levels", levels, min=1)
    return m if levels == 1 else 3 * m * 2 ** (levels - 2) - 1


def levels_for(n: int, m: int) -> int:
    """The fewest levels whose :func:`capacity` holds ``n`` units."""
    n = check_int("n", n, min=1)
    m = _check_m(m)
    levels = 1
    while capacity(m, levels) < n:
        levels += 1
    return levels


def coreset_init(m: int, levels: int, dim: int, dtype: Any = None) -> CoresetState:
    """Empty buffers for ``levels`` levels of ``m`` points in ``R^dim``."""
    m = _check_m(m)
    levels = check_int("levels", levels, min=1)
    dim = check_int("dim", dim, min=1)
    dtype = jnp.zeros((), float).dtype if dtype is None else dtype
    z = jnp.zeros((), jnp.int32)
    return CoresetState(jnp.zeros((levels, m, dim), dtype), jnp.zeros((levels, m), dtype),
                        jnp.zeros(levels, jnp.int32), jnp.zeros(levels, jnp.int32), z,
                        jnp.zeros((), bool), z)


def coreset_insert(state: CoresetState, x: Float[Array, " d"], value: Float[Array, ""],
                   kernel: AbstractKernel, halving: AbstractHalving, key: jax.Array,
                   value_scale: float | Float[Array, ""] = 0.0) -> CoresetState:
    """Insert one unit (weight 1) and cascade: while level ``l`` is full, halve it into
    level ``l + 1``. The halving at level ``l`` uses ``fold_in(fold_in(key, l),
    halvings[l])``. The halving sees ``(x, value_scale * value)`` (``value_scale = 0``:
    the covariates only). Static shapes (one ``lax.while_loop``); jittable, vmappable."""
    n_lev, m, d = state.points.shape
    if jnp.shape(x) != (d,) or jnp.shape(value) != ():
        raise ValueError(f"x must have shape ({d},) and value shape (), got "
                         f"{tuple(jnp.shape(x))} and {tuple(jnp.shape(value))}")
    return _coreset_insert(state, x, value, kernel, halving, key, value_scale)


@eqx.filter_jit
def _coreset_insert(state, x, value, kernel, halving, key, value_scale):
    # Module-level jit: a second call compiles nothing (the loop's closures).
    n_lev, m, d = state.points.shape
    h = m // 2
    x = jnp.asarray(x, state.points.dtype)
    c0 = state.counts[0]
    over0 = c0 >= m
    pts = state.points.at[0, jnp.minimum(c0, m - 1)].set(x)
    vals = state.values.at[0, jnp.minimum(c0, m - 1)].set(jnp.asarray(value, state.values.dtype))
    st = state._replace(points=pts, values=vals, counts=state.counts.at[0].add(1),
                        n=state.n + 1, overflow=state.overflow | over0)

    def cond(c):
        s, lev = c
        return (lev < n_lev - 1) & (s.counts[jnp.minimum(lev, n_lev - 1)] >= m)

    def body(c):
        s, lev = c
        k = jax.random.fold_in(jax.random.fold_in(key, lev), s.halvings[lev])
        feats = jnp.concatenate([s.points[lev], value_scale * s.values[lev][:, None]], 1)
        keep = halving.halve(kernel, feats, k)
        pos = s.counts[lev + 1]
        over = pos + h > m
        start = jnp.minimum(pos, m - h)
        new_p = jax.lax.dynamic_update_slice(s.points[lev + 1], s.points[lev][keep], (start, 0))
        new_v = jax.lax.dynamic_update_slice(s.values[lev + 1], s.values[lev][keep], (start,))
        counts = s.counts.at[lev].set(0).at[lev + 1].set(jnp.minimum(pos + h, m))
        s = s._replace(points=s.points.at[lev + 1].set(new_p),
                       values=s.values.at[lev + 1].set(new_v), counts=counts,
                       halvings=s.halvings.at[lev].add(1), overflow=s.overflow | over,
                       kernel_evals=s.kernel_evals + 4 * h * h)
        return s, lev + 1

    st, _ = jax.lax.while_loop(cond, body, (st, jnp.zeros((), jnp.int32)))
    return st._replace(counts=jnp.minimum(st.counts, m))


def coreset_measure(state: CoresetState) -> tuple[Float[Array, "p d"], Float[Array, " p"],
                                                  Float[Array, " p"]]:
    """The stored measure, flattened: ``(points, values, mass)`` with ``mass = 2^l`` for
    stored points and 0 for empty slots (``mass.sum() == n`` without overflow)."""
    n_lev, m, d = state.points.shape
    slot = jnp.arange(m)[None, :] < state.counts[:, None]
    w = (2.0 ** jnp.arange(n_lev, dtype=state.values.dtype))[:, None]
    mass = jnp.where(slot, w, 0.0)
    return state.points.reshape(n_lev * m, d), state.values.reshape(-1), mass.reshape(-1)


# --------------------------------------------------------------------------- balancing


class BalanceSolution(NamedTuple):
    """Weights solving (1), the attained ``MMD^2(w)``, and the solver's status."""

    weights: Float[Array, " p"]
    mmd2: Float[Array, ""]
    residual: Float[Array, ""]  # the gradient-mapping residual ||w - P(w - g/L)||_1
    result: RESULTS


def _project_simplex(v, mask):
    # Sort-based Euclidean projection onto {w >= 0, sum w = 1, w = 0 off the mask}:
    # entries off the mask are set to max(v) - 2, below the threshold theta >= max(v) - 1,
    # so they get 0 and do not change theta.
    vmax = jnp.max(jnp.where(mask, v, -jnp.inf))
    vm = jnp.where(mask, v, vmax - 2.0)
    u = jnp.sort(vm)[::-1]
    css = jnp.cumsum(u)
    k = jnp.arange(1, v.shape[0] + 1, dtype=v.dtype)
    ok = u - (css - 1.0) / k > 0
    rho = jnp.max(jnp.where(ok, jnp.arange(v.shape[0]), 0))
    theta = (css[rho] - 1.0) / (rho + 1.0)
    return jnp.where(mask, jnp.maximum(vm - theta, 0.0), 0.0)


def balance_weights(
    kernel: AbstractKernel,
    x: Float[ArrayLike, "p d"],
    share: Float[ArrayLike, " p"],
    target: Float[ArrayLike, "q d"],
    target_share: Float[ArrayLike, " q"],
    ridge: float | Float[Array, ""] = 1e-4,
    *,
    max_steps: int = 500,
    tol: float | Float[Array, ""] = 1e-4,
    throw: bool = False,
) -> BalanceSolution:
    """Simplex weights on ``x`` whose kernel mean matches the target's, problem (1).

    Args:
      kernel: an :class:`AbstractKernel` (its parameters traced).
      x: the arm's points; ``share``: their empirical weights ``pi`` (non-negative, sum
        1; zero marks an empty slot, which gets weight 0).
      target: the target's points; ``target_share``: their weights ``c`` (sum 1).
      ridge: ``lambda`` in (1) (traced, ``>= 0``).
      max_steps: FISTA iterations (static; all are run, so reverse mode works).
      tol: the residual below which the result is ``RESULTS.successful``.
      throw: raise (also inside ``jit``) when the residual is above ``tol``.

    Returns:
      :class:`BalanceSolution`. Jittable; vmappable over every array argument.
    """
    x = as_array("x", x)
    target = as_array("target", target)
    share = as_array("share", share)
    target_share = as_array("target_share", target_share)
    check_array("x", x, ndim=2)
    check_array("target", target, shape=(None, x.shape[1]))
    check_array("share", share, shape=(x.shape[0],), ge=0.0)
    check_array("target_share", target_share, shape=(target.shape[0],), ge=0.0)
    check_scalar("ridge", ridge, ge=0.0)
    max_steps = check_int("max_steps", max_steps, min=1)
    if not isinstance(kernel, AbstractKernel):
        raise TypeError(f"kernel must be an AbstractKernel (Gaussian(lengthscale), ...), "
                        f"got {type(kernel).__name__}")
    sol = _balance(kernel, x, share, target, target_share, _float(ridge), _float(tol),
                   max_steps)
    return raise_if_failed(sol, sol.result, throw)


@eqx.filter_jit
def _balance(kernel, x, share, target, target_share, ridge, tol, max_steps):
    # Module-level jit: a second call compiles nothing (the loops' closures).
    mask = share > 0
    mm = (mask[:, None] & mask[None, :]).astype(x.dtype)
    gram = kernel.gram(x, x) * mm
    b = (kernel.gram(x, target) @ target_share) * mask
    cc = target_share @ kernel.gram(target, target) @ target_share
    inv = jnp.where(mask, 1.0 / jnp.where(mask, share, 1.0), 0.0)

    # Spectral norm of the masked Gram by power iteration (a tight Lipschitz constant).
    def power(_, v):
        v = gram @ v
        return v / jnp.maximum(jnp.linalg.norm(v), 1e-30)

    v = jax.lax.fori_loop(0, 30, power, mask.astype(x.dtype) + 0.1)
    lam_max = v @ gram @ v  # differentiated too: the unrolled solve depends on the step
    lip = 2.0 * (lam_max * 1.05 + ridge * jnp.max(inv)) + 1e-12

    def grad(w):
        return 2.0 * (gram @ w - b + ridge * inv * w)

    def fista(_, c):
        w, z, t = c
        w_new = _project_simplex(z - grad(z) / lip, mask)
        t_new = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
        z_new = w_new + ((t - 1.0) / t_new) * (w_new - w)
        return w_new, z_new, t_new

    w0 = _project_simplex(share, mask)
    w, _, _ = jax.lax.fori_loop(0, max_steps, fista, (w0, w0, jnp.ones((), x.dtype)))
    residual = jnp.sum(jnp.abs(w - _project_simplex(w - grad(w) / lip, mask)))
    mmd2 = jnp.maximum(w @ gram @ w - 2.0 * w @ b + cc, 0.0)
    ok = jnp.isfinite(residual) & (residual <= tol)
    result = RESULTS.where(ok, RESULTS.successful,
                           RESULTS.where(jnp.isfinite(residual), RESULTS.max_steps_reached,
                                         RESULTS.nonfinite))
    return BalanceSolution(w, mmd2, residual, result)


# --------------------------------------------------------------------------- estimator


class StreamingATE(eqx.Module):
    """The streaming estimator: three merge-reduce coresets and balancing on them.

    ``kernel``, ``halving`` and ``ridge`` are values with traced leaves (``vmap`` over a
    lengthscale or a ridge); ``m`` (points per level, even), ``levels`` and the solver's
    ``max_steps`` are static. Defaults as in the module docstring.
    """

    kernel: AbstractKernel = Gaussian(1.0)
    halving: AbstractHalving = KernelHalving()
    m: int = eqx.field(default=32, static=True)
    levels: int = eqx.field(default=16, static=True)
    ridge: Float[Array, ""] = eqx.field(default=1e-4, converter=_float)
    outcome_scale: Float[Array, ""] = eqx.field(default=0.0, converter=_float)
    max_steps: int = eqx.field(default=500, static=True)
    tol: Float[Array, ""] = eqx.field(default=1e-4, converter=_float)

    def __check_init__(self):
        _check_m(self.m)
        check_int("levels", self.levels, min=1)
        check_int("max_steps", self.max_steps, min=1)
        if not isinstance(self.kernel, AbstractKernel):
            raise TypeError(f"kernel must be an AbstractKernel, got {type(self.kernel).__name__}")
        if not isinstance(self.halving, AbstractHalving):
            raise TypeError(f"halving must be an AbstractHalving, got "
                            f"{type(self.halving).__name__}")
        if not _is_tracer(self.ridge) and np.any(np.asarray(self.ridge) < 0):
            raise ValueError(f"ridge must be >= 0, got {self.ridge}")


class StreamState(NamedTuple):
    treated: CoresetState
    control: CoresetState
    all: CoresetState
    key: jax.Array
    peak_stored: Int[Array, ""]  # the largest number of stored points so far


class StepInfo(NamedTuple):
    stored: Int[Array, ""]  # points stored after the step (all three coresets)


class Estimate(NamedTuple):
    ate: Float[Array, ""]
    treated: BalanceSolution
    control: BalanceSolution
    n_treated: Int[Array, ""]
    n_control: Int[Array, ""]


class StreamResult(NamedTuple):
    """Estimates at the checkpoints and the memory used."""

    times: Int[Array, " c"]
    ate: Float[Array, " c"]
    mmd2_treated: Float[Array, " c"]
    mmd2_control: Float[Array, " c"]
    stored: Int[Array, " c"]  # points stored at each checkpoint
    peak_stored: Int[Array, ""]
    kernel_evals: Int[Array, ""]  # kernel evaluations spent halving, all coresets
    result: RESULTS
    state: StreamState


def _check_est(est):
    if not isinstance(est, StreamingATE):
        raise TypeError(f"estimator must be a StreamingATE, got {type(est).__name__}")


def init(est: StreamingATE, dim: int, key: jax.Array) -> StreamState:
    """Empty coresets for covariates in ``R^dim``; ``key`` drives the halvings."""
    _check_est(est)
    check_key("key", key)
    c = coreset_init(est.m, est.levels, dim)
    return StreamState(c, c, c, key, jnp.zeros((), jnp.int32))


def _stored(state):
    return (jnp.sum(state.treated.counts) + jnp.sum(state.control.counts)
            + jnp.sum(state.all.counts))


def step(est: StreamingATE, state: StreamState, x: Float[Array, " d"],
         treat: Bool[Array, ""] | Int[Array, ""], y: Float[Array, ""]
         ) -> tuple[StreamState, StepInfo]:
    """Insert one unit: into its arm's coreset (with ``y``) and the all-units coreset.

    ``x`` must have the state's dimension (checked at trace time); a non-finite ``y``
    raises inside ``jit`` (``equinox.error_if``). ``treat`` is 0/1 or a bool.
    """
    d = state.all.points.shape[-1]
    if jnp.shape(x) != (d,):
        raise ValueError(f"x must have shape ({d},) (the state's dimension), got "
                         f"{tuple(jnp.shape(x))}")
    if jnp.shape(treat) != () or jnp.shape(y) != ():
        raise ValueError(f"treat and y must be scalars, got shapes {jnp.shape(treat)} and "
                         f"{jnp.shape(y)}")
    y = eqx.error_if(jnp.asarray(y, state.all.values.dtype), ~jnp.isfinite(y),
                     "y (outcome) must be finite, got NaN or inf")
    t = jnp.asarray(treat).astype(bool)
    key = state.key
    ins = lambda c: coreset_insert(c, x, y, est.kernel, est.halving, key,  # noqa: E731
                                   est.outcome_scale)
    # Only the unit's arm changes: a cond runs one insert, not two.
    tr, co = jax.lax.cond(t, lambda a, b: (ins(a), b), lambda a, b: (a, ins(b)),
                          state.treated, state.control)
    al = coreset_insert(state.all, x, t.astype(y.dtype), est.kernel, est.halving, key)
    new = StreamState(tr, co, al, key, state.peak_stored)
    stored = _stored(new)
    return new._replace(peak_stored=jnp.maximum(state.peak_stored, stored)), StepInfo(stored)


def estimate(est: StreamingATE, state: StreamState, *, throw: bool = False) -> Estimate:
    """Balance each arm's coreset to the all-units coreset (1) and take (2).

    An arm with no unit yet gives ``ate = nan`` (no estimate exists). ``throw=True``
    raises when a solve did not reach ``est.tol``.
    """
    _check_est(est)
    xa, _, ma = coreset_measure(state.all)
    tgt = ma / jnp.maximum(jnp.sum(ma), 1.0)

    def arm(c):
        xs, ys, mass = coreset_measure(c)
        sh = mass / jnp.maximum(jnp.sum(mass), 1.0)
        sol = _balance(est.kernel, xs, sh, xa, tgt, est.ridge, est.tol, est.max_steps)
        return sol, sol.weights @ ys

    s1, m1 = arm(state.treated)
    s0, m0 = arm(state.control)
    n1, n0 = state.treated.n, state.control.n
    ate = jnp.where((n1 > 0) & (n0 > 0), m1 - m0, jnp.nan)
    out = Estimate(ate, s1, s0, n1, n0)
    if throw:
        out = s1.result.error_if(out, s1.result != RESULTS.successful)
        out = s0.result.error_if(out, s0.result != RESULTS.successful)
    return out


def _check_stream(x, treat, y):
    x = as_array("x", x)
    check_array("x", x, ndim=2)
    n = x.shape[0]
    treat = jnp.asarray(treat)
    check_array("treat", treat, shape=(n,), finite=False)
    if not (jnp.issubdtype(treat.dtype, jnp.integer) or treat.dtype == jnp.bool_
            or jnp.issubdtype(treat.dtype, jnp.floating)):
        raise TypeError(f"treat must be 0/1 or bool, got dtype {treat.dtype}")
    if not _is_tracer(treat):
        tv = np.asarray(treat)
        if not np.all((tv == 0) | (tv == 1)):
            raise ValueError("treat must be 0/1 (or bool), got other values")
    y = as_array("y", y)
    check_array("y", y, shape=(n,))
    return x, treat.astype(bool), y


def _check_checkpoints(checkpoints, n):
    if isinstance(checkpoints, int | np.integer):
        checkpoints = (int(checkpoints),)
    cps = tuple(check_int("checkpoints[i]", c, min=1) for c in checkpoints)
    if not cps:
        raise ValueError("checkpoints must be non-empty")
    if any(b <= a for a, b in zip(cps, cps[1:], strict=False)):
        raise ValueError(f"checkpoints must be strictly increasing, got {cps}")
    if cps[-1] > n:
        raise ValueError(f"checkpoints must be <= the stream length {n}, got {cps[-1]}")
    return cps


def run(
    est: StreamingATE,
    x: Float[ArrayLike, "n d"],
    treat: Int[ArrayLike, " n"],
    y: Float[ArrayLike, " n"],
    key: jax.Array,
    checkpoints: int | tuple[int, ...] | None = None,
    *,
    throw: bool = True,
) -> StreamResult:
    """Feed the stream unit by unit and estimate at the checkpoints.

    Args:
      est: the :class:`StreamingATE` estimator.
      x: ``(n, d)`` covariates in arrival order (include stream time when assignment and
        outcome may shift together). ``treat``: ``(n,)`` 0/1; ``y``: ``(n,)`` finite.
      key: a ``jax.random`` key for the halvings (same key, same result).
      checkpoints: strictly increasing unit counts (static) at which to estimate;
        default ``(n,)``.
      throw: raise (also inside ``jit``) when the stream overflows the buffers
        (``n > capacity(m, levels)``) or an outcome is not finite.

    Returns:
      :class:`StreamResult`. Jittable; vmappable over the stream, ``key`` and the
      estimator's traced leaves. Not reverse-differentiable: the merge-reduce cascade
      is a ``lax.while_loop`` (differentiate :func:`estimate` of a state, or
      :func:`offline_ate`, instead).
    """
    _check_est(est)
    check_key("key", key)
    x, treat, y = _check_stream(x, treat, y)
    cps = _check_checkpoints(x.shape[0] if checkpoints is None else checkpoints, x.shape[0])
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__}")
    return _run(est, x, treat, y, key, cps, throw)


@eqx.filter_jit
def _run(est, x, treat, y, key, cps, throw):
    y = eqx.error_if(y, ~jnp.all(jnp.isfinite(y)), "y (outcomes) must be finite, got NaN "
                     "or inf")
    starts = jnp.asarray((0,) + cps[:-1], jnp.int32)
    ends = jnp.asarray(cps, jnp.int32)

    def unit(i, st):
        return step(est, st, x[i], treat[i], y[i])[0]

    def segment(st, bounds):
        st = jax.lax.fori_loop(bounds[0], bounds[1], unit, st)
        e = estimate(est, st)
        return st, (e.ate, e.treated.mmd2, e.control.mmd2, _stored(st))

    st0 = init(est, x.shape[1], key)
    st, (ate, m1, m0, stored) = jax.lax.scan(segment, st0, jnp.stack([starts, ends], 1))
    over = st.treated.overflow | st.control.overflow | st.all.overflow
    result = RESULTS.where(over, RESULTS.max_steps_reached, RESULTS.successful)
    evals = st.treated.kernel_evals + st.control.kernel_evals + st.all.kernel_evals
    if throw:
        ate = eqx.error_if(ate, over, "the stream overflowed the coreset buffers (n > "
                           "capacity(m, levels)); raise levels (see levels_for)")
    return StreamResult(ends, ate, m1, m0, stored, st.peak_stored, evals, result, st)


# --------------------------------------------------------------------------- baselines


def offline_ate(
    kernel: AbstractKernel,
    x: Float[ArrayLike, "n d"],
    treat: Int[ArrayLike, " n"],
    y: Float[ArrayLike, " n"],
    ridge: float | Float[Array, ""] = 1e-4,
    *,
    max_steps: int = 500,
    tol: float | Float[Array, ""] = 1e-4,
) -> Estimate:
    """Problem (1) on all units (memory ``O(n)``): each arm's units, ``pi = 1/n_a``,
    balanced to all units, ``c = 1/n``; then (2). The memory-unbounded target of the
    streaming estimator. Jittable and vmappable (the arms are masks, shapes static)."""
    if not isinstance(kernel, AbstractKernel):
        raise TypeError(f"kernel must be an AbstractKernel, got {type(kernel).__name__}")
    x, t, y = _check_stream(x, treat, y)
    check_scalar("ridge", ridge, ge=0.0)
    max_steps = check_int("max_steps", max_steps, min=1)
    return _offline(kernel, x, t, y, _float(ridge), _float(tol), max_steps)


@eqx.filter_jit
def _offline(kernel, x, t, y, ridge, tol, max_steps):
    n = x.shape[0]
    tgt = jnp.full((n,), 1.0 / n, x.dtype)

    def arm(mask):
        sh = mask / jnp.maximum(jnp.sum(mask), 1.0)
        sol = _balance(kernel, x, sh, x, tgt, ridge, tol, max_steps)
        return sol, sol.weights @ y

    s1, m1 = arm(t.astype(x.dtype))
    s0, m0 = arm((~t).astype(x.dtype))
    n1 = jnp.sum(t.astype(jnp.int32))
    return Estimate(jnp.where((n1 > 0) & (n1 < n), m1 - m0, jnp.nan), s1, s0, n1, n - n1)


class IPWState(NamedTuple):
    """Online logistic propensity ``sigmoid(theta' [1, x])`` and the running sums."""

    theta: Float[Array, " d1"]
    sums: Float[Array, " 8"]  # sum T y / e, T / e, (1-T) y / (1-e), (1-T) / (1-e),
    #                           sum T y, T, (1-T) y, (1-T)
    n: Int[Array, ""]


def online_ipw_init(dim: int) -> IPWState:
    """Zero propensity parameters (``e = 1/2``) and empty sums."""
    dim = check_int("dim", dim, min=1)
    z = jnp.zeros((), float).dtype
    return IPWState(jnp.zeros(dim + 1, z), jnp.zeros(8, z), jnp.zeros((), jnp.int32))


def online_ipw_step(state: IPWState, x: Float[Array, " d"], treat: Any, y: Float[Array, ""],
                    lr: float | Float[Array, ""] = 0.05, clip: float | Float[Array, ""] = 0.02
                    ) -> IPWState:
    """Weight the unit by the propensity predicted on arrival (clipped to ``[clip, 1 -
    clip]``), then one SGD step of the logistic log-loss with rate ``lr / sqrt(1 + n /
    100)``. O(1) memory. ``lr`` and ``clip`` are traced."""
    if jnp.shape(x) != (state.theta.shape[0] - 1,):
        raise ValueError(f"x must have shape ({state.theta.shape[0] - 1},), got "
                         f"{tuple(jnp.shape(x))}")
    f = jnp.concatenate([jnp.ones((1,), state.theta.dtype), x.astype(state.theta.dtype)])
    e = jnp.clip(jax.nn.sigmoid(f @ state.theta), clip, 1.0 - clip)
    t = jnp.asarray(treat).astype(state.theta.dtype)
    y = jnp.asarray(y, state.theta.dtype)
    add = jnp.stack([t * y / e, t / e, (1 - t) * y / (1 - e), (1 - t) / (1 - e),
                     t * y, t, (1 - t) * y, 1 - t])
    p = jax.nn.sigmoid(f @ state.theta)
    rate = lr / jnp.sqrt(1.0 + state.n.astype(state.theta.dtype) / 100.0)
    theta = state.theta - rate * (p - t) * f
    return IPWState(theta, state.sums + add, state.n + 1)


def online_ipw_estimate(state: IPWState) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(ipw, naive)``: the Hajek IPW estimate and the difference of means."""
    s = state.sums
    ipw = s[0] / s[1] - s[2] / s[3]
    naive = s[4] / s[5] - s[6] / s[7]
    return ipw, naive


# --------------------------------------------------------------------------- data


class Stream(NamedTuple):
    """A synthetic stream with known effects (arrival order = stream time)."""

    x: Float[Array, "n d1"]  # covariates, then standardised stream time (last column)
    treat: Bool[Array, " n"]
    y: Float[Array, " n"]
    propensity: Float[Array, " n"]
    effect: Float[Array, " n"]  # tau(x_i)
    ate: Float[Array, ""]  # the population ATE (1.0)


def make_shifting_stream(
    key: jax.Array,
    n: int,
    shift_at: float | Float[Array, ""] = 0.5,
    strength: float | Float[Array, ""] = 1.0,
    noise: float | Float[Array, ""] = 0.5,
    randomised: bool = False,
) -> Stream:
    """Two covariates ``x ~ N(0, I_2)``; at stream time ``s = t/n >= shift_at`` both
    the assignment and the outcome shift (``strength`` scales the shifts):

    * before: ``logit e = 0.8 x_1 + 0.5 x_2^2 - 0.5``; after: ``logit e = -0.8 x_1 +
      0.8 x_1 x_2 + 0.5 x_2^2 - 0.5 + strength / 2`` (more units treated, and by other
      covariates; ``x_2^2`` is what a logistic propensity linear in ``x`` misses);
    * ``y(0) = x_1 + 0.5 sin(2 x_2) + x_2^2 + after * strength (1 + 0.5 x_2^2) + noise *
      eps``, ``y(1) = y(0) + tau(x)``, ``tau(x) = 1 + 0.5 x_1``, so ``ATE = 1`` at all
      times.

    ``x``'s last column is the stream time standardised, ``sqrt 12 (s - 1/2)``: with
    assignment and outcome both shifting at ``shift_at``, time is a confounder and
    enters the balance. ``randomised=True``: ``e = 1/2`` throughout (an RCT stream).
    The covariates' distribution does not shift. Traced in the numeric arguments.
    """
    check_key("key", key)
    n = check_int("n", n, min=2)
    check_scalar("shift_at", shift_at, ge=0.0, le=1.0)
    check_scalar("noise", noise, ge=0.0)
    kx, kt, ke = jax.random.split(key, 3)
    dtype = jnp.zeros((), float).dtype
    xc = jax.random.normal(kx, (n, 2), dtype)
    s = (jnp.arange(n, dtype=dtype) + 0.5) / n
    after = (s >= shift_at).astype(dtype)
    x1, x2 = xc[:, 0], xc[:, 1]
    before_logit = 0.8 * x1 + 0.5 * x2**2 - 0.5
    after_logit = -0.8 * x1 + 0.8 * x1 * x2 + 0.5 * x2**2 - 0.5 + 0.5 * strength
    e = jax.nn.sigmoid(jnp.where(after > 0, after_logit, before_logit))
    if randomised:
        e = jnp.full_like(e, 0.5)
    treat = jax.random.uniform(kt, (n,), dtype) < e
    tau = 1.0 + 0.5 * x1
    y0 = (x1 + 0.5 * jnp.sin(2.0 * x2) + x2**2 + after * strength * (1.0 + 0.5 * x2**2)
          + noise * jax.random.normal(ke, (n,), dtype))
    y = y0 + treat.astype(dtype) * tau
    time = math.sqrt(12.0) * (s - 0.5)
    return Stream(jnp.concatenate([xc, time[:, None]], 1), treat, y, e, tau,
                  jnp.asarray(1.0, dtype))
