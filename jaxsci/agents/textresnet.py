r"""TextResNet (ICML 2026): decoupled textual gradients for deep chains of LLM nodes.

A chain of nodes, each with a text parameter (an instruction), is optimised from a
textual loss (:mod:`jaxsci.data.relay`'s checker feedback). The paper's four pieces, as
this module implements them:

* **Additive semantic deltas** (:func:`forward`, ``residual=True``): each node emits a
  delta that is *appended* to the running state (the identity highway), so the final
  output is the concatenation of the deltas and each delta stays attributable. The
  TextGrad forward (``residual=False``) lets each node rewrite the whole state, so every
  node's output holds the content of all nodes before it (semantic entanglement).
* **Semantic gradient decomposition** (:func:`project`): the loss feedback is split into
  its components (the checker's sentences) and a **projector** scores, for each
  component, which delta introduced its content. Backends: ``"llm"`` (option scoring
  of the step letters by the chat model, one prompt per component listing the deltas)
  and ``"minilm"`` (cosine of all-MiniLM-L6-v2 embeddings of the component and each
  delta: a **CPU adaptation**, not the paper's projector).
* **Causal routing** (:func:`route`): each component goes to the node its projection
  picks; components no delta introduced (a missing kind) are global and join the
  feedback of every routed node.
* **Density-aware scheduling** (:func:`schedule`): the nodes are ranked by the density
  of routed feedback (components per node, ties by the projector's confidence) and at
  most ``budget`` of them are updated per step.

Baselines (:func:`textgrad_backward`): **TextGrad**, backpropagation node by node from
the last: node ``i``'s backward prompt holds its instruction, its input and output
states and the critique of its output; the critique of its input is a rewrite of that
critique (so it grows with depth), and the node's blame is the model's option score of
"yes" vs "no" to "is this step's instruction the cause?". **TextGrad-summary**: the
critique is summarised to at most ``summary_tokens`` before each hop.

LLM steps and their programmatic replacements (named so in code, metrics and docs):

* node execution: :func:`programmatic_node` (the node emits one catalogue item of the
  kind its instruction names; a **programmatic replacement** of the node's LLM call, the
  same for every method);
* critique rewriting (TextGrad): :func:`rewrite_critique` (**programmatic**) or
  :func:`llm_rewrite_critique` (the paper's path: the model writes it);
* parameter update: :func:`choose_instruction` (quick: **option scoring** over a library
  of candidate instructions, the kinds the node's feedback names: a programmatic
  proposal of the candidates) or :func:`llm_rewrite_instruction`
  (the paper's path: the model rewrites the node's parameter through the chat interface).

Backward prompt tokens are counted with :func:`count_tokens` (words and punctuation
marks; the same count for every method).

>>> from jaxsci.data.relay import make_chain, check
>>> c = make_chain(0, depth=4, faults=1)
>>> deltas = forward(c.instructions, seed=0)
>>> loss, comps = check(c.spec, deltas)
>>> loss
2
>>> schedule([[0], [], [0, 0], []], budget=1)
[2]
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxsci.data.relay import CATALOGUE, KINDS, instruction, item_for

__all__ = ["LETTERS", "Backward", "candidate_kinds", "choose_instruction", "count_tokens",
           "forward", "kind_from_instruction", "llm_rewrite_critique",
           "llm_rewrite_instruction", "parse_instruction", "programmatic_node", "project",
           "projector_prompt", "rewrite_critique", "route", "schedule", "score_options",
           "states", "summarise", "textgrad_backward", "textgrad_prompt",
           "textresnet_backward", "update_messages"]

LETTERS = string.ascii_uppercase[:20]
_TOKEN = re.compile(r"\w+|[^\w\s]")
_KIND = re.compile(r"add one ([a-z]+)", re.I)


class Backward(NamedTuple):
    """One backward pass over one chain: ``blame`` (``(depth,)`` scores, higher = more to
    blame), ``routed`` (per node, the feedback component indices routed to it),
    ``prompts`` (every backward prompt the method sends) and ``tokens`` (their
    :func:`count_tokens` total)."""

    blame: np.ndarray
    routed: list[list[int]]
    prompts: list[str]
    tokens: int


def count_tokens(text: str) -> int:
    """Words and punctuation marks in ``text`` (the backward-token count of every method)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return len(_TOKEN.findall(text))


def _check_instructions(instructions) -> tuple[str, ...]:
    if isinstance(instructions, str) or not isinstance(instructions, Sequence) or \
            not 1 <= len(instructions) <= len(LETTERS) or \
            not all(isinstance(x, str) for x in instructions):
        raise ValueError(f"instructions must be a sequence of 1 .. {len(LETTERS)} str, got "
                         f"{instructions!r}"[:200])
    return tuple(instructions)


def kind_from_instruction(text: str) -> str | None:
    """The catalogue kind an instruction asks for (``None`` if it names none)."""
    m = _KIND.search(text)
    k = m.group(1).lower() if m else None
    return k if k in CATALOGUE else None


def programmatic_node(instruction_text: str, seed: int) -> str:
    """**Programmatic replacement** of a node's LLM call: the delta is one item of the
    kind the instruction names (``""`` when it names none)."""
    k = kind_from_instruction(instruction_text)
    return item_for(k, seed) if k else ""


def forward(instructions: Sequence[str], seed: int = 0) -> list[str]:
    """The additive forward pass: each node's delta (the final output is their
    concatenation; the deltas are what the projector reads)."""
    instr = _check_instructions(instructions)
    return [programmatic_node(x, seed + i) for i, x in enumerate(instr)]


def states(deltas: Sequence[str]) -> list[str]:
    """The TextGrad (entangled) states: node ``i`` rewrites the whole state, so its output
    lists the items of nodes ``0 .. i``; ``states[0]`` is the empty input."""
    out, acc = ["(empty)"], []
    for d in deltas:
        if d:
            acc.append(d)
        out.append("Items so far: " + (", ".join(acc) if acc else "none") + ".")
    return out


# --------------------------------------------------------------------- option scoring


def score_options(chat, messages: Sequence[Sequence[dict]], options: Sequence[str], *,
                  batch: int = 16) -> np.ndarray:
    """Log-probabilities of ``options`` as the reply to each conversation.

    In-process :class:`~jaxsci.common.lm.chat.LocalChat` with options of distinct first
    tokens: each option's first token, read from one forward pass per ``batch`` prompts
    (sorted by length). Otherwise (a server, or colliding first
    tokens): ``chat.score`` of each full option, one request per conversation.

    Returns:
      ``(len(messages), len(options))`` float64.
    """
    from jaxsci.common.lm.chat import LocalChat

    if not options or not all(isinstance(o, str) and o for o in options):
        raise ValueError(f"options must be non-empty str, got {options!r}"[:200])
    if len(messages) == 0:
        return np.zeros((0, len(options)))
    if isinstance(chat, LocalChat):
        tok = chat.engine.tokenizer
        first = [tok.encode(o)[0] for o in options]
        if len(set(first)) == len(first):
            prompts = [chat.prompt(m) for m in messages]
            order = np.argsort([len(p) for p in prompts], kind="stable")
            out = np.zeros((len(prompts), len(options)))
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                lg = np.asarray(chat.engine.next_token_logits([prompts[i] for i in idx]),
                                np.float64)
                lg = lg - lg.max(-1, keepdims=True)
                out[idx] = (lg - np.log(np.exp(lg).sum(-1, keepdims=True)))[:, first]
            return out
    return np.stack([np.asarray(chat.score(m, list(options)), np.float64) for m in messages])


# --------------------------------------------------------------------- TextResNet


def projector_prompt(deltas: Sequence[str], component: str) -> str:
    """The projector's prompt: the lettered deltas and one feedback component."""
    lines = [f"{LETTERS[i]}: {d or '(nothing)'}" for i, d in enumerate(deltas)]
    return ("Each step added one item:\n" + "\n".join(lines) + f"\nFeedback: {component}\n"
            "Which step added the item the feedback is about? Answer with its letter.")


def _attributable(component: str) -> bool:
    return component.startswith("'")


def project(deltas_per_chain: Sequence[Sequence[str]],
            components_per_chain: Sequence[Sequence[str]], *, backend: str = "llm",
            chat=None, embedder=None) -> list[np.ndarray]:
    """Semantic gradient decomposition: for each chain, a ``(components, depth)`` matrix of
    projector scores (log-probabilities for ``"llm"``, cosines for ``"minilm"``); rows of
    components that no delta introduced (missing kinds) are ``-inf``.

    All chains' prompts go through one :func:`score_options` call.
    """
    if backend not in ("llm", "minilm"):
        raise ValueError(f"backend must be 'llm' or 'minilm', got {backend!r}")
    if len(deltas_per_chain) != len(components_per_chain):
        raise ValueError(f"deltas_per_chain and components_per_chain must have one length, "
                         f"got {len(deltas_per_chain)} and {len(components_per_chain)}")
    if backend == "llm" and chat is None:
        raise ValueError("backend='llm' needs chat")
    if backend == "minilm" and embedder is None:
        raise ValueError("backend='minilm' needs embedder (jaxsci.common.lm.minilm.MiniLM)")
    jobs = [(c, j) for c, comps in enumerate(components_per_chain)
            for j, x in enumerate(comps) if _attributable(x)]
    out = [np.full((len(comps), len(d)), -np.inf)
           for d, comps in zip(deltas_per_chain, components_per_chain, strict=True)]
    if not jobs:
        return out
    if backend == "llm":
        by_depth: dict[int, list[tuple[int, int]]] = {}
        for c, j in jobs:
            by_depth.setdefault(len(deltas_per_chain[c]), []).append((c, j))
        for depth, js in by_depth.items():
            msgs = [[{"role": "user", "content": projector_prompt(
                deltas_per_chain[c], components_per_chain[c][j])}] for c, j in js]
            s = score_options(chat, msgs, list(LETTERS[:depth]))
            for (c, j), row in zip(js, s, strict=True):
                out[c][j] = row
    else:
        texts = sorted({components_per_chain[c][j] for c, j in jobs} |
                       {d or "(nothing)" for ds in deltas_per_chain for d in ds})
        emb = np.asarray(embedder.embed(texts), np.float64)
        emb /= np.linalg.norm(emb, axis=-1, keepdims=True) + 1e-12
        at = {t: i for i, t in enumerate(texts)}
        for c, j in jobs:
            e = emb[at[components_per_chain[c][j]]]
            out[c][j] = np.array([emb[at[d or "(nothing)"]] @ e for d in deltas_per_chain[c]])
    return out


def route(projection: np.ndarray) -> list[list[int]]:
    """Causal routing: each attributable component (a finite row) goes to its
    highest-scoring node. Returns, per node, the routed component indices."""
    p = np.asarray(projection, float)
    if p.ndim != 2:
        raise ValueError(f"projection must be (components, depth), got shape {p.shape}")
    routed: list[list[int]] = [[] for _ in range(p.shape[1])]
    for j, row in enumerate(p):
        if np.all(np.isfinite(row)):
            routed[int(np.argmax(row))].append(j)
    return routed


def schedule(routed: Sequence[Sequence[int]], budget: int, confidence=None) -> list[int]:
    """Density-aware scheduling: nodes with routed feedback, the densest first (ties: the
    higher ``confidence``, then the lower index), at most ``budget`` of them."""
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")
    conf = np.zeros(len(routed)) if confidence is None else np.asarray(confidence, float)
    if conf.shape != (len(routed),):
        raise ValueError(f"confidence must have shape ({len(routed)},), got {conf.shape}")
    nodes = [i for i, r in enumerate(routed) if len(r)]
    nodes.sort(key=lambda i: (-len(routed[i]), -conf[i], i))
    return nodes[:budget]


def textresnet_backward(deltas: Sequence[str], components: Sequence[str],
                        projection: np.ndarray) -> Backward:
    """TextResNet's backward pass of one chain from its projection: blame = the density
    of routed components plus the best projector score (a tie-break below 1)."""
    routed = route(projection)
    p = np.asarray(projection, float)
    fin = p[np.all(np.isfinite(p), -1)] if p.size else p
    conf = fin.max(0) if len(fin) else np.zeros(len(deltas))
    conf = (conf - conf.min()) / (conf.max() - conf.min() + 1e-12) * 0.5
    blame = np.array([len(r) for r in routed], float) + conf
    prompts = [projector_prompt(deltas, x) for x in components if _attributable(x)]
    return Backward(blame, routed, prompts, sum(count_tokens(x) for x in prompts))


# --------------------------------------------------------------------- TextGrad


def rewrite_critique(critique: str, instruction_text: str, step: int) -> str:
    """**Programmatic replacement** of TextGrad's LLM critique of a node's input: the
    output's critique, restated through the node (it grows by one clause per hop)."""
    return (f"{critique} Step {LETTERS[step]} ('{instruction_text}') received an input "
            "that may have caused this.")


def summarise(critique: str, summary_tokens: int) -> str:
    """TextGrad-summary's summarisation: the first ``summary_tokens`` words."""
    words = critique.split()
    return " ".join(words[:summary_tokens])


def textgrad_prompt(instruction_text: str, x_in: str, x_out: str, critique: str) -> str:
    """Node's backward prompt in TextGrad (instruction, input, output, critique)."""
    return (f"Step instruction: {instruction_text}\nInput: {x_in}\nOutput: {x_out}\n"
            f"Feedback on the output: {critique}\n"
            "Is this step's instruction the cause of the feedback? Answer yes or no.")


def textgrad_backward(chat, instructions_per_chain, deltas_per_chain, components_per_chain, *,
                      summary_tokens: int | None = None, critic=None) -> list[Backward]:
    """TextGrad's backward passes (one per chain), node by node from the last.

    Args:
      chat: the model that scores each node's blame (``"yes"`` minus ``"no"``).
      summary_tokens: ``None`` (TextGrad) or the summary length (TextGrad-summary).
      critic: ``critic(critique, instruction, step) -> str`` writes the critique of a
        node's input (default :func:`rewrite_critique`, programmatic; pass
        ``lambda c, i, s: llm_rewrite_critique(chat, c, i)`` for the LLM path).
    """
    critic = critic or rewrite_critique
    if summary_tokens is not None and (not isinstance(summary_tokens, int) or
                                       summary_tokens < 1):
        raise ValueError(f"summary_tokens must be None or an int >= 1, got {summary_tokens!r}")
    all_prompts = []
    for instr, deltas, comps in zip(instructions_per_chain, deltas_per_chain,
                                    components_per_chain, strict=True):
        st = states(deltas)
        crit = " ".join(comps)
        ps = [""] * len(instr)
        for i in reversed(range(len(instr))):
            if summary_tokens is not None:
                crit = summarise(crit, summary_tokens)
            ps[i] = textgrad_prompt(instr[i], st[i], st[i + 1], crit)
            crit = critic(crit, instr[i], i)
        all_prompts.append(ps)
    flat = [[{"role": "user", "content": p}] for ps in all_prompts for p in ps]
    s = score_options(chat, flat, ["yes", "no"]) if flat else np.zeros((0, 2))
    out, k = [], 0
    for ps in all_prompts:
        blame = s[k:k + len(ps), 0] - s[k:k + len(ps), 1]
        k += len(ps)
        out.append(Backward(blame, [[] for _ in ps], ps, sum(count_tokens(p) for p in ps)))
    return out


# --------------------------------------------------------------------- updates


def update_messages(instruction_text: str, feedback: Sequence[str]) -> list[dict]:
    """The update prompt of one node: its parameter and its routed feedback."""
    return [{"role": "user", "content":
             f"A step's instruction is: {instruction_text}\nFeedback on the chain: "
             f"{' '.join(feedback)}\nWhich kind of item should this step add instead? "
             "Answer with one kind."}]


def candidate_kinds(instruction_text: str, feedback: Sequence[str]) -> list[str]:
    """The candidate library of one node (a **programmatic proposal**): the catalogue
    kinds named in its feedback, other than the kind it asks for now (all other kinds
    when the feedback names none)."""
    cur = kind_from_instruction(instruction_text)
    named = [k for k in KINDS if any(re.search(rf"\b{k}\b", f) for f in feedback)]
    named = [k for k in named if k != cur]
    return named or [k for k in KINDS if k != cur]


def choose_instruction(chat, jobs: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Quick-config update: **option scoring** over the node's candidate instructions
    (:func:`candidate_kinds`), not an LLM rewrite. Scores all jobs' kinds in one
    :func:`score_options` call (per-job candidates read from the shared row)."""
    if not jobs:
        return []
    s = score_options(chat, [update_messages(i, f) for i, f in jobs], list(KINDS))
    out = []
    for (instr, fb), row in zip(jobs, s, strict=True):
        cands = candidate_kinds(instr, fb)
        out.append(instruction(max(cands, key=lambda k: row[KINDS.index(k)])))
    return out


def parse_instruction(text: str) -> str | None:
    """The instruction in a model's rewrite: ``"Add one <kind>."`` if a catalogue kind is
    named (after "add one", else anywhere), else ``None``."""
    k = kind_from_instruction(text)
    if k is None:
        words = re.findall(r"[a-z]+", text.lower())
        k = next((w for w in words if w in CATALOGUE), None)
    return instruction(k) if k else None


def llm_rewrite_instruction(chat, instruction_text: str, feedback: Sequence[str], *,
                            max_tokens: int = 24) -> tuple[str, str]:
    """The paper's update: the model rewrites the node's parameter through the chat
    interface. Returns ``(new_instruction, raw_reply)``; the instruction is kept when the
    reply names no catalogue kind."""
    msgs = [{"role": "system", "content": "You improve instructions. Reply with the new "
                                          "instruction only, of the form 'Add one <kind>.'"},
            {"role": "user", "content": f"Instruction: {instruction_text}\nFeedback: "
                                        f"{' '.join(feedback)}\nNew instruction:"}]
    reply = chat.chat(msgs, max_tokens=max_tokens, temperature=0.0)[0].content or ""
    return parse_instruction(reply) or instruction_text, reply


def llm_rewrite_critique(chat, critique: str, instruction_text: str, *,
                         max_tokens: int = 48) -> str:
    """TextGrad's LLM critique of a node's input: the model restates the output's
    critique as feedback on what the node received."""
    msgs = [{"role": "user", "content": f"A step with instruction '{instruction_text}' "
             f"produced an output criticised as: {critique}\nWrite the criticism of the "
             "step's input, in one sentence."}]
    reply = chat.chat(msgs, max_tokens=max_tokens, temperature=0.0)[0].content or ""
    return reply.strip() or critique
