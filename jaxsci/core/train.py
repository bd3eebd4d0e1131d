"""The optax training loop every method in jaxsci reuses.

``fit(loss_fn, params, optimizer, key, config)`` minimises ``loss_fn`` with an
``optax.GradientTransformation`` and returns the final :class:`TrainState` and
the loss of every step it ran. ``init`` builds the state; ``TrainState`` is a
pytree, so a state can be passed back to ``fit`` (``state=``) to continue.

Design
------
*One jitted step.* A step (draw a batch, ``value_and_grad``, ``optimizer.update``,
``optax.apply_updates``, split the key) is a single ``jax.jit`` function of the
state's arrays, traced and compiled once and then reused for every step. The
Python loop around it only dispatches: JAX runs it asynchronously, and the host
waits for the device only every ``log_every`` steps (to show the loss on the
progress bar and to move the loss history to NumPy) and at checkpoints. A Python
loop rather than ``lax.scan`` keeps the progress bar, checkpoints and
interruption (Ctrl-C) between any two steps, at the price of one dispatch per
step.

*Pytrees and equinox modules.* ``params`` is any pytree. Its floating-point
array leaves are trained; every other leaf (integer arrays, Python scalars,
functions such as an ``equinox.nn.MLP``'s activation) is held fixed, exactly as
``equinox.filter_value_and_grad`` would treat it, so an ``equinox.Module`` is
passed as it is. A ``flax.nnx`` module must be ``nnx.split`` by the caller and
its ``State`` trained (``loss_fn`` merges it back with ``nnx.merge``).

*Randomness.* ``TrainState.key`` is a typed key split at every step into the
next state's key and the step's keys (one for ``batch_fn``, one for
``loss_fn``), so a step's randomness depends only on the state it starts from.

*Exact resume.* With ``checkpoint_every > 0`` the whole state (params, optimizer
state, the key's raw bits, the step counter) and the loss history so far are
saved with orbax every ``checkpoint_every`` steps and at the end. ``fit`` on a
directory that already holds a checkpoint restores the latest one into the
structure of a freshly initialised state and continues to ``config.steps``.
Since every step is a deterministic function of the state alone, and the state
is saved bit for bit, an interrupted and resumed run computes the same steps as
an uninterrupted one: same parameters, same losses. Calling ``fit`` again on a
finished run's directory trains nothing and returns the saved state; a
checkpoint whose arrays do not match the given params and optimizer is refused
with a ``ValueError`` rather than half-restored.

*No silent NaN.* The losses are checked at every host sync; a NaN or inf raises
``FloatingPointError`` naming the step, before any later checkpoint is written.

Each call to ``fit`` compiles its step once (the step closes over ``loss_fn``
and the optimizer); a script that calls ``fit`` in a loop pays one compile per
call.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm import tqdm

from jaxsci.core.validation import check_int, check_key

# Resumes are reported on the "jaxsci" logger (the CLI shows its INFO records).
logger = logging.getLogger("jaxsci")

__all__ = ["TrainConfig", "TrainState", "init", "fit"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How long to train, and how to report and checkpoint.

    Attributes:
      steps: total optimisation steps, counted from step 0 of the run (a
        resumed run continues up to ``steps``, it does not add ``steps`` more).
      checkpoint_every: save a checkpoint every this many steps and at the end;
        0 disables checkpoints (``checkpoint_dir`` is then ignored).
      checkpoint_dir: where orbax keeps the checkpoints (made absolute).
      progress: show a tqdm progress bar on stderr.
      log_every: how often (in steps) the bar's postfix shows the loss; also how
        often the host waits for the device.
      keep: how many of the latest checkpoints orbax keeps.
      desc: the progress bar's name (say what is being trained).
      data_parallel: shard the batch's leading axis over all of ``jax.devices()``
        (a 1-D ``"batch"`` mesh, parameters and optimizer state replicated) when
        more than one device is present and a ``batch_fn`` is given. ``None``
        (default) does so automatically; ``False`` keeps everything on one device.
        The same code runs on one CPU, several GPUs, or several hosts after
        ``jax.distributed.initialize()``; the loss trajectory equals the
        one-device run up to floating-point reassociation of the batch mean.
    """

    steps: int
    checkpoint_every: int = 0
    checkpoint_dir: str | os.PathLike | None = None
    progress: bool = True
    log_every: int = 50
    keep: int = 2
    desc: str = "train"
    data_parallel: bool | None = None

    def __post_init__(self) -> None:
        if self.data_parallel is not None and not isinstance(self.data_parallel, bool):
            raise TypeError(f"data_parallel must be a bool or None, got {self.data_parallel!r}")
        check_int("steps", self.steps, min=1)
        check_int("checkpoint_every", self.checkpoint_every, min=0)
        check_int("log_every", self.log_every, min=1)
        check_int("keep", self.keep, min=1)
        if not isinstance(self.progress, bool):
            raise TypeError(
                f"progress must be a bool, got {type(self.progress).__name__} {self.progress!r}"
            )
        if self.checkpoint_dir is not None and not isinstance(
            self.checkpoint_dir, str | os.PathLike
        ):
            raise TypeError(
                "checkpoint_dir must be a str or os.PathLike, "
                f"got {type(self.checkpoint_dir).__name__}"
            )
        if self.checkpoint_every > 0 and self.checkpoint_dir is None:
            raise ValueError(
                f"checkpoint_dir must be given when checkpoint_every > 0 "
                f"(got checkpoint_every={self.checkpoint_every}, checkpoint_dir=None)"
            )


class TrainState(NamedTuple):
    """Everything a step needs; a pytree.

    Attributes:
      params: the parameters (any pytree, e.g. an ``equinox.Module``).
      opt_state: the optimizer's state, over the floating-point array leaves of
        ``params``.
      key: a typed PRNG key, split at every step.
      step: int32 scalar, the number of steps taken.
    """

    params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array


def _typed_key(key: Any) -> jax.Array:
    key = check_key("key", key)
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != (2,):
            raise ValueError(f"key must be a single key, got a raw key array of shape {key.shape}")
        # A legacy uint32[2] key holds the same bits as a threefry typed key, so
        # jax.random.PRNGKey(s) and jax.random.key(s) train identically.
        key = jax.random.wrap_key_data(key)
    elif key.shape != ():
        raise ValueError(f"key must be a single key, got a batch of keys of shape {key.shape}")
    return key


def _trainable(params: Any) -> Any:
    return eqx.filter(params, eqx.is_inexact_array)


def _canonical(tree: Any) -> Any:
    """Array leaves as JAX arrays of the dtype jit would give them, not weak-typed.

    The jitted step returns exactly such arrays; feeding it anything else on
    the first call (NumPy float64, a weak-typed ``jnp.asarray(1.0)``) would
    compile it a second time on the next.
    """

    def fix(x: Any) -> Any:
        if not eqx.is_array(x) or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x
        return jnp.asarray(x, dtype=jax.dtypes.canonicalize_dtype(x.dtype))

    return jax.tree_util.tree_map(fix, tree)


def init(params: Any, optimizer: optax.GradientTransformation, key: jax.Array) -> TrainState:
    """The state at step 0: ``optimizer.init`` on the floating-point leaves of ``params``."""
    key = _typed_key(key)
    _check_optimizer(optimizer)
    if not jax.tree_util.tree_leaves(_trainable(params)):
        raise TypeError(
            "params must contain at least one floating-point array leaf to train, "
            f"got a {type(params).__name__} without one"
        )
    params = _canonical(params)
    opt_state = _canonical(optimizer.init(_trainable(params)))
    return TrainState(params, opt_state, key, jnp.asarray(0, dtype=jnp.int32))


def _check_optimizer(optimizer: Any) -> None:
    if not (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        raise TypeError(
            "optimizer must be an optax.GradientTransformation (e.g. optax.adam(1e-3)), "
            f"got {type(optimizer).__name__}"
        )


def _split_output(out: Any, has_aux: bool) -> tuple[jax.Array, Any]:
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                "with has_aux=True, loss_fn must return a pair (loss, aux), "
                f"got {type(out).__name__}"
            )
        loss, aux = out
    else:
        if isinstance(out, tuple):
            raise TypeError(
                f"loss_fn returned a tuple of length {len(out)}; if it returns (loss, aux), "
                "pass has_aux=True"
            )
        loss, aux = out, None
    if jnp.ndim(loss) != 0:
        raise TypeError(f"loss_fn must return a scalar loss, got shape {jnp.shape(loss)}")
    return loss, aux


def _batch_mesh(config: TrainConfig, batch_fn: Any) -> Mesh | None:
    """The 1-D data-parallel mesh, or None when the run stays on one device."""
    devices = jax.devices()
    wanted = config.data_parallel if config.data_parallel is not None else len(devices) > 1
    if not wanted or batch_fn is None or len(devices) == 1:
        return None
    return Mesh(np.asarray(devices), ("batch",))


def _shard_batch(batch: Any, mesh: Mesh | None) -> Any:
    if mesh is None:
        return batch
    n = mesh.devices.size
    spec = NamedSharding(mesh, PartitionSpec("batch"))

    def constrain(x):
        if eqx.is_array(x) and x.ndim >= 1 and x.shape[0] % n == 0:
            return jax.lax.with_sharding_constraint(x, spec)
        return x  # a leaf without a divisible batch axis stays as XLA places it

    return jax.tree_util.tree_map(constrain, batch)


def _replicate(tree: Any, mesh: Mesh | None) -> Any:
    if mesh is None:
        return tree
    rep = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(
        lambda x: jax.device_put(x, rep) if eqx.is_array(x) else x, tree)


def _make_step(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    static: TrainState,
    batch_fn: Callable[[jax.Array, jax.Array], Any] | None,
    has_aux: bool,
    mesh: Mesh | None = None,
    with_data: bool = False,
) -> Callable[[TrainState, Any], tuple[TrainState, jax.Array, Any]]:
    # The non-array part of the state (module structure, activation functions)
    # is closed over, so jit sees a plain pytree of arrays and compiles once. ``data``
    # is an argument, not a closed-over constant.
    def step(dyn: TrainState, data: Any) -> tuple[TrainState, jax.Array, Any]:
        state = eqx.combine(dyn, static)
        extra = (data,) if with_data else ()
        if batch_fn is None:
            key, loss_key = jax.random.split(state.key)
            call = lambda p: loss_fn(p, loss_key, *extra)
        else:
            key, batch_key, loss_key = jax.random.split(state.key, 3)
            batch = _shard_batch(batch_fn(state.step, batch_key, *extra), mesh)
            call = lambda p: loss_fn(p, batch, loss_key, *extra)
        diff, fixed = eqx.partition(state.params, eqx.is_inexact_array)

        def objective(d: Any) -> tuple[jax.Array, Any]:
            return _split_output(call(eqx.combine(d, fixed)), has_aux)

        (loss, aux), grads = jax.value_and_grad(objective, has_aux=True)(diff)
        updates, opt_state = optimizer.update(grads, state.opt_state, diff)
        diff = optax.apply_updates(diff, updates)
        new = TrainState(eqx.combine(diff, fixed), opt_state, key, state.step + 1)
        return eqx.filter(new, eqx.is_array), loss, aux

    return jax.jit(step)


class _History:
    """Per-step losses (and aux leaves) kept on device until the next host sync.

    ``aux`` may cover fewer steps than ``loss`` (its tail) when a run saved
    without ``has_aux`` is resumed with it.
    """

    def __init__(self, loss: np.ndarray | None, aux: list[np.ndarray] | None, has_aux: bool):
        self.has_aux = has_aux
        self.loss = [loss] if loss is not None else []
        self.aux = [list(aux)] if (has_aux and aux) else []
        self._pending: list[tuple[jax.Array, list[jax.Array]]] = []
        self.flushed = 0  # steps moved to the host in this call

    def append(self, loss: jax.Array, aux: Any) -> None:
        self._pending.append((loss, jax.tree_util.tree_leaves(aux)))

    def flush(self, first_step: int) -> float:
        """Move pending values to NumPy; return the last loss. Raise on NaN/inf."""
        # One device_get for the whole chunk: one host sync, and no per-length
        # compile as a jnp.stack of the chunk would need.
        host = jax.device_get(self._pending)
        self._pending = []
        losses = np.stack([loss for loss, _ in host])
        bad = np.flatnonzero(~np.isfinite(losses))
        if bad.size:
            at = first_step + self.flushed + int(bad[0])
            raise FloatingPointError(
                f"loss became {losses[bad[0]]} at step {at}; no checkpoint was written "
                "after it, so the last one (if any) holds a state from before"
            )
        self.loss.append(losses)
        if self.has_aux and host[0][1]:
            self.aux.append(
                [np.stack(leaves) for leaves in zip(*(a for _, a in host), strict=True)]
            )
        self.flushed += losses.shape[0]
        return float(losses[-1])

    def losses(self) -> np.ndarray:
        return np.concatenate(self.loss) if self.loss else np.zeros((0,), np.float32)

    def aux_leaves(self) -> list[np.ndarray]:
        return [np.concatenate(parts) for parts in zip(*self.aux, strict=True)]


def _saveable(dyn: TrainState) -> list[jax.Array]:
    # Typed keys have no on-disk format: save the raw bits, rewrap on restore.
    return jax.tree_util.tree_leaves(dyn._replace(key=jax.random.key_data(dyn.key)))


def _restore(
    manager: ocp.CheckpointManager, step: int, fresh: TrainState, directory: str
) -> tuple[TrainState, dict[str, Any]]:
    """Restore checkpoint ``step`` into the structure, dtypes and shardings of ``fresh``.

    ``fresh`` is the array part of a state (``eqx.filter(state, eqx.is_array)``):
    only arrays are saved; the rest (module structure, functions) comes from
    the caller's ``params``.
    """
    target = fresh._replace(key=jax.random.key_data(fresh.key))
    leaves, treedef = jax.tree_util.tree_flatten(target)
    # Compare against the saved metadata first: orbax's own mismatch errors come
    # with a flood of unawaited-coroutine warnings and name no argument.
    saved = list(manager.item_metadata(step)["state"].tree)
    where = f"checkpoint_dir {directory!r} holds a checkpoint (step {step}) that"
    if len(saved) != len(leaves):
        raise ValueError(
            f"{where} has {len(saved)} arrays, but these params and optimizer give a state "
            f"of {len(leaves)}: resume with the params and optimizer it was written with"
        )
    for i, (meta, leaf) in enumerate(zip(saved, leaves, strict=True)):
        if tuple(meta.shape) != tuple(leaf.shape) or np.dtype(meta.dtype) != leaf.dtype:
            raise ValueError(
                f"{where} does not match these params and optimizer: state array {i} was "
                f"saved as {np.dtype(meta.dtype)}{list(meta.shape)}, expected "
                f"{leaf.dtype}{list(leaf.shape)}"
            )
    try:
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(leaves),
                history=ocp.args.StandardRestore(),
            ),
        )
    except ValueError as exc:
        raise ValueError(
            f"checkpoint_dir {directory!r} holds a checkpoint (step {step}) that does not "
            f"match these params and optimizer: {exc}"
        ) from exc
    state = jax.tree_util.tree_unflatten(treedef, list(restored.state))
    state = state._replace(
        key=jax.random.wrap_key_data(state.key, impl=jax.random.key_impl(fresh.key))
    )
    return state, dict(restored.history)


def fit(
    loss_fn: Callable[..., Any],
    params: Any,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    config: TrainConfig,
    *,
    batch_fn: Callable[[jax.Array, jax.Array], Any] | None = None,
    state: TrainState | None = None,
    has_aux: bool = False,
    full_history: bool = False,
    data: Any = None,
) -> tuple[TrainState, np.ndarray] | tuple[TrainState, np.ndarray, Any]:
    """Minimise ``loss_fn`` for ``config.steps`` steps, checkpointing and resuming.

    Args:
      loss_fn: ``loss_fn(params, key) -> loss`` or, with ``batch_fn``,
        ``loss_fn(params, batch, key) -> loss``; ``loss`` a scalar. With
        ``has_aux=True`` it returns ``(loss, aux)``, ``aux`` a pytree of arrays.
        Must be jittable.
      params: the initial parameters, any pytree (see the module docstring for
        which leaves are trained). Ignored when ``state`` is given or a
        checkpoint is resumed.
      optimizer: an ``optax.GradientTransformation``.
      key: a PRNG key (``jax.random.key(seed)``); the run's randomness.
      config: a :class:`TrainConfig`.
      batch_fn: ``batch_fn(step, key) -> batch``, traced into the jitted step, so
        it must be jittable (e.g. ``jax.random.choice`` indices into a fixed
        dataset closed over as arrays).
      state: continue from this state instead of ``init(params, optimizer, key)``.
        A checkpoint in ``config.checkpoint_dir`` takes precedence: ``state``
        then only gives the structure to restore into.
      has_aux: ``loss_fn`` returns ``(loss, aux)``; ``fit`` then also returns the
        history of ``aux``.
      full_history: return the history of every step saved in
        ``config.checkpoint_dir`` (the resumed part too), not only of the steps
        run in this call.
      data: a pytree of arrays the step reads but does not train (a frozen model's
        parameters, a data set), or ``None``. Given, it is passed to the jitted step
        as an argument and on to the functions as a last argument:
        ``batch_fn(step, key, data)`` and ``loss_fn(params, [batch,] key, data)``.
        Arrays closed over by ``loss_fn`` or ``batch_fn`` instead become constants of
        the compiled program, which for large ones (a pretrained model's weights)
        makes XLA slow to compile and to constant-fold them.

    Returns:
      ``(state, losses)``: the state after step ``config.steps`` (or the
      resumed state, if it was already past it) and a NumPy array of the losses
      of the steps run in this call, in order (``losses[i]`` is the loss at the
      parameters before step ``start + i``). With ``has_aux=True``,
      ``(state, losses, aux)`` with ``aux``'s leaves stacked along a leading step
      axis, as NumPy arrays.

    Raises:
      TypeError, ValueError: bad arguments, before anything is traced, or a
        checkpoint that does not match ``params`` and ``optimizer``.
      FloatingPointError: the loss became NaN or inf (noticed at the next host
        sync; no checkpoint is written after it).
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if batch_fn is not None and not callable(batch_fn):
        raise TypeError(f"batch_fn must be callable or None, got {type(batch_fn).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    for name, flag in (("has_aux", has_aux), ("full_history", full_history)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__} {flag!r}")
    _check_optimizer(optimizer)
    if state is None:
        state = init(params, optimizer, key)
    else:
        _typed_key(key)
        if not isinstance(state, TrainState):
            raise TypeError(f"state must be a TrainState or None, got {type(state).__name__}")
        state = state._replace(key=_typed_key(state.key))

    manager = None
    directory = None
    prev: dict[str, Any] = {}
    if config.checkpoint_every > 0:
        directory = os.path.abspath(os.fspath(config.checkpoint_dir))
        manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=config.keep, create=True),
            # Named handlers let item_metadata read a checkpoint before restoring it.
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "history": ocp.StandardCheckpointHandler(),
            },
        )
    dyn, static = eqx.partition(state, eqx.is_array)
    dyn = _canonical(dyn)
    try:
        if manager is not None and (latest := manager.latest_step()) is not None:
            dyn, prev = _restore(manager, latest, dyn, directory)
            dyn = _canonical(dyn)
            logger.info("%sresumed from step %d of %d (%s)",
                        f"{config.desc}: " if config.desc else "", latest, config.steps,
                        directory)
        mesh = _batch_mesh(config, batch_fn)
        dyn = _replicate(dyn, mesh)
        step_fn = functools.partial(
            _make_step(loss_fn, optimizer, static, batch_fn, has_aux, mesh,
                       with_data=data is not None), data=data)
        start = int(dyn.step)
        prev_loss = prev.get("loss")
        prev_aux = list(prev["aux"]) if has_aux and "aux" in prev else []
        history = _History(prev_loss, prev_aux, has_aux)
        n_prev = 0 if prev_loss is None else int(np.shape(prev_loss)[0])
        n_prev_aux = int(np.shape(prev_aux[0])[0]) if prev_aux else 0

        with tqdm(
            total=config.steps,
            initial=min(start, config.steps),
            disable=not config.progress,
            desc=config.desc,
            dynamic_ncols=True,
        ) as bar:
            for done in range(start + 1, config.steps + 1):
                dyn, loss, aux = step_fn(dyn)
                history.append(loss, aux)
                bar.update(1)
                checkpoint = manager is not None and (
                    done % config.checkpoint_every == 0 or done == config.steps
                )
                if checkpoint or done % config.log_every == 0 or done == config.steps:
                    last = history.flush(start)
                    bar.set_postfix(loss=f"{last:.4g}", refresh=False)
                if checkpoint:
                    saved = {"loss": history.losses()}
                    if aux_leaves := history.aux_leaves():
                        saved["aux"] = aux_leaves
                    manager.save(
                        done,
                        args=ocp.args.Composite(
                            state=ocp.args.StandardSave(_saveable(dyn)),
                            history=ocp.args.StandardSave(saved),
                        ),
                    )
        if manager is not None:
            # Saves are asynchronous: the files must be complete before returning.
            manager.wait_until_finished()
    finally:
        if manager is not None:
            manager.close()

    state = eqx.combine(dyn, static)
    losses = history.losses()
    if not full_history:
        losses = losses[n_prev:]
    if not has_aux:
        return state, losses
    aux_struct = jax.eval_shape(step_fn, dyn)[2]
    struct_leaves, treedef = jax.tree_util.tree_flatten(aux_struct)
    aux_leaves = history.aux_leaves()
    if not aux_leaves:
        # No step ran in this call: empty histories of the right shape.
        aux_leaves = [np.zeros((0, *s.shape), s.dtype) for s in struct_leaves]
    if len(aux_leaves) != len(struct_leaves):
        raise ValueError(
            f"the aux history in checkpoint_dir {directory!r} does not match loss_fn's aux "
            f"({len(aux_leaves)} saved arrays, {len(struct_leaves)} expected)"
        )
    if full_history and struct_leaves and n_prev_aux != n_prev:
        raise ValueError(
            f"full_history=True, but checkpoint_dir {directory!r} holds aux for only the last "
            f"{n_prev_aux} of its {n_prev} steps (it was written with has_aux=False)"
        )
    if not full_history:
        aux_leaves = [leaf[n_prev_aux:] for leaf in aux_leaves]
    return state, losses, jax.tree_util.tree_unflatten(treedef, aux_leaves)
