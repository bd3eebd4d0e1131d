"""Generative models and sampling methods (Flax NNX / equinox)."""
