r"""Transformer tokens as interacting particles on the sphere, with the perceptron block.

Paper: "The forward pass of a Transformer can be seen as an interacting particle
system on the unit sphere ... we study the effect of the perceptron block"
(ICML 2026, abstract in ``shared/seeds/000_*.txt``). Builds on Geshkovski, Letrouit,
Polyanskiy & Rigollet, "A mathematical perspective on Transformers" (2023), whose
notation (SA / USA dynamics, ``E_beta``) we follow.

Dynamics
--------
Tokens ``x_1..x_n`` on ``S^{d-1}``; layers are time ``t``:

.. math::

    \dot x_i = P^\perp_{x_i}\Big( \frac{1}{Z_i}\sum_j e^{\beta \langle Q x_i, K x_j\rangle} V x_j
               + W^\top (c \odot \sigma(W x_i + b)) \Big),

with ``P^perp_x v = v - <v, x> x`` (``jaxsci.core.sphere.project_tangent``). The
normaliser ``Z_i`` is either ``n`` (``normalisation="mean"``, the "USA" dynamics of
Geshkovski et al., which is the mean-field / Wasserstein gradient flow, the
paper's setting) or the softmax partition function ``sum_j exp(...)``
(``normalisation="softmax"``, the "SA" dynamics of a real Transformer).

Perceptron as a gradient. A one-hidden-layer block ``W2 sigma(W1 x + b1)`` is the
gradient of an explicit potential exactly when ``W2 = W1^T diag(c)``: then
``W1^T (c * sigma(W1 x + b1)) = grad_x sum_k c_k Phi(<w_k, x> + b_k)`` with
``Phi' = sigma``. We parametrise the block that way (:class:`Perceptron`: rows
``w_k``, biases ``b_k``, output weights ``c_k``); ``Phi`` is ``relu -> z_+^2 / 2``,
``tanh -> log cosh z``, ``identity -> z^2 / 2``.

Energy. With ``Q^T K = V = I`` and ``Z_i = n`` the flow is the gradient *ascent*
(projected on the sphere) of

.. math::

    E(x) = \frac{1}{2\beta n}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}
           + \sum_i \sum_k c_k \Phi(\langle w_k, x_i\rangle + b_k),

(``grad_{x_i} E`` is exactly the bracket above; the ``1/n`` is the mean-field
normalisation of the issue's ``E_beta``, i.e. time rescaled by ``n``), so
``dE/dt = sum_i |P^perp grad_i E|^2 >= 0``: :func:`energy` is monotone along
trajectories. Without the perceptron the SA dynamics also increases ``E`` (it is the
same gradient in the metric reweighted by ``1/Z_i``); with it, only USA is a
gradient flow. More generally ``Q^T K`` symmetric and ``V = Q^T K`` is a gradient
flow of ``(1/(2 beta n)) sum exp(beta x_i^T Q^T K x_j)``; :func:`energy` handles that.

Integrator. diffrax's Runge-Kutta step (``Tsit5`` by default) on the projected
field in R^d, followed by radial renormalisation after every step (the "standard
projection method", Hairer, Lubich & Wanner, *Geometric Numerical Integration*,
IV.4: projecting an order-p one-step method keeps order p, and the constraint
``|x_i| = 1`` holds to rounding for all time instead of drifting like the
integrator's local error). The step is fixed so that ``vmap`` over thousands of
settings runs in lock step with no wasted rejected steps; ``made_jump=True`` tells
the FSAL solver that the state was changed by the projection.

Clusters. The final empirical measure is summarised by its atoms:
:func:`count_clusters` merges particles closer than ``tol`` (connected components
of the ``|x_i - x_j| < tol`` graph, by min-label propagation inside
``lax.while_loop``).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxsci.core.sphere import normalize, project_tangent
from jaxsci.core.validation import (
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = [
    "ACTIVATIONS",
    "NORMALISATIONS",
    "Perceptron",
    "ParticleFlow",
    "Trajectory",
    "random_perceptron",
    "make_flow",
    "attention",
    "velocity",
    "energy",
    "is_gradient_flow",
    "solve",
    "count_clusters",
    "cluster_masses",
    "check_on_sphere",
]

Activation = Literal["relu", "tanh", "identity"]
Normalisation = Literal["mean", "softmax"]
ACTIVATIONS = ("relu", "tanh", "identity")
NORMALISATIONS = ("mean", "softmax")


def _sigma(z, activation: str):
    if activation == "relu":
        return jax.nn.relu(z)
    if activation == "tanh":
        return jnp.tanh(z)
    return z


def _phi(z, activation: str):
    """Antiderivative of the activation (the perceptron's potential per unit)."""
    if activation == "relu":
        return 0.5 * jnp.square(jax.nn.relu(z))
    if activation == "tanh":
        # log cosh z, written to stay finite for large |z|.
        a = jnp.abs(z)
        return a + jnp.log1p(jnp.exp(-2.0 * a)) - math.log(2.0)
    return 0.5 * jnp.square(z)


# --------------------------------------------------------------------------- models


class Perceptron(eqx.Module):
    """Gradient perceptron ``x -> W^T (c * sigma(W x + b))`` (``W2 = W1^T diag(c)``)."""

    w: Float[Array, "m d"]
    b: Float[Array, " m"]
    c: Float[Array, " m"]
    activation: str = eqx.field(static=True, default="relu")

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        z = x @ self.w.T + self.b
        return (self.c * _sigma(z, self.activation)) @ self.w

    def potential(self, x: Float[Array, "... d"]) -> Float[Array, "..."]:
        """``sum_k c_k Phi(<w_k, x> + b_k)``; its gradient is ``self(x)``."""
        z = x @ self.w.T + self.b
        return jnp.sum(self.c * _phi(z, self.activation), axis=-1)


class ParticleFlow(eqx.Module):
    """Parameters of the attention + perceptron flow (a pytree: vmap over them)."""

    beta: Float[Array, ""]
    qk: Float[Array, "d d"]  # Q^T K: the interaction depends on Q and K only through it
    value: Float[Array, "d d"]
    perceptron: Perceptron | None
    # Time reparametrisation t -> speed * t: same trajectories, another clock. Lets a
    # vmapped sweep over beta share one step size (speed = exp(-beta) makes the
    # attention kernel exp(beta (<x, y> - 1)) <= 1).
    speed: Float[Array, ""]
    normalisation: str = eqx.field(static=True, default="mean")

    @property
    def d(self) -> int:
        return self.qk.shape[-1]


def random_perceptron(
    key: jax.Array,
    d: int,
    width: int,
    scale: float | Float[Array, ""] = 1.0,
    *,
    bias_std: float | Float[Array, ""] = 0.5,
    activation: Activation = "relu",
    dtype=jnp.float32,
) -> Perceptron:
    """Random gradient perceptron: ``w_k ~ N(0, I/d)``, ``b_k ~ N(0, bias_std^2)``, ``c = scale``.

    ``scale`` and ``bias_std`` may be traced (swept under vmap); ``width`` is a shape.
    """
    check_key("key", key)
    d = check_int("d", d, min=2)
    width = check_int("width", width, min=1)
    check_scalar("scale", scale)
    check_scalar("bias_std", bias_std, ge=0.0)
    check_choice("activation", activation, ACTIVATIONS)
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (width, d), dtype) / math.sqrt(d)
    b = jnp.asarray(bias_std, dtype) * jax.random.normal(kb, (width,), dtype)
    c = jnp.full((width,), scale, dtype)
    return Perceptron(w, b, c, activation)


def make_flow(
    d: int,
    beta: float | Float[Array, ""],
    *,
    qk: Float[Array, "d d"] | None = None,
    value: Float[Array, "d d"] | None = None,
    perceptron: Perceptron | None = None,
    normalisation: Normalisation = "mean",
    speed: float | Float[Array, ""] = 1.0,
    dtype=jnp.float32,
) -> ParticleFlow:
    """Build a :class:`ParticleFlow`; ``qk`` (``Q^T K``) and ``value`` default to ``I``."""
    d = check_int("d", d, min=2)
    check_scalar("beta", beta, ge=0.0)
    check_choice("normalisation", normalisation, NORMALISATIONS)
    check_scalar("speed", speed, gt=0.0)
    eye = jnp.eye(d, dtype=dtype)
    qk = eye if qk is None else check_array("qk", jnp.asarray(qk), shape=(d, d), dtype="floating")
    value = (
        eye if value is None
        else check_array("value", jnp.asarray(value), shape=(d, d), dtype="floating")
    )
    if perceptron is not None:
        if not isinstance(perceptron, Perceptron):
            raise TypeError(f"perceptron must be a Perceptron, got {type(perceptron).__name__}")
        if perceptron.w.shape[-1] != d:
            raise ValueError(
                f"perceptron must act on d = {d}, got weights of shape {tuple(perceptron.w.shape)}"
            )
    return ParticleFlow(
        jnp.asarray(beta, dtype), qk, value, perceptron, jnp.asarray(speed, dtype), normalisation
    )


# --------------------------------------------------------------------------- dynamics


def attention(flow: ParticleFlow, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """Unprojected attention output ``(1/Z_i) sum_j exp(beta <Q x_i, K x_j>) V x_j``."""
    logits = flow.beta * (x @ flow.qk @ x.T)
    vx = x @ flow.value.T
    if flow.normalisation == "softmax":
        return jax.nn.softmax(logits, axis=-1) @ vx
    return jnp.exp(logits) @ vx / x.shape[0]


def _raw_velocity(flow: ParticleFlow, x):
    v = attention(flow, x)
    if flow.perceptron is not None:
        v = v + flow.perceptron(x)
    return flow.speed * v


def velocity(flow: ParticleFlow, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The projected vector field ``P^perp_{x_i}(attention + perceptron)``."""
    _check_state(flow, x)
    return project_tangent(x, _raw_velocity(flow, x))


def is_gradient_flow(flow: ParticleFlow) -> bool:
    """True when :func:`energy` is a Lyapunov function of the flow (checked on values).

    Needs ``Q^T K`` symmetric and ``V = Q^T K``; with a perceptron also ``Z_i = n``.
    """
    qk, v = jnp.asarray(flow.qk), jnp.asarray(flow.value)
    sym = bool(jnp.allclose(qk, qk.T, atol=1e-6)) and bool(jnp.allclose(v, qk, atol=1e-6))
    if flow.perceptron is not None:
        return sym and flow.normalisation == "mean"
    return sym


def energy(flow: ParticleFlow, x: Float[Array, "n d"]) -> Float[Array, ""]:
    """``E = (1/(2 beta n)) sum_ij exp(beta x_i^T Q^T K x_j) + sum_i perceptron potential``.

    At ``beta = 0`` the interaction term is replaced by its ``beta -> 0`` limit minus
    the constant ``n/(2 beta)``: ``(1/(2n)) sum_ij <x_i, Q^T K x_j>``.
    """
    n = x.shape[0]
    g = x @ flow.qk @ x.T
    beta = flow.beta
    safe = jnp.where(beta > 0, beta, 1.0)
    # expm1 keeps the beta -> 0 limit finite; the constant n^2/(2 beta n) does not
    # affect monotonicity.
    e_att = jnp.where(beta > 0, jnp.sum(jnp.expm1(safe * g)) / (2.0 * safe * n),
                      jnp.sum(g) / (2.0 * n))
    if flow.perceptron is not None:
        e_att = e_att + jnp.sum(flow.perceptron.potential(x))
    return e_att


class Trajectory(NamedTuple):
    """Output of :func:`solve`."""

    ts: Float[Array, " s"]  # save times (including t = 0)
    xs: Float[Array, "s n d"]  # states at the save times
    energy: Float[Array, " s"]  # :func:`energy` at the save times
    final: Float[Array, "n d"]


def solve(
    flow: ParticleFlow,
    x0: Float[Array, "n d"],
    t1: float,
    dt: float,
    *,
    n_save: int = 50,
    solver: diffrax.AbstractSolver | None = None,
) -> Trajectory:
    """Integrate the flow from ``x0`` to ``t1`` with fixed steps ``dt`` and projection.

    ``round(t1/dt)`` steps of ``solver`` (default ``diffrax.Tsit5()``), each followed
    by renormalisation onto the sphere; ``n_save`` equally spaced states (plus
    ``t = 0``) are kept with their energy. Jittable and vmappable over ``flow``'s
    arrays and ``x0``; ``t1``, ``dt``, ``n_save`` are static.
    """
    _check_state(flow, x0)
    check_scalar("t1", t1, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    n_steps = max(1, int(round(float(t1) / float(dt))))
    n_save = check_int("n_save", n_save, min=1)
    n_save = min(n_save, n_steps)
    if solver is None:
        solver = diffrax.Tsit5()
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver, got {type(solver).__name__}")
    return _solve(flow, x0, n_steps, float(dt), n_save, solver)


@eqx.filter_jit
def _solve(flow, x0, n_steps, dt, n_save, solver):
    term = diffrax.ODETerm(lambda t, y, args: project_tangent(y, _raw_velocity(args, y)))
    dt_arr = jnp.asarray(dt, x0.dtype)
    state0 = solver.init(term, 0.0, dt_arr, x0, flow)
    per_save = n_steps // n_save
    rest = n_steps - per_save * n_save

    def step(carry, _):
        t, y, state = carry
        y1, _, _, state, _ = solver.step(term, t, t + dt_arr, y, flow, state, made_jump=True)
        return (t + dt_arr, normalize(y1), state), None

    def block(carry, _):
        carry, _ = jax.lax.scan(step, carry, None, length=per_save)
        return carry, (carry[0], carry[1])

    t0 = jnp.zeros((), x0.dtype)
    carry, (ts, xs) = jax.lax.scan(block, (t0, x0, state0), None, length=n_save)
    if rest:
        carry, _ = jax.lax.scan(step, carry, None, length=rest)
        ts = ts.at[-1].set(carry[0])
        xs = xs.at[-1].set(carry[1])
    ts = jnp.concatenate([t0[None], ts])
    xs = jnp.concatenate([x0[None], xs])
    es = jax.vmap(lambda y: energy(flow, y))(xs)
    return Trajectory(ts, xs, es, xs[-1])


# --------------------------------------------------------------------------- clusters


def count_clusters(
    x: Float[Array, "n d"], tol: float = 1e-2
) -> tuple[Int[Array, ""], Int[Array, " n"]]:
    """Number of atoms of the empirical measure and each particle's cluster label.

    Clusters are the connected components of the graph ``|x_i - x_j| < tol``; the
    label of a particle is the smallest index in its component. Jittable and
    vmappable (``O(n^2)`` memory for the adjacency).
    """
    check_array("x", x, ndim=2, dtype="floating")
    check_scalar("tol", tol, gt=0.0)
    return _count_clusters(x, tol)


def _count_clusters(x, tol):
    n = x.shape[0]
    sq = jnp.sum(x * x, -1)
    dist2 = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    adj = dist2 < tol * tol
    big = jnp.int32(n)

    def body(state):
        labels, _ = state
        # each node takes the smallest label among its neighbours (itself included)
        new = jnp.min(jnp.where(adj, labels[None, :], big), axis=1)
        return new, jnp.any(new != labels)

    labels, _ = jax.lax.while_loop(
        lambda s: s[1], body, (jnp.arange(n, dtype=jnp.int32), jnp.array(True))
    )
    n_clusters = jnp.sum(labels == jnp.arange(n, dtype=jnp.int32))
    return n_clusters, labels


def cluster_masses(labels: Int[Array, " n"]) -> Int[Array, " n"]:
    """Number of particles carrying each label (zero for labels that are not roots)."""
    return jnp.zeros(labels.shape, jnp.int32).at[labels].add(1)


# --------------------------------------------------------------------------- checks


def check_on_sphere(name: str, x, atol: float = 1e-4) -> None:
    """Raise if the rows of ``x`` are not unit vectors (concrete arrays only)."""
    if isinstance(x, jax.core.Tracer):
        return
    # NumPy, not jnp: under an enclosing jit a jnp op on a constant is traced.
    norms = np.linalg.norm(np.asarray(x, dtype=np.float64), axis=-1)
    err = float(np.max(np.abs(norms - 1.0))) if norms.size else 0.0
    if err > atol:
        raise ValueError(
            f"{name} must lie on the unit sphere (row norms 1), got max | |x_i| - 1 | = {err:.3g}"
        )


def _check_state(flow, x):
    if not isinstance(flow, ParticleFlow):
        raise TypeError(f"flow must be a ParticleFlow (see make_flow), got {type(flow).__name__}")
    check_array("x", x, ndim=2, dtype="floating")
    if x.shape[1] != flow.d:
        raise ValueError(f"x must have shape (n, {flow.d}) to match the flow, got {tuple(x.shape)}")
    check_on_sphere("x", x)

