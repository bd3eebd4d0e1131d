"""Parameter sweeps: ``vmap`` over a grid, the grid axis sharded over every device.

``sweep(fn, params)`` evaluates ``fn`` at every point of a flattened grid. The
leading axis of every leaf of ``params`` is the grid axis; it is padded to a
multiple of the device count, placed with a ``NamedSharding`` over a 1-D mesh of
``jax.devices()`` and evaluated by one ``jit(vmap(fn))``. The same call runs on
one CPU, several GPUs or, after ``jax.distributed.initialize()``, a TPU pod.
"""

from __future__ import annotations

import itertools
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


def sweep(
    fn: Callable[..., Any],
    params: Any,
    *,
    devices: Sequence[jax.Device] | None = None,
) -> Any:
    """Evaluate ``fn(point)`` for every point of ``params`` with ``vmap``, sharded.

    Args:
      fn: a jittable function of one grid point (a pytree like ``params`` with the
        leading axis removed) returning a pytree of arrays.
      params: a pytree whose leaves all share the leading (grid) axis of size G.
      devices: devices to shard over; default ``jax.devices()``.

    Returns:
      ``fn``'s output pytree with a leading axis of size G, in grid order.
    """
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
    mesh = grid_mesh(devices)
    n_dev = mesh.devices.size
    pad = (-g) % n_dev
    sharding = NamedSharding(mesh, PartitionSpec(GRID_AXIS))

    def place(leaf):
        leaf = jnp.asarray(leaf)
        if pad:
            # Pad by repeating the last point: always a valid input for fn.
            leaf = jnp.concatenate([leaf, jnp.repeat(leaf[-1:], pad, axis=0)], axis=0)
        return jax.device_put(leaf, sharding)

    placed = jax.tree_util.tree_map(place, params)
    out = jax.jit(jax.vmap(fn))(placed)
    if pad:
        out = jax.tree_util.tree_map(lambda x: x[:g], out)
    return out
