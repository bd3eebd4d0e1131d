"""LOAM: the raw environments' physics and nuisances, designs from the primitive library,
the code gates on hand-written good and bad code, PPO learning with a good design and
not without the angle, racing on arms with known means (the best arm survives, the
budget is exact), and option scoring / the free-text path on the tiny LLaMA."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.agents import loam as L

CP = L.CartPole()
PD = L.Pendulum()
SI = {"cart_position_cm": "si", "cart_velocity_cm_per_s": "si", "pole_angle_deg": "si",
      "pole_angular_velocity_deg_per_s": "si", "elapsed_steps": "omit",
      "vibration_sensor": "omit", "motor_temperature_c": "omit", "cart_mass_kg": "omit"}
BLIND = {**SI, "pole_angle_deg": "omit", "pole_angular_velocity_deg_per_s": "omit"}


def _state(env, q):
    return L.EnvState(jnp.asarray(q, float), jnp.zeros((), jnp.int32), jnp.zeros(2))


def _roll(env, s, force, n):
    k = jax.random.key(0)
    for _ in range(n):
        s, r, term = env.step(s, jnp.asarray([force]), k)
    return s, r, term


def test_cartpole_physics():
    s, r, term = _roll(CP, _state(CP, [0, 0, 0, 0]), 0.0, 50)
    np.testing.assert_allclose(s.q, 0.0, atol=1e-12)  # the upright equilibrium
    assert float(r) == 1.0 and not bool(term)
    s, _, _ = _roll(CP, _state(CP, [0, 0, 0.02, 0]), 0.0, 30)
    assert float(s.q[2]) > 0.05  # unstable: the tilt grows the way it leans
    s, _, _ = _roll(CP, _state(CP, [0, 0, 0, 0]), 5.0, 10)
    assert float(s.q[1]) > 0 and float(s.q[3]) < 0  # pushing right: pole swings back
    big, _, _ = _roll(CP, _state(CP, [0, 0, 0, 0]), 1e4, 1)
    clipped, _, _ = _roll(CP, _state(CP, [0, 0, 0, 0]), 10.0, 1)
    np.testing.assert_allclose(big.q, clipped.q)  # the force is clipped to +-10 N
    _, _, term = _roll(CP, _state(CP, [0, 0, 0.25, 0]), 0.0, 1)
    assert bool(term)  # beyond 12 degrees


def test_pendulum_physics_and_unwrapped_angle():
    s, r, _ = _roll(PD, _state(PD, [np.pi, 0.0]), 0.0, 20)
    np.testing.assert_allclose(s.q, [np.pi, 0.0], atol=1e-4)  # hanging at rest stays (f32)
    np.testing.assert_allclose(float(r), -(np.pi**2), rtol=1e-6)
    _, r, _ = _roll(PD, _state(PD, [0.0, 0.0]), 0.0, 1)
    assert float(r) == 0.0  # upright, still, no torque: no cost
    s, _, _ = _roll(PD, _state(PD, [0.0, 8.0]), 2.0, 100)  # spinning
    assert float(PD.raw(s)["pole_angle_deg"]) > 720.0  # unwrapped: beyond two turns


def test_raw_variables_have_their_units_and_names():
    s = L.EnvState(jnp.asarray([0.5, -0.2, 0.1, 0.3]), jnp.asarray(7), jnp.asarray([3., 41.]))
    raw = CP.raw(s)
    assert list(raw) == [v.name for v in CP.variables]
    np.testing.assert_allclose([raw["cart_position_cm"], raw["cart_velocity_cm_per_s"],
                                raw["pole_angle_deg"], raw["elapsed_steps"]],
                               [50.0, -20.0, np.degrees(0.1), 7.0], rtol=1e-6)
    raws = L.sample_raw(CP, jax.random.key(0), 8)
    assert float(jnp.std(raws["vibration_sensor"])) > 5.0  # a noisy distractor


def test_primitive_designs():
    s = CP.reset(jax.random.key(1))
    raw = CP.raw(s)
    d = L.primitive_design(CP, SI, "tanh")
    np.testing.assert_allclose(d.compute_obs(raw), s.q, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(d.compute_action(jnp.asarray([100.0])), [10.0])
    sc = L.primitive_design(CP, {**SI, "pole_angle_deg": "sincos"}, "sign")
    assert sc.obs_dim == 5 and float(sc.compute_action(jnp.asarray([-0.1]))[0]) == -10.0
    assert L.default_design(CP).obs_dim == len(CP.variables)
    with pytest.raises(ValueError, match="pole_angle_deg"):
        L.primitive_design(CP, {**SI, "pole_angle_deg": "cubed"}, "tanh")
    with pytest.raises(ValueError, match="every raw variable"):
        L.primitive_design(CP, {"pole_angle_deg": "si"}, "tanh")
    with pytest.raises(ValueError, match="action must be one of"):
        L.primitive_design(CP, SI, "double")
    with pytest.raises(ValueError, match="empty"):
        L.primitive_design(CP, {k: "omit" for k in SI}, "tanh")


def test_sample_design_is_keyed_and_follows_the_temperature():
    scores = {v.name: np.arange(len(L.FEATURES[v.kind]), dtype=float) * 3.0
              for v in CP.variables}
    scores["action"] = np.arange(len(L.ACTIONS), dtype=float)
    a = L.sample_design(jax.random.key(0), CP, scores, 1.0)
    assert a.description == L.sample_design(jax.random.key(0), CP, scores, 1.0).description
    many = {L.sample_design(jax.random.key(i), CP, scores, 5.0).description for i in range(8)}
    assert len(many) > 4  # genuinely stochastic
    cold = L.sample_design(jax.random.key(3), CP, scores, 0.01)  # the argmax everywhere
    assert cold.description == L.primitive_design(
        CP, {v.name: list(L.FEATURES[v.kind])[-1] for v in CP.variables}, "sign").description
    with pytest.raises(ValueError, match="temperature"):
        L.sample_design(jax.random.key(0), CP, scores, 0.0)
    with pytest.raises(ValueError, match="option_scores"):
        L.sample_design(jax.random.key(0), CP, {"action": scores["action"]}, 1.0)


GOOD = '''
def compute_obs(raw):
    th = raw["pole_angle_deg"] * jnp.pi / 180
    return jnp.stack([raw["cart_position_cm"] / 100, raw["cart_velocity_cm_per_s"] / 100,
                      jnp.sin(th), jnp.cos(th),
                      raw["pole_angular_velocity_deg_per_s"] * jnp.pi / 180])

def compute_action(a):
    return 10.0 * jnp.tanh(a)
'''

BAD = {
    "import": "import not_a_module\n" + GOOD,
    "syntax": "def compute_obs(raw)\n    return raw\ndef compute_action(a):\n    return a\n",
    "shape": GOOD.replace("return jnp.stack([", "return jnp.outer(jnp.ones(3), jnp.stack(["
                          ).replace("* jnp.pi / 180])", "* jnp.pi / 180]))"),
    "finite": GOOD.replace("jnp.cos(th)", "jnp.log(raw['vibration_sensor'])"),
    "determinism": GOOD.replace("jnp.cos(th)", "jnp.cos(th) + np.random.rand()"),
    "action": GOOD.replace("10.0 * jnp.tanh(a)", "jnp.concatenate([a, a])"),
    "long": GOOD.replace("return jnp.stack([", "return jnp.concatenate([jnp.zeros(40), "
                         "jnp.stack([").replace("* jnp.pi / 180])", "* jnp.pi / 180])])"),
}


def test_gates_pass_good_code_in_the_sandbox_and_build_a_design():
    rep = L.check_code(GOOD, CP)
    assert rep.passed and rep.gate == "passed" and rep.obs_dim == 5
    d = L.code_design(GOOD, CP, sandbox=False)
    s = CP.reset(jax.random.key(0))
    ref = L.primitive_design(CP, {**SI, "pole_angle_deg": "sincos"}, "tanh")
    np.testing.assert_allclose(d.compute_obs(CP.raw(s)), ref.compute_obs(CP.raw(s)),
                               rtol=1e-6, atol=1e-7)


def test_import_gate_runs_in_the_sandbox():
    rep = L.check_code(BAD["import"], CP)
    assert not rep.passed and rep.gate == "import" and "not_a_module" in rep.message


@pytest.mark.parametrize("name", ["syntax", "shape", "finite", "determinism", "action",
                                  "long"])
def test_gates_refuse_bad_code(name):
    rep = L.check_code(BAD[name], CP, sandbox=False)
    assert not rep.passed, name
    assert rep.gate == ("import" if name == "syntax" else "jit"), rep
    with pytest.raises(L.GateError, match=f"failed the {rep.gate} gate"):
        L.code_design(BAD[name], CP, sandbox=False)


def test_extract_code():
    reply = "Here you go:\n```python\n" + GOOD + "```\nDone."
    assert L.extract_code(reply).strip() == GOOD.strip()
    with pytest.raises(L.GateError, match="extract gate"):
        L.extract_code("I would normalise the angle.")


# --------------------------------------------------------------------------- PPO


@pytest.fixture(scope="module")
def trained():
    cfg = L.PPOConfig(n_envs=8, n_steps=64, hidden=32)
    designs = [L.primitive_design(CP, SI, "tanh"), L.primitive_design(CP, BLIND, "tanh")]
    st = L.designs_init(jax.random.key(0), CP, designs, cfg)
    hist = []
    for _ in range(30):
        st, r = L.designs_update(st, np.ones(2, bool), CP, designs, cfg)
        hist.append(np.asarray(r))
    return cfg, designs, st, np.asarray(hist)


def test_ppo_learns_with_a_good_design_and_not_blind(trained):
    cfg, designs, st, hist = trained
    ret = np.asarray(L.evaluate(jax.random.key(5), st, CP, designs, 8))
    assert ret[0] > 100.0 and ret[0] > 3 * ret[1], ret
    assert hist[-5:, 0].mean() > 2 * hist[:3, 0].mean()


def test_stopped_designs_keep_their_state(trained):
    cfg, designs, st, _ = trained
    st2, _ = L.designs_update(st, np.asarray([False, True]), CP, designs, cfg)
    for a, b in zip(jax.tree.leaves(st), jax.tree.leaves(st2), strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b)[0])
    with pytest.raises(ValueError, match="active must have shape"):
        L.designs_update(st, np.ones(3, bool), CP, designs, cfg)
    # one design alone follows the same trajectory as inside the vmapped batch
    one = jax.tree.map(lambda x: x[0], L.designs_init(jax.random.key(0), CP, designs, cfg))
    solo, r = L.ppo_update(one, CP, designs[0], cfg)
    both, rb = L.designs_update(L.designs_init(jax.random.key(0), CP, designs, cfg),
                                np.ones(2, bool), CP, designs, cfg)
    np.testing.assert_allclose(r, rb[0], rtol=1e-5)


# --------------------------------------------------------------------------- racing


def _arms(means, noise, seed=0):
    means = np.asarray(means, float)
    rng = np.random.default_rng(seed)
    pulls = np.zeros(len(means), int)

    def advance(state, active):
        pulls[active] += 1
        return state, means + noise * rng.standard_normal(len(means))

    return advance, pulls


RULES = [L.UCBRace(c=1.0, window=4), L.SuccessiveHalving(fraction=0.5, window=4),
         L.FRace(alpha=0.05, window=4)]


@pytest.mark.parametrize("rule", RULES, ids=["ucb", "halving", "frace"])
def test_racing_on_arms_with_known_means(rule):
    means = [1.0, 2.0, 5.0, 3.0, 0.5, 2.5]
    advance, pulls = _arms(means, noise=0.5)
    res = L.race(advance, None, 6, rule, budget=240, rung=4)
    assert res.chosen == 2  # the best arm survives and is the answer
    assert int(res.updates.sum()) == 240 and (pulls == res.updates).all()  # exact budget
    assert res.updates[2] == res.updates.max() and res.updates[2] > 240 / 6 * 2
    assert np.isnan(res.history[-1][[0, 4]]).all()  # losers stopped
    assert res.active_history[0].all() and res.active_history[-1].sum() < 6


def test_budget_is_exact_when_slots_run_out():
    # identical arms: nothing is eliminated, and the last rung cuts to the slots left
    advance, pulls = _arms([1.0] * 5, noise=0.0)
    res = L.race(advance, None, 5, L.UCBRace(window=2), budget=23, rung=3)
    assert int(res.updates.sum()) == 23 and pulls.sum() == 23
    with pytest.raises(ValueError, match="budget"):
        L.race(advance, None, 5, L.UCBRace(window=2), budget=3, rung=3)
    with pytest.raises(TypeError, match="AbstractRacingRule"):
        L.race(advance, None, 5, "ucb", budget=30, rung=3)


def test_frace_is_noise_aware():
    # a big gap with heavy common noise: ranks within blocks still separate the arms
    rng = np.random.default_rng(1)
    common = 50.0 * rng.standard_normal((1, 6))
    window = np.asarray([[0.0], [1.0], [2.0]]) + common + 0.1 * rng.standard_normal((3, 6))
    keep = np.asarray(L.FRace(alpha=0.05, window=6).survivors(window, np.ones(3, bool)))
    assert keep.tolist() == [False, True, True] or keep.tolist() == [False, False, True]
    # the UCB race on the same window keeps all: the shared noise hides the gap
    assert np.asarray(L.UCBRace(c=1.0, window=6).survivors(window, np.ones(3, bool))).all()
    # ties everywhere: no evidence, nobody stops
    assert np.asarray(L.FRace(window=4).survivors(np.ones((3, 4)), np.ones(3, bool))).all()
    with pytest.raises(ValueError, match="alpha"):
        L.FRace(alpha=1.5)
    with pytest.raises(ValueError, match="window"):
        L.UCBRace(window=1)


# --------------------------------------------------------------------------- the LLM


@pytest.fixture(scope="module")
def tiny_chat(tiny_local_chat):
    return tiny_local_chat(512)


def test_option_scores_from_one_forward_equal_chat_score(tiny_chat):
    scores = L.option_scores(tiny_chat, CP)
    assert set(scores) == {v.name for v in CP.variables} | {"action"}
    msgs, letters, keys = L.option_prompt(CP, CP.variables[2])
    assert keys == list(L.FEATURES["angle_deg"]) and letters == ["A", "B", "C", "D"]
    np.testing.assert_allclose(scores["pole_angle_deg"],
                               np.asarray(tiny_chat.score(msgs, letters)), atol=1e-4)
    d = L.sample_design(jax.random.key(0), CP, scores, 1.0)
    assert 1 <= d.obs_dim <= 10


def test_free_text_code_path_on_the_tiny_model(tiny_local_chat):
    # the tiny tokenizer spends a token per few bytes: a longer context for the prompt
    chat = tiny_local_chat(2048)
    replies = chat.chat(L.code_prompt(CP), temperature=1.0, seed=0, n=2, max_tokens=24)
    verdicts = []
    for r in replies:
        try:
            verdicts.append(L.check_code(L.extract_code(r.content), CP, sandbox=False).gate)
        except L.GateError as e:
            verdicts.append(e.report.gate)
    # a random model writes no valid design: the gates refuse it, nothing crashes
    assert verdicts == ["extract", "extract"]


def test_option_scores_identical_through_the_loopback_server(tiny_chat):
    pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("uvicorn", reason="pip install uvicorn==0.54.0")
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.common.lm.serve import Server

    local = L.option_scores(tiny_chat, PD)  # one batched forward
    with Server(tiny_chat, port=0, log_level="warning") as server:
        remote = L.option_scores(OpenAIChat(server.url, "tiny"), PD)  # chat.score each
    for name, v in local.items():
        np.testing.assert_allclose(remote[name], v, atol=1e-4, err_msg=name)
