"""scripts/bench/textresnet_textgrad.py (TextResNet / TextGrad vs the ``textgrad``
package against one server): its pure pieces, without textgrad installed and without a
model: the counting proxy's token accounting and phase tags (against a fake upstream),
the fault-localisation and update-reading rules, one optimisation step of each method
with stand-in models, and its argument and missing-textgrad errors."""

import http.server
import importlib.util
import json
import sys
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from jaxsci.agents import textresnet as T
from jaxsci.data.relay import Chain

PATH = Path(__file__).parents[2] / "scripts" / "bench" / "textresnet_textgrad.py"


@pytest.fixture(scope="module")
def B():
    spec = importlib.util.spec_from_file_location("_jaxsci_bench_textresnet_textgrad", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def upstream():
    """A fake OpenAI-compatible server: every POST answers with a fixed ``usage``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            out = json.dumps({"choices": [], "usage": {"prompt_tokens": 11,
                                                       "completion_tokens": 3}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self):
            out = json.dumps({"data": [{"id": "fake"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=10).read())


def test_token_accounting_reads_usage_and_request_texts(B):
    assert B.usage_of({"usage": {"prompt_tokens": 7, "completion_tokens": 2}}) == (7, 2)
    assert B.usage_of({"prompt": "x"}) == (0, 0) and B.usage_of(None) == (0, 0)
    assert B.request_texts({"messages": [{"role": "system", "content": "a b"},
                                         {"role": "user", "content": [{"type": "text",
                                                                       "text": "c"}]}]}) \
        == ["a b", "c"]
    assert B.request_texts({"prompt": ["p1", "p2"]}) == ["p1", "p2"]
    t = B.Tally(T.count_tokens)
    t.tag = ("m", "backward")
    t.add({"messages": [{"role": "user", "content": "Is it? Yes."}]},
          {"usage": {"prompt_tokens": 9, "completion_tokens": 1}})
    t.add({"prompt": ["a", "b"]}, {"usage": {"prompt_tokens": 4, "completion_tokens": 0}})
    assert t.get("m", "backward") == {"requests": 2, "prompt_tokens": 13,
                                      "completion_tokens": 1, "words": 5 + 2}
    assert t.get("m", "update")["requests"] == 0


def test_proxy_tags_every_request_with_the_current_method_and_phase(B, upstream):
    tally = B.Tally(T.count_tokens)
    proxy, root = B.start_proxy(upstream, tally)
    try:
        assert B.wait_for(root + "/v1", timeout=10) == "fake"
        B.set_phase(root, "textgrad", "backward")
        _post(root + "/v1/chat/completions", {"messages": [{"role": "user",
                                                            "content": "one two"}]})
        _post(root + "/v1/chat/completions", {"messages": [{"role": "user",
                                                            "content": "three"}]})
        B.set_phase(root, "textresnet", "update")
        _post(root + "/v1/completions", {"prompt": ["x y", "x z"]})
    finally:
        proxy.shutdown()
    assert tally.get("textgrad", "backward") == {"requests": 2, "prompt_tokens": 22,
                                                 "completion_tokens": 6, "words": 3}
    assert tally.get("textresnet", "update") == {"requests": 1, "prompt_tokens": 11,
                                                 "completion_tokens": 3, "words": 4}


def test_localisation_and_update_reading_are_one_rule_for_every_method(B):
    before = ["Add one fruit.", "Add one metal.", "Add one tree."]
    assert B.localisation(before, ["Add one fruit.", "Add one gem.", "Add one tree."],
                          [1]) == (1.0, 0)
    assert B.localisation(before, ["Add one colour.", "Add one metal.", "Add one tree."],
                          [1]) == (0.0, 1)
    assert B.localisation(before, before, [0, 2]) == (0.0, 0)
    with pytest.raises(ValueError, match="one length"):
        B.localisation(before, before[:2], [0])
    with pytest.raises(ValueError, match="at least one"):
        B.localisation(before, before, [])
    assert B.read_update("<IMPROVED_VARIABLE>Add one gem.</IMPROVED_VARIABLE>",
                         "Add one metal.", T.parse_instruction) == "Add one gem."
    assert B.read_update("use a planet instead", "Add one metal.", T.parse_instruction) \
        == "Add one planet."
    assert B.read_update("no kind here", "Add one metal.", T.parse_instruction) \
        == "Add one metal."
    assert B.read_update(None, "Add one metal.", T.parse_instruction) == "Add one metal."
    assert B.ratio(1.0, 4.0) == "0.25x" and B.ratio(1.0, 0.0) == "-"


class FakeChat:
    """Stand-in chat model: option scores prefer the last option (the last step letter,
    "no"); every generation reads "Add one tree."."""

    def score(self, messages, options):
        return np.array([-1.0] * (len(options) - 1) + [0.0])

    def chat(self, messages, max_tokens=256, temperature=0.0, **kw):
        return [SimpleNamespace(content="Add one tree.")]


class FakeTextgrad:
    """Stand-in for the textgrad worker: a tagless (unparsed) reply for node 0, a
    rewrite of the last node."""

    def step(self, job):
        assert job["outputs"][-1].startswith("Items so far:") and job["feedback"]
        values = list(job["instructions"][:-1]) + ["Add one tree."]
        errors = ["could not be indexed"] + [None] * (len(values) - 1)
        return {"values": values, "errors": errors, "gradients": [""] * len(values),
                "update_replies": [], "backward_s": 0.1, "seconds": 0.2}


def test_one_step_of_each_method_with_stand_in_models(B, upstream):
    chain = Chain(("gem", "tree"), ("Add one gem.", "Add one metal."), (1,))
    a = B.parse_args(["--steps", "2"])
    tally = B.Tally(T.count_tokens)
    proxy, root = B.start_proxy(upstream, tally)
    try:
        out = {m: B.run_chain(m, chain, 0, a, FakeChat(), root, FakeTextgrad(), tally)
               for m in B.METHODS}
    finally:
        proxy.shutdown()
    # TextResNet: the projector picks the last letter (the faulty node), fixed in 1 step
    tr = out["textresnet"]
    assert len(tr["steps"]) == 1 and tr["steps"][0]["updated"] == [1]
    assert (tr["steps"][0]["localisation"], tr["steps"][0]["collateral"]) == (1.0, 0)
    assert tr["success"] == 1.0 and tr["final"] == ["Add one gem.", "Add one tree."]
    # our TextGrad: "no" everywhere, a tie, node 0 rewritten (collateral), no success
    tj = out["textgrad_jaxsci"]
    assert (tj["steps"][0]["localisation"], tj["steps"][0]["collateral"]) == (0.0, 1)
    assert tj["success"] == 0.0 and len(tj["steps"]) == 2
    # textgrad: node 0's reply unparsed (kept), node 1 rewritten
    tg = out["textgrad"]["steps"][0]
    assert tg["unparsed"] == 1 and tg["after"] == ["Add one gem.", "Add one tree."]
    assert tg["localisation"] == 1.0 and out["textgrad"]["success"] == 1.0
    s = B.summarise([out["textgrad"]])
    assert s["unparsed"] == 1 and s["localisation"] == 1.0 and s["seconds"] == 0.2
    assert "textgrad 0.1.8 package" in B.table({"textgrad": s, "textresnet": B.summarise(
        [tr])})


def test_argument_errors_and_missing_textgrad_name_the_fix(B, capsys, tmp_path):
    for argv, what in ((["--depth", "1"], "--depth"), (["--methods", "dspy"], "--methods"),
                       (["--base-url", "localhost:8000"], "--base-url"),
                       (["--max-tokens", "0"], "--max-tokens")):
        with pytest.raises(SystemExit) as e:
            B.parse_args(argv)
        assert e.value.code == 2 and what in capsys.readouterr().err
    a = B.parse_args([])
    assert a.methods == B.METHODS and a.chains == 2 and a.depth == 2 and a.tg_constraint
    with pytest.raises(SystemExit, match=r"textgrad==0\.1\.8"):
        B.textgrad_python(str(tmp_path / "nope" / "python"))
    try:
        import textgrad  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit, match=r"not importable.*textgrad==0\.1\.8"):
            B.textgrad_python(sys.executable)
