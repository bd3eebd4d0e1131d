r"""Flow matching core: linear probability paths from any source, the CFM loss, samplers.

Shared by the training-free conditional sampler (:mod:`jaxsci.generative.flowsmc`) and the
regime-aware trajectory model (:mod:`jaxsci.dynamics.bioflow`). Everything here is a
pure function of a *velocity function* ``velocity_fn(t, x) -> v`` with ``t`` of shape
``(n,)`` and ``x``, ``v`` of shape ``(n, d)``: a Flax NNX module, an equinox module or
a closed-form field all fit (close over conditioning information).

Probability path (Lipman et al., "Flow Matching for Generative Modeling", ICLR 2023,
with ``sigma_min = 0``; Liu et al., rectified flow; the independent-coupling
I-CFM of Tong et al., TMLR 2024). Time runs from the source (``t = 0``) to the data
(``t = 1``):

* path:            ``x_t = (1 - t) x_0 + t x_1``,  ``x_0 ~ q_0`` (any source), ``x_1 ~ q_1``
* target velocity: ``u_t(x_t | x_0, x_1) = x_1 - x_0``
* CFM loss:        ``L(theta) = E_{t ~ U[0,1], (x_0, x_1)} || v_theta(t, x_t) - (x_1 - x_0) ||^2``
  (averaged over dimensions, as torchcfm does). Its minimiser is the marginal
  velocity ``v(t, x) = E[x_1 - x_0 | x_t = x]``; the loss is zero exactly when the
  coupling makes ``x_1 - x_0`` a function of ``x_t`` (e.g. the OT map between two
  Gaussians), which the tests use.

Deterministic sampler: ``dx/dt = v(t, x)`` from ``x_0 ~ q_0``, solved with diffrax at
a constant step; ``solver`` is a diffrax solver object (``diffrax.Euler()``,
``diffrax.Heun()``, ...), a value like every strategy here; :data:`SOLVERS` maps the
names experiment configs use to solver objects and their velocity calls per step.

Stochastic flow with the same marginals (Song et al. 2021, "probability-flow" duality;
the SMC paper's intermediate-stage flow): for any ``g(t)``,
``dX = [v(t, X) + (g(t)^2 / 2) s(t, X)] dt + g(t) dW`` has the marginals ``p_t`` of the
ODE, with ``s = grad log p_t`` the score. For a Gaussian source
``q_0 = N(mu_0, sigma_0^2 I)`` (independent of ``x_1``) Tweedie's formula on the
linear path gives the score from the velocity alone:
``E[x_0 | x_t = x] = x - t v(t, x)`` and
``s(t, x) = -(x - t v(t, x) - mu_0) / ((1 - t) sigma_0^2)``.
We take ``g(t)^2 = 2 eta (1 - t) sigma_0^2`` (noise strength ``eta >= 0``), which
cancels the ``1 / (1 - t)`` of the score, so the drift
``v - eta (x - t v - mu_0)`` stays bounded up to ``t = 1`` and the noise vanishes at
the data end; ``eta = 0`` is the ODE. Solved by Euler-Maruyama in diffrax.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "VelocityFn",
    "SOLVERS",
    "EULER",
    "solver_from_name",
    "interpolate",
    "target_velocity",
    "cfm_loss",
    "sample_time",
    "nfe",
    "sample_ode",
    "score_from_velocity",
    "sample_sde",
]

VelocityFn = Callable[[Float[Array, " n"], Float[Array, "n d"]], Float[Array, "n d"]]

# name -> (solver class, velocity evaluations per step); for experiment configs and nfe.
SOLVERS = {
    "euler": (diffrax.Euler, 1),
    "midpoint": (diffrax.Midpoint, 2),
    "heun": (diffrax.Heun, 2),
    "tsit5": (diffrax.Tsit5, 6),
}


EULER = diffrax.Euler()  # the default solver (a value; module-level so defaults share it)


def solver_from_name(name: str) -> diffrax.AbstractSolver:
    """The diffrax solver object for a config's solver name (``euler`` ... ``tsit5``)."""
    check_choice("solver", name, tuple(SOLVERS))
    return SOLVERS[name][0]()


def _check_solver(solver: object) -> diffrax.AbstractSolver:
    if isinstance(solver, str):
        raise TypeError(
            f"solver must be a diffrax solver object (e.g. diffrax.Heun()), got the string "
            f"{solver!r}; configs map names with flow_matching.solver_from_name")
    if not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver object (e.g. diffrax.Euler()), got "
                        f"{type(solver).__name__}")
    return solver


def _check_pair(x0, x1):
    check_array("x0", x0, ndim=2, dtype="floating")
    check_array("x1", x1, shape=tuple(x0.shape), dtype="floating")


def interpolate(
    x0: Float[Array, "n d"], x1: Float[Array, "n d"], t: Float[Array, " n"]
) -> Float[Array, "n d"]:
    """The linear path ``x_t = (1 - t) x_0 + t x_1`` (one ``t`` per row)."""
    t = jnp.asarray(t)[:, None]
    return (1.0 - t) * x0 + t * x1


def target_velocity(x0: Float[Array, "n d"], x1: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The conditional velocity ``x_1 - x_0`` of the linear path."""
    return x1 - x0


def cfm_loss(
    velocity_fn: VelocityFn,
    x0: Float[Array, "n d"],
    x1: Float[Array, "n d"],
    t: Float[Array, " n"],
) -> Float[Array, ""]:
    """Conditional flow-matching loss on paired source/data samples at times ``t``.

    ``mean_i mean_j (v(t_i, x_{t_i})_j - (x_1 - x_0)_{ij})^2``; pair ``x0`` with
    ``x1`` however the coupling says (independent draws: I-CFM).

    Args:
      velocity_fn: ``v(t, x)``; pass an equinox module (or a closure over arrays) to
        differentiate with respect to its parameters.
      x0, x1: paired source and data samples ``(n, d)``.
      t: one time per pair ``(n,)``.

    Returns:
      the scalar loss; differentiable with respect to the velocity's parameters,
      ``x0``, ``x1`` and ``t``.
    """
    _check_pair(x0, x1)
    check_array("t", t, shape=(x0.shape[0],), dtype="floating")
    xt = interpolate(x0, x1, t)
    v = velocity_fn(t, xt)
    return jnp.mean((v - target_velocity(x0, x1)) ** 2)


def sample_time(key: jax.Array, n: int) -> Float[Array, " n"]:
    """``n`` times uniform on ``[0, 1)`` (the CFM loss's time distribution)."""
    check_key("key", key)
    check_int("n", n, min=1)
    return jax.random.uniform(key, (n,))


def nfe(solver: diffrax.AbstractSolver, steps: int) -> int:
    """Velocity evaluations a fixed-step ``solver`` (one of :data:`SOLVERS`) spends on
    ``steps`` steps.

    Args:
      solver: a diffrax solver object of a class in :data:`SOLVERS`.
      steps: the number of constant steps.

    Returns:
      the number of velocity-function calls, an ``int``.
    """
    _check_solver(solver)
    per = {cls: k for cls, k in SOLVERS.values()}
    if type(solver) not in per:
        raise ValueError(f"solver: evaluations per step are known for "
                         f"{sorted(c.__name__ for c in per)}, got {type(solver).__name__}")
    return per[type(solver)] * check_int("steps", steps, min=1)


def _batched(velocity_fn: VelocityFn, shape: tuple[int, ...]):
    n = shape[0]

    def field(t, y, args):
        x = y.reshape(shape)
        return velocity_fn(jnp.full((n,), t, dtype=x.dtype), x).reshape(-1)

    return field


def sample_ode(
    velocity_fn: VelocityFn,
    x0: Float[Array, "n d"],
    *,
    t0: float | Float[Array, ""] = 0.0,
    t1: float | Float[Array, ""] = 1.0,
    steps: int = 50,
    solver: diffrax.AbstractSolver = EULER,
    save_ts: Float[Array, " k"] | None = None,
) -> Float[Array, "n d"] | Float[Array, "k n d"]:
    """Integrate ``dx/dt = v(t, x)`` from ``t0`` to ``t1`` at a constant step.

    Args:
      velocity_fn: ``v(t, x)``; an equinox module's array leaves are differentiable.
      x0: the state at ``t0``, ``(n, d)``.
      t0, t1: start and end times; traced (vmappable, e.g. SMC stages).
      steps: constant steps (static).
      solver: a diffrax solver object (default ``diffrax.Euler()``).
      save_ts: times to save at, or None for ``t1`` only.

    Returns:
      the state at ``t1`` ``(n, d)``, or at each of ``save_ts`` ``(k, n, d)``.
      Differentiable in reverse mode with respect to ``x0``, ``t0``, ``t1`` and the
      velocity's parameters (diffrax's ``RecursiveCheckpointAdjoint``).
    """
    check_array("x0", x0, ndim=2, dtype="floating")
    steps = check_int("steps", steps, min=1)
    solver = _check_solver(solver)
    check_scalar("t0", t0)
    check_scalar("t1", t1)
    return _sample_ode(velocity_fn, x0, t0, t1, steps, solver, save_ts)


@eqx.filter_jit
def _sample_ode(velocity_fn, x0, t0, t1, steps, solver, save_ts):
    # One module-level jit: calls with the same velocity (the same function, or a module
    # of the same structure) and same-shaped inputs reuse the compiled solve; the vector
    # field's closure is new at every trace.
    shape = x0.shape
    saveat = diffrax.SaveAt(t1=True) if save_ts is None else diffrax.SaveAt(ts=save_ts)
    t0 = jnp.asarray(t0, x0.dtype)
    t1 = jnp.asarray(t1, x0.dtype)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_batched(velocity_fn, shape)),
        solver,
        t0,
        t1,
        (t1 - t0) / steps,
        x0.reshape(-1),
        saveat=saveat,
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=steps + 2,  # rounding of t0 + k dt may add one tiny step
    )
    if save_ts is None:
        return sol.ys[0].reshape(shape)
    return sol.ys.reshape((-1, *shape))


def score_from_velocity(
    v: Float[Array, "n d"],
    x: Float[Array, "n d"],
    t: Float[Array, " n"],
    source_mean: Float[Array, "n d"] | float = 0.0,
    source_std: Float[Array, "n d"] | float = 1.0,
) -> Float[Array, "n d"]:
    """Score of ``p_t`` from the velocity, for a Gaussian source (Tweedie; ``t < 1``).

    ``s(t, x) = -(x - t v - mu_0) / ((1 - t) sigma_0^2)``.
    """
    t = jnp.asarray(t)[:, None]
    return -(x - t * v - source_mean) / ((1.0 - t) * jnp.asarray(source_std) ** 2)


class _GridBrownian(diffrax.AbstractPath):
    """Brownian increments on a fixed time grid, keyed by the step's index.

    ``diffrax.UnsafeBrownianPath`` keys each increment by the float value of the
    step's start time, which differs by an ulp between a jitted and an eager run (or
    between compilations) and then draws entirely different noise. Keying by
    ``round((t - t0) / dt)`` makes the path a function of ``key`` alone.
    """

    t0: Array
    t1: Array
    dt: Array
    key: jax.Array
    shape: tuple[int, ...] = eqx.field(static=True)

    def evaluate(self, t0, t1=None, left=True):
        if t1 is None:
            raise ValueError("_GridBrownian only provides increments evaluate(t0, t1)")
        i = jnp.round((t0 - self.t0) / self.dt).astype(jnp.int32)
        z = jax.random.normal(jax.random.fold_in(self.key, i), self.shape, self.dt.dtype)
        return jnp.sqrt(jnp.maximum(t1 - t0, 0.0)) * z


def sample_sde(
    velocity_fn: VelocityFn,
    x0: Float[Array, "n d"],
    key: jax.Array,
    *,
    noise: float | Float[Array, ""],
    t0: float | Float[Array, ""] = 0.0,
    t1: float | Float[Array, ""] = 1.0,
    steps: int = 50,
    source_mean: Float[Array, "n d"] | float = 0.0,
    source_std: Float[Array, "n d"] | float = 1.0,
) -> Float[Array, "n d"]:
    """The stochastic flow with the ODE's marginals, Euler-Maruyama from ``t0`` to ``t1``.

    ``dX = [v - eta (X - t v - mu_0)] dt + sigma_0 sqrt(2 eta (1 - t)) dW``
    (module docstring). ``noise = eta = 0`` reduces to Euler on the ODE. ``x0`` is
    the state at ``t0`` (not necessarily a source sample).

    Args:
      velocity_fn: ``v(t, x)``.
      x0: the state at ``t0``, ``(n, d)``.
      key: the Brownian path's key (same key, same path).
      noise: ``eta >= 0``; traced (vmappable).
      t0, t1: start and end times; traced.
      steps: Euler-Maruyama steps (static).
      source_mean, source_std: the Gaussian source's parameters.

    Returns:
      the state at ``t1``, ``(n, d)``.
    """
    check_array("x0", x0, ndim=2, dtype="floating")
    check_key("key", key)
    steps = check_int("steps", steps, min=1)
    check_scalar("noise", noise, ge=0.0)
    check_scalar("t0", t0)
    check_scalar("t1", t1)
    return _sample_sde(velocity_fn, x0, key, noise, t0, t1, steps, source_mean, source_std)


@eqx.filter_jit
def _sample_sde(velocity_fn, x0, key, noise, t0, t1, steps, source_mean, source_std):
    # One module-level jit, as _sample_ode.
    shape, n = x0.shape, x0.shape[0]
    mu0 = jnp.broadcast_to(jnp.asarray(source_mean, x0.dtype), shape)
    s0 = jnp.broadcast_to(jnp.asarray(source_std, x0.dtype), shape)
    eta = jnp.asarray(noise, x0.dtype)

    def drift(t, y, args):
        x = y.reshape(shape)
        tt = jnp.full((n,), t, dtype=x.dtype)
        v = velocity_fn(tt, x)
        return (v - eta * (x - t * v - mu0)).reshape(-1)

    def diffusion(t, y, args):
        g = s0 * jnp.sqrt(2.0 * eta * jnp.clip(1.0 - t, 0.0))
        return lx.DiagonalLinearOperator(g.reshape(-1))

    t0 = jnp.asarray(t0, x0.dtype)
    t1 = jnp.asarray(t1, x0.dtype)
    dt = (t1 - t0) / steps
    bm = _GridBrownian(t0, t1, dt, key, (x0.size,))
    terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(diffusion, bm))
    sol = diffrax.diffeqsolve(
        terms,
        diffrax.Euler(),
        t0,
        t1,
        dt,
        x0.reshape(-1),
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=steps + 2,
        # The Brownian path is drawn on the fly: forward-only (no reverse-mode adjoint).
        adjoint=diffrax.DirectAdjoint(),
    )
    return sol.ys[0].reshape(shape)
