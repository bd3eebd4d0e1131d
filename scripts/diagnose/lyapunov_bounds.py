"""Why branch-and-bound struggles with quadratic certificates, and what the falsifier
and a centre-radius IBP change (docs/lyapunov.md, "Linear subsystems ..." and "Bound
computation vs a peer").

    python scripts/diagnose/lyapunov_bounds.py gap        # CROWN gap vs box width
    python scripts/diagnose/lyapunov_bounds.py falsifier  # counterexamples, attack 0 vs 8
    python scripts/diagnose/lyapunov_bounds.py ibp        # centre-radius IBP vs bounds.ibp

All on ``linear_network(2)`` with ``docs/lyapunov.md``'s matrices (the same as
``scripts/lyapunov_linear.py``) and its Cauchy-Schwarz certificate, subsystem 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.common import bounds as bd
from jaxsci.dynamics import lyapunov as ly
from jaxsci.dynamics.lyapunov import certificates as ct
from jaxsci.dynamics.lyapunov import verify as vf

NET = dict(A=[[0.5, 0.1], [-0.1, 0.4]], A_delayed=[[0.1, 0.0], [0.05, 0.1]],
           B=[[0.08, 0.0], [0.0, 0.08]], E=[[0.0], [0.2]])


def _subsystem(system, cert, reach, i=1):
    data, progs, lo, hi, lim = jax.device_get(vf.local_problems(system, cert, reach))
    d = jax.tree_util.tree_map(lambda a: a[i], data)
    p = jax.tree_util.tree_map(lambda a: a[i], progs)
    return d, p, lo[i], hi[i], lim[i]


def gap(args):
    """Median (CROWN upper bound - sampled maximum) of (C1) and of its terms on random
    sub-boxes of the root box, each side ``h`` times the root's."""
    s = ly.linear_network(2, **NET)
    cert, reach = ly.quadratic.cauchy_schwarz_certificate(s)
    d, p, lo0, hi0, lim = _subsystem(s, cert, reach)
    skel = ly.systems.skeleton(s)
    cond = ct.condition_program(skel, d, p, eta=cert.eta, eta_reach=cert.eta_reach)
    own = d["own"]
    vprog = ct.v_program(own["W1"], own["b1"], own["W2"], own["L"], own["D"])
    terms = {"C1": cond, "V(f(u))": bd.compose(p, vprog)}
    for t, (kind, k, S) in enumerate(ct._args(skel)):
        q = own if kind == "own" else jax.tree_util.tree_map(lambda a, k=k: a[k], d["nbr"])
        terms[f"V(arg {t}, {kind})"] = bd.compose(
            bd.affine(jnp.asarray(S)), ct.v_program(q["W1"], q["b1"], q["W2"], q["L"], q["D"]),
            fuse=True)
    rng = np.random.default_rng(args.seed)
    nu = lo0.size
    print("h      term                 ub gap   lb gap   (median over boxes; "
          "slack of C1 = -sampled max)")
    for h in (0.2, 0.1, 0.05, 0.02):
        c = rng.uniform(lo0, hi0, size=(args.boxes, nu))
        half = h * (hi0 - lo0) / 2
        lo = np.maximum(c - half, lo0).astype(np.float32)
        hi = np.minimum(c + half, hi0).astype(np.float32)
        u = rng.uniform(lo[:, None], hi[:, None], size=(args.boxes, 256, nu)).astype(np.float32)
        for name, prog in terms.items():
            b = jax.jit(jax.vmap(lambda a, z, prog=prog: bd.crown(prog, a, z)))(lo, hi)
            y = np.asarray(jax.vmap(lambda x, prog=prog: bd.apply(prog, x))(jnp.asarray(u)))[..., 0]
            ub = np.median(np.asarray(b.upper)[:, 0] - y.max(1))
            lb = np.median(y.min(1) - np.asarray(b.lower)[:, 0])
            extra = f"   slack {-np.median(y.max(1)):.3f}" if name == "C1" else ""
            print(f"{h:<6} {name:20s} {ub:8.4f} {lb:8.4f}{extra}")


def falsifier(args):
    """Counterexamples found by branch-and-bound with and without the gradient points,
    on invalid identity certificates (gains too small), and the sampled violation rate."""
    s = ly.linear_network(2, **NET)
    _, reach = ly.quadratic.cauchy_schwarz_certificate(s)
    nc = ct.n_conditions(s)
    for a, b in ((0.45, 0.03), (0.5, 0.01)):
        cert = ct.quadratic_certificate(s, np.tile(np.eye(2), (2, 1, 1)), np.full(2, a),
                                        np.full((2, 2), b), np.full(2, 0.21), lam_max=0.999)
        d, p, lo, hi, lim = _subsystem(s, cert, reach)
        u = np.random.default_rng(args.seed).uniform(lo, hi, (50_000, lo.size))
        v = np.asarray(ct.condition_values(s, d, p, jnp.asarray(u, jnp.float32),
                                           eta=cert.eta, eta_reach=cert.eta_reach))
        ok = np.all(v[:, nc:] <= lim, 1)
        rate = np.sum((v[:, :nc].max(1) > 0) & ok) / max(ok.sum(), 1)
        print(f"a = {a}, b = {b}: sampled violating fraction of reachable points {rate:.2e}")
        for steps in (0, 8):
            t0 = time.perf_counter()
            cfg = ly.VerifyConfig(max_boxes=args.max_boxes, batch=256, attack_steps=steps,
                                  s_procedure=False)
            r = ly.verify_subsystem(s, cert, reach, 1, cfg, throw=False)
            print(f"  attack_steps = {steps}: {r.counterexamples.shape[0]} counterexamples in "
                  f"{r.boxes} boxes ({time.perf_counter() - t0:.1f} s)")


def ibp(args):
    """bounds.ibp against a centre-radius IBP with the same rounding pads, on the bench's
    random ReLU MLPs (scripts/bench/lyapunov.py), 1024 boxes."""
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "lyapunov.py"
    spec = importlib.util.spec_from_file_location("bench_lyapunov", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def affine(layer, lo, hi, u):
        c = 0.5 * (lo + hi)
        r = jnp.maximum(hi - c, c - lo) * (1 + 4 * u)  # covers the rounding of c
        aw = jnp.abs(layer.W)
        zc = bd._mm(layer.W, c) + layer.b
        zr = bd._mm(aw, r)
        err = bd._gamma(layer.W.shape[-1] + 3, u) * (bd._mm(aw, jnp.abs(c)) + zr
                                                     + jnp.abs(layer.b)) + bd._TINY
        return zc - zr - err, zc + zr + err

    def ibp_cr(prog, lo, hi):
        u = bd._unit_roundoff(lo.dtype)
        for layer in prog.layers:
            lo, hi = bd._act_interval(*affine(layer, lo, hi, u), layer.act, u)
        return lo, hi

    for i, (n_in, hidden) in enumerate(bench.NETS):
        prog = bench.make_net(jax.random.key(i), n_in, hidden)
        c = jax.random.normal(jax.random.key(1), (1024, n_in))
        r = jax.random.uniform(jax.random.key(2), (1024, n_in), minval=0.01, maxval=0.3)
        for name, fn in (("bounds.ibp", lambda a, b, p=prog: tuple(bd.ibp(p, a, b))),
                         ("centre-radius", lambda a, b, p=prog: ibp_cr(p, a, b))):
            f = jax.jit(jax.vmap(fn))
            out = jax.block_until_ready(f(c - r, c + r))
            ts = []
            for _ in range(20):
                t0 = time.perf_counter()
                jax.block_until_ready(f(c - r, c + r))
                ts.append(time.perf_counter() - t0)
            net = f"{n_in}-" + "-".join(map(str, hidden)) + "-1"
            print(f"{net:18s} {name:14s} {1e3 * np.median(ts):8.3f} ms   median width "
                  f"{float(jnp.median(out[1] - out[0])):.6g}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("gap", "falsifier", "ibp"))
    p.add_argument("--boxes", type=int, default=1024)
    p.add_argument("--max-boxes", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    {"gap": gap, "falsifier": falsifier, "ibp": ibp}[args.what](args)


if __name__ == "__main__":
    main()
