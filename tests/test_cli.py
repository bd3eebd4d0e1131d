import json
import subprocess
import sys

import pytest

from jaxsci import cli
from jaxsci.experiments import REGISTRY


def test_list_shows_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(REGISTRY) == 38
    assert any(line.startswith("hopfield") and "implemented" in line for line in out)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["reproduce", "nosuch"], "unknown experiment 'nosuch'"),
        (["reproduce", "hopfield", "--seed", "-3"], "--seed must be a non-negative integer"),
        (["reproduce", "hopfield", "--seed", "abc"], "--seed must be a non-negative integer"),
        (["reproduce"], "needs an experiment NAME or --all"),
        (["reproduce", "hopfield", "--quick", "--full"], "not allowed with argument"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_out_that_is_a_file_is_rejected(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert cli.main(["reproduce", "hopfield", "--smoke", "--out", str(f)]) == 2
    assert "--out must be a folder" in capsys.readouterr().err


def test_console_script_reproduce_smoke(tmp_path):
    # The installed entry point, end to end, as a user types it.
    res = subprocess.run(
        [sys.executable, "-m", "jaxsci.cli", "reproduce", "hopfield", "--smoke",
         "--out", str(tmp_path / "h"), "--seed", "1", "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "h" / "metrics.json").read_text())
    assert m["seed"] == 1 and "boundary_agreement_lse_exact" in m
    bad = subprocess.run([sys.executable, "-m", "jaxsci.cli", "reproduce", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
