"""A small byte-level language model in Flax NNX: the shared LM of the ML ports.

* :mod:`~jaxsci.common.lm.tokenizer`: bytes to ids and back (plus BOS, EOS, PAD, MASK).
* :mod:`~jaxsci.common.lm.model`: decoder-only transformer (RMSNorm, RoPE, causal attention
  with a position-indexed KV cache, tied embeddings) returning the hidden states of
  chosen layers on request.
* :mod:`~jaxsci.data.corpora`: synthetic corpora generated in-package (arithmetic,
  a probabilistic grammar, key-value recall, a bracket language).
* :mod:`~jaxsci.common.lm.decode`: greedy and temperature / top-p sampling with the cache,
  one jitted ``lax.while_loop``.
* :mod:`~jaxsci.common.lm.training`: training through :func:`jaxsci.core.fit`, and
  saving / loading trained models (orbax).
"""

from jaxsci.common.lm import decode, model, tokenizer, training
from jaxsci.common.lm.decode import Generation, generate
from jaxsci.common.lm.model import KVCache, LMOutput, Transformer, TransformerConfig
from jaxsci.common.lm.tokenizer import ByteTokenizer
from jaxsci.common.lm.training import load_transformer, save_model, train_lm

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
