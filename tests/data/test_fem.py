import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import skfem
from skfem.models.poisson import laplace, unit_load

from jaxsci.data import fem


@pytest.fixture(scope="module")
def problems():
    return {eq: fem.assemble(jax.random.key(3), eq, size=9) for eq in fem.EQUATIONS}


def test_symmetric_positive_definite_where_they_must_be(problems):
    for eq in ("poisson", "reaction_diffusion", "helmholtz"):
        a = problems[eq].matrix
        assert abs(a - a.T).max() < 1e-12 * abs(a).max(), eq
        assert np.linalg.eigvalsh(a.toarray()).min() > 0, eq
        assert fem.is_positive_definite(a), eq
    a = problems["advection_diffusion"].matrix
    assert abs(a - a.T).max() > 1e-3 * abs(a).max()  # advection makes it non-symmetric


def test_poisson_with_unit_coefficient_matches_scikit_fem_laplace():
    # sigma = 0 gives kappa = 1: the matrix must be scikit-fem's own Laplacian, condensed.
    p = fem.assemble(jax.random.key(0), "poisson", size=7, sigma=0.0)
    basis = skfem.Basis(p.mesh, skfem.ElementTriP1())
    ref = laplace.assemble(basis)
    ref_i, _ = skfem.condense(ref, unit_load.assemble(basis), I=p.interior, expand=False)
    np.testing.assert_allclose(p.matrix.toarray(), ref_i.toarray(), atol=1e-12)


def test_solution_converges_to_manufactured_solution():
    # -Laplace u = f on the unit square with f = 2 pi^2 sin(pi x) sin(pi y) has
    # u = sin sin; P1 nodal error falls ~h^2, a check that assembly is right.
    errs = []
    for size in (9, 17):
        p = fem.assemble(jax.random.key(0), "poisson", size=size, sigma=0.0)
        basis = skfem.Basis(p.mesh, skfem.ElementTriP1())

        @skfem.LinearForm
        def load(v, w):
            return 2 * np.pi**2 * np.sin(np.pi * w.x[0]) * np.sin(np.pi * w.x[1]) * v

        b = load.assemble(basis)[p.interior]
        u = sp.linalg.spsolve(p.matrix.tocsc(), b)
        exact = np.sin(np.pi * p.coords[:, 0]) * np.sin(np.pi * p.coords[:, 1])
        errs.append(np.abs(u - exact).max())
    assert errs[1] < errs[0] / 3.0


def test_to_bcoo_matches_scipy_matvec_and_padding(problems):
    p = problems["advection_diffusion"]
    x = np.random.default_rng(0).standard_normal(p.n)
    for nnz in (None, p.matrix.nnz + 17):
        a = fem.to_bcoo(p.matrix, jnp.float32, nnz=nnz)
        np.testing.assert_allclose(np.asarray(a @ jnp.asarray(x, jnp.float32)),
                                   p.matrix @ x, rtol=1e-4, atol=1e-5)


def test_shift_scales_contrast_and_lower_order_term():
    c0 = fem.random_coefficients(jax.random.key(1), "reaction_diffusion")
    c1 = fem.random_coefficients(jax.random.key(1), "reaction_diffusion", shift=0.7)
    assert c1.sigma == pytest.approx(1.7 * c0.sigma)
    assert c1.lower == pytest.approx(1.7 * c0.lower)
    np.testing.assert_array_equal(c0.amps, c1.amps)


def test_deterministic_under_key():
    a = fem.assemble(jax.random.key(5), "helmholtz", size=7)
    b = fem.assemble(jax.random.key(5), "helmholtz", size=7)
    c = fem.assemble(jax.random.key(6), "helmholtz", size=7)
    assert (a.matrix != b.matrix).nnz == 0 and np.array_equal(a.rhs, b.rhs)
    assert not np.array_equal(a.rhs, c.rhs)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="equation"):
        fem.assemble(jax.random.key(0), "wave", size=5)
    with pytest.raises(ValueError, match="shift"):
        fem.assemble(jax.random.key(0), "poisson", size=5, shift=-1.5)
    with pytest.raises(ValueError, match="matrix must be square"):
        fem.to_bcoo(sp.random(4, 5, density=0.5, format="csr"))
    with pytest.raises(TypeError, match="matrix"):
        fem.to_bcoo(np.eye(3))
    a = sp.csr_matrix(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="matrix.data must be finite"):
        fem.to_bcoo(a)


def test_hole_domain_and_checkerboard_contrast():
    """The hole domain has no unknown near its centre (Dirichlet on the hole's edge);
    the checkerboard multiplies kappa by the contrast on alternate squares, so the
    stiffness entries of one square differ by that factor from the plain problem's."""
    key = jax.random.key(0)
    hole = fem.assemble(key, "poisson", domain="hole", size=17)
    r = np.hypot(hole.coords[:, 0] - 0.5, hole.coords[:, 1] - 0.5)
    assert r.min() > 0.2 and hole.n < 15 * 15 and fem.is_positive_definite(hole.matrix)
    plain = fem.assemble(key, "poisson", size=9, sigma=0.0)
    board = fem.assemble(key, "poisson", size=9, sigma=0.0, contrast=100.0)
    ratio = board.matrix.diagonal() / plain.matrix.diagonal()
    # Interior nodes of an even square (x, y in (0, 1/4)): all their elements lie there.
    inner = (plain.coords[:, 0] < 0.2) & (plain.coords[:, 1] < 0.2)
    np.testing.assert_allclose(ratio[inner], 100.0, rtol=1e-10)
    assert ratio.min() >= 1.0 - 1e-12 and ratio.max() <= 100.0 + 1e-9
    with pytest.raises(ValueError, match="contrast"):
        fem.assemble(key, "poisson", size=9, contrast=0.0)
