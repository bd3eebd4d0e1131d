"""Benchmark: drift inference from temporally sparse samples, jaxsci vs StochasticForceInference.

Same observations for every method (2-D SDE ``dX = f dt + sqrt(2D) dW``, ``D = 0.5``,
100 trajectories observed 11 times, ``tau`` apart, after a burn-in): jaxsci's direct
(Kramers-Moyal) and path-augmentation estimators (the ``quick`` config's settings)
against the peer a user would pick, StochasticForceInference (SFI, ``pip install
stochasticforceinference``, module ``SFI``): ``OverdampedLangevinInference`` with its
constant-diffusion estimate and linear force inference on the polynomials of degree
<= 3 (which contain both true drifts: an advantage for SFI), with its default preset
("auto") and with its Kramers-Moyal preset ("KM", the analogue of the direct
estimator). SFI, like the direct estimator, regresses increments over ``tau``.
jaxsci also runs on SFI's own basis (``--basis both``, default: the monomials of degree <=
3, :func:`jaxsci.dynamics.langevin.polynomial_features`), so the comparison of the
estimators is on equal footing. Error: drift RMSE at the observed points, weighted by
their kernel density. Each
method runs once to warm up (compile time = first call - second call), then is
timed; ratio = SFI time / jaxsci time. Run: ``python scripts/bench/langevin.py``
(``--systems``, ``--taus`` choose the cases; ``--n-traj``, ``--n-obs``, ``--diffusion`` the
data: e.g. one long trajectory at a small noise level).
"""

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import langevin as lg
from jaxsci.experiments.langevin import CONFIGS, SYSTEMS

C = CONFIGS["quick"]


def make_data(system, tau):
    x0 = jax.random.normal(jax.random.key(0), (C.n_traj, 2))
    return lg.simulate(jax.random.key(1), SYSTEMS[system](), x0, C.diffusion, tau, C.n_obs,
                       steps_per_obs=round(tau / C.dt), burn_in=C.burn_in,
                       burn_in_steps=round(C.burn_in / C.dt))


def jaxsci_direct(obs, tau, feats):
    model = lg.direct_estimator(feats, obs, tau, C.diffusion, prior_var=C.em.prior_var)
    return lambda x: lg.predict(model, x)


def jaxsci_augmented(obs, tau, feats):
    pts = obs.reshape(-1, 2)
    init = lg.fit_function(feats, pts, lg.geometric_drift(pts, obs, C.diffusion))
    em = dataclasses.replace(C.em, n_steps=C.bridge_steps(tau))
    res = lg.path_augmentation(jax.random.key(3), init, obs, tau, C.diffusion, em)
    return lambda x: lg.predict(res.model, x)


def sfi_force(obs, tau, _feats, preset="auto"):
    from SFI import OverdampedLangevinInference
    from SFI.bases.monomials import monomials_up_to
    from SFI.trajectory.collection import TrajectoryCollection

    data = TrajectoryCollection.from_arrays(X=np.asarray(obs).transpose(1, 0, 2), dt=tau)
    inf = OverdampedLangevinInference(data)
    inf.compute_diffusion_constant()
    inf.infer_force_linear(monomials_up_to(3, dim=2, rank="vector"), preset=preset)
    return lambda x: inf.force_inferred(x)


def timed(fn, obs, tau, feats, pts):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(obs, tau, feats)(pts))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(obs, tau, feats)(pts))
    run = time.perf_counter() - t0
    return out, first - run, run


POLY3 = lg.polynomial_features(2, 3)


def main(systems=("double_well", "van_der_pol"), taus=(0.1, 2.0)):
    feats = lg.random_features(jax.random.key(2), 2, C.n_features, C.lengthscale)
    methods = (("jaxsci direct", jaxsci_direct), ("jaxsci augmented", jaxsci_augmented),
               ("jaxsci direct poly3", lambda o, t, f: jaxsci_direct(o, t, POLY3)),
               ("jaxsci augm. poly3", lambda o, t, f: jaxsci_augmented(o, t, POLY3)),
               ("SFI poly3", sfi_force),
               ("SFI poly3 KM", lambda o, t, f: sfi_force(o, t, f, preset="KM")))
    print(f"{C.n_traj * (C.n_obs - 1)} observed pairs per case, D = {C.diffusion} (known to "
          "jaxsci, estimated by SFI)")
    print(f"{'system':12s} {'tau':>4s} {'method':19s} {'compile_s':>9s} {'run_s':>7s} "
          f"{'wrmse':>7s} {'drift_rms':>9s}")
    for system in systems:
        for tau in taus:
            obs = make_data(system, tau)
            pts = obs.reshape(-1, 2)
            w = lg.kde_density(pts, pts, lg.scott_bandwidth(pts))
            f_true = jax.vmap(SYSTEMS[system]())(pts)
            rms = float(lg.weighted_rmse(jnp.zeros_like(f_true), f_true, w))
            runs = {}
            for name, fn in methods:
                try:
                    out, comp, run = timed(fn, obs, tau, feats, pts)
                except Exception as e:  # report a peer failure instead of hiding it
                    print(f"{system:12s} {tau:4g} {name:19s} failed: {type(e).__name__}: {e}")
                    continue
                err = float(lg.weighted_rmse(jnp.asarray(out, pts.dtype), f_true, w))
                runs[name] = run
                print(f"{system:12s} {tau:4g} {name:19s} {comp:9.2f} {run:7.2f} {err:7.3f} "
                      f"{rms:9.3f}")
            if "SFI poly3" in runs:
                for name in ("jaxsci direct", "jaxsci augmented", "jaxsci direct poly3",
                             "jaxsci augm. poly3"):
                    if name in runs:
                        print(f"{'':17s} time ratio SFI / {name}: "
                              f"{runs['SFI poly3'] / runs[name]:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default="double_well,van_der_pol")
    ap.add_argument("--taus", default="0.1,2")
    ap.add_argument("--n-traj", type=int, default=C.n_traj)
    ap.add_argument("--n-obs", type=int, default=C.n_obs)
    ap.add_argument("--diffusion", type=float, default=C.diffusion)
    a = ap.parse_args()
    # the data layout and noise level (the quick config's by default)
    C = dataclasses.replace(C, n_traj=a.n_traj, n_obs=a.n_obs, diffusion=a.diffusion)
    main(tuple(a.systems.split(",")), tuple(float(t) for t in a.taus.split(",")))
