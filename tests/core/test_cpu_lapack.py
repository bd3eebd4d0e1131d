"""The guard against jaxlib 0.10's batched-LAPACK deadlock (jaxsci/core/cpu_lapack.py)."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsci  # noqa: F401  (installs the guard)
from jaxsci.core import cpu_lapack

# Two independent batched eigh calls in one program: on a 2-thread pool, jaxlib 0.10.2
# without the guard hangs in this loop (seen here within the first few hundred calls).
_TWO_EIGH = textwrap.dedent("""
    import jaxsci, jax, jax.numpy as jnp
    from jaxsci.core import cpu_lapack
    assert "eigh" in cpu_lapack.installed(), cpu_lapack.installed()

    @jax.jit
    def f(a, b):
        wa, va = jnp.linalg.eigh(a)
        wb, vb = jnp.linalg.eigh(b)
        return wa.sum() + wb.sum() + va[..., 0].sum() + vb[..., 0].sum()

    x = jax.random.normal(jax.random.key(0), (64, 40, 40))
    a = x @ x.transpose(0, 2, 1)
    for i in range(300):
        f(a + i, a - i).block_until_ready()
    print("finished")
""")

needs_guard = pytest.mark.skipif(not cpu_lapack.affected(),
                                 reason="this jaxlib has no batched-LAPACK deadlock")


def test_affected_versions():
    assert cpu_lapack.affected((0, 10, 2))
    assert cpu_lapack.affected((0, 10, 0))
    assert not cpu_lapack.affected((0, 9, 2))
    assert not cpu_lapack.affected((0, 11, 2))


@needs_guard
def test_two_concurrent_batched_eigh_do_not_deadlock():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.pop("JAXSCI_CPU_LAPACK_GUARD", None)
    proc = subprocess.run([sys.executable, "-c", _TWO_EIGH], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "finished" in proc.stdout


@needs_guard
def test_guard_can_be_turned_off():
    env = dict(os.environ, JAXSCI_CPU_LAPACK_GUARD="0")
    code = "import jaxsci; from jaxsci.core import cpu_lapack; print(cpu_lapack.installed())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.strip() == "()"


@needs_guard
def test_serial_lowering_keeps_values_and_gradients():
    assert {"eigh", "lu", "cholesky", "triangular_solve", "svd", "geqrf"} <= set(
        cpu_lapack.installed())
    x = jax.random.normal(jax.random.key(1), (3, 2, 5, 5))
    a = x @ jnp.swapaxes(x, -1, -2) + 5.0 * jnp.eye(5)
    text = jax.jit(jnp.linalg.eigh).lower(a).as_text()
    assert "while" in text  # the batch is a loop of unbatched calls
    w, v = jax.jit(jnp.linalg.eigh)(a)
    ref = np.linalg.eigvalsh(np.asarray(a, np.float64))
    np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(a @ v), np.asarray(v * w[..., None, :]), atol=1e-3)
    s = jax.jit(jnp.linalg.solve)(a, x[..., :2])
    np.testing.assert_allclose(np.asarray(a @ s), np.asarray(x[..., :2]), atol=1e-4)
    c = jax.jit(jnp.linalg.cholesky)(a)
    np.testing.assert_allclose(np.asarray(c @ jnp.swapaxes(c, -1, -2)), np.asarray(a),
                               atol=1e-4)

    def f(a):
        return jnp.linalg.eigh(a)[0].sum() + jnp.linalg.slogdet(a)[1].sum()

    g = jax.jit(jax.grad(f))(a)
    # d/dA sum(eigvals) = I (symmetrised), d/dA logdet = A^{-T}
    expect = np.eye(5) + np.linalg.inv(np.asarray(a, np.float64)).swapaxes(-1, -2)
    np.testing.assert_allclose(np.asarray(g), expect, atol=1e-3)
    # vmap over a batched call: the batch grows, the lowering stays a loop
    wv = jax.jit(jax.vmap(jnp.linalg.eigvalsh))(a)
    np.testing.assert_allclose(np.asarray(wv), ref, rtol=1e-4, atol=1e-4)
