"""TAMPO: the pessimistic reward on a two-arm case, the cost weight, the ensemble's
uncertainty off the data, the preference-conditioned policy, the baselines, the task bank
and prompt space, the early-exit readout and the dataset builder on the tiny LLaMA
(never SmolLM2 here), and errors that name the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.agents import tampo as TM
from jaxsci.data import routing_tasks as RT

# two arms: A has the higher mean but a large spread, B slightly lower and certain
MU = jnp.asarray([0.80, 0.75])
SIG = jnp.asarray([0.20, 0.01])


def test_pessimistic_reward_two_arms():
    w = jnp.asarray([1.0, 0.0])
    assert int(jnp.argmax(TM.pessimistic_reward(MU, SIG, jnp.zeros(2), w, 0.0))) == 0
    assert int(jnp.argmax(TM.pessimistic_reward(MU, SIG, jnp.zeros(2), w, 1.0))) == 1
    # the switch happens where mu_A - beta sigma_A = mu_B - beta sigma_B: beta = 0.05/0.19
    r = TM.pessimistic_reward(MU, SIG, jnp.zeros(2), w, 0.05 / 0.19)
    np.testing.assert_allclose(r[0], r[1], atol=1e-6)


def test_cost_weight_moves_the_choice_to_the_cheaper_arm():
    mu, sig, cost = jnp.asarray([0.9, 0.6]), jnp.zeros(2), jnp.asarray([0.9, 0.1])
    picks = [int(jnp.argmax(TM.pessimistic_reward(mu, sig, cost, jnp.asarray([1 - c, c]),
                                                  0.0))) for c in (0.0, 0.2, 0.5, 1.0)]
    assert picks == [0, 0, 1, 1]
    # utility is the beta = 0 reward on measured quality
    np.testing.assert_allclose(TM.utility(mu, cost, jnp.asarray([0.5, 0.5])),
                               0.5 * mu - 0.5 * cost, rtol=1e-6)


def test_ensemble_is_less_certain_off_the_data():
    x = np.linspace(-1, 1, 24)[:, None].astype(np.float32)
    y = (0.5 + 0.3 * np.sin(2 * x[:, 0])).astype(np.float32)
    cfg = TM.RewardConfig(members=6, width=16, steps=300)
    ens = TM.fit_ensemble(jax.random.key(0), x, y, np.ones(24), cfg)
    mu, sig = ens(x)
    assert float(jnp.mean(jnp.abs(mu - y))) < 0.05  # it fits the data
    _, sig_far = ens(jnp.asarray([[4.0], [-4.0]]))
    assert float(sig_far.min()) > 2 * float(sig.mean())
    # a held-out row (weight 0) is predicted with more spread than the rows it saw
    w = np.ones(24)
    w[20:] = 0.0
    ens2 = TM.fit_ensemble(jax.random.key(1), x, y, w, cfg)
    _, s2 = ens2(x)
    assert float(s2[20:].mean()) > float(s2[:20].mean())


def _policy_case():
    # two tasks, three actions: expensive-good, cheap-poor, and a mean-looking but
    # uncertain one
    mu = jnp.asarray([[0.9, 0.55, 0.93], [0.85, 0.5, 0.9]])
    sigma = jnp.asarray([[0.01, 0.01, 0.3], [0.01, 0.01, 0.3]])
    cost = jnp.asarray([[0.8, 0.05, 0.8], [0.8, 0.05, 0.8]])
    feats = jnp.asarray([[1.0, 0.0], [0.0, 1.0]])
    return feats, mu, sigma, cost


@pytest.fixture(scope="module")
def policies():
    feats, mu, sigma, cost = _policy_case()
    cfg = TM.PolicyConfig(width=16, steps=300, w_samples=8)
    train = jax.vmap(lambda b: TM.train_policy(jax.random.key(0), feats, mu, sigma, cost, b,
                                               cfg))
    return feats, train(jnp.asarray([0.0, 1.0]))


def test_policy_choice_moves_with_the_preference(policies):
    feats, pols = policies
    pess = jax.tree.map(lambda x: x[1], pols)
    for t in range(2):
        assert int(TM.choose(pess, feats[t], jnp.asarray([1.0, 0.0]))) == 0
        assert int(TM.choose(pess, feats[t], jnp.asarray([0.2, 0.8]))) == 1


def test_plain_proxy_policy_takes_the_uncertain_arm_pessimism_does_not(policies):
    feats, pols = policies
    plain = jax.tree.map(lambda x: x[0], pols)
    pess = jax.tree.map(lambda x: x[1], pols)
    w = jnp.asarray([1.0, 0.0])
    assert [int(TM.choose(plain, f, w)) for f in feats] == [2, 2]
    assert [int(TM.choose(pess, f, w)) for f in feats] == [0, 0]


def test_baselines():
    q = jnp.asarray([[0.2, 0.9, 0.5], [0.4, 0.7, 0.6]])
    cost = jnp.asarray([[0.1, 0.9, 0.2], [0.1, 0.9, 0.2]])
    assert int(TM.best_global(q, cost, jnp.asarray([1.0, 0.0]))) == 1
    assert int(TM.best_global(q, cost, jnp.asarray([0.0, 1.0]))) == 0
    # all candidates drawn: random search is the argmax of the dev utility
    for k in range(3):
        assert int(TM.random_search(jax.random.key(k), q[0], cost[0], jnp.asarray([1.0, 0.0]),
                                    3)) == 1
    picks = {int(TM.random_search(jax.random.key(k), q[0], cost[0], jnp.asarray([1.0, 0.0]),
                                  1)) for k in range(20)}
    assert picks == {0, 1, 2}  # one candidate: a uniform draw


def test_task_bank_and_prompt_space():
    assert 8 <= len(RT.FAMILIES) <= 12
    for fam in RT.FAMILIES:
        its = RT.items(fam, 6, seed=3)
        assert its == RT.items(fam, 6, seed=3)
        assert [it.answer for it in its] == [0, 1] * 3
        assert all(it.options[0] != it.options[1] for it in its)
    space = TM.prompt_space(("plain", "expert"), (0, 2), ("letters", "cloze"))
    assert len(space) == 8 and len({p.name for p in space}) == 8
    it = RT.items("capitals", 1)[0]
    shots = RT.items("capitals", 2, seed=9)
    m = TM.messages(it, TM.PromptSpec("expert", 2, "letters"), shots)
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user", "assistant",
                                      "user"]
    assert m[2]["content"] in ("A", "B") and "A) " in m[-1]["content"]
    c = TM.messages(it, TM.PromptSpec("plain", 0, "cloze"))
    assert c[-1]["content"] == it.question
    assert TM.answers(it, "cloze") == it.options
    x = TM.design_matrix(np.zeros((3, 4)), space, TM.exit_arms(30, (15, 30)))
    assert x.shape == (3, 16, 4 + 2 + 2 + 2 + 2 + 1)


@pytest.fixture(scope="module")
def tiny(tiny_local_chat):
    return tiny_local_chat(512)


def test_early_exit_last_layer_equals_the_model(tiny):
    it = RT.items("capitals", 2)
    convs = [TM.messages(i, TM.PromptSpec("plain", 0, v)) for i in it
             for v in ("letters", "cloze")]
    opts = [TM.answers(i, v) for i in it for v in ("letters", "cloze")]
    texts = [tiny.prompt(m) for m in convs]
    lp, pooled = TM.exit_readout(tiny.engine, texts, opts, (1, 2))
    assert lp.shape == (4, 2, 2) and pooled.shape == (4, 32)
    for j, (m, o) in enumerate(zip(convs, opts, strict=True)):
        np.testing.assert_allclose(lp[j, 1], np.asarray(tiny.score(m, list(o))), rtol=1e-4,
                                   atol=1e-4)
    assert not np.allclose(lp[:, 0], lp[:, 1], atol=1e-3)  # the early exit is another model
    # single-token options equal the next-token log-softmax at the labels
    logits = tiny.engine.next_token_logits([texts[0]])[0]
    ref = jax.nn.log_softmax(jnp.asarray(logits))
    ids = [int(tiny.engine.tokenizer.encode(s)[0]) for s in ("A", "B")]
    np.testing.assert_allclose(lp[0, 1], np.asarray(ref)[ids], rtol=1e-4, atol=1e-4)


def test_build_dataset_on_the_tiny_model(tiny):
    pool = TM.ModelPool(tiny, exits=(1, 2))
    assert [a.cost_per_token for a in pool.arms] == [0.5, 1.0]
    prompts = TM.prompt_space(("plain",), (0, 1), ("letters", "cloze"))
    d = TM.build_dataset(pool, ["capitals", "parity"], prompts, 3)
    assert d.logp.shape == (2, 4, 2, 3, 2) and d.answers.shape == (2, 3)
    q = d.quality()
    assert q.shape == (2, 4, 2) and np.all((q >= 0) & (q <= 1))
    assert np.all(d.cost[:, :, 0] < d.cost[:, :, 1])  # the early exit is cheaper
    assert np.all(d.tokens[:, 2:] > d.tokens[:, :2])  # a worked example costs tokens
    assert float(d.cost.max()) == pytest.approx(1.0)
    assert d.features.shape[0] == 2 and np.all(np.isfinite(d.features))
    # labels are the model's real answers: the last exit equals chat.score
    it = RT.items("parity", 3)[1]
    m = TM.messages(it, prompts[1])
    np.testing.assert_allclose(d.logp[1, 1, 1, 1], tiny.score(m, list(it.options)),
                               rtol=1e-4, atol=1e-4)


def test_errors_name_the_argument(tiny):
    with pytest.raises(ValueError, match="styles must be non-empty"):
        TM.prompt_space((), (0,), ("cloze",))
    with pytest.raises(ValueError, match="verbalisers must be among"):
        TM.prompt_space(("plain",), (0,), ("emoji",))
    with pytest.raises(ValueError, match="shots"):
        TM.prompt_space(("plain",), (-1,), ("cloze",))
    pool = TM.ModelPool(tiny, exits=(2,))
    with pytest.raises(ValueError, match="families must be non-empty"):
        TM.build_dataset(pool, [], TM.prompt_space(), 3)
    with pytest.raises(ValueError, match="prompts must be non-empty"):
        TM.build_dataset(pool, ["parity"], [], 3)
    with pytest.raises(ValueError, match="n_items must be >= 2"):
        TM.build_dataset(pool, ["parity"], TM.prompt_space(), 1)
    with pytest.raises(ValueError, match="task family must be one of"):
        TM.build_dataset(pool, ["poetry"], TM.prompt_space(), 3)
    with pytest.raises(ValueError, match="model pool is empty"):
        TM.ModelPool()
    with pytest.raises(ValueError, match=r"exits\[0\]"):
        TM.exit_arms(2, (3,))
    with pytest.raises(ValueError, match="w must have shape"):
        TM.pessimistic_reward(MU, SIG, 0.0, jnp.ones(3), 1.0)
    with pytest.raises(Exception, match="beta must be >= 0"):
        jax.jit(TM.pessimistic_reward)(MU, SIG, 0.0, jnp.ones(2), -1.0)
    with pytest.raises(ValueError, match="n must be"):
        TM.random_search(jax.random.key(0), MU, jnp.zeros(2), jnp.ones(2), 3)
    with pytest.raises(ValueError, match="features must have shape"):
        TM.train_policy(jax.random.key(0), jnp.zeros((0, 2)), jnp.zeros((0, 3)),
                        jnp.zeros((0, 3)), jnp.zeros((0, 3)), 1.0)
    with pytest.raises(ValueError, match="examples must hold"):
        TM.messages(RT.items("parity", 1)[0], TM.PromptSpec("plain", 2, "cloze"))
    from jaxsci.experiments.tampo import TampoConfig

    with pytest.raises(ValueError, match="families must be non-empty"):
        TampoConfig(families=())
    with pytest.raises(ValueError, match="n_dev"):
        TampoConfig(n_items=4, n_dev=4)
