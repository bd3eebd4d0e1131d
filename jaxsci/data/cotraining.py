"""The sim-and-real co-training toy: a latent state seen through two domains.

A latent state ``s ~ U[-1, 1]^2`` is observed as ``x = R_d(s) in R^3`` and acted on with
``y = f(s) + Delta_d in R^2`` in each domain ``d`` (real / sim), the toy shape of the
co-training paper. ``f(s) = (sin(pi s_1) + 0.3 s_2, cos(pi s_1 / 2) s_2)``. Real data
cover only ``s_1 < support_edge`` (few samples); sim data cover the whole square (many).
The real embedding is ``x = (s_1, s_2, 0)``; the sim embedding (the *visual gap*)
decides the regime of the latent geometry:

* ``"aligned"`` (structured-aligned): ``x = (R_a s, visual_gap)``, a small rotation
  (``a = 0.3`` rad) and an offset along the third axis: the same structure, shifted;
* ``"disjoint"``: ``x = (R_{pi/2} s, 6 visual_gap)``: a quarter turn and a far offset,
  so a sim observation and the real one of the same state share no neighbourhood;
* ``"overlapping"``: ``x = (-s_1, s_2, 0)``: sim observations land on real ones of the
  mirrored state, so one observation carries two actions (negative transfer).

The *physics gap* is ``Delta_sim = (physics_gap, 0)``, ``Delta_real = 0``.

>>> import jax
>>> from jaxsci.data import cotraining as toy
>>> d = toy.sim_real_toy(jax.random.key(0), 16, 64, 8, "aligned")
>>> d.obs_real.shape, d.act_sim.shape, d.test_obs.shape
((16, 3), (64, 2), (8, 3))
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxsci.core.validation import check_choice, check_int, check_key, check_scalar

__all__ = ["REGIMES", "CotrainData", "action", "embed", "sim_real_toy"]

REGIMES = ("disjoint", "aligned", "overlapping")


class CotrainData(NamedTuple):
    """Training sets of both domains and a real-domain test set.

    ``test_in_support`` marks test states inside the real data's support;
    ``test_conflict`` is the action a sim sample at the same observation would carry
    (the mirrored state's in the overlapping regime, else ``f(s) + Delta_sim``).
    """

    obs_real: Float[Array, "n 3"]
    act_real: Float[Array, "n 2"]
    obs_sim: Float[Array, "m 3"]
    act_sim: Float[Array, "m 2"]
    test_obs: Float[Array, "k 3"]
    test_act: Float[Array, "k 2"]
    test_in_support: Bool[Array, " k"]
    test_conflict: Float[Array, "k 2"]


def action(s: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    """The shared dynamics ``f(s)`` (before the physics gap)."""
    return jnp.stack([jnp.sin(jnp.pi * s[..., 0]) + 0.3 * s[..., 1],
                      jnp.cos(0.5 * jnp.pi * s[..., 0]) * s[..., 1]], -1)


def _rot(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[c, -s], [s, c]])


def embed(s: Float[Array, "... 2"], domain: str, regime: str = "aligned",
          visual_gap: float | Float[Array, ""] = 0.5) -> Float[Array, "... 3"]:
    """The observation ``R_d(s)`` of a state in ``domain`` ("real" | "sim")."""
    check_choice("domain", domain, ("real", "sim"))
    check_choice("regime", regime, REGIMES)
    check_scalar("visual_gap", visual_gap, ge=0.0)
    zero = jnp.zeros(s.shape[:-1] + (1,), s.dtype)
    if domain == "real":
        return jnp.concatenate([s, zero], -1)
    if regime == "overlapping":
        return jnp.concatenate([s * jnp.array([-1.0, 1.0]), zero], -1)
    angle, scale = (0.3, 1.0) if regime == "aligned" else (0.5 * jnp.pi, 6.0)
    return jnp.concatenate([s @ _rot(angle).T, zero + scale * visual_gap], -1)


def sim_real_toy(key: jax.Array, n_real: int, n_sim: int, n_test: int,
                 regime: str = "aligned", *, visual_gap: float | Float[Array, ""] = 0.5,
                 physics_gap: float | Float[Array, ""] = 0.5,
                 support_edge: float | Float[Array, ""] = 0.0,
                 noise: float | Float[Array, ""] = 0.02) -> CotrainData:
    """Draw the two training sets and a real-domain test set.

    Args:
      key: a JAX PRNG key.
      n_real, n_sim: training samples per domain (real ones only where
        ``s_1 < support_edge``).
      n_test: real test states, the first half inside the real support, the rest outside.
      regime: ``"disjoint" | "aligned" | "overlapping"`` (the sim embedding; static).
      visual_gap: offset of the sim observations (traced).
      physics_gap: ``Delta_sim = (physics_gap, 0)`` (traced).
      support_edge: the real support is ``s_1 in [-1, support_edge)`` (traced, in (-1, 1)).
      noise: sd of Gaussian action noise in both training sets (traced).

    Returns:
      a :class:`CotrainData`.
    """
    check_key("key", key)
    check_int("n_real", n_real, min=1)
    check_int("n_sim", n_sim, min=1)
    check_int("n_test", n_test, min=2)
    check_choice("regime", regime, REGIMES)
    check_scalar("physics_gap", physics_gap)
    check_scalar("support_edge", support_edge, gt=-1.0, lt=1.0)
    check_scalar("noise", noise, ge=0.0)
    return _draw(key, n_real, n_sim, n_test, regime, visual_gap, physics_gap, support_edge,
                 noise)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _draw(key, n_real, n_sim, n_test, regime, visual_gap, physics_gap, support_edge, noise):
    # One compiled program per sizes and regime: eager callers (experiments, tests)
    # would otherwise pay op-by-op dispatch.
    kr, ks, kt, kn1, kn2 = jax.random.split(key, 5)
    u = jax.random.uniform(kr, (n_real, 2), minval=-1.0, maxval=1.0)
    s_real = u.at[:, 0].set(-1.0 + (u[:, 0] + 1.0) * 0.5 * (support_edge + 1.0))
    s_sim = jax.random.uniform(ks, (n_sim, 2), minval=-1.0, maxval=1.0)
    h = n_test // 2
    v = jax.random.uniform(kt, (n_test, 2), minval=-1.0, maxval=1.0)
    frac = (v[:, 0] + 1.0) * 0.5
    inside = jnp.arange(n_test) < h
    s1 = jnp.where(inside, -1.0 + frac * (support_edge + 1.0),
                   support_edge + frac * (1.0 - support_edge))
    s_test = v.at[:, 0].set(s1)
    delta = jnp.stack([jnp.asarray(physics_gap, s_sim.dtype), jnp.zeros((), s_sim.dtype)])
    mirror = s_test * jnp.array([-1.0, 1.0]) if regime == "overlapping" else s_test
    return CotrainData(
        obs_real=embed(s_real, "real"),
        act_real=action(s_real) + noise * jax.random.normal(kn1, (n_real, 2)),
        obs_sim=embed(s_sim, "sim", regime, visual_gap),
        act_sim=action(s_sim) + delta + noise * jax.random.normal(kn2, (n_sim, 2)),
        test_obs=embed(s_test, "real"),
        test_act=action(s_test),
        test_in_support=inside,
        test_conflict=action(mirror) + delta,
    )
