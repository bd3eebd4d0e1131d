"""Linear-system machinery: P1 FEM assembly (scikit-fem), Krylov/AMG baselines, learned solvers.

* :mod:`jaxsci.solvers.fem` — random elliptic FEM problems (Poisson, advection-diffusion,
  reaction-diffusion, Helmholtz) assembled with scikit-fem and turned into JAX ``BCOO``.
* :mod:`jaxsci.solvers.krylov` — the baselines at one stopping rule: jax.scipy CG/GMRES,
  lineax, scipy CG/GMRES/BiCGStab and pyamg smoothed aggregation.
* :mod:`jaxsci.solvers.grans` — G-RANS, the residual-aware neural subspace-correction solver.
"""
