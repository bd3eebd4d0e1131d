import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from jaxsci.core import RESULTS, raise_if_failed, succeeded


def _solve(x, throw):
    result = RESULTS.where(x > 0, RESULTS.successful, RESULTS.max_steps_reached)
    return raise_if_failed(x * 2, result, throw), result


def test_results_work_under_jit_and_vmap():
    out, result = jax.jit(jax.vmap(lambda x: _solve(x, False)))(jnp.array([1.0, -1.0]))
    assert succeeded(result).tolist() == [True, False]
    assert out.tolist() == [2.0, -2.0]


def test_throw_raises_the_failure_message_inside_jit():
    assert float(eqx.filter_jit(lambda x: _solve(x, True)[0])(jnp.asarray(1.0))) == 2.0
    with pytest.raises(Exception, match="maximum number of steps"):
        jax.block_until_ready(eqx.filter_jit(lambda x: _solve(x, True)[0])(jnp.asarray(-1.0)))


def test_every_failure_has_a_message():
    for name in ("max_steps_reached", "nonfinite", "breakdown", "stagnation", "not_verified"):
        assert len(RESULTS[getattr(RESULTS, name)]) > 20
    with pytest.raises(TypeError, match="throw must be a bool"):
        raise_if_failed(1.0, RESULTS.successful, "yes")
