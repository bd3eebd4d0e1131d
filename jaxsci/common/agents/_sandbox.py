r"""A sandbox for code that a language model writes: :func:`run_code`.

The code runs in a child Python process, never in the caller's:

* **CPU time**: ``RLIMIT_CPU`` (``resource.setrlimit``) at ``cpu_s`` seconds: the kernel
  stops a busy loop with ``SIGXCPU`` (then ``SIGKILL``);
* **memory**: ``RLIMIT_AS`` at ``memory_mb`` MiB of address space: an allocation beyond it
  fails (``MemoryError`` in Python);
* **wall time**: the whole process group is killed after ``timeout_s`` (a process that
  sleeps or waits uses no CPU);
* **files**: the working directory is a fresh temporary directory, deleted afterwards;
  ``RLIMIT_FSIZE`` caps each file written at ``file_mb`` MiB; ``HOME`` and ``TMPDIR``
  point into it;
* **environment**: only ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` are passed; Python runs
  in isolated mode (``-I``: no ``PYTHON*`` variables, no user site-packages);
* **network**: the child's Python always replaces ``socket.socket``,
  ``socket.create_connection``, ``socket.getaddrinfo`` and ``socket.socketpair`` by
  functions that raise ``PermissionError`` before the code runs (this stops Python code,
  not a native extension that opens sockets itself); and where the kernel allows
  unprivileged user namespaces, the child also runs in a new, empty network namespace
  (``unshare --user --net``): no interface but a down loopback, so nothing is reachable
  at the system-call level. :attr:`SandboxResult.network` says which was enforced.

This is process isolation for research runs, not a security boundary against hostile
code: the child sees the file system with the caller's permissions (read and write
outside its directory are not blocked).

>>> r = run_code("print(sum(range(10)))")
>>> r.status, r.stdout
('ok', '45\n')
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import NamedTuple

__all__ = ["SandboxResult", "run_code", "network_isolation"]

STATUSES = ("ok", "error", "timeout", "cpu_limit", "memory_limit")

_RUNNER = textwrap.dedent('''\
    import runpy, socket, sys
    def _blocked(*args, **kwargs):
        raise PermissionError("network access is disabled in the jaxsci sandbox")
    class _NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            _blocked()
    socket.socket = _NoSocket
    socket.create_connection = socket.getaddrinfo = socket.socketpair = _blocked
    sys.argv = ["main.py"]
    runpy.run_path("main.py", run_name="__main__")
''')


class SandboxResult(NamedTuple):
    """What a sandboxed run gave.

    Attributes:
      status: ``"ok"`` (exit 0), ``"error"`` (a non-zero exit, e.g. an exception),
        ``"timeout"`` (wall time), ``"cpu_limit"``, ``"memory_limit"``.
      returncode: the exit code (negative: the signal that ended it).
      stdout, stderr: the captured text (each cut at ``max_output`` characters).
      wall_s: seconds.
      network: ``"namespace"`` (a network namespace and the Python block) or
        ``"python"`` (the Python block only); see the module docstring.
    """

    status: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    network: str


@functools.cache
def network_isolation() -> str:
    """``"namespace"`` if ``unshare --user --net`` works here, else ``"python"``."""
    exe = shutil.which("unshare")
    if exe is None:
        return "python"
    try:
        ok = subprocess.run([exe, "--user", "--map-root-user", "--net", "true"],
                            capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return "namespace" if ok else "python"


def _check(name: str, value, lo: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= lo:
        raise ValueError(f"run_code: {name} must be a number >= {lo}, got {value!r}")
    return value


def run_code(code: str, *, stdin: str = "", cpu_s: float = 2.0, memory_mb: int = 512,
             timeout_s: float = 10.0, file_mb: int = 16, max_output: int = 100_000
             ) -> SandboxResult:
    """Run Python source in the sandbox (see the module docstring for what is enforced).

    Args:
      code: the program's source (run as ``__main__`` from ``main.py`` in the temporary
        directory).
      stdin: text fed to its standard input.
      cpu_s: CPU seconds (whole seconds, rounded up).
      memory_mb: address-space limit in MiB (Python itself needs about 30).
      timeout_s: wall seconds.
      file_mb: the largest file the program may write, in MiB.
      max_output: characters of stdout / stderr kept.

    Returns:
      :class:`SandboxResult`.
    """
    if not isinstance(code, str):
        raise TypeError(f"run_code: code must be a str of Python source, got "
                        f"{type(code).__name__}")
    cpu = int(-(-_check("cpu_s", cpu_s, 0.001) // 1))
    mem = int(_check("memory_mb", memory_mb, 16)) * 2**20
    fsize = int(_check("file_mb", file_mb, 0)) * 2**20
    _check("timeout_s", timeout_s, 0.001)
    network = network_isolation()

    def limits():
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    with tempfile.TemporaryDirectory(prefix="jaxsci-sandbox-") as tmp:
        with open(os.path.join(tmp, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        with open(os.path.join(tmp, "_runner.py"), "w", encoding="utf-8") as f:
            f.write(_RUNNER)
        cmd = [sys.executable, "-I", "_runner.py"]
        if network == "namespace":
            cmd = [shutil.which("unshare"), "--user", "--map-root-user", "--net", *cmd]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "TMPDIR": tmp,
               "LANG": "C.UTF-8"}
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=limits)  # noqa: PLW1509 (limits need it)
        timed_out = False
        try:
            out, err = proc.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        wall = time.monotonic() - start
    rc = proc.returncode
    if timed_out:
        status = "timeout"
    elif rc in (-signal.SIGXCPU, -signal.SIGKILL) and wall < timeout_s:
        status = "cpu_limit"
    elif rc != 0 and "MemoryError" in err:
        status = "memory_limit"
    else:
        status = "ok" if rc == 0 else "error"
    return SandboxResult(status, rc, out[:max_output], err[:max_output], wall, network)
