r"""Learning stochastic dynamics from temporally sparse samples by path augmentation.

Paper: "Learning stochastic dynamics from temporally sparse samples as stochastic
control" (ICML 2026). The system is a 2-D SDE
with known isotropic diffusion ``D``

.. math::  dX_t = f(X_t)\,dt + \sqrt{2D}\,dW_t ,

observed only every ``tau`` time units. Three drift estimators are implemented.

* **direct** (Kramers-Moyal, :func:`direct_estimator`): the Gaussian-increment
  likelihood of the observed pairs,
  ``x_{k+1} - x_k ~ N(f(x_k) tau, 2 D tau I)``. Consistent as ``tau -> 0``; for
  ``tau`` beyond the relaxation time it sees ``(E[x_{k+1} | x_k] - x_k) / tau``.
* **geometric** (:func:`geometric_drift`): for a conservative drift ``f = -grad U``
  the invariant density is ``rho ~ exp(-U / D)``, so ``f = D grad log rho``
  (eq. "f = D nabla log p_inf"); ``grad log rho`` is the score of a Gaussian kernel
  density estimate of all observations. Independent of ``tau``, blind to the
  non-gradient (rotational) part of a drift.
* **path augmentation** (the paper's method, :func:`path_augmentation`): start from
  the geometric estimate (the invariant density's inductive bias), then repeat a
  Monte-Carlo EM step:

  1. *E-step, the stochastic control problem.* Between every pair of consecutive
     observations ``(x_k, x_{k+1})`` sample bridges of the current model. The
     optimal control of the bridge problem is ``2D grad log h``, with ``h(t, x)``
     the backward density of hitting ``x_{k+1}`` at ``t_{k+1}`` (Doob's
     h-transform). We use the standard tractable choice, the guided proposal of
     Schauer, van der Meulen & van Zanten (2017) with a Brownian auxiliary process:
     ``2D grad log h~ = (x_{k+1} - x) / (t_{k+1} - t)``, i.e.
     ``dX = [f(X) + (x_{k+1} - X) / (t_{k+1} - t)] dt + sqrt(2D) dW``
     (:func:`sample_bridges`; discretised with the bridge's own step variance, the
     modified diffusion bridge of Durham & Gallant 2002), corrected by importance
     weights: the exact ratio of the Euler-discretised model's path density,
     including its last transition into ``x_{k+1}``, to the proposal's
     (self-normalised over the ``n_bridges`` particles of each pair). Optionally the
     bridges are further *guided by the invariant density of the observations*: the
     path measure is tilted by
     ``exp(guidance * int log rho(X_t) dt)`` (a state cost ``-log rho``: paths that
     leave the region the data occupy are penalised).
  2. *M-step.* Re-estimate the drift from the augmented paths' fine increments with
     the same Gaussian likelihood as the direct estimator at step ``dt = tau / n``
     (the Girsanov log-likelihood ``sum f . dx / 2D - |f|^2 dt / 4D``), each
     increment weighted by its bridge's importance weight.

The drift model for all three is Bayesian linear regression on a basis,
``f(x) = C^T phi(x)``, ``C ~ N(0, prior_var I)``: by default non-parametric (kernel ridge
regression, a Gaussian-process posterior mean, with ``m`` random Fourier features of an
RBF kernel, Rahimi & Recht 2007, :func:`random_features`), or parametric on the monomials
of degree ``<= p`` (:func:`polynomial_features`, StochasticForceInference's basis).
With the likelihood above, the posterior mean solves
``(Phi^T W Phi dt / 2D + I / prior_var) C = Phi^T W dX / 2D`` (:func:`solve_drift`):
the noise level is the *known* increment variance ``2 D dt``, so the ridge is not a
free knob, and the ``I / prior_var`` term keeps the ``m x m`` system positive
definite with a margin, so a float32 Cholesky never breaks down. The normal
equations are accumulated time step by time step inside a ``lax.scan``, so the
augmented paths' ``Phi`` is never materialised.

Drifts are values (final ``equinox`` Modules under :class:`AbstractDrift`, their
parameters pytree leaves, so ``vmap``/``grad`` over them work): :class:`DoubleWell`
(conservative), :class:`RotatingWell` (``gamma``: a non-gradient landscape
``f = -(I + gamma J) grad U`` whose invariant density is still ``exp(-U / D)``),
:class:`Hopf` (normal form), :class:`VanDerPol` (Lienard form), :class:`Duffing`
(damped), and a fitted :class:`DriftModel`. :func:`simulate` is Euler-Maruyama under
``lax.scan``, traced in ``tau`` and ``D`` and differentiable in reverse mode.
:func:`weighted_rmse` is the metric: drift RMSE on a grid, weighted by the kernel
density of the observations (:func:`kde_density`).

Path augmentation has ``init``/``step`` (:func:`augmentation_init`,
:func:`augmentation_step`, with :class:`AugmentationState` / :class:`AugmentationInfo`)
and :func:`path_augmentation` is the ``lax.scan`` driver over them:

>>> import jax
>>> from jaxsci.dynamics import langevin as lg
>>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
>>> obs = lg.simulate(jax.random.key(1), lg.RotatingWell(gamma=0.5), x0, 0.5, 0.5, 4,
...                   steps_per_obs=5)
>>> obs.shape
(8, 4, 2)
>>> feats = lg.random_features(jax.random.key(2), 2, 16, 0.7)
>>> init = lg.direct_estimator(feats, obs, 0.5, 0.5)
>>> res = lg.path_augmentation(jax.random.key(3), init, obs, 0.5, 0.5,
...                            lg.EMConfig(n_iter=2, n_steps=4, n_bridges=2))
>>> res.history.shape[0]
3
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxsci.core.validation import (
    as_array,
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = [
    "PRIOR_VAR",
    "AbstractDrift",
    "DoubleWell",
    "RotatingWell",
    "Hopf",
    "VanDerPol",
    "Duffing",
    "simulate",
    "check_observations",
    "AbstractFeatures",
    "Features",
    "PolynomialFeatures",
    "DriftModel",
    "random_features",
    "polynomial_features",
    "feature_map",
    "predict",
    "DriftStats",
    "drift_stats",
    "solve_drift",
    "fit_drift",
    "direct_estimator",
    "kde_score",
    "kde_density",
    "scott_bandwidth",
    "geometric_drift",
    "fit_function",
    "estimate_diffusion",
    "Bridges",
    "sample_bridges",
    "EMConfig",
    "Pairs",
    "observation_pairs",
    "AugmentationState",
    "AugmentationInfo",
    "augmentation_init",
    "augmentation_step",
    "AugmentationResult",
    "path_augmentation",
    "weighted_rmse",
]


# The GP prior variance of each drift coefficient: the default of every estimator.
PRIOR_VAR = 10.0

# --------------------------------------------------------------------------- systems


class AbstractDrift(eqx.Module):
    """A drift ``f(x)`` of one state ``x`` (shape ``(d,)``), returning shape ``(d,)``.

    Subclass it (final, with the parameters as fields) to simulate your own system:
    the fields are pytree leaves, so ``vmap``/``grad`` over them work. Any plain
    callable of one state is accepted wherever a drift is expected, too.
    ``conservative`` says whether the drift is a gradient ``-grad U`` (then the geometric
    estimator ``D grad log rho`` is exact).
    """

    conservative: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d"]:
        raise NotImplementedError


def _param(x):
    return jnp.asarray(x) if not isinstance(x, jax.Array) else x


def _grad_double_well(x):
    # U = (x^2 - 1)^2 + y^2 / 2: wells at (+-1, 0), barrier height 1 at the origin.
    return jnp.stack([4.0 * x[0] * (x[0] ** 2 - 1.0), x[1]])


class DoubleWell(AbstractDrift):
    """``f = -grad U``, ``U = (x^2 - 1)^2 + y^2 / 2`` (conservative; wells at ``(+-1, 0)``)."""

    conservative: ClassVar[bool] = True

    def __call__(self, x):
        return -_grad_double_well(x)


class RotatingWell(AbstractDrift):
    """``f = -(I + gamma J) grad U`` with the double well's ``U`` (``J``: 90-degree rotation).

    ``div(rho J grad U) = 0`` for ``rho = exp(-U / D)``, so the invariant density is the
    double well's for every ``gamma``, while the drift circulates: ``D grad log rho``
    cannot see the rotational part.
    """

    gamma: Float[Array, ""] = eqx.field(default=1.0, converter=_param)
    conservative: ClassVar[bool] = False

    def __call__(self, x):
        g = _grad_double_well(x)
        return -jnp.stack([g[0] - self.gamma * g[1], g[1] + self.gamma * g[0]])


class Hopf(AbstractDrift):
    """Hopf normal form: ``r' = (mu - r^2) r``, angular speed ``omega``."""

    mu: Float[Array, ""] = eqx.field(default=1.0, converter=_param)
    omega: Float[Array, ""] = eqx.field(default=1.0, converter=_param)
    conservative: ClassVar[bool] = False

    def __call__(self, x):
        r2 = x[0] ** 2 + x[1] ** 2
        return jnp.stack([(self.mu - r2) * x[0] - self.omega * x[1],
                          (self.mu - r2) * x[1] + self.omega * x[0]])


class VanDerPol(AbstractDrift):
    """Van der Pol in Lienard form: ``x' = mu (x - x^3/3 - y)``, ``y' = x / mu``."""

    mu: Float[Array, ""] = eqx.field(default=1.0, converter=_param)
    conservative: ClassVar[bool] = False

    def __call__(self, x):
        return jnp.stack([self.mu * (x[0] - x[0] ** 3 / 3.0 - x[1]), x[0] / self.mu])


class Duffing(AbstractDrift):
    """Damped Duffing oscillator: ``x' = y``, ``y' = -delta y + x - x^3``."""

    delta: Float[Array, ""] = eqx.field(default=0.5, converter=_param)
    conservative: ClassVar[bool] = False

    def __call__(self, x):
        return jnp.stack([x[1], -self.delta * x[1] + x[0] - x[0] ** 3])


def _positive(name: str, value, dtype=None):
    """``value > 0``: checked now when concrete, through ``equinox.error_if`` when traced."""
    if np.ndim(value) == 0:
        check_scalar(name, value, gt=0.0)
    x = jnp.asarray(value, dtype)
    if isinstance(x, jax.core.Tracer):
        x = eqx.error_if(x, ~(x > 0), f"{name} must be > 0")
    elif np.ndim(value) != 0:
        arr = np.asarray(x)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {int(np.sum(~np.isfinite(arr)))} "
                             f"non-finite value(s) out of {arr.size}")
        if not np.all(arr > 0):
            raise ValueError(f"{name} must be > 0, got minimum {arr.min()}")
    return x


def _nonnegative(name: str, value, dtype=None):
    check_scalar(name, value, ge=0.0)
    x = jnp.asarray(value, dtype)
    if isinstance(x, jax.core.Tracer):
        x = eqx.error_if(x, ~(x >= 0), f"{name} must be >= 0")
    return x


def _drift(name: str, drift) -> Callable[[Array], Array]:
    if isinstance(drift, str):
        raise TypeError(f"{name} must be a drift (e.g. lg.DoubleWell(), lg.RotatingWell(gamma)) "
                        f"or a callable of one state, got the string {drift!r}")
    if not callable(drift):
        raise TypeError(f"{name} must be a drift or a callable of one state, "
                        f"got {type(drift).__name__}")
    return drift


def simulate(
    key: jax.Array,
    drift: AbstractDrift | Callable[[Array], Array],
    x0: Float[Array, "n d"],
    diffusion: float | Float[Array, ""],
    tau: float | Float[Array, ""],
    n_obs: int,
    *,
    steps_per_obs: int = 10,
    burn_in: float | Float[Array, ""] = 0.0,
    burn_in_steps: int = 0,
) -> Float[Array, "n k d"]:
    """Observe ``n`` trajectories of ``dX = f dt + sqrt(2D) dW`` every ``tau``.

    Euler-Maruyama with ``steps_per_obs`` steps per observation interval (step
    ``tau / steps_per_obs``; the paper's public code uses 0.01) after a burn-in of
    ``burn_in`` time units in ``burn_in_steps`` steps; the first observation is at
    ``t = burn_in``. ``drift`` is an :class:`AbstractDrift` (``DoubleWell()``,
    ``RotatingWell(gamma)``, ...) or any callable of one state.

    **Transformations.** ``diffusion``, ``tau``, ``burn_in``, ``x0`` and the drift's
    parameters are traced: ``vmap`` over any of them, and ``jax.grad`` (reverse mode)
    of a loss of the paths with respect to them. Only ``n_obs``, ``steps_per_obs`` and
    ``burn_in_steps`` (loop counts) are static. The loop is a hand-written
    ``lax.scan`` rather than ``diffrax.diffeqsolve``: diffrax's fast
    ``UnsafeBrownianPath`` refuses reverse-mode differentiation and its
    ``VirtualBrownianTree`` costs a tree search per step; a scan over pre-split keys
    is the same Euler-Maruyama scheme, differentiable in reverse mode.

    Args:
      key: a ``jax.random`` key (same key, same paths).
      drift: the drift of one state.
      x0: initial states, shape ``(n, d)`` (array-like).
      diffusion: ``D > 0``.
      tau: observation interval ``> 0``.
      n_obs: observations per trajectory (``>= 2``).
      steps_per_obs: Euler steps per interval (static).
      burn_in: time simulated before the first observation (``>= 0``).
      burn_in_steps: Euler steps of the burn-in (static; ``>= 1`` when ``burn_in > 0``).

    Returns:
      The observations, shape ``(n, n_obs, d)``.
    """
    check_key("key", key)
    f = _drift("drift", drift)
    x0 = as_array("x0", x0)
    check_array("x0", x0, ndim=2, dtype="floating")
    n_obs = check_int("n_obs", n_obs, min=2)
    steps_per_obs = check_int("steps_per_obs", steps_per_obs, min=1)
    burn_in_steps = check_int("burn_in_steps", burn_in_steps, min=0)
    diffusion = _positive("diffusion", diffusion, x0.dtype)
    tau = _positive("tau", tau, x0.dtype)
    burn_in = _nonnegative("burn_in", burn_in, x0.dtype)
    if burn_in_steps == 0 and not isinstance(burn_in, jax.core.Tracer) and float(burn_in) > 0:
        raise ValueError(f"burn_in = {float(burn_in)} > 0 needs burn_in_steps >= 1, got 0")
    return _simulate(key, f, x0, diffusion, tau, burn_in, n_obs, steps_per_obs, burn_in_steps)


@eqx.filter_jit
def _simulate(key, f, x0, diffusion, tau, burn_in, n_obs, steps_per_obs, burn_in_steps):
    sigma = jnp.sqrt(2.0 * diffusion)
    fb = jax.vmap(f)

    def em(x, k, dt):
        noise = jax.random.normal(k, x.shape, x.dtype)
        return x + fb(x) * dt + sigma * jnp.sqrt(dt) * noise

    k_burn, k_obs = jax.random.split(key)
    x = x0
    if burn_in_steps > 0:
        dt_b = burn_in / burn_in_steps
        x, _ = jax.lax.scan(lambda y, k: (em(y, k, dt_b), None), x,
                            jax.random.split(k_burn, burn_in_steps))
    dt = tau / steps_per_obs

    def interval(y, ks):
        y, _ = jax.lax.scan(lambda z, k: (em(z, k, dt), None), y, ks)
        return y, y

    keys = jax.random.split(k_obs, (n_obs - 1, steps_per_obs))
    _, ys = jax.lax.scan(interval, x, keys)
    return jnp.concatenate([x[:, None], jnp.moveaxis(ys, 0, 1)], axis=1)


def check_observations(name: str, obs, times=None) -> None:
    """Observations ``(n_traj, n_obs, d)``: finite, at least 2 times; ``times`` increasing."""
    check_array(name, obs, ndim=3, dtype="floating")
    if obs.shape[0] < 1:
        raise ValueError(f"{name} needs at least one trajectory, got shape {obs.shape}")
    if obs.shape[1] < 2:
        raise ValueError(f"{name} needs at least 2 observation times, got shape {obs.shape}")
    if times is not None:
        check_array("times", times, ndim=1, dtype="number")
        if times.shape[0] != obs.shape[1]:
            raise ValueError(
                f"times must have one entry per observation ({obs.shape[1]}), got "
                f"{times.shape[0]}"
            )
        if isinstance(times, jax.core.Tracer):
            return
        t = np.asarray(times, dtype=float)
        if not np.all(np.diff(t) > 0):
            bad = int(np.argmin(np.diff(t) > 0))
            raise ValueError(
                f"times must be strictly increasing, got times[{bad}]={t[bad]} >= "
                f"times[{bad + 1}]={t[bad + 1]}"
            )


def _pairs(obs):
    d = obs.shape[-1]
    return obs[:, :-1].reshape(-1, d), obs[:, 1:].reshape(-1, d)


def _intervals(obs, tau, times):
    """Per-pair interval lengths, shape (n_traj * (n_obs - 1),)."""
    if times is None:
        return None
    dts = jnp.diff(jnp.asarray(times, obs.dtype))
    return jnp.tile(dts, obs.shape[0])


# --------------------------------------------------------------------------- regression


class AbstractFeatures(eqx.Module):
    """A drift model's basis ``phi: R^d -> R^m`` (``f(x) = C^T phi(x)``).

    Bases are values: :class:`Features` (random Fourier features, the non-parametric
    default) and :class:`PolynomialFeatures` (monomials, the parametric basis of
    StochasticForceInference). A new basis subclasses this with :meth:`__call__` and
    :attr:`size`.
    """

    @abc.abstractmethod
    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "n m"]:
        """The basis at a batch of states."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of basis functions ``m`` (static)."""


class Features(AbstractFeatures):
    """Random Fourier features ``phi(x) = sqrt(2/m) cos(W x / ell + b)`` of an RBF kernel."""

    w: Float[Array, "m d"]
    b: Float[Array, " m"]
    lengthscale: Float[Array, ""]

    def __call__(self, x):
        m = self.b.shape[0]
        return math.sqrt(2.0 / m) * jnp.cos(x @ self.w.T / self.lengthscale + self.b)

    @property
    def size(self):
        return self.b.shape[0]


class PolynomialFeatures(AbstractFeatures):
    """Monomials ``prod_j (x_j / scale)^{a_j}`` with ``sum_j a_j <= degree``.

    The parametric basis of StochasticForceInference (``monomials_up_to``): with
    degree 3 it contains the polynomial drifts of every system here, so an estimator
    on it compares with SFI on equal footing. ``scale`` (traced) keeps the monomials of
    order one on the data (e.g. the observations' standard deviation); the coefficient
    prior ``N(0, prior_var I)`` acts on the scaled monomials. Build with
    :func:`polynomial_features`.
    """

    exponents: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    scale: Float[Array, ""]

    def __call__(self, x):
        z = x / self.scale
        one = jnp.ones(x.shape[:-1], x.dtype)
        # static integer powers (exact for negative states, finite gradients at 0)
        cols = [functools.reduce(jnp.multiply, [z[..., j] ** a for j, a in enumerate(e) if a],
                                 one) for e in self.exponents]
        return jnp.stack(cols, axis=-1)

    @property
    def size(self):
        return len(self.exponents)


class DriftModel(AbstractDrift):
    """A drift ``f(x) = C^T phi(x)`` on a basis (random Fourier features or monomials; final).

    Calling it on one state gives the drift there, so a fitted model can be passed to
    :func:`simulate`; :func:`predict` evaluates a batch.
    """

    features: AbstractFeatures
    coef: Float[Array, "m d"]

    def __call__(self, x):
        return predict(self, x[None])[0]


def random_features(key: jax.Array, dim: int, n_features: int, lengthscale: float) -> Features:
    """``n_features`` random Fourier features of the RBF kernel ``exp(-|x-y|^2 / 2 ell^2)``."""
    check_key("key", key)
    dim = check_int("dim", dim, min=1)
    n_features = check_int("n_features", n_features, min=1)
    check_scalar("lengthscale", lengthscale, gt=0.0)
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (n_features, dim))
    b = jax.random.uniform(kb, (n_features,), maxval=2.0 * math.pi)
    return Features(w, b, jnp.asarray(lengthscale, w.dtype))


def polynomial_features(dim: int, degree: int = 3,
                        scale: float | Float[Array, ""] = 1.0) -> PolynomialFeatures:
    """All ``comb(dim + degree, degree)`` monomials of total degree ``<= degree``
    (constant included), graded by degree; ``scale`` divides the states first."""
    dim = check_int("dim", dim, min=1)
    degree = check_int("degree", degree, min=1)
    if not isinstance(scale, jax.core.Tracer):
        check_scalar("scale", scale, gt=0.0)
    exps = sorted((e for e in itertools.product(range(degree + 1), repeat=dim)
                   if sum(e) <= degree), key=lambda e: (sum(e), tuple(-a for a in e)))
    return PolynomialFeatures(tuple(exps), jnp.asarray(scale, jnp.result_type(float)))


def feature_map(feats: AbstractFeatures, x: Float[Array, "n d"]) -> Float[Array, "n m"]:
    """The basis at a batch of states, ``(n, m)``."""
    if not isinstance(feats, AbstractFeatures):
        raise TypeError(f"feats must be a langevin basis (lg.random_features(...) or "
                        f"lg.polynomial_features(...)), got {type(feats).__name__}")
    return feats(x)


def predict(model: DriftModel, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The model drift at a batch of states."""
    return feature_map(model.features, x) @ model.coef


class DriftStats(NamedTuple):
    """Sufficient statistics of the increment likelihood (the normal equations)."""

    gram: Array  # sum_i w_i dt_i phi_i phi_i^T
    rhs: Array  # sum_i w_i phi_i dx_i^T


def drift_stats(
    feats: AbstractFeatures,
    x: Float[Array, "n d"],
    dx: Float[Array, "n d"],
    dt: float | Float[Array, ""] | Float[Array, " n"],
    weights: Float[Array, " n"] | None = None,
) -> DriftStats:
    """Sufficient statistics of the increment likelihood ``dx ~ N(f(x) dt, 2 D dt)``."""
    phi = feature_map(feats, x)
    w = jnp.ones(x.shape[0], x.dtype) if weights is None else weights
    wdt = w * jnp.broadcast_to(dt, w.shape)
    return DriftStats((phi * wdt[:, None]).T @ phi, (phi * w[:, None]).T @ dx)


def solve_drift(
    feats: AbstractFeatures, stats: DriftStats, diffusion: float | Float[Array, ""],
    prior_var: float,
) -> DriftModel:
    """Posterior mean ``(G / 2D + I / prior_var) C = R / 2D`` (Cholesky, one refinement).

    ``I / prior_var`` bounds the condition number by ``1 + prior_var ||G|| / 2D``, so
    the float32 factorisation is always defined; one step of iterative refinement
    recovers the digits the normal equations lose.
    """
    m = stats.gram.shape[0]
    a = stats.gram / (2.0 * diffusion) + jnp.eye(m, dtype=stats.gram.dtype) / prior_var
    rhs = stats.rhs / (2.0 * diffusion)
    cf = jax.scipy.linalg.cho_factor(a)
    c = jax.scipy.linalg.cho_solve(cf, rhs)
    c = c + jax.scipy.linalg.cho_solve(cf, rhs - a @ c)
    return DriftModel(feats, c)


def fit_drift(
    feats: AbstractFeatures,
    x: Float[Array, "n d"],
    dx: Float[Array, "n d"],
    dt: float | Float[Array, " n"],
    diffusion: float | Float[Array, ""],
    *,
    prior_var: float | Float[Array, ""] = PRIOR_VAR,
    weights: Float[Array, " n"] | None = None,
) -> DriftModel:
    """Bayesian KRR drift from increments ``dx`` over times ``dt`` starting at ``x``.

    Args:
      feats: the random features of the drift model (:func:`random_features`).
      x: start states, shape ``(n, d)`` with ``n >= 1`` (array-like).
      dx: increments, same shape.
      dt: the time of each increment, a scalar or shape ``(n,)``; every entry ``> 0``
        (checked now when concrete, by ``equinox.error_if`` under ``jit``/``vmap``).
      diffusion: the known ``D > 0``.
      prior_var: GP prior variance of each coefficient (``> 0``).
      weights: optional non-negative weight per increment.

    Returns:
      The posterior-mean :class:`DriftModel`. Differentiable in ``x``, ``dx``, ``dt``,
      ``diffusion``, ``prior_var`` and ``weights``; ``dt``, ``diffusion`` and
      ``prior_var`` are traced (``vmap`` over them).
    """
    x = as_array("x", x)
    dx = as_array("dx", dx)
    check_array("x", x, ndim=2, dtype="floating")
    if x.shape[0] < 1:
        raise ValueError(f"x must hold at least one increment, got shape {x.shape}")
    check_array("dx", dx, shape=x.shape, dtype="floating")
    dt = _positive("dt", dt, x.dtype)
    if dt.ndim not in (0, 1) or (dt.ndim == 1 and dt.shape[0] != x.shape[0]):
        raise ValueError(f"dt must be a scalar or have shape ({x.shape[0]},), got {dt.shape}")
    diffusion = _positive("diffusion", diffusion, x.dtype)
    prior_var = _positive("prior_var", prior_var, x.dtype)
    if weights is not None:
        weights = as_array("weights", weights)
        check_array("weights", weights, shape=(x.shape[0],), dtype="floating", ge=0.0)
    return solve_drift(feats, drift_stats(feats, x, dx, dt, weights), diffusion, prior_var)


def direct_estimator(
    feats: AbstractFeatures,
    obs: Float[Array, "n k d"],
    tau: float | Float[Array, ""],
    diffusion: float | Float[Array, ""],
    *,
    prior_var: float | Float[Array, ""] = PRIOR_VAR,
    times: Float[Array, " k"] | None = None,
) -> DriftModel:
    """Kramers-Moyal drift: the increment likelihood of the observed pairs at step ``tau``.

    ``times`` (optional, strictly increasing) gives irregular observation times shared
    by all trajectories; otherwise the pairs are ``tau`` apart. ``tau``, ``diffusion``
    and ``prior_var`` are traced (``vmap`` over them); the result is differentiable in
    ``obs``, ``tau``, ``diffusion`` and ``prior_var``.
    """
    obs = as_array("obs", obs)
    check_observations("obs", obs, times)
    tau = _positive("tau", tau, obs.dtype)
    diffusion = _positive("diffusion", diffusion, obs.dtype)
    prior_var = _positive("prior_var", prior_var, obs.dtype)
    x0, x1 = _pairs(obs)
    dts = _intervals(obs, tau, times)
    dts = tau if dts is None else dts
    return solve_drift(feats, drift_stats(feats, x0, x1 - x0, dts), diffusion, prior_var)


# --------------------------------------------------------------------------- geometry


def scott_bandwidth(samples: Float[Array, "n d"]) -> Float[Array, ""]:
    """Scott's rule ``h = sigma n^(-1/(d+4))`` (sigma the mean per-axis std)."""
    n, d = samples.shape
    return jnp.mean(jnp.std(samples, axis=0)) * n ** (-1.0 / (d + 4.0))


def kde_score(
    x: Float[Array, "q d"], samples: Float[Array, "n d"], bandwidth: float | Float[Array, ""]
) -> Float[Array, "q d"]:
    """``grad log rho_h(x)`` of a Gaussian KDE: ``(sum_i w_i x_i - x) / h^2``, softmax ``w``."""
    d2 = jnp.sum(jnp.square(x[:, None, :] - samples[None, :, :]), -1)
    w = jax.nn.softmax(-0.5 * d2 / bandwidth**2, axis=1)
    return (w @ samples - x) / bandwidth**2


def kde_density(
    x: Float[Array, "q d"], samples: Float[Array, "n d"], bandwidth: float | Float[Array, ""]
) -> Float[Array, " q"]:
    """Gaussian kernel density estimate of ``samples`` at ``x``."""
    n, d = samples.shape
    d2 = jnp.sum(jnp.square(x[:, None, :] - samples[None, :, :]), -1)
    norm = n * (2.0 * math.pi * bandwidth**2) ** (d / 2.0)
    return jnp.sum(jnp.exp(-0.5 * d2 / bandwidth**2), axis=1) / norm


def geometric_drift(
    x: Float[Array, "q d"],
    obs: Float[Array, "n k d"],
    diffusion: float,
    bandwidth: float | None = None,
) -> Float[Array, "q d"]:
    """``D grad log rho(x)`` with ``rho`` the KDE of all observations.

    Default bandwidth ``sigma n^(-1/(d+6))``: the rate that balances bias and variance
    for a density's *gradient* (Scott's ``n^(-1/(d+4))`` is tuned for the density and
    leaves the score too noisy).
    """
    obs = as_array("obs", obs)
    check_observations("obs", obs)
    diffusion = _positive("diffusion", diffusion, obs.dtype)
    pts = obs.reshape(-1, obs.shape[-1])
    n, d = pts.shape
    h = jnp.mean(jnp.std(pts, axis=0)) * n ** (-1.0 / (d + 6.0)) if bandwidth is None else bandwidth
    return diffusion * kde_score(x, pts, h)


def fit_function(
    feats: AbstractFeatures, x: Float[Array, "n d"], y: Float[Array, "n d"], ridge: float = 1e-3
) -> DriftModel:
    """Plain ridge regression of values ``y`` at ``x`` (``ridge`` relative to ``n``)."""
    phi = feature_map(feats, x)
    a = phi.T @ phi + ridge * x.shape[0] * jnp.eye(phi.shape[1], dtype=phi.dtype)
    cf = jax.scipy.linalg.cho_factor(a)
    return DriftModel(feats, jax.scipy.linalg.cho_solve(cf, phi.T @ y))


def estimate_diffusion(obs: Float[Array, "n k d"], tau: float) -> Float[Array, ""]:
    """Quadratic-variation estimate ``D = mean |dx - mean dx|^2 / (2 d tau)`` (tau -> 0)."""
    obs = as_array("obs", obs)
    check_observations("obs", obs)
    tau = _positive("tau", tau, obs.dtype)
    x0, x1 = _pairs(obs)
    dx = x1 - x0
    return jnp.mean(jnp.sum(jnp.square(dx - jnp.mean(dx, 0)), -1)) / (2.0 * x0.shape[-1] * tau)


# --------------------------------------------------------------------------- bridges


class Bridges(NamedTuple):
    """Bridges between observation pairs and their importance weights."""

    paths: Float[Array, "p b s d"]  # paths[..., 0, :] = x_start, paths[..., -1, :] = x_end
    log_weights: Float[Array, "p b"]  # unnormalised log importance weights
    weights: Float[Array, "p b"]  # self-normalised over the bridges of each pair
    # log of the mean importance weight of each pair: with guidance = 0 an unbiased
    # (in exp) estimate of the Euler model's transition density p(x_end | x_start).
    log_transition: Float[Array, " p"]


def sample_bridges(
    key: jax.Array,
    drift: Callable[[Array], Array],
    x_start: Float[Array, "p d"],
    x_end: Float[Array, "p d"],
    tau: float | Float[Array, " p"],
    diffusion: float | Float[Array, ""],
    *,
    n_steps: int = 20,
    n_bridges: int = 8,
    log_density: Callable[[Array], Array] | None = None,
    guidance: float = 0.0,
) -> Bridges:
    """Guided-proposal bridges of ``dX = drift(X) dt + sqrt(2D) dW`` from ``x_start`` to ``x_end``.

    ``drift`` is a drift of one state (an :class:`AbstractDrift`, a fitted
    :class:`DriftModel` or any callable ``(d,) -> (d,)``); ``log_density`` maps a batch
    ``(q, d) -> (q,)``. Proposal (Euler, ``dt = tau / n_steps``):
    ``X_{s+1} = X_s + [drift(X_s) + (x_end - X_s) / (tau - t_s)] dt + sqrt(2 D dt r_s) xi``
    with ``r_s = (tau - t_s - dt) / (tau - t_s)`` (the discrete Brownian bridge's
    variance, Durham & Gallant's modified diffusion bridge) for ``s < n_steps - 1``,
    then ``X_n = x_end``. For ``drift = 0`` the proposal is the exact bridge and every
    weight equals the transition density. Log weight: the Euler chain's
    density of the whole path (its last transition lands on ``x_end``) minus the
    proposal's, plus ``guidance * sum_s log_density(X_s) dt`` when a density is given.
    ``tau`` may differ per pair (irregular observation times). ``tau``, ``diffusion``,
    ``guidance`` and the drift's parameters are traced; ``n_steps`` and ``n_bridges`` are
    static.
    """
    check_key("key", key)
    f = _drift("drift", drift)
    x_start = as_array("x_start", x_start)
    x_end = as_array("x_end", x_end)
    check_array("x_start", x_start, ndim=2, dtype="floating")
    check_array("x_end", x_end, shape=x_start.shape, dtype="floating")
    if np.ndim(tau) != 0:
        check_array("tau", tau, shape=(x_start.shape[0],), dtype="floating")
    try:
        tau = _positive("tau", tau, x_start.dtype)
    except ValueError as exc:
        raise ValueError(f"{exc} for every pair (observation times must increase)") from None
    diffusion = _positive("diffusion", diffusion, x_start.dtype)
    n_steps = check_int("n_steps", n_steps, min=2)
    n_bridges = check_int("n_bridges", n_bridges, min=1)
    guidance = _nonnegative("guidance", guidance, x_start.dtype)
    return _bridges(key, jax.vmap(f), x_start, x_end, tau, diffusion, n_steps, n_bridges,
                    log_density, guidance)


def _bridges(key, drift, x_start, x_end, tau, diffusion, n_steps, n_bridges,
             log_density=None, guidance=0.0):
    p, d = x_start.shape
    tau = jnp.broadcast_to(jnp.asarray(tau, x_start.dtype), (p,))
    dt = (tau / n_steps)[:, None, None]  # (p, 1, 1)
    var = 2.0 * diffusion * dt
    end = x_end[:, None, :]

    def flat(fn, y):
        return fn(y.reshape(-1, d)).reshape(y.shape)

    def log_density_term(y):
        if log_density is None:
            return jnp.zeros(y.shape[:2], y.dtype)
        return guidance * log_density(y.reshape(-1, d)).reshape(y.shape[:2]) * dt[..., 0]

    def step(carry, inp):
        y, logw = carry
        s, k = inp
        remaining = tau[:, None, None] - s * dt
        f = flat(drift, y)
        mean_model = y + f * dt
        mean_prop = mean_model + (end - y) / remaining * dt
        # The discrete Brownian bridge's conditional variance (Durham & Gallant 2002's
        # modified diffusion bridge): with the plain 2 D dt the weights of even f = 0
        # keep an O(1) spread from the steps next to the pinned end.
        var_prop = var * (remaining - dt) / remaining
        y_new = mean_prop + jnp.sqrt(var_prop) * jax.random.normal(k, y.shape, y.dtype)
        # log N(y_new; mean_model, var) - log N(y_new; mean_prop, var_prop)
        lw = (jnp.sum(jnp.square(y_new - mean_prop), -1) / (2.0 * var_prop[..., 0])
              - jnp.sum(jnp.square(y_new - mean_model), -1) / (2.0 * var[..., 0])
              + 0.5 * d * jnp.log(var_prop[..., 0] / var[..., 0]))
        logw = logw + lw + log_density_term(y)
        return (y_new, logw), y_new

    y0 = jnp.broadcast_to(x_start[:, None, :], (p, n_bridges, d))
    logw0 = jnp.zeros((p, n_bridges), x_start.dtype)
    steps = jnp.arange(n_steps - 1, dtype=x_start.dtype)
    keys = jax.random.split(key, n_steps - 1)
    (y_last, logw), ys = jax.lax.scan(step, (y0, logw0), (steps, keys))
    # Last transition of the model chain into x_end (the proposal puts it there surely).
    mean_last = y_last + flat(drift, y_last) * dt
    logw = logw - jnp.sum(jnp.square(end - mean_last), -1) / (2.0 * var[..., 0])
    # The Gaussian constant of that last transition (the others cancel in the ratio).
    logw = logw - 0.5 * d * jnp.log(2.0 * math.pi * var[:, :, 0])
    logw = logw + log_density_term(y_last)
    paths = jnp.concatenate([y0[None], ys, jnp.broadcast_to(end, y0.shape)[None]], axis=0)
    paths = jnp.moveaxis(paths, 0, 2)  # (p, b, n_steps + 1, d)
    # A bridge whose Euler steps overflowed (an unbounded model drift, e.g. a cubic) has
    # zero weight, and a finite placeholder path so that zero times it stays zero.
    ok = jnp.isfinite(logw) & jnp.all(jnp.isfinite(paths), axis=(2, 3))
    logw = jnp.where(ok, logw, -jnp.inf)
    paths = jnp.where(ok[..., None, None], paths, y0[:, :, None, :])
    # a pair whose bridges all overflowed: weights 0 (no M-step term), transition -inf
    weights = jnp.where(jnp.any(ok, axis=1, keepdims=True), jax.nn.softmax(logw, axis=1), 0.0)
    log_transition = jax.nn.logsumexp(logw, axis=1) - math.log(n_bridges)
    return Bridges(paths, logw, weights, log_transition)


@dataclasses.dataclass(frozen=True)
class EMConfig:
    """Settings of the Monte-Carlo EM of :func:`path_augmentation` (one owner per number).

    Attributes:
      n_iter: EM iterations (a budget when ``select="max_posterior"``).
      n_steps: Euler steps of each bridge (static; the bridge resolution).
      n_bridges: bridges per observation pair in each E-step.
      n_score_bridges: bridges per pair to score an iterate (``None``: ``n_bridges``).
      prior_var: GP prior variance of each drift coefficient (traced: ``vmap`` over it).
      guidance: weight of the invariant-density tilt of the bridges (traced; 0 = off).
      select: ``"max_posterior"`` (the iterate with the highest estimated observed-data
        log posterior), ``"holdout"`` (EM on the other pairs; the iterate with the highest
        estimated log-likelihood of the held-out pairs) or ``"last"``.
      holdout_every: with ``select="holdout"``, every ``holdout_every``-th pair is held
        out (static; 5: a fifth of the pairs).
    """

    n_iter: int = 10
    n_steps: int = 20
    n_bridges: int = 8
    n_score_bridges: int | None = None
    prior_var: float = PRIOR_VAR
    guidance: float = 0.0
    select: str = "max_posterior"
    holdout_every: int = 5

    def __post_init__(self):
        check_int("n_iter", self.n_iter, min=1)
        check_int("n_steps", self.n_steps, min=2)
        check_int("n_bridges", self.n_bridges, min=1)
        if self.n_score_bridges is not None:
            check_int("n_score_bridges", self.n_score_bridges, min=1)
        check_scalar("prior_var", self.prior_var, gt=0.0)
        check_scalar("guidance", self.guidance, ge=0.0)
        check_choice("select", self.select, ("max_posterior", "holdout", "last"))
        check_int("holdout_every", self.holdout_every, min=2)

    @property
    def score_bridges(self) -> int:
        return self.n_bridges if self.n_score_bridges is None else self.n_score_bridges


class Pairs(NamedTuple):
    """Consecutive observation pairs, what every EM step reads (:func:`observation_pairs`)."""

    x_start: Float[Array, "p d"]
    x_end: Float[Array, "p d"]
    dt: Float[Array, " p"]  # the interval of each pair
    points: Float[Array, "q d"]  # every observation (the invariant density's KDE)


def observation_pairs(
    obs: Float[Array, "n k d"],
    tau: float | Float[Array, ""],
    times: Float[Array, " k"] | None = None,
) -> Pairs:
    """The pairs ``(x_k, x_{k+1})`` of every trajectory and their intervals.

    ``tau`` (traced) is the interval of regularly spaced observations; ``times``
    (strictly increasing, shared by all trajectories) overrides it.
    """
    obs = as_array("obs", obs)
    check_observations("obs", obs, times)
    tau = _positive("tau", tau, obs.dtype)
    x0, x1 = _pairs(obs)
    dts = _intervals(obs, tau, times)
    dts = jnp.broadcast_to(tau, (x0.shape[0],)) if dts is None else dts
    return Pairs(x0, x1, dts, obs.reshape(-1, obs.shape[-1]))


class AugmentationState(NamedTuple):
    """The EM state: the current drift model and how many steps produced it."""

    model: DriftModel
    iteration: Array


class AugmentationInfo(NamedTuple):
    """What one EM step saw."""

    ess: Float[Array, ""]  # mean effective sample size fraction of the E-step's bridges
    # Monte-Carlo estimate of the observed-data log posterior of the step's *input*
    # model: sum over pairs of log mean importance weight + log prior.
    log_posterior: Float[Array, ""]


def _is_zero(x) -> bool:
    return not isinstance(x, jax.core.Tracer) and np.ndim(x) == 0 and float(x) == 0.0


def _log_density(points, use):
    if not use:
        return None
    h = scott_bandwidth(points)

    def log_density(z):
        return jnp.log(kde_density(z, points, h) + 1e-12)

    return log_density


def _model_bridges(key, model, pairs, diffusion, n_steps, n_bridges, log_density, guidance):
    return _bridges(key, lambda z: predict(model, z), pairs.x_start, pairs.x_end, pairs.dt,
                    diffusion, n_steps, n_bridges, log_density, guidance)


def _objective(br, model, prior_var):
    return jnp.sum(br.log_transition) - 0.5 * jnp.sum(jnp.square(model.coef)) / prior_var


@functools.partial(jax.jit, static_argnums=(6, 7, 8, 10))
def _em_step(key, state, pairs, diffusion, prior_var, guidance, n_steps, n_bridges,
             use_density, score_key, n_score, score_pairs=None):
    model = state.model
    feats = model.features
    d = pairs.x_start.shape[-1]
    log_density = _log_density(pairs.points, use_density)
    br = _model_bridges(key, model, pairs, diffusion, n_steps, n_bridges, log_density, guidance)
    sq = jnp.sum(jnp.square(br.weights), axis=1)
    ess = jnp.mean(jnp.where(sq > 0, 1.0 / jnp.where(sq > 0, sq, 1.0), 0.0)) / n_bridges
    if score_key is None:
        objective = _objective(br, model, prior_var)
    elif score_pairs is None:
        sb = _model_bridges(score_key, model, pairs, diffusion, n_steps, n_score, log_density,
                            guidance)
        objective = _objective(sb, model, prior_var)
    else:  # held-out pairs: their Monte-Carlo log-likelihood, no prior
        sb = _model_bridges(score_key, model, score_pairs, diffusion, n_steps, n_score,
                            log_density, guidance)
        objective = jnp.sum(sb.log_transition)
    dt = jnp.broadcast_to((pairs.dt / n_steps)[:, None], br.weights.shape).reshape(-1)
    w = br.weights.reshape(-1)
    steps = jnp.moveaxis(br.paths, 2, 0)  # (s + 1, p, b, d)

    # The normal equations accumulate step by step: the paths' Phi is never materialised.
    def acc(stats, s):
        xs = steps[s].reshape(-1, d)
        dx = (steps[s + 1] - steps[s]).reshape(-1, d)
        st = drift_stats(feats, xs, dx, dt, w)
        return DriftStats(stats.gram + st.gram, stats.rhs + st.rhs), None

    m = feats.size
    dtype = pairs.x_start.dtype
    zero = DriftStats(jnp.zeros((m, m), dtype), jnp.zeros((m, d), dtype))
    stats, _ = jax.lax.scan(acc, zero, jnp.arange(n_steps))
    new = solve_drift(feats, stats, diffusion, prior_var)
    # An unbounded basis (monomials) can fit a drift whose Euler bridges overflow: the
    # step then keeps its input model, an overflowed score counts as -inf (never
    # selected) and an overflowed E-step has no effective samples.
    new = DriftModel(feats, jnp.where(jnp.all(jnp.isfinite(new.coef)), new.coef, model.coef))
    return AugmentationState(new, state.iteration + 1), AugmentationInfo(
        jnp.where(jnp.isfinite(ess), ess, 0.0), _finite_or_minus_inf(objective))


def _finite_or_minus_inf(x):
    return jnp.where(jnp.isfinite(x), x, -jnp.inf)


def augmentation_init(model: DriftModel) -> AugmentationState:
    """The EM state at the initial drift estimate ``model`` (iteration 0)."""
    if not isinstance(model, DriftModel):
        raise TypeError(f"model must be a DriftModel, got {type(model).__name__}")
    return AugmentationState(model, jnp.zeros((), jnp.int32))


def augmentation_step(
    key: jax.Array,
    state: AugmentationState,
    pairs: Pairs,
    diffusion: float | Float[Array, ""],
    config: EMConfig = EMConfig(),
    *,
    score_key: jax.Array | None = None,
) -> tuple[AugmentationState, AugmentationInfo]:
    """One Monte-Carlo EM step: bridges of ``state.model``, then the drift from the bridges.

    E-step: ``config.n_bridges`` weighted bridges per pair (:func:`sample_bridges`);
    M-step: the increment likelihood of their fine increments (:func:`fit_drift`'s
    posterior mean), each weighted by its bridge's importance weight. The info's
    ``log_posterior`` scores the *input* model: with the E-step's own bridges, or, with
    ``score_key``, with ``config.score_bridges`` bridges drawn from that key (pass the
    same ``score_key`` at every step for common random numbers across iterates).

    ``diffusion``, ``config.prior_var`` and ``config.guidance`` are traced (``vmap``
    over them); ``config.n_steps`` and ``config.n_bridges`` are static. The step is
    differentiable in the observations and ``diffusion`` through the reparametrised
    bridges, but the importance weights make that gradient noisy.
    """
    check_key("key", key)
    if score_key is not None:
        check_key("score_key", score_key)
    if not isinstance(state, AugmentationState):
        raise TypeError(f"state must be an AugmentationState (augmentation_init), got "
                        f"{type(state).__name__}")
    if not isinstance(pairs, Pairs):
        raise TypeError(f"pairs must be Pairs (observation_pairs), got {type(pairs).__name__}")
    dtype = pairs.x_start.dtype
    diffusion = _positive("diffusion", diffusion, dtype)
    prior_var = _positive("config.prior_var", config.prior_var, dtype)
    use_density = not _is_zero(config.guidance)
    guidance = _nonnegative("config.guidance", config.guidance, dtype)
    return _em_step(key, state, pairs, diffusion, prior_var, guidance, config.n_steps,
                    config.n_bridges, use_density, score_key, config.score_bridges)


class AugmentationResult(NamedTuple):
    model: DriftModel  # the selected iterate (see ``select`` in :class:`EMConfig`)
    history: Float[Array, "it g d"]  # drift at the probe points: init, then after each iteration
    ess: Float[Array, " it"]  # mean effective sample size fraction of each E-step's bridges
    # Monte-Carlo estimate of the observed-data log posterior of each iterate in ``history``:
    # sum over pairs of log mean importance weight (log p(x_{k+1} | x_k)) + log prior
    # (select="holdout": the held-out pairs' log-likelihood, no prior; -inf: overflowed).
    log_posterior: Float[Array, " it"]
    selected: Array  # index into ``history`` of the returned model


def path_augmentation(
    key: jax.Array,
    init: DriftModel,
    obs: Float[Array, "n k d"],
    tau: float | Float[Array, ""],
    diffusion: float | Float[Array, ""],
    config: EMConfig = EMConfig(),
    *,
    times: Float[Array, " k"] | None = None,
    probe: Float[Array, "g d"] | None = None,
) -> AugmentationResult:
    """The paper's iteration: bridges of the current drift, then the drift from the bridges.

    A thin ``lax.scan`` driver over :func:`augmentation_init` / :func:`augmentation_step`
    (``config.n_iter`` steps). ``init`` is the initial non-parametric estimate (the
    geometric one in the paper's setting, :func:`geometric_drift` fitted with
    :func:`fit_function`). ``config.guidance > 0`` tilts the bridges toward the
    observations' invariant density (KDE, Scott bandwidth). ``probe`` points (default:
    the first observation of each trajectory) record the drift after each iteration in
    ``history``.

    Which iterate is returned (``config.select``): Monte-Carlo EM does not increase the
    likelihood monotonically (the E-step is a finite, importance-weighted sample), so
    ``"max_posterior"`` (default) returns the iterate with the highest estimate of the
    observed-data objective that EM ascends, ``sum_k log p(x_{k+1} | x_k) - |C|^2 / 2
    prior_var``, where each transition density is the mean importance weight of the
    iterate's own bridges (:attr:`Bridges.log_transition`); it uses the observations
    only. ``"holdout"`` fits on all pairs but every ``config.holdout_every``-th and returns
    the iterate whose bridges give the held-out pairs the highest estimated
    log-likelihood (a selection validated out of sample; ``log_posterior`` then holds
    those held-out scores). ``"last"`` returns the last iterate. ``n_iter`` is then a
    budget.
    Every iterate (init, ..., last) is scored with ``config.score_bridges`` bridges
    drawn with one shared key (common random numbers, so the comparison between
    iterates is not dominated by Monte-Carlo noise); scoring needs no normal equations,
    so it is cheap next to an EM step. With ``guidance > 0`` the score is that of the
    tilted path measure, not a likelihood.

    **Transformations.** ``tau``, ``diffusion``, ``config.prior_var`` and
    ``config.guidance`` are traced: ``vmap`` over them (build the config inside the
    vmapped function). The selection (an ``argmax``) is piecewise constant, so
    gradients flow through the selected iterate only.
    """
    check_key("key", key)
    if not isinstance(init, DriftModel):
        raise TypeError(f"init must be a DriftModel, got {type(init).__name__}")
    if not isinstance(config, EMConfig):
        raise TypeError(f"config must be an EMConfig, got {type(config).__name__}")
    pairs = observation_pairs(obs, tau, times)
    dtype = pairs.x_start.dtype
    if probe is None:
        probe = pairs.points.reshape(jnp.shape(obs)[0], -1, pairs.points.shape[-1])[:, 0]
    probe = as_array("probe", probe)
    check_array("probe", probe, shape=(None, pairs.x_start.shape[-1]), dtype="floating")
    diffusion = _positive("diffusion", diffusion, dtype)
    prior_var = _positive("config.prior_var", config.prior_var, dtype)
    use_density = not _is_zero(config.guidance)
    guidance = _nonnegative("config.guidance", config.guidance, dtype)
    score_pairs = None
    if config.select == "holdout":
        pairs, score_pairs = _split_pairs(pairs, config.holdout_every)
    return _augment(key, init, pairs, diffusion, prior_var, guidance, probe, config.n_iter,
                    config.n_steps, config.n_bridges, config.score_bridges, use_density,
                    config.select, score_pairs)


def _split_pairs(pairs: Pairs, every: int) -> tuple[Pairs, Pairs]:
    """(fit, held-out): every ``every``-th pair held out (a static split: shapes fixed)."""
    p = pairs.x_start.shape[0]
    if p < every:
        raise ValueError(f"select='holdout' needs at least holdout_every = {every} "
                         f"observation pairs, got {p}")
    held = np.arange(p) % every == every - 1
    fit, val = np.flatnonzero(~held), np.flatnonzero(held)
    return (Pairs(pairs.x_start[fit], pairs.x_end[fit], pairs.dt[fit], pairs.points),
            Pairs(pairs.x_start[val], pairs.x_end[val], pairs.dt[val], pairs.points))


@functools.partial(jax.jit, static_argnums=(7, 8, 9, 10, 11, 12))
def _augment(key, init, pairs, diffusion, prior_var, guidance, probe, n_iter, n_steps,
             n_bridges, n_score, use_density, select, score_pairs=None):
    k_em, k_score = jax.random.split(key)

    def step(state, k):
        new, info = _em_step(k, state, pairs, diffusion, prior_var, guidance, n_steps,
                             n_bridges, use_density, k_score, n_score, score_pairs)
        return new, (predict(new.model, probe), new.model.coef, info)

    state, (hist, coefs, info) = jax.lax.scan(
        step, augmentation_init(init), jax.random.split(k_em, n_iter))
    log_density = _log_density(pairs.points, use_density)
    last = _model_bridges(k_score, state.model, pairs if score_pairs is None else score_pairs,
                          diffusion, n_steps, n_score, log_density, guidance)
    last_score = (_objective(last, state.model, prior_var) if score_pairs is None
                  else jnp.sum(last.log_transition))
    hist = jnp.concatenate([predict(init, probe)[None], hist], 0)
    coefs = jnp.concatenate([init.coef[None], coefs], 0)
    objective = jnp.concatenate([info.log_posterior, _finite_or_minus_inf(last_score)[None]])
    sel = jnp.asarray(n_iter) if select == "last" else jnp.argmax(objective)
    return AugmentationResult(DriftModel(init.features, coefs[sel]), hist, info.ess, objective,
                              sel)


# --------------------------------------------------------------------------- metric


def weighted_rmse(
    f_hat: Float[Array, "g d"], f_true: Float[Array, "g d"], weights: Float[Array, " g"]
) -> Float[Array, ""]:
    """``sqrt(sum_g w_g |f_hat - f|^2 / sum_g w_g)``: drift error where the data live."""
    return jnp.sqrt(jnp.sum(weights * jnp.sum(jnp.square(f_hat - f_true), -1)) / jnp.sum(weights))
