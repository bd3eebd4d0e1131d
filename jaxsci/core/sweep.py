"""Parameter sweeps: ``vmap`` over a grid, the grid axis sharded over every device.

``sweep(fn, params)`` evaluates ``fn`` at every point of a flattened grid. The
leading axis of every leaf of ``params`` is the grid axis; it is padded to a
multiple of the device count, placed with a ``NamedSharding`` over a 1-D mesh of
``jax.devices()`` and evaluated by one ``jit(vmap(fn))``. The same call runs on
one CPU, several GPUs or, after ``jax.distributed.initialize()``, a TPU pod.

*Compiled once.* The ``jit(vmap(fn))`` is cached per ``fn`` (weakly: it goes when
``fn`` does) and per device set; JAX's own cache then reuses the executable for
every call with the same argument shapes. Define ``fn`` once, outside loops: a new
``lambda`` per call is a new function and compiles again.

*Chunks.* ``chunk_size=C`` evaluates the grid ``C`` points at a time (rounded up to a
multiple of the device count) with one compiled program, for grids whose
intermediates do not fit in memory at once; ``progress=True`` shows a bar over
the chunks. Results are identical to one call (each point is computed alone).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["sweep", "product_grid", "grid_mesh"]

GRID_AXIS = "grid"


def grid_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh named ``"grid"`` over ``devices`` (default: all of ``jax.devices()``)."""
    devs = np.asarray(list(devices) if devices is not None else jax.devices())
    return Mesh(devs, (GRID_AXIS,))


def product_grid(**axes: Any) -> dict[str, np.ndarray]:
    """Cartesian product of named 1-D axes, flattened (last axis fastest).

    >>> g = product_grid(alpha=[0.1, 0.2], T=[0.5, 1.0, 2.0])
    >>> g["alpha"].shape, g["T"].shape
    ((6,), (6,))

    Reshape a sweep's output with ``out.reshape(len(alpha), len(T), ...)``.
    """
    if not axes:
        raise ValueError("product_grid needs at least one named axis")
    values = {}
    for name, v in axes.items():
        arr = np.asarray(v)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(
                f"axis {name!r} must be a non-empty 1-D sequence, got shape {arr.shape}"
            )
        values[name] = arr
    combos = list(itertools.product(*[range(a.size) for a in values.values()]))
    idx = np.asarray(combos).T
    return {name: arr[i] for (name, arr), i in zip(values.items(), idx, strict=True)}


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_COMPILED_STRONG: dict = {}  # for callables that cannot be weakly referenced


def _compiled(fn: Callable[..., Any], devices: tuple) -> Callable[..., Any]:
    try:
        per_fn = _COMPILED.setdefault(fn, {})
    except TypeError:
        per_fn = _COMPILED_STRONG.setdefault(fn, {})
    if devices not in per_fn:
        per_fn[devices] = jax.jit(jax.vmap(fn))
    return per_fn[devices]


def sweep(
    fn: Callable[..., Any],
    params: Any,
    *,
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
) -> Any:
    """Evaluate ``fn(point)`` for every point of ``params`` with ``vmap``, sharded.

    Args:
      fn: a jittable function of one grid point (a pytree like ``params`` with the
        leading axis removed) returning a pytree of arrays. Its ``jit(vmap(fn))``
        is cached, so calling ``sweep`` again with the same ``fn`` and grid shapes
        does not compile again.
      params: a pytree whose leaves all share the leading (grid) axis of size G;
        array-likes (lists, NumPy arrays) are accepted.
      devices: devices to shard over; default ``jax.devices()``.
      chunk_size: evaluate at most this many points at a time (rounded up to a
        multiple of the device count), all chunks with one compiled program;
        ``None`` evaluates the whole grid at once.
      progress: show a progress bar over the chunks.

    Returns:
      ``fn``'s output pytree with a leading axis of size G, in grid order.

    >>> import jax.numpy as jnp
    >>> from jaxsci.core import sweep
    >>> sweep(lambda p: p["a"] ** 2, {"a": jnp.arange(5.0)}, chunk_size=2).tolist()
    [0.0, 1.0, 4.0, 9.0, 16.0]
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError("params must contain at least one array leaf")
    sizes = {int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves}
    if -1 in sizes:
        raise ValueError("every leaf of params needs a leading grid axis; got a scalar leaf")
    if len(sizes) != 1:
        raise ValueError(
            f"every leaf of params must share the grid axis size, got sizes {sorted(sizes)}"
        )
    (g,) = sizes
    if g == 0:
        raise ValueError("params has an empty grid axis")
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int | np.integer)
        or chunk_size < 1
    ):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    mesh = grid_mesh(devices)
    n_dev = mesh.devices.size
    chunk = g if chunk_size is None else min(int(chunk_size), g)
    chunk = -(-chunk // n_dev) * n_dev  # a multiple of the device count
    n_chunks = -(-g // chunk)
    pad = n_chunks * chunk - g
    sharding = NamedSharding(mesh, PartitionSpec(GRID_AXIS))
    run = _compiled(fn, tuple(mesh.devices.flat))

    def padded(leaf):
        leaf = jnp.asarray(leaf)
        if pad:
            # Pad by repeating the last point: always a valid input for fn.
            leaf = jnp.concatenate([leaf, jnp.repeat(leaf[-1:], pad, axis=0)], axis=0)
        return leaf

    full = jax.tree_util.tree_map(padded, params)
    outs = []
    indices = range(n_chunks)
    if progress and n_chunks > 1:
        from tqdm.auto import tqdm

        indices = tqdm(indices, desc="sweep", unit="chunk", leave=False)
    for i in indices:
        part = jax.tree_util.tree_map(
            lambda x, i=i: jax.device_put(x[i * chunk : (i + 1) * chunk], sharding), full
        )
        outs.append(run(part))
    out = outs[0] if n_chunks == 1 else jax.tree_util.tree_map(
        lambda *xs: jnp.concatenate(xs, axis=0), *outs
    )
    if pad:
        out = jax.tree_util.tree_map(lambda x: x[:g], out)
    return out
