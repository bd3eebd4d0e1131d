"""Reproduction: dual forgetting and Similarity-Calibrated Retention on a small dual encoder.

The study (``docs/continual.md``):

1. **A real dual encoder, built here.** The ten captions "a photo of the digit zero" ..
   "nine" are embedded once by the frozen all-MiniLM-L6-v2 (a resumable cell). A small
   image tower on scikit-learn's 8x8 digits is aligned to them CLIP-style
   (:func:`jaxsci.llm.continual.pretrain`) on the pre-training domains
   (``pretrain_domains``: clean, rotations by 20 degrees, mild noise, thick and thin
   strokes), so
   it classifies by text prompts, zero-shot, on domains it was not trained on.
2. **Class-incremental tasks on one new domain** (``cl_domain``, digits turned by 90°, on
   which the pre-trained model is poor): the ten classes in ``n_tasks`` tasks (class order
   drawn by the seed). Each method trains on the tasks in turn
   (:func:`~jaxsci.llm.continual.train_task`); after each task, the accuracy on the
   test images of the classes seen so far (among their captions) gives the incremental
   accuracy (last and average over tasks).
3. **Pre-trained knowledge.** Zero-shot accuracy (all ten captions) on held-out domains
   (``eval_domains``, test images, graded similarity to ``cl_domain``) before and after;
   the retention ratios (denominator at least chance, 1/10), their plain mean, and SCR
   with similarities measured in the frozen pre-trained feature space
   (:func:`~jaxsci.llm.continual.scr`).
4. **Methods**: zero-shot frozen, naive fine-tuning, distillation (LwF / ZSCL-style),
   MoE adapters, DFA-MoE.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import digit_domains as dd
from jaxsci.llm import continual as cl

__all__ = ["ContinualConfig", "CONFIGS", "EXPERIMENT", "METHODS", "run"]

RETAINED = 0.9  # the claims' line: a retention at or above it "looks retained"
METHODS = ("frozen", "naive", "distill", "moe", "dfa")
LABELS = {"frozen": "zero-shot frozen", "naive": "naive fine-tune", "distill": "distillation",
          "moe": "MoE adapters", "dfa": "DFA-MoE"}


@dataclasses.dataclass(frozen=True)
class ContinualConfig:
    pretrain_domains: tuple[str, ...] = ("clean", "rot20", "rot-20", "noise10", "thick",
                                         "thin")
    cl_domain: str = "rot90"  # the pre-trained model is at chance on it
    # held-out domains, from very similar to the CL domain to unrelated
    eval_domains: tuple[str, ...] = ("rot90+noise20", "rot75", "rot105", "rot60", "clean",
                                     "rot-30", "noise30", "thick", "thin")
    n_tasks: int = 5
    n_seeds: int = 3  # class orders (and minibatch streams); metrics are their means
    test_fraction: float = 0.4
    hidden: int = 128
    rank: int = 16
    n_experts: int = 4
    pretrain_steps: int = 1500
    task_steps: int = 300
    batch: int = 64
    lr: float = 1e-3
    pretrain_lr: float = 3e-3
    logit_scale: float = cl.LOGIT_SCALE
    scr_temperature: float = cl.SCR_TEMPERATURE  # tau of SCR's weights softmax(-s / tau)
    distill_weight: float = 1.0
    dfa_contrastive: float = 0.5  # DFA-MoE's auxiliary contrastive weight
    # the cross-entropy's captions: "task" (the current task's classes, as ZSCL and MoE
    # adapters train) or "seen" (every class seen so far)
    loss_classes: str = "task"

    def __post_init__(self):
        for name in ("hidden", "rank", "n_experts", "pretrain_steps", "task_steps", "batch"):
            check_int(name, getattr(self, name), min=1)
        check_int("n_tasks", self.n_tasks, min=1, max=10)
        check_int("n_seeds", self.n_seeds, min=1)
        check_scalar("test_fraction", self.test_fraction, gt=0.0, lt=1.0)
        for name in ("lr", "pretrain_lr", "logit_scale", "scr_temperature"):
            check_scalar(name, getattr(self, name), gt=0.0)
        check_scalar("distill_weight", self.distill_weight, ge=0.0)
        check_scalar("dfa_contrastive", self.dfa_contrastive, ge=0.0)
        if self.loss_classes not in ("task", "seen"):
            raise ValueError(f"loss_classes must be 'task' or 'seen', got {self.loss_classes!r}")
        if not self.pretrain_domains or len(self.eval_domains) < 2:
            raise ValueError("pretrain_domains must name a domain and eval_domains at least 2")
        for d in (*self.pretrain_domains, self.cl_domain, *self.eval_domains):
            dd.parse(d)


CONFIGS = {
    "smoke": ContinualConfig(eval_domains=("rot75", "clean", "thin"), n_tasks=2, n_seeds=1,
                             hidden=32, rank=4, n_experts=2, pretrain_steps=100,
                             task_steps=20),
    "quick": ContinualConfig(),
    "full": ContinualConfig(n_seeds=10, pretrain_steps=5000, task_steps=1000, hidden=256, rank=32),
}


@jax.jit
def _accuracy(model, method, x, y, text, mask, scale):
    lg = cl.logits(model, x, text, method, scale=scale)
    lg = jnp.where(mask[None, :], lg, -jnp.inf)
    keep = mask[y]
    return jnp.sum((jnp.argmax(lg, -1) == y) & keep) / jnp.maximum(jnp.sum(keep), 1)


def _split(n, fraction, rng):
    perm = rng.permutation(n)
    k = int(round(fraction * n))
    return np.sort(perm[k:]), np.sort(perm[:k])


def run(config: ContinualConfig, ctx: Context) -> dict:
    c = config
    from jaxsci.common.lm.minilm import MiniLM

    text = ctx.cell("text", lambda: {"emb": MiniLM.load().embed(dd.captions())})["emb"]
    text = jnp.asarray(text, jnp.float32)
    k_classes = text.shape[0]
    rng = np.random.default_rng(ctx.seed)
    x0, y0 = dd.digits()
    tr, te = _split(len(y0), c.test_fraction, rng)
    xp = np.concatenate([dd.domain(x0[tr], d, seed=ctx.seed + i)
                         for i, d in enumerate(c.pretrain_domains)])
    yp = np.tile(y0[tr], len(c.pretrain_domains))
    kp, kt = jax.random.split(ctx.key)
    model0 = cl.init(kp, n_experts=c.n_experts, hidden=c.hidden, rank=c.rank,
                     text_dim=text.shape[1])
    model0, pre_hist = cl.pretrain(model0, xp, yp, text, kp, steps=c.pretrain_steps,
                                   batch=2 * c.batch, lr=c.pretrain_lr, scale=c.logit_scale)

    xc_tr, yc_tr = dd.domain(x0[tr], c.cl_domain, seed=101), y0[tr]
    xc_te, yc_te = dd.domain(x0[te], c.cl_domain, seed=102), y0[te]
    held = {d: dd.domain(x0[te], d, seed=200 + i) for i, d in enumerate(c.eval_domains)}
    f_cl = cl.frozen_features(model0, xc_tr)
    sim = np.asarray([float(cl.domain_similarity(f_cl, cl.frozen_features(model0, held[d])))
                      for d in c.eval_domains])
    all_cls = jnp.ones(k_classes, bool)
    scale = jnp.asarray(c.logit_scale, jnp.float32)
    frozen = cl.naive()  # the adapters are off: the pre-trained model as it is

    def zero_shot(model, method):
        return np.asarray([float(_accuracy(model, method, jnp.asarray(held[d]),
                                           jnp.asarray(y0[te]), text, all_cls, scale))
                           for d in c.eval_domains])

    before = zero_shot(model0, frozen)
    methods = {"frozen": frozen, "naive": cl.naive(), "distill": cl.distill(c.distill_weight),
               "moe": cl.moe_adapters(), "dfa": cl.dfa_moe(contrastive=c.dfa_contrastive)}
    m: dict = {"similarity": sim, "zero_shot_before": before,
               "pretrain_final_loss": float(np.mean(np.asarray(pre_hist)[-50:])),
               "zero_shot_cl_domain": float(_accuracy(model0, frozen, jnp.asarray(xc_te),
                                                      jnp.asarray(yc_te), text, all_cls,
                                                      scale))}
    bar = ctx.bar(total=c.n_seeds * (len(methods) - 1) * c.n_tasks, desc="continual: tasks")

    def one_run(name, tasks, key):
        """Train ``name`` on the tasks in turn: its accuracy curve and final model."""
        method, model = methods[name], model0
        seen = np.zeros(k_classes, bool)
        curve = []
        for t, cls in enumerate(tasks):
            seen[cls] = True
            if name != "frozen":
                pick = np.isin(yc_tr, cls)
                support = seen.copy() if c.loss_classes == "seen" else np.isin(
                    np.arange(k_classes), cls)
                model, _ = cl.train_task(model, method, xc_tr[pick], yc_tr[pick], support,
                                         xp, yp, text, jax.random.fold_in(key, t),
                                         teacher=model0.tower, steps=c.task_steps,
                                         batch=c.batch, lr=c.lr, scale=c.logit_scale)
                bar.update(1)
            curve.append(float(_accuracy(model, method, jnp.asarray(xc_te),
                                         jnp.asarray(yc_te), text, jnp.asarray(seen), scale)))
        return np.asarray(curve), model

    # Every seed: a new class order and minibatch stream, the same pre-trained model.
    orders = [rng.permutation(k_classes) for _ in range(c.n_seeds)]
    for name, method in methods.items():
        curves, afters = [], []
        for s_i, order in enumerate(orders):
            curve, model = one_run(name, np.array_split(order, c.n_tasks),
                                   jax.random.fold_in(kt, s_i))
            curves.append(curve)
            afters.append(before if name == "frozen" else zero_shot(model, method))
        curve, after = np.mean(curves, 0), np.mean(afters, 0)
        ret = np.asarray(cl.retention(jnp.asarray(after), jnp.asarray(before),
                                      floor=1.0 / k_classes))
        m[f"inc_curve_{name}"] = curve
        m[f"last_acc_{name}"] = float(curve[-1])
        m[f"last_acc_std_{name}"] = float(np.std([x[-1] for x in curves]))
        m[f"avg_inc_acc_{name}"] = float(np.mean(curve))
        m[f"zero_shot_after_{name}"] = after
        m[f"retention_{name}"] = ret
        m[f"plain_retention_{name}"] = float(np.mean(ret))
        m[f"scr_{name}"] = float(cl.scr(jnp.asarray(ret), jnp.asarray(sim),
                                        temperature=c.scr_temperature))
    bar.close()
    m["best_baseline_last_acc"] = max(m["last_acc_naive"], m["last_acc_moe"])
    ctx.report.add_figure(plot(m, c), "continual.png",
                          "Left: zero-shot retention on each held-out domain after the last "
                          "task against its similarity to the training domain (frozen "
                          "features). Right: plain mean retention and SCR per method.")
    ctx.report.add_text(summary_markdown(m, c))
    return m


def plot(m, c):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name in METHODS[1:]:
        a.scatter(m["similarity"], m[f"retention_{name}"], label=LABELS[name], s=20)
    a.axhline(1.0, color="grey", lw=0.8, ls="--")
    a.set_xlabel("similarity to the training domain (frozen features)")
    a.set_ylabel("zero-shot retention (after / before)")
    a.set_title("Retention against domain similarity")
    a.legend()
    xs = np.arange(len(METHODS))
    a_vals = [m[f"plain_retention_{k}"] for k in METHODS]
    s_vals = [m[f"scr_{k}"] for k in METHODS]
    b.bar(xs - 0.2, a_vals, 0.4, label="plain mean")
    b.bar(xs + 0.2, s_vals, 0.4, label=f"SCR (tau={c.scr_temperature})")
    b.axhline(RETAINED, color="grey", lw=0.8, ls="--")
    b.set_xticks(xs, [LABELS[k] for k in METHODS], rotation=20)
    b.set_xlabel("method")
    b.set_ylabel("retention")
    b.set_title("Plain mean vs similarity-calibrated retention")
    b.legend()
    fig.tight_layout()
    return fig


def summary_markdown(m, c) -> str:
    lines = ["## Methods", "", "| method | last inc. acc | avg inc. acc | plain retention "
             "| SCR |", "|---|---|---|---|---|"]
    for k in METHODS:
        lines.append(f"| {LABELS[k]} | {m[f'last_acc_{k}']:.3f} | {m[f'avg_inc_acc_{k}']:.3f} "
                     f"| {m[f'plain_retention_{k}']:.3f} | {m[f'scr_{k}']:.3f} |")
    lines += ["", "## Held-out domains", "", "| domain | similarity | zero-shot before | "
              + " | ".join(f"after ({LABELS[k]})" for k in METHODS[1:]) + " |",
              "|---" * (3 + len(METHODS) - 1) + "|"]
    for i, d in enumerate(c.eval_domains):
        lines.append(f"| {d} | {m['similarity'][i]:.3f} | {m['zero_shot_before'][i]:.3f} | "
                     + " | ".join(f"{m[f'zero_shot_after_{k}'][i]:.3f}" for k in METHODS[1:])
                     + " |")
    return "\n".join(lines)


METRICS = (
    Metric("similarity", "per held-out domain: similarity to the CL domain (frozen features)"),
    Metric("zero_shot_before", "per held-out domain: zero-shot accuracy of the pre-trained "
           "model"),
    Metric("pretrain_final_loss", "mean image-to-caption loss over the last 50 pre-training "
           "steps"),
    Metric("zero_shot_cl_domain", "zero-shot accuracy of the pre-trained model on the CL "
           "domain's test images"),
    *[Metric(f"inc_curve_{k}", f"{LABELS[k]}: accuracy on seen classes after each task")
      for k in METHODS],
    *[Metric(f"last_acc_{k}", f"{LABELS[k]}: accuracy on all classes after the last task",
             better="higher") for k in METHODS],
    *[Metric(f"last_acc_std_{k}", f"{LABELS[k]}: standard deviation of the last accuracy "
             "over seeds") for k in METHODS],
    *[Metric(f"avg_inc_acc_{k}", f"{LABELS[k]}: average incremental accuracy",
             better="higher") for k in METHODS],
    *[Metric(f"zero_shot_after_{k}", f"{LABELS[k]}: held-out zero-shot accuracy after")
      for k in METHODS],
    *[Metric(f"retention_{k}", f"{LABELS[k]}: per-domain retention") for k in METHODS],
    *[Metric(f"plain_retention_{k}", f"{LABELS[k]}: plain mean retention") for k in METHODS],
    *[Metric(f"scr_{k}", f"{LABELS[k]}: similarity-calibrated retention", better="higher")
      for k in METHODS],
    Metric("best_baseline_last_acc", "the higher last accuracy of naive fine-tuning and "
           "MoE adapters"),
)

CLAIMS = (
    Claim("cl_domain_is_new", "Precondition: the pre-trained model is poor on the CL domain "
          "(zero-shot accuracy below 0.5) and good on some held-out domain (above 0.7), "
          "so there is something to learn and something to forget",
          test="zero_shot_cl_domain < 0.5 and max(zero_shot_before) > 0.7"),
    Claim("plain_average_misleads", "Naive fine-tuning looks retained under the plain average "
          "of zero-shot retention but not under SCR",
          test="plain_retention_naive >= 0.9 and scr_naive < 0.9"),
    Claim("dfa_higher_scr", "DFA-MoE has higher SCR than naive fine-tuning and MoE "
          "adapters at comparable incremental accuracy (last accuracy within 0.05 of the "
          "better of the two, or above): without the accuracy condition a method that "
          "learns nothing would win", test="scr_dfa > scr_naive and scr_dfa > scr_moe and "
          "last_acc_dfa >= best_baseline_last_acc - 0.05", scale="full",
          note="not reproduced at quick: SCR DFA-MoE 0.968 against naive fine-tune 0.688 and "
               "MoE adapters 0.869, but last accuracy DFA-MoE 0.121 against 0.420 and 0.257 "
               "(means over 3 class orders); fine-tuning the whole tower is more plastic "
               "than adapters on a frozen one, and the text-to-image auxiliary loss costs "
               "the earlier classes (dfa_contrastive=0: 0.282)"),
)

EXPERIMENT = Experiment(
    name="continual",
    title="DFA-CIL / DFA-MoE with the SCR metric",
    paper="Dual forgetting in continual learning of vision-language models and "
          "Similarity-Calibrated Retention (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
