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


def test_reproduce_smoke_end_to_end(tmp_path, capsys):
    # In-process, so the compiled programs are shared with the experiment tests.
    argv = ["reproduce", "hopfield", "--smoke", "--out", str(tmp_path / "h"), "--seed", "1",
            "--no-progress"]
    assert cli.main(argv) == 0
    m = json.loads((tmp_path / "h" / "metrics.json").read_text())
    assert m["seed"] == 1 and "boundary_agreement_lse_exact" in m
    assert (tmp_path / "h" / "report.md").exists()
    assert "done in" in capsys.readouterr().out


def test_console_entry_point_exit_codes():
    # The module entry point as a user's shell sees it: exit status and no traceback.
    ok = subprocess.run([sys.executable, "-m", "jaxsci.cli", "list"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "hopfield" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "jaxsci.cli", "reproduce", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
