"""Measuring Agents in Production (jaxsci.agents.map), its SQLite worlds
(jaxsci.data.sqlworlds) and its experiment: every task's gates, the candidate lists, the
reliability table against hand-computed numbers, clear errors, and the smoke config on
the tiny random-weight LLaMA in-process and through ``jaxsci serve`` over loopback with
identical results."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from jaxsci.agents import map as mp
from jaxsci.common.agents import SeedSQLError
from jaxsci.data import sqlworlds as sw
from jaxsci.experiments import map as X

WRITES = {"lend_book", "place_order", "cancel_order"}
TASKS = [(w, t) for w in sw.WORLDS.values() for t in w.tasks]


@pytest.mark.parametrize("world, task", TASKS, ids=[t.id for _, t in TASKS])
def test_every_task_passes_its_gates(world, task):
    env = world.env()  # the seed SQL runs (SeedSQLError otherwise)
    assert task.id not in env.null_action_passes()
    init = env.template
    assert env.verify(task, init, init, None) == "others"
    # The right answer alone passes a read-only task and fails a task that must write.
    writes = any(c.name in WRITES for c in task.data["reference"])
    assert env.verify(task, init, init, task.data["answer"]) == (
        "others" if writes else "complete")
    assert sw.run_reference(env, task) == "complete"
    assert task.data["depth"] == len(task.data["reference"])
    assert sw.check_gates(world)[task.id] == sw.Gates(True, True, True)


def test_worlds_cover_every_depth_and_a_broken_seed_fails_its_gates():
    for w in sw.WORLDS.values():
        assert sorted(t.data["depth"] for t in w.tasks) == list(sw.DEPTHS)
    broken = sw.LIBRARY._replace(seed_sql="INSERT INTO book VALUES (1, 'X', 99, 1);")
    with pytest.raises(SeedSQLError, match="FOREIGN KEY"):
        broken.env()
    assert set(sw.check_gates(broken).values()) == {sw.Gates(False, False, False)}


def test_a_wrong_answer_or_a_wrong_write_fails():
    env = sw.SHOP.env()
    task = env.tasks["order_lamps_for_bob"]
    env.reset(task)
    env.call("place_order", {"customer_id": 1, "product_id": 1, "quantity": 2})  # Alice
    assert env.finish("Done") == "others"
    task = env.tasks["price_of_lamp"]
    env.reset(task)
    assert env.finish("it costs 300") == "others"  # a whole word, not a substring
    env.reset(task)
    assert env.finish("30") == "complete"


def test_candidates_come_from_the_request_and_typed_result_fields():
    w = sw.LIBRARY
    task = w.tasks[1]  # Who wrote 'Emma'?
    msgs = mp.messages(w, task)
    tools = {t.name: t for t in w.tools}
    assert [o.text for o in mp.call_options(tools["find_book"], msgs)] == [
        'find_book(title="Emma")']
    assert mp.call_options(tools["get_author"], msgs) == []  # no author_id known yet
    assert [o.answer for o in mp.answer_options(msgs)] == [mp.DONE]
    env = w.env()
    env.reset(task)
    msgs += [{"role": "assistant", "content": "", "tool_calls": []},
             {"role": "tool", "tool_call_id": "c", "content": env.call("find_book",
                                                                        {"title": "Emma"})}]
    assert [o.arguments for o in mp.call_options(tools["get_author"], msgs)] == [
        {"author_id": 1}]
    assert [o.answer for o in mp.answer_options(msgs)] == [mp.DONE, "Emma", "2"]
    propose = mp.workflow_propose(["find_book", "get_author"])
    assert [o.name for o in propose(msgs[:2], w.tools)] == ["find_book"]


def test_reliability_table_against_hand_computed_numbers():
    s = np.array([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1]], bool)
    depths = [1, 1, 2, 2]
    t = mp.reliability_table({"agent": s, "workflow": np.ones((4, 4), bool)}, depths, k=2)
    a = t["agent"]
    # pass^2 per task: C(c,2)/C(4,2) = 1, 1/6, 0, 3/6; pass@1: 1, .5, 0, .75
    np.testing.assert_allclose(a.pass_at_1, [0.75, 0.375])
    np.testing.assert_allclose(a.pass_hat_k, [(1 + 1 / 6) / 2, 0.25])
    np.testing.assert_allclose(a.gap, a.pass_at_1 - a.pass_hat_k)
    assert a.depths.tolist() == [1, 2]
    assert a.overall_pass_at_1 == pytest.approx(2.25 / 4)
    assert a.overall_gap == pytest.approx(2.25 / 4 - (1 + 1 / 6 + 0.5) / 4)
    assert t["workflow"].overall_gap == 0.0


def test_errors_name_the_bad_argument():
    s = np.ones((2, 3), bool)
    with pytest.raises(ValueError, match="mode must be one of"):
        mp.reliability_table({"chat": s}, [1, 2], 1)
    with pytest.raises(ValueError, match="at least one task"):
        mp.reliability_table({"agent": np.ones((0, 3), bool)}, [], 1)
    with pytest.raises(ValueError, match="successes must map modes"):
        mp.reliability_table({}, [], 1)
    with pytest.raises(ValueError, match=r"k must be an int in \[1, reruns=3\]"):
        mp.reliability_table({"agent": s}, [1, 2], 4)
    with pytest.raises(ValueError, match="depths must have shape"):
        mp.reliability_table({"agent": s}, [1], 1)
    with pytest.raises(ValueError, match="mode must be one of"):
        mp.run_task(None, sw.LIBRARY, "copies_of_dune", "free")
    with pytest.raises(ValueError, match="k must be <= 2|k must be"):
        X.MapConfig(reruns=2, k=3)
    with pytest.raises(ValueError, match="worlds must be a non-empty subset"):
        X.MapConfig(worlds=())
    with pytest.raises(ValueError, match="no task of worlds"):
        X.measure(_no_tasks_config(), None)


def _no_tasks_config():
    # A config whose worlds hold no task of its depths (all shipped worlds hold every
    # depth, so the world list is emptied behind validation's back).
    c = X.MapConfig(worlds=("library",), depths=(1,))
    object.__setattr__(c, "depths", (9,))
    return c


# ----------------------------------------------------------------- on a real model


def _sibling(name):
    path = Path(__file__).parents[1] / "common" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_jaxsci_map_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_in_process_and_over_loopback_are_identical(tmp_path):
    pytest.importorskip("tokenizers", reason="pip install tokenizers")
    pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("uvicorn", reason="pip install uvicorn==0.54.0")
    from jaxsci.common.lm.chat import LocalChat, OpenAIChat
    from jaxsci.common.lm.serve import Server

    tc = _sibling("test_chat")
    local = LocalChat(tc.tiny_engine(max_len=2048), model_id="tiny")
    c = X.CONFIGS["smoke"]
    here = X.measure(c, local, cache=tmp_path / "local.db")
    with Server(local, port=0, log_level="warning") as server:
        there = X.measure(c, OpenAIChat(server.url, "tiny"), cache=tmp_path / "remote.db")
    n = len(X.tasks_of(c))
    for mode in mp.MODES:
        assert here[f"{mode}_successes"].shape == (n, c.reruns)
        np.testing.assert_array_equal(here[f"{mode}_successes"], there[f"{mode}_successes"])
        for key in ("pass_at_1", "pass_hat_k", "cap_hit_rate", "mean_steps", "mean_options",
                    "interventions_per_task"):
            assert here[f"{mode}_{key}"] == there[f"{mode}_{key}"], (mode, key)
        assert 1 <= here[f"{mode}_mean_steps"] <= c.max_steps
    # The workflow never offers more than the next tool's slots or the answers.
    assert here["workflow_mean_options"] <= here["agent_mean_options"]
