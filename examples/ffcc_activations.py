"""Fast SiLU / GELU by float reinterpretation: lower, measure, tune, drop in.

Lowers the activations to the bit-trick primitives, prints their error on [-6, 6] with
the closed-form constants and after tuning them by gradient descent, and rewrites a
small function that calls ``jax.nn`` so that its exp/tanh/divisions use the tricks.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.numerics import ffcc

x = jnp.linspace(-6.0, 6.0, 4096)
for name in ("sigmoid", "silu", "gelu_tanh", "softplus"):
    expr = ffcc.ACTIVATIONS[name]
    print(f"{name}: {ffcc.show(ffcc.lower(expr), 4)}")
    ref = ffcc.reference(expr, x)
    tuned, losses = jax.jit(lambda x, e=expr: ffcc.tune(e, x, steps=300))(x)
    for tag, backend in (("closed-form", ffcc.FloatTrick.standard()), ("tuned", tuned)):
        err = np.asarray(ffcc.approximation(expr, backend)(x), np.float64) - ref
        print(f"   {tag:>11}: max |err| {np.abs(err).max():.2e}, MSE {np.mean(err**2):.2e}")

# The jaxpr-level rewrite: any function of jax.nn activations, unchanged.
w = jax.random.normal(jax.random.key(0), (64, 10)) / 8.0


def classifier(v):
    return jax.nn.softmax(jax.nn.silu(v @ w))


v = jax.random.normal(jax.random.key(1), (5, 64))
fast = jax.jit(ffcc.fast_transform(classifier))
print("max |p_fast - p_exact| =", float(jnp.max(jnp.abs(fast(v) - classifier(v)))))
