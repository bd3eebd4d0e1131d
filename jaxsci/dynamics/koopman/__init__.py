r"""MERLIN: functional Koopman learning with function encoders/decoders and memory.

Paper: W. Lu, H. Ma, W. Lin, Q. Zhu, "Interpretable Functional Koopman Learning
with Non-Markovian Closure for Spatiotemporal Systems" (MERLIN), ICML 2026
(the authors' PyTorch code: RobinLufdu/MERLIN on GitHub).

The state ``u_t`` of a PDE is lifted to learned observation functionals
``z_t = E(u_t)`` that evolve near-linearly,

    z_{t+1} = A z_t + b  +  memory(z_t, z_{t-1}, ...),      u_t(x) = D(z_t, x),

with

* :class:`FunctionEncoder` -- discretization-invariant: any set of observed
  points (with a mask for missing ones) -> latent tokens (``_encoder.py``);
* :class:`FunctionDecoder` -- resolution-free: latent + any query points ->
  field values, a latent-modulated multiplicative Fourier filter network
  (``_decoder.py``);
* :class:`KoopmanBackbone` -- ``A, b`` by closed-form ridge regression on latent
  pairs with running sufficient statistics; its spectrum; the reduced-order
  model on leading POD modes (``_backbone.py``);
* :class:`LeakyMemory` / :class:`WindowMemory` -- the Mori-Zwanzig non-Markovian
  correction, zero at initialisation, final modules under :class:`AbstractMemory`
  (``init`` / ``correction``, one shared ``step``; ``_memory.py``);
* :class:`Merlin` (sizes in one :class:`MerlinConfig` nesting :class:`EncoderConfig`
  and :class:`DecoderConfig`), :func:`train_phase1` (training under linear
  constraints), :func:`train_memory`, :func:`forecast`, and :func:`pod_init` (ours:
  the linear paths started at the POD of the delay-stacked data; ``_model.py``).

Import every name from here (``from jaxsci.dynamics import koopman as kp``); the
private submodules (``_encoder.py``, ...) are the implementation's layout.

>>> import jax
>>> from jaxsci.dynamics import koopman as kp
>>> cfg = kp.MerlinConfig(n_cond=2, encoder=kp.EncoderConfig(n_tokens=2, token_dim=4,
...     width=8, heads=1, rope=(2.0, 1.0)), decoder=kp.DecoderConfig(hidden=8, n_layers=1))
>>> model = kp.Merlin(2, 1, cfg, key=jax.random.key(0))
>>> xy = jax.random.uniform(jax.random.key(1), (16, 2))
>>> z = model.encode(xy, jax.numpy.ones((2, 16, 1)))
>>> model.decode(z, xy).shape
(16, 1)
"""

from jaxsci.dynamics.koopman._backbone import (
    KoopmanBackbone,
    LinearStats,
    fit_backbone,
    init_stats,
    lift,
    pod_basis,
    project,
    reduce,
    rollout_linear,
    solve_backbone,
    spectral_radius,
    spectrum,
    update_stats,
)
from jaxsci.dynamics.koopman._decoder import DecoderConfig, FunctionDecoder
from jaxsci.dynamics.koopman._encoder import (
    EncoderConfig,
    FunctionEncoder,
    GalerkinAttention,
    anchor_distances,
    lattice_frequencies,
    point_mask,
    rope_vectors,
    rotary,
)
from jaxsci.dynamics.koopman._memory import (
    AbstractMemory,
    LeakyMemory,
    LeakyState,
    MemoryInfo,
    WindowMemory,
    WindowState,
    latent_scale,
    memory_loss,
    rollout,
    warm_state,
)
from jaxsci.dynamics.koopman._model import (
    MemoryConfig,
    Merlin,
    MerlinConfig,
    Phase1Config,
    decode_latents,
    delay_embed,
    encode_dataset,
    fit_global_backbone,
    forecast,
    make_memory,
    phase1_loss,
    pod_init,
    train_memory,
    train_phase1,
)

__all__ = [
    "EncoderConfig",
    "DecoderConfig",
    "MerlinConfig",
    "FunctionEncoder",
    "FunctionDecoder",
    "GalerkinAttention",
    "point_mask",
    "rotary",
    "rope_vectors",
    "anchor_distances",
    "lattice_frequencies",
    "KoopmanBackbone",
    "LinearStats",
    "init_stats",
    "update_stats",
    "solve_backbone",
    "fit_backbone",
    "rollout_linear",
    "spectrum",
    "spectral_radius",
    "pod_basis",
    "reduce",
    "project",
    "lift",
    "AbstractMemory",
    "LeakyMemory",
    "LeakyState",
    "WindowMemory",
    "WindowState",
    "MemoryInfo",
    "latent_scale",
    "memory_loss",
    "rollout",
    "warm_state",
    "Merlin",
    "Phase1Config",
    "MemoryConfig",
    "delay_embed",
    "phase1_loss",
    "train_phase1",
    "pod_init",
    "encode_dataset",
    "fit_global_backbone",
    "make_memory",
    "train_memory",
    "decode_latents",
    "forecast",
]
