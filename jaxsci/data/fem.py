r"""Random second-order elliptic FEM systems on 2-D triangulations (scikit-fem, P1).

The problem suite of G-RANS ("Generalizable Residual-Aware Neural Solver", ICML 2026):
on a triangulated domain ``Omega`` with
homogeneous Dirichlet boundary, find ``u`` with

* ``poisson``:              ``-div(kappa grad u) = f``
* ``advection_diffusion``:  ``-div(kappa grad u) + beta . grad u = f``
* ``reaction_diffusion``:   ``-div(kappa grad u) + c u = f``
* ``helmholtz``:            ``-div(kappa grad u) - k^2 u = f``

with random, spatially varying ``kappa = exp(sigma g_1(x))`` (a log-normal field),
``c = c_0 exp(g_2(x))`` and source ``f = g_3(x)``, each ``g`` a smooth random Fourier
field of unit variance, and a random constant direction for ``beta``. Every form is
assembled by scikit-fem on P1 elements (``skfem.BilinearForm``/``LinearForm``, nothing
hand-assembled); the Dirichlet nodes are condensed out and the interior system
``A x = b`` becomes a JAX ``BCOO`` matrix.

Distribution shift (the paper's +-70% coefficient shifts): ``shift = s`` multiplies
the log-contrast ``sigma`` of ``kappa`` and the lower-order coefficient (``|beta|``,
``c_0`` or ``k^2``) by ``1 + s``. Scaling every coefficient by one factor would only
rescale ``A`` (which a residual-normalised solver does not see), so the shift acts on
the balance of terms instead; this reading is ours, the abstract does not define it.

Poisson and reaction-diffusion give symmetric positive definite matrices;
advection-diffusion is non-symmetric; Helmholtz is symmetric and positive definite only
while ``k^2`` stays below the smallest eigenvalue of the diffusion operator (the
default ``k^2 = 10`` is below ``2 pi^2`` for ``kappa = 1`` on the unit square; strong
shifts can make it indefinite, which :func:`is_positive_definite` reports).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import skfem
from jax.experimental import sparse as jsparse
from jaxtyping import Array, Float
from skfem.helpers import dot, grad

from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "EQUATIONS",
    "DOMAINS",
    "Equation",
    "Coefficients",
    "FEMProblem",
    "LinearSystem",
    "make_mesh",
    "random_coefficients",
    "assemble",
    "to_bcoo",
    "to_system",
    "check_system",
    "is_positive_definite",
    "full_solution",
]

Equation = Literal["poisson", "advection_diffusion", "reaction_diffusion", "helmholtz"]
EQUATIONS = ("poisson", "advection_diffusion", "reaction_diffusion", "helmholtz")
DOMAINS = ("square", "lshape", "hole")
SYMMETRIC = {
    "poisson": True,
    "advection_diffusion": False,
    "reaction_diffusion": True,
    "helmholtz": True,
}


@dataclasses.dataclass(frozen=True)
class Coefficients:
    """Random field parameters of one problem (host-side NumPy).

    Each field is ``g(x) = sum_m a_m cos(2 pi k_m . x + phi_m) / sqrt(M / 2)`` with
    integer wave vectors ``k_m``, amplitudes ``a_m ~ N(0, 1) / |k_m|`` normalised to
    unit mean square: a smooth field of unit variance.
    """

    waves: np.ndarray  # (3, M, 2) integer wave vectors for kappa, c and f
    amps: np.ndarray  # (3, M)
    phases: np.ndarray  # (3, M)
    direction: float  # angle of beta (advection-diffusion)
    sigma: float  # log-contrast of kappa
    lower: float  # |beta|, c_0 or k^2 (by equation)


def _field(c: Coefficients, i: int, x: np.ndarray) -> np.ndarray:
    k, a, p = c.waves[i], c.amps[i], c.phases[i]
    arg = 2 * np.pi * (np.tensordot(k[:, 0], x[0], 0) + np.tensordot(k[:, 1], x[1], 0))
    return np.tensordot(a, np.cos(arg + p[(...,) + (None,) * x[0].ndim]), 1)


# Defaults for the lower-order terms (ours; the abstract gives none): a mesh Peclet
# number below 1 at 1k-65k unknowns (no stabilisation needed), a reaction that
# matters against diffusion, and a Helmholtz shift below the first Dirichlet
# eigenvalue 2 pi^2 of -Laplace on the unit square.
LOWER_DEFAULT = {
    "poisson": 0.0,
    "advection_diffusion": 20.0,
    "reaction_diffusion": 100.0,
    "helmholtz": 10.0,
}


def random_coefficients(
    key: jax.Array,
    equation: Equation,
    *,
    sigma: float = 1.0,
    lower: float | None = None,
    shift: float = 0.0,
    modes: int = 16,
    max_wave: int = 3,
) -> Coefficients:
    """Draw the random coefficient fields of one problem (``shift`` scales sigma and lower)."""
    key = check_key("key", key)
    check_choice("equation", equation, EQUATIONS)
    check_scalar("sigma", sigma, ge=0.0)
    check_scalar("shift", shift, gt=-1.0)
    check_int("modes", modes, min=1)
    check_int("max_wave", max_wave, min=1)
    lower = LOWER_DEFAULT[equation] if lower is None else lower
    check_scalar("lower", lower, ge=0.0)
    kw, ka, kp, kd = jax.random.split(key, 4)
    waves = np.array(jax.random.randint(kw, (3, modes, 2), -max_wave, max_wave + 1))
    # k = 0 would be a constant offset; replace it by (1, 0).
    zero = np.all(waves == 0, axis=-1)
    waves[zero] = (1, 0)
    amps = np.array(jax.random.normal(ka, (3, modes)), np.float64)
    amps /= np.linalg.norm(waves, axis=-1)
    amps *= math.sqrt(2.0) / np.linalg.norm(amps, axis=-1, keepdims=True)
    phases = np.array(jax.random.uniform(kp, (3, modes), maxval=2 * np.pi), np.float64)
    direction = float(jax.random.uniform(kd, (), maxval=2 * np.pi))
    return Coefficients(
        waves=waves,
        amps=amps,
        phases=phases,
        direction=direction,
        sigma=float(sigma) * (1.0 + float(shift)),
        lower=float(lower) * (1.0 + float(shift)),
    )


def make_mesh(domain: str = "square", size: int = 33) -> skfem.MeshTri:
    """A triangulation: ``square`` has ``size x size`` nodes (unit square, right-angled
    triangles); ``hole`` is that square with the triangles whose centroid lies within
    0.25 of its centre removed (the hole's edge is a Dirichlet boundary too); ``lshape``
    is scikit-fem's L-shaped domain refined ``size`` times."""
    check_choice("domain", domain, DOMAINS)
    if domain in ("square", "hole"):
        check_int("size", size, min=3 if domain == "square" else 9)
        t = np.linspace(0.0, 1.0, size)
        mesh = skfem.MeshTri.init_tensor(t, t)
        if domain == "hole":
            centroid = mesh.p[:, mesh.t].mean(axis=1)
            inside = np.hypot(centroid[0] - 0.5, centroid[1] - 0.5) < 0.25
            mesh = mesh.remove_elements(np.flatnonzero(inside))
        return mesh
    check_int("size", size, min=0, max=8)
    return skfem.MeshTri.init_lshaped().refined(size)


@dataclasses.dataclass(frozen=True)
class FEMProblem:
    """An assembled problem (host side): the interior system and how to map it back.

    Attributes:
      equation: which PDE.
      mesh: the scikit-fem mesh.
      interior: indices of the interior (unknown) nodes in the mesh.
      matrix: the condensed stiffness matrix, ``scipy.sparse.csr_matrix`` (float64).
      rhs: the condensed load vector (float64).
      coords: ``(n, 2)`` coordinates of the unknowns.
      coefficients: the random fields used.
      symmetric: whether ``matrix`` is symmetric by construction.
    """

    equation: str
    mesh: skfem.MeshTri
    interior: np.ndarray
    matrix: sp.csr_matrix
    rhs: np.ndarray
    coords: np.ndarray
    coefficients: Coefficients
    symmetric: bool

    @property
    def n(self) -> int:
        return int(self.rhs.shape[0])


def assemble(
    key: jax.Array,
    equation: Equation,
    *,
    domain: str = "square",
    size: int = 33,
    sigma: float = 1.0,
    lower: float | None = None,
    shift: float = 0.0,
    contrast: float | None = None,
    cells: int = 4,
) -> FEMProblem:
    """Assemble one random problem of ``equation`` with scikit-fem (P1, Dirichlet u = 0).

    Args:
      key: PRNG key for the coefficient fields and source.
      equation: one of :data:`EQUATIONS`.
      domain, size: the mesh (:func:`make_mesh`).
      sigma: log-contrast of ``kappa``.
      lower: the lower-order coefficient (``|beta|``, ``c_0``, ``k^2``); default by equation.
      shift: relative coefficient shift (``-0.7`` .. ``0.7`` in the paper), see module docstring.
      contrast: if given, ``kappa`` is multiplied by a checkerboard of ``cells x cells``
        squares over the unit square, ``contrast`` on the squares with even
        ``floor(cells x) + floor(cells y)`` and 1 on the others (a high-contrast
        coefficient; pass ``sigma=0`` for the bare checkerboard).
      cells: squares per side of the checkerboard.
    """
    if contrast is not None:
        check_scalar("contrast", contrast, gt=0.0)
    check_int("cells", cells, min=1)
    coef = random_coefficients(key, equation, sigma=sigma, lower=lower, shift=shift)
    mesh = make_mesh(domain, size)
    basis = skfem.Basis(mesh, skfem.ElementTriP1())
    bx, by = math.cos(coef.direction), math.sin(coef.direction)

    @skfem.BilinearForm
    def form(u, v, w):
        kappa = np.exp(coef.sigma * _field(coef, 0, w.x))
        if contrast is not None:
            even = (np.floor(cells * w.x[0]) + np.floor(cells * w.x[1])) % 2 == 0
            kappa = kappa * np.where(even, contrast, 1.0)
        out = kappa * dot(grad(u), grad(v))
        if equation == "advection_diffusion":
            out = out + coef.lower * (bx * grad(u)[0] + by * grad(u)[1]) * v
        elif equation == "reaction_diffusion":
            out = out + coef.lower * np.exp(_field(coef, 1, w.x)) * u * v
        elif equation == "helmholtz":
            out = out - coef.lower * u * v
        return out

    @skfem.LinearForm
    def load(v, w):
        return _field(coef, 2, w.x) * v

    a = form.assemble(basis)
    f = load.assemble(basis)
    interior = basis.complement_dofs(basis.get_dofs())
    mat, rhs = skfem.condense(a, f, I=interior, expand=False)
    mat = sp.csr_matrix(mat)
    mat.sort_indices()
    return FEMProblem(
        equation=equation,
        mesh=mesh,
        interior=np.asarray(interior),
        matrix=mat,
        rhs=np.asarray(rhs, np.float64),
        coords=mesh.p[:, interior].T.copy(),
        coefficients=coef,
        symmetric=SYMMETRIC[equation],
    )


def to_bcoo(matrix: sp.spmatrix, dtype=jnp.float32, nnz: int | None = None) -> jsparse.BCOO:
    """A ``scipy.sparse`` matrix as a JAX ``BCOO`` (row-major sorted).

    ``nnz`` pads the stored entries with explicit zeros at ``(0, 0)`` so that matrices
    of one size but different sparsity share one compiled solver.
    """
    if not sp.issparse(matrix):
        raise TypeError(f"matrix must be a scipy.sparse matrix, got {type(matrix).__name__}")
    m = sp.coo_matrix(sp.csr_matrix(matrix))
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix must be square, got shape {m.shape}")
    check_array("matrix.data", m.data, dtype="number")
    idx = np.stack([m.row, m.col], axis=1).astype(np.int32)
    data = m.data
    pad = 0 if nnz is None else check_int("nnz", nnz, min=len(data)) - len(data)
    if pad:
        idx = np.concatenate([np.zeros((pad, 2), np.int32), idx])
        data = np.concatenate([np.zeros(pad, data.dtype), data])
    return jsparse.BCOO(
        (jnp.asarray(data, dtype), jnp.asarray(idx)),
        shape=m.shape,
        indices_sorted=True,
        unique_indices=not pad,
    )


class LinearSystem(NamedTuple):
    """A sparse system ``A x = b`` on device (a pytree; jit/vmap friendly).

    Attributes:
      matrix: ``A`` as a ``BCOO`` with ``nnz`` stored entries.
      rhs: ``b``.
    """

    matrix: jsparse.BCOO
    rhs: Float[Array, " n"]


def to_system(problem: FEMProblem, dtype=jnp.float32) -> LinearSystem:
    """The problem's interior system as a :class:`LinearSystem`."""
    return LinearSystem(to_bcoo(problem.matrix, dtype), jnp.asarray(problem.rhs, dtype))


def check_system(matrix, rhs, *, name: str = "matrix") -> None:
    """Validate a system at the Python boundary: BCOO, square, finite, matching rhs."""
    if not isinstance(matrix, jsparse.BCOO):
        raise TypeError(
            f"{name} must be a jax.experimental.sparse.BCOO (see fem.to_bcoo), "
            f"got {type(matrix).__name__}"
        )
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{name} must be square, got shape {tuple(matrix.shape)}")
    if matrix.n_batch or matrix.n_dense:
        raise ValueError(f"{name} must be an unbatched 2-D BCOO without dense dimensions")
    check_array(f"{name}.data", matrix.data, ndim=1, dtype="floating")
    check_array("rhs", rhs, shape=(matrix.shape[0],), dtype="floating")


def is_positive_definite(matrix: sp.spmatrix) -> bool:
    """Whether the symmetric part of ``matrix`` is positive definite (its smallest
    eigenvalue, by ARPACK's Lanczos, is above zero)."""
    import scipy.sparse.linalg as spla

    m = sp.csr_matrix(matrix)
    sym = (m + m.T) * 0.5
    lam = spla.eigsh(sym, k=1, which="SA", return_eigenvectors=False, tol=1e-8, maxiter=20000)
    return bool(lam[0] > 0)


def full_solution(problem: FEMProblem, x: np.ndarray) -> np.ndarray:
    """Interior values ``x`` extended by the Dirichlet zeros to every mesh node."""
    u = np.zeros(problem.mesh.p.shape[1])
    u[problem.interior] = np.asarray(x, np.float64)
    return u
