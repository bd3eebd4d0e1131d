"""Property cases for :mod:`jaxsci.agents.loam` (``tests/properties.py``).

The raw environments' ``step`` is differentiable in the action (below the force / torque
clip) and vmappable over actions and states; the racing rules are pure jnp functions of
the window of recent returns."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.agents import loam as L

_CP = L.CartPole()
_PD = L.Pendulum()


def _state(q):
    return L.EnvState(jnp.asarray(q, float), jnp.asarray(3, jnp.int32),
                      jnp.asarray([0.5, 40.0], float))


def _step_case(name, env, q, action):
    return Case(
        name, env.step,
        lambda: {"state": _state(q), "action": jnp.asarray([action], float),
                 "key": jax.random.key(0)},
        out=lambda r: (r[0].q, r[0].aux, r[1]), loss=lambda y: jnp.sum(y[0] ** 2) + y[2],
        vmap=("action", "state"),
        batch={"state": lambda s: jax.tree.map(lambda x: jnp.stack([x, x, x]), s)._replace(
            q=jnp.stack([s.q, 0.5 * s.q, -s.q]))},
        grad=("action",), key="key",
        bad=(Bad({"action": jnp.zeros(2)}, ValueError, "action must have shape"),
             Bad({"action": jnp.asarray([jnp.nan])}, Exception, "action must be finite",
                 jit=True)))


def _window():
    rng = np.random.default_rng(0)
    return {"window": jnp.asarray(rng.standard_normal((4, 5)) + np.arange(4)[:, None], float),
            "active": jnp.asarray([True, True, False, True])}


def _rule_case(name, rule):
    return Case(name, rule.survivors, _window, out=lambda k: k.astype(jnp.int32),
                vmap=("window",),
                batch={"window": lambda w: jnp.stack([w, w[::-1], 2.0 * w])},
                bad=(Bad({"window": jnp.zeros((3, 5))}, ValueError, "window must have shape"),))


CASES = [
    _step_case("loam.cartpole_step", _CP, [0.1, -0.2, 0.05, 0.3], 2.0),
    _step_case("loam.pendulum_step", _PD, [2.5, 1.0], 0.7),
    _rule_case("loam.ucb_survivors", L.UCBRace(c=1.0, window=5)),
    _rule_case("loam.halving_survivors", L.SuccessiveHalving(fraction=0.5, window=5)),
    _rule_case("loam.frace_survivors", L.FRace(alpha=0.1, window=5)),
    Case("loam.sample_raw", L.sample_raw,
         lambda: {"env": _CP, "key": jax.random.key(1), "n": 3, "steps": 4},
         out=lambda r: r["cart_position_cm"], key="key",
         bad=(Bad({"n": 0}, ValueError, "n must be >= 1"),
              Bad({"key": 3}, TypeError, "key must be a jax.random key"))),
]
