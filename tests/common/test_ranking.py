"""Ranking metrics against a direct NumPy computation, ER@k's chance level, errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.common import ranking
from jaxsci.data.recsys import pad_lists


def _numpy_recall_ndcg(scores, history, targets, k):
    rec, nd = [], []
    for s, h, t in zip(scores, history, targets, strict=True):
        t = set(int(x) for x in t if x >= 0)
        if not t:
            continue
        s = s.astype(float).copy()
        s[[x for x in h if x >= 0]] = -np.inf
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]  # ties: lower id first
        hits = [i in t for i in order]
        rec.append(sum(hits) / len(t))
        dcg = sum(1 / math.log2(r + 2) for r, h_ in enumerate(hits) if h_)
        idcg = sum(1 / math.log2(r + 2) for r in range(min(len(t), k)))
        nd.append(dcg / idcg)
    return np.mean(rec), np.mean(nd)


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    n_users, n_items = 40, 30
    scores = rng.normal(size=(n_users, n_items)).astype(np.float32)
    scores[:, :3] = 0.5  # ties
    hist = [rng.choice(n_items, rng.integers(0, 6), replace=False) for _ in range(n_users)]
    targ = []
    for u in range(n_users):
        rest = np.setdiff1d(np.arange(n_items), hist[u])
        targ.append(rng.choice(rest, rng.integers(0, 5), replace=False))
    return scores, pad_lists(hist), pad_lists(targ)


@pytest.mark.parametrize("k", [1, 5, 20])
def test_recall_ndcg_match_a_direct_numpy_computation(case, k):
    scores, hist, targ = case
    m = ranking.recall_ndcg(jnp.asarray(scores), hist, targ, ks=(k,))
    w = np.asarray(m["has_target"])
    want_r, want_n = _numpy_recall_ndcg(scores, hist, targ, k)
    assert float(np.asarray(m[f"recall@{k}"])[w].mean()) == pytest.approx(want_r, rel=1e-5)
    assert float(np.asarray(m[f"ndcg@{k}"])[w].mean()) == pytest.approx(want_n, rel=1e-5)


def test_evaluate_embeddings_in_chunks_equals_the_dense_block(case):
    _, hist, targ = case
    rng = np.random.default_rng(1)
    ue = jnp.asarray(rng.normal(size=(40, 8)), jnp.float32)
    ie = jnp.asarray(rng.normal(size=(30, 8)), jnp.float32)
    chunked = ranking.evaluate_embeddings(ue, ie, hist, targ, ks=(5, 10), chunk_size=7)
    dense = ranking.recall_ndcg(ue @ ie.T, hist, targ, ks=(5, 10))
    w = np.asarray(dense["has_target"])
    for key in ("recall@5", "ndcg@5", "recall@10", "ndcg@10"):
        assert float(chunked[key]) == pytest.approx(float(np.asarray(dense[key])[w].mean()),
                                                    rel=1e-5)


def test_a_perfect_ranking_scores_one_and_history_is_never_recommended():
    scores = jnp.asarray([[5.0, 4.0, 3.0, 2.0, 1.0]])
    m = ranking.recall_ndcg(scores, jnp.asarray([[0]]), jnp.asarray([[1, 2]]), ks=(2,))
    assert float(m["recall@2"][0]) == 1.0 and float(m["ndcg@2"][0]) == pytest.approx(1.0)
    hits = ranking.top_k_hits(scores, jnp.asarray([[0, 1]]), jnp.asarray([[0, 1]]), 3)
    assert not bool(jnp.any(hits))  # masked items cannot be hits


def test_exposure_rate_of_random_scores_is_k_over_candidates():
    scores = jax.random.normal(jax.random.key(0), (20000, 100))
    er = float(ranking.exposure_rate(scores, 0, k=20))
    assert abs(er - 0.20) < 4 * math.sqrt(0.2 * 0.8 / 20000)


def test_exposure_rate_ties_count_against_the_target():
    scores = jnp.asarray([[1.0, 1.0, 1.0, 0.0], [2.0, 1.0, 1.0, 0.0]])
    assert float(ranking.exposure_rate(scores, jnp.asarray([0, 0]), k=2)) == 0.5
    assert float(ranking.exposure_rate(scores, jnp.asarray([3, 0]), k=1)) == 0.5


def test_item_popularity_counts_ignore_padding():
    pop = ranking.item_popularity(jnp.asarray([[0, 2, -1], [2, -1, -1]]), 4)
    np.testing.assert_array_equal(np.asarray(pop), [1, 0, 2, 0])


def test_clear_errors():
    s = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match=r"targets holds item ids in \[0, n_items\)"):
        ranking.recall_ndcg(s, jnp.asarray([[0], [1]]), jnp.asarray([[4], [0]]))
    with pytest.raises(ValueError, match="history must have one row per user"):
        ranking.recall_ndcg(s, jnp.asarray([[0]]), jnp.asarray([[1], [0]]))
    with pytest.raises(ValueError, match="k must be >= 1"):
        ranking.recall_ndcg(s, jnp.asarray([[0], [1]]), jnp.asarray([[1], [0]]), ks=(0,))
    with pytest.raises(ValueError, match="k must be >= 1"):
        ranking.exposure_rate(s, 0, k=0)
    with pytest.raises(TypeError, match="history must have an integer dtype|history must"):
        ranking.recall_ndcg(s, jnp.zeros((2, 1)), jnp.asarray([[1], [0]]))
    with pytest.raises(ValueError, match="width must be >= the longest list"):
        pad_lists([[1, 2, 3]], width=2)
