"""MemEvolve / EvolveLab: memory architectures as genotypes, and their meta-evolution.

EvolveLab decomposes a memory system into four modules; here each is a declarative
gene of a :class:`Genotype` (a frozen, diffable value with a dict round-trip):

* **encode** (what a finished trajectory becomes): ``"raw"`` (the trajectory text),
  ``"lesson"`` (a key-value lesson ``query -> answer``), ``"both"``;
* **store**: ``"list"`` (append), ``"kv"`` (one record per normalised query, the newest
  wins), ``"vector"`` (records with embeddings: MiniLM, or any ``embed`` callable);
* **retrieve**: ``"recency"``, ``"bm25"``, ``"cosine"``, ``"hybrid"`` (BM25 + cosine),
  top ``k``;
* **manage**: ``"none"``, ``"dedupe"``, ``"cap_lru"`` / ``"cap_freq"`` (at most ``cap``
  records, evicting the least recently / least often retrieved), ``"consolidate"`` (one
  record per normalised query and encoding).

:data:`PRESETS` are shaped like the systems the paper distils (Agent-KB-like, ExpeL-like,
cheatsheet-like, a lightweight capped memory) plus the default ``base`` memory.
Every memory is a :class:`MemoryProvider` with the authors' interface:
:meth:`~MemoryProvider.provide` at task begin (``phase="begin"``) or inside a task
(``phase="in_task"``), and :meth:`~MemoryProvider.take_in` of a finished
:class:`Trajectory`.

The outer loop (:func:`evolve`) is the authors' tournament: per round the parent and
``m`` candidates are evaluated on ``x`` tasks, the top ``t`` by Pareto rank over
(accuracy up, tokens down, time down) go to finals on ``y`` extra tasks, and the
finals' winner is the next parent. Proposals come from either

* :func:`llm_propose_provider` (the paper's path): the LLM reads the diagnosis of the
  parent's trajectories and writes a provider class in Python, which passes the gates
  of :func:`check_provider_code` (syntax, then a smoke test in the sandbox
  :func:`jaxsci.common.agents.run_code`) and then runs as a :class:`SandboxedProvider`;
* :func:`diagnose_and_mutate`: a **programmatic replacement of the LLM designer**
  (named so in the lineage and the metrics): rules over the diagnosis pick gene edits.

Departures from the paper: "time" in the Pareto selection is a deterministic cost
proxy, the number of records scored per retrieval (wall time is reported apart, not
selected on, so a rerun selects the same designs); episodes are answered in blocks
(:func:`run_stream`), the memory taking in a block's trajectories after the block, so
that a block's prompts are scored in one forward pass.

>>> from jaxsci.agents import memevolve as ME
>>> g = ME.PRESETS["cheatsheet"]
>>> ME.genotype_from_dict(g.to_dict()) == g
True
>>> p = ME.GenotypeProvider(g)
>>> p.take_in(ME.Trajectory("Code of Vela?", "ember", False, "Wrong. It is dune.", "dune"))
>>> "dune" in p.provide("What is the code of Vela?")
True
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "ENCODE", "STORE", "RETRIEVE", "MANAGE", "PRESETS", "MUTATE_METHOD",
    "Candidate", "GateError", "Genotype", "GenotypeError", "GenotypeProvider",
    "MemoryProvider", "SandboxedProvider", "StreamLog", "Trajectory", "EvolveResult",
    "bm25_scores", "check_provider_code", "count_tokens", "diagnose", "diagnose_and_mutate",
    "evolve", "genotype_diff", "genotype_from_dict", "hash_embed", "llm_propose_provider",
    "pareto_ranks", "question_messages", "run_stream", "score_options", "select_finalists",
]

ENCODE = ("raw", "lesson", "both")
STORE = ("list", "kv", "vector")
RETRIEVE = ("recency", "bm25", "cosine", "hybrid")
MANAGE = ("none", "dedupe", "cap_lru", "cap_freq", "consolidate")
MUTATE_METHOD = ("diagnose_and_mutate: a programmatic replacement of the LLM designer "
                 "(rules over the diagnosis edit the genotype's genes)")
LLM_METHOD = "llm: the LLM writes a provider class, gated in the sandbox"
SYSTEM = "Answer with one word from the options."
MAX_CONTEXT_CHARS = 2000


class GenotypeError(ValueError):
    """A malformed genotype (the gene named, what was expected and what came)."""


class GateError(ValueError):
    """Generated provider code failed a gate (``gate``: ``syntax`` | ``smoke``)."""

    def __init__(self, gate: str, message: str):
        super().__init__(f"gate {gate!r}: {message}")
        self.gate = gate


@dataclasses.dataclass(frozen=True)
class Genotype:
    """A memory architecture: EvolveLab's encode / store / retrieve / manage genes.

    Attributes:
      encode: ``"raw"`` | ``"lesson"`` | ``"both"``.
      store: ``"list"`` | ``"kv"`` | ``"vector"``.
      retrieve: ``"recency"`` | ``"bm25"`` | ``"cosine"`` | ``"hybrid"``; cosine and
        hybrid need ``store="vector"`` (the embeddings live there).
      k: records retrieved per query (1..16).
      manage: ``"none"`` | ``"dedupe"`` | ``"cap_lru"`` | ``"cap_freq"`` |
        ``"consolidate"``.
      cap: the most records kept by ``cap_lru`` / ``cap_freq`` (2..4096).
    """

    encode: str = "raw"
    store: str = "list"
    retrieve: str = "recency"
    k: int = 2
    manage: str = "none"
    cap: int = 16

    def __post_init__(self):
        for gene, allowed in (("encode", ENCODE), ("store", STORE), ("retrieve", RETRIEVE),
                              ("manage", MANAGE)):
            v = getattr(self, gene)
            if v not in allowed:
                raise GenotypeError(f"genotype gene {gene!r} must be one of {allowed}, "
                                    f"got {v!r}")
        for gene, lo, hi in (("k", 1, 16), ("cap", 2, 4096)):
            v = getattr(self, gene)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= hi:
                raise GenotypeError(f"genotype gene {gene!r} must be an int in [{lo}, {hi}], "
                                    f"got {v!r}")
        if self.retrieve in ("cosine", "hybrid") and self.store != "vector":
            raise GenotypeError(f"genotype: retrieve={self.retrieve!r} needs store='vector' "
                                f"(embeddings), got store={self.store!r}")

    def to_dict(self) -> dict[str, Any]:
        """The genes as a JSON-able dict (:func:`genotype_from_dict` inverts it)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """One line: ``encode=lesson store=kv retrieve=bm25 k=1 manage=cap_freq(8)``."""
        m = f"{self.manage}({self.cap})" if self.manage.startswith("cap") else self.manage
        return (f"encode={self.encode} store={self.store} retrieve={self.retrieve} "
                f"k={self.k} manage={m}")


def genotype_from_dict(d: Any) -> Genotype:
    """A :class:`Genotype` from its dict (or JSON text); unknown or missing genes raise.

    Raises:
      GenotypeError: not a dict, unknown keys, missing keys, or a bad gene value.
    """
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except json.JSONDecodeError as exc:
            raise GenotypeError(f"genotype: JSON text expected, got {d[:60]!r} ({exc.msg})"
                                ) from None
    if not isinstance(d, dict):
        raise GenotypeError(f"genotype must be a dict of genes, got {type(d).__name__}")
    names = {f.name for f in dataclasses.fields(Genotype)}
    extra, missing = set(d) - names, names - set(d)
    if extra or missing:
        raise GenotypeError(f"genotype genes must be exactly {sorted(names)}; unknown "
                            f"{sorted(extra)}, missing {sorted(missing)}")
    return Genotype(**d)


def genotype_diff(a: Genotype, b: Genotype) -> dict[str, tuple[Any, Any]]:
    """The genes where ``a`` and ``b`` differ: ``{gene: (a's, b's)}``."""
    for n, g in (("a", a), ("b", b)):
        if not isinstance(g, Genotype):
            raise TypeError(f"genotype_diff: {n} must be a Genotype, got {type(g).__name__}")
    return {f.name: (getattr(a, f.name), getattr(b, f.name))
            for f in dataclasses.fields(Genotype) if getattr(a, f.name) != getattr(b, f.name)}


# shaped like the systems the paper distils (EvolveLab); ``base`` is the default memory
PRESETS: dict[str, Genotype] = {
    "base": Genotype("raw", "list", "recency", 2, "none"),
    "agent_kb": Genotype("both", "vector", "hybrid", 3, "dedupe"),
    "expel": Genotype("lesson", "vector", "cosine", 2, "consolidate"),
    "cheatsheet": Genotype("lesson", "list", "recency", 4, "cap_lru", 8),
    "lightweight": Genotype("lesson", "kv", "bm25", 1, "cap_freq", 8),
}


class Trajectory(NamedTuple):
    """A finished episode, as the memory takes it in.

    Attributes:
      query: the task text.
      chosen: the agent's answer.
      success: whether it was right.
      feedback: the environment's feedback text.
      answer: the answer the episode revealed (the chosen one on success, the one the
        feedback names on failure; ``""`` when none was revealed).
    """

    query: str
    chosen: str
    success: bool
    feedback: str
    answer: str = ""


_WORD = re.compile(r"[a-z0-9>]+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def count_tokens(text: str) -> int:
    """Whitespace words of ``text`` (the token cost of a memory context)."""
    if not isinstance(text, str):
        raise TypeError(f"count_tokens: text must be a str, got {type(text).__name__}")
    return len(text.split())


def bm25_scores(query: str, docs: Sequence[str], *, k1: float = 1.5, b: float = 0.75
                ) -> np.ndarray:
    """Okapi BM25 of ``query`` against each of ``docs`` (lower-cased word tokens).

    Returns:
      ``(len(docs),)`` float64; all zeros for no docs' overlap.
    """
    if not isinstance(query, str):
        raise TypeError(f"bm25_scores: query must be a str, got {type(query).__name__}")
    toks = [_tokens(d) for d in docs]
    n = len(toks)
    if n == 0:
        return np.zeros(0)
    avg = max(sum(map(len, toks)) / n, 1e-9)
    df = Counter(w for t in toks for w in set(t))
    out = np.zeros(n)
    for w in set(_tokens(query)):
        if w not in df:
            continue
        idf = math.log(1.0 + (n - df[w] + 0.5) / (df[w] + 0.5))
        for i, t in enumerate(toks):
            f = t.count(w)
            if f:
                out[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(t) / avg))
    return out


def hash_embed(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    """A hashing bag-of-words embedder (unit rows): a stand-in for MiniLM in tests.

    Deterministic across processes (``zlib.crc32``, not Python's salted ``hash``).
    """
    import zlib

    out = np.zeros((len(texts), dim))
    for i, t in enumerate(texts):
        for w in _tokens(t):
            out[i, zlib.crc32(w.encode()) % dim] += 1.0
    norm = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norm, 1e-12)


class MemoryProvider(abc.ABC):
    """The provider interface (the authors'): memory in, trajectories out."""

    @abc.abstractmethod
    def provide(self, query: str, phase: str = "begin") -> str:
        """The memory text for ``query`` at task begin or in-task (``""``: nothing)."""

    @abc.abstractmethod
    def take_in(self, trajectory: Trajectory) -> None:
        """Absorb a finished trajectory."""

    def provide_many(self, queries: Sequence[str], phase: str = "begin") -> list[str]:
        """:meth:`provide` for several queries against the same memory state."""
        return [self.provide(q, phase) for q in queries]

    def stats(self) -> dict[str, float]:
        """Cost counters: ``records`` held and ``ops`` (records scored so far)."""
        return {"records": 0.0, "ops": 0.0}


def _check_phase(phase: str) -> None:
    if phase not in ("begin", "in_task"):
        raise ValueError(f"phase must be 'begin' or 'in_task', got {phase!r}")


class GenotypeProvider(MemoryProvider):
    """The memory system a :class:`Genotype` describes.

    Args:
      genotype: the genes.
      embed: ``texts -> (n, d)`` unit embeddings for the vector store (default
        :func:`hash_embed`; the experiment passes MiniLM where configured).
    """

    def __init__(self, genotype: Genotype, embed: Callable[[Sequence[str]], Any] | None = None):
        if not isinstance(genotype, Genotype):
            raise TypeError(f"genotype must be a Genotype, got {type(genotype).__name__}")
        self.g = genotype
        self.embed = embed or hash_embed
        self.records: list[dict[str, Any]] = []
        self.step = 0
        self.ops = 0

    def _encode(self, tr: Trajectory) -> list[tuple[str, str]]:
        out = []
        if self.g.encode in ("raw", "both"):
            out.append(("raw", f"Task: {tr.query} Agent answered {tr.chosen}. "
                               f"{'Correct.' if tr.success else tr.feedback}"))
        if self.g.encode in ("lesson", "both") and tr.answer:
            out.append(("lesson", f"{tr.query} -> {tr.answer}"))
        return out

    def take_in(self, trajectory: Trajectory) -> None:
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"take_in: trajectory must be a Trajectory, got "
                            f"{type(trajectory).__name__}")
        self.step += 1
        key = " ".join(_tokens(trajectory.query))
        for kind, text in self._encode(trajectory):
            rec = {"text": text, "key": key, "kind": kind, "t": self.step, "used": self.step,
                   "uses": 0}
            if self.g.store == "vector":
                rec["emb"] = np.asarray(self.embed([text]), np.float64)[0]
            if self.g.store == "kv":
                self.records = [r for r in self.records
                                if not (r["key"] == key and r["kind"] == kind)]
            self.records.append(rec)
        self._manage()

    def _manage(self) -> None:
        m, recs = self.g.manage, self.records
        if m == "dedupe":
            seen, keep = set(), []
            for r in reversed(recs):
                if r["text"] not in seen:
                    seen.add(r["text"])
                    keep.append(r)
            recs = keep[::-1]
        elif m == "consolidate":
            seen, keep = set(), []
            for r in reversed(recs):
                if (r["key"], r["kind"]) not in seen:
                    seen.add((r["key"], r["kind"]))
                    keep.append(r)
            recs = keep[::-1]
        elif m in ("cap_lru", "cap_freq") and len(recs) > self.g.cap:
            field = "used" if m == "cap_lru" else "uses"
            order = sorted(range(len(recs)), key=lambda i: (recs[i][field], recs[i]["t"]))
            drop = set(order[:len(recs) - self.g.cap])
            recs = [r for i, r in enumerate(recs) if i not in drop]
        self.records = recs

    def provide(self, query: str, phase: str = "begin") -> str:
        if not isinstance(query, str):
            raise TypeError(f"provide: query must be a str, got {type(query).__name__}")
        _check_phase(phase)
        recs = self.records
        if not recs:
            return ""
        self.ops += len(recs)
        r = self.g.retrieve
        if r == "recency":
            s = np.array([x["t"] for x in recs], float)
        else:
            s = np.zeros(len(recs))
            if r in ("bm25", "hybrid"):
                b = bm25_scores(query, [x["text"] for x in recs])
                s += b / max(b.max(), 1e-9) if r == "hybrid" else b
            if r in ("cosine", "hybrid"):
                q = np.asarray(self.embed([query]), np.float64)[0]
                s += np.stack([x["emb"] for x in recs]) @ q
        # ties: the newer record first
        order = sorted(range(len(recs)), key=lambda i: (-s[i], -recs[i]["t"]))[:self.g.k]
        for i in order:
            recs[i]["used"] = self.step
            recs[i]["uses"] += 1
        return "Memory:\n" + "\n".join(f"- {recs[i]['text']}" for i in order)

    def stats(self) -> dict[str, float]:
        return {"records": float(len(self.records)), "ops": float(self.ops)}


# ---------------------------------------------------------------- the LLM's providers

PROVIDER_SPEC = '''Write a Python class `Provider` (standard library only) with:
    def take_in(self, trajectory: dict) -> None
        # keys: query, chosen, success, feedback, answer
    def provide(self, query: str) -> str
        # the memory text shown to the agent before it answers `query`
Reply with one ```python code block.'''

_HARNESS = '''
import json as _json, sys as _sys
_req = _json.loads(_sys.stdin.read())
_p = Provider()
_out = []
for _item in _req:
    if _item[0] == "take":
        _p.take_in(dict(_item[1]))
    else:
        _c = _p.provide(_item[1])
        if not isinstance(_c, str):
            raise TypeError("provide must return a str, got " + type(_c).__name__)
        _out.append(_c[:MAX_CHARS])
print(_json.dumps(_out))
'''.replace("MAX_CHARS", str(MAX_CONTEXT_CHARS))


def _extract_code(text: str) -> str:
    m = re.search(r"```(?:python)?\n(.*?)```", text, re.S)
    return (m.group(1) if m else text).strip()


def _sandbox_calls(code: str, calls: list, timeout_s: float) -> list[str]:
    from jaxsci.common.agents import run_code

    res = run_code(code + "\n" + _HARNESS, stdin=json.dumps(calls), timeout_s=timeout_s,
                   cpu_s=max(1.0, timeout_s))
    if res.status != "ok":
        tail = (res.stderr.strip().splitlines() or [res.status])[-1]
        raise GateError("smoke", f"the provider failed in the sandbox ({res.status}): "
                                 f"{tail[:200]}")
    try:
        out = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise GateError("smoke", f"no JSON list on stdout: {res.stdout[-200:]!r}") from None
    return [str(x) for x in out]


SMOKE = [Trajectory("What is the code of Vela?", "ember", False,
                    "Wrong. The code of Vela is dune.", "dune"),
         Trajectory("Which tools count the orders table?", "lookup>count", True, "Correct.",
                    "lookup>count")]


def check_provider_code(code: str, *, timeout_s: float = 10.0) -> SandboxedProvider:
    """The gates for generated provider code: ``syntax`` (it compiles and defines
    ``class Provider``), then ``smoke`` (in the sandbox it takes in two trajectories
    and provides a ``str`` for two queries).

    Returns:
      a :class:`SandboxedProvider` running ``code``.

    Raises:
      GateError: the first gate that failed, with the reason.
    """
    if not isinstance(code, str) or not code.strip():
        raise GateError("syntax", "no code was written")
    try:
        compile(code, "<provider>", "exec")
    except SyntaxError as exc:
        raise GateError("syntax", f"line {exc.lineno}: {exc.msg}") from None
    if not re.search(r"^class\s+Provider\b", code, re.M):
        raise GateError("syntax", "the code defines no top-level `class Provider`")
    calls = [["take", t._asdict()] for t in SMOKE] + [["provide", "What is the code of Vela?"],
                                                      ["provide", "Count the orders table."]]
    out = _sandbox_calls(code, calls, timeout_s)
    if len(out) != 2:
        raise GateError("smoke", f"expected 2 contexts, got {len(out)}")
    return SandboxedProvider(code, timeout_s=timeout_s)


class SandboxedProvider(MemoryProvider):
    """Generated provider code, replayed in the sandbox: the history of trajectories is
    kept here and each :meth:`provide_many` call runs the code once over the history
    (so the generated code never runs in this process)."""

    def __init__(self, code: str, *, timeout_s: float = 10.0):
        self.code, self.timeout_s = code, timeout_s
        self.history: list[Trajectory] = []
        self.ops = 0

    def take_in(self, trajectory: Trajectory) -> None:
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"take_in: trajectory must be a Trajectory, got "
                            f"{type(trajectory).__name__}")
        self.history.append(trajectory)

    def provide_many(self, queries: Sequence[str], phase: str = "begin") -> list[str]:
        _check_phase(phase)
        calls = [["take", t._asdict()] for t in self.history] + [["provide", q]
                                                                  for q in queries]
        self.ops += len(self.history) * len(queries)
        return _sandbox_calls(self.code, calls, self.timeout_s)

    def provide(self, query: str, phase: str = "begin") -> str:
        return self.provide_many([query], phase)[0]

    def stats(self) -> dict[str, float]:
        return {"records": float(len(self.history)), "ops": float(self.ops)}


def llm_propose_provider(chat, parent: Genotype, diagnosis: dict[str, float], *,
                         max_tokens: int = 400, seed: int = 0) -> str:
    """The paper's proposal step: the LLM reads the parent's design and the diagnosis of
    its trajectories and writes a provider (the code text; gate it with
    :func:`check_provider_code`)."""
    diag = ", ".join(f"{k}={v:.2f}" for k, v in diagnosis.items())
    msgs = [{"role": "system", "content": "You design memory systems for LLM agents."},
            {"role": "user", "content": f"The current memory is: {parent.describe()}.\n"
                                        f"Its diagnosis on the last tasks: {diag}.\n"
                                        f"Improve it.\n{PROVIDER_SPEC}"}]
    return _extract_code(chat.chat(msgs, max_tokens=max_tokens, seed=seed)[0].content)


# ---------------------------------------------------------------- the task agent

def question_messages(memory: str, query: str, options: Sequence[str]) -> list[dict[str, str]]:
    """The agent's chat: the memory text right before the query and options (a 135M
    model copies from the user turn far more than from the system message)."""
    mem = f"{memory}\n" if memory else ""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{mem}{query}\nOptions: {', '.join(options)}.\n"
                                        f"Answer:"}]


def score_options(chat, memories: Sequence[str], tasks: Sequence[Any], *, batch: int = 16
                  ) -> list[np.ndarray]:
    """Option scoring of each task's options with its memory text in context.

    In-process ``LocalChat``: the log-probability of each option's first token, from one
    forward pass per ``batch`` prompts; a task whose options share a first token, or a
    server, uses ``chat.score`` of the full options.

    Returns:
      one ``(len(task.options),)`` array per task.
    """
    from jaxsci.common.lm.chat import LocalChat

    if len(memories) != len(tasks) or not tasks:
        raise ValueError(f"memories and tasks must be non-empty and of one length, got "
                         f"{len(memories)} and {len(tasks)}")
    msgs = [question_messages(m, t.text, t.options) for m, t in zip(memories, tasks,
                                                                     strict=True)]
    out: list[np.ndarray | None] = [None] * len(tasks)
    if isinstance(chat, LocalChat):
        tok = chat.engine.tokenizer
        firsts = [[tok.encode(o)[0] for o in t.options] for t in tasks]
        idx = [i for i, f in enumerate(firsts) if len(set(f)) == len(f)]
        prompts = {i: chat.prompt(msgs[i]) for i in idx}
        order = sorted(idx, key=lambda i: len(prompts[i]))
        for s in range(0, len(order), batch):
            part = order[s:s + batch]
            lg = np.asarray(chat.engine.next_token_logits([prompts[i] for i in part]),
                            np.float64)
            lg = lg - lg.max(-1, keepdims=True)
            lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
            for row, i in zip(lp, part, strict=True):
                out[i] = row[firsts[i]]
    for i, o in enumerate(out):
        if o is None:
            out[i] = np.asarray(chat.score(msgs[i], list(tasks[i].options)), np.float64)
    return out  # type: ignore[return-value]


class StreamLog(NamedTuple):
    """What :func:`run_stream` recorded per episode (arrays of ``len(tasks)``).

    Attributes:
      correct: 1 when the agent answered right.
      tokens: words of the memory text it was given.
      ops: records the memory scored for it (the time proxy).
      chosen: the chosen option index.
      copied_wrong: 1 when a failed episode's wrong answer appeared in its memory text
        (a near-miss distractor retrieved).
      seen_before: 1 when the same query key appeared earlier in the stream.
      wall_s: wall seconds of the whole stream (memory and scoring).
    """

    correct: np.ndarray
    tokens: np.ndarray
    ops: np.ndarray
    chosen: np.ndarray
    copied_wrong: np.ndarray
    seen_before: np.ndarray
    wall_s: float


def _outcome(task: Any, choice: int) -> tuple[bool, str]:
    """An episode's ``(success, feedback)``: the task's own ``attempt`` where it has one
    (the SQLite family executes the chosen tool sequence), else the chosen index against
    ``task.answer`` with ``task.feedback_fail`` on a failure."""
    attempt = getattr(task, "attempt", None)
    if callable(attempt):
        ok, fb = attempt(choice)
        return bool(ok), str(fb)
    ok = choice == task.answer
    return ok, "Correct." if ok else task.feedback_fail


def run_stream(score_fn: Callable[[list[str], list[Any]], list[np.ndarray]],
               provider: MemoryProvider, tasks: Sequence[Any], *, block: int = 4) -> StreamLog:
    """Run the agent with ``provider``'s memory over a task stream.

    Per block of ``block`` tasks: the memory provides a text for each (its state at
    the block's start), ``score_fn(memories, tasks)`` answers them in one call, then
    the memory takes in the block's trajectories (feedback of a failed episode reveals
    the answer). A task with an ``attempt(choice) -> (success, feedback)`` method (the
    SQLite family of :mod:`jaxsci.data.memtasks`) is judged by it: success is what
    executing the chosen option gave, not a comparison of indices.

    Raises:
      ValueError: an empty task set or a bad ``block``.
    """
    if not isinstance(provider, MemoryProvider):
        raise TypeError(f"provider must be a MemoryProvider, got {type(provider).__name__}")
    if len(tasks) == 0:
        raise ValueError("run_stream: tasks must be a non-empty task set, got 0 tasks")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"run_stream: block must be an int >= 1, got {block!r}")
    n = len(tasks)
    correct, tokens, ops, chosen, copied, seen = (np.zeros(n, np.int64) for _ in range(6))
    keys: set[str] = set()
    t0 = time.perf_counter()
    for s in range(0, n, block):
        part = list(tasks[s:s + block])
        before = provider.stats()["ops"]
        mems = provider.provide_many([t.text for t in part])
        ops[s:s + len(part)] = (provider.stats()["ops"] - before) / len(part)
        scores = score_fn(mems, part)
        outcomes = []
        for j, (t, m, sc) in enumerate(zip(part, mems, scores, strict=True)):
            i = s + j
            c = int(np.argmax(sc))
            ok, fb = _outcome(t, c)
            outcomes.append((c, ok, fb))
            chosen[i], correct[i], tokens[i] = c, int(ok), count_tokens(m)
            copied[i] = int(not ok and t.options[c] in m)
            seen[i] = int(t.key in keys)
            keys.add(t.key)
        for t, (c, ok, fb) in zip(part, outcomes, strict=True):
            provider.take_in(Trajectory(t.text, t.options[c], ok, fb, t.options[t.answer]))
    return StreamLog(correct, tokens, ops, chosen, copied, seen, time.perf_counter() - t0)


# ---------------------------------------------------------------- the outer loop

def pareto_ranks(acc, tokens, cost) -> np.ndarray:
    """Non-dominated sorting ranks (0 = the Pareto front) over accuracy (higher better),
    tokens and cost (lower better)."""
    pts = np.stack([-np.asarray(acc, float), np.asarray(tokens, float),
                    np.asarray(cost, float)], 1)
    if pts.shape[0] == 0 or not np.all(np.isfinite(pts)):
        raise ValueError(f"pareto_ranks: acc, tokens, cost must be non-empty, finite and "
                         f"of one length; got {pts.shape[0]} rows")
    n = len(pts)
    ranks = np.full(n, -1)
    r = 0
    while (ranks < 0).any():
        left = np.flatnonzero(ranks < 0)
        for i in left:
            dom = any(np.all(pts[j] <= pts[i]) and np.any(pts[j] < pts[i])
                      for j in left if j != i)
            if not dom:
                ranks[i] = r
        r += 1
    return ranks


def select_finalists(acc, tokens, cost, t: int) -> np.ndarray:
    """The tournament's selection rule: the top ``t`` by (Pareto rank, then higher
    accuracy, fewer tokens, lower cost, earlier index)."""
    ranks = pareto_ranks(acc, tokens, cost)
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t:
        raise ValueError(f"select_finalists: t must be an int >= 1, got {t!r}")
    a, tk, c = (np.asarray(v, float) for v in (acc, tokens, cost))
    order = sorted(range(len(a)), key=lambda i: (ranks[i], -a[i], tk[i], c[i], i))
    return np.array(order[:t])


def diagnose(log: StreamLog) -> dict[str, float]:
    """Diagnosis of a memory's trajectories (what the designer reads): accuracy, the
    failure rate on repeated queries (memory did not help), the share of failures that
    copied a retrieved wrong answer (near-miss), mean tokens and ops."""
    fail = log.correct == 0
    rep = log.seen_before == 1
    return {"accuracy": float(log.correct.mean()),
            "repeat_fail": float(fail[rep].mean()) if rep.any() else 0.0,
            "distractor_fail": float(log.copied_wrong[fail].mean()) if fail.any() else 0.0,
            "tokens": float(log.tokens.mean()), "ops": float(log.ops.mean())}


def diagnose_and_mutate(parent: Genotype, diag: dict[str, float], m: int, seed: int
                        ) -> list[tuple[Genotype, str]]:
    """**Programmatic replacement of the LLM designer**: ``m`` distinct single-gene or
    two-gene edits of ``parent``, the edits the diagnosis points at first, then random
    ones (``seed``).

    Returns:
      ``[(genotype, rationale), ...]`` (fewer than ``m`` when the space is exhausted).
    """
    if not isinstance(parent, Genotype):
        raise TypeError(f"parent must be a Genotype, got {type(parent).__name__}")
    edits: list[tuple[dict[str, Any], str]] = []
    if diag.get("repeat_fail", 0) > 0.3:
        edits += [({"encode": "lesson"}, "repeated queries fail: store distilled lessons"),
                  ({"retrieve": "bm25"}, "repeated queries fail: retrieve by relevance"),
                  ({"store": "vector", "retrieve": "hybrid"},
                   "paraphrases missed: add embeddings and hybrid retrieval")]
    if diag.get("distractor_fail", 0) > 0.2:
        edits += [({"k": max(1, parent.k - 1)}, "near-miss records copied: retrieve fewer"),
                  ({"manage": "consolidate"}, "stale duplicates: consolidate by query")]
    if diag.get("tokens", 0) > 40:
        edits += [({"encode": "lesson"}, "contexts are long: keep lessons only"),
                  ({"manage": "cap_freq", "cap": 8}, "contexts are long: cap the store")]
    rng = np.random.default_rng(seed)
    genes = {"encode": ENCODE, "store": STORE, "retrieve": RETRIEVE, "k": (1, 2, 3, 4),
             "manage": MANAGE}
    for _ in range(64):
        g = list(genes)[rng.integers(len(genes))]
        vals = genes[g]
        edits.append(({g: vals[rng.integers(len(vals))]}, f"exploration: random {g}"))
    out: list[tuple[Genotype, str]] = []
    seen = {parent}
    for e, why in edits:
        d = {**parent.to_dict(), **e}
        if d["retrieve"] in ("cosine", "hybrid"):
            d["store"] = "vector"
        try:
            g = Genotype(**d)
        except GenotypeError:
            continue
        if g not in seen:
            seen.add(g)
            out.append((g, why))
        if len(out) == m:
            break
    return out


@dataclasses.dataclass
class Candidate:
    """A design in the lineage: its id, genes (or code), parent, operator, scores."""

    id: str
    round: int
    parent: str | None
    operator: str
    rationale: str
    genotype: Genotype | None = None
    code: str | None = None
    gate: str = "ok"
    acc: float = float("nan")
    tokens: float = float("nan")
    ops: float = float("nan")
    wall_s: float = float("nan")
    final_acc: float = float("nan")
    finalist: bool = False
    winner: bool = False

    def record(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["genotype"] = self.genotype.to_dict() if self.genotype else None
        d["describe"] = self.genotype.describe() if self.genotype else "generated code"
        return d


class EvolveResult(NamedTuple):
    """:func:`evolve`'s result: the final winner and the whole lineage."""

    best: Candidate
    lineage: list[Candidate]


def evolve(evaluate: Callable[[MemoryProvider, Sequence[Any]], StreamLog],
           make_provider: Callable[[Candidate], MemoryProvider],
           seeds: dict[str, Genotype], rounds: list[tuple[list[Any], list[Any]]], *,
           m: int = 3, t: int = 2, propose: Callable[..., list[Candidate]] | None = None,
           seed: int = 0, on_round: Callable[[int], None] | None = None) -> EvolveResult:
    """The MemEvolve tournament.

    Round 0 evaluates the ``seeds``; each later round the parent and ``m`` proposals.
    Each round's pool runs on that round's ``x`` tasks (fresh memory), the top ``t`` by
    :func:`select_finalists` continue on its ``y`` extra tasks with the memory they
    built, and the finalist with the most right answers over ``x + y`` (ties: fewer
    tokens, then the earlier) is the next parent.

    Args:
      evaluate: ``(provider, tasks) -> StreamLog``.
      make_provider: a fresh provider for a candidate.
      seeds: the starting designs (name -> genotype).
      rounds: ``[(x_tasks, y_tasks), ...]``: round 0 (the seeds) then one per proposal
        round.
      m, t: candidates per round and finalists (the authors' 3 and 2).
      propose: ``(parent, diagnosis, m, round, seed) -> [Candidate]``; default
        :func:`diagnose_and_mutate`.

    Returns:
      :class:`EvolveResult`; every candidate's ``parent`` / ``operator`` / ``rationale``
      trace how it arose.
    """
    if not seeds:
        raise ValueError("evolve: seeds must hold at least one genotype")
    if not rounds or any(len(x) == 0 or len(y) == 0 for x, y in rounds):
        raise ValueError("evolve: rounds must be non-empty (x_tasks, y_tasks) pairs of "
                         "non-empty task sets")

    def default(parent, diag, m_, r, s):
        return [Candidate(f"r{r}c{i}", r, parent.id, "diagnose_and_mutate", why, g)
                for i, (g, why) in enumerate(diagnose_and_mutate(parent.genotype, diag, m_,
                                                                 s))]

    propose = propose or default
    lineage: list[Candidate] = []
    parent: Candidate | None = None
    parent_diag: dict[str, float] = {}
    for r, (x, y) in enumerate(rounds):
        if r == 0:
            pool = [Candidate(f"seed:{k}", 0, None, "seed", "preset", g)
                    for k, g in seeds.items()]
        else:
            again = dataclasses.replace(parent, id=f"r{r}p", round=r, parent=parent.id,
                                        operator="incumbent", rationale="the parent",
                                        finalist=False, winner=False)
            pool = [again, *propose(parent, parent_diag, m, r, seed + r)]
        lineage += pool
        logs: dict[str, Any] = {}
        provs: dict[str, MemoryProvider] = {}
        live = []
        for c in pool:
            if c.gate != "ok":
                continue
            provs[c.id] = make_provider(c)
            lg = evaluate(provs[c.id], x)
            logs[c.id] = lg
            c.acc, c.tokens, c.ops, c.wall_s = (float(lg.correct.mean()),
                                                float(lg.tokens.mean()),
                                                float(lg.ops.mean()), lg.wall_s)
            live.append(c)
        if not live:
            raise RuntimeError(f"evolve: round {r}: no candidate passed the gates")
        fin = select_finalists([c.acc for c in live], [c.tokens for c in live],
                               [c.ops for c in live], min(t, len(live)))
        best, best_key = None, None
        for i in fin:
            c = live[int(i)]
            c.finalist = True
            lg = evaluate(provs[c.id], y)
            c.final_acc = float(lg.correct.mean())
            total = (logs[c.id].correct.sum() + lg.correct.sum()) / (len(x) + len(y))
            key = (-total, c.tokens, int(i))
            if best_key is None or key < best_key:
                best, best_key = c, key
        best.winner = True
        parent, parent_diag = best, diagnose(logs[best.id])
        if on_round:
            on_round(r)
    return EvolveResult(parent, lineage)


def llm_proposer(chat, *, max_tokens: int = 400, timeout_s: float = 10.0):
    """A ``propose`` for :func:`evolve` on the paper's path: the LLM writes ``m``
    providers (:func:`llm_propose_provider`), each gated by :func:`check_provider_code`;
    a candidate that fails keeps its gate and reason in the lineage and is not run."""

    def propose(parent: Candidate, diag, m: int, r: int, seed: int) -> list[Candidate]:
        base = parent.genotype or Genotype()
        out = []
        for i in range(m):
            code = llm_propose_provider(chat, base, diag, max_tokens=max_tokens,
                                        seed=seed * 101 + i)
            c = Candidate(f"r{r}c{i}", r, parent.id, "llm", "LLM-written provider",
                          None, code)
            try:
                check_provider_code(code, timeout_s=timeout_s)
            except GateError as exc:
                c.gate, c.rationale = exc.gate, str(exc)
            out.append(c)
        return out

    return propose
