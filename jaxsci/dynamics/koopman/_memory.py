r"""Mori-Zwanzig memory: a non-Markovian correction to the frozen linear backbone.

MERLIN (Lu, Ma, Lin, Zhu, ICML 2026), Sec. "non-Markovian closure". Projecting
the dynamics onto finitely many observables ``z`` loses linear invariance; the
Mori-Zwanzig formalism writes the exact evolution of the resolved part as

    z_{t+1} = A z_t + b  +  sum_{s <= t} K_{t-s}(z_s)  (+ noise orthogonal to z),

a Markovian linear term plus a memory integral over the past. With ``A, b``
frozen (Phase II), the memory integral is learned in one of two forms, both
with a zero-initialised output so that at initialisation the model *is* the
linear backbone:

* :class:`LeakyMemory` (the authors' LMM) -- a leaky integrator of the past,
  an exponential-kernel memory ``m_t = gamma * m_{t-1} + psi(z_t)`` with
  ``gamma = sigmoid(.)`` in ``(0, 1)`` per memory channel, and
  ``z_{t+1} = A z_t + b + s * g * phi(m_t)``, gate ``g = sigmoid(.)``;
* :class:`WindowMemory` (the authors' FMM) -- a finite-memory closure from the
  last ``k`` latents, ``z_{t+1} = A z_t + b + s * phi([z_{t-k+1}, ..., z_t])``.
  The authors run an LSTM over the window; here ``phi`` is an MLP on the
  flattened window (the same finite-memory kernel, without recurrence).

Both are final ``equinox.Module``\ s under :class:`AbstractMemory`, which fixes the
pattern of an iteration (optax's ``init``/``update``, blackjax's ``init``/``step``):

* ``state = memory.init(z0)`` -- the state before the first step (a NamedTuple:
  :class:`LeakyState` / :class:`WindowState`);
* ``delta, state = memory.correction(z, state)`` -- the one abstract method: read
  ``z_t`` into the state, return the correction added to ``A z_t + b``;
* ``z_next, state, info = memory.step(backbone, z, state)`` -- concrete, the same for
  every memory: ``z_{t+1} = backbone(z_t) + delta``, ``info`` a :class:`MemoryInfo`.

A new memory (an LSTM, a kernel integral) subclasses :class:`AbstractMemory` and
defines ``init`` and ``correction``; :func:`rollout`, :func:`warm_state`,
:func:`memory_loss` and :func:`~jaxsci.dynamics.koopman.train_memory` work with it
unchanged. Memories are pytrees: ``jax.vmap`` over a stack of them, ``jax.grad``
with respect to their parameters.

Latents enter the networks standardised, ``(z - c) / s``, with the centre ``c``
and scale ``s`` of the training latents (the authors' centring and diagonal
whitening), held fixed.

Phase-II objective (:func:`memory_loss`), following the authors' code: the
free-rollout latent error over the training horizon, plus ``lambda_residual``
times the one-step error of the correction along the *true* latent path
(teacher forcing: the correction must equal ``z_{t+1} - A z_t - b``), plus
``lambda_corr`` times the mean squared correction.
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar
from jaxsci.dynamics.koopman._backbone import KoopmanBackbone

__all__ = [
    "AbstractMemory",
    "LeakyMemory",
    "LeakyState",
    "MemoryInfo",
    "WindowState",
    "WindowMemory",
    "rollout",
    "warm_state",
    "memory_loss",
    "latent_scale",
]


def _zero_last(mlp: eqx.nn.MLP) -> eqx.nn.MLP:
    last = mlp.layers[-1]
    return eqx.tree_at(
        lambda m: (m.layers[-1].weight, m.layers[-1].bias),
        mlp,
        (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
    )


def latent_scale(latents: Float[Array, "... d"]) -> tuple[Float[Array, " d"], Float[Array, " d"]]:
    """Centre and per-dimension scale (RMS about the mean, floored) of latents."""
    check_array("latents", latents, dtype="floating")
    z = jnp.reshape(latents, (-1, latents.shape[-1]))
    centre = jnp.mean(z, axis=0)
    scale = jnp.maximum(jnp.sqrt(jnp.mean((z - centre) ** 2, axis=0)), 1e-3)
    return centre, scale


class MemoryInfo(NamedTuple):
    """What one memory step reports: the correction added to ``A z + b``."""

    correction: Float[Array, " d"]


class LeakyState(NamedTuple):
    """State of :class:`LeakyMemory`: the leaky integral ``m`` ``[memory_dim]``."""

    m: Float[Array, " m"]


class WindowState(NamedTuple):
    """State of :class:`WindowMemory`: the last ``window`` latents ``[window, d]``,
    oldest first."""

    window: Float[Array, "k d"]


class AbstractMemory(eqx.Module):
    """A Mori-Zwanzig memory: ``z_{t+1} = A z_t + b + correction(z_t, state)``.

    Subclasses are final and define :meth:`init` and :meth:`correction`; :meth:`step`
    is the one concrete step shared by every memory. ``centre`` and ``scale`` are the
    latent standardisation, held fixed in training: the gradient with respect to them
    is zero by construction (``stop_gradient``; pinned by a ``zero_grad`` case).
    """

    centre: eqx.AbstractVar[Float[Array, " d"]]
    scale: eqx.AbstractVar[Float[Array, " d"]]

    @abc.abstractmethod
    def init(self, z0: Float[Array, " d"]) -> PyTree:
        """The state before the first step from ``z0``."""

    @abc.abstractmethod
    def correction(self, z: Float[Array, " d"], state: PyTree) -> tuple[Float[Array, " d"],
                                                                          PyTree]:
        """Read ``z_t`` into ``state``; return ``(correction, new state)``."""

    def step(
        self, backbone: KoopmanBackbone, z: Float[Array, " d"], state: PyTree
    ) -> tuple[Float[Array, " d"], PyTree, MemoryInfo]:
        """``(z_{t+1}, state_{t+1}, info)`` with ``z_{t+1} = A z_t + b + correction``."""
        delta, state = self.correction(z, state)
        return backbone(z) + delta, state, MemoryInfo(delta)

    @property
    def latent_dim(self) -> int:
        return self.centre.shape[-1]


class LeakyMemory(AbstractMemory):
    """Leaky memory module (LMM); state ``m`` ``[memory_dim]``, zero at the start.

    Args (construction):
      latent_dim: ``d``; memory_dim: ``M`` (authors: 128).
      hidden, depth: the MLPs ``psi`` (d -> M) and ``phi`` (M -> d).
      centre, scale: latent standardisation (:func:`latent_scale` of the training
        latents); default 0 and 1.
      tau: initial memory time in steps, ``gamma = exp(-1/tau)``; ``None`` gives
        ``gamma = 1/2`` (the authors' default, raw gamma 0).
    """

    psi: eqx.nn.MLP
    phi: eqx.nn.MLP
    raw_gamma: Float[Array, " m"]
    raw_gate: Float[Array, " d"]
    centre: Float[Array, " d"]
    scale: Float[Array, " d"]

    def __init__(
        self,
        latent_dim: int,
        memory_dim: int = 128,
        *,
        hidden: int = 128,
        depth: int = 2,
        centre: Float[Array, " d"] | None = None,
        scale: Float[Array, " d"] | None = None,
        tau: float | None = None,
        key: jax.Array,
    ):
        check_int("latent_dim", latent_dim, min=1)
        check_int("memory_dim", memory_dim, min=1)
        check_int("hidden", hidden, min=1)
        check_int("depth", depth, min=1)
        check_key("key", key)
        k1, k2 = jax.random.split(key)
        self.psi = eqx.nn.MLP(latent_dim, memory_dim, hidden, depth, jax.nn.silu, key=k1)
        phi = eqx.nn.MLP(memory_dim, latent_dim, hidden, depth, jax.nn.silu, key=k2)
        self.phi = _zero_last(phi)
        if tau is None:
            self.raw_gamma = jnp.zeros((memory_dim,))
        else:
            check_scalar("tau", tau, gt=0.0)
            g = jnp.exp(-1.0 / tau)
            self.raw_gamma = jnp.full((memory_dim,), jnp.log(g) - jnp.log1p(-g))
        self.raw_gate = jnp.zeros((latent_dim,))
        self.centre, self.scale = _standardisation(latent_dim, centre, scale)

    def init(self, z0: Float[Array, " d"]) -> LeakyState:
        """Zero memory."""
        return LeakyState(jnp.zeros((self.raw_gamma.shape[0],), z0.dtype))

    def correction(self, z: Float[Array, " d"], state: LeakyState):
        """``(s * g * phi(m_t), m_t)`` with ``m_t = gamma * m_{t-1} + psi(z_t)``."""
        c, s = jax.lax.stop_gradient(self.centre), jax.lax.stop_gradient(self.scale)
        m = jax.nn.sigmoid(self.raw_gamma) * state.m + self.psi((z - c) / s)
        return s * jax.nn.sigmoid(self.raw_gate) * self.phi(m), LeakyState(m)

    @property
    def memory_time(self) -> Float[Array, " m"]:
        """Memory time per channel in steps, ``-1 / log(gamma)``."""
        return -1.0 / jnp.log(jax.nn.sigmoid(self.raw_gamma))


class WindowMemory(AbstractMemory):
    """Finite-memory closure (FMM) from the last ``window`` latents.

    The state is the window ``[window, d]`` (oldest first), padded at the start by
    repeating ``z_0`` (the authors' ``repeat`` padding). ``window`` default 4
    (authors' ``context_window``).
    """

    phi: eqx.nn.MLP
    centre: Float[Array, " d"]
    scale: Float[Array, " d"]
    window: int = eqx.field(static=True)

    def __init__(
        self,
        latent_dim: int,
        window: int = 4,
        *,
        hidden: int = 128,
        depth: int = 2,
        centre: Float[Array, " d"] | None = None,
        scale: Float[Array, " d"] | None = None,
        key: jax.Array,
    ):
        check_int("latent_dim", latent_dim, min=1)
        check_int("window", window, min=1)
        check_int("hidden", hidden, min=1)
        check_int("depth", depth, min=1)
        check_key("key", key)
        mlp = eqx.nn.MLP(window * latent_dim, latent_dim, hidden, depth, jax.nn.silu, key=key)
        self.phi = _zero_last(mlp)
        self.window = window
        self.centre, self.scale = _standardisation(latent_dim, centre, scale)

    def init(self, z0: Float[Array, " d"]) -> WindowState:
        """The window filled with ``z0`` (the authors' ``repeat`` padding)."""
        return WindowState(jnp.broadcast_to(z0, (self.window, z0.shape[-1])))

    def correction(self, z: Float[Array, " d"], state: WindowState):
        """``(s * phi(window), window)`` with ``z_t`` shifted into the window."""
        win = jnp.concatenate([state.window[1:], z[None]], axis=0)
        c, s = jax.lax.stop_gradient(self.centre), jax.lax.stop_gradient(self.scale)
        return s * self.phi(((win - c) / s).reshape(-1)), WindowState(win)


def _standardisation(d, centre, scale):
    centre = jnp.zeros((d,)) if centre is None else jnp.asarray(centre)
    scale = jnp.ones((d,)) if scale is None else jnp.asarray(scale)
    check_array("centre", centre, shape=(d,))
    check_array("scale", scale, shape=(d,), ge=0.0)
    return centre, scale


def warm_state(
    memory: AbstractMemory, backbone: KoopmanBackbone, history: Float[Array, "h d"]
) -> PyTree:
    """Memory state after reading the observed latents ``history`` (teacher forcing).

    The state returned goes with ``history[-1]`` as the next rollout's ``z0``:
    ``rollout(backbone, history[-1], steps, memory, state=warm_state(...))``.
    """
    check_array("history", history, ndim=2, dtype="floating")
    state = memory.init(history[0])

    def step(state, z):
        _, state = memory.correction(z, state)
        return state, None

    state, _ = jax.lax.scan(step, state, history[:-1])
    return state


def rollout(
    backbone: KoopmanBackbone,
    z0: Float[Array, " d"],
    steps: int,
    memory: AbstractMemory | None = None,
    *,
    state: PyTree | None = None,
) -> Float[Array, "t d"]:
    """``steps + 1`` latents from ``z0``: linear if ``memory`` is None, else corrected.

    A ``lax.scan``; differentiable and vmappable in ``z0`` and the parameters.
    """
    check_int("steps", steps, min=0)
    check_array("z0", z0, shape=(backbone.dim,), dtype="floating")
    return _rollout(backbone, z0, steps, memory, state)


@eqx.filter_jit
def _rollout(backbone, z0, steps, memory, state):
    # Module-level jit: a second call compiles nothing (the scan bodies' closures).
    if memory is None:

        def lin(z, _):
            z = backbone(z)
            return z, z

        _, zs = jax.lax.scan(lin, z0, None, length=steps)
    else:
        state = memory.init(z0) if state is None else state

        def mem(carry, _):
            z, st = carry
            z, st, _ = memory.step(backbone, z, st)
            return (z, st), z

        _, zs = jax.lax.scan(mem, (z0, state), None, length=steps)
    return jnp.concatenate([z0[None], zs], axis=0)


def memory_loss(
    memory: AbstractMemory,
    backbone: KoopmanBackbone,
    latents: Float[Array, "b t d"],
    *,
    lambda_residual: float = 1.0,
    lambda_corr: float = 0.01,
) -> Float[Array, ""]:
    """Phase-II loss on a batch of latent trajectories (module docstring).

    Errors are measured in standardised units ``(z - c) / s`` of the memory.
    Defaults are the authors' (``lambda_residual = 1``, ``lambda_corr = 0.01``).
    """
    backbone = jax.lax.stop_gradient(backbone)  # A frozen in Phase II
    s = jax.lax.stop_gradient(memory.scale)
    steps = latents.shape[1] - 1

    def one(zs):
        pred = rollout(backbone, zs[0], steps, memory)
        free = jnp.mean(((pred[1:] - zs[1:]) / s) ** 2)
        # Teacher forcing along the true path: the correction is the residual.
        state = memory.init(zs[0])

        def tf(st, z):
            delta, st = memory.correction(z, st)
            return st, delta

        _, deltas = jax.lax.scan(tf, state, zs[:-1])
        target = zs[1:] - backbone(zs[:-1])
        resid = jnp.mean(((deltas - target) / s) ** 2)
        corr = jnp.mean((deltas / s) ** 2)
        return free + lambda_residual * resid + lambda_corr * corr

    return jnp.mean(jax.vmap(one)(latents))
