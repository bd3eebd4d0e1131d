r"""Thermodynamic capacity of continuous Dense Associative Memory: LSE vs LSR kernels.

Paper: "Thermodynamic memory capacity of modern Hopfield networks (Dense
Associative Memory) with continuous states", ICML 2026 (abstract in
``shared/seeds/004_*.txt``). Builds on Lucibello & Mezard, PRL 132, 077301 (2024)
and Hoover et al., "Dense Associative Memory with Epanechnikov Energy".

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

Which density the finite-N Monte Carlo follows is measured by the ``hopfield``
experiment (``docs/hopfield.md``).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxsci.core.sphere import normalize, sample_uniform
from jaxsci.core.validation import (
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = [
    "B_DEFAULT",
    "Kernel",
    "Density",
    "MCResult",
    "overlaps",
    "lse_energy",
    "lsr_energy",
    "energy",
    "sample_patterns",
    "num_patterns",
    "metropolis",
    "geometric_entropy",
    "retrieval_overlap",
    "retrieval_free_energy",
    "max_spurious_overlap",
    "alpha_from_overlap",
    "alpha_th",
    "alpha_c",
    "retrieval_boundary",
    "overlap_tail",
    "expected_tail_count",
]

Kernel = Literal["lse", "lsr"]
Density = Literal["gaussian", "exact"]
KERNELS = ("lse", "lsr")
DENSITIES = ("gaussian", "exact")

# Default LSR sharpness b = 2 + sqrt(2) (the value the paper and Hoover et al. use).
B_DEFAULT = 2.0 + math.sqrt(2.0)


# --------------------------------------------------------------------------- energies


def overlaps(x: Float[Array, " n"], patterns: Float[Array, "m n"]) -> Float[Array, " m"]:
    """Normalised overlaps ``phi_mu = <x, xi_mu> / N``."""
    return patterns @ x / x.shape[-1]


def lse_energy(
    x: Float[Array, " n"], patterns: Float[Array, "m n"], beta: float = 1.0
) -> Float[Array, ""]:
    """LSE energy ``-(1/beta) log sum_mu exp(-beta N (1 - phi_mu))``."""
    n = x.shape[-1]
    phi = overlaps(x, patterns)
    z = -beta * n * (1.0 - phi)
    if beta * n <= 40.0:
        # z lies in [-2 beta N, 0], so exp(z) cannot overflow and its largest term
        # cannot underflow: skip logsumexp's max pass (one fewer sweep over M terms,
        # the cost that dominates the Monte Carlo at large alpha).
        return -jnp.log(jnp.sum(jnp.exp(z))) / beta
    return -jax.nn.logsumexp(z) / beta


def lsr_energy(
    x: Float[Array, " n"], patterns: Float[Array, "m n"], b: float = B_DEFAULT
) -> Float[Array, ""]:
    """LSR energy ``-(N/b) log sum_mu relu(1 - b (1 - phi_mu))``; ``+inf`` off the support."""
    n = x.shape[-1]
    phi = overlaps(x, patterns)
    s = jnp.sum(jax.nn.relu(1.0 - b * (1.0 - phi)))
    # Outside every kernel's support the Boltzmann weight is exactly zero:
    # +inf energy, so Metropolis never accepts such a move.
    return jnp.where(s > 0, -(n / b) * jnp.log(jnp.where(s > 0, s, 1.0)), jnp.inf)


def energy(
    x: Float[Array, " n"],
    patterns: Float[Array, "m n"],
    kernel: Kernel = "lse",
    *,
    beta: float = 1.0,
    b: float = B_DEFAULT,
) -> Float[Array, ""]:
    """Energy of state ``x`` under ``kernel`` (``"lse"`` or ``"lsr"``)."""
    check_choice("kernel", kernel, KERNELS)
    _check_state(x, patterns)
    _check_kernel_params(beta, b)
    if kernel == "lse":
        return lse_energy(x, patterns, beta)
    return lsr_energy(x, patterns, b)


# --------------------------------------------------------------------------- sampling


def num_patterns(alpha: float, n: int) -> int:
    """``M = round(e^{alpha N})``, at least 1."""
    check_scalar("alpha", alpha, gt=0.0)
    n = check_int("n", n, min=2)
    return max(1, int(round(math.exp(alpha * n))))


def sample_patterns(key: jax.Array, n: int, m: int, dtype=jnp.float32) -> Float[Array, "m n"]:
    """``m`` patterns uniform on the sphere of radius ``sqrt(n)`` in R^n."""
    check_key("key", key)
    n = check_int("n", n, min=2)
    m = check_int("m", m, min=1)
    return sample_uniform(key, m, n, radius=math.sqrt(n), dtype=dtype)


class MCResult(NamedTuple):
    """Output of :func:`metropolis` for one chain."""

    alignment: Float[Array, ""]  # mean overlap with the target over the sampling steps
    alignment_sq: Float[Array, ""]  # mean squared overlap (for fluctuations)
    final_state: Float[Array, " n"]
    final_energy: Float[Array, ""]
    acceptance: Float[Array, ""]  # acceptance rate during sampling
    step_size: Float[Array, ""]  # proposal scale after equilibration


def metropolis(
    key: jax.Array,
    patterns: Float[Array, "m n"],
    target: Int[Array, ""] | int,
    temperature: Float[Array, ""] | float,
    kernel: Kernel = "lse",
    *,
    n_equil: int = 1000,
    n_sample: int = 500,
    beta: float = 1.0,
    b: float = B_DEFAULT,
    init_noise: float = 0.05,
    step_size: float = 0.2,
    target_acceptance: float = 0.3,
    x0: Float[Array, " n"] | None = None,
) -> MCResult:
    """Metropolis Monte Carlo on the sphere of radius ``sqrt(N)`` at temperature ``T``.

    The chain starts at ``normalize(xi_target + init_noise * g)`` (inside the target's
    basin: the retrieval test) unless ``x0`` is given. During the ``n_equil``
    equilibration steps the proposal scale adapts (Robbins-Monro on its log) toward
    ``target_acceptance``; it is then frozen, so the ``n_sample`` sampling steps are
    an exact Metropolis chain. Jittable and vmappable over ``key``, ``target``,
    ``temperature`` and ``x0``: vmap over chains turns the overlap computation into
    one matrix product against the shared patterns.
    """
    check_key("key", key)
    check_choice("kernel", kernel, KERNELS)
    check_array("patterns", patterns, ndim=2, dtype="floating")
    if patterns.shape[1] < 2:
        raise ValueError(f"patterns must have N >= 2 columns, got shape {tuple(patterns.shape)}")
    if not isinstance(target, jax.core.Tracer):
        check_int("target", int(target), min=0, max=patterns.shape[0] - 1)
    check_scalar("temperature", temperature, gt=0.0)
    check_int("n_equil", n_equil, min=0)
    check_int("n_sample", n_sample, min=1)
    _check_kernel_params(beta, b)
    check_scalar("init_noise", init_noise, ge=0.0)
    check_scalar("step_size", step_size, gt=0.0)
    check_scalar("target_acceptance", target_acceptance, gt=0.0, lt=1.0)
    if x0 is not None:
        check_array("x0", x0, shape=(patterns.shape[1],), dtype="floating")
    return _metropolis(
        key,
        patterns,
        jnp.asarray(target),
        jnp.asarray(temperature, patterns.dtype),
        kernel,
        n_equil,
        n_sample,
        beta,
        b,
        init_noise,
        step_size,
        target_acceptance,
        x0,
    )


def _metropolis(
    key, patterns, target, temperature, kernel, n_equil, n_sample, beta, b,
    init_noise, step_size, target_acceptance, x0,
):
    n = patterns.shape[1]
    radius = math.sqrt(n)
    xi = patterns[target]

    def e_fn(x):
        return lse_energy(x, patterns, beta) if kernel == "lse" else lsr_energy(x, patterns, b)

    k_init, k_eq, k_samp = jax.random.split(key, 3)
    if x0 is None:
        x0 = normalize(xi + init_noise * jax.random.normal(k_init, (n,), patterns.dtype), radius)
    e0 = e_fn(x0)
    log_step0 = jnp.log(jnp.asarray(step_size, patterns.dtype))

    def propose(carry, k, adapt):
        x, e, log_step = carry
        k_prop, k_acc = jax.random.split(k)
        g = jax.random.normal(k_prop, (n,), patterns.dtype)
        # Radially renormalised Gaussian step: a symmetric proposal on the sphere.
        x_new = normalize(x + jnp.exp(log_step) * g, radius)
        e_new = e_fn(x_new)
        log_acc = -(e_new - e) / temperature
        accept = jnp.log(jax.random.uniform(k_acc, (), patterns.dtype)) < log_acc
        x = jnp.where(accept, x_new, x)
        e = jnp.where(accept, e_new, e)
        if adapt:
            # Robbins-Monro on the log scale: equilibration only, so sampling stays exact.
            log_step = log_step + 0.05 * (accept.astype(patterns.dtype) - target_acceptance)
            log_step = jnp.clip(log_step, jnp.log(1e-4), jnp.log(3.0))
        return (x, e, log_step), accept

    def eq_step(carry, k):
        carry, _ = propose(carry, k, True)
        return carry, None

    carry = (x0, e0, log_step0)
    if n_equil > 0:
        carry, _ = jax.lax.scan(eq_step, carry, jax.random.split(k_eq, n_equil))

    def samp_step(state, k):
        carry, s1, s2, acc = state
        carry, accepted = propose(carry, k, False)
        phi = jnp.dot(carry[0], xi) / n
        return (carry, s1 + phi, s2 + phi * phi, acc + accepted), None

    zero = jnp.zeros((), patterns.dtype)
    (carry, s1, s2, acc), _ = jax.lax.scan(
        samp_step, (carry, zero, zero, zero), jax.random.split(k_samp, n_sample)
    )
    x, e, log_step = carry
    return MCResult(s1 / n_sample, s2 / n_sample, x, e, acc / n_sample, jnp.exp(log_step))


# --------------------------------------------------------------------------- theory


def geometric_entropy(m: Float[Array, "..."]) -> Float[Array, "..."]:
    """``s(m) = (1/2) log(1 - m^2)``: log-fraction (per neuron) of the sphere at overlap m."""
    return 0.5 * jnp.log1p(-jnp.square(m))


def retrieval_overlap(temperature, kernel: Kernel = "lse", b: float = B_DEFAULT):
    """Overlap ``m*(T)`` minimising ``u(m) - T s(m)`` near the target (closed form)."""
    check_choice("kernel", kernel, KERNELS)
    t = jnp.asarray(temperature)
    if kernel == "lse":
        # d/dm [(1 - m) - T s(m)] = 0  <=>  m^2 + T m - 1 = 0
        return 0.5 * (-t + jnp.sqrt(t * t + 4.0))
    # -1/(1 - b(1-m)) + T m / (1 - m^2) = 0  <=>  (T b + 1) m^2 + T (1 - b) m - 1 = 0
    a = t * b + 1.0
    bb = t * (1.0 - b)
    return (-bb + jnp.sqrt(bb * bb + 4.0 * a)) / (2.0 * a)


def _kernel_energy(m, kernel, b):
    if kernel == "lse":
        return 1.0 - m
    return -jnp.log1p(-b * (1.0 - m)) / b


def retrieval_free_energy(temperature, kernel: Kernel = "lse", b: float = B_DEFAULT):
    """``f_ret(T) = min_m [u(m) - T s(m)]`` per neuron (0 at T = 0)."""
    t = jnp.asarray(temperature)
    m = retrieval_overlap(t, kernel, b)
    # At T = 0, m* = 1 where s = -inf: the limit of T s(m*(T)) is 0.
    m_safe = jnp.where(t > 0, m, 0.0)
    return jnp.where(t > 0, _kernel_energy(m, kernel, b) - t * geometric_entropy(m_safe), 0.0)


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


def alpha_th(b: float = B_DEFAULT, density: Density = "gaussian"):
    """LSR threshold: below it no spurious pattern reaches the support ``phi > 1 - 1/b``."""
    check_scalar("b", b, gt=1.0)
    return alpha_from_overlap(1.0 - 1.0 / b, density)


def alpha_c(temperature, kernel: Kernel = "lse", density: Density = "gaussian",
            b: float = B_DEFAULT):
    """Critical line ``alpha_c(T) = phi_max^{-1}(1 - f_ret(T))`` (0 where ``f_ret >= 1``).

    For LSR this is the curved part only; the retrieval region also includes
    ``alpha < alpha_th`` (see :func:`retrieval_boundary`). With the exact density the
    value diverges as ``T -> 0`` (``inf`` at ``T = 0``).
    """
    check_choice("kernel", kernel, KERNELS)
    check_choice("density", density, DENSITIES)
    _check_temperature(temperature)
    f = retrieval_free_energy(temperature, kernel, b)
    p = jnp.clip(1.0 - f, 0.0, 1.0)
    return alpha_from_overlap(p, density)


def retrieval_boundary(temperature, kernel: Kernel = "lse", density: Density = "gaussian",
                       b: float = B_DEFAULT):
    """Load below which the target is retrieved at temperature T.

    LSE: ``alpha_c(T)``. LSR: ``max(alpha_th, alpha_c(T))``.
    """
    ac = alpha_c(temperature, kernel, density, b)
    if kernel == "lsr":
        return jnp.maximum(alpha_th(b, density), ac)
    return ac


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


def _check_kernel_params(beta, b):
    check_scalar("beta", beta, gt=0.0)
    check_scalar("b", b, gt=1.0)


def _check_temperature(temperature):
    if isinstance(temperature, jax.core.Tracer):
        return
    check_array("temperature", jnp.asarray(temperature), dtype="number", ge=0.0)


def _check_state(x, patterns):
    check_array("x", x, ndim=1, dtype="floating")
    if x.shape[0] < 2:
        raise ValueError(f"x must have N >= 2 components, got N = {x.shape[0]}")
    check_array("patterns", patterns, shape=(None, x.shape[0]), dtype="floating")
