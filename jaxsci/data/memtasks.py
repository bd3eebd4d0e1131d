"""Task streams where experience is the only route to success (MemEvolve's arena).

Three families, built so that no pretrained model knows an answer before it has seen it
in the stream:

* ``"facts"``: each *entity* (an invented vault name) has a passcode drawn from a word
  list. Queries repeat with **Zipf** frequency over the entities, are asked in
  **paraphrased** templates, and each entity has a **near-miss** sibling (one letter
  apart, a different passcode, the sibling's passcode among the options). The answer is
  revealed only in the **feedback of a failed episode**.
* ``"sql"``: the transfer family, on the SQLite environments of
  :mod:`jaxsci.data.sqlworlds` (the library and the shop): each task type (a question
  or a write on a world, its slots drawn from the seed rows) has a tool sequence of the
  world's tools that solves it. The options are tool sequences; the chosen one is
  **executed** on a fresh episode of the world's :class:`~jaxsci.common.agents.SQLiteEnv`
  and judged by the task's verifier against the ground truth (computed by SQL on the
  seed data). The tools are shown under opaque per-seed names (the real tools run), so
  no model knows which sequence works for which task type before it has seen the
  feedback of a failed episode, which names the working sequence. Every distractor is
  executed at construction and must fail.
* ``"tools"``: the older, smaller invented stand-in: named tool sequences per task type,
  not executed (kept as an option of the experiment).

>>> from jaxsci.data.memtasks import make_stream
>>> s = make_stream(0, n_tasks=6, n_entities=4)
>>> len(s), s[0].options[s[0].answer] in s[0].feedback_fail
(6, True)
>>> q = make_stream(0, n_tasks=2, family="sql")[0]  # options run on the SQLite world
>>> q.attempt(q.answer)[0], q.attempt((q.answer + 1) % 4)[0]
(True, False)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxsci.core.validation import check_int, check_scalar

__all__ = ["FAMILIES", "SQL_TYPES", "MemTask", "SQLMemTask", "make_sql_stream", "make_stream"]

FAMILIES = ("facts", "tools", "sql")
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


class SQLMemTask(NamedTuple):
    """One episode of the ``"sql"`` family: the fields of :class:`MemTask` plus what
    executes an option on the SQLite world (:meth:`attempt`).

    Attributes:
      text, options, answer, key, feedback_fail, family: as :class:`MemTask` (the
        options are tool sequences under their opaque names, ``a>b>c``).
      world: ``"library"`` or ``"shop"`` (:data:`jaxsci.data.sqlworlds.WORLDS`).
      sequences: per option, the real tool names it runs.
      slots: the task's slot values (``(name, value)`` pairs).
      names: real tool name -> shown name, for this stream.
    """

    text: str
    options: tuple[str, ...]
    answer: int
    key: str
    feedback_fail: str
    family: str
    world: str
    sequences: tuple[tuple[str, ...], ...]
    slots: tuple[tuple[str, Any], ...]
    names: tuple[tuple[str, str], ...]

    def execute(self, choice: int) -> tuple[bool, str]:
        """Run option ``choice``'s tool sequence on a fresh episode of the world and
        verify it; returns ``(success, what happened)``."""
        check_int("choice", choice, min=0, max=len(self.options) - 1)
        return _execute(SQL_TYPES[self.key], self.world, self.sequences[choice],
                        dict(self.slots), dict(self.names))

    def attempt(self, choice: int) -> tuple[bool, str]:
        """The episode's outcome: ``(success, feedback)``; success is the verdict of
        executing the chosen sequence; the feedback of a failure names the working
        sequence."""
        ok, what = self.execute(choice)
        if ok:
            return True, "Correct."
        return False, f"Failed: {self.options[choice]} {what}. {self.feedback_fail}"


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
      family: ``"facts"``, ``"tools"`` or ``"sql"`` (:func:`make_sql_stream`, with
        ``n_types = min(n_entities, len(SQL_TYPES))``).
      n_options: options per task (the answer, the near-miss sibling's answer, others).
      zipf: the Zipf exponent of the query frequencies (0: uniform).
      offset: draws another stream over the same world (held-out streams).

    Returns:
      list of :class:`MemTask` (:class:`SQLMemTask` for ``"sql"``).
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
    if family == "sql":
        return make_sql_stream(seed, n_tasks=n_tasks, n_types=min(n_entities, len(SQL_TYPES)),
                               n_options=min(n_options, 5), zipf=zipf, offset=offset)
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


# ----------------------------------------------------------------- the SQLite family

class SQLType(NamedTuple):
    """A task type of the ``"sql"`` family.

    Attributes:
      key: its name (what repeats in a stream).
      world: ``"library"`` or ``"shop"``.
      templates: paraphrases of the task, ``str.format``-ed with the slots.
      sequence: the real tool names of the sequence that solves it.
      field: a read task's answer, the field of the last tool result; ``None``: a write.
      slots: slot name -> the values drawn from (the seed rows).
      truth: a read task's ground truth, SQL over the seed data with ``:slot`` params.
      changes: a write task's ``(sql, delta)`` counters (``{slot}`` placeholders), as
        :func:`jaxsci.data.sqlworlds.verifier` takes them (a str delta is formatted too).
    """

    key: str
    world: str
    templates: tuple[str, ...]
    sequence: tuple[str, ...]
    field: str | None
    slots: dict[str, tuple[Any, ...]]
    truth: str | None = None
    changes: tuple[tuple[str, int | str], ...] = ()


_TITLES = ("Emma", "Persuasion", "Dune", "Things Fall Apart", "Invisible Cities",
           "Arrow of God")
_MEMBERS = ("Ana", "Ben", "Chloe", "Dev")
_PRODUCTS = ("lamp", "chair", "table", "rug")
_CUSTOMERS = ("Alice", "Bob", "Carol", "Dan")
_ORDERS = (1, 2, 3, 4)
_BOOK = "(SELECT id FROM book WHERE title = '{title}')"
_MEMBER = "(SELECT id FROM member WHERE name = '{member}')"
_CUST = "(SELECT id FROM customer WHERE name = '{customer}')"
_PROD = "(SELECT id FROM product WHERE name = '{product}')"

SQL_TYPES: dict[str, SQLType] = {t.key: t for t in (
    SQLType("book_copies", "library", ("How many copies of '{title}' are on the shelf?",
                                       "Count the copies of the book '{title}' we hold."),
            ("find_book",), "copies", {"title": _TITLES},
            "SELECT copies FROM book WHERE title = :title"),
    SQLType("book_author", "library", ("Who wrote '{title}'?",
                                       "Name the author of the book '{title}'."),
            ("find_book", "get_author"), "name", {"title": _TITLES},
            "SELECT a.name FROM book b JOIN author a ON a.id = b.author_id "
            "WHERE b.title = :title"),
    SQLType("author_country", "library",
            ("Which country is the author of '{title}' from?",
             "The writer of the book '{title}' comes from which country?"),
            ("find_book", "get_author"), "country", {"title": _TITLES},
            "SELECT a.country FROM book b JOIN author a ON a.id = b.author_id "
            "WHERE b.title = :title"),
    SQLType("member_number", "library", ("What is the member number of '{member}'?",
                                         "Give the id of the library member '{member}'."),
            ("find_member",), "member_id", {"member": _MEMBERS},
            "SELECT id FROM member WHERE name = :member"),
    SQLType("lend_book", "library", ("Lend '{title}' to the member '{member}'.",
                                     "The member '{member}' borrows '{title}': record it."),
            ("find_book", "find_member", "lend_book"), None,
            {"title": _TITLES[:5], "member": _MEMBERS}, None,
            ((f"SELECT COUNT(*) FROM loan WHERE book_id = {_BOOK} AND member_id = "
              f"{_MEMBER}", 1), (f"SELECT copies FROM book WHERE id = {_BOOK}", -1))),
    SQLType("product_price", "shop", ("What does one '{product}' cost?",
                                      "Tell me the price of the product '{product}'."),
            ("find_product",), "price", {"product": _PRODUCTS},
            "SELECT price FROM product WHERE name = :product"),
    SQLType("product_stock", "shop", ("How many '{product}' are left in stock?",
                                      "Check the stock of the product '{product}'."),
            ("find_product",), "stock", {"product": _PRODUCTS},
            "SELECT stock FROM product WHERE name = :product"),
    SQLType("customer_city", "shop", ("Which city does the customer '{customer}' live in?",
                                      "Where does our customer '{customer}' live?"),
            ("find_customer",), "city", {"customer": _CUSTOMERS},
            "SELECT city FROM customer WHERE name = :customer"),
    SQLType("order_city", "shop", ("In which city does the customer of order {order_id} "
                                   "live?", "Order {order_id} ships to which city?"),
            ("get_order", "get_customer"), "city", {"order_id": _ORDERS},
            "SELECT c.city FROM orders o JOIN customer c ON c.id = o.customer_id "
            "WHERE o.id = :order_id"),
    SQLType("order_customer", "shop", ("Who placed order {order_id}?",
                                       "Name the customer of order {order_id}."),
            ("get_order", "get_customer"), "name", {"order_id": _ORDERS},
            "SELECT c.name FROM orders o JOIN customer c ON c.id = o.customer_id "
            "WHERE o.id = :order_id"),
    SQLType("order_product", "shop", ("Which product is in order {order_id}?",
                                      "Name the product that order {order_id} is for."),
            ("get_order", "get_product"), "name", {"order_id": _ORDERS},
            "SELECT p.name FROM orders o JOIN product p ON p.id = o.product_id "
            "WHERE o.id = :order_id"),
    SQLType("open_order", "shop", ("What is the number of the open order of '{customer}'?",
                                   "Which open order does the customer '{customer}' have?"),
            ("find_customer", "list_orders"), "order_id", {"customer": _CUSTOMERS[:3]},
            "SELECT o.id FROM orders o JOIN customer c ON c.id = o.customer_id "
            "WHERE c.name = :customer AND o.status = 'open' ORDER BY o.id LIMIT 1"),
    SQLType("place_order", "shop", ("Order {quantity} of the product '{product}' for the "
                                    "customer '{customer}'.",
                                    "The customer '{customer}' wants {quantity} '{product}': "
                                    "place the order."),
            ("find_customer", "find_product", "place_order"), None,
            {"customer": _CUSTOMERS, "product": _PRODUCTS[:3], "quantity": (1, 2)}, None,
            ((f"SELECT COUNT(*) FROM orders WHERE customer_id = {_CUST} AND product_id = "
              f"{_PROD} AND quantity = {{quantity}} AND status = 'open'", 1),
             (f"SELECT stock FROM product WHERE id = {_PROD}", "-{quantity}"))),
    SQLType("cancel_order", "shop", ("Cancel the open order of the customer '{customer}'.",
                                     "The customer '{customer}' calls off the open order."),
            ("find_customer", "list_orders", "cancel_order"), None,
            {"customer": _CUSTOMERS[:3]}, None,
            ((f"SELECT COUNT(*) FROM orders WHERE customer_id = {_CUST} AND "
              f"status = 'cancelled'", 1),)),
)}

_ENVS: dict[str, Any] = {}


def _world_env(world: str):
    """One :class:`~jaxsci.common.agents.SQLiteEnv` per world (episodes reset it)."""
    if world not in _ENVS:
        from jaxsci.data.sqlworlds import WORLDS

        _ENVS[world] = WORLDS[world].env()
    return _ENVS[world]


def _world_tools(world: str) -> tuple[str, ...]:
    from jaxsci.data.sqlworlds import WORLDS

    return tuple(t.name for t in WORLDS[world].tools)


def _fill(text: str, slots: dict[str, Any]) -> str:
    return text.format(**{k: str(v).replace("'", "''") for k, v in slots.items()})


def _verifier(typ: SQLType, slots: dict[str, Any]):
    from jaxsci.data.sqlworlds import verifier

    if typ.field is not None:
        env = _world_env(typ.world)
        row = env.template.execute(typ.truth, slots).fetchone()
        if row is None:
            raise ValueError(f"sql task {typ.key}: no ground truth for {slots}")
        return verifier(answer=str(row[0])), str(row[0])
    return verifier(changes=[(_fill(q, slots), int(_fill(str(d), slots)))
                             for q, d in typ.changes]), None


def _execute(typ: SQLType, world: str, sequence: Sequence[str], slots: dict[str, Any],
             names: dict[str, str]) -> tuple[bool, str]:
    """Run ``sequence`` (real tool names) on a fresh episode of ``world``: each tool's
    arguments come from the task's slots and the earlier results (id fields are named
    after their entity; a ``find_x`` tool's ``name`` is the slot ``x``); a read task's
    answer is ``field`` of the last result; the task's verifier judges the episode."""
    from jaxsci.common.agents import Task

    verify, _ = _verifier(typ, slots)
    env = _world_env(world)
    env.reset(Task(typ.key, typ.templates[0], verify))
    ctx: dict[str, Any] = dict(slots)
    last: dict[str, Any] = {}
    try:
        for name in sequence:
            schema = {t.name: t for t in env.tools}[name].json_schema
            args = {}
            for a in schema["properties"]:
                src = name.split("_", 1)[1] if a == "name" and name.startswith("find_") else a
                if src not in ctx:
                    return False, (f"failed at {names[name]}: it needs the {src}, which nothing "
                                   f"gave")
                args[a] = ctx[src]
            out = json.loads(env.call(name, args))
            if isinstance(out, list):
                if not out:
                    return False, f"failed at {names[name]}: it returned no rows"
                out = out[0]
            ctx.update(out)
            last = out
        if typ.field is None:
            answer = "Done."
        elif typ.field in last:
            answer = str(last[typ.field])
        else:
            return False, f"returned no {typ.field}"
        verdict = env.finish(answer)
        if verdict == "complete":
            return True, "worked"
        return False, (f"answered {answer}, which is wrong" if typ.field else
                       "left the database in the wrong state")
    except (LookupError, ValueError, sqlite3.Error) as exc:
        return False, f"failed: {str(exc)[:80]}"
    finally:
        env.close_episode()


def make_sql_stream(seed: int, *, n_tasks: int = 20, n_types: int = 8, n_options: int = 4,
                    zipf: float = 1.1, offset: int = 0) -> list[SQLMemTask]:
    """The ``"sql"`` family: ``n_tasks`` episodes over ``n_types`` task types of the
    SQLite worlds (see the module docstring).

    Args:
      seed: the world of the stream (which task types, the tools' shown names) and, with
        ``offset``, the episode order and slots.
      n_tasks: episodes.
      n_types: task types drawn from :data:`SQL_TYPES` (at most all of them).
      n_options: tool sequences per task (the working one and distractors that start
        with other tools; each distractor is executed and fails).
      zipf: the Zipf exponent of the task types' frequencies.
      offset: another stream over the same types and names.

    Returns:
      list of :class:`SQLMemTask`.
    """
    check_int("seed", seed, min=0)
    check_int("n_tasks", n_tasks, min=1)
    check_int("n_types", n_types, min=1, max=len(SQL_TYPES))
    check_int("n_options", n_options, min=2, max=5)
    check_int("offset", offset, min=0)
    check_scalar("zipf", zipf, ge=0.0)
    fam = FAMILIES.index("sql")
    rng = np.random.default_rng([seed, fam])
    keys = list(SQL_TYPES)
    types = [SQL_TYPES[keys[i]] for i in rng.permutation(len(keys))[:n_types]]
    tools = [t for w in ("library", "shop") for t in _world_tools(w)]
    # opaque shown names, distinct first letters (option scoring reads first tokens)
    # and no shown name is a word of a task's text (``dune`` is a book title)
    said = {w for t in SQL_TYPES.values() for x in (*t.templates, *map(str, (
        v for vs in t.slots.values() for v in vs))) for w in x.lower().split()}
    pool = [w for w in WORDS if w not in said]
    shown = dict(zip(tools, (pool[i] for i in rng.permutation(len(pool))), strict=False))
    p = 1.0 / np.arange(1, n_types + 1) ** zipf
    p = p / p.sum()
    qr = np.random.default_rng([seed, fam, 1 + offset])
    out = []
    for _ in range(n_tasks):
        typ = types[int(qr.choice(n_types, p=p))]
        slots = {k: v[int(qr.integers(len(v)))] for k, v in typ.slots.items()}
        wtools = _world_tools(typ.world)
        names = {t: shown[t] for t in wtools}
        seqs = [typ.sequence]
        # near misses first: the other task types' sequences in the same world
        cands = [t.sequence for t in SQL_TYPES.values()
                 if t.world == typ.world and t.sequence != typ.sequence]
        cands = [cands[i] for i in qr.permutation(len(cands))]
        for _try in range(64):
            cands.append(tuple(str(x) for x in qr.choice(wtools, int(qr.integers(1, 4)),
                                                        replace=False)))
        for seq in cands:
            if len(seqs) == n_options:
                break
            if seq[0] in {s[0] for s in seqs}:
                continue
            if not _execute(typ, typ.world, seq, slots, names)[0]:
                seqs.append(seq)
        if len(seqs) < n_options:
            raise RuntimeError(f"sql stream: no {n_options} options for {typ.key}")
        order = qr.permutation(n_options)
        seqs = [seqs[i] for i in order]
        opts = tuple(">".join(names[t] for t in s) for s in seqs)
        right = int(np.flatnonzero(order == 0)[0])
        text = (typ.templates[int(qr.integers(len(typ.templates)))].format(**slots)
                + " Which tool sequence does it?")
        fb = f"The tool sequence that works for this task is {opts[right]}."
        out.append(SQLMemTask(text, opts, right, typ.key, fb, "sql", typ.world, tuple(seqs),
                              tuple(slots.items()), tuple(names.items())))
    return out
