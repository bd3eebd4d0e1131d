r"""Discretization-invariant function encoder: a set of observed points -> latent tokens.

MERLIN (Lu, Ma, Lin, Zhu, ICML 2026), Sec. "function encoders". An observation of
a field is a *set* of pairs ``(x_i, u_i)``, ``i = 1..n``, of any size, where some
pairs may be missing (a boolean mask). The encoder is a Galerkin-type transformer
(Cao, "Choose a Transformer: Fourier or Galerkin", NeurIPS 2021):

1. point features ``h_i = MLP([u_i * m_i, m_i, x_i, sin(2 pi W x_i), cos(2 pi W x_i)])``
   (``m_i`` the per-channel observation mask; ``W`` learned frequencies);
2. ``n_self_layers`` Galerkin self-attention layers over the observed points,
   ``h <- h + (LN h) W_q (K~^T V~) / n_obs`` with ``K~ = LN(h W_k)``, ``V~ = LN(h W_v)``;
3. ``n_cross_layers`` cross-attention blocks in which ``n_tokens`` learned latent
   queries attend to the points with the same Galerkin kernel,
   ``q <- q + LN(q) W_q (K~^T V~) / n_obs``, then a feed-forward block.
   As in the authors' encoder, queries and keys carry rotary position embeddings
   (RoPE, :func:`rotary`; the latent queries have learned positions), so that
   ``K~^T V~`` holds Fourier-type moments of the field;
4. a linear map of each token to ``token_dim`` (no final normalisation, as in the
   authors' encoder, so the latent keeps the field's amplitude); the latent is the
   flattened ``z = [t_1, ..., t_K]`` of size ``latent_dim = n_tokens * token_dim``.

``(K~^T V~) / n_obs = (1/n_obs) sum_i k(x_i) v(x_i)^T`` is a quadrature of the
integral ``int k(x) v(x)^T dx`` over the domain, which is what makes the encoder a
*functional* of the field rather than of its grid: it is invariant to the order of
the points, defined for any number of them, and a masked point (``m_i = 0`` in every
channel) multiplies its key and value by zero, so it contributes nothing (its value
may even be NaN). The RoPE frequencies here are a short octave ladder (``8, 4, 2,
1`` cycles per unit) suited to small heads, where the authors use the RoFormer
base-10000 ladder over wider heads.

Options (:class:`EncoderConfig`, off by default): a *linear* path of learned basis
functions whose inner products with the field are added to the latent (``basis``;
ours: the attention above reaches linear functionals of the field, such as its
Fourier or POD coordinates, only slowly), RoPE along the diagonals as well as the
axes (``rope_mode="diagonal"``), and the authors' reference-grid position features
(``pos_ref``).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxsci.core.validation import (
    check_array,
    check_choice,
    check_int,
    check_key,
    check_scalar,
)

__all__ = [
    "EncoderConfig", "FunctionEncoder", "GalerkinAttention", "anchor_distances",
    "lattice_frequencies", "point_mask", "rope_vectors", "rotary",
]


def _dense(layer: eqx.nn.Linear, x: Float[Array, "... i"]) -> Float[Array, "... o"]:
    """An ``eqx.nn.Linear`` applied along the last axis (one matmul, any batch shape)."""
    y = x @ layer.weight.T
    return y if layer.bias is None else y + layer.bias


def _layer_norm(x: Float[Array, "... e"], eps: float = 1e-5) -> Float[Array, "... e"]:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps)


class _LayerNorm(eqx.Module):
    """LayerNorm along the last axis with learned scale and shift (any batch shape)."""

    scale: Float[Array, " e"]
    shift: Float[Array, " e"]

    def __init__(self, dim: int):
        self.scale = jnp.ones((dim,))  # the default float dtype, as eqx.nn.Linear's
        self.shift = jnp.zeros((dim,))

    def __call__(self, x: Float[Array, "... e"]) -> Float[Array, "... e"]:
        return _layer_norm(x) * self.scale + self.shift


def rotary(x: Float[Array, "m h d"], pos: Float[Array, "m dx"], freqs: tuple[float, ...]):
    """Rotary position embedding (RoFormer, Su et al. 2021) in ``dx`` dimensions.

    Each head's features are cut into ``dx`` chunks; chunk ``j`` is rotated pairwise
    (first half against second half) by the angles ``2 pi f_k pos_j``, one per
    frequency ``f_k`` in ``freqs`` (cycles per unit length). Features beyond
    ``2 dx len(freqs)`` are left as they are.
    """
    m, h, d = x.shape
    dx = pos.shape[-1]
    nf = len(freqs)
    ang = 2.0 * jnp.pi * pos[:, :, None] * jnp.asarray(freqs, x.dtype)  # [m, dx, nf]
    cos, sin = jnp.cos(ang)[:, None], jnp.sin(ang)[:, None]  # [m, 1, dx, nf]
    used = 2 * nf * dx
    c = x[..., :used].reshape(m, h, dx, 2, nf)
    a, b = c[..., 0, :], c[..., 1, :]
    rot = jnp.stack([a * cos - b * sin, b * cos + a * sin], axis=-2).reshape(m, h, used)
    return jnp.concatenate([rot, x[..., used:]], axis=-1)


def anchor_distances(coords: Float[Array, "n dx"], ref: int) -> Float[Array, "n r"]:
    """Euclidean distances of each point to the ``ref^dx`` grid points ``linspace(0, 1,
    ref)^dx`` (the authors' fixed position embedding for ``[0, 1]``-scaled coordinates)."""
    dx = coords.shape[-1]
    axis = jnp.linspace(0.0, 1.0, ref, dtype=coords.dtype)
    anchors = jnp.stack(jnp.meshgrid(*([axis] * dx), indexing="ij"), -1).reshape(-1, dx)
    diff = coords[:, None, :] - anchors[None]
    return jnp.sqrt(jnp.sum(diff**2, axis=-1))


def lattice_frequencies(m: int, coord_dim: int) -> np.ndarray:
    """The ``m`` lowest Fourier modes of the unit torus, ``[m, coord_dim]`` integers.

    Zero first, then one of each pair ``+-k`` (the first nonzero entry positive),
    in order of ``|k|`` (ties in lexicographic order): ``cos`` and ``sin`` at
    these frequencies span the trigonometric polynomials of lowest degree.
    """
    r = 1
    while True:
        axis = np.arange(-r, r + 1)
        ks = np.stack(np.meshgrid(*([axis] * coord_dim), indexing="ij"), -1).reshape(-1,
                                                                                   coord_dim)
        first = np.array([k[np.flatnonzero(k)[0]] if k.any() else 1 for k in ks])
        ks = ks[first > 0]
        ks = ks[np.lexsort((*ks.T[::-1], np.sum(ks**2, axis=1)))]
        norms = np.sum(ks**2, axis=1)
        if len(ks) >= m and norms[m - 1] <= r * r:
            return ks[:m].astype(float)
        r += 1


def rope_vectors(freqs: tuple[float, ...], coord_dim: int, heads: int) -> np.ndarray:
    """Frequency vectors of the ``"diagonal"`` RoPE, ``[heads, p, coord_dim]``.

    For each frequency ``f`` (cycles per unit): ``f e_j`` along every axis and
    ``f (e_j + e_k)``, ``f (e_j - e_k)`` along every pair of axes (4 vectors per
    frequency in 2-D), so the attention kernel holds mixed Fourier moments such as
    ``cos 2 pi f (x + y)``, not only the axial ones. Dealt out to the heads in turn;
    a head with fewer vectors than the others gets zero vectors (no rotation).
    """
    eye = np.eye(coord_dim)
    dirs = [eye[j] for j in range(coord_dim)]
    for j in range(coord_dim):
        for k in range(j + 1, coord_dim):
            dirs += [eye[j] + eye[k], eye[j] - eye[k]]
    vecs = [f * d for f in freqs for d in dirs]
    per_head = -(-len(vecs) // heads)
    out = np.zeros((heads, per_head, coord_dim))
    for i, v in enumerate(vecs):
        out[i % heads, i // heads] = v
    return out


def _rotate(x: Float[Array, "m h d"], pos: Float[Array, "m dx"], vectors: np.ndarray):
    """Rotary embedding with frequency vectors ``[h, p, dx]`` (one set per head): the
    feature pair ``(x_i, x_{p+i})`` of head ``h`` is rotated by ``2 pi w_hi . pos``.
    Relative like :func:`rotary`: ``R(x)^T R(y) = R(y - x)`` pair by pair."""
    p = vectors.shape[1]
    ang = 2.0 * jnp.pi * jnp.einsum("mx,hpx->mhp", pos, jnp.asarray(vectors, x.dtype))
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    a, b = x[..., :p], x[..., p : 2 * p]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., 2 * p :]], axis=-1)


class GalerkinAttention(eqx.Module):
    """Multi-head Galerkin attention ``Q (LN(K)^T LN(V)) / n_obs`` with a point weight.

    ``queries`` ``[q, e]`` attend to ``points`` ``[n, e]``; ``weight`` ``[n]`` (0/1)
    removes points from the key/value sum and from the count ``n_obs``. With
    ``rope`` frequencies, queries and keys are rotated by their positions
    (:func:`rotary`), as in the authors' encoder: ``K^T V`` then holds Fourier-type
    moments ``sum_i R(x_i) k_i v_i^T`` of the point features. ``rope_mode``
    ``"diagonal"`` rotates by the frequency vectors of :func:`rope_vectors` instead
    (axes and diagonals, one set per head).
    """

    w_q: eqx.nn.Linear
    w_k: eqx.nn.Linear
    w_v: eqx.nn.Linear
    w_o: eqx.nn.Linear
    heads: int = eqx.field(static=True)
    head_dim: int = eqx.field(static=True)
    rope: tuple[float, ...] = eqx.field(static=True)
    rope_mode: str = eqx.field(static=True)
    coord_dim: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        heads: int,
        head_dim: int,
        *,
        rope: tuple[float, ...] = (),
        rope_mode: str = "axial",
        coord_dim: int = 2,
        key: jax.Array,
    ):
        kq, kk, kv, ko = jax.random.split(key, 4)
        inner = heads * head_dim
        self.w_q = eqx.nn.Linear(dim, inner, use_bias=False, key=kq)
        self.w_k = eqx.nn.Linear(dim, inner, use_bias=False, key=kk)
        self.w_v = eqx.nn.Linear(dim, inner, use_bias=False, key=kv)
        self.w_o = eqx.nn.Linear(inner, dim, key=ko)
        self.heads = heads
        self.head_dim = head_dim
        self.rope = tuple(float(f) for f in rope)
        self.rope_mode = rope_mode
        self.coord_dim = coord_dim

    def __call__(
        self,
        queries: Float[Array, "q e"],
        points: Float[Array, "n e"],
        weight: Float[Array, " n"],
        q_pos: Float[Array, "q dx"] | None = None,
        k_pos: Float[Array, "n dx"] | None = None,
    ) -> Float[Array, "q e"]:
        h, d = self.heads, self.head_dim
        q = _dense(self.w_q, queries).reshape(-1, h, d)
        # Galerkin normalisation: layer-normalise keys and values per head (Cao 2021,
        # eq. 2.6), no softmax; the 1/n_obs makes the sum a quadrature of an integral.
        k = _layer_norm(_dense(self.w_k, points).reshape(-1, h, d))
        v = _layer_norm(_dense(self.w_v, points).reshape(-1, h, d))
        if self.rope and self.rope_mode == "diagonal":
            vectors = rope_vectors(self.rope, self.coord_dim, h)
            q = _rotate(q, q_pos, vectors)
            k = _rotate(k, k_pos, vectors)
        elif self.rope:
            q = rotary(q, q_pos, self.rope)
            k = rotary(k, k_pos, self.rope)
        n_obs = jnp.maximum(jnp.sum(weight), 1.0)
        kv = jnp.einsum("nhd,nhe,n->hde", k, v, weight) / n_obs
        out = jnp.einsum("qhd,hde->qhe", q, kv).reshape(-1, h * d)
        return _dense(self.w_o, out)


class _FeedForward(eqx.Module):
    norm: _LayerNorm
    lin1: eqx.nn.Linear
    lin2: eqx.nn.Linear

    def __init__(self, dim: int, hidden: int, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.norm = _LayerNorm(dim)
        self.lin1 = eqx.nn.Linear(dim, hidden, key=k1)
        self.lin2 = eqx.nn.Linear(hidden, dim, key=k2)

    def __call__(self, x: Float[Array, "... e"]) -> Float[Array, "... e"]:
        return x + _dense(self.lin2, jax.nn.gelu(_dense(self.lin1, self.norm(x))))


class _Block(eqx.Module):
    """Pre-norm residual block: ``x + Attn(LN x, points)``, then ``x + FFN(LN x)``."""

    norm: _LayerNorm
    attn: GalerkinAttention
    ffn: _FeedForward

    def __init__(self, dim: int, heads: int, head_dim: int, *, rope=(), rope_mode="axial",
                 coord_dim=2, key: jax.Array):
        ka, kf = jax.random.split(key)
        self.norm = _LayerNorm(dim)
        self.attn = GalerkinAttention(dim, heads, head_dim, rope=rope, rope_mode=rope_mode,
                                      coord_dim=coord_dim, key=ka)
        self.ffn = _FeedForward(dim, 2 * dim, key=kf)

    def __call__(self, x, points, weight, x_pos=None, p_pos=None):
        x = x + self.attn(self.norm(x), points, weight, x_pos, p_pos)
        return self.ffn(x)


def _as_arrays(*xs):
    """Array-likes (lists, tuples) as arrays; arrays, tracers and ``None`` unchanged."""
    return tuple(x if x is None or hasattr(x, "shape") else jnp.asarray(x) for x in xs)


def point_mask(
    mask: Bool[Array, " n"] | Bool[Array, "n c"] | None, n: int, channels: int
) -> Bool[Array, "n c"]:
    """A per-channel observation mask ``[n, c]`` from ``None``, ``[n]`` or ``[n, c]``."""
    if mask is None:
        return jnp.ones((n, channels), bool)
    mask = jnp.asarray(mask, bool)
    if mask.ndim == 1:
        return jnp.broadcast_to(mask[:, None], (n, channels))
    return mask


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """Sizes of a :class:`FunctionEncoder` (the one place their defaults live).

    Attributes:
      n_tokens, token_dim: latent tokens ``K`` and their size (``latent_dim = K *
        token_dim``; the authors' NS run uses 8 x 16, the defaults here).
      width: feature width of points and tokens.
      heads: attention heads (``width`` split evenly between them).
      n_self_layers: Galerkin self-attention layers over the points (authors: 3).
      n_cross_layers: cross-attention blocks of the tokens onto the points (authors: 2).
      n_freqs: learned coordinate frequencies; ``freq_scale`` their initial spread
        (in cycles per unit length of the coordinates).
      rope: rotary-embedding frequencies (cycles per unit length) of the
        attention's queries and keys; default ``8, 4, 2, 1`` for coordinates in
        ``[0, 1)`` (the authors use RoPE with a base-10000 geometric ladder);
        ``()`` turns it off. The latent queries carry learned positions.
      rope_mode: ``"axial"`` (the authors': each frequency along each axis, the
        same in every head) or ``"diagonal"`` (ours: along the axes and the
        diagonals, dealt out to the heads, :func:`rope_vectors`; mixed moments
        such as ``cos 2 pi f (x + y)`` for fields that are not separable).
      pos_ref: ``r > 0`` adds the authors' fixed positional features (their
        ``--pos_emb``, Transolver's unified position embedding): the distances of
        each point to an ``r^dx`` grid of reference points on ``[0, 1]^dx``
        (:func:`anchor_distances`; computed from the coordinates, so any point
        set); 0 (default) leaves them out.
      basis: ``m > 0`` adds a linear function-encoder path (ours): learned basis
        functions ``psi_k`` and the latent gets ``W vec(c)`` with the coefficients
        ``c_kj = sum_i psi_k(x_i) u_ij m_ij / sum_i m_ij`` (quadrature of
        ``<psi_k, u_j>`` over each channel's observed points), so linear
        functionals of the field (POD- or Fourier-type coordinates) are one linear
        layer away; 0 (default) leaves it out.
      basis_kind: ``"fourier"``: ``psi = [cos, sin](2 pi f_k . x)`` at ``m`` learned
        frequencies initialised at the ``m`` lowest Fourier modes of the unit
        torus (:func:`lattice_frequencies`; ``2 m`` functions); ``"mlp"``: ``m``
        functions ``MLP(position features)``.

    >>> EncoderConfig(token_dim=8).latent_dim
    64
    """

    n_tokens: int = 8  # authors (NS): latent_tokens 8
    token_dim: int = 16  # authors (NS): 16
    width: int = 64
    heads: int = 4
    n_self_layers: int = 1
    n_cross_layers: int = 2
    n_freqs: int = 16
    freq_scale: float = 4.0
    rope: tuple[float, ...] = (8.0, 4.0, 2.0, 1.0)
    rope_mode: str = "axial"
    pos_ref: int = 0
    basis: int = 0
    basis_kind: str = "fourier"

    def __post_init__(self):
        check_int("n_tokens", self.n_tokens, min=1)
        check_int("token_dim", self.token_dim, min=1)
        check_int("width", self.width, min=1)
        check_int("heads", self.heads, min=1)
        check_int("n_self_layers", self.n_self_layers, min=0)
        check_int("n_cross_layers", self.n_cross_layers, min=1)
        check_int("n_freqs", self.n_freqs, min=0)
        check_scalar("freq_scale", self.freq_scale, gt=0.0)
        rope = tuple(float(check_scalar("rope[i]", f, gt=0.0)) for f in self.rope)
        object.__setattr__(self, "rope", rope)
        check_choice("rope_mode", self.rope_mode, ("axial", "diagonal"))
        check_int("pos_ref", self.pos_ref, min=0)
        check_int("basis", self.basis, min=0)
        check_choice("basis_kind", self.basis_kind, ("fourier", "mlp"))
        if self.width % self.heads:
            raise ValueError(f"width must be divisible by heads, got width={self.width}, "
                             f"heads={self.heads}")

    @property
    def latent_dim(self) -> int:
        """``n_tokens * token_dim``."""
        return self.n_tokens * self.token_dim


class FunctionEncoder(eqx.Module):
    """Set of ``(coordinate, value)`` pairs with a mask -> latent observable ``z``.

    Call as ``encoder(coords, values, mask=None) -> z`` with ``coords`` ``[n, dx]``,
    ``values`` ``[n, c]`` and ``mask`` ``None`` (all observed), ``[n]`` (per point)
    or ``[n, c]`` (per channel, e.g. a delay-stacked snapshot whose frames were
    observed at different points). ``n`` may differ between calls; ``z`` has
    ``latent_dim = n_tokens * token_dim`` entries.

    Args (construction):
      coord_dim: spatial dimension ``dx``.
      channels: value channels ``c`` per point.
      config: the sizes, an :class:`EncoderConfig`.
      key: PRNG key for the initial weights.
    """

    freqs: Float[Array, "f dx"]
    embed_in: eqx.nn.Linear
    embed_out: eqx.nn.Linear
    self_blocks: tuple[_Block, ...]
    queries: Float[Array, "k e"]
    query_pos: Float[Array, "k dx"]
    cross_blocks: tuple[_Block, ...]
    out_proj: eqx.nn.Linear
    basis_in: eqx.nn.Linear | Float[Array, "m dx"] | None
    basis_out: eqx.nn.Linear | None
    basis_proj: eqx.nn.Linear | None
    coord_dim: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    n_tokens: int = eqx.field(static=True)
    token_dim: int = eqx.field(static=True)
    pos_ref: int = eqx.field(static=True)

    def __init__(
        self,
        coord_dim: int,
        channels: int,
        config: EncoderConfig = EncoderConfig(),
        *,
        key: jax.Array,
    ):
        check_int("coord_dim", coord_dim, min=1)
        check_int("channels", channels, min=1)
        if not isinstance(config, EncoderConfig):
            raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
        check_key("key", key)
        n_tokens, token_dim, width, heads = (config.n_tokens, config.token_dim, config.width,
                                             config.heads)
        n_self_layers, n_cross_layers = config.n_self_layers, config.n_cross_layers
        n_freqs, freq_scale, rope = config.n_freqs, config.freq_scale, config.rope
        keys = jax.random.split(key, 6 + n_self_layers + n_cross_layers)
        self.freqs = freq_scale * jax.random.normal(keys[0], (n_freqs, coord_dim))
        n_pos = coord_dim + 2 * n_freqs + (config.pos_ref**coord_dim if config.pos_ref else 0)
        n_in = 2 * channels + n_pos
        self.embed_in = eqx.nn.Linear(n_in, 2 * width, key=keys[1])
        self.embed_out = eqx.nn.Linear(2 * width, width, key=keys[2])
        head_dim = width // heads
        rope_mode = config.rope_mode
        if rope_mode == "diagonal":
            used = 2 * rope_vectors(rope, coord_dim, heads).shape[1] if rope else 0
            if used > head_dim:
                raise ValueError(
                    f"rope_mode='diagonal' with {len(rope)} frequencies rotates {used} "
                    f"features per head, more than the head size {head_dim}"
                )
        elif 2 * len(rope) * coord_dim > head_dim:
            raise ValueError(
                f"rope has {len(rope)} frequencies, which rotate 2 * {len(rope)} * coord_dim = "
                f"{2 * len(rope) * coord_dim} features, more than the head size {head_dim}"
            )
        blk = functools.partial(_Block, width, heads, head_dim, rope=rope, rope_mode=rope_mode,
                                coord_dim=coord_dim)
        self.self_blocks = tuple(
            blk(key=k)
            for k in keys[6 : 6 + n_self_layers]
        )
        self.queries = jax.random.normal(keys[3], (n_tokens, width)) / np.sqrt(width)
        self.query_pos = jax.random.uniform(keys[5], (n_tokens, coord_dim))
        self.cross_blocks = tuple(
            blk(key=k)
            for k in keys[6 + n_self_layers :]
        )
        self.out_proj = eqx.nn.Linear(width, token_dim, use_bias=False, key=keys[4])
        if config.basis and config.basis_kind == "fourier":
            kb = jax.random.fold_in(key, 1)
            self.basis_in = jnp.asarray(lattice_frequencies(config.basis, coord_dim),
                                        jnp.result_type(float))
            self.basis_out = None
            self.basis_proj = eqx.nn.Linear(2 * config.basis * channels,
                                            n_tokens * token_dim, use_bias=False, key=kb)
        elif config.basis:
            kb = jax.random.split(jax.random.fold_in(key, 1), 3)
            self.basis_in = eqx.nn.Linear(n_pos, 2 * width, key=kb[0])
            self.basis_out = eqx.nn.Linear(2 * width, config.basis, key=kb[1])
            self.basis_proj = eqx.nn.Linear(config.basis * channels, n_tokens * token_dim,
                                            use_bias=False, key=kb[2])
        else:
            self.basis_in = self.basis_out = self.basis_proj = None
        self.coord_dim = coord_dim
        self.channels = channels
        self.n_tokens = n_tokens
        self.token_dim = token_dim
        self.pos_ref = config.pos_ref

    @property
    def latent_dim(self) -> int:
        return self.n_tokens * self.token_dim

    def check_inputs(self, coords, values, mask) -> None:
        """Validate one observation set (shapes always; values when concrete)."""
        check_array("coords", coords, ndim=2, dtype="floating")
        n = coords.shape[0]
        if coords.shape[1] != self.coord_dim:
            raise ValueError(
                f"coords must have shape (n, {self.coord_dim}) for this encoder, "
                f"got {tuple(coords.shape)}"
            )
        if n == 0:
            raise ValueError("coords is an empty observation set (0 points); give at least one")
        check_array("values", values, ndim=2, dtype="floating", finite=False)
        if tuple(values.shape) != (n, self.channels):
            raise ValueError(
                f"values must have shape (n, c) = ({n}, {self.channels}) to match coords' "
                f"{n} points and the encoder's {self.channels} channels, got {tuple(values.shape)}"
            )
        if mask is not None:
            check_array("mask", mask, dtype="bool")
            if tuple(mask.shape) not in ((n,), (n, self.channels)):
                raise ValueError(
                    f"mask must have shape ({n},) or ({n}, {self.channels}) to match values, "
                    f"got {tuple(mask.shape)}"
                )
        if isinstance(values, jax.core.Tracer) or isinstance(mask, jax.core.Tracer):
            return
        m = np.ones(values.shape, bool) if mask is None else np.asarray(mask, bool)
        if m.ndim == 1:
            m = np.broadcast_to(m[:, None], values.shape)
        if not m.any():
            raise ValueError(
                "mask leaves an empty observation set: every point is masked out; "
                "at least one point must be observed"
            )
        v = np.asarray(values)
        if not np.isfinite(v[m]).all():
            raise ValueError(
                "values must be finite at observed points (NaN/inf is allowed only where "
                f"mask is False), got {int((~np.isfinite(v[m])).sum())} non-finite observed values"
            )

    def __call__(
        self,
        coords: Float[Array, "n dx"],
        values: Float[Array, "n c"],
        mask: Bool[Array, " n"] | Bool[Array, "n c"] | None = None,
    ) -> Float[Array, " d"]:
        coords, values, mask = _as_arrays(coords, values, mask)  # lists too, once
        self.check_inputs(coords, values, mask)
        m = point_mask(mask, coords.shape[0], self.channels)
        # An all-masked set inside jit/vmap: fail loudly rather than return the queries.
        m = eqx.error_if(m, ~jnp.any(m), "empty observation set: every point is masked out")
        return self.apply(coords, values, m)

    def apply(
        self,
        coords: Float[Array, "n dx"],
        values: Float[Array, "n c"],
        mask: Bool[Array, "n c"],
    ) -> Float[Array, " d"]:
        """The encoder without input checks (``mask`` per channel, ``[n, c]``).

        For callers that validated their data before tracing (the training and
        encoding helpers of :mod:`jaxsci.dynamics.koopman` do): it holds no
        host callback, so its compiled programs can be cached on disk.
        """
        m = mask
        weight = jnp.any(m, axis=-1).astype(values.dtype)
        mf = m.astype(values.dtype)
        # where (not multiply) so that NaN placeholders at masked entries stay harmless.
        vals = jnp.where(m, values, 0.0)
        phase = 2.0 * jnp.pi * coords @ self.freqs.T
        pos = jnp.concatenate([coords, jnp.sin(phase), jnp.cos(phase)], axis=-1)
        if self.pos_ref:
            pos = jnp.concatenate([pos, anchor_distances(coords, self.pos_ref)], axis=-1)
        # The first layer split into its value and coordinate columns: under vmap over
        # snapshots sharing their points, the coordinate half is computed once.
        nv = 2 * self.channels
        w_in = self.embed_in.weight
        pre = jnp.concatenate([vals, mf], axis=-1) @ w_in[:, :nv].T
        pre = pre + (pos @ w_in[:, nv:].T + self.embed_in.bias)
        h = _dense(self.embed_out, jax.nn.gelu(pre))
        for block in self.self_blocks:
            h = block(h, h, weight, coords, coords)
        tokens = self.queries
        for block in self.cross_blocks:
            tokens = block(tokens, h, weight, self.query_pos, coords)
        z = _dense(self.out_proj, tokens).reshape(-1)
        if self.basis_proj is not None and self.basis_out is None:
            ph = 2.0 * jnp.pi * coords @ self.basis_in.T
            psi = jnp.concatenate([jnp.cos(ph), jnp.sin(ph)], axis=-1)  # [n, 2m]
            coef = (psi.T @ vals) / jnp.maximum(jnp.sum(mf, axis=0), 1.0)  # [2m, c]
            z = z + _dense(self.basis_proj, coef.reshape(-1))
        elif self.basis_proj is not None:
            psi = _dense(self.basis_out, jax.nn.gelu(_dense(self.basis_in, pos)))  # [n, m]
            coef = (psi.T @ vals) / jnp.maximum(jnp.sum(mf, axis=0), 1.0)  # [m, c]
            z = z + _dense(self.basis_proj, coef.reshape(-1))
        return z
