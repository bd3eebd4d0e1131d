"""An invented diagnosis task for context engineering (:mod:`jaxsci.agents.mce`).

Invented conditions (no model has seen their names) each carry **signature findings**:
conditions come in **confusable pairs** that share two findings and differ in one
**key** finding. A case is a short, noisy description of a patient: the key finding with
probability ``p_key`` (otherwise the case is ambiguous within its pair), one or two of
the pair's shared findings, and with probability ``p_noise`` an unrelated complaint, in
one of several phrasings. A model can only answer well if its context tells it which
findings go with which invented name; which findings discriminate the pair is what a
good context must convey.

Condition names start with distinct letters, so their first tokens differ under any
tokenizer (what first-token option scoring needs).

>>> t = make_task(0, n_conditions=4, n_train=8, n_val=4, n_test=4)
>>> len(t.conditions), len(t.train), len(t.val), len(t.test)
(4, 8, 4, 4)
>>> t.conditions[0].name in t.names
True
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Case", "Condition", "DiagnosisTask", "NAMES", "FINDINGS", "make_task"]

NAMES = ("Brevosis", "Calmitis", "Dravene", "Fernula", "Gostria", "Hexaline", "Kovalia",
         "Lumera", "Mordane", "Nistrel", "Pavolia", "Quenta")
FINDINGS = ("blue fingernails", "ringing ears", "sour taste", "itchy elbows", "night sweats",
            "stiff jaw", "yellow eyes", "cold feet", "hiccups", "dry cough", "hair loss",
            "sore knees", "nosebleeds", "twitching eyelids", "salt craving", "hoarse voice",
            "red palms", "numb toes", "swollen wrists", "dizzy spells", "metal taste",
            "flaky scalp", "loud snoring", "pale lips", "hot ears", "cracked heels",
            "sticky sweat", "shaky hands", "green tongue", "sore ribs", "dim vision",
            "bitter breath", "puffy eyes", "aching teeth", "loose nails", "cold hands")
NOISE = ("tiredness", "a mild headache", "poor sleep", "low mood", "some back pain")
_TEMPLATES = ("Patient has {a} and {b}.", "Reports {a}, also {b}.", "Came in with {a} and {b}.",
              "Complains of {a}; {b} noted.", "Presents with {b} and {a}.")


@dataclasses.dataclass(frozen=True)
class Condition:
    """An invented condition.

    Attributes:
      name: its invented name.
      key: the finding that tells it apart from its confusable partner.
      shared: the findings it shares with its partner.
      partner: the index of the partner condition.
    """

    name: str
    key: str
    shared: tuple[str, ...]
    partner: int

    @property
    def signature(self) -> tuple[str, ...]:
        return (self.key, *self.shared)


@dataclasses.dataclass(frozen=True)
class Case:
    """One patient: ``text`` (the noisy description), ``label`` (condition index),
    ``findings`` (the findings it mentions, noise included)."""

    text: str
    label: int
    findings: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DiagnosisTask:
    """Conditions and the train / val / test cases."""

    conditions: tuple[Condition, ...]
    train: tuple[Case, ...]
    val: tuple[Case, ...]
    test: tuple[Case, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.conditions)


def _check_count(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo or \
            (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be an int {rng}, got {v!r}")
    return int(v)


def _case(rng, conds, label, p_key, p_noise) -> Case:
    c = conds[label]
    picked = []
    if rng.random() < p_key:
        picked.append(c.key)
    n_shared = 2 if not picked else int(rng.integers(1, 3))
    picked += list(rng.choice(c.shared, size=n_shared, replace=False))
    if rng.random() < p_noise:
        picked.append(str(rng.choice(NOISE)))
    order = list(rng.permutation(len(picked)))
    fs = [picked[i] for i in order]
    a = ", ".join(fs[:-1])
    text = str(rng.choice(_TEMPLATES)).format(a=a, b=fs[-1])
    return Case(text, int(label), tuple(fs))


def make_task(seed: int, *, n_conditions: int = 4, n_train: int = 16, n_val: int = 8,
              n_test: int = 16, p_key: float = 0.85, p_noise: float = 0.5) -> DiagnosisTask:
    """A deterministic task under ``seed``.

    Args:
      seed: int; the same seed gives the same task.
      n_conditions: even, 2 .. 12 (conditions come in confusable pairs).
      n_train, n_val, n_test: cases per split (labels balanced round-robin, shuffled).
      p_key: probability a case mentions its key finding.
      p_noise: probability a case mentions an unrelated complaint.

    Returns:
      :class:`DiagnosisTask`.
    """
    seed = _check_count("seed", seed, 0)
    n = _check_count("n_conditions", n_conditions, 2, len(NAMES))
    if n % 2:
        raise ValueError(f"n_conditions must be even (confusable pairs), got {n}")
    sizes = [_check_count(k, v, 1) for k, v in
             (("n_train", n_train), ("n_val", n_val), ("n_test", n_test))]
    for k, v in (("p_key", p_key), ("p_noise", p_noise)):
        if not isinstance(v, float | int) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{k} must be a probability in [0, 1], got {v!r}")
    rng = np.random.default_rng(seed)
    names = [NAMES[i] for i in rng.permutation(len(NAMES))[:n]]
    fi = rng.permutation(len(FINDINGS))
    conds, j = [], 0
    for p in range(n // 2):
        shared = (FINDINGS[fi[j]], FINDINGS[fi[j + 1]])
        ka, kb = FINDINGS[fi[j + 2]], FINDINGS[fi[j + 3]]
        j += 4
        conds.append(Condition(names[2 * p], ka, shared, 2 * p + 1))
        conds.append(Condition(names[2 * p + 1], kb, shared, 2 * p))
    splits = []
    for size in sizes:
        labels = rng.permutation(np.arange(size) % n)
        splits.append(tuple(_case(rng, conds, int(y), p_key, p_noise) for y in labels))
    return DiagnosisTask(tuple(conds), *splits)
