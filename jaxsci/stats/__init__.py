"""Statistics and theory methods: small-matrix and simulation methods swept with ``vmap``."""

from jaxsci.stats import bandits, ggm, lagrangian

__all__ = ["bandits", "ggm", "lagrangian"]
