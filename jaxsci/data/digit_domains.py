r"""Visual domains of the 8x8 digits at graded distance: rotations, noise, inversion, strokes.

The images are scikit-learn's 1797 handwritten digits (``sklearn.datasets.load_digits``,
offline), scaled to ``[0, 1]``. A domain is a named, deterministic-given-``seed`` chain of
pixel transforms applied to every image:

* ``rot<deg>``: rotation by ``deg`` degrees about the centre (bilinear,
  ``scipy.ndimage.rotate``, shape kept);
* ``noise<pct>``: additive Gaussian noise of standard deviation ``pct / 100``, clipped;
* ``invert``: ``1 - x`` (white digits become dark on a white ground);
* ``thick`` / ``thin``: grey dilation / erosion with a 2x2 window (stroke thickness);
* ``clean``: the identity.

A domain's name joins its transforms with ``+`` (``"invert+noise20"``), so the
similarity of two domains is graded by how many transforms they share.

>>> from jaxsci.data import digit_domains as dd
>>> x, y = dd.digits()
>>> x.shape, float(x.max()), y[:3].tolist()
((1797, 64), 1.0, [0, 1, 2])
>>> dd.domain(x[:2], "invert+thick", seed=0).shape
(2, 64)
"""

from __future__ import annotations

import functools
import re

import numpy as np

from jaxsci.core.validation import check_array

__all__ = ["CAPTION", "DIGITS", "digits", "domain", "captions", "parse"]

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CAPTION = "a photo of the digit {}"

_OPS = re.compile(r"^(clean|invert|thick|thin|rot-?\d+|noise\d+)$")


@functools.lru_cache(maxsize=1)
def _load() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits: images ``(1797, 64)`` in ``[0, 1]`` and labels ``(1797,)``."""
    x, y = _load()
    return x.copy(), y.copy()


def captions() -> list[str]:
    """The ten class captions, ``"a photo of the digit zero"`` .. ``"... nine"``."""
    return [CAPTION.format(d) for d in DIGITS]


def parse(name: str) -> tuple[str, ...]:
    """The transforms of a domain name; a clear error for an unknown one."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"domain name must be a non-empty str, got {name!r}")
    ops = tuple(name.split("+"))
    for op in ops:
        if not _OPS.match(op):
            raise ValueError(f"unknown transform {op!r} in domain {name!r}; expected clean, "
                             "invert, thick, thin, rot<deg> or noise<percent>")
    return ops


def domain(images, name: str, *, seed: int = 0) -> np.ndarray:
    """Apply the domain ``name``'s transforms to ``images`` ``(n, 64)`` in ``[0, 1]``.

    Args:
      images: ``(n, 64)`` float images (8x8, row-major).
      name: the domain, transforms joined by ``+`` (module docstring).
      seed: the noise's seed (the only random transform).

    Returns:
      ``(n, 64)`` float32 images in ``[0, 1]``.
    """
    from scipy import ndimage

    check_array("images", images, ndim=2, shape=(None, 64), dtype="floating")
    ops = parse(name)
    x = np.asarray(images, np.float32).reshape(-1, 8, 8)
    rng = np.random.default_rng(seed)
    for op in ops:
        if op == "invert":
            x = 1.0 - x
        elif op == "thick":
            x = ndimage.grey_dilation(x, size=(1, 2, 2))
        elif op == "thin":
            x = ndimage.grey_erosion(x, size=(1, 2, 2))
        elif op.startswith("rot"):
            x = ndimage.rotate(x, float(op[3:]), axes=(1, 2), reshape=False, order=1,
                               mode="constant", cval=0.0)
        elif op.startswith("noise"):
            x = x + rng.normal(0.0, int(op[5:]) / 100.0, x.shape)
        x = np.clip(x, 0.0, 1.0)
    return x.reshape(-1, 64).astype(np.float32)
