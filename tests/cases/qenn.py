"""Property cases for :mod:`jaxsci.generative.qenn` (see ``tests/properties.py``).

``quantum_masses`` vmaps over the states and the number of copies and differentiates in
``copies``; ``gqecr`` vmaps over either mass vector and differentiates in both;
``scvcl_loss`` vmaps and differentiates in its traced weights; ``dirichlet_loss`` in the
logits and the KL weight; ``sar_like`` vmaps over its key and phase noise.
"""

import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import vision
from jaxsci.generative import qenn as Q


def _psi(n=None, d=6, seed=0):
    rng = np.random.default_rng(seed)
    shape = (d,) if n is None else (n, d)
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return jnp.asarray(z / np.linalg.norm(z, axis=-1, keepdims=True), complex)


def _masses_kwargs():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((6, 3)) + 1j * rng.standard_normal((6, 3))
    states = jnp.asarray(np.linalg.qr(v)[0], complex)
    return {"psi": _psi(), "states": states, "copies": jnp.asarray(2.0, float)}


def _gqecr_kwargs():
    return {"m1": jnp.asarray([0.5, 0.2, 0.1, 0.2], float),
            "m2": jnp.asarray([0.3, 0.4, 0.2, 0.1], float)}


def _scvcl_kwargs():
    return {"psi": _psi(8), "labels": jnp.asarray([0, 0, 1, 1, 2, 2, 0, 1]),
            "temperature": jnp.asarray(0.2, float), "amp_weight": jnp.asarray(0.5, float)}


def _dirichlet_kwargs():
    rng = np.random.default_rng(2)
    return {"logits": jnp.asarray(rng.standard_normal((5, 3)), float),
            "labels": jnp.asarray([0, 1, 2, 1, 0]), "kl_weight": jnp.asarray(0.5, float)}


def _roll_masses(m):
    # Other valid mass vectors (the singletons permuted, the empty mass kept).
    return jnp.stack([m, jnp.concatenate([jnp.roll(m[:-1], 1), m[-1:]]),
                      jnp.concatenate([m[:-1][::-1], m[-1:]])])


CASES = [
    Case("qenn.quantum_masses", Q.quantum_masses, _masses_kwargs,
         vmap=("psi", "copies"), grad=("copies",),
         batch={"psi": lambda p: jnp.stack([p, p * jnp.exp(0.3j), jnp.roll(p, 1)])},
         bad=(Bad({"psi": 2 * _psi()}, ValueError, "psi must be normalised"),
              Bad({"psi": 2 * _psi()}, Exception, "psi must be normalised", jit=True),
              Bad({"psi": _psi(d=5)}, ValueError, "states must have shape \\(D, K\\)"))),
    Case("qenn.gqecr", Q.gqecr, _gqecr_kwargs, vmap=("m1", "m2"), grad=("m1", "m2"),
         batch={"m1": _roll_masses, "m2": _roll_masses},
         bad=(Bad({"m1": jnp.asarray([0.5, 0.5, 0.5, 0.5])}, ValueError,
                  "m1 must be mass vectors"),
              Bad({"m2": jnp.asarray([0.5, 0.5, 0.5, 0.5])}, Exception,
                  "m2 must be mass vectors", jit=True),
              Bad({"m2": jnp.asarray([0.5, 0.5])}, ValueError,
                  "m1 and m2 must have the same number of masses"))),
    Case("qenn.scvcl_loss", Q.scvcl_loss, _scvcl_kwargs, vmap=("temperature", "amp_weight"),
         grad=("temperature", "amp_weight"),
         bad=(Bad({"labels": jnp.zeros(3, int)}, ValueError, "labels \\(B,\\)"),)),
    Case("qenn.dirichlet_loss", Q.dirichlet_loss, _dirichlet_kwargs,
         vmap=("logits", "kl_weight"), grad=("logits", "kl_weight")),
    Case("qenn.sar_like", vision.sar_like,
         lambda: {"key": jax.random.key(0), "n_classes": 3, "n_per_class": 2, "size": 5,
                  "phase_noise": jnp.asarray(0.4, float)},
         out=lambda r: (jnp.abs(r[0]), r[1]), vmap=("key", "phase_noise"), key="key",
         bad=(Bad({"speckle": -1.0}, ValueError, "speckle must be >= 0"),)),
]
