import pytest

from jaxsci.data import instructions as I


@pytest.mark.parametrize("task", I.CHAT_TASKS)
def test_the_eval_split_is_held_out_and_fixed(task):
    train, held = I.pairs(task, "train"), I.pairs(task, "eval")
    assert not set(train) & set(held)
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert 3 * len(held) == len(train)  # a quarter held out
    assert I.pairs(task, "eval") == held  # the same split every time
    assert all(p.endswith((".", "?")) and "{}" not in p for p in train + held)


def test_instructions_cycle_through_the_split():
    base = I.pairs("howto", "train")
    got = I.instructions("howto", "train", 2 * len(base) + 3, seed=1)
    assert got[: len(base)] == base
    assert sorted(got[len(base): 2 * len(base)]) == sorted(base)  # a shuffled cycle
    assert got == I.instructions("howto", "train", 2 * len(base) + 3, seed=1)
    assert set(got) == set(base)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="task must be one of"):
        I.pairs("poems", "train")
    with pytest.raises(ValueError, match="split must be one of"):
        I.pairs("facts", "test")
    with pytest.raises(ValueError, match="n must be >= 1"):
        I.instructions("facts", "eval", 0)
