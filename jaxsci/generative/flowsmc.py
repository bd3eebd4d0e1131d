r"""Training-free conditional sampling for flow matching: importance sampling and SMC.

Paper: "Training-free conditional sampling for flow matching models based on
importance sampling" (ICML 2026). Given an
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

The SMC stages are an iteration in the blackjax style: :func:`smc_init` gives an
:class:`SMCState` at ``t = 0``, :func:`smc_step` moves it one stage (returning an
:class:`SMCInfo`), :func:`smc_finish` runs the last ODE segment, and
:func:`smc_sample` is a thin ``lax.scan`` driver over them. Resampling schemes are
values (:class:`Systematic`, :class:`Multinomial` under :class:`AbstractResampler`);
the numbers a user sweeps (``noise``, ``ess_threshold``, ``temper``, the stage
times' values, guidance ``scale``) are traced, so ``vmap`` over them works. A NaN
log-likelihood never passes silently: ``throw=True`` raises inside ``jit``, and
``throw=False`` reports ``result == RESULTS.nonfinite``.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.generative import flowsmc as fs
>>> v = fs.gmm_velocity(jnp.ones(1), jnp.zeros((1, 2)), jnp.eye(2)[None])
>>> run = jax.jit(lambda k, eta: fs.smc_sample(k, v, lambda x: -0.5 * x[:, 1] ** 2, 16, 2,
...               noise=eta, stage_times=(0.0, 0.5), steps_per_stage=2, final_steps=2))
>>> r = run(jax.random.key(0), 1.0)
>>> r.x.shape, r.ess_trace.shape
((16, 2), (3,))

Also here: the Flax NNX velocity network and its CFM training through
:func:`jaxsci.core.fit`, the closed-form velocity of a Gaussian-mixture target and
the mixture's exact posterior under a linear-Gaussian observation (the
experiment's ground truth), and a weighted RBF MMD.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import os
import typing
from collections.abc import Callable
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common import flow_matching as fm
from jaxsci.core.status import RESULTS
from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = [
    "LogLikelihood",
    "SMCResult",
    "SMCState",
    "SMCInfo",
    "SMCConfig",
    "FlowTrainConfig",
    "VelocityMLP",
    "train_flow",
    "ess",
    "AbstractResampler",
    "Systematic",
    "Multinomial",
    "resample",
    "importance_sample",
    "guided_sample",
    "smc_init",
    "smc_step",
    "smc_finish",
    "log_evidence",
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
      result: :data:`jaxsci.core.RESULTS` item: ``successful``, or ``nonfinite`` when the
        log-likelihood gave NaN / +inf for some particle or zero likelihood for all
        (``log_z`` is then meaningless). With ``throw=True`` (default) that raises.
    """

    x: Float[Array, "n d"]
    logw: Float[Array, " n"]
    log_z: Float[Array, ""]
    ess_trace: Float[Array, " k"]
    times: Float[Array, " k"]
    resampled: Array
    result: RESULTS = RESULTS.successful


class SMCState(NamedTuple):
    """The SMC sampler's state at flow time ``t`` (:func:`smc_init`, :func:`smc_step`).

    Attributes:
      x: particles ``(n, d)`` at time ``t``.
      logw: log-weights ``(n,)`` since the last resampling.
      twist: the current twist ``lambda(t) log L(x_hat_1(t, x))`` per particle ``(n,)``
        (``log L(x)`` after :func:`smc_finish`).
      log_z: the log normaliser of the finished resampling epochs (see
        :func:`log_evidence` for the running estimate).
      t: the flow time.
    """

    x: Float[Array, "n d"]
    logw: Float[Array, " n"]
    twist: Float[Array, " n"]
    log_z: Float[Array, ""]
    t: Float[Array, ""]


class SMCInfo(NamedTuple):
    """What one SMC step did.

    Attributes:
      ess: ESS (in particles) after the step's weight update.
      resampled: whether the particles were resampled at the start of the step.
      nonfinite: whether the log-weights hold NaN / +inf, or are all ``-inf``.
    """

    ess: Float[Array, ""]
    resampled: Array
    nonfinite: Array


@dataclasses.dataclass(frozen=True)
class FlowTrainConfig:
    """How :func:`train_flow` fits the velocity network (I-CFM, Adam, cosine decay)."""

    hidden: int = 128
    depth: int = 3
    steps: int = 2000
    batch_size: int = 256
    learning_rate: float = 2e-3

    def __post_init__(self):
        for name in ("hidden", "depth", "steps", "batch_size"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)


@dataclasses.dataclass(frozen=True)
class SMCConfig:
    """The static stage layout and default knobs of :func:`smc_sample`, for configs.

    ``smc_sample(..., noise=eta, **config.kwargs())``. The numbers are passed as traced
    arguments, so a sweep can still vmap over ``ess_threshold`` or ``temper``.
    """

    stage_times: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8)
    steps_per_stage: int = 10
    final_steps: int = 10
    ess_threshold: float = 0.5  # the usual SMC choice: resample below n/2
    temper: float = 1.0

    def __post_init__(self):
        _check_stage_times(np.asarray(self.stage_times, np.float64))
        check_int("steps_per_stage", self.steps_per_stage, min=1)
        check_int("final_steps", self.final_steps, min=1)
        check_scalar("ess_threshold", self.ess_threshold, ge=0.0, le=1.0)
        check_scalar("temper", self.temper, ge=0.0)

    def kwargs(self) -> dict:
        """The keyword arguments of :func:`smc_sample` this config sets."""
        return dataclasses.asdict(self)


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
    config: FlowTrainConfig = FlowTrainConfig(),
    *,
    progress: bool = False,
    checkpoint_every: int = 0,
    checkpoint_dir: str | os.PathLike | None = None,
    desc: str = "flow (CFM)",
) -> tuple[VelocityMLP, np.ndarray]:
    """Fit an unconditional :class:`VelocityMLP` to ``data`` with the I-CFM loss.

    Source ``N(0, I)``, independent coupling, Adam with cosine decay, through
    :func:`jaxsci.core.fit` (the module is ``nnx.split``; its State is trained).

    Args:
      key: the run's randomness (initialisation and batches).
      data: training samples ``(m, d)``.
      config: network size and optimisation (:class:`FlowTrainConfig`).
      progress: show a progress bar named ``desc``.
      checkpoint_every, checkpoint_dir: orbax checkpoints of :func:`jaxsci.core.fit`
        (a rerun with the same folder resumes exactly).
      desc: the progress bar's name.

    Returns:
      ``(model, losses)``.
    """
    check_key("key", key)
    data = jnp.asarray(check_array("data", data, ndim=2, dtype="floating"))
    if not isinstance(config, FlowTrainConfig):
        raise TypeError(f"config must be a FlowTrainConfig, got {type(config).__name__}")
    k_init, k_fit = jax.random.split(key)
    seed = int(jax.random.randint(k_init, (), 0, 2**31 - 1))
    model = VelocityMLP(data.shape[1], config.hidden, config.depth, rngs=nnx.Rngs(seed))
    graphdef, state = nnx.split(model)
    m, batch_size = data.shape[0], config.batch_size

    def batch_fn(step, k):
        return data[jax.random.randint(k, (batch_size,), 0, m)]

    def loss_fn(params, x1, k):
        net = nnx.merge(graphdef, params)
        k0, kt = jax.random.split(k)
        x0 = jax.random.normal(k0, x1.shape, x1.dtype)
        return fm.cfm_loss(net, x0, x1, fm.sample_time(kt, batch_size))

    sched = optax.cosine_decay_schedule(config.learning_rate, config.steps, alpha=0.05)
    out, losses = fit(
        loss_fn,
        state,
        optax.adam(sched),
        k_fit,
        TrainConfig(steps=config.steps, progress=progress, log_every=max(1, config.steps // 10),
                    checkpoint_every=checkpoint_every if checkpoint_dir is not None else 0,
                    checkpoint_dir=checkpoint_dir, desc=desc),
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
    """Effective sample size ``(sum w)^2 / sum w^2`` from log-weights (in particles).

    Args:
      logw: unnormalised log-weights ``(n,)``.

    Returns:
      the ESS, a scalar in ``[1, n]``; differentiable in ``logw``.
    """
    _check_logw(logw)
    return jnp.exp(2.0 * jax.nn.logsumexp(logw) - jax.nn.logsumexp(2.0 * logw))


class AbstractResampler(eqx.Module):
    """A resampling scheme: ``resampler(key, logw) -> ancestor indices (n,)``.

    Unbiased schemes satisfy ``E[#copies of i] = n w_i / sum w``.
    """

    @abc.abstractmethod
    def __call__(self, key: jax.Array, logw: Float[Array, " n"]) -> Int[Array, " n"]:
        raise NotImplementedError


@typing.final
class Systematic(AbstractResampler):
    """Systematic resampling: one uniform, ``n`` evenly spaced points through the CDF
    (lower variance; every count within one of ``n w_i``). The SMC default."""

    def __call__(self, key, logw):
        n = logw.shape[0]
        u = (jax.random.uniform(key, ()) + jnp.arange(n)) / n
        cdf = jnp.cumsum(jax.nn.softmax(logw))
        return jnp.clip(jnp.searchsorted(cdf, u, side="right"), 0, n - 1)


@typing.final
class Multinomial(AbstractResampler):
    """Multinomial resampling: ``n`` independent draws from the weights."""

    def __call__(self, key, logw):
        return jax.random.categorical(key, logw, shape=(logw.shape[0],))


SYSTEMATIC = Systematic()  # the default resampler


def _check_resampler(resampler):
    if not isinstance(resampler, AbstractResampler):
        raise TypeError(f"resampler must be an AbstractResampler (Systematic(), Multinomial()), "
                        f"got {type(resampler).__name__} {resampler!r}")
    return resampler


def resample(
    key: jax.Array, logw: Float[Array, " n"], resampler: AbstractResampler = SYSTEMATIC
) -> Int[Array, " n"]:
    """Ancestor indices; unbiased: ``E[#copies of i] = n w_i / sum w``.

    Args:
      key: the randomness (same key, same indices).
      logw: log-weights ``(n,)``; traced (vmappable).
      resampler: :class:`Systematic` (default) or :class:`Multinomial`.

    Returns:
      integer ancestor indices ``(n,)`` (no gradient: a discrete choice).
    """
    check_key("key", key)
    _check_logw(logw)
    return _check_resampler(resampler)(key, logw)


# ----------------------------------------------------------------- samplers


def _check_sampler_args(key, n, dim, steps):
    check_key("key", key)
    n = check_int("n", n, min=1)
    check_int("dim", dim, min=1)
    check_int("steps", steps, min=1)
    return n


def _traced_range(name, value, *, ge=None, le=None):
    """Concrete values: :func:`check_scalar`; traced ones: an ``error_if`` inside jit."""
    check_scalar(name, value, ge=ge, le=le)
    if not isinstance(value, jax.core.Tracer):
        return value
    bad = ~jnp.isfinite(value)
    if ge is not None:
        bad = bad | (value < ge)
    if le is not None:
        bad = bad | (value > le)
    want = " and ".join(f"{op} {b}" for op, b in ((">=", ge), ("<=", le)) if b is not None)
    return eqx.error_if(value, bad, f"{name} must be finite and {want}")


def _check_stage_times(tn):
    if tn.ndim != 1 or tn.size < 1 or tn[0] != 0.0 or tn[-1] >= 1.0 or np.any(np.diff(tn) <= 0):
        raise ValueError(f"stage_times must increase from 0 to below 1, got {tn.tolist()}")


def _nonfinite(logw):
    # NaN or +inf anywhere, or zero likelihood for every particle: log_z would be garbage.
    return jnp.any(jnp.isnan(logw) | (logw == jnp.inf)) | ~jnp.isfinite(
        jax.nn.logsumexp(jnp.where(jnp.isnan(logw), -jnp.inf, logw)))


_NONFINITE_MSG = (
    "{fn}: the log-likelihood returned NaN or +inf for some particle, or -inf for every "
    "particle, so the weights and log_z are undefined; check log_likelihood on these "
    "samples, or pass throw=False to get result == RESULTS.nonfinite instead of an error")


def _finish(fn, out: SMCResult, failed, throw: bool) -> SMCResult:
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    out = out._replace(result=RESULTS.where(failed, RESULTS.nonfinite, RESULTS.successful))
    if throw:
        x, logw, log_z = eqx.error_if((out.x, out.logw, out.log_z), failed,
                                      _NONFINITE_MSG.format(fn=fn))
        out = out._replace(x=x, logw=logw, log_z=log_z)
    return out


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
    solver: diffrax.AbstractSolver = fm.EULER,
    throw: bool = True,
) -> SMCResult:
    """Naive IS: ``n`` ODE samples weighted by ``L(x_1)``.

    Args:
      key: the source draws' key (same key, same result).
      velocity_fn: the unconditional flow ``v(t, x)``.
      log_likelihood: ``log L(x)`` for a batch ``(n, d) -> (n,)``.
      n, dim: particles and dimension (static).
      steps: ODE steps (static); solver: a diffrax solver object.
      throw: raise (also inside jit) when the weights are undefined (NaN / +inf
        log-likelihood, or all ``-inf``); otherwise report it in ``result``.

    Returns:
      an :class:`SMCResult` with one ESS entry at ``t = 1``.
    """
    n = _check_sampler_args(key, n, dim, steps)
    x0 = jax.random.normal(key, (n, dim))
    x1 = fm.sample_ode(velocity_fn, x0, steps=steps, solver=solver)
    logw = log_likelihood(x1)
    log_z = jax.nn.logsumexp(logw) - math.log(n)
    out = SMCResult(x1, logw, log_z, ess(logw)[None], jnp.ones((1,)), jnp.zeros((1,), bool))
    return _finish("importance_sample", out, _nonfinite(logw), throw)


def guided_sample(
    key: jax.Array,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    n: int,
    dim: int,
    *,
    scale: float | Float[Array, ""] = 1.0,
    steps: int = 50,
    t_floor: float | Float[Array, ""] = 0.05,
) -> Float[Array, "n d"]:
    """Gradient guidance (the reference), an ODE with a guided velocity.

    ``v + scale ((1 - t) / max(t, t_floor)) grad_x log L(x + (1 - t) v(t, x))``.

    Args:
      key: the source draws' key.
      velocity_fn, log_likelihood: as in :func:`importance_sample`.
      n, dim, steps: static sizes.
      scale: guidance weight ``>= 0``; traced (vmappable).
      t_floor: floor of ``t`` in ``1 / t``, in ``(0, 1]``; traced.

    Returns:
      samples ``(n, d)`` (unweighted; the method is biased).
    """
    n = _check_sampler_args(key, n, dim, steps)
    scale = _traced_range("scale", scale, ge=0.0)
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


def _twist(velocity_fn, log_likelihood, t, x, temper):
    lam = jnp.asarray(t) ** temper  # 0 ** 0 = 1: temper = 0 is untempered
    return lam * log_likelihood(_endpoint(velocity_fn, t, x))


def log_evidence(state: SMCState) -> Float[Array, ""]:
    """The running estimate of ``log Z``: finished epochs plus ``log mean w`` of this one."""
    n = state.logw.shape[0]
    return state.log_z + jax.nn.logsumexp(state.logw) - math.log(n)


def smc_init(
    key: jax.Array,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    n: int,
    dim: int,
    *,
    temper: float | Float[Array, ""] = 1.0,
) -> SMCState:
    """The SMC state at ``t = 0``: source draws weighted by the first twist.

    Args:
      key: the source draws' key.
      velocity_fn, log_likelihood: as in :func:`smc_sample`.
      n, dim: particles and dimension (static).
      temper: the twist exponent ``kappa`` (``lambda(t) = t^kappa``); traced.

    Returns:
      an :class:`SMCState` at ``t = 0``.
    """
    check_key("key", key)
    n = check_int("n", n, min=1)
    check_int("dim", dim, min=1)
    temper = _traced_range("temper", temper, ge=0.0)
    x = jax.random.normal(key, (n, dim))
    t = jnp.zeros((), x.dtype)
    tw = _twist(velocity_fn, log_likelihood, t, x, temper)
    return SMCState(x, tw, tw, jnp.zeros((), x.dtype), t)


def smc_step(
    key: jax.Array,
    state: SMCState,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    t_next: float | Float[Array, ""],
    *,
    noise: float | Float[Array, ""] = 1.0,
    steps: int = 10,
    ess_threshold: float | Float[Array, ""] = 0.5,
    temper: float | Float[Array, ""] = 1.0,
    resampler: AbstractResampler = SYSTEMATIC,
) -> tuple[SMCState, SMCInfo]:
    """One SMC stage: resample if ``ESS < ess_threshold n``, move by the stochastic flow
    from ``state.t`` to ``t_next``, reweight by the twist ratio.

    Args:
      key: the step's randomness (resampling and Brownian path).
      state: the current :class:`SMCState`.
      velocity_fn, log_likelihood: as in :func:`smc_sample`.
      t_next: the next stage time, ``state.t < t_next < 1``; traced.
      noise: the stochastic flow's ``eta >= 0``; traced.
      steps: Euler-Maruyama steps (static).
      ess_threshold: in ``[0, 1]``; traced.
      temper: the twist exponent; traced (a schedule may change it per step, but the
        final target stays exact only if the twist used to weight is the one stored).
      resampler: an :class:`AbstractResampler`.

    Returns:
      ``(state, info)``.
    """
    check_key("key", key)
    steps = check_int("steps", steps, min=1)
    noise = _traced_range("noise", noise, ge=0.0)
    ess_threshold = _traced_range("ess_threshold", ess_threshold, ge=0.0, le=1.0)
    temper = _traced_range("temper", temper, ge=0.0)
    _check_resampler(resampler)
    x, logw, tw, log_z, t = state
    n = x.shape[0]
    k_res, k_move = jax.random.split(key)
    do = ess(logw) < ess_threshold * n
    idx = jnp.where(do, resampler(k_res, logw), jnp.arange(n))
    log_z = jnp.where(do, log_z + jax.nn.logsumexp(logw) - math.log(n), log_z)
    logw = jnp.where(do, jnp.zeros_like(logw), logw)
    x, tw = x[idx], tw[idx]
    t_next = jnp.asarray(t_next, x.dtype)
    x = fm.sample_sde(velocity_fn, x, k_move, noise=noise, t0=t, t1=t_next, steps=steps)
    new_tw = _twist(velocity_fn, log_likelihood, t_next, x, temper)
    logw = logw + new_tw - tw
    return SMCState(x, logw, new_tw, log_z, t_next), SMCInfo(ess(logw), do, _nonfinite(logw))


def smc_finish(
    state: SMCState,
    velocity_fn: fm.VelocityFn,
    log_likelihood: LogLikelihood,
    *,
    steps: int = 10,
    solver: diffrax.AbstractSolver = fm.EULER,
) -> tuple[SMCState, SMCInfo]:
    """The last segment: the deterministic ODE from ``state.t`` to 1, weight
    ``L(x_1) / twist``. No resampling first: the ODE could not separate copies.

    Returns:
      ``(state at t = 1, info)``; :func:`log_evidence` of the state is the estimate.
    """
    steps = check_int("steps", steps, min=1)
    x, logw, tw, log_z, t = state
    x = fm.sample_ode(velocity_fn, x, t0=t, t1=1.0, steps=steps, solver=solver)
    ll = log_likelihood(x)
    logw = logw + ll - tw
    out = SMCState(x, logw, ll, log_z, jnp.ones((), x.dtype))
    return out, SMCInfo(ess(logw), jnp.zeros((), bool), _nonfinite(logw))


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
    ess_threshold: float | Float[Array, ""] = 0.5,
    temper: float | Float[Array, ""] = 1.0,
    resampler: AbstractResampler = SYSTEMATIC,
    throw: bool = True,
) -> SMCResult:
    """The paper's SMC with resampling and a stochastic intermediate flow.

    A thin ``lax.scan`` over :func:`smc_init`, :func:`smc_step` and :func:`smc_finish`.

    Args:
      key: the run's randomness (same key, same result).
      velocity_fn: the unconditional flow ``v(t, x)``.
      log_likelihood: ``log L(x)``, ``(n, d) -> (n,)``.
      n, dim: particles and dimension (static).
      stage_times: increasing, starting at 0 and ending below 1 (traced values, static
        length); the stochastic flow runs between consecutive stages, the ODE from
        the last one to 1.
      noise: the stochastic flow's strength ``eta >= 0`` (0: deterministic); traced.
      steps_per_stage, final_steps: Euler(-Maruyama) steps per stage and for
        the final deterministic segment (static).
      ess_threshold: resample when ``ESS < ess_threshold * n`` (in ``[0, 1]``;
        0 never resamples, 1 always does); traced.
      temper: the twist at stage time ``t`` is ``t^temper log L(x_hat_1)``: the
        endpoint prediction is blurry early on, and a sharp likelihood evaluated on
        it would collapse the weights at the first stage (0: untempered twists).
        Any twist keeps the final target exact, since the last weight uses ``L(x_1)``;
        traced.
      resampler: :class:`Systematic` (default) or :class:`Multinomial`.
      throw: raise, also inside ``jit``/``vmap``, when the log-likelihood gives NaN /
        +inf (or ``-inf`` for all particles); with ``False`` the failure is
        ``result == RESULTS.nonfinite``.

    Returns:
      an :class:`SMCResult`. Gradients: none through the resampling (discrete
      ancestor choices); use it as a sampler, not as a differentiable estimator.
    """
    n = _check_sampler_args(key, n, dim, steps_per_stage)
    check_int("final_steps", final_steps, min=1)
    _check_resampler(resampler)
    ts = check_array("stage_times", jnp.asarray(stage_times, jnp.float32), ndim=1)
    if ts.shape[0] < 1:
        raise ValueError("stage_times must hold at least one time (0.0), got none")
    if isinstance(ts, jax.core.Tracer):
        ok = (ts[0] == 0.0) & (ts[-1] < 1.0) & jnp.all(jnp.diff(ts) > 0)
        ts = eqx.error_if(ts, ~ok, "stage_times must increase from 0 to below 1")
    else:
        _check_stage_times(np.asarray(ts))
    return _smc_sample(key, velocity_fn, log_likelihood, n, dim, ts, noise, steps_per_stage,
                       final_steps, ess_threshold, temper, resampler, throw)


@eqx.filter_jit
def _smc_sample(key, velocity_fn, log_likelihood, n, dim, ts, noise, steps_per_stage,
                final_steps, ess_threshold, temper, resampler, throw):
    # Module-level jit: a second call with the same functions and same-shaped inputs
    # compiles nothing (the stage closure is new at every trace).
    k0, k_loop = jax.random.split(key)
    state = smc_init(k0, velocity_fn, log_likelihood, n, dim, temper=temper)
    ess0, bad0 = ess(state.logw), _nonfinite(state.logw)

    def stage(state, inp):
        t_next, k = inp
        return smc_step(k, state, velocity_fn, log_likelihood, t_next, noise=noise,
                        steps=steps_per_stage, ess_threshold=ess_threshold, temper=temper,
                        resampler=resampler)

    keys = jax.random.split(k_loop, ts.shape[0] - 1)
    state, mid = jax.lax.scan(stage, state, (ts[1:], keys))
    state, last = smc_finish(state, velocity_fn, log_likelihood, steps=final_steps)
    ess_trace = jnp.concatenate([ess0[None], mid.ess, last.ess[None]])
    times = jnp.concatenate([ts, jnp.ones((1,))])
    resampled = jnp.concatenate([mid.resampled, jnp.zeros((2,), bool)])
    failed = bad0 | jnp.any(mid.nonfinite) | last.nonfinite
    out = SMCResult(state.x, state.logw, log_evidence(state), ess_trace, times, resampled)
    return _finish("smc_sample", out, failed, throw)


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
