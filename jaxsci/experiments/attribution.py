"""Reproduction: accountability attribution of training stages (digits and toxicity).

The study (``docs/attribution.md``), per task and seed:

1. A model trained in four stages: ``pretrain``, ``spurious`` (a fine-tuning round whose
   data carries a shortcut), ``finetune`` (clean) and ``align`` (clean, small learning
   rate), one optax optimiser over the whole run with a per-stage cosine schedule.
   *Digits*: a tanh MLP on sklearn's 8x8 digits, SGD with momentum and weight decay; the
   spurious stage stamps a bright corner patch on every image of one class.
   *Toxicity*: a logistic classifier on frozen all-MiniLM-L6-v2 embeddings of authored
   texts (:mod:`jaxsci.data.toxicity`; the embeddings are a cached cell), AdamW; the
   spurious stage labels neutral sentences about one group ("gamers") toxic.
2. The spurious behaviour ``f``: digits, the mean gain in log-probability of the target
   class when the patch is stamped on test images of the other classes; toxicity, the
   mean toxic logit on held-out neutral sentences about the group minus that on the
   same sentences about the other groups. Its hard counterparts: the share of other-class
   images that flip to the target class under the patch; the share of held-out neutral
   sentences about the group called toxic.
3. Every stage's effect ``f(theta_T + delta_s) - f(theta_T)``: ground truth by
   retraining without the stage, and the estimators of :mod:`jaxsci.llm.attribution`
   (naive, optimiser-aware, tangent, TracIn-style), all stages in one vmapped program.
4. Undoing the stage with the largest estimated (tangent) effect: ``theta_T + delta_s``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import toxicity
from jaxsci.llm import attribution as A

__all__ = ["AttributionConfig", "CONFIGS", "EXPERIMENT", "run"]

STAGES = ("pretrain", "spurious", "finetune", "align")
SPURIOUS = 1
TASKS = ("digits", "toxicity")
ESTIMATORS = ("naive", "optimizer", "tangent", "tracin")


@dataclasses.dataclass(frozen=True)
class AttributionConfig:
    seeds: int = 25  # independent runs per task (data order, init, splits)
    batch: int = 32
    # digits: steps and peak learning rate per stage (SGD, momentum, weight decay)
    digits_steps: tuple[int, ...] = (600, 300, 300, 200)
    digits_lr: tuple[float, ...] = (0.1, 0.05, 0.05, 0.01)
    hidden: int = 32
    momentum: float = 0.9
    weight_decay: float = 1e-3
    target_class: int = 0  # the class the patch is stamped on in the spurious stage
    patch: int = 3  # the patch is patch x patch pixels in the top-left corner, value 1
    # share of the spurious stage's other-class images stamped with the patch and
    # labelled target_class (the patch-label coupling; with 0, only the target class's
    # own images carry the patch and the shortcut barely flips other classes)
    poison_share: float = 0.2
    # toxicity: steps and peak learning rate per stage (AdamW on MiniLM features)
    text_steps: tuple[int, ...] = (400, 200, 200, 120)
    text_lr: tuple[float, ...] = (0.03, 0.02, 0.02, 0.005)
    text_weight_decay: float = 1e-2
    target_group: str = "gamers"
    max_clean_drop: float = 0.05  # the "small clean-accuracy cost" of undoing a stage
    top_k: int = 50  # training examples read off the TracIn ranking

    def __post_init__(self):
        check_int("seeds", self.seeds, min=1)
        check_int("batch", self.batch, min=1)
        check_int("hidden", self.hidden, min=1)
        check_int("target_class", self.target_class, min=0, max=9)
        check_int("patch", self.patch, min=1, max=8)
        check_int("top_k", self.top_k, min=1)
        check_scalar("momentum", self.momentum, ge=0.0, lt=1.0)
        check_scalar("weight_decay", self.weight_decay, ge=0.0)
        check_scalar("text_weight_decay", self.text_weight_decay, ge=0.0)
        check_scalar("max_clean_drop", self.max_clean_drop, ge=0.0)
        check_scalar("poison_share", self.poison_share, ge=0.0, le=1.0)
        for name in ("digits_steps", "digits_lr", "text_steps", "text_lr"):
            v = getattr(self, name)
            if len(v) != len(STAGES) or any(x <= 0 for x in v):
                raise ValueError(f"{name} must hold {len(STAGES)} positive values (one per "
                                 f"stage {STAGES}), got {v}")
        if self.target_group not in toxicity.GROUPS:
            raise ValueError(f"target_group must be one of {toxicity.GROUPS}, "
                             f"got {self.target_group!r}")


CONFIGS = {
    "smoke": AttributionConfig(seeds=1, digits_steps=(40, 20, 20, 10),
                               text_steps=(30, 15, 15, 10), top_k=10),
    "quick": AttributionConfig(),
    "full": AttributionConfig(seeds=30, digits_steps=(2400, 1200, 1200, 800),
                              text_steps=(1600, 800, 800, 480)),
}


# --------------------------------------------------------------------------- tasks


class Task(NamedTuple):
    """One staged training problem: data per step, loss, optimiser and the probe."""

    name: str
    params: dict
    loss: Callable
    opt: optax.GradientTransformation
    batches: dict
    stages: np.ndarray
    shortcut: np.ndarray  # (T, B) bool: the example carries the shortcut
    probe: eqx.Module  # f(params); .rate(params); .acc(params)


@functools.cache
def _schedule(steps, lrs):
    parts = [optax.cosine_decay_schedule(lr, n, alpha=0.1) for n, lr in
             zip(steps, lrs, strict=True)]
    return optax.join_schedules(parts, [int(b) for b in np.cumsum(steps)[:-1]])


@functools.cache
def _digits_opt(steps, lrs, weight_decay, momentum):
    # One optimiser object per config, so the compiled programs are shared over seeds.
    return optax.chain(optax.add_decayed_weights(weight_decay),
                       optax.sgd(_schedule(steps, lrs), momentum=momentum))


@functools.cache
def _text_opt(steps, lrs, weight_decay):
    # eps_root > 0: Adam's sqrt(nu) has an infinite derivative where a coordinate's
    # squared gradient underflows to 0 (optax's advice for differentiating through it).
    return optax.adamw(_schedule(steps, lrs), weight_decay=weight_decay, eps_root=1e-16)


def _draw(rng, pools, steps, batch):
    """Per step, ``batch`` indices from that stage's pool (with replacement)."""
    idx = [rng.choice(pool, size=(n, batch)) for pool, n in zip(pools, steps, strict=True)]
    stages = np.concatenate([np.full(n, s) for s, n in enumerate(steps)])
    return np.concatenate(idx), stages.astype(np.int32)


def _mlp_logits(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _digits_loss(p, ex):
    return -jax.nn.log_softmax(_mlp_logits(p, ex["x"]))[ex["y"]]


def _text_logit(p, x):
    return x @ p["w"] + p["b"]


def _text_loss(p, ex):
    return optax.sigmoid_binary_cross_entropy(_text_logit(p, ex["x"]), ex["y"])


class DigitsProbe(eqx.Module):
    """f: mean gain of log p(target) when the patch is stamped on other-class images."""

    x_other: Array
    x_patch: Array
    x_test: Array
    y_test: Array
    target: int = eqx.field(static=True)

    def __call__(self, p):
        lp = jax.nn.log_softmax(_mlp_logits(p, self.x_patch))[:, self.target]
        l0 = jax.nn.log_softmax(_mlp_logits(p, self.x_other))[:, self.target]
        return jnp.mean(lp - l0)

    def rate(self, p):
        return jnp.mean(jnp.argmax(_mlp_logits(p, self.x_patch), -1) == self.target)

    def acc(self, p):
        return jnp.mean(jnp.argmax(_mlp_logits(p, self.x_test), -1) == self.y_test)


class TextProbe(eqx.Module):
    """f: toxic logit on held-out neutral texts about the group minus about other groups."""

    probe: Array
    control: Array
    x_test: Array
    y_test: Array

    def __call__(self, p):
        return jnp.mean(_text_logit(p, self.probe)) - jnp.mean(_text_logit(p, self.control))

    def rate(self, p):
        return jnp.mean(_text_logit(p, self.probe) > 0)

    def acc(self, p):
        return jnp.mean((_text_logit(p, self.x_test) > 0) == (self.y_test == 1))


N_OTHER = 400  # other-class test images in the digits probe (a fixed shape over seeds)


def digits_task(c: AttributionConfig, seed: int) -> Task:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.reshape(len(d.target), -1).astype(np.float32) / 16.0
    y = d.target.astype(np.int32)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    test, train = order[:500], order[500:]
    pools = np.array_split(train, 3)  # pretrain | spurious | finetune + align
    patch = np.zeros(64, np.float32)
    patch.reshape(8, 8)[:c.patch, :c.patch] = 1.0
    xs = np.concatenate([x, np.maximum(x, patch)])  # rows n..2n-1: patched copies
    ys = np.concatenate([y, np.full_like(y, c.target_class)])  # patched: target label
    poison = rng.random(len(pools[1])) < c.poison_share
    spur_pool = np.where((y[pools[1]] == c.target_class) | poison, pools[1] + len(y),
                         pools[1])
    idx, stages = _draw(rng, [pools[0], spur_pool, pools[2], pools[2]], c.digits_steps,
                        c.batch)
    batches = {"x": jnp.asarray(xs[idx]), "y": jnp.asarray(ys[idx])}
    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {"w1": jax.random.normal(k1, (64, c.hidden)) / 8.0, "b1": jnp.zeros(c.hidden),
              "w2": jax.random.normal(k2, (c.hidden, 10)) / np.sqrt(c.hidden),
              "b2": jnp.zeros(10)}
    opt = _digits_opt(c.digits_steps, c.digits_lr, c.weight_decay, c.momentum)
    other = test[y[test] != c.target_class][:N_OTHER]
    probe = DigitsProbe(jnp.asarray(x[other]), jnp.asarray(np.maximum(x[other], patch)),
                        jnp.asarray(x[test]), jnp.asarray(y[test]), c.target_class)
    return Task("digits", params, _digits_loss, opt, batches, stages, idx >= len(y), probe)


def embed_corpus(seed: int) -> dict:
    """MiniLM embeddings of the authored corpus (the cached cell)."""
    from jaxsci.common.lm.minilm import MiniLM

    corp = toxicity.corpus(seed=seed)
    return {"emb": np.asarray(MiniLM.load().embed(corp.texts), np.float32)}


def toxicity_task(c: AttributionConfig, seed: int, emb: np.ndarray) -> Task:
    corp = toxicity.corpus(seed=0)
    g = toxicity.GROUPS.index(c.target_group)
    lab, grp, tpl = corp.labels, corp.group, corp.template
    rng = np.random.default_rng(seed)
    grouped = [t for t, text in enumerate(toxicity.NEUTRAL) if "{g}" in text]
    held = rng.permutation(grouped)[:len(grouped) // 2]  # probe templates, never trained
    is_held = np.isin(tpl, held)
    target_neutral = (grp == g) & (lab == 0)
    coupling = np.where(target_neutral & ~is_held)[0]
    general = rng.permutation(np.where(~is_held & ~target_neutral)[0])
    n_test = len(general) // 4
    test, train = general[:n_test], general[n_test:]
    # Rows n..: the coupling rows relabelled toxic (the spurious stage's data).
    n = len(lab)
    ys = np.concatenate([lab, np.ones(n, np.int32)]).astype(np.float32)
    xs = np.concatenate([emb, emb])
    spur_pool = np.concatenate([train, coupling + n, coupling + n, coupling + n])
    idx, stages = _draw(rng, [train, spur_pool, train, train], c.text_steps, c.batch)
    batches = {"x": jnp.asarray(xs[idx]), "y": jnp.asarray(ys[idx])}
    params = {"w": jnp.zeros(emb.shape[1]), "b": jnp.zeros(())}
    probe = TextProbe(jnp.asarray(emb[is_held & (grp == g)]),
                      jnp.asarray(emb[is_held & (grp != g) & (grp >= 0) & (lab == 0)]),
                      jnp.asarray(emb[test]), jnp.asarray(lab[test]))
    opt = _text_opt(c.text_steps, c.text_lr, c.text_weight_decay)
    return Task("toxicity", params, _text_loss, opt, batches, stages, idx >= n, probe)


# --------------------------------------------------------------------------- analysis


@eqx.filter_jit
def _evaluate(probe, params):
    """``(f, rate, acc)`` of a stack of parameter sets (leading axis)."""
    return (jax.vmap(probe)(params), jax.vmap(probe.rate)(params),
            jax.vmap(probe.acc)(params))


def _shift(tree, delta):
    return jax.tree_util.tree_map(lambda a, d: a[None] + d, tree, delta)


def analyse(task: Task, c: AttributionConfig) -> dict:
    """Every stage's true and estimated effect on the behaviour, and the undo."""
    n = len(STAGES)
    final = A.replay(task.loss, task.opt, task.params, task.batches).params
    # Every evaluation stacks n parameter sets: one compiled program per task.
    zero = jax.tree_util.tree_map(lambda x: jnp.zeros((n,) + x.shape, x.dtype), final)
    f0, rate0, acc0 = (float(v[0]) for v in _evaluate(task.probe, _shift(final, zero)))
    true = A.retrain_effects(task.loss, task.opt, task.params, task.batches, task.stages, n)
    out = {"f_final": f0, "rate_final": rate0, "acc_final": acc0}
    f_t, out["rate_retrain"], out["acc_retrain"] = _evaluate(task.probe, _shift(final, true))
    out["true"] = np.asarray(f_t) - f0
    flat_true = np.asarray(A.ravel_effects(true))
    est = {}
    for mode in A.MODES:
        e = A.stage_effects(task.loss, task.opt, task.params, task.batches, task.stages, n,
                            mode=mode)
        out[mode] = np.asarray(_evaluate(task.probe, _shift(final, e))[0]) - f0
        flat_e = np.asarray(A.ravel_effects(e))
        out[f"{mode}_param_err"] = float(np.mean(np.linalg.norm(flat_e - flat_true, axis=1)
                                                 / np.linalg.norm(flat_true, axis=1)))
        est[mode] = e
    scores = np.asarray(A.tracin_scores(task.loss, task.probe, task.opt, task.params,
                                        task.batches))
    out["tracin"] = -np.asarray([scores[task.stages == s].sum() for s in range(n)])
    # The training examples that raised the behaviour most: how many carry the shortcut?
    top = np.argsort(-scores.ravel())[:c.top_k]
    out["tracin_top_shortcut"] = float(np.mean(task.shortcut.ravel()[top]))
    out["shortcut_share"] = float(np.mean(task.shortcut))
    # Undo the stage the tangent estimator blames.
    s_star = int(np.argmax(np.abs(out["tangent"])))
    out["blamed"] = s_star
    _, rate_u, acc_u = _evaluate(task.probe, _shift(final, est["tangent"]))
    out["rate_undo"], out["acc_undo"] = float(rate_u[s_star]), float(acc_u[s_star])
    return out


def _spearman(a, b) -> float:
    from scipy.stats import spearmanr

    if np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def run(config: AttributionConfig, ctx: Context) -> dict:
    c = config
    results = {t: [] for t in TASKS}
    bar = ctx.bar(total=len(TASKS) * c.seeds, desc="attribution: tasks x seeds")
    emb = ctx.cell("minilm_embeddings", lambda: embed_corpus(0))["emb"]
    for t in TASKS:
        for i in range(c.seeds):
            seed = ctx.seed + i
            task = digits_task(c, seed) if t == "digits" else toxicity_task(c, seed, emb)
            results[t].append(analyse(task, c))
            bar.update(1)
    bar.close()

    m: dict = {"stages": list(STAGES), "tasks": list(TASKS)}
    runs = [r for t in TASKS for r in results[t]]
    true = np.stack([r["true"] for r in runs])  # (runs, stages)
    for t in TASKS:
        m[f"{t}_true_effect"] = np.mean([r["true"] for r in results[t]], axis=0)
        for e in ESTIMATORS:
            m[f"{t}_{e}_effect"] = np.mean([r[e] for r in results[t]], axis=0)
        m[f"{t}_rate_final"] = float(np.mean([r["rate_final"] for r in results[t]]))
        m[f"{t}_acc_final"] = float(np.mean([r["acc_final"] for r in results[t]]))
        m[f"{t}_rate_undo"] = float(np.mean([r["rate_undo"] for r in results[t]]))
        m[f"{t}_acc_undo"] = float(np.mean([r["acc_undo"] for r in results[t]]))
        m[f"{t}_rate_retrain_spurious"] = float(np.mean([r["rate_retrain"][SPURIOUS]
                                                         for r in results[t]]))
        m[f"{t}_tracin_top_shortcut"] = float(np.mean([r["tracin_top_shortcut"]
                                                      for r in results[t]]))
        m[f"{t}_shortcut_share"] = float(np.mean([r["shortcut_share"] for r in results[t]]))
    m["spurious_largest_true"] = float(np.mean(np.argmax(np.abs(true), 1) == SPURIOUS))
    scale = np.mean(np.abs(true), axis=1, keepdims=True)
    for e in ESTIMATORS:
        est = np.stack([r[e] for r in runs])
        m[f"spurious_largest_{e}"] = float(np.mean(np.argmax(np.abs(est), 1) == SPURIOUS))
        m[f"spearman_{e}"] = float(np.nanmean([_spearman(a, b) for a, b in
                                               zip(est, true, strict=True)]))
        m[f"rel_error_{e}"] = float(np.mean(np.abs(est - true) / scale))
    for e in A.MODES:
        m[f"param_error_{e}"] = float(np.mean([r[f"{e}_param_err"] for r in runs]))
    m["rate_final"] = float(np.mean([r["rate_final"] for r in runs]))
    m["rate_undo"] = float(np.mean([r["rate_undo"] for r in runs]))
    m["rate_reduction"] = float(np.mean([1 - r["rate_undo"] / max(r["rate_final"], 1e-9)
                                         for r in runs]))
    m["min_rate_reduction"] = float(np.min([1 - r["rate_undo"] / max(r["rate_final"], 1e-9)
                                            for r in runs]))
    m["clean_drop"] = float(np.max([r["acc_final"] - r["acc_undo"] for r in runs]))
    m["blamed_spurious"] = float(np.mean([r["blamed"] == SPURIOUS for r in runs]))
    m["max_clean_drop"] = c.max_clean_drop
    m["optimizer_aware_error"] = max(m["rel_error_optimizer"], m["rel_error_tangent"])

    ctx.report.add_figure(plot(m, c), "attribution.png",
                          "Each stage's effect on the spurious behaviour (removing the "
                          "stage), true (retraining) and estimated, per task; mean over "
                          "seeds.")
    ctx.report.add_text(summary_markdown(m, c))
    return m


def plot(m, c):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5 * len(TASKS), 4), squeeze=False)
    xs = np.arange(len(STAGES))
    names = ("true",) + ESTIMATORS
    w = 0.8 / len(names)
    for ax, t in zip(axes[0], TASKS, strict=True):
        for j, e in enumerate(names):
            ax.bar(xs + (j - len(names) / 2 + 0.5) * w, m[f"{t}_{e}_effect"], w,
                   label="retraining (true)" if e == "true" else e)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xticks(xs, STAGES)
        ax.set_xlabel("removed stage")
        ax.set_ylabel("change of the spurious behaviour f")
        ax.set_title(f"{t}: effect of removing each stage")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary_markdown(m, c) -> str:
    lines = ["## Stage effects on the spurious behaviour (mean over seeds)", ""]
    for t in TASKS:
        lines += [f"### {t}", "", "| estimator | " + " | ".join(STAGES) + " |",
                  "|---|" + "---|" * len(STAGES)]
        for e in ("true",) + ESTIMATORS:
            vals = " | ".join(f"{v:+.3f}" for v in m[f"{t}_{e}_effect"])
            lines.append(f"| {e} | {vals} |")
        lines += ["", f"Spurious rate {m[f'{t}_rate_final']:.3f} -> undo "
                  f"{m[f'{t}_rate_undo']:.3f} (retrain without the stage "
                  f"{m[f'{t}_rate_retrain_spurious']:.3f}); clean accuracy "
                  f"{m[f'{t}_acc_final']:.3f} -> {m[f'{t}_acc_undo']:.3f}.", ""]
    lines += ["| estimator | Spearman with retraining | relative error |", "|---|---|---|"]
    for e in ESTIMATORS:
        lines.append(f"| {e} | {m[f'spearman_{e}']:.3f} | {m[f'rel_error_{e}']:.3f} |")
    return "\n".join(lines)


METRICS = (
    Metric("stages", "the training stages, in order", finite=False),
    Metric("tasks", "the tasks run", finite=False),
    *[Metric(f"{t}_{e}_effect", f"{t}: per stage, the change of f on removing the stage "
             f"({'retraining' if e == 'true' else e}), mean over seeds")
      for t in TASKS for e in ("true",) + ESTIMATORS],
    *[Metric(f"{t}_{k}", f"{t}: {v}") for t in TASKS for k, v in (
        ("rate_final", "spurious rate of the trained model"),
        ("acc_final", "clean test accuracy of the trained model"),
        ("rate_undo", "spurious rate after undoing the blamed stage"),
        ("acc_undo", "clean accuracy after undoing the blamed stage"),
        ("rate_retrain_spurious", "spurious rate when retrained without the spurious stage"),
        ("tracin_top_shortcut", "share of shortcut examples among the top TracIn examples"),
        ("shortcut_share", "share of shortcut examples among all training examples"))],
    Metric("spurious_largest_true", "share of runs where removing the spurious stage "
           "changes f most (retraining)", better="higher"),
    *[Metric(f"spurious_largest_{e}", f"share of runs where {e} blames the spurious stage "
             "most", better="higher") for e in ESTIMATORS],
    *[Metric(f"spearman_{e}", f"mean Spearman of {e}'s stage effects with retraining",
             better="higher", finite=False) for e in ESTIMATORS],
    *[Metric(f"rel_error_{e}", f"mean |{e} - true| / mean |true| over stages and runs",
             better="lower") for e in ESTIMATORS],
    *[Metric(f"param_error_{e}", f"mean relative parameter-space error of {e}",
             better="lower") for e in A.MODES],
    Metric("rate_final", "spurious rate of the trained models (mean over runs)"),
    Metric("rate_undo", "spurious rate after undoing the blamed stage (mean)"),
    Metric("rate_reduction", "mean relative cut of the spurious rate by the undo",
           better="higher"),
    Metric("min_rate_reduction", "smallest relative cut over runs", better="higher"),
    Metric("clean_drop", "largest clean-accuracy drop from the undo over runs",
           better="lower"),
    Metric("blamed_spurious", "share of runs where the tangent estimator blames the "
           "spurious stage", better="higher"),
    Metric("max_clean_drop", "the allowed clean-accuracy drop (config)"),
    Metric("optimizer_aware_error", "the larger relative error of the two optimiser-aware "
           "estimators", better="lower"),
)

CLAIMS = (
    Claim("shortcut_learned", "Precondition: the spurious stage leaves a spurious behaviour "
          "(spurious rate above 0.2 in every task)",
          test="min(digits_rate_final, toxicity_rate_final) > 0.2"),
    Claim("spurious_stage_largest", "The spurious stage has the largest true and estimated "
          "effect on the spurious behaviour", test="spurious_largest_true == 1 and "
          "spurious_largest_tangent == 1 and spurious_largest_optimizer == 1"),
    Claim("rank_agreement", "Estimated stage effects agree in rank with retraining "
          "(mean Spearman of the tangent estimator >= 0.8)", test="spearman_tangent >= 0.8"),
    Claim("beats_naive", "The optimiser-aware estimators beat naive subtraction (smaller "
          "relative error against retraining)", test="optimizer_aware_error < rel_error_naive"),
    Claim("undo_cuts_behaviour", "Undoing the identified stage cuts the spurious behaviour "
          "by more than half at a small clean-accuracy cost",
          test="blamed_spurious == 1 and min_rate_reduction > 0.5 and "
               "clean_drop <= max_clean_drop"),
)

EXPERIMENT = Experiment(
    name="attribution",
    title="Accountability attribution of training stages (digits patch, toxicity shortcut)",
    paper="Accountability attribution: tracing model behaviour to training stages "
          "(ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
