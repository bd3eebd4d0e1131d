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
        (["reproduce", "hopfield", "--seed", "-3"], "--seed must be in [0, 2**63 - 1]"),
        (["reproduce", "hopfield", "--seed", "12345678901234567890"], "--seed must be in"),
        (["reproduce", "hopfield", "--smoke", "--set", "nosuch=1"], "unknown field of"),
        (["reproduce", "hopfield", "--smoke", "--set", "n=abc"], "expected an integer"),
        (["reproduce", "hopfield", "--smoke", "--set", "chains=0"], "chains must be >= 1"),
        (["reproduce", "hopfield", "--smoke", "--set", "n"], "FIELD=VALUE"),
        (["reproduce", "--all", "--set", "n=3"], "--set applies to one experiment"),
        (["bench", "nosuch"], "unknown experiment 'nosuch'"),
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


def test_out_below_a_file_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert cli.main(["reproduce", "hopfield", "--smoke", "--out", str(f / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be created" in err[0]


# A tiny hopfield config: the CLI's plumbing, not the physics.
TINY = ["--smoke", "--set", "n=6", "--set", "alphas=0.2,0.4", "--set", "temperatures=0.3,1.0",
        "--set", "sampler.n_equil=5", "--set", "sampler.n_sample=5"]


def test_reproduce_end_to_end_refuses_to_overwrite_then_forces(tmp_path, capsys):
    out = tmp_path / "h"
    argv = ["reproduce", "hopfield", *TINY, "--out", str(out), "--seed", "1", "--no-progress"]
    assert cli.main(argv) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["seed"] == 1 and "boundary_agreement_lse_exact" in m and m["config"]["n"] == 6
    assert (out / "report.md").exists()
    assert "claims) in" in capsys.readouterr().out
    # A finished run is never silently overwritten ...
    assert cli.main(argv) == 2
    assert "already holds a finished run" in capsys.readouterr().err
    # ... unless asked.
    assert cli.main([*argv, "--force"]) == 0


def test_ctrl_c_prints_one_line_with_what_is_saved(tmp_path, capsys, monkeypatch):
    from jaxsci.experiments import hopfield

    calls = []
    real = hopfield.simulate_cell_grid

    def interrupt_second(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hopfield, "simulate_cell_grid", interrupt_second)
    argv = ["reproduce", "hopfield", *TINY, "--out", str(tmp_path / "h"), "--no-progress"]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted; 1 finished cell(s)" in err[0], err
    assert "rerun the same command to resume" in err[0]


def test_reproduce_all_ends_with_the_claims_table():
    rows = [{"name": "a", "held": 2, "total": 3, "verdict": "partly", "wall": 1.5},
            {"name": "bb", "held": 1, "total": 1, "verdict": "reproduced", "wall": 2.0}]
    table = cli.claims_table(rows).splitlines()
    assert table[0].split() == ["experiment", "claims", "verdict", "wall", "time"]
    assert "2/3" in table[2] and "partly" in table[2]
    assert table[-1].split()[:2] == ["all", "3/4"]


def test_version_and_bench_listing(capsys):
    import jaxsci

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jaxsci {jaxsci.__version__}"
    assert cli.main(["bench"]) == 0
    listed = capsys.readouterr().out.split()
    assert "hopfield" in listed and "grans" in listed


def test_console_entry_point_exit_codes():
    # The module entry point as a user's shell sees it: exit status and no traceback.
    ok = subprocess.run([sys.executable, "-m", "jaxsci", "list"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "hopfield" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "jaxsci.cli", "reproduce", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_summary_tables_finished_runs_and_lists_missed_claims(tmp_path, capsys):
    import json

    claims = [{"name": "c1", "test": "a > 1", "measured": {"a": 2}, "holds": True,
               "expected_at_this_size": True, "scale": "quick"},
              {"name": "c2", "test": "b < 0", "measured": {"b": 3}, "holds": False,
               "expected_at_this_size": False, "scale": "full"}]
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(
        {"experiment": "x", "size": "quick", "claims": claims, "verdict": "partly",
         "wall_time_s": 3.5}))
    assert cli.main(["summary", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "x (quick)" in out and " 1/2" in out and "partly" in out
    assert "c2: b < 0 (measured {'b': 3}; expected at full)" in out
    assert cli.main(["summary", str(tmp_path / "nothing")]) == 2
