r"""``jaxsci serve``: an OpenAI-compatible HTTP server over a chat model (FastAPI, uvicorn).

:func:`make_app` builds a FastAPI application over a chat model (an in-process
:class:`~jaxsci.common.lm.chat.LocalChat`, an :class:`~jaxsci.common.lm.engine.Engine`, or
even an :class:`~jaxsci.common.lm.chat.OpenAIChat`, which makes it a proxy);
:class:`Server` binds it to a socket and runs it with uvicorn, in the foreground
(:meth:`Server.run`, what :func:`serve` and ``jaxsci serve`` do) or in a background thread
(:meth:`Server.start`, for notebooks and tests). Any OpenAI client talks to it::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none")
    client.chat.completions.create(model="smollm2", messages=[...])

Endpoints:

* ``GET /v1/models``, ``GET /v1/models/{id}``: the one model served.
* ``POST /v1/chat/completions``: ``messages``, ``temperature``, ``top_p``, ``max_tokens``
  (or ``max_completion_tokens``), ``stop``, ``seed``, ``n`` (at most :data:`MAX_N`),
  ``logprobs``, ``top_logprobs`` (at most 20), ``tools``, ``tool_choice``,
  ``parallel_tool_calls`` (omitted: ``false``, one call per reply; OpenAI's default is
  ``true``), ``response_format`` (``text``, ``json_object``, ``json_schema``: the reply
  decoded under the JSON grammar, :func:`~jaxsci.common.lm.grammar.json_grammar`), ``stream`` and
  ``stream_options.include_usage``. ``developer`` messages are read as ``system`` ones;
  ``tool`` messages and assistant messages with ``tool_calls`` are accepted. A reply's
  calls come back as OpenAI ``message.tool_calls`` (``content`` then ``null`` unless the
  reply also had text) with ``finish_reason: "tool_calls"``; a call that failed to parse
  or validate is returned too, its raw text as ``arguments`` (as an OpenAI model's
  invalid JSON would be), so the client sees it.
* ``POST /v1/completions`` (in-process models only): ``prompt`` (text, token ids, or a
  list of either), ``max_tokens`` (0 allowed with ``echo``), ``temperature``, ``top_p``,
  ``n``, ``stop``, ``seed``, ``echo``, ``logprobs`` (alternatives per token, at most 20),
  ``stream``. ``echo=True`` with ``logprobs`` returns the prompt's token log-probabilities
  (the first token's is ``null``): how :class:`~jaxsci.common.lm.chat.OpenAIChat` scores
  options exactly.
* ``POST /apply-template`` (llama.cpp's extension, in-process models only):
  ``{"messages": [...], "tools": [...]}`` -> ``{"prompt": text}``, the rendered chat prompt.
* ``GET /health``: ``{"status": "ok"}``.

**Streaming.** With ``stream=true`` the reply goes out as server-sent events in OpenAI's
chunk format: a first chunk with the role, content chunks, a last chunk with
``finish_reason``, the usage chunk when ``stream_options.include_usage``, then
``data: [DONE]``. For an in-process model, a chat request with ``n=1``, no ``tools`` and no
JSON ``response_format`` (with or without ``logprobs``: each chunk then carries its
tokens' log-probabilities, computed in the decoding step), and a completion with
``n=1``, one prompt and no ``logprobs``, is streamed **token by token** as the engine generates it
(:meth:`LocalChat.stream`, on :meth:`Engine.stream`): one chunk per token that completes
text (whole UTF-8 characters; text that could begin a stop string is held back until it
cannot). The engine runs in the server's thread pool, one token per step, taking the
model's lock per token, so ``/health`` and other requests are answered meanwhile. Every
other streamed request (``n > 1``, tools, JSON mode, completion logprobs, several
prompts, a proxied server) is generated whole first, then sent in pieces (:func:`stream_pieces`:
one per word, or with ``logprobs`` one per group of tokens that decodes to whole
characters, carrying their log-probabilities; tool calls in one chunk). Either way the
chunks concatenate to exactly the non-streamed reply (greedy, or sampled with the same
seed). With a stop string, an incremental stream's ``usage`` counts the tokens up to the
one completing it (the non-streamed reply's counts the tokens decoded past it).

**Defaults where a request omits a field**: ``temperature`` 1 and ``top_p`` 1 (OpenAI's);
``max_tokens`` 256 for chat (OpenAI's is the rest of the context) and 16 for
completions (OpenAI's); ``n`` 1. Sampling without a ``seed`` draws a fresh one per
request; with a seed, the same request gives the same replies.

**Refused, never silently ignored** (400 with a message): the legacy ``functions`` /
``function_call`` (use ``tools``), ``logit_bias``, non-zero ``frequency_penalty`` /
``presence_penalty``, ``suffix``, ``best_of`` > 1. Other unknown fields (``user``,
``metadata``, ...) are ignored.

**Errors** come in OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``:
400 for an invalid request (pydantic validation, bad messages, unsupported
parameters, a prompt too long for the context), 404 for an unknown model
(``code="model_not_found"``) or route, 405 for a wrong method, 502 when a proxied
server cannot be reached, 500 for an internal error. The server has no authentication:
it listens on 127.0.0.1 by default.

Requests are served one at a time by the in-process model (:class:`LocalChat` holds a
lock); the first request in a new shape bucket compiles (~25 s for SmolLM2 on one
core), later ones reuse the program.

>>> with Server(LocalChat(engine, model_id="tiny"), port=0) as server:   # doctest: +SKIP
...     client = openai.OpenAI(base_url=server.url, api_key="none")
...     client.models.list().data[0].id
'tiny'
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from jaxsci.common.lm.chat import (
    MAX_TOP_LOGPROBS,
    ChatResult,
    LocalChat,
    TokenLogprob,
    check_messages,
    open_chat_model,
    parse_model_spec,
)
from jaxsci.common.lm.grammar import check_response_format
from jaxsci.common.lm.tools import as_tools, check_tool_choice
from jaxsci.core.validation import check_int

_PIP = "pip install fastapi==0.163.2 uvicorn==0.54.0"
try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as exc:  # pragma: no cover - the llm extra installs them
    raise ImportError(f"jaxsci's OpenAI-compatible server needs FastAPI: {_PIP}") from exc

__all__ = [
    "MAX_N",
    "CHAT_MAX_TOKENS",
    "COMPLETION_MAX_TOKENS",
    "APIError",
    "ChatCompletionRequest",
    "CompletionRequest",
    "make_app",
    "stream_pieces",
    "bind_socket",
    "Server",
    "make_server",
    "serve",
]

log = logging.getLogger("jaxsci")

MAX_N = 16
CHAT_MAX_TOKENS = 256
COMPLETION_MAX_TOKENS = 16
_FINGERPRINT = "jaxsci"


# ----------------------------------------------------------------- requests


class _StreamOptions(BaseModel):
    include_usage: bool | None = None


class _Request(BaseModel):
    # Unknown fields (user, metadata, store, ...) are ignored, as OpenAI-compatible
    # servers do; the ones that would change the answer are declared and refused.
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None


class ChatCompletionRequest(_Request):
    """The body of ``POST /v1/chat/completions`` (the fields this server reads)."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Request):
    """The body of ``POST /v1/completions``."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(None, ge=0)
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    suffix: str | None = None
    best_of: int | None = None


class _TemplateRequest(BaseModel):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[Any] | None = None


# ----------------------------------------------------------------- errors


class APIError(Exception):
    """An error answered in OpenAI's JSON shape with an HTTP status.

    Args:
      status: the HTTP status code.
      message: what went wrong, for the user.
      param: the request field at fault, if one.
      code: a machine-readable code (``"model_not_found"``), if one.
      type: OpenAI's error type (``"invalid_request_error"``, ``"server_error"``).
    """

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.type,
                                       "param": self.param, "code": self.code}},
                            status_code=self.status)


@contextlib.contextmanager
def _model_errors(param: str | None = None):
    """The chat layer's exceptions as HTTP errors: bad input 400, no upstream 502."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise APIError(400, str(exc), param=param) from exc
    except ConnectionError as exc:
        raise APIError(502, str(exc)) from exc


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    parts, param = [], None
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            return f"invalid request: the body is not valid JSON ({err.get('msg')})", None
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc)
        param = param or (loc[0] if loc else None)
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "invalid request: " + "; ".join(parts[:5]), param


def _refuse_unsupported(req) -> None:
    def no(field, what):
        raise APIError(400, f"{field} is not supported by this server yet ({what})",
                       param=field)

    if getattr(req, "functions", None) or getattr(req, "function_call", None) is not None:
        no("functions", "the legacy function calls; use tools")
    if req.logit_bias:
        no("logit_bias", "only plain sampling")
    for field in ("frequency_penalty", "presence_penalty"):
        if getattr(req, field):
            no(field, "only plain sampling")
    if getattr(req, "suffix", None):
        no("suffix", "no infilling")
    if (getattr(req, "best_of", None) or 1) > 1:
        no("best_of", "no best-of sampling")


# ----------------------------------------------------------------- responses


def _usage(u) -> dict[str, int]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens}


def _token_json(t: TokenLogprob) -> dict[str, Any]:
    return {"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
            "top_logprobs": [{"token": a.token, "logprob": a.logprob, "bytes": list(a.bytes)}
                             for a in t.top_logprobs]}


def _chat_logprobs(tokens) -> dict[str, Any] | None:
    if tokens is None:
        return None
    return {"content": [_token_json(t) for t in tokens], "refusal": None}


def _text_logprobs(c) -> dict[str, Any] | None:
    if c.logprobs is None:
        return None
    return {"tokens": [t.token for t in c.logprobs],
            "token_logprobs": [t.logprob for t in c.logprobs],
            "top_logprobs": [None if t.logprob is None else
                             {a.token: a.logprob for a in t.top_logprobs} for t in c.logprobs],
            "text_offset": list(c.text_offset or ())}


def _message(r: ChatResult) -> dict[str, Any]:
    msg = {"role": "assistant", "content": r.content, "refusal": None}
    if r.tool_calls:
        msg["tool_calls"] = [c.to_openai() for c in r.tool_calls]
        msg["content"] = r.content or None
    return msg


def _words(text: str) -> list[str]:
    # Each piece is a word with the whitespace before it; they concatenate to the text.
    return [p for p in re.split(r"(?<=\S)(?=\s)", text) if p]


def stream_pieces(result: ChatResult) -> list[tuple[str, tuple[TokenLogprob, ...] | None]]:
    """A reply cut into streaming pieces that concatenate to ``result.content``.

    Without log-probabilities, one piece per word. With them, one piece per group of
    tokens whose bytes decode to whole characters of the reply, with those tokens.
    """
    content = result.content
    if result.logprobs is None:
        return [(w, None) for w in _words(content)]
    out, pending, text, pos = [], [], "", 0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for t in result.logprobs:
        pending.append(t)
        text += decoder.decode(bytes(t.bytes))
        if text and content.startswith(text, pos):
            out.append((text, tuple(pending)))
            pos, pending, text = pos + len(text), [], ""
    if pos < len(content) or pending:
        out.append((content[pos:], tuple(pending)))
    return out


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


# ----------------------------------------------------------------- the app


def make_app(model) -> FastAPI:
    """The OpenAI-compatible FastAPI application over a chat model.

    Args:
      model: a :class:`~jaxsci.common.lm.chat.ChatModel`, an
        :class:`~jaxsci.common.lm.engine.Engine` (wrapped in ``LocalChat``) or a model
        spec (:func:`~jaxsci.common.lm.chat.open_chat_model`).

    Returns:
      the app; ``app.state.model`` is the chat model it serves.
    """
    chat_model = open_chat_model(model)
    model_id = chat_model.model_id
    created = int(time.time())
    app = FastAPI(title="jaxsci", description="OpenAI-compatible API over a jaxsci chat "
                                              "model", version="1")
    app.state.model = chat_model

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return APIError(400, message, param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        message = {404: f"no route {request.method} {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return APIError(exc.status_code, message).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("internal error serving %s", request.url.path, exc_info=exc)
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}"[:1000]).response()

    def card() -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "jaxsci"}

    def check_model(name: str) -> None:
        if name != model_id:
            raise APIError(404, f"the model {name!r} does not exist; this server serves "
                                f"{model_id!r}", param="model", code="model_not_found")

    def local(what: str) -> LocalChat:
        if not isinstance(chat_model, LocalChat):
            raise APIError(404, f"{what} needs an in-process model; this server proxies "
                                f"{chat_model!r}", code="unsupported_endpoint")
        return chat_model

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    def list_models():
        return {"object": "list", "data": [card()]}

    @app.get("/v1/models/{name:path}")
    def get_model(name: str):
        check_model(name)
        return card()

    @app.post("/apply-template")
    def apply_template(req: _TemplateRequest):
        target = local("/apply-template")
        with _model_errors("tools"):
            tools = as_tools(req.tools)
        with _model_errors("messages"):
            return {"prompt": target.prompt(_roles(req.messages), tools)}

    @app.post("/v1/chat/completions")
    def chat_completions(req: ChatCompletionRequest):
        check_model(req.model)
        _refuse_unsupported(req)
        messages = _roles(req.messages)
        with _model_errors("messages"):
            check_messages(messages)
        with _model_errors("tools"):
            tools = as_tools(req.tools)
        with _model_errors("tool_choice"):
            check_tool_choice(req.tool_choice, tools)
        with _model_errors("response_format"):
            json_mode = check_response_format(req.response_format) is not None
        if req.top_logprobs and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        max_tokens = req.max_completion_tokens or req.max_tokens or CHAT_MAX_TOKENS
        temperature = 1.0 if req.temperature is None else req.temperature
        top_p = 1.0 if req.top_p is None else req.top_p
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        if req.stream and isinstance(chat_model, LocalChat) and (req.n or 1) == 1 \
                and not tools and not json_mode:
            with _model_errors():
                deltas = chat_model.stream(messages, temperature=temperature, top_p=top_p,
                                           max_tokens=max_tokens, stop=req.stop, seed=req.seed,
                                           logprobs=bool(req.logprobs),
                                           top_logprobs=req.top_logprobs or 0)
            events = _chunks("chat.completion.chunk", f"chatcmpl-{uuid.uuid4().hex}",
                             model_id, include_usage)
            return StreamingResponse(_chat_stream(deltas, events),
                                     media_type="text/event-stream")
        with _model_errors():
            results = chat_model.chat(
                messages, tools=tools or None, tool_choice=req.tool_choice,
                parallel_tool_calls=bool(tools) and bool(req.parallel_tool_calls),
                response_format=req.response_format if json_mode else None,
                temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=req.stop,
                seed=req.seed, n=req.n or 1, logprobs=bool(req.logprobs),
                top_logprobs=req.top_logprobs or 0)
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = _usage(results[0].usage)
        if req.stream:
            events = _chunks("chat.completion.chunk", rid, model_id, include_usage, now)
            return StreamingResponse(_chat_events(results, events, usage),
                                     media_type="text/event-stream")
        return {"id": rid, "object": "chat.completion", "created": now, "model": model_id,
                "system_fingerprint": _FINGERPRINT, "usage": usage,
                "choices": [{"index": i, "finish_reason": r.finish_reason,
                             "message": _message(r), "logprobs": _chat_logprobs(r.logprobs)}
                            for i, r in enumerate(results)]}

    @app.post("/v1/completions")
    def completions(req: CompletionRequest):
        check_model(req.model)
        _refuse_unsupported(req)
        target = local("/v1/completions")
        max_tokens = COMPLETION_MAX_TOKENS if req.max_tokens is None else req.max_tokens
        temperature = 1.0 if req.temperature is None else req.temperature
        top_p = 1.0 if req.top_p is None else req.top_p
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        rid = f"cmpl-{uuid.uuid4().hex}"
        one_prompt = isinstance(req.prompt, str) or all(isinstance(t, int) for t in req.prompt)
        if req.stream and (req.n or 1) == 1 and req.logprobs is None and max_tokens > 0 \
                and one_prompt:
            with _model_errors():
                deltas = target.stream_complete(req.prompt, max_tokens=max_tokens,
                                                temperature=temperature, top_p=top_p,
                                                stop=req.stop, seed=req.seed,
                                                echo=bool(req.echo))
            events = _chunks("text_completion", rid, model_id, include_usage)
            return StreamingResponse(_completion_stream(deltas, events),
                                     media_type="text/event-stream")
        with _model_errors():
            results = target.complete(
                req.prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                stop=req.stop, seed=req.seed, n=req.n or 1, logprobs=req.logprobs,
                echo=bool(req.echo))
        now = int(time.time())
        usage = _usage(results[0].usage)
        if req.stream:
            events = _chunks("text_completion", rid, model_id, include_usage, now)
            return StreamingResponse(_completion_events(results, events, usage),
                                     media_type="text/event-stream")
        return {"id": rid, "object": "text_completion", "created": now, "model": model_id,
                "system_fingerprint": _FINGERPRINT, "usage": usage,
                "choices": [{"index": i, "text": c.text, "finish_reason": c.finish_reason,
                             "logprobs": _text_logprobs(c)} for i, c in enumerate(results)]}

    return app


def _roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # OpenAI's newer name for a system message.
    return [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]


def _chunks(kind: str, rid: str, model_id: str, include_usage: bool, now: int | None = None):
    """A function ``choices, **extra -> SSE line`` for the chunks of one response."""
    created = int(time.time()) if now is None else now

    def chunk(choices, **extra) -> str:
        body = {"id": rid, "object": kind, "created": created, "model": model_id,
                "system_fingerprint": _FINGERPRINT, "choices": choices}
        if include_usage:
            body["usage"] = None
        body.update(extra)
        return _sse(body)

    chunk.include_usage = include_usage
    return chunk


def _chat_choice(delta, finish_reason=None, logprobs=None, index=0) -> list[dict[str, Any]]:
    return [{"index": index, "delta": delta, "logprobs": logprobs,
             "finish_reason": finish_reason}]


def _chat_events(results, chunk, usage) -> Iterator[str]:
    for i, r in enumerate(results):
        yield chunk(_chat_choice({"role": "assistant", "content": ""}, index=i))
        for text, tokens in stream_pieces(r):
            yield chunk(_chat_choice({"content": text}, None, _chat_logprobs(tokens), i))
        if r.tool_calls:  # whole calls in one chunk (the reply is generated already)
            calls = [{"index": j, **c.to_openai()} for j, c in enumerate(r.tool_calls)]
            yield chunk(_chat_choice({"tool_calls": calls}, index=i))
        yield chunk(_chat_choice({}, r.finish_reason, index=i))
    if chunk.include_usage:
        yield chunk([], usage=usage)
    yield "data: [DONE]\n\n"


def _stream_errors(events: Iterator[str]) -> Iterator[str]:
    # The status line is sent already: a failure mid-stream ends it with an error event
    # in OpenAI's shape (the openai client raises it), never a silently cut stream.
    try:
        yield from events
    except Exception as exc:  # reported to the client, and logged
        log.error("internal error while streaming", exc_info=exc)
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}"[:1000])
        yield _sse({"error": {"message": err.message, "type": err.type, "param": None,
                              "code": None}})


def _chat_stream(deltas, chunk) -> Iterator[str]:
    """The chunks of one reply as the engine produces it (:meth:`LocalChat.stream`)."""
    def events():
        yield chunk(_chat_choice({"role": "assistant", "content": ""}))
        for d in deltas:
            if d.content:
                yield chunk(_chat_choice({"content": d.content}, None,
                                         _chat_logprobs(d.logprobs)))
            if d.finish_reason is not None:
                yield chunk(_chat_choice({}, d.finish_reason))
                if chunk.include_usage:
                    yield chunk([], usage=_usage(d.usage))
        yield "data: [DONE]\n\n"

    return _stream_errors(events())


def _completion_choice(text, finish_reason=None, logprobs=None, index=0):
    return [{"index": index, "text": text, "finish_reason": finish_reason,
             "logprobs": logprobs}]


def _completion_events(results, chunk, usage) -> Iterator[str]:
    for i, c in enumerate(results):
        # With logprobs, the text and its tokens in one chunk (they stay aligned).
        pieces = [c.text] if c.logprobs is not None else _words(c.text)
        for text in pieces:
            yield chunk(_completion_choice(text, None, _text_logprobs(c), i))
        yield chunk(_completion_choice("", c.finish_reason, index=i))
    if chunk.include_usage:
        yield chunk([], usage=usage)
    yield "data: [DONE]\n\n"


def _completion_stream(deltas, chunk) -> Iterator[str]:
    """The chunks of one completion as the engine produces it (``LocalChat.stream_complete``)."""
    def events():
        for d in deltas:
            if d.content:
                yield chunk(_completion_choice(d.content))
            if d.finish_reason is not None:
                yield chunk(_completion_choice("", d.finish_reason))
                if chunk.include_usage:
                    yield chunk([], usage=_usage(d.usage))
        yield "data: [DONE]\n\n"

    return _stream_errors(events())


# ----------------------------------------------------------------- running it


def bind_socket(host: str = "127.0.0.1", port: int = 8000) -> socket.socket:
    """A TCP socket bound and listening on ``host:port`` (``port=0``: a free port).

    Raises:
      OSError: the address cannot be used (in use, not this machine's, unknown host),
        with a message naming it.
    """
    port = check_int("port", port, min=0, max=65535)
    if not isinstance(host, str) or not host:
        raise TypeError(f"host must be a non-empty str, got {host!r}")
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})"
                      ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class Server:
    """:func:`make_app` on a bound socket, run by uvicorn.

    Args:
      model: what :func:`make_app` takes.
      host, port: where to listen (``port=0``: a free port, see :attr:`port`); ignored
        when ``sock`` is given.
      sock: an already bound socket (:func:`bind_socket`).
      log_level: uvicorn's (``"info"`` logs each request; ``"warning"`` is quiet).

    Attributes:
      app: the FastAPI app; ``app.state.model`` the chat model.
      host, port: the address actually bound.
      url: the API root for clients, ``http://host:port/v1``.

    Use :meth:`run` to serve in the foreground, or ``with Server(...) as s:`` (or
    :meth:`start` / :meth:`close`) to serve from a background thread.
    """

    def __init__(self, model, host: str = "127.0.0.1", port: int = 8000, *,
                 sock: socket.socket | None = None, log_level: str = "info"):
        import uvicorn

        self.app = make_app(model)
        self._sock = sock if sock is not None else bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level=log_level, lifespan="off",
                                access_log=log_level in ("debug", "info", "trace"))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C) or :meth:`close`."""
        self._server.run(sockets=[self._sock])

    def start(self, timeout: float = 30.0) -> Server:
        """Serve from a daemon thread; return once the server accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the server was already started")
        self._thread = threading.Thread(target=self._server.run, args=([self._sock],),
                                        name="jaxsci-serve", daemon=True)
        self._thread.start()
        t0 = time.monotonic()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server stopped while starting (see uvicorn's log)")
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the server did not start within {timeout} s")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Stop serving (finishing the requests in flight) and release the socket."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> Server:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.close()


def make_server(model="smollm2", host: str = "127.0.0.1", port: int = 8000, *,
                log_level: str = "info") -> Server:
    """A :class:`Server`, ready to :meth:`~Server.run`: the spec checked, then the socket
    bound, then the model loaded, so that a bad spec or a busy port fails fast.

    Raises:
      ValueError: an unknown model spec; OSError: the address cannot be used;
      FileNotFoundError: a missing model file or wheel; ConnectionError: a proxied
      server cannot be reached.
    """
    if isinstance(model, str):
        parse_model_spec(model)
    sock = bind_socket(host, port)
    try:
        return Server(model, sock=sock, log_level=log_level)
    except BaseException:
        sock.close()
        raise


def serve(model="smollm2", host: str = "127.0.0.1", port: int = 8000, *,
          log_level: str = "info") -> None:
    """Serve ``model`` (a spec, an engine or a chat model) until interrupted.

    What ``jaxsci serve`` runs. Arguments as :func:`make_server`.
    """
    server = make_server(model, host, port, log_level=log_level)
    log.info("serving %r at %s (OpenAI-compatible; Ctrl-C stops)",
             server.app.state.model.model_id, server.url)
    server.run()
