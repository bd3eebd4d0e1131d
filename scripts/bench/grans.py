"""Time to relative residual 1e-5: G-RANS (stand-alone and FGMRES hybrid) vs Krylov and AMG.

Same systems, same stopping rule, one process, after warm-up (JAX compile excluded),
best of 3. scipy and pyamg run with BLAS pinned to one thread (threadpoolctl) and with
the default threads; the faster counts. Per-matrix setup (G-RANS graph, AMG hierarchy)
is inside the solve time; training is not (printed separately).

    python scripts/bench/grans.py            # or: jaxsci bench grans
"""

from __future__ import annotations

import dataclasses
import platform
import tempfile

import jax

from jaxsci.core import run_experiment
from jaxsci.experiments import grans as exp
from jaxsci.solvers import krylov


def main() -> None:
    cfg = dataclasses.replace(
        exp.CONFIGS["quick"],
        test_equations=("poisson", "reaction_diffusion", "helmholtz", "advection_diffusion"),
        test_sizes=(65,),  # 3969 unknowns
        shifts=(),
        operator_steps=1,
        repeats=3,
        baselines=krylov.SOLVERS,
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
