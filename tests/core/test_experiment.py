"""The experiment protocol and driver on a toy experiment (no compilation to speak of)."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from jaxsci.core import (
    Claim,
    Experiment,
    FinishedRunError,
    Metric,
    apply_overrides,
    key_from_seed,
    run_experiment,
)
from jaxsci.core.experiment import evaluate_claims, verdict


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.1
    mode: str = "a"

    def __post_init__(self):
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    cells: int = 3
    scales: tuple[float, ...] = (1.0, 2.0)
    flag: bool = False
    inner: Inner = Inner()
    limit: int | None = None


CALLS = []


def toy_run(config, ctx):
    vals = []
    for i in range(config.cells):
        def compute(i=i):
            CALLS.append(i)
            x = jax.random.normal(jax.random.fold_in(ctx.key, i), (4,))
            return {"x": np.asarray(x)}
        vals.append(ctx.cell(f"cell/{i}", compute)["x"])
    v = np.stack(vals)
    return {"mean": float(v.mean()), "spread": float(v.std()), "values": v,
            "cells": config.cells}


def make(**kw):
    base = dict(
        name="toy", title="a toy", paper="Nobody, A toy (2026)",
        configs={"smoke": ToyConfig(cells=2), "quick": ToyConfig(), "full": ToyConfig(cells=5)},
        metrics=(Metric("mean", "mean of the draws"), Metric("spread", "std", better="lower"),
                 Metric("cells", "how many cells")),
        claims=(Claim("small", "draws are standard normal", "abs(mean) < 5", scale="smoke"),
                Claim("never", "an effect only at full scale", "spread > 100", scale="full")),
        run=toy_run,
    )
    base.update(kw)
    return Experiment(**base)


def test_overrides_nested_typed_and_validated():
    c = apply_overrides(ToyConfig(), ["cells=7", "scales=0.5,1.5", "flag=true",
                                      "inner.rate=0.3", "limit=none"])
    assert (c.cells, c.scales, c.flag, c.inner.rate, c.limit) == (7, (0.5, 1.5), True, 0.3, None)
    assert apply_overrides(ToyConfig(), ["limit=4"]).limit == 4
    with pytest.raises(ValueError, match="unknown field of ToyConfig; fields: cells"):
        apply_overrides(ToyConfig(), ["nosuch=1"])
    with pytest.raises(ValueError, match="--set cells: expected an integer, got 'x'"):
        apply_overrides(ToyConfig(), ["cells=x"])
    with pytest.raises(ValueError, match="rate must be > 0"):
        apply_overrides(ToyConfig(), ["inner.rate=-1"])
    with pytest.raises(ValueError, match="nested config"):
        apply_overrides(ToyConfig(), ["inner=3"])
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        apply_overrides(ToyConfig(), ["cells"])


@dataclasses.dataclass(frozen=True)
class Linked:
    """A cross-field check: ``mode="b"`` needs ``size > 2``."""

    mode: str = "a"
    size: int = 1

    def __post_init__(self):
        if self.mode == "b" and self.size <= 2:
            raise ValueError(f"mode='b' needs size > 2, got {self.size}")


def test_override_order_does_not_matter_for_cross_field_checks():
    want = Linked(mode="b", size=3)
    assert apply_overrides(Linked(), ["size=3", "mode=b"]) == want
    assert apply_overrides(Linked(), ["mode=b", "size=3"]) == want
    with pytest.raises(ValueError, match="mode='b' needs size > 2"):
        apply_overrides(Linked(), ["mode=b", "size=2"])


def test_experiment_declaration_is_checked():
    with pytest.raises(ValueError, match="undeclared metrics"):
        make(claims=(Claim("c", "s", "nosuch > 0"),))
    with pytest.raises(ValueError, match="not a Python expression"):
        Claim("c", "s", "mean >")
    with pytest.raises(ValueError, match="lacks"):
        make(configs={"quick": ToyConfig()})
    with pytest.raises(ValueError, match="declared twice"):
        make(metrics=(Metric("mean", "a"), Metric("mean", "b")))


def test_claims_evaluate_on_metrics_and_report_errors():
    claims = (Claim("a", "s", "x < y"), Claim("b", "s", "np.all(v > 0)"),
              Claim("c", "s", "x / zero > 1", scale="full"))
    block = evaluate_claims(claims, {"x": 1.0, "y": 2.0, "v": [1, -1], "zero": 0}, "quick")
    assert [c["holds"] for c in block] == [True, False, False]
    assert block[2]["error"].startswith("ZeroDivisionError")
    assert block[0]["measured"] == {"x": "1", "y": "2"}
    assert [c["expected_at_this_size"] for c in block] == [True, True, False]
    assert verdict(block) == "partly"
    assert verdict(block[:1]) == "reproduced"


def test_driver_writes_claims_provenance_and_report(tmp_path):
    exp = make()
    rep = run_experiment(exp, "smoke", tmp_path / "r", seed=3, progress=False)
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["seed"] == 3 and m["size"] == "smoke" and m["config"]["cells"] == 2
    assert [c["name"] for c in m["claims"]] == ["small", "never"]
    assert m["claims"][0]["holds"] and not m["claims"][1]["holds"]
    assert m["verdict"] == "reproduced"  # the full-scale claim is not expected at smoke
    assert m["provenance"]["jax"] == jax.__version__ and m["wall_time_s"] > 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert text.index("| claim |") < 600 and "not reproduced (expected at `full`)" in text
    assert rep.metrics["cells"] == 2


def test_driver_refuses_a_finished_run_unless_forced(tmp_path):
    exp = make()
    run_experiment(exp, "smoke", tmp_path, progress=False)
    with pytest.raises(FinishedRunError, match="already holds a finished run"):
        run_experiment(exp, "smoke", tmp_path, progress=False)
    run_experiment(exp, "smoke", tmp_path, progress=False, force=True)


def test_interrupted_run_resumes_finished_cells_bit_for_bit(tmp_path):
    exp = make()
    ref = run_experiment(exp, "quick", tmp_path / "ref", progress=False).metrics

    CALLS.clear()
    broken = dataclasses.replace(exp, run=lambda c, ctx: _interrupt_after(2, c, ctx))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(broken, "quick", tmp_path / "run", progress=False)
    assert len(list((tmp_path / "run" / ".cells").glob("*.npz"))) == 2
    CALLS.clear()
    again = run_experiment(exp, "quick", tmp_path / "run", progress=False).metrics
    assert CALLS == [2]  # only the missing cell is computed
    assert len(again["resumed_cells"]) == 2
    assert again["wall_time_s"] > 0  # the interrupted attempt's time is included
    np.testing.assert_array_equal(np.asarray(ref["values"]), np.asarray(again["values"]))
    assert not (tmp_path / "run" / ".cells").exists()


def _interrupt_after(n, config, ctx):
    real = ctx.cell

    def cell(tag, compute):
        if ctx.saved >= n:
            raise KeyboardInterrupt
        return real(tag, compute)

    ctx.cell = cell
    return toy_run(config, ctx)


def test_a_changed_config_does_not_reuse_cells(tmp_path):
    exp = make()
    broken = dataclasses.replace(exp, run=lambda c, ctx: _interrupt_after(1, c, ctx))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(broken, "quick", tmp_path, progress=False)
    CALLS.clear()
    run_experiment(exp, "quick", tmp_path, progress=False, overrides=["scales=3.0"])
    assert CALLS == [0, 1, 2]


def test_missing_or_nonfinite_declared_metric_is_an_error(tmp_path):
    exp = make(run=lambda c, ctx: {"mean": 0.0, "spread": 1.0})
    with pytest.raises(RuntimeError, match="did not return the declared metric 'cells'"):
        run_experiment(exp, "smoke", tmp_path / "a", progress=False)
    exp = make(run=lambda c, ctx: {"mean": float("nan"), "spread": 1.0, "cells": 1})
    with pytest.raises(RuntimeError, match="metric 'mean' is not finite"):
        run_experiment(exp, "smoke", tmp_path / "b", progress=False)


def test_seeds_do_not_wrap_modulo_2_32():
    data = lambda s: np.asarray(jax.random.key_data(key_from_seed(s)))
    np.testing.assert_array_equal(data(5), np.asarray(jax.random.key_data(jax.random.key(5))))
    assert not np.array_equal(data(0), data(2**32))
    assert not np.array_equal(data(2**32), data(2**33))
    with pytest.raises(ValueError, match="seed must be in"):
        key_from_seed(2**63)
    with pytest.raises(TypeError, match="seed must be an int"):
        key_from_seed(1.5)


def test_memory_estimate_fails_up_front(tmp_path):
    exp = make(memory_gb=lambda c: 1e9)
    with pytest.raises(MemoryError, match="needs about .* GB"):
        run_experiment(exp, "full", tmp_path, progress=False)
    assert not (tmp_path / "metrics.json").exists()
