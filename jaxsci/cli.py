"""Command line: ``jaxsci list``, ``jaxsci reproduce NAME``, ``jaxsci bench [NAME]``,
``jaxsci serve``.

User mistakes (unknown name, bad folder, bad seed, bad ``--set``) print one
``jaxsci: error: ...`` line to stderr and exit with code 2, never a traceback;
an internal failure prints a short message and the log path, exit code 1; Ctrl-C
says how much work is saved and exits with 130.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from pathlib import Path

from jaxsci.experiments import REGISTRY, get, load

MAX_SEED = 2**63 - 1

__all__ = ["main"]


class UsageError(Exception):
    """A mistake in the command line: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        raise UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jaxsci", description="JAX reproductions of ICML 2026 papers.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
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
    r.add_argument("--seed", default="0", help="random seed, an integer in [0, 2**63)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field (dots for nested fields); repeatable")
    r.add_argument("--force", action="store_true",
                   help="overwrite a finished run in the output folder")
    r.add_argument("--no-progress", action="store_true", help="hide progress bars")

    s = sub.add_parser("summary", help="the claims table of finished runs: every "
                                        "metrics.json under the given folders")
    s.add_argument("folders", nargs="+", metavar="FOLDER")

    b = sub.add_parser("bench", help="run scripts/bench/NAME.py (from a source checkout); "
                                     "without NAME, list the benchmarks")
    b.add_argument("name", nargs="?")

    v = sub.add_parser("serve", help="serve a chat model over an OpenAI-compatible HTTP API "
                                     "(/v1/chat/completions, /v1/completions, /v1/models)")
    v.add_argument("--model", default="smollm2",
                   help="'smollm2' (in-process, the default), a .gguf file, or the URL of an "
                        "OpenAI-compatible server to proxy (http://host:port/v1)")
    v.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the server has no "
                        "authentication)")
    v.add_argument("--port", default="8000", help="port, 0 for a free one (default 8000)")
    return p


def _parse_seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise UsageError(f"--seed must be a non-negative integer, got {text!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be in [0, 2**63 - 1], got {seed}")
    return seed


def _check_out(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out must be a folder, but {str(path)!r} is a file")
    parent = path if path.exists() else next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise UsageError(f"--out {str(path)!r} cannot be created: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--out {str(path)!r} is not writable")
    return path


def _cmd_summary(folders: list[str]) -> int:
    """The claims table of finished runs, then each claim that did not hold."""
    import json

    rows, missed = [], []
    for folder in folders:
        path = Path(folder)
        if not path.is_dir():
            raise UsageError(f"{folder!r} is not a folder")
        for f in sorted(path.rglob("metrics.json")):
            m = json.loads(f.read_text())
            if "claims" not in m:
                continue
            name = f"{m.get('experiment', f.parent.name)} ({m.get('size', '?')})"
            rows.append({"name": name, "held": sum(c["holds"] for c in m["claims"]),
                         "total": len(m["claims"]), "verdict": m["verdict"],
                         "wall": float(m.get("wall_time_s", 0.0))})
            for c in m["claims"]:
                if not c["holds"]:
                    why = "expected at this size" if c["expected_at_this_size"] else (
                        f"expected at {c.get('scale', 'a larger size')}")
                    missed.append(f"  {name}: {c['name']}: {c['test']} "
                                  f"(measured {c['measured']}; {why})")
    if not rows:
        raise UsageError(f"no finished run (metrics.json with claims) under {folders}")
    print(claims_table(rows))
    if missed:
        print("\nclaims that did not hold:")
        print("\n".join(missed))
    return 0


def _cmd_list() -> int:
    width = max(len(n) for n in REGISTRY)
    for e in REGISTRY.values():
        print(f"{e.name:<{width}}  {e.status:<11}  {e.area:<8}  {e.paper}")
    return 0


def _reproduce_one(name: str, size: str, out: Path, seed: int, progress: bool,
                   overrides: list[str], force: bool) -> dict:
    from jaxsci.core.experiment import FinishedRunError, run_experiment

    exp = load(name).EXPERIMENT
    try:
        exp.config(size, overrides)  # a bad --set fails before anything runs
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(f"[jaxsci] reproduce {name} ({size}) -> {out}", flush=True)
    t0 = time.perf_counter()
    try:
        report = run_experiment(exp, size, out, seed=seed, overrides=overrides,
                                progress=progress, force=force)
    except FinishedRunError as exc:
        raise UsageError(str(exc)) from None
    except MemoryError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        from jaxsci.core.experiment import saved_cells

        n = saved_cells(out)
        ck = out / "checkpoints"
        extra = " and training checkpoints" if ck.exists() and any(ck.iterdir()) else ""
        raise Interrupted(f"interrupted; {n} finished cell(s){extra} saved in {out}, rerun the "
                          "same command to resume") from None
    m = report.metrics
    held = sum(c["holds"] for c in m["claims"])
    print(f"[jaxsci] {name}: {m['verdict']} ({held}/{len(m['claims'])} claims) in "
          f"{time.perf_counter() - t0:.1f} s; wrote {report.out_dir / 'report.md'}", flush=True)
    return {"name": name, "held": held, "total": len(m["claims"]), "verdict": m["verdict"],
            "wall": m["wall_time_s"]}


def claims_table(rows: list[dict]) -> str:
    """The table ``reproduce --all`` ends with: experiment, claims held / total, wall time."""
    width = max([len(r["name"]) for r in rows] + [10])
    lines = [f"{'experiment':<{width}}  claims  verdict     wall time",
             f"{'-' * width}  ------  ----------  ---------"]
    for r in rows:
        lines.append(f"{r['name']:<{width}}  {r['held']:>2}/{r['total']:<3}  {r['verdict']:<10}  "
                     f"{r['wall']:8.1f} s")
    held, total = sum(r["held"] for r in rows), sum(r["total"] for r in rows)
    lines.append(f"{'all':<{width}}  {held:>2}/{total:<3}  {'':<10}  "
                 f"{sum(r['wall'] for r in rows):8.1f} s")
    return "\n".join(lines)


def _show_library_messages() -> None:
    """The library's INFO records (e.g. "resumed from step N") as ``[jaxsci]`` lines."""
    import logging

    log = logging.getLogger("jaxsci")
    if not any(getattr(h, "_jaxsci_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[jaxsci] %(message)s"))
        handler._jaxsci_cli = True
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def _cmd_reproduce(args) -> int:
    _show_library_messages()
    size = args.size or "quick"
    seed = _parse_seed(args.seed)
    progress = not args.no_progress
    if args.all:
        if args.name:
            raise UsageError("give either NAME or --all, not both")
        if args.overrides:
            raise UsageError("--set applies to one experiment; give NAME, not --all")
        names = [n for n, e in REGISTRY.items() if e.status == "implemented"]
        root = _check_out(Path(args.out or "runs"))
        rows = [_reproduce_one(name, size, root / name, seed, progress, [], args.force)
                for name in names]
        print(claims_table(rows), flush=True)
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
    _reproduce_one(args.name, size, out, seed, progress, args.overrides, args.force)
    return 0


def _bench_dirs() -> list[Path]:
    return [Path.cwd() / "scripts" / "bench",
            Path(__file__).resolve().parents[1] / "scripts" / "bench"]


def _cmd_bench(args) -> int:
    dirs = [d for d in _bench_dirs() if d.is_dir()]
    if args.name is None:
        if not dirs:
            raise UsageError("the benchmarks live in the source checkout (scripts/bench/); "
                             "run `jaxsci bench` from a clone of the repository")
        names = sorted({p.stem for d in dirs for p in d.glob("*.py") if not p.stem.startswith("_")})
        print("benchmarks (jaxsci bench NAME):")
        for n in names:
            print(f"  {n}")
        return 0
    if args.name not in REGISTRY:
        raise UsageError(f"unknown experiment {args.name!r}; run `jaxsci list` to see the names")
    script = next((d / f"{args.name}.py" for d in dirs if (d / f"{args.name}.py").exists()), None)
    if script is None:
        where = "" if dirs else "; the benchmarks need a source checkout"
        raise UsageError(f"no benchmark for {args.name!r} (looked for scripts/bench/{args.name}.py "
                         f"in the current folder and the source checkout){where}")
    sys.argv = [str(script)]
    sys.path.insert(0, str(script.parent))  # as `python scripts/bench/NAME.py` does
    runpy.run_path(str(script), run_name="__main__")
    return 0


def _parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise UsageError(f"--port must be an integer in [0, 65535], got {text!r}") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be in [0, 65535], got {port}")
    return port


def _cmd_serve(args) -> int:
    port = _parse_port(args.port)
    _show_library_messages()
    try:
        from jaxsci.common.lm.serve import make_server

        # The spec is checked, then the port bound, then the model loaded: mistakes in
        # the command line fail before the model loads.
        server = make_server(args.model, host=args.host, port=port)
    except (ImportError, ValueError, TypeError, OSError) as exc:
        # OSError: a busy port, a missing model file or wheel, an unreachable server.
        raise UsageError(str(exc)) from None
    print(f"[jaxsci] serving {server.app.state.model.model_id!r} at {server.url} "
          "(OpenAI-compatible; Ctrl-C stops)", flush=True)
    server.run()
    return 0


class Interrupted(Exception):
    """Ctrl-C during a run: one line saying what is saved, exit code 130."""


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.version:
            import jaxsci

            print(f"jaxsci {jaxsci.__version__}")
            return 0
        if args.command == "list":
            return _cmd_list()
        if args.command == "reproduce":
            return _cmd_reproduce(args)
        if args.command == "summary":
            return _cmd_summary(args.folders)
        if args.command == "bench":
            return _cmd_bench(args)
        if args.command == "serve":
            return _cmd_serve(args)
        parser.print_help()
        return 2
    except UsageError as exc:
        print(f"jaxsci: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"jaxsci: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("jaxsci: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal failure: a short message, the traceback in a log
        import tempfile
        import traceback

        log = Path(tempfile.gettempdir()) / "jaxsci-error.log"
        try:
            log.write_text(traceback.format_exc())
            where = f"; the traceback is in {log}"
        except OSError:
            where = ""
        print(f"jaxsci: internal error: {type(exc).__name__}: {str(exc)[:500]}{where}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
