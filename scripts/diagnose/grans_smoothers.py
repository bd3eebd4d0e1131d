"""Spectral radius of the Jacobi error propagators on the grans quick config's test
matrices (dense eigenvalues), and the sign of each matrix's eigenvalues.

    python scripts/diagnose/grans_smoothers.py

Weighted Jacobi ``I - omega D^{-1} A`` (omega = 2/3) against l1-Jacobi
``I - D_l1^{-1} A``: the numbers behind docs/grans.md's diagnosis of the +70% cases
(same matrices as ``jaxsci reproduce grans --quick``).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxsci.data import fem
from jaxsci.experiments import grans as exp
from jaxsci.solvers import grans as gr


def main() -> None:
    cfg = exp.CONFIGS["quick"]
    omega = gr.Jacobi().omega  # the weighted-Jacobi default (2/3)
    k_test = jax.random.split(jax.random.key(0), 4)[3]
    print(f"{'case':34s} {'rho(jacobi)':>11s} {'rho(l1)':>8s} {'min a_ii':>9s} "
          f"{'neg. eig':>8s} {'min |eig|':>9s}")
    for ci, (eq, shift, size) in enumerate(exp.cases(cfg)):
        prob = fem.assemble(jax.random.fold_in(k_test, ci), eq, size=size, shift=shift)
        A = prob.matrix.toarray()
        d = np.diag(A)
        l1 = np.abs(A).sum(1)
        eye = np.eye(A.shape[0])
        rho_j = np.max(np.abs(np.linalg.eigvals(eye - omega * A / d[:, None])))
        rho_l1 = np.max(np.abs(np.linalg.eigvals(eye - A / l1[:, None])))
        ev = np.linalg.eigvals(A)
        print(f"{eq + f'/{shift:+.2f}/n{prob.n}':34s} {rho_j:11.3f} {rho_l1:8.3f} "
              f"{d.min():9.3f} {int(np.sum(ev.real < 0)):8d} {np.min(np.abs(ev)):9.2e}")


if __name__ == "__main__":
    main()
