"""Property cases for hopfield: the sampler (metropolis, init, step), the energies and the
analytic phase boundaries (see ``tests/properties.py``)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.dynamics import hopfield as hf

N, M = 6, 5
CFG = hf.MetropolisConfig(n_equil=3, n_sample=3)


def _patterns():
    """Tiny patterns on the sphere of radius sqrt(N), in the default float dtype."""
    g = np.random.default_rng(0).standard_normal((M, N))
    return jnp.asarray(math.sqrt(N) * g / np.linalg.norm(g, axis=1, keepdims=True), float)


def _state():
    return jnp.asarray(_patterns()[1] * 0.98 + 0.2 * _patterns()[2], float)


def _on_sphere(x):
    return jnp.asarray(math.sqrt(N) * x / jnp.linalg.norm(x), float)


def _lse(beta=1.0):
    return hf.LSE(jnp.asarray(beta, float))


def _lsr(b=hf.B_DEFAULT):
    return hf.LSR(jnp.asarray(b, float))


def _kernels3(k):
    """A batch of three kernels of the same kind, parameter scaled by 1, 0.9, 1.1."""
    return jax.tree_util.tree_map(lambda a: jnp.stack([a, 0.9 * a, 1.1 * a]), k)


# --------------------------------------------------------------------------- sampler


def _metropolis(key, patterns, target, temperature, kernel):
    return hf.metropolis(key, patterns, target, temperature, kernel, CFG)


METROPOLIS = Case(
    "hopfield.metropolis", _metropolis,
    lambda: {"key": jax.random.key(0), "patterns": _patterns(), "target": jnp.asarray(2),
             "temperature": jnp.asarray(0.3), "kernel": _lse()},
    vmap=("key", "target", "temperature", "kernel"),
    batch={"kernel": _kernels3},
    # Metropolis accept steps are piecewise constant in T: the docstring says so.
    zero_grad=("temperature",),
    key="key",
    bad=(
        Bad({"target": jnp.asarray(M)}, Exception, "target must be in 0..4", jit=True),
        Bad({"temperature": jnp.asarray(-0.5)}, Exception, "temperature must be > 0", jit=True),
        Bad({"patterns": _patterns() / math.sqrt(N)}, ValueError,
            "patterns must lie on the sphere of radius sqrt"),
        Bad({"patterns": _patterns()[:0]}, ValueError, "patterns must hold at least one"),
        Bad({"kernel": "lse"}, TypeError, "kernel must be a hopfield kernel module"),
    ),
)


def _init_step(key, temperature, kernel):
    state = hf.init(key, _patterns(), 1, kernel, CFG)
    return hf.step(jax.random.fold_in(key, 1), state, _patterns(), temperature, kernel)


STEP = Case(
    "hopfield.step", _init_step,
    lambda: {"key": jax.random.key(3), "temperature": jnp.asarray(0.5), "kernel": _lsr()},
    out=lambda y: y[0],  # the new state (info.acceptance_probability is smooth in T)
    vmap=("key", "temperature", "kernel"),
    batch={"kernel": _kernels3},
    zero_grad=("temperature",),
    key="key",
    bad=(Bad({"temperature": jnp.asarray(0.0)}, Exception, "temperature must be > 0",
             jit=True),),
)


def _init(key, patterns, target):
    return hf.init(key, patterns, target, hf.LSE(), CFG)


INIT = Case(
    "hopfield.init", _init,
    lambda: {"key": jax.random.key(4), "patterns": _patterns(), "target": jnp.asarray(3)},
    vmap=("key", "target"),
    key="key",
    bad=(Bad({"target": jnp.asarray(-1)}, Exception, "target must be in 0..4", jit=True),
         Bad({"patterns": 2.0 * _patterns()}, Exception, "patterns must lie on the sphere",
             jit=True)),
)


# --------------------------------------------------------------------------- energies


ENERGY = Case(
    "hopfield.energy", hf.energy,
    lambda: {"x": _on_sphere(_state()), "patterns": _patterns(), "kernel": _lse(2.0)},
    vmap=("x", "kernel"),
    batch={"kernel": _kernels3},
    grad=("x", "patterns", "kernel"),
    bad=(Bad({"x": jnp.zeros(N + 1)}, ValueError, r"patterns must have shape \(\*, 7\)"),),
)

ENERGY_LSR = Case(
    "hopfield.energy_lsr", hf.energy,
    lambda: {"x": _on_sphere(_state()), "patterns": _patterns(), "kernel": _lsr()},
    vmap=("x", "kernel"),
    batch={"kernel": _kernels3},
    grad=("x", "kernel"),
    bad=(Bad({"kernel": hf.LSR}, TypeError, "kernel must be a hopfield kernel module"),),
)


# --------------------------------------------------------------------------- theory


BOUNDARY = Case(
    "hopfield.retrieval_boundary",
    lambda temperature, kernel: hf.retrieval_boundary(temperature, kernel, "exact"),
    lambda: {"temperature": jnp.asarray([0.1, 0.4, 1.0], float), "kernel": _lsr()},
    vmap=("temperature", "kernel"),
    batch={"kernel": _kernels3},
    grad=("temperature", "kernel"),
    bad=(Bad({"temperature": jnp.asarray([-1.0])}, ValueError, "temperature must be >= 0"),),
)

ALPHA_C = Case(
    "hopfield.alpha_c",
    lambda temperature, kernel: hf.alpha_c(temperature, kernel, "gaussian"),
    lambda: {"temperature": jnp.asarray(0.3, float), "kernel": _lse()},
    vmap=("temperature",),
    grad=("temperature",),
    bad=(Bad({"kernel": "lse"}, TypeError, "kernel must be a hopfield kernel module"),),
)

ALPHA_TH = Case(
    "hopfield.alpha_th",
    lambda b: hf.alpha_th(b, "exact"),
    lambda: {"b": jnp.asarray(hf.B_DEFAULT, float)},
    vmap=("b",),
    grad=("b",),
    bad=(Bad({"b": jnp.asarray(1.0)}, ValueError, "b must be > 1"),),
)

SPIN_GLASS = Case(
    "hopfield.spin_glass_free_energy",
    lambda alpha, kernel: hf.spin_glass_free_energy(alpha, kernel, "exact", "sum"),
    # loads on the interior (summed) branch of LSE(1): alpha > 0.2406
    lambda: {"alpha": jnp.asarray([0.5, 0.7, 0.9], float), "kernel": _lse()},
    vmap=("alpha", "kernel"),
    batch={"kernel": _kernels3},
    grad=("alpha", "kernel"),
    bad=(Bad({"alpha": jnp.asarray([-0.1])}, ValueError, "alpha must be >= 0"),),
)

ALPHA_C_SUM = Case(
    "hopfield.alpha_c[sum]",
    lambda temperature, kernel: hf.alpha_c(temperature, kernel, "exact", "sum"),
    lambda: {"temperature": jnp.asarray([0.05, 0.2], float), "kernel": _lse()},
    vmap=("temperature", "kernel"),
    batch={"kernel": _kernels3},
    grad=("temperature", "kernel"),
    bad=(Bad({"temperature": jnp.asarray([-1.0])}, ValueError, "temperature must be >= 0"),),
)

CASES = [METROPOLIS, STEP, INIT, ENERGY, ENERGY_LSR, BOUNDARY, ALPHA_C, ALPHA_TH, SPIN_GLASS,
         ALPHA_C_SUM]
