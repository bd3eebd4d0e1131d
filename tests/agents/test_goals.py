"""Grid worlds (BFS optimal sets on hand-made grids, solvable generation, symmetries,
rendering), the trained agent, the probes (a planted linear feature), belief
consistency, and SmolLM2-style option scoring on the tiny LLaMA: one forward for scores
and hidden states, identical through ``jaxsci serve`` over loopback."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsci.agents import goals as G
from jaxsci.data import gridworld as gw

UP, DOWN, LEFT, RIGHT = range(4)


def _opt(text, position=None):
    return [gw.ACTIONS[a] for a in range(4) if gw.optimal_actions(gw.parse(text), position)[a]]


def test_bfs_distances_and_optimal_sets_on_hand_made_grids():
    corridor = "A . . G\n# # # #\n# # # #\n# # # #"
    assert _opt(corridor) == ["right"]
    assert np.asarray(gw.distances(gw.parse(corridor)))[0].tolist() == [3, 2, 1, 0]
    # a tie: down-then-right and right-then-down are both shortest
    assert _opt("A . #\n. G #\n# # #") == ["down", "right"]
    # the wall forces the detour through the bottom row
    detour = "A # G\n. # .\n. . ."
    assert _opt(detour) == ["down"]
    assert int(gw.distances(gw.parse(detour))[0, 0]) == 6
    # two goals: the nearest one counts
    assert _opt("G A . .\n. . . .\n. . . .\n. . . G") == ["left"]
    # a decoy is an ordinary free cell
    assert _opt("D A . G\n# # # #\n# # # #\n# # # #") == ["right"]
    # on the goal and where no goal is reachable: no optimal action
    assert _opt("A . G\n. . .\n. . .", position=(0, 2)) == []
    walled = gw.Grid(jnp.asarray([[0, 1, 2], [0, 1, 0], [0, 1, 0]], jnp.int32),
                     jnp.asarray([0, 0], jnp.int32))
    assert not bool(gw.reachable(walled)) and not np.asarray(gw.optimal_actions(walled)).any()


def test_plan_follows_the_canonical_path_and_stops_at_the_goal():
    acts, sets = gw.plan(gw.parse("A . G\n# # #\n# # #"), 3)
    assert np.asarray(acts).tolist() == [RIGHT, RIGHT, -1]
    assert not np.asarray(sets)[2].any()
    acts, _ = gw.plan(gw.parse("A . #\n. G #\n# # #"), 2)
    assert np.asarray(acts).tolist() == [DOWN, RIGHT]  # ties broken in ACTIONS order


@pytest.mark.parametrize("kind", gw.KINDS)
def test_generated_grids_are_solvable(kind):
    for size, density in ((5, 0.0), (7, 0.3), (9, 0.5)):
        g = gw.generate_batch(jax.random.key(size), 64, size, density, kind)
        assert bool(jax.vmap(gw.reachable)(g).all())
        cells = np.asarray(g.cells)
        goals = (cells == gw.GOAL).sum(axis=(1, 2))
        assert (goals == (2 if kind == "two" else 1)).all()
        assert ((cells == gw.DECOY).sum(axis=(1, 2)) == (kind == "decoy")).all()
        frac = float(gw.wall_fraction(g).mean())
        assert frac <= density + 0.05
        if density > 0:
            assert frac > density / 3  # walls are drawn, not all cleared


def test_density_is_traced_under_vmap():
    keys = jax.random.split(jax.random.key(0), 3)
    g = jax.vmap(lambda k, d: gw.generate(k, 6, d))(keys, jnp.asarray([0.0, 0.2, 0.4]))
    assert g.cells.shape == (3, 6, 6)
    assert float(gw.wall_fraction(gw.Grid(g.cells[0], g.agent[0]))) == 0.0


def test_symmetries_preserve_distances_and_map_optimal_sets():
    g = gw.generate(jax.random.key(3), 7, 0.3, "two")
    d0 = np.asarray(gw.distances(g))
    opt0 = np.asarray(gw.optimal_actions(g))
    for t in range(8):
        tg = gw.transform(g, t)
        assert np.asarray(tg.agent).tolist() == np.asarray(
            gw.transform_position(g.agent, t, 7)).tolist()
        dt = np.asarray(gw.distances(tg))
        for r in range(7):
            for c in range(7):
                tr, tc = np.asarray(gw.transform_position(jnp.asarray([r, c]), t, 7))
                assert dt[tr, tc] == d0[r, c]
        optt = np.asarray(gw.optimal_actions(tg))
        mapped = sorted(int(gw.transform_action(a, t)) for a in range(4) if opt0[a])
        assert mapped == [a for a in range(4) if optt[a]]


def test_render_and_parse_round_trip_with_relabelled_symbols():
    g = gw.generate(jax.random.key(5), 6, 0.3, "decoy")
    for symbols in (gw.SYMBOLS, gw.RELABELLED):
        back = gw.parse(gw.render(g, symbols), symbols)
        assert np.array_equal(np.asarray(back.cells), np.asarray(g.cells))
        assert np.array_equal(np.asarray(back.agent), np.asarray(g.agent))
    text = gw.render(g, coords=False)
    assert "0 1 2" not in text and gw.parse(text).cells.shape == (6, 6)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="kind"):
        gw.generate(jax.random.key(0), 5, 0.2, "three")
    with pytest.raises(ValueError, match="density"):
        gw.generate(jax.random.key(0), 5, 1.5)
    with pytest.raises(ValueError, match="size"):
        gw.generate(jax.random.key(0), 2, 0.2)
    with pytest.raises(ValueError, match="unsolvable|reach"):
        gw.make_grid([[0, 1, 2], [0, 1, 0], [0, 1, 0]], (0, 0))
    with pytest.raises(ValueError, match="sizes"):
        G.AgentConfig(max_size=5, sizes=(7,))
    with pytest.raises(ValueError, match="n_classes"):
        G.fit_probe(jax.random.key(0), jnp.ones((4, 3)), jnp.zeros(4, int), 1)
    with pytest.raises(ValueError, match="labels in"):
        G.fit_probe(jax.random.key(0), jnp.ones((4, 3)), jnp.asarray([0, 1, 2, 3]), 3)
    with pytest.raises(ValueError, match="rows"):
        G.fit_probe(jax.random.key(0), jnp.ones((4, 3)), jnp.zeros(5, int), 2)


def test_probes_recover_a_planted_linear_feature():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 16)).astype(np.float32)
    w = rng.standard_normal(16)
    y = (x @ w > 0).astype(np.int32)
    train, test = np.arange(400), np.arange(400, 600)
    stacked = jnp.stack([jnp.asarray(rng.standard_normal((600, 16)), jnp.float32),
                         jnp.asarray(x)])  # layer 0: noise; layer 1: carries the feature
    for hidden in (0, 16):
        cfg = G.ProbeConfig(hidden=hidden, steps=200)
        p = G.fit_probe(jax.random.key(1), stacked[:, train], y[train], 2, cfg)
        acc = np.asarray(G.probe_accuracy(p, stacked[:, test], y[test], 2))
        assert acc[1] > 0.9, acc
        assert acc[0] < 0.7, acc
    shuffled = G.fit_probe(jax.random.key(1), x[train], rng.permutation(y[train]), 2,
                           G.ProbeConfig(steps=200))
    assert float(G.probe_accuracy(shuffled, x[test], y[test], 2)) < 0.7


def test_belief_consistency_on_a_hand_case():
    # the decoded map has a wall the true map lacks: "right" is optimal on the true map,
    # but on the decoded one the agent must go down
    chosen = np.asarray([RIGHT, DOWN])
    cells = np.zeros((2, 9, 2))  # 3 x 3 grids, flattened
    cells[..., 0] = 1.0  # all free
    cells[:, 1] = [0.0, 1.0]  # (0, 1) decoded as a wall
    agent = np.asarray([[0, 0], [0, 0]])
    goal = np.asarray([[1, 1], [1, 1]])
    consistent, solvable = G.belief_consistency(chosen, cells, agent, goal)
    assert consistent.tolist() == [False, True] and solvable.all()


@pytest.fixture(scope="module")
def trained():
    cfg = G.AgentConfig(max_size=5, d_model=32, n_layers=2, n_heads=2, d_ff=64, sizes=(4, 5),
                        steps=150, batch_size=48, learning_rate=3e-3)
    return G.train_agent(jax.random.key(0), cfg)


def test_behaviour_cloning_learns_the_optimal_policy(trained):
    model, losses = trained
    losses = np.asarray(losses)
    assert losses[-10:].mean() < 0.7 * losses[:10].mean()
    grids = gw.generate_batch(jax.random.key(9), 200, 5, 0.2)
    acts = G.agent_act(model, grids)
    chance = float(jnp.mean(jax.vmap(gw.optimal_actions)(grids).sum(-1) / 4))
    assert float(G.optimality(acts, grids).mean()) > chance + 0.2
    logits, hidden = G.agent_features(model, grids)
    assert logits.shape == (200, 4) and hidden.shape == (200, 3, 32)
    one_logits, _ = G.agent_features(model, gw.Grid(grids.cells[0], grids.agent[0]))
    np.testing.assert_allclose(one_logits, logits[0], rtol=1e-5, atol=1e-5)
    small = gw.generate_batch(jax.random.key(1), 4, 4, 0.2)  # padded to max_size
    assert G.agent_features(model, small)[0].shape == (4, 4)
    with pytest.raises(ValueError, match="max_size"):
        G.agent_features(model, gw.generate(jax.random.key(0), 7, 0.2))


@pytest.fixture(scope="module")
def tiny_chat(tiny_local_chat):
    return tiny_local_chat(512)


def test_llm_scores_and_hidden_states_from_one_forward(tiny_chat):
    grids = gw.generate_batch(jax.random.key(2), 3, 4, 0.2)
    f = G.llm_features(tiny_chat, grids, batch_size=2)
    assert f["hidden"].shape == (3, 3, 32) and f["layers"].tolist() == [0, 1, 2]
    ref = G.score_actions(tiny_chat, grids)
    np.testing.assert_allclose(f["scores"], ref, atol=1e-4)
    with pytest.raises(TypeError, match="in-process LocalChat"):
        G.llm_features(object(), grids)


def test_score_actions_identical_through_the_loopback_server(tiny_chat):
    pytest.importorskip("openai", reason="pip install openai==3.51.0")
    pytest.importorskip("uvicorn", reason="pip install uvicorn==0.54.0")
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.common.lm.serve import Server

    grids = gw.generate_batch(jax.random.key(4), 3, 4, 0.3, "decoy")
    local = G.score_actions(tiny_chat, grids, gw.RELABELLED)
    with Server(tiny_chat, port=0, log_level="warning") as server:
        remote = G.score_actions(OpenAIChat(server.url, "tiny"), grids, gw.RELABELLED)
    np.testing.assert_allclose(remote, local, atol=1e-4)
    assert (remote.argmax(-1) == local.argmax(-1)).all()
