"""The agent trace schema (a round trip through JSONL, schema checks, provenance), the
blinded human-evaluation sheet and its import, and Cohen's kappa against hand-computed
values."""

import csv
import json

import numpy as np
import pytest

from jaxsci.common import agents as A


def test_trace_round_trip(tmp_path):
    t = A.Tracer(tmp_path / "trace.jsonl", run_id="run-a", config={"lr": 0.1, "n": 3},
                 seed=7)
    msgs = [{"role": "system", "content": "sys"},
            {"role": "system", "content": "fact: 4", "provenance": "memory"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}]
    root = t.span("run", messages=msgs[:3])
    for kind in A.KINDS[1:]:
        t.span(kind, parent=root, messages=msgs, data={"x": np.float32(0.5), "k": kind},
               latency_s=0.01)
    back = A.read_trace(tmp_path / "trace.jsonl")
    assert back == t.records and len(back) == len(A.KINDS)
    assert all(set(r) == set(A.FIELDS) for r in back)
    assert [r["kind"] for r in back] == list(A.KINDS)
    assert {r["config_hash"] for r in back} == {A.config_hash({"n": 3, "lr": 0.1})}
    assert [s["provenance"] for s in back[1]["segments"]] == ["system", "memory", "user",
                                                              "agent", "tool"]
    assert back[1]["data"] == {"x": 0.5, "k": "llm_call"}
    # Another run into the same file keeps its own ids.
    t.child("run-b", seed=8).span("run")
    assert [r["run_id"] for r in A.read_trace(tmp_path / "trace.jsonl")][-2:] == ["run-a",
                                                                                  "run-b"]


def test_trace_schema_errors(tmp_path):
    with pytest.raises(ValueError, match=r"kind must be one of .*got 'thought'"):
        A.Tracer().span("thought")
    with pytest.raises(ValueError, match=r"provenance must be one of .*got 'web'"):
        A.Tracer().span("llm_call", messages=[{"role": "user", "content": "x",
                                               "provenance": "web"}])
    p = tmp_path / "bad.jsonl"
    rec = A.Tracer(run_id="r")
    rec.span("run")
    bad = dict(rec.records[0])
    del bad["seed"]
    p.write_text(json.dumps(rec.records[0]) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2 does not follow the trace schema: "
                                         r"missing \['seed'\]"):
        A.read_trace(p)
    p.write_text("{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1 is not a JSON line"):
        A.read_trace(p)


def test_cohen_kappa_by_hand():
    # 10 items, raters a and b: 4 both yes, 3 both no, 2 a-yes/b-no, 1 a-no/b-yes.
    a = [1] * 4 + [0] * 3 + [1] * 2 + [0]
    b = [1] * 4 + [0] * 3 + [0] * 2 + [1]
    # p_o = 7/10; p_e = 0.6 * 0.5 + 0.4 * 0.5 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4.
    assert A.cohen_kappa(a, b) == pytest.approx(0.4)
    assert A.cohen_kappa(["x", "y", "z"], ["x", "y", "z"]) == pytest.approx(1.0)
    assert A.cohen_kappa([1, 1], [1, 1]) == 1.0
    # Three labels: p_o = 5/6, p_e = (2*2 + 2*1 + 2*3) / 36 = 1/3, kappa = 0.75.
    assert A.cohen_kappa("aabbcc", "aabccc") == pytest.approx(0.75)
    with pytest.raises(ValueError, match="same non-empty items, got 2 and 3"):
        A.cohen_kappa([1, 0], [1, 0, 1])


def test_eval_sheet_is_blind_and_imports_with_agreement(tmp_path):
    items = [{"id": f"t{i}", "task": f"task {i}", "answer": f"ans {i}",
              "mode": "workflow" if i % 2 else "agent", "judge": int(i % 3 == 0)}
             for i in range(8)]
    sheet = tmp_path / "sheet.csv"
    key = A.export_eval_sheet(items, sheet, rubric=("correct", "clear"), seed=1)
    rows = list(csv.DictReader(open(sheet)))
    assert list(rows[0]) == ["item", "task", "answer", "correct", "clear", "rater", "notes"]
    text = sheet.read_text()
    assert "workflow" not in text and "agent" not in text and "t3" not in text
    assert [r["task"] for r in rows] != [it["task"] for it in items]  # shuffled
    # Two raters fill their copies; rater b disagrees on one item.
    truth = {it["task"]: int(it["id"][1:]) % 3 == 0 for it in items}
    for rater, flip in (("a", None), ("b", rows[0]["item"])):
        with open(tmp_path / f"{rater}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            for r in rows:
                score = int(truth[r["task"]]) ^ (r["item"] == flip)
                w.writerow({**r, "correct": score, "clear": 1, "rater": rater})
    got = A.import_eval_sheet([tmp_path / "a.csv", tmp_path / "b.csv"], key)
    assert len(got) == 16 and {g["rater"] for g in got} == {"a", "b"}
    assert all(set(g) >= {"id", "mode", "judge", "correct", "clear"} for g in got)
    by = {r: {g["id"]: g["correct"] for g in got if g["rater"] == r} for r in "ab"}
    ids = sorted(by["a"])
    assert A.cohen_kappa([by["a"][i] for i in ids], [by["b"][i] for i in ids]) < 1.0
    judge = {it["id"]: it["judge"] for it in items}
    agree = A.judge_agreement(judge, by["a"])
    assert agree == {"n": 8, "accuracy": 1.0, "kappa": 1.0}


def test_eval_sheet_errors(tmp_path):
    with pytest.raises(ValueError, match="at least one item"):
        A.export_eval_sheet([], tmp_path / "s.csv")
    with pytest.raises(ValueError, match=r"items\[0\] lacks \['answer'\]"):
        A.export_eval_sheet([{"id": 1, "task": "x"}], tmp_path / "s.csv")
    key = A.export_eval_sheet([{"id": 1, "task": "x", "answer": "y"}], tmp_path / "s.csv")
    (tmp_path / "f.csv").write_text("item,task,answer,correct,rater,notes\n"
                                    "item-0000,x,y,great,r,\n")
    with pytest.raises(ValueError, match=r"f.csv:2: rubric column 'correct' must be an "
                                         r"integer score, got 'great'"):
        A.import_eval_sheet(tmp_path / "f.csv", key)
