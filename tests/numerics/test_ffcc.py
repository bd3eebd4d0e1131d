"""FFCC bit tricks: constants and error bounds against a NumPy bit-cast reference, the
lowering's identities, straight-through gradients, tuning, clear errors."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.numerics import ffcc as F

L, B = 2**23, 127
GRID = np.linspace(-6.0, 6.0, 4096, dtype=np.float32)


# NumPy references: the same bit manipulations, written independently with .view().
def np_pow2(z, sigma):
    t = np.clip(z.astype(np.float32) - np.float32(sigma), -126, 126)
    i = (t * np.float32(L)).astype(np.int32) + np.int32(B * L)
    return i.view(np.float32)


def np_log2(x, sigma):
    i = x.astype(np.float32).view(np.int32).astype(np.int64) - B * L
    return (i.astype(np.float32) * np.float32(2.0**-23)) + np.float32(sigma)


def np_recip(x, sigma):
    r = np.uint32(2 * B * L - round(2 * L * sigma))
    return (r - x.astype(np.float32).view(np.uint32)).view(np.float32)


@pytest.fixture(scope="module")
def tuned_sigmoid():
    f = jax.jit(lambda x: F.tune(F.SIGMOID, x, F.FloatTrick.standard(), 120, 2e-3))
    return f(jnp.asarray(GRID))


def test_closed_form_offsets_are_the_minimax_ones():
    f = np.linspace(0.0, 1.0, 200001)
    ratio = (1 + f) / 2**f
    assert F.SIGMA_EXP == pytest.approx(math.log2((1 + ratio.max()) / 2), abs=1e-9)
    assert F.SIGMA_LOG == pytest.approx((np.log2(1 + f) - f).max() / 2, abs=1e-9)
    assert F.SIGMA_LOG == pytest.approx(0.0430357, abs=1e-7)  # the classical constant
    # Minimax reciprocal offset: the magic constant R = 2 L (B - sigma) of the known
    # 0x7EF311C7 family (within the offset grid's resolution, 2.5e-5 * 2L = 839).
    r = 2 * B * L - round(2 * L * F.minimax_recip_sigma(0))
    assert abs(r - 0x7EF311C7) < 900
    assert F.float_format(jnp.float64) == (2**52, 1023)


def test_primitives_match_the_numpy_bit_cast_reference():
    z = GRID * np.float32(math.log2(math.e))
    np.testing.assert_array_equal(np.asarray(F.fast_pow2(z, F.SIGMA_EXP)),
                                  np_pow2(z, F.SIGMA_EXP))
    pos = np.exp(GRID).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(F.fast_log2(pos, F.SIGMA_LOG)),
                                  np_log2(pos, F.SIGMA_LOG))
    s = F.minimax_recip_sigma(0)
    signed = np.where(GRID == 0, 1.0, GRID * pos).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(F.fast_reciprocal(signed, s, newton=0)),
                                  np_recip(signed, s))


def test_error_bounds_are_the_analytic_ones():
    m = 2 / (math.e * math.log(2))
    bound_exp = (m - 1) / (m + 1)  # minimax relative error of (E2)
    x = GRID.astype(np.float64)
    rel = np.abs(np.asarray(F.fast_exp(GRID), np.float64) / np.exp(x) - 1)
    assert rel.max() <= bound_exp + 1e-5 and rel.max() > 0.97 * bound_exp
    rel0 = np.abs(np.asarray(F.fast_exp(GRID, 0.0), np.float64) / np.exp(x) - 1)
    assert rel0.max() == pytest.approx(m - 1, abs=2e-4)  # bare trick: M - 1
    pos = np.exp(x)
    err = np.abs(np.asarray(F.fast_log2(pos.astype(np.float32)), np.float64) - np.log2(pos))
    assert err.max() <= F.SIGMA_LOG + 2e-6 and err.max() > 0.97 * F.SIGMA_LOG
    # Reciprocal: the real-arithmetic minimax error, and its square after one Newton step.
    s = F.minimax_recip_sigma(0)
    u = -np.linspace(0, 1, 100001, endpoint=False) - 2 * s
    e = np.floor(u)
    worst = np.abs(2**e * (1 + u - e) * (1 + np.linspace(0, 1, 100001, endpoint=False)) - 1)
    d0 = worst.max()
    xs = pos.astype(np.float32)
    r0 = np.abs(np.asarray(F.fast_reciprocal(xs, s, 0), np.float64) * pos - 1)
    r1 = np.abs(np.asarray(F.fast_reciprocal(xs, s, 1), np.float64) * pos - 1)
    assert r0.max() <= d0 + 1e-5 and r0.max() > 0.95 * d0
    assert r1.max() <= d0**2 + 1e-5


def test_lowering_is_an_identity_and_removes_the_slow_operators():
    for name, expr in F.ACTIVATIONS.items():
        low = F.lower(expr)
        ops = F.count_ops(low)
        assert not {"exp", "log", "tanh", "div"} & set(ops), (name, ops)
        np.testing.assert_allclose(F.reference(low, GRID), F.reference(expr, GRID),
                                   rtol=1e-5, atol=1e-12, err_msg=name)
        exact = np.asarray(F.evaluate(low, GRID, F.Exact()))
        np.testing.assert_allclose(exact, np.asarray(F._EXACT_FNS[name](GRID)), rtol=2e-5,
                                   atol=2e-6, err_msg=name)
    # GELU (tanh form): the tanh, the 0.5 and the 1 + ... - 1 are folded away.
    assert F.count_ops(F.lower(F.GELU_TANH)) == {"mul": 5, "recip": 1, "add": 2, "pow2": 1}
    assert F.show(F.lower(F.SIGMOID)) == "recip(pow2(-1.4427 * x) + 1)"
    assert F.lower(F.Log(F.Exp(F.X))) == F.X
    assert F.lower(1.0 / F.Exp(F.X)) == F.Pow2(F.Mul((F.Const(-F.LOG2E), F.X)))
    assert F.lower(F.Exp(F.X) * F.Exp(2.0 * F.X)) == F.Pow2(F.Mul((F.Const(3 * F.LOG2E), F.X)))


def test_straight_through_gradient_is_the_slope_of_the_octave():
    # Inside an octave 2^e <= y < 2^(e+1) the bit-trick exp is linear with slope 2^e.
    z = jnp.asarray([0.3, 1.7, -2.4])
    g = jax.vmap(jax.grad(lambda t: F.fast_pow2(t, 0.0)))(z)
    np.testing.assert_allclose(np.asarray(g), 2.0 ** np.floor(np.asarray(z)), rtol=1e-6)
    g = jax.vmap(jax.grad(lambda t: F.fast_log2(t, 0.0)))(jnp.asarray([1.5, 3.0, 0.3]))
    np.testing.assert_allclose(np.asarray(g), [1.0, 0.5, 4.0], rtol=1e-6)


def test_tuning_lowers_the_mse(tuned_sigmoid):
    backend, losses = tuned_sigmoid
    start = float(F.mse_loss(F.FloatTrick.standard(), F.SIGMOID, GRID))
    assert float(losses[0]) == pytest.approx(start, rel=1e-5)
    assert float(F.mse_loss(backend, F.SIGMOID, GRID)) < 0.8 * start
    assert float(F.mse_loss(backend, F.SIGMOID, GRID)) <= float(np.min(np.asarray(losses)))
    assert backend.newton == 1


def test_vmap_over_constants_sweeps_them():
    sig = jnp.linspace(0.0, 0.1, 5)
    errs = jax.vmap(lambda s: F.error_bounds(F.fast_exp(GRID, s), jnp.exp(GRID)).max_rel)(sig)
    one = [float(F.error_bounds(F.fast_exp(GRID, s), jnp.exp(GRID)).max_rel) for s in sig]
    np.testing.assert_allclose(np.asarray(errs), one, rtol=1e-6)
    assert int(np.argmin(one)) == 2  # 0.05 is the grid point nearest SIGMA_EXP = 0.0437


def test_jaxpr_rewrite_of_jax_nn_matches_the_lowering():
    b = F.FloatTrick.standard()
    x = jnp.asarray(GRID)
    for name in ("sigmoid", "silu", "gelu_tanh", "exp"):
        got = np.asarray(jax.jit(F.fast_transform(F._EXACT_FNS[name], b))(x))
        want = np.asarray(F.approximation(F.ACTIVATIONS[name], b)(x))
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=name)
    # A whole function: every exp/tanh/div inside jax.nn.gelu and jax.nn.softmax rewritten.
    w = jax.random.normal(jax.random.key(0), (8, 8))

    def net(x):
        return jax.nn.softmax(jax.nn.gelu(x @ w) @ w)

    jaxpr = str(jax.make_jaxpr(F.fast_transform(net))(jnp.ones((2, 8))))
    assert " exp " not in jaxpr and " tanh " not in jaxpr and " div " not in jaxpr
    err = np.abs(np.asarray(F.fast_transform(net)(jnp.ones((2, 8)))) - np.asarray(
        net(jnp.ones((2, 8)))))
    assert err.max() < 0.05


def test_float64_formats():
    with jax.enable_x64(True):
        x = jnp.linspace(-6.0, 6.0, 257)
        assert F.fast_exp(x).dtype == jnp.float64
        rel = np.abs(np.asarray(F.fast_exp(x)) / np.exp(np.asarray(x)) - 1)
        assert rel.max() < 0.0299


def test_clear_errors():
    with pytest.raises(ValueError, match="x must be finite, got 1 NaN and 1 inf"):
        F.approximation(F.SILU)(jnp.asarray([1.0, jnp.nan, jnp.inf]))
    with pytest.raises(Exception, match="must be finite"):
        eqx.filter_jit(F.approximation(F.GELU_TANH))(jnp.asarray([1.0, jnp.nan]))
    with pytest.raises(TypeError, match="z must be float32 or float64"):
        F.fast_pow2(jnp.ones(3, jnp.bfloat16))
    with pytest.raises(TypeError, match="expr must be an ffcc Expr"):
        F.lower("silu")
    with pytest.raises(TypeError, match="an expression operand must be"):
        F.X + "1"
    with pytest.raises(ValueError, match="sigma_exp must be finite"):
        F.FloatTrick(sigma_exp=float("nan"))
    with pytest.raises(ValueError, match="approx and exact must have the same shape"):
        F.error_bounds(jnp.ones(3), jnp.ones(4))
    with pytest.raises(TypeError, match="fn must be callable"):
        F.fast_transform("silu")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        F.tune(F.SILU, GRID, steps=0)


def test_experiment_config_validation():
    from jaxsci.experiments import ffcc as E

    with pytest.raises(ValueError, match="hi must be > -6.0"):
        E.FFCCConfig(hi=-7.0)
    with pytest.raises(ValueError, match="newton must be <= 3"):
        E.FFCCConfig(newton=4)
    with pytest.raises(ValueError, match="test_fraction must be < 1"):
        E.FFCCConfig(test_fraction=1.0)
    assert E.CONFIGS["quick"].speed_size == 10_000_000  # the 10^7 floats
