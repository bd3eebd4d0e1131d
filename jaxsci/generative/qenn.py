r"""TrustworthyQENN: complex-valued contrastive learning with quantum evidence for OOD.

Paper: "Trustworthy quantum evidence neural network" (ICML 2026; only its abstract was
available). A sample is classified into one of ``K`` in-distribution (ID) classes or
flagged out-of-distribution (OOD). The abstract names three parts: supervised
complex-valued contrastive learning (SCVCL) that "synchronises amplitude distributions
with phase correlations", quantum evidence from generalised quantum evidence theory
(GQET) with the OOD state as the *quantum empty set*, and multi-view fusion by the
generalised quantum evidential combination rule (GQECR). The precise forms below are
ours.

The method, as formalised here
------------------------------
**Encoder.** Complex dense layers ``h <- sigma(W h + b)`` (``W, b`` complex) with
``sigma`` = modReLU, ``sigma(z) = relu(|z| + beta) z / |z|`` (a learnt real ``beta``
per unit; phase kept) or CReLU, ``relu(Re z) + i relu(Im z)``
(:class:`EncoderConfig.activation`), a last dense layer to ``C^D``, and

    (1)  psi = h / ||h||                       (a normalised state in C^D).

**SCVCL.** For a batch ``psi_1..psi_B`` with labels ``y``, positives ``P(i) = {j != i:
y_j = y_i}``, and a similarity matrix ``S``, the supervised contrastive loss is

    (2)  SupCon(S; tau) = mean_{i: |P(i)| > 0} -1/|P(i)| sum_{p in P(i)}
                          log( exp(S_ip / tau) / sum_{a != i} exp(S_ia / tau) ).

SCVCL uses the *phase-sensitive* similarity ``S^ph_ij = Re <psi_i, psi_j>`` (the real
part of the Hermitian inner product: equal to one only when the states agree in
amplitude *and* phase) and an amplitude-distribution term over the Bhattacharyya
coefficient of the two amplitude distributions ``|psi_i|^2``, ``|psi_j|^2``,
``S^amp_ij = sum_c |psi_ic| |psi_jc|`` (the fidelity of the phase-stripped states):

    (3)  L_SCVCL = SupCon(S^ph; tau) + lambda_amp SupCon(S^amp; tau).

**Quantum evidence (GQET).** ``K <= D`` class states ``|k>`` are the orthonormal
columns of ``Q`` in ``V = Q R`` (QR with ``R``'s diagonal real positive, by CholeskyQR2: a
unique, smooth parametrisation; :func:`orthonormalize`) for a free complex
``V in C^{D x K}``, ``P = Q Q^H`` the projector on their span:

    (4)  m({k}) = |<k|psi>|^2,   m(empty) = ||(I - P) psi||^2,

so ``sum_k m({k}) + m(empty) = ||psi||^2 = 1`` (Pythagoras). ``m(empty)`` is the mass of
the quantum empty set: the part of the state outside every ID class, the OOD score.

*n copies* (``copies``, traced, default 1 = (4)). A state in the span of the class
states but *between* them (a superposition ``a|3> + b|5>``, what an unseen class tends
to become after training on the ID classes only) has ``m(empty) = 0`` under (4). The
same projective measurement on ``n`` copies, ``psi^{(x)n}`` against the class states
``|k>^{(x)n}``, gives

    (4n) m({k}) = |<k|psi>|^{2n},   m(empty) = ||(I - P) psi||^2 + sum_k (p_k - p_k^n),

``p_k = |<k|psi>|^2``: the probability that the copies leave the span or disagree. It is
(4) in the ``n``-copy Hilbert space (still summing to 1), equals (4) at ``n = 1``, and
puts superpositions on the empty set. Real ``n >= 1`` interpolates.

Training adds the evidence loss ``L_ev = -mean_i log m_i({y_i})``:

    (5)  L = L_SCVCL + lambda_ev L_ev.

**GQECR.** Masses live on the singletons and the empty set (vectors ``(K + 1,)``, the
empty set last). Deng's generalised combination rule for an open world, with the
conflict ``kappa = sum_{B cap C = empty} m1(B) m2(C) = 1 - sum_k m1(k) m2(k)``:

    (6)  m(empty) = m1(empty) m2(empty),
         m({k})   = (1 - m(empty)) m1(k) m2(k) / (1 - kappa)      (kappa < 1),
         m(empty) = 1                                            (kappa = 1).

With ``m1(empty) = m2(empty) = 0`` this is Dempster's rule (:func:`dempster`; tested).
The rule is commutative and, on this family, associative, so ``V`` views fold
(:func:`fuse`). Here the views are two encoders of the same sample: the *amplitude*
view sees ``|x|`` (phase dropped) and the *phase* view the complex ``x`` (amplitude and
phase); each has its own class states. The fused ``m(empty)`` is the OOD score and
``argmax_k m({k})`` the ID prediction.

Baselines (same training loop): a real MLP classifier with maximum softmax probability
(:func:`msp_score`), energy (:func:`energy_score`) and Mahalanobis on its features
(:func:`mahalanobis_fit`, :func:`mahalanobis_score`); an evidential Dirichlet network
(:func:`dirichlet_loss`, :func:`dirichlet_uncertainty`); real-valued SupCon
(:func:`supcon_loss` over cosine similarities, a linear head on the stopped features);
each single view (no fusion). Every OOD score here is "higher = more OOD";
:func:`auroc` reads it so.

Complex gradients. JAX's ``grad`` of a real loss ``L`` in a complex parameter ``w``
returns ``dL/dx - i dL/dy = 2 dL/dw`` (the *conjugate* of the steepest-ascent direction
``2 dL/d conj(w)``, PyTorch's convention); optax steps along what it is given, so
:func:`train_step` conjugates complex gradients first (``grad(|w - c|^2) = 2 conj(w -
c)``: tested, with the divergence that the unconjugated step shows).

Choices where the abstract leaves the method open (each a field): the similarity forms
(3); ``tau = 0.1`` (SupCon's usual value), ``lambda_amp = 0.5``, ``lambda_ev = 1``
(:class:`LossConfig`); modReLU, one hidden layer of 128, ``D = 32``
(:class:`EncoderConfig`); QR (CholeskyQR2) for orthonormality; masses on singletons and
the empty set only; ``n`` copies in (4n) (1 here, 2 in the experiment); the two views
above; Adam, 400 steps of batches of 256 (:class:`TrainConfig`; the experiment uses 300
of 128).

API
---
Flax NNX modules :class:`ComplexDense`, :class:`ComplexEncoder`, :class:`ClassStates`,
:class:`QENN`, :class:`RealMLP`; pure functions (jittable, vmappable) for the states,
masses, rules, losses and scores; :func:`train_init` / :func:`train_step` /
:func:`train` (a ``lax.scan`` driver, vmappable over keys: seeds train in one program)
over an ``nnx.split`` module. ``tau``, ``lambda_amp``, ``lambda_ev``, ``copies`` and the
KL weight are traced arguments; a :class:`TrainConfig` (steps, batch size, learning
rate) is static in the compiled loop.

>>> import jax, jax.numpy as jnp
>>> from jaxsci.generative import qenn
>>> m1 = jnp.array([0.6, 0.2, 0.2]); m2 = jnp.array([0.5, 0.1, 0.4])  # K = 2, empty last
>>> [round(float(v), 4) for v in qenn.gqecr(m1, m2)]
[0.8625, 0.0575, 0.08]
>>> p1, p2 = jnp.array([0.8, 0.2]), jnp.array([0.9, 0.1])  # no empty mass: Dempster
>>> bool(jnp.allclose(qenn.gqecr(jnp.append(p1, 0.0), jnp.append(p2, 0.0))[:2],
...                   qenn.dempster(p1, p2)))
True
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from jaxsci.core.validation import check_choice, check_int, check_key, check_scalar

__all__ = [
    "ACTIVATIONS",
    "EncoderConfig",
    "LossConfig",
    "TrainConfig",
    "modrelu",
    "crelu",
    "normalize_state",
    "orthonormalize",
    "ComplexDense",
    "ComplexEncoder",
    "ClassStates",
    "QENN",
    "RealMLP",
    "quantum_masses",
    "gqecr",
    "dempster",
    "fuse",
    "phase_similarity",
    "amplitude_similarity",
    "cosine_similarity",
    "supcon_loss",
    "scvcl_loss",
    "evidence_loss",
    "qenn_loss",
    "amplitude_phase_views",
    "msp_score",
    "energy_score",
    "mahalanobis_fit",
    "mahalanobis_score",
    "dirichlet_loss",
    "dirichlet_uncertainty",
    "auroc",
    "TrainState",
    "train_init",
    "train_step",
    "train",
]

ACTIVATIONS = ("modrelu", "crelu")
NORM_TOL = 1e-3  # float32 round-off of ||psi|| is ~1e-7; anything past 1e-3 is a bug


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


# --------------------------------------------------------------------------- configs


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """The complex encoder: hidden widths, state dimension ``D``, activation."""

    hidden: tuple[int, ...] = (128,)
    dim: int = 32  # D, the Hilbert space of the states (our choice)
    activation: str = "modrelu"  # modrelu | crelu

    def __post_init__(self):
        for h in self.hidden:
            check_int("hidden[i]", h, min=1)
        check_int("dim", self.dim, min=2)
        check_choice("activation", self.activation, ACTIVATIONS)


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Weights of (3) and (5). ``temperature``: SupCon's usual 0.1; the rest ours."""

    temperature: float = 0.1
    amp_weight: float = 0.5  # lambda_amp in (3)
    evidence_weight: float = 1.0  # lambda_ev in (5)

    def __post_init__(self):
        check_scalar("temperature", self.temperature, gt=0.0)
        check_scalar("amp_weight", self.amp_weight, ge=0.0)
        check_scalar("evidence_weight", self.evidence_weight, ge=0.0)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Adam with a cosine-decayed rate, ``steps`` batches of ``batch_size``."""

    steps: int = 400
    batch_size: int = 256
    learning_rate: float = 3e-3

    def __post_init__(self):
        check_int("steps", self.steps, min=1)
        check_int("batch_size", self.batch_size, min=2)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)


# --------------------------------------------------------------------------- layers


@jax.jit
def modrelu(z: Complex[Array, "..."], bias: Float[Array, "..."]) -> Complex[Array, "..."]:
    """``relu(|z| + bias) z / |z|`` (0 at ``z = 0``, with a finite gradient there)."""
    r2 = jnp.real(z) ** 2 + jnp.imag(z) ** 2
    safe = jnp.sqrt(jnp.where(r2 > 0, r2, 1.0))
    scale = jnp.where(r2 > 0, jax.nn.relu(safe + bias) / safe, 0.0)
    return z * scale.astype(z.dtype)


@jax.jit
def crelu(z: Complex[Array, "..."]) -> Complex[Array, "..."]:
    """``relu(Re z) + i relu(Im z)``."""
    return jax.lax.complex(jax.nn.relu(jnp.real(z)), jax.nn.relu(jnp.imag(z)))


@jax.jit
def normalize_state(h: Complex[Array, "... d"]) -> Complex[Array, "... d"]:
    """(1): ``h / ||h||`` along the last axis (a tiny floor keeps ``h = 0`` finite)."""
    n2 = jnp.sum(jnp.real(h) ** 2 + jnp.imag(h) ** 2, -1, keepdims=True)
    return h * jax.lax.rsqrt(jnp.maximum(n2, 1e-12)).astype(h.dtype)


def _cholesky_qr(v):
    # V^H V = L L^H (L lower, real positive diagonal), Q = V L^{-H}: V = Q R with R = L^H.
    lower = jnp.linalg.cholesky(jnp.conj(v).T @ v)
    return jnp.conj(jax.scipy.linalg.solve_triangular(lower, jnp.conj(v).T, lower=True)).T


def orthonormalize(v: Complex[Array, "d k"]) -> Complex[Array, "d k"]:
    """The orthonormal columns ``Q`` of ``v = Q R`` with ``R``'s diagonal real positive
    (the QR factor, unique for full-rank ``v``; differentiable).

    Computed as CholeskyQR2 (Cholesky of the Gram matrix ``v^H v``, a triangular solve,
    then once more on the result), so ``Q^H Q = I`` to round-off for any reasonably
    conditioned ``v``; the second pass's ``R`` is ``I`` up to round-off and keeps the
    diagonal positive. Two small LAPACK calls: a fraction of Householder QR's compile
    time here, and ``jax.grad`` through both is exact."""
    if jnp.ndim(v) != 2 or v.shape[1] > v.shape[0]:
        raise ValueError(f"v must have shape (D, K) with K <= D, got {jnp.shape(v)}")
    return _orthonormalize(v)


@jax.jit
def _orthonormalize(v):
    return _cholesky_qr(_cholesky_qr(v))


def _complex_init(key, shape, fan_in, dtype=jnp.complex64):
    # One complex normal draw (real and imaginary parts of variance 1/2): E|w|^2 = 1/fan_in.
    return (jax.random.normal(key, shape, dtype) / np.sqrt(fan_in)).astype(dtype)


class ComplexDense(nnx.Module):
    """``y = x W + b`` with complex ``W (d_in, d_out)``, ``b (d_out,)``."""

    def __init__(self, d_in: int, d_out: int, *, rngs: nnx.Rngs):
        self.kernel = nnx.Param(_complex_init(rngs.params(), (d_in, d_out), d_in))
        self.bias = nnx.Param(jnp.zeros((d_out,), jnp.complex64))

    def __call__(self, x):
        return x @ self.kernel[...] + self.bias[...]


class ComplexEncoder(nnx.Module):
    """Complex dense layers with modReLU or CReLU, then (1): ``x (..., d_in) -> psi``."""

    def __init__(self, d_in: int, config: EncoderConfig, *, rngs: nnx.Rngs):
        sizes = (d_in, *config.hidden)
        self.activation = config.activation
        self.layers = nnx.List([ComplexDense(a, b, rngs=rngs)
                                for a, b in zip(sizes[:-1], sizes[1:], strict=True)])
        self.biases = nnx.List([nnx.Param(jnp.zeros((b,), jnp.float32))
                                for b in config.hidden])  # modReLU's beta (unused by CReLU)
        self.out = ComplexDense(sizes[-1], config.dim, rngs=rngs)

    def __call__(self, x):
        h = x.astype(jnp.complex64)
        for layer, beta in zip(self.layers, self.biases, strict=True):
            h = layer(h)
            h = modrelu(h, beta[...]) if self.activation == "modrelu" else crelu(h)
        return normalize_state(self.out(h))


class ClassStates(nnx.Module):
    """``K`` orthonormal class states in ``C^D``: ``orthonormalize(V)`` of a free ``V``."""

    def __init__(self, dim: int, num_classes: int, *, rngs: nnx.Rngs):
        dim = check_int("dim", dim, min=2)
        num_classes = check_int("num_classes", num_classes, min=2, max=dim)
        self.raw = nnx.Param(_complex_init(rngs.params(), (dim, num_classes), 1))

    def __call__(self):
        return orthonormalize(self.raw[...])


class QENN(nnx.Module):
    """One view's encoder and class states: ``psi = model(x)``, ``model.masses(x)``."""

    def __init__(self, d_in: int, num_classes: int, config: EncoderConfig = EncoderConfig(),
                 *, rngs: nnx.Rngs):
        d_in = check_int("d_in", d_in, min=1)
        if not isinstance(config, EncoderConfig):
            raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
        self.encoder = ComplexEncoder(d_in, config, rngs=rngs)
        self.states = ClassStates(config.dim, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.encoder(x)

    def masses(self, x, copies=1.0):
        """(4n) for inputs ``x (..., d_in)``: ``(..., K + 1)``, the empty set last."""
        return _masses(self.encoder(x), self.states(), copies)


class RealMLP(nnx.Module):
    """A real MLP for the baselines: ``features(x)`` (the last hidden layer) and
    ``__call__(x) -> logits`` (a linear head on the features)."""

    def __init__(self, d_in: int, num_outputs: int, hidden: tuple[int, ...] = (128,),
                 dim: int = 32, *, rngs: nnx.Rngs):
        sizes = (d_in, *hidden, dim)
        init = nnx.initializers.variance_scaling(1.0, "fan_in", "normal")  # untruncated
        self.layers = nnx.List([nnx.Linear(a, b, kernel_init=init, rngs=rngs)
                                for a, b in zip(sizes[:-1], sizes[1:], strict=True)])
        self.head = nnx.Linear(dim, num_outputs, kernel_init=init, rngs=rngs)

    def features(self, x):
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = jax.nn.relu(h)
        return h

    def __call__(self, x):
        return self.head(jax.nn.relu(self.features(x)))


# --------------------------------------------------------------------------- evidence


def _norm2(z):
    return jnp.sum(jnp.real(z) ** 2 + jnp.imag(z) ** 2, -1)


@jax.jit
def _masses(psi, states, copies=1.0):
    amp = psi @ jnp.conj(states)  # <k|psi> = sum_c conj(Q_ck) psi_c
    prob = jnp.real(amp) ** 2 + jnp.imag(amp) ** 2
    resid = _norm2(psi - amp @ states.T)  # ||(I - P) psi||^2, P = Q Q^H
    # n copies: m({k}) = p_k^n; the rest, ||(I - P) psi||^2 + sum_k (p_k - p_k^n), is
    # empty (written so, not as 1 - sum, it is accurate when small and exact at n = 1).
    single = jnp.where(prob > 0, prob, 1.0) ** copies * (prob > 0)
    return jnp.concatenate([single, (resid + jnp.sum(prob - single, -1))[..., None]], -1)


def _as_complex(name, x):
    if not hasattr(x, "dtype"):
        x = np.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.complexfloating) or jnp.issubdtype(x.dtype, jnp.floating)):
        raise TypeError(f"{name} must be a complex (or real) array, got dtype {x.dtype}")
    x = jnp.asarray(x)
    # Keep complex128 / float64 precision when x64 is on (complex64 otherwise).
    return x.astype(jnp.result_type(x.dtype, jnp.complex64))


def quantum_masses(psi: Complex[ArrayLike, "... d"], states: Complex[ArrayLike, "d k"],
                   copies: float | Float[Array, ""] = 1.0) -> Float[Array, "... k1"]:
    """The quantum evidence (4) of normalised states on orthonormal class states.

    Args:
      psi: ``(..., D)`` states with ``||psi|| = 1`` (checked: eagerly a ``ValueError``,
        inside ``jit`` an ``equinox.error_if``; tolerance ``1e-3``).
      states: ``(D, K)`` orthonormal columns (``K <= D``; :func:`orthonormalize`).
      copies: ``n >= 1`` of (4n) (traced; 1 gives (4)).

    Returns:
      ``(..., K + 1)`` masses ``m({1})..m({K}), m(empty)``; they sum to ``||psi||^2 = 1``.
      ``m(empty) = ||(I - P) psi||^2`` is computed from the residual itself (not as
      ``1 - sum``), so it is accurate when small. Differentiable in both arguments.
    """
    psi, states = _as_complex("psi", psi), _as_complex("states", states)
    if psi.ndim < 1 or states.ndim != 2:
        raise ValueError(f"psi must be (..., D) and states (D, K), got shapes {psi.shape} "
                         f"and {states.shape}")
    if states.shape[0] != psi.shape[-1] or states.shape[1] > states.shape[0]:
        raise ValueError(f"states must have shape (D, K) with D = {psi.shape[-1]} (psi's last "
                         f"axis) and K <= D, got {states.shape}")
    if not _is_tracer(psi):  # NumPy: inside an outer trace, jnp ops on constants trace
        dev_np = np.abs(np.linalg.norm(np.asarray(psi), axis=-1) - 1.0)
        worst = float(np.max(dev_np)) if dev_np.size else 0.0
        if not np.isfinite(worst) or worst > NORM_TOL:
            raise ValueError(f"psi must be normalised (||psi|| = 1 along the last axis), got "
                             f"a deviation of {worst:.3g} (use normalize_state)")
    dev = jnp.abs(jnp.sqrt(_norm2(psi)) - 1.0)
    check_scalar("copies", copies, ge=1.0)
    psi = eqx.error_if(psi, jnp.any(~(dev <= NORM_TOL)), "psi must be normalised "
                       "(||psi|| = 1 along the last axis); use normalize_state")
    return _masses(psi, states, copies)


def _check_masses(name, m):
    m = jnp.asarray(m) if hasattr(m, "dtype") else jnp.asarray(np.asarray(m, np.float32))
    if m.ndim < 1 or m.shape[-1] < 2:
        raise ValueError(f"{name} must have a last axis of K + 1 >= 2 masses (the empty set "
                         f"last), got shape {m.shape}")
    if not jnp.issubdtype(m.dtype, jnp.floating):
        m = m.astype(jnp.float32)
    if not _is_tracer(m):
        a = np.asarray(m)
        bad_np = (np.any(a < -1e-6, -1) | (np.abs(a.sum(-1) - 1.0) > 1e-3)
                  | np.any(~np.isfinite(a), -1))
        if np.any(bad_np):
            raise ValueError(f"{name} must be mass vectors (finite, >= 0, summing to 1 along "
                             f"the last axis), got {int(np.sum(bad_np))} bad vector(s)")
    bad = (jnp.any(m < -1e-6, -1) | (jnp.abs(jnp.sum(m, -1) - 1.0) > 1e-3)
           | jnp.any(~jnp.isfinite(m), -1))
    return eqx.error_if(m, jnp.any(bad), f"{name} must be mass vectors (>= 0, summing to 1)")


@jax.jit
def _gqecr(m1, m2):
    e = m1[..., -1] * m2[..., -1]
    agree = m1[..., :-1] * m2[..., :-1]
    s = jnp.sum(agree, -1)  # 1 - kappa
    ok = s > 0
    single = jnp.where(ok[..., None], agree * ((1.0 - e) / jnp.where(ok, s, 1.0))[..., None],
                       0.0)
    return jnp.concatenate([single, jnp.where(ok, e, 1.0)[..., None]], -1)


def gqecr(m1: Float[ArrayLike, "... k1"], m2: Float[ArrayLike, "... k1"]
          ) -> Float[Array, "... k1"]:
    """The generalised (open-world) combination rule (6) of two mass vectors.

    Args:
      m1, m2: ``(..., K + 1)`` masses on ``{1}..{K}`` and the empty set (last), each
        summing to 1 (checked; ``equinox.error_if`` inside ``jit``); broadcastable.

    Returns:
      The combined ``(..., K + 1)`` masses (sum to 1). Total conflict (``kappa = 1``)
      gives all mass to the empty set. Equals :func:`dempster` when neither input has
      empty mass. Differentiable where ``kappa < 1``; vmappable.
    """
    m1, m2 = _check_masses("m1", m1), _check_masses("m2", m2)
    if m1.shape[-1] != m2.shape[-1]:
        raise ValueError(f"m1 and m2 must have the same number of masses, got {m1.shape[-1]} "
                         f"and {m2.shape[-1]}")
    return _gqecr(m1, m2)


def dempster(m1: Float[ArrayLike, "... k"], m2: Float[ArrayLike, "... k"]
             ) -> Float[Array, "... k"]:
    """Dempster's rule for Bayesian masses (singletons only): ``m1 m2 / sum(m1 m2)``;
    total conflict gives NaN (Dempster's rule is undefined there)."""
    m1 = jnp.asarray(m1, jnp.float32) if not hasattr(m1, "dtype") else m1
    m2 = jnp.asarray(m2, jnp.float32) if not hasattr(m2, "dtype") else m2
    p = m1 * m2
    return p / jnp.sum(p, -1, keepdims=True)


def fuse(masses: Float[ArrayLike, "v ... k1"]) -> Float[Array, "... k1"]:
    """Fold (6) over the leading (views) axis: ``gqecr(gqecr(m_1, m_2), m_3) ...``."""
    masses = _check_masses("masses", masses)
    if masses.ndim < 2:
        raise ValueError(f"masses must be (views, ..., K + 1), got shape {masses.shape}")
    out = masses[0]
    for v in range(1, masses.shape[0]):
        out = _gqecr(out, masses[v])
    return out


# --------------------------------------------------------------------------- losses


@jax.jit
def phase_similarity(psi: Complex[Array, "b d"]) -> Float[Array, "b b"]:
    """``Re <psi_i, psi_j>`` (phase-sensitive; 1 iff equal states for unit norms)."""
    return jnp.real(jnp.conj(psi) @ psi.T)


@jax.jit
def amplitude_similarity(psi: Complex[Array, "b d"]) -> Float[Array, "b b"]:
    """The Bhattacharyya coefficient ``sum_c |psi_ic| |psi_jc|`` of the amplitude
    distributions (phase-blind)."""
    a = jnp.sqrt(jnp.real(psi) ** 2 + jnp.imag(psi) ** 2 + 1e-12)
    return a @ a.T


@jax.jit
def cosine_similarity(f: Float[Array, "b d"]) -> Float[Array, "b b"]:
    """Cosine similarity of real features (real-valued SupCon's)."""
    g = f * jax.lax.rsqrt(jnp.maximum(jnp.sum(f * f, -1, keepdims=True), 1e-12))
    return g @ g.T


def supcon_loss(sim: Float[Array, "b b"], labels: Int[Array, " b"],
                temperature: float | Float[Array, ""] = 0.1) -> Float[Array, ""]:
    """(2): supervised contrastive loss of a similarity matrix (anchors without a
    positive are left out; 0 when no anchor has one). ``temperature`` is traced."""
    b = sim.shape[0]
    if sim.shape != (b, b) or jnp.shape(labels) != (b,):
        raise ValueError(f"sim must be (B, B) and labels (B,), got {sim.shape} and "
                         f"{jnp.shape(labels)}")
    return _supcon(sim, labels, temperature)


@jax.jit
def _supcon(sim, labels, temperature):
    b = sim.shape[0]
    eye = jnp.eye(b, dtype=bool)
    logits = jnp.where(eye, -jnp.inf, sim / temperature)
    logp = logits - jax.nn.logsumexp(logits, -1, keepdims=True)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    npos = jnp.sum(pos, -1)
    per = -jnp.sum(jnp.where(pos, logp, 0.0), -1) / jnp.maximum(npos, 1)
    has = npos > 0
    return jnp.sum(jnp.where(has, per, 0.0)) / jnp.maximum(jnp.sum(has), 1)


@jax.jit
def scvcl_loss(psi: Complex[Array, "b d"], labels: Int[Array, " b"],
               temperature: float | Float[Array, ""] = 0.1,
               amp_weight: float | Float[Array, ""] = 0.5) -> Float[Array, ""]:
    """(3): SupCon over ``Re <psi_i, psi_j>`` plus ``amp_weight`` times SupCon over the
    amplitude distributions' Bhattacharyya coefficients. Traced weights."""
    return (supcon_loss(phase_similarity(psi), labels, temperature)
            + amp_weight * supcon_loss(amplitude_similarity(psi), labels, temperature))


@jax.jit
def evidence_loss(masses: Float[Array, "b k1"], labels: Int[Array, " b"]) -> Float[Array, ""]:
    """``-mean log m({y})``: pulls each state onto its class state."""
    my = jnp.take_along_axis(masses, labels[:, None], -1)[:, 0]
    return -jnp.mean(jnp.log(my + 1e-6))


def qenn_loss(model: QENN, x: Complex[Array, "b d"], labels: Int[Array, " b"],
              temperature: float | Float[Array, ""] = 0.1,
              amp_weight: float | Float[Array, ""] = 0.5,
              evidence_weight: float | Float[Array, ""] = 1.0,
              copies: float | Float[Array, ""] = 1.0) -> Float[Array, ""]:
    """(5) for one view's model on a batch (the evidence of (4n) with ``copies``)."""
    psi = model(x)
    return (scvcl_loss(psi, labels, temperature, amp_weight)
            + evidence_weight * evidence_loss(_masses(psi, model.states(), copies), labels))


def amplitude_phase_views(x: Complex[ArrayLike, "... d"]) -> Complex[Array, "2 ... d"]:
    """The two views of a complex input: ``|x|`` (phase dropped) and ``x`` itself."""
    x = _as_complex("x", x)
    return jnp.stack([jnp.abs(x).astype(x.dtype), x])


# --------------------------------------------------------------------------- baselines


@jax.jit
def msp_score(logits: Float[Array, "... k"]) -> Float[Array, "..."]:
    """``-max softmax`` (higher = more OOD)."""
    return -jnp.max(jax.nn.softmax(logits, -1), -1)


@jax.jit
def energy_score(logits: Float[Array, "... k"], temperature: float | Float[Array, ""] = 1.0
                 ) -> Float[Array, "..."]:
    """The energy ``-T logsumexp(f / T)`` (Liu et al. 2020; higher = more OOD)."""
    return -temperature * jax.nn.logsumexp(logits / temperature, -1)


def mahalanobis_fit(features: Float[Array, "n f"], labels: Int[Array, " n"], num_classes: int,
                    ridge: float | Float[Array, ""] = 1e-3
                    ) -> tuple[Float[Array, "k f"], Float[Array, "f f"]]:
    """Class means and the shared (tied, maximum-likelihood) covariance's inverse
    (``ridge`` times the mean variance added to the diagonal). Lee et al. 2018."""
    num_classes = check_int("num_classes", num_classes, min=1)
    return _mahalanobis_fit(features, labels, num_classes, ridge)


@functools.partial(jax.jit, static_argnums=(2,))
def _mahalanobis_fit(features, labels, num_classes, ridge):
    onehot = jax.nn.one_hot(labels, num_classes, dtype=features.dtype)
    means = (onehot.T @ features) / jnp.maximum(onehot.sum(0), 1.0)[:, None]
    c = features - means[labels]
    cov = c.T @ c / features.shape[0]
    cov = cov + ridge * jnp.trace(cov) / cov.shape[0] * jnp.eye(cov.shape[0], dtype=cov.dtype)
    return means, jnp.linalg.inv(cov)


@jax.jit
def mahalanobis_score(features: Float[Array, "n f"], means: Float[Array, "k f"],
                      precision: Float[Array, "f f"]) -> Float[Array, " n"]:
    """``min_k (f - mu_k)' Sigma^-1 (f - mu_k)`` (higher = more OOD). Whitened once
    (``Sigma^-1 = L L'``): ``O(n f^2 + n k f)``, not ``O(n k f^2)``."""
    chol = jnp.linalg.cholesky(precision)
    w, m = features @ chol, means @ chol
    return jnp.min(jnp.sum((w[:, None, :] - m[None]) ** 2, -1), -1)


def _dirichlet_kl(alpha):
    k = alpha.shape[-1]
    s = jnp.sum(alpha, -1)
    return (jax.scipy.special.gammaln(s) - jax.scipy.special.gammaln(float(k))
            - jnp.sum(jax.scipy.special.gammaln(alpha), -1)
            + jnp.sum((alpha - 1.0) * (jax.scipy.special.digamma(alpha)
                                       - jax.scipy.special.digamma(s)[..., None]), -1))


@jax.jit
def dirichlet_loss(logits: Float[Array, "b k"], labels: Int[Array, " b"],
                   kl_weight: float | Float[Array, ""] = 1.0) -> Float[Array, ""]:
    """Sensoy et al. (2018)'s evidential loss: evidence ``e = softplus(logits)``,
    ``alpha = e + 1``, the expected squared error of ``p ~ Dir(alpha)`` plus
    ``kl_weight`` times ``KL(Dir(alpha~) || Dir(1))`` of the misleading evidence
    (``alpha~ = y + (1 - y) alpha``). ``kl_weight`` is traced (anneal it)."""
    k = logits.shape[-1]
    alpha = jax.nn.softplus(logits) + 1.0
    s = jnp.sum(alpha, -1, keepdims=True)
    p = alpha / s
    y = jax.nn.one_hot(labels, k, dtype=logits.dtype)
    mse = jnp.sum((y - p) ** 2 + p * (1 - p) / (s + 1.0), -1)
    kl = _dirichlet_kl(y + (1.0 - y) * alpha)
    return jnp.mean(mse + kl_weight * kl)


@jax.jit
def dirichlet_uncertainty(logits: Float[Array, "... k"]) -> Float[Array, "..."]:
    """``u = K / sum(alpha)`` of the evidential network (higher = more OOD)."""
    alpha = jax.nn.softplus(logits) + 1.0
    return logits.shape[-1] / jnp.sum(alpha, -1)


def auroc(score_id: Float[ArrayLike, " n"], score_ood: Float[ArrayLike, " m"]
          ) -> Float[Array, ""]:
    """``P(s_ood > s_id) + P(s_ood = s_id) / 2`` (the area under the ROC curve of
    "OOD = positive" for scores where higher means more OOD). ``O((n + m) log n)``
    by sorting; jittable, vmappable; piecewise constant (no useful gradient)."""
    a, b = jnp.asarray(score_id), jnp.asarray(score_ood)
    if a.ndim != 1 or b.ndim != 1 or a.size == 0 or b.size == 0:
        raise ValueError(f"score_id and score_ood must be non-empty 1-D arrays, got shapes "
                         f"{a.shape} and {b.shape}")
    return _auroc(a, b)


@jax.jit
def _auroc(a, b):
    a = jnp.sort(a)
    below = jnp.searchsorted(a, b, side="left")
    upto = jnp.searchsorted(a, b, side="right")
    return jnp.mean((below + upto) / 2.0) / a.shape[0]


# --------------------------------------------------------------------------- training


class TrainState(NamedTuple):
    params: Any  # the nnx.State of the module's parameters
    opt_state: Any
    key: jax.Array
    step: Int[Array, ""]


def _conj_complex(tree):
    # JAX's grad of a real loss in w = x + iy is dL/dx - i dL/dy; the descent
    # direction is its conjugate (see the module docstring).
    return jax.tree.map(lambda g: jnp.conj(g) if jnp.iscomplexobj(g) else g, tree)


def train_init(params: Any, optimizer: optax.GradientTransformation, key: jax.Array
               ) -> TrainState:
    """The state of :func:`train_step` for ``params`` (an ``nnx.State``)."""
    return TrainState(params, optimizer.init(params), key, jnp.zeros((), jnp.int32))


def train_step(state: TrainState, loss_fn: Callable[[Any, Any, Any, jax.Array], Array],
               optimizer: optax.GradientTransformation, x: Array, y: Array, batch_size: int
               ) -> tuple[TrainState, Float[Array, ""]]:
    """One step: a batch drawn without replacement, ``loss_fn(params, xb, yb, step)``'s
    gradient (complex leaves conjugated), one optimizer update."""
    key, kb = jax.random.split(state.key)
    idx = jax.random.choice(kb, x.shape[0], (batch_size,), replace=False)
    loss, g = jax.value_and_grad(loss_fn)(state.params, x[idx], y[idx], state.step)
    updates, opt = optimizer.update(_conj_complex(g), state.opt_state, state.params)
    return TrainState(optax.apply_updates(state.params, updates), opt, key,
                      state.step + 1), loss


def train(params: Any, loss_fn: Callable[[Any, Any, Any, jax.Array], Array],
          x: Array, y: Int[Array, " n"], key: jax.Array, config: TrainConfig = TrainConfig()
          ) -> tuple[Any, Float[Array, " steps"]]:
    """Minimise ``loss_fn(params, xb, yb, step)`` with Adam (cosine-decayed rate) over
    ``config.steps`` batches: one ``lax.scan``. Returns ``(params, losses)``.

    Jittable and vmappable over ``key`` / ``params`` (seeds train in one program); the
    loss must be finite (a NaN raises at the end, naming the first bad step, when the
    losses are concrete).
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    check_key("key", key)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    if config.batch_size > x.shape[0]:
        raise ValueError(f"batch_size ({config.batch_size}) must be <= the number of training "
                         f"samples ({x.shape[0]})")
    sched = optax.cosine_decay_schedule(config.learning_rate, config.steps, alpha=0.05)
    opt = optax.adam(sched)

    def body(st, _):
        return train_step(st, loss_fn, opt, x, y, config.batch_size)

    st, losses = jax.lax.scan(body, train_init(params, opt, key), None, length=config.steps)
    if not _is_tracer(losses):
        bad = np.flatnonzero(~np.isfinite(np.asarray(losses)))
        if bad.size:
            raise FloatingPointError(f"the training loss became {losses[bad[0]]} at step "
                                     f"{int(bad[0])}")
    return st.params, losses
