"""Reproduction: semantic isotropy of sampled responses as a trust signal, on SmolLM2.

The pipeline (``docs/isotropy.md``):

1. Prompts from the fact table (:mod:`jaxsci.data.facts`): "tell me about COUNTRY:" and
   the asked facts (``attributes``: capital and continent at quick, also the language
   at full), rendered with SmolLM2's chat template.
2. ``n_samples`` responses per prompt sampled from the in-process SmolLM2-135M-Instruct
   at ``temperature`` (0.7, the issue's), all prompts in batched programs; one extra
   forward over prompt + response gives each response's mean token NLL and its hidden
   state at ``eigen_layer`` (the response's last token), for EigenScore.
3. Labels without an LLM judge: a response's nonfactuality is the share of the asked
   facts it does not state correctly; a prompt's is the mean over its responses, and a
   prompt is "majority-wrong" when that mean exceeds 1/2.
4. Each response embedded by all-MiniLM-L6-v2 after the authors' header ("The following
   is an excerpt from a text about: 'COUNTRY'"), then
   :func:`jaxsci.llm.isotropy.trust_signals` over all prompts in one jitted ``vmap``,
   and a second ``vmap`` over masks gives the sample-size curve ``N = 2 .. n_samples``
   from the same bank.

The sampled bank (texts, NLLs, hidden states) is a resumable cell: an interrupted run
picks up after it, and every later statistic is recomputed from it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core import Claim, Context, Experiment, Metric
from jaxsci.core.results import pyplot
from jaxsci.core.validation import check_int, check_scalar
from jaxsci.data import facts
from jaxsci.llm import isotropy as iso

__all__ = ["IsotropyConfig", "CONFIGS", "EXPERIMENT", "run"]

SIGNALS = iso.Signals._fields  # isotropy, cosine, eigenscore, lexical, nll
PROMPTS = {"capital": "its capital city", "continent": "the continent it is on",
           "language": "its main language"}
HEADER = "The following is an excerpt from a text about: '{entity}'\n\n"


@dataclasses.dataclass(frozen=True)
class IsotropyConfig:
    n_prompts: int = 48  # countries (of the 48 in the fact table), chosen by the seed
    n_samples: int = 6  # responses per prompt (the paper: "a handful")
    max_new_tokens: int = 40  # the token budget per response
    # The facts asked for and checked: what fits the token budget (with 48 tokens and
    # all three asked, SmolLM2 named the language in 10% of responses, so a "wrong"
    # label mostly meant "cut off"; docs/isotropy.md).
    attributes: tuple[str, ...] = ("capital", "continent")
    temperature: float = 0.7  # the sampling temperature
    top_p: float = 1.0
    batch_rows: int = 64  # sequences per generation / forward program
    eigen_layer: int = 15  # SmolLM2 has 30 blocks: INSIDE reads a middle layer
    jitter: float = iso.JITTER
    alpha: float = iso.EIGENSCORE_ALPHA
    wrong_threshold: float = 0.5  # majority-wrong: mean nonfactuality above this
    n_boot: int = 1000  # bootstrap resamples of prompts for the confidence intervals

    def __post_init__(self):
        check_int("n_prompts", self.n_prompts, min=4, max=len(facts.COUNTRIES))
        check_int("n_samples", self.n_samples, min=2)
        check_int("max_new_tokens", self.max_new_tokens, min=1)
        check_scalar("temperature", self.temperature, gt=0.0)
        check_scalar("top_p", self.top_p, gt=0.0, le=1.0)
        check_int("batch_rows", self.batch_rows, min=1)
        check_int("eigen_layer", self.eigen_layer, min=0, max=30)
        check_scalar("jitter", self.jitter, ge=0.0)
        check_scalar("alpha", self.alpha, gt=0.0)
        check_scalar("wrong_threshold", self.wrong_threshold, gt=0.0, lt=1.0)
        check_int("n_boot", self.n_boot, min=10)
        if not self.attributes or any(a not in facts.ATTRIBUTES for a in self.attributes):
            raise ValueError(f"attributes must be a non-empty subset of {facts.ATTRIBUTES}, "
                             f"got {self.attributes}")


CONFIGS = {
    "smoke": IsotropyConfig(n_prompts=4, n_samples=3, max_new_tokens=8, n_boot=20),
    "quick": IsotropyConfig(),
    "full": IsotropyConfig(n_samples=20, max_new_tokens=160,
                           attributes=("capital", "continent", "language")),
}


# --------------------------------------------------------------------------- sampling


def prompt_text(country: facts.Country, attributes: tuple[str, ...]) -> str:
    """The user turn: a short paragraph about ``country`` naming the asked facts."""
    asked = [PROMPTS[a] for a in attributes]
    listed = asked[0] if len(asked) == 1 else ", ".join(asked[:-1]) + " and " + asked[-1]
    return f"In two or three sentences, tell me about {country.name}: {listed}."


def sample_bank(c: IsotropyConfig, countries, key, progress_bar=None) -> dict:
    """Sample the responses and measure their NLL and hidden states (the cached cell).

    The NLL is the mean of the generated tokens' log-probabilities under the untempered
    model, read from the logits each token was sampled from (a final stop id included);
    the hidden state is the stream after ``eigen_layer`` at the response's last token, from
    a forward pass through the blocks up to that layer only."""
    from jaxsci.common.lm.chat import LocalChat
    from jaxsci.common.lm.engine import Engine

    engine = Engine.smollm2()
    chat = LocalChat(engine, model_id="smollm2")
    n_layers = engine.model.config.n_layers
    layer = min(c.eigen_layer, n_layers)
    prompts = [engine.tokenizer.encode(chat.prompt(
        [{"role": "user", "content": prompt_text(x, c.attributes)}])) for x in countries]
    rows = [(i, p) for i, p in enumerate(prompts) for _ in range(c.n_samples)]
    texts, nll, hidden = [], [], []
    for b, lo in enumerate(range(0, len(rows), c.batch_rows)):
        chunk = rows[lo:lo + c.batch_rows]
        done = engine.generate([p for _, p in chunk], c.max_new_tokens,
                               temperature=c.temperature, top_p=c.top_p,
                               key=jax.random.fold_in(key, b), logprobs=True)
        # a generated row holds at least its first token (possibly a stop id)
        seqs = [p + comp.tokens for (_, p), comp in zip(chunk, done, strict=True)]
        states = engine.hidden_states(seqs, (layer,))
        texts += [comp.text for comp in done]
        nll += [-float(np.mean(comp.logprobs)) for comp in done]
        hidden += [st[0, len(s) - 1] for s, st in zip(seqs, states, strict=True)]
        if progress_bar is not None:
            progress_bar.update(len(chunk))
    shape = (len(countries), c.n_samples)
    return {"texts": np.asarray(texts).reshape(shape),
            "nll": np.asarray(nll, np.float32).reshape(shape),
            "hidden": np.stack(hidden).reshape(*shape, -1)}


# --------------------------------------------------------------------------- statistics


def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties; NaN if either is constant)."""
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def auroc(score: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney)."""
    pos, neg = score[positive], score[~positive]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def bootstrap(stat, n: int, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """The 2.5% and 97.5% quantiles of ``stat(idx)`` over resamples of ``n`` prompts."""
    vals = np.asarray([stat(rng.integers(0, n, n)) for _ in range(n_boot)])
    vals = vals[np.isfinite(vals)]
    if len(vals) == 0:
        return float("nan"), float("nan")
    return float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))


@jax.jit
def _signals(emb, hidden, bags, nll, masks, jitter, alpha):
    one = jax.vmap(lambda e, h, b, n, m: iso.trust_signals(e, h, b, n, m, jitter=jitter,
                                                           alpha=alpha))
    return jax.vmap(lambda m: one(emb, hidden, bags, nll,
                                  jnp.broadcast_to(m, emb.shape[:2])))(masks)


def run(config: IsotropyConfig, ctx: Context) -> dict:
    c = config
    from jaxsci.common.lm.minilm import MiniLM

    rng = np.random.default_rng(ctx.seed)
    pick = np.sort(rng.permutation(len(facts.COUNTRIES))[:c.n_prompts])
    countries = [facts.COUNTRIES[i] for i in pick]
    bar = ctx.bar(total=c.n_prompts * c.n_samples, desc="isotropy: sampling SmolLM2")
    bank = ctx.cell("bank", lambda: sample_bank(c, countries, ctx.key, bar))
    bar.close()
    texts = bank["texts"].astype(str)

    nonfact = np.asarray([[facts.nonfactuality(x, t, c.attributes) for t in row]
                          for x, row in zip(countries, texts, strict=True)])
    per_prompt = nonfact.mean(axis=1)
    wrong = per_prompt > c.wrong_threshold

    minilm = MiniLM.load()
    flat = [HEADER.format(entity=x.name) + t for x, row in zip(countries, texts, strict=True)
            for t in row]
    emb = minilm.embed(flat).reshape(c.n_prompts, c.n_samples, -1)
    bags = iso.bag_of_words([list(row) for row in texts])
    ns = np.arange(2, c.n_samples + 1)
    masks = np.arange(c.n_samples)[None, :] < ns[:, None]  # (curve, N)
    sig = _signals(jnp.asarray(emb), jnp.asarray(bank["hidden"]), jnp.asarray(bags),
                   jnp.asarray(bank["nll"]), jnp.asarray(masks), c.jitter, c.alpha)
    sig = {k: np.asarray(v) for k, v in sig._asdict().items()}  # each (curve, prompts)

    m: dict = {"countries": [x.name for x in countries],
               "nonfactuality": per_prompt,
               "mean_nonfactuality": float(per_prompt.mean()),
               "fact_accuracy": {a: float(np.mean([[facts.check_facts(x, t, c.attributes)[a]
                                                     for t in row]
                                                   for x, row in zip(countries, texts,
                                                                     strict=True)]))
                                 for a in c.attributes},
               "n_majority_wrong": int(wrong.sum()),
               "n_majority_right": int((~wrong).sum()),
               "mean_response_tokens_nll": float(bank["nll"].mean()),
               "sample_sizes": ns}
    boot_rng = np.random.default_rng(ctx.seed + 1)
    for name in SIGNALS:
        s = sig[name][-1]
        m[f"{name}_values"] = s
        m[f"spearman_{name}"] = spearman(s, per_prompt)
        m[f"auroc_{name}"] = auroc(s, wrong)
        m[f"spearman_{name}_by_n"] = np.asarray([spearman(v, per_prompt) for v in sig[name]])
        m[f"auroc_{name}_by_n"] = np.asarray([auroc(v, wrong) for v in sig[name]])
    lo, hi = bootstrap(lambda i: spearman(sig["isotropy"][-1][i], per_prompt[i]),
                       c.n_prompts, c.n_boot, boot_rng)
    m["spearman_isotropy_ci_low"], m["spearman_isotropy_ci_high"] = lo, hi
    lo, hi = bootstrap(lambda i: auroc(sig["isotropy"][-1][i], wrong[i]),
                       c.n_prompts, c.n_boot, boot_rng)
    m["auroc_isotropy_ci_low"], m["auroc_isotropy_ci_high"] = lo, hi
    base = np.asarray([m[f"auroc_{k}"] for k in SIGNALS[1:]])
    m["best_baseline_auroc"] = float(np.max(base)) if np.isfinite(base).any() else float("nan")
    m["isotropy_range"] = np.asarray([sig["isotropy"][-1].min(), sig["isotropy"][-1].max()])

    ctx.report.add_figure(plot(m, sig["isotropy"][-1], per_prompt, wrong), "isotropy.png",
                          "Left: semantic isotropy against the share of wrong facts, one "
                          "point per prompt. Right: AUROC for majority-wrong prompts "
                          "against the number of sampled responses, per signal.")
    ctx.report.add_text(summary_markdown(m, countries, texts, nonfact))
    return m


def plot(m, isotropy, per_prompt, wrong):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.scatter(isotropy[~wrong], per_prompt[~wrong], label="majority right", s=18)
    a.scatter(isotropy[wrong], per_prompt[wrong], label="majority wrong", s=18)
    a.set_xlabel("semantic isotropy")
    a.set_ylabel("share of wrong facts (per prompt)")
    a.set_title(f"Spearman {m['spearman_isotropy']:.2f}")
    a.legend()
    for name in SIGNALS:
        b.plot(m["sample_sizes"], m[f"auroc_{name}_by_n"], marker="o", label=name)
    b.axhline(0.5, color="grey", lw=0.8, ls="--")
    b.set_xlabel("responses per prompt N")
    b.set_ylabel("AUROC (majority-wrong prompts)")
    b.set_title("AUROC against the number of responses")
    b.legend()
    fig.tight_layout()
    return fig


def summary_markdown(m, countries, texts, nonfact) -> str:
    lines = ["## Signals", "", "| signal | AUROC | Spearman |", "|---|---|---|"]
    for name in SIGNALS:
        lines.append(f"| {name} | {m[f'auroc_{name}']:.3f} | {m[f'spearman_{name}']:.3f} |")
    lines += ["", f"Majority-wrong prompts: {m['n_majority_wrong']} of {len(countries)}; "
              f"fact accuracy {m['fact_accuracy']}.", "", "## Two responses per prompt",
              ""]
    for x, row, nf in zip(countries[:6], texts, nonfact, strict=False):
        for t, v in list(zip(row, nf, strict=True))[:2]:
            lines.append(f"- **{x.name}** (wrong share {v:.2f}): {t.strip()[:200]!r}")
    return "\n".join(lines)


METRICS = (
    Metric("countries", "the prompts' countries", finite=False),
    Metric("nonfactuality", "per prompt: mean share of wrong facts over its responses"),
    Metric("mean_nonfactuality", "mean share of wrong facts over all responses"),
    Metric("fact_accuracy", "per attribute: share of responses stating it correctly"),
    Metric("n_majority_wrong", "prompts whose mean share of wrong facts exceeds 1/2"),
    Metric("n_majority_right", "the other prompts"),
    Metric("mean_response_tokens_nll", "mean token NLL of the sampled responses"),
    Metric("sample_sizes", "N of the sample-size curve"),
    *[Metric(f"{k}_values", f"per prompt: the {k} signal at the largest N") for k in SIGNALS],
    *[Metric(f"spearman_{k}", f"Spearman correlation of {k} with per-prompt nonfactuality",
             better="higher", finite=False) for k in SIGNALS],
    *[Metric(f"auroc_{k}", f"AUROC of {k} for majority-wrong prompts", better="higher",
             finite=False) for k in SIGNALS],
    *[Metric(f"spearman_{k}_by_n", f"Spearman of {k} against N", finite=False)
      for k in SIGNALS],
    *[Metric(f"auroc_{k}_by_n", f"AUROC of {k} against N", finite=False) for k in SIGNALS],
    Metric("spearman_isotropy_ci_low", "bootstrap 2.5% quantile of the isotropy Spearman",
           finite=False),
    Metric("spearman_isotropy_ci_high", "bootstrap 97.5% quantile", finite=False),
    Metric("auroc_isotropy_ci_low", "bootstrap 2.5% quantile of the isotropy AUROC",
           finite=False),
    Metric("auroc_isotropy_ci_high", "bootstrap 97.5% quantile", finite=False),
    Metric("best_baseline_auroc", "the best AUROC among the four baselines", finite=False),
    Metric("isotropy_range", "smallest and largest per-prompt isotropy"),
)

CLAIMS = (
    Claim("label_variance", "Precondition: the model errs on some prompts and not on "
          "others (at least 3 majority-wrong and 3 majority-right prompts), so there is "
          "something to predict", test="min(n_majority_wrong, n_majority_right) >= 3"),
    Claim("isotropy_correlates", "Higher semantic isotropy signals lower factual "
          "consistency: Spearman correlation with per-prompt nonfactuality > 0, its "
          "bootstrap 95% interval excluding 0", test="spearman_isotropy_ci_low > 0",
          scale="full",
          note="not reproduced at quick: Spearman 0.178, bootstrap 95% interval "
               "[-0.124, 0.483] over 48 prompts x 6 responses; the sign is the paper's but "
               "48 prompts leave the interval wide (full: 20 responses, longer answers)"),
    Claim("isotropy_auroc", "Semantic isotropy predicts majority-wrong prompts "
          "(AUROC > 0.6)", test="auroc_isotropy > 0.6"),
    Claim("beats_baselines", "Isotropy outperforms the aggregate trust signals (one minus "
          "mean cosine, EigenScore, lexical overlap, mean NLL) in AUROC",
          test="auroc_isotropy >= best_baseline_auroc", scale="full",
          note="not reproduced at quick: AUROC isotropy 0.629, one minus cosine 0.623, "
               "EigenScore 0.412, lexical 0.691, mean NLL 0.682; with 40-token answers "
               "from a 135M model, word overlap and likelihood carry as much signal"),
)

EXPERIMENT = Experiment(
    name="isotropy",
    title="Semantic isotropy of sampled responses as a trust signal (SmolLM2 + MiniLM)",
    paper="Semantic isotropy: trust in long-form responses by embedding dispersion "
          "(ICML 2026)",
    configs=CONFIGS,
    metrics=METRICS,
    claims=CLAIMS,
    run=run,
)
