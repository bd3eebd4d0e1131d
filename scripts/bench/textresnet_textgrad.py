"""Benchmark: the ``textgrad`` package's own loop vs jaxsci's TextGrad baseline and
TextResNet (LLM path), all against one OpenAI-compatible server (``jaxsci serve``).

The same relay chains (:func:`jaxsci.data.relay.make_bank`: same seeds, same corrupted
nodes), the same forward (node execution is
:func:`jaxsci.agents.textresnet.programmatic_node`, a programmatic replacement of the
node's LLM call, for every method) and the same checker feedback; per method, one
optimisation step per chain (``--steps``):

* ``textgrad``: the package itself (0.1.8), in its own interpreter (``--textgrad-python``,
  default ``.venv-textgrad/bin/python``): one ``tg.Variable(requires_grad=True)`` per node
  instruction; each node is a ``StringBasedFunction`` of its instruction and the state
  it receives (the TextGrad forward: each node rewrites the whole state); the loss is a
  ``StringBasedFunction`` of the final state whose value is the checker's feedback;
  ``loss.backward(engine)`` then ``tg.TGD`` steps (one per parameter, so that a reply it
  cannot parse leaves that parameter unchanged, reported as ``unparsed``), its engine a
  ``ChatExternalClient`` on the server (generations capped at ``--max-tokens``; with
  ``--tg-constraint``, the default, TGD gets the constraint that the instruction has the
  form "Add one <kind>.", the same format our rewrite asks for).
* ``textgrad_jaxsci``: :func:`jaxsci.agents.textresnet.textgrad_backward` with the LLM
  critique writer (:func:`~jaxsci.agents.textresnet.llm_rewrite_critique`), yes/no option
  scoring of the blame, then :func:`~jaxsci.agents.textresnet.llm_rewrite_instruction` of
  the top-``k`` blamed nodes (``k`` = surplus items, at most ``--budget``).
* ``textresnet``: the LLM projector (option scoring of the step letters), causal
  routing, density scheduling (``--budget``), then the same LLM rewrite.

Counting, the same for every method: every request goes through a counting proxy in
this process (between the clients and the server), which reads the server's ``usage``
from each response and tags it with the method and phase (``backward``: the feedback
pass; ``update``: the parameter rewrite). Backward prompt tokens = the sum of the
server's ``usage.prompt_tokens`` over the backward requests (a scoring request echoes
one prompt per option, all counted); ``words`` = :func:`~jaxsci.agents.textresnet.
count_tokens` of the same requests' message texts. The updated parameter of every method
is read by one rule (:func:`read_update`: the catalogue kind the text names, as
:func:`~jaxsci.agents.textresnet.parse_instruction`; none named: the old instruction).
Fault localisation (first step) = share of the corrupted nodes whose instruction the
step changed; ``collateral`` = correct nodes it changed. Success = share of chains with
checker loss 0 after the steps. Time = wall seconds per optimisation step (backward +
update), after ``--warmup`` warm-up chains per method (the server compiles a program per
new shape bucket, ~25 s each on one core).

    python scripts/bench/textresnet_textgrad.py [--chains 2] [--depth 2] [--steps 1]
        [--base-url http://127.0.0.1:8000/v1] [--textgrad-python PATH] [--json OUT]

textgrad goes in its own venv (installing it into ``.venv`` would downgrade
python-dateutil): ``python -m venv .venv-textgrad && .venv-textgrad/bin/pip install
textgrad==0.1.8``. Results: ``docs/textresnet.md`` ("Against the textgrad package").
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TG_PYTHON = ROOT / ".venv-textgrad" / "bin" / "python"
INSTALL_HINT = ("python -m venv .venv-textgrad && .venv-textgrad/bin/pip install "
                "textgrad==0.1.8   (a separate venv: installing textgrad into .venv would "
                "downgrade python-dateutil 4.0.0 -> 2.9.0.post0)")
METHODS = ("textresnet", "textgrad_jaxsci", "textgrad")
LABELS = {"textresnet": "TextResNet (jaxsci, LLM projector)",
          "textgrad_jaxsci": "TextGrad (jaxsci baseline, LLM critiques)",
          "textgrad": "textgrad 0.1.8 package (TGD)"}
RESULT = "@@RESULT "
_KIND_FORMAT = "The instruction must have the form 'Add one <kind>.' with one kind of item."


# --------------------------------------------------------------------- pure pieces


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", type=int, default=2, help="measured chains (make_bank)")
    ap.add_argument("--depth", type=int, default=2, help="nodes per chain, 2 .. 20")
    ap.add_argument("--steps", type=int, default=1, help="optimisation steps per chain")
    ap.add_argument("--warmup", type=int, default=1,
                    help="warm-up chains per method, not measured (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=2, help="nodes updated per step (ours)")
    ap.add_argument("--max-tokens", type=int, default=32,
                    help="cap on every generation (critiques, gradients, rewrites)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated subset of {','.join(METHODS)}")
    ap.add_argument("--base-url", default=None,
                    help="an OpenAI-compatible server already running (default: start "
                         "`jaxsci serve` on a free port)")
    ap.add_argument("--textgrad-python", default=None,
                    help=f"interpreter with textgrad 0.1.8 (default {DEFAULT_TG_PYTHON} "
                         "if present, else this one)")
    ap.add_argument("--tg-constraint", action=argparse.BooleanOptionalAction, default=True,
                    help="give TGD the constraint that an instruction reads 'Add one "
                         "<kind>.' (the format our rewrite asks for)")
    ap.add_argument("--json", default=None, help="write the per-chain records here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--proxy-url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model-id", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for name, lo, hi in (("chains", 1, 1000), ("depth", 2, 20), ("steps", 1, 20),
                         ("warmup", 0, 100), ("budget", 1, 20), ("max_tokens", 4, 2048),
                         ("seed", 0, 2**31 - 1)):
        v = getattr(a, name)
        if not lo <= v <= hi:
            ap.error(f"--{name.replace('_', '-')} must be in [{lo}, {hi}], got {v}")
    methods = tuple(m.strip() for m in a.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        ap.error(f"--methods must name some of {', '.join(METHODS)}, got {a.methods!r}")
    a.methods = methods
    if a.base_url is not None and not a.base_url.startswith(("http://", "https://")):
        ap.error(f"--base-url must be an http:// or https:// URL, got {a.base_url!r}")
    return a


def usage_of(body) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of a server response's JSON (0, 0 when it
    has no ``usage``, e.g. ``/apply-template``)."""
    u = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(u, dict):
        return 0, 0
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def request_texts(body) -> list[str]:
    """The prompt texts of a request's JSON: the messages' contents (chat), the prompt(s)
    (completions), ``[]`` otherwise."""
    if not isinstance(body, dict):
        return []
    out = []
    for m in body.get("messages") or ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out += [p.get("text", "") for p in c if isinstance(p, dict)]
    p = body.get("prompt")
    if isinstance(p, str):
        out.append(p)
    elif isinstance(p, list):
        out += [x for x in p if isinstance(x, str)]
    return out


class Tally:
    """The per-(method, phase) sums the proxy records: requests, the server's prompt and
    completion tokens, and the :func:`count_tokens` words of the requests' texts."""

    def __init__(self, count=None):
        self.count = count or (lambda text: len(re.findall(r"\w+|[^\w\s]", text)))
        self.tag = ("setup", "setup")
        self.rows: dict[tuple[str, str], dict[str, int]] = {}
        self.lock = threading.Lock()

    def add(self, request_body, response_body, tag=None) -> None:
        p, c = usage_of(response_body)
        words = sum(self.count(t) for t in request_texts(request_body))
        with self.lock:
            r = self.rows.setdefault(tag or self.tag, {"requests": 0, "prompt_tokens": 0,
                                                       "completion_tokens": 0, "words": 0})
            r["requests"] += 1
            r["prompt_tokens"] += p
            r["completion_tokens"] += c
            r["words"] += words

    def get(self, method: str, phase: str) -> dict[str, int]:
        return dict(self.rows.get((method, phase), {"requests": 0, "prompt_tokens": 0,
                                                    "completion_tokens": 0, "words": 0}))


def read_update(raw: str | None, old: str, parse) -> str:
    """The instruction a method's update leaves, read by one rule for every method: the
    kind ``raw`` names (``parse``, :func:`jaxsci.agents.textresnet.parse_instruction`),
    else ``old``."""
    return (parse(raw) if raw else None) or old


def localisation(before, after, faulty) -> tuple[float, int]:
    """``(share of the faulty nodes whose instruction changed, correct nodes changed)``."""
    if len(before) != len(after):
        raise ValueError(f"before and after must have one length, got {len(before)} and "
                         f"{len(after)}")
    if not faulty:
        raise ValueError("faulty must name at least one node")
    changed = {i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y}
    return len(changed & set(faulty)) / len(faulty), len(changed - set(faulty))


def ratio(ours: float, theirs: float) -> str:
    """``ours / theirs`` as ``"0.12x"`` (``"-"`` when undefined)."""
    if theirs == 0 or theirs != theirs or ours != ours:
        return "-"
    return f"{ours / theirs:.2f}x"


def summarise(records: list[dict]) -> dict:
    """Means over one method's measured chain-steps (tokens, time) and chains
    (localisation on the first step, success after the last)."""
    steps = [s for r in records for s in r["steps"]]
    n = max(len(steps), 1)
    first = [r["steps"][0] for r in records if r["steps"]]

    def mean(xs):
        xs = list(xs)
        return sum(xs) / len(xs) if xs else float("nan")

    return {"chains": len(records), "steps": len(steps),
            "backward_prompt_tokens": sum(s["backward"]["prompt_tokens"] for s in steps) / n,
            "backward_words": sum(s["backward"]["words"] for s in steps) / n,
            "backward_requests": sum(s["backward"]["requests"] for s in steps) / n,
            "update_prompt_tokens": sum(s["update"]["prompt_tokens"] for s in steps) / n,
            "completion_tokens": sum(s["backward"]["completion_tokens"] +
                                     s["update"]["completion_tokens"] for s in steps) / n,
            "seconds": mean(s["seconds"] for s in steps),
            "localisation": mean(s["localisation"] for s in first),
            "collateral": mean(s["collateral"] for s in first),
            "unparsed": sum(s.get("unparsed", 0) for s in steps),
            "success": mean(r["success"] for r in records)}


def table(summary: dict) -> str:
    head = ("| method | backward prompt tokens / step (server usage) | backward words / step "
            "| backward requests / step | update prompt tokens / step | completion tokens / "
            "step | s / step | localisation | collateral | unparsed updates | success |")
    lines = [head, "|" + "---|" * 11]
    for m, s in summary.items():
        lines.append(f"| {LABELS.get(m, m)} | {s['backward_prompt_tokens']:.0f} | "
                     f"{s['backward_words']:.0f} | {s['backward_requests']:.1f} | "
                     f"{s['update_prompt_tokens']:.0f} | {s['completion_tokens']:.0f} | "
                     f"{s['seconds']:.1f} | {s['localisation']:.2f} | "
                     f"{s['collateral']:.2f} | {s['unparsed']} | {s['success']:.2f} |")
    tg = summary.get("textgrad")
    if tg:
        for m in ("textresnet", "textgrad_jaxsci"):
            if m in summary:
                s = summary[m]
                lines.append(f"\n{LABELS[m]} / textgrad: backward prompt tokens "
                             f"{ratio(s['backward_prompt_tokens'], tg['backward_prompt_tokens'])}"
                             f", words {ratio(s['backward_words'], tg['backward_words'])}"
                             f", s / step {ratio(s['seconds'], tg['seconds'])}")
    return "\n".join(lines)


# --------------------------------------------------------------------- the proxy


class _Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True


def start_proxy(upstream: str, tally: Tally):
    """A counting HTTP proxy to ``upstream`` (the server's root, no ``/v1``) on a free
    local port; ``POST /bench/phase {"method", "phase"}`` sets the tag of later requests.
    Returns ``(server, root_url)``."""
    upstream = upstream.rstrip("/")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _forward(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n) if n else None
            if self.path == "/bench/phase":
                body = json.loads(data or b"{}")
                tally.tag = (str(body.get("method")), str(body.get("phase")))
                self._reply(200, b"{}", "application/json")
                return
            req = urllib.request.Request(upstream + self.path, data=data, method=method)
            for k in ("Content-Type", "Authorization", "Accept"):
                if self.headers.get(k):
                    req.add_header(k, self.headers[k])
            try:
                with urllib.request.urlopen(req, timeout=1200) as r:
                    status, out, ctype = r.status, r.read(), r.headers.get("Content-Type")
            except urllib.error.HTTPError as e:
                status, out, ctype = e.code, e.read(), e.headers.get("Content-Type")
            except OSError as e:
                self._reply(502, json.dumps({"error": {"message": str(e)}}).encode(),
                            "application/json")
                return
            try:
                rb = json.loads(out)
            except ValueError:
                rb = None
            try:
                qb = json.loads(data) if data else None
            except ValueError:
                qb = None
            if method == "POST":
                tally.add(qb, rb)
            self._reply(status, out, ctype or "application/json")

        def _reply(self, status, out, ctype):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self):
            self._forward("GET")

        def do_POST(self):
            self._forward("POST")

    srv = _Proxy(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def set_phase(proxy_root: str, method: str, phase: str) -> None:
    req = urllib.request.Request(proxy_root + "/bench/phase", method="POST",
                                 data=json.dumps({"method": method, "phase": phase}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


# --------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc=None, timeout: float = 600.0) -> str:
    """Poll ``url/models`` until it answers; returns the served model's id."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"`jaxsci serve` exited with code {proc.returncode} before "
                             "answering")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=5) as r:
                return json.loads(r.read())["data"][0]["id"]
        except (OSError, ValueError, KeyError, IndexError):
            time.sleep(1.0)
    raise SystemExit(f"no OpenAI-compatible server answered at {url} within {timeout:.0f} s")


def start_server():
    port = free_port()
    cmd = [sys.executable, "-m", "jaxsci", "serve", "--port", str(port)]
    log = open(Path(tempfile.gettempdir()) / f"textresnet_textgrad_serve_{port}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}/v1", log.name


def textgrad_python(arg: str | None) -> str:
    """The interpreter that runs textgrad; exits with the install command when textgrad
    cannot be imported there."""
    if arg is not None:
        py = arg
    elif DEFAULT_TG_PYTHON.exists():
        py = str(DEFAULT_TG_PYTHON)
    else:
        py = sys.executable
    # absolute, symlinks kept (a venv's python is a link to the base interpreter)
    py = os.path.abspath(py) if os.path.exists(py) else (shutil.which(py) or py)
    if not os.path.exists(py):
        raise SystemExit(f"--textgrad-python {py!r} does not exist. Install textgrad with: "
                         f"{INSTALL_HINT}")
    with tempfile.TemporaryDirectory() as tmp:  # importing textgrad writes a log file
        r = subprocess.run([py, "-c", "import textgrad; print(textgrad.__version__)"],
                           capture_output=True, text=True, env=_worker_env(tmp), cwd=tmp)
    if r.returncode != 0:
        raise SystemExit(f"textgrad is not importable with {py}. Install it with: "
                         f"{INSTALL_HINT}\n(or pass --textgrad-python PATH; or run with "
                         f"--methods textresnet,textgrad_jaxsci)")
    return py


def _worker_env(tmp: str) -> dict:
    env = dict(os.environ)
    env.update(TEXTGRAD_LOG_DIR=str(Path(tmp) / "textgrad_logs"),
               XDG_CACHE_HOME=str(Path(tmp) / "cache"),  # textgrad's response cache
               LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="none")
    return env


# --------------------------------------------------------------------- textgrad worker


def worker(a) -> None:
    """Runs in the textgrad interpreter: one JSON request per stdin line (instructions,
    the node outputs of the forward, the checker feedback), one backward + TGD step, one
    ``@@RESULT`` line back."""
    import textgrad as tg
    from openai import OpenAI
    from textgrad.autograd.string_based_ops import StringBasedFunction
    from textgrad.engine.local_model_openai_api import ChatExternalClient

    class Engine(ChatExternalClient):
        """The package's external-client engine, its generations capped and its disk
        cache off (a rerun must ask the server again)."""

        def __init__(self, client, model_string, max_tokens):
            super().__init__(client=client, model_string=model_string)
            self.cap = max_tokens
            self.replies: list[str] = []

        def generate(self, content, system_prompt=None, **kw):
            kw["max_tokens"] = min(kw.get("max_tokens", self.cap), self.cap)
            out = super().generate(content, system_prompt=system_prompt, **kw)
            self.replies.append(out)
            return out

        def _check_cache(self, prompt):
            return None

        def _save_cache(self, prompt, response):
            pass

    client = OpenAI(base_url=a.proxy_url + "/v1", api_key="none", max_retries=0)
    engine = Engine(client, a.model_id, a.max_tokens)
    for line in sys.stdin:
        job = json.loads(line)
        instr, outs = job["instructions"], job["outputs"]
        params = [tg.Variable(x, requires_grad=True,
                              role_description=f"instruction of step {i + 1} of {len(instr)}"
                                               " in a chain that must list one item of each"
                                               " requested kind")
                  for i, x in enumerate(instr)]
        state = tg.Variable(job["start"], requires_grad=False,
                            role_description="the empty list the chain starts from")
        for i, p in enumerate(params):
            def node(instruction, items, i=i, instr=instr, outs=outs):
                if instruction.get_value() != instr[i]:
                    raise RuntimeError("the forward was computed for other instructions")
                return outs[i]

            fn = StringBasedFunction(node, function_purpose=(
                f"step {i + 1} follows its instruction (add one item of a kind) and "
                "outputs the list of items received with that item appended"))
            state = fn(inputs={"instruction": p, "items": state},
                       response_role_description=f"list of items after step {i + 1}")
        check = StringBasedFunction(lambda final_list, fb=job["feedback"]: fb, function_purpose=(
            "checker: compares the final list with the requested kinds and states every "
            "item that was not asked for and every kind that is missing"))
        loss = check(inputs={"final_list": state}, response_role_description="checker "
                     "feedback on the final list")
        t0 = time.perf_counter()
        set_phase(a.proxy_url, "textgrad", "backward")
        engine.replies.clear()
        loss.backward(engine)
        t_back = time.perf_counter() - t0
        gradients = [p.get_gradient_text() for p in params]
        n_back = len(engine.replies)
        set_phase(a.proxy_url, "textgrad", "update")
        values, errors = [], []
        for p in params:  # textgrad's TGD.step loops over its parameters the same way
            opt = tg.TGD(parameters=[p], engine=engine,
                         constraints=[_KIND_FORMAT] if a.tg_constraint else None)
            try:
                opt.step()
                errors.append(None)
            except IndexError as exc:  # TGD found no <IMPROVED_VARIABLE> tags
                errors.append(str(exc)[:400])
            values.append(p.get_value())
        set_phase(a.proxy_url, "setup", "setup")
        print(RESULT + json.dumps({"values": values, "errors": errors,
                                   "gradients": gradients,
                                   "update_replies": engine.replies[n_back:],
                                   "backward_s": t_back,
                                   "seconds": time.perf_counter() - t0}), flush=True)


class TextgradWorker:
    def __init__(self, python: str, proxy_url: str, model_id: str, a, tmp: str):
        cmd = [python, str(Path(__file__).resolve()), "--worker", "--proxy-url", proxy_url,
               "--model-id", model_id, "--max-tokens", str(a.max_tokens),
               "--tg-constraint" if a.tg_constraint else "--no-tg-constraint"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=_worker_env(tmp), cwd=tmp)

    def step(self, job: dict) -> dict:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT):])
        raise RuntimeError(f"the textgrad worker exited (code {self.proc.wait()}); see its "
                           "stderr above")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# --------------------------------------------------------------------- our methods


def run_chain(method: str, chain, seed: int, a, chat, proxy_root: str, tgw,
              tally: Tally) -> dict:
    """One method's ``a.steps`` optimisation steps on one chain (each step's requests
    read from ``tally``)."""
    from jaxsci.agents import textresnet as T
    from jaxsci.data.relay import check

    instr = list(chain.instructions)
    steps = []
    for _ in range(a.steps):
        deltas = T.forward(instr, seed=seed)
        loss, comps = check(chain.spec, deltas)
        if loss == 0:
            break
        glob = [x for x in comps if not x.startswith("'")]
        rec: dict = {"before": list(instr), "loss": loss, "feedback": comps}
        seen = {ph: tally.get(method, ph) for ph in ("backward", "update")}
        t0 = time.perf_counter()
        if method == "textgrad":
            got = tgw.step({"instructions": instr, "outputs": T.states(deltas)[1:],
                            "start": T.states(deltas)[0], "feedback": " ".join(comps)})
            new = [read_update(v if e is None else None, x, T.parse_instruction)
                   for v, e, x in zip(got["values"], got["errors"], instr, strict=True)]
            rec.update(seconds=got["seconds"], backward_s=got["backward_s"],
                       unparsed=sum(e is not None for e in got["errors"]),
                       raw=got["values"], errors=got["errors"], gradients=got["gradients"],
                       update_replies=got["update_replies"])
        else:
            set_phase(proxy_root, method, "backward")
            if method == "textresnet":
                proj = T.project([deltas], [comps], backend="llm", chat=chat)[0]
                b = T.textresnet_backward(deltas, comps, proj)
                jobs = [(n, [comps[j] for j in b.routed[n]] + glob)
                        for n in T.schedule(b.routed, a.budget, b.blame)]
            else:
                b = T.textgrad_backward(chat, [instr], [deltas], [comps], critic=(
                    lambda c, i, s: T.llm_rewrite_critique(chat, c, i,
                                                           max_tokens=a.max_tokens)))[0]
                k = min(a.budget, max(1, sum(x.startswith("'") for x in comps)))
                order = sorted(range(len(instr)), key=lambda n: (-b.blame[n], n))
                jobs = [(n, list(comps)) for n in order[:k]]
            backward_s = time.perf_counter() - t0
            set_phase(proxy_root, method, "update")
            new, raws = list(instr), []
            for n, fb in jobs:
                _, raw = T.llm_rewrite_instruction(chat, instr[n], fb,
                                                   max_tokens=min(a.max_tokens, 24))
                new[n] = read_update(raw, instr[n], T.parse_instruction)
                raws.append(raw)
            set_phase(proxy_root, "setup", "setup")
            rec.update(seconds=time.perf_counter() - t0, backward_s=backward_s,
                       blame=[float(x) for x in b.blame], updated=[n for n, _ in jobs],
                       raw=raws, unparsed=sum(T.parse_instruction(r) is None for r in raws))
        for ph, was in seen.items():
            now = tally.get(method, ph)
            rec[ph] = {k: now[k] - was[k] for k in now}
        rec["localisation"], rec["collateral"] = localisation(instr, new, chain.faulty)
        rec["after"] = list(new)
        instr = new
        steps.append(rec)
    final = check(chain.spec, T.forward(instr, seed=seed))[0]
    return {"spec": list(chain.spec), "faulty": list(chain.faulty), "seed": seed,
            "final": instr, "final_loss": final, "success": float(final == 0),
            "steps": steps}


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    py = textgrad_python(a.textgrad_python) if "textgrad" in a.methods else None
    from jaxsci.agents.textresnet import count_tokens
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.data.relay import make_bank

    tmp = tempfile.mkdtemp(prefix="textresnet_textgrad_")
    proc, t_start = None, time.perf_counter()
    try:
        if a.base_url is None:
            proc, base, log = start_server()
            print(f"[bench] started `jaxsci serve` at {base} (log {log}); waiting for it",
                  flush=True)
        else:
            base = a.base_url.rstrip("/")
        t0 = time.perf_counter()
        model_id = wait_for(base, proc)
        print(f"[bench] {model_id!r} answers at {base} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        tally = Tally(count_tokens)
        proxy, proxy_root = start_proxy(base.removesuffix("/v1"), tally)
        chat = OpenAIChat(proxy_root + "/v1", model=model_id, timeout=1200.0, max_retries=0)
        tgw = TextgradWorker(py, proxy_root, model_id, a, tmp) if py else None
        chains = make_bank(a.seed, a.depth, a.chains)
        warm = make_bank(a.seed + 1, a.depth, a.warmup) if a.warmup else []
        records: dict[str, list[dict]] = {}
        for m in a.methods:
            for j, ch in enumerate(warm):
                tw = time.perf_counter()
                run_chain(m, ch, 1000 + j, a, chat, proxy_root, tgw, tally)
                print(f"[bench] {m}: warm-up chain {j} {time.perf_counter() - tw:.0f} s",
                      flush=True)
            records[m] = []
            for i, ch in enumerate(chains):
                r = run_chain(m, ch, i, a, chat, proxy_root, tgw, tally)
                records[m].append(r)
                print(f"[bench] {m}: chain {i} ({len(ch.faulty)} fault(s)) "
                      f"{sum(s['seconds'] for s in r['steps']):.1f} s, final loss "
                      f"{r['final_loss']}", flush=True)
        if tgw:
            tgw.close()
        proxy.shutdown()
        summary = {m: summarise(records[m]) for m in a.methods}
        print(f"\nrelay chains: {a.chains} of depth {a.depth} (seed {a.seed}), {a.steps} "
              f"step(s), warm-up {a.warmup} chain(s) per method, max_tokens {a.max_tokens}, "
              f"budget {a.budget}, server {model_id!r} at {base}"
              + (f", textgrad via {py}" if py else ""))
        print(table(summary))
        bad = [(g, e) for r in records.get("textgrad", []) for st in r["steps"]
               for e, g in zip(st["errors"], st["gradients"], strict=True) if e is not None]
        if bad:
            print(f"\ntextgrad, first unparsed update: the gradient it wrote: {bad[0][0][:160]!r}"
                  f"\nTGD raised: {bad[0][1][:360]!r}")
        if a.json:
            Path(a.json).write_text(json.dumps({"args": {k: v for k, v in vars(a).items()},
                                                "summary": summary, "records": records},
                                               indent=1, default=str))
            print(f"[bench] records written to {a.json}")
        print(f"[bench] total wall time {time.perf_counter() - t_start:.0f} s (server start, "
              "warm-up and measured chains)")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
