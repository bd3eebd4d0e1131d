r"""FFCC: fast approximations of activations by IEEE-754 float reinterpretation.

Paper: "FFCC", a compiler that lowers activation functions written with basic
floating-point operators into instruction sequences built on float reinterpretation
(only the abstract was available; the equations below are the standard bit tricks the
abstract names, derived here).

The bit identity
----------------
A positive normal float ``x = 2^e (1 + m)``, ``m in [0, 1)``, has the bit pattern (read
as an integer) ``I(x) = L (e + B + m)`` with ``L = 2^23``, ``B = 127`` (float32;
``L = 2^52``, ``B = 1023`` for float64). Since ``log2(1 + m) ~ m``,

* (E1) ``I(x) / L - B = e + m ~ log2 x``: **log2 by reading the bits as an integer**,
  ``log2 x ~ I(x) / L - B + sigma_log`` (:func:`fast_log2`);
* (E2) read backwards, ``b^x = 2^{x log2 b} ~ F(L (B - sigma_exp) + x L log2 b)`` with
  ``F`` the integer-bits-as-float cast: **exp by writing an integer into the bits**
  (Schraudolph 1999; :func:`fast_pow2`, :func:`fast_exp`);
* (E3) ``I(1/x) ~ 2 B L - I(x)``: **a reciprocal by one integer subtraction**,
  ``1/x ~ F(R - I(x))`` with ``R = 2 L (B - sigma_recip)`` (the "magic constant"
  ``0x7EF311C3`` family), optionally refined by Newton steps ``y <- y (2 - x y)``, each
  of which squares the relative error (:func:`fast_reciprocal`, :func:`fast_divide`).

In real arithmetic each of (E1)-(E3) is piecewise linear between powers of two: the
error is periodic in the octave and bounded in closed form. With ``M = 2 / (e ln 2)``
the largest ratio ``(1 + f) / 2^f`` on ``[0, 1)``, the offsets that minimise the
largest error are ``sigma_exp = log2((1 + M) / 2) = 0.04367`` (relative error of
(E2) at most ``(M - 1) / (M + 1) = 2.98 %``), ``sigma_log = (log2(1/ln 2) - 1/ln 2 + 1)
/ 2 = 0.04304`` (absolute error of (E1) at most that) and, for (E3), the minimax
relative-error offset :func:`minimax_recip_sigma` (found on a dense grid of one octave:
the error has two kinks there). These are the *untuned* constants
(:meth:`FloatTrick.standard`).

Lowering (the compiler)
-----------------------
An activation is an expression over ``x`` built from ``+``, ``*``, ``/``, ``exp``,
``log``, ``tanh`` and integer powers (:class:`Var`, :class:`Exp`, ... with Python
operators). :func:`lower` rewrites it, to a fixed point, with identities that are exact
in real arithmetic, so that only the three cheap primitives remain
(:class:`Pow2`, :class:`Log2`, :class:`Recip`):

* ``tanh u = 2 / (1 + e^{-2u}) - 1``; ``e^u = 2^{u log2 e}``; ``log u = ln 2 log2 u``;
  ``a / b = a * (1/b)``;
* sums and products are flattened and their constants folded (``0.5 x (1 + (2 r - 1))
  = x r``), like terms are collected, ``2^a 2^b = 2^{a+b}``, ``1 / 2^a = 2^{-a}``, ``log2 2^a = a``,
  ``1/(1/a) = a``.

So the GELU tanh form ``0.5 x (1 + tanh(c (x + 0.044715 x^3)))`` becomes
``x * Recip(1 + Pow2(-2 c log2 e (x + 0.044715 x^3)))`` (one exp, one reciprocal; the
``tanh``, the ``0.5`` and the ``1 + ... - 1`` are gone), SiLU ``x * Recip(1 +
Pow2(-x log2 e))`` and softplus ``ln 2 * Log2(1 + Pow2(x log2 e))``. The lowered
expression is evaluated by a *backend*, a value (final equinox Module under
:class:`AbstractBackend`): :class:`FloatTrick` (the bit tricks, its constants array
leaves) or :class:`Exact` (``exp2``, ``log2``, ``1/x``: evaluating the lowered
expression exactly reproduces the original activation, which the tests check).

Tuning and gradients
--------------------
The constants are tuned by gradient descent on the approximation's mean squared error
over an interval (:func:`tune`: ``init``/``step`` with optax, a ``lax.scan`` driver).
The bit casts have a **straight-through gradient**: the integer rounding is treated as
the identity, so a cast's derivative is the slope of the piecewise-linear map it is in
real arithmetic (``dI/dx = L / 2^e``, ``dF(I)/dI = 2^e / L``). This is the exact
derivative of the approximation away from the octave kinks (it matches finite
differences there), so networks can also be trained *through* the approximations
(``custom_jvp``). Choice left open by the source: the tuning loss is the plain MSE on a
uniform grid (``tune``'s ``x``), Adam, per activation; the Newton step count is a
static field (``FloatTrick.newton``, default 1 in the experiment).

Domains: :func:`fast_pow2` saturates its exponent to ``[-(B - 1), B - 1]`` (so that the
reciprocal of its result stays a normal float); :func:`fast_log2` needs ``x > 0``;
:func:`fast_reciprocal` needs ``2^{1-B} <= |x| <= 2^{B-1}``. Only float32 and float64
are supported (the constants are per format).

>>> import jax, jax.numpy as jnp
>>> from jaxsci.numerics import ffcc
>>> silu = ffcc.approximation(ffcc.SILU, ffcc.FloatTrick.standard(newton=1))
>>> y = silu(jnp.linspace(-6.0, 6.0, 8))
>>> bool(jnp.max(jnp.abs(y - jax.nn.silu(jnp.linspace(-6.0, 6.0, 8)))) < 0.05)
True
>>> ffcc.show(ffcc.lower(ffcc.SIGMOID))
'recip(pow2(-1.4427 * x) + 1)'
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxsci.core.validation import check_array, check_int

__all__ = [
    # the bit-level primitives
    "float_format",
    "fast_pow2",
    "fast_exp",
    "fast_log2",
    "fast_reciprocal",
    "fast_divide",
    "SIGMA_EXP",
    "SIGMA_LOG",
    "minimax_recip_sigma",
    # backends
    "AbstractBackend",
    "FloatTrick",
    "Exact",
    # expressions and the lowering
    "Expr",
    "Var",
    "Const",
    "Add",
    "Mul",
    "Div",
    "Exp",
    "Log",
    "Tanh",
    "IntPow",
    "Pow2",
    "Log2",
    "Recip",
    "X",
    "EXP",
    "SIGMOID",
    "SILU",
    "GELU_TANH",
    "SOFTPLUS",
    "ACTIVATIONS",
    "lower",
    "show",
    "count_ops",
    "evaluate",
    "reference",
    "Approximation",
    "approximation",
    "fast_transform",
    # errors and tuning
    "ErrorBounds",
    "error_bounds",
    "mse_loss",
    "TuneState",
    "TuneInfo",
    "tune_init",
    "tune_step",
    "tune",
]

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
_M = 2.0 / (math.e * math.log(2.0))  # max_{f in [0,1)} (1 + f) / 2^f
SIGMA_EXP = math.log2((1.0 + _M) / 2.0)  # minimax relative error of (E2)
SIGMA_LOG = (math.log2(1.0 / math.log(2.0)) - 1.0 / math.log(2.0) + 1.0) / 2.0  # (E1)


# --------------------------------------------------------------------------- formats


class _Format(NamedTuple):
    mant_bits: int  # log2 L
    bias: int  # B
    int_dtype: Any
    uint_dtype: Any
    exp_mask: int  # the exponent field


_FORMATS = {
    np.dtype(np.float32): _Format(23, 127, jnp.int32, jnp.uint32, 0x7F800000),
    np.dtype(np.float64): _Format(52, 1023, jnp.int64, jnp.uint64, 0x7FF0000000000000),
}


def float_format(dtype: Any) -> tuple[int, int]:
    """``(L, B)`` of a float dtype: ``(2^23, 127)`` for float32, ``(2^52, 1023)`` for
    float64.

    Args:
      dtype: a float32 or float64 dtype.

    Returns:
      ``(L, B)`` as Python ints.
    """
    f = _fmt(dtype, "dtype")
    return 2**f.mant_bits, f.bias


def _fmt(dtype: Any, name: str) -> _Format:
    try:
        f = _FORMATS.get(np.dtype(dtype))
    except TypeError:
        f = None
    if f is None:
        raise TypeError(f"{name} must be float32 or float64 (the bit tricks' constants are per "
                        f"format), got dtype {dtype}")
    return f


def _float_input(name: str, x: Any) -> Array:
    """A float32/float64 array (array-likes converted once; tracers pass through)."""
    if not isinstance(x, jax.Array):
        arr = np.asarray(x)
        if not np.issubdtype(arr.dtype, np.floating):
            if np.issubdtype(arr.dtype, np.number) and not np.iscomplexobj(arr):
                arr = arr.astype(jnp.zeros((), float).dtype)
            else:
                raise TypeError(f"{name} must be a real float array, got dtype {arr.dtype}")
        x = jnp.asarray(arr)
    _fmt(x.dtype, name)
    return x


def _const(v: Any, dtype: Any) -> Array:
    return jnp.asarray(v, dtype)


def _exponent_part(y: Array) -> Array:
    """``2^e`` for ``|y| = 2^e (1 + m)`` (0 for zero and denormals): the octave's scale."""
    f = _fmt(y.dtype, "y")
    bits = jax.lax.bitcast_convert_type(y, f.int_dtype)
    return jax.lax.bitcast_convert_type(bits & jnp.asarray(f.exp_mask, f.int_dtype), y.dtype)


# --------------------------------------------------------------------------- primitives
# Each cast is a custom_jvp: the forward pass is the bit trick, the tangent the slope of
# the piecewise-linear map the cast is in real arithmetic (straight-through rounding).


@jax.custom_jvp
def _pow2_bits(t: Array) -> Array:
    # (E2): F(B L + trunc(t L)). t L is exact (a power-of-two scaling); the bias is added
    # in the integers, so no float32 rounding of the ~10^9-sized sum.
    f = _fmt(t.dtype, "z")
    i = (t * _const(2.0**f.mant_bits, t.dtype)).astype(f.int_dtype)
    i = i + jnp.asarray(f.bias << f.mant_bits, f.int_dtype)
    return jax.lax.bitcast_convert_type(i, t.dtype)


@_pow2_bits.defjvp
def _pow2_bits_jvp(primals, tangents):
    (t,), (dt,) = primals, tangents
    y = _pow2_bits(t)
    return y, _exponent_part(y) * dt


@jax.custom_jvp
def _log2_bits(x: Array) -> Array:
    # (E1): (I(x) - B L) / L, the subtraction in the integers.
    f = _fmt(x.dtype, "x")
    i = jax.lax.bitcast_convert_type(x, f.int_dtype)
    i = i - jnp.asarray(f.bias << f.mant_bits, f.int_dtype)
    return i.astype(x.dtype) * _const(2.0**-f.mant_bits, x.dtype)


@_log2_bits.defjvp
def _log2_bits_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return _log2_bits(x), dx / _exponent_part(x)


@jax.custom_jvp
def _recip_bits(x: Array, sigma: Array) -> Array:
    # (E3): F(R - I(x)), R = 2 B L - round(2 L sigma), in unsigned integers: a negative x
    # keeps its sign bit (the subtraction never borrows from it on the domain).
    f = _fmt(x.dtype, "x")
    L = 2**f.mant_bits
    r = jnp.asarray(2 * f.bias * L, f.int_dtype) - jnp.round(
        sigma * _const(2.0 * L, x.dtype)).astype(f.int_dtype)
    i = jax.lax.bitcast_convert_type(x, f.uint_dtype)
    return jax.lax.bitcast_convert_type(r.astype(f.uint_dtype) - i, x.dtype)


@_recip_bits.defjvp
def _recip_bits_jvp(primals, tangents):
    (x, sigma), (dx, dsigma) = primals, tangents
    y = _recip_bits(x, sigma)
    ey = _exponent_part(y)
    # |y| moves by 2^e(y) / L per integer step; R - I(x) moves by -2 L dsigma - L / 2^e(x) d|x|.
    dy = -(ey / _exponent_part(x)) * dx - 2.0 * ey * jnp.sign(x) * dsigma
    return y, dy


def fast_pow2(z: Float[ArrayLike, "*s"], sigma: Float[ArrayLike, ""] = SIGMA_EXP
              ) -> Float[Array, "*s"]:
    """``2^z`` by writing ``L (B - sigma + z)`` into a float's bits (E2).

    Args:
      z: exponents (float32 or float64), any shape; saturated to ``[-(B - 1), B - 1]``.
      sigma: the offset (traced; ``vmap``/``grad`` over it). Default: the minimax
        relative-error offset :data:`SIGMA_EXP`.

    Returns:
      The approximation, shape and dtype of ``z``. Straight-through derivative in
      ``z`` and ``sigma`` (the slope of the piecewise-linear map).
    """
    z = _float_input("z", z)
    f = _fmt(z.dtype, "z")
    sigma = jnp.asarray(sigma, z.dtype)
    lim = float(f.bias - 1)
    return _pow2_bits(jnp.clip(z - sigma, -lim, lim))


def fast_exp(x: Float[ArrayLike, "*s"], sigma: Float[ArrayLike, ""] = SIGMA_EXP,
             base: Float[ArrayLike, ""] = math.e) -> Float[Array, "*s"]:
    """``base^x ~ F(L (B - sigma) + x L log2 base)`` (E2).

    Args:
      x: any shape, float32 or float64.
      sigma: the offset (traced).
      base: the base ``b > 0`` (traced).

    Returns:
      The approximation, shape and dtype of ``x``.
    """
    x = _float_input("x", x)
    return fast_pow2(x * jnp.log2(jnp.asarray(base, x.dtype)), sigma)


def fast_log2(x: Float[ArrayLike, "*s"], sigma: Float[ArrayLike, ""] = SIGMA_LOG
              ) -> Float[Array, "*s"]:
    """``log2 x ~ I(x) / L - B + sigma`` (E1), for ``x > 0``.

    Args:
      x: positive floats (float32 or float64), any shape.
      sigma: the offset (traced). Default: the minimax absolute-error offset
        :data:`SIGMA_LOG`.

    Returns:
      The approximation, shape and dtype of ``x``.
    """
    x = _float_input("x", x)
    return _log2_bits(x) + jnp.asarray(sigma, x.dtype)


def fast_reciprocal(x: Float[ArrayLike, "*s"], sigma: Float[ArrayLike, ""] | None = None,
                    newton: int = 0) -> Float[Array, "*s"]:
    """``1/x ~ F(R - I(x))``, ``R = 2 L (B - sigma)`` (E3), then ``newton`` steps of
    ``y <- y (2 - x y)``.

    Args:
      x: floats with ``2^{1-B} <= |x| <= 2^{B-1}``, any shape (the sign is kept).
      sigma: the offset (traced); default :func:`minimax_recip_sigma` ``(newton)``.
      newton: Newton steps (a static loop count, ``>= 0``).

    Returns:
      The approximation, shape and dtype of ``x``.
    """
    newton = check_int("newton", newton, min=0)
    x = _float_input("x", x)
    if sigma is None:
        sigma = minimax_recip_sigma(newton)
    y = _recip_bits(x, jnp.asarray(sigma, x.dtype))
    two = _const(2.0, x.dtype)
    for _ in range(newton):
        y = y * (two - x * y)
    return y


def fast_divide(a: Float[ArrayLike, "*s"], b: Float[ArrayLike, "*s"],
                sigma: Float[ArrayLike, ""] | None = None, newton: int = 0
                ) -> Float[Array, "*s"]:
    """``a / b ~ a * fast_reciprocal(b, sigma, newton)``.

    Args:
      a: numerators; b: denominators (broadcastable, the domain of
        :func:`fast_reciprocal`); sigma, newton: as there.

    Returns:
      The approximation, broadcast shape.
    """
    b = _float_input("b", b)
    return jnp.asarray(a, b.dtype) * fast_reciprocal(b, sigma, newton)


def _recip_rel_error_np(sigma: np.ndarray, newton: int, m: np.ndarray) -> np.ndarray:
    """Real-arithmetic relative error of (E3) on ``x = 1 + m`` (one octave, any octave
    is the same), for an array of offsets."""
    # I_hat / L - B = (2 (B - sigma) - (B + m)) - B: the exponent + mantissa of 1/x.
    u = -m[None] - 2.0 * sigma[:, None]
    e = np.floor(u)
    y = 2.0**e * (1.0 + u - e)
    x = 1.0 + m[None]
    for _ in range(newton):
        y = y * (2.0 - x * y)
    return y * x - 1.0


def minimax_recip_sigma(newton: int = 0, grid: int = 4001) -> float:
    """The offset of (E3) minimising the largest relative error, on a dense grid.

    Computed in real arithmetic on one octave ``x in [1, 2)`` (the error is the same in
    every octave), over offsets in ``[0, 0.1]``; with Newton steps the error after them.

    Args:
      newton: Newton steps applied after the bit trick.
      grid: grid size for the offsets and for ``m``.

    Returns:
      The offset ``sigma`` (a Python float).
    """
    newton = check_int("newton", newton, min=0)
    grid = check_int("grid", grid, min=11)
    key = (newton, grid)
    if key not in _RECIP_CACHE:
        m = np.linspace(0.0, 1.0, grid, endpoint=False)
        sig = np.linspace(0.0, 0.1, grid)
        worst = np.abs(_recip_rel_error_np(sig, newton, m)).max(axis=1)
        _RECIP_CACHE[key] = float(sig[int(np.argmin(worst))])
    return _RECIP_CACHE[key]


_RECIP_CACHE: dict[tuple[int, int], float] = {}


# --------------------------------------------------------------------------- backends


class AbstractBackend(eqx.Module):
    """How a lowered expression's three primitives are computed."""

    @abc.abstractmethod
    def pow2(self, z: Array) -> Array:
        """``2^z``."""

    @abc.abstractmethod
    def log2(self, x: Array) -> Array:
        """``log2 x`` for ``x > 0``."""

    @abc.abstractmethod
    def recip(self, x: Array) -> Array:
        """``1 / x``."""


def _scalar_leaf(v: Any) -> Array:
    return v if isinstance(v, jax.core.Tracer) else jnp.asarray(v, dtype=float)


class FloatTrick(AbstractBackend):
    """The bit tricks (E1)-(E3) with offsets as array leaves (``vmap``/``grad`` them).

    Attributes:
      sigma_exp: offset of (E2) (default :data:`SIGMA_EXP`); sigma_log: of (E1)
        (default :data:`SIGMA_LOG`); sigma_recip: of (E3) (default
        :func:`minimax_recip_sigma` ``(newton)``). A leading batch axis is allowed
        (``vmap`` over the constants).
      newton: Newton steps after the reciprocal (static, default 1).
    """

    sigma_exp: Float[Array, ""]
    sigma_log: Float[Array, ""]
    sigma_recip: Float[Array, ""]
    newton: int = eqx.field(static=True)

    def __init__(self, sigma_exp: Any = SIGMA_EXP, sigma_log: Any = SIGMA_LOG,
                 sigma_recip: Any = None, newton: int = 1):
        self.newton = check_int("newton", newton, min=0)
        if sigma_recip is None:
            sigma_recip = minimax_recip_sigma(self.newton)
        for name, v in (("sigma_exp", sigma_exp), ("sigma_log", sigma_log),
                        ("sigma_recip", sigma_recip)):
            v = _scalar_leaf(v)
            if not isinstance(v, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(v))):
                raise ValueError(f"{name} must be finite, got {v}")
            setattr(self, name, v)

    @classmethod
    def standard(cls, newton: int = 1) -> FloatTrick:
        """The untuned, closed-form offsets (module docstring): ``SIGMA_EXP``,
        ``SIGMA_LOG`` and :func:`minimax_recip_sigma` ``(newton)``."""
        return cls(SIGMA_EXP, SIGMA_LOG, minimax_recip_sigma(newton), newton)

    @classmethod
    def naive(cls, newton: int = 1) -> FloatTrick:
        """All offsets zero: the bare bit identities."""
        return cls(0.0, 0.0, 0.0, newton)

    def pow2(self, z):
        return fast_pow2(z, self.sigma_exp)

    def log2(self, x):
        return fast_log2(x, self.sigma_log)

    def recip(self, x):
        return fast_reciprocal(x, self.sigma_recip, self.newton)


class Exact(AbstractBackend):
    """``exp2``, ``log2`` and ``1/x`` of ``jax.numpy``: the lowered expression evaluated
    exactly (equal to the original activation up to rounding)."""

    def pow2(self, z):
        return jnp.exp2(z)

    def log2(self, x):
        return jnp.log2(x)

    def recip(self, x):
        return 1.0 / x


# --------------------------------------------------------------------------- expressions


class Expr:
    """An expression over one variable ``x``; Python operators build larger ones."""

    def __add__(self, o):
        return Add((self, _wrap(o)))

    __radd__ = __add__

    def __sub__(self, o):
        return Add((self, Mul((Const(-1.0), _wrap(o)))))

    def __rsub__(self, o):
        return Add((_wrap(o), Mul((Const(-1.0), self))))

    def __mul__(self, o):
        return Mul((self, _wrap(o)))

    __rmul__ = __mul__

    def __neg__(self):
        return Mul((Const(-1.0), self))

    def __truediv__(self, o):
        return Div(self, _wrap(o))

    def __rtruediv__(self, o):
        return Div(_wrap(o), self)

    def __pow__(self, n):
        return IntPow(self, check_int("power", n, min=1))


def _wrap(o: Any) -> Expr:
    if isinstance(o, Expr):
        return o
    if isinstance(o, int | float) and not isinstance(o, bool):
        return Const(float(o))
    raise TypeError(f"an expression operand must be an Expr or a Python number, got "
                    f"{type(o).__name__}")


@dataclasses.dataclass(frozen=True)
class Var(Expr):
    """The input ``x``."""


@dataclasses.dataclass(frozen=True)
class Const(Expr):
    """A constant (folded at lowering)."""

    value: float


@dataclasses.dataclass(frozen=True)
class Add(Expr):
    """``sum(args)``."""

    args: tuple[Expr, ...]


@dataclasses.dataclass(frozen=True)
class Mul(Expr):
    """``prod(args)``."""

    args: tuple[Expr, ...]


@dataclasses.dataclass(frozen=True)
class Div(Expr):
    """``num / den``."""

    num: Expr
    den: Expr


@dataclasses.dataclass(frozen=True)
class IntPow(Expr):
    """``base ** n``, ``n >= 1`` an int (repeated multiplication)."""

    base: Expr
    n: int


@dataclasses.dataclass(frozen=True)
class Exp(Expr):
    """``e^arg``."""

    arg: Expr


@dataclasses.dataclass(frozen=True)
class Log(Expr):
    """``ln arg``."""

    arg: Expr


@dataclasses.dataclass(frozen=True)
class Tanh(Expr):
    """``tanh arg``."""

    arg: Expr


@dataclasses.dataclass(frozen=True)
class Pow2(Expr):
    """``2^arg`` (a backend primitive)."""

    arg: Expr


@dataclasses.dataclass(frozen=True)
class Log2(Expr):
    """``log2 arg`` (a backend primitive)."""

    arg: Expr


@dataclasses.dataclass(frozen=True)
class Recip(Expr):
    """``1 / arg`` (a backend primitive)."""

    arg: Expr


X = Var()
EXP = Exp(X)
SIGMOID = 1.0 / (1.0 + Exp(-X))
SILU = X * SIGMOID
GELU_TANH = 0.5 * X * (1.0 + Tanh(math.sqrt(2.0 / math.pi) * (X + 0.044715 * X**3)))
SOFTPLUS = Log(1.0 + Exp(X))
ACTIVATIONS: dict[str, Expr] = {"exp": EXP, "sigmoid": SIGMOID, "silu": SILU,
                                "gelu_tanh": GELU_TANH, "softplus": SOFTPLUS}
_EXACT_FNS: dict[str, Callable[[Array], Array]] = {
    "exp": jnp.exp, "sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu,
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "softplus": jax.nn.softplus}


def _rewrite(e: Expr) -> Expr:
    """One bottom-up pass of the lowering rules (module docstring)."""
    if isinstance(e, Var | Const):
        return e
    if isinstance(e, Add):
        return _fold_add(tuple(_rewrite(a) for a in e.args))
    if isinstance(e, Mul):
        return _fold_mul(tuple(_rewrite(a) for a in e.args))
    if isinstance(e, Div):
        return _fold_mul((_rewrite(e.num), _recip(_rewrite(e.den))))
    if isinstance(e, IntPow):
        b = _rewrite(e.base)
        return Const(b.value**e.n) if isinstance(b, Const) else IntPow(b, e.n)
    if isinstance(e, Exp):
        return _pow2(_fold_mul((Const(LOG2E), _rewrite(e.arg))))
    if isinstance(e, Log):
        return _fold_mul((Const(LN2), _log2(_rewrite(e.arg))))
    if isinstance(e, Tanh):
        u = _rewrite(e.arg)
        return _fold_add((_fold_mul((Const(2.0), _recip(_fold_add((
            Const(1.0), _pow2(_fold_mul((Const(-2.0 * LOG2E), u)))))))), Const(-1.0)))
    if isinstance(e, Pow2):
        return _pow2(_rewrite(e.arg))
    if isinstance(e, Log2):
        return _log2(_rewrite(e.arg))
    if isinstance(e, Recip):
        return _recip(_rewrite(e.arg))
    raise TypeError(f"expr must be built from jaxsci.numerics.ffcc nodes, got "
                    f"{type(e).__name__}")


def _pow2(a: Expr) -> Expr:
    if isinstance(a, Const):
        return Const(2.0**a.value)
    return Pow2(a)


def _log2(a: Expr) -> Expr:
    if isinstance(a, Const):
        return Const(math.log2(a.value))
    if isinstance(a, Pow2):  # log2 2^u = u
        return a.arg
    return Log2(a)


def _recip(a: Expr) -> Expr:
    if isinstance(a, Const):
        return Const(1.0 / a.value)
    if isinstance(a, Recip):  # 1/(1/u) = u
        return a.arg
    if isinstance(a, Pow2):  # 1/2^u = 2^-u
        return Pow2(_fold_mul((Const(-1.0), a.arg)))
    if isinstance(a, Mul):  # 1/(c u) = (1/c) (1/u)
        consts = [t for t in a.args if isinstance(t, Const)]
        if consts:
            rest = tuple(t for t in a.args if not isinstance(t, Const))
            c = math.prod(t.value for t in consts)
            return _fold_mul((Const(1.0 / c), _recip(_fold_mul(rest))))
    return Recip(a)


def _fold_add(args: tuple[Expr, ...]) -> Expr:
    flat: list[Expr] = []
    for a in args:
        flat.extend(a.args if isinstance(a, Add) else (a,))
    c = sum(a.value for a in flat if isinstance(a, Const))
    # Like terms: c1 u + c2 u = (c1 + c2) u.
    coef: dict[Expr, float] = {}
    for a in flat:
        if isinstance(a, Const):
            continue
        k, rest = _split_coef(a)
        coef[rest] = coef.get(rest, 0.0) + k
    terms = [_fold_mul((Const(k), rest)) for rest, k in coef.items() if k != 0.0]
    if c != 0.0 or not terms:
        terms.append(Const(c))
    return terms[0] if len(terms) == 1 else Add(tuple(terms))


def _split_coef(a: Expr) -> tuple[float, Expr]:
    """``c u`` as ``(c, u)`` (``(1, a)`` when ``a`` has no constant factor)."""
    if isinstance(a, Mul) and isinstance(a.args[0], Const):
        rest = a.args[1:]
        return a.args[0].value, rest[0] if len(rest) == 1 else Mul(rest)
    return 1.0, a


def _fold_mul(args: tuple[Expr, ...]) -> Expr:
    flat: list[Expr] = []
    for a in args:
        flat.extend(a.args if isinstance(a, Mul) else (a,))
    c = math.prod(a.value for a in flat if isinstance(a, Const))
    terms = [a for a in flat if not isinstance(a, Const)]
    if c == 0.0:
        return Const(0.0)
    pows = [a for a in terms if isinstance(a, Pow2)]
    if len(pows) > 1:  # 2^a 2^b = 2^{a + b}
        terms = [a for a in terms if not isinstance(a, Pow2)]
        terms.append(Pow2(_fold_add(tuple(p.arg for p in pows))))
    if c != 1.0 or not terms:
        terms.insert(0, Const(c))
    return terms[0] if len(terms) == 1 else Mul(tuple(terms))


_PRIMITIVE_NODES = (Var, Const, Add, Mul, IntPow, Pow2, Log2, Recip)


def lower(expr: Expr, max_passes: int = 16) -> Expr:
    """Rewrite ``expr`` with the lowering rules until nothing changes.

    Args:
      expr: an expression (:data:`SILU`, ``1 / (1 + Exp(-X))``, ...).
      max_passes: at most this many passes (a fixed point is usually reached in 2-3).

    Returns:
      An equal expression (in real arithmetic) built only from ``Var``, ``Const``,
      ``Add``, ``Mul``, ``IntPow`` and the primitives ``Pow2``, ``Log2``, ``Recip``.
    """
    if not isinstance(expr, Expr):
        raise TypeError(f"expr must be an ffcc Expr, got {type(expr).__name__}")
    max_passes = check_int("max_passes", max_passes, min=1)
    for _ in range(max_passes):
        new = _rewrite(expr)
        if new == expr:
            break
        expr = new
    return expr


def _nodes(e: Expr):
    yield e
    for child in _children(e):
        yield from _nodes(child)


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Add | Mul):
        return e.args
    if isinstance(e, Div):
        return (e.num, e.den)
    if isinstance(e, IntPow):
        return (e.base,)
    if isinstance(e, Exp | Log | Tanh | Pow2 | Log2 | Recip):
        return (e.arg,)
    return ()


def count_ops(expr: Expr) -> dict[str, int]:
    """The operations an expression evaluates: ``add``, ``mul`` (an ``IntPow`` of ``n``
    counts ``n - 1``), and one per ``exp``, ``log``, ``tanh``, ``div``, ``pow2``,
    ``log2``, ``recip`` node.

    Args:
      expr: an expression.

    Returns:
      A dict from operation name to count (zero counts left out).
    """
    out: dict[str, int] = {}

    def bump(k, n=1):
        if n:
            out[k] = out.get(k, 0) + n

    for e in _nodes(expr):
        if isinstance(e, Add):
            bump("add", len(e.args) - 1)
        elif isinstance(e, Mul):
            bump("mul", len(e.args) - 1)
        elif isinstance(e, IntPow):
            bump("mul", e.n - 1)
        elif not isinstance(e, Var | Const):
            bump(type(e).__name__.lower())
    return out


def show(expr: Expr, digits: int = 5) -> str:
    """A readable one-line form of an expression (constants to ``digits`` significant
    digits).

    Args:
      expr: an expression.
      digits: significant digits of the constants.

    Returns:
      A string such as ``'recip(pow2(-1.4427 * x) + 1)'``.
    """
    def s(e: Expr, parent: int = 0) -> str:
        if isinstance(e, Var):
            return "x"
        if isinstance(e, Const):
            return f"{e.value:.{digits}g}"
        if isinstance(e, Add):
            txt = " + ".join(s(a, 1) for a in e.args)
            return f"({txt})" if parent > 1 else txt
        if isinstance(e, Mul):
            return " * ".join(s(a, 2) for a in e.args)
        if isinstance(e, Div):
            return f"{s(e.num, 2)} / {s(e.den, 3)}"
        if isinstance(e, IntPow):
            return f"{s(e.base, 3)}^{e.n}"
        return f"{type(e).__name__.lower()}({s(e.arg)})"

    return s(expr)


def evaluate(expr: Expr, x: Float[ArrayLike, "*s"], backend: AbstractBackend | None = None
             ) -> Float[Array, "*s"]:
    """Evaluate an expression elementwise on ``x``.

    ``Exp``, ``Log``, ``Tanh`` and ``Div`` nodes (an unlowered expression) are computed
    with ``jax.numpy``; ``Pow2``, ``Log2``, ``Recip`` with ``backend``.

    Args:
      expr: an expression.
      x: inputs, any shape (float32/float64).
      backend: an :class:`AbstractBackend`; default :class:`Exact`.

    Returns:
      The values, shape of ``x``.
    """
    if not isinstance(expr, Expr):
        raise TypeError(f"expr must be an ffcc Expr, got {type(expr).__name__}")
    backend = Exact() if backend is None else backend
    if not isinstance(backend, AbstractBackend):
        raise TypeError(f"backend must be an AbstractBackend (FloatTrick(), Exact()), got "
                        f"{type(backend).__name__}")
    x = _float_input("x", x)

    def ev(e: Expr) -> Array:
        if isinstance(e, Var):
            return x
        if isinstance(e, Const):
            return jnp.asarray(e.value, x.dtype)
        if isinstance(e, Add):
            out = ev(e.args[0])
            for a in e.args[1:]:
                out = out + ev(a)
            return out
        if isinstance(e, Mul):
            out = ev(e.args[0])
            for a in e.args[1:]:
                out = out * ev(a)
            return out
        if isinstance(e, IntPow):
            b = ev(e.base)
            out = b
            for _ in range(e.n - 1):
                out = out * b
            return out
        if isinstance(e, Div):
            return ev(e.num) / ev(e.den)
        if isinstance(e, Exp):
            return jnp.exp(ev(e.arg))
        if isinstance(e, Log):
            return jnp.log(ev(e.arg))
        if isinstance(e, Tanh):
            return jnp.tanh(ev(e.arg))
        if isinstance(e, Pow2):
            return backend.pow2(ev(e.arg))
        if isinstance(e, Log2):
            return backend.log2(ev(e.arg))
        if isinstance(e, Recip):
            return backend.recip(ev(e.arg))
        raise TypeError(f"unknown expression node {type(e).__name__}")

    return jnp.broadcast_to(ev(expr), x.shape)


_NP_OPS: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    Exp: np.exp, Log: np.log, Tanh: np.tanh, Pow2: np.exp2, Log2: np.log2,
    Recip: lambda a: 1.0 / a}


def reference(expr: Expr, x: Float[ArrayLike, "*s"]) -> np.ndarray:
    """Evaluate ``expr`` exactly in NumPy float64 (the reference for error bounds: a
    float32 ``0.5 x (1 + tanh u)`` loses all its digits where ``1 + tanh u`` cancels).

    Args:
      expr: an expression (lowered or not).
      x: inputs, any shape.

    Returns:
      A float64 NumPy array, shape of ``x``.
    """
    if not isinstance(expr, Expr):
        raise TypeError(f"expr must be an ffcc Expr, got {type(expr).__name__}")
    x = np.asarray(x, np.float64)

    def ev(e: Expr) -> np.ndarray:
        if isinstance(e, Var):
            return x
        if isinstance(e, Const):
            return np.full_like(x, e.value)
        if isinstance(e, Add):
            return sum((ev(a) for a in e.args[1:]), ev(e.args[0]))
        if isinstance(e, Mul):
            return math.prod((ev(a) for a in e.args[1:]), start=ev(e.args[0]))
        if isinstance(e, IntPow):
            return ev(e.base) ** e.n
        if isinstance(e, Div):
            return ev(e.num) / ev(e.den)
        return _NP_OPS[type(e)](ev(e.arg))

    with np.errstate(over="ignore"):
        return ev(expr)


class Approximation(eqx.Module):
    """A lowered activation with its backend: a drop-in callable ``f(x)``.

    Attributes:
      expr: the lowered expression (static).
      backend: the backend (its constants are leaves: ``vmap``/``grad`` over them).
      check: reject non-finite inputs (a ``ValueError`` when ``x`` is concrete, an
        ``equinox.error_if`` under ``jit``). ``False`` skips the check (one reduction
        and, under ``jit``, one host callback per call).
    """

    expr: Expr = eqx.field(static=True)
    backend: AbstractBackend
    check: bool = eqx.field(default=True, static=True)

    def __check_init__(self):
        if not isinstance(self.expr, Expr):
            raise TypeError(f"expr must be an ffcc Expr, got {type(self.expr).__name__}")
        if not isinstance(self.backend, AbstractBackend):
            raise TypeError(f"backend must be an AbstractBackend, got "
                            f"{type(self.backend).__name__}")

    def __call__(self, x: Float[ArrayLike, "*s"]) -> Float[Array, "*s"]:
        x = _float_input("x", x)
        if self.check:
            if isinstance(x, jax.core.Tracer):
                x = eqx.error_if(x, ~jnp.all(jnp.isfinite(x)),
                                 "x (the activation's input) must be finite, got NaN or inf")
            else:
                check_array("x", x, finite=True)
        return evaluate(self.expr, x, self.backend)


def approximation(expr: Expr, backend: AbstractBackend | None = None, check: bool = True
                  ) -> Approximation:
    """Lower ``expr`` and pair it with ``backend`` (default :meth:`FloatTrick.standard`).

    Args:
      expr: an activation expression (:data:`SILU`, :data:`GELU_TANH`, ...).
      backend: an :class:`AbstractBackend`.
      check: see :class:`Approximation`.

    Returns:
      An :class:`Approximation`, a callable equinox Module.
    """
    backend = FloatTrick.standard() if backend is None else backend
    if not isinstance(check, bool):
        raise TypeError(f"check must be a bool, got {type(check).__name__}")
    return Approximation(lower(expr), backend, check)


# --------------------------------------------------------------------------- jaxpr rewrite


def _jaxpr_rules(backend: AbstractBackend) -> dict[str, Callable[..., Array]]:
    """Primitive -> its lowering through ``backend`` (the same identities as :func:`lower`,
    applied one primitive at a time, without the algebraic folding across primitives)."""
    def c(v, ref):
        return jnp.asarray(v, ref.dtype)

    return {
        "exp": lambda x, **_: backend.pow2(x * c(LOG2E, x)),
        "exp2": lambda x, **_: backend.pow2(x),
        "log": lambda x, **_: c(LN2, x) * backend.log2(x),
        "log1p": lambda x, **_: c(LN2, x) * backend.log2(c(1.0, x) + x),
        "logistic": lambda x, **_: backend.recip(c(1.0, x) + backend.pow2(x * c(-LOG2E, x))),
        "tanh": lambda x, **_: c(2.0, x) * backend.recip(
            c(1.0, x) + backend.pow2(x * c(-2.0 * LOG2E, x))) - c(1.0, x),
        "div": lambda a, b, **_: (a * backend.recip(b)
                                  if jnp.issubdtype(jnp.result_type(a, b), jnp.floating)
                                  else jax.lax.div(a, b)),
    }


def _eval_jaxpr(jaxpr: Any, consts: list[Any], args: list[Any],
                rules: dict[str, Callable[..., Array]]) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v):
        return v.val if type(v).__name__ == "Literal" else env[v]

    for var, val in zip(jaxpr.constvars, consts, strict=True):
        env[var] = val
    for var, val in zip(jaxpr.invars, args, strict=True):
        env[var] = val
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
        if name in rules:
            outs = [rules[name](*invals, **eqn.params)]
        elif sub is not None and name in ("jit", "pjit", "custom_jvp_call", "custom_vjp_call",
                                          "closed_call", "core_call", "remat", "checkpoint"):
            inner = sub.jaxpr if hasattr(sub, "jaxpr") else sub
            inner_consts = list(sub.consts) if hasattr(sub, "consts") else []
            outs = _eval_jaxpr(inner, inner_consts, invals, rules)
        else:
            outs = eqn.primitive.bind(*invals, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for var, val in zip(eqn.outvars, outs, strict=True):
            env[var] = val
    return [read(v) for v in jaxpr.outvars]


def fast_transform(fn: Callable[..., Any], backend: AbstractBackend | None = None
                   ) -> Callable[..., Any]:
    """Rewrite ``fn``'s jaxpr so that ``exp``, ``exp2``, ``log``, ``log1p``, ``logistic``,
    ``tanh`` and floating ``div`` go through ``backend`` (the stretch of the paper's
    compiler: ``jax.nn.silu``, ``jax.nn.gelu``, ``jax.nn.softplus``, a whole network).

    The rewrite is per primitive (``tanh u -> 2 recip(1 + pow2(-2u log2 e)) - 1``,
    ``logistic``, ...), into ``jit`` and ``custom_jvp`` sub-jaxprs; it does not fold
    constants across primitives as :func:`lower` does (so ``jax.nn.gelu``'s ``0.5 x (1 +
    tanh u)`` keeps its additions). Everything else is bound unchanged. The result is a
    plain function of the same arguments: ``jit``/``vmap``/``grad`` it (gradients use
    the straight-through derivatives of the bit tricks).

    Args:
      fn: a function of arrays (traceable by ``jax.make_jaxpr``).
      backend: default :meth:`FloatTrick.standard`.

    Returns:
      The rewritten function.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    backend = FloatTrick.standard() if backend is None else backend
    if not isinstance(backend, AbstractBackend):
        raise TypeError(f"backend must be an AbstractBackend, got {type(backend).__name__}")
    rules = _jaxpr_rules(backend)

    def wrapped(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = jax.tree_util.tree_leaves(args)
        outs = _eval_jaxpr(closed.jaxpr, list(closed.consts), flat, rules)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outs)

    return wrapped


# --------------------------------------------------------------------------- errors, tuning


class ErrorBounds(NamedTuple):
    """Measured errors of an approximation ``a`` of ``f`` on the points ``x``."""

    max_abs: Float[Array, ""]  # max |a - f|
    max_rel: Float[Array, ""]  # max |a - f| / |f| over points with f != 0
    mse: Float[Array, ""]  # mean (a - f)^2


def error_bounds(approx: Float[ArrayLike, " n"], exact: Float[ArrayLike, " n"]
                 ) -> ErrorBounds:
    """Max absolute, max relative and mean squared error of ``approx`` against ``exact``.

    Args:
      approx: approximate values; exact: reference values (same shape).

    Returns:
      An :class:`ErrorBounds`; points where ``exact == 0`` are left out of ``max_rel``.
    """
    exact = _float_input("exact", exact)
    approx = _float_input("approx", approx)
    if approx.shape != exact.shape:
        raise ValueError(f"approx and exact must have the same shape, got {approx.shape} and "
                         f"{exact.shape}")
    err = approx - exact
    nz = exact != 0
    rel = jnp.where(nz, jnp.abs(err) / jnp.where(nz, jnp.abs(exact), 1.0), 0.0)
    return ErrorBounds(jnp.max(jnp.abs(err)), jnp.max(rel), jnp.mean(err**2))


def mse_loss(backend: AbstractBackend, expr: Expr, x: Float[ArrayLike, " n"]
             ) -> Float[Array, ""]:
    """Mean squared error of the lowered ``expr`` under ``backend`` against the exact
    ``expr``, on the points ``x`` (the tuning objective).

    Args:
      backend: the backend whose constants are tuned.
      expr: the (unlowered or lowered) expression.
      x: the points, 1-D.

    Returns:
      The scalar MSE (differentiable in the backend's constants, straight-through).
    """
    x = _float_input("x", x)
    ref = jax.lax.stop_gradient(evaluate(expr, x, Exact()))
    return jnp.mean((evaluate(lower(expr), x, backend) - ref) ** 2)


class TuneState(NamedTuple):
    """State of the constants' tuning."""

    backend: AbstractBackend  # current constants
    opt_state: Any  # optax state over the backend's float leaves
    step: Array  # steps taken


class TuneInfo(NamedTuple):
    """What one tuning step saw."""

    loss: Float[Array, ""]  # MSE before the step


def tune_init(backend: AbstractBackend, optimizer: optax.GradientTransformation
              ) -> TuneState:
    """Start tuning ``backend``'s constants with ``optimizer``.

    Args:
      backend: the starting constants (e.g. :meth:`FloatTrick.standard`).
      optimizer: an ``optax.GradientTransformation`` (e.g. ``optax.adam(1e-3)``).

    Returns:
      A :class:`TuneState`.
    """
    if not isinstance(backend, AbstractBackend):
        raise TypeError(f"backend must be an AbstractBackend, got {type(backend).__name__}")
    return TuneState(backend, optimizer.init(eqx.filter(backend, eqx.is_inexact_array)),
                     jnp.zeros((), jnp.int32))


def tune_step(state: TuneState, expr: Expr, x: Float[ArrayLike, " n"],
              optimizer: optax.GradientTransformation) -> tuple[TuneState, TuneInfo]:
    """One gradient step on :func:`mse_loss` (straight-through gradients).

    Args:
      state: a :class:`TuneState`; expr: the activation; x: the points;
      optimizer: the one given to :func:`tune_init`.

    Returns:
      ``(state, info)``.
    """
    loss, g = eqx.filter_value_and_grad(mse_loss)(state.backend, expr, x)
    updates, opt_state = optimizer.update(g, state.opt_state,
                                          eqx.filter(state.backend, eqx.is_inexact_array))
    backend = eqx.apply_updates(state.backend, updates)
    return TuneState(backend, opt_state, state.step + 1), TuneInfo(loss)


def tune(expr: Expr, x: Float[ArrayLike, " n"], backend: AbstractBackend | None = None,
         steps: int = 300, learning_rate: Float[ArrayLike, ""] = 2e-3
         ) -> tuple[AbstractBackend, Float[Array, " steps"]]:
    """Tune the backend's constants for ``expr`` on ``x`` by Adam on the MSE.

    A thin ``lax.scan`` over :func:`tune_step`. The returned constants are those with
    the lowest loss seen (the loss is piecewise smooth in the offsets; Adam's last
    iterate may oscillate around a kink).

    Args:
      expr: the activation.
      x: the points (1-D, finite), e.g. ``jnp.linspace(-6, 6, 4096)``.
      backend: starting constants; default :meth:`FloatTrick.standard`.
      steps: Adam steps (static).
      learning_rate: Adam's step size (traced).

    Returns:
      ``(backend, losses)``: the best constants and the loss before each step.
    """
    steps = check_int("steps", steps, min=1)
    backend = FloatTrick.standard() if backend is None else backend
    if not isinstance(expr, Expr):
        raise TypeError(f"expr must be an ffcc Expr, got {type(expr).__name__}")
    x = _float_input("x", x)
    check_array("x", x, ndim=1)
    if isinstance(x, jax.core.Tracer):
        x = eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), "x must be finite")
    return _tune(expr, x, backend, steps, learning_rate)


@eqx.filter_jit
def _tune(expr, x, backend, steps, learning_rate):
    # Module-level jit: a second call compiles nothing (the optimizer and the scan's
    # closure are new at every trace).
    optimizer = optax.adam(learning_rate)
    state = tune_init(backend, optimizer)
    params, static = eqx.partition(backend, eqx.is_inexact_array)

    def body(carry, _):
        st, best, best_loss = carry
        before = eqx.filter(st.backend, eqx.is_inexact_array)
        st, info = tune_step(st, expr, x, optimizer)
        better = info.loss < best_loss  # info.loss is the loss of `before`
        best = jax.tree_util.tree_map(lambda p, b: jnp.where(better, p, b), before, best)
        return (st, best, jnp.minimum(best_loss, info.loss)), info.loss

    init = (state, params, jnp.asarray(jnp.inf, x.dtype))
    (state, best, best_loss), losses = jax.lax.scan(body, init, None, length=steps)
    last = eqx.filter(state.backend, eqx.is_inexact_array)
    final_better = mse_loss(state.backend, expr, x) < best_loss
    best = jax.tree_util.tree_map(lambda p, b: jnp.where(final_better, p, b), last, best)
    return eqx.combine(best, static), losses
