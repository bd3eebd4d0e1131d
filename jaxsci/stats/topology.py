r"""Blessing of dimensionality for persistent homology: random function models, dot-product
concentration, Vietoris-Rips persistence (through ripser) and the flat-torus isometry.

Paper: the ICML 2026 paper on when high dimensionality helps (only its abstract was
available). Data follow a *random function model*

    ``Y_i = X(Z_i) + E_i``,   ``i = 1..n``,   ``Y_i in R^p``,                    (1)

with ``Z_i`` latent points of a manifold (here a circle or a flat torus), ``X`` a random
function into ``R^p`` and ``E_i`` noise. Three notions of dimension: the *effective
dimension* ``p_eff = tr(Sigma) / ||Sigma||_op`` of the feature covariance ``Sigma``
(2), the correlation rank ``r`` (the number of terms of the kernel ``f`` below) and the
latent dimension ``d`` (1 or 2 here). A generalised Hanson-Wright inequality gives

    ``max_{i,j} |<Y_i, Y_j> / p - f(Z_i, Z_j) - s delta_ij| = O_P(sqrt(log n / p_eff))``   (3)

with ``f(z, z') = E <X(z), X(z')> / p`` and ``s`` the noise's per-feature variance, so
the normalised squared distances concentrate on ``2 (f(z,z) - f(z,z')) + 2 s`` for
``i != j``: the latent kernel metric plus a *uniform shift*. A uniform shift of the
squared distances keeps the order of the Rips filtration's edges, so Vietoris-Rips
persistence of the data converges to that of the latent kernel metric once
``p_eff in omega(log n)``.

What is here
------------
* Latents: :func:`circle_latents` (evenly spaced), :func:`sample_circle`,
  :func:`sample_torus` (lattice coordinates ``u in [0, 1)^2`` of the hexagonal lattice
  ``a1 = (1, 0)``, ``a2 = (1/2, sqrt 3 / 2)``), their metrics :func:`circle_distance`
  and :func:`torus_distance` (the flat hexagonal torus ``R^2 / Lambda``).
* Random functions (values under :class:`AbstractRandomFunction`):
  :class:`FourierCircle` ``X_k(z) = sum_m sqrt(w_m) (a_km cos mz + b_km sin mz)``, ``a, b``
  iid ``N(0, 1)``, with ``f(z, z') = sum_m w_m cos m(z - z')``; :class:`GridCells`, the
  simulated grid-cell population: cell ``k`` has a phase ``phi_k`` uniform on the torus
  and the hexagonal tuning curve
  ``h(u) = exp(kappa ((cos 2 pi u_1 + cos 2 pi u_2 + cos 2 pi (u_1 + u_2)) / 3 - 1))``,
  three plane waves at 60 degrees (the reciprocal vectors ``b1``, ``b2``, ``b1 + b2``), so
  ``f(z, z') = E_phi h(z - phi) h(z' - phi)`` (a quadrature on the torus, exact to
  rounding for smooth ``h``).
* Noise (values under :class:`AbstractNoise`): :class:`GaussianNoise` (``s = sigma^2``),
  :class:`PoissonNoise` (``Y = N / rate``, ``N ~ Poisson(rate X)``: ``s = E h / rate``).
* Effective dimension: every feature ``k`` is scaled by ``c_k`` (``Y_ik = c_k * noisy
  X_ik``), so ``Sigma = diag(c^2)`` up to a constant and ``p_eff = sum c^2 / max c^2``
  (:func:`effective_dimension`). :func:`feature_scales` gives the flat-top profile
  ``c_k^2 = (p / p_eff) clip(p_eff - k, 0, 1)`` (our choice: exact ``p_eff`` for any real
  ``p_eff in [1, p]``, mean ``c^2 = 1`` so ``/p`` normalises, and traced in ``p_eff``: one
  compiled program sweeps ``p_eff`` at a fixed ``p``). :func:`estimate_effective_dimension`
  estimates it from samples sharing a latent (noise residuals, repeated trials).
* :func:`simulate` draws (1); :func:`expected_gram` is ``f(Z_i, Z_j) + s delta_ij``;
  :func:`limit_distances` the ``p -> infinity`` distances.
* Memory-bounded blockwise :func:`gram` and :func:`pairwise_distances`: ``lax.map`` over
  row blocks of ``block_size`` rows (``O(block_size * n + n * p)`` memory, never the
  ``n x n x p`` of a broadcast difference; squared distances from the Gram identity
  ``|y_i|^2 + |y_j|^2 - 2 <y_i, y_j>``, clipped at 0).
* :func:`dot_product_error`: the left side of (3).
* :func:`rips_persistence`: Vietoris-Rips persistence of a distance matrix by ripser
  (Z/2 coefficients), through ``jax.pure_callback`` so it runs inside ``jit`` and ``vmap``
  (sequentially, one ripser call per matrix); :class:`Diagrams` keeps the ``n_bars``
  longest bars of each dimension. No gradient: the callback has none (``grad`` raises).
* Summaries: :func:`bar_persistence` (sorted lengths), :func:`top_persistence`,
  :func:`persistence_gap` (the ``k``-th longest bar minus the next), :func:`betti_numbers`
  at a scale (bars with ``birth <= scale < death``, among the kept ones).
* :func:`isometry_score`: the ``R^2`` of the least-squares line of squared data distances
  against squared flat-torus distances over the pairs within ``radius`` on the torus (our
  choice: squared distances because the uniform shift is additive there and the
  intercept absorbs it; local pairs because a flat torus in ``R^p`` can be isometric only
  locally; the abstract names no regression).

Every numerical argument a researcher would sweep (``p_eff``, ``sigma``, ``rate``,
``kappa``, the harmonic weights, ``threshold``, ``scale``, ``radius``) is a traced array;
``n``, ``p``, ``block_size``, ``maxdim``, ``n_bars`` are static.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.stats import topology as tp
>>> z = tp.circle_latents(12)
>>> y = tp.simulate(tp.FourierCircle(), tp.GaussianNoise(0.1), z, jax.random.key(0), p=512)
>>> d = tp.pairwise_distances(y, scale=512.0)
>>> dg = tp.rips_persistence(d, maxdim=1, n_bars=4)
>>> tp.betti_numbers(dg, 0.9 * tp.top_persistence(dg, 1) + dg.births[1, 0]).shape
(2,)
"""

from __future__ import annotations

import abc
import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxsci.core.validation import as_array, check_array, check_int, check_key, check_scalar

__all__ = [
    "LATTICE",
    "AbstractRandomFunction",
    "FourierCircle",
    "GridCells",
    "AbstractNoise",
    "GaussianNoise",
    "PoissonNoise",
    "Diagrams",
    "circle_latents",
    "sample_circle",
    "sample_torus",
    "circle_distance",
    "torus_distance",
    "feature_scales",
    "effective_dimension",
    "estimate_effective_dimension",
    "simulate",
    "expected_gram",
    "limit_distances",
    "gram",
    "pairwise_distances",
    "dot_product_error",
    "rips_persistence",
    "bar_persistence",
    "top_persistence",
    "persistence_gap",
    "betti_numbers",
    "isometry_score",
]

# The hexagonal lattice of grid-cell periodicity (spacing 1): rows a1, a2.
LATTICE = np.array([[1.0, 0.0], [0.5, math.sqrt(3.0) / 2.0]])


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _float(x: Any, name: str = "value") -> Array:
    """A floating JAX array, converted once (Python numbers and sequences become JAX's
    default float without the float64 warning; NumPy float64 arrays warn once)."""
    if _is_tracer(x):
        return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(float)
    if isinstance(x, int | float | tuple | list) and not isinstance(x, bool):
        try:
            return jnp.asarray(x, dtype=jnp.zeros((), float).dtype)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a real number or array, got {x!r}") from exc
    return as_array(name, x)


def _positive(name: str):
    def conv(x):
        return _float(x, name)

    def check(value):
        if _is_tracer(value):
            return
        arr = np.asarray(value)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {value}")
        if np.any(arr <= 0):
            raise ValueError(f"{name} must be > 0, got {value}")

    return conv, check


def _check_finite_in_jit(name: str, x: Array) -> Array:
    """``x`` unchanged; raises inside ``jit`` when it holds NaN or inf."""
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"{name} must be finite (NaN or inf "
                        "found)")


# --------------------------------------------------------------------------- latents


def circle_latents(n: int) -> Float[Array, " n"]:
    """``n`` evenly spaced angles ``2 pi i / n`` on the circle."""
    n = check_int("n", n, min=2)
    return jnp.arange(n, dtype=jnp.zeros((), float).dtype) * (2 * jnp.pi / n)


def sample_circle(key: jax.Array, n: int) -> Float[Array, " n"]:
    """``n`` angles uniform on ``[0, 2 pi)``."""
    check_key("key", key)
    n = check_int("n", n, min=2)
    return jax.random.uniform(key, (n,), maxval=2 * jnp.pi)


def sample_torus(key: jax.Array, n: int) -> Float[Array, "n 2"]:
    """``n`` points uniform on the flat torus, in lattice coordinates ``[0, 1)^2``."""
    check_key("key", key)
    n = check_int("n", n, min=2)
    return jax.random.uniform(key, (n, 2))


def circle_distance(a: Float[ArrayLike, " n"], b: Float[ArrayLike, " m"]) -> Float[Array, "n m"]:
    """Arc-length distances ``min(|a - b| mod 2 pi, 2 pi - ...)`` on the unit circle."""
    a, b = _float(a, "a"), _float(b, "b")
    check_array("a", a, ndim=1)
    check_array("b", b, ndim=1)
    d = jnp.mod(a[:, None] - b[None, :], 2 * jnp.pi)
    return jnp.minimum(d, 2 * jnp.pi - d)


def torus_distance(u: Float[ArrayLike, "n 2"], v: Float[ArrayLike, "m 2"]) -> Float[Array, "n m"]:
    """Geodesic distances on the flat hexagonal torus ``R^2 / Lambda`` (:data:`LATTICE`).

    ``u``, ``v`` are lattice coordinates; the displacement is wrapped to ``[-1/2, 1/2)^2``
    and the shortest of its nine lattice translates is taken (enough for this reduced
    basis). The torus' diameter is ``1 / sqrt 3``.
    """
    u, v = _float(u, "u"), _float(v, "v")
    check_array("u", u, shape=(None, 2))
    check_array("v", v, shape=(None, 2))
    return _torus_distance(u, v)


@jax.jit
def _torus_distance(u, v):
    du = u[:, None, :] - v[None, :, :]
    du = du - jnp.round(du)
    shifts = jnp.asarray([[i, j] for i in (-1, 0, 1) for j in (-1, 0, 1)], du.dtype)
    x = (du[:, :, None, :] + shifts) @ jnp.asarray(LATTICE, du.dtype)
    return jnp.sqrt(jnp.min(jnp.sum(x * x, -1), -1))


# --------------------------------------------------------------------------- random functions


class AbstractRandomFunction(eqx.Module):
    """A random function ``X: latent -> R^p`` of model (1), with its kernel ``f``.

    Subclasses give ``sample`` (one realisation's ``p`` features at the latents),
    ``kernel`` (``f(z, z') = E <X(z), X(z')> / p``), ``mean`` (``E X_k(Z)``, ``Z``
    uniform: the Poisson noise's shift) and ``latent_distance`` (the latent metric).
    """

    @abc.abstractmethod
    def sample(self, key: jax.Array, z: Array, p: int) -> Float[Array, "n p"]:
        """``X_k(z_i)`` for one realisation of ``p`` features."""

    @abc.abstractmethod
    def kernel(self, z: Array, w: Array) -> Float[Array, "n m"]:
        """``f(z_i, w_j)``."""

    @abc.abstractmethod
    def mean(self) -> Float[Array, ""]:
        """``E X_k(Z)`` over the feature randomness and a uniform latent."""

    @abc.abstractmethod
    def latent_distance(self, z: Array, w: Array) -> Float[Array, "n m"]:
        """The latent manifold's geodesic distance."""

    @abc.abstractmethod
    def check_latents(self, z: Array) -> Array:
        """``z`` checked for shape (trace time) and finiteness; returned as floats."""


_W_CONV, _W_CHECK = _positive("weights")


class FourierCircle(AbstractRandomFunction):
    """Gaussian random Fourier features on the circle (correlation rank ``2 M``).

    ``X_k(z) = sum_{m=1}^M sqrt(w_m) (a_km cos(m z) + b_km sin(m z))``, ``a, b ~ N(0, 1)``
    iid, so ``f(z, z') = sum_m w_m cos(m (z - z'))``. ``weights`` (``w``, traced, > 0)
    defaults to ``(1,)``: the latent kernel metric is then the chord metric of a circle.
    """

    weights: Float[Array, " m"] = eqx.field(default=(1.0,), converter=_W_CONV)

    def __check_init__(self):
        if np.ndim(self.weights) < 1 or np.shape(self.weights)[-1] < 1:
            raise ValueError(f"weights must be a 1-D array of at least one harmonic weight, "
                             f"got shape {np.shape(self.weights)}")
        _W_CHECK(self.weights)

    def _harmonics(self, z):
        m = jnp.arange(1, self.weights.shape[-1] + 1, dtype=z.dtype)
        return m * z[:, None]

    def sample(self, key, z, p):
        ka, kb = jax.random.split(key)
        m = self.weights.shape[-1]
        a = jax.random.normal(ka, (m, p), z.dtype)
        b = jax.random.normal(kb, (m, p), z.dtype)
        amp = jnp.sqrt(self.weights)[:, None]
        t = self._harmonics(z)
        return jnp.cos(t) @ (amp * a) + jnp.sin(t) @ (amp * b)

    def kernel(self, z, w):
        m = jnp.arange(1, self.weights.shape[-1] + 1, dtype=z.dtype)
        return jnp.cos((z[:, None] - w[None, :])[..., None] * m) @ self.weights

    def mean(self):
        return jnp.zeros((), self.weights.dtype)

    def latent_distance(self, z, w):
        return circle_distance(z, w)

    def check_latents(self, z):
        z = _float(z, "z")
        check_array("z", z, ndim=1)
        return z


_K_CONV, _K_CHECK = _positive("kappa")


class GridCells(AbstractRandomFunction):
    """A simulated grid-cell population on the flat hexagonal torus.

    Cell ``k`` has a phase ``phi_k`` uniform on the torus and fires at rate
    ``h(z - phi_k)``, ``h(u) = exp(kappa (g(u) - 1))``, ``g(u) = (cos 2 pi u_1 +
    cos 2 pi u_2 + cos 2 pi (u_1 + u_2)) / 3`` in lattice coordinates: three plane waves
    at 60 degrees, peak rate 1 at ``u = 0``. ``kappa`` (traced, > 0) sharpens the bumps.
    ``f(z, z') = int h(z - phi) h(z' - phi) dphi`` by the trapezoid rule on a
    ``quadrature x quadrature`` grid of phases (static; spectrally accurate for periodic
    ``h``).
    """

    kappa: Float[Array, ""] = eqx.field(default=2.0, converter=_K_CONV)
    quadrature: int = eqx.field(default=48, static=True)

    def __check_init__(self):
        _K_CHECK(self.kappa)
        check_int("quadrature", self.quadrature, min=4)

    def tuning(self, u: Float[Array, "... 2"]) -> Float[Array, "..."]:
        """``h(u)`` at lattice-coordinate displacements ``u``."""
        t = 2 * jnp.pi * u
        g = (jnp.cos(t[..., 0]) + jnp.cos(t[..., 1]) + jnp.cos(t[..., 0] + t[..., 1])) / 3.0
        return jnp.exp(self.kappa * (g - 1.0))

    def _phases(self, dtype):
        q = jnp.arange(self.quadrature, dtype=dtype) / self.quadrature
        return jnp.stack(jnp.meshgrid(q, q, indexing="ij"), -1).reshape(-1, 2)

    def sample(self, key, z, p):
        phi = jax.random.uniform(key, (p, 2), z.dtype)
        return self.tuning(z[:, None, :] - phi[None, :, :])

    def kernel(self, z, w):
        phi = self._phases(z.dtype)
        hz = self.tuning(z[:, None, :] - phi)
        hw = self.tuning(w[:, None, :] - phi)
        return hz @ hw.T / phi.shape[0]

    def mean(self):
        phi = self._phases(self.kappa.dtype)
        return jnp.mean(self.tuning(phi))

    def latent_distance(self, z, w):
        return torus_distance(z, w)

    def check_latents(self, z):
        z = _float(z, "z")
        check_array("z", z, shape=(None, 2))
        return z


# --------------------------------------------------------------------------- noise


class AbstractNoise(eqx.Module):
    """Noise ``E`` of model (1): ``sample`` returns the noisy features, ``shift`` the
    per-feature variance ``s`` that (3) adds on the diagonal of the Gram matrix."""

    @abc.abstractmethod
    def sample(self, key: jax.Array, x: Float[Array, "n p"]) -> Float[Array, "n p"]:
        """Noisy observation of the features ``x``."""

    @abc.abstractmethod
    def shift(self, fn: AbstractRandomFunction) -> Float[Array, ""]:
        """``s = E |E_i|^2 / p`` (averaged over features and a uniform latent)."""


_S_CONV, _ = _positive("sigma")


class GaussianNoise(AbstractNoise):
    """``Y = X + sigma N(0, I)``; ``s = sigma^2``. ``sigma`` traced, ``>= 0``."""

    sigma: Float[Array, ""] = eqx.field(default=0.5, converter=_S_CONV)

    def __check_init__(self):
        if not _is_tracer(self.sigma):
            arr = np.asarray(self.sigma)
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(f"sigma must be finite and >= 0, got {self.sigma}")

    def sample(self, key, x):
        return x + self.sigma * jax.random.normal(key, x.shape, x.dtype)

    def shift(self, fn):
        return self.sigma**2


_R_CONV, _R_CHECK = _positive("rate")


class PoissonNoise(AbstractNoise):
    """Spike counts: ``Y = N / rate`` with ``N ~ Poisson(rate * max(X, 0))`` (``rate`` the
    expected count at unit activity, traced, > 0). Unbiased for non-negative ``X`` (grid
    cells), with ``s = E X / rate``. Not differentiable in ``rate`` (counts are integers).
    """

    rate: Float[Array, ""] = eqx.field(default=5.0, converter=_R_CONV)

    def __check_init__(self):
        _R_CHECK(self.rate)

    def sample(self, key, x):
        lam = self.rate * jnp.maximum(x, 0.0)
        return jax.random.poisson(key, lam, x.shape).astype(x.dtype) / self.rate

    def shift(self, fn):
        return fn.mean() / self.rate


# --------------------------------------------------------------------------- dimension


def feature_scales(p: int, p_eff: float | Float[Array, ""]) -> Float[Array, " p"]:
    """Feature scales ``c`` with ``sum c^2 / max c^2 = p_eff`` exactly and mean ``c^2 = 1``.

    The flat-top profile ``c_k^2 = (p / p_eff) clip(p_eff - k, 0, 1)``, ``k = 0..p-1``:
    ``floor(p_eff)`` equal features, one partial, the rest zero. ``p_eff`` (traced, in
    ``[1, p]``) may be swept with ``vmap`` at a fixed ``p``; differentiable almost
    everywhere.
    """
    p = check_int("p", p, min=1)
    check_scalar("p_eff", p_eff, ge=1.0, le=float(p))
    pe = _float(p_eff, "p_eff")
    pe = eqx.error_if(pe, (pe < 1) | (pe > p), "p_eff must be in [1, p]")
    k = jnp.arange(p, dtype=pe.dtype)
    c2 = p / pe * jnp.clip(pe - k, 0.0, 1.0)
    # sqrt with a finite (zero) gradient for the switched-off features.
    return jnp.where(c2 > 0, jnp.sqrt(jnp.where(c2 > 0, c2, 1.0)), 0.0)


def effective_dimension(cov: Float[ArrayLike, "p ..."]) -> Float[Array, ""]:
    """``p_eff = tr(Sigma) / ||Sigma||_op`` (2).

    Args:
      cov: a symmetric positive semi-definite ``(p, p)`` matrix, or a ``(p,)`` vector of
        variances (a diagonal ``Sigma``).

    Returns:
      ``p_eff`` in ``[1, rank(Sigma)]``; traced and differentiable where the top
      eigenvalue is simple.
    """
    cov = _float(cov, "cov")
    if cov.ndim == 1:
        return jnp.sum(cov) / jnp.max(cov)
    check_array("cov", cov, ndim=2)
    if cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square matrix or a vector, got shape {cov.shape}")
    return jnp.trace(cov) / jnp.linalg.eigvalsh(cov)[-1]


def estimate_effective_dimension(y: Float[ArrayLike, "n p"]) -> Float[Array, ""]:
    """``p_eff`` of the sample covariance ``S`` of the rows of ``y``: ``tr(S) / ||S||_op``.

    ``Sigma`` in (2) is the covariance of the features' randomness at a fixed latent (the
    random function's and the noise's), not the covariance across latents (which the
    low-rank signal dominates: the correlation rank). So pass samples that share a
    latent: residuals ``Y - E[Y | Z]`` from repeated trials, or draws of the noise.
    ``||S||_op`` is the top squared singular value of the centred ``y`` (from the smaller
    of its two Gram matrices). Consistent as ``n -> infinity``; for finite ``n`` the
    Marchenko-Pastur edge biases it low by about ``(1 + sqrt(p_eff / n))^-2``.
    """
    y = _float(y, "y")
    check_array("y", y, ndim=2)
    if y.shape[0] < 2:
        raise ValueError(f"y must have at least 2 samples (rows), got shape {y.shape}")
    yc = y - jnp.mean(y, axis=0)
    small = yc @ yc.T if y.shape[0] <= y.shape[1] else yc.T @ yc
    return jnp.trace(small) / jnp.linalg.eigvalsh(small)[-1]


# --------------------------------------------------------------------------- simulation


def _check_model(fn, noise):
    if not isinstance(fn, AbstractRandomFunction):
        raise TypeError(f"fn must be an AbstractRandomFunction (FourierCircle(), GridCells()), "
                        f"got {type(fn).__name__}")
    if not isinstance(noise, AbstractNoise):
        raise TypeError(f"noise must be an AbstractNoise (GaussianNoise(sigma), "
                        f"PoissonNoise(rate)), got {type(noise).__name__}")


def simulate(
    fn: AbstractRandomFunction,
    noise: AbstractNoise,
    z: Float[ArrayLike, "n ..."],
    key: jax.Array,
    p: int,
    scales: Float[ArrayLike, " p"] | None = None,
) -> Float[Array, "n p"]:
    """Draw ``Y_ik = c_k * noise(X_k(Z_i))``, model (1) with feature scales ``c``.

    Args:
      fn: the random function (its parameters traced).
      noise: the noise (its parameters traced).
      z: latents, ``(n,)`` angles for :class:`FourierCircle`, ``(n, 2)`` lattice
        coordinates for :class:`GridCells`.
      key: a ``jax.random`` key (the function and the noise use independent halves).
      p: the number of features (static).
      scales: ``(p,)`` feature scales ``c`` (traced; :func:`feature_scales`); ``None``:
        all ones, ``p_eff = p``.

    Returns:
      ``(n, p)`` data with ``E <Y_i, Y_j> / p = f(Z_i, Z_j) + s delta_ij`` when
      ``mean(c^2) = 1``. Vmappable over ``key``, ``scales`` and the parameters;
      differentiable in ``fn``'s and Gaussian noise's parameters.
    """
    _check_model(fn, noise)
    check_key("key", key)
    p = check_int("p", p, min=1)
    z = fn.check_latents(z)
    if scales is not None:
        scales = _float(scales, "scales")
        check_array("scales", scales, shape=(p,))
    return _simulate(fn, noise, z, key, p, scales)


@eqx.filter_jit
def _simulate(fn, noise, z, key, p, scales):
    z = _check_finite_in_jit("z", z)
    kx, ke = jax.random.split(key)
    y = noise.sample(ke, fn.sample(kx, z, p))
    return y if scales is None else y * scales


def expected_gram(fn: AbstractRandomFunction, noise: AbstractNoise,
                  z: Float[ArrayLike, "n ..."]) -> Float[Array, "n n"]:
    """``E <Y_i, Y_j> / p = f(Z_i, Z_j) + s delta_ij``, the centre of (3). Traced and
    differentiable in the parameters of ``fn`` and ``noise``."""
    _check_model(fn, noise)
    return _expected_gram(fn, noise, fn.check_latents(z))


@eqx.filter_jit
def _expected_gram(fn, noise, z):
    z = _check_finite_in_jit("z", z)
    f = fn.kernel(z, z)
    return f + noise.shift(fn) * jnp.eye(z.shape[0], dtype=f.dtype)


def _distances_from_gram(g, scale):
    sq = jnp.diagonal(g)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * g, 0.0) / scale
    d2 = jnp.where(jnp.eye(g.shape[0], dtype=bool), 0.0, d2)
    # sqrt with a finite gradient at 0 (the diagonal, coincident points).
    pos = d2 > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, d2, 1.0)), 0.0)


def limit_distances(fn: AbstractRandomFunction, noise: AbstractNoise,
                    z: Float[ArrayLike, "n ..."]) -> Float[Array, "n n"]:
    """The ``p -> infinity`` limit of ``|Y_i - Y_j| / sqrt p``:
    ``sqrt(f(z_i, z_i) + f(z_j, z_j) - 2 f(z_i, z_j) + 2 s)`` off the diagonal."""
    _check_model(fn, noise)
    return _limit_distances(fn, noise, fn.check_latents(z))


@eqx.filter_jit
def _limit_distances(fn, noise, z):
    return _distances_from_gram(_expected_gram(fn, noise, z), 1.0)


def _check_data(y, block_size):
    y = _float(y, "y")
    check_array("y", y, ndim=2)
    n = y.shape[0]
    if n < 2:
        raise ValueError(f"y must have at least 2 rows (samples), got shape {y.shape}")
    if block_size is None:
        block_size = n
    block_size = check_int("block_size", block_size, min=1)
    return y, min(block_size, n)


@eqx.filter_jit
def _gram(y, block_size):
    y = _check_finite_in_jit("y", y)
    n = y.shape[0]
    nb = -(-n // block_size)
    pad = nb * block_size - n
    rows = jnp.pad(y, ((0, pad), (0, 0))).reshape(nb, block_size, y.shape[1])
    g = jax.lax.map(lambda r: r @ y.T, rows)
    return g.reshape(nb * block_size, n)[:n]


def gram(
    y: Float[ArrayLike, "n p"], block_size: int | None = None,
    scale: float | Float[Array, ""] | None = None,
) -> Float[Array, "n n"]:
    """The Gram matrix ``<y_i, y_j> / scale``, computed in row blocks.

    Args:
      y: ``(n, p)`` data (finite: NaN/inf raise, also inside ``jit``).
      block_size: rows per block (static): peak memory ``O(block_size * n)`` besides
        ``y`` and the output; ``None``: one block.
      scale: the normaliser (traced); default ``p``, the ``<Y_i, Y_j> / p`` of (3).

    Returns:
      ``(n, n)``. Vmappable over ``y`` and ``scale``; differentiable.
    """
    y, bs = _check_data(y, block_size)
    s = jnp.asarray(y.shape[1], y.dtype) if scale is None else _float(scale, "scale")
    return _gram(y, bs) / s


def pairwise_distances(
    y: Float[ArrayLike, "n p"], block_size: int | None = None,
    scale: float | Float[Array, ""] = 1.0,
) -> Float[Array, "n n"]:
    """Euclidean distances ``|y_i - y_j| / sqrt(scale)`` from the blockwise :func:`gram`.

    Squared distances come from ``|y_i|^2 + |y_j|^2 - 2 <y_i, y_j>`` (clipped at 0; the
    diagonal is exactly 0). In float32 a pair much closer than the points' norms loses
    relative precision (cancellation); high-dimensional noisy data are the opposite
    regime. Vmappable over ``y`` and ``scale``; differentiable (the gradient at a zero
    distance is taken as 0).
    """
    y, bs = _check_data(y, block_size)
    return _distances_from_gram(_gram(y, bs), _float(scale, "scale"))


def dot_product_error(g: Float[ArrayLike, "n n"], expected: Float[ArrayLike, "n n"]
                      ) -> Float[Array, ""]:
    """``max_{i,j} |g_ij - expected_ij|``, the left side of (3)."""
    g, expected = _float(g, "g"), _float(expected, "expected")
    check_array("g", g, ndim=2)
    if expected.shape != g.shape:
        raise ValueError(f"expected must have the shape of g {tuple(g.shape)}, got "
                         f"{tuple(expected.shape)}")
    return jnp.max(jnp.abs(g - expected))


# --------------------------------------------------------------------------- persistence


class Diagrams(NamedTuple):
    """The ``n_bars`` longest bars of each dimension ``0..maxdim``, longest first.

    ``births``/``deaths`` are ``(maxdim + 1, n_bars)``; missing bars are ``(0, 0)``
    (length 0, never alive); an essential class has ``death = inf``. ``counts[k]`` is the
    number of bars ripser found in dimension ``k`` (may exceed ``n_bars``).
    """

    births: Float[Array, "d b"]
    deaths: Float[Array, "d b"]
    counts: Int[Array, " d"]


def _ripser_host(d, threshold, maxdim, n_bars):
    from ripser import ripser

    d = np.asarray(d, np.float64)
    thr = float(threshold)
    out = ripser(d, maxdim=maxdim, thresh=thr if np.isfinite(thr) else np.inf,
                 distance_matrix=True)
    births = np.zeros((maxdim + 1, n_bars))
    deaths = np.zeros((maxdim + 1, n_bars))
    counts = np.zeros(maxdim + 1, np.int32)
    for k, dg in enumerate(out["dgms"]):
        counts[k] = len(dg)
        if len(dg):
            order = np.argsort(-(dg[:, 1] - dg[:, 0]), kind="stable")[:n_bars]
            births[k, :len(order)] = dg[order, 0]
            deaths[k, :len(order)] = dg[order, 1]
    return births, deaths, counts


def rips_persistence(
    d: Float[ArrayLike, "n n"],
    maxdim: int = 1,
    n_bars: int = 16,
    threshold: float | Float[Array, ""] = math.inf,
) -> Diagrams:
    """Vietoris-Rips persistence of a distance matrix, by ripser (coefficients Z/2).

    Args:
      d: ``(n, n)`` symmetric distances with a zero diagonal (finite: NaN/inf raise,
        also inside ``jit``).
      maxdim: the top homology dimension (static, 0..3); ``H_2`` of ``n`` points costs
        ``O(n^4)`` simplices in the worst case (ripser's clearing keeps it practical for a
        few hundred points).
      n_bars: bars kept per dimension (static), the longest.
      threshold: the largest edge length in the filtration (traced); ``inf``: ripser's
        full complex (it stops at the enclosing radius).

    Returns:
      :class:`Diagrams`. Runs inside ``jit``/``vmap`` (a host callback; a batch is
      processed one matrix at a time). Not differentiable (``grad`` raises).
    """
    d = _float(d, "d")
    check_array("d", d, ndim=2)
    if d.shape[0] != d.shape[1] or d.shape[0] < 2:
        raise ValueError(f"d must be a square (n, n) distance matrix with n >= 2, got shape "
                         f"{tuple(d.shape)}")
    maxdim = check_int("maxdim", maxdim, min=0, max=3)
    n_bars = check_int("n_bars", n_bars, min=1)
    thr = _float(threshold, "threshold")
    if not _is_tracer(thr) and np.asarray(thr).ndim == 0 and np.isnan(np.asarray(thr)):
        raise ValueError("threshold must be a number or inf, got nan")
    return _rips(d, maxdim, n_bars, thr)


@eqx.filter_jit
def _rips(d, maxdim, n_bars, thr):
    d = _check_finite_in_jit("d", d)
    shapes = (jax.ShapeDtypeStruct((maxdim + 1, n_bars), d.dtype),
              jax.ShapeDtypeStruct((maxdim + 1, n_bars), d.dtype),
              jax.ShapeDtypeStruct((maxdim + 1,), jnp.int32))

    def host(dd, tt):
        b, e, c = _ripser_host(dd, tt, maxdim, n_bars)
        return b.astype(dd.dtype), e.astype(dd.dtype), c

    b, e, c = jax.pure_callback(host, shapes, d, thr.astype(d.dtype),
                                vmap_method="sequential")
    return Diagrams(b, e, c)


def bar_persistence(dg: Diagrams) -> Float[Array, "d b"]:
    """Bar lengths ``death - birth`` (longest first; ``inf`` for essential classes)."""
    return dg.deaths - dg.births


def top_persistence(dg: Diagrams, dim: int) -> Float[Array, ""]:
    """Length of the longest bar in dimension ``dim`` (static)."""
    dim = check_int("dim", dim, min=0, max=dg.births.shape[-2] - 1)
    return bar_persistence(dg)[..., dim, 0]


def persistence_gap(dg: Diagrams, dim: int, k: int = 1) -> Float[Array, ""]:
    """The ``k``-th longest bar's length minus the ``(k + 1)``-th's in dimension ``dim``
    (``k`` static, ``1 <= k < n_bars``): how far ``k`` features stand above the rest."""
    dim = check_int("dim", dim, min=0, max=dg.births.shape[-2] - 1)
    k = check_int("k", k, min=1, max=dg.births.shape[-1] - 1)
    pers = bar_persistence(dg)
    return pers[..., dim, k - 1] - pers[..., dim, k]


def betti_numbers(dg: Diagrams, scale: float | Float[Array, ""]) -> Int[Array, " d"]:
    """Betti numbers at ``scale`` (traced): bars with ``birth <= scale < death`` in each
    dimension, among the ``n_bars`` kept (keep enough bars for short-lived ones)."""
    s = _float(scale, "scale")[..., None, None]
    alive = (dg.births <= s) & (s < dg.deaths)
    return jnp.sum(alive, axis=-1).astype(jnp.int32)


# --------------------------------------------------------------------------- isometry


def isometry_score(
    d: Float[ArrayLike, "n n"], latent: Float[ArrayLike, "n n"],
    radius: float | Float[Array, ""] = math.inf,
) -> Float[Array, ""]:
    """``R^2`` of the least-squares line ``d_ij^2 ~ alpha + beta latent_ij^2`` over pairs
    ``i < j`` with ``latent_ij <= radius``.

    ``1`` when the data metric is a uniform shift of a scaled latent metric on those
    pairs; the intercept ``alpha`` absorbs the noise's shift. ``radius`` is traced.
    Differentiable in ``d`` and ``latent``; ``nan`` when fewer than 2 pairs qualify.
    """
    d, latent = _float(d, "d"), _float(latent, "latent")
    check_array("d", d, ndim=2)
    if d.shape[0] != d.shape[1] or latent.shape != d.shape:
        raise ValueError(f"d and latent must be square matrices of one shape, got "
                         f"{tuple(d.shape)} and {tuple(latent.shape)}")
    return _isometry(d, latent, _float(radius, "radius"))


@jax.jit
def _isometry(d, latent, r):
    n = d.shape[0]
    iu = jnp.triu(jnp.ones((n, n), bool), 1)
    w = (iu & (latent <= r)).astype(d.dtype)
    x, y = latent**2, d**2
    m = jnp.sum(w)
    mx, my = jnp.sum(w * x) / m, jnp.sum(w * y) / m
    cxx = jnp.sum(w * (x - mx) ** 2)
    cyy = jnp.sum(w * (y - my) ** 2)
    cxy = jnp.sum(w * (x - mx) * (y - my))
    return cxy**2 / (cxx * cyy)
