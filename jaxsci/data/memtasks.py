"""Task streams where experience is the only route to success (MemEvolve's arena).

Two invented families, so that no pretrained model knows an answer before it has seen
it in the stream:

* ``"facts"``: each *entity* (an invented vault name) has a passcode drawn from a word
  list. Queries repeat with **Zipf** frequency over the entities, are asked in
  **paraphrased** templates, and each entity has a **near-miss** sibling (one letter
  apart, a different passcode, the sibling's passcode among the options). The answer is
  revealed only in the **feedback of a failed episode**.
* ``"tools"``: the transfer family, a small stand-in for the SQLite environments: each
  task type (an operation on a table) has one tool sequence that works; the feedback of a
  failed episode names it. The sequences are not executed on a database (a smaller
  second family, see ``docs/memevolve.md``).

>>> from jaxsci.data.memtasks import make_stream
>>> s = make_stream(0, n_tasks=6, n_entities=4)
>>> len(s), s[0].options[s[0].answer] in s[0].feedback_fail
(6, True)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxsci.core.validation import check_int, check_scalar

__all__ = ["FAMILIES", "MemTask", "make_stream"]

FAMILIES = ("facts", "tools")
# distinct first letters keep the options' first tokens distinct (option scoring)
WORDS = ("falcon", "copper", "river", "maple", "orbit", "tulip", "granite", "lantern",
         "velvet", "harbor", "saffron", "pebble", "willow", "ember", "quartz", "dune",
         "nectar", "jasmine", "kettle", "basil", "ivory", "yarrow", "zephyr", "acorn")
SYLL = ("vel", "mor", "tan", "kri", "dos", "lum", "zar", "pex", "qui", "bro", "sel", "nav")
FACT_TEMPLATES = ("What is the passcode of the {e} vault?",
                  "Tell me the passcode that opens the {e} vault.",
                  "The vault called {e} opens with which passcode?")
OPS = ("count the rows of", "sum the amounts in", "find the largest price in",
       "list the names in", "average the scores in", "find the newest date in")
TABLES = ("orders", "users", "items", "visits")
TOOLS = ("lookup>count", "scan>sum", "index>max", "join>list", "filter>avg", "group>max",
         "read>count", "export>list")
TOOL_TEMPLATES = ("Which tool sequence should I use to {op} the {t} table?",
                  "To {op} the {t} table, which tools work?",
                  "Task: {op} the {t} table. Pick the tool sequence.")


class MemTask(NamedTuple):
    """One episode of a stream.

    Attributes:
      text: the query (a paraphrase).
      options: the candidate answers (distinct first letters).
      answer: index of the right option.
      key: the entity / task type (what repeats; the paraphrase varies).
      feedback_fail: the feedback of a failed episode (it reveals the answer).
      family: ``"facts"`` or ``"tools"``.
    """

    text: str
    options: tuple[str, ...]
    answer: int
    key: str
    feedback_fail: str
    family: str


def _names(rng, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        base = "".join(rng.choice(SYLL, 2)).capitalize()
        for tail in ("a", "o"):  # the near-miss pair: one letter apart
            name = base + tail
            if name not in out and len(out) < n:
                out.append(name)
    return out


def make_stream(seed: int, *, n_tasks: int = 20, n_entities: int = 8, family: str = "facts",
                n_options: int = 4, zipf: float = 1.1, offset: int = 0) -> list[MemTask]:
    """A stream of ``n_tasks`` episodes over ``n_entities`` entities (one world per seed).

    Args:
      seed: the world (entities, answers) and, with ``offset``, the query order.
      n_tasks: episodes.
      n_entities: distinct entities / task types, in near-miss pairs (even).
      family: ``"facts"`` or ``"tools"``.
      n_options: options per task (the answer, the near-miss sibling's answer, others).
      zipf: the Zipf exponent of the query frequencies (0: uniform).
      offset: draws another stream over the same world (held-out streams).

    Returns:
      list of :class:`MemTask`.
    """
    check_int("seed", seed, min=0)
    check_int("n_tasks", n_tasks, min=1)
    check_int("n_entities", n_entities, min=2, max=24)
    check_int("offset", offset, min=0)
    if n_entities % 2:
        raise ValueError(f"n_entities must be even (near-miss pairs), got {n_entities}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    check_int("n_options", n_options, min=2, max=6)
    check_scalar("zipf", zipf, ge=0.0)
    rng = np.random.default_rng([seed, FAMILIES.index(family)])
    if family == "facts":
        keys = _names(rng, n_entities)
        pool = WORDS
    else:
        pairs = [(o, t) for o in OPS for t in TABLES]
        idx = rng.permutation(len(pairs))[:n_entities]
        keys = [f"{pairs[i][0]}|{pairs[i][1]}" for i in idx]
        pool = TOOLS
    ans = rng.choice(len(pool), n_entities, replace=n_entities > len(pool))
    for j in range(1, n_entities, 2):  # siblings differ in their answers
        while ans[j] == ans[j - 1]:
            ans[j] = rng.integers(len(pool))
    p = 1.0 / np.arange(1, n_entities + 1) ** zipf
    p = p / p.sum()
    qr = np.random.default_rng([seed, FAMILIES.index(family), 1 + offset])
    out = []
    for _ in range(n_tasks):
        e = int(qr.choice(n_entities, p=p))
        sib = e ^ 1
        letters = {pool[ans[e]][0], pool[ans[sib]][0]}
        opts = [pool[ans[e]], pool[ans[sib]]]
        for w in qr.permutation(len(pool)):
            if len(opts) == n_options:
                break
            if pool[w][0] not in letters:
                letters.add(pool[w][0])
                opts.append(pool[w])
        order = qr.permutation(n_options)
        opts = [opts[i] for i in order]
        right = pool[ans[e]]
        if family == "facts":
            text = FACT_TEMPLATES[int(qr.integers(len(FACT_TEMPLATES)))].format(e=keys[e])
            fb = f"Wrong. The passcode of the {keys[e]} vault is {right}."
        else:
            op, t = keys[e].split("|")
            text = TOOL_TEMPLATES[int(qr.integers(len(TOOL_TEMPLATES)))].format(op=op, t=t)
            fb = f"Failed. To {op} the {t} table the working tool sequence is {right}."
        out.append(MemTask(text, tuple(opts), opts.index(right), keys[e], fb, family))
    return out
