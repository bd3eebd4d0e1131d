"""One success convention for every iterative method: :data:`RESULTS`.

An iterative method returns a ``result`` field holding one item of :class:`RESULTS`
(an ``equinox.internal.Enumeration``, as lineax and diffrax do). It is a JAX value,
so it works inside ``jit`` and ``vmap``: compare with ``result == RESULTS.successful``
(a boolean array, one per batch element under ``vmap``). Each failure carries a
message; methods that take ``throw=True`` (the default, as in lineax) turn a
failure into a runtime error with that message, also inside ``jit``, via
:func:`raise_if_failed`.

>>> import jax.numpy as jnp
>>> from jaxsci.core import RESULTS
>>> r = RESULTS.where(jnp.array(3) < 10, RESULTS.successful, RESULTS.max_steps_reached)
>>> bool(r == RESULTS.successful)
True
>>> RESULTS[RESULTS.max_steps_reached][:24]
'The maximum number of st'
"""

from __future__ import annotations

from typing import Any

import equinox.internal as eqxi
import jax.numpy as jnp

__all__ = ["RESULTS", "raise_if_failed", "succeeded"]


class RESULTS(eqxi.Enumeration):
    """Outcomes of an iterative method; the message explains each failure."""

    successful = ""
    max_steps_reached = (
        "The maximum number of steps was reached before the stopping criterion was met. "
        "Raise the step budget (max_steps / maxiter) or loosen the tolerance."
    )
    nonfinite = (
        "A non-finite value (NaN or inf) appeared during the iteration. Check the inputs "
        "for NaN/inf and the problem for ill-conditioning."
    )
    breakdown = (
        "The iteration broke down (a zero or negative inner product where a positive one "
        "was required): the operator may not have the structure the method assumes."
    )
    stagnation = (
        "The iteration stagnated: the residual stopped decreasing before the tolerance "
        "was reached."
    )
    not_verified = (
        "Verification did not succeed: some region could not be proved within the "
        "budget, or a counterexample was found."
    )


def succeeded(result: Any) -> Any:
    """``result == RESULTS.successful`` as a boolean array (works under ``vmap``)."""
    return jnp.asarray(result == RESULTS.successful)


def raise_if_failed(token: Any, result: Any, throw: bool) -> Any:
    """Return ``token``; with ``throw=True``, raise ``result``'s message if it failed.

    Works inside ``jit``/``vmap`` (``equinox``'s runtime errors): ``token`` is the value
    the error is attached to, usually the method's output pytree.
    """
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be a bool, got {type(throw).__name__} {throw!r}")
    if not throw:
        return token
    return result.error_if(token, result != RESULTS.successful)
