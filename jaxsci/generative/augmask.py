r"""AugMask: training a missing-unaware tabular diffusion model on incomplete data.

Paper: "AugMask" (ICML 2026; only its abstract was available). A standard tabular DDPM
assumes complete rows. AugMask adapts it to rows with missing entries by two changes to
training, nothing at sampling:

1. **Conditional stochastic augmentation.** Lightweight auxiliary models ``q(x_j |
   x_{-j})``, trained on the observed entries, draw a fresh completion of the missing
   entries of every training row at every step.
2. **Masked loss.** The denoising loss is restricted to observed coordinates; the
   augmented entries only serve as conditioning context (they enter ``x_t``).

The formulas, as implemented here
---------------------------------
**Backbone (TabDDPM style).** Numeric columns are quantile-normalised to ``N(0, 1)``
(scikit-learn's ``QuantileTransformer``, which ignores NaN when it fits);
a categorical column with ``K`` categories (codes ``0..K-1``) is a one-hot block of
``K`` coordinates ("as logits": Gaussian diffusion on the one-hot block, decoded by
argmax; TabDDPM's multinomial diffusion is the alternative we did not take). A row is
``x_0 in R^D``. Gaussian DDPM with a cosine schedule ``alpha_bar_t``, ``T`` steps:

    (1)  x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps,   eps ~ N(0, I_D),

an MLP ``eps_theta(x_t, t)`` and, with ``w in {0, 1}^D`` the coordinates supervised,

    (2)  L = sum_{i,d} w_id (eps_id - eps_theta(x_t, t)_id)^2 / sum_{i,d} w_id.

``w = 1`` is the ordinary (full) loss; AugMask's masked loss sets ``w_id = 1`` iff
coordinate ``d`` of row ``i`` is observed.

**Auxiliary models.** One head per column ``j`` (a one-hidden-layer MLP) reads the row
with column ``j`` blanked and the other columns' observed indicators, and predicts a
Gaussian ``N(mu_j, exp(s_j))`` for a numeric column or softmax logits for a categorical
one; heads are trained by negative log-likelihood on observed entries only. A
completion is one MICE-style chained sweep: columns in order, each missing entry drawn
from its head given the current completion of the others (:func:`aux_draw`). Training
alternates ``aux_rounds`` times between fitting the heads and re-drawing the
completions they read. The *marginal* ablation gives the heads no input (each learns
its column's marginal).

**Rao-Blackwell penalty.** Marginalising the missing entries ``x_m ~ q = N(mu, Sigma)``
out of (2) to second order (exactly, for a denoiser linear in ``x_t``):

    (3)  E_q[L(x_m)] = L(mu) + tr(Sigma J^T J),
         J = d (w * eps_theta(x_t, t)) / d x_m = sqrt(alpha_bar_t) d(w * eps_theta)/d x_t|_m,

a variance-weighted sensitivity penalty of the observed-coordinate prediction to the
uncertain missing inputs (:func:`sensitivity_penalty`: exact with one ``jvp`` per
coordinate, or Hutchinson's estimator with Rademacher probes, one ``jvp`` each). The
deterministic alternative to drawing (arm ``"rb"``) fills the missing entries with the
auxiliary models' chained conditional mean, keeps the masked loss and adds (3)'s
penalty with ``Sigma`` the heads' variances (diagonal; a categorical block uses the
multinomial diagonal ``p (1 - p)``).

**Arms** (:data:`ARMS`, values of :class:`Arm`, traced so one ``vmap`` covers them):
``augmask`` (draws + masked loss), ``aug_full`` (draws + full loss), ``marginal``
(marginal heads' draws + masked loss), ``missdiff`` (a fixed mean fill + masked loss,
MissDiff-style), ``mean`` (mean imputation, full loss), ``iterative`` (scikit-learn's
``IterativeImputer``, then full loss), ``rb`` (conditional-mean fill + masked loss +
penalty (3)), ``aux_mean`` (``rb`` without the penalty).

Open choices (all config fields): cosine schedule and ``T = 100`` (TabDDPM's default
schedule; it trains with ``T = 1000``), the widths, one auxiliary draw per row and step
(``k_draws``), ``aux_rounds``.

>>> import numpy as np, jax
>>> from jaxsci.generative import augmask
>>> x = np.random.default_rng(0).normal(size=(64, 3)); x[::5, 1] = np.nan
>>> cfg = augmask.AugMaskConfig(steps=20, aux_steps=10, hidden=16, aux_hidden=8,
...                             timesteps=10)
>>> model = augmask.fit(x, key=jax.random.key(0), config=cfg)
>>> model.sample(5, jax.random.key(1)).shape
(5, 3)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "ARMS", "Layout", "TabularEncoder", "fit_encoder", "TabularData", "AugMaskConfig",
    "Arm", "arm", "schedule", "aux_init", "aux_heads", "aux_nll", "aux_fit", "aux_draw",
    "denoiser_init", "denoiser", "sensitivity_penalty", "loss", "train", "sample",
    "harden", "impute_iterative", "Fitted", "fit",
]


# ------------------------------------------------------------------------ the layout


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each column lives in the encoded row (static, hashable).

    ``cardinalities[j]`` is 0 for a numeric column (one coordinate) and ``K >= 2`` for a
    categorical one (a one-hot block of ``K`` coordinates).
    """

    cardinalities: tuple[int, ...]

    def __post_init__(self):
        if not self.cardinalities:
            raise ValueError("cardinalities must name at least one column")
        for j, k in enumerate(self.cardinalities):
            k = check_int(f"cardinalities[{j}]", k, min=0)
            if k == 1:
                raise ValueError(f"cardinalities[{j}] must be 0 (numeric) or >= 2, got 1")

    @property
    def n_columns(self) -> int:
        return len(self.cardinalities)

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(k if k else 1 for k in self.cardinalities)

    @property
    def dim(self) -> int:
        return sum(self.widths)

    @property
    def head_dim(self) -> int:
        """``P``: the heads' output size (2 for a Gaussian head, ``K`` for logits)."""
        return max(2, *self.cardinalities)

    @functools.cached_property
    def column_of(self) -> np.ndarray:
        """``(D,)``: the column of each coordinate."""
        return np.repeat(np.arange(self.n_columns), self.widths)

    @functools.cached_property
    def placement(self) -> np.ndarray:
        """``(c, P, D)``: ``v @ placement[j]`` writes a head-space vector ``v`` (a numeric
        value in slot 0, or a ``K``-vector) into column ``j``'s coordinates."""
        c, p, d = self.n_columns, self.head_dim, self.dim
        out = np.zeros((c, p, d))
        start = 0
        for j, w in enumerate(self.widths):
            for q in range(w):
                out[j, q, start + q] = 1.0
            start += w
        return out

    @functools.cached_property
    def logit_mask(self) -> np.ndarray:
        """``(c, P)`` bool: the valid logits of each categorical head."""
        p = self.head_dim
        return np.asarray([[q < k for q in range(p)] if k else [True] * p
                           for k in self.cardinalities])

    @property
    def is_categorical(self) -> np.ndarray:
        return np.asarray([k > 0 for k in self.cardinalities])


# ----------------------------------------------------------------------- the encoder


@dataclasses.dataclass
class TabularEncoder:
    """Column transforms fitted on a NaN-bearing table: quantile-normal numeric columns,
    one-hot categorical blocks. :meth:`encode` fills missing coordinates with the
    observed mean (a categorical block with the observed frequencies)."""

    layout: Layout
    quantile: Any  # sklearn QuantileTransformer on the numeric columns, or None
    fill: np.ndarray  # (D,) the mean fill in encoded space

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(z, observed)``: the encoded rows ``(n, D)`` (mean fill where missing) and
        the observed-column mask ``(n, c)``."""
        x = _check_table("x", x, self.layout)
        observed = ~np.isnan(x)
        lay = self.layout
        num = ~lay.is_categorical
        z = np.zeros((x.shape[0], lay.dim))
        cols = np.cumsum((0,) + lay.widths)
        if num.any():
            q = self.quantile.transform(x[:, num])
            for i, j in enumerate(np.flatnonzero(num)):
                z[:, cols[j]] = q[:, i]
        for j in np.flatnonzero(lay.is_categorical):
            k = lay.cardinalities[j]
            codes = np.where(observed[:, j], x[:, j], 0).astype(int)
            z[:, cols[j]:cols[j] + k] = np.eye(k)[codes]
        miss = ~observed[:, lay.column_of]
        z = np.where(miss, self.fill[None, :], z)
        return z, observed

    def decode(self, z: np.ndarray) -> np.ndarray:
        """Encoded rows ``(n, D)`` back to table rows ``(n, c)`` (argmax per block)."""
        lay = self.layout
        z = np.asarray(z, dtype=float)
        check_array("z", z, shape=(None, lay.dim))
        cols = np.cumsum((0,) + lay.widths)
        out = np.zeros((z.shape[0], lay.n_columns))
        num = ~lay.is_categorical
        if num.any():
            idx = cols[:-1][num]
            out[:, num] = self.quantile.inverse_transform(np.clip(z[:, idx], -5.2, 5.2))
        for j in np.flatnonzero(lay.is_categorical):
            out[:, j] = np.argmax(z[:, cols[j]:cols[j + 1]], axis=1)
        return out


def _check_table(name: str, x: Any, layout: Layout) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    check_array(name, x, shape=(None, layout.n_columns), finite=False)
    if np.isinf(x).any():
        raise ValueError(f"{name} must hold finite values or NaN (missing), got inf")
    for j, k in enumerate(layout.cardinalities):
        col = x[:, j][~np.isnan(x[:, j])]
        if k and col.size and (np.any(col != np.round(col)) or col.min() < 0 or col.max() >= k):
            raise ValueError(f"{name}: categorical column {j} must hold codes 0..{k - 1} "
                             f"(or NaN), got values in [{col.min()}, {col.max()}]")
    return x


def fit_encoder(x: np.ndarray, cardinalities: Sequence[int] | None = None, *,
                n_quantiles: int = 1000) -> TabularEncoder:
    """Fit the column transforms on the observed entries of ``x`` (NaN = missing).

    Args:
      x: the table ``(n, c)``; NaN marks a missing entry.
      cardinalities: per column 0 (numeric) or ``K`` (categorical codes ``0..K-1``);
        default all numeric.
      n_quantiles: the quantile transform's resolution (capped at the observed count).

    Raises:
      ValueError: naming an entirely missing column, a bad code, or a shape mismatch.
    """
    from sklearn.preprocessing import QuantileTransformer

    x = np.asarray(x, dtype=float)
    check_array("x", x, ndim=2, finite=False)
    if cardinalities is None:
        cardinalities = (0,) * x.shape[1]
    if len(cardinalities) != x.shape[1]:
        raise ValueError(f"cardinalities must have one entry per column ({x.shape[1]}), "
                         f"got {len(cardinalities)}")
    layout = Layout(tuple(int(k) for k in cardinalities))
    x = _check_table("x", x, layout)
    empty = np.flatnonzero(np.isnan(x).all(0))
    if empty.size:
        raise ValueError(f"x: column(s) {empty.tolist()} are entirely missing (all NaN); "
                         "drop them or supply observed values")
    num = ~layout.is_categorical
    quantile = None
    if num.any():
        n_obs = int((~np.isnan(x[:, num])).sum(0).min())
        quantile = QuantileTransformer(n_quantiles=max(2, min(n_quantiles, n_obs)),
                                       output_distribution="normal", subsample=10**9)
        quantile.fit(x[:, num])
    enc = TabularEncoder(layout, quantile, np.zeros(layout.dim))
    z, observed = enc.encode(x)
    obs_c = observed[:, layout.column_of]
    enc.fill = (z * obs_c).sum(0) / obs_c.sum(0)
    return enc


class TabularData(NamedTuple):
    """Encoded training rows: ``x`` ``(n, D)`` (missing coordinates hold a fill) and
    ``observed`` ``(n, c)`` (float 0/1 per column). Stack several to ``vmap``."""

    x: Float[Array, "n d"]
    observed: Float[Array, "n c"]


# ---------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class AugMaskConfig:
    """Backbone, auxiliary models and training (the abstract fixes none of them)."""

    timesteps: int = 100
    schedule: str = "cosine"  # TabDDPM's default; "linear" (1e-4 .. 0.02, scaled to T)
    hidden: int = 128
    depth: int = 3  # hidden layers of the denoiser MLP
    time_dim: int = 32
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3  # annealed linearly to 0 (TabDDPM)
    ema: float = 0.99  # the sampled parameters are this exponential moving average
    aux_hidden: int = 32
    aux_steps: int = 400  # per round
    aux_rounds: int = 2
    aux_lr: float = 1e-2
    k_draws: int = 1  # auxiliary completions per row and step (vmapped)
    penalty_weight: float = 0.0  # > 0 compiles the Rao-Blackwell penalty (arm "rb")
    penalty_probes: int = 1  # Hutchinson probes; 0 = exact (one jvp per coordinate)
    clip_x0: float = 6.0  # sampling: the predicted x_0 is clipped to [-clip_x0, clip_x0]

    def __post_init__(self):
        for name in ("timesteps", "hidden", "depth", "time_dim", "steps", "batch_size",
                     "aux_hidden", "aux_steps", "aux_rounds", "k_draws"):
            check_int(name, getattr(self, name), min=1)
        check_int("penalty_probes", self.penalty_probes, min=0)
        check_choice("schedule", self.schedule, ("cosine", "linear"))
        check_scalar("lr", self.lr, gt=0.0)
        check_scalar("ema", self.ema, ge=0.0, lt=1.0)
        check_scalar("aux_lr", self.aux_lr, gt=0.0)
        check_scalar("penalty_weight", self.penalty_weight, ge=0.0)
        check_scalar("clip_x0", self.clip_x0, gt=0.0)


class Arm(NamedTuple):
    """One training recipe, traced 0/1 floats (stack them to ``vmap``).

    ``augment``: a fresh auxiliary draw of the missing entries at every step;
    ``masked``: loss on observed coordinates only; ``conditional``: the auxiliary heads
    read the other columns (0: marginal heads); ``aux_fill``: start from the auxiliary
    chained conditional mean instead of the given fill; ``penalty``: weight of (3)
    (computed only when ``AugMaskConfig.penalty_weight > 0``).
    """

    augment: Array
    masked: Array
    conditional: Array
    aux_fill: Array
    penalty: Array


_ARM_FLAGS = {
    "augmask": (1, 1, 1, 0, 0), "aug_full": (1, 0, 1, 0, 0), "marginal": (1, 1, 0, 0, 0),
    "missdiff": (0, 1, 1, 0, 0), "mean": (0, 0, 1, 0, 0), "iterative": (0, 0, 1, 0, 0),
    "oracle": (0, 0, 1, 0, 0), "rb": (0, 1, 1, 1, 1), "aux_mean": (0, 1, 1, 1, 0),
}
ARMS = tuple(_ARM_FLAGS)


def arm(name: str) -> Arm:
    """The :class:`Arm` of a named recipe (:data:`ARMS`). ``iterative`` and ``oracle``
    differ from ``mean`` only in their data (imputed / complete)."""
    check_choice("arm", name, ARMS)
    return Arm(*(jnp.asarray(float(v)) for v in _ARM_FLAGS[name]))


_named_arm = arm  # for ``fit``, whose ``arm`` argument is the recipe's name


def schedule(cfg: AugMaskConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(beta_t, alpha_bar_t)``, ``t = 0..T-1`` (cosine: Nichol & Dhariwal, s = 0.008)."""
    t = cfg.timesteps
    if cfg.schedule == "cosine":
        s = 0.008
        f = np.cos((np.arange(t + 1) / t + s) / (1 + s) * np.pi / 2) ** 2
        beta = np.clip(1 - f[1:] / f[:-1], 0, 0.999)
    else:
        beta = np.linspace(1e-4 * 1000 / t, min(0.02 * 1000 / t, 0.999), t)
    return beta, np.cumprod(1 - beta)


# ------------------------------------------------------------------ small MLP helpers


def _dense(key, a, b, scale=1.0):
    return (scale * jax.random.normal(key, (a, b)) / math.sqrt(a), jnp.zeros(b))


# ------------------------------------------------------------------- auxiliary heads


def aux_init(key: jax.Array, layout: Layout, hidden: int) -> dict:
    """Stacked per-column head parameters (leading axis: columns)."""
    c, d, p = layout.n_columns, layout.dim, layout.head_dim
    k1, k2 = jax.random.split(key)
    w1, b1 = jax.vmap(lambda k: _dense(k, d + c, hidden))(jax.random.split(k1, c))
    w2, b2 = jax.vmap(lambda k: _dense(k, hidden, p, 0.1))(jax.random.split(k2, c))
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def _head_inputs(x, observed, layout, conditional):
    blank = 1.0 - jnp.asarray(layout.placement.sum(1), x.dtype)  # (c, D): 0 on own coords
    own = 1.0 - jnp.eye(layout.n_columns, dtype=x.dtype)  # (c, c)
    xin = x[:, None, :] * blank[None]  # (n, c, D)
    oin = observed[:, None, :] * own[None]  # (n, c, c)
    return conditional * jnp.concatenate([xin, oin], -1)


def _head(params, inp):
    h = jax.nn.gelu(jnp.einsum("nci,cih->nch", inp, params["w1"]) + params["b1"])
    return jnp.einsum("nch,chp->ncp", h, params["w2"]) + params["b2"]


def aux_heads(params: dict, x: Float[Array, "n d"], observed: Float[Array, "n c"],
              layout: Layout, conditional: Array | float = 1.0) -> Float[Array, "n c p"]:
    """Every head's output ``(n, c, P)`` on rows ``x``: slots ``(mu, log-variance)`` for a
    numeric column, logits for a categorical one (invalid slots masked to -1e9)."""
    out = _head(params, _head_inputs(x, observed, layout, conditional))
    return _mask_logits(out, layout)


def _mask_logits(out, layout):
    cat = jnp.asarray(layout.is_categorical)[None, :, None]
    valid = jnp.asarray(layout.logit_mask)[None]
    return jnp.where(cat & ~valid, -1e9, out)


def _split_gauss(out):
    return out[..., 0], jnp.clip(out[..., 1], -9.0, 5.0)


def aux_nll(out: Float[Array, "n c p"], x: Float[Array, "n d"], layout: Layout
            ) -> Float[Array, "n c"]:
    """Per-entry negative log-likelihood of the encoded values ``x`` under the heads."""
    target = jnp.einsum("cpd,nd->ncp", jnp.asarray(layout.placement, x.dtype), x)
    mu, logvar = _split_gauss(out)
    gauss = 0.5 * (logvar + (target[..., 0] - mu) ** 2 * jnp.exp(-logvar) + math.log(2 * math.pi))
    cat = -jnp.sum(target * jax.nn.log_softmax(out, -1), -1)
    return jnp.where(jnp.asarray(layout.is_categorical)[None], cat, gauss)


def aux_draw(params: dict, x: Float[Array, "n d"], observed: Float[Array, "n c"],
             layout: Layout, key: jax.Array, conditional: Array | float = 1.0,
             mean: bool = False) -> tuple[Float[Array, "n d"], Float[Array, "n d"]]:
    """One chained (MICE-style) sweep over the columns in order: each missing entry is
    drawn from its head given the current completion (``mean=True``: set to the head's
    mean, the expected one-hot for a categorical block). Vmappable in every array.

    Returns ``(completion, variance)``: the completed rows and, on missing coordinates,
    the head's variance there (``exp(s)``, or ``p (1 - p)`` in a categorical block);
    zero on observed coordinates.
    """
    check_array("x", x, shape=(None, layout.dim))
    check_array("observed", observed, shape=(x.shape[0], layout.n_columns))
    key = check_key("key", key)
    return _aux_draw(params, x, observed, layout, key, conditional, mean)


@functools.partial(jax.jit, static_argnames=("layout", "mean"))
def _aux_draw(params, x, observed, layout, key, conditional, mean):
    place = jnp.asarray(layout.placement, x.dtype)
    cat = jnp.asarray(layout.is_categorical)
    valid = jnp.asarray(layout.logit_mask)
    col_of = jnp.asarray(layout.column_of)
    blank = 1.0 - place.sum(1)  # (c, D): head j's input, column j blanked
    own = 1.0 - jnp.eye(layout.n_columns, dtype=x.dtype)
    n = x.shape[0]

    def body(carry, j):
        z, var = carry
        pj = jax.tree.map(lambda a: a[j], params)
        inp = conditional * jnp.concatenate([z * blank[j], observed * own[j]], -1)
        h = jax.nn.gelu(inp @ pj["w1"] + pj["b1"])
        out = h @ pj["w2"] + pj["b2"]  # (n, P)
        out = jnp.where(cat[j] & ~valid[j][None], -1e9, out)
        k1, k2 = jax.random.split(jax.random.fold_in(key, j))
        mu, logvar = _split_gauss(out)
        g_val = mu if mean else mu + jnp.exp(0.5 * logvar) * jax.random.normal(k1, (n,))
        probs = jax.nn.softmax(out, -1)
        onehot = (probs if mean else
                  jax.nn.one_hot(jax.random.categorical(k2, out), out.shape[-1], dtype=x.dtype))
        slot0 = jnp.zeros_like(out).at[:, 0].set(g_val)
        v = jnp.where(cat[j], onehot, slot0) @ place[j]  # (n, D)
        vv = jnp.where(cat[j], probs * (1 - probs),
                       jnp.zeros_like(out).at[:, 0].set(jnp.exp(logvar))) @ place[j]
        write = (1.0 - observed[:, j])[:, None] * (col_of == j)[None, :]
        return (jnp.where(write > 0, v, z), jnp.where(write > 0, vv, var)), None

    (z, var), _ = jax.lax.scan(body, (x, jnp.zeros_like(x)), jnp.arange(layout.n_columns))
    return z, var


def aux_fit(data: TabularData, layout: Layout, key: jax.Array, cfg: AugMaskConfig,
            conditional: Array | float = 1.0) -> tuple[dict, Float[Array, "n d"]]:
    """Fit the heads on observed entries (``aux_rounds`` rounds of ``aux_steps`` Adam
    steps on mini-batches), re-drawing the completion they read between rounds.

    Returns ``(params, completion)``: the heads and the last chained draw.
    """
    _check_data(data, layout)
    key = check_key("key", key)
    return _aux_fit(data, layout, key, cfg, conditional)


@functools.partial(jax.jit, static_argnames=("layout", "cfg"))
def _aux_fit(data, layout, key, cfg, conditional):
    kp, kr = jax.random.split(key)
    params = aux_init(kp, layout, cfg.aux_hidden)
    opt = optax.adam(cfg.aux_lr)
    n = data.x.shape[0]
    b = min(cfg.batch_size, n)

    def nll(p, x, obs):
        out = aux_heads(p, x, obs, layout, conditional)
        return jnp.sum(aux_nll(out, x, layout) * obs) / jnp.maximum(obs.sum(), 1.0)

    def step(carry, k):
        p, s, x = carry
        idx = jax.random.randint(k, (b,), 0, n)
        g = jax.grad(nll)(p, x[idx], data.observed[idx])
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s, x), None

    def round_(carry, k):
        p, s, x = carry
        ks, kd = jax.random.split(k)
        (p, s, _), _ = jax.lax.scan(step, (p, s, x), jax.random.split(ks, cfg.aux_steps))
        x, _ = aux_draw(p, x, data.observed, layout, kd, conditional)
        return (p, s, x), None

    (params, _, x), _ = jax.lax.scan(round_, (params, opt.init(params), data.x),
                                     jax.random.split(kr, cfg.aux_rounds))
    return params, x


# ----------------------------------------------------------------------- the denoiser


def denoiser_init(key: jax.Array, layout: Layout, cfg: AugMaskConfig) -> dict:
    """MLP parameters of ``eps_theta(x_t, t)`` (input projection + time embedding)."""
    d, h = layout.dim, cfg.hidden
    ks = jax.random.split(key, cfg.depth + 4)
    return {"inp": _dense(ks[0], d, h), "t1": _dense(ks[1], cfg.time_dim, h),
            "t2": _dense(ks[2], h, h),
            "layers": [_dense(k, h, h) for k in ks[3:3 + cfg.depth]],
            "out": _dense(ks[-1], h, d, 0.1)}


def _time_embedding(t, dim):
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half) / half)
    ang = t[..., None] * freqs
    return jnp.concatenate([jnp.cos(ang), jnp.sin(ang)], -1)


def denoiser(params: dict, x_t: Float[Array, "n d"], t: Array) -> Float[Array, "n d"]:
    """``eps_theta(x_t, t)`` for rows ``x_t`` and integer (or float) steps ``t`` ``(n,)``."""
    temb = _time_embedding(jnp.asarray(t, x_t.dtype), params["t1"][0].shape[0])
    w, b = params["t1"]
    w2, b2 = params["t2"]
    w0, b0 = params["inp"]
    h = x_t @ w0 + b0 + jax.nn.silu(temb @ w + b) @ w2 + b2
    for w, b in params["layers"]:
        h = jax.nn.silu(h @ w + b)
    w, b = params["out"]
    return h @ w + b


def sensitivity_penalty(f, x_t: Float[Array, " d"], weight: Float[Array, " d"],
                        var: Float[Array, " d"], scale: Array | float = 1.0,
                        key: jax.Array | None = None, probes: int = 0) -> Array:
    """``scale * tr(diag(var) J^T J)`` with ``J = d(weight * f)/dx`` at ``x_t`` (eq. 3).

    Args:
      f: ``R^D -> R^D`` (one row of the denoiser at a fixed ``t``).
      x_t: the point ``(D,)``; weight: supervised coordinates ``(D,)``.
      var: the input variances ``(D,)`` (zero on observed coordinates).
      scale: ``alpha_bar_t`` (the chain rule from ``x_0`` to ``x_t``).
      key, probes: ``probes = 0`` is exact (``D`` jvps); ``probes > 0`` averages
        Hutchinson's estimator ``||weight * J (sqrt(var) * v)||^2`` over that many
        Rademacher ``v`` (unbiased).
    """
    sd = jnp.sqrt(var)

    def col(v):
        return jnp.sum((weight * jax.jvp(f, (x_t,), (sd * v,))[1]) ** 2)

    if probes == 0:
        tr = jnp.sum(jax.vmap(col)(jnp.eye(x_t.shape[0], dtype=x_t.dtype)))
    else:
        v = jax.random.rademacher(key, (probes, x_t.shape[0]), dtype=x_t.dtype)
        tr = jnp.mean(jax.vmap(col)(v))
    return scale * tr


def loss(params: dict, x0: Float[Array, "b d"], observed: Float[Array, "b c"],
         a: Arm, key: jax.Array, layout: Layout, alpha_bar: Array, cfg: AugMaskConfig,
         var: Float[Array, "b d"] | None = None) -> Array:
    """Eq. (2) on completed rows ``x0`` (weights: observed coordinates if ``a.masked``),
    plus ``a.penalty * penalty_weight *`` eq. (3) when the config compiles it."""
    kt, ke, kp = jax.random.split(key, 3)
    b = x0.shape[0]
    t = jax.random.randint(kt, (b,), 0, alpha_bar.shape[0])
    eps = jax.random.normal(ke, x0.shape, x0.dtype)
    ab = alpha_bar[t][:, None]
    xt = jnp.sqrt(ab) * x0 + jnp.sqrt(1 - ab) * eps
    obs_c = observed[:, jnp.asarray(layout.column_of)]
    w = a.masked * obs_c + (1 - a.masked)
    pred = denoiser(params, xt, t)
    norm = jnp.maximum(jnp.sum(w), 1.0)
    val = jnp.sum(w * (eps - pred) ** 2) / norm
    if cfg.penalty_weight > 0:
        if var is None:
            raise ValueError("var (the missing inputs' variances, (b, D)) is required when "
                             "cfg.penalty_weight > 0")

        def one(x_row, t_row, w_row, v_row, ab_row, k):
            f = lambda z: denoiser(params, z[None], t_row[None])[0]  # noqa: E731
            return sensitivity_penalty(f, x_row, w_row, v_row, ab_row, k,
                                       cfg.penalty_probes)

        pen = jax.vmap(one)(xt, t, w, var, ab[:, 0], jax.random.split(kp, b))
        val = val + a.penalty * cfg.penalty_weight * jnp.sum(pen) / norm
    return val


def _check_arm(a: Arm) -> Arm:
    flat = jnp.stack([jnp.asarray(v, float) for v in a])
    if isinstance(flat, jax.core.Tracer):
        flat = eqx.error_if(flat, (flat < 0) | (flat > 1), "arm fields must lie in [0, 1]")
        return Arm(*flat)
    if np.any((np.asarray(flat) < 0) | (np.asarray(flat) > 1)):
        raise ValueError(f"arm fields must lie in [0, 1], got {a}")
    return Arm(*flat)


def _check_data(data: TabularData, layout: Layout) -> TabularData:
    check_array("data.x", data.x, shape=(None, layout.dim))
    check_array("data.observed", data.observed, shape=(data.x.shape[0], layout.n_columns))
    return data


def train(data: TabularData, a: Arm, key: jax.Array, layout: Layout, cfg: AugMaskConfig
          ) -> dict:
    """Train the auxiliary heads, then the denoiser, under one arm (pure, vmappable in
    ``data``, ``a`` and ``key``).

    Returns a dict: ``params`` (the denoiser's moving average), ``aux`` (the heads),
    ``loss`` (the mean training loss of each tenth of training, ``(10,)``).
    """
    _check_data(data, layout)
    a = _check_arm(a)
    key = check_key("key", key)
    return _train(data, a, key, layout, cfg)


@functools.partial(jax.jit, static_argnames=("layout", "cfg"))
def _train(data, a, key, layout, cfg):
    ka, kd, kt = jax.random.split(key, 3)
    aux, _ = aux_fit(data, layout, ka, cfg, a.conditional)
    mean_fill, var = aux_draw(aux, data.x, data.observed, layout, kd, a.conditional, mean=True)
    x_fill = jnp.where(a.aux_fill > 0, mean_fill, data.x)
    var = var * a.aux_fill
    _, alpha_bar = schedule(cfg)
    alpha_bar = jnp.asarray(alpha_bar, data.x.dtype)
    params = denoiser_init(jax.random.fold_in(kt, 0), layout, cfg)
    opt = optax.adam(optax.linear_schedule(cfg.lr, 0.0, cfg.steps))
    n = data.x.shape[0]
    bsz = min(cfg.batch_size, n)

    def batch_loss(p, k):
        ki, kg, _ = jax.random.split(k, 3)  # (the third key is unused; kept so results stay put)
        idx = jax.random.randint(ki, (bsz,), 0, n)
        x0, obs, v = x_fill[idx], data.observed[idx], var[idx]

        def one_draw(kk):
            k1, k2 = jax.random.split(kk)
            drawn, _ = aux_draw(aux, x0, obs, layout, k1, a.conditional)
            xa = jnp.where(a.augment > 0, drawn, x0)
            return loss(p, xa, obs, a, k2, layout, alpha_bar, cfg, v)

        return jnp.mean(jax.vmap(one_draw)(jax.random.split(kg, cfg.k_draws)))

    def step(carry, k):
        p, s, e = carry
        val, g = jax.value_and_grad(batch_loss)(p, k)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        e = jax.tree.map(lambda a, b: cfg.ema * a + (1 - cfg.ema) * b, e, p)
        return (p, s, e), val

    (_, _, params), losses = jax.lax.scan(step, (params, opt.init(params), params),
                                          jax.random.split(kt, cfg.steps))
    chunks = losses[: cfg.steps // 10 * 10].reshape(10, -1).mean(1) if cfg.steps >= 10 \
        else jnp.full((10,), losses.mean())
    return {"params": params, "aux": aux, "loss": chunks}


@functools.partial(jax.jit, static_argnames=("n", "layout", "cfg"))
def _sample(params, n, key, layout, cfg):
    beta, alpha_bar = schedule(cfg)
    alpha_bar_prev = np.r_[1.0, alpha_bar[:-1]]
    post_var = beta * (1 - alpha_bar_prev) / (1 - alpha_bar)
    coef0 = beta * np.sqrt(alpha_bar_prev) / (1 - alpha_bar)
    coef1 = (1 - alpha_bar_prev) * np.sqrt(1 - beta) / (1 - alpha_bar)
    dt = jnp.zeros(()).dtype
    alpha_bar, post_var, c0, c1 = (jnp.asarray(v, dt) for v in (alpha_bar, post_var, coef0,
                                                                 coef1))
    k0, ks = jax.random.split(key)
    x = jax.random.normal(k0, (n, layout.dim), dt)

    def body(x, i):
        t = cfg.timesteps - 1 - i
        eps = denoiser(params, x, jnp.full((n,), t))
        # The posterior mean through the clipped x_0 prediction (improved DDPM's
        # clip_denoised): at the cosine schedule's last steps beta_t -> 0.999 and the
        # eps form of the mean divides by sqrt(1 - beta_t).
        x0 = jnp.clip((x - jnp.sqrt(1 - alpha_bar[t]) * eps) / jnp.sqrt(alpha_bar[t]),
                      -cfg.clip_x0, cfg.clip_x0)
        mean = c0[t] * x0 + c1[t] * x
        z = jax.random.normal(jax.random.fold_in(ks, i), x.shape, x.dtype)
        return mean + jnp.where(t > 0, jnp.sqrt(post_var[t]), 0.0) * z, None

    x, _ = jax.lax.scan(body, x, jnp.arange(cfg.timesteps))
    return x


def sample(params: dict, n: int, key: jax.Array, layout: Layout, cfg: AugMaskConfig
           ) -> Float[Array, "n d"]:
    """``n`` encoded rows by ancestral DDPM sampling (``T`` steps; vmappable in
    ``params`` and ``key``). Decode with :meth:`TabularEncoder.decode`."""
    n = check_int("n", n, min=1)
    key = check_key("key", key)
    return _sample(params, n, key, layout, cfg)


def harden(z: Float[Array, "n d"], layout: Layout) -> Float[Array, "n d"]:
    """Encoded rows with every categorical block replaced by the one-hot of its argmax."""
    out = z
    start = 0
    for k, w in zip(layout.cardinalities, layout.widths, strict=True):
        if k:
            blk = jax.nn.one_hot(jnp.argmax(z[:, start:start + w], 1), w, dtype=z.dtype)
            out = out.at[:, start:start + w].set(blk)
        start += w
    return out


def impute_iterative(x: np.ndarray, cardinalities: Sequence[int] | None = None, *,
                     seed: int = 0, max_iter: int = 10) -> np.ndarray:
    """scikit-learn's ``IterativeImputer`` (Bayesian ridge, MICE-style) on ``x``;
    categorical codes are rounded and clipped to ``0..K-1`` afterwards."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.impute import IterativeImputer

    x = np.asarray(x, dtype=float)
    with warnings.catch_warnings():  # max_iter is a budget here, not a tolerance
        warnings.simplefilter("ignore", ConvergenceWarning)
        out = IterativeImputer(max_iter=max_iter, random_state=seed).fit_transform(x)
    for j, k in enumerate(cardinalities or ()):
        if k:
            out[:, j] = np.clip(np.round(out[:, j]), 0, k - 1)
    return out


# --------------------------------------------------------------------- the user's API


@dataclasses.dataclass
class Fitted:
    """A trained model: :meth:`sample` draws rows in the table's own units."""

    encoder: TabularEncoder
    params: dict
    config: AugMaskConfig
    arm: str
    losses: np.ndarray

    def sample(self, n: int, key: jax.Array) -> np.ndarray:
        z = sample(self.params, n, key, self.encoder.layout, self.config)
        return self.encoder.decode(np.asarray(z))


def fit(x: Any, cardinalities: Sequence[int] | None = None, *, key: jax.Array,
        arm: str = "augmask", config: AugMaskConfig = AugMaskConfig()) -> Fitted:
    """Train a tabular DDPM on a table with missing entries (NaN), no imputation needed.

    Args:
      x: the table ``(n, c)``; NaN marks a missing entry.
      cardinalities: per column 0 (numeric) or ``K`` (categorical codes ``0..K-1``).
      key: PRNG key.
      arm: a recipe of :data:`ARMS` (``"oracle"`` is the ordinary full loss, for
        complete data); default AugMask.
      config: :class:`AugMaskConfig`; ``arm="rb"`` needs ``penalty_weight > 0``.

    Returns:
      a :class:`Fitted` model.
    """
    key = check_key("key", key)
    check_choice("arm", arm, ARMS)
    enc = fit_encoder(x, cardinalities)
    xa = np.asarray(x, dtype=float)
    if arm == "iterative":
        xa = impute_iterative(xa, enc.layout.cardinalities)
    if arm == "rb" and config.penalty_weight <= 0:
        raise ValueError("arm='rb' needs config.penalty_weight > 0 (the penalty's weight)")
    z, observed = enc.encode(xa)
    data = TabularData(jnp.asarray(z, jnp.zeros(()).dtype),
                       jnp.asarray(observed, jnp.zeros(()).dtype))
    out = train(data, _named_arm(arm), key, enc.layout, config)
    return Fitted(enc, out["params"], config, arm, np.asarray(out["loss"]))

