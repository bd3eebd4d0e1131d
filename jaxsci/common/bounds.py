r"""Sound bounds of small feed-forward programs over boxes: IBP and CROWN in JAX.

A :class:`Program` is a chain of :class:`Layer` s, ``z_j = W_j h_{j-1} + b_j``,
``h_j = sigma_j(z_j)``, with one activation per unit chosen from
``IDENTITY, RELU, SQUARE, TANH, SIN, ABS`` (the activation codes are static, so a
program's structure is known at trace time while its weights are ordinary arrays:
programs are pytrees that ``jit``, ``vmap`` and ``grad`` go through). Everything the
Lyapunov module bounds -- the closed-loop maps of the subsystems, the neural
certificates, and the certificate conditions built from both -- is such a program,
assembled with the combinators :func:`affine`, :func:`elementwise`, :func:`compose`
and :func:`parallel` (and :func:`ridge` for dynamics of the form
``A u + B sigma(C u + d) + e``).

Bounds
------
* :func:`ibp` -- interval bound propagation (Gowal et al. 2018): intervals pushed
  through every layer.
* :func:`crown` -- the linear relaxation of Zhang et al. 2018 ("CROWN", the bound
  engine of auto_LiRPA / alpha-beta-CROWN): each non-linear unit ``h = sigma(z)`` on
  its pre-activation interval ``[l, u]`` is enclosed by two lines
  ``a_l z + b_l <= sigma(z) <= a_u z + b_u``; the output is bounded by propagating a
  linear function backwards through the relaxed network and concretising it on the
  input box. Pre-activation bounds of every non-linear unit are themselves CROWN
  bounds (one backward pass per layer), intersected with IBP. The relaxations are
  the standard ones: ReLU -- the triangle upper line and the adaptive lower slope
  (0 or 1); square and abs -- secant above, tangent (resp. slope +-1) below; tanh
  and sin -- the secant slope ``k`` with the two parallel lines through the extreme
  values of ``sigma(z) - k z`` on ``[l, u]`` (found in closed form at the endpoints
  and at the stationary points ``sigma'(z) = k``). The returned output bounds are
  intersected with IBP's, so they are never looser than IBP.

Floating-point soundness
------------------------
The bounds enclose the *real-valued* function defined by the program's (float32)
weights, despite being computed in floating point:

* every matrix product runs at ``Precision.HIGHEST`` (on GPUs/TPUs the default
  float32 product may use TF32/bf16 passes) and is followed by an outward pad of
  the standard forward error bound ``gamma_n |A| |B|`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, Sec. 3.5; ``gamma_n = n u / (1 - n u)``, ``u``
  the unit roundoff of the dtype), applied to the magnitudes of the quantities the
  product multiplies (IBP: the interval endpoints; CROWN: every backward step
  pads the constant by ``gamma |Lambda| |W| max|h|`` and ``u |nu| max|z|``, and the
  final concretisation by ``gamma (|A| max|x| + sum of |constants|)``);
* every relaxation line is moved outward by a few units in the last place of its
  intercept; tanh and sin values are padded by 8 ulp (XLA's float32 tanh/sin are
  accurate to a few ulp) plus a bound on the error of locating stationary points;
* bounds that meet at a point are never rounded inward (``lower <= upper`` after
  padding).

This is the error analysis of the *algorithm*, not a machine-checked proof; it
assumes IEEE round-to-nearest arithmetic in XLA (no reassociation beyond what
``gamma_n`` allows, no flushing of results above 1e-30 to zero). A tiny absolute
pad (1e-30 per term) covers flushed denormals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array

__all__ = [
    "IDENTITY",
    "RELU",
    "SQUARE",
    "TANH",
    "SIN",
    "ABS",
    "ACTIVATIONS",
    "Layer",
    "Program",
    "Bounds",
    "LinearBounds",
    "affine",
    "elementwise",
    "identity",
    "compose",
    "parallel",
    "ridge",
    "apply",
    "ibp",
    "crown",
    "check_box",
]

IDENTITY, RELU, SQUARE, TANH, SIN, ABS = 0, 1, 2, 3, 4, 5
ACTIVATIONS = {
    "identity": IDENTITY,
    "relu": RELU,
    "square": SQUARE,
    "tanh": TANH,
    "sin": SIN,
    "abs": ABS,
}
_FN = {
    RELU: jax.nn.relu,
    SQUARE: jnp.square,
    TANH: jnp.tanh,
    SIN: jnp.sin,
    ABS: jnp.abs,
}
_HI = jax.lax.Precision.HIGHEST
_TINY = 1e-30  # absolute pad per accumulated term (flushed denormals)
_TRANSCENDENTAL_ULPS = 8.0


class Layer(eqx.Module):
    """``h = act(W x + b)``: dense weights and one static activation code per unit."""

    W: Float[Array, "out inp"]
    b: Float[Array, " out"]
    act: tuple[int, ...] = eqx.field(static=True)

    def __check_init__(self):
        if self.W.shape[-2] != self.b.shape[-1] or len(self.act) != self.b.shape[-1]:
            raise ValueError(
                f"Layer: W has {self.W.shape[-2]} rows, b has {self.b.shape[-1]} entries and "
                f"act has {len(self.act)} codes; they must agree"
            )
        bad = [a for a in self.act if a not in _FN and a != IDENTITY]
        if bad:
            raise ValueError(f"Layer: unknown activation codes {sorted(set(bad))}")


class Program(eqx.Module):
    """A chain of layers; ``program(u)`` evaluates it (any leading batch dims)."""

    layers: tuple[Layer, ...]

    def __check_init__(self):
        if not self.layers:
            raise ValueError("Program needs at least one layer")
        for i in range(1, len(self.layers)):
            a, b = self.layers[i - 1], self.layers[i]
            if b.W.shape[-1] != a.W.shape[-2]:
                raise ValueError(
                    f"Program: layer {i} takes {b.W.shape[-1]} inputs but layer {i - 1} "
                    f"gives {a.W.shape[-2]}"
                )

    @property
    def in_dim(self) -> int:
        return self.layers[0].W.shape[-1]

    @property
    def out_dim(self) -> int:
        return self.layers[-1].W.shape[-2]

    def __call__(self, u: Float[Array, "... n"]) -> Float[Array, "... m"]:
        return apply(self, u)


class Bounds(NamedTuple):
    lower: Float[Array, " m"]
    upper: Float[Array, " m"]


class LinearBounds(NamedTuple):
    """Output bounds and the linear functions of the input they came from.

    ``lower_coef @ x + lower_const <= f(x) <= upper_coef @ x + upper_const`` on the
    box (up to the rounding pads); ``lower``/``upper`` are their concretisations,
    intersected with IBP.
    """

    lower: Float[Array, " m"]
    upper: Float[Array, " m"]
    lower_coef: Float[Array, "m n"]
    upper_coef: Float[Array, "m n"]


# --------------------------------------------------------------------------- construction


def _mm(a, b):
    return jnp.matmul(a, b, precision=_HI)


def affine(W: Float[Array, "out inp"], b: Float[Array, " out"] | None = None) -> Program:
    """The affine map ``x -> W x + b`` as a one-layer program."""
    W = jnp.asarray(W)
    if W.ndim != 2:
        raise ValueError(f"W must be a matrix, got shape {W.shape}")
    b = jnp.zeros(W.shape[0], W.dtype) if b is None else jnp.asarray(b, W.dtype)
    return Program((Layer(W, b, (IDENTITY,) * W.shape[0]),))


def identity(n: int, dtype=jnp.float32) -> Program:
    return affine(jnp.eye(n, dtype=dtype))


def elementwise(acts: Sequence[int | str], dtype=jnp.float32) -> Program:
    """Apply one activation per unit (codes or names from :data:`ACTIVATIONS`)."""
    codes = tuple(ACTIVATIONS[a] if isinstance(a, str) else int(a) for a in acts)
    n = len(codes)
    return Program((Layer(jnp.eye(n, dtype=dtype), jnp.zeros(n, dtype), codes),))


def _is_identity_layer(layer: Layer) -> bool:
    return all(a == IDENTITY for a in layer.act)


def compose(*programs: Program, fuse: bool = False) -> Program:
    """``compose(p, q)(x) = q(p(x))``.

    With ``fuse=True`` an all-identity last layer of ``p`` is multiplied into the
    first layer of ``q``. The fused weights then *define* the program; use it only
    where the product is exact in floating point (selection or sign matrices) or
    where the fused program is the model you mean (the unfused chain is the
    composition exactly, at the cost of one more layer).
    """
    if not programs:
        raise ValueError("compose needs at least one program")
    layers = list(programs[0].layers)
    for p in programs[1:]:
        if layers[-1].W.shape[-2] != p.in_dim:
            raise ValueError(
                f"compose: a program gives {layers[-1].W.shape[-2]} outputs but the next "
                f"takes {p.in_dim} inputs"
            )
        first = p.layers[0]
        if fuse and _is_identity_layer(layers[-1]):
            last = layers.pop()
            W = _mm(first.W, last.W)
            b = _mm(first.W, last.b) + first.b
            layers.append(Layer(W, b, first.act))
            layers.extend(p.layers[1:])
        else:
            layers.extend(p.layers)
    return Program(tuple(layers))


def _pad_depth(p: Program, depth: int) -> Program:
    layers = list(p.layers)
    n = p.out_dim
    dtype = layers[-1].W.dtype
    while len(layers) < depth:
        layers.append(Layer(jnp.eye(n, dtype=dtype), jnp.zeros(n, dtype), (IDENTITY,) * n))
    return Program(tuple(layers))


def _block_diag(mats):
    return jax.scipy.linalg.block_diag(*mats)


def parallel(*programs: Program) -> Program:
    """Programs on the same input, outputs concatenated: ``x -> [p1(x); p2(x); ...]``.

    Shorter programs are padded with identity layers (exact), so the result has the
    depth of the deepest one; the first layers are stacked, later ones block-diagonal.
    """
    if not programs:
        raise ValueError("parallel needs at least one program")
    n_in = programs[0].in_dim
    for p in programs:
        if p.in_dim != n_in:
            raise ValueError(f"parallel: programs take {p.in_dim} and {n_in} inputs; must agree")
    depth = max(len(p.layers) for p in programs)
    padded = [_pad_depth(p, depth) for p in programs]
    layers = []
    for k in range(depth):
        ls = [p.layers[k] for p in padded]
        Ws = [lay.W for lay in ls]
        W = jnp.concatenate(Ws, 0) if k == 0 else _block_diag(Ws)
        b = jnp.concatenate([lay.b for lay in ls])
        act = sum((lay.act for lay in ls), ())
        layers.append(Layer(W, b, act))
    return Program(tuple(layers))


def ridge(
    A: Float[Array, "n m"],
    B: Float[Array, "n p"],
    C: Float[Array, "p m"],
    d: Float[Array, " p"],
    acts: Sequence[int | str],
    e: Float[Array, " n"] | None = None,
) -> Program:
    """``u -> A u + B sigma(C u + d) + e`` with one activation per ridge unit.

    The normal form of the subsystem maps in :mod:`.systems`: linear dynamics plus a
    sum of scalar non-linearities of linear combinations (saturations, tanh
    car-following responses, sine power flows).
    """
    A, B, C = jnp.asarray(A), jnp.asarray(B), jnp.asarray(C)
    n, m = A.shape
    p = C.shape[0]
    if B.shape != (n, p) or C.shape != (p, m) or len(acts) != p:
        raise ValueError(
            f"ridge: A {A.shape}, B {B.shape}, C {C.shape} and {len(acts)} activations do not "
            "fit u -> A u + B sigma(C u + d)"
        )
    codes = tuple(ACTIVATIONS[a] if isinstance(a, str) else int(a) for a in acts)
    e = jnp.zeros(n, A.dtype) if e is None else jnp.asarray(e, A.dtype)
    first = Layer(
        jnp.concatenate([C, jnp.eye(m, dtype=A.dtype)], 0),
        jnp.concatenate([jnp.asarray(d, A.dtype), jnp.zeros(m, A.dtype)]),
        codes + (IDENTITY,) * m,
    )
    second = Layer(jnp.concatenate([B, A], 1), e, (IDENTITY,) * n)
    return Program((first, second))


# --------------------------------------------------------------------------- evaluation


def _groups(act: tuple[int, ...]) -> dict[int, np.ndarray]:
    """Static boolean masks, one per activation code present in the layer."""
    codes = np.asarray(act)
    return {int(c): codes == c for c in np.unique(codes)}


def _select(groups, default, values):
    """Pick ``values[code]`` on each code's units (static masks: no scatter ops)."""
    out = default
    for code, mask in groups.items():
        if code in values:
            out = values[code] if mask.all() else jnp.where(mask, values[code], out)
    return out


def _activate(z, act):
    groups = _groups(act)
    return _select(groups, z, {c: _FN[c](z) for c in groups if c != IDENTITY})


def apply(program: Program, u: Float[Array, "... n"]) -> Float[Array, "... m"]:
    """Evaluate ``program`` at ``u`` (leading dimensions are batch dimensions)."""
    h = u
    for layer in program.layers:
        h = _activate(jnp.matmul(h, layer.W.T, precision=_HI) + layer.b, layer.act)
    return h


# --------------------------------------------------------------------------- rounding


def _unit_roundoff(dtype) -> float:
    return float(jnp.finfo(dtype).eps) / 2.0


def _gamma(n: int, u: float) -> float:
    nu = n * u
    return nu / (1.0 - nu)


# --------------------------------------------------------------------------- IBP


def _affine_interval(layer: Layer, lo, hi, u):
    """``W x + b`` over ``[lo, hi]`` in centre-radius form (two products, as plain IBP).

    ``c = (lo + hi)/2`` and ``r = (hi - lo)/2`` are computed in floating point, so the
    radius is widened to ``r' = r (1 + 4u) + 2u |c|`` (``|c - c_exact| <= u |c|``,
    ``r_exact <= r (1 + u)``, and the two roundings of forming ``r'`` cost at most
    ``2u r'``), which covers the box in real arithmetic. The rounding pad is
    ``gamma_{n+6}`` times the magnitudes of the terms, ``|W| |c| + |b| + |W| r'``
    (``gamma_n`` for each product, the bias, the two final additions, with room), with
    ``|W| |c| <= rowsum(|W|) max|c|``: a third matrix product would cost as much as
    the bound itself, and the pad is ``O(n u)``.

    The products are written with the box on the left (``c W^T``, not ``W c``): vmapped
    over boxes, that is one ``(boxes, n) x (n, m)`` matrix product whose result is
    already in row order. With ``W c`` (batched on its right operand) XLA's CPU program
    for this function was 1.3-1.9x slower on the benchmark's two larger networks
    (``scripts/bench/lyapunov.py``; why was not profiled: the product's result layout
    and its fusion with the pads are the likely place). The pads' matrix-vector
    products in CROWN's backward pass below are written the same way.
    """
    W = layer.W
    aW = jnp.abs(W)
    c = 0.5 * (lo + hi)
    r = 0.5 * (hi - lo) * (1.0 + 4.0 * u) + 2.0 * u * jnp.abs(c)
    zc = _mm(c, W.mT) + layer.b
    zr = _mm(r, aW.mT)
    cmax = jnp.max(jnp.abs(c), axis=-1, keepdims=True)
    n = W.shape[-1]
    mag = jnp.sum(aW, -1) * cmax + jnp.abs(layer.b) + zr * (1.0 + 2.0 * _gamma(n, u))
    err = _gamma(n + 6, u) * mag + _TINY
    return zc - zr - err, zc + zr + err


def _sin_range(zl, zu, eps):
    two_pi = 2.0 * math.pi
    full = (zu - zl) >= two_pi
    s_l, s_u = jnp.sin(zl), jnp.sin(zu)
    # Is a maximum (pi/2 + 2 pi n) or a minimum (-pi/2 + 2 pi n) inside [zl, zu]?
    n_max = jnp.ceil((zl - 0.5 * math.pi) / two_pi)
    has_max = (0.5 * math.pi + two_pi * n_max) <= zu
    n_min = jnp.ceil((zl + 0.5 * math.pi) / two_pi)
    has_min = (-0.5 * math.pi + two_pi * n_min) <= zu
    lo = jnp.where(has_min | full, -1.0, jnp.minimum(s_l, s_u))
    hi = jnp.where(has_max | full, 1.0, jnp.maximum(s_l, s_u))
    # ulp pad plus the quadratic error of a slightly misplaced extremum test.
    pad = _TRANSCENDENTAL_ULPS * eps * (1.0 + jnp.maximum(jnp.abs(zl), jnp.abs(zu)))
    pad = pad + 0.5 * jnp.square(1e-3 * pad)
    return jnp.maximum(lo - pad, -1.0), jnp.minimum(hi + pad, 1.0)


def _act_interval(zl, zu, act, u):
    eps = 2.0 * u
    groups = _groups(act)
    lows, highs = {}, {}
    a, b = zl, zu
    for code in groups:
        if code == IDENTITY:
            continue
        if code == RELU:
            nl, nh = jax.nn.relu(a), jax.nn.relu(b)
        elif code == SQUARE:
            a2, b2 = jnp.square(a), jnp.square(b)
            nl = jnp.where(a > 0, a2, jnp.where(b < 0, b2, 0.0)) * (1.0 - 2.0 * eps)
            nh = jnp.maximum(a2, b2) * (1.0 + 2.0 * eps) + _TINY
        elif code == ABS:
            nl = jnp.where(a > 0, a, jnp.where(b < 0, -b, 0.0))
            nh = jnp.maximum(jnp.abs(a), jnp.abs(b))
        elif code == TANH:
            ta, tb = jnp.tanh(a), jnp.tanh(b)
            nl = jnp.maximum(ta - _TRANSCENDENTAL_ULPS * eps * (jnp.abs(ta) + 1e-6), -1.0)
            nh = jnp.minimum(tb + _TRANSCENDENTAL_ULPS * eps * (jnp.abs(tb) + 1e-6), 1.0)
        else:  # SIN
            nl, nh = _sin_range(a, b, eps)
        lows[code], highs[code] = nl, nh
    return _select(groups, zl, lows), _select(groups, zu, highs)


def _ibp_layers(program: Program, lower, upper):
    """Pre-activation bounds of every layer and post-activation bounds."""
    u = _unit_roundoff(lower.dtype)
    pre, post = [], []
    lo, hi = lower, upper
    for layer in program.layers:
        zl, zu = _affine_interval(layer, lo, hi, u)
        pre.append((zl, zu))
        lo, hi = _act_interval(zl, zu, layer.act, u)
        post.append((lo, hi))
    return pre, post


def ibp(program: Program, lower: Float[Array, " n"], upper: Float[Array, " n"]) -> Bounds:
    """Interval bounds of ``program`` over the box ``[lower, upper]``.

    Jittable, vmappable over boxes (``lower``, ``upper``) and over the program's
    weights, and differentiable in both (almost everywhere: the bounds are piecewise
    smooth in the box and the weights).

    Args:
      program: the :class:`Program` to bound.
      lower, upper: the box, ``(in_dim,)`` each, ``lower <= upper`` (array-likes are
        converted to the program's dtype).

    Returns:
      :class:`Bounds` with ``lower <= program(x) <= upper`` for every ``x`` in the box.
    """
    lower, upper = check_box(program, lower, upper)
    _, post = _ibp_layers(program, lower, upper)
    return Bounds(*post[-1])


# --------------------------------------------------------------------------- CROWN


def _relax(zl, zu, act, u):
    """Lines ``al z + bl <= sigma(z) <= au z + bu`` on ``[zl, zu]`` for every unit."""
    eps = 2.0 * u
    groups = _groups(act)
    one, zero = jnp.ones_like(zl), jnp.zeros_like(zl)
    lines = {}
    a, b = zl, zu
    mag = jnp.maximum(jnp.abs(a), jnp.abs(b))
    for code in groups:
        if code == IDENTITY:
            continue
        if code == RELU:
            cross = (a < 0) & (b > 0)
            dead = b <= 0
            width = jnp.where(cross, b - a, 1.0)
            s = jnp.where(cross, b / width, jnp.where(dead, 0.0, 1.0))
            t = jnp.where(cross, -s * a + 4.0 * eps * mag + _TINY, 0.0)
            sl = jnp.where(cross, (b >= -a).astype(zl.dtype), s)  # adaptive lower slope
            lines[code] = (sl, zero, s, t)
        elif code == SQUARE:
            m = 0.5 * (a + b)
            lines[code] = (2.0 * m, -jnp.square(m) * (1.0 + 2.0 * eps) - _TINY,
                           a + b, -a * b + 4.0 * eps * jnp.square(mag) + _TINY)
        elif code == ABS:
            pos, neg = a >= 0, b <= 0
            cross = ~(pos | neg)
            width = jnp.where(cross, b - a, 1.0)
            s = jnp.where(cross, (b + a) / width, jnp.where(pos, 1.0, -1.0))
            t = jnp.where(cross, -2.0 * a * b / width + 4.0 * eps * mag + _TINY, 0.0)
            sl = jnp.where(cross, jnp.where(b >= -a, 1.0, -1.0), s)
            lines[code] = (sl, zero, s, t)
        else:
            lines[code] = _parallel_lines(a, b, code, eps)
    return tuple(
        _select(groups, dflt, {c: v[t] for c, v in lines.items()})
        for t, dflt in enumerate((one, zero, one, zero))
    )


def _parallel_lines(a, b, code, eps):
    """Secant slope ``k`` and the extreme values of ``sigma(z) - k z`` on ``[a, b]``."""
    fn = jnp.tanh if code == TANH else jnp.sin
    width = b - a
    mid = 0.5 * (a + b)
    deriv = (1.0 - jnp.square(jnp.tanh(mid))) if code == TANH else jnp.cos(mid)
    wide = width > 1e-4 * (1.0 + jnp.abs(mid))
    k = jnp.where(wide, (fn(b) - fn(a)) / jnp.where(wide, width, 1.0), deriv)
    if code == TANH:
        s = jnp.sqrt(jnp.clip(1.0 - k, 0.0, 1.0 - 1e-6))
        root = jnp.arctanh(s)
        stat = jnp.stack([root, -root], -1)
    else:
        two_pi = 2.0 * math.pi
        root = jnp.arccos(jnp.clip(k, -1.0, 1.0))
        n0 = jnp.floor(a / two_pi)
        shifts = jnp.stack([n0 - 1.0, n0, n0 + 1.0, n0 + 2.0], -1) * two_pi
        stat = jnp.concatenate([root[..., None] + shifts, -root[..., None] + shifts], -1)
    inside = (stat >= a[..., None]) & (stat <= b[..., None])
    cand = jnp.concatenate([jnp.stack([a, b], -1), stat], -1)
    ok = jnp.concatenate([jnp.ones(a.shape + (2,), bool), inside], -1)
    r = fn(cand) - k[..., None] * cand
    r_max = jnp.max(jnp.where(ok, r, -jnp.inf), -1)
    r_min = jnp.min(jnp.where(ok, r, jnp.inf), -1)
    mag = jnp.maximum(jnp.abs(a), jnp.abs(b))
    # Evaluation error (ulps of sigma and of k z) and the loss from a stationary point
    # located to ~1e-3 relative accuracy (|sigma''| <= 1): 0.5 (1e-3 (1 + |z|))^2.
    pad = _TRANSCENDENTAL_ULPS * eps * (1.0 + jnp.abs(k) * mag) + 0.5 * jnp.square(
        1e-3 * (1.0 + mag)
    )
    if code == SIN:
        full = width >= 2.0 * math.pi
        k = jnp.where(full, 0.0, k)
        r_min = jnp.where(full, -1.0, r_min)
        r_max = jnp.where(full, 1.0, r_max)
    return k, r_min - pad, k, r_max + pad


def _absmax(lo, hi):
    return jnp.maximum(jnp.abs(lo), jnp.abs(hi))


def _backward_upper(Lam, k, program, rel, pre, post, lower, upper, u):
    """Upper bounds of ``Lam @ z_k`` over the box; also the input coefficients.

    ``pre[j]`` bounds the pre-activations of layer ``j < k`` (CROWN/IBP), ``rel[j]`` are
    their relaxation lines and ``post[j]`` the post-activation bounds. Every product
    pads ``err`` with its rounding bound. The pads' products with ``|nu|`` are
    elementwise reductions that XLA fuses into one pass over ``nu`` (three
    matrix-vector products read the ``(rows, n)`` coefficients three times and made
    CROWN about 2x slower: ``scripts/bench/lyapunov.py``).
    """
    layers = program.layers
    layer = layers[k]
    xmax = _absmax(lower, upper)
    hmax_prev = xmax if k == 0 else _absmax(*post[k - 1])
    const = _mm(Lam, layer.b)
    cabs = _mm(jnp.abs(Lam), jnp.abs(layer.b))
    A = _mm(Lam, layer.W)
    err = _gamma(layer.W.shape[-1], u) * _mm(jnp.abs(Lam), _mm(hmax_prev, jnp.abs(layer.W).mT))
    n_terms = 2
    for j in range(k - 1, -1, -1):
        al, bl, au, bu = rel[j]
        Ap, An = jnp.maximum(A, 0.0), jnp.minimum(A, 0.0)
        nu = Ap * au + An * al
        t = Ap * bu + An * bl
        sat = jnp.sum(jnp.abs(t), -1)
        W, b = layers[j].W, layers[j].b
        hmax = xmax if j == 0 else _absmax(*post[j - 1])
        anu = jnp.abs(nu)
        pad = 2.0 * u * _absmax(*pre[j]) + _gamma(W.shape[-1], u) * _mm(hmax, jnp.abs(W).mT)
        const = const + jnp.sum(t, -1) + _mm(nu, b)
        cabs = cabs + sat + jnp.sum(anu * jnp.abs(b), -1)
        err = err + 2.0 * u * sat + jnp.sum(anu * pad, -1)
        A = _mm(nu, W)
        n_terms += 2
    Ap, An = jnp.maximum(A, 0.0), jnp.minimum(A, 0.0)
    ub = _mm(Ap, upper) + _mm(An, lower) + const
    err = err + _gamma(lower.shape[-1] + n_terms + 2, u) * (
        _mm(jnp.abs(A), xmax) + cabs
    ) + _TINY * (n_terms + lower.shape[-1])
    return ub + err, A


def _crown_layers(program, lower, upper, u, intermediate):
    pre_ibp, post_ibp = _ibp_layers(program, lower, upper)
    if intermediate == "ibp":
        rel = [_relax(zl, zu, lay.act, u) for (zl, zu), lay in zip(pre_ibp, program.layers,
                                                                   strict=True)]
        return pre_ibp, post_ibp, rel
    pre, post, rel = [], [], []
    for k, layer in enumerate(program.layers):
        zl, zu = pre_ibp[k]
        mask = np.asarray(layer.act) != IDENTITY
        if k > 0 and mask.any():
            # Only non-linear units need (tighter) bounds; E selects them. E^T scatters the
            # results back: a 0/1 matrix with one 1 per row, so the product is exact.
            E = np.eye(mask.size, dtype=np.float32)[mask]
            Ej = jnp.asarray(E, lower.dtype)
            ub, _ = _backward_upper(jnp.concatenate([Ej, -Ej], 0), k, program, rel, pre, post,
                                    lower, upper, u)
            m = E.shape[0]
            up = _mm(ub[:m], Ej)
            dn = _mm(-ub[m:], Ej)
            zl = jnp.where(mask, jnp.maximum(zl, dn), zl)
            zu = jnp.where(mask, jnp.minimum(zu, up), zu)
        pre.append((zl, zu))
        rel.append(_relax(zl, zu, layer.act, u))
        lo, hi = _act_interval(zl, zu, layer.act, u)
        # Identity units keep their IBP bounds (which can be wider than the
        # intersected pre-activation ones only through rounding): take the tighter.
        plo, phi = post_ibp[k]
        post.append((jnp.maximum(lo, plo), jnp.minimum(hi, phi)))
    return pre, post, rel


def crown(
    program: Program,
    lower: Float[Array, " n"],
    upper: Float[Array, " n"],
    *,
    C: Float[Array, "m out"] | None = None,
    intermediate: str = "crown",
) -> LinearBounds:
    """CROWN bounds of ``program`` (or of ``C @ program``) over ``[lower, upper]``.

    ``intermediate="crown"`` bounds every non-linear unit's pre-activation by its own
    backward pass (full CROWN, ``O(depth^2)`` passes); ``"ibp"`` uses IBP for them
    (CROWN-IBP, one pass). The output bounds are intersected with IBP's.

    Jittable, vmappable over boxes (``lower``, ``upper``) and over the program's
    weights, and differentiable in both almost everywhere (the relaxations switch
    form where a pre-activation interval crosses a kink: the bound is continuous
    there, its gradient jumps). ``intermediate`` is structure (static).

    Args:
      program: the :class:`Program` to bound.
      lower, upper: the box, ``(in_dim,)`` each, ``lower <= upper``.
      C: optional ``(m, out_dim)`` matrix: bound ``C @ program(x)`` instead.
      intermediate: ``"crown"`` or ``"ibp"`` (pre-activation bounds).

    Returns:
      :class:`LinearBounds`: the output bounds and the linear functions of the input
      they came from.
    """
    lower, upper = check_box(program, lower, upper)
    if intermediate not in ("crown", "ibp"):
        raise ValueError(f"intermediate must be 'crown' or 'ibp', got {intermediate!r}")
    return _crown(program, lower, upper, C, intermediate)


def _crown(program, lower, upper, C, intermediate):
    u = _unit_roundoff(lower.dtype)
    if not _is_identity_layer(program.layers[-1]):
        n = program.out_dim
        program = Program(program.layers + (Layer(jnp.eye(n, dtype=lower.dtype),
                                                  jnp.zeros(n, lower.dtype),
                                                  (IDENTITY,) * n),))
    pre, post, rel = _crown_layers(program, lower, upper, u, intermediate)
    n_out = program.out_dim
    C_given = C is not None
    C = jnp.eye(n_out, dtype=lower.dtype) if C is None else jnp.asarray(C, lower.dtype)
    m = C.shape[0]
    ub, A = _backward_upper(jnp.concatenate([C, -C], 0), len(program.layers) - 1, program,
                            rel, pre, post, lower, upper, u)
    lo_c, hi_c = -ub[m:], ub[:m]
    # Never looser than IBP: intersect with the interval bounds of C @ output.
    ol, oh = post[-1]
    if C_given:
        Cp, Cn = jnp.maximum(C, 0.0), jnp.minimum(C, 0.0)
        err = _gamma(n_out, u) * _mm(jnp.abs(C), _absmax(ol, oh)) + _TINY
        ol, oh = _mm(Cp, ol) + _mm(Cn, oh) - err, _mm(Cp, oh) + _mm(Cn, ol) + err
    return LinearBounds(jnp.maximum(lo_c, ol), jnp.minimum(hi_c, oh), -A[m:], A[:m])


# --------------------------------------------------------------------------- checks


def check_box(program: Program, lower, upper):
    """Validate a box for ``program``: shapes, dtype, ``lower <= upper``.

    Array-likes (lists) are accepted and converted once, to the program's dtype.
    ``lower > upper`` raises a ``ValueError`` when the box is concrete and an
    ``equinox`` runtime error inside ``jit``/``vmap`` (a batch of boxes included).

    Returns:
      ``(lower, upper)`` as arrays of the program's dtype.
    """
    if not isinstance(program, Program):
        raise TypeError(f"program must be a Program, got {type(program).__name__}")
    n = program.in_dim
    check_array("lower", lower, shape=(n,), dtype="floating")
    check_array("upper", upper, shape=(n,), dtype="floating")
    if not isinstance(lower, jax.core.Tracer) and not isinstance(upper, jax.core.Tracer):
        lo, hi = np.asarray(lower), np.asarray(upper)
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"empty domain: lower > upper at {bad.size} coordinate(s), e.g. index {i}: "
                f"lower={lo[i]} > upper={hi[i]}"
            )
    dtype = program.layers[0].W.dtype
    lower, upper = jnp.asarray(lower, dtype), jnp.asarray(upper, dtype)
    if isinstance(lower, jax.core.Tracer) or isinstance(upper, jax.core.Tracer):
        # Inside jit/vmap the values are unknown at trace time: a runtime check.
        lower = eqx.error_if(lower, jnp.any(lower > upper),
                             "empty domain: lower > upper at some coordinate of the box")
    return lower, upper
