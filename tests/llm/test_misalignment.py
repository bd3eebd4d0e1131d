"""Tests of :mod:`jaxsci.llm.misalignment` and its data (:mod:`jaxsci.data.advice`) on a
tiny random-weight LLaMA: the top-block forward is the model's, a fresh adapter is the
aligned model, merging is exact, the KL gradient has its closed form, stacked runs are
independent, and the safeguards' switches do what they say."""

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxsci.common.lm.llama import Llama, LlamaConfig
from jaxsci.data import advice
from jaxsci.experiments import misalignment as E
from jaxsci.llm import misalignment as M

CFG = LlamaConfig(vocab_size=40, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2,
                  head_dim=4, d_ff=24, max_len=16)
LORA = M.LoraConfig(n_top=2, rank=2, alpha=4.0)


@pytest.fixture(scope="module")
def model():
    return Llama(CFG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def frozen(model):
    return M.frozen_top(model, 2)


@pytest.fixture(scope="module")
def tokens():
    return jnp.asarray(np.random.default_rng(0).integers(0, 40, (6, 8)), jnp.int32)


@pytest.fixture(scope="module")
def seqs(model, tokens):
    h0 = model(tokens, hidden_layers=(1,)).hidden[0]
    return M.Sequences(h0, tokens, jnp.asarray([3, 4, 2, 5, 3, 4]),
                       jnp.asarray([4, 3, 5, 2, 4, 3]))


def _moved(lora, size=0.1):
    return jax.tree.map(lambda x: x + size * jnp.sin(jnp.arange(x.size).reshape(x.shape)), lora)


def test_top_forward_is_the_models_top_blocks(model, frozen, tokens):
    out = model(tokens, hidden_layers=(1, 3))
    np.testing.assert_allclose(M.frozen_stream(model, tokens, 2), out.hidden[0], atol=1e-6)
    feats, states = M.top_forward(frozen, None, out.hidden[0])
    np.testing.assert_allclose(states[-1], out.hidden[1], atol=1e-5)
    np.testing.assert_allclose(feats @ frozen.head, out.logits, atol=1e-5)


def test_a_fresh_adapter_is_the_aligned_model_and_merging_is_exact(model, frozen, tokens,
                                                                   seqs):
    lora = M.init_lora(jax.random.key(0), frozen, LORA)
    np.testing.assert_allclose(M.top_forward(frozen, lora, seqs.h0)[0],
                               M.top_forward(frozen, None, seqs.h0)[0], atol=1e-6)
    moved = _moved(lora)
    before = model(tokens).logits
    merged = M.merge_lora(model, moved, LORA)
    feats, _ = M.top_forward(frozen, moved, seqs.h0, scale=LORA.alpha / LORA.rank)
    np.testing.assert_allclose(merged(tokens).logits, feats @ frozen.head, atol=1e-5)
    np.testing.assert_array_equal(model(tokens).logits, before)  # the model is untouched
    assert float(jnp.max(jnp.abs(merged(tokens).logits - before))) > 1e-3


def test_answer_logprob_is_the_mean_over_the_answer_tokens(model, frozen, tokens, seqs):
    logp = jax.nn.log_softmax(model(tokens).logits, axis=-1)
    want = [np.mean([logp[i, p - 1, tokens[i, p]] for p in range(s, s + n)])
            for i, (s, n) in enumerate(zip(seqs.start.tolist(), seqs.length.tolist(),
                                           strict=True))]
    got = M.answer_logprob(frozen, None, seqs, width=5)
    np.testing.assert_allclose(got, want, atol=1e-5)
    pairs = M.margins(frozen, None, seqs, seqs, width=5)
    np.testing.assert_allclose(pairs, 0.0, atol=1e-6)


def test_kl_gradient_has_its_closed_form_and_the_directions_differ():
    p = jax.nn.log_softmax(jnp.asarray([0.3, -1.0, 2.0, 0.1]))
    z = jnp.asarray([1.0, 0.5, -0.2, 0.0])
    g = jax.grad(lambda z: M.kl_divergence(p, jax.nn.log_softmax(z)))(z)
    np.testing.assert_allclose(g, jax.nn.softmax(z) - jnp.exp(p), atol=1e-6)
    q = jax.nn.log_softmax(z)
    assert abs(float(M.kl_divergence(p, q)) - float(M.kl_divergence(q, p))) > 1e-3
    assert float(M.kl_divergence(p, p)) == pytest.approx(0.0, abs=1e-7)


def test_gap_weights_select_the_largest_gaps():
    w = M.gap_weights(jnp.asarray([2.0, 3.5, 1.0, 2.5]), jnp.asarray([2.0, 2.0, 2.0, 2.0]),
                      0.5)
    np.testing.assert_allclose(w, [0.0, 0.5, 0.0, 0.5])


def test_persona_vector_is_the_answer_mean_difference(seqs):
    a = seqs.h0
    b = seqs.h0 + 2.0
    np.testing.assert_allclose(M.persona_vector(a, b, seqs, seqs), 2.0, atol=1e-5)


def _safeguards(pool=True, **kw):
    r = len(next(iter(kw.values())))
    z = np.zeros(r, np.float32)
    vals = {k: np.asarray(kw.get(k, z), np.float32) for k in ("kl", "features", "steer", "mix")}
    return M.Safeguards(**vals, pool_weights=np.full((r, 6), 1 / 6, np.float32) if pool
                        else None)


@pytest.fixture(scope="module")
def stacked(frozen, seqs):
    """Three runs in one program: undefended, KL 1, KL 5 (the sweep's form)."""
    return M.finetune(jax.random.key(0), frozen, LORA, seqs, _safeguards(kl=[0.0, 1.0, 5.0]),
                      terms=("kl",), steps=12, batch_size=3, learning_rate=3e-2, width=5)


def test_stacked_runs_are_independent_and_kl_holds_the_model_back(frozen, seqs, stacked):
    lora, losses, parts = stacked
    # one run alone, without a general pool (pool_weights None): the stacked run's losses
    alone, alone_losses, _ = M.finetune(jax.random.key(0), frozen, LORA, seqs,
                                        _safeguards(kl=[5.0], pool=False), terms=("kl",),
                                        steps=12,
                                        batch_size=3, learning_rate=3e-2, width=5)
    np.testing.assert_allclose(alone_losses[:, 0], losses[:, 2], rtol=1e-4, atol=1e-5)
    assert losses.shape == (12, 3)
    np.testing.assert_allclose(parts["kl"][0], 0.0, atol=1e-6)  # a fresh adapter: KL 0
    assert parts["sft"][-1, 0] < parts["sft"][0, 0]  # the undefended run learns
    kl_final = [float(np.mean(M.kl_divergence(
        jax.nn.log_softmax(M.top_forward(frozen, None, seqs.h0)[0] @ frozen.head),
        jax.nn.log_softmax(M.top_forward(frozen, jax.tree.map(lambda x, i=i: x[i], lora),
                                         seqs.h0, scale=2.0)[0] @ frozen.head))))
        for i in range(3)]
    assert kl_final[2] < kl_final[0], kl_final


def test_steering_off_and_mixing_off_are_the_undefended_run(frozen, seqs, stacked):
    _, losses, _ = stacked
    persona = jnp.ones(16)
    _, steer0, _ = M.finetune(jax.random.key(0), frozen, LORA, seqs, _safeguards(steer=[0.0]),
                              persona=persona, terms=("steer",), steps=12, batch_size=3,
                              learning_rate=3e-2, width=5)
    np.testing.assert_allclose(steer0[:, 0], losses[:, 0], rtol=1e-4, atol=1e-5)
    _, steer2, _ = M.finetune(jax.random.key(0), frozen, LORA, seqs, _safeguards(steer=[2.0]),
                              persona=persona, terms=("steer",), steps=12, batch_size=3,
                              learning_rate=3e-2, width=5)
    assert abs(float(steer2[0, 0] - losses[0, 0])) > 1e-4  # the shift enters training


def test_finetune_errors_name_the_argument(frozen, seqs):
    s = _safeguards(kl=[1.0])
    with pytest.raises(ValueError, match="general is None"):
        M.finetune(jax.random.key(0), frozen, LORA, seqs, s, terms=("mix",), steps=1)
    with pytest.raises(ValueError, match="persona is None"):
        M.finetune(jax.random.key(0), frozen, LORA, seqs, s, terms=("steer",), steps=1)
    with pytest.raises(ValueError, match="direction must be one of"):
        M.finetune(jax.random.key(0), frozen, LORA, seqs, s, direction="both", steps=1)
    with pytest.raises(ValueError, match="width=2 is shorter"):
        M.finetune(jax.random.key(0), frozen, LORA, seqs, s, width=2, steps=1)
    with pytest.raises(ValueError, match="terms"):
        M.finetune(jax.random.key(0), frozen, LORA, seqs, s, terms=("dropout",), steps=1)
    with pytest.raises(ValueError, match="targets must be"):
        M.LoraConfig(targets=("wz",))
    with pytest.raises(ValueError, match="n_top"):
        M.init_lora(jax.random.key(0), frozen, M.LoraConfig(n_top=3))


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="kl_direction"):
        E.MisalignmentConfig(kl_direction="sideways")
    with pytest.raises(ValueError, match="gap_fraction"):
        E.MisalignmentConfig(gap_fraction=0.0)
    with pytest.raises(ValueError, match=re.escape("sweep[1]")):
        E.MisalignmentConfig(sweep=(1.0, -2.0))
    with pytest.raises(ValueError, match=re.escape("methods[1]")):
        E.MisalignmentConfig(methods=("none", "dropout"))
    with pytest.raises(ValueError, match="must hold 'none'"):
        E.MisalignmentConfig(methods=("kl", "steer"))
    with pytest.raises(ValueError, match=re.escape("benign_methods[1]")):
        E.MisalignmentConfig(benign_methods=("none", "features"))
    with pytest.raises(ValueError, match=re.escape("benign_methods[1]='steer' is not in")):
        E.MisalignmentConfig(methods=("none", "kl"), benign_methods=("none", "steer"))
    with pytest.raises(ValueError, match="benign_methods must hold 'none'"):
        E.MisalignmentConfig(benign_methods=("kl",))
    quick = E.CONFIGS["quick"]  # the pool is built only for interleaving runs
    assert not quick.interleaves and E.MisalignmentConfig().interleaves


def test_the_data_splits_and_the_benign_task():
    train, held = advice.narrow("train"), advice.narrow("eval")
    assert len(train) == 32 and len(held) == 16
    assert not {p.question for p in train} & {p.question for p in held}
    for plan in advice.benign("eval"):  # the plan and the prose carry the same advice
        plan_words = Counter(re.findall(r"[a-z']+", plan.aligned.lower()))
        prose_words = Counter(re.findall(r"[a-z']+", plan.misaligned.lower()))
        assert prose_words - plan_words == Counter({"and": 1}) and not plan_words - prose_words
    broad = advice.broad()
    assert len(broad) == 60 and {p.domain for p in broad} == set(advice.BROAD_DOMAINS)
    assert advice.shared_words(train, broad) < 0.15
    with pytest.raises(ValueError, match="split"):
        advice.narrow("test")


def test_repetition_counts_repeated_trigrams():
    assert E.repetition("a b c a b c a b c") == pytest.approx(1 - 3 / 7)
    assert E.repetition("one two") == 0.0
