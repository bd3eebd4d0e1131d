r"""Discrete-time interconnected systems with bounded, time-varying delays.

``N`` subsystems with states ``x_i in R^n`` evolve as

.. math::
    x_i(k+1) = f_i\big(x_i(k),\ x_i(k-\tau_{ii}(k)),\
               \{x_j(k),\ x_j(k-\tau_{ij}(k))\}_{j \in \mathcal N_i},\ w_i(k)\big),
    \qquad 0 \le \tau_{\cdot}(k) \le \bar d,

with ``w_i`` a bounded disturbance. Each local map ``f_i`` is a
:class:`~jaxsci.common.bounds.Program` of one *local input vector* ``u``
(so the same object is simulated, trained against and bounded by the verifier):

``u = [x_i, delta_i, (x_j, x_j^d for each neighbour slot), w_i]``

where ``delta_i = x_i(k) - x_i(k - tau_ii)`` (present when ``own_delay``; the delayed
own state is ``x_i - delta_i``), each neighbour slot holds the current neighbour
state (``neighbor_current``) and/or its delayed state (``neighbor_delayed``), and
``K`` slots per subsystem are filled from ``neighbors[i]`` (``-1`` = no neighbour:
the slot is zero). :func:`input_layout` gives the slices.

Benchmarks (the paper's three applications, built here from textbook models)
---------------------------------------------------------------------------
* :func:`platoon` -- mixed-autonomy platoon in relative coordinates
  ``x_i = (e_i, eps_i)``: spacing error and relative speed to the predecessor,
  ``e_i^+ = e_i + T eps_i``, ``eps_i^+ = eps_i + T (a_{i-1} - a_i + w_i)``. Human
  drivers (HDV) use a Helly-type car-following law with an OVM-shaped saturating
  spacing response and a reaction delay, ``a = alpha s0 tanh(e^d / s0) + beta eps^d``;
  connected automated vehicles (CAV) a linear feedback on their delayed state,
  ``a = k_e e^d + k_eps eps^d``. The predecessor's command (a function of its
  delayed state) drives the follower; vehicle 0 follows a virtual leader.
* :func:`drone_formation` -- double integrators (per axis, exact zero-order hold)
  ``e^+ = e + T v + T^2 a / 2``, ``v^+ = v + T a``, ``a = u_max tanh(u / u_max) + w``
  with absolute (GPS) feedback plus relative feedback on *delayed* neighbour
  states on a bidirectional line graph.
* :func:`microgrid` -- droop-controlled grid-forming inverters on a radial feeder
  tied to the main grid (swing-equation form, angle ``theta_i`` and frequency
  ``omega_i`` deviations about a loaded operating point): sine power flows to the
  grid and to the neighbouring buses, droop on a *delayed* frequency measurement.
* :func:`linear_chain` -- a scalar linear chain with delayed coupling, for which a
  quadratic certificate is known in closed form (tests).
* :func:`linear_network` -- linear subsystems of any dimension with delayed own and
  neighbour states (quadratic certificates proven exactly, :mod:`.quadratic`).

Delay models
------------
An :class:`InterconnectedSystem` states stability for delays that switch anywhere in
``0..d`` at every step, per link: the Razumikhin conditions of
:mod:`.certificates` prove exactly that. :func:`constant_delay` states the other
common model, one known constant delay ``d`` on every argument: the system on the
augmented state ``z_i(k) = (x_i(k), x_i(k-1), ..., x_i(k-d))`` (Krasovskii's
construction), delay-free (``max_delay = 0``), so the same certificates, training and
verifier prove stability *at that delay*. A system stable only at ``tau = 1`` (unstable
at ``tau = 0``, hence under switching delays) is certified there and refuted here
(:func:`jaxsci.dynamics.lyapunov.falsify.falsify` returns the diverging trajectory).
:func:`delay_modes` states switching delays the Krasovskii way: the same history
state, one delay-free mode per choice of delays, so a certificate valid in every mode
proves stability for every delay sequence (the Razumikhin conditions' alternative).

:func:`monolithic` views a whole system as one subsystem with a common delay (the
baseline with one certificate over all states). :func:`simulate` runs any of them
with ``lax.scan`` over a ring buffer of the last ``d + 1`` states.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxsci.common import bounds as bd
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

# Compile time dominates on CPU (the programs are small and unrolled): XLA's backend
# optimisation level 0 compiles ~2-3x faster here at a negligible cost in run time (the
# same HLO; only LLVM's code generation differs, results agree to float32 rounding).
# The library's top-level jitted helpers use it, among them those whose shapes follow N
# (recompiled for every system size); not the public jitted functions
# (``compiler_options`` is refused on a nested jit, and a user may call them inside one).
FAST_COMPILE = {"xla_backend_optimization_level": 0}

__all__ = [
    "InterconnectedSystem",
    "Layout",
    "input_layout",
    "local_programs",
    "local_inputs",
    "skeleton",
    "simulate",
    "random_delays",
    "platoon",
    "drone_formation",
    "microgrid",
    "linear_chain",
    "linear_network",
    "constant_delay",
    "delay_modes",
    "monolithic",
]


class InterconnectedSystem(eqx.Module):
    """``N`` subsystems, each a :class:`~.bounds.Program` of its local input vector.

    Attributes:
      params: pytree of per-subsystem parameters, every leaf with leading axis ``N``.
      neighbors: ``(N, K)`` neighbour indices, ``-1`` for an empty slot.
      state_box: ``(N, n)`` half-widths ``r_i`` of the state domain
        ``X_i = [-r_i, r_i]`` (the certificate's invariant set lies inside).
      build: ``build(params_i) -> Program`` mapping the local input to ``x_i(k+1)``.
      w_max: bound on ``|w_i|`` (each component).
      max_delay: ``d``, the largest delay in steps.
      own_delay / neighbor_current / neighbor_delayed: which arguments ``f_i`` takes.
      neighbor_delay_is_own: in :func:`simulate`, the delay on link ``(i, j)`` is ``j``'s
        own delay (a predecessor's command computed from its delayed state).
      dt: the sampling time (for reporting only).
    """

    params: Any
    neighbors: Int[Array, "N K"]
    state_box: Float[Array, "N n"]
    build: Callable[[Any], bd.Program] = eqx.field(static=True)
    w_max: float = eqx.field(static=True)
    max_delay: int = eqx.field(static=True)
    n_w: int = eqx.field(static=True)
    own_delay: bool = eqx.field(static=True, default=True)
    neighbor_current: bool = eqx.field(static=True, default=False)
    neighbor_delayed: bool = eqx.field(static=True, default=True)
    neighbor_delay_is_own: bool = eqx.field(static=True, default=False)
    dt: float = eqx.field(static=True, default=1.0)
    name: str = eqx.field(static=True, default="system")

    def __check_init__(self):
        if not callable(self.build):
            raise TypeError(f"build must be callable, got {type(self.build).__name__}")
        check_int("max_delay", self.max_delay, min=0)
        check_int("n_w", self.n_w, min=1)
        check_scalar("w_max", self.w_max, ge=0.0)
        check_array("neighbors", self.neighbors, ndim=2, dtype="integer")
        check_array("state_box", self.state_box, ndim=2, dtype="floating")
        n_sub = self.neighbors.shape[0]
        if self.state_box.shape[0] != n_sub:
            raise ValueError(
                f"state_box must have one row per subsystem ({n_sub} from neighbors), "
                f"got shape {tuple(self.state_box.shape)}"
            )
        if not isinstance(self.state_box, jax.core.Tracer):
            box = np.asarray(self.state_box)
            if np.any(box <= 0):
                raise ValueError(
                    "empty domain: state_box half-widths must be > 0, got minimum "
                    f"{box.min()}"
                )
        if not isinstance(self.neighbors, jax.core.Tracer):
            nb = np.asarray(self.neighbors)
            if nb.size and (nb.min() < -1 or nb.max() >= n_sub):
                raise ValueError(
                    f"neighbors must be in [-1, {n_sub - 1}] (-1: empty slot), got values in "
                    f"[{nb.min()}, {nb.max()}]"
                )
            if np.any(nb == np.arange(n_sub)[:, None]):
                raise ValueError("neighbors must not list a subsystem as its own neighbour")
        for leaf in jax.tree_util.tree_leaves(self.params):
            if getattr(leaf, "shape", (None,))[:1] != (n_sub,):
                raise ValueError(
                    f"every params leaf must have leading axis N = {n_sub}, got a leaf of "
                    f"shape {getattr(leaf, 'shape', ())}"
                )

    @property
    def n_sub(self) -> int:
        return self.neighbors.shape[0]

    @property
    def n(self) -> int:
        return self.state_box.shape[1]

    @property
    def K(self) -> int:
        return self.neighbors.shape[1]


class Layout(NamedTuple):
    """Slices of the local input vector ``u`` (``None`` where absent)."""

    x: slice
    delta: slice | None
    slots: tuple[tuple[slice | None, slice | None], ...]  # (current, delayed) per slot
    w: slice
    size: int


def input_layout(system: InterconnectedSystem) -> Layout:
    n = system.n
    pos = 0

    def take(m):
        nonlocal pos
        s = slice(pos, pos + m)
        pos += m
        return s

    x = take(n)
    delta = take(n) if system.own_delay else None
    slots = []
    for _ in range(system.K):
        cur = take(n) if system.neighbor_current else None
        dly = take(n) if system.neighbor_delayed else None
        slots.append((cur, dly))
    w = take(system.n_w)
    return Layout(x, delta, tuple(slots), w, pos)


def skeleton(system: InterconnectedSystem) -> InterconnectedSystem:
    """The system cut to one subsystem: its static structure with ``N``-independent shapes.

    The first subsystem's parameters and box, ``K`` empty neighbour slots, and every
    static field unchanged: what a per-subsystem program (a condition, a training
    loss) needs to be traced once and reused for every subsystem and every ``N``.

    Args:
      system: any :class:`InterconnectedSystem`.

    Returns:
      An :class:`InterconnectedSystem` with ``N = 1`` (NumPy leaves).
    """
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    return InterconnectedSystem(
        params=jax.tree_util.tree_map(lambda a: np.asarray(a)[:1], system.params),
        neighbors=-np.ones((1, system.K), np.int32),  # structure only
        state_box=np.asarray(system.state_box)[:1],
        build=system.build,
        w_max=system.w_max,
        max_delay=system.max_delay,
        n_w=system.n_w,
        own_delay=system.own_delay,
        neighbor_current=system.neighbor_current,
        neighbor_delayed=system.neighbor_delayed,
        neighbor_delay_is_own=system.neighbor_delay_is_own,
        dt=system.dt,
        name=system.name,
    )


def local_programs(system: InterconnectedSystem) -> bd.Program:
    """All ``N`` local maps as one stacked program (leaves with leading axis ``N``)."""
    progs = _programs(system)
    _check_program(system, jax.tree_util.tree_map(lambda a: a[0], progs))
    return progs


@eqx.filter_jit
def _programs(system):
    return jax.vmap(system.build)(system.params)


def _check_program(system, prog):
    lay = input_layout(system)
    if not isinstance(prog, bd.Program):
        raise TypeError(f"build must return a bounds.Program, got {type(prog).__name__}")
    if prog.in_dim != lay.size or prog.out_dim != system.n:
        raise ValueError(
            f"build(params_i) maps {prog.in_dim} inputs to {prog.out_dim} outputs; the "
            f"layout needs {lay.size} inputs (state dim n = {system.n}) and n outputs"
        )


# --------------------------------------------------------------------------- simulation


def local_inputs(
    system: InterconnectedSystem,
    history: Float[Array, "D N n"],
    w: Float[Array, "N nw"],
    own_delay: Int[Array, " N"],
    link_delay: Int[Array, "N K"],
) -> Float[Array, "N nu"]:
    """Every subsystem's local input vector from the state history (newest first)."""
    n_sub = system.n_sub
    idx = jnp.arange(n_sub)
    x = history[0]
    parts = [x]
    if system.own_delay:
        parts.append(x - history[own_delay, idx])
    nb = system.neighbors
    present = (nb >= 0)[..., None].astype(x.dtype)
    j = jnp.maximum(nb, 0)
    if system.neighbor_delay_is_own:
        link_delay = own_delay[j]
    for k in range(system.K):
        if system.neighbor_current:
            parts.append(history[0, j[:, k]] * present[:, k])
        if system.neighbor_delayed:
            parts.append(history[link_delay[:, k], j[:, k]] * present[:, k])
    parts.append(w)
    return jnp.concatenate(parts, -1)


def simulate(
    system: InterconnectedSystem,
    x0: Float[Array, "N n"],
    w: Float[Array, "T N nw"],
    own_delay: Int[Array, "T N"],
    link_delay: Int[Array, "T N K"],
) -> Float[Array, "T1 N n"]:
    """Trajectory ``x(0..T)`` from a constant initial history ``x(-d..0) = x0``.

    Jittable; vmappable over ``x0``, ``w``, the delays and the system's array leaves
    (``system.params``: the gains and couplings a researcher sweeps, and
    ``state_box``); differentiable (reverse mode) in ``x0``, ``w`` and
    ``system.params``. The delay bound ``max_delay`` is structure (the length of the
    ring buffer of past states): static.

    Args:
      system: the interconnected system.
      x0: ``(N, n)`` initial state (array-likes converted once).
      w: ``(T, N, n_w)`` disturbances.
      own_delay: ``(T, N)`` integer delays of each subsystem's own state, in steps,
        ``0..max_delay``.
      link_delay: ``(T, N, K)`` integer delays per neighbour slot (ignored when
        ``system.neighbor_delay_is_own``: the neighbour's own delay is used).

    Returns:
      ``(T + 1, N, n)``: ``x(0), ..., x(T)``.

    Delays outside ``0..max_delay`` raise a ``ValueError`` when concrete and an
    ``equinox`` runtime error inside ``jit``/``vmap`` (never a silent out-of-range
    gather).
    """
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    n_sub, n, d = system.n_sub, system.n, system.max_delay
    x0, w = jnp.asarray(x0), jnp.asarray(w)
    own_delay, link_delay = jnp.asarray(own_delay), jnp.asarray(link_delay)
    check_array("x0", x0, shape=(n_sub, n), dtype="floating")
    check_array("w", w, shape=(None, n_sub, system.n_w), dtype="floating")
    steps = w.shape[0]
    own_delay = _check_delays("own_delay", own_delay, (steps, n_sub), d)
    link_delay = _check_delays("link_delay", link_delay, (steps, n_sub, system.K), d)
    return _simulate_jit(system, x0, w, own_delay, link_delay)


def _check_delays(name, delays, shape, d):
    check_array(name, delays, shape=shape, dtype="integer")
    if isinstance(delays, jax.core.Tracer):
        return eqx.error_if(delays, jnp.any((delays < 0) | (delays > d)),
                            f"{name} must be in 0..max_delay = {d} (delays are in steps)")
    arr = np.asarray(delays)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0 (delays are in steps), got minimum {arr.min()}")
    if arr.size and arr.max() > d:
        raise ValueError(f"{name} must be <= max_delay = {d}, got maximum {arr.max()}")
    return delays


def _simulate(system, x0, w, own_delay, link_delay):
    progs = jax.vmap(system.build)(system.params)
    d = system.max_delay
    hist0 = jnp.broadcast_to(x0, (d + 1,) + x0.shape)

    def step(hist, inp):
        wk, od, ld = inp
        u = local_inputs(system, hist, wk, od, ld)
        x_next = jax.vmap(bd.apply)(progs, u)
        hist = jnp.concatenate([x_next[None], hist[:-1]], 0)
        return hist, x_next

    _, xs = jax.lax.scan(step, hist0, (w, own_delay, link_delay))
    return jnp.concatenate([x0[None], xs], 0)


_simulate_jit = eqx.filter_jit(_simulate)


def random_delays(
    key: jax.Array, steps: int, system: InterconnectedSystem
) -> tuple[Int[Array, "T N"], Int[Array, "T N K"]]:
    """Time-varying delays drawn uniformly from ``{0, ..., max_delay}`` at every step.

    Jittable and vmappable over ``key`` (``steps`` is a loop count: static).

    Args:
      key: a JAX PRNG key.
      steps: the number of steps ``T``.
      system: gives ``N``, ``K`` and ``max_delay``.

    Returns:
      ``(own_delay (T, N), link_delay (T, N, K))``, integers, as :func:`simulate` takes.
    """
    check_key("key", key)
    steps = check_int("steps", steps, min=1)
    return _random_delays_jit(key, steps, system)


def _random_delays(key, steps, system):
    k1, k2 = jax.random.split(key)
    hi = system.max_delay + 1
    own = jax.random.randint(k1, (steps, system.n_sub), 0, hi)
    link = jax.random.randint(k2, (steps, system.n_sub, system.K), 0, hi)
    return own, link


_random_delays_jit = eqx.filter_jit(_random_delays)


# --------------------------------------------------------------------------- benchmarks


def _device(tree):
    """float32 NumPy leaves to device arrays (cast in NumPy: no conversion ops)."""
    return jax.tree_util.tree_map(lambda a: jax.device_put(np.asarray(a, np.float32)), tree)


def _line_neighbors(n_sub: int, bidirectional: bool) -> np.ndarray:
    if bidirectional:
        nb = np.stack([np.arange(n_sub) - 1, np.arange(n_sub) + 1], 1)
        nb[nb >= n_sub] = -1
        return nb
    return (np.arange(n_sub) - 1)[:, None]


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _uniforms(key, k, n_sub):
    return jax.random.uniform(key, (k, n_sub))


def _spreads(key, n_sub, ranges):
    """One uniform draw per subsystem in each ``(lo, hi)`` of ``ranges`` (NumPy)."""
    u = np.asarray(_uniforms(key, len(ranges), n_sub), np.float64)
    return [lo + (hi - lo) * u[t] for t, (lo, hi) in enumerate(ranges)]


def platoon(
    n_vehicles: int,
    key: jax.Array | None = None,
    *,
    cav_every: int = 3,
    dt: float = 0.2,
    max_delay: int = 2,
    time_headway: float = 1.5,
    hdv_gains: tuple[float, float] = (0.2, 0.8),
    cav_gains: tuple[float, float] = (0.5, 0.7),
    s0: float = 3.0,
    spacing_range: float = 4.0,
    speed_range: float = 2.0,
    w_max: float = 0.1,
    heterogeneity: float = 0.1,
) -> InterconnectedSystem:
    """Mixed-autonomy platoon; vehicle ``i`` is a CAV when ``i % cav_every == 0``.

    State ``x_i = (e_i, eps_i)``: the spacing error of a constant time-headway policy
    ``e_i = p_{i-1} - p_i - r - t_h v_i`` (the policy the OVM's optimal-velocity curve
    implies) and the relative speed ``eps_i = v_{i-1} - v_i``; with ``a_i`` vehicle
    ``i``'s acceleration, ``e_i^+ = e_i + T (eps_i - t_h a_i)``,
    ``eps_i^+ = eps_i + T (a_{i-1} - a_i + w_i)``. HDVs:
    ``a = alpha s0 tanh(e^d / s0) + beta eps^d`` (OVM-shaped saturating spacing
    response, reaction delay); CAVs: ``a = k_e e^d + k_eps eps^d`` (delayed feedback).
    Defaults (``t_h = 1.5`` s, HDV ``(0.2, 0.8)``, CAV ``(0.5, 0.7)``, ``T = 0.2`` s,
    delays up to 2 steps) are string stable: the predecessor-to-follower acceleration
    gain is <= 1 at every frequency (= 1 at DC, as for every platoon). Gains are
    spread by ``+-heterogeneity``.
    """
    n_vehicles = check_int("n_vehicles", n_vehicles, min=1)
    cav_every = check_int("cav_every", cav_every, min=1)
    check_int("max_delay", max_delay, min=0)
    for name, v in (("dt", dt), ("s0", s0), ("spacing_range", spacing_range),
                    ("speed_range", speed_range)):
        check_scalar(name, v, gt=0.0)
    check_scalar("time_headway", time_headway, ge=0.0)
    check_scalar("w_max", w_max, ge=0.0)
    check_scalar("heterogeneity", heterogeneity, ge=0.0, lt=1.0)
    key = jax.random.key(0) if key is None else check_key("key", key)
    h = heterogeneity
    cav = np.arange(n_vehicles) % cav_every == 0
    alpha, beta, k_e, k_eps = (
        g * s for g, s in zip((hdv_gains[0], hdv_gains[1], cav_gains[0], cav_gains[1]),
                              _spreads(key, n_vehicles, [(1 - h, 1 + h)] * 4), strict=True))
    # Command law a = p_tanh s0 tanh(e/s0) + p_e e + p_eps eps on the delayed state.
    law = np.stack([np.where(cav, 0.0, alpha), np.where(cav, k_e, 0.0),
                    np.where(cav, k_eps, beta)], 1)
    pred = np.concatenate([np.zeros((1, 3)), law[:-1]], 0)  # virtual leader: a = 0
    params = _device({
        "own": law,
        "pred": pred,
        "dt": np.full(n_vehicles, dt),
        "s0": np.full(n_vehicles, s0),
        "th": np.full(n_vehicles, time_headway),
    })
    box = _device(np.tile(np.array([[spacing_range, speed_range]]), (n_vehicles, 1)))
    return InterconnectedSystem(
        params=params,
        neighbors=jax.device_put(_line_neighbors(n_vehicles, False).astype(np.int32)),
        state_box=box,
        build=_platoon_program,
        w_max=float(w_max),
        max_delay=int(max_delay),
        n_w=1,
        own_delay=True,
        neighbor_current=False,
        neighbor_delayed=True,
        neighbor_delay_is_own=True,
        dt=float(dt),
        name="platoon",
    )


def _platoon_program(p) -> bd.Program:
    # u = [e, eps, de, deps, e_pred^d, eps_pred^d, w]; own delayed state (e - de, eps - deps).
    T, s0, th = p["dt"], p["s0"], p["th"]
    pt, pe, pv = p["own"][0], p["own"][1], p["own"][2]
    qt, qe, qv = p["pred"][0], p["pred"][1], p["pred"][2]
    z = jnp.zeros(())
    one = jnp.ones(())
    C = jnp.stack([
        jnp.stack([one, z, -one, z, z, z, z]) / s0,
        jnp.stack([z, z, z, z, one, z, z]) / s0,
    ])
    # Own command a_i enters e^+ with -T t_h and eps^+ with -T; the predecessor's with +T.
    B = jnp.stack([jnp.stack([-T * th * pt * s0, z]), jnp.stack([-T * pt * s0, T * qt * s0])])
    lin = jnp.stack([pe, pv, -pe, -pv])  # a_i's linear part on [e, eps, de, deps]
    A = jnp.stack([
        jnp.concatenate([jnp.stack([one, T, z, z]) - T * th * lin, jnp.stack([z, z, z])]),
        jnp.concatenate([jnp.stack([z, one, z, z]) - T * lin, jnp.stack([T * qe, T * qv, T])]),
    ])
    return bd.ridge(A, B, C, jnp.zeros(2), ("tanh", "tanh"))


def drone_formation(
    n_drones: int,
    key: jax.Array | None = None,
    *,
    dt: float = 0.2,
    max_delay: int = 2,
    k_p: float = 1.0,
    k_d: float = 1.8,
    k_c: float = 0.3,
    k_cv: float = 0.3,
    u_max: float = 3.0,
    position_range: float = 2.0,
    speed_range: float = 2.0,
    w_max: float = 0.1,
    heterogeneity: float = 0.1,
    bidirectional: bool = False,
) -> InterconnectedSystem:
    """Formation of double-integrator drones (one axis), leader-follower chain.

    ``u_i = -k_p e_i - k_d v_i - sum_j [k_c (e_i - e_j^d) + k_cv (v_i - v_j^d)]`` with
    neighbour states delayed by up to ``max_delay`` steps, saturated at ``u_max``;
    ``j`` ranges over the predecessor (``bidirectional=True``: both line neighbours).
    """
    n_drones = check_int("n_drones", n_drones, min=1)
    check_int("max_delay", max_delay, min=0)
    for name, v in (("dt", dt), ("u_max", u_max), ("position_range", position_range),
                    ("speed_range", speed_range)):
        check_scalar(name, v, gt=0.0)
    for name, v in (("k_p", k_p), ("k_d", k_d), ("k_c", k_c), ("k_cv", k_cv),
                    ("w_max", w_max)):
        check_scalar(name, v, ge=0.0)
    check_scalar("heterogeneity", heterogeneity, ge=0.0, lt=1.0)
    key = jax.random.key(1) if key is None else check_key("key", key)
    h = heterogeneity
    nb = _line_neighbors(n_drones, bool(bidirectional))
    gains = np.stack([g * s for g, s in zip(
        (k_p, k_d, k_c, k_cv), _spreads(key, n_drones, [(1 - h, 1 + h)] * 4), strict=True)], 1)
    params = _device({
        "gains": gains,
        "present": (nb >= 0).astype(np.float32),
        "dt": np.full(n_drones, dt),
        "u_max": np.full(n_drones, u_max),
    })
    box = _device(np.tile(np.array([[position_range, speed_range]]), (n_drones, 1)))
    return InterconnectedSystem(
        params=params,
        neighbors=jax.device_put(nb.astype(np.int32)),
        state_box=box,
        build=_drone_program,
        w_max=float(w_max),
        max_delay=int(max_delay),
        n_w=1,
        own_delay=False,
        neighbor_current=False,
        neighbor_delayed=True,
        dt=float(dt),
        name="drones",
    )


def _drone_program(p) -> bd.Program:
    # u = [e, v, (e_k^d, v_k^d) per slot, w]
    T, um = p["dt"], p["u_max"]
    kp, kd, kc, kcv = p["gains"][0], p["gains"][1], p["gains"][2], p["gains"][3]
    m = p["present"]
    deg = jnp.sum(m)
    z = jnp.zeros(())
    row = [-kp - kc * deg, -kd - kcv * deg]
    for k in range(m.shape[0]):
        row += [kc * m[k], kcv * m[k]]
    C = jnp.stack(row + [z])[None] / um
    B = jnp.stack([0.5 * T * T * um, T * um])[:, None]
    one = jnp.ones(())
    zs = [z] * (2 * m.shape[0])
    A = jnp.stack([
        jnp.stack([one, T] + zs + [0.5 * T * T]),
        jnp.stack([z, one] + zs + [T]),
    ])
    return bd.ridge(A, B, C, jnp.zeros(1), ("tanh",))


def microgrid(
    n_inverters: int,
    key: jax.Array | None = None,
    *,
    dt: float = 0.2,
    max_delay: int = 2,
    inertia: float = 2.0,
    damping: float = 1.0,
    droop: float = 2.0,
    b_grid: float = 1.5,
    b_line: float = 0.4,
    max_angle: float = 0.2,
    angle_range: float = 0.8,
    freq_range: float = 1.0,
    w_max: float = 0.1,
    heterogeneity: float = 0.1,
) -> InterconnectedSystem:
    """Droop-controlled inverters on a radial feeder, each tied to the main grid.

    ``omega_i^+ = omega_i + T/M_i [-D_i omega_i - k_i omega_i^d
    - b0 (sin(theta0_i + theta_i) - sin theta0_i)
    - sum_j b_ij (sin(theta_ij + theta_i - theta_j) - sin theta_ij) + w_i]``,
    ``theta_i^+ = theta_i + T omega_i``; operating-point angles ``theta0_i, theta_ij``
    drawn in ``[-max_angle, max_angle]``; the droop uses a measurement delayed by up to
    ``max_delay`` steps, the line flows the neighbours' current angles.
    """
    n_inverters = check_int("n_inverters", n_inverters, min=1)
    check_int("max_delay", max_delay, min=0)
    for name, v in (("dt", dt), ("inertia", inertia), ("angle_range", angle_range),
                    ("freq_range", freq_range)):
        check_scalar(name, v, gt=0.0)
    for name, v in (("damping", damping), ("droop", droop), ("b_grid", b_grid),
                    ("b_line", b_line), ("max_angle", max_angle), ("w_max", w_max)):
        check_scalar(name, v, ge=0.0)
    check_scalar("heterogeneity", heterogeneity, ge=0.0, lt=1.0)
    key = jax.random.key(2) if key is None else check_key("key", key)
    h = heterogeneity
    nb = _line_neighbors(n_inverters, True)
    edge_u, M, D, k, b0, th0 = _spreads(key, n_inverters, [(-max_angle, max_angle)]
                                        + [(1 - h, 1 + h)] * 4 + [(-max_angle, max_angle)])
    # Operating-point angle across each line: antisymmetric, theta_ij = -theta_ji.
    edge = edge_u[: max(n_inverters - 1, 1)]
    th_line = np.zeros((n_inverters, 2), np.float32)
    for i in range(n_inverters):
        if i > 0:
            th_line[i, 0] = -edge[i - 1]
        if i < n_inverters - 1:
            th_line[i, 1] = edge[i]
    params = _device({
        "M": inertia * M,
        "D": damping * D,
        "k": droop * k,
        "b0": b_grid * b0,
        "th0": th0,
        "b": b_line * (nb >= 0),
        "th": th_line,
        "dt": np.full(n_inverters, dt),
    })
    box = _device(np.tile(np.array([[angle_range, freq_range]]), (n_inverters, 1)))
    return InterconnectedSystem(
        params=params,
        neighbors=jax.device_put(nb.astype(np.int32)),
        state_box=box,
        build=_microgrid_program,
        w_max=float(w_max),
        max_delay=int(max_delay),
        n_w=1,
        own_delay=True,
        neighbor_current=True,
        neighbor_delayed=False,
        dt=float(dt),
        name="microgrid",
    )


def _microgrid_program(p) -> bd.Program:
    # u = [theta, omega, dtheta, domega, theta_1, omega_1, theta_2, omega_2, w]
    T, M = p["dt"], p["M"]
    g = T / M
    z = jnp.zeros(())
    one = jnp.ones(())
    b1, b2 = p["b"][0], p["b"][1]
    C = jnp.stack([
        jnp.stack([one, z, z, z, z, z, z, z, z]),
        jnp.stack([one, z, z, z, -one, z, z, z, z]),
        jnp.stack([one, z, z, z, z, z, -one, z, z]),
    ])
    d = jnp.stack([p["th0"], p["th"][0], p["th"][1]])
    B = jnp.stack([jnp.zeros(3), -g * jnp.stack([p["b0"], b1, b2])])
    A = jnp.stack([
        jnp.stack([one, T, z, z, z, z, z, z, z]),
        # droop on the delayed frequency omega - domega
        jnp.stack([z, one - g * (p["D"] + p["k"]), z, g * p["k"], z, z, z, z, g]),
    ])
    e = jnp.stack([z, g * (p["b0"] * jnp.sin(p["th0"]) + b1 * jnp.sin(p["th"][0])
                           + b2 * jnp.sin(p["th"][1]))])
    return bd.ridge(A, B, C, d, ("sin", "sin", "sin"), e)


def linear_chain(
    n_sub: int,
    *,
    a: float = 0.5,
    q: float = 0.2,
    s: float = 0.1,
    max_delay: int = 2,
    box: float = 1.0,
    w_max: float = 0.1,
) -> InterconnectedSystem:
    """Scalar chain ``x_i^+ = a x_i + q x_{i-1}(k - tau) + s w_i`` (tests).

    With ``V_i = x_i^2 / box^2``, Cauchy-Schwarz gives
    ``V_i^+ <= (|a|+|q|+|s|)(|a| V_i + |q| V_{i-1}^d + |s| w^2 / box^2)``: a quadratic
    certificate with gains ``(|a|+|q|+|s|)|a|`` and ``(|a|+|q|+|s|)|q|`` for every delay.
    """
    n_sub = check_int("n_sub", n_sub, min=1)
    check_int("max_delay", max_delay, min=0)
    for name, v in (("a", a), ("q", q), ("s", s)):
        check_scalar(name, v)
    check_scalar("box", box, gt=0.0)
    check_scalar("w_max", w_max, ge=0.0)
    params = _device({"coef": np.tile(np.array([[a, q, s]]), (n_sub, 1))})
    return InterconnectedSystem(
        params=params,
        neighbors=jax.device_put(_line_neighbors(n_sub, False).astype(np.int32)),
        state_box=_device(np.full((n_sub, 1), box)),
        build=_linear_chain_program,
        w_max=float(w_max),
        max_delay=int(max_delay),
        n_w=1,
        own_delay=False,
        neighbor_current=False,
        neighbor_delayed=True,
        name="linear_chain",
    )


def _linear_chain_program(p) -> bd.Program:
    return bd.affine(p["coef"][None, :])


def linear_network(
    n_sub: int,
    A,
    A_delayed,
    B,
    E,
    *,
    max_delay: int = 1,
    box: float = 1.0,
    w_max: float = 0.1,
    bidirectional: bool = True,
) -> InterconnectedSystem:
    """Linear subsystems on a line graph with delayed own and neighbour states,

    ``x_i(k+1) = A x_i(k) + A_d x_i(k - tau_ii) + sum_{j in N_i} B x_j(k - tau_ij) + E w_i``.

    Quadratic certificates of such systems are proven exactly by the S-procedure
    (:mod:`.quadratic`); Cauchy-Schwarz gives one: with ``V = |x|^2 / box^2`` and
    ``s = ||A|| + ||A_d|| + K ||B|| + ||E||`` (spectral norms), ``V(x^+) <=
    s (||A|| V(x) + ||A_d|| V(x^d) + ||B|| sum_j V(x_j^d) + ||E|| |w|^2 / box^2)``.

    Args:
      n_sub: ``N``.
      A, A_delayed, B: ``(n, n)`` matrices (the same for every subsystem).
      E: ``(n, n_w)`` disturbance input matrix.
      max_delay: ``d``.
      box: half-width of every state coordinate's box.
      w_max: disturbance bound.
      bidirectional: neighbours ``i - 1`` and ``i + 1`` (else only ``i - 1``).
    """
    n_sub = check_int("n_sub", n_sub, min=1)
    A, Ad, B, E = (np.asarray(v, np.float32) for v in (A, A_delayed, B, E))
    n = A.shape[0]
    for name, v, shape in (("A", A, (n, n)), ("A_delayed", Ad, (n, n)), ("B", B, (n, n))):
        if v.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {v.shape}")
    if E.ndim != 2 or E.shape[0] != n:
        raise ValueError(f"E must have shape ({n}, n_w), got {E.shape}")
    check_scalar("box", box, gt=0.0)
    check_scalar("w_max", w_max, ge=0.0)
    nb = _line_neighbors(n_sub, bidirectional)
    K = nb.shape[1]
    M = np.concatenate([A + Ad, -Ad] + [B] * K + [E], 1)
    return InterconnectedSystem(
        params=_device({"M": np.tile(M[None], (n_sub, 1, 1))}),
        neighbors=jax.device_put(nb.astype(np.int32)),
        state_box=_device(np.full((n_sub, n), box)),
        build=_linear_network_program,
        w_max=float(w_max),
        max_delay=check_int("max_delay", max_delay, min=0),
        n_w=E.shape[1],
        own_delay=True,
        neighbor_current=False,
        neighbor_delayed=True,
        name="linear_network",
    )


def _linear_network_program(p) -> bd.Program:
    return bd.affine(p["M"])


# --------------------------------------------------------------------------- constant delay


def constant_delay(system: InterconnectedSystem, delay: int | None = None) -> InterconnectedSystem:
    """The system under one known constant delay, as a delay-free system on histories.

    Every delayed argument of every ``f_i`` is taken exactly ``delay`` steps back (own
    state and every link). The state of subsystem ``i`` becomes the history
    ``z_i(k) = (x_i(k), x_i(k-1), ..., x_i(k - delay))`` (dimension ``(delay + 1) n``),
    its map ``z_i(k+1) = (f_i(u_i(k)), x_i(k), ..., x_i(k - delay + 1))`` with ``u_i`` read
    off ``z_i`` and the neighbours' current histories ``z_j(k)``; the result has
    ``max_delay = 0``. Certificates, synthesis and verification then prove stability at
    this delay only (Lyapunov-Krasovskii functions of the history), not for delays
    switching in ``0..d`` (for those: :func:`delay_modes`).

    ``simulate(constant_delay(s), tile(x0), w, 0, 0)[:, :, :n]`` equals
    ``simulate(s, x0, w, delay, delay)``.

    Args:
      system: the system with time-varying delays.
      delay: the constant delay in steps, ``0 <= delay <= system.max_delay`` (default:
        ``system.max_delay``).

    Returns:
      An :class:`InterconnectedSystem` with state dimension ``(delay + 1) n``, the
      state box tiled over the history, the same parameters, neighbours and
      disturbance bound.
    """
    _check_system(system)
    d = system.max_delay if delay is None else check_int("delay", delay, min=0,
                                                           max=system.max_delay)
    return _history_system(system, d, (d,) * _n_delay_groups(system), f"{system.name}@delay{d}")


def delay_modes(system: InterconnectedSystem) -> list[InterconnectedSystem]:
    """The system under delays switching in ``0..d``, as delay-free *modes* on histories.

    The state of subsystem ``i`` is the history ``z_i(k) = (x_i(k), ..., x_i(k - d))``
    (``d = system.max_delay``); a mode fixes which entry of the history each delayed
    argument of ``f_i`` reads: one delay for the own state (with ``own_delay``) and one
    per neighbour slot (with ``neighbor_delayed``), each in ``0..d``, independently, so
    ``(d + 1)^g`` modes for ``g`` delayed argument groups. At every step the true
    delays select one mode per subsystem, and the history shift is the same in every
    mode: the system with time-varying delays is the switched system over these
    modes. A certificate whose conditions hold in every mode (the same ``V_i`` and
    gains; the conditions of a delay-free system, checked mode by mode) proves
    stability for every delay sequence in ``0..d``: at each step the inequality of the
    mode in force holds. This is the Krasovskii route to switching delays (a common
    Lyapunov function of the switched history system), beside the Razumikhin
    conditions that :mod:`.certificates` checks on ``x_i`` alone;
    :func:`~.quadratic.switched_certificate` synthesises quadratic ones by LMIs.

    Returns:
      The modes, each an :class:`InterconnectedSystem` with ``max_delay = 0``, state
      dimension ``(d + 1) n``, the state box tiled over the history; mode ``m`` is
      named ``"{name}@delays{tau}"`` with ``tau`` the tuple of delays (own first, then
      the slots). ``simulate(mode, tile(x0), w, 0, 0)[:, :, :n]`` equals
      ``simulate(system, x0, w, tau_own, tau_link)`` for its constant delays.
    """
    _check_system(system)
    d = system.max_delay
    out = []
    for tau in itertools.product(range(d + 1), repeat=_n_delay_groups(system)):
        out.append(_history_system(system, d, tuple(tau), f"{system.name}@delays{tuple(tau)}"))
    return out


def _check_system(system):
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")


def _n_delay_groups(system):
    return int(system.own_delay) + (system.K if system.neighbor_delayed else 0)


def _history_system(system, history, delays, name):
    n = system.n
    box = jnp.tile(system.state_box, (1, history + 1))
    structure = (n, history, system.K, system.n_w, system.own_delay, system.neighbor_current,
                 system.neighbor_delayed, tuple(int(t) for t in delays))
    return InterconnectedSystem(
        params=system.params,
        neighbors=system.neighbors,
        state_box=box,
        build=_ConstantDelayBuild(system.build, structure),
        w_max=system.w_max,
        max_delay=0,
        n_w=system.n_w,
        own_delay=False,
        neighbor_current=True,
        neighbor_delayed=False,
        dt=system.dt,
        name=name,
    )


class _ConstantDelayBuild:
    """``build`` of :func:`constant_delay` and :func:`delay_modes` (a class so that
    equal wraps hash equal)."""

    def __init__(self, build, structure):
        self.build, self.structure = build, structure

    def __eq__(self, other):
        return (isinstance(other, _ConstantDelayBuild) and other.build == self.build
                and other.structure == self.structure)

    def __hash__(self):
        return hash((self.build, self.structure))

    def __call__(self, p) -> bd.Program:
        n, h, K, n_w, own, cur, dly, delays = self.structure
        m = (h + 1) * n  # history length
        size = (1 + K) * m + n_w
        rows = []
        tau = iter(delays)

        def pick(start, sign=1.0):
            M = np.zeros((n, size), np.float32)
            M[:, start:start + n] = sign * np.eye(n, dtype=np.float32)
            return M

        rows.append(pick(0))  # x_i(k)
        if own:  # delta_i = x_i(k) - x_i(k - tau_own)
            t = next(tau)
            rows.append(pick(0) + (pick(t * n, -1.0) if t else -pick(0)))
        for k in range(K):
            z = (1 + k) * m
            if cur:
                rows.append(pick(z))
            if dly:
                rows.append(pick(z + next(tau) * n))
        Mw = np.zeros((n_w, size), np.float32)
        Mw[:, size - n_w:] = np.eye(n_w, dtype=np.float32)
        rows.append(Mw)
        select = bd.affine(jnp.asarray(np.concatenate(rows, 0)))
        shift = np.zeros((h * n, size), np.float32)
        shift[:, :h * n] = np.eye(h * n, dtype=np.float32)
        # Unfused: the selection's sums (delta = x - x_d) stay exact in the chain.
        head = bd.compose(select, self.build(p))
        if not h:
            return head
        return bd.parallel(head, bd.affine(jnp.asarray(shift)))


# --------------------------------------------------------------------------- monolithic


def monolithic(system: InterconnectedSystem) -> InterconnectedSystem:
    """The whole system as one subsystem (state ``N n``) with one common delay.

    The local input is ``[X, Delta, W]``: every delayed argument of every ``f_i`` is
    taken at the same delay (``x_j(k - tau) = X_j - Delta_j``), a special case of the
    original time-varying delays. Used for the monolithic-certificate baseline.
    """
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    n_sub, n = system.n_sub, system.n
    has_delay = system.own_delay or system.neighbor_delayed
    box = system.state_box.reshape(1, n_sub * n)
    params = jax.tree_util.tree_map(lambda a: a[None], system.params)
    nb = np.asarray(system.neighbors)  # the graph is structure: static

    def build(p) -> bd.Program:
        return _monolithic_program(system, p, nb, has_delay)

    return InterconnectedSystem(
        params=params,
        neighbors=-jnp.ones((1, 0), jnp.int32),
        state_box=box,
        build=build,
        w_max=system.w_max,
        max_delay=system.max_delay,
        n_w=n_sub * system.n_w,
        own_delay=has_delay,
        neighbor_current=False,
        neighbor_delayed=False,
        dt=system.dt,
        name=f"{system.name}_monolithic",
    )


def _monolithic_program(system, sub_params, neighbors, has_delay):
    n_sub, n, nw = system.n_sub, system.n, system.n_w
    lay = input_layout(system)
    n_glob = n_sub * n * (2 if has_delay else 1) + n_sub * nw
    nb = neighbors
    branches = []
    for i in range(n_sub):
        S = np.zeros((lay.size, n_glob), np.float32)
        xi = slice(i * n, (i + 1) * n)
        S[lay.x, xi] = np.eye(n)
        dbase = n_sub * n
        if lay.delta is not None:
            S[lay.delta, dbase + i * n: dbase + (i + 1) * n] = np.eye(n)
        for k, (cur, dly) in enumerate(lay.slots):
            j = nb[i, k]
            if j < 0:
                continue
            xj = slice(j * n, (j + 1) * n)
            if cur is not None:
                S[cur, xj] = np.eye(n)
            if dly is not None:
                S[dly, xj] = np.eye(n)
                S[dly, dbase + j * n: dbase + (j + 1) * n] = -np.eye(n)
        wbase = n_sub * n * (2 if has_delay else 1)
        S[lay.w, wbase + i * nw: wbase + (i + 1) * nw] = np.eye(nw)
        prog_i = system.build(jax.tree_util.tree_map(lambda a, i=i: a[i], sub_params))
        branches.append(bd.compose(bd.affine(jnp.asarray(S)), prog_i))
    return bd.parallel(*branches)

