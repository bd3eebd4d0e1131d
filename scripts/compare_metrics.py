"""Compare two runs' ``metrics.json`` value by value, timings and provenance left out.

A change that should not move an experiment's results (a speed-up, a refactor) is
checked by running the same command before and after and comparing the two folders:

    python scripts/compare_metrics.py runs/before/metrics.json runs/after/metrics.json

Prints every key whose value differs (``--rtol`` allows a relative difference for
floats; default 0: identical), and exits 1 when any does. Timings are skipped: keys
that contain ``time``, ``seconds``, ``wall`` or ``speed`` or end in ``_s``, and the
``provenance`` block, and keys containing any ``--ignore`` word (e.g.
``--ignore scaling_exponent`` for lyapunov's fits of wall time against N); NaN equals
NaN.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

WORDS = ("time", "seconds", "wall", "speed")


def _skipped(key: str, ignore: tuple[str, ...] = ()) -> bool:
    key = key.lower()
    return (key == "provenance" or key.endswith("_s")
            or any(w in key for w in WORDS + tuple(ignore)))


def differences(a, b, rtol: float = 0.0, path: str = "", ignore: tuple[str, ...] = ()
                ) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in the first" for k in a if k not in b]
        out += [f"{path}/{k}: only in the second" for k in b if k not in a]
        for k in a:
            if k in b and not _skipped(k, ignore):
                out += differences(a[k], b[k], rtol, f"{path}/{k}", ignore)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in
                differences(x, y, rtol, f"{path}[{i}]", ignore)]
    if isinstance(a, float) and isinstance(b, float):
        if (math.isnan(a) and math.isnan(b)) or a == b:
            return []
        if rtol and math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rtol * abs(a):
            return []
    elif a == b:
        return []
    return [f"{path}: {a!r} vs {b!r}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--rtol", type=float, default=0.0)
    ap.add_argument("--ignore", action="append", default=[],
                    help="skip keys containing this word (repeatable)")
    args = ap.parse_args(argv)
    with open(args.first) as f, open(args.second) as g:
        diff = differences(json.load(f), json.load(g), args.rtol,
                           ignore=tuple(w.lower() for w in args.ignore))
    for line in diff:
        print(line)
    print(f"{len(diff)} difference(s)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
