"""Property cases for lyapunov: simulation, certificate value, IBP/CROWN bounds, the sISS
condition (see ``tests/properties.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.common import bounds as bd
from jaxsci.dynamics import lyapunov as ly
from jaxsci.dynamics.lyapunov import certificates as ct

T = 6  # simulation steps


def _stack3(tree):
    """Three copies of every array leaf (floats scaled by 1, 0.9, 1.1; ints repeated):
    a batch of systems / certificates / programs with swept numbers."""
    def one(a):
        a = jnp.asarray(a)
        if jnp.issubdtype(a.dtype, jnp.inexact):
            return jnp.stack([a, a * 0.9, a * 1.1])
        return jnp.stack([a, a, a])

    return jax.tree_util.tree_map(one, tree)


def _floats(tree):
    """Float leaves as the default float dtype (float64 inside the gradient checks)."""
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, float) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact)
        else a, tree)


# --------------------------------------------------------------------------- simulate


def _simulate_args():
    s = ly.drone_formation(2, max_delay=1)
    rng = np.random.default_rng(0)
    return {
        "system": _floats(s),
        "x0": jnp.asarray(rng.uniform(-1, 1, (2, 2)), float),
        "w": jnp.asarray(0.1 * rng.uniform(-1, 1, (T, 2, 1)), float),
        "own_delay": jnp.asarray(rng.integers(0, 2, (T, 2)), jnp.int32),
        "link_delay": jnp.asarray(rng.integers(0, 2, (T, 2, 1)), jnp.int32),
    }


def _simulate(system, x0, w, own_delay, link_delay):
    return ly.simulate(system, x0, w, own_delay, link_delay)


SIMULATE = Case(
    "lyapunov.simulate", _simulate, _simulate_args,
    vmap=("x0", "w", "system"),
    batch={"system": _stack3},  # gains, couplings, state boxes swept together
    grad=("x0", "w", "system"),
    bad=(
        Bad({"x0": jnp.zeros((3, 2))}, ValueError, "x0 must have shape"),
        Bad({"own_delay": jnp.full((T, 2), 2, jnp.int32)}, ValueError,
            "own_delay must be <= max_delay"),
        Bad({"link_delay": jnp.full((T, 2, 1), -1, jnp.int32)}, Exception,
            "link_delay must be in 0..max_delay", jit=True),
    ),
    fd_rtol=1e-4,
)


def _random_delays(key, system):
    return ly.random_delays(key, T, system)


RANDOM_DELAYS = Case(
    "lyapunov.random_delays", _random_delays,
    lambda: {"key": jax.random.key(3), "system": ly.drone_formation(2, max_delay=2)},
    vmap=("key",), key="key",
    bad=(Bad({"key": np.uint32(3)}, TypeError, "key must be a jax.random key"),),
)


# --------------------------------------------------------------------------- V_i


def _value_args():
    s = ly.drone_formation(2)
    cert = ct.init_certificate(s, jax.random.key(0), hidden=4, n_out=2, net_scale=0.5)
    return {"cert": _floats(cert), "system": s, "i": 1,
            "x": jnp.asarray([0.3, -0.7], float)}


VALUE = Case(
    "lyapunov.value", lambda cert, system, i, x: ly.value(cert, system, i, x), _value_args,
    vmap=("x", "cert"), batch={"cert": _stack3},
    grad=("x", "cert"),  # the certificate value wrt its parameters
    bad=(Bad({"x": jnp.zeros(3)}, ValueError, "x must have shape"),
         Bad({"i": 2}, ValueError, "i must be <= 1")),
)


# --------------------------------------------------------------------------- bounds


def _program():
    rng = np.random.default_rng(1)
    # Two units, two kinds of relaxation (each kind compiles its own code: keep it small;
    # every relaxation is covered by tests/dynamics/test_lyapunov.py's bound tests).
    l1 = bd.Layer(jnp.asarray(rng.normal(size=(2, 3)), float),
                  jnp.asarray(rng.normal(size=2) * 0.3, float), (bd.TANH, bd.RELU))
    l2 = bd.Layer(jnp.asarray(rng.normal(size=(2, 2)), float), jnp.zeros(2, float),
                  (bd.IDENTITY, bd.IDENTITY))
    return bd.Program((l1, l2))


def _box_args():
    return {"program": _program(), "lower": jnp.asarray([-0.31, 0.12, -0.52], float),
            "upper": jnp.asarray([0.23, 0.41, -0.18], float)}


_BOX_BAD = (
    Bad({"lower": jnp.asarray([0.5, 0.12, -0.52])}, ValueError, "empty domain: lower > upper"),
    Bad({"lower": jnp.asarray([0.5, 0.12, -0.52])}, Exception, "empty domain: lower > upper",
        jit=True),
    Bad({"upper": jnp.zeros(2)}, ValueError, "upper must have shape"),
)


IBP = Case(
    "lyapunov.ibp", lambda program, lower, upper: bd.ibp(program, lower, upper), _box_args,
    vmap=("lower", "upper", "program"), batch={"program": _stack3},
    grad=("lower", "program"),
    bad=_BOX_BAD,
)


def _crown(program, lower, upper):
    lb = bd.crown(program, lower, upper, intermediate="crown")
    return lb.lower, lb.upper


CROWN = Case(
    "lyapunov.crown", _crown, _box_args,
    vmap=("lower", "program"), batch={"program": _stack3},
    grad=("program",),
    bad=_BOX_BAD[1:],
)


# --------------------------------------------------------------------------- sISS condition


def _condition_args():
    s = ly.linear_chain(2, a=0.5, q=0.2, s=0.1, max_delay=2)
    cert = ct.quadratic_certificate(s, np.ones((2, 1, 1)), np.full(2, 0.45),
                                    np.full((2, 1), 0.2), np.full(2, 0.1), lam_max=0.8)
    data = ct.local_data(cert, s, ct.default_reach(s))
    progs = ly.systems.local_programs(s)
    rng = np.random.default_rng(2)
    return {
        "system": s,
        "data_i": _floats(jax.tree_util.tree_map(lambda a: a[1], data)),
        "dyn_program": _floats(jax.tree_util.tree_map(lambda a: a[1], progs)),
        "u": jnp.asarray(rng.uniform(-0.8, 0.8, (3, ly.input_layout(s).size)), float),
        "eta": jnp.asarray(1e-3, float),
    }


def _condition(system, data_i, dyn_program, u, eta):
    return ct.condition_values(system, data_i, dyn_program, u, eta=eta, eta_reach=1e-4)


CONDITION = Case(
    "lyapunov.condition_values", _condition, _condition_args,
    vmap=("u", "eta", "data_i"), batch={"data_i": _stack3},
    grad=("u", "data_i"),
    bad=(Bad({"u": jnp.zeros((3, 5))}, ValueError, "u must have shape"),),
)


CASES = [SIMULATE, RANDOM_DELAYS, VALUE, IBP, CROWN, CONDITION]
