"""SQLiteEnv: reset from the template through the backup API, snapshots, read-only
verifiers (``others`` on (initial, initial)), the null-action gate, tools through the Tool
registry and through run_agent, and clear errors (seed SQL, unknown tool, malformed
arguments, empty task set)."""

import sqlite3

import pytest

from jaxsci.common import agents as A
from jaxsci.common.lm.tools import Tool, ToolCallError

SCHEMA = """
CREATE TABLE author (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE book (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
                   author_id INTEGER NOT NULL REFERENCES author(id), loaned INTEGER DEFAULT 0);
"""
SEED = """
INSERT INTO author (id, name) VALUES (1, 'Herbert'), (2, 'Austen');
INSERT INTO book (title, author_id) VALUES ('Dune', 1), ('Emma', 2);
"""


def loan(db, title):
    cur = db.execute("UPDATE book SET loaned = 1 WHERE title = ?", (title,))
    return {"updated": cur.rowcount}


def find(db, author):
    return [r[0] for r in db.execute("SELECT b.title FROM book b JOIN author a ON "
                                     "a.id = b.author_id WHERE a.name = ?", (author,))]


TOOLS = [Tool("loan_book", "Mark a book as loaned",
              {"type": "object", "properties": {"title": {"type": "string"}},
               "required": ["title"], "additionalProperties": False}, fn=loan),
         Tool("find_books", "Titles by an author",
              {"type": "object", "properties": {"author": {"type": "string"}},
               "required": ["author"]}, fn=find)]


def loaned(title):
    def verify(initial, final, answer):
        q = "SELECT loaned FROM book WHERE title = ?"
        return initial.execute(q, (title,)).fetchone()[0] == 0 and \
            final.execute(q, (title,)).fetchone()[0] == 1
    return verify


TASKS = [A.Task("loan-dune", "Loan Dune", loaned("Dune")),
         A.Task("austen", "Which book did Austen write?", lambda i, f, a: a == "Emma")]


@pytest.fixture(scope="module")
def env():
    return A.SQLiteEnv(SCHEMA, SEED, TOOLS, TASKS)


def test_episodes_reset_from_the_template(env):
    env.reset("loan-dune")
    assert env.call("loan_book", {"title": "Dune"}) == {"updated": 1}
    assert env.finish() == "complete"
    env.reset("loan-dune")  # a fresh copy: the loan is gone
    assert env.db.execute("SELECT SUM(loaned) FROM book").fetchone()[0] == 0
    assert env.finish() == "others"
    env.reset("austen")
    assert env.call("find_books", '{"author": "Austen"}') == ["Emma"]
    assert env.finish("Emma") == "complete" and env.finish("Dune") == "others"
    assert env.template.execute("SELECT SUM(loaned) FROM book").fetchone()[0] == 0


def test_verifiers_read_only_and_null_action(env):
    init = A.snapshot(env.template)
    for t in TASKS:
        assert A.SQLiteEnv.verify(t, init, init, None) == "others"
    assert env.null_action_passes() == []
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        init.execute("DELETE FROM book")

    def sneaky(initial, final, answer):
        final.execute("UPDATE book SET loaned = 1")
        return True

    cheat = A.SQLiteEnv(SCHEMA, SEED, TOOLS, [A.Task("sneaky", "x", sneaky)])
    cheat.reset("sneaky")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        cheat.finish()
    trivial = A.SQLiteEnv(SCHEMA, SEED, TOOLS, [*TASKS, A.Task("trivial", "y",
                                                               lambda i, f, a: True)])
    assert trivial.null_action_passes() == ["trivial"]


def test_tools_in_the_agent_loop(env):
    class Picker:  # chooses by score; a stand-in model that prefers the first option
        model_id = "picker"

        def chat(self, messages, **kw):
            raise AssertionError("not used")

        def score(self, messages, options):
            return [-float(i) for i in range(len(options))]

    def propose(messages, tools):
        if tools and not any(m["role"] == "tool" for m in messages):
            return [A.Option("loan Dune", "loan_book", {"title": "Dune"})]
        return [A.Option("Done.", answer="done")]

    env.reset("loan-dune")
    r = A.run_agent(Picker(), [{"role": "user", "content": "Loan Dune"}], env.tools,
                    A.RunPolicy(3), actor=A.ScoreActor(propose))
    assert (r.status, r.tool_calls) == ("answer", 1) and env.finish(r.answer) == "complete"


def test_errors(env):
    with pytest.raises(A.SeedSQLError, match=r"seed_sql failed at statement 2 "
                                             r"\(\"INSERT INTO book .*IntegrityError"):
        A.SQLiteEnv(SCHEMA, "INSERT INTO author VALUES (1, 'A');\n"
                    "INSERT INTO book (title, author_id) VALUES ('X', 99);", TOOLS, TASKS)
    with pytest.raises(A.SeedSQLError, match=r"schema_sql failed at statement 1.*syntax"):
        A.SQLiteEnv("CREATE TABL x (a);", "", TOOLS, TASKS)
    with pytest.raises(ValueError, match="tasks must hold at least one Task, got none"):
        A.SQLiteEnv(SCHEMA, SEED, TOOLS, [])
    env.reset("loan-dune")
    with pytest.raises(ToolCallError, match=r"unknown tool 'delete_all'; the environment's "
                                            r"tools are \['loan_book', 'find_books'\]"):
        env.call("delete_all", {})
    with pytest.raises(ToolCallError, match="arguments of 'loan_book' are not valid JSON"):
        env.call("loan_book", '{"title": ')
    with pytest.raises(ToolCallError, match=r"missing required property 'title'"):
        env.call("loan_book", {"name": "Dune"})
    with pytest.raises(ToolCallError, match=r"must be a JSON object, got list"):
        env.call("loan_book", ["Dune"])
    with pytest.raises(KeyError, match="unknown task 'nope'"):
        env.reset("nope")
