r"""NT-SSM: a neighbour-type-aware sampled-softmax loss for graph collaborative filtering.

Paper: "Rethinking Contrastive Learning in Graph Collaborative Filtering: Limitations and
a Simple Remedy" (Lee, Kim, Kim, Shin; ICML 2026). The authors' code (geon0325/NT-SSM,
no licence, read only) fixed the choices the abstract leaves open; ours follow it where
named below.

LightGCN with the layer sum split by parity
-------------------------------------------
Users and items are the nodes of the bipartite interaction graph with the symmetric
normalised adjacency ``A_ui = 1 / sqrt(d_u d_i)``. From the free embeddings
``E^(0) = [U; I]`` LightGCN propagates ``E^(l+1) = A E^(l)`` for ``l < L`` and scores
``s(u, i) = <e_u, e_i>`` with ``e = (1 / (L + 1)) sum_l E^(l)``. Since the graph is
bipartite, a user's even layers ``l = 0, 2, ..`` aggregate *user-type* neighbours (paths
of even length end at users) and its odd layers *item-type* neighbours; for an item it
is the reverse. With ``e = e^even + e^odd`` (each divided by ``L + 1``, as the authors)
the score splits into four neighbour-pair terms (:func:`pair_scores`):

.. math::
    s(u,i) = \underbrace{\langle u^{e}, i^{o}\rangle}_{UU}
           + \underbrace{\langle u^{o}, i^{e}\rangle}_{II}
           + \underbrace{\langle u^{e}, i^{e}\rangle}_{UI}
           + \underbrace{\langle u^{o}, i^{o}\rangle}_{IU},

named by the types of the user-side and item-side neighbours (UU: both user-type).

The loss
--------
A batch of ``B`` training interactions ``(u_b, i_b)``; in-batch sampled softmax in both
directions, temperature ``tau``. With ``a = a^e + a^o`` an anchor, ``o = o^e + o^o`` a
candidate, the logit of a *positive* pair is the plain cosine ``<a, o> / (|a||o|)`` and
that of a *negative* pair reweights the candidate's two parity parts:

.. math::
    \ell(a, o) = \frac{\alpha^{e} \langle a, o^{e}\rangle
                       + \alpha^{o} \langle a, o^{o}\rangle}{|a|\,|o|}.

* users anchored, in-batch items as negatives: ``alpha^e = alpha_ii`` on the item's
  even part, ``alpha^o = alpha_iu`` on its odd part;
* items anchored, in-batch users as negatives: ``alpha^e = alpha_ui`` on the user's even
  part, ``alpha^o = alpha_uu`` on its odd part;
* ``L_dir = mean_b [logsumexp_c (logit_bc / tau) - logit_bb / tau]``, the loss is the mean
  of the two directions plus ``reg * (||U_batch||_F + ||I_batch||_F) / B^2`` on the batch's
  free embeddings (the authors' ``l2_reg_loss(reg, ...) / B``; they also add a sampled
  negative item the in-batch loss never uses, which we leave out).

Defaults are the authors' ml-1m run: ``alpha_uu 1.2, alpha_ii 0.8, alpha_ui 0.8,
alpha_iu 1.0``, ``tau 0.2``, ``d 64``, ``L 2``, Adam ``1e-3``, batch 2048, ``reg 1e-4``
(:class:`NTSSMConfig`, :meth:`TypeWeights.paper`). With every ``alpha = 1`` the loss is
exactly the bidirectional sampled softmax on cosines (:func:`ssm_loss`, a separate
implementation; a test pins the equality). The authors' SSM baseline is the
*one-directional* loss (users anchored): ``ssm_loss(..., directions="user")``.

Implementation
--------------
* Propagation runs on an edge list with ``jax.ops.segment_sum`` (never a dense or
  ``(N + M)^2`` adjacency), accumulating the even and odd sums as it goes, without
  stacking the layers (:func:`propagate`).
* :class:`TypeWeights` is data (array leaves): a grid of alphas is ``TypeWeights`` with a
  leading axis, and :func:`train_grid` trains one LightGCN per grid member (alphas x
  seeds) in one compiled program (``vmap`` inside the step; the members' losses are
  summed, so each member's gradient and Adam state are exactly its own).
* Scores for ranking are the raw dot products ``<e_u, e_i>`` (the authors' ``predict``).

Transformations: :func:`propagate`, :func:`nt_ssm_loss`, :func:`ssm_loss` are jittable,
vmappable in the embeddings and the weights, and differentiable in the embeddings
(:func:`nt_ssm_loss` also in the alphas and ``tau``).

>>> import jax, jax.numpy as jnp
>>> from jaxsci.recsys import ntssm
>>> g = ntssm.bipartite_graph(jnp.array([0, 0, 1]), jnp.array([0, 1, 1]), 2, 2)
>>> parts = ntssm.propagate(g, jnp.eye(2, 3), jnp.ones((2, 3)), n_layers=2)
>>> parts.user_even.shape
(2, 3)
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.core import TrainConfig, fit
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "BipartiteGraph",
    "bipartite_graph",
    "ParitySums",
    "propagate",
    "layer_mean",
    "pair_scores",
    "TypeWeights",
    "directional_loss",
    "nt_ssm_loss",
    "ssm_loss",
    "LightGCN",
    "NTSSMConfig",
    "GridFit",
    "train_grid",
]


# ----------------------------------------------------------------------------- graph


class BipartiteGraph(eqx.Module):
    """The normalised bipartite adjacency as a directed edge list over ``U + I`` nodes.

    Users are nodes ``0..U-1``, items ``U..U+I-1``; each interaction appears in both
    directions with weight ``1 / sqrt(d_u d_i)``. Sizes are static.
    """

    src: Int[Array, " e"]
    dst: Int[Array, " e"]
    weight: Float[Array, " e"]
    n_users: int = eqx.field(static=True)
    n_items: int = eqx.field(static=True)


def bipartite_graph(users, items, n_users: int, n_items: int) -> BipartiteGraph:
    """The LightGCN graph of the training interactions ``(users[e], items[e])``.

    Duplicate interactions are merged. Raises on ids out of range or no interaction.
    """
    check_int("n_users", n_users, min=1)
    check_int("n_items", n_items, min=1)
    u = np.asarray(users).astype(np.int64).ravel()
    i = np.asarray(items).astype(np.int64).ravel()
    if u.shape != i.shape:
        raise ValueError(f"users and items must have the same length, got {u.shape} and "
                         f"{i.shape}")
    if u.size == 0:
        raise ValueError("users/items must hold at least one interaction, got none")
    for name, x, n in (("users", u, n_users), ("items", i, n_items)):
        if x.min() < 0 or x.max() >= n:
            raise ValueError(f"{name} ids must be in [0, {n}), got values in "
                             f"[{x.min()}, {x.max()}]")
    pairs = np.unique(u * n_items + i)
    u, i = pairs // n_items, pairs % n_items
    du = np.bincount(u, minlength=n_users).astype(np.float64)
    di = np.bincount(i, minlength=n_items).astype(np.float64)
    w = 1.0 / np.sqrt(du[u] * di[i])
    src = np.concatenate([u, n_users + i]).astype(np.int32)
    dst = np.concatenate([n_users + i, u]).astype(np.int32)
    return BipartiteGraph(jnp.asarray(src), jnp.asarray(dst),
                          jnp.asarray(np.concatenate([w, w]), jnp.float32), n_users, n_items)


class ParitySums(NamedTuple):
    """LightGCN's layer sum split by parity, each divided by ``L + 1``."""

    user_even: Array
    user_odd: Array
    item_even: Array
    item_odd: Array

    def users(self) -> Array:
        """Final user embeddings ``e_u = e_u^even + e_u^odd``."""
        return self.user_even + self.user_odd

    def items(self) -> Array:
        """Final item embeddings."""
        return self.item_even + self.item_odd


def _check_embeddings(graph: BipartiteGraph, user_emb, item_emb) -> None:
    if not isinstance(graph, BipartiteGraph):
        raise TypeError(f"graph must be a BipartiteGraph (see bipartite_graph), got "
                        f"{type(graph).__name__}")
    check_array("user_emb", user_emb, ndim=2, shape=(graph.n_users, None), dtype="floating")
    check_array("item_emb", item_emb, ndim=2, shape=(graph.n_items, user_emb.shape[1]),
                dtype="floating")


def _layer(graph: BipartiteGraph, x: Array) -> Array:
    msg = graph.weight[:, None] * x[graph.src]
    return jax.ops.segment_sum(msg, graph.dst, num_segments=graph.n_users + graph.n_items)


def propagate(graph: BipartiteGraph, user_emb: Float[Array, "u d"],
              item_emb: Float[Array, "n d"], n_layers: int = 2) -> ParitySums:
    """LightGCN propagation with the layer sum split by parity (module docstring)."""
    check_int("n_layers", n_layers, min=1)
    _check_embeddings(graph, user_emb, item_emb)
    x = jnp.concatenate([jnp.asarray(user_emb), jnp.asarray(item_emb)])
    even, odd = x, jnp.zeros_like(x)
    for layer in range(1, n_layers + 1):  # static and small: unrolled
        x = _layer(graph, x)
        if layer % 2:
            odd = odd + x
        else:
            even = even + x
    even, odd = even / (n_layers + 1), odd / (n_layers + 1)
    nu = graph.n_users
    return ParitySums(even[:nu], odd[:nu], even[nu:], odd[nu:])


def layer_mean(graph: BipartiteGraph, user_emb, item_emb, n_layers: int = 2
               ) -> tuple[Array, Array]:
    """Plain LightGCN: the mean of the stacked layers ``E^(0..L)`` (a reference)."""
    check_int("n_layers", n_layers, min=1)
    _check_embeddings(graph, user_emb, item_emb)
    x = jnp.concatenate([jnp.asarray(user_emb), jnp.asarray(item_emb)])
    layers = [x]
    for _ in range(n_layers):
        layers.append(_layer(graph, layers[-1]))
    mean = jnp.mean(jnp.stack(layers), axis=0)
    return mean[: graph.n_users], mean[graph.n_users:]


def pair_scores(parts: ParitySums, users, items) -> dict[str, Array]:
    """The four neighbour-pair terms of ``s(u, i)`` for pairs ``(users[b], items[b])``.

    Returns ``{"uu", "ii", "ui", "iu"}``, each ``(b,)``; their sum is ``<e_u, e_i>``.
    """
    ue, uo = parts.user_even[users], parts.user_odd[users]
    ie, io = parts.item_even[items], parts.item_odd[items]
    dot = lambda a, b: jnp.sum(a * b, axis=-1)  # noqa: E731
    return {"uu": dot(ue, io), "ii": dot(uo, ie), "ui": dot(ue, ie), "iu": dot(uo, io)}


# ----------------------------------------------------------------------------- loss


def _leaf(name: str, value: Any) -> Array:
    arr = jnp.asarray(value, dtype=float)
    if not isinstance(value, jax.core.Tracer) and not isinstance(arr, jax.core.Tracer):
        a = np.asarray(arr)
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return arr


class TypeWeights(eqx.Module):
    """The four negative-pair weights ``alpha_uu, alpha_ii, alpha_ui, alpha_iu`` (data).

    Leaves may carry a leading axis (a grid to ``vmap``/``train_grid`` over). Concrete
    values are checked on construction (finite, ``>= 0``); inside ``jit``
    :func:`nt_ssm_loss` checks them with ``equinox.error_if``.
    """

    uu: Array
    ii: Array
    ui: Array
    iu: Array

    def __init__(self, uu=1.0, ii=1.0, ui=1.0, iu=1.0):
        self.uu = _leaf("alpha_uu", uu)
        self.ii = _leaf("alpha_ii", ii)
        self.ui = _leaf("alpha_ui", ui)
        self.iu = _leaf("alpha_iu", iu)

    @classmethod
    def paper(cls) -> TypeWeights:
        """The authors' ml-1m setting: uu 1.2, ii 0.8, ui 0.8, iu 1.0."""
        return cls(uu=1.2, ii=0.8, ui=0.8, iu=1.0)

    @classmethod
    def ones(cls) -> TypeWeights:
        """Every alpha 1: the bidirectional SSM."""
        return cls()

    def mirrored(self) -> TypeWeights:
        """User and item roles exchanged: ``uu <-> ii``, ``ui <-> iu``."""
        return TypeWeights(uu=self.ii, ii=self.uu, ui=self.iu, iu=self.ui)

    def as_array(self) -> Array:
        """``(..., 4)`` in the order uu, ii, ui, iu."""
        return jnp.stack([self.uu, self.ii, self.ui, self.iu], axis=-1)

    @classmethod
    def stack(cls, weights: list[TypeWeights]) -> TypeWeights:
        """A grid: the members' leaves stacked along a new leading axis."""
        return jax.tree.map(lambda *x: jnp.stack(x), *weights)


def _normalised_logits(a, o_even, o_odd, w_even, w_odd, eps=1e-8):
    o = o_even + o_odd
    den = jnp.linalg.norm(a, axis=1)[:, None] * jnp.linalg.norm(o, axis=1)[None, :] + eps
    pos = jnp.sum(a * o, axis=1) / jnp.diagonal(den)
    neg = (w_even * (a @ o_even.T) + w_odd * (a @ o_odd.T)) / den
    return jnp.where(jnp.eye(a.shape[0], dtype=bool), pos[:, None], neg)


def directional_loss(anchor_even, anchor_odd, other_even, other_odd, w_even, w_odd,
                     tau) -> Array:
    """One direction of NT-SSM: anchors ``b`` against in-batch candidates ``c`` (docstring).

    Row ``b`` of the anchors is paired with row ``b`` of the candidates (the positive);
    the other rows are its negatives, their parity parts weighted by ``w_even``/``w_odd``.
    """
    a = anchor_even + anchor_odd
    logits = _normalised_logits(a, other_even, other_odd, w_even, w_odd) / tau
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.diagonal(logits))


def _check_loss_args(name_a, a_parts, name_b, b_parts, tau):
    for name, x in ((f"{name_a}_even", a_parts[0]), (f"{name_a}_odd", a_parts[1]),
                    (f"{name_b}_even", b_parts[0]), (f"{name_b}_odd", b_parts[1])):
        check_array(name, x, ndim=2, dtype="floating")
    shape = tuple(a_parts[0].shape)
    for name, x in ((f"{name_a}_odd", a_parts[1]), (f"{name_b}_even", b_parts[0]),
                    (f"{name_b}_odd", b_parts[1])):
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have the shape of {name_a}_even {shape} (row b "
                             f"of users and items is one interaction), got {tuple(x.shape)}")
    if shape[0] < 2:
        raise ValueError(f"the batch must hold at least 2 interactions (in-batch "
                         f"negatives), got {shape[0]}")
    if not isinstance(tau, jax.core.Tracer):
        check_scalar("tau", float(np.asarray(tau)), gt=0.0)


def nt_ssm_loss(user_even, user_odd, item_even, item_odd, weights: TypeWeights | None = None,
                tau=0.2) -> Array:
    """NT-SSM on a batch of interactions: mean of the two directions (module docstring).

    Args:
      user_even, user_odd, item_even, item_odd: ``(B, d)`` parity parts of the batch's
        users and items (row ``b`` is interaction ``b``), e.g. ``propagate(...)`` indexed.
      weights: :class:`TypeWeights` (default: every alpha 1, the bidirectional SSM).
      tau: the temperature (``> 0``).
    """
    weights = TypeWeights.ones() if weights is None else weights
    if not isinstance(weights, TypeWeights):
        raise TypeError(f"weights must be a TypeWeights, got {type(weights).__name__}")
    _check_loss_args("user", (user_even, user_odd), "item", (item_even, item_odd), tau)
    alpha = weights.as_array()
    alpha = eqx.error_if(alpha, jnp.any(alpha < 0) | ~jnp.all(jnp.isfinite(alpha)),
                         "TypeWeights: every alpha must be finite and >= 0")
    tau = jnp.asarray(tau, dtype=jnp.result_type(float))
    tau = eqx.error_if(tau, ~(tau > 0), "tau must be > 0")
    a_uu, a_ii, a_ui, a_iu = alpha[0], alpha[1], alpha[2], alpha[3]
    users_anchored = directional_loss(user_even, user_odd, item_even, item_odd, a_ii, a_iu, tau)
    items_anchored = directional_loss(item_even, item_odd, user_even, user_odd, a_ui, a_uu, tau)
    return 0.5 * (users_anchored + items_anchored)


def ssm_loss(user_vec, item_vec, tau=0.2, directions: str = "both") -> Array:
    """In-batch sampled softmax on cosines (SSM), implemented on its own.

    ``directions="both"``: the mean of the user-anchored and item-anchored losses (NT-SSM
    with every alpha 1); ``"user"``: the user-anchored loss only (the authors' SSM
    baseline).
    """
    check_choice("directions", directions, ("both", "user"))
    check_array("user_vec", user_vec, ndim=2, dtype="floating")
    check_array("item_vec", item_vec, ndim=2, shape=tuple(user_vec.shape), dtype="floating")
    u = user_vec / (jnp.linalg.norm(user_vec, axis=1, keepdims=True) + 1e-12)
    v = item_vec / (jnp.linalg.norm(item_vec, axis=1, keepdims=True) + 1e-12)
    cos = (u @ v.T) / tau
    lu = jnp.mean(jax.nn.logsumexp(cos, axis=1) - jnp.diagonal(cos))
    if directions == "user":
        return lu
    li = jnp.mean(jax.nn.logsumexp(cos, axis=0) - jnp.diagonal(cos))
    return 0.5 * (lu + li)


# ----------------------------------------------------------------------------- model


class LightGCN(nnx.Module):
    """LightGCN's free embeddings (Xavier-uniform, as the authors) and its propagation."""

    def __init__(self, n_users: int, n_items: int, dim: int = 64, n_layers: int = 2, *,
                 rngs: nnx.Rngs):
        check_int("n_users", n_users, min=1)
        check_int("n_items", n_items, min=1)
        check_int("dim", dim, min=1)
        check_int("n_layers", n_layers, min=1)
        init = nnx.initializers.xavier_uniform()
        self.user = nnx.Param(init(rngs.params(), (n_users, dim)))
        self.item = nnx.Param(init(rngs.params(), (n_items, dim)))
        self.n_layers = n_layers

    def __call__(self, graph: BipartiteGraph) -> ParitySums:
        return propagate(graph, self.user[...], self.item[...], self.n_layers)


@dataclasses.dataclass(frozen=True)
class NTSSMConfig:
    """Model and training settings; defaults are the authors' ml-1m run (run.sh)."""

    dim: int = 64
    n_layers: int = 2
    tau: float = 0.2
    learning_rate: float = 1e-3
    batch_size: int = 2048
    reg: float = 1e-4
    epochs: int = 200  # the authors' cap (they stop early on validation NDCG@20)

    def __post_init__(self):
        check_int("dim", self.dim, min=1)
        check_int("n_layers", self.n_layers, min=1)
        check_scalar("tau", self.tau, gt=0.0)
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_int("batch_size", self.batch_size, min=2)
        check_scalar("reg", self.reg, ge=0.0)
        check_int("epochs", self.epochs, min=1)


class GridFit(NamedTuple):
    """Trained LightGCNs of a grid: ``state`` has a leading member axis."""

    graphdef: Any
    state: Any
    losses: np.ndarray  # (steps, members): each member's loss per step

    @property
    def size(self) -> int:
        return int(self.losses.shape[1])

    def model(self, g: int) -> LightGCN:
        """Member ``g`` as a :class:`LightGCN`."""
        return nnx.merge(self.graphdef, jax.tree.map(lambda x: x[g], self.state))


def _batch_loss(model: LightGCN, graph, edges, idx, weights, tau, reg):
    parts = model(graph)
    u, i = edges[0][idx], edges[1][idx]
    loss = nt_ssm_loss(parts.user_even[u], parts.user_odd[u], parts.item_even[i],
                       parts.item_odd[i], weights, tau)
    b = idx.shape[0]
    penalty = (jnp.linalg.norm(model.user[...][u]) + jnp.linalg.norm(model.item[...][i])) / b / b
    return loss + reg * penalty


def train_grid(key: jax.Array, graph: BipartiteGraph, weights: TypeWeights,
               config: NTSSMConfig = NTSSMConfig(), *, seeds=None,
               train_config: TrainConfig | None = None) -> GridFit:
    """Train one LightGCN per grid member with NT-SSM, all in one compiled step.

    Args:
      key: the run's key.
      graph: :func:`bipartite_graph` of the training interactions (also the batches).
      weights: :class:`TypeWeights` whose leaves have a leading axis ``G`` (one member
        per row; :meth:`TypeWeights.stack`).
      config: :class:`NTSSMConfig` (shared by the members).
      seeds: ``(G,)`` integers: member ``g``'s initialisation and batch order come from
        ``fold_in(key, seeds[g])`` (members with the same seed start from the same
        embeddings and see the same batches: a paired comparison of alphas). Default
        ``0..G-1``.
      train_config: steps, progress, checkpoints; default ``epochs`` passes over the
        interactions (``floor(E / batch_size)`` steps each, the last partial batch
        dropped), with a progress bar.

    Returns:
      :class:`GridFit` (the members' trained embeddings and their per-step losses).
    """
    check_key("key", key)
    if not isinstance(config, NTSSMConfig):
        raise TypeError(f"config must be an NTSSMConfig, got {type(config).__name__}")
    if not isinstance(weights, TypeWeights):
        raise TypeError(f"weights must be a TypeWeights, got {type(weights).__name__}")
    alpha = weights.as_array()
    if alpha.ndim != 2:
        raise ValueError(f"weights must carry one leading grid axis (TypeWeights.stack), got "
                         f"leaves of shape {tuple(alpha.shape[:-1])}")
    n_members = alpha.shape[0]
    seeds = np.arange(n_members) if seeds is None else np.asarray(seeds)
    if seeds.shape != (n_members,) or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be ({n_members},) integers (one per member), got "
                         f"{seeds.shape} {seeds.dtype}")
    n_edges = int(graph.src.shape[0]) // 2
    if config.batch_size > n_edges:
        raise ValueError(f"batch_size must be <= the number of interactions ({n_edges}), "
                         f"got {config.batch_size}")
    steps_per_epoch = n_edges // config.batch_size
    if train_config is None:
        train_config = TrainConfig(steps=config.epochs * steps_per_epoch,
                                   log_every=max(1, steps_per_epoch), desc="ntssm: LightGCN grid")
    member_keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(jnp.asarray(seeds))
    init_keys, order_keys = jax.vmap(jax.random.split, out_axes=1)(member_keys)
    graphdef = nnx.graphdef(LightGCN(graph.n_users, graph.n_items, config.dim,
                                     config.n_layers, rngs=nnx.Rngs(0)))
    state = jax.vmap(lambda k: nnx.state(LightGCN(
        graph.n_users, graph.n_items, config.dim, config.n_layers,
        rngs=nnx.Rngs(params=k))))(init_keys)
    edges = (graph.src[:n_edges], graph.dst[:n_edges] - graph.n_users)  # users -> items
    data = {"graph": graph, "edges": edges, "alpha": alpha,
            "order": jax.random.key_data(order_keys)}
    b = config.batch_size

    def batch_fn(step, key, data):
        epoch, j = step // steps_per_epoch, step % steps_per_epoch

        def one(k):
            perm = jax.random.permutation(jax.random.fold_in(jax.random.wrap_key_data(k),
                                                             epoch), n_edges)
            return jax.lax.dynamic_slice(perm, (j * b,), (b,))

        return jax.vmap(one)(data["order"])

    def loss_fn(params, idx, key, data):
        def member(p, i, a):
            w = TypeWeights(a[0], a[1], a[2], a[3])
            return _batch_loss(nnx.merge(graphdef, p), data["graph"], data["edges"], i, w,
                               config.tau, config.reg)

        per = jax.vmap(member)(params, idx, data["alpha"])
        return jnp.sum(per), per

    out, _, per = fit(loss_fn, state, optax.adam(config.learning_rate), key, train_config,
                      batch_fn=batch_fn, has_aux=True, data=data)
    return GridFit(graphdef, out.params, np.asarray(per))
