import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxsci.core import Report, to_jsonable  # noqa: E402


def test_report_writes_metrics_figures_and_markdown(tmp_path):
    rep = Report("demo", tmp_path / "out")
    rep.metrics = {"a": np.float32(1.5), "grid": np.arange(4).reshape(2, 2), "inf": float("inf")}
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    rep.add_figure(fig, "line.png", "a line")
    rep.add_text("some text")
    out = rep.write()
    m = json.loads((out / "metrics.json").read_text())
    assert m == {"a": 1.5, "grid": [[0, 1], [2, 3]], "inf": "inf"}
    assert (out / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert md.startswith("# demo") and "line.png" in md and "some text" in md


def test_to_jsonable_handles_nan_and_nested():
    assert to_jsonable({"x": (np.nan, np.int64(2), [np.bool_(True)])}) == {"x": ["nan", 2, [True]]}


def test_out_dir_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="out_dir must be a folder"):
        Report("demo", f)
