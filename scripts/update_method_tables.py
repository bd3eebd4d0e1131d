"""Regenerate the method tables in README.md and docs/index.md from the registry.

    python scripts/update_method_tables.py

Run after changing an experiment's status in ``jaxsci/experiments/__init__.py`` so
the README, the docs index and ``jaxsci list`` never disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

from jaxsci.experiments import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
AREAS = {
    "dynamics": "Dynamical systems (`jaxsci/dynamics`: pure-functional JAX, equinox)",
    "solvers": "Linear solvers (`jaxsci/solvers`)",
    "generative": "Generative models and vision (`jaxsci/generative`)",
    "llm": "Language-model methods (`jaxsci/llm`, Flax NNX)",
    "recsys": "Recommenders (`jaxsci/recsys`)",
    "stats": "Statistics and theory (`jaxsci/stats`)",
    "numerics": "Numerics (`jaxsci/numerics`)",
    "agents": "LLM agents (`jaxsci/agents`)",
}


def readme_table() -> str:
    out = []
    for area, title in AREAS.items():
        out.append(f"\n**{title}**\n\n| name | paper | status |\n|---|---|---|")
        for e in REGISTRY.values():
            if e.area == area:
                status = (f"implemented ([docs](docs/{e.name}.md))"
                          if e.status == "implemented" else e.status)
                out.append(f"| `{e.name}` | {e.paper} | {status} |")
    return "\n".join(out) + "\n"


def index_table() -> str:
    rows = ["| name | page | status |", "|---|---|---|"]
    done = [e for e in REGISTRY.values() if e.status == "implemented"]
    for e in done:
        rows.append(f"| {e.name} | [{e.paper}]({e.name}.md) | implemented |")
    rest = len(REGISTRY) - len(done)
    return ("\n".join(rows) + f"\n\nThe other {rest} papers are listed by `jaxsci list` and in "
            "the README with status `planned`.\n")


def replace_section(path: Path, heading: str, body: str) -> None:
    text = path.read_text()
    pattern = re.compile(rf"(^{re.escape(heading)}\n)(.*?)(?=^## |\Z)", re.S | re.M)
    if not pattern.search(text):
        raise SystemExit(f"{path}: heading {heading!r} not found")
    path.write_text(pattern.sub(lambda m: m.group(1) + body + "\n", text, count=1))


if __name__ == "__main__":
    replace_section(ROOT / "README.md", "## Methods", readme_table())
    replace_section(ROOT / "docs" / "index.md", "## Methods", "\n" + index_table())
    print("updated README.md and docs/index.md")
