"""A small fact table authored for factuality checks of generated text (no download).

Each :class:`Country` has a capital, a continent and a main language, each with
aliases. :func:`check_facts` reads a free-text response and says, per attribute,
whether it states the true value (any alias, whole words, case-insensitive). The table
mixes well-known and less-known countries, so that a small model's error rate varies
across prompts (the label variance the isotropy experiment needs).
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["ATTRIBUTES", "COUNTRIES", "Country", "check_facts", "nonfactuality"]

ATTRIBUTES = ("capital", "continent", "language")


class Country(NamedTuple):
    name: str
    capital: tuple[str, ...]
    continent: tuple[str, ...]
    language: tuple[str, ...]


def _c(name, capital, continent, language) -> Country:
    def tup(x):
        return (x,) if isinstance(x, str) else tuple(x)

    return Country(name, tup(capital), tup(continent), tup(language))


EU, AS, AF, SA, NA, OC = "Europe", "Asia", "Africa", ("South America",), \
    ("North America", "Central America", "Caribbean"), ("Oceania", "Australia")

COUNTRIES: tuple[Country, ...] = (
    _c("France", "Paris", EU, "French"),
    _c("Germany", "Berlin", EU, "German"),
    _c("Italy", "Rome", EU, "Italian"),
    _c("Spain", "Madrid", EU, "Spanish"),
    _c("Japan", "Tokyo", AS, "Japanese"),
    _c("China", ("Beijing", "Peking"), AS, ("Chinese", "Mandarin")),
    _c("Egypt", "Cairo", AF, "Arabic"),
    _c("Brazil", ("Brasilia", "Brasília"), SA, "Portuguese"),
    _c("Mexico", "Mexico City", NA, "Spanish"),
    _c("Russia", "Moscow", (EU, AS), "Russian"),
    _c("Portugal", "Lisbon", EU, "Portuguese"),
    _c("Greece", "Athens", EU, "Greek"),
    _c("Poland", "Warsaw", EU, "Polish"),
    _c("Sweden", "Stockholm", EU, "Swedish"),
    _c("Norway", "Oslo", EU, "Norwegian"),
    _c("Turkey", "Ankara", (AS, EU), "Turkish"),
    _c("Kenya", "Nairobi", AF, ("Swahili", "English")),
    _c("Argentina", "Buenos Aires", SA, "Spanish"),
    _c("Peru", "Lima", SA, "Spanish"),
    _c("Canada", "Ottawa", NA, ("English", "French")),
    _c("Australia", "Canberra", OC, "English"),
    _c("Thailand", "Bangkok", AS, "Thai"),
    _c("Vietnam", "Hanoi", AS, "Vietnamese"),
    _c("Iran", "Tehran", AS, ("Persian", "Farsi")),
    _c("Hungary", "Budapest", EU, "Hungarian"),
    _c("Finland", "Helsinki", EU, ("Finnish", "Swedish")),
    _c("Morocco", "Rabat", AF, ("Arabic", "Berber", "Amazigh")),
    _c("Nigeria", "Abuja", AF, "English"),
    _c("Chile", "Santiago", SA, "Spanish"),
    _c("Colombia", ("Bogota", "Bogotá"), SA, "Spanish"),
    _c("Pakistan", "Islamabad", AS, ("Urdu", "English")),
    _c("Mongolia", ("Ulaanbaatar", "Ulan Bator"), AS, "Mongolian"),
    _c("Kazakhstan", ("Astana", "Nur-Sultan"), AS, ("Kazakh", "Russian")),
    _c("Bolivia", ("Sucre", "La Paz"), SA, ("Spanish", "Quechua", "Aymara")),
    _c("Laos", "Vientiane", AS, ("Lao", "Laotian")),
    _c("Slovenia", "Ljubljana", EU, ("Slovene", "Slovenian")),
    _c("Burkina Faso", "Ouagadougou", AF, "French"),
    _c("Paraguay", ("Asuncion", "Asunción"), SA, ("Spanish", "Guarani", "Guaraní")),
    _c("Kyrgyzstan", "Bishkek", AS, ("Kyrgyz", "Russian")),
    _c("Eritrea", "Asmara", AF, ("Tigrinya", "Arabic", "English")),
    _c("Latvia", "Riga", EU, ("Latvian", "Lettish")),
    _c("Suriname", "Paramaribo", SA, "Dutch"),
    _c("Bhutan", "Thimphu", AS, ("Dzongkha",)),
    _c("Moldova", ("Chisinau", "Chișinău"), EU, ("Romanian", "Moldovan")),
    _c("Malawi", "Lilongwe", AF, ("English", "Chichewa")),
    _c("Tajikistan", "Dushanbe", AS, "Tajik"),
    _c("Belize", "Belmopan", NA, "English"),
    _c("Brunei", "Bandar Seri Begawan", AS, "Malay"),
)


def _says(text: str, aliases: tuple[str, ...]) -> bool:
    low = text.lower()
    return any(re.search(r"(?<![a-z])" + re.escape(a.lower()) + r"(?![a-z])", low)
               for a in aliases)


def check_facts(country: Country, text: str,
                attributes: tuple[str, ...] = ATTRIBUTES) -> dict[str, bool]:
    """Per attribute, whether ``text`` states the true value (an alias, as a whole word)."""
    if not isinstance(country, Country):
        raise TypeError(f"country must be a Country, got {type(country).__name__}")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    bad = [a for a in attributes if a not in ATTRIBUTES]
    if bad or not attributes:
        raise ValueError(f"attributes must be a non-empty subset of {ATTRIBUTES}, got "
                         f"{tuple(attributes)}")
    out = {}
    for attr in attributes:
        out[attr] = _says(text, getattr(country, attr))
    return out


def nonfactuality(country: Country, text: str,
                  attributes: tuple[str, ...] = ATTRIBUTES) -> float:
    """The share of the asked facts (``attributes``) the response does not state correctly.

    A fact left out counts as not stated correctly (the prompt asks for each of them; the
    authors' claim-level labels count unsupported claims, which this table cannot see
    beyond its attributes: the choice is documented in docs/isotropy.md).
    """
    ok = check_facts(country, text, attributes)
    return 1.0 - sum(ok.values()) / len(ok)
