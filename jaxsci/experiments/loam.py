"""Reproduction: LOAM, LLM-designed observation/action spaces raced under one run's budget.

The study (``docs/loam.md``):

1. **Candidate designs.** SmolLM2-135M-Instruct (or any OpenAI-compatible server with
   ``--set model=http://host:port/v1``) scores the options of every design decision of
   the raw environment (one question per raw variable, one for the action map;
   :func:`jaxsci.agents.loam.option_scores`) and ``n_designs`` designs are composed by
   sampling each decision from ``softmax(log p / temperature)``
   (:func:`~jaxsci.agents.loam.sample_design`): a **programmatic replacement** of the
   paper's free-text step, labelled so. The paper's path, the model writing
   ``compute_obs`` / ``compute_action`` code, runs ``code_attempts`` times through the
   gates (sandboxed import, jit check); designs that pass join the candidates, and the
   gate pass rate is reported.
2. **One ordinary run's budget** is ``budget_updates`` PPO updates of
   ``n_envs * n_steps`` environment steps. Every candidate and the default observation
   (the raw variables as they come) are trained with that full budget, vmapped over
   designs: the mean over candidates is the expected return of **a random single
   design**, the best is the **oracle best-of-N** (N times the budget). The **even split**
   gives each candidate ``budget_updates / N`` updates and keeps the one with the best
   recent return.
3. **Racing** (:func:`jaxsci.agents.loam.race`): the candidates start training together
   and the rule decides after every ``rung`` updates which continue; the total is
   exactly ``budget_updates``. The race's answer is evaluated with its final policy.
   Three rules share the interface (UCB confidence race, successive halving, F-race);
   the claims read ``claim_rule``.

Returns are the deterministic policy's mean return over ``eval_episodes`` fresh episodes,
averaged over ``repeats`` independent repetitions (new designs, new training keys).
PPO is a CPU stand-in for the paper's FastTD3; classic control stands in for
HumanoidBench / Isaac Lab.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxsci.agents import loam as L
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar

__all__ = ["LoamConfig", "CONFIGS", "EXPERIMENT", "run"]

RULES = ("ucb", "halving", "frace")


@dataclasses.dataclass(frozen=True)
class LoamConfig:
    model: str = "smollm2"  # the designer: "smollm2" (in-process) or a server URL
    env: str = "cartpole"
    n_designs: int = 8
    temperature: float = 1.0  # sampling temperature of the design decisions
    code_attempts: int = 0  # free-text code designs asked of the model (gated)
    code_max_tokens: int = 320
    budget_updates: int = 160  # one ordinary run, in PPO updates
    rung: int = 4  # updates per active design between racing decisions
    window: int = 4  # recent returns a rule reads
    ucb_c: float = 1.0
    halving_fraction: float = 0.5
    frace_alpha: float = 0.05
    claim_rule: str = "ucb"
    repeats: int = 2
    eval_episodes: int = 16
    ppo: L.PPOConfig = L.PPOConfig()

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be 'smollm2' or a server URL, got {self.model!r}")
        if self.env not in L.ENVS:
            raise ValueError(f"env must be one of {sorted(L.ENVS)}, got {self.env!r}")
        check_int("n_designs", self.n_designs, min=2)
        check_int("code_attempts", self.code_attempts, min=0)
        check_int("code_max_tokens", self.code_max_tokens, min=16)
        check_int("budget_updates", self.budget_updates, min=2 * self.n_designs)
        check_int("rung", self.rung, min=1)
        check_int("window", self.window, min=2)
        check_int("repeats", self.repeats, min=1)
        check_int("eval_episodes", self.eval_episodes, min=1)
        check_scalar("temperature", self.temperature, gt=0.0)
        check_scalar("ucb_c", self.ucb_c, ge=0.0)
        check_scalar("halving_fraction", self.halving_fraction, gt=0.0, lt=1.0)
        check_scalar("frace_alpha", self.frace_alpha, gt=0.0, lt=1.0)
        if self.claim_rule not in RULES:
            raise ValueError(f"claim_rule must be one of {RULES}, got {self.claim_rule!r}")
        if not isinstance(self.ppo, L.PPOConfig):
            raise TypeError(f"ppo must be a PPOConfig, got {type(self.ppo).__name__}")

    def rule(self, name: str) -> L.AbstractRacingRule:
        if name == "ucb":
            return L.UCBRace(c=self.ucb_c, window=self.window)
        if name == "halving":
            return L.SuccessiveHalving(fraction=self.halving_fraction, window=self.window)
        return L.FRace(alpha=self.frace_alpha, window=self.window)


CONFIGS = {
    "smoke": LoamConfig(n_designs=3, code_attempts=0, budget_updates=12,
                        rung=2, window=2, repeats=1, eval_episodes=4,
                        ppo=L.PPOConfig(n_envs=4, n_steps=32, hidden=16, epochs=2,
                                        minibatches=2)),
    "quick": LoamConfig(),
    "full": LoamConfig(n_designs=16, code_attempts=16, budget_updates=400, rung=8,
                       window=8, repeats=10, eval_episodes=64),
}


# --------------------------------------------------------------------------- pieces


def _code_designs(chat, env, c: LoamConfig, seed: int):
    """Ask for code ``code_attempts`` times; return passing designs and gate verdicts."""
    if c.code_attempts == 0:
        return [], []
    replies = chat.chat(L.code_prompt(env), temperature=0.7, seed=seed, n=c.code_attempts,
                        max_tokens=c.code_max_tokens)
    designs, verdicts = [], []
    for i, r in enumerate(replies):
        try:
            code = L.extract_code(r.content or "")
        except L.GateError as e:
            verdicts.append(e.report.gate)
            continue
        rep = L.check_code(code, env)
        verdicts.append(rep.gate)
        if rep.passed:
            designs.append(L.code_design(code, env, name=f"code {i}", sandbox=False))
    return designs, verdicts


def _repeat(key, scores, chat, env, c: LoamConfig, r: int, ctx: Context, bar) -> dict:
    k_design, k_train, k_eval = jax.random.split(key, 3)
    cands = [L.sample_design(jax.random.fold_in(k_design, i), env, scores, c.temperature,
                             name=f"llm {i}") for i in range(c.n_designs)]
    code, verdicts = _code_designs(chat, env, c, seed=1000 * ctx.seed + r)
    cands += code
    n = len(cands)
    designs = [*cands, L.default_design(env)]
    u = c.budget_updates
    split = u // n

    def advance_all(st, active):
        return L.designs_update(st, active, env, designs, c.ppo)

    # full budget for every design (and the even split's checkpoint)
    st = L.designs_init(k_train, env, designs, c.ppo)
    hist = []
    on = np.ones(n + 1, bool)
    for i in range(u):
        st, rec = advance_all(st, on)
        hist.append(np.asarray(rec))
        if i + 1 == split:
            ret_split = np.asarray(L.evaluate(k_eval, st, env, designs, c.eval_episodes))
            pick = int(np.argmax(np.mean(hist[-c.window:], 0)[:n]))
        bar.update()
    ret_full = np.asarray(L.evaluate(k_eval, st, env, designs, c.eval_episodes))

    out = {"n_candidates": n, "ret_full": ret_full[:n], "ret_default": ret_full[n],
           "ret_even_split": ret_split[pick], "curves": np.asarray(hist).T,
           "code_passed": len(code), "code_attempts": len(verdicts),
           "design_dims": np.asarray([d.obs_dim for d in cands])}
    for name in RULES:
        def advance(state, active):
            st2, rec = advance_all(state, np.append(active, False))
            return st2, np.asarray(rec)[:n]

        res = L.race(advance, L.designs_init(k_train, env, designs, c.ppo), n, c.rule(name),
                     u, c.rung, progress=None)
        ret = np.asarray(L.evaluate(k_eval, res.state, env, designs, c.eval_episodes))
        out[f"ret_race_{name}"] = ret[res.chosen]
        out[f"race_{name}_updates"] = res.updates
        out[f"race_{name}_chosen"] = res.chosen
        bar.update(u)
    return out


# --------------------------------------------------------------------------- run


def run(config: LoamConfig, ctx: Context) -> dict:
    c = config
    from jaxsci.common.lm.chat import open_chat_model

    env = L.make_env(c.env)
    chat = open_chat_model(c.model)
    sc = ctx.cell("option_scores", lambda: L.option_scores(chat, env))
    scores = {k: np.asarray(v) for k, v in sc.items()}
    bar = ctx.bar(total=c.repeats * c.budget_updates * (1 + len(RULES)),
                  desc="loam: training and racing designs")
    reps = []
    for r in range(c.repeats):
        key = jax.random.fold_in(ctx.key, r)
        reps.append(ctx.cell(f"repeat_{r}", lambda key=key, r=r: _repeat(
            key, scores, chat, env, c, r, ctx, bar)))
    bar.close()
    steps = c.budget_updates * c.ppo.steps_per_update

    m: dict = {}
    m["budget_env_steps"] = steps
    m["option_entropy"] = float(np.mean([_entropy(v / c.temperature) for v in scores.values()]))
    full = [np.asarray(x["ret_full"], float) for x in reps]
    m["random_single_return"] = float(np.mean([f.mean() for f in full]))
    m["oracle_best_return"] = float(np.mean([f.max() for f in full]))
    m["worst_design_return"] = float(np.mean([f.min() for f in full]))
    m["design_return_spread"] = float(np.mean([f.std() for f in full]))
    m["default_return"] = float(np.mean([float(x["ret_default"]) for x in reps]))
    m["even_split_return"] = float(np.mean([float(x["ret_even_split"]) for x in reps]))
    for name in RULES:
        m[f"race_{name}_return"] = float(np.mean([float(x[f"ret_race_{name}"]) for x in reps]))
        m[f"race_{name}_winner_share"] = float(np.mean([
            np.max(x[f"race_{name}_updates"]) / c.budget_updates for x in reps]))
        m[f"race_{name}_budget_exact"] = bool(all(
            int(np.sum(x[f"race_{name}_updates"])) == c.budget_updates for x in reps))
        m[f"race_{name}_picked_rank"] = float(np.mean([
            int(np.sum(np.asarray(x["ret_full"]) > np.asarray(x["ret_full"])[int(
                x[f"race_{name}_chosen"])])) for x in reps]))
    cr = c.claim_rule
    m["race_return"] = m[f"race_{cr}_return"]
    m["race_minus_oracle"] = m["race_return"] - m["oracle_best_return"]
    m["best_minus_default"] = m["oracle_best_return"] - m["default_return"]
    m["race_minus_random_single"] = m["race_return"] - m["random_single_return"]
    m["race_minus_even_split"] = m["race_return"] - m["even_split_return"]
    m["code_attempts"] = int(sum(int(x["code_attempts"]) for x in reps))
    m["code_gate_pass_rate"] = (float(sum(int(x["code_passed"]) for x in reps))
                                / m["code_attempts"]) if m["code_attempts"] else float("nan")
    m["design_returns"] = np.concatenate(full)

    ctx.report.add_figure(plot(reps, m, c), "loam.png",
                          "Left: recent training return of every candidate design (grey), "
                          "the default observation (black) over one run's updates. Right: "
                          "final evaluation return of each strategy at equal total steps "
                          "(the oracle uses N times the budget).")
    ctx.report.add_text(summary_markdown(reps, m, c))
    return m


def _entropy(logits) -> float:
    p = np.exp(logits - np.max(logits))
    p = p / p.sum()
    return float(-(p * np.log(np.maximum(p, 1e-30))).sum())


def plot(reps, m, c):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    curves = np.asarray(reps[0]["curves"])
    x = np.arange(1, curves.shape[1] + 1)
    for row in curves[:-1]:
        a.plot(x, row, color="grey", lw=0.8)
    a.plot(x, curves[-1], color="black", lw=1.5, label="default (raw) observation")
    a.axvline(c.budget_updates // int(reps[0]["n_candidates"]), ls=":", color="C1",
              label="even split: updates each")
    a.set_xlabel("PPO update")
    a.set_ylabel("recent training return")
    a.set_title(f"{c.env}: candidate designs, full budget each (repeat 0)")
    a.legend()
    names = ["random single", "even split", *(f"race: {r}" for r in RULES), "default obs",
             "oracle best-of-N"]
    vals = [m["random_single_return"], m["even_split_return"],
            *(m[f"race_{r}_return"] for r in RULES), m["default_return"],
            m["oracle_best_return"]]
    b.bar(np.arange(len(vals)), vals, color=["C0", "C1", "C2", "C2", "C2", "k", "C3"])
    b.set_xticks(np.arange(len(vals)), names, rotation=30, ha="right")
    b.set_xlabel("strategy")
    b.set_ylabel("final evaluation return")
    b.set_title(f"Equal total steps ({m['budget_env_steps']} env steps)")
    fig.tight_layout()
    return fig


def summary_markdown(reps, m, c) -> str:
    lines = [f"## Strategies at {m['budget_env_steps']} environment steps "
             f"(mean of {c.repeats} repeats)", "", "| strategy | final return |", "|---|---|"]
    for k, lab in (("random_single_return", "random single design (full budget)"),
                   ("even_split_return", "even budget split, best picked"),
                   *((f"race_{r}_return", f"race ({r})") for r in RULES),
                   ("default_return", "default observation (full budget)"),
                   ("oracle_best_return", "oracle best-of-N (N x budget)")):
        lines.append(f"| {lab} | {m[k]:.1f} |")
    lines += ["", "Share of the budget the race's most-trained design received: " + ", ".join(
        f"{r}: {m[f'race_{r}_winner_share']:.2f}" for r in RULES) + ".",
        f"Code designs (the model writes compute_obs / compute_action): "
        f"{m['code_attempts']} attempts, gate pass rate {m['code_gate_pass_rate']:.2f}.",
        "", "Candidate designs of repeat 0 are composed by SmolLM2's sampled option-scoring "
        "decisions (a programmatic replacement of free-text code, labelled so); their "
        "full-budget returns: " + ", ".join(f"{v:.0f}" for v in reps[0]["ret_full"]) + "."]
    return "\n".join(lines)


METRICS = (
    Metric("budget_env_steps", "one ordinary run's environment steps (the race's total)"),
    Metric("option_entropy", "mean entropy (nats) of the sampled decision distributions"),
    Metric("random_single_return", "a random candidate trained with the full budget "
           "(mean over candidates)", better="higher"),
    Metric("oracle_best_return", "the best candidate with the full budget (N x budget)",
           better="higher"),
    Metric("worst_design_return", "the worst candidate with the full budget"),
    Metric("design_return_spread", "standard deviation of the candidates' returns"),
    Metric("default_return", "the default (raw) observation with the full budget"),
    Metric("even_split_return", "budget / N updates each, the best recent return picked",
           better="higher"),
    *(Metric(f"race_{r}_return", f"racing with {r}: the answer's final return",
             better="higher") for r in RULES),
    *(Metric(f"race_{r}_winner_share", f"racing with {r}: budget share of the most-trained "
             "design") for r in RULES),
    *(Metric(f"race_{r}_budget_exact", f"racing with {r}: total updates == budget") for r
      in RULES),
    *(Metric(f"race_{r}_picked_rank", f"racing with {r}: candidates better than its answer "
             "at full budget (0: it picked the best)") for r in RULES),
    Metric("race_return", "the claim rule's race return", better="higher"),
    Metric("race_minus_oracle", "race return minus the oracle best-of-N return (which "
           "spends N times the budget)"),
    Metric("best_minus_default", "oracle best design minus the default observation"),
    Metric("race_minus_random_single", "race minus a random single design", better="higher"),
    Metric("race_minus_even_split", "race minus the even split", better="higher"),
    Metric("code_attempts", "free-text code designs asked of the model"),
    Metric("code_gate_pass_rate", "share of them that passed the gates", finite=False),
    Metric("design_returns", "every candidate's full-budget return (all repeats)"),
)

CLAIMS = (
    Claim("race_budget_exact", "Racing spends exactly one ordinary run's environment steps",
          test="race_ucb_budget_exact and race_halving_budget_exact and "
               "race_frace_budget_exact", scale="smoke"),
    Claim("race_beats_random_single", "At equal total steps, racing's final return beats "
          "a random single design", test="race_return > random_single_return"),
    Claim("race_beats_even_split", "At equal total steps, racing's final return beats an "
          "even budget split", test="race_return > even_split_return", scale="full",
          note="not reproduced at quick: race (ucb) 144.1 vs even split 145.8 (halving "
               "146.5, F-race 147.5; mean of 2 repeats). In repeat 0 the race found the "
               "one good design (169 vs 91.5 for the even split); in repeat 1 the two best "
               "designs (199 and 194 at full budget) learned slowly at first and were "
               "stopped at the first decision, after 4 updates, and the race's answer "
               "reached 119 against the even split's 200: early elimination of slow "
               "starters, the known weakness of pruning jittery RL runs; full runs 10 "
               "repeats with 16 designs"),
    Claim("designs_uneven", "Precondition: the sampled designs are of uneven quality "
          "(full-budget returns spread by more than 10% of the best)",
          test="oracle_best_return - worst_design_return > 0.1 * abs(oracle_best_return)"),
)

EXPERIMENT = Experiment(
    name="loam",
    title="LOAM: LLM-designed observation/action spaces with continuous racing",
    paper="LLM-based design of Observation and Action Models (LOAM) with continuous "
          "racing (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
