r"""Linear Koopman backbone ``z_{t+1} = A z_t + b`` in closed form, its spectrum and ROM.

MERLIN (Lu, Ma, Lin, Zhu, ICML 2026), Sec. "training under linear constraints":
the latent observables evolve by one global affine map, fitted in closed form by
ridge regression on latent pairs ``(z_t, z_{t+1})``:

    [A b] = argmin  sum_t |z_{t+1} - A z_t - b|^2 / N  +  ridge |[A b]|_F^2
          = S_yx (S_xx + ridge I)^{-1},     x_t = [z_t; 1],
    S_xx  = sum_t x_t x_t^T / N,   S_yx = sum_t z_{t+1} x_t^T / N.

``S_xx`` and ``S_yx`` are sufficient statistics: sums over pairs, so they are
accumulated batch by batch (:func:`update_stats`) and solved once
(:func:`solve_backbone`), which is the authors' "fullpass" global operator. The
ridge acts on the *mean* statistics, so its size does not depend on how many pairs
were summed (the authors' default 5e-3 is used on batch-mean statistics in their
EMA mode). The solve is a lineax Cholesky solve of the symmetric positive-definite
``S_xx + ridge I`` (SVD, i.e. least squares, when ``ridge = 0``).

Reduced-order model (the paper's ROM, Sec. "interpretable ROMs"): with an
orthonormal basis ``U`` ``[D, r]`` and a centre ``c`` (POD of the latents, or the
leading eigenvectors of ``A``), ``w = U^T (z - c)`` evolves by
``w_{t+1} = U^T A U w_t + U^T (A c + b - c)`` (:func:`reduce`), rolled out in ``r``
dimensions and lifted back with ``z = c + U w``. The authors learn ``U`` by
gradient descent on reconstruction + dynamics losses; here it is the closed-form
POD basis (:func:`pod_basis`), the standard choice.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, Complex, Float

from jaxsci.core.validation import check_array, check_int, check_scalar

__all__ = [
    "LinearStats",
    "KoopmanBackbone",
    "init_stats",
    "update_stats",
    "solve_backbone",
    "fit_backbone",
    "rollout_linear",
    "spectrum",
    "spectral_radius",
    "pod_basis",
    "reduce",
    "project",
    "lift",
]


class LinearStats(NamedTuple):
    """Running sums of the ridge regression (a pytree; add two to merge them).

    Attributes:
      xx: ``sum x x^T`` with ``x = [z_t; 1]``, ``[D+1, D+1]``.
      yx: ``sum z_{t+1} x^T``, ``[D, D+1]``.
      count: number of pairs summed (a float scalar, so weights are allowed).
    """

    xx: Float[Array, "p p"]
    yx: Float[Array, "d p"]
    count: Float[Array, ""]


class KoopmanBackbone(eqx.Module):
    """The affine latent map ``z -> A z + b``."""

    A: Float[Array, "d d"]
    b: Float[Array, " d"]

    def __call__(self, z: Float[Array, "... d"]) -> Float[Array, "... d"]:
        return z @ self.A.T + self.b

    @property
    def dim(self) -> int:
        return self.A.shape[0]


def init_stats(dim: int, dtype=jnp.float32) -> LinearStats:
    """Zero statistics for a ``dim``-dimensional latent."""
    check_int("dim", dim, min=1)
    p = dim + 1
    return LinearStats(jnp.zeros((p, p), dtype), jnp.zeros((dim, p), dtype), jnp.zeros((), dtype))


def _pairs(z0, z1) -> tuple[Array, Array]:
    check_array("z0", z0, dtype="floating")
    check_array("z1", z1, dtype="floating")
    if z0.shape != z1.shape or z0.ndim < 1:
        raise ValueError(
            f"z0 and z1 must have the same shape (..., d), got {tuple(z0.shape)} and "
            f"{tuple(z1.shape)}"
        )
    d = z0.shape[-1]
    return z0.reshape(-1, d), z1.reshape(-1, d)


def update_stats(
    stats: LinearStats,
    z0: Float[Array, "... d"],
    z1: Float[Array, "... d"],
    weights: Float[Array, "..."] | None = None,
) -> LinearStats:
    """Add the pairs ``z0[i] -> z1[i]`` (any leading shape) to ``stats``.

    ``weights`` (same leading shape, e.g. 0/1 to drop pairs) scales each pair.
    """
    x0, x1 = _pairs(z0, z1)
    if x0.shape[-1] + 1 != stats.xx.shape[0]:
        raise ValueError(
            f"z0 has latent size {x0.shape[-1]}, but stats were made for {stats.xx.shape[0] - 1}"
        )
    w = jnp.ones(x0.shape[0], x0.dtype) if weights is None else jnp.reshape(weights, (-1,))
    if w.shape[0] != x0.shape[0]:
        raise ValueError(
            f"weights must have the leading shape of z0, {tuple(z0.shape[:-1])}, "
            f"got {tuple(jnp.shape(weights))}"
        )
    x = jnp.concatenate([x0, jnp.ones((x0.shape[0], 1), x0.dtype)], axis=1)
    xw = x * w[:, None]
    return LinearStats(
        stats.xx + xw.T @ x, stats.yx + x1.T @ xw, stats.count + jnp.sum(w).astype(x.dtype)
    )


def solve_backbone(
    stats: LinearStats, ridge: float = 5e-3, *, bias: bool = True
) -> KoopmanBackbone:
    """``[A b] = S_yx (S_xx + ridge I)^{-1}`` from mean statistics (lineax solve).

    ``bias=False`` fits ``z_{t+1} = A z_t`` (``b = 0``). ``ridge`` may be traced
    (swept with ``vmap``; a negative traced ridge raises inside jit through
    ``equinox.error_if``); a concrete ``ridge = 0`` uses an SVD least-squares solve.
    Differentiable in the statistics and in ``ridge``.
    """
    check_scalar("ridge", ridge, ge=0.0)
    if isinstance(ridge, jax.core.Tracer):  # a swept ridge: checked where it runs
        ridge = eqx.error_if(ridge, jnp.any(ridge < 0), "ridge must be >= 0")
    n = jnp.maximum(stats.count, 1.0)
    xx, yx = stats.xx / n, stats.yx / n
    if not bias:
        xx, yx = xx[:-1, :-1], yx[:, :-1]
    p = xx.shape[0]
    gram = xx + ridge * jnp.eye(p, dtype=xx.dtype)
    exact = not isinstance(ridge, jax.core.Tracer) and float(ridge) == 0.0
    if exact:
        op, solver = lx.MatrixLinearOperator(gram), lx.SVD()
    else:
        op = lx.MatrixLinearOperator(gram, lx.positive_semidefinite_tag)
        solver = lx.Cholesky()
    # gram is symmetric: Theta^T solves gram Theta^T = S_yx^T, one column per latent.
    # throw=False: lineax's failure check is a host callback, which would keep every
    # program holding this solve (the Phase-I step) out of the compilation cache;
    # Cholesky of ``S_xx + ridge I`` (ridge > 0) cannot fail, and SVD is total.
    theta = jax.vmap(lambda rhs: lx.linear_solve(op, rhs, solver, throw=False).value)(yx)
    d = yx.shape[0]
    A = theta[:, :d]
    b = theta[:, d] if bias else jnp.zeros((d,), theta.dtype)
    return KoopmanBackbone(A, b)


def fit_backbone(
    z0: Float[Array, "... d"],
    z1: Float[Array, "... d"],
    ridge: float = 5e-3,
    *,
    bias: bool = True,
    weights: Float[Array, "..."] | None = None,
) -> KoopmanBackbone:
    """Closed-form ``A, b`` from pairs ``z0 -> z1`` (one batch of statistics)."""
    x0, _ = _pairs(z0, z1)
    stats = update_stats(init_stats(x0.shape[-1], x0.dtype), z0, z1, weights)
    return solve_backbone(stats, ridge, bias=bias)


def rollout_linear(
    backbone: KoopmanBackbone, z0: Float[Array, " d"], steps: int
) -> Float[Array, "t d"]:
    """``[z_0, A z_0 + b, ...]``, ``steps + 1`` latents (a ``lax.scan``)."""
    check_int("steps", steps, min=0)

    def step(z, _):
        z = backbone(z)
        return z, z

    _, zs = jax.lax.scan(step, z0, None, length=steps)
    return jnp.concatenate([z0[None], zs], axis=0)


def spectrum(backbone: KoopmanBackbone) -> Complex[np.ndarray, " d"]:
    """Eigenvalues of ``A`` (NumPy, on the host: a diagnostic, not traced).

    Sorted by decreasing modulus. ``|lambda| > 1`` grows, ``< 1`` decays; the
    angle is the frequency per step.
    """
    eig = np.linalg.eigvals(np.asarray(backbone.A, np.float64))
    return eig[np.argsort(-np.abs(eig))]


def spectral_radius(backbone: KoopmanBackbone) -> float:
    """``max |lambda(A)|``."""
    return float(np.abs(spectrum(backbone)).max())


def pod_basis(
    latents: Float[Array, "... d"], rank: int
) -> tuple[Float[Array, "d r"], Float[Array, " d"], Float[Array, " d"]]:
    """POD of latents: ``(U [d, rank], centre [d], singular values [min(n, d)])``.

    ``U`` holds the ``rank`` leading right singular vectors of the centred latents.
    """
    check_array("latents", latents, dtype="floating")
    z = jnp.reshape(latents, (-1, latents.shape[-1]))
    check_int("rank", rank, min=1, max=z.shape[-1])
    centre = jnp.mean(z, axis=0)
    _, s, vt = jnp.linalg.svd(z - centre, full_matrices=False)
    return vt[:rank].T, centre, s


def reduce(
    backbone: KoopmanBackbone, basis: Float[Array, "d r"], centre: Float[Array, " d"]
) -> KoopmanBackbone:
    """The backbone in ROM coordinates ``w = U^T (z - c)``: ``(U^T A U, U^T (A c + b - c))``."""
    check_array("basis", basis, ndim=2, dtype="floating")
    if basis.shape[0] != backbone.dim:
        raise ValueError(
            f"basis must have shape ({backbone.dim}, r), got {tuple(basis.shape)}"
        )
    A_r = basis.T @ backbone.A @ basis
    b_r = basis.T @ (backbone.A @ centre + backbone.b - centre)
    return KoopmanBackbone(A_r, b_r)


def project(z: Float[Array, "... d"], basis: Float[Array, "d r"], centre: Float[Array, " d"]):
    """ROM coordinates ``w = U^T (z - c)``."""
    return (z - centre) @ basis


def lift(w: Float[Array, "... r"], basis: Float[Array, "d r"], centre: Float[Array, " d"]):
    """Back to the latent: ``z = c + U w``."""
    return centre + w @ basis.T
