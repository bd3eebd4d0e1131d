"""Dual forgetting, DFA-MoE and SCR (jaxsci.llm.continual), the digit domains, the config."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.data import digit_domains as dd
from jaxsci.experiments import continual as X
from jaxsci.llm import continual as cl


def test_scr_on_a_hand_computed_table():
    # tau = 1/ln 2: weights proportional to 2^-s = 1/4, 1/2, 1 -> 1/7, 2/7, 4/7.
    ret = jnp.array([7.0, 0.7, 0.35])
    sim = jnp.array([2.0, 1.0, 0.0])
    got = float(cl.scr(ret, sim, temperature=1.0 / math.log(2.0)))
    assert got == pytest.approx(7 / 7 + 1.4 / 7 + 1.4 / 7, rel=1e-6)  # 1.4
    # The plain mean (2.68) hides the loss that SCR shows.
    assert float(jnp.mean(ret)) > 2.0 > got


@pytest.mark.parametrize("tau", [0.01, 0.3, 5.0])
def test_scr_is_the_plain_mean_when_all_similarities_are_equal(tau):
    ret = jnp.array([1.3, 0.6, 0.9, 0.2])
    got = float(cl.scr(ret, jnp.full(4, 0.37), temperature=tau))
    assert got == pytest.approx(float(jnp.mean(ret)), rel=1e-6)


def test_scr_limits_in_the_temperature():
    ret, sim = jnp.array([3.0, 0.9, 0.4]), jnp.array([0.95, 0.5, 0.1])
    assert float(cl.scr(ret, sim, temperature=1e4)) == pytest.approx(float(ret.mean()),
                                                                     rel=1e-3)
    assert float(cl.scr(ret, sim, temperature=1e-3)) == pytest.approx(0.4, rel=1e-6)


def test_scr_and_retention_reject_bad_input():
    with pytest.raises(ValueError, match="similarity must have shape"):
        cl.scr(jnp.ones(3), jnp.ones(2))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        cl.scr(jnp.ones(3), jnp.ones(3), temperature=0.0)
    with pytest.raises(ValueError, match="retention must hold at least one"):
        cl.scr(jnp.ones(0), jnp.ones(0))
    with pytest.raises(TypeError, match="retention must have a floating dtype"):
        cl.scr(jnp.ones(3, int), jnp.ones(3))
    with pytest.raises(ValueError, match="retention must be finite"):
        cl.scr(jnp.array([1.0, jnp.nan]), jnp.ones(2))
    with pytest.raises(ValueError, match="acc_after must be >= 0"):
        cl.retention(jnp.array([-0.1, 0.5]), jnp.ones(2))
    with pytest.raises(eqx.EquinoxRuntimeError, match="acc_before must be > 0"):
        cl.retention(jnp.ones(2), jnp.array([0.5, 0.0]))
    with pytest.raises(Exception, match="acc_before must be > 0"):
        eqx.filter_jit(cl.retention)(jnp.ones(2), jnp.array([0.5, 0.0]))
    np.testing.assert_allclose(
        cl.retention(jnp.array([0.3, 0.8]), jnp.array([0.05, 0.8]), floor=0.1), [3.0, 1.0])


def test_ema_update_by_hand_and_its_limits():
    ema = {"a": jnp.array([1.0, 2.0]), "b": jnp.array(4.0)}
    new = {"a": jnp.array([3.0, 0.0]), "b": jnp.array(0.0)}
    got = cl.ema_update(ema, new, 0.75)
    np.testing.assert_allclose(got["a"], [1.5, 1.5])
    assert float(got["b"]) == pytest.approx(3.0)
    np.testing.assert_allclose(cl.ema_update(ema, new, 1.0)["a"], ema["a"])
    np.testing.assert_allclose(cl.ema_update(ema, new, 0.0)["a"], new["a"])
    with pytest.raises(ValueError, match="momentum must be <= 1"):
        cl.ema_update(ema, new, 1.5)
    with pytest.raises(ValueError, match="same tree structure"):
        cl.ema_update(ema, {"a": new["a"]}, 0.5)


@pytest.fixture(scope="module")
def tiny():
    return cl.init(jax.random.key(0), n_experts=3, hidden=16, rank=4, text_dim=8)


def test_router_rows_sum_to_one_and_the_momentum_slot_switches_off(tiny):
    model = eqx.tree_at(lambda m: m.router_w, tiny,
                        jax.random.normal(jax.random.key(1), tiny.router_w.shape))
    x = jax.random.uniform(jax.random.key(2), (7, 64))
    on = cl.router_weights(model, x, use_momentum=1.0)
    off = cl.router_weights(model, x, use_momentum=0.0)
    np.testing.assert_allclose(on.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(off.sum(-1), 1.0, rtol=1e-6)
    assert on.shape == (7, 4) and float(on.min()) > 0
    np.testing.assert_array_equal(np.asarray(off[:, -1]), 0.0)
    with pytest.raises(ValueError, match="images must have 2 dimensions"):
        cl.router_weights(model, jnp.ones(64))


def test_fresh_adapters_leave_the_tower_and_similarity_by_hand(tiny):
    x = jax.random.uniform(jax.random.key(3), (5, 64))
    np.testing.assert_allclose(cl.features(tiny, x, cl.dfa_moe()),
                               cl.frozen_features(tiny, x), atol=1e-6)
    a = jnp.array([[1.0, 0.0], [2.0, 0.0]])
    assert float(cl.domain_similarity(a, a * 3)) == pytest.approx(1.0)
    assert float(cl.domain_similarity(a, -a)) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="b must have shape"):
        cl.domain_similarity(a, jnp.ones((2, 3)))


def test_each_method_moves_only_its_parameters(tiny):
    rng = np.random.default_rng(0)
    x = rng.random((40, 64)).astype(np.float32)
    y = rng.integers(0, 4, 40).astype(np.int32)
    text = jnp.asarray(rng.standard_normal((4, 8)), jnp.float32)
    seen = np.array([True, True, False, False])
    kw = dict(steps=5, batch=8)
    naive, _ = cl.train_task(tiny, cl.naive(), x, y, seen, x, y, text, jax.random.key(0), **kw)
    dfa, loss = cl.train_task(tiny, cl.dfa_moe(), x, y, seen, x, y, text, jax.random.key(0),
                              **kw)
    assert loss.shape == (5,) and bool(jnp.all(jnp.isfinite(loss)))
    assert not np.allclose(naive.tower.w1, tiny.tower.w1)
    np.testing.assert_array_equal(naive.experts.b, tiny.experts.b)
    np.testing.assert_array_equal(dfa.tower.w1, tiny.tower.w1)
    assert not np.allclose(dfa.experts.b, tiny.experts.b)
    # The momentum expert used is the EMA of the trained one: it moved, but less.
    fast = float(jnp.abs(dfa.momentum.b).max())
    slow = float(jnp.abs(dfa.momentum_ema.b).max())
    assert 0 < slow < fast
    moe, _ = cl.train_task(tiny, cl.moe_adapters(), x, y, seen, x, y, text, jax.random.key(0),
                           **kw)
    np.testing.assert_array_equal(moe.momentum.b, tiny.momentum.b)  # no momentum expert
    again, _ = cl.train_task(tiny, cl.dfa_moe(), x, y, seen, x, y, text, jax.random.key(0),
                             **kw)
    np.testing.assert_array_equal(again.experts.b, dfa.experts.b)  # same key, same model
    with pytest.raises(ValueError, match="seen must have shape"):
        cl.train_task(tiny, cl.naive(), x, y, seen[:3], x, y, text, jax.random.key(0), **kw)


def test_pretraining_aligns_images_to_captions():
    x, y = dd.digits()
    text = jnp.asarray(np.random.default_rng(1).standard_normal((10, 8)), jnp.float32)
    model = cl.init(jax.random.key(0), hidden=32, rank=2, text_dim=8)
    model, hist = cl.pretrain(model, x, y, text, jax.random.key(1), steps=150, batch=64)
    assert float(hist[-20:].mean()) < 0.5 * float(hist[:5].mean())
    assert float(cl.accuracy(model, x, y, text, cl.naive())) > 0.8


def test_digit_domains():
    x, y = dd.digits()
    np.testing.assert_allclose(dd.domain(x[:3], "invert"), 1.0 - x[:3], atol=1e-6)
    np.testing.assert_allclose(dd.domain(x[:3], "rot0"), x[:3], atol=1e-6)
    thick = dd.domain(x[:20], "thick")
    assert (thick >= x[:20] - 1e-6).all() and thick.sum() > x[:20].sum()
    a = dd.domain(x[:5], "noise20", seed=3)
    np.testing.assert_array_equal(a, dd.domain(x[:5], "noise20", seed=3))
    assert a.min() >= 0 and a.max() <= 1
    assert dd.captions()[3] == "a photo of the digit three"
    with pytest.raises(ValueError, match="unknown transform 'blur'"):
        dd.domain(x[:2], "invert+blur")
    with pytest.raises(ValueError, match="images must have shape"):
        dd.domain(x[:2, :10], "clean")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="unknown transform"):
        X.ContinualConfig(cl_domain="sepia")
    with pytest.raises(ValueError, match="n_tasks must be <= 10"):
        X.ContinualConfig(n_tasks=11)
    with pytest.raises(ValueError, match="loss_classes must be"):
        X.ContinualConfig(loss_classes="all")
