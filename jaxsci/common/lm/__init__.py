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

A real pretrained model, SmolLM2-135M-Instruct, runs in-process on the same pieces:

* :mod:`~jaxsci.common.lm.gguf`: GGUF files read and dequantised (llama.cpp's format).
* :mod:`~jaxsci.common.lm.llama`: the LLaMA architecture (GQA, RoPE, SwiGLU, KV cache).
* :mod:`~jaxsci.common.lm.bpe`: its byte-level BPE tokenizer and ChatML chat template.
* :mod:`~jaxsci.common.lm.engine`: batched generation, option scoring, hidden states.
* :mod:`~jaxsci.common.lm.chat`: one chat interface (:class:`ChatModel`) over the
  in-process engine or any OpenAI-compatible server; :mod:`~jaxsci.common.lm.serve`
  serves a chat model over the OpenAI API (``jaxsci serve``; imported on demand);
  :mod:`~jaxsci.common.lm.callcache` records and replays its calls (SQLite) and traces
  them (JSONL).
* :mod:`~jaxsci.common.lm.tools`: tool calls (:class:`Tool`, :class:`ToolCall`), their
  prompt protocol and parsing; :mod:`~jaxsci.common.lm.grammar`: the JSON grammar and
  token masks of constrained decoding.
* :mod:`~jaxsci.common.lm.minilm`: all-MiniLM-L6-v2 sentence embeddings.
"""

from jaxsci.common.lm import (
    bpe,
    callcache,
    chat,
    decode,
    engine,
    gguf,
    grammar,
    llama,
    minilm,
    model,
    tokenizer,
    tools,
    training,
)
from jaxsci.common.lm.bpe import BPETokenizer, chat_template
from jaxsci.common.lm.callcache import CachedChat, CacheMiss
from jaxsci.common.lm.chat import ChatModel, ChatResult, LocalChat, OpenAIChat, open_chat_model
from jaxsci.common.lm.decode import Generation, generate
from jaxsci.common.lm.engine import Completion, Engine
from jaxsci.common.lm.gguf import find_smollm2, load_gguf
from jaxsci.common.lm.llama import Llama, LlamaCache, LlamaConfig
from jaxsci.common.lm.minilm import MiniLM
from jaxsci.common.lm.model import KVCache, LMOutput, Transformer, TransformerConfig
from jaxsci.common.lm.tokenizer import ByteTokenizer
from jaxsci.common.lm.tools import Tool, ToolCall, run_tool_calls
from jaxsci.common.lm.training import load_transformer, save_model, train_lm

__all__ = [
    "BPETokenizer",
    "ByteTokenizer",
    "CachedChat",
    "CacheMiss",
    "ChatModel",
    "ChatResult",
    "Completion",
    "Engine",
    "Llama",
    "LlamaCache",
    "LlamaConfig",
    "LocalChat",
    "MiniLM",
    "OpenAIChat",
    "bpe",
    "callcache",
    "chat",
    "chat_template",
    "engine",
    "find_smollm2",
    "gguf",
    "grammar",
    "llama",
    "load_gguf",
    "minilm",
    "open_chat_model",
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
    "Tool",
    "ToolCall",
    "tools",
    "run_tool_calls",
    "train_lm",
    "training",
]
