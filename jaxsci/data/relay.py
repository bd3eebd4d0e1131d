"""Relay chains: a task bank for textual optimisation of deep LLM chains (TextResNet).

A chain of ``depth`` nodes must together produce one item of each kind in its
``spec`` (a multiset order the checker ignores). Node ``i``'s text parameter is an
instruction ``"Add one <kind>."``; ``faults`` nodes start with a corrupted instruction
naming a kind outside the spec. The deterministic checker compares the final items with
the spec and returns a loss (number of issues) and textual feedback, one component per
issue: ``"'<item>' (a <kind>) was not asked for."`` for each surplus item and
``"No <kind> was added."`` for each missing kind.

>>> c = make_chain(0, depth=4, faults=1)
>>> len(c.instructions), len(c.faulty)
(4, 1)
>>> loss, comps = check(c.spec, [item_for(k, 0) for k in c.spec])
>>> loss, comps
(0, [])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["CATALOGUE", "KINDS", "Chain", "check", "instruction", "kind_of", "item_for",
           "make_chain", "make_bank"]

CATALOGUE: dict[str, tuple[str, ...]] = {
    "fruit": ("apple", "pear", "plum", "mango"),
    "colour": ("red", "blue", "green", "violet"),
    "animal": ("horse", "otter", "tiger", "rabbit"),
    "metal": ("copper", "iron", "silver", "zinc"),
    "city": ("Paris", "Lima", "Oslo", "Cairo"),
    "tree": ("oak", "birch", "maple", "cedar"),
    "tool": ("hammer", "saw", "wrench", "chisel"),
    "gem": ("ruby", "opal", "pearl", "jade"),
    "drink": ("tea", "coffee", "milk", "cocoa"),
    "planet": ("Mars", "Venus", "Saturn", "Jupiter"),
    "bird": ("robin", "eagle", "owl", "crow"),
    "fabric": ("wool", "silk", "linen", "denim"),
    "vehicle": ("bus", "truck", "tram", "canoe"),
    "flower": ("rose", "tulip", "lily", "daisy"),
    "sport": ("tennis", "rugby", "golf", "hockey"),
    "spice": ("pepper", "cumin", "ginger", "nutmeg"),
    "instrument": ("violin", "flute", "drum", "harp"),
    "fish": ("salmon", "trout", "cod", "tuna"),
    "weather": ("rain", "snow", "fog", "hail"),
    "shape": ("circle", "square", "cube", "cone"),
    "insect": ("ant", "bee", "moth", "beetle"),
    "language": ("French", "Hindi", "Swahili", "Welsh"),
    "dance": ("tango", "waltz", "salsa", "polka"),
    "cheese": ("brie", "feta", "gouda", "cheddar"),
}
KINDS = tuple(CATALOGUE)
_KIND_OF = {item: k for k, items in CATALOGUE.items() for item in items}


class Chain(NamedTuple):
    """One relay chain: ``spec`` (the kinds the output must hold, one per node),
    ``instructions`` (the nodes' starting parameters), ``faulty`` (indices of the
    corrupted nodes, sorted)."""

    spec: tuple[str, ...]
    instructions: tuple[str, ...]
    faulty: tuple[int, ...]


def instruction(kind: str) -> str:
    """The parameter text asking a node for one item of ``kind``."""
    if kind not in CATALOGUE:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return f"Add one {kind}."


def kind_of(item: str) -> str | None:
    """The kind of a catalogue item (``None`` for an unknown item)."""
    return _KIND_OF.get(item)


def item_for(kind: str, seed: int) -> str:
    """A deterministic item of ``kind`` (the ``seed``-th, cyclically)."""
    if kind not in CATALOGUE:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    items = CATALOGUE[kind]
    return items[int(seed) % len(items)]


def make_chain(seed: int, depth: int, faults: int = 1) -> Chain:
    """A random chain of ``depth`` nodes with ``faults`` corrupted instructions.

    Args:
      seed: an int >= 0.
      depth: nodes, 2 .. 20 (distinct spec kinds; the corruptions use other kinds).
      faults: corrupted nodes, 1 .. min(2, depth).
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    if isinstance(depth, bool) or not isinstance(depth, int | np.integer) or \
            not 2 <= depth <= 20:
        raise ValueError(f"depth must be an int in [2, 20], got {depth!r}")
    if isinstance(faults, bool) or not isinstance(faults, int | np.integer) or \
            not 1 <= faults <= min(2, depth):
        raise ValueError(f"faults must be an int in [1, {min(2, depth)}], got {faults!r}")
    rng = np.random.default_rng([int(seed), int(depth), int(faults)])
    kinds = [KINDS[i] for i in rng.permutation(len(KINDS))]
    spec, spare = kinds[:depth], kinds[depth:]
    faulty = sorted(int(i) for i in rng.choice(depth, size=faults, replace=False))
    instr = [instruction(k) for k in spec]
    for j, i in enumerate(faulty):
        instr[i] = instruction(spare[j])
    return Chain(tuple(spec), tuple(instr), tuple(faulty))


def make_bank(seed: int, depth: int, n: int) -> list[Chain]:
    """``n`` chains of one depth; even-indexed ones have one fault, odd ones two
    (depth >= 2)."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    return [make_chain(int(seed) * 1000 + i, depth, 1 + (i % 2)) for i in range(n)]


def check(spec: Sequence[str], items: Sequence[str]) -> tuple[int, list[str]]:
    """The deterministic checker loss and its textual feedback components.

    Args:
      spec: the kinds the output must hold.
      items: the chain's final items (order ignored).

    Returns:
      ``(loss, components)``: the number of issues and one sentence per issue (surplus
      items first, in output order, then missing kinds in spec order).
    """
    if isinstance(spec, str) or isinstance(items, str):
        raise TypeError("spec and items must be sequences of str, not a str")
    need = Counter(spec)
    comps, surplus = [], []
    for it in items:
        k = kind_of(it)
        if k is not None and need[k] > 0:
            need[k] -= 1
        else:
            surplus.append(it)
    for it in surplus:
        k = kind_of(it)
        art = "an" if k and k[0] in "aeiou" else "a"
        comps.append(f"'{it}' ({art + ' ' + k if k else 'unknown'}) was not asked for.")
    for k in spec:
        if need[k] > 0:
            comps.append(f"No {k} was added.")
            need[k] -= 1
    return len(comps), comps
