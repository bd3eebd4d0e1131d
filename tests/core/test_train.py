"""Tests for jaxsci.core.train: convergence, determinism, exact resume, errors."""

from __future__ import annotations

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxsci.core.train import TrainConfig, TrainState, fit, init

# A tiny linear regression: y = X w_true + b_true + noise, minibatches drawn by
# index inside the jitted step.
_N, _D, _BATCH = 32, 3, 8
_W_TRUE = jnp.asarray([1.5, -2.0, 0.5])
_X = jax.random.normal(jax.random.key(100), (_N, _D))
_Y = _X @ _W_TRUE + 0.3 + 0.01 * jax.random.normal(jax.random.key(101), (_N,))


def _batch_fn(step, key):
    idx = jax.random.choice(key, _N, (_BATCH,), replace=False)
    return _X[idx], _Y[idx]


def _regression_loss(params, batch, key):
    x, y = batch
    # Key-dependent noise on the loss, so a wrongly restored key changes the run.
    pred = x @ params["w"] + params["b"] + 1e-3 * jax.random.normal(key)
    return jnp.mean((pred - y) ** 2)


def _params():
    return {"w": jnp.zeros((_D,)), "b": jnp.zeros(())}


def _quiet(steps, **kw):
    return TrainConfig(steps=steps, progress=False, **kw)


def _assert_states_equal(a: TrainState, b: TrainState) -> None:
    assert int(a.step) == int(b.step)
    np.testing.assert_array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))
    arrays = lambda s: jax.tree_util.tree_leaves(eqx.filter((s.params, s.opt_state), eqx.is_array))
    for x, y in zip(arrays(a), arrays(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-6)


def test_fit_reduces_regression_loss():
    state, losses = fit(
        _regression_loss,
        _params(),
        optax.adam(0.1),
        jax.random.key(0),
        _quiet(50),
        batch_fn=_batch_fn,
    )
    assert losses.shape == (50,) and losses.dtype == np.float32
    assert np.all(np.isfinite(losses))
    assert losses[-5:].mean() < 0.05 * losses[:5].mean()
    np.testing.assert_allclose(state.params["w"], _W_TRUE, atol=0.2)
    assert int(state.step) == 50


def test_data_is_an_argument_of_the_step_not_a_constant():
    """``data`` reaches batch_fn and loss_fn, is not trained, and gives the run the
    closure gives."""
    big = {"x": _X, "y": _Y, "frozen_scale": jnp.ones(())}

    def batch_fn(step, key, data):
        idx = jax.random.choice(key, _N, (_BATCH,), replace=False)
        return data["x"][idx], data["y"][idx]

    def loss_fn(params, batch, key, data):
        return data["frozen_scale"] * _regression_loss(params, batch, key)

    ref, ref_losses = fit(_regression_loss, _params(), optax.adam(0.1), jax.random.key(0),
                          _quiet(20), batch_fn=_batch_fn)
    state, losses = fit(loss_fn, _params(), optax.adam(0.1), jax.random.key(0), _quiet(20),
                        batch_fn=batch_fn, data=big)
    _assert_states_equal(state, ref)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    # Without batch_fn the data is loss_fn's last argument.
    target = jnp.asarray([3.0, -1.0])
    _, losses = fit(lambda p, key, data: jnp.sum((p - data) ** 2), jnp.zeros(2),
                    optax.sgd(0.2), jax.random.key(0), _quiet(30), data=target)
    assert losses[-1] < 1e-3 * losses[0]


def test_quadratic_without_batch_fn_converges_and_compiles_once():
    traces = []

    def loss(p, key):
        traces.append(None)  # runs only while tracing
        return jnp.sum((p - 3.0) ** 2)

    # NumPy float64 input: must still compile once (dtype canonicalised up front).
    state, losses = fit(loss, np.zeros(2), optax.sgd(0.1), jax.random.key(0), _quiet(40))
    np.testing.assert_allclose(state.params, [3.0, 3.0], atol=1e-3)
    assert losses[-1] < 1e-5 < losses[0]
    assert len(traces) == 1


def test_deterministic_under_fixed_key():
    run = lambda key: fit(
        _regression_loss, _params(), optax.adam(0.05), key, _quiet(10), batch_fn=_batch_fn
    )
    s1, l1 = run(jax.random.key(3))
    s2, l2 = run(jax.random.key(3))
    # A legacy uint32[2] key holds the same bits: the same run.
    s3, l3 = run(jax.random.PRNGKey(3))
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(l1, l3)
    _assert_states_equal(s1, s2)
    _assert_states_equal(s1, s3)
    _, l4 = run(jax.random.key(4))
    assert not np.array_equal(l1, l4)


def test_interrupted_run_resumes_exactly(tmp_path, caplog):
    k, total = 10, 20
    common = dict(batch_fn=_batch_fn)
    key = jax.random.key(7)
    full_state, full_losses = fit(
        _regression_loss, _params(), optax.adam(0.05), key, _quiet(total), **common
    )

    cfg = lambda steps: _quiet(steps, checkpoint_every=5, checkpoint_dir=tmp_path / "ckpt")
    s1, l1 = fit(_regression_loss, _params(), optax.adam(0.05), key, cfg(k), **common)
    assert int(s1.step) == k
    # The "interruption": a fresh call, fresh params and key, on the same directory.
    with caplog.at_level("INFO", logger="jaxsci"):
        s2, l2 = fit(_regression_loss, _params(), optax.adam(0.05), key, cfg(total), **common)
    assert f"resumed from step {k} of {total}" in caplog.text

    assert l1.shape == (k,) and l2.shape == (total - k,)
    np.testing.assert_array_equal(np.concatenate([l1, l2]), full_losses)
    _assert_states_equal(s2, full_state)
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["15", "20"]  # keep=2

    # Rerunning a finished run trains nothing and hands back the saved history.
    s3, l3 = fit(
        _regression_loss, _params(), optax.adam(0.05), key, cfg(total), full_history=True, **common
    )
    _assert_states_equal(s3, full_state)
    np.testing.assert_array_equal(l3, full_losses)


def test_equinox_module_with_aux_resumes(tmp_path, monkeypatch):
    # An MLP holds non-array leaves (its activation functions): they stay fixed.
    model = eqx.nn.MLP(1, 1, 4, 1, key=jax.random.key(1))
    x = jnp.linspace(-1.0, 1.0, 16)[:, None]
    y = 0.5 * x

    def loss(m, key):
        err = jax.vmap(m)(x) - y
        return jnp.mean(err**2), {"max_err": jnp.max(jnp.abs(err))}

    opt = optax.adam(0.02)
    key = jax.random.key(2)
    full, l_full, aux_full = fit(loss, model, opt, key, _quiet(30), has_aux=True)
    assert isinstance(full.params, eqx.nn.MLP)
    assert aux_full["max_err"].shape == (30,)
    assert l_full[-1] < 0.5 * l_full[0]

    # Relative checkpoint_dir: made absolute before orbax sees it.
    monkeypatch.chdir(tmp_path)
    cfg = lambda steps: _quiet(steps, checkpoint_every=4, checkpoint_dir="ck")
    _, l1, a1 = fit(loss, model, opt, key, cfg(12), has_aux=True)
    s2, l2, a2 = fit(loss, model, opt, key, cfg(30), has_aux=True)
    np.testing.assert_array_equal(np.concatenate([l1, l2]), l_full)
    np.testing.assert_array_equal(
        np.concatenate([a1["max_err"], a2["max_err"]]), aux_full["max_err"]
    )
    _assert_states_equal(s2, full)
    assert (tmp_path / "ck" / "30").is_dir()


def test_state_argument_continues_the_run():
    opt = optax.adam(0.05)
    key = jax.random.key(5)
    full, l_full = fit(_regression_loss, _params(), opt, key, _quiet(12), batch_fn=_batch_fn)
    s1, l1 = fit(_regression_loss, _params(), opt, key, _quiet(5), batch_fn=_batch_fn)
    s2, l2 = fit(_regression_loss, None, opt, key, _quiet(12), batch_fn=_batch_fn, state=s1)
    np.testing.assert_array_equal(np.concatenate([l1, l2]), l_full)
    _assert_states_equal(s2, full)


def test_progress_bar_can_be_silenced(capfd, tmp_path):
    loss = lambda p, key: jnp.sum(p**2)
    args = (loss, jnp.ones(2), optax.sgd(0.1), jax.random.key(0))
    fit(*args, TrainConfig(steps=3, progress=True, log_every=1))
    err = capfd.readouterr().err
    assert "3/3" in err and "loss=" in err

    fit(*args, TrainConfig(steps=3, progress=False, checkpoint_every=2, checkpoint_dir=tmp_path))
    out = capfd.readouterr()
    assert out.err == "" and out.out == ""


def test_nonfinite_loss_raises_and_is_not_checkpointed(tmp_path):
    # log(p) of a parameter driven below zero: NaN from step 2 on.
    loss = lambda p, key: jnp.sum(jnp.log(p))
    cfg = _quiet(6, checkpoint_every=1, checkpoint_dir=tmp_path, log_every=10)
    with pytest.raises(FloatingPointError, match="step 2"):
        fit(loss, jnp.asarray([1.5]), optax.sgd(1.0), jax.random.key(0), cfg)
    assert sorted(os.listdir(tmp_path)) == ["1", "2"]


def test_init_builds_step_zero_state():
    state = init({"w": jnp.ones(3), "n": jnp.arange(2)}, optax.adam(0.1), jax.random.key(0))
    assert int(state.step) == 0 and state.step.dtype == jnp.int32
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    # The integer leaf is not trained, so the optimizer holds no state for it.
    assert state.opt_state[0].mu["n"] is None


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: TrainConfig(steps=0), ValueError, "steps"),
        (lambda: TrainConfig(steps=2.5), TypeError, "steps"),
        (lambda: TrainConfig(steps=5, checkpoint_every=2), ValueError, "checkpoint_dir"),
        (
            lambda: TrainConfig(steps=5, checkpoint_every=-1, checkpoint_dir="x"),
            ValueError,
            "checkpoint_every",
        ),
        (lambda: TrainConfig(steps=5, log_every=0), ValueError, "log_every"),
    ],
)
def test_config_rejects_bad_values(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def _scalar_loss(p, key):
    return jnp.sum(p**2)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(key=0), TypeError, "key"),
        (dict(key=np.zeros(2, np.uint32)), TypeError, "key"),
        (dict(key=jax.random.split(jax.random.key(0), 2)), ValueError, "key"),
        (dict(params={"n": jnp.arange(3)}), TypeError, "params"),
        (dict(optimizer=0.1), TypeError, "optimizer"),
        (dict(config=dict(steps=3)), TypeError, "config"),
        (dict(loss_fn=lambda p, key: p), TypeError, "scalar"),
        (dict(loss_fn=lambda p, key: (jnp.sum(p), p)), TypeError, "has_aux"),
    ],
)
def test_fit_rejects_bad_input(kwargs, exc, match):
    args = dict(
        loss_fn=_scalar_loss,
        params=jnp.ones(2),
        optimizer=optax.sgd(0.1),
        key=jax.random.key(0),
        config=_quiet(2),
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fit(**args)


def test_mismatched_checkpoint_is_a_clear_error(tmp_path):
    cfg = lambda steps: _quiet(steps, checkpoint_every=1, checkpoint_dir=tmp_path)
    fit(_scalar_loss, jnp.ones(2), optax.sgd(0.1), jax.random.key(0), cfg(2))
    # Same structure, other shape.
    with pytest.raises(ValueError, match=r"checkpoint_dir.*saved as float32\[2\]"):
        fit(_scalar_loss, jnp.ones(3), optax.sgd(0.1), jax.random.key(0), cfg(4))
    # Other optimizer: a different number of state arrays.
    with pytest.raises(ValueError, match=r"checkpoint_dir.*arrays"):
        fit(_scalar_loss, jnp.ones(2), optax.adam(0.1), jax.random.key(0), cfg(4))


_DP_SCRIPT = """
import json
import jax, jax.numpy as jnp, optax
from jaxsci.core import TrainConfig, fit
X = jax.random.normal(jax.random.key(0), (64, 3))
y = X @ jnp.array([1.0, -2.0, 0.5]) + 0.1
def batch_fn(step, key):
    i = jax.random.choice(key, 64, (16,), replace=False)
    return X[i], y[i]
def loss(p, b, key):
    xb, yb = b
    return jnp.mean((xb @ p["w"] + p["b"] - yb) ** 2)
st, losses = fit(loss, {"w": jnp.zeros(3), "b": jnp.zeros(())}, optax.adam(0.05),
                 jax.random.key(1), TrainConfig(steps=30, progress=False), batch_fn=batch_fn)
print(json.dumps({"n": jax.device_count(), "losses": losses.tolist(),
                  "param_devices": len(st.params["w"].sharding.device_set)}))
"""


def _fit_on(n_devices):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n_devices}",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _DP_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_fit_data_parallel_on_4_devices_matches_1_device():
    one, four = _fit_on(1), _fit_on(4)
    assert one["n"] == 1 and four["n"] == 4
    assert four["param_devices"] == 4  # parameters replicated over the 4-device mesh
    np.testing.assert_allclose(four["losses"], one["losses"], rtol=1e-5, atol=1e-6)
