"""Linear-system solvers: Krylov/AMG baselines and learned solvers.

* :mod:`jaxsci.solvers.krylov` — the baselines at one stopping rule: jax.scipy CG/GMRES,
  lineax, scipy CG/GMRES/BiCGStab and pyamg smoothed aggregation.
* :mod:`jaxsci.solvers.grans` — G-RANS, the residual-aware neural subspace-correction solver.

The FEM problems they are measured on live in the data layer, :mod:`jaxsci.data.fem`.
"""
