"""The experiment registry: one module per paper, run by ``jaxsci reproduce NAME``.

Each implemented experiment module defines ``CONFIGS`` (``smoke``, ``quick``, ``full``)
and ``run(config, out_dir, *, seed=0, progress=True) -> jaxsci.core.Report``.
Papers not yet implemented are listed with status ``planned`` so ``jaxsci list``
shows the whole product and what is left.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

__all__ = ["Entry", "REGISTRY", "get", "load"]


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    paper: str
    area: str  # the folder under jaxsci/ that holds the method
    status: str = "planned"  # planned | implemented


_ENTRIES = [
    Entry("hopfield", "Thermodynamic capacity of continuous Dense Associative Memory, LSE vs LSR kernels", "dynamics", "implemented"),
    Entry("particles", "Transformer forward pass as interacting particles on the sphere, with the perceptron block", "dynamics", "implemented"),
    Entry("noisy_transformer", "Deep transformers with random value matrices: common matrix Brownian noise on the sphere", "dynamics", "implemented"),
    Entry("koopman", "MERLIN: functional Koopman with function encoders/decoders and Mori-Zwanzig memory", "dynamics", "implemented"),
    Entry("langevin", "Learning stochastic dynamics from temporally sparse samples as stochastic control (path augmentation)", "dynamics", "implemented"),
    Entry("sysid", "Input-output learning of nonlinear systems under sparse adversarial attacks (l2-norm estimator)", "dynamics", "implemented"),
    Entry("lyapunov", "Neural vector Lyapunov-Razumikhin certificates for delayed interconnected systems", "dynamics", "implemented"),
    Entry("grans", "G-RANS: residual-aware neural subspace-correction solver for sparse FEM systems", "solvers", "implemented"),
    Entry("bioflow", "Regime-aware conditional flow matching for trajectories of many systems-biology ODE models", "dynamics", "implemented"),
    Entry("flowsmc", "Training-free conditional sampling for flow matching by importance sampling + SMC", "generative", "implemented"),
    Entry("dflash", "DFlash: block-diffusion drafter for speculative decoding", "llm", "implemented"),
    Entry("misalignment", "In-training safeguards against emergent misalignment", "llm", "implemented"),
    Entry("attribution", "Accountability attribution of training stages", "llm", "implemented"),
    Entry("isotropy", "Semantic isotropy of response embeddings as a trust signal", "llm", "implemented"),
    Entry("rsir", "Recursive self-improving recommendation", "recsys", "implemented"),
    Entry("ntssm", "NT-SSM: type-aware neighbour-pair contrastive loss for graph CF", "recsys", "implemented"),
    Entry("venomrec", "Cross-modal poisoning of multimodal recommenders (robustness evaluation)", "recsys", "implemented"),
    Entry("ggm", "JIC-HD: common hub detection across Gaussian graphical models", "stats", "implemented"),
    Entry("qenn", "Quantum-evidence complex-valued network for OOD detection", "generative", "implemented"),
    Entry("auctions", "Model refinement vs platform metrics for autobidders", "stats", "implemented"),
    Entry("ffcc", "Fast activation approximations by float reinterpretation", "numerics", "implemented"),
    Entry("lagrangian", "Learning Lagrangian relaxation multipliers", "stats", "implemented"),
    Entry("streaming_ate", "Streaming ATE estimation with balancing coresets", "stats", "implemented"),
    Entry("continual", "DFA-CIL / DFA-MoE with the SCR metric", "llm", "implemented"),
    Entry("topology", "Blessing of dimensionality for persistent homology", "stats", "implemented"),
    Entry("cotraining", "Mechanisms of sim-and-real co-training", "generative", "implemented"),
    Entry("augmask", "AugMask: tabular diffusion with missing values", "generative", "implemented"),
    Entry("eeb", "Erasure-evasion backdoor in concept erasure (robustness evaluation)", "generative", "implemented"),
    Entry("bandits", "Satisficing bandits with uncertain-UCB", "stats", "implemented"),
    Entry("pse", "Persistent Semantic Entities: contamination across sessions and agents", "agents", "implemented"),
    Entry("tampo", "TAMPO: task- and model-aware prompt optimisation for routing", "agents", "implemented"),
    Entry("textresnet", "TextResNet: textual gradients with additive deltas and causal routing", "agents", "implemented"),
    Entry("memevolve", "MemEvolve / EvolveLab: meta-evolving memory architectures", "agents", "implemented"),
    Entry("map", "Measuring agents in production", "agents", "implemented"),
    Entry("mce", "Meta Context Engineering", "agents", "implemented"),
    Entry("awm", "Agent World Model: database-backed synthetic environments", "agents", "implemented"),
    Entry("loam", "LLM-designed observation/action spaces with continuous racing", "agents", "implemented"),
    Entry("goals", "Goal-directedness of an agent in grid worlds, behaviour + probing", "agents", "implemented"),
]

REGISTRY: dict[str, Entry] = {e.name: e for e in _ENTRIES}


def get(name: str) -> Entry:
    """The registry entry for ``name``; ``KeyError`` with the known names otherwise."""
    if name not in REGISTRY:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def load(name: str) -> ModuleType:
    """Import the experiment module for ``name`` (only implemented ones)."""
    entry = get(name)
    if entry.status != "implemented":
        raise NotImplementedError(f"experiment {name!r} is {entry.status}, not implemented yet")
    return importlib.import_module(f"jaxsci.experiments.{name}")
