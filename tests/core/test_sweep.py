import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.core import product_grid, sweep

# A small nonlinear scan: a damped oscillator per grid point (frequency, damping), so the
# sweep exercises vmap over lax.scan, not just elementwise math.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jaxsci.core import product_grid, sweep

    def simulate(p):
        def step(s, _):
            x, v = s
            a = -p["w"] ** 2 * x - p["c"] * v
            return (x + 0.01 * v, v + 0.01 * a), x
        _, xs = jax.lax.scan(step, (1.0, 0.0), None, length=200)
        return {"final": xs[-1], "energy": jnp.sum(xs ** 2)}

    grid = product_grid(w=np.linspace(0.5, 3.0, 7), c=np.array([0.0, 0.1, 0.5]))
    out = sweep(simulate, grid)
    chunked = sweep(simulate, grid, chunk_size=5)
    n_shards = len(out["final"].sharding.device_set)
    print(json.dumps({"devices": jax.device_count(), "shards": n_shards,
                      "final": np.asarray(out["final"]).tolist(),
                      "chunked": np.asarray(chunked["final"]).tolist(),
                      "energy": np.asarray(out["energy"]).tolist()}))
    """
)


def _run(n_devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n_devices}"
    env["JAX_PLATFORMS"] = "cpu"
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_sweep_same_result_on_1_and_4_devices():
    one, four = _run(1), _run(4)
    assert one["devices"] == 1 and four["devices"] == 4
    assert four["shards"] == 4  # the 21-point grid (padded to 24) really is split 4 ways
    np.testing.assert_allclose(one["final"], four["final"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(one["energy"], four["energy"], rtol=1e-6)
    # chunk_size: the same numbers as one call, and identical on 1 and 4 devices
    np.testing.assert_array_equal(one["chunked"], one["final"])
    np.testing.assert_array_equal(four["chunked"], four["final"])
    np.testing.assert_array_equal(one["chunked"], four["chunked"])


def test_second_sweep_of_the_same_fn_does_not_compile_again():
    traces = []

    def fn(p):
        traces.append(1)  # runs once per trace (compilation), not per evaluation
        return jnp.sin(p["x"]) * p["y"]

    grid = {"x": np.linspace(0, 1, 6), "y": np.arange(6.0)}
    first = sweep(fn, grid)
    assert len(traces) == 1
    for _ in range(3):
        again = sweep(fn, grid)
    assert len(traces) == 1
    np.testing.assert_array_equal(first, again)
    # chunks reuse one program for every chunk (here 3 chunks of 2 points)
    chunked = sweep(fn, grid, chunk_size=2)
    assert len(traces) == 2
    np.testing.assert_array_equal(chunked, first)


def test_sweep_chunk_size_is_checked():
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        sweep(lambda p: p["x"], {"x": np.arange(3.0)}, chunk_size=0)


def test_sweep_matches_python_loop_and_grid_order():
    grid = product_grid(a=[1.0, 2.0], b=[10.0, 20.0, 30.0])
    np.testing.assert_array_equal(grid["a"], [1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(grid["b"], [10, 20, 30, 10, 20, 30])

    def f(p):
        return jnp.sin(p["a"]) * p["b"] + jnp.arange(3.0) * p["a"]

    out = sweep(f, grid)
    assert out.shape == (6, 3)
    for i in range(6):
        np.testing.assert_allclose(np.asarray(out[i]),
                                   np.asarray(f({k: v[i] for k, v in grid.items()})), rtol=1e-6)


def test_sweep_bad_input():
    with pytest.raises(ValueError, match="share the grid axis"):
        sweep(lambda p: p["a"], {"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(ValueError, match="leading grid axis"):
        sweep(lambda p: p, {"a": 1.0})
    with pytest.raises(ValueError, match="axis 'a' must be a non-empty 1-D"):
        product_grid(a=[])


def test_sweep_is_differentiable():
    grid = {"w": jnp.linspace(0.1, 1.0, 4)}

    def total(scale):
        return jnp.sum(sweep(lambda p: jnp.sin(scale * p["w"]), grid))

    g = jax.grad(total)(1.3)
    want = jnp.sum(grid["w"] * jnp.cos(1.3 * grid["w"]))
    assert float(g) == pytest.approx(float(want), rel=1e-5)
