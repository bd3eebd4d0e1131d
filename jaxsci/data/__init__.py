"""The data layer: generators of synthetic data sets, shared by the methods.

* :mod:`jaxsci.data.pde` -- Burgers, Kuramoto-Sivashinsky, Navier-Stokes and wave trajectories.
* :mod:`jaxsci.data.fem` -- random elliptic P1 FEM problems (scikit-fem) as JAX ``BCOO``.
* :mod:`jaxsci.data.corpora` -- synthetic text corpora for the language models.
* :mod:`jaxsci.data.hubs` -- Gaussian graphical models of K populations with common and
  individual hubs.
* :mod:`jaxsci.data.recsys` -- implicit-feedback recommender data with planted structure.
* :mod:`jaxsci.data.vision` -- complex-valued image data (FFT digits, SAR-like chips)
  with in-/out-of-distribution class splits.
* :mod:`jaxsci.data.tabular` -- a planted table with known dependence and missingness
  masks (MCAR, MAR, MNAR).
* :mod:`jaxsci.data.cotraining` -- the sim-and-real co-training toy: one latent state,
  two embeddings (visual gap) and two action maps (physics gap), few real samples.
* :mod:`jaxsci.data.digits_text` -- the 8x8 digits with three-token prompts (digit names,
  fillers, a null token, two nonce trigger tokens) for the toy text-to-image model.
* :mod:`jaxsci.data.facts` -- a fact table (countries: capital, continent, language) and
  a checker of the facts a generated text states.
"""
