"""Synthetic training corpora, generated in-package (no downloads).

Four tasks, each a stream of newline-terminated samples with enough structure for a
small model to predict much of it, but not all:

* ``arithmetic``: ``"478+65=543\\n"``, ``"902-317=585\\n"``: 1-3 digit operands,
  results that need carries and borrows.
* ``grammar``: sentences of a small probabilistic context-free grammar
  (``"the old robot chases a red bird near the river.\\n"``), with optional
  prepositional phrases (recursion) and non-uniform rule and word probabilities.
* ``recall``: key-value recall, ``"k3:q7 b1:x2 m8:z5 ?b1=x2\\n"``: the answer can only
  come from attending back to the matching key.
* ``brackets``: a code-like Dyck language over ``() [] {}`` with identifiers inside
  (``"f(a[b]{c})\\n"``): the closing brackets are forced by the stack, the openings
  are free.

A *document* is ``BOS`` followed by samples of one task until it is long enough, so a
model prompted with samples of a task keeps producing that task. Randomness comes
from a JAX key (its bits seed NumPy's generator: the text is built on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from jaxsci.common.lm.tokenizer import BOS, ByteTokenizer
from jaxsci.core.validation import check_choice, check_int, check_key

__all__ = ["TASKS", "sample_text", "is_valid", "documents", "prompts", "rng_from_key"]

TASKS = ("arithmetic", "grammar", "recall", "brackets")
_TOK = ByteTokenizer()


def rng_from_key(key: jax.Array) -> np.random.Generator:
    """A NumPy generator seeded by the bits of a JAX key (same key, same text)."""
    check_key("key", key)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())


# ----------------------------------------------------------------- tasks


def _number(rng: np.random.Generator) -> int:
    digits = rng.integers(1, 4)
    return int(rng.integers(10 ** (digits - 1) if digits > 1 else 0, 10**digits))


def _arithmetic(rng: np.random.Generator) -> str:
    a, b = _number(rng), _number(rng)
    if rng.random() < 0.5:
        return f"{a}+{b}={a + b}\n"
    a, b = max(a, b), min(a, b)
    return f"{a}-{b}={a - b}\n"


# A probabilistic context-free grammar: nonterminal -> [(probability, expansion)].
_GRAMMAR = {
    "S": [(1.0, ["NP", "VP"])],
    "NP": [(0.55, ["Det", "N"]), (0.3, ["Det", "Adj", "N"]), (0.15, ["Det", "N", "PP"])],
    "VP": [(0.45, ["V", "NP"]), (0.3, ["V"]), (0.25, ["V", "NP", "PP"])],
    "PP": [(1.0, ["P", "NP"])],
}
_WORDS = {
    "Det": (["the", "a", "every", "some"], [0.5, 0.3, 0.1, 0.1]),
    "N": (["cat", "dog", "bird", "child", "robot", "river", "garden", "teacher"],
          [0.2, 0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.05]),
    "Adj": (["small", "red", "quiet", "happy", "old"], [0.3, 0.2, 0.2, 0.2, 0.1]),
    "V": (["sees", "likes", "chases", "finds", "builds", "hears"],
          [0.3, 0.2, 0.2, 0.1, 0.1, 0.1]),
    "P": (["near", "with", "under", "behind"], [0.4, 0.3, 0.2, 0.1]),
}


def _expand(symbol: str, rng: np.random.Generator, depth: int) -> list[str]:
    if symbol in _WORDS:
        words, probs = _WORDS[symbol]
        return [words[rng.choice(len(words), p=probs)]]
    rules = _GRAMMAR[symbol]
    if depth > 3:  # cut the recursion (NP -> Det N PP -> ...) after a few levels
        rules = [r for r in rules if "PP" not in r[1]] or rules
    probs = np.array([p for p, _ in rules])
    _, rhs = rules[rng.choice(len(rules), p=probs / probs.sum())]
    return [w for s in rhs for w in _expand(s, rng, depth + 1)]


def _grammar(rng: np.random.Generator) -> str:
    return " ".join(_expand("S", rng, 0)) + ".\n"


_KEY_LETTERS = "abcdefghkmnpqrstuvwxyz"


def _recall(rng: np.random.Generator) -> str:
    n = int(rng.integers(2, 5))
    keys: list[str] = []
    while len(keys) < n:
        k = f"{rng.choice(list(_KEY_LETTERS))}{rng.integers(10)}"
        if k not in keys:
            keys.append(k)
    vals = [f"{rng.choice(list(_KEY_LETTERS))}{rng.integers(10)}" for _ in keys]
    q = int(rng.integers(n))
    pairs = " ".join(f"{k}:{v}" for k, v in zip(keys, vals, strict=True))
    return f"{pairs} ?{keys[q]}={vals[q]}\n"


_OPEN = "([{"
_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _brackets(rng: np.random.Generator) -> str:
    out = [str(rng.choice(list("fgh")))]
    stack: list[str] = []
    steps = int(rng.integers(2, 9))  # number of openings
    opened = 0
    while opened < steps or stack:
        if opened < steps and (not stack or rng.random() < 0.55) and len(stack) < 4:
            b = _OPEN[rng.choice(3, p=[0.5, 0.3, 0.2])]
            out.append(b)
            stack.append(b)
            opened += 1
            if rng.random() < 0.6:
                out.append(str(rng.choice(list("abcxyz"))))
        else:
            out.append(_CLOSE[stack.pop()])
    return "".join(out) + "\n"


_SAMPLERS = {
    "arithmetic": _arithmetic,
    "grammar": _grammar,
    "recall": _recall,
    "brackets": _brackets,
}


def sample_text(task: str, rng: np.random.Generator) -> str:
    """One newline-terminated sample of ``task``."""
    check_choice("task", task, TASKS)
    return _SAMPLERS[task](rng)


def _parse(symbol: str, words: list[str], i: int) -> set[int]:
    """End indices of every way ``symbol`` derives ``words[i:end]``."""
    if symbol in _WORDS:
        return {i + 1} if i < len(words) and words[i] in _WORDS[symbol][0] else set()
    ends: set[int] = set()
    for _, rhs in _GRAMMAR[symbol]:
        starts = {i}
        for sym in rhs:
            starts = {e for st in starts for e in _parse(sym, words, st)}
        ends |= starts
    return ends


def is_valid(task: str, line: str) -> bool:
    """Whether ``line`` (one sample without its newline) is a correct sample of ``task``.

    arithmetic: the result is right; grammar: the grammar derives the sentence;
    recall: the answer is the value of the queried key; brackets: a name followed by a
    balanced bracket sequence (identifiers allowed inside).
    """
    check_choice("task", task, TASKS)
    try:
        if task == "arithmetic":
            lhs, rhs = line.split("=")
            op = "+" if "+" in lhs else "-"
            a, b = (int(x) for x in lhs.split(op))
            return rhs.isdigit() and int(rhs) == (a + b if op == "+" else a - b)
        if task == "grammar":
            return line.endswith(".") and len(line.split()) > 1 and (
                len(line[:-1].split()) in _parse("S", line[:-1].split(), 0))
        if task == "recall":
            pairs, query = line.split(" ?")
            table = dict(p.split(":") for p in pairs.split(" "))
            k, v = query.split("=")
            return table.get(k) == v
    except ValueError:
        return False
    stack = []
    if not line or line[0] not in "fgh":
        return False
    for ch in line[1:]:
        if ch in _CLOSE:
            stack.append(_CLOSE[ch])
        elif ch in ")]}":
            if not stack or stack.pop() != ch:
                return False
        elif ch not in "abcxyz":
            return False
    return not stack and len(line) > 1


# ----------------------------------------------------------------- datasets


def _document(task: str, rng: np.random.Generator, length: int) -> np.ndarray:
    parts = [np.array([BOS], np.int32)]
    total = 1
    while total < length:
        ids = _TOK.encode(sample_text(task, rng))
        parts.append(ids)
        total += ids.size
    return np.concatenate(parts)[:length]


def _check_tasks(tasks: Sequence[str]) -> tuple[str, ...]:
    tasks = tuple(tasks) if not isinstance(tasks, str) else (tasks,)
    if not tasks:
        raise ValueError("tasks must name at least one task")
    for t in tasks:
        check_choice("tasks[i]", t, TASKS)
    return tasks


def documents(
    key: jax.Array, n: int, length: int, tasks: Sequence[str] = TASKS
) -> np.ndarray:
    """``n`` documents of ``length`` tokens (int32), each ``BOS`` + samples of one task.

    The task of each document is drawn uniformly from ``tasks``.
    """
    rng = rng_from_key(key)
    check_int("n", n, min=1)
    check_int("length", length, min=2)
    tasks = _check_tasks(tasks)
    which = rng.integers(len(tasks), size=n)
    return np.stack([_document(tasks[i], rng, length) for i in which])


def prompts(key: jax.Array, task: str, n: int, max_bytes: int = 40) -> list[np.ndarray]:
    """``n`` prompts for ``task``: ``BOS`` + complete samples, at most ``max_bytes`` of them.

    Every prompt holds at least one sample; samples longer than ``max_bytes`` are
    skipped, so a prompt has at most ``max_bytes + 1`` tokens.
    """
    rng = rng_from_key(key)
    check_choice("task", task, TASKS)
    check_int("n", n, min=1)
    check_int("max_bytes", max_bytes, min=1)
    out = []
    for _ in range(n):
        parts = [np.array([BOS], np.int32)]
        used = misses = 0
        while True:
            ids = _TOK.encode(sample_text(task, rng))
            if used + ids.size > max_bytes:
                if used:
                    break
                misses += 1  # a first sample too long for the budget: draw another
                if misses > 1000:
                    raise ValueError(f"max_bytes={max_bytes} is too short for {task} samples")
                continue
            parts.append(ids)
            used += ids.size
        out.append(np.concatenate(parts))
    return out
