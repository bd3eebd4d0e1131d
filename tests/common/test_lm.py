import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxsci.common.lm import decode, training
from jaxsci.common.lm.model import Transformer, TransformerConfig, count_params
from jaxsci.common.lm.tokenizer import BOS, EOS, MASK, PAD, VOCAB_SIZE, ByteTokenizer
from jaxsci.data import corpora

# The smoke config's target shape: the unit tests and the dflash smoke run share compiled
# decoding programs (same model shape, prompt bucket and number of new tokens).
TCFG = TransformerConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=64)
N_NEW = 16
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def model():
    return Transformer(TCFG, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def prompt():
    p = jnp.asarray(TOK.encode("the cat sees a dog.\nthe bird ", bos=True))
    assert 16 < p.shape[0] <= 32  # the prompt bucket of the smoke run's programs
    return p


@pytest.fixture(scope="module")
def full():
    """``full(model, tokens (64,)) -> (logits, hidden 0..2)``: one compiled full pass.

    Attention is causal, so logits at a position don't depend on the (padding) tokens
    after it: a fixed-size buffer serves every prefix length.
    """
    graphdef = nnx.split(Transformer(TCFG, rngs=nnx.Rngs(0)))[0]

    @jax.jit
    def run(state, toks):
        out = nnx.merge(graphdef, state)(toks[None], hidden_layers=(0, 1, 2))
        return out.logits[0], [h[0] for h in out.hidden]

    return lambda m, toks: run(nnx.state(m), jnp.pad(toks, (0, TCFG.max_len - toks.shape[0])))


# ----------------------------------------------------------------- tokenizer


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_tokenizer_round_trips_any_bytes(data):
    ids = TOK.encode(data, bos=True, eos=True)
    assert ids.dtype == np.int32 and ids[0] == BOS and ids[-1] == EOS
    assert ids.size == len(data) + 2
    assert TOK.decode_bytes(ids) == data


def test_tokenizer_text_and_specials():
    assert TOK.decode(TOK.encode("héllo ✓")) == "héllo ✓"
    assert TOK.decode_bytes([104, PAD, 105, MASK]) == b"hi"
    assert len({BOS, EOS, PAD, MASK}) == 4 and max(BOS, EOS, PAD, MASK) == VOCAB_SIZE - 1
    with pytest.raises(ValueError, match="ids must be <= 259"):
        TOK.decode_bytes([1, 260])
    with pytest.raises(TypeError, match="text must be str or bytes"):
        TOK.encode(3)


# ----------------------------------------------------------------- model


def test_kv_cache_decoding_equals_full_recomputation(model, full):
    """Prefill, a rejected block, the block that overwrites it, then single steps."""
    toks = jax.random.randint(jax.random.key(1), (24,), 0, 256)

    @jax.jit
    def incremental(toks):
        out = model(toks[None, :10], cache=model.init_cache(1))
        stale = model(jnp.full((1, 5), 7), jnp.arange(10, 15)[None], cache=out.cache).cache
        blk = model(toks[None, 10:15], jnp.arange(10, 15)[None], cache=stale)

        def step(cache, t):
            o = model(toks[t][None, None], t[None, None], cache=cache)
            return o.cache, o.logits[0, 0]

        _, singles = jax.lax.scan(step, blk.cache, jnp.arange(15, 24))
        return jnp.concatenate([out.logits[0], blk.logits[0], singles])

    np.testing.assert_allclose(incremental(toks), full(model, toks)[0][:24], atol=2e-5)


def test_hidden_states_are_the_residual_stream(model, full):
    toks = jax.random.randint(jax.random.key(3), (7,), 0, 256)
    logits, hidden = full(model, toks)
    assert [h.shape for h in hidden] == [(64, 32)] * 3
    np.testing.assert_allclose(hidden[0][:7], model.embed_tokens(toks))
    # The last block's output, through the final norm and the tied head, is the logits.
    np.testing.assert_allclose(model.unembed(model.norm(hidden[2])), logits, atol=1e-5)
    with pytest.raises(ValueError, match="hidden_layers"):
        model(toks[None], hidden_layers=(3,))


def test_config_errors_name_the_argument():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="head_dim"):
        TransformerConfig(d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        TransformerConfig(max_len=0)
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        Transformer({"d_model": 8}, rngs=nnx.Rngs(0))


# ----------------------------------------------------------------- decoding


def test_greedy_generate_equals_full_recomputation(model, prompt, full):
    out = decode.generate(model, prompt, N_NEW)
    seq = list(np.asarray(prompt))
    for _ in range(N_NEW):
        seq.append(int(jnp.argmax(full(model, jnp.asarray(seq))[0][len(seq) - 1])))
    np.testing.assert_array_equal(out.tokens, seq[len(prompt):])
    assert int(out.length) == N_NEW


def test_sampling_is_deterministic_jittable_and_vmappable(model):
    # 200 keys, 3 tokens, a prompt in the 16-token bucket: the shape of the dflash smoke
    # run's sampling check, so the batched program is shared with it.
    prompt = jnp.asarray(TOK.encode("the dog sees.\n", bos=True))
    keys = jax.random.split(jax.random.key(0), 200)

    def sample(k):
        return decode.generate(model, prompt, 3, key=k, temperature=1.0).tokens

    batch = np.asarray(jax.vmap(sample)(keys))
    jitted = jax.jit(sample)
    for i in range(2):  # jit of the whole decoding loop, looped over keys == vmap
        np.testing.assert_array_equal(jitted(keys[i]), batch[i])
    np.testing.assert_array_equal(jitted(keys[0]), jitted(keys[0]))  # same key, same tokens
    assert len({tuple(r) for r in batch.tolist()}) > 100  # a random model: diverse samples


def test_padded_prompt_with_length_equals_plain_prompt(model, prompt):
    # Whatever fills the buffer after the prompt is never seen.
    junk = jax.random.randint(jax.random.key(4), (32 - prompt.shape[0],), 0, 256)
    buf = jnp.concatenate([prompt, junk])
    a = decode.generate(model, prompt, N_NEW)
    b = decode.generate(model, buf, N_NEW, prompt_length=prompt.shape[0])
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_stop_token_truncates(model, prompt):
    full = decode.generate(model, prompt, N_NEW)
    stop = int(full.tokens[3])
    first = int(np.argmax(np.asarray(full.tokens) == stop))
    out = decode.generate(model, prompt, N_NEW, stop_token=stop)
    assert int(out.length) == first + 1
    np.testing.assert_array_equal(out.tokens[: first + 1], full.tokens[: first + 1])
    assert np.all(np.asarray(out.tokens[first + 1 :]) == PAD)


def test_token_probs_temperature_and_nucleus():
    logits = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
    np.testing.assert_allclose(decode.token_probs(logits, 1.0), [0.5, 0.3, 0.15, 0.05],
                               rtol=1e-6)
    # T = 0.5 squares the probabilities (before renormalising).
    sq = np.array([0.25, 0.09, 0.0225, 0.0025])
    np.testing.assert_allclose(decode.token_probs(logits, 0.5), sq / sq.sum(), rtol=1e-5)
    # top_p = 0.7: the nucleus is {0.5, 0.3} (mass before the 2nd token 0.5 < 0.7,
    # before the 3rd 0.8 >= 0.7).
    np.testing.assert_allclose(decode.token_probs(logits, 1.0, 0.7), [0.625, 0.375, 0, 0],
                               rtol=1e-6)
    np.testing.assert_allclose(decode.token_probs(logits, 1.0, 1e-3), [1, 0, 0, 0])
    assert int(decode.sample_token(jax.random.key(0), logits, 0.0)) == 0


def test_decode_errors_name_the_argument(model, prompt):
    with pytest.raises(ValueError, match="prompt must hold at least one token"):
        decode.generate(model, jnp.zeros((0,), jnp.int32), 4)
    with pytest.raises(ValueError, match="exceeds the model's context max_len=64"):
        decode.generate(model, jnp.zeros((60,), jnp.int32), 8)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        decode.generate(model, prompt, 4, temperature=-0.1, key=jax.random.key(0))
    with pytest.raises(ValueError, match="top_p must be <= 1"):
        decode.generate(model, prompt, 4, top_p=1.5)
    with pytest.raises(ValueError, match="key must be given when temperature > 0"):
        decode.generate(model, prompt, 4, temperature=1.0)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        decode.generate(model, prompt, 0)
    with pytest.raises(ValueError, match="prompt must be <= 259"):
        decode.generate(model, jnp.array([1, 300]), 4)
    with pytest.raises(TypeError, match="prompt must have a integer dtype"):
        decode.generate(model, jnp.array([1.0, 2.0]), 4)


# ----------------------------------------------------------------- corpora


def test_corpora_are_deterministic_and_well_formed():
    a = corpora.documents(jax.random.key(0), 8, 40)
    b = corpora.documents(jax.random.key(0), 8, 40)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (8, 40) and np.all(a[:, 0] == BOS)
    assert not np.array_equal(a, corpora.documents(jax.random.key(1), 8, 40))
    rng = np.random.default_rng(0)
    for _ in range(50):
        ar = corpora.sample_text("arithmetic", rng)[:-1]
        lhs, rhs = ar.split("=")
        op = "+" if "+" in lhs else "-"
        x, y = map(int, lhs.split(op))
        assert int(rhs) == (x + y if op == "+" else x - y) >= 0
        pairs, query = corpora.sample_text("recall", rng)[:-1].split(" ?")
        k, v = query.split("=")
        assert dict(p.split(":") for p in pairs.split(" "))[k] == v
        stack = []
        for ch in corpora.sample_text("brackets", rng)[:-1]:
            if ch in "([{":
                stack.append("([{".index(ch))
            elif ch in ")]}":
                assert stack.pop() == ")]}".index(ch)
        assert not stack
        assert corpora.sample_text("grammar", rng).endswith(".\n")
        for task in corpora.TASKS:  # the validity checks accept every generated sample
            assert corpora.is_valid(task, corpora.sample_text(task, rng)[:-1]), task
    for task, bad in [("arithmetic", "12+34=47"), ("grammar", "the cat the dog."),
                      ("grammar", "cat sees."), ("recall", "a1:b2 c3:d4 ?a1=d4"),
                      ("brackets", "f([)]"), ("brackets", "f(()")]:
        assert not corpora.is_valid(task, bad), bad
    p = corpora.prompts(jax.random.key(2), "grammar", 3, max_bytes=30)
    assert len(p) == 3 and all(x[0] == BOS and TOK.decode(x).endswith("\n") for x in p)
    with pytest.raises(ValueError, match="task must be one of"):
        corpora.prompts(jax.random.key(0), "poetry", 1)


# ----------------------------------------------------------------- training


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    # Two fixed 48-byte documents: a tiny model memorises them.
    texts = ["f(a[b]{c})\ng(x)\nh[y]{z}\nf{(a)}\ng[[b]]\nh(c)(d)\n",
             "12+34=46\n5-3=2\n99+1=100\n7+8=15\n60-6=54\n3+3=6\n"]
    docs = np.stack([TOK.encode((t * 2)[:48], bos=True) for t in texts])
    assert docs.shape == (2, 49)
    ckpt = tmp_path_factory.mktemp("lm_ckpt")
    model, losses = training.train_lm(jax.random.key(0), TCFG, docs, steps=150, batch_size=4,
                                      learning_rate=1e-2, warmup=10, checkpoint_dir=ckpt,
                                      checkpoint_every=150)
    return model, losses, docs, ckpt


def test_tiny_model_overfits_tiny_corpus(overfit):
    model, losses, docs, _ = overfit
    assert losses[0] > 5.0 and losses[-10:].mean() < 0.05
    for doc in docs:  # prompt of 24 tokens, the next 16 recalled exactly
        out = decode.generate(model, doc[:24], N_NEW)
        np.testing.assert_array_equal(out.tokens, doc[24:40])


def test_saved_model_loads_back(overfit, full, tmp_path):
    model, first, docs, ckpt = overfit
    training.save_model(tmp_path / "m", model)
    back = training.load_transformer(tmp_path / "m")
    assert back.config == model.config and count_params(back) == count_params(model)
    want = full(model, jnp.asarray(docs[0]))[0]
    np.testing.assert_array_equal(full(back, jnp.asarray(docs[0]))[0], want)
    # fit's own checkpoint resumes a finished run without training again (and returns
    # the saved loss history).
    again, losses = training.train_lm(jax.random.key(0), TCFG, docs, steps=150, batch_size=4,
                                      learning_rate=1e-2, warmup=10, checkpoint_dir=ckpt,
                                      checkpoint_every=150)
    np.testing.assert_array_equal(losses, first)
    np.testing.assert_array_equal(full(again, jnp.asarray(docs[0]))[0], want)


def test_train_lm_errors():
    with pytest.raises(ValueError, match="data rows of 70 tokens exceed the context"):
        training.train_lm(jax.random.key(0), TCFG, np.zeros((2, 70), np.int32), steps=1)
    with pytest.raises(ValueError, match="data must be <= 259"):
        training.train_lm(jax.random.key(0), TCFG, np.full((2, 8), 999, np.int32), steps=1)
