"""Reproduction: Agent World Model -- RL on synthesised database worlds, verified rewards.

The study (``docs/awm.md``):

1. Worlds from the twelve scenario templates of :mod:`jaxsci.data.scenarios`. Four
   templates are held out (``held_out``); the others form the training pool. Every task
   passed its gates (seed SQL runs, null action fails, reference passes); the run
   re-checks the null action on every task it uses and counts the tasks the gates
   dropped.
2. A prior: the pointer-copy tool policy (:mod:`jaxsci.agents.awm`) cloned on the
   reference programs of ``demo_templates`` (the role a pretrained LLM's prior plays in
   the paper).
3. GRPO from that prior on the worlds of the first ``K`` pool templates, for each ``K``
   in ``ks``, with the database-verified reward, and once with the hackable proxy reward
   (the agent claims success) at the largest ``K``. Each trained policy is evaluated
   greedily on held-out worlds (true success: the verifier's verdict).
4. SmolLM2-135M-Instruct as an agent on ``n_llm_tasks`` held-out tasks: it writes its own
   tool calls through the chat tool protocol (constrained decoding in-process; any
   OpenAI-compatible server with ``--set model=URL``), with a final answer at the cap.
5. Optional (``synth_llm`` worlds, off in smoke and quick): the paper's LLM synthesis path
   (:mod:`jaxsci.agents.awm_synth`) with the same chat model writing every stage of a
   world (scenario, tasks, schema and seed SQL, tool API, verifier code), each gated as
   the template worlds are; the share of attempts each stage's gate accepted, and the
   worlds and tasks kept, are reported as measured (a 135M model mostly fails them).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxsci.agents import awm as A
from jaxsci.agents import awm_synth as Y
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import scenarios as S

__all__ = ["AwmConfig", "CONFIGS", "EXPERIMENT", "run"]


@dataclasses.dataclass(frozen=True)
class AwmConfig:
    model: str = "smollm2"  # the evaluated LLM agent: "smollm2" or a server URL
    held_out: tuple[str, ...] = ("airline", "garden", "gym", "museum")
    demo_templates: tuple[str, ...] = ("library", "shop")  # the cloned prior's worlds
    demo_seeds: int = 2
    bc_steps: int = 150
    ks: tuple[int, ...] = (2, 8)  # training templates (the first K of the pool)
    train_seeds: int = 8  # variants per training template
    eval_seeds: int = 3  # variants per held-out template
    iterations: int = 100
    group: int = 6  # G rollouts per task
    tasks_per_batch: int = 8
    learning_rate: float = 1e-3
    max_steps: int = 5
    d_model: int = 48
    n_layers: int = 2
    n_llm_tasks: int = 4  # held-out tasks SmolLM2 attempts (its token budget: 48 per step)
    llm_max_steps: int = 4
    llm_max_tokens: int = 48
    synth_llm: int = 0  # worlds the chat model synthesises through the LLM path (0: none)
    synth: Y.SynthConfig = Y.SynthConfig()  # how it is asked and gated

    def __post_init__(self):
        for name in ("demo_seeds", "bc_steps", "train_seeds", "eval_seeds", "iterations",
                     "tasks_per_batch", "max_steps", "d_model", "n_layers", "llm_max_steps",
                     "llm_max_tokens"):
            check_int(name, getattr(self, name), min=1)
        check_int("group", self.group, min=2)
        check_int("n_llm_tasks", self.n_llm_tasks, min=0)
        check_int("synth_llm", self.synth_llm, min=0)
        if not isinstance(self.synth, Y.SynthConfig):
            raise TypeError(f"synth must be a SynthConfig, got {type(self.synth).__name__}")
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        names = set(S.SCENARIOS)
        for field in ("held_out", "demo_templates"):
            v = getattr(self, field)
            if not v or not set(v) <= names:
                raise ValueError(f"{field} must be a non-empty subset of {sorted(names)}, "
                                 f"got {v}")
        pool = len(names) - len(self.held_out)
        if not self.ks or any(not 1 <= k <= pool for k in self.ks):
            raise ValueError(f"ks must hold training-template counts in [1, {pool}], got "
                             f"{self.ks}")

    @property
    def pool(self) -> list[str]:
        return [n for n in sorted(S.SCENARIOS) if n not in self.held_out]


CONFIGS = {
    "smoke": AwmConfig(held_out=("gym",), demo_templates=("library",), demo_seeds=1,
                       bc_steps=20, ks=(1, 2), train_seeds=1, eval_seeds=1, iterations=2,
                       group=2, tasks_per_batch=2, d_model=16, n_layers=1, n_llm_tasks=1,
                       llm_max_steps=2, llm_max_tokens=24),
    "quick": AwmConfig(),
    "full": AwmConfig(ks=(1, 2, 4, 8), train_seeds=20, eval_seeds=10, iterations=600,
                      group=8, n_llm_tasks=40, llm_max_steps=6, llm_max_tokens=96,
                      synth_llm=12),
}


def _gate_counts(names, seeds) -> tuple[int, int]:
    """(tasks the templates define, tasks the gates kept) over these variants."""
    defined = kept = 0
    for n in names:
        per = 6 + (len(S.SCENARIOS[n].entities) == 3)
        for sd in seeds:
            defined += per
            kept += len(S.build_world(S.SCENARIOS[n], sd).tasks)
    return defined, kept


def _null_action_rate(jobs) -> float:
    passed = 0
    for w, t in jobs:
        env = w.env()
        passed += env.verify(t, env.template, env.template, None) == "complete"
    return passed / len(jobs)


def _llm_agent(chat, jobs, c: AwmConfig) -> dict:
    """SmolLM2 (or any chat model) as a tool-calling agent on ``jobs``, greedy.

    Returns the mean success, steps and tool calls, and ``episodes``: per task its id,
    how the run ended, the answer, the steps, and every call the model made (name and
    argument text) with the verdict: what a loopback comparison checks.
    """
    from jaxsci.common.agents import ChatActor, RunPolicy, run_agent

    ok, steps, calls, episodes = [], [], [], []
    for w, t in jobs:
        env = w.env()
        env.reset(t)
        msgs = [{"role": "system", "content": f"You operate a {w.name.split('-')[0]} "
                 "database through the tools. Call tools to do the task, then answer."},
                {"role": "user", "content": t.prompt}]
        r = run_agent(chat, msgs, env.tools, RunPolicy(c.llm_max_steps, "final_answer"),
                      actor=ChatActor(max_tokens=c.llm_max_tokens), seed=0)
        ok.append(env.finish(r.answer) == "complete")
        steps.append(r.steps)
        calls.append(r.tool_calls)
        made = tuple((x["function"]["name"], x["function"]["arguments"]) for m in r.messages
                     for x in m.get("tool_calls") or ())
        episodes.append((t.id, r.status, r.answer, r.steps, r.tool_calls, made, ok[-1]))
        env.close_episode()
    return {"success": float(np.mean(ok)), "steps": float(np.mean(steps)),
            "calls": float(np.mean(calls)), "episodes": episodes}


def _synthesis(chat, c: AwmConfig, seed: int) -> tuple[dict, list]:
    """The LLM synthesis path on ``c.synth_llm`` worlds (scenario names cycled through the
    templates', seeds ``seed, seed + 1, ...``): the metrics and the
    :class:`~jaxsci.agents.awm_synth.Synthesis` values."""
    names = sorted(S.SCENARIOS)
    out = [Y.synthesize_world(chat, names[i % len(names)], seed=seed + i, config=c.synth)
           for i in range(c.synth_llm)]
    r = Y.pass_rates(out)
    m = {"synth_worlds_attempted": r["worlds"], "synth_worlds_kept": r["kept"],
         "synth_tasks_kept": r["tasks_kept"],
         "synth_stage_attempts": np.asarray(r["attempts"]),
         "synth_stage_pass_rate": np.asarray(r["rate"], float),
         "synth_rejections_by_gate": np.asarray([r["rejections"][g] for g in Y.GATES])}
    return m, out


def run(config: AwmConfig, ctx: Context) -> dict:
    c = config
    pc = A.PolicyConfig(d_model=c.d_model, n_layers=c.n_layers,
                        n_heads=4 if c.d_model % 4 == 0 else 1)
    held = S.jobs(c.held_out, range(100, 100 + c.eval_seeds))
    demo = S.jobs(c.demo_templates, range(c.demo_seeds))
    k_init, k_bc, *k_rl = jax.random.split(ctx.key, 3 + len(c.ks))
    m: dict = {}
    every = set(c.pool) | set(c.held_out)
    defined, kept = _gate_counts(sorted(every), range(c.train_seeds))
    m["gate_tasks_defined"], m["gate_tasks_kept"] = defined, kept
    m["held_out_tasks"] = len(held)

    def held_success(policy):
        return A.evaluate(policy, pc, held, max_steps=c.max_steps)

    m["untrained_held_success"] = held_success(A.ToolPolicy(k_init, pc))
    prior, _ = A.clone(k_bc, pc, demo, steps=c.bc_steps)
    m["prior_held_success"] = held_success(prior)

    bar = ctx.bar(total=c.iterations * (len(c.ks) + 1), desc="awm: GRPO")
    by_k, train_by_k, curves = [], [], []
    used = list(held)
    for i, k in enumerate(c.ks):
        train = S.jobs(c.pool[:k], range(c.train_seeds))
        used += train
        policy, hist = A.grpo(k_rl[i], pc, prior, train, iterations=c.iterations,
                              group=c.group, tasks_per_batch=c.tasks_per_batch,
                              learning_rate=c.learning_rate, max_steps=c.max_steps,
                              progress=bar)
        by_k.append(held_success(policy))
        train_by_k.append(A.evaluate(policy, pc, train[::4], max_steps=c.max_steps))
        curves.append(hist["reward"])
    proxy, hist_p = A.grpo(k_rl[-1], pc, prior, train, iterations=c.iterations,
                           group=c.group, tasks_per_batch=c.tasks_per_batch,
                           learning_rate=c.learning_rate, max_steps=c.max_steps,
                           reward="proxy", progress=bar)
    bar.close()
    m["ks"] = np.asarray(c.ks)
    m["held_success_by_k"] = np.asarray(by_k)
    m["train_success_by_k"] = np.asarray(train_by_k)
    m["reward_curves"] = np.asarray(curves)
    m["proxy_held_success"] = held_success(proxy)
    m["proxy_train_success"] = A.evaluate(proxy, pc, train[::4], max_steps=c.max_steps)
    m["proxy_reward_final"] = float(hist_p["reward"][-10:].mean())
    m["proxy_true_success_final"] = float(hist_p["success"][-10:].mean())
    m["null_action_pass_rate"] = _null_action_rate(used)

    chat = None
    if c.n_llm_tasks or c.synth_llm:
        from jaxsci.common.lm.chat import open_chat_model

        chat = open_chat_model(c.model)
    if c.n_llm_tasks:
        rng = np.random.default_rng(ctx.seed)
        pick = [held[j] for j in rng.permutation(len(held))[:c.n_llm_tasks]]
        llm = _llm_agent(chat, pick, c)
    else:
        llm = {"success": float("nan"), "steps": float("nan"), "calls": float("nan")}
    m["llm_success"], m["llm_mean_steps"], m["llm_mean_calls"] = (
        llm["success"], llm["steps"], llm["calls"])

    worlds = []
    if c.synth_llm:
        synth, worlds = _synthesis(chat, c, ctx.seed)
    else:  # the LLM synthesis path was not run
        synth = {"synth_worlds_attempted": 0, "synth_worlds_kept": 0, "synth_tasks_kept": 0,
                 "synth_stage_attempts": np.zeros(len(Y.STAGES), int),
                 "synth_stage_pass_rate": np.full(len(Y.STAGES), np.nan),
                 "synth_rejections_by_gate": np.zeros(len(Y.GATES), int)}
    m.update(synth)

    ctx.report.add_figure(plot(m, c), "awm.png",
                          "Left: mean verified reward per GRPO iteration, per number of "
                          "training templates K. Right: true success on held-out worlds "
                          "of the untrained policy, the cloned prior, GRPO with the "
                          "verified reward per K, and GRPO with the proxy reward.")
    ctx.report.add_text(summary_markdown(m, c))
    if worlds:
        ctx.report.add_text(synthesis_markdown(worlds))
    return m


def plot(m, c: AwmConfig):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for k, curve in zip(c.ks, m["reward_curves"], strict=True):
        a.plot(np.arange(1, len(curve) + 1), curve, label=f"K = {k}")
    a.set_xlabel("GRPO iteration")
    a.set_ylabel("mean verified reward (training worlds)")
    a.set_title("GRPO training reward")
    a.legend()
    names = ["untrained", "prior", *[f"K={k}" for k in c.ks], f"proxy K={c.ks[-1]}"]
    vals = [m["untrained_held_success"], m["prior_held_success"], *m["held_success_by_k"],
            m["proxy_held_success"]]
    b.bar(names, vals)
    b.set_xlabel("policy")
    b.set_ylabel("true success on held-out worlds")
    b.set_title("Held-out templates: " + ", ".join(c.held_out))
    fig.tight_layout()
    return fig


def summary_markdown(m, c: AwmConfig) -> str:
    lines = ["## Held-out success (greedy, verifier's verdict)", "",
             "| policy | held-out success | training-world success |", "|---|---|---|",
             f"| untrained | {m['untrained_held_success']:.3f} | - |",
             f"| cloned prior | {m['prior_held_success']:.3f} | - |"]
    for k, h, t in zip(c.ks, m["held_success_by_k"], m["train_success_by_k"], strict=True):
        lines.append(f"| GRPO, verified reward, K = {k} | {h:.3f} | {t:.3f} |")
    lines += [f"| GRPO, proxy reward, K = {c.ks[-1]} | {m['proxy_held_success']:.3f} | "
              f"{m['proxy_train_success']:.3f} |", "",
              f"Proxy run, last 10 iterations: proxy reward {m['proxy_reward_final']:.3f}, "
              f"true success {m['proxy_true_success_final']:.3f}.",
              f"Gates kept {m['gate_tasks_kept']} of {m['gate_tasks_defined']} tasks; the "
              f"null action passes {m['null_action_pass_rate']:.3f} of the tasks used.",
              f"SmolLM2 ({c.model}) on {c.n_llm_tasks} held-out tasks: success "
              f"{m['llm_success']:.3f}, {m['llm_mean_calls']:.2f} tool calls per task."]
    if m["synth_worlds_attempted"]:
        lines += ["", f"## LLM synthesis path ({c.model} writes every stage)", "",
                  f"Worlds kept: {m['synth_worlds_kept']} of {m['synth_worlds_attempted']} "
                  f"({m['synth_tasks_kept']} tasks passed every gate).", "",
                  "| stage | attempts | accepted |", "|---|---|---|"]
        for st, n, rate in zip(Y.STAGES, m["synth_stage_attempts"],
                               m["synth_stage_pass_rate"], strict=True):
            lines.append(f"| {st} | {n} | {'-' if not n else f'{rate:.3f}'} |")
        lines += ["", "Rejections by gate: " + ", ".join(
            f"{g} {n}" for g, n in zip(Y.GATES, m["synth_rejections_by_gate"], strict=True))
            + "."]
    return "\n".join(lines)


def synthesis_markdown(worlds) -> str:
    """Every attempt of the LLM synthesis path: the stage, the gate that rejected it and
    why, per world."""
    lines = ["## LLM synthesis attempts", ""]
    for s in worlds:
        lines += [f"**{s.name}**: {s.dropped or f'{len(s.world.tasks)} tasks kept'}", "",
                  "| stage | task | attempt | verdict |", "|---|---|---|---|"]
        for a in s.attempts:
            why = "accepted" if a.ok else f"{a.gate}: {a.message[:160]}"
            why = why.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {a.stage} | {'-' if a.task is None else a.task} | {a.attempt} "
                         f"| {why} |")
        lines.append("")
    return "\n".join(lines)


METRICS = (
    Metric("gate_tasks_defined", "tasks the templates define over the variants checked"),
    Metric("gate_tasks_kept", "tasks that passed all three gates"),
    Metric("held_out_tasks", "held-out tasks evaluated"),
    Metric("untrained_held_success", "random-init policy, held-out true success"),
    Metric("prior_held_success", "the cloned prior, held-out true success"),
    Metric("ks", "training-template counts K"),
    Metric("held_success_by_k", "GRPO (verified reward): held-out true success per K",
           better="higher"),
    Metric("train_success_by_k", "GRPO (verified reward): success on training worlds per K"),
    Metric("reward_curves", "mean verified reward per iteration, per K"),
    Metric("proxy_held_success", "GRPO (proxy reward): held-out true success"),
    Metric("proxy_train_success", "GRPO (proxy reward): true success on training worlds"),
    Metric("proxy_reward_final", "proxy reward, mean of the last 10 iterations"),
    Metric("proxy_true_success_final", "true success in the proxy run's last 10 iterations"),
    Metric("null_action_pass_rate", "share of the tasks used whose verifier accepts the "
           "untouched database with no answer"),
    Metric("llm_success", "SmolLM2 writing its own tool calls: held-out true success",
           finite=False),
    Metric("llm_mean_steps", "SmolLM2: model decisions per task", finite=False),
    Metric("llm_mean_calls", "SmolLM2: tool calls per task", finite=False),
    Metric("synth_worlds_attempted", "worlds the LLM synthesis path attempted (synth_llm)"),
    Metric("synth_worlds_kept", "LLM-synthesised worlds with a task that passed every gate"),
    Metric("synth_tasks_kept", "tasks of the LLM-synthesised worlds that passed every gate"),
    Metric("synth_stage_attempts", "LLM synthesis: attempts per stage (scenario, tasks, "
           "database, tools, verifier)"),
    Metric("synth_stage_pass_rate", "LLM synthesis: share of each stage's attempts its "
           "checks and gates accepted (NaN: the stage was never reached)", finite=False),
    Metric("synth_rejections_by_gate", "LLM synthesis: rejected attempts per gate (reply, "
           "json, shape, tool_sql, seed_runs, null_action_fails, reference_passes)"),
)

CLAIMS = (
    Claim("null_action_fails", "The null action passes no task (the gates hold on every "
          "task used)", test="null_action_pass_rate == 0"),
    Claim("rl_rises_above_untrained", "GRPO with the verified reward lifts held-out success "
          "well above the untrained policy and above the cloned prior (by 0.1 or more)",
          test="held_success_by_k[-1] >= max(untrained_held_success, prior_held_success) "
               "+ 0.1"),
    Claim("grows_with_k", "Held-out success grows with the number of training templates K",
          test="held_success_by_k[-1] > held_success_by_k[0]"),
    Claim("verified_beats_proxy", "The database-verified reward beats the hackable proxy on "
          "true held-out success", test="held_success_by_k[-1] > proxy_held_success"),
)

EXPERIMENT = Experiment(
    name="awm",
    title="Agent World Model: GRPO with database-verified rewards on synthesised worlds",
    paper="Agent World Model: infinity synthetic environments for agentic RL (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
