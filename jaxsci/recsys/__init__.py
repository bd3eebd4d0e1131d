"""Recommender methods: graph collaborative filtering, sequential recommenders and their
robustness; shared ranking metrics live in :mod:`jaxsci.common.ranking`, synthetic data
in :mod:`jaxsci.data.recsys`."""

from jaxsci.recsys import ntssm, rsir, venomrec

__all__ = ["ntssm", "rsir", "venomrec"]
