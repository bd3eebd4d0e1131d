r"""Training-free conditional sampling for flow matching: importance sampling and SMC.

Paper: "Training-free conditional sampling for flow matching models based on
importance sampling" (ICML 2026; abstract in ``shared/seeds/004_*.txt``). Given an
unconditional flow model with density ``p(x)`` at ``t = 1`` and a likelihood
``L(x) = p(y | x)``, sample the conditional ``pi(x) \propto p(x) L(x)`` without
retraining.

Methods (velocity functions and samplers from :mod:`jaxsci.common.flow_matching`;
source ``N(0, I)``, time from source ``t = 0`` to data ``t = 1``):

* **Naive importance sampling** (:func:`importance_sample`): ``x_1`` from the ODE,
  log-weights ``log L(x_1)``; normaliser ``Z = E_p[L]`` estimated by
  ``mean_i L(x_1^i)``. The weights degenerate as the likelihood sharpens or the
  dimension grows (ESS ``= (sum w)^2 / sum w^2`` collapses).
* **Gradient guidance** (:func:`guided_sample`, the reference): the ODE with
  ``v + lambda ((1 - t) / t) grad_x log L(x_hat_1(t, x))``. For a Gaussian source
  ``v = (x + (1 - t) s) / t`` (:func:`jaxsci.common.flow_matching.score_from_velocity`),
  so adding ``grad log p(y | x_t)`` to the score adds ``((1 - t) / t) grad log p(y | x_t)``
  to the velocity; ``p(y | x_t)`` is approximated by ``L(x_hat_1)`` at the one-step
  endpoint prediction ``x_hat_1 = x + (1 - t) v(t, x)`` (DPS-style). ``t`` is
  floored at ``t_floor`` in the ``1 / t``. Biased; not asymptotically exact.
* **SMC** (:func:`smc_sample`, the paper's method): stage times
  ``0 = t_0 < ... < t_K < 1``. Intermediate targets
  ``gamma_k(x_{t_k}) \propto p_{t_k}(x) L(x_hat_1(t_k, x))^{lambda_k}`` (twisting by the
  predicted endpoint's likelihood, tempered by ``lambda_k = t_k^kappa``, our choice:
  the twist is free, see below); particles move between stages with the *stochastic flow*
  of adjustable noise ``eta`` that keeps the ODE's marginals
  (:func:`jaxsci.common.flow_matching.sample_sde`), carry incremental weights
  ``L(x_hat_1(t_k, x_k))^{lambda_k} / L(x_hat_1(t_{k-1}, x_{k-1}))^{lambda_{k-1}}``, and
  are resampled (systematic by default) at ``t_0, ..., t_{K-1}`` whenever
  ``ESS < ess_threshold * n``, so that every resampling is followed by a stochastic
  move. After ``t_K`` the deterministic ODE runs to ``t = 1`` and the last weight is
  ``L(x_1) / L(x_hat_1(t_K, x_K))^{lambda_K}``. The twists telescope, so the weighted particles
  target ``p(x_1) L(x_1)`` for any twist (asymptotically exact as ``n -> inf``; the
  twist only sets the variance), and ``log Z`` is estimated by the sum over
  resampling epochs of ``log mean w``. Without noise (``eta = 0``) resampled copies
  stay identical; the noise lets them diverge (the paper's point).

Also here: the Flax NNX velocity network and its CFM training through
:func:`jaxsci.core.fit`, the closed-form velocity of a Gaussian-mixture target and
the mixture's exact posterior under a linear-Gaussian observation (the
experiment's ground truth), and a weighted RBF MMD.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common import flow_matching as fm
from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "LogLikelihood",
    "SMCResult",
    "VelocityMLP",
    "train_flow",
    "ess",
    "resample",
    "importance_sample",
    "guided_sample",
    "smc_sample",
    "gmm_velocity",
    "gmm_sample",
    "gmm_posterior",
    "mmd",
]

LogLikelihood = Callable[[Float[Array, "n d"]], Float[Array, " n"]]


class SMCResult(NamedTuple):
    """Weighted particles at ``t = 1``.

    Attributes:
      x: particles ``(n, d)``.
      logw: unnormalised log-weights ``(n,)`` since the last resampling.
      log_z: estimate of ``log E_p[L]`` (the conditional's normaliser).
      ess_trace: ESS (in particles) after each weight update, at ``times``.
      times: the flow times of ``ess_trace``.
      resampled: whether the particles were resampled at each time of ``times``.
    """

    x: Float[Array, "n d"]
    logw: Float[Array, " n"]
    log_z: Float[Array, ""]
    ess_trace: Float[Array, " k"]
    times: Float[Array, " k"]
    resampled: Array


# ----------------------------------------------------------------- network, training


class VelocityMLP(nnx.Module):
    """``v(t, x)``: an MLP on ``[x, sin/cos(2 pi k t)]`` (SiLU), Flax NNX."""

    def __init__(self, dim: int, hidden: int = 128, depth: int = 3, n_freq: int = 4, *, rngs):
        check_int("dim", dim, min=1)
        check_int("hidden", hidden, min=1)
        check_int("depth", depth, min=1)
        check_int("n_freq", n_freq, min=1)
        self.freqs = nnx.Variable(2.0 * jnp.pi * jnp.arange(1, n_freq + 1, dtype=jnp.float32))
        sizes = [dim + 2 * n_freq + 1] + [hidden] * depth
        self.layers = nnx.List(
            [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
        )
        self.out = nnx.Linear(hidden, dim, rngs=rngs)

    def __call__(self, t: Float[Array, " n"], x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        tf = t[:, None] * self.freqs[...]
        h = jnp.concatenate([x, t[:, None], jnp.sin(tf), jnp.cos(tf)], axis=-1)
        for layer in self.layers:
            h = nnx.silu(layer(h))
        return self.out(h)


def train_flow(
    key: jax.Array,
    data: Float[Array, "m d"],
    *,
    hidden: int = 128,
    depth: int = 3,
    steps: int = 2000,
    batch_size: int = 256,
    learning_rate: float = 2e-3,
    progress: bool = False,
) -> tuple[VelocityMLP, np.ndarray]:
    """Fit an unconditional :class:`VelocityMLP` to ``data`` with the I-CFM loss.

    Source ``N(0, I)``, independent coupling, Adam with cosine decay, through
    :func:`jaxsci.core.fit` (the module is ``nnx.split``; its State is trained).
    Returns ``(model, losses)``.
    """
    check_key("key", key)
    data = jnp.asarray(check_array("data", data, ndim=2, dtype="floating"))
    check_int("steps", steps, min=1)
    check_int("batch_size", batch_size, min=1)
    check_scalar("learning_rate", learning_rate, gt=0.0)
    k_init, k_fit = jax.random.split(key)
    seed = int(jax.random.randint(k_init, (), 0, 2**31 - 1))
    model = VelocityMLP(data.shape[1], hidden, depth, rngs=nnx.Rngs(seed))
    graphdef, state = nnx.split(model)
    m = data.shape[0]

    def batch_fn(step, k):
        return data[jax.random.randint(k, (batch_size,), 0, m)]

    def loss_fn(params, x1, k):
        net = nnx.merge(graphdef, params)
        k0, kt = jax.random.split(k)
        x0 = jax.random.normal(k0, x1.shape, x1.dtype)
        return fm.cfm_loss(net, x0, x1, fm.sample_time(kt, batch_size))

    sched = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.05)
    out, losses = fit(
        loss_fn,
        state,
        optax.adam(sched),
        k_fit,
        TrainConfig(steps=steps, progress=progress, log_every=max(1, steps // 10)),
        batch_fn=batch_fn,
    )
    return nnx.merge(graphdef, out.params), losses


# ----------------------------------------------------------------- weights


def _check_logw(logw):
    check_array("logw", logw, ndim=1, finite=False)
    if logw.shape[0] == 0:
        raise ValueError("logw must hold at least one particle, got an empty particle set")
    return logw


def ess(logw: Float[Array, " n"]) -> Float[Array, ""]:
    """Effective sample size ``(sum w)^2 / sum w^2`` from log-weights (in particles)."""
    _check_logw(logw)
    return jnp.exp(2.0 * jax.nn.logsumexp(logw) - jax.nn.logsumexp(2.0 * logw))


def _resample_idx(key, logw, method):
    n = logw.shape[0]
    w = jax.nn.softmax(logw)
    if method == "multinomial":
        return jax.random.categorical(key, logw, shape=(n,))
    # Systematic: one uniform, n evenly spaced points through the weights' CDF.
    u = (jax.random.uniform(key, ()) + jnp.arange(n)) / n
    cdf = jnp.cumsum(w)
    return jnp.clip(jnp.searchsorted(cdf, u, side="right"), 0, n - 1)


def resample(
    key: jax.Array, logw: Float[Array, " n"], method: str = "systematic"
) -> Int[Array, " n"]:
    """Ancestor indices; unbiased: ``E[#copies of i] = n w_i / sum w``.

    ``method``: ``"systematic"`` (lower variance; the SMC default) or ``"multinomial"``.
    """
    check_key("key", key)
    _check_logw(logw)
    check_choice("method", method, ("systematic", "multinomial"))
    return _resample_idx(key, logw, method)


# ----------------------------------------------------------------- samplers


def _check_sampler_args(key, n, dim, steps):
    check_key("key", key)
    n = check_int("n", n, min=1)
    check_int("dim", dim, min=1)
    check_int("steps", steps, min=1)
    return n


def _endpoint(velocity_fn, t, x):
    """One-step prediction of ``x_1``: ``x + (1 - t) v(t, x)`` (``E[x_1 | x_t]`` for exact v)."""
    tt = jnp.full((x.shape[0],), t, x.dtype)
    return x + (1.0 - t) * velocity_fn(tt, x)


def importance_sample(
    key: jax.Array,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    n: int,
    dim: int,
    *,
    steps: int = 50,
    solver: str = "euler",
) -> SMCResult:
    """Naive IS: ``n`` ODE samples weighted by ``L(x_1)``."""
    n = _check_sampler_args(key, n, dim, steps)
    x0 = jax.random.normal(key, (n, dim))
    x1 = fm.sample_ode(velocity_fn, x0, steps=steps, solver=solver)
    logw = log_likelihood(x1)
    log_z = jax.nn.logsumexp(logw) - math.log(n)
    return SMCResult(
        x1, logw, log_z, ess(logw)[None], jnp.ones((1,)), jnp.zeros((1,), bool)
    )


def guided_sample(
    key: jax.Array,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    n: int,
    dim: int,
    *,
    scale: float = 1.0,
    steps: int = 50,
    t_floor: float = 0.05,
) -> Float[Array, "n d"]:
    """Gradient guidance (the reference), an ODE with a guided velocity.

    ``v + scale ((1 - t) / max(t, t_floor)) grad_x log L(x + (1 - t) v(t, x))``.
    """
    n = _check_sampler_args(key, n, dim, steps)
    check_scalar("scale", scale, ge=0.0)
    check_scalar("t_floor", t_floor, gt=0.0, le=1.0)

    def guided(t, x):
        def total(z):
            return jnp.sum(log_likelihood(z + (1.0 - t)[:, None] * velocity_fn(t, z)))

        v = velocity_fn(t, x)
        g = jax.grad(total)(x)
        w = scale * (1.0 - t) / jnp.maximum(t, t_floor)
        return v + w[:, None] * g

    x0 = jax.random.normal(key, (n, dim))
    return fm.sample_ode(guided, x0, steps=steps)


def smc_sample(
    key: jax.Array,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    n: int,
    dim: int,
    *,
    stage_times: tuple[float, ...] | Float[Array, " k"] = (0.0, 0.2, 0.4, 0.6, 0.8),
    noise: float | Float[Array, ""] = 1.0,
    steps_per_stage: int = 10,
    final_steps: int = 10,
    ess_threshold: float = 0.5,
    temper: float = 1.0,
    method: str = "systematic",
) -> SMCResult:
    """The paper's SMC with resampling and a stochastic intermediate flow.

    Args:
      stage_times: increasing, starting at 0 and ending below 1; the stochastic
        flow runs between consecutive stages, the ODE from the last one to 1.
      noise: the stochastic flow's strength ``eta >= 0`` (0: deterministic).
      steps_per_stage, final_steps: Euler(-Maruyama) steps per stage and for
        the final deterministic segment.
      ess_threshold: resample when ``ESS < ess_threshold * n`` (in ``[0, 1]``;
        0 never resamples, 1 always does).
      temper: the twist at stage time ``t`` is ``t^temper log L(x_hat_1)``: the
        endpoint prediction is blurry early on, and a sharp likelihood evaluated on
        it would collapse the weights at the first stage (0: untempered twists).
        Any twist keeps the final target exact, since the last weight uses ``L(x_1)``.
    """
    n = _check_sampler_args(key, n, dim, steps_per_stage)
    check_int("final_steps", final_steps, min=1)
    check_scalar("noise", noise, ge=0.0)
    check_scalar("ess_threshold", ess_threshold, ge=0.0, le=1.0)
    check_scalar("temper", temper, ge=0.0)
    check_choice("method", method, ("systematic", "multinomial"))
    ts = check_array("stage_times", jnp.asarray(stage_times, jnp.float32), ndim=1)
    if not isinstance(ts, jax.core.Tracer):
        tn = np.asarray(ts)
        if tn.size < 1 or tn[0] != 0.0 or tn[-1] >= 1.0 or np.any(np.diff(tn) <= 0):
            raise ValueError(
                f"stage_times must increase from 0 to below 1, got {tn.tolist()}"
            )

    def twist(t, x):
        lam = jnp.asarray(t) ** temper  # 0 ** 0 = 1: temper = 0 is untempered
        return lam * log_likelihood(_endpoint(velocity_fn, t, x))

    def maybe_resample(k, x, logw, tw, log_z):
        do = ess(logw) < ess_threshold * n
        idx = jnp.where(do, _resample_idx(k, logw, method), jnp.arange(n))
        log_z = jnp.where(do, log_z + jax.nn.logsumexp(logw) - math.log(n), log_z)
        logw = jnp.where(do, jnp.zeros_like(logw), logw)
        return x[idx], logw, tw[idx], log_z, do

    k0, k_loop = jax.random.split(key)
    x = jax.random.normal(k0, (n, dim))
    tw = twist(ts[0], x)
    logw = tw
    ess0 = ess(logw)

    def stage(carry, inp):
        x, logw, tw, log_z = carry
        t_prev, t_next, k = inp
        k_res, k_move = jax.random.split(k)
        x, logw, tw, log_z, did = maybe_resample(k_res, x, logw, tw, log_z)
        x = fm.sample_sde(
            velocity_fn, x, k_move, noise=noise, t0=t_prev, t1=t_next, steps=steps_per_stage
        )
        new_tw = twist(t_next, x)
        logw = logw + new_tw - tw
        return (x, logw, new_tw, log_z), (ess(logw), did)

    keys = jax.random.split(k_loop, ts.shape[0] - 1)
    (x, logw, tw, log_z), (ess_mid, did_mid) = jax.lax.scan(
        stage, (x, logw, tw, jnp.zeros(())), (ts[:-1], ts[1:], keys)
    )
    # No resampling at t_K: the deterministic final segment could not separate copies.
    x = fm.sample_ode(velocity_fn, x, t0=ts[-1], t1=1.0, steps=final_steps)
    logw = logw + log_likelihood(x) - tw
    log_z = log_z + jax.nn.logsumexp(logw) - math.log(n)
    ess_trace = jnp.concatenate([ess0[None], ess_mid, ess(logw)[None]])
    times = jnp.concatenate([ts, jnp.ones((1,))])
    resampled = jnp.concatenate([did_mid, jnp.zeros((2,), bool)])
    return SMCResult(x, logw, log_z, ess_trace, times, resampled)


# ----------------------------------------------------------------- Gaussian mixtures


def _check_gmm(weights, means, covs):
    check_array("weights", weights, ndim=1, ge=0.0)
    k = weights.shape[0]
    check_array("means", means, shape=(k, None))
    d = means.shape[1]
    check_array("covs", covs, shape=(k, d, d))


def gmm_velocity(
    weights: Float[Array, " k"], means: Float[Array, "k d"], covs: Float[Array, "k d d"]
) -> fm.VelocityFn:
    """Exact marginal velocity of the linear path from ``N(0, I)`` to a Gaussian mixture.

    Given component ``j``, ``x_t ~ N(t mu_j, C_j)``, ``C_j = (1 - t)^2 I + t^2 Sigma_j`` and
    ``E[x_1 - x_0 | x_t, j] = mu_j + (t Sigma_j - (1 - t) I) C_j^{-1} (x_t - t mu_j)``;
    the marginal velocity mixes these with the components' posterior responsibilities.
    """
    _check_gmm(weights, means, covs)
    logpi = jnp.log(jnp.asarray(weights) / jnp.sum(weights))
    means, covs = jnp.asarray(means), jnp.asarray(covs)
    eye = jnp.eye(means.shape[1])

    def one(t, x):
        def comp(mu, sig):
            c = (1.0 - t) ** 2 * eye + t**2 * sig
            r = x - t * mu
            sol = jnp.linalg.solve(c, r)
            logp = -0.5 * (r @ sol) - 0.5 * jnp.linalg.slogdet(c)[1]
            return logp, mu + (t * sig - (1.0 - t) * eye) @ sol

        logp, vs = jax.vmap(comp)(means, covs)
        resp = jax.nn.softmax(logpi + logp)
        return resp @ vs

    return jax.vmap(one)


def gmm_sample(
    key: jax.Array,
    weights: Float[Array, " k"],
    means: Float[Array, "k d"],
    covs: Float[Array, "k d d"],
    n: int,
) -> Float[Array, "n d"]:
    """``n`` draws from the mixture."""
    check_key("key", key)
    _check_gmm(weights, means, covs)
    n = check_int("n", n, min=1)
    kc, kz = jax.random.split(key)
    c = jax.random.categorical(kc, jnp.log(jnp.asarray(weights)), shape=(n,))
    z = jax.random.normal(kz, (n, means.shape[1]))
    chol = jnp.linalg.cholesky(jnp.asarray(covs))
    return jnp.asarray(means)[c] + jnp.einsum("nij,nj->ni", chol[c], z)


def gmm_posterior(
    weights: Float[Array, " k"],
    means: Float[Array, "k d"],
    covs: Float[Array, "k d d"],
    obs_matrix: Float[Array, "m d"],
    y: Float[Array, " m"],
    obs_std: float,
) -> tuple[Float[Array, " k"], Float[Array, "k d"], Float[Array, "k d d"], Float[Array, ""]]:
    """Exact posterior of a mixture prior under ``y = H x + N(0, obs_std^2 I)``.

    Returns ``(weights, means, covs, log_z)`` of the posterior mixture, ``log_z`` the
    log evidence ``log p(y) = log sum_j pi_j N(y; H mu_j, H Sigma_j H^T + s^2 I)``.
    """
    _check_gmm(weights, means, covs)
    d = means.shape[1]
    check_array("obs_matrix", obs_matrix, shape=(None, d))
    check_array("y", y, shape=(obs_matrix.shape[0],))
    check_scalar("obs_std", obs_std, gt=0.0)
    h, y = jnp.asarray(obs_matrix), jnp.asarray(y)
    means, covs = jnp.asarray(means), jnp.asarray(covs)
    m = h.shape[0]

    def comp(mu, sig):
        s = h @ sig @ h.T + obs_std**2 * jnp.eye(m)
        gain = sig @ h.T @ jnp.linalg.inv(s)
        r = y - h @ mu
        logp = (
            -0.5 * r @ jnp.linalg.solve(s, r)
            - 0.5 * jnp.linalg.slogdet(s)[1]
            - 0.5 * m * math.log(2 * math.pi)
        )
        return logp, mu + gain @ r, sig - gain @ h @ sig

    logp, mus, sigs = jax.vmap(comp)(means, covs)
    logw = jnp.log(jnp.asarray(weights) / jnp.sum(weights)) + logp
    return jax.nn.softmax(logw), mus, sigs, jax.nn.logsumexp(logw)


def mmd(
    x: Float[Array, "n d"],
    y: Float[Array, "m d"],
    x_logw: Float[Array, " n"] | None = None,
    bandwidths: tuple[float, ...] = (0.1, 0.3, 1.0),
) -> Float[Array, ""]:
    """Squared MMD between the weighted sample ``x`` and the sample ``y``.

    Kernel: a sum of RBFs ``exp(-|a - b|^2 / (2 h^2))`` over ``bandwidths``; the
    weights are ``softmax(x_logw)`` (uniform if None). V-statistic, so ``>= 0``.
    """
    check_array("x", x, ndim=2)
    check_array("y", y, shape=(None, x.shape[1]))
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError("x and y must hold at least one sample each")
    wx = (
        jnp.full((x.shape[0],), 1.0 / x.shape[0])
        if x_logw is None
        else jax.nn.softmax(_check_logw(x_logw))
    )
    wy = jnp.full((y.shape[0],), 1.0 / y.shape[0])

    def k(a, b):
        d2 = jnp.sum((a[:, None] - b[None]) ** 2, -1)
        return sum(jnp.exp(-d2 / (2.0 * h * h)) for h in bandwidths)

    return jnp.maximum(wx @ k(x, x) @ wx - 2.0 * wx @ k(x, y) @ wy + wy @ k(y, y) @ wy, 0.0)
