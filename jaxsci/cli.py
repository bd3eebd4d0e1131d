"""Command line: ``jaxsci list``, ``jaxsci reproduce NAME``, ``jaxsci bench NAME``.

User mistakes (unknown name, bad folder, bad seed) print one line to stderr and
exit with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from pathlib import Path

from jaxsci.experiments import REGISTRY, get, load

__all__ = ["main"]


class UsageError(Exception):
    """A mistake in the command line: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        raise UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jaxsci", description="JAX reproductions of ICML 2026 papers.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("list", help="list every experiment with its paper and status")

    r = sub.add_parser("reproduce", help="run an experiment's reproduction")
    r.add_argument("name", nargs="?", help="experiment name (see `jaxsci list`)")
    r.add_argument("--all", action="store_true", help="run every implemented experiment")
    size = r.add_mutually_exclusive_group()
    size.add_argument("--smoke", dest="size", action="store_const", const="smoke",
                      help="seconds: checks the pipeline")
    size.add_argument("--quick", dest="size", action="store_const", const="quick",
                      help="minutes on a laptop CPU: the paper's trend (default)")
    size.add_argument("--full", dest="size", action="store_const", const="full",
                      help="the paper's scale (GPU)")
    r.add_argument("--out", default=None,
                   help="output folder (default ./runs/NAME; with --all, a parent folder)")
    r.add_argument("--seed", default="0", help="random seed, a non-negative integer")
    r.add_argument("--no-progress", action="store_true", help="hide progress bars")

    b = sub.add_parser("bench", help="run scripts/bench/NAME.py (from a source checkout)")
    b.add_argument("name")
    return p


def _parse_seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise UsageError(f"--seed must be a non-negative integer, got {text!r}") from None
    if seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed}")
    return seed


def _check_out(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out must be a folder, but {str(path)!r} is a file")
    parent = path if path.exists() else next((p for p in path.parents if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--out {str(path)!r} is not writable")
    return path


def _cmd_list() -> int:
    width = max(len(n) for n in REGISTRY)
    for e in REGISTRY.values():
        print(f"{e.name:<{width}}  {e.status:<11}  {e.area:<8}  {e.paper}")
    return 0


def _reproduce_one(name: str, size: str, out: Path, seed: int, progress: bool) -> None:
    module = load(name)
    config = module.CONFIGS[size]
    print(f"[jaxsci] reproduce {name} ({size}) -> {out}", flush=True)
    t0 = time.perf_counter()
    report = module.run(config, out, seed=seed, progress=progress)
    print(f"[jaxsci] {name}: done in {time.perf_counter() - t0:.1f} s; "
          f"wrote {report.out_dir / 'metrics.json'}, {report.out_dir / 'report.md'}", flush=True)


def _cmd_reproduce(args) -> int:
    size = args.size or "quick"
    seed = _parse_seed(args.seed)
    progress = not args.no_progress
    if args.all:
        if args.name:
            raise UsageError("give either NAME or --all, not both")
        names = [n for n, e in REGISTRY.items() if e.status == "implemented"]
        root = _check_out(Path(args.out or "runs"))
        for name in names:
            _reproduce_one(name, size, root / name, seed, progress)
        return 0
    if not args.name:
        raise UsageError("reproduce needs an experiment NAME or --all (see `jaxsci list`)")
    try:
        entry = get(args.name)
    except KeyError:
        raise UsageError(
            f"unknown experiment {args.name!r}; run `jaxsci list` to see the names"
        ) from None
    if entry.status != "implemented":
        raise UsageError(f"experiment {args.name!r} is {entry.status}, not implemented yet")
    out = _check_out(Path(args.out or Path("runs") / args.name))
    _reproduce_one(args.name, size, out, seed, progress)
    return 0


def _cmd_bench(args) -> int:
    get_ok = args.name in REGISTRY
    if not get_ok:
        raise UsageError(f"unknown experiment {args.name!r}; run `jaxsci list` to see the names")
    candidates = [Path.cwd() / "scripts" / "bench" / f"{args.name}.py",
                  Path(__file__).resolve().parents[1] / "scripts" / "bench" / f"{args.name}.py"]
    script = next((c for c in candidates if c.exists()), None)
    if script is None:
        raise UsageError(f"no benchmark for {args.name!r} (looked for scripts/bench/{args.name}.py "
                         "in the current folder and the source checkout)")
    sys.argv = [str(script)]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "list":
            return _cmd_list()
        if args.command == "reproduce":
            return _cmd_reproduce(args)
        if args.command == "bench":
            return _cmd_bench(args)
        parser.print_help()
        return 2
    except UsageError as exc:
        print(f"jaxsci: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
