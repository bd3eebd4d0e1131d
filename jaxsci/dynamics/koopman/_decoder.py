r"""Resolution-free function decoder: latent ``z`` + any query coordinates -> field values.

MERLIN (Lu, Ma, Lin, Zhu, ICML 2026), Sec. "function decoders": a multiplicative
filter network (FourierNet, Fathony et al., ICLR 2021) whose every layer is
modulated by the latent observable ``z``:

    g_l(x)  = [sin(W_l x), cos(W_l x)]                        (Fourier filters)
    h_0(x)  = g_0(x) * (B_0 z + c_0)
    h_l(x)  = g_l(x) * (A_l h_{l-1}(x) + B_l z + c_l),   l = 1..L
    u(x)    = W_out h_L(x) + b_out

A product of sines of linear maps of ``x`` is a sum of sines whose frequencies are
sums of the filters' frequencies, so depth ``L`` reaches ``L + 1`` times the
filters' bandwidth. The map ``x -> u(x)`` is defined at every point of the domain:
the decoder is queried at any set of coordinates (a finer grid than the training
one, scattered sensors), which is the paper's "arbitrary resolution" claim. The
modulation ``B_l z + c_l`` is computed once per latent, so a query point costs
``L`` products with an ``hidden x hidden`` matrix.

Initialisation follows the authors' FourierNet: filter weights uniform in
``+-1/sqrt(dx)`` times ``input_scale / sqrt(L + 1)`` (coordinates in ``[0, 1)``;
the authors use ``input_scale = 64`` for Navier-Stokes and 128 for the wave set,
on ``[-1, 1]``-scaled grids), linear weights uniform in ``+-1/sqrt(fan_in)``.
The authors add a small zero-initialised MLP of ``z`` to each modulation
(``DecoderConfig.mod_hidden > 0``: ``B_l z + c_l + M_l swish(P_l LN(z) + d_l)``, ``M_l``
zero at initialisation); by default it is left out (a linear modulation is the
MFN's own form).
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar
from jaxsci.dynamics.koopman._encoder import lattice_frequencies

__all__ = ["DecoderConfig", "FunctionDecoder"]


def _uniform(key: jax.Array, shape: tuple[int, ...], bound: float) -> jax.Array:
    # The default float dtype (float32, or float64 under jax_enable_x64).
    return jax.random.uniform(key, shape, minval=-bound, maxval=bound)


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Sizes of a :class:`FunctionDecoder` (the one place their defaults live).

    Attributes:
      hidden: feature width (even: sin and cos halves; authors: 128 for NS).
      n_layers: ``L``, the number of modulated multiplicative layers after the
        first (authors: 3 in config, 4 in the NS demo).
      input_scale: bandwidth of the Fourier filters (see module docstring; authors:
        64 for NS on ``[-1, 1]`` grids).
      mod_hidden: hidden width of the authors' nonlinear modulation MLP of ``z``
        (module docstring; authors: ``2 * latent_dim``); 0 (default) leaves it out.
      basis: ``m > 0`` adds a linear function-decoder path (ours), the counterpart
        of :class:`EncoderConfig`'s ``basis``: ``u(x) += [cos, sin](2 pi f_k . x) W z``
        at ``m`` learned frequencies initialised at the lowest Fourier modes of the
        unit torus (``lattice_frequencies``), ``W`` zero at initialisation; 0
        (default) leaves it out.
    """

    hidden: int = 64
    n_layers: int = 3
    input_scale: float = 64.0
    mod_hidden: int = 0
    basis: int = 0

    def __post_init__(self):
        check_int("hidden", self.hidden, min=2)
        check_int("n_layers", self.n_layers, min=0)
        check_scalar("input_scale", self.input_scale, gt=0.0)
        check_int("mod_hidden", self.mod_hidden, min=0)
        check_int("basis", self.basis, min=0)
        if self.hidden % 2:
            raise ValueError(f"hidden must be even (sin and cos halves), got {self.hidden}")


class FunctionDecoder(eqx.Module):
    """Latent ``z`` ``[d]`` and query coordinates ``[m, dx]`` -> values ``[m, c]``.

    Args (construction):
      coord_dim: spatial dimension ``dx``.
      latent_dim: size of ``z``.
      channels: output channels ``c``.
      config: the sizes, a :class:`DecoderConfig`.
      key: PRNG key for the initial weights.
    """

    filters: Float[Array, "l h2 dx"]
    hidden_w: Float[Array, "l1 h h"]
    latent_w: Float[Array, "l h d"]
    bias: Float[Array, "l h"]
    out_w: Float[Array, "c h"]
    out_b: Float[Array, " c"]
    mod_in: Float[Array, "l k d"] | None
    mod_in_b: Float[Array, "l k"] | None
    mod_out: Float[Array, "l h k"] | None
    basis_freqs: Float[Array, "m dx"] | None
    basis_w: Float[Array, "c m2 d"] | None
    coord_dim: int = eqx.field(static=True)
    latent_dim: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    def __init__(
        self,
        coord_dim: int,
        latent_dim: int,
        channels: int = 1,
        config: DecoderConfig = DecoderConfig(),
        *,
        key: jax.Array,
    ):
        check_int("coord_dim", coord_dim, min=1)
        check_int("latent_dim", latent_dim, min=1)
        check_int("channels", channels, min=1)
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        check_key("key", key)
        hidden, n_layers, input_scale = config.hidden, config.n_layers, config.input_scale
        kf, kh, kl, kb, ko, kob = jax.random.split(key, 6)
        n = n_layers + 1
        scale = input_scale / math.sqrt(n)
        self.filters = scale * _uniform(kf, (n, hidden // 2, coord_dim), 1 / math.sqrt(coord_dim))
        self.hidden_w = _uniform(kh, (n_layers, hidden, hidden), 1 / math.sqrt(hidden))
        self.latent_w = _uniform(kl, (n, hidden, latent_dim), 1 / math.sqrt(latent_dim))
        self.bias = _uniform(kb, (n, hidden), 1 / math.sqrt(coord_dim))
        self.out_w = _uniform(ko, (channels, hidden), 1 / math.sqrt(hidden))
        self.out_b = _uniform(kob, (channels,), 1 / math.sqrt(hidden))
        mh = config.mod_hidden
        if mh:
            km, kmb = jax.random.split(jax.random.fold_in(key, 1))
            self.mod_in = _uniform(km, (n, mh, latent_dim), 1 / math.sqrt(latent_dim))
            self.mod_in_b = _uniform(kmb, (n, mh), 1 / math.sqrt(latent_dim))
            self.mod_out = jnp.zeros((n, hidden, mh))  # zero: starts as the linear MFN
        else:
            self.mod_in = self.mod_in_b = self.mod_out = None
        if config.basis:
            freqs = lattice_frequencies(config.basis, coord_dim)
            self.basis_freqs = jnp.asarray(freqs, jnp.result_type(float))
            self.basis_w = jnp.zeros((channels, 2 * config.basis, latent_dim))
        else:
            self.basis_freqs = self.basis_w = None
        self.coord_dim = coord_dim
        self.latent_dim = latent_dim
        self.channels = channels

    def __call__(
        self, z: Float[Array, " d"], coords: Float[Array, "m dx"]
    ) -> Float[Array, "m c"]:
        z = jnp.asarray(check_array("z", z, shape=(self.latent_dim,), dtype="floating"))
        coords = jnp.asarray(check_array("coords", coords, ndim=2, dtype="floating"))
        if coords.shape[1] != self.coord_dim:
            raise ValueError(
                f"coords must have shape (m, {self.coord_dim}) for this decoder, "
                f"got {tuple(coords.shape)}"
            )
        if coords.shape[0] == 0:
            raise ValueError("coords must hold at least one query point, got 0")
        modulation = self.latent_w @ z + self.bias  # [L+1, hidden], once per latent
        if self.mod_out is not None:
            zn = (z - jnp.mean(z)) * jax.lax.rsqrt(jnp.var(z) + 1e-5)
            act = jax.nn.swish(self.mod_in @ zn + self.mod_in_b)  # [L+1, k]
            modulation = modulation + jnp.einsum("lhk,lk->lh", self.mod_out, act)

        def filt(i: int) -> Float[Array, "m h"]:
            phase = coords @ self.filters[i].T
            return jnp.concatenate([jnp.sin(phase), jnp.cos(phase)], axis=-1)

        h = filt(0) * modulation[0]
        for i in range(self.hidden_w.shape[0]):
            h = filt(i + 1) * (h @ self.hidden_w[i].T + modulation[i + 1])
        out = h @ self.out_w.T + self.out_b
        if self.basis_w is not None:
            ph = 2.0 * jnp.pi * coords @ self.basis_freqs.T
            psi = jnp.concatenate([jnp.cos(ph), jnp.sin(ph)], axis=-1)  # [m, 2k]
            out = out + psi @ (self.basis_w @ z).T
        return out
