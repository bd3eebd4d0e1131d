"""jaxsci: JAX implementations of recent scientific machine-learning papers."""

__version__ = "0.1.0"
