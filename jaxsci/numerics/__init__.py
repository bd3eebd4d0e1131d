"""Numerical building blocks as methods: fast approximations of elementary functions and
activations (bit-level float tricks), swept and differentiated like the rest."""

from jaxsci.numerics import ffcc

__all__ = ["ffcc"]
