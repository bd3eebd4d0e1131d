"""Argument checks that run at the Python boundary, before anything is traced.

Every failure raises ``ValueError`` or ``TypeError`` whose message names the
argument, what was expected and what came, so a user sweeping thousands of
settings sees which one was wrong. Inside jit, use ``equinox.error_if`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

__all__ = [
    "as_array",
    "check_int",
    "check_scalar",
    "check_array",
    "check_key",
    "check_choice",
]


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


_WARNED_X64 = False


def as_array(name: str, value: Any, *, dtype: str = "floating") -> jax.Array:
    """Convert an array-like at the boundary, once: a JAX array of JAX's default dtype.

    Lists, tuples, scalars and NumPy arrays are accepted. Floats become JAX's default
    float dtype (float32 unless ``jax_enable_x64`` is on): NumPy's float64 input is then
    converted here, with one warning per process (not one per internal operation), so
    the rest of the method sees one dtype. ``dtype="integer"`` keeps integers (int32
    without x64). Tracers pass through unchanged. See ``docs/precision.md``.
    """
    global _WARNED_X64
    import jax.numpy as jnp

    if _is_tracer(value) or (isinstance(value, jax.Array) and dtype != "floating"):
        return value
    try:
        arr = np.asarray(value) if not isinstance(value, jax.Array) else value
    except Exception as exc:
        raise TypeError(f"{name} must be an array-like, got {type(value).__name__}") from exc
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array-like, got ragged or object data")
    if dtype == "floating":
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
        if np.iscomplexobj(arr):
            raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
        target = jnp.zeros((), float).dtype  # float32, or float64 under x64
        if (np.dtype(arr.dtype) == np.float64 and target != np.float64 and not _WARNED_X64):
            import warnings

            _WARNED_X64 = True
            warnings.warn(
                f"{name}: float64 input converted to {target} (jax_enable_x64 is off); "
                "jaxsci computes in JAX's default precision. Enable x64 before importing "
                "jax for float64 (docs/precision.md). This warning is shown once.",
                UserWarning, stacklevel=3)
        if np.issubdtype(arr.dtype, np.floating) and arr.dtype == target:
            return jnp.asarray(arr)
        return jnp.asarray(np.asarray(arr, dtype=target))
    if dtype == "integer":
        if not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
        return jnp.asarray(arr)
    raise ValueError(f"unknown dtype kind {dtype!r}")


def check_int(name: str, value: Any, *, min: int | None = None, max: int | None = None) -> int:
    """Return ``value`` as an ``int`` after checking its type and range."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if min is not None and value < min:
        raise ValueError(f"{name} must be >= {min}, got {value}")
    if max is not None and value > max:
        raise ValueError(f"{name} must be <= {max}, got {value}")
    return value


def check_scalar(
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> float | jax.Array:
    """Check a real scalar: finite and inside the given bounds.

    Traced values (under ``vmap``/``jit``) are passed through unchecked: their
    range is the caller's responsibility (checked once on the concrete grid).
    """
    if _is_tracer(value):
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number, got bool {value!r}")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic objects
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}") from exc
    if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise TypeError(
            f"{name} must be a real scalar, got {type(value).__name__} "
            f"with shape {arr.shape} and dtype {arr.dtype}"
        )
    v = float(arr)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if gt is not None and not v > gt:
        raise ValueError(f"{name} must be > {gt}, got {v}")
    if ge is not None and not v >= ge:
        raise ValueError(f"{name} must be >= {ge}, got {v}")
    if lt is not None and not v < lt:
        raise ValueError(f"{name} must be < {lt}, got {v}")
    if le is not None and not v <= le:
        raise ValueError(f"{name} must be <= {le}, got {v}")
    return value


def check_array(
    name: str,
    value: Any,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dtype: str | None = None,
    finite: bool = True,
    ge: float | None = None,
    le: float | None = None,
) -> Any:
    """Check an array's shape, dtype kind and values.

    ``shape`` entries of ``None`` match any size. ``dtype`` is a kind:
    ``"floating"``, ``"integer"``, ``"bool"`` or ``"number"``. ``finite``
    rejects NaN/inf. Tracers are checked for shape and dtype only (their
    values are not known before tracing).
    """
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        if isinstance(value, list | tuple | float | int):
            value = np.asarray(value)
        else:
            raise TypeError(f"{name} must be an array, got {type(value).__name__}")
    got_shape = tuple(value.shape)
    if ndim is not None and len(got_shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {got_shape}")
    if shape is not None:
        want = tuple(shape)
        ok = len(want) == len(got_shape) and all(
            w is None or w == g for w, g in zip(want, got_shape, strict=True)
        )
        if not ok:
            pretty = "(" + ", ".join("*" if w is None else str(w) for w in want) + ")"
            raise ValueError(f"{name} must have shape {pretty}, got {got_shape}")
    if dtype is not None:
        kinds = {
            "floating": np.floating,
            "integer": np.integer,
            "bool": np.bool_,
            "number": np.number,
        }
        if dtype not in kinds:
            raise ValueError(f"unknown dtype kind {dtype!r}")
        if not np.issubdtype(np.dtype(value.dtype), kinds[dtype]):
            raise TypeError(f"{name} must have a {dtype} dtype, got {value.dtype}")
    if _is_tracer(value):
        return value
    if finite or ge is not None or le is not None:
        arr = np.asarray(value)
        if finite and np.issubdtype(arr.dtype, np.inexact):
            bad = ~np.isfinite(arr)
            if bad.any():
                n_nan = int(np.isnan(arr).sum())
                n_inf = int(bad.sum()) - n_nan
                raise ValueError(
                    f"{name} must be finite, got {n_nan} NaN and {n_inf} inf "
                    f"value(s) out of {arr.size}"
                )
        if ge is not None and arr.size and arr.min() < ge:
            raise ValueError(f"{name} must be >= {ge}, got minimum {arr.min()}")
        if le is not None and arr.size and arr.max() > le:
            raise ValueError(f"{name} must be <= {le}, got maximum {arr.max()}")
    return value


def check_key(name: str, key: Any) -> jax.Array:
    """Check a JAX PRNG key (new-style typed key or legacy uint32[2])."""
    if not isinstance(key, jax.Array):
        raise TypeError(
            f"{name} must be a jax.random key (jax.random.key(seed)), got {type(key).__name__}"
        )
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if key.dtype == np.uint32 and key.shape[-1:] == (2,):
        return key
    raise TypeError(
        f"{name} must be a jax.random key (jax.random.key(seed)), "
        f"got an array of dtype {key.dtype} and shape {key.shape}"
    )


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """Check that ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value
