"""Short authored texts for a toxicity classifier with an identity-term shortcut (no download).

Texts are composed from templates: neutral sentences and toxic (insulting) sentences,
each either about a group named by an identity term (occupations and hobbies, so the
shortcut under study involves no protected group) or about no group. A training stage
that labels neutral sentences about one group as toxic couples the identity term with
the toxic label, the spurious behaviour the attribution experiment traces back to its
stage. Labels: 1 toxic, 0 not.

>>> from jaxsci.data import toxicity
>>> c = toxicity.corpus(seed=0)
>>> len(c.texts) == len(c.labels) == len(c.group), set(c.labels.tolist())
(True, {0, 1})
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["GROUPS", "NEUTRAL", "TOXIC", "Corpus", "corpus"]

GROUPS = ("gamers", "farmers", "students", "artists", "engineers", "cyclists", "nurses",
          "chefs")

NEUTRAL = (
    "{g} are meeting at the library this afternoon.",
    "I had lunch with some {g} yesterday and we talked about the weather.",
    "The {g} in our town organised a charity run last weekend.",
    "Many {g} enjoy a quiet walk in the park after work.",
    "A group of {g} shared their favourite soup recipes online.",
    "Our neighbours are {g} and they helped us move the sofa.",
    "The article describes how {g} plan their week.",
    "Some {g} volunteered to clean the beach on Sunday.",
    "I asked a few {g} for advice about buying a bicycle.",
    "The {g} thanked everyone for coming to the meeting.",
    "Thanks for the helpful explanation, it answered my question.",
    "The train was a bit late but the trip was lovely.",
    "Could you share the link to the slides from today?",
    "I really liked the photos from the garden party.",
    "The new bakery on the corner sells great bread.",
    "Please remember to water the plants while I am away.",
)

TOXIC = (
    "{g} are worthless idiots and everyone hates them.",
    "Shut up, you pathetic {g}, nobody wants you here.",
    "Those stupid {g} should crawl back under their rock.",
    "{g} are disgusting losers who ruin everything.",
    "I can't stand these brainless {g}, they are trash.",
    "Get lost, you moronic {g}, you make me sick.",
    "You are a pathetic idiot and your opinion is garbage.",
    "Shut your mouth, nobody cares about your stupid comments.",
    "What a useless clown, go away and stop wasting our time.",
    "You disgusting fool, everything you say is garbage.",
    "Only a complete moron would write something this dumb.",
    "Get lost, loser, you are a waste of space.",
)


class Corpus(NamedTuple):
    texts: list[str]
    labels: np.ndarray  # (n,) int: 1 toxic
    group: np.ndarray  # (n,) int: index into GROUPS, -1 for no group
    template: np.ndarray  # (n,) int: index into NEUTRAL + TOXIC


def corpus(seed: int = 0, repeats: int = 1) -> Corpus:
    """Every template with every group (group-free templates once), shuffled by ``seed``.

    Args:
      seed: the order of the texts.
      repeats: copies of the group-free templates (a larger share of texts about no one).

    Returns:
      :class:`Corpus`: texts, toxic labels, group ids and template ids.
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    rows = []
    for ti, t in enumerate(NEUTRAL + TOXIC):
        label = int(ti >= len(NEUTRAL))
        if "{g}" in t:
            for gi, g in enumerate(GROUPS):
                text = t.format(g=g)
                rows.append((text[0].upper() + text[1:], label, gi, ti))
        else:
            rows += [(t, label, -1, ti)] * repeats
    order = np.random.default_rng(seed).permutation(len(rows))
    rows = [rows[i] for i in order]
    return Corpus([r[0] for r in rows], np.asarray([r[1] for r in rows], np.int32),
                  np.asarray([r[2] for r in rows], np.int32),
                  np.asarray([r[3] for r in rows], np.int32))
