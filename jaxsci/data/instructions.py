"""In-package instruction prompts for chat models: short user requests in a few task
families, built from templates and subjects (no data is downloaded).

Each family has templates and subjects; a prompt is ``template.format(subject)``. The
``(template, subject)`` pairs of a family are split once, by a fixed permutation, into a
held-out ``"eval"`` part and a ``"train"`` part, so that prompts a model is evaluated on
never appear in its training data (:func:`instructions`).

>>> instructions("facts", "eval", 2)
['Tell me about photosynthesis.', 'Why is gravity important?']
"""

from __future__ import annotations

import itertools

import numpy as np

from jaxsci.core.validation import check_choice, check_int

__all__ = ["CHAT_TASKS", "instructions", "pairs"]

_FAMILIES = {
    "facts": (
        ("What is {}?", "Tell me about {}.", "Why is {} important?",
         "Explain {} to a child."),
        ("photosynthesis", "the moon", "volcanoes", "the Roman Empire", "gravity", "DNA",
         "the internet", "rainbows", "honey bees", "the Pacific Ocean", "electricity",
         "the heart", "glaciers", "Mount Everest", "vaccines", "the printing press"),
    ),
    "howto": (
        ("How do I {}?", "Give me three tips to {}.", "Explain how to {} step by step.",
         "What do I need to {}?"),
        ("bake bread", "learn to swim", "plant a tree", "save money", "write a letter",
         "make tea", "fix a flat tire", "study for an exam", "start running",
         "clean a window", "tie a tie", "brew coffee", "train a puppy", "cook rice",
         "paint a room", "learn a language"),
    ),
    "stories": (
        ("Write a short story about {}.", "Write a poem about {}.",
         "Describe {} in a few sentences.", "Tell a fairy tale about {}."),
        ("a lost cat", "a rainy day", "a robot chef", "the first snow",
         "a lighthouse keeper", "a dragon who loves books", "a trip to the sea",
         "an old clock", "a garden at night", "a brave mouse", "a city in the clouds",
         "a friendly ghost", "a broken umbrella", "a talking tree", "the last train",
         "a summer festival"),
    ),
}
CHAT_TASKS = tuple(_FAMILIES)
_EVAL_SHARE = 0.25


def pairs(task: str, split: str) -> list[str]:
    """Every prompt of ``task``'s ``split`` (``"train"`` or ``"eval"``), in a fixed order."""
    check_choice("task", task, CHAT_TASKS)
    check_choice("split", split, ("train", "eval"))
    templates, subjects = _FAMILIES[task]
    prompts = [t.format(s) for t, s in itertools.product(templates, subjects)]
    order = np.random.default_rng(CHAT_TASKS.index(task)).permutation(len(prompts))
    n_eval = int(round(_EVAL_SHARE * len(prompts)))
    keep = order[:n_eval] if split == "eval" else order[n_eval:]
    return [prompts[i] for i in keep]


def instructions(task: str, split: str, n: int, seed: int = 0) -> list[str]:
    """``n`` prompts of ``task``'s ``split``: its first ``n`` in the fixed order, cycled
    (with a seeded shuffle per cycle) when ``n`` exceeds the split's size."""
    check_int("n", n, min=1)
    base = pairs(task, split)
    out: list[str] = []
    rng = np.random.default_rng(seed)
    cycle = base
    while len(out) < n:
        out.extend(cycle[: n - len(out)])
        cycle = [base[i] for i in rng.permutation(len(base))]
    return out
