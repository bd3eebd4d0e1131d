r"""A record/replay cache of chat-model calls (SQLite), and JSONL traces of every call.

:class:`CachedChat` wraps any :class:`~jaxsci.common.lm.chat.ChatModel` and is one
itself, so an agent experiment runs unchanged on the wrapped model. Each ``chat`` and
``score`` call gets a **key**, the sha256 of a canonical JSON of

* the call kind (``"chat"`` or ``"score"``), the model's ``model_id`` and its
  **fingerprint** (:func:`model_fingerprint`: a hash of the weights, tokenizer and stop
  ids of an in-process :class:`~jaxsci.common.lm.chat.LocalChat`; the URL and model name
  of an :class:`~jaxsci.common.lm.chat.OpenAIChat`),
* the conversation as :func:`~jaxsci.common.lm.chat.check_messages` normalises it,
* every argument of the call with the wrapped model's defaults filled in: for ``chat``
  ``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``, ``n``, ``logprobs``,
  ``top_logprobs`` and whatever else its signature takes (``tools``, ``tool_choice``);
  for ``score`` the options.

``stream`` (:meth:`CachedChat.stream`, for a model that has one, as
:class:`~jaxsci.common.lm.chat.LocalChat`) is cached the same way under its own kind
``"stream"``: a hit replays the stored pieces. Other model calls beyond the protocol
(``complete``, ``stream_complete``) are not forwarded by the wrapper.

Modes:

* ``"read-write"``: a hit is served from the database without calling the model; a miss
  calls it and stores the result.
* ``"replay"``: a hit is served; a miss raises :class:`CacheMiss` (naming the key and the
  conversation) instead of calling the model, so a rerun provably makes no model call.
* ``"off"``: every call goes to the model; the database is never opened (only the trace
  is written).

**Only deterministic calls are cached**: greedy ones (``temperature == 0``) and sampled
ones with an explicit ``seed``; ``score`` always. A sampled call without a seed is meant
to differ from one call to the next, so it passes through to the model (in every mode,
replay included) and is traced as ``cache: "bypass"``. A cached reply is what the model
gave once; a server's greedy decoding is not always bitwise reproducible (batching), and
the cache then pins the first answer, which is the point of a replay.

Results round-trip exactly: :class:`~jaxsci.common.lm.chat.ChatResult` and every
NamedTuple inside it (``Usage``, ``TokenLogprob``, fields added later) are stored by
type and field, floats by their shortest exact repr (non-finite ones tagged), tuples
apart from lists, :class:`~jaxsci.common.lm.chat.OptionScores` with its ``method``.

The database is one SQLite table ``calls(key, fingerprint, request, response, created,
hits)`` in WAL mode with a busy timeout, so several threads (one connection behind a
lock) and several processes can share one file; two concurrent misses of one key both
call the model and the first stored result is kept.

**Traces.** With ``trace=path`` every call (hit, miss, bypass, off; failed calls too,
with their ``error``) appends one JSON line: ``time``, ``kind``, ``model_id``,
``fingerprint``, ``key``, ``cache``, ``latency_s``, ``prompt_tokens`` and
``completion_tokens`` (from the result's ``usage``; ``None`` for ``score``), the full
``messages``, the call's ``params``, and the ``replies`` (content, finish reason, tool
calls) or the ``scores``. Nothing is truncated: it is a research trace.
:func:`read_trace` reads one back and :func:`summarize_trace` counts it.

>>> import tempfile, pathlib
>>> from jaxsci.common.lm.chat import ChatResult, Usage
>>> class Echo:  # any object with chat and score is a ChatModel
...     model_id, supports_tools, supports_prompt_logprobs = "echo", False, False
...     supports_hidden_states, supports_seed = False, True
...     def chat(self, messages, *, temperature=0.0, seed=None, max_tokens=16):
...         return [ChatResult(messages[-1]["content"], "stop", Usage(3, 2))]
...     def score(self, messages, options):
...         return [0.0] * len(options)
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with CachedChat(Echo(), d / "calls.db", trace=d / "trace.jsonl",
...                 fingerprint="echo-v1") as chat:
...     first = chat.chat([{"role": "user", "content": "Hi"}])
...     again = chat.chat([{"role": "user", "content": "Hi"}])
>>> first == again, [r["cache"] for r in read_trace(d / "trace.jsonl")]
(True, ['miss', 'hit'])
>>> summarize_trace(d / "trace.jsonl").hits
1
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import importlib
import inspect
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from jaxsci.common.lm.chat import (
    ChatDelta,
    ChatResult,
    LocalChat,
    OpenAIChat,
    OptionScores,
    check_messages,
)
from jaxsci.common.lm.engine import Engine

__all__ = [
    "MODES",
    "CachedChat",
    "CacheMiss",
    "TraceSummary",
    "model_fingerprint",
    "read_trace",
    "summarize_trace",
]

MODES = ("read-write", "replay", "off")
# Model calls of LocalChat beyond the protocol that the wrapper does not cache: not
# forwarded, so that no call slips past the cache (a replay must make no model call).
_UNCACHED = frozenset({"complete", "stream_complete"})
SCHEMA_VERSION = 1
_SCHEMA = """CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0
)"""


def _deterministic(params: dict) -> bool:
    """Whether a call with these arguments is cached: greedy, or sampled with a seed."""
    try:
        temperature = float(params.get("temperature", 0.0))
    except (TypeError, ValueError):
        temperature = math.nan  # not a number: the model will say so
    return temperature == 0.0 or params.get("seed") is not None


class CacheMiss(LookupError):
    """A call that replay mode found no stored result for.

    Attributes:
      key: the call's cache key.
      kind: ``"chat"`` or ``"score"``.
    """

    def __init__(self, key: str, kind: str, messages: list[dict[str, str]], path: Path):
        self.key, self.kind = key, kind
        last = messages[-1]["content"] if messages else ""
        preview = last if len(last) <= 80 else last[:77] + "..."
        super().__init__(f"replay mode: no cached {kind} result for key {key} in {path} "
                         f"({len(messages)} messages, the last: {preview!r}); rerun with "
                         f"mode='read-write' to record it")


# ----------------------------------------------------------------- JSON, exactly


def _tagged_float(x: float):
    # JSON has no inf/nan; tagged, the stored text stays strict JSON that any reader takes.
    return x if math.isfinite(x) else {"__float__": repr(x)}


def _to_json(x, *, exact: bool):
    """A JSON-able value of ``x``.

    ``exact=True`` (stored results) keeps what equality needs: NamedTuple types, tuples
    apart from lists, arrays with their dtype. ``exact=False`` (keys, traces) keeps only
    what a request means: tuples and lists are both lists, an integral float is an int
    (so ``temperature=0`` and ``0.0`` share a key), a NamedTuple its fields, another
    object with ``to_openai()`` (a tool) its OpenAI form, a dataclass its fields, a
    function its name.
    """
    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        x = float(x)
        if not exact and x.is_integer() and abs(x) < 2**53:
            return int(x)
        return _tagged_float(x)
    if isinstance(x, OptionScores):
        return {"__scores__": [_tagged_float(float(v)) for v in x.tolist()],
                "method": x.method}
    if isinstance(x, np.ndarray):
        values = _to_json(x.tolist(), exact=exact)
        return {"__array__": values, "dtype": x.dtype.str} if exact else values
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):  # a NamedTuple
        fields = {f: _to_json(v, exact=exact) for f, v in zip(x._fields, x, strict=True)}
        if not exact:
            return fields
        t = type(x)
        name = f"{t.__module__}:{t.__qualname__}"
        try:
            found = _namedtuple_type(name)
        except (ImportError, ValueError):
            found = None
        if found is not t:  # a hit could not rebuild it: refuse now, not at the hit
            raise TypeError(f"the call cache stores NamedTuples by import path, and "
                            f"{name} cannot be imported by it (define it at module level)")
        return {"__namedtuple__": name, "fields": fields}
    if not exact and callable(getattr(x, "to_openai", None)):
        # A Tool means what the server is sent: its OpenAI form (so a Tool and its OpenAI
        # dict share a key, and the tool's Python function is no part of it).
        return _to_json(x.to_openai(), exact=False)
    if not exact and dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _to_json(getattr(x, f.name), exact=False)
                for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        out = {}
        for k, v in x.items():
            if not isinstance(k, str):
                raise TypeError(f"cannot store a dict with a {type(k).__name__} key {k!r}; "
                                "the call cache takes str keys only")
            out[k] = _to_json(v, exact=exact)
        return out
    if isinstance(x, tuple):
        items = [_to_json(v, exact=exact) for v in x]
        return {"__tuple__": items} if exact else items
    if isinstance(x, list):
        return [_to_json(v, exact=exact) for v in x]
    if not exact and callable(x):  # a tool's function: named, not hashed
        return f"{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', repr(x))}"
    raise TypeError(f"the call cache cannot store a {type(x).__module__}."
                    f"{type(x).__qualname__} ({x!r})"[:300])


@functools.cache
def _namedtuple_type(name: str):
    module, _, qualname = name.partition(":")
    t = importlib.import_module(module)
    for part in qualname.split("."):
        t = getattr(t, part, None)
    if not (isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")):
        raise ValueError(f"cached record names the type {name!r}, which is not a NamedTuple "
                         "(the cache was written by another jaxsci version?)")
    return t


def _from_json(x):
    """The inverse of ``_to_json(..., exact=True)``."""
    if isinstance(x, list):
        return [_from_json(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "__float__" in x:
        return float(x["__float__"])
    if "__tuple__" in x:
        return tuple(_from_json(v) for v in x["__tuple__"])
    if "__namedtuple__" in x:
        t = _namedtuple_type(x["__namedtuple__"])
        return t(**{f: _from_json(v) for f, v in x["fields"].items() if f in t._fields})
    if "__scores__" in x:
        return OptionScores([_from_json(v) for v in x["__scores__"]], x["method"])
    if "__array__" in x:
        return np.asarray(_from_json(x["__array__"]), np.dtype(x["dtype"]))
    return {k: _from_json(v) for k, v in x.items()}


def _dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


# ----------------------------------------------------------------- fingerprints


def _hash_local(model: LocalChat) -> str:
    engine = model.engine
    h = hashlib.sha256()

    def add(*parts):
        for p in parts:
            h.update(p if isinstance(p, np.ndarray) else str(p).encode())  # arrays: bytes
            h.update(b"\0")

    add("LocalChat", repr(engine.model.config), engine.stop_ids)
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(engine.model)):
        a = np.ascontiguousarray(np.asarray(leaf))
        # As raw bytes: bfloat16 (ml_dtypes) arrays export no buffer of their own.
        add(jax.tree_util.keystr(path), a.dtype.str, a.shape, a.reshape(-1).view(np.uint8))
    tok = engine.tokenizer
    add(_dumps(tok.tokens), _dumps(list(tok.merges)), sorted(tok.special_ids),
        sorted(tok.control_ids), tok.bos_id, tok.eos_id, tok.default_system)
    return "local:sha256:" + h.hexdigest()


def model_fingerprint(model) -> str:
    """A string that changes whenever the model (hence its answers) may.

    Args:
      model: a :class:`~jaxsci.common.lm.chat.LocalChat` (the sha256 of its parameter
        arrays' bytes, shapes, dtypes and paths, its config, its tokenizer's vocabulary,
        merges and special ids, and the engine's stop ids: about a second for
        SmolLM2's 540 MB of float32 weights), an
        :class:`~jaxsci.common.lm.chat.OpenAIChat` (``"openai:" + base_url + "|" +
        model_id``: a server cannot give a hash of its weights, so a model redeployed
        under the same name and URL keeps its fingerprint, and its old cached replies),
        or a :class:`CachedChat` (its wrapped model's).

    Returns:
      the fingerprint.

    Raises:
      TypeError: another kind of model; give :class:`CachedChat` an explicit
        ``fingerprint=``.
    """
    if isinstance(model, CachedChat):
        return model.fingerprint
    if isinstance(model, LocalChat):
        return _hash_local(model)
    if isinstance(model, OpenAIChat):
        return f"openai:{model.base_url}|{model.model_id}"
    raise TypeError(f"cannot fingerprint a {type(model).__name__}: pass fingerprint= to "
                    f"CachedChat (a str that changes whenever the model's weights or "
                    f"behaviour do)")


# ----------------------------------------------------------------- the cache


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _check_path(name: str, path) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a str or os.PathLike path, got "
                        f"{type(path).__name__} {path!r}"[:200])
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{name}={str(p)!r} is a directory; give a file path")
    return p


class CachedChat:
    """A :class:`~jaxsci.common.lm.chat.ChatModel` that records and replays another one.

    See the module docstring for keys, modes and traces. ``model_id`` and the capability
    flags are the wrapped model's; any other attribute (``prompt``, ``complete``,
    ``hidden_states``, ``engine``, ``base_url``, ...) is read from the wrapped model and
    is neither cached nor traced.

    Args:
      model: the model to wrap (anything with ``chat`` and ``score``).
      path: the SQLite file (created, with its folder, in ``"read-write"`` mode; it must
        exist in ``"replay"`` mode); ignored, and may be ``None``, in ``"off"`` mode.
      mode: ``"read-write"``, ``"replay"`` or ``"off"``.
      trace: a JSONL file to append one line per call to, or ``None``.
      fingerprint: the model's fingerprint; default :func:`model_fingerprint`, computed
        on the first call that needs a key (hashing the weights once). Not needed in
        ``"off"`` mode.

    Attributes:
      model, path, mode, trace: as given (``path`` and ``trace`` as :class:`~pathlib.Path`).

    Raises:
      ValueError: an unknown mode, or a file that is not a call cache.
      TypeError: ``model`` without ``chat``/``score``, a path that is not a path, or a
        model :func:`model_fingerprint` cannot fingerprint and no ``fingerprint=``.
      FileNotFoundError: replay mode and no such database.
      IsADirectoryError: ``path`` or ``trace`` is a folder.
    """

    def __init__(self, model, path, *, mode: str = "read-write", trace=None,
                 fingerprint: str | None = None):
        if isinstance(model, Engine):
            raise TypeError("model must be a ChatModel, got an Engine: wrap it in "
                            "LocalChat(engine)")
        if not (callable(getattr(model, "chat", None)) and callable(getattr(model, "score",
                                                                              None))):
            raise TypeError(f"model must be a ChatModel (with chat and score methods), got "
                            f"{type(model).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        if fingerprint is not None and (not isinstance(fingerprint, str) or not fingerprint):
            raise ValueError(f"fingerprint must be a non-empty str, got {fingerprint!r}")
        if fingerprint is None and mode != "off" and not isinstance(
                model, CachedChat | LocalChat | OpenAIChat):
            model_fingerprint(model)  # raises its error now, not at the first call
        self.model, self.mode = model, mode
        self._fingerprint = fingerprint
        self.trace = None if trace is None else _check_path("trace", trace)
        self._lock = threading.Lock()  # the connection and the trace file
        self._fingerprint_lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if mode == "off":
            self.path = None if path is None else Path(path)
            return
        self.path = _check_path("path", path)
        if mode == "replay" and not self.path.is_file():
            raise FileNotFoundError(f"mode='replay' needs an existing call cache, and "
                                    f"path={str(self.path)!r} does not exist")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        where = f"path={str(self.path)!r}"
        # One connection behind self._lock serves every thread; autocommit, so no
        # transaction stays open across a model call.
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 60000")
            db.execute("PRAGMA journal_mode = WAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise ValueError(f"{where} is a call cache of schema version {version}, "
                                 f"this jaxsci reads {SCHEMA_VERSION}")
            db.execute(_SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            cols = [r[1] for r in db.execute("PRAGMA table_info(calls)")]
            want = ["key", "fingerprint", "request", "response", "created", "hits"]
            if cols != want:
                raise ValueError(f"{where} has a table 'calls' with columns {cols}, not a "
                                 f"call cache's {want}")
        except sqlite3.DatabaseError as exc:
            db.close()
            raise ValueError(f"{where} is not a call cache (an SQLite database): "
                             f"{exc}") from exc
        except BaseException:
            db.close()
            raise
        return db

    # ------------------------------------------------------------- the protocol

    @property
    def fingerprint(self) -> str:
        """The wrapped model's fingerprint (computed once, on first use)."""
        with self._fingerprint_lock:  # two threads must not hash 500 MB twice
            if self._fingerprint is None:
                self._fingerprint = model_fingerprint(self.model)
        return self._fingerprint

    def chat(self, messages, **kwargs):
        """The wrapped model's ``chat``, through the cache (same arguments and result).

        Raises:
          CacheMiss: replay mode and no stored result.
          TypeError: an argument the wrapped model's ``chat`` does not take; otherwise
            whatever the wrapped model raises.
        """
        params = self._params(kwargs)
        return self._call("chat", messages, params, _deterministic(params),
                          lambda: self.model.chat(messages, **kwargs))

    def stream(self, messages, **kwargs) -> Iterator[ChatDelta]:
        """The wrapped model's ``stream`` (one reply, token by token), through the cache.

        The key is of kind ``"stream"`` (a stream's pieces and its ``usage`` are not a
        ``chat`` result's, so the two never share an entry). A hit yields the stored
        pieces, exactly as the model streamed them, without a model call; a miss streams
        the model's pieces as they come and stores them once the stream has ended (a
        stream abandoned half-way stores nothing). Replay mode raises :class:`CacheMiss`
        at the call, before any piece. The arguments are checked at the call (as
        :meth:`LocalChat.stream` does); the trace line is written when the stream ends.

        Raises:
          AttributeError: the wrapped model has no ``stream``.
          CacheMiss: replay mode and no stored result.
          TypeError: an argument the wrapped model's ``stream`` does not take.
        """
        model_stream = getattr(self.model, "stream", None)
        if model_stream is None:
            raise AttributeError(f"{type(self.model).__name__} has no stream; use chat")
        params = self._params(kwargs, model_stream)
        deterministic = _deterministic(params)
        start = time.perf_counter()
        msgs = check_messages(messages)
        key = request = status = stored = None
        try:
            key, request, status, stored = self._resolve("stream", msgs, params,
                                                         deterministic)
            if status == "miss" and self.mode == "replay":
                raise CacheMiss(key, "stream", msgs, self.path)
            live = None if stored is not None else model_stream(messages, **kwargs)
        except BaseException as exc:
            if self.trace is not None:
                self._trace("stream", msgs, params, key, status,
                            time.perf_counter() - start, None, f"{type(exc).__name__}: {exc}")
            raise
        return self._stream_pieces(msgs, params, key, request, status, start, stored, live)

    def _stream_pieces(self, msgs, params, key, request, status, start, stored, live):
        pieces, error = [], None
        try:
            for d in (stored if stored is not None else live):
                pieces.append(d)
                yield d
            if status == "miss":
                self._store(key, request, tuple(pieces))
        except GeneratorExit:
            error = "GeneratorExit: the stream was closed before its end (not stored)"
            raise
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if self.trace is not None:
                last = pieces[-1] if pieces else None
                reply = ChatResult("".join(d.content for d in pieces),
                                   getattr(last, "finish_reason", None),
                                   getattr(last, "usage", None))
                self._trace("stream", msgs, params, key, status,
                            time.perf_counter() - start, [reply], error)

    def score(self, messages, options):
        """The wrapped model's ``score``, through the cache (always deterministic).

        Raises:
          CacheMiss: replay mode and no stored result.
        """
        params = {"options": _to_json(options, exact=False)}
        return self._call("score", messages, params, True,
                          lambda: self.model.score(messages, options))

    # ------------------------------------------------------------- machinery

    def _params(self, kwargs: dict, fn=None) -> dict:
        """The call's arguments with the wrapped model's defaults (of ``fn``, its ``chat``
        unless given), as a key sees them."""
        try:
            sig = inspect.signature(self.model.chat if fn is None else fn)
        except (TypeError, ValueError):  # no signature to read: the arguments as given
            return _to_json(kwargs, exact=False)
        bound = sig.bind_partial(None, **kwargs)  # TypeError names an unknown argument
        bound.apply_defaults()
        params = dict(bound.arguments)
        del params[next(iter(sig.parameters))]  # the messages
        for name, p in sig.parameters.items():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                params.update(params.pop(name, {}))
        stop = params.get("stop")
        if isinstance(stop, str):
            params["stop"] = [stop]
        return _to_json(params, exact=False)

    def _key(self, kind: str, messages: list[dict], params: dict) -> tuple[str, str]:
        request = _dumps({"kind": kind, "model_id": self.model_id,
                          "fingerprint": self.fingerprint, "messages": messages,
                          "params": params})
        return hashlib.sha256(request.encode()).hexdigest(), request

    def _open_db(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError(f"the call cache {str(self.path)!r} is closed")
        return self._db

    def _lookup(self, key: str):
        with self._lock:
            db = self._open_db()
            row = db.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
            if row is not None:
                db.execute("UPDATE calls SET hits = hits + 1 WHERE key = ?", (key,))
        return None if row is None else _from_json(json.loads(row[0]))

    def _store(self, key: str, request: str, result) -> None:
        response = _dumps(_to_json(result, exact=True))
        with self._lock:
            self._open_db().execute(
                "INSERT OR IGNORE INTO calls (key, fingerprint, request, response, created, "
                "hits) VALUES (?, ?, ?, ?, ?, 0)",
                (key, self.fingerprint, request, response, time.time()))

    def _resolve(self, kind, msgs, params, deterministic):
        """``(key, request, status, stored)`` of a call: its key and cache status, and the
        stored result of a hit (``None`` otherwise)."""
        if self.mode == "off":
            return None, None, "off", None
        key, request = self._key(kind, msgs, params)
        if not deterministic:
            return key, request, "bypass", None
        stored = self._lookup(key)
        return key, request, ("hit" if stored is not None else "miss"), stored

    def _call(self, kind, messages, params, deterministic, call):
        start = time.perf_counter()
        msgs = check_messages(messages)
        key = request = status = result = error = None
        try:
            key, request, status, result = self._resolve(kind, msgs, params, deterministic)
            if status == "miss" and self.mode == "replay":
                raise CacheMiss(key, kind, msgs, self.path)
            if result is None:
                result = call()
                if status == "miss":
                    self._store(key, request, result)
            return result
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if self.trace is not None:
                self._trace(kind, msgs, params, key, status, time.perf_counter() - start,
                            result, error)

    def _trace(self, kind, msgs, params, key, status, latency, result, error) -> None:
        record = {"time": _now(), "kind": kind, "model_id": self.model_id,
                  "fingerprint": self._fingerprint, "key": key, "cache": status,
                  "latency_s": latency, "prompt_tokens": None, "completion_tokens": None,
                  "messages": msgs, "params": params}
        if kind in ("chat", "stream") and result is not None:
            usage = getattr(result[0], "usage", None) if result else None
            if usage is not None:
                record["prompt_tokens"] = usage.prompt_tokens
                record["completion_tokens"] = usage.completion_tokens
            record["replies"] = [
                {"content": r.content, "finish_reason": r.finish_reason,
                 "tool_calls": _to_json(getattr(r, "tool_calls", ()), exact=False)}
                for r in result]
        elif kind == "score" and result is not None:
            record["scores"] = [_tagged_float(float(v)) for v in np.ravel(result)]
            record["method"] = getattr(result, "method", None)
        if error is not None:
            record["error"] = error
        line = _dumps(record) + "\n"
        with self._lock:
            self.trace.parent.mkdir(parents=True, exist_ok=True)
            with open(self.trace, "a", encoding="utf-8") as f:
                f.write(line)  # one write per line: appends from processes stay whole

    # ------------------------------------------------------------- the rest

    def stats(self) -> dict[str, int]:
        """``{"entries", "hits"}``: stored results and hits served, over the database's life."""
        if self._db is None:
            return {"entries": 0, "hits": 0}
        with self._lock:
            n, hits = self._db.execute("SELECT COUNT(*), COALESCE(SUM(hits), 0) "
                                       "FROM calls").fetchone()
        return {"entries": n, "hits": hits}

    def close(self) -> None:
        """Close the database (the wrapper cannot cache afterwards)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> CachedChat:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        # Only reached for names the wrapper lacks: model_id and the capability flags come
        # from the wrapped model (read at each access: OpenAIChat probes its server for
        # one). Private names are never forwarded, and `model` is missing only while
        # __init__ has not set it.
        if name.startswith("_") or name == "model":
            raise AttributeError(name)
        if name in _UNCACHED:  # a model call that would bypass the cache (and replay)
            raise AttributeError(f"CachedChat does not cache {name!r}; call it on the "
                                 f"wrapped model (.model.{name}) if that is meant")
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"CachedChat({self.model!r}, {str(self.path)!r}, mode={self.mode!r})"


# ----------------------------------------------------------------- traces


class TraceSummary(NamedTuple):
    """Counts of a trace (:func:`summarize_trace`).

    Attributes:
      calls: lines; hits, misses, bypassed, off: by cache status; errors: failed calls.
      latency_s: the summed latency; prompt_tokens, completion_tokens: summed usage of
        the chat calls (hits included: the tokens the original call used).
    """

    calls: int
    hits: int
    misses: int
    bypassed: int
    off: int
    errors: int
    latency_s: float
    prompt_tokens: int
    completion_tokens: int

    def __str__(self) -> str:
        return (f"{self.calls} calls: {self.hits} hits, {self.misses} misses, "
                f"{self.bypassed} bypassed, {self.off} uncached, {self.errors} errors; "
                f"{self.latency_s:.3f} s; {self.prompt_tokens} prompt + "
                f"{self.completion_tokens} completion tokens")


def read_trace(path) -> list[dict[str, Any]]:
    """The records of a JSONL trace, in call order.

    Raises:
      FileNotFoundError: no such file; ValueError: a line that is not JSON (its number).
    """
    p = _check_path("path", path)
    out = []
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{i} is not a JSON line: {exc}") from exc
    return out


def summarize_trace(trace: str | os.PathLike | Sequence[Mapping[str, Any]]) -> TraceSummary:
    """Counts and totals of a trace: a path (:func:`read_trace`) or its records."""
    records = read_trace(trace) if isinstance(trace, str | os.PathLike) else trace
    status = [r.get("cache") for r in records]
    return TraceSummary(
        calls=len(records), hits=status.count("hit"), misses=status.count("miss"),
        bypassed=status.count("bypass"), off=status.count("off"),
        errors=sum("error" in r for r in records),
        latency_s=float(sum(r.get("latency_s") or 0.0 for r in records)),
        prompt_tokens=sum(r.get("prompt_tokens") or 0 for r in records),
        completion_tokens=sum(r.get("completion_tokens") or 0 for r in records))
