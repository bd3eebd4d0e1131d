r"""Agent World Model's LLM synthesis path: a language model writes each stage of a world.

The paper builds its environments in stages, each written by a model from the ones
before it; :func:`synthesize_world` runs those stages against any
:class:`~jaxsci.common.lm.chat.ChatModel` (in-process SmolLM2, or any OpenAI-compatible
server through :class:`~jaxsci.common.lm.chat.OpenAIChat`, ``jaxsci serve`` included):

1. ``scenario``: a description of the application and its main entities;
2. ``tasks``: requests its users make;
3. ``database``: a SQLite schema and seed SQL;
4. ``tools``: the tool API, each tool one parameterised SQL statement (``SELECT``,
   ``INSERT``, ``UPDATE`` or ``DELETE`` whose named parameters ``:arg`` are its arguments);
5. ``verifier`` (once per task): the reference program (tool calls with literal
   arguments, and the final answer) and Python verification code defining
   ``verify(initial, final, answer) -> bool`` over the initial and final databases.

Every stage is one chat call with a JSON schema as ``response_format`` (decoded under the
JSON grammar in-process; the server's JSON mode otherwise), parsed and checked. The
world then goes through **the same gates as the template path**
(:func:`jaxsci.data.scenarios.world_gates`, i.e.
:func:`jaxsci.data.sqlworlds.check_gates`): the seed SQL runs, the null action fails
(``verify(initial, initial, None)`` is false) and the reference program passes. A stage
whose output is rejected (not JSON, the wrong shape, SQL that does not run, a task that
fails a gate) is asked again, with the rejection in the prompt and sampling at
``retry_temperature``, at most ``retries`` more times; then the world is **dropped**
(or, for a task's ``verifier`` stage, the task is, and the world with it when no task
is left). Every attempt is reported (:class:`Attempt`): the stage, the gate that
rejected it and a message. The paper's users found about 22% of the released
environments broken; the gates are the point, and a small model mostly fails them.

Where generated content runs:

* **SQL** (schema, seed, tool statements) runs in SQLite only, in memory, under an
  authorizer that refuses ``ATTACH``, ``DETACH`` and ``PRAGMA`` and a progress handler
  that stops a statement after :data:`SQL_STEPS` virtual-machine steps;
* **Python** (the verifiers) runs only in the sandbox
  (:func:`jaxsci.common.agents.run_code`: a child process with CPU, memory and file
  limits, a timeout, no network): the two databases go in as SQL dumps on standard input
  and are rebuilt there read-only, and the verdict comes back on standard output. A
  verifier that raises, times out or returns something other than a bool gives the
  verdict ``others`` (never ``complete``), so it fails the reference gate; the message
  of the attempt quotes its error.

>>> [stage_schemas()[s]["required"] for s in STAGES[2:4]]
[['schema_sql', 'seed_sql'], ['tools']]
>>> SynthConfig(retries=1).retries
1
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from jaxsci.common.agents import SeedSQLError, SQLiteEnv, Task, run_code
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data.sqlworlds import Call, Gates, World, check_gates, make_tool

__all__ = [
    "STAGES",
    "GATES",
    "SQL_STEPS",
    "SynthConfig",
    "Attempt",
    "Synthesis",
    "synthesize_world",
    "stage_schemas",
    "sandboxed_verifier",
    "sql_tool",
    "pass_rates",
]

STAGES = ("scenario", "tasks", "database", "tools", "verifier")
# What can reject an attempt: the request (``reply``: the model refused it, e.g. a prompt
# beyond its context), the reply (``json``: not one JSON object, or cut by max_tokens;
# ``shape``: fields missing or of the wrong kind), a stage's own check (``tool_sql``: a
# tool's statement does not compile against the schema), and the three gates of the
# template path.
GATES = ("reply", "json", "shape", "tool_sql", *Gates._fields)
SQL_STEPS = 2_000_000  # SQLite virtual-machine steps one generated statement may take

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_VERDICT = "<<jaxsci-verdict>>"
_DENIED = {sqlite3.SQLITE_ATTACH: "ATTACH", sqlite3.SQLITE_DETACH: "DETACH",
           sqlite3.SQLITE_PRAGMA: "PRAGMA"}
_KINDS = {"string": str, "integer": int}


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """How :func:`synthesize_world` asks and checks.

    Attributes:
      n_tasks: user tasks asked for (1-8).
      retries: further attempts at a rejected stage (0: one attempt each).
      retry_temperature: sampling temperature of a retry (the first attempt is greedy).
      max_tokens: the most tokens of one stage's reply.
      max_rows: the most rows a generated ``SELECT`` tool returns.
      cpu_s, timeout_s, memory_mb: the sandbox's limits for one verifier run.
    """

    n_tasks: int = 3
    retries: int = 2
    retry_temperature: float = 0.7
    max_tokens: int = 768
    max_rows: int = 20
    cpu_s: float = 2.0
    timeout_s: float = 10.0
    memory_mb: int = 256

    def __post_init__(self):
        check_int("n_tasks", self.n_tasks, min=1, max=8)
        check_int("retries", self.retries, min=0)
        check_scalar("retry_temperature", self.retry_temperature, gt=0.0)
        check_int("max_tokens", self.max_tokens, min=8)
        check_int("max_rows", self.max_rows, min=1)
        check_scalar("cpu_s", self.cpu_s, gt=0.0)
        check_scalar("timeout_s", self.timeout_s, gt=0.0)
        check_int("memory_mb", self.memory_mb, min=64)


class Attempt(NamedTuple):
    """One attempt at one stage.

    Attributes:
      stage: one of :data:`STAGES`.
      attempt: 0 for the first, 1.. for retries.
      ok: whether the attempt was accepted.
      gate: ``None`` when accepted, else the one of :data:`GATES` that rejected it.
      message: what was wrong (empty when accepted).
      task: the task's index for the ``verifier`` stage, else ``None``.
      reply: the model's reply text (the first 400 characters).
    """

    stage: str
    attempt: int
    ok: bool
    gate: str | None
    message: str
    task: int | None
    reply: str


class Synthesis(NamedTuple):
    """What :func:`synthesize_world` gives.

    Attributes:
      name: the world's name, ``"<scenario>-llm-<seed>"`` (kept or not).
      world: the :class:`~jaxsci.data.sqlworlds.World` (its tasks all pass every gate),
        or ``None`` when the world was dropped.
      attempts: every :class:`Attempt`, in order.
      dropped: why the world was dropped (``None`` when kept).
      gates: task id -> :class:`~jaxsci.data.sqlworlds.Gates` of every task that reached
        the gates (kept or not).
    """

    name: str
    world: World | None
    attempts: tuple[Attempt, ...]
    dropped: str | None
    gates: dict[str, Gates]


class _Rejected(Exception):
    def __init__(self, gate: str, message: str):
        super().__init__(message)
        self.gate = gate
        self.message = message


# ----------------------------------------------------------------- the stages' schemas


def _string(n: int) -> dict:
    return {"type": "string", "maxLength": n}


def _obj(**props) -> dict:
    return {"type": "object", "properties": props, "required": list(props)}


def stage_schemas(n_tasks: int = 3, tool_names: Sequence[str] = ()) -> dict[str, dict]:
    """The JSON schema of each stage's reply (the grammar's subset, every string bounded).

    Args:
      n_tasks: the most tasks the ``tasks`` stage may list.
      tool_names: the tools a ``verifier`` stage's reference program may call (an
        ``enum``); empty: any name.
    """
    name = {"enum": list(tool_names)} if tool_names else _string(64)
    return {
        "scenario": _obj(description=_string(240),
                         entities={"type": "array", "items": _string(24), "minItems": 2,
                                   "maxItems": 4}),
        "tasks": _obj(tasks={"type": "array", "items": _string(160), "minItems": 1,
                             "maxItems": n_tasks}),
        "database": _obj(schema_sql=_string(1200), seed_sql=_string(1600)),
        "tools": _obj(tools={"type": "array", "minItems": 1, "maxItems": 10, "items": _obj(
            name=_string(40), description=_string(100),
            arguments={"type": "array", "maxItems": 6, "items": _obj(
                name=_string(32), type={"enum": list(_KINDS)})},
            sql=_string(300))}),
        "verifier": _obj(
            reference={"type": "array", "minItems": 1, "maxItems": 6, "items": _obj(
                tool=name, arguments={"type": "array", "maxItems": 6, "items": _obj(
                    name=_string(32), value={"anyOf": [_string(60), {"type": "integer"}]})})},
            answer=_string(80), verifier=_string(900)),
    }


_SYSTEM = ("You build database-backed environments on which software agents are tested. "
           "Reply with one JSON object and nothing else.")


def _prompt(stage: str, scenario: str, ctx: Mapping[str, Any], c: SynthConfig,
            task: int | None = None) -> str:
    if stage == "scenario":
        return (f"Scenario: {scenario}.\nDescribe this application in one or two sentences "
                "(`description`) and list its 2 to 4 main entities (`entities`: the kinds "
                "of record it stores, as singular lowercase nouns).")
    head = f"Application: {ctx['description']}\nEntities: {', '.join(ctx['entities'])}\n"
    if stage == "tasks":
        return head + (f"Write {c.n_tasks} different requests (`tasks`) that a user of this "
                       "application makes and that the database alone can answer or carry "
                       "out: a question about a stored value, or adding, changing or removing "
                       "one record. Name concrete records and values.")
    tasks = "".join(f"{i + 1}. {t}\n" for i, t in enumerate(ctx["tasks"]))
    if stage == "database":
        return head + f"User requests:\n{tasks}" + (
            "Write the SQLite schema (`schema_sql`: CREATE TABLE statements, one table per "
            "entity, an `id INTEGER PRIMARY KEY` and a unique `name` in each, foreign keys "
            "for records that belong to others) and the seed data (`seed_sql`: INSERT "
            "statements, 3 to 6 rows per table) such that every request above can be "
            "answered or carried out on it.")
    db = f"Schema:\n{ctx['schema_sql']}\nSeed data:\n{ctx['seed_sql']}\n"
    if stage == "tools":
        return head + db + f"User requests:\n{tasks}" + (
            "Write the tool API (`tools`, 3 to 8 of them) that an agent uses to serve these "
            "requests. Each tool is one SQL statement (`sql`: a SELECT, INSERT, UPDATE or "
            "DELETE) whose named parameters `:arg` are its `arguments` (each a `name` and a "
            "`type`, \"string\" or \"integer\"), e.g. {\"name\": \"find_book\", "
            "\"description\": \"Find a book by its name\", \"arguments\": [{\"name\": "
            "\"name\", \"type\": \"string\"}], \"sql\": \"SELECT * FROM book WHERE name = "
            ":name\"}.")
    tools = "".join(
        f"- {t['name']}({', '.join(a['name'] + ': ' + a['type'] for a in t['arguments'])})"
        f": {t['description']}\n" for t in ctx["tools"])
    return db + f"Tools:\n{tools}User request: {ctx['tasks'][task]}\n" + (
        "Write (1) `reference`: the tool calls, in order, that carry out this request on "
        "the seed data, with literal argument values; (2) `answer`: the final answer to "
        "the user (\"Done.\" for a change); (3) `verifier`: Python code defining "
        "`def verify(initial, final, answer):` that reads the initial and the final "
        "database (read-only sqlite3 connections) and the agent's final answer (a str, or "
        "None), and returns True exactly when the request was carried out (for a question: "
        "the right value is in the answer; for a change: the final database differs from "
        "the initial one as asked). It must return False on the untouched database.")


# ----------------------------------------------------------------- parsing replies


def _parse(reply, schema: Mapping[str, Any]) -> dict:
    text = reply.content or ""
    if reply.finish_reason == "length":
        raise _Rejected("json", "the reply was cut at max_tokens before its JSON closed")
    body = text.strip()
    if body.startswith("```"):  # a server without JSON mode may fence its JSON
        body = body.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise _Rejected("json", f"the reply is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Rejected("json", f"the reply must be a JSON object, got {type(value).__name__}")
    missing = [k for k in schema["required"] if k not in value]
    if missing:
        raise _Rejected("shape", f"the reply lacks {missing}")
    return value


def _strings(value, what: str, *, lo: int = 1) -> list[str]:
    if not isinstance(value, list) or len(value) < lo or \
            not all(isinstance(v, str) and v.strip() for v in value):
        raise _Rejected("shape", f"{what} must be a list of at least {lo} non-empty strings, "
                        f"got {value!r}"[:240])
    return [v.strip() for v in value]


# ----------------------------------------------------------------- generated SQL


def _guard(db: sqlite3.Connection, steps: int = SQL_STEPS):
    """Install the authorizer and the step budget on ``db``; returns the undo function."""
    count = [0]

    def authorizer(action, *_):
        return sqlite3.SQLITE_DENY if action in _DENIED else sqlite3.SQLITE_OK

    def progress():
        count[0] += 1
        return 1 if count[0] * 1000 > steps else 0

    db.set_authorizer(authorizer)
    db.set_progress_handler(progress, 1000)

    def undo():
        db.set_authorizer(None)
        db.set_progress_handler(None, 1000)

    return undo


def _run_guarded(schema_sql: str, seed_sql: str) -> sqlite3.Connection:
    """The schema and seed in a fresh in-memory database, each statement guarded."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("PRAGMA foreign_keys = ON")
    undo = _guard(db)
    try:
        for what, sql in (("schema_sql", schema_sql), ("seed_sql", seed_sql)):
            buf, n = "", 0
            for line in (sql + "\n").splitlines(keepends=True):
                buf += line
                if sqlite3.complete_statement(buf):
                    n += 1
                    try:
                        db.execute(buf.strip().rstrip(";"))
                    except (sqlite3.Error, sqlite3.Warning) as exc:
                        raise _Rejected("seed_runs", f"{what} failed at statement {n} "
                                        f"({buf.strip()[:100]!r}): {exc}") from None
                    buf = ""
            if buf.strip():
                raise _Rejected("seed_runs", f"{what} ends in an unfinished statement "
                                f"({buf.strip()[:100]!r})")
            if n == 0:
                raise _Rejected("seed_runs", f"{what} holds no statement")
        db.commit()
    finally:
        undo()
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if not tables:
        raise _Rejected("seed_runs", "schema_sql creates no table")
    if not any(db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables):
        raise _Rejected("seed_runs", "seed_sql inserts no row")
    return db


def sql_tool(name: str, description: str, arguments: Mapping[str, type], sql: str, *,
             max_rows: int = 20):
    """A :class:`~jaxsci.common.lm.tools.Tool` that runs one parameterised SQL statement.

    Args:
      name, description: the tool's.
      arguments: argument name -> ``str`` or ``int``; each is bound to ``:name``.
      sql: one ``SELECT`` / ``INSERT`` / ``UPDATE`` / ``DELETE`` statement, optionally
        opened by ``WITH`` (refused otherwise, naming it). It runs under the authorizer
        and the step budget.
      max_rows: the most rows a query returns.

    Returns:
      the tool; a query returns its rows as objects (column name -> value), a write
      ``{"changed": rows}``.
    """
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    if head not in ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH"):
        raise ValueError(f"sql_tool {name!r}: sql must be one SELECT, INSERT, UPDATE or "
                         f"DELETE statement, got {sql[:80]!r}")
    check_int("max_rows", max_rows, min=1)
    stmt = sql.strip().rstrip(";")

    def fn(db, **kw):
        undo = _guard(db)
        try:
            cur = db.execute(stmt, kw)
            if cur.description is not None:
                cols = [d[0] for d in cur.description]
                return [dict(zip(cols, r, strict=True)) for r in cur.fetchmany(max_rows)]
            return {"changed": cur.rowcount}
        finally:
            undo()

    return make_tool(name, description, fn, dict(arguments))


def _tools(spec, db: sqlite3.Connection, c: SynthConfig) -> tuple[list[dict], tuple]:
    if not isinstance(spec, list) or not spec:
        raise _Rejected("shape", f"tools must be a non-empty list, got {spec!r}"[:200])
    out, tools, names = [], [], set()
    for i, t in enumerate(spec):
        if not isinstance(t, dict) or not {"name", "description", "arguments", "sql"} <= set(t):
            raise _Rejected("shape", f"tools[{i}] must have name, description, arguments "
                            f"and sql, got {t!r}"[:240])
        name = t["name"]
        if not isinstance(name, str) or not _IDENT.fullmatch(name) or name in names:
            raise _Rejected("shape", f"tools[{i}].name must be a new identifier (letters, "
                            f"digits, _), got {name!r}")
        names.add(name)
        args = {}
        for a in t["arguments"] if isinstance(t["arguments"], list) else [None]:
            if not isinstance(a, dict) or not isinstance(a.get("name"), str) or \
                    not _IDENT.fullmatch(a["name"]) or a.get("type") not in _KINDS \
                    or a["name"] in args:
                raise _Rejected("shape", f"tool {name!r}: arguments must be distinct "
                                f"{{name: identifier, type: string | integer}}, got "
                                f"{t['arguments']!r}"[:240])
            args[a["name"]] = _KINDS[a["type"]]
        sql = t["sql"] if isinstance(t["sql"], str) else ""
        try:
            tool = sql_tool(name, str(t["description"]), args, sql, max_rows=c.max_rows)
        except (ValueError, TypeError) as exc:
            raise _Rejected("tool_sql", str(exc)) from None
        undo = _guard(db)
        try:  # compiles against the schema, every parameter bound, nothing run
            db.execute("EXPLAIN " + sql.strip().rstrip(";"), dict.fromkeys(args))
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise _Rejected("tool_sql", f"tool {name!r}: its sql does not compile "
                            f"against the schema: {exc}") from None
        finally:
            undo()
        out.append({"name": name, "description": str(t["description"]),
                    "arguments": [{"name": k, "type": "string" if v is str else "integer"}
                                  for k, v in args.items()], "sql": sql})
        tools.append(tool)
    return out, tuple(tools)


# ----------------------------------------------------------------- verifiers in the sandbox

_HARNESS = '''\
import json, sqlite3, sys
def _open(script):
    db = sqlite3.connect(":memory:")
    db.executescript(script)
    db.execute("PRAGMA query_only = ON")
    return db
_args = json.loads(sys.stdin.read())
_ns = {{"__name__": "verifier"}}
exec(compile({code!r}, "verifier.py", "exec"), _ns)
if not callable(_ns.get("verify")):
    raise NameError("the verifier code defines no function verify(initial, final, answer)")
_got = _ns["verify"](_open(_args["initial"]), _open(_args["final"]), _args["answer"])
if not isinstance(_got, bool) and _got not in ("complete", "others"):
    raise TypeError(f"verify must return a bool, got {{type(_got).__name__}} {{_got!r}}"[:200])
print({mark!r} + json.dumps(_got))
'''


def _dump(db: sqlite3.Connection) -> str:
    return "\n".join(db.iterdump())


def sandboxed_verifier(code: str, *, cpu_s: float = 2.0, timeout_s: float = 10.0,
                       memory_mb: int = 256) -> Callable:
    """``verify(initial, final, answer) -> bool`` that runs generated ``code`` in the sandbox.

    ``code`` must define ``verify(initial, final, answer)``; it runs in
    :func:`~jaxsci.common.agents.run_code` on read-only copies of the two databases
    (rebuilt from their SQL dumps) and the answer. A bool (or ``"complete"`` /
    ``"others"``) comes back; anything else (an exception, a timeout, another return
    type) gives ``False``, with the reason in the callable's ``errors`` list (the last
    one at ``errors[-1]``).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    program = _HARNESS.format(code=code, mark=_VERDICT)
    errors: list[str] = []

    def verify(initial: sqlite3.Connection, final: sqlite3.Connection,
               answer: str | None) -> bool:
        r = run_code(program, stdin=json.dumps({"initial": _dump(initial),
                                                 "final": _dump(final), "answer": answer}),
                     cpu_s=cpu_s, timeout_s=timeout_s, memory_mb=memory_mb)
        line = next((x for x in reversed(r.stdout.splitlines()) if x.startswith(_VERDICT)),
                    None)
        if r.status != "ok" or line is None:
            tail = [x for x in r.stderr.strip().splitlines() if x.strip()]
            errors.append(f"the verifier {r.status}: " + (tail[-1] if tail else
                                                           "no verdict printed")[:300])
            return False
        try:
            got = json.loads(line[len(_VERDICT):])
        except ValueError:
            errors.append("the verifier printed a malformed verdict")
            return False
        return got is True or got == "complete"

    verify.errors = errors
    verify.code = code
    return verify


# ----------------------------------------------------------------- the pipeline


def _request_errors() -> tuple[type[Exception], ...]:
    """What a chat call raises for a request the model cannot serve (in-process: a
    ``ValueError``, e.g. a prompt beyond the context; a server: HTTP 400)."""
    try:
        import openai
    except ImportError:
        return (ValueError,)
    return (ValueError, openai.BadRequestError)


def _check_chat(chat) -> None:
    if not callable(getattr(chat, "chat", None)):
        raise TypeError(f"chat must be a ChatModel (with chat(messages, ...)), got "
                        f"{type(chat).__name__}")


def _reference(spec, tools: Mapping[str, Any]) -> tuple[Call, ...]:
    if not isinstance(spec, list) or not spec:
        raise _Rejected("shape", f"reference must be a non-empty list of tool calls, got "
                        f"{spec!r}"[:200])
    calls = []
    for i, s in enumerate(spec):
        if not isinstance(s, dict) or s.get("tool") not in tools or \
                not isinstance(s.get("arguments", []), list):
            raise _Rejected("shape", f"reference[{i}] must call one of {sorted(tools)} with "
                            f"a list of arguments, got {s!r}"[:240])
        args = {}
        for a in s.get("arguments", []):
            if not isinstance(a, dict) or not isinstance(a.get("name"), str) or "value" not in a:
                raise _Rejected("shape", f"reference[{i}]: arguments must be "
                                f"{{name, value}} pairs, got {a!r}"[:240])
            args[a["name"]] = a["value"]
        calls.append(Call(s["tool"], args))
    return tuple(calls)


def _diagnose(world: World, task: Task, gates: Gates) -> tuple[str, str]:
    """The first gate ``task`` failed and why."""
    errs = task.verify.errors
    if not gates.null_action_fails:
        return "null_action_fails", ("the untouched initial database with no answer "
                                     "already passes the verifier: the task tests nothing")
    env = world.env()
    env.reset(task)
    try:
        for i, call in enumerate(task.data["reference"]):
            try:
                env.call(call.name, dict(call.arguments))
            except Exception as exc:  # noqa: BLE001  (reported, the task is dropped)
                return "reference_passes", (f"reference call {i + 1} {call.name}"
                                            f"({dict(call.arguments)}) failed: "
                                            f"{type(exc).__name__}: {exc}"[:300])
        n = len(errs)
        env.finish(task.data["answer"])
        if len(errs) > n:
            return "reference_passes", errs[-1]
        return "reference_passes", ("the verifier rejects the reference program's final "
                                    "database and answer")
    finally:
        env.close_episode()


def synthesize_world(chat, scenario: str, *, seed: int = 0,
                     config: SynthConfig | None = None) -> Synthesis:
    """Have ``chat`` write a world stage by stage; gate it as the template path is gated.

    Args:
      chat: a :class:`~jaxsci.common.lm.chat.ChatModel` (anything with ``chat``);
        ``response_format`` carries each stage's JSON schema (:func:`stage_schemas`).
      scenario: what the world is about, e.g. ``"library"`` or ``"hotel booking"``.
      seed: the sampling seed of retries (the first attempt of a stage is greedy).
      config: :class:`SynthConfig` (default ``SynthConfig()``).

    Returns:
      :class:`Synthesis`: the world (``None`` if dropped), every attempt, why it was
      dropped, and each gated task's :class:`~jaxsci.data.sqlworlds.Gates`. The world is
      named ``"<scenario>-llm-<seed>"``; each task's ``data`` holds ``reference``,
      ``answer``, ``depth``, ``world``, ``template`` (``"llm"``) and ``verifier_code``.

    Raises:
      TypeError, ValueError: a bad ``chat``, ``scenario``, ``seed`` or ``config``, named.
    """
    if not isinstance(scenario, str) or not scenario.strip() or len(scenario) > 60:
        raise ValueError(f"scenario must be a non-empty str of at most 60 characters, got "
                         f"{scenario!r}")
    _check_chat(chat)
    check_int("seed", seed, min=0)
    c = SynthConfig() if config is None else config
    if not isinstance(c, SynthConfig):
        raise TypeError(f"config must be a SynthConfig, got {type(c).__name__}")
    attempts: list[Attempt] = []
    ctx: dict[str, Any] = {}
    name = f"{scenario.strip()}-llm-{seed}"

    def ask(stage: str, schema: dict, check: Callable[[dict], Any], task: int | None = None):
        """Run one stage with retries; return ``check``'s value or ``None`` when dropped."""
        last = None
        for k in range(c.retries + 1):
            content = _prompt(stage, scenario, ctx, c, task)
            if last is not None:
                content += (f"\nYour previous reply was rejected ({last.gate}): "
                            f"{last.message}\nWrite a corrected reply.")
            msgs = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": content}]
            kw: dict[str, Any] = {"temperature": 0.0}
            if k:
                kw = {"temperature": c.retry_temperature,
                      "seed": (seed * 1009 + STAGES.index(stage) * 101 + (task or 0) * 11 + k)
                      % 2**31}
            try:
                reply = chat.chat(msgs, response_format={
                    "type": "json_schema", "json_schema": {"name": stage, "schema": schema}},
                    max_tokens=c.max_tokens, **kw)[0]
            except _request_errors() as exc:
                last = _Rejected("reply", f"the model refused the request: "
                                 f"{type(exc).__name__}: {exc}"[:300])
                attempts.append(Attempt(stage, k, False, last.gate, last.message, task, ""))
                continue
            try:
                value = check(_parse(reply, schema))
            except _Rejected as r:
                last = r
                attempts.append(Attempt(stage, k, False, r.gate, r.message, task,
                                        (reply.content or "")[:400]))
                continue
            attempts.append(Attempt(stage, k, True, None, "", task, (reply.content or "")[:400]))
            return value
        return None

    def dropped(stage: str, gates=None) -> Synthesis:
        last = attempts[-1] if attempts else None
        why = f"the {stage} stage was rejected on every attempt" + (
            f" (last: {last.gate}: {last.message})" if last is not None else "")
        return Synthesis(name, None, tuple(attempts), why[:400], dict(gates or {}))

    schemas = stage_schemas(c.n_tasks)

    def scenario_stage(v):
        desc = v["description"]
        if not isinstance(desc, str) or not desc.strip():
            raise _Rejected("shape", "description must be a non-empty string")
        return desc.strip(), _strings(v["entities"], "entities", lo=2)

    got = ask("scenario", schemas["scenario"], scenario_stage)
    if got is None:
        return dropped("scenario")
    ctx["description"], ctx["entities"] = got

    got = ask("tasks", schemas["tasks"], lambda v: _strings(v["tasks"], "tasks"))
    if got is None:
        return dropped("tasks")
    ctx["tasks"] = list(dict.fromkeys(got))

    def database_stage(v):
        schema_sql, seed_sql = v["schema_sql"], v["seed_sql"]
        if not isinstance(schema_sql, str) or not isinstance(seed_sql, str):
            raise _Rejected("shape", "schema_sql and seed_sql must be strings")
        db = _run_guarded(schema_sql, seed_sql)
        try:  # the template path's own constructor must accept it too
            SQLiteEnv(schema_sql, seed_sql, (), [Task("probe", "", lambda *a: False)])
        except SeedSQLError as exc:
            db.close()
            raise _Rejected("seed_runs", str(exc)) from None
        return schema_sql, seed_sql, db

    got = ask("database", schemas["database"], database_stage)
    if got is None:
        return dropped("database")
    ctx["schema_sql"], ctx["seed_sql"], db = got

    try:
        got = ask("tools", schemas["tools"], lambda v: _tools(v["tools"], db, c))
    finally:
        db.close()
    if got is None:
        return dropped("tools")
    ctx["tools"], tools = got
    by_name = {t.name: t for t in tools}
    v_schema = stage_schemas(c.n_tasks, sorted(by_name))["verifier"]
    kept: list[Task] = []
    all_gates: dict[str, Gates] = {}

    for i, prompt in enumerate(ctx["tasks"]):
        tid = f"{name}_task{i}"

        def verifier_stage(v, i=i, prompt=prompt, tid=tid):
            ref = _reference(v["reference"], by_name)
            if not isinstance(v["verifier"], str) or not isinstance(v["answer"], str):
                raise _Rejected("shape", "verifier and answer must be strings")
            verify = sandboxed_verifier(v["verifier"], cpu_s=c.cpu_s, timeout_s=c.timeout_s,
                                        memory_mb=c.memory_mb)
            task = Task(tid, prompt, verify, {
                "reference": ref, "answer": v["answer"], "depth": len(ref), "world": name,
                "template": "llm", "verifier_code": v["verifier"]})
            world = World(name, ctx["schema_sql"], ctx["seed_sql"], tools, (task,))
            gates = check_gates(world)[tid]  # the template path's gates, as they are
            all_gates[tid] = gates
            if not all(gates):
                raise _Rejected(*_diagnose(world, task, gates))
            return task

        task = ask("verifier", v_schema, verifier_stage, task=i)
        if task is not None:
            kept.append(task)
    if not kept:
        return Synthesis(name, None, tuple(attempts), "no task passed the gates", all_gates)
    return Synthesis(name, World(name, ctx["schema_sql"], ctx["seed_sql"], tools, tuple(kept)),
                     tuple(attempts), None, all_gates)


def pass_rates(results: Sequence[Synthesis]) -> dict[str, Any]:
    """Per stage, the share of attempts its checks accepted, over many syntheses.

    Returns:
      ``{"stages": STAGES, "attempts": [n per stage], "passed": [n per stage], "rate":
      [passed / attempts, NaN where no attempt], "rejections": {gate: count},
      "worlds": len(results), "kept": worlds kept, "tasks_kept": tasks in them}``.
    """
    att = dict.fromkeys(STAGES, 0)
    ok = dict.fromkeys(STAGES, 0)
    rej = dict.fromkeys(GATES, 0)
    for s in results:
        if not isinstance(s, Synthesis):
            raise TypeError(f"results must hold Synthesis values, got {type(s).__name__}")
        for a in s.attempts:
            att[a.stage] += 1
            ok[a.stage] += a.ok
            if a.gate is not None:
                rej[a.gate] += 1
    return {"stages": STAGES, "attempts": [att[s] for s in STAGES],
            "passed": [ok[s] for s in STAGES],
            "rate": [ok[s] / att[s] if att[s] else float("nan") for s in STAGES],
            "rejections": rej, "worlds": len(results),
            "kept": sum(s.world is not None for s in results),
            "tasks_kept": sum(len(s.world.tasks) for s in results if s.world is not None)}
