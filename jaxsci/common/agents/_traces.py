r"""One JSONL trace schema for every agent run, and the human-evaluation sheet.

A :class:`Tracer` appends one JSON object per event (a **span**) to a file and keeps
them in memory. Every record has the same keys (:data:`FIELDS`):

* ``schema`` (:data:`SCHEMA_VERSION`), ``run_id`` (one per agent run), ``config_hash``
  (of the experiment's config, or ``None``), ``seed``;
* ``span_id`` (``"<run_id>/<n>"``), ``parent_id`` (the span this one belongs to: a tool
  call's parent is the LLM call that made it, a tool result's the call; ``None`` for the
  run's root);
* ``kind``: one of :data:`KINDS` -- ``run``, ``llm_call``, ``score``, ``tool_call``,
  ``tool_result``, ``env_step``, ``memory_read``, ``memory_write``, ``handoff``,
  ``verify``, ``answer``;
* ``time`` (UTC, ISO 8601), ``latency_s``;
* ``model_id`` and ``weights_hash`` (:func:`~jaxsci.common.lm.callcache.model_fingerprint`:
  a hash of an in-process model's weights, the URL and name of a server's), for model
  spans;
* ``prompt_tokens``, ``completion_tokens``, ``cache_hit`` (``True`` / ``False`` when the
  model is a :class:`~jaxsci.common.lm.callcache.CachedChat`, else ``None``);
* ``segments``: the context the span saw, as ``{"provenance", "role", "content"}``
  pieces, ``provenance`` one of :data:`PROVENANCE` (``user``, ``tool``, ``memory``,
  ``agent``, ``system``): from a message's own ``"provenance"`` key when it has one
  (memory inserted as a system message says ``"memory"``), else from its role;
* ``data``: whatever the kind carries (the reply, the call's name and arguments, the
  verifier's verdict, ...).

:func:`read_trace` reads a file back into the same dicts (a round trip is exact), checking
each line against the schema.

**Human evaluation.** :func:`export_eval_sheet` writes a *blinded* CSV: items shuffled,
each under an opaque id, the condition (model, prompt version, mode) hidden, with one
empty column per rubric criterion; the key that unblinds it is a separate JSON file.
:func:`import_eval_sheet` reads filled sheets back and joins them to the key;
:func:`cohen_kappa` measures inter-rater agreement and :func:`judge_agreement` the
agreement of an automatic judge with the human ratings.

>>> cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0])
0.5
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import itertools
import json
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxsci.common.lm import callcache

__all__ = [
    "SCHEMA_VERSION",
    "FIELDS",
    "KINDS",
    "PROVENANCE",
    "Tracer",
    "read_trace",
    "check_record",
    "config_hash",
    "segments_of",
    "export_eval_sheet",
    "import_eval_sheet",
    "cohen_kappa",
    "judge_agreement",
]

SCHEMA_VERSION = 1
KINDS = ("run", "llm_call", "score", "tool_call", "tool_result", "env_step", "memory_read",
         "memory_write", "handoff", "verify", "answer")
PROVENANCE = ("user", "tool", "memory", "agent", "system")
_ROLE_PROVENANCE = {"user": "user", "tool": "tool", "assistant": "agent", "system": "system"}
FIELDS = ("schema", "run_id", "config_hash", "seed", "span_id", "parent_id", "kind", "time",
          "latency_s", "model_id", "weights_hash", "prompt_tokens", "completion_tokens",
          "cache_hit", "segments", "data")


def _dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=False,
                      default=_default)


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, tuple) and hasattr(type(x), "_asdict"):
        return x._asdict()
    if hasattr(x, "to_openai"):
        return x.to_openai()
    raise TypeError(f"a trace value must be JSON-serialisable, got {type(x).__name__}")


def config_hash(config) -> str:
    """16 hex digits of the sha256 of a config's canonical JSON (dataclasses by fields)."""
    import dataclasses

    def plain(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {"__type__": type(x).__qualname__,
                    **{f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}}
        if isinstance(x, Mapping):
            return {str(k): plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        return x

    return hashlib.sha256(_dumps(plain(config)).encode()).hexdigest()[:16]


def segments_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The provenance-tagged segments of a conversation.

    Args:
      messages: chat messages; a message's ``"provenance"`` key (one of
        :data:`PROVENANCE`) overrides the one its role implies.

    Returns:
      ``[{"provenance", "role", "content"}]``, one per message; an assistant message's
      tool calls are appended to its content as JSON.
    """
    out = []
    for i, m in enumerate(messages):
        role = m.get("role")
        prov = m.get("provenance", _ROLE_PROVENANCE.get(role))
        if prov not in PROVENANCE:
            raise ValueError(f"messages[{i}]: provenance must be one of {PROVENANCE}, got "
                             f"{prov!r} (role {role!r})")
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content)
        content = content or ""
        if m.get("tool_calls"):
            content += _dumps([c.to_openai() if hasattr(c, "to_openai") else c
                               for c in m["tool_calls"]])
        out.append({"provenance": prov, "role": role, "content": content})
    return out


def check_record(record, where: str = "record") -> dict[str, Any]:
    """Check one trace record against the schema; return it.

    Raises:
      ValueError: a missing or unknown key, an unknown kind or provenance, a wrong schema
        version.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where} must be a JSON object, got {type(record).__name__}")
    missing = [f for f in FIELDS if f not in record]
    extra = [k for k in record if k not in FIELDS]
    if missing or extra:
        raise ValueError(f"{where} does not follow the trace schema: missing {missing}, "
                         f"unknown {extra}")
    if record["schema"] != SCHEMA_VERSION:
        raise ValueError(f"{where}: schema must be {SCHEMA_VERSION}, got {record['schema']!r}")
    if record["kind"] not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {record['kind']!r}")
    for j, s in enumerate(record["segments"]):
        if not isinstance(s, Mapping) or s.get("provenance") not in PROVENANCE:
            raise ValueError(f"{where}: segments[{j}] must carry a provenance in "
                             f"{PROVENANCE}, got {s!r}"[:200])
    return dict(record)


class Tracer:
    """Writes the spans of agent runs (the module docstring's schema).

    Args:
      path: a JSONL file to append to, or ``None`` to keep the records in memory only.
      run_id: this run's id (default: 12 random hex digits).
      config: the experiment's config (hashed into ``config_hash``), or ``None``.
      seed: the run's seed, or ``None``.
      model: the chat model, for ``model_id`` and ``weights_hash`` of model spans
        (hashed once, lazily: hashing SmolLM2's weights takes about a second).

    Attributes:
      records: the records written, in order.
    """

    def __init__(self, path=None, *, run_id: str | None = None, config=None,
                 seed: int | None = None, model=None):
        if path is not None and not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str, an os.PathLike or None, got "
                            f"{type(path).__name__}")
        self.path = Path(path) if path is not None else None
        self.run_id = run_id if run_id is not None else secrets.token_hex(6)
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"run_id must be a non-empty str, got {run_id!r}")
        self.config_hash = config_hash(config) if config is not None else None
        self.seed = seed
        self.model = model
        self._weights_hash: str | None = None
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self.records: list[dict[str, Any]] = []

    def child(self, run_id: str, *, seed: int | None = None) -> Tracer:
        """A tracer for another run into the same file (same config and model)."""
        t = Tracer(self.path, run_id=run_id, seed=seed, model=self.model)
        t.config_hash, t._weights_hash = self.config_hash, self._weights_hash
        t.records = self.records
        return t

    @property
    def weights_hash(self) -> str | None:
        if self._weights_hash is None and self.model is not None:
            from jaxsci.common.lm.callcache import model_fingerprint

            try:
                self._weights_hash = model_fingerprint(self.model)
            except TypeError:
                self._weights_hash = f"unhashed:{type(self.model).__name__}"
        return self._weights_hash

    def span(self, kind: str, *, parent: str | None = None, messages=None, data=None,
             latency_s: float | None = None, usage=None, cache_hit: bool | None = None,
             model: bool = False) -> str:
        """Write one record; return its ``span_id``.

        Args:
          kind: one of :data:`KINDS`.
          parent: the parent's ``span_id``.
          messages: the context the span saw (provenance from :func:`segments_of`).
          data: the kind's payload (JSON-serialisable).
          latency_s: seconds the span took.
          usage: an object with ``prompt_tokens`` / ``completion_tokens`` (a chat
            result's ``usage``), for model spans.
          cache_hit: whether a call cache served it.
          model: fill ``model_id`` and ``weights_hash`` from the tracer's model.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        span_id = f"{self.run_id}/{next(self._counter)}"
        record = {
            "schema": SCHEMA_VERSION, "run_id": self.run_id, "config_hash": self.config_hash,
            "seed": self.seed, "span_id": span_id, "parent_id": parent, "kind": kind,
            "time": datetime.datetime.now(datetime.UTC).isoformat(),
            "latency_s": latency_s,
            "model_id": getattr(self.model, "model_id", None) if model else None,
            "weights_hash": self.weights_hash if model else None,
            "prompt_tokens": getattr(usage, "prompt_tokens", None),
            "completion_tokens": getattr(usage, "completion_tokens", None),
            "cache_hit": cache_hit,
            "segments": segments_of(messages) if messages is not None else [],
            "data": data if data is not None else {},
        }
        line = _dumps(record)
        record = json.loads(line)  # what the file holds, so the round trip is exact
        with self._lock:
            self.records.append(record)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
        return span_id


def read_trace(path) -> list[dict[str, Any]]:
    """The records of an agent trace file, each checked by :func:`check_record`.

    Raises:
      FileNotFoundError: no such file; ValueError: a line that is not JSON or breaks the
      schema (with its line number).
    """
    return [check_record(rec, f"{path}:{i}")
            for i, rec in enumerate(callcache.read_trace(path), 1)]


# ----------------------------------------------------------------- human evaluation


def export_eval_sheet(items: Sequence[Mapping[str, Any]], path, *,
                      rubric: Sequence[str] = ("correct",), show: Sequence[str] = ("task",
                                                                                   "answer"),
                      seed: int = 0) -> Path:
    """Write a blinded human-evaluation sheet (CSV) and its key (``<path>.key.json``).

    Args:
      items: one dict per output to rate, with an ``"id"`` and the fields in ``show``;
        every other field (the condition: model, prompt version, mode) stays in the key.
      path: the CSV to write.
      rubric: the criteria, one empty column each, to fill with a score (an integer,
        e.g. 0/1 or 1-5).
      show: the fields the rater sees.
      seed: of the shuffle.

    Returns:
      the key's path. The CSV's columns are ``item``, ``show...``, ``rubric...``,
      ``rater``, ``notes``.
    """
    if not items:
        raise ValueError("items must hold at least one item to rate, got none")
    rubric, show = list(rubric), list(show)
    if not rubric or len(set(rubric)) != len(rubric):
        raise ValueError(f"rubric must name at least one criterion, each once, got {rubric}")
    ids = []
    for i, it in enumerate(items):
        missing = [k for k in ("id", *show) if k not in it]
        if missing:
            raise ValueError(f"items[{i}] lacks {missing} (needs 'id' and show={show})")
        ids.append(str(it["id"]))
    if len(set(ids)) != len(ids):
        raise ValueError("items must have distinct ids")
    order = np.random.default_rng(seed).permutation(len(items))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = {}
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["item", *show, *rubric, "rater", "notes"])
        for j, i in enumerate(order):
            blind = f"item-{j:04d}"
            it = items[int(i)]
            key[blind] = {k: v for k, v in it.items() if k not in show}
            w.writerow([blind, *(str(it[k]) for k in show), *([""] * len(rubric)), "", ""])
    key_path = path.with_name(path.name + ".key.json")
    key_path.write_text(_dumps({"rubric": rubric, "items": key}))
    return key_path


def import_eval_sheet(paths, key_path) -> list[dict[str, Any]]:
    """Read filled sheets and unblind them.

    Args:
      paths: one CSV or several (one per rater), as written by :func:`export_eval_sheet`
        and filled in.
      key_path: the key file.

    Returns:
      one dict per filled row: the key's fields (``id``, the condition), ``rater``
      (the sheet's column, else the file's stem) and each rubric score as an int.

    Raises:
      ValueError: an item id not in the key, a non-integer score (with file and row).
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    key = json.loads(Path(key_path).read_text())
    rubric = key["rubric"]
    out = []
    for p in paths:
        p = Path(p)
        with open(p, newline="", encoding="utf-8") as f:
            for row_no, row in enumerate(csv.DictReader(f), 2):
                item = row.get("item")
                if item not in key["items"]:
                    raise ValueError(f"{p}:{row_no}: item {item!r} is not in the key "
                                     f"{key_path}")
                if all(not (row.get(c) or "").strip() for c in rubric):
                    continue  # not rated
                rec = dict(key["items"][item])
                rec["rater"] = (row.get("rater") or "").strip() or p.stem
                for c in rubric:
                    text = (row.get(c) or "").strip()
                    try:
                        rec[c] = int(text)
                    except ValueError:
                        raise ValueError(f"{p}:{row_no}: rubric column {c!r} must be an "
                                         f"integer score, got {text!r}") from None
                out.append(rec)
    return out


def cohen_kappa(a, b) -> float:
    """Cohen's kappa between two raters' labels of the same items.

    ``(p_o - p_e) / (1 - p_e)``: ``p_o`` the observed agreement, ``p_e`` the agreement
    expected from each rater's label frequencies. 1 when both raters always agree and
    use one label only (``p_e == 1``).

    Args:
      a, b: equal-length sequences of hashable labels.
    """
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError(f"a and b must label the same non-empty items, got {len(a)} and "
                         f"{len(b)} labels")
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    labels = set(a) | set(b)
    p_e = sum((a.count(v) / n) * (b.count(v) / n) for v in labels)
    if p_e == 1.0:
        return 1.0
    return (p_o - p_e) / (1.0 - p_e)


def judge_agreement(judge: Mapping[str, Any], human: Mapping[str, Any]) -> dict[str, float]:
    """Agreement of an automatic judge with human labels on the items both rated.

    Args:
      judge, human: item id -> label.

    Returns:
      ``{"n": items in common, "accuracy": fraction equal, "kappa": Cohen's kappa}``.
    """
    common = sorted(set(judge) & set(human), key=str)
    if not common:
        raise ValueError("judge and human share no item id")
    j = [judge[k] for k in common]
    h = [human[k] for k in common]
    return {"n": len(common),
            "accuracy": sum(x == y for x, y in zip(j, h, strict=True)) / len(common),
            "kappa": cohen_kappa(j, h)}
