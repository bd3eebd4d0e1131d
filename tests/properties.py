"""The property harness: every public entry point, every transformation.

Each method declares its entry points in ``tests/cases/<method>.py`` as a ``CASES``
list of :class:`Case` (lineax's ``tests/helpers.py`` pattern); ``tests/test_properties.py``
checks every case for

* ``jit``: ``equinox.filter_jit(fn)`` equals the eager call;
* ``vmap``: for each name in ``vmap``, ``filter_jit(filter_vmap(...))`` over a batch of
  that argument equals a Python loop (this is what "vmappable in x" in a docstring
  promises);
* ``grad``: for each name in ``grad``, ``jax.grad`` of ``loss(out)`` against central
  finite differences along a random direction in that argument, in float64 (one compiled
  ``value_and_grad`` over all the names, which also gives the differences' values);
* ``zero_grad``: for each name in ``zero_grad``, the gradient is exactly zero (where it
  is zero by construction, e.g. through Metropolis accept steps; the docstring says so);
* ``determinism``: the same ``key`` gives the same result, another key another one;
* ``cached``: a second eager call with the same inputs lowers no new program (a function
  that builds its loop bodies or vector fields as fresh closures at each call, outside a
  module-level jit, compiles again at every call of a user's script);
* ``bad``: each bad input raises a clear error naming the argument (eagerly, or under
  ``jit`` for value checks that run through ``equinox.error_if``).

A case's ``kwargs`` are built by ``make()`` (called inside the float64 context for the
gradient checks, so build arrays with ``jnp.asarray(..., float)`` defaults).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Bad", "Case", "CHECKS", "check"]


@dataclasses.dataclass(frozen=True)
class Bad:
    """One bad input: ``overrides`` replace kwargs; expect ``error`` matching ``match``.

    ``jit=True``: the check is a value check that must also fire inside ``jit`` (an
    ``equinox.error_if``); the call is then made under ``filter_jit`` and any exception
    whose message matches counts.
    """

    overrides: dict[str, Any]
    error: type[BaseException] | tuple[type[BaseException], ...]
    match: str
    jit: bool = False


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # "<method>.<function>" (the method prefix attributes test time)
    fn: Callable[..., Any]
    make: Callable[[], dict[str, Any]]
    out: Callable[[Any], Any] = lambda y: y  # arrays to compare, from the output
    loss: Callable[[Any], Any] | None = None  # scalar for gradients; default: sum of out
    vmap: tuple[str, ...] = ()
    batch: dict[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
    grad: tuple[str, ...] = ()
    zero_grad: tuple[str, ...] = ()
    key: str | None = None
    bad: tuple[Bad, ...] = ()
    jit: bool = True
    cached: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    fd_rtol: float = 1e-4
    fd_eps: float = 1e-6

    @property
    def method(self) -> str:
        return self.name.split(".")[0]


def _arrays(tree: Any) -> list[np.ndarray]:
    leaves = jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_array))
    out = []
    for x in leaves:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        out.append(np.asarray(x))
    return out


def _assert_close(a: Any, b: Any, rtol: float, atol: float, what: str) -> None:
    la, lb = _arrays(a), _arrays(b)
    assert len(la) == len(lb), f"{what}: different output structure"
    assert la, f"{what}: the output has no arrays to compare"
    for x, y in zip(la, lb, strict=True):
        assert x.shape == y.shape, f"{what}: shapes {x.shape} vs {y.shape}"
        if np.issubdtype(x.dtype, np.inexact):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=what)
        else:
            np.testing.assert_array_equal(x, y, err_msg=what)


def _default_batch(x: Any) -> Any:
    """Three distinct values around ``x``: keys are split, floats scaled, ints shifted."""
    x = jnp.asarray(x) if not isinstance(x, jax.Array) else x
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.split(x, 3)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.stack([x, x * 0.9, x * 1.1])
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.stack([x, x, x])
    raise TypeError(f"no default batch for dtype {x.dtype}; give Case.batch")


def _call(case: Case, kwargs: dict[str, Any]) -> Any:
    return case.out(case.fn(**kwargs))


_MADE: dict[tuple[int, bool], tuple[Case, dict[str, Any]]] = {}


def _make(case: Case) -> dict[str, Any]:
    """``case.make()``, built once per case and precision (float64 inside the gradient
    checks): several makers run the method itself to build a state (a coreset after 15
    inserts, a trained model), and every check of the case reads the same inputs. The
    values are immutable JAX arrays and modules; each check gets its own dict."""
    k = (id(case), bool(jax.config.jax_enable_x64))
    hit = _MADE.get(k)
    if hit is None or hit[0] is not case:
        hit = (case, case.make())
        _MADE[k] = hit
    return dict(hit[1])


_FAST: dict[int, tuple[Case, Callable[[dict[str, Any]], Any]]] = {}


def _fast(case: Case) -> Callable[[dict[str, Any]], Any]:
    """The jitted call of a case (eager when the case is not jittable), made once per
    case: the ``jit``, ``vmap`` (its loop) and ``determinism`` checks call it with
    same-shaped inputs, so they share one compiled program (all of a method's checks run
    on one pytest-xdist worker)."""
    hit = _FAST.get(id(case))
    if hit is not None and hit[0] is case:
        return hit[1]
    if case.jit:
        fn = eqx.filter_jit(lambda kw: _call(case, kw))
    else:
        fn = lambda kw: _call(case, kw)  # noqa: E731
    _FAST[id(case)] = (case, fn)
    return fn


def check_jit(case: Case) -> None:
    kw = _make(case)
    eager = _call(case, kw)
    jitted = _fast(case)(kw)
    _assert_close(jitted, eager, case.rtol, case.atol, f"{case.name}: jit vs eager")


def check_vmap(case: Case, name: str) -> None:
    kw = _make(case)
    make_batch = case.batch.get(name, _default_batch)
    xs = make_batch(kw[name])
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    batched = eqx.filter_vmap(lambda v: _call(case, {**kw, name: v}))
    if case.jit:  # as a sweep runs it (jit of vmap): one compile, not op-by-op dispatch
        batched = eqx.filter_jit(batched)
    batched = batched(xs)
    one = _fast(case)
    loop = [one({**kw, name: jax.tree_util.tree_map(lambda a, i=i: a[i], xs)})
            for i in range(n)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *loop)
    _assert_close(batched, stacked, case.rtol * 10, case.atol * 10,
                  f"{case.name}: vmap over {name} vs a loop")


def _scalar(case: Case, y: Any) -> Any:
    if case.loss is not None:
        return case.loss(y)
    return sum(jnp.sum(jnp.asarray(x)) for x in jax.tree_util.tree_leaves(
        eqx.filter(y, eqx.is_inexact_array)))


def _grad_setup(case: Case, names: tuple[str, ...]):
    """``f(d)``: the case's scalar as a function of the float leaves ``d[name]`` of each
    argument in ``names`` (the other leaves held), and ``d`` at the case's inputs."""
    kw = _make(case)
    parts = {n: eqx.partition(kw[n], eqx.is_inexact_array) for n in names}
    # Strongly typed leaves: a weakly typed scalar (``jnp.asarray(1.0)``) turns strong
    # once shifted for the finite differences, and a jitted program compiled for the
    # weak type would compile again for each shifted point.
    diff = {n: jax.tree_util.tree_map(lambda v: v + jnp.zeros((), v.dtype), p[0])
            for n, p in parts.items()}

    def f(d):
        new = {n: eqx.combine(d[n], parts[n][1]) for n in names}
        return _scalar(case, _call(case, {**kw, **new}))

    return f, diff


def check_grad(case: Case, names: tuple[str, ...]) -> None:
    """One compiled ``value_and_grad`` over every name in ``case.grad`` at once; then,
    per name, the directional derivative along a random direction in that argument
    alone against central finite differences of the same program's values."""
    with jax.enable_x64(True):
        f, diff = _grad_setup(case, names)
        for name in names:
            leaves = jax.tree_util.tree_leaves(diff[name])
            assert leaves, f"{case.name}: {name} has no float leaves"
            for leaf in leaves:
                assert leaf.dtype == jnp.float64, (
                    f"{case.name}: make() gave {name} as {leaf.dtype}; build floats without "
                    "a fixed float32 dtype so the gradient check runs in float64")
        vg = jax.value_and_grad(f)
        vg = eqx.filter_jit(vg) if case.jit else vg
        g = vg(diff)[1]
        rng = np.random.default_rng(0)
        eps = case.fd_eps
        for name in names:
            leaves, treedef = jax.tree_util.tree_flatten(diff[name])
            d_name = jax.tree_util.tree_unflatten(
                treedef, [jnp.asarray(rng.standard_normal(np.shape(v))) for v in leaves])
            analytic = sum(jnp.vdot(a, b) for a, b in zip(
                jax.tree_util.tree_leaves(g[name]), jax.tree_util.tree_leaves(d_name),
                strict=True))

            def shifted(sign, name=name, d_name=d_name):
                moved = jax.tree_util.tree_map(lambda x, dx: x + sign * eps * dx,
                                               diff[name], d_name)
                return {**diff, name: moved}

            fd = (vg(shifted(1.0))[0] - vg(shifted(-1.0))[0]) / (2 * eps)
            assert np.isfinite(float(analytic)), f"{case.name}: non-finite gradient wrt {name}"
            np.testing.assert_allclose(float(analytic), float(fd), rtol=case.fd_rtol,
                                       atol=case.fd_rtol * 1e-2,
                                       err_msg=f"{case.name}: d/d{name} vs finite differences")


def check_zero_grad(case: Case, name: str) -> None:
    f, diff = _grad_setup(case, (name,))
    g = (eqx.filter_jit(jax.grad(f)) if case.jit else jax.grad(f))(diff)
    for leaf in jax.tree_util.tree_leaves(g):
        assert np.all(np.asarray(leaf) == 0), f"{case.name}: d/d{name} is not identically zero"


def check_determinism(case: Case) -> None:
    kw = _make(case)
    call = _fast(case)
    a = call(kw)
    b = call(kw)
    _assert_close(a, b, 0, 0, f"{case.name}: same key, different results")
    other = call({**kw, case.key: jax.random.fold_in(kw[case.key], 1)})
    differs = any(not np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(other),
                                                           strict=True))
    assert differs, f"{case.name}: another key gives the same result (is the key used?)"


_LOWERED = [0]


def _count_lowering(event: str, duration: float, **kwargs: Any) -> None:
    # Fires for every program lowered to XLA, whether it then compiles or is loaded from
    # the persistent compilation cache.
    if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
        _LOWERED[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count_lowering)


def check_cached(case: Case) -> None:
    kw = _make(case)
    jax.block_until_ready(_call(case, kw))
    before = _LOWERED[0]
    jax.block_until_ready(_call(case, dict(kw)))
    n = _LOWERED[0] - before
    assert n == 0, (f"{case.name}: a second eager call with the same inputs lowered {n} new "
                    "program(s): put the computation behind a module-level jit")


def check_bad(case: Case, i: int) -> None:
    import pytest

    bad = case.bad[i]
    kw = {**_make(case), **bad.overrides}
    if bad.jit:
        with pytest.raises(Exception) as info:  # noqa: PT011 - the message is what we check
            # The case's jitted call: a value check with same-shaped inputs reuses its
            # compiled program.
            call = _fast(case) if case.jit else eqx.filter_jit(lambda kw: _call(case, kw))
            jax.block_until_ready(call(kw))
        assert re.search(bad.match, str(info.value)), (
            f"{case.name}: error under jit does not say {bad.match!r}: {str(info.value)[:300]}")
    else:
        with pytest.raises(bad.error, match=bad.match):
            _call(case, kw)


def checks(case: Case) -> list[tuple[str, Callable[[], None]]]:
    """Every (id, check) pair a case declares."""
    out = []
    if case.jit:
        out.append(("jit", lambda: check_jit(case)))
    for n in case.vmap:
        out.append((f"vmap[{n}]", lambda n=n: check_vmap(case, n)))
    if case.grad:
        out.append((f"grad[{','.join(case.grad)}]", lambda: check_grad(case, case.grad)))
    for n in case.zero_grad:
        out.append((f"zero_grad[{n}]", lambda n=n: check_zero_grad(case, n)))
    if case.key is not None:
        out.append(("determinism", lambda: check_determinism(case)))
    if case.cached:
        out.append(("cached", lambda: check_cached(case)))
    for i in range(len(case.bad)):
        out.append((f"bad[{i}]", lambda i=i: check_bad(case, i)))
    return out


CHECKS = ("jit", "vmap", "grad", "zero_grad", "determinism", "cached", "bad")


def check(case: Case, which: str) -> None:
    for cid, fn in checks(case):
        if cid == which:
            fn()
            return
    raise KeyError(which)
