"""Property cases for :mod:`jaxsci.numerics.ffcc` (see ``tests/properties.py``).

The points sit away from the octave kinks of the bit tricks, where the straight-through
derivative is the exact derivative of the (piecewise-linear) approximation.
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.numerics import ffcc as F

XS = (-1.3, 0.4, 2.2)
POS = (0.7, 1.3, 3.1)


def _backends(b):
    return F.FloatTrick(jnp.stack([b.sigma_exp, b.sigma_exp * 0.9, b.sigma_exp * 1.1]),
                        jnp.stack([b.sigma_log] * 3),
                        jnp.stack([b.sigma_recip, b.sigma_recip * 0.9, b.sigma_recip * 1.1]),
                        b.newton)


CASES = [
    Case("ffcc.fast_exp", F.fast_exp,
         lambda: {"x": jnp.asarray(XS, float), "sigma": jnp.asarray(F.SIGMA_EXP, float),
                  "base": jnp.asarray(np.e, float)},
         vmap=("x", "sigma", "base"), grad=("x", "sigma", "base"),
         bad=(Bad({"x": np.asarray(XS, np.float16)}, TypeError, "x must be float32 or float64"),
              Bad({"x": ["a"]}, TypeError, "x must be a real float array"))),
    Case("ffcc.fast_log2", F.fast_log2,
         lambda: {"x": jnp.asarray(POS, float), "sigma": jnp.asarray(F.SIGMA_LOG, float)},
         vmap=("x", "sigma"), grad=("x", "sigma"),
         bad=(Bad({"x": np.asarray(POS, np.float16)}, TypeError, "x must be float32"),)),
    Case("ffcc.fast_reciprocal", F.fast_reciprocal,
         lambda: {"x": jnp.asarray((0.7, -1.3, 3.1), float),
                  "sigma": jnp.asarray(F.minimax_recip_sigma(1), float), "newton": 1},
         vmap=("x", "sigma"), grad=("x", "sigma"),
         bad=(Bad({"newton": -1}, ValueError, "newton must be >= 0"),)),
    Case("ffcc.approximation_call",
         lambda x, backend: F.approximation(F.SILU, backend)(x),
         lambda: {"x": jnp.asarray(XS, float), "backend": F.FloatTrick.standard(newton=1)},
         vmap=("x", "backend"), batch={"backend": _backends}, grad=("x", "backend"),
         bad=(Bad({"x": jnp.asarray([0.5, np.nan, 1.0])}, ValueError,
                  "x must be finite, got 1 NaN"),
              Bad({"x": jnp.asarray([0.5, np.inf, 1.0])}, Exception,
                  "x \\(the activation's input\\) must be finite", jit=True),
              Bad({"backend": "fast"}, TypeError, "backend must be an AbstractBackend"))),
    Case("ffcc.fast_transform",
         lambda x, backend: F.fast_transform(jax.nn.silu, backend)(x),
         lambda: {"x": jnp.asarray(XS, float), "backend": F.FloatTrick.standard(newton=1)},
         vmap=("x", "backend"), batch={"backend": _backends}, grad=("x", "backend"),
         bad=(Bad({"backend": jnp.exp}, TypeError, "backend must be an AbstractBackend"),)),
    Case("ffcc.tune",
         lambda x, learning_rate: F.tune(F.SIGMOID, x, F.FloatTrick.standard(), 8,
                                         learning_rate),
         lambda: {"x": jnp.linspace(-6.0, 6.0, 64), "learning_rate": jnp.asarray(2e-3)},
         out=lambda r: (r[0].sigma_exp, r[0].sigma_recip, r[1]),
         vmap=("learning_rate",),
         bad=(Bad({"x": jnp.ones((4, 4))}, ValueError, "x must have 1 dimensions"),
              Bad({"x": jnp.asarray([0.0, jnp.nan])}, Exception, "x must be finite",
                  jit=True))),
]
