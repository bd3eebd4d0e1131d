"""Property cases for :mod:`jaxsci.stats.streaming_ate` (see ``tests/properties.py``)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.stats import streaming_ate as S

N = 24


def _stream():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((N, 2)), float)
    t = jnp.asarray(np.arange(N) % 3 == 0)
    y = jnp.asarray(rng.standard_normal(N), float)
    return x, t, y


def _run_kwargs():
    x, t, y = _stream()
    est = S.StreamingATE(S.Gaussian(1.0), S.RandomHalving(), m=4, levels=S.levels_for(N, 4),
                         max_steps=50)
    return {"est": est, "x": x, "treat": t, "y": y, "key": jax.random.key(0),
            "checkpoints": (12, N)}


def _offline_kwargs():
    x, t, y = _stream()
    return {"kernel": S.Gaussian(jnp.asarray(1.0, float)), "x": x, "treat": t, "y": y,
            "ridge": jnp.asarray(1e-2, float), "max_steps": 60}


def _balance_kwargs():
    x, _, _ = _stream()
    share = jnp.where(jnp.arange(N) < 8, 1.0 / 8, 0.0)
    return {"kernel": S.Gaussian(jnp.asarray(1.0, float)), "x": x[:12], "share": share[:12],
            "target": x, "target_share": jnp.full((N,), 1.0 / N), "ridge":
            jnp.asarray(1e-2, float), "max_steps": 60}


def _insert_kwargs():
    # 15 points in levels of 8: the 16th (the case's) halves level 0, then level 1.
    st = S.coreset_init(8, 3, 2)
    x, _, y = _stream()
    insert = eqx.filter_jit(S.coreset_insert)  # one compile for the 15 inserts
    for i in range(15):
        st = insert(st, x[i], y[i], S.Gaussian(1.0), S.KernelHalving(), jax.random.key(1))
    return {"state": st, "x": jnp.asarray([0.3, -0.2], float), "value": jnp.asarray(0.5, float),
            "kernel": S.Gaussian(1.0), "halving": S.KernelHalving(), "key": jax.random.key(1)}


CASES = [
    Case("streaming_ate.run", S.run, _run_kwargs,
         out=lambda r: (r.ate, r.stored, r.peak_stored), vmap=("key", "y"), key="key",
         bad=(Bad({"y": jnp.zeros(N - 1)}, ValueError, "y must have shape"),
              Bad({"y": jnp.full((N,), jnp.nan)}, ValueError, "y must be finite"),
              Bad({"y": jnp.full((N,), jnp.nan)}, Exception, "y \\(outcomes\\) must be finite",
                  jit=True),
              Bad({"checkpoints": (N + 1,)}, ValueError, "checkpoints must be <="))),
    Case("streaming_ate.offline_ate", S.offline_ate, _offline_kwargs,
         out=lambda e: (e.ate, e.treated.weights), vmap=("y", "ridge"), grad=("y", "ridge"),
         fd_rtol=1e-3,
         bad=(Bad({"treat": jnp.arange(N) % 3}, ValueError, "treat must be 0/1"),)),
    Case("streaming_ate.balance_weights", S.balance_weights, _balance_kwargs,
         out=lambda s: (s.weights, s.mmd2), loss=lambda o: o[1] + jnp.sum(o[0] ** 2),
         vmap=("ridge", "target"), grad=("x", "ridge"), fd_rtol=1e-3,
         bad=(Bad({"share": jnp.ones(5)}, ValueError, "share must have shape"),
              Bad({"ridge": -1.0}, ValueError, "ridge must be >= 0"))),
    Case("streaming_ate.coreset_insert", S.coreset_insert, _insert_kwargs,
         out=lambda s: (s.points, s.values, s.counts), vmap=("x", "value", "key"), key="key",
         bad=(Bad({"x": jnp.zeros(3)}, ValueError, "x must have shape \\(2,\\)"),)),
    Case("streaming_ate.make_shifting_stream", S.make_shifting_stream,
         lambda: {"key": jax.random.key(0), "n": 16, "strength": jnp.asarray(1.0, float)},
         out=lambda s: (s.x, s.y), vmap=("strength", "key"), grad=("strength",), key="key",
         bad=(Bad({"n": 1}, ValueError, "n must be >= 2"),)),
]
