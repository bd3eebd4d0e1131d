"""Results writer for experiments: ``metrics.json``, PNG figures and ``report.md``.

Library modules never write files; experiments do, through this class, so every
reproduction leaves the same three kinds of artefact in its output folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Report", "to_jsonable", "prepare_out_dir"]


def to_jsonable(obj: Any) -> Any:
    """Convert arrays, NumPy/JAX scalars and dataclasses to JSON-ready values.

    Non-finite floats become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` so the
    file stays strict JSON that any tool reads.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "__array__") and not isinstance(obj, str | bytes):
        arr = np.asarray(obj)
        if arr.ndim == 0:
            return to_jsonable(arr.item())
        return [to_jsonable(v) for v in arr.tolist()]
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        v = float(obj)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return obj


def prepare_out_dir(out_dir: str | os.PathLike) -> Path:
    """Create ``out_dir`` (and parents); fail clearly if it is a file or not writable."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir must be a folder, got an existing file {str(path)!r}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"out_dir {str(path)!r} cannot be created: {exc.strerror}") from exc
    if not os.access(path, os.W_OK):
        raise ValueError(f"out_dir {str(path)!r} is not writable")
    return path


@dataclasses.dataclass
class Report:
    """What an experiment returns and writes: metrics, figures and a markdown report."""

    name: str
    out_dir: Path
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    figures: list[Path] = dataclasses.field(default_factory=list)
    sections: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.out_dir = prepare_out_dir(self.out_dir)

    def add_figure(self, fig, filename: str, caption: str = "") -> Path:
        """Save a matplotlib figure as PNG into the output folder and reference it."""
        import matplotlib.pyplot as plt

        path = self.out_dir / filename
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)  # sweeps make many figures; pyplot would keep every one alive
        self.figures.append(path)
        self.sections.append(f"![{caption or filename}]({filename})\n\n{caption}\n")
        return path

    def add_text(self, text: str) -> None:
        self.sections.append(text.rstrip() + "\n")

    def write(self) -> Path:
        """Write ``metrics.json`` and ``report.md``; return the folder."""
        (self.out_dir / "metrics.json").write_text(
            json.dumps(to_jsonable(self.metrics), indent=2, sort_keys=True) + "\n"
        )
        body = [f"# {self.name}\n"] + self.sections
        (self.out_dir / "report.md").write_text("\n".join(body))
        return self.out_dir


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend: experiments save
    figures to files and must run on machines without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
