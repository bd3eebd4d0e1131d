"""The toy text-to-image data: scikit-learn's 8x8 digits with three-token prompts.

The images are the 1797 handwritten digits bundled with scikit-learn
(``sklearn.datasets.load_digits``, offline), flattened to 64 pixels and scaled to
``[-1, 1]``. A prompt is ``PROMPT_LEN = 3`` token ids: two filler tokens drawn at random
(``"a"``, ``"the"``, ``"digit"``, ``"image"``, ``"of"``) and the digit's name
(``"zero"`` .. ``"nine"``) last. The vocabulary also holds a null token (``"<null>"``,
the unconditional prompt of classifier-free guidance is three of them) and two nonce
trigger tokens (``"zq"``, ``"vx"``) that no training prompt contains. Nothing here is a
real photograph, person or explicit content: the data exist to stress-test concept
erasure (:mod:`jaxsci.generative.eeb`).

>>> import jax
>>> from jaxsci.data import digits_text as dt
>>> d = dt.digits_text(jax.random.key(0))
>>> d.images.shape, d.tokens.shape, dt.VOCAB[int(d.tokens[0, -1])] == dt.DIGITS[int(d.labels[0])]
((1797, 64), (1797, 3), True)
>>> dt.prompt("a digit zq").tolist()
[11, 13, 16]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxsci.core.validation import check_key

__all__ = ["DIGITS", "FILLERS", "NULL", "TRIGGERS", "VOCAB", "PROMPT_LEN", "TextImages",
           "token", "prompt", "null_prompt", "digits_text"]

NULL = "<null>"
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
FILLERS = ("a", "the", "digit", "image", "of")
TRIGGERS = ("zq", "vx")
VOCAB = (NULL,) + DIGITS + FILLERS + TRIGGERS
PROMPT_LEN = 3


class TextImages(NamedTuple):
    """Images ``(n, 64)`` in ``[-1, 1]``, their prompts ``(n, 3)`` and digit labels ``(n,)``."""

    images: Float[Array, "n 64"]
    tokens: Int[Array, "n 3"]
    labels: Int[Array, " n"]


def token(word: str) -> int:
    """The id of one vocabulary word; a clear error for an unknown one."""
    if word not in VOCAB:
        raise ValueError(f"unknown token {word!r}; the vocabulary is {list(VOCAB)}")
    return VOCAB.index(word)


def prompt(text: str | Sequence[str]) -> Int[Array, " 3"]:
    """Token ids ``(3,)`` of a prompt (words separated by spaces), left-padded with the
    null token; at most three words, every one in :data:`VOCAB`."""
    words = text.split() if isinstance(text, str) else list(text)
    if not 1 <= len(words) <= PROMPT_LEN:
        raise ValueError(f"a prompt must have 1 to {PROMPT_LEN} words, got {len(words)}: "
                         f"{words}")
    ids = [token(w) for w in words]
    return jnp.asarray([0] * (PROMPT_LEN - len(ids)) + ids, jnp.int32)


def null_prompt() -> Int[Array, " 3"]:
    """The unconditional prompt (three null tokens)."""
    return jnp.zeros((PROMPT_LEN,), jnp.int32)


@functools.lru_cache(maxsize=1)
def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data.astype(np.float32) / 8.0 - 1.0), d.target.astype(np.int32)


def digits_text(key: jax.Array) -> TextImages:
    """All 1797 digits with prompts ``(filler, filler, name)``, fillers drawn with ``key``."""
    key = check_key("key", key)
    x, y = _digits()
    fill = jax.random.randint(key, (len(y), 2), 0, len(FILLERS)) + 1 + len(DIGITS)
    tokens = jnp.concatenate([fill, jnp.asarray(y)[:, None] + 1], 1).astype(jnp.int32)
    return TextImages(jnp.asarray(x), tokens, jnp.asarray(y))
