r"""Trajectory counterexamples: closed-loop runs that refute a stability claim.

The verifier's counterexamples are local inputs at which a certificate's condition
fails: they refute the *certificate*, not the system's stability. :func:`falsify`
searches for a *trajectory* instead, a simulated run (initial state, disturbance
sequence, delay sequence) that breaks

* ``criterion="leaves_box"`` (no certificate given): the run starts inside
  ``init_scale`` times the state box and leaves the state box
  (``max_k max_{i,c} |x_ic(k)| / r_ic > 1``). A stable system with a certificate
  whose invariant set ``{V_i <= mu_i}`` lies in the box never does this from that
  set (and an unstable one does from everywhere): a refutation of the claim
  "stable for every delay sequence in ``0..d``", whatever certificate is tried;
* ``criterion="iss_bound"`` (certificate given): the run starts in the certified set
  ``{V_i <= mu_i}`` and the windowed maximum ``W(k) = max_i max_{s in [k-2d, k]}
  V_i(x_i(s)) / mu_i`` exceeds the sISS bound ``lam^floor(k/(2d+1)) W(0) + e/(1-lam)``
  that a successful verification implies (:mod:`.certificates`). A certified system
  never violates it; a found violation shows the certificate is invalid (the
  verifier would find counterexamples to its conditions).

Search: ``restarts`` runs in parallel (``vmap``), each with one delay pattern from
four families (all zero, all ``d``, uniformly random, alternating ``0, d``: the
delays are discrete and not differentiated) and ``ascent_steps`` steps of signed
gradient ascent on the initial state and the disturbances (``jax.grad`` through
:func:`~.systems.simulate`), the disturbances clipped to ``|w| <= w_max`` and the
initial state projected back into its set (radially; a run whose start is not in the
certified set is discarded). A heuristic search: ``found = False`` proves nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.validation import check_int, check_key, check_scalar
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov.systems import (
    FAST_COMPILE,
    InterconnectedSystem,
    simulate,
)

__all__ = ["TrajectoryCounterexample", "falsify"]


class TrajectoryCounterexample(NamedTuple):
    """The most violating run found (``found``: its violation is positive)."""

    found: bool
    criterion: str  # "leaves_box" or "iss_bound"
    violation: float  # max over steps of the excess (> 0: the claim is refuted)
    step: int  # the step of the largest excess
    x0: np.ndarray  # (N, n) constant initial history
    w: np.ndarray  # (T, N, n_w)
    own_delay: np.ndarray  # (T, N)
    link_delay: np.ndarray  # (T, N, K)
    states: np.ndarray  # (T + 1, N, n): simulate(system, x0, w, own_delay, link_delay)
    excess: np.ndarray  # (T + 1,) the excess at every step


def falsify(
    system: InterconnectedSystem,
    key: jax.Array,
    cert: ct.Certificate | None = None,
    *,
    steps: int = 60,
    restarts: int = 32,
    ascent_steps: int = 40,
    init_scale: float = 0.5,
    step_size: float = 0.05,
) -> TrajectoryCounterexample:
    """Search closed-loop runs for one that refutes stability (see the module doc).

    Args:
      system: the interconnected system.
      key: PRNG key (initial states, disturbances, random delay patterns).
      cert: a certificate to refute (criterion ``"iss_bound"``); ``None`` looks for a
        run leaving the state box (``"leaves_box"``).
      steps: simulated steps per run.
      restarts: parallel runs (a multiple of 4 covers each delay family equally).
      ascent_steps: signed-gradient ascent steps on the initial state and disturbances.
      init_scale: without a certificate, runs start in ``init_scale`` times the box.
      step_size: ascent step, relative to the box (initial state) and ``w_max``.

    Returns:
      :class:`TrajectoryCounterexample` of the run with the largest excess.
    """
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    check_key("key", key)
    if cert is not None and not isinstance(cert, ct.Certificate):
        raise TypeError(f"cert must be a Certificate or None, got {type(cert).__name__}")
    steps = check_int("steps", steps, min=1)
    restarts = check_int("restarts", restarts, min=1)
    ascent_steps = check_int("ascent_steps", ascent_steps, min=0)
    check_scalar("init_scale", init_scale, gt=0.0, le=1.0)
    check_scalar("step_size", step_size, gt=0.0)
    if cert is None:
        mu = jnp.ones(system.n_sub)
        lam, e = 1.0, 0.0
    else:
        rep = ct.gain_report(cert, system)
        mu = jnp.asarray(rep.mu, jnp.float32)
        lam = float(min(rep.lam, 1.0 - 1e-6))
        _, _, c = ct.gains(cert, system)
        e = float(jnp.max((c * system.w_max**2 + cert.eta) / mu))
    # Traced (arrays): certificates of one shape share one compiled search.
    lam, e = jnp.asarray(lam, jnp.float32), jnp.asarray(e, jnp.float32)
    excess, x0, w, own, link = _search(system, cert, key, mu, lam, e, steps, restarts,
                                       ascent_steps, float(init_scale), float(step_size))
    excess = np.asarray(excess)  # (R, T + 1)
    if cert is not None:
        # The radial projection is exact for quadratic V only: a run counts only if it
        # starts inside the certified set {V_i <= mu_i}.
        inside = np.all(np.asarray(ct.values(cert, system, x0)) <= np.asarray(mu), axis=-1)
        excess = np.where(inside[:, None], excess, -np.inf)
    best = int(np.argmax(excess.max(1)))
    x0, w, own, link = (np.asarray(a[best]) for a in (x0, w, own, link))
    states = np.asarray(simulate(system, x0, w, own, link))
    return TrajectoryCounterexample(
        found=bool(excess[best].max() > 0),
        criterion="leaves_box" if cert is None else "iss_bound",
        violation=float(excess[best].max()),
        step=int(np.argmax(excess[best])),
        x0=x0, w=w, own_delay=own, link_delay=link, states=states, excess=excess[best],
    )


def _delay_patterns(key, steps, system, restarts):
    """Delay sequences, family ``r % 4``: zero, ``d``, random, alternating ``0, d``."""
    d = system.max_delay
    n_sub, K = system.n_sub, system.K
    fam = jnp.arange(restarts) % 4
    rand_own = jax.random.randint(key, (restarts, steps, n_sub), 0, d + 1)
    rand_link = jax.random.randint(jax.random.fold_in(key, 1), (restarts, steps, n_sub, K),
                                   0, d + 1)
    alt = (jnp.arange(steps) % 2) * d
    own = jnp.select(
        [fam[:, None, None] == 0, fam[:, None, None] == 1, fam[:, None, None] == 2],
        [jnp.zeros_like(rand_own), jnp.full_like(rand_own, d), rand_own],
        jnp.broadcast_to(alt[None, :, None], rand_own.shape))
    f4 = fam[:, None, None, None]
    link = jnp.select([f4 == 0, f4 == 1, f4 == 2],
                      [jnp.zeros_like(rand_link), jnp.full_like(rand_link, d), rand_link],
                      jnp.broadcast_to(alt[None, :, None, None], rand_link.shape))
    return own.astype(jnp.int32), link.astype(jnp.int32)


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _search(system, cert, key, mu, lam, e, steps, restarts, ascent_steps, init_scale,
            step_size):
    k_x, k_w, k_d = jax.random.split(key, 3)
    box = system.state_box
    win = 2 * system.max_delay + 1
    own, link = _delay_patterns(k_d, steps, system, restarts)
    x_raw = jax.random.normal(k_x, (restarts,) + box.shape) * box
    w_raw = system.w_max * jax.random.uniform(
        k_w, (restarts, steps, system.n_sub, system.n_w), minval=-1.0, maxval=1.0)

    def project_x(x):
        if cert is None:
            return jnp.clip(x, -init_scale * box, init_scale * box)
        # Scale each x_i onto {V_i <= 0.99 mu_i} (radially; V is quadratic plus a
        # piecewise-quadratic ReLU part, so one rescaling can overshoot: twice).
        for _ in range(2):
            v = ct.values(cert, system, x)
            x = x * jnp.minimum(1.0, jnp.sqrt(0.99 * mu / jnp.maximum(v, 1e-30)))[:, None]
        return x

    def excess(x0, w, od, ld):
        tr = simulate(system, x0, w, od, ld)
        if cert is None:
            return jnp.max(jnp.abs(tr) / box, axis=(1, 2)) - 1.0
        V = ct.values(cert, system, tr) / mu  # (T + 1, N)
        Wk = jax.lax.reduce_window(jnp.max(V, -1), -jnp.inf, jax.lax.max, (win,), (1,),
                                   [(win - 1, 0)])
        k = jnp.arange(Wk.shape[0])
        bound = lam ** jnp.floor(k / win) * jnp.max(V[0]) + e / (1.0 - lam)
        return Wk - bound

    def ascend(x0, w, od, ld):
        def loss(xw):
            return jnp.max(excess(xw[0], xw[1], od, ld))

        def body(_, xw):
            gx, gw = jax.tree_util.tree_map(jnp.nan_to_num, jax.grad(loss)(xw))
            x = project_x(xw[0] + step_size * box * jnp.sign(gx))
            ww = jnp.clip(xw[1] + step_size * system.w_max * jnp.sign(gw),
                          -system.w_max, system.w_max)
            return x, ww

        x0, w = jax.lax.fori_loop(0, ascent_steps, body, (project_x(x0), w))
        return excess(x0, w, od, ld), x0, w

    ex, x0, w = jax.vmap(ascend)(x_raw, w_raw, own, link)
    return ex, x0, w, own, link
