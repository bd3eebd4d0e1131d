r"""LOAM: LLM-designed observation and action spaces, chosen by continuous racing (ICML 2026).

The paper lets an LLM write an agent's observation model ``compute_obs(raw) -> obs`` and
action model ``compute_action(a) -> env action`` for a raw environment, samples several
such designs (LLM outputs are stochastic and of uneven quality) and **races** them: all
designs start training together, an optimistic statistic of their recent returns decides
which continue, losers stop, and the total number of environment steps equals one
ordinary training run. This module gives every piece; :mod:`jaxsci.experiments.loam`
runs the study.

**Raw environments** (pure functions, jit / vmap over states, actions and physical
constants, differentiable in the action): :class:`CartPole` (continuous force; Barto,
Sutton & Anderson 1983 with Florian's 2007 corrected equations, as in Gym:
:math:`\ddot\theta = (g\sin\theta - \cos\theta\,\tfrac{F + m l \dot\theta^2\sin\theta}{M})
/ (l(4/3 - m\cos^2\theta / M))`, :math:`\ddot x = \tfrac{F + m l\dot\theta^2\sin\theta}{M}
- m l\ddot\theta\cos\theta / M`, explicit Euler with ``tau``) and :class:`Pendulum` (Gym's
Pendulum-v1: :math:`\dot\omega = 3g/(2l)\sin\theta + 3u/(m l^2)`, semi-implicit Euler,
cost :math:`\bar\theta^2 + 0.1\omega^2 + 0.001u^2` with :math:`\bar\theta` the wrapped
angle). They expose **named raw variables** (:meth:`AbstractEnv.raw`) with realistic
nuisances: lengths in centimetres, angles in degrees (the pendulum's unwrapped, growing
without bound as it spins), an elapsed-step counter, and distractor channels (a noisy
vibration sensor, a drifting motor temperature, a constant mass reading). The raw
observation, all variables as they come, is :func:`default_design`.

**Designs** (:class:`Design`): a pair of functions, traced by JAX. Two sources:

* the **primitive library** (:data:`FEATURES`, :data:`ACTIONS`): per raw variable one
  of a few transformations (omit, keep, convert to SI units, sine and cosine, scale),
  and one action map (unchanged, scaled, tanh-scaled, clipped, bang-bang);
  :func:`sample_design` composes a design by **sampled option-scoring decisions** of any
  :class:`~jaxsci.common.lm.chat.ChatModel` (:func:`option_scores` asks one question per
  raw variable; :func:`sample_design` samples each choice from
  ``softmax(log p / temperature)``): a programmatic replacement of the paper's free-text
  step, for small models;
* **LLM-written code** (the paper's path): :func:`code_prompt` asks for the two functions,
  :func:`extract_code` takes the reply's Python block, and :func:`check_code` runs the
  **gates**: (1) the import gate, the code and a harness in the sandbox
  (:func:`~jaxsci.common.agents.run_code`: a child process with CPU, memory and wall
  limits and no network) that defines and calls both functions on sample raw
  variables; (2) the jit gate, in-process, after the first passed: ``jax.jit`` of both
  functions on a batch of raw states, 1-D float output of at most ``max_obs`` entries,
  action of the environment's shape, finite everywhere (extreme states included),
  deterministic (two calls and jit == eager agree). :func:`code_design` turns passing
  code into a :class:`Design`; failing code raises :class:`GateError` naming the gate.

**PPO** (:func:`ppo_init`, :func:`ppo_update`; config :class:`PPOConfig`): clipped
surrogate (Schulman et al. 2017), GAE(:math:`\lambda`), a Gaussian policy and a value
network (two tanh MLPs), Adam, ``n_envs`` environments vmapped, ``lax.scan`` over the
rollout steps, minibatch epochs in ``lax.scan``. It is a CPU stand-in for the paper's
FastTD3 (an off-policy method for GPU-parallel simulators). There is deliberately no
running observation normalisation: the observation design is what is being compared.
Truncation at ``max_steps`` bootstraps from the value of the last observation.
:func:`designs_update` is one PPO update of every design at once (vmapped over designs,
the design picked by ``lax.switch``), with an ``active`` mask: a stopped design's state
is left unchanged and its steps are not counted.

**Racing** (:func:`race`): the driver trains the active designs in rungs of ``rung``
updates, records each design's **recent return** (the mean return of the last finished
episode of each of its environments) after every update, and after each rung asks a
rule (:class:`AbstractRacingRule`) which designs continue, reading the last ``window``
updates (all survivors have trained in the same updates, so the window is a set of
aligned blocks):

* :class:`UCBRace`: keep a design while its upper bound
  :math:`\bar r_i + c\,s_i/\sqrt{w}` reaches the best lower bound
  :math:`\max_j \bar r_j - c\,s_j/\sqrt{w}` (a Hoeffding-style race, optimistic);
* :class:`SuccessiveHalving`: keep the top ``fraction`` by the optimistic statistic
  :math:`\bar r_i + c\,s_i/\sqrt w` at every rung;
* :class:`FRace` (Birattari et al. 2002): the Friedman test over the window's blocks
  (ranks within each update, so a common learning trend and per-update noise cancel);
  when it rejects at ``alpha``, designs whose rank sum differs from the best by more
  than the post-hoc critical difference stop (normal quantile for the post-hoc t).

The budget is exact: ``sum(updates of every design) == budget``; when fewer update
slots remain than active designs, the driver keeps the best by the rule's statistic.
The race's answer is the active design with the best statistic at the end.

Departures from the paper: classic-control tasks instead of HumanoidBench / Isaac Lab,
PPO on CPU instead of FastTD3 on GPU, and (in quick configs) primitive composition by
option scoring instead of free-text code; the paper's exact racing statistic is not
given in the abstract, so three standard ones share one interface.

>>> import jax
>>> env = CartPole()
>>> s = env.reset(jax.random.key(0))
>>> sorted(env.raw(s))[:2]
['cart_mass_kg', 'cart_position_cm']
>>> d = default_design(env)
>>> d.compute_obs(env.raw(s)).shape
(8,)
"""

from __future__ import annotations

import abc
import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.core.validation import check_int, check_key, check_scalar

__all__ = [
    "ACTIONS",
    "ENVS",
    "FEATURES",
    "LETTERS",
    "AbstractEnv",
    "AbstractRacingRule",
    "CartPole",
    "Design",
    "EnvState",
    "FRace",
    "GateError",
    "GateReport",
    "PPOConfig",
    "Pendulum",
    "RaceResult",
    "SuccessiveHalving",
    "UCBRace",
    "Variable",
    "check_code",
    "code_design",
    "code_prompt",
    "default_design",
    "designs_init",
    "designs_update",
    "evaluate",
    "extract_code",
    "make_env",
    "option_prompt",
    "option_scores",
    "ppo_init",
    "ppo_update",
    "primitive_design",
    "race",
    "sample_design",
    "sample_raw",
]


# --------------------------------------------------------------------------- environments


class EnvState(NamedTuple):
    """A raw environment's state: physical state ``q``, step count ``t``, nuisance ``aux``."""

    q: jax.Array
    t: jax.Array
    aux: jax.Array


@dataclasses.dataclass(frozen=True)
class Variable:
    """A named raw variable: its name, its kind (which primitives apply), its meaning."""

    name: str
    kind: str  # length_cm | velocity_cm | angle_deg | angvel_deg | counter | distractor
    meaning: str


def _check_action(action, dim):
    action = jnp.asarray(action, float)
    if action.shape != (dim,):
        raise ValueError(f"action must have shape ({dim},), got {action.shape}")
    return eqx.error_if(action, ~jnp.all(jnp.isfinite(action)),
                        "action must be finite, got NaN or inf")


class AbstractEnv(eqx.Module):
    """A raw environment: pure ``reset`` / ``step`` and named raw variables.

    Physical constants are fields (pytree leaves: sweep them under ``vmap``); only
    ``max_steps`` is static.
    """

    name: ClassVar[str]
    short: ClassVar[str]  # a few words for prompts
    description: ClassVar[str]
    variables: ClassVar[tuple[Variable, ...]]
    action_dim: ClassVar[int]
    action_meaning: ClassVar[str]
    action_bound: ClassVar[float]  # the raw action is clipped to +- this
    max_steps: eqx.AbstractVar[int]

    @abc.abstractmethod
    def reset(self, key) -> EnvState:
        """A fresh state."""

    @abc.abstractmethod
    def _step(self, state: EnvState, action, key) -> tuple[EnvState, jax.Array, jax.Array]:
        """Next state, reward, terminated (no checks; the trainer's hot loop)."""

    @abc.abstractmethod
    def raw(self, state: EnvState) -> dict[str, jax.Array]:
        """The named raw variables (scalars) of a state, with their nuisances."""

    def step(self, state: EnvState, action, key) -> tuple[EnvState, jax.Array, jax.Array]:
        """One step.

        Args:
          state: an :class:`EnvState`.
          action: the raw action, shape ``(action_dim,)``, finite (checked inside jit).
          key: for the distractor channels.

        Returns:
          ``(next_state, reward, terminated)``; truncation is ``next_state.t >= max_steps``.
        """
        check_key("key", key)
        return self._step(state, _check_action(action, self.action_dim), key)


class CartPole(AbstractEnv):
    """Cart-pole with a continuous force (see the module docstring for the equations)."""

    name: ClassVar[str] = "cartpole"
    short: ClassVar[str] = ("CartPole (push a cart to keep a hinged pole upright; +1 per "
                            "step until the pole falls)")
    description: ClassVar[str] = (
        "CartPole: a pole is hinged on a cart that moves on a track; the agent pushes the "
        "cart left or right and earns +1 per step while the pole stays within 12 degrees "
        "of upright and the cart within 2.4 m of the centre.")
    variables: ClassVar[tuple[Variable, ...]] = (
        Variable("cart_position_cm", "length_cm", "the cart's position on the track, in cm"),
        Variable("cart_velocity_cm_per_s", "velocity_cm", "the cart's velocity, in cm/s"),
        Variable("pole_angle_deg", "angle_deg", "the pole's angle from upright, in degrees"),
        Variable("pole_angular_velocity_deg_per_s", "angvel_deg",
                 "the pole's angular velocity, in degrees per second"),
        Variable("elapsed_steps", "counter", "the number of steps since the episode began"),
        Variable("vibration_sensor", "distractor", "a noisy vibration reading of the track"),
        Variable("motor_temperature_c", "distractor",
                 "the motor's temperature, in degrees Celsius"),
        Variable("cart_mass_kg", "distractor", "the cart's mass, in kg"),
    )
    action_dim: ClassVar[int] = 1
    action_meaning: ClassVar[str] = "the force on the cart, in newtons"
    action_bound: ClassVar[float] = 10.0
    gravity: float | jax.Array = 9.8
    masscart: float | jax.Array = 1.0
    masspole: float | jax.Array = 0.1
    half_length: float | jax.Array = 0.5
    tau: float | jax.Array = 0.02
    max_steps: int = eqx.field(static=True, default=200)

    def reset(self, key) -> EnvState:
        k1, k2 = jax.random.split(check_key("key", key))
        q = jax.random.uniform(k1, (4,), minval=-0.05, maxval=0.05)
        aux = jnp.stack([jnp.zeros(()), 40.0 + jax.random.normal(k2)])
        return EnvState(q, jnp.zeros((), jnp.int32), aux)

    def _step(self, state, action, key):
        x, x_dot, th, th_dot = state.q
        force = jnp.clip(action[0], -self.action_bound, self.action_bound)
        total = self.masscart + self.masspole
        ml = self.masspole * self.half_length
        s, c = jnp.sin(th), jnp.cos(th)
        temp = (force + ml * th_dot**2 * s) / total
        th_acc = (self.gravity * s - c * temp) / (
            self.half_length * (4.0 / 3.0 - self.masspole * c**2 / total))
        x_acc = temp - ml * th_acc * c / total
        q = jnp.stack([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                       th + self.tau * th_dot, th_dot + self.tau * th_acc])
        k1, k2 = jax.random.split(key)
        aux = jnp.stack([30.0 * jax.random.normal(k1),
                         state.aux[1] + 0.5 * jax.random.normal(k2) + 0.02 * jnp.abs(force)])
        term = (jnp.abs(q[0]) > 2.4) | (jnp.abs(q[2]) > 12 * jnp.pi / 180)
        return EnvState(q, state.t + 1, aux), jnp.ones(()), term

    def raw(self, state):
        x, x_dot, th, th_dot = state.q
        deg = 180.0 / jnp.pi
        return {"cart_position_cm": 100.0 * x, "cart_velocity_cm_per_s": 100.0 * x_dot,
                "pole_angle_deg": deg * th, "pole_angular_velocity_deg_per_s": deg * th_dot,
                "elapsed_steps": state.t.astype(float), "vibration_sensor": state.aux[0],
                "motor_temperature_c": state.aux[1],
                "cart_mass_kg": self.masscart + 0.0 * x}


class Pendulum(AbstractEnv):
    """Torque-limited pendulum swing-up (Gym's Pendulum-v1; see the module docstring)."""

    name: ClassVar[str] = "pendulum"
    short: ClassVar[str] = ("Pendulum (apply torque to swing a pendulum up and hold it "
                            "upright)")
    description: ClassVar[str] = (
        "Pendulum: a pendulum hangs from a motorised pivot; the agent applies a torque to "
        "swing it up and hold it upright; the reward is minus the squared angle from "
        "upright, minus small velocity and torque costs.")
    variables: ClassVar[tuple[Variable, ...]] = (
        Variable("pole_angle_deg", "angle_deg",
                 "the pendulum's angle from upright, in degrees, unwrapped (it keeps "
                 "growing as the pendulum spins)"),
        Variable("angular_velocity_deg_per_s", "angvel_deg",
                 "the pendulum's angular velocity, in degrees per second"),
        Variable("elapsed_steps", "counter", "the number of steps since the episode began"),
        Variable("vibration_sensor", "distractor", "a noisy vibration reading of the pivot"),
        Variable("motor_temperature_c", "distractor",
                 "the motor's temperature, in degrees Celsius"),
    )
    action_dim: ClassVar[int] = 1
    action_meaning: ClassVar[str] = "the torque at the pivot, in newton metres"
    action_bound: ClassVar[float] = 2.0
    gravity: float | jax.Array = 10.0
    mass: float | jax.Array = 1.0
    length: float | jax.Array = 1.0
    dt: float | jax.Array = 0.05
    max_speed: float | jax.Array = 8.0
    max_steps: int = eqx.field(static=True, default=200)

    def reset(self, key) -> EnvState:
        k1, k2, k3 = jax.random.split(check_key("key", key), 3)
        q = jnp.stack([jax.random.uniform(k1, minval=-jnp.pi, maxval=jnp.pi),
                       jax.random.uniform(k2, minval=-1.0, maxval=1.0)])
        aux = jnp.stack([jnp.zeros(()), 40.0 + jax.random.normal(k3)])
        return EnvState(q, jnp.zeros((), jnp.int32), aux)

    def _step(self, state, action, key):
        th, om = state.q
        u = jnp.clip(action[0], -self.action_bound, self.action_bound)
        wrapped = jnp.mod(th + jnp.pi, 2 * jnp.pi) - jnp.pi
        cost = wrapped**2 + 0.1 * om**2 + 0.001 * u**2
        om = om + (3 * self.gravity / (2 * self.length) * jnp.sin(th)
                   + 3.0 / (self.mass * self.length**2) * u) * self.dt
        om = jnp.clip(om, -self.max_speed, self.max_speed)
        q = jnp.stack([th + om * self.dt, om])
        k1, k2 = jax.random.split(key)
        aux = jnp.stack([30.0 * jax.random.normal(k1),
                         state.aux[1] + 0.5 * jax.random.normal(k2) + 0.1 * jnp.abs(u)])
        return EnvState(q, state.t + 1, aux), -cost, jnp.zeros((), bool)

    def raw(self, state):
        th, om = state.q
        deg = 180.0 / jnp.pi
        return {"pole_angle_deg": deg * th, "angular_velocity_deg_per_s": deg * om,
                "elapsed_steps": state.t.astype(float), "vibration_sensor": state.aux[0],
                "motor_temperature_c": state.aux[1]}


ENVS: dict[str, type[AbstractEnv]] = {"cartpole": CartPole, "pendulum": Pendulum}


def make_env(name: str, **kwargs) -> AbstractEnv:
    """The raw environment ``name`` (``"cartpole"`` or ``"pendulum"``)."""
    if name not in ENVS:
        raise ValueError(f"env must be one of {sorted(ENVS)}, got {name!r}")
    return ENVS[name](**kwargs)


def sample_raw(env: AbstractEnv, key, n: int, *, steps: int = 20) -> dict[str, jax.Array]:
    """``n`` raw-variable dicts (stacked) from random states after up to ``steps`` random
    actions; used by the gates and the tests."""
    n = check_int("n", n, min=1)
    steps = check_int("steps", steps, min=1)
    return _sample_raw(env, check_key("key", key), n, steps)


@eqx.filter_jit
def _sample_raw(env, key, n, steps):
    def one(k):
        k0, k1 = jax.random.split(k)
        s = env.reset(k0)

        def body(s, kk):
            ka, ks = jax.random.split(kk)
            a = env.action_bound * jax.random.uniform(ka, (env.action_dim,), minval=-1,
                                                      maxval=1)
            s2, _, _ = env._step(s, a, ks)
            return s2, env.raw(s2)

        _, raws = jax.lax.scan(body, s, jax.random.split(k1, steps))
        return raws

    raws = jax.vmap(one)(jax.random.split(key, n))
    return jax.tree.map(lambda v: v.reshape(-1)[:: max(1, steps // 2)], raws)


# --------------------------------------------------------------------------- designs


@dataclasses.dataclass(frozen=True)
class Design:
    """An observation model and an action model for one environment.

    Attributes:
      name: a short label.
      compute_obs: ``raw dict -> (obs_dim,)`` float array.
      compute_action: ``(action_dim,) policy output -> (action_dim,) raw action``.
      obs_dim: the observation's length.
      description: how it was made (the chosen primitives, or the code).
    """

    name: str
    compute_obs: Callable[[dict[str, jax.Array]], jax.Array]
    compute_action: Callable[[jax.Array], jax.Array]
    obs_dim: int
    description: str = ""


def _deg2rad(v):
    return v * (jnp.pi / 180.0)


# per kind: option name -> (label shown to the model, feature function -> list of columns)
FEATURES: dict[str, dict[str, tuple[str, Callable[[jax.Array], list[jax.Array]]]]] = {
    "length_cm": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged, in centimetres", lambda v: [v]),
        "si": ("convert it to metres", lambda v: [v / 100.0]),
    },
    "velocity_cm": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged, in centimetres per second", lambda v: [v]),
        "si": ("convert it to metres per second", lambda v: [v / 100.0]),
    },
    "angle_deg": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged, in degrees", lambda v: [v]),
        "si": ("convert it to radians", lambda v: [_deg2rad(v)]),
        "sincos": ("use the sine and cosine of the angle",
                   lambda v: [jnp.sin(_deg2rad(v)), jnp.cos(_deg2rad(v))]),
    },
    "angvel_deg": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged, in degrees per second", lambda v: [v]),
        "si": ("convert it to radians per second", lambda v: [_deg2rad(v)]),
    },
    "counter": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged", lambda v: [v]),
        "scaled": ("divide it by 100", lambda v: [v / 100.0]),
    },
    "distractor": {
        "omit": ("leave it out", lambda v: []),
        "raw": ("keep it unchanged", lambda v: [v]),
        "scaled": ("divide it by 100", lambda v: [v / 100.0]),
    },
}

# action map name -> (label with {bound} and {unit}, function(a, bound))
ACTIONS: dict[str, tuple[str, Callable[[jax.Array, float], jax.Array]]] = {
    "identity": ("pass the output unchanged", lambda a, b: a),
    "scale": ("multiply the output by {bound}", lambda a, b: b * a),
    "tanh": ("squash the output with tanh, then multiply by {bound}",
             lambda a, b: b * jnp.tanh(a)),
    "clip": ("clip the output to [-1, 1], then multiply by {bound}",
             lambda a, b: b * jnp.clip(a, -1.0, 1.0)),
    "sign": ("take the sign of the output, times {bound} (bang-bang)",
             lambda a, b: b * jnp.sign(a)),
}


def primitive_design(env: AbstractEnv, features: dict[str, str], action: str,
                     name: str = "") -> Design:
    """A design from the primitive library.

    Args:
      env: the raw environment.
      features: raw variable name -> option of :data:`FEATURES` for its kind (every
        variable must be given).
      action: a key of :data:`ACTIONS`.
      name: a label (default: built from the choices).

    Returns:
      :class:`Design`.
    """
    names = [v.name for v in env.variables]
    if set(features) != set(names):
        raise ValueError(f"features must name every raw variable of {env.name} "
                         f"({names}), got {sorted(features)}")
    for v in env.variables:
        if features[v.name] not in FEATURES[v.kind]:
            raise ValueError(f"features[{v.name!r}] must be one of "
                             f"{sorted(FEATURES[v.kind])}, got {features[v.name]!r}")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {sorted(ACTIONS)}, got {action!r}")
    fns = [(v.name, FEATURES[v.kind][features[v.name]][1]) for v in env.variables]
    dim = sum(len(f(jnp.zeros(()))) for _, f in fns)
    if dim == 0:
        raise ValueError("features leave every raw variable out: the observation is empty")
    bound = float(env.action_bound)
    act_fn = ACTIONS[action][1]

    def compute_obs(raw):
        cols = [c for n, f in fns for c in f(raw[n])]
        return jnp.stack([jnp.asarray(c, float) for c in cols])

    def compute_action(a):
        return act_fn(a, bound)

    desc = ", ".join(f"{v.name}: {features[v.name]}" for v in env.variables)
    label = name or "|".join(features[v.name] for v in env.variables) + f"|{action}"
    return Design(label, compute_obs, compute_action, dim, desc + f"; action: {action}")


def default_design(env: AbstractEnv) -> Design:
    """The raw observation (every variable as it comes) and the raw action."""
    return primitive_design(env, {v.name: "raw" for v in env.variables}, "identity",
                            name="default (raw)")


LETTERS = "ABCDEFGH"


def option_prompt(env: AbstractEnv, variable: Variable | None) -> tuple[list[dict], list[str],
                                                                          list[str]]:
    """The chat messages of one design decision, its answer letters and option keys.

    ``variable=None`` asks for the action map. The options are listed as ``A. ...``,
    ``B. ...``; the answer is the letter (one token each for SmolLM2's tokenizer).
    Returns ``(messages, letters, option keys)``.
    """
    if variable is None:
        keys = list(ACTIONS)
        labels = [ACTIONS[k][0].format(bound=env.action_bound) for k in keys]
        question = (f"The policy outputs a real number; the environment takes "
                    f"{env.action_meaning}, clipped to +-{env.action_bound}. Map the output "
                    f"to the action how?")
    else:
        keys = list(FEATURES[variable.kind])
        labels = [FEATURES[variable.kind][k][0] for k in keys]
        question = (f"Raw variable `{variable.name}`: {variable.meaning}. How should the "
                    f"agent's observation use it?")
    letters = list(LETTERS[:len(keys)])
    options = "\n".join(f"{a}. {lab}" for a, lab in zip(letters, labels, strict=True))
    user = (f"Design an RL agent's inputs for {env.short}. {question}\n{options}\n"
            f"Answer with the letter.")
    return [{"role": "user", "content": user}], letters, keys


def option_scores(chat, env: AbstractEnv) -> dict[str, np.ndarray]:
    """``log p(answer letter)`` of every design decision.

    With an in-process :class:`~jaxsci.common.lm.chat.LocalChat` whose tokenizer makes
    each letter one token, all decisions are read from **one batched forward pass**
    (the next-token log-softmax at each prompt's last token, which equals
    ``chat.score(messages, letters)``: the tests check it); otherwise (a server)
    ``chat.score`` per decision.

    Args:
      chat: any :class:`~jaxsci.common.lm.chat.ChatModel`.
      env: the raw environment.

    Returns:
      variable name -> scores over its kind's options (in :data:`FEATURES` order), and
      ``"action"`` -> scores over :data:`ACTIONS`.
    """
    from jaxsci.common.lm.chat import LocalChat

    asks = [("action" if v is None else v.name, *option_prompt(env, v))
            for v in (*env.variables, None)]
    if isinstance(chat, LocalChat):
        tok = chat.engine.tokenizer
        ids = [tok.encode(a) for a in LETTERS]
        if all(len(i) == 1 for i in ids):
            logits = chat.engine.next_token_logits([chat.prompt(m) for _, m, _, _ in asks])
            logp = np.asarray(jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), -1))
            return {name: logp[row, [ids[j][0] for j in range(len(letters))]].astype(float)
                    for row, (name, _, letters, _) in enumerate(asks)}
    return {name: np.asarray(chat.score(m, letters), float) for name, m, letters, _ in asks}


def sample_design(key, env: AbstractEnv, scores: dict[str, np.ndarray], temperature,
                  name: str = "") -> Design:
    """Compose a design by sampling every decision from ``softmax(scores / temperature)``.

    Args:
      key: the sampling key (same key, same design).
      env: the raw environment.
      scores: :func:`option_scores`' output.
      temperature: > 0; lower concentrates on the model's top choice.
      name: a label.

    Returns:
      :class:`Design` (a design that leaves every variable out is resampled by the next
      key; after 100 tries the error says so).
    """
    check_key("key", key)
    t = float(check_scalar("temperature", temperature, gt=0.0))
    for v in env.variables:
        if v.name not in scores or len(scores[v.name]) != len(FEATURES[v.kind]):
            raise ValueError(f"scores[{v.name!r}] must hold {len(FEATURES[v.kind])} option "
                             f"scores; pass option_scores(chat, env)")
    if "action" not in scores or len(scores["action"]) != len(ACTIONS):
        raise ValueError(f"scores['action'] must hold {len(ACTIONS)} option scores")

    def pick(k, s):
        s = np.asarray(s, float)
        s = np.where(np.isfinite(s), s, -1e9)
        return int(jax.random.categorical(k, jnp.asarray(s / t)))

    for attempt in range(100):
        ks = jax.random.split(jax.random.fold_in(key, attempt), len(env.variables) + 1)
        feats = {v.name: list(FEATURES[v.kind])[pick(k, scores[v.name])]
                 for k, v in zip(ks, env.variables, strict=False)}
        if any(f != "omit" for f in feats.values()):
            act = list(ACTIONS)[pick(ks[-1], scores["action"])]
            return primitive_design(env, feats, act, name=name)
    raise RuntimeError("sample_design: 100 samples left every variable out; raise the "
                       "temperature or check the scores")


# --------------------------------------------------------------------------- LLM-written code


class GateError(ValueError):
    """Generated code failed a gate; ``report`` says which and why."""

    def __init__(self, report: GateReport):
        super().__init__(f"generated code failed the {report.gate} gate: {report.message}")
        self.report = report


class GateReport(NamedTuple):
    """The gates' verdict: ``passed``, the ``gate`` reached (``"extract"``, ``"import"``,
    ``"jit"``, or ``"passed"``), and a ``message``."""

    passed: bool
    gate: str
    message: str
    obs_dim: int = 0


def code_prompt(env: AbstractEnv) -> list[dict[str, str]]:
    """Chat messages asking for ``compute_obs`` and ``compute_action`` for ``env``."""
    lines = "\n".join(f"- raw[{v.name!r}]: {v.meaning}" for v in env.variables)
    user = (f"{env.description}\n\nThe raw environment gives a dict `raw` of scalar JAX "
            f"arrays:\n{lines}\n\nThe policy outputs an array `a` of shape "
            f"({env.action_dim},), unbounded. The environment takes {env.action_meaning}, "
            f"clipped to +-{env.action_bound}.\n\nWrite two Python functions using "
            "`jax.numpy as jnp` only:\n`compute_obs(raw)` returning a 1-D float array, the "
            "agent's observation (inputs of order one, only what helps to act), and "
            f"`compute_action(a)` returning an array of shape ({env.action_dim},), the "
            "environment's action. Reply with one ```python code block.")
    return [{"role": "system", "content": "You are an expert in reinforcement learning "
             "who writes correct, concise JAX code."}, {"role": "user", "content": user}]


def extract_code(text: str) -> str:
    """The first fenced Python block of a reply (or the whole reply when it has none but
    defines both functions); raises :class:`GateError` (gate ``"extract"``) otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    m = re.search(r"```(?:python|py)?\s*\n(.*?)```", text, re.S)
    code = m.group(1) if m else text
    if "def compute_obs" not in code or "def compute_action" not in code:
        raise GateError(GateReport(False, "extract", "the reply defines no compute_obs "
                                   "and compute_action"))
    return code


_HARNESS = """
import json as _json
import jax.numpy as _jnp
_raw = {{k: _jnp.asarray(v) for k, v in _json.loads({raw!r}).items()}}
_obs = _jnp.asarray(compute_obs(_raw))
_act = _jnp.asarray(compute_action(_jnp.zeros(({adim},))))
print(_json.dumps({{"obs": list(_obs.shape), "act": list(_act.shape)}}))
"""


def _exec(code: str) -> tuple[Callable, Callable]:
    ns: dict[str, Any] = {"jnp": jnp, "jax": jax, "np": np}
    exec(compile(code, "<generated design>", "exec"), ns)  # noqa: S102 (gated code)
    obs_fn, act_fn = ns.get("compute_obs"), ns.get("compute_action")
    if not callable(obs_fn) or not callable(act_fn):
        raise GateError(GateReport(False, "import", "compute_obs and compute_action must "
                                   "be functions"))
    return obs_fn, act_fn


def check_code(code: str, env: AbstractEnv, *, max_obs: int = 16, sandbox: bool = True,
               key=None, timeout_s: float = 60.0) -> GateReport:
    """Run the gates on generated design code (see the module docstring).

    Args:
      code: Python source defining ``compute_obs(raw)`` and ``compute_action(a)``
        (``jnp``, ``jax`` and ``np`` are available without import in-process; the
        sandbox imports ``jax.numpy as jnp`` first).
      env: the raw environment.
      max_obs: the longest observation allowed.
      sandbox: run the import gate in :func:`~jaxsci.common.agents.run_code` (``False``
        skips it: only for code already checked).
      key: raw states for the jit gate (default ``jax.random.key(0)``).
      timeout_s: the sandbox's wall limit.

    Returns:
      :class:`GateReport` (never raises for bad code).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    check_int("max_obs", max_obs, min=1)
    key = jax.random.key(0) if key is None else check_key("key", key)
    raws = sample_raw(env, key, 16)
    if sandbox:
        from jaxsci.common.agents import run_code

        one = {k: float(v[0]) for k, v in raws.items()}
        src = ("import math\nimport jax\nimport jax.numpy as jnp\nimport numpy as np\n"
               + code + _HARNESS.format(raw=json.dumps(one), adim=env.action_dim))
        r = run_code(src, cpu_s=timeout_s, memory_mb=8192, timeout_s=timeout_s)
        if r.status != "ok":
            tail = (r.stderr.strip().splitlines() or [r.status])[-1]
            return GateReport(False, "import", f"sandbox run {r.status}: {tail}")
    try:
        obs_fn, act_fn = _exec(code)
    except GateError as e:
        return e.report
    except Exception as e:  # noqa: BLE001 (any failure of generated code is a verdict)
        return GateReport(False, "import", f"{type(e).__name__}: {e}")
    # extreme states as well as typical ones
    extreme = jax.tree.map(lambda v: jnp.concatenate([v, 1e3 * v[:2], 0 * v[:1]]), raws)
    a = jnp.linspace(-50.0, 50.0, 8)[:, None] * jnp.ones((1, env.action_dim))
    try:
        jo, ja = jax.jit(jax.vmap(obs_fn)), jax.jit(jax.vmap(act_fn))
        obs, obs2, act = jo(extreme), jo(extreme), ja(a)
        eager = jnp.asarray(obs_fn(jax.tree.map(lambda v: v[0], extreme)))
    except Exception as e:  # noqa: BLE001
        return GateReport(False, "jit", f"{type(e).__name__}: {str(e).splitlines()[0]}")
    n = extreme[env.variables[0].name].shape[0]
    if obs.ndim != 2 or obs.shape[0] != n or not 1 <= obs.shape[1] <= max_obs:
        return GateReport(False, "jit", f"compute_obs must return a 1-D array of 1 to "
                          f"{max_obs} entries, got shape {obs.shape[1:]}")
    if not jnp.issubdtype(obs.dtype, jnp.floating):
        obs = obs.astype(float)
    if act.shape != (8, env.action_dim):
        return GateReport(False, "jit", f"compute_action must return shape "
                          f"({env.action_dim},), got {act.shape[1:]}")
    if not (bool(jnp.all(jnp.isfinite(obs))) and bool(jnp.all(jnp.isfinite(act)))):
        return GateReport(False, "jit", "outputs are not finite on every test state")
    if not (np.array_equal(np.asarray(obs), np.asarray(obs2))
            and np.allclose(np.asarray(eager, float), np.asarray(obs[0]), rtol=1e-4,
                            atol=1e-4)):
        return GateReport(False, "jit", "compute_obs is not deterministic (two calls, or "
                          "jit and eager, disagree)")
    return GateReport(True, "passed", "ok", int(obs.shape[1]))


def code_design(code: str, env: AbstractEnv, name: str = "code", **kwargs) -> Design:
    """A :class:`Design` from generated code after :func:`check_code`'s gates.

    Raises:
      GateError: naming the gate that failed.
    """
    rep = check_code(code, env, **kwargs)
    if not rep.passed:
        raise GateError(rep)
    obs_fn, act_fn = _exec(code)

    def compute_obs(raw):
        return jnp.asarray(obs_fn(raw), float).reshape(-1)

    def compute_action(a):
        return jnp.asarray(act_fn(a), float).reshape(-1)

    return Design(name, compute_obs, compute_action, rep.obs_dim, code)


# --------------------------------------------------------------------------- PPO


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO's settings (Schulman et al. 2017 defaults where they apply; sizes small for CPU).

    ``learning_rate``, ``gamma``, ``gae_lambda``, ``clip``, ``vf_coef``, ``ent_coef`` are
    passed into the compiled update as traced numbers.
    """

    n_envs: int = 8
    n_steps: int = 128
    epochs: int = 4
    minibatches: int = 4
    hidden: int = 64
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    init_log_std: float = 0.0

    def __post_init__(self):
        for n in ("n_envs", "n_steps", "epochs", "minibatches", "hidden"):
            check_int(n, getattr(self, n), min=1)
        if (self.n_envs * self.n_steps) % self.minibatches:
            raise ValueError(f"minibatches ({self.minibatches}) must divide n_envs * "
                             f"n_steps ({self.n_envs * self.n_steps})")
        check_scalar("learning_rate", self.learning_rate, gt=0.0)
        check_scalar("gamma", self.gamma, gt=0.0, le=1.0)
        check_scalar("gae_lambda", self.gae_lambda, ge=0.0, le=1.0)
        check_scalar("clip", self.clip, gt=0.0)
        check_scalar("max_grad_norm", self.max_grad_norm, gt=0.0)

    @property
    def steps_per_update(self) -> int:
        return self.n_envs * self.n_steps

    def hyper(self) -> dict[str, jax.Array]:
        return {k: jnp.asarray(getattr(self, k), float) for k in (
            "learning_rate", "gamma", "gae_lambda", "clip", "vf_coef", "ent_coef",
            "max_grad_norm")}


class PPOState(NamedTuple):
    params: dict
    adam_m: dict
    adam_v: dict
    count: jax.Array
    env: EnvState
    key: jax.Array
    ep_acc: jax.Array  # running return of each environment's current episode
    last_ret: jax.Array  # return of each environment's last finished episode
    seen: jax.Array  # whether it finished one


def _mlp_init(key, sizes, last_scale):
    ks = jax.random.split(key, len(sizes) - 1)
    out = []
    for i, (k, a, b) in enumerate(zip(ks, sizes[:-1], sizes[1:], strict=True)):
        scale = last_scale if i == len(sizes) - 2 else jnp.sqrt(2.0)
        w = jax.nn.initializers.orthogonal(scale)(k, (a, b))
        out.append((w, jnp.zeros(b)))
    return out


def _mlp(layers, x):
    for w, b in layers[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = layers[-1]
    return x @ w + b


def _pad(obs, width):
    return jnp.pad(obs, (0, width - obs.shape[0]))


def _obs_switch(designs: Sequence[Design], width: int):
    fns = [lambda raw, d=d: _pad(d.compute_obs(raw), width) for d in designs]
    acts = [lambda a, d=d: jnp.asarray(d.compute_action(a), float) for d in designs]

    def obs(idx, raw):
        return jax.lax.switch(idx, fns, raw) if len(fns) > 1 else fns[0](raw)

    def act(idx, a):
        return jax.lax.switch(idx, acts, a) if len(acts) > 1 else acts[0](a)

    return obs, act


def ppo_init(key, env: AbstractEnv, obs_dim: int, config: PPOConfig = PPOConfig()) -> PPOState:
    """A fresh PPO state: networks for ``obs_dim`` inputs and ``n_envs`` reset environments."""
    check_key("key", key)
    kp, kv, ke, kk = jax.random.split(key, 4)
    h = config.hidden
    params = {"pi": _mlp_init(kp, (obs_dim, h, h, env.action_dim), 0.01),
              "v": _mlp_init(kv, (obs_dim, h, h, 1), 1.0),
              "log_std": jnp.full((env.action_dim,), config.init_log_std, float)}
    zeros = jax.tree.map(jnp.zeros_like, params)
    envs = jax.vmap(env.reset)(jax.random.split(ke, config.n_envs))
    z = jnp.zeros(config.n_envs)
    return PPOState(params, zeros, zeros, jnp.zeros((), jnp.int32), envs, kk, z, z,
                    jnp.zeros(config.n_envs, bool))


def _logp(mean, log_std, a):
    return jnp.sum(-0.5 * ((a - mean) / jnp.exp(log_std)) ** 2 - log_std
                   - 0.5 * jnp.log(2 * jnp.pi), -1)


def _update(env, obs_fn, act_fn, c: PPOConfig, hp, st: PPOState):
    """One PPO update (rollout of n_steps x n_envs, then epochs of minibatch steps)."""
    p = st.params

    def env_step(carry, k):
        es, ep_acc, last, seen = carry
        ka, ks, kr = jax.random.split(k, 3)
        obs = jax.vmap(obs_fn)(jax.vmap(env.raw)(es))
        mean = _mlp(p["pi"], obs)
        value = _mlp(p["v"], obs)[:, 0]
        a = mean + jnp.exp(p["log_std"]) * jax.random.normal(ka, mean.shape)
        logp = _logp(mean, p["log_std"], a)
        es2, r, term = jax.vmap(env._step)(es, jax.vmap(act_fn)(a),
                                           jax.random.split(ks, c.n_envs))
        trunc = (es2.t >= env.max_steps) & ~term
        # truncation bootstraps from the value of the state it cut
        v_next = _mlp(p["v"], jax.vmap(obs_fn)(jax.vmap(env.raw)(es2)))[:, 0]
        r_adj = r + hp["gamma"] * v_next * trunc
        done = term | trunc
        fresh = jax.vmap(env.reset)(jax.random.split(kr, c.n_envs))
        es3 = jax.tree.map(lambda f, o: jnp.where(
            done.reshape(done.shape + (1,) * (o.ndim - 1)), f, o), fresh, es2)
        acc = ep_acc + r
        last = jnp.where(done, acc, last)
        seen = seen | done
        acc = jnp.where(done, 0.0, acc)
        return (es3, acc, last, seen), (obs, a, logp, value, r_adj, done)

    key, kroll, kperm = jax.random.split(st.key, 3)
    (es, acc, last, seen), (obs, act, logp, val, rew, done) = jax.lax.scan(
        env_step, (st.env, st.ep_acc, st.last_ret, st.seen),
        jax.random.split(kroll, c.n_steps))
    last_v = _mlp(p["v"], jax.vmap(obs_fn)(jax.vmap(env.raw)(es)))[:, 0]

    def gae(carry, x):
        adv, v_next = carry
        r, v, d = x
        nonterm = 1.0 - d
        delta = r + hp["gamma"] * v_next * nonterm - v
        adv = delta + hp["gamma"] * hp["gae_lambda"] * nonterm * adv
        return (adv, v), adv

    _, adv = jax.lax.scan(gae, (jnp.zeros(c.n_envs), last_v), (rew, val, done),
                          reverse=True)
    ret = adv + val
    n = c.n_steps * c.n_envs
    flat = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), (obs, act, logp, adv, ret))

    def loss_fn(params, mb):
        o, a, lp_old, ad, rt = mb
        mean = _mlp(params["pi"], o)
        lp = _logp(mean, params["log_std"], a)
        ratio = jnp.exp(lp - lp_old)
        ad = (ad - ad.mean()) / (ad.std() + 1e-8)
        pg = -jnp.mean(jnp.minimum(ratio * ad, jnp.clip(ratio, 1 - hp["clip"],
                                                        1 + hp["clip"]) * ad))
        v = _mlp(params["v"], o)[:, 0]
        vl = 0.5 * jnp.mean((v - rt) ** 2)
        ent = jnp.sum(params["log_std"] + 0.5 * jnp.log(2 * jnp.pi * jnp.e))
        return pg + hp["vf_coef"] * vl - hp["ent_coef"] * ent

    def sgd(carry, idx):
        params, m, v, count = carry
        mb = jax.tree.map(lambda x: x[idx], flat)
        g = jax.grad(loss_fn)(params, mb)
        gn = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(g)))
        g = jax.tree.map(lambda x: x * jnp.minimum(1.0, hp["max_grad_norm"] / (gn + 1e-8)), g)
        count = count + 1
        m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
        v = jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
        bc1, bc2 = 1 - 0.9**count, 1 - 0.999**count
        params = jax.tree.map(lambda w, a, b: w - hp["learning_rate"] * (a / bc1) / (
            jnp.sqrt(b / bc2) + 1e-8), params, m, v)
        return (params, m, v, count), None

    perms = jax.vmap(lambda k: jax.random.permutation(k, n))(
        jax.random.split(kperm, c.epochs)).reshape(c.epochs * c.minibatches, -1)
    (params, m, v, count), _ = jax.lax.scan(sgd, (p, st.adam_m, st.adam_v, st.count), perms)
    recent = jnp.where(seen.any(), jnp.sum(jnp.where(seen, last, 0.0)) / jnp.maximum(
        seen.sum(), 1), 0.0)
    return PPOState(params, m, v, count, es, key, acc, last, seen), recent


def ppo_update(state: PPOState, env: AbstractEnv, design: Design,
               config: PPOConfig = PPOConfig()) -> tuple[PPOState, jax.Array]:
    """One PPO update of one design (jit-compiled per env, design and config).

    Returns:
      ``(state, recent_return)``: the mean return of each environment's last finished
      episode (0 before any finished).
    """
    return _ppo_update_jit(state, env, design, config, config.hyper())


@eqx.filter_jit
def _ppo_update_jit(state, env, design, config, hp):
    obs_fn, act_fn = _obs_switch([design], design.obs_dim)
    return _update(env, lambda r: obs_fn(0, r), lambda a: act_fn(0, a), config, hp, state)


def _width(designs):
    return max(d.obs_dim for d in designs)


def designs_init(key, env: AbstractEnv, designs: Sequence[Design],
                 config: PPOConfig = PPOConfig()) -> PPOState:
    """PPO states of every design, stacked (one key each, from ``key``); inputs are
    zero-padded to the widest design."""
    if not designs:
        raise ValueError("designs must hold at least one Design, got none")
    keys = jax.random.split(check_key("key", key), len(designs))
    return jax.vmap(lambda k: ppo_init(k, env, _width(designs), config))(keys)


def designs_update(state: PPOState, active, env: AbstractEnv, designs: Sequence[Design],
                   config: PPOConfig = PPOConfig()) -> tuple[PPOState, jax.Array]:
    """One PPO update of every active design, vmapped over designs.

    Args:
      state: :func:`designs_init`'s stacked state.
      active: ``(n_designs,)`` bool; inactive designs keep their state.
      env, designs, config: as for :func:`designs_init`.

    Returns:
      ``(state, recent_return (n_designs,))`` (an inactive design reports its last value
      recomputed from its unchanged state).
    """
    active = jnp.asarray(active, bool)
    if active.shape != (len(designs),):
        raise ValueError(f"active must have shape ({len(designs)},), got {active.shape}")
    return _designs_update_jit(state, active, env, tuple(designs), config, config.hyper())


@eqx.filter_jit
def _designs_update_jit(state, active, env, designs, config, hp):
    obs_fn, act_fn = _obs_switch(designs, _width(designs))

    def one(st, idx, on):
        new, recent = _update(env, lambda r: obs_fn(idx, r), lambda a: act_fn(idx, a),
                              config, hp, st)
        return jax.tree.map(lambda a, b: jnp.where(on, a, b), new, st), recent

    return jax.vmap(one)(state, jnp.arange(len(designs)), active)


def evaluate(key, state: PPOState, env: AbstractEnv, designs: Sequence[Design],
             n_episodes: int = 16) -> jax.Array:
    """The mean return of each design's deterministic policy (the Gaussian's mean) over
    ``n_episodes`` fresh episodes of ``max_steps`` (stopping at termination).

    Args:
      key: episode starts (shared by the designs).
      state: stacked :func:`designs_init` / :func:`designs_update` state.

    Returns:
      ``(n_designs,)`` mean returns.
    """
    check_key("key", key)
    check_int("n_episodes", n_episodes, min=1)
    return _evaluate_jit(key, state.params, env, tuple(designs), n_episodes)


@eqx.filter_jit
def _evaluate_jit(key, params, env, designs, n_episodes):
    obs_fn, act_fn = _obs_switch(designs, _width(designs))

    def one(p, idx):
        def episode(k):
            k0, k1 = jax.random.split(k)

            def body(carry, kk):
                s, total, alive = carry
                o = obs_fn(idx, env.raw(s))
                a = act_fn(idx, _mlp(p["pi"], o))
                s2, r, term = env._step(s, a, kk)
                total = total + jnp.where(alive, r, 0.0)
                return (s2, total, alive & ~term), None

            (_, total, _), _ = jax.lax.scan(body, (env.reset(k0), 0.0, True),
                                            jax.random.split(k1, env.max_steps))
            return total

        return jnp.mean(jax.vmap(episode)(jax.random.split(key, n_episodes)))

    return jax.vmap(one)(params, jnp.arange(len(designs)))


# --------------------------------------------------------------------------- racing


def _window_stats(window, active):
    w = window.shape[1]
    mean = window.mean(1)
    se = window.std(1, ddof=1) / jnp.sqrt(w) if w > 1 else jnp.zeros_like(mean)
    return mean, se


class AbstractRacingRule(eqx.Module):
    """Which designs continue, from the last ``window`` recent returns of each.

    ``survivors(window, active)``: ``window`` is ``(n_designs, w)`` (rows of stopped
    designs are ignored), ``active`` ``(n_designs,)`` bool; returns the new ``active``
    (a subset, never empty). ``statistic(window)`` ranks designs (higher is better) when
    the driver must cut or pick the answer. Both are jit-compatible.
    """

    window: eqx.AbstractVar[int]

    @abc.abstractmethod
    def survivors(self, window, active) -> jax.Array:
        """The designs that continue."""

    def statistic(self, window) -> jax.Array:
        """The ranking statistic: the window mean."""
        return jnp.asarray(window, float).mean(1)


def _check_window(window, active):
    window, active = jnp.asarray(window, float), jnp.asarray(active, bool)
    if active.ndim != 1 or window.ndim != 2 or window.shape[0] != active.shape[0]:
        raise ValueError(f"window must have shape (n_designs, w) and active (n_designs,), "
                         f"got window {window.shape} and active {active.shape}")
    return window, active


def _best_kept(keep, stat, active):
    # never stop every design: the best active one always continues
    best = jnp.argmax(jnp.where(active, stat, -jnp.inf))
    return (keep & active) | (jnp.arange(active.shape[0]) == best)


class UCBRace(AbstractRacingRule):
    """Confidence race: continue while ``mean + c se >= max(mean - c se)`` over the active."""

    c: float | jax.Array = 1.0
    window: int = eqx.field(static=True, default=5)

    def __check_init__(self):
        check_int("window", self.window, min=2)
        check_scalar("c", self.c, ge=0.0)

    def survivors(self, window, active):
        window, active = _check_window(window, active)
        mean, se = _window_stats(window, active)
        lcb = jnp.max(jnp.where(active, mean - self.c * se, -jnp.inf))
        return _best_kept(mean + self.c * se >= lcb, mean, active)


class SuccessiveHalving(AbstractRacingRule):
    """Keep the top ``fraction`` (at least one) by ``mean + c se`` at every rung."""

    fraction: float = eqx.field(static=True, default=0.5)
    c: float | jax.Array = 0.0
    window: int = eqx.field(static=True, default=5)

    def __check_init__(self):
        check_int("window", self.window, min=1)
        check_scalar("fraction", self.fraction, gt=0.0, lt=1.0)
        check_scalar("c", self.c, ge=0.0)

    def statistic(self, window):
        mean, se = _window_stats(jnp.asarray(window, float), None)
        return mean + self.c * se

    def survivors(self, window, active):
        window, active = _check_window(window, active)
        stat = jnp.where(active, self.statistic(window), -jnp.inf)
        n_keep = jnp.maximum(1, jnp.ceil(self.fraction * active.sum())).astype(jnp.int32)
        rank = jnp.argsort(jnp.argsort(-stat))  # 0 = best
        return _best_kept(rank < n_keep, stat, active)


class FRace(AbstractRacingRule):
    """Birattari et al.'s F-race: Friedman test over aligned blocks, then post-hoc cuts."""

    alpha: float | jax.Array = 0.05
    window: int = eqx.field(static=True, default=5)

    def __check_init__(self):
        check_int("window", self.window, min=2)
        check_scalar("alpha", self.alpha, gt=0.0, lt=1.0)

    def statistic(self, window):
        return jnp.asarray(window, float).mean(1)

    def survivors(self, window, active):
        window, active = _check_window(window, active)
        k = active.sum()
        b = window.shape[1]
        # mid-ranks within each block among the active designs (1 = worst, k = best;
        # ties share their mean rank, as Friedman's test requires)
        x = window[:, None, :]
        y = window[None, :, :]
        on = active[None, :, None]
        less = jnp.sum(on & (y < x), axis=1)
        equal = jnp.sum(on & (y == x), axis=1)
        ranks = jnp.where(active[:, None], less + (equal + 1) / 2.0, 0.0)
        r_sum = ranks.sum(1)
        a_term = jnp.sum(ranks**2)
        c_term = b * k * (k + 1) ** 2 / 4.0
        denom = jnp.maximum(a_term - c_term, 1e-12)
        t_stat = (k - 1) * jnp.sum(jnp.where(active, (r_sum - b * (k + 1) / 2.0) ** 2, 0.0)
                                   ) / denom
        p = jax.scipy.stats.chi2.sf(t_stat, jnp.maximum(k - 1, 1))
        quant = jax.scipy.stats.norm.ppf(1 - self.alpha / 2)
        crit = quant * jnp.sqrt(2 * b * jnp.maximum(1 - t_stat / (b * (k - 1)), 0.0) * denom
                                / jnp.maximum((b - 1) * (k - 1), 1))
        best = jnp.max(jnp.where(active, r_sum, -jnp.inf))
        keep = jnp.where((p < self.alpha) & (k > 1), best - r_sum <= crit, True)
        return _best_kept(keep, r_sum, active)


class RaceResult(NamedTuple):
    """A race's outcome.

    Attributes:
      state: the trainer's final state.
      chosen: the index of the answer (the active design with the best statistic).
      updates: ``(n_designs,)`` updates each design received (sum == budget).
      history: ``(budget_rounds, n_designs)`` recent returns after every update (NaN
        where a design was stopped).
      active_history: ``(rungs, n_designs)`` the active set before each rung.
    """

    state: Any
    chosen: int
    updates: np.ndarray
    history: np.ndarray
    active_history: np.ndarray


def race(advance: Callable[[Any, np.ndarray], tuple[Any, Any]], state, n_designs: int,
         rule: AbstractRacingRule, budget: int, rung: int, progress=None) -> RaceResult:
    """Continuous racing with an exact budget (see the module docstring).

    Args:
      advance: ``advance(state, active) -> (state, recent (n_designs,))``: one update
        of every active design (e.g. :func:`designs_update` bound to its env and
        designs; or arms with known means in the tests).
      state: the initial state.
      n_designs: how many designs race.
      rule: an :class:`AbstractRacingRule`.
      budget: total updates over all designs (one ordinary run's updates).
      rung: updates per active design between decisions (decisions begin once the
        survivors have ``rule.window`` updates).
      progress: optional callable receiving the updates spent so far.

    Returns:
      :class:`RaceResult`.
    """
    n = check_int("n_designs", n_designs, min=1)
    check_int("budget", budget, min=n)
    check_int("rung", rung, min=1)
    if not isinstance(rule, AbstractRacingRule):
        raise TypeError(f"rule must be an AbstractRacingRule, got {type(rule).__name__}")
    active = np.ones(n, bool)
    updates = np.zeros(n, np.int64)
    history: list[np.ndarray] = []
    active_hist = []
    spent = 0

    def window():
        h = np.asarray(history[-rule.window:])
        return np.nan_to_num(h.T, nan=0.0)

    while spent < budget:
        remaining = budget - spent
        if remaining < active.sum():  # cut to the best `remaining` designs
            stat = np.where(active, np.asarray(rule.statistic(window())), -np.inf)
            keep = np.argsort(-stat)[:remaining]
            active = np.isin(np.arange(n), keep)
        active_hist.append(active.copy())
        steps = min(rung, remaining // int(active.sum()))
        for _ in range(steps):
            state, recent = advance(state, active)
            history.append(np.where(active, np.asarray(recent, float), np.nan))
            updates += active
            spent += int(active.sum())
            if progress is not None:
                progress(spent)
        if spent < budget and active.sum() > 1 and updates[active].min() >= rule.window:
            active = np.asarray(rule.survivors(window(), active), bool) & active
    stat = np.where(active, np.asarray(rule.statistic(window())), -np.inf)
    return RaceResult(state, int(np.argmax(stat)), updates, np.asarray(history),
                      np.asarray(active_hist))
