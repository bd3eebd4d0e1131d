"""Decoding with the KV cache: greedy and temperature / top-p (nucleus) sampling.

:func:`generate` prefills the cache with the prompt in one forward pass, then runs a
``lax.while_loop`` of one-token steps inside a single jitted program (no host round
trip per token). Each step feeds the last token at its position, reads the next-token
logits and picks:

* ``temperature == 0``: ``argmax`` (greedy);
* ``temperature > 0``: a draw from :func:`token_probs`, ``softmax(logits / T)``
  restricted to the smallest set of most probable tokens whose mass reaches ``top_p``
  (Holtzman et al. 2020) and renormalised.

Prompts are padded to a multiple of 16 tokens (one compiled program serves every
prompt length in that bucket, and a batch of padded prompts can be ``vmap``-ped with
their true lengths); padding is harmless because the cache is indexed by absolute
position (:class:`jaxsci.common.lm.model.KVCache`) and the padded slots are overwritten
before any query can see them.

The building blocks (:func:`token_probs`, :func:`sample_token`, :func:`prepare_prompt`,
:func:`check_sampling`, :func:`next_key`, :func:`check_decoding_key`,
:func:`check_stop_token`, :func:`generated_tokens`) are public because other decoders
(:mod:`jaxsci.llm.dflash`'s speculative decoding) follow the same rules.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.llama import Llama
from jaxsci.common.lm.model import Transformer
from jaxsci.common.lm.tokenizer import PAD
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = [
    "Generation",
    "generate",
    "token_probs",
    "sample_token",
    "check_sampling",
    "prepare_prompt",
    "next_key",
    "check_decoding_key",
    "check_stop_token",
    "generated_tokens",
    "PROMPT_BUCKET",
]

PROMPT_BUCKET = 16


class Generation(NamedTuple):
    """Generated tokens.

    Attributes:
      tokens: ``(max_new_tokens,)`` int32; after a stop token (included) the rest is PAD.
      length: number of generated tokens (``max_new_tokens`` unless a stop token came).
    """

    tokens: Int[Array, " n"]
    length: Int[Array, ""]


# ----------------------------------------------------------------- sampling rules


def token_probs(logits: Float[Array, "... v"], temperature: float, top_p: float = 1.0
                ) -> Float[Array, "... v"]:
    """Sampling distribution: ``softmax(logits / temperature)``, nucleus-truncated to ``top_p``.

    ``temperature`` must be > 0 (greedy decoding has no distribution). Tokens outside
    the nucleus get probability exactly 0; the most probable token is always kept.
    """
    probs = jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    if top_p >= 1.0:
        return probs
    order = jnp.argsort(-probs, axis=-1)
    sorted_p = jnp.take_along_axis(probs, order, axis=-1)
    # Keep a token if the mass strictly before it is below top_p.
    keep_sorted = (jnp.cumsum(sorted_p, axis=-1) - sorted_p) < top_p
    keep = jnp.zeros_like(keep_sorted)
    keep = jnp.put_along_axis(keep, order, keep_sorted, axis=-1, inplace=False)
    probs = jnp.where(keep, probs, 0.0)
    return probs / probs.sum(-1, keepdims=True)


def sample_token(key: jax.Array, logits: Float[Array, "... v"], temperature: float,
                 top_p: float = 1.0) -> Int[Array, "..."]:
    """Greedy (``temperature == 0``) or a draw from :func:`token_probs`."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    probs = token_probs(logits, temperature, top_p)
    return jax.random.categorical(key, jnp.log(probs), axis=-1).astype(jnp.int32)


def check_sampling(temperature: float, top_p: float) -> tuple[float, float]:
    """Validate the sampling settings (they are static: one program per setting)."""
    check_scalar("temperature", temperature, ge=0.0)
    check_scalar("top_p", top_p, gt=0.0, le=1.0)
    if isinstance(temperature, jax.core.Tracer) or isinstance(top_p, jax.core.Tracer):
        raise TypeError("temperature and top_p must be Python floats, not traced values")
    return float(temperature), float(top_p)


# ----------------------------------------------------------------- prompts


def prepare_prompt(
    prompt, max_new_tokens: int, max_len: int, vocab_size: int,
    prompt_length=None,
) -> tuple[jax.Array, jax.Array]:
    """Validate a prompt; return ``(buffer, length)`` with the buffer padded to a bucket.

    ``prompt`` is a 1-D integer array. Without ``prompt_length`` it is the whole prompt
    (non-empty, ids in ``[0, vocab_size)``) and is padded with PAD to a multiple of
    :data:`PROMPT_BUCKET`; with ``prompt_length`` it is an already padded buffer whose
    first ``prompt_length`` entries are the prompt (``prompt_length`` may be traced,
    e.g. under ``vmap``). ``length + max_new_tokens`` must fit in ``max_len``.
    Traced values are checked at run time (``equinox.error_if``): a bad length or
    token id in a batch raises inside ``jit`` / ``vmap`` rather than decoding garbage.
    """
    check_int("max_new_tokens", max_new_tokens, min=1)
    prompt = check_array("prompt", prompt, ndim=1, dtype="integer")
    n = prompt.shape[0]
    if n == 0:
        raise ValueError("prompt must hold at least one token, got an empty prompt")
    if prompt_length is None:
        if not isinstance(prompt, jax.core.Tracer):
            check_array("prompt", prompt, ge=0, le=vocab_size - 1)
        else:  # a traced prompt (under jit / vmap): the same check, at run time
            prompt = eqx.error_if(prompt, jnp.any((prompt < 0) | (prompt >= vocab_size)),
                                  f"prompt ids must be in [0, {vocab_size - 1}]")
        length = n
        padded = min(max_len, -(-n // PROMPT_BUCKET) * PROMPT_BUCKET)
        if n > max_len - max_new_tokens:
            raise ValueError(
                f"prompt of {n} tokens plus max_new_tokens={max_new_tokens} exceeds the "
                f"model's context max_len={max_len}"
            )
        buf = jnp.full((padded,), PAD, jnp.int32).at[:n].set(jnp.asarray(prompt, jnp.int32))
        return buf, jnp.asarray(length, jnp.int32)
    if n > max_len:
        raise ValueError(f"prompt buffer of {n} tokens exceeds the context max_len={max_len}")
    if not isinstance(prompt, jax.core.Tracer):
        check_array("prompt", prompt, ge=0, le=vocab_size - 1)
    else:
        prompt = eqx.error_if(prompt, jnp.any((prompt < 0) | (prompt >= vocab_size)),
                              f"prompt ids must be in [0, {vocab_size - 1}]")
    if not isinstance(prompt_length, jax.core.Tracer):
        length = check_int("prompt_length", int(np.asarray(prompt_length)), min=1, max=n)
        if length > max_len - max_new_tokens:
            raise ValueError(
                f"prompt_length={length} plus max_new_tokens={max_new_tokens} exceeds the "
                f"model's context max_len={max_len}"
            )
        return jnp.asarray(prompt, jnp.int32), jnp.asarray(length, jnp.int32)
    # A traced length (under jit / vmap): the same checks, at run time, so a bad length
    # in a batch raises instead of decoding past the context (writes there are dropped).
    length = jnp.asarray(prompt_length, jnp.int32)
    length = eqx.error_if(length, (length < 1) | (length > n),
                          f"prompt_length must be in [1, {n}] (the prompt buffer's size)")
    length = eqx.error_if(length, length > max_len - max_new_tokens,
                          f"prompt_length plus max_new_tokens={max_new_tokens} exceeds the "
                          f"model's context max_len={max_len}")
    return jnp.asarray(prompt, jnp.int32), length


# ----------------------------------------------------------------- decoding helpers
# Public because every decoder built on this module (jaxsci.llm.dflash's speculative
# decoding among them) needs the same key, stop-token and output conventions.


def next_key(key: jax.Array, temperature: float) -> tuple[jax.Array, jax.Array]:
    """``(key, subkey)`` for one decoding step.

    ``temperature`` is the static sampling setting (a Python float, see
    :func:`check_sampling`). Greedy decoding (``temperature == 0``) draws no random
    numbers, so the key is returned unsplit, ``(key, key)``; sampling splits it.
    """
    return jax.random.split(key) if temperature > 0.0 else (key, key)


def check_decoding_key(key: jax.Array | None, temperature: float) -> jax.Array:
    """The PRNG key a decoder uses: ``key`` itself (validated), or a fixed dummy key.

    ``key`` is required when ``temperature > 0`` (sampling) and may be ``None`` for
    greedy decoding, which never reads it.

    Raises:
      ValueError: ``key`` is ``None`` while sampling.
      TypeError: ``key`` is not a PRNG key.
    """
    if key is None:
        if temperature > 0.0:
            raise ValueError("key must be given when temperature > 0 (sampling)")
        return jax.random.key(0)
    check_key("key", key)
    return key


def check_stop_token(stop_token: int | None, vocab_size: int) -> jax.Array:
    """The stop token as a traced int32 scalar (``-1``: none), so it never recompiles.

    Raises:
      ValueError: ``stop_token`` is not an id in ``[0, vocab_size)``.
    """
    if stop_token is None:
        return jnp.asarray(-1, jnp.int32)
    return jnp.asarray(check_int("stop_token", stop_token, min=0, max=vocab_size - 1), jnp.int32)


def generated_tokens(seq: Int[Array, " s"], prompt_length: Int[Array, ""], n: Int[Array, ""],
                     max_new_tokens: int) -> Int[Array, " n"]:
    """The ``max_new_tokens`` slots of ``seq`` after the prompt, PAD past the ``n`` generated.

    ``seq`` is a decoder's working buffer (prompt, then generated tokens, then
    anything); ``prompt_length`` and ``n`` may be traced. This is the
    :class:`Generation` ``tokens`` convention.
    """
    out = jax.lax.dynamic_slice(seq, (prompt_length,), (max_new_tokens,))
    return jnp.where(jnp.arange(max_new_tokens) < n, out, PAD)


# ----------------------------------------------------------------- plain decoding


LANGUAGE_MODELS = (Transformer, Llama)


def fresh_cache(model, batch: int, length: int):
    """An empty KV cache for ``batch`` sequences of up to ``length`` positions: a
    :class:`~jaxsci.common.lm.llama.Llama`'s sized to ``length`` (its context is 8192:
    attending over that many empty slots would cost more than the weights), a
    :class:`~jaxsci.common.lm.model.Transformer`'s its full ``max_len``."""
    if isinstance(model, Llama):
        return model.init_cache(batch, min(length, model.config.max_len))
    return model.init_cache(batch)


@functools.partial(jax.jit, static_argnames=("max_new", "temperature", "top_p"))
def _generate(graphdef, state, buf, prompt_len, key, stop_token, *, max_new, temperature,
              top_p):
    model = nnx.merge(graphdef, state)
    p = buf.shape[0]
    # One spare slot: the last step writes one position past the budget.
    seq = jnp.full((p + max_new + 1,), PAD, jnp.int32).at[:p].set(buf)
    out = model(buf[None], cache=fresh_cache(model, 1, seq.shape[0]))
    key, sub = next_key(key, temperature)
    tok = sample_token(sub, out.logits[0, prompt_len - 1], temperature, top_p)
    seq = seq.at[prompt_len].set(tok)
    stopped = tok == stop_token

    def cond(carry):
        _, n, _, _, stopped = carry
        return (n < max_new) & ~stopped

    def body(carry):
        seq, n, cache, key, _ = carry
        s = prompt_len + n - 1  # position of the last token, not yet in the cache
        step = model(seq[s][None, None], s[None, None], cache=cache)
        key, sub = next_key(key, temperature)
        tok = sample_token(sub, step.logits[0, 0], temperature, top_p)
        seq = seq.at[s + 1].set(tok)
        return seq, n + 1, step.cache, key, tok == stop_token

    seq, n, _, _, _ = jax.lax.while_loop(
        cond, body, (seq, jnp.asarray(1, jnp.int32), out.cache, key, stopped)
    )
    return Generation(generated_tokens(seq, prompt_len, n, max_new), n)


def generate(
    model: Transformer | Llama,
    prompt: Int[Array, " p"],
    max_new_tokens: int,
    *,
    key: jax.Array | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop_token: int | None = None,
    prompt_length: int | Int[Array, ""] | None = None,
) -> Generation:
    """Continue ``prompt`` by ``max_new_tokens`` tokens with the KV cache, in one program.

    Args:
      model: the language model (a :class:`~jaxsci.common.lm.model.Transformer` or a
        :class:`~jaxsci.common.lm.llama.Llama`, whose cache is sized to the prompt and
        the budget).
      prompt: 1-D token ids (or a padded buffer, see ``prompt_length``).
      max_new_tokens: how many tokens to generate (fewer if ``stop_token`` comes).
      key: PRNG key; required when ``temperature > 0``.
      temperature: 0 for greedy decoding, > 0 to sample.
      top_p: nucleus mass in ``(0, 1]`` (1: the full distribution).
      stop_token: stop after generating this id (it is included in the output).
      prompt_length: the prompt's true length when ``prompt`` is a padded buffer
        (for ``vmap`` over prompts of different lengths).

    Returns:
      a :class:`Generation`. Deterministic given ``key``; ``vmap`` over keys (or over
      padded prompts and their lengths) to decode a batch.
    """
    if not isinstance(model, LANGUAGE_MODELS):
        raise TypeError(f"model must be a Transformer or a Llama, got {type(model).__name__}")
    c = model.config
    temperature, top_p = check_sampling(temperature, top_p)
    buf, length = prepare_prompt(prompt, max_new_tokens, c.max_len, c.vocab_size,
                                 prompt_length)
    key = check_decoding_key(key, temperature)
    stop = check_stop_token(stop_token, c.vocab_size)
    graphdef, state = nnx.split(model)
    return _generate(graphdef, state, buf, length, key, stop, max_new=max_new_tokens,
                     temperature=temperature, top_p=top_p)
