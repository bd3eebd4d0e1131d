"""Semantic isotropy (jaxsci.llm.isotropy) and its experiment's labels and statistics."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import facts
from jaxsci.experiments import isotropy as X
from jaxsci.llm import isotropy as I

EPS = I.JITTER


def _rand(n=6, d=9, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def test_identical_responses_have_the_closed_form_near_zero():
    n = 6
    x = np.tile(_rand(1, 9), (n, 1))
    # K = 1 1^T + eps I: eigenvalues n + eps (once) and eps (n - 1 times).
    p = np.array([(n + EPS) / n] + [EPS / n] * (n - 1))
    want = -np.sum(p * np.log(p)) / math.log(n)
    got = float(I.semantic_isotropy(x))
    assert got == pytest.approx(want, rel=1e-3)
    assert got < 0.01


def test_orthonormal_responses_exceed_one_by_the_unrenormalised_jitter():
    n = 5
    x = np.eye(n, 8, dtype=np.float32) * 3.0  # orthogonal; the norm is divided out
    want = -(1 + EPS) * math.log((1 + EPS) / n) / math.log(n)
    got = float(I.semantic_isotropy(x))
    assert got == pytest.approx(want, rel=1e-5)
    assert got > 1.0
    assert float(I.semantic_isotropy(x, jitter=0.0)) == pytest.approx(1.0, rel=1e-5)


def test_isotropy_grows_as_the_responses_spread():
    base, noise = _rand(1, 16, 1), _rand(8, 16, 2)
    vals = [float(I.semantic_isotropy(base + s * noise)) for s in (0.05, 0.2, 0.5, 1.0, 3.0)]
    assert all(a < b for a, b in zip(vals, vals[1:], strict=False)), vals


def test_a_mask_equals_dropping_the_rows_for_every_signal():
    emb, hid = _rand(6, 9, 3), _rand(6, 12, 4)
    bags = (np.random.default_rng(5).random((6, 10)) < 0.4).astype(np.float32)
    nll = np.linspace(0.5, 2.0, 6).astype(np.float32)
    keep = np.array([1, 0, 1, 1, 0, 1], bool)
    masked = I.trust_signals(emb, hid, bags, nll, keep)
    dropped = I.trust_signals(emb[keep], hid[keep], bags[keep], nll[keep])
    for a, b, name in zip(masked, dropped, I.Signals._fields, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-4, abs=1e-5), name


def test_eigenscore_is_the_mean_log_eigenvalue_of_the_centred_gram():
    z = _rand(5, 11, 6).astype(np.float64)
    c = z - z.mean(axis=1, keepdims=True)
    want = np.linalg.slogdet(c @ c.T + 1e-2 * np.eye(5))[1] / 5
    assert float(I.eigenscore(z.astype(np.float32), alpha=1e-2)) == pytest.approx(want, rel=1e-4)


def test_lexical_dispersion_on_a_hand_case():
    bags = I.bag_of_words([["the cat sat", "The dog sat.", "a cat"], ["x y", "x y", "X Y"]])
    # Jaccard: {the,cat,sat}/{the,dog,sat} 2/4, vs {a,cat} 1/4, {the,dog,sat}/{a,cat} 0.
    got = jax.vmap(I.lexical_dispersion)(jnp.asarray(bags))
    np.testing.assert_allclose(np.asarray(got), [1 - 0.75 / 3, 0.0], atol=1e-6)


def test_cosine_dispersion_and_bad_inputs():
    x = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]], np.float32)
    # cosines: 0, -1, 0 -> mean -1/3
    assert float(I.cosine_dispersion(x)) == pytest.approx(1 + 1 / 3, rel=1e-6)
    with pytest.raises(ValueError, match="embeddings must hold at least 2"):
        I.semantic_isotropy(x[:1])
    with pytest.raises(TypeError, match="mask must have a bool dtype"):
        I.semantic_isotropy(x, np.ones(3))
    with pytest.raises(ValueError, match="same number of responses"):
        I.bag_of_words([["a", "b"], ["c"]])
    with pytest.raises(TypeError, match="groups must be"):
        I.bag_of_words("a text")


def test_the_fact_checker_matches_whole_words_and_aliases():
    italy = next(c for c in facts.COUNTRIES if c.name == "Italy")
    assert facts.check_facts(italy, "Its capital is Rome, in southern Europe.") == {
        "capital": True, "continent": True, "language": False}
    # "Romania" is not "Rome"; a wrong capital is not the right one.
    assert not facts.check_facts(italy, "Romania and Milan")["capital"]
    china = next(c for c in facts.COUNTRIES if c.name == "China")
    assert facts.check_facts(china, "the capital, peking, speaks MANDARIN")["language"]
    assert facts.nonfactuality(italy, "Rome, Asia", ("capital", "continent")) == 0.5
    with pytest.raises(ValueError, match="attributes must be a non-empty subset"):
        facts.check_facts(italy, "Rome", ("population",))
    with pytest.raises(TypeError, match="text must be a str"):
        facts.check_facts(italy, None)


def test_the_experiment_statistics_match_scipy_and_sklearn():
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(7)
    s, y = rng.random(30), rng.random(30)
    s[3] = s[4]  # a tie
    assert X.spearman(s, y) == pytest.approx(spearmanr(s, y).statistic, rel=1e-12)
    lab = y > 0.5
    assert X.auroc(s, lab) == pytest.approx(roc_auc_score(lab, s), rel=1e-12)
    assert math.isnan(X.auroc(s, np.zeros(30, bool)))


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="attributes must be a non-empty subset"):
        X.IsotropyConfig(attributes=("capital", "bogus"))
    with pytest.raises(ValueError, match="n_samples must be >= 2"):
        X.IsotropyConfig(n_samples=1)
    assert "capital city and the continent" in X.prompt_text(facts.COUNTRIES[0],
                                                             ("capital", "continent"))
