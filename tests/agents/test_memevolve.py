"""Tests of :mod:`jaxsci.agents.memevolve` and :mod:`jaxsci.data.memtasks`: genotype
round-trip and errors, each memory module on constructed trajectories, the tournament's
selection rule and lineage, the sandbox gates, and the LLM path on the tiny random-weight
LLaMA over loopback; the SQLite transfer family (success by execution on the database,
chance without memory, the presets running on it)."""

import json

import numpy as np
import pytest

from jaxsci.agents import memevolve as ME
from jaxsci.data.memtasks import SQL_TYPES, make_sql_stream, make_stream

TR = [ME.Trajectory("What is the passcode of the Velmora vault?", "ember", False,
                    "Wrong. The passcode of the Velmora vault is dune.", "dune"),
      ME.Trajectory("What is the passcode of the Velmoro vault?", "kettle", True, "Correct.",
                    "kettle"),
      ME.Trajectory("Which tools count the orders table?", "scan>sum", False,
                    "Failed. The working tool sequence is lookup>count.", "lookup>count")]


def test_genotype_round_trips_through_dict_and_json_and_diffs():
    for g in ME.PRESETS.values():
        assert ME.genotype_from_dict(g.to_dict()) == g
        assert ME.genotype_from_dict(json.dumps(g.to_dict())) == g
    d = ME.genotype_diff(ME.PRESETS["base"], ME.PRESETS["lightweight"])
    assert d == {"encode": ("raw", "lesson"), "store": ("list", "kv"),
                 "retrieve": ("recency", "bm25"), "k": (2, 1), "manage": ("none", "cap_freq"),
                 "cap": (16, 8)}
    assert ME.genotype_diff(ME.PRESETS["base"], ME.PRESETS["base"]) == {}


def test_malformed_genotypes_raise_clear_errors():
    with pytest.raises(ME.GenotypeError, match="gene 'encode' must be one of"):
        ME.Genotype(encode="summary")
    with pytest.raises(ME.GenotypeError, match="gene 'k' must be an int"):
        ME.Genotype(k=0)
    with pytest.raises(ME.GenotypeError, match="needs store='vector'"):
        ME.Genotype(retrieve="cosine", store="list")
    with pytest.raises(ME.GenotypeError, match="unknown \\['colour'\\]"):
        ME.genotype_from_dict({**ME.Genotype().to_dict(), "colour": 1})
    with pytest.raises(ME.GenotypeError, match="JSON text expected"):
        ME.genotype_from_dict("{not json")
    with pytest.raises(ME.GenotypeError, match="must be a dict"):
        ME.genotype_from_dict([1, 2])


def test_encode_store_retrieve_manage_on_constructed_trajectories():
    q = "Tell me the passcode that opens the Velmora vault."
    lesson = ME.GenotypeProvider(ME.Genotype("lesson", "list", "bm25", 1, "none"))
    raw = ME.GenotypeProvider(ME.Genotype("raw", "list", "recency", 1, "none"))
    for t in TR:
        lesson.take_in(t)
        raw.take_in(t)
    # lesson encode + BM25: the Velmora lesson, not its near-miss sibling or the newest
    assert lesson.provide(q) == f"Memory:\n- {TR[0].query} -> dune"
    # raw encode + recency: the newest trajectory, with its feedback
    assert "lookup>count" in raw.provide(q) and "Agent answered scan>sum" in raw.provide(q)
    assert lesson.provide("anything", phase="in_task").startswith("Memory:")
    # kv: one record per query; dedupe/consolidate drop repeats; caps evict
    kv = ME.GenotypeProvider(ME.Genotype("lesson", "kv", "bm25", 4, "none"))
    for t in (TR[0], TR[0]._replace(answer="quartz")):
        kv.take_in(t)
    assert len(kv.records) == 1 and kv.records[0]["text"].endswith("quartz")
    dd = ME.GenotypeProvider(ME.Genotype("lesson", "list", "recency", 4, "dedupe"))
    for t in (TR[0], TR[0], TR[1]):
        dd.take_in(t)
    assert len(dd.records) == 2
    cap = ME.GenotypeProvider(ME.Genotype("lesson", "list", "bm25", 1, "cap_freq", 2))
    cap.take_in(TR[0])
    cap.take_in(TR[1])
    cap.provide(TR[0].query)  # TR[0]'s record is used once, TR[1]'s never
    cap.take_in(TR[2])
    assert [r["text"].split(" -> ")[1] for r in cap.records] == ["dune", "lookup>count"]
    lru = ME.GenotypeProvider(ME.Genotype("lesson", "list", "bm25", 1, "cap_lru", 2))
    for t in TR:
        lru.take_in(t)
    assert [r["text"].split(" -> ")[1] for r in lru.records] == ["kettle", "lookup>count"]
    # vector store + cosine on the hashing embedder finds the paraphrased query
    vec = ME.GenotypeProvider(ME.PRESETS["expel"])
    for t in TR:
        vec.take_in(t)
    assert "lookup>count" in vec.provide("Count the orders table: which tools?")
    assert ME.GenotypeProvider(ME.Genotype()).provide(q) == ""


def test_bm25_prefers_the_rarer_matching_term():
    s = ME.bm25_scores("velmora passcode", ["passcode of velmora", "passcode of velmoro",
                                            "tools"])
    assert s[0] > s[1] > s[2] == 0.0


def test_tournament_selection_rule_is_pareto_rank_then_accuracy():
    acc = [0.5, 0.7, 0.7, 0.4, 0.7]
    tok = [10, 30, 20, 5, 20]
    cost = [1, 1, 1, 1, 2]
    r = ME.pareto_ranks(acc, tok, cost)
    # 2 dominates 1 (fewer tokens) and 4 (lower cost); 0, 2 and 3 are non-dominated
    assert r.tolist() == [0, 1, 0, 0, 1]
    assert ME.select_finalists(acc, tok, cost, 2).tolist() == [2, 0]
    # rank 1: equal accuracy, so fewer tokens first (4 before 1)
    assert ME.select_finalists(acc, tok, cost, 4).tolist() == [2, 0, 3, 4]
    with pytest.raises(ValueError, match="non-empty"):
        ME.pareto_ranks([], [], [])


def _scripted_score(mems, tasks):
    """A stand-in task agent (test only): the option that the memory text names."""
    return [np.array([float(o in m) for o in t.options]) for m, t in zip(mems, tasks,
                                                                          strict=True)]


def test_stream_learns_from_failed_feedback_and_refuses_empty_tasks():
    tasks = make_stream(0, n_tasks=24, n_entities=4)
    none = ME.run_stream(_scripted_score, ME.GenotypeProvider(ME.Genotype(k=1)), tasks[:1])
    assert none.tokens[0] == 0
    lg = ME.run_stream(_scripted_score, ME.GenotypeProvider(ME.PRESETS["lightweight"]), tasks,
                       block=1)
    # with answers revealed, a repeated query with a lesson is answered right
    assert lg.correct[lg.seen_before == 1].mean() > lg.correct[lg.seen_before == 0].mean()
    with pytest.raises(ValueError, match="non-empty task set"):
        ME.run_stream(_scripted_score, ME.GenotypeProvider(ME.Genotype()), [])


def test_task_stream_has_repeats_paraphrases_and_near_misses():
    s = make_stream(3, n_tasks=40, n_entities=6)
    keys = [t.key for t in s]
    counts = sorted(np.unique(keys, return_counts=True)[1])[::-1]
    assert counts[0] > counts[-1]  # Zipf
    assert len({t.text for t in s if t.key == keys[0]}) > 1  # paraphrases
    t = s[0]
    sib = [u for u in s if u.key[:-1] == t.key[:-1] and u.key != t.key]
    assert all(u.options[u.answer] != t.options[t.answer] for u in sib)
    assert all(len({o[0] for o in u.options}) == len(u.options) for u in s)
    with pytest.raises(ValueError, match="n_entities must be even"):
        make_stream(0, n_entities=3)
    assert make_stream(1, family="tools")[0].family == "tools"


def test_sql_family_success_is_executed_on_the_database():
    tasks = make_sql_stream(0, n_tasks=40, n_types=len(SQL_TYPES))
    for t in tasks:
        assert t.family == "sql" and len({o[0] for o in t.options}) == len(t.options)
        assert t.attempt(t.answer) == (True, "Correct.")
        for i in set(range(len(t.options))) - {t.answer}:
            ok, fb = t.attempt(i)
            assert not ok and t.options[t.answer] in fb and t.options[i] in fb
    # the verdict follows the executed sequence, not the option index: give the right
    # option a wrong sequence and it fails
    t = tasks[0]
    wrong = t.sequences[(t.answer + 1) % len(t.options)]
    seqs = tuple(wrong if i == t.answer else s for i, s in enumerate(t.sequences))
    assert not t._replace(sequences=seqs).execute(t.answer)[0]
    # a write task: the verifier reads the database (the loan row, the copies)
    lend = next(u for u in make_sql_stream(3, n_tasks=200, n_types=len(SQL_TYPES))
                if u.key == "lend_book")
    assert lend.sequences[lend.answer] == ("find_book", "find_member", "lend_book")
    no_write = lend._replace(sequences=tuple(
        ("find_book", "find_member") if i == lend.answer else s
        for i, s in enumerate(lend.sequences)))
    assert no_write.execute(lend.answer) == (False, "left the database in the wrong state")
    # a read task answered from the wrong field is wrong
    book = next(u for u in tasks if u.key == "book_copies")
    other = book._replace(key="book_author")  # same sequence, the author asked
    assert not other.execute(book.answer)[0]


def test_sql_family_cannot_be_guessed_without_memory():
    tasks = [t for seed in range(6) for t in make_sql_stream(seed, n_tasks=40)]
    acc_first = np.mean([t.answer == 0 for t in tasks])
    assert abs(acc_first - 0.25) < 0.08, acc_first  # the right option's place is random
    # no shown tool name is a word of the task, and a type's right sequence is shown
    # under different names in different worlds (seeds)
    for t in tasks:
        words = set(t.text.lower().replace("'", " ").replace("?", " ").split())
        assert not words & {w for o in t.options for w in o.split(">")}
    shown = {make_sql_stream(s, n_tasks=60, n_types=len(SQL_TYPES))[0].names for s in range(4)}
    assert len(shown) == 4
    none = ME.run_stream(_scripted_score, _NoMemory(), tasks)
    assert none.correct.mean() < 0.4  # no memory: the first-listed-option policy


class _NoMemory(ME.MemoryProvider):
    def provide(self, query, phase="begin"):
        return ""

    def take_in(self, trajectory):
        pass


def _lesson_score(mems, tasks):
    """A stand-in task agent (test only): the option a retrieved lesson names."""
    out = []
    for m, t in zip(mems, tasks, strict=True):
        said = [ln.rsplit(" -> ", 1)[-1] for ln in m.splitlines() if " -> " in ln]
        out.append(np.array([float(o in said) for o in t.options]))
    return out


def test_presets_run_unchanged_on_the_sql_family():
    tasks = make_sql_stream(1, n_tasks=40, n_types=4)
    for name, g in ME.PRESETS.items():
        lg = ME.run_stream(_lesson_score, ME.GenotypeProvider(g), tasks, block=4)
        assert lg.correct.shape == (40,) and np.isfinite(lg.tokens).all(), name
    lg = ME.run_stream(_lesson_score, ME.GenotypeProvider(ME.PRESETS["lightweight"]), tasks,
                       block=1)
    # lessons taken in from executed episodes' feedback: repeated task types are solved
    assert lg.correct[lg.seen_before == 1].mean() > 0.5 > lg.correct[lg.seen_before == 0].mean()


def test_evolve_records_lineage_and_selects_the_winner():
    stream = make_stream(0, n_tasks=30, n_entities=4)
    rounds = [(stream[:10], stream[10:13]), (stream[13:23], stream[23:26])]
    res = ME.evolve(lambda p, ts: ME.run_stream(_scripted_score, p, ts),
                    lambda c: ME.GenotypeProvider(c.genotype), ME.PRESETS, rounds)
    lin = res.lineage
    ids = {c.id for c in lin}
    assert len(lin) == len(ME.PRESETS) + 1 + 3
    assert all(c.parent is None or c.parent in ids for c in lin)
    assert sum(c.winner for c in lin) == 2 and res.best.winner
    assert sum(c.finalist for c in lin if c.round == 1) == 2
    assert {c.operator for c in lin} == {"seed", "incumbent", "diagnose_and_mutate"}
    with pytest.raises(ValueError, match="non-empty"):
        ME.evolve(lambda p, ts: None, lambda c: None, ME.PRESETS, [([], [])])


def test_diagnose_and_mutate_follows_the_diagnosis():
    out = ME.diagnose_and_mutate(ME.PRESETS["base"], {"repeat_fail": 0.9}, 3, seed=0)
    assert [g for g, _ in out][0].encode == "lesson"
    assert len({g for g, _ in out}) == 3 and ME.PRESETS["base"] not in [g for g, _ in out]


GOOD = '''
class Provider:
    def __init__(self):
        self.notes = []
    def take_in(self, trajectory):
        self.notes.append(trajectory["query"] + " -> " + trajectory["answer"])
    def provide(self, query):
        return "\\n".join(self.notes[-2:])
'''


def test_sandbox_gates_run_and_report():
    p = ME.check_provider_code(GOOD)
    p.take_in(TR[0])
    assert "dune" in p.provide("Velmora?")
    with pytest.raises(ME.GateError, match="gate 'syntax'"):
        ME.check_provider_code("def broken(:")
    with pytest.raises(ME.GateError, match="no top-level `class Provider`"):
        ME.check_provider_code("x = 1")
    with pytest.raises(ME.GateError, match="gate 'smoke'"):
        ME.check_provider_code("class Provider:\n    def take_in(self, t):\n        1 / 0\n")
    with pytest.raises(ME.GateError, match="must return a str|gate 'smoke'"):
        ME.check_provider_code(GOOD.replace('return "\\n".join(self.notes[-2:])',
                                            "return 3"))


def test_llm_path_on_the_tiny_model_over_loopback(tiny_local_chat):
    pytest.importorskip("openai", reason="pip install openai")
    pytest.importorskip("uvicorn", reason="pip install uvicorn")
    from jaxsci.common.lm.chat import OpenAIChat
    from jaxsci.common.lm.serve import Server

    tiny = tiny_local_chat(1024)
    with Server(tiny, port=0, log_level="warning") as server:
        chat = OpenAIChat(server.url, "tiny")
        parent = ME.Candidate("seed:base", 0, None, "seed", "preset", ME.PRESETS["base"])
        cands = ME.llm_proposer(chat, max_tokens=24)(parent, {"accuracy": 0.3}, 2, 1, 0)
    # a random model writes no valid provider: the gates ran and say which one failed
    assert len(cands) == 2 and all(c.operator == "llm" and c.code is not None for c in cands)
    assert all(c.gate in ("syntax", "smoke") and "gate" in c.rationale for c in cands)
