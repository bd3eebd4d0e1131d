"""A small byte-level language model in Flax NNX: the shared LM of the ML ports.

* :mod:`~jaxsci.ml.lm.tokenizer`: bytes to ids and back (plus BOS, EOS, PAD, MASK).
* :mod:`~jaxsci.ml.lm.model`: decoder-only transformer (RMSNorm, RoPE, causal attention
  with a position-indexed KV cache, tied embeddings) returning the hidden states of
  chosen layers on request.
* :mod:`~jaxsci.ml.lm.corpora`: synthetic corpora generated in-package (arithmetic,
  a probabilistic grammar, key-value recall, a bracket language).
* :mod:`~jaxsci.ml.lm.decode`: greedy and temperature / top-p sampling with the cache,
  one jitted ``lax.while_loop``.
* :mod:`~jaxsci.ml.lm.training`: training through :func:`jaxsci.core.fit`, and
  saving / loading trained models (orbax).
"""

from jaxsci.ml.lm import corpora, decode, model, tokenizer, training
from jaxsci.ml.lm.decode import Generation, generate
from jaxsci.ml.lm.model import KVCache, LMOutput, Transformer, TransformerConfig
from jaxsci.ml.lm.tokenizer import ByteTokenizer
from jaxsci.ml.lm.training import load_transformer, save_model, train_lm

__all__ = [
    "ByteTokenizer",
    "Generation",
    "KVCache",
    "LMOutput",
    "Transformer",
    "TransformerConfig",
    "corpora",
    "decode",
    "generate",
    "load_transformer",
    "model",
    "save_model",
    "tokenizer",
    "train_lm",
    "training",
]
