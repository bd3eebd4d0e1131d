import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from jaxsci.common.lm import decode
from jaxsci.common.lm.llama import Llama, LlamaConfig
from jaxsci.common.lm.model import Transformer, TransformerConfig
from jaxsci.common.lm.tokenizer import MASK, ByteTokenizer
from jaxsci.llm import dflash as df

# The dflash smoke run's shapes (target, drafters with B = 4, prompt bucket 32, 16 new
# tokens): the compiled decoding programs are shared with it.
TCFG = TransformerConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=64)
B = 4
N_NEW = 16
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def models():
    """A random (untrained) target and drafters: losslessness must not need good drafts."""
    target = Transformer(TCFG, rngs=nnx.Rngs(0))
    drafters = {kind: df.Drafter(df.DrafterConfig(kind=kind, block_size=B), TCFG,
                                 rngs=nnx.Rngs(1))
                for kind in ("block", "autoregressive")}
    return target, drafters


@pytest.fixture(scope="module")
def prompts():
    texts = ["the cat sees a dog.\nthe bird ", "f(a[b]{c})\ng(x)\nh[y]{z}\n",
             "12+34=46\n5-3=2\n99+1=100\n"]
    out = [jnp.asarray(TOK.encode(t, bos=True)) for t in texts]
    assert all(16 < p.shape[0] <= 32 for p in out)
    return out


# ----------------------------------------------------------------- greedy


@pytest.mark.parametrize("kind,block_size", [("block", B), ("autoregressive", B),
                                             ("autoregressive", 2)])
def test_greedy_speculative_equals_greedy_for_random_models(models, prompts, kind, block_size):
    target, drafters = models
    for p in prompts:
        ref = decode.generate(target, p, N_NEW)
        out = df.speculative_generate(target, drafters[kind], p, N_NEW, block_size=block_size)
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        assert int(out.length) == N_NEW
        # Every round verifies one block and yields between 1 and B tokens.
        assert (N_NEW - 1) / block_size <= int(out.rounds) <= N_NEW - 1


def test_greedy_accept():
    logits = jax.nn.one_hot(jnp.array([5, 6, 7, 8]), 10)
    a, bonus = df.greedy_accept(jnp.array([5, 6, 0]), logits)
    assert (int(a), int(bonus)) == (2, 7)
    a, bonus = df.greedy_accept(jnp.array([5, 6, 7]), logits)
    assert (int(a), int(bonus)) == (3, 8)
    a, bonus = df.greedy_accept(jnp.array([1, 6, 7]), logits)
    assert (int(a), int(bonus)) == (0, 5)


# ----------------------------------------------------------------- sampling rule


def _random_dists(key, n, v, sparsity=0.3):
    """Random distributions with some exact zeros (as top-p truncation makes)."""
    k1, k2 = jax.random.split(key)
    w = jax.random.exponential(k1, (n, v)) * (jax.random.uniform(k2, (n, v)) > sparsity)
    w = w.at[:, 0].add(1e-3)  # never all zero
    return w / w.sum(-1, keepdims=True)


V = 5  # the small vocabulary of the exact tests


@jax.jit
def _rules(p, q):
    """For rows p[i], q[i] (each (V, V): row j is the law after token j), the chance
    ``acc[i, j, d]`` that a draft d ~ q[i, j] is kept, and the residual law ``res[i, j]``."""
    d = jnp.broadcast_to(jnp.arange(V), (V, V))
    acc = jax.vmap(lambda pi, qi: df.acceptance_probability(
        jnp.broadcast_to(pi[:, None, :], (V, V, V)), jnp.broadcast_to(qi[:, None, :], (V, V, V)),
        d))(p, q)
    return acc, df.residual_distribution(p, q)


def test_rejection_rule_preserves_the_target_distribution_exactly():
    """P(out = x) = q(x) a(x) + (sum_d q(d) (1 - a(d))) r(x) = p(x), for every p, q."""
    p = _random_dists(jax.random.key(0), 2 * V, V).reshape(2, V, V)  # 10 random pairs
    q = _random_dists(jax.random.key(1), 2 * V, V).reshape(2, V, V)
    acc, res = _rules(p, q)
    law = q * acc + (q * (1 - acc)).sum(-1, keepdims=True) * res
    np.testing.assert_allclose(law, p, atol=1e-6)
    # p == q: no draft is ever rejected (drafts come from the support of q = p), and the
    # residual falls back to p.
    acc, res = _rules(p, p)
    np.testing.assert_allclose(np.asarray(acc)[np.asarray(p) > 0], 1.0)
    np.testing.assert_allclose(res, p)


def _bigram():
    return _random_dists(jax.random.key(2), V, V, sparsity=0.0)


def test_two_token_block_joint_distribution_exactly():
    """Enumerate a block of two drafts under a bigram target: the joint law of the first
    two output tokens is p(x1 | x0) p(x2 | x1) exactly (chained acceptance)."""
    x0 = 1
    P = _bigram()
    q = _random_dists(jax.random.key(3), 2, V, sparsity=0.0)
    # acc[j][prev, d]: chance draft d at block position j is kept after token prev;
    # res[j][prev]: the law drawn from after rejecting it.
    acc, res = _rules(jnp.stack([P, P]), jnp.broadcast_to(q[:, None, :], (2, V, V)))
    acc, res = np.asarray(acc, np.float64), np.asarray(res, np.float64)
    P, q = np.asarray(P, np.float64), np.asarray(q, np.float64)
    # The first position of a fresh block after token prev (the one-step law).
    fresh = q[0] * acc[0] + (q[0] * (1 - acc[0])).sum(-1, keepdims=True) * res[0]
    joint = np.zeros((V, V))
    for d1, d2 in itertools.product(range(V), range(V)):
        w = q[0, d1] * q[1, d2]
        a1, a2 = acc[0][x0, d1], acc[1][d1, d2]
        joint[d1, d2] += w * a1 * a2  # both kept
        joint[d1] += w * a1 * (1 - a2) * res[1][d1]  # d2 rejected: resample after d1
        # d1 rejected: x1 from the residual, x2 from the next block.
        joint += w * (1 - a1) * res[0][x0][:, None] * fresh
    np.testing.assert_allclose(joint, P[x0][:, None] * P, atol=1e-6)


def test_rejection_sample_matches_the_target_and_the_test_catches_the_biased_rule():
    """Monte-Carlo law of the first two tokens through ``rejection_sample`` itself, for the
    correct rule and the biased one (resampling from p), against the exact law."""
    x0, n = 1, 20000
    P = _bigram()
    q = _random_dists(jax.random.key(3), 2, V, sparsity=0.0)

    def pair(key, resample):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        d = jax.random.categorical(k1, jnp.log(q), axis=-1)
        a, nxt = df.rejection_sample(k2, d, jnp.stack([P[x0], P[d[0]], P[d[1]]]), q,
                                     resample=resample)
        x1 = jnp.where(a >= 1, d[0], nxt)
        # a == 0: the second token comes from a fresh block of one draft.
        d2 = jax.random.categorical(k3, jnp.log(q[0]))
        a2, nxt2 = df.rejection_sample(k4, d2[None], jnp.stack([P[x1], P[d2]]), q[:1],
                                       resample=resample)
        x2 = jnp.where(a >= 2, d[1], jnp.where(a == 1, nxt, jnp.where(a2 >= 1, d2, nxt2)))
        return x1 * V + x2

    codes = jax.jit(jax.vmap(lambda k: jnp.stack([pair(k, "residual"), pair(k, "target")])))(
        jax.random.split(jax.random.key(4), n))
    exact = np.asarray((P[x0][:, None] * P).ravel(), np.float64)
    pvals = [stats.chisquare(np.bincount(np.asarray(codes[:, i]), minlength=V * V),
                             n * exact / exact.sum()).pvalue for i in range(2)]
    assert pvals[0] > 1e-3  # correct rule: no detectable difference
    assert pvals[1] < 1e-6  # biased rule: caught


# ----------------------------------------------------------------- sampling decode


def test_speculative_sampling_is_deterministic_and_vmappable(models):
    # 200 keys, 3 tokens, B = 4, a prompt in the 16-token bucket: the shape of the smoke
    # run's sampling check, so the batched program is shared with it.
    target, drafters = models
    prompt = jnp.asarray(TOK.encode("the dog sees.\n", bos=True))
    keys = jax.random.split(jax.random.key(0), 200)

    def sample(k):
        return df.speculative_generate(target, drafters["block"], prompt, 3, block_size=B,
                                       key=k, temperature=1.0).tokens

    batch = np.asarray(jax.vmap(sample)(keys))
    for i in range(2):
        np.testing.assert_array_equal(sample(keys[i]), batch[i])
    np.testing.assert_array_equal(sample(keys[0]), sample(keys[0]))
    assert len({tuple(r) for r in batch.tolist()}) > 100


def test_stop_token(models, prompts):
    target, drafters = models
    ref = decode.generate(target, prompts[1], N_NEW)
    stop = int(ref.tokens[5])
    want = decode.generate(target, prompts[1], N_NEW, stop_token=stop)
    out = df.speculative_generate(target, drafters["block"], prompts[1], N_NEW,
                                  stop_token=stop)
    np.testing.assert_array_equal(out.tokens, want.tokens)
    assert int(out.length) == int(want.length) < N_NEW


# ----------------------------------------------------------------- training path


def test_training_blocks_see_exactly_what_inference_blocks_see(models):
    """The training loss's block logits equal the drafting pass at inference (context
    features of positions < s, the block bidirectional), and nothing at or after the
    anchor leaks into them (changing those tokens' hidden states changes nothing)."""
    target, drafters = models
    drafter = drafters["block"]
    toks = jax.random.randint(jax.random.key(5), (1, 24), 0, 256)
    s = 11
    layers = drafter.config.target_layers

    @jax.jit
    def logits(toks, noise):
        """(training-path logits with the hidden states at >= s perturbed, inference)."""
        hidden = target(toks, hidden_layers=layers).hidden
        noisy = [h.at[:, s:].add(noise) for h in hidden]
        train = df.drafter_logits(drafter, target, toks, jnp.array([[s]]), block_size=B,
                                  hidden=noisy)[0, 0]
        cache = df._write_context([h[:, :s] for h in hidden], drafter, drafter.init_cache(1),
                                  jnp.arange(s)[None])
        block = jnp.concatenate([toks[0, s][None], jnp.full((B - 1,), MASK)])
        h, _ = drafter(target.embed_tokens(block[None]), (s + jnp.arange(B))[None], cache.k,
                       cache.v, (jnp.arange(TCFG.max_len) < s)[None, None].repeat(B, 1),
                       jnp.ones((B, B), bool))
        return train, target.unembed(h[0, 1:])

    clean, infer = logits(toks, 0.0)
    assert clean.shape == (B - 1, TCFG.vocab_size)
    np.testing.assert_allclose(clean, infer, atol=1e-4)
    np.testing.assert_allclose(logits(toks, 3.0)[0], clean, atol=1e-5)
    # The block's own masked tokens are not inputs either (only the labels).
    later = toks.at[0, s + 1 :].set(0)
    np.testing.assert_allclose(logits(later, 0.0)[0], clean, atol=1e-5)


def test_default_target_layers_and_decay():
    assert df.default_target_layers(36, 5) == (1, 9, 17, 25, 33)  # the paper's choice
    assert df.default_target_layers(2) == (1, 2)
    assert df.default_target_layers(4) == (1, 3, 4)
    assert [df._default_decay(b) for b in (8, 10, 16)] == [4.0, 5.0, 7.0]


# ----------------------------------------------------------------- errors


def test_errors_name_the_argument(models, prompts):
    target, drafters = models
    d = drafters["block"]
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        df.speculative_generate(target, d, prompts[0], 4, block_size=0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        df.speculative_generate(target, d, prompts[0], 4, temperature=-1.0,
                                key=jax.random.key(0))
    with pytest.raises(ValueError, match="prompt must hold at least one token"):
        df.speculative_generate(target, d, jnp.zeros((0,), jnp.int32), 4)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        df.speculative_generate(target, d, jnp.zeros((60,), jnp.int32), 8)
    with pytest.raises(ValueError, match="resample must be one of"):
        df.speculative_generate(target, d, prompts[0], 4, resample="p")
    small = TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=64)
    other = nnx.eval_shape(lambda: df.Drafter(df.DrafterConfig(), small, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="drafter does not match the target: d_model"):
        df.speculative_generate(target, other, prompts[0], 4)
    with pytest.raises(ValueError, match="kind must be one of"):
        df.DrafterConfig(kind="tree")
    with pytest.raises(ValueError, match="target_layers\\[i\\] must be <= 2"):
        df.Drafter(df.DrafterConfig(target_layers=(1, 5)), TCFG, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="target must be a Transformer, a Llama or one's config"):
        df.Drafter(df.DrafterConfig(), {"d_model": 32}, rngs=nnx.Rngs(0))


def test_drafter_shares_the_targets_widths(models, tmp_path):
    target, drafters = models
    d = drafters["block"]
    assert d.target_config == TCFG
    # Resolved against the target: default layers and the target's MLP width.
    assert d.config.target_layers == df.default_target_layers(TCFG.n_layers)
    assert d.config.d_ff == TCFG.d_ff
    from jaxsci.common.lm.training import save_model

    save_model(tmp_path / "d", d)
    back = df.load_drafter(tmp_path / "d")
    assert back.config == d.config and back.target_config == TCFG


# ----------------------------------------------------------------- a LLaMA target (SmolLM2's kind)

# SmolLM2's architecture in miniature: grouped-query attention (4 query heads sharing 2
# key/value heads), an 8192-token context (the cache is sized to the call, not to it).
LCFG = LlamaConfig(vocab_size=300, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2,
                   head_dim=8, d_ff=64, max_len=8192)


def test_a_llama_target_decodes_losslessly_and_its_drafter_saves(prompts, tmp_path):
    target = Llama(LCFG, rngs=nnx.Rngs(0))
    p = prompts[0]
    ref = decode.generate(target, p, N_NEW)
    for kind in ("block", "autoregressive"):
        d = df.Drafter(df.DrafterConfig(kind=kind, block_size=B), target, rngs=nnx.Rngs(1))
        assert d.config.target_layers == df.default_target_layers(LCFG.n_layers)
        out = df.speculative_generate(target, d, p, N_NEW)
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        assert (N_NEW - 1) / B <= int(out.rounds) <= N_NEW - 1
    # The drafter's loss trains against the LLaMA's hidden states (finite, with a
    # gradient), and a saved drafter comes back with its LlamaConfig target.
    toks = jax.random.randint(jax.random.key(0), (2, 20), 0, LCFG.vocab_size)
    loss, grads = nnx.value_and_grad(lambda m: df.drafter_loss(
        m, target, toks, jnp.array([[1, 7], [3, 12]]), block_size=B, decay=4.0))(d)
    assert np.isfinite(float(loss))
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree_util.tree_leaves(grads))
    from jaxsci.common.lm.training import save_model

    save_model(tmp_path / "d", d)
    back = df.load_drafter(tmp_path / "d")
    assert back.target_config == LCFG and back.config == d.config
    with pytest.raises(ValueError, match="drafter was built for a LlamaConfig target"):
        df.speculative_generate(Transformer(TCFG, rngs=nnx.Rngs(0)), back, p, 4)
