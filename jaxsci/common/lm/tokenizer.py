"""Byte-level tokenizer: one token per byte, plus four special tokens. No vocabulary file.

Ids ``0..255`` are the bytes themselves, so any byte string (UTF-8 text or not)
encodes losslessly and ``decode_bytes(encode(b)) == b``. Four special ids follow:

======  ====  ==========================================================
name    id    use
======  ====  ==========================================================
BOS     256   start of a document (the corpora prepend it)
EOS     257   end of text (a ``stop_token`` for :func:`jaxsci.common.lm.decode.generate`)
PAD     258   filler after a stop token and in padded prompt buffers
MASK    259   the masked positions of a block-diffusion drafter (:mod:`jaxsci.llm.dflash`)
======  ====  ==========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from jaxsci.core.validation import check_array

__all__ = ["BOS", "EOS", "PAD", "MASK", "VOCAB_SIZE", "ByteTokenizer"]

BOS, EOS, PAD, MASK = 256, 257, 258, 259
VOCAB_SIZE = 260


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """Bytes to ids and back; stateless (the class only groups the functions).

    Attributes:
      vocab_size: 260 (256 bytes + BOS, EOS, PAD, MASK).
    """

    vocab_size: int = VOCAB_SIZE
    bos_id: int = BOS
    eos_id: int = EOS
    pad_id: int = PAD
    mask_id: int = MASK

    def encode(self, text: str | bytes, *, bos: bool = False, eos: bool = False) -> np.ndarray:
        """Ids (int32) of ``text`` (a ``str`` is UTF-8 encoded), optionally framed by BOS/EOS."""
        if isinstance(text, str):
            data = text.encode("utf-8")
        elif isinstance(text, bytes | bytearray | memoryview):
            data = bytes(text)
        else:
            raise TypeError(f"text must be str or bytes, got {type(text).__name__}")
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
        parts = ([np.array([BOS], np.int32)] if bos else []) + [ids]
        if eos:
            parts.append(np.array([EOS], np.int32))
        return np.concatenate(parts)

    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """The bytes of ``ids``; special tokens are dropped."""
        arr = np.asarray(ids)
        if arr.size == 0:
            return b""
        check_array("ids", arr, ndim=1, dtype="integer", ge=0, le=VOCAB_SIZE - 1)
        return arr[arr < 256].astype(np.uint8).tobytes()

    def decode(self, ids: Iterable[int] | np.ndarray, errors: str = "replace") -> str:
        """Text of ``ids`` (UTF-8; invalid sequences handled by ``errors``)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)
