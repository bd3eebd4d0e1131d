r"""The LLaMA architecture in Flax NNX, sized for SmolLM2-135M-Instruct (loaded from GGUF).

This implements the decoder of LLaMA (Touvron et al. 2023) as SmolLM2 (Allal et al.
2025) uses it, and runs the real pretrained weights (:meth:`Llama.from_gguf`, read by
:mod:`jaxsci.common.lm.gguf`):

* token embedding ``E`` (``vocab x d``), tied to the output head by default
  (``logits = RMSNorm(h) E^T``; an untied ``head`` when the file has ``output.weight``);
* ``n_layers`` pre-norm blocks ``h <- h + Attn(RMSNorm(h))``, ``h <- h + MLP(RMSNorm(h))``
  with RMSNorm ``x / sqrt(mean(x^2) + eps) * g``;
* grouped-query attention (GQA, Ainslie et al. 2023): ``n_heads`` query heads share
  ``n_kv_heads`` key/value heads, query head ``j`` reading key/value head
  ``j // (n_heads / n_kv_heads)``; scores ``q k^T / sqrt(head_dim)``, causal by position;
* rotary positions in the **half-split** layout (features ``i`` and ``i + head_dim/2``
  rotated together by ``p * base^{-2i/head_dim}``, :func:`jaxsci.common.lm.model.rope`,
  the Hugging Face convention). GGUF files store the query/key rows permuted for
  llama.cpp's interleaved layout; the loader undoes that permutation
  (:func:`jaxsci.common.lm.gguf.unpermute_qk`), so this module sees Hugging Face rows;
* SwiGLU MLP ``W_down (silu(W_gate x) * W_up x)`` (:class:`jaxsci.common.lm.model.MLP`:
  ``w1`` gate, ``w3`` up, ``w2`` down).

**KV cache indexed by absolute position**, as in :mod:`jaxsci.common.lm.model`: slot
``j`` of :class:`LlamaCache` holds position ``j`` and a query at position ``p`` sees the
slots ``j <= p``. Every call writes its own tokens' slots before attending, so prompts
right-padded to a bucket decode exactly as unpadded ones (the padding's slots are
overwritten before any query can see them) and rows of a batch may sit at different
positions. The cache is a tuple of per-layer buffers (not one stacked array): inside a
decoding ``while_loop`` each layer's buffer is updated in place, where restacking the
layers would copy the whole cache every token. Its length is chosen per call
(:meth:`Llama.init_cache`), so short generations do not attend over 8192 empty slots.

**Per-layer weights, a Python loop over the blocks (unrolled in the compiled program),
not a ``lax.scan`` over stacked weights.** With SmolLM2-135M on this project's 2-core
machine, a prototype forward decoded about 20% faster per token at batch 1 unrolled than
scanned (no per-iteration slicing of stacked weights, and XLA schedules across layers);
the price is a longer compile (30 copies of the block body: ~25 s for a generation
program on one busy core), paid once per shape bucket since
:class:`jaxsci.common.lm.engine.Engine` pads prompts, batches and generation lengths to
power-of-two buckets. It also keeps the structure of :mod:`~jaxsci.common.lm.model` and
makes hidden states of any layer a plain list element.

**A scanned twin for whole-prompt programs.** :meth:`Llama.scan_features` runs the same
blocks as a ``lax.scan`` over a stacked copy of their weights (:meth:`Llama.stacked_blocks`):
one compiled copy of the block body. The engine's programs that run whole prompts once
(the prefill of a generation, option scoring, hidden states) use it, since there compile
time, not per-token speed, dominates; the decoding loop stays unrolled. The operations
per block are the same, so the numbers agree to float32 rounding (a test pins features,
hidden states and cache on a small model); XLA may still fuse differently across layers:
SmolLM2's summed log-probabilities of 7 continuations after a 400-token prompt moved by
at most 1.5e-5 on the full-pass path and not at all on the cached one, and the quick runs
of the experiments on SmolLM2 kept their documented numbers (docs/llm.md, 2026-12-06).

**Hidden states.** ``model(tokens, hidden_layers=(i, ...)).hidden`` are the residual
stream after block ``i`` (``0``: the embeddings, ``n_layers``: the last block before the
final norm; the Hugging Face ``hidden_states[i]`` convention).

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> cfg = LlamaConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
...                   head_dim=8, d_ff=48, max_len=32)
>>> model = Llama(cfg, rngs=nnx.Rngs(0))
>>> out = model(jnp.zeros((1, 5), jnp.int32), hidden_layers=(0, 2))
>>> out.logits.shape, out.hidden[1].shape
((1, 5, 64), (1, 5, 32))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.model import Block, LMOutput, rope, write_at_positions
from jaxsci.core.validation import check_int, check_scalar

__all__ = [
    "LlamaConfig",
    "Llama",
    "LlamaCache",
    "LMOutput",
    "grouped_attention",
]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape of a :class:`Llama`. The defaults are SmolLM2-135M-Instruct's (its GGUF metadata).

    Attributes:
      vocab_size: number of token ids (49152).
      d_model: width of the residual stream (576).
      n_layers: number of blocks (30).
      n_heads: query heads (9).
      n_kv_heads: key/value heads (3); must divide ``n_heads``.
      head_dim: width of one head (64); must be even (RoPE rotates pairs).
      d_ff: hidden width of the SwiGLU MLP (1536).
      max_len: context length: positions ``0 .. max_len - 1`` (8192).
      rope_base: RoPE's frequency base (100000).
      norm_eps: RMSNorm epsilon (1e-5).
      tie_embeddings: the output head is the embedding matrix (True for SmolLM2).
    """

    vocab_size: int = 49152
    d_model: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    head_dim: int = 64
    d_ff: int = 1536
    max_len: int = 8192
    rope_base: float = 100000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads",
                     "head_dim", "d_ff", "max_len"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("rope_base", self.rope_base, gt=1.0)
        check_scalar("norm_eps", self.norm_eps, gt=0.0)
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError(
                f"tie_embeddings must be a bool, got {type(self.tie_embeddings).__name__}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads must divide n_heads, got n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary positions, got {self.head_dim}")


class LlamaCache(NamedTuple):
    """Keys and values of every layer, one slot per absolute position.

    Attributes:
      k: one ``(batch, length, n_kv_heads, head_dim)`` buffer per layer.
      v: same shapes as ``k``.
    """

    k: tuple[Float[Array, "b s h e"], ...]
    v: tuple[Float[Array, "b s h e"], ...]

    @property
    def length(self) -> int:
        """Number of slots (positions ``0 .. length - 1``)."""
        return self.k[0].shape[1]


def grouped_attention(q: Float[Array, "b t h e"], k: Float[Array, "b s g e"],
                      v: Float[Array, "b s g e"], mask: Array) -> Float[Array, "b t h e"]:
    """Grouped-query attention: query head ``j`` attends with key/value head ``j // r``.

    Args:
      q: ``(b, t, h, e)`` queries.
      k: ``(b, s, g, e)`` keys, ``g`` dividing ``h`` (``r = h / g`` queries per kv head).
      v: same shape as ``k``.
      mask: boolean, broadcasting to ``(b, 1, 1, t, s)`` (True: attend); every query must
        see at least one key.

    Returns:
      ``softmax(q k^T / sqrt(e)) v``, ``(b, t, h, e)``; the softmax runs in at least
      float32.
    """
    b, t, h, e = q.shape
    g = k.shape[2]
    dtype = jnp.promote_types(q.dtype, jnp.float32)
    qg = q.reshape(b, t, g, h // g, e)
    logits = jnp.einsum("btgre,bsge->bgrts", qg, k).astype(dtype) / math.sqrt(e)
    logits = jnp.where(mask, logits, jnp.finfo(dtype).min)
    w = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bgrts,bsge->btgre", w, v).reshape(b, t, h, e)


class Attention(nnx.Module):
    """Causal grouped-query self-attention with half-split RoPE and an optional cache."""

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        d, h, g, e = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = h, g, e
        self.rope_base = config.rope_base
        self.wq = nnx.Linear(d, h * e, use_bias=False, rngs=rngs)
        self.wk = nnx.Linear(d, g * e, use_bias=False, rngs=rngs)
        self.wv = nnx.Linear(d, g * e, use_bias=False, rngs=rngs)
        self.wo = nnx.Linear(h * e, d, use_bias=False, rngs=rngs)

    def __call__(self, x, positions, cache):
        b, t, _ = x.shape
        e = self.head_dim
        q = rope(self.wq(x).reshape(b, t, self.n_heads, e), positions, self.rope_base)
        k = rope(self.wk(x).reshape(b, t, self.n_kv_heads, e), positions, self.rope_base)
        v = self.wv(x).reshape(b, t, self.n_kv_heads, e)
        if cache is None:
            key_pos = positions
        else:
            k = write_at_positions(cache[0], k, positions)
            v = write_at_positions(cache[1], v, positions)
            cache = (k, v)
            key_pos = jnp.broadcast_to(jnp.arange(k.shape[1]), (b, k.shape[1]))
        mask = key_pos[:, None, None, None, :] <= positions[:, None, None, :, None]
        out = grouped_attention(q, k, v, mask)
        return self.wo(out.reshape(b, t, -1)), cache


def _block(config: LlamaConfig, rngs: nnx.Rngs) -> Block:
    """Pre-norm LLaMA block: the byte-level model's block with grouped-query attention."""
    return Block(config, rngs=rngs, attention=Attention(config, rngs=rngs))


def _positions(tokens, positions):
    """``positions`` (default ``0 .. t - 1`` per row), checked against ``tokens``."""
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (batch, t), got {tokens.shape}")
    if positions is None:
        return jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    if positions.shape != tokens.shape:
        raise ValueError(f"positions must have the shape of tokens {tokens.shape}, "
                         f"got {positions.shape}")
    return positions


_ABSTRACT: dict = {}  # (class, config) -> (graphdef, abstract state), for from_params


class Llama(nnx.Module):
    """LLaMA decoder (see the module docstring).

    Example::

        model = Llama.from_gguf(jaxsci.common.lm.gguf.find_smollm2())
        out = model(tokens)                                  # out.logits: (b, t, vocab)
        cache = model.init_cache(batch, 64)                  # 64 slots
        out = model(prompt, cache=cache)                     # prefill, positions 0..t-1
        out = model(next_tok, positions, cache=out.cache)    # one more step
    """

    def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = config
        init = nnx.initializers.normal(stddev=1.0 / math.sqrt(config.d_model))
        self.embed = nnx.Embed(config.vocab_size, config.d_model, embedding_init=init,
                               rngs=rngs)
        self.blocks = nnx.List([_block(config, rngs) for _ in range(config.n_layers)])
        self.norm = nnx.RMSNorm(config.d_model, epsilon=config.norm_eps, rngs=rngs)
        self.head = (None if config.tie_embeddings else
                     nnx.Linear(config.d_model, config.vocab_size, use_bias=False, rngs=rngs))

    # ------------------------------------------------------------- construction

    @classmethod
    def from_params(cls, config: LlamaConfig, params: Mapping[str, np.ndarray],
                    dtype=jnp.float32) -> Llama:
        """A model with the weights ``params`` (GGUF tensor names, ``(out, in)`` layout).

        Args:
          config: the model's shape.
          params: what :func:`jaxsci.common.lm.gguf.load_gguf` returns: ``token_embd.weight``,
            ``output_norm.weight``, ``output.weight`` (untied only) and per block ``i``
            ``blk.i.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,
            ffn_down}.weight``, with the query/key rows in the half-split (Hugging Face)
            order.
          dtype: the parameters' dtype (float32: bfloat16 was 4-7x slower on CPU).

        Returns:
          the :class:`Llama`; no random initialisation happens.

        Raises:
          KeyError: a tensor is missing. ValueError: a tensor has the wrong shape.
        """
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        # The module tree without values, traced once per (class, config): the copy made
        # by tree.map gives this model Variables of its own.
        if (cls, config) not in _ABSTRACT:
            _ABSTRACT[cls, config] = nnx.split(nnx.eval_shape(lambda: cls(config,
                                                                          rngs=nnx.Rngs(0))))
        graphdef, abstract = _ABSTRACT[cls, config]
        model = nnx.merge(graphdef, jax.tree.map(lambda x: x, abstract))

        def put(var, name, transpose):
            if name not in params:
                raise KeyError(f"params is missing the tensor {name!r}")
            w = np.asarray(params[name])
            w = w.T if transpose else w
            want = tuple(var.get_value().shape)
            if w.shape != want:
                raise ValueError(
                    f"params[{name!r}] must have shape {want[::-1] if transpose else want} "
                    f"(out, in), got {w.shape[::-1] if transpose else w.shape}")
            var.set_value(jnp.asarray(w, dtype))

        put(model.embed.embedding, "token_embd.weight", False)
        put(model.norm.scale, "output_norm.weight", False)
        if model.head is not None:
            put(model.head.kernel, "output.weight", True)
        names = {"attn.wq": "attn_q", "attn.wk": "attn_k", "attn.wv": "attn_v",
                 "attn.wo": "attn_output", "mlp.w1": "ffn_gate", "mlp.w3": "ffn_up",
                 "mlp.w2": "ffn_down"}
        for i, block in enumerate(model.blocks):
            put(block.attn_norm.scale, f"blk.{i}.attn_norm.weight", False)
            put(block.mlp_norm.scale, f"blk.{i}.ffn_norm.weight", False)
            for attr, gguf_name in names.items():
                sub, lin = attr.split(".")
                put(getattr(getattr(block, sub), lin).kernel, f"blk.{i}.{gguf_name}.weight",
                    True)
        return model

    @classmethod
    def from_gguf(cls, path, *, dtype=jnp.float32, cache: bool = True) -> Llama:
        """Load a LLaMA-architecture GGUF file (see :func:`jaxsci.common.lm.gguf.load_gguf`).

        Args:
          path: the ``.gguf`` file.
          dtype: parameter dtype (float32 default).
          cache: keep / reuse the dequantised weights on disk (fast second load).

        Returns:
          the :class:`Llama`, its ``config`` read from the file's metadata.
        """
        from jaxsci.common.lm.gguf import load_gguf

        config, params = load_gguf(path, cache=cache)
        return cls.from_params(config, params, dtype)

    # ------------------------------------------------------------- pieces

    def init_cache(self, batch: int, length: int | None = None, dtype=None) -> LlamaCache:
        """An empty cache of ``length`` slots (default ``max_len``) for ``batch`` sequences."""
        c = self.config
        check_int("batch", batch, min=1)
        length = c.max_len if length is None else check_int("length", length, min=1,
                                                              max=c.max_len)
        dtype = self.embed.embedding[...].dtype if dtype is None else dtype
        z = jnp.zeros((batch, length, c.n_kv_heads, c.head_dim), dtype)
        return LlamaCache((z,) * c.n_layers, (z,) * c.n_layers)

    def embed_tokens(self, tokens: Int[Array, "b t"]) -> Float[Array, "b t d"]:
        """The input embeddings (a plain gather: the parameters' dtype is kept)."""
        return jnp.take(self.embed.embedding[...], tokens, axis=0)

    def logits(self, h: Float[Array, "... d"]) -> Float[Array, "... v"]:
        """Next-token logits of final features ``h`` (already through the final norm)."""
        if self.head is not None:
            return self.head(h)
        return h @ self.embed.embedding[...].T

    def unembed(self, h: Float[Array, "... d"]) -> Float[Array, "... v"]:
        """:meth:`logits` under :class:`~jaxsci.common.lm.model.Transformer`'s name (code
        written for either model, such as DFlash's drafter, reads the head this way)."""
        return self.logits(h)

    def features(
        self,
        tokens: Int[Array, "b t"],
        positions: Int[Array, "b t"] | None = None,
        *,
        cache: LlamaCache | None = None,
        hidden_layers: Sequence[int] = (),
    ) -> tuple[Float[Array, "b t d"], tuple[Float[Array, "b t d"], ...], LlamaCache | None]:
        """The final normed features (what the head reads), the requested hidden states, the cache.

        Same arguments as :meth:`__call__`; use it with :meth:`logits` to compute logits
        at a few positions only (the full ``(b, t, 49152)`` logits of a long prompt are
        large).
        """
        c = self.config
        layers = tuple(hidden_layers)
        for i in layers:
            check_int("hidden_layers[i]", i, min=0, max=c.n_layers)
        positions = _positions(tokens, positions)
        if cache is not None and not isinstance(cache, LlamaCache):
            raise TypeError(f"cache must be a LlamaCache, got {type(cache).__name__}")
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
        new_cache = None if cache is None else LlamaCache(tuple(ks), tuple(vs))
        return self.norm(h), tuple(states[i] for i in layers), new_cache

    def stacked_blocks(self) -> tuple[nnx.GraphDef, nnx.State]:
        """The blocks' structure and their weights stacked on a leading layer axis (a copy).

        For :meth:`scan_features`: pass both to the jitted function as arguments (a
        closed-over copy would be embedded in the program as a constant).
        """
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs),
                               *[nnx.state(block) for block in self.blocks])
        return nnx.graphdef(self.blocks[0]), stacked

    def scan_features(
        self,
        blocks: tuple[nnx.GraphDef, nnx.State],
        tokens: Int[Array, "b t"],
        positions: Int[Array, "b t"] | None = None,
        *,
        cache: tuple[Float[Array, "L b s g e"], Float[Array, "L b s g e"]] | None = None,
        hidden: bool = False,
        return_cache: bool = True,
        depth: int | None = None,
    ):
        """:meth:`features` as a ``lax.scan`` over the stacked blocks (one compiled copy
        of the block body instead of ``n_layers``): the same operations per block, the
        same numbers to float32 rounding (see the module docstring).
        Used by programs whose compile time outweighs their run time (option scoring,
        prefill, hidden states); the decoding loop keeps :meth:`features`, whose per-layer
        cache buffers are updated in place.

        Args:
          blocks: :meth:`stacked_blocks` of this model (its current weights).
          tokens, positions: as in :meth:`features`.
          cache: keys and values stacked over layers, each ``(n_layers, batch, length,
            n_kv_heads, head_dim)``, or ``None`` (causal attention among ``tokens``).
          hidden: also return the residual stream after every block.
          return_cache: return the updated cache (``False``: ``None``, nothing stacked).
          depth: run only the first ``depth`` blocks (``None``: all ``n_layers``), for
            hidden states below the top (half the work for a middle layer); ``h`` is then
            the stream after block ``depth`` through the final norm. Not with ``cache``.

        Returns:
          ``(h, states, cache)``: the final normed features ``(batch, t, d)``; with
          ``hidden`` the states ``(depth + 1, batch, t, d)`` (0: the embeddings), else
          ``None``; the updated stacked cache or ``None``.
        """
        graphdef, stacked = blocks
        positions = _positions(tokens, positions)
        n = self.config.n_layers
        axes = {x.shape[0] for x in jax.tree.leaves(stacked)}
        if axes != {n}:
            raise ValueError(f"blocks must be stacked_blocks() of this model ({n} layers), "
                             f"got leading axes {sorted(axes)}")
        if depth is not None:
            check_int("depth", depth, min=0, max=n)
            if cache is not None:
                raise ValueError("depth runs part of the model: it cannot fill a cache")
            if depth < n:
                stacked = jax.tree.map(lambda x: x[:depth], stacked)
        h0 = self.embed_tokens(tokens)

        def body(h, xs):
            weights, layer_cache = xs
            h, layer_cache = nnx.merge(graphdef, weights)(h, positions, layer_cache)
            return h, (h if hidden else None, layer_cache if return_cache else None)

        h, (states, new_cache) = jax.lax.scan(body, h0, (stacked, cache))
        if hidden:
            states = jnp.concatenate([h0[None], states], axis=0)
        return self.norm(h), states, (new_cache if cache is not None else None)

    def __call__(
        self,
        tokens: Int[Array, "b t"],
        positions: Int[Array, "b t"] | None = None,
        *,
        cache: LlamaCache | None = None,
        hidden_layers: Sequence[int] = (),
    ) -> LMOutput:
        """Logits for ``tokens`` (and the requested hidden states, and the updated cache).

        Args:
          tokens: ``(batch, t)`` token ids.
          positions: ``(batch, t)`` absolute positions; default ``0 .. t - 1``.
          cache: a :class:`LlamaCache` from :meth:`init_cache` or a previous call: the
            tokens' keys and values are written at their positions (positions past the
            cache's length are dropped) and every slot up to a query's position is
            attended. Without a cache attention is causal among ``tokens`` by position.
          hidden_layers: indices in ``0 .. n_layers`` of the hidden states to return.

        Returns:
          an :class:`~jaxsci.common.lm.model.LMOutput` whose ``cache`` is a
          :class:`LlamaCache` (or ``None``).
        """
        h, hidden, cache = self.features(tokens, positions, cache=cache,
                                         hidden_layers=hidden_layers)
        return LMOutput(self.logits(h), hidden, cache)
