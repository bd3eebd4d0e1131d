"""Reproduction: Meta Context Engineering (MCE), a bi-level loop over context skills.

The study (``docs/mce.md``), on the invented diagnosis task :mod:`jaxsci.data.diagnosis`:

1. **Rollouts.** The task model (SmolLM2-135M-Instruct in-process, or any
   OpenAI-compatible server with ``--set model=http://host:port/v1``) answers
   ``n_rollout`` training cases without context, by option scoring over the condition
   names (:func:`jaxsci.agents.mce.score_options`).
2. **Baselines** on the test cases: no context; a short instruction only (GEPA-like,
   fixed); an additive playbook, one rule appended per rollout error (ACE-like); fixed
   ``knn_k``-NN few-shot.
3. **MCE** (:func:`jaxsci.agents.mce.run_mce`): the seed skills, then ``iterations``
   meta-level proposals; each skill is executed on the rollouts into context files and
   a ``get_context(x)`` (validated, at most 3 attempts), evaluated on the validation
   cases and ``train_eval`` training cases (the overfitting check), the best previous
   context carried over. ``mode="recipe"`` (quick): skills are declarative recipes,
   executed programmatically, and the meta level is crossover of the top-2 skills by
   validation score: **programmatic replacements** of both LLM agents, named so in the
   metrics (``skill_method``). ``mode="llm"``: the paper's path, the file-tool agents
   (:func:`~jaxsci.agents.mce.llm_meta_step`, :func:`~jaxsci.agents.mce.llm_base_step`)
   write the skill, the context files and ``get_context.py``, gated in the sandbox.
4. The best context is evaluated on the test cases; context tokens are counted with
   :func:`~jaxsci.agents.mce.count_tokens` on the test inputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxsci.agents import mce as M
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data.diagnosis import make_task

__all__ = ["MCEConfig", "CONFIGS", "EXPERIMENT", "run"]

BASELINES = ("no_context", "instruction", "playbook", "knn")
RECIPE_METHOD = ("skills as declarative recipes executed programmatically; meta level = "
                 "crossover of the top-2 skills by validation score (programmatic "
                 "replacements of both LLM agents)")
LLM_METHOD = ("file-tool LLM agents: the model writes skill.md and the context files and "
              "get_context.py, gated in the sandbox")


@dataclasses.dataclass(frozen=True)
class MCEConfig:
    model: str = "smollm2"  # "smollm2" in-process, or an OpenAI-compatible URL
    mode: str = "recipe"  # "recipe" (programmatic skills) or "llm" (file-tool agents)
    n_conditions: int = 4
    n_train: int = 48  # labelled training cases (tables and examples read them all)
    n_rollout: int = 8  # training cases the model answers (rollouts)
    n_val: int = 8
    n_test: int = 24
    train_eval: int = 8  # training cases per iteration for the overfitting check
    iterations: int = 2  # meta-level proposals after the seeds
    knn_k: int = 2
    overfit_gap: float = 0.25
    # the starting skills: none of them is a fixed baseline's context (the comparison
    # with the baselines would be decided by the seed, not the search)
    seeds: tuple[M.Skill, ...] = (M.Skill(("instruction", "table"), table_findings=2),
                                  M.Skill(("instruction", "examples"), k=1))
    agent_steps: int = 4  # file-agent turns per level (mode="llm")
    agent_max_tokens: int = 240

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be 'smollm2' or a server URL, got {self.model!r}")
        if self.mode not in ("recipe", "llm"):
            raise ValueError(f"mode must be 'recipe' or 'llm', got {self.mode!r}")
        check_int("n_conditions", self.n_conditions, min=2, max=12)
        check_int("n_train", self.n_train, min=2)
        check_int("n_rollout", self.n_rollout, min=1, max=self.n_train)
        check_int("n_val", self.n_val, min=1)
        check_int("n_test", self.n_test, min=1)
        check_int("train_eval", self.train_eval, min=1, max=self.n_rollout)
        check_int("iterations", self.iterations, min=0)
        check_int("knn_k", self.knn_k, min=1)
        check_int("agent_steps", self.agent_steps, min=1)
        check_int("agent_max_tokens", self.agent_max_tokens, min=16)
        check_scalar("overfit_gap", self.overfit_gap, ge=0.0)
        if not self.seeds or not all(isinstance(s, M.Skill) for s in self.seeds):
            raise TypeError("seeds must be a non-empty tuple of mce.Skill")
        if self.iterations and self.mode == "recipe" and len(self.seeds) < 2:
            raise ValueError("crossover needs at least 2 seed skills")
        knn = M.Skill(("examples",), k=self.knn_k)
        if any(s.components == knn.components and s.k == knn.k for s in self.seeds):
            raise ValueError(f"seeds must not hold the fixed {self.knn_k}-NN baseline's "
                             f"skill: the search, not its start, is compared with it")


CONFIGS = {
    "smoke": MCEConfig(n_train=8, n_rollout=2, n_val=2, n_test=2, train_eval=2,
                       iterations=1),
    "quick": MCEConfig(),
    "full": MCEConfig(n_conditions=8, n_train=160, n_rollout=64, n_val=48, n_test=160,
                      train_eval=32, iterations=8),
}


def run(config: MCEConfig, ctx: Context) -> dict:
    c = config
    from jaxsci.common.lm.chat import open_chat_model

    chat = open_chat_model(c.model)
    task = make_task(ctx.seed, n_conditions=c.n_conditions, n_train=c.n_train, n_val=c.n_val,
                     n_test=c.n_test)
    names = task.names
    bar = ctx.bar(total=2 + len(c.seeds) + c.iterations, desc="mce: rollouts, baselines, loop")

    memo: dict[tuple[str, str], np.ndarray] = {}  # identical prompts are scored once

    def scores(contexts, texts) -> np.ndarray:
        todo = [i for i, k in enumerate(zip(contexts, texts, strict=True)) if k not in memo]
        if todo:
            s = M.score_options(chat, [contexts[i] for i in todo], [texts[i] for i in todo],
                                names)
            for i, row in zip(todo, s, strict=True):
                memo[(contexts[i], texts[i])] = row
        return np.stack([memo[k] for k in zip(contexts, texts, strict=True)])

    def predict(art: M.ContextArtifact, cases) -> np.ndarray:
        texts = [x.text for x in cases]
        return np.argmax(scores(art.many(texts), texts), -1)

    roll_cases = task.train[:c.n_rollout]
    roll = ctx.cell("rollouts", lambda: {"pred": predict(M.no_context(), roll_cases)})["pred"]
    rollouts = np.full(len(task.train), -1, np.int64)
    rollouts[:c.n_rollout] = roll
    bar.update()

    arts = {"no_context": M.no_context(), "instruction": M.instruction_only(),
            "playbook": M.additive_playbook(names, roll_cases, roll),
            "knn": M.knn_fewshot(names, task.train, c.knn_k)}
    y_test = np.array([x.label for x in task.test])
    test_texts = [x.text for x in task.test]

    def baselines():
        out = {}
        for k, a in arts.items():
            out[f"acc_{k}"] = float(np.mean(predict(a, task.test) == y_test))
            out[f"tokens_{k}"] = float(np.mean([M.count_tokens(x) for x in a.many(test_texts)]))
        return out

    base = {k: float(v) for k, v in ctx.cell("baselines", baselines).items()}
    bar.update()

    def loop():
        def execute(skill, names_, train, r, attempt, feedback):
            if isinstance(skill, M.Skill):
                return M.execute_skill(skill, names_, train, r)
            return M.llm_base_step(chat, skill, names_, train[:c.n_rollout], r[:c.n_rollout],
                                   attempt, feedback, max_steps=c.agent_steps,
                                   max_tokens=c.agent_max_tokens)

        def propose_llm(history, seed):
            return M.llm_meta_step(chat, history, max_steps=c.agent_steps,
                                   max_tokens=c.agent_max_tokens, seed=seed)

        res = M.run_mce(predict, names, task.train, task.val, c.seeds, c.iterations,
                        seed=ctx.seed, rollouts=rollouts, train_eval=c.train_eval,
                        overfit_gap=c.overfit_gap, execute=execute,
                        propose=propose_llm if c.mode == "llm" else None,
                        on_iteration=lambda _: bar.update())
        h = res.history
        ctx_test = res.best.many(test_texts)
        return {"acc_mce": M.accuracy(scores(ctx_test, test_texts), y_test),
                "tokens_mce": float(np.mean([M.count_tokens(x) for x in ctx_test])),
                "val_curve": np.array([x.val_acc for x in h]),
                "train_curve": np.array([x.train_acc for x in h]),
                "overfit": np.array([x.overfit for x in h]),
                "passed": np.array([x.passed for x in h]),
                "failed_attempts": np.array([sum(a != "ok" for a in x.attempts) for x in h]),
                "best_index": res.best_index,
                "names": np.array([x.name for x in h]),
                "best_name": res.best.name}

    lp = ctx.cell("mce_loop", loop)
    bar.close()

    m: dict = dict(base)
    m["acc_mce"] = float(lp["acc_mce"])
    m["tokens_mce"] = float(lp["tokens_mce"])
    m["chance"] = 1.0 / c.n_conditions
    m["best_fixed_acc"] = max(base[f"acc_{k}"] for k in BASELINES)
    m["mce_minus_best_fixed"] = m["acc_mce"] - m["best_fixed_acc"]
    m["mce_minus_no_context"] = m["acc_mce"] - base["acc_no_context"]
    m["mce_val_curve"] = np.asarray(lp["val_curve"], float)
    m["mce_train_curve"] = np.asarray(lp["train_curve"], float)
    m["mce_best_val"] = float(np.nanmax(lp["val_curve"]))
    m["mce_best_iteration"] = int(lp["best_index"])
    m["mce_overfit_flags"] = int(np.sum(lp["overfit"]))
    m["mce_gate_failures"] = int(np.sum(lp["failed_attempts"]))
    m["mce_iterations_passed"] = int(np.sum(lp["passed"]))
    m["rollout_errors"] = int(np.sum(roll != np.array([x.label for x in roll_cases])))
    m["skill_method"] = RECIPE_METHOD if c.mode == "recipe" else LLM_METHOD
    m["best_skill"] = str(lp["best_name"])

    ctx.report.add_figure(plot(m, lp, c), "mce.png",
                          "Left: validation and training accuracy of each MCE iteration "
                          "(seeds first). Right: test accuracy and context tokens per "
                          "method.")
    ctx.report.add_text(summary_markdown(m, lp, c))
    return m


def plot(m, lp, c):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    x = np.arange(len(m["mce_val_curve"]))
    a.plot(x, m["mce_val_curve"], "o-", label="validation")
    a.plot(x, m["mce_train_curve"], "s--", label="training subset")
    a.axhline(m["chance"], ls=":", color="grey", label="chance")
    a.set_xlabel("iteration (seed skills first)")
    a.set_ylabel("accuracy")
    a.set_title("MCE iterations")
    a.legend()
    labels = ["no context", "instruction", "playbook", f"{c.knn_k}-NN", "MCE"]
    accs = [m["acc_no_context"], m["acc_instruction"], m["acc_playbook"], m["acc_knn"],
            m["acc_mce"]]
    toks = [m["tokens_no_context"], m["tokens_instruction"], m["tokens_playbook"],
            m["tokens_knn"], m["tokens_mce"]]
    b.bar(np.arange(5), accs, color=["k", "C0", "C1", "C2", "C3"])
    for i, t in enumerate(toks):
        b.text(i, accs[i], f"{t:.0f} tok", ha="center", va="bottom")
    b.set_xticks(np.arange(5), labels, rotation=20)
    b.set_xlabel("method")
    b.set_ylabel("test accuracy")
    b.set_title("Test accuracy (context tokens above each bar)")
    fig.tight_layout()
    return fig


def summary_markdown(m, lp, c) -> str:
    lines = ["## Test accuracy and context size", "", "| method | test accuracy | context "
             "tokens |", "|---|---|---|"]
    for k, lab in (("no_context", "no context"), ("instruction", "instruction only "
                   "(GEPA-like)"), ("playbook", "additive playbook (ACE-like)"),
                   ("knn", f"{c.knn_k}-NN few-shot"), ("mce", "MCE (best iteration)")):
        lines.append(f"| {lab} | {m[f'acc_{k}']:.3f} | {m[f'tokens_{k}']:.1f} |")
    lines += ["", "## Iterations", "", "| # | skill | val | train | overfit |", "|---|---|---|"
              "---|---|"]
    for i, n in enumerate(lp["names"]):
        lines.append(f"| {i} | {n} | {lp['val_curve'][i]:.3f} | {lp['train_curve'][i]:.3f} "
                     f"| {bool(lp['overfit'][i])} |")
    lines += ["", f"Best: iteration {m['mce_best_iteration']} ({m['best_skill']}). "
              f"Skill method: {m['skill_method']}. Rollout errors: {m['rollout_errors']}."]
    return "\n".join(lines)


METRICS = (
    *(Metric(f"acc_{k}", f"test accuracy, {k} baseline", better="higher") for k in BASELINES),
    *(Metric(f"tokens_{k}", f"mean context tokens on test inputs, {k} baseline")
      for k in BASELINES),
    Metric("acc_mce", "test accuracy of MCE's best context", better="higher"),
    Metric("tokens_mce", "mean context tokens of MCE's best context on test inputs",
           better="lower"),
    Metric("chance", "1 / number of conditions"),
    Metric("best_fixed_acc", "the best baseline's test accuracy"),
    Metric("mce_minus_best_fixed", "MCE minus the best baseline", better="higher"),
    Metric("mce_minus_no_context", "MCE minus no context", better="higher"),
    Metric("mce_val_curve", "validation accuracy per iteration (seeds first)", finite=False),
    Metric("mce_train_curve", "training-subset accuracy per iteration", finite=False),
    Metric("mce_best_val", "the best validation accuracy"),
    Metric("mce_best_iteration", "the iteration whose context was carried to the end"),
    Metric("mce_overfit_flags", "iterations flagged by the overfitting check"),
    Metric("mce_gate_failures", "get_context attempts that failed the gates"),
    Metric("mce_iterations_passed", "iterations whose context passed the gates"),
    Metric("rollout_errors", "errors of the model on the rollouts (the playbook's rules)"),
    Metric("skill_method", "how skills are written and executed (programmatic or LLM)"),
    Metric("best_skill", "the best iteration's skill"),
)

CLAIMS = (
    Claim("mce_beats_no_context", "MCE's context raises test accuracy above no context "
          "(precondition: no context is below the ceiling, < 0.9)",
          test="acc_mce > acc_no_context and acc_no_context < 0.9"),
    Claim("mce_matches_best_fixed", "MCE reaches at least the best fixed context-engineering "
          "baseline minus 0.02 (precondition: the best baseline is below the ceiling)",
          test="acc_mce >= best_fixed_acc - 0.02 and best_fixed_acc < 1.0",
          paper_value="5.6-53.8% relative improvement over agentic CE methods (mean 16.9%)"),
    Claim("mce_fewer_tokens_than_playbook", "MCE's context uses fewer tokens than the "
          "additive playbook (precondition: the playbook holds at least one rule)",
          test="tokens_mce < tokens_playbook and rollout_errors > 0"),
)

EXPERIMENT = Experiment(
    name="mce",
    title="MCE: Meta Context Engineering (bi-level skill / context evolution)",
    paper="Meta Context Engineering via Agentic Skill Evolution (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
