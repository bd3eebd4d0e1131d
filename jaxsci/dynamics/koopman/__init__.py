r"""MERLIN: functional Koopman learning with function encoders/decoders and memory.

Paper: W. Lu, H. Ma, W. Lin, Q. Zhu, "Interpretable Functional Koopman Learning
with Non-Markovian Closure for Spatiotemporal Systems" (MERLIN), ICML 2026
(abstract in ``shared/seeds/000_*.txt``; authors' PyTorch code RobinLufdu/MERLIN).

The state ``u_t`` of a PDE is lifted to learned observation functionals
``z_t = E(u_t)`` that evolve near-linearly,

    z_{t+1} = A z_t + b  +  memory(z_t, z_{t-1}, ...),      u_t(x) = D(z_t, x),

with

* :class:`FunctionEncoder` -- discretization-invariant: any set of observed
  points (with a mask for missing ones) -> latent tokens (``encoder.py``);
* :class:`FunctionDecoder` -- resolution-free: latent + any query points ->
  field values, a latent-modulated multiplicative Fourier filter network
  (``decoder.py``);
* :class:`KoopmanBackbone` -- ``A, b`` by closed-form ridge regression on latent
  pairs with running sufficient statistics; its spectrum; the reduced-order
  model on leading POD modes (``backbone.py``);
* :class:`LeakyMemory` / :class:`WindowMemory` -- the Mori-Zwanzig non-Markovian
  correction, zero at initialisation (``memory.py``);
* :class:`Merlin`, :func:`train_phase1` (training under linear constraints),
  :func:`train_memory`, :func:`forecast` (``model.py``).
"""

from jaxsci.dynamics.koopman.backbone import (
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
from jaxsci.dynamics.koopman.decoder import FunctionDecoder
from jaxsci.dynamics.koopman.encoder import FunctionEncoder, GalerkinAttention
from jaxsci.dynamics.koopman.memory import (
    LeakyMemory,
    WindowMemory,
    latent_scale,
    memory_loss,
    rollout,
    warm_state,
)
from jaxsci.dynamics.koopman.model import (
    MemoryConfig,
    Merlin,
    Phase1Config,
    decode_latents,
    delay_embed,
    encode_dataset,
    fit_global_backbone,
    forecast,
    make_memory,
    phase1_loss,
    train_memory,
    train_phase1,
)

__all__ = [
    "FunctionEncoder",
    "FunctionDecoder",
    "GalerkinAttention",
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
    "LeakyMemory",
    "WindowMemory",
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
    "encode_dataset",
    "fit_global_backbone",
    "make_memory",
    "train_memory",
    "decode_latents",
    "forecast",
]
