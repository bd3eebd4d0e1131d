"""Training a :class:`~jaxsci.common.lm.model.Transformer` through :func:`jaxsci.core.fit`.

The model is ``nnx.split`` into its graph definition and its ``State``; the State is
what :func:`jaxsci.core.fit` optimises (one jitted step, tqdm progress, orbax
checkpoints every ``checkpoint_every`` steps, exact resume from ``checkpoint_dir``),
and ``nnx.merge`` rebuilds the model inside the loss and at the end. The objective
is next-token cross-entropy on fixed-length token windows (rows of ``data``).

:func:`save_model` / :func:`load_transformer` write and read a trained model (its
config as JSON and its parameters with orbax), so a checkpoint produced by a command
(``jaxsci reproduce dflash`` writes them under ``runs/dflash/checkpoints``) can be
reused without training again. Checkpoints are produced, never committed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxsci.common.lm.model import Transformer, TransformerConfig
from jaxsci.core.train import TrainConfig, fit
from jaxsci.core.validation import check_array, check_int, check_key, check_scalar

__all__ = ["lm_loss", "lm_optimizer", "train_lm", "save_model", "restore_model",
           "load_transformer"]


def lm_loss(model: Transformer, tokens: Int[Array, "b t"]) -> Float[Array, ""]:
    """Mean next-token cross-entropy (nats) of ``tokens[:, 1:]`` given ``tokens[:, :-1]``.

    Differentiable in the model's parameters (``nnx.split`` the model and
    ``nnx.merge`` it inside the differentiated function). ``tokens``: ``(b, t)``
    integer ids, ``t >= 2``.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    tokens = check_array("tokens", tokens, ndim=2, dtype="integer")
    if tokens.shape[1] < 2:
        raise ValueError(f"tokens must hold at least 2 per row, got shape {tokens.shape}")
    v = model.config.vocab_size
    tokens = eqx.error_if(jnp.asarray(tokens), jnp.any((tokens < 0) | (tokens >= v)),
                          f"tokens must be ids in [0, {v - 1}]")
    logits = model(tokens[:, :-1]).logits
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def lm_optimizer(learning_rate: float, steps: int, warmup: int = 50,
                 weight_decay: float = 0.01) -> optax.GradientTransformation:
    """The usual small-LM recipe: clip at norm 1, AdamW (b2 = 0.95), warmup + cosine decay."""
    sched = optax.warmup_cosine_decay_schedule(
        0.0, learning_rate, min(warmup, max(steps - 1, 1)), steps, end_value=0.1 * learning_rate
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(sched, b2=0.95, weight_decay=weight_decay),
    )


def _index_batches(data: jax.Array, batch_size: int):
    def batch_fn(step, key):
        return data[jax.random.randint(key, (batch_size,), 0, data.shape[0])]

    return batch_fn


def train_lm(
    key: jax.Array,
    config: TransformerConfig,
    data: Int[Array, "n t"],
    *,
    steps: int = 1000,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    warmup: int = 50,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    progress: bool = False,
    desc: str = "train LM",
) -> tuple[Transformer, np.ndarray]:
    """Train a fresh :class:`Transformer` on the rows of ``data``; return ``(model, losses)``.

    Args:
      key: PRNG key (initialisation and batches).
      config: the model's shape.
      data: ``(n, t)`` token ids; each step draws ``batch_size`` rows uniformly.
      steps, batch_size, learning_rate, warmup: the optimisation (:func:`lm_optimizer`).
      checkpoint_dir, checkpoint_every: orbax checkpoints of the whole training state
        (resumed if ``checkpoint_dir`` already holds one; see :func:`jaxsci.core.fit`).
      progress: show a progress bar, named ``desc``.
      desc: the progress bar's name (say what is trained).

    Returns ``losses`` of every step of the run, those of a resumed part included.
    """
    check_key("key", key)
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    data = check_array("data", data, ndim=2, dtype="integer", ge=0, le=config.vocab_size - 1)
    if data.shape[0] < 1 or data.shape[1] < 2:
        raise ValueError(f"data must hold at least one row of 2 tokens, got shape {data.shape}")
    if data.shape[1] - 1 > config.max_len:
        raise ValueError(
            f"data rows of {data.shape[1]} tokens exceed the context: at most "
            f"max_len + 1 = {config.max_len + 1}"
        )
    check_int("steps", steps, min=1)
    check_int("batch_size", batch_size, min=1)
    check_scalar("learning_rate", learning_rate, gt=0.0)
    check_int("warmup", warmup, min=0)
    k_init, k_fit = jax.random.split(key)
    model = Transformer(config, rngs=nnx.Rngs(k_init))
    graphdef, state = nnx.split(model)

    def loss_fn(params, batch, k):
        return lm_loss(nnx.merge(graphdef, params), batch)

    out, losses = fit(
        loss_fn,
        state,
        lm_optimizer(learning_rate, steps, warmup),
        k_fit,
        TrainConfig(steps=steps, progress=progress, log_every=max(1, min(50, steps // 10)),
                    checkpoint_every=checkpoint_every, checkpoint_dir=checkpoint_dir,
                    desc=desc),
        batch_fn=_index_batches(jnp.asarray(data, jnp.int32), batch_size),
        full_history=True,
    )
    return nnx.merge(graphdef, out.params), losses


# ----------------------------------------------------------------- save / load


def save_model(directory: str | os.PathLike, model: nnx.Module) -> Path:
    """Write ``model``'s parameters (orbax) and its ``config`` (JSON) into ``directory``.

    ``model`` must have a dataclass ``config`` attribute (a :class:`Transformer` or a
    :class:`jaxsci.llm.dflash.Drafter`; a drafter's ``target_config`` is saved too).
    An existing checkpoint there is replaced.
    """
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"model must have a dataclass config, got {type(model).__name__}")
    path = Path(directory).absolute()
    path.mkdir(parents=True, exist_ok=True)
    meta = {"class": type(model).__name__, "config": dataclasses.asdict(config)}
    target = getattr(model, "target_config", None)  # a drafter: the target's widths
    if dataclasses.is_dataclass(target):
        meta["target_config"] = dataclasses.asdict(target)
        meta["target_config_class"] = type(target).__name__
    (path / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path / "state", nnx.state(model), force=True)
    return path


def restore_model(directory: str | os.PathLike, model: nnx.Module) -> nnx.Module:
    """The parameters saved in ``directory`` loaded into a model shaped like ``model``.

    ``model`` only gives the structure (it may come from ``nnx.eval_shape``); it is
    not modified.
    """
    path = Path(directory).absolute() / "state"
    if not path.exists():
        raise ValueError(f"directory {str(directory)!r} holds no saved model (no state/)")
    graphdef, abstract = nnx.split(model)
    with ocp.StandardCheckpointer() as ckpt:
        state = ckpt.restore(path, abstract)
    return nnx.merge(graphdef, state)


def load_transformer(directory: str | os.PathLike) -> Transformer:
    """A :class:`Transformer` saved by :func:`save_model`."""
    meta = json.loads((Path(directory) / "config.json").read_text())
    if meta.get("class") != "Transformer":
        raise ValueError(f"directory {str(directory)!r} holds a {meta.get('class')}, "
                         "not a Transformer")
    config = TransformerConfig(**meta["config"])
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    return restore_model(directory, abstract)
