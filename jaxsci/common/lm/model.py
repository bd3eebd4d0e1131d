r"""A small decoder-only transformer in Flax NNX, with a KV cache and hidden-state access.

Architecture (the LLaMA/Qwen family at toy scale):

* token embedding ``E`` (``vocab x d``), tied to the output head: ``logits = RMSNorm(h) E^T``;
* ``n_layers`` pre-norm blocks ``h <- h + Attn(RMSNorm(h))``, ``h <- h + MLP(RMSNorm(h))``;
* causal multi-head attention with rotary positions (RoPE, Su et al. 2021): query and
  key pairs ``(x_{2i}, x_{2i+1})`` (half-split layout) are rotated by the angle
  ``p * base^{-2i / head_dim}`` at absolute position ``p``, so ``q_p . k_r`` depends on
  ``p - r`` only;
* SwiGLU MLP ``W_2 (silu(W_1 x) * W_3 x)`` (Shazeer 2020);
* RMSNorm ``x / sqrt(mean(x^2) + eps) * g`` (Zhang & Sennrich 2019).

**KV cache indexed by absolute position.** :class:`KVCache` holds every layer's keys
and values in a buffer of ``max_len`` slots, slot ``j`` for position ``j``. A call
with a cache writes its tokens' keys and values at their positions and lets the query
at position ``p`` see slots ``j <= p``. Nothing else is tracked: there is no length
field. Rolling back rejected tokens (speculative decoding) is therefore free: slots
beyond the last accepted position are never visible to a query until the next call
has overwritten them, because every call writes its own positions before attending.
Writes at positions ``>= max_len`` are dropped.

**Hidden states.** ``model(tokens, hidden_layers=(i, ...))`` also returns the residual
stream after block ``i`` (``0``: the embeddings, ``n_layers``: the last block,
before the final norm; the Hugging Face ``hidden_states[i]`` convention).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.tokenizer import VOCAB_SIZE
from jaxsci.core.validation import check_int, check_scalar

__all__ = [
    "TransformerConfig",
    "Transformer",
    "KVCache",
    "LMOutput",
    "MLP",
    "rope",
    "attention",
    "count_params",
    "write_at_positions",
]


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Shape of a :class:`Transformer`.

    Attributes:
      vocab_size: number of token ids (the byte tokenizer's 260 by default).
      d_model: width of the residual stream.
      n_layers: number of blocks.
      n_heads: attention heads (``d_model / n_heads`` must be even, for RoPE).
      d_ff: hidden width of the SwiGLU MLP.
      max_len: context length: positions ``0 .. max_len - 1``, and the KV cache's size.
      rope_base: RoPE's frequency base (10000, Su et al. 2021).
      norm_eps: RMSNorm epsilon.
    """

    vocab_size: int = VOCAB_SIZE
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 384
    max_len: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("rope_base", self.rope_base, gt=1.0)
        check_scalar("norm_eps", self.norm_eps, gt=0.0)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model}, "
                f"n_heads={self.n_heads}"
            )
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"head_dim = d_model / n_heads must be even for rotary positions, "
                f"got {self.d_model // self.n_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class KVCache(NamedTuple):
    """Keys and values of every layer, one slot per absolute position.

    Attributes:
      k: ``(n_layers, batch, max_len, n_heads, head_dim)``.
      v: same shape as ``k``.
    """

    k: Float[Array, "l b s h e"]
    v: Float[Array, "l b s h e"]

    @classmethod
    def zeros(cls, n_layers: int, batch: int, max_len: int, n_heads: int, head_dim: int,
              dtype=jnp.float32) -> KVCache:
        z = jnp.zeros((n_layers, batch, max_len, n_heads, head_dim), dtype)
        return cls(z, z)

    def write(self, k: Float[Array, "l b t h e"], v: Float[Array, "l b t h e"],
              positions: Int[Array, "b t"]) -> KVCache:
        """Every layer's ``k``, ``v`` written at ``positions`` (writes past the end dropped)."""
        def one(buf, new):
            return jax.vmap(write_at_positions, in_axes=(0, 0, None))(buf, new, positions)

        return KVCache(one(self.k, k), one(self.v, v))


class LMOutput(NamedTuple):
    """What a :class:`Transformer` call returns.

    Attributes:
      logits: ``(batch, t, vocab)`` next-token logits.
      hidden: the requested hidden states, a tuple of ``(batch, t, d_model)`` arrays in
        the order of ``hidden_layers`` (empty if none were requested).
      cache: the updated :class:`KVCache`, or ``None`` if the call had none.
    """

    logits: Float[Array, "b t v"]
    hidden: tuple[Float[Array, "b t d"], ...]
    cache: KVCache | None


def rope(x: Float[Array, "b t h e"], positions: Int[Array, "b t"], base: float
         ) -> Float[Array, "b t h e"]:
    """Rotate feature pairs ``(x_i, x_{i + e/2})`` by ``p * base^{-2i/e}`` (half-split RoPE)."""
    half = x.shape[-1] // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[..., None, None] * freq  # (b, t, 1, half)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


def attention(q: Float[Array, "b t h e"], k: Float[Array, "b s h e"],
              v: Float[Array, "b s h e"], mask: Array) -> Float[Array, "b t h e"]:
    """Scaled dot-product attention ``softmax(q k^T / sqrt(e)) v`` with a boolean ``mask``.

    ``mask`` broadcasts to ``(b, h, t, s)`` (True: attend). The softmax runs in at least
    float32 and otherwise in the inputs' precision (float64 stays float64, so gradients
    can be checked against finite differences); every query must see one key.
    """
    dtype = jnp.promote_types(q.dtype, jnp.float32)
    logits = jnp.einsum("bthe,bshe->bhts", q, k).astype(dtype) / math.sqrt(q.shape[-1])
    logits = jnp.where(mask, logits, jnp.finfo(dtype).min)
    w = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bhts,bshe->bthe", w, v)


def write_at_positions(buf: Float[Array, "b s h e"], new: Float[Array, "b t h e"],
                       positions: Int[Array, "b t"]) -> Float[Array, "b s h e"]:
    """A KV-cache write: row ``b``'s ``new[b, j]`` at slot ``positions[b, j]`` (slots past
    the buffer's length are dropped)."""
    rows = jnp.arange(buf.shape[0])[:, None]
    return buf.at[rows, positions].set(new.astype(buf.dtype), mode="drop")


class MLP(nnx.Module):
    """SwiGLU: ``W_2 (silu(W_1 x) * W_3 x)``."""

    def __init__(self, d_model: int, d_ff: int, *, rngs: nnx.Rngs):
        self.w1 = nnx.Linear(d_model, d_ff, use_bias=False, rngs=rngs)
        self.w3 = nnx.Linear(d_model, d_ff, use_bias=False, rngs=rngs)
        self.w2 = nnx.Linear(d_ff, d_model, use_bias=False, rngs=rngs)

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        return self.w2(nnx.silu(self.w1(x)) * self.w3(x))


class Attention(nnx.Module):
    """Causal multi-head self-attention with RoPE and an optional position-indexed cache."""

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        d, h, e = config.d_model, config.n_heads, config.head_dim
        self.n_heads, self.head_dim, self.rope_base = h, e, config.rope_base
        self.wq = nnx.Linear(d, h * e, use_bias=False, rngs=rngs)
        self.wk = nnx.Linear(d, h * e, use_bias=False, rngs=rngs)
        self.wv = nnx.Linear(d, h * e, use_bias=False, rngs=rngs)
        self.wo = nnx.Linear(h * e, d, use_bias=False, rngs=rngs)

    def __call__(
        self,
        x: Float[Array, "b t d"],
        positions: Int[Array, "b t"],
        cache: tuple[Float[Array, "b s h e"], Float[Array, "b s h e"]] | None,
    ) -> tuple[Float[Array, "b t d"], tuple | None]:
        b, t, _ = x.shape
        shape = (b, t, self.n_heads, self.head_dim)
        q = rope(self.wq(x).reshape(shape), positions, self.rope_base)
        k = rope(self.wk(x).reshape(shape), positions, self.rope_base)
        v = self.wv(x).reshape(shape)
        if cache is None:
            key_pos = positions
        else:
            k = write_at_positions(cache[0], k, positions)
            v = write_at_positions(cache[1], v, positions)
            cache = (k, v)
            key_pos = jnp.broadcast_to(jnp.arange(k.shape[1]), (b, k.shape[1]))
        mask = key_pos[:, None, None, :] <= positions[:, None, :, None]  # (b, 1, t, s)
        out = attention(q, k, v, mask)
        return self.wo(out.reshape(b, t, -1)), cache


class Block(nnx.Module):
    """Pre-norm transformer block.

    ``attention``: the attention module (default: this module's :class:`Attention`);
    :mod:`jaxsci.common.lm.llama` passes its grouped-query attention. ``config`` needs
    ``d_model``, ``d_ff`` and ``norm_eps``.
    """

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs,
                 attention: nnx.Module | None = None):
        d = config.d_model
        self.attn_norm = nnx.RMSNorm(d, epsilon=config.norm_eps, rngs=rngs)
        self.attn = Attention(config, rngs=rngs) if attention is None else attention
        self.mlp_norm = nnx.RMSNorm(d, epsilon=config.norm_eps, rngs=rngs)
        self.mlp = MLP(d, config.d_ff, rngs=rngs)

    def __call__(self, h, positions, cache):
        a, cache = self.attn(self.attn_norm(h), positions, cache)
        h = h + a
        return h + self.mlp(self.mlp_norm(h)), cache


class Transformer(nnx.Module):
    """Decoder-only language model (see the module docstring).

    Example::

        model = Transformer(TransformerConfig(), rngs=nnx.Rngs(0))
        out = model(tokens)                                   # out.logits: (b, t, vocab)
        out = model(tokens, hidden_layers=(1, 3))             # + out.hidden[0], out.hidden[1]
        cache = model.init_cache(batch)
        out = model(prompt, cache=cache)                      # prefill, positions 0..t-1
        out = model(next_tok, positions, cache=out.cache)     # one more step
    """

    def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = config
        # std d^{-1/2}: with the tied head and unit-RMS final features, initial logits
        # are O(1).
        init = nnx.initializers.normal(stddev=1.0 / math.sqrt(config.d_model))
        self.embed = nnx.Embed(config.vocab_size, config.d_model, embedding_init=init, rngs=rngs)
        self.blocks = nnx.List([Block(config, rngs=rngs) for _ in range(config.n_layers)])
        self.norm = nnx.RMSNorm(config.d_model, epsilon=config.norm_eps, rngs=rngs)

    def init_cache(self, batch: int, dtype=jnp.float32) -> KVCache:
        """An empty cache of ``max_len`` slots for ``batch`` sequences."""
        c = self.config
        return KVCache.zeros(c.n_layers, batch, c.max_len, c.n_heads, c.head_dim, dtype)

    def embed_tokens(self, tokens: Int[Array, "b t"]) -> Float[Array, "b t d"]:
        """The input embeddings (shared with the output head)."""
        # A plain gather (nnx.Embed would cast to its param dtype): float64 parameters
        # give float64 features.
        return jnp.take(self.embed.embedding[...], tokens, axis=0)

    def unembed(self, h: Float[Array, "... d"]) -> Float[Array, "... v"]:
        """Logits ``h E^T`` through the tied head (no final norm: apply it first if needed)."""
        return h @ self.embed.embedding[...].T

    def __call__(
        self,
        tokens: Int[Array, "b t"],
        positions: Int[Array, "b t"] | None = None,
        *,
        cache: KVCache | None = None,
        hidden_layers: Sequence[int] = (),
    ) -> LMOutput:
        """Logits for ``tokens`` (and the requested hidden states, and the updated cache).

        Args:
          tokens: ``(batch, t)`` token ids.
          positions: ``(batch, t)`` absolute positions; default ``0 .. t - 1``.
          cache: a :class:`KVCache` from :meth:`init_cache` or a previous call: the
            tokens' keys and values are written at their positions and every slot up to
            a query's position is attended. Without a cache attention is causal among
            ``tokens`` only.
          hidden_layers: indices in ``0 .. n_layers`` of the hidden states to return.
        """
        n = self.config.n_layers
        layers = tuple(hidden_layers)
        for i in layers:
            check_int("hidden_layers[i]", i, min=0, max=n)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        h = self.embed_tokens(tokens)
        states = [h]
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            h, layer_cache = block(h, positions, layer_cache)
            states.append(h)
            if cache is not None:
                ks.append(layer_cache[0])
                vs.append(layer_cache[1])
        logits = self.unembed(self.norm(h))
        new_cache = None if cache is None else KVCache(jnp.stack(ks), jnp.stack(vs))
        return LMOutput(logits, tuple(states[i] for i in layers), new_cache)


def count_params(module: nnx.Module) -> int:
    """Number of scalar parameters of an NNX module."""
    return int(sum(x.size for x in jax.tree_util.tree_leaves(nnx.state(module, nnx.Param))))
