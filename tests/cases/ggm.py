"""Property cases for :mod:`jaxsci.stats.ggm` and :mod:`jaxsci.data.hubs` (see
``tests/properties.py``). Shapes and static settings match ``tests/stats/test_ggm.py``
(``K = 3``, ``p = 16``, ``r_max = 4``, one solver), so their compiled programs are shared.
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import hubs
from jaxsci.stats import ggm

P, R_MAX = 16, 4
SPEC = hubs.HubSpec(p=P, n_common=2, n_individual=1, p_common=0.9, p_individual=0.9,
                    p_background=0.05)
SOLVER = ggm.RiemannianSubgradient(step_size=0.5, decay=0.75, n_steps=300, n_starts=2)


def _samples():
    g = hubs.hub_precisions(jax.random.key(0), SPEC)
    return hubs.gaussian_samples(jax.random.key(1), g.theta, 3000)


def _cs():
    return jnp.asarray(ggm.correlation(_samples()), float)


def _correlation_kwargs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 4)) @ rng.normal(size=(4, 4))
    return {"x": jnp.asarray(x, float), "n": jnp.asarray(10)}


def _spec_batch():
    # Every float field a batch of 3 (the loop of the vmap check indexes every leaf).
    full = {f: jnp.full(3, getattr(SPEC, f), float) for f in
            ("p_individual", "p_background", "weight_low", "weight_high", "min_eig")}
    return hubs.HubSpec(p=P, n_common=2, n_individual=1,
                        p_common=jnp.asarray([0.9, 0.5, 0.2], float),
                        individual_strength=jnp.ones((3, 3), float), **full)


def _not_psd():
    return _cs().at[0].add(-2.0 * jnp.eye(P))


CASES = [
    Case("ggm.correlation", ggm.correlation, _correlation_kwargs,
         vmap=("x",), grad=("x",),
         bad=(Bad({"x": jnp.ones((12, 4))}, Exception, "no constant column", jit=True),
              Bad({"n": 1}, ValueError, "n must be >= 2"),
              Bad({"x": jnp.ones(5)}, ValueError, r"x must have shape \(\.\.\., n, p\)"))),
    Case("ggm.hub_auc", ggm.hub_auc,
         lambda: {"scores": jnp.asarray([0.9, 0.1, 0.5, 0.3], float),
                  "positive": jnp.asarray([True, False, True, False])},
         vmap=("scores",),
         bad=(Bad({"positive": jnp.zeros(4, bool)}, Exception, "at least one positive",
                  jit=True),
              Bad({"positive": jnp.zeros(3, bool)}, ValueError, "must broadcast"))),
    Case("ggm.ipc_hd", ggm.ipc_hd,
         lambda: {"c": _cs()[0], "r_max": R_MAX, "screen_keep": jnp.asarray(1.0)},
         out=lambda h: (h.scores, h.hubs, h.rank), vmap=("screen_keep",),
         batch={"screen_keep": lambda k: jnp.asarray([1.0, 0.8, 0.6])},
         bad=(Bad({"c": _not_psd()[0]}, ValueError, "c must be positive semidefinite"),
              Bad({"c": _not_psd()[0] + 0.0 * jnp.ones(())}, Exception,
                  "must be finite and positive semidefinite", jit=True),
              Bad({"screen_keep": jnp.asarray(0.0)}, Exception, "screen_keep must be in",
                  jit=True),
              Bad({"r_max": P}, ValueError, "r_max must be <= 15"))),
    Case("ggm.joint_minimax_eigenspace", ggm.joint_minimax_eigenspace,
         lambda: {"cs": _cs(), "rank": 3, "key": jax.random.key(2), "solver": SOLVER,
                  "warm_start": False},
         out=lambda e: (e.v, e.value), vmap=("key",), key="key", rtol=1e-4, atol=1e-5,
         bad=(Bad({"rank": P + 1}, ValueError, "rank must be <= 16"),
              Bad({"cs": _not_psd()}, ValueError, "cs must be positive semidefinite"))),
    Case("ggm.jic_hd", ggm.jic_hd,
         lambda: {"cs": _cs(), "key": jax.random.key(4), "r_max": R_MAX, "solver": SOLVER},
         # Scores, not the eigenspace: columns with weight 0 (>= r) are free, and rounding
         # differences between a batch and a loop move them.
         out=lambda h: (h.scores, h.rank), vmap=("key",), key="key",
         rtol=1e-4, atol=1e-5,
         bad=(Bad({"r_max": P}, ValueError, "r_max must be <= 15"),
              Bad({"rank": 7}, ValueError, "rank must be <= 4"))),
    Case("ggm.hub_precisions", hubs.hub_precisions,
         lambda: {"key": jax.random.key(0), "spec": SPEC},
         out=lambda g: (g.theta, g.common), key="key",
         vmap=("spec",),
         batch={"spec": lambda s: _spec_batch()},
         bad=(Bad({"spec": "balanced"}, TypeError, "spec must be a HubSpec"),)),
]
