"""Shared fixtures of the agent papers' tests: the tiny random-weight LLaMA behind the
chat interface (``tests/common/test_chat.py``'s ``tiny_engine``, a file, not an
importable module), for loopback and option-scoring tests."""

import importlib.util
from pathlib import Path

import pytest


def _test_chat_module():
    path = Path(__file__).parents[1] / "common" / "test_chat.py"
    spec = importlib.util.spec_from_file_location("_jaxsci_agents_test_chat", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_local_chat():
    """``tiny_local_chat(max_len)``: a ``LocalChat`` over a fresh tiny engine."""
    pytest.importorskip("tokenizers", reason="pip install tokenizers")
    from jaxsci.common.lm.chat import LocalChat

    module = _test_chat_module()

    def make(max_len: int = 512):
        return LocalChat(module.tiny_engine(max_len=max_len), model_id="tiny")

    return make
