"""RSIR: the fidelity stop rule on constructed rankings, ties, the local restriction,
SASRec's causality and loss, the bigram scorer, data plumbing, clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxsci.data import recsys
from jaxsci.recsys import rsir as R


class Fixed(R.AbstractScorer):
    """The same scores whatever the context (a constructed ranking)."""

    scores: jax.Array

    def __call__(self, context, length):
        return self.scores


SEED = jnp.asarray([[0, 1, 2, -1]])
LEN = jnp.asarray([3])


def _gen(scores, k, local_prob=0.0, m=1):
    cfg = R.GenerateConfig(m=m, k=k, local_prob=local_prob)
    return R.generate(Fixed(jnp.asarray(scores)), SEED, LEN, jax.random.key(0), cfg, n_items=6)


def test_fidelity_rule_stops_and_drops_the_failing_step():
    # Step 1 picks item 3 (0.9); then the candidates rank 4 (0.8), 5 (0.7) above the
    # seed's remaining items 1 (0.5), 2 (0.4): with k = 2 none is in the top 2 -> stop,
    # item 3 dropped.
    s = [0.1, 0.5, 0.4, 0.9, 0.8, 0.7]
    t = _gen(s, k=2)
    assert int(t.lengths[0]) == 1 and bool(t.stopped_by_filter[0])
    np.testing.assert_array_equal(np.asarray(t.items[0]), [0, -1, -1, -1])
    # k = 4 lets item 1 in: the trajectory runs to the seed's length, 3, by argmax.
    t = _gen(s, k=4)
    assert int(t.lengths[0]) == 3 and not bool(t.stopped_by_filter[0])
    np.testing.assert_array_equal(np.asarray(t.items[0]), [0, 3, 4, -1])


def test_the_rank_test_is_exact_under_ties():
    # After picking 3, the 2nd-largest candidate score is 0.7, shared by item 5 and the
    # seed's item 1: a tie with the k-th counts as within the top k.
    t = _gen([0.1, 0.7, 0.0, 0.95, 0.9, 0.7], k=2)
    assert int(t.lengths[0]) >= 2 and not bool(t.stopped_by_filter[0])
    t = _gen([0.1, 0.69, 0.0, 0.95, 0.9, 0.7], k=2)
    assert int(t.lengths[0]) == 1 and bool(t.stopped_by_filter[0])


def test_local_restriction_keeps_to_the_seed_users_items():
    t = _gen([0.1, 0.5, 0.4, 0.9, 0.8, 0.7], k=4, local_prob=1.0)
    np.testing.assert_array_equal(np.asarray(t.items[0]), [0, 1, 2, -1])
    assert not bool(t.stopped_by_filter[0])
    # k = 2: after item 1 the seed's last item (2, score 0.4) is outside the top 2.
    t = _gen([0.1, 0.5, 0.4, 0.9, 0.8, 0.7], k=2, local_prob=1.0)
    assert int(t.lengths[0]) == 1 and bool(t.stopped_by_filter[0])


def test_a_trajectory_that_uses_up_the_seed_keeps_its_last_item():
    seeds = jnp.asarray([[0, 1, -1, -1]])
    cfg = R.GenerateConfig(m=1, k=1, local_prob=1.0)
    t = R.generate(Fixed(jnp.asarray([0.1, 0.5, 0.4, 0.9, 0.8, 0.7])), seeds,
                   jnp.asarray([4]), jax.random.key(0), cfg, n_items=6)
    np.testing.assert_array_equal(np.asarray(t.items[0]), [0, 1, -1, -1])
    assert not bool(t.stopped_by_filter[0])


def test_trajectories_are_seed_major_deterministic_and_deduplicated():
    s = [0.1, 0.5, 0.4, 0.9, 0.8, 0.7]
    a, b = _gen(s, k=4, local_prob=0.5, m=6), _gen(s, k=4, local_prob=0.5, m=6)
    np.testing.assert_array_equal(np.asarray(a.items), np.asarray(b.items))
    assert np.all(np.asarray(a.items)[:, 0] == 0)
    acc = R.accepted_trajectories(a, min_len=3)
    assert len(np.unique(acc, axis=0)) == len(acc) and np.all((acc >= 0).sum(1) >= 3)


@pytest.fixture(scope="module")
def tiny_model():
    return R.SASRec(12, 6, dim=8, n_blocks=1, dropout=0.0, rngs=nnx.Rngs(0))


def test_sasrec_is_causal(tiny_model):
    seq = jnp.asarray([[1, 2, 3, 4, 5, -1]])
    other = seq.at[0, 3].set(7)
    h1, h2 = tiny_model.hidden(seq), tiny_model.hidden(other)
    np.testing.assert_allclose(np.asarray(h1[0, :3]), np.asarray(h2[0, :3]), atol=1e-6)
    assert not np.allclose(np.asarray(h1[0, 3]), np.asarray(h2[0, 3]))


def test_full_softmax_loss_is_the_cross_entropy(tiny_model):
    seq = jnp.asarray([[1, 2, 3, -1, -1, -1], [4, 5, 6, 7, 8, 9]])
    got = R.sequence_loss(tiny_model, seq, jax.random.key(0), loss="full")
    h = np.asarray(tiny_model.hidden(seq[:, :-1]), np.float64)
    e = np.asarray(tiny_model.item_embeddings(), np.float64)
    nll = []
    for b in range(2):
        for t in range(5):
            x, y = int(seq[b, t]), int(seq[b, t + 1])
            if x >= 0 and y >= 0:
                lg = h[b, t] @ e.T
                nll.append(np.log(np.exp(lg - lg.max()).sum()) + lg.max() - lg[y])
    assert float(got) == pytest.approx(np.mean(nll), rel=1e-5)
    sampled = R.sequence_loss(tiny_model, seq, jax.random.key(0), n_negatives=5)
    assert 0 < float(sampled) < float(got)  # 5 negatives: a smaller partition function


def test_bigram_scorer_is_a_normalised_transition_model():
    sc = R.bigram_scorer(jnp.asarray([[0, 1, 2, -1], [0, 1, 3, 2]]), 4)
    p = np.exp(np.asarray(sc.log_prob))
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
    assert np.argmax(p[0]) == 1  # 0 -> 1 twice
    assert float(sc(jnp.asarray([2, 0, -1, -1]), jnp.asarray(2))[1]) == pytest.approx(
        float(sc.log_prob[0, 1]))


def test_augment_pads_to_a_fixed_capacity():
    rows, n = R.augment(np.asarray([[0, 1, -1]]), np.asarray([[2, 3], [4, 5]]), 4)
    assert n == 3 and rows.shape == (4, 3)
    np.testing.assert_array_equal(rows[:3], [[0, 1, -1], [2, 3, -1], [4, 5, -1]])
    assert np.all(rows[3] == -1)


def test_clustered_sequences_have_no_repeats_and_an_oracle():
    d = recsys.clustered_sequences(jax.random.key(0), n_users=20, n_items=40, n_clusters=4,
                                   max_length=10)
    for u in range(d.n_users):
        seq = list(d.train[u, : d.lengths[u]]) + [int(d.test[u])]
        assert len(set(seq)) == len(seq)
        assert d.oracle[u][d.train[u, : d.lengths[u]]].sum() == 0
    np.testing.assert_allclose(d.oracle.sum(1), 1.0, rtol=1e-5)


def test_clear_errors(tiny_model):
    with pytest.raises(ValueError, match="k must be >= 1"):
        R.GenerateConfig(k=0)
    with pytest.raises(ValueError, match="loss must be one of"):
        R.SASRecConfig(loss="bpr")
    fixed = Fixed(jnp.zeros(6))
    with pytest.raises(ValueError, match=r"seeds holds item ids in \[0, 6\)"):
        R.generate(fixed, jnp.asarray([[0, 6, -1]]), jnp.asarray([2]), jax.random.key(0),
                   n_items=6)
    with pytest.raises(ValueError, match="seed_lengths must be >= 1"):
        R.generate(fixed, jnp.asarray([[0, 1, -1]]), jnp.asarray([0]), jax.random.key(0),
                   n_items=6)
    with pytest.raises(ValueError, match="n_valid must be <= 1"):
        R.train(jax.random.key(0), jnp.asarray([[0, 1, 2]]), 6, R.SASRecConfig(steps=1),
                n_valid=2)
    with pytest.raises(ValueError, match="dim must be divisible by n_heads"):
        R.SASRec(6, 4, dim=6, n_heads=4, rngs=nnx.Rngs(0))
