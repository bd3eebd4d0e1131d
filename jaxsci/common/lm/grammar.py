r"""Constrained decoding of tool calls: a JSON grammar from the tools' schemas, a byte-level
automaton, and the token masks that keep a model's reply inside it.

:func:`tool_call_grammar` builds, from the tools (:mod:`jaxsci.common.lm.tools`), the
language of one call in the prompt protocol::

    <tool_call>\n{"name": <one of the tool names>, "arguments": <that tool's arguments>}

(or, with ``parallel=True``, one or more such calls, each block closed by
``\n</tool_call>\n`` before the next) in a canonical emission: ``json.dumps``'s
separators (``", "`` and ``": "``, in the model's own habit rather than
whitespace-free), object properties in the schema's order. It is
compiled once (Thompson's construction of a byte NFA, then the subset construction) into
a deterministic automaton over bytes, a :class:`Grammar`: a ``(states, 257)`` transition
table (state 0 is the dead state; column 256, the padding byte, leaves a state as it is)
and per state whether it accepts. The JSON-schema subset:

* ``object`` with ``properties`` (emitted in schema order) and ``required``; optional
  properties may be emitted or skipped (the model chooses), no other property is ever
  emitted (as if ``additionalProperties`` were false); no ``properties``: ``{}``;
* ``string`` (any JSON string: escapes, and UTF-8 checked byte by byte, so every reply
  decodes), with ``minLength`` / ``maxLength`` in characters; ``integer``
  (``-?(0|[1-9][0-9]*)``, at most 19 digits); ``number`` (JSON's number, at most 16
  integer digits, 16 fraction digits and 3 exponent digits: bounded so that a value ends);
  ``boolean``; ``null``; ``array`` of ``items`` with ``minItems`` / ``maxItems``;
* ``enum`` and ``const`` of scalars (their ``json.dumps`` text), a list of types,
  ``anyOf``; the empty schema ``{}`` (or ``true``): any JSON value, with objects and
  arrays nested at most :data:`JSON_DEPTH` levels inside it (a grammar of bytes is
  regular, so nesting needs a bound);
* ``description``, ``title``, ``default``, ``examples``, ``format`` and such annotations
  are ignored; ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
  ``multipleOf`` and ``pattern`` are not enforced by the grammar but checked after
  decoding (:func:`jaxsci.common.lm.tools.validate`: a violation is reported in the
  call's ``error``); anything else (``$ref``, ``oneOf``, ``allOf``, ``not``, schema-valued
  ``additionalProperties``, ...) is refused with an error naming its path.

:func:`json_grammar` compiles a reply that is one JSON value, OpenAI's ``response_format``
(:func:`check_response_format`): ``json_object`` is any object (its members of any type),
``json_schema`` the schema's value, in the same canonical emission.

Strings without ``maxLength`` and arrays without ``maxItems`` are unbounded: a reply cut by
``max_tokens`` is then an unfinished call, reported as such.

With ``free_text=True`` (``tool_choice="auto"``) the language is the union of the call and
every text that does not begin with the marker ``<tool_call>\n``: a lazy grammar, triggered
by the start of the reply (as llama.cpp's grammar triggers are). While the reply is a
prefix of the marker both stay possible; once it departs from the marker the reply is free
text (state flagged :attr:`Grammar.free`: every token allowed, decoding ends at an
end-of-turn token), and once the marker is complete the call's grammar holds.

:class:`TokenMasks` turns a state into the set of vocabulary tokens whose bytes keep the
reply inside the language. The token byte strings are sorted by length once
(:class:`TokenIndex`); a state's mask walks all tokens through the transition table
together, one NumPy gather per byte position over the tokens still alive and that long
(the tokens that die are dropped at once, as a trie walk would prune them). Masks are
cached per state, and a call visits few states (a free string is one state).
End-of-turn tokens are allowed exactly in accepting states (and in free text); other
special tokens never inside a call. A state that accepts and has no way on (the closing
``}``) ends the call: the decoder stops without asking the model.

>>> from jaxsci.common.lm.tools import Tool
>>> g = tool_call_grammar([Tool("f", "", {"type": "object", "properties": {
...     "n": {"type": "integer"}}, "required": ["n"]})])
>>> g.matches('<tool_call>\n{"name": "f", "arguments": {"n": 42}}')
True
>>> g.matches('<tool_call>\n{"name": "f", "arguments": {"n": "42"}}')
False
>>> g.forced(g.start)[0]
b'<tool_call>\n{"name": "f", "arguments": {"n": '
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxsci.common.lm.tools import TOOL_CALL_PREFIX, Tool, as_tools

__all__ = ["Grammar", "TokenIndex", "TokenMasks", "tool_call_grammar", "json_grammar",
           "check_response_format", "token_bytes", "INTEGER_DIGITS", "JSON_DEPTH",
           "PARALLEL_SEPARATOR"]

INTEGER_DIGITS = 19  # int64's
JSON_DEPTH = 4  # nesting levels of objects/arrays inside a value of the empty schema {}
_NUMBER_INT, _NUMBER_FRAC, _NUMBER_EXP = 16, 16, 3
_PAD = 256
# Between two calls of a parallel reply (``tool_call_grammar(..., parallel=True)``): the
# first block's closing tag, a newline, and the next call up to its name.
PARALLEL_SEPARATOR = '\n</tool_call>\n<tool_call>\n{"name": '

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema",
                          "$comment", "$id", "format", "deprecated", "readOnly", "writeOnly",
                          "contentMediaType", "contentEncoding"})
_UNENFORCED = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                         "multipleOf", "pattern"})
_STRUCTURE = frozenset({"type", "enum", "const", "anyOf", "properties", "required",
                        "additionalProperties", "items", "minItems", "maxItems", "minLength",
                        "maxLength"})
_KNOWN = _ANNOTATIONS | _UNENFORCED | _STRUCTURE


def _bits(*spans) -> int:
    """A byte set as a 256-bit int: bytes, ``(lo, hi)`` inclusive ranges or strings."""
    m = 0
    for s in spans:
        if isinstance(s, str):
            for b in s.encode():
                m |= 1 << b
        elif isinstance(s, tuple):
            for b in range(s[0], s[1] + 1):
                m |= 1 << b
        else:
            m |= 1 << s
    return m


_ALL = (1 << 256) - 1
_DIGIT, _NONZERO, _HEX = _bits((0x30, 0x39)), _bits((0x31, 0x39)), _bits("0123456789abcdefABCDEF")
_CONT = _bits((0x80, 0xBF))
# A JSON string's plain characters: printable ASCII but the quote and the backslash.
_PLAIN = _bits((0x20, 0x7F)) & ~_bits('"\\')


# ----------------------------------------------------------------- the NFA


class _NFA:
    """Thompson's construction over bytes: edges labelled by byte sets, and epsilons."""

    def __init__(self):
        self.edges: list[list[tuple[int, int]]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def edge(self, a: int, mask: int, b: int | None = None) -> int:
        b = self.state() if b is None else b
        self.edges[a].append((mask, b))
        return b

    def lit(self, a: int, data: bytes, end: int | None = None) -> int:
        for i, byte in enumerate(data):
            a = self.edge(a, 1 << byte, end if i == len(data) - 1 else None)
        return a

    def join(self, ends: Sequence[int]) -> int:
        if len(ends) == 1:
            return ends[0]
        e = self.state()
        for x in ends:
            self.eps[x].append(e)
        return e

    def alt(self, a: int, branches) -> int:
        """The union of fragments, each a function ``start -> end``."""
        ends = []
        for build in branches:
            s = self.state()
            self.eps[a].append(s)
            ends.append(build(s))
        return self.join(ends)


class _Compiler:
    def __init__(self, nfa: _NFA, depth: int = JSON_DEPTH):
        self.nfa, self.depth = nfa, depth

    def value(self, a: int, schema, path: str) -> int:
        n = self.nfa
        if schema is True or (isinstance(schema, Mapping) and set(schema) <= _ANNOTATIONS):
            return self.anything(a, self.depth)  # {} (or true): any JSON value
        if not isinstance(schema, Mapping):
            raise ValueError(f"{path}: a schema must be a dict, got {schema!r}"[:200])
        unknown = sorted(set(schema) - _KNOWN)
        if unknown:
            raise ValueError(f"{path}: JSON-schema keyword(s) {unknown} are not supported by "
                             f"constrained decoding (supported: {sorted(_STRUCTURE)})")
        if "anyOf" in schema:
            subs = schema["anyOf"]
            if not isinstance(subs, list) or not subs:
                raise ValueError(f"{path}: anyOf must be a non-empty list, got {subs!r}")
            rest = {k: v for k, v in schema.items() if k != "anyOf" and k not in _ANNOTATIONS}
            if rest:
                raise ValueError(f"{path}: anyOf beside {sorted(rest)} is not supported; "
                                 "put them inside each alternative")
            return n.alt(a, [functools.partial(self.value, schema=s, path=f"{path}.anyOf[{i}]")
                             for i, s in enumerate(subs)])
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if not isinstance(values, list) or not values:
                raise ValueError(f"{path}: enum must be a non-empty list, got {values!r}")
            texts = []
            for v in values:
                if not (v is None or isinstance(v, str | bool | int | float)):
                    raise ValueError(f"{path}: only enums of scalars are supported, got {v!r}")
                texts.append(json.dumps(v, ensure_ascii=False).encode())
            return n.alt(a, [functools.partial(n.lit, data=t) for t in dict.fromkeys(texts)])
        types = schema.get("type")
        if types is None:
            raise ValueError(f"{path}: a schema needs a 'type' (or enum, const, anyOf), got "
                             f"{dict(schema)!r}"[:200])
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, list) or not names:
            raise ValueError(f"{path}: type must be a name or a list of names, got {types!r}")
        build = {"string": self.string, "integer": self.integer, "number": self.number,
                 "boolean": lambda a, s, p: n.alt(a, [functools.partial(n.lit, data=b"true"),
                                                      functools.partial(n.lit, data=b"false")]),
                 "null": lambda a, s, p: n.lit(a, b"null"), "object": self.object,
                 "array": self.array}
        for t in names:
            if t not in build:
                raise ValueError(f"{path}: unknown type {t!r} (one of {sorted(build)})")
        if len(names) == 1:
            return build[names[0]](a, schema, path)
        return n.alt(a, [functools.partial(build[t], s=schema, p=path) for t in names])

    def anything(self, a: int, depth: int) -> int:
        """Any JSON value with at most ``depth`` levels of objects and arrays inside it
        (a regular language needs a bound; a deeper value is cut off at the bound)."""
        n = self.nfa
        branches = [functools.partial(self.string, schema={}, path=""),
                    functools.partial(self.number, schema={}, path="")]
        branches += [functools.partial(n.lit, data=t) for t in (b"true", b"false", b"null")]
        if depth > 0:
            branches += [functools.partial(self.any_object, depth=depth - 1),
                         functools.partial(self.any_array, depth=depth - 1)]
        return n.alt(a, branches)

    def any_object(self, a: int, depth: int) -> int:
        """An object of any keys (each member ``"key": value``), values of any type."""
        n = self.nfa

        def member(s):
            return self.anything(n.lit(self.string(s, {}, ""), b": "), depth)

        end = n.state()
        for e in self._repeat(n.lit(a, b"{"), member, 0, None, sep=b", "):
            n.edge(e, _bits("}"), end)
        return end

    def any_array(self, a: int, depth: int) -> int:
        n = self.nfa
        end = n.state()
        for e in self._repeat(n.lit(a, b"["), lambda s: self.anything(s, depth), 0, None,
                              sep=b", "):
            n.edge(e, _bits("]"), end)
        return end

    @staticmethod
    def _count(schema, lo_key, hi_key, path) -> tuple[int, int | None]:
        lo, hi = schema.get(lo_key, 0), schema.get(hi_key)
        for k, v in ((lo_key, lo), (hi_key, hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{path}: {k} must be an int >= 0, got {v!r}")
        if hi is not None and hi < lo:
            raise ValueError(f"{path}: {hi_key}={hi} is below {lo_key}={lo}")
        return lo, hi

    def _repeat(self, a: int, one, lo: int, hi: int | None, sep: bytes = b"") -> list[int]:
        """``one`` repeated ``lo`` to ``hi`` times (``None``: unbounded), separated by
        ``sep``; returns the states where the repetition may end."""
        n = self.nfa
        exits, cur = ([a] if lo == 0 else []), a
        for k in range(lo):
            cur = one(n.lit(cur, sep) if k and sep else cur)
            if k == lo - 1:
                exits.append(cur)
        if hi is None and lo == 0:
            # One copy of ``one``, entered from ``a`` and again after each separator (two
            # copies would double the automaton at every level of nesting).
            entry = n.state()
            n.eps[a].append(entry)
            x = one(entry)
            exits.append(x)
            n.eps[n.lit(x, sep) if sep else x].append(entry)
        elif hi is None:
            back = one(n.lit(cur, sep) if sep else cur)
            n.eps[back].append(cur)
        else:
            for k in range(lo, hi):
                cur = one(n.lit(cur, sep) if k and sep else cur)
                exits.append(cur)
        return exits

    def char(self, a: int) -> int:
        """One character of a JSON string: plain ASCII, an escape, or a UTF-8 sequence."""
        n = self.nfa
        b = n.state()
        n.edge(a, _PLAIN, b)
        esc = n.edge(a, _bits("\\"))
        n.edge(esc, _bits('"\\/bfnrt'), b)
        h = n.edge(esc, _bits("u"))
        for _ in range(3):
            h = n.edge(h, _HEX)
        n.edge(h, _HEX, b)
        # RFC 3629's table of well-formed sequences (no overlongs, no surrogates).
        c1 = n.state()
        n.edge(c1, _CONT, b)
        c2 = n.state()
        n.edge(c2, _CONT, c1)
        c3 = n.state()
        n.edge(c3, _CONT, c2)
        n.edge(a, _bits((0xC2, 0xDF)), c1)
        n.edge(a, _bits((0xE1, 0xEC), (0xEE, 0xEF)), c2)
        n.edge(n.edge(a, _bits(0xE0)), _bits((0xA0, 0xBF)), c1)
        n.edge(n.edge(a, _bits(0xED)), _bits((0x80, 0x9F)), c1)
        n.edge(a, _bits((0xF1, 0xF3)), c3)
        n.edge(n.edge(a, _bits(0xF0)), _bits((0x90, 0xBF)), c2)
        n.edge(n.edge(a, _bits(0xF4)), _bits((0x80, 0x8F)), c2)
        return b

    def string(self, a: int, schema, path: str) -> int:
        lo, hi = self._count(schema, "minLength", "maxLength", path)
        n = self.nfa
        end = n.state()
        for e in self._repeat(n.lit(a, b'"'), self.char, lo, hi):
            n.edge(e, _bits('"'), end)
        return end

    def _digits(self, a: int, lo: int, hi: int) -> int:
        n = self.nfa
        return n.join(self._repeat(a, lambda s: n.edge(s, _DIGIT), lo, hi))

    def _int_part(self, a: int, max_digits: int) -> int:
        n = self.nfa
        d = n.state()
        n.eps[a].append(d)
        n.edge(a, _bits("-"), d)
        zero = n.edge(d, _bits("0"))
        more = self._digits(n.edge(d, _NONZERO), 0, max_digits - 1)
        return n.join([zero, more])

    def integer(self, a: int, schema, path: str) -> int:
        return self._int_part(a, INTEGER_DIGITS)

    def number(self, a: int, schema, path: str) -> int:
        n = self.nfa
        i = self._int_part(a, _NUMBER_INT)
        frac = self._digits(n.edge(i, _bits(".")), 1, _NUMBER_FRAC)
        f = n.join([i, frac])
        e = n.edge(f, _bits("eE"))
        s = n.state()
        n.eps[e].append(s)
        n.edge(e, _bits("+-"), s)
        return n.join([f, self._digits(s, 1, _NUMBER_EXP)])

    def object(self, a: int, schema, path: str) -> int:
        n = self.nfa
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        if not isinstance(props, Mapping):
            raise ValueError(f"{path}: properties must be a dict, got {props!r}"[:200])
        missing = sorted(required - set(props))
        if missing:
            raise ValueError(f"{path}: required names {missing}, not in its properties")
        extra = schema.get("additionalProperties", False)
        if not isinstance(extra, bool):
            raise ValueError(f"{path}: additionalProperties must be true or false here (no "
                             f"property beyond 'properties' is ever emitted), got {extra!r}")
        # cur[e]: where the object stands, e = whether a property was emitted (a comma next).
        cur = {False: n.lit(a, b"{")}
        for name, sub in props.items():
            key = n.state()
            if False in cur:
                n.eps[cur[False]].append(key)
            if True in cur:
                n.lit(cur[True], b", ", end=key)
            v = self.value(n.lit(key, json.dumps(name, ensure_ascii=False).encode() + b": "),
                           sub, f"{path}.{name}")
            if name in required:
                cur = {True: v}
            else:
                cur = {**({False: cur[False]} if False in cur else {}),
                       True: n.join([v, cur[True]]) if True in cur else v}
        end = n.state()
        for s in cur.values():
            n.edge(s, _bits("}"), end)
        return end

    def array(self, a: int, schema, path: str) -> int:
        n = self.nfa
        if not isinstance(schema.get("items"), Mapping):
            raise ValueError(f"{path}: an array needs an 'items' schema, got "
                             f"{schema.get('items')!r}")
        lo, hi = self._count(schema, "minItems", "maxItems", path)
        one = functools.partial(self.value, schema=schema["items"], path=f"{path}[]")
        end = n.state()
        for e in self._repeat(n.lit(a, b"["), one, lo, hi, sep=b", "):
            n.edge(e, _bits("]"), end)
        return end


# ----------------------------------------------------------------- the DFA


def _members(mask: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(mask.to_bytes(32, "little"), np.uint8),
                         bitorder="little").astype(bool)


def _determinize(nfa: _NFA, start: int, accepting: set[int], free: int | None):
    closures: dict[frozenset, frozenset] = {}

    def closure(states) -> frozenset:
        key = frozenset(states)
        if key not in closures:
            seen, stack = set(key), list(key)
            while stack:
                for t in nfa.eps[stack.pop()]:
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            closures[key] = frozenset(seen)
        return closures[key]

    first = closure([start])
    ids: dict[frozenset, int] = {first: 1}
    order = [first]
    rows = [np.zeros(_PAD + 1, np.int32)]  # 0: dead
    for sset in order:  # grows while iterating
        edges = [e for s in sset for e in nfa.edges[s]]
        # The byte classes: bytes that no edge tells apart share a target.
        classes = [_ALL]
        for mask in {m for m, _ in edges}:
            classes = [p for c in classes for p in (c & mask, c & ~mask) if p]
        row = np.zeros(_PAD + 1, np.int32)
        for c in classes:
            b = (c & -c).bit_length() - 1
            targets = {t for m, t in edges if m >> b & 1}
            if not targets:
                continue
            nxt = closure(targets)
            if nxt not in ids:
                ids[nxt] = len(order) + 1
                order.append(nxt)
            row[:_PAD][_members(c)] = ids[nxt]
        rows.append(row)
    trans = np.stack(rows)
    trans[:, _PAD] = np.arange(len(trans))
    accept = np.array([False] + [bool(s & accepting) for s in order])
    is_free = np.array([False] + [free is not None and free in s for s in order])
    return trans, accept, is_free


class Grammar:
    """A deterministic automaton over bytes (see the module docstring).

    Attributes:
      trans: ``(states, 257)`` int32 transitions; state 0 is dead (it rejects), column
        256 (padding) maps each state to itself.
      accept: ``(states,)`` bool, the accepting states.
      free: ``(states,)`` bool, the free-text states (everything allowed from there on).
      start: the initial state.
    """

    def __init__(self, trans: np.ndarray, accept: np.ndarray, free: np.ndarray,
                 start: int = 1):
        self.trans, self.accept, self.free, self.start = trans, accept, free, start
        self.final = accept & (trans[:, :_PAD] == 0).all(axis=1)

    @property
    def n_states(self) -> int:
        return len(self.trans)

    def step(self, state: int, data: bytes | str) -> int:
        """The state after ``data`` (0: rejected)."""
        if isinstance(data, str):
            data = data.encode()
        for b in data:
            state = int(self.trans[state, b])
            if state == 0:
                break
        return state

    def matches(self, text: bytes | str) -> bool:
        """Whether ``text`` is in the language, whole."""
        return bool(self.accept[self.step(self.start, text)])

    def is_prefix(self, text: bytes | str) -> bool:
        """Whether ``text`` begins some string of the language."""
        return self.step(self.start, text) != 0

    def is_final(self, state: int) -> bool:
        """An accepting state with no way on: the value is complete."""
        return bool(self.final[state])

    def forced(self, state: int) -> tuple[bytes, int]:
        """The bytes every continuation from ``state`` begins with, and the state after.

        The run stops at an accepting state, at a choice, and before an unfinished UTF-8
        character (so that the bytes decode).
        """
        out, s = bytearray(), state
        while not self.accept[s]:
            nxt = np.flatnonzero(self.trans[s, :_PAD])
            if len(nxt) != 1:
                break
            out.append(int(nxt[0]))
            s = int(self.trans[s, nxt[0]])
        while out:
            try:
                out.decode()
                break
            except UnicodeDecodeError:
                out.pop()
        return bytes(out), self.step(state, bytes(out))

    def __repr__(self) -> str:
        return f"Grammar({self.n_states} states)"


def tool_call_grammar(tools: Iterable[Tool | Mapping[str, Any]], *, name: str | None = None,
                      free_text: bool = False, parallel: bool = False) -> Grammar:
    """The grammar of one tool call in the prompt protocol (see the module docstring).

    Args:
      tools: the tools offered (:func:`jaxsci.common.lm.tools.as_tools`).
      name: only this tool may be called (a forced ``tool_choice``).
      free_text: also accept any reply that does not begin with ``<tool_call>\\n``
        (``tool_choice="auto"``).
      parallel: one call or more (OpenAI's ``parallel_tool_calls``): after a call's
        closing ``}`` the reply may end, or go on with :data:`PARALLEL_SEPARATOR` and
        another call (any number of them; the model decides, and ``max_tokens`` bounds
        it). The calls' tools are chosen independently.

    Returns:
      the compiled :class:`Grammar`.

    Raises:
      ValueError: no tools, an unknown ``name``, or a schema outside the subset (naming
        the tool and the path).
    """
    tools = as_tools(tools)
    if not tools:
        raise ValueError("tools must hold at least one tool to build a tool-call grammar")
    if name is not None:
        chosen = [t for t in tools if t.name == name]
        if not chosen:
            raise ValueError(f"name: unknown tool {name!r}; the known tools are "
                             f"{[t.name for t in tools]}")
        tools = tuple(chosen)
    # Not sort_keys: the properties are emitted in the schema's order.
    return _compiled(tuple(json.dumps(t.to_openai()["function"])
                           for t in tools), bool(free_text), bool(parallel))


@functools.lru_cache(maxsize=64)
def _compiled(specs: tuple[str, ...], free_text: bool, parallel: bool = False) -> Grammar:
    nfa = _NFA()
    c = _Compiler(nfa)
    start = nfa.state()
    path = [start]
    for b in TOOL_CALL_PREFIX.encode():
        path.append(nfa.edge(path[-1], 1 << b))
    head = nfa.lit(path[-1], b'{"name": ')
    ends = []
    for spec in specs:
        fn = json.loads(spec)
        s = nfa.state()
        nfa.eps[head].append(s)
        k = nfa.lit(s, json.dumps(fn["name"]).encode() + b', "arguments": ')
        ends.append(nfa.lit(c.value(k, fn["parameters"], f"tool {fn['name']!r}: arguments"),
                            b"}"))
    end = nfa.join(ends)
    if parallel:  # the separator leads back to the next call's '{"name": '
        nfa.lit(end, PARALLEL_SEPARATOR.encode(), end=head)
    accepting = {end}
    free = None
    if free_text:
        free = nfa.state()
        nfa.edge(free, _ALL, free)
        for s, b in zip(path, TOOL_CALL_PREFIX.encode(), strict=False):
            nfa.edge(s, _ALL & ~(1 << b), free)
        accepting |= {free, *path[:-1]}
    return Grammar(*_determinize(nfa, start, accepting, free))


def json_grammar(schema: Mapping[str, Any] | None = None, *, depth: int = JSON_DEPTH
                 ) -> Grammar:
    """The grammar of a reply that is one JSON value: OpenAI's ``response_format``.

    Args:
      schema: a JSON schema in the subset of the module docstring (``json_schema`` mode);
        ``None``: any JSON *object* (``json_object`` mode).
      depth: the most levels of objects and arrays nested inside a value of the empty
        schema ``{}`` (and inside ``json_object``'s members).

    Returns:
      the compiled :class:`Grammar` (cached: the same schema gives the same object). The
      emission is canonical as for tool calls (``json.dumps``'s separators, properties
      in the schema's order).

    Raises:
      ValueError: a schema outside the subset (naming the path), or a bad ``depth``.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= 8:
        raise ValueError(f"depth must be an int in [0, 8], got {depth!r}")
    if schema is not None and not isinstance(schema, Mapping):
        raise ValueError(f"schema must be a JSON schema (a dict) or None, got "
                         f"{type(schema).__name__}")
    return _compiled_json(None if schema is None else json.dumps(schema), depth)


@functools.lru_cache(maxsize=64)
def _compiled_json(spec: str | None, depth: int) -> Grammar:
    nfa = _NFA()
    c = _Compiler(nfa, depth)
    start = nfa.state()
    if spec is None:
        end = c.any_object(start, depth)
    else:
        end = c.value(start, json.loads(spec), "response_format.json_schema.schema")
    return Grammar(*_determinize(nfa, start, {end}, None))


def check_response_format(response_format) -> Grammar | None:
    """OpenAI's ``response_format``, checked and compiled: ``None`` for plain text, else
    the :func:`json_grammar` to decode the reply under.

    Accepted: ``None``, ``{"type": "text"}``, ``{"type": "json_object"}`` (any JSON
    object), ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``
    (``strict`` and the other fields of ``json_schema`` are read as OpenAI's strict mode:
    the grammar always holds the reply to the schema's subset).

    Raises:
      ValueError: another shape, or a schema outside the subset, naming what came.
    """
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise ValueError(f"response_format must be a dict such as {{'type': 'json_object'}}, "
                         f"got {type(response_format).__name__}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_grammar()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
            raise ValueError("response_format: type 'json_schema' needs json_schema = "
                             "{'name': ..., 'schema': {...}}, got "
                             f"{response_format.get('json_schema')!r}"[:200])
        return json_grammar(spec["schema"])
    raise ValueError(f"response_format.type must be 'text', 'json_object' or 'json_schema', "
                     f"got {kind!r}")


# ----------------------------------------------------------------- token masks


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character standing for each byte."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:  # bytes without a printable glyph are mapped past U+00FF, in order
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


def token_bytes(tokenizer) -> list[bytes]:
    """Each token's bytes, id by id (a special token's are its text's UTF-8).

    Args:
      tokenizer: a byte-level :class:`~jaxsci.common.lm.bpe.BPETokenizer`.
    """
    table = _byte_of_char()
    return [t.encode() if i in tokenizer.special_ids else
            b"".join(bytes([table[c]]) if c in table else c.encode() for c in t)
            for i, t in enumerate(tokenizer.tokens)]


class TokenIndex:
    """A vocabulary's token bytes, arranged once for walking every token through a grammar.

    Args:
      tokens: each token's bytes (:func:`token_bytes`), id by id.
      special_ids: ids that are never text (control tokens): allowed only as ``stop_ids``
        in accepting states, or anywhere in free text.
      stop_ids: the end-of-turn ids.
      vocab_size: the masks' length (the model's vocabulary, at least ``len(tokens)``).
    """

    def __init__(self, tokens: Sequence[bytes], special_ids: Iterable[int],
                 stop_ids: Iterable[int], vocab_size: int | None = None):
        self.tokens = [bytes(t) for t in tokens]
        self.vocab_size = len(self.tokens) if vocab_size is None else int(vocab_size)
        if self.vocab_size < len(self.tokens):
            raise ValueError(f"vocab_size={vocab_size} is below the {len(self.tokens)} tokens")
        lengths = np.array([len(t) for t in self.tokens])
        self.order = np.argsort(lengths, kind="stable")
        sorted_len = lengths[self.order]
        width = int(sorted_len[-1]) if len(sorted_len) else 0
        # Column j holds byte j of every token (sorted by length), _PAD past its end.
        cols = np.full((max(width, 1), len(self.tokens)), _PAD, np.uint16)
        for row, i in enumerate(self.order):
            cols[:lengths[i], row] = np.frombuffer(self.tokens[i], np.uint8)
        self.columns = cols
        # Tokens longer than j bytes are the rows from starts[j] on.
        self.starts = np.searchsorted(sorted_len, np.arange(width), side="right")
        self.text = np.zeros(self.vocab_size, bool)
        self.text[:len(self.tokens)] = lengths > 0
        self.text[[i for i in special_ids if 0 <= i < self.vocab_size]] = False
        self.stops = np.zeros(self.vocab_size, bool)
        self.stops[[i for i in stop_ids if 0 <= i < self.vocab_size]] = True

    def ends(self, grammar: Grammar, state: int) -> np.ndarray:
        """Every token's state after walking its bytes from ``state`` (0: rejected), by id."""
        trans = grammar.trans
        rows = np.arange(len(self.tokens))  # the live tokens' rows, in length order
        cur = np.full(len(self.tokens), state, np.int32)
        for j, lo in enumerate(self.starts):
            # rows[:k] have ended (length <= j); the rest read byte j, and those that
            # die are dropped, so that a state allowing few tokens costs little.
            k = int(np.searchsorted(rows, lo))
            if k == len(rows):
                break
            nxt = trans[cur[k:], self.columns[j][rows[k:]]]
            keep = nxt != 0
            rows = np.concatenate([rows[:k], rows[k:][keep]])
            cur = np.concatenate([cur[:k], nxt[keep]])
        out = np.zeros(len(self.tokens), np.int32)
        out[self.order[rows]] = cur
        return out


class TokenMasks:
    """The allowed next tokens of each state of a grammar, over a vocabulary (cached).

    Args:
      grammar: the :class:`Grammar`.
      index: the vocabulary (:class:`TokenIndex`).
    """

    def __init__(self, grammar: Grammar, index: TokenIndex):
        self.grammar, self.index = grammar, index
        self._masks: dict[int, np.ndarray] = {}

    def allowed(self, state: int) -> np.ndarray:
        """The ``(vocab_size,)`` bool mask of the tokens allowed next in ``state``."""
        m = self._masks.get(state)
        if m is None:
            g, ix = self.grammar, self.index
            m = np.zeros(ix.vocab_size, bool)
            if g.free[state]:
                m[:len(ix.tokens)] = True
            else:
                m[:len(ix.tokens)] = ix.ends(g, state) != 0
                m &= ix.text
                if g.accept[state]:
                    m |= ix.stops
            if not m.any():
                raise RuntimeError(f"grammar state {state} allows no token of the vocabulary")
            self._masks[state] = m
        return m

    def advance(self, state: int, token_id: int) -> int:
        """The state after the token ``token_id`` (free text stays free)."""
        if self.grammar.free[state]:
            return state
        return self.grammar.step(state, self.index.tokens[token_id])
