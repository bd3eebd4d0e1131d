"""Small equinox building blocks shared by paper modules.

:class:`PreNormBlock` is a pre-norm transformer block over one sequence ``(T, d)``:
``x + Attn(LN(x))`` then ``x + FF(LN(x))`` with a GELU feed-forward of width ``d_ff``,
and an optional key-padding mask (``(T,)`` bool: ``True`` for real tokens).
"""

from __future__ import annotations

import equinox as eqx
import jax

__all__ = ["PreNormBlock"]


class PreNormBlock(eqx.Module):
    """``PreNormBlock(key, d, heads, d_ff)``; call on ``x`` ``(T, d)`` (and ``mask``)."""

    attn: eqx.nn.MultiheadAttention
    norm1: eqx.nn.LayerNorm
    norm2: eqx.nn.LayerNorm
    ff1: eqx.nn.Linear
    ff2: eqx.nn.Linear

    def __init__(self, key, d: int, heads: int, d_ff: int):
        k1, k2, k3 = jax.random.split(key, 3)
        self.attn = eqx.nn.MultiheadAttention(heads, d, key=k1)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(d), eqx.nn.LayerNorm(d)
        self.ff1, self.ff2 = eqx.nn.Linear(d, d_ff, key=k2), eqx.nn.Linear(d_ff, d, key=k3)

    def __call__(self, x, mask=None):
        h = jax.vmap(self.norm1)(x)
        m = None if mask is None else mask[None, :] & mask[:, None]
        x = x + self.attn(h, h, h, mask=m)
        h = jax.vmap(self.norm2)(x)
        return x + jax.vmap(self.ff2)(jax.nn.gelu(jax.vmap(self.ff1)(h)))
