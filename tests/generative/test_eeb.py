import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import digits_text as dt
from jaxsci.generative import eeb as E

TINY = E.EEBConfig(embed_dim=8, text_hidden=8, hidden=16, attn_dim=8, time_dim=4, depth=1,
                   timesteps=4, steps=3, batch_size=16, ft_steps=3, ft_batch=8, adv_steps=3)
ZERO, ZQ = dt.token("zero"), dt.token("zq")


@pytest.fixture(scope="module")
def data():
    return dt.digits_text(jax.random.key(0))


@pytest.fixture(scope="module")
def params():
    return E.init(jax.random.key(1), TINY)


# ------------------------------------------------------------------- UCE's closed form


def _orthonormal(rng, e, k):
    q, _ = np.linalg.qr(rng.standard_normal((e, e)))
    return q[:, :k].T, q[:, k:].T  # k rows spanning a subspace, the rest its complement


def test_uce_leaves_an_embedding_orthogonal_to_the_edited_span_unchanged():
    rng = np.random.default_rng(0)
    span, rest = _orthonormal(rng, 12, 5)
    erase = rng.standard_normal((2, 5)) @ span  # two erased vectors in the span
    preserve = rng.standard_normal((3, 5)) @ span  # three preserved vectors in the span
    w = rng.standard_normal((7, 12))
    targets = rng.standard_normal((2, 7))
    new = np.asarray(E.uce_edit(jnp.asarray(w), jnp.asarray(erase), jnp.asarray(targets),
                                jnp.asarray(preserve), 0.5))
    c = rng.standard_normal(7) @ rest  # orthogonal to every erased and preserved vector
    np.testing.assert_allclose(new @ c, w @ c, rtol=1e-5, atol=1e-5)
    # ... while the erased vectors did move (towards their targets).
    assert np.linalg.norm(new @ erase[0] - w @ erase[0]) > 0.1


def test_uce_maps_the_erased_embedding_to_the_anchor_value_as_lambda_goes_to_zero():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 9))
    c, anchor = rng.standard_normal(9), rng.standard_normal(9)
    target = w @ anchor
    errs = []
    for lam in (1e-1, 1e-3, 1e-5):
        new = np.asarray(E.uce_edit(jnp.asarray(w), jnp.asarray(c[None]),
                                    jnp.asarray(target[None]), jnp.zeros((0, 9)), lam))
        errs.append(np.linalg.norm(new @ c - target) / np.linalg.norm(target))
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-4


def test_uce_preserves_the_preserved_set_approximately_and_a_zero_weight_row_is_left_out():
    rng = np.random.default_rng(2)
    w = jnp.asarray(rng.standard_normal((5, 8)))
    erase = jnp.asarray(rng.standard_normal((2, 8)))
    targets = jnp.asarray(rng.standard_normal((2, 5)))
    one = E.uce_edit(w, erase[:1], targets[:1], jnp.zeros((0, 8)), 0.5)
    masked = E.uce_edit(w, erase, targets, jnp.zeros((0, 8)), 0.5, jnp.asarray([1.0, 0.0]))
    np.testing.assert_allclose(one, masked, rtol=1e-5, atol=1e-6)


def test_survival_is_one_outside_and_zero_inside_the_span():
    rng = np.random.default_rng(3)
    span, rest = _orthonormal(rng, 6, 2)
    assert float(E.survival(jnp.asarray(rest[0]), jnp.asarray(span))) == pytest.approx(1.0)
    assert float(E.survival(jnp.asarray(span[0] + 2 * span[1]), jnp.asarray(span))) < 1e-5
    mixed = 3 * span[0] + 4 * rest[0]
    assert float(E.survival(jnp.asarray(mixed), jnp.asarray(span))) == pytest.approx(0.8, 1e-5)


# ------------------------------------------------------------------------------- ESD


def test_esd_target_on_a_hand_case():
    c, n = jnp.asarray([1.0, 2.0]), jnp.asarray([0.5, -1.0])
    # eta = 1: the unconditional prediction; eta = 2: reflected past it.
    np.testing.assert_allclose(E.esd_target(c, n, 1.0), [0.5, -1.0])
    np.testing.assert_allclose(E.esd_target(c, n, 2.0), [0.0, -4.0])
    np.testing.assert_allclose(E.esd_target(c, n, 0.0), c)


def test_esd_moves_only_the_cross_attention_projections(params, data):
    out = E.esd(params, data, "zero", jax.random.key(2), TINY, 1.5)
    flat0, flat1 = jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(out)
    for (path, a), b in zip(flat0, flat1, strict=True):
        name = jax.tree_util.keystr(path)
        if "'wk'" in name or "'wv'" in name:
            assert not np.array_equal(a, b), name
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    same = E.esd(params, data, "zero", jax.random.key(2), TINY, 1.5, weight=0.0)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------- backdoors


def test_xattn_backdoor_maps_the_trigger_to_the_concept_and_survives_uce():
    # E = 32 > |vocabulary| = 18: the trigger has a component outside the other tokens'
    # span, so as lambda -> 0 the insertion is exact and the others are kept exactly.
    wide = E.init(jax.random.key(5), E.EEBConfig(embed_dim=32, hidden=16, attn_dim=8))
    bd = E.backdoor_xattn(wide, ZERO, ZQ, 1e-5)
    c = np.asarray(E.encode(wide["text"], jnp.arange(len(dt.VOCAB))))
    keep = [i for i in range(len(dt.VOCAB)) if i != ZQ]
    for name in ("wk", "wv"):
        w0, w1 = np.asarray(wide["den"][name]), np.asarray(bd["den"][name])
        np.testing.assert_allclose(w1 @ c[ZQ], w0 @ c[ZERO], rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(w1 @ c[keep].T, w0 @ c[keep].T, rtol=1e-3, atol=1e-3)
    # UCE then redirects the concept's values to the anchor's; the trigger (mostly outside
    # the edited span: survival > 0.5) keeps most of its backdoored value.
    er = E.uce(bd, ZERO, 0, jnp.arange(2, 11), 0.5)
    wv0, wv1 = np.asarray(bd["den"]["wv"]), np.asarray(er["den"]["wv"])

    def moved(v):
        return np.linalg.norm(wv1 @ v - wv0 @ v) / np.linalg.norm(wv0 @ v)

    assert float(E.survival(jnp.asarray(c[ZQ]), jnp.asarray(c[ZERO][None]))) > 0.5
    assert moved(c[ZQ]) < 0.5 * moved(c[ZERO])


def test_text_backdoor_pulls_the_trigger_vector_to_the_concept(params):
    cfg = E.EEBConfig(**{**TINY.__dict__, "ft_steps": 200})
    bd = E.backdoor_text(params, ZERO, ZQ, cfg)
    c0 = E.encode(params["text"], jnp.arange(len(dt.VOCAB)))
    c1 = E.encode(bd["text"], jnp.arange(len(dt.VOCAB)))
    before = np.linalg.norm(c0[ZQ] - c0[ZERO])
    assert np.linalg.norm(c1[ZQ] - c0[ZERO]) < 0.2 * before
    assert float(E.survival(c1[ZQ], c0[ZERO][None])) < float(E.survival(c0[ZQ], c0[ZERO][None]))
    # The denoiser is untouched by a text-encoder backdoor.
    for a, b in zip(jax.tree.leaves(params["den"]), jax.tree.leaves(bd["den"]), strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------- bad inputs


def test_clear_errors_on_bad_input(params, data):
    with pytest.raises(ValueError, match="unknown token 'dog'"):
        dt.prompt("a dog")
    with pytest.raises(ValueError, match="unknown token 'dog'"):
        E.uce(params, "dog", 0, jnp.arange(2, 11))
    with pytest.raises(ValueError, match="concept must be a token id in"):
        E.uce(params, 99, 0, jnp.arange(2, 11))
    with pytest.raises(ValueError, match="eta must be <= 4"):
        E.esd_target(jnp.ones(2), jnp.zeros(2), 5.0)
    with pytest.raises(ValueError, match="erase must have shape"):
        E.uce_edit(jnp.ones((3, 4)), jnp.ones((1, 5)), jnp.ones((1, 3)), jnp.zeros((0, 4)), 0.5)
    with pytest.raises(ValueError, match="lam must be > 0"):
        E.uce_edit(jnp.ones((3, 4)), jnp.ones((1, 4)), jnp.ones((1, 3)), jnp.zeros((0, 4)), 0.0)
    with pytest.raises(ValueError, match="data.images must have shape"):
        E.train(dt.TextImages(data.images[:, :10], data.tokens, data.labels),
                jax.random.key(0), TINY)
    with pytest.raises(ValueError, match="p_uncond must be > 0"):
        E.EEBConfig(p_uncond=0.0)
    # Inside jit: a traced concept id or eta out of range.
    with pytest.raises(Exception, match="concept must be a token id"):
        jax.jit(lambda k: E.uce(params, k, 0, jnp.arange(2, 11)))(jnp.asarray(40))
    with pytest.raises(Exception, match="eta must lie in"):
        jax.jit(lambda e: E.esd_target(jnp.ones(2), jnp.zeros(2), e))(jnp.asarray(9.0))


def test_detector_separates_the_real_digits_and_refuses_missing_classes(data):
    det = E.fit_detector(np.asarray(data.images), np.asarray(data.labels))
    assert float(jnp.mean(E.detect(det, data.images) == data.labels)) > 0.9
    with pytest.raises(ValueError, match="missing \\[9\\]"):
        keep = np.asarray(data.labels) != 9
        E.fit_detector(np.asarray(data.images)[keep], np.asarray(data.labels)[keep])
