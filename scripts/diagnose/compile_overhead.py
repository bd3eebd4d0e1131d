"""The fixed cost of building one XLA CPU program, under different XLA flags, and what
XLA's optimisation level costs and buys for SmolLM2's decoding program.

``tiny``: 200 distinct tiny jitted programs (``a * c + 1`` on a 7x5 array, ``c`` a new
constant each time, so none is a cache hit), each XLA flag set in a fresh process; prints
milliseconds per program, and of them the tracing and lowering alone. The test suite's
setting (``tests/conftest.py``) is the baseline every other set adds to.

``decode``: ``Engine.generate`` of 32 new tokens for two prompts on SmolLM2-135M at XLA
backend level 0 and 3 (a fresh process each): the first call (compile and run) and the
second (run only).

    python scripts/diagnose/compile_overhead.py tiny \\
        --add=--xla_cpu_emitter_verification_level=0 --add="--xla_cpu_max_isa=AVX2"
    python scripts/diagnose/compile_overhead.py decode

No persistent compilation cache is used. Pin it to a core (``taskset -c 1``) and compare
numbers from one run only: the machine's speed varies between hours.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SUITE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def _tiny(n: int = 200) -> None:
    import jax
    import jax.numpy as jnp

    x = jnp.ones((7, 5))

    def build(count, offset, lower_only=False):
        t = time.perf_counter()
        for i in range(count):
            f = jax.jit(lambda a, c=float(i + offset): a * c + 1.0)
            if lower_only:
                f.lower(x)
            else:
                f(x).block_until_ready()
        return (time.perf_counter() - t) / count * 1e3

    build(20, 10_000)  # warm the dispatch path
    total = build(n, 0)
    lower = build(n, 20_000, lower_only=True)
    print(f"{total:6.2f} ms per tiny program, of which tracing + lowering {lower:5.2f} ms  "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)


def _decode() -> None:
    from jaxsci.common.lm.engine import Engine

    engine = Engine.smollm2()
    prompts = ["The capital of France is", "Write a short poem about the sea and the wind"]
    t = time.perf_counter()
    engine.generate(prompts, 32)
    first = time.perf_counter() - t
    t = time.perf_counter()
    out = engine.generate(prompts, 32)
    second = time.perf_counter() - t
    print(f"first call {first:5.1f} s, second {second:5.2f} s ({len(out[0].tokens)} tokens "
          f"for prompt 0)  XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)


def _child(kind: str, flags: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["XLA_FLAGS"] = flags
    subprocess.run([sys.executable, __file__, "_" + kind], env=env, check=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_tiny", "_decode"):  # a child process
        (_tiny if argv[0] == "_tiny" else _decode)()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("tiny", "decode"))
    ap.add_argument("--add", action="append", default=[],
                    help="tiny: an XLA flag set to add to the suite's setting, as "
                         "--add=--xla_...; repeat for more sets")
    args = ap.parse_args(argv)
    if args.kind == "tiny":
        for extra in ("", *args.add):
            _child("tiny", f"{SUITE} {extra}".strip())
    else:
        for level in (0, 3):
            _child("decode", f"--xla_cpu_use_fusion_emitters=false "
                             f"--xla_backend_optimization_level={level}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
