"""ML methods ported to Flax NNX."""
