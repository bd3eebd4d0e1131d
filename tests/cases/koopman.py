"""Property cases for koopman (MERLIN): encoder, decoder, backbone fit, memory rollout,
the model's forecast, and the wave generator of its data set.

Tiny shapes throughout: every check compiles its own program.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from properties import Bad, Case

from jaxsci.data import pde
from jaxsci.dynamics import koopman as kp

# Few ops: the eager halves of the checks dispatch op by op (each op compiles once).
_ENC = kp.EncoderConfig(n_tokens=2, token_dim=2, width=4, heads=1, n_self_layers=0,
                        n_cross_layers=1, n_freqs=1, rope=(1.0,))
_DEC = kp.DecoderConfig(hidden=4, n_layers=1, input_scale=4.0)
_MODEL = kp.MerlinConfig(n_cond=2, encoder=_ENC, decoder=_DEC)


def _points(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.uniform(size=(n, 2)))


def _encoder_kwargs():
    xy = _points()
    values = jnp.stack([jnp.sin(2 * np.pi * xy[:, 0]), jnp.cos(2 * np.pi * xy[:, 1])], -1)
    return {
        "encoder": kp.FunctionEncoder(2, 2, _ENC, key=jax.random.key(0)),
        "coords": xy,
        "values": values,
        "mask": jnp.asarray([True, True, False, True, True, True]),
    }


def _encode(encoder, coords, values, mask):
    return encoder(coords, values, mask)


def _decoder_kwargs():
    return {
        "decoder": kp.FunctionDecoder(2, 4, 1, _DEC, key=jax.random.key(1)),
        "z": jnp.asarray([0.3, -0.2, 0.5, 0.1]),
        "coords": _points(5, seed=1),
    }


def _decode(decoder, z, coords):
    return decoder(z, coords)


def _backbone_kwargs():
    rng = np.random.default_rng(2)
    z0 = jnp.asarray(rng.normal(size=(12, 3)))
    a = jnp.asarray([[0.9, -0.2, 0.0], [0.2, 0.9, 0.0], [0.0, 0.0, 0.5]])
    z1 = z0 @ a.T + 0.1 + 0.01 * jnp.asarray(rng.normal(size=(12, 3)))
    return {"z0": z0, "z1": z1, "ridge": jnp.asarray(1e-2)}


def _fit(z0, z1, ridge):
    bb = kp.fit_backbone(z0, z1, ridge)
    return bb.A, bb.b


def _rollout_kwargs():
    mem = kp.LeakyMemory(3, 4, hidden=4, depth=1, key=jax.random.key(3))
    # Zero-initialised output: give it weights, so the correction (and its gradient)
    # is not identically zero.
    last = mem.phi.layers[-1]
    w = 0.3 * jax.random.normal(jax.random.key(4), last.weight.shape)
    return {
        "memory": mem,
        "phi": eqx.tree_at(lambda p: p.layers[-1].weight, mem.phi, w),
        "raw_gamma": jnp.asarray([0.5, -0.3, 0.0, 1.0]),
        "centre": jnp.asarray([0.1, 0.0, -0.1]),
        "backbone": kp.KoopmanBackbone(jnp.asarray([[0.9, 0.1, 0.0], [-0.1, 0.9, 0.0],
                                                    [0.0, 0.0, 0.8]]),
                                       jnp.asarray([0.0, 0.1, 0.0])),
        "z0": jnp.asarray([0.5, -0.3, 0.2]),
    }


def _rollout(memory, phi, raw_gamma, centre, backbone, z0):
    # The trainable parameters (phi, gamma) and the standardisation centre as arguments:
    # the centre and scale are held fixed in training (gradients stopped, by design).
    memory = eqx.tree_at(lambda m: (m.phi, m.raw_gamma, m.centre), memory,
                         (phi, raw_gamma, centre))
    return kp.rollout(backbone, z0, 4, memory)


def _forecast_kwargs():
    xy = _points(6, seed=5)
    frames = jnp.stack([jnp.sin(2 * np.pi * xy[:, :1] + p) for p in (0.0, 0.2)])
    return {
        "model": kp.Merlin(2, 1, _MODEL, key=jax.random.key(6)),
        "backbone": kp.KoopmanBackbone(0.9 * jnp.eye(4), jnp.zeros(4)),
        "coords": xy,
        "frames": frames,  # [n_cond, n, 1]
    }


def _forecast(model, backbone, coords, frames):
    return kp.forecast(model, backbone, coords, frames, 3)


def _wave_kwargs():
    x = np.arange(8) / 8
    u0 = np.exp(-20 * ((x[:, None] - 0.5) ** 2 + (x[None, :] - 0.5) ** 2))
    return {"u0": jnp.asarray(u0), "c": jnp.asarray(0.3)}


def _wave(u0, c):
    return pde.wave_2d(u0, c=c, length=1.0, dt=0.5, n_steps=3)[0]


def _wave_dataset_kwargs():
    return {"key": jax.random.key(7)}


def _wave_dataset(key):
    return pde.wave_dataset(key, 2, 8, 2)


CASES = [
    Case(
        "koopman.encoder", _encode, _encoder_kwargs,
        vmap=("values",), grad=("values", "encoder"),
        bad=(
            Bad({"values": jnp.zeros((5, 2))}, ValueError, "values must have shape"),
            Bad({"mask": jnp.zeros(6, bool)}, Exception, "empty observation set", jit=True),
        ),
    ),
    Case(
        "koopman.decoder", _decode, _decoder_kwargs,
        vmap=("z",), grad=("z", "decoder"),
        bad=(Bad({"z": jnp.zeros(3)}, ValueError, r"z must have shape \(4\)"),),
    ),
    Case(
        "koopman.fit_backbone", _fit, _backbone_kwargs,
        vmap=("ridge", "z1"), grad=("z0", "z1", "ridge"),
        batch={"ridge": lambda r: jnp.stack([r, 2 * r, 0.5 * r])},
        bad=(
            Bad({"z1": jnp.zeros((12, 2))}, ValueError, "z0 and z1 must have the same shape"),
            Bad({"ridge": jnp.asarray(-1.0)}, Exception, "ridge must be >= 0", jit=True),
        ),
    ),
    Case(
        "koopman.rollout", _rollout, _rollout_kwargs,
        vmap=("z0", "raw_gamma"), grad=("z0", "phi", "raw_gamma"), zero_grad=("centre",),
        bad=(Bad({"z0": jnp.zeros(2)}, ValueError, r"z0 must have shape \(3\)"),),
    ),
    Case(
        "koopman.forecast", _forecast, _forecast_kwargs,
        vmap=("frames",), grad=("frames",),
        bad=(Bad({"frames": jnp.zeros((3, 6, 1))}, ValueError,
                 r"frames must have shape \(n_cond, n, c\)"),),
        fd_rtol=1e-3,
    ),
    Case(
        "koopman.wave_2d", _wave, _wave_kwargs,
        vmap=("c", "u0"), grad=("c", "u0"),
        bad=(Bad({"u0": jnp.zeros((8, 4))}, ValueError, "u0"),),
    ),
    Case(
        "koopman.wave_dataset", _wave_dataset, _wave_dataset_kwargs, key="key",
        bad=(Bad({"key": 3}, TypeError, "key"),),
    ),
]
