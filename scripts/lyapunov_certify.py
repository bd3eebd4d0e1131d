"""Synthesise certificates at the experiment's default budgets, then verify them with a
large branch-and-bound budget: does a benchmark certify fully?

    python scripts/lyapunov_certify.py --system drones --n 2 --max-boxes 2000000

Prints, per subsystem, whether it is certified, the proven fraction of its delay domain,
boxes bounded and seconds, then the gain condition and the overall verdict. The
certificate is ``LyapunovConfig()``'s (3 CEGIS rounds of 300 Adam steps, 30,000 boxes
per subsystem inside the loop, seed 0); only the final verification budget differs.
With ``--loop-boxes B --rounds R`` the CEGIS loop itself verifies with ``B`` boxes per
subsystem for up to ``R`` rounds, so counterexamples the large budget finds go back
to training (the result printed is the last round's verification).
``--net-scale 0`` trains quadratic certificates (no ReLU part), which the sector
S-procedure proves near the equilibrium; ``--gain-slack`` sets the share of the unused
small-gain margin spent as slack in (C1) (``SynthesisConfig.gain_slack``, default 0.5).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import numpy as np

from jaxsci.dynamics import lyapunov as ly
from jaxsci.experiments import lyapunov as m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="drones", choices=sorted(m.SYSTEMS))
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--max-boxes", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop-boxes", type=int, default=None,
                    help="verify inside the CEGIS loop with this budget (default: the config's)")
    ap.add_argument("--rounds", type=int, default=None, help="CEGIS rounds (default: 3)")
    ap.add_argument("--net-scale", type=float, default=None,
                    help="initial size of the ReLU part; 0: quadratic certificates")
    ap.add_argument("--gain-slack", type=float, default=0.5,
                    help="share of the small-gain margin given to (C1) (the library's "
                         "default; the experiment's configs pin 0)")
    args = ap.parse_args()
    cfg = m.LyapunovConfig()
    syn = cfg.synthesis
    for field, value in (("net_scale", args.net_scale), ("gain_slack", args.gain_slack)):
        if value is not None:
            syn = dataclasses.replace(syn, **{field: value})
    if args.rounds is not None:
        syn = dataclasses.replace(syn, rounds=args.rounds)
    if args.loop_boxes is not None:
        syn = dataclasses.replace(syn, verify=dataclasses.replace(
            syn.verify, batch=args.batch, max_boxes=args.loop_boxes))
    system = m.make_system(args.system, args.n, cfg)
    t0 = time.perf_counter()
    res = ly.synthesize(system, jax.random.key(args.seed), syn, throw=False)
    v = res.verification
    print(f"synthesis: {res.seconds:.1f} s, {res.rounds} rounds, {res.counterexamples} "
          f"counterexamples; in-loop verification ({syn.verify.max_boxes} boxes per "
          f"subsystem): proven {v.certified_fraction:.6f}")
    if args.loop_boxes is not None:
        final = v
    else:
        final = ly.verify.verify(system, res.cert, res.reach,
                                 ly.VerifyConfig(batch=args.batch, max_boxes=args.max_boxes),
                                 throw=False)
    for i, r in enumerate(final.subsystems):
        print(f"subsystem {i}: certified {r.certified}, proven {r.certified_fraction:.9f}, "
              f"unknown {r.unknown_fraction:.2e}, boxes {r.boxes}, counterexamples "
              f"{r.counterexamples.shape[0]}, {r.seconds:.1f} s ({r.proof})")
    g = final.gains
    print(f"gain condition: ok {g.ok}, lam {g.lam:.4f}, rho(Gamma) {g.spectral_radius:.4f}, "
          f"ISS gain {g.iss_gain:.3f}, min mu {float(np.min(g.mu)):.3f}")
    print(f"{args.system} N={args.n}: certified {final.certified} "
          f"(boxes {final.boxes}, branch-and-bound {final.seconds:.1f} s, "
          f"compile {final.compile_seconds:.1f} s; total wall {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
