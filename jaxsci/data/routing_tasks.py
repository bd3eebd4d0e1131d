r"""Forced-choice task families for prompt routing (``jaxsci.agents.tampo``).

Twelve small task families, each a generator of two-option questions with one correct
option: arithmetic, parity, comparison, capitals, antonyms, plurals, the next letter,
animal-or-object, sentiment, true-or-false facts, colours of things, and opposites of
directions. They are short on purpose (a 135M model is scored by option scoring on one
CPU core); what matters for routing is that they differ in how hard they are and in
which prompt and which depth of the model reads them best.

:func:`items` draws ``n`` items of a family with a seeded ``numpy`` generator (same seed,
same items); the correct option sits first in half of them (exactly, for even ``n``),
so chance accuracy is 0.5 and a readout that always answers the same label scores 0.5.

>>> [t.name for t in FAMILIES][:3]
['arithmetic', 'parity', 'compare']
>>> it = items(FAMILIES[1], 2, seed=0)
>>> len(it), sorted(x.answer for x in it)
(2, [0, 1])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from jaxsci.core.validation import check_int

__all__ = ["FAMILIES", "Family", "Item", "family", "items"]


class Item(NamedTuple):
    """One forced-choice question: ``options[answer]`` is correct."""

    question: str
    options: tuple[str, str]
    answer: int


class Family(NamedTuple):
    """A task family: a name, a one-line description and a generator of ``(q, right, wrong)``."""

    name: str
    description: str
    draw: Callable[[np.random.Generator], tuple[str, str, str]]


def _arith(r):
    a, b = int(r.integers(2, 20)), int(r.integers(2, 20))
    return f"What is {a} + {b}?", str(a + b), str(a + b + int(r.choice([-3, -2, 2, 3])))


def _parity(r):
    n = int(r.integers(3, 99))
    return f"Is {n} even or odd?", ("even" if n % 2 == 0 else "odd"), (
        "odd" if n % 2 == 0 else "even")


def _compare(r):
    a, b = r.choice(np.arange(1, 100), 2, replace=False)
    return f"Which number is larger: {a} or {b}?", str(max(a, b)), str(min(a, b))


_CAPITALS = [("France", "Paris", "Lyon"), ("Japan", "Tokyo", "Osaka"),
             ("Italy", "Rome", "Milan"), ("Spain", "Madrid", "Seville"),
             ("Germany", "Berlin", "Munich"), ("Canada", "Ottawa", "Toronto"),
             ("Egypt", "Cairo", "Luxor"), ("Russia", "Moscow", "Kazan"),
             ("China", "Beijing", "Shanghai"), ("England", "London", "Leeds"),
             ("Greece", "Athens", "Patras"), ("Kenya", "Nairobi", "Mombasa")]
_ANTONYMS = [("hot", "cold", "warm"), ("big", "small", "large"), ("up", "down", "over"),
             ("fast", "slow", "quick"), ("happy", "sad", "glad"), ("light", "dark", "bright"),
             ("old", "young", "aged"), ("open", "closed", "wide"), ("hard", "soft", "firm"),
             ("early", "late", "soon"), ("full", "empty", "whole"), ("rich", "poor", "wealthy")]
_PLURALS = [("mouse", "mice", "mouses"), ("child", "children", "childs"),
            ("foot", "feet", "foots"), ("tooth", "teeth", "tooths"),
            ("man", "men", "mans"), ("goose", "geese", "gooses"), ("box", "boxes", "boxs"),
            ("city", "cities", "citys"), ("leaf", "leaves", "leafs"),
            ("knife", "knives", "knifes"), ("person", "people", "persons"),
            ("woman", "women", "womans")]
_ANIMALS = ["dog", "cat", "horse", "cow", "lion", "tiger", "rabbit", "sheep", "eagle", "frog"]
_OBJECTS = ["table", "chair", "spoon", "lamp", "pencil", "window", "bottle", "shoe", "clock"]
_POS = ["I loved this film", "What a wonderful day", "The food was great",
        "This is the best gift", "I am so happy today", "The team played brilliantly"]
_NEG = ["I hated this film", "What a terrible day", "The food was awful",
        "This is the worst gift", "I am so sad today", "The team played badly"]
_FACTS = [("The sun is hot.", True), ("Fish live in water.", True), ("Ice is cold.", True),
          ("Birds can fly.", True), ("Snow is white.", True), ("Grass is green.", True),
          ("The moon is a star.", False), ("Cats can bark.", False),
          ("Fire is cold.", False), ("Water is dry.", False), ("Dogs have wings.", False),
          ("Stones can swim.", False)]
_COLOURS = [("the sky on a clear day", "blue", "green"), ("grass", "green", "red"),
            ("snow", "white", "black"), ("a banana", "yellow", "blue"),
            ("coal", "black", "white"), ("a tomato", "red", "blue"),
            ("an orange", "orange", "purple"), ("milk", "white", "green"),
            ("the night sky", "black", "yellow"), ("a lemon", "yellow", "black")]
_DIRECTIONS = [("north", "south", "east"), ("left", "right", "up"), ("east", "west", "north"),
               ("top", "bottom", "left"), ("in", "out", "on"), ("front", "back", "side"),
               ("above", "below", "beside"), ("south", "north", "west")]


def _pick(table):
    return lambda r: table[int(r.integers(len(table)))]


def _capital(r):
    c, a, b = _pick(_CAPITALS)(r)
    return f"What is the capital of {c}?", a, b


def _antonym(r):
    w, a, b = _pick(_ANTONYMS)(r)
    return f"What is the opposite of '{w}'?", a, b


def _plural(r):
    w, a, b = _pick(_PLURALS)(r)
    return f"What is the plural of '{w}'?", a, b


def _next_letter(r):
    i = int(r.integers(0, 23))
    abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return f"Which letter comes right after {abc[i]}?", abc[i + 1], abc[i + 3]


def _animal(r):
    a = _ANIMALS[int(r.integers(len(_ANIMALS)))]
    o = _OBJECTS[int(r.integers(len(_OBJECTS)))]
    return "Which one is an animal?", a, o


def _sentiment(r):
    pos = bool(r.integers(2))
    s = (_POS if pos else _NEG)[int(r.integers(len(_POS)))]
    return f"Is the sentence '{s}' positive or negative?", ("positive" if pos else
                                                            "negative"), (
        "negative" if pos else "positive")


def _fact(r):
    s, t = _pick(_FACTS)(r)
    return f"True or false: {s}", ("true" if t else "false"), ("false" if t else "true")


def _colour(r):
    w, a, b = _pick(_COLOURS)(r)
    return f"What colour is {w}?", a, b


def _direction(r):
    w, a, b = _pick(_DIRECTIONS)(r)
    return f"What is the opposite direction of '{w}'?", a, b


FAMILIES: tuple[Family, ...] = (
    Family("arithmetic", "add two small numbers", _arith),
    Family("parity", "say whether a number is even or odd", _parity),
    Family("compare", "pick the larger of two numbers", _compare),
    Family("capitals", "name a country's capital", _capital),
    Family("antonyms", "pick the opposite of a word", _antonym),
    Family("plurals", "pick a noun's plural", _plural),
    Family("next_letter", "pick the next letter of the alphabet", _next_letter),
    Family("animal", "pick the animal among an animal and an object", _animal),
    Family("sentiment", "classify a short sentence's sentiment", _sentiment),
    Family("facts", "judge a simple statement true or false", _fact),
    Family("colours", "name the colour of a thing", _colour),
    Family("directions", "pick the opposite direction", _direction),
)
"""The task bank, in a fixed order (a config names families by name)."""


def family(name: str) -> Family:
    """The family called ``name`` (the error lists the known names)."""
    for f in FAMILIES:
        if f.name == name:
            return f
    raise ValueError(f"task family must be one of {[f.name for f in FAMILIES]}, got {name!r}")


def items(fam: Family, n: int, seed: int = 0) -> list[Item]:
    """``n`` items of ``fam`` (seeded; the correct option first in items 0, 2, 4, ...).

    Args:
      fam: a :class:`Family` (or its name).
      n: number of items, >= 1.
      seed: the generator's seed (same seed, same items).

    Returns:
      a list of :class:`Item`.
    """
    if isinstance(fam, str):
        fam = family(fam)
    if not isinstance(fam, Family):
        raise TypeError(f"fam must be a Family or a family name, got {type(fam).__name__}")
    n = check_int("n", n, min=1)
    r = np.random.default_rng([int(seed), FAMILIES.index(fam) if fam in FAMILIES else 99])
    out = []
    for i in range(n):
        q, right, wrong = fam.draw(r)
        first = i % 2 == 0
        out.append(Item(q, (right, wrong) if first else (wrong, right), 0 if first else 1))
    return out
