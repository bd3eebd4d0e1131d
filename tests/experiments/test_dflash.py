import dataclasses

import numpy as np
import pytest

from jaxsci.common.lm.model import TransformerConfig
from jaxsci.experiments import dflash as exp
from jaxsci.llm.dflash import DrafterConfig


@pytest.fixture(scope="module")
def smoke(smoke_run):
    out, m, _ = smoke_run("dflash")
    return out, m


def test_smoke_grids_and_losslessness(smoke):
    out, m = smoke
    cfg = exp.CONFIGS["smoke"]
    grid = (len(cfg.tasks), len(cfg.block_sizes))
    for key in ("mean_acceptance_length_block", "mean_acceptance_length_ar",
                "tokens_per_second_block", "speedup_block", "target_forward_passes_ar"):
        assert np.asarray(m[key]).shape == grid, key
    # Losslessness does not depend on how well the (barely trained) drafters draft.
    assert m["lossless_greedy"] == 1.0
    # tau is between 1 (nothing accepted) and B (everything); the target alone makes one
    # pass per token, speculative decoding at most one.
    tau = np.asarray(m["mean_acceptance_length_block"])
    assert np.all((tau >= 1.0) & (tau <= np.asarray(cfg.block_sizes)))
    assert np.allclose(m["target_forward_passes_target"], 1.0)
    assert np.all(np.asarray(m["target_forward_passes_block"]) <= 1.0)
    assert "Sampling mode" in (out / "report.md").read_text()


def test_config_validation():
    with pytest.raises(ValueError, match="block_sizes\\[i\\] must be <= 8"):
        exp.DFlashConfig(block_sizes=(4, 16))  # beyond the training block
    with pytest.raises(ValueError, match="draft_temperatures\\[i\\] must be >= 0"):
        exp.DFlashConfig(draft_temperatures=(-1.0,))
    with pytest.raises(ValueError, match="sampling_task must be one of"):
        exp.DFlashConfig(tasks=("grammar",), sampling_task="recall")
    with pytest.raises(ValueError, match="prompt_buffer must be <= 64"):
        exp.DFlashConfig(prompt_buffer=100)
    with pytest.raises(ValueError, match="target_layers\\[i\\] must be <= 3"):
        exp.DFlashConfig(drafter=DrafterConfig(target_layers=(1, 5)))
    with pytest.raises(TypeError, match="target must be a TransformerConfig"):
        exp.DFlashConfig(target={"d_model": 64})


def test_widths_have_one_owner():
    # The drafters' widths are the target's: the experiment nests the library configs.
    names = {f.name for f in dataclasses.fields(exp.DFlashConfig)}
    assert not names & {"d_model", "n_heads", "d_ff", "max_len", "n_layers",
                        "drafter_layers", "train_block_size"}
    assert not {"d_model", "n_heads", "max_len"} & {f.name for f in
                                                     dataclasses.fields(DrafterConfig)}
    cfg = exp.EXPERIMENT.config("quick", ["target.d_model=32", "drafter.n_layers=2"])
    assert cfg.target == dataclasses.replace(exp.CONFIGS["quick"].target, d_model=32)
    assert cfg.drafter.n_layers == 2
    assert isinstance(cfg.target, TransformerConfig)


def test_resumed_stage_is_reported(tmp_path, capsys):
    notes = []
    exp._say_resumed("the target LM", tmp_path, 300, notes)
    assert notes == []
    (tmp_path / "75").mkdir()
    (tmp_path / "150").mkdir()
    exp._say_resumed("the target LM", tmp_path, 300, notes)
    assert notes == ["dflash: resumed the target LM from step 150 of 300"]
    assert "resumed the target LM from step 150" in capsys.readouterr().err
