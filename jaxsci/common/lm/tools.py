r"""Tool calls: one :class:`Tool` registry, rendered for OpenAI servers and for a small model.

A :class:`Tool` is a function the model may call: its ``name``, a ``description``, the
JSON schema of its arguments (an object schema, as OpenAI's ``parameters``) and the
Python ``fn`` that runs it. :func:`as_tools` accepts tools as :class:`Tool` values or as
OpenAI's ``{"type": "function", "function": {...}}`` dicts, so the one list serves

* an OpenAI-compatible server: :meth:`Tool.to_openai` is the ``tools`` entry;
* the in-process small model (SmolLM2-135M-Instruct): the **prompt protocol** of
  Hermes-2-Pro / Qwen2.5, the common open format. :func:`tools_system_prompt` adds a
  section to the system message listing each tool's OpenAI JSON between ``<tools>``
  tags and asking for a call as one JSON object between ``<tool_call>`` tags::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

  :func:`render_messages` turns a conversation with tool calls and tool results into
  plain ChatML turns in the same protocol: an assistant message's ``tool_calls``
  become such blocks after its text, and the results (``role: "tool"`` messages, one
  after another merged) a user turn of ``<tool_response>`` blocks, in call order.
  :mod:`jaxsci.common.lm.grammar` constrains decoding so that the model's call follows
  the protocol and the schema.

A reply is read back by :func:`parse_tool_calls` into :class:`ToolCall` values (the
parsed ``arguments`` and their raw JSON). A block that is not valid JSON, names an
unknown tool, or whose arguments do not match the schema (:func:`validate`) still
becomes a :class:`ToolCall`, with ``error`` saying why: parse failures are reported,
never dropped. :func:`run_tool_calls` runs the calls and returns the ``role: "tool"``
messages to append to the conversation.

>>> weather = Tool("get_weather", "Current weather in a city",
...                {"type": "object", "properties": {"city": {"type": "string"}},
...                 "required": ["city"]}, fn=lambda city: f"Sunny in {city}")
>>> _, (call,) = parse_tool_calls(
...     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
...     [weather])
>>> call.name, call.arguments, call.error
('get_weather', {'city': 'Paris'}, None)
>>> run_tool_calls([call], [weather])[0]["content"]
'Sunny in Paris'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "TOOL_CALL_OPEN",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_PREFIX",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolCallError",
    "as_tools",
    "check_tool_choice",
    "check_parallel_tool_calls",
    "check_tool_calls",
    "tools_system_prompt",
    "render_messages",
    "make_tool_call",
    "parse_tool_calls",
    "validate",
    "run_tool_calls",
]

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
# What a call in the prompt protocol starts with: the constrained decoder's marker.
TOOL_CALL_PREFIX = TOOL_CALL_OPEN + "\n"
# OpenAI's rule for function names.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_EMPTY_OBJECT = {"type": "object", "properties": {}}


class ToolCallError(ValueError):
    """A tool call that cannot be run: unknown tool, unparsable or invalid arguments."""


# ----------------------------------------------------------------- tools


@dataclasses.dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call.

    Args:
      name: letters, digits, ``_`` and ``-``, starting with a letter or ``_``, at most 64
        characters (OpenAI's rule).
      description: what it does, for the model.
      json_schema: the JSON schema of the arguments: a dict with ``"type": "object"``
        (OpenAI's ``parameters``); its ``properties`` map names to schemas, ``required``
        lists names among them. Copied (it must be JSON-serialisable).
      fn: the Python function, called as ``fn(**arguments)`` by :func:`run_tool_calls`;
        ``None`` for a tool only described to the model.

    Raises:
      ValueError, TypeError: naming the argument at fault.
    """

    name: str
    description: str = ""
    json_schema: Mapping[str, Any] = dataclasses.field(default_factory=lambda: dict(
        _EMPTY_OBJECT))
    fn: Callable[..., Any] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"Tool name must be 1-64 letters, digits, '_' or '-' starting "
                             f"with a letter or '_', got {self.name!r}")
        if not isinstance(self.description, str):
            raise TypeError(f"Tool {self.name!r}: description must be a str, got "
                            f"{type(self.description).__name__}")
        schema = self.json_schema
        if not isinstance(schema, Mapping):
            raise TypeError(f"Tool {self.name!r}: json_schema must be a dict, got "
                            f"{type(schema).__name__}")
        try:
            schema = json.loads(json.dumps(schema))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"Tool {self.name!r}: json_schema must be JSON-serialisable "
                            f"({exc})") from None
        if schema.get("type") != "object":
            raise ValueError(f"Tool {self.name!r}: json_schema must have \"type\": \"object\" "
                             f"(the arguments are an object), got type "
                             f"{schema.get('type')!r}")
        props = schema.get("properties", {})
        if not isinstance(props, Mapping):
            raise TypeError(f"Tool {self.name!r}: json_schema['properties'] must be a dict, "
                            f"got {type(props).__name__}")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise TypeError(f"Tool {self.name!r}: json_schema['required'] must be a list of "
                            f"property names, got {required!r}")
        missing = [r for r in required if r not in props]
        if missing:
            raise ValueError(f"Tool {self.name!r}: json_schema['required'] names "
                             f"{missing}, which are not in its properties {list(props)}")
        if self.fn is not None and not callable(self.fn):
            raise TypeError(f"Tool {self.name!r}: fn must be callable or None, got "
                            f"{type(self.fn).__name__}")
        object.__setattr__(self, "json_schema", schema)

    @classmethod
    def from_openai(cls, spec: Mapping[str, Any], fn: Callable[..., Any] | None = None) -> Tool:
        """A tool from OpenAI's ``{"type": "function", "function": {"name", "description",
        "parameters"}}`` (or the inner ``function`` dict alone); no ``parameters``: none."""
        if not isinstance(spec, Mapping):
            raise TypeError(f"a tool must be a Tool or an OpenAI tool dict, got "
                            f"{type(spec).__name__} {spec!r}"[:200])
        if "function" in spec:
            if spec.get("type", "function") != "function":
                raise ValueError(f"only function tools are supported, got type "
                                 f"{spec.get('type')!r}")
            spec = spec["function"]
            if not isinstance(spec, Mapping):
                raise TypeError(f"a tool's 'function' must be a dict, got {spec!r}"[:200])
        if "name" not in spec:
            raise ValueError(f"an OpenAI tool needs a function 'name', got {dict(spec)!r}"[:200])
        return cls(spec["name"], spec.get("description") or "",
                   spec.get("parameters") or dict(_EMPTY_OBJECT), fn)

    def to_openai(self) -> dict[str, Any]:
        """OpenAI's ``tools`` entry."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": self.json_schema}}

    def __eq__(self, other):
        if not isinstance(other, Tool):
            return NotImplemented
        return (self.name, self.description, self.json_schema, self.fn) == (
            other.name, other.description, other.json_schema, other.fn)

    def __hash__(self):
        return hash((self.name, json.dumps(self.json_schema, sort_keys=True)))


def as_tools(tools) -> tuple[Tool, ...]:
    """Tools as a tuple of :class:`Tool` (``None`` -> ``()``).

    Args:
      tools: ``None``, or a sequence whose items are :class:`Tool` values or OpenAI
        tool dicts (:meth:`Tool.from_openai`).

    Raises:
      TypeError: not a sequence; ValueError: a malformed tool or two tools of one name.
    """
    if tools is None:
        return ()
    if isinstance(tools, Tool | Mapping | str) or not isinstance(tools, Iterable):
        raise TypeError(f"tools must be a list of Tool values or OpenAI tool dicts, got "
                        f"{type(tools).__name__}")
    out, seen = [], set()
    for i, t in enumerate(tools):
        try:
            tool = t if isinstance(t, Tool) else Tool.from_openai(t)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"tools[{i}]: {exc}") from None
        if tool.name in seen:
            raise ValueError(f"tools[{i}]: a second tool named {tool.name!r}")
        seen.add(tool.name)
        out.append(tool)
    return tuple(out)


def _names(tools: Sequence[Tool]) -> list[str]:
    return [t.name for t in tools]


def _lookup(tools: Sequence[Tool], name: str, what: str) -> Tool:
    for t in tools:
        if t.name == name:
            return t
    raise ToolCallError(f"{what}: unknown tool {name!r}; the known tools are {_names(tools)}")


class ToolChoice(NamedTuple):
    """A checked ``tool_choice``: ``mode`` is ``"none"``, ``"auto"``, ``"required"`` or
    ``"function"`` (then ``name`` is the forced tool)."""

    mode: str
    name: str | None = None

    def to_openai(self) -> str | dict[str, Any]:
        if self.mode == "function":
            return {"type": "function", "function": {"name": self.name}}
        return self.mode


def check_tool_choice(tool_choice, tools: Sequence[Tool]) -> ToolChoice:
    """Check ``tool_choice`` against the tools (OpenAI's semantics).

    Args:
      tool_choice: ``None`` (``"auto"`` with tools, ``"none"`` without), ``"none"``,
        ``"auto"``, ``"required"``, or ``{"type": "function", "function": {"name": ...}}``
        (that tool must be called).
      tools: from :func:`as_tools`.

    Raises:
      ValueError: an unknown value, a forced tool not among the tools (naming the known
        ones), or a choice other than ``"none"`` without tools.
    """
    if isinstance(tool_choice, ToolChoice):
        choice = tool_choice
    elif tool_choice is None:
        choice = ToolChoice("auto" if tools else "none")
    elif isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or "
                             f"{{'type': 'function', 'function': {{'name': ...}}}}, got "
                             f"{tool_choice!r}")
        choice = ToolChoice(tool_choice)
    elif isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise ValueError(f"tool_choice must be {{'type': 'function', 'function': "
                             f"{{'name': ...}}}} to force a tool, got {dict(tool_choice)!r}")
        choice = ToolChoice("function", name)
    else:
        raise TypeError(f"tool_choice must be a str or a dict, got "
                        f"{type(tool_choice).__name__}")
    if choice.mode != "none" and not tools:
        raise ValueError(f"tool_choice={choice.to_openai()!r} needs tools; none were given")
    if choice.mode == "function":
        try:
            _lookup(tools, choice.name, "tool_choice")
        except ToolCallError as exc:
            raise ValueError(str(exc)) from None
    return choice


# ----------------------------------------------------------------- the prompt protocol


def check_parallel_tool_calls(parallel_tool_calls) -> bool:
    """``parallel_tool_calls`` as a bool: ``True`` (a reply may hold several calls) or
    ``False`` (at most one); ``None`` means ``False``. Anything else is a ``TypeError``
    naming the argument (a string ``"false"`` is not silently true)."""
    if parallel_tool_calls is None:
        return False
    if not isinstance(parallel_tool_calls, bool):
        raise TypeError(f"parallel_tool_calls must be True or False, got "
                        f"{type(parallel_tool_calls).__name__} {parallel_tool_calls!r}"[:200])
    return parallel_tool_calls


def tools_system_prompt(tools: Sequence[Tool]) -> str:
    """The system-prompt section of the protocol (Hermes-2-Pro / Qwen2.5 ``<tool_call>``)."""
    listing = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in as_tools(tools))
    return ("# Tools\n\n"
            "You may call a function to help with the user's request. The functions "
            "are described in JSON between <tools></tools> tags:\n"
            f"<tools>\n{listing}\n</tools>\n\n"
            "To call a function, answer with only a JSON object holding its name and "
            "its arguments, between <tool_call></tool_call> tags:\n"
            f"{TOOL_CALL_PREFIX}"
            '{"name": <function-name>, "arguments": <arguments-json-object>}\n'
            f"{TOOL_CALL_CLOSE}\n"
            "Otherwise answer in plain text.")


def _call_block(name: str, arguments: Any) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_PREFIX}{body}\n{TOOL_CALL_CLOSE}"


def check_tool_calls(where: str, calls) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` as OpenAI dicts (``ToolCall`` values accepted).

    Raises:
      ValueError, TypeError: naming ``where`` (e.g. ``"messages[2]['tool_calls'][0]"``).
    """
    if isinstance(calls, str | Mapping) or not isinstance(calls, Sequence):
        raise TypeError(f"{where} must be a list of tool calls, got {type(calls).__name__}")
    out = []
    for j, c in enumerate(calls):
        at = f"{where}[{j}]"
        if isinstance(c, ToolCall):
            c = c.to_openai()
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ValueError(f"{at} must be {{'id', 'type': 'function', 'function': "
                             f"{{'name', 'arguments'}}}}, got {c!r}"[:200])
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):  # some clients send the object itself
            args = json.dumps(args, ensure_ascii=False)
        cid = c.get("id") or f"call_{j}"
        if not isinstance(cid, str):
            raise TypeError(f"{at}['id'] must be a str, got {cid!r}")
        out.append({"id": cid, "type": "function",
                    "function": {"name": fn["name"], "arguments": args}})
    return out


def render_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool] = (), *,
                    default_system: str | None = None) -> list[dict[str, str]]:
    """A conversation as plain ``{"role", "content"}`` turns in the prompt protocol.

    Args:
      messages: checked messages (``chat.check_messages``): ``tool`` messages and
        assistant messages with ``tool_calls`` allowed.
      tools: listed in the system message (:func:`tools_system_prompt`) when non-empty.
      default_system: the chat template's default system prompt; with tools and no
        system message, the system message is it followed by the tools section.

    Returns:
      new messages with roles ``system``, ``user`` and ``assistant`` only.
    """
    out: list[dict[str, str]] = []
    tools = as_tools(tools)
    msgs = list(messages)
    if tools:
        section = tools_system_prompt(tools)
        if msgs and msgs[0]["role"] == "system":
            out.append({"role": "system", "content": f"{msgs[0]['content']}\n\n{section}"})
            msgs = msgs[1:]
        else:
            head = f"{default_system}\n\n" if default_system else ""
            out.append({"role": "system", "content": head + section})
    responses: list[str] = []
    for m in msgs:
        if m["role"] == "tool":
            responses.append(f"<tool_response>\n{m['content']}\n</tool_response>")
            continue
        if responses:
            out.append({"role": "user", "content": "\n".join(responses)})
            responses = []
        content = m["content"] or ""
        calls = m.get("tool_calls") or ()
        if calls:
            blocks = []
            for c in calls:
                raw = c["function"]["arguments"]
                try:
                    args = json.loads(raw)
                except ValueError:
                    args = raw
                blocks.append(_call_block(c["function"]["name"], args))
            content = "\n".join(([content] if content else []) + blocks)
        out.append({"role": m["role"], "content": content})
    if responses:
        out.append({"role": "user", "content": "\n".join(responses)})
    return out


# ----------------------------------------------------------------- results


class ToolCall(NamedTuple):
    """One tool call of a reply.

    Attributes:
      id: the call's id (``tool_call_id`` of its result message).
      name: the tool's name (``""`` when a failed block gave none).
      arguments: the parsed arguments, or ``None`` when they could not be parsed.
      arguments_json: the arguments' raw JSON text (OpenAI's ``function.arguments``); for
        a block that could not be parsed, the block's whole text.
      error: ``None`` for a valid call, else why it is not one (invalid JSON, an unknown
        tool, arguments not matching the schema, a reply cut at ``max_tokens``).
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    arguments_json: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_openai(self) -> dict[str, Any]:
        """OpenAI's ``tool_calls`` entry (``arguments`` as the raw JSON string)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments_json}}


def _call_id(seed: str, index: int, text: str) -> str:
    digest = hashlib.sha256(f"{seed}\0{index}\0{text}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def make_tool_call(call_id: str, name: str, arguments, tools: Sequence[Tool]) -> ToolCall:
    """A :class:`ToolCall` from a name and its arguments (JSON text, or a parsed object),
    checked against the tools: any failure goes to ``error``."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                  ensure_ascii=False)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return ToolCall(call_id, name, None, raw, f"the arguments of {name!r} are not "
                                                      f"valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(call_id, name, None, raw, f"the arguments of {name!r} must be a JSON "
                                                  f"object, got {type(arguments).__name__}")
    try:
        tool = _lookup(tools, name, "the reply")
    except ToolCallError as exc:
        return ToolCall(call_id, name, arguments, raw, str(exc))
    errors = validate(arguments, tool.json_schema)
    if errors:
        return ToolCall(call_id, name, arguments, raw, f"the arguments of {name!r} do not "
                                                       f"match its schema: " + "; ".join(errors))
    return ToolCall(call_id, name, arguments, raw)


# A block ends at its closing tag, at the next opening tag, or at the end of the reply.
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE)
                    + r"|(?=" + re.escape(TOOL_CALL_OPEN) + r")|\Z)", re.S)


def parse_tool_calls(text: str, tools: Sequence[Tool], *, id_seed: str = ""
                     ) -> tuple[str, tuple[ToolCall, ...]]:
    """The text and the tool calls of a reply in the prompt protocol.

    Every ``<tool_call> ... </tool_call>`` block (the closing tag may be missing: the
    block then ends at the next ``<tool_call>`` or the end of the reply) becomes a
    :class:`ToolCall`; one that is not a JSON object ``{"name": str, "arguments":
    object}``, names an unknown tool or breaks the schema has ``error`` set.

    Args:
      text: the reply.
      tools: the tools offered.
      id_seed: mixed into the calls' ids (``call_`` + 24 hex digits of a hash of the seed,
        the call's index and its text), so the same reply to the same request has the
        same ids.

    Returns:
      ``(content, calls)``: the text outside the blocks (stripped), and the calls.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    tools = as_tools(tools)
    calls, rest, last = [], [], 0
    for i, m in enumerate(_BLOCK.finditer(text)):
        rest.append(text[last:m.start()])
        last = m.end()
        block = m.group(1).strip()
        cid = _call_id(id_seed, i, block)
        closed = m.group(0).endswith(TOOL_CALL_CLOSE)
        try:
            obj = json.loads(block)
        except ValueError as exc:
            cut = "" if closed else f" (no {TOOL_CALL_CLOSE}: cut by max_tokens?)"
            calls.append(ToolCall(cid, _guess_name(block), None, block,
                                  f"the tool call is not valid JSON{cut}: {exc}"))
            continue
        if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)
                and "arguments" in obj):
            calls.append(ToolCall(cid, _guess_name(block), None, block,
                                  'a tool call must be a JSON object {"name": str, '
                                  f'"arguments": object}}, got {block!r}'[:300]))
            continue
        calls.append(make_tool_call(cid, obj["name"], obj["arguments"], tools))
    rest.append(text[last:])
    return "".join(rest).strip(), tuple(calls)


def _guess_name(block: str) -> str:
    m = re.search(r'"name"\s*:\s*"([^"\\]*)"', block)
    return m.group(1) if m else ""


# ----------------------------------------------------------------- validation

_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
          "null": (type(None),), "object": (dict,), "array": (list,)}


def _is_type(value, name: str) -> bool:
    if name not in _TYPES:
        return False
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    if name == "number" and isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, _TYPES[name])


def _same(a, b) -> bool:
    """JSON equality (``1 == 1.0``, but ``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def validate(value, schema: Mapping[str, Any], path: str = "arguments") -> list[str]:
    """Check a JSON value against a JSON schema; return the violations (empty: valid).

    Checked: ``type`` (a name or a list), ``enum``, ``const``, ``anyOf``; objects'
    ``properties``, ``required``, ``additionalProperties: false``; arrays' ``items``,
    ``minItems``, ``maxItems``; strings' ``minLength``, ``maxLength``, ``pattern``
    (Python's ``re.search``); numbers' ``minimum``, ``maximum``, ``exclusiveMinimum``,
    ``exclusiveMaximum``. Other keywords are not checked.

    Args:
      value: the parsed JSON value.
      schema: the schema.
      path: how the value is named in the messages.

    Returns:
      one message per violation, each naming its path (``arguments.city``).
    """
    errs: list[str] = []
    if not isinstance(schema, Mapping):
        return errs
    if "anyOf" in schema:
        subs = [validate(value, s, path) for s in schema["anyOf"]]
        if all(subs):
            errs.append(f"{path}: matches none of anyOf ({'; '.join(subs[0])})")
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in names):
            errs.append(f"{path}: expected {' or '.join(names)}, got "
                        f"{json.dumps(value, ensure_ascii=False)[:60]}")
            return errs
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        errs.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and not _same(value, schema["const"]):
        errs.append(f"{path}: must be {schema['const']!r}, got {value!r}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for r in schema.get("required", ()):
            if r not in value:
                errs.append(f"{path}: missing required property {r!r}")
        for k, v in value.items():
            if k in props:
                errs += validate(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected property {k!r} (allowed: {list(props)})")
    elif isinstance(value, list):
        n = len(value)
        if n < schema.get("minItems", 0):
            errs.append(f"{path}: {n} items, fewer than minItems={schema['minItems']}")
        if "maxItems" in schema and n > schema["maxItems"]:
            errs.append(f"{path}: {n} items, more than maxItems={schema['maxItems']}")
        if isinstance(schema.get("items"), Mapping):
            for j, v in enumerate(value):
                errs += validate(v, schema["items"], f"{path}[{j}]")
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errs.append(f"{path}: shorter than minLength={schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(f"{path}: longer than maxLength={schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{path}: {value!r} does not match the pattern {schema['pattern']!r}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        for key, bad in (("minimum", lambda b: value < b), ("maximum", lambda b: value > b),
                         ("exclusiveMinimum", lambda b: value <= b),
                         ("exclusiveMaximum", lambda b: value >= b)):
            if key in schema and bad(schema[key]):
                errs.append(f"{path}: {value!r} breaks {key}={schema[key]!r}")
    return errs


# ----------------------------------------------------------------- running calls


def run_tool_calls(calls: Iterable[ToolCall], tools, *, errors: str = "raise"
                   ) -> list[dict[str, str]]:
    """Run tool calls; return their result messages, in order.

    Args:
      calls: :class:`ToolCall` values (``ChatResult.tool_calls``).
      tools: the tools (:func:`as_tools`); each called one needs ``fn``.
      errors: ``"raise"``: a failed call (``error`` set, an unknown tool, ``fn``
        raising) raises; ``"report"``: its message's content is ``"error: ..."``, so the
        model can read what went wrong.

    Returns:
      ``{"role": "tool", "tool_call_id": call.id, "content": str}`` per call: ``fn``'s
      result as is when a str, else as JSON.

    Raises:
      ToolCallError: with ``errors="raise"``, a failed or unknown call, naming the tool
        (and the known ones); a tool without ``fn``. Exceptions of ``fn`` propagate.
    """
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', got {errors!r}")
    tools = as_tools(tools)
    out = []
    for i, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            raise TypeError(f"calls[{i}] must be a ToolCall, got {type(call).__name__}")
        try:
            if call.error is not None:
                raise ToolCallError(f"tool call {call.id} ({call.name or '?'}) failed: "
                                    f"{call.error}")
            tool = _lookup(tools, call.name, f"tool call {call.id}")
            if tool.fn is None:
                raise ToolCallError(f"tool {tool.name!r} has no fn to run")
            result = tool.fn(**call.arguments)
            content = result if isinstance(result, str) else json.dumps(result,
                                                                        ensure_ascii=False)
        except Exception as exc:
            if errors == "raise":
                raise
            content = f"error: {exc}"
        out.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return out
