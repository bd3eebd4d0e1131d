import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core import validation as v


def test_check_int_type_and_range():
    assert v.check_int("n", np.int64(3), min=1) == 3
    with pytest.raises(TypeError, match="n must be an int, got float 2.0"):
        v.check_int("n", 2.0)
    with pytest.raises(TypeError, match="n must be an int, got bool"):
        v.check_int("n", True)
    with pytest.raises(ValueError, match="n must be >= 2, got 1"):
        v.check_int("n", 1, min=2)
    with pytest.raises(ValueError, match="n must be <= 5, got 6"):
        v.check_int("n", 6, max=5)


def test_check_scalar_bounds_and_finiteness():
    assert v.check_scalar("T", 0.5, gt=0.0) == 0.5
    with pytest.raises(ValueError, match="T must be > 0.0, got 0.0"):
        v.check_scalar("T", 0.0, gt=0.0)
    with pytest.raises(ValueError, match="T must be finite, got nan"):
        v.check_scalar("T", float("nan"))
    with pytest.raises(TypeError, match="T must be a real scalar"):
        v.check_scalar("T", np.ones(3))
    with pytest.raises(ValueError, match="p must be <= 1.0, got 1.5"):
        v.check_scalar("p", 1.5, ge=0.0, le=1.0)


def test_check_scalar_passes_tracers_through():
    # Under vmap the value is unknown; the check must not fail or concretise it.
    out = jax.vmap(lambda t: v.check_scalar("T", t, gt=0.0) * 2)(jnp.array([1.0, -1.0]))
    np.testing.assert_allclose(np.asarray(out), [2.0, -2.0])


def test_check_array_shape_dtype_and_values():
    x = np.zeros((3, 4), np.float32)
    assert v.check_array("x", x, shape=(None, 4), dtype="floating") is x
    with pytest.raises(ValueError, match=r"x must have shape \(\*, 5\), got \(3, 4\)"):
        v.check_array("x", x, shape=(None, 5))
    with pytest.raises(ValueError, match="x must have 1 dimensions, got shape"):
        v.check_array("x", x, ndim=1)
    with pytest.raises(TypeError, match="x must have a integer dtype, got float32"):
        v.check_array("x", x, dtype="integer")
    bad = x.copy()
    bad[0, 0] = np.nan
    bad[1, 1] = np.inf
    with pytest.raises(ValueError, match="x must be finite, got 1 NaN and 1 inf"):
        v.check_array("x", bad)
    with pytest.raises(ValueError, match="x must be >= 1.0, got minimum 0.0"):
        v.check_array("x", x, ge=1.0)
    with pytest.raises(TypeError, match="x must be an array, got dict"):
        v.check_array("x", {})


def test_check_key_and_choice():
    v.check_key("key", jax.random.key(0))
    v.check_key("key", jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        v.check_key("key", 0)
    with pytest.raises(TypeError, match="key must be a jax.random key"):
        v.check_key("key", jnp.zeros(3))
    assert v.check_choice("kernel", "lse", ("lse", "lsr")) == "lse"
    with pytest.raises(ValueError, match=r"kernel must be one of \['lse', 'lsr'\], got 'x'"):
        v.check_choice("kernel", "x", ("lse", "lsr"))


def test_float64_numpy_input_warns_once_not_per_operation(monkeypatch):
    # A user's float64 NumPy data with x64 off: one warning naming the argument, then
    # silence (it used to be seven JAX truncation warnings per call, from inside jaxsci).
    import warnings

    import numpy as np

    from jaxsci.core import validation
    from jaxsci.dynamics import hopfield as hf

    monkeypatch.setattr(validation, "_WARNED_X64", False)
    rng = np.random.default_rng(0)
    patterns = rng.standard_normal((5, 8))
    patterns *= np.sqrt(8) / np.linalg.norm(patterns, axis=1, keepdims=True)  # float64
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            e = hf.energy(patterns[0], patterns, hf.LSE(1.0))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "x: float64 input converted to float32" in messages[0]
    assert "shown once" in messages[0] and e.dtype == np.float32
