"""Language-model methods: DFlash speculative decoding (:mod:`~jaxsci.llm.dflash`) and
semantic isotropy of sampled responses as a trust signal (:mod:`~jaxsci.llm.isotropy`)."""
