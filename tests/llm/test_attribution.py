"""Stage attribution (jaxsci.llm.attribution): exactness, first-order accuracy, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxsci.data import toxicity
from jaxsci.experiments import attribution as X
from jaxsci.llm import attribution as A

STAGES = jnp.asarray([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
T = len(STAGES)
SGD = optax.chain(optax.add_decayed_weights(0.1),
                  optax.sgd(optax.linear_schedule(0.3, 0.05, T), momentum=0.7))


def _data(seed=0, b=4, d=3):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((T, b, d)), jnp.float32)


def _close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(A.ravel_effects(a)), np.asarray(A.ravel_effects(b)),
                               **kw)


def _linear(p, x):
    return jnp.dot(p, x)


def _quadratic(p, x):
    return 0.5 * jnp.sum((2.0 + x ** 2) * (p - x) ** 2)


def _nonlinear(p, x):
    return jnp.sum(jnp.tanh(p * x) ** 2) + 0.05 * jnp.sum(p ** 4)


def test_optimizer_aware_estimate_is_exact_when_gradients_ignore_the_parameters():
    # A linear loss: the gradient is constant, SGD + momentum + decay is affine in
    # (params, momentum), so removing a stage propagates exactly.
    x, p0 = _data(), jnp.ones(3)
    true = A.retrain_effects(_linear, SGD, p0, x, STAGES, 4)
    for mode in ("optimizer", "tangent"):
        _close(A.stage_effects(_linear, SGD, p0, x, STAGES, 4, mode=mode), true,
               rtol=1e-4, atol=1e-5)
    naive = A.ravel_effects(A.stage_effects(_linear, SGD, p0, x, STAGES, 4, mode="naive"))
    err = np.abs(np.asarray(naive - A.ravel_effects(true)))[:3]
    assert err.max() > 0.05  # the naive estimate misses momentum and decay


def test_tangent_estimate_is_exact_on_a_quadratic_and_curvature_matters():
    # Quadratic loss + SGD with momentum: the training map is affine, so its tangent
    # is the full removal; dropping the curvature (optimizer mode) is not.
    x, p0 = _data(1), jnp.zeros(3)
    true = A.retrain_effects(_quadratic, SGD, p0, x, STAGES, 4)
    _close(A.stage_effects(_quadratic, SGD, p0, x, STAGES, 4, mode="tangent"), true,
           rtol=1e-3, atol=1e-5)
    opt = A.ravel_effects(A.stage_effects(_quadratic, SGD, p0, x, STAGES, 4,
                                          mode="optimizer"))
    assert float(jnp.max(jnp.abs(opt - A.ravel_effects(true)))) > 1e-2


def test_tangent_estimate_matches_finite_difference_retraining():
    # Adam on a non-quadratic loss: push eps of stage 1's removal through the later steps
    # by retraining; (theta_T(eps) - theta_T) / eps -> the tangent estimate.
    x, p0 = _data(2), jnp.asarray([0.4, -0.2, 0.3])
    adam = optax.adam(0.05, eps_root=1e-16)
    a, b = 3, 6  # stage 1's steps
    with jax.enable_x64(True):
        x, p0 = x.astype(jnp.float64), p0.astype(jnp.float64)
        est = A.stage_effects(_nonlinear, adam, p0, x, STAGES, 4, mode="tangent")[1]
        start = A.replay(_nonlinear, adam, p0, x[:a])
        end = A.replay(_nonlinear, adam, start.params, x[a:b], opt_state=start.opt_state)
        base = A.replay(_nonlinear, adam, end.params, x[b:], opt_state=end.opt_state).params
        eps = 1e-5
        mix = lambda u, v: jax.tree_util.tree_map(  # noqa: E731
            lambda s, e: e + eps * (s - e) if jnp.issubdtype(e.dtype, jnp.inexact) else e,
            u, v)
        moved = A.replay(_nonlinear, adam, mix(start.params, end.params), x[b:],
                         opt_state=mix(start.opt_state, end.opt_state)).params
        np.testing.assert_allclose(np.asarray((moved - base) / eps), np.asarray(est),
                                   rtol=1e-4, atol=1e-8)


def test_the_last_stage_is_estimated_exactly_and_naive_is_minus_the_displacement():
    x, p0 = _data(3), jnp.ones(3)
    true = A.retrain_effects(_nonlinear, SGD, p0, x, STAGES, 4)
    naive = A.stage_effects(_nonlinear, SGD, p0, x, STAGES, 4, mode="naive")
    for mode in A.MODES:
        est = A.stage_effects(_nonlinear, SGD, p0, x, STAGES, 4, mode=mode)
        np.testing.assert_allclose(np.asarray(est[3]), np.asarray(true[3]), rtol=1e-5,
                                   atol=1e-6)
    mid = A.replay(_nonlinear, SGD, p0, x[:3])
    after = A.replay(_nonlinear, SGD, mid.params, x[3:6], opt_state=mid.opt_state)
    np.testing.assert_allclose(np.asarray(naive[1]), np.asarray(mid.params - after.params),
                               rtol=1e-5, atol=1e-6)


def test_zero_weights_skip_steps_like_dropping_the_data():
    # Plain SGD at a constant rate has no state: a skipped stage is a shorter run.
    x, p0, sgd = _data(4), jnp.ones(3), optax.sgd(0.1)
    keep = np.asarray(STAGES) != 2
    masked = A.replay(_nonlinear, sgd, p0, x, jnp.asarray(keep, jnp.float32)).params
    dropped = A.replay(_nonlinear, sgd, p0, x[keep]).params
    np.testing.assert_allclose(np.asarray(masked), np.asarray(dropped), rtol=1e-6)


def test_tracin_scores_sum_to_the_behaviour_change_at_small_steps():
    x, p0 = _data(5), jnp.asarray([0.3, 0.1, -0.2])
    sgd = optax.sgd(1e-3)
    f = lambda p: jnp.sum(jnp.sin(p) * jnp.arange(1.0, 4.0))  # noqa: E731
    scores = A.tracin_scores(_nonlinear, f, sgd, p0, x)
    final = A.replay(_nonlinear, sgd, p0, x).params
    assert scores.shape == (T, 4)
    assert float(jnp.sum(scores)) == pytest.approx(float(f(final) - f(p0)), rel=1e-2)


def test_stage_masks_and_bad_inputs():
    m = np.asarray(A.stage_masks(STAGES, 4))
    assert m.shape == (4, T) and np.all(m.sum(1) == T - 3)
    x, p0 = _data(), jnp.ones(3)
    with pytest.raises(ValueError, match="non-decreasing"):
        A.stage_effects(_linear, SGD, p0, x, STAGES[::-1], 4)
    with pytest.raises(ValueError, match="mode must be one of"):
        A.stage_effects(_linear, SGD, p0, x, STAGES, 4, mode="second-order")
    with pytest.raises(TypeError, match="optimizer must be an optax"):
        A.retrain_effects(_linear, optax.sgd, p0, x, STAGES, 4)
    with pytest.raises(ValueError, match="one common number of steps"):
        A.replay(_linear, SGD, p0, {"a": x, "b": x[:5]})


def test_config_validation_and_the_corpus():
    with pytest.raises(ValueError, match="digits_steps must hold 4"):
        X.AttributionConfig(digits_steps=(10, 10))
    with pytest.raises(ValueError, match="target_group must be one of"):
        X.AttributionConfig(target_group="dogs")
    c = toxicity.corpus(seed=0)
    assert len(c.texts) == len(set(c.texts))  # every text distinct
    g = np.asarray([toxicity.GROUPS[i] in t.lower() if i >= 0 else True
                    for t, i in zip(c.texts, c.group, strict=True)])
    assert g.all() and set(np.unique(c.labels)) == {0, 1}
    assert np.all(c.labels == (c.template >= len(toxicity.NEUTRAL)))
