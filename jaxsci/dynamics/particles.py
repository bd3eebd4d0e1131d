r"""Transformer tokens as interacting particles on the sphere, with the perceptron block.

Paper: "The forward pass of a Transformer can be seen as an interacting particle
system on the unit sphere ... we study the effect of the perceptron block"
(ICML 2026). Builds on Geshkovski, Letrouit,
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

Long horizons. Attention alone merges its metastable clusters on a time that grows
exponentially with ``beta``, far beyond what fixed steps reach. :func:`solve_to_rest`
integrates with adaptive steps (diffrax's ``PIDController``) and stops at the first
step where the largest velocity falls below ``vtol`` (a ``diffrax.Event``), saving
states at given (e.g. log-spaced) times. It pays per step, and an explicit solver's
step is held near the fastest (intra-cluster) rate while slow clusters merge, so its
reach is a step budget, not a time. Once the clusters have collapsed, each moves as
one token carrying its mass (coincident tokens see the same field): the tokens'
``weights`` (:func:`attention`, :func:`velocity`, :func:`solve_to_rest`) express
that measure, :func:`merge_clusters` builds it, and :func:`solve_merging` integrates
the few weighted tokens through their merges to one cluster, with steps that follow
the slow merging time (1e13 in a few hundred steps). For two clusters the time has a
closed form, :func:`merge_time_two_clusters` (it grows as ``e^{beta (1 - cos
theta)}``). ``scripts/particles_collapse.py`` measures both routes.

Clusters. The final empirical measure is summarised by its atoms:
:func:`count_clusters` merges particles closer than ``tol`` (connected components
of the ``|x_i - x_j| < tol`` graph, by min-label propagation inside
``lax.while_loop``).

Transformations. Every number a researcher sweeps is traced (``jit``/``vmap``):
``beta``, ``speed``, ``Q^T K`` and ``V`` of :func:`make_flow`, the perceptron's
``scale`` and ``bias_std`` (:func:`random_perceptron`), the step size of :func:`solve`
(give ``n_steps`` and ``dt`` or ``t1``: the step count is the only static number),
``tol`` of :func:`count_clusters`. Strategies are values: ``solver=diffrax.Tsit5()``
or any diffrax solver. :func:`solve` is reverse-mode differentiable (a ``lax.scan``
of solver steps) in the flow's arrays, ``x0`` and the step size; :func:`energy` and
:func:`velocity` too. :func:`count_clusters` is piecewise constant (its gradient is
zero). Array-likes (lists) are accepted and converted once.

>>> import jax, diffrax
>>> from jaxsci.core.sphere import sample_uniform
>>> from jaxsci.dynamics import particles as pt
>>> flow = pt.make_flow(3, beta=1.0)
>>> tr = pt.solve(flow, sample_uniform(jax.random.key(0), 16, 3), 20.0, 0.1,
...               solver=diffrax.Tsit5())
>>> int(pt.count_clusters(tr.final, 0.05)[0])
1
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

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
    "RestTrajectory",
    "solve_to_rest",
    "count_clusters",
    "cluster_masses",
    "MergedClusters",
    "merge_clusters",
    "MergeHistory",
    "solve_merging",
    "merge_time_two_clusters",
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
    dtype=None,
) -> Perceptron:
    """Random gradient perceptron: ``w_k ~ N(0, I/d)``, ``b_k ~ N(0, bias_std^2)``, ``c = scale``.

    ``scale`` and ``bias_std`` may be traced (swept under vmap); ``width`` is a shape.
    ``dtype`` defaults to JAX's default float (float64 under ``jax_enable_x64``).
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
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
    dtype=None,
) -> ParticleFlow:
    """Build a :class:`ParticleFlow`; ``qk`` (``Q^T K``) and ``value`` default to ``I``.

    ``beta``, ``speed``, ``qk`` and ``value`` may be traced (vmap over them);
    ``normalisation`` (``"mean"``: USA / mean-field, ``"softmax"``: SA) is structural.
    ``dtype`` defaults to JAX's default float (float64 under ``jax_enable_x64``).
    Negative ``beta`` or non-positive ``speed`` raise, also inside ``jit``.
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
    d = check_int("d", d, min=2)
    check_scalar("beta", beta, ge=0.0)
    check_choice("normalisation", normalisation, NORMALISATIONS)
    check_scalar("speed", speed, gt=0.0)
    eye = jnp.eye(d, dtype=dtype)
    qk = eye if qk is None else check_array("qk", jnp.asarray(qk, dtype), shape=(d, d),
                                            dtype="floating")
    value = (
        eye if value is None
        else check_array("value", jnp.asarray(value, dtype), shape=(d, d), dtype="floating")
    )
    if perceptron is not None:
        if not isinstance(perceptron, Perceptron):
            raise TypeError(f"perceptron must be a Perceptron, got {type(perceptron).__name__}")
        if perceptron.w.shape[-1] != d:
            raise ValueError(
                f"perceptron must act on d = {d}, got weights of shape {tuple(perceptron.w.shape)}"
            )
    beta = jnp.asarray(beta, dtype)
    beta = eqx.error_if(beta, ~(beta >= 0), "beta must be >= 0 (and not NaN)")
    speed = jnp.asarray(speed, dtype)
    speed = eqx.error_if(speed, ~(speed > 0), "speed must be > 0 (and not NaN)")
    return ParticleFlow(beta, qk, value, perceptron, speed, normalisation)


# --------------------------------------------------------------------------- dynamics


def attention(
    flow: ParticleFlow, x: Float[Array, "n d"], weights: Float[Array, " n"] | None = None
) -> Float[Array, "n d"]:
    """Unprojected attention output ``(1/Z_i) sum_j exp(beta <Q x_i, K x_j>) V x_j``.

    ``weights`` (default ``1/n`` each) are the masses of the empirical measure
    ``sum_j w_j delta_{x_j}``: the mean normalisation becomes ``sum_j w_j exp(...) V x_j``
    and the softmax ``sum_j w_j exp(...) V x_j / sum_j w_j exp(...)``, so a token of
    weight ``m/n`` moves exactly as ``m`` coincident tokens of weight ``1/n``.
    """
    logits = flow.beta * (x @ flow.qk @ x.T)
    vx = x @ flow.value.T
    if weights is None:
        if flow.normalisation == "softmax":
            return jax.nn.softmax(logits, axis=-1) @ vx
        return jnp.exp(logits) @ vx / x.shape[0]
    if flow.normalisation == "softmax":
        e = weights[None, :] * jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
        return (e / jnp.sum(e, axis=-1, keepdims=True)) @ vx
    return (jnp.exp(logits) * weights[None, :]) @ vx


def _raw_velocity(flow: ParticleFlow, x, weights=None):
    v = attention(flow, x, weights)
    if flow.perceptron is not None:
        v = v + flow.perceptron(x)
    return flow.speed * v


def velocity(
    flow: ParticleFlow, x: Float[Array, "n d"], weights: Float[Array, " n"] | None = None
) -> Float[Array, "n d"]:
    """The projected vector field ``P^perp_{x_i}(attention + perceptron)``.

    ``weights``: the tokens' masses (see :func:`attention`; default ``1/n`` each).
    Differentiable in ``flow``'s arrays, ``x`` and ``weights``.
    """
    if not hasattr(x, "shape"):
        x = jnp.asarray(x)
    _check_state(flow, x)
    weights = _check_weights(weights, x)
    return project_tangent(x, _raw_velocity(flow, x, weights))


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
    the constant ``n/(2 beta)``: ``(1/(2n)) sum_ij <x_i, Q^T K x_j>``. Differentiable
    in ``flow``'s arrays and ``x``.
    """
    x = jnp.asarray(x)
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
    t1: float | Float[Array, ""] | None = None,
    dt: float | Float[Array, ""] | None = None,
    *,
    n_steps: int | None = None,
    n_save: int = 50,
    solver: diffrax.AbstractSolver | None = None,
) -> Trajectory:
    """Integrate the flow from ``x0`` with fixed steps and projection onto the sphere.

    Give two of ``t1`` (final time), ``dt`` (step size) and ``n_steps`` (step count):

    * ``solve(flow, x0, t1, dt)``: ``round(t1 / dt)`` steps of size ``dt`` (``t1``, ``dt``
      concrete numbers, as the step count is a shape);
    * ``solve(flow, x0, dt=h, n_steps=k)`` or ``solve(flow, x0, t1, n_steps=k)``: ``k``
      steps of size ``h`` (or ``t1 / k``); the step size / final time is traced, so
      ``vmap`` over step sizes (or horizons) at a fixed step count works.

    Each step of ``solver`` (any diffrax solver; default ``diffrax.Tsit5()``) is
    followed by renormalisation onto the sphere; ``n_save`` equally spaced states
    (plus ``t = 0``) are kept with their energy.

    Args:
      flow: the :class:`ParticleFlow` (traced: vmap over its arrays, e.g. ``beta``).
      x0: ``(n, d)`` initial tokens on the unit sphere (array-like; checked also
        inside ``jit``).
      t1, dt, n_steps: two of them, as above.
      n_save: saved states (static).
      solver: a ``diffrax.AbstractSolver`` value.

    Returns:
      :class:`Trajectory` ``(ts, xs, energy, final)``. Reverse-mode differentiable in
      ``flow``'s arrays, ``x0`` and the step size (``jax.grad`` through the ``lax.scan``).
    """
    if not isinstance(x0, jax.Array):
        x0 = jnp.asarray(x0)
    _check_state(flow, x0)
    given = [v is not None for v in (t1, dt, n_steps)]
    if sum(given) != 2:
        raise ValueError("solve needs exactly two of t1, dt and n_steps, got "
                         + ", ".join(n for n, g in zip(("t1", "dt", "n_steps"), given,
                                                       strict=True) if g) or "none")
    if n_steps is None:
        check_scalar("t1", t1, gt=0.0)
        check_scalar("dt", dt, gt=0.0)
        if isinstance(t1, jax.core.Tracer) or isinstance(dt, jax.core.Tracer):
            raise TypeError("t1 and dt are traced, but the step count round(t1 / dt) is a "
                            "shape: pass n_steps= (static) with dt= or t1= to sweep them")
        n_steps = max(1, int(round(float(t1) / float(dt))))
        h = dt
    else:
        n_steps = check_int("n_steps", n_steps, min=1)
        if dt is None:
            check_scalar("t1", t1, gt=0.0)
            h = jnp.asarray(t1, x0.dtype) / n_steps
        else:
            check_scalar("dt", dt, gt=0.0)
            h = dt
    n_save = check_int("n_save", n_save, min=1)
    n_save = min(n_save, n_steps)
    if solver is None:
        solver = diffrax.Tsit5()
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver (e.g. diffrax.Tsit5()), got "
                        f"{type(solver).__name__}")
    return _solve(flow, x0, jnp.asarray(h, x0.dtype), n_steps, n_save, solver)


@eqx.filter_jit
def _solve(flow, x0, dt_arr, n_steps, n_save, solver):
    dt_arr = eqx.error_if(dt_arr, ~(dt_arr > 0), "the step size (dt or t1 / n_steps) must "
                          "be > 0")
    norms = jnp.linalg.norm(x0, axis=-1)
    atol = 1e-4 if x0.dtype == jnp.float32 else 1e-8
    x0 = eqx.error_if(x0, ~jnp.all(jnp.abs(norms - 1) <= atol),
                      "x0 must lie on the unit sphere (row norms 1)")
    term = diffrax.ODETerm(lambda t, y, args: project_tangent(y, _raw_velocity(args, y)))
    t0 = jnp.zeros((), x0.dtype)
    state0 = solver.init(term, t0, dt_arr, x0, flow)
    per_save = n_steps // n_save
    rest = n_steps - per_save * n_save

    def step(carry, _):
        t, y, state = carry
        y1, _, _, state, _ = solver.step(term, t, t + dt_arr, y, flow, state, made_jump=True)
        return (t + dt_arr, normalize(y1), state), None

    def block(carry, _):
        carry, _ = jax.lax.scan(step, carry, None, length=per_save)
        return carry, (carry[0], carry[1])

    carry, (ts, xs) = jax.lax.scan(block, (t0, x0, state0), None, length=n_save)
    if rest:
        carry, _ = jax.lax.scan(step, carry, None, length=rest)
        ts = ts.at[-1].set(carry[0])
        xs = xs.at[-1].set(carry[1])
    ts = jnp.concatenate([t0[None], ts])
    xs = jnp.concatenate([x0[None], xs])
    es = jax.vmap(lambda y: energy(flow, y))(xs)
    return Trajectory(ts, xs, es, xs[-1])


class RestTrajectory(NamedTuple):
    """Output of :func:`solve_to_rest`."""

    ts: Float[Array, " s"]  # the requested save times
    xs: Float[Array, "s n d"]  # states at them (after the stop: the final state)
    final: Float[Array, "n d"]  # the state where the solve stopped
    t_stop: Float[Array, ""]  # where it stopped: the event, t1, or the step budget
    at_rest: Bool[Array, ""]  # stopped by the event (|velocity| < vtol or diameter small)
    n_steps: Int[Array, ""]  # accepted + rejected steps taken


def solve_to_rest(
    flow: ParticleFlow,
    x0: Float[Array, "n d"],
    t1: float | Float[Array, ""],
    ts: Float[Array, " s"],
    *,
    vtol: float | Float[Array, ""] = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    dt0: float = 0.1,
    max_steps: int = 100_000,
    solver: diffrax.AbstractSolver | None = None,
    weights: Float[Array, " n"] | None = None,
    stop_diameter: float | Float[Array, ""] | None = None,
) -> RestTrajectory:
    """Integrate with adaptive steps until the flow is at rest, ``t1``, or the step budget.

    Adaptive steps (``diffrax.PIDController(rtol, atol)``) on the projected field, the
    state read through its radial projection (the exact flow stays on the sphere; the
    returned states are renormalised). The solve stops at the first step where
    ``max |velocity| < vtol`` (``diffrax.Event``: a critical point, e.g. one cluster, or
    a metastable configuration slower than ``vtol``), at ``t1``, or after ``max_steps``
    steps (then ``t_stop`` is where the budget ran out). In float32 keep ``vtol`` above
    ~1e-7 (round-off of the velocity of a collapsed cluster).

    Args:
      flow: the :class:`ParticleFlow` (traced: vmap over its arrays).
      x0: ``(n, d)`` initial tokens on the unit sphere.
      t1: the horizon (traced).
      ts: ``(s,)`` increasing save times in ``(0, t1]`` (traced), e.g. log-spaced.
      vtol: the rest threshold on the largest velocity component (traced).
      rtol, atol, dt0: the step controller's tolerances and first step.
      max_steps: the step budget (static).
      solver: a diffrax solver (default ``diffrax.Tsit5()``).
      weights: ``(n,)`` masses of the tokens (traced; default ``1/n`` each), e.g. the
        clusters of :func:`merge_clusters`: the reduced flow of collapsed clusters.
        Tokens of zero weight (padding) stay where they are.
      stop_diameter: also stop once every two tokens are closer than this (traced):
        one cluster. The criterion for the reduced flow, where a slow metastable
        configuration can move slower than any usable ``vtol`` (round-off and the step
        controller's tolerance set a floor on the velocity of a state at rest).

    Returns:
      :class:`RestTrajectory`. Not for gradients (the stop is a discrete event): use
      :func:`solve` to differentiate.
    """
    x0, max_steps = _check_adaptive(flow, x0, t1, rtol, atol, dt0, max_steps)
    check_scalar("vtol", vtol, gt=0.0)
    ts = check_array("ts", jnp.asarray(ts, x0.dtype), ndim=1, dtype="floating")
    if solver is None:
        solver = diffrax.Tsit5()
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver (e.g. diffrax.Tsit5()), got "
                        f"{type(solver).__name__}")
    weights = _check_weights(weights, x0)
    if stop_diameter is None:
        stop_diameter = -1.0  # never
    else:
        check_scalar("stop_diameter", stop_diameter, gt=0.0)
    return _solve_to_rest(flow, x0, jnp.asarray(t1, x0.dtype), ts,
                          jnp.asarray(vtol, x0.dtype), rtol, atol, dt0, max_steps, solver,
                          weights, jnp.asarray(stop_diameter, x0.dtype))


@eqx.filter_jit
def _solve_to_rest(flow, x0, t1, ts, vtol, rtol, atol, dt0, max_steps, solver, weights,
                   stop_diameter):
    tol = 1e-4 if x0.dtype == jnp.float32 else 1e-8
    x0 = eqx.error_if(x0, ~jnp.all(jnp.abs(jnp.linalg.norm(x0, axis=-1) - 1) <= tol),
                      "x0 must lie on the unit sphere (row norms 1)")
    ts = eqx.error_if(ts, ~(jnp.all(jnp.diff(ts) > 0) & (ts[0] > 0) & (ts[-1] <= t1)),
                      "ts must increase within (0, t1]")

    def field(t, y, args):
        x = normalize(y)
        v = project_tangent(x, _raw_velocity(args, x, weights))
        if weights is None:
            return v
        # zero-weight (padding) tokens are frozen (see solve_merging)
        return jnp.where(weights[:, None] > 0, v, 0.0)

    def rest(t, y, args, **kwargs):
        x = normalize(y)
        sq = jnp.sum(x * x, -1)
        diameter2 = jnp.max(sq[:, None] + sq[None, :] - 2.0 * x @ x.T)
        return ((jnp.max(jnp.abs(field(t, y, args))) < vtol)
                | (diameter2 < stop_diameter * jnp.abs(stop_diameter)))

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field), solver, jnp.zeros((), x0.dtype), t1, dt0, x0, args=flow,
        saveat=diffrax.SaveAt(ts=ts, t1=True),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        event=diffrax.Event(rest), max_steps=max_steps, throw=False)
    # diffrax fills the save slots in order: the requested times reached, then the state
    # where the solve stopped, then inf; from that slot on the state is the final one
    last = jnp.sum(jnp.isfinite(sol.ts)) - 1
    final = normalize(sol.ys[last])
    t_stop = sol.ts[last]
    keep = (jnp.arange(ts.shape[0]) < last)[:, None, None]
    xs = jnp.where(keep, normalize(jnp.where(keep, sol.ys[:-1], 1.0)), final[None])
    return RestTrajectory(ts, xs, final, t_stop,
                          sol.result == diffrax.RESULTS.event_occurred,
                          sol.stats["num_steps"])


# --------------------------------------------------------------------------- clusters


def count_clusters(
    x: Float[Array, "n d"], tol: float = 1e-2
) -> tuple[Int[Array, ""], Int[Array, " n"]]:
    """Number of atoms of the empirical measure and each particle's cluster label.

    Clusters are the connected components of the graph ``|x_i - x_j| < tol``; the
    label of a particle is the smallest index in its component. Jittable and
    vmappable in ``x`` and ``tol`` (``O(n^2)`` memory for the adjacency); piecewise
    constant, so its gradient is zero.
    """
    if not hasattr(x, "shape"):
        x = jnp.asarray(x)
    check_array("x", x, ndim=2, dtype="floating")
    check_scalar("tol", tol, gt=0.0)
    tol = eqx.error_if(jnp.asarray(tol, x.dtype), ~(jnp.asarray(tol) > 0), "tol must be > 0")
    return _count_clusters(x, tol)


@jax.jit
def _count_clusters(x, tol):
    # Module-level jit: a second call compiles nothing (the loop's closures).
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


class MergedClusters(NamedTuple):
    """Output of :func:`merge_clusters`."""

    centers: Float[Array, "k d"]  # unit vectors; slots past n_clusters repeat centers[0]
    weights: Float[Array, " k"]  # cluster masses (their tokens' weights summed); 0 padding
    n_clusters: Int[Array, ""]
    spread: Float[Array, ""]  # largest distance of a token from its cluster's center


def merge_clusters(
    x: Float[Array, "n d"],
    tol: float | Float[Array, ""],
    max_clusters: int,
    weights: Float[Array, " n"] | None = None,
) -> MergedClusters:
    """Replace each cluster of :func:`count_clusters` by one token carrying its mass.

    Tokens that coincide move together for all time (they see the same field), so a
    configuration of collapsed clusters evolves exactly as the ``k``-token flow of the
    cluster centers weighted by their masses (``weights=`` of :func:`solve_to_rest`,
    :func:`solve_merging`). This is the reduction that makes the metastable phase
    cheap: without the intra-cluster contraction, adaptive steps grow with the slow
    merging time instead of staying at the fast rate inside each cluster. It is exact
    when the clusters have collapsed; ``spread`` (the largest distance of a token from
    its center) says how far from that the input was.

    Args:
      x: ``(n, d)`` tokens on the sphere.
      tol: the cluster threshold of :func:`count_clusters` (traced).
      max_clusters: the output size (static); more clusters than this raise, also
        inside ``jit``.
      weights: ``(n,)`` token masses (default ``1/n`` each); a center is the
        normalised weighted mean of its tokens.

    Returns:
      :class:`MergedClusters` ``(centers, weights, n_clusters, spread)``, the clusters
      in the order of their smallest token index, padded to ``max_clusters`` with
      zero-weight copies of the first center (the solvers hold them still; they act
      on nothing).
    """
    if not hasattr(x, "shape"):
        x = jnp.asarray(x)
    check_array("x", x, ndim=2, dtype="floating")
    check_scalar("tol", tol, gt=0.0)
    max_clusters = check_int("max_clusters", max_clusters, min=1)
    weights = _check_weights(weights, x)
    if weights is None:
        weights = jnp.full(x.shape[:1], 1.0 / x.shape[0], x.dtype)
    return _merge_clusters(x, jnp.asarray(tol, x.dtype), max_clusters, weights)


@eqx.filter_jit
def _merge_clusters(x, tol, max_clusters, weights):
    n = x.shape[0]
    k, labels = _count_clusters(x, tol)
    k = eqx.error_if(k, k > max_clusters, "max_clusters is smaller than the number of "
                     "clusters in x")
    sums = jax.ops.segment_sum(weights[:, None] * x, labels, num_segments=n)
    # a cluster of zero weight (padding) keeps its root token as its center
    centers_all = normalize(jnp.where(jnp.linalg.norm(sums, axis=-1, keepdims=True) > 0,
                                      sums, x))
    spread = jnp.max(jnp.linalg.norm(x - centers_all[labels], axis=-1))
    roots = jnp.nonzero(labels == jnp.arange(n), size=max_clusters, fill_value=0)[0]
    filled = jnp.arange(max_clusters) < k
    masses = jax.ops.segment_sum(weights, labels, num_segments=n)[roots]
    return MergedClusters(centers_all[roots], jnp.where(filled, masses, 0.0), k, spread)


class MergeHistory(NamedTuple):
    """Output of :func:`solve_merging`."""

    t_merge: Float[Array, " k"]  # end time of each stage (a merge); inf past the last
    n_clusters: Int[Array, " k"]  # clusters after each stage (0 past the last)
    t_one: Float[Array, ""]  # when the diameter fell below tol (inf: not within t1)
    final: Float[Array, "k d"]  # the clusters' centers where the solve stopped
    weights: Float[Array, " k"]
    n_steps: Int[Array, ""]  # solver steps over all stages


def solve_merging(
    flow: ParticleFlow,
    x0: Float[Array, "k d"],
    t1: float | Float[Array, ""],
    *,
    weights: Float[Array, " k"] | None = None,
    tol: float | Float[Array, ""] = 0.05,
    merge_tol: float | Float[Array, ""] = 1e-3,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    dt0: float = 0.1,
    max_steps: int = 100_000,
) -> MergeHistory:
    """Integrate the reduced flow of point clusters through their merges, to one cluster.

    The cascade that makes exponentially long merging times reachable. Each stage
    integrates the weighted tokens (adaptive Tsit5, ``PIDController(rtol, atol)``)
    until two of them come within ``merge_tol`` (then :func:`merge_clusters` makes
    them one token carrying both masses, and the next stage starts), until the
    diameter of the configuration falls below ``tol`` (one cluster: ``t_one``), or
    until ``t1``. Without the merges, two clusters that have met would contract into
    each other at the fast rate and hold the explicit solver's steps there for the rest
    of the horizon; with them the steps follow the slow dynamics. Merging two tokens
    ``merge_tol`` apart moves the mass by at most ``merge_tol``: the reduction is exact
    up to that (runs at ``merge_tol`` 1e-3 and 1e-4 of
    ``scripts/particles_collapse.py`` agree to 4 digits at beta = 8 and within 0.3% at
    beta = 16). Start it from collapsed clusters
    (:func:`merge_clusters` of a state at rest, whose ``spread`` bounds the error of
    that first reduction). Event times are the ends of the steps where a condition
    first holds: resolved to one step of the final approach, whose steps follow its
    own time scale (about 1 in the experiment's units), not the time elapsed. Two
    programs whose round-off differs (``jit`` against eager, ``vmap`` against a loop)
    may take other steps and give times up to a step apart.

    Args:
      flow: the :class:`ParticleFlow` (traced).
      x0: ``(k, d)`` cluster centers on the sphere (zero-weight padding allowed).
      t1: the horizon (traced).
      weights: ``(k,)`` masses (default ``1/k`` each).
      tol: one cluster is a diameter below this (traced).
      merge_tol: two tokens closer than this merge (traced). Keep it far below
        ``tol`` and well above the solver's noise: two tokens contracting into each
        other sit at the explicit step's stability limit, where their distance
        jitters at about ``rtol`` (1e-5 at the default) and may never fall below a
        smaller threshold.
      rtol, atol, dt0: the step controller's tolerances and first step of each stage.
      max_steps: the step budget of each stage (static); ``k`` stages at most.

    Returns:
      :class:`MergeHistory`. Not for gradients (the merges are discrete events).
    """
    x0, max_steps = _check_adaptive(flow, x0, t1, rtol, atol, dt0, max_steps)
    check_scalar("tol", tol, gt=0.0)
    check_scalar("merge_tol", merge_tol, gt=0.0)
    weights = _check_weights(weights, x0)
    if weights is None:
        weights = jnp.full(x0.shape[:1], 1.0 / x0.shape[0], x0.dtype)
    dt = x0.dtype
    return _solve_merging(flow, x0, weights, jnp.asarray(t1, dt), jnp.asarray(tol, dt),
                          jnp.asarray(merge_tol, dt), rtol, atol, dt0, max_steps)


@eqx.filter_jit
def _solve_merging(flow, x0, w0, t1, tol, merge_tol, rtol, atol, dt0, max_steps):
    k = x0.shape[0]

    def field(t, y, w):
        # zero-weight (padding) tokens are frozen: as test particles they would contract
        # onto the cluster they copy at its fast rate and hold the steps there
        x = normalize(y)
        return jnp.where(w[:, None] > 0, project_tangent(x, _raw_velocity(flow, x, w)), 0.0)

    def dist2(y, w):
        # differences, not |x|^2 + |y|^2 - 2 x.y: no cancellation at merge_tol
        x = normalize(y)
        d2 = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, -1)
        live = (w[:, None] > 0) & (w[None, :] > 0)
        return d2, live

    def one_cluster(y, w):
        d2, live = dist2(y, w)
        return jnp.max(jnp.where(live, d2, 0.0)) < tol * tol

    def meet(y, w):
        d2, live = dist2(y, w)
        pairs = live & ~jnp.eye(k, dtype=bool)
        return jnp.min(jnp.where(pairs, d2, jnp.inf)) < merge_tol * merge_tol

    def stage(state):
        t, x, w, i, t_one, t_merge, counts, steps = state
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), t, t1, dt0, x, args=w,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            # boolean: the stage ends at the end of the first step where it holds (a
            # root finder fails far out in time, where t's round-off exceeds the
            # approach's time scale)
            event=diffrax.Event(lambda t, y, args, **kw: one_cluster(y, args) | meet(y, args)),
            max_steps=max_steps, throw=False)
        t_new, y = sol.ts[-1], sol.ys[-1]
        done = one_cluster(y, w)
        m = _merge_clusters(normalize(y), merge_tol, k, w)
        count = jnp.sum(m.weights > 0)
        return (t_new, m.centers, m.weights, i + 1,
                jnp.where(done, t_new, jnp.inf),
                t_merge.at[i].set(t_new),
                counts.at[i].set(jnp.where(done, 1, count).astype(jnp.int32)),
                steps + sol.stats["num_steps"])

    def go_on(state):
        t, x, w, i, t_one, _, _, _ = state
        return (i < k) & jnp.isinf(t_one) & (t < t1)

    t_one0 = jnp.where(one_cluster(x0, w0), 0.0, jnp.inf).astype(x0.dtype)
    init = (jnp.zeros((), x0.dtype), x0, w0, jnp.int32(0), t_one0,
            jnp.full((k,), jnp.inf, x0.dtype), jnp.zeros((k,), jnp.int32), jnp.int32(0))
    t, x, w, _, t_one, t_merge, counts, steps = jax.lax.while_loop(go_on, stage, init)
    return MergeHistory(t_merge, counts, t_one, x, w, steps)


def merge_time_two_clusters(
    beta: float | Float[Array, ""],
    theta0: float | Float[Array, ""],
    theta1: float | Float[Array, ""],
) -> Float[Array, ""]:
    r"""Time for two collapsed clusters to close from angle ``theta0`` to ``theta1``.

    For the attention-only mean-normalised flow with ``Q^T K = V = I`` in the time
    units of ``speed = exp(-beta)`` (the particles experiment's), two point clusters of
    any masses (summing to 1) at angle ``theta`` obey
    ``dtheta/dt = -exp(-beta (1 - cos theta)) sin theta``, so the time is

    .. math::

        T = \int_{	heta_1}^{	heta_0} rac{e^{eta(1-\cos	heta)}}{\sin	heta}\,d	heta
          = F(	heta_0) - F(	heta_1),\quad
        F(	heta) = 	frac12ig[\mathrm{Ei}(eta(1-\cos	heta))
                    - e^{2eta}\,\mathrm{Ei}(-eta(1+\cos	heta))ig]

    (``Ei`` the exponential integral; ``beta > 0``). Near-antipodal clusters take
    ``~ (1/2) e^{2 beta} ln(1 / (beta (1 + cos theta0)))``: the merging time grows as
    ``e^{2 beta}``. Jittable, vmappable and differentiable in all three arguments.
    """
    check_scalar("beta", beta, gt=0.0)
    dtype = jnp.result_type(beta, theta0, theta1, float)
    beta, theta0, theta1 = (jnp.asarray(v, dtype) for v in (beta, theta0, theta1))

    def f(theta):
        c = jnp.cos(theta)
        return 0.5 * (jax.scipy.special.expi(beta * (1.0 - c))
                      - jnp.exp(2.0 * beta) * jax.scipy.special.expi(-beta * (1.0 + c)))

    return f(theta0) - f(theta1)


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


def _check_adaptive(flow, x0, t1, rtol, atol, dt0, max_steps):
    """The arguments the adaptive solvers share; returns ``x0`` as an array."""
    if not isinstance(x0, jax.Array):
        x0 = jnp.asarray(x0)
    _check_state(flow, x0)
    check_scalar("t1", t1, gt=0.0)
    check_scalar("rtol", rtol, gt=0.0)
    check_scalar("atol", atol, gt=0.0)
    check_scalar("dt0", dt0, gt=0.0)
    return x0, check_int("max_steps", max_steps, min=1)


def _check_weights(weights, x):
    if weights is None:
        return None
    if not isinstance(weights, jax.core.Tracer):
        # NumPy, not jnp: under an enclosing jit a jnp op on a constant is traced
        w = np.asarray(weights)
        check_array("weights", w, shape=x.shape[:1], dtype="number", ge=0.0)
        if not np.sum(w) > 0:
            raise ValueError("weights must have a positive sum")
    else:
        check_array("weights", weights, shape=x.shape[:1], dtype="floating")
    return jnp.asarray(weights, x.dtype)


def _check_state(flow, x):
    if not isinstance(flow, ParticleFlow):
        raise TypeError(f"flow must be a ParticleFlow (see make_flow), got {type(flow).__name__}")
    check_array("x", x, ndim=2, dtype="floating")
    if x.shape[1] != flow.d:
        raise ValueError(f"x must have shape (n, {flow.d}) to match the flow, got {tuple(x.shape)}")
    check_on_sphere("x", x)

