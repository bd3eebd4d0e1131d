r"""One chat interface, :class:`ChatModel`: the in-process engine or an OpenAI-compatible server.

Agent experiments talk to a language model through two calls, and run unchanged against
either backend:

* ``chat(messages, *, tools, tool_choice, parallel_tool_calls, response_format, temperature,
  top_p, max_tokens, stop, seed, n, logprobs, top_logprobs)`` -> ``n`` :class:`ChatResult`
  (the reply, its tool calls, why it ended, token counts, optionally each reply token's
  log-probability);
* ``score(messages, options)`` -> ``log p(option | conversation)`` for each option string
  as the start of the assistant's reply (an :class:`OptionScores` array whose ``method``
  says how it was computed).

Backends:

* :class:`LocalChat` wraps an :class:`~jaxsci.common.lm.engine.Engine` (SmolLM2-135M-Instruct
  in-process): the conversation goes through the tokenizer's chat template, greedy
  decoding at ``temperature == 0``, otherwise sampling keyed by ``seed``
  (``jax.random.key(seed)``; the same seed and ``n`` give the same replies). ``score``
  is :meth:`Engine.score` after the chat-template prefix, exact. Beyond the protocol,
  :meth:`LocalChat.stream` yields one reply token by token (:class:`ChatDelta` pieces,
  the same reply as ``chat`` with ``n=1``), on :meth:`Engine.stream`.
* :class:`OpenAIChat` talks to any OpenAI-compatible ``/v1`` server (``jaxsci serve``,
  vLLM, llama.cpp's ``llama-server``, Ollama, ...) through the official ``openai`` SDK.
  ``score`` is exact where the server can both render its chat template
  (``POST /apply-template``, llama.cpp's extension, which ``jaxsci serve`` also has; or a
  ``chat_template=`` function given here) and return prompt log-probabilities
  (``/v1/completions`` with ``echo=True, logprobs=1``, as vLLM and ``jaxsci serve`` do).
  Otherwise it falls back to the **first-token approximation**: one chat completion of
  one token with ``top_logprobs=20``, and each option scored by the log of the summed
  probability of the listed first tokens that begin the option (``-inf`` when none of
  the 20 does). That is exact for options that are one token each ("A", "B", ...) and
  in the top 20, and only ranks longer options by their first token; the result's
  ``method`` is then ``"first_token"`` instead of ``"sequence"``.

:func:`open_chat_model` turns a spec into a backend: ``"smollm2"``, a ``.gguf`` path, or a
server URL such as ``"http://127.0.0.1:8000/v1"``.

**Tool calls** (:mod:`jaxsci.common.lm.tools`): ``tools`` is a list of
:class:`~jaxsci.common.lm.tools.Tool` values or OpenAI tool dicts, ``tool_choice`` is
OpenAI's (``"auto"``, the default with tools; ``"none"``; ``"required"``; or
``{"type": "function", "function": {"name": ...}}``), and a reply's calls come back as
:class:`~jaxsci.common.lm.tools.ToolCall` values in ``ChatResult.tool_calls``, with
``finish_reason="tool_calls"``. :class:`OpenAIChat` passes them to the server's own tool
support. :class:`LocalChat` lists the tools in the system prompt (the Hermes / Qwen2.5
``<tool_call>`` protocol) and decodes with **constrained decoding**
(:mod:`jaxsci.common.lm.grammar`): ``"required"`` and a forced tool make the reply one
call whose JSON follows the tool's schema, whatever the model; ``"auto"`` lets the
model choose by its first tokens: a reply that begins with ``<tool_call>`` is held to the
grammar, any other is free text (in which ``<tool_call>`` blocks are still parsed);
``"none"`` neither lists the tools nor parses calls. One call per reply, or with
``parallel_tool_calls=True`` one or more (the grammar lets the model end after each call
or go on with another; OpenAI's default is ``True``, ours ``False``, because a small model
held to a grammar that allows more calls tends to repeat the first). Calls that fail to
parse or validate keep their ``error``, never dropped.

**JSON mode**: ``response_format={"type": "json_object"}`` or ``{"type": "json_schema",
"json_schema": {"name": ..., "schema": {...}}}`` (OpenAI's). :class:`LocalChat` decodes the
reply under the JSON grammar (:func:`~jaxsci.common.lm.grammar.json_grammar`): the reply is
then one JSON value of the schema's subset (a ``json_object`` reply, any object nested at
most :data:`~jaxsci.common.lm.grammar.JSON_DEPTH` levels), in ``json.dumps``'s spacing;
saying "answer in JSON" in the prompt still helps a small model choose good content.
:class:`OpenAIChat` sends it to the server's own JSON mode.

Messages are ``{"role": "system" | "user" | "assistant" | "tool", "content": str}`` dicts
(content may also be a list of ``{"type": "text", "text": ...}`` parts, joined with
newlines); assistant messages may carry OpenAI ``tool_calls`` (their content may then be
``None``), tool messages need the ``tool_call_id`` they answer. Anything else is refused
with an error naming the message.

>>> chat = open_chat_model("smollm2")                                    # doctest: +SKIP
>>> question = [{"role": "user", "content": "What is the capital of France?"}]
>>> chat.chat(question, max_tokens=16)[0].content                        # doctest: +SKIP
'The capital of France is Paris.'
>>> chat.score(question, ["Paris", "Rome", "Berlin"])                    # doctest: +SKIP
OptionScores([ -4.1036997, -10.232081 , -11.599919 ], dtype=float32)
>>> check_messages([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
[{'role': 'user', 'content': 'Hi'}]
"""

from __future__ import annotations

import codecs
import functools
import math
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxsci.common.lm.engine import RUN_BOUND, Engine, bucket
from jaxsci.common.lm.grammar import (
    Grammar,
    TokenIndex,
    TokenMasks,
    check_response_format,
    tool_call_grammar,
)
from jaxsci.common.lm.tools import (
    Tool,
    ToolCall,
    as_tools,
    check_parallel_tool_calls,
    check_tool_calls,
    check_tool_choice,
    make_tool_call,
    parse_tool_calls,
    render_messages,
)
from jaxsci.core.validation import check_int, check_scalar

__all__ = [
    "ROLES",
    "MAX_TOP_LOGPROBS",
    "ChatModel",
    "ChatResult",
    "ChatDelta",
    "Usage",
    "TokenLogprob",
    "TopLogprob",
    "TextCompletion",
    "OptionScores",
    "LocalChat",
    "OpenAIChat",
    "open_chat_model",
    "parse_model_spec",
    "check_messages",
    "seed_key",
]

ROLES = ("system", "user", "assistant", "tool")
# OpenAI's limit on top_logprobs; the prompt-logprob program always computes this many.
MAX_TOP_LOGPROBS = 20
_OPENAI_PIP = "pip install openai==3.51.0"


# ----------------------------------------------------------------- results


class TopLogprob(NamedTuple):
    """One of the most likely tokens at a position: its text, log-probability and bytes."""

    token: str
    logprob: float
    bytes: tuple[int, ...]


class TokenLogprob(NamedTuple):
    """A token of a reply (or prompt) with its log-probability.

    Attributes:
      token: the token's text (invalid or partial UTF-8 shown as U+FFFD; ``bytes`` is exact).
      logprob: ``log p(token | everything before it)`` under the model's own distribution
        (temperature 1, no nucleus cut, whatever the sampling settings); ``None`` for the
        first token of a prompt, which nothing predicts.
      bytes: the token's UTF-8 bytes.
      top_logprobs: the most likely tokens at that position, most likely first.
    """

    token: str
    logprob: float | None
    bytes: tuple[int, ...]
    top_logprobs: tuple[TopLogprob, ...] = ()


class Usage(NamedTuple):
    """Token counts of the request that produced a result.

    With ``n > 1`` the ``n`` results share one request: ``completion_tokens`` counts the
    tokens of all of them (as OpenAI's ``usage`` does).
    """

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatResult(NamedTuple):
    """One assistant reply.

    Attributes:
      content: the reply text (cut before the first stop string), without its tool
        calls (``""`` for a reply that is only a call).
      finish_reason: ``"stop"`` (an end-of-turn token or a stop string), ``"length"``
        (``max_tokens`` reached) or ``"tool_calls"`` (the reply is complete and holds
        calls); a server may report others (``"content_filter"``).
      usage: :class:`Usage` of the request.
      tool_calls: the :class:`~jaxsci.common.lm.tools.ToolCall` values of the reply
        (empty without tools); a call that failed to parse or validate has ``error`` set.
      logprobs: with ``logprobs=True``, the reply's tokens (:class:`TokenLogprob`), else
        ``None``.
    """

    content: str
    finish_reason: str
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None


class ChatDelta(NamedTuple):
    """A piece of a streamed reply (:meth:`LocalChat.stream`, :meth:`LocalChat.stream_complete`).

    Attributes:
      content: the text that follows the pieces before it (whole characters; the
        pieces concatenate to the reply).
      finish_reason: ``None``, except on the last piece: ``"stop"`` or ``"length"``.
      usage: ``None``, except on the last piece: the :class:`Usage` of the request
        (the tokens generated up to the end, a final stop id included).
      logprobs: with ``stream(..., logprobs=True)``, the :class:`TokenLogprob` of the
        tokens whose text this piece releases (a token that ends inside a character or
        inside a possible stop string is reported with the piece that completes it; a
        final stop id is not reported, as in :meth:`LocalChat.chat`); else ``None``.
    """

    content: str
    finish_reason: str | None = None
    usage: Usage | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None


class TextCompletion(NamedTuple):
    """One plain-text completion (:meth:`LocalChat.complete`, the server's ``/v1/completions``).

    Attributes:
      text: the generated text, preceded by the prompt's text when ``echo=True``.
      finish_reason: ``"stop"`` or ``"length"``.
      usage: :class:`Usage` of the request.
      logprobs: with ``logprobs=k``, a :class:`TokenLogprob` (with ``k`` alternatives) for
        each token of ``text``, else ``None``.
      text_offset: with ``logprobs``, each token's character offset in ``text``.
    """

    text: str
    finish_reason: str
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] | None = None
    text_offset: tuple[int, ...] | None = None


class OptionScores(np.ndarray):
    """float32 log-probabilities of options, one per option, with the ``method`` used.

    ``method`` is ``"sequence"`` (the whole option's log-probability, exact) or
    ``"first_token"`` (:class:`OpenAIChat`'s fallback, see the module docstring).
    """

    method: str | None

    def __new__(cls, values, method: str):
        obj = np.asarray(values, np.float32).view(cls)
        obj.method = method
        return obj

    def __array_finalize__(self, obj):
        self.method = getattr(obj, "method", None)


# ----------------------------------------------------------------- the interface


@runtime_checkable
class ChatModel(Protocol):
    """What every chat backend offers (:class:`LocalChat`, :class:`OpenAIChat`).

    Attributes:
      model_id: the model's name (what a server lists under ``/v1/models``).
      supports_tools: ``chat`` takes ``tools`` and ``tool_choice``.
      supports_prompt_logprobs: :meth:`score` is exact (``"sequence"``).
      supports_hidden_states: the backend can return hidden states (in-process only).
      supports_seed: ``seed`` makes sampling reproducible.
    """

    model_id: str
    supports_tools: bool
    supports_prompt_logprobs: bool
    supports_hidden_states: bool
    supports_seed: bool

    def chat(self, messages: Sequence[Mapping[str, Any]], *,
             tools: Sequence[Tool | Mapping[str, Any]] | None = None, tool_choice=None,
             parallel_tool_calls: bool = False,
             response_format: Mapping[str, Any] | None = None, temperature: float = 0.0,
             top_p: float = 1.0, max_tokens: int = 256,
             stop: str | Sequence[str] | None = None, seed: int | None = None, n: int = 1,
             logprobs: bool = False, top_logprobs: int = 0) -> list[ChatResult]:
        """``n`` assistant replies to the conversation ``messages``."""
        ...

    def score(self, messages: Sequence[Mapping[str, Any]],
              options: Sequence[str]) -> np.ndarray:
        """``log p(option | messages)`` of each option as the start of the assistant's reply."""
        ...


# ----------------------------------------------------------------- validation


def check_messages(messages) -> list[dict[str, Any]]:
    """Validate a conversation; return it as ``[{"role", "content"}]`` with text content.

    Args:
      messages: a non-empty list of dicts with a ``role`` in :data:`ROLES` and a
        ``content`` that is a str or a list of ``{"type": "text", "text": str}`` parts
        (joined with newlines). An assistant message may have OpenAI ``tool_calls``
        (then its content may be ``None``); a tool message needs a ``tool_call_id``.
        Other keys (``name``, ...) are dropped.

    Returns:
      a new list of ``{"role": str, "content": str}`` dicts, with ``tool_calls`` (OpenAI
      dicts, :func:`~jaxsci.common.lm.tools.check_tool_calls`) and ``tool_call_id``
      where the message had them.

    Raises:
      TypeError: not a list of dicts, or content of the wrong type.
      ValueError: empty, an unknown role, missing content, a non-text content part, tool
        calls outside an assistant message, or a tool message without its call's id.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got "
                        f"{type(messages).__name__}")
    if not messages:
        raise ValueError("messages must hold at least one message, got an empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got "
                            f"{type(m).__name__} {m!r}"[:200])
        role = m.get("role")
        if role not in ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {list(ROLES)}, got "
                             f"{role!r}")
        calls = m.get("tool_calls")
        if calls and role != "assistant":
            raise ValueError(f"messages[{i}] ({role}) has tool_calls; only assistant "
                             "messages may")
        if m.get("content") is None and not calls:
            raise ValueError(f"messages[{i}] ({role}) has no 'content'")
        content = "" if m.get("content") is None else m["content"]
        if isinstance(content, Sequence) and not isinstance(content, str):
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, Mapping) and part.get("type") == "text"
                        and isinstance(part.get("text"), str)):
                    raise ValueError(f"messages[{i}]['content'][{j}] must be a "
                                     f"{{'type': 'text', 'text': str}} part (only text is "
                                     f"supported), got {part!r}"[:200])
                texts.append(part["text"])
            content = "\n".join(texts)
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a str or a list of text "
                            f"parts, got {type(content).__name__}")
        msg = {"role": role, "content": content}
        if calls:
            msg["tool_calls"] = check_tool_calls(f"messages[{i}]['tool_calls']", calls)
        if role == "tool":
            cid = m.get("tool_call_id")
            if not isinstance(cid, str) or not cid:
                raise ValueError(f"messages[{i}] (tool) needs a 'tool_call_id' (the id of "
                                 f"the call it answers), got {cid!r}")
            msg["tool_call_id"] = cid
        out.append(msg)
    return out


def _check_options(options) -> list[str]:
    if isinstance(options, str) or not isinstance(options, Sequence) or not options:
        raise TypeError(f"options must be a non-empty list of str, got "
                        f"{type(options).__name__} {options!r}"[:200])
    for i, o in enumerate(options):
        if not isinstance(o, str) or not o:
            raise ValueError(f"options[{i}] must be a non-empty str, got {o!r}")
    return list(options)


def _check_stop(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stops, Sequence):
        raise TypeError(f"stop must be a str, a list of str or None, got {type(stop).__name__}")
    for i, s in enumerate(stops):
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop[{i}] must be a non-empty str, got {s!r}")
    return tuple(stops)


def _check_seed(seed) -> int | None:
    if seed is None:
        return None
    return check_int("seed", seed, min=-(2**63), max=2**64 - 1)


class _Sampling(NamedTuple):
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    seed: int | None
    n: int
    logprobs: bool
    top_logprobs: int


def _check_sampling(temperature, top_p, max_tokens, stop, seed, n, logprobs,
                    top_logprobs) -> _Sampling:
    temperature = float(check_scalar("temperature", temperature, ge=0.0))
    top_p = float(check_scalar("top_p", top_p, gt=0.0, le=1.0))
    max_tokens = check_int("max_tokens", max_tokens, min=1)
    n = check_int("n", n, min=1)
    if not isinstance(logprobs, bool | np.bool_):
        raise TypeError(f"logprobs must be a bool, got {type(logprobs).__name__} {logprobs!r}")
    top_logprobs = check_int("top_logprobs", top_logprobs, min=0, max=MAX_TOP_LOGPROBS)
    if top_logprobs and not logprobs:
        raise ValueError(f"top_logprobs={top_logprobs} needs logprobs=True")
    return _Sampling(temperature, top_p, max_tokens, _check_stop(stop), _check_seed(seed), n,
                     bool(logprobs), top_logprobs)


def seed_key(seed: int) -> jax.Array:
    """The PRNG key of an integer seed (a 64-bit one; negative seeds taken modulo 2**64).

    ``jax.random.key(seed)`` itself for seeds in ``[0, 2**32)``; the high 32 bits of a
    larger seed are folded in (``jax.random.key`` alone would drop them without x64).
    """
    s = _check_seed(seed) % 2**64
    key = jax.random.key(s & 0xFFFFFFFF)
    return jax.random.fold_in(key, s >> 32) if s >> 32 else key


def _sampling_key(seed: int | None, temperature: float) -> jax.Array | None:
    if temperature == 0.0:
        return None  # greedy: the engine never reads a key
    # No seed: fresh entropy, so that repeated requests differ (as OpenAI's servers do).
    return seed_key(secrets.randbits(64) if seed is None else seed)


# ----------------------------------------------------------------- per-token log-probabilities


@functools.partial(jax.jit, compiler_options=RUN_BOUND, static_argnames=("k",))
def _logprobs(graphdef, state, blocks, tokens, *, k):
    """Log-probability of each next token of ``tokens`` and the ``k`` most likely ones."""
    model = nnx.merge(graphdef, state)
    h, _, _ = model.scan_features(blocks, tokens)
    logp = jax.nn.log_softmax(model.logits(h[:, :-1]).astype(jnp.float32), axis=-1)
    chosen = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    top_v, top_i = jax.lax.top_k(logp, k)
    return chosen, top_v, top_i


# ----------------------------------------------------------------- the in-process backend


class LocalChat:
    """:class:`ChatModel` over an in-process :class:`~jaxsci.common.lm.engine.Engine`.

    Calls are serialised by a lock, so one instance may serve several threads (the
    server's request threads). Beyond the protocol it offers :meth:`prompt` (the
    rendered chat prompt), :meth:`complete` (plain-text completion with prompt
    log-probabilities, for ``/v1/completions``) and :meth:`hidden_states`.

    Args:
      engine: the engine.
      model_id: the name reported as :attr:`model_id`.

    Attributes:
      engine, model_id: as given.
    """

    supports_tools = True
    supports_prompt_logprobs = True
    supports_hidden_states = True
    supports_seed = True

    def __init__(self, engine: Engine, *, model_id: str = "jaxsci-local"):
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be an Engine, got {type(engine).__name__}")
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id must be a non-empty str, got {model_id!r}")
        self.engine, self.model_id = engine, model_id
        self._lock = threading.RLock()
        self._index: TokenIndex | None = None
        self._tool_masks: dict[Any, TokenMasks] = {}

    # ------------------------------------------------------------- helpers

    @property
    def max_len(self) -> int:
        """The model's context length in tokens."""
        return self.engine.model.config.max_len

    def prompt(self, messages, tools=None) -> str:
        """The conversation rendered by the chat template, ending with the assistant prompt.

        Tool calls and tool results are rendered in the prompt protocol, and ``tools``
        (if any) listed in the system message (:func:`~jaxsci.common.lm.tools.render_messages`).
        """
        return self._render(check_messages(messages), as_tools(tools))

    def _render(self, msgs, tools: tuple[Tool, ...] = ()) -> str:
        tok = self.engine.tokenizer
        return tok.chat_template(render_messages(msgs, tools, default_system=tok.default_system))

    def _masks(self, tools: tuple[Tool, ...], mode: str, name: str | None,
               parallel: bool = False) -> TokenMasks:
        """The token masks of the tool-call grammar (kept for the last few grammars)."""
        return self._grammar_masks(tool_call_grammar(
            tools, name=name if mode == "function" else None, free_text=mode == "auto",
            parallel=parallel))

    def _grammar_masks(self, grammar: Grammar) -> TokenMasks:
        masks = self._tool_masks.get(grammar)
        if masks is None:
            if self._index is None:
                e = self.engine
                self._index = TokenIndex(e.token_bytes, e.tokenizer.special_ids, e.stop_ids,
                                         e.model.config.vocab_size)
            if len(self._tool_masks) >= 8:
                self._tool_masks.pop(next(iter(self._tool_masks)))
            masks = self._tool_masks[grammar] = TokenMasks(grammar, self._index)
        return masks

    def _bytes(self, token_id: int) -> bytes:
        return self.engine.token_bytes[token_id]

    def _entry(self, token_id: int, logprob, top_v, top_i, k: int) -> TokenLogprob:
        raw = self._bytes(token_id)
        top = tuple(TopLogprob(self._bytes(int(i)).decode("utf-8", "replace"), float(v),
                               tuple(self._bytes(int(i))))
                    for v, i in zip(top_v[:k], top_i[:k], strict=True))
        return TokenLogprob(raw.decode("utf-8", "replace"),
                            None if logprob is None else float(logprob), tuple(raw), top)

    def _token_logprobs(self, seqs: list[list[int]], spans: list[tuple[int, int]],
                        k: int) -> list[tuple[TokenLogprob, ...]]:
        """For each sequence, the log-probabilities of its tokens ``start .. stop - 1``.

        One batched forward pass; token 0 of a sequence gets ``logprob=None``.
        """
        longest = max(len(s) for s in seqs)
        t = min(bucket(longest), self.max_len)
        b = bucket(len(seqs), 1)
        tokens = np.zeros((b, t), np.int32)
        for i, s in enumerate(seqs):
            tokens[i, :len(s)] = s
        chosen, top_v, top_i = (np.asarray(x) for x in _logprobs(
            *nnx.split(self.engine.model), self.engine.stacked_blocks(), jnp.asarray(tokens),
            k=MAX_TOP_LOGPROBS))
        out = []
        for i, (s, (start, stop)) in enumerate(zip(seqs, spans, strict=True)):
            row = []
            for j in range(start, stop):
                if j == 0:
                    row.append(self._entry(s[0], None, (), (), 0))
                else:  # position j - 1 predicts token j
                    row.append(self._entry(s[j], chosen[i, j - 1], top_v[i, j - 1],
                                           top_i[i, j - 1], k))
            out.append(tuple(row))
        return out

    def _offsets(self, ids: list[int]) -> list[int]:
        """Each token's character offset in the decoded text (a token that ends inside a
        multi-byte character moves the next offset only once the character is complete)."""
        decoder, out, n = codecs.getincrementaldecoder("utf-8")("replace"), [], 0
        for i in ids:
            out.append(n)
            n += len(decoder.decode(self._bytes(i)))
        return out

    def _reply_tokens(self, body: list[int], text: str) -> list[int]:
        """The fewest leading tokens of ``body`` whose text covers the (stop-cut) reply."""
        if self.engine.tokenizer.decode(body) == text:
            return body
        for i in range(len(body) + 1):
            if self.engine.tokenizer.decode(body[:i]).startswith(text):
                return body[:i]
        return body

    def _check_fits(self, ids: list[int], max_tokens: int) -> None:
        if len(ids) + max_tokens > self.max_len:
            raise ValueError(f"the prompt has {len(ids)} tokens; with max_tokens={max_tokens} "
                             f"it exceeds the model's context of {self.max_len} tokens")

    def _generate(self, rows: list[list[int]], s: _Sampling):
        for ids in rows:
            self._check_fits(ids, s.max_tokens)
        completions = self.engine.generate(
            rows, s.max_tokens, temperature=s.temperature, top_p=s.top_p,
            key=_sampling_key(s.seed, s.temperature), stop=s.stop)
        bodies = []
        for c in completions:
            body = c.tokens[:-1] if c.tokens and c.tokens[-1] in self.engine.stop_ids \
                else c.tokens
            bodies.append(self._reply_tokens(body, c.text))
        return completions, bodies

    # ------------------------------------------------------------- the protocol

    def chat(self, messages, *, tools=None, tool_choice=None, parallel_tool_calls=False,
             response_format=None, temperature: float = 0.0, top_p: float = 1.0,
             max_tokens: int = 256,
             stop: str | Sequence[str] | None = None, seed: int | None = None, n: int = 1,
             logprobs: bool = False, top_logprobs: int = 0) -> list[ChatResult]:
        """``n`` replies to ``messages``, generated as one batch.

        Args:
          messages: the conversation (:func:`check_messages`).
          tools: :class:`~jaxsci.common.lm.tools.Tool` values or OpenAI tool dicts; with
            any, the reply is decoded under the tool-call grammar (see the module
            docstring and :mod:`jaxsci.common.lm.grammar`), token by token.
          tool_choice: ``None`` (``"auto"`` with tools), ``"auto"``, ``"none"``,
            ``"required"`` or ``{"type": "function", "function": {"name": ...}}``.
          parallel_tool_calls: ``True``: a reply may hold several calls (each of any
            offered tool, or all of the forced one); ``False``: at most one.
          response_format: OpenAI's JSON mode: ``{"type": "json_object"}`` (the reply is
            one JSON object) or ``{"type": "json_schema", "json_schema": {"name": ...,
            "schema": {...}}}`` (one JSON value following the schema; the subset of
            :mod:`jaxsci.common.lm.grammar`), decoded under the grammar token by token;
            ``None`` or ``{"type": "text"}``: free text. Not with tools (use
            ``tool_choice="none"``). A reply cut by ``max_tokens`` is unfinished JSON,
            with ``finish_reason="length"``.
          temperature: 0 for greedy decoding (then the ``n`` replies are equal), > 0 to
            sample.
          top_p: nucleus mass in ``(0, 1]``.
          max_tokens: the most tokens per reply (prompt plus ``max_tokens`` must fit the
            context).
          stop: stop string(s): a reply is cut before the first one.
          seed: sampling seed (``jax.random.key(seed)``): the same seed, ``n`` and
            settings give the same replies. ``None`` draws a fresh seed per call.
          n: the number of replies.
          logprobs: return each reply token's log-probability (one extra forward pass).
          top_logprobs: how many most likely alternatives per token, in ``[0, 20]``.

        Returns:
          ``n`` :class:`ChatResult`.

        Raises:
          ValueError, TypeError: bad messages, tools or settings, an unknown forced tool,
            a schema outside the grammar's subset, or a conversation too long for the
            context.
        """
        msgs = check_messages(messages)
        s = _check_sampling(temperature, top_p, max_tokens, stop, seed, n, logprobs,
                            top_logprobs)
        tools = as_tools(tools)
        choice = check_tool_choice(tool_choice, tools)
        parallel = check_parallel_tool_calls(parallel_tool_calls)
        grammar = check_response_format(response_format)
        if grammar is not None:
            if choice.mode != "none":
                raise ValueError("response_format (JSON mode) with tools is not supported: "
                                 "pass tool_choice='none' or no tools")
            return self._chat_json(msgs, grammar, s)
        if choice.mode != "none":
            return self._chat_tools(msgs, tools, choice.mode, choice.name, s, parallel)
        ids = self.engine.tokenizer.encode(self._render(msgs))
        with self._lock:
            completions, bodies = self._generate([ids] * s.n, s)
            lps = self._reply_logprobs(ids, bodies, s)
        usage = Usage(len(ids), sum(len(c.tokens) for c in completions))
        return [ChatResult(c.text, c.finish_reason, usage, (), lp)
                for c, lp in zip(completions, lps, strict=True)]

    def _reply_logprobs(self, ids: list[int], bodies: list[list[int]], s: _Sampling):
        lps = [None] * len(bodies)
        if s.logprobs:
            nonempty = [i for i, b in enumerate(bodies) if b]
            if nonempty:
                got = self._token_logprobs(
                    [ids + bodies[i] for i in nonempty],
                    [(len(ids), len(ids) + len(bodies[i])) for i in nonempty], s.top_logprobs)
                for i, row in zip(nonempty, got, strict=True):
                    lps[i] = row
            lps = [() if x is None else x for x in lps]
        return lps

    def _decode_grammar(self, ids: list[int], masks: TokenMasks, s: _Sampling):
        """``n`` replies to the prompt ``ids`` decoded under ``masks``' grammar.

        What every reply begins with (``<tool_call>\n{"name": "...`` for a forced call,
        ``{"key": "`` for a schema) is put in the prompt rather than decoded token by
        token. Returns the completions, each row's final grammar state, the forced text,
        and the prompt with it. The caller holds the lock.
        """
        tok, grammar = self.engine.tokenizer, masks.grammar
        forced, start = grammar.forced(grammar.start)
        forced_text = forced.decode()
        if forced:
            ids = ids + tok.encode(forced_text, special=False)
        self._check_fits(ids, s.max_tokens)
        states = [start] * s.n

        def allowed(row, generated):
            if generated:
                states[row] = masks.advance(states[row], generated[-1])
            return None if grammar.is_final(states[row]) else masks.allowed(states[row])

        completions = self.engine.generate_masked(
            [ids] * s.n, s.max_tokens, allowed, temperature=s.temperature, top_p=s.top_p,
            key=_sampling_key(s.seed, s.temperature))
        return completions, states, forced_text, ids

    def _body(self, c) -> list[int]:
        return c.tokens[:-1] if c.tokens and c.tokens[-1] in self.engine.stop_ids else c.tokens

    def _chat_json(self, msgs, grammar: Grammar, s: _Sampling) -> list[ChatResult]:
        """Replies decoded under a JSON grammar (``response_format``)."""
        with self._lock:
            ids = self.engine.tokenizer.encode(self._render(msgs))
            completions, states, forced_text, ids = self._decode_grammar(
                ids, self._grammar_masks(grammar), s)
            bodies = [self._body(c) for c in completions]
            lps = self._reply_logprobs(ids, bodies, s)
        usage = Usage(len(ids), sum(len(c.tokens) for c in completions))
        out = []
        for c, state, lp in zip(completions, states, lps, strict=True):
            # A reply is whole when the grammar accepts it (an end-of-turn token is only
            # allowed there, and a final state stops the row); otherwise max_tokens cut it.
            reason = "stop" if grammar.accept[state] else "length"
            out.append(ChatResult(forced_text + c.text, reason, usage, (), lp))
        return out

    def _chat_tools(self, msgs, tools: tuple[Tool, ...], mode: str, name: str | None,
                    s: _Sampling, parallel: bool = False) -> list[ChatResult]:
        """Replies decoded under the tool-call grammar (``mode`` as in ``ToolChoice``)."""
        with self._lock:
            masks = self._masks(tools, mode, name, parallel)
            grammar = masks.grammar
            ids = self.engine.tokenizer.encode(self._render(msgs, tools))
            completions, states, forced_text, ids = self._decode_grammar(ids, masks, s)
            out, bodies = [], []
            for row, c in enumerate(completions):
                body = self._body(c)
                text, reason = c.text, c.finish_reason
                if grammar.free[states[row]]:  # free text: stop strings apply
                    cuts = [text.find(x) for x in s.stop if x in text]
                    if cuts:
                        text, reason = text[:min(cuts)], "stop"
                        body = self._reply_tokens(body, text)
                content, calls = parse_tool_calls(forced_text + text, tools,
                                                  id_seed=",".join(map(str, ids + c.tokens)))
                if calls and reason == "stop":
                    reason = "tool_calls"
                out.append((content, reason, calls))
                bodies.append(body)
            lps = self._reply_logprobs(ids, bodies, s)
        usage = Usage(len(ids), sum(len(c.tokens) for c in completions))
        return [ChatResult(content, reason, usage, calls, lp)
                for (content, reason, calls), lp in zip(out, lps, strict=True)]

    def score(self, messages, options: Sequence[str]) -> OptionScores:
        """``log p(option | conversation)`` for each option, exact (method ``"sequence"``).

        Args:
          messages: the conversation; each option continues its rendered chat prompt
            (``... <|im_start|>assistant\\n``), tokenized on its own.
          options: non-empty strings.

        Returns:
          :class:`OptionScores` ``(len(options),)``, :meth:`Engine.score` of the options
          after :meth:`prompt`.
        """
        prefix = self.prompt(messages)
        opts = _check_options(options)
        with self._lock:
            return OptionScores(self.engine.score(prefix, opts), "sequence")

    def stream(self, messages, *, temperature: float = 0.0, top_p: float = 1.0,
               max_tokens: int = 256, stop: str | Sequence[str] | None = None,
               seed: int | None = None, logprobs: bool = False,
               top_logprobs: int = 0) -> Iterator[ChatDelta]:
        """One reply to ``messages``, streamed as it is generated (:meth:`Engine.stream`).

        The same reply as ``chat(messages, ...)`` with ``n=1`` and no tools: the pieces'
        contents concatenate to its ``content`` (greedy, or sampled with the same seed),
        and the last piece has its ``finish_reason``. ``usage.completion_tokens`` counts
        the tokens generated; with a stop string that is up to the token completing it,
        where :meth:`chat` counts the whole decoded budget (its one-program loop only
        stops at a stop id).

        The lock is taken per token, not for the whole stream: other calls (and other
        streams) run between its tokens.

        Args:
          messages, temperature, top_p, max_tokens, stop, seed: as in :meth:`chat`.
          logprobs, top_logprobs: as in :meth:`chat`; each piece then carries the
            log-probabilities of the tokens it releases, computed in the decoding step
            itself (the same values as :meth:`chat`'s extra forward pass up to float
            rounding, ~1e-5).

        Returns:
          an iterator of :class:`ChatDelta` with non-empty content, then the last one
          (maybe empty) with ``finish_reason`` and ``usage``. The arguments are checked
          here; the model runs as the iterator is advanced.

        Raises:
          ValueError, TypeError: as in :meth:`chat`.
        """
        msgs = check_messages(messages)
        s = _check_sampling(temperature, top_p, max_tokens, stop, seed, 1, logprobs,
                            top_logprobs)
        return self._stream(self.engine.tokenizer.encode(self._render(msgs)), s)

    def stream_complete(self, prompt, *, max_tokens: int = 16, temperature: float = 0.0,
                        top_p: float = 1.0, stop: str | Sequence[str] | None = None,
                        seed: int | None = None, echo: bool = False) -> Iterator[ChatDelta]:
        """One plain-text completion (no chat template), streamed: :meth:`stream` for
        :meth:`complete`'s raw prompts (one prompt, ``n=1``, no log-probabilities).

        Args:
          prompt: a str or a list of token ids.
          max_tokens, temperature, top_p, stop, seed: as in :meth:`complete` (at least
            one token).
          echo: the first piece is the prompt's text (as :meth:`complete` echoes it).
        """
        prompts = self._prompts(prompt)
        if len(prompts) != 1:
            raise ValueError(f"prompt must be one prompt to stream, got {len(prompts)}")
        s = _check_sampling(temperature, top_p, max_tokens, stop, seed, 1, False, 0)
        (p,) = prompts
        ids = self.engine.tokenizer.encode(p) if isinstance(p, str) else p
        if not ids:
            raise ValueError("prompt must hold at least one token, got an empty prompt")
        if not isinstance(echo, bool | np.bool_):
            raise TypeError(f"echo must be a bool, got {type(echo).__name__}")
        return self._stream(ids, s, self.engine.tokenizer.decode(ids) if echo else "")

    def _stream(self, ids: list[int], s: _Sampling, head: str = "") -> Iterator[ChatDelta]:
        self._check_fits(ids, s.max_tokens)
        with self._lock:
            deltas = self.engine.stream(ids, s.max_tokens, temperature=s.temperature,
                                        top_p=s.top_p, key=_sampling_key(s.seed, s.temperature),
                                        stop=s.stop,
                                        top_logprobs=s.top_logprobs if s.logprobs else None)
        return self._stream_deltas(deltas, len(ids), head, s.logprobs)

    def _stream_deltas(self, deltas, prompt_tokens: int, head: str,
                       logprobs: bool = False) -> Iterator[ChatDelta]:
        if head:
            yield ChatDelta(head, logprobs=() if logprobs else None)
        n, pending = 0, []

        def release():
            if not logprobs:
                return None
            out = tuple(pending)
            pending.clear()
            return out

        while True:
            with self._lock:  # per token: a consumer may advance this from any thread
                d = next(deltas, None)
            if d is None:
                return
            n += 1
            if logprobs and d.token not in self.engine.stop_ids:
                pending.append(self._entry(d.token, d.logprob, [v for _, v in d.top],
                                           [i for i, _ in d.top], len(d.top)))
            if d.finish_reason is not None:
                if not d.text:  # held-back tokens that ended as a stop string
                    pending.clear()
                yield ChatDelta(d.text, d.finish_reason, Usage(prompt_tokens, n), release())
                return
            if d.text:
                yield ChatDelta(d.text, logprobs=release())

    # ------------------------------------------------------------- beyond the protocol

    def complete(self, prompt, *, max_tokens: int = 16, temperature: float = 0.0,
                 top_p: float = 1.0, stop: str | Sequence[str] | None = None,
                 seed: int | None = None, n: int = 1, logprobs: int | None = None,
                 echo: bool = False) -> list[TextCompletion]:
        """Continue raw text (no chat template): what ``/v1/completions`` serves.

        Args:
          prompt: a str, a list of token ids, or a list of either (several prompts).
          max_tokens: the most new tokens; 0 is allowed with ``echo=True`` (scoring only).
          temperature, top_p, stop, seed: as in :meth:`chat`.
          n: completions per prompt; the results are ordered prompt by prompt.
          logprobs: ``None``, or the number of alternatives in ``[0, 20]`` to return
            with each token's log-probability.
          echo: put the prompt before the generated text (and its tokens before the
            generated ones in ``logprobs``: the prompt log-probabilities).

        Returns:
          ``len(prompts) * n`` :class:`TextCompletion`.
        """
        tok = self.engine.tokenizer
        prompts = self._prompts(prompt)
        if not isinstance(echo, bool | np.bool_):
            raise TypeError(f"echo must be a bool, got {type(echo).__name__}")
        max_tokens = check_int("max_tokens", max_tokens, min=0)
        if max_tokens == 0 and not echo:
            raise ValueError("max_tokens must be >= 1 (0 only with echo=True: scoring the "
                             "prompt)")
        k = None if logprobs is None else check_int("logprobs", logprobs, min=0,
                                                    max=MAX_TOP_LOGPROBS)
        s = _check_sampling(temperature, top_p, max(max_tokens, 1), stop, seed, n, False, 0)
        ids = [tok.encode(p) if isinstance(p, str) else p for p in prompts]
        for i, x in enumerate(ids):
            if not x:
                raise ValueError(f"prompt[{i}] must hold at least one token, got an empty "
                                 "prompt")
        rows = [x for x in ids for _ in range(s.n)]
        with self._lock:
            if max_tokens:
                completions, bodies = self._generate(rows, s)
                texts = [c.text for c in completions]
                reasons = [c.finish_reason for c in completions]
                generated = sum(len(c.tokens) for c in completions)
            else:
                for i, x in enumerate(ids):
                    if len(x) > self.max_len:
                        raise ValueError(f"prompt[{i}] has {len(x)} tokens, more than the "
                                         f"model's context of {self.max_len}")
                bodies, texts, reasons = [[] for _ in rows], [""] * len(rows), \
                    ["length"] * len(rows)
                generated = 0
            lps = offsets = None
            if k is not None:
                start = [0 if echo else len(x) for x in rows]
                seqs = [x + b for x, b in zip(rows, bodies, strict=True)]
                use = [i for i, sq in enumerate(seqs) if len(sq) > start[i]]
                lps = [()] * len(rows)
                if use:
                    got = self._token_logprobs([seqs[i] for i in use],
                                               [(start[i], len(seqs[i])) for i in use], k)
                    for i, row in zip(use, got, strict=True):
                        lps[i] = row
                offsets = []
                for x, b in zip(rows, bodies, strict=True):
                    off = self._offsets(x) if echo else []
                    head = len(tok.decode(x)) if echo else 0
                    offsets.append(tuple(off + [head + o for o in self._offsets(b)]))
        usage = Usage(sum(len(x) for x in ids), generated)
        out = []
        for i, x in enumerate(rows):
            text = (tok.decode(x) if echo else "") + texts[i]
            out.append(TextCompletion(text, reasons[i], usage,
                                      None if lps is None else lps[i],
                                      None if offsets is None else offsets[i]))
        return out

    def _prompts(self, prompt) -> list[str | list[int]]:
        v = self.engine.model.config.vocab_size

        def ids(name, x):
            if any(isinstance(t, bool) or not isinstance(t, int | np.integer) for t in x):
                raise TypeError(f"{name} must be a str or a list of token ids")
            bad = [int(t) for t in x if not 0 <= t < v]
            if bad:
                raise ValueError(f"{name} ids must be in [0, {v}), got {bad[:5]}")
            return [int(t) for t in x]

        if isinstance(prompt, str):
            return [prompt]
        if not isinstance(prompt, Sequence) or not prompt:
            raise TypeError(f"prompt must be a str, a list of token ids, or a non-empty list "
                            f"of those, got {type(prompt).__name__} {prompt!r}"[:200])
        if all(isinstance(t, int | np.integer) and not isinstance(t, bool) for t in prompt):
            return [ids("prompt", prompt)]
        return [p if isinstance(p, str) else ids(f"prompt[{i}]", p)
                for i, p in enumerate(prompt)]

    def hidden_states(self, messages, layers: Sequence[int]) -> np.ndarray:
        """The residual stream of the rendered conversation after the given blocks.

        Returns:
          ``(len(layers), prompt tokens, d_model)`` float32 (:meth:`Engine.hidden_states`).
        """
        text = self.prompt(messages)
        with self._lock:
            return self.engine.hidden_states([self.engine.tokenizer.encode(text)], layers)[0]

    def __repr__(self) -> str:
        return f"LocalChat({self.model_id!r}, {self.engine!r})"


# ----------------------------------------------------------------- the HTTP backend


def _openai():
    try:
        import openai
    except ImportError as exc:
        raise ImportError(f"OpenAIChat needs the openai SDK: {_OPENAI_PIP}") from exc
    return openai


def _openai_tool_call(t, tools: tuple[Tool, ...]) -> ToolCall:
    fn = getattr(t, "function", None)
    if fn is None:  # a custom (non-function) tool call
        return ToolCall(t.id, "", None, str(t), f"not a function tool call: {t!r}"[:300])
    return make_tool_call(t.id, fn.name, fn.arguments, tools)


def _logsumexp(values: list[float]) -> float:
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


class OpenAIChat:
    """:class:`ChatModel` over an OpenAI-compatible ``/v1`` server, with the ``openai`` SDK.

    Args:
      base_url: the server's API root, e.g. ``"http://127.0.0.1:8000/v1"``.
      model: the model name to request; ``None``: the server's only model (read from
        ``/v1/models`` here, which fails if it serves several or cannot be reached).
      api_key: sent as the bearer token (local servers ignore it).
      chat_template: a function ``messages -> prompt text`` rendering the server model's
        chat template, for exact scoring; ``None``: ask the server (``/apply-template``).
      score_method: ``"auto"`` (exact where the server allows, else the first-token
        fallback), ``"sequence"`` (exact or an error) or ``"first_token"``.
      timeout: seconds per request.
      max_retries: the SDK's retries of failed connections and 5xx answers.
      client: an ``openai.OpenAI`` client to use instead of building one.

    Attributes:
      base_url, model_id, score_method: as resolved.

    Raises:
      ConnectionError: ``model=None`` and the server cannot be reached.
      ValueError: ``model=None`` and the server lists no model or several.

    Errors of later calls: ``ValueError`` when the server refuses a request (4xx, with
    its message), ``ConnectionError`` when it cannot be reached, ``RuntimeError`` for a
    server error.
    """

    supports_tools = True
    supports_hidden_states = False
    supports_seed = True

    def __init__(self, base_url: str, model: str | None = None, api_key: str = "none", *,
                 chat_template: Callable[[list[dict[str, str]]], str] | None = None,
                 score_method: str = "auto", timeout: float = 600.0, max_retries: int = 2,
                 client: Any = None):
        openai = _openai()
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if score_method not in ("auto", "sequence", "first_token"):
            raise ValueError(f"score_method must be 'auto', 'sequence' or 'first_token', got "
                             f"{score_method!r}")
        if chat_template is not None and not callable(chat_template):
            raise TypeError(f"chat_template must be a function of the messages, got "
                            f"{type(chat_template).__name__}")
        self.base_url = base_url.rstrip("/")
        self.score_method = score_method
        self._openai = openai
        self._client = client if client is not None else openai.OpenAI(
            base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self._template = chat_template
        self._server_template: bool | None = None  # /apply-template answered
        self._exact: bool | None = None  # prompt log-probabilities work
        self._echo_max_tokens = 0  # 1 once a server refused max_tokens=0
        if model is None:
            model = self._only_model()
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        self.model_id = model

    # ------------------------------------------------------------- requests

    def _call(self, fn, **kwargs):
        o = self._openai
        try:
            return fn(**kwargs)
        except o.APIConnectionError as exc:
            raise ConnectionError(f"cannot reach the server at {self.base_url}: {exc}") from exc
        except o.APIStatusError as exc:
            msg = f"the server at {self.base_url} answered {exc.status_code}: {exc.message}"
            if exc.status_code < 500:
                raise ValueError(msg) from exc
            raise RuntimeError(msg) from exc

    def _only_model(self) -> str:
        ids = [m.id for m in self._call(self._client.models.list)]
        if len(ids) != 1:
            raise ValueError(f"the server at {self.base_url} serves {len(ids)} models "
                             f"{ids[:10]}; pass model= to choose one")
        return ids[0]

    @property
    def supports_prompt_logprobs(self) -> bool:
        """Whether :meth:`score` is exact here (probed with one small request, once).

        On Python 3.11 ``isinstance(x, ChatModel)`` reads this property, and so probes.
        """
        if self._exact is None and self.score_method != "first_token":
            self._score_sequence([{"role": "user", "content": "Hi"}], ["Hello"],
                                 required=False)
        return bool(self._exact) and self.score_method != "first_token"

    # ------------------------------------------------------------- the protocol

    def chat(self, messages, *, tools=None, tool_choice=None, parallel_tool_calls=False,
             response_format=None, temperature: float = 0.0, top_p: float = 1.0,
             max_tokens: int = 256,
             stop: str | Sequence[str] | None = None, seed: int | None = None, n: int = 1,
             logprobs: bool = False, top_logprobs: int = 0) -> list[ChatResult]:
        """``n`` replies from the server's ``/v1/chat/completions`` (arguments as
        :meth:`LocalChat.chat`; the server applies its own chat template and sampler).

        ``tools`` go to the server as OpenAI ``tools`` and ``tool_choice`` as given
        (the server's own tool support decodes them); the reply's ``message.tool_calls``
        come back as :class:`~jaxsci.common.lm.tools.ToolCall` values, their arguments
        parsed and checked against the schema (a failure goes to the call's ``error``).
        ``response_format`` is checked here (the same shapes and schema subset as
        :meth:`LocalChat.chat`) and sent as given; the server's JSON mode decodes it.

        A server that returns fewer than ``n`` choices (some ignore ``n``) is asked
        again for the rest, with ``seed + 1``, ``seed + 2``, ... when a seed is given.
        """
        msgs = check_messages(messages)
        s = _check_sampling(temperature, top_p, max_tokens, stop, seed, n, logprobs,
                            top_logprobs)
        tools = as_tools(tools)
        choice = check_tool_choice(tool_choice, tools)
        parallel = check_parallel_tool_calls(parallel_tool_calls)
        json_mode = check_response_format(response_format) is not None
        results: list[ChatResult] = []
        prompt_tokens = completion_tokens = 0
        for attempt in range(s.n):
            want = s.n - len(results)
            if want == 0:
                break
            kwargs = dict(model=self.model_id, messages=msgs, temperature=s.temperature,
                          top_p=s.top_p, max_tokens=s.max_tokens, n=want)
            if s.stop:
                kwargs["stop"] = list(s.stop)
            if s.seed is not None:
                kwargs["seed"] = (s.seed + attempt) % 2**63
            if s.logprobs:
                kwargs.update(logprobs=True, top_logprobs=s.top_logprobs)
            if tools:
                kwargs["tools"] = [t.to_openai() for t in tools]
                if tool_choice is not None:
                    kwargs["tool_choice"] = choice.to_openai()
                # Sent always: OpenAI's default is True, the protocol's False.
                kwargs["parallel_tool_calls"] = parallel
            if json_mode:
                kwargs["response_format"] = dict(response_format)
            resp = self._call(self._client.chat.completions.create, **kwargs)
            if resp.usage is not None:
                prompt_tokens = resp.usage.prompt_tokens
                completion_tokens += resp.usage.completion_tokens
            choices = sorted(resp.choices, key=lambda c: c.index)[:want]
            if not choices:
                raise RuntimeError(f"the server at {self.base_url} returned no choice")
            for c in choices:
                lp = None
                if s.logprobs:
                    content = c.logprobs.content if c.logprobs is not None else None
                    lp = tuple(self._entry(t) for t in content or ())
                calls = tuple(_openai_tool_call(t, tools) for t in c.message.tool_calls or ())
                results.append(ChatResult(c.message.content or "", c.finish_reason or "stop",
                                          Usage(0, 0), calls, lp))
        usage = Usage(prompt_tokens, completion_tokens)
        return [r._replace(usage=usage) for r in results]

    @staticmethod
    def _entry(t) -> TokenLogprob:
        def raw(x):
            return tuple(x.bytes) if x.bytes is not None else tuple(x.token.encode())

        return TokenLogprob(t.token, t.logprob, raw(t),
                            tuple(TopLogprob(a.token, a.logprob, raw(a))
                                  for a in (t.top_logprobs or ())))

    def score(self, messages, options: Sequence[str]) -> OptionScores:
        """``log p(option | conversation)`` per option; see the module docstring for the
        exact method (``"sequence"``) and the first-token fallback (``"first_token"``).

        Returns:
          :class:`OptionScores` whose ``method`` names the method used.
        """
        msgs = check_messages(messages)
        opts = _check_options(options)
        if self.score_method != "first_token":
            got = self._score_sequence(msgs, opts, required=self.score_method == "sequence")
            if got is not None:
                return OptionScores(got, "sequence")
        return OptionScores(self._score_first_token(msgs, opts), "first_token")

    # ------------------------------------------------------------- scoring

    def _render(self, msgs) -> str | None:
        if self._template is not None:
            return self._template(msgs)
        if self._server_template is False:
            return None
        root = self.base_url.removesuffix("/v1")
        try:
            got = self._call(self._client.post, path=f"{root}/apply-template",
                             body={"messages": msgs}, cast_to=object)
        except ValueError:  # 404: the server has no such extension
            self._server_template = False
            return None
        prompt = got.get("prompt") if isinstance(got, Mapping) else None
        self._server_template = isinstance(prompt, str)
        return prompt if self._server_template else None

    def _score_sequence(self, msgs, opts, *, required: bool) -> list[float] | None:
        def unavailable(why, permanent=True):
            if permanent:  # the server lacks a feature, so do not ask again
                self._exact = False
            if required:
                raise ValueError(f"score_method='sequence' is not available at "
                                 f"{self.base_url}: {why}")
            return None

        if self._exact is False:
            return unavailable("an earlier request found no prompt log-probabilities")
        prefix = self._render(msgs)
        if prefix is None:
            return unavailable("the server has no /apply-template endpoint; pass "
                               "chat_template= (a function rendering the model's template)")
        prompts = [prefix + o for o in opts]
        resp = None
        for max_tokens in dict.fromkeys((self._echo_max_tokens, 1)):
            try:
                resp = self._call(self._client.completions.create, model=self.model_id,
                                  prompt=prompts, max_tokens=max_tokens, echo=True,
                                  logprobs=1, temperature=0.0)
                self._echo_max_tokens = max_tokens
                break
            except ValueError as exc:
                last = exc
        if resp is None:
            # A 404 is for good; a 400 may be this request's alone (too long for the context).
            missing = getattr(last.__cause__, "status_code", None) == 404
            return unavailable(f"/v1/completions with echo refused ({last})", permanent=missing)
        choices = sorted(resp.choices, key=lambda c: c.index)
        if len(choices) != len(opts):
            return unavailable(f"{len(choices)} choices came back for {len(opts)} prompts")
        out = []
        for o, c in zip(opts, choices, strict=True):
            lp = c.logprobs
            if lp is None or not lp.text_offset or not lp.token_logprobs or \
                    not (c.text or "").startswith(prefix + o):
                return unavailable("the server does not return prompt log-probabilities "
                                   "(echo=True with logprobs)")
            lo, hi = len(prefix), len(prefix) + len(o)
            picked = [v for off, v in zip(lp.text_offset, lp.token_logprobs, strict=False)
                      if lo <= off < hi]
            if not picked or any(v is None for v in picked):
                return unavailable("the prompt log-probabilities do not cover the options")
            out.append(float(sum(picked)))
        self._exact = True
        return out

    def _score_first_token(self, msgs, opts) -> list[float]:
        resp = self._call(self._client.chat.completions.create, model=self.model_id,
                          messages=msgs, max_tokens=1, temperature=0.0, logprobs=True,
                          top_logprobs=MAX_TOP_LOGPROBS, n=1)
        c = resp.choices[0] if resp.choices else None
        content = c.logprobs.content if c is not None and c.logprobs is not None else None
        if not content:
            raise ValueError(f"the server at {self.base_url} returned no logprobs; it cannot "
                             "score options")
        first = content[0]
        entries = {(a.token, tuple(a.bytes or ())): a.logprob
                   for a in [*first.top_logprobs, first]}
        texts = [((bytes(b).decode("utf-8", "replace") if b else t).lstrip(), v)
                 for (t, b), v in entries.items()]
        out = []
        for o in opts:
            target = o.lstrip()
            out.append(_logsumexp([v for t, v in texts if t and target.startswith(t)]))
        return out

    def __repr__(self) -> str:
        return f"OpenAIChat({self.base_url!r}, {self.model_id!r})"


# ----------------------------------------------------------------- specs


def _is_chat_model(x) -> bool:
    # Looked up on the class: isinstance(x, ChatModel) would evaluate OpenAIChat's
    # probing property on Python 3.11.
    return not isinstance(x, str) and all(
        callable(getattr(type(x), name, None)) for name in ("chat", "score"))


def parse_model_spec(spec: str) -> tuple[str, str]:
    """The kind of a model spec, checked without loading anything.

    Args:
      spec: ``"smollm2"``, a path ending in ``.gguf``, or an OpenAI-compatible server's
        URL (``http://`` or ``https://``, e.g. ``"http://127.0.0.1:8000/v1"``).

    Returns:
      ``("smollm2", "smollm2")``, ``("gguf", path)`` or ``("http", url)``.

    Raises:
      ValueError: none of these.
    """
    if not isinstance(spec, str):
        raise TypeError(f"model spec must be a str, got {type(spec).__name__}")
    if spec.lower() == "smollm2":
        return "smollm2", "smollm2"
    if spec.startswith(("http://", "https://")):
        if len(spec.split("://", 1)[1].strip("/")) == 0:
            raise ValueError(f"model spec {spec!r} has no host")
        return "http", spec
    if spec.endswith(".gguf"):
        return "gguf", spec
    raise ValueError(f"model spec must be 'smollm2', a path to a .gguf file, or an "
                     f"OpenAI-compatible server's URL such as 'http://127.0.0.1:8000/v1', "
                     f"got {spec!r}")


def open_chat_model(spec, *, model: str | None = None, api_key: str | None = None,
                    cache=None, cache_mode: str = "read-write", trace=None) -> ChatModel:
    """A :class:`ChatModel` from a spec (:func:`parse_model_spec`), an engine or a model.

    Args:
      spec: ``"smollm2"`` (:meth:`Engine.smollm2`, in-process, ``model_id="smollm2"``), a
        ``.gguf`` path (:meth:`Engine.from_gguf`, named after the file), a server URL
        (:class:`OpenAIChat`), an :class:`Engine` (wrapped in :class:`LocalChat`), or a
        :class:`ChatModel` (returned as is).
      model: for a URL, the model to request (default: the server's only one).
      api_key: for a URL (default: ``$OPENAI_API_KEY``, else ``"none"``).
      cache: a call-cache file: the model comes wrapped in a
        :class:`~jaxsci.common.lm.callcache.CachedChat` with ``cache_mode``.
      cache_mode: ``"read-write"``, ``"replay"`` (needs ``cache``) or ``"off"``.
      trace: a JSONL file tracing every call (with or without ``cache``).

    Raises:
      ValueError: an unknown spec or cache mode; FileNotFoundError: a missing model file
      or wheel; ConnectionError: an unreachable server.
    """
    if cache is not None or trace is not None or cache_mode != "read-write":
        from jaxsci.common.lm.callcache import MODES, CachedChat

        if cache_mode not in MODES:
            raise ValueError(f"cache_mode must be one of {list(MODES)}, got {cache_mode!r}")
        if cache is None and cache_mode == "replay":
            raise ValueError("cache_mode='replay' needs cache= (the call cache's path)")
        inner = open_chat_model(spec, model=model, api_key=api_key)
        if cache is None and trace is None:
            return inner
        return CachedChat(inner, cache, mode=cache_mode if cache is not None else "off",
                          trace=trace)
    if isinstance(spec, Engine):
        return LocalChat(spec)
    if _is_chat_model(spec):
        return spec
    kind, value = parse_model_spec(spec)
    if kind == "smollm2":
        return LocalChat(Engine.smollm2(), model_id="smollm2")
    if kind == "gguf":
        if not Path(value).is_file():
            raise FileNotFoundError(f"model spec {value!r}: no such .gguf file")
        return LocalChat(Engine.from_gguf(value), model_id=Path(value).stem)
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "none")
    return OpenAIChat(value, model, key)

