"""Agent World Model's agent (jaxsci.agents.awm): observations, demonstrations of every
scenario template, behaviour cloning that solves its worlds, rollouts within their cap,
a GRPO update that raises the log-probability of the better-than-average rollouts, the
hackable proxy reward, and named errors."""

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
