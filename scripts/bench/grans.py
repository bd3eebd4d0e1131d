"""Time to relative residual 1e-5: G-RANS (stand-alone and FGMRES hybrid) vs Krylov and AMG.

Same systems, same stopping rule, one process, after warm-up (JAX compile excluded),
best of 3. scipy and pyamg run with BLAS pinned to one thread (threadpoolctl) and with
the default threads; the faster counts. Per-matrix setup (G-RANS graph, AMG hierarchy)
is inside the solve time; training is not (printed separately).

    python scripts/bench/grans.py            # or: jaxsci bench grans
    python scripts/bench/grans.py --sizes 129 --equations poisson,helmholtz --repeats 1 \
        --baselines scipy_cg,scipy_bicgstab,jax_cg,amg_pcg   # 16129 unknowns
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile

import jax

from jaxsci.core import run_experiment
from jaxsci.experiments import grans as exp
from jaxsci.solvers import krylov


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="65", help="mesh points per side (65: 3969 unknowns)")
    p.add_argument("--equations",
                   default="poisson,reaction_diffusion,helmholtz,advection_diffusion")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baselines", default=",".join(krylov.SOLVERS),
                   help="Krylov/AMG solvers to compare (restarted GMRES is slow at 65k)")
    args = p.parse_args()
    cfg = dataclasses.replace(
        exp.CONFIGS["quick"],
        test_equations=tuple(args.equations.split(",")),
        test_sizes=tuple(int(v) for v in args.sizes.split(",")),
        shifts=(),
        operator_steps=1,
        repeats=args.repeats,
        baselines=tuple(args.baselines.split(",")),
    )
    with tempfile.TemporaryDirectory() as out:
        m = run_experiment(exp.EXPERIMENT, cfg, out, progress=True).metrics
    print(f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} "
          f"JAX device(s) ({jax.devices()[0].platform}); train {m['train_seconds']:.1f} s")
    print(f"{'case':38s} {'solver':16s} {'rel.res':>8s} {'iters':>6s} {'seconds':>9s} "
          f"{'t/t_grans_fgmres':>16s}")
    for name, case in m["cases"].items():
        ref = case["grans_fgmres"]["solve_seconds"]
        for label, r in case.items():
            if label in ("meta", "neural_operator"):
                continue
            print(f"{name:38s} {label:16s} {r['final_rel_residual']:8.1e} "
                  f"{r['iterations']:6d} {r['solve_seconds']:9.4f} "
                  f"{r['solve_seconds'] / ref:16.2f}")


if __name__ == "__main__":
    main()
