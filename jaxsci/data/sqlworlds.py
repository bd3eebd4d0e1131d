r"""Small SQLite worlds for agent experiments: schemas, seed rows, tools and tasks of known depth.

A :class:`World` is what :class:`~jaxsci.common.agents.SQLiteEnv` needs (schema SQL, seed
SQL, :class:`~jaxsci.common.lm.tools.Tool` values whose ``fn(db, **arguments)`` reads or
writes the episode's database, :class:`~jaxsci.common.agents.Task` values with verifiers)
plus, per task, a **reference program**: the tool calls that solve it and the final
answer. A task's **depth** ``L`` is the number of tool calls of its reference program.

Two worlds ship, each with one task per depth ``L = 1 .. 4``:

* :data:`LIBRARY`: authors, books, members and loans (foreign keys between them; 16
  seeded rows); tools ``find_book``, ``get_author``, ``find_member``, ``books_by_author``,
  ``lend_book``.
* :data:`SHOP`: customers, products and orders (16 seeded rows); tools
  ``find_customer``, ``get_customer``, ``find_product``, ``get_product``, ``get_order``,
  ``list_orders``, ``place_order``, ``cancel_order``.

Tool results are compact JSON objects whose id fields are named after their entity
(``book_id``, ``customer_id``, ...), the same names the tools take as arguments.

Verifiers (:func:`verifier`) are deterministic functions of ``(initial, final, answer)``:
an expected answer matched as a whole word (case-insensitive), and either "the database
is unchanged" (read-only tasks) or SQL counters that must move by a given amount between
the initial and the final database (write tasks). :func:`check_gates` runs the gates a
world must pass: the seed SQL runs, the null action fails every task, and every reference
program passes. New worlds (Agent World Model's templates) are more :class:`World`
values built the same way.

>>> gates = check_gates(LIBRARY)
>>> sorted(gates.values())[0]
Gates(seed_runs=True, null_action_fails=True, reference_passes=True)
>>> [t.data["depth"] for t in LIBRARY.tasks]
[1, 2, 3, 4]
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from jaxsci.common.agents import SeedSQLError, SQLiteEnv, Task
from jaxsci.common.lm.tools import Tool

__all__ = [
    "DEPTHS",
    "LIBRARY",
    "SHOP",
    "WORLDS",
    "Call",
    "Gates",
    "World",
    "check_gates",
    "make_tool",
    "run_reference",
    "verifier",
]

DEPTHS = (1, 2, 3, 4)  # tool calls of the reference programs shipped here


class Call(NamedTuple):
    """One tool call of a reference program."""

    name: str
    arguments: Mapping[str, Any]


class World(NamedTuple):
    """A SQLite world: what :class:`SQLiteEnv` takes, under a name.

    Attributes:
      name: the world's name.
      schema_sql, seed_sql: the tables (foreign keys enforced) and their initial rows.
      tools: :class:`Tool` values with ``fn(db, **arguments)``.
      tasks: :class:`Task` values; ``data`` holds ``depth``, ``reference`` (a tuple of
        :class:`Call`), ``answer`` (the reference's final answer) and ``world``.
    """

    name: str
    schema_sql: str
    seed_sql: str
    tools: tuple[Tool, ...]
    tasks: tuple[Task, ...]

    def env(self) -> SQLiteEnv:
        """A fresh :class:`SQLiteEnv` of this world."""
        return SQLiteEnv(self.schema_sql, self.seed_sql, self.tools, self.tasks)


# ----------------------------------------------------------------- building blocks

_TYPES = {str: "string", int: "integer"}


def make_tool(name: str, description: str, fn, arguments: Mapping[str, type]) -> Tool:
    """A tool whose arguments are all required, typed ``str`` or ``int``.

    Args:
      name, description: the tool's, for the model.
      fn: ``fn(db, **arguments)``; a dict or list result is sent as compact JSON.
      arguments: argument name -> ``str`` or ``int``, in order.

    Returns:
      :class:`Tool`.
    """
    bad = {k: v for k, v in arguments.items() if v not in _TYPES}
    if bad:
        raise TypeError(f"make_tool {name!r}: argument types must be str or int, got {bad}")
    schema = {"type": "object",
              "properties": {k: {"type": _TYPES[v]} for k, v in arguments.items()},
              "required": list(arguments), "additionalProperties": False}

    def run(db, **kw):
        out = fn(db, **kw)
        return out if isinstance(out, str) else json.dumps(out, separators=(",", ":"))

    return Tool(name, description, schema, run)


def _row(db: sqlite3.Connection, sql: str, args: Sequence[Any], keys: Sequence[str],
         missing: str) -> dict[str, Any]:
    row = db.execute(sql, tuple(args)).fetchone()
    if row is None:
        raise LookupError(missing)
    return dict(zip(keys, row, strict=True))


def _dump(db: sqlite3.Connection) -> list[str]:
    return list(db.iterdump())


def _count(db: sqlite3.Connection, sql: str) -> float:
    return db.execute(sql).fetchone()[0] or 0


def verifier(*, answer: str | None = None, changes: Sequence[tuple[str, int]] = ()):
    """A deterministic verifier ``verify(initial, final, answer) -> bool``.

    Args:
      answer: a word (or words) the final answer must contain, whole and
        case-insensitive; ``None``: the answer is not checked.
      changes: ``(sql, delta)`` pairs: each one-number query must give ``delta`` more on
        the final database than on the initial one. With none, the final database must
        equal the initial one (a read-only task).

    Returns:
      the verifier.
    """
    pattern = None if answer is None else re.compile(rf"\b{re.escape(answer)}\b", re.I)

    def verify(initial: sqlite3.Connection, final: sqlite3.Connection,
               got: str | None) -> bool:
        if pattern is not None and (got is None or not pattern.search(got)):
            return False
        if not changes:
            return _dump(initial) == _dump(final)
        return all(_count(final, q) - _count(initial, q) == d for q, d in changes)

    return verify


def _task(world: str, id: str, prompt: str, reference: Sequence[Call], answer: str,
          verify) -> Task:
    return Task(id, prompt, verify, {"depth": len(reference), "reference": tuple(reference),
                                     "answer": answer, "world": world})


# ----------------------------------------------------------------- the library

_LIBRARY_SCHEMA = """
CREATE TABLE author (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE book (id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE,
  author_id INTEGER NOT NULL REFERENCES author(id), copies INTEGER NOT NULL CHECK (copies >= 0));
CREATE TABLE member (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE loan (id INTEGER PRIMARY KEY, book_id INTEGER NOT NULL REFERENCES book(id),
  member_id INTEGER NOT NULL REFERENCES member(id));
"""

_LIBRARY_SEED = """
INSERT INTO author VALUES (1, 'Jane Austen', 'England'), (2, 'Frank Herbert', 'USA'),
  (3, 'Chinua Achebe', 'Nigeria'), (4, 'Italo Calvino', 'Italy');
INSERT INTO book VALUES (1, 'Emma', 1, 2), (2, 'Persuasion', 1, 1), (3, 'Dune', 2, 3),
  (4, 'Things Fall Apart', 3, 2), (5, 'Invisible Cities', 4, 1), (6, 'Arrow of God', 3, 0);
INSERT INTO member VALUES (1, 'Ana'), (2, 'Ben'), (3, 'Chloe'), (4, 'Dev');
INSERT INTO loan VALUES (1, 6, 2), (2, 2, 3);
"""


def _find_book(db, title):
    return _row(db, "SELECT id, title, author_id, copies FROM book WHERE lower(title) = "
                "lower(?)", [title], ("book_id", "title", "author_id", "copies"),
                f"no book titled {title!r}")


def _get_author(db, author_id):
    return _row(db, "SELECT id, name, country FROM author WHERE id = ?", [author_id],
                ("author_id", "name", "country"), f"no author with author_id {author_id}")


def _find_member(db, name):
    return _row(db, "SELECT id, name FROM member WHERE lower(name) = lower(?)", [name],
                ("member_id", "name"), f"no member named {name!r}")


def _books_by_author(db, author_id):
    rows = db.execute("SELECT id, title, copies FROM book WHERE author_id = ? ORDER BY id",
                      (author_id,)).fetchall()
    return [dict(zip(("book_id", "title", "copies"), r, strict=True)) for r in rows]


def _lend_book(db, book_id, member_id):
    copies = _row(db, "SELECT copies FROM book WHERE id = ?", [book_id], ("copies",),
                  f"no book with book_id {book_id}")["copies"]
    if copies < 1:
        raise ValueError(f"book_id {book_id} has no copy left")
    cur = db.execute("INSERT INTO loan (book_id, member_id) VALUES (?, ?)", (book_id, member_id))
    db.execute("UPDATE book SET copies = copies - 1 WHERE id = ?", (book_id,))
    return {"loan_id": cur.lastrowid, "book_id": book_id, "member_id": member_id}


_LIBRARY_TOOLS = (
    make_tool("find_book", "Find a book by its title", _find_book, {"title": str}),
    make_tool("get_author", "Get an author by author_id", _get_author, {"author_id": int}),
    make_tool("find_member", "Find a library member by name", _find_member, {"name": str}),
    make_tool("books_by_author", "List the books of an author", _books_by_author,
              {"author_id": int}),
    make_tool("lend_book", "Lend a book to a member", _lend_book,
              {"book_id": int, "member_id": int}),
)


def _loaned(book_id: int, member_id: int) -> tuple[str, int]:
    return (f"SELECT COUNT(*) FROM loan WHERE book_id = {book_id} AND member_id = "
            f"{member_id}", 1)


def _copies(book_id: int) -> tuple[str, int]:
    return f"SELECT copies FROM book WHERE id = {book_id}", -1


LIBRARY = World("library", _LIBRARY_SCHEMA, _LIBRARY_SEED, _LIBRARY_TOOLS, (
    _task("library", "copies_of_dune", "How many copies of 'Dune' are on the shelf?",
          [Call("find_book", {"title": "Dune"})], "3", verifier(answer="3")),
    _task("library", "author_of_emma", "Who wrote 'Emma'?",
          [Call("find_book", {"title": "Emma"}), Call("get_author", {"author_id": 1})],
          "Jane Austen", verifier(answer="Jane Austen")),
    _task("library", "lend_dune_to_ana", "Lend 'Dune' to the member 'Ana'.",
          [Call("find_book", {"title": "Dune"}), Call("find_member", {"name": "Ana"}),
           Call("lend_book", {"book_id": 3, "member_id": 1})],
          "Done.", verifier(changes=[_loaned(3, 1), _copies(3)])),
    _task("library", "lend_emma_to_ben_and_country",
          "Lend 'Emma' to the member 'Ben', then tell me the country of its author.",
          [Call("find_book", {"title": "Emma"}), Call("find_member", {"name": "Ben"}),
           Call("lend_book", {"book_id": 1, "member_id": 2}),
           Call("get_author", {"author_id": 1})],
          "England", verifier(answer="England", changes=[_loaned(1, 2), _copies(1)])),
))


# ----------------------------------------------------------------- the shop

_SHOP_SCHEMA = """
CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, city TEXT NOT NULL);
CREATE TABLE product (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
  price INTEGER NOT NULL, stock INTEGER NOT NULL CHECK (stock >= 0));
CREATE TABLE orders (id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customer(id),
  product_id INTEGER NOT NULL REFERENCES product(id),
  quantity INTEGER NOT NULL CHECK (quantity > 0),
  status TEXT NOT NULL CHECK (status IN ('open', 'cancelled')));
"""

_SHOP_SEED = """
INSERT INTO customer VALUES (1, 'Alice', 'Paris'), (2, 'Bob', 'Lagos'), (3, 'Carol', 'Lima'),
  (4, 'Dan', 'Oslo');
INSERT INTO product VALUES (1, 'lamp', 30, 5), (2, 'chair', 45, 8), (3, 'table', 120, 2),
  (4, 'rug', 60, 0);
INSERT INTO orders VALUES (1, 1, 2, 4, 'open'), (2, 3, 1, 1, 'open'), (3, 2, 3, 1, 'open'),
  (4, 1, 1, 2, 'cancelled');
"""

_CUSTOMER = ("customer_id", "name", "city")
_PRODUCT = ("product_id", "name", "price", "stock")
_ORDER = ("order_id", "customer_id", "product_id", "quantity", "status")


def _lookup(table: str, column: str, keys: Sequence[str], what: str, argument: str):
    """A one-row lookup tool ``fn(db, **{argument: value})`` on ``table.column``."""
    cols = ", ".join(("id", *keys[1:]))
    where = f"lower({column}) = lower(?)" if column == "name" else f"{column} = ?"

    def fn(db, **kw):
        value = kw[argument]
        return _row(db, f"SELECT {cols} FROM {table} WHERE {where}", [value], keys,
                    f"no {what} {value!r}")

    return fn


_find_customer = _lookup("customer", "name", _CUSTOMER, "customer named", "name")
_get_customer = _lookup("customer", "id", _CUSTOMER, "customer with customer_id",
                        "customer_id")
_find_product = _lookup("product", "name", _PRODUCT, "product named", "name")
_get_product = _lookup("product", "id", _PRODUCT, "product with product_id", "product_id")


def _get_order(db, order_id):
    return _row(db, "SELECT id, customer_id, product_id, quantity, status FROM orders WHERE "
                "id = ?", [order_id], _ORDER, f"no order with order_id {order_id}")


def _list_orders(db, customer_id):
    rows = db.execute("SELECT id, customer_id, product_id, quantity, status FROM orders "
                      "WHERE customer_id = ? AND status = 'open' ORDER BY id",
                      (customer_id,)).fetchall()
    return [dict(zip(_ORDER, r, strict=True)) for r in rows]


def _place_order(db, customer_id, product_id, quantity):
    _get_customer(db, customer_id=customer_id)
    stock = _get_product(db, product_id=product_id)["stock"]
    if not 0 < quantity <= stock:
        raise ValueError(f"cannot order {quantity} of product_id {product_id} (stock {stock})")
    cur = db.execute("INSERT INTO orders (customer_id, product_id, quantity, status) VALUES "
                     "(?, ?, ?, 'open')", (customer_id, product_id, quantity))
    db.execute("UPDATE product SET stock = stock - ? WHERE id = ?", (quantity, product_id))
    return {"order_id": cur.lastrowid, "status": "open"}


def _cancel_order(db, order_id):
    order = _get_order(db, order_id)
    if order["status"] != "open":
        raise ValueError(f"order_id {order_id} is {order['status']}")
    db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (order_id,))
    db.execute("UPDATE product SET stock = stock + ? WHERE id = ?",
               (order["quantity"], order["product_id"]))
    return {"order_id": order_id, "status": "cancelled"}


_SHOP_TOOLS = (
    make_tool("find_customer", "Find a customer by name", _find_customer, {"name": str}),
    make_tool("get_customer", "Get a customer by customer_id", _get_customer,
              {"customer_id": int}),
    make_tool("find_product", "Find a product by name", _find_product, {"name": str}),
    make_tool("get_product", "Get a product by product_id", _get_product,
              {"product_id": int}),
    make_tool("get_order", "Get an order by order_id", _get_order, {"order_id": int}),
    make_tool("list_orders", "List the open orders of a customer", _list_orders,
              {"customer_id": int}),
    make_tool("place_order", "Order a quantity of a product for a customer", _place_order,
              {"customer_id": int, "product_id": int, "quantity": int}),
    make_tool("cancel_order", "Cancel an open order", _cancel_order, {"order_id": int}),
)

SHOP = World("shop", _SHOP_SCHEMA, _SHOP_SEED, _SHOP_TOOLS, (
    _task("shop", "price_of_lamp", "What does one 'lamp' cost?",
          [Call("find_product", {"name": "lamp"})], "30", verifier(answer="30")),
    _task("shop", "city_of_order_3", "In which city does the customer of order 3 live?",
          [Call("get_order", {"order_id": 3}), Call("get_customer", {"customer_id": 2})],
          "Lagos", verifier(answer="Lagos")),
    _task("shop", "order_lamps_for_bob", "Order 2 of the product 'lamp' for the customer "
          "'Bob'.",
          [Call("find_customer", {"name": "Bob"}), Call("find_product", {"name": "lamp"}),
           Call("place_order", {"customer_id": 2, "product_id": 1, "quantity": 2})],
          "Done.", verifier(changes=[
              ("SELECT COUNT(*) FROM orders WHERE customer_id = 2 AND product_id = 1 AND "
               "quantity = 2 AND status = 'open'", 1),
              ("SELECT stock FROM product WHERE id = 1", -2)])),
    _task("shop", "cancel_carols_order", "Cancel the open order of the customer 'Carol' and "
          "tell me which product it was.",
          [Call("find_customer", {"name": "Carol"}), Call("list_orders", {"customer_id": 3}),
           Call("cancel_order", {"order_id": 2}), Call("get_product", {"product_id": 1})],
          "lamp", verifier(answer="lamp", changes=[
              ("SELECT COUNT(*) FROM orders WHERE id = 2 AND status = 'cancelled'", 1),
              ("SELECT stock FROM product WHERE id = 1", 1)])),
))

WORLDS = {w.name: w for w in (LIBRARY, SHOP)}


# ----------------------------------------------------------------- gates


class Gates(NamedTuple):
    """The gates of one task (:func:`check_gates`)."""

    seed_runs: bool
    null_action_fails: bool
    reference_passes: bool


def run_reference(env: SQLiteEnv, task: Task) -> str:
    """Run ``task``'s reference program on a fresh episode of ``env``; return the verdict."""
    env.reset(task)
    for call in task.data["reference"]:
        env.call(call.name, dict(call.arguments))
    return env.finish(task.data["answer"])


def check_gates(world: World) -> dict[str, Gates]:
    """The gates of every task of ``world``.

    Args:
      world: a :class:`World`.

    Returns:
      task id -> :class:`Gates`: the seed SQL ran; ``verify(initial, initial, None)``
      gives ``"others"``; the reference program's episode gives ``"complete"``. A world
      whose seed fails has every gate ``False``.
    """
    if not isinstance(world, World):
        raise TypeError(f"world must be a World, got {type(world).__name__}")
    try:
        env = world.env()
    except SeedSQLError:
        return {t.id: Gates(False, False, False) for t in world.tasks}
    null = set(env.null_action_passes())
    out = {}
    for task in world.tasks:
        try:
            ok = run_reference(env, task) == "complete"
        except Exception:  # noqa: BLE001  (a reference that errors does not pass)
            ok = False
        out[task.id] = Gates(True, task.id not in null, ok)
    env.close_episode()
    return out
