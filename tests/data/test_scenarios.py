"""Synthesised SQLite worlds (jaxsci.data.scenarios): every scenario's variants pass the
gates on every task, the templates have the depths they claim, variants are
deterministic in the seed, tools behave, and bad input is named."""

import pytest

from jaxsci.common.lm.tools import ToolCallError
from jaxsci.data import scenarios as S
from jaxsci.data import sqlworlds as sw


@pytest.mark.parametrize("name", sorted(S.SCENARIOS))
def test_every_variant_passes_the_gates_on_every_task(name):
    sc = S.SCENARIOS[name]
    for seed in range(5):
        w = S.build_world(sc, seed)
        templates = [t.data["template"] for t in w.tasks]
        # no task was dropped: every template of the scenario survived its gates
        assert templates == list(S.TEMPLATES[:6 + (len(sc.entities) == 3)])
        assert all(all(g) for g in S.world_gates(w).values())
        assert 8 <= len(w.tools) <= 13
        env = w.env()
        for t in w.tasks:
            assert t.data["depth"] == len(t.data["reference"])
            assert env.verify(t, env.template, env.template, None) == "others"
            assert sw.run_reference(env, t) == "complete"
            assert sw.run_reference(env, t._replace()) == "complete"  # episodes reset


def test_depths_of_the_templates():
    w = S.build_world(S.SCENARIOS["clinic"], 1)
    depth = {t.data["template"]: t.data["depth"] for t in w.tasks}
    assert depth == {"query": 1, "hop": 2, "count": 2, "update": 2, "create": 2,
                     "delete": 2, "hop2": 3}


def test_variants_are_deterministic_in_the_seed():
    a = S.build_world(S.SCENARIOS["fleet"], 7)
    b = S.build_world(S.SCENARIOS["fleet"], 7)
    c = S.build_world(S.SCENARIOS["fleet"], 8)
    assert a.seed_sql == b.seed_sql and [t.prompt for t in a.tasks] == [t.prompt for t in b.tasks]
    assert a.seed_sql != c.seed_sql


def test_wrong_answers_and_wrong_writes_fail():
    w = S.build_world(S.SCENARIOS["library"], 2)
    env = w.env()
    by = {t.data["template"]: t for t in w.tasks}
    q = by["query"]
    env.reset(q)
    assert env.finish("I do not know") == "others"
    up = by["update"]
    env.reset(up)
    call = up.data["reference"][-1]
    env.call(call.name, {**call.arguments, "value": call.arguments["value"] + 1})
    assert env.finish("Done.") == "others"


def test_tools_find_case_insensitively_and_report_missing_rows():
    w = S.build_world(S.SCENARIOS["garden"], 0)
    env = w.env()
    env.reset(w.tasks[0])
    ref = w.tasks[0].data["reference"][0]
    row = env.call(ref.name, {"name": ref.arguments["name"].upper()})
    assert '"name":"' + ref.arguments["name"] + '"' in row
    with pytest.raises(LookupError, match="no plant with name"):
        env.call("find_plant", {"name": "cactus-that-is-not-there"})
    with pytest.raises(ToolCallError):
        env.call("find_plant", {"title": "x"})


def test_a_seed_sql_error_fails_every_gate():
    bad = S.Scenario("broken", (
        S.Entity("order", ("a", "b", "c"), (S.Field("n", int, (1, 3)),)),  # a keyword
        S.Entity("item", ("x", "y", "z"), (S.Field("n", int, (1, 3)),), "order")))
    w = S.build_world(bad, 0, rows=2)
    assert w.tasks == ()


def test_errors_name_the_argument():
    sc = S.SCENARIOS["gym"]
    with pytest.raises(TypeError, match="scenario must be a Scenario"):
        S.build_world("gym")
    with pytest.raises(TypeError, match="seed must be an int"):
        S.build_world(sc, 1.5)
    with pytest.raises(ValueError, match="rows must be an int >= 2"):
        S.build_world(sc, 0, rows=1)
    loose = sc._replace(entities=(sc.entities[0], sc.entities[1]._replace(parent="nobody")))
    with pytest.raises(ValueError, match="must belong to 'coach'"):
        S.build_world(loose)
    no_int = sc._replace(entities=(sc.entities[0]._replace(
        fields=(S.Field("sport", str, ("yoga",)),)), sc.entities[1]))
    with pytest.raises(ValueError, match="needs an integer field"):
        S.build_world(no_int)
