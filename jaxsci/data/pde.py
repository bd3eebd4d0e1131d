r"""Pseudo-spectral PDE data generators on periodic domains (1-D and 2-D).

Data for functional operator / Koopman learning (the MERLIN issue: Lu, Ma, Lin &
Zhu, "Interpretable Functional Koopman Learning with Non-Markovian Closure for
Spatiotemporal Systems", ICML 2026) and
for any other user who needs trajectories of the classic benchmark PDEs. Every
solver is pure-functional JAX: fields live on uniform periodic grids, the state
is advanced in Fourier space (``rfft``), time loops are ``lax.scan``, and the
functions jit, ``vmap`` over initial conditions and differentiate.

Equations and schemes
---------------------
* **Viscous Burgers** (:func:`burgers_1d`), ``x in [0, L)``:
  ``u_t + u u_x = nu u_xx``. Linear part ``L_k = -nu k^2``.
* **Kuramoto-Sivashinsky** (:func:`kuramoto_sivashinsky_1d`), ``x in [0, L)``,
  ``L = 32 pi`` by default (Kassam & Trefethen 2005):
  ``u_t + u u_x + u_xx + u_xxxx = 0``. Linear part ``L_k = k^2 - k^4``.
* **2-D incompressible Navier-Stokes, vorticity form** (:func:`navier_stokes_2d`),
  ``(x, y) in [0, L)^2``, ``L = 1`` by default (Li et al., FNO, ICLR 2021):
  ``w_t + u . grad w = nu Lap w + f``, ``u = (d_y psi, -d_x psi)``,
  ``-Lap psi = w``; default forcing ``f = 0.1 (sin 2pi(x+y) + cos 2pi(x+y))``
  (the FNO benchmark; scaled as ``2 pi/L`` on other domains). Linear part
  ``L_k = -nu |k|^2``.

  All three are integrated with **ETDRK4** (Cox & Matthews 2002, exponential
  time differencing, 4th order), its coefficients
  ``phi_i(L_k dt)`` evaluated by the contour-integral mean of Kassam & Trefethen
  (2005, SIAM J. Sci. Comput. 26, 1214), 32 points on the upper half of a unit
  circle around each ``L_k dt``. The linear part (diffusion, hyperdiffusion) is
  integrated exactly; the nonlinear term (and the forcing) is evaluated
  pseudo-spectrally with the **2/3 rule** (Orszag 1971): the fields entering
  the product and the product itself keep only ``|m| < n/3`` (integer
  wavenumber per axis), so the quadratic term is alias-free (the semi-discrete
  system is the Galerkin truncation, which conserves energy and enstrophy of
  2-D Euler exactly at ``nu = 0``). The 2-D advection term is evaluated in
  Basdevant's form ``u . grad w = (d_xx - d_yy)(u v) + d_xy (v^2 - u^2)``
  (4 FFTs instead of 5; identical to ``u w_x + v w_y`` on the truncated modes).
  ETDRK4 integrates the non-stiff problems at 4th order; with strongly stiff
  linear parts (KS at ``n >= 32``) the observed order drops towards 3, the order
  reduction analysed by Hochbruck & Ostermann (2005), without loss of stability.

  The FNO generator uses Crank-Nicolson for diffusion and forward Euler for
  advection with ``dt = 1e-4`` at ``256^2``. ETDRK4's step is limited by the
  advective CFL number instead, ``max(|u| + |v|) k_max dt`` with
  ``k_max = 2 pi n / 3``: for the FNO data (``nu = 1e-3``, ``|u|, |v| <= 0.25``)
  at ``64^2``, ``dt = 1/16`` stayed finite for 32 trajectories over 100 time
  units while ``dt = 0.1`` diverged in 17 of 32; at ``dt = 1/16`` and ``1/32``
  the float32 solutions differ from a ``dt = 1/128`` one by the same
  ``2e-6`` (t = 1) to ``2e-4`` (t = 60) relative, i.e. by float32 round-off
  (float32 vs float64 at one step size: ``7e-7`` to ``4e-5``), not by time
  error. :func:`navier_stokes_dataset` therefore defaults to ``dt = 4 / n``
  (``1/16`` at ``64^2``, ``1/8`` at ``32^2``, also measured stable over 100
  time units), 625x fewer steps than FNO's generator (which also runs at 256^2).
* **2-D wave equation** (:func:`wave_2d`), ``[0, L)^2`` periodic:
  ``u_tt = c^2 Lap u``, as a first-order system ``u_t = v``, ``v_t = c^2 Lap u``.
  Each Fourier mode is solved **exactly in time**:
  ``u_k(t) = u_k(0) cos(w t) + v_k(0) sin(w t)/w``,
  ``v_k(t) = -u_k(0) w sin(w t) + v_k(0) cos(w t)``, ``w = c |k|``, so the
  spectral energy ``(1/2) int v^2 + c^2 |grad u|^2`` (:func:`wave_energy`) is
  conserved to round-off and ``dt`` is only the spacing of the saved frames.
  Defaults follow MERLIN's wave set (``data/wave/wave_generate.py`` in
  RobinLufdu/MERLIN: py-pde ``WavePDE``, speed ``1/16``, periodic domain
  ``[-1, 1]^2`` i.e. ``L = 2``, ``64 x 64`` grid, frames every ``0.25`` up to
  ``t = 40``, initial displacement a Gaussian bump of amplitude ``U[2, 4]`` and
  width ``U[0.25, 0.30]`` at a random position, initial velocity zero). MERLIN
  integrates with py-pde's 2nd-order finite differences (internal step 1e-3),
  which adds numerical dispersion; the solution here is the exact solution of
  the spectral semi-discretisation, so trajectories share the distribution of
  MERLIN's set, not its numbers.

Grids, shapes, resolutions
--------------------------
Grid points are ``x_i = origin + i L / n``, ``i = 0..n-1`` (the periodic point
``x = L`` is not stored), and 2-D arrays are indexed ``[i_x, i_y]``
(:func:`grid_2d` returns the matching ``(n, n, 2)`` coordinates). Because of this
layout, the ``2n`` grid contains the ``n`` grid: ``field_64[::2, ::2]`` are the
values of the *same* trajectory at exactly the points of ``grid_2d(32, L)``
(:func:`subsample`). For a super-resolution test, generate once at 64 and stride
to 32: the two resolutions then hold the same trajectories. (Grids built with
``linspace(0, 1, n)`` include both endpoints and do *not* nest this way.)

Saving convention: a solver called with ``n_steps`` and ``save_every`` returns
``n_steps // save_every + 1`` frames at steps ``0, save_every, ..., n_steps``
(frame 0 is the initial condition). The solvers keep the dtype of their input
(float32, or float64 under ``jax_enable_x64``); samplers and datasets are float32.
A solution that turns NaN/inf raises (``equinox.error_if``) instead of returning it.

Random initial conditions: :func:`gaussian_random_field_2d` (the FNO
Navier-Stokes initial vorticity, ``N(0, sigma^2 (-Lap + tau^2)^{-alpha})`` with
``alpha = 2.5``, ``tau = 7``, ``sigma = tau^{alpha - 1}``, mean zero),
:func:`random_field_1d` (random low-mode Fourier series) and
:func:`wave_initial_condition` (MERLIN's Gaussian bumps). The ``*_dataset``
helpers vmap a sampler and a solver over trajectories.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "grid_1d",
    "grid_2d",
    "subsample",
    "wavenumbers",
    "dealias_mask",
    "burgers_1d",
    "kuramoto_sivashinsky_1d",
    "wave_2d",
    "wave_energy",
    "navier_stokes_2d",
    "fno_forcing",
    "gaussian_random_field_2d",
    "random_field_1d",
    "wave_initial_condition",
    "burgers_dataset",
    "ks_dataset",
    "wave_dataset",
    "navier_stokes_dataset",
]

TWO_PI = 2.0 * math.pi
# Number of contour points on the upper half circle (Kassam & Trefethen 2005 use
# 16 in double precision; 32 keeps the coefficients at float32 round-off).
_N_CONTOUR = 32


# --------------------------------------------------------------------------- grids


def grid_1d(
    n: int, length: float = TWO_PI, *, origin: float = 0.0, dtype=jnp.float32
) -> Float[Array, " n"]:
    """Periodic grid ``x_i = origin + i length / n``, ``i = 0..n-1``."""
    n = check_int("n", n, min=1)
    check_scalar("length", length, gt=0.0)
    check_scalar("origin", origin)
    return origin + jnp.asarray(np.arange(n) * (1.0 / n), dtype) * length


def grid_2d(
    n: int, length: float = 1.0, *, origin: float = 0.0, dtype=jnp.float32
) -> Float[Array, "n n 2"]:
    """Coordinates ``(x_i, y_j)`` of the periodic ``n x n`` grid, indexed ``[i, j]``.

    ``grid_2d(2 n, L)[::2, ::2] == grid_2d(n, L)``: the grids nest.
    """
    x = grid_1d(n, length, origin=origin, dtype=dtype)
    gx, gy = jnp.meshgrid(x, x, indexing="ij")
    return jnp.stack([gx, gy], axis=-1)


def subsample(x: Array, factor: int, *, ndim: int = 2) -> Array:
    """Stride the last ``ndim`` (spatial) axes by ``factor``: ``x[..., ::f, ::f]``.

    On the periodic grids of this module the result holds the values at exactly
    the points of the ``n / factor`` grid (same trajectories, coarser grid).
    """
    factor = check_int("factor", factor, min=1)
    ndim = check_int("ndim", ndim, min=1)
    if not hasattr(x, "shape") or len(x.shape) < ndim:
        raise ValueError(
            f"x must have at least {ndim} spatial axes, got shape {getattr(x, 'shape', None)}"
        )
    for size in x.shape[-ndim:]:
        if size % factor:
            raise ValueError(
                f"factor must divide the grid size, got factor={factor} for spatial "
                f"shape {tuple(x.shape[-ndim:])} (the strided points would not form a "
                "uniform periodic grid)"
            )
    index = (Ellipsis,) + (slice(None, None, factor),) * ndim
    return x[index]


def wavenumbers(
    n: int, length: float, *, real: bool = False, dtype=jnp.float32
) -> Float[Array, " m"]:
    """Angular wavenumbers ``2 pi m / length`` in FFT order (``rfft`` order if ``real``)."""
    n = check_int("n", n, min=1)
    check_scalar("length", length, gt=0.0)
    m = np.fft.rfftfreq(n, 1.0 / n) if real else np.fft.fftfreq(n, 1.0 / n)
    return jnp.asarray(m * TWO_PI, dtype) / length


def dealias_mask(n: int, *, real: bool = False) -> Array:
    """2/3-rule mask (``3 |m| < n``) over the FFT (or ``rfft``) frequencies of one axis."""
    n = check_int("n", n, min=1)
    m = np.fft.rfftfreq(n, 1.0 / n) if real else np.fft.fftfreq(n, 1.0 / n)
    return jnp.asarray(3 * np.abs(np.round(m)) < n)


def _mask_2d(n: int) -> Array:
    return dealias_mask(n)[:, None] & dealias_mask(n, real=True)[None, :]


def _k2d(n: int, length, dtype=jnp.float32) -> tuple[Array, Array]:
    kx = wavenumbers(n, length, dtype=dtype)[:, None]
    ky = wavenumbers(n, length, real=True, dtype=dtype)[None, :]
    return kx, ky


# --------------------------------------------------------------------------- ETDRK4


def _etdrk4_coefficients(lin: Array, dt) -> tuple[Array, ...]:
    """ETDRK4 coefficients for a diagonal linear operator ``lin`` and step ``dt``.

    With ``z = L dt`` (Cox & Matthews 2002; Kassam & Trefethen 2005, eq. 2.5):
    ``E = e^z``, ``E2 = e^{z/2}``, ``Q = dt (e^{z/2} - 1)/z``,
    ``f1 = dt (-4 - z + e^z (4 - 3z + z^2))/z^3``, ``f2 = dt (2 + z + e^z (z - 2))/z^3``,
    ``f3 = dt (-4 - 3z - z^2 + e^z (4 - z))/z^3``, each evaluated as the mean over
    points on a unit circle around ``z`` (Cauchy's integral formula), which avoids
    the cancellation of the closed forms at small ``|z|``; for real ``L`` the upper
    half circle and the real part suffice.
    """
    lh = lin * dt
    theta = jnp.pi * (jnp.arange(1, _N_CONTOUR + 1, dtype=lh.dtype) - 0.5) / _N_CONTOUR
    z = lh[..., None] + jnp.exp(1j * theta)
    ez = jnp.exp(z)
    ez2 = jnp.exp(z / 2)
    z3 = z**3

    def mean(a):
        return jnp.real(jnp.mean(a, axis=-1)).astype(lh.dtype)

    q = dt * mean((ez2 - 1.0) / z)
    f1 = dt * mean((-4.0 - z + ez * (4.0 - 3.0 * z + z * z)) / z3)
    f2 = dt * mean((2.0 + z + ez * (z - 2.0)) / z3)
    f3 = dt * mean((-4.0 - 3.0 * z - z * z + ez * (4.0 - z)) / z3)
    return jnp.exp(lh), jnp.exp(lh / 2), q, f1, f2, f3


def _etdrk4_step(v, coeffs, nonlin: Callable[[Array], Array]):
    """One ETDRK4 step (Cox & Matthews 2002, eqs. 26-29) in Fourier space."""
    e, e2, q, f1, f2, f3 = coeffs
    nv = nonlin(v)
    a = e2 * v + q * nv
    na = nonlin(a)
    b = e2 * v + q * na
    nb = nonlin(b)
    c = e2 * a + q * (2.0 * nb - nv)
    nc = nonlin(c)
    return e * v + f1 * nv + 2.0 * f2 * (na + nb) + f3 * nc


def _integrate(v0, step, to_phys, n_skip: int, n_frames: int, save_every: int):
    """Run ``n_skip`` steps, then save ``n_frames`` frames ``save_every`` steps apart."""

    def advance(v, n):
        v, _ = jax.lax.scan(lambda s, _: (step(s), None), v, None, length=n)
        return v

    v = advance(v0, n_skip) if n_skip else v0

    def frame(s, _):
        s = advance(s, save_every)
        return s, to_phys(s)

    first = to_phys(v)
    if n_frames == 1:
        return first[None]
    _, rest = jax.lax.scan(frame, v, None, length=n_frames - 1)
    return jnp.concatenate([first[None], rest], axis=0)


def _finite(out):
    # Inside jit: a diverged run raises instead of returning NaN silently.
    return eqx.error_if(
        out,
        ~jnp.all(jnp.isfinite(out)),
        "the PDE solution became non-finite (NaN/inf): reduce the time step or refine the grid",
    )


# --------------------------------------------------------------------------- validation


def _check_field_1d(name: str, u) -> int:
    u = check_array(name, u, ndim=1, dtype="floating")
    n = u.shape[0]
    if n < 4:
        raise ValueError(f"{name} must have at least 4 grid points, got shape {tuple(u.shape)}")
    return n


def _check_field_2d(name: str, u) -> int:
    u = check_array(name, u, ndim=2, dtype="floating")
    n0, n1 = u.shape
    if n0 != n1:
        raise ValueError(f"{name} must be a square (n, n) field, got shape {(n0, n1)}")
    if n0 < 4:
        raise ValueError(f"{name} must have at least 4 grid points per axis, got {(n0, n1)}")
    return n0


def _check_steps(n_steps, save_every) -> tuple[int, int]:
    n_steps = check_int("n_steps", n_steps, min=1)
    save_every = check_int("save_every", save_every, min=1)
    if n_steps % save_every:
        raise ValueError(
            f"save_every must divide n_steps, got n_steps={n_steps}, save_every={save_every}"
        )
    return n_steps, save_every


def _steps_per(name: str, interval: float, inner_dt: float, *, allow_zero: bool = False) -> int:
    """Integer number of ``inner_dt`` steps in ``interval`` (error naming the argument)."""
    steps = round(interval / inner_dt)
    if (steps < 1 and not allow_zero) or abs(steps * inner_dt - interval) > 1e-6 * max(
        interval, inner_dt
    ):
        raise ValueError(
            f"inner_dt must divide {name} into a whole number of steps, got "
            f"{name}={interval}, inner_dt={inner_dt} (ratio {interval / inner_dt})"
        )
    return steps


# --------------------------------------------------------------------------- 1-D solvers


def _burgers_like_nonlin(n: int, length, dtype):
    """``-(1/2) d_x (u^2)`` pseudo-spectrally, 2/3-dealiased (Burgers and KS share it)."""
    k = wavenumbers(n, length, real=True, dtype=dtype)
    mask = dealias_mask(n, real=True)
    g = -0.5j * k * mask

    def nonlin(v):
        u = jnp.fft.irfft(v * mask, n=n)
        return g * jnp.fft.rfft(u * u)

    return k, nonlin


@functools.partial(jax.jit, static_argnames=("n_frames", "save_every", "n_skip"))
def _solve_1d(u0, lin_coef, dt, length, *, n_frames, save_every, n_skip=0):
    # lin_coef = (a2, a4): L_k = a2 k^2 + a4 k^4 (Burgers: (-nu, 0); KS: (1, -1)), traced,
    # so Burgers and KS share one compiled program per shape.
    n = u0.shape[-1]
    k, nonlin = _burgers_like_nonlin(n, length, u0.dtype)
    lin = lin_coef[0] * k**2 + lin_coef[1] * k**4
    coeffs = _etdrk4_coefficients(lin.astype(u0.dtype), jnp.asarray(dt, u0.dtype))
    step = lambda v: _etdrk4_step(v, coeffs, nonlin)
    to_phys = lambda v: jnp.fft.irfft(v, n=n).astype(u0.dtype)
    v0 = jnp.fft.rfft(u0)
    out = _integrate(v0, step, to_phys, n_skip, n_frames, save_every)
    if n_skip == 0:
        out = out.at[0].set(u0)
    return _finite(out)


def burgers_1d(
    u0: Float[Array, " n"],
    *,
    nu: float = 0.01,
    length: float = TWO_PI,
    dt: float = 1e-3,
    n_steps: int,
    save_every: int = 1,
) -> Float[Array, "t n"]:
    """Viscous Burgers ``u_t + u u_x = nu u_xx`` on ``[0, length)``, ETDRK4 + 2/3 rule.

    Returns ``n_steps // save_every + 1`` frames (frame 0 is ``u0``). Resolve the
    shock: its width is ``~ 2 nu / (jump in u)``, so ``nu = 0.01`` with ``O(1)``
    data needs a few hundred to a thousand points on ``[0, 2 pi)``.
    """
    _check_field_1d("u0", u0)
    check_scalar("nu", nu, ge=0.0)
    check_scalar("length", length, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    n_steps, save_every = _check_steps(n_steps, save_every)
    return _solve_1d(
        jnp.asarray(u0),
        (-nu, 0.0),
        dt,
        length,
        n_frames=n_steps // save_every + 1,
        save_every=save_every,
    )


def kuramoto_sivashinsky_1d(
    u0: Float[Array, " n"],
    *,
    length: float = 32.0 * math.pi,
    dt: float = 0.25,
    n_steps: int,
    save_every: int = 1,
) -> Float[Array, "t n"]:
    """Kuramoto-Sivashinsky ``u_t + u u_x + u_xx + u_xxxx = 0``, ETDRK4 + 2/3 rule.

    Defaults are Kassam & Trefethen's benchmark: ``[0, 32 pi)``, ``dt = 1/4``
    (with ``n = 128``). Returns ``n_steps // save_every + 1`` frames.
    """
    _check_field_1d("u0", u0)
    check_scalar("length", length, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    n_steps, save_every = _check_steps(n_steps, save_every)
    return _solve_1d(
        jnp.asarray(u0),
        (1.0, -1.0),
        dt,
        length,
        n_frames=n_steps // save_every + 1,
        save_every=save_every,
    )


# --------------------------------------------------------------------------- wave


@functools.partial(jax.jit, static_argnames=("n_frames", "with_velocity"))
def _wave_solve(u0, v0, c, frame_dt, length, *, n_frames, with_velocity=True):
    n = u0.shape[-1]
    v0 = jnp.zeros_like(u0) if v0 is None else v0
    kx, ky = _k2d(n, length, u0.dtype)
    omega = (c * jnp.sqrt(kx**2 + ky**2)).astype(u0.dtype)
    t = (jnp.arange(n_frames, dtype=u0.dtype) * frame_dt)[:, None, None]
    phase = omega * t
    cos = jnp.cos(phase)
    sin = jnp.sin(phase)
    # sin(w t)/w -> t as w -> 0 (the mean of u drifts with the mean of v).
    safe = jnp.where(omega > 0, omega, 1.0)
    sinc = jnp.where(omega > 0, sin / safe, t)
    uh, vh = jnp.fft.rfft2(u0), jnp.fft.rfft2(v0)
    u = jnp.fft.irfft2(uh * cos + vh * sinc, s=(n, n)).astype(u0.dtype).at[0].set(u0)
    if not with_velocity:
        return u, None
    v = jnp.fft.irfft2(-uh * omega * sin + vh * cos, s=(n, n)).astype(u0.dtype).at[0].set(v0)
    return u, v


def wave_2d(
    u0: Float[Array, "n n"],
    v0: Float[Array, "n n"] | None = None,
    *,
    c: float = 1.0 / 16.0,
    length: float = 2.0,
    dt: float = 0.25,
    n_steps: int,
    save_every: int = 1,
) -> tuple[Float[Array, "t n n"], Float[Array, "t n n"]]:
    """2-D periodic wave equation ``u_tt = c^2 Lap u``, exact in time per Fourier mode.

    ``u0`` is the displacement, ``v0 = u_t(0)`` the velocity (zero if ``None``).
    Returns ``(u, v)``, each with ``n_steps // save_every + 1`` frames at times
    ``j * save_every * dt``. Defaults are MERLIN's wave set (``c = 1/16`` on the
    periodic ``[-1, 1]^2``, i.e. ``length = 2``, frames every ``0.25``). Being
    exact, the result does not depend on how ``dt`` and ``save_every`` split the
    frame spacing.
    """
    n = _check_field_2d("u0", u0)
    u0 = jnp.asarray(u0)
    if v0 is not None:
        _check_field_2d("v0", v0)
        if tuple(v0.shape) != (n, n):
            raise ValueError(f"v0 must have the shape of u0 {(n, n)}, got {tuple(v0.shape)}")
        v0 = jnp.asarray(v0, u0.dtype)
    check_scalar("c", c, ge=0.0)
    check_scalar("length", length, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    n_steps, save_every = _check_steps(n_steps, save_every)
    u, v = _wave_solve(u0, v0, c, dt * save_every, length, n_frames=n_steps // save_every + 1)
    return u, v


def wave_energy(
    u: Float[Array, "*b n n"],
    v: Float[Array, "*b n n"],
    *,
    c: float = 1.0 / 16.0,
    length: float = 2.0,
) -> Float[Array, "*b"]:
    """Spectral wave energy ``(1/2) int (v^2 + c^2 |grad u|^2) dx dy`` (Parseval).

    Conserved mode by mode by :func:`wave_2d` (``|v_k|^2 + c^2 |k|^2 |u_k|^2``).
    """
    check_array("u", u, dtype="floating")
    check_array("v", v, dtype="floating")
    if u.shape != v.shape or len(u.shape) < 2 or u.shape[-1] != u.shape[-2]:
        raise ValueError(
            f"u and v must be square fields of one shape (..., n, n), got {u.shape} and {v.shape}"
        )
    check_scalar("c", c, ge=0.0)
    check_scalar("length", length, gt=0.0)
    n = u.shape[-1]
    k = wavenumbers(n, length, dtype=u.dtype)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    uh = jnp.fft.fft2(u)
    vh = jnp.fft.fft2(v)
    dens = jnp.abs(vh) ** 2 + (c**2) * k2 * jnp.abs(uh) ** 2
    # int f^2 dA = (L/n)^2 sum_x f^2 = (L^2 / n^4) sum_k |f_k|^2.
    return 0.5 * (length**2 / n**4) * jnp.sum(dens, axis=(-2, -1))


# --------------------------------------------------------------------------- Navier-Stokes


def fno_forcing(n: int, length: float = 1.0, *, dtype=jnp.float32) -> Float[Array, "n n"]:
    """The FNO benchmark forcing ``0.1 (sin 2pi(x+y)/L + cos 2pi(x+y)/L)`` on the grid."""
    g = grid_2d(n, length, dtype=dtype)
    s = (TWO_PI / length) * (g[..., 0] + g[..., 1])
    return 0.1 * (jnp.sin(s) + jnp.cos(s))


def _ns_advection(w_hat, kx, ky, inv_k2, mask, n: int, form: str = "basdevant"):
    """Dealiased Fourier coefficients of ``u . grad w`` (``rfft2`` layout).

    ``"basdevant"``: ``(d_xx - d_yy)(u v) + d_xy (v^2 - u^2)`` (Basdevant et al.
    1981, the curl of ``div(u u)``), 2 inverse + 2 forward FFTs; ``"direct"``:
    ``u w_x + v w_y``, 4 + 1 FFTs. With 2/3-truncated inputs the products are
    alias-free, so the two forms agree to round-off.
    """
    wm = w_hat * mask
    psi = wm * inv_k2
    if form == "direct":
        hats = jnp.stack([1j * ky * psi, -1j * kx * psi, 1j * kx * wm, 1j * ky * wm])
        u, v, wx, wy = jnp.fft.irfft2(hats, s=(n, n))
        return mask * jnp.fft.rfft2(u * wx + v * wy)
    # u = d_y psi, v = -d_x psi, in one batched inverse FFT.
    u, v = jnp.fft.irfft2(jnp.stack([1j * ky * psi, -1j * kx * psi]), s=(n, n))
    uv, vv_uu = jnp.fft.rfft2(jnp.stack([u * v, v * v - u * u]))
    return mask * ((ky * ky - kx * kx) * uv - kx * ky * vv_uu)


def _ns_nonlin(n: int, length, f_hat, dtype, form: str = "basdevant"):
    kx, ky = _k2d(n, length, dtype)
    k2 = kx**2 + ky**2
    inv_k2 = jnp.where(k2 > 0, 1.0 / jnp.where(k2 > 0, k2, 1.0), 0.0)
    mask = _mask_2d(n)

    def nonlin(w_hat):
        return f_hat - _ns_advection(w_hat, kx, ky, inv_k2, mask, n, form)

    return k2, nonlin


@functools.partial(jax.jit, static_argnames=("n_frames", "save_every", "n_skip"))
def _ns_solve(w0, f, nu, dt, length, *, n_frames, save_every, n_skip=0):
    # f: None (the FNO forcing), a scalar or an (n, n) field.
    n = w0.shape[-1]
    dtype = w0.dtype
    f = fno_forcing(n, length, dtype=dtype) if f is None else jnp.broadcast_to(f, (n, n))
    k2, nonlin = _ns_nonlin(n, length, jnp.fft.rfft2(f.astype(dtype)), dtype)
    coeffs = _etdrk4_coefficients(-jnp.asarray(nu, dtype) * k2, jnp.asarray(dt, dtype))
    step = lambda v: _etdrk4_step(v, coeffs, nonlin)
    to_phys = lambda v: jnp.fft.irfft2(v, s=(n, n)).astype(dtype)
    out = _integrate(jnp.fft.rfft2(w0), step, to_phys, n_skip, n_frames, save_every)
    if n_skip == 0:
        out = out.at[0].set(w0)
    return _finite(out)


def _check_forcing(forcing, n: int, dtype):
    if forcing is None:
        return None
    forcing = check_array("forcing", forcing, dtype="number")
    if forcing.ndim != 0 and tuple(forcing.shape) != (n, n):
        raise ValueError(
            f"forcing must be None, a scalar or an ({n}, {n}) field like w0, "
            f"got shape {tuple(forcing.shape)}"
        )
    return jnp.asarray(forcing, dtype)


def navier_stokes_2d(
    w0: Float[Array, "n n"],
    *,
    nu: float = 1e-3,
    forcing: Float[Array, "n n"] | float | None = None,
    length: float = 1.0,
    dt: float = 1e-2,
    n_steps: int,
    save_every: int = 1,
) -> Float[Array, "t n n"]:
    """2-D incompressible Navier-Stokes in vorticity form, ETDRK4 + 2/3 rule.

    ``w_t + u . grad w = nu Lap w + f`` on ``[0, length)^2``, ``u = (d_y psi,
    -d_x psi)``, ``-Lap psi = w``. ``forcing=None`` is the FNO forcing
    (:func:`fno_forcing`); pass ``0.0`` for the unforced flow. Returns
    ``n_steps // save_every + 1`` vorticity frames (frame 0 is ``w0``).
    The default ``dt = 1e-2`` is inside the stable range for the FNO data up
    to ``256^2`` (``1/16`` was measured stable at ``64^2``; the limit scales as
    ``1 / (n max|u|)``, see the module docstring).
    """
    n = _check_field_2d("w0", w0)
    check_scalar("nu", nu, ge=0.0)
    check_scalar("length", length, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    n_steps, save_every = _check_steps(n_steps, save_every)
    w0 = jnp.asarray(w0)
    f = _check_forcing(forcing, n, w0.dtype)
    return _ns_solve(
        w0, f, nu, dt, length, n_frames=n_steps // save_every + 1, save_every=save_every
    )


# --------------------------------------------------------------------------- random fields


def _grf_sqrt_eig(n: int, alpha, tau, sigma, length):
    # FNO random_fields.GaussianRF: sqrt_eig = sqrt(2) sigma (4 pi^2 |m|^2 + tau^2)^(-alpha/2);
    # 4 pi^2 |m|^2 = |k|^2 on [0, 1]. The mean mode is zero.
    k = wavenumbers(n, length)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    s = jnp.sqrt(2.0) * sigma * (k2 + tau**2) ** (-alpha / 2.0)
    return jnp.where(k2 > 0, s, 0.0)


@functools.partial(jax.jit, static_argnames=("n",))
def _grf(key, n, alpha, tau, sigma, length):
    s = _grf_sqrt_eig(n, alpha, tau, sigma, length)
    xi = jax.random.normal(key, (2, n, n), jnp.float32)
    # Re sum_k s_k xi_k e^{i k.x} (unnormalised inverse DFT): each mode adds variance s_k^2.
    return jnp.real(jnp.fft.ifft2(s * (xi[0] + 1j * xi[1])) * (n * n)).astype(jnp.float32)


def gaussian_random_field_2d(
    key: jax.Array,
    n: int,
    *,
    alpha: float = 2.5,
    tau: float = 7.0,
    sigma: float | None = None,
    length: float = 1.0,
) -> Float[Array, "n n"]:
    """Periodic mean-zero Gaussian random field ``N(0, sigma^2 (-Lap + tau^2 I)^{-alpha})``.

    The FNO Navier-Stokes initial vorticity (Li et al. 2021, ``random_fields.py``):
    ``w(x) = Re sum_k sqrt(2) sigma (|k|^2 + tau^2)^{-alpha/2} xi_k e^{i k.x}``,
    ``xi_k`` standard complex normal, ``k = 2 pi m / length``, the ``k = 0``
    coefficient zero; ``sigma = None`` is FNO's ``tau^{alpha - 1}`` (``7^1.5``).
    Pointwise variance: ``sum_{k != 0} 2 sigma^2 (|k|^2 + tau^2)^{-alpha}``.
    """
    check_key("key", key)
    n = check_int("n", n, min=2)
    check_scalar("alpha", alpha, gt=0.0)
    check_scalar("tau", tau, gt=0.0)
    if sigma is None:
        sigma = tau ** (alpha - 1.0)
    check_scalar("sigma", sigma, gt=0.0)
    check_scalar("length", length, gt=0.0)
    return _grf(key, n, alpha, tau, sigma, length)


@functools.partial(jax.jit, static_argnames=("n", "n_modes"))
def _random_field_1d(key, n, n_modes, amplitude, decay):
    m = jnp.arange(1, n_modes + 1, dtype=jnp.float32)
    xi = jax.random.normal(key, (2, n_modes), jnp.float32)
    coef = jnp.zeros(n // 2 + 1, jnp.complex64)
    coef = coef.at[1 : n_modes + 1].set(m ** (-decay) * (xi[0] - 1j * xi[1]))
    s = jnp.fft.irfft(coef, n=n)
    return amplitude * s / jnp.sqrt(jnp.mean(s * s))


def random_field_1d(
    key: jax.Array,
    n: int,
    *,
    n_modes: int = 8,
    amplitude: float = 1.0,
    decay: float = 1.0,
) -> Float[Array, " n"]:
    """Random smooth periodic field: a low-mode Fourier series with mean zero.

    ``s(x) = sum_{m=1}^{n_modes} m^{-decay} (a_m cos(2 pi m x / L) + b_m sin(2 pi m x / L))``
    with ``a_m, b_m ~ N(0, 1)``, rescaled to root-mean-square ``amplitude`` on the
    grid (whatever the domain length ``L``: the modes are per domain).
    """
    check_key("key", key)
    n = check_int("n", n, min=4)
    n_modes = check_int("n_modes", n_modes, min=1, max=(n - 1) // 2)
    check_scalar("amplitude", amplitude, gt=0.0)
    check_scalar("decay", decay, ge=0.0)
    return _random_field_1d(key, n, n_modes, amplitude, decay)


def _periodic_bump_1d(x, center, radius, length):
    # Gaussian summed over periodic images: smooth and periodic to round-off
    # (images beyond +-2 periods lie at distance >= 2 length).
    d = jnp.mod(x - center, length)
    shifts = jnp.arange(-2, 3, dtype=x.dtype)[:, None] * length
    return jnp.sum(jnp.exp(-((d[None, :] + shifts) ** 2) / (2.0 * radius**2)), axis=0)


def _bump_2d(x, r, length, amp_range, rad_range):
    # r: four U[0, 1) numbers -> amplitude, width, centre (x, y).
    amp = amp_range[0] + (amp_range[1] - amp_range[0]) * r[0]
    rad = rad_range[0] + (rad_range[1] - rad_range[0]) * r[1]
    gx = _periodic_bump_1d(x, length * r[2], rad, length)
    gy = _periodic_bump_1d(x, length * r[3], rad, length)
    return amp * gx[:, None] * gy[None, :]


@functools.partial(jax.jit, static_argnames=("n", "velocity"))
def _wave_ic(key, n, length, amplitude, radius, velocity, v_amplitude, v_radius):
    # One draw for both bumps (each random-bits program costs compile time).
    r = jax.random.uniform(key, (8,), jnp.float32)
    x = jnp.asarray(np.arange(n) / n, jnp.float32) * length
    u0 = _bump_2d(x, r[:4], length, amplitude, radius)
    if velocity == "zero":
        v0 = jnp.zeros_like(u0)
    else:
        v0 = _bump_2d(x, r[4:], length, (v_amplitude, v_amplitude), (v_radius, v_radius))
    return u0, v0


Velocity = Literal["zero", "bump"]
VELOCITIES = ("zero", "bump")


def _check_range(name: str, value, *, gt: float = 0.0) -> tuple[float, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"{name} must be a (low, high) pair, got {value!r}")
    lo = float(check_scalar(f"{name}[0]", value[0], gt=gt))
    hi = float(check_scalar(f"{name}[1]", value[1], ge=lo))
    return lo, hi


def wave_initial_condition(
    key: jax.Array,
    n: int,
    *,
    length: float = 2.0,
    amplitude: tuple[float, float] = (2.0, 4.0),
    radius: tuple[float, float] = (0.25, 0.30),
    velocity: Velocity = "zero",
    velocity_amplitude: float = 0.5,
    velocity_radius: float = 0.30,
) -> tuple[Float[Array, "n n"], Float[Array, "n n"]]:
    """MERLIN's wave initial condition: a periodic Gaussian bump, zero velocity.

    ``u0 = A exp(-|x - x0|^2 / (2 r^2))`` (summed over periodic images),
    ``A ~ U[amplitude]``, ``r ~ U[radius]``, ``x0`` uniform on the torus (MERLIN:
    ``2 + 2 U``, ``0.25 + 0.05 U``, a random grid roll). ``velocity="bump"`` adds
    MERLIN's optional velocity bump (amplitude 0.5, width 0.3, own position).
    Returns ``(u0, v0)``.
    """
    check_key("key", key)
    n = check_int("n", n, min=4)
    check_scalar("length", length, gt=0.0)
    amplitude = _check_range("amplitude", amplitude, gt=-math.inf)
    radius = _check_range("radius", radius)
    check_choice("velocity", velocity, VELOCITIES)
    check_scalar("velocity_amplitude", velocity_amplitude)
    check_scalar("velocity_radius", velocity_radius, gt=0.0)
    return _wave_ic(
        key, n, length, amplitude, radius, velocity, velocity_amplitude, velocity_radius
    )


# --------------------------------------------------------------------------- datasets


def _traj_keys(key, n_traj: int):
    # Trajectory i depends on (key, i) only: the first m of n_traj trajectories
    # are the m trajectories of a smaller call with the same key.
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(n_traj))


def _map(fn, key, n_traj: int, batch_size: int | None):
    keys = _traj_keys(key, n_traj)
    if batch_size is None:
        return jax.vmap(fn)(keys)
    return jax.lax.map(fn, keys, batch_size=batch_size)


def _check_dataset(key, n_traj, n_grid, n_snapshots, batch_size):
    check_key("key", key)
    n_traj = check_int("n_traj", n_traj, min=1)
    n_grid = check_int("n_grid", n_grid, min=4)
    n_snapshots = check_int("n_snapshots", n_snapshots, min=1)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, min=1)
    return n_traj, n_grid, n_snapshots, batch_size


@functools.partial(
    jax.jit,
    static_argnames=("n_traj", "n", "n_frames", "velocity", "with_velocity", "batch_size"),
)
def _wave_dataset(
    key,
    c,
    dt,
    length,
    amplitude,
    radius,
    *,
    n_traj,
    n,
    n_frames,
    velocity,
    with_velocity,
    batch_size,
):
    def one(k):
        u0, v0 = _wave_ic(k, n, length, amplitude, radius, velocity, 0.5, 0.3)
        return _wave_solve(u0, v0, c, dt, length, n_frames=n_frames, with_velocity=with_velocity)

    return _map(one, key, n_traj, batch_size)


def wave_dataset(
    key: jax.Array,
    n_traj: int,
    n_grid: int,
    n_snapshots: int,
    *,
    c: float = 1.0 / 16.0,
    dt: float = 0.25,
    length: float = 2.0,
    amplitude: tuple[float, float] = (2.0, 4.0),
    radius: tuple[float, float] = (0.25, 0.30),
    velocity: Velocity = "zero",
    return_velocity: bool = False,
    batch_size: int | None = None,
) -> Float[Array, "b t n n"] | tuple[Float[Array, "b t n n"], Float[Array, "b t n n"]]:
    """``n_traj`` wave trajectories, ``n_snapshots`` frames ``dt`` apart from ``t = 0``.

    Initial conditions from :func:`wave_initial_condition` (trajectory ``i`` uses
    ``jax.random.fold_in(key, i)``). Defaults are MERLIN's wave set (``c = 1/16``,
    ``[-1, 1]^2``, ``dt = 0.25``; MERLIN stores 161 frames, ``t = 0..40``, at
    ``n_grid = 64``). Returns the displacement ``u`` ``(b, t, n, n)``, or
    ``(u, v)`` with ``return_velocity`` (MERLIN's set has both channels).
    ``batch_size`` bounds memory (``lax.map`` over trajectories in batches).
    Because the bumps are sampled from their continuous formula, the datasets
    at ``n`` and ``2 n`` with one key hold the same trajectories (to ~1e-7).
    """
    n_traj, n_grid, n_snapshots, batch_size = _check_dataset(
        key, n_traj, n_grid, n_snapshots, batch_size
    )
    check_scalar("c", c, ge=0.0)
    check_scalar("dt", dt, gt=0.0)
    check_scalar("length", length, gt=0.0)
    amplitude = _check_range("amplitude", amplitude, gt=-math.inf)
    radius = _check_range("radius", radius)
    check_choice("velocity", velocity, VELOCITIES)
    if not isinstance(return_velocity, bool):
        raise TypeError(f"return_velocity must be a bool, got {return_velocity!r}")
    u, v = _wave_dataset(
        key,
        c,
        dt,
        length,
        amplitude,
        radius,
        n_traj=n_traj,
        n=n_grid,
        n_frames=n_snapshots,
        velocity=velocity,
        with_velocity=return_velocity,
        batch_size=batch_size,
    )
    return (u, v) if return_velocity else u


@functools.partial(
    jax.jit,
    static_argnames=("n_traj", "n", "n_frames", "every", "skip", "oversample", "batch_size"),
)
def _ns_dataset(
    key,
    f,
    nu,
    dt,
    length,
    alpha,
    tau,
    sigma,
    *,
    n_traj,
    n,
    n_frames,
    every,
    skip,
    oversample,
    batch_size,
):
    def one(k):
        w0 = _grf(k, n, alpha, tau, sigma, length)
        w = _ns_solve(w0, f, nu, dt, length, n_frames=n_frames, save_every=every, n_skip=skip)
        return w[:, ::oversample, ::oversample]

    return _map(one, key, n_traj, batch_size)


def navier_stokes_dataset(
    key: jax.Array,
    n_traj: int,
    n_grid: int,
    n_snapshots: int,
    *,
    nu: float = 1e-3,
    snapshot_dt: float = 1.0,
    inner_dt: float | None = None,
    t_start: float = 0.0,
    forcing: Float[Array, "n n"] | float | None = None,
    alpha: float = 2.5,
    tau: float = 7.0,
    sigma: float | None = None,
    length: float = 1.0,
    oversample: int = 1,
    batch_size: int | None = None,
) -> Float[Array, "b t n n"]:
    """``n_traj`` vorticity trajectories of the FNO Navier-Stokes benchmark.

    Initial vorticity :func:`gaussian_random_field_2d` (``alpha, tau, sigma``;
    trajectory ``i`` uses ``jax.random.fold_in(key, i)``), FNO forcing,
    ``nu = 1e-3``, frames every ``snapshot_dt = 1`` (FNO/MERLIN's
    ``ns_V1e-3_N5000_T50``: 50 frames at ``t = 1..50``, i.e. ``t_start = 1``;
    here ``t_start = 0`` keeps the initial condition as frame 0). The solver runs
    at ``n_grid * oversample`` with step ``inner_dt`` and the frames are strided
    to ``n_grid`` (FNO solves at 256 and strides to 64). ``forcing`` is given on
    the solver grid. ``inner_dt`` must divide ``snapshot_dt`` and ``t_start``;
    ``None`` takes the largest step ``<= 4 / (n_grid * oversample)`` that divides
    ``snapshot_dt`` (``1/16`` at ``64^2``; see the module docstring for how it was
    measured).

    The random field depends on the grid size, so for two resolutions of the
    same trajectories generate once at the fine one and :func:`subsample`.
    """
    n_traj, n_grid, n_snapshots, batch_size = _check_dataset(
        key, n_traj, n_grid, n_snapshots, batch_size
    )
    check_scalar("nu", nu, ge=0.0)
    check_scalar("snapshot_dt", snapshot_dt, gt=0.0)
    check_scalar("t_start", t_start, ge=0.0)
    check_scalar("alpha", alpha, gt=0.0)
    check_scalar("tau", tau, gt=0.0)
    if sigma is None:
        sigma = tau ** (alpha - 1.0)
    check_scalar("sigma", sigma, gt=0.0)
    check_scalar("length", length, gt=0.0)
    oversample = check_int("oversample", oversample, min=1)
    n_solve = n_grid * oversample
    if inner_dt is None:
        # Advective CFL: max(|u| + |v|) k_max dt ~ 3 at 64^2 (|u|, |v| <= 0.25,
        # k_max = 2 pi 21 after the 2/3 rule); scales as 1/n.
        inner_dt = snapshot_dt / math.ceil(snapshot_dt / (4.0 / n_solve) - 1e-9)
    check_scalar("inner_dt", inner_dt, gt=0.0)
    every = _steps_per("snapshot_dt", snapshot_dt, inner_dt)
    skip = _steps_per("t_start", t_start, inner_dt, allow_zero=True)
    f = _check_forcing(forcing, n_solve, jnp.float32)
    return _ns_dataset(
        key,
        f,
        nu,
        inner_dt,
        length,
        alpha,
        tau,
        sigma,
        n_traj=n_traj,
        n=n_solve,
        n_frames=n_snapshots,
        every=every,
        skip=skip,
        oversample=oversample,
        batch_size=batch_size,
    )


@functools.partial(
    jax.jit,
    static_argnames=("n_traj", "n", "n_frames", "every", "skip", "n_modes", "batch_size"),
)
def _dataset_1d(
    key,
    lin,
    dt,
    length,
    amplitude,
    decay,
    *,
    n_traj,
    n,
    n_frames,
    every,
    skip,
    n_modes,
    batch_size,
):
    def one(k):
        u0 = _random_field_1d(k, n, n_modes, amplitude, decay)
        return _solve_1d(u0, lin, dt, length, n_frames=n_frames, save_every=every, n_skip=skip)

    return _map(one, key, n_traj, batch_size)


def burgers_dataset(
    key: jax.Array,
    n_traj: int,
    n_grid: int,
    n_snapshots: int,
    *,
    nu: float = 0.01,
    length: float = TWO_PI,
    snapshot_dt: float = 0.1,
    inner_dt: float = 1e-3,
    t_start: float = 0.0,
    n_modes: int = 4,
    amplitude: float = 0.5,
    decay: float = 1.0,
    batch_size: int | None = None,
) -> Float[Array, "b t n"]:
    """Viscous Burgers trajectories from :func:`random_field_1d` initial conditions.

    Frames every ``snapshot_dt`` from ``t = t_start``; trajectory ``i`` uses
    ``jax.random.fold_in(key, i)``. At ``nu = 0.01`` and the default amplitude
    the shocks are ``~ 0.02`` wide: use ``n_grid >= 256`` on ``[0, 2 pi)``.
    """
    n_traj, n_grid, n_snapshots, batch_size = _check_dataset(
        key, n_traj, n_grid, n_snapshots, batch_size
    )
    check_scalar("nu", nu, ge=0.0)
    check_scalar("length", length, gt=0.0)
    check_scalar("snapshot_dt", snapshot_dt, gt=0.0)
    check_scalar("inner_dt", inner_dt, gt=0.0)
    n_modes = check_int("n_modes", n_modes, min=1, max=(n_grid - 1) // 2)
    check_scalar("amplitude", amplitude, gt=0.0)
    check_scalar("decay", decay, ge=0.0)
    check_scalar("t_start", t_start, ge=0.0)
    every = _steps_per("snapshot_dt", snapshot_dt, inner_dt)
    skip = _steps_per("t_start", t_start, inner_dt, allow_zero=True)
    return _dataset_1d(
        key,
        (-nu, 0.0),
        inner_dt,
        length,
        amplitude,
        decay,
        n_traj=n_traj,
        n=n_grid,
        n_frames=n_snapshots,
        every=every,
        skip=skip,
        n_modes=n_modes,
        batch_size=batch_size,
    )


def ks_dataset(
    key: jax.Array,
    n_traj: int,
    n_grid: int,
    n_snapshots: int,
    *,
    length: float = 32.0 * math.pi,
    snapshot_dt: float = 1.0,
    inner_dt: float = 0.25,
    burn_in: float = 100.0,
    n_modes: int = 8,
    amplitude: float = 1.0,
    decay: float = 1.0,
    batch_size: int | None = None,
) -> Float[Array, "b t n"]:
    """Kuramoto-Sivashinsky trajectories on the attractor.

    Random :func:`random_field_1d` initial conditions (trajectory ``i`` uses
    ``jax.random.fold_in(key, i)``) are run for ``burn_in`` time units (the
    transient onto the chaotic attractor) before the first of ``n_snapshots``
    frames ``snapshot_dt`` apart. Defaults: Kassam & Trefethen's ``[0, 32 pi)``
    and ``dt = 1/4`` (with ``n_grid = 128``).
    """
    n_traj, n_grid, n_snapshots, batch_size = _check_dataset(
        key, n_traj, n_grid, n_snapshots, batch_size
    )
    check_scalar("length", length, gt=0.0)
    check_scalar("snapshot_dt", snapshot_dt, gt=0.0)
    check_scalar("inner_dt", inner_dt, gt=0.0)
    check_scalar("burn_in", burn_in, ge=0.0)
    n_modes = check_int("n_modes", n_modes, min=1, max=(n_grid - 1) // 2)
    check_scalar("amplitude", amplitude, gt=0.0)
    check_scalar("decay", decay, ge=0.0)
    every = _steps_per("snapshot_dt", snapshot_dt, inner_dt)
    skip = _steps_per("burn_in", burn_in, inner_dt, allow_zero=True)
    return _dataset_1d(
        key,
        (1.0, -1.0),
        inner_dt,
        length,
        amplitude,
        decay,
        n_traj=n_traj,
        n=n_grid,
        n_frames=n_snapshots,
        every=every,
        skip=skip,
        n_modes=n_modes,
        batch_size=batch_size,
    )
