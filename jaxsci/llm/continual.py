r"""Dual forgetting in continual learning of a dual encoder, DFA-MoE, and the SCR metric.

The paper (ICML 2026, "dual forgetting"; only its abstract was available here) names two
ways a continually fine-tuned vision-language model forgets: **incremental knowledge
forgetting** (earlier tasks' classes) and **pre-trained knowledge forgetting** (the zero-shot
ability on domains never trained on). The usual read-out of the second, the plain mean of
zero-shot retention over held-out domains, is confounded by positive transfer: a
held-out domain similar to the training data *gains* accuracy and hides the loss
elsewhere.

**Similarity-Calibrated Retention** (:func:`scr`). For held-out domains ``d = 1..D`` with
retention ``r_d = acc_after_d / max(acc_before_d, floor)`` (:func:`retention`) and similarity
``s_d`` to the training data in the *frozen pre-trained* feature space
(:func:`domain_similarity`),

.. math::  \mathrm{SCR} = \sum_d w_d r_d,\qquad w_d = \mathrm{softmax}_d(-s_d / \tau).

The weighting (the abstract says only "inversely by similarity") is our choice: a softmax
of ``-s/tau`` is positive, sums to one, equals the plain mean when all ``s_d`` are
equal, and its temperature ``tau`` (traced) interpolates between the plain mean
(``tau -> inf``) and the retention of the least similar domain (``tau -> 0``).
:func:`domain_similarity` is the cosine between the domains' mean unit feature vectors.

**The dual encoder.** Frozen caption embeddings ``T`` (``K x D``, unit rows; in the
experiment, all-MiniLM-L6-v2 on "a photo of the digit three", ...) and an image model
whose unit feature ``f(x)`` scores the classes by ``scale * f(x) . T_k``: zero-shot
classification by text prompts. :class:`DualMoE` holds

* ``tower``: the image tower (MLP), pre-trained CLIP-style (:func:`pretrain`:
  cross-entropy of the image against the ``K`` captions, i.e. the image-to-text half of
  the contrastive loss when every caption is in the batch);
* ``experts``: ``E`` **plasticity experts**, parallel low-rank adapters from the pixels
  ``Delta_e(x) = B_e gelu(A_e x)`` (``B_e = 0`` at init, so a fresh model is the tower);
* ``momentum`` / ``momentum_ema``: the **momentum contrastive expert**, an adapter of the
  same shape trained on image-caption contrast and used through its exponential moving
  average (:func:`ema_update`, ``theta_ema <- m theta_ema + (1 - m) theta``);
* ``router``: a linear map of the tower's (frozen) hidden features to ``E + 1`` logits,
  softmax (:func:`router_weights`; the last slot is the momentum expert). The feature is
  ``f(x) = normalise(u(x) + sum_e g_e(x) Delta_e(x) + g_M(x) Delta_M^ema(x))``.

**The methods are values** (:class:`Method`: loss weights and 0/1 switches, all traced,
so one compiled :func:`train_task` serves every method and a ``vmap`` over seeds or
weights):

* naive fine-tuning (:func:`naive`): the tower trained by cross-entropy over the seen
  classes' captions;
* distillation (:func:`distill`, LwF / ZSCL-style): plus ``KL(p_frozen || p)`` over all
  ``K`` captions on reference images from the pre-training data;
* MoE adapters (:func:`moe_adapters`): frozen tower, plasticity experts and router trained
  by cross-entropy, no momentum expert;
* DFA-MoE (:func:`dfa_moe`): MoE adapters plus an auxiliary contrastive loss on the
  plasticity path (text-to-image: each image's caption picks it out among the batch's
  images), the momentum contrastive
  expert (contrast on reference and task images, EMA), and a routing loss that sends
  reference images to the momentum slot and task images to the plasticity experts.

Departures (the abstract leaves them open): experts are parallel adapters on the pixels
of an MLP tower, not adapters inside a ViT; the router is trained with the routing
loss above (a stand-in for the paper's router objective); the momentum expert's target is
the frozen caption space (the only text space here).

>>> import jax, jax.numpy as jnp
>>> from jaxsci.llm import continual as cl
>>> float(cl.scr(jnp.array([1.0, 0.5]), jnp.array([0.3, 0.3])))
0.75
>>> model = cl.init(jax.random.key(0), n_experts=2, hidden=16, rank=4, text_dim=8)
>>> w = cl.router_weights(model, jnp.ones((3, 64)), use_momentum=1.0)
>>> w.shape, bool(jnp.allclose(w.sum(-1), 1.0))
((3, 3), True)
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = [
    "LOGIT_SCALE",
    "SCR_TEMPERATURE",
    "Adapter",
    "Tower",
    "DualMoE",
    "Method",
    "naive",
    "distill",
    "moe_adapters",
    "dfa_moe",
    "scr",
    "retention",
    "domain_similarity",
    "ema_update",
    "init",
    "features",
    "frozen_features",
    "router_weights",
    "logits",
    "accuracy",
    "pretrain",
    "train_task",
]

LOGIT_SCALE = 50.0  # CLIP-style inverse temperature of the image-caption logits
SCR_TEMPERATURE = 0.05  # tau of the SCR softmax weights (a sweepable argument)


# --------------------------------------------------------------------------- SCR


def scr(retention: Float[Array, " d"], similarity: Float[Array, " d"], *,
        temperature: float | Array = SCR_TEMPERATURE) -> Float[Array, ""]:
    """Similarity-Calibrated Retention ``sum_d softmax(-s/tau)_d r_d`` (module docstring).

    Args:
      retention: ``(D,)`` per held-out domain, accuracy after / accuracy before.
      similarity: ``(D,)`` each domain's similarity to the training data.
      temperature: ``tau > 0`` (traced).

    Returns:
      scalar; the plain mean of ``retention`` when all similarities are equal.
    """
    check_array("retention", retention, ndim=1, dtype="floating")
    check_array("similarity", similarity, shape=(retention.shape[0],), dtype="floating")
    if retention.shape[0] < 1:
        raise ValueError("retention must hold at least one domain, got shape (0,)")
    check_scalar("temperature", temperature, gt=0.0)
    w = jax.nn.softmax(-jnp.asarray(similarity) / temperature)
    return jnp.sum(w * jnp.asarray(retention))


def retention(acc_after: Float[Array, " d"], acc_before: Float[Array, " d"], *,
              floor: float | Array = 0.0) -> Float[Array, " d"]:
    """Zero-shot retention ``acc_after / max(acc_before, floor)`` per domain.

    Args:
      acc_after: ``(D,)`` accuracies after continual training.
      acc_before: ``(D,)`` the pre-trained model's accuracies.
      floor: the smallest denominator (traced). The experiment uses chance, ``1/K``: an
        accuracy at or below chance is no pre-trained knowledge to retain, and a ratio
        over it would only measure noise.

    Returns:
      ``(D,)`` ratios. A zero denominator is an error (eagerly and under ``jit``).
    """
    check_array("acc_after", acc_after, ndim=1, dtype="floating", ge=0.0)
    check_array("acc_before", acc_before, shape=(acc_after.shape[0],), dtype="floating",
                ge=0.0)
    check_scalar("floor", floor, ge=0.0)
    den = jnp.maximum(jnp.asarray(acc_before), floor)
    den = eqx.error_if(den, den <= 0, "acc_before must be > 0 where floor is 0 (a ratio's "
                       "denominator)")
    return jnp.asarray(acc_after) / den


def _unit(x: Array) -> Array:
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def domain_similarity(a: Float[Array, "n k"], b: Float[Array, "m k"]) -> Float[Array, ""]:
    """Cosine between the mean unit feature vectors of two samples (frozen features).

    Args:
      a: ``(n, k)`` features of one domain (rows normalised here).
      b: ``(m, k)`` features of another.

    Returns:
      scalar in ``[-1, 1]``; 1 for samples with the same mean direction.
    """
    check_array("a", a, ndim=2, dtype="floating")
    check_array("b", b, shape=(None, a.shape[1]), dtype="floating")
    ma = jnp.mean(_unit(jnp.asarray(a)), axis=0)
    mb = jnp.mean(_unit(jnp.asarray(b)), axis=0)
    return jnp.dot(_unit(ma), _unit(mb))


def ema_update(ema, params, momentum: float | Array):
    """``momentum * ema + (1 - momentum) * params``, leaf by leaf (any pytree of arrays).

    Args:
      ema: the running average.
      params: the new parameters (same structure).
      momentum: ``m`` in ``[0, 1]`` (traced); ``m = 1`` keeps ``ema``, ``m = 0`` copies.
    """
    check_scalar("momentum", momentum, ge=0.0, le=1.0)
    if jax.tree_util.tree_structure(ema) != jax.tree_util.tree_structure(params):
        raise ValueError("ema and params must have the same tree structure")
    return jax.tree_util.tree_map(lambda e, p: momentum * e + (1.0 - momentum) * p,
                                  ema, params)


# --------------------------------------------------------------------------- model


class Tower(eqx.Module):
    """Image tower: ``u = W_3 gelu(W_2 gelu(W_1 x + b_1) + b_2)`` (64 pixels in)."""

    w1: Array
    b1: Array
    w2: Array
    b2: Array
    w3: Array

    def hidden(self, x: Array) -> Array:
        h = jax.nn.gelu(x @ self.w1 + self.b1)
        return jax.nn.gelu(h @ self.w2 + self.b2)


class Adapter(eqx.Module):
    """Parallel low-rank adapter from the pixels, ``B gelu(A x)`` (``B = 0`` at init)."""

    a: Array
    b: Array

    def __call__(self, x: Array) -> Array:
        return jax.nn.gelu(x @ self.a) @ self.b


class DualMoE(eqx.Module):
    """The image side of the dual encoder (module docstring). ``experts`` is one
    :class:`Adapter` with a leading axis ``E``."""

    tower: Tower
    experts: Adapter
    momentum: Adapter
    momentum_ema: Adapter
    router_w: Array
    router_b: Array


class Method(eqx.Module):
    """A continual-learning method as loss weights and 0/1 switches (all traced).

    ``ce``: cross-entropy over the support's captions; ``distill``: ``KL(p_frozen || p)``
    on reference images; ``contrastive``: the plasticity path's auxiliary contrast
    (text-to-image over the batch); ``momentum_loss``: the fast momentum expert's
    contrast (reference + task images); ``route``: the routing loss; ``ema``: the EMA
    coefficient ``m``; ``train_tower`` / ``train_experts``: which parameters move;
    ``use_experts`` / ``use_momentum``: whether the adapter path / the momentum slot is on.
    """

    ce: Array
    distill: Array
    contrastive: Array
    momentum_loss: Array
    route: Array
    ema: Array
    train_tower: Array
    train_experts: Array
    use_experts: Array
    use_momentum: Array


def _method(**kw) -> Method:
    base = dict(ce=1.0, distill=0.0, contrastive=0.0, momentum_loss=0.0, route=0.0,
                ema=0.99, train_tower=0.0, train_experts=0.0, use_experts=0.0,
                use_momentum=0.0)
    base.update(kw)
    return Method(**{k: jnp.asarray(v, jnp.float32) for k, v in base.items()})


def naive() -> Method:
    """Naive fine-tuning of the image tower by cross-entropy."""
    return _method(train_tower=1.0)


def distill(weight: float = 1.0) -> Method:
    """LwF / ZSCL-style: fine-tuning plus ``weight * KL(p_frozen || p)`` on reference images."""
    return _method(train_tower=1.0, distill=weight)


def moe_adapters() -> Method:
    """MoE adapters: frozen tower, plasticity experts + router by cross-entropy."""
    return _method(train_experts=1.0, use_experts=1.0)


def dfa_moe(contrastive: float = 0.5, momentum_loss: float = 1.0, route: float = 1.0,
            ema: float = 0.99) -> Method:
    """DFA-MoE: MoE adapters + auxiliary contrast, the EMA contrastive expert, routing."""
    return _method(train_experts=1.0, use_experts=1.0, use_momentum=1.0,
                   contrastive=contrastive, momentum_loss=momentum_loss, route=route, ema=ema)


def init(key: jax.Array, *, n_experts: int = 4, hidden: int = 128, rank: int = 16,
         text_dim: int = 384, pixels: int = 64) -> DualMoE:
    """A fresh model: random tower, zero-output adapters, zero router."""
    check_key("key", key)
    for name, v in (("n_experts", n_experts), ("hidden", hidden), ("rank", rank),
                    ("text_dim", text_dim), ("pixels", pixels)):
        check_int(name, v, min=1)
    k = jax.random.split(key, 5)

    def dense(kk, shape):
        return jax.random.normal(kk, shape) / jnp.sqrt(shape[-2])

    tower = Tower(dense(k[0], (pixels, hidden)), jnp.zeros(hidden),
                  dense(k[1], (hidden, hidden)), jnp.zeros(hidden),
                  dense(k[2], (hidden, text_dim)))
    experts = Adapter(dense(k[3], (n_experts, pixels, rank)),
                      jnp.zeros((n_experts, rank, text_dim)))
    mom = Adapter(dense(k[4], (pixels, rank)), jnp.zeros((rank, text_dim)))
    return DualMoE(tower, experts, mom, mom, jnp.zeros((hidden, n_experts + 1)),
                   jnp.zeros(n_experts + 1))


def _check_images(x) -> Array:
    check_array("images", x, ndim=2, dtype="floating")
    return jnp.asarray(x)


def router_weights(model: DualMoE, images: Float[Array, "n p"],
                   use_momentum: float | Array = 1.0) -> Float[Array, "n e1"]:
    """Router probabilities ``(n, E + 1)`` (last: the momentum expert); rows sum to one.

    ``use_momentum = 0`` removes the momentum slot (its probability is 0).
    """
    x = _check_images(images)
    return _router(model, x, jnp.asarray(use_momentum, x.dtype))


def _router(model, x, use_momentum):
    h = model.tower.hidden(x)
    z = h @ model.router_w + model.router_b
    off = jnp.zeros(z.shape[-1]).at[-1].set(1.0) * (1.0 - use_momentum) * 1e9
    return jax.nn.softmax(z - off, axis=-1)


def _features(model, x, use_experts, use_momentum, momentum=None):
    u = model.tower.hidden(x) @ model.tower.w3
    g = _router(model, x, use_momentum)
    delta = jax.vmap(lambda a, b: Adapter(a, b)(x), out_axes=1)(model.experts.a,
                                                                model.experts.b)
    mom = model.momentum_ema if momentum is None else momentum
    delta = jnp.sum(g[:, :-1, None] * delta, axis=1) + g[:, -1:] * mom(x)
    return _unit(u + use_experts * delta)


def features(model: DualMoE, images: Float[Array, "n p"], method: Method
             ) -> Float[Array, "n k"]:
    """Unit image features ``(n, k)`` of ``model`` as ``method`` uses it."""
    return _features(model, _check_images(images), method.use_experts, method.use_momentum)


def frozen_features(model: DualMoE, images: Float[Array, "n p"]) -> Float[Array, "n k"]:
    """The tower's unit features (no adapters): the frozen pre-trained feature space."""
    x = _check_images(images)
    return _unit(model.tower.hidden(x) @ model.tower.w3)


def logits(model: DualMoE, images: Float[Array, "n p"], text: Float[Array, "c k"],
           method: Method, *, scale: float | Array = LOGIT_SCALE) -> Float[Array, "n c"]:
    """``scale * f(x) . T_k``: zero-shot scores against the caption embeddings."""
    check_array("text", text, ndim=2, dtype="floating")
    f = features(model, images, method)
    if f.shape[1] != text.shape[1]:
        raise ValueError(f"text must have {f.shape[1]} columns (the feature width), "
                         f"got shape {tuple(text.shape)}")
    return scale * f @ _unit(jnp.asarray(text)).T


def accuracy(model: DualMoE, images, labels: Int[Array, " n"], text, method: Method,
             ) -> Float[Array, ""]:
    """Share of images whose best-scoring caption is their class's."""
    check_array("labels", labels, shape=(images.shape[0],), dtype="integer")
    return jnp.mean(jnp.argmax(logits(model, images, text, method), -1) == labels)


# --------------------------------------------------------------------------- training


def _batch(key, x, y, n):
    i = jax.random.randint(key, (n,), 0, x.shape[0])
    return x[i], y[i]


def _ce(logit, y, mask=None):
    if mask is not None:
        logit = jnp.where(mask[None, :], logit, -1e9)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logit, y))


@functools.partial(jax.jit, static_argnames=("steps", "batch"))
def _pretrain(model, x, y, text, key, lr, scale, *, steps, batch):
    t = _unit(text)
    opt = optax.adam(lr)
    tower = model.tower

    def loss(tw, xb, yb):
        return _ce(scale * _unit(tw.hidden(xb) @ tw.w3) @ t.T, yb)

    def step(carry, k):
        tw, st = carry
        xb, yb = _batch(k, x, y, batch)
        val, g = jax.value_and_grad(loss)(tw, xb, yb)
        upd, st = opt.update(g, st, tw)
        return (optax.apply_updates(tw, upd), st), val

    (tower, _), hist = jax.lax.scan(step, (tower, opt.init(tower)),
                                    jax.random.split(key, steps))
    return eqx.tree_at(lambda m: m.tower, model, tower), hist


def pretrain(model: DualMoE, images, labels, text, key: jax.Array, *, steps: int = 1000,
             batch: int = 128, lr: float | Array = 3e-3,
             scale: float | Array = LOGIT_SCALE) -> tuple[DualMoE, Array]:
    """CLIP-style alignment of the tower to the frozen captions (image-to-text CE).

    Returns the model and the loss per step ``(steps,)``.
    """
    x = _check_images(images)
    check_array("labels", labels, shape=(x.shape[0],), dtype="integer")
    check_array("text", text, ndim=2, dtype="floating")
    check_key("key", key)
    check_int("steps", steps, min=1)
    check_int("batch", batch, min=1)
    return _pretrain(model, x, jnp.asarray(labels), jnp.asarray(text), key, lr, scale,
                     steps=steps, batch=batch)


def _task_loss(params, frozen, teacher, m: Method, xb, yb, xr, yr, seen, t, scale):
    """The weighted objective of one step; ``params``: (tower, experts, momentum, router)."""
    tower, experts, mom, rw, rb = params
    model = DualMoE(tower, experts, frozen.momentum_ema, frozen.momentum_ema, rw, rb)
    f = _features(model, xb, m.use_experts, m.use_momentum)
    ce = _ce(scale * f @ t.T, yb, seen)
    # Auxiliary contrast of the plasticity path, the text-to-image half of CLIP's loss:
    # each image's caption must pick it out among the batch's images. Unlike a softmax
    # over captions it never pushes the captions of earlier classes away.
    fp = _features(model, xb, m.use_experts, 0.0)
    col = scale * fp @ t[yb].T  # (image j, caption of image i)
    con = -jnp.mean(jnp.diag(jax.nn.log_softmax(col, axis=0)))
    # LwF / ZSCL: match the frozen model's caption distribution on reference images.
    fr = _features(model, xr, m.use_experts, m.use_momentum)
    p0 = jax.nn.softmax(scale * _unit(teacher.hidden(xr) @ teacher.w3) @ t.T)
    kl = jnp.mean(jnp.sum(p0 * (jnp.log(p0 + 1e-9)
                                - jax.nn.log_softmax(scale * fr @ t.T)), -1))
    # The fast momentum expert: routed alone, image-caption contrast on both sets.
    only_m = DualMoE(model.tower, experts, mom, mom, jnp.zeros_like(rw),
                     jnp.full_like(rb, -1e9).at[-1].set(0.0))
    mo = (_ce(scale * _features(only_m, xr, 1.0, 1.0, mom) @ t.T, yr)
          + _ce(scale * _features(only_m, xb, 1.0, 1.0, mom) @ t.T, yb))
    # Routing: reference images to the momentum slot, task images to the experts.
    gr = _router(model, xr, m.use_momentum)[:, -1]
    gb = _router(model, xb, m.use_momentum)[:, -1]
    route = -jnp.mean(jnp.log(gr + 1e-6)) - jnp.mean(jnp.log(1.0 - gb + 1e-6))
    return (m.ce * ce + m.contrastive * con + m.distill * kl + m.momentum_loss * mo
            + m.route * route)


@functools.partial(jax.jit, static_argnames=("steps", "batch"))
def _train_task(model, teacher, method, x, y, seen, xr, yr, text, key, lr, scale, *, steps,
                batch):
    t = _unit(text)
    opt = optax.adam(lr)
    params = (model.tower, model.experts, model.momentum, model.router_w, model.router_b)
    gate = (method.train_tower, method.train_experts, method.train_experts * method.use_momentum,
            method.train_experts, method.train_experts)

    def step(carry, k):
        p, ema, st = carry
        kb, kr = jax.random.split(k)
        xb, yb = _batch(kb, x, y, batch)
        xrb, yrb = _batch(kr, xr, yr, batch)
        frozen = eqx.tree_at(lambda mm: mm.momentum_ema, model, ema)
        val, g = jax.value_and_grad(_task_loss)(p, frozen, teacher, method, xb, yb, xrb, yrb,
                                                seen, t, scale)
        g = tuple(jax.tree_util.tree_map(lambda a, s=s: s * a, gi)
                  for gi, s in zip(g, gate, strict=True))
        upd, st = opt.update(g, st, p)
        p = optax.apply_updates(p, upd)
        ema = ema_update(ema, p[2], method.ema)
        return (p, ema, st), val

    (p, ema, _), hist = jax.lax.scan(step, (params, model.momentum_ema, opt.init(params)),
                                     jax.random.split(key, steps))
    tower, experts, mom, rw, rb = p
    return DualMoE(tower, experts, mom, ema, rw, rb), hist


def train_task(model: DualMoE, method: Method, images, labels, seen, ref_images, ref_labels,
               text, key: jax.Array, *, teacher: Tower | None = None, steps: int = 200,
               batch: int = 64, lr: float | Array = 1e-3,
               scale: float | Array = LOGIT_SCALE) -> tuple[DualMoE, Array]:
    """Train on one task's images with ``method`` (one compiled program for all methods).

    Args:
      model: the current model.
      method: a :class:`Method` (traced: vmappable over its weights).
      images, labels: the task's training images ``(n, p)`` and classes ``(n,)``.
      seen: ``(K,)`` bool, the classes seen so far (the cross-entropy's support).
      ref_images, ref_labels: reference images from the pre-training data (distillation,
        momentum expert, routing).
      text: ``(K, k)`` caption embeddings.
      key: minibatch sampling.
      teacher: the distillation target's tower, the pre-trained one (default:
        ``model.tower``, right for the first task).

    Returns:
      the trained model and the loss per step ``(steps,)``.
    """
    x = _check_images(images)
    check_array("labels", labels, shape=(x.shape[0],), dtype="integer")
    check_array("text", text, ndim=2, dtype="floating")
    check_array("seen", seen, shape=(text.shape[0],), dtype="bool")
    check_array("ref_images", ref_images, shape=(None, x.shape[1]), dtype="floating")
    check_array("ref_labels", ref_labels, shape=(ref_images.shape[0],), dtype="integer")
    check_key("key", key)
    check_int("steps", steps, min=1)
    check_int("batch", batch, min=1)
    teacher = model.tower if teacher is None else teacher
    return _train_task(model, teacher, method, x, jnp.asarray(labels), jnp.asarray(seen),
                       jnp.asarray(ref_images), jnp.asarray(ref_labels), jnp.asarray(text),
                       key, lr, scale, steps=steps, batch=batch)
