"""The code sandbox: a normal script returns its stdout, a busy loop is killed at its CPU
limit, a memory hog is stopped, a sleeper at the wall timeout, and the network is off."""

import pytest

from jaxsci.common import agents as A


def test_normal_script_returns_stdout():
    r = A.run_code("import sys\nprint(sys.stdin.read().upper())\nopen('f.txt', 'w')",
                   stdin="hi")
    assert (r.status, r.returncode, r.stdout) == ("ok", 0, "HI\n")
    e = A.run_code("raise ValueError('boom')")
    assert e.status == "error" and "ValueError: boom" in e.stderr


def test_limits():
    busy = A.run_code("while True:\n    pass", cpu_s=1, timeout_s=20)
    assert busy.status == "cpu_limit" and busy.wall_s < 10
    hog = A.run_code("x = bytearray(4 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert hog.status == "memory_limit" and "allocated" not in hog.stdout
    sleeper = A.run_code("import time\ntime.sleep(30)", timeout_s=0.5)
    assert sleeper.status == "timeout" and sleeper.wall_s < 10


def test_no_network():
    r = A.run_code("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
    assert r.status == "error" and r.network in ("namespace", "python")
    assert "PermissionError" in r.stderr or "OSError" in r.stderr


def test_errors():
    with pytest.raises(TypeError, match="code must be a str of Python source, got bytes"):
        A.run_code(b"print(1)")
    with pytest.raises(ValueError, match=r"memory_mb must be a number >= 16, got 1"):
        A.run_code("print(1)", memory_mb=1)
