"""TextResNet (jaxsci.agents.textresnet) and the relay-chain task (jaxsci.data.relay):
each mechanism on hand-made chains; the LLM path on the tiny random LLaMA over loopback."""

import numpy as np
import pytest

from jaxsci.agents import textresnet as T
from jaxsci.data import relay as R


class BagOfWords:
    """A deterministic stand-in embedder (one dimension per word) with MiniLM's
    ``embed`` signature, so the projector's routing is tested without model weights."""

    def embed(self, texts):
        vocab = sorted({w for t in texts for w in t.lower().replace("'", " ").split()})
        out = np.zeros((len(texts), len(vocab)))
        for i, t in enumerate(texts):
            for w in t.lower().replace("'", " ").split():
                out[i, vocab.index(w)] += 1
        return out + 1e-3


HAND = R.Chain(("fruit", "colour", "animal", "tree", "gem"),
               ("Add one fruit.", "Add one colour.", "Add one metal.", "Add one tree.",
                "Add one gem."), (2,))


def test_relay_bank_is_deterministic_and_checker_names_each_issue():
    assert R.make_chain(5, 8, 2) == R.make_chain(5, 8, 2)
    c = R.make_chain(5, 8, 2)
    assert len(c.faulty) == 2 and c.instructions != tuple(R.instruction(k) for k in c.spec)
    deltas = T.forward(c.instructions)
    loss, comps = R.check(c.spec, deltas)
    assert loss == 4 and sum(x.startswith("'") for x in comps) == 2
    assert R.check(c.spec, [R.item_for(k, 1) for k in reversed(c.spec)]) == (0, [])


def test_additive_forward_keeps_deltas_apart_while_textgrad_states_entangle():
    deltas = T.forward(HAND.instructions)
    assert deltas[2] in R.CATALOGUE["metal"]
    st = T.states(deltas)
    # every TextGrad output from the faulty node on holds its item (entanglement)
    assert all(deltas[2] in s for s in st[3:]) and deltas[2] not in st[2]


def test_projector_routes_feedback_to_the_planted_faulty_node():
    deltas = T.forward(HAND.instructions)
    loss, comps = R.check(HAND.spec, deltas)
    assert loss == 2
    proj = T.project([deltas], [comps], backend="minilm", embedder=BagOfWords())[0]
    routed = T.route(proj)
    assert routed[2] == [0]  # the surplus metal item goes to node 2
    assert not np.isfinite(proj[1]).any()  # "No animal was added" is global
    assert T.schedule(routed, budget=2) == [2]
    bw = T.textresnet_backward(deltas, comps, proj)
    assert int(np.argmax(bw.blame)) == 2


def test_density_schedule_orders_by_routed_components_and_budget():
    assert T.schedule([[0], [1, 2], [], [3]], budget=2) == [1, 0]
    assert T.schedule([[0], [], [1]], budget=5, confidence=[0.1, 0.0, 0.9]) == [2, 0]
    with pytest.raises(ValueError, match="budget must be an int"):
        T.schedule([[0]], budget=0)


def test_llm_projector_and_textgrad_on_tiny_model_and_tokens(tiny_local_chat):
    chat = tiny_local_chat(1024)
    c = R.make_chain(1, 8, 1)
    deltas = T.forward(c.instructions)
    _, comps = R.check(c.spec, deltas)
    proj = T.project([deltas], [comps], backend="llm", chat=chat)[0]
    assert proj.shape == (len(comps), 8) and np.isfinite(proj[0]).all()
    rn = T.textresnet_backward(deltas, comps, proj)
    tg = T.textgrad_backward(chat, [c.instructions], [deltas], [comps])[0]
    ts = T.textgrad_backward(chat, [c.instructions], [deltas], [comps], summary_tokens=8)[0]
    assert len(tg.prompts) == 8 and len(rn.prompts) == 1
    assert tg.tokens >= 2 * rn.tokens and ts.tokens < tg.tokens
    new = T.choose_instruction(chat, [(c.instructions[c.faulty[0]], comps)])
    assert new[0] != c.instructions[c.faulty[0]] and R.kind_of(R.item_for(
        T.kind_from_instruction(new[0]), 0)) in T.candidate_kinds("", comps)


def test_llm_path_on_the_tiny_model_over_loopback(tiny_local_chat):
    pytest.importorskip("openai", reason="pip install openai")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.common.lm.serve import Server

    with Server(tiny_local_chat(1024), port=0, log_level="warning") as server:
        chat = OpenAIChat(server.url, "tiny")
        new, reply = T.llm_rewrite_instruction(chat, "Add one metal.",
                                               ["'iron' (a metal) was not asked for."],
                                               max_tokens=8)
        crit = T.llm_rewrite_critique(chat, "No fruit was added.", "Add one metal.",
                                      max_tokens=8)
        s = T.score_options(chat, [[{"role": "user", "content": "Is it?"}]], ["yes", "no"])
    assert isinstance(reply, str) and isinstance(crit, str) and crit
    # a random model names no kind: the parameter is kept (never a malformed one)
    assert new == "Add one metal." or T.kind_from_instruction(new) in R.CATALOGUE
    assert s.shape == (1, 2) and np.isfinite(s).all()


def test_parse_instruction_and_bad_inputs_raise_clear_errors():
    assert T.parse_instruction("Sure! Add one Fruit please") == "Add one fruit."
    assert T.parse_instruction("maybe a gem") == "Add one gem."
    assert T.parse_instruction("nothing here") is None
    with pytest.raises(ValueError, match="depth must be an int"):
        R.make_chain(0, 1)
    with pytest.raises(ValueError, match="faults must be an int"):
        R.make_chain(0, 4, 3)
    with pytest.raises(ValueError, match="backend must be"):
        T.project([["a"]], [["x"]], backend="bm25")
    with pytest.raises(ValueError, match="backend='llm' needs chat"):
        T.project([["a"]], [["'a' x"]])
    with pytest.raises(ValueError, match="instructions must be"):
        T.forward("Add one fruit.")
    with pytest.raises(ValueError, match="projection must be"):
        T.route(np.zeros(3))
    with pytest.raises(TypeError, match="text must be a str"):
        T.count_tokens(3)


def test_config_refuses_missing_reported_depths():
    from jaxsci.experiments.textresnet import TextResNetConfig

    with pytest.raises(ValueError, match="depths must be"):
        TextResNetConfig(depths=(2, 4))
    with pytest.raises(ValueError, match="update must be"):
        TextResNetConfig(update="oracle")
