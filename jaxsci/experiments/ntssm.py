"""Reproduction: NT-SSM against bidirectional SSM on a graph with planted communities.

Data: :func:`jaxsci.data.recsys.community_interactions` (users with Dirichlet community
preferences, items in communities with a moderate Zipf popularity skew, 20% of each
user's items held out). Three arms of :func:`jaxsci.recsys.ntssm.train_grid`, each over
``seeds`` initialisations and batch orders, all ``3 x seeds`` LightGCNs trained in one
compiled program (the alphas are data):

* ``ntssm``: the paper's alphas (uu 1.2, ii 0.8, ui 0.8, iu 1.0);
* ``ssm``: every alpha 1 (the bidirectional sampled softmax);
* ``mirrored``: the paper's alphas with user and item roles exchanged (uu 0.8, ii 1.2,
  ui 1.0, iu 0.8): does the *type pattern* matter, or only that the weights differ?
* ``uniform``: every alpha 0.95, the mean of the paper's four (a control of ours: is the
  gain the type pattern, or only a smaller mean weight on the negatives?).

Members with the same seed start from the same embeddings and see the same batches
(paired). Recall@20 / NDCG@20 use full ranking with the training items masked. A
popularity ranking (the floor) and the true generating probabilities (the oracle: the
ceiling) are scored on the same split.

Claims: NT-SSM beats SSM on Recall@20 and NDCG@20 (mean over seeds); mirrored alphas do
worse than the paper's, and so does the uniform control; with every alpha 1 the NT-SSM
loss equals a separate SSM implementation to float precision (on the trained
embeddings). Precondition: SSM beats
the popularity ranking (otherwise the data carry no collaborative signal to learn).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.common import ranking
from jaxsci.core import Claim, Context, Experiment, Metric, TrainConfig
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int
from jaxsci.data import recsys
from jaxsci.recsys import ntssm as nt

__all__ = ["NTSSMExperimentConfig", "CONFIGS", "EXPERIMENT", "ARMS", "run"]

ARMS = ("ntssm", "ssm", "mirrored", "uniform")
LABELS = {"ntssm": "NT-SSM (paper's alphas)", "ssm": "SSM (all alphas 1)",
          "mirrored": "mirrored alphas", "uniform": "all alphas 0.95"}
UNIFORM = 0.95  # the mean of the paper's four alphas


@dataclasses.dataclass(frozen=True)
class NTSSMExperimentConfig:
    n_users: int = 600
    n_items: int = 500
    n_communities: int = 10
    mean_degree: float = 25.0
    zipf: float = 0.3  # moderate skew: the popularity ranking is a floor, not a rival
    concentration: float = 0.2
    noise: float = 0.05
    # The paper's model and loss at a raised learning rate (1e-2, 25 epochs). The
    # paper's 1e-3 also converges (docs/ntssm.md) and should become the default.
    model: nt.NTSSMConfig = nt.NTSSMConfig(batch_size=512, learning_rate=1e-2, epochs=25)
    seeds: int = 3
    k: int = 20

    def __post_init__(self):
        check_int("seeds", self.seeds, min=1)
        check_int("k", self.k, min=1)
        if not isinstance(self.model, nt.NTSSMConfig):
            raise TypeError(f"model must be an NTSSMConfig, got {type(self.model).__name__}")


CONFIGS = {
    "smoke": NTSSMExperimentConfig(n_users=80, n_items=60, mean_degree=10.0, seeds=1,
                                   model=nt.NTSSMConfig(dim=16, batch_size=64,
                                                        learning_rate=1e-2, epochs=2)),
    "quick": NTSSMExperimentConfig(),
    # Paper scale: ml-1m-sized graph, the authors' learning rate, batch and epoch cap, 5 seeds.
    "full": NTSSMExperimentConfig(n_users=6000, n_items=3700, mean_degree=165.0, seeds=5,
                                  model=nt.NTSSMConfig()),
}


def make_data(c: NTSSMExperimentConfig, key) -> recsys.Interactions:
    return recsys.community_interactions(
        key, n_users=c.n_users, n_items=c.n_items, n_communities=c.n_communities,
        mean_degree=c.mean_degree, zipf=c.zipf, concentration=c.concentration, noise=c.noise)


def arm_weights(name: str) -> nt.TypeWeights:
    if name == "ntssm":
        return nt.TypeWeights.paper()
    if name == "ssm":
        return nt.TypeWeights.ones()
    if name == "mirrored":
        return nt.TypeWeights.paper().mirrored()
    if name == "uniform":
        return nt.TypeWeights(UNIFORM, UNIFORM, UNIFORM, UNIFORM)
    raise ValueError(f"arm must be one of {ARMS}, got {name!r}")


def _baseline(scores: np.ndarray, d: recsys.Interactions, k: int) -> tuple[float, float]:
    m = ranking.evaluate_embeddings(jnp.asarray(scores), jnp.eye(d.n_items), d.train,
                                    d.test, ks=(k,))
    return float(m[f"recall@{k}"]), float(m[f"ndcg@{k}"])


def train_and_score(c: NTSSMExperimentConfig, ctx: Context, d: recsys.Interactions,
                    graph: nt.BipartiteGraph) -> dict[str, np.ndarray]:
    members = [(a, s) for a in ARMS for s in range(c.seeds)]
    weights = nt.TypeWeights.stack([arm_weights(a) for a, _ in members])
    seeds = np.asarray([s for _, s in members])
    steps_per_epoch = d.n_train // c.model.batch_size
    tc = TrainConfig(steps=c.model.epochs * steps_per_epoch, progress=ctx.progress,
                     log_every=steps_per_epoch, desc=f"ntssm: {len(members)} LightGCNs",
                     checkpoint_every=5 * steps_per_epoch,
                     checkpoint_dir=ctx.checkpoint_dir("grid"))
    fit = nt.train_grid(jax.random.fold_in(ctx.key, 1), graph, weights, c.model,
                        seeds=seeds, train_config=tc)
    rec, nd, gap = [], [], []
    batch = np.arange(min(c.model.batch_size, d.n_train))
    for g in range(len(members)):
        p = fit.model(g)(graph)
        m = ranking.evaluate_embeddings(p.users(), p.items(), d.train, d.test, ks=(c.k,))
        rec.append(float(m[f"recall@{c.k}"]))
        nd.append(float(m[f"ndcg@{c.k}"]))
        # alpha = 1 against the separate SSM implementation, on the trained embeddings.
        u, i = d.users[batch], d.items[batch]
        a = nt.nt_ssm_loss(p.user_even[u], p.user_odd[u], p.item_even[i], p.item_odd[i],
                           nt.TypeWeights.ones(), c.model.tau)
        b = nt.ssm_loss(p.users()[u], p.items()[i], c.model.tau)
        gap.append(abs(float(a) - float(b)) / abs(float(b)))
    shape = (len(ARMS), c.seeds)
    return {"recall": np.reshape(rec, shape), "ndcg": np.reshape(nd, shape),
            "alpha_one_gap": np.reshape(gap, shape),
            "losses": fit.losses.reshape(fit.losses.shape[0], *shape)}


def run(config: NTSSMExperimentConfig, ctx: Context) -> dict:
    c = config
    d = make_data(c, jax.random.fold_in(ctx.key, 0))
    graph = nt.bipartite_graph(d.users, d.items, d.n_users, d.n_items)
    cell = ctx.cell("grid", lambda: train_and_score(c, ctx, d, graph))
    pop = _baseline(np.tile(d.popularity, (d.n_users, 1)), d, c.k)
    oracle = _baseline(d.oracle, d, c.k)
    m: dict = {"n_users": d.n_users, "n_items": d.n_items, "n_train": d.n_train,
               "n_test": d.n_test, "seeds": c.seeds,
               "popularity_recall": pop[0], "popularity_ndcg": pop[1],
               "oracle_recall": oracle[0], "oracle_ndcg": oracle[1]}
    se = lambda x: float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0  # noqa: E731
    for j, arm in enumerate(ARMS):
        for what in ("recall", "ndcg"):
            v = cell[what][j]
            m[f"{arm}_{what}_per_seed"] = v
            m[f"{arm}_{what}"] = float(v.mean())
            m[f"{arm}_{what}_se"] = se(v)
        m[f"{arm}_final_loss"] = float(cell["losses"][-1, j].mean())
    for other in ARMS[1:]:
        j = ARMS.index(other)
        for what in ("recall", "ndcg"):
            diff = cell[what][0] - cell[what][j]  # paired by seed
            m[f"ntssm_minus_{other}_{what}"] = float(diff.mean())
            m[f"ntssm_minus_{other}_{what}_wins"] = int(np.sum(diff > 0))
    m["alpha_one_max_rel_diff"] = float(cell["alpha_one_gap"].max())
    m["loss_curves"] = cell["losses"].mean(axis=2).T  # (arm, step)

    ctx.report.add_figure(plot_results(c, m), "ntssm_recall_ndcg.png",
                          f"Recall@{c.k} and NDCG@{c.k} per arm (bars: mean over {c.seeds} "
                          "seeds, dots: seeds); dashed: popularity ranking (floor), dotted: "
                          "the generating probabilities (oracle).")
    ctx.report.add_figure(plot_losses(c, m), "ntssm_loss.png",
                          "Training loss per step (mean over seeds). The arms optimise "
                          "different objectives, so levels are not comparable across arms.")
    ctx.report.add_text(summary_markdown(c, m))
    return m


def plot_results(c, m):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), constrained_layout=True)
    for ax, what, name in ((axes[0], "recall", f"Recall@{c.k}"),
                           (axes[1], "ndcg", f"NDCG@{c.k}")):
        x = np.arange(len(ARMS))
        ax.bar(x, [m[f"{a}_{what}"] for a in ARMS], yerr=[m[f"{a}_{what}_se"] for a in ARMS],
               color=["C0", "C1", "C2", "C3"], alpha=0.7, capsize=3)
        for j, a in enumerate(ARMS):
            v = np.asarray(m[f"{a}_{what}_per_seed"])
            ax.plot(np.full(len(v), j), v, "k.", ms=4)
        ax.axhline(m[f"popularity_{what}"], color="gray", ls="--", label="popularity")
        ax.axhline(m[f"oracle_{what}"], color="k", ls=":", label="oracle")
        ax.set_xticks(x, [LABELS[a] for a in ARMS], fontsize=6, rotation=15)
        ax.set_xlabel("loss")
        ax.set_ylabel(name)
        ax.set_title(f"{name}, full ranking, training items masked")
        ax.legend(fontsize=7)
    return fig


def plot_losses(c, m):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8), constrained_layout=True)
    for j, a in enumerate(ARMS):
        ax.plot(np.asarray(m["loss_curves"])[j], label=LABELS[a], lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (per member)")
    ax.set_title("LightGCN training, one compiled grid")
    ax.legend(fontsize=7)
    return fig


def summary_markdown(c, m) -> str:
    rows = "".join(
        f"| {LABELS[a]} | {m[f'{a}_recall']:.4f} ± {m[f'{a}_recall_se']:.4f} | "
        f"{m[f'{a}_ndcg']:.4f} ± {m[f'{a}_ndcg_se']:.4f} |\n" for a in ARMS)
    return (
        f"Graph: {m['n_users']} users, {m['n_items']} items, {m['n_train']} training and "
        f"{m['n_test']} held-out interactions; {c.seeds} seeds per arm (paired).\n\n"
        f"| ranking | Recall@{c.k} | NDCG@{c.k} |\n|---|---|---|\n{rows}"
        f"| popularity (floor) | {m['popularity_recall']:.4f} | {m['popularity_ndcg']:.4f} |\n"
        f"| oracle (ceiling) | {m['oracle_recall']:.4f} | {m['oracle_ndcg']:.4f} |\n\n"
        f"- NT-SSM - SSM (paired): Recall {m['ntssm_minus_ssm_recall']:+.4f} (wins "
        f"{m['ntssm_minus_ssm_recall_wins']}/{c.seeds}), NDCG {m['ntssm_minus_ssm_ndcg']:+.4f}"
        f" (wins {m['ntssm_minus_ssm_ndcg_wins']}/{c.seeds})\n"
        f"- NT-SSM - mirrored: Recall {m['ntssm_minus_mirrored_recall']:+.4f} (wins "
        f"{m['ntssm_minus_mirrored_recall_wins']}/{c.seeds}), NDCG "
        f"{m['ntssm_minus_mirrored_ndcg']:+.4f} (wins "
        f"{m['ntssm_minus_mirrored_ndcg_wins']}/{c.seeds})\n"
        f"- NT-SSM - uniform {UNIFORM}: Recall {m['ntssm_minus_uniform_recall']:+.4f} (wins "
        f"{m['ntssm_minus_uniform_recall_wins']}/{c.seeds}), NDCG "
        f"{m['ntssm_minus_uniform_ndcg']:+.4f} (wins "
        f"{m['ntssm_minus_uniform_ndcg_wins']}/{c.seeds})\n"
        f"- alpha = 1 vs the separate SSM: largest relative difference "
        f"{m['alpha_one_max_rel_diff']:.2e}\n")


METRICS = (
    Metric("n_users", "users"), Metric("n_items", "items"),
    Metric("n_train", "training interactions"), Metric("n_test", "held-out interactions"),
    Metric("seeds", "seeds per arm"),
    Metric("popularity_recall", "Recall@k of the popularity ranking (floor)"),
    Metric("popularity_ndcg", "NDCG@k of the popularity ranking"),
    Metric("oracle_recall", "Recall@k of the generating probabilities (ceiling)"),
    Metric("oracle_ndcg", "NDCG@k of the generating probabilities"),
    *[x for a in ARMS for what in ("recall", "ndcg") for x in (
        Metric(f"{a}_{what}", f"{LABELS[a]}: mean {what}@k over seeds", better="higher"),
        Metric(f"{a}_{what}_se", f"{LABELS[a]}: its standard error"),
        Metric(f"{a}_{what}_per_seed", f"{LABELS[a]}: {what}@k per seed"),
    )],
    *[Metric(f"{a}_final_loss", f"{LABELS[a]}: last step's training loss") for a in ARMS],
    *[x for o in ARMS[1:] for what in ("recall", "ndcg") for x in (
        Metric(f"ntssm_minus_{o}_{what}", f"NT-SSM - {o}: mean paired {what}@k difference",
               better="higher"),
        Metric(f"ntssm_minus_{o}_{what}_wins", f"seeds on which NT-SSM's {what}@k is higher"),
    )],
    Metric("alpha_one_max_rel_diff", "largest |NT-SSM(alpha=1) - SSM| / SSM on trained "
           "embeddings", better="lower"),
    Metric("loss_curves", "mean training loss per arm and step"),
)

CLAIMS = (
    Claim("ntssm_beats_ssm", "NT-SSM with the paper's type weights beats SSM on Recall@20 "
          "and NDCG@20", "ntssm_minus_ssm_recall > 0 and ntssm_minus_ssm_ndcg > 0",
          paper_value="consistent gains over SSM on four datasets and three GCF backbones",
          note="synthetic community graph, 3 seeds; SSM here is the bidirectional loss "
          "(the authors' own baseline is one-directional)"),
    Claim("type_pattern_matters", "The type pattern matters: the mirrored weights do "
          "worse than the paper's", "ntssm_minus_mirrored_recall > 0 and "
          "ntssm_minus_mirrored_ndcg > 0", scale="full",
          note="not reproduced at quick: the mirrored weights did as well as the paper's "
          "or better (docs/ntssm.md). Both beat SSM and the uniform control, so on this "
          "graph the gain needs unequal type weights but not this pattern. With the "
          "paper's learning rate it holds (--set zipf=0.6 --set model.learning_rate=0.001 "
          "--set model.epochs=40, docs/ntssm.md)"),
    Claim("not_only_a_smaller_mean_weight", "The gain comes from the type pattern, not from "
          "a smaller mean weight on the negatives: NT-SSM beats every alpha = 0.95 (the "
          "paper's mean)", "ntssm_minus_uniform_recall > 0 and ntssm_minus_uniform_ndcg > 0",
          note="a control of ours, not a claim of the paper's abstract"),
    Claim("reduces_to_ssm", "With every alpha = 1 NT-SSM is exactly the (bidirectional) "
          "SSM loss", "alpha_one_max_rel_diff < 1e-5", scale="smoke"),
    Claim("ssm_beats_popularity", "Precondition: SSM beats the popularity ranking (the "
          "data carry a collaborative signal)", "ssm_recall > popularity_recall and "
          "ssm_ndcg > popularity_ndcg"),
)

EXPERIMENT = Experiment(
    name="ntssm",
    title="NT-SSM vs SSM on a graph with planted communities",
    paper="Rethinking Contrastive Learning in Graph Collaborative Filtering: Limitations "
          "and a Simple Remedy (NT-SSM, ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
