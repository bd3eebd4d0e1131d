r"""Small image data sets with complex-valued views and in-/out-of-distribution splits.

* :func:`digits_complex` -- the 8x8 handwritten digits bundled with scikit-learn
  (``sklearn.datasets.load_digits``, 1797 images, offline), split by class into
  in-distribution (ID) and out-of-distribution (OOD) classes. The complex input of an
  image ``I`` is its orthonormal 2-D FFT ``X = F I`` (64 complex numbers: amplitude and
  phase); the real input (for real-valued baselines) is the pixel image. Both are
  standardised with the ID training split's statistics (the complex one per frequency
  by its root-mean-square modulus, which keeps the phase).
* :func:`sar_like` -- a synthetic stand-in for single-look complex SAR chips (MSTAR,
  FUSAR-Ship are not available offline): each class is a rigid layout of point
  scatterers (positions, amplitudes and phases drawn once per class); a sample places
  the layout with a random sub-pixel shift, jitters each scatterer's phase
  (``phase_noise``, radians) and amplitude, images every scatterer through a separable
  sinc point-spread function and adds circular complex Gaussian clutter (``speckle``).
  The real input is the magnitude image ``|z|`` (what a magnitude-only detector sees).
* :func:`ood_split` -- the ID/OOD split of any labelled complex data set.

>>> import jax
>>> from jaxsci.data import vision
>>> d = vision.digits_complex(jax.random.key(0), id_classes=(0, 1, 2, 3, 4, 5))
>>> d.train.shape[1], d.train.dtype, d.num_classes
(64, dtype('complex64'), 6)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float, Int

from jaxsci.core.validation import check_int, check_key, check_scalar

__all__ = ["OODData", "digits_complex", "sar_like", "ood_split"]


class OODData(NamedTuple):
    """An ID/OOD split. ``train``/``test``/``ood``: complex inputs ``(n, d)``;
    ``*_real``: the real-valued inputs of the same samples (for real baselines);
    labels of the ID samples are ``0..num_classes-1`` (remapped), ``ood_labels`` keep
    the original class ids of the OOD samples."""

    train: Complex[Array, "n d"]
    train_labels: Int[Array, " n"]
    test: Complex[Array, "m d"]
    test_labels: Int[Array, " m"]
    ood: Complex[Array, "o d"]
    ood_labels: Int[Array, " o"]
    train_real: Float[Array, "n r"]
    test_real: Float[Array, "m r"]
    ood_real: Float[Array, "o r"]
    num_classes: int


def _check_classes(id_classes, n_classes):
    ids = tuple(int(c) for c in id_classes)
    if len(ids) < 2 or len(set(ids)) != len(ids):
        raise ValueError(f"id_classes must hold at least two distinct classes, got {ids}")
    if any(c < 0 or c >= n_classes for c in ids):
        raise ValueError(f"id_classes must be in [0, {n_classes}), got {ids}")
    if len(ids) == n_classes:
        raise ValueError("id_classes must leave at least one class out (the OOD classes)")
    return ids


def ood_split(key: jax.Array, x: np.ndarray, real: np.ndarray, labels: np.ndarray,
              id_classes: Sequence[int], test_fraction: float = 0.3,
              sizes: tuple[int, int, int] | None = None) -> OODData:
    """Split a labelled data set: the ``id_classes`` into train/test (a random
    ``test_fraction`` held out), every other class into the OOD set. Standardises the
    complex input per feature by the train split's RMS modulus (phase kept) and the
    real input per feature to zero mean, unit variance (train statistics).

    Args:
      key: the permutation of the ID samples.
      x: ``(n, d)`` complex inputs; ``real``: ``(n, r)`` real inputs; ``labels``: ``(n,)``.
      id_classes: the in-distribution classes (remapped to ``0..len-1`` in this order).
      test_fraction: the share of ID samples held out, in ``(0, 1)``.
      sizes: ``(n_train, n_test, n_ood)``: keep the first ones of each (random) split
        (equal shapes across data sets share compiled programs); default all.

    Returns:
      :class:`OODData`. Runs on the host (NumPy); not jittable.
    """
    check_key("key", key)
    check_scalar("test_fraction", test_fraction, gt=0.0, lt=1.0)
    x, real, labels = np.asarray(x), np.asarray(real, np.float32), np.asarray(labels)
    n = x.shape[0] if x.ndim else 0
    if x.ndim != 2 or real.ndim != 2 or labels.shape != (n,) or real.shape[0] != n:
        raise ValueError(f"x, real and labels must be (n, d), (n, r) and (n,), got {x.shape}, "
                         f"{real.shape} and {labels.shape}")
    ids = _check_classes(id_classes, int(labels.max()) + 1)
    is_id = np.isin(labels, ids)
    id_idx = np.flatnonzero(is_id)
    perm = np.asarray(jax.random.permutation(key, id_idx.size))
    id_idx = id_idx[perm]
    n_test = max(1, int(round(test_fraction * id_idx.size)))
    te, tr = id_idx[:n_test], id_idx[n_test:]
    ood = np.flatnonzero(~is_id)
    ood = ood[np.asarray(jax.random.permutation(jax.random.fold_in(key, 1), ood.size))]
    if sizes is not None:
        want = tuple(check_int("sizes[i]", s, min=1) for s in sizes)
        have = (tr.size, te.size, ood.size)
        if len(want) != 3 or any(w > h for w, h in zip(want, have, strict=True)):
            raise ValueError(f"sizes must be 3 counts <= the split's {have}, got {sizes}")
        tr, te, ood = tr[:want[0]], te[:want[1]], ood[:want[2]]
    remap = np.full(int(labels.max()) + 1, -1)
    remap[list(ids)] = np.arange(len(ids))
    scale = np.sqrt(np.mean(np.abs(x[tr]) ** 2, 0)) + 1e-6
    mu, sd = real[tr].mean(0), real[tr].std(0) + 1e-6

    def cz(a):
        return jnp.asarray((a / scale).astype(np.complex64))

    def rz(a):
        return jnp.asarray(((a - mu) / sd).astype(np.float32))

    return OODData(cz(x[tr]), jnp.asarray(remap[labels[tr]], jnp.int32), cz(x[te]),
                   jnp.asarray(remap[labels[te]], jnp.int32), cz(x[ood]),
                   jnp.asarray(labels[ood], jnp.int32), rz(real[tr]), rz(real[te]),
                   rz(real[ood]), len(ids))


def digits_complex(key: jax.Array, id_classes: Sequence[int] = (0, 1, 2, 3, 4, 5),
                   test_fraction: float = 0.3, sizes: tuple[int, int, int] | None = None
                   ) -> OODData:
    """The scikit-learn 8x8 digits with complex (2-D FFT) inputs, split by class.

    Args:
      key: the train/test permutation of the ID samples.
      id_classes: the ID digits (default 0-5; 6-9 are OOD).
      test_fraction: the share of ID samples held out.
      sizes: ``(n_train, n_test, n_ood)`` to keep (:func:`ood_split`).

    Returns:
      :class:`OODData` with ``d = 64`` complex inputs (``X = fft2(I / 16, norm="ortho")``,
      flattened) and 64 real inputs (the pixels).
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = digits.images.astype(np.float32) / 16.0
    spec = np.fft.fft2(img, norm="ortho").reshape(len(img), -1)
    return ood_split(key, spec, img.reshape(len(img), -1), digits.target, id_classes,
                     test_fraction, sizes)


def _sinc_psf(grid, pos, width):
    return jnp.sinc((grid[None, :] - pos[:, None]) / width)


def sar_like(key: jax.Array, n_classes: int = 10, n_per_class: int = 150, size: int = 12,
             scatterers: int = 6, phase_noise: float | Float[Array, ""] = 0.4,
             speckle: float | Float[Array, ""] = 0.3, jitter: float | Float[Array, ""] = 0.7,
             width: float | Float[Array, ""] = 1.0
             ) -> tuple[Complex[Array, "n p"], Int[Array, " n"]]:
    """Synthetic complex SAR-like chips of ``size x size`` pixels.

    Class ``c``'s layout (from ``fold_in(key, c)``): ``scatterers`` positions uniform in
    the central ``[size/4, 3 size/4]^2``, amplitudes ``U(0.5, 1.5)`` and phases
    ``U(0, 2 pi)``. Sample ``i`` of class ``c``: a common shift ``U(-jitter, jitter)^2``
    (pixels), phase ``phi_s + phase_noise * N(0, 1)``, amplitude ``a_s exp(0.2 N(0, 1))``,

        z(u, v) = sum_s a_s e^{i phi_s} sinc((u - u_s) / width) sinc((v - v_s) / width)
                  + speckle * (N(0, 1) + i N(0, 1)) / sqrt 2.

    Args:
      key: all randomness (layouts and samples).
      n_classes, n_per_class, size, scatterers: static sizes.
      phase_noise, speckle, jitter, width: traced (vmappable) numbers.

    Returns:
      ``(z, labels)``: ``(n_classes n_per_class, size^2)`` complex64 chips, class ids.
    """
    check_key("key", key)
    n_classes = check_int("n_classes", n_classes, min=2)
    n_per_class = check_int("n_per_class", n_per_class, min=1)
    size = check_int("size", size, min=4)
    scatterers = check_int("scatterers", scatterers, min=1)
    for name, v in (("phase_noise", phase_noise), ("speckle", speckle), ("jitter", jitter)):
        check_scalar(name, v, ge=0.0)
    check_scalar("width", width, gt=0.0)
    return _sar_like(key, n_classes, n_per_class, size, scatterers, phase_noise, speckle,
                     jitter, width)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _sar_like(key, n_classes, n_per_class, size, scatterers, phase_noise, speckle, jitter,
              width):
    grid = jnp.arange(size, dtype=jnp.float32)
    k_layout, k_samples = jax.random.split(key)

    def layout(c):
        k1, k2, k3 = jax.random.split(jax.random.fold_in(k_layout, c), 3)
        pos = jax.random.uniform(k1, (scatterers, 2), minval=size / 4, maxval=3 * size / 4)
        amp = jax.random.uniform(k2, (scatterers,), minval=0.5, maxval=1.5)
        ph = jax.random.uniform(k3, (scatterers,), maxval=2 * jnp.pi)
        return pos, amp, ph

    def sample(k, lay):
        pos, amp, ph = lay
        k1, k2, k3, k4 = jax.random.split(k, 4)
        p = pos + jax.random.uniform(k1, (2,), minval=-1.0, maxval=1.0) * jitter
        phi = ph + phase_noise * jax.random.normal(k2, ph.shape)
        a = amp * jnp.exp(0.2 * jax.random.normal(k3, amp.shape))
        coef = (a * jnp.exp(1j * phi)).astype(jnp.complex64)
        pu, pv = _sinc_psf(grid, p[:, 0], width), _sinc_psf(grid, p[:, 1], width)
        img = jnp.einsum("s,su,sv->uv", coef, pu.astype(jnp.complex64), pv.astype(jnp.complex64))
        noise = jax.random.normal(k4, (2, size, size))
        img = img + speckle * (noise[0] + 1j * noise[1]) / jnp.sqrt(2.0)
        return img.reshape(-1).astype(jnp.complex64)

    layouts = jax.vmap(layout)(jnp.arange(n_classes))
    keys = jax.random.split(k_samples, n_classes * n_per_class).reshape(n_classes, n_per_class)
    z = jax.vmap(lambda ks, lay: jax.vmap(lambda k: sample(k, lay))(ks))(keys, layouts)
    labels = jnp.repeat(jnp.arange(n_classes, dtype=jnp.int32), n_per_class)
    return z.reshape(n_classes * n_per_class, size * size), labels
