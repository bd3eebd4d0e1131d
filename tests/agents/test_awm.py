"""Agent World Model's agent (jaxsci.agents.awm): observations, demonstrations of every
scenario template, behaviour cloning that solves its worlds, rollouts within their cap,
a GRPO update that raises the log-probability of the better-than-average rollouts, the
hackable proxy reward, named errors, and the experiment's SmolLM2 agent step on the tiny
random-weight LLaMA in-process and through ``jaxsci serve`` over loopback with identical
episodes."""

import importlib.util
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.agents import awm as A
from jaxsci.data import scenarios as S

C = A.PolicyConfig(d_model=32, n_layers=1, n_heads=2)


def test_observation_layout():
    w = S.build_world(S.SCENARIOS["gym"], 0)
    t = w.tasks[0]
    o = A.observe(t, None, 0, C)
    assert o.words[:2] == [A.DONE, "<step0>"] and o.words[-1] == A.SEP
    assert o.tokens.shape == (C.max_len,) and (o.tokens[:len(o.words)] > 0).all()
    assert (o.tokens[len(o.words):] == 0).all()
    o = A.observe(t, '[{"member_id": 3, "name": "Ada"}]', 1, C)
    tail = o.words[o.words.index(A.SEP) + 1:]
    assert tail == ["rows", "1", "member_id", "3", "name", "Ada"]
    assert set(o.segments[len(o.words) - len(tail):len(o.words)]) == {2}
    assert A.observe(t, LookupError("x"), 1, C).words[-1] == "error"


def test_every_template_has_demonstrations():
    jobs = S.jobs(sorted(S.SCENARIOS), [0])
    b = A.demonstrations(C, jobs)
    # every reference call and every final answer is a step
    assert len(b.tool) == sum(t.data["depth"] + 1 for _, t in jobs)
    finish = b.tool == C.max_tools
    assert finish.sum() == len(jobs) and (b.answer[finish] >= 0).all()
    assert (b.answer[~finish] == -1).all()


@pytest.fixture(scope="module")
def cloned():
    jobs = S.jobs(["library", "clinic"], [0])
    policy, losses = A.clone(jax.random.key(0), C, jobs, steps=300)
    return policy, np.asarray(losses), jobs


def test_behaviour_cloning_solves_its_worlds(cloned):
    policy, losses, jobs = cloned
    assert losses[-1] < 0.05 * losses[0]
    assert A.evaluate(policy, C, jobs) == 1.0
    untrained = A.ToolPolicy(jax.random.key(1), C)
    assert A.evaluate(untrained, C, jobs) < 0.2


def test_rollouts_respect_the_cap_and_report_finishing(cloned):
    policy, _, jobs = cloned
    eps = A.rollouts(A.ToolPolicy(jax.random.key(2), C), C, jobs[:6], max_steps=2, seed=0)
    assert all(len(e.steps) <= 2 for e in eps)
    assert all((e.answer is not None) == e.finished for e in eps)
    assert all(e.finished or not e.success for e in eps)
    greedy = A.rollouts(policy, C, jobs[:6], greedy=True)
    assert all(e.success for e in greedy)


def test_a_grpo_step_raises_the_better_rollouts_log_probability(cloned):
    _, _, jobs = cloned
    policy = A.ToolPolicy(jax.random.key(3), C)
    eps = A.rollouts(policy, C, jobs[:4], max_steps=2, seed=1)
    rows = [s for e in eps for s in e.steps]
    b = jax.tree.map(jnp.asarray, A._batch(rows))
    w = np.zeros(len(rows), np.float32)
    w[: len(eps[0].steps)] = 1.0  # the first episode is "better than average"
    params, static = eqx.partition(policy, eqx.is_inexact_array)
    state = A.optax.adam(1e-2).init(params)
    new, _ = A._grpo_step(params, static, state, b, jnp.asarray(w), 1e-2, 4)
    before = np.asarray(A._logp(policy, b))
    after = np.asarray(A._logp(eqx.combine(new, static), b))
    assert (after[w > 0] > before[w > 0]).all()


def test_proxy_reward_pays_for_finishing():
    jobs = S.jobs(["gym"], [0])
    policy = A.ToolPolicy(jax.random.key(4), C)
    _, hist = A.grpo(jax.random.key(0), C, policy, jobs, iterations=1, group=2,
                     tasks_per_batch=2, reward="proxy", max_steps=1)
    eps = A.rollouts(policy, C, jobs, max_steps=1, seed=0)
    assert hist["reward"].shape == (1,) and hist["success"].shape == (1,)
    assert all(e.finished == (e.answer is not None) for e in eps)


def test_errors_name_the_argument():
    jobs = S.jobs(["gym"], [0])
    policy = A.ToolPolicy(jax.random.key(0), C)
    with pytest.raises(ValueError, match="reward must be one of"):
        A.grpo(jax.random.key(0), C, policy, jobs, reward="vibes")
    with pytest.raises(ValueError, match="jobs must hold"):
        A.grpo(jax.random.key(0), C, policy, [])
    with pytest.raises(ValueError, match="max_tools"):
        A.rollouts(policy, A.PolicyConfig(d_model=32, n_layers=1, n_heads=2, max_tools=3),
                   jobs)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        A.PolicyConfig(d_model=30, n_heads=4)


# ----------------------------------------------------------------- on a real model


def _sibling(name):
    path = Path(__file__).parents[1] / "common" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_jaxsci_awm_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_llm_agent_step_in_process_and_over_loopback_is_identical():
    """The experiment's SmolLM2 step (``_llm_agent``, the smoke config's caps) on the tiny
    random-weight LLaMA, in-process and through ``jaxsci serve`` over loopback: the same
    episodes, call by call and answer by answer.

    The step is greedy (temperature 0) and ``tool_choice="auto"``: a reply that opens a
    ``<tool_call>`` is held to the tool grammar, any other is free text, an argmax over
    the random model's near-ties. The server runs the same ``LocalChat.chat`` with the
    same messages, tools and settings (one request, ``n=1``: the same batch shape and
    the same compiled programs), so the logits, and with them every argmax, are the same
    floats on both paths; nothing is compared under a tolerance. (The harness's own
    loopback test keeps its free-text runs out for another reason: there the batch shape
    differs between the runs it compares.)"""
    pytest.importorskip("tokenizers", reason="pip install tokenizers")
    pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("uvicorn", reason="pip install uvicorn==0.54.0")
    from jaxsci.common.lm.chat import LocalChat, OpenAIChat
    from jaxsci.common.lm.serve import Server
    from jaxsci.common.lm.tools import tools_system_prompt
    from jaxsci.experiments import awm as X

    tc, tt = _sibling("test_chat"), _sibling("test_tools")
    c = X.CONFIGS["smoke"]
    jobs = S.jobs(c.held_out, [100])[:2]
    # merges learnt on the tool list keep the byte-level prompt short (about 800 tokens)
    merges = tc.MERGES + tt.learn_merges([tools_system_prompt(jobs[0][0].tools)], 400)
    local = LocalChat(tc.tiny_engine(max_len=1024, merges=merges), model_id="tiny")
    here = X._llm_agent(local, jobs, c)
    with Server(local, port=0, log_level="warning") as server:
        there = X._llm_agent(OpenAIChat(server.url, "tiny"), jobs, c)
    assert here == there
    assert [e[0] for e in here["episodes"]] == [t.id for _, t in jobs]
    for _, status, answer, steps, _, _, _ in here["episodes"]:
        assert status == "answer" and answer is not None and 1 <= steps <= c.llm_max_steps
