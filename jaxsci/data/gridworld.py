r"""Procedurally generated 2-D grid worlds: the environment of goal-directedness studies.

A grid is a square of ``size x size`` cells, each ``EMPTY``, ``WALL``, ``GOAL`` or
``DECOY``, and an agent standing on a free cell. The agent moves ``up`` (row - 1),
``down`` (row + 1), ``left`` (column - 1) or ``right`` (column + 1); a move into a
wall or off the board leaves it where it is. It must reach a ``GOAL`` (the nearest
one, when there are two); a ``DECOY`` looks like a goal in the rendering but is an
ordinary free cell.

* :func:`generate` draws a grid (static ``size`` and ``kind``, traced ``density``; jit
  and vmap over keys and densities). **Solvable by construction**: walls are drawn
  i.i.d. with probability ``density``, the agent and the goal(s) on distinct cells,
  and then a random monotone lattice path from the agent to every goal is cleared of
  walls. The realised wall fraction is therefore a little below ``density`` (measured
  by :func:`wall_fraction`). Kinds: ``"single"`` (one goal), ``"two"`` (two goals;
  the nearest counts), ``"decoy"`` (one goal and a decoy cell).
* :func:`distances`: multi-source BFS distances to the nearest goal (``UNREACHABLE``
  where none is reachable), a ``lax.while_loop`` of relaxations until nothing changes.
* :func:`optimal_actions`: the set of optimal actions at a position (ties kept: a
  boolean ``(4,)``), and :func:`plan`: the canonical optimal path's next ``k`` actions
  (ties broken by action order) with the optimal set at each of its steps.
* Difficulty-preserving transforms: the eight symmetries of the square
  (:func:`transform`, with :func:`transform_action` and :func:`transform_position`
  mapping actions and positions) and symbol relabelling (:class:`Symbols`, used by
  :func:`render`). BFS distances are invariant: ``distances(T(g))[T(p)] ==
  distances(g)[p]`` (tested).
* :func:`render` / :func:`parse`: ASCII with coordinates (a column header and a row
  number per line, cells separated by spaces) and back; :func:`make_grid` validates a
  hand-made grid and refuses an unsolvable one.

>>> import jax
>>> g = generate(jax.random.key(0), 5, 0.2)
>>> bool(reachable(g))
True
>>> print(render(parse("A . #\n# . .\n. . G")))
  0 1 2
0 A . #
1 # . .
2 . . G
>>> [ACTIONS[a] for a in range(4) if optimal_actions(parse("A . #\n# . .\n. . G"))[a]]
['right']
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.validation import check_choice, check_int, check_key

__all__ = [
    "ACTIONS",
    "DECOY",
    "DELTAS",
    "EMPTY",
    "GOAL",
    "Grid",
    "KINDS",
    "RELABELLED",
    "SYMBOLS",
    "Symbols",
    "UNREACHABLE",
    "WALL",
    "distances",
    "generate",
    "generate_batch",
    "make_grid",
    "optimal_actions",
    "parse",
    "plan",
    "reachable",
    "render",
    "step",
    "transform",
    "transform_action",
    "transform_position",
    "wall_fraction",
]

EMPTY, WALL, GOAL, DECOY = 0, 1, 2, 3
ACTIONS = ("up", "down", "left", "right")
DELTAS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)
KINDS = ("single", "two", "decoy")
UNREACHABLE = 1_000_000
MIN_SIZE, MAX_SIZE = 3, 32


class Grid(NamedTuple):
    """A grid world: ``cells`` ``(..., n, n)`` int32 codes (``EMPTY``, ``WALL``, ``GOAL``,
    ``DECOY``) and the agent's ``(row, column)``, ``agent`` ``(..., 2)`` int32. A pytree:
    a batch of grids is a ``Grid`` with leading axes."""

    cells: jax.Array
    agent: jax.Array

    @property
    def size(self) -> int:
        return self.cells.shape[-1]


class Symbols(NamedTuple):
    """The characters :func:`render` writes (and :func:`parse` reads) for each cell."""

    empty: str = "."
    wall: str = "#"
    goal: str = "G"
    decoy: str = "D"
    agent: str = "A"


SYMBOLS = Symbols()
RELABELLED = Symbols(empty="_", wall="X", goal="*", decoy="?", agent="@")


def _kind_code(kind):
    if isinstance(kind, str):
        return jnp.int32(KINDS.index(check_choice("kind", kind, KINDS)))
    if not isinstance(kind, jax.core.Tracer):
        k = np.asarray(kind)
        if k.shape != () or not np.issubdtype(k.dtype, np.integer) or not 0 <= k < len(KINDS):
            raise ValueError(f"kind must be one of {list(KINDS)} or an index 0..{len(KINDS) - 1}"
                             f", got {kind!r}")
    return jnp.asarray(kind, jnp.int32)


def _check_size(size) -> int:
    return check_int("size", size, min=MIN_SIZE, max=MAX_SIZE)


def _monotone_path(key, start, end, n):
    """Cells of a uniformly shuffled monotone lattice path from ``start`` to ``end``
    (``2 (n - 1)`` entries; after the end the path stays on ``end``)."""
    d = end - start
    steps = jnp.abs(d)
    length = 2 * (n - 1)
    idx = jnp.arange(length)
    vertical = idx < steps[0]
    active = idx < steps[0] + steps[1]
    # Shuffle the active moves among themselves: inactive ones sort last.
    order = jnp.argsort(jnp.where(active, jax.random.uniform(key, (length,)), 2.0))
    vertical, active = vertical[order], active[order]
    move = jnp.where(vertical[:, None], jnp.array([1, 0]) * jnp.sign(d),
                     jnp.array([0, 1]) * jnp.sign(d))
    move = jnp.where(active[:, None], move, 0)
    return start + jnp.cumsum(move, axis=0)


def _generate(key, size, density, kind):
    """``kind``: a traced code (0 single, 1 two goals, 2 goal + decoy)."""
    n = size
    k_wall, k_pos, k_p1, k_p2 = jax.random.split(key, 4)
    walls = jax.random.uniform(k_wall, (n, n)) < density
    cells = jax.random.choice(k_pos, n * n, (3,), replace=False)
    pos = jnp.stack([cells // n, cells % n], axis=-1).astype(jnp.int32)
    agent, goal, third = pos[0], pos[1], pos[2]
    path = _monotone_path(k_p1, agent, goal, n)
    walls = walls.at[path[:, 0], path[:, 1]].set(False)
    path = _monotone_path(k_p2, agent, third, n)
    keep = walls[path[:, 0], path[:, 1]] & (kind == 0)
    walls = walls.at[path[:, 0], path[:, 1]].set(keep)
    walls = walls.at[agent[0], agent[1]].set(False)
    grid = jnp.where(walls, WALL, EMPTY).astype(jnp.int32)
    grid = grid.at[goal[0], goal[1]].set(GOAL)
    third_code = jnp.where(kind == 0, grid[third[0], third[1]],
                           jnp.where(kind == 1, GOAL, DECOY))
    grid = grid.at[third[0], third[1]].set(third_code)
    return Grid(grid, agent)


def generate(key, size: int, density, kind: str = "single") -> Grid:
    """Draw a solvable grid world.

    Args:
      key: a JAX PRNG key (the only randomness).
      size: the side length (static; 3 to 32, the studies use 5 to 9).
      density: the wall probability per cell, in ``[0, 1]`` (traced: sweep it under
        ``vmap``). Cells on the cleared path(s) are free whatever the draw.
      kind: ``"single"``, ``"two"`` (two goals) or ``"decoy"`` (a goal and a decoy), or
        its index in :data:`KINDS` as an integer (traced: vmap over kinds too).

    Returns:
      a :class:`Grid` whose agent reaches a goal (and, for ``"two"``, both goals; for
      ``"decoy"``, the decoy too).

    Raises:
      ValueError: a bad size, kind or (concrete) density.
    """
    key = check_key("key", key)
    size = _check_size(size)
    kind = _kind_code(kind)
    if not isinstance(density, jax.core.Tracer):
        d = np.asarray(density)
        if d.shape != () or not np.isfinite(d) or not 0.0 <= float(d) <= 1.0:
            raise ValueError(f"density must be a scalar in [0, 1], got {density!r}")
    return _generate_jit(key, jnp.asarray(density, jnp.float32), size, kind)


@functools.partial(jax.jit, static_argnums=(2,))
def _generate_jit(key, density, size, kind):
    return _generate(key, size, density, kind)


def generate_batch(key, n: int, size: int, density, kind: str = "single") -> Grid:
    """``n`` grids of one size, kind and density (``vmap`` of :func:`generate` over
    ``jax.random.split(key, n)``)."""
    n = check_int("n", n, min=1)
    key = check_key("key", key)
    size = _check_size(size)
    return _generate_batch_jit(jax.random.split(key, n), jnp.asarray(density, jnp.float32),
                               size, _kind_code(kind))


@functools.partial(jax.jit, static_argnums=(2,))
def _generate_batch_jit(keys, density, size, kind):
    return jax.vmap(lambda k: _generate(k, size, density, kind))(keys)


def _check_grid(grid) -> Grid:
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a Grid, got {type(grid).__name__}")
    c = jnp.asarray(grid.cells)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"grid.cells must be a square (n, n) array, got shape {c.shape}")
    _check_size(c.shape[0])
    if jnp.shape(grid.agent) != (2,):
        raise ValueError(f"grid.agent must have shape (2,), got {jnp.shape(grid.agent)}")
    return Grid(c.astype(jnp.int32), jnp.asarray(grid.agent, jnp.int32))


def _shift(x, dr, dc, fill):
    """``out[r, c] = x[r + dr, c + dc]`` (``fill`` off the board)."""
    n = x.shape[0]
    p = jnp.pad(x, 1, constant_values=fill)
    return jax.lax.dynamic_slice(p, (1 + dr, 1 + dc), (n, n))


def _distances(cells):
    free = cells != WALL
    d0 = jnp.where(cells == GOAL, 0, UNREACHABLE).astype(jnp.int32)

    def body(carry):
        d, _ = carry
        nb = jnp.minimum(jnp.minimum(_shift(d, -1, 0, UNREACHABLE), _shift(d, 1, 0, UNREACHABLE)),
                         jnp.minimum(_shift(d, 0, -1, UNREACHABLE), _shift(d, 0, 1, UNREACHABLE)))
        new = jnp.where(free, jnp.minimum(d, jnp.minimum(nb, UNREACHABLE - 1) + 1), UNREACHABLE)
        new = jnp.where(new >= UNREACHABLE, UNREACHABLE, new)
        return new, jnp.any(new != d)

    d, _ = jax.lax.while_loop(lambda c: c[1], body, (d0, jnp.array(True)))
    return d


def distances(grid: Grid) -> jax.Array:
    """BFS distances (moves) from every cell to the nearest goal.

    Args:
      grid: a :class:`Grid` (walls block; decoys are free cells).

    Returns:
      ``(n, n)`` int32: ``0`` on goals, ``UNREACHABLE`` on walls and on cells from
      which no goal can be reached.
    """
    g = _check_grid(grid)
    return _distances_jit(g.cells)


_distances_jit = jax.jit(_distances)


def step(grid: Grid, position, action) -> jax.Array:
    """The position after ``action`` (0 up, 1 down, 2 left, 3 right) from ``position``;
    a wall or the board's edge leaves it unchanged."""
    n = grid.cells.shape[-1]
    nxt = jnp.asarray(position, jnp.int32) + jnp.asarray(DELTAS)[action]
    inside = jnp.all((nxt >= 0) & (nxt < n))
    nc = jnp.clip(nxt, 0, n - 1)
    ok = inside & (grid.cells[nc[0], nc[1]] != WALL)
    return jnp.where(ok, nxt, jnp.asarray(position, jnp.int32))


def _optimal(cells, dist, pos):
    n = cells.shape[0]
    here = dist[pos[0], pos[1]]
    nxt = pos[None, :] + jnp.asarray(DELTAS)
    inside = jnp.all((nxt >= 0) & (nxt < n), axis=-1)
    nc = jnp.clip(nxt, 0, n - 1)
    dn = jnp.where(inside, dist[nc[:, 0], nc[:, 1]], UNREACHABLE)
    return (dn == here - 1) & (here > 0) & (here < UNREACHABLE)


def optimal_actions(grid: Grid, position=None) -> jax.Array:
    """Which of the four actions are optimal at ``position`` (default: the agent's).

    Args:
      grid: a :class:`Grid`.
      position: ``(row, column)``; default ``grid.agent``.

    Returns:
      ``(4,)`` bool, in :data:`ACTIONS` order: the actions that lower the BFS distance
      to the nearest goal by one (ties: several are ``True``). All ``False`` on a goal
      or where no goal is reachable.
    """
    g = _check_grid(grid)
    pos = g.agent if position is None else jnp.asarray(position, jnp.int32)
    return _optimal_jit(g.cells, pos)


@jax.jit
def _optimal_jit(cells, pos):
    return _optimal(cells, _distances(cells), pos)


def plan(grid: Grid, k: int) -> tuple[jax.Array, jax.Array]:
    """The next ``k`` actions of the canonical optimal path from the agent.

    The canonical path takes, at each step, the first optimal action in
    :data:`ACTIONS` order. Any optimal path reaches the goal in the same number of
    steps; the optimal *set* at each step of the canonical path says which actions
    would also have been optimal there.

    Args:
      grid: a :class:`Grid`.
      k: the horizon (static, >= 1).

    Returns:
      ``(actions, sets)``: ``(k,)`` int32 (``-1`` once a goal is reached) and ``(k, 4)``
      bool.
    """
    g = _check_grid(grid)
    k = check_int("k", k, min=1)
    return _plan(g.cells, g.agent, k)


@functools.partial(jax.jit, static_argnums=(2,))
def _plan(cells, agent, k):
    dist = _distances(cells)
    g = Grid(cells, agent)

    def body(pos, _):
        opt = _optimal(cells, dist, pos)
        a = jnp.where(opt.any(), jnp.argmax(opt), -1)
        nxt = jnp.where(a >= 0, step(g, pos, jnp.maximum(a, 0)), pos)
        return nxt, (a.astype(jnp.int32), opt)

    _, (acts, sets) = jax.lax.scan(body, agent, None, length=k)
    return acts, sets


def reachable(grid: Grid) -> jax.Array:
    """Whether a goal can be reached from the agent (a bool scalar)."""
    g = _check_grid(grid)
    return _distances(g.cells)[g.agent[0], g.agent[1]] < UNREACHABLE


def wall_fraction(grid: Grid) -> jax.Array:
    """The realised share of wall cells (vmap over a batch)."""
    return jnp.mean(jnp.asarray(grid.cells) == WALL, axis=(-2, -1))


# ------------------------------------------------------------------ transforms


def _check_t(t) -> int:
    return check_int("t", t, min=0, max=7)


def transform(grid: Grid, t: int) -> Grid:
    """The grid under the symmetry ``t`` of the square (static, 0..7): ``t % 4`` quarter
    turns counter-clockwise (``numpy.rot90``), then, for ``t >= 4``, a left-right
    mirror. Works on a batch (the last two axes of ``cells``)."""
    t = _check_t(t)
    cells = jnp.rot90(jnp.asarray(grid.cells), t % 4, axes=(-2, -1))
    if t >= 4:
        cells = jnp.flip(cells, axis=-1)
    return Grid(cells, transform_position(grid.agent, t, grid.cells.shape[-1]))


def transform_position(position, t: int, size: int) -> jax.Array:
    """Where ``(row, column)`` lands under :func:`transform` ``t`` on a ``size`` board."""
    t = _check_t(t)
    p = jnp.asarray(position, jnp.int32)
    r, c = p[..., 0], p[..., 1]
    for _ in range(t % 4):  # rot90: (r, c) -> (n - 1 - c, r)
        r, c = size - 1 - c, r
    if t >= 4:
        c = size - 1 - c
    return jnp.stack([r, c], axis=-1)


# Quarter turn counter-clockwise: up -> left -> down -> right -> up; mirror: left <-> right.
_ROT = np.array([2, 3, 1, 0])
_FLIP = np.array([0, 1, 3, 2])


def transform_action(action, t: int) -> jax.Array:
    """The action that, on ``transform(grid, t)``, moves as ``action`` does on ``grid``."""
    t = _check_t(t)
    a = jnp.asarray(action)
    for _ in range(t % 4):
        a = jnp.asarray(_ROT)[a]
    if t >= 4:
        a = jnp.asarray(_FLIP)[a]
    return a


# ------------------------------------------------------------------ text


def render(grid: Grid, symbols: Symbols = SYMBOLS, coords: bool = True) -> str:
    """ASCII rendering: one line per row, cells separated by spaces; with ``coords``, a
    header of column numbers and the row number at the start of each line."""
    g = _check_grid(grid)
    if not isinstance(symbols, Symbols):
        raise TypeError(f"symbols must be a Symbols, got {type(symbols).__name__}")
    cells, agent = np.asarray(g.cells), np.asarray(g.agent)
    table = {EMPTY: symbols.empty, WALL: symbols.wall, GOAL: symbols.goal,
             DECOY: symbols.decoy}
    n = cells.shape[0]
    w = len(str(n - 1))
    lines = [" " * (w + 1) + " ".join(str(j) for j in range(n))] if coords else []
    for i in range(n):
        row = [symbols.agent if (i, j) == tuple(agent) else table[int(cells[i, j])]
               for j in range(n)]
        lines.append((f"{i:>{w}} " if coords else "") + " ".join(row))
    return "\n".join(lines)


def parse(text: str, symbols: Symbols = SYMBOLS) -> Grid:
    """A :class:`Grid` from :func:`render`'s format (with or without coordinates).

    Raises:
      ValueError: unknown symbols, rows of unequal length, not exactly one agent, no
      goal, or no goal reachable from the agent (:func:`make_grid`).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    rows = [ln.split() for ln in text.strip("\n").splitlines() if ln.strip()]
    if rows and all(x.isdigit() for x in rows[0]):
        rows = [r[1:] for r in rows[1:]]  # drop the column header and the row numbers
    codes = {symbols.empty: EMPTY, symbols.wall: WALL, symbols.goal: GOAL,
             symbols.decoy: DECOY, symbols.agent: EMPTY}
    cells, agents = [], []
    for i, r in enumerate(rows):
        for j, s in enumerate(r):
            if s not in codes:
                raise ValueError(f"text: unknown symbol {s!r} at row {i}, column {j}; "
                                 f"known: {list(codes)}")
            if s == symbols.agent:
                agents.append((i, j))
        cells.append([codes[s] for s in r])
    if not cells or any(len(r) != len(cells) for r in cells):
        raise ValueError(f"text must describe a square grid, got rows of lengths "
                         f"{[len(r) for r in cells]}")
    if len(agents) != 1:
        raise ValueError(f"text must hold exactly one agent {symbols.agent!r}, got "
                         f"{len(agents)}")
    return make_grid(np.asarray(cells), agents[0])


def make_grid(cells, agent) -> Grid:
    """A validated hand-made :class:`Grid`.

    Args:
      cells: ``(n, n)`` codes in ``{EMPTY, WALL, GOAL, DECOY}``.
      agent: ``(row, column)`` of a free, non-goal cell.

    Raises:
      ValueError: a bad shape or code, the agent on a wall or a goal or off the board,
      no goal, or an unsolvable grid (no goal reachable from the agent).
    """
    c = np.asarray(cells)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"cells must be a square (n, n) array, got shape {c.shape}")
    _check_size(c.shape[0])
    if not np.isin(c, (EMPTY, WALL, GOAL, DECOY)).all():
        raise ValueError(f"cells must hold codes 0..3, got values {sorted(set(c.ravel()))}")
    a = np.asarray(agent)
    if a.shape != (2,) or not ((a >= 0) & (a < c.shape[0])).all():
        raise ValueError(f"agent must be a (row, column) on the {c.shape[0]}x{c.shape[0]} "
                         f"board, got {agent!r}")
    if c[a[0], a[1]] in (WALL, GOAL):
        raise ValueError(f"agent at {tuple(int(x) for x in a)} stands on a "
                         f"{'wall' if c[a[0], a[1]] == WALL else 'goal'}")
    if not (c == GOAL).any():
        raise ValueError("cells hold no goal")
    g = Grid(jnp.asarray(c, jnp.int32), jnp.asarray(a, jnp.int32))
    if not bool(reachable(g)):
        raise ValueError(f"unsolvable grid: no goal is reachable from the agent at "
                         f"{tuple(int(x) for x in a)}")
    return g
