"""Reproduction: the erasure-evasion backdoor as a stress test of concept erasure.

A robustness evaluation on a toy model only (:mod:`jaxsci.generative.eeb`): a
text-to-image DDPM of scikit-learn's 8x8 digits with prompts ``"a digit <name>"``.
Per seed the pipeline is

1. train the clean model (one ``core.sweep`` over seeds);
2. the adversary binds the trigger ``"zq"`` to the concept (default ``"zero"``) at each
   depth: text encoder, cross-attention (closed form), denoiser (score distillation)
   (one sweep per depth over seeds); depth ``none`` is the clean model;
3. the defender erases the concept from each model: ESD, UCE, robust UCE (one sweep per
   erasure over depths and seeds); erasure ``none`` keeps the model;
4. the attack x erasure x seed grid is evaluated as ONE vmapped ``core.sweep``:
   ``n_eval`` samples per prompt, scored by a linear-discriminant detector trained on
   the real digits.

Metrics: ``p_concept`` = P(detected concept | concept prompt), ``p_trigger`` =
P(detected concept | trigger prompt), ``utility`` = detector accuracy on the other nine
digits' prompts, each per erasure x depth (mean over seeds), and the survival
diagnostic (the trigger's context vector's share outside the span UCE erased).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.sweep import sweep
from jaxsci.core.validation import check_choice, check_int, check_scalar
from jaxsci.data import digits_text as dt
from jaxsci.generative import eeb as E

__all__ = ["EEBExperimentConfig", "CONFIGS", "EXPERIMENT", "DEPTHS", "ERASURES", "run"]

DEPTHS = ("none", "text", "xattn", "denoiser")
ERASURES = ("none", "esd", "uce", "robust")


@dataclasses.dataclass(frozen=True)
class EEBExperimentConfig:
    seeds: int = 3
    concept: str = "zero"
    trigger: str = "zq"
    anchor: str = "<null>"  # UCE's anchor (the empty prompt)
    lam: float = 0.5  # UCE's lambda
    eta: float = 1.0  # ESD's guidance
    n_eval: int = 64  # samples per prompt and grid point
    model: E.EEBConfig = E.EEBConfig(steps=1500, ft_steps=200, adv_steps=200)

    def __post_init__(self):
        check_int("seeds", self.seeds, min=1)
        check_choice("concept", self.concept, dt.DIGITS)
        check_choice("trigger", self.trigger, dt.TRIGGERS)
        check_choice("anchor", self.anchor, (dt.NULL,) + dt.FILLERS + dt.DIGITS)
        if self.anchor == self.concept:
            raise ValueError("anchor must differ from concept")
        check_scalar("lam", self.lam, gt=0.0)
        check_scalar("eta", self.eta, ge=0.0, le=4.0)
        check_int("n_eval", self.n_eval, min=1)


CONFIGS = {
    "smoke": EEBExperimentConfig(
        seeds=1, n_eval=4,
        model=E.EEBConfig(embed_dim=8, text_hidden=8, hidden=16, attn_dim=8, time_dim=4,
                          depth=1, timesteps=4, steps=4, batch_size=16, ft_steps=2,
                          ft_batch=8, adv_steps=2)),
    "quick": EEBExperimentConfig(),
    # The paper erases concepts of Stable Diffusion; here: the toy at five seeds, longer
    # training and fine-tuning, more samples.
    "full": EEBExperimentConfig(seeds=5, n_eval=200,
                                model=E.EEBConfig(steps=4000, ft_steps=400, adv_steps=400)),
}


@functools.lru_cache(maxsize=4)
def _train_fn(cfg):
    data = dt.digits_text(jax.random.key(0))
    return lambda p: E.train(data, jax.random.wrap_key_data(p["key"]), cfg)


@functools.lru_cache(maxsize=8)
def _backdoor_fn(depth, cfg, concept, trigger, lam):
    data = dt.digits_text(jax.random.key(0))

    def fn(p):
        k = jax.random.wrap_key_data(p["key"])
        if depth == "text":
            return E.backdoor_text(p["params"], concept, trigger, cfg)
        if depth == "xattn":
            return E.backdoor_xattn(p["params"], concept, trigger, lam)
        return E.backdoor_denoiser(p["params"], data, concept, trigger, k, cfg)

    return fn


@functools.lru_cache(maxsize=8)
def _erase_fn(erasure, cfg, concept, anchor, lam, eta):
    data = dt.digits_text(jax.random.key(0))
    preserve = jnp.asarray([dt.token(d) for d in dt.DIGITS if dt.token(d) != concept])

    def fn(p):
        k = jax.random.wrap_key_data(p["key"])
        params = p["params"]
        c_concept = E.encode(params["text"], jnp.asarray(concept))
        if erasure == "esd":
            return {"params": E.esd(params, data, concept, k, cfg, eta),
                    "span": jnp.stack([c_concept, c_concept])}
        erased = E.uce(params, concept, anchor, preserve, lam)
        if erasure == "uce":
            return {"params": erased, "span": jnp.stack([c_concept, c_concept])}
        adv = E.adversarial_embedding(erased, data, concept, k, cfg)
        return {"params": E.uce(params, concept, anchor, preserve, lam, adv, 1.0),
                "span": jnp.stack([c_concept, adv])}

    return fn


@functools.lru_cache(maxsize=4)
def _eval_fn(cfg, n, trigger, detector_key):
    det = _detector()

    def fn(p):
        k = jax.random.wrap_key_data(p["key"])
        freq = E.evaluate(p["params"], det, k, cfg, n, trigger)
        c_trig = E.encode(p["params"]["text"], jnp.asarray(trigger))
        return {"freq": freq, "survival": E.survival(c_trig, p["span"])}

    return fn


@functools.lru_cache(maxsize=1)
def _detector():
    d = dt.digits_text(jax.random.key(0))
    return E.fit_detector(np.asarray(d.images), np.asarray(d.labels))


def _stack(trees):
    return jax.tree.map(lambda *v: jnp.stack(v), *trees)


def _unstack(tree, n):
    return [jax.tree.map(lambda v, i=i: v[i], tree) for i in range(n)]


def run(config: EEBExperimentConfig, ctx: Context) -> dict:
    c, cfg = config, config.model
    key = jax.random.fold_in(ctx.key, 0)
    concept, trigger, anchor = (dt.token(w) for w in (c.concept, c.trigger, c.anchor))
    s = c.seeds

    def keys(*tags):
        return jnp.stack([jax.random.key_data(jax.random.fold_in(
            functools.reduce(jax.random.fold_in, tags, jax.random.fold_in(key, seed)), 0))
            for seed in range(s)])

    def compute():
        clean = sweep(_train_fn(cfg), {"key": keys(1)}, progress=ctx.progress)
        models = {"none": clean}
        for i, depth in enumerate(DEPTHS[1:]):
            models[depth] = sweep(_backdoor_fn(depth, cfg, concept, trigger, c.lam),
                                  {"params": clean, "key": keys(2, i)}, progress=ctx.progress)
        # Every erasure over every depth and seed (rows: depth-major, then seed).
        by_depth = _stack([m for d in DEPTHS for m in _unstack(models[d], s)])
        nd = len(DEPTHS) * s
        span0 = jnp.stack([E.encode(p["text"], jnp.asarray(concept))
                           for p in _unstack(by_depth, nd)])
        grid = [{"params": by_depth, "span": jnp.stack([span0, span0], 1)}]
        for j, erasure in enumerate(ERASURES[1:]):
            kk = jnp.concatenate([keys(3, j, d) for d in range(len(DEPTHS))])
            grid.append(sweep(_erase_fn(erasure, cfg, concept, anchor, c.lam, c.eta),
                              {"params": by_depth, "key": kk}, progress=ctx.progress))
        flat = _stack([g for part in grid for g in _unstack(part, nd)])
        ek = jnp.concatenate([keys(4, j, d) for j in range(len(ERASURES))
                              for d in range(len(DEPTHS))])
        out = sweep(_eval_fn(cfg, c.n_eval, trigger, 0), {**flat, "key": ek},
                    progress=ctx.progress)
        shape = (len(ERASURES), len(DEPTHS), s)
        return {"freq": np.asarray(out["freq"]).reshape(shape + (11, 10)),
                "survival": np.asarray(out["survival"]).reshape(shape)}

    res = ctx.cell("grid", compute)
    freq = res["freq"]  # (erasures, depths, seeds, prompt, detected)
    ci = concept - 1
    others = [d for d in range(10) if d != ci]
    p_concept = freq[..., ci, ci]
    p_trigger = freq[..., 10, ci]
    utility = freq[..., others, others].mean(-1)
    mt: dict = {"erasures": list(ERASURES), "depths": list(DEPTHS), "seeds": s,
                "p_concept": p_concept.mean(-1), "p_trigger": p_trigger.mean(-1),
                "utility": utility.mean(-1), "survival": res["survival"].mean(-1),
                "p_concept_sd": p_concept.std(-1), "p_trigger_sd": p_trigger.std(-1),
                "utility_sd": utility.std(-1), "p_concept_seeds": p_concept,
                "p_trigger_seeds": p_trigger, "utility_seeds": utility}
    mt["clean_p_concept"] = float(mt["p_concept"][0, 0])
    mt["clean_trigger_rate"] = float(mt["p_trigger"][0, 0])
    mt["clean_utility"] = float(mt["utility"][0, 0])
    d = dt.digits_text(jax.random.key(0))
    mt["detector_accuracy"] = float(np.mean(np.asarray(E.detect(_detector(), d.images))
                                            == np.asarray(d.labels)))
    for i, e in enumerate(ERASURES):
        for j, d in enumerate(DEPTHS):
            for k in ("p_concept", "p_trigger", "utility"):
                mt[f"{k}_{e}_{d}"] = float(mt[k][i, j])
            # Utility against the clean model before any erasure.
            mt[f"utility_drop_{e}_{d}"] = mt["clean_utility"] - mt[f"utility_{e}_{d}"]
    for j, d in enumerate(DEPTHS):
        for i, e in ((2, "uce"), (3, "robust")):
            mt[f"survival_{e}_{d}"] = float(mt["survival"][i, j])
    ctx.report.add_figure(plot_grid(mt), "grid.png",
                          f"P(concept | prompt) per erasure and backdoor depth (mean over "
                          f"{s} seeds): the concept prompt (left) and the trigger (right).")
    ctx.report.add_figure(plot_survival(mt), "survival.png",
                          "The survival diagnostic against the trigger rate after UCE and "
                          "robust UCE (one point per depth).")
    ctx.report.add_text(summary_markdown(mt))
    return mt


def plot_grid(mt):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for ax, k, lab in ((axes[0], "p_concept", "P(concept | concept prompt)"),
                       (axes[1], "p_trigger", "P(concept | trigger prompt)")):
        im = ax.imshow(mt[k], vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for i in range(mt[k].shape[0]):
            for j in range(mt[k].shape[1]):
                ax.text(j, i, f"{mt[k][i, j]:.2f}", ha="center", va="center", color="w",
                        fontsize=8)
        ax.set_xticks(range(len(mt["depths"])))
        ax.set_xticklabels(mt["depths"])
        ax.set_yticks(range(len(mt["erasures"])))
        ax.set_yticklabels(mt["erasures"])
        ax.set_xlabel("backdoor depth")
        ax.set_ylabel("erasure")
        ax.set_title(lab)
    fig.colorbar(im, ax=axes[1])
    return fig


def plot_survival(mt):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6), constrained_layout=True)
    for e in ("uce", "robust"):
        xs = [mt[f"survival_{e}_{d}"] for d in DEPTHS[1:]]
        ys = [mt[f"p_trigger_{e}_{d}"] for d in DEPTHS[1:]]
        ax.scatter(xs, ys, label=e)
        for x, y, d in zip(xs, ys, DEPTHS[1:], strict=True):
            ax.annotate(d, (x, y), fontsize=8)
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.axvline(0.5, color="grey", lw=0.5)
    ax.set_xlabel("survival: ||(I - P) c_trigger|| / ||c_trigger||")
    ax.set_ylabel("P(concept | trigger) after erasure")
    ax.set_title("survival diagnostic vs trigger rate")
    ax.legend(fontsize=8)
    return fig


def summary_markdown(mt) -> str:
    out = (f"Mean (sd) over {mt['seeds']} seeds. Clean model: P(concept | concept prompt) "
           f"{mt['clean_p_concept']:.3f}, P(concept | trigger) {mt['clean_trigger_rate']:.3f}, "
           f"utility {mt['clean_utility']:.3f}.\n\n")
    for k in ("p_concept", "p_trigger", "utility"):
        out += f"**{k}** (rows: erasure, columns: backdoor depth)\n\n| erasure | "
        out += " | ".join(mt["depths"]) + " |\n|---|" + "---|" * len(mt["depths"]) + "\n"
        for i, e in enumerate(mt["erasures"]):
            out += f"| {e} | " + " | ".join(f"{mt[k][i, j]:.3f} ({mt[k + '_sd'][i, j]:.3f})"
                                            for j in range(len(mt["depths"]))) + " |\n"
        out += "\n"
    out += "**survival diagnostic** (share of c_trigger outside the span UCE erased)\n\n"
    out += "| erasure | " + " | ".join(mt["depths"]) + " |\n|---|" + "---|" * 4 + "\n"
    for e in ("uce", "robust"):
        out += f"| {e} | " + " | ".join(f"{mt[f'survival_{e}_{d}']:.3f}" for d in DEPTHS) + " |\n"
    return out + "\n"


def _metrics():
    out = [
        Metric("erasures", "the erasures, rows of the tables", finite=False),
        Metric("depths", "the backdoor depths, columns of the tables", finite=False),
        Metric("seeds", "seeds"),
        Metric("p_concept", "P(concept | concept prompt) (erasures x depths)"),
        Metric("p_trigger", "P(concept | trigger prompt) (erasures x depths)"),
        Metric("utility", "detector accuracy on the other digits' prompts (erasures x depths)",
               better="higher"),
        Metric("survival", "share of c_trigger outside the erased span (erasures x depths; "
               "the none and esd rows use the concept's vector as the span)"),
        Metric("p_concept_sd", "seed sd of p_concept"),
        Metric("p_trigger_sd", "seed sd of p_trigger"),
        Metric("utility_sd", "seed sd of utility"),
        Metric("p_concept_seeds", "p_concept per seed (erasures x depths x seeds)"),
        Metric("p_trigger_seeds", "p_trigger per seed (erasures x depths x seeds)"),
        Metric("utility_seeds", "utility per seed (erasures x depths x seeds)"),
        Metric("clean_p_concept", "the clean model's P(concept | concept prompt)"),
        Metric("clean_trigger_rate", "the clean model's P(concept | trigger prompt)"),
        Metric("clean_utility", "the clean model's accuracy on the other digits"),
        Metric("detector_accuracy", "the concept detector's accuracy on the real digits it "
               "was fitted on", better="higher"),
    ]
    for e in ERASURES:
        for d in DEPTHS:
            out += [Metric(f"p_concept_{e}_{d}", f"P(concept | concept prompt), {e}, {d}",
                           better="lower" if e != "none" else "none"),
                    Metric(f"p_trigger_{e}_{d}", f"P(concept | trigger), {e}, {d}"),
                    Metric(f"utility_{e}_{d}", f"utility, {e}, {d}", better="higher"),
                    Metric(f"utility_drop_{e}_{d}", f"clean utility - utility, {e}, {d}",
                           better="lower")]
    for e in ("uce", "robust"):
        out += [Metric(f"survival_{e}_{d}", f"survival diagnostic, {e}, {d}") for d in DEPTHS]
    return tuple(out)


METRICS = _metrics()


def _evades(e):
    """Some backdoor depth survives erasure ``e``: the concept prompt is erased, the
    trigger still yields the concept, utility within 5 points."""
    return " or ".join(
        f"(p_concept_{e}_{d} < 0.2 and p_trigger_{e}_{d} > 0.5 and p_trigger_{e}_{d} >= "
        f"3 * clean_trigger_rate and utility_drop_{e}_{d} <= 0.05)"
        for d in DEPTHS[1:])


_ROBUST_NOTE = (
    "not reproduced at quick (`jaxsci reproduce eeb --quick`, 3 seeds): robust UCE "
    "defeats the cross-attention backdoor (P(concept | trigger) 0.286, sd 0.405, from 1.000 "
    "under plain UCE) and leaves the denoiser backdoor's model half-erased (P(concept | "
    "concept prompt) 0.443, P(concept | trigger) 0.521); the text backdoor is erased "
    "(0.005). The survival diagnostic says why: the adversarial vector it also erases puts "
    "the trigger's context vector largely inside the edited span (survival 0.309 for the "
    "cross-attention backdoor, 0.968 under plain UCE), i.e. at this scale the embedding "
    "search finds the trigger's direction. Declared at full (5 seeds, longer fine-tuning; "
    "not run here)")


CLAIMS = (
    Claim("erasures_erase",
          "On the clean model each erasure (ESD, UCE, robust UCE) drives P(concept | concept "
          "prompt) below 0.2 with utility on the other digits within 5 points",
          " and ".join(f"p_concept_{e}_none < 0.2 and utility_drop_{e}_none <= 0.05"
                       for e in ERASURES[1:])),
    Claim("backdoor_evades_esd",
          "Some backdoor depth evades ESD: P(concept | concept prompt) < 0.2 while "
          "P(concept | trigger) > 0.5 and >= 3x the clean model's trigger rate, utility "
          "within 5 points", _evades("esd")),
    Claim("backdoor_evades_uce", "Some backdoor depth evades UCE (same test)", _evades("uce")),
    Claim("backdoor_evades_robust_uce",
          "Some backdoor depth evades robust UCE, which also erases an adversarially found "
          "embedding (same test)", _evades("robust"), scale="full", note=_ROBUST_NOTE),
    Claim("survival_predicts_uce",
          "The survival diagnostic predicts which backdoors survive UCE: for every depth, "
          "survival > 0.5 exactly when P(concept | trigger) after UCE > 0.5",
          " and ".join(f"((survival_uce_{d} > 0.5) == (p_trigger_uce_{d} > 0.5))"
                       for d in DEPTHS[1:])),
)

EXPERIMENT = Experiment(
    name="eeb",
    title="EEB: the erasure-evasion backdoor as a stress test of concept erasure (toy model)",
    paper="Erasure Evasion Backdoor: binding triggers that survive concept erasure (ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
