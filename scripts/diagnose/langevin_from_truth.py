"""Does path augmentation's EM keep the true drift? One langevin experiment cell, EM run
from the experiment's start (the geometric drift), from the direct estimate and from the
true drift itself.

The monomial basis (``--set basis=poly``, the default here) contains every system's
drift exactly, so the true drift is a model of the basis (least squares on the data
points recovers it to rounding). Run from there, an EM whose fixed point is the truth
stays near it, and the Monte-Carlo estimate of the observed-data log posterior (what
``select="max_posterior"`` ranks) should rank the truth first. Printed per start: the
weighted drift error of every iterate (what the experiment reports), the iterate's
estimated log posterior, and the bridges' effective sample size. An error that rises
from the truth, with a log posterior that rises with it, says the Monte-Carlo
likelihood itself prefers the wrong drifts: no selection rule and no number of EM
iterations helps there, only a better likelihood estimate (better bridges; eight times
as many helped little on Duffing at tau = 2, ``docs/langevin.md``).

    python scripts/diagnose/langevin_from_truth.py duffing 2.0 [--set em.n_bridges=32 ...]
    python scripts/diagnose/langevin_from_truth.py duffing 2.0 --cell 4 3   # a 5 x 4 grid's

``--cell I J`` takes the data of cell (I, J) of a grid run (``docs/langevin.md``'s
five systems x four intervals: duffing at tau = 2 is ``4 3``, hopf at tau = 0.1 ``3 0``).

``--set`` takes the experiment's fields (``jaxsci reproduce langevin --quick --set``).
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("system")
    ap.add_argument("tau", type=float)
    ap.add_argument("--size", default="quick")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cell", type=int, nargs=2, default=(0, 0), metavar=("I", "J"),
                    help="the cell's (system, tau) index in the experiment's grid whose data "
                         "to use (default 0 0: a one-cell run's)")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="FIELD=VALUE of the experiment's config (repeatable)")
    args = ap.parse_args(argv)

    from jaxsci.core.experiment import apply_overrides
    from jaxsci.dynamics import langevin as lg
    from jaxsci.experiments import langevin as ex

    c = apply_overrides(ex.CONFIGS[args.size],
                        ["basis=poly", f"systems={args.system}", f"taus={args.tau}",
                         *args.sets])
    if c.basis != "poly":
        raise SystemExit("--set basis must stay poly: the true drift must lie in the basis")
    tau = c.taus[0]
    feats = lg.polynomial_features(2, c.degree)  # the experiment's basis="poly" features
    cell = ex.cell_data(c, ex.cell_key(jax.random.key(args.seed), *args.cell), feats,
                        args.system, tau)
    drift, obs, grid, w, direct, init, k_aug = (cell.drift, cell.obs, cell.grid,
                                                cell.weights, cell.direct, cell.init, cell.key)
    pts = obs.reshape(-1, 2)
    f_true = jax.vmap(drift)(grid)
    truth = lg.fit_function(feats, pts, jax.vmap(drift)(pts))
    em = dataclasses.replace(c.em, n_steps=c.bridge_steps(tau), select="last")
    rms = float(lg.weighted_rmse(jnp.zeros_like(f_true), f_true, w))
    print(f"{args.system} tau={tau} D={cell.diffusion:g} pairs={c.n_traj * (c.n_obs - 1)} "
          f"bridges={em.n_bridges} bridge steps={em.n_steps} score bridges="
          f"{em.score_bridges}")
    print(f"  drift RMS {rms:.3f}   direct {float(lg.weighted_rmse(direct, f_true, w)):.3f}   "
          f"truth in the basis {float(lg.weighted_rmse(lg.predict(truth, grid), f_true, w)):.3f}")
    direct_model = lg.direct_estimator(feats, obs, tau, cell.diffusion, prior_var=c.em.prior_var)
    for name, start in (("geometric start (the experiment's)", init),
                        ("direct-estimate start", direct_model), ("true-drift start", truth)):
        res = lg.path_augmentation(k_aug, start, obs, tau, cell.diffusion, em, probe=grid)
        err = [float(lg.weighted_rmse(h, f_true, w)) for h in res.history]
        print(f"  {name}:")
        print("    error         " + " ".join(f"{e:7.3f}" for e in err))
        print("    log posterior " + " ".join(f"{float(v):7.1f}" for v in res.log_posterior))
        print("    ESS fraction  " + " ".join(f"{float(v):7.3f}" for v in res.ess))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
