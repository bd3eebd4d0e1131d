r"""Input-output learning of nonlinear systems under sparse adversarial attacks.

Paper: "Learning the input-output map of nonlinear systems under sparse
adversarial attacks" (ICML 2026): the
output of a nonlinear, partially observed system is written as a linear
combination of basis functions of the last ``L`` inputs, and the parameters are
estimated with the **l2-norm estimator**

.. math::
    \hat\Theta = \arg\min_\Theta \sum_{t} \| y_t - \Theta\, \phi(u_{t-1}, \dots, u_{t-L}) \|_2

(the sum of *non-squared* Euclidean residual norms). The paper proves that this
estimator is consistent against an adversary who sees the whole history and
attacks at each time independently with probability ``p``, as long as ``p`` is below
a threshold, with an error bound that decays with the memory length ``L``;
ordinary least squares (the squared norm) has no such guarantee.

What this module implements
---------------------------
* :func:`lagged_features` -- the regressor ``phi_t = [psi(u_{t-1}); ...; psi(u_{t-L})]``
  built from a feature map ``psi`` of one input (random features
  ``psi(u) = tanh(W u + b)``, :func:`random_features`). Per-lag features keep the
  reformulation *exact* for the benchmark systems below (the truth lies in the
  span up to the memory truncation).
* :func:`simulate` -- the benchmark system

  ``x_{t+1} = A x_t + B psi(u_t)``,  ``y_t = C x_t + e_t``

  (a Hammerstein system, nonlinear in the input, partially observed through ``C``
  with ``n_y < n_x``). Its exact input-output map is
  ``y_t = sum_{k>=1} C A^{k-1} B psi(u_{t-k})``: truncating at ``L`` lags costs
  ``O(rho(A)^L)``, the memory term of the paper's bound. Inputs are correlated
  (AR(1)), non-zero-mean and non-Gaussian (uniform innovations,
  :func:`ar_inputs`). ``e_t`` is benign noise ``N(0, sigma^2)`` except at attack
  times, drawn i.i.d. Bernoulli(``p``), where it is the adversary's disturbance
  (:func:`adversarial_disturbance`): a large, correlated, non-zero-mean signal
  that depends on the inputs (the adversary knows the full history),
  ``d_t = Delta psi(u_{t-1}) + mu + r_t`` with ``r_t`` an AR(1) process. It pushes
  least squares toward the wrong model ``Theta* + [Delta, 0, ..., 0]``.
* :func:`least_squares` and :func:`l2_norm_estimator` -- the two estimators. The
  l2-norm problem is solved by iteratively reweighted least squares (IRLS,
  weights ``1 / max(||r_t||, eps)``: each step minimises the majoriser
  ``sum_t ||r_t||^2 / (2 w_t) + w_t / 2`` of the objective, so in exact arithmetic the
  objective never increases), started from least squares, in one ``lax.while_loop``.
  **It stops on a certificate, not on the step.** The SOCP's dual is
  ``max_U sum_t <u_t, y_t>`` over ``||u_t||_2 <= 1`` and ``sum_t u_t phi_t^T = 0``;
  after a weighted solve with weights ``w`` the new residuals ``r_t`` satisfy the
  normal equations ``sum_t w_t r_t phi_t^T = 0``, so ``u_t = w_t r_t / max_s w_s ||r_s||``
  is dual feasible and ``D = sum_t <u_t, y_t>`` is a lower bound on the optimum
  (weak duality). The best objective ``P`` and the best bound ``D`` seen so far give
  the relative duality gap ``(P - D) / P >= (P - P*) / P``, and the fit is
  ``successful`` only once that certified gap is at most ``tol`` (``max_steps_reached``
  otherwise). The relative objective change, the earlier stopping rule, stopped
  float32 fits near the break-down point up to 17x above the optimum while calling
  them converged (one rounding-level increase of the objective ended the loop). The
  gap's rounding floor in float32 is near ``1e-5`` (an exploration run; float64's is far
  below ``1e-6``), hence the
  dtype's default ``tol`` (``1e-4`` / ``1e-6``). With ``ridge > 0`` the weighted solves
  are regularised, the normal equations (and so the certificate) no longer hold,
  and the rule falls back to the relative objective change (``gap`` is then NaN).
  Its ``result`` is a :data:`jaxsci.core.RESULTS` item (``throw=True`` raises on
  failure, also inside ``jit``). :func:`l2_objective` evaluates the objective for
  checks against cvxpy.

Transformations. Everything numerical is jittable and vmappable; the numbers a
researcher sweeps are traced: ``p`` and ``noise`` of :func:`simulate`, ``rho`` of
:func:`make_system`, ``mean``/``corr`` of :func:`ar_inputs`, ``ridge``/``tol``/``eps``
of the estimators; only shapes, ``L`` and ``max_iter`` are static. Differentiable
(reverse mode): :func:`least_squares` in ``phi``/``y``/``ridge``, :func:`l2_objective`
and :func:`prediction_error` in all arguments, :func:`simulate`'s outputs in ``u``,
``noise`` and the system's matrices. The gradient of :func:`simulate` with respect to
``p`` is zero by construction (the attack flags ``uniform < p`` are piecewise
constant in ``p``), and :func:`l2_norm_estimator` is not reverse-differentiable (its
``while_loop`` has no adjoint; differentiate :func:`l2_objective` at its ``theta``).
Array-likes (lists, NumPy arrays) are accepted and converted once at the boundary.

>>> import jax
>>> from jaxsci.dynamics import sysid
>>> system = sysid.make_system(jax.random.key(0), n_x=3, n_y=2, n_u=1, m=4, rho=0.5)
>>> attack = sysid.Attack(delta=jax.numpy.ones((2, 4)), mean=jax.numpy.ones(2),
...                       scale=1.0, corr=0.5)
>>> u = sysid.ar_inputs(jax.random.key(1), 300, 1)
>>> phi, y, y_clean, _ = sysid.simulate(jax.random.key(2), system, u, 4, 0.2, attack)
>>> est = sysid.l2_norm_estimator(phi, y)
>>> bool(est.result == sysid.RESULTS.successful)
True
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = [
    "RESULTS",
    "RandomFeatures",
    "System",
    "Attack",
    "Estimate",
    "random_features",
    "apply_features",
    "as_float_array",
    "lagged_features",
    "make_system",
    "markov_parameters",
    "ar_inputs",
    "adversarial_disturbance",
    "simulate",
    "least_squares",
    "l2_norm_estimator",
    "l2_objective",
    "prediction_error",
]


# --------------------------------------------------------------------------- features


class RandomFeatures(NamedTuple):
    """Random tanh features ``psi(u) = tanh(W u + b)`` of one input ``u`` in R^{n_u}."""

    w: Float[Array, "m nu"]
    b: Float[Array, " m"]


def random_features(key: jax.Array, n_u: int, m: int, scale: float = 1.0) -> RandomFeatures:
    """Draw ``m`` random features of an ``n_u``-dimensional input (``W ~ N(0, scale^2)``)."""
    check_key("key", key)
    n_u = check_int("n_u", n_u, min=1)
    m = check_int("m", m, min=1)
    check_scalar("scale", scale, gt=0.0)
    kw, kb = jax.random.split(key)
    w = scale * jax.random.normal(kw, (m, n_u))
    b = jax.random.uniform(kb, (m,), minval=-1.0, maxval=1.0)
    return RandomFeatures(w, b)


def apply_features(feats: RandomFeatures, u: Float[Array, "... nu"]) -> Float[Array, "... m"]:
    """``psi(u) = tanh(W u + b)`` applied over leading axes."""
    return jnp.tanh(u @ feats.w.T + feats.b)


def as_float_array(name: str, value: ArrayLike, ndim: int) -> Float[Array, "..."]:
    """``value`` (an array, a NumPy array or a nested list) as a floating JAX array.

    Integer and bool inputs are cast to the default float dtype; the shape's rank is
    checked, values are checked finite when concrete. Errors name ``name``.
    """
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        try:
            value = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array (or a nested list of numbers), got "
                            f"{type(value).__name__}") from exc
        if value.dtype == object:
            raise TypeError(f"{name} must be a rectangular array of numbers, got a ragged "
                            f"or non-numeric {type(value).__name__}")
    if not jnp.issubdtype(value.dtype, jnp.floating):
        if not (jnp.issubdtype(value.dtype, jnp.integer) or value.dtype == bool):
            raise TypeError(f"{name} must have a real floating dtype, got {value.dtype}")
        value = jnp.asarray(value, jnp.result_type(float))
    check_array(name, value, ndim=ndim, dtype="floating")
    return jnp.asarray(value)


def lagged_features(psi: Float[ArrayLike, "t m"], L: int) -> Float[Array, "tl lm"]:
    """Regressors ``phi_t = [psi_{t-1}; ...; psi_{t-L}]`` for ``t = L, ..., T-1``.

    This is the entry point for measured data: ``psi`` holds a feature map of each
    input (``apply_features``, or the raw inputs ``u`` themselves for a linear map),
    one row per time. Row ``i`` of the result belongs to time ``t = L + i`` (the first
    ``L`` times lack a full window), so ``y[L:]`` is the matching target.

    Args:
      psi: ``(T, m)`` features per time (array-like).
      L: memory length, ``1 <= L <= T - 1`` (static: it sets the output shape).

    Returns:
      ``(T - L, L * m)`` regressors; column block ``k - 1`` holds ``psi_{t-k}``.
    """
    psi = as_float_array("psi", psi, 2)
    t_len = psi.shape[0]
    if t_len < 2:
        raise ValueError(f"psi must have at least 2 rows (times) to build one lagged "
                         f"regressor, got shape {tuple(psi.shape)}")
    L = check_int("L", L, min=1, max=t_len - 1)
    # Column block k-1 holds psi_{t-k}: a static slice per lag.
    blocks = [psi[L - k : t_len - k] for k in range(1, L + 1)]
    return jnp.concatenate(blocks, axis=1)


# --------------------------------------------------------------------------- system


class System(NamedTuple):
    """Hammerstein system ``x+ = A x + B psi(u)``, ``y = C x``, with its feature map."""

    a: Float[Array, "nx nx"]
    b: Float[Array, "nx m"]
    c: Float[Array, "ny nx"]
    feats: RandomFeatures


def make_system(
    key: jax.Array, n_x: int = 6, n_y: int = 3, n_u: int = 2, m: int = 8, rho: float = 0.6
) -> System:
    """A random stable system: ``A`` orthogonal times ``rho`` (spectral radius exactly ``rho``).

    ``rho = 0`` gives ``A = 0``: a finite-memory (one-lag) system whose map is exactly
    linear in ``phi`` for every ``L >= 1``.
    """
    check_key("key", key)
    n_x = check_int("n_x", n_x, min=1)
    n_y = check_int("n_y", n_y, min=1)
    n_u = check_int("n_u", n_u, min=1)
    m = check_int("m", m, min=1)
    check_scalar("rho", rho, ge=0.0, lt=1.0)
    ka, kb, kc, kf = jax.random.split(key, 4)
    q, _ = jnp.linalg.qr(jax.random.normal(ka, (n_x, n_x)))
    a = rho * q
    b = jax.random.normal(kb, (n_x, m)) / jnp.sqrt(m)
    c = jax.random.normal(kc, (n_y, n_x)) / jnp.sqrt(n_x)
    return System(a, b, c, random_features(kf, n_u, m))


def markov_parameters(system: System, L: int) -> Float[Array, "ny lm"]:
    """``[C B, C A B, ..., C A^{L-1} B]``: the true ``Theta*`` for memory ``L``."""
    L = check_int("L", L, min=1)

    def step(ak_b, _):
        return system.a @ ak_b, system.c @ ak_b

    _, blocks = jax.lax.scan(step, system.b, None, length=L)
    return jnp.transpose(blocks, (1, 0, 2)).reshape(blocks.shape[1], -1)



def ar_inputs(
    key: jax.Array, t_len: int, n_u: int, mean: float = 0.5, corr: float = 0.7
) -> Float[Array, "t nu"]:
    """Correlated, non-zero-mean, non-Gaussian inputs: ``u_t = mean + v_t``,
    ``v_{t+1} = corr v_t + eta_t``, ``eta_t ~ Uniform[-1, 1]`` i.i.d."""
    check_key("key", key)
    t_len = check_int("t_len", t_len, min=2)
    n_u = check_int("n_u", n_u, min=1)
    check_scalar("mean", mean)
    check_scalar("corr", corr, ge=0.0, lt=1.0)
    return _ar(key, t_len, n_u, corr, jax.random.uniform, -1.0, 1.0) + mean


@functools.partial(jax.jit, static_argnames=("t_len", "dim", "sampler"))
def _ar(key, t_len, dim, corr, sampler, lo, hi):
    # Module-level jit: a second call compiles nothing (the scan's closure).
    eta = sampler(key, (t_len, dim), minval=lo, maxval=hi)

    def step(v, e):
        v = corr * v + e
        return v, v

    _, v = jax.lax.scan(step, jnp.zeros(dim, eta.dtype), eta)
    return v


class Attack(NamedTuple):
    """Adversary: ``d_t = delta psi(u_{t-1}) + mean + scale * r_t``, ``r`` AR(1)(``corr``)."""

    delta: Float[Array, "ny m"]
    mean: Float[Array, " ny"]
    scale: float
    corr: float


def adversarial_disturbance(
    key: jax.Array, attack: Attack, psi_prev: Float[Array, "t m"]
) -> Float[Array, "t ny"]:
    """The adversary's disturbance at every time (used where the attack flag is on).

    It uses the regressor (the full input history), so it is correlated with the
    inputs, non-zero-mean and temporally correlated: the worst case for least squares.
    """
    n_y = attack.mean.shape[0]
    r = _ar(key, psi_prev.shape[0], n_y, attack.corr, jax.random.uniform, -1.0, 1.0)
    return psi_prev @ attack.delta.T + attack.mean + attack.scale * r


def simulate(
    key: jax.Array,
    system: System,
    u: Float[Array, "t nu"],
    L: int,
    p: float | Float[Array, ""],
    attack: Attack,
    noise: float | Float[Array, ""] = 0.0,
) -> tuple[Float[Array, "tl lm"], Float[Array, "tl ny"], Float[Array, "tl ny"], Array]:
    """Simulate the system from ``x_0 = 0`` and attack its outputs.

    Returns ``(phi, y, y_clean, attacked)`` for times ``t = L, ..., T-1``: regressors
    with memory ``L``, measured outputs, noise-free outputs, and the Bernoulli(``p``)
    attack flags. Traced (jit/vmap) in ``key``, ``u``, ``p``, ``noise`` and the system
    and attack parameters; ``L`` is static. Reverse-differentiable in ``u``, ``noise``
    and the system; the gradient with respect to ``p`` is zero by construction (the
    flags are ``uniform < p``). ``p`` outside ``[0, 1]`` or ``noise < 0`` raise, also
    inside ``jit``/``vmap``.
    """
    check_key("key", key)
    u = as_float_array("u", u, 2)
    L = check_int("L", L, min=1, max=u.shape[0] - 2)
    check_scalar("p", p, ge=0.0, le=1.0)
    check_scalar("noise", noise, ge=0.0)
    return _simulate(key, system, u, L, jnp.asarray(p, u.dtype), attack,
                     jnp.asarray(noise, u.dtype))


@functools.partial(jax.jit, static_argnums=3)
def _simulate(key, system, u, L, p, attack, noise):
    # Inside jit/vmap the range checks above see tracers: check values here too.
    p = eqx.error_if(p, (p < 0) | (p > 1) | ~jnp.isfinite(p), "p must be in [0, 1]")
    noise = eqx.error_if(noise, (noise < 0) | ~jnp.isfinite(noise), "noise must be >= 0")
    psi = apply_features(system.feats, u)

    def step(x, ps):
        return system.a @ x + system.b @ ps, system.c @ x

    _, y_clean = jax.lax.scan(step, jnp.zeros(system.a.shape[0], psi.dtype), psi)
    phi = lagged_features(psi, L)
    y_clean = y_clean[L:]
    k_att, k_flag, k_noise = jax.random.split(key, 3)
    attacked = jax.random.uniform(k_flag, (phi.shape[0],)) < p
    benign = noise * jax.random.normal(k_noise, y_clean.shape, y_clean.dtype)
    d = adversarial_disturbance(k_att, attack, psi[L - 1 : -1])
    y = y_clean + jnp.where(attacked[:, None], d, benign)
    return phi, y, y_clean, attacked


# --------------------------------------------------------------------------- estimators


class Estimate(NamedTuple):
    """Output of :func:`l2_norm_estimator`.

    ``result`` is a :data:`jaxsci.core.RESULTS` item: ``successful`` when the certified
    relative duality gap ``gap`` is at most ``tol`` (or the fit is exact; with
    ``ridge > 0``: when the relative objective change fell below ``tol``),
    ``max_steps_reached`` after ``max_iter`` steps without that, ``stagnation`` when a
    later weighted solve failed (NaN: weights spanning too many orders of magnitude
    for the dtype, typically float32 near the optimum; the best iterate so far is
    returned with its certified ``gap``), ``nonfinite`` when the first solve produced
    NaN/inf (singular normal equations: collinear features; pass ``ridge > 0``).
    """

    theta: Float[Array, "ny lm"]
    objective: Float[Array, ""]  # sum_t ||y_t - theta phi_t||_2 at theta
    iterations: Array
    result: RESULTS
    # (objective - best dual bound) / objective >= (objective - optimum) / objective:
    # a certified bound on the relative suboptimality of theta (NaN with ridge > 0).
    gap: Float[Array, ""] = jnp.nan


def _check_data(phi, y, ridge):
    """Convert and check ``(phi, y)``; ``ridge`` (maybe traced) must be > 0 when t < d."""
    phi = as_float_array("phi", phi, 2)
    y = as_float_array("y", y, 2)
    t_len, d = phi.shape
    if t_len == 0 or d == 0:
        raise ValueError(f"phi must be non-empty (at least one sample row and one feature "
                         f"column), got shape {tuple(phi.shape)}")
    if y.shape[1] == 0:
        raise ValueError(f"y must have at least one output column, got shape {tuple(y.shape)}")
    if y.shape[0] != t_len:
        raise ValueError(
            f"y must have one row per row of phi ({t_len}), got shape {tuple(y.shape)}"
        )
    check_scalar("ridge", ridge, ge=0.0)
    if t_len < d and not isinstance(ridge, jax.core.Tracer) and not float(ridge) > 0:
        raise ValueError(
            f"phi has fewer samples (rows) than features (columns): shape {tuple(phi.shape)}; "
            f"Theta is not identifiable. Use more samples, a shorter memory L or fewer "
            f"features, or pass ridge > 0")
    return phi, y, jnp.asarray(ridge, phi.dtype)


def _weighted_ls(phi, y, w, ridge, refine=2, factor=False):
    # min sum_t w_t ||y_t - theta phi_t||^2 (+ ridge) by Cholesky of the normal
    # equations plus iterative refinement: the normal equations square the condition
    # number (float32 matters), and each refinement step solves for the correction
    # from the current residual, recovering most of the lost digits at matmul cost
    # (a batched QR is ~100x slower on CPU under vmap).
    wp = w[:, None] * phi
    g = phi.T @ wp
    d = g.shape[0]
    lam = ridge * jnp.trace(g) / d
    g = g + lam * jnp.eye(d, dtype=g.dtype)
    cf = jax.scipy.linalg.cho_factor(g)
    theta_t = jax.scipy.linalg.cho_solve(cf, wp.T @ y)
    for _ in range(refine):
        res = y - phi @ theta_t
        corr = wp.T @ res - lam * theta_t
        theta_t = theta_t + jax.scipy.linalg.cho_solve(cf, corr)
    return (theta_t.T, cf) if factor else theta_t.T


def least_squares(
    phi: Float[ArrayLike, "t d"], y: Float[ArrayLike, "t ny"],
    ridge: float | Float[Array, ""] = 0.0,
) -> Float[Array, "ny d"]:
    """Ordinary least squares ``argmin sum_t ||y_t - Theta phi_t||^2``.

    Args:
      phi: ``(T, d)`` regressors (array-like), ``T >= d`` unless ``ridge > 0``.
      y: ``(T, n_y)`` outputs.
      ridge: relative ridge ``lambda = ridge * tr(phi^T phi) / d`` (traced: vmappable).

    Returns:
      ``Theta`` of shape ``(n_y, d)``. Reverse-differentiable in ``phi``, ``y`` and
      ``ridge``. Singular normal equations (collinear features with ``ridge = 0``) raise,
      also inside ``jit``, instead of returning NaN.
    """
    phi, y, ridge = _check_data(phi, y, ridge)
    return _ls(phi, y, ridge)


@jax.jit
def _ls(phi, y, ridge):
    theta = _weighted_ls(phi, y, jnp.ones(phi.shape[0], phi.dtype), ridge)
    return eqx.error_if(theta, ~jnp.all(jnp.isfinite(theta)),
                        "least_squares: the normal equations are singular (collinear "
                        "features in phi); pass ridge > 0")


def l2_objective(
    theta: Float[ArrayLike, "ny d"], phi: Float[ArrayLike, "t d"], y: Float[ArrayLike, "t ny"]
) -> Float[Array, ""]:
    """``sum_t ||y_t - Theta phi_t||_2`` (the l2-norm estimator's objective).

    Differentiable in every argument wherever no residual is exactly zero.
    """
    theta = as_float_array("theta", theta, 2)
    phi = as_float_array("phi", phi, 2)
    y = as_float_array("y", y, 2)
    if theta.shape != (y.shape[1], phi.shape[1]):
        raise ValueError(f"theta must have shape (n_y, d) = ({y.shape[1]}, {phi.shape[1]}), "
                         f"got {tuple(theta.shape)}")
    return jnp.sum(jnp.linalg.norm(y - phi @ theta.T, axis=1))


def l2_norm_estimator(
    phi: Float[ArrayLike, "t d"],
    y: Float[ArrayLike, "t ny"],
    *,
    max_iter: int = 200,
    tol: float | Float[Array, ""] | None = None,
    eps: float | Float[Array, ""] | None = None,
    ridge: float | Float[Array, ""] = 0.0,
    throw: bool = True,
) -> Estimate:
    """The l2-norm estimator ``argmin sum_t ||y_t - Theta phi_t||_2`` by IRLS.

    Starts from least squares, then iterates ``w_t = 1 / max(||r_t||, eps * s)`` and
    a weighted least-squares solve, where ``s`` is the mean output norm (so ``eps``
    is relative and the iteration is scale invariant). Every step also gives a dual
    feasible point of the SOCP (module docstring), and the iteration stops once the
    certified relative duality gap ``(P - D) / P`` (an upper bound on the relative
    distance of the returned objective to the optimum) is at most ``tol``, or after
    ``max_iter`` steps. The returned ``theta`` is the best iterate seen.

    Args:
      phi: ``(T, d)`` regressors (array-like; :func:`lagged_features` builds them from
        measured inputs), ``T >= d`` unless ``ridge > 0``.
      y: ``(T, n_y)`` measured outputs.
      max_iter: IRLS step budget (static).
      tol: certified relative duality gap that stops the iteration (traced). Default:
        ``1e-6`` for float64 data, ``1e-4`` for float32 (the float32 gap stalls near
        ``1e-5`` from rounding; use float64 for tighter certificates). With
        ``ridge > 0``: the relative objective change that stops it (no certificate).
      eps: relative residual floor of the weights (traced). Default: ``1e-8`` for
        float64, ``1e-5`` for float32. The floor bounds the weights' dynamic range to
        ``1 / eps``; near the optimum some residuals reach it, and with ``1e-8`` float32's
        Cholesky of the weighted normal equations fails there (measured: 4 of 20 fits
        near the break-down point stopped uncertified, none with ``1e-5``:
        ``scripts/sysid_certificate.py``). It changes
        the smoothed problem IRLS solves, never the certificate, which is for the exact
        objective.
      ridge: relative ridge of every weighted solve (traced).
      throw: raise when ``result`` is not successful (also inside ``jit``); with
        ``throw=False`` check ``est.result == RESULTS.successful`` yourself (one flag
        per element under ``vmap``).

    Returns:
      :class:`Estimate` ``(theta, objective, iterations, result, gap)``. Not
      reverse-differentiable (the ``while_loop`` has no adjoint).
    """
    phi, y, ridge = _check_data(phi, y, ridge)
    max_iter = check_int("max_iter", max_iter, min=1)
    wide = phi.dtype == jnp.float64
    if tol is None:
        tol = 1e-6 if wide else 1e-4
    if eps is None:
        eps = 1e-8 if wide else 1e-5
    check_scalar("tol", tol, ge=0.0)
    check_scalar("eps", eps, gt=0.0)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    est = _irls(phi, y, max_iter, jnp.asarray(tol, phi.dtype), jnp.asarray(eps, phi.dtype),
                ridge)
    return raise_if_failed(est, est.result, throw)


def _dual_bound(phi, y, res, w, gram):
    """A lower bound on the optimum from the dual ``max sum_t <u_t, y_t>`` over
    ``||u_t|| <= 1``, ``sum_t u_t phi_t^T = 0``: the better of two dual feasible points.

    ``res`` are the residuals of the weighted solve with weights ``w``; ``gram`` the
    Cholesky factor of ``phi^T phi``. (1) ``u_t = w_t r_t / max_s w_s ||r_s||``, feasible
    because those residuals solve the weighted normal equations. (2) The sub-gradient
    directions ``g_t = r_t / ||r_t||`` (the optimal ``u_t`` wherever the optimal residual
    is non-zero) with their component in the span of ``phi`` projected out,
    ``U = G - phi (phi^T phi)^{-1} phi^T G``, then scaled into the unit balls. (2) is the
    tighter one near the optimum (measured: fewer steps to the same certificate than
    (1) alone, and than a projection in the IRLS weights' metric).
    """
    rn = jnp.linalg.norm(res, axis=1)
    scale = jnp.max(w * rn)
    u = (w / jnp.where(scale > 0, scale, 1.0))[:, None] * res
    first = jnp.where(scale > 0, jnp.sum(u * y), 0.0)
    g = res / jnp.maximum(rn, jnp.finfo(res.dtype).tiny)[:, None]
    v = g - phi @ jax.scipy.linalg.cho_solve(gram, phi.T @ g)
    top = jnp.max(jnp.linalg.norm(v, axis=1))
    second = jnp.sum(v * y) / jnp.maximum(top, 1.0)
    return jnp.maximum(first, jnp.where(jnp.isfinite(second), second, first))


@functools.partial(jax.jit, static_argnums=2)
def _irls(phi, y, max_iter, tol, eps, ridge):
    ones = jnp.ones(phi.shape[0], phi.dtype)
    theta0, gram = _weighted_ls(phi, y, ones, ridge, factor=True)
    res0 = y - phi @ theta0.T
    obj0 = jnp.sum(jnp.linalg.norm(res0, axis=1))
    tiny = jnp.finfo(phi.dtype).tiny
    certified = ridge <= 0
    # eps is relative to the data's scale, so the iteration is scale invariant and a
    # perfect fit (all residuals ~ 0) cannot blow the weights up.
    floor = eps * jnp.maximum(jnp.mean(jnp.linalg.norm(y, axis=1)), tiny)
    exact = floor * phi.shape[0]

    def gap_of(obj, dual):
        return jnp.where(certified, (obj - dual) / jnp.maximum(obj, tiny), jnp.nan)

    def done(obj, dual, change):
        return jnp.where(certified, gap_of(obj, dual) <= tol, change <= tol) | (obj <= exact)

    def cond(state):
        _, _, obj, dual, change, it, broke = state
        return (it < max_iter) & ~done(obj, dual, change) & ~broke

    def body(state):
        theta, best, obj, dual, _, it, _ = state
        w = floor / jnp.maximum(jnp.linalg.norm(y - phi @ theta.T, axis=1), floor)
        new = _weighted_ls(phi, y, w, ridge)
        res = y - phi @ new.T
        new_obj = jnp.sum(jnp.linalg.norm(res, axis=1))
        # A weighted solve can fail (NaN) once some residuals reach the floor and the
        # weights span many orders of magnitude (float32's Cholesky): stop there with
        # the best iterate, reported as stagnation unless already certified.
        broke = ~(jnp.isfinite(new_obj) & jnp.all(jnp.isfinite(new)))
        new_obj = jnp.where(broke, jnp.inf, new_obj)
        # The majoriser gives descent up to rounding: keep the best iterate for the
        # answer, but always move on from the new one (a rounding-level increase
        # must not end the loop).
        better = new_obj < obj
        change = jnp.where(better, (obj - new_obj) / jnp.maximum(jnp.abs(obj), tiny), 0.0)
        bound = jnp.where(broke, dual, jnp.maximum(dual, _dual_bound(phi, y, res, w, gram)))
        return (jnp.where(broke, theta, new), jnp.where(better, new, best),
                jnp.minimum(new_obj, obj), bound, change, it + 1, broke)

    init = (theta0, theta0, obj0, _dual_bound(phi, y, res0, ones, gram),
            jnp.asarray(jnp.inf, obj0.dtype), jnp.asarray(0), jnp.asarray(False))
    # A singular first solve (collinear features) gives NaN: skip the loop, report it.
    init_ok = jnp.isfinite(obj0) & jnp.all(jnp.isfinite(theta0))
    _, theta, obj, dual, change, it, broke = jax.lax.cond(
        init_ok, lambda s: jax.lax.while_loop(cond, body, s), lambda s: s, init)
    finite = jnp.isfinite(obj) & jnp.all(jnp.isfinite(theta))
    stopped = RESULTS.where(broke, RESULTS.stagnation, RESULTS.max_steps_reached)
    result = RESULTS.where(
        finite, RESULTS.where(done(obj, dual, change), RESULTS.successful, stopped),
        RESULTS.nonfinite)
    return Estimate(theta, obj, it, result, gap_of(obj, dual))


def prediction_error(
    theta: Float[ArrayLike, "ny d"], phi: Float[ArrayLike, "t d"],
    y_clean: Float[ArrayLike, "t ny"],
) -> Float[Array, ""]:
    """Relative RMS prediction error ``sqrt(sum ||Theta phi_t - y_t||^2 / sum ||y_t||^2)``.

    Differentiable in every argument.
    """
    theta = as_float_array("theta", theta, 2)
    phi = as_float_array("phi", phi, 2)
    y_clean = as_float_array("y_clean", y_clean, 2)
    num = jnp.sum(jnp.square(phi @ theta.T - y_clean))
    return jnp.sqrt(num / jnp.sum(jnp.square(y_clean)))

