"""The experiment protocol and its driver: one way to declare, run and report a paper.

An experiment module declares one :class:`Experiment`::

    EXPERIMENT = Experiment(
        name="hopfield", title="...", paper="Authors, title (ICML 2026)",
        configs={"smoke": ..., "quick": ..., "full": ...},   # frozen, validated configs
        metrics=(Metric("alpha_c_mc", "capacity at the lowest T", better="higher"), ...),
        claims=(Claim("capacity", "retrieval up to alpha = 0.5 at T -> 0",
                      test="alpha_c_mc >= 0.4", paper_value="0.5"), ...),
        run=run,                                            # run(config, ctx) -> metrics
    )

and the driver, :func:`run_experiment`, does once what every experiment needs:
the seed becomes ``ctx.key``; the wall time, the provenance (jaxsci / jax / jaxlib
versions, devices, git commit), the config and the seed go into ``metrics.json``;
every declared metric is checked present (and finite unless declared otherwise);
the claims are evaluated and written as a ``claims`` block and as a table at the
top of ``report.md`` with a verdict; finished pieces of work (``ctx.cell``) survive
an interruption and are reused bit for bit when the same command is rerun.

A claim's ``test`` is a Python expression over the metrics (names are metric keys,
values NumPy arrays or numbers, ``np`` is NumPy): ``"mae_regime < mae_gaussian"``,
``"np.all(l2_err[-1] < 0.2)"``. Anything more involved is computed in ``run`` as a
declared metric first, so the claim table always shows the numbers it reads.
A claim carries ``scale``: the smallest config at which the paper's effect is
expected to show (``"quick"`` by default, ``"full"`` for claims this hardware cannot
reach). Claims are evaluated at every size and reported honestly; the reproduce
tests assert the ones whose ``scale`` the run reaches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from jaxsci.core.results import Report, prepare_out_dir, to_jsonable

__all__ = [
    "Claim",
    "Context",
    "Experiment",
    "FinishedRunError",
    "Metric",
    "SIZES",
    "apply_overrides",
    "evaluate_claims",
    "key_from_seed",
    "provenance",
    "run_experiment",
]

SIZES = ("smoke", "quick", "full")
MAX_SEED = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Metric:
    """A declared metric: its key in ``metrics.json``, what it means, which way is better.

    ``finite=False`` for metrics that may legitimately be inf/NaN (say, a capacity that
    is infinite by theory); ``unit`` is shown in the report.
    """

    name: str
    meaning: str
    better: Literal["lower", "higher", "none"] = "none"
    unit: str = ""
    finite: bool = True

    def __post_init__(self):
        if self.better not in ("lower", "higher", "none"):
            raise ValueError(f"Metric {self.name!r}: better must be lower|higher|none, "
                             f"got {self.better!r}")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One of the paper's claims, as a test over the metrics.

    Attributes:
      name: a short identifier (``"lsr_beats_lse"``).
      statement: the paper's statement, in words.
      test: a Python expression over metric keys that is true when the claim holds.
      paper_value: the paper's number, when it gives one (text, with units).
      scale: the smallest config (``smoke`` | ``quick`` | ``full``) at which the effect is
        expected; below it the claim is still evaluated and reported, not asserted.
      note: why the reproduction may differ (shown in the report).
    """

    name: str
    statement: str
    test: str
    paper_value: str | None = None
    scale: Literal["smoke", "quick", "full"] = "quick"
    note: str = ""

    def __post_init__(self):
        if self.scale not in SIZES:
            raise ValueError(f"Claim {self.name!r}: scale must be one of {SIZES}, "
                             f"got {self.scale!r}")
        try:
            compile(self.test, f"<claim {self.name}>", "eval")
        except SyntaxError as exc:
            raise ValueError(f"Claim {self.name!r}: test {self.test!r} is not a Python "
                             f"expression: {exc.msg}") from None

    def names(self) -> list[str]:
        """The metric keys the test reads."""
        import ast

        tree = ast.parse(self.test, mode="eval")
        out = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in _SAFE and node.id not in out:
                out.append(node.id)
        return out


_SAFE = {"np": np, "abs": abs, "min": min, "max": max, "all": all, "any": any,
         "len": len, "sum": sum, "True": True, "False": False, "None": None,
         "float": float, "int": int, "bool": bool}


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A paper's reproduction: configs, declared metrics and claims, and ``run``.

    ``run(config, ctx)`` returns the metrics dict (JSON-able values: numbers, arrays,
    nested dicts); figures and text go through ``ctx.report``.
    """

    name: str
    title: str
    paper: str
    configs: Mapping[str, Any]
    metrics: tuple[Metric, ...]
    claims: tuple[Claim, ...]
    run: Callable[[Any, Context], dict]
    docs: str = ""
    # A rough memory need per size in GB (checked before a run starts); None: no check.
    memory_gb: Callable[[Any], float] | None = None

    def __post_init__(self):
        missing = [s for s in SIZES if s not in self.configs]
        if missing:
            raise ValueError(f"experiment {self.name!r}: configs lacks {missing}")
        kinds = {type(c) for c in self.configs.values()}
        if len(kinds) != 1:
            raise TypeError(f"experiment {self.name!r}: configs must share one type, got "
                            f"{sorted(k.__name__ for k in kinds)}")
        names = [m.name for m in self.metrics]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"experiment {self.name!r}: metrics declared twice: {sorted(dup)}")
        known = set(names)
        for c in self.claims:
            unknown = [n for n in c.names() if n not in known]
            if unknown:
                raise ValueError(f"experiment {self.name!r}, claim {c.name!r}: reads "
                                 f"undeclared metrics {unknown}")
        if not self.docs:
            object.__setattr__(self, "docs", f"docs/{self.name}.md")

    @property
    def config_type(self) -> type:
        return type(self.configs["quick"])

    def config(self, size: str, overrides: Sequence[str] = ()) -> Any:
        """The ``size`` config with ``field=value`` overrides (see :func:`apply_overrides`)."""
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size!r}")
        return apply_overrides(self.configs[size], overrides)


class FinishedRunError(Exception):
    """The output folder holds a finished run; pass ``force=True`` to overwrite it."""


@dataclasses.dataclass
class Context:
    """What the driver hands to ``run``: the key, the output folder, progress, resume."""

    key: Any
    seed: int
    size: str
    out_dir: Path
    report: Report
    progress: bool = True
    _cells_dir: Path | None = None
    _resumed: list[str] = dataclasses.field(default_factory=list)
    _computed: list[str] = dataclasses.field(default_factory=list)

    def bar(self, total: int | None = None, desc: str = "", **kwargs):
        """A tqdm progress bar named ``desc`` (hidden when progress is off)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=not self.progress, leave=False, **kwargs)

    def checkpoint_dir(self, name: str) -> Path:
        """A folder for ``core.fit`` checkpoints of the stage ``name`` (kept across reruns)."""
        path = self.out_dir / "checkpoints" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def cell(self, tag: str, compute: Callable[[], Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """``compute()`` once per run: a finished cell is saved and reused after an interruption.

        ``compute`` returns a flat dict of arrays (or numbers); the saved copy is exact
        (``.npz``), so a resumed run gives bit-identical results.
        """
        if self._cells_dir is None:
            return {k: np.asarray(v) for k, v in compute().items()}
        path = self._cells_dir / (_safe(tag) + ".npz")
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                out = {k: data[k] for k in data.files}
            self._resumed.append(tag)
            return out
        out = {k: np.asarray(v) for k, v in compute().items()}
        tmp = path.with_name(path.stem + ".tmp.npz")
        np.savez(tmp, **out)
        tmp.replace(path)  # atomic: an interruption never leaves half a cell
        self._computed.append(tag)
        return out

    @property
    def resumed(self) -> list[str]:
        """Tags of the cells reused from an interrupted run."""
        return list(self._resumed)

    @property
    def saved(self) -> int:
        """How many cells are saved so far (reused or computed)."""
        return len(self._resumed) + len(self._computed)


def _safe(tag: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    return out + "-" + hashlib.sha1(tag.encode()).hexdigest()[:8]


# ---------------------------------------------------------------------------------------
# seeds, overrides, provenance


def key_from_seed(seed: int):
    """A typed PRNG key from any seed in ``[0, 2**63)``, without wrap-around.

    Seeds below 2**32 give ``jax.random.key(seed)`` (the usual key); larger ones fold
    the high word in, so ``2**32`` and ``0`` give different keys.
    """
    import jax

    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {seed}")
    key = jax.random.key(seed & 0xFFFFFFFF)
    if seed >> 32:
        key = jax.random.fold_in(key, seed >> 32)
    return key


def _field_types(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # pragma: no cover - unresolvable annotations
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _coerce(path: str, text: str, tp: Any) -> Any:
    import ast

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        if text.lower() == "none" and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(path, text, a)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"--set {path}: cannot parse {text!r}")
    if origin is Literal:
        for a in args:
            if str(a) == text:
                return a
        raise ValueError(f"--set {path}: must be one of {list(args)}, got {text!r}")
    if origin in (tuple, list):
        try:
            val = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            val = text
        items = list(val) if isinstance(val, list | tuple) else [
            s.strip() for s in str(text).strip("()[]").split(",") if s.strip()]
        elem = args[0] if args else str
        if len(args) == 2 and args[1] is Ellipsis or len(args) <= 1:
            return tuple(_coerce(path, str(v), elem) for v in items)
        if len(items) != len(args):
            raise ValueError(f"--set {path}: expected {len(args)} values, got {len(items)}")
        return tuple(_coerce(path, str(v), a) for v, a in zip(items, args, strict=True))
    if tp is bool:
        low = text.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(f"--set {path}: expected true or false, got {text!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"--set {path}: expected an integer, got {text!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--set {path}: expected a number, got {text!r}") from None
    if tp is str:
        return text
    if tp is Any:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    raise ValueError(f"--set {path}: fields of type {tp} cannot be set from the command line")


def _replace(config: Any, parts: list[str], text: str, done: str) -> Any:
    if not dataclasses.is_dataclass(config):
        raise ValueError(f"--set {done}: {type(config).__name__} has no fields to set")
    fields = {f.name: f for f in dataclasses.fields(config) if f.init}
    name = parts[0]
    path = f"{done}.{name}" if done else name
    if name not in fields:
        raise ValueError(f"--set {path}: unknown field of {type(config).__name__}; "
                         f"fields: {', '.join(sorted(fields))}")
    current = getattr(config, name)
    if len(parts) > 1:
        value = _replace(current, parts[1:], text, path)
    else:
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            raise ValueError(f"--set {path}: is a nested config; set one of its fields "
                             f"({path}.FIELD=VALUE)")
        value = _coerce(path, text, _field_types(type(config)).get(name, Any))
    try:
        return dataclasses.replace(config, **{name: value})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--set {path}={text}: {exc}") from None


def apply_overrides(config: Any, overrides: Sequence[str]) -> Any:
    """Return ``config`` with ``"a.b=value"`` overrides applied (nested fields with dots).

    Values are parsed by the field's annotated type (int, float, bool, str, tuples,
    ``Literal``, optional fields); the new config validates on construction, so a bad
    value fails here with the field's own message. The order of the overrides does not
    matter: one that a cross-field check refuses until another is applied is retried.

    >>> import dataclasses
    >>> @dataclasses.dataclass(frozen=True)
    ... class C:
    ...     n: int = 2
    ...     ts: tuple[float, ...] = (0.1,)
    >>> apply_overrides(C(), ["n=5", "ts=0.5,1.0"])
    C(n=5, ts=(0.5, 1.0))
    """
    pending = []
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        path, text = item.split("=", 1)
        parts = path.strip().split(".")
        if not all(parts):
            raise ValueError(f"--set: bad field name {path!r}")
        pending.append((parts, text.strip()))
    # Each override is applied to a valid config and validated with it. One that a
    # field's cross-check refuses now (``init=pod`` before the ``basis`` it needs) is
    # retried after the others, so the order on the command line does not matter; an
    # override refused in every order raises its own message.
    while pending:
        failed, first = [], None
        for parts, text in pending:
            try:
                config = _replace(config, parts, text, "")
            except (ValueError, TypeError) as e:
                failed.append((parts, text))
                first = first or e
        if len(failed) == len(pending):
            raise first
        pending = failed
    return config


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance() -> dict[str, Any]:
    """Versions (jaxsci, jax, jaxlib, Python), devices and the git commit of a checkout."""
    import jax
    import jaxlib

    import jaxsci
    from jaxsci.core import cpu_lapack

    devs = jax.devices()
    return {
        "jaxsci": jaxsci.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device_kind": devs[0].device_kind,
        "device_count": len(devs),
        "backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        # Batched CPU LAPACK calls lowered as loops (jaxsci/core/cpu_lapack.py): timings
        # of batched linear algebra differ with and without it.
        "cpu_lapack_guard": bool(cpu_lapack.installed()),
        "git_commit": _git_commit(),
    }


# ---------------------------------------------------------------------------------------
# claims


def _as_value(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _as_value(x) for k, x in v.items()}
    if isinstance(v, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}.get(v, v)
    if isinstance(v, list | tuple):
        try:
            return np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            return v
    if hasattr(v, "__array__"):
        arr = np.asarray(v)
        return arr.item() if arr.ndim == 0 else arr
    return v


def _short(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    if isinstance(v, np.ndarray):
        if v.size <= 4:
            return "[" + ", ".join(_short(x) for x in v.ravel()) + "]"
        return f"array{v.shape} in [{np.nanmin(v):.3g}, {np.nanmax(v):.3g}]"
    return str(v)


def evaluate_claims(claims: Sequence[Claim], metrics: Mapping[str, Any],
                    size: str) -> list[dict[str, Any]]:
    """Evaluate each claim's test on ``metrics``; the ``claims`` block of ``metrics.json``."""
    values = {k: _as_value(v) for k, v in metrics.items()}
    rank = SIZES.index(size)
    out = []
    for c in claims:
        reads = {n: values.get(n) for n in c.names()}
        error = None
        try:
            holds = bool(eval(c.test, {"__builtins__": {}, **_SAFE}, dict(values)))  # noqa: S307
        except Exception as exc:  # a claim that cannot be evaluated fails, with why
            holds, error = False, f"{type(exc).__name__}: {exc}"
        out.append({
            "name": c.name,
            "statement": c.statement,
            "test": c.test,
            "measured": {k: _short(v) for k, v in reads.items()},
            "paper_value": c.paper_value,
            "scale": c.scale,
            "expected_at_this_size": SIZES.index(c.scale) <= rank,
            "holds": holds,
            "error": error,
            "note": c.note,
        })
    return out


def verdict(block: Sequence[Mapping[str, Any]]) -> str:
    """``reproduced`` (every expected claim holds), ``partly`` or ``not``."""
    expected = [c for c in block if c["expected_at_this_size"]] or list(block)
    held = sum(c["holds"] for c in expected)
    if not expected:
        return "no claims"
    if held == len(expected):
        return "reproduced"
    return "partly" if held else "not"


def claims_markdown(exp: Experiment, block: Sequence[Mapping[str, Any]], size: str,
                    seed: int, wall: float) -> str:
    held = sum(c["holds"] for c in block)
    head = [
        f"**Paper:** {exp.paper}  ",
        f"**Run:** `{size}` config, seed {seed}, {wall:.1f} s wall time.  ",
        f"**Verdict:** {verdict(block)} ({held}/{len(block)} claims hold at this size).  ",
        f"**Method docs:** `{exp.docs}` in the jaxsci repository.",
        "",
        "| claim | paper's statement | test | measured | paper | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in block:
        measured = ", ".join(f"{k} = {v}" for k, v in c["measured"].items())
        if c["holds"]:
            v = "reproduced"
        elif c["expected_at_this_size"]:
            v = "**not reproduced**"
        else:
            v = f"not reproduced (expected at `{c['scale']}`)"
        if c["error"]:
            v += f" ({c['error']})"
        head.append(f"| {c['name']} | {c['statement']} | `{c['test']}` | {measured} | "
                    f"{c['paper_value'] or '-'} | {v} |")
    notes = [f"- **{c['name']}**: {c['note']}" for c in block if c["note"]]
    if size == "smoke":
        notes.insert(0, "- This is a `smoke` run (it checks the pipeline): claims are not "
                        "expected to hold at this size.")
    return "\n".join(head) + ("\n\n" + "\n".join(notes) if notes else "") + "\n"


# ---------------------------------------------------------------------------------------
# the driver


def _config_hash(config: Any, seed: int) -> str:
    blob = json.dumps({"config": to_jsonable(config), "type": type(config).__qualname__,
                       "seed": seed}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _check_metrics(exp: Experiment, metrics: Mapping[str, Any]) -> None:
    for m in exp.metrics:
        if m.name not in metrics:
            raise RuntimeError(f"experiment {exp.name!r}: run() did not return the declared "
                               f"metric {m.name!r}")
        if m.finite:
            vals = _numbers(metrics[m.name])
            if vals is not None and (vals.size == 0 or not np.all(np.isfinite(vals))):
                raise RuntimeError(f"experiment {exp.name!r}: metric {m.name!r} is not finite "
                                   f"({_short(vals)})")


def _numbers(v: Any) -> np.ndarray | None:
    if isinstance(v, dict):
        parts = [_numbers(x) for x in v.values()]
        parts = [p.ravel() for p in parts if p is not None]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(v, str):
        return None
    try:
        return np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return None


def run_experiment(
    exp: Experiment,
    size: str | Any,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    overrides: Sequence[str] = (),
    progress: bool = True,
    force: bool = False,
    resume: bool = True,
) -> Report:
    """Run ``exp`` at ``size`` (``smoke|quick|full``, or a config object) into ``out_dir``.

    Args:
      exp: the :class:`Experiment`.
      size: a size name, or a config of the experiment's config type.
      out_dir: the output folder (created).
      seed: the random seed, ``0 <= seed < 2**63`` (see :func:`key_from_seed`).
      overrides: ``"field=value"`` strings applied to the config (dots for nesting).
      progress: show progress bars.
      force: overwrite a finished run in ``out_dir`` (otherwise
        :class:`FinishedRunError`), and discard any unfinished work saved there.
      resume: reuse the cells an interrupted run with the same config and seed saved.

    Returns:
      the written :class:`~jaxsci.core.Report`; ``report.metrics`` holds the metrics,
      the ``claims`` block, ``provenance``, ``config``, ``seed``, ``size`` and
      ``wall_time_s`` (summed over the interrupted attempts of a resumed run).
    """
    if isinstance(size, str):
        config = exp.config(size, overrides)
        size_name = size
    else:
        if not isinstance(size, exp.config_type):
            raise TypeError(f"size must be one of {SIZES} or a {exp.config_type.__name__}, "
                            f"got {type(size).__name__}")
        config = apply_overrides(size, overrides)
        size_name = next((k for k, v in exp.configs.items() if v == config), "custom")
    rank_size = size_name if size_name in SIZES else "quick"
    key = key_from_seed(seed)
    seed = int(seed)
    if exp.memory_gb is not None:
        _check_memory(exp, config)
    out = prepare_out_dir(out_dir)
    state_file = out / ".jaxsci-run.json"
    cells_dir = out / ".cells"
    digest = _config_hash(config, seed)
    if (out / "metrics.json").exists() and not force:
        raise FinishedRunError(f"{out} already holds a finished run; pass --force (force=True) "
                               "to overwrite it, or choose another --out")
    previous = json.loads(state_file.read_text()) if state_file.exists() else {}
    if force or not resume or previous.get("hash") != digest:
        previous = {}
        shutil.rmtree(cells_dir, ignore_errors=True)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        (out / "metrics.json").unlink(missing_ok=True)
    cells_dir.mkdir(exist_ok=True)
    state_file.write_text(json.dumps({"hash": digest, "experiment": exp.name, "seed": seed,
                                      "size": size_name,
                                      "elapsed_s": previous.get("elapsed_s", 0.0)}))
    report = Report(f"{exp.name}: {exp.title}", out)
    ctx = Context(key=key, seed=seed, size=size_name, out_dir=out, report=report,
                  progress=progress, _cells_dir=cells_dir)
    before = float(previous.get("elapsed_s", 0.0)) if previous.get("hash") == digest else 0.0
    t0 = time.perf_counter()
    try:
        metrics = exp.run(config, ctx)
    except BaseException:
        # Interrupted: remember the time spent, so a resumed run reports the total.
        state_file.write_text(json.dumps({"hash": digest, "experiment": exp.name, "seed": seed,
                                          "size": size_name,
                                          "elapsed_s": before + time.perf_counter() - t0}))
        raise
    wall = before + time.perf_counter() - t0
    if not isinstance(metrics, dict):
        raise RuntimeError(f"experiment {exp.name!r}: run() must return a dict of metrics, "
                           f"got {type(metrics).__name__}")
    _check_metrics(exp, metrics)
    block = evaluate_claims(exp.claims, metrics, rank_size)
    metrics = dict(metrics)
    metrics.update({
        "experiment": exp.name,
        "claims": block,
        "verdict": verdict(block),
        "wall_time_s": wall,
        "config": config,
        "config_type": type(config).__qualname__,
        "size": size_name,
        "seed": seed,
        "provenance": provenance(),
        "resumed_cells": ctx.resumed,
    })
    report.metrics = metrics
    report.sections.insert(0, claims_markdown(exp, block, size_name, seed, wall))
    report.write()
    shutil.rmtree(cells_dir, ignore_errors=True)
    state_file.unlink(missing_ok=True)
    return report


def saved_cells(out_dir: str | os.PathLike) -> int:
    """How many finished cells an interrupted run left in ``out_dir``."""
    d = Path(out_dir) / ".cells"
    return len(list(d.glob("*.npz"))) if d.exists() else 0


def _check_memory(exp: Experiment, config: Any) -> None:
    need = float(exp.memory_gb(config))
    have, where = _available_memory_gb()
    if have is not None and need > have:
        raise MemoryError(
            f"experiment {exp.name!r} with this config needs about {need:.0f} GB of memory, "
            f"{where} has {have:.0f} GB available; run a smaller size (--quick) or set "
            "smaller fields with --set, or use a machine with more memory (a GPU for --full)")


def _available_memory_gb() -> tuple[float | None, str]:
    """Memory the run's arrays can use, in GB, and where: the default device's limit on
    an accelerator (``memory_stats()['bytes_limit']``), else MemAvailable from
    /proc/meminfo (counts reclaimable cache); None where unknown."""
    import jax

    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        if "bytes_limit" in stats:
            return stats["bytes_limit"] / 1e9, f"the {dev.device_kind} device"
    return _host_available_gb(), "this machine"


def _host_available_gb() -> float | None:
    """MemAvailable from /proc/meminfo in GB; None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None
