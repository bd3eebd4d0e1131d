"""The shared layer: substrates that two or more methods use.

* :mod:`jaxsci.common.flow_matching` -- conditional flow matching (bioflow, flowsmc).
* :mod:`jaxsci.common.lm` -- the language models and their decoding (dflash and the LLM papers).
* :mod:`jaxsci.common.bounds` -- IBP / CROWN interval bounds of small programs (lyapunov).
* :mod:`jaxsci.common.ranking` -- Recall@k, NDCG@k and ER@k of recommenders (ntssm, rsir,
  venomrec).

Paper areas import only :mod:`jaxsci.core`, this layer and :mod:`jaxsci.data`; this layer
never imports a paper area.
"""
