r"""JIC-HD: common hub detection across Gaussian graphical models, without the graphs.

Paper: the ICML 2026 paper proposing Joint Inverse Components for Hub Detection
(JIC-HD; only its abstract was available). Data come
from ``K`` related sub-populations whose Gaussian graphical models (precision matrices
``Theta_k``) share *common hubs* -- variables highly connected in every population --
and differ by individual hubs and other edges. A hub of ``Theta_k`` carries a large
share of ``Theta_k``'s leading eigenvectors, i.e. of the *bottom* eigenvectors of the
covariance (here: correlation) matrix ``C_k``. JIC-HD finds a subspace that is "bottom"
for every population at once, the **joint minimax eigenspace**

.. math::
    \hat V \in \arg\min_{V \in \mathrm{St}(p, r)} \max_{k = 1..K}
        \operatorname{tr}(V^\top C_k V),

and scores variable ``j`` by ``s_j = sum_l V_{jl}^2`` (the squared row norm: the
share of the subspace carried by ``j``); common hubs are called by 1-D two-means on
the scores. An individual hub of population ``k`` gives a small ``tr(V^T C_k V)`` but
not a small value in the other populations, so the ``max`` rejects it; a method that
pools or scores populations separately does not. With ``K = 1`` the problem is the
bottom eigenspace (Ky Fan: the minimum is the sum of the ``r`` smallest
eigenvalues), which is the precursor IPC-HD (:func:`ipc_hd`).

What is implemented
-------------------
* **Riemannian subgradient method** (:class:`RiemannianSubgradient`, ``init``/``step``
  with :class:`MinimaxState`/:class:`MinimaxInfo`, driver :func:`solve_minimax`): the
  objective ``f(V) = max_k tr(V^T C_k V W)`` (``W`` a 0/1 diagonal of column weights)
  is a max of smooth functions; at each step the subgradient ``2 C_{k*} V W`` of the
  active population ``k*`` is projected on the tangent space of the Stiefel manifold
  (``G - V sym(V^T G)``, :func:`tangent_projection`), normalised, and the step
  ``eta_t = step_size / (t + 1)^decay`` (diminishing, ``sum eta_t = inf`` for
  ``decay <= 1``) is retracted by the **polar retraction** ``X (X^T X)^{-1/2}``
  (:func:`polar_retraction`). Several starts run together (``vmap``); the best
  objective seen over all starts and steps is kept (the subgradient method is not a
  descent method). Start 0 is a warm start (see :func:`jic_hd`), the others random.
* **Sequential (deflation) variant** (``sequential=True``): columns one at a time,
  ``v_l = argmin_{|v| = 1, v \perp v_1..v_{l-1}} max_k v^T C_k v`` by the same
  method on the sphere of the orthogonal complement. Its values
  ``m_1 <= m_2 <= ...`` are the **joint values** (for ``K = 1``: the eigenvalues).
* **Choice of r** (open in the paper's abstract; ours): the IPC-HD eigen-gap rule
  (:func:`gap_rank`) on the inverse values ``mu_i = 1/m_i`` -- the largest gap between
  consecutive leading *precision* eigenvalues, by default the relative gap
  ``r = argmax_{1 <= i <= r_max} mu_i / mu_{i+1}`` (``relative_gap=False``: the
  absolute ``mu_i - mu_{i+1}``) -- applied to the eigenvalues for IPC-HD and to the
  joint values for JIC-HD. ``rank=`` fixes ``r`` instead (traced: a sweep over ``r`` is one program,
  the eigenspace is solved on ``St(p, r_max)`` with the last ``r_max - r`` columns
  weighted 0, which leaves the optimum unchanged).
* **Screening** (:func:`screen`; ours for the joint case): IPC-HD keeps the variables
  with the largest maximal absolute off-diagonal correlation (the top
  ``ceil(screen_keep * p)``, at least ``r_max + 1``); JIC-HD screens each population
  so and keeps the **union**. Screened-out variables get score 0: the eigenspace is
  restricted to the kept coordinates (an exact projection for the subgradient method;
  for ``eigh``, their rows and columns are replaced by a diagonal above every
  eigenvalue, which decouples them). ``screen_keep = 1`` (default) screens nothing;
  screen when ``n`` is below ``p`` (the sample correlation is singular there).
* **Baselines**: :func:`ipc_hd` (one population: bottom eigenvectors by ``eigh``) and
  :func:`pooled_ipc_hd` (IPC-HD on the mean correlation). :func:`hub_auc` is the
  Mann-Whitney AUC of scores against hub labels; :func:`correlation` the sample
  correlation of the first ``n`` rows (``n`` traced: one program for every sample size).

Transformations. Everything is jittable and vmappable: over instances (``cs``), seeds
(``key``), step sizes and decay (leaves of the solver value), ``screen_keep`` and
``rank``; static are the shapes, ``r_max``, ``n_steps``, ``n_starts`` and the
``sequential``/``warm_start`` switches. Value checks (NaN, non-PSD matrices, ``rank``
or ``screen_keep`` out of range) raise at the boundary when concrete and through
``equinox.error_if`` inside ``jit``/``vmap``. Not differentiable by design: hub calls
and ranks are piecewise constant; :func:`minimax_objective` is differentiable in ``v``
and ``cs`` where the active population is unique.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.stats import ggm
>>> c = jnp.eye(6).at[0, 1:].set(0.3).at[1:, 0].set(0.3)  # variable 0 is a hub
>>> out = ggm.jic_hd(jnp.stack([c, c]), jax.random.key(0), r_max=2)
>>> int(jnp.argmax(out.scores)), bool(out.hubs[0])
(0, True)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import as_array, check_array, check_int, check_key, check_scalar

__all__ = [
    "RESULTS",
    "MinimaxProblem",
    "MinimaxState",
    "MinimaxInfo",
    "RiemannianSubgradient",
    "Eigenspace",
    "Hubs",
    "correlation",
    "polar_retraction",
    "tangent_projection",
    "minimax_objective",
    "solve_minimax",
    "joint_minimax_eigenspace",
    "screen",
    "gap_rank",
    "hub_scores",
    "two_means",
    "ipc_hd",
    "pooled_ipc_hd",
    "jic_hd",
    "hub_auc",
]

# Relative tolerance of the PSD check: sample correlations with n < p are singular,
# and float32 eigvalsh puts their zero eigenvalues at about -1e-6 * lambda_max.
_PSD_RTOL = 1e-4


# --------------------------------------------------------------------------- checks


def _check_matrices(name: str, cs, ndim: int):
    cs = as_array(name, cs)
    kind = "(K, p, p)" if ndim == 3 else "(p, p)"
    if cs.ndim != ndim or cs.shape[-1] != cs.shape[-2]:
        raise ValueError(f"{name} must have shape {kind} (square matrices), got "
                         f"{tuple(cs.shape)}")
    if cs.shape[-1] < 2 or (ndim == 3 and cs.shape[0] < 1):
        raise ValueError(f"{name} must hold at least one matrix of size p >= 2, got shape "
                         f"{tuple(cs.shape)}")
    if isinstance(cs, jax.core.Tracer):
        return cs
    check_array(name, cs)  # finite, with NaN/inf counts
    arr = np.asarray(cs, np.float64).reshape((-1, *cs.shape[-2:]))
    scale = max(1.0, float(np.abs(arr).max()))
    asym = float(np.abs(arr - np.swapaxes(arr, -1, -2)).max())
    if asym > 1e-4 * scale:
        raise ValueError(f"{name} must be symmetric, got max |C - C^T| = {asym:.3g}")
    lam = np.linalg.eigvalsh(arr)
    lo = lam[:, 0]
    bad = np.nonzero(lo < -_PSD_RTOL * np.maximum(1.0, lam[:, -1]))[0]
    if bad.size:
        k = int(bad[0])
        where = f"matrix {k} has" if ndim == 3 else "it has"
        raise ValueError(f"{name} must be positive semidefinite (correlation or covariance "
                         f"matrices): {where} smallest eigenvalue {lo[k]:.4g}")
    return cs


def _value_checks(name: str, cs):
    """The same checks inside jit (traced values): NaN/inf or a negative eigenvalue."""
    lam = jnp.linalg.eigvalsh(cs)
    neg = lam[..., 0] < -_PSD_RTOL * jnp.maximum(1.0, lam[..., -1])
    bad = ~jnp.all(jnp.isfinite(cs)) | jnp.any(neg)
    return eqx.error_if(cs, bad, f"{name} must be finite and positive semidefinite (got "
                        "NaN/inf or a negative eigenvalue)")


def _float(name, value, dtype, **bounds):
    check_scalar(name, value, **bounds)
    return jnp.asarray(value, dtype)


def _check_solver(solver):
    solver = RiemannianSubgradient() if solver is None else solver
    if not isinstance(solver, RiemannianSubgradient):
        raise TypeError(f"solver must be a RiemannianSubgradient, got {type(solver).__name__}")
    # Floats become arrays: one compiled program for every step size (and vmappable).
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.result_type(float)), solver)


# --------------------------------------------------------------------------- data


def correlation(x: Float[ArrayLike, "... n p"], n: int | Int[Array, ""] | None = None
                ) -> Float[Array, "... p p"]:
    """Sample correlation matrix of the first ``n`` rows of ``x``.

    Args:
      x: ``(..., n_max, p)`` samples (array-like); leading axes are batch axes
        (``(K, n, p)`` gives the ``K`` populations' matrices).
      n: how many leading rows to use, ``2 <= n <= n_max`` (traced: one compiled
        program for every sample size); default all.

    Returns:
      ``(..., p, p)`` correlations with unit diagonal. A constant column raises (also
      inside ``jit``), instead of a NaN row.
    """
    x = as_array("x", x)
    if x.ndim < 2 or x.shape[-2] < 2 or x.shape[-1] < 1:
        raise ValueError(f"x must have shape (..., n, p) with n >= 2 samples, got "
                         f"{tuple(x.shape)}")
    if not isinstance(x, jax.core.Tracer):
        check_array("x", x)
    n_max = x.shape[-2]
    if n is None:
        n = n_max
    elif not isinstance(n, jax.core.Tracer) and np.ndim(n) == 0:
        check_int("n", int(n) if np.asarray(n).dtype.kind in "iu" else n, min=2, max=n_max)
    return _correlation(x, jnp.asarray(n))


@jax.jit
def _correlation(x, n):
    n_max = x.shape[-2]
    w = (jnp.arange(n_max) < n).astype(x.dtype)[:, None]
    nf = n.astype(x.dtype)
    mean = jnp.sum(w * x, axis=-2, keepdims=True) / nf
    xc = w * (x - mean)
    cov = jnp.swapaxes(xc, -1, -2) @ xc / (nf - 1)
    d = jnp.diagonal(cov, axis1=-2, axis2=-1)
    d = eqx.error_if(d, (n < 2) | (n > n_max) | jnp.any(d <= 0),
                     f"correlation needs n in [2, {n_max}] (rows of x) and no constant "
                     "column (zero variance) in the rows used")
    s = jnp.sqrt(d)
    corr = cov / (s[..., :, None] * s[..., None, :])
    eye = jnp.eye(x.shape[-1], dtype=bool)
    return jnp.where(eye, 1.0, jnp.clip(corr, -1.0, 1.0))


# --------------------------------------------------------------------------- geometry


def polar_retraction(x: Float[ArrayLike, "p m"]) -> Float[Array, "p m"]:
    """The polar retraction ``X (X^T X)^{-1/2} = U W^T`` (thin SVD ``X = U S W^T``):
    the closest point of the Stiefel manifold ``St(p, m)`` to ``X`` in Frobenius norm.
    Computed from the eigendecomposition of ``X^T X`` (``m x m``).

    Args:
      x: ``(p, m)`` with ``m <= p`` and full column rank.

    Returns:
      ``(p, m)`` with orthonormal columns spanning the columns of ``x``.
    """
    x = as_array("x", x)
    if x.ndim != 2 or x.shape[1] > x.shape[0] or x.shape[1] < 1:
        raise ValueError(f"x must have shape (p, m) with 1 <= m <= p, got {tuple(x.shape)}")
    return jax.jit(_polar)(x)


def _polar(x):
    if x.shape[-1] == 1:
        return x / jnp.linalg.norm(x, axis=-2, keepdims=True)
    # X (X^T X)^{-1/2} through the eigendecomposition of the small m x m Gram matrix:
    # equal to U W^T of the thin SVD for full-rank X, and much cheaper to compile and run
    # than a p x m SVD inside the iteration.
    lam, q = jnp.linalg.eigh(x.T @ x)
    tiny = jnp.finfo(x.dtype).tiny
    return x @ ((q / jnp.sqrt(jnp.maximum(lam, tiny))) @ q.T)


def tangent_projection(v: Float[ArrayLike, "p m"], g: Float[ArrayLike, "p m"]
                       ) -> Float[Array, "p m"]:
    """Project ``g`` on the tangent space of ``St(p, m)`` at ``v`` (embedded metric):
    ``g - v sym(v^T g)``, the Riemannian gradient of a function with Euclidean gradient
    ``g``."""
    v = as_array("v", v)
    g = as_array("g", g)
    if v.ndim != 2 or g.shape != v.shape:
        raise ValueError(f"v and g must have the same shape (p, m), got {tuple(v.shape)} and "
                         f"{tuple(g.shape)}")
    return jax.jit(_tangent)(v, g)


def _tangent(v, g):
    vg = v.T @ g
    return g - v @ (0.5 * (vg + vg.T))


# --------------------------------------------------------------------------- the solver


class MinimaxProblem(NamedTuple):
    """``min_V max_k tr(V^T C_k V diag(weights))`` over orthonormal ``V`` (``p x m``)
    supported on ``support`` and orthogonal to the columns of ``basis``.

    ``weights``: ``(m,)`` column weights (1 counted, 0 free); ``support``: ``(p,)`` 0/1
    (the screened-in variables); ``basis``: ``(p, q)`` orthonormal or zero columns inside
    the support (previous deflation columns; ``q = 0`` for none).
    """

    cs: Float[Array, "k p p"]
    weights: Float[Array, " m"]
    support: Float[Array, " p"]
    basis: Float[Array, "p q"]

    def project(self, x):
        """The orthogonal projection of ``x`` (``p x m``) on the feasible coordinates."""
        return self.support[:, None] * x - self.basis @ (self.basis.T @ x)

    def values(self, v):
        """``tr(V^T C_k V W)`` for every population ``k``."""
        return jnp.einsum("kij,jl,il,l->k", self.cs, v, v, self.weights)


class MinimaxState(NamedTuple):
    """State of :class:`RiemannianSubgradient` (leading axis: the starts).

    ``v``: current iterates ``(S, p, m)``; ``best_v``/``best_value``: the best point
    seen per start and its objective; ``step``: steps taken.
    """

    v: Float[Array, "s p m"]
    best_v: Float[Array, "s p m"]
    best_value: Float[Array, " s"]
    step: Int[Array, ""]


class MinimaxInfo(NamedTuple):
    """Per-step diagnostics: the objective at the iterate before the step, the active
    population ``k*`` and the norm of the Riemannian subgradient, per start."""

    value: Float[Array, " s"]
    active: Int[Array, " s"]
    grad_norm: Float[Array, " s"]


class RiemannianSubgradient(eqx.Module):
    """Riemannian subgradient method on the Stiefel manifold, several starts at once.

    Step ``t``: ``V <- R(V - eta_t G / |G|_F)`` with ``G`` the tangent projection of the
    active population's gradient ``2 C_{k*} V W``, ``R`` the polar retraction and
    ``eta_t = step_size / (t + 1)^decay``.

    Attributes:
      step_size: first step length (Frobenius distance on the manifold; traced).
      decay: exponent of the diminishing steps (traced; ``0.5`` is the classical
        subgradient schedule, ``(0, 1]`` keeps ``sum eta_t = inf``).
      n_steps: iterations (static).
      n_starts: starts run in parallel (static); start 0 is the warm start when given.
    """

    step_size: float | Float[Array, ""] = 0.3
    decay: float | Float[Array, ""] = 0.5
    n_steps: int = eqx.field(static=True, default=300)
    n_starts: int = eqx.field(static=True, default=8)

    def __check_init__(self):
        check_int("n_steps", self.n_steps, min=1)
        check_int("n_starts", self.n_starts, min=1)
        if np.ndim(self.step_size) == 0:
            check_scalar("step_size", self.step_size, gt=0.0)
        if np.ndim(self.decay) == 0:
            check_scalar("decay", self.decay, ge=0.0)

    def init(self, key: jax.Array, problem: MinimaxProblem,
             v0: Float[Array, "p m"] | None = None) -> MinimaxState:
        """Random starts (Gaussian, projected and retracted); ``v0`` replaces start 0."""
        p, m = problem.cs.shape[-1], problem.weights.shape[0]
        dtype = problem.cs.dtype
        g = jax.random.normal(key, (self.n_starts, p, m), dtype)
        if v0 is not None:
            # A small random part keeps a warm start that lies in span(basis) feasible.
            g = g.at[0].set(v0 + 1e-3 * g[0])
        v = jax.vmap(lambda x: _polar(problem.project(x)))(g)
        value = jax.vmap(lambda x: jnp.max(problem.values(x)))(v)
        return MinimaxState(v, v, value, jnp.zeros((), jnp.int32))

    def step(self, state: MinimaxState, problem: MinimaxProblem
             ) -> tuple[MinimaxState, MinimaxInfo]:
        """One subgradient step of every start."""
        eta = self.step_size / (state.step + 1.0) ** self.decay

        def one(v):
            cv = jnp.einsum("kij,jl->kil", problem.cs, v)
            vals = jnp.einsum("kil,il,l->k", cv, v, problem.weights)
            k = jnp.argmax(vals)
            g = problem.project(2.0 * cv[k] * problem.weights)
            rg = _tangent(v, g)
            norm = jnp.linalg.norm(rg)
            tiny = jnp.finfo(v.dtype).tiny
            new = _polar(problem.project(v - eta * rg / jnp.maximum(norm, tiny)))
            # A zero subgradient is a critical point: stay.
            new = jnp.where(norm > 0, new, v)
            return new, vals[k], k, norm

        new, value, active, norm = jax.vmap(one)(state.v)
        better = value < state.best_value
        best_v = jnp.where(better[:, None, None], state.v, state.best_v)
        best_value = jnp.where(better, value, state.best_value)
        return (MinimaxState(new, best_v, best_value, state.step + 1),
                MinimaxInfo(value, active, norm))


class Eigenspace(NamedTuple):
    """A (joint) minimax eigenspace: ``v`` ``(p, m)``, its objective ``value`` =
    ``max_k values[k]``, the per-population ``values`` ``tr(V^T C_k V W)`` and a
    :data:`RESULTS` item (``nonfinite`` when NaN appeared)."""

    v: Float[Array, "p m"]
    value: Float[Array, ""]
    values: Float[Array, " k"]
    result: RESULTS


def solve_minimax(problem: MinimaxProblem, key: jax.Array,
                  solver: RiemannianSubgradient | None = None,
                  v0: Float[Array, "p m"] | None = None) -> Eigenspace:
    """The driver: ``solver.n_steps`` steps in one ``lax.scan``, the best point kept.

    Args:
      problem: a :class:`MinimaxProblem` (no checks here: this is the inner loop that
        :func:`joint_minimax_eigenspace` and :func:`jic_hd` call after validating).
      key: random starts.
      solver: the :class:`RiemannianSubgradient` value (default: its defaults).
      v0: optional warm start (start 0).

    Returns:
      :class:`Eigenspace` of the best start.
    """
    solver = RiemannianSubgradient() if solver is None else solver
    return _run(solver, problem, solver.init(key, problem, v0))


def minimax_objective(v: Float[ArrayLike, "p m"], cs: Float[ArrayLike, "k p p"]
                      ) -> Float[Array, ""]:
    """``max_k tr(V^T C_k V)`` (differentiable where the maximiser is unique)."""
    v = as_array("v", v)
    cs = as_array("cs", cs)
    if cs.ndim != 3 or v.ndim != 2 or v.shape[0] != cs.shape[-1]:
        raise ValueError(f"v must have shape (p, m) and cs (K, p, p) with the same p, got "
                         f"{tuple(v.shape)} and {tuple(cs.shape)}")
    return jnp.max(jnp.einsum("kij,jl,il->k", cs, v, v))


def _deflate(cs, support, n_cols, key, solver, warm):
    """Sequential columns: each the minimax direction in the complement of the previous."""
    p = cs.shape[-1]
    keys = jax.random.split(key, n_cols)

    def body(basis, inp):
        col, k, v0 = inp
        prob = MinimaxProblem(cs, jnp.ones(1, cs.dtype), support, basis)
        es = solve_minimax(prob, k, solver, None if warm is None else v0[:, None])
        basis = jax.lax.dynamic_update_slice(basis, es.v, (0, col))
        return basis, (es.value, es.result)

    v0s = jnp.zeros((n_cols, p), cs.dtype) if warm is None else warm.T
    basis, (values, results) = jax.lax.scan(
        body, jnp.zeros((p, n_cols), cs.dtype), (jnp.arange(n_cols), keys, v0s))
    return basis, values, jnp.all(results == RESULTS.successful)


def _bottom_eigvecs(c, support, n_cols):
    """Bottom ``n_cols`` eigenpairs of ``c`` restricted to ``support`` (screened-out rows
    and columns replaced by a diagonal above every eigenvalue of ``c``)."""
    big = 1.0 + jnp.trace(c) + jnp.max(jnp.abs(c))
    keep = support[:, None] * support[None, :]
    cm = keep * c + jnp.diag((1.0 - support) * big)
    lam, u = jnp.linalg.eigh(cm)
    return lam[:n_cols], u[:, :n_cols]


def joint_minimax_eigenspace(
    cs: Float[ArrayLike, "k p p"],
    rank: int,
    *,
    key: jax.Array,
    solver: RiemannianSubgradient | None = None,
    sequential: bool = False,
    warm_start: bool = True,
    throw: bool = True,
) -> Eigenspace:
    """The joint minimax eigenspace ``argmin_{V in St(p, rank)} max_k tr(V^T C_k V)``.

    Args:
      cs: ``(K, p, p)`` correlation (or covariance) matrices, symmetric PSD.
      rank: ``r``, ``1 <= r <= p`` (static).
      key: the random starts (same key, same result).
      solver: :class:`RiemannianSubgradient` (its step size and decay are traced).
      sequential: the deflation variant (one column at a time) instead of the joint
        Stiefel problem.
      warm_start: start 0 from the bottom eigenvectors of the mean of ``cs``.
      throw: raise when the result is not successful (NaN), also inside ``jit``.

    Returns:
      :class:`Eigenspace`. When all ``C_k`` are equal, ``value`` is the sum of the
      ``r`` smallest eigenvalues and ``v`` spans the bottom eigenspace.
    """
    cs = _check_matrices("cs", cs, 3)
    p = cs.shape[-1]
    rank = check_int("rank", rank, min=1, max=p)
    check_key("key", key)
    solver = _check_solver(solver)
    out = _joint(cs, rank, key, solver, bool(sequential), bool(warm_start))
    return raise_if_failed(out, out.result, throw)


@eqx.filter_jit
def _joint(cs, rank, key, solver, sequential, warm_start):
    cs = _value_checks("cs", cs)
    p = cs.shape[-1]
    support = jnp.ones(p, cs.dtype)
    warm = _bottom_eigvecs(jnp.mean(cs, 0), support, rank)[1] if warm_start else None
    if sequential:
        v, _, ok = _deflate(cs, support, rank, key, solver, warm)
        prob = MinimaxProblem(cs, jnp.ones(rank, cs.dtype), support,
                              jnp.zeros((p, 0), cs.dtype))
        values = prob.values(v)
        res = RESULTS.where(ok & jnp.all(jnp.isfinite(values)), RESULTS.successful,
                            RESULTS.nonfinite)
        return Eigenspace(v, jnp.max(values), values, res)
    prob = MinimaxProblem(cs, jnp.ones(rank, cs.dtype), support, jnp.zeros((p, 0), cs.dtype))
    return solve_minimax(prob, key, solver, warm)


# --------------------------------------------------------------------------- hub calls


def screen(cs: Float[ArrayLike, "k p p"], keep: float | Float[Array, ""] = 1.0,
           min_keep: int = 1) -> Bool[Array, " p"]:
    """Screening by the largest absolute correlation, per population, then the union.

    Variable ``j`` is kept in population ``k`` when ``max_{i != j} |C_k[i, j]|`` is among
    the ``max(ceil(keep * p), min_keep)`` largest (ties kept).

    Args:
      cs: ``(K, p, p)`` (or one ``(p, p)``) correlation matrices.
      keep: fraction of variables kept per population, in ``(0, 1]`` (traced).
      min_keep: the fewest kept per population (static).

    Returns:
      ``(p,)`` bool: kept in at least one population.
    """
    cs = as_array("cs", cs)
    if cs.ndim == 2:
        cs = cs[None]
    if cs.ndim != 3 or cs.shape[-1] != cs.shape[-2]:
        raise ValueError(f"cs must have shape (K, p, p), got {tuple(cs.shape)}")
    min_keep = check_int("min_keep", min_keep, min=1, max=cs.shape[-1])
    return _screen(cs, _float("keep", keep, cs.dtype, gt=0.0, le=1.0), min_keep)


@functools.partial(jax.jit, static_argnums=2)
def _screen(cs, keep, min_keep):
    keep = eqx.error_if(keep, ~((keep > 0) & (keep <= 1)), "screen_keep must be in (0, 1]")
    p = cs.shape[-1]
    off = jnp.where(jnp.eye(p, dtype=bool), 0.0, jnp.abs(cs))
    score = jnp.max(off, axis=-1)  # (K, p)
    n_keep = jnp.clip(jnp.ceil(keep * p).astype(jnp.int32), min_keep, p)
    desc = -jnp.sort(-score, axis=-1)
    cut = jnp.take_along_axis(desc, jnp.broadcast_to(n_keep - 1, (cs.shape[0], 1)), axis=-1)
    return jnp.any(score >= cut, axis=0)


def gap_rank(values: Float[ArrayLike, " r1"], relative: bool = True) -> Int[Array, ""]:
    """The eigen-gap rule on inverse values ``mu_i = 1 / m_i`` (the leading precision
    eigenvalues): ``r = argmax_{1 <= i <= r_max} mu_i / mu_{i+1}`` (``relative``, the
    default), or ``argmax mu_i - mu_{i+1}`` (the absolute gap).

    The absolute gap of inverse values favours ``r = 1`` whenever the smallest value is
    noisy (``1/m`` magnifies small ``m``); the relative gap is scale free. Measured on
    the hub model (``docs/ggm.md``) it finds the planted number of common hubs more
    often; both are offered.

    Args:
      values: ``(r_max + 1,)`` ascending, nonnegative (smallest eigenvalues, or the
        joint values of the deflation). Values below ``1e-6`` of their mean are floored
        there (a singular correlation must not give an infinite gap).
      relative: the ratio rule (static).

    Returns:
      ``r`` in ``[1, r_max]`` (an int array).
    """
    values = as_array("values", values)
    if values.ndim != 1 or values.shape[0] < 2:
        raise ValueError(f"values must be a 1-D array of r_max + 1 >= 2 values, got shape "
                         f"{tuple(values.shape)}")
    return _gap_rank(values, bool(relative))


@functools.partial(jax.jit, static_argnums=1)
def _gap_rank(values, relative):
    floor = 1e-6 * jnp.mean(jnp.abs(values)) + jnp.finfo(values.dtype).tiny
    inv = 1.0 / jnp.maximum(values, floor)
    gaps = inv[:-1] / inv[1:] if relative else inv[:-1] - inv[1:]
    return jnp.argmax(gaps).astype(jnp.int32) + 1


def hub_scores(v: Float[ArrayLike, "p m"], weights: Float[ArrayLike, " m"] | None = None
               ) -> Float[Array, " p"]:
    """``s_j = sum_l w_l V_{jl}^2``: the share of the (weighted) subspace on variable ``j``."""
    v = as_array("v", v)
    if v.ndim != 2:
        raise ValueError(f"v must have shape (p, m), got {tuple(v.shape)}")
    w = jnp.ones(v.shape[1], v.dtype) if weights is None else as_array("weights", weights)
    if w.shape != (v.shape[1],):
        raise ValueError(f"weights must have shape ({v.shape[1]},), got {tuple(w.shape)}")
    return _hub_scores(v, w)


@jax.jit
def _hub_scores(v, w):
    return jnp.sum(w * v**2, axis=1)


def two_means(scores: Float[ArrayLike, " p"]) -> tuple[Bool[Array, " p"], Float[Array, ""]]:
    """1-D two-means (the optimal split of the sorted scores into a low and a high group).

    Args:
      scores: ``(p,)`` scores, ``p >= 2``.

    Returns:
      ``(hubs, threshold)``: ``hubs = scores > threshold``, the threshold halfway
      between the two groups. Equal scores give no hub.
    """
    scores = as_array("scores", scores)
    if scores.ndim != 1 or scores.shape[0] < 2:
        raise ValueError(f"scores must be a 1-D array of p >= 2 scores, got shape "
                         f"{tuple(scores.shape)}")
    return _two_means(scores)


@jax.jit
def _two_means(scores):
    s = jnp.sort(scores)
    p = s.shape[0]
    i = jnp.arange(1, p, dtype=s.dtype)  # low group s[:i]
    cum = jnp.cumsum(s)[:-1]
    total = jnp.sum(s)
    # Within-group sum of squares = sum s^2 - cum^2 / i - (total - cum)^2 / (p - i):
    # minimising it maximises the between-group term below.
    between = cum**2 / i + (total - cum) ** 2 / (p - i)
    j = jnp.argmax(between)
    thr = 0.5 * (s[j] + s[j + 1])
    return scores > thr, thr


class Hubs(NamedTuple):
    """Output of :func:`jic_hd`, :func:`ipc_hd` and :func:`pooled_ipc_hd`.

    ``scores``: ``(p,)`` hub scores (0 for screened-out variables); ``hubs``: the
    two-means calls; ``threshold``; ``rank``: ``r`` used; ``eigenspace``: ``(p, r_max)``
    (columns ``>= r`` carry weight 0); ``values``: ``(r_max + 1,)`` eigenvalues (IPC-HD)
    or joint values (JIC-HD) the gap rule read; ``screened``: ``(p,)`` kept variables;
    ``objective``: ``max_k tr(V^T C_k V)`` over the ``r`` columns; ``result``.
    """

    scores: Float[Array, " p"]
    hubs: Bool[Array, " p"]
    threshold: Float[Array, ""]
    rank: Int[Array, ""]
    eigenspace: Float[Array, "p r"]
    values: Float[Array, " r1"]
    screened: Bool[Array, " p"]
    objective: Float[Array, ""]
    result: RESULTS


def _check_rank_args(p, r_max, rank, dtype_int=jnp.int32):
    r_max = check_int("r_max", r_max, min=1, max=p - 1)
    if rank is None:
        return r_max, None
    if not isinstance(rank, jax.core.Tracer):
        if np.ndim(rank) != 0 or np.asarray(rank).dtype.kind not in "iu":
            raise TypeError(f"rank must be an int (or None for the gap rule), got {rank!r}")
        check_int("rank", int(rank), min=1, max=r_max)
    return r_max, jnp.asarray(rank, dtype_int)


def _checked_rank(rank, r_max):
    return eqx.error_if(rank, (rank < 1) | (rank > r_max), f"rank must be in [1, {r_max}]")


def _finish(v, weights, values, rank, screened, objective, ok):
    # The SVD of the polar retraction leaves rounding-level mass (~1e-16) on screened-out
    # rows; their score is exactly 0 by definition.
    scores = jnp.where(screened, jnp.sum(weights * v**2, axis=1), 0.0)
    hubs, thr = _two_means(scores)
    finite = ok & jnp.all(jnp.isfinite(scores)) & jnp.isfinite(objective)
    res = RESULTS.where(finite, RESULTS.successful, RESULTS.nonfinite)
    return Hubs(scores, hubs, thr, rank, v, values, screened, objective, res)


def ipc_hd(
    c: Float[ArrayLike, "p p"],
    *,
    r_max: int = 8,
    rank: int | Int[Array, ""] | None = None,
    screen_keep: float | Float[Array, ""] = 1.0,
    relative_gap: bool = True,
    throw: bool = True,
) -> Hubs:
    """IPC-HD, one population: screening, the gap rule, bottom eigenvectors, two-means.

    Args:
      c: ``(p, p)`` correlation matrix (symmetric PSD).
      r_max: the largest ``r`` the gap rule considers, ``1 <= r_max <= p - 1`` (static).
      rank: fix ``r`` (traced int in ``[1, r_max]``) instead of the gap rule.
      screen_keep: fraction kept by :func:`screen` (traced, ``(0, 1]``).
      relative_gap: the ratio form of the gap rule (:func:`gap_rank`; static).
      throw: raise on a non-finite result.

    Returns:
      :class:`Hubs`.
    """
    c = _check_matrices("c", c, 2)
    r_max, rank = _check_rank_args(c.shape[-1], r_max, rank)
    keep = _float("screen_keep", screen_keep, c.dtype, gt=0.0, le=1.0)
    out = _ipc(c, r_max, rank, keep, bool(relative_gap))
    return raise_if_failed(out, out.result, throw)


def pooled_ipc_hd(cs: Float[ArrayLike, "k p p"], **kwargs) -> Hubs:
    """IPC-HD on the mean correlation ``(1/K) sum_k C_k`` (the pooled baseline).

    Args:
      cs: ``(K, p, p)`` correlation matrices (checked one by one when concrete; inside
        ``jit`` the value check runs on their mean, which is PSD and finite exactly when
        they all are, up to cancellation).
      **kwargs: as :func:`ipc_hd` (``r_max``, ``rank``, ``screen_keep``,
        ``relative_gap``, ``throw``).

    Returns:
      :class:`Hubs`.
    """
    cs = _check_matrices("cs", cs, 3)
    return ipc_hd(jnp.mean(cs, axis=0), **kwargs)


@functools.partial(jax.jit, static_argnums=(1, 4))
def _ipc(c, r_max, rank, keep, relative_gap):
    c = _value_checks("c", c)
    support = _screen(c[None], keep, r_max + 1)
    lam, u = _bottom_eigvecs(c, support.astype(c.dtype), r_max + 1)
    r = _gap_rank(lam, relative_gap) if rank is None else _checked_rank(rank, r_max)
    weights = (jnp.arange(r_max) < r).astype(c.dtype)
    v = u[:, :r_max]
    return _finish(v, weights, lam, r, support, jnp.sum(weights * lam[:r_max]), True)


def jic_hd(
    cs: Float[ArrayLike, "k p p"],
    key: jax.Array,
    *,
    r_max: int = 8,
    rank: int | Int[Array, ""] | None = None,
    screen_keep: float | Float[Array, ""] = 1.0,
    solver: RiemannianSubgradient | None = None,
    sequential: bool = False,
    warm_start: bool = True,
    relative_gap: bool = True,
    throw: bool = True,
) -> Hubs:
    """JIC-HD: common hubs of ``K`` populations from their correlation matrices.

    Steps: screen each population and keep the union (:func:`screen`); the joint values
    ``m_1..m_{r_max+1}`` by deflation; ``r`` by the gap rule on ``1/m`` (or ``rank``);
    the joint minimax eigenspace on the kept coordinates (Stiefel problem with ``r``
    counted columns; with ``sequential=True`` the deflation columns themselves); scores
    ``sum_l V_{jl}^2``; two-means. Warm starts (``warm_start``): the bottom eigenvectors
    of the screened mean correlation (start 0 of every solve) and, for the joint
    problem, the deflation solution (start 1, when ``n_starts >= 2``).

    Args:
      cs: ``(K, p, p)`` correlation matrices (symmetric PSD; :func:`correlation`).
      key: random starts (same key, same result).
      r_max: the largest ``r`` considered, ``1 <= r_max <= p - 1`` (static).
      rank: fix ``r`` (traced int in ``[1, r_max]``) instead of the gap rule.
      screen_keep: per-population fraction kept by screening (traced, ``(0, 1]``).
      solver: the :class:`RiemannianSubgradient` value (step size, decay traced).
      sequential: use the deflation columns as the eigenspace (the sequential variant).
      warm_start: use the warm starts above.
      relative_gap: the ratio form of the gap rule (:func:`gap_rank`; static).
      throw: raise on a non-finite result (also inside ``jit``).

    Returns:
      :class:`Hubs`.
    """
    cs = _check_matrices("cs", cs, 3)
    r_max, rank = _check_rank_args(cs.shape[-1], r_max, rank)
    check_key("key", key)
    keep = _float("screen_keep", screen_keep, cs.dtype, gt=0.0, le=1.0)
    solver = _check_solver(solver)
    out = _jic(cs, key, r_max, rank, keep, solver, bool(sequential), bool(warm_start),
               bool(relative_gap))
    return raise_if_failed(out, out.result, throw)


@eqx.filter_jit
def _jic(cs, key, r_max, rank, keep, solver, sequential, warm_start, relative_gap):
    cs = _value_checks("cs", cs)
    p = cs.shape[-1]
    dtype = cs.dtype
    screened = _screen(cs, keep, r_max + 1)
    support = screened.astype(dtype)
    warm = (_bottom_eigvecs(jnp.mean(cs, 0), support, r_max + 1)[1] if warm_start
            else None)
    k_defl, k_joint = jax.random.split(key)
    v_seq, values, ok = _deflate(cs, support, r_max + 1, k_defl, solver, warm)
    r = _gap_rank(values, relative_gap) if rank is None else _checked_rank(rank, r_max)
    weights = (jnp.arange(r_max) < r).astype(dtype)
    prob = MinimaxProblem(cs, weights, support, jnp.zeros((p, 0), dtype))
    if sequential:
        v = v_seq[:, :r_max]
        objective = jnp.max(prob.values(v))
    else:
        init = solver.init(k_joint, prob, None if warm is None else warm[:, :r_max])
        if warm_start and solver.n_starts >= 2:
            init = init._replace(v=init.v.at[1].set(v_seq[:, :r_max]),
                                 best_v=init.best_v.at[1].set(v_seq[:, :r_max]),
                                 best_value=init.best_value.at[1].set(
                                     jnp.max(prob.values(v_seq[:, :r_max]))))
        es = _run(solver, prob, init)
        v, objective, ok = es.v, es.value, ok & (es.result == RESULTS.successful)
    return _finish(v, weights, values, r, screened, objective, ok)


def _run(solver, problem, state):
    """``solve_minimax`` from a given state: the scan, then the best point of all starts."""
    state, _ = jax.lax.scan(lambda s, _: solver.step(s, problem), state, None,
                            length=solver.n_steps)
    last = jax.vmap(lambda x: jnp.max(problem.values(x)))(state.v)
    better = last < state.best_value
    best_v = jnp.where(better[:, None, None], state.v, state.best_v)
    best_value = jnp.where(better, last, state.best_value)
    v = best_v[jnp.argmin(best_value)]
    values = problem.values(v)
    finite = jnp.all(jnp.isfinite(v)) & jnp.all(jnp.isfinite(values))
    return Eigenspace(v, jnp.max(values), values,
                      RESULTS.where(finite, RESULTS.successful, RESULTS.nonfinite))


# --------------------------------------------------------------------------- metric


def hub_auc(scores: Float[ArrayLike, "... p"], positive: Bool[ArrayLike, "... p"],
            negative: Bool[ArrayLike, "... p"] | None = None) -> Float[Array, "..."]:
    """Mann-Whitney AUC: ``P(s_i > s_j) + P(s_i = s_j) / 2`` over positive ``i`` and
    negative ``j``.

    Args:
      scores: ``(..., p)`` scores (higher: more hub-like); leading axes are a batch.
      positive: ``(..., p)`` bool, the true hubs (broadcast against ``scores``).
      negative: ``(..., p)`` bool, the variables to rank them against (default: every
        non-positive variable; the individual hubs for common-vs-individual separation).

    Returns:
      the AUC in ``[0, 1]``, one per batch element. No positive or no negative raises
      (also inside ``jit``).
    """
    scores = as_array("scores", scores)
    positive = jnp.asarray(positive, bool)
    negative = ~positive if negative is None else jnp.asarray(negative, bool)
    try:
        shape = jnp.broadcast_shapes(scores.shape, positive.shape, negative.shape)
    except ValueError:
        shape = None
    if scores.ndim < 1 or shape is None or shape[-1] != scores.shape[-1]:
        raise ValueError(f"scores, positive and negative must broadcast to one shape (..., p), "
                         f"got {tuple(scores.shape)}, {tuple(positive.shape)}, "
                         f"{tuple(negative.shape)}")
    return _auc(*(jnp.broadcast_to(a, shape) for a in (scores, positive, negative)))


@jax.jit
def _auc(scores, positive, negative):
    n_pairs = jnp.sum(positive, -1) * jnp.sum(negative, -1)
    n_pairs = eqx.error_if(n_pairs, jnp.any(n_pairs == 0), "hub_auc needs at least one "
                           "positive and one negative variable")
    diff = scores[..., :, None] - scores[..., None, :]
    win = jnp.where(diff > 0, 1.0, jnp.where(diff == 0, 0.5, 0.0))
    pair = positive[..., :, None] & negative[..., None, :]
    return jnp.sum(jnp.where(pair, win, 0.0), axis=(-2, -1)) / n_pairs
