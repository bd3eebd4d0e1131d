r"""Thermodynamic capacity of continuous Dense Associative Memory: LSE vs LSR kernels.

Paper: "Thermodynamic memory capacity of modern Hopfield networks (Dense
Associative Memory) with continuous states", ICML 2026. Builds on Lucibello &
Mezard, PRL 132, 077301 (2024) and Hoover et al., "Dense Associative Memory with
Epanechnikov Energy".

Model
-----
States ``x`` and ``M = e^{alpha N}`` patterns ``xi_mu`` lie on the sphere of radius
``sqrt(N)``; ``phi_mu = <x, xi_mu> / N`` is the normalised overlap, so
``|x - xi_mu|^2 = 2 N (1 - phi_mu)``. The two energies are

* LSE (Gaussian kernel):      ``E(x) = -(1/beta) log sum_mu exp(-beta N (1 - phi_mu))``
* LSR (Epanechnikov kernel):  ``E(x) = -(N/b)   log sum_mu max(0, 1 - b (1 - phi_mu))``,
  ``b > 1`` (default ``2 + sqrt 2``); the kernel's support is ``phi > phi_s = 1 - 1/b``.

and the Boltzmann weight at temperature ``T`` is ``exp(-E(x)/T)``. The sampler is
Metropolis on the sphere (radially renormalised Gaussian proposals, which are
symmetric because the sphere is rotation invariant).

Phase boundaries (per neuron, N -> infinity)
--------------------------------------------
1. Geometric entropy: the fraction of the sphere at overlap ``m`` with a fixed
   direction is ``~ exp(N s(m))`` with ``s(m) = (1/2) log(1 - m^2)``, whatever the
   kernel (exact spherical geometry; used for the retrieval state in both densities).
2. Retrieval free energy: near the target, ``E/N = u(m)`` with
   ``u_LSE(m) = 1 - m`` and ``u_LSR(m) = -(1/b) log(1 - b (1 - m))``, so
   ``f_ret(T) = min_m [u(m) - T s(m)]``. Stationarity gives closed forms:
   LSE ``m^2 + T m - 1 = 0``; LSR ``(T b + 1) m^2 + T (1 - b) m - 1 = 0``.
3. Spurious patterns: the overlap of a random pattern with a fixed point has
   density ``~ exp(N s_rand(phi))``; the paper approximates it by a Gaussian,
   ``s_rand = -phi^2/2``, the exact sphere density is ``(1 - phi^2)^((N-3)/2)``,
   ``s_rand = (1/2) log(1 - phi^2)``. Among ``e^{alpha N}`` patterns the largest
   overlap of a typical point is where ``alpha + s_rand(phi) = 0``:
   ``phi_max = sqrt(2 alpha)`` (Gaussian) or ``sqrt(1 - e^{-2 alpha})`` (exact).
4. The paper's spin-glass free energy is the energy of a typical point, set by
   its nearest spurious pattern: ``f_sg(alpha) = 1 - phi_max(alpha)``. Retrieval
   wins when ``f_ret(T) < f_sg(alpha)``, i.e. ``alpha < alpha_c(T) =
   phi_max^{-1}(1 - f_ret(T))``: Gaussian ``alpha_c = (1 - f_ret)^2 / 2``, exact
   ``alpha_c = -(1/2) log(1 - (1 - f_ret)^2)``. At ``T = 0``, ``f_ret = 0``: the
   Gaussian density gives ``alpha_c(0) = 1/2`` for both kernels; the exact density
   gives no finite zero-temperature capacity (``phi_max < 1`` for every alpha).
5. LSR threshold: no spurious pattern reaches the kernel's support while
   ``phi_max(alpha) < phi_s``: ``alpha_th = (1 - 1/b)^2 / 2`` (Gaussian; 0.25 at
   ``b = 2 + sqrt 2``) or ``-(1/2) log(1 - (1 - 1/b)^2)`` (exact; 0.347). Below it the
   noise floor is empty and retrieval holds at every T, so the LSR retrieval region
   is ``alpha < max(alpha_th, alpha_c(T))``. (A public reference README quotes
   ``alpha_th = 0.043``: that is ``(1/b)^2 / 2``, the support edge mistaken for
   ``1/b``; its own script computes ``(1 - 1/b)^2 / 2 = 0.25``.)

6. The summed noise floor (``floor="sum"``). The paper's spin-glass energy keeps only
   the nearest spurious pattern. The kernel sums over all patterns, and the
   ``e^{N(alpha + s_rand(phi))}`` patterns at an intermediate overlap ``phi`` can
   outweigh it (the random-energy-model estimate of the sum, as in Lucibello & Mezard
   for LSE): per neuron ``(1/N) log sum_mu k(phi_mu) -> max_{phi <= phi_max}
   [alpha + s_rand(phi) + log k(phi) / N]``, whose end point ``phi = phi_max`` is the
   nearest-pattern term. LSE (``log k / N = -beta (1 - phi)``): the interior
   maximiser solves ``s_rand'(phi) = -beta`` (exact: ``beta phi^2 + phi - beta = 0``;
   Gaussian: ``phi = beta``) and counts once ``alpha > alpha_* = -s_rand(phi*)``; then
   ``f_sg(alpha) = 1 - phi* - (alpha - alpha_*) / beta``, linear in alpha, and
   ``alpha_c = alpha_* + beta (1 - phi* - f_ret)``. At ``beta = 1``, T = 0: 0.5
   (Gaussian: both branches meet there) and 0.623 (exact; the nearest branch alone has
   no finite capacity). LSR: every pattern inside the support ``phi > phi_s`` weighs
   ``O(1)``, so above ``alpha_th`` the ``e^{N(alpha - alpha_th)}`` patterns just inside
   the target's support outweigh the target (``f_sg = -(alpha - alpha_th) / b < 0 <=
   f_ret``): the summed floor puts the LSR boundary at ``alpha_th`` at every T,
   including T = 0, where the nearest-pattern floor gives 0.5 (Gaussian).

Which density and which floor the finite-N Monte Carlo follows is measured by the
``hopfield`` experiment and ``scripts/hopfield_capacity.py`` (``docs/hopfield.md``).

API
---
Kernels are values (final equinox Modules under :class:`AbstractKernel`): ``LSE(beta)``
and ``LSR(b)``; their parameters are pytree leaves, so ``vmap`` over a kernel built
from an array of parameters sweeps them. The sampler is an ``init``/``step`` pair
(:class:`MetropolisState`, :class:`MetropolisInfo`, temperature passed per step, so
annealing and continued chains work); :func:`metropolis` is the one-call
``lax.scan`` driver over them, configured by :class:`MetropolisConfig`.

Differentiability: the energies and the analytic functions (``retrieval_overlap``,
``retrieval_free_energy``, ``alpha_c``, ``alpha_th``, ``retrieval_boundary``) are
differentiable; the Monte Carlo chain's outputs have gradient identically zero with
respect to ``T`` and the kernel's parameter (Metropolis accept steps are piecewise
constant).

>>> import jax
>>> from jaxsci.dynamics import hopfield as hf
>>> pats = hf.sample_patterns(jax.random.key(0), 8, 3)
>>> cfg = hf.MetropolisConfig(n_equil=20, n_sample=10)
>>> res = hf.metropolis(jax.random.key(1), pats, 0, 0.1, hf.LSR(), cfg)
>>> bool(res.alignment > 0.5)
True
"""

from __future__ import annotations

import abc
import math
from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxsci.core.sphere import normalize, sample_uniform
from jaxsci.core.validation import (
    as_array,
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = [
    "B_DEFAULT",
    "BETA_DEFAULT",
    "AbstractKernel",
    "LSE",
    "LSR",
    "Density",
    "Floor",
    "MetropolisConfig",
    "MetropolisState",
    "MetropolisInfo",
    "MCResult",
    "overlaps",
    "lse_energy",
    "lsr_energy",
    "energy",
    "sample_patterns",
    "num_patterns",
    "check_patterns",
    "init",
    "step",
    "metropolis",
    "geometric_entropy",
    "retrieval_overlap",
    "retrieval_free_energy",
    "max_spurious_overlap",
    "alpha_from_overlap",
    "alpha_th",
    "alpha_c",
    "spin_glass_free_energy",
    "retrieval_boundary",
    "overlap_tail",
    "expected_tail_count",
]

Density = Literal["gaussian", "exact"]
DENSITIES = ("gaussian", "exact")
# The spin-glass noise floor: the nearest spurious pattern (the paper's) or the sum over
# all patterns (the minimum over both branches; module docstring, item 6).
Floor = Literal["nearest", "sum"]
FLOORS = ("nearest", "sum")

# Default LSR sharpness b = 2 + sqrt(2) (the value the paper and Hoover et al. use).
B_DEFAULT = 2.0 + math.sqrt(2.0)
# Default LSE inverse width: the sharp-kernel regime, E/N = 1 - phi near a pattern.
BETA_DEFAULT = 1.0
# Relative tolerance on pattern norms |xi| = sqrt(N) (float32 renormalisation is ~1e-7).
NORM_RTOL = 1e-3


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_values(name, value, *, gt=None, ge=None, lt=None):
    """Range check of a scalar or an array of values (a batch to vmap over), when concrete."""
    if _is_tracer(value):
        return
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number, got bool {value!r}")
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real, got {type(value).__name__} of dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {value}")
    if gt is not None and not np.all(arr > gt):
        raise ValueError(f"{name} must be > {gt}, got {value}")
    if ge is not None and not np.all(arr >= ge):
        raise ValueError(f"{name} must be >= {ge}, got {value}")
    if lt is not None and not np.all(arr < lt):
        raise ValueError(f"{name} must be < {lt}, got {value}")


# --------------------------------------------------------------------------- energies


def overlaps(x: Float[Array, " n"], patterns: Float[Array, "m n"]) -> Float[Array, " m"]:
    """Normalised overlaps ``phi_mu = <x, xi_mu> / N``."""
    return patterns @ x / x.shape[-1]


def lse_energy(
    x: Float[Array, " n"], patterns: Float[Array, "m n"], beta: Float[Array, ""] | float = 1.0
) -> Float[Array, ""]:
    """LSE energy ``-(1/beta) log sum_mu exp(-beta N (1 - phi_mu))``; ``beta`` may be traced.

    For states and patterns on the sphere of radius ``sqrt(N)``, ``z = -beta N (1 - phi)``
    lies in ``[-2 beta N, 0]``: while ``beta N <= 40`` ``exp(z)`` can neither overflow nor
    lose its largest term, so logsumexp's max pass is skipped (one fewer sweep over M
    terms, the cost that dominates the Monte Carlo at large alpha). A concrete ``beta``
    picks the path in Python; a traced one through ``lax.cond`` (both paths under a
    batched ``beta``).
    """
    n = x.shape[-1]
    phi = overlaps(x, patterns)

    def fast(beta):
        return -jnp.log(jnp.sum(jnp.exp(-beta * n * (1.0 - phi)))) / beta

    def stable(beta):
        return -jax.nn.logsumexp(-beta * n * (1.0 - phi)) / beta

    if not _is_tracer(beta):
        return fast(beta) if float(np.asarray(beta)) * n <= 40.0 else stable(beta)
    beta = jnp.asarray(beta, phi.dtype)
    return jax.lax.cond(beta * n <= 40.0, fast, stable, beta)


def lsr_energy(
    x: Float[Array, " n"], patterns: Float[Array, "m n"], b: Float[Array, ""] | float = B_DEFAULT
) -> Float[Array, ""]:
    """LSR energy ``-(N/b) log sum_mu relu(1 - b (1 - phi_mu))``; ``+inf`` off the support."""
    n = x.shape[-1]
    phi = overlaps(x, patterns)
    s = jnp.sum(jax.nn.relu(1.0 - b * (1.0 - phi)))
    # Outside every kernel's support the Boltzmann weight is exactly zero:
    # +inf energy, so Metropolis never accepts such a move.
    return jnp.where(s > 0, -(n / b) * jnp.log(jnp.where(s > 0, s, 1.0)), jnp.inf)


class AbstractKernel(eqx.Module):
    """A Dense Associative Memory kernel: its energy and its large-N retrieval theory.

    Kernels are values: their parameters are pytree leaves, so ``jax.vmap`` (or
    ``equinox.filter_vmap``) over a kernel built from an array of parameters sweeps
    them, and ``jax.grad`` differentiates the energies with respect to them. A new
    kernel subclasses this with the four methods below.
    """

    @abc.abstractmethod
    def energy(self, x: Float[Array, " n"], patterns: Float[Array, "m n"]) -> Float[Array, ""]:
        """Energy ``E(x)`` of the state ``x`` given the stored patterns."""

    @abc.abstractmethod
    def retrieval_energy(self, m: Float[Array, "..."]) -> Float[Array, "..."]:
        """``u(m)``: energy per neuron at overlap ``m`` with the target (N -> inf)."""

    @abc.abstractmethod
    def retrieval_overlap(self, temperature: Float[Array, "..."]) -> Float[Array, "..."]:
        """``m*(T)`` minimising ``u(m) - T s(m)`` (closed form)."""

    @abc.abstractmethod
    def threshold_load(self, density: Density = "gaussian") -> Float[Array, ""]:
        """Load below which retrieval holds at every temperature (0 if none)."""

    @abc.abstractmethod
    def checked(self) -> AbstractKernel:
        """The same kernel with its parameters range-checked inside jit (``error_if``)."""

    def summed_floor(self, alpha, density: Density = "gaussian"):
        """``f_sg(alpha)`` of the summed noise floor (``floor="sum"``); optional."""
        raise NotImplementedError(f"{type(self).__name__} has no summed noise floor; use "
                                  f"floor='nearest'")

    def summed_load(self, free_energy, density: Density = "gaussian"):
        """The load where :meth:`summed_floor` equals ``free_energy``; optional."""
        raise NotImplementedError(f"{type(self).__name__} has no summed noise floor; use "
                                  f"floor='nearest'")


class LSE(AbstractKernel):
    """Log-sum-exp (Gaussian) kernel with inverse width ``beta > 0``.

    ``beta`` is traced when it is a JAX array (sweep it with ``vmap`` over
    ``LSE(jnp.asarray(betas))``); a Python float is a compile-time constant.
    """

    beta: Float[Array, ""] | float = BETA_DEFAULT

    def __check_init__(self):
        _check_values("beta", self.beta, gt=0.0)

    def energy(self, x, patterns):
        return lse_energy(x, patterns, self.beta)

    def retrieval_energy(self, m):
        # E/N -> 1 - phi near the target for any beta (sharp-kernel regime, N -> inf).
        return 1.0 - m

    def retrieval_overlap(self, temperature):
        t = jnp.asarray(temperature)
        # d/dm [(1 - m) - T s(m)] = 0  <=>  m^2 + T m - 1 = 0
        return 0.5 * (-t + jnp.sqrt(t * t + 4.0))

    def threshold_load(self, density="gaussian"):
        check_choice("density", density, DENSITIES)
        return jnp.zeros(())

    def _interior(self, density):
        """``(phi*, alpha_*)``: the maximiser of ``s_rand(phi) + beta phi`` and its load."""
        beta = jnp.asarray(self.beta)
        if density == "gaussian":
            return beta, 0.5 * beta * beta
        phi = (jnp.sqrt(1.0 + 4.0 * beta * beta) - 1.0) / (2.0 * beta)
        return phi, -0.5 * jnp.log1p(-phi * phi)

    def summed_floor(self, alpha, density="gaussian"):
        check_choice("density", density, DENSITIES)
        a = jnp.asarray(alpha)
        phi, a_star = self._interior(density)
        pmax = max_spurious_overlap(a, density)
        # the interior maximum counts once its patterns exist (alpha > alpha_*)
        return jnp.where(a > a_star, 1.0 - phi - (a - a_star) / self.beta, 1.0 - pmax)

    def summed_load(self, free_energy, density="gaussian"):
        check_choice("density", density, DENSITIES)
        f = jnp.asarray(free_energy)
        phi, a_star = self._interior(density)
        nearest = alpha_from_overlap(jnp.clip(1.0 - f, 0.0, 1.0), density)
        return jnp.where(f >= 1.0 - phi, nearest, a_star + self.beta * (1.0 - phi - f))

    def checked(self):
        if _is_tracer(self.beta):
            return LSE(eqx.error_if(self.beta, ~(self.beta > 0), "beta must be > 0"))
        return self


class LSR(AbstractKernel):
    """Log-sum-ReLU (Epanechnikov) kernel with sharpness ``b > 1`` (default ``2 + sqrt 2``).

    ``b`` is traced when it is a JAX array (``vmap`` over ``LSR(jnp.asarray(bs))``).
    """

    b: Float[Array, ""] | float = B_DEFAULT

    def __check_init__(self):
        _check_values("b", self.b, gt=1.0)

    def energy(self, x, patterns):
        return lsr_energy(x, patterns, self.b)

    def retrieval_energy(self, m):
        return -jnp.log1p(-self.b * (1.0 - m)) / self.b

    def retrieval_overlap(self, temperature):
        t = jnp.asarray(temperature)
        # -1/(1 - b(1-m)) + T m / (1 - m^2) = 0  <=>  (T b + 1) m^2 + T (1 - b) m - 1 = 0
        a = t * self.b + 1.0
        bb = t * (1.0 - self.b)
        return (-bb + jnp.sqrt(bb * bb + 4.0 * a)) / (2.0 * a)

    def threshold_load(self, density="gaussian"):
        return alpha_th(self.b, density)

    def summed_floor(self, alpha, density="gaussian"):
        # above alpha_th, e^{N (alpha - alpha_th)} patterns inside the support, each O(1);
        # below it a typical point is outside every support (E = +inf)
        a = jnp.asarray(alpha)
        ath = alpha_th(self.b, density)
        return jnp.where(a > ath, -(a - ath) / self.b, jnp.inf)

    def summed_load(self, free_energy, density="gaussian"):
        f = jnp.asarray(free_energy)
        ath = alpha_th(self.b, density)
        return jnp.where(f >= 0.0, ath, ath - self.b * f)

    def checked(self):
        if _is_tracer(self.b):
            return LSR(eqx.error_if(self.b, ~(self.b > 1), "b must be > 1"))
        return self


DEFAULT_KERNEL = LSE()  # the default of every ``kernel=`` argument


def _check_kernel(kernel) -> AbstractKernel:
    if not isinstance(kernel, AbstractKernel):
        raise TypeError(
            "kernel must be a hopfield kernel module (hf.LSE(beta) or hf.LSR(b)), got "
            f"{type(kernel).__name__} {kernel!r}"
        )
    return kernel.checked()


def energy(
    x: Float[Array, " n"], patterns: Float[Array, "m n"], kernel: AbstractKernel = DEFAULT_KERNEL
) -> Float[Array, ""]:
    """Energy of state ``x`` under ``kernel`` (``LSE(beta)`` or ``LSR(b)``).

    Args:
      x: state, shape ``(N,)``; array-likes are accepted.
      patterns: stored patterns, shape ``(M, N)``.
      kernel: the kernel module; its parameter may be traced.

    Returns:
      the scalar energy. Differentiable in ``x``, ``patterns`` and the kernel's
      parameter (LSR: where the state is inside some kernel's support).
    """
    x = as_array("x", x)
    patterns = as_array("patterns", patterns)
    _check_state(x, patterns)
    return _check_kernel(kernel).energy(x, patterns)


# --------------------------------------------------------------------------- patterns


def num_patterns(alpha: float, n: int) -> int:
    """``M = round(e^{alpha N})``, at least 1 (a shape: concrete ``alpha`` only)."""
    check_scalar("alpha", alpha, gt=0.0)
    n = check_int("n", n, min=2)
    return max(1, int(round(math.exp(alpha * n))))


def sample_patterns(key: jax.Array, n: int, m: int, dtype=jnp.float32) -> Float[Array, "m n"]:
    """``m`` patterns uniform on the sphere of radius ``sqrt(n)`` in R^n."""
    check_key("key", key)
    n = check_int("n", n, min=2)
    m = check_int("m", m, min=1)
    return sample_uniform(key, m, n, radius=math.sqrt(n), dtype=dtype)


def check_patterns(patterns, name: str = "patterns") -> Float[Array, "m n"]:
    """Check stored patterns: shape ``(M >= 1, N >= 2)``, floating, finite, norms ``sqrt(N)``.

    The norm is the model's semantic precondition (overlaps are ``<x, xi>/N``; patterns
    of norm 1 instead of ``sqrt(N)`` give meaningless energies). Concrete patterns are
    checked here; traced ones through ``equinox.error_if`` (fires inside jit/vmap).

    Returns:
      the patterns as a JAX array (array-likes converted once).
    """
    patterns = as_array(name, patterns)
    check_array(name, patterns, ndim=2, dtype="floating")
    m, n = patterns.shape
    if m < 1:
        raise ValueError(f"{name} must hold at least one pattern (M >= 1), got shape {(m, n)}")
    if n < 2:
        raise ValueError(f"{name} must have N >= 2 columns, got shape {(m, n)}")
    # Concrete patterns (also closed-over constants inside a jit trace) are checked now:
    # staged, XLA would constant-fold the norm of an (M, N) constant at every compile.
    with jax.ensure_compile_time_eval():
        dev = jnp.max(jnp.abs(jnp.linalg.norm(patterns, axis=1) / math.sqrt(n) - 1.0))
    msg = (f"{name} must lie on the sphere of radius sqrt(N) = {math.sqrt(n):.4g} "
           f"(|xi_mu| / sqrt(N) within {NORM_RTOL} of 1); rescale them, e.g. "
           "sqrt(N) * xi / |xi|")
    if _is_tracer(dev):
        return eqx.error_if(patterns, ~(dev <= NORM_RTOL), msg)
    if not float(dev) <= NORM_RTOL:
        raise ValueError(f"{msg}; got a relative norm error of {float(dev):.3g}")
    return patterns


def _check_target(target, m: int):
    if _is_tracer(target):
        if not jnp.issubdtype(target.dtype, jnp.integer):
            raise TypeError(f"target must have an integer dtype, got {target.dtype}")
        return eqx.error_if(target, (target < 0) | (target >= m),
                            f"target must be in 0..{m - 1} (M = {m} patterns)")
    arr = np.asarray(target)
    if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"target must be an integer index, got {target!r}")
    check_int("target", int(arr), min=0, max=m - 1)
    return jnp.asarray(target)


def _check_temperature_positive(temperature, dtype):
    if _is_tracer(temperature):
        return eqx.error_if(temperature, ~(temperature > 0), "temperature must be > 0")
    check_scalar("temperature", temperature, gt=0.0)
    return jnp.asarray(temperature, dtype)


# --------------------------------------------------------------------------- sampling


class MetropolisConfig(eqx.Module):
    """Settings of the Metropolis sampler (the single owner of their defaults).

    ``n_equil``/``n_sample`` are loop counts (static). The other fields are numbers
    (traced when given as JAX arrays, e.g. to ``vmap`` over ``step_size``).

    Attributes:
      n_equil: equilibration steps, proposal scale adapted (default 1000).
      n_sample: sampling steps, proposal scale frozen (default 500).
      init_noise: scale of the Gaussian perturbation of the target that starts a chain.
      step_size: initial proposal scale.
      target_acceptance: acceptance rate the adaptation aims at, in (0, 1).
      adapt_rate: Robbins-Monro rate on the log proposal scale.
    """

    n_equil: int = eqx.field(default=1000, static=True)
    n_sample: int = eqx.field(default=500, static=True)
    init_noise: float = 0.05
    step_size: float = 0.2
    target_acceptance: float = 0.3
    adapt_rate: float = 0.05

    def __check_init__(self):
        check_int("n_equil", self.n_equil, min=0)
        check_int("n_sample", self.n_sample, min=1)
        _check_values("init_noise", self.init_noise, ge=0.0)
        _check_values("step_size", self.step_size, gt=0.0)
        _check_values("target_acceptance", self.target_acceptance, gt=0.0, lt=1.0)
        _check_values("adapt_rate", self.adapt_rate, ge=0.0)


DEFAULT_CONFIG = MetropolisConfig()  # the default of every ``config=`` argument


class MetropolisState(NamedTuple):
    """State of one chain: position on the sphere, its energy, the log proposal scale."""

    position: Float[Array, " n"]
    energy: Float[Array, ""]
    log_step_size: Float[Array, ""]


class MetropolisInfo(NamedTuple):
    """What one :func:`step` did."""

    is_accepted: Bool[Array, ""]
    acceptance_probability: Float[Array, ""]  # min(1, exp(-dE/T))
    proposal_energy: Float[Array, ""]


class MCResult(NamedTuple):
    """Output of :func:`metropolis` for one chain."""

    alignment: Float[Array, ""]  # mean overlap with the target over the sampling steps
    alignment_sq: Float[Array, ""]  # mean squared overlap (for fluctuations)
    final_state: Float[Array, " n"]
    final_energy: Float[Array, ""]
    acceptance: Float[Array, ""]  # acceptance rate during sampling
    step_size: Float[Array, ""]  # proposal scale after equilibration


def _init(key, patterns, target, kernel, config, x0):
    n = patterns.shape[1]
    if x0 is None:
        xi = patterns[target]
        noise = config.init_noise * jax.random.normal(key, (n,), patterns.dtype)
        x0 = normalize(xi + noise, math.sqrt(n))
    log_step = jnp.log(jnp.asarray(config.step_size, patterns.dtype))
    return MetropolisState(x0, kernel.energy(x0, patterns), log_step)


def _step(key, state, patterns, temperature, kernel, adapt_rate, target_acceptance):
    n = patterns.shape[1]
    x, e, log_step = state
    k_prop, k_acc = jax.random.split(key)
    g = jax.random.normal(k_prop, (n,), patterns.dtype)
    # Radially renormalised Gaussian step: a symmetric proposal on the sphere.
    x_new = normalize(x + jnp.exp(log_step) * g, math.sqrt(n))
    e_new = kernel.energy(x_new, patterns)
    log_acc = -(e_new - e) / temperature
    accept = jnp.log(jax.random.uniform(k_acc, (), patterns.dtype)) < log_acc
    x = jnp.where(accept, x_new, x)
    e = jnp.where(accept, e_new, e)
    if adapt_rate is not None:
        # Robbins-Monro on the log scale: equilibration only, so sampling stays exact.
        log_step = log_step + adapt_rate * (accept.astype(patterns.dtype) - target_acceptance)
        log_step = jnp.clip(log_step, jnp.log(1e-4), jnp.log(3.0))
    info = MetropolisInfo(accept, jnp.exp(jnp.minimum(log_acc, 0.0)), e_new)
    return MetropolisState(x, e, log_step), info


def init(
    key: jax.Array,
    patterns: Float[Array, "m n"],
    target: Int[Array, ""] | int,
    kernel: AbstractKernel = DEFAULT_KERNEL,
    config: MetropolisConfig = DEFAULT_CONFIG,
    *,
    x0: Float[Array, " n"] | None = None,
) -> MetropolisState:
    """Start a chain at ``normalize(xi_target + init_noise * g)`` (or at ``x0``).

    Args:
      key: draws ``g`` (unused when ``x0`` is given).
      patterns: ``(M, N)`` patterns on the sphere of radius ``sqrt(N)`` (checked).
      target: index of the pattern to start next to; traced targets outside
        ``0..M-1`` raise inside jit (``error_if``) instead of being clamped.
      kernel: ``LSE(beta)`` or ``LSR(b)``.
      config: supplies ``init_noise`` and ``step_size``.
      x0: explicit start, shape ``(N,)``, on the sphere.

    Returns:
      the :class:`MetropolisState`.
    """
    check_key("key", key)
    patterns = check_patterns(patterns)
    target = _check_target(target, patterns.shape[0])
    kernel = _check_kernel(kernel)
    _check_config(config)
    if x0 is not None:
        x0 = _check_x0(x0, patterns)
    return _init(key, patterns, target, kernel, config, x0)


def step(
    key: jax.Array,
    state: MetropolisState,
    patterns: Float[Array, "m n"],
    temperature: Float[Array, ""] | float,
    kernel: AbstractKernel = DEFAULT_KERNEL,
    *,
    adapt_rate: Float[Array, ""] | float | None = None,
    target_acceptance: Float[Array, ""] | float = 0.3,
) -> tuple[MetropolisState, MetropolisInfo]:
    """One Metropolis step at ``temperature`` (given per step: annealing is a schedule).

    Args:
      key: the step's randomness.
      state: from :func:`init` or a previous step.
      patterns: the same ``(M, N)`` patterns (shape-checked only: the norm check is
        :func:`init`'s, so a step costs one pass over the patterns).
      temperature: ``T > 0``, traced; a non-positive traced value raises inside jit.
      kernel: ``LSE(beta)`` or ``LSR(b)``.
      adapt_rate: ``None`` (an exact Metropolis step) or the Robbins-Monro rate that
        moves the log proposal scale toward ``target_acceptance``.
      target_acceptance: the acceptance rate the adaptation aims at.

    Returns:
      ``(new_state, info)``. The gradient of ``new_state`` (and of anything computed
      from the chain's states) with respect to ``temperature`` is identically zero: the
      accept decisions are piecewise constant in ``T`` (see :func:`metropolis`); only
      ``info.acceptance_probability`` depends smoothly on ``T``.
    """
    check_key("key", key)
    check_array("patterns", patterns, ndim=2, dtype="floating", finite=False)
    if not isinstance(state, MetropolisState):
        raise TypeError(f"state must be a MetropolisState (from hf.init), got "
                        f"{type(state).__name__}")
    check_array("state.position", state.position, shape=(patterns.shape[1],), dtype="floating",
                finite=False)
    kernel = _check_kernel(kernel)
    temperature = _check_temperature_positive(temperature, patterns.dtype)
    if adapt_rate is not None:
        _check_values("adapt_rate", adapt_rate, ge=0.0)
        _check_values("target_acceptance", target_acceptance, gt=0.0, lt=1.0)
    return _step(key, state, patterns, temperature, kernel, adapt_rate, target_acceptance)


def metropolis(
    key: jax.Array,
    patterns: Float[Array, "m n"],
    target: Int[Array, ""] | int,
    temperature: Float[Array, ""] | float,
    kernel: AbstractKernel = DEFAULT_KERNEL,
    config: MetropolisConfig = DEFAULT_CONFIG,
    *,
    x0: Float[Array, " n"] | None = None,
) -> MCResult:
    """Metropolis Monte Carlo on the sphere of radius ``sqrt(N)`` at temperature ``T``.

    A thin ``lax.scan`` driver over :func:`init` and :func:`step`: the chain starts next
    to ``xi_target`` (the retrieval test) unless ``x0`` is given; during the
    ``config.n_equil`` equilibration steps the proposal scale adapts toward
    ``config.target_acceptance``; it is then frozen, so the ``config.n_sample`` sampling
    steps are an exact Metropolis chain. To continue a chain or anneal ``T``, call
    :func:`init`/:func:`step` yourself.

    Jittable and vmappable over ``key``, ``target``, ``temperature``, ``x0`` and the
    kernel's parameter (``LSE(beta)``/``LSR(b)`` with array parameters): vmap over
    chains turns the overlap computation into one matrix product against the shared
    patterns. Bad values raise inside jit/vmap too (``equinox.error_if``): a target
    outside ``0..M-1``, ``T <= 0``, patterns off the sphere of radius ``sqrt(N)``.

    Differentiability: the accept/reject decisions are piecewise constant in ``T`` and
    in the kernel's parameter, so ``jax.grad`` of the alignment (or of any output)
    with respect to them is identically **zero**, not an estimate of the derivative of
    the expectation; differentiate the analytic functions (:func:`retrieval_boundary`,
    :func:`alpha_c`, the energies) instead.

    Args:
      key: the chain's randomness (same key, same chain).
      patterns: ``(M, N)`` patterns on the sphere of radius ``sqrt(N)``.
      target: index of the pattern to retrieve; alignments are measured against it.
      temperature: ``T > 0``.
      kernel: ``LSE(beta)`` (default ``LSE()``) or ``LSR(b)``.
      config: the :class:`MetropolisConfig` (step counts, noise, proposal scale).
      x0: explicit start on the sphere, shape ``(N,)``.

    Returns:
      the :class:`MCResult`.
    """
    check_key("key", key)
    patterns = check_patterns(patterns)
    target = _check_target(target, patterns.shape[0])
    temperature = _check_temperature_positive(temperature, patterns.dtype)
    kernel = _check_kernel(kernel)
    _check_config(config)
    if x0 is not None:
        x0 = _check_x0(x0, patterns)
    return _metropolis(key, patterns, target, temperature, kernel, config, x0)


# Jitted once per shapes/kernel type/config: eager calls in a loop reuse the program
# (the checks above ran concretely); under an outer jit/vmap it is simply inlined.
@eqx.filter_jit
def _metropolis(key, patterns, target, temperature, kernel, config, x0):
    n = patterns.shape[1]
    xi = patterns[target]
    k_init, k_eq, k_samp = jax.random.split(key, 3)
    state = _init(k_init, patterns, target, kernel, config, x0)

    def eq_step(state, k):
        state, _ = _step(k, state, patterns, temperature, kernel, config.adapt_rate,
                         config.target_acceptance)
        return state, None

    if config.n_equil > 0:
        state, _ = jax.lax.scan(eq_step, state, jax.random.split(k_eq, config.n_equil))

    def samp_step(carry, k):
        state, s1, s2, acc = carry
        state, info = _step(k, state, patterns, temperature, kernel, None, None)
        phi = jnp.dot(state.position, xi) / n
        return (state, s1 + phi, s2 + phi * phi, acc + info.is_accepted), None

    zero = jnp.zeros((), patterns.dtype)
    (state, s1, s2, acc), _ = jax.lax.scan(
        samp_step, (state, zero, zero, zero), jax.random.split(k_samp, config.n_sample)
    )
    ns = config.n_sample
    return MCResult(s1 / ns, s2 / ns, state.position, state.energy, acc / ns,
                    jnp.exp(state.log_step_size))


# --------------------------------------------------------------------------- theory


def geometric_entropy(m: Float[Array, "..."]) -> Float[Array, "..."]:
    """``s(m) = (1/2) log(1 - m^2)``: log-fraction (per neuron) of the sphere at overlap m."""
    return 0.5 * jnp.log1p(-jnp.square(m))


def retrieval_overlap(temperature, kernel: AbstractKernel = DEFAULT_KERNEL):
    """Overlap ``m*(T)`` minimising ``u(m) - T s(m)`` near the target (closed form).

    Differentiable in ``temperature`` and the kernel's parameter.
    """
    return _check_kernel(kernel).retrieval_overlap(temperature)


def retrieval_free_energy(temperature, kernel: AbstractKernel = DEFAULT_KERNEL):
    """``f_ret(T) = min_m [u(m) - T s(m)]`` per neuron (0 at T = 0).

    Differentiable in ``temperature`` (for ``T > 0``) and the kernel's parameter.
    """
    kernel = _check_kernel(kernel)
    t = jnp.asarray(temperature)
    m = kernel.retrieval_overlap(t)
    # At T = 0, m* = 1 where s = -inf: the limit of T s(m*(T)) is 0.
    m_safe = jnp.where(t > 0, m, 0.0)
    return jnp.where(t > 0, kernel.retrieval_energy(m) - t * geometric_entropy(m_safe), 0.0)


def max_spurious_overlap(alpha, density: Density = "gaussian"):
    """Largest overlap of a typical point with ``e^{alpha N}`` random patterns (N -> inf)."""
    check_choice("density", density, DENSITIES)
    a = jnp.asarray(alpha)
    if density == "gaussian":
        return jnp.sqrt(2.0 * a)
    return jnp.sqrt(-jnp.expm1(-2.0 * a))


def alpha_from_overlap(phi, density: Density = "gaussian"):
    """Inverse of :func:`max_spurious_overlap`: the load at which ``phi_max = phi``."""
    check_choice("density", density, DENSITIES)
    p = jnp.asarray(phi)
    if density == "gaussian":
        return 0.5 * p * p
    return -0.5 * jnp.log1p(-p * p)


def alpha_th(b: Float[Array, ""] | float = B_DEFAULT, density: Density = "gaussian"):
    """LSR threshold: below it no spurious pattern reaches the support ``phi > 1 - 1/b``.

    ``b`` may be traced (``b > 1``); differentiable in ``b``.
    """
    _check_values("b", b, gt=1.0)
    return alpha_from_overlap(1.0 - 1.0 / b, density)


def alpha_c(temperature, kernel: AbstractKernel = DEFAULT_KERNEL, density: Density = "gaussian",
            floor: Floor = "nearest"):
    """Critical line: the load where ``f_sg(alpha) = f_ret(T)``.

    ``floor="nearest"`` (the paper's): ``alpha_c(T) = phi_max^{-1}(1 - f_ret(T))`` (0 where
    ``f_ret >= 1``); for LSR this is the curved part only, the retrieval region also
    includes ``alpha < alpha_th`` (see :func:`retrieval_boundary`); with the exact density
    it diverges as ``T -> 0`` (``inf`` at ``T = 0``). ``floor="sum"``: the summed noise
    floor (module docstring, item 6; LSE: finite at T = 0 in both densities; LSR:
    ``alpha_th``). Traced and differentiable in ``temperature`` (for ``T > 0``) and the
    kernel's parameter.
    """
    check_choice("density", density, DENSITIES)
    check_choice("floor", floor, FLOORS)
    _check_temperature(temperature)
    f = retrieval_free_energy(temperature, kernel)
    if floor == "sum":
        return _check_kernel(kernel).summed_load(f, density)
    p = jnp.clip(1.0 - f, 0.0, 1.0)
    return alpha_from_overlap(p, density)


def spin_glass_free_energy(alpha, kernel: AbstractKernel = DEFAULT_KERNEL,
                           density: Density = "gaussian", floor: Floor = "nearest"):
    """The noise floor ``f_sg(alpha)`` (per neuron) that retrieval competes with.

    ``floor="nearest"`` (the paper's, either kernel): ``1 - phi_max(alpha)``. ``floor="sum"``:
    the random-energy-model estimate of the whole kernel sum (module docstring, item 6):
    LSE ``-(1/beta) max_{phi <= phi_max} [alpha + s_rand(phi) - beta (1 - phi)]``, LSR
    ``-(alpha - alpha_th)/b`` above ``alpha_th`` and ``+inf`` below. Traced and
    differentiable in ``alpha`` (almost everywhere) and the kernel's parameter.
    """
    check_choice("density", density, DENSITIES)
    check_choice("floor", floor, FLOORS)
    _check_values("alpha", alpha, ge=0.0)
    if floor == "sum":
        return _check_kernel(kernel).summed_floor(alpha, density)
    _check_kernel(kernel)
    return 1.0 - max_spurious_overlap(alpha, density)


def retrieval_boundary(temperature, kernel: AbstractKernel = DEFAULT_KERNEL,
                       density: Density = "gaussian", floor: Floor = "nearest"):
    """Load below which the target is retrieved at temperature T.

    LSE: ``alpha_c(T)``. LSR: ``max(alpha_th, alpha_c(T))`` (the kernel's
    :meth:`~AbstractKernel.threshold_load`), which is ``alpha_th`` at every T with
    ``floor="sum"``. Traced and differentiable in ``temperature`` and the kernel's
    parameter (almost everywhere: the max has a kink).
    """
    kernel = _check_kernel(kernel)
    ac = alpha_c(temperature, kernel, density, floor)
    return jnp.maximum(kernel.threshold_load(density), ac)


def overlap_tail(t, n: int, density: Density = "gaussian"):
    """``P(phi > t)`` for the overlap of a uniformly random pattern with a fixed point.

    Exact: ``(1 + phi)/2 ~ Beta((N-1)/2, (N-1)/2)`` on the sphere in R^N.
    Gaussian: ``phi ~ Normal(0, 1/N)`` (the paper's approximation).
    """
    check_choice("density", density, DENSITIES)
    n = check_int("n", n, min=2)
    t = jnp.asarray(t)
    if density == "gaussian":
        return 0.5 * jax.scipy.special.erfc(t * jnp.sqrt(n / 2.0))
    a = (n - 1) / 2.0
    x = jnp.clip((1.0 + t) / 2.0, 0.0, 1.0)
    return 1.0 - jax.scipy.special.betainc(a, a, x)


def expected_tail_count(t, n: int, m: int, density: Density = "gaussian"):
    """Expected number of ``m`` random patterns with overlap above ``t``."""
    m = check_int("m", m, min=1)
    return m * overlap_tail(t, n, density)


# --------------------------------------------------------------------------- checks


def _check_config(config):
    if not isinstance(config, MetropolisConfig):
        raise TypeError(f"config must be a hf.MetropolisConfig, got {type(config).__name__}")


def _check_x0(x0, patterns):
    x0 = as_array("x0", x0)
    check_array("x0", x0, shape=(patterns.shape[1],), dtype="floating")
    n = patterns.shape[1]
    with jax.ensure_compile_time_eval():
        dev = jnp.abs(jnp.linalg.norm(x0) / math.sqrt(n) - 1.0)
    msg = f"x0 must lie on the sphere of radius sqrt(N) = {math.sqrt(n):.4g}"
    if _is_tracer(dev):
        return eqx.error_if(x0, ~(dev <= NORM_RTOL), msg)
    if not float(dev) <= NORM_RTOL:
        raise ValueError(f"{msg}, got norm {float(jnp.linalg.norm(x0)):.4g}")
    return x0


def _check_temperature(temperature):
    if _is_tracer(temperature):
        return
    check_array("temperature", jnp.asarray(temperature), dtype="number", ge=0.0)


def _check_state(x, patterns):
    check_array("x", x, ndim=1, dtype="floating")
    if x.shape[0] < 2:
        raise ValueError(f"x must have N >= 2 components, got N = {x.shape[0]}")
    check_array("patterns", patterns, shape=(None, x.shape[0]), dtype="floating")
    if patterns.shape[0] < 1:
        raise ValueError(f"patterns must hold at least one pattern (M >= 1), got shape "
                         f"{tuple(patterns.shape)}")
