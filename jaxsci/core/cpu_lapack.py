"""A guard against a deadlock in jaxlib 0.10's batched CPU linear algebra.

What goes wrong: jaxlib 0.10.0-0.10.2 splits the batch of every batched LAPACK call on
the CPU (``eigh``, ``lu``, ``cholesky``, ``qr``, ``svd``, ``triangular_solve``,
``tridiagonal_solve``, ...) into chunks that it schedules on XLA's intra-op thread pool,
and then blocks the calling thread until they finish (``jax::ParallelBatchMap`` in
``jaxlib/cpu/_lapack.so``). XLA's thunk executor runs independent operations of one
program on that same pool. When as many batched LAPACK calls as the pool has threads
run at once (two on a 2-core machine), every pool thread is blocked waiting for chunks
that no free thread can run: the process hangs at 0% CPU, inside ``block_until_ready``.
Seen here: ``jaxsci reproduce ggm --quick`` (a vmapped sweep with three independent
batched ``eigh`` calls) hung in CI and locally; ``gdb`` shows both ``tf_XLAEigen``
threads in ``BlockingCounter::Wait`` under ``ParallelBatchMap`` from
``lapack_ssyevd_ffi``. ``tests/core/test_cpu_lapack.py`` has a five-line program that
hangs without this guard. jaxlib 0.9.2 does not have that code path; later jaxlib
releases (reported: 0.11.2) compile it out of open-source builds.

The guard: on import of :mod:`jaxsci`, for the affected jaxlib versions only, the CPU
lowering of each batched linear-algebra primitive is wrapped so that a call with a
batch of more than one matrix is lowered as a ``lax.map`` over the batch of unbatched
calls (one matrix each, which jaxlib runs inline). Values and derivatives are unchanged:
the same LAPACK routine runs on each matrix, and differentiation rules act on the
primitive, above the lowering. The cost is the lost parallelism inside one batched call
(XLA still runs independent operations in parallel). Other platforms (GPU, TPU) are not
touched. Set ``JAXSCI_CPU_LAPACK_GUARD=0`` before importing jaxsci to turn it off.
"""

from __future__ import annotations

import math
import os

# Core (non-batch) rank of each operand, as in jax._src.lax.linalg's primitive
# definitions: the leading dimensions beyond these are the batch.
_CORE_RANKS = {
    "cholesky": (2,),
    "eig": (2,),
    "eigh": (2,),
    "hessenberg": (2,),
    "householder_product": (2, 1),
    "ormqr": (2, 1, 2),
    "lu": (2,),
    "geqrf": (2,),
    "geqp3": (2, 1),
    "schur": (2,),
    "svd": (2,),
    "triangular_solve": (2, 2),
    "tridiagonal": (2,),
    "tridiagonal_solve": (1, 1, 1, 2),
}

_AFFECTED = ((0, 10), (0, 11))  # jaxlib versions [0.10, 0.11)
_installed: list[str] = []


def affected(version: tuple[int, ...] | None = None) -> bool:
    """Whether this jaxlib (or ``version``) has the batched-LAPACK deadlock."""
    if version is None:
        from jax._src.lib import version  # (major, minor, patch)
    lo, hi = _AFFECTED
    return lo <= tuple(version[:2]) < hi


def installed() -> tuple[str, ...]:
    """Names of the primitives whose CPU lowering the guard wraps (empty: not active)."""
    return tuple(_installed)


def _serial_rule(prim, ranks, original):
    from jax import lax
    from jax._src.interpreters import mlir

    def rule(ctx, *args, **params):
        aval = ctx.avals_in[0]
        nb = aval.ndim - ranks[0]
        if nb <= 0 or math.prod(aval.shape[:nb]) <= 1:
            return original(ctx, *args, **params)

        def serial(*xs):
            batch = xs[0].shape[:nb]
            flat = [x.reshape((-1,) + x.shape[nb:]) for x in xs]
            out = lax.map(lambda ys: prim.bind(*ys, **params), flat)
            if prim.multiple_results:
                return [o.reshape(batch + o.shape[1:]) for o in out]
            return out.reshape(batch + out.shape[1:])

        return mlir.lower_fun(serial, multiple_results=prim.multiple_results)(ctx, *args)

    return rule


def install() -> tuple[str, ...]:
    """Wrap the CPU lowerings (idempotent); returns the wrapped primitives' names."""
    if _installed or os.environ.get("JAXSCI_CPU_LAPACK_GUARD", "1") == "0" or not affected():
        return installed()
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    cpu = mlir._platform_specific_lowerings["cpu"]
    for name, ranks in _CORE_RANKS.items():
        prim = getattr(linalg, f"{name}_p", None)
        entry = cpu.get(prim) if prim is not None else None
        if entry is None:
            continue
        cpu[prim] = mlir.LoweringRuleEntry(_serial_rule(prim, ranks, entry.rule), entry.inline)
        _installed.append(name)
    return installed()
