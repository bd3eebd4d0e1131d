r"""GPT-2 byte-level BPE tokenization from GGUF metadata, and SmolLM2's ChatML chat template.

:class:`BPETokenizer` rebuilds the tokenizer a GGUF file describes (``tokenizer.ggml.model
== "gpt2"``) with the Hugging Face ``tokenizers`` library (``pip install tokenizers``):

* the vocabulary ``tokenizer.ggml.tokens`` (id = index) and the ranked merges
  ``tokenizer.ggml.merges`` (``"a b"``: merge ``a`` and ``b``, earlier = first) of a
  byte-level BPE (Radford et al. 2019: every byte is mapped to a printable character,
  so any text encodes and ``decode(encode(s)) == s``);
* the pre-tokenizer of ``tokenizer.ggml.pre == "smollm"`` (llama.cpp's name; it matches
  SmolLM2's own tokenizer): every digit becomes a piece of its own, then the GPT-2
  regex splits words, numbers, punctuation runs and whitespace. ``"2025"`` is therefore
  four tokens, never a merged number;
* the control tokens (``tokenizer.ggml.token_type == 3``: ``<|endoftext|>`` 0,
  ``<|im_start|>`` 1, ``<|im_end|>`` 2, ...) and user-defined tokens (type 4) are
  matched as whole strings before BPE, so ``"<|im_start|>"`` in a text is one id (pass
  ``special=False`` to :meth:`BPETokenizer.encode` to treat them as plain text).

:func:`chat_template` renders a conversation in ChatML, reproducing SmolLM2's GGUF
``tokenizer.chat_template`` (a Jinja template) exactly::

    <|im_start|>system\n{system}<|im_end|>\n      # the default system prompt, if the
    <|im_start|>user\n{content}<|im_end|>\n       #   first message is not a system one
    ...
    <|im_start|>assistant\n                       # add_generation_prompt=True

SmolLM2's default system prompt is :data:`SMOLLM2_SYSTEM`; :meth:`BPETokenizer.from_gguf`
reads it from the file's template (and refuses a template without the ChatML markers).

>>> print(chat_template([{"role": "user", "content": "Hi"}], default_system="Be brief."))
<|im_start|>system
Be brief.<|im_end|>
<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<BLANKLINE>
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BPETokenizer", "chat_template", "SMOLLM2_SYSTEM", "CONTROL", "USER_DEFINED"]

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# GGUF token types (tokenizer.ggml.token_type): 1 normal, 2 unknown, 3 control,
# 4 user-defined, 5 unused, 6 byte.
CONTROL, USER_DEFINED = 3, 4
_TOKENIZERS_PIP = "pip install tokenizers"
_PRE_TOKENIZERS = ("smollm", "gpt2", "default")

# The one template shape chat_template reproduces: ChatML with an optional default system
# message, inserted when the first message is not a system message.
_DEFAULT_SYSTEM = re.compile(
    r"loop\.first and messages\[0\]\['role'\] != 'system'.*?"
    r"'<\|im_start\|>system\n(.*?)<\|im_end\|>\n'", re.S)


def _check_messages(messages) -> list[tuple[str, str]]:
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got "
                        f"{type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', "
                            f"got {m!r}")
        role, content = m["role"], m["content"]
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}]['role'] must be a non-empty str, got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a str, got "
                            f"{type(content).__name__}")
        out.append((role, content))
    return out


def chat_template(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True,
                  *, default_system: str | None = SMOLLM2_SYSTEM) -> str:
    """A conversation as ChatML text, exactly as SmolLM2's GGUF chat template renders it.

    Args:
      messages: ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``.
      add_generation_prompt: end with ``<|im_start|>assistant\n`` (the model answers next).
      default_system: the system message inserted when the first message is not a system
        message (SmolLM2's, :data:`SMOLLM2_SYSTEM`); ``None``: insert none.

    Returns:
      the prompt text (tokenize it with ``special=True`` so the markers are single ids).
    """
    msgs = _check_messages(messages)
    parts = []
    if default_system is not None and (not msgs or msgs[0][0] != "system"):
        if msgs:  # the template inserts it inside its loop, so never for no messages
            parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for role, content in msgs:
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _tokenizers():
    try:
        import tokenizers
    except ImportError as exc:
        raise ImportError(f"BPETokenizer needs the tokenizers library: {_TOKENIZERS_PIP}"
                          ) from exc
    return tokenizers


class BPETokenizer:
    """Byte-level BPE over a GGUF vocabulary (see the module docstring).

    Attributes:
      tokens: the vocabulary, id = index.
      merges: the merges, ``"left right"`` strings in rank order (a tuple).
      special_ids: ids matched as whole strings (control and user-defined tokens).
      control_ids: the control tokens' ids (``decode(..., skip_special=True)`` drops them).
      bos_id, eos_id: from the metadata (``None`` when absent).
      default_system: the chat template's default system prompt (``None``: none).
    """

    def __init__(self, tokens: Sequence[str], merges: Sequence[str],
                 token_types: Sequence[int] | None = None, *, bos_id: int | None = None,
                 eos_id: int | None = None, default_system: str | None = SMOLLM2_SYSTEM):
        """Build from a vocabulary and merges (``from_gguf`` reads them from a file).

        Args:
          tokens: the vocabulary (unique strings; the 256 byte-level characters must be
            in it for every text to encode).
          merges: ``"left right"`` pairs in rank order.
          token_types: GGUF token types per id (3 control, 4 user-defined; default all 1).
          bos_id, eos_id: special ids recorded for callers (no id is added by ``encode``).
          default_system: see :func:`chat_template`.
        """
        tk = _tokenizers()
        tokens = list(tokens)
        if not tokens or not all(isinstance(t, str) for t in tokens):
            raise TypeError("tokens must be a non-empty sequence of str")
        vocab = {t: i for i, t in enumerate(tokens)}
        if len(vocab) != len(tokens):
            dup = next(t for i, t in enumerate(tokens) if vocab[t] != i)
            raise ValueError(f"tokens must be unique, got {dup!r} twice")
        pairs = []
        for i, m in enumerate(merges):
            parts = m.split(" ") if isinstance(m, str) else None
            if parts is None or len(parts) != 2 or not all(parts):
                raise ValueError(f"merges[{i}] must be 'left right', got {m!r}")
            pairs.append((parts[0], parts[1]))
        types = np.ones(len(tokens), np.int64) if token_types is None else np.asarray(
            token_types)
        if types.shape != (len(tokens),):
            raise ValueError(f"token_types must have one entry per token ({len(tokens)}), "
                             f"got shape {types.shape}")
        for name, v in (("bos_id", bos_id), ("eos_id", eos_id)):
            if v is not None and not (isinstance(v, int) and 0 <= v < len(tokens)):
                raise ValueError(f"{name} must be an id in [0, {len(tokens)}), got {v!r}")
        self.tokens = tokens
        self.merges = tuple(f"{a} {b}" for a, b in pairs)
        self.control_ids = frozenset(int(i) for i in np.flatnonzero(types == CONTROL))
        self.special_ids = frozenset(
            int(i) for i in np.flatnonzero((types == CONTROL) | (types == USER_DEFINED)))
        self.bos_id, self.eos_id, self.default_system = bos_id, eos_id, default_system
        self._vocab = vocab
        bpe = tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
        tok = tk.Tokenizer(bpe)
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Digits(individual_digits=True),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = tk.decoders.ByteLevel()
        tok.add_special_tokens([
            tk.AddedToken(tokens[i], special=i in self.control_ids, normalized=False)
            for i in sorted(self.special_ids)])
        self._tok = tok
        # The same tokenizer without the special strings, for encode(special=False).
        plain = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False,
                                           byte_fallback=False))
        plain.pre_tokenizer, plain.decoder = tok.pre_tokenizer, tok.decoder
        self._plain = plain

    @classmethod
    def from_gguf(cls, path_or_metadata: str | os.PathLike | Mapping[str, Any]) -> BPETokenizer:
        """The tokenizer of a GGUF file (or of its metadata, from ``gguf.read_metadata``).

        Raises:
          ValueError: not a GPT-2 BPE (``tokenizer.ggml.model``), an unknown
            pre-tokenizer, missing keys, or a chat template that is not ChatML.
        """
        if isinstance(path_or_metadata, Mapping):
            meta = path_or_metadata
        elif isinstance(path_or_metadata, str | os.PathLike):
            from jaxsci.common.lm.gguf import read_metadata

            meta = read_metadata(path_or_metadata)
        else:
            raise TypeError(f"path_or_metadata must be a path or a metadata mapping, got "
                            f"{type(path_or_metadata).__name__}")
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"tokenizer.ggml.model must be 'gpt2' (byte-level BPE), got "
                             f"{model!r}")
        pre = meta.get("tokenizer.ggml.pre", "default")
        if pre not in _PRE_TOKENIZERS:
            raise ValueError(f"tokenizer.ggml.pre must be one of {list(_PRE_TOKENIZERS)} "
                             f"(digits split one by one, then the GPT-2 regex), got {pre!r}")
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in meta:
                raise ValueError(f"the GGUF metadata has no {key!r}")
        template = meta.get("tokenizer.chat_template")
        default_system = None
        if template is not None:
            if "<|im_start|>" not in template or "<|im_end|>" not in template:
                raise ValueError("tokenizer.chat_template must be a ChatML template "
                                 "(<|im_start|>role ... <|im_end|>); no other is supported")
            found = _DEFAULT_SYSTEM.search(template)
            default_system = found.group(1) if found else None

        def opt_id(key):
            v = meta.get(key)
            return None if v is None else int(v)

        return cls(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"],
                   meta.get("tokenizer.ggml.token_type"),
                   bos_id=opt_id("tokenizer.ggml.bos_token_id"),
                   eos_id=opt_id("tokenizer.ggml.eos_token_id"),
                   default_system=default_system)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        """Whether ``token`` is a vocabulary entry (``"<|im_end|>" in tokenizer``)."""
        return token in self._vocab

    def token_id(self, token: str) -> int:
        """The id of the vocabulary entry ``token`` (e.g. ``"<|im_end|>"``)."""
        if token not in self._vocab:
            raise KeyError(f"token {token!r} is not in the vocabulary")
        return self._vocab[token]

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of ``text`` (no BOS is added: SmolLM2's ``add_bos_token`` is false).

        Args:
          text: the string.
          special: control / user-defined token strings in ``text`` become their single
            ids (True), or are tokenized as plain text (False).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        enc = (self._tok if special else self._plain).encode(text, add_special_tokens=False)
        return list(enc.ids)

    def encode_batch(self, texts: Sequence[str], *, special: bool = True) -> list[list[int]]:
        """:meth:`encode` of each text (in parallel inside ``tokenizers``)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of str")
        tok = self._tok if special else self._plain
        return [list(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids, *, skip_special: bool = False) -> str:
        """The text of token ids (``skip_special``: drop the control tokens).

        Args:
          ids: a sequence or 1-D array of ids in ``[0, vocab_size)``.
          skip_special: leave out control tokens such as ``<|im_end|>``.
        """
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"ids must be a 1-D sequence of ints, got shape {arr.shape} "
                            f"and dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise ValueError(f"ids must be in [0, {self.vocab_size}), got "
                             f"[{arr.min()}, {arr.max()}]")
        ids = [int(i) for i in arr if not (skip_special and int(i) in self.control_ids)]
        return self._tok.decode(ids, skip_special_tokens=False)

    def chat_template(self, messages: Sequence[Mapping[str, str]],
                      add_generation_prompt: bool = True) -> str:
        """:func:`chat_template` with this tokenizer's default system prompt."""
        return chat_template(messages, add_generation_prompt,
                             default_system=self.default_system)

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={self.vocab_size}, special={len(self.special_ids)}, "
                f"bos_id={self.bos_id}, eos_id={self.eos_id})")
