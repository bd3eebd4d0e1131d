"""Reproduction, as a robustness evaluation: cross-modal poisoning of toy multimodal
recommenders (VenomRec's two stages against three fusion designs, with defences).

Scope: synthetic items (:func:`jaxsci.data.recsys.multimodal_items`: patch vectors and
token ids carrying each item's cluster and a popularity style) over clustered sequences
(:func:`jaxsci.data.recsys.clustered_sequences`), toy victims trained here
(:mod:`jaxsci.recsys.venomrec`). No pixels, no natural language, no pretrained encoder.

For every fusion (additive, cross-attention, gated consensus) a clean victim is trained,
then for ``n_targets`` low-popularity targets (drawn from the least popular
``target_quantile`` of the catalogue) every arm's poisoned data fine-tunes a copy of it:

* ``clean``: no fake users, no edit (the fine-tune alone);
* ``random``: fake users with uniformly drawn fillers (random injection);
* ``popular``: fake users with popularity-drawn fillers (popular-item mimicking);
* ``image``, ``text``, ``decoupled``, ``interactive``: the same fake users plus the
  target's content edited by :func:`jaxsci.recsys.venomrec.poison_items` in that mode;
* ``interactive`` at every malicious ratio in ``mr_grid`` and every budget in
  ``eps_grid`` (the robustness surface).

All members of a fusion (targets x arms x ratios x budgets) are one vmapped fine-tune
and evaluation (:func:`jaxsci.recsys.venomrec.poison_and_evaluate`). Members of one
target share the fine-tune's randomness and the sampled candidates, so arms are paired;
differences are tested over targets (z: mean paired difference over its standard
error across targets).

Claims (the paper's, on these toy victims): the attack raises ER@20 over the strongest
baseline; on the consensus victim interactive >= decoupled > best single modality; ER
rises with the malicious ratio; clean utility is kept. Preconditions: every clean victim
beats popularity, and the consensus gate does blunt single-modality edits (a smaller
single-modality gain on the gated victim than on the additive one).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxsci.common import ranking
from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import recsys
from jaxsci.recsys import venomrec as V

__all__ = ["VenomRecExperimentConfig", "CONFIGS", "EXPERIMENT", "ARMS", "run"]

ARMS = ("clean", "random", "popular", "image", "text", "decoupled", "interactive")
BASELINES = ("random", "popular", "image", "text")


@dataclasses.dataclass(frozen=True)
class VenomRecExperimentConfig:
    n_users: int = 400
    n_items: int = 200
    n_clusters: int = 8
    max_length: int = 20
    n_patches: int = 16
    n_tokens: int = 20
    mismatch_rate: float = 0.2
    # 100 fine-tuning steps (VictimConfig's default is 200) keep quick near two minutes.
    victim: V.VictimConfig = V.VictimConfig(finetune_steps=100)
    attack: V.AttackConfig = V.AttackConfig()
    n_targets: int = 8
    target_quantile: float = 0.25
    fake_length: int = 10
    mr: float = 0.02
    mr_grid: tuple[float, ...] = (0.01, 0.02, 0.05)
    eps_grid: tuple[float, ...] = (0.0, 0.025, 0.05, 0.1, 0.2)
    k: int = 20
    n_candidates: int = 100
    k_utility: int = 10
    # members fine-tuned at once (lax.map over chunks): 4 ran 1.5x a whole-grid vmap on
    # 2 CPU cores (scripts/bench/venomrec.py); None: the whole grid at once (accelerators)
    member_batch: int | None = 4

    def __post_init__(self):
        for name in ("n_users", "n_items", "n_clusters", "n_targets", "k", "k_utility"):
            check_int(name, getattr(self, name), min=1)
        check_int("n_candidates", self.n_candidates, min=self.k + 1)
        check_scalar("target_quantile", self.target_quantile, gt=0.0, le=1.0)
        if self.n_targets > max(1, int(self.target_quantile * self.n_items)):
            raise ValueError(f"n_targets ({self.n_targets}) must be <= target_quantile * "
                             f"n_items ({int(self.target_quantile * self.n_items)})")
        check_scalar("mr", self.mr, gt=0.0, lt=1.0)
        check_int("fake_length", self.fake_length, min=3, max=self.max_length - 1)
        if not self.mr_grid or any(not 0 < m < 1 for m in self.mr_grid):
            raise ValueError(f"mr_grid must be ratios in (0, 1), got {self.mr_grid}")
        if not self.eps_grid or any(e < 0 for e in self.eps_grid):
            raise ValueError(f"eps_grid must be budgets >= 0, got {self.eps_grid}")
        if min(self.mr, *self.mr_grid) * self.n_users < 1:
            raise ValueError(f"every malicious ratio must give at least one fake user "
                             f"(n_users = {self.n_users}), got {self.mr_grid}, mr = {self.mr}")


CONFIGS = {
    "smoke": VenomRecExperimentConfig(
        n_users=80, n_items=60, n_clusters=4, max_length=12, n_targets=2,
        mr=0.05, mr_grid=(0.05, 0.1), eps_grid=(0.0, 0.05),
        victim=V.VictimConfig(dim=8, steps=20, finetune_steps=5, batch_size=16),
        n_candidates=30, k=5),
    "quick": VenomRecExperimentConfig(),
    # A larger catalogue and more targets; longer training (the paper: real catalogues
    # of thousands of items, MLLM victims: out of reach here).
    "full": VenomRecExperimentConfig(
        n_users=3000, n_items=1500, n_clusters=20, max_length=30, n_targets=24,
        victim=V.VictimConfig(dim=64, steps=4000, finetune_steps=600), member_batch=None),
}


def _n_fake(mr: float, n_users: int) -> int:
    return max(1, int(round(mr * n_users)))


def _members(c, targets, edits, fakes_pop, fakes_rand, clean_p, clean_t, keys):
    """The grid of one fusion as (labels, Poisoned): per target, every arm at (mr, eps),
    then interactive over mr_grid and eps_grid."""
    labels, rows = [], []
    nf = _n_fake(c.mr, c.n_users)
    f_max = fakes_pop.shape[1]

    def add(label, ti, content, fake, n_active):
        w = (np.arange(f_max) < n_active).astype(np.float32)
        labels.append(label)
        rows.append((targets[ti], content[0], content[1], fake[ti], w, keys[ti]))

    for ti in range(len(targets)):
        clean = (clean_p[ti], clean_t[ti])
        add(("clean", c.mr, c.attack.eps), ti, clean, fakes_pop, 0)
        add(("random", c.mr, c.attack.eps), ti, clean, fakes_rand, nf)
        add(("popular", c.mr, c.attack.eps), ti, clean, fakes_pop, nf)
        for mode in V.MODES:
            add((mode, c.mr, c.attack.eps), ti, edits[mode][ti], fakes_pop, nf)
        # the grids' point at (mr, eps) is the interactive arm above: not run twice
        for mr in c.mr_grid:
            if not math.isclose(mr, c.mr):
                add(("interactive", mr, c.attack.eps), ti, edits["interactive"][ti],
                    fakes_pop, _n_fake(mr, c.n_users))
        for j, eps in enumerate(c.eps_grid):
            if not math.isclose(eps, c.attack.eps):
                add(("interactive", c.mr, eps), ti, edits["eps"][j][ti], fakes_pop, nf)
    stacked = [np.stack([np.asarray(r[i]) for r in rows]) for i in range(6)]
    return labels, V.Poisoned(*[jnp.asarray(x) for x in stacked])


def run(config: VenomRecExperimentConfig, ctx: Context) -> dict:
    c = config
    d = recsys.clustered_sequences(jax.random.fold_in(ctx.key, 0), n_users=c.n_users,
                                   n_items=c.n_items, n_clusters=c.n_clusters,
                                   max_length=c.max_length)
    pop = np.bincount(d.train[d.train >= 0], minlength=d.n_items).astype(np.float32)
    items = recsys.multimodal_items(jax.random.fold_in(ctx.key, 1), d.cluster, pop,
                                    n_patches=c.n_patches, n_tokens=c.n_tokens,
                                    mismatch_rate=c.mismatch_rate)
    P, T = jnp.asarray(items.patches), jnp.asarray(items.tokens)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(
        jax.random.fold_in(ctx.key, 2))).astype(np.uint64))
    low = np.argsort(pop + 1e-6 * rng.random(d.n_items))[:max(1, int(c.target_quantile
                                                                       * d.n_items))]
    targets = np.sort(rng.choice(low, c.n_targets, replace=False)).astype(np.int32)
    f_max = _n_fake(max(c.mr, *c.mr_grid), c.n_users)
    kf = jax.random.fold_in(ctx.key, 3)

    def fakes(stream, popularity):  # per target: popularity-drawn or uniform fillers
        k = jax.random.fold_in(kf, stream)
        return np.stack([np.asarray(V.fake_users(jax.random.fold_in(k, int(t)), int(t),
                                                 d.n_items, f_max, popularity,
                                                 length=c.fake_length)) for t in targets])

    fakes_pop, fakes_rand = fakes(0, pop), fakes(1, None)
    width = d.train.shape[1]
    fakes_pop, fakes_rand = (np.asarray(V.pad_fake(f, width)) for f in (fakes_pop, fakes_rand))
    ft_keys = np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(
        jax.random.fold_in(ctx.key, 4), int(t)))) for t in targets])
    train, lengths, test = (jnp.asarray(x) for x in (d.train, d.lengths, d.test))

    pop_eval = ranking.recall_ndcg(jnp.tile(jnp.asarray(pop), (d.n_users, 1)), train,
                                   test[:, None], ks=(c.k_utility,))
    m: dict = {"n_users": d.n_users, "n_items": d.n_items, "n_targets": c.n_targets,
               "n_fake": _n_fake(c.mr, c.n_users), "target_popularity": float(pop[targets].mean()),
               "mean_popularity": float(pop.mean()),
               "popularity_ndcg": float(jnp.mean(pop_eval[f"ndcg@{c.k_utility}"])),
               "random_er": c.k / c.n_candidates}
    bar = ctx.bar(total=2 * len(V.FUSIONS), desc="venomrec: victims")
    for fusion in V.FUSIONS:
        vc = dataclasses.replace(c.victim, fusion=fusion)
        fresh = V.init_victim(jax.random.fold_in(ctx.key, 5), d.n_items, items.vocab,
                              items.patches.shape[-1], vc)
        graphdef, state = nnx.split(fresh)
        treedef = jax.tree.structure(state)

        def train_clean(fresh=fresh, vc=vc):
            model, losses = V.train_victim(jax.random.fold_in(ctx.key, 6), fresh, P, T,
                                           train, vc)
            table = V.item_table(model, P, T)
            q = V.last_states(model, table, train, lengths)
            ev = ranking.recall_ndcg(q @ table.T, train, test[:, None], ks=(c.k_utility,))
            return {"ndcg": jnp.mean(ev[f"ndcg@{c.k_utility}"]),
                    "final_loss": float(np.mean(losses[-20:])),
                    **{f"param_{i}": np.asarray(x)
                       for i, x in enumerate(jax.tree.leaves(nnx.state(model)))}}

        cell = ctx.cell(f"clean_{fusion}", train_clean)
        model = nnx.merge(graphdef, jax.tree.unflatten(
            treedef, [cell[f"param_{i}"] for i in range(treedef.num_leaves)]))
        bar.update()

        def attack_and_evaluate(model=model, vc=vc):
            # every variant at the main budget, then interactive over the budget grid:
            # one call, one compiled program
            n_t, n_m = len(targets), len(V.MODES)
            modes = np.concatenate([np.repeat(np.arange(n_m), n_t),
                                    np.full(len(c.eps_grid) * n_t, V.MODES.index("interactive"))])
            eps = np.concatenate([np.full(n_m * n_t, c.attack.eps),
                                  np.repeat(np.asarray(c.eps_grid), n_t)]).astype(np.float32)
            xp, xt, cs = (np.asarray(x) for x in V.poison_items(
                model, P, T, pop, np.tile(targets, n_m + len(c.eps_grid)), c.attack, eps,
                modes))
            block = [list(zip(xp[j * n_t:(j + 1) * n_t], xt[j * n_t:(j + 1) * n_t],
                              strict=True)) for j in range(n_m + len(c.eps_grid))]
            edits = {mode: block[i] for i, mode in enumerate(V.MODES)}
            edits["eps"] = block[n_m:]
            cos = {mode: cs[i * n_t:(i + 1) * n_t] for i, mode in enumerate(V.MODES)}
            labels, members = _members(c, targets, edits, fakes_pop, fakes_rand,
                                       np.asarray(P[targets]), np.asarray(T[targets]), ft_keys)
            out = V.poison_and_evaluate(model, P, T, train, lengths, test, members,
                                        jax.random.fold_in(ctx.key, 7), vc, k=c.k,
                                        n_candidates=c.n_candidates, k_utility=c.k_utility,
                                        member_batch=c.member_batch)
            return {**{k: np.asarray(v) for k, v in out.items()},
                    **{f"cos_{mode}": cos[mode] for mode in V.MODES},
                    "label_arm": np.asarray([a for a, _, _ in labels]),
                    "label_mr": np.asarray([r for _, r, _ in labels], np.float32),
                    "label_eps": np.asarray([e for _, _, e in labels], np.float32)}

        g = ctx.cell(f"grid_{fusion}", attack_and_evaluate)
        bar.update()
        m.update(_fusion_metrics(c, fusion, cell, g))
    bar.close()
    m.update(_cross_fusion_metrics(c, m))
    ctx.report.add_figure(plot_arms(c, m), "venomrec_arms.png",
                          f"ER@{c.k} of the target by arm and fusion (mean over "
                          f"{c.n_targets} targets, bars: one standard error), mr = {c.mr}; "
                          f"dashed: random scores ({c.k}/{c.n_candidates}).")
    ctx.report.add_figure(plot_surface(c, m), "venomrec_surface.png",
                          "The robustness surface of the interactive attack: ER, clean "
                          "utility and detection AUC against the L-infinity budget, and ER "
                          "against the malicious ratio, per fusion.")
    ctx.report.add_text(summary_markdown(c, m))
    return m


def _z(diff) -> float:
    diff = np.asarray(diff, float)
    if len(diff) < 2:
        return 0.0
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    return float(diff.mean() / se) if se > 0 else 0.0


def _fusion_metrics(c, f, cell, g) -> dict:
    arm, mr, eps = g["label_arm"], g["label_mr"], g["label_eps"]

    def per_target(name, key="er", r=c.mr, e=c.attack.eps):
        sel = (arm == name) & np.isclose(mr, r) & np.isclose(eps, e)
        idx = np.flatnonzero(sel)
        return g[key][idx]

    out = {f"clean_ndcg_{f}": float(cell["ndcg"]), f"clean_loss_{f}": float(cell["final_loss"])}
    er = {a: per_target(a) for a in ARMS}
    for a in ARMS:
        out[f"er_{a}_{f}"] = float(er[a].mean())
        out[f"er_se_{a}_{f}"] = float(er[a].std(ddof=1) / math.sqrt(c.n_targets)) \
            if c.n_targets > 1 else 0.0
        out[f"ndcg_{a}_{f}"] = float(per_target(a, "ndcg").mean())
    for mode in V.MODES:
        out[f"cos_{mode}_{f}"] = float(g[f"cos_{mode}"][:, -1].mean())
    best_single = max(("image", "text"), key=lambda a: er[a].mean())
    best_base = max(BASELINES, key=lambda a: er[a].mean())
    out[f"single_gain_{f}"] = float(er[best_single].mean() - er["popular"].mean())
    out[f"_single_gain_per_target_{f}"] = er[best_single] - er["popular"]
    out[f"z_decoupled_vs_single_{f}"] = _z(er["decoupled"] - er[best_single])
    out[f"z_interactive_vs_decoupled_{f}"] = _z(er["interactive"] - er["decoupled"])
    out[f"gain_vs_best_baseline_{f}"] = float(er["interactive"].mean() - er[best_base].mean())
    out[f"z_vs_best_baseline_{f}"] = _z(er["interactive"] - er[best_base])
    out[f"utility_change_{f}"] = float((per_target("interactive", "ndcg").mean()
                                        - per_target("clean", "ndcg").mean())
                                       / per_target("clean", "ndcg").mean())
    for key, name in (("auc_spectral", "auc_spectral"), ("auc_clustering", "auc_clustering")):
        out[f"{name}_{f}"] = float(np.nanmean(per_target("interactive", key)))
    out[f"er_mr_{f}"] = np.asarray([per_target("interactive", r=r).mean() for r in c.mr_grid])
    for key, name in (("er", "er_eps"), ("ndcg", "ndcg_eps"), ("auc_spectral", "auc_eps")):
        out[f"{name}_{f}"] = np.asarray([np.nanmean(per_target("interactive", key, e=e))
                                         for e in c.eps_grid])
    return out


def _cross_fusion_metrics(c, m) -> dict:
    fs = V.FUSIONS
    gap = m.pop("_single_gain_per_target_additive") - m.pop("_single_gain_per_target_gated")
    m.pop("_single_gain_per_target_cross_attention")
    return {
        "z_consensus": _z(gap),
        "min_gain_vs_best_baseline": min(m[f"gain_vs_best_baseline_{f}"] for f in fs),
        "min_z_vs_best_baseline": min(m[f"z_vs_best_baseline_{f}"] for f in fs),
        "mr_monotone": float(all(np.all(np.diff(m[f"er_mr_{f}"]) >= 0) for f in fs)),
        "max_abs_utility_change": max(abs(m[f"utility_change_{f}"]) for f in fs),
        "min_clean_ndcg_over_popularity": min(m[f"clean_ndcg_{f}"] for f in fs)
        - m["popularity_ndcg"],
    }


def plot_arms(c, m):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6), constrained_layout=True)
    width = 0.8 / len(V.FUSIONS)
    x = np.arange(len(ARMS))
    for i, f in enumerate(V.FUSIONS):
        ax.bar(x + (i - (len(V.FUSIONS) - 1) / 2) * width, [m[f"er_{a}_{f}"] for a in ARMS],
               width, yerr=[m[f"er_se_{a}_{f}"] for a in ARMS], label=f, capsize=2)
    ax.axhline(m["random_er"], color="gray", ls="--", lw=0.8)
    ax.set_xticks(x, ARMS)
    ax.set_xlabel("arm (fake users + content edit)")
    ax.set_ylabel(f"ER@{c.k} of the target")
    ax.set_title(f"target exposure after fine-tuning on poisoned data (mr = {c.mr}, "
                 f"eps = {c.attack.eps})")
    ax.legend(fontsize=8)
    return fig


def plot_surface(c, m):
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), constrained_layout=True)
    for f in V.FUSIONS:
        axes[0].plot(c.eps_grid, m[f"er_eps_{f}"], "o-", label=f)
        axes[1].plot(c.eps_grid, m[f"ndcg_eps_{f}"], "o-", label=f)
        axes[2].plot(c.eps_grid, m[f"auc_eps_{f}"], "o-", label=f)
        axes[3].plot(c.mr_grid, m[f"er_mr_{f}"], "o-", label=f)
    for ax, (xl, yl) in zip(axes, (("L-inf budget eps", f"ER@{c.k}"),
                                   ("L-inf budget eps", f"utility NDCG@{c.k_utility}"),
                                   ("L-inf budget eps", "detection AUC (spectral)"),
                                   ("malicious ratio mr", f"ER@{c.k}")), strict=True):
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(f"{yl} vs {xl.split(' ')[-1]}")
    axes[2].axhline(0.5, color="gray", ls="--", lw=0.8)
    axes[0].legend(fontsize=8)
    return fig


def summary_markdown(c, m) -> str:
    head = "| arm | " + " | ".join(f"ER@{c.k} {f}" for f in V.FUSIONS) + " |\n"
    head += "|---|" + "---|" * len(V.FUSIONS) + "\n"
    rows = "".join(f"| {a} | " + " | ".join(
        f"{m[f'er_{a}_{f}']:.3f} ± {m[f'er_se_{a}_{f}']:.3f}" for f in V.FUSIONS) + " |\n"
        for a in ARMS)
    per_f = "".join(
        f"- {f}: clean NDCG@{c.k_utility} {m[f'clean_ndcg_{f}']:.4f}; interactive vs best "
        f"baseline {m[f'gain_vs_best_baseline_{f}']:+.3f} (z {m[f'z_vs_best_baseline_{f}']:+.2f})"
        f"; decoupled vs best single z {m[f'z_decoupled_vs_single_{f}']:+.2f}; interactive vs "
        f"decoupled z {m[f'z_interactive_vs_decoupled_{f}']:+.2f}; single-modality gain over "
        f"popular {m[f'single_gain_{f}']:+.3f}; utility change "
        f"{100 * m[f'utility_change_{f}']:+.2f}%; detection AUC spectral "
        f"{m[f'auc_spectral_{f}']:.2f}, clustering {m[f'auc_clustering_{f}']:.2f}; cos to "
        f"the centre " + ", ".join(f"{mode} {m[f'cos_{mode}_{f}']:.2f}" for mode in V.MODES)
        + "\n" for f in V.FUSIONS)
    return (f"{m['n_users']} users, {m['n_items']} items, {m['n_targets']} targets (mean "
            f"popularity {m['target_popularity']:.1f} against {m['mean_popularity']:.1f}), "
            f"{m['n_fake']} fake users (mr = {c.mr}), eps = {c.attack.eps}. Popularity "
            f"NDCG@{c.k_utility} {m['popularity_ndcg']:.4f}; random ER {m['random_er']:.2f}."
            f"\n\n{head}{rows}\n{per_f}")


METRICS = (
    Metric("n_users", "real users"), Metric("n_items", "items"),
    Metric("n_targets", "targets"), Metric("n_fake", "fake users at mr"),
    Metric("target_popularity", "mean training interactions of the targets"),
    Metric("mean_popularity", "mean training interactions per item"),
    Metric("popularity_ndcg", "popularity ranking NDCG@k_utility (floor)"),
    Metric("random_er", "ER@k of random scores, k / n_candidates"),
    *[x for f in V.FUSIONS for x in (
        Metric(f"clean_ndcg_{f}", f"{f}: clean victim NDCG@k_utility", better="higher"),
        Metric(f"clean_loss_{f}", f"{f}: clean victim final training loss"),
        *[y for a in ARMS for y in (
            Metric(f"er_{a}_{f}", f"{f}, {a}: ER@k of the target (mean over targets)"),
            Metric(f"er_se_{a}_{f}", f"{f}, {a}: standard error over targets"),
            Metric(f"ndcg_{a}_{f}", f"{f}, {a}: utility NDCG@k_utility after fine-tuning"))],
        *[Metric(f"cos_{mode}_{f}", f"{f}, {mode}: cosine of the edited target to the centre")
          for mode in V.MODES],
        Metric(f"single_gain_{f}", f"{f}: best single-modality ER - popular ER"),
        Metric(f"z_decoupled_vs_single_{f}", f"{f}: decoupled - best single, paired z"),
        Metric(f"z_interactive_vs_decoupled_{f}", f"{f}: interactive - decoupled, paired z"),
        Metric(f"gain_vs_best_baseline_{f}", f"{f}: interactive ER - best baseline ER"),
        Metric(f"z_vs_best_baseline_{f}", f"{f}: interactive - best baseline, paired z"),
        Metric(f"utility_change_{f}", f"{f}: relative NDCG change, interactive vs clean arm"),
        Metric(f"auc_spectral_{f}", f"{f}: spectral-signature detection AUC (interactive)",
               finite=False),
        Metric(f"auc_clustering_{f}", f"{f}: activation-clustering detection AUC",
               finite=False),
        Metric(f"er_mr_{f}", f"{f}: interactive ER@k over mr_grid"),
        Metric(f"er_eps_{f}", f"{f}: interactive ER@k over eps_grid"),
        Metric(f"ndcg_eps_{f}", f"{f}: utility over eps_grid"),
        Metric(f"auc_eps_{f}", f"{f}: spectral detection AUC over eps_grid", finite=False))],
    Metric("z_consensus", "single-modality gain, additive - gated, paired z over targets"),
    Metric("min_gain_vs_best_baseline", "smallest interactive - best baseline ER over fusions"),
    Metric("min_z_vs_best_baseline", "smallest paired z of that gain"),
    Metric("mr_monotone", "1 if interactive ER is non-decreasing in mr for every fusion"),
    Metric("max_abs_utility_change", "largest |relative NDCG change| over fusions"),
    Metric("min_clean_ndcg_over_popularity", "smallest clean NDCG - popularity NDCG"),
)

_QUICK = ("at quick (8 targets) the difference has the paper's sign on seeds 0-2 but its z "
          "is near the threshold (docs/venomrec.md has the table), too close for this size "
          "to decide; declared at full (24 targets), which was not run here")

CLAIMS = (
    Claim("beats_strongest_baseline", "The interactive attack raises the target's ER@20 over "
          "the strongest baseline (random injection, popular mimicking, single-modality "
          "edits) on every fusion design",
          "min_gain_vs_best_baseline > 0 and min_z_vs_best_baseline > 2",
          paper_value="+0.52 ER@20 over the strongest baseline, mean ER@20 0.73",
          scale="full", note="toy victims; z is paired over targets; " + _QUICK),
    Claim("consensus_blocks_single_modality", "Precondition: the consensus (gated) victim "
          "blunts single-modality edits more than additive fusion does",
          "single_gain_gated < single_gain_additive and z_consensus > 2", scale="full",
          note="the gain of the best single-modality edit over popular mimicking, per "
          "target, additive minus gated; " + _QUICK),
    Claim("interactive_geq_decoupled_gt_single", "On the consensus victim, coupled edits "
          "beat single-modality ones, and recomputing the masks on the edited other "
          "modality (interactive) is at least as good as keeping them (decoupled)",
          "er_interactive_gated >= er_decoupled_gated and z_decoupled_vs_single_gated > 2",
          scale="full", note=_QUICK),
    Claim("er_rises_with_mr", "ER rises with the malicious ratio", "mr_monotone == 1"),
    Claim("utility_kept", "Clean recommendation utility is nearly unchanged (within 5% "
          "relative NDCG of the clean fine-tune)", "max_abs_utility_change < 0.05"),
    Claim("victims_beat_popularity", "Precondition: every clean victim beats the popularity "
          "ranking", "min_clean_ndcg_over_popularity > 0"),
)

EXPERIMENT = Experiment(
    name="venomrec",
    title="Cross-modal poisoning of toy multimodal recommenders (robustness evaluation)",
    paper="VenomRec: cross-modal interactive poisoning of multimodal recommenders (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
