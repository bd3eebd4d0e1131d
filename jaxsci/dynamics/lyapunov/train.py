r"""Counterexample-guided synthesis of vector Lyapunov-Razumikhin certificates.

Each round (the CEGIS loop of the paper's synthesis framework):

1. **Reachability constants** (:func:`estimate_reach`): ``kappa_i`` and ``kw_i`` of
   condition (C2) are set from samples of the delay domain (the largest observed
   ratio of squared increment to ``sum_args V`` -- resp. to ``|w|^2`` -- times a
   safety factor and the factor 2 of ``(p + q)^2 <= 2 p^2 + 2 q^2``); the verifier
   later proves (C2) with them, or returns counterexamples that raise them.
2. **Training**: ``steps`` Adam steps (optax) on the hinge loss of (C1) with a
   relative margin, ``relu(V_i(f_i(u)) - (1 - margin) RHS(u)) / (V_i(x_i) + 0.05)``,
   over fresh samples ``u`` of the subsystem's delay domain (states drawn inside the
   ellipses ``x^T D x <= 1`` that contain ``{V <= 1}``, half of them shrunk towards
   the origin, delayed offsets and disturbances uniform in their boxes; samples whose
   guards fail -- unreachable -- are masked out) plus a buffer of counterexamples,
   plus penalties for row sums above ``lam_max`` and for violations of the invariance
   part of (G). Each ``V_i`` is trained with its gains ``(a_i, b_ik, c_i)``;
   neighbours' certificates are held at their values from the start of the round
   (block-coordinate: compositional, like the verification).
3. **Verification** (:func:`~.verify.verify`): counterexamples to (C1) go to the
   buffer; counterexamples to (C2) double ``kappa_i`` of their subsystem.

Subsystems are trained in chunks of ``chunk`` (padded) by one jitted function that
runs the Adam steps as a ``lax.scan`` and takes the counterexample buffer as an
argument: compiled once per system structure, reused for every chunk, round and
``N``, so synthesis time is linear in ``N`` (``jaxsci.core.train.fit`` compiles its
step in every call and trains one pytree, which here would mean a compile per round
and per ``N``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from jaxsci.common import bounds as bd
from jaxsci.core.status import raise_if_failed
from jaxsci.core.validation import check_int, check_key, check_scalar
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov import verify as vf
from jaxsci.dynamics.lyapunov.systems import (
    FAST_COMPILE,
    InterconnectedSystem,
    input_layout,
    skeleton,
)

__all__ = [
    "SynthesisConfig",
    "SynthesisResult",
    "sample_domain",
    "estimate_reach",
    "synthesize",
]


@dataclasses.dataclass(frozen=True)
class SynthesisConfig:
    hidden: int = 16  # ReLU units of each V_i
    n_out: int = 4  # outputs of the ReLU part (squared)
    lam_max: float = 0.99  # bound on the gain-matrix row sums (sISS contraction)
    eta: float = 1e-3  # verification offset of (C1) (ultimate bound eta / (1 - lam))
    eta_reach: float = 1e-4  # offset of (C2)
    margin: float = 0.05  # train V_i(f) <= (1 - margin) RHS
    steps: int = 400  # Adam steps per round
    samples: int = 256  # domain samples per subsystem per step
    learning_rate: float = 1e-2
    rounds: int = 3  # CEGIS rounds
    cex_capacity: int = 128  # counterexample buffer per subsystem
    cex_jitter: int = 4  # jittered copies of each counterexample added to the buffer
    reach_samples: int = 2048
    reach_safety: float = 1.05
    net_scale: float = 0.05  # initial size of the ReLU part
    gain_penalty: float = 1.0  # weight of relu(row sum - lam_max): prefer scalable gains
    chunk: int = 8  # subsystems trained together (padded): one compile for every N
    # Share of the unused small-gain margin 1 - lam given to (C1) before verifying
    # (certificates.relax_gains): fewer boxes, a larger sISS gain. 0: off.
    gain_slack: float = 0.5
    verify: vf.VerifyConfig = dataclasses.field(
        default_factory=lambda: vf.VerifyConfig(max_boxes=20_000, max_counterexamples=16)
    )

    def __post_init__(self):
        check_int("hidden", self.hidden, min=1)
        check_int("n_out", self.n_out, min=1)
        check_scalar("lam_max", self.lam_max, gt=0.0, lt=1.0)
        check_scalar("eta", self.eta, ge=0.0, lt=1.0)
        check_scalar("eta_reach", self.eta_reach, ge=0.0)
        check_scalar("margin", self.margin, ge=0.0, lt=1.0)
        check_int("steps", self.steps, min=0)  # 0: verify the initial certificate
        check_int("samples", self.samples, min=2)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_int("rounds", self.rounds, min=1)
        check_int("cex_capacity", self.cex_capacity, min=1)
        check_int("cex_jitter", self.cex_jitter, min=0)
        check_int("reach_samples", self.reach_samples, min=16)
        check_scalar("reach_safety", self.reach_safety, ge=1.0)
        check_scalar("net_scale", self.net_scale, ge=0.0)
        check_scalar("gain_penalty", self.gain_penalty, ge=0.0)
        check_int("chunk", self.chunk, min=1)
        check_scalar("gain_slack", self.gain_slack, ge=0.0, lt=1.0)
        if not isinstance(self.verify, vf.VerifyConfig):
            raise TypeError(f"verify must be a VerifyConfig, got {type(self.verify).__name__}")


class SynthesisResult(NamedTuple):
    cert: ct.Certificate
    reach: ct.Reach
    verification: vf.VerificationResult
    rounds: int
    counterexamples: int  # found by the verifier over all rounds
    seconds: float  # whole loop: training and in-loop verification
    train_seconds: float
    losses: np.ndarray


# --------------------------------------------------------------------------- sampling


def sample_domain(
    system: InterconnectedSystem, data_i: dict, key: jax.Array, m: int, eta_reach: float
) -> jax.Array:
    """``m`` local inputs of one subsystem's delay domain (see module doc)."""
    lay = input_layout(system)
    n = system.n
    lo, hi = ct.domain_box(system, data_i, eta_reach)
    ks = jax.random.split(key, 5 + 2 * system.K)

    def ellipse(k, r):
        g = jax.random.normal(k, (m, n))
        g = g / jnp.linalg.norm(g, axis=-1, keepdims=True)
        rad = jax.random.uniform(jax.random.fold_in(k, 1), (m, 1)) ** (1.0 / n)
        return rad * g * r

    u = lo + (hi - lo) * jax.random.uniform(ks[0], (m, lo.shape[0]))
    u = u.at[:, lay.x].set(ellipse(ks[1], data_i["r"]))
    for k, (cur, dly) in enumerate(lay.slots):
        for t, s in enumerate((cur, dly)):
            if s is not None:
                u = u.at[:, s].set(ellipse(ks[5 + 2 * k + t], data_i["r_nbr"][k]))
    shrink = jnp.where(jax.random.uniform(ks[2], (m, 1)) < 0.5,
                       jax.random.uniform(ks[3], (m, 1)), 1.0)
    return u * shrink


def _guards_ok(system, data_i, vals):
    n_c = ct.n_conditions(system)
    return jnp.all(vals[..., n_c:] <= ct.guard_limits(system, data_i), axis=-1)


# --------------------------------------------------------------------------- per-subsystem pieces

_TRAINABLE = ("W1", "b1", "W2", "L", "a_raw", "b_raw", "c_raw")


def _with_params(data_i: dict, p: dict, lam_max: float) -> dict:
    """Subsystem data with its own certificate and gains replaced by ``p`` (trainable)."""
    d = dict(data_i)
    d["own"] = dict(data_i["own"], W1=p["W1"], b1=p["b1"], W2=p["W2"], L=p["L"])
    d["a"] = lam_max * jax.nn.sigmoid(p["a_raw"])
    d["b"] = jax.nn.softplus(p["b_raw"]) * data_i["present"]
    d["c"] = jax.nn.softplus(p["c_raw"])
    return d


def _reach_one(system, data_i, prog_i, key, samples, safety, eta, eta_reach):
    """``(kappa_i, kw_i)`` from samples of subsystem ``i``'s domain (given ``data_i``)."""
    lay = input_layout(system)
    u = sample_domain(system, data_i, key, samples, eta_reach)
    u_x = u.at[:, lay.w].set(0.0)
    vals = ct.condition_values(system, data_i, prog_i, u_x, eta=eta, eta_reach=eta_reach)
    n_c = ct.n_conditions(system)
    n_args = vals.shape[-1] - n_c - 1
    ok = jnp.all(vals[:, n_c:n_c + n_args] <= 1.0, axis=-1)
    inc2 = jnp.square(bd.apply(prog_i, u_x) - u_x[:, lay.x]).max(-1)
    top = vals[:, n_c:n_c + n_args].max(-1)
    kappa = jnp.max(jnp.where(ok, inc2 / jnp.maximum(top, 1e-6), 0.0))
    u_w = jnp.zeros_like(u).at[:, lay.w].set(u[:, lay.w])
    w2 = jnp.sum(jnp.square(u[:, lay.w]), -1)
    inc2w = jnp.square(bd.apply(prog_i, u_w) - u_w[:, lay.x]).max(-1)
    kw = jnp.max(inc2w / jnp.maximum(w2, 1e-12))
    # (p + q)^2 <= (1 + e) p^2 + (1 + 1/e) q^2 with e = 0.1: the state part keeps its
    # constant almost unchanged; the (small) disturbance part takes the factor 11.
    return 1.1 * safety * kappa + 1e-6, 11.0 * safety * kw + 1e-6


def _hinge(system, data_i, prog_i, u, margin, eta_reach):
    vals = ct.condition_values(system, data_i, prog_i, u, eta=0.0, eta_reach=eta_reach,
                               rhs_scale=1.0 - margin)
    ok = _guards_ok(system, data_i, vals).astype(u.dtype)
    # Relative violation: scaled by V_i(x_i) (the first guard), so points near the
    # origin count as much as far ones.
    v_own = jax.lax.stop_gradient(vals[:, ct.n_conditions(system)])
    return ok * jax.nn.relu(vals[:, 0]) / (v_own + 0.05)


def _local_loss(system, p, data_i, prog_i, key, cx, cw, samples, margin, gain_penalty,
                lam_max, eta, eta_reach):
    d = _with_params(data_i, p, lam_max)
    u = sample_domain(system, d, key, samples, eta_reach)
    # One evaluation for the samples and the counterexample buffer (one traced copy).
    h = _hinge(system, d, prog_i, jnp.concatenate([u, cx], 0), margin, eta_reach)
    loss = jnp.mean(h[:samples]) + jnp.sum(cw * h[samples:]) / jnp.maximum(jnp.sum(cw), 1.0)
    # (G): row sums above lam_max (non-scalable gains) and invariance violations.
    row = d["a"] + jnp.sum(d["b"])
    inv = d["c"] * system.w_max**2 + eta - 0.8 * (1.0 - lam_max) * d["mu"]
    return loss + gain_penalty * (jax.nn.relu(row - lam_max + 0.005) + 10.0 * jax.nn.relu(inv))


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _chunk_round(skel, params, data, progs, cex, cex_w, valid, boost, key, steps, samples,
                 margin, gain_penalty, learning_rate, lam_max, eta, eta_reach, reach_samples,
                 reach_safety):
    """One CEGIS round for a chunk of subsystems (neighbours' certificates fixed):
    reachability constants, then ``steps`` Adam steps on the chunk's own parameters."""
    k_reach, k_train = jax.random.split(key)

    def reach(p, d, prog, k):
        # The sampled delta box uses the previous round's kappa (in ``data``).
        d = _with_params(d, p, lam_max)
        if not skel.own_delay:
            return jnp.ones(()), jnp.ones(())
        return _reach_one(skel, d, prog, k, reach_samples, reach_safety, eta, eta_reach)

    C = valid.shape[0]
    kappa, kappa_w = jax.vmap(reach)(params, data, progs, jax.random.split(k_reach, C))
    kappa = kappa * boost
    data = dict(data, kappa=kappa, kappa_w=kappa_w)
    optimizer = optax.adam(learning_rate)
    opt_state = optimizer.init(params)

    def loss_fn(q, k):
        per = jax.vmap(
            lambda p, d, prog, kk, cx, cw: _local_loss(skel, p, d, prog, kk, cx, cw, samples,
                                                       margin, gain_penalty, lam_max, eta,
                                                       eta_reach)
        )(q, data, progs, jax.random.split(k, C), cex, cex_w)
        return jnp.sum(per * valid) / jnp.maximum(jnp.sum(valid), 1.0)

    def step(carry, k):
        q, st = carry
        loss, g = jax.value_and_grad(loss_fn)(q, k)
        upd, st = optimizer.update(g, st, q)
        return (optax.apply_updates(q, upd), st), loss

    (params, _), losses = jax.lax.scan(step, (params, opt_state),
                                       jax.random.split(k_train, steps))
    return params, kappa, kappa_w, losses


# --------------------------------------------------------------------------- reach


def estimate_reach(
    system: InterconnectedSystem,
    cert: ct.Certificate,
    key: jax.Array,
    *,
    samples: int = 2048,
    safety: float = 1.05,
) -> ct.Reach:
    """``kappa_i``, ``kw_i`` of (C2) from samples of every subsystem's delay domain: the
    largest observed ratio of squared increment to ``max_args V`` (resp. ``|w|^2``)
    times ``safety`` and the Young factors. A guess the verifier proves or refutes."""
    check_key("key", key)
    check_int("samples", samples, min=16)
    check_scalar("safety", safety, ge=1.0)
    if not system.own_delay:
        return ct.Reach(jnp.ones(system.n_sub), jnp.ones(system.n_sub))
    return _estimate_reach(system, cert, key, samples, float(safety))


@eqx.filter_jit
def _estimate_reach(system, cert, key, samples, safety):
    ones = ct.Reach(jnp.ones(system.n_sub), jnp.ones(system.n_sub))
    data = ct.local_data(cert, system, ones)
    progs = jax.vmap(system.build)(system.params)
    kap, kw = ones
    for it in range(2):  # the sampled delta box depends on kappa: iterate once
        keys = jax.random.split(jax.random.fold_in(key, it), system.n_sub)
        d = dict(data, kappa=kap, kappa_w=kw)
        kap, kw = jax.vmap(lambda di, p, k: _reach_one(system, di, p, k, samples, safety,
                                                       cert.eta, cert.eta_reach))(d, progs, keys)
    return ct.Reach(kap, kw)


# --------------------------------------------------------------------------- CEGIS


def synthesize(
    system: InterconnectedSystem,
    key: jax.Array,
    config: SynthesisConfig = SynthesisConfig(),
    *,
    cert: ct.Certificate | None = None,
    progress: bool = False,
    throw: bool = False,
) -> SynthesisResult:
    """Train and verify certificates for ``system`` (CEGIS, at most ``config.rounds``).

    Each round trains the subsystems in chunks of ``config.chunk`` (padded), each with
    its neighbours' certificates fixed at their values from the start of the round:
    compiled once per system structure, work linear in ``N``.

    Args:
      system: the interconnected system.
      key: a JAX PRNG key (initialisation, sampling, jitter).
      config: the synthesis settings (the verification budget in ``config.verify``).
      cert: a certificate to start from (default: :func:`~.certificates.init_certificate`).
      progress: show a progress bar over the CEGIS rounds.
      throw: raise ``RESULTS.not_verified``'s message when the last round is not
        certified. Default ``False`` (unlike :func:`~.verify.verify`): a synthesis run
        that did not certify still returns a certificate to inspect or continue from.

    Returns:
      :class:`SynthesisResult`; ``verification.result`` is
      ``jaxsci.core.RESULTS.successful`` when the certificate was proven.
    """
    if not isinstance(system, InterconnectedSystem):
        raise TypeError(f"system must be an InterconnectedSystem, got {type(system).__name__}")
    check_key("key", key)
    if not isinstance(config, SynthesisConfig):
        raise TypeError(f"config must be a SynthesisConfig, got {type(config).__name__}")
    t0 = time.perf_counter()
    k_init, key = jax.random.split(key)
    if cert is None:
        cert = ct.init_certificate(system, k_init, hidden=config.hidden, n_out=config.n_out,
                                   lam_max=config.lam_max, eta=config.eta,
                                   eta_reach=config.eta_reach, net_scale=config.net_scale)
    n_sub = system.n_sub
    n_u = input_layout(system).size
    cap = config.cex_capacity
    cex = np.zeros((n_sub, cap, n_u), np.float32)
    cex_w = np.zeros((n_sub, cap), np.float32)
    fill = np.zeros(n_sub, int)
    boost = np.ones(n_sub, np.float32)
    skel = skeleton(system)
    progs = jax.device_get(_programs(system))
    C = config.chunk
    chunks = [np.arange(s, s + C) for s in range(0, n_sub, C)]
    reach = ct.Reach(jax.device_put(np.ones(n_sub, np.float32)),
                     jax.device_put(np.ones(n_sub, np.float32)))
    losses, train_s, n_cex = [], 0.0, 0
    result = None
    bar = tqdm(total=config.rounds, desc=f"cegis {system.name}", disable=not progress,
               leave=False)
    for rnd in range(config.rounds):
        key, k_round, k_jit = jax.random.split(key, 3)
        t_tr = time.perf_counter()
        data = jax.device_get(ct.local_data(cert, system, reach))
        own = {k: np.array(getattr(cert, k)) for k in _TRAINABLE}
        kappa = np.ones(n_sub, np.float32)
        kappa_w = np.ones(n_sub, np.float32)
        for c_i, idx in enumerate(chunks if config.steps else []):
            valid = (idx < n_sub).astype(np.float32)
            sel = np.minimum(idx, n_sub - 1)

            def take(a, sel=sel):
                return a[sel]

            # NumPy arguments go straight to the device (jnp.asarray would dispatch
            # a conversion op per array).
            out = _chunk_round(
                skel,
                {k: v[sel] for k, v in own.items()},
                jax.tree_util.tree_map(take, data),
                jax.tree_util.tree_map(take, progs),
                cex[sel], cex_w[sel], valid, boost[sel], jax.random.fold_in(k_round, c_i),
                config.steps,
                config.samples, config.margin, config.gain_penalty, config.learning_rate,
                config.lam_max, config.eta, config.eta_reach, config.reach_samples,
                config.reach_safety)
            new_p, kap, kw, ls = jax.device_get(out)
            keep = idx < n_sub
            for k in _TRAINABLE:
                own[k][idx[keep]] = np.asarray(new_p[k])[keep]
            kappa[idx[keep]] = np.asarray(kap)[keep]
            kappa_w[idx[keep]] = np.asarray(kw)[keep]
            losses.append(np.asarray(ls))
        cert = eqx.tree_at(lambda c: [getattr(c, k) for k in _TRAINABLE], cert,
                           [jax.device_put(own[k]) for k in _TRAINABLE])
        reach = ct.Reach(jax.device_put(kappa), jax.device_put(kappa_w))
        train_s += time.perf_counter() - t_tr
        checked = ct.relax_gains(cert, system, config.gain_slack)
        result = vf.verify(system, checked, reach, config.verify, throw=False)
        bar.update(1)
        bar.set_postfix(frac=f"{result.certified_fraction:.3f}")
        found = sum(r.counterexamples.shape[0] for r in result.subsystems)
        n_cex += found
        if result.certified or rnd == config.rounds - 1:
            break
        fill, boost = _absorb(system, cert, reach, result, cex, cex_w, fill, boost,
                              jax.random.fold_in(k_jit, rnd), config)
    bar.close()
    raise_if_failed(jnp.zeros(()), result.result, throw)
    return SynthesisResult(
        cert=checked,
        reach=reach,
        verification=result,
        rounds=rnd + 1,
        counterexamples=int(n_cex),
        seconds=time.perf_counter() - t0,
        train_seconds=train_s,
        losses=np.concatenate(losses) if losses else np.zeros(0),
    )


@eqx.filter_jit(compiler_options=FAST_COMPILE)
def _programs(system):
    return jax.vmap(system.build)(system.params)


@eqx.filter_jit
def _values_at(skel, data_i, prog_i, pts, eta, eta_reach):
    return ct.condition_values(skel, data_i, prog_i, pts, eta=eta, eta_reach=eta_reach)


def _absorb(system, cert, reach, result, cex, cex_w, fill, boost, key, config):
    """Counterexamples to (C1) into the buffer (in place); (C2) failures double kappa_i."""
    data, progs, lo_all, hi_all, _ = jax.device_get(vf.local_problems(system, cert, reach))
    skel = skeleton(system)
    cap = cex.shape[1]
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**30)))
    for i, r in enumerate(result.subsystems):
        pts = r.counterexamples
        if pts.shape[0] == 0:
            continue
        d_i = jax.tree_util.tree_map(lambda a, i=i: a[i], data)
        p_i = jax.tree_util.tree_map(lambda a, i=i: a[i], progs)
        # Pad to a fixed count: one compile for every subsystem and round.
        padded = np.concatenate([pts, np.repeat(pts[:1], 32 - len(pts) % 32, 0)])
        vals = np.asarray(_values_at(skel, d_i, p_i, padded, cert.eta,
                                     cert.eta_reach))[: len(pts)]
        if system.own_delay and np.any(vals[:, 1:1 + system.n] > 0):
            boost[i] *= 2.0
        lo, hi = lo_all[i], hi_all[i]
        new = [pts]
        for _ in range(config.cex_jitter):
            new.append(np.clip(pts + 0.02 * (hi - lo) * rng.standard_normal(pts.shape), lo, hi))
        for p in np.concatenate(new, 0):
            cex[i, fill[i] % cap] = p
            cex_w[i, fill[i] % cap] = 1.0
            fill[i] += 1
    return fill, boost
