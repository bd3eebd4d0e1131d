"""Quadratic certificates of linear delayed networks, constant delays, trajectory
counterexamples (docs/lyapunov.md, "Linear subsystems and delay models").

    python scripts/lyapunov_linear.py --n 2,4,8,16            # S-procedure (default)
    python scripts/lyapunov_linear.py --n 2 --bab-only --max-boxes 20000
    python scripts/lyapunov_linear.py --n 2 --gain-scale 0.5  # an invalid certificate
    python scripts/lyapunov_linear.py --oscillator            # stable only at tau = 1
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from jaxsci.common import bounds as bd
from jaxsci.dynamics import lyapunov as ly
from jaxsci.dynamics.lyapunov import certificates as ct

NET = dict(A=[[0.5, 0.1], [-0.1, 0.4]], A_delayed=[[0.1, 0.0], [0.05, 0.1]],
           B=[[0.08, 0.0], [0.0, 0.08]], E=[[0.0], [0.2]])


def networks(args):
    print("N  proof  certified  fraction  boxes  counterexamples  seconds")
    for n in (int(v) for v in args.n.split(",")):
        s = ly.linear_network(n, **NET, max_delay=1)
        cert, reach = ly.quadratic.cauchy_schwarz_certificate(s, gain_scale=args.gain_scale)
        cfg = ly.VerifyConfig(max_boxes=args.max_boxes, batch=args.batch,
                              s_procedure=not args.bab_only)
        t0 = time.perf_counter()
        res = ly.verify.verify(s, cert, reach, cfg, throw=False)
        proofs = sorted({r.proof for r in res.subsystems})
        cex = sum(r.counterexamples.shape[0] for r in res.subsystems)
        print(f"{n}  {'+'.join(proofs)}  {res.certified}  {res.certified_fraction:.4f}  "
              f"{res.boxes}  {cex}  {time.perf_counter() - t0:.1f}")


def oscillator(args):
    # x(k+1) = -0.3 x(k) - 0.9 x(k - tau) + 0.1 w; u = [x, delta = x - x(k - tau), w].
    s = ly.InterconnectedSystem(
        params={"M": jnp.array([[[-1.2, 0.9, 0.1]]])}, neighbors=jnp.zeros((1, 0), jnp.int32),
        state_box=jnp.ones((1, 1)), build=lambda p: bd.affine(p["M"]), w_max=0.1,
        max_delay=1, n_w=1, own_delay=True, neighbor_delayed=False, name="oscillator")
    A = np.array([[-0.3, -0.9], [1.0, 0.0]])
    rho = np.max(np.abs(np.linalg.eigvals(A)))
    print(f"companion matrix at tau = 1: spectral radius {rho:.4f}; at tau = 0 the pole is -1.2")
    aug = ly.constant_delay(s)
    sc = (1.0 + 2.0 * rho) / 3.0
    P = scipy.linalg.solve_discrete_lyapunov((A / sc).T, np.eye(2))
    P = P / np.linalg.eigvalsh(P).min()
    E, young = np.array([0.1, 0.0]), 0.02
    cert = ct.quadratic_certificate(aug, P[None], np.array([sc**2 * (1 + young)]),
                                    np.zeros((1, 0)), np.array([(1 + 1 / young) * E @ P @ E]))
    for s_proc in (True, False):
        t0 = time.perf_counter()
        res = ly.verify.verify(aug, cert, ct.default_reach(aug),
                               ly.VerifyConfig(batch=256, s_procedure=s_proc), throw=False)
        print(f"constant delay 1, s_procedure={s_proc}: certified {res.certified}, proof "
              f"{res.subsystems[0].proof}, {res.boxes} boxes, "
              f"{time.perf_counter() - t0:.1f} s, lam {res.gains.lam:.4f}")
    t0 = time.perf_counter()
    cx = ly.falsify.falsify(s, jax.random.key(args.seed))
    print(f"delays switching in {{0, 1}}: trajectory counterexample found={cx.found}: from "
          f"x0 = {cx.x0.ravel()[0]:+.3f} the state reaches {cx.states[cx.step].ravel()[0]:+.3g} "
          f"at step {cx.step} (delays {cx.own_delay[:10].ravel().tolist()}...), "
          f"{time.perf_counter() - t0:.1f} s")
    for c in (None, cert):
        r = ly.falsify.falsify(aug, jax.random.key(args.seed), cert=c)
        print(f"constant delay 1, criterion {r.criterion}: found={r.found} "
              f"(largest excess {r.violation:.3f})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="2,4,8,16")
    p.add_argument("--bab-only", action="store_true", help="skip the S-procedure")
    p.add_argument("--max-boxes", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--gain-scale", type=float, default=1.05)
    p.add_argument("--oscillator", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.oscillator:
        oscillator(args)
    else:
        networks(args)


if __name__ == "__main__":
    main()
