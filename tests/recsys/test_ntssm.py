"""NT-SSM: the parity split, the four-term loss against the authors' form, SSM at alpha 1,
the vmapped grid trains each member as if alone, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core import TrainConfig
from jaxsci.data import recsys
from jaxsci.recsys import ntssm as N


@pytest.fixture(scope="module")
def small():
    d = recsys.community_interactions(jax.random.key(0), n_users=30, n_items=24,
                                      n_communities=3, mean_degree=6.0, min_degree=3)
    g = N.bipartite_graph(d.users, d.items, d.n_users, d.n_items)
    rng = np.random.default_rng(0)
    ue = jnp.asarray(rng.normal(size=(d.n_users, 5)), jnp.float32)
    ie = jnp.asarray(rng.normal(size=(d.n_items, 5)), jnp.float32)
    return d, g, ue, ie


def test_propagation_matches_the_dense_normalised_adjacency(small):
    d, g, ue, ie = small
    a = np.zeros((d.n_users, d.n_items))
    a[d.users, d.items] = 1.0
    norm = a / np.sqrt(np.outer(a.sum(1), a.sum(0)).clip(1e-30))
    adj = np.block([[np.zeros((d.n_users, d.n_users)), norm],
                    [norm.T, np.zeros((d.n_items, d.n_items))]])
    x0 = np.concatenate([np.asarray(ue), np.asarray(ie)])
    x1, x2, x3 = adj @ x0, adj @ adj @ x0, adj @ adj @ adj @ x0
    p = N.propagate(g, ue, ie, n_layers=3)
    even, odd = (x0 + x2) / 4, (x1 + x3) / 4
    np.testing.assert_allclose(np.asarray(p.user_even), even[: d.n_users], atol=1e-5)
    np.testing.assert_allclose(np.asarray(p.item_odd), odd[d.n_users:], atol=1e-5)


def test_parity_sums_add_up_to_lightgcns_layer_mean(small):
    _, g, ue, ie = small
    p = N.propagate(g, ue, ie, n_layers=2)
    mu, mi = N.layer_mean(g, ue, ie, n_layers=2)
    np.testing.assert_allclose(np.asarray(p.users()), np.asarray(mu), atol=1e-6)
    np.testing.assert_allclose(np.asarray(p.items()), np.asarray(mi), atol=1e-6)


def test_even_layers_carry_same_type_neighbours(small):
    # Items start at zero: a user's odd layers (item-type neighbours) and an item's even
    # layers stay zero; only paths from users reach them.
    _, g, ue, ie = small
    p = N.propagate(g, ue, jnp.zeros_like(ie), n_layers=4)
    assert float(jnp.abs(p.user_odd).max()) == 0.0 and float(jnp.abs(p.item_even).max()) == 0.0
    assert float(jnp.abs(p.user_even).max()) > 0 and float(jnp.abs(p.item_odd).max()) > 0


def test_pair_terms_sum_to_the_score(small):
    d, g, ue, ie = small
    p = N.propagate(g, ue, ie)
    t = N.pair_scores(p, jnp.asarray(d.users), jnp.asarray(d.items))
    score = jnp.sum(p.users()[d.users] * p.items()[d.items], axis=1)
    np.testing.assert_allclose(np.asarray(t["uu"] + t["ii"] + t["ui"] + t["iu"]),
                               np.asarray(score), rtol=1e-5, atol=1e-6)


def _authors_direction(ue, uo, ie, io, a_u, a_i, tau):
    """The authors' four-term form of one direction (NumPy, float64)."""
    den = np.linalg.norm(ue + uo, axis=1)[:, None] * np.linalg.norm(ie + io, axis=1)[None] + 1e-8
    c_uu, c_ii, c_ui, c_iu = ue @ io.T / den, uo @ ie.T / den, ue @ ie.T / den, uo @ io.T / den
    eye = np.eye(len(ue))
    r = (c_uu + c_ii + c_ui + c_iu) * eye + (a_u * c_uu + a_i * c_ii + a_i * c_ui
                                              + a_u * c_iu) * (1 - eye)
    lg = r / tau
    m = lg.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(lg - m).sum(1))
    return np.mean(lse - np.diag(lg))


def test_nt_ssm_equals_the_authors_four_term_form():
    rng = np.random.default_rng(3)
    ue, uo, ie, io = (rng.normal(size=(6, 4)) for _ in range(4))
    w = N.TypeWeights(uu=1.3, ii=0.7, ui=0.9, iu=1.1)
    got = N.nt_ssm_loss(*(jnp.asarray(x, jnp.float32) for x in (ue, uo, ie, io)), w, 0.3)
    want = 0.5 * (_authors_direction(ue, uo, ie, io, 1.1, 0.7, 0.3)      # alpha_iu, alpha_ii
                  + _authors_direction(ie, io, ue, uo, 1.3, 0.9, 0.3))   # alpha_uu, alpha_ui
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_all_alphas_one_is_exactly_bidirectional_ssm():
    rng = np.random.default_rng(4)
    ue, uo, ie, io = (jnp.asarray(rng.normal(size=(16, 8)), jnp.float32) for _ in range(4))
    nt = N.nt_ssm_loss(ue, uo, ie, io, N.TypeWeights.ones(), 0.2)
    both = N.ssm_loss(ue + uo, ie + io, 0.2)
    assert abs(float(nt) - float(both)) < 1e-5 * abs(float(both))
    one_way = N.ssm_loss(ue + uo, ie + io, 0.2, directions="user")
    assert abs(float(one_way) - float(both)) > 1e-3  # the authors' baseline differs
    paper = N.nt_ssm_loss(ue, uo, ie, io, N.TypeWeights.paper(), 0.2)
    assert abs(float(paper) - float(both)) > 1e-3


def test_weights_grid_vmaps_and_mirrors():
    rng = np.random.default_rng(5)
    parts = [jnp.asarray(rng.normal(size=(8, 4)), jnp.float32) for _ in range(4)]
    grid = N.TypeWeights.stack([N.TypeWeights.paper(), N.TypeWeights.paper().mirrored()])
    vm = jax.vmap(lambda w: N.nt_ssm_loss(*parts, w, 0.2))(grid)
    loop = [N.nt_ssm_loss(*parts, w, 0.2) for w in (N.TypeWeights.paper(),
                                                      N.TypeWeights.paper().mirrored())]
    np.testing.assert_allclose(np.asarray(vm), np.asarray(loop), rtol=1e-6)
    m = N.TypeWeights.paper().mirrored()
    assert [float(x) for x in m.as_array()] == pytest.approx([0.8, 1.2, 1.0, 0.8])


@pytest.fixture(scope="module")
def grid_runs(small):
    d, g, _, _ = small
    cfg = N.NTSSMConfig(dim=8, batch_size=16, epochs=2)
    tc = TrainConfig(steps=6, progress=False)
    both = N.train_grid(jax.random.key(7), g, N.TypeWeights.stack(
        [N.TypeWeights.paper(), N.TypeWeights.ones(), N.TypeWeights.paper()]), cfg,
        seeds=[0, 0, 0], train_config=tc)
    alone = N.train_grid(jax.random.key(7), g, N.TypeWeights.stack([N.TypeWeights.ones()]),
                         cfg, seeds=[0], train_config=tc)
    return both, alone


def test_grid_members_train_as_if_alone(grid_runs):
    both, alone = grid_runs
    a, b = both.model(1), alone.model(0)
    np.testing.assert_allclose(np.asarray(a.user[...]), np.asarray(b.user[...]), atol=1e-6)
    np.testing.assert_allclose(both.losses[:, 1], alone.losses[:, 0], rtol=1e-5)
    # Same weights and seed: the same run; other weights from the same start: another.
    np.testing.assert_array_equal(np.asarray(both.model(0).item[...]),
                                  np.asarray(both.model(2).item[...]))
    assert not np.allclose(np.asarray(both.model(0).item[...]), np.asarray(a.item[...]))


def test_clear_errors(small):
    d, g, ue, ie = small
    with pytest.raises(ValueError, match="alpha_ii must be finite and >= 0"):
        N.TypeWeights(ii=-0.1)
    parts = [jnp.ones((4, 3))] * 4
    with pytest.raises(Exception, match="every alpha must be finite and >= 0"):
        jax.jit(lambda a: N.nt_ssm_loss(*parts, N.TypeWeights(uu=a), 0.2))(jnp.asarray(-1.0))
    with pytest.raises(ValueError, match="tau must be > 0"):
        N.nt_ssm_loss(*parts, None, 0.0)
    with pytest.raises(ValueError, match="at least 2 interactions"):
        N.nt_ssm_loss(*[jnp.ones((1, 3))] * 4)
    with pytest.raises(ValueError, match=r"items ids must be in \[0, 24\)"):
        N.bipartite_graph([0, 1], [0, 24], 30, 24)
    with pytest.raises(ValueError, match="at least one interaction"):
        N.bipartite_graph([], [], 30, 24)
    with pytest.raises(ValueError, match="user_emb must have shape"):
        N.propagate(g, ue[:3], ie)
    with pytest.raises(ValueError, match="batch_size must be <= the number of interactions"):
        N.train_grid(jax.random.key(0), g, N.TypeWeights.stack([N.TypeWeights()]),
                     N.NTSSMConfig(batch_size=10_000))
    with pytest.raises(ValueError, match="one leading grid axis"):
        N.train_grid(jax.random.key(0), g, N.TypeWeights(), N.NTSSMConfig(batch_size=8))
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        N.NTSSMConfig(epochs=0)
