"""jaxsci: JAX implementations of recent scientific machine-learning papers."""

__version__ = "0.1.0"

# jaxlib 0.10's batched CPU LAPACK calls can deadlock XLA's thread pool; see
# jaxsci/core/cpu_lapack.py for what this does and how to turn it off.
from jaxsci.core import cpu_lapack  # noqa: E402

cpu_lapack.install()
