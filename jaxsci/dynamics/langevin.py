r"""Learning stochastic dynamics from temporally sparse samples by path augmentation.

Paper: "Learning stochastic dynamics from temporally sparse samples as stochastic
control" (ICML 2026; abstract in ``shared/seeds/000_*.txt``). The system is a 2-D SDE
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

The drift model for all three is non-parametric: Bayesian kernel ridge regression
(a Gaussian-process posterior mean) with ``m`` random Fourier features of an RBF
kernel (Rahimi & Recht 2007), ``f(x) = C^T phi(x)``, ``C ~ N(0, prior_var I)``.
With the likelihood above, the posterior mean solves
``(Phi^T W Phi dt / 2D + I / prior_var) C = Phi^T W dX / 2D`` (:func:`solve_drift`):
the noise level is the *known* increment variance ``2 D dt``, so the ridge is not a
free knob, and the ``I / prior_var`` term keeps the ``m x m`` system positive
definite with a margin, so a float32 Cholesky never breaks down. The normal
equations are accumulated time step by time step inside a ``lax.scan``, so the
augmented paths' ``Phi`` is never materialised.

Systems (:data:`SYSTEMS`, all 2-D, isotropic noise): ``double_well``
(conservative), ``rotating_well`` (a non-gradient landscape
``f = -(I + gamma J) grad U`` whose invariant density is still ``exp(-U / D)``),
``hopf`` (normal form), ``van_der_pol`` (Lienard form) and ``duffing`` (damped).
Trajectories are simulated with diffrax (Euler-Maruyama) and ``vmap`` over initial
conditions (:func:`simulate`). :func:`weighted_rmse` is the metric: drift RMSE on a
grid, weighted by the kernel density of the observations (:func:`kde_density`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "SYSTEMS",
    "CONSERVATIVE",
    "drift_fn",
    "simulate",
    "check_observations",
    "Features",
    "DriftModel",
    "random_features",
    "feature_map",
    "predict",
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
    "AugmentationResult",
    "path_augmentation",
    "weighted_rmse",
]


# --------------------------------------------------------------------------- systems


def _grad_double_well(x):
    # U = (x^2 - 1)^2 + y^2 / 2: wells at (+-1, 0), barrier height 1 at the origin.
    return jnp.stack([4.0 * x[0] * (x[0] ** 2 - 1.0), x[1]])


def _double_well(x):
    return -_grad_double_well(x)


def _rotating_well(x, gamma=1.0):
    # f = -(I + gamma J) grad U, J the 90-degree rotation: div(rho J grad U) = 0 for
    # rho = exp(-U / D), so the invariant density is the double well's, while the drift
    # has a circulating part that D grad log rho cannot see.
    g = _grad_double_well(x)
    return -jnp.stack([g[0] - gamma * g[1], g[1] + gamma * g[0]])


def _hopf(x, mu=1.0, omega=1.0):
    r2 = x[0] ** 2 + x[1] ** 2
    return jnp.stack([(mu - r2) * x[0] - omega * x[1], (mu - r2) * x[1] + omega * x[0]])


def _van_der_pol(x, mu=1.0):
    # Lienard form: x' = mu (x - x^3/3 - y), y' = x / mu.
    return jnp.stack([mu * (x[0] - x[0] ** 3 / 3.0 - x[1]), x[0] / mu])


def _duffing(x, delta=0.5):
    return jnp.stack([x[1], -delta * x[1] + x[0] - x[0] ** 3])


SYSTEMS: dict[str, Callable[[Array], Array]] = {
    "double_well": _double_well,
    "rotating_well": _rotating_well,
    "hopf": _hopf,
    "van_der_pol": _van_der_pol,
    "duffing": _duffing,
}
CONSERVATIVE = ("double_well",)


def drift_fn(system: str) -> Callable[[Array], Array]:
    """The true drift of a named 2-D system, as a function of one state ``x`` (shape (2,))."""
    check_choice("system", system, tuple(SYSTEMS))
    return SYSTEMS[system]


def simulate(
    key: jax.Array,
    system: str | Callable[[Array], Array],
    x0: Float[Array, "n d"],
    diffusion: float,
    tau: float,
    n_obs: int,
    *,
    dt: float = 0.01,
    burn_in: float = 0.0,
    max_steps: int | None = None,
) -> Float[Array, "n k d"]:
    """Observe ``n`` trajectories of ``dX = f dt + sqrt(2D) dW`` every ``tau``.

    Euler-Maruyama (diffrax) with step ``dt`` (0.01, the paper's public code), ``vmap``
    over the initial conditions ``x0``; the first observation is at ``t = burn_in``.
    ``system`` is a name in :data:`SYSTEMS` or a drift ``f(x)`` of one state.
    Returns the observations, shape ``(n, n_obs, d)``. ``tau`` and ``burn_in`` are
    traced, so calls that share ``max_steps`` (default: the steps this call needs)
    share one compilation.
    """
    check_key("key", key)
    f = drift_fn(system) if isinstance(system, str) else system
    if not callable(f):
        raise TypeError(f"system must be a name or a callable drift, got {type(system).__name__}")
    check_array("x0", x0, ndim=2, dtype="floating")
    check_scalar("diffusion", diffusion, gt=0.0)
    check_scalar("tau", tau, gt=0.0)
    n_obs = check_int("n_obs", n_obs, min=2)
    check_scalar("dt", dt, gt=0.0)
    check_scalar("burn_in", burn_in, ge=0.0)
    ratio = float(tau) / float(dt)
    if abs(ratio - round(ratio)) > 1e-6 * max(ratio, 1.0):
        raise ValueError(f"tau must be a multiple of dt={dt}, got tau={tau}")
    need = int(round((float(burn_in) + float(tau) * (n_obs - 1)) / float(dt)))
    max_steps = need if max_steps is None else check_int("max_steps", max_steps, min=need)
    return _simulate(key, f, jnp.asarray(x0), float(diffusion), jnp.asarray(tau, x0.dtype),
                     n_obs, float(dt), jnp.asarray(burn_in, x0.dtype), max_steps)


@functools.partial(jax.jit, static_argnums=(1, 3, 5, 6, 8))
def _simulate(key, f, x0, diffusion, tau, n_obs, dt, burn_in, max_steps):
    d = x0.shape[-1]
    t1 = burn_in + tau * (n_obs - 1)
    ts = burn_in + jnp.arange(n_obs, dtype=x0.dtype) * tau
    sigma = math.sqrt(2.0 * diffusion)

    def one(k, y0):
        bm = diffrax.UnsafeBrownianPath(shape=(d,), key=k)
        terms = diffrax.MultiTerm(
            diffrax.ODETerm(lambda t, y, a: f(y)),
            diffrax.ControlTerm(lambda t, y, a: sigma * jnp.eye(d, dtype=y.dtype), bm),
        )
        sol = diffrax.diffeqsolve(
            terms, diffrax.Euler(), 0.0, t1, dt, y0, saveat=diffrax.SaveAt(ts=ts),
            max_steps=max_steps + 16, adjoint=diffrax.ForwardMode(),
        )
        return sol.ys

    keys = jax.random.split(key, x0.shape[0])
    return jax.vmap(one)(keys, x0)


def check_observations(name: str, obs, times=None) -> None:
    """Observations ``(n_traj, n_obs, d)``: finite, at least 2 times; ``times`` increasing."""
    check_array(name, obs, ndim=3, dtype="floating")
    if obs.shape[1] < 2:
        raise ValueError(f"{name} needs at least 2 observation times, got shape {obs.shape}")
    if times is not None:
        check_array("times", times, ndim=1, dtype="number")
        t = np.asarray(times, dtype=float)
        if t.shape[0] != obs.shape[1]:
            raise ValueError(
                f"times must have one entry per observation ({obs.shape[1]}), got {t.shape[0]}"
            )
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


class Features(NamedTuple):
    """Random Fourier features ``phi(x) = sqrt(2/m) cos(W x / ell + b)`` of an RBF kernel."""

    w: Float[Array, "m d"]
    b: Float[Array, " m"]
    lengthscale: Float[Array, ""]


class DriftModel(NamedTuple):
    """A drift ``f(x) = C^T phi(x)`` on random Fourier features."""

    features: Features
    coef: Float[Array, "m d"]


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


def feature_map(feats: Features, x: Float[Array, "n d"]) -> Float[Array, "n m"]:
    m = feats.b.shape[0]
    return math.sqrt(2.0 / m) * jnp.cos(x @ feats.w.T / feats.lengthscale + feats.b)


def predict(model: DriftModel, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The model drift at a batch of states."""
    return feature_map(model.features, x) @ model.coef


class _Stats(NamedTuple):
    gram: Array  # sum_i w_i dt_i phi_i phi_i^T
    rhs: Array  # sum_i w_i phi_i dx_i^T


def drift_stats(
    feats: Features,
    x: Float[Array, "n d"],
    dx: Float[Array, "n d"],
    dt: float | Float[Array, ""] | Float[Array, " n"],
    weights: Float[Array, " n"] | None = None,
) -> _Stats:
    """Sufficient statistics of the increment likelihood ``dx ~ N(f(x) dt, 2 D dt)``."""
    phi = feature_map(feats, x)
    w = jnp.ones(x.shape[0], x.dtype) if weights is None else weights
    wdt = w * jnp.broadcast_to(dt, w.shape)
    return _Stats((phi * wdt[:, None]).T @ phi, (phi * w[:, None]).T @ dx)


def solve_drift(
    feats: Features, stats: _Stats, diffusion: float | Float[Array, ""], prior_var: float
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
    feats: Features,
    x: Float[Array, "n d"],
    dx: Float[Array, "n d"],
    dt: float | Float[Array, " n"],
    diffusion: float,
    *,
    prior_var: float = 10.0,
    weights: Float[Array, " n"] | None = None,
) -> DriftModel:
    """Bayesian KRR drift from increments ``dx`` over times ``dt`` starting at ``x``."""
    check_array("x", x, ndim=2, dtype="floating")
    check_array("dx", dx, shape=x.shape, dtype="floating")
    check_scalar("diffusion", diffusion, gt=0.0)
    check_scalar("prior_var", prior_var, gt=0.0)
    if weights is not None:
        check_array("weights", weights, shape=(x.shape[0],), dtype="floating", ge=0.0)
    return solve_drift(feats, drift_stats(feats, x, dx, dt, weights), diffusion, prior_var)


def direct_estimator(
    feats: Features,
    obs: Float[Array, "n k d"],
    tau: float,
    diffusion: float,
    *,
    prior_var: float = 10.0,
    times: Float[Array, " k"] | None = None,
) -> DriftModel:
    """Kramers-Moyal drift: the increment likelihood of the observed pairs at step ``tau``.

    ``times`` (optional, strictly increasing) gives irregular observation times shared
    by all trajectories; otherwise the pairs are ``tau`` apart.
    """
    check_observations("obs", obs, times)
    check_scalar("tau", tau, gt=0.0)
    check_scalar("diffusion", diffusion, gt=0.0)
    check_scalar("prior_var", prior_var, gt=0.0)
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
    check_observations("obs", obs)
    check_scalar("diffusion", diffusion, gt=0.0)
    pts = obs.reshape(-1, obs.shape[-1])
    n, d = pts.shape
    h = jnp.mean(jnp.std(pts, axis=0)) * n ** (-1.0 / (d + 6.0)) if bandwidth is None else bandwidth
    return diffusion * kde_score(x, pts, h)


def fit_function(
    feats: Features, x: Float[Array, "n d"], y: Float[Array, "n d"], ridge: float = 1e-3
) -> DriftModel:
    """Plain ridge regression of values ``y`` at ``x`` (``ridge`` relative to ``n``)."""
    phi = feature_map(feats, x)
    a = phi.T @ phi + ridge * x.shape[0] * jnp.eye(phi.shape[1], dtype=phi.dtype)
    cf = jax.scipy.linalg.cho_factor(a)
    return DriftModel(feats, jax.scipy.linalg.cho_solve(cf, phi.T @ y))


def estimate_diffusion(obs: Float[Array, "n k d"], tau: float) -> Float[Array, ""]:
    """Quadratic-variation estimate ``D = mean |dx - mean dx|^2 / (2 d tau)`` (tau -> 0)."""
    check_observations("obs", obs)
    check_scalar("tau", tau, gt=0.0)
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

    ``drift`` maps a batch ``(q, d) -> (q, d)``. Proposal (Euler, ``dt = tau / n_steps``):
    ``X_{s+1} = X_s + [drift(X_s) + (x_end - X_s) / (tau - t_s)] dt + sqrt(2 D dt r_s) xi``
    with ``r_s = (tau - t_s - dt) / (tau - t_s)`` (the discrete Brownian bridge's
    variance, Durham & Gallant's modified diffusion bridge) for ``s < n_steps - 1``,
    then ``X_n = x_end``. For ``drift = 0`` the proposal is the exact bridge and every
    weight equals the transition density. Log weight: the Euler chain's
    density of the whole path (its last transition lands on ``x_end``) minus the
    proposal's, plus ``guidance * sum_s log_density(X_s) dt`` when a density is given.
    ``tau`` may differ per pair (irregular observation times).
    """
    check_key("key", key)
    check_array("x_start", x_start, ndim=2, dtype="floating")
    check_array("x_end", x_end, shape=x_start.shape, dtype="floating")
    if np.ndim(tau) == 0:
        check_scalar("tau", tau, gt=0.0)
    else:
        check_array("tau", tau, shape=(x_start.shape[0],), dtype="floating")
        if not isinstance(tau, jax.core.Tracer) and not np.all(np.asarray(tau) > 0):
            raise ValueError("tau must be > 0 for every pair (observation times must increase)")
    check_scalar("diffusion", diffusion, gt=0.0)
    n_steps = check_int("n_steps", n_steps, min=2)
    n_bridges = check_int("n_bridges", n_bridges, min=1)
    check_scalar("guidance", guidance, ge=0.0)
    return _bridges(key, drift, x_start, x_end, tau, diffusion, n_steps, n_bridges,
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
    weights = jax.nn.softmax(logw, axis=1)
    log_transition = jax.nn.logsumexp(logw, axis=1) - math.log(n_bridges)
    return Bridges(paths, logw, weights, log_transition)


class AugmentationResult(NamedTuple):
    model: DriftModel  # the selected iterate (see ``select`` in :func:`path_augmentation`)
    history: Float[Array, "it g d"]  # drift at the probe points: init, then after each iteration
    ess: Float[Array, " it"]  # mean effective sample size fraction of each E-step's bridges
    # Monte-Carlo estimate of the observed-data log posterior of each iterate in ``history``:
    # sum over pairs of log mean importance weight (log p(x_{k+1} | x_k)) + log prior.
    log_posterior: Float[Array, " it"]
    selected: Array  # index into ``history`` of the returned model


def path_augmentation(
    key: jax.Array,
    init: DriftModel,
    obs: Float[Array, "n k d"],
    tau: float,
    diffusion: float,
    *,
    n_iter: int = 10,
    n_steps: int = 20,
    n_bridges: int = 8,
    prior_var: float = 10.0,
    guidance: float = 0.0,
    select: str = "max_posterior",
    n_score_bridges: int | None = None,
    times: Float[Array, " k"] | None = None,
    probe: Float[Array, "g d"] | None = None,
) -> AugmentationResult:
    """The paper's iteration: bridges of the current drift, then the drift from the bridges.

    ``init`` is the initial non-parametric estimate (the geometric one in the paper's
    setting, :func:`geometric_drift` fitted with :func:`fit_function`). ``guidance > 0``
    tilts the bridges toward the observations' invariant density (KDE, Scott bandwidth).
    ``probe`` points record the drift after each iteration in ``history``.

    Which iterate is returned (``select``): Monte-Carlo EM does not increase the
    likelihood monotonically (the E-step is a finite, importance-weighted sample), so
    ``"max_posterior"`` (default) returns the iterate with the highest estimate of the
    observed-data objective that EM ascends, ``sum_k log p(x_{k+1} | x_k) - |C|^2 / 2
    prior_var``, where each transition density is the mean importance weight of the
    iterate's own bridges (:attr:`Bridges.log_transition`); it uses the observations
    only. ``"last"`` returns the last iterate. ``n_iter`` is then a budget.
    Every iterate (init, ..., last) is scored with ``n_score_bridges`` (default
    ``n_bridges``) bridges drawn with one shared key (common random numbers, so the
    comparison between iterates is not dominated by Monte-Carlo noise); scoring needs
    no normal equations, so it is cheap next to an EM step. With ``guidance > 0`` the
    score is that of the tilted path measure, not a likelihood.
    """
    check_key("key", key)
    check_observations("obs", obs, times)
    check_scalar("tau", tau, gt=0.0)
    check_scalar("diffusion", diffusion, gt=0.0)
    n_iter = check_int("n_iter", n_iter, min=1)
    n_steps = check_int("n_steps", n_steps, min=2)
    n_bridges = check_int("n_bridges", n_bridges, min=1)
    check_scalar("prior_var", prior_var, gt=0.0)
    check_scalar("guidance", guidance, ge=0.0)
    check_choice("select", select, ("max_posterior", "last"))
    n_score = n_bridges if n_score_bridges is None else n_score_bridges
    n_score = check_int("n_score_bridges", n_score, min=1)
    if probe is None:
        probe = obs[:, 0]
    check_array("probe", probe, shape=(None, obs.shape[-1]), dtype="floating")
    x0, x1 = _pairs(obs)
    dts = _intervals(obs, tau, times)
    dts = jnp.full((x0.shape[0],), tau, obs.dtype) if dts is None else dts
    return _augment(key, init, x0, x1, dts, diffusion, jnp.asarray(probe),
                    obs.reshape(-1, obs.shape[-1]), n_iter, n_steps, n_bridges,
                    float(prior_var), float(guidance), select, n_score)


@functools.partial(jax.jit, static_argnums=(8, 9, 10, 11, 12, 13, 14))
def _augment(key, init, x0, x1, dts, diffusion, probe, points, n_iter, n_steps, n_bridges,
             prior_var, guidance, select, n_score):
    feats = init.features
    d = x0.shape[-1]
    log_density = None
    if guidance > 0.0:
        h = scott_bandwidth(points)

        def log_density(z):
            return jnp.log(kde_density(z, points, h) + 1e-12)

    k_em, k_score = jax.random.split(key)

    def score(model):
        br = _bridges(k_score, lambda z: predict(model, z), x0, x1, dts, diffusion, n_steps,
                      n_score, log_density, guidance)
        return jnp.sum(br.log_transition) - 0.5 * jnp.sum(jnp.square(model.coef)) / prior_var

    def em_step(model, k):
        br = _bridges(k, lambda z: predict(model, z), x0, x1, dts, diffusion, n_steps,
                      n_bridges, log_density, guidance)
        ess = jnp.mean(1.0 / jnp.sum(jnp.square(br.weights), axis=1)) / n_bridges
        objective = score(model)
        dt = jnp.broadcast_to((dts / n_steps)[:, None], br.weights.shape).reshape(-1)
        w = br.weights.reshape(-1)
        steps = jnp.moveaxis(br.paths, 2, 0)  # (s + 1, p, b, d)

        def acc(stats, s):
            xs = steps[s].reshape(-1, d)
            dx = (steps[s + 1] - steps[s]).reshape(-1, d)
            st = drift_stats(feats, xs, dx, dt, w)
            return _Stats(stats.gram + st.gram, stats.rhs + st.rhs), None

        m = feats.b.shape[0]
        zero = _Stats(jnp.zeros((m, m), x0.dtype), jnp.zeros((m, d), x0.dtype))
        stats, _ = jax.lax.scan(acc, zero, jnp.arange(n_steps))
        new = solve_drift(feats, stats, diffusion, prior_var)
        return new, (predict(new, probe), new.coef, ess, objective)

    model, (hist, coefs, ess, objective) = jax.lax.scan(
        em_step, init, jax.random.split(k_em, n_iter))
    hist = jnp.concatenate([predict(init, probe)[None], hist], 0)
    coefs = jnp.concatenate([init.coef[None], coefs], 0)
    objective = jnp.concatenate([objective, score(model)[None]])
    sel = jnp.asarray(n_iter) if select == "last" else jnp.argmax(objective)
    return AugmentationResult(DriftModel(feats, coefs[sel]), hist, ess, objective, sel)


# --------------------------------------------------------------------------- metric


def weighted_rmse(
    f_hat: Float[Array, "g d"], f_true: Float[Array, "g d"], weights: Float[Array, " g"]
) -> Float[Array, ""]:
    """``sqrt(sum_g w_g |f_hat - f|^2 / sum_g w_g)``: drift error where the data live."""
    return jnp.sqrt(jnp.sum(weights * jnp.sum(jnp.square(f_hat - f_true), -1)) / jnp.sum(weights))
