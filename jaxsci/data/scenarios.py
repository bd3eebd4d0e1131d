r"""Synthesised SQLite worlds from scenario templates (Agent World Model's pipeline, quick path).

Agent World Model (ICML 2026) synthesises agent environments in stages: a scenario, the
users' tasks, a SQLite schema with sample data, a tool API over it, and verification
code. The quick path here builds every stage from in-package **templates**, so that
thousands of environments can be drawn without a language model:

* a :class:`Scenario` is a chain of two or three :class:`Entity` tables (a parent and its
  children, with foreign keys), each with a unique name column and typed fields whose
  values are drawn from pools. Twelve ship in :data:`SCENARIOS`: library, shop, todo,
  calendar, clinic, fleet, school, kitchen, garden, museum, airline, gym.
* :func:`build_world` draws a **variant** of a scenario from a seed. It picks the rows
  and their values (``rows`` per table), writes the schema and seed SQL, derives the
  tools (``find_<e>`` by name, ``get_<e>`` by id, ``list_<e>s_of_<parent>``, ``create_<e>``,
  ``update_<e>_<field>``, ``delete_<e>`` on the leaf table: 8-12 per world) and
  instantiates the task templates on the seeded rows, each with its reference program
  and a deterministic verifier (:func:`jaxsci.data.sqlworlds.verifier`). The result is a
  :class:`~jaxsci.data.sqlworlds.World`.
* Task templates: ``query`` (a field of a named row: 1 call), ``hop`` (a field of its
  parent: 2), ``count`` (how many children its parent has: 2), ``update`` (set an
  integer field: 2), ``create`` (a new child of a named parent: 2), ``delete`` (a leaf
  row: 2), and ``hop2`` (a field of the grandparent, three-table scenarios: 3).
* **Gates on every task** (AWM's users found about 22% of the released environments had
  seed-SQL errors or tasks already satisfied by the initial database): the seed SQL
  runs, the null action fails and the reference program passes
  (:func:`~jaxsci.data.sqlworlds.check_gates`). :func:`build_world` keeps only the tasks
  that pass them and reports the others in ``world_gates``.

The LLM path of the paper (a model writes each stage) produces the same
:class:`~jaxsci.data.sqlworlds.World` values and goes through the same gates.

>>> w = build_world(SCENARIOS["library"], seed=0)
>>> len(w.tools), sorted({t.data["template"] for t in w.tasks})[:3]
(10, ['count', 'create', 'delete'])
>>> all(all(g) for g in world_gates(w).values())
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

from jaxsci.common.agents import Task
from jaxsci.data.sqlworlds import (
    Call,
    Gates,
    World,
    check_gates,
    make_tool,
    verifier,
)

__all__ = [
    "SCENARIOS",
    "TEMPLATES",
    "Entity",
    "Field",
    "Scenario",
    "build_world",
    "jobs",
    "world_gates",
]

TEMPLATES = ("query", "hop", "count", "update", "create", "delete", "hop2")


class Field(NamedTuple):
    """A column: its name, its type (``str`` or ``int``) and the pool its values come
    from (``int`` pools are ``(low, high)`` ranges)."""

    name: str
    kind: type
    pool: tuple


class Entity(NamedTuple):
    """A table: its singular name, the pool of its unique names, its fields, and the
    entity it belongs to (``None`` for the root)."""

    name: str
    names: tuple[str, ...]
    fields: tuple[Field, ...]
    parent: str | None = None


class Scenario(NamedTuple):
    """A chain of entities, root first (each one's ``parent`` is the one before it)."""

    name: str
    entities: tuple[Entity, ...]


def _s(name, *pool):
    return Field(name, str, pool)


def _i(name, lo, hi):
    return Field(name, int, (lo, hi))


_PEOPLE = ("Ada", "Ben", "Chloe", "Dev", "Eva", "Femi", "Gus", "Hana", "Ivan", "Jin", "Kemi",
           "Lars", "Mia", "Noor", "Omar", "Pia")
_CITIES = ("Paris", "Lagos", "Lima", "Oslo", "Pune", "Kyoto", "Quito", "Cairo", "Perth")

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("library", (
        Entity("author", ("Austen", "Herbert", "Achebe", "Calvino", "Morrison", "Borges"),
               (_s("country", "England", "USA", "Nigeria", "Italy", "Argentina"),
                _i("born", 1750, 1960))),
        Entity("book", ("Emma", "Dune", "Arrow", "Cities", "Beloved", "Ficciones", "Sula",
                        "Aleph", "Persuasion"),
               (_i("copies", 0, 6), _i("pages", 90, 900)), "author"))),
    Scenario("shop", (
        Entity("customer", _PEOPLE, (_s("city", *_CITIES), _i("age", 18, 80))),
        Entity("purchase", ("A100", "A101", "A102", "B200", "B201", "C300", "C301", "D400"),
               (_i("quantity", 1, 9), _i("total", 5, 500)), "customer"))),
    Scenario("todo", (
        Entity("project", ("apollo", "borealis", "cobalt", "delta", "ember", "fjord"),
               (_s("owner", *_PEOPLE), _i("budget", 1, 90))),
        Entity("task", ("design", "review", "deploy", "test", "audit", "draft", "plan",
                        "publish"),
               (_i("priority", 1, 5), _s("state", "open", "doing", "done")), "project"))),
    Scenario("calendar", (
        Entity("room", ("Aurora", "Birch", "Cedar", "Dune", "Elm", "Fir"),
               (_i("floor", 0, 9), _i("seats", 2, 40))),
        Entity("meeting", ("standup", "retro", "kickoff", "sync", "demo", "planning",
                           "offsite", "review"),
               (_i("hour", 8, 18), _s("day", "Monday", "Tuesday", "Wednesday", "Thursday",
                                      "Friday")), "room"))),
    Scenario("clinic", (
        Entity("doctor", ("Okafor", "Silva", "Tanaka", "Novak", "Haddad", "Larsen"),
               (_s("specialty", "cardiology", "dermatology", "neurology", "oncology"),
                _i("room", 100, 130))),
        Entity("patient", _PEOPLE, (_i("age", 1, 95), _s("ward", "north", "south", "east")),
               "doctor"),
        Entity("visit", ("V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9"),
               (_i("minutes", 10, 60), _i("fee", 20, 300)), "patient"))),
    Scenario("fleet", (
        Entity("depot", ("Harbor", "Summit", "Valley", "Airport", "Central"),
               (_s("city", *_CITIES), _i("bays", 4, 40))),
        Entity("vehicle", ("KX-11", "KX-12", "LM-20", "LM-21", "TR-30", "TR-31", "VN-40",
                           "VN-41"),
               (_i("km", 1000, 90000), _s("fuel", "diesel", "electric", "petrol")), "depot"))),
    Scenario("school", (
        Entity("teacher", ("Abara", "Brandt", "Costa", "Dubois", "Eze", "Fischer"),
               (_s("subject", "maths", "history", "biology", "music"), _i("years", 1, 35))),
        Entity("course", ("algebra", "anatomy", "baroque", "empires", "geometry", "genetics",
                          "harmony", "revolutions"),
               (_i("credits", 1, 6), _i("seats", 10, 60)), "teacher"),
        Entity("student", _PEOPLE, (_i("grade", 1, 20), _i("year", 1, 5)), "course"))),
    Scenario("kitchen", (
        Entity("recipe", ("risotto", "curry", "paella", "ramen", "tagine", "goulash"),
               (_s("cuisine", "Italian", "Indian", "Spanish", "Japanese", "Moroccan"),
                _i("minutes", 10, 180))),
        Entity("ingredient", ("rice", "onion", "garlic", "saffron", "ginger", "miso", "lemon",
                              "paprika", "cumin"),
               (_i("grams", 5, 900), _i("calories", 1, 400)), "recipe"))),
    Scenario("garden", (
        Entity("bed", ("north", "south", "east", "west", "pond", "terrace"),
               (_s("soil", "clay", "loam", "sand", "peat"), _i("area", 2, 40))),
        Entity("plant", ("tomato", "basil", "fern", "lavender", "tulip", "mint", "sage",
                         "rose", "kale"),
               (_i("height", 5, 200), _i("age", 1, 12)), "bed"))),
    Scenario("museum", (
        Entity("gallery", ("Atrium", "Baroque", "Modern", "Nordic", "Orient", "Sculpture"),
               (_i("floor", 0, 4), _s("curator", *_PEOPLE))),
        Entity("artwork", ("Nocturne", "Harvest", "Tempest", "Mirage", "Solstice",
                           "Lantern", "Cascade", "Ember"),
               (_i("year", 1400, 2020), _i("value", 1, 900)), "gallery"))),
    Scenario("airline", (
        Entity("airport", ("ACC", "BOG", "CPH", "DEL", "EZE", "FRA"),
               (_s("country", "Ghana", "Colombia", "Denmark", "India", "Argentina",
                   "Germany"), _i("gates", 4, 120))),
        Entity("flight", ("JX101", "JX102", "JX203", "JX204", "JX305", "JX306", "JX407",
                          "JX408"),
               (_i("seats", 50, 400), _i("hour", 0, 23)), "airport"),
        Entity("passenger", _PEOPLE, (_i("row", 1, 60), _s("meal", "veg", "fish", "none")),
               "flight"))),
    Scenario("gym", (
        Entity("coach", ("Ali", "Bea", "Cal", "Dina", "Eli", "Fay"),
               (_s("sport", "boxing", "yoga", "rowing", "climbing"), _i("rate", 20, 90))),
        Entity("member", _PEOPLE, (_i("visits", 0, 200), _i("age", 16, 80)), "coach"))),
)}


# ----------------------------------------------------------------- schema and rows


def _check(scenario: Scenario) -> Scenario:
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, got {type(scenario).__name__}")
    ents = scenario.entities
    if not 2 <= len(ents) <= 3:
        raise ValueError(f"scenario {scenario.name!r} must chain 2 or 3 entities, got "
                         f"{len(ents)}")
    for i, e in enumerate(ents):
        want = None if i == 0 else ents[i - 1].name
        if e.parent != want:
            raise ValueError(f"scenario {scenario.name!r}: entity {e.name!r} must belong to "
                             f"{want!r}, got parent {e.parent!r}")
        if not any(f.kind is int for f in e.fields):
            raise ValueError(f"scenario {scenario.name!r}: entity {e.name!r} needs an "
                             f"integer field")
    return scenario


def _schema(ents: Sequence[Entity]) -> str:
    out = []
    for e in ents:
        cols = ["id INTEGER PRIMARY KEY", "name TEXT NOT NULL UNIQUE"]
        cols += [f"{f.name} {'INTEGER' if f.kind is int else 'TEXT'} NOT NULL"
                 for f in e.fields]
        if e.parent is not None:
            cols.append(f"{e.parent}_id INTEGER NOT NULL REFERENCES {e.parent}(id)")
        out.append(f"CREATE TABLE {e.name} ({', '.join(cols)});")
    return "\n".join(out)


def _value(f: Field, rng: random.Random):
    return rng.randint(*f.pool) if f.kind is int else rng.choice(f.pool)


def _sql(v) -> str:
    return str(v) if isinstance(v, int) else "'" + str(v).replace("'", "''") + "'"


def _rows(ents: Sequence[Entity], rng: random.Random, n: int) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for e in ents:
        k = min(n, len(e.names) - 1)  # one name stays free for ``create``
        names = rng.sample(e.names, k)
        rows[e.name] = []
        for i, name in enumerate(names, 1):
            r = {"id": i, "name": name, **{f.name: _value(f, rng) for f in e.fields}}
            if e.parent is not None:
                r[f"{e.parent}_id"] = rng.randint(1, len(rows[e.parent]))
            rows[e.name].append(r)
    return rows


def _seed(ents: Sequence[Entity], rows: dict[str, list[dict]]) -> str:
    return "\n".join(
        f"INSERT INTO {e.name} VALUES " + ", ".join(
            "(" + ", ".join(_sql(v) for v in r.values()) + ")" for r in rows[e.name]) + ";"
        for e in ents)


# ----------------------------------------------------------------- tools


def _columns(e: Entity) -> list[str]:
    return ["id", "name", *(f.name for f in e.fields)] + (
        [f"{e.parent}_id"] if e.parent else [])


def _keys(e: Entity) -> list[str]:
    return [f"{e.name}_id", *_columns(e)[1:]]


def _one(db, e: Entity, where: str, value, what: str) -> dict:
    row = db.execute(f"SELECT {', '.join(_columns(e))} FROM {e.name} WHERE {where}",
                     (value,)).fetchone()
    if row is None:
        raise LookupError(f"no {e.name} with {what} {value!r}")
    return dict(zip(_keys(e), row, strict=True))


def _tools(ents: Sequence[Entity]) -> tuple:
    tools = []
    for e in ents:
        tools.append(make_tool(f"find_{e.name}", f"Find a {e.name} by its name",
                               lambda db, name, e=e: _one(db, e, "lower(name) = lower(?)",
                                                          name, "name"), {"name": str}))
        tools.append(make_tool(f"get_{e.name}", f"Get a {e.name} by {e.name}_id",
                               lambda db, e=e, **kw: _one(db, e, "id = ?",
                                                          kw[f"{e.name}_id"], "id"),
                               {f"{e.name}_id": int}))
        if e.parent is not None:
            tools.append(make_tool(
                f"list_{e.name}s_of_{e.parent}", f"List the {e.name}s of a {e.parent}",
                lambda db, e=e, **kw: [dict(zip(_keys(e), r, strict=True)) for r in db.execute(
                    f"SELECT {', '.join(_columns(e))} FROM {e.name} WHERE {e.parent}_id = ? "
                    f"ORDER BY id", (kw[f"{e.parent}_id"],)).fetchall()],
                {f"{e.parent}_id": int}))
        f = next(f for f in e.fields if f.kind is int)
        tools.append(make_tool(f"update_{e.name}_{f.name}", f"Set the {f.name} of a {e.name}",
                               lambda db, value, e=e, f=f, **kw: _update(db, e, f, kw, value),
                               {f"{e.name}_id": int, "value": int}))
    child, parent = ents[-1], ents[-2]
    args = {"name": str, **{f.name: f.kind for f in child.fields}, f"{parent.name}_id": int}
    tools.append(make_tool(f"create_{child.name}", f"Add a {child.name} to a {parent.name}",
                           lambda db, **kw: _create(db, child, kw), args))
    tools.append(make_tool(f"delete_{child.name}", f"Delete a {child.name}",
                           lambda db, **kw: _delete(db, child, kw[f"{child.name}_id"]),
                           {f"{child.name}_id": int}))
    return tuple(tools)


def _update(db, e: Entity, f: Field, kw, value) -> dict:
    i = kw[f"{e.name}_id"]
    _one(db, e, "id = ?", i, "id")
    db.execute(f"UPDATE {e.name} SET {f.name} = ? WHERE id = ?", (value, i))
    return _one(db, e, "id = ?", i, "id")


def _create(db, e: Entity, kw) -> dict:
    cols = ["name", *(f.name for f in e.fields), f"{e.parent}_id"]
    cur = db.execute(f"INSERT INTO {e.name} ({', '.join(cols)}) VALUES "
                     f"({', '.join('?' * len(cols))})", tuple(kw[c] for c in cols))
    return _one(db, e, "id = ?", cur.lastrowid, "id")


def _delete(db, e: Entity, i: int) -> dict:
    row = _one(db, e, "id = ?", i, "id")
    db.execute(f"DELETE FROM {e.name} WHERE id = ?", (i,))
    return {"deleted": row[f"{e.name}_id"]}


# ----------------------------------------------------------------- tasks


def _task(world: str, template: str, id: str, prompt: str, reference, answer, verify):
    return Task(id, prompt, verify, {"depth": len(reference), "reference": tuple(reference),
                                     "answer": answer, "world": world, "template": template})


def _tasks(name: str, ents: Sequence[Entity], rows, rng: random.Random) -> list[Task]:
    out = []
    child, parent = ents[-1], ents[-2]
    c = rng.choice(rows[child.name])
    p = rows[parent.name][c[f"{parent.name}_id"] - 1]
    fc = rng.choice(child.fields)
    fp = rng.choice(parent.fields)
    find_c = Call(f"find_{child.name}", {"name": c["name"]})
    get_p = Call(f"get_{parent.name}", {f"{parent.name}_id": p["id"]})
    out.append(_task(name, "query", f"{name}_query",
                     f"What is the {fc.name} of the {child.name} '{c['name']}'?", [find_c],
                     str(c[fc.name]), verifier(answer=str(c[fc.name]))))
    out.append(_task(name, "hop", f"{name}_hop",
                     f"What is the {fp.name} of the {parent.name} of the {child.name} "
                     f"'{c['name']}'?", [find_c, get_p], str(p[fp.name]),
                     verifier(answer=str(p[fp.name]))))
    n = sum(r[f"{parent.name}_id"] == p["id"] for r in rows[child.name])
    out.append(_task(name, "count", f"{name}_count",
                     f"How many {child.name}s does the {parent.name} of the {child.name} "
                     f"'{c['name']}' have?",
                     [find_c, Call(f"list_{child.name}s_of_{parent.name}",
                                   {f"{parent.name}_id": p["id"]})], str(n),
                     verifier(answer=str(n))))
    fi = next(f for f in child.fields if f.kind is int)
    new = c[fi.name] + rng.randint(1, 9)  # never the current value
    out.append(_task(name, "update", f"{name}_update",
                     f"Set the {fi.name} of the {child.name} '{c['name']}' to {new}.",
                     [find_c, Call(f"update_{child.name}_{fi.name}",
                                   {f"{child.name}_id": c["id"], "value": new})], "Done.",
                     verifier(changes=[(f"SELECT COUNT(*) FROM {child.name} WHERE id = "
                                        f"{c['id']} AND {fi.name} = {new}", 1)])))
    free = [x for x in child.names if x not in {r["name"] for r in rows[child.name]}][0]
    vals = {f.name: _value(f, rng) for f in child.fields}
    conds = " AND ".join([f"name = {_sql(free)}", f"{parent.name}_id = {p['id']}",
                          *(f"{k} = {_sql(v)}" for k, v in vals.items())])
    out.append(_task(name, "create", f"{name}_create",
                     f"Add a {child.name} named '{free}' to the {parent.name} '{p['name']}', "
                     f"with " + ", ".join(f"{k} {v}" for k, v in vals.items()) + ".",
                     [Call(f"find_{parent.name}", {"name": p["name"]}),
                      Call(f"create_{child.name}", {"name": free, **vals,
                                                    f"{parent.name}_id": p["id"]})],
                     "Done.", verifier(changes=[(f"SELECT COUNT(*) FROM {child.name} WHERE "
                                                 f"{conds}", 1)])))
    d = rng.choice([r for r in rows[child.name] if r["id"] != c["id"]])
    out.append(_task(name, "delete", f"{name}_delete",
                     f"Delete the {child.name} '{d['name']}'.",
                     [Call(f"find_{child.name}", {"name": d["name"]}),
                      Call(f"delete_{child.name}", {f"{child.name}_id": d["id"]})], "Done.",
                     verifier(changes=[(f"SELECT COUNT(*) FROM {child.name} WHERE id = "
                                        f"{d['id']}", -1)])))
    if len(ents) == 3:
        g_ent = ents[0]
        g = rows[g_ent.name][p[f"{g_ent.name}_id"] - 1]
        fg = rng.choice(g_ent.fields)
        out.append(_task(name, "hop2", f"{name}_hop2",
                         f"What is the {fg.name} of the {g_ent.name} of the {parent.name} of "
                         f"the {child.name} '{c['name']}'?",
                         [find_c, get_p, Call(f"get_{g_ent.name}",
                                              {f"{g_ent.name}_id": g["id"]})],
                         str(g[fg.name]), verifier(answer=str(g[fg.name]))))
    return out


def build_world(scenario: Scenario, seed: int = 0, *, rows: int = 5) -> World:
    """A variant of ``scenario``: rows, tools and gated tasks drawn from ``seed``.

    Args:
      scenario: a :class:`Scenario` (e.g. ``SCENARIOS["clinic"]``).
      seed: which variant (the rows, their values and the tasks' targets).
      rows: rows per table (at most one fewer than the table's name pool).

    Returns:
      a :class:`~jaxsci.data.sqlworlds.World` named ``"<scenario>-<seed>"`` whose tasks
      all pass their gates (``data`` of each task: ``template``, ``depth``, ``reference``,
      ``answer``, ``world``).

    Raises:
      TypeError, ValueError: a bad scenario, seed or row count (named).
    """
    _check(scenario)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 2:
        raise ValueError(f"rows must be an int >= 2, got {rows!r}")
    rng = random.Random(f"{scenario.name}/{seed}")
    ents = scenario.entities
    data = _rows(ents, rng, rows)
    name = f"{scenario.name}-{seed}"
    world = World(name, _schema(ents), _seed(ents, data), _tools(ents),
                  tuple(_tasks(name, ents, data, rng)))
    gates = check_gates(world)
    return world._replace(tasks=tuple(t for t in world.tasks if all(gates[t.id])))


def world_gates(world: World) -> dict[str, Gates]:
    """The gates of every task of ``world`` (:func:`jaxsci.data.sqlworlds.check_gates`)."""
    return check_gates(world)


def jobs(names: Sequence[str], seeds: Sequence[int], *, rows: int = 5) -> list[tuple[World, Task]]:
    """Every ``(world, task)`` pair of the variants ``seeds`` of the scenarios ``names``
    (keys of :data:`SCENARIOS`), in that order."""
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"names must be scenarios of {sorted(SCENARIOS)}, got {unknown}")
    out = []
    for n in names:
        for sd in seeds:
            w = build_world(SCENARIOS[n], sd, rows=rows)
            out += [(w, t) for t in w.tasks]
    return out

