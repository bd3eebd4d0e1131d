"""JIC-HD's defining properties on small cases with known answers.

Compilation dominates on 2 cores: every JIC-HD call here has the shapes and static
settings of ``tests/cases/ggm.py`` (``K = 3``, ``p = 16``, ``r_max = 4``, the solver
``SOLVER``), so the unit tests and the property harness share compiled programs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import hubs
from jaxsci.stats import ggm

P, R_MAX, N = 16, 4, 3000
SPEC = hubs.HubSpec(p=P, n_common=2, n_individual=1, p_common=0.9, p_individual=0.9,
                    p_background=0.05)
SOLVER = ggm.RiemannianSubgradient(step_size=0.5, decay=0.75, n_steps=300, n_starts=2)


@pytest.fixture(scope="module")
def model():
    g = hubs.hub_precisions(jax.random.key(0), SPEC)
    x = hubs.gaussian_samples(jax.random.key(1), g.theta, N)
    return g, ggm.correlation(x)


def test_generator_is_positive_definite_with_planted_hubs(model):
    g, _ = model
    theta = np.asarray(g.theta, np.float64)
    lam = np.linalg.eigvalsh(theta)
    assert np.all(lam[:, 0] > 0.05)
    assert np.min(lam[:, 0]) == pytest.approx(0.1, abs=1e-3)  # the shared shift
    assert np.allclose(theta, np.swapaxes(theta, 1, 2))
    common, ind = np.asarray(g.common), np.asarray(g.individual)
    assert common.sum() == 2 and ind.sum(1).tolist() == [1, 1, 1]
    assert not np.any(ind & common) and ind.any(0).sum() == 3  # disjoint hub sets
    adj = np.asarray(g.adjacency)
    # Common-hub edges are the common structure: identical in every population.
    rows = adj[:, common]
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])
    degree = adj.sum(-1)
    for k in range(3):
        hub_deg = degree[k][common | ind[k]]
        assert hub_deg.min() > np.median(degree[k][~(common | ind.any(0))])
    # One diagonal for every population (shared shift).
    assert np.allclose(np.diagonal(theta, axis1=1, axis2=2), theta[0, 0, 0])


def test_equal_matrices_give_the_bottom_eigenspace(model):
    # With C_1 = ... = C_K = C the minimax value is Ky Fan's sum of the r smallest
    # eigenvalues and V spans the bottom eigenspace; checked from random starts only.
    _, cs = model
    c = cs[0]
    lam, u = np.linalg.eigh(np.asarray(c, np.float64))
    r = 3
    es = ggm.joint_minimax_eigenspace(jnp.stack([c, c, c]), r, key=jax.random.key(2),
                                      solver=SOLVER, warm_start=False)
    assert float(es.value) == pytest.approx(lam[:r].sum(), rel=2e-3)
    v = np.asarray(es.v, np.float64)
    proj_err = np.linalg.norm(v @ v.T - u[:, :r] @ u[:, :r].T)
    assert proj_err < 0.1
    np.testing.assert_allclose(v.T @ v, np.eye(r), atol=1e-5)
    # The deflation values of JIC-HD on equal matrices are the smallest eigenvalues.
    out = ggm.jic_hd(jnp.stack([c, c, c]), jax.random.key(3), r_max=R_MAX, solver=SOLVER)
    np.testing.assert_allclose(np.asarray(out.values), lam[: R_MAX + 1], rtol=2e-2)


def test_polar_retraction_stays_on_the_stiefel_manifold():
    rng = np.random.default_rng(0)
    v = ggm.polar_retraction(rng.normal(size=(10, 3)))
    np.testing.assert_allclose(np.asarray(v.T @ v), np.eye(3), atol=1e-5)
    g = jnp.asarray(rng.normal(size=(10, 3)), jnp.float32)
    xi = ggm.tangent_projection(v, g)
    skew = np.asarray(v.T @ xi)
    np.testing.assert_allclose(skew + skew.T, 0.0, atol=1e-5)  # tangent at v
    for t in (1e-3, 0.1, 1.0, 10.0):
        w = ggm.polar_retraction(v + t * xi)
        np.testing.assert_allclose(np.asarray(w.T @ w), np.eye(3), atol=1e-5)
    # Second order: the retraction follows the tangent direction to O(t^2).
    t = 1e-2
    step = np.asarray(ggm.polar_retraction(v + t * xi) - v)
    assert np.linalg.norm(step - t * np.asarray(xi)) < 5 * t**2 * np.linalg.norm(xi) ** 2
    # Polar of an orthonormal matrix is itself; the column span is kept.
    np.testing.assert_allclose(np.asarray(ggm.polar_retraction(v)), np.asarray(v), atol=1e-5)


def test_two_means_and_gap_rule():
    scores = jnp.asarray([0.01, 0.02, 0.015, 0.5, 0.03, 0.6, 0.0])
    hub, thr = ggm.two_means(scores)
    assert np.asarray(hub).tolist() == [False, False, False, True, False, True, False]
    assert 0.03 < float(thr) < 0.5
    assert not np.any(np.asarray(ggm.two_means(jnp.ones(5))[0]))  # equal: no hub
    # Values 0.1, 0.11, 0.12 then a jump: three leading precision eigenvalues.
    values = jnp.asarray([0.1, 0.11, 0.12, 0.9, 0.95])
    assert int(ggm.gap_rank(values)) == 3
    assert int(ggm.gap_rank(values, relative=False)) == 3
    assert int(ggm.gap_rank(jnp.asarray([0.01, 0.5, 0.6, 0.7]))) == 1


def test_hub_auc_known_values():
    s = jnp.asarray([3.0, 2.0, 1.0, 0.0])
    pos = jnp.asarray([True, True, False, False])
    assert float(ggm.hub_auc(s, pos)) == 1.0
    assert float(ggm.hub_auc(-s, pos)) == 0.0
    assert float(ggm.hub_auc(jnp.zeros(4), pos)) == 0.5
    neg = jnp.asarray([False, False, True, False])
    assert float(ggm.hub_auc(s[::-1], pos, neg)) == 0.0
    batch = ggm.hub_auc(jnp.stack([s, -s]), pos)
    assert np.asarray(batch).tolist() == [1.0, 0.0]


def test_recovers_planted_common_hubs_at_large_n(model):
    g, cs = model
    common, ind = np.asarray(g.common), np.asarray(g.individual)
    out = ggm.jic_hd(cs, jax.random.key(4), r_max=R_MAX, solver=SOLVER)
    assert bool(out.result == ggm.RESULTS.successful)
    assert int(out.rank) == 2  # the gap rule finds the two common hubs
    assert np.asarray(out.hubs).tolist() == common.tolist()
    assert float(ggm.hub_auc(out.scores, g.common)) == 1.0
    np.testing.assert_allclose(float(jnp.sum(out.scores)), 2.0, rtol=1e-5)
    # One population alone: IPC-HD finds its hubs, common and individual together.
    one = ggm.ipc_hd(cs[0], r_max=R_MAX)
    assert np.asarray(one.hubs).tolist() == (common | ind[0]).tolist()


def test_screening_keeps_the_union_and_zeroes_the_rest(model):
    g, cs = model
    kept = np.asarray(ggm.screen(cs, 0.25, min_keep=1))
    hubs_all = np.asarray(g.common) | np.asarray(g.individual).any(0)
    assert np.all(kept[hubs_all])  # hubs have the largest correlations
    assert kept.sum() <= 3 * 4
    out = ggm.jic_hd(cs, jax.random.key(4), r_max=R_MAX, solver=SOLVER, screen_keep=0.5)
    assert np.all(np.asarray(out.scores)[~np.asarray(out.screened)] == 0)


def test_determinism_and_jit_matches_eager(model):
    _, cs = model
    a = ggm.jic_hd(cs, jax.random.key(5), r_max=R_MAX, solver=SOLVER)
    b = ggm.jic_hd(cs, jax.random.key(5), r_max=R_MAX, solver=SOLVER)
    np.testing.assert_array_equal(np.asarray(a.eigenspace), np.asarray(b.eigenspace))
    c = ggm.jic_hd(cs, jax.random.key(6), r_max=R_MAX, solver=SOLVER)
    assert not np.array_equal(np.asarray(a.eigenspace), np.asarray(c.eigenspace))
    np.testing.assert_array_equal(np.asarray(a.hubs), np.asarray(c.hubs))


def test_clear_errors(model):
    _, cs = model
    key = jax.random.key(0)
    bad = cs.at[0].set(cs[0] - 2.0 * jnp.eye(P))  # smallest eigenvalue below 0
    with pytest.raises(ValueError, match="cs must be positive semidefinite .*: matrix 0 has"):
        ggm.jic_hd(bad, key)
    with pytest.raises(ValueError, match="cs must be finite, got 1 NaN"):
        ggm.jic_hd(cs.at[1, 2, 3].set(jnp.nan), key)
    with pytest.raises(ValueError, match="cs must be symmetric"):
        ggm.pooled_ipc_hd(cs.at[0, 0, 1].add(0.5))
    with pytest.raises(ValueError, match=r"cs must have shape \(K, p, p\)"):
        ggm.jic_hd(cs[:, :, :5], key)
    with pytest.raises(ValueError, match=r"c must have shape \(p, p\)"):
        ggm.ipc_hd(cs)
    with pytest.raises(ValueError, match="r_max must be <= 15"):
        ggm.jic_hd(cs, key, r_max=P)
    with pytest.raises(ValueError, match="rank must be <= 16"):
        ggm.joint_minimax_eigenspace(cs, P + 1, key=key)
    with pytest.raises(ValueError, match="rank must be <= 4"):
        ggm.ipc_hd(cs[0], r_max=4, rank=5)
    with pytest.raises(ValueError, match="screen_keep must be <= 1"):
        ggm.jic_hd(cs, key, screen_keep=1.5)
    with pytest.raises(TypeError, match="solver must be a RiemannianSubgradient"):
        ggm.jic_hd(cs, key, solver="subgradient")
    with pytest.raises(ValueError, match="step_size must be > 0"):
        ggm.RiemannianSubgradient(step_size=0.0)
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        ggm.jic_hd(cs, 0)
    with pytest.raises(ValueError, match="fewer than p"):
        hubs.HubSpec(p=10, n_common=4, n_individual=2)
    with pytest.raises(ValueError, match="individual_strength must be a number or one"):
        hubs.HubSpec(individual_strength=(1.0, 2.0))
    with pytest.raises(ValueError, match="p_common must be <= 1"):
        hubs.HubSpec(p_common=1.5)
