r"""Learning Lagrangian-relaxation multipliers from a distribution of MILPs.

Paper: the ICML 2026 paper on learning Lagrangian-relaxation multipliers (only its
abstract was available). A MILP

    ``OPT(P) = min_x c^T x  s.t.  A x >= b  (s coupling rows),  x in X``

with ``X = {x : C x >= d, x binary/continuous}`` the *easy* constraints. Relaxing the
coupling rows with multipliers ``pi >= 0`` gives the Lagrangian dual

    ``u(pi, P) = min_{x in X} c^T x + pi^T (b - A x)  <=  OPT(P)``     (weak duality),

a concave, piecewise-linear function of ``pi`` whose supergradient at ``pi`` is
``b - A x*(pi)`` for any minimiser ``x*(pi)``. Given instances ``P ~ D`` the paper learns
one vector ``pi`` maximising ``F(pi) = E_D u(pi, P)``: a generalisation bound
``O(s^1.5 / sqrt N)``, a minimax lower bound ``Omega(s / sqrt N)``, averaged projected
stochastic supergradient ascent attaining ``Theta(s / sqrt N)``; and learning a *warm
start* for the per-instance subgradient method at the fast rate ``Theta(s / N)``.

The closed-form family (jitted, vmapped)
----------------------------------------
:class:`BoxMILP`: ``X = [0, 1]^n`` (``binary=False``) or ``X = {0, 1}^n``
(``binary=True``), the standard separable family (the easy constraints are the bounds,
so the subproblem splits into ``n`` one-variable problems). With reduced costs
``r = c - A^T pi``,

    ``u(pi, P) = pi^T b + sum_j min(r_j, 0)``,   ``x*_j(pi) = 1[r_j < 0]``,

the same for both choices of ``X`` (a linear function over the box is minimised at a
vertex), so ``max_pi u(pi, P)`` equals the LP relaxation's value (LP duality; Geoffrion's
integrality property). A family whose Lagrangian bound beats the LP bound needs easy
constraints without the integrality property (knapsacks): the general path below.

* :func:`dual`, :func:`subproblem`, :func:`supergradient`, :func:`dual_and_supergradient`
  broadcast over leading batch axes of ``pi`` and of the instance; the subproblem's ties
  (``r_j = 0``) go to ``x_j = 0``.
* :func:`supergradient_bound` is ``G >= ||b - A x||`` for every ``x`` in the box (the
  Lipschitz constant of ``u``); :func:`project` is the Euclidean projection on
  ``{pi >= 0, ||pi|| <= R}`` (clip, then scale: exact for a ball centred at 0).

Distributions are values (:class:`AbstractDistribution`); :class:`Scenarios` is a finite
support of instances with probabilities (:func:`random_scenarios` builds feasible
covering instances), with the exact ``F`` (:meth:`Scenarios.expected_dual`). A finite
support makes ``F`` piecewise linear with a sharp maximum, the regime of the paper's
``1 / sqrt N`` rate; a smooth ``F`` (continuous distributions) lets averaged SGA converge
faster (``docs/lagrangian.md``).

Learners
--------
* **Averaged projected SGA** (:func:`sga_init`, :func:`sga_step`, driver
  :func:`learn_sga`): ``pi_{t+1} = Proj_R(pi_t + eta g_t)``, ``g_t = b_t - A_t x*(pi_t)``
  on one fresh instance ``P_t ~ D`` per step, ``eta = R / (G sqrt N)``, output the
  average of ``pi_0, ..., pi_{N-1}``. For ``||pi*|| <= R`` the textbook bound
  ``F(pi*) - E F(pi_bar) <= (||pi_0 - pi*||^2 + eta^2 G^2 N) / (2 eta N) <= R G / sqrt N``
  (:func:`sga_bound`, ``pi_0 = 0``) holds; ``R G`` grows linearly in ``s`` when each
  row contributes a bounded amount, the paper's ``s / sqrt N``.
* **Per-instance subgradient method** (:func:`subgradient_init`,
  :func:`subgradient_step`, driver :func:`subgradient`), the reference: ``pi_{t+1} =
  max(pi_t + eta_t g_t, 0)`` with ``eta_t = a / (||g_t|| sqrt(t + 1))`` and the best value
  kept. The classical bound after ``T`` steps is ``O(G (D^2 / a + a log T) / sqrt T)``
  with ``D = ||pi_0 - pi*(P)||``: a start closer to ``pi*(P)`` (and a step ``a ~ D``)
  reaches a given gap in fewer iterations (:func:`iterations_to_gap`).
* **Warm start** (:func:`fit_warm_start`, :class:`WarmStart`): the subgradient method's
  bound depends on the start through ``||pi_0 - pi*(P)||^2``, so the warm-start risk is
  ``W(pi_0) = E ||pi_0 - pi*(P)||^2`` (:func:`warm_start_risk`), a strongly convex
  loss: its minimiser is ``E pi*(P)``, the empirical mean of ``N`` per-instance optima
  has excess ``||pi_hat - E pi*||^2 = tr Cov / N`` in expectation, the paper's fast
  ``s / N`` rate. ``fit_warm_start`` fits the constant (or, with features, a
  ridge-regularised affine map ``phi -> W phi + w``) by weighted least squares; the
  targets ``pi*(P_i)`` come from :func:`lp_relaxation` (exact) or a long
  :func:`subgradient` run (jitted).

General small MILPs (host-side, not jitted)
-------------------------------------------
:class:`MILP` holds ``c, A, b, C, d``, bounds and integrality as NumPy arrays;
:func:`milp_dual` solves the Lagrangian subproblem with ``scipy.optimize.milp``
(HiGHS), :func:`lp_relaxation` the LP relaxation with ``scipy.optimize.linprog``
(HiGHS; its coupling-row duals are the LP's optimal multipliers), :func:`solve_milp`
the MILP itself; :func:`to_milp` converts a :class:`BoxMILP`. These call a C++ solver
from Python, one instance at a time: references and tests, not jitted.
:func:`best_constant_multiplier` is ``argmax F`` of a :class:`Scenarios` distribution
as one LP (the dual of ``min sum_k w_k c_k^T x_k`` s.t. ``sum_k w_k A_k x_k >= sum_k w_k
b_k``, ``x_k`` in the box).

Transformations: everything jitted is ``vmap``-able over the instances, the keys, the
sample size ``n_samples`` (below a static ``max_samples``), the radius and the step
sizes; the number of coupling rows ``s`` is swept by zero rows (``random_scenarios(...,
active=s)``: a zero row leaves ``u`` unchanged and its multiplier at 0). ``u`` is
differentiable almost everywhere in ``pi``, ``c``, ``A`` and ``b`` (piecewise linear;
``jax.grad`` of :func:`dual` returns the supergradient ``b - A x*``); the learners'
outputs are piecewise constant in the sampled indices and not meant for reverse mode.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.stats import lagrangian as lr
>>> dist = lr.random_scenarios(jax.random.key(0), n_scenarios=4, n_vars=6, n_coupling=2)
>>> res = lr.learn_sga(dist, jax.random.key(1), 256, radius=4.0)
>>> res.multipliers.shape
(2,)
>>> bool(dist.expected_dual(res.multipliers) > dist.expected_dual(jnp.zeros(2)))
True
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxsci.core.status import RESULTS, raise_if_failed
from jaxsci.core.validation import as_array, check_array, check_int, check_key, check_scalar

__all__ = [
    "BoxMILP",
    "AbstractDistribution",
    "Scenarios",
    "random_scenarios",
    "dual",
    "subproblem",
    "supergradient",
    "dual_and_supergradient",
    "supergradient_bound",
    "project",
    "SGAState",
    "SGAInfo",
    "SGAResult",
    "sga_init",
    "sga_step",
    "learn_sga",
    "sga_bound",
    "SubgradientState",
    "SubgradientInfo",
    "SubgradientResult",
    "subgradient_step_size",
    "subgradient_init",
    "subgradient_step",
    "subgradient",
    "iterations_to_gap",
    "WarmStart",
    "fit_warm_start",
    "warm_start_risk",
    "MILP",
    "DualResult",
    "LPResult",
    "to_milp",
    "milp_dual",
    "lp_relaxation",
    "solve_milp",
    "best_constant_multiplier",
]

_FEAS_TOL = 1e-5  # relative slack allowed in the row-feasibility check (float32 sums)


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _concrete(*xs: Any) -> bool:
    return not any(_is_tracer(x) for x in jax.tree_util.tree_leaves(xs))


def _f(name: str, x: Any) -> Any:
    """A float array: Python numbers and sequences take JAX's default dtype (no float64
    warning for a literal), everything else goes through :func:`as_array`."""
    if isinstance(x, float | int | tuple | list) and not isinstance(x, bool):
        try:
            return jnp.asarray(x, jnp.zeros(()).dtype)
        except (TypeError, ValueError):
            pass
    return as_array(name, x)


# --------------------------------------------------------------------------- instances


def _row_range(A, b):
    """``(lo, hi)`` of ``a_i x`` over the box ``[0, 1]^n``, per row."""
    return jnp.sum(jnp.minimum(A, 0.0), -1), jnp.sum(jnp.maximum(A, 0.0), -1)


class BoxMILP(eqx.Module):
    """``min c^T x`` s.t. ``A x >= b``, ``x in [0, 1]^n`` (or ``{0, 1}^n``), possibly batched.

    Attributes:
      c: costs, shape ``(..., n)``.
      A: coupling matrix, shape ``(..., s, n)`` (the rows that are relaxed).
      b: right-hand sides, shape ``(..., s)``.
      binary: ``x`` binary (static). The Lagrangian dual is the same either way; only
        :func:`solve_milp`'s ``OPT`` depends on it.

    Leading axes are a batch of instances (``vmap`` over them, or index them). On
    construction, shapes are checked, and, when concrete, the values are finite and
    each row can hold somewhere in the box (``sum_j max(A_ij, 0) >= b_i``: necessary for
    feasibility; :func:`lp_relaxation` decides feasibility exactly). An infeasible
    instance has an unbounded dual, so the check is also made inside ``jit`` by the
    learners (``equinox.error_if``).
    """

    c: Float[Array, "*batch n"] = eqx.field(converter=lambda x: _f("c", x))
    A: Float[Array, "*batch s n"] = eqx.field(converter=lambda x: _f("A", x))
    b: Float[Array, "*batch s"] = eqx.field(converter=lambda x: _f("b", x))
    binary: bool = eqx.field(default=True, static=True)

    def __check_init__(self):
        c, A, b = self.c, self.A, self.b
        if c.ndim < 1:
            raise ValueError(f"c must have at least 1 dimension (n,), got shape {c.shape}")
        if A.ndim != c.ndim + 1:
            raise ValueError(f"A must have shape (..., s, n) with c of shape (..., n): "
                             f"got A {A.shape}, c {c.shape}")
        if A.shape[-1] != c.shape[-1] or A.shape[:-2] != c.shape[:-1]:
            raise ValueError(f"A must have shape {c.shape[:-1] + ('s', c.shape[-1])} to match "
                             f"c of shape {c.shape}, got {A.shape}")
        if b.shape != A.shape[:-1]:
            raise ValueError(f"b must have shape {A.shape[:-1]} (one entry per coupling row "
                             f"of A {A.shape}), got {b.shape}")
        if not isinstance(self.binary, bool):
            raise TypeError(f"binary must be a bool, got {type(self.binary).__name__}")
        if not _concrete(c, A, b):
            return
        for name, x in (("c", c), ("A", A), ("b", b)):
            check_array(name, x)
        _raise_if_row_infeasible(np.asarray(A), np.asarray(b))

    @property
    def n_vars(self) -> int:
        return self.c.shape[-1]

    @property
    def n_coupling(self) -> int:
        return self.A.shape[-2]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.c.shape[:-1])

    def __getitem__(self, index) -> BoxMILP:
        """Instance(s) ``index`` of a batch (along the leading axes)."""
        return BoxMILP(self.c[index], self.A[index], self.b[index], self.binary)


_INFEASIBLE = ("infeasible instance: a coupling row of A x >= b cannot hold for any x in "
               "[0, 1]^n (sum_j max(A_ij, 0) < b_i)")


def _rows_infeasible(inst: BoxMILP) -> Bool[Array, ""]:
    _, hi = _row_range(inst.A, inst.b)
    return jnp.any(inst.b > hi + _FEAS_TOL * (1.0 + jnp.abs(hi)))


def _raise_if_row_infeasible(A: np.ndarray, b: np.ndarray) -> None:
    hi = np.maximum(A, 0.0).sum(-1)
    bad = b > hi + _FEAS_TOL * (1.0 + np.abs(hi))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"infeasible instance: coupling row {idx[-1]} of A x >= b cannot hold for any x "
            f"in [0, 1]^n (instance index {idx[:-1]}: max_x a_i x = {hi[idx]:.4g} < b_i = "
            f"{b[idx]:.4g}); {int(bad.sum())} such row(s)")


def _check_pi(pi: Any, inst: BoxMILP, name: str = "pi") -> Array:
    if not isinstance(inst, BoxMILP):
        raise TypeError(f"instance must be a BoxMILP, got {type(inst).__name__}")
    pi = _f(name, pi)
    if pi.ndim < 1 or pi.shape[-1] != inst.n_coupling:
        raise ValueError(f"{name} must have shape (..., {inst.n_coupling}) (one multiplier per "
                         f"coupling row), got {tuple(pi.shape)}")
    if _concrete(pi):
        check_array(name, pi, ge=0.0)
    return pi


def _reduced(pi, inst):
    return inst.c - jnp.einsum("...sn,...s->...n", inst.A, pi)


def _dual(pi, inst):
    r = _reduced(pi, inst)
    return jnp.sum(pi * inst.b, -1) + jnp.sum(jnp.minimum(r, 0.0), -1)


def _x_star(pi, inst):
    return (_reduced(pi, inst) < 0).astype(inst.c.dtype)


def _value_and_g(pi, inst):
    r = _reduced(pi, inst)
    x = (r < 0).astype(r.dtype)
    value = jnp.sum(pi * inst.b, -1) + jnp.sum(jnp.minimum(r, 0.0), -1)
    return value, inst.b - jnp.einsum("...sn,...n->...s", inst.A, x)


def dual(pi: Float[ArrayLike, "*batch s"], instance: BoxMILP) -> Float[Array, "*batch"]:
    """The Lagrangian dual ``u(pi, P) = pi^T b + sum_j min(c_j - a_j^T pi, 0)``.

    Args:
      pi: multipliers ``>= 0``, shape ``(..., s)`` (broadcast against the instance's batch).
      instance: a :class:`BoxMILP` (possibly batched).

    Returns:
      ``u(pi, P)``, a lower bound on ``OPT(P)`` for every ``pi >= 0``. Jittable,
      differentiable almost everywhere (``jax.grad`` in ``pi`` is the supergradient).
    """
    return _dual(_check_pi(pi, instance), instance)


def subproblem(pi: Float[ArrayLike, "*batch s"], instance: BoxMILP) -> Float[Array, "*batch n"]:
    """The subproblem's minimiser ``x*_j(pi) = 1[c_j - a_j^T pi < 0]`` (ties to 0)."""
    return _x_star(_check_pi(pi, instance), instance)


def supergradient(pi: Float[ArrayLike, "*batch s"], instance: BoxMILP
                  ) -> Float[Array, "*batch s"]:
    """A supergradient ``b - A x*(pi)`` of ``u(., P)`` at ``pi``: for every ``pi'``,
    ``u(pi', P) <= u(pi, P) + g^T (pi' - pi)``."""
    return _value_and_g(_check_pi(pi, instance), instance)[1]


def dual_and_supergradient(pi: Float[ArrayLike, "*batch s"], instance: BoxMILP
                           ) -> tuple[Float[Array, "*batch"], Float[Array, "*batch s"]]:
    """``(u(pi, P), b - A x*(pi))`` with one evaluation of the reduced costs."""
    return _value_and_g(_check_pi(pi, instance), instance)


def supergradient_bound(instance: BoxMILP) -> Float[Array, ""]:
    """``G = max ||b - A x||`` over ``x in [0, 1]^n`` and the batch (per-row extremes).

    The Lipschitz constant of ``u(., P)`` and the ``G`` of the step ``R / (G sqrt N)``.
    """
    if not isinstance(instance, BoxMILP):
        raise TypeError(f"instance must be a BoxMILP, got {type(instance).__name__}")
    return _grad_bound(instance)


def _grad_bound(inst):
    lo, hi = _row_range(inst.A, inst.b)
    per_row = jnp.maximum(jnp.abs(inst.b - lo), jnp.abs(inst.b - hi))
    return jnp.max(jnp.sqrt(jnp.sum(per_row**2, -1)))


def project(pi: Float[ArrayLike, "*batch s"], radius: float | Float[Array, ""]
            ) -> Float[Array, "*batch s"]:
    """Euclidean projection on ``{pi >= 0, ||pi||_2 <= radius}`` (clip, then scale)."""
    pi = _f("pi", pi)
    if _concrete(radius):
        check_scalar("radius", radius, gt=0.0)
    return _project(pi, _f("radius", radius))


def _project(pi, radius):
    pi = jnp.maximum(pi, 0.0)
    norm = jnp.sqrt(jnp.sum(pi**2, -1, keepdims=True))
    return pi * jnp.minimum(1.0, radius / jnp.maximum(norm, 1e-30))


# --------------------------------------------------------------------------- distributions


class AbstractDistribution(eqx.Module):
    """A distribution of :class:`BoxMILP` instances with ``s`` coupling rows.

    ``sample(key)`` draws one instance (jittable); ``grad_bound()`` bounds the
    supergradient norm over its support; ``invalid()`` flags an infeasible support inside
    ``jit``. A new family subclasses this.
    """

    @abc.abstractmethod
    def sample(self, key: jax.Array) -> BoxMILP:
        """One instance."""

    @abc.abstractmethod
    def grad_bound(self) -> Float[Array, ""]:
        """``G >= ||b - A x||`` for every instance of the support and ``x`` in the box."""

    @abc.abstractmethod
    def invalid(self) -> Bool[Array, ""]:
        """A traced flag: some instance of the support is infeasible (or the
        distribution's own parameters are invalid); the learners raise on it in ``jit``."""

    @property
    @abc.abstractmethod
    def n_coupling(self) -> int:
        """``s``."""


class Scenarios(AbstractDistribution):
    """A finite support: instance ``k`` (a batch ``instances`` of ``K``) with probability
    ``weights[k] / sum(weights)``.

    The exact expected dual ``F(pi) = sum_k w_k u(pi, P_k)`` is
    :meth:`expected_dual` (no held-out sample needed), and ``argmax F`` is one LP
    (:func:`best_constant_multiplier`).
    """

    instances: BoxMILP
    weights: Float[Array, " k"] = eqx.field(converter=lambda x: _f("weights", x))

    def __check_init__(self):
        if not isinstance(self.instances, BoxMILP):
            raise TypeError(f"instances must be a BoxMILP batch, got "
                            f"{type(self.instances).__name__}")
        if len(self.instances.batch_shape) != 1:
            raise ValueError(f"instances must be a 1-D batch (K instances), got batch shape "
                             f"{self.instances.batch_shape}")
        k = self.instances.batch_shape[0]
        check_array("weights", self.weights, shape=(k,), finite=_concrete(self.weights))
        if _concrete(self.weights):
            check_array("weights", self.weights, ge=0.0)
            if not float(np.sum(np.asarray(self.weights))) > 0:
                raise ValueError("weights must have a positive sum, got all zeros")

    @property
    def n_coupling(self) -> int:
        return self.instances.n_coupling

    @property
    def probabilities(self) -> Float[Array, " k"]:
        return self.weights / jnp.sum(self.weights)

    def sample(self, key):
        # Inverse-CDF sampling with one scalar uniform (cheaper to compile than a
        # Gumbel draw per scenario); a zero weight is never drawn.
        cdf = jnp.cumsum(self.weights)
        u = jax.random.uniform(key, dtype=cdf.dtype) * cdf[-1]
        k = jnp.minimum(jnp.sum(cdf <= u), cdf.shape[0] - 1)
        return self.instances[k]

    def grad_bound(self):
        return _grad_bound(self.instances)

    def invalid(self):
        bad_w = ~(jnp.all(self.weights >= 0) & (jnp.sum(self.weights) > 0))
        return _rows_infeasible(self.instances) | bad_w

    def expected_dual(self, pi: Float[ArrayLike, "*batch s"]) -> Float[Array, "*batch"]:
        """``F(pi) = E u(pi, P)``, exact; ``pi`` may carry leading batch axes."""
        pi = _check_pi(pi, self.instances[0])
        vals = jax.vmap(lambda inst: _dual(pi, inst), out_axes=-1)(self.instances)
        return vals @ self.probabilities

    def expected_supergradient(self, pi: Float[ArrayLike, " s"]) -> Float[Array, " s"]:
        """A supergradient of ``F`` at ``pi``: ``sum_k w_k (b_k - A_k x*_k(pi))``."""
        pi = _check_pi(pi, self.instances[0])
        _, g = _value_and_g(pi, self.instances)
        return self.probabilities @ g


def random_scenarios(
    key: jax.Array,
    n_scenarios: int,
    n_vars: int,
    n_coupling: int,
    *,
    active: int | Int[Array, ""] | None = None,
    spread: float | Float[Array, ""] = 0.5,
    demand: tuple[float, float] | Float[Array, " 2"] = (0.3, 0.7),
    separable: bool = False,
    binary: bool = True,
) -> Scenarios:
    """Random covering instances around a common base, equally likely.

    A base ``c0 ~ U[0.5, 1.5]^n``, ``A0 ~ U[0, 1]^{s x n}``; scenario ``k`` scales them,
    ``c_k = c0 * U[1 - spread, 1 + spread]``, ``A_k = A0 * U[1 - spread, 1 + spread]``
    (entrywise), and asks each row for a fraction ``rho ~ U[demand]`` of its full
    coverage, ``b_k = rho * A_k 1``; ``x = 1`` is feasible, so every instance is.

    Args:
      key: a ``jax.random`` key.
      n_scenarios, n_vars, n_coupling: ``K``, ``n``, ``s`` (static shapes).
      active: rows ``i >= active`` are zero (``0 >= 0``): traced, so ``vmap`` over it
        sweeps ``s`` inside one compiled program with shared random numbers.
      spread: relative size of the scenarios' perturbations, in ``[0, 1)`` (traced).
      demand: ``(lo, hi)`` with ``0 <= lo <= hi <= 1`` (traced).
      separable: block structure (static): row ``i`` covers only the variables ``j`` with
        ``j mod s = i`` (``A0`` zero elsewhere), so ``F`` is a sum of ``s`` one-dimensional
        piecewise-linear problems, each a weighted quantile of cost/coverage ratios: the
        product structure of the paper's minimax lower bound (``Omega(s / sqrt N)``).
      binary: the instances' ``binary`` flag.

    Returns:
      :class:`Scenarios` with uniform weights.
    """
    check_key("key", key)
    k = check_int("n_scenarios", n_scenarios, min=1)
    n = check_int("n_vars", n_vars, min=1)
    s = check_int("n_coupling", n_coupling, min=1)
    if active is not None and _concrete(active):
        a = np.asarray(active)
        if a.ndim or not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"active must be an integer scalar, got {active!r}")
        check_int("active", int(a), min=0, max=s)
    if _concrete(spread):
        check_scalar("spread", spread, ge=0.0, lt=1.0)
    demand = _f("demand", demand)
    check_array("demand", demand, shape=(2,), finite=_concrete(demand))
    if _concrete(demand):
        lo, hi = (float(v) for v in np.asarray(demand))
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"demand must satisfy 0 <= lo <= hi <= 1, got ({lo}, {hi})")
    if not isinstance(separable, bool):
        raise TypeError(f"separable must be a bool, got {type(separable).__name__}")
    if separable and n < s:
        raise ValueError(f"n_vars must be >= n_coupling for separable=True (every row needs a "
                         f"variable), got n_vars={n}, n_coupling={s}")
    return _random_scenarios(key, k, n, s, active, _f("spread", spread), demand, separable,
                             binary)


@eqx.filter_jit
def _random_scenarios(key, k, n, s, active, spread, demand, separable, binary):
    # One flat uniform draw, sliced: XLA compiles a 1-D threefry draw much faster than
    # several multi-dimensional ones (seconds on CPU), and the values are the same kind.
    sizes = (n, s * n, k * n, k * s * n, k * s)
    u = jax.random.uniform(key, (sum(sizes),))
    parts = jnp.split(u, np.cumsum(sizes)[:-1])
    c0 = 0.5 + parts[0]
    a0 = (0.5 + parts[1]).reshape(s, n)
    if separable:
        a0 = a0 * (jnp.arange(n)[None, :] % s == jnp.arange(s)[:, None])
    c = c0 * (1.0 + spread * (2.0 * parts[2].reshape(k, n) - 1.0))
    A = a0 * (1.0 + spread * (2.0 * parts[3].reshape(k, s, n) - 1.0))
    rho = demand[0] + (demand[1] - demand[0]) * parts[4].reshape(k, s)
    if active is not None:
        on = (jnp.arange(s) < active).astype(A.dtype)
        A = A * on[:, None]
        rho = rho * on
    b = rho * jnp.sum(A, -1)
    return Scenarios(BoxMILP(c, A, b, binary), jnp.ones(k, c.dtype))


# --------------------------------------------------------------------------- averaged SGA


class SGAState(NamedTuple):
    """The iterate ``pi_t``, the running average of ``pi_0, ..., pi_{t-1}``, and ``t``."""

    pi: Float[Array, " s"]
    mean: Float[Array, " s"]
    t: Int[Array, ""]


class SGAInfo(NamedTuple):
    """The step's dual value ``u(pi_t, P_t)`` on its fresh instance and supergradient."""

    value: Float[Array, ""]
    supergradient: Float[Array, " s"]


class SGAResult(NamedTuple):
    """``multipliers``: the averaged iterate (the learned ``pi``); ``last``: ``pi_N``;
    ``values``: ``u(pi_t, P_t)`` per step (0 beyond ``n_samples``); ``step_size``: the
    ``eta`` used; ``result``: a :data:`RESULTS` item."""

    multipliers: Float[Array, " s"]
    last: Float[Array, " s"]
    values: Float[Array, " m"]
    step_size: Float[Array, ""]
    result: Any


def sga_init(pi0: Float[ArrayLike, " s"]) -> SGAState:
    """The state before the first step: ``pi_0``, an empty average, ``t = 0``."""
    pi0 = _f("pi0", pi0)
    return SGAState(pi0, jnp.zeros_like(pi0), jnp.zeros((), jnp.int32))


def sga_step(state: SGAState, instance: BoxMILP, step_size: Float[Array, ""],
             radius: Float[Array, ""]) -> tuple[SGAState, SGAInfo]:
    """One projected supergradient ascent step on ``instance`` (one fresh sample).

    The average is updated with ``pi_t`` before the step, so after ``N`` steps
    ``state.mean`` is the average of ``pi_0, ..., pi_{N-1}``.
    """
    value, g = _value_and_g(state.pi, instance)
    t = state.t + 1
    mean = state.mean + (state.pi - state.mean) / t.astype(state.pi.dtype)
    pi = _project(state.pi + step_size * g, radius)
    return SGAState(pi, mean, t), SGAInfo(value, g)


def sga_bound(radius: float | Float[Array, ""], grad_bound: float | Float[Array, ""],
              n_samples: int | Float[Array, ""]) -> Float[Array, ""]:
    """``R G / sqrt N``: the bound on ``F(pi*) - E F(pi_bar)`` of averaged SGA from
    ``pi_0 = 0`` with ``eta = R / (G sqrt N)`` when ``||pi*|| <= R``. Traced."""
    return (_f("radius", radius) * _f("grad_bound", grad_bound)
            / jnp.sqrt(_f("n_samples", n_samples)))


def _check_count(name, value, max_value):
    if _concrete(value):
        arr = np.asarray(value)
        if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must be an integer scalar, got {value!r}")
        check_int(name, int(arr), min=1, max=max_value)


def learn_sga(
    distribution: AbstractDistribution,
    key: jax.Array,
    n_samples: int | Int[Array, ""],
    radius: float | Float[Array, ""],
    *,
    step_size: float | Float[Array, ""] | None = None,
    grad_bound: float | Float[Array, ""] | None = None,
    max_samples: int | None = None,
    pi0: Float[ArrayLike, " s"] | None = None,
    throw: bool = True,
) -> SGAResult:
    """Learn one multiplier vector by averaged projected stochastic supergradient ascent.

    Step ``t`` draws ``P_t = distribution.sample(fold_in(key, t))`` (one fresh instance
    per step, so runs with different ``n_samples`` and the same key share their first
    instances), takes ``pi_{t+1} = Proj_R(pi_t + eta (b_t - A_t x*(pi_t)))``, and the
    output is the average of ``pi_0, ..., pi_{N-1}``.

    Args:
      distribution: an :class:`AbstractDistribution` (e.g. :class:`Scenarios`).
      key: a ``jax.random`` key.
      n_samples: ``N``, traced (``vmap`` over it) when ``max_samples`` is given; steps
        ``t >= N`` of the ``max_samples``-long scan leave the state unchanged.
      radius: ``R > 0`` of the feasible set ``{pi >= 0, ||pi|| <= R}`` (traced).
      step_size: ``eta``; default ``R / (G sqrt N)``, the paper's step.
      grad_bound: ``G``; default ``distribution.grad_bound()``.
      max_samples: the scan length (static); default ``n_samples`` (then concrete).
      pi0: the start, default 0.
      throw: raise if the iteration produced a non-finite value (else ``result`` says).

    Returns:
      :class:`SGAResult`. Jittable; vmappable over ``key``, ``n_samples``, ``radius``,
      ``step_size`` and the distribution's arrays.
    """
    if not isinstance(distribution, AbstractDistribution):
        raise TypeError(f"distribution must be an AbstractDistribution (Scenarios(...), "
                        f"random_scenarios(...)), got {type(distribution).__name__}")
    check_key("key", key)
    if max_samples is None:
        if not _concrete(n_samples):
            raise TypeError("max_samples (static) must be given when n_samples is traced")
        max_samples = int(np.asarray(n_samples)) if np.ndim(n_samples) == 0 else n_samples
    max_samples = check_int("max_samples", max_samples, min=1)
    _check_count("n_samples", n_samples, max_samples)
    s = distribution.n_coupling
    for name, v, ok in (("radius", radius, True), ("step_size", step_size, step_size is not None),
                        ("grad_bound", grad_bound, grad_bound is not None)):
        if ok and _concrete(v):
            check_scalar(name, v, gt=0.0)
    if pi0 is None:
        pi0 = jnp.zeros(s)
    pi0 = _f("pi0", pi0)
    if pi0.shape != (s,):
        raise ValueError(f"pi0 must have shape ({s},) (one multiplier per coupling row), got "
                         f"{tuple(pi0.shape)}")
    opt = lambda v: None if v is None else _f("step_size", v)  # noqa: E731
    return _learn_sga(distribution, key, jnp.asarray(n_samples), _f("radius", radius),
                      opt(step_size), opt(grad_bound), pi0, max_samples, throw)


@eqx.filter_jit
def _learn_sga(dist, key, n, radius, step_size, grad_bound, pi0, max_samples, throw):
    # One runtime check (one host callback) for the distribution's feasibility and the
    # traced arguments' ranges.
    checks = jnp.stack([(n < 1) | (n > max_samples), ~(radius > 0), dist.invalid()])
    radius = eqx.branched_error_if(
        radius, jnp.any(checks), jnp.argmax(checks),
        ("n_samples must be in [1, max_samples]", "radius must be > 0",
         "invalid distribution: " + _INFEASIBLE + ", or weights not >= 0 with a positive sum"))
    g_max = dist.grad_bound() if grad_bound is None else grad_bound
    nf = n.astype(pi0.dtype)
    eta = radius / (jnp.maximum(g_max, 1e-30) * jnp.sqrt(nf)) if step_size is None else step_size

    def body(state, t):
        new, info = sga_step(state, dist.sample(jax.random.fold_in(key, t)), eta, radius)
        on = t < n
        state = jax.tree_util.tree_map(lambda a, b: jnp.where(on, a, b), new, state)
        return state, jnp.where(on, info.value, 0.0)

    state, values = jax.lax.scan(body, sga_init(project(pi0, radius)), jnp.arange(max_samples))
    ok = jnp.all(jnp.isfinite(state.mean)) & jnp.all(jnp.isfinite(values))
    result = RESULTS.where(ok, RESULTS.successful, RESULTS.nonfinite)
    out = SGAResult(state.mean, state.pi, values, jnp.asarray(eta), result)
    return raise_if_failed(out, result, throw)


# --------------------------------------------------------------------------- per instance


class SubgradientState(NamedTuple):
    """The iterate, its value and supergradient, the best value and point so far, ``t``."""

    pi: Float[Array, " s"]
    value: Float[Array, ""]
    g: Float[Array, " s"]
    best_pi: Float[Array, " s"]
    best_value: Float[Array, ""]
    t: Int[Array, ""]


class SubgradientInfo(NamedTuple):
    """The new iterate's value and the step length taken."""

    value: Float[Array, ""]
    step: Float[Array, ""]


class SubgradientResult(NamedTuple):
    """``multipliers``/``value``: the best point and value; ``best_values[t]``: the best
    value after ``t`` steps (``t = 0`` is the start); ``last``: the final iterate."""

    multipliers: Float[Array, " s"]
    value: Float[Array, ""]
    best_values: Float[Array, " t1"]
    last: Float[Array, " s"]
    result: Any


def subgradient_step_size(scale: Any, g_norm: Any, t: Any) -> Any:
    """``eta_t = a / (||g_t|| sqrt(t + 1))`` (normalised, diminishing; 0 when ``g = 0``).

    Traced; NumPy inputs work too (a host-side loop over :func:`milp_dual` uses it).
    """
    return jnp.where(g_norm > 0, scale / (jnp.maximum(g_norm, 1e-30) * jnp.sqrt(t + 1.0)), 0.0)


def subgradient_init(instance: BoxMILP, pi0: Float[ArrayLike, " s"]) -> SubgradientState:
    """The state at ``pi0`` (projected on ``pi >= 0``), evaluated once."""
    pi0 = jnp.maximum(_check_pi(pi0, instance, "pi0"), 0.0)
    value, g = _value_and_g(pi0, instance)
    return SubgradientState(pi0, value, g, pi0, value, jnp.zeros((), jnp.int32))


def subgradient_step(state: SubgradientState, instance: BoxMILP, scale: Float[Array, ""]
                     ) -> tuple[SubgradientState, SubgradientInfo]:
    """``pi <- max(pi + eta_t g, 0)`` (:func:`subgradient_step_size`), best value kept."""
    g_norm = jnp.sqrt(jnp.sum(state.g**2))
    eta = subgradient_step_size(scale, g_norm, state.t.astype(state.pi.dtype))
    pi = jnp.maximum(state.pi + eta * state.g, 0.0)
    value, g = _value_and_g(pi, instance)
    better = value > state.best_value
    best_pi = jnp.where(better, pi, state.best_pi)
    best = jnp.maximum(value, state.best_value)
    return (SubgradientState(pi, value, g, best_pi, best, state.t + 1),
            SubgradientInfo(value, eta))


def subgradient(
    instance: BoxMILP,
    pi0: Float[ArrayLike, " s"],
    n_steps: int,
    scale: float | Float[Array, ""],
    *,
    throw: bool = True,
) -> SubgradientResult:
    """The per-instance projected subgradient method for ``max_pi u(pi, P)``.

    Args:
      instance: one :class:`BoxMILP` (``vmap`` for a batch).
      pi0: the start (a warm start, or zeros), shape ``(s,)``; traced.
      n_steps: number of steps (static).
      scale: ``a`` of the step ``a / (||g|| sqrt(t + 1))``, a distance (traced; a good
        choice is the expected distance from ``pi0`` to the optimum).
      throw: raise on a non-finite value (else ``result`` says).

    Returns:
      :class:`SubgradientResult` with the best value after each step.
    """
    if not isinstance(instance, BoxMILP):
        raise TypeError(f"instance must be a BoxMILP, got {type(instance).__name__}")
    if instance.batch_shape:
        raise ValueError(f"instance must be one instance (vmap over a batch), got batch shape "
                         f"{instance.batch_shape}")
    pi0 = _check_pi(pi0, instance, "pi0")
    if pi0.ndim != 1:
        raise ValueError(f"pi0 must have shape ({instance.n_coupling},), got {tuple(pi0.shape)}")
    n_steps = check_int("n_steps", n_steps, min=1)
    if _concrete(scale):
        check_scalar("scale", scale, gt=0.0)
    return _subgradient(instance, pi0, n_steps, _f("scale", scale), throw)


@eqx.filter_jit
def _subgradient(inst, pi0, n_steps, scale, throw):
    checks = jnp.stack([~(scale > 0), _rows_infeasible(inst)])
    scale = eqx.branched_error_if(scale, jnp.any(checks), jnp.argmax(checks),
                                  ("scale must be > 0", _INFEASIBLE))

    def body(state, _):
        state, _ = subgradient_step(state, inst, scale)
        return state, state.best_value

    state0 = subgradient_init(inst, pi0)
    state, best = jax.lax.scan(body, state0, None, length=n_steps)
    best = jnp.concatenate([state0.best_value[None], best])
    ok = jnp.all(jnp.isfinite(best))
    result = RESULTS.where(ok, RESULTS.successful, RESULTS.nonfinite)
    out = SubgradientResult(state.best_pi, state.best_value, best, state.pi, result)
    return raise_if_failed(out, result, throw)


def iterations_to_gap(
    best_values: Float[ArrayLike, "*batch t1"],
    target: Float[ArrayLike, "*batch"],
    gap: float | Float[Array, ""],
) -> tuple[Int[Array, "*batch"], Bool[Array, "*batch"]]:
    """First ``t`` with ``target - best_values[t] <= gap * max(|target|, 1)`` (relative
    gap), and whether it was reached; ``t = len - 1`` when not reached. Traced."""
    best = _f("best_values", best_values)
    target = _f("target", target)
    if _concrete(gap):
        check_scalar("gap", gap, ge=0.0)
    tol = _f("gap", gap) * jnp.maximum(jnp.abs(target), 1.0)
    hit = (target[..., None] - best) <= tol[..., None]
    reached = jnp.any(hit, -1)
    first = jnp.where(reached, jnp.argmax(hit, -1), best.shape[-1] - 1)
    return first, reached


# --------------------------------------------------------------------------- warm starts


class WarmStart(eqx.Module):
    """A learned start ``pi_0(phi) = max(W phi + w, 0)`` (``W`` of shape ``(s, 0)``: a
    constant). Call with the instance's features (or nothing, for a constant)."""

    weights: Float[Array, "s f"]
    bias: Float[Array, " s"]

    def __call__(self, features: Float[ArrayLike, "*batch f"] | None = None
                 ) -> Float[Array, "*batch s"]:
        if features is None:
            if self.weights.shape[-1]:
                raise ValueError(f"features must be given: this warm start reads "
                                 f"{self.weights.shape[-1]} features")
            return jnp.maximum(self.bias, 0.0)
        phi = _f("features", features)
        if phi.shape[-1:] != self.weights.shape[-1:]:
            raise ValueError(f"features must have shape (..., {self.weights.shape[-1]}), got "
                             f"{tuple(phi.shape)}")
        return jnp.maximum(phi @ self.weights.T + self.bias, 0.0)


def fit_warm_start(
    targets: Float[ArrayLike, "m s"],
    features: Float[ArrayLike, "m f"] | None = None,
    *,
    ridge: float | Float[Array, ""] = 0.0,
    weights: Float[ArrayLike, " m"] | None = None,
) -> WarmStart:
    """Fit a warm start by (weighted, ridge) least squares on per-instance optima.

    Minimises ``sum_i w_i ||pi_0(phi_i) - pi*_i||^2 + ridge ||W||_F^2``: without features
    the weighted mean of the targets (the empirical minimiser of the warm-start risk
    :func:`warm_start_risk`); with features an affine map (intercept not penalised).

    Args:
      targets: per-instance optimal multipliers ``pi*(P_i)``, shape ``(m, s)``.
      features: optional per-instance features ``(m, f)`` (e.g. ``b`` flattened).
      ridge: ``>= 0`` (traced).
      weights: per-sample weights ``>= 0`` (traced): zeros drop samples, so ``vmap`` over a
        mask sweeps the sample size ``N`` in one program. Default all ones.

    Returns:
      :class:`WarmStart`. Jittable, vmappable over all arguments.
    """
    t = _f("targets", targets)
    check_array("targets", t, ndim=2, finite=_concrete(t))
    m, s = t.shape
    w = jnp.ones(m, t.dtype) if weights is None else _f("weights", weights)
    check_array("weights", w, shape=(m,), finite=_concrete(w))
    if _concrete(w):
        check_array("weights", w, ge=0.0)
        if not float(np.sum(np.asarray(w))) > 0:
            raise ValueError("weights must have a positive sum")
    if _concrete(ridge):
        check_scalar("ridge", ridge, ge=0.0)
    if features is None:
        return WarmStart(jnp.zeros((s, 0), t.dtype), (w @ t) / jnp.sum(w))
    phi = _f("features", features)
    check_array("features", phi, ndim=2, finite=_concrete(phi))
    if phi.shape[0] != m:
        raise ValueError(f"features must have {m} rows (one per target), got shape "
                         f"{tuple(phi.shape)}")
    return _fit_affine(t, phi, w, _f("ridge", ridge))


@jax.jit
def _fit_affine(t, phi, w, ridge):
    wn = w / jnp.sum(w)
    mu_phi, mu_t = wn @ phi, wn @ t
    pc, tc = phi - mu_phi, t - mu_t
    gram = (pc * wn[:, None]).T @ pc + ridge * jnp.eye(phi.shape[1], dtype=t.dtype)
    # A tiny jitter keeps the solve defined when ridge = 0 and the features are collinear.
    gram = gram + 1e-9 * jnp.trace(gram) / phi.shape[1] * jnp.eye(phi.shape[1], dtype=t.dtype)
    W = jnp.linalg.solve(gram, (pc * wn[:, None]).T @ tc).T
    return WarmStart(W, mu_t - W @ mu_phi)


def warm_start_risk(
    pi0: Float[ArrayLike, "*batch s"],
    targets: Float[ArrayLike, "m s"],
    weights: Float[ArrayLike, " m"] | None = None,
) -> Float[Array, "*batch"]:
    """``W(pi_0) = sum_i w_i ||pi_0 - pi*_i||^2 / sum_i w_i`` (a constant start) or, with
    ``pi0`` of shape ``(m, s)``, the per-instance starts' risk. Traced."""
    t = _f("targets", targets)
    check_array("targets", t, ndim=2, finite=_concrete(t))
    p = _f("pi0", pi0)
    if p.shape[-1] != t.shape[-1]:
        raise ValueError(f"pi0 must have shape (..., {t.shape[-1]}), got {tuple(p.shape)}")
    w = jnp.ones(t.shape[0], t.dtype) if weights is None else _f("weights", weights)
    sq = jnp.sum((p[..., None, :] - t) ** 2, -1) if p.shape != t.shape else \
        jnp.sum((p - t) ** 2, -1)
    return (sq @ w) / jnp.sum(w)


# --------------------------------------------------------------------------- general MILPs


@dataclasses.dataclass(frozen=True)
class MILP:
    """A small MILP ``min c^T x`` s.t. ``A x >= b`` (coupling), ``C x >= d`` (easy),
    ``lb <= x <= ub``, ``x_j`` integer where ``integrality[j]`` (host-side, NumPy).

    ``C``/``d`` default to no easy rows; ``lb = 0``, ``ub = 1``, all integer (binary).
    """

    c: np.ndarray
    A: np.ndarray
    b: np.ndarray
    C: np.ndarray | None = None
    d: np.ndarray | None = None
    lb: np.ndarray | None = None
    ub: np.ndarray | None = None
    integrality: np.ndarray | None = None

    def __post_init__(self):
        def arr(name, x):
            out = np.asarray(x, np.float64)
            check_array(name, out)
            return out

        c = arr("c", self.c)
        if c.ndim != 1:
            raise ValueError(f"c must have shape (n,), got {c.shape}")
        n = c.shape[0]
        A = arr("A", self.A)
        if A.ndim != 2 or A.shape[1] != n:
            raise ValueError(f"A must have shape (s, {n}), got {A.shape}")
        b = arr("b", self.b)
        if b.shape != (A.shape[0],):
            raise ValueError(f"b must have shape ({A.shape[0]},), got {b.shape}")
        C = np.zeros((0, n)) if self.C is None else arr("C", self.C)
        if C.ndim != 2 or C.shape[1] != n:
            raise ValueError(f"C must have shape (m, {n}), got {C.shape}")
        d = np.zeros(0) if self.d is None else arr("d", self.d)
        if d.shape != (C.shape[0],):
            raise ValueError(f"d must have shape ({C.shape[0]},), got {d.shape}")
        lb = np.zeros(n) if self.lb is None else np.broadcast_to(
            np.asarray(self.lb, np.float64), (n,)).copy()
        ub = np.ones(n) if self.ub is None else np.broadcast_to(
            np.asarray(self.ub, np.float64), (n,)).copy()
        if np.any(lb > ub) or np.any(np.isnan(lb)) or np.any(np.isnan(ub)):
            raise ValueError("lb must be <= ub entrywise (and not NaN)")
        integ = np.ones(n, bool) if self.integrality is None else np.broadcast_to(
            np.asarray(self.integrality, bool), (n,)).copy()
        for name, v in (("c", c), ("A", A), ("b", b), ("C", C), ("d", d), ("lb", lb),
                        ("ub", ub), ("integrality", integ)):
            object.__setattr__(self, name, v)

    @property
    def n_coupling(self) -> int:
        return self.A.shape[0]


class DualResult(NamedTuple):
    """``u(pi, P)``, the subproblem's minimiser ``x*``, the supergradient ``b - A x*``."""

    value: float
    x: np.ndarray
    supergradient: np.ndarray


class LPResult(NamedTuple):
    """The LP relaxation's value, primal ``x`` and the coupling rows' duals (``>= 0``)."""

    value: float
    x: np.ndarray
    multipliers: np.ndarray


def to_milp(instance: BoxMILP) -> MILP:
    """One :class:`BoxMILP` as a :class:`MILP` (box bounds, integer iff ``binary``)."""
    if not isinstance(instance, BoxMILP):
        raise TypeError(f"instance must be a BoxMILP, got {type(instance).__name__}")
    if instance.batch_shape:
        raise ValueError(f"instance must be one instance, got batch shape "
                         f"{instance.batch_shape}: index it first")
    n = instance.n_vars
    return MILP(np.asarray(instance.c), np.asarray(instance.A), np.asarray(instance.b),
                integrality=np.full(n, instance.binary))


def _as_problem(problem) -> MILP:
    if isinstance(problem, BoxMILP):
        return to_milp(problem)
    if not isinstance(problem, MILP):
        raise TypeError(f"problem must be a MILP or a BoxMILP, got {type(problem).__name__}")
    return problem


def _constraints(p: MILP, with_coupling: bool):
    from scipy.optimize import LinearConstraint

    rows = [(p.C, p.d)] + ([(p.A, p.b)] if with_coupling else [])
    rows = [(M, v) for M, v in rows if M.shape[0]]
    if not rows:
        return []
    M = np.concatenate([r[0] for r in rows])
    v = np.concatenate([r[1] for r in rows])
    return [LinearConstraint(M, v, np.inf)]


def _milp(p: MILP, cost: np.ndarray, with_coupling: bool, what: str):
    from scipy.optimize import Bounds, milp

    res = milp(cost, constraints=_constraints(p, with_coupling), bounds=Bounds(p.lb, p.ub),
               integrality=p.integrality.astype(int))
    if res.status == 2:
        raise ValueError(f"infeasible instance: {what} has no feasible point (HiGHS)")
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"{what}: HiGHS did not solve it ({res.message})")
    return float(res.fun), np.asarray(res.x)


def milp_dual(pi: ArrayLike, problem: MILP | BoxMILP) -> DualResult:
    """``u(pi, P) = min_{x: Cx >= d, bounds, integrality} c^T x + pi^T (b - A x)`` by
    HiGHS (``scipy.optimize.milp``). Host-side, not jitted.

    Raises ``ValueError`` when the easy constraints are infeasible (an infeasible
    subproblem), or when ``pi`` has the wrong shape or negative entries.
    """
    p = _as_problem(problem)
    pi = np.asarray(pi, np.float64)
    if pi.shape != (p.n_coupling,):
        raise ValueError(f"pi must have shape ({p.n_coupling},), got {pi.shape}")
    check_array("pi", pi, ge=0.0)
    val, x = _milp(p, p.c - p.A.T @ pi, False, "the Lagrangian subproblem (easy constraints)")
    return DualResult(val + float(pi @ p.b), x, p.b - p.A @ x)


def solve_milp(problem: MILP | BoxMILP) -> tuple[float, np.ndarray]:
    """``(OPT, x)`` of the MILP by HiGHS (host-side). ``ValueError`` if infeasible."""
    p = _as_problem(problem)
    return _milp(p, p.c, True, "the MILP")


def lp_relaxation(problem: MILP | BoxMILP) -> LPResult:
    """The LP relaxation (integrality dropped) by HiGHS (``scipy.optimize.linprog``).

    Returns its value, ``x`` and the coupling rows' optimal duals ``pi_LP >= 0`` (for the
    box family ``u(pi_LP, P)`` equals the value: LP duality). ``ValueError`` when the
    instance is infeasible. Host-side, not jitted.
    """
    from scipy.optimize import linprog

    p = _as_problem(problem)
    M = np.concatenate([p.A, p.C])
    v = np.concatenate([p.b, p.d])
    res = linprog(p.c, A_ub=-M if M.shape[0] else None, b_ub=-v if M.shape[0] else None,
                  bounds=np.stack([p.lb, p.ub], 1), method="highs")
    if res.status == 2:
        raise ValueError("infeasible instance: the LP relaxation has no feasible point (HiGHS)")
    if res.status != 0:
        raise RuntimeError(f"the LP relaxation: HiGHS did not solve it ({res.message})")
    duals = -np.asarray(res.ineqlin.marginals)[: p.n_coupling] if M.shape[0] else np.zeros(0)
    return LPResult(float(res.fun), np.asarray(res.x), np.maximum(duals, 0.0))


def best_constant_multiplier(distribution: Scenarios) -> tuple[float, np.ndarray]:
    """``(max_pi F(pi), argmax)`` for a finite support, as one LP (host-side, HiGHS).

    ``max_{pi >= 0} sum_k w_k u(pi, P_k)`` is the LP dual of ``min sum_k w_k c_k^T x_k``
    s.t. ``sum_k w_k A_k x_k >= sum_k w_k b_k``, ``x_k in [0, 1]^n``; the aggregated
    rows' duals are the best constant multiplier ``pi*``.
    """
    from scipy.optimize import linprog

    if not isinstance(distribution, Scenarios):
        raise TypeError(f"distribution must be Scenarios, got {type(distribution).__name__}")
    inst = distribution.instances
    w = np.asarray(distribution.weights, np.float64)
    w = w / w.sum()
    c = np.asarray(inst.c, np.float64)
    A = np.asarray(inst.A, np.float64)
    b = np.asarray(inst.b, np.float64)
    k, s, n = A.shape
    cost = (w[:, None] * c).ravel()
    agg = np.transpose(w[:, None, None] * A, (1, 0, 2)).reshape(s, k * n)
    res = linprog(cost, A_ub=-agg, b_ub=-(w @ b), bounds=(0.0, 1.0), method="highs")
    if res.status == 2:
        raise ValueError("infeasible instance: the aggregated coupling rows cannot hold")
    if res.status != 0:
        raise RuntimeError(f"best_constant_multiplier: HiGHS did not solve it ({res.message})")
    return float(res.fun), np.maximum(-np.asarray(res.ineqlin.marginals), 0.0)
