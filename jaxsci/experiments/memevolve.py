"""Reproduction: MemEvolve, meta-evolving memory architectures over EvolveLab genotypes.

The study (``docs/memevolve.md``), on the task streams of :mod:`jaxsci.data.memtasks`
(answers revealed only in the feedback of failed episodes, Zipf-repeated queries,
paraphrases, near-miss distractors; the transfer family on the SQLite environments):

1. **Tournament** (:func:`jaxsci.agents.memevolve.evolve`): round 0 evaluates the
   EvolveLab presets on ``x`` tasks, the top ``t`` by Pareto rank (accuracy, tokens,
   time proxy) go to finals on ``y`` extra tasks; each of ``rounds`` later rounds
   evaluates the parent and ``m`` proposals. ``mode="mutate"`` (quick): proposals come
   from :func:`~jaxsci.agents.memevolve.diagnose_and_mutate`, a **programmatic
   replacement of the LLM designer**, named so in ``design_method``; ``mode="llm"``:
   the paper's path, the LLM writes providers, gated in the sandbox.
2. **Held-out**: a fresh stream over the same world; no memory, every preset and the
   evolved design, each from an empty memory.
3. **Transfer**: the same designs, unchanged, on the second family (``"sql"``, the
   default: which tool sequence of the SQLite environments of
   :mod:`jaxsci.data.sqlworlds` solves which task type; the chosen sequence is executed
   on the world's database and the task's verifier judges it; ``--set
   transfer_family=tools`` runs the older invented stand-in).

The task agent (SmolLM2-135M-Instruct in-process, or any OpenAI-compatible server with
``--set model=http://host:port/v1``) answers by option scoring with the memory text in
its prompt. The lineage of every design is written to ``lineage.json`` in the run folder.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from jaxsci.agents import memevolve as ME
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data.memtasks import make_stream

__all__ = ["MemEvolveConfig", "CONFIGS", "EXPERIMENT", "run"]

PRESET_NAMES = tuple(ME.PRESETS)


@dataclasses.dataclass(frozen=True)
class MemEvolveConfig:
    model: str = "smollm2"  # "smollm2" in-process, or an OpenAI-compatible URL
    mode: str = "mutate"  # "mutate" (programmatic designer) or "llm" (LLM-written providers)
    embedder: str = "hash"  # vector store: "hash" (bag of words) or "minilm"
    n_entities: int = 8
    zipf: float = 1.1
    x: int = 20  # tasks per round (the authors' default)
    y: int = 5  # extra tasks of the finals
    m: int = 3  # candidates per round
    t: int = 2  # finalists
    rounds: int = 1  # proposal rounds after the seed round
    n_test: int = 16
    n_transfer: int = 12
    transfer_family: str = "sql"  # "sql" (SQLite environments) or "tools" (invented)
    block: int = 4  # episodes answered per forward pass (memory updated after a block)
    agent_max_tokens: int = 400

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be 'smollm2' or a server URL, got {self.model!r}")
        if self.mode not in ("mutate", "llm"):
            raise ValueError(f"mode must be 'mutate' or 'llm', got {self.mode!r}")
        if self.embedder not in ("hash", "minilm"):
            raise ValueError(f"embedder must be 'hash' or 'minilm', got {self.embedder!r}")
        if self.transfer_family not in ("sql", "tools"):
            raise ValueError(f"transfer_family must be 'sql' or 'tools', got "
                             f"{self.transfer_family!r}")
        check_int("n_entities", self.n_entities, min=2, max=24)
        check_scalar("zipf", self.zipf, ge=0.0)
        for k in ("x", "y", "m", "t", "n_test", "n_transfer", "block"):
            check_int(k, getattr(self, k), min=1)
        check_int("rounds", self.rounds, min=0)
        check_int("agent_max_tokens", self.agent_max_tokens, min=16)
        if self.t > self.m + 1:
            raise ValueError(f"t (finalists) must be <= m + 1 = {self.m + 1}, got {self.t}")


CONFIGS = {
    "smoke": MemEvolveConfig(x=4, y=2, m=2, rounds=1, n_test=4, n_transfer=4, n_entities=4),
    "quick": MemEvolveConfig(),
    "full": MemEvolveConfig(n_entities=16, rounds=6, n_test=60, n_transfer=40),
}


def run(config: MemEvolveConfig, ctx: Context) -> dict:
    c = config
    from jaxsci.common.lm.chat import open_chat_model

    chat = open_chat_model(c.model)
    embed = None
    if c.embedder == "minilm":
        from jaxsci.common.lm.minilm import MiniLM

        mini = MiniLM.load()
        embed = lambda texts: np.asarray(mini.embed(list(texts)), np.float64)  # noqa: E731
    memo: dict = {}

    def score(mems, tasks):
        keys = [(m, t.text, t.options) for m, t in zip(mems, tasks, strict=True)]
        todo = [i for i, k in enumerate(keys) if k not in memo]
        if todo:
            s = ME.score_options(chat, [mems[i] for i in todo], [tasks[i] for i in todo])
            for i, row in zip(todo, s, strict=True):
                memo[keys[i]] = row
        return [memo[k] for k in keys]

    def evaluate(provider, tasks):
        return ME.run_stream(score, provider, tasks, block=c.block)

    def make_provider(cand):
        if cand.code is not None:
            return ME.SandboxedProvider(cand.code)
        return ME.GenotypeProvider(cand.genotype, embed)

    def stream(offset, n, family="facts"):
        return make_stream(ctx.seed, n_tasks=n, n_entities=c.n_entities, family=family,
                           zipf=c.zipf, offset=offset)

    rounds = [(stream(1 + 2 * r, c.x), stream(2 + 2 * r, c.y)) for r in range(c.rounds + 1)]
    bar = ctx.bar(total=c.rounds + 3, desc="memevolve: tournament, held-out, transfer")
    propose = ME.llm_proposer(chat, max_tokens=c.agent_max_tokens) if c.mode == "llm" else None
    res = ME.evolve(evaluate, make_provider, ME.PRESETS, rounds, m=c.m, t=c.t, propose=propose,
                    seed=ctx.seed, on_round=lambda _: bar.update())
    best = res.best
    lineage = [x.record() for x in res.lineage]
    (ctx.out_dir / "lineage.json").write_text(json.dumps(lineage, indent=1, default=float))

    designs = {"none": None, **{k: ME.Candidate(k, 0, None, "seed", "", g)
                                for k, g in ME.PRESETS.items()}, "evolved": best}

    def held(family, offset, n):
        tasks = stream(offset, n, family)
        out = {}
        for k, cand in designs.items():
            prov = _Empty() if cand is None else make_provider(cand)
            lg = evaluate(prov, tasks)
            out[f"acc_{k}"] = float(lg.correct.mean())
            out[f"tokens_{k}"] = float(lg.tokens.mean())
        return out

    test = {k: float(v) for k, v in held("facts", 1000, c.n_test).items()}
    bar.update()
    tr = {k: float(v) for k, v in held(c.transfer_family, 2000, c.n_transfer).items()}
    bar.update()
    bar.close()

    m: dict = {}
    for k in ("none", *PRESET_NAMES, "evolved"):
        m[f"acc_{k}"] = test[f"acc_{k}"]
        m[f"tokens_{k}"] = test[f"tokens_{k}"]
        m[f"transfer_acc_{k}"] = tr[f"acc_{k}"]
    presets = [k for k in PRESET_NAMES if k != "base"]
    m["best_preset_acc"] = max(m[f"acc_{k}"] for k in presets)
    m["best_preset"] = max(presets, key=lambda k: m[f"acc_{k}"])
    m["evolved_minus_base"] = m["acc_evolved"] - m["acc_base"]
    m["transfer_best_preset_acc"] = max(m[f"transfer_acc_{k}"] for k in presets)
    m["transfer_evolved_minus_base"] = m["transfer_acc_evolved"] - m["transfer_acc_base"]
    m["chance"] = 0.25
    m["evolved_design"] = best.genotype.describe() if best.genotype else "generated code"
    m["evolved_from_base"] = json.dumps(
        {k: list(v) for k, v in ME.genotype_diff(ME.PRESETS["base"], best.genotype).items()}
    ) if best.genotype else "generated code"
    m["n_candidates"] = len(lineage)
    m["gate_failures"] = sum(x["gate"] != "ok" for x in lineage)
    ids = {x["id"] for x in lineage}
    m["lineage_complete"] = float(all(x["parent"] is None or x["parent"] in ids
                                      for x in lineage)
                                  and all(x["operator"] and x["rationale"] for x in lineage))
    m["round_winner_acc"] = np.array([x["acc"] for x in lineage if x["winner"]], float)
    m["design_method"] = ME.MUTATE_METHOD if c.mode == "mutate" else ME.LLM_METHOD
    m["transfer_family"] = c.transfer_family

    ctx.report.add_figure(plot(m, lineage), "memevolve.png",
                          "Left: accuracy of every candidate per tournament round (winners "
                          "circled). Right: held-out and transfer accuracy per design.")
    ctx.report.add_text(summary_markdown(m, lineage))
    return m


class _Empty(ME.MemoryProvider):
    """No memory (the floor: the streams need experience)."""

    def provide(self, query, phase="begin"):
        return ""

    def take_in(self, trajectory):
        pass


def plot(m, lineage):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    for x in lineage:
        if np.isfinite(x["acc"]):
            a.plot(x["round"], x["acc"], "o", color="C3" if x["winner"] else "C0",
                   ms=9 if x["winner"] else 5)
    a.axhline(m["chance"], ls=":", color="grey", label="chance")
    a.set_xlabel("tournament round (0 = presets)")
    a.set_ylabel("accuracy on the round's x tasks")
    a.set_title("MemEvolve tournament (red: round winner)")
    a.legend()
    names = ["none", *PRESET_NAMES, "evolved"]
    xs = np.arange(len(names))
    b.bar(xs - 0.2, [m[f"acc_{k}"] for k in names], 0.4, label="held-out (facts)")
    b.bar(xs + 0.2, [m[f"transfer_acc_{k}"] for k in names], 0.4,
          label=f"transfer ({m['transfer_family']})")
    b.set_xticks(xs, names, rotation=20)
    b.set_xlabel("memory design")
    b.set_ylabel("accuracy")
    b.set_title("Held-out and transfer accuracy")
    b.legend()
    fig.tight_layout()
    return fig


def summary_markdown(m, lineage) -> str:
    lines = ["## Held-out and transfer accuracy", "",
             "| design | held-out acc | tokens | transfer acc |", "|---|---|---|---|"]
    for k in ("none", *PRESET_NAMES, "evolved"):
        lines.append(f"| {k} | {m[f'acc_{k}']:.3f} | {m[f'tokens_{k}']:.1f} | "
                     f"{m[f'transfer_acc_{k}']:.3f} |")
    lines += ["", f"Evolved design: `{m['evolved_design']}`; genes changed from base: "
              f"{m['evolved_from_base']}. Design method: {m['design_method']}.", "",
              "## Lineage (also `lineage.json`)", "",
              "| id | parent | operator | rationale | design | acc | finalist | winner |",
              "|---|---|---|---|---|---|---|---|"]
    for x in lineage:
        lines.append(f"| {x['id']} | {x['parent']} | {x['operator']} | {x['rationale'][:60]} "
                     f"| {x['describe']} | {x['acc']:.3f} | {x['finalist']} | "
                     f"{x['winner']} |")
    return "\n".join(lines)


METRICS = (
    *(Metric(f"acc_{k}", f"held-out accuracy, {k} memory", better="higher")
      for k in ("none", *PRESET_NAMES, "evolved")),
    *(Metric(f"tokens_{k}", f"mean memory words per held-out prompt, {k}", better="lower")
      for k in ("none", *PRESET_NAMES, "evolved")),
    *(Metric(f"transfer_acc_{k}", f"transfer-family accuracy, {k} memory", better="higher")
      for k in ("none", *PRESET_NAMES, "evolved")),
    Metric("best_preset_acc", "the best non-base preset's held-out accuracy"),
    Metric("best_preset", "the best non-base preset"),
    Metric("evolved_minus_base", "evolved minus base memory, held-out", better="higher"),
    Metric("transfer_best_preset_acc", "the best non-base preset on the transfer family"),
    Metric("transfer_evolved_minus_base", "evolved minus base on the transfer family",
           better="higher"),
    Metric("chance", "1 / options"),
    Metric("evolved_design", "the evolved genotype"),
    Metric("evolved_from_base", "genes changed from the base memory (JSON)"),
    Metric("n_candidates", "designs in the lineage"),
    Metric("gate_failures", "LLM-written providers that failed the gates"),
    Metric("lineage_complete", "1 when every design names its parent, operator and "
           "rationale"),
    Metric("round_winner_acc", "each round winner's accuracy on its x tasks"),
    Metric("design_method", "how designs are proposed (programmatic or LLM)"),
    Metric("transfer_family", "the transfer family (sql: the SQLite environments)"),
)

CLAIMS = (
    Claim("evolved_beats_base", "the evolved memory beats the default base memory by >= 0.10 "
          "held-out accuracy (precondition: the stream needs experience, no memory < 0.5)",
          test="evolved_minus_base >= 0.10 and acc_none < 0.5",
          paper_value="up to +17.06% over SmolAgent / Flash-Searcher baselines",
          scale="full",
          note="not reproduced at quick: evolved 0.31 vs base 0.25 held-out, +0.06 < 0.10 "
               "(seed 0, 16 held-out tasks, no memory 0.19), because SmolLM2-135M copies a "
               "retrieved answer mostly when the query repeats nearly verbatim and a short "
               "stream holds few repeats; every design stays near chance"),
    Claim("evolved_matches_best_preset", "the evolved memory at least matches the best "
          "preset (precondition: memory matters on this stream: the best preset at least "
          "0.10 above no memory and 0.15 above chance, and below the ceiling)",
          test="acc_evolved >= best_preset_acc and best_preset_acc - acc_none >= 0.10 and "
               "best_preset_acc - chance >= 0.15 and best_preset_acc < 1.0",
          scale="full",
          note="not reproduced at quick: evolved 0.31 = best preset (lightweight) 0.31, a "
               "tie one held-out task above the 4-way chance of 0.25 (seed 0, 16 held-out "
               "tasks, no memory 0.19): memory does not lift SmolLM2-135M clear of chance "
               "on this stream, so the comparison of designs is not decided here"),
    Claim("transfers", "the evolved memory transfers to the second family (the SQLite "
          "environments: which tool sequence works for which task type): it beats the "
          "base memory there (precondition: no memory < 0.5 there)",
          test="transfer_evolved_minus_base > 0 and transfer_acc_none < 0.5",
          scale="full",
          note="not reproduced at quick: on the SQLite family (seed 0, 12 tasks, each "
               "chosen tool sequence executed on the world's database) evolved 0.08 vs "
               "base 0.08, no memory 0.08, presets 0.08 to 0.17, every design below the "
               "4-way chance of 0.25: SmolLM2-135M hardly copies a retrieved tool "
               "sequence, so the designs are not told apart here"),
    Claim("lineage_recorded", "the lineage of every evolved design is recorded (parent, "
          "operator, rationale; lineage.json)", test="lineage_complete == 1 and "
          "n_candidates > len(round_winner_acc)"),
)

EXPERIMENT = Experiment(
    name="memevolve",
    title="MemEvolve / EvolveLab: meta-evolving memory architectures",
    paper="MemEvolve: Meta-Evolution of Agent Memory Systems (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
