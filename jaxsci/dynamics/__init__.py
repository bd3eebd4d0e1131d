"""Dynamical-system papers as pure-functional JAX (equinox modules as pytrees)."""
