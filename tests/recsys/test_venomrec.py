"""VenomRec (robustness evaluation): the fusions' definitions, the perturbation's budget,
masks and stop rule, the variants as traced ids, fake users and candidates, the
defences' scores and AUC, the evaluation grid's pairing, synthetic content, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxsci.data import recsys
from jaxsci.recsys import venomrec as V

N_ITEMS, VOCAB, DP = 12, 40, 4


@pytest.fixture(scope="module")
def catalogue():
    cluster = np.arange(N_ITEMS) % 3
    pop = np.arange(N_ITEMS, dtype=np.float32)
    items = recsys.multimodal_items(jax.random.key(0), cluster, pop, n_patches=8,
                                    patch_dim=DP, n_tokens=10, vocab=VOCAB, n_style_tokens=4)
    return items, pop


def _model(fusion, seed=0):
    return V.FusionRecommender(N_ITEMS, VOCAB, DP, dim=6, fusion=fusion,
                               rngs=nnx.Rngs(params=jax.random.key(seed)))


@pytest.fixture(scope="module")
def gated():
    return _model("gated")


def test_gated_fusion_is_the_consensus_gate_times_the_sum(catalogue, gated):
    items, _ = catalogue
    x, t = jnp.asarray(items.patches[0]), jnp.asarray(items.tokens[0])
    a = gated.patch(x).mean(0)
    b = gated.tok(t).mean(0)
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    gate = 1 / (1 + np.exp(-(5.0 * cos + 0.0)))
    np.testing.assert_allclose(np.asarray(V.content(gated, x, t).h), gate * (a + b),
                               rtol=1e-5, atol=1e-6)


def test_cross_attention_rows_are_distributions_and_additive_is_a_plus_b(catalogue):
    items, _ = catalogue
    x, t = jnp.asarray(items.patches[1]), jnp.asarray(items.tokens[1])
    ca = V.content(_model("cross_attention"), x, t)
    np.testing.assert_allclose(np.asarray(ca.attn.sum(-1)), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ca.h), np.asarray((ca.e + ca.attn @ ca.v).mean(0)),
                               rtol=1e-5, atol=1e-6)
    ad = V.content(_model("additive"), x, t)
    np.testing.assert_allclose(np.asarray(ad.h), np.asarray(ad.v.mean(0) + ad.e.mean(0)),
                               rtol=1e-5, atol=1e-6)


def test_user_states_are_the_decayed_causal_mean(gated):
    table = jnp.asarray(np.random.default_rng(0).normal(size=(N_ITEMS, 6)), jnp.float32)
    seqs = jnp.asarray([[3, 5, 7, -1]])
    q = V.user_states(gated, table, seqs)
    lam = gated.decay
    u2 = (lam**2 * table[3] + lam * table[5] + table[7]) / (lam**2 + lam + 1)
    np.testing.assert_allclose(np.asarray(q[0, 2]), np.asarray(gated.query(u2)), rtol=1e-5,
                               atol=1e-6)
    # a later item never changes an earlier state (causal)
    q2 = V.user_states(gated, table, jnp.asarray([[3, 5, 1, 2]]))
    np.testing.assert_allclose(np.asarray(q2[0, :2]), np.asarray(q[0, :2]), rtol=1e-6)


def _perturb(model, items, pop, target=0, **cfg):
    c = V.AttackConfig(n_popular=4, pool_size=2, **cfg)
    al = V.exposure_alignment(model, jnp.asarray(items.patches), jnp.asarray(items.tokens),
                              pop, target, c)
    x0, t0 = jnp.asarray(items.patches[target]), jnp.asarray(items.tokens[target])
    x, t, cos = V.perturb(model, x0, t0, al, c)
    return c, al, np.asarray(x0), np.asarray(t0), np.asarray(x), np.asarray(t), np.asarray(cos)


@pytest.mark.parametrize("mode", V.MODES)
def test_each_variant_edits_what_it_should_within_budget(catalogue, gated, mode):
    items, pop = catalogue
    c, al, x0, t0, x, t, cos = _perturb(gated, items, pop, mode=mode, stop_cos=1.0, eps=0.03)
    assert np.max(np.abs(x - x0)) <= 0.03 + 1e-6
    moved = np.any(x != x0, axis=1)
    changed = t != t0
    n_text = c.n_text(len(t0))
    assert c.tokens_per_round(len(t0)) == 2  # max(2, floor(0.2 * 10))
    if mode == "text":
        assert not moved.any()
    else:
        assert 1 <= moved.sum() <= c.rounds * int(np.ceil(c.patch_ratio * len(x0)))
    if mode == "image":
        assert not changed.any()
    else:
        assert 1 <= changed.sum() <= n_text
        assert set(t[changed]) <= set(np.asarray(al.keywords).tolist())
    assert cos.shape == (c.rounds,)


def test_the_stop_rule_ends_editing_after_the_first_round_that_reaches_it(catalogue, gated):
    items, pop = catalogue
    c, _, x0, t0, x, t, cos = _perturb(gated, items, pop, stop_cos=-1.0)
    k_p = int(np.ceil(c.patch_ratio * len(x0)))
    k_t = c.tokens_per_round(len(t0))
    assert np.any(x != x0, axis=1).sum() <= k_p and (t != t0).sum() <= k_t
    np.testing.assert_allclose(cos, cos[0])  # nothing changes after round 1


def test_zero_budget_leaves_the_image_alone(catalogue, gated):
    items, pop = catalogue
    *_, x0, _, x, _, _ = _perturb(gated, items, pop, eps=0.0)
    np.testing.assert_array_equal(x, x0)


def test_variants_as_traced_ids_match_the_static_configs(catalogue, gated):
    items, pop = catalogue
    P, T = jnp.asarray(items.patches), jnp.asarray(items.tokens)
    targets = jnp.asarray([0, 2])
    c = V.AttackConfig(n_popular=4, pool_size=2)
    xs, ts, _ = V.poison_items(gated, P, T, pop, jnp.tile(targets, 4), c,
                               mode=np.repeat(np.arange(4), 2))
    for i, mode in enumerate(V.MODES):
        x1, t1, _ = V.poison_items(gated, P, T, pop, targets,
                                   V.AttackConfig(mode=mode, n_popular=4, pool_size=2))
        np.testing.assert_allclose(np.asarray(xs[2 * i:2 * i + 2]), np.asarray(x1), atol=1e-6)
        np.testing.assert_array_equal(np.asarray(ts[2 * i:2 * i + 2]), np.asarray(t1))
    with pytest.raises(ValueError, match="mode must be one of"):
        V.poison_items(gated, P, T, pop, targets, c, mode="both")


def test_exposure_alignment_pool_is_popular_and_keywords_are_new(catalogue, gated):
    items, pop = catalogue
    c = V.AttackConfig(n_popular=4, pool_size=2)
    al = V.exposure_alignment(gated, jnp.asarray(items.patches), jnp.asarray(items.tokens),
                              pop, 1, c)
    popular = set(np.argsort(-pop)[:4].tolist())
    assert set(np.asarray(al.pool).tolist()) <= popular
    assert not set(np.asarray(al.keywords).tolist()) & set(items.tokens[1].tolist())
    np.testing.assert_allclose(np.asarray(al.centre_patches),
                               items.patches[sorted(popular)].mean(0), rtol=1e-5)


def test_fake_users_place_the_target_third_from_the_end():
    f = np.asarray(V.fake_users(jax.random.key(0), 5, 30, 7, np.arange(30.0)))
    assert f.shape == (7, 10)
    assert np.all(f[:, -3] == 5)
    others = np.delete(f, 7, axis=1)
    assert not np.any(others == 5)
    assert all(len(set(r)) == 9 for r in others)


def test_candidates_hold_the_target_and_unseen_distinct_items():
    hist = jnp.asarray([[1, 2, -1], [0, 3, 4]])
    c = np.asarray(V.sample_candidates(jax.random.key(1), hist, 6, 12, n_candidates=6))
    assert np.all(c[:, 0] == 6)
    for row, h in zip(c, np.asarray(hist), strict=True):
        assert len(set(row)) == 6 and not set(row[1:]) & set(h[h >= 0].tolist())


def test_detection_auc_is_the_mann_whitney_statistic():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    s = rng.normal(size=40).round(1)  # ties included
    y = rng.random(40) < 0.3
    np.testing.assert_allclose(float(V.detection_auc(jnp.asarray(s), y)),
                               roc_auc_score(y, s), rtol=1e-6)
    w = (rng.random(40) < 0.7).astype(np.float32)
    keep = w > 0
    np.testing.assert_allclose(float(V.detection_auc(jnp.asarray(s), y, w)),
                               roc_auc_score(y[keep], s[keep]), rtol=1e-6)
    assert np.isnan(float(V.detection_auc(jnp.asarray(s), np.zeros(40, bool))))


def test_defences_find_a_planted_shifted_cluster():
    rng = np.random.default_rng(1)
    real = rng.normal(size=(95, 8))
    fake = rng.normal(size=(5, 8)) * 0.3 + 4.0 * np.eye(8)[0]
    emb = jnp.asarray(np.concatenate([real, fake]), jnp.float32)
    y = np.arange(100) >= 95
    assert float(V.detection_auc(V.spectral_signature_scores(emb), y)) > 0.95
    assert float(V.detection_auc(V.activation_clustering_scores(emb), y)) > 0.95


def test_multimodal_items_plant_clusters_mismatches_and_style():
    cluster = np.repeat(np.arange(4), 50)
    pop = np.random.default_rng(0).random(200)
    a = recsys.multimodal_items(jax.random.key(3), cluster, pop, mismatch_rate=0.3)
    b = recsys.multimodal_items(jax.random.key(3), cluster, pop, mismatch_rate=0.3)
    np.testing.assert_array_equal(a.patches, b.patches)
    mism = (a.image_cluster != cluster) | (a.text_cluster != cluster)
    assert 0.2 < mism.mean() < 0.4
    assert not np.any((a.image_cluster != cluster) & (a.text_cluster != cluster))
    style = np.isin(a.tokens, a.style_tokens).mean(1)
    assert np.corrcoef(style, a.style)[0, 1] > 0.5
    with pytest.raises(ValueError, match="popularity must have the shape"):
        recsys.multimodal_items(jax.random.key(0), cluster, pop[:10])
    with pytest.raises(ValueError, match="vocab must be"):
        recsys.multimodal_items(jax.random.key(0), cluster, pop, vocab=8)


def _grid_inputs(items, n_users=16, width=6):
    rng = np.random.default_rng(0)
    train = rng.integers(0, N_ITEMS, (n_users, width)).astype(np.int32)
    train[:, -1] = -1
    lengths = np.full(n_users, width - 1, np.int32)
    test = rng.integers(0, N_ITEMS, n_users).astype(np.int32)
    fake = V.pad_fake(V.fake_users(jax.random.key(2), 3, N_ITEMS, 2, length=5), width)
    key = jax.random.key_data(jax.random.key(9))
    members = V.Poisoned(target=jnp.asarray([3, 3, 3]),
                         patches=jnp.stack([jnp.asarray(items.patches[3])] * 3),
                         tokens=jnp.stack([jnp.asarray(items.tokens[3])] * 3),
                         fake=jnp.stack([fake] * 3),
                         fake_weight=jnp.asarray([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]),
                         key=jnp.stack([key] * 3))
    return train, lengths, test, members


def test_the_grid_pairs_members_and_no_fake_rows_give_no_auc(catalogue, gated):
    items, _ = catalogue
    train, lengths, test, members = _grid_inputs(items)
    cfg = V.VictimConfig(dim=6, finetune_steps=3, batch_size=4)
    out = V.poison_and_evaluate(gated, items.patches, items.tokens, train, lengths, test,
                                members, jax.random.key(0), cfg, k=2, n_candidates=5)
    out = {k: np.asarray(v) for k, v in out.items()}
    # identical members give identical results; no fake rows, no AUC
    for k in ("er", "ndcg", "auc_spectral"):
        np.testing.assert_array_equal(out[k][1], out[k][2])
    assert np.isnan(out["auc_spectral"][0]) and np.isfinite(out["auc_spectral"][1])
    assert np.all((out["er"] >= 0) & (out["er"] <= 1))
    with pytest.raises(ValueError, match="members.fake must be"):
        V.poison_and_evaluate(gated, items.patches, items.tokens, train, lengths, test,
                              members._replace(fake=members.fake[..., :4]),
                              jax.random.key(0), cfg, k=2, n_candidates=5)
    with pytest.raises(Exception, match=r"members.target must be item ids"):
        V.poison_and_evaluate(gated, items.patches, items.tokens, train, lengths, test,
                              members._replace(target=jnp.asarray([3, 3, N_ITEMS])),
                              jax.random.key(0), cfg, k=2, n_candidates=5)


def test_training_lowers_the_loss_and_rejects_bad_ids(catalogue):
    items, _ = catalogue
    rng = np.random.default_rng(0)
    seqs = np.stack([(np.arange(6) + s) % N_ITEMS for s in rng.integers(0, N_ITEMS, 32)])
    cfg = V.VictimConfig(dim=6, steps=60, batch_size=8, learning_rate=1e-2)
    _, losses = V.train_victim(jax.random.key(0), _model("additive"), items.patches,
                               items.tokens, seqs, cfg)
    assert losses[-10:].mean() < losses[:10].mean() - 0.3
    with pytest.raises(Exception, match=r"seqs holds item ids in \[0, 12\)"):
        V.train_victim(jax.random.key(0), _model("additive"), items.patches, items.tokens,
                       np.full((4, 5), N_ITEMS), cfg)


def test_configs_reject_bad_values():
    with pytest.raises(ValueError, match="fusion must be one of"):
        V.VictimConfig(fusion="concat")
    with pytest.raises(ValueError, match="mode must be one of"):
        V.AttackConfig(mode="both")
    with pytest.raises(ValueError, match="eps must be >= 0"):
        V.AttackConfig(eps=-0.1)
    with pytest.raises(ValueError, match="fusion must be one of"):
        V.FusionRecommender(4, 8, 2, fusion="x", rngs=nnx.Rngs(0))
