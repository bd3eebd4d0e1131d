"""Reproduction: TAMPO, task- and model-aware prompt routing under a preference vector.

The study (``docs/tampo.md``):

1. **Dataset.** Every task family of the bank (:mod:`jaxsci.data.routing_tasks`) is asked
   ``n_items`` questions under every prompt of the space (instruction style x few-shot
   ``k`` x verbaliser) by every arm of the pool: SmolLM2-135M-Instruct read at its last
   block and at early exits (final norm + tied head on an intermediate residual; one
   forward pass gives all of them), or any OpenAI-compatible server
   (``--set model=http://host:port/v1``). Answers are option scoring; quality is
   accuracy; cost is prompt tokens x the arm's cost per token (the share of the blocks
   it runs), normalised to ``[0, 1]``. Labels are the model's real answers.
2. **Held-out tasks.** Tasks are split into ``folds``; for each fold the reward model
   (an ensemble of MLPs on bootstrap resamples) is fitted on the other folds' tasks and
   two policies are trained offline against it: the plain proxy (``beta = 0``) and the
   pessimistic one (``beta``). The policies see the held-out tasks' label-free features
   (the proxy labels them); no held-out answer reaches either.
3. **Evaluation** on each held-out task over a sweep of ``n_w`` preferences
   ``w = (1 - w_c, w_c)``: the policy's greedy (prompt, arm), the best single global
   (prompt, arm) of the training tasks, DSPy-style random search (``search_candidates``
   random actions evaluated on the task's ``n_dev`` dev items, real calls), and the
   oracle. Realised quality is accuracy on the other ``n_items - n_dev`` items.

Programmatic replacements, named: the answer is read by option scoring (not a free-text
reply judged by a grader); the policy picks from a discrete prompt space (it does not
write prompt text); cost is counted, not predicted.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.agents import tampo as TM
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import routing_tasks as RT

__all__ = ["TampoConfig", "CONFIGS", "EXPERIMENT", "run"]

_ALL = tuple(f.name for f in RT.FAMILIES)


@dataclasses.dataclass(frozen=True)
class TampoConfig:
    model: str = "smollm2"  # "smollm2" (in-process, early exits) or a server URL
    servers: tuple[str, ...] = ()  # extra OpenAI-compatible servers joining the pool
    server_cost: float = 1.0  # cost per token of a server (the full SmolLM2 is 1)
    families: tuple[str, ...] = _ALL[:10]
    n_items: int = 6
    n_dev: int = 2  # items random search may evaluate; the rest realise every method
    styles: tuple[str, ...] = ("plain", "label", "expert")
    shots: tuple[int, ...] = (0, 1)
    verbalisers: tuple[str, ...] = ("cloze",)
    exits: tuple[int, ...] = (12, 18, 24, 30)
    folds: int = 5
    beta: float = 1.0  # pessimism of the claimed policy
    n_w: int = 11  # preference sweep w_c = 0 .. 1
    search_candidates: int = 4
    search_repeats: int = 16
    pca_dims: int = 2
    reward: TM.RewardConfig = TM.RewardConfig()
    policy: TM.PolicyConfig = TM.PolicyConfig()

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be 'smollm2' or a server URL, got {self.model!r}")
        if not self.families:
            raise ValueError("families must be non-empty, got an empty tuple")
        for f in self.families:
            RT.family(f)
        check_int("n_items", self.n_items, min=3)
        check_int("n_dev", self.n_dev, min=1, max=self.n_items - 1)
        check_int("folds", self.folds, min=2, max=len(self.families))
        check_int("n_w", self.n_w, min=3)
        check_int("search_candidates", self.search_candidates, min=1)
        check_int("search_repeats", self.search_repeats, min=1)
        check_int("pca_dims", self.pca_dims, min=0)
        check_scalar("beta", self.beta, gt=0.0)
        check_scalar("server_cost", self.server_cost, ge=0.0)
        TM.prompt_space(self.styles, self.shots, self.verbalisers)  # validates the names
        if not self.exits and self.model.lower() == "smollm2":
            raise ValueError("exits must be non-empty for the in-process model")
        if not isinstance(self.reward, TM.RewardConfig):
            raise TypeError(f"reward must be a RewardConfig, got {type(self.reward).__name__}")
        if not isinstance(self.policy, TM.PolicyConfig):
            raise TypeError(f"policy must be a PolicyConfig, got {type(self.policy).__name__}")


CONFIGS = {
    "smoke": TampoConfig(families=_ALL[:3], n_items=3, n_dev=1, styles=("plain", "label"),
                         shots=(0,), exits=(15, 30), folds=3, n_w=3,
                         search_candidates=2, search_repeats=2,
                         reward=TM.RewardConfig(members=3, width=8, steps=20),
                         policy=TM.PolicyConfig(width=8, steps=20, w_samples=4)),
    "quick": TampoConfig(),
    "full": TampoConfig(families=_ALL, n_items=24, n_dev=6, shots=(0, 1, 2),
                        verbalisers=("letters", "text", "cloze"), exits=(6, 12, 18, 24, 30),
                        folds=12, n_w=21, search_candidates=8,
                        reward=TM.RewardConfig(members=16, steps=600),
                        policy=TM.PolicyConfig(steps=800)),
}


# --------------------------------------------------------------------------- pieces


def _pool(c: TampoConfig):
    from jaxsci.common.lm.chat import LocalChat, open_chat_model

    chat = open_chat_model(c.model)
    servers = [(u, open_chat_model(u), c.server_cost) for u in c.servers]
    if isinstance(chat, LocalChat):
        return TM.ModelPool(chat, c.exits, servers)
    return TM.ModelPool(None, (), [(c.model, chat, c.server_cost), *servers])


def _spearman(x, y) -> float:
    from scipy.stats import spearmanr

    if np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def _evaluate(c: TampoConfig, data: TM.RoutingData, prompts, arms, key) -> dict:
    T = data.logp.shape[0]
    A = len(prompts) * len(arms)
    x = TM.design_matrix(data.features, prompts, arms)  # (T, A, D)
    q_all = data.quality().reshape(T, A)
    q_dev = data.quality(slice(0, c.n_dev)).reshape(T, A)
    q_test = data.quality(slice(c.n_dev, None)).reshape(T, A)
    cost = data.cost.reshape(T, A)
    fold = np.empty(T, np.int64)
    fold[np.random.default_rng(0).permutation(T)] = np.arange(T) % c.folds
    train = np.stack([fold != f for f in range(c.folds)]).astype(np.float32)  # (F, T)
    k_rm, k_pol, k_rs = jax.random.split(key, 3)

    xf = jnp.asarray(x.reshape(T * A, -1))
    yf = jnp.asarray(q_all.reshape(-1))
    weights = jnp.asarray(np.repeat(train, A, axis=1))  # (F, T * A)
    ens = eqx.filter_vmap(lambda k, w: TM.fit_ensemble(k, xf, yf, w, c.reward))(
        jax.random.split(k_rm, c.folds), weights)
    mu, sigma = eqx.filter_vmap(lambda e: e(jnp.asarray(x)))(ens)  # (F, T, A)

    betas = jnp.asarray([0.0, c.beta])
    feats = jnp.asarray(data.features)
    costj = jnp.asarray(cost)

    def train_fold(k, m, s):
        return eqx.filter_vmap(lambda b: TM.train_policy(k, feats, m, s, costj, b, c.policy))(
            betas)

    pols = eqx.filter_vmap(train_fold)(jax.random.split(k_pol, c.folds), mu, sigma)

    wc = np.linspace(0.0, 1.0, c.n_w)
    W = jnp.asarray(np.stack([1.0 - wc, wc], -1))  # (n_w, 2)
    # logits of every fold's policies for every task and preference: (F, B, T, n_w, A)
    logits = eqx.filter_vmap(eqx.filter_vmap(lambda p: p(
        jnp.broadcast_to(feats[:, None], (T, c.n_w, feats.shape[1])),
        jnp.broadcast_to(W[None], (T, c.n_w, 2)))))(pols)
    tt = np.arange(T)
    act = np.asarray(jnp.argmax(logits, -1))[fold, :, tt]  # (T, B, n_w)
    mu_own, sig_own = np.asarray(mu)[fold, tt], np.asarray(sigma)[fold, tt]  # (T, A)

    def pick(table, a):  # table (T, A), a (T, ...) -> values
        return np.take_along_axis(table, a.reshape(T, -1), 1).reshape(a.shape)

    def util(q, cst):  # q, cst (T, n_w)
        return (1.0 - wc) * q - wc * cst

    out = {"fold": fold, "wc": wc, "mu_own": mu_own, "sigma_own": sig_own,
           "sigma_train": float(np.mean([np.asarray(sigma)[f][fold != f].mean()
                                         for f in range(c.folds)]))}
    for b, name in enumerate(("neutral", "pess")):
        a = act[:, b]
        out[f"{name}_q"] = pick(q_test, a)
        out[f"{name}_cost"] = pick(cost, a)
        out[f"{name}_pred"] = pick(mu_own, a)
        out[f"{name}_sigma"] = pick(sig_own, a)
        out[f"{name}_u"] = util(out[f"{name}_q"], out[f"{name}_cost"])
    g = np.zeros((T, c.n_w), np.int64)
    for f in range(c.folds):
        tr = fold != f
        for j in range(c.n_w):
            g[fold == f, j] = int(TM.best_global(q_all[tr], cost[tr], W[j]))
    out["global_q"], out["global_cost"] = pick(q_test, g), pick(cost, g)
    out["global_u"] = util(out["global_q"], out["global_cost"])
    n = min(c.search_candidates, A)
    keys = jax.random.split(k_rs, c.search_repeats)
    rs = jax.vmap(lambda k: jax.vmap(lambda kt, qd, cs: jax.vmap(
        lambda w: TM.random_search(kt, qd, cs, w, n))(W))(
        jax.random.split(k, T), jnp.asarray(q_dev), costj))(keys)  # (R, T, n_w)
    rs = np.asarray(rs)
    rq = np.stack([pick(q_test, r) for r in rs])
    rc = np.stack([pick(cost, r) for r in rs])
    out["search_q"], out["search_cost"] = rq.mean(0), rc.mean(0)
    out["search_u"] = util(rq, rc).mean(0)
    u_all = (1.0 - wc)[None, :, None] * q_test[:, None] - wc[None, :, None] * cost[:, None]
    out["oracle_u"] = u_all.max(-1)
    return out


# --------------------------------------------------------------------------- run


def run(config: TampoConfig, ctx: Context) -> dict:
    c = config
    pool = _pool(c)
    prompts = TM.prompt_space(c.styles, c.shots, c.verbalisers)
    arms = pool.arms

    def build():
        n_batches = -(-len(c.families) * len(prompts) * c.n_items // 32)
        bar = ctx.bar(total=n_batches, desc="tampo: scoring the task x prompt x model grid")
        d = TM.build_dataset(pool, c.families, prompts, c.n_items, seed=ctx.seed,
                             pca_dims=c.pca_dims, progress=bar)
        bar.close()
        return d._asdict()

    data = TM.RoutingData(**ctx.cell("dataset", build))
    ev = ctx.cell("evaluation", lambda: _evaluate(c, data, prompts, arms, ctx.key))
    T, n_items = data.answers.shape
    q = data.quality()  # (T, P, M)

    m: dict = {}
    m["n_tasks"] = T
    m["n_actions"] = len(prompts) * len(arms)
    m["dataset_answers"] = int(T * len(prompts) * len(arms) * n_items)
    m["exit_accuracy"] = q.mean((0, 1))
    m["prompt_accuracy"] = q.mean((0, 2))
    m["task_best_accuracy"] = q.max((1, 2))
    m["arm_names"] = [a.name for a in arms]
    m["prompt_names"] = [p.name for p in prompts]
    m["accuracy_spread"] = float(q.mean(0).max() - q.mean(0).min())
    m["sigma_heldout"] = float(np.mean(ev["sigma_own"]))
    m["sigma_train"] = float(ev["sigma_train"])
    m["sigma_ratio"] = m["sigma_heldout"] / max(m["sigma_train"], 1e-12)
    for name, lab in (("neutral", "neutral"), ("pess", "pessimistic")):
        m[f"gap_{lab}"] = float(np.mean(ev[f"{name}_pred"] - ev[f"{name}_q"]))
        m[f"predicted_{lab}"] = float(np.mean(ev[f"{name}_pred"]))
        m[f"realised_{lab}"] = float(np.mean(ev[f"{name}_q"]))
        m[f"utility_{lab}"] = float(np.mean(ev[f"{name}_u"]))
    m["policy_utility"] = m["utility_pessimistic"]
    m["global_utility"] = float(np.mean(ev["global_u"]))
    m["random_search_utility"] = float(np.mean(ev["search_u"]))
    m["oracle_utility"] = float(np.mean(ev["oracle_u"]))
    m["policy_accuracy_quality_only"] = float(np.mean(ev["pess_q"][:, 0]))
    m["global_accuracy_quality_only"] = float(np.mean(ev["global_q"][:, 0]))
    m["random_search_accuracy_quality_only"] = float(np.mean(ev["search_q"][:, 0]))
    m["cost_by_w"] = ev["pess_cost"].mean(0)
    m["accuracy_by_w"] = ev["pess_q"].mean(0)
    m["cost_rank_corr"] = _spearman(ev["wc"], m["cost_by_w"])
    m["random_search_calls_per_task"] = int(min(c.search_candidates, m["n_actions"]) * c.n_dev)
    m["policy_labelled_calls_per_task"] = 0

    ctx.report.add_figure(plot(ev, m, c), "tampo.png",
                          "Left: realised cost and accuracy on held-out tasks of the "
                          "pessimistic policy against the cost weight w_c. Right: the "
                          "reward model's predicted accuracy of the chosen (prompt, "
                          "model) against the realised accuracy, plain proxy (beta=0) "
                          "and pessimistic proxy.")
    ctx.report.add_text(summary_markdown(m, c))
    return m


def plot(ev, m, c):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    wc = np.asarray(ev["wc"])
    a.plot(wc, m["cost_by_w"], "o-", label="realised cost (pessimistic policy)")
    a.plot(wc, m["accuracy_by_w"], "s-", label="realised accuracy (pessimistic policy)")
    a.plot(wc, np.asarray(ev["global_cost"]).mean(0), "--", color="grey",
           label="cost of the best global (prompt, model)")
    a.set_xlabel("cost weight w_c (w_q = 1 - w_c)")
    a.set_ylabel("held-out mean (cost normalised to [0, 1])")
    a.set_title(f"Preference sweep, Spearman(w_c, cost) = {m['cost_rank_corr']:.2f}")
    a.legend(fontsize=8)
    names = ["plain proxy (beta=0)", f"pessimistic (beta={c.beta:g})"]
    pred = [m["predicted_neutral"], m["predicted_pessimistic"]]
    real = [m["realised_neutral"], m["realised_pessimistic"]]
    xs = np.arange(2)
    b.bar(xs - 0.2, pred, 0.4, label="predicted accuracy (mu)")
    b.bar(xs + 0.2, real, 0.4, label="realised accuracy (test items)")
    b.set_xticks(xs, names)
    b.set_xlabel("policy's proxy")
    b.set_ylabel("accuracy on held-out tasks (mean over w)")
    b.set_title("Predicted vs realised on held-out tasks")
    b.legend(fontsize=8)
    fig.tight_layout()
    return fig


def summary_markdown(m, c) -> str:
    lines = [f"## Routing on held-out tasks ({m['n_tasks']} tasks, {c.folds} folds, "
             f"{m['n_actions']} (prompt, model) actions, mean over {c.n_w} preferences)", "",
             "| method | utility | accuracy at w_c = 0 | labelled calls per task |",
             "|---|---|---|---|",
             f"| TAMPO policy, pessimistic (beta={c.beta:g}) | {m['policy_utility']:.3f} | "
             f"{m['policy_accuracy_quality_only']:.3f} | 0 |",
             f"| TAMPO policy, plain proxy (beta=0) | {m['utility_neutral']:.3f} | - | 0 |",
             f"| best single global (prompt, model) | {m['global_utility']:.3f} | "
             f"{m['global_accuracy_quality_only']:.3f} | 0 |",
             f"| random search (DSPy-style, {c.search_candidates} candidates x {c.n_dev} dev "
             f"items) | {m['random_search_utility']:.3f} | "
             f"{m['random_search_accuracy_quality_only']:.3f} | "
             f"{m['random_search_calls_per_task']} |",
             f"| oracle (best action on the test items) | {m['oracle_utility']:.3f} | - | - |",
             "", "Accuracy of each arm (mean over tasks and prompts): " + ", ".join(
                 f"{n}: {v:.3f}" for n, v in zip(m["arm_names"], m["exit_accuracy"],
                                                 strict=True)) + ".",
             "Accuracy of each prompt: " + ", ".join(
                 f"{n}: {v:.3f}" for n, v in zip(m["prompt_names"], m["prompt_accuracy"],
                                                 strict=True)) + ".",
             f"Predicted minus realised accuracy of the chosen action: plain proxy "
             f"{m['gap_neutral']:+.3f}, pessimistic {m['gap_pessimistic']:+.3f}. Ensemble "
             f"sigma on held-out tasks {m['sigma_heldout']:.3f} vs training tasks "
             f"{m['sigma_train']:.3f}.",
             "", "Answers are read by option scoring (a programmatic replacement of a "
             "free-text reply and its grader); the policy picks from a discrete prompt "
             "space instead of writing prompt text."]
    return "\n".join(lines)


METRICS = (
    Metric("n_tasks", "task families in the dataset"),
    Metric("n_actions", "(prompt, model) actions"),
    Metric("dataset_answers", "answers the models gave to build the dataset"),
    Metric("exit_accuracy", "accuracy of each arm (early exit / server), mean over tasks "
           "and prompts"),
    Metric("prompt_accuracy", "accuracy of each prompt, mean over tasks and arms"),
    Metric("task_best_accuracy", "best (prompt, arm) accuracy of each task"),
    Metric("arm_names", "the arms, in order (names)", finite=False),
    Metric("prompt_names", "the prompts, in order (names)", finite=False),
    Metric("accuracy_spread", "best minus worst (prompt, arm) accuracy, mean over tasks"),
    Metric("sigma_heldout", "ensemble sigma on held-out tasks (mean over actions)"),
    Metric("sigma_train", "ensemble sigma on training tasks (mean over actions)"),
    Metric("sigma_ratio", "sigma_heldout / sigma_train"),
    *(Metric(f"gap_{n}", f"policy ({n}): predicted (mu) minus realised accuracy of its "
             "choice on held-out tasks", better="none") for n in ("neutral", "pessimistic")),
    *(Metric(f"predicted_{n}", f"policy ({n}): predicted accuracy of its choice")
      for n in ("neutral", "pessimistic")),
    *(Metric(f"realised_{n}", f"policy ({n}): realised accuracy of its choice",
             better="higher") for n in ("neutral", "pessimistic")),
    *(Metric(f"utility_{n}", f"policy ({n}): realised utility w_q q - w_c cost",
             better="higher") for n in ("neutral", "pessimistic")),
    Metric("policy_utility", "the pessimistic policy's realised utility on held-out tasks",
           better="higher"),
    Metric("global_utility", "the best single global (prompt, model) of the training "
           "tasks, realised utility on held-out tasks", better="higher"),
    Metric("random_search_utility", "DSPy-style random search, realised utility",
           better="higher"),
    Metric("oracle_utility", "the best action per task and w on the test items",
           better="higher"),
    Metric("policy_accuracy_quality_only", "pessimistic policy's accuracy at w_c = 0",
           better="higher"),
    Metric("global_accuracy_quality_only", "global best's accuracy at w_c = 0",
           better="higher"),
    Metric("random_search_accuracy_quality_only", "random search's accuracy at w_c = 0",
           better="higher"),
    Metric("cost_by_w", "realised cost of the pessimistic policy at each w_c"),
    Metric("accuracy_by_w", "realised accuracy of the pessimistic policy at each w_c"),
    Metric("cost_rank_corr", "Spearman correlation of w_c and realised cost (NaN when the "
           "cost does not vary)", finite=False),
    Metric("random_search_calls_per_task", "labelled model calls random search spends per "
           "task"),
    Metric("policy_labelled_calls_per_task", "labelled model calls the policy spends per "
           "held-out task"),
)

CLAIMS = (
    Claim("pessimism_shrinks_gap", "Pessimism (beta > 0) shrinks the gap between predicted "
          "and realised accuracy on held-out tasks",
          test="sigma_ratio > 1.0 and abs(gap_pessimistic) < abs(gap_neutral)"),
    Claim("cost_tracks_preference", "Realised cost tracks the preference weight (rank "
          "correlation <= -0.8 over a w sweep)", test="cost_rank_corr <= -0.8"),
    Claim("policy_at_least_global", "The task- and model-aware policy is at least as good as "
          "the best single global prompt",
          test="accuracy_spread > 0.05 and policy_utility >= global_utility",
          scale="full",
          note="not reproduced at quick: held-out utility 0.146 (pessimistic policy) vs "
               "0.160 for the best global (prompt, model) of the training tasks (accuracy "
               "at w_c = 0: 0.575 vs 0.625; random search 0.123). With 10 tasks of 6 items "
               "and SmolLM2-135M near chance on half of them, the label-free task features "
               "carry little about which action suits a task, and the ensemble's held-out "
               "predictions overestimate accuracy by about 0.26; full runs 12 tasks of 24 "
               "items with 27 prompts and 5 exits"),
    Claim("heterogeneity", "Precondition: the (prompt, model) choice matters (accuracy "
          "spread over actions above 0.05)", test="accuracy_spread > 0.05"),
    Claim("uncertainty_off_data", "Precondition: the ensemble is less certain on held-out "
          "tasks than on its training tasks", test="sigma_ratio > 1.0"),
)

EXPERIMENT = Experiment(
    name="tampo",
    title="TAMPO: task- and model-aware prompt optimisation for auto-routing",
    paper="TAMPO: task- and model-aware automatic prompt optimisation for auto-routing "
          "(ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
