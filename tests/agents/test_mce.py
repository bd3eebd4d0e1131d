"""MCE (jaxsci.agents.mce) and its task (jaxsci.data.diagnosis): crossover of two skills,
the get_context gates with at most 3 attempts, carry-over of the best context and the
overfitting check in the bi-level loop (on a constructed evaluator), skill execution on
rollouts, the baselines, clear errors, and the paper's LLM path (file-tool agents writing
skill.md, context files and get_context.py, gated in the sandbox) on the tiny random
LLaMA over loopback."""

import dataclasses

import numpy as np
import pytest

from jaxsci.agents import mce as M
from jaxsci.data.diagnosis import Case, make_task

TASK = make_task(0, n_conditions=4, n_train=24, n_val=8, n_test=8)
NAMES = TASK.names
LABELS = np.array([c.label for c in TASK.train])


# --------------------------------------------------------------------------- the task


def test_task_is_deterministic_with_confusable_pairs():
    again = make_task(0, n_conditions=4, n_train=24, n_val=8, n_test=8)
    assert again == TASK and make_task(1, n_conditions=4) != TASK
    for i, c in enumerate(TASK.conditions):
        p = TASK.conditions[c.partner]
        assert p.partner == i and p.shared == c.shared and p.key != c.key
    assert len({n[0] for n in NAMES}) == len(NAMES)
    for case in TASK.train:  # every case mentions its condition's findings only (+ noise)
        sig = set(TASK.conditions[case.label].signature)
        assert len(sig & set(case.findings)) >= 2
    with pytest.raises(ValueError, match="n_conditions must be even"):
        make_task(0, n_conditions=3)
    with pytest.raises(ValueError, match="n_test must be an int"):
        make_task(0, n_test=0)


# --------------------------------------------------------------------------- skills


def test_crossover_of_two_skills_takes_each_gene_from_a_parent():
    a = M.Skill(("instruction", "table"), table_findings=1, max_rules=0, k=1, token_cap=40)
    b = M.Skill(("examples", "rules"), table_findings=3, max_rules=5, k=4, token_cap=120)
    children = [M.crossover(a, b, s) for s in range(40)]
    assert M.crossover(a, b, 7) == M.crossover(a, b, 7)  # seeded
    for ch in children:
        for f in ("table_findings", "max_rules", "k", "token_cap"):
            assert getattr(ch, f) in (getattr(a, f), getattr(b, f))
        assert set(ch.components) <= set(a.components) | set(b.components)
        assert ch.components[:2] in (a.components, b.components)
    # both parents contribute across seeds, and components get recombined
    assert {c.k for c in children} == {1, 4}
    assert any(len(c.components) == 3 for c in children)
    m = M.mutate(a, 0)
    assert m != a and isinstance(m, M.Skill)


def test_malformed_skills_raise_clear_errors():
    with pytest.raises(M.SkillError, match="components must be distinct names"):
        M.Skill(("table", "table"))
    with pytest.raises(M.SkillError, match="components must be distinct names"):
        M.Skill(("glossary",))
    with pytest.raises(M.SkillError, match="k must be an int in"):
        M.Skill(k=99)
    with pytest.raises(M.SkillError, match="unknown keys"):
        M.skill_from_dict({"components": ["table"], "colour": "red"})
    with pytest.raises(M.SkillError, match="JSON object"):
        M.skill_from_dict("{not json")
    s = M.skill_from_dict('{"components": ["examples"], "k": 3}')
    assert s == M.Skill(("examples",), k=3)


def test_execute_skill_builds_files_table_rules_and_knn_within_the_cap():
    preds = LABELS.copy()
    preds[:6] = (LABELS[:6] + 1) % 4  # six rollout errors
    s = M.Skill(("instruction", "table", "rules", "examples"), table_findings=1,
                max_rules=2, k=1, token_cap=200)
    art = M.execute_skill(s, NAMES, TASK.train, preds)
    assert set(art.files) >= {"skill.json", "table.md", "rules.md", "examples.jsonl"}
    assert M.skill_from_dict(art.files["skill.json"]) == s
    assert len(art.files["rules.md"].splitlines()) == 2
    # the table names each condition's key finding (the most discriminative)
    for c in TASK.conditions:
        assert f"{c.key} -> {c.name}" in art.files["table.md"]
    x = TASK.val[0].text
    ctx = art.get_context(x)
    assert ctx.splitlines()[0] == M.INSTRUCTION and "->" in ctx.splitlines()[-1]
    # leave-one-out retrieval: a training input never retrieves itself
    tr = TASK.train[0].text
    assert tr not in M.execute_skill(M.Skill(("examples",), k=3), NAMES, TASK.train,
                                     LABELS).get_context(tr)
    capped = M.execute_skill(dataclasses.replace(s, token_cap=20), NAMES, TASK.train, preds)
    assert M.count_tokens(capped.get_context(x)) <= 20


def test_baselines_playbook_grows_with_errors():
    ok = M.additive_playbook(NAMES, TASK.train, LABELS)
    bad = M.additive_playbook(NAMES, TASK.train, (LABELS + 1) % 4)
    assert ok.get_context("x") == M.INSTRUCTION
    assert len(bad.get_context("x").splitlines()) == 1 + len(TASK.train)
    assert M.no_context().get_context("x") == ""
    assert len(M.knn_fewshot(NAMES, TASK.train, 3).get_context(TASK.val[0].text)
               .splitlines()) == 3
    with pytest.raises(ValueError, match="train must be a non-empty sequence"):
        M.knn_fewshot(NAMES, [], 2)
    with pytest.raises(ValueError, match="k must be an int"):
        M.knn_fewshot(NAMES, TASK.train, 0)


# --------------------------------------------------------------------------- gates


def test_get_context_validation_allows_at_most_three_attempts():
    probes = [c.text for c in TASK.val[:3]]
    calls = []

    def failing(attempt, feedback):
        calls.append(feedback)
        return M.ContextArtifact({}, lambda x: 42, "test")  # not a str

    art, log = M.build_context(failing, probes, 50)
    assert art is None and len(calls) == 3 and len(log) == 3
    assert calls[0] == "" and "returned int" in calls[1]  # the failure is fed back

    def third_time(attempt, feedback):
        if attempt == 0:
            raise RuntimeError("agent crashed")
        if attempt == 1:
            return M.ContextArtifact({}, lambda x: "word " * 100, "test")  # over the cap
        return M.ContextArtifact({}, lambda x: "ok", "test")

    art, log = M.build_context(third_time, probes, 50)
    assert art is not None and log[-1] == "ok" and len(log) == 3
    assert "agent crashed" in log[0] and "> cap 50" in log[1]
    flip = iter(range(100))
    assert M.validate_get_context(lambda x: str(next(flip)), probes, 50) == [
        "get_context is not deterministic (two calls differ)"]
    with pytest.raises(ValueError, match="attempts must be an int in"):
        M.build_context(third_time, probes, 50, attempts=4)


# --------------------------------------------------------------------------- the loop


def _evaluator(acc_by_name, train_acc_by_name=None):
    """A constructed task model: the share of correct answers depends only on the
    context's name (first cases right, the rest wrong)."""
    def evaluate(art, cases):
        n_val = len(TASK.val)
        y = np.array([c.label for c in cases])
        out = (y + 1) % 4
        k = int(round(acc_by_name[art.name] * n_val))
        out[:k] = y[:k]
        tr = (train_acc_by_name or acc_by_name)[art.name]
        kt = int(round(tr * (len(cases) - n_val)))
        out[n_val:n_val + kt] = y[n_val:n_val + kt]
        return out
    return evaluate


def test_loop_carries_over_the_best_context_and_flags_overfitting():
    good = M.Skill(("examples",), k=2)
    worse = M.Skill(("instruction", "table"))
    overfit = M.Skill(("examples", "rules"), k=3)
    names = {good.describe(): 0.75, worse.describe(): 0.25, overfit.describe(): 0.5}
    trains = {**names, overfit.describe(): 1.0}
    proposals = iter([worse, overfit])
    res = M.run_mce(_evaluator(names, trains), NAMES, TASK.train, TASK.val,
                    [worse, good], 2, train_eval=8,
                    propose=lambda h, s: next(proposals))
    h = res.history
    assert [x.val_acc for x in h] == [0.25, 0.75, 0.25, 0.5]
    assert [x.overfit for x in h] == [False, False, False, True]
    # the later iterations were worse or overfitted: iteration 1's context carried over
    assert res.best_index == 1 and res.best.name == good.describe()
    # an overfitted context is never selected, even with the best validation score
    names2 = {**names, overfit.describe(): 0.875}
    trains2 = {**names2, overfit.describe(): 1.0}
    res2 = M.run_mce(_evaluator(names2, trains2), NAMES, TASK.train, TASK.val,
                     [good, overfit], 0, overfit_gap=0.1)
    assert res2.history[1].overfit and res2.best_index == 0


def test_loop_crossover_default_and_gate_failures_keep_the_best():
    a, b = M.Skill(("examples",), k=2), M.Skill(("instruction", "table"))
    accs = {}

    def evaluate(art, cases):
        accs.setdefault(art.name, 0.5 if "NN" in art.name else 0.25)
        return _evaluator(accs)(art, cases)

    def execute(skill, names, train, roll, attempt, feedback):
        if skill.token_cap == 8:
            return M.ContextArtifact({}, lambda x: None, "test")  # always fails the gates
        return M.execute_skill(skill, names, train, roll)

    res = M.run_mce(evaluate, NAMES, TASK.train, TASK.val, [a, b, M.Skill(token_cap=8)],
                    2, execute=execute)
    assert not res.history[2].passed and len(res.history[2].attempts) == 3
    assert res.history[3].name not in {x.name for x in res.history[:3]}  # a new child
    assert res.best_index == 0
    with pytest.raises(ValueError, match="val must be a non-empty sequence"):
        M.run_mce(evaluate, NAMES, TASK.train, [], [a, b], 1)
    with pytest.raises(ValueError, match="crossover needs at least 2 seed"):
        M.run_mce(evaluate, NAMES, TASK.train, TASK.val, [a], 1)
    with pytest.raises(M.GateError, match="no iteration produced"):
        M.run_mce(evaluate, NAMES, TASK.train, TASK.val, [M.Skill(token_cap=8)], 0,
                  execute=execute)


def test_scoring_accuracy_and_tokens():
    s = np.array([[0.0, -1.0], [-2.0, -0.5], [-1.0, -1.0]])
    assert M.accuracy(s, np.array([0, 1, 1])) == pytest.approx(2 / 3)
    assert M.count_tokens("a, b -> C.") == 7  # a , b - > C .
    with pytest.raises(ValueError, match="labels must be ints"):
        M.accuracy(s, np.array([0, 1, 5]))
    with pytest.raises(ValueError, match="names must start with distinct letters"):
        M.score_options(None, ["", ""], ["a", "b"], ["Abc", "Axe"])


# --------------------------------------------------------------------------- the LLM path


def test_sandbox_gate_runs_written_get_context_and_refuses_bad_code():
    good = {"get_context.py": "def get_context(x):\n    return 'Hint: ' + x[:5]\n"}
    assert M.sandboxed_contexts(good, ["abcdefg", "xy"]) == ["Hint: abcde", "Hint: xy"]
    with pytest.raises(M.GateError, match="gate 'file'"):
        M.sandboxed_contexts({"notes.md": "x"}, ["a"])
    with pytest.raises(M.GateError, match="gate 'sandbox'"):
        M.sandboxed_contexts({"get_context.py": "def get_context(x):\n    return 1/0\n"},
                             ["a"])
    ws = M.Workspace()
    try:
        with pytest.raises(ValueError, match="plain name"):
            ws.write_file("../escape.py", "x")
        ws.write_file("a.txt", "hello")
        assert ws.list_files() == ["a.txt"] and "hello" in ws.run_python(
            "print(open('a.txt').read())")
    finally:
        ws.close()


class Scripted:
    """A constructed chat model that replies with fixed JSON actions (tests the agent's
    protocol; the real-model run is the loopback test below)."""

    model_id = "scripted"

    def __init__(self, replies):
        self.replies = list(replies)

    def chat(self, messages, **kw):
        from jaxsci.common.lm.chat import ChatResult, Usage

        return [ChatResult(self.replies.pop(0) if self.replies else "{}", "stop",
                           Usage(1, 1))]

    def score(self, messages, options):
        return np.zeros(len(options))


def test_file_agent_protocol_writes_get_context_that_passes_the_gates():
    code = "def get_context(x):\\n    return open('tips.md').read()\\n"
    chat = Scripted(['{"tool": "write_file", "name": "tips.md", "text": "Brevosis: rash."}',
                     '{"tool": "write_file", "name": "get_context.py", "text": "' + code + '"}',
                     'I am done', '{"tool": "finish"}'])
    art = M.llm_base_step(chat, "use tips", NAMES, TASK.train[:4], LABELS[:4], 0, "")
    assert art.source == "llm" and art.many(["a", "b"]) == ["Brevosis: rash."] * 2
    assert M.validate_get_context(art.get_context, ["q"], 50) == []


def test_llm_path_on_the_tiny_model_over_loopback(tiny_local_chat):
    pytest.importorskip("openai", reason="pip install openai")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.common.lm.serve import Server

    tiny = tiny_local_chat(2048)
    with Server(tiny, port=0, log_level="warning") as server:
        chat = OpenAIChat(server.url, "tiny")
        history = [M.Iteration(M.Skill(), "instruction + table", 0.5, 0.5, False, 20.0,
                               ["ok"], True)]
        skill_text = M.llm_meta_step(chat, history, max_steps=1, max_tokens=16)
        assert isinstance(skill_text, str)

        def execute(skill, names, train, roll, attempt, feedback):
            return M.llm_base_step(chat, skill, names, train[:4], roll[:4], attempt,
                                   feedback, max_steps=1, max_tokens=16)

        res_log = M.build_context(lambda a, fb: execute(skill_text, NAMES, TASK.train,
                                                        LABELS, a, fb),
                                  [TASK.val[0].text], 512)
    # a random model writes no get_context.py: the gates run and report it, 3 attempts
    art, log = res_log
    assert art is None and len(log) == 3
    assert all("gate 'file'" in x or "gate 'sandbox'" in x for x in log)


def test_cases_must_be_cases():
    with pytest.raises(TypeError, match=r"train\[0\] must be a Case"):
        M.execute_skill(M.Skill(), NAMES, ["text"], np.zeros(1, int))
    with pytest.raises(ValueError, match="preds must be ints of shape"):
        M.execute_skill(M.Skill(), NAMES, TASK.train, np.zeros(3, int))
    assert isinstance(TASK.test[0], Case)


def test_loop_runs_the_llm_levels_when_the_meta_level_writes_text():
    code = "def get_context(x):\\n    return 'tip'\\n"
    write = '{"tool": "write_file", "name": "get_context.py", "text": "' + code + '"}'
    chat = Scripted([write, '{"tool": "finish"}'])

    def execute(skill, names, train, roll, attempt, feedback):
        if isinstance(skill, M.Skill):
            return M.execute_skill(skill, names, train, roll)
        assert skill == "write a tip"  # the meta level's text reaches the base level
        return M.llm_base_step(chat, skill, names, train[:4], roll[:4], attempt, feedback,
                               max_steps=2)

    accs = {"llm context": 0.875}
    res = M.run_mce(lambda art, cases: _evaluator(
        {**accs, art.name: accs.get(art.name, 0.25)})(art, cases), NAMES, TASK.train,
        TASK.val, [M.Skill()], 1, propose=lambda h, s: "write a tip", execute=execute)
    assert res.history[1].passed and res.best_index == 1
    assert res.best.source == "llm" and res.best.many(["a"]) == ["tip"]


def test_config_refuses_a_seed_equal_to_the_knn_baseline():
    from jaxsci.experiments.mce import MCEConfig

    with pytest.raises(ValueError, match="seeds must not hold the fixed 2-NN"):
        MCEConfig(seeds=(M.Skill(("instruction", "table")), M.Skill(("examples",), k=2)))
    MCEConfig(seeds=(M.Skill(("instruction", "table")), M.Skill(("examples",), k=3)))
