r"""Meta Context Engineering (MCE, ICML 2026): co-evolving context-engineering skills and
context artifacts in a bi-level loop.

The paper's loop, as this module implements it:

* the **meta level** writes a **skill** (how to engineer the context) by **agentic
  crossover**: a deliberative step over the history of skills, their executions and
  their evaluations;
* the **base level** executes the skill on **training rollouts** (the task model's
  answers on training cases under the best context so far) and writes **context files**
  and a ``get_context(x)`` interface; the interface is **validated** (it must be
  callable, return text for probe inputs, be deterministic and stay within the skill's
  token cap) and the base level gets **at most 3 attempts** (:func:`build_context`,
  the failures fed back);
* each iteration's context is evaluated on validation cases and on a training subset;
  an iteration whose training accuracy exceeds its validation accuracy by more than
  ``overfit_gap`` is flagged as **overfitted** and not selected; the **best previous
  iteration's context carries over** (:func:`run_mce` returns the best by validation
  accuracy, and rollouts for the next iteration are read under it).

Two implementations of the two levels share that loop:

* **Skills as declarative recipes executed programmatically** (quick configs): a
  :class:`Skill` names the context components (``instruction`` text, a per-class
  signature ``table`` learnt from training labels, ``rules`` distilled from the errors of
  the training rollouts, ``k`` nearest training ``examples``), their order and a token
  cap; :func:`execute_skill` is a **programmatic replacement** of the base-level agent
  and :func:`crossover` (uniform crossover of the top-2 skills by validation score, with
  a mutation when the child was already tried) a **programmatic replacement** of the
  meta-level agent. Artifacts made this way say ``source="recipe (programmatic)"``.
* **The paper's LLM path**: a backend-agnostic **file-tool agent** (:class:`Workspace`:
  list / read / write files in a temporary directory, run Python through
  :func:`jaxsci.common.agents.run_code`; :func:`file_agent` drives any
  :class:`~jaxsci.common.lm.chat.ChatModel` with a JSON action protocol over plain chat,
  so it needs no vendor SDK and no tool-call support). :func:`llm_meta_step` asks the
  model to write ``skill.md`` from the history; :func:`llm_base_step` asks it to write
  context files and ``get_context.py``; the gates run ``get_context`` **in the sandbox**
  (:func:`sandboxed_contexts`), never in-process.

The task model answers by **option scoring** over the condition names
(:func:`score_options`): in-process SmolLM2 reads the next-token log-probabilities of
each name's first token from one batched forward pass per 16 prompts (the names start
with distinct letters, so first tokens differ); a server scores each full name with
``chat.score``.

Baselines (:func:`no_context`, :func:`instruction_only` (GEPA-like: one short fixed
instruction, not optimised), :func:`additive_playbook` (ACE-like: one rule appended per
training error, never pruned), :func:`knn_fewshot` (fixed ``k`` nearest examples)).

>>> from jaxsci.data.diagnosis import make_task
>>> t = make_task(0, n_conditions=4, n_train=8, n_val=4, n_test=4)
>>> s = Skill(components=("instruction", "table"), table_findings=1)
>>> art = execute_skill(s, t.names, t.train, np.array([c.label for c in t.train]))
>>> art.source
'recipe (programmatic)'
>>> validate_get_context(art.get_context, [c.text for c in t.val], s.token_cap)
[]
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxsci.common.agents import run_code
from jaxsci.data.diagnosis import Case

__all__ = [
    "COMPONENTS",
    "INSTRUCTION",
    "MAX_ATTEMPTS",
    "SYSTEM",
    "ContextArtifact",
    "GateError",
    "Iteration",
    "MCEResult",
    "Skill",
    "SkillError",
    "Workspace",
    "accuracy",
    "additive_playbook",
    "build_context",
    "count_tokens",
    "crossover",
    "execute_skill",
    "file_agent",
    "instruction_only",
    "knn_fewshot",
    "llm_base_step",
    "llm_meta_step",
    "mutate",
    "no_context",
    "question_messages",
    "run_mce",
    "sandboxed_contexts",
    "score_options",
    "skill_from_dict",
    "validate_get_context",
]

COMPONENTS = ("instruction", "table", "rules", "examples")
MAX_ATTEMPTS = 3
SYSTEM = "You answer with the name of a condition."
INSTRUCTION = "Name the condition whose signature findings match the patient."


class SkillError(ValueError):
    """A malformed skill."""


class GateError(ValueError):
    """A context artifact failed the gates (``gate``: which one)."""

    def __init__(self, gate: str, message: str):
        super().__init__(f"gate {gate!r}: {message}")
        self.gate = gate


# --------------------------------------------------------------------------- tokens


_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Approximate tokens: words and punctuation marks (the same count for every method;
    a 135M model's BPE spends about 1.3 tokens per such unit on this task's text)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return len(_TOKEN.findall(text))


def _cap(lines: list[str], cap: int) -> str:
    out = []
    for ln in lines:
        if count_tokens("\n".join([*out, ln])) > cap:
            break
        out.append(ln)
    return "\n".join(out)


# --------------------------------------------------------------------------- skills


@dataclasses.dataclass(frozen=True)
class Skill:
    """A declarative context-engineering recipe (the quick configs' skill genotype).

    Attributes:
      components: which parts the context holds, in this order (each of
        :data:`COMPONENTS` at most once).
      table_findings: findings per condition in the signature table, 1 .. 3 (the most
        discriminative first: frequency in the condition's training cases minus the
        highest frequency in any other condition's).
      max_rules: rules distilled from the training rollouts' errors (most frequent
        confusions first), 0 .. 8.
      k: nearest training examples retrieved per input (word overlap), 0 .. 8.
      token_cap: the context's budget in :func:`count_tokens` units (lines that would
        exceed it are dropped), 8 .. 512.
    """

    components: tuple[str, ...] = ("instruction", "table")
    table_findings: int = 2
    max_rules: int = 2
    k: int = 2
    token_cap: int = 72

    def __post_init__(self):
        comps = self.components
        if isinstance(comps, str) or not isinstance(comps, tuple) or not comps:
            raise SkillError(f"components must be a non-empty tuple of {COMPONENTS}, got "
                             f"{comps!r}")
        bad = [c for c in comps if c not in COMPONENTS]
        if bad or len(set(comps)) != len(comps):
            raise SkillError(f"components must be distinct names among {COMPONENTS}, got "
                             f"{comps!r}")
        for name, lo, hi in (("table_findings", 1, 3), ("max_rules", 0, 8), ("k", 0, 8),
                             ("token_cap", 8, 512)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= hi:
                raise SkillError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "components": list(self.components)}

    def describe(self) -> str:
        parts = []
        for c in self.components:
            parts.append({"instruction": "instruction", "table": f"table({self.table_findings})",
                          "rules": f"rules({self.max_rules})",
                          "examples": f"{self.k}-NN"}[c])
        return " + ".join(parts) + f" <= {self.token_cap} tok"


def skill_from_dict(d: Mapping[str, Any]) -> Skill:
    """A :class:`Skill` from a dict or a JSON string (what a meta agent writes).

    Raises:
      SkillError: not a mapping, unknown keys, or invalid values.
    """
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except json.JSONDecodeError as e:
            raise SkillError(f"skill must be a JSON object, got unparsable text: {e}") from e
    if not isinstance(d, Mapping):
        raise SkillError(f"skill must be a mapping, got {type(d).__name__}")
    fields = {f.name for f in dataclasses.fields(Skill)}
    unknown = sorted(set(d) - fields)
    if unknown:
        raise SkillError(f"skill has unknown keys {unknown}; allowed: {sorted(fields)}")
    kw = dict(d)
    if "components" in kw:
        if isinstance(kw["components"], str) or not isinstance(kw["components"], Sequence):
            raise SkillError(f"components must be a list of {COMPONENTS}, got "
                             f"{kw['components']!r}")
        kw["components"] = tuple(kw["components"])
    return Skill(**kw)


def crossover(a: Skill, b: Skill, seed: int) -> Skill:
    """Uniform crossover of two skills: each field from ``a`` or ``b`` (seeded); the
    components come from one parent, and with probability 1/2 one component of the other
    parent that the child lacks is appended.

    Args:
      a, b: the parents (the top-2 by validation score in :func:`run_mce`).
      seed: int; the same seed gives the same child.

    Returns:
      the child :class:`Skill` (every field equals a parent's, components within the
      union of the parents').
    """
    for n, s in (("a", a), ("b", b)):
        if not isinstance(s, Skill):
            raise TypeError(f"{n} must be a Skill, got {type(s).__name__}")
    rng = np.random.default_rng(_seed(seed))
    pick = rng.random(5) < 0.5
    first, other = (a, b) if pick[0] else (b, a)
    comps = list(first.components)
    extra = [c for c in other.components if c not in comps]
    if extra and rng.random() < 0.5:
        comps.append(extra[int(rng.integers(len(extra)))])
    return Skill(tuple(comps),
                 *(getattr(a if p else b, f) for p, f in
                   zip(pick[1:], ("table_findings", "max_rules", "k", "token_cap"),
                       strict=True)))


def mutate(skill: Skill, seed: int) -> Skill:
    """One random change of a skill (a gene its components read stepped by one unit, the
    token cap by 16, or a component toggled), used when a crossover child was already
    tried."""
    if not isinstance(skill, Skill):
        raise TypeError(f"skill must be a Skill, got {type(skill).__name__}")
    rng = np.random.default_rng(_seed(seed))
    # only genes the skill's components read (a change elsewhere builds the same context)
    reads = {"table": "table_findings", "rules": "max_rules", "examples": "k"}
    genes = ["components", "token_cap", *(reads[c] for c in skill.components if c in reads)]
    for _ in range(16):
        f = genes[int(rng.integers(len(genes)))]
        d = skill.to_dict()
        if f == "components":
            c = COMPONENTS[int(rng.integers(len(COMPONENTS)))]
            comps = [x for x in skill.components if x != c] if c in skill.components \
                else [*skill.components, c]
            d["components"] = comps
        else:
            step = 16 if f == "token_cap" else 1
            d[f] = d[f] + step * (1 if rng.random() < 0.5 else -1)
        try:
            child = skill_from_dict(d)
        except SkillError:
            continue
        if child != skill:
            return child
    return skill


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return int(seed)


# --------------------------------------------------------------------------- artifacts


@dataclasses.dataclass(frozen=True)
class ContextArtifact:
    """Context files and the ``get_context(x)`` interface over them.

    Attributes:
      files: file name -> text.
      get_context: ``str -> str`` (for the LLM path, a call into the sandbox).
      source: ``"recipe (programmatic)"``, ``"baseline"`` or ``"llm"``.
      name: a label.
      contexts: optional batched ``list[str] -> list[str]`` (one sandbox run for many).
    """

    files: Mapping[str, str]
    get_context: Callable[[str], str]
    source: str
    name: str = ""
    contexts: Callable[[Sequence[str]], list[str]] | None = None

    def many(self, texts: Sequence[str]) -> list[str]:
        """The contexts of many inputs."""
        if self.contexts is not None:
            return list(self.contexts(list(texts)))
        return [self.get_context(t) for t in texts]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2}


def _knn(examples: Sequence[tuple[str, str]], x: str, k: int) -> list[tuple[str, str]]:
    """The ``k`` examples of highest word-overlap (Jaccard) with ``x``; an example whose
    text equals ``x`` is skipped (leave-one-out: no leak on the training inputs)."""
    if k == 0:
        return []
    wx = _words(x)
    sims = []
    for i, (t, _) in enumerate(examples):
        if t == x:
            continue
        w = _words(t)
        sims.append((-(len(wx & w) / max(1, len(wx | w))), i))
    sims.sort()
    return [examples[i] for _, i in sims[:k]]


def _check_cases(name: str, cases) -> tuple[Case, ...]:
    if isinstance(cases, Case) or not isinstance(cases, Sequence) or len(cases) == 0:
        raise ValueError(f"{name} must be a non-empty sequence of diagnosis Cases, got "
                         f"{type(cases).__name__} of length "
                         f"{len(cases) if isinstance(cases, Sequence) else 'n/a'}")
    for i, c in enumerate(cases):
        if not isinstance(c, Case):
            raise TypeError(f"{name}[{i}] must be a Case, got {type(c).__name__}")
    return tuple(cases)


def _check_names(names) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence) or len(names) < 2:
        raise ValueError(f"names must be a sequence of at least 2 condition names, got "
                         f"{names!r}")
    if len({n[:1] for n in names}) != len(names):
        raise ValueError(f"names must start with distinct letters (first-token scoring), "
                         f"got {list(names)}")
    return tuple(names)


def _table_lines(names, cases, m: int) -> list[str]:
    n = len(names)
    count = [Counter() for _ in range(n)]
    size = np.zeros(n)
    for c in cases:
        count[c.label].update(set(c.findings))
        size[c.label] += 1
    lines = []
    for y in range(n):
        if size[y] == 0:
            continue
        # discriminative against the nearest confuser: the class's frequency of a
        # finding minus its highest frequency in any other class
        lift = {f: count[y][f] / size[y] - max(count[j][f] / max(1.0, size[j])
                                               for j in range(n) if j != y)
                for f in count[y]}
        best = sorted(lift, key=lambda f: (-lift[f], f))[:m]
        # findings first, the name last: the format a small model copies from
        lines.append(f"{', '.join(best)} -> {names[y]}")
    return lines


def _rule_lines(names, cases, preds, max_rules: int) -> list[str]:
    errs = Counter()
    finds: dict[tuple[int, int], Counter] = {}
    for c, p in zip(cases, preds, strict=True):
        if int(p) >= 0 and int(p) != c.label:  # -1: not rolled out
            errs[(c.label, int(p))] += 1
            finds.setdefault((c.label, int(p)), Counter()).update(c.findings)
    pred_f = Counter()
    for c in cases:
        pred_f.update((c.label, f) for f in c.findings)
    lines = []
    for (y, p), _ in sorted(errs.items(), key=lambda kv: (-kv[1], kv[0]))[:max_rules]:
        # the finding of the missed cases most typical of the true class, least of the
        # one the model chose
        fs = finds[(y, p)]
        f = max(fs, key=lambda f: (pred_f[(y, f)] - pred_f[(p, f)], fs[f], f))
        lines.append(f"{f} -> {names[y]} (not {names[p]})")
    return lines


def execute_skill(skill: Skill, names: Sequence[str], train: Sequence[Case], preds,
                  ) -> ContextArtifact:
    """Execute a skill on training rollouts: a **programmatic replacement** of the
    base-level agent.

    Args:
      skill: the recipe.
      names: the condition names.
      train: training cases (labels known).
      preds: the task model's answers on ``train`` (the rollouts) under the best context
        so far, condition indices (``-1``: that case was not rolled out).

    Returns:
      :class:`ContextArtifact` with files ``skill.json``, ``instruction.md``,
      ``table.md``, ``rules.md``, ``examples.jsonl`` and ``get_context(x)``: the
      components in the skill's order, each input's ``k`` nearest examples, cut to the
      token cap.
    """
    if not isinstance(skill, Skill):
        raise TypeError(f"skill must be a Skill, got {type(skill).__name__}")
    names = _check_names(names)
    train = _check_cases("train", train)
    preds = np.asarray(preds)
    if preds.shape != (len(train),) or not np.issubdtype(preds.dtype, np.integer):
        raise ValueError(f"preds must be ints of shape ({len(train)},), got {preds.dtype} "
                         f"{preds.shape}")
    files = {"skill.json": json.dumps(skill.to_dict()),
             "instruction.md": INSTRUCTION,
             "table.md": "\n".join(_table_lines(names, train, skill.table_findings)),
             "rules.md": "\n".join(_rule_lines(names, train, preds, skill.max_rules)),
             "examples.jsonl": "\n".join(json.dumps({"text": c.text, "answer": names[c.label]})
                                         for c in train)}
    examples = [(c.text, names[c.label]) for c in train]

    def get_context(x: str) -> str:
        lines: list[str] = []
        for comp in skill.components:
            if comp == "instruction":
                lines.append(files["instruction.md"])
            elif comp == "table" and files["table.md"]:
                lines += files["table.md"].split("\n")
            elif comp == "rules" and files["rules.md"]:
                lines += files["rules.md"].split("\n")
            elif comp == "examples":
                lines += [f"{t} -> {a}" for t, a in _knn(examples, x, skill.k)]
        return _cap(lines, skill.token_cap)

    return ContextArtifact(files, get_context, "recipe (programmatic)", skill.describe())


# --------------------------------------------------------------------------- baselines


def no_context() -> ContextArtifact:
    """The empty context."""
    return ContextArtifact({}, lambda x: "", "baseline", "no context")


def instruction_only() -> ContextArtifact:
    """A short instruction only (GEPA-like, fixed: not optimised here)."""
    return ContextArtifact({"instruction.md": INSTRUCTION}, lambda x: INSTRUCTION,
                           "baseline", "instruction only (GEPA-like)")


def additive_playbook(names: Sequence[str], train: Sequence[Case], preds) -> ContextArtifact:
    """ACE-like additive playbook: the instruction, then one rule appended per training
    error (``"<findings> -> <answer>."``), never pruned nor capped.

    Args:
      names: condition names; train: training cases; preds: the rollouts' answers.
    """
    names = _check_names(names)
    train = _check_cases("train", train)
    preds = np.asarray(preds)
    if preds.shape != (len(train),):
        raise ValueError(f"preds must have shape ({len(train)},), got {preds.shape}")
    rules = [f"{', '.join(c.findings)} -> {names[c.label]}."
             for c, p in zip(train, preds, strict=True) if int(p) != c.label]
    text = "\n".join([INSTRUCTION, *rules])
    return ContextArtifact({"playbook.md": text}, lambda x: text, "baseline",
                           "additive playbook (ACE-like)")


def knn_fewshot(names: Sequence[str], train: Sequence[Case], k: int) -> ContextArtifact:
    """Fixed ``k``-NN few-shot: the ``k`` training cases nearest to the input (word
    overlap), with their answers."""
    names = _check_names(names)
    train = _check_cases("train", train)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    ex = [(c.text, names[c.label]) for c in train]
    return ContextArtifact({}, lambda x: "\n".join(f"{t} -> {a}" for t, a in _knn(ex, x, k)),
                           "baseline", f"{k}-NN few-shot")


# --------------------------------------------------------------------------- the task model


def question_messages(context: str, text: str, names: Sequence[str]) -> list[dict[str, str]]:
    """The chat the task model answers: the context as the system message (or
    :data:`SYSTEM` when empty), then the case and the options."""
    return [{"role": "system", "content": context or SYSTEM},
            {"role": "user", "content": f"{text}\nWhich condition? Options: "
                                        f"{', '.join(names)}."}]


def score_options(chat, contexts: Sequence[str], texts: Sequence[str], names: Sequence[str],
                  *, batch: int = 16) -> np.ndarray:
    """Option scoring of the condition names for many (context, case) pairs.

    In-process :class:`~jaxsci.common.lm.chat.LocalChat`: the log-probability of each
    name's **first token** after the assistant prompt, read from one forward pass per
    ``batch`` prompts (sorted by length); otherwise (a server) ``chat.score`` of each
    full name, one request per case.

    Returns:
      ``(len(texts), len(names))`` float64.
    """
    from jaxsci.common.lm.chat import LocalChat

    names = _check_names(names)
    if len(contexts) != len(texts) or len(texts) == 0:
        raise ValueError(f"contexts and texts must be non-empty and of one length, got "
                         f"{len(contexts)} and {len(texts)}")
    msgs = [question_messages(c, t, names) for c, t in zip(contexts, texts, strict=True)]
    if isinstance(chat, LocalChat):
        tok = chat.engine.tokenizer
        first = [tok.encode(n)[0] for n in names]
        if len(set(first)) == len(first):
            prompts = [chat.prompt(m) for m in msgs]
            lens = [len(tok.encode(p)) for p in prompts]
            order = np.argsort(lens, kind="stable")
            out = np.zeros((len(prompts), len(names)))
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                logits = np.asarray(chat.engine.next_token_logits([prompts[i] for i in idx]),
                                    np.float64)
                logits = logits - logits.max(-1, keepdims=True)
                logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
                out[idx] = logp[:, first]
            return out
    return np.stack([np.asarray(chat.score(m, list(names)), np.float64) for m in msgs])


def accuracy(scores, labels) -> float:
    """Share of rows whose highest score is the label (ties: the first)."""
    s, y = np.asarray(scores), np.asarray(labels)
    if s.ndim != 2 or y.shape != (s.shape[0],) or s.shape[0] == 0:
        raise ValueError(f"scores must be (n, options) and labels (n,), n >= 1; got "
                         f"{s.shape} and {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= s.shape[1]:
        raise ValueError(f"labels must be ints in [0, {s.shape[1]}), got {y[:6].tolist()}")
    return float(np.mean(np.argmax(s, -1) == y))


# --------------------------------------------------------------------------- gates


def validate_get_context(get_context, probes: Sequence[str], token_cap: int) -> list[str]:
    """The gates of a ``get_context`` interface on probe inputs.

    Checks: callable; returns a ``str`` for every probe without raising; deterministic
    (a second call agrees); at most ``token_cap`` :func:`count_tokens` units.

    Returns:
      the problems found (empty: it passes).
    """
    if not callable(get_context):
        return [f"get_context is not callable ({type(get_context).__name__})"]
    if isinstance(probes, str) or not probes:
        raise ValueError("probes must be a non-empty sequence of str")
    problems = []
    for p in probes:
        try:
            a, b = get_context(p), get_context(p)
        except Exception as e:  # noqa: BLE001 -- generated code may raise anything
            problems.append(f"get_context raised {type(e).__name__}: {e}"[:200])
            break
        if not isinstance(a, str):
            problems.append(f"get_context returned {type(a).__name__}, expected str")
            break
        if a != b:
            problems.append("get_context is not deterministic (two calls differ)")
            break
        if count_tokens(a) > token_cap:
            problems.append(f"context has {count_tokens(a)} tokens > cap {token_cap}")
            break
    return problems


def build_context(make: Callable[[int, str], ContextArtifact], probes: Sequence[str],
                  token_cap: int, *, attempts: int = MAX_ATTEMPTS
                  ) -> tuple[ContextArtifact | None, list[str]]:
    """Build and validate a context, at most ``attempts`` (the paper: 3) times.

    Args:
      make: ``(attempt, feedback) -> ContextArtifact``; ``feedback`` is the previous
        attempt's problems (``""`` at first). An exception counts as a failed attempt.
      probes: inputs the gates call ``get_context`` on.
      token_cap: the cap the gates enforce.
      attempts: 1 .. 3.

    Returns:
      ``(artifact or None, log)``: the first artifact that passes (``None`` if none did)
      and one line per attempt (``"ok"`` or its problems).
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or \
            not 1 <= attempts <= MAX_ATTEMPTS:
        raise ValueError(f"attempts must be an int in [1, {MAX_ATTEMPTS}], got {attempts!r}")
    log: list[str] = []
    feedback = ""
    for a in range(attempts):
        try:
            art = make(a, feedback)
        except Exception as e:  # noqa: BLE001 -- an agent's failure is an attempt's failure
            problems = [f"building failed: {type(e).__name__}: {e}"[:300]]
        else:
            get = art.get_context if isinstance(art, ContextArtifact) else None
            problems = validate_get_context(get, probes, token_cap)
            if not problems:
                log.append("ok")
                return art, log
        feedback = "; ".join(problems)
        log.append(feedback)
    return None, log


# --------------------------------------------------------------------------- the loop


class Iteration(NamedTuple):
    """One iteration of the bi-level loop."""

    skill: Any  # a Skill, or the LLM's skill text
    name: str
    val_acc: float
    train_acc: float
    overfit: bool
    tokens: float  # mean context tokens on the validation inputs
    attempts: list[str]
    passed: bool


class MCEResult(NamedTuple):
    """What :func:`run_mce` returns: the best artifact (carried over), its index in
    ``history``, and every iteration."""

    best: ContextArtifact
    best_index: int
    history: list[Iteration]


def _propose_crossover(history: list[Iteration], seed: int) -> Skill:
    ok = [h for h in history if h.passed and isinstance(h.skill, Skill)]
    if len(ok) < 2:
        raise ValueError("crossover needs at least two evaluated skills in the history")
    ranked = sorted(ok, key=lambda h: (h.overfit, -h.val_acc, h.tokens))
    child = crossover(ranked[0].skill, ranked[1].skill, seed)
    # two skills that build the same contexts (fields a component does not read may
    # differ) count as one: compare what they describe
    tried = {h.name for h in history}
    for j in range(8):
        if child.describe() not in tried:
            break
        child = mutate(child, seed * 31 + j)
    return child


def run_mce(evaluate: Callable[[ContextArtifact, Sequence[Case]], np.ndarray],
            names: Sequence[str], train: Sequence[Case], val: Sequence[Case],
            seeds: Sequence[Skill], iterations: int, *, seed: int = 0,
            rollouts=None, train_eval: int = 8, overfit_gap: float = 0.25,
            propose: Callable[[list[Iteration], int], Skill] | None = None,
            execute: Callable[..., ContextArtifact] | None = None,
            attempts: int = MAX_ATTEMPTS, on_iteration=None) -> MCEResult:
    """The bi-level loop.

    Args:
      evaluate: ``(artifact, cases) -> predicted condition indices`` (the task model).
        :func:`run_mce` evaluates the validation cases and the first ``train_eval``
        training cases in one call.
      names, train, val: the task.
      seeds: the initial skills (evaluated first; at least 2 for crossover).
      iterations: meta-level proposals after the seeds.
      seed: int; the crossover's randomness.
      rollouts: the task model's answers on ``train`` under the starting context
        (default: all correct, i.e. no errors to learn from).
      train_eval: training cases evaluated per iteration (the overfitting check; their
        answers under the best context are the next rollouts).
      overfit_gap: an iteration with ``train_acc - val_acc > overfit_gap`` is flagged and
        never selected.
      propose: the meta level, ``(history, seed) -> Skill``; default: crossover of the
        top-2 skills by validation score (a programmatic replacement of the agent).
      execute: the base level, ``(skill, names, train, rollouts, attempt, feedback) ->
        ContextArtifact``; default: :func:`execute_skill` (programmatic).
      attempts: get_context attempts per iteration (at most 3).
      on_iteration: called with each :class:`Iteration`.

    Returns:
      :class:`MCEResult`; ``best`` is the best previous iteration's context (carried over
      when a later iteration is worse, overfitted or fails its gates).
    """
    names = _check_names(names)
    train = _check_cases("train", train)
    val = _check_cases("val", val)
    if isinstance(seeds, Skill) or not seeds:
        raise ValueError("seeds must be a non-empty sequence of Skill")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    if iterations and len(seeds) < 2 and propose is None:
        raise ValueError("crossover needs at least 2 seed skills")
    te = int(min(max(1, train_eval), len(train)))
    roll = np.array([c.label for c in train]) if rollouts is None else np.asarray(rollouts)
    if roll.shape != (len(train),):
        raise ValueError(f"rollouts must have shape ({len(train)},), got {roll.shape}")
    roll = roll.astype(np.int64).copy()
    propose = propose or _propose_crossover
    execute = execute or (lambda s, n, tr, r, a, fb: execute_skill(s, n, tr, r))
    probes = [c.text for c in val[:4]]
    history: list[Iteration] = []
    best, best_i, best_val = None, -1, -np.inf
    for it in range(len(seeds) + iterations):
        skill = seeds[it] if it < len(seeds) else propose(history, _seed(seed) * 1000 + it)
        cap = skill.token_cap if isinstance(skill, Skill) else 512
        art, log = build_context(
            lambda a, fb, skill=skill: execute(skill, names, train, roll, a, fb),
            probes, cap, attempts=attempts)
        if art is None:
            rec = Iteration(skill, getattr(skill, "describe", lambda: "llm skill")(),
                            float("nan"), float("nan"), False, float("nan"), log, False)
        else:
            cases = (*val, *train[:te])
            pred = np.asarray(evaluate(art, cases))
            ys = np.array([c.label for c in cases])
            v = float(np.mean(pred[:len(val)] == ys[:len(val)]))
            tr = float(np.mean(pred[len(val):] == ys[len(val):]))
            toks = float(np.mean([count_tokens(x) for x in art.many([c.text for c in val])]))
            over = bool(tr - v > overfit_gap)
            rec = Iteration(skill, art.name, v, tr, over, toks, log, True)
            if not over and v > best_val:
                best, best_i, best_val = art, it, v
                # the next rollouts are read under the best context (carry-over)
                roll[:te] = pred[len(val):]
        history.append(rec)
        if on_iteration is not None:
            on_iteration(rec)
    if best is None:
        raise GateError("loop", "no iteration produced a valid, non-overfitted context; "
                        + " | ".join("; ".join(h.attempts) for h in history)[:400])
    return MCEResult(best, best_i, history)


# --------------------------------------------------------------------------- the LLM path


class Workspace:
    """A file-tool workspace: a temporary directory the agent lists, reads and writes,
    and Python it runs in the sandbox (:func:`jaxsci.common.agents.run_code`, with the
    workspace's files copied in).

    Args:
      root: an existing directory (default: a fresh temporary one).
    """

    def __init__(self, root: str | os.PathLike | None = None):
        self._tmp = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="jaxsci-mce-")
            root = self._tmp.name
        self.root = Path(root)
        if not self.root.is_dir():
            raise ValueError(f"root must be an existing directory, got {str(root)!r}")

    def _path(self, name: str) -> Path:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name) \
                or name.startswith("."):
            raise ValueError(f"file name must be a plain name (letters, digits, _ . -), got "
                             f"{name!r}")
        return self.root / name

    def list_files(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_file())

    def read_file(self, name: str) -> str:
        p = self._path(name)
        if not p.is_file():
            raise FileNotFoundError(f"no file {name!r} in the workspace")
        return p.read_text(encoding="utf-8")[:4000]

    def write_file(self, name: str, text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self._path(name).write_text(text[:20000], encoding="utf-8")
        return f"wrote {name} ({len(text)} chars)"

    def files(self) -> dict[str, str]:
        return {n: (self.root / n).read_text(encoding="utf-8") for n in self.list_files()}

    def run_python(self, code: str, *, timeout_s: float = 10.0) -> str:
        files = self.files()
        prelude = ("import json as _j, os as _o\n"
                   f"for _n, _t in _j.loads({json.dumps(json.dumps(files))}).items():\n"
                   "    open(_n, 'w').write(_t)\n")
        r = run_code(prelude + code, timeout_s=timeout_s, cpu_s=timeout_s)
        return f"status={r.status}\nstdout:\n{r.stdout[-1500:]}\nstderr:\n{r.stderr[-1500:]}"

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()


_ACTION = re.compile(r"\{.*\}", re.DOTALL)
TOOLS_HELP = ('Reply with one JSON object per turn: {"tool": "list_files"} | {"tool": '
              '"read_file", "name": N} | {"tool": "write_file", "name": N, "text": T} | '
              '{"tool": "run_python", "code": C} | {"tool": "finish"}.')


def file_agent(chat, task: str, ws: Workspace, *, max_steps: int = 4, max_tokens: int = 200,
               seed: int = 0) -> list[dict[str, Any]]:
    """A backend-agnostic file-tool agent: the model acts by JSON replies over plain chat.

    Args:
      chat: any :class:`~jaxsci.common.lm.chat.ChatModel`.
      task: what to do (the skill, the history, the feedback).
      ws: the :class:`Workspace`.
      max_steps: model turns.
      max_tokens, seed: per reply.

    Returns:
      the transcript: one ``{"reply", "action", "result"}`` per step (a reply that is no
      valid action gets ``action=None`` and the parse error as its result).
    """
    msgs = [{"role": "system", "content": "You are a context engineer. " + TOOLS_HELP},
            {"role": "user", "content": task}]
    out = []
    for step in range(max_steps):
        reply = chat.chat(msgs, temperature=0.0, max_tokens=max_tokens,
                          seed=seed + step)[0].content or ""
        action, result = None, ""
        try:
            m = _ACTION.search(reply)
            if m is None:
                raise ValueError("no JSON object in the reply")
            action = json.loads(m.group(0))
            if not isinstance(action, dict):
                raise ValueError("the action must be a JSON object")
            tool = action.get("tool")
            if tool == "list_files":
                result = ", ".join(ws.list_files()) or "(no files)"
            elif tool == "read_file":
                result = ws.read_file(str(action.get("name")))
            elif tool == "write_file":
                result = ws.write_file(str(action.get("name")), str(action.get("text", "")))
            elif tool == "run_python":
                result = ws.run_python(str(action.get("code", "")))
            elif tool == "finish":
                out.append({"reply": reply, "action": action, "result": "finished"})
                break
            else:
                raise ValueError(f"unknown tool {tool!r}")
        except Exception as e:  # noqa: BLE001 -- the model's malformed actions are reported
            result = f"error: {type(e).__name__}: {e}"[:300]
        out.append({"reply": reply, "action": action, "result": result})
        msgs += [{"role": "assistant", "content": reply},
                 {"role": "user", "content": f"Result: {result}"[:1500]}]
    return out


def sandboxed_contexts(files: Mapping[str, str], texts: Sequence[str], *,
                       timeout_s: float = 10.0) -> list[str]:
    """Run the workspace's ``get_context.py`` in the sandbox on ``texts``.

    Raises:
      GateError: no ``get_context.py`` (gate ``"file"``), or it fails to import or run, or
        returns no list of str (gate ``"sandbox"``).
    """
    if "get_context.py" not in files:
        raise GateError("file", "the agent wrote no get_context.py")
    code = ("import json, sys\n"
            f"files = json.loads({json.dumps(json.dumps(dict(files)))})\n"
            "for n, t in files.items():\n    open(n, 'w').write(t)\n"
            "sys.path.insert(0, '.')\n"
            "from get_context import get_context\n"
            f"xs = json.loads({json.dumps(json.dumps(list(texts)))})\n"
            "print('@@' + json.dumps([get_context(x) for x in xs]))\n")
    r = run_code(code, timeout_s=timeout_s, cpu_s=timeout_s)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
    if r.status != "ok" or not line:
        raise GateError("sandbox", f"get_context.py failed in the sandbox ({r.status}): "
                        f"{r.stderr.strip()[-300:]}")
    out = json.loads(line[-1][2:])
    if not isinstance(out, list) or len(out) != len(texts) or \
            not all(isinstance(x, str) for x in out):
        raise GateError("sandbox", "get_context did not return one str per input")
    return out


def llm_meta_step(chat, history: Sequence[Iteration], *, max_steps: int = 3,
                  max_tokens: int = 200, seed: int = 0) -> str:
    """The paper's meta level: the model writes ``skill.md`` by agentic crossover over the
    history (skills, executions, evaluations). Returns the skill text (``""`` if the
    model wrote none: the caller's loop records that)."""
    lines = [f"- skill: {h.name}; val acc {h.val_acc:.2f}, train acc {h.train_acc:.2f}, "
             f"{h.tokens:.0f} tokens, attempts: {'; '.join(h.attempts)[:120]}"
             for h in history]
    task = ("Write skill.md: instructions for building a context that helps a small model "
            "diagnose invented conditions. Combine what worked in these past skills:\n"
            + "\n".join(lines or ["(none yet)"]))
    ws = Workspace()
    try:
        file_agent(chat, task, ws, max_steps=max_steps, max_tokens=max_tokens, seed=seed)
        files = ws.files()
    finally:
        ws.close()
    return files.get("skill.md", "")


def llm_base_step(chat, skill_text: str, names: Sequence[str], train: Sequence[Case],
                  rollouts, attempt: int, feedback: str, *, max_steps: int = 4,
                  max_tokens: int = 240, token_cap: int = 512) -> ContextArtifact:
    """The paper's base level: the model executes the skill on training rollouts, writing
    context files and ``get_context.py`` (``def get_context(x: str) -> str``).

    The rollouts are given as ``rollouts.jsonl`` in the workspace. The returned
    artifact's ``get_context`` runs the code in the sandbox (:func:`sandboxed_contexts`).

    Raises:
      GateError: the agent wrote no ``get_context.py`` or it fails in the sandbox.
    """
    names = _check_names(names)
    train = _check_cases("train", train)
    ws = Workspace()
    try:
        ws.write_file("rollouts.jsonl", "\n".join(json.dumps(
            {"text": c.text, "answer": names[c.label], "model": names[int(p)]})
            for c, p in zip(train, np.asarray(rollouts), strict=True)))
        ws.write_file("skill.md", skill_text or "(empty skill)")
        task = (f"Execute skill.md on rollouts.jsonl (attempt {attempt + 1} of "
                f"{MAX_ATTEMPTS}). Write context files and get_context.py defining "
                f"get_context(x) -> str, at most {token_cap} words. Conditions: "
                f"{', '.join(names)}." + (f" Last attempt failed: {feedback}" if feedback
                                          else ""))
        file_agent(chat, task, ws, max_steps=max_steps, max_tokens=max_tokens,
                   seed=attempt)
        files = ws.files()
    finally:
        ws.close()
    files.pop("rollouts.jsonl", None)
    sandboxed_contexts(files, [train[0].text])  # fails fast with the gate named

    def many(texts):
        return sandboxed_contexts(files, texts)

    return ContextArtifact(files, lambda x: many([x])[0], "llm", "llm context", many)
