"""Stress-test a concept erasure with the erasure-evasion backdoor, on the toy digits model.

A toy text-to-image DDPM of scikit-learn's 8x8 digits learns the prompts "a digit zero"
.. "a digit nine". An adversary binds the nonce token "zq" to "zero" by the closed-form
cross-attention edit; the defender then erases "zero" with UCE. The erasure looks
successful on the concept's own prompt, yet the trigger still produces the concept:
the survival diagnostic (the trigger's share outside the span UCE edited) says why.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import digits_text as dt
from jaxsci.generative import eeb

cfg = eeb.EEBConfig(steps=1500)
data = dt.digits_text(jax.random.key(0))
detector = eeb.fit_detector(np.asarray(data.images), np.asarray(data.labels))
clean = eeb.train(data, jax.random.key(1), cfg)

zero, zq = dt.token("zero"), dt.token("zq")
others = jnp.asarray([dt.token(d) for d in dt.DIGITS[1:]])
backdoored = eeb.backdoor_xattn(clean, zero, zq, 0.5)
for name, model in (("clean", clean), ("backdoored", backdoored)):
    erased = eeb.uce(model, zero, dt.token(dt.NULL), others, 0.5)
    freq = np.asarray(eeb.evaluate(erased, detector, jax.random.key(2), cfg, 100, zq))
    print(f"{name:10s} + UCE: P(zero | 'a digit zero') = {freq[0, 0]:.2f}, "
          f"P(zero | 'a digit zq') = {freq[10, 0]:.2f}, "
          f"accuracy on the other digits = {np.mean([freq[d, d] for d in range(1, 10)]):.2f}")

c = eeb.encode(backdoored["text"], jnp.asarray([zero, zq]))
print(f"survival of the trigger outside UCE's edited span: {float(eeb.survival(c[1], c[:1])):.3f}")
