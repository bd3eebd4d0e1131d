"""Reliability metrics against direct enumeration: pass@k and pass^k over every k-subset
of the reruns, consistency and flakiness over every pair; regression diffs, bootstrap
intervals and the claim helpers."""

import itertools

import numpy as np
import pytest

from jaxsci.common import agents as A


def _enumerate(row, k, rule):
    subsets = list(itertools.combinations(range(len(row)), k))
    return np.mean([rule(row[list(s)]) for s in subsets])


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(0)
    s = rng.random((12, 7)) < rng.random((12, 1))
    s[0], s[1] = True, False  # always and never solved
    return s


def test_pass_at_k_and_pass_hat_k_against_enumeration(runs):
    for k in range(1, runs.shape[1] + 1):
        at, hat = A.pass_at_k(runs, k), A.pass_hat_k(runs, k)
        for i, row in enumerate(runs):
            assert at[i] == pytest.approx(_enumerate(row, k, np.any), abs=1e-12)
            assert hat[i] == pytest.approx(_enumerate(row, k, np.all), abs=1e-12)
    np.testing.assert_allclose(A.pass_at_k(runs, 1), runs.mean(1))
    np.testing.assert_allclose(A.pass_hat_k(runs, 1), runs.mean(1))
    # The reliability gap is >= 0 and 0 exactly for tasks always or never solved.
    gap = A.pass_at_k(runs, 1) - A.pass_hat_k(runs, 3)
    assert np.all(gap >= 0) and gap[0] == gap[1] == 0


def test_consistency_and_flakiness_against_pairs(runs):
    pairs = list(itertools.combinations(range(runs.shape[1]), 2))
    for i, row in enumerate(runs):
        agree = np.mean([row[a] == row[b] for a, b in pairs])
        assert A.rerun_consistency(runs)[i] == pytest.approx(agree)
        assert A.flakiness(runs)[i] == pytest.approx(1 - agree)
    answers = [["3", "3", "4"], ["x", "y", "z"]]
    np.testing.assert_allclose(A.rerun_consistency(answers), [1 / 3, 0.0])


def test_regression_diff_and_bootstrap():
    before = np.array([[1, 1], [0, 0], [1, 0], [1, 1]], bool)
    after = np.array([[1, 1], [1, 1], [0, 0], [1, 1]], bool)
    d = A.regression_diff(before, after, n_boot=200)
    assert (d.before, d.after, d.delta) == (0.625, 0.75, 0.125)
    assert (d.improved, d.regressed, d.unchanged) == ((1,), (2,), 2)
    assert d.ci[0] <= d.delta <= d.ci[1]
    lo, hi = A.bootstrap_ci(np.ones(10))
    assert lo == hi == 1.0
    x = np.random.default_rng(1).normal(size=400)
    lo, hi = A.bootstrap_ci(x, n_boot=500)
    assert lo < x.mean() < hi and hi - lo < 0.3
    assert A.bootstrap_ci(x, seed=3) == A.bootstrap_ci(x, seed=3)


def test_claim_helpers():
    assert A.assert_gap(0.8, [0.5, 0.7], min_gap=0.1) == pytest.approx(0.2)
    with pytest.raises(AssertionError, match=r"expected wf - ag > 0.*wf=0.5, ag=0.6"):
        A.assert_gap(0.5, 0.6, names=("wf", "ag"))
    A.assert_monotone([0.9, 0.5, 0.5, 0.1], decreasing=True)
    with pytest.raises(AssertionError, match=r"success\[1\]=0.5, success\[2\]=0.6"):
        A.assert_monotone([0.9, 0.5, 0.6], decreasing=True, name="success")
    with pytest.raises(AssertionError, match="strictly"):
        A.assert_monotone([1, 1], strict=True)
    assert A.is_monotone([1, 2, 1.95], tol=0.1) and not A.is_monotone([1, 2, 1.8], tol=0.1)


def test_errors():
    with pytest.raises(ValueError, match=r"k must be an int in \[1, n=3\].*got 4"):
        A.pass_hat_k(np.ones((2, 3), bool), 4)
    with pytest.raises(ValueError, match=r"successes must have shape \(tasks, n\).*\(2, 2, 2\)"):
        A.pass_at_k(np.ones((2, 2, 2), bool), 1)
    with pytest.raises(ValueError, match=r"successes must be booleans.*\[0, 2\]"):
        A.pass_at_k([[0, 2]], 1)
    with pytest.raises(ValueError, match="same tasks, got 2 and 3 tasks"):
        A.regression_diff(np.ones((2, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="flakiness needs n >= 2"):
        A.flakiness([[True]])
