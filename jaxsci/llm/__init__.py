"""Language-model methods (Flax NNX)."""
