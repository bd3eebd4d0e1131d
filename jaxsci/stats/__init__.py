"""Statistics and theory methods: small-matrix and simulation methods swept with ``vmap``."""

from jaxsci.stats import auctions, bandits, ggm, lagrangian, streaming_ate, topology

__all__ = ["auctions", "bandits", "ggm", "lagrangian", "streaming_ate", "topology"]
