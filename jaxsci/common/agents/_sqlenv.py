r"""Database-backed agent environments: :class:`SQLiteEnv`.

An environment is a SQLite schema, seed data, a set of tools that read and write the
database, and tasks with **verifiers**. It is the substrate of the agent papers that
need a world with state (Agent World Model's synthesised environments; the workflow vs
agent comparison of Measuring Agents in Production).

* The schema and seed SQL run once, into an in-memory **template**; a seed that fails
  raises :class:`SeedSQLError` naming the statement (about a fifth of the environments
  the AWM authors released had seed-SQL errors, so this is checked at construction).
* :meth:`SQLiteEnv.reset` starts an episode: the template is copied into a fresh
  in-memory database through SQLite's online backup API (``Connection.backup``), and a
  second copy is kept as the **initial snapshot**.
* The tools are :class:`~jaxsci.common.lm.tools.Tool` values whose ``fn`` takes the
  episode's connection first: ``fn(db, **arguments)``. :attr:`SQLiteEnv.tools` gives them
  bound to the current episode, for :func:`~jaxsci.common.agents.run_agent` or a chat
  model's ``tools=``; :meth:`SQLiteEnv.call` runs one by name with arguments checked
  against its schema (an unknown tool or malformed arguments raise
  :class:`~jaxsci.common.lm.tools.ToolCallError`, naming the tool and the problem).
* :meth:`SQLiteEnv.finish` takes the **final snapshot** and runs the task's verifier on
  ``(initial, final, answer)``; both databases are opened read-only (``PRAGMA
  query_only``), so a verifier cannot change what it judges. The verdict is
  ``"complete"`` or ``"others"`` (AWM's labels).
* :meth:`SQLiteEnv.null_action_passes` is the gate "the null action fails": a task whose
  verifier accepts the untouched initial database (``verify(initial, initial, None)``)
  is already satisfied and tests nothing.

>>> tools = [Tool("count_books", "How many books", fn=lambda db: db.execute(
...     "SELECT COUNT(*) FROM book").fetchone()[0])]
>>> add = Task("add", "Add a book", lambda i, f, a: f.execute(
...     "SELECT COUNT(*) FROM book").fetchone()[0] == 2)
>>> env = SQLiteEnv("CREATE TABLE book (id INTEGER PRIMARY KEY, title TEXT);",
...                 "INSERT INTO book (title) VALUES ('Dune');", tools, [add])
>>> _ = env.reset("add")
>>> env.call("count_books", {})
1
>>> _ = env.db.execute("INSERT INTO book (title) VALUES ('Emma')")
>>> env.finish(answer=None)
'complete'
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from jaxsci.common.lm.tools import Tool, ToolCallError, as_tools, validate

__all__ = ["VERDICTS", "Task", "SQLiteEnv", "SeedSQLError", "snapshot"]

VERDICTS = ("complete", "others")


class SeedSQLError(ValueError):
    """The schema or seed SQL of an environment failed; the message names the statement."""


class Task(NamedTuple):
    """A task of an environment.

    Attributes:
      id: unique within the environment.
      prompt: what the user asks.
      verify: ``verify(initial, final, answer) -> bool | "complete" | "others"``, reading
        the two read-only databases and the agent's final answer (``None`` when it gave
        none).
      data: anything else (slots, the reference tool sequence, the depth).
    """

    id: str
    prompt: str
    verify: Callable[[sqlite3.Connection, sqlite3.Connection, str | None], Any]
    data: Mapping[str, Any] = {}


def _statements(sql: str) -> list[str]:
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _run_script(db: sqlite3.Connection, sql: str, what: str) -> None:
    if not isinstance(sql, str):
        raise TypeError(f"{what} must be a str of SQL, got {type(sql).__name__}")
    for i, stmt in enumerate(_statements(sql)):
        try:
            db.executescript(stmt)
        except sqlite3.Error as exc:
            raise SeedSQLError(f"{what} failed at statement {i + 1} ({stmt[:120]!r}): "
                               f"{type(exc).__name__}: {exc}") from exc


def snapshot(db: sqlite3.Connection) -> sqlite3.Connection:
    """A read-only in-memory copy of ``db`` (SQLite's backup API, then ``query_only``)."""
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    db.backup(copy)
    copy.execute("PRAGMA query_only = ON")
    return copy


class SQLiteEnv:
    """A SQLite-backed environment (see the module docstring).

    Args:
      schema_sql: ``CREATE TABLE ...`` statements (foreign keys are enforced).
      seed_sql: ``INSERT ...`` statements of the initial data.
      tools: :class:`~jaxsci.common.lm.tools.Tool` values (or OpenAI dicts with ``fn``)
        whose ``fn(db, **arguments)`` takes the episode's connection first.
      tasks: at least one :class:`Task`, distinct ids.

    Raises:
      SeedSQLError: the schema or the seed fails (naming the statement).
      ValueError: no tasks, duplicate ids, a tool without ``fn``.
    """

    def __init__(self, schema_sql: str, seed_sql: str = "", tools=(),
                 tasks: Sequence[Task] = ()):
        self.template = sqlite3.connect(":memory:", check_same_thread=False)
        self.template.execute("PRAGMA foreign_keys = ON")
        _run_script(self.template, schema_sql, "schema_sql")
        _run_script(self.template, seed_sql, "seed_sql")
        self.template.commit()
        self._raw = as_tools(tools)
        for t in self._raw:
            if t.fn is None:
                raise ValueError(f"SQLiteEnv: tool {t.name!r} has no fn (fn(db, **arguments))")
        tasks = list(tasks)
        if not tasks:
            raise ValueError("SQLiteEnv: tasks must hold at least one Task, got none")
        for i, t in enumerate(tasks):
            if not isinstance(t, Task):
                raise TypeError(f"SQLiteEnv: tasks[{i}] must be a Task, got "
                                f"{type(t).__name__}")
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError(f"SQLiteEnv: task ids must be distinct, got {ids}")
        self.tasks = {t.id: t for t in tasks}
        self.db: sqlite3.Connection | None = None
        self.initial: sqlite3.Connection | None = None
        self.task: Task | None = None
        self.tools = tuple(Tool(t.name, t.description, t.json_schema, self._bind(t))
                           for t in self._raw)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self._raw]

    def _bind(self, tool: Tool):
        def fn(**arguments):
            if self.db is None:
                raise RuntimeError(f"tool {tool.name!r} called outside an episode; call "
                                   f"SQLiteEnv.reset first")
            return tool.fn(self.db, **arguments)

        return fn

    def reset(self, task: str | Task | None = None) -> Task | None:
        """Start an episode: a fresh copy of the template and its initial snapshot.

        Args:
          task: the task's id (or the :class:`Task`), or ``None`` for an episode without
            one (:meth:`finish` then needs ``task=``).

        Returns:
          the task.
        """
        if isinstance(task, str):
            if task not in self.tasks:
                raise KeyError(f"unknown task {task!r}; the environment has "
                               f"{list(self.tasks)[:20]}")
            task = self.tasks[task]
        elif task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a task id, a Task or None, got "
                            f"{type(task).__name__}")
        self.close_episode()
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.template.backup(self.db)
        self.db.execute("PRAGMA foreign_keys = ON")
        self.initial = snapshot(self.db)
        self.task = task
        return task

    def call(self, name: str, arguments: Mapping[str, Any] | str | None = None):
        """Run tool ``name`` on the episode's database, its arguments checked.

        Args:
          name: a tool of the environment.
          arguments: a dict, or its JSON text.

        Raises:
          ToolCallError: an unknown tool (naming the known ones), arguments that are not
            a JSON object or break the tool's schema.
        """
        tool = {t.name: t for t in self.tools}.get(name)
        if tool is None:
            raise ToolCallError(f"unknown tool {name!r}; the environment's tools are "
                                f"{self.tool_names}")
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                raise ToolCallError(f"the arguments of {name!r} are not valid JSON: "
                                    f"{exc}") from None
        if not isinstance(arguments, Mapping):
            raise ToolCallError(f"the arguments of {name!r} must be a JSON object, got "
                                f"{type(arguments).__name__} {arguments!r}"[:200])
        errors = validate(dict(arguments), tool.json_schema)
        if errors:
            raise ToolCallError(f"the arguments of {name!r} do not match its schema: "
                                + "; ".join(errors))
        return tool.fn(**arguments)

    def finish(self, answer: str | None = None, *, task: str | Task | None = None) -> str:
        """End the episode: snapshot the final database and verify the task.

        Returns:
          ``"complete"`` or ``"others"``.
        """
        if self.db is None or self.initial is None:
            raise RuntimeError("finish called outside an episode; call SQLiteEnv.reset first")
        task = self.tasks[task] if isinstance(task, str) else (task or self.task)
        if task is None:
            raise ValueError("finish needs a task: reset(task) or finish(task=...)")
        self.db.commit()
        final = snapshot(self.db)
        try:
            return self.verify(task, self.initial, final, answer)
        finally:
            final.close()

    @staticmethod
    def verify(task: Task, initial: sqlite3.Connection, final: sqlite3.Connection,
               answer: str | None) -> str:
        """Run ``task.verify`` on two read-only databases; normalise to a verdict."""
        got = task.verify(initial, final, answer)
        if isinstance(got, str):
            if got not in VERDICTS:
                raise ValueError(f"task {task.id!r}: verify must return a bool or one of "
                                 f"{VERDICTS}, got {got!r}")
            return got
        return "complete" if bool(got) else "others"

    def null_action_passes(self) -> list[str]:
        """The ids of tasks whose verifier accepts the initial database with no answer
        (``verify(initial, initial, None) == "complete"``): tasks that test nothing."""
        init = snapshot(self.template)
        try:
            return [t.id for t in self.tasks.values()
                    if self.verify(t, init, init, None) == "complete"]
        finally:
            init.close()

    def close_episode(self) -> None:
        for c in (self.db, self.initial):
            if c is not None:
                c.close()
        self.db = self.initial = self.task = None

    def __repr__(self) -> str:
        return (f"SQLiteEnv({len(self.tools)} tools, {len(self.tasks)} tasks, "
                f"episode={'open' if self.db is not None else 'none'})")
